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

/* The spec's top-level keys: those with rules of their own, then the
 * plain keys of attn_config.def in its order (SPEC_K_HEADS, ...). */
typedef enum spec_key {
    SPEC_K_NAME,
    SPEC_K_KV_GROUPS,
    SPEC_K_KV_HEADS,
    SPEC_K_HEAD_DIM,
    SPEC_K_ROPE,
    SPEC_K_SCALE,
    SPEC_K_DTYPE,
    SPEC_K_KV_CACHE,
    SPEC_K_QK_NORM,
    SPEC_K_QUERY_TEMP,
    SPEC_K_WEIGHTS,
    SPEC_K_K_BIAS,
    SPEC_K_CROSS,
    SPEC_K_MLA,
    SPEC_K_COMPUTE,
    SPEC_K_ACTIVATIONS,
    SPEC_K_INPUTS,
    SPEC_K_SCORE_MOD,
    SPEC_K_MASK_MOD,
    SPEC_K_FIRST_PLAIN,
    SPEC_K_BEFORE_PLAIN = SPEC_K_FIRST_PLAIN - 1,
#define ATTN_FIELD(kind, field, key)
#define ATTN_PLAIN(kind, field, key, token, def, lo, hi) SPEC_K_##token,
#include "attn_config.def"
#undef ATTN_FIELD
#undef ATTN_PLAIN
    SPEC_K_COUNT
} spec_key;

/* The key's name ("sliding_window"). */
ATTNC_HIDDEN const char *spec_key_name(spec_key k);
/* The attn_config.def row of a plain key; NULL for the others. */
ATTNC_HIDDEN const attn_config_field *spec_plain_field(spec_key k);

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
