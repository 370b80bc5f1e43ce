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
    bool plain;  /* scalar written without quotes */
    ynode *first; /* children; a map's alternate key, value, key, value */
    ynode *last;
    ynode *next;
    size_t n; /* children count */
};

/* Parses text (named file in locations) into *root; *root is NULL for a
 * document with no content. YAML errors become diagnostics. */
ATTNC_HIDDEN attnc_status spec_yaml_read(attnc_ctx *ctx, const char *file, const char *text,
                                         size_t len, ynode **root);

/* Validates the tree (root may be NULL) into *out; all problems become
 * diagnostics (ATTNC_E_SPEC). */
ATTNC_HIDDEN attnc_status spec_check(attnc_ctx *ctx, const char *file, const ynode *root,
                                     attn_config *out);

#endif
