/* test_checkpoints.c: checkpoints as they ship. Every weights layout,
 * written from known q/k/v/o matrices in the row order of its family's
 * Hugging Face modeling file (built here from that file's description,
 * not from the loader's formula), loads into a block whose output equals
 * the run of the same matrices given as attn_weights, bit for bit; the
 * same from shards named by an index, from GGUF files (plain and fused
 * q/k/v, F32/F16/BF16), in several stored dtypes; llama.cpp's q/k row
 * permutation with interleaved RoPE equals the Hugging Face order with
 * rotate-half; and every error path names the file and tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn_kernels.h"
#include "attnc.h"
#include "rt.h"
#include "support.h"

#define T 11 /* tokens per run: prefill 7, then 4 decode steps */

typedef struct fixture {
    char *dir;
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    f->dir = tmpdir_new();
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    tmpdir_remove(f->dir);
    free(f);
    return 0;
}

static attnc_jit *compile(const fixture *f, const attn_config *c) {
    char *yaml = attnc_spec_to_yaml(c);
    assert_non_null(yaml);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.yaml", f->dir, c->name);
    write_file(path, yaml, strlen(yaml));
    free(yaml);
    return jit_or_fail(path, NULL);
}

/* Runs T tokens (7 at once, then one at a time) through a block loaded
 * from path (or given w when path is NULL); y [T, d_model], malloc'd. */
static float *run(attnc_jit *jit, const char *path, const char *prefix, const attn_weights *w,
                  attn_status *load_st, char *msg, size_t msg_n) {
    attn_block_options o = attn_block_options_default();
    o.n_threads = 2;
    attn_block *b = NULL;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), &o, &b), ATTN_OK);
    attn_status st = path ? attn_block_load(b, path, prefix, 0) : attn_block_set_weights(b, w);
    if (load_st)
        *load_st = st;
    if (msg)
        snprintf(msg, msg_n, "%s", attn_block_error(b));
    if (st) {
        if (!load_st)
            fail_msg("load %s: %s", path ? path : "weights", attn_block_error(b));
        attn_block_free(b);
        return NULL;
    }
    const attn_config *c = &attnc_jit_kernels(jit)->config;
    float *x = random_floats((size_t)(T * c->d_model), 99);
    float *y = calloc((size_t)(T * c->d_model), sizeof *y);
    attn_cache *cache = NULL;
    int32_t seq;
    assert_int_equal(attn_cache_new(b, T, &cache), ATTN_OK);
    assert_int_equal(attn_seq_new(cache, &seq), ATTN_OK);
    for (int64_t at = 0; at < T;) {
        int32_t n = at == 0 ? 7 : 1;
        assert_int_equal(
            attn_forward(b, cache, 1, &seq, &n, x + at * c->d_model, y + at * c->d_model), ATTN_OK);
        at += n;
    }
    attn_cache_free(cache);
    attn_block_free(b);
    free(x);
    return y;
}

/* ---- writing checkpoints in each family's layout ------------------------- */

/* rows [r0, r0 + n) of m (cols wide) appended to out at *at */
static void take(float *out, size_t *at, const float *m, int64_t r0, int64_t n, int64_t cols) {
    memcpy(out + *at, m + r0 * cols, (size_t)(n * cols) * sizeof *out);
    *at += (size_t)(n * cols);
}

/* The fused q/k/v tensor of layout l from q, k, v (cols = d_model for
 * weights, 1 for biases), as each modeling file reads it back:
 * phi3 [q; k; v]; falcon per group [its query heads; k head; v head]
 * (FalconAttention._split_heads); neox and bloom per head [q; k; v]. */
static float *fuse(const attn_config *c, attn_layout l, const float *q, const float *k,
                   const float *v, int64_t cols) {
    int64_t hd = c->head_dim, H = c->heads, G = c->kv_groups;
    float *out = malloc((size_t)((H + 2 * G) * hd * cols) * sizeof *out);
    size_t at = 0;
    if (l == ATTN_LAYOUT_PHI3) {
        take(out, &at, q, 0, H * hd, cols);
        take(out, &at, k, 0, G * hd, cols);
        take(out, &at, v, 0, G * hd, cols);
        return out;
    }
    for (int64_t g = 0; g < G; g++) {
        for (int64_t j = 0; j < H / G; j++)
            take(out, &at, q, (g * (H / G) + j) * hd, hd, cols);
        take(out, &at, k, g * hd, hd, cols);
        take(out, &at, v, g * hd, hd, cols);
    }
    return out;
}

/* Writes w in layout l under prefix, stored as dtype. */
static void write_layout(const char *path, const attn_weights *w, attn_layout l, const char *prefix,
                         attn_dtype dtype) {
    const attn_config *c = &w->cfg;
    int64_t D = c->d_model, qd = c->heads * c->head_dim, kvd = c->kv_groups * c->head_dim;
    static const char *const fused_name[ATTN_LAYOUT_COUNT] = {
        [ATTN_LAYOUT_NEOX] = "query_key_value",
        [ATTN_LAYOUT_FALCON] = "query_key_value",
        [ATTN_LAYOUT_PHI3] = "qkv_proj",
        [ATTN_LAYOUT_BLOOM] = "query_key_value"};
    static const char *const o_name[ATTN_LAYOUT_COUNT] = {
        [ATTN_LAYOUT_LLAMA] = "o_proj", [ATTN_LAYOUT_GPTJ] = "out_proj",
        [ATTN_LAYOUT_NEOX] = "dense",   [ATTN_LAYOUT_FALCON] = "dense",
        [ATTN_LAYOUT_PHI3] = "o_proj",  [ATTN_LAYOUT_BLOOM] = "dense"};
    char names[10][256];
    attn_st_tensor t[10];
    float *owned[2] = {0};
    int n = 0;
#define ADD(nm, nd, s0, s1, p)                                                                     \
    do {                                                                                           \
        snprintf(names[n], sizeof names[n], "%s%s", prefix, nm);                                   \
        /* biases stay f32 next to quantized matrices, as converters write them */                 \
        attn_dtype dt_ = nd == 1 && attn_dtype_block(dtype) > 1 ? ATTN_DTYPE_F32 : dtype;          \
        t[n] = (attn_st_tensor){names[n], dt_, nd, {s0, s1}, p};                                   \
        n++;                                                                                       \
    } while (0)
    if (fused_name[l]) {
        char nm[64];
        owned[0] = fuse(c, l, w->wq, w->wk, w->wv, D);
        snprintf(nm, sizeof nm, "%s.weight", fused_name[l]);
        ADD(nm, 2, qd + 2 * kvd, D, owned[0]);
        if (c->qkv_bias) {
            owned[1] = fuse(c, l, w->bq, w->bk, w->bv, 1);
            snprintf(nm, sizeof nm, "%s.bias", fused_name[l]);
            ADD(nm, 1, qd + 2 * kvd, 0, owned[1]);
        }
    } else {
        ADD("q_proj.weight", 2, qd, D, w->wq);
        ADD("k_proj.weight", 2, kvd, D, w->wk);
        ADD("v_proj.weight", 2, kvd, D, w->wv);
        if (c->qkv_bias) {
            ADD("q_proj.bias", 1, qd, 0, w->bq);
            ADD("k_proj.bias", 1, kvd, 0, w->bk);
            ADD("v_proj.bias", 1, kvd, 0, w->bv);
        }
    }
    char onm[64];
    snprintf(onm, sizeof onm, "%s.weight", o_name[l]);
    ADD(onm, 2, D, qd, w->wo);
    if (c->o_bias) {
        snprintf(onm, sizeof onm, "%s.bias", o_name[l]);
        ADD(onm, 1, D, 0, w->bo);
    }
    if (c->sinks)
        ADD("sinks", 1, c->heads, 0, w->sinks);
#undef ADD
    attn_msg m;
    if (attn_st_write(path, t, n, &m))
        fail_msg("%s", m.text);
    free(owned[0]);
    free(owned[1]);
}

/* The tensors of the single file at path, split over two shards beside
 * it (odd and even tensors) plus the index naming them: its path. */
static void shard_copy(const char *path, const char *dir, const char *tag, char *index,
                       size_t index_n) {
    attn_st *f = NULL;
    attn_msg m;
    assert_int_equal(attn_st_open(path, &f, &m), ATTN_OK);
    int n = attn_st_count(f);
    attn_st_tensor t[2][16];
    float *data[16];
    int k[2] = {0, 0};
    char json[8192];
    int at = snprintf(json, sizeof json, "{\"weight_map\": {");
    for (int i = 0; i < n && i < 16; i++) {
        const attn_st_info *info = attn_st_get(f, i);
        int64_t shape[ATTN_ST_MAX_DIMS];
        attn_dtype dt = attn_st_format(f, info, shape); /* blocks: written back as they are */
        assert_int_not_equal(dt, ATTN_DTYPE_COUNT);
        size_t numel = 1;
        for (int d = 0; d < info->ndim; d++)
            numel *= (size_t)shape[d];
        data[i] = malloc(numel * sizeof(float));
        assert_int_equal(attn_st_read_f32(f, info->name, info->ndim, shape, data[i], &m), ATTN_OK);
        attn_st_tensor *e = &t[i % 2][k[i % 2]++];
        *e = (attn_st_tensor){info->name, dt, info->ndim, {0}, data[i]};
        memcpy(e->shape, shape, sizeof e->shape);
        at += snprintf(json + at, sizeof json - (size_t)at, "%s\"%s\": \"%s-%d.safetensors\"",
                       i ? ", " : "", info->name, tag, i % 2);
    }
    snprintf(json + at, sizeof json - (size_t)at, "}}");
    for (int s = 0; s < 2; s++) {
        char shard[1024];
        snprintf(shard, sizeof shard, "%s/%s-%d.safetensors", dir, tag, s);
        assert_int_equal(attn_st_write(shard, t[s], k[s], &m), ATTN_OK);
    }
    snprintf(index, index_n, "%s/%s.index.json", dir, tag);
    write_file(index, json, strlen(json));
    for (int i = 0; i < n && i < 16; i++)
        free(data[i]);
    attn_st_close(f);
}

static attn_config layout_config(attn_layout l, int64_t heads, int64_t kv, attn_dtype dt) {
    attn_config c = config_small(heads, kv, 16, attn_dtype_block(dt) > 1 ? 64 : 48);
    snprintf(c.name, sizeof c.name, "ck_%s_%lld_%s", attn_layout_name(l), (long long)kv,
             attn_dtype_name(dt));
    c.weights_layout = l;
    c.dtype = dt;
    c.qkv_bias = l == ATTN_LAYOUT_BLOOM || l == ATTN_LAYOUT_NEOX || l == ATTN_LAYOUT_FALCON;
    c.o_bias = l == ATTN_LAYOUT_BLOOM;
    c.sinks = l == ATTN_LAYOUT_PHI3; /* any layout carries sinks under one name */
    c.rope_style = ATTN_ROPE_HALF;
    c.rope_base = 10000;
    c.rotary_dim = c.head_dim;
    if (l == ATTN_LAYOUT_BLOOM) {
        c.rope_style = ATTN_ROPE_NONE;
        c.alibi = true;
    }
    if (l == ATTN_LAYOUT_GPTJ) {
        c.rope_style = ATTN_ROPE_INTERLEAVED;
        c.rotary_dim = 8;
    }
    attn_msg m;
    if (attn_config_check(&c, &m))
        fail_msg("%s", m.text);
    return c;
}

static void assert_same(const float *a, const float *b, size_t n, const char *what) {
    if (memcmp(a, b, n * sizeof *a) != 0) {
        size_t i = 0;
        while (a[i] == b[i])
            i++;
        fail_msg("%s: element %zu differs: %.9g vs %.9g", what, i, (double)a[i], (double)b[i]);
    }
}

static void every_layout_loads_bit_for_bit(void **state) {
    fixture *f = *state;
    static const struct {
        attn_layout l;
        int64_t heads, kv;
    } cases[] = {
        {ATTN_LAYOUT_LLAMA, 4, 2},  {ATTN_LAYOUT_GPTJ, 4, 4},   {ATTN_LAYOUT_NEOX, 4, 4},
        {ATTN_LAYOUT_FALCON, 6, 1}, {ATTN_LAYOUT_FALCON, 6, 2}, {ATTN_LAYOUT_FALCON, 4, 4},
        {ATTN_LAYOUT_PHI3, 6, 2},   {ATTN_LAYOUT_BLOOM, 4, 4},
    };
    /* spec dtype and the dtype the file stores */
    static const attn_dtype dts[][2] = {
        {ATTN_DTYPE_F32, ATTN_DTYPE_F32},   {ATTN_DTYPE_BF16, ATTN_DTYPE_BF16},
        {ATTN_DTYPE_F16, ATTN_DTYPE_F16},   {ATTN_DTYPE_BF16, ATTN_DTYPE_F32},
        {ATTN_DTYPE_Q8_0, ATTN_DTYPE_Q8_0}, {ATTN_DTYPE_Q4_0, ATTN_DTYPE_Q4_0},
        {ATTN_DTYPE_Q4_0, ATTN_DTYPE_F32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (size_t d = 0; d < 7; d++) {
            if (d && cases[i].l != ATTN_LAYOUT_FALCON && cases[i].l != ATTN_LAYOUT_PHI3 &&
                cases[i].l != ATTN_LAYOUT_LLAMA)
                continue; /* dtypes over a plain, a grouped and a concatenated layout */
            attn_config c = layout_config(cases[i].l, cases[i].heads, cases[i].kv, dts[d][0]);
            attnc_jit *jit = compile(f, &c);
            c = attnc_jit_kernels(jit)->config; /* as the spec normalizes it */
            attn_weights *w = NULL;
            attn_msg m;
            assert_int_equal(attn_weights_random(&c, 7 + i, &w, &m), ATTN_OK);
            char path[1024];
            snprintf(path, sizeof path, "%s/%s.safetensors", f->dir, c.name);
            write_layout(path, w, cases[i].l, "model.layers.3.attn.", dts[d][1]);
            /* the f32 loader gives back the matrices, as the dtype holds them */
            attn_weights *back = NULL;
            if (attn_weights_load(&c, path, "model.layers.3.attn.", &back, &m))
                fail_msg("%s: %s", c.name, m.text);
            attn_weights *want = NULL;
            assert_int_equal(attn_weights_random(&c, 7 + i, &want, &m), ATTN_OK);
            if (dts[d][0] != dts[d][1]) /* stored wider: rounded at load, as random's are */
                attn_weights_round(want);
            size_t qn = (size_t)(c.heads * c.head_dim * c.d_model);
            assert_same(back->wq, want->wq, qn, "wq");
            assert_same(back->wo, want->wo, qn, "wo");
            if (c.qkv_bias)
                assert_same(back->bk, want->bk, (size_t)(c.kv_groups * c.head_dim), "bk");
            float *y_file = run(jit, path, "model.layers.3.attn.", NULL, NULL, NULL, 0);
            float *y_mem = run(jit, NULL, NULL, w, NULL, NULL, 0);
            assert_same(y_file, y_mem, (size_t)(T * c.d_model), c.name);
            free(y_file);
            /* attn_weights_save writes the layout as the family's file does:
             * the tensors equal the ones written here, and load back */
            char saved[1024];
            snprintf(saved, sizeof saved, "%s/%s_saved.safetensors", f->dir, c.name);
            assert_int_equal(attn_weights_save(w, saved, dts[d][1], "model.layers.3.attn.", &m),
                             ATTN_OK);
            attn_st *sa = NULL, *sb = NULL;
            assert_int_equal(attn_st_open(path, &sa, &m), ATTN_OK);
            assert_int_equal(attn_st_open(saved, &sb, &m), ATTN_OK);
            assert_int_equal(attn_st_count(sa), attn_st_count(sb));
            for (int k = 0; k < attn_st_count(sa); k++) {
                const attn_st_info *ta = attn_st_get(sa, k), *tb = attn_st_find(sb, ta->name);
                if (!tb || tb->nbytes != ta->nbytes || memcmp(ta->data, tb->data, ta->nbytes))
                    fail_msg("%s: tensor '%s' differs from the family's layout", saved, ta->name);
            }
            attn_st_close(sa);
            attn_st_close(sb);
            /* the same layout, sharded */
            char index[1024];
            shard_copy(path, f->dir, c.name, index, sizeof index);
            y_file = run(jit, index, "model.layers.3.attn.", NULL, NULL, NULL, 0);
            assert_same(y_file, y_mem, (size_t)(T * c.d_model), index);
            free(y_file);
            free(y_mem);
            attnc_jit_free(jit);
            attn_weights_free(back);
            attn_weights_free(want);
            attn_weights_free(w);
        }
    }
}

/* ---- sharded checkpoints ----------------------------------------------------- */

static void sharded_index_loads_as_one_file(void **state) {
    fixture *f = *state;
    attn_config c = layout_config(ATTN_LAYOUT_LLAMA, 4, 2, ATTN_DTYPE_BF16);
    c.qkv_bias = true;
    c.sinks = true;
    snprintf(c.name, sizeof c.name, "ck_shards");
    attnc_jit *jit = compile(f, &c);
    c = attnc_jit_kernels(jit)->config;
    attn_weights *w = NULL;
    attn_msg m;
    assert_int_equal(attn_weights_random(&c, 11, &w, &m), ATTN_OK);
    const char *pre = "model.layers.0.self_attn.";
    int64_t D = c.d_model, qd = c.heads * c.head_dim, kvd = c.kv_groups * c.head_dim;
    char n[8][128];
    const char *local[8] = {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
                            "q_proj.bias",   "k_proj.bias",   "v_proj.bias",   "sinks"};
    for (int i = 0; i < 8; i++)
        snprintf(n[i], sizeof n[i], "%s%s", pre, local[i]);
    attn_st_tensor a[] = {{n[0], ATTN_DTYPE_BF16, 2, {qd, D}, w->wq},
                          {n[4], ATTN_DTYPE_BF16, 1, {qd}, w->bq},
                          {n[1], ATTN_DTYPE_BF16, 2, {kvd, D}, w->wk},
                          {"model.embed_tokens.weight", ATTN_DTYPE_BF16, 2, {3, D}, w->wq}};
    attn_st_tensor b[] = {{n[2], ATTN_DTYPE_BF16, 2, {kvd, D}, w->wv},
                          {n[3], ATTN_DTYPE_BF16, 2, {D, qd}, w->wo},
                          {n[5], ATTN_DTYPE_BF16, 1, {kvd}, w->bk},
                          {n[6], ATTN_DTYPE_BF16, 1, {kvd}, w->bv},
                          {n[7], ATTN_DTYPE_BF16, 1, {c.heads}, w->sinks}};
    if (attn_st_write(path_in(f->dir, "model-00001-of-00002.safetensors"), a, 4, &m))
        fail_msg("%s", m.text);
    assert_int_equal(attn_st_write(path_in(f->dir, "model-00002-of-00002.safetensors"), b, 5, &m),
                     ATTN_OK);
    char index[4096];
    int at = snprintf(index, sizeof index, "{\"metadata\": {\"total_size\": 1}, \"weight_map\": {");
    for (int i = 0; i < 4; i++)
        at += snprintf(index + at, sizeof index - (size_t)at,
                       "\"%s\": \"model-00001-of-00002.safetensors\", ", a[i].name);
    for (int i = 0; i < 5; i++)
        at += snprintf(index + at, sizeof index - (size_t)at,
                       "\"%s\": \"model-00002-of-00002.safetensors\"%s", b[i].name,
                       i < 4 ? ", " : "}}");
    char ipath[1024];
    snprintf(ipath, sizeof ipath, "%s/model.safetensors.index.json", f->dir);
    write_file(ipath, index, strlen(index));

    char prefix[128];
    assert_int_equal(attn_layer_prefix(&c, ipath, 0, prefix, sizeof prefix, &m), ATTN_OK);
    assert_string_equal(prefix, pre);
    float *y_file = run(jit, ipath, prefix, NULL, NULL, NULL, 0);
    float *y_mem = run(jit, NULL, NULL, w, NULL, NULL, 0);
    assert_same(y_file, y_mem, (size_t)(T * c.d_model), "sharded");
    free(y_file);

    /* a name under another prefix: the message says which */
    attn_status st;
    char msg[ATTN_MSG_MAX];
    assert_null(run(jit, ipath, "model.layers.1.self_attn.", NULL, &st, msg, sizeof msg));
    assert_int_equal(st, ATTN_E_FORMAT);
    char want[2400];
    snprintf(want, sizeof want,
             "%s: missing tensor 'model.layers.1.self_attn.q_proj.weight'; did you mean --prefix "
             "model.layers.0.self_attn.?",
             ipath);
    assert_string_equal(msg, want);
    /* a shard that is not there */
    remove(path_in(f->dir, "model-00002-of-00002.safetensors"));
    assert_null(run(jit, ipath, pre, NULL, &st, msg, sizeof msg));
    assert_int_equal(st, ATTN_E_IO);
    snprintf(want, sizeof want,
             "%s: shard 'model-00002-of-00002.safetensors' (holding '%s'): %s/"
             "model-00002-of-00002.safetensors: cannot open: No such file or directory",
             ipath, n[1 + 1], f->dir);
    assert_string_equal(msg, want);
    /* a tensor the map names but its shard lacks */
    assert_int_equal(attn_st_write(path_in(f->dir, "model-00002-of-00002.safetensors"), b, 4, &m),
                     ATTN_OK);
    assert_null(run(jit, ipath, pre, NULL, &st, msg, sizeof msg));
    snprintf(want, sizeof want,
             "%s: '%s' is in the weight_map, but its shard 'model-00002-of-00002.safetensors' "
             "has no such tensor",
             ipath, n[7]);
    assert_string_equal(msg, want);
    /* an index without a weight_map */
    write_file(ipath, "{\"metadata\": {}}", 16);
    assert_null(run(jit, ipath, pre, NULL, &st, msg, sizeof msg));
    assert_int_equal(st, ATTN_E_FORMAT);
    assert_non_null(strstr(msg, "not a safetensors index"));
    free(y_mem);
    attnc_jit_free(jit);
    attn_weights_free(w);
}

/* ---- GGUF -------------------------------------------------------------------- */

static void *stored(const float *x, size_t n, attn_dtype dt, size_t *nbytes) {
    *nbytes = attn_dtype_bytes(dt, (int64_t)n);
    if (attn_dtype_block(dt) > 1) { /* rows are whole blocks: blocks of the flat values */
        unsigned char *b = malloc(*nbytes);
        assert_int_equal(rt_quant_row(dt, x, b, (int64_t)n), -1);
        return b;
    }
    if (dt != ATTN_DTYPE_F32)
        return to_half(x, n, dt == ATTN_DTYPE_BF16);
    void *p = malloc(*nbytes);
    memcpy(p, x, *nbytes);
    return p;
}

static const uint32_t ggml_type_of[ATTN_DTYPE_COUNT] = {0, 1, 30, 8, 2}; /* ggml.h GGML_TYPE_* */

/* w as llama.cpp writes a layer: blk.N.attn_q/k/v/output (fused: one
 * attn_qkv [q; k; v]); permute: q and k rows in llama.cpp's order for its
 * RoPE (convert_hf_to_gguf.py LlamaModel.permute: within each head, row
 * 2i is row i and row 2i+1 is row i + head_dim/2). */
static void write_gguf_layer(const char *path, const attn_weights *w, attn_dtype dt, bool fused,
                             bool permute, uint32_t extra_type) {
    const attn_config *c = &w->cfg;
    int64_t D = c->d_model, hd = c->head_dim, qd = c->heads * hd, kvd = c->kv_groups * hd;
    float *q = malloc((size_t)(qd * D) * 4), *k = malloc((size_t)(kvd * D) * 4);
    for (int pass = 0; pass < 2; pass++) {
        const float *src = pass ? w->wk : w->wq;
        float *dst = pass ? k : q;
        int64_t rows = pass ? kvd : qd;
        for (int64_t r = 0; r < rows; r++) {
            int64_t h = r / hd, i = r % hd;
            int64_t from = permute ? h * hd + (i % 2) * (hd / 2) + i / 2 : r;
            memcpy(dst + r * D, src + from * D, (size_t)D * 4);
        }
    }
    test_gguf_tensor t[8];
    void *data[8] = {0};
    int n = 0;
    size_t nb;
    if (fused) {
        float *qkv = malloc((size_t)((qd + 2 * kvd) * D) * 4);
        memcpy(qkv, q, (size_t)(qd * D) * 4);
        memcpy(qkv + qd * D, k, (size_t)(kvd * D) * 4);
        memcpy(qkv + (qd + kvd) * D, w->wv, (size_t)(kvd * D) * 4);
        data[n] = stored(qkv, (size_t)((qd + 2 * kvd) * D), dt, &nb);
        t[n] = (test_gguf_tensor){"blk.2.attn_qkv.weight", ggml_type_of[dt], 2,
                                  {qd + 2 * kvd, D},       data[n],          nb};
        n++;
        free(qkv);
    } else {
        data[n] = stored(q, (size_t)(qd * D), dt, &nb);
        t[n] = (test_gguf_tensor){"blk.2.attn_q.weight", ggml_type_of[dt], 2, {qd, D}, data[n], nb};
        n++;
        data[n] = stored(k, (size_t)(kvd * D), dt, &nb);
        t[n] =
            (test_gguf_tensor){"blk.2.attn_k.weight", ggml_type_of[dt], 2, {kvd, D}, data[n], nb};
        n++;
        data[n] = stored(w->wv, (size_t)(kvd * D), dt, &nb);
        t[n] = (test_gguf_tensor){"blk.2.attn_v.weight",
                                  extra_type ? extra_type : ggml_type_of[dt],
                                  2,
                                  {kvd, D},
                                  data[n],
                                  extra_type ? (size_t)(kvd * D / 32 * 20) : nb};
        if (extra_type) { /* Q4_1: 20 bytes a block of 32 */
            free(data[n]);
            data[n] = calloc((size_t)(kvd * D / 32 * 20), 1);
            t[n].data = data[n];
        }
        n++;
    }
    data[n] = stored(w->wo, (size_t)(D * qd), dt, &nb);
    t[n] =
        (test_gguf_tensor){"blk.2.attn_output.weight", ggml_type_of[dt], 2, {D, qd}, data[n], nb};
    n++;
    if (c->sinks) {
        data[n] = stored(w->sinks, (size_t)c->heads, ATTN_DTYPE_F32, &nb);
        t[n] = (test_gguf_tensor){"blk.2.attn_sinks.weight", 0, 1, {c->heads}, data[n], nb};
        n++;
    }
    test_gguf_kv kv[] = {{"general.architecture", ATTN_GGUF_STRING, 0, 0, "llama", NULL, 0}};
    write_gguf(path, kv, 1, t, n, 64);
    for (int i = 0; i < n; i++)
        free(data[i]);
    free(q);
    free(k);
}

static void gguf_layers_load_bit_for_bit(void **state) {
    fixture *f = *state;
    for (int dt = 0; dt < ATTN_DTYPE_COUNT; dt++) {
        attn_config c = layout_config(ATTN_LAYOUT_LLAMA, 6, 2, (attn_dtype)dt);
        c.sinks = true;
        snprintf(c.name, sizeof c.name, "ck_gguf_%s", attn_dtype_name((attn_dtype)dt));
        attnc_jit *jit = compile(f, &c);
        c = attnc_jit_kernels(jit)->config;
        attn_weights *w = NULL;
        attn_msg m;
        assert_int_equal(attn_weights_random(&c, 21, &w, &m), ATTN_OK);
        float *y_mem = run(jit, NULL, NULL, w, NULL, NULL, 0);
        for (int fused = 0; fused < 2; fused++) {
            char path[1024], prefix[64];
            snprintf(path, sizeof path, "%s/%s_%d.gguf", f->dir, c.name, fused);
            write_gguf_layer(path, w, (attn_dtype)dt, fused, false, 0);
            assert_int_equal(attn_layer_prefix(&c, path, 2, prefix, sizeof prefix, &m), ATTN_OK);
            assert_string_equal(prefix, "blk.2.");
            float *y = run(jit, path, prefix, NULL, NULL, NULL, 0);
            assert_same(y, y_mem, (size_t)(T * c.d_model), path);
            free(y);
        }
        free(y_mem);
        attnc_jit_free(jit);
        attn_weights_free(w);
    }
}

static void gguf_quantized_and_missing_tensors_are_refused(void **state) {
    fixture *f = *state;
    attn_config c = layout_config(ATTN_LAYOUT_LLAMA, 4, 2, ATTN_DTYPE_F32);
    c.d_model = 64;
    snprintf(c.name, sizeof c.name, "ck_gguf_q8");
    attn_weights *w = NULL;
    attn_msg m;
    assert_int_equal(attn_weights_random(&c, 5, &w, &m), ATTN_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/q8.gguf", f->dir);
    write_gguf_layer(path, w, ATTN_DTYPE_F32, false, false, 3 /* Q4_1 */);
    attn_weights *back = NULL;
    assert_int_equal(attn_weights_load(&c, path, "blk.2.", &back, &m), ATTN_E_FORMAT);
    char want[1200];
    snprintf(want, sizeof want,
             "%s: tensor 'blk.2.attn_v.weight' is stored as Q4_1; supported are F32, F16, BF16, "
             "Q8_0 and Q4_0",
             path);
    assert_string_equal(m.text, want);
    assert_int_equal(attn_weights_load(&c, path, "blk.0.", &back, &m), ATTN_E_FORMAT);
    snprintf(want, sizeof want,
             "%s: missing tensor 'blk.0.attn_q.weight'; did you mean --prefix blk.2.?", path);
    assert_string_equal(m.text, want);
    assert_null(back);
    attn_weights_free(w);
}

/* llama.cpp stores q and k of LLaMA-family models with each head's rows
 * permuted for its RoPE on pairs (2i, 2i+1): those weights with
 * style: interleaved compute what the Hugging Face rows compute with
 * style: half (only the order of each dot product's terms differs). */
static void gguf_permuted_rows_with_interleaved_rope_match_hf(void **state) {
    fixture *f = *state;
    attn_config hf = layout_config(ATTN_LAYOUT_LLAMA, 4, 2, ATTN_DTYPE_F32);
    hf.head_dim = 32;
    hf.rotary_dim = 32;
    hf.d_model = 64;
    snprintf(hf.name, sizeof hf.name, "ck_perm_hf");
    attn_config gg = hf;
    gg.rope_style = ATTN_ROPE_INTERLEAVED;
    snprintf(gg.name, sizeof gg.name, "ck_perm_gguf");
    attn_weights *w = NULL;
    attn_msg m;
    assert_int_equal(attn_weights_random(&hf, 31, &w, &m), ATTN_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/perm.gguf", f->dir);
    write_gguf_layer(path, w, ATTN_DTYPE_F32, false, true, 0);
    char hf_path[1024];
    snprintf(hf_path, sizeof hf_path, "%s/perm.safetensors", f->dir);
    write_layout(hf_path, w, ATTN_LAYOUT_LLAMA, "", ATTN_DTYPE_F32);
    attnc_jit *jh = compile(f, &hf), *jg = compile(f, &gg);
    float *y_hf = run(jh, hf_path, "", NULL, NULL, NULL, 0);
    float *y_gg = run(jg, path, "blk.2.", NULL, NULL, NULL, 0);
    double e = rel_err(y_gg, y_hf, (size_t)(T * hf.d_model));
    assert_true(e < 1e-5);
    /* and without the permutation they differ: the test can fail */
    snprintf(path, sizeof path, "%s/noperm.gguf", f->dir);
    write_gguf_layer(path, w, ATTN_DTYPE_F32, false, false, 0);
    float *y_np = run(jg, path, "blk.2.", NULL, NULL, NULL, 0);
    assert_true(rel_err(y_np, y_hf, (size_t)(T * hf.d_model)) > 1e-2);
    free(y_np);
    free(y_hf);
    free(y_gg);
    attnc_jit_free(jh);
    attnc_jit_free(jg);
    attn_weights_free(w);
}

static void layout_errors_name_the_tensor(void **state) {
    fixture *f = *state;
    attn_config c = layout_config(ATTN_LAYOUT_FALCON, 6, 2, ATTN_DTYPE_F32);
    attn_weights *w = NULL;
    attn_msg m;
    assert_int_equal(attn_weights_random(&c, 3, &w, &m), ATTN_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/llama_names.safetensors", f->dir);
    /* a llama-layout file given to a falcon spec */
    write_layout(path, w, ATTN_LAYOUT_LLAMA, "transformer.h.0.self_attention.", ATTN_DTYPE_F32);
    attn_weights *back = NULL;
    assert_int_equal(attn_weights_load(&c, path, "transformer.h.0.self_attention.", &back, &m),
                     ATTN_E_FORMAT);
    char want[1200];
    snprintf(want, sizeof want,
             "%s: missing tensor 'transformer.h.0.self_attention.query_key_value.weight' "
             "(weights.layout falcon)",
             path);
    assert_string_equal(m.text, want);
    attn_msg m2;
    assert_int_equal(attn_weights_check(&c, path, "transformer.h.0.self_attention.", &m2),
                     ATTN_E_FORMAT);
    assert_string_equal(m2.text, want); /* the same, without reading a value */
    /* a fused tensor of the wrong height (an MHA tensor for a GQA spec) */
    attn_config mha = layout_config(ATTN_LAYOUT_FALCON, 6, 6, ATTN_DTYPE_F32);
    attn_weights *w6 = NULL;
    assert_int_equal(attn_weights_random(&mha, 3, &w6, &m), ATTN_OK);
    write_layout(path, w6, ATTN_LAYOUT_FALCON, "", ATTN_DTYPE_F32);
    assert_int_equal(attn_weights_load(&c, path, "", &back, &m), ATTN_E_FORMAT);
    snprintf(want, sizeof want,
             "%s: tensor 'query_key_value.weight' has shape [288, 48], expected [160, 48]", path);
    assert_string_equal(m.text, want);
    assert_null(back);
    /* NaN in a fused tensor: refused on request, naming the file's element */
    w->wv[5] = NAN; /* v row 0 of group 0: fused row (6/2) * 16 + 16 */
    write_layout(path, w, ATTN_LAYOUT_FALCON, "", ATTN_DTYPE_F32);
    attnc_jit *jit = compile(f, &c);
    attn_block *b = NULL;
    assert_int_equal(attn_block_new(attnc_jit_kernels(jit), NULL, &b), ATTN_OK);
    assert_int_equal(attn_block_load(b, path, "", ATTN_LOAD_CHECK_FINITE), ATTN_E_FORMAT);
    snprintf(want, sizeof want, "%s: tensor 'query_key_value.weight' holds NaN at element %d", path,
             (3 * 16 + 16) * 48 + 5);
    assert_string_equal(attn_block_error(b), want);
    assert_int_equal(attn_block_load(b, path, "", 0), ATTN_OK); /* used as it is */
    attn_block_free(b);
    attnc_jit_free(jit);
    attn_weights_free(w6);
    attn_weights_free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_layout_loads_bit_for_bit),
        cmocka_unit_test(sharded_index_loads_as_one_file),
        cmocka_unit_test(gguf_layers_load_bit_for_bit),
        cmocka_unit_test(gguf_quantized_and_missing_tensors_are_refused),
        cmocka_unit_test(gguf_permuted_rows_with_interleaved_rope_match_hf),
        cmocka_unit_test(layout_errors_name_the_tensor),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
