/* test_import.c: `attnc import` and `attnc run --layer` on checkpoints as
 * they ship. The published config.json of twelve families (tests/data/hf)
 * import to specs whose `attnc check` output equals the shipped specs';
 * GGUF metadata imports with llama.cpp's conventions; fields attnc cannot
 * express are errors naming the field; --layer finds a layer in a sharded
 * index and in a GGUF file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support.h"

#define SPEC(name) ATTNC_SOURCE_DIR "/specs/" name ".yaml"
#define HF(name) ATTNC_SOURCE_DIR "/tests/data/hf/" name

typedef cli_fixture fixture;

#define ATTNC(f, ...) run_cmd((const char *[]){ATTNC_BIN, __VA_ARGS__, NULL}, (f)->out, (f)->err)

#define captured file_text
#define assert_stderr_has(f, want) assert_file_has((f)->err, want)

/* attnc check's output of spec */
static char *checked(fixture *f, const char *spec) {
    if (ATTNC(f, "check", spec) != 0)
        fail_msg("check %s failed: %s", spec, captured(f->err));
    return captured(f->out);
}

static void hf_configs_import_to_the_shipped_specs(void **state) {
    fixture *f = *state;
    static const struct {
        const char *config, *layer, *spec;
    } cases[] = {
        {"llama3_1_8b.json", "0", "llama3_8b"},
        {"mistral_7b.json", "0", "mistral_7b"},
        {"qwen2_7b.json", "0", "qwen2_7b"},
        {"qwen3_8b.json", "0", "qwen3_8b"},
        {"gemma2_9b.json", "1", "gemma2_9b"}, /* odd layers are global */
        {"gemma3_12b.json", "0", "gemma3_12b_local"},
        {"gemma3_12b.json", "5", "gemma3_12b_global"},
        {"gpt_oss_20b.json", "0", "gpt_oss_20b_sliding"},
        {"gpt_oss_20b.json", "1", "gpt_oss_20b_full"},
        {"falcon_7b.json", "0", "falcon_7b"},
        {"gptj_6b.json", "0", "gptj_6b"},
        {"phi3_mini_4k.json", "0", "phi3_mini"},
        {"olmo2_7b.json", "0", "olmo2_7b"},
        {"bloom_7b1.json", "0", "bloom_7b1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char config[1024], spec[1024], out[1024];
        snprintf(config, sizeof config, "%s/tests/data/hf/%s", ATTNC_SOURCE_DIR, cases[i].config);
        snprintf(spec, sizeof spec, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, cases[i].spec);
        snprintf(out, sizeof out, "%s/%s.yaml", f->dir, cases[i].spec);
        /* the shipped specs keep f32 weights; the rest is the import's own */
        if (ATTNC(f, "import", config, "--layer", cases[i].layer, "--name", cases[i].spec,
                  "--dtype", "f32", "-o", out) != 0)
            fail_msg("import %s: %s", cases[i].config, captured(f->err));
        char *got = checked(f, out), *want = checked(f, spec);
        if (strcmp(got, want) != 0)
            fail_msg("%s layer %s:\n%s\nshipped %s:\n%s", cases[i].config, cases[i].layer, got,
                     cases[i].spec, want);
        free(got);
        free(want);
    }
    /* comments name the fields; the dtype defaults to torch_dtype */
    assert_int_equal(ATTNC(f, "import", HF("gemma3_12b.json"), "--layer", "5"), 0);
    char *text = captured(f->out);
    assert_non_null(strstr(text, "name: gemma3_text_layer5\n"));
    assert_non_null(strstr(text, "# rope_theta\n"));
    assert_non_null(strstr(text, "dtype: bf16"));
    assert_non_null(strstr(text, "# query_pre_attn_scalar (256) ^ -0.5"));
    free(text);
}

static void unexpressible_fields_are_errors(void **state) {
    fixture *f = *state;
    const char *cfg = path_in(f->dir, "config.json");
    static const struct {
        const char *json, *msg;
    } cases[] = {
        {"{\"model_type\": \"mamba\", \"hidden_size\": 8}",
         "model_type 'mamba' is not one attnc imports"},
        {"{\"model_type\": \"phi3\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
         "\"rope_scaling\": {\"type\": \"longrope\", \"factor\": 2}}",
         "rope_scaling.rope_type 'longrope' cannot be expressed"},
        {"{\"model_type\": \"falcon\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
         "\"alibi\": true}",
         "alibi: true (Falcon's ALiBi"},
        {"{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
         "\"num_hidden_layers\": 2}",
         "--layer 3: the model has 2 layers (num_hidden_layers)"},
        {"{\"model_type\": \"gpt_oss\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
         "\"layer_types\": [\"chunked_attention\", \"full_attention\", \"full_attention\", "
         "\"full_attention\"]}",
         "layer_types[3] is 'full_attention'"},
        {"[1, 2]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(cfg, cases[i].json, strlen(cases[i].json));
        int rc = ATTNC(f, "import", cfg, "--layer", "3", "-o", path_in(f->dir, "out.yaml"));
        if (i == 4) { /* layer 3 is full: imports; layer 0 is not one attnc knows */
            assert_int_equal(rc, 0);
            rc = ATTNC(f, "import", cfg, "--layer", "0", "-o", path_in(f->dir, "out.yaml"));
            assert_int_equal(rc, 2);
            assert_stderr_has(f, "layer_types[0] is 'chunked_attention'; attnc knows "
                                 "sliding_attention and full_attention");
            continue;
        }
        assert_int_equal(rc, 2);
        assert_stderr_has(f, cases[i].msg);
    }
    assert_int_equal(ATTNC(f, "import", path_in(f->dir, "none.json")), 2);
    assert_stderr_has(f, "none.json: error: cannot open");
}

/* ---- GGUF ------------------------------------------------------------------ */

static void gguf_metadata_imports_with_llama_cpp_conventions(void **state) {
    fixture *f = *state;
    const char *g = path_in(f->dir, "g3.gguf");
    float *w = random_floats(512 * 256, 1);
    void *h = to_half(w, 512 * 256, false);
    test_gguf_tensor t[] = {
        {"blk.0.attn_q.weight", 1, 2, {512, 256}, h, 512 * 256 * 2},
        {"blk.0.attn_q_norm.weight", 0, 1, {128}, w, 128 * 4},
    };
    test_gguf_kv kv[] = {
        {"general.architecture", ATTN_GGUF_STRING, 0, 0, "gemma3", NULL, 0},
        {"gemma3.block_count", ATTN_GGUF_UINT32, 12, 0, NULL, NULL, 0},
        {"gemma3.embedding_length", ATTN_GGUF_UINT32, 256, 0, NULL, NULL, 0},
        {"gemma3.attention.head_count", ATTN_GGUF_UINT32, 4, 0, NULL, NULL, 0},
        {"gemma3.attention.head_count_kv", ATTN_GGUF_UINT32, 2, 0, NULL, NULL, 0},
        {"gemma3.attention.key_length", ATTN_GGUF_UINT32, 128, 0, NULL, NULL, 0},
        {"gemma3.attention.value_length", ATTN_GGUF_UINT32, 128, 0, NULL, NULL, 0},
        {"gemma3.attention.sliding_window", ATTN_GGUF_UINT32, 512, 0, NULL, NULL, 0},
        {"gemma3.attention.layer_norm_rms_epsilon", ATTN_GGUF_FLOAT32, 0, 1e-6, NULL, NULL, 0},
        {"gemma3.rope.freq_base", ATTN_GGUF_FLOAT32, 0, 1000000, NULL, NULL, 0},
        {"gemma3.context_length", ATTN_GGUF_UINT32, 32768, 0, NULL, NULL, 0},
    };
    write_gguf(g, kv, 11, t, 2, 32);
    const char *out = path_in(f->dir, "g3.yaml");
    assert_int_equal(ATTNC(f, "import", g, "--layer", "0", "-o", out), 0);
    assert_file_has(f->out, "wrote ");
    char *spec = captured(out);
    /* a local layer: window, base 10000; the norm weight already holds 1 + w */
    if (!strstr(spec, "sliding_window: 512") || !strstr(spec, "base: 10000 ") ||
        !strstr(spec, "offset: 0") || !strstr(spec, "dtype: f16") ||
        !strstr(spec, "max_tokens: 8192") || !strstr(spec, "style: half"))
        fail_msg("unexpected import:\n%s", spec);
    free(spec);
    /* layer 5 is global: no window, the file's base */
    assert_int_equal(ATTNC(f, "import", g, "--layer", "5", "-o", out), 0);
    spec = captured(out);
    if (!strstr(spec, "sliding_window: 0") || !strstr(spec, "base: 1000000 "))
        fail_msg("unexpected import:\n%s", spec);
    free(spec);
    assert_int_equal(ATTNC(f, "import", g, "--layer", "12", "-o", out), 2);
    assert_stderr_has(f, "--layer 12: the model has 12 layers (gemma3.block_count)");

    /* llama: interleaved RoPE for llama.cpp's permuted q/k rows */
    test_gguf_kv lk[] = {
        {"general.architecture", ATTN_GGUF_STRING, 0, 0, "llama", NULL, 0},
        {"llama.embedding_length", ATTN_GGUF_UINT32, 256, 0, NULL, NULL, 0},
        {"llama.attention.head_count", ATTN_GGUF_UINT32, 4, 0, NULL, NULL, 0},
        {"llama.attention.head_count_kv", ATTN_GGUF_UINT32, 2, 0, NULL, NULL, 0},
        {"llama.rope.freq_base", ATTN_GGUF_FLOAT32, 0, 500000, NULL, NULL, 0},
    };
    const char *lg = path_in(f->dir, "llama.gguf");
    write_gguf(lg, lk, 5, t, 1, 32);
    assert_int_equal(ATTNC(f, "import", lg, "-o", out), 0);
    spec = captured(out);
    if (!strstr(spec, "style: interleaved") || !strstr(spec, "kv_groups: 2") ||
        !strstr(spec, "head_dim: 64") || !strstr(spec, "base: 500000"))
        fail_msg("unexpected import:\n%s", spec);
    free(spec);
    /* Llama 3.1's scaling baked into divisors, as llama.cpp's converter
     * writes them (factor 8, low 1, high 4, original context 8192) */
    float div[32];
    for (int i = 0; i < 32; i++) {
        float fr = (float)(1.0 / pow(500000.0, (double)(2 * i) / 64.0));
        double wl = 2 * 3.14159265358979323846 / fr, smooth = (8192.0 / wl - 1) / (4 - 1);
        div[i] = wl < 8192.0 / 4 ? 1.0f
                 : wl > 8192.0   ? 8.0f
                                 : (float)(1 / ((1 - smooth) / 8 + smooth));
    }
    test_gguf_tensor rf[] = {{"rope_freqs.weight", 0, 1, {32}, div, 32 * 4}, t[0]};
    write_gguf(lg, lk, 5, rf, 2, 32);
    assert_int_equal(ATTNC(f, "import", lg, "-o", out), 0);
    spec = captured(out);
    if (!strstr(spec, "type: llama3") || !strstr(spec, "factor: 8\n") ||
        !strstr(spec, "high_freq_factor: 4\n") || !strstr(spec, "original_max_position: 8192"))
        fail_msg("unexpected import:\n%s", spec);
    free(spec);
    div[15] *= 1.01f; /* between the bounds, off the formula: refused */
    write_gguf(lg, lk, 5, rf, 2, 32);
    assert_int_equal(ATTNC(f, "import", lg, "-o", out), 2);
    assert_stderr_has(f, "rope_freqs.weight[15] = ");
    assert_stderr_has(f, "is not Llama 3's scaling with factor 8,");
    /* unknown architectures */
    test_gguf_kv mk[] = {{"general.architecture", ATTN_GGUF_STRING, 0, 0, "mamba", NULL, 0}};
    write_gguf(lg, mk, 1, t, 1, 32);
    assert_int_equal(ATTNC(f, "import", lg, "-o", out), 2);
    assert_stderr_has(f, "general.architecture 'mamba' is not one attnc imports from GGUF");
    free(h);
    free(w);
}

/* run --layer: a sharded index and a GGUF file, located by layer */
static void run_finds_a_layer_in_shards_and_gguf(void **state) {
    fixture *f = *state;
    const char *w = path_in(f->dir, "w.safetensors"), *x = path_in(f->dir, "x.safetensors");
    const char *y = path_in(f->dir, "y.safetensors"), *y2 = path_in(f->dir, "y2.safetensors");
    assert_int_equal(
        ATTNC(f, "gen-weights", SPEC("seed"), "--prefix", "model.layers.7.self_attn.", "-o", w), 0);
    assert_int_equal(ATTNC(f, "gen-input", SPEC("seed"), "--tokens", "5", "-o", x), 0);
    assert_int_equal(
        ATTNC(f, "run", SPEC("seed"), "--weights", w, "--layer", "7", "--input", x, "-o", y), 0);
    /* the same file behind an index */
    const char *idx = path_in(f->dir, "model.safetensors.index.json");
    const char *text =
        "{\"weight_map\": {\"model.layers.7.self_attn.q_proj.weight\": \"w.safetensors\", "
        "\"model.layers.7.self_attn.k_proj.weight\": \"w.safetensors\", "
        "\"model.layers.7.self_attn.v_proj.weight\": \"w.safetensors\", "
        "\"model.layers.7.self_attn.o_proj.weight\": \"w.safetensors\"}}";
    write_file(idx, text, strlen(text));
    assert_int_equal(
        ATTNC(f, "run", SPEC("seed"), "--weights", idx, "--layer", "7", "--input", x, "-o", y2), 0);
    size_t n1, n2;
    char *a = read_file(y, &n1), *b = read_file(y2, &n2);
    assert_true(n1 == n2 && memcmp(a, b, n1) == 0);
    free(a);
    free(b);
    /* the wrong layer: the message says where the tensors are */
    assert_int_equal(
        ATTNC(f, "run", SPEC("seed"), "--weights", idx, "--layer", "0", "--input", x, "-o", y2), 2);
    assert_stderr_has(f, "missing tensor 'model.layers.0.self_attn.q_proj.weight'; did you mean "
                         "--prefix model.layers.7.self_attn.?");
    assert_int_equal(ATTNC(f, "run", SPEC("seed"), "--weights", idx, "--layer", "0", "--prefix",
                           "x.", "--input", x, "-o", y2),
                     1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(hf_configs_import_to_the_shipped_specs, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(unexpressible_fields_are_errors, cli_fixture_setup,
                                        cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(gguf_metadata_imports_with_llama_cpp_conventions,
                                        cli_fixture_setup, cli_fixture_teardown),
        cmocka_unit_test_setup_teardown(run_finds_a_layer_in_shards_and_gguf, cli_fixture_setup,
                                        cli_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
