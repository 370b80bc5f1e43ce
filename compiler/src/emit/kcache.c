/* kcache.c: the persistent kernel cache (kcache.h) and its public face,
 * attnc_cache_*.
 *
 * An entry, <dir>/<XXH3-128 of the key, hex>.attnk:
 *   header  "ATTNCKC\0", u32 format, u32 blobs, u64 key bytes, u64 payload
 *           bytes, u64 XXH3-64 of the payload
 *   payload the key text, u64 size of each blob, the blobs
 * in the host's byte order (entries hold code for this host only). The
 * whole key is stored and compared, so a hash collision is a miss. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <llvm-c/Core.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "attnc_build_id.h"
#include "emit/emit.h"
#include "emit/kcache.h"

enum { KC_FORMAT = 1, KC_MAX_BLOBS = 4096 };
static const char kc_magic[8] = "ATTNCKC";
static const char kc_ext[] = ".attnk";

typedef struct kc_header {
    char magic[8];
    uint32_t format, n_blobs;
    uint64_t key_len, payload, checksum;
} kc_header;

void kc_blobs_free(kc_blob *b, int n) {
    for (int i = 0; b && i < n; i++)
        free(b[i].data);
    free(b);
}

/* s kept as long as ctx (a diagnostic's location outlives our paths). */
static const char *ctx_str(attnc_ctx *ctx, const char *s) {
    const char *k = arena_strndup(&ctx->arena, s, strlen(s));
    return k ? k : "kernel cache";
}

static char *dup_join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s%s", a, b);
    return s;
}

char *kc_dir(const attnc_options *opt) {
    if (opt && opt->no_cache)
        return NULL;
    if (opt && opt->cache_dir)
        return opt->cache_dir[0] ? strdup(opt->cache_dir) : NULL;
    const char *env = getenv("ATTNC_CACHE_DIR");
    if (env && env[0])
        return strdup(env);
    env = getenv("XDG_CACHE_HOME"); /* the XDG spec: relative values are ignored */
    if (env && env[0] == '/')
        return dup_join(env, "/attnc");
    env = getenv("HOME");
    if (env && env[0])
        return dup_join(env, "/.cache/attnc");
    return NULL;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

char *kc_key(const attn_config *cfg, const attnc_options *opt, LLVMTargetMachineRef tm,
             const char *what) {
    char *yaml = attnc_spec_to_yaml(cfg);
    char *triple = LLVMGetTargetMachineTriple(tm);
    char *cpu = LLVMGetTargetMachineCPU(tm);
    char *features = LLVMGetTargetMachineFeatureString(tm);
    int nd = opt ? opt->n_disabled_passes : 0;
    const char **dis = nd ? malloc((size_t)nd * sizeof *dis) : NULL;
    char *key = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&key, &len);
    if (yaml && f && (dis || !nd)) {
        unsigned maj, min, patch;
        LLVMGetVersion(&maj, &min, &patch);
        if (nd) {
            memcpy(dis, opt->disabled_passes, (size_t)nd * sizeof *dis);
            qsort(dis, (size_t)nd, sizeof *dis, cmp_str);
        }
        fprintf(f, "attnc kernel cache %d\nattnc %s build %s\nllvm %u.%u.%u\nabi %d\n", KC_FORMAT,
                ATTNC_VERSION, ATTNC_BUILD_ID, maj, min, patch, ATTN_KERNELS_ABI);
        fprintf(f, "emit %s\ntriple %s\ncpu %s\nfeatures %s\namx emulated %d\ndisabled", what,
                triple, cpu, features, emit_amx_emulated());
        for (int i = 0; i < nd; i++)
            if (i == 0 || strcmp(dis[i], dis[i - 1]) != 0)
                fprintf(f, " %s", dis[i]);
        fprintf(f, "\nshard %lld/%lld\nspec\n%s", (long long)cfg->shard_index,
                (long long)cfg->shard_count, yaml);
    }
    bool ok = f && fclose(f) == 0 && yaml && (dis || !nd);
    if (!ok) {
        free(key);
        key = NULL;
    }
    free(dis);
    free(yaml);
    LLVMDisposeMessage(triple);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
    return key;
}

/* dir/<hash of key>.attnk, malloc'd. */
static char *entry_path(const char *dir, const char *key) {
    XXH128_hash_t h = XXH3_128bits(key, strlen(key));
    size_t n = strlen(dir) + 2 + 32 + sizeof kc_ext;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%016llx%016llx%s", dir, (unsigned long long)h.high64,
                 (unsigned long long)h.low64, kc_ext);
    return p;
}

/* The whole file at path (malloc'd, *n bytes); NULL with errno set. */
static unsigned char *read_all(const char *path, size_t *n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode))
        errno = EISDIR;
    else if (fstat(fd, &st) == 0 && (buf = malloc((size_t)st.st_size + 1))) {
        size_t got = 0;
        ssize_t r = 1;
        while (got < (size_t)st.st_size && (r = read(fd, buf + got, (size_t)st.st_size - got)) > 0)
            got += (size_t)r;
        if (r < 0) {
            free(buf);
            buf = NULL;
        }
        *n = got;
    }
    int e = errno;
    close(fd);
    errno = e;
    return buf;
}

/* Splits an entry into its blobs: NULL when it is whole, else what is
 * wrong; *stale when it is whole but not this key's (a collision) or of
 * another format. */
static const char *parse_entry(const unsigned char *buf, size_t size, const char *key,
                               kc_blob **out, int *n_out, bool *stale) {
    kc_header h;
    *stale = false;
    if (size == 0)
        return "empty";
    if (size < sizeof h)
        return "truncated";
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, kc_magic, sizeof h.magic) != 0)
        return "not a kernel cache entry";
    if (h.format != KC_FORMAT) {
        *stale = true;
        return "another format";
    }
    if (h.payload != size - sizeof h)
        return "truncated";
    const unsigned char *p = buf + sizeof h;
    if (XXH3_64bits(p, h.payload) != h.checksum)
        return "checksum mismatch";
    size_t klen = strlen(key);
    if (h.n_blobs > KC_MAX_BLOBS || h.key_len > h.payload ||
        (h.payload - h.key_len) / 8 < h.n_blobs)
        return "bad header";
    if (h.key_len != klen || memcmp(p, key, klen) != 0) {
        *stale = true;
        return "another key";
    }
    const unsigned char *sizes = p + h.key_len, *data = sizes + 8 * (size_t)h.n_blobs;
    uint64_t left = h.payload - h.key_len - 8 * (uint64_t)h.n_blobs;
    kc_blob *b = calloc(h.n_blobs ? h.n_blobs : 1, sizeof *b);
    if (!b)
        return "out of memory";
    for (uint32_t i = 0; i < h.n_blobs; i++) {
        uint64_t sz;
        memcpy(&sz, sizes + 8 * (size_t)i, 8);
        if (sz > left || !(b[i].data = malloc(sz ? sz : 1))) {
            kc_blobs_free(b, (int)i);
            return sz > left ? "bad sizes" : "out of memory";
        }
        memcpy(b[i].data, data, sz);
        b[i].size = sz;
        data += sz;
        left -= sz;
    }
    if (left != 0) {
        kc_blobs_free(b, (int)h.n_blobs);
        return "bad sizes";
    }
    *out = b;
    *n_out = (int)h.n_blobs;
    return NULL;
}

bool kc_get(attnc_ctx *ctx, const char *dir, const char *key, kc_blob **out, int *n) {
    char *path = entry_path(dir, key);
    size_t size = 0;
    unsigned char *buf = path ? read_all(path, &size) : NULL;
    bool hit = false, stale = false;
    if (buf) {
        const char *bad = parse_entry(buf, size, key, out, n, &stale);
        hit = !bad;
        if (bad && !stale && strcmp(bad, "out of memory") != 0) {
            unlink(path);
            diag_warning(ctx, (attnc_loc){ctx_str(ctx, path), 0, 0},
                         "damaged kernel cache entry (%s, %zu bytes): removed; compiling anew", bad,
                         size);
        }
    }
    free(buf);
    free(path);
    return hit;
}

/* mkdir -p; 0 or -1 with errno. */
static int make_dirs(const char *dir) {
    char *p = strdup(dir);
    if (!p)
        return -1;
    int rc = 0;
    for (char *s = p + 1; rc == 0; s++) {
        bool end = *s == 0;
        if (*s == '/' || end) {
            *s = 0;
            if (mkdir(p, 0777) != 0 && errno != EEXIST)
                rc = -1;
            *s = end ? 0 : '/';
            if (end)
                break;
        }
    }
    struct stat st;
    if (rc == 0 && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
        errno = ENOTDIR;
        rc = -1;
    }
    int e = errno;
    free(p);
    errno = e;
    return rc;
}

static bool write_all(int fd, const void *p, size_t n) {
    const unsigned char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

/* Directories already warned about (one warning per process). */
static pthread_mutex_t warned_lock = PTHREAD_MUTEX_INITIALIZER;
static char *warned_dir;

static void warn_unwritable(attnc_ctx *ctx, const char *dir, int err) {
    pthread_mutex_lock(&warned_lock);
    bool first = !warned_dir || strcmp(warned_dir, dir) != 0;
    if (first) {
        free(warned_dir);
        warned_dir = strdup(dir);
    }
    pthread_mutex_unlock(&warned_lock);
    if (first)
        diag_warning(ctx, (attnc_loc){ctx_str(ctx, dir), 0, 0},
                     "kernel cache directory is not writable (%s); compiling without a cache",
                     strerror(err));
}

void kc_put(attnc_ctx *ctx, const char *dir, const char *key, const kc_blob *b, int n) {
    char *path = entry_path(dir, key);
    char *tmp = path ? dup_join(path, ".tmp.XXXXXX") : NULL;
    if (!tmp) {
        free(path);
        return;
    }
    int fd = make_dirs(dir) == 0 ? mkstemp(tmp) : -1;
    if (fd < 0) {
        warn_unwritable(ctx, dir, errno);
        free(tmp);
        free(path);
        return;
    }
    size_t klen = strlen(key), payload = klen + 8 * (size_t)n;
    for (int i = 0; i < n; i++)
        payload += b[i].size;
    unsigned char *buf = malloc(payload ? payload : 1);
    bool ok = buf != NULL;
    if (ok) {
        unsigned char *p = buf;
        memcpy(p, key, klen);
        p += klen;
        for (int i = 0; i < n; i++, p += 8) {
            uint64_t sz = b[i].size;
            memcpy(p, &sz, 8);
        }
        for (int i = 0; i < n; i++) {
            memcpy(p, b[i].data, b[i].size);
            p += b[i].size;
        }
        kc_header h = {.format = KC_FORMAT,
                       .n_blobs = (uint32_t)n,
                       .key_len = klen,
                       .payload = payload,
                       .checksum = XXH3_64bits(buf, payload)};
        memcpy(h.magic, kc_magic, sizeof h.magic);
        /* the entry reaches the disk before its name does */
        ok = write_all(fd, &h, sizeof h) && write_all(fd, buf, payload) && fsync(fd) == 0;
    }
    int err = errno;
    if (close(fd) != 0)
        ok = false;
    if (ok && rename(tmp, path) != 0) {
        err = errno;
        ok = false;
    }
    if (!ok) {
        unlink(tmp);
        diag_warning(ctx, (attnc_loc){ctx_str(ctx, path), 0, 0},
                     "cannot store the kernel cache entry: %s",
                     buf ? strerror(err) : "out of memory");
    }
    free(buf);
    free(tmp);
    free(path);
}

/* ---- public -------------------------------------------------------------- */

attnc_status attnc_cache_dir(const attnc_options *opt, char *buf, size_t n) {
    char *dir = kc_dir(opt);
    if (!buf || n == 0) {
        free(dir);
        return ATTNC_E_INVALID;
    }
    int len = snprintf(buf, n, "%s", dir ? dir : "");
    free(dir);
    return (size_t)len < n ? ATTNC_OK : ATTNC_E_INVALID; /* buf too small */
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Visits the entries (and, with tmp, temporary files) of dir. */
static attnc_status walk(attnc_ctx *ctx, const char *dir, bool remove, attnc_cache_stats *st) {
    memset(st, 0, sizeof *st);
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return ATTNC_OK; /* nothing cached yet */
        int err = errno;     /* before ctx_str's allocation */
        diag_error(ctx, ATTNC_E_IO, (attnc_loc){ctx_str(ctx, dir), 0, 0},
                   "cannot open the kernel cache: %s", strerror(err));
        return ATTNC_E_IO;
    }
    attnc_status rc = ATTNC_OK;
    for (struct dirent *e; (e = readdir(d));) {
        bool entry = has_suffix(e->d_name, kc_ext), tmp = strstr(e->d_name, ".attnk.tmp.") != NULL;
        if (!entry && !tmp)
            continue;
        char *path = malloc(strlen(dir) + strlen(e->d_name) + 2);
        if (!path) {
            diag_error(ctx, rc = ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
            break;
        }
        sprintf(path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (remove && unlink(path) != 0 && rc == ATTNC_OK) {
                int err = errno;
                diag_error(ctx, rc = ATTNC_E_IO, (attnc_loc){ctx_str(ctx, path), 0, 0},
                           "cannot remove: %s", strerror(err));
            } else if (entry) {
                st->entries++;
                st->bytes += (uint64_t)sb.st_size;
            }
        }
        free(path);
    }
    closedir(d);
    return rc;
}

/* The public calls around walk: ctx may be NULL; a NULL dir or st is
 * ATTNC_E_INVALID, with a diagnostic naming fn. */
static attnc_status walk_dir(attnc_ctx *ctx, const char *dir, bool remove, attnc_cache_stats *st,
                             const char *fn) {
    attnc_ctx *work = attnc_ctx_new();
    if (!work)
        return ATTNC_E_NOMEM;
    attnc_status rc = ATTNC_E_INVALID;
    if (dir && st)
        rc = walk(work, dir, remove, st);
    else
        diag_error(work, rc, (attnc_loc){0}, "%s: NULL directory or stats", fn);
    return diag_call_end(ctx, work, rc);
}

attnc_status attnc_cache_stats_get(attnc_ctx *ctx, const char *dir, attnc_cache_stats *out) {
    return walk_dir(ctx, dir, false, out, "attnc_cache_stats_get");
}

attnc_status attnc_cache_clear(attnc_ctx *ctx, const char *dir, attnc_cache_stats *removed) {
    attnc_cache_stats st = {0};
    attnc_status rc = walk_dir(ctx, dir, true, &st, "attnc_cache_clear");
    if (removed)
        *removed = st;
    return rc;
}
