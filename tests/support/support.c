/* support.c: test fixtures (see support.h). */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "attn_expr.h"
#include "attnc.h"
#include "support.h"

extern char **environ;

char *tmpdir_new(void) {
    const char *base = getenv("TMPDIR");
    char buf[512];
    snprintf(buf, sizeof buf, "%s/attnc-test-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(buf);
    assert_non_null(d);
    return strdup(d);
}

void tmpdir_remove(char *dir) {
    if (!dir)
        return;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                char p[1024];
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                if (unlink(p) != 0)
                    rmdir(p);
            }
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

const char *path_in(const char *dir, const char *name) {
    static char bufs[8][1024];
    static int at;
    char *b = bufs[at++ % 8];
    snprintf(b, 1024, "%s/%s", dir, name);
    return b;
}

int dir_count(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    size_t k;
    while (b && (k = fread(b + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (cap - len < 2) {
            char *nb = realloc(b, cap *= 2);
            if (!nb)
                free(b);
            b = nb;
        }
    }
    fclose(f);
    if (b)
        b[len] = 0;
    if (n)
        *n = len;
    return b;
}

int run_cmd(const char *const *argv, const char *out_path, const char *err_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path ? out_path : "/dev/null",
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path ? err_path : "/dev/null",
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    assert_int_equal(rc, 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

attn_config config_small(int64_t heads, int64_t kv, int64_t head_dim, int64_t d_model) {
    attn_config c = {
        .name = "t",
        .heads = heads,
        .kv_groups = kv,
        .head_dim = head_dim,
        .d_model = d_model,
        .causal = true,
        .rope_style = ATTN_ROPE_NONE,
        .scale_auto = true,
        .scale = 1.0 / sqrt((double)head_dim),
        .dtype = ATTN_DTYPE_F32,
        .kv_dtype = ATTN_DTYPE_F32,
        .kv_block_tokens = 16,
        .kv_max_tokens = 4096,
    };
    return c;
}

double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || isnan(d))
            num = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > den)
            den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

double rnd_unit(uint64_t *s) {
    float f;
    attn_random_uniform(s, &f, 1, 1.0);
    return f;
}

float *random_floats(size_t n, uint64_t seed) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    attn_random_uniform(&seed, x, n, sqrt(3.0));
    return x;
}

void write_raw_safetensors(const char *path, const char *header, uint64_t hlen, size_t data_len) {
    size_t hl = strlen(header);
    if (hlen == UINT64_MAX)
        hlen = hl;
    size_t n = 8 + hl + data_len;
    unsigned char *b = calloc(1, n);
    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(b + 8, header, hl);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hl + i] = (unsigned char)i;
    write_file(path, b, n);
    free(b);
}

int cli_fixture_setup(void **state) {
    cli_fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->dir = tmpdir_new();
    snprintf(f->out, sizeof f->out, "%s.out", f->dir);
    snprintf(f->err, sizeof f->err, "%s.err", f->dir);
    *state = f;
    return 0;
}

int cli_fixture_teardown(void **state) {
    cli_fixture *f = *state;
    remove(f->out);
    remove(f->err);
    tmpdir_remove(f->dir);
    free(f);
    return 0;
}

/* ---- GGUF ---------------------------------------------------------------- */

typedef struct wbuf {
    unsigned char *p;
    size_t n, cap;
} wbuf;

static void put(wbuf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_le(wbuf *b, uint64_t v, int bytes) {
    unsigned char c[8];
    for (int i = 0; i < bytes; i++)
        c[i] = (unsigned char)(v >> (8 * i));
    put(b, c, (size_t)bytes);
}

static void put_str(wbuf *b, const char *s) {
    put_le(b, strlen(s), 8);
    put(b, s, strlen(s));
}

void write_gguf(const char *path, const test_gguf_kv *kv, int n_kv, const test_gguf_tensor *t,
                int n_t, uint32_t alignment) {
    wbuf b = {0};
    put(&b, "GGUF", 4);
    put_le(&b, 3, 4);
    put_le(&b, (uint64_t)n_t, 8);
    put_le(&b, (uint64_t)n_kv + (alignment != 32), 8);
    if (alignment != 32) {
        put_str(&b, "general.alignment");
        put_le(&b, ATTN_GGUF_UINT32, 4);
        put_le(&b, alignment, 4);
    }
    for (int i = 0; i < n_kv; i++) {
        put_str(&b, kv[i].key);
        put_le(&b, (uint64_t)kv[i].type, 4);
        switch (kv[i].type) {
        case ATTN_GGUF_UINT32:
        case ATTN_GGUF_INT32: put_le(&b, (uint64_t)kv[i].i, 4); break;
        case ATTN_GGUF_BOOL: put_le(&b, (uint64_t)kv[i].i, 1); break;
        case ATTN_GGUF_FLOAT32: {
            float f = (float)kv[i].f;
            uint32_t u;
            memcpy(&u, &f, 4);
            put_le(&b, u, 4);
            break;
        }
        case ATTN_GGUF_STRING: put_str(&b, kv[i].s); break;
        case ATTN_GGUF_ARRAY:
            put_le(&b, ATTN_GGUF_INT32, 4);
            put_le(&b, (uint64_t)kv[i].n, 8);
            for (int j = 0; j < kv[i].n; j++)
                put_le(&b, (uint32_t)kv[i].arr[j], 4);
            break;
        default: fail_msg("write_gguf: type %d", kv[i].type);
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n_t; i++) {
        put_str(&b, t[i].name);
        put_le(&b, (uint64_t)t[i].ndim, 4);
        for (int d = t[i].ndim - 1; d >= 0; d--) /* ne[0] fastest */
            put_le(&b, (uint64_t)t[i].shape[d], 8);
        put_le(&b, t[i].type, 4);
        put_le(&b, off, 8);
        off += (t[i].nbytes + alignment - 1) / alignment * alignment;
    }
    static const unsigned char zero[256];
    while (b.n % alignment)
        put(&b, zero, 1);
    for (int i = 0; i < n_t; i++) {
        put(&b, t[i].data, t[i].nbytes);
        while (b.n % alignment)
            put(&b, zero, 1);
    }
    write_file(path, b.p, b.n);
    free(b.p);
}

void *to_half(const float *x, size_t n, bool bf16) {
    /* through the runtime's own rounding would make the test circular:
     * bit arithmetic here (normal numbers only; tests use small values) */
    uint16_t *h = malloc((n ? n : 1) * 2);
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        if (bf16) {
            h[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
            continue;
        }
        uint32_t sign = (u >> 16) & 0x8000, man = u & 0x7fffff;
        int e = (int)((u >> 23) & 0xff) - 127 + 15;
        if (x[i] == 0) {
            h[i] = (uint16_t)sign;
        } else if (e <= 0) { /* subnormal half */
            man |= 0x800000;
            int shift = 14 - e;
            uint32_t v = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
            v += rem > half || (rem == half && (v & 1));
            h[i] = (uint16_t)(sign | v);
        } else {
            uint32_t v = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fff;
            v += rem > 0x1000 || (rem == 0x1000 && (v & 1));
            h[i] = (uint16_t)(sign | v);
        }
    }
    return h;
}

char *file_text(const char *path) {
    char *s = read_file(path, NULL);
    if (!s)
        fail_msg("cannot read %s", path);
    return s;
}

void assert_file_has(const char *path, const char *want) {
    char *s = file_text(path);
    if (!strstr(s, want))
        fail_msg("%s lacks '%s':\n%s", path, want, s);
    free(s);
}

attnc_options options_without_passes(const char **names) {
    int n = 0;
    for (; attnc_pass_name(n); n++) {
        assert_true(n < 16);
        names[n] = attnc_pass_name(n);
    }
    attnc_options o = attnc_options_default();
    o.disabled_passes = names;
    o.n_disabled_passes = n;
    return o;
}

attnc_jit *jit_or_fail(const char *path, const attnc_options *o) {
    attnc_ctx *ctx = attnc_ctx_new();
    assert_non_null(ctx);
    attnc_jit *jit = NULL;
    attnc_status st = attnc_jit_compile_file(ctx, path, o, &jit);
    if (st != ATTNC_OK) {
        char text[4096];
        attnc_diag_text(ctx, text, sizeof text);
        fail_msg("compiling %s: %s\n%s", path, attnc_status_str(st), text);
    }
    attnc_ctx_free(ctx);
    return jit;
}

void print_diags(attnc_ctx *ctx) {
    char buf[1024];
    for (size_t i = 0; i < attnc_diag_count(ctx); i++) {
        attnc_diag_format(attnc_diag_get(ctx, i), buf, sizeof buf);
        print_error("%s\n", buf);
    }
}

const char *spec_path(const char *name) {
    static char buf[512];
    snprintf(buf, sizeof buf, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, name);
    return buf;
}

const char *write_spec(const char *dir, const attn_config *c, const char *name) {
    char *yaml = attnc_spec_to_yaml(c); /* attnc_lib: linked by every test */
    const char *path = path_in(dir, name);
    write_file(path, yaml, strlen(yaml));
    free(yaml);
    return path;
}

const char *const shipped_specs[] = {
    "seed",
    "llama2_7b",
    "llama3_8b",
    "mistral_7b",
    "qwen2_7b",
    "gemma2_9b",
    "falcon_7b",
    "gptj_6b",
    "qwen3_8b",
    "gemma3_12b_local",
    "gemma3_12b_global",
    "gpt_oss_20b_sliding",
    "gpt_oss_20b_full",
    "olmo2_7b",
    "llama4_scout_local",
    "llama4_scout_global",
    "bloom_7b1",
    "phi3_mini",
    "whisper_large_v3_cross",
    "mllama_11b_cross",
    "deepseek_v2_lite",
    "deepseek_v3",
    "kimi_k2",
    "streaming_llm",
    "dilated_window",
    "document_mask",
    "prefix_lm",
    "t5_relative_bias",
    "softcap_expr",
    "alibi_expr",
};
const size_t n_shipped_specs = sizeof shipped_specs / sizeof shipped_specs[0];

double kv_tolerance(attn_dtype kv) {
    return kv == ATTN_DTYPE_F32 ? 1e-4 : kv == ATTN_DTYPE_BF16 ? 1.6e-2 : 2e-3;
}

/* ---- JIT against the reference ------------------------------------------- */

attn_config load_spec_file(const char *path) {
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    assert_int_equal(attnc_spec_load_file(ctx, path, &c), ATTNC_OK);
    attnc_ctx_free(ctx);
    return c;
}

/* Runs T tokens of x in chunks through the kernels of jit. */
void give_inputs(const attn_config *c, attn_cache *cache, int32_t seq, attn_ref *r, int64_t at,
                 int64_t n, int64_t len, int32_t value) {
    attn_inputs in;
    assert_int_equal(attn_inputs_parse(c->inputs, &in, NULL), ATTN_OK);
    int32_t *v = malloc((size_t)(n + 1) * sizeof *v);
    for (int64_t p = 0; p < n; p++)
        v[p] = (int32_t)((at + p) / len);
    for (int i = 0; i < in.n; i++) {
        bool token = in.in[i].per == ATTN_INPUT_TOKEN;
        if (in.in[i].per == ATTN_INPUT_WEIGHT || (!token && at > 0))
            continue;
        int64_t first = token ? at : 0, k = token ? n : 1;
        const int32_t *x = token ? v : &value;
        attn_status st = cache ? attn_seq_set_input(cache, seq, in.name[i], first, k, x)
                               : attn_ref_set_input(r, in.name[i], first, k, x, NULL);
        if (st != ATTN_OK)
            fail_msg("set_input %s: %s", in.name[i], cache ? attn_cache_error(cache) : "");
    }
    free(v);
}

/* T tokens of x through jit's kernels (cache NULL: the reference engine
 * of w), chunk tokens a call, the inputs given before each (give_inputs). */
static void run_calls(const attnc_jit *jit, const attn_weights *w, int64_t T, const float *x,
                      float *y, int64_t chunk, int threads, int64_t len, int32_t value) {
    attn_block_options bo = attn_block_options_default();
    bo.n_threads = threads;
    attn_block *b = NULL;
    attn_cache *c = NULL;
    attn_ref *r = NULL;
    int32_t s = 0;
    if (jit) {
        assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &bo, &b), ATTN_OK);
        assert_int_equal(attn_block_set_weights(b, w), ATTN_OK);
        assert_int_equal(attn_cache_new(b, T, &c), ATTN_OK);
        assert_int_equal(attn_seq_new(c, &s), ATTN_OK);
    } else {
        assert_int_equal(attn_ref_new(w, T, &r, NULL), ATTN_OK);
    }
    int64_t D = w->cfg.d_model;
    for (int64_t at = 0; at < T; at += chunk) {
        int32_t n = (int32_t)(T - at < chunk ? T - at : chunk);
        give_inputs(&w->cfg, c, s, r, at, n, len, value);
        if (c && attn_forward(b, c, 1, &s, &n, x + at * D, y + at * D) != ATTN_OK)
            fail_msg("attn_forward: %s", attn_cache_error(c));
        if (r)
            assert_int_equal(attn_ref_forward(r, n, x + at * D, y + at * D, NULL), ATTN_OK);
    }
    if (c)
        assert_int_equal(attn_seq_len(c, s), T);
    attn_cache_free(c);
    attn_block_free(b);
    attn_ref_free(r);
}

void run_jit(const attnc_jit *jit, const attn_weights *w, int64_t T, const float *x, float *y,
             int64_t chunk, int threads) {
    run_calls(jit, w, T, x, y, chunk, threads, 64, 7);
}

void run_ref(const attn_weights *w, int64_t T, const float *x, float *y) {
    run_calls(NULL, w, T, x, y, T, 1, 64, 7);
}

/* jit_vs_ref's work, the reference fed ref_chunk tokens a call. */
static double compare(const char *spec, const attnc_options *o, int64_t T, int64_t chunk,
                      int threads, uint64_t seed, int64_t ref_chunk, int64_t len, int32_t value) {
    attn_config c = load_spec_file(spec);
    attn_weights *w;
    assert_int_equal(attn_weights_random(&c, seed, &w, NULL), ATTN_OK);
    size_t n = (size_t)(T * c.d_model);
    float *x = random_floats(n, seed + 1), *y = malloc(n * sizeof *y),
          *want = malloc(n * sizeof *y);
    attnc_jit *jit = jit_or_fail(spec, o);
    run_calls(jit, w, T, x, y, chunk, threads, len, value);
    run_calls(NULL, w, T, x, want, ref_chunk, 1, len, value);
    double e = rel_err(y, want, n);
    attnc_jit_free(jit);
    free(x);
    free(y);
    free(want);
    attn_weights_free(w);
    return e;
}

double jit_vs_ref(const char *spec, const attnc_options *o, int64_t T, int64_t chunk, int threads,
                  uint64_t seed) {
    return compare(spec, o, T, chunk, threads, seed, T, 64, 7);
}

double jit_vs_ref_inputs(const char *spec, const attnc_options *o, int64_t T, int64_t chunk,
                         int threads, uint64_t seed, int64_t len, int32_t value) {
    return compare(spec, o, T, chunk, threads, seed, chunk, len, value);
}

/* A random valid config of the sweep; tokens and chunk chosen with it. */
attn_config sweep_config(int i, uint64_t *s, int64_t *T, int64_t *chunk) {
    /* 40: not whole vectors of 16 or 32 lanes (masked tails) */
    static const int64_t dims[] = {32, 40, 64, 80, 96, 128, 256};
    int64_t heads = 1 + (int64_t)((rnd_unit(s) + 1) * 20) % 40;
    int64_t divisors[40], nd = 0;
    for (int64_t d = 1; d <= heads; d++)
        if (heads % d == 0)
            divisors[nd++] = d;
    int64_t kv = divisors[(int64_t)((rnd_unit(s) + 1) * 20) % nd];
    int64_t hd = dims[i % 7];
    attn_config c = config_small(heads, kv, hd, 8 + (int64_t)((rnd_unit(s) + 1) * 40));
    snprintf(c.name, sizeof c.name, "sweep_%d", i);
    c.causal = i % 6 != 5;
    if (i % 5 != 4) {
        c.rope_style = i % 2 ? ATTN_ROPE_INTERLEAVED : ATTN_ROPE_HALF;
        c.rope_base = i % 3 ? 10000 : 500000;
        c.rotary_dim = i % 4 == 1 ? hd / 2 : hd;
        c.rope_scaling = (attn_rope_scaling)(i % 4);
        c.rope_factor = 4;
        c.rope_low_freq_factor = 1;
        c.rope_high_freq_factor = 4;
        c.rope_original_max_position = 128;
        c.rope_beta_fast = 32, c.rope_beta_slow = 1, c.rope_mscale = 1;
        c.rope_truncate = i % 8 != 3;
        c.rope_attention_factor = attn_yarn_default_attention_factor(&c);
    } else if (i % 10 == 4) {
        c.alibi = true;
    }
    /* the features of current models, spread over the sweep */
    if (i % 6 == 1 || i % 6 == 4) {
        c.qk_norm = i % 6 == 1 ? ATTN_QK_NORM_HEAD : ATTN_QK_NORM_ALL;
        c.qk_norm_weight = i % 12 != 7;
        c.qk_norm_offset = i % 12 == 1;
        c.qk_norm_eps = 1e-6;
    }
    c.sinks = i % 5 == 2;
    if (c.causal && i % 7 == 5)
        c.chunk = 3 + i % 13;
    if (i % 8 == 3)
        c.temp_floor_scale = 5 + i % 7, c.temp_attn_scale = 0.1 + 0.05 * (i % 3);
    if (c.causal && i % 4 == 3)
        c.sliding_window = 1 + i % 23;
    if (i % 7 == 2)
        c.softcap = 5 + i % 40;
    c.qkv_bias = i % 3 == 1;
    c.o_bias = i % 4 == 2;
    if (i % 8 == 6) {
        c.scale = 0.05;
        c.scale_auto = false;
    }
    /* every pair of weight and cache dtypes, each three times over the
     * 60 configs: weights in f16/bf16 are exact in the kernels (widened
     * in registers), q8_0 and q4_0 too (d * q is exact); the block
     * formats need whole blocks of 32 (inputs; a q8_0 cache: head_dim) */
    static const attn_dtype wts[5] = {ATTN_DTYPE_F32, ATTN_DTYPE_BF16, ATTN_DTYPE_Q8_0,
                                      ATTN_DTYPE_F16, ATTN_DTYPE_Q4_0};
    static const attn_dtype kvs[4] = {ATTN_DTYPE_F32, ATTN_DTYPE_F16, ATTN_DTYPE_Q8_0,
                                      ATTN_DTYPE_BF16};
    c.dtype = wts[i % 5];
    c.kv_dtype = kvs[(i / 5) % 4];
    if (c.kv_dtype == ATTN_DTYPE_Q8_0 && c.head_dim % 32)
        c.kv_dtype = ATTN_DTYPE_F16;
    if (attn_dtype_block(c.dtype) > 1) {
        c.d_model = (c.d_model + 31) / 32 * 32;
        if ((c.heads * c.head_dim) % 32) /* head_dim 40 or 80: 4 x 40 = 5 x 32 */
            c.heads *= 4, c.kv_groups *= 4;
    }
    c.kv_max_tokens = 512;
    /* cache blocks of whole key tiles (16, 32, 48) or not (1, 7, 20): the
     * split kernel reads a tile's keys as one vector or gathers them */
    static const int64_t blocks[] = {16, 1, 32, 7, 48, 20};
    c.kv_block_tokens = blocks[(i / 3) % 6];
    /* mostly short runs; every 8th long */
    *T = i % 8 == 0 ? 200 + (int64_t)((rnd_unit(s) + 1) * 50.5)
                    : 1 + (int64_t)((rnd_unit(s) + 1) * 30);
    *chunk = c.causal ? 1 + (int64_t)((rnd_unit(s) + 1) * 8) % 17 : *T;
    return c;
}

int sanitized_step(int step) {
    const char *s = getenv("ATTNC_SANITIZED");
    return s && *s && strcmp(s, "0") != 0 ? step : 1;
}
