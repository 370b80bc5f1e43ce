/* source.c: a checkpoint as the loader sees it: named tensors from one
 * safetensors file, from the shards a model.safetensors.index.json names
 * (opened as they are needed), or from a GGUF file (shapes turned to the
 * outermost-first order of the others). */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rt.h"

#define INDEX_MAX (64u << 20) /* bytes of an index file */

typedef struct shard {
    char *file; /* as the index names it */
    attn_st *st;
} shard;

struct rt_src {
    char *path;
    attn_st *st;      /* a single safetensors file */
    attn_gguf *gg;    /* a GGUF file */
    cJSON *index;     /* a sharded checkpoint's index */
    const cJSON *map; /* its weight_map */
    char *dir;        /* the index's directory, "/"-terminated */
    shard *shards;
    int n_shards;
};

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool rt_path_is_gguf(const char *path) {
    unsigned char magic[4] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ends_with(path, ".gguf");
    bool gguf = read(fd, magic, 4) == 4 && memcmp(magic, "GGUF", 4) == 0;
    close(fd);
    return gguf;
}

void rt_src_close(rt_src *s) {
    if (!s)
        return;
    attn_st_close(s->st);
    attn_gguf_close(s->gg);
    cJSON_Delete(s->index);
    for (int i = 0; i < s->n_shards; i++) {
        free(s->shards[i].file);
        attn_st_close(s->shards[i].st);
    }
    free(s->shards);
    free(s->dir);
    free(s->path);
    free(s);
}

static attn_status open_index(rt_src *s, attn_msg *m) {
    const char *p = s->path;
    FILE *fp = fopen(p, "rb");
    if (!fp)
        return rt_fail(m, ATTN_E_IO, "%s: cannot open: %s", p, strerror(errno));
    char *buf = malloc(INDEX_MAX + 1);
    size_t n = buf ? fread(buf, 1, INDEX_MAX + 1, fp) : 0;
    bool err = ferror(fp);
    fclose(fp);
    if (!buf)
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", p);
    if (err || n > INDEX_MAX) {
        free(buf);
        return err ? rt_fail(m, ATTN_E_IO, "%s: cannot read", p)
                   : rt_fail(m, ATTN_E_FORMAT, "%s: larger than %u bytes; not an index", p,
                             INDEX_MAX);
    }
    s->index = cJSON_ParseWithLength(buf, n);
    free(buf);
    if (!s->index)
        return rt_fail(m, ATTN_E_FORMAT, "%s: malformed JSON", p);
    s->map = cJSON_GetObjectItemCaseSensitive(s->index, "weight_map");
    if (!cJSON_IsObject(s->map))
        return rt_fail(m, ATTN_E_FORMAT,
                       "%s: not a safetensors index: it needs an object 'weight_map' "
                       "{tensor name: shard file}",
                       p);
    const cJSON *e;
    cJSON_ArrayForEach(e, s->map) {
        if (!cJSON_IsString(e) || !e->valuestring[0] || strchr(e->valuestring, '/'))
            return rt_fail(m, ATTN_E_FORMAT,
                           "%s: weight_map['%s'] must name a shard file in the index's directory",
                           p, e->string ? e->string : "");
    }
    const char *slash = strrchr(p, '/');
    size_t dl = slash ? (size_t)(slash - p + 1) : 0;
    if (!(s->dir = malloc(dl + 1)))
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", p);
    memcpy(s->dir, p, dl);
    s->dir[dl] = 0;
    return ATTN_OK;
}

attn_status rt_src_open(const char *path, rt_src **out, attn_msg *m) {
    if (!path || !out)
        return rt_fail(m, ATTN_E_INVALID, "NULL checkpoint path");
    rt_src *s = calloc(1, sizeof *s);
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", path);
    }
    attn_status st = ends_with(path, ".json") ? open_index(s, m)
                     : rt_path_is_gguf(path)  ? attn_gguf_open(path, &s->gg, m)
                                              : attn_st_open(path, &s->st, m);
    if (st) {
        rt_src_close(s);
        return st;
    }
    *out = s;
    return ATTN_OK;
}

bool rt_src_is_gguf(const rt_src *s) {
    return s && s->gg;
}

const char *rt_src_path(const rt_src *s) {
    return s ? s->path : "";
}

int rt_src_count(const rt_src *s) {
    return s->st   ? attn_st_count(s->st)
           : s->gg ? attn_gguf_count(s->gg)
                   : cJSON_GetArraySize(s->map);
}

const char *rt_src_name(const rt_src *s, int i) {
    if (s->st)
        return attn_st_get(s->st, i)->name;
    if (s->gg)
        return attn_gguf_get(s->gg, i)->name;
    return cJSON_GetArrayItem(s->map, i)->string;
}

/* A tensor of st: a block format where the header says so (attn.h
 * ATTN_ST_FORMAT_KEY), its shape then counted in values. */
static void from_st(const attn_st *st, const attn_st_info *i, const char *file, rt_tensor *t) {
    *t = (rt_tensor){.name = i->name,
                     .file = file,
                     .type = i->dtype,
                     .ndim = i->ndim,
                     .data = i->data,
                     .nbytes = i->nbytes};
    t->dtype = attn_st_format(st, i, t->shape);
    if (attn_dtype_block(t->dtype) > 1)
        t->type = t->dtype == ATTN_DTYPE_Q8_0 ? "Q8_0" : "Q4_0";
}

/* The open shard named file, opening it on first use. */
static attn_status get_shard(rt_src *s, const char *file, const char *tensor, attn_st **out,
                             attn_msg *m) {
    for (int i = 0; i < s->n_shards; i++)
        if (strcmp(s->shards[i].file, file) == 0) {
            *out = s->shards[i].st;
            return ATTN_OK;
        }
    size_t n = strlen(s->dir) + strlen(file) + 1;
    char *full = malloc(n);
    shard *grown = realloc(s->shards, (size_t)(s->n_shards + 1) * sizeof *grown);
    if (!full || !grown) {
        free(full);
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", s->path);
    }
    s->shards = grown;
    snprintf(full, n, "%s%s", s->dir, file);
    attn_msg why = {{0}};
    attn_st *st = NULL;
    attn_status rc = attn_st_open(full, &st, &why);
    free(full);
    if (rc)
        return rt_fail(m, rc, "%s: shard '%s' (holding '%s'): %s", s->path, file, tensor, why.text);
    char *copy = strdup(file);
    if (!copy) {
        attn_st_close(st);
        return rt_fail(m, ATTN_E_NOMEM, "%s: out of memory", s->path);
    }
    s->shards[s->n_shards++] = (shard){copy, st};
    *out = st;
    return ATTN_OK;
}

attn_status rt_src_find(rt_src *s, const char *name, rt_tensor *t, attn_msg *m) {
    if (s->st) {
        const attn_st_info *i = attn_st_find(s->st, name);
        if (i)
            from_st(s->st, i, s->path, t);
        return i ? ATTN_OK : ATTN_E_FORMAT;
    }
    if (s->gg) {
        const attn_gguf_tensor *g = attn_gguf_find(s->gg, name);
        if (!g)
            return ATTN_E_FORMAT;
        *t = (rt_tensor){.name = g->name,
                         .file = s->path,
                         .type = g->type_name,
                         .dtype = attn_gguf_type_dtype(g->type),
                         .ndim = g->ndim,
                         .data = g->data,
                         .nbytes = g->nbytes};
        for (int d = 0; d < g->ndim; d++) /* ggml: ne[0] fastest; here: outermost first */
            t->shape[d] = g->ne[g->ndim - 1 - d];
        return ATTN_OK;
    }
    const cJSON *file = cJSON_GetObjectItemCaseSensitive(s->map, name);
    if (!file)
        return ATTN_E_FORMAT;
    attn_st *st = NULL;
    attn_status rc = get_shard(s, file->valuestring, name, &st, m);
    if (rc)
        return rc == ATTN_E_FORMAT ? ATTN_E_IO : rc; /* not "missing": the message says why */
    const attn_st_info *i = attn_st_find(st, name);
    if (!i)
        return rt_fail(m, ATTN_E_IO,
                       "%s: '%s' is in the weight_map, but its shard '%s' has no "
                       "such tensor",
                       s->path, name, file->valuestring);
    /* names in messages are of the shard's file */
    from_st(st, i, file->valuestring, t);
    return ATTN_OK;
}

void rt_src_release(const rt_tensor *t) {
    /* the pages are clean pages of a private file mapping: dropped, they
     * are read again if ever touched, so the copy just made is all that
     * stays resident */
    long pg = sysconf(_SC_PAGESIZE);
    if (!t->nbytes || pg <= 0)
        return;
    uintptr_t a = (uintptr_t)t->data & ~(uintptr_t)(pg - 1);
    uintptr_t e = ((uintptr_t)t->data + t->nbytes + (uintptr_t)pg - 1) & ~(uintptr_t)(pg - 1);
    madvise((void *)a, e - a, MADV_DONTNEED);
}

bool rt_src_suggest(const rt_src *s, const char *prefix, const char *local, char *buf,
                    size_t size) {
    /* the layer number the caller asked for, if its prefix has one */
    const char *d = prefix;
    while (*d && !isdigit((unsigned char)*d))
        d++;
    size_t dl = strspn(d, "0123456789");
    const char *first = NULL, *layer = NULL;
    size_t ll = strlen(local);
    for (int i = 0, n = rt_src_count(s); i < n && !layer; i++) {
        const char *name = rt_src_name(s, i);
        size_t nl = strlen(name);
        if (nl < ll || strcmp(name + nl - ll, local) != 0 || (nl > ll && name[nl - ll - 1] != '.'))
            continue;
        if (!first)
            first = name;
        for (const char *p = name; dl && p + dl < name + nl - ll && !layer; p++)
            if (strncmp(p, d, dl) == 0 && (p == name || p[-1] == '.') && p[dl] == '.')
                layer = name;
    }
    const char *best = layer ? layer : first;
    if (!best)
        return false;
    snprintf(buf, size, "%.*s", (int)(strlen(best) - ll), best);
    return true;
}
