/* attn.h: the attnc runtime's public API. Plain C11, no LLVM, no libyaml.
 * It owns block configurations, weights (safetensors with Hugging Face
 * names), the reference engine that defines attnc's semantics, and status
 * codes. Every function is safe to call from several threads on distinct
 * objects; one object is never used from two threads at once. */
#ifndef ATTN_H
#define ATTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(ATTN_BUILD) || defined(ATTNC_BUILD)
#define ATTN_API __attribute__((visibility("default")))
#else
#define ATTN_API
#endif

/* Every status but ATTN_OK is an error; nothing was changed unless the
 * function's comment says otherwise. */
typedef enum attn_status {
    ATTN_OK = 0,
    ATTN_E_INVALID,  /* bad argument, bad config or unknown sequence */
    ATTN_E_CAPACITY, /* cache full: nothing was appended */
    ATTN_E_NOMEM,
    ATTN_E_IO,     /* a file could not be opened, read or written */
    ATTN_E_FORMAT, /* malformed or mismatched weights or tensor file */
    ATTN_E_CPU,    /* compiled kernels need CPU features this machine lacks */
    ATTN_STATUS_COUNT
} attn_status;

/* A short static name of s ("ATTN_E_FORMAT: ..."); never NULL. */
ATTN_API const char *attn_status_str(attn_status s);

/* A message written by functions that can fail for a reason worth telling
 * (which tensor, which shape). Callers may pass NULL when they need only
 * the status. */
#define ATTN_MSG_MAX 512
typedef struct attn_msg {
    char text[ATTN_MSG_MAX];
} attn_msg;

typedef enum attn_dtype {
    ATTN_DTYPE_F32,
    ATTN_DTYPE_F16,
    ATTN_DTYPE_BF16,
    /* ggml's block formats (weights only): blocks of 32 consecutive values
     * of a row, each with an f16 scale d. Q8_0: 32 int8 q, w = d * q (34
     * bytes). Q4_0: 16 bytes, value j < 16 in the low nibble of byte j and
     * value 16 + j in its high nibble, w = d * (q - 8) (18 bytes). */
    ATTN_DTYPE_Q8_0,
    ATTN_DTYPE_Q4_0,
    ATTN_DTYPE_COUNT
} attn_dtype;

/* "f32", "f16", "bf16", "q8_0", "q4_0"; NULL for an out-of-range value. */
ATTN_API const char *attn_dtype_name(attn_dtype t);
/* Bytes of one element; 0 for the block formats (see attn_dtype_bytes). */
ATTN_API size_t attn_dtype_size(attn_dtype t);
/* Values per block: 32 for the block formats, else 1. */
ATTN_API int64_t attn_dtype_block(attn_dtype t);
/* Bytes of n values (n a multiple of attn_dtype_block). */
ATTN_API size_t attn_dtype_bytes(attn_dtype t, int64_t n);

typedef enum attn_rope_style {
    ATTN_ROPE_NONE,        /* no positional rotation */
    ATTN_ROPE_HALF,        /* pairs (i, i + rotary_dim/2): HF / NeoX */
    ATTN_ROPE_INTERLEAVED, /* pairs (2i, 2i + 1): GPT-J / Meta */
    ATTN_ROPE_COUNT
} attn_rope_style;

typedef enum attn_rope_scaling {
    ATTN_SCALING_NONE,
    ATTN_SCALING_LINEAR, /* inv_freq / factor */
    ATTN_SCALING_LLAMA3, /* Llama 3.1 wavelength-dependent scaling */
    ATTN_SCALING_YARN,   /* YaRN: ramp between interpolated and extrapolated
                            frequencies, cos and sin times an attention factor */
    ATTN_SCALING_COUNT
} attn_rope_scaling;

/* QK-norm: RMS normalization of q and k after their projection. */
typedef enum attn_qk_norm {
    ATTN_QK_NORM_NONE,
    ATTN_QK_NORM_HEAD, /* each head's head_dim vector (Qwen3, Gemma 3, Llama 4) */
    ATTN_QK_NORM_ALL,  /* the whole projected q row and k row (OLMo 2) */
    ATTN_QK_NORM_COUNT
} attn_qk_norm;

/* How a checkpoint stores the projections (weights.layout): the tensor
 * names and row orders of the Hugging Face modeling file of each family.
 * The loader maps every layout onto the same q, k, v, o at load. */
typedef enum attn_layout {
    ATTN_LAYOUT_LLAMA,  /* q_proj, k_proj, v_proj, o_proj (Llama, Mistral, Qwen, Gemma, ...) */
    ATTN_LAYOUT_GPTJ,   /* q_proj, k_proj, v_proj, out_proj */
    ATTN_LAYOUT_NEOX,   /* query_key_value, per head [q; k; v] rows; dense */
    ATTN_LAYOUT_FALCON, /* query_key_value, per K/V group [its q heads; k; v]; dense */
    ATTN_LAYOUT_PHI3,   /* qkv_proj = [q; k; v]; o_proj */
    ATTN_LAYOUT_BLOOM,  /* query_key_value, per head [q; k; v] rows; dense */
    ATTN_LAYOUT_COUNT
} attn_layout;

/* "llama", "gptj", ...; NULL for an out-of-range value. */
ATTN_API const char *attn_layout_name(attn_layout l);
/* Whether layout l stores q, k and v in one tensor (neox, falcon, phi3,
 * bloom): then they share one input and each has a bias or none does. */
ATTN_API bool attn_layout_fuses_qkv(attn_layout l);

/* Limits checked by the spec validator and by attn_config_check; sizes
 * beyond them are rejected up front rather than failing deep inside. */
#define ATTN_NAME_MAX 64        /* bytes of a block name, NUL included */
#define ATTN_EXPR_MAX_INPUTS 16 /* inputs a spec declares (attn_expr.h) */
/* bytes of score_mod's or mask_mod's canonical text, NUL included */
#define ATTN_EXPR_TEXT_MAX 512
#define ATTN_MAX_HEADS 1024
#define ATTN_MAX_HEAD_DIM 1024
#define ATTN_MAX_D_MODEL 65536
#define ATTN_MAX_QDIM 131072               /* heads * head_dim */
#define ATTN_MAX_TOKENS (INT64_C(1) << 22) /* kv_cache.max_tokens */
#define ATTN_MAX_BLOCK_TOKENS 4096
#define ATTN_MAX_WINDOW ATTN_MAX_TOKENS
#define ATTN_TREE_MAX 64 /* tokens of one attn_forward_tree */

/* The kinds of attn_config's fields (attn_config.def). */
typedef char attn_config_name[ATTN_NAME_MAX];
typedef char attn_config_expr[ATTN_EXPR_TEXT_MAX];
#define ATTN_CTYPE_NAME attn_config_name
#define ATTN_CTYPE_EXPR attn_config_expr
#define ATTN_CTYPE_I64 int64_t
#define ATTN_CTYPE_I32 int32_t
#define ATTN_CTYPE_F64 double
#define ATTN_CTYPE_BOOL bool
#define ATTN_CTYPE_ROPE_STYLE attn_rope_style
#define ATTN_CTYPE_SCALING attn_rope_scaling
#define ATTN_CTYPE_QK_NORM attn_qk_norm
#define ATTN_CTYPE_LAYOUT attn_layout
#define ATTN_CTYPE_DTYPE attn_dtype

/* The constants of one attention block: the validated, normalized spec.
 * Plain data; the compiler fills it from YAML, C users may fill it by hand
 * (then call attn_config_check). Its fields, their spec keys and what
 * each means are in attn_config.def. */
typedef struct attn_config {
#define ATTN_FIELD(kind, field, key) ATTN_CTYPE_##kind field;
#define ATTN_PLAIN(kind, field, key, token, def, lo, hi) ATTN_CTYPE_##kind field;
#include "attn_config.def"
#undef ATTN_FIELD
#undef ATTN_PLAIN
} attn_config;

typedef enum attn_field_kind {
    ATTN_KIND_NAME,
    ATTN_KIND_I64,
    ATTN_KIND_I32,
    ATTN_KIND_F64,
    ATTN_KIND_BOOL,
    ATTN_KIND_ROPE_STYLE,
    ATTN_KIND_SCALING,
    ATTN_KIND_QK_NORM,
    ATTN_KIND_LAYOUT,
    ATTN_KIND_DTYPE,
    ATTN_KIND_EXPR, /* char[ATTN_EXPR_TEXT_MAX]: an expression's canonical text, "" for none */
    ATTN_KIND_COUNT
} attn_field_kind;

/* One field of attn_config, as attn_config.def lists it. */
typedef struct attn_config_field {
    const char *name;     /* the C field ("sliding_window") */
    const char *key;      /* its spec key's path ("kv_cache.max_tokens"); "" for none */
    attn_field_kind kind; /* the enums are ints (4 bytes) */
    size_t offset, size;  /* in attn_config */
    bool plain;           /* a plain top-level key with the default and range below */
    double def, lo, hi;
} attn_config_field;

/* Every field of attn_config in layout order; *n gets their count. */
ATTN_API const attn_config_field *attn_config_fields(size_t *n);
/* The first field (its C name) in which a and b differ, NULL if none:
 * names compared as strings, expressions by their canonical text
 * ("q-kv<4" equals "((q - kv) < 4)"), numbers as values (0.0 equals
 * -0.0). */
ATTN_API const char *attn_config_differs(const attn_config *a, const attn_config *b);

/* The dims of one head's value and attention output: v_head_dim with
 * MLA, else head_dim. */
ATTN_API int64_t attn_v_head_dim(const attn_config *c);
/* Values one token keeps in the K (which 0) or V (1) half of a cache:
 * kv_groups * head_dim; with MLA kv_lora_rank + qk_rope_head_dim in K
 * (the latent) and none in V. */
ATTN_API int64_t attn_cache_columns(const attn_config *c, int which);
/* Why attn_forward_tree cannot run blocks of c (a static string), or NULL
 * when it can: it needs a causal self-attention block whose mask and
 * scores depend only on which keys a token sees, not on their distance
 * (no sliding_window, chunked_attention or alibi). */
ATTN_API const char *attn_tree_unsupported(const attn_config *c);

/* Checks every invariant and limit of c. ATTN_E_INVALID with the first
 * broken rule in msg. */
ATTN_API attn_status attn_config_check(const attn_config *c, attn_msg *msg);

/* The rules of attn_config_check that c breaks, each reported to fn (when
 * not NULL) with the spec key of the field it is about ("sliding_window",
 * "kv_cache.dtype"; NULL where no one key is) and the message
 * attn_config_check would give; the count, 0 for a valid config. Rules
 * come in groups that rely on their earlier rules, so only a group's first
 * broken rule is reported, except that every key a feature does not go
 * with is ("sinks" and "alibi" with mla); broken names, heads or dims end
 * the walk. The spec checker reports these at the key's line and column. */
typedef void (*attn_config_problem_fn)(const char *key, const char *text, void *user);
ATTN_API int attn_config_problems(const attn_config *c, attn_config_problem_fn fn, void *user);

/* Shard index of count of the whole block full (tensor parallelism over
 * heads): shard index holds the K/V groups [index * G / count, (index +
 * 1) * G / count) of full's G and their query heads; its weights are
 * full's q, k and v rows of those heads and o_proj's columns of them
 * (the o bias only in shard 0; attn_weights_shard, attn_block_load).
 * count 1 gives full itself. ATTN_E_INVALID with the reason in msg when
 * count < 1, index is not in 0..count-1, G is not a multiple of count,
 * full is a shard already, or the shard breaks a rule of
 * attn_config_check (a qk_norm over the whole projection needs every
 * head; a block format needs the shard's heads * head_dim to be a
 * multiple of 32). */
ATTN_API attn_status attn_config_shard(const attn_config *full, int64_t index, int64_t count,
                                       attn_config *out, attn_msg *msg);

/* RoPE inverse frequencies inv_freq[i], i < rotary_dim/2, after linear or
 * llama3 scaling: the definition the reference and compiled kernels share.
 * Does nothing for ATTN_ROPE_NONE. */
ATTN_API void attn_rope_inv_freq(const attn_config *c, double *inv_freq);
/* What cos and sin are multiplied by: YaRN's attention factor, else 1. */
ATTN_API double attn_rope_cos_factor(const attn_config *c);
/* YaRN's default attention factor of c's factor, mscale and
 * mscale_all_dim (Hugging Face _compute_yarn_parameters). */
ATTN_API double attn_yarn_default_attention_factor(const attn_config *c);
/* What DeepseekV3Attention multiplies the softmax scale by: with YaRN
 * and a nonzero mscale_all_dim, yarn_get_mscale(factor,
 * mscale_all_dim)^2; else 1. The spec's scale: auto includes it for mla. */
ATTN_API double attn_mla_softmax_mscale(const attn_config *c);
/* ALiBi slopes slope[h], h < heads, as BLOOM defines them (of a shard:
 * its heads' slopes among all shard_count * heads). */
ATTN_API void attn_alibi_slopes(const attn_config *c, double *slope);
/* The first key position a query at position pos sees: 0 without a
 * window or chunks; pos - window + 1 with a window; pos rounded down to
 * a multiple of chunked_attention with chunks (the larger of the two
 * when both are set). Never decreases as pos grows. */
ATTN_API int64_t attn_first_key(const attn_config *c, int64_t pos);
/* Query temperature at position pos: log(floor((pos + 1) / floor_scale)
 * + 1) * attn_scale + 1, or 1 when off. */
ATTN_API double attn_query_temperature(const attn_config *c, int64_t pos);

/* ---- safetensors ------------------------------------------------------ */

#define ATTN_ST_MAX_DIMS 8

/* One tensor of an open file. All pointers borrow from the attn_st. */
typedef struct attn_st_info {
    const char *name;
    const char *dtype; /* as written in the header: "F32", "BF16", "I64", ... */
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    size_t nbytes;
    const void *data; /* inside the file's mapping */
} attn_st_info;

typedef struct attn_st attn_st;

/* Opens and fully validates a safetensors file (header length, JSON,
 * dtypes, shapes, offsets in range and not overlapping). The file stays
 * mapped until attn_st_close. ATTN_E_IO or ATTN_E_FORMAT with the reason;
 * *out is set only on success. */
ATTN_API attn_status attn_st_open(const char *path, attn_st **out, attn_msg *msg);
/* The same over a file already in memory (borrowed: it must outlive the
 * attn_st); name is used in messages. */
ATTN_API attn_status attn_st_open_memory(const void *data, size_t size, const char *name,
                                         attn_st **out, attn_msg *msg);
ATTN_API void attn_st_close(attn_st *f);
ATTN_API int attn_st_count(const attn_st *f);
ATTN_API const attn_st_info *attn_st_get(const attn_st *f, int i);
/* NULL if the file has no tensor of that name. */
ATTN_API const attn_st_info *attn_st_find(const attn_st *f, const char *name);

/* The dtype of tensor t of f: F32, F16, BF16, or a block format (the
 * __metadata__ entry ATTN_ST_FORMAT_KEY + name over U8 bytes, below);
 * ATTN_DTYPE_COUNT for any other. shape (ATTN_ST_MAX_DIMS entries, may be
 * NULL): t's shape in values (a block format's last dimension is stored
 * in bytes). */
ATTN_API attn_dtype attn_st_format(const attn_st *f, const attn_st_info *t, int64_t *shape);

/* Reads tensor name, which must have exactly shape[0..ndim) (in values),
 * into dst (numel floats), converting F32, F16, BF16, Q8_0 or Q4_0 to f32
 * (exactly but for F32 NaN payloads). ATTN_E_FORMAT names
 * the tensor for a missing tensor, a shape mismatch (both shapes) or an
 * unsupported dtype; dst is untouched then. */
ATTN_API attn_status attn_st_read_f32(const attn_st *f, const char *name, int ndim,
                                      const int64_t *shape, float *dst, attn_msg *msg);

/* Reads a 2-D tensor name [rows >= 1, cols] with any number of rows into a
 * malloc'd buffer (*out, caller frees); errors as attn_st_read_f32. */
ATTN_API attn_status attn_st_read_rows_f32(const attn_st *f, const char *name, int64_t cols,
                                           float **out, int64_t *rows, attn_msg *msg);

/* The value of key in the header's __metadata__; NULL if absent or not a
 * string. */
ATTN_API const char *attn_st_metadata(const attn_st *f, const char *key);

/* Tensors of a block format (ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q4_0) are stored
 * as dtype U8, their last dimension counted in bytes (34 or 18 per 32
 * values), with __metadata__ entry ATTN_ST_FORMAT_KEY + name holding
 * "q8_0" or "q4_0"; the blocks are ggml's, bit for bit. */
#define ATTN_ST_FORMAT_KEY "attnc.format."

/* A tensor to write: f32 data, stored as dtype (rounded to nearest even;
 * the block formats quantize rows, the last dimension, with ggml's
 * reference quantizers, and refuse NaN and infinity). */
typedef struct attn_st_tensor {
    const char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    const float *data;
} attn_st_tensor;

/* An I32 tensor to write (a spec's token and sequence inputs). */
typedef struct attn_st_ints {
    const char *name;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    const int32_t *data;
} attn_st_ints;

/* Writes n tensors to path through a temporary file renamed on success, so
 * path is either the complete new file or untouched. */
ATTN_API attn_status attn_st_write(const char *path, const attn_st_tensor *t, int n, attn_msg *msg);
/* The same, with the I32 tensors ti[0..ni) after t's. */
ATTN_API attn_status attn_st_write_ints(const char *path, const attn_st_tensor *t, int n,
                                        const attn_st_ints *ti, int ni, attn_msg *msg);

/* ---- GGUF ---------------------------------------------------------------- */

/* GGUF metadata value types (the format's gguf_type). */
enum {
    ATTN_GGUF_UINT8,
    ATTN_GGUF_INT8,
    ATTN_GGUF_UINT16,
    ATTN_GGUF_INT16,
    ATTN_GGUF_UINT32,
    ATTN_GGUF_INT32,
    ATTN_GGUF_FLOAT32,
    ATTN_GGUF_BOOL,
    ATTN_GGUF_STRING,
    ATTN_GGUF_ARRAY,
    ATTN_GGUF_UINT64,
    ATTN_GGUF_INT64,
    ATTN_GGUF_FLOAT64
};

/* One tensor of an open GGUF file; pointers borrow from the attn_gguf. */
typedef struct attn_gguf_tensor {
    const char *name;
    uint32_t type;         /* ggml type id: 0 F32, 1 F16, 8 Q8_0, 30 BF16, ... */
    const char *type_name; /* "F32", "Q8_0", ... */
    int ndim;
    int64_t ne[4];   /* ne[0] varies fastest: a Linear weight is [in, out] */
    uint64_t offset; /* from the start of the data section */
    size_t nbytes;
    const void *data; /* inside the file's mapping */
} attn_gguf_tensor;

typedef struct attn_gguf attn_gguf;

/* Opens and fully validates a GGUF file (version 2 or 3, little-endian):
 * every string length, count, type, shape, offset (aligned to
 * general.alignment, inside the file, not overlapping) is checked before
 * use. ATTN_E_IO or ATTN_E_FORMAT with the reason. */
ATTN_API attn_status attn_gguf_open(const char *path, attn_gguf **out, attn_msg *msg);
/* The same over bytes in memory (borrowed: they must outlive it). */
ATTN_API attn_status attn_gguf_open_memory(const void *data, size_t size, const char *name,
                                           attn_gguf **out, attn_msg *msg);
ATTN_API void attn_gguf_close(attn_gguf *g);
ATTN_API int attn_gguf_count(const attn_gguf *g);
ATTN_API const attn_gguf_tensor *attn_gguf_get(const attn_gguf *g, int i);
ATTN_API const attn_gguf_tensor *attn_gguf_find(const attn_gguf *g, const char *name);
/* ggml's name of a type id ("Q4_K"); NULL if unknown. */
ATTN_API const char *attn_gguf_type_name(uint32_t ggml_type);
/* The dtype a ggml tensor type loads as (F32, F16, BF16, Q8_0, Q4_0);
 * ATTN_DTYPE_COUNT for any other. */
ATTN_API attn_dtype attn_gguf_type_dtype(uint32_t ggml_type);
/* Metadata: the number of entries, the key of entry i, the type of key
 * (-1 if absent). The getters return false when key is absent or not of a
 * fitting type; numbers convert between integer types (floats only to
 * floats); for an array of numbers, element `index` is read (per-layer
 * values), for a scalar index is ignored. */
ATTN_API int attn_gguf_kv_count(const attn_gguf *g);
ATTN_API const char *attn_gguf_kv_key(const attn_gguf *g, int i);
ATTN_API int attn_gguf_kv_type(const attn_gguf *g, const char *key);
ATTN_API bool attn_gguf_get_int(const attn_gguf *g, const char *key, int64_t index, int64_t *out);
ATTN_API bool attn_gguf_get_float(const attn_gguf *g, const char *key, int64_t index, double *out);
ATTN_API bool attn_gguf_get_bool(const attn_gguf *g, const char *key, bool *out);
/* A string value: *s points into the file, *len bytes, not NUL-terminated. */
ATTN_API bool attn_gguf_get_str(const attn_gguf *g, const char *key, const char **s, size_t *len);
/* Elements of an array value; -1 if key is absent or not an array. */
ATTN_API int64_t attn_gguf_array_len(const attn_gguf *g, const char *key);

/* ---- weights ------------------------------------------------------------ */

/* The weights of one block, f32 in Hugging Face Linear layout W[out, in].
 * Plain data; pointers owned by the struct and freed by attn_weights_free.
 * Biases are NULL when the spec has none. */
typedef struct attn_weights {
    attn_config cfg;
    float *wq;              /* [heads*head_dim, d_model] */
    float *wk;              /* [kv_groups*head_dim, d_model] */
    float *wv;              /* [kv_groups*head_dim, d_model] */
    float *wo;              /* [d_model, heads*head_dim] */
    float *bq, *bk, *bv;    /* [heads*head_dim], [kv*hd], [kv*hd] if qkv_bias */
    float *bo;              /* [d_model] if o_bias */
    float *q_norm, *k_norm; /* [head_dim] each (qk_norm scope head) or [heads*head_dim],
                               [kv_groups*head_dim] (scope all), if qk_norm with weight */
    float *sinks;           /* [heads] if sinks */
    /* MLA (attn_config.mla_kv_lora_rank > 0): wq is q_proj when
     * q_lora_rank is 0 (else NULL); wo is [d_model, heads * v_head_dim];
     * wk, wv, q/k/v biases and norms are NULL. */
    float *wq_a;      /* q_a_proj [q_lora_rank, d_model] if q_lora_rank */
    float *q_a_norm;  /* q_a_layernorm [q_lora_rank] if q_lora_rank */
    float *wq_b;      /* q_b_proj [heads*head_dim, q_lora_rank] if q_lora_rank */
    float *wkv_a;     /* kv_a_proj_with_mqa [kv_lora_rank + qk_rope_head_dim, d_model] */
    float *kv_a_norm; /* kv_a_layernorm [kv_lora_rank] */
    float *wkv_b;     /* kv_b_proj [heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank] */
    /* the expressions' weight inputs (attn_inputs, per: weight) by input
     * index, as declared (whole in a shard); NULL for the others */
    float *input[ATTN_EXPR_MAX_INPUTS];
} attn_weights;

/* The name of kernel-table weight id (attn_weight_id, attn_kernels.h) in
 * a checkpoint of layout llama ("q_proj.weight", ...; MLA's
 * DeepseekV3Attention names), NULL for none; the id of such a name, -1
 * for none. Other layouts' names: docs/checkpoints.md. */
ATTN_API const char *attn_weight_name(int id);
ATTN_API int attn_weight_by_name(const char *name);

/* Zero-initialized weights for cfg (checked with attn_config_check). */
ATTN_API attn_status attn_weights_new(const attn_config *cfg, attn_weights **out, attn_msg *msg);
/* Deterministic random weights: uniform with variance 1/fan_in, so scores
 * stay O(1); biases uniform in [-0.1, 0.1]; rounded to cfg.dtype, so they
 * are exactly representable in the dtype kernels keep them in. */
ATTN_API attn_status attn_weights_random(const attn_config *cfg, uint64_t seed, attn_weights **out,
                                         attn_msg *msg);
/* Loads a block's weights from a checkpoint: path is a .safetensors file,
 * a model.safetensors.index.json (the shards it names, in its directory)
 * or a GGUF file. Names are those of cfg.weights_layout (llama: q_proj,
 * k_proj, v_proj, o_proj .weight and .bias as the config asks; fused
 * layouts: their q/k/v tensor, split by the family's row order), plus
 * q_norm.weight and k_norm.weight with a weighted qk_norm and sinks; in a
 * GGUF file, llama.cpp's attn_q, attn_k, attn_v (or attn_qkv), attn_output,
 * attn_q_norm, attn_k_norm, attn_sinks. Each name is preceded by prefix
 * (NULL = none; attn_layer_prefix gives a layer's). The stored values (F32,
 * F16, BF16, or Q8_0/Q4_0 matrices: GGUF's, or attnc's U8 blocks) are
 * converted to f32 and rounded to cfg.dtype (nothing changes when stored
 * in it), so the reference and the kernels, which keep weights in that
 * dtype, use the same numbers. A q8_0/q4_0 spec refuses NaN and infinity
 * in a matrix (no block holds them). Other tensors are ignored.
 * A missing tensor's message suggests the prefix under which it exists.
 * With cfg a shard (attn_config_shard), the checkpoint is the whole
 * block's and each tensor's slice for the shard is kept. */
ATTN_API attn_status attn_weights_load(const attn_config *cfg, const char *path, const char *prefix,
                                       attn_weights **out, attn_msg *msg);
/* Shard index of count of the whole block's weights full: its slices of
 * q, k and v (rows), o_proj (columns), q/k/v biases and sinks, the o bias
 * in shard 0 only (zero in the others), per-head norm weights as they are;
 * out->cfg = attn_config_shard(&full->cfg, index, count). */
ATTN_API attn_status attn_weights_shard(const attn_weights *full, int64_t index, int64_t count,
                                        attn_weights **out, attn_msg *msg);
/* Checks that the checkpoint at path holds every tensor cfg needs (names,
 * shapes, a loadable dtype; shards opened) without reading their values:
 * the errors attn_weights_load would give, before any work. */
ATTN_API attn_status attn_weights_check(const attn_config *cfg, const char *path,
                                        const char *prefix, attn_msg *msg);
/* The prefix of layer N's tensors in the checkpoint at path, into buf:
 * blk.N. for a GGUF file, else the module path of the layout's Hugging
 * Face model class (llama, phi3: model.layers.N.self_attn.; gptj:
 * transformer.h.N.attn.; neox: gpt_neox.layers.N.attention.; falcon,
 * bloom: transformer.h.N.self_attention.). */
ATTN_API attn_status attn_layer_prefix(const attn_config *c, const char *path, int64_t layer,
                                       char *buf, size_t size, attn_msg *msg);
/* ATTN_E_FORMAT naming the first tensor (Hugging Face name) and element
 * holding NaN or infinity. Weights are otherwise used as they are: IEEE
 * arithmetic carries NaN and infinity through to the outputs. */
ATTN_API attn_status attn_weights_check_finite(const attn_weights *w, attn_msg *msg);
/* The same for any f32 array; what names it in the message. */
ATTN_API attn_status attn_check_finite(const float *x, size_t n, const char *what, attn_msg *msg);
/* Writes w as a checkpoint of w->cfg's layout (the names and fused row
 * orders attn_weights_load reads), stored as dtype, atomically. */
ATTN_API attn_status attn_weights_save(const attn_weights *w, const char *path, attn_dtype dtype,
                                       const char *prefix, attn_msg *msg);
ATTN_API void attn_weights_free(attn_weights *w);
/* Fills x[0..n) with uniform numbers in [-a, a) from the generator state
 * *state (splitmix64), which it advances: same seed, same numbers. */
ATTN_API void attn_random_uniform(uint64_t *state, float *x, size_t n, double a);
/* Rounds every weight to w->cfg.dtype in place (a no-op for f32); for
 * q8_0/q4_0 the four matrices' rows go through ggml's blocks (reference
 * quantizer; values a block already holds exactly stay), the rest stay. */
ATTN_API void attn_weights_round(attn_weights *w);

/* ---- reference engine ---------------------------------------------------- */

/* The reference implementation of one block over one sequence with a
 * contiguous KV cache: plain C, double accumulation, the definition of
 * attnc's semantics (README "Semantics"). Slow by design. */
typedef struct attn_ref attn_ref;

/* Borrows w, which must outlive the engine. capacity_tokens <= 0 means
 * cfg.kv_max_tokens. */
ATTN_API attn_status attn_ref_new(const attn_weights *w, int64_t capacity_tokens, attn_ref **out,
                                  attn_msg *msg);
ATTN_API void attn_ref_free(attn_ref *r);
/* Appends n_tokens tokens x [n_tokens, d_model] at positions len..len+n-1
 * and writes y [n_tokens, d_model]. ATTN_E_CAPACITY if they do not fit:
 * nothing is appended then. */
ATTN_API attn_status attn_ref_forward(attn_ref *r, int64_t n_tokens, const float *x, float *y,
                                      attn_msg *msg);
ATTN_API int64_t attn_ref_len(const attn_ref *r);
/* The expressions' input values, as attn_seq_set_input gives them to a
 * cache's sequence (the engine is one sequence); weight inputs come with
 * the weights. A read of a position never set gives 0. */
ATTN_API attn_status attn_ref_set_input(attn_ref *r, const char *name, int64_t first, int64_t n,
                                        const int32_t *values, attn_msg *m);
/* Drops the cached tokens beyond n_tokens (n_tokens <= len). */
ATTN_API attn_status attn_ref_truncate(attn_ref *r, int64_t n_tokens);
/* Cross-attention: K/V of memory [n_rows, memory_dim] (n_rows <= the
 * capacity), which every later forward attends to; only before the first
 * forward (attn_seq_set_memory's rules). */
ATTN_API attn_status attn_ref_set_memory(attn_ref *r, int64_t n_rows, const float *memory,
                                         attn_msg *m);

/* ---- blocks: compiled kernels + weights ------------------------------------ */

struct attn_kernels; /* attn_kernels.h */
typedef struct attn_block attn_block;

typedef struct attn_block_options {
    int n_threads; /* 0: $ATTN_THREADS if set, else every online CPU */
    /* The shard of the whole block this block runs (attn_config_shard):
     * 0 of 0 takes the kernel table's own; otherwise it must be the one
     * the table was compiled for (attnc compile --shard I/N), or
     * attn_block_new returns ATTN_E_INVALID. A shard's block loads the
     * whole block's weights (attn_block_load, or attn_block_set_weights
     * with the whole block's attn_weights) and keeps its own slices. */
    int64_t shard_index, shard_count;
} attn_block_options;

ATTN_API attn_block_options attn_block_options_default(void);

/* Checks what attn_block_new checks of a kernel table, with the reason in
 * msg: its ABI version, config, buffers and steps (ATTN_E_INVALID), and
 * that this CPU has every feature its code was compiled for (ATTN_E_CPU,
 * naming the missing ones). */
ATTN_API attn_status attn_kernels_check(const struct attn_kernels *k, attn_msg *msg);
/* The ATTN_CPU_* features (attn_kernels.h) of the CPU this runs on. */
ATTN_API uint32_t attn_cpu_features(void);
/* The names of the features in bits, comma separated ("avx2, fma"), into
 * buf like snprintf; returns the full length. */
ATTN_API int attn_cpu_feature_names(uint32_t bits, char *buf, size_t size);
/* Asks Linux, once for the process, for the AMX tile state code needs
 * before it runs tile instructions (attn_block_new does it for tables
 * that use AMX; other code running tiles calls this first). ATTN_E_CPU
 * with the reason in msg when the CPU has no AMX or the OS refuses. */
ATTN_API attn_status attn_cpu_request_amx(attn_msg *msg);

/* A block running the kernel table k (borrowed: it must outlive the
 * block). Checks the table as attn_kernels_check does (which gives the
 * reason of an ATTN_E_INVALID or ATTN_E_CPU). Once its weights are set, a
 * block is only read: caches on several threads may use it at once. */
ATTN_API attn_status attn_block_new(const struct attn_kernels *k, const attn_block_options *opt,
                                    attn_block **out);
ATTN_API void attn_block_free(attn_block *b);
/* The last error's message for this block ("" if none). */
ATTN_API const char *attn_block_error(const attn_block *b);
/* Copies w (whose config must equal the table's), packing what the
 * kernels ask for in the config's weight dtype: values it cannot hold are
 * rounded to nearest even (attn_weights_round does the same to w, for a
 * reference run on the same numbers). */
ATTN_API attn_status attn_block_set_weights(attn_block *b, const attn_weights *w);
/* Loads the block's weights from a checkpoint (paths, names and layouts
 * as attn_weights_load), straight into the dtype the kernels keep them in:
 * a checkpoint stored in the config's dtype is never widened to f32, and
 * each weight's pages are dropped once copied, so a load peaks well under
 * twice the checkpoint's bytes. flags: ATTN_LOAD_CHECK_FINITE refuses
 * NaN and infinity (the message names the tensor and element). The block
 * ends with the same weights as attn_block_set_weights(attn_weights_load)
 * gives, bit for bit. */
#define ATTN_LOAD_CHECK_FINITE 1u
ATTN_API attn_status attn_block_load(attn_block *b, const char *path, const char *prefix,
                                     unsigned flags);
/* attn_block_load(b, path, prefix, 0), by its older name. */
ATTN_API attn_status attn_block_load_safetensors(attn_block *b, const char *path,
                                                 const char *prefix);

/* ---- paged KV cache and sequences ------------------------------------------ */

/* A KV cache for one block's configuration: a pool of fixed-size blocks
 * (kv_cache.block_tokens tokens each) shared by any number of sequences,
 * each with its own block table. All memory is reserved by attn_cache_new;
 * forwards do not allocate once their scratch has grown to the largest
 * batch seen. One call at a time per cache; distinct caches, even of the
 * same block, may be used from distinct threads at once. */
typedef struct attn_cache attn_cache;

/* blocks_used: held by sequences; blocks_free: the others, free or
 * published and idle (attn_cache_publish), which forwards may take. */
typedef struct attn_cache_stats {
    int64_t blocks_total, blocks_used, blocks_free;
    int64_t block_tokens;
    int32_t sequences;        /* live sequences */
    int64_t published_blocks; /* under a key now, held or idle */
    int64_t evicted_blocks;   /* idle published blocks taken back for new tokens, in all */
} attn_cache_stats;

/* Room for capacity_tokens tokens over all sequences (rounded up to whole
 * blocks). b is borrowed and must outlive the cache. */
ATTN_API attn_status attn_cache_new(attn_block *b, int64_t capacity_tokens, attn_cache **out);
ATTN_API void attn_cache_free(attn_cache *c);
ATTN_API attn_cache_stats attn_cache_get_stats(const attn_cache *c);
/* Why the last call on c failed ("" if none). */
ATTN_API const char *attn_cache_error(const attn_cache *c);
/* Step timing (off by default): while on, every forward on c adds to
 * seconds[i] the wall time of kernel-table step i (index into the table's
 * steps), from its start to the barrier that ends it on all threads,
 * summed over the sequences of a batch; the sequences a batch runs side
 * by side, one thread each (attn_forward), count as one span from their
 * start to the barrier after them, added to the first step of their
 * run of sequence-phase steps. Turning it on zeroes the sums.
 * attn_cache_step_seconds gives the sums (NULL while off) and their
 * count in *n. */
ATTN_API attn_status attn_cache_profile(attn_cache *c, bool on);
ATTN_API const double *attn_cache_step_seconds(const attn_cache *c, uint32_t *n);

/* A new, empty sequence; its id goes to *seq. */
ATTN_API attn_status attn_seq_new(attn_cache *c, int32_t *seq);
/* A new sequence with src's tokens, sharing its blocks (copy on write:
 * the last partial block is copied when either side appends). */
ATTN_API attn_status attn_seq_fork(attn_cache *c, int32_t src, int32_t *dst);
/* Rolls seq back to its first n_tokens tokens (n_tokens <= length). With a
 * sliding window, ATTN_E_INVALID if keys that position needs were released. */
ATTN_API attn_status attn_seq_truncate(attn_cache *c, int32_t seq, int64_t n_tokens);
/* Releases seq and its blocks; the id becomes unknown. */
ATTN_API attn_status attn_seq_free(attn_cache *c, int32_t seq);
/* Values of the expressions' input `name` (the spec's inputs): a token
 * input's values[0..n) for positions first..first+n-1 (they may run
 * ahead of the sequence, and set again), a sequence input's one value
 * (first 0, n 1). A forward whose new tokens lack a value of an input the
 * expressions read fails, naming the sequence, input and positions; a
 * read of a position holding none (before the first set, or past the
 * sequence) gives 0. Fork copies the values, truncate drops those past
 * the new length, free releases them; a sequence from attn_seq_from_prefix
 * holds none. ATTN_E_INVALID (nothing changed) for an unknown sequence or
 * input, a weight input (it comes with the weights), or positions outside
 * 0..kv_cache.max_tokens-1; ATTN_E_NOMEM. */
ATTN_API attn_status attn_seq_set_input(attn_cache *c, int32_t seq, const char *name, int64_t first,
                                        int64_t n, const int32_t *values);
/* Tokens in seq, or -1 for an unknown or freed sequence. */
ATTN_API int64_t attn_seq_len(const attn_cache *c, int32_t seq);
/* Cross-attention (a spec with cross_attention): projects memory
 * [n_rows, memory_dim] (f32; an encoder's output) through the block's K
 * and V weights, once, into seq's blocks; every later forward of seq
 * attends to these rows (1 <= n_rows <= kv_cache.max_tokens). A forked
 * sequence shares them; truncate keeps them. Before seq's first forward
 * the memory may be set again (the old one is released); after it,
 * ATTN_E_INVALID. Also ATTN_E_INVALID for a self-attention block or an
 * unknown sequence, ATTN_E_CAPACITY if the blocks are not free; on any
 * error nothing changed. */
ATTN_API attn_status attn_seq_set_memory(attn_cache *c, int32_t seq, int64_t n_rows,
                                         const float *memory);

/* The prefix cache. Publishing registers the first n_blocks full blocks
 * of seq: keys[i] names the content of its blocks 0..i (the caller
 * chains them, e.g. a hash of the previous key and block i's token ids).
 * A key published already is left as it is. A published block keeps its
 * tokens: appending into it copies it first, and when no sequence holds
 * it, it stays (idle) until the pool runs out of free blocks; then the
 * least recently used idle blocks are taken, a chain's last block before
 * the ones it follows. ATTN_E_INVALID for a cross-attention block, an
 * unknown sequence, more keys than seq has full blocks, a block a window
 * released, or a block published under another key; then nothing
 * changed. */
ATTN_API attn_status attn_cache_publish(attn_cache *c, int32_t seq, int64_t n_blocks,
                                        const uint64_t *keys);
/* A new sequence (id in *seq) holding the longest published chain that
 * keys[0..n_keys) starts with: block i found under keys[i] as the i-th
 * block of a chain, shared copy on write as by attn_seq_fork. *n_tokens
 * gets its length, whole blocks (0 when keys[0] is unknown: an empty
 * sequence). Feed it the tokens after those, to every layer's block. */
ATTN_API attn_status attn_seq_from_prefix(attn_cache *c, int64_t n_keys, const uint64_t *keys,
                                          int32_t *seq, int64_t *n_tokens);

/* Advances n sequences at once: seqs[i] gets n_tokens[i] new tokens
 * (prefill and decode alike; 0 is allowed) at positions len(seqs[i]).. .
 * x holds the new tokens back to back [sum n_tokens, d_model]; y receives
 * the outputs in the same order. A sequence may appear once. A
 * cross-attention block's sequences attend to their memory
 * (attn_seq_set_memory) and append nothing; their tokens are not bounded
 * by kv_cache.max_tokens. Errors: ATTN_E_INVALID (bad argument, unknown
 * sequence, a position beyond kv_cache.max_tokens, a cross-attention
 * sequence without memory, new tokens for a sequence holding a draft
 * tree), ATTN_E_CAPACITY (not enough free blocks; idle published ones
 * count as free),
 * ATTN_E_NOMEM; on any error no sequence changed (attn_cache_error says
 * why). */
ATTN_API attn_status attn_forward(attn_block *b, attn_cache *c, int n, const int32_t *seqs,
                                  const int32_t *n_tokens, const float *x, float *y);

/* Speculative decoding: verifies n draft tokens (1..ATTN_TREE_MAX) whose
 * parents form a tree: parent[i] < i, or -1 for a child of seq's last
 * token. Token i attends to seq's tokens and to its ancestors in the
 * call and itself, at RoPE position len + its depth; x and y as for one
 * sequence of attn_forward. The tokens' K/V wait in seq's blocks, its
 * length unchanged, until attn_seq_accept; until then forwards, trees
 * and forks of seq are refused (truncate and free drop the draft).
 * ATTN_E_INVALID where attn_tree_unsupported says why, for a bad parent
 * or an unknown sequence; ATTN_E_CAPACITY; nothing changed then. */
ATTN_API attn_status attn_forward_tree(attn_block *b, attn_cache *c, int32_t seq, int32_t n,
                                       const int32_t *parent, const float *x, float *y);
/* Keeps the draft tokens keep[0..n_keep) (a path from a root, in order;
 * n_keep 0 keeps none) as seq's next tokens, their K/V moved to follow
 * its tokens, and drops the rest of the draft. ATTN_E_INVALID (nothing
 * changed) when seq has no draft or keep is not such a path. */
ATTN_API attn_status attn_seq_accept(attn_cache *c, int32_t seq, int32_t n_keep,
                                     const int32_t *keep);

#ifdef __cplusplus
}
#endif
#endif
