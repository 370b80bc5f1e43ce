/* fuzz_ir.c: libFuzzer target for the IR reader (attnc opt). Any text must
 * either fail with at least one located diagnostic, or give a verified
 * graph whose printed text (config lines and nodes) reads back, without
 * a spec, to the same text. The text is read with the spec below
 * (seed's, with a window, so the mask prints one) when its length is
 * even, alone (its own config lines) when odd. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "spec/spec.h"

#define CHECK(cond) ((cond) ? (void)0 : abort())

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static const char spec[] = "name: seed\nheads: 12\nkv_groups: 4\nhead_dim: 64\ncausal: true\n"
                           "sliding_window: 512\nrope:\n  base: 10000\n";

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    attnc_ctx *ctx = attnc_ctx_new();
    CHECK(ctx);
    ynode *root = NULL;
    attn_config c;
    spec_locs locs;
    CHECK(spec_yaml_read(ctx, "seed.yaml", spec, strlen(spec), &root) == ATTNC_OK);
    CHECK(spec_check(ctx, "seed.yaml", root, &c, &locs) == ATTNC_OK);
    char *text = malloc(size + 1);
    CHECK(text);
    memcpy(text, data, size);
    text[size] = 0; /* the reader takes text: up to the first NUL */
    ir_graph *g = NULL;
    bool alone = size & 1;
    attnc_status st = ir_parse(ctx, alone ? NULL : &c, alone ? NULL : &locs, "fuzz.ir", text, &g);
    free(text);
    if (st != ATTNC_OK) {
        CHECK(attnc_diag_count(ctx) > 0);
        for (size_t i = 0; i < attnc_diag_count(ctx); i++) {
            char buf[256];
            const attnc_diag *d = attnc_diag_get(ctx, i);
            CHECK(d->msg && d->msg[0]);
            attnc_diag_format(d, buf, sizeof buf);
        }
        attnc_ctx_free(ctx);
        return 0;
    }
    const char *printed = ir_print(g);
    CHECK(printed);
    ir_graph *back = NULL;
    CHECK(ir_parse(ctx, NULL, NULL, "printed.ir", printed, &back) == ATTNC_OK);
    const char *again = ir_print(back);
    CHECK(again && strcmp(printed, again) == 0);
    attnc_ctx_free(ctx);
    return 0;
}
