/* gguf.c: reading GGUF files (versions 2 and 3, little-endian), the
 * format of llama.cpp and ggml, as its specification (ggml's
 * docs/gguf.md) publishes it:
 *
 *   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
 *   kv_count x {string key, u32 type, value},
 *   tensor_count x {string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset},
 *   padding to general.alignment (32 if absent), then the tensor data, each
 *   tensor at data start + offset (a multiple of the alignment).
 *
 * A string is a u64 length and that many bytes (no NUL). Every count,
 * length, offset and size is checked against the bytes that are there
 * before it is used; the file is mapped and only read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rt.h"

#define GGUF_MAX_DIMS 4 /* GGML_MAX_DIMS */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_STRING (1u << 24) /* keys, names and string values */

/* ggml's tensor types that GGUF files hold: id, name, elements per block,
 * bytes per block (ggml.c's type_traits). */
static const struct ggml_type_info {
    uint32_t id;
    const char *name;
    uint32_t blck, size;
} ggml_types[] = {
    {0, "F32", 1, 4},         {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},
    {3, "Q4_1", 32, 20},      {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},
    {8, "Q8_0", 32, 34},      {9, "Q8_1", 32, 36},      {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},   {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66},
    {17, "IQ2_XS", 256, 74},  {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},
    {20, "IQ4_NL", 32, 18},   {21, "IQ3_S", 256, 110},  {22, "IQ2_S", 256, 82},
    {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},         {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},        {28, "F64", 1, 8},
    {29, "IQ1_M", 256, 56},   {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},
    {35, "TQ2_0", 256, 66},   {39, "MXFP4", 32, 17},
};

static const struct ggml_type_info *type_info(uint32_t id) {
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; i++)
        if (ggml_types[i].id == id)
            return &ggml_types[i];
    return NULL;
}

const char *attn_gguf_type_name(uint32_t ggml_type) {
    const struct ggml_type_info *t = type_info(ggml_type);
    return t ? t->name : NULL;
}

attn_dtype attn_gguf_type_dtype(uint32_t ggml_type) {
    /* ggml.h GGML_TYPE_F32 0, F16 1, Q4_0 2, Q8_0 8, BF16 30 */
    switch (ggml_type) {
    case 0: return ATTN_DTYPE_F32;
    case 1: return ATTN_DTYPE_F16;
    case 2: return ATTN_DTYPE_Q4_0;
    case 8: return ATTN_DTYPE_Q8_0;
    case 30: return ATTN_DTYPE_BF16;
    default: return ATTN_DTYPE_COUNT;
    }
}

/* one metadata entry; value points into the mapping */
typedef struct gguf_kv {
    char *key; /* owned, NUL-terminated copy */
    uint32_t type;
    uint32_t arr_type; /* arrays */
    uint64_t n;        /* arrays: elements; strings: bytes */
    const unsigned char *value;
} gguf_kv;

struct attn_gguf {
    char *path;
    const unsigned char *map;
    bool mapped;
    size_t size;
    uint32_t version;
    uint64_t alignment;
    int n_kv, n_tensors;
    gguf_kv *kv;
    attn_gguf_tensor *t; /* names owned */
};

/* A cursor over the mapping that refuses to step past its end. */
typedef struct cursor {
    const attn_gguf *g;
    size_t at;
    attn_msg *m;
    attn_status st;
} cursor;

static bool need(cursor *c, uint64_t n, const char *what) {
    if (c->st)
        return false;
    if (n > c->g->size - c->at) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT,
                        "%s: %s at byte %zu needs %llu bytes; the file ends %zu bytes later "
                        "(truncated or not a GGUF file)",
                        c->g->path, what, c->at, (unsigned long long)n, c->g->size - c->at);
        return false;
    }
    return true;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static bool read_u32(cursor *c, uint32_t *v, const char *what) {
    if (!need(c, 4, what))
        return false;
    *v = (uint32_t)le(c->g->map + c->at, 4);
    c->at += 4;
    return true;
}

static bool read_u64(cursor *c, uint64_t *v, const char *what) {
    if (!need(c, 8, what))
        return false;
    *v = le(c->g->map + c->at, 8);
    c->at += 8;
    return true;
}

/* A string: *s points into the mapping, *n bytes. */
static bool read_str(cursor *c, const unsigned char **s, uint64_t *n, const char *what) {
    if (!read_u64(c, n, what))
        return false;
    if (*n > GGUF_MAX_STRING) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: %s at byte %zu is %llu bytes long (limit %u)",
                        c->g->path, what, c->at - 8, (unsigned long long)*n, GGUF_MAX_STRING);
        return false;
    }
    if (!need(c, *n, what))
        return false;
    *s = c->g->map + c->at;
    c->at += *n;
    return true;
}

static char *dup_str(cursor *c, const unsigned char *s, uint64_t n, const char *what) {
    if (memchr(s, 0, n)) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: %s holds a NUL byte", c->g->path, what);
        return NULL;
    }
    char *d = malloc(n + 1);
    if (!d) {
        c->st = rt_fail(c->m, ATTN_E_NOMEM, "%s: out of memory", c->g->path);
        return NULL;
    }
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* bytes of one scalar of metadata type t; 0 for strings and arrays, -1 unknown */
static int scalar_size(uint32_t t) {
    static const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < sizeof sizes / sizeof sizes[0] ? sizes[t] : -1;
}

static bool read_value(cursor *c, gguf_kv *kv) {
    const char *k = kv->key;
    char what[160];
    snprintf(what, sizeof what, "value of '%.100s'", k);
    int sz = scalar_size(kv->type);
    if (sz < 0) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: metadata '%s' has unknown type %u", c->g->path, k,
                        kv->type);
        return false;
    }
    if (kv->type == ATTN_GGUF_STRING)
        return read_str(c, &kv->value, &kv->n, what);
    if (kv->type != ATTN_GGUF_ARRAY) {
        if (!need(c, (uint64_t)sz, what))
            return false;
        kv->value = c->g->map + c->at;
        c->at += (size_t)sz;
        if (kv->type == ATTN_GGUF_BOOL && kv->value[0] > 1) {
            c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: metadata '%s' is a bool holding %u",
                            c->g->path, k, kv->value[0]);
            return false;
        }
        return true;
    }
    if (!read_u32(c, &kv->arr_type, what) || !read_u64(c, &kv->n, what))
        return false;
    int esz = scalar_size(kv->arr_type);
    if (esz < 0 || kv->arr_type == ATTN_GGUF_ARRAY) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: metadata '%s' is an array of %s type %u",
                        c->g->path, k, esz < 0 ? "unknown" : "nested array", kv->arr_type);
        return false;
    }
    kv->value = c->g->map + c->at;
    if (kv->arr_type != ATTN_GGUF_STRING) {
        if (kv->n > (c->g->size - c->at) / (uint64_t)esz)
            return need(c, UINT64_MAX, what);
        c->at += (size_t)(kv->n * (uint64_t)esz);
        return true;
    }
    for (uint64_t i = 0; i < kv->n; i++) { /* strings: walk them all once */
        const unsigned char *s;
        uint64_t n;
        if (!read_str(c, &s, &n, what))
            return false;
    }
    return true;
}

void attn_gguf_close(attn_gguf *g) {
    if (!g)
        return;
    if (g->mapped)
        munmap((void *)g->map, g->size);
    for (int i = 0; i < g->n_kv; i++)
        free(g->kv[i].key);
    for (int i = 0; i < g->n_tensors; i++)
        free((char *)g->t[i].name);
    free(g->kv);
    free(g->t);
    free(g->path);
    free(g);
}

static const gguf_kv *find_kv(const attn_gguf *g, const char *key) {
    for (int i = 0; g && key && i < g->n_kv; i++)
        if (strcmp(g->kv[i].key, key) == 0)
            return &g->kv[i];
    return NULL;
}

typedef struct span {
    uint64_t begin, end;
    int idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin != y->begin ? (x->begin < y->begin ? -1 : 1)
                                : (x->end < y->end ? -1 : x->end > y->end);
}

/* Reads a tensor info entry into t; its data is checked by the caller. */
static bool read_tensor(cursor *c, attn_gguf_tensor *t, int i) {
    const attn_gguf *g = c->g;
    const unsigned char *s;
    uint64_t n, off;
    uint32_t nd, type;
    char what[64];
    snprintf(what, sizeof what, "name of tensor %d", i);
    if (!read_str(c, &s, &n, what) || !(t->name = dup_str(c, s, n, what)))
        return false;
    if (!read_u32(c, &nd, "tensor dimensions"))
        return false;
    if (nd < 1 || nd > GGUF_MAX_DIMS) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: tensor '%s' has %u dimensions; GGUF allows 1..%d",
                        g->path, t->name, nd, GGUF_MAX_DIMS);
        return false;
    }
    t->ndim = (int)nd;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t ne;
        if (!read_u64(c, &ne, "tensor shape"))
            return false;
        if (ne > (uint64_t)INT64_MAX || (ne && numel > (uint64_t)INT64_MAX / ne)) {
            c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: tensor '%s': its element count overflows",
                            g->path, t->name);
            return false;
        }
        t->ne[d] = (int64_t)ne;
        numel *= ne;
    }
    if (!read_u32(c, &type, "tensor type") || !read_u64(c, &off, "tensor offset"))
        return false;
    const struct ggml_type_info *ti = type_info(type);
    if (!ti) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: tensor '%s' has unknown ggml type %u", g->path,
                        t->name, type);
        return false;
    }
    if (t->ne[0] % ti->blck) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT,
                        "%s: tensor '%s' of type %s: its rows (%lld) are not whole blocks of %u",
                        g->path, t->name, ti->name, (long long)t->ne[0], ti->blck);
        return false;
    }
    if (numel / ti->blck > UINT64_MAX / 2 / ti->size) {
        c->st = rt_fail(c->m, ATTN_E_FORMAT, "%s: tensor '%s': its byte size overflows", g->path,
                        t->name);
        return false;
    }
    t->type = type;
    t->type_name = ti->name;
    t->nbytes = numel / ti->blck * ti->size;
    if (off % g->alignment) {
        c->st =
            rt_fail(c->m, ATTN_E_FORMAT,
                    "%s: tensor '%s': offset %llu is not a multiple of the alignment %llu", g->path,
                    t->name, (unsigned long long)off, (unsigned long long)g->alignment);
        return false;
    }
    t->offset = off;
    return true;
}

static attn_status parse(attn_gguf *g, attn_msg *m) {
    cursor c = {g, 0, m, ATTN_OK};
    uint32_t magic = 0;
    uint64_t n_t = 0, n_kv = 0;
    if (!read_u32(&c, &magic, "magic") || magic != 0x46554747u) /* "GGUF" */
        return c.st ? c.st
                    : rt_fail(m, ATTN_E_FORMAT, "%s: not a GGUF file (no 'GGUF' magic)", g->path);
    if (!read_u32(&c, &g->version, "version"))
        return c.st;
    if (g->version != 2 && g->version != 3)
        return rt_fail(m, ATTN_E_FORMAT, "%s: GGUF version %u; versions 2 and 3 are supported%s",
                       g->path, g->version,
                       g->version > 0xffff ? " (a big-endian file? only little-endian is)" : "");
    if (!read_u64(&c, &n_t, "tensor count") || !read_u64(&c, &n_kv, "metadata count"))
        return c.st;
    /* each entry takes at least 8 (kv) or 28 (tensor) bytes: bounds the counts */
    if (n_kv > g->size / 12 || n_t > g->size / 28)
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: %llu tensors and %llu metadata entries cannot fit in %zu bytes",
                       g->path, (unsigned long long)n_t, (unsigned long long)n_kv, g->size);
    g->kv = calloc(n_kv + 1, sizeof *g->kv);
    g->t = calloc(n_t + 1, sizeof *g->t);
    if (!g->kv || !g->t)
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", g->path);
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kv[g->n_kv];
        const unsigned char *s;
        uint64_t n;
        if (!read_str(&c, &s, &n, "metadata key") || !(kv->key = dup_str(&c, s, n, "metadata key")))
            return c.st;
        g->n_kv++;
        if (find_kv(g, kv->key) != kv)
            return rt_fail(m, ATTN_E_FORMAT, "%s: metadata '%s' appears twice", g->path, kv->key);
        if (!read_u32(&c, &kv->type, "metadata type") || !read_value(&c, kv))
            return c.st;
    }
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = find_kv(g, "general.alignment");
    if (al) {
        uint64_t a = al->type == ATTN_GGUF_UINT32 ? le(al->value, 4) : 0;
        if (!a || (a & (a - 1)))
            return rt_fail(m, ATTN_E_FORMAT,
                           "%s: general.alignment must be a u32 power of two (type %u)", g->path,
                           al->type);
        g->alignment = a;
    }
    for (uint64_t i = 0; i < n_t; i++) {
        if (!read_tensor(&c, &g->t[g->n_tensors], (int)i)) {
            free((char *)g->t[g->n_tensors].name);
            g->t[g->n_tensors].name = NULL;
            return c.st;
        }
        g->n_tensors++;
        if (attn_gguf_find(g, g->t[i].name) != &g->t[i])
            return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s' appears twice", g->path,
                           g->t[i].name);
    }
    uint64_t data = (c.at + g->alignment - 1) / g->alignment * g->alignment;
    if (n_t && data > g->size)
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: the tensor data would start at byte %llu, past the "
                       "end of the file (%zu bytes)",
                       g->path, (unsigned long long)data, g->size);
    uint64_t avail = data <= g->size ? g->size - data : 0;
    span *sp = calloc(n_t + 1, sizeof *sp);
    if (!sp)
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", g->path);
    attn_status st = ATTN_OK;
    for (int i = 0; i < g->n_tensors && !st; i++) {
        attn_gguf_tensor *t = &g->t[i];
        if (t->offset > avail || t->nbytes > avail - t->offset)
            st = rt_fail(m, ATTN_E_FORMAT,
                         "%s: tensor '%s': %llu bytes at data offset %llu run past the end of the "
                         "file (%llu bytes of data)",
                         g->path, t->name, (unsigned long long)t->nbytes,
                         (unsigned long long)t->offset, (unsigned long long)avail);
        t->data = g->map + data + t->offset;
        sp[i] = (span){t->offset, t->offset + t->nbytes, i};
    }
    if (!st) {
        qsort(sp, (size_t)g->n_tensors, sizeof *sp, span_cmp);
        for (int i = 1; i < g->n_tensors && !st; i++)
            if (sp[i].begin < sp[i - 1].end)
                st = rt_fail(m, ATTN_E_FORMAT, "%s: tensors '%s' and '%s' overlap", g->path,
                             g->t[sp[i - 1].idx].name, g->t[sp[i].idx].name);
    }
    free(sp);
    return st;
}

static attn_gguf *gguf_new(const char *name, attn_msg *m) {
    attn_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(name))) {
        free(g);
        rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", name);
        return NULL;
    }
    return g;
}

attn_status attn_gguf_open_memory(const void *data, size_t size, const char *name, attn_gguf **out,
                                  attn_msg *m) {
    if ((!data && size) || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_gguf_open_memory: NULL argument");
    attn_gguf *g = gguf_new(name ? name : "<memory>", m);
    if (!g)
        return ATTN_E_NOMEM;
    g->map = data;
    g->size = size;
    attn_status st = parse(g, m);
    if (st) {
        attn_gguf_close(g);
        return st;
    }
    *out = g;
    return ATTN_OK;
}

attn_status attn_gguf_open(const char *path, attn_gguf **out, attn_msg *m) {
    if (!path || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_gguf_open: NULL argument");
    attn_gguf *g = gguf_new(path, m);
    if (!g)
        return ATTN_E_NOMEM;
    attn_status st = rt_map_file(path, &g->map, &g->size, m);
    g->mapped = g->map != NULL; /* attn_gguf_close unmaps it */
    if (st == ATTN_OK && g->size == 0)
        st = rt_fail(m, ATTN_E_FORMAT, "%s: empty file; a GGUF file starts with 'GGUF'", path);
    if (st == ATTN_OK)
        st = parse(g, m);
    if (st) {
        attn_gguf_close(g);
        return st;
    }
    *out = g;
    return ATTN_OK;
}

int attn_gguf_count(const attn_gguf *g) {
    return g ? g->n_tensors : 0;
}

const attn_gguf_tensor *attn_gguf_get(const attn_gguf *g, int i) {
    return g && i >= 0 && i < g->n_tensors ? &g->t[i] : NULL;
}

const attn_gguf_tensor *attn_gguf_find(const attn_gguf *g, const char *name) {
    for (int i = 0; g && name && i < g->n_tensors; i++)
        if (g->t[i].name && strcmp(g->t[i].name, name) == 0)
            return &g->t[i];
    return NULL;
}

int attn_gguf_kv_count(const attn_gguf *g) {
    return g ? g->n_kv : 0;
}

const char *attn_gguf_kv_key(const attn_gguf *g, int i) {
    return g && i >= 0 && i < g->n_kv ? g->kv[i].key : NULL;
}

int attn_gguf_kv_type(const attn_gguf *g, const char *key) {
    const gguf_kv *kv = find_kv(g, key);
    return kv ? (int)kv->type : -1;
}

/* Scalar element i of a value of type t at p, as an integer or a double. */
static bool num_at(uint32_t t, const unsigned char *p, bool want_int, int64_t *iv, double *dv) {
    union {
        uint32_t u;
        float f;
    } f32;
    union {
        uint64_t u;
        double d;
    } f64;
    switch (t) {
    case ATTN_GGUF_UINT8: *iv = p[0]; break;
    case ATTN_GGUF_INT8: *iv = (int8_t)p[0]; break;
    case ATTN_GGUF_UINT16: *iv = (int64_t)le(p, 2); break;
    case ATTN_GGUF_INT16: *iv = (int16_t)le(p, 2); break;
    case ATTN_GGUF_UINT32: *iv = (int64_t)le(p, 4); break;
    case ATTN_GGUF_INT32: *iv = (int32_t)le(p, 4); break;
    case ATTN_GGUF_INT64: *iv = (int64_t)le(p, 8); break;
    case ATTN_GGUF_UINT64:
        if (le(p, 8) > (uint64_t)INT64_MAX)
            return false;
        *iv = (int64_t)le(p, 8);
        break;
    case ATTN_GGUF_FLOAT32:
        if (want_int)
            return false;
        f32.u = (uint32_t)le(p, 4);
        *dv = f32.f;
        return true;
    case ATTN_GGUF_FLOAT64:
        if (want_int)
            return false;
        f64.u = le(p, 8);
        *dv = f64.d;
        return true;
    default: return false;
    }
    *dv = (double)*iv;
    return true;
}

/* The value of key as a number: a scalar, or element `index` of an array
 * of numbers (per-layer values). */
static bool get_num(const attn_gguf *g, const char *key, int64_t index, bool want_int, int64_t *iv,
                    double *dv) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv)
        return false;
    if (kv->type != ATTN_GGUF_ARRAY)
        return num_at(kv->type, kv->value, want_int, iv, dv);
    int esz = scalar_size(kv->arr_type);
    if (index < 0 || (uint64_t)index >= kv->n || esz <= 0)
        return false;
    return num_at(kv->arr_type, kv->value + (size_t)index * (size_t)esz, want_int, iv, dv);
}

bool attn_gguf_get_int(const attn_gguf *g, const char *key, int64_t index, int64_t *out) {
    double d;
    return out && get_num(g, key, index, true, out, &d);
}

bool attn_gguf_get_float(const attn_gguf *g, const char *key, int64_t index, double *out) {
    int64_t i;
    return out && get_num(g, key, index, false, &i, out);
}

bool attn_gguf_get_bool(const attn_gguf *g, const char *key, bool *out) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != ATTN_GGUF_BOOL || !out)
        return false;
    *out = kv->value[0] != 0;
    return true;
}

bool attn_gguf_get_str(const attn_gguf *g, const char *key, const char **s, size_t *len) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != ATTN_GGUF_STRING || !s || !len)
        return false;
    *s = (const char *)kv->value;
    *len = (size_t)kv->n;
    return true;
}

int64_t attn_gguf_array_len(const attn_gguf *g, const char *key) {
    const gguf_kv *kv = find_kv(g, key);
    return kv && kv->type == ATTN_GGUF_ARRAY ? (int64_t)kv->n : -1;
}
