/* fuzz_spec.c: libFuzzer target for the spec stage. Any input must either
 * fail with at least one located diagnostic, or give a config that the
 * runtime accepts, whose normalized YAML loads back to the same text, and
 * that lowers and passes through the whole pipeline with a valid graph. */
#include <stdlib.h>
#include <string.h>

#include "pass/pass.h"

#define CHECK(cond) ((cond) ? (void)0 : abort())

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    attnc_ctx *ctx = attnc_ctx_new();
    CHECK(ctx);
    ynode *root = NULL;
    attn_config c;
    spec_locs locs;
    attnc_status st = spec_yaml_read(ctx, "fuzz.yaml", (const char *)data, size, &root);
    if (st == ATTNC_OK)
        st = spec_check(ctx, "fuzz.yaml", root, &c, &locs);
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
    CHECK(attn_config_check(&c, NULL) == ATTN_OK);
    char *yaml = attnc_spec_to_yaml(&c);
    CHECK(yaml);
    attn_config back;
    attnc_ctx *again = attnc_ctx_new();
    CHECK(attnc_spec_load_string(again, "again.yaml", yaml, strlen(yaml), &back) == ATTNC_OK);
    char *yaml2 = attnc_spec_to_yaml(&back);
    CHECK(yaml2 && strcmp(yaml, yaml2) == 0);
    free(yaml);
    free(yaml2);
    attnc_ctx_free(again);
    ir_graph *g = NULL;
    if (c.mla_kv_lora_rank > 0 && attn_dtype_block(c.dtype) > 1) { /* no such kernels yet */
        CHECK(ir_build(ctx, &c, &locs, &g) == ATTNC_E_SPEC && !g);
        attnc_ctx_free(ctx);
        return 0;
    }
    CHECK(ir_build(ctx, &c, &locs, &g) == ATTNC_OK);
    CHECK(pass_run_pipeline(g, NULL) == ATTNC_OK);
    CHECK(ir_print(g) != NULL);
    attnc_ctx_free(ctx);
    return 0;
}
