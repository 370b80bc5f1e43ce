/* test_bench.c: `attnc bench` and `attnc roofline`: the JSON rows carry
 * the documented fields, the useful-work formulas of --help, one row per
 * fusion pass with --ablation, decode rows, and usage/input errors. Not a
 * timing test: only that times are positive and ordered. */
#include <cjson/cJSON.h>
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

#define SPEC(name) ATTNC_SOURCE_DIR "/specs/" name ".yaml"
#define ATTNC(f, ...) run_cmd((const char *[]){ATTNC_BIN, __VA_ARGS__, NULL}, (f)->out, (f)->err)

typedef cli_fixture fixture;

/* The JSON rows attnc printed, one object per line (at most 16). */
static int rows(fixture *f, cJSON **row) {
    char *text = read_file(f->out, NULL);
    assert_non_null(text);
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < 16; line = strtok(NULL, "\n")) {
        row[n] = cJSON_Parse(line);
        if (!row[n])
            fail_msg("not a JSON object: %s", line);
        n++;
    }
    free(text);
    return n;
}

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        fail_msg("row lacks number '%s'", key);
    return v->valuedouble;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v))
        fail_msg("row lacks string '%s'", key);
    return v->valuestring;
}

/* Times ordered and positive; rates = work / median. */
static void assert_consistent(const cJSON *r) {
    double med = num(r, "ms_median"), lo = num(r, "ms_min"), hi = num(r, "ms_max");
    assert_true(lo > 0 && lo <= med && med <= hi);
    assert_true(fabs(num(r, "gflops") - num(r, "flops") / med / 1e6) <= 1e-6 * num(r, "gflops"));
    assert_true(fabs(num(r, "gbps") - num(r, "bytes") / med / 1e6) <= 1e-6 * num(r, "gbps"));
    assert_true(num(r, "peak_gflops") > 0 && num(r, "read_gbps_min") > 0);
    assert_true(num(r, "read_gbps_min") <= num(r, "read_gbps") &&
                num(r, "read_gbps") <= num(r, "read_gbps_max"));
    assert_true(fabs(num(r, "pct_peak") - 100 * num(r, "gflops") / num(r, "peak_gflops")) < 1e-6);
    /* %read is the median of each run's GB/s over the read just before
     * it: within the extremes a run and a probe can pair to */
    double bytes = num(r, "bytes"), pct = num(r, "pct_read");
    assert_true(pct >= 100 * bytes / hi / 1e6 / num(r, "read_gbps_max") * (1 - 1e-9));
    assert_true(pct <= 100 * bytes / lo / 1e6 / num(r, "read_gbps_min") * (1 + 1e-9));
    assert_true(num(r, "threads") >= 1);
}

static void bench_prefill_rows_count_the_documented_work(void **state) {
    fixture *f = *state;
    cJSON *r[16];
    /* seed: H 12, hd 64, D 768, kv 256, causal: 40 queries see 820 keys */
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--seq", "40", "--part", "core", "--json",
                           "--runs", "5", "--threads", "2"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_string_equal(str(r[0], "mode"), "prefill");
    assert_string_equal(str(r[0], "part"), "core");
    assert_string_equal(str(r[0], "variant"), "all passes");
    assert_string_equal(str(r[0], "spec"), "seed");
    assert_int_equal((int)num(r[0], "seq"), 40);
    assert_int_equal((int)num(r[0], "threads"), 2);
    double core = 4.0 * 64 * 12 * 820;
    assert_true(num(r[0], "flops") == core);
    assert_true(num(r[0], "bytes") == 2.0 * 40 * 256 * 4 + 2.0 * 40 * 768 * 4);
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);

    /* the block, for 2 sequences prefilling after 16 shared tokens: the
     * 40 queries see 17..56 keys */
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--seq", "40", "--json", "--runs", "5",
                           "--batch", "2", "--shared-prefix", "16"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_string_equal(str(r[0], "part"), "block");
    assert_int_equal((int)num(r[0], "shared_prefix"), 16);
    assert_true(num(r[0], "flops") == 2 * (4.0 * 64 * 12 * (17 + 56) * 20 +
                                           2.0 * 40 * 768 * (768 + 512) + 2.0 * 40 * 768 * 768));
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
}

static void bench_ablation_has_a_row_per_fusion_pass(void **state) {
    fixture *f = *state;
    cJSON *r[16];
    /* under sanitizers seed's smaller reference check: the same rows */
    const char *spec = sanitized_step(2) > 1 ? SPEC("seed") : SPEC("mistral_7b");
    assert_int_equal(ATTNC(f, "bench", spec, "--seq", "24", "--json", "--runs", "5", "--ablation"),
                     0);
    int n = rows(f, r), want = 1;
    for (int p = 0; attnc_pass_name(p); p++)
        want += strcmp(attnc_pass_name(p), "dce") != 0;
    assert_int_equal(n, want);
    assert_string_equal(str(r[0], "variant"), "all passes");
    for (int i = 1, p = 0; i < n; i++, p++) {
        if (strcmp(attnc_pass_name(p), "dce") == 0)
            p++;
        char want_name[64];
        snprintf(want_name, sizeof want_name, "-%s", attnc_pass_name(p));
        assert_string_equal(str(r[i], "variant"), want_name);
        assert_true(num(r[i], "flops") == num(r[0], "flops")); /* same useful work */
        assert_consistent(r[i]);
    }
    for (int i = 0; i < n; i++)
        cJSON_Delete(r[i]);
}

/* The host's code runs vpdpbusd: AVX-512 code where the CPU has
 * AVX512-VNNI, AVX2 code with AVX-VNNI. */
static bool host_has_vnni(void) {
    uint32_t have = attn_cpu_features();
    return (have & ATTN_CPU_AVX512F) ? (have & ATTN_CPU_AVX512VNNI) != 0
                                     : (have & ATTN_CPU_AVXVNNI) != 0;
}

static void bench_decode_rows(void **state) {
    fixture *f = *state;
    cJSON *r[16];
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--mode", "decode", "--cache", "50", "--json",
                           "--runs", "5", "--part", "core"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_string_equal(str(r[0], "mode"), "decode");
    assert_int_equal((int)num(r[0], "cache"), 50);
    assert_int_equal((int)num(r[0], "seq"), 1);
    assert_true(num(r[0], "flops") == 4.0 * 64 * 12 * 51);
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
    /* other dtypes: the block's bytes are bf16 weights and an f16 cache;
     * a batch of 3 sequences: 3 times a sequence's work, the weights once */
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--mode", "decode", "--cache", "50", "--json",
                           "--runs", "5", "--dtype", "bf16", "--kv-dtype", "f16", "--batch", "3"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_int_equal((int)num(r[0], "batch"), 3);
    double D = 768, qd = 12 * 64, kv = 4 * 64;
    double own = 2 * 51 * kv * 2 + 2 * qd * 4 + 2 * D * 4,
           weights = (D * (qd + 2 * kv) + qd * D) * 2;
    assert_true(num(r[0], "bytes") == 3 * own + weights);
    assert_true(num(r[0], "flops") ==
                3 * (4.0 * 64 * 12 * 51 + 2 * D * (qd + 2 * kv) + 2 * qd * D));
    assert_true(num(r[0], "cache_token_bytes") == 2 * kv * 2); /* K and V rows in f16 */
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
    /* a batch's core, its sequences sharing 32 of their 50 tokens: the
     * shared keys' bytes once; prefilling after a shared prefix */
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--mode", "decode", "--cache", "50", "--json",
                           "--runs", "5", "--part", "core", "--batch", "3", "--shared-prefix",
                           "32"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_int_equal((int)num(r[0], "shared_prefix"), 32);
    double ctb = 2 * kv * 4; /* the seed's f32 cache */
    assert_true(num(r[0], "bytes") == 3 * (51 * ctb + 2 * qd * 4) - 2 * 32 * ctb);
    assert_true(num(r[0], "flops") == 3 * 4.0 * 64 * 12 * 51);
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
    /* activations q8_0: the int8 dot peak where the CPU has VNNI */
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--mode", "decode", "--cache", "50", "--json",
                           "--runs", "5", "--dtype", "q4_0", "--activations", "q8_0"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_string_equal(str(r[0], "activations"), "q8_0");
    assert_string_equal(str(r[0], "peak_kind"), host_has_vnni() ? "vnni_int8" : "fma");
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
    /* refused for float weights, as the spec key is: exit 2 */
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--activations", "q8_0"), 2);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--activations", "int4"), 1);
}

/* An MLA block: the absorbed form's work over the latent, and the cache
 * holding one latent (L + r values) a token, in JSON and in the header. */
static void bench_mla_rows(void **state) {
    fixture *f = *state;
    const char *spec = path_in(f->dir, "mla.yaml");
    const char yaml[] = "name: mla\nheads: 4\nd_model: 64\nmla: {q_lora_rank: 0, kv_lora_rank: 32, "
                        "qk_nope_head_dim: 16, qk_rope_head_dim: 8, v_head_dim: 16}\n"
                        "rope: {style: interleaved}\nkv_cache: {max_tokens: 64}\n";
    write_file(spec, yaml, strlen(yaml));
    cJSON *r[16];
    double H = 4, L = 32, rr = 8, keys = 21;
    assert_int_equal(ATTNC(f, "bench", spec, "--mode", "decode", "--cache", "20", "--part", "core",
                           "--json", "--runs", "5"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_true(num(r[0], "flops") == 2 * (2 * L + rr) * H * keys);
    assert_true(num(r[0], "bytes") == keys * (L + rr) * 4 + H * (L + rr + L) * 4);
    assert_true(num(r[0], "cache_token_bytes") == (L + rr) * 4);
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
    assert_int_equal(ATTNC(f, "bench", spec, "--mode", "decode", "--cache", "20", "--part", "core",
                           "--runs", "5", "--kv-dtype", "f16"),
                     0);
    assert_file_has(f->out, "cache f16 (80 bytes a token)");
}

/* --memory: a cross-attention block's rows count N keys per query, and
 * its block counts the q and o projections only (K/V were projected with
 * the memory); the usage errors of the option. */
/* A mask_mod's work is the pairs it shows: a window written as an
 * expression counts what the built-in window counts; a mask reading the
 * head averages its heads' pairs. */
static void bench_counts_the_pairs_a_mask_mod_shows(void **state) {
    fixture *f = *state;
    const char *base = "name: m\nheads: 4\nkv_groups: 2\nhead_dim: 32\nd_model: 128\n"
                       "kv_cache:\n  max_tokens: 256\n";
    const char *tails[3] = {"sliding_window: 8\n", "mask_mod: \"q - kv < 8\"\n",
                            "mask_mod: \"h < 2 or kv == q\"\n"};
    double work[3][2];
    for (int i = 0; i < 3; i++) {
        char yaml[512];
        const char *spec = path_in(f->dir, "mask.yaml");
        snprintf(yaml, sizeof yaml, "%s%s", base, tails[i]);
        write_file(spec, yaml, strlen(yaml));
        cJSON *r[16];
        assert_int_equal(
            ATTNC(f, "bench", spec, "--seq", "40", "--part", "core", "--json", "--runs", "5"), 0);
        assert_int_equal(rows(f, r), 1);
        work[i][0] = num(r[0], "flops");
        work[i][1] = num(r[0], "bytes");
        assert_consistent(r[0]);
        cJSON_Delete(r[0]);
        remove(spec);
    }
    /* 40 causal queries, a window of 8: 1 + 2 + .. + 8 + 32 * 8 pairs */
    assert_true(work[0][0] == 4.0 * 32 * 4 * (36 + 32 * 8));
    assert_true(work[1][0] == work[0][0] && work[1][1] == work[0][1]);
    /* heads 0, 1 see 820 pairs, heads 2, 3 the 40 diagonal ones */
    assert_true(work[2][0] == 4.0 * 32 * 4 * (820 + 40) / 2);
}

static void bench_cross_attention_rows(void **state) {
    fixture *f = *state;
    const char *spec = path_in(f->dir, "cross.yaml");
    const char yaml[] = "name: cross\nheads: 4\nkv_groups: 2\nhead_dim: 32\nd_model: 128\n"
                        "cross_attention:\n  memory_dim: 96\nkv_cache:\n  max_tokens: 64\n";
    write_file(spec, yaml, strlen(yaml));
    cJSON *r[16];
    double H = 4, hd = 32, D = 128, qd = 128, kv = 64, N = 50, S = 20;
    assert_int_equal(
        ATTNC(f, "bench", spec, "--seq", "20", "--memory", "50", "--json", "--runs", "5"), 0);
    assert_int_equal(rows(f, r), 1);
    assert_int_equal((int)num(r[0], "memory"), 50);
    assert_true(num(r[0], "flops") == 4 * hd * H * S * N + 4 * S * D * qd);
    assert_true(num(r[0], "bytes") ==
                2 * N * kv * 4 + 2 * S * qd * 4 + 2 * qd * D * 4 + 2 * S * D * 4);
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
    assert_int_equal(ATTNC(f, "bench", spec, "--mode", "decode", "--memory", "50", "--part", "core",
                           "--json", "--runs", "5"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_true(num(r[0], "seq") == 1 && num(r[0], "cache") == 0);
    assert_true(num(r[0], "flops") == 4 * hd * H * N);
    assert_consistent(r[0]);
    cJSON_Delete(r[0]);
    assert_int_equal(ATTNC(f, "bench", spec, "--runs", "5"), 1); /* no --memory */
    assert_file_has(f->err, "has cross_attention: give its memory rows with --memory N");
    assert_int_equal(ATTNC(f, "bench", spec, "--mode", "decode", "--memory", "5", "--cache", "9"),
                     1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--memory", "5"), 1);
    assert_file_has(f->err, "--memory is for cross-attention");
    assert_int_equal(ATTNC(f, "bench", spec, "--memory", "65"), 2); /* > max_tokens */
    remove(spec);
}

/* --cpu: kernels and probes compiled for another CPU this one can run
 * (x86-64-v2's 4-lane vectors have a quarter of AVX-512's peak and half
 * of AVX2's); a CPU whose features this one lacks is refused, naming
 * them, before anything runs. */
static void bench_and_roofline_for_another_cpu(void **state) {
#if !defined(__x86_64__)
    skip();
#endif
    fixture *f = *state;
    cJSON *r[16];
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--seq", "40", "--json", "--runs", "5",
                           "--cpu", "x86-64-v2"),
                     0);
    assert_int_equal(rows(f, r), 1);
    assert_string_equal(str(r[0], "cpu"), "x86-64-v2");
    assert_consistent(r[0]);
    double v2_peak = num(r[0], "peak_gflops");
    cJSON_Delete(r[0]);
    assert_int_equal(ATTNC(f, "roofline", "--json", "--runs", "3"), 0);
    assert_int_equal(rows(f, r), 1);
    double host_peak = num(r[0], "fma_gflops");
    cJSON_Delete(r[0]);
    if (attn_cpu_features() & ATTN_CPU_AVX2) /* wider vectors: at least 1.5 x the FMAs */
        assert_true(host_peak > 1.5 * v2_peak);
    /* the CPU with the most features attnc records, and one of another ISA */
    uint32_t spr = ATTN_CPU_SSE4_1 | ATTN_CPU_SSE4_2 | ATTN_CPU_POPCNT | ATTN_CPU_AVX |
                   ATTN_CPU_AVX2 | ATTN_CPU_FMA | ATTN_CPU_F16C | ATTN_CPU_BMI2 | ATTN_CPU_LZCNT |
                   ATTN_CPU_MOVBE | ATTN_CPU_AVX512F | ATTN_CPU_AVX512BW | ATTN_CPU_AVX512DQ |
                   ATTN_CPU_AVX512VL | ATTN_CPU_AVX512BF16 | ATTN_CPU_AVX512FP16 |
                   ATTN_CPU_AVX512VBMI;
    for (const char *const *c = (const char *const[]){"bench", "roofline", NULL}; *c; c++) {
        int rc = !strcmp(*c, "bench")
                     ? ATTNC(f, "bench", SPEC("seed"), "--seq", "40", "--runs", "5", "--cpu",
                             "sapphirerapids")
                     : ATTNC(f, "roofline", "--runs", "1", "--cpu", "sapphirerapids");
        char *err = read_file(f->err, NULL);
        if ((attn_cpu_features() & spr) == spr) {
            assert_int_equal(rc, 0);
        } else {
            assert_int_equal(rc, 2);
            assert_non_null(
                strstr(err, "--cpu sapphirerapids needs CPU features this machine lacks"));
        }
        free(err);
        rc = !strcmp(*c, "bench") ? ATTNC(f, "bench", SPEC("seed"), "--cpu", "cortex-a72")
                                  : ATTNC(f, "roofline", "--cpu", "cortex-a72");
        assert_int_equal(rc, 2);
        err = read_file(f->err, NULL);
        assert_non_null(strstr(err, "unknown CPU 'cortex-a72'"));
        free(err);
    }
}

/* How many temporary specs of `bench --dtype/--kv-dtype` exist now. */
static size_t temp_specs(void) {
    glob_t g;
    size_t n = glob("/tmp/attnc-bench-*", 0, NULL, &g) == 0 ? g.gl_pathc : 0;
    globfree(&g);
    return n;
}

static void bench_and_roofline_refuse_bad_arguments(void **state) {
    fixture *f = *state;
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--mode", "train"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--part", "all"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--runs", "3"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--mode", "decode", "--seq", "4"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--cache", "4"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--disable-pass", "nope"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--dtype", "f64"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--kv-dtype", "int8"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--batch", "0"), 1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--mode", "decode", "--cache", "50",
                           "--shared-prefix", "51"),
                     1);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--shared-prefix", "-1"), 1);
    assert_int_equal(ATTNC(f, "bench"), 1);
    assert_int_equal(ATTNC(f, "roofline", "extra"), 1);
    assert_int_equal(ATTNC(f, "bench", ATTNC_SOURCE_DIR "/tests/specs/bad/unknown_key.yaml"), 2);
    char *err = read_file(f->err, NULL);
    assert_non_null(strstr(err, "unknown_key.yaml:3:1: error"));
    free(err);
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--seq", "100000"), 2); /* > max_tokens */
    /* with other dtypes too, and no temporary spec is left behind */
    size_t before = temp_specs();
    assert_int_equal(ATTNC(f, "bench", SPEC("seed"), "--seq", "100000", "--dtype", "bf16"), 2);
    assert_int_equal(temp_specs(), before);
    for (const char *const *c = (const char *const[]){"bench", "roofline", NULL}; *c; c++) {
        assert_int_equal(ATTNC(f, *c, "--help"), 0);
        char *out = read_file(f->out, NULL);
        assert_non_null(strstr(out, "usage: attnc"));
        free(out);
    }
    assert_int_equal(dir_count(f->dir), 0);
}

static void roofline_json(void **state) {
    fixture *f = *state;
    cJSON *r[16];
    assert_int_equal(ATTNC(f, "roofline", "--json", "--runs", "3", "--threads", "1"), 0);
    assert_int_equal(rows(f, r), 1);
    assert_int_equal((int)num(r[0], "threads"), 1);
    assert_true(num(r[0], "fma_gflops_min") > 0 &&
                num(r[0], "fma_gflops_min") <= num(r[0], "fma_gflops") &&
                num(r[0], "fma_gflops") <= num(r[0], "fma_gflops_max"));
    assert_true(num(r[0], "read_gbps_min") > 0 &&
                num(r[0], "read_gbps") <= num(r[0], "read_gbps_max"));
    /* the int8 dot peak where the code has VNNI: four multiply-adds a
     * lane, at least the FMA's rate */
    const cJSON *int8 = cJSON_GetObjectItemCaseSensitive(r[0], "int8_gops");
    assert_int_equal(int8 != NULL, host_has_vnni());
    if (int8)
        assert_true(num(r[0], "int8_gops") > num(r[0], "fma_gflops"));
    cJSON_Delete(r[0]);
    /* thread counts that split the read probe's buffer unevenly: each
     * thread's sum is checked against its own part (the check used to
     * compare a float total and fail for 3 threads, silently) */
    for (const char *const *t = (const char *const[]){"3", "5", NULL}; *t; t++) {
        assert_int_equal(ATTNC(f, "roofline", "--json", "--runs", "1", "--threads", *t), 0);
        assert_int_equal(rows(f, r), 1);
        assert_int_equal((int)num(r[0], "threads"), atoi(*t));
        cJSON_Delete(r[0]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(bench_prefill_rows_count_the_documented_work,
                                        cli_fixture_setup, cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bench_counts_the_pairs_a_mask_mod_shows, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bench_cross_attention_rows, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bench_ablation_has_a_row_per_fusion_pass, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bench_decode_rows, cli_fixture_setup, cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bench_mla_rows, cli_fixture_setup, cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bench_and_roofline_refuse_bad_arguments, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(roofline_json, cli_fixture_setup, cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(bench_and_roofline_for_another_cpu, cli_fixture_setup,
                                        cli_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
