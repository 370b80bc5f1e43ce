/* safetensors.c: reading (mmap + full validation) and atomic writing of
 * safetensors files: an 8-byte little-endian header length N, N bytes of
 * JSON {name: {dtype, shape, data_offsets: [begin, end]}, __metadata__},
 * then the data buffer the offsets index. The JSON is cJSON's to parse. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rt.h"

#define HEADER_MAX (100u << 20)      /* as the safetensors project: 100 MB */
#define MAX_EXACT 9007199254740992.0 /* 2^53: JSON numbers beyond are inexact */

struct attn_st {
    char *path;               /* owned */
    const unsigned char *map; /* the whole file: mapped (owned) or borrowed */
    bool mapped;
    size_t size;
    cJSON *root; /* owned; names and dtypes borrow from it */
    int n;
    attn_st_info *t; /* owned, n entries in file order */
};

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

static size_t dtype_size(const char *name) {
    for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
        if (strcmp(dtypes[i].name, name) == 0)
            return dtypes[i].size;
    return 0;
}

static const char *st_dtype_of(attn_dtype t) {
    switch (t) {
    case ATTN_DTYPE_F32: return "F32";
    case ATTN_DTYPE_F16: return "F16";
    case ATTN_DTYPE_BF16: return "BF16";
    case ATTN_DTYPE_Q8_0:
    case ATTN_DTYPE_Q4_0: return "U8"; /* blocks as bytes; the format in __metadata__ */
    case ATTN_DTYPE_COUNT: break;
    }
    return NULL;
}

void attn_st_close(attn_st *f) {
    if (!f)
        return;
    if (f->mapped)
        munmap((void *)f->map, f->size);
    cJSON_Delete(f->root);
    free(f->t);
    free(f->path);
    free(f);
}

int attn_st_count(const attn_st *f) {
    return f ? f->n : 0;
}

const attn_st_info *attn_st_get(const attn_st *f, int i) {
    return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}

const attn_st_info *attn_st_find(const attn_st *f, const char *name) {
    if (!f || !name)
        return NULL;
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0)
            return &f->t[i];
    return NULL;
}

const char *attn_st_metadata(const attn_st *f, const char *key) {
    if (!f || !key)
        return NULL;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(f->root, "__metadata__");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

attn_dtype attn_st_format(const attn_st *f, const attn_st_info *t, int64_t *shape) {
    if (!f || !t)
        return ATTN_DTYPE_COUNT;
    if (shape)
        memcpy(shape, t->shape, sizeof t->shape);
    for (int d = 0; d < ATTN_DTYPE_BF16 + 1; d++)
        if (strcmp(t->dtype, st_dtype_of((attn_dtype)d)) == 0)
            return (attn_dtype)d;
    char key[600];
    snprintf(key, sizeof key, "%s%s", ATTN_ST_FORMAT_KEY, t->name);
    const char *fmt = attn_st_metadata(f, key);
    if (!fmt || strcmp(t->dtype, "U8") != 0 || t->ndim < 1)
        return ATTN_DTYPE_COUNT;
    attn_dtype dt = strcmp(fmt, "q8_0") == 0   ? ATTN_DTYPE_Q8_0
                    : strcmp(fmt, "q4_0") == 0 ? ATTN_DTYPE_Q4_0
                                               : ATTN_DTYPE_COUNT;
    int64_t bb = (int64_t)rt_quant_block_bytes(dt), last = t->shape[t->ndim - 1];
    if (!bb || last % bb)
        return ATTN_DTYPE_COUNT;
    if (shape)
        shape[t->ndim - 1] = last / bb * RT_QK;
    return dt;
}

/* A JSON number that is an exact non-negative integer. */
static bool json_uint(const cJSON *j, double *out) {
    if (!cJSON_IsNumber(j))
        return false;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= MAX_EXACT) || d != floor(d))
        return false;
    *out = d;
    return true;
}

/* Parses one header entry into t; data is checked later against the buffer. */
static attn_status parse_entry(const attn_st *f, const cJSON *e, attn_st_info *t, size_t *begin,
                               size_t *end, attn_msg *m) {
    const char *p = f->path, *name = e->string;
    if (!cJSON_IsObject(e))
        return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s': header entry is not an object", p, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off))
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: tensor '%s': needs string 'dtype', array 'shape' and array "
                       "'data_offsets'",
                       p, name);
    size_t esize = dtype_size(dt->valuestring);
    if (!esize)
        return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s': unknown dtype '%s'", p, name,
                       dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    if (nd > ATTN_ST_MAX_DIMS)
        return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s': %d dimensions; at most %d supported", p,
                       name, nd, ATTN_ST_MAX_DIMS);
    t->name = name;
    t->dtype = dt->valuestring;
    t->ndim = nd;
    const cJSON *d;
    int i = 0;
    cJSON_ArrayForEach(d, sh) {
        double v;
        if (!json_uint(d, &v))
            return rt_fail(m, ATTN_E_FORMAT,
                           "%s: tensor '%s': shape entries must be non-negative integers", p, name);
        t->shape[i++] = (int64_t)v;
    }
    int64_t numel = rt_numel(nd, t->shape, (int64_t)(MAX_EXACT / (double)esize));
    if (numel < 0)
        return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s': shape's byte size overflows", p, name);
    double b, e2;
    if (cJSON_GetArraySize(off) != 2 || !json_uint(cJSON_GetArrayItem(off, 0), &b) ||
        !json_uint(cJSON_GetArrayItem(off, 1), &e2) || b > e2)
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: tensor '%s': data_offsets must be [begin, end] with 0 <= begin <= end",
                       p, name);
    t->nbytes = (size_t)numel * esize;
    if ((size_t)(e2 - b) != t->nbytes)
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: tensor '%s': data_offsets span %.0f bytes but %s%s needs %zu", p, name,
                       e2 - b, t->dtype, nd ? " of that shape" : " scalar", t->nbytes);
    *begin = (size_t)b;
    *end = (size_t)e2;
    return ATTN_OK;
}

typedef struct span {
    size_t begin, end;
    int idx;
} span;

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static attn_status parse_header(attn_st *f, attn_msg *m) {
    const char *p = f->path;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | f->map[i];
    size_t avail = f->size - 8;
    if (hlen > avail)
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: header length %llu exceeds the %zu bytes after the length field "
                       "(truncated or not a safetensors file)",
                       p, (unsigned long long)hlen, avail);
    if (hlen > HEADER_MAX)
        return rt_fail(m, ATTN_E_FORMAT, "%s: header length %llu exceeds the limit of %u bytes", p,
                       (unsigned long long)hlen, HEADER_MAX);
    if (hlen < 2 || f->map[8] != '{')
        return rt_fail(m, ATTN_E_FORMAT, "%s: header is not a JSON object", p);
    const char *json = (const char *)f->map + 8;
    const char *stop = NULL;
    f->root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &stop, false);
    if (f->root && stop)
        while (stop < json + hlen &&
               (*stop == ' ' || *stop == '\n' || *stop == '\t' || *stop == '\r'))
            stop++;
    if (!f->root || !stop || stop != json + hlen) {
        long pos = stop && stop >= json && stop <= json + hlen ? (long)(stop - json) : -1;
        return rt_fail(m, ATTN_E_FORMAT, "%s: header is malformed JSON (near byte %ld of %llu)", p,
                       pos, (unsigned long long)hlen);
    }
    if (!cJSON_IsObject(f->root))
        return rt_fail(m, ATTN_E_FORMAT, "%s: header is not a JSON object", p);

    int cap = cJSON_GetArraySize(f->root);
    f->t = calloc((size_t)cap + 1, sizeof *f->t);
    span *sp = calloc((size_t)cap + 1, sizeof *sp);
    if (!f->t || !sp) {
        free(sp);
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory reading the header", p);
    }
    size_t data_size = avail - (size_t)hlen;
    const unsigned char *data = f->map + 8 + hlen;
    attn_status st = ATTN_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, f->root) {
        if (!e->string) {
            st = rt_fail(m, ATTN_E_FORMAT, "%s: header entry without a name", p);
            break;
        }
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        if (attn_st_find(f, e->string)) {
            st = rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s' appears twice in the header", p,
                         e->string);
            break;
        }
        attn_st_info *t = &f->t[f->n];
        st = parse_entry(f, e, t, &sp[f->n].begin, &sp[f->n].end, m);
        if (st)
            break;
        if (sp[f->n].end > data_size) {
            st = rt_fail(m, ATTN_E_FORMAT,
                         "%s: tensor '%s': data_offsets [%zu, %zu] out of range: the data "
                         "buffer has %zu bytes",
                         p, t->name, sp[f->n].begin, sp[f->n].end, data_size);
            break;
        }
        t->data = data + sp[f->n].begin;
        sp[f->n].idx = f->n;
        f->n++;
    }
    if (!st) {
        qsort(sp, (size_t)f->n, sizeof *sp, span_cmp);
        for (int i = 1; i < f->n; i++) {
            if (sp[i].begin < sp[i - 1].end) {
                st = rt_fail(m, ATTN_E_FORMAT,
                             "%s: tensors '%s' [%zu, %zu] and '%s' [%zu, %zu] overlap", p,
                             f->t[sp[i - 1].idx].name, sp[i - 1].begin, sp[i - 1].end,
                             f->t[sp[i].idx].name, sp[i].begin, sp[i].end);
                break;
            }
        }
    }
    free(sp);
    return st;
}

static attn_st *st_new(const char *name, attn_msg *m) {
    attn_st *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(name))) {
        free(f);
        rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", name);
        return NULL;
    }
    return f;
}

static attn_status too_short(const char *name, size_t n, attn_msg *m) {
    return rt_fail(m, ATTN_E_FORMAT,
                   "%s: file is %zu bytes; a safetensors file starts with an 8-byte header length",
                   name, n);
}

attn_status attn_st_open_memory(const void *data, size_t size, const char *name, attn_st **out,
                                attn_msg *m) {
    if ((!data && size) || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_st_open_memory: NULL argument");
    if (!name)
        name = "<memory>";
    if (size < 8)
        return too_short(name, size, m);
    attn_st *f = st_new(name, m);
    if (!f)
        return ATTN_E_NOMEM;
    f->map = data;
    f->size = size;
    attn_status st = parse_header(f, m);
    if (st != ATTN_OK) {
        attn_st_close(f);
        return st;
    }
    *out = f;
    return ATTN_OK;
}

attn_status attn_st_open(const char *path, attn_st **out, attn_msg *m) {
    if (!path || !out)
        return rt_fail(m, ATTN_E_INVALID, "attn_st_open: NULL argument");
    attn_st *f = st_new(path, m);
    if (!f)
        return ATTN_E_NOMEM;
    attn_status st = rt_map_file(path, &f->map, &f->size, m);
    f->mapped = f->map != NULL; /* attn_st_close unmaps it */
    if (st == ATTN_OK && f->size < 8)
        st = too_short(path, f->size, m);
    if (st == ATTN_OK)
        st = parse_header(f, m);
    if (st != ATTN_OK) {
        attn_st_close(f);
        return st;
    }
    *out = f;
    return ATTN_OK;
}

attn_status rt_map_file(const char *path, const unsigned char **map, size_t *size, attn_msg *m) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return rt_fail(m, ATTN_E_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    void *p = NULL;
    attn_status st = ATTN_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        st = rt_fail(m, ATTN_E_IO, "%s: not a regular file", path);
    else if (sb.st_size > 0 &&
             (p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        st = rt_fail(m, ATTN_E_IO, "%s: cannot map: %s", path, strerror(errno));
    close(fd);
    if (st == ATTN_OK) {
        *map = p;
        *size = (size_t)sb.st_size;
    }
    return st;
}

void rt_shape_str(char *buf, size_t n, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < n)
        snprintf(buf + at, n - at, "]");
}

attn_status attn_st_read_f32(const attn_st *f, const char *name, int ndim, const int64_t *shape,
                             float *dst, attn_msg *m) {
    if (!f || !name || !dst || ndim < 0 || ndim > ATTN_ST_MAX_DIMS || (ndim && !shape))
        return rt_fail(m, ATTN_E_INVALID, "attn_st_read_f32: bad argument");
    const attn_st_info *t = attn_st_find(f, name);
    if (!t)
        return rt_fail(m, ATTN_E_FORMAT, "%s: missing tensor '%s'", f->path, name);
    int64_t has[ATTN_ST_MAX_DIMS];
    attn_dtype dt = attn_st_format(f, t, has);
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = has[i] == shape[i];
    if (!same) {
        char want[160], got[160];
        rt_shape_str(want, sizeof want, ndim, shape);
        rt_shape_str(got, sizeof got, t->ndim, has);
        return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s' has shape %s, expected %s", f->path, name,
                       got, want);
    }
    if (dt == ATTN_DTYPE_COUNT)
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: tensor '%s' has dtype %s; supported are F32, F16, BF16 and attnc's "
                       "q8_0 and q4_0",
                       f->path, name, t->dtype);
    int64_t n = 1; /* the shapes are equal: the values the header's bytes hold */
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    rt_to_f32(dt, t->data, dst, n);
    return ATTN_OK;
}

attn_status attn_st_read_rows_f32(const attn_st *f, const char *name, int64_t cols, float **out,
                                  int64_t *rows, attn_msg *m) {
    if (!f || !name || !out || !rows || cols < 1)
        return rt_fail(m, ATTN_E_INVALID, "attn_st_read_rows_f32: bad argument");
    const attn_st_info *t = attn_st_find(f, name);
    if (!t)
        return rt_fail(m, ATTN_E_FORMAT, "%s: missing tensor '%s' [rows, %lld]", f->path, name,
                       (long long)cols);
    int64_t has[ATTN_ST_MAX_DIMS];
    attn_st_format(f, t, has);
    if (t->ndim != 2 || has[0] < 1 || has[1] != cols) {
        char got[160];
        rt_shape_str(got, sizeof got, t->ndim, has);
        return rt_fail(m, ATTN_E_FORMAT, "%s: tensor '%s' has shape %s, expected [rows >= 1, %lld]",
                       f->path, name, got, (long long)cols);
    }
    float *buf = malloc((size_t)(has[0] * cols) * sizeof(float));
    if (!buf)
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory reading '%s'", f->path, name);
    attn_status st = attn_st_read_f32(f, name, 2, has, buf, m);
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    *rows = t->shape[0];
    return ATTN_OK;
}

/* ---- writing ----------------------------------------------------------- */

/* A tensor to write: attn_st_tensor's fields, or (i32 not NULL) I32 values. */
typedef struct wtensor {
    const char *name;
    attn_dtype dtype;
    int ndim;
    int64_t shape[ATTN_ST_MAX_DIMS];
    const float *data;
    const int32_t *i32;
} wtensor;

static attn_status check_tensors(const wtensor *t, int n, size_t *nbytes, attn_msg *m) {
    for (int i = 0; i < n; i++) {
        if (!t[i].name || !t[i].name[0] || (!t[i].i32 && !st_dtype_of(t[i].dtype)) ||
            t[i].ndim < 0 || t[i].ndim > ATTN_ST_MAX_DIMS || strcmp(t[i].name, "__metadata__") == 0)
            return rt_fail(m, ATTN_E_INVALID, "attn_st_write: tensor %d: bad name, dtype or ndim",
                           i);
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return rt_fail(m, ATTN_E_INVALID, "attn_st_write: tensor '%s' given twice",
                               t[i].name);
        int64_t numel = rt_numel(t[i].ndim, t[i].shape, INT64_MAX / 8);
        if (t[i].i32) {
            nbytes[i] = (size_t)(numel < 0 ? 0 : numel) * sizeof(int32_t);
            if (numel >= 0)
                continue;
        }
        if (numel < 0 || (numel > 0 && !t[i].data))
            return rt_fail(m, ATTN_E_INVALID, "attn_st_write: tensor '%s': bad shape or no data",
                           t[i].name);
        if (rt_quant_block_bytes(t[i].dtype) &&
            (t[i].ndim < 1 || t[i].shape[t[i].ndim - 1] % RT_QK))
            return rt_fail(m, ATTN_E_INVALID,
                           "attn_st_write: tensor '%s': %s needs rows of a "
                           "multiple of %d values",
                           t[i].name, attn_dtype_name(t[i].dtype), RT_QK);
        nbytes[i] = attn_dtype_bytes(t[i].dtype, numel);
    }
    return ATTN_OK;
}

static char *build_header(const wtensor *t, int n, const size_t *nbytes, size_t *len) {
    cJSON *root = cJSON_CreateObject(), *meta = NULL;
    char *txt = NULL;
    if (!root || !(meta = cJSON_AddObjectToObject(root, "__metadata__")) ||
        !cJSON_AddStringToObject(meta, "format", "pt"))
        goto done;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
        cJSON *sh = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *of = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
        if (!of || !cJSON_AddStringToObject(e, "dtype", t[i].i32 ? "I32" : st_dtype_of(t[i].dtype)))
            goto done;
        size_t bb = t[i].i32 ? 0 : rt_quant_block_bytes(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) {
            int64_t dim = t[i].shape[d];
            if (bb && d == t[i].ndim - 1) /* a row of blocks: its bytes */
                dim = dim / RT_QK * (int64_t)bb;
            if (!cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)dim)))
                goto done;
        }
        char key[600];
        if (bb &&
            (snprintf(key, sizeof key, "%s%s", ATTN_ST_FORMAT_KEY, t[i].name) >= (int)sizeof key ||
             !cJSON_AddStringToObject(meta, key, attn_dtype_name(t[i].dtype))))
            goto done;
        if (!cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off)) ||
            !cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + nbytes[i]))))
            goto done;
        off += nbytes[i];
    }
    char *json = cJSON_PrintUnformatted(root);
    if (!json)
        goto done;
    size_t jl = strlen(json), padded = (jl + 7) & ~(size_t)7; /* data stays 8-aligned */
    txt = malloc(padded);
    if (txt) {
        memcpy(txt, json, jl);
        memset(txt + jl, ' ', padded - jl);
        *len = padded;
    }
    cJSON_free(json);
done:
    cJSON_Delete(root);
    return txt;
}

/* Writes t's data: 0, -1 if the file cannot be written, or 1 + the index
 * of a value a block format cannot take. */
static int64_t write_data(FILE *fp, const wtensor *t, size_t nbytes) {
    if (nbytes == 0) /* zero-size tensors may have no data pointer */
        return 0;
    if (t->i32) /* little-endian, as every target attnc has */
        return fwrite(t->i32, 4, nbytes / 4, fp) == nbytes / 4 ? 0 : -1;
    size_t bb = rt_quant_block_bytes(t->dtype);
    if (bb) { /* row by row through the reference quantizer */
        int64_t cols = t->shape[t->ndim - 1], rows = (int64_t)(nbytes / bb) * RT_QK / cols;
        size_t row_bytes = attn_dtype_bytes(t->dtype, cols);
        unsigned char *buf = malloc(row_bytes);
        int64_t rc = buf ? 0 : -1;
        for (int64_t r = 0; rc == 0 && r < rows; r++) {
            int64_t bad = rt_quant_row_exact(t->dtype, t->data + r * cols, buf, cols);
            rc = bad >= 0                                     ? 1 + r * cols + bad
                 : fwrite(buf, 1, row_bytes, fp) == row_bytes ? 0
                                                              : -1;
        }
        free(buf);
        return rc;
    }
    size_t n = nbytes / attn_dtype_size(t->dtype);
    if (t->dtype == ATTN_DTYPE_F32)
        return fwrite(t->data, 4, n, fp) == n ? 0 : -1;
    unsigned char buf[8192];
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; i < n && k < sizeof buf; i++, k += 2) {
            uint16_t h =
                t->dtype == ATTN_DTYPE_F16 ? rt_f32_to_f16(t->data[i]) : rt_f32_to_bf16(t->data[i]);
            buf[k] = (unsigned char)h;
            buf[k + 1] = (unsigned char)(h >> 8);
        }
        if (fwrite(buf, 1, k, fp) != k)
            return -1;
    }
    return 0;
}

attn_status attn_st_write(const char *path, const attn_st_tensor *t, int n, attn_msg *m) {
    return attn_st_write_ints(path, t, n, NULL, 0, m);
}

attn_status attn_st_write_ints(const char *path, const attn_st_tensor *ft, int nf,
                               const attn_st_ints *ti, int ni, attn_msg *m) {
    if (!path || nf < 0 || ni < 0 || (nf > 0 && !ft) || (ni > 0 && !ti))
        return rt_fail(m, ATTN_E_INVALID, "attn_st_write: bad argument");
    int n = nf + ni;
    wtensor *t = calloc((size_t)n + 1, sizeof *t);
    if (!t)
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", path);
    for (int i = 0; i < nf; i++)
        t[i] = (wtensor){ft[i].name, ft[i].dtype, ft[i].ndim, {0}, ft[i].data, NULL};
    for (int i = 0; i < ni; i++)
        t[nf + i] = (wtensor){ti[i].name, ATTN_DTYPE_F32, ti[i].ndim, {0}, NULL, ti[i].data};
    for (int i = 0; i < n; i++)
        for (int d = 0; d < ATTN_ST_MAX_DIMS; d++)
            t[i].shape[d] = i < nf ? ft[i].shape[d] : ti[i - nf].shape[d];
    size_t *nbytes = calloc((size_t)n + 1, sizeof *nbytes);
    if (!nbytes) {
        free(t);
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", path);
    }
    char *tmp = NULL, *hdr = NULL;
    FILE *fp = NULL;
    size_t hlen = 0;
    attn_status st = check_tensors(t, n, nbytes, m);
    if (st)
        goto done;
    if (!(hdr = build_header(t, n, nbytes, &hlen))) {
        st = rt_fail(m, ATTN_E_NOMEM, "%s: out of memory building the header", path);
        goto done;
    }
    size_t pl = strlen(path);
    if (!(tmp = malloc(pl + 16))) {
        st = rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    snprintf(tmp, pl + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = rt_fail(m, ATTN_E_IO, "%s: cannot create: %s", path, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto done;
    }
    mode_t mask = umask(0);
    umask(mask);
    if (fchmod(fd, 0666 & ~mask) != 0 || !(fp = fdopen(fd, "wb"))) {
        close(fd);
        st = rt_fail(m, ATTN_E_IO, "%s: cannot write: %s", path, strerror(errno));
        goto done;
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    bool ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(hdr, 1, hlen, fp) == hlen;
    for (int i = 0; ok && i < n; i++) {
        int64_t rc = write_data(fp, &t[i], nbytes[i]);
        if (rc > 0) { /* nothing is left of the file: tmp is removed below */
            fclose(fp);
            fp = NULL;
            st = rt_fail(m, ATTN_E_INVALID,
                         "%s: tensor '%s' holds %s at element %lld: it "
                         "cannot be stored as %s",
                         path, t[i].name, rt_unstorable(t[i].data[rc - 1]), (long long)(rc - 1),
                         attn_dtype_name(t[i].dtype));
            goto done;
        }
        ok = rc == 0;
    }
    ok = (fflush(fp) == 0) && ok;
    int err = errno;
    ok = (fclose(fp) == 0) && ok;
    fp = NULL;
    if (!ok || rename(tmp, path) != 0) {
        st = rt_fail(m, ATTN_E_IO, "%s: cannot write: %s", path, strerror(ok ? errno : err));
        goto done;
    }
    free(tmp);
    tmp = NULL;
done:
    if (tmp) {
        unlink(tmp);
        free(tmp);
    }
    free(hdr);
    free(nbytes);
    free(t);
    return st;
}
