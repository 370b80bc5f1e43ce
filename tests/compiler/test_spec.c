/* test_spec.c: the spec language: shipped specs load, defaults are filled,
 * the normalized YAML loads back to the same config, errors carry their
 * location and every error of a file is reported. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnc.h"
#include "support.h"

static attnc_status load_str(const char *text, attn_config *c, attnc_ctx **ctx_out) {
    attnc_ctx *ctx = attnc_ctx_new();
    assert_non_null(ctx);
    attnc_status st = attnc_spec_load_string(ctx, "t.yaml", text, strlen(text), c);
    if (ctx_out)
        *ctx_out = ctx;
    else
        attnc_ctx_free(ctx);
    return st;
}

static attn_config load_ok(const char *text) {
    attn_config c;
    attnc_ctx *ctx;
    attnc_status st = load_str(text, &c, &ctx);
    if (st != ATTNC_OK)
        print_diags(ctx);
    attnc_ctx_free(ctx);
    assert_int_equal(st, ATTNC_OK);
    return c;
}

static attn_config load_shipped(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, name);
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    assert_int_equal(attnc_spec_load_file(ctx, path, &c), ATTNC_OK);
    assert_int_equal(attnc_diag_count(ctx), 0);
    attnc_ctx_free(ctx);
    assert_string_equal(c.name, name);
    return c;
}

static void spec_loads_every_shipped_spec(void **state) {
    (void)state;
    for (size_t i = 0; i < n_shipped_specs; i++) {
        attn_config c = load_shipped(shipped_specs[i]);
        attn_msg m;
        assert_int_equal(attn_config_check(&c, &m), ATTN_OK);
    }
}

static void spec_shipped_values_match_their_models(void **state) {
    (void)state;
    attn_config c = load_shipped("llama3_8b");
    assert_int_equal(c.heads, 32);
    assert_int_equal(c.kv_groups, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.rope_scaling, ATTN_SCALING_LLAMA3);
    assert_true(c.rope_base == 500000 && c.rope_factor == 8 && c.rope_low_freq_factor == 1 &&
                c.rope_high_freq_factor == 4 && c.rope_original_max_position == 8192);
    c = load_shipped("mistral_7b");
    assert_int_equal(c.sliding_window, 4096);
    /* current models: the values their configs give, defaults filled */
    c = load_shipped("gpt_oss_20b_sliding");
    assert_true(c.rope_scaling == ATTN_SCALING_YARN && c.rope_factor == 32 &&
                c.rope_original_max_position == 4096 && c.rope_beta_fast == 32 &&
                c.rope_beta_slow == 1 && !c.rope_truncate && c.rope_mscale == 1 &&
                c.rope_mscale_all_dim == 0 && c.sinks && c.qkv_bias && c.o_bias &&
                c.sliding_window == 128);
    assert_float_equal(c.rope_attention_factor, 0.1 * log(32.0) + 1, 1e-15);
    c = load_shipped("qwen3_8b");
    assert_true(c.qk_norm == ATTN_QK_NORM_HEAD && c.qk_norm_weight && c.qk_norm_offset == 0 &&
                c.qk_norm_eps == 1e-6 && !c.sinks && !c.alibi);
    c = load_shipped("gemma3_12b_local");
    assert_true(c.qk_norm_offset == 1 && c.sliding_window == 1024 && c.scale == 0.0625);
    c = load_shipped("olmo2_7b");
    assert_int_equal(c.qk_norm, ATTN_QK_NORM_ALL);
    c = load_shipped("llama4_scout_local");
    assert_true(c.chunk == 8192 && !c.qk_norm_weight && c.rope_style == ATTN_ROPE_INTERLEAVED &&
                c.rope_low_freq_factor == c.rope_high_freq_factor);
    c = load_shipped("llama4_scout_global");
    assert_true(c.rope_style == ATTN_ROPE_NONE && c.temp_floor_scale == 8192 &&
                c.temp_attn_scale == 0.1);
    c = load_shipped("bloom_7b1");
    assert_true(c.alibi && c.kv_groups == 32 && c.rope_style == ATTN_ROPE_NONE);
    c = load_shipped("qwen2_7b");
    assert_true(c.qkv_bias && !c.o_bias);
    assert_int_equal(c.d_model, 3584);
    c = load_shipped("gemma2_9b");
    assert_true(c.softcap == 50 && c.head_dim == 256 && c.scale == 0.0625 && !c.scale_auto);
    c = load_shipped("falcon_7b");
    assert_true(c.heads == 71 && c.kv_groups == 1);
    c = load_shipped("gptj_6b");
    assert_true(c.rope_style == ATTN_ROPE_INTERLEAVED && c.rotary_dim == 64 && c.head_dim == 256);
    assert_int_equal(c.kv_groups, 16); /* default: MHA */
    c = load_shipped("seed");
    assert_true(c.heads == 12 && c.kv_groups == 4 && c.head_dim == 64 && c.d_model == 768);
    assert_true(c.memory_dim == 0 && !c.no_k_bias);
    c = load_shipped("whisper_large_v3_cross");
    assert_true(c.memory_dim == 1280 && c.heads == 20 && c.kv_groups == 20 && c.head_dim == 64 &&
                c.qkv_bias && c.no_k_bias && c.o_bias && !c.causal &&
                c.weights_layout == ATTN_LAYOUT_GPTJ && c.kv_max_tokens == 1500);
    c = load_shipped("mllama_11b_cross");
    assert_true(c.memory_dim == 4096 && c.kv_groups == 8 && c.qk_norm == ATTN_QK_NORM_HEAD &&
                c.qk_norm_weight && c.qk_norm_eps == 1e-5 && !c.qkv_bias && !c.causal);
}

/* attnc_diag_text: every diagnostic as attnc_diag_format gives it, a
 * line each; cut like snprintf, its length the whole text's. */
static void diag_text_lists_every_diagnostic(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    const char *text = "name: t\nheads: 0\nhead_dim: 7\nbogus: 1\n";
    assert_int_not_equal(attnc_spec_load_string(ctx, "t.yaml", text, strlen(text), &c), ATTNC_OK);
    size_t n = attnc_diag_count(ctx);
    assert_true(n >= 2);
    char want[4096] = "", line[1024];
    for (size_t i = 0; i < n; i++) {
        attnc_diag_format(attnc_diag_get(ctx, i), line, sizeof line);
        strcat(strcat(want, line), "\n");
    }
    char got[4096];
    assert_int_equal(attnc_diag_text(ctx, got, sizeof got), (int)strlen(want));
    assert_string_equal(got, want);
    assert_int_equal(attnc_diag_text(ctx, NULL, 0), (int)strlen(want));
    for (size_t cut = 1; cut < strlen(want) + 2; cut += 7) {
        memset(got, 'x', sizeof got);
        assert_int_equal(attnc_diag_text(ctx, got, cut), (int)strlen(want));
        assert_int_equal(strlen(got), cut - 1 < strlen(want) ? cut - 1 : strlen(want));
        assert_memory_equal(got, want, strlen(got));
    }
    attnc_ctx_free(ctx);
    assert_int_equal(attnc_diag_text(NULL, got, sizeof got), 0);
    assert_string_equal(got, "");
}

/* One context collects the diagnostics of many one-call functions: an
 * earlier failure does not fail a later call, and what each call said
 * stays readable after it (its file names are the context's own). */
static void one_context_collects_many_calls(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    attnc_jit *jit = NULL;
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/tests/specs/bad/unknown_key.yaml", ATTNC_SOURCE_DIR);
    assert_int_equal(attnc_jit_compile_file(ctx, bad, NULL, &jit), ATTNC_E_SPEC);
    size_t n = attnc_diag_count(ctx);
    assert_true(n >= 1);
    attnc_options o = attnc_options_default();
    o.no_cache = 1;
    assert_int_equal(attnc_jit_compile_file(ctx, spec_path("seed"), &o, &jit), ATTNC_OK);
    assert_non_null(attnc_jit_kernels(jit));
    attnc_jit_free(jit);
    assert_int_equal(attnc_diag_count(ctx), n);
    o.cpu = "no-such-cpu";
    char cpu[64];
    uint32_t feat;
    assert_int_equal(attnc_target_cpu(ctx, &o, cpu, sizeof cpu, &feat), ATTNC_E_SPEC);
    assert_int_equal(attnc_diag_count(ctx), n + 1);
    assert_string_equal(attnc_diag_get(ctx, 0)->loc.file, bad);
    assert_non_null(strstr(attnc_diag_get(ctx, 0)->msg, "unknown key 'kv_group'"));
    assert_non_null(strstr(attnc_diag_get(ctx, n)->msg, "unknown CPU 'no-such-cpu'"));
    attnc_ctx_free(ctx);
}

/* Bad arguments to the compiler's API are ATTNC_E_INVALID (as the
 * runtime's are ATTN_E_INVALID), with a diagnostic naming the call when
 * there is a context (the one-call functions also run without one);
 * attnc_status_str names every status. */
static void api_bad_arguments_are_invalid(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    const char *text;
    attnc_jit *jit = NULL;
    attnc_probes pr;
    attnc_cache_stats cs;
    uint32_t feat;
    assert_int_equal(attnc_spec_load_file(NULL, "x.yaml", &c), ATTNC_E_INVALID);
    assert_int_equal(attnc_spec_load_file(ctx, NULL, &c), ATTNC_E_INVALID);
    assert_int_equal(attnc_spec_load_string(ctx, "t", NULL, 0, &c), ATTNC_E_INVALID);
    assert_int_equal(attnc_ir_text(ctx, NULL, NULL, NULL, &text), ATTNC_E_INVALID);
    /* each one-call function, with a context and without */
    for (int with = 0; with < 2; with++) {
        attnc_status got[6];
        attnc_ctx *cx = with ? attnc_ctx_new() : NULL;
        got[0] = attnc_jit_compile_file(cx, NULL, NULL, &jit);
        got[1] = attnc_compile_file(cx, NULL, NULL, ATTNC_EMIT_OBJ, "x.o", NULL);
        got[2] = attnc_target_cpu(cx, NULL, NULL, 0, &feat);
        got[3] = attnc_probes_compile_for(cx, NULL, NULL, &pr);
        got[4] = attnc_cache_stats_get(cx, NULL, &cs);
        got[5] = attnc_cache_clear(cx, NULL, NULL);
        for (int i = 0; i < 6; i++)
            assert_int_equal(got[i], ATTNC_E_INVALID);
        if (!with)
            continue;
        static const char *const calls[6] = {
            "attnc_jit_compile_file: NULL spec path", "attnc_compile_file: NULL spec path",
            "attnc_target_cpu: no CPU buffer",        "attnc_probes_compile: NULL jit",
            "attnc_cache_stats_get: NULL directory",  "attnc_cache_clear: NULL directory"};
        assert_int_equal(attnc_diag_count(cx), 6);
        for (int i = 0; i < 6; i++) {
            const attnc_diag *d = attnc_diag_get(cx, (size_t)i);
            assert_int_equal(d->sev, ATTNC_SEV_ERROR);
            assert_int_equal(d->code, ATTNC_E_INVALID);
            assert_non_null(strstr(d->msg, calls[i]));
        }
        attnc_ctx_free(cx);
    }
    assert_int_equal(attnc_cache_dir(NULL, NULL, 0), ATTNC_E_INVALID);
    for (int s = 0; s < ATTNC_STATUS_COUNT; s++)
        assert_string_not_equal(attnc_status_str((attnc_status)s), "unknown status");
    assert_string_equal(attnc_status_str(ATTNC_E_INVALID), "invalid argument");
    assert_string_equal(attnc_status_str(ATTNC_STATUS_COUNT), "unknown status");
    attnc_ctx_free(ctx);
}

/* cross_attention: memory_dim defaults to d_model, causal to false; an
 * explicit off value of a self-attention key is allowed; k_bias: false
 * drops K's bias only. */
static void spec_cross_attention_and_k_bias(void **state) {
    (void)state;
    attn_config c = load_ok("name: m\nheads: 4\nhead_dim: 16\nd_model: 80\ncross_attention: {}\n"
                            "causal: false\nrope: none\nsliding_window: 0\n");
    assert_true(c.memory_dim == 80 && !c.causal && c.rope_style == ATTN_ROPE_NONE);
    c = load_ok("name: m\nheads: 4\nhead_dim: 16\ncross_attention:\n  memory_dim: 7\n");
    assert_true(c.memory_dim == 7 && !c.causal);
    /* off as the parser reads it, in any of its spellings */
    c = load_ok("name: m\nheads: 4\nhead_dim: 16\ncross_attention: {}\ncausal: False\n"
                "alibi: FALSE\nchunked_attention: 0\nquery_temperature: none\n");
    assert_true(c.memory_dim == 64 && !c.causal && !c.alibi);
    c = load_ok("name: m\nheads: 4\nhead_dim: 16\ncross_attention: none\n");
    assert_true(c.memory_dim == 0 && c.causal);
    c = load_ok("name: m\nheads: 4\nhead_dim: 16\nqkv_bias: true\nk_bias: false\n");
    assert_true(c.qkv_bias && c.no_k_bias);
    c = load_ok("name: m\nheads: 4\nhead_dim: 16\nqkv_bias: true\nk_bias: true\n");
    assert_true(c.qkv_bias && !c.no_k_bias);
    c = load_ok("name: m\nheads: 4\nhead_dim: 16\nk_bias: false\n");
    assert_true(!c.qkv_bias && !c.no_k_bias);
    /* the runtime's check refuses what the spec would */
    attn_msg m;
    c = config_small(4, 4, 16, 64);
    c.memory_dim = 32;
    assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID); /* causal */
    assert_non_null(strstr(m.text, "causal does not go with cross_attention"));
    c.causal = false;
    assert_int_equal(attn_config_check(&c, &m), ATTN_OK);
    c.no_k_bias = true;
    assert_int_equal(attn_config_check(&c, &m), ATTN_E_INVALID);
    assert_non_null(strstr(m.text, "needs qkv_bias"));
}

static void spec_fills_defaults(void **state) {
    (void)state;
    attn_config c = load_ok("name: m\nheads: 6\nhead_dim: 16\n");
    assert_int_equal(c.kv_groups, 6);
    assert_int_equal(c.d_model, 96);
    assert_true(c.causal);
    assert_int_equal(c.rope_style, ATTN_ROPE_NONE);
    assert_int_equal(c.sliding_window, 0);
    assert_true(c.softcap == 0);
    assert_false(c.qkv_bias);
    assert_false(c.o_bias);
    assert_true(c.scale_auto);
    assert_true(c.scale == 0.25);
    assert_int_equal(c.dtype, ATTN_DTYPE_F32);
    assert_int_equal(c.kv_dtype, ATTN_DTYPE_F32);
    assert_int_equal(c.kv_block_tokens, 16);
    assert_int_equal(c.kv_max_tokens, 4096);
}

static void spec_rope_defaults(void **state) {
    (void)state;
    attn_config c = load_ok("name: m\nheads: 2\nhead_dim: 16\nrope: {}\n");
    assert_int_equal(c.rope_style, ATTN_ROPE_HALF);
    assert_true(c.rope_base == 10000);
    assert_int_equal(c.rotary_dim, 16);
    assert_int_equal(c.rope_scaling, ATTN_SCALING_NONE);
    c = load_ok("name: m\nheads: 2\nhead_dim: 16\nrope: none\n");
    assert_int_equal(c.rope_style, ATTN_ROPE_NONE);
    c = load_ok(
        "name: m\nheads: 2\nhead_dim: 16\n"
        "rope: {style: interleaved, rotary_dim: 8, scaling: {type: linear, factor: 2.5}}\n");
    assert_int_equal(c.rope_style, ATTN_ROPE_INTERLEAVED);
    assert_int_equal(c.rotary_dim, 8);
    assert_int_equal(c.rope_scaling, ATTN_SCALING_LINEAR);
    assert_true(c.rope_factor == 2.5);
}

static void spec_accepts_kv_heads_alias(void **state) {
    (void)state;
    attn_config c = load_ok("name: m\nheads: 8\nkv_heads: 2\nhead_dim: 16\n");
    assert_int_equal(c.kv_groups, 2);
}

static void spec_reads_every_key(void **state) {
    (void)state;
    attn_config c = load_ok("name: all_keys\nheads: 8\nkv_groups: 4\nhead_dim: 32\nd_model: 200\n"
                            "causal: true\nsliding_window: 128\nsoftcap: 30.5\nqkv_bias: true\n"
                            "o_bias: true\nscale: 0.125\ndtype: bf16\n"
                            "kv_cache: {dtype: f16, block_tokens: 32, max_tokens: 1024}\n");
    assert_int_equal(c.d_model, 200);
    assert_int_equal(c.sliding_window, 128);
    assert_true(c.softcap == 30.5);
    assert_true(c.qkv_bias && c.o_bias);
    assert_true(!c.scale_auto && c.scale == 0.125);
    assert_int_equal(c.dtype, ATTN_DTYPE_BF16);
    assert_int_equal(c.kv_dtype, ATTN_DTYPE_F16);
    assert_int_equal(c.kv_block_tokens, 32);
    assert_int_equal(c.kv_max_tokens, 1024);
}

static void assert_round_trip(const attn_config *c) {
    char *y1 = attnc_spec_to_yaml(c);
    assert_non_null(y1);
    attn_config back = load_ok(y1);
    assert_memory_equal(&back, c, sizeof back);
    char *y2 = attnc_spec_to_yaml(&back);
    assert_string_equal(y1, y2);
    free(y1);
    free(y2);
}

static void spec_normalized_yaml_loads_back_to_the_same_config(void **state) {
    (void)state;
    for (size_t i = 0; i < n_shipped_specs; i++) {
        attn_config c = load_shipped(shipped_specs[i]);
        assert_round_trip(&c);
    }
    attn_config c = load_ok("name: odd\nheads: 3\nhead_dim: 10\nscale: 0.1\nsoftcap: 0.3\n"
                            "rope: {base: 12345.678, rotary_dim: 4, scaling: {type: linear, "
                            "factor: 1.1}}\ncausal: false\n");
    assert_round_trip(&c);
}

static void spec_normalized_yaml_spells_out_defaults(void **state) {
    (void)state;
    attn_config c = load_ok("name: m\nheads: 4\nhead_dim: 16\n");
    char *y = attnc_spec_to_yaml(&c);
    assert_non_null(strstr(y, "kv_groups: 4\n"));
    assert_non_null(strstr(y, "d_model: 64\n"));
    assert_non_null(strstr(y, "rope: none\n"));
    assert_non_null(strstr(y, "scale: auto"));
    assert_non_null(strstr(y, "kv_cache:\n  dtype: f32\n  block_tokens: 16\n  max_tokens: 4096\n"));
    free(y);
}

static void spec_reports_missing_file_with_its_name(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    assert_int_equal(attnc_spec_load_file(ctx, "/nonexistent/x.yaml", &c), ATTNC_E_IO);
    assert_int_equal(attnc_diag_count(ctx), 1);
    char buf[512];
    attnc_diag_format(attnc_diag_get(ctx, 0), buf, sizeof buf);
    assert_string_equal(buf,
                        "/nonexistent/x.yaml: error: cannot open spec: No such file or directory");
    attnc_ctx_free(ctx);
}

static void spec_rejects_directory(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    attn_config c;
    assert_int_equal(attnc_spec_load_file(ctx, ATTNC_SOURCE_DIR, &c), ATTNC_E_IO);
    attnc_ctx_free(ctx);
}

static void spec_rejects_empty_text(void **state) {
    (void)state;
    attn_config c;
    attnc_ctx *ctx;
    assert_int_equal(load_str("", &c, &ctx), ATTNC_E_SPEC);
    char buf[512];
    attnc_diag_format(attnc_diag_get(ctx, 0), buf, sizeof buf);
    assert_string_equal(
        buf,
        "t.yaml:1:1: error: empty spec: expected a mapping with at least name, heads and head_dim");
    attnc_ctx_free(ctx);
}

static void spec_reports_every_error_of_a_file_in_order(void **state) {
    (void)state;
    attn_config c;
    attnc_ctx *ctx;
    assert_int_equal(
        load_str("name: 1x\nheads: 12\nkv_groups: 0\nhead_dim: -1\ncausal: maybe\n", &c, &ctx),
        ATTNC_E_SPEC);
    const char *want[] = {
        "t.yaml:1:7: error: name: expected a C identifier, found 1x",
        "t.yaml:3:12: error: kv_groups: expected an integer in 1..1024, found 0",
        "t.yaml:4:11: error: head_dim: expected an integer in 1..1024, found -1",
        "t.yaml:5:9: error: causal: expected true or false, found maybe",
    };
    assert_int_equal(attnc_diag_count(ctx), 4);
    for (size_t i = 0; i < 4; i++) {
        char buf[512];
        const attnc_diag *d = attnc_diag_get(ctx, i);
        assert_int_equal(d->code, ATTNC_E_SPEC);
        attnc_diag_format(d, buf, sizeof buf);
        assert_string_equal(buf, want[i]);
    }
    attnc_ctx_free(ctx);
}

static void spec_syntax_errors_are_yaml_status(void **state) {
    (void)state;
    attn_config c;
    attnc_ctx *ctx;
    assert_int_equal(load_str("name: x\nheads: [1\n", &c, &ctx), ATTNC_E_YAML);
    const attnc_diag *d = attnc_diag_get(ctx, 0);
    assert_int_equal(d->loc.line, 3);
    assert_non_null(strstr(d->msg, "YAML syntax error"));
    attnc_ctx_free(ctx);
}

static void spec_alias_bomb_is_refused_at_once(void **state) {
    (void)state;
    /* billion laughs: refused at the first alias, nothing expanded */
    char text[4096] = "name: x\nheads: 8\nhead_dim: 64\na0: &a0 [lol, lol, lol, lol]\n";
    for (int i = 1; i < 10; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text),
                 "a%d: &a%d [*a%d, *a%d, *a%d, *a%d]\n", i, i, i - 1, i - 1, i - 1, i - 1);
    attn_config c;
    attnc_ctx *ctx;
    assert_int_equal(load_str(text, &c, &ctx), ATTNC_E_YAML);
    assert_non_null(strstr(attnc_diag_get(ctx, 0)->msg, "aliases"));
    attnc_ctx_free(ctx);
}

static void spec_failure_leaves_output_untouched(void **state) {
    (void)state;
    attn_config c;
    memset(&c, 0x5a, sizeof c);
    attn_config before = c;
    assert_int_equal(load_str("name: x\nheads: 3\nkv_groups: 2\nhead_dim: 8\n", &c, NULL),
                     ATTNC_E_SPEC);
    assert_memory_equal(&c, &before, sizeof c);
}

static void spec_diag_format_leaves_out_unknown_parts(void **state) {
    (void)state;
    char buf[256];
    attnc_diag d = {ATTNC_SEV_ERROR, ATTNC_E_SPEC, {"f.yaml", 3, 0}, "m"};
    attnc_diag_format(&d, buf, sizeof buf);
    assert_string_equal(buf, "f.yaml:3: error: m");
    d.loc = (attnc_loc){NULL, 0, 0};
    attnc_diag_format(&d, buf, sizeof buf);
    assert_string_equal(buf, "error: m");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spec_loads_every_shipped_spec),
        cmocka_unit_test(spec_shipped_values_match_their_models),
        cmocka_unit_test(spec_fills_defaults),
        cmocka_unit_test(spec_cross_attention_and_k_bias),
        cmocka_unit_test(diag_text_lists_every_diagnostic),
        cmocka_unit_test(one_context_collects_many_calls),
        cmocka_unit_test(api_bad_arguments_are_invalid),
        cmocka_unit_test(spec_rope_defaults),
        cmocka_unit_test(spec_accepts_kv_heads_alias),
        cmocka_unit_test(spec_reads_every_key),
        cmocka_unit_test(spec_normalized_yaml_loads_back_to_the_same_config),
        cmocka_unit_test(spec_normalized_yaml_spells_out_defaults),
        cmocka_unit_test(spec_reports_missing_file_with_its_name),
        cmocka_unit_test(spec_rejects_directory),
        cmocka_unit_test(spec_rejects_empty_text),
        cmocka_unit_test(spec_reports_every_error_of_a_file_in_order),
        cmocka_unit_test(spec_syntax_errors_are_yaml_status),
        cmocka_unit_test(spec_alias_bomb_is_refused_at_once),
        cmocka_unit_test(spec_failure_leaves_output_untouched),
        cmocka_unit_test(spec_diag_format_leaves_out_unknown_parts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
