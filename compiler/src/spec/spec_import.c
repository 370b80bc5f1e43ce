/* spec_import.c: attnc_import, the spec of one layer's attention from a
 * Hugging Face config.json or from a GGUF file's metadata, each key with a
 * comment naming the field it came from. Every field that changes the
 * attention and that attnc cannot express is an error naming the field;
 * nothing is dropped silently. The spec is validated before it is
 * returned. `attnc import` and the Python package's import_spec call it. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spec/spec.h"

#define MAX_TOKENS_CAP 8192
#define MAX_TOKENS_UNKNOWN 4096

/* What the spec will say, with the source of each key. */
#define SRC 240 /* bytes of a source comment */

typedef struct imp {
    attnc_ctx *ctx;
    const char *file;
    char family[32];
    int64_t layer, n_layers;
    int64_t heads, kv, head_dim, d_model, rotary_dim, window, max_pos;
    char src_heads[SRC], src_kv[SRC], src_hd[SRC], src_d[SRC], src_rot[SRC], src_window[SRC];
    char src_max[SRC];
    bool rope;
    attn_rope_style style;
    char src_style[SRC];
    double base;
    char src_base[SRC];
    attn_rope_scaling scaling;
    double factor, low, high, beta_fast, beta_slow, mscale, mscale_all, attn_factor;
    bool has_attn_factor, truncate;
    int64_t orig;
    char src_scaling[SRC];
    double softcap;
    char src_softcap[SRC];
    attn_qk_norm qk_norm;
    double eps;
    int offset;
    bool norm_weight;
    char src_norm[SRC];
    bool sinks, alibi, qkv_bias, o_bias;
    char src_sinks[SRC], src_alibi[SRC], src_bias[SRC];
    double scale; /* 0: auto */
    char src_scale[SRC];
    attn_layout layout;
    char src_layout[SRC];
    attn_dtype dtype;
    bool has_dtype;
    char src_dtype[SRC];
} imp;

static int fail(const imp *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An error at the imported file; the status to return. */
static int fail(const imp *m, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    diag_error(m->ctx, ATTNC_E_SPEC, (attnc_loc){m->file, 0, 0}, "%s", text);
    return ATTNC_E_SPEC;
}

/* A failure of the runtime (reading a GGUF file, memory), with its message. */
static int rt_error(const imp *m, attn_status st, const attn_msg *msg) {
    attnc_status code = st == ATTN_E_NOMEM ? ATTNC_E_NOMEM
                        : st == ATTN_E_IO  ? ATTNC_E_IO
                                           : ATTNC_E_SPEC;
    diag_error(m->ctx, code, (attnc_loc){m->file, 0, 0}, "%s",
               msg && msg->text[0] ? msg->text : attn_status_str(st));
    return code;
}

/* ---- config.json ------------------------------------------------------- */

static const cJSON *jget(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static bool jnum(const cJSON *o, const char *key, double *out) {
    const cJSON *v = jget(o, key);
    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return true;
}

/* An integer field; false (and an error printed) if present but not one. */
static bool jint(const imp *m, const cJSON *o, const char *key, int64_t *out, bool *found) {
    const cJSON *v = jget(o, key);
    *found = v != NULL;
    if (!v)
        return true;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 1e15) {
        fail(m, "'%s' must be an integer", key);
        return false;
    }
    *out = (int64_t)v->valuedouble;
    return true;
}

static bool jbool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = jget(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* The first of keys present: its value into *out and its name into src. */
static bool first_int(const imp *m, const cJSON *o, const char *const *keys, int64_t *out,
                      char *src, size_t n, bool *ok) {
    for (int i = 0; keys[i]; i++) {
        bool found;
        if (!jint(m, o, keys[i], out, &found)) {
            *ok = false;
            return false;
        }
        if (found) {
            snprintf(src, n, "%s", keys[i]);
            return true;
        }
    }
    return false;
}

/* Is layer m->layer a sliding-window layer? From layer_types when the
 * config has it (every recent family), else the family's own rule. */
static int sliding_layer(imp *m, const cJSON *c, const char *family) {
    const cJSON *lt = jget(c, "layer_types");
    if (cJSON_IsArray(lt)) {
        const cJSON *e = cJSON_GetArrayItem(lt, (int)m->layer);
        if (!cJSON_IsString(e))
            return fail(m, "layer_types has no entry %lld", (long long)m->layer), -1;
        if (strcmp(e->valuestring, "sliding_attention") && strcmp(e->valuestring, "full_attention"))
            return fail(m,
                        "layer_types[%lld] is '%s'; attnc knows sliding_attention and "
                        "full_attention",
                        (long long)m->layer, e->valuestring),
                   -1;
        snprintf(m->src_window, sizeof m->src_window, "sliding_window, layer_types[%lld] = %s",
                 (long long)m->layer, e->valuestring);
        return strcmp(e->valuestring, "sliding_attention") == 0;
    }
    if (strcmp(family, "gemma2") == 0) { /* modeling_gemma2: even layers slide */
        snprintf(m->src_window, sizeof m->src_window, "sliding_window, on even layers (Gemma 2)");
        return m->layer % 2 == 0;
    }
    if (strncmp(family, "gemma3", 6) == 0) {
        double p = 6;
        jnum(c, "sliding_window_pattern", &p);
        snprintf(m->src_window, sizeof m->src_window,
                 "sliding_window, all but every sliding_window_pattern (%g)th layer", p);
        return p < 1 || (m->layer + 1) % (int64_t)p != 0;
    }
    if (strcmp(family, "qwen2") == 0 || strcmp(family, "qwen3") == 0) {
        double mwl = 0;
        bool use = jbool(c, "use_sliding_window", false);
        jnum(c, "max_window_layers", &mwl);
        snprintf(m->src_window, sizeof m->src_window,
                 "sliding_window if use_sliding_window (%s) and layer >= max_window_layers (%g)",
                 use ? "true" : "false", mwl);
        return use && (double)m->layer >= mwl;
    }
    snprintf(m->src_window, sizeof m->src_window, "sliding_window");
    return 1; /* mistral, phi3: every layer, when the config sets one */
}

static int rope_scaling_json(imp *m, const cJSON *rs) {
    if (!rs)
        return ATTNC_OK;
    if (!cJSON_IsObject(rs))
        return fail(m, "rope_scaling must be an object or null");
    const cJSON *t = jget(rs, "rope_type");
    if (!t)
        t = jget(rs, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "";
    snprintf(m->src_scaling, sizeof m->src_scaling, "rope_scaling (rope_type %s)", type);
    if (strcmp(type, "default") == 0)
        return ATTNC_OK;
    if (!jnum(rs, "factor", &m->factor) && strcmp(type, "default") != 0)
        return fail(m, "rope_scaling.factor is missing");
    double d;
    if (strcmp(type, "linear") == 0) {
        m->scaling = ATTN_SCALING_LINEAR;
    } else if (strcmp(type, "llama3") == 0) {
        m->scaling = ATTN_SCALING_LLAMA3;
        if (!jnum(rs, "low_freq_factor", &m->low) || !jnum(rs, "high_freq_factor", &m->high) ||
            !jnum(rs, "original_max_position_embeddings", &d))
            return fail(m, "rope_scaling (llama3) needs low_freq_factor, high_freq_factor and "
                           "original_max_position_embeddings");
        m->orig = (int64_t)d;
    } else if (strcmp(type, "yarn") == 0) {
        /* modeling_rope_utils._compute_yarn_parameters: defaults as there */
        m->scaling = ATTN_SCALING_YARN;
        if (jnum(rs, "original_max_position_embeddings", &d))
            m->orig = (int64_t)d;
        else if (m->max_pos > 0)
            m->orig = (int64_t)((double)m->max_pos / m->factor);
        else
            return fail(m, "rope_scaling (yarn) needs original_max_position_embeddings");
        m->beta_fast = 32, m->beta_slow = 1, m->mscale = 1, m->mscale_all = 0;
        jnum(rs, "beta_fast", &m->beta_fast);
        jnum(rs, "beta_slow", &m->beta_slow);
        jnum(rs, "mscale", &m->mscale);
        jnum(rs, "mscale_all_dim", &m->mscale_all);
        m->has_attn_factor = jnum(rs, "attention_factor", &m->attn_factor);
        m->truncate = jbool(rs, "truncate", true);
    } else {
        return fail(m,
                    "rope_scaling.rope_type '%s' cannot be expressed (attnc has linear, "
                    "llama3 and yarn)",
                    type);
    }
    return ATTNC_OK;
}

static attn_dtype dtype_of_torch(const char *s, bool *ok) {
    *ok = true;
    if (strcmp(s, "bfloat16") == 0)
        return ATTN_DTYPE_BF16;
    if (strcmp(s, "float16") == 0)
        return ATTN_DTYPE_F16;
    *ok = strcmp(s, "float32") == 0;
    return ATTN_DTYPE_F32;
}

/* Fields a config.json may leave out, filled with the defaults of the
 * family's configuration class (configuration_gemma3.py Gemma3TextConfig,
 * configuration_gemma2.py Gemma2Config): published Gemma 3 configs name
 * only what differs from them. */
static const struct {
    const char *family, *key;
    double value;
} class_defaults[] = {
    {"gemma3_text", "head_dim", 256},
    {"gemma3_text", "query_pre_attn_scalar", 256},
    {"gemma3_text", "rope_theta", 1000000},
    {"gemma3_text", "rope_local_base_freq", 10000},
    {"gemma3_text", "sliding_window", 4096},
    {"gemma3_text", "sliding_window_pattern", 6},
    {"gemma3_text", "rms_norm_eps", 1e-6},
    {"gemma3_text", "max_position_embeddings", 131072},
    {"gemma2", "head_dim", 256},
    {"gemma2", "query_pre_attn_scalar", 256},
    {"gemma2", "sliding_window", 4096},
    {"gemma2", "attn_logit_softcapping", 50},
    {"gemma2", "max_position_embeddings", 8192},
};

static int from_merged(imp *m, const cJSON *root, const cJSON *c, const char *f);

static int from_config(imp *m, const cJSON *root) {
    if (!cJSON_IsObject(root))
        return fail(m, "not a JSON object");
    const cJSON *c = root;
    const cJSON *tc = jget(root, "text_config"); /* multimodal models: the language model's */
    if (cJSON_IsObject(tc))
        c = tc;
    const cJSON *mt = jget(c, "model_type");
    if (!cJSON_IsString(mt))
        mt = jget(root, "model_type");
    if (!cJSON_IsString(mt))
        return fail(m, "no model_type: not a Hugging Face config.json");
    const char *f = mt->valuestring;
    static const char *const known[] = {"llama",  "mistral",     "qwen2",    "qwen3",   "gemma2",
                                        "gemma3", "gemma3_text", "olmo2",    "gpt_oss", "phi3",
                                        "falcon", "gptj",        "gpt_neox", "bloom",   NULL};
    int k = 0;
    while (known[k] && strcmp(known[k], f))
        k++;
    if (!known[k])
        return fail(m,
                    "model_type '%s' is not one attnc imports (llama, mistral, qwen2, qwen3, "
                    "gemma2, gemma3, olmo2, gpt_oss, phi3, falcon, gptj, gpt_neox, bloom)",
                    f);
    snprintf(m->family, sizeof m->family, "%s", f);
    cJSON *merged = cJSON_Duplicate(c, true);
    if (!merged)
        return rt_error(m, ATTN_E_NOMEM, NULL);
    const char *fam = strcmp(f, "gemma3") == 0 ? "gemma3_text" : f;
    for (size_t i = 0; i < sizeof class_defaults / sizeof class_defaults[0]; i++)
        if (strcmp(class_defaults[i].family, fam) == 0 &&
            !cJSON_GetObjectItemCaseSensitive(merged, class_defaults[i].key))
            cJSON_AddNumberToObject(merged, class_defaults[i].key, class_defaults[i].value);
    int rc = from_merged(m, root, merged, f);
    cJSON_Delete(merged);
    return rc;
}

#define IS(x) (strcmp(f, x) == 0)

/* The sizes, by each family's names for them. */
static int json_sizes(imp *m, const cJSON *c, const char *f) {
    bool ok = true;
    static const char *const k_layers[] = {"num_hidden_layers", "n_layer", "num_layers", NULL};
    static const char *const k_heads[] = {"num_attention_heads", "n_head", NULL};
    static const char *const k_d[] = {"hidden_size", "n_embd", "n_embed", NULL};
    static const char *const k_kv[] = {"num_key_value_heads", "num_kv_heads", NULL};
    static const char *const k_hd[] = {"head_dim", NULL};
    static const char *const k_pos[] = {"max_position_embeddings", "n_positions", NULL};
    char src[SRC];
    if (first_int(m, c, k_layers, &m->n_layers, src, sizeof src, &ok) && m->layer >= m->n_layers)
        return fail(m, "--layer %lld: the model has %lld layers (%s)", (long long)m->layer,
                    (long long)m->n_layers, src);
    if (!ok)
        return ATTNC_E_SPEC;
    if (!first_int(m, c, k_heads, &m->heads, m->src_heads, sizeof m->src_heads, &ok))
        return ok ? fail(m, "no num_attention_heads") : ATTNC_E_SPEC;
    if (!first_int(m, c, k_d, &m->d_model, m->src_d, sizeof m->src_d, &ok))
        return ok ? fail(m, "no hidden_size") : ATTNC_E_SPEC;
    m->kv = m->heads;
    snprintf(m->src_kv, sizeof m->src_kv, "%.100s (multi-head)", m->src_heads);
    if (IS("falcon")) {
        /* modeling_falcon.py FalconAttention: num_kv_heads with the new
         * decoder architecture, one with multi_query, else one per head */
        bool nda = jbool(c, "new_decoder_architecture", false), mq = jbool(c, "multi_query", true);
        if (nda && !first_int(m, c, k_kv, &m->kv, m->src_kv, sizeof m->src_kv, &ok) && ok)
            return fail(m, "new_decoder_architecture needs num_kv_heads");
        if (!nda && mq)
            m->kv = 1, snprintf(m->src_kv, sizeof m->src_kv, "multi_query");
        if (jbool(c, "alibi", false))
            return fail(m, "alibi: true (Falcon's ALiBi, added before the 1/sqrt(head_dim) "
                           "scaling) cannot be expressed; attnc's alibi is BLOOM's");
        m->layout = ATTN_LAYOUT_FALCON;
    } else if (!IS("gptj") && !IS("bloom") && !IS("gpt_neox")) {
        first_int(m, c, k_kv, &m->kv, m->src_kv, sizeof m->src_kv, &ok);
    }
    if (!ok)
        return ATTNC_E_SPEC;
    m->head_dim = m->heads > 0 ? m->d_model / m->heads : 0;
    snprintf(m->src_hd, sizeof m->src_hd, "%.100s / %.100s", m->src_d, m->src_heads);
    if (!first_int(m, c, k_hd, &m->head_dim, m->src_hd, sizeof m->src_hd, &ok) && ok &&
        m->heads > 0 && m->d_model % m->heads)
        return fail(m, "%s (%lld) is not a multiple of %s (%lld) and there is no head_dim",
                    m->src_d, (long long)m->d_model, m->src_heads, (long long)m->heads);
    if (!ok)
        return ATTNC_E_SPEC;
    m->max_pos = IS("falcon") ? 2048 : 0; /* FalconConfig's default */
    snprintf(m->src_max, sizeof m->src_max, "%s", IS("falcon") ? "FalconConfig default 2048" : "");
    first_int(m, c, k_pos, &m->max_pos, m->src_max, sizeof m->src_max, &ok);
    return ok ? ATTNC_OK : ATTNC_E_SPEC;
}

/* RoPE (base, style, rotary dims, scaling) and the layer's window. */
static int json_positions(imp *m, const cJSON *c, const char *f) {
    bool ok = true, gemma3 = IS("gemma3") || IS("gemma3_text");
    m->rope = !IS("bloom");
    m->style = IS("gptj") ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
    snprintf(m->src_style, sizeof m->src_style, "%s",
             IS("gptj") ? "rotate_every_two (modeling_gptj.py)" : "rotate_half (Hugging Face)");
    m->base = 10000;
    snprintf(m->src_base, sizeof m->src_base, "default 10000");
    if (jnum(c, "rope_theta", &m->base))
        snprintf(m->src_base, sizeof m->src_base, "rope_theta");
    else if (jnum(c, "rotary_emb_base", &m->base))
        snprintf(m->src_base, sizeof m->src_base, "rotary_emb_base");
    m->rotary_dim = m->head_dim;
    double frac = 1;
    static const char *const k_rot[] = {"rotary_dim", NULL};
    bool rot_given =
        IS("gptj") && first_int(m, c, k_rot, &m->rotary_dim, m->src_rot, sizeof m->src_rot, &ok);
    if (!ok)
        return ATTNC_E_SPEC;
    if (!rot_given && (jnum(c, "partial_rotary_factor", &frac) || jnum(c, "rotary_pct", &frac))) {
        m->rotary_dim = (int64_t)((double)m->head_dim * frac);
        snprintf(m->src_rot, sizeof m->src_rot, "head_dim * %s (%g)",
                 jget(c, "rotary_pct") ? "rotary_pct" : "partial_rotary_factor", frac);
    }
    int sl = sliding_layer(m, c, f);
    if (sl < 0)
        return ATTNC_E_SPEC;
    double w = 0;
    if (sl && jnum(c, "sliding_window", &w))
        m->window = (int64_t)w;
    if (gemma3 && sl) { /* local layers: rope_local_base_freq, no scaling */
        m->base = 10000;
        snprintf(m->src_base, sizeof m->src_base, "rope_local_base_freq (local layer)");
        if (jnum(c, "rope_local_base_freq", &m->base) == false)
            snprintf(m->src_base, sizeof m->src_base, "default rope_local_base_freq 10000");
    } else if (m->rope) {
        int rc = rope_scaling_json(m, jget(c, "rope_scaling"));
        if (rc)
            return rc;
    }
    if (jget(c, "rope_scaling") && !m->rope)
        return fail(m, "rope_scaling is set but the family has no RoPE");
    return ATTNC_OK;
}

/* Softcap, scale, QK-norm, sinks, ALiBi, biases, layout and dtype. */
static void json_scores(imp *m, const cJSON *root, const cJSON *c, const char *f) {
    bool is = false, gemma3 = IS("gemma3") || IS("gemma3_text");
    if (jnum(c, "attn_logit_softcapping", &m->softcap))
        snprintf(m->src_softcap, sizeof m->src_softcap, "attn_logit_softcapping");
    double qpas;
    if ((IS("gemma2") || gemma3) && jnum(c, "query_pre_attn_scalar", &qpas)) {
        m->scale = 1 / sqrt(qpas);
        snprintf(m->src_scale, sizeof m->src_scale, "query_pre_attn_scalar (%g) ^ -0.5", qpas);
    }
    double eps = 1e-6;
    bool has_eps = jnum(c, "rms_norm_eps", &eps);
    if (IS("qwen3") || gemma3 || IS("olmo2")) {
        m->qk_norm = IS("olmo2") ? ATTN_QK_NORM_ALL : ATTN_QK_NORM_HEAD;
        m->eps = eps;
        m->norm_weight = true;
        m->offset = gemma3;
        snprintf(m->src_norm, sizeof m->src_norm, "q_norm and k_norm (%s), eps %s",
                 IS("olmo2") ? "Olmo2RMSNorm over all heads"
                 : gemma3    ? "Gemma3RMSNorm: times (1 + weight)"
                             : "Qwen3RMSNorm over each head",
                 has_eps ? "rms_norm_eps" : "default 1e-6");
    }
    m->sinks = IS("gpt_oss");
    snprintf(m->src_sinks, sizeof m->src_sinks, "GptOssAttention.sinks");
    m->alibi = IS("bloom");
    snprintf(m->src_alibi, sizeof m->src_alibi, "BLOOM's ALiBi");
    /* biases: each modeling file's */
    if (IS("qwen2")) {
        m->qkv_bias = true;
        snprintf(m->src_bias, sizeof m->src_bias, "Qwen2Attention: q/k/v with bias, o without");
    } else if (IS("falcon")) {
        m->qkv_bias = m->o_bias = jbool(c, "bias", false);
        snprintf(m->src_bias, sizeof m->src_bias, "bias");
    } else if (IS("bloom")) {
        m->qkv_bias = m->o_bias = true;
        snprintf(m->src_bias, sizeof m->src_bias, "BloomAttention: always");
    } else if (IS("gptj") || IS("phi3")) {
        snprintf(m->src_bias, sizeof m->src_bias, "%s: never",
                 IS("gptj") ? "GPTJAttention" : "Phi3Attention");
    } else {
        bool dflt = IS("gpt_neox") || IS("gpt_oss");
        m->qkv_bias = m->o_bias = jbool(c, "attention_bias", dflt);
        snprintf(m->src_bias, sizeof m->src_bias, "attention_bias%s",
                 jget(c, "attention_bias") ? ""
                 : dflt                    ? " (default true)"
                                           : " (default false)");
    }
    m->layout = IS("gptj")       ? ATTN_LAYOUT_GPTJ
                : IS("gpt_neox") ? ATTN_LAYOUT_NEOX
                : IS("falcon")   ? ATTN_LAYOUT_FALCON
                : IS("phi3")     ? ATTN_LAYOUT_PHI3
                : IS("bloom")    ? ATTN_LAYOUT_BLOOM
                                 : ATTN_LAYOUT_LLAMA;
    snprintf(m->src_layout, sizeof m->src_layout, "model_type %s", f);
    const cJSON *td = jget(c, "torch_dtype");
    if (!td)
        td = jget(root, "torch_dtype");
    snprintf(m->src_dtype, sizeof m->src_dtype, "no torch_dtype given");
    if (cJSON_IsString(td)) {
        m->dtype = dtype_of_torch(td->valuestring, &is);
        m->has_dtype = is;
        snprintf(m->src_dtype, sizeof m->src_dtype, "torch_dtype %s", td->valuestring);
    }
}

static int from_merged(imp *m, const cJSON *root, const cJSON *c, const char *f) {
    int rc = json_sizes(m, c, f);
    if (rc == ATTNC_OK)
        rc = json_positions(m, c, f);
    if (rc == ATTNC_OK)
        json_scores(m, root, c, f);
    return rc;
}
#undef IS

/* ---- GGUF ----------------------------------------------------------------- */

static bool g_int(const attn_gguf *g, const char *arch, const char *key, int64_t layer,
                  int64_t *out, char *src, size_t n) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!attn_gguf_get_int(g, k, layer, out))
        return false;
    if (src)
        snprintf(src, n, "%s", k);
    return true;
}

/* GGUF stores most reals as f32: the shortest decimal that is that f32
 * (1e-06, not 9.99999997e-07). */
static double tidy_f32(double v) {
    char b[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(b, sizeof b, "%.*g", p, v);
        if ((float)strtod(b, NULL) == (float)v)
            return strtod(b, NULL);
    }
    return v;
}

static bool g_float(const attn_gguf *g, const char *arch, const char *key, double *out, char *src,
                    size_t n) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (!attn_gguf_get_float(g, k, 0, out))
        return false;
    if (attn_gguf_kv_type(g, k) == ATTN_GGUF_FLOAT32)
        *out = tidy_f32(*out);
    if (src)
        snprintf(src, n, "%s", k);
    return true;
}

static bool has_tensor(const attn_gguf *g, int64_t layer, const char *name) {
    char n[160];
    snprintf(n, sizeof n, "blk.%lld.%s", (long long)layer, name);
    return attn_gguf_find(g, n) != NULL;
}

/* Llama 3.1 and 3.2 GGUF files carry their RoPE scaling as one divisor
 * per frequency, tensor rope_freqs.weight (convert_hf_to_gguf.py
 * LlamaModel.generate_extra_tensors: 1 above the high-frequency
 * wavelength, factor below the low one, 1 / ((1 - smooth) / factor +
 * smooth) between). The converter's parameters other than factor are
 * low_freq_factor 1, high_freq_factor 4, original context 8192 unless the
 * config said otherwise, which the file does not record: those are taken,
 * factor is the largest divisor, and every divisor must then match the
 * llama3 formula, else the file is refused. */
static int llama3_from_factors(imp *m, const attn_gguf_tensor *rf) {
    int64_t half = m->rotary_dim / 2;
    if (rf->type != 0 || rf->ndim != 1 || rf->ne[0] != half || half < 1)
        return fail(m, "rope_freqs.weight must be F32 [%lld] (rotary_dim / 2)", (long long)half);
    const float *div = rf->data;
    attn_config c = {.rope_style = ATTN_ROPE_HALF,
                     .rope_base = m->base,
                     .rotary_dim = m->rotary_dim,
                     .rope_scaling = ATTN_SCALING_LLAMA3,
                     .rope_factor = 1,
                     .rope_low_freq_factor = 1,
                     .rope_high_freq_factor = 4,
                     .rope_original_max_position = 8192};
    for (int64_t i = 0; i < half; i++)
        c.rope_factor = div[i] > c.rope_factor ? div[i] : c.rope_factor;
    double *f = malloc((size_t)half * sizeof *f), *f0 = malloc((size_t)half * sizeof *f0);
    if (!f || !f0) {
        free(f), free(f0);
        return rt_error(m, ATTN_E_NOMEM, NULL);
    }
    attn_rope_inv_freq(&c, f);
    c.rope_scaling = ATTN_SCALING_NONE;
    attn_rope_inv_freq(&c, f0);
    int64_t bad = -1;
    for (int64_t i = 0; i < half && bad < 0; i++)
        if (fabs(f0[i] / f[i] - div[i]) > 1e-5 * div[i])
            bad = i;
    free(f), free(f0);
    if (bad >= 0)
        return fail(m,
                    "rope_freqs.weight[%lld] = %g is not Llama 3's scaling with factor %g, "
                    "low_freq_factor 1, high_freq_factor 4, original context 8192; import "
                    "the model's config.json instead",
                    (long long)bad, div[bad], c.rope_factor);
    m->scaling = ATTN_SCALING_LLAMA3;
    m->factor = c.rope_factor, m->low = 1, m->high = 4, m->orig = 8192;
    snprintf(m->src_scaling, sizeof m->src_scaling,
             "rope_freqs.weight: llama3 divisors, each matched to this scaling");
    return ATTNC_OK;
}

/* From a GGUF layer: softcap, scale, QK-norm, biases (by the layer's
 * tensors), layout and dtype (its q weight's type). */
static void gguf_scores(imp *m, const attn_gguf *g, const char *arch) {
#define IS(x) (strcmp(arch, x) == 0)
    double cap;
    if (g_float(g, arch, "attn_logit_softcapping", &cap, m->src_softcap, sizeof m->src_softcap))
        m->softcap = cap;
    if (IS("gemma2") || IS("gemma3")) {
        m->scale = 1 / sqrt((double)m->head_dim);
        snprintf(m->src_scale, sizeof m->src_scale, "key_length ^ -0.5 (llama.cpp)");
    }
    if (has_tensor(g, m->layer, "attn_q_norm.weight")) {
        m->qk_norm = IS("olmo2") ? ATTN_QK_NORM_ALL : ATTN_QK_NORM_HEAD;
        m->norm_weight = true;
        m->eps = 1e-6;
        g_float(g, arch, "attention.layer_norm_rms_epsilon", &m->eps, NULL, 0);
        /* the converter stores Gemma's norm weights plus one */
        snprintf(m->src_norm, sizeof m->src_norm,
                 "attn_q_norm.weight, eps %s.attention.layer_norm_rms_epsilon%s", arch,
                 IS("gemma3") ? "; (1 + weight) stored as is" : "");
    }
    m->qkv_bias =
        has_tensor(g, m->layer, "attn_q.bias") || has_tensor(g, m->layer, "attn_qkv.bias");
    m->o_bias = has_tensor(g, m->layer, "attn_output.bias");
    snprintf(m->src_bias, sizeof m->src_bias, "bias tensors of blk.%lld", (long long)m->layer);
    m->layout = ATTN_LAYOUT_LLAMA;
    snprintf(m->src_layout, sizeof m->src_layout, "GGUF names (blk.N.attn_*) whatever the layout");
    char qn[96];
    snprintf(qn, sizeof qn, "blk.%lld.attn_q.weight", (long long)m->layer);
    const attn_gguf_tensor *q = attn_gguf_find(g, qn);
    if (!q) {
        snprintf(qn, sizeof qn, "blk.%lld.attn_qkv.weight", (long long)m->layer);
        q = attn_gguf_find(g, qn);
    }
    snprintf(m->src_dtype, sizeof m->src_dtype,
             "the layer's q weight is not F32/F16/BF16/Q8_0/Q4_0");
    attn_dtype qdt = q ? attn_gguf_type_dtype(q->type) : ATTN_DTYPE_COUNT;
    if (qdt != ATTN_DTYPE_COUNT) {
        m->dtype = qdt;
        m->has_dtype = true;
        snprintf(m->src_dtype, sizeof m->src_dtype, "%s is %s", qn, q->type_name);
    }
#undef IS
}

static int from_gguf(imp *m, const char *path) {
    attn_gguf *g = NULL;
    attn_msg msg = {{0}};
    attn_status st = attn_gguf_open(path, &g, &msg);
    if (st)
        return rt_error(m, st, &msg);
    int rc = ATTNC_OK;
    const char *s;
    size_t sl;
    char arch[64];
    if (!attn_gguf_get_str(g, "general.architecture", &s, &sl) || sl == 0 || sl >= sizeof arch) {
        rc = fail(m, "no general.architecture string");
        goto done;
    }
    memcpy(arch, s, sl);
    arch[sl] = 0;
    static const char *const known[] = {"llama", "qwen2",  "qwen3", "gemma2",  "gemma3", "olmo2",
                                        "phi3",  "falcon", "gptj",  "gptneox", "bloom",  NULL};
    int k = 0;
    while (known[k] && strcmp(known[k], arch))
        k++;
    if (!known[k]) {
        rc = fail(m,
                  "general.architecture '%s' is not one attnc imports from GGUF (llama, qwen2, "
                  "qwen3, gemma2, gemma3, olmo2, phi3, falcon, gptj, gptneox, bloom)",
                  arch);
        goto done;
    }
    snprintf(m->family, sizeof m->family, "%s", known[k]);
#define IS(x) (strcmp(arch, x) == 0)
    if (g_int(g, arch, "block_count", 0, &m->n_layers, NULL, 0) && m->layer >= m->n_layers) {
        rc = fail(m, "--layer %lld: the model has %lld layers (%s.block_count)",
                  (long long)m->layer, (long long)m->n_layers, arch);
        goto done;
    }
    if (!g_int(g, arch, "attention.head_count", m->layer, &m->heads, m->src_heads,
               sizeof m->src_heads) ||
        !g_int(g, arch, "embedding_length", 0, &m->d_model, m->src_d, sizeof m->src_d)) {
        rc = fail(m, "needs %s.attention.head_count and %s.embedding_length", arch, arch);
        goto done;
    }
    m->kv = m->heads;
    snprintf(m->src_kv, sizeof m->src_kv, "%.100s (none given: multi-head)", m->src_heads);
    g_int(g, arch, "attention.head_count_kv", m->layer, &m->kv, m->src_kv, sizeof m->src_kv);
    m->head_dim = m->heads ? m->d_model / m->heads : 0;
    snprintf(m->src_hd, sizeof m->src_hd, "%.100s / %.100s", m->src_d, m->src_heads);
    g_int(g, arch, "attention.key_length", 0, &m->head_dim, m->src_hd, sizeof m->src_hd);
    int64_t vl;
    if (g_int(g, arch, "attention.value_length", 0, &vl, NULL, 0) && vl != m->head_dim) {
        rc = fail(m,
                  "%s.attention.value_length (%lld) differs from key_length (%lld); attnc has "
                  "one head_dim",
                  arch, (long long)vl, (long long)m->head_dim);
        goto done;
    }
    g_int(g, arch, "context_length", 0, &m->max_pos, m->src_max, sizeof m->src_max);
    /* llama.cpp's rope types (llama-model.cpp llama_model_rope_type): NORM
     * (pairs 2i, 2i+1) for llama and gptj, whose q/k rows the converter
     * permutes for it; NEOX (rotate-half) for the others; none for bloom */
    m->rope = !IS("bloom");
    m->alibi = IS("bloom");
    snprintf(m->src_alibi, sizeof m->src_alibi, "bloom: ALiBi");
    m->style = IS("llama") || IS("gptj") ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
    snprintf(m->src_style, sizeof m->src_style, "%s",
             IS("llama")  ? "llama.cpp's rope type NORM: q/k rows permuted by the converter"
             : IS("gptj") ? "llama.cpp's rope type NORM"
                          : "llama.cpp's rope type NEOX");
    m->base = 10000;
    snprintf(m->src_base, sizeof m->src_base, "default 10000");
    g_float(g, arch, "rope.freq_base", &m->base, m->src_base, sizeof m->src_base);
    m->rotary_dim = m->head_dim;
    g_int(g, arch, "rope.dimension_count", 0, &m->rotary_dim, m->src_rot, sizeof m->src_rot);
    const attn_gguf_tensor *rf = attn_gguf_find(g, "rope_freqs.weight");
    if (rf && (rc = llama3_from_factors(m, rf)))
        goto done;
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (attn_gguf_get_str(g, key, &s, &sl) && !(sl == 4 && memcmp(s, "none", 4) == 0)) {
        snprintf(m->src_scaling, sizeof m->src_scaling, "%s", key);
        if (sl == 6 && memcmp(s, "linear", 6) == 0) {
            m->scaling = ATTN_SCALING_LINEAR;
            if (!g_float(g, arch, "rope.scaling.factor", &m->factor, NULL, 0)) {
                rc = fail(m, "%s.rope.scaling.factor is missing", arch);
                goto done;
            }
        } else {
            rc = fail(m, "%s '%.*s' cannot be imported from GGUF (linear can)", key, (int)sl, s);
            goto done;
        }
    }
    int64_t w = 0;
    /* llama.cpp's layer patterns (llama-model.cpp): gemma2 every other
     * layer from 0, gemma3 all but every sixth; phi3 and the rest all */
    bool sliding = IS("gemma2") ? m->layer % 2 == 0 : IS("gemma3") ? (m->layer + 1) % 6 != 0 : true;
    if (sliding &&
        g_int(g, arch, "attention.sliding_window", 0, &w, m->src_window, sizeof m->src_window))
        m->window = w;
    if (IS("gemma3")) {
        strcat(m->src_window, sliding ? " (a local layer: 5 of every 6)" : "");
        if (sliding) { /* llama.cpp: local layers at 10000, unscaled */
            m->base = 10000, m->scaling = ATTN_SCALING_NONE;
            snprintf(m->src_base, sizeof m->src_base, "local layer: 10000 (llama.cpp)");
        }
    }
    gguf_scores(m, g, arch);
#undef IS
done:
    attn_gguf_close(g);
    return rc;
}

/* ---- writing the spec --------------------------------------------------------- */

typedef struct out {
    char buf[8192];
    size_t n;
} out;

static void line(out *o, const char *src, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void line(out *o, const char *src, const char *fmt, ...) {
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (src && src[0])
        o->n += (size_t)snprintf(o->buf + o->n, sizeof o->buf - o->n, "%-28s # %s\n", text, src);
    else
        o->n += (size_t)snprintf(o->buf + o->n, sizeof o->buf - o->n, "%s\n", text);
    if (o->n >= sizeof o->buf)
        o->n = sizeof o->buf - 1;
}

/* The shortest text that reads back as v. */
static const char *g17(double v, char *b) {
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(b, 32, "%.0f", v);
        return b;
    }
    for (int p = 1; p <= 17; p++) {
        snprintf(b, 32, "%.*g", p, v);
        if (strtod(b, NULL) == v)
            break;
    }
    return b;
}

static void emit(const imp *m, const char *name, int64_t max_tokens, const char *src_max, out *o) {
    char a[32];
    o->n = 0;
    o->buf[0] = 0;
    line(o, NULL, "# %s, layer %lld: imported by attnc import from %s", m->family,
         (long long)m->layer, m->file);
    line(o, NULL, "name: %s", name);
    line(o, m->src_heads, "heads: %lld", (long long)m->heads);
    line(o, m->src_kv, "kv_groups: %lld", (long long)m->kv);
    line(o, m->src_hd, "head_dim: %lld", (long long)m->head_dim);
    line(o, m->src_d, "d_model: %lld", (long long)m->d_model);
    line(o, "decoder self-attention", "causal: true");
    if (!m->rope) {
        line(o, "no rotary positions", "rope: none");
    } else {
        line(o, NULL, "rope:");
        line(o, m->src_base, "  base: %s", g17(m->base, a));
        line(o, m->src_style, "  style: %s",
             m->style == ATTN_ROPE_INTERLEAVED ? "interleaved" : "half");
        line(o, m->src_rot[0] ? m->src_rot : "head_dim", "  rotary_dim: %lld",
             (long long)m->rotary_dim);
        if (m->scaling == ATTN_SCALING_NONE) {
            line(o, m->src_scaling[0] ? m->src_scaling : "rope_scaling null", "  scaling: none");
        } else {
            static const char *const t[] = {"none", "linear", "llama3", "yarn"};
            line(o, NULL, "  scaling:");
            line(o, m->src_scaling, "    type: %s", t[m->scaling]);
            line(o, NULL, "    factor: %s", g17(m->factor, a));
            if (m->scaling == ATTN_SCALING_LLAMA3) {
                line(o, NULL, "    low_freq_factor: %s", g17(m->low, a));
                line(o, NULL, "    high_freq_factor: %s", g17(m->high, a));
            }
            if (m->scaling != ATTN_SCALING_LINEAR)
                line(o, "original_max_position_embeddings", "    original_max_position: %lld",
                     (long long)m->orig);
            if (m->scaling == ATTN_SCALING_YARN) {
                line(o, NULL, "    beta_fast: %s", g17(m->beta_fast, a));
                line(o, NULL, "    beta_slow: %s", g17(m->beta_slow, a));
                line(o, NULL, "    mscale: %s", g17(m->mscale, a));
                line(o, NULL, "    mscale_all_dim: %s", g17(m->mscale_all, a));
                line(o, NULL, "    truncate: %s", m->truncate ? "true" : "false");
                if (m->has_attn_factor)
                    line(o, NULL, "    attention_factor: %s", g17(m->attn_factor, a));
            }
        }
    }
    char wsrc[SRC + 32];
    snprintf(wsrc, sizeof wsrc, "%s%s",
             m->window || !m->src_window[0] ? "" : "none here: ", m->src_window);
    line(o, wsrc, "sliding_window: %lld", (long long)m->window);
    line(o, m->src_softcap, "softcap: %s", g17(m->softcap, a));
    if (m->qk_norm == ATTN_QK_NORM_NONE) {
        line(o, NULL, "qk_norm: none");
    } else {
        line(o, m->src_norm, "qk_norm:");
        line(o, NULL, "  type: rms");
        line(o, NULL, "  scope: %s", m->qk_norm == ATTN_QK_NORM_ALL ? "all" : "head");
        line(o, NULL, "  eps: %s", g17(m->eps, a));
        line(o, NULL, "  weight: %s", m->norm_weight ? "true" : "false");
        line(o, NULL, "  offset: %d", m->offset);
    }
    line(o, m->sinks ? m->src_sinks : NULL, "sinks: %s", m->sinks ? "true" : "false");
    line(o, m->alibi ? m->src_alibi : NULL, "alibi: %s", m->alibi ? "true" : "false");
    line(o, m->src_bias, "qkv_bias: %s", m->qkv_bias ? "true" : "false");
    line(o, m->src_bias, "o_bias: %s", m->o_bias ? "true" : "false");
    if (m->scale > 0)
        line(o, m->src_scale, "scale: %s", g17(m->scale, a));
    else
        line(o, "1/sqrt(head_dim)", "scale: auto");
    line(o, m->src_dtype, "dtype: %s", attn_dtype_name(m->dtype));
    line(o, NULL, "weights:");
    line(o, m->src_layout, "  layout: %s", attn_layout_name(m->layout));
    line(o, NULL, "kv_cache:");
    line(o, src_max, "  max_tokens: %lld", (long long)max_tokens);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

attnc_import_options attnc_import_options_default(void) {
    return (attnc_import_options){.name = NULL, .dtype = -1, .max_tokens = 0};
}

/* Reads the file at path into m: GGUF metadata, or a config.json. */
static int read_source(imp *m, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        diag_error(m->ctx, ATTNC_E_IO, (attnc_loc){m->file, 0, 0}, "cannot open: %s",
                   strerror(errno));
        return ATTNC_E_IO;
    }
    if (ends_with(path, ".gguf") || !ends_with(path, ".json")) {
        char magic[4] = {0};
        bool gguf = fread(magic, 1, 4, fp) == 4 && memcmp(magic, "GGUF", 4) == 0;
        fclose(fp);
        return gguf ? from_gguf(m, path) : fail(m, "neither a config.json nor a GGUF file");
    }
    char *text = malloc(1 << 20);
    size_t n = text ? fread(text, 1, 1 << 20, fp) : 0;
    fclose(fp);
    if (!text)
        return rt_error(m, ATTN_E_NOMEM, NULL);
    cJSON *root = n < (1 << 20) ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    if (!root)
        return fail(m, "malformed JSON (or larger than 1 MB)");
    int rc = from_config(m, root);
    cJSON_Delete(root);
    return rc;
}

attnc_status attnc_import(attnc_ctx *ctx, const char *path, int64_t layer,
                          const attnc_import_options *opt, char **yaml_text) {
    if (!ctx || !path || !yaml_text)
        return ATTNC_E_INVALID;
    attnc_import_options o = opt ? *opt : attnc_import_options_default();
    const char *file = arena_strndup(&ctx->arena, path, strlen(path));
    attnc_loc at = {file ? file : "?", 0, 0};
    if (layer < 0 || o.max_tokens < 0 || o.max_tokens > ATTN_MAX_TOKENS ||
        (o.dtype != -1 && (o.dtype < 0 || o.dtype >= ATTN_DTYPE_COUNT))) {
        diag_error(ctx, ATTNC_E_INVALID, at,
                   "import: expected layer >= 0 (%lld), max_tokens in 0..%lld (%lld) and dtype "
                   "-1 or an attn_dtype (%d)",
                   (long long)layer, (long long)ATTN_MAX_TOKENS, (long long)o.max_tokens, o.dtype);
        return ATTNC_E_INVALID;
    }
    imp *m = calloc(1, sizeof *m);
    if (!m)
        return ATTNC_E_NOMEM;
    m->ctx = ctx, m->file = at.file, m->layer = layer, m->dtype = ATTN_DTYPE_F32;
    int rc = read_source(m, path);
    if (rc) {
        free(m);
        return (attnc_status)rc;
    }
    if (o.dtype != -1) {
        m->dtype = (attn_dtype)o.dtype;
        snprintf(m->src_dtype, sizeof m->src_dtype, "--dtype");
    }
    int64_t max_tokens = o.max_tokens;
    char src_max[SRC];
    if (!max_tokens) {
        max_tokens = m->max_pos > 0 ? (m->max_pos < MAX_TOKENS_CAP ? m->max_pos : MAX_TOKENS_CAP)
                                    : MAX_TOKENS_UNKNOWN;
        if (m->max_pos > 0)
            snprintf(src_max, sizeof src_max, "%.100s (%lld), at most %d", m->src_max,
                     (long long)m->max_pos, MAX_TOKENS_CAP);
        else
            snprintf(src_max, sizeof src_max, "no context length given: %d", MAX_TOKENS_UNKNOWN);
    } else {
        snprintf(src_max, sizeof src_max, "--max-tokens");
    }
    char name[ATTN_NAME_MAX];
    if (o.name) {
        snprintf(name, sizeof name, "%s", o.name);
    } else {
        snprintf(name, sizeof name, "%s_layer%lld", m->family, (long long)m->layer);
        for (char *p = name; *p; p++)
            if (!isalnum((unsigned char)*p) && *p != '_')
                *p = '_';
    }
    out *text = malloc(sizeof *text);
    if (!text) {
        free(m);
        return ATTNC_E_NOMEM;
    }
    emit(m, name, max_tokens, src_max, text);
    free(m);
    /* the spec must stand on its own: validated as attnc check would */
    attn_config cfg;
    attnc_status st = attnc_spec_load_string(ctx, "<imported spec>", text->buf, text->n, &cfg);
    if (st != ATTNC_OK) {
        diag_error(ctx, st, at, "the imported spec above is not valid:\n%s", text->buf);
    } else if (!(*yaml_text = strdup(text->buf))) {
        st = ATTNC_E_NOMEM;
    }
    free(text);
    return st;
}
