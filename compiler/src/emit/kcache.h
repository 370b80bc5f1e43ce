/* kcache.h: the persistent kernel cache. An entry is the compiled
 * objects of one key (everything that changes the code: the normalized
 * spec, passes disabled, target, CPU and features, attnc's build and
 * LLVM's version, what is emitted), in one file named by the key's hash,
 * written to a temporary file and renamed, checked by a checksum when
 * read. Readers and writers never lock: a rename is atomic, so two
 * processes compiling the same key both succeed and either's entry
 * remains. */
#ifndef ATTNC_KCACHE_H
#define ATTNC_KCACHE_H

#include <llvm-c/TargetMachine.h>

#include "base/base.h"

/* Bytes of one object (or emitted file). */
typedef struct kc_blob {
    unsigned char *data; /* owned (malloc) */
    size_t size;
} kc_blob;

ATTNC_HIDDEN void kc_blobs_free(kc_blob *b, int n);

/* The cache directory opt selects (malloc'd), or NULL when opt disables
 * the cache or no directory can be named (no $HOME). */
ATTNC_HIDDEN char *kc_dir(const attnc_options *opt);

/* The key of cfg compiled with opt for tm; what is "jit", "obj", "asm" or
 * "llvm". malloc'd; NULL when out of memory. */
ATTNC_HIDDEN char *kc_key(const attn_config *cfg, const attnc_options *opt, LLVMTargetMachineRef tm,
                          const char *what);

/* The blobs stored under key in dir: true and *out (n of them, malloc'd)
 * on a hit. A damaged entry (truncated, empty, bad checksum) is removed
 * with a warning on ctx; a missing one is a quiet miss. */
ATTNC_HIDDEN bool kc_get(attnc_ctx *ctx, const char *dir, const char *key, kc_blob **out, int *n);

/* Stores the blobs under key in dir (created if missing). Failure leaves
 * no file behind and warns on ctx, once per process for an unwritable
 * directory. */
ATTNC_HIDDEN void kc_put(attnc_ctx *ctx, const char *dir, const char *key, const kc_blob *b, int n);

#endif
