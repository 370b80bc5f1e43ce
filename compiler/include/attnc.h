/* attnc.h: the attnc compiler library's public API. A context owns every
 * diagnostic and all memory of one compilation; the spec comes out as the
 * runtime's plain attn_config (attn.h), the one type the two share.
 * Contexts are independent: distinct contexts may be used from distinct
 * threads at once; one context is never shared between threads.
 *
 * Errors, as in the runtime: every call that can fail returns a status
 * (ATTNC_OK or the first error's code) and tells why in a place the caller
 * owns, here the context's diagnostics (the runtime's is an attn_msg).
 * Calls that return nothing living in the context (compiling, the target,
 * the kernel cache, the probes) work in a context of their own and append
 * its diagnostics to ctx: one context may collect those of many such
 * calls, and NULL is fine when the status is all the caller needs.
 * Warnings (a damaged cache entry rebuilt) are diagnostics of a call that
 * succeeded. */
#ifndef ATTNC_H
#define ATTNC_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "attn_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef ATTNC_BUILD
#define ATTNC_API __attribute__((visibility("default")))
#else
#define ATTNC_API
#endif

#define ATTNC_VERSION "0.1.0"

typedef enum attnc_status {
    ATTNC_OK = 0,
    ATTNC_E_IO,    /* file not found or unreadable */
    ATTNC_E_YAML,  /* not well-formed YAML */
    ATTNC_E_SPEC,  /* well-formed, but not a valid spec */
    ATTNC_E_SHAPE, /* inconsistent shapes found after parsing */
    ATTNC_E_LLVM,  /* code generation failed */
    ATTNC_E_NOMEM,
    ATTNC_E_INVALID, /* a bad argument: NULL where a value is needed, a buffer too small */
    ATTNC_STATUS_COUNT
} attnc_status;

/* A short static description of s ("invalid argument", ...); never NULL.
 * The runtime's twin is attn_status_str. */
ATTNC_API const char *attnc_status_str(attnc_status s);

typedef enum attnc_severity {
    ATTNC_SEV_ERROR,
    ATTNC_SEV_NOTE,
    ATTNC_SEV_WARNING, /* the compile succeeded; something (the kernel cache) did not */
    ATTNC_SEV_COUNT
} attnc_severity;

/* line and col are 1-based; 0 means unknown. */
typedef struct attnc_loc {
    const char *file;
    uint32_t line, col;
} attnc_loc;

typedef struct attnc_diag {
    attnc_severity sev;
    attnc_status code;
    attnc_loc loc;
    const char *msg; /* borrowed: lives as long as the context */
} attnc_diag;

/* At most this many errors are kept per context; one more adds a note. */
#define ATTNC_MAX_ERRORS 20

typedef struct attnc_ctx attnc_ctx;

/* NULL when out of memory. */
ATTNC_API attnc_ctx *attnc_ctx_new(void);
/* Frees the context and everything it owns (diagnostics included). */
ATTNC_API void attnc_ctx_free(attnc_ctx *ctx);

ATTNC_API size_t attnc_diag_count(const attnc_ctx *ctx);
/* The i-th diagnostic in the order found; NULL past the end. */
ATTNC_API const attnc_diag *attnc_diag_get(const attnc_ctx *ctx, size_t i);
/* Renders d as "file:line:col: error: msg" (parts that are unknown are
 * left out) into buf like snprintf; returns the full length. */
ATTNC_API int attnc_diag_format(const attnc_diag *d, char *buf, size_t n);
/* Every diagnostic of ctx, formatted as attnc_diag_format does, one a line
 * each ending in '\n', into buf like snprintf ("" with none or a NULL
 * ctx); returns the full length. */
ATTNC_API int attnc_diag_text(const attnc_ctx *ctx, char *buf, size_t n);
/* Of the n words in known, the one nearest to word (edit distance, case
 * of word ignored) if it is close enough to be a typo of it (2 edits for
 * words under 6 characters, a third of the length + 1 beyond), else
 * NULL: what "did you mean" suggestions use. */
ATTNC_API const char *attnc_suggest(const char *word, const char *const *known, size_t n);

/* Parses and validates a spec file into *out (set only on success). Every
 * problem becomes a diagnostic on ctx (up to ATTNC_MAX_ERRORS); the status
 * is the first error's code. */
ATTNC_API attnc_status attnc_spec_load_file(attnc_ctx *ctx, const char *path, attn_config *out);
/* The same for a spec in memory; name is used as the file in locations. */
ATTNC_API attnc_status attnc_spec_load_string(attnc_ctx *ctx, const char *name, const char *text,
                                              size_t len, attn_config *out);
/* Multi-head latent attention (mla): the fewest new tokens of a prefill
 * into a sequence holding none that the kernels compute in the expanded
 * form (K and V expanded per head from the latent; cheaper for long
 * prefills) rather than the absorbed one (every other call); 0 without
 * mla. Both forms exist unless the mla_absorb pass is disabled (then
 * every call is expanded). */
ATTNC_API int64_t attnc_mla_prefill_tokens(const attn_config *c);
/* The normalized spec as YAML, every default filled in; it loads back to
 * the same config. malloc'd (caller frees); NULL when out of memory. */
ATTNC_API char *attnc_spec_to_yaml(const attn_config *c);

/* ---- importing a checkpoint's config --------------------------------------- */

typedef struct attnc_import_options {
    const char *name;   /* the spec's name; NULL: MODELTYPE_layerN */
    int dtype;          /* an attn_dtype for the weights; -1: the checkpoint's (config.json's
                           torch_dtype, a GGUF layer's q weight type; else f32) */
    int64_t max_tokens; /* kv_cache.max_tokens; 0: the model's context length, at most
                           8192 (4096 when it names none) */
} attnc_import_options;

ATTNC_API attnc_import_options attnc_import_options_default(void);

/* The spec of layer's attention (docs/checkpoints.md) from path: a
 * Hugging Face config.json or a GGUF file (its metadata and the layer's
 * tensor names and types), each key with a comment naming its source.
 * A field that changes attention in a way attnc cannot express is an
 * error naming it (ATTNC_E_SPEC); an unreadable file ATTNC_E_IO. The
 * spec is validated as attnc_spec_load_string would. On success
 * *yaml_text is malloc'd (the caller frees it); on failure it is
 * untouched and ctx says why. opt may be NULL (the defaults). */
ATTNC_API attnc_status attnc_import(attnc_ctx *ctx, const char *path, int64_t layer,
                                    const attnc_import_options *opt, char **yaml_text);

/* ---- compiling ------------------------------------------------------------ */

/* How to compile a spec; start from attnc_options_default(). */
typedef struct attnc_options {
    const char *const *disabled_passes; /* pass names to skip (see attnc_pass_name) */
    int n_disabled_passes;
    const char *target;    /* LLVM target triple ("aarch64-linux-gnu"); NULL = this host's */
    const char *cpu;       /* LLVM CPU name ("x86-64-v3", "generic"); NULL = this host's
                              (or the target's generic CPU for another target) */
    const char *features;  /* LLVM feature string; NULL = the CPU's (host: detected) */
    const char *emit_llvm; /* if set, the optimized module's LLVM IR is written here */
    const char *emit_asm;  /* if set, its assembly is written here */
    /* The kernel cache: compiled kernels are kept in cache_dir and reused by
     * later compiles of the same spec, options, CPU and attnc/LLVM build.
     * NULL = $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else
     * $HOME/.cache/attnc; "" or no_cache != 0: no cache. */
    const char *cache_dir;
    int no_cache;
    int threads; /* threads compiling kernels at once; 0 = one per CPU */
    /* Compile shard shard_index of shard_count of the spec's heads (tensor
     * parallelism: attn_config_shard) instead of the whole block; 0 of 0:
     * the whole block. */
    int64_t shard_index, shard_count;
} attnc_options;

ATTNC_API attnc_options attnc_options_default(void);

/* The passes of the pipeline, in order; NULL past the end. */
ATTNC_API const char *attnc_pass_name(int i);
ATTNC_API const char *attnc_pass_summary(int i);

/* The graph IR of a spec as text: after lowering when after_pass is
 * "lower", after that pass when it names one, after the whole pipeline
 * when NULL. *text lives as long as ctx. */
ATTNC_API attnc_status attnc_ir_text(attnc_ctx *ctx, const char *spec_path,
                                     const attnc_options *opt, const char *after_pass,
                                     const char **text);
/* attnc opt: the graph IR text in the file ir_path (as attnc_ir_text
 * prints it: the config it was built for, then the nodes), read back and
 * verified, then the passes named run over it in this order (the
 * verifier after each), printed to *text (lives as long as ctx).
 * spec_path may be NULL; a spec given must have the text's config, and a
 * text without config lines needs one. Errors: the file's path:line:col,
 * an unknown pass name. */
ATTNC_API attnc_status attnc_opt_text(attnc_ctx *ctx, const char *spec_path, const char *ir_path,
                                      const char *const *passes, int n_passes, const char **text);

/* ---- ahead of time ------------------------------------------------------------ */

typedef enum attnc_emit_kind {
    ATTNC_EMIT_OBJ,  /* relocatable object defining <name>_kernels() */
    ATTNC_EMIT_ASM,  /* its assembly */
    ATTNC_EMIT_LLVM, /* its LLVM IR */
    ATTNC_EMIT_COUNT
} attnc_emit_kind;

/* Compiles a spec into out_path (and, if header_path is not NULL, a header
 * declaring `const attn_kernels *<name>_kernels(void);` with the spec and
 * options as a comment). Both are written to temporary files renamed on
 * success: on failure neither exists (or an old one is untouched). The
 * same spec, target and options give byte-identical files (from the
 * kernel cache when it holds them). */
ATTNC_API attnc_status attnc_compile_file(attnc_ctx *ctx, const char *spec_path,
                                          const attnc_options *opt, attnc_emit_kind kind,
                                          const char *out_path, const char *header_path);

/* The CPU that code compiled with opt targets (opt->cpu; this host's when
 * it and opt->target are NULL; else the target's generic CPU) into cpu[n],
 * and the ATTN_CPU_* features (attn_kernels.h) that code may use. The
 * kernel table records them, and attn_block_new checks them on the
 * running CPU, but AMX, VNNI and I8MM only where the spec's compute bf16
 * or activations q8_0 use them. */
ATTNC_API attnc_status attnc_target_cpu(attnc_ctx *ctx, const attnc_options *opt, char *cpu,
                                        size_t n, uint32_t *features);
/* The ATTN_CPU_* features the kernel table of the spec at spec_path,
 * compiled with opt, records: what a CPU must have to run its kernels
 * (attnc_target_cpu's, less AMX, VNNI and I8MM where the spec's compute
 * and activations do not use them), and the CPU targeted into cpu[n] as
 * attnc_target_cpu gives it (cpu may be NULL). */
ATTNC_API attnc_status attnc_spec_cpu_features(attnc_ctx *ctx, const char *spec_path,
                                               const attnc_options *opt, char *cpu, size_t n,
                                               uint32_t *features);

/* ---- JIT ------------------------------------------------------------------ */

typedef struct attnc_jit attnc_jit;

typedef enum attnc_cache_result {
    ATTNC_CACHE_OFF,  /* no cache (disabled, or no directory could be named) */
    ATTNC_CACHE_MISS, /* compiled, then stored (when the directory was writable) */
    ATTNC_CACHE_HIT,  /* loaded from the cache: nothing was compiled */
    ATTNC_CACHE_RESULT_COUNT
} attnc_cache_result;

/* Milliseconds spent in each stage of one compile. Kernels are built,
 * optimized and turned into machine code one unit per thread at once:
 * those three are summed over the threads, objects_ms is their wall
 * clock. On a cache hit only spec, cache, jit and total are nonzero. */
typedef struct attnc_timings {
    double spec_ms;     /* reading and validating the spec */
    double ir_ms;       /* lowering to the graph IR */
    double passes_ms;   /* the pass pipeline */
    double llvm_ms;     /* building the LLVM modules */
    double optimize_ms; /* LLVM's optimization passes */
    double codegen_ms;  /* machine code generation */
    double objects_ms;  /* wall clock of the three above */
    double cache_ms;    /* looking up and storing the kernel cache */
    double jit_ms;      /* linking the objects into this process */
    double total_ms;    /* wall clock of the whole compile */
    int threads;        /* threads that compiled */
    attnc_cache_result cache;
} attnc_timings;

/* Compiles a spec into kernels in memory for this process (or loads them
 * from the kernel cache, see attnc_options). On failure *out is untouched;
 * on success ctx may hold warnings (a damaged cache entry rebuilt, an
 * unwritable cache directory). The kernels do not live in ctx.
 * Thread-safe: compiles from several threads and processes may run at
 * once (LLVM's shared steps are serialized inside). */
ATTNC_API attnc_status attnc_jit_compile_file(attnc_ctx *ctx, const char *spec_path,
                                              const attnc_options *opt, attnc_jit **out);
/* The kernel table; valid until attnc_jit_free. */
ATTNC_API const attn_kernels *attnc_jit_kernels(const attnc_jit *jit);
ATTNC_API attnc_timings attnc_jit_timings(const attnc_jit *jit);
/* Frees the machine code: the kernel table is invalid afterwards. */
ATTNC_API void attnc_jit_free(attnc_jit *jit);

/* ---- kernel cache ------------------------------------------------------------ */

/* The cache directory opt selects (see attnc_options.cache_dir), "" when
 * none; ATTNC_E_INVALID when it does not fit in buf[n]. */
ATTNC_API attnc_status attnc_cache_dir(const attnc_options *opt, char *buf, size_t n);

typedef struct attnc_cache_stats {
    uint64_t entries; /* compiled spec + option sets stored */
    uint64_t bytes;   /* their size on disk */
} attnc_cache_stats;

/* The entries of cache directory dir (a missing directory holds none). */
ATTNC_API attnc_status attnc_cache_stats_get(attnc_ctx *ctx, const char *dir,
                                             attnc_cache_stats *out);
/* Removes every entry of dir (and temporary files left by killed
 * compiles); *removed (may be NULL) gets what was removed. Safe while
 * other processes compile: they miss and store anew. */
ATTNC_API attnc_status attnc_cache_clear(attnc_ctx *ctx, const char *dir,
                                         attnc_cache_stats *removed);

/* Probes of this machine's limits, compiled for the host as the kernels
 * are (`attnc roofline` times them on every thread):
 * - fma(io, iters): iters rounds of flops_per_iter FP32 FLOPs, fused
 *   multiply-adds on independent registers (io[0], io[1]: the factors,
 *   e.g. 0.999999 and 1e-6; the result goes back to io[0..lanes));
 * - read(p, n): the sum of p[0..n), n a multiple of 64, streamed from
 *   memory;
 * - bf16(io, iters), NULL where the CPU has no bf16 dot products
 *   (AVX512-BF16): iters rounds of bf16_flops_per_iter FLOPs of bf16 pair
 *   dot products summed in f32 (vdpbf16ps), as compute: bf16 runs them;
 * - amx(io, iters), NULL where the CPU has no AMX: iters rounds of
 *   amx_flops_per_iter FLOPs of bf16 tile products (tdpbf16ps), as compute:
 *   bf16's GEMM runs them there; call attn_cpu_request_amx first;
 * - int8(io, iters), NULL where the CPU has no VNNI: iters rounds of
 *   int8_ops_per_iter operations (a multiply-add is two) of int8 dot
 *   products summed in int32 (vpdpbusd), as activations: q8_0 runs them. */
typedef struct attnc_probes {
    void (*fma)(float *io, int64_t iters);
    float (*read)(const float *p, int64_t n);
    int64_t flops_per_iter;
    int lanes; /* f32 lanes of the vectors used */
    void (*bf16)(float *io, int64_t iters);
    int64_t bf16_flops_per_iter;
    void (*amx)(float *io, int64_t iters);
    int64_t amx_flops_per_iter;
    void (*int8)(float *io, int64_t iters);
    int64_t int8_ops_per_iter;
} attnc_probes;

/* The probes live in *jit until attnc_jit_free (whose kernel table is
 * then empty). */
ATTNC_API attnc_status attnc_probes_compile(attnc_ctx *ctx, attnc_jit **jit, attnc_probes *out);
/* The same compiled for opt's CPU and features (opt->target must be NULL:
 * they run here; the caller checks that this CPU has the features,
 * attnc_target_cpu). */
ATTNC_API attnc_status attnc_probes_compile_for(attnc_ctx *ctx, const attnc_options *opt,
                                                attnc_jit **jit, attnc_probes *out);

#ifdef __cplusplus
}
#endif
#endif
