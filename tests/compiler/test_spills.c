/* test_spills.c: the hot loops keep their values in registers on both
 * x86 vector ISAs. Shipped specs are compiled to assembly for znver3
 * (AVX2, 16 vector registers) and znver4 (AVX-512, 32); in every
 * innermost loop with at least 8 FMAs (GEMM and GEMV tiles, flash scores
 * and p.v, split decode's scores and edge p.v), LLVM must have written no
 * vector spill or reload (its asm comments say "Spill" / "Reload" at
 * each). Loops are found by LLVM's own loop comments ("This Inner Loop
 * Header", "in Loop: Header="), so a loop's blocks count wherever they
 * are laid out, and the test fails if the assembly has no such comments
 * (a finder that sees nothing passes everything: before the comments
 * were asked for, this test was one). The finder is checked on
 * hand-written assembly first, so the test can fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

enum { MAX_LINES = 400000, MAX_INNER = 4000 };

/* The flash kernel's guarded p.v of AVX-512 items of 4 row vectors
 * (cg_flash.c pv_tile: a prefix call's last tile), which keeps one vector
 * on the stack (1 spill, 1 reload per 128 or 256 FMAs), allowed in every
 * spec: the loops whose header block has this IR name. */
#define EDGE_ROWS4 "pv_edge_rows4"

typedef struct hot {
    int loops;       /* innermost loops with >= 8 FMAs */
    int spilly;      /* of them, those with a vector spill or reload */
    int commented;   /* lines of LLVM's loop comments seen */
    char first[256]; /* "function: n vector spills/reloads in a loop of m FMAs" */
} hot;

/* "name:" at the start of the line (a comment may follow). */
static bool starts_label(const char *l) {
    bool first =
        l[0] == '_' || l[0] == '.' || (l[0] >= 'a' && l[0] <= 'z') || (l[0] >= 'A' && l[0] <= 'Z');
    size_t name = strcspn(l, ":");
    return first && l[name] == ':' && name < strcspn(l, " \t");
}

/* A basic block's first line: ".LBB3_7:" (name "BB3_7") or "# %bb.2:"
 * (no name: no branch targets it, so it is never a loop header). */
static bool block_label(const char *l, char *name, size_t size) {
    if (strncmp(l, "# %bb.", 6) == 0) {
        name[0] = 0;
        return true;
    }
    if (strncmp(l, ".LBB", 4) != 0 || !starts_label(l))
        return false;
    snprintf(name, size, "%.*s", (int)strcspn(l + 2, ":"), l + 2);
    return true;
}

static int find_name(char (*names)[32], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (name[0] && strcmp(names[i], name) == 0)
            return i;
    return -1;
}

/* The innermost loops of each function of asm text s (verbose asm);
 * spills in functions whose name contains `allowed` (if not NULL) are
 * not counted. */
static hot hot_loops(char *s, const char *allowed) {
    hot h = {0, 0, 0, ""};
    static char *line[MAX_LINES];
    static char names[MAX_INNER][32];
    static int fma[MAX_INNER], spill[MAX_INNER];
    static bool edge[MAX_INNER];
    int n = 0;
    for (char *p = strtok(s, "\n"); p && n < MAX_LINES; p = strtok(NULL, "\n"))
        line[n++] = p;
    for (int f0 = 0; f0 < n;) {
        /* a function: from its label to the next function's */
        char fname[128] = "", block[32] = "";
        const char *ir = ""; /* the block's IR name (LLVM's "# %name" after its label) */
        if (!(starts_label(line[f0]) && line[f0][0] != '.')) {
            f0++;
            continue;
        }
        snprintf(fname, sizeof fname, "%.*s", (int)strcspn(line[f0], ":"), line[f0]);
        int f1 = f0 + 1;
        while (f1 < n && !(starts_label(line[f1]) && line[f1][0] != '.'))
            f1++;
        /* its innermost loops, by their headers' names */
        int ni = 0;
        for (int i = f0; i < f1 && ni < MAX_INNER; i++) {
            if (block_label(line[i], block, sizeof block)) {
                ir = strstr(line[i], "# %") ? strstr(line[i], "# %") + 3 : "";
                continue;
            }
            if (strstr(line[i], "=>") && strstr(line[i], "This Inner Loop Header") && block[0]) {
                snprintf(names[ni], sizeof names[ni], "%s", block);
                fma[ni] = spill[ni] = 0;
                edge[ni] = strncmp(ir, EDGE_ROWS4, strlen(EDGE_ROWS4)) == 0;
                ni++;
            }
        }
        /* each instruction counts for the innermost loop its block is in */
        int cur = -1;
        for (int i = f0; i < f1; i++) {
            const char *l = line[i], *hdr;
            if (block_label(l, block, sizeof block)) {
                cur = -1;
                continue;
            }
            if (strstr(l, "Loop Header") || strstr(l, "in Loop: Header=")) {
                h.commented++;
                if (strstr(l, "=>"))
                    cur = strstr(l, "This Inner Loop Header") ? find_name(names, ni, block) : -1;
                else if ((hdr = strstr(l, "in Loop: Header="))) {
                    char want[32];
                    snprintf(want, sizeof want, "%.*s", (int)strcspn(hdr + 16, " \t"), hdr + 16);
                    cur = find_name(names, ni, want);
                }
                continue;
            }
            if (cur < 0 || l[0] != '\t')
                continue;
            fma[cur] += strstr(l, "vfmadd") || strstr(l, "vfnmadd");
            spill[cur] += (strstr(l, "Spill") || strstr(l, "Reload")) && strstr(l, "mm");
        }
        for (int a = 0; a < ni; a++) {
            if (fma[a] < 8)
                continue;
            h.loops++;
            if ((allowed && strstr(fname, allowed)) || edge[a])
                continue;
            if (spill[a] && h.spilly++ == 0)
                snprintf(h.first, sizeof h.first,
                         "%.100s: %d vector spills/reloads in a loop of %d FMAs (header %.31s)",
                         fname, spill[a], fma[a], names[a]);
        }
        f0 = f1;
    }
    return h;
}

static void finder_sees_spills(void **state) {
    (void)state;
    /* micro4: a spill and a folded reload in its loop, whose latch block
     * is laid out before the header; flash: a clean inner loop, and an
     * outer loop's own blocks (not innermost) spilling, which do not
     * count; gemv: one FMA, not hot */
    char text[] = "attnk_t_1_linear_micro4:                # @attnk_t_1_linear_micro4\n"
                  "\tvxorps %ymm0, %ymm0, %ymm0\n"
                  "\tjmp .LBB0_1\n"
                  ".LBB0_3:                                # %latch\n"
                  "                                        #   in Loop: Header=BB0_1 Depth=1\n"
                  "\tvfmadd231ps 32(%rsp), %ymm6, %ymm7   # 32-byte Folded Reload\n"
                  ".LBB0_1:                                # %body\n"
                  "                                        # =>This Inner Loop Header: Depth=1\n"
                  "\tvfmadd231ps (%rdi), %ymm1, %ymm0\n"
                  "\tvfmadd231ps (%rdi), %ymm2, %ymm3\n"
                  "\tvfmadd231ps (%rdi), %ymm4, %ymm5\n"
                  "\tvfmadd231ps (%rdi), %ymm6, %ymm7\n"
                  "\tvmovups %ymm8, 32(%rsp)             # 32-byte Spill\n"
                  "# %bb.2:                                # %more\n"
                  "                                        #   in Loop: Header=BB0_1 Depth=1\n"
                  "\tmovq 8(%rsp), %rax                  # 8-byte Reload\n"
                  "\tvfmadd231ps (%rdi), %ymm1, %ymm0\n"
                  "\tvfmadd231ps (%rdi), %ymm2, %ymm3\n"
                  "\tvfmadd231ps (%rdi), %ymm4, %ymm5\n"
                  "\tjne .LBB0_3\n"
                  "\tretq\n"
                  "attnk_t_2_flash:\n"
                  ".LBB1_1:                                # %tile\n"
                  "                                        # =>This Loop Header: Depth=1\n"
                  "\tvmovups %zmm8, 64(%rsp)             # 64-byte Spill\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  ".LBB1_2:                                # %qk\n"
                  "                                        #   Parent Loop BB1_1 Depth=1\n"
                  "                                        # =>  This Inner Loop Header: Depth=2\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tjl .LBB1_2\n"
                  "# %bb.3:                                # %exit\n"
                  "                                        #   in Loop: Header=BB1_1 Depth=1\n"
                  "\tvmovups 64(%rsp), %zmm8             # 64-byte Reload\n"
                  "\tjl .LBB1_1\n"
                  "attnk_t_3_linear_gemv1:\n"
                  ".LBB2_1:                                # %k\n"
                  "                                        # =>This Inner Loop Header: Depth=1\n"
                  "\tvfmadd231ps 32(%rsp), %ymm1, %ymm0   # 32-byte Folded Reload\n"
                  "\tjne .LBB2_1\n";
    char copy[sizeof text];
    memcpy(copy, text, sizeof text);
    hot h = hot_loops(text, NULL);
    assert_int_equal(h.loops, 2); /* micro4's and flash's qk */
    assert_int_equal(h.spilly, 1);
    assert_true(h.commented >= 6);
    assert_non_null(strstr(h.first, "attnk_t_1_linear_micro4: 2 vector spills/reloads"));
    h = hot_loops(copy, "_micro4"); /* allowed */
    assert_int_equal(h.loops, 2);
    assert_int_equal(h.spilly, 0);
}

static void hot_loops_do_not_spill(void **state) {
    (void)state;
    /* and with ggml's block formats: "spec|a line added to it"; then the
     * functions allowed to spill on znver3 and on znver4, each measured:
     * - AVX2's GEMV of 7 rows keeps 2 of its 14 sums on the stack and is
     *   still faster than the GEMM (cg_target_for's gemv_rows);
     * - AVX2's GEMVs of ggml blocks keep each column's d and -8 d (q4_0)
     *   across a block and reload some from the stack: d (q - 8), with
     *   d alone kept, spilled less but was slower on AVX-512 (llama3_8b
     *   q4_0 decode block: 1.64 against 1.34-1.55 ms) and no faster on
     *   AVX2 (its x86-64-v3 code: 2.08 ms either way);
     * - seed's split decode with a q8_0 cache on AVX-512 is one loop
     *   (head_dim 64: its scores unrolled), whose edge-tile p.v (a cold
     *   path) reloads its weights;
     * - deepseek_v3's flash over its latent: the guarded p.v of the
     *   diagonal tiles on AVX-512 (8 x 3 sums, 3 p's and masks, the V
     *   broadcast, a zero) keeps one vector on the stack, 1 spill and 1
     *   reload per 256 FMAs; its other loops do not spill. */
    const struct {
        const char *spec, *allowed[2];
    } specs[] = {{"llama3_8b", {"_gemv7", NULL}},
                 {"gemma2_9b", {"_gemv7", NULL}},
                 {"qwen3_8b", {"_gemv7", NULL}},
                 {"gpt_oss_20b_sliding", {"_gemv7", NULL}},
                 {"phi3_mini", {"_gemv7", NULL}},
                 {"llama4_scout_local", {"_gemv7", NULL}},
                 {"llama3_8b|dtype: q8_0", {"_gemv", NULL}},
                 {"llama3_8b|dtype: q4_0", {"_gemv", NULL}},
                 {"seed|kv_cache: {dtype: q8_0}", {"_gemv7", "_flash_split"}},
                 {"seed|kv_cache: {dtype: f16}", {"_gemv7", NULL}},
                 {"seed|kv_cache: {dtype: bf16}", {"_gemv7", NULL}},
                 {"deepseek_v3", {"_gemv7", "_flash"}}};
    const char *cpus[] = {"znver3", "znver4"};
    char *dir = tmpdir_new();
    /* sanitizers: every other spec (the code is the plain build's) */
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i += (size_t)sanitized_step(2))
        for (int c = 0; c < 2; c++) {
            char spec[512];
            snprintf(spec, sizeof spec, "%s/specs/%.*s.yaml", ATTNC_SOURCE_DIR,
                     (int)strcspn(specs[i].spec, "|"), specs[i].spec);
            if (strchr(specs[i].spec, '|')) {
                char *text = read_file(spec, NULL);
                assert_non_null(text);
                size_t n = strlen(text) + strlen(specs[i].spec) + 2;
                char *with = malloc(n);
                snprintf(with, n, "%s%s\n", text, strchr(specs[i].spec, '|') + 1);
                snprintf(spec, sizeof spec, "%s", path_in(dir, "quant.yaml"));
                write_file(spec, with, strlen(with));
                free(with);
                free(text);
            }
            attnc_options o = attnc_options_default();
            o.cpu = cpus[c];
            const char *out = path_in(dir, "k.s");
            attnc_ctx *ctx = attnc_ctx_new();
            if (attnc_compile_file(ctx, spec, &o, ATTNC_EMIT_ASM, out, NULL) != ATTNC_OK) {
                print_diags(ctx);
                fail_msg("%s --cpu %s: does not compile", specs[i].spec, cpus[c]);
            }
            attnc_ctx_free(ctx);
            char *text = read_file(out, NULL);
            assert_non_null(text);
            hot h = hot_loops(text, specs[i].allowed[c]);
            free(text);
            if (h.commented == 0)
                fail_msg("%s --cpu %s: the assembly has no loop comments", specs[i].spec, cpus[c]);
            /* GEMM and GEMV tiles of both linears, flash, split decode */
            if (h.loops < 15)
                fail_msg("%s --cpu %s: only %d hot loops found", specs[i].spec, cpus[c], h.loops);
            if (h.spilly)
                fail_msg("%s --cpu %s: %d of %d hot loops spill; first %s", specs[i].spec, cpus[c],
                         h.spilly, h.loops, h.first);
        }
    tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(finder_sees_spills),
        cmocka_unit_test(hot_loops_do_not_spill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
