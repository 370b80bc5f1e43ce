/* test_spills.c: the hot loops keep their values in registers on both
 * x86 vector ISAs. Shipped specs are compiled to assembly for znver3
 * (AVX2, 16 vector registers) and znver4 (AVX-512, 32); in every
 * innermost loop with at least 8 FMAs (GEMM and GEMV tiles, flash scores
 * and p.v, split decode), LLVM must have written no spill or reload (its
 * asm comments say "Spill" / "Reload" at each). The finder is checked on
 * hand-written assembly first, so the test can fail. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

enum { MAX_LINES = 400000, MAX_LABELS = 40000, MAX_LOOPS = 40000 };

typedef struct hot {
    int loops;       /* innermost loops with >= 8 FMAs */
    int spilly;      /* of them, those with a spill or reload */
    char first[256]; /* "function: n spills/reloads in a loop of m FMAs" */
} hot;

/* "name:" at the start of the line (a comment may follow). */
static bool starts_label(const char *l) {
    bool first =
        l[0] == '_' || l[0] == '.' || (l[0] >= 'a' && l[0] <= 'z') || (l[0] >= 'A' && l[0] <= 'Z');
    size_t name = strcspn(l, ":");
    return first && l[name] == ':' && name < strcspn(l, " \t");
}

/* Innermost backward-jump loops of each function of asm text s. */
static hot hot_loops(char *s) {
    hot h = {0, 0, ""};
    static char *line[MAX_LINES];
    static int lab_at[MAX_LABELS], lo[MAX_LOOPS], hi[MAX_LOOPS];
    static char *lab_name[MAX_LABELS];
    int n = 0;
    for (char *p = strtok(s, "\n"); p && n < MAX_LINES; p = strtok(NULL, "\n"))
        line[n++] = p;
    for (int f0 = 0; f0 < n;) {
        /* a function: from its label to the next function's */
        char fname[128] = "";
        if (!(starts_label(line[f0]) && line[f0][0] != '.')) {
            f0++;
            continue;
        }
        snprintf(fname, sizeof fname, "%.*s", (int)strcspn(line[f0], ":"), line[f0]);
        int f1 = f0 + 1;
        while (f1 < n && !(starts_label(line[f1]) && line[f1][0] != '.'))
            f1++;
        int nl = 0, nloop = 0;
        for (int i = f0; i < f1 && nl < MAX_LABELS; i++)
            if (strncmp(line[i], ".LBB", 4) == 0 && starts_label(line[i])) {
                lab_at[nl] = i;
                lab_name[nl++] = line[i];
            }
        for (int i = f0; i < f1; i++) {
            const char *t = line[i];
            while (*t == ' ' || *t == '\t')
                t++;
            if (t[0] != 'j' || !strstr(t, ".LBB"))
                continue;
            const char *target = strstr(t, ".LBB");
            size_t len = strcspn(target, " \t#");
            for (int k = 0; k < nl && nloop < MAX_LOOPS; k++)
                if (strncmp(lab_name[k], target, len) == 0 && lab_name[k][len] == ':' &&
                    lab_at[k] < i) {
                    lo[nloop] = lab_at[k];
                    hi[nloop++] = i;
                }
        }
        for (int a = 0; a < nloop; a++) {
            bool inner = true;
            for (int b = 0; b < nloop && inner; b++)
                inner = b == a || !(lo[a] <= lo[b] && hi[b] <= hi[a]);
            if (!inner)
                continue;
            int fma = 0, spill = 0;
            for (int i = lo[a]; i <= hi[a]; i++) {
                fma += strstr(line[i], "vfmadd") || strstr(line[i], "vfnmadd");
                spill += strstr(line[i], "Spill") || strstr(line[i], "Reload");
            }
            if (fma < 8)
                continue;
            h.loops++;
            if (spill && h.spilly++ == 0)
                snprintf(h.first, sizeof h.first, "%s: %d spills/reloads in a loop of %d FMAs",
                         fname, spill, fma);
        }
        f0 = f1;
    }
    return h;
}

static void finder_sees_spills(void **state) {
    (void)state;
    char text[] = "attnk_t_1_linear_micro4:                # @attnk_t_1_linear_micro4\n"
                  "\tvxorps %ymm0, %ymm0, %ymm0\n"
                  ".LBB0_1:                                # %body\n"
                  "\tvfmadd231ps (%rdi), %ymm1, %ymm0\n"
                  "\tvfmadd231ps (%rdi), %ymm2, %ymm3\n"
                  "\tvfmadd231ps (%rdi), %ymm4, %ymm5\n"
                  "\tvfmadd231ps (%rdi), %ymm6, %ymm7\n"
                  "\tvmovups %ymm8, 32(%rsp)             # 32-byte Spill\n"
                  "\tvfmadd231ps (%rdi), %ymm1, %ymm0\n"
                  "\tvfmadd231ps (%rdi), %ymm2, %ymm3\n"
                  "\tvfmadd231ps (%rdi), %ymm4, %ymm5\n"
                  "\tvfmadd231ps 32(%rsp), %ymm6, %ymm7   # 32-byte Folded Reload\n"
                  "\tjne .LBB0_1\n"
                  ".LBB0_2:\n"
                  "\tvfmadd231ps (%rdi), %ymm1, %ymm0\n"
                  "\tjmp .LBB0_2\n"
                  "\tretq\n"
                  "attnk_t_2_flash:\n"
                  ".LBB1_1:\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tvfmadd231ps (%rdi), %zmm1, %zmm0\n"
                  "\tjl .LBB1_1\n";
    hot h = hot_loops(text);
    assert_int_equal(h.loops, 2); /* the 1-FMA loop is not hot */
    assert_int_equal(h.spilly, 1);
    assert_non_null(strstr(h.first, "attnk_t_1_linear_micro4: 2 spills/reloads"));
}

static void hot_loops_do_not_spill(void **state) {
    (void)state;
    /* and with ggml's block formats: "spec|a line added to it" */
    const char *specs[] = {"llama3_8b",
                           "gemma2_9b",
                           "qwen3_8b",
                           "gpt_oss_20b_sliding",
                           "phi3_mini",
                           "llama4_scout_local",
                           "llama3_8b|dtype: q8_0",
                           "llama3_8b|dtype: q4_0",
                           "seed|kv_cache: {dtype: q8_0}"};
    const char *cpus[] = {"znver3", "znver4"};
    char *dir = tmpdir_new();
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++)
        for (int c = 0; c < 2; c++) {
            char spec[512];
            snprintf(spec, sizeof spec, "%s/specs/%.*s.yaml", ATTNC_SOURCE_DIR,
                     (int)strcspn(specs[i], "|"), specs[i]);
            if (strchr(specs[i], '|')) {
                char *text = read_file(spec, NULL);
                assert_non_null(text);
                size_t n = strlen(text) + strlen(specs[i]) + 2;
                char *with = malloc(n);
                snprintf(with, n, "%s%s\n", text, strchr(specs[i], '|') + 1);
                snprintf(spec, sizeof spec, "%s", path_in(dir, "quant.yaml"));
                write_file(spec, with, strlen(with));
                free(with);
                free(text);
            }
            attnc_options o = attnc_options_default();
            o.cpu = cpus[c];
            const char *out = path_in(dir, "k.s");
            char *err = NULL;
            if (attnc_compile_file(spec, &o, ATTNC_EMIT_ASM, out, NULL, &err) != ATTNC_OK)
                fail_msg("%s --cpu %s: %s", specs[i], cpus[c], err ? err : "?");
            free(err);
            char *text = read_file(out, NULL);
            assert_non_null(text);
            hot h = hot_loops(text);
            free(text);
            /* GEMM and GEMV tiles of both linears, flash, split decode */
            if (h.loops < 15)
                fail_msg("%s --cpu %s: only %d hot loops found", specs[i], cpus[c], h.loops);
            if (h.spilly)
                fail_msg("%s --cpu %s: %d of %d hot loops spill; first %s", specs[i], cpus[c],
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
