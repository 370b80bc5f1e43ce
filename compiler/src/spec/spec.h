/* spec.h: the spec stage. spec_yaml.c turns libyaml events into a small
 * tree of located nodes; spec_check.c turns that tree into a validated
 * attn_config; spec_print.c prints a config back as normalized YAML. */
#ifndef ATTNC_SPEC_H
#define ATTNC_SPEC_H

#include "base/base.h"

#define SPEC_MAX_DEPTH 32 /* nesting; a spec needs 3 */
#define SPEC_MAX_BYTES (1u << 20)

typedef enum ynode_kind { YNODE_SCALAR, YNODE_MAP, YNODE_SEQ, YNODE_COUNT } ynode_kind;

typedef struct ynode ynode;
struct ynode {
    ynode_kind kind;
    attnc_loc loc;
    const char *str; /* scalar text, NUL-terminated; borrowed: ctx arena */
    size_t len;
    bool plain;   /* scalar written without quotes */
    ynode *first; /* children; a map's alternate key, value, key, value */
    ynode *last;
    ynode *next;
    size_t n; /* children count */
};

/* Parses text (named file in locations) into *root; *root is NULL for a
 * document with no content. YAML errors become diagnostics. */
ATTNC_HIDDEN attnc_status spec_yaml_read(attnc_ctx *ctx, const char *file, const char *text,
                                         size_t len, ynode **root);

/* The spec's top-level keys, in the order of the schema. */
typedef enum spec_key {
    SPEC_K_NAME,
    SPEC_K_HEADS,
    SPEC_K_KV_GROUPS,
    SPEC_K_KV_HEADS,
    SPEC_K_HEAD_DIM,
    SPEC_K_D_MODEL,
    SPEC_K_CAUSAL,
    SPEC_K_ROPE,
    SPEC_K_SLIDING_WINDOW,
    SPEC_K_SOFTCAP,
    SPEC_K_QKV_BIAS,
    SPEC_K_O_BIAS,
    SPEC_K_SCALE,
    SPEC_K_DTYPE,
    SPEC_K_KV_CACHE,
    SPEC_K_QK_NORM,
    SPEC_K_SINKS,
    SPEC_K_ALIBI,
    SPEC_K_CHUNKED,
    SPEC_K_QUERY_TEMP,
    SPEC_K_WEIGHTS,
    SPEC_K_K_BIAS,
    SPEC_K_CROSS,
    SPEC_K_MLA,
    SPEC_K_COUNT
} spec_key;

/* Where each key was written; keys left to their default point at the
 * top-level mapping. Later stages tag IR nodes with these. */
typedef struct spec_locs {
    attnc_loc key[SPEC_K_COUNT];
} spec_locs;

/* Validates the tree (root may be NULL) into *out and *locs (NULL = not
 * wanted); all problems become diagnostics (ATTNC_E_SPEC). */
ATTNC_HIDDEN attnc_status spec_check(attnc_ctx *ctx, const char *file, const ynode *root,
                                     attn_config *out, spec_locs *locs);

/* attnc_spec_load_file with locations. */
ATTNC_HIDDEN attnc_status spec_load_file(attnc_ctx *ctx, const char *path, attn_config *out,
                                         spec_locs *locs);

#endif
