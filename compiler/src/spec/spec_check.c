/* spec_check.c: the spec's semantic rules. Walks the node tree of
 * spec_yaml.c, checks every key's type and range, fills defaults, then
 * checks consistency between keys. It keeps going after an error so one
 * run reports every problem of a file (up to ATTNC_MAX_ERRORS). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_expr.h"
#include "spec/spec.h"

/* ---- keys of each mapping ------------------------------------------------ */

/* indexes are spec_key (spec.h) */
static const char *const top_keys[SPEC_K_COUNT] = {
    [SPEC_K_NAME] = "name",
    [SPEC_K_KV_GROUPS] = "kv_groups",
    [SPEC_K_KV_HEADS] = "kv_heads",
    [SPEC_K_HEAD_DIM] = "head_dim",
    [SPEC_K_ROPE] = "rope",
    [SPEC_K_SCALE] = "scale",
    [SPEC_K_DTYPE] = "dtype",
    [SPEC_K_KV_CACHE] = "kv_cache",
    [SPEC_K_QK_NORM] = "qk_norm",
    [SPEC_K_QUERY_TEMP] = "query_temperature",
    [SPEC_K_WEIGHTS] = "weights",
    [SPEC_K_K_BIAS] = "k_bias",
    [SPEC_K_CROSS] = "cross_attention",
    [SPEC_K_MLA] = "mla",
    [SPEC_K_COMPUTE] = "compute",
    [SPEC_K_ACTIVATIONS] = "activations",
    [SPEC_K_INPUTS] = "inputs",
    [SPEC_K_SCORE_MOD] = "score_mod",
    [SPEC_K_MASK_MOD] = "mask_mod",
#define ATTN_FIELD(kind, field, key)
#define ATTN_PLAIN(kind, field, key, token, def, lo, hi) [SPEC_K_##token] = key,
#include "attn_config.def"
#undef ATTN_FIELD
#undef ATTN_PLAIN
};

const char *spec_key_name(spec_key k) {
    return (unsigned)k < SPEC_K_COUNT ? top_keys[k] : NULL;
}

enum { R_BASE, R_STYLE, R_ROTARY_DIM, R_SCALING, R_COUNT };
static const char *const rope_keys[R_COUNT] = {"base", "style", "rotary_dim", "scaling"};

enum {
    S_TYPE,
    S_FACTOR,
    S_LOW,
    S_HIGH,
    S_ORIG,
    S_BETA_FAST,
    S_BETA_SLOW,
    S_MSCALE,
    S_MSCALE_ALL,
    S_TRUNCATE,
    S_ATTN_FACTOR,
    S_COUNT
};
static const char *const scaling_keys[S_COUNT] = {
    "type",
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "truncate",
    "attention_factor",
};

enum { N_TYPE, N_SCOPE, N_EPS, N_WEIGHT, N_OFFSET, N_COUNT };
static const char *const norm_keys[N_COUNT] = {"type", "scope", "eps", "weight", "offset"};

enum { T_FLOOR_SCALE, T_ATTN_SCALE, T_COUNT };
static const char *const temp_keys[T_COUNT] = {"floor_scale", "attn_scale"};

enum { X_MEMORY_DIM, X_COUNT };
static const char *const cross_keys[X_COUNT] = {"memory_dim"};

enum { M_Q_LORA, M_KV_LORA, M_NOPE, M_ROPE, M_V, M_EPS, M_COUNT };
static const char *const mla_keys[M_COUNT] = {
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "eps",
};

enum { W_LAYOUT, W_COUNT };
static const char *const weights_keys[W_COUNT] = {"layout"};

enum { C_DTYPE, C_BLOCK_TOKENS, C_MAX_TOKENS, C_COUNT };
static const char *const cache_keys[C_COUNT] = {"dtype", "block_tokens", "max_tokens"};

static const char *const dtype_names[] = {"f32", "f16", "bf16", "q8_0", "q4_0"};
static const char *const style_names[] = {"half", "interleaved"};
static const char *const scaling_names[] = {"none", "linear", "llama3", "yarn"};
static const char *const norm_types[] = {"rms"};
static const char *const layout_names[] = {"llama", "gptj", "neox", "falcon", "phi3", "bloom"};
static const char *const norm_scopes[] = {"head", "all"};

#define DEFAULT_ROPE_BASE 10000.0
#define DEFAULT_BLOCK_TOKENS 16
#define DEFAULT_MAX_TOKENS 4096

typedef struct checker {
    attnc_ctx *ctx;
    const char *file;
} checker;

static void err(checker *ck, attnc_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void err(checker *ck, attnc_loc loc, const char *fmt, ...) {
    char buf[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    diag_error(ck->ctx, ATTNC_E_SPEC, loc, "%s", buf);
}

/* ---- rendering what was found ------------------------------------------- */

/* Writes a short, printable description of node n: 12, 'twelve',
 * string "12", a mapping, a sequence, no value. */
static const char *found(const ynode *n, char *buf, size_t size) {
    if (n->kind == YNODE_MAP)
        return "a mapping";
    if (n->kind == YNODE_SEQ)
        return "a sequence";
    if (n->plain && n->len == 0)
        return "no value";
    char text[48];
    size_t o = 0, i = 0;
    for (; i < n->len && o < 40; i++) {
        unsigned char ch = (unsigned char)n->str[i];
        if (ch >= 0x20 && ch < 0x7f)
            text[o++] = (char)ch;
        else
            o += (size_t)snprintf(text + o, sizeof text - o, "\\x%02x", ch);
    }
    text[o] = 0;
    const char *more = i < n->len ? "..." : "";
    snprintf(buf, size, n->plain ? "%s%s" : "string \"%s%s\"", text, more);
    return buf;
}

/* ---- mappings ---------------------------------------------------------- */

/* Splits mapping m into vals[i] for each known key i; reports non-scalar,
 * unknown and duplicate keys. path is "" at top level or "rope." etc. */
static void take_map(checker *ck, const ynode *m, const char *path, const char *const *known,
                     int n_known, const ynode **vals, const ynode **keys) {
    for (int i = 0; i < n_known; i++)
        vals[i] = keys[i] = NULL;
    for (const ynode *k = m->first; k; k = k->next ? k->next->next : NULL) {
        const ynode *v = k->next;
        if (!v)
            break;
        if (k->kind != YNODE_SCALAR) {
            err(ck, k->loc, "%skeys must be plain words, found %s", path,
                k->kind == YNODE_MAP ? "a mapping" : "a sequence");
            continue;
        }
        int idx = -1;
        for (int i = 0; i < n_known; i++)
            if (strcmp(k->str, known[i]) == 0 && strlen(known[i]) == k->len)
                idx = i;
        if (idx < 0) {
            char buf[96];
            ynode word = *k; /* a quoted key is still a key, not a string value */
            word.plain = true;
            const char *near = attnc_suggest(k->str, known, (size_t)n_known);
            if (near) {
                err(ck, k->loc, "unknown key '%s%s'; did you mean '%s%s'?", path,
                    found(&word, buf, sizeof buf), path, near);
            } else {
                char list[512] = "";
                const char *prev = "";
                for (int i = 0; i < n_known; i++) { /* in alphabetical order */
                    const char *next = NULL;
                    for (int j = 0; j < n_known; j++)
                        if (strcmp(known[j], prev) > 0 && (!next || strcmp(known[j], next) < 0))
                            next = known[j];
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                             next);
                    prev = next;
                }
                err(ck, k->loc, "unknown key '%s%s'; known keys%s%s: %s", path,
                    found(&word, buf, sizeof buf), *path ? " of " : "", path, list);
            }
            continue;
        }
        if (keys[idx]) {
            err(ck, k->loc, "duplicate key '%s%s' (first given at %u:%u)", path, known[idx],
                keys[idx]->loc.line, keys[idx]->loc.col);
            continue;
        }
        keys[idx] = k;
        vals[idx] = v;
    }
}

/* ---- typed values -------------------------------------------------------- */

static bool is_int_text(const char *s) {
    if (*s == '+' || *s == '-')
        s++;
    if (!isdigit((unsigned char)*s))
        return false;
    while (isdigit((unsigned char)*s))
        s++;
    return *s == 0;
}

static bool is_num_text(const char *s, double *out) {
    if (!*s || isspace((unsigned char)*s))
        return false;
    /* strtod also takes hex, inf and nan: only decimal numbers are specs' */
    for (const char *p = s; *p; p++)
        if (!strchr("+-.0123456789eE", *p))
            return false;
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(d))
        return false;
    *out = d;
    return true;
}

/* An integer in lo..hi; key is the dotted name. */
static bool get_int(checker *ck, const ynode *v, const char *key, int64_t lo, int64_t hi,
                    int64_t *out) {
    char buf[128];
    double d;
    if (v->kind != YNODE_SCALAR || !v->plain || !is_int_text(v->str)) {
        const char *what = v->kind == YNODE_SCALAR && v->plain && is_num_text(v->str, &d)
                               ? "an integer (no fraction or exponent)"
                               : "an integer";
        err(ck, v->loc, "%s: expected %s, found %s", key, what, found(v, buf, sizeof buf));
        return false;
    }
    errno = 0;
    long long x = strtoll(v->str, NULL, 10);
    if (errno == ERANGE || x < lo || x > hi) {
        err(ck, v->loc, "%s: expected an integer in %lld..%lld, found %s", key, (long long)lo,
            (long long)hi, found(v, buf, sizeof buf));
        return false;
    }
    *out = x;
    return true;
}

/* A finite number; strictly above lo when lo_open, else at least lo. */
static bool get_num(checker *ck, const ynode *v, const char *key, double lo, bool lo_open,
                    double *out) {
    char buf[128];
    double d = 0;
    if (v->kind != YNODE_SCALAR || !v->plain || !is_num_text(v->str, &d)) {
        err(ck, v->loc, "%s: expected a number, found %s", key, found(v, buf, sizeof buf));
        return false;
    }
    if (lo_open ? !(d > lo) : !(d >= lo)) {
        err(ck, v->loc, "%s: expected a number %s %g, found %s", key, lo_open ? ">" : ">=", lo,
            found(v, buf, sizeof buf));
        return false;
    }
    *out = d;
    return true;
}

static bool get_bool(checker *ck, const ynode *v, const char *key, bool *out) {
    char buf[128];
    if (v->kind == YNODE_SCALAR && v->plain) {
        const char *s = v->str;
        if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) {
            *out = true;
            return true;
        }
        if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) {
            *out = false;
            return true;
        }
    }
    err(ck, v->loc, "%s: expected true or false, found %s", key, found(v, buf, sizeof buf));
    return false;
}

static bool get_enum(checker *ck, const ynode *v, const char *key, const char *const *names, int n,
                     int *out) {
    char buf[128], list[128] = "";
    if (v->kind == YNODE_SCALAR) {
        for (int i = 0; i < n; i++) {
            if (strcmp(v->str, names[i]) == 0 && strlen(names[i]) == v->len) {
                *out = i;
                return true;
            }
        }
    }
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                 i == 0       ? ""
                 : i == n - 1 ? " or "
                              : ", ",
                 names[i]);
    err(ck, v->loc, "%s: expected %s, found %s", key, list, found(v, buf, sizeof buf));
    return false;
}

static bool is_identifier(const char *s, size_t len) {
    if (len == 0 || strlen(s) != len || isdigit((unsigned char)s[0]))
        return false;
    for (size_t i = 0; i < len; i++)
        if (!(isalnum((unsigned char)s[i]) || s[i] == '_') || (unsigned char)s[i] >= 0x80)
            return false;
    return true;
}

/* ---- sections ------------------------------------------------------------ */

static bool is_none(const ynode *v) {
    return v->kind == YNODE_SCALAR && v->plain && strcmp(v->str, "none") == 0;
}

/* A section that is `none` or a mapping: whether v is a mapping, with
 * "key: expected a mapping (keys) or none, found ..." when it is neither. */
static bool section_map(checker *ck, const ynode *v, const char *key, const char *keys) {
    char buf[128];
    if (v->kind == YNODE_MAP)
        return true;
    if (!is_none(v))
        err(ck, v->loc, "%s: expected a mapping (%s) or none, found %s", key, keys,
            found(v, buf, sizeof buf));
    return false;
}

/* rope.scaling: `none` or a mapping whose keys match its type. */
static void check_scaling(checker *ck, const ynode *v, attn_config *c) {
    c->rope_scaling = ATTN_SCALING_NONE;
    if (is_none(v))
        return;
    if (v->kind != YNODE_MAP) {
        char buf[128];
        err(ck, v->loc, "rope.scaling: expected a mapping with 'type' or none, found %s",
            found(v, buf, sizeof buf));
        return;
    }
    const ynode *val[S_COUNT], *key[S_COUNT];
    take_map(ck, v, "rope.scaling.", scaling_keys, S_COUNT, val, key);
    int type = 0;
    if (!val[S_TYPE]) {
        err(ck, v->loc, "rope.scaling: missing required key 'type' (none, linear, llama3 or yarn)");
        return;
    }
    if (!get_enum(ck, val[S_TYPE], "rope.scaling.type", scaling_names, 4, &type))
        return;
    c->rope_scaling = (attn_rope_scaling)type;
    /* which keys each type takes: 2 required, 1 optional */
    static const char uses[4][S_COUNT] = {
        {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0},
        {2, 2, 0, 0, 2, 1, 1, 1, 1, 1, 1},
    };
    for (int i = 1; i < S_COUNT; i++) {
        if (uses[type][i] == 2 && !val[i])
            err(ck, v->loc, "rope.scaling: type %s needs key '%s'", scaling_names[type],
                scaling_keys[i]);
        else if (!uses[type][i] && val[i])
            err(ck, key[i]->loc, "rope.scaling.%s is not used by type %s", scaling_keys[i],
                scaling_names[type]);
    }
    bool factor_ok = val[S_FACTOR] && uses[type][S_FACTOR] &&
                     get_num(ck, val[S_FACTOR], "rope.scaling.factor", 0, true, &c->rope_factor);
    if (val[S_ORIG] && uses[type][S_ORIG])
        get_int(ck, val[S_ORIG], "rope.scaling.original_max_position", 1, ATTN_MAX_TOKENS,
                &c->rope_original_max_position);
    if (type == ATTN_SCALING_YARN) {
        /* Hugging Face _compute_yarn_parameters' defaults */
        c->rope_beta_fast = 32, c->rope_beta_slow = 1, c->rope_mscale = 1;
        c->rope_mscale_all_dim = 0, c->rope_truncate = true;
        bool fast_ok = !val[S_BETA_FAST] || get_num(ck, val[S_BETA_FAST], "rope.scaling.beta_fast",
                                                    0, true, &c->rope_beta_fast);
        bool slow_ok = !val[S_BETA_SLOW] || get_num(ck, val[S_BETA_SLOW], "rope.scaling.beta_slow",
                                                    0, true, &c->rope_beta_slow);
        /* equal is what Kimi K2 ships (1 and 1): the ramp is then one dim wide */
        if (fast_ok && slow_ok && !(c->rope_beta_fast >= c->rope_beta_slow))
            err(ck, (val[S_BETA_FAST] ? val[S_BETA_FAST] : val[S_BETA_SLOW])->loc,
                "rope.scaling.beta_fast (%g) must not be less than beta_slow (%g)",
                c->rope_beta_fast, c->rope_beta_slow);
        bool ms_ok = !val[S_MSCALE] ||
                     get_num(ck, val[S_MSCALE], "rope.scaling.mscale", 0, false, &c->rope_mscale);
        bool msa_ok =
            !val[S_MSCALE_ALL] || get_num(ck, val[S_MSCALE_ALL], "rope.scaling.mscale_all_dim", 0,
                                          false, &c->rope_mscale_all_dim);
        if (val[S_TRUNCATE])
            get_bool(ck, val[S_TRUNCATE], "rope.scaling.truncate", &c->rope_truncate);
        if (val[S_ATTN_FACTOR])
            get_num(ck, val[S_ATTN_FACTOR], "rope.scaling.attention_factor", 0, true,
                    &c->rope_attention_factor);
        else if (factor_ok && ms_ok && msa_ok)
            c->rope_attention_factor = attn_yarn_default_attention_factor(c);
        return;
    }
    if (type != ATTN_SCALING_LLAMA3)
        return;
    bool lo_ok = val[S_LOW] && get_num(ck, val[S_LOW], "rope.scaling.low_freq_factor", 0, true,
                                       &c->rope_low_freq_factor);
    bool hi_ok = val[S_HIGH] && get_num(ck, val[S_HIGH], "rope.scaling.high_freq_factor", 0, true,
                                        &c->rope_high_freq_factor);
    /* equal factors (Llama 4 Scout: 1 and 1) leave no band in between */
    if (lo_ok && hi_ok && !(c->rope_high_freq_factor >= c->rope_low_freq_factor))
        err(ck, val[S_HIGH]->loc,
            "rope.scaling.high_freq_factor (%g) must not be below low_freq_factor (%g)",
            c->rope_high_freq_factor, c->rope_low_freq_factor);
}

/* qk_norm: `none` or a mapping {type: rms, scope, eps, weight, offset}. */
static void check_qk_norm(checker *ck, const ynode *v, attn_config *c) {
    c->qk_norm = ATTN_QK_NORM_NONE;
    if (!section_map(ck, v, "qk_norm", "type, scope, eps, weight, offset"))
        return;
    const ynode *val[N_COUNT], *key[N_COUNT];
    take_map(ck, v, "qk_norm.", norm_keys, N_COUNT, val, key);
    int type = 0, scope = 0;
    if (!val[N_TYPE])
        err(ck, v->loc, "qk_norm: missing required key 'type' (rms)");
    else
        get_enum(ck, val[N_TYPE], "qk_norm.type", norm_types, 1, &type);
    bool scope_ok = false;
    if (!val[N_SCOPE])
        err(ck, v->loc, "qk_norm: missing required key 'scope' (head or all)");
    else
        scope_ok = get_enum(ck, val[N_SCOPE], "qk_norm.scope", norm_scopes, 2, &scope);
    c->qk_norm = scope_ok && scope == 1 ? ATTN_QK_NORM_ALL : ATTN_QK_NORM_HEAD;
    c->qk_norm_eps = 1e-6;
    c->qk_norm_weight = true;
    c->qk_norm_offset = 0;
    if (val[N_EPS])
        get_num(ck, val[N_EPS], "qk_norm.eps", 0, false, &c->qk_norm_eps);
    if (val[N_WEIGHT])
        get_bool(ck, val[N_WEIGHT], "qk_norm.weight", &c->qk_norm_weight);
    int64_t off = 0;
    if (val[N_OFFSET] && get_int(ck, val[N_OFFSET], "qk_norm.offset", 0, 1, &off))
        c->qk_norm_offset = (int32_t)off;
    if (val[N_OFFSET] && val[N_WEIGHT] && !c->qk_norm_weight && off)
        err(ck, val[N_OFFSET]->loc,
            "qk_norm.offset: 1 needs weight: true (there is no weight "
            "to offset)");
}

/* query_temperature: `none` or {floor_scale, attn_scale}. */
static void check_temperature(checker *ck, const ynode *v, attn_config *c) {
    if (!section_map(ck, v, "query_temperature", "floor_scale, attn_scale"))
        return;
    const ynode *val[T_COUNT], *key[T_COUNT];
    take_map(ck, v, "query_temperature.", temp_keys, T_COUNT, val, key);
    for (int i = 0; i < T_COUNT; i++)
        if (!val[i])
            err(ck, v->loc, "query_temperature: missing required key '%s'", temp_keys[i]);
    int64_t fs = 0;
    double as = 0;
    bool fs_ok =
        val[T_FLOOR_SCALE] &&
        get_int(ck, val[T_FLOOR_SCALE], "query_temperature.floor_scale", 1, ATTN_MAX_TOKENS, &fs);
    bool as_ok = val[T_ATTN_SCALE] &&
                 get_num(ck, val[T_ATTN_SCALE], "query_temperature.attn_scale", 0, false, &as);
    if (fs_ok && as_ok)
        c->temp_floor_scale = fs, c->temp_attn_scale = as;
}

/* weights: a mapping {layout}: how checkpoints store the projections. */
static void check_weights(checker *ck, const ynode *v, attn_config *c, const ynode **layout_at) {
    if (v->kind != YNODE_MAP) {
        char buf[96];
        err(ck, v->loc, "weights: expected a mapping {layout}, found %s",
            found(v, buf, sizeof buf));
        return;
    }
    const ynode *val[W_COUNT], *key[W_COUNT];
    take_map(ck, v, "weights.", weights_keys, W_COUNT, val, key);
    int l;
    if (val[W_LAYOUT] &&
        get_enum(ck, val[W_LAYOUT], "weights.layout", layout_names, ATTN_LAYOUT_COUNT, &l)) {
        c->weights_layout = (attn_layout)l;
        *layout_at = val[W_LAYOUT];
    }
}

/* rope: `none` or a mapping. rotary_dim is checked against head_dim by the
 * caller once both are known; *rotary_at receives its location. */
static void check_rope(checker *ck, const ynode *v, attn_config *c, const ynode **rotary_at) {
    *rotary_at = NULL;
    c->rope_style = ATTN_ROPE_NONE;
    if (!section_map(ck, v, "rope", "base, style, rotary_dim, scaling"))
        return;
    const ynode *val[R_COUNT], *key[R_COUNT];
    take_map(ck, v, "rope.", rope_keys, R_COUNT, val, key);
    c->rope_style = ATTN_ROPE_HALF;
    c->rope_base = DEFAULT_ROPE_BASE;
    if (val[R_BASE])
        get_num(ck, val[R_BASE], "rope.base", 1, true, &c->rope_base);
    int style = 0;
    if (val[R_STYLE] && get_enum(ck, val[R_STYLE], "rope.style", style_names, 2, &style))
        c->rope_style = style == 0 ? ATTN_ROPE_HALF : ATTN_ROPE_INTERLEAVED;
    if (val[R_ROTARY_DIM] &&
        get_int(ck, val[R_ROTARY_DIM], "rope.rotary_dim", 1, ATTN_MAX_HEAD_DIM, &c->rotary_dim))
        *rotary_at = val[R_ROTARY_DIM];
    if (val[R_SCALING])
        check_scaling(ck, val[R_SCALING], c);
}

/* mla: {q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
 * v_head_dim, eps (default 1e-6)} (Hugging Face DeepseekV3Config's
 * names). The q.k head dim it defines goes to head_dim, every head its
 * own K/V to kv_groups. False if a key is missing or bad. */
static bool check_mla(checker *ck, const ynode *v, attn_config *c) {
    char buf[128];
    if (v->kind != YNODE_MAP) {
        err(ck, v->loc,
            "mla: expected a mapping {q_lora_rank, kv_lora_rank, qk_nope_head_dim, "
            "qk_rope_head_dim, v_head_dim}, found %s",
            found(v, buf, sizeof buf));
        return false;
    }
    const ynode *val[M_COUNT], *key[M_COUNT];
    take_map(ck, v, "mla.", mla_keys, M_COUNT, val, key);
    int64_t *dst[M_EPS] = {&c->mla_q_lora_rank, &c->mla_kv_lora_rank, &c->mla_qk_nope_head_dim,
                           &c->mla_qk_rope_head_dim, &c->mla_v_head_dim};
    bool ok = true;
    for (int i = 0; i < M_EPS; i++) {
        char name[48];
        snprintf(name, sizeof name, "mla.%s", mla_keys[i]);
        if (!val[i]) {
            err(ck, v->loc, "mla: missing required key '%s'%s", mla_keys[i],
                i == M_Q_LORA ? " (0: a plain q_proj)" : "");
            ok = false;
        } else {
            ok &= get_int(ck, val[i], name, i == M_Q_LORA ? 0 : 1,
                          i == M_Q_LORA ? ATTN_MAX_D_MODEL : ATTN_MAX_HEAD_DIM, dst[i]);
        }
    }
    /* its sums and qk_rope_head_dim's parity: the runtime's (config.c check_mla) */
    c->mla_eps = 1e-6; /* DeepseekV3RMSNorm's default */
    if (val[M_EPS])
        ok &= get_num(ck, val[M_EPS], "mla.eps", 0, false, &c->mla_eps);
    if (!ok) /* MLA stays off: the rules of its dims would only repeat these errors */
        c->mla_q_lora_rank = c->mla_kv_lora_rank = c->mla_qk_nope_head_dim = 0,
        c->mla_qk_rope_head_dim = c->mla_v_head_dim = 0, c->mla_eps = 0;
    return ok;
}

/* What MLA defines itself: each such key given is an error at that key
 * (what it does not go with is the runtime's, config.c check_mla). */
static void check_mla_keys(checker *ck, const ynode *const *val, const ynode *const *key,
                           const ynode *rotary_at) {
    attnc_loc at = key[SPEC_K_MLA]->loc;
    const struct {
        int k;
        const char *why;
    } no[] = {
        {SPEC_K_KV_GROUPS, "every head has its own K and V, expanded from the latent"},
        {SPEC_K_KV_HEADS, "every head has its own K and V, expanded from the latent"},
        {SPEC_K_HEAD_DIM, "head_dim is qk_nope_head_dim + qk_rope_head_dim"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        if (val[no[i].k])
            err(ck, key[no[i].k]->loc, "%s does not go with mla (given at %u:%u): %s",
                top_keys[no[i].k], at.line, at.col, no[i].why);
    if (rotary_at)
        err(ck, rotary_at->loc,
            "rope.rotary_dim does not go with mla (given at %u:%u): RoPE turns the "
            "qk_rope_head_dim dims",
            at.line, at.col);
    if (!val[SPEC_K_D_MODEL])
        err(ck, at, "mla needs d_model (the config's hidden_size)");
}

/* cross_attention: none, or {memory_dim} (default d_model). */
static void check_cross(checker *ck, const ynode *v, attn_config *c) {
    char buf[128];
    if (v->kind == YNODE_SCALAR && v->plain && strcmp(v->str, "none") == 0)
        return;
    if (v->kind != YNODE_MAP) {
        err(ck, v->loc, "cross_attention: expected none or a mapping {memory_dim}, found %s",
            found(v, buf, sizeof buf));
        return;
    }
    const ynode *val[X_COUNT], *key[X_COUNT];
    take_map(ck, v, "cross_attention.", cross_keys, X_COUNT, val, key);
    c->memory_dim = c->d_model > 0 ? c->d_model : 1;
    if (val[X_MEMORY_DIM])
        get_int(ck, val[X_MEMORY_DIM], "cross_attention.memory_dim", 1, ATTN_MAX_D_MODEL,
                &c->memory_dim);
}

static void check_cache(checker *ck, const ynode *v, attn_config *c) {
    char buf[128];
    if (v->kind != YNODE_MAP) {
        err(ck, v->loc, "kv_cache: expected a mapping (dtype, block_tokens, max_tokens), found %s",
            found(v, buf, sizeof buf));
        return;
    }
    const ynode *val[C_COUNT], *key[C_COUNT];
    take_map(ck, v, "kv_cache.", cache_keys, C_COUNT, val, key);
    int dt;
    if (val[C_DTYPE] && get_enum(ck, val[C_DTYPE], "kv_cache.dtype", dtype_names, 4, &dt))
        c->kv_dtype = (attn_dtype)dt;
    bool max_ok = val[C_MAX_TOKENS] && get_int(ck, val[C_MAX_TOKENS], "kv_cache.max_tokens", 1,
                                               ATTN_MAX_TOKENS, &c->kv_max_tokens);
    bool blk_ok = val[C_BLOCK_TOKENS] && get_int(ck, val[C_BLOCK_TOKENS], "kv_cache.block_tokens",
                                                 1, ATTN_MAX_BLOCK_TOKENS, &c->kv_block_tokens);
    if ((max_ok || !val[C_MAX_TOKENS]) && (blk_ok || !val[C_BLOCK_TOKENS]) &&
        c->kv_block_tokens > c->kv_max_tokens)
        err(ck, (val[C_BLOCK_TOKENS] ? val[C_BLOCK_TOKENS] : val[C_MAX_TOKENS])->loc,
            "kv_cache.block_tokens (%lld) must not exceed kv_cache.max_tokens (%lld)",
            (long long)c->kv_block_tokens, (long long)c->kv_max_tokens);
}

/* Rules are checked in dependency order; report in source order, as a
 * reader goes through the file. Stable: equal locations keep their order,
 * and notes without a line (too many errors) stay last. */
static void sort_by_location(attnc_ctx *ctx, size_t from) {
    attnc_diag *d = ctx->diags;
    for (size_t i = from + 1; i < ctx->n_diags; i++) {
        attnc_diag x = d[i];
        uint64_t kx = x.loc.line ? (uint64_t)x.loc.line << 32 | x.loc.col : UINT64_MAX;
        size_t j = i;
        for (; j > from; j--) {
            const attnc_loc *l = &d[j - 1].loc;
            uint64_t kj = l->line ? (uint64_t)l->line << 32 | l->col : UINT64_MAX;
            if (kj <= kx)
                break;
            d[j] = d[j - 1];
        }
        d[j] = x;
    }
}

/* ---- plain keys (attn_config.def) ------------------------------------------ */

/* Sets every plain field of c to its default. */
static void plain_defaults(attn_config *c) {
    for (int k = SPEC_K_FIRST_PLAIN; k < SPEC_K_COUNT; k++) {
        const attn_config_field *f = spec_plain_field((spec_key)k);
        char *p = (char *)c + f->offset;
        if (f->kind == ATTN_KIND_I64)
            *(int64_t *)p = (int64_t)f->def;
        else if (f->kind == ATTN_KIND_F64)
            *(double *)p = f->def;
        else if (f->kind == ATTN_KIND_BOOL)
            *(bool *)p = f->def != 0;
    }
}

/* Each plain key given, by its kind and range, into its field of c;
 * ok[k] tells which were given and valid. */
static void check_plain(checker *ck, const ynode *const *val, attn_config *c, bool *ok) {
    char buf[128];
    for (int k = SPEC_K_FIRST_PLAIN; k < SPEC_K_COUNT; k++) {
        const attn_config_field *f = spec_plain_field((spec_key)k);
        const ynode *v = val[k];
        char *p = (char *)c + f->offset;
        ok[k] = false;
        if (!v)
            continue;
        if (f->kind == ATTN_KIND_I64) {
            ok[k] = get_int(ck, v, f->key, (int64_t)f->lo, (int64_t)f->hi, (int64_t *)p);
        } else if (f->kind == ATTN_KIND_F64) {
            double d;
            ok[k] = get_num(ck, v, f->key, f->lo, false, &d);
            if (ok[k] && d > f->hi)
                err(ck, v->loc, "%s: expected a number in %g..%g, found %s", f->key, f->lo, f->hi,
                    found(v, buf, sizeof buf));
            ok[k] = ok[k] && d <= f->hi;
            if (ok[k])
                *(double *)p = d;
        } else if (f->kind == ATTN_KIND_BOOL) {
            ok[k] = get_bool(ck, v, f->key, (bool *)p);
        } else {
            ATTNC_ASSERT(!"a plain key is I64, F64 or BOOL");
        }
    }
}

/* ---- the whole spec ------------------------------------------------------ */

/* What the checks of the top level share. */
typedef struct toplevel {
    const ynode *root;
    const ynode *val[SPEC_K_COUNT], *key[SPEC_K_COUNT]; /* each key's value and key node */
    bool ok[SPEC_K_COUNT];                              /* plain keys given and valid */
    bool mla, heads_ok, hd_ok, mla_ok;
    const ynode *rotary_at, *layout_at;
} toplevel;

/* The node of key path ("kv_cache.dtype") in t: the nested key's value,
 * else the top-level key holding it where its value is a mapping, or that
 * value; NULL where the spec has neither. */
static const ynode *locate_at(const toplevel *t, const char *path) {
    const char *dot = strchr(path, '.');
    size_t n = dot ? (size_t)(dot - path) : strlen(path);
    for (int k = 0; k < SPEC_K_COUNT; k++) {
        const ynode *v = t->val[k];
        if (!v || strlen(top_keys[k]) != n || strncmp(top_keys[k], path, n) != 0)
            continue;
        for (const ynode *e = dot && v->kind == YNODE_MAP ? v->first : NULL; e && e->next;
             e = e->next->next)
            if (strcmp(e->str, dot + 1) == 0)
                return e->next;
        return v->kind == YNODE_MAP ? t->key[k] : v; /* a section: its key */
    }
    return NULL;
}

/* Where byte `at` of scalar v's text is in the file: on its line, past
 * a quote; the scalar's start where the text runs over lines or holds
 * escapes (no column in the file is then that byte's). */
static attnc_loc loc_inside(const ynode *v, int32_t at) {
    attnc_loc loc = v->loc;
    bool escapes = !v->plain && memchr(v->str, '\\', v->len) != NULL;
    if (at < 0 || (size_t)at > v->len || memchr(v->str, '\n', (size_t)at) || escapes)
        return loc;
    loc.col += (uint32_t)at + (v->plain ? 0 : 1);
    return loc;
}

enum { I_PER, I_SHAPE, I_COUNT };
static const char *const input_keys[I_COUNT] = {"per", "shape"};

/* inputs: NAME: {per: token | sequence | weight, shape: [..]} into *in
 * (a weight's shape: 1 or 2 dims, integers or heads, the whole block's);
 * at[i] is input i's key. False after an error. */
static bool check_inputs(checker *ck, const toplevel *t, const attn_config *c, attn_inputs *in,
                         const ynode **at) {
    const ynode *m = t->val[SPEC_K_INPUTS];
    char buf[128];
    memset(in, 0, sizeof *in);
    if (!m)
        return true;
    if (m->kind != YNODE_MAP) {
        err(ck, m->loc, "inputs: expected a mapping of names to {per: ..}, found %s",
            found(m, buf, sizeof buf));
        return false;
    }
    bool ok = true;
    static const char *const pers[] = {"token", "sequence", "weight"};
    for (const ynode *k = m->first; k && k->next; k = k->next->next) {
        const ynode *v = k->next;
        if (k->kind != YNODE_SCALAR || !is_identifier(k->str, k->len) || k->len >= ATTN_NAME_MAX) {
            err(ck, k->loc,
                "inputs: a name must be a C identifier of at most %d characters, "
                "found %s",
                ATTN_NAME_MAX - 1, found(k, buf, sizeof buf));
            ok = false;
            continue;
        }
        static const char *const reserved[] = {
            "score", "q",   "kv",  "h",   "g",     "inf", "true", "false", "and",  "or",   "not",
            "where", "min", "max", "abs", "clamp", "exp", "log",  "sqrt",  "tanh", "floor"};
        bool taken = attn_inputs_find(in, k->str) >= 0;
        for (size_t r = 0; r < sizeof reserved / sizeof reserved[0]; r++)
            taken |= strcmp(k->str, reserved[r]) == 0;
        if (taken) {
            err(ck, k->loc, "inputs: '%s' is %s", k->str,
                attn_inputs_find(in, k->str) >= 0 ? "declared twice"
                                                  : "a name of the expression language");
            ok = false;
            continue;
        }
        if (in->n == ATTN_EXPR_MAX_INPUTS) {
            err(ck, k->loc, "inputs: at most %d", ATTN_EXPR_MAX_INPUTS);
            return false;
        }
        char path[ATTN_NAME_MAX + 16];
        snprintf(path, sizeof path, "inputs.%s.", k->str);
        if (v->kind != YNODE_MAP) {
            err(ck, v->loc,
                "inputs.%s: expected a mapping {per: token | sequence | weight}, "
                "found %s",
                k->str, found(v, buf, sizeof buf));
            ok = false;
            continue;
        }
        const ynode *vals[I_COUNT], *keys[I_COUNT];
        take_map(ck, v, path, input_keys, I_COUNT, vals, keys);
        attn_expr_input *x = &in->in[in->n];
        int per;
        snprintf(path, sizeof path, "inputs.%s.per", k->str);
        if (!vals[I_PER]) {
            err(ck, v->loc, "inputs.%s: missing key 'per' (token, sequence or weight)", k->str);
            ok = false;
            continue;
        }
        if (!get_enum(ck, vals[I_PER], path, pers, 3, &per)) {
            ok = false;
            continue;
        }
        *x = (attn_expr_input){.name = in->name[in->n], .per = (attn_input_per)per};
        memcpy(in->name[in->n], k->str, k->len + 1);
        const ynode *sh = vals[I_SHAPE];
        if (per != ATTN_INPUT_WEIGHT && sh) {
            err(ck, keys[I_SHAPE]->loc,
                "inputs.%s.shape: only a weight has a shape (a %s input is one int32 per %s)",
                k->str, pers[per], pers[per]);
            ok = false;
            continue;
        }
        if (per == ATTN_INPUT_WEIGHT) {
            if (!sh || sh->kind != YNODE_SEQ || sh->n < 1 || sh->n > 2) {
                err(ck, sh ? sh->loc : v->loc,
                    "inputs.%s.shape: a weight needs a shape of 1 or 2 dimensions, each an "
                    "integer or heads (e.g. [heads, 32])",
                    k->str);
                ok = false;
                continue;
            }
            int64_t n = 1;
            for (const ynode *d = sh->first; d; d = d->next) {
                int64_t dim = 0;
                snprintf(path, sizeof path, "inputs.%s.shape", k->str);
                if (d->kind == YNODE_SCALAR && d->plain && strcmp(d->str, "heads") == 0) {
                    if (!t->heads_ok)
                        return false; /* reported at heads */
                    /* the whole block's: a shard keeps the whole weight */
                    dim = c->heads;
                } else if (!get_int(ck, d, path, 1, ATTN_INPUT_MAX_ELEMENTS, &dim)) {
                    ok = false;
                    break;
                }
                x->dims[x->rank++] = dim;
                n *= dim;
            }
            if (x->rank != (int32_t)sh->n)
                continue;
            if (n > ATTN_INPUT_MAX_ELEMENTS) {
                err(ck, sh->loc, "inputs.%s.shape: %lld elements; at most %lld", k->str,
                    (long long)n, (long long)ATTN_INPUT_MAX_ELEMENTS);
                ok = false;
                continue;
            }
        }
        at[in->n++] = k;
    }
    return ok;
}

/* inputs, score_mod and mask_mod: parsed and checked (attn_expr.h),
 * errors pointing inside the string, an input no expression reads
 * refused; the config keeps their canonical texts. */
static void check_exprs(checker *ck, toplevel *t, attn_config *c) {
    const struct {
        int key;
        const char *name;
        attn_expr_kind kind;
        char *dst;
    } x[2] = {{SPEC_K_SCORE_MOD, "score_mod", ATTN_EXPR_SCORE_MOD, c->score_mod},
              {SPEC_K_MASK_MOD, "mask_mod", ATTN_EXPR_MASK_MOD, c->mask_mod}};
    char buf[128];
    attn_inputs in;
    const ynode *at_input[ATTN_EXPR_MAX_INPUTS];
    if (!check_inputs(ck, t, c, &in, at_input))
        return;
    if (attn_inputs_print(&in, c->inputs, ATTN_EXPR_TEXT_MAX) >= ATTN_EXPR_TEXT_MAX) {
        err(ck, t->key[SPEC_K_INPUTS]->loc,
            "inputs: too many to declare (at most %d bytes as "
            "attnc prints them)",
            ATTN_EXPR_TEXT_MAX - 1);
        return;
    }
    attn_expr *e = malloc(sizeof *e);
    if (!e) {
        err(ck, t->root->loc, "out of memory");
        return;
    }
    uint32_t used = 0;
    bool parsed = true;
    for (int i = 0; i < 2; i++) {
        const ynode *v = t->val[x[i].key];
        if (!v)
            continue;
        if (v->kind != YNODE_SCALAR || strlen(v->str) != v->len) {
            err(ck, v->loc, "%s: expected an expression in a string, found %s", x[i].name,
                found(v, buf, sizeof buf));
            parsed = false;
            continue;
        }
        attn_msg m;
        int32_t at;
        if (attn_expr_canonical(v->str, x[i].kind, in.in, in.n, x[i].dst, ATTN_EXPR_TEXT_MAX, &m,
                                &at) != ATTN_OK) {
            err(ck, loc_inside(v, at), "%s: %s", x[i].name, m.text);
            parsed = false;
        } else if (attn_expr_parse(v->str, x[i].kind, in.in, in.n, e, NULL, NULL) == ATTN_OK) {
            used |= e->inputs_used;
        }
    }
    free(e);
    for (int i = 0; parsed && i < in.n; i++)
        if (!(used >> i & 1))
            err(ck, at_input[i]->loc,
                "inputs: '%s' is read by neither score_mod nor mask_mod; remove it or use it",
                in.name[i]);
}

/* name, heads, head_dim (or mla's), kv_groups (or kv_heads) and d_model. */
static void check_dims(checker *ck, toplevel *t, attn_config *c) {
    char buf[128];
    if (t->val[SPEC_K_NAME]) {
        const ynode *v = t->val[SPEC_K_NAME];
        if (v->kind != YNODE_SCALAR || !is_identifier(v->str, v->len))
            err(ck, v->loc, "name: expected a C identifier, found %s", found(v, buf, sizeof buf));
        else if (v->len >= ATTN_NAME_MAX)
            err(ck, v->loc, "name: expected at most %d characters, found %zu", ATTN_NAME_MAX - 1,
                v->len);
        else
            memcpy(c->name, v->str, v->len + 1);
    }
    t->heads_ok = t->ok[SPEC_K_HEADS];
    t->hd_ok = !t->mla && t->val[SPEC_K_HEAD_DIM] &&
               get_int(ck, t->val[SPEC_K_HEAD_DIM], "head_dim", 1, ATTN_MAX_HEAD_DIM, &c->head_dim);
    t->mla_ok = t->mla && check_mla(ck, t->val[SPEC_K_MLA], c);
    if (t->mla_ok) {
        c->head_dim = c->mla_qk_nope_head_dim + c->mla_qk_rope_head_dim;
        t->hd_ok = true;
    }

    const ynode *kv = t->val[SPEC_K_KV_GROUPS];
    const char *kv_key = "kv_groups";
    if (t->val[SPEC_K_KV_HEADS]) {
        if (kv)
            err(ck, t->key[SPEC_K_KV_HEADS]->loc,
                "kv_heads is another name for kv_groups (given at %u:%u); give one of them",
                t->key[SPEC_K_KV_GROUPS]->loc.line, t->key[SPEC_K_KV_GROUPS]->loc.col);
        else
            kv = t->val[SPEC_K_KV_HEADS], kv_key = "kv_heads";
    }
    if (t->mla)
        kv = NULL; /* refused below (check_mla_keys) */
    if (kv)
        get_int(ck, kv, kv_key, 1, ATTN_MAX_HEADS, &c->kv_groups);
    else if (t->heads_ok)
        c->kv_groups = c->heads; /* MHA */
    /* heads % kv_groups and heads * head_dim: the runtime's (config.c check_heads) */
    if (!t->val[SPEC_K_D_MODEL] && t->heads_ok && t->hd_ok) {
        c->d_model = c->heads * c->head_dim;
        if (c->d_model > ATTN_MAX_D_MODEL)
            err(ck, t->root->loc, "d_model (default heads * head_dim = %lld) exceeds the limit %d",
                (long long)c->d_model, ATTN_MAX_D_MODEL);
    }
}

/* rope and rotary_dim. */
static void check_positions(checker *ck, toplevel *t, attn_config *c) {
    t->rotary_at = NULL;
    if (t->val[SPEC_K_ROPE])
        check_rope(ck, t->val[SPEC_K_ROPE], c, &t->rotary_at);
    if (t->mla) {
        c->rotary_dim = c->mla_qk_rope_head_dim;
    } else if (c->rope_style != ATTN_ROPE_NONE) {
        if (!t->rotary_at && t->hd_ok)
            c->rotary_dim = c->head_dim;
        /* a given rotary_dim is the runtime's rule (config.c check_rope) */
        if (!t->rotary_at && t->hd_ok && c->head_dim % 2)
            err(ck, t->val[SPEC_K_ROPE]->loc,
                "rope: rotary_dim defaults to head_dim (%lld), which is odd; give an even "
                "rope.rotary_dim",
                (long long)c->head_dim);
    }
}

/* scale (auto or a number) and the weights' dtype. */
static void check_scale_dtype(checker *ck, toplevel *t, attn_config *c) {
    char buf[128];
    const ynode *sv = t->val[SPEC_K_SCALE];
    if (sv && !(sv->kind == YNODE_SCALAR && sv->plain && strcmp(sv->str, "auto") == 0)) {
        double d;
        if (sv->kind != YNODE_SCALAR || !sv->plain || !is_num_text(sv->str, &d))
            err(ck, sv->loc, "scale: expected auto or a number, found %s",
                found(sv, buf, sizeof buf));
        else if (get_num(ck, sv, "scale", 0, true, &c->scale))
            c->scale_auto = false;
    }
    if (c->scale_auto && t->hd_ok)
        c->scale = 1.0 / sqrt((double)c->head_dim);
    /* DeepseekV3Attention: YaRN with mscale_all_dim scales the softmax by
     * yarn_get_mscale(factor, mscale_all_dim)^2 (attn_mla_softmax_mscale) */
    if (c->scale_auto && t->mla_ok)
        c->scale *= attn_mla_softmax_mscale(c);
    int dt;
    if (t->val[SPEC_K_DTYPE] && get_enum(ck, t->val[SPEC_K_DTYPE], "dtype", dtype_names, 5, &dt))
        c->dtype = (attn_dtype)dt;
}

/* kv_cache, qk_norm, query_temperature, compute, activations and weights. */
static void check_sections(checker *ck, toplevel *t, attn_config *c) {
    if (t->val[SPEC_K_KV_CACHE])
        check_cache(ck, t->val[SPEC_K_KV_CACHE], c);
    if (t->val[SPEC_K_QK_NORM])
        check_qk_norm(ck, t->val[SPEC_K_QK_NORM], c);
    if (t->val[SPEC_K_QUERY_TEMP])
        check_temperature(ck, t->val[SPEC_K_QUERY_TEMP], c);
    int e;
    static const char *const compute_names[] = {"f32", "bf16"};
    static const char *const act_names[] = {"f32", "q8_0"};
    if (t->val[SPEC_K_COMPUTE] &&
        get_enum(ck, t->val[SPEC_K_COMPUTE], "compute", compute_names, 2, &e))
        c->compute = e ? ATTN_DTYPE_BF16 : ATTN_DTYPE_F32;
    if (t->val[SPEC_K_ACTIVATIONS] &&
        get_enum(ck, t->val[SPEC_K_ACTIVATIONS], "activations", act_names, 2, &e))
        c->activations = e ? ATTN_DTYPE_Q8_0 : ATTN_DTYPE_F32;
    t->layout_at = NULL;
    if (t->val[SPEC_K_WEIGHTS])
        check_weights(ck, t->val[SPEC_K_WEIGHTS], c, &t->layout_at);
}

/* k_bias, the keys mla defines itself, and cross_attention (which makes
 * causal default to false). */
static void check_modes(checker *ck, toplevel *t, attn_config *c) {
    if (t->val[SPEC_K_K_BIAS]) {
        bool kb = true;
        if (get_bool(ck, t->val[SPEC_K_K_BIAS], "k_bias", &kb) && kb != c->qkv_bias) {
            if (kb)
                err(ck, t->val[SPEC_K_K_BIAS]->loc,
                    "k_bias: true needs qkv_bias: true (a K bias alone is not supported)");
            else
                c->no_k_bias = true;
        }
    }
    if (t->mla)
        check_mla_keys(ck, t->val, t->key, t->rotary_at);
    if (t->val[SPEC_K_CROSS])
        check_cross(ck, t->val[SPEC_K_CROSS], c);
    if (c->memory_dim > 0 && !t->val[SPEC_K_CAUSAL])
        c->causal = false;
}

/* The value of key path ("kv_cache.dtype") in t, or what holds it where
 * the spec left it out: the other spelling the spec used (kv_heads, with a
 * note for the message), mla for the head_dim and rope it defines; the
 * top of the file. */
static attnc_loc locate(const toplevel *t, const char *path, const char **note) {
    static const char *const aliases[][3] = {
        {"kv_groups", "kv_heads", " (kv_heads is another name for kv_groups)"},
        {"head_dim", "mla", ""},
        {"rope", "mla", ""},
    };
    *note = "";
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(path, aliases[i][0]) == 0 && !locate_at(t, path))
            path = aliases[i][1], *note = aliases[i][2];
    const ynode *v = locate_at(t, path);
    return v ? v->loc : t->root->loc;
}

/* What report_problem needs. */
typedef struct problems {
    checker *ck;
    const toplevel *t;
} problems;

static void report_problem(const char *key, const char *text, void *user) {
    problems *p = user;
    const char *note = "";
    attnc_loc at = key ? locate(p->t, key, &note) : p->t->root->loc;
    err(p->ck, at, "%s%s", text, note);
}

attnc_status spec_check(attnc_ctx *ctx, const char *file, const ynode *root, attn_config *out,
                        spec_locs *locs) {
    checker ck_ = {ctx, file}, *ck = &ck_;
    char buf[128];
    size_t first_diag = ctx->n_diags;
    attnc_loc top = {file, 1, 1};
    if (!root) {
        err(ck, top, "empty spec: expected a mapping with at least name, heads and head_dim");
        return ATTNC_E_SPEC;
    }
    if (root->kind != YNODE_MAP) {
        err(ck, root->loc, "expected a mapping at top level, found %s",
            found(root, buf, sizeof buf));
        return ATTNC_E_SPEC;
    }
    toplevel t = {.root = root};
    const ynode **val = t.val, **key = t.key;
    take_map(ck, root, "", top_keys, SPEC_K_COUNT, val, key);

    attn_config c = {
        .kv_groups = 0,
        .rope_style = ATTN_ROPE_NONE,
        .scale_auto = true,
        .dtype = ATTN_DTYPE_F32,
        .kv_dtype = ATTN_DTYPE_F32,
        .compute = ATTN_DTYPE_F32,
        .kv_block_tokens = DEFAULT_BLOCK_TOKENS,
        .kv_max_tokens = DEFAULT_MAX_TOKENS,
    };
    static const char *const required[] = {"name", "heads", "head_dim"};
    static const int required_idx[] = {SPEC_K_NAME, SPEC_K_HEADS, SPEC_K_HEAD_DIM};
    plain_defaults(&c);
    check_plain(ck, val, &c, t.ok);
    t.mla = val[SPEC_K_MLA] != NULL; /* it defines head_dim itself */
    for (int i = 0; i < (t.mla ? 2 : 3); i++)
        if (!val[required_idx[i]])
            err(ck, root->loc, "missing required key '%s'", required[i]);

    check_dims(ck, &t, &c);
    check_positions(ck, &t, &c);
    check_scale_dtype(ck, &t, &c);
    check_sections(ck, &t, &c);
    check_modes(ck, &t, &c);
    check_exprs(ck, &t, &c);

    /* the rules between fields are the runtime's (attn_config_problems),
     * each reported at its key; they read fields that must be valid first */
    bool parsed = true;
    for (size_t i = first_diag; i < ctx->n_diags; i++)
        parsed &= ctx->diags[i].sev != ATTNC_SEV_ERROR;
    if (parsed) {
        problems p = {ck, &t};
        attn_config_problems(&c, report_problem, &p);
    }
    sort_by_location(ctx, first_diag);
    attnc_status st = diag_first_code(ctx);
    if (st != ATTNC_OK)
        return st;
    *out = c;
    if (locs)
        for (int i = 0; i < SPEC_K_COUNT; i++)
            locs->key[i] = key[i] ? key[i]->loc : root->loc;
    if (locs && !key[SPEC_K_KV_GROUPS] && key[SPEC_K_KV_HEADS])
        locs->key[SPEC_K_KV_GROUPS] = key[SPEC_K_KV_HEADS]->loc;
    return ATTNC_OK;
}
