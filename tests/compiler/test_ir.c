/* test_ir.c: the graph IR. Golden text for every shipped spec after
 * lowering, after each pass and after the whole pipeline (regenerate with
 * ATTNC_UPDATE_GOLDEN=1 and review the diff); the verifier rejects broken
 * graphs; every pass keeps the graph valid when others are disabled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "attnc.h"
#include "ir/ir.h"
#include "pass/pass.h"
#include "support.h"

#define GOLDEN ATTNC_SOURCE_DIR "/tests/golden"

/* Compares text with GOLDEN/dir/name.ir, or writes it when updating. */
static int check_golden(const char *dir, const char *name, const char *text) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", GOLDEN, dir);
    const char *update = getenv("ATTNC_UPDATE_GOLDEN");
    if (update && *update && strcmp(update, "0") != 0) {
        mkdir(path, 0755);
        snprintf(path, sizeof path, "%s/%s/%s.ir", GOLDEN, dir, name);
        write_file(path, text, strlen(text));
        return 0;
    }
    snprintf(path, sizeof path, "%s/%s/%s.ir", GOLDEN, dir, name);
    char *want = read_file(path, NULL);
    if (!want) {
        print_error("%s: missing (run with ATTNC_UPDATE_GOLDEN=1)\n", path);
        return 1;
    }
    int bad = strcmp(want, text) != 0;
    if (bad)
        print_error("%s differs; got:\n%s\n", path, text);
    free(want);
    return bad;
}

static const char *ir_of(attnc_ctx *ctx, const char *spec, const char *after,
                         const char *const *disabled, int n_disabled) {
    char path[512];
    snprintf(path, sizeof path, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, spec);
    attnc_options o = attnc_options_default();
    o.disabled_passes = disabled;
    o.n_disabled_passes = n_disabled;
    const char *text = NULL;
    attnc_status st = attnc_ir_text(ctx, path, &o, after, &text);
    print_diags(ctx);
    assert_int_equal(st, ATTNC_OK);
    return text;
}

static void ir_matches_golden_after_lowering_and_pipeline(void **state) {
    (void)state;
    int bad = 0;
    for (size_t i = 0; i < n_shipped_specs; i++) {
        attnc_ctx *ctx = attnc_ctx_new();
        bad +=
            check_golden("lower", shipped_specs[i], ir_of(ctx, shipped_specs[i], "lower", NULL, 0));
        bad +=
            check_golden("pipeline", shipped_specs[i], ir_of(ctx, shipped_specs[i], NULL, NULL, 0));
        attnc_ctx_free(ctx);
    }
    assert_int_equal(bad, 0);
}

static void ir_matches_golden_after_each_pass(void **state) {
    (void)state;
    int bad = 0;
    const char *specs[] = {"llama3_8b", "qwen2_7b", "gemma2_9b", "deepseek_v2_lite"};
    for (int p = 0; attnc_pass_name(p); p++) {
        for (int s = 0; s < 4; s++) {
            attnc_ctx *ctx = attnc_ctx_new();
            bad += check_golden(attnc_pass_name(p), specs[s],
                                ir_of(ctx, specs[s], attnc_pass_name(p), NULL, 0));
            attnc_ctx_free(ctx);
        }
    }
    assert_int_equal(bad, 0);
}

/* ---- attnc opt: printed IR read back, passes run on it alone ----------- */

static const char *spec_file(const char *spec) {
    static char path[512];
    snprintf(path, sizeof path, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, spec);
    return path;
}

/* attnc_opt_text of the file at ir with passes (spec NULL: none);
 * NULL with the diagnostics printed (first one into *first, if asked) on
 * failure. */
static const char *opt_of(attnc_ctx *ctx, const char *spec, const char *ir,
                          const char *const *passes, int n, char *first, size_t size) {
    const char *text = NULL;
    attnc_status st = attnc_opt_text(ctx, spec ? spec_file(spec) : NULL, ir, passes, n, &text);
    if (first && size)
        first[0] = 0;
    for (size_t i = 0; i < attnc_diag_count(ctx); i++) {
        char buf[1024];
        attnc_diag_format(attnc_diag_get(ctx, i), buf, sizeof buf);
        if (first && i == 0)
            snprintf(first, size, "%s", buf);
        if (!first)
            print_error("%s\n", buf);
    }
    return st == ATTNC_OK ? text : NULL;
}

/* Every shipped spec's graph, lowered and after the pipeline, printed,
 * read back (with its spec, and alone: the text's config lines) and
 * printed again: the same text. */
static void opt_reads_back_what_ir_prints(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    for (size_t i = 0; i < n_shipped_specs; i++)
        for (int stage = 0; stage < 4; stage++) {
            attnc_ctx *ctx = attnc_ctx_new();
            const char *text = ir_of(ctx, shipped_specs[i], stage % 2 ? NULL : "lower", NULL, 0);
            const char *path = path_in(dir, "g.ir");
            write_file(path, text, strlen(text));
            const char *back =
                opt_of(ctx, stage < 2 ? shipped_specs[i] : NULL, path, NULL, 0, NULL, 0);
            if (!back || strcmp(back, text) != 0)
                fail_msg("%s (%s, %s): read back differs:\n%s", shipped_specs[i],
                         stage % 2 ? "pipeline" : "lower", stage < 2 ? "with its spec" : "alone",
                         back ? back : "(failed)");
            attnc_ctx_free(ctx);
        }
    tmpdir_remove(dir);
}

/* Each pass alone on the golden graph before it gives the golden graph
 * after it (tests/golden/<pass>/, lower first): .ir -> .ir per pass. */
static void opt_runs_each_pass_alone(void **state) {
    (void)state;
    const char *specs[] = {"llama3_8b", "qwen2_7b", "gemma2_9b", "deepseek_v2_lite"};
    int bad = 0;
    for (int s = 0; s < 4; s++) {
        const char *before = "lower";
        for (int p = 0; attnc_pass_name(p); p++) {
            const char *pass = attnc_pass_name(p);
            char in[1024];
            snprintf(in, sizeof in, "%s/%s/%s.ir", GOLDEN, before, specs[s]);
            attnc_ctx *ctx = attnc_ctx_new();
            const char *out = opt_of(ctx, specs[s], in, &pass, 1, NULL, 0);
            if (!out)
                fail_msg("%s: opt --pass %s on %s failed", specs[s], pass, in);
            bad += check_golden(pass, specs[s], out);
            attnc_ctx_free(ctx);
            before = pass;
        }
    }
    assert_int_equal(bad, 0);
}

/* tests/passes/NAME.ir: a graph written or edited by hand, its spec and
 * passes in leading "; spec:" and "; passes:" lines; NAME.out what opt
 * prints (written when ATTNC_UPDATE_GOLDEN is set). */
static void opt_hand_written_graphs(void **state) {
    (void)state;
    const char *cases[] = {"dce_dead_views", "mla_forms_flash"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char in[1024], want_path[1024], spec[64] = "", passes_line[256] = "";
        snprintf(in, sizeof in, "%s/tests/passes/%s.ir", ATTNC_SOURCE_DIR, cases[i]);
        snprintf(want_path, sizeof want_path, "%s/tests/passes/%s.out", ATTNC_SOURCE_DIR, cases[i]);
        char *src = read_file(in, NULL);
        assert_non_null(src);
        const char *sp = strstr(src, "; spec: "), *pp = strstr(src, "; passes: ");
        assert_true(sp && pp);
        sscanf(sp + 8, "%63s", spec);
        snprintf(passes_line, sizeof passes_line, "%.*s", (int)strcspn(pp + 10, "\n"), pp + 10);
        const char *passes[8];
        int n = 0;
        for (char *t = strtok(passes_line, " "); t && n < 8; t = strtok(NULL, " "))
            passes[n++] = t;
        attnc_ctx *ctx = attnc_ctx_new();
        const char *out = opt_of(ctx, spec, in, passes, n, NULL, 0);
        assert_non_null(out);
        const char *update = getenv("ATTNC_UPDATE_GOLDEN");
        if (update && *update && strcmp(update, "0") != 0) {
            write_file(want_path, out, strlen(out));
        } else {
            char *want = read_file(want_path, NULL);
            assert_non_null(want);
            if (strcmp(want, out) != 0)
                fail_msg("%s differs; got:\n%s", want_path, out);
            free(want);
        }
        attnc_ctx_free(ctx);
        free(src);
    }
}

/* The config lines make the text the contract: opt needs no spec, an
 * edit of a node's attribute that the config sets is refused (not
 * ignored), an edit of the config line with the node's agreeing is
 * taken, and a config that is incomplete, unknown or not the spec's is
 * refused at its line. */
static void opt_takes_the_config_lines(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attnc_ctx *ctx = attnc_ctx_new();
    char *base = strdup(ir_of(ctx, "mistral_7b", "lower", NULL, 0));
    attnc_ctx_free(ctx);
    assert_non_null(strstr(base, "sliding_window=4096"));
    assert_non_null(strstr(base, "causal window=4096"));
    struct {
        const char *edits[2][2]; /* up to two (from, to) */
        const char *spec, *want; /* want NULL: accepted, the output has the edit */
    } cases[] = {
        {{{"causal window=4096", "causal window=100"}, {0}},
         NULL,
         "the node and the config lines give the attributes 'causal window=4096', not "
         "'causal window=100'"},
        {{{"causal window=4096", "causal window=100"},
          {"sliding_window=4096", "sliding_window=100"}},
         NULL,
         NULL},
        {{{"sliding_window=4096", "sliding_windw=4096"}, {0}},
         NULL,
         "unknown config field 'sliding_windw'; did you mean 'sliding_window'?"},
        {{{" sliding_window=4096", ""}, {0}}, NULL, "the config lines lack sliding_window"},
        {{{"heads=32", "heads=33"}, {0}},
         NULL,
         "the config lines: heads (33) must be a multiple of kv_groups (8)"},
        {{{"causal=true", "causal=yes"}, {0}}, NULL, "config causal: 'yes' is not a value of it"},
        {{{"causal window=4096", "causal window=100"},
          {"sliding_window=4096", "sliding_window=100"}},
         "mistral_7b",
         "the config lines and the spec differ in sliding_window"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *text = strdup(base);
        for (int e = 0; e < 2 && cases[i].edits[e][0]; e++) {
            const char *from = cases[i].edits[e][0], *to = cases[i].edits[e][1];
            const char *at = strstr(text, from);
            assert_non_null(at);
            char *next = malloc(strlen(text) + strlen(to) + 1);
            sprintf(next, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
            free(text);
            text = next;
        }
        const char *path = path_in(dir, "g.ir");
        write_file(path, text, strlen(text));
        ctx = attnc_ctx_new();
        char first[1024];
        const char *out = opt_of(ctx, cases[i].spec, path, NULL, 0, first, sizeof first);
        if (!cases[i].want && (!out || !strstr(out, "causal window=100")))
            fail_msg("case %zu: refused: %s", i, first);
        if (cases[i].want && (out || !strstr(first, cases[i].want)))
            fail_msg("case %zu: '%s' lacks '%s'", i, out ? "(accepted)" : first, cases[i].want);
        if (cases[i].want && !strstr(first, "g.ir:"))
            fail_msg("case %zu: '%s' is not located", i, first);
        attnc_ctx_free(ctx);
        free(text);
    }
    /* without config lines, a spec is needed */
    const char *graph = strstr(base, "graph ");
    write_file(path_in(dir, "g.ir"), graph, strlen(graph));
    ctx = attnc_ctx_new();
    char first[1024];
    assert_null(opt_of(ctx, NULL, path_in(dir, "g.ir"), NULL, 0, first, sizeof first));
    assert_non_null(strstr(first, "no config lines"));
    attnc_ctx_free(ctx);
    free(base);
    tmpdir_remove(dir);
}

/* Broken IR files: each refused at its line and column, with the reason. */
static void opt_refuses_broken_ir(void **state) {
    (void)state;
    char *dir = tmpdir_new();
    attnc_ctx *ctx = attnc_ctx_new();
    const char *lowered = ir_of(ctx, "seed", "lower", NULL, 0);
    while (strncmp(lowered, "config ", 7) == 0) /* the spec's config, as older files */
        lowered = strchr(lowered, '\n') + 1;
    char *base = strdup(lowered);
    attnc_ctx_free(ctx);
    struct {
        const char *from, *to, *want;
    } cases[] = {
        {"%2 = linear", "%2 = lineaar", "g.ir:4:8: error: unknown op 'lineaar'"},
        {"%16 = qk %10, %14", "%16 = qk %10, %99", "g.ir:18:17: error: operand %99 is not defined"},
        {"%17 = scale %16 0.125 : f32[T, S, 12]", "%17 = scale %16 0.125 : f32[T, S, 13]",
         "g.ir:19:3: error: %17: the printed shape is not what its operands give"},
        {"%19 = softmax %18 :", "%19 = softmax %18 causal :",
         "g.ir:21:21: error: 'causal' is not an attribute of softmax"},
        {"graph seed", "graph other", "g.ir:1:7: error: the graph is 'other'; the spec is 'seed'"},
        {"%17 = scale %16 0.125", "%17 = scale %16 -0.125", "an attribute is out of range"},
        {"%13 = cache_append", "%12 = cache_append", "%12 is defined twice"},
        {"f32[768, S]  ; 4:1\n  %1", "f32[768, S*]  ; 4:1\n  %1", "expected a dim"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *at = strstr(base, cases[i].from);
        assert_non_null(at);
        size_t pre = (size_t)(at - base), fl = strlen(cases[i].from);
        char *text = malloc(strlen(base) + strlen(cases[i].to) + 1);
        sprintf(text, "%.*s%s%s", (int)pre, base, cases[i].to, at + fl);
        const char *path = path_in(dir, "g.ir");
        write_file(path, text, strlen(text));
        free(text);
        ctx = attnc_ctx_new();
        char first[1024];
        assert_null(opt_of(ctx, "seed", path, NULL, 0, first, sizeof first));
        if (!strstr(first, cases[i].want))
            fail_msg("case %zu: '%s' lacks '%s'", i, first, cases[i].want);
        attnc_ctx_free(ctx);
    }
    /* an unknown pass, a missing file */
    write_file(path_in(dir, "g.ir"), base, strlen(base));
    ctx = attnc_ctx_new();
    const char *bogus = "fuse_qvk";
    char first[1024];
    assert_null(opt_of(ctx, "seed", path_in(dir, "g.ir"), &bogus, 1, first, sizeof first));
    assert_non_null(strstr(first, "unknown pass 'fuse_qvk'"));
    attnc_ctx_free(ctx);
    ctx = attnc_ctx_new();
    assert_null(opt_of(ctx, "seed", path_in(dir, "none.ir"), NULL, 0, first, sizeof first));
    assert_non_null(strstr(first, "cannot open"));
    attnc_ctx_free(ctx);
    free(base);
    tmpdir_remove(dir);
}

static void ir_stays_valid_with_any_pass_disabled(void **state) {
    (void)state;
    for (size_t i = 0; i < n_shipped_specs; i++) {
        for (int p = 0; attnc_pass_name(p); p++) {
            attnc_ctx *ctx = attnc_ctx_new();
            const char *off[] = {attnc_pass_name(p)};
            const char *text = ir_of(ctx, shipped_specs[i], NULL, off, 1);
            assert_non_null(strstr(text, "output"));
            attnc_ctx_free(ctx);
        }
        attnc_ctx *ctx = attnc_ctx_new();
        const char *all[16];
        int n = 0;
        for (; attnc_pass_name(n); n++)
            all[n] = attnc_pass_name(n);
        const char *lowered = ir_of(ctx, shipped_specs[i], "lower", NULL, 0);
        assert_string_equal(ir_of(ctx, shipped_specs[i], NULL, all, n), lowered);
        attnc_ctx_free(ctx);
    }
}

static void ir_rejects_unknown_pass_names(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    attnc_options o = attnc_options_default();
    const char *off[] = {"fuse_everything"};
    o.disabled_passes = off;
    o.n_disabled_passes = 1;
    const char *text;
    assert_int_not_equal(attnc_ir_text(ctx, ATTNC_SOURCE_DIR "/specs/seed.yaml", &o, NULL, &text),
                         ATTNC_OK);
    assert_non_null(strstr(attnc_diag_get(ctx, 0)->msg, "unknown pass 'fuse_everything'"));
    attnc_ctx_free(ctx);
}

/* ---- the verifier -------------------------------------------------------- */

static ir_graph *lowered(attnc_ctx *ctx, const char *spec) {
    char path[512];
    snprintf(path, sizeof path, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, spec);
    attn_config cfg;
    spec_locs locs;
    assert_int_equal(spec_load_file(ctx, path, &cfg, &locs), ATTNC_OK);
    ir_graph *g;
    assert_int_equal(ir_build(ctx, &cfg, &locs, &g), ATTNC_OK);
    assert_int_equal(ir_verify(g), ATTNC_OK);
    return g;
}

static ir_node *find_op(ir_graph *g, ir_op op) {
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == op)
            return g->nodes[i];
    return NULL;
}

static void assert_verify_fails(attnc_ctx *ctx, ir_graph *g, const char *want) {
    assert_int_equal(ir_verify(g), ATTNC_E_SHAPE);
    bool found = false;
    for (size_t i = 0; i < attnc_diag_count(ctx); i++)
        found |= strstr(attnc_diag_get(ctx, i)->msg, want) != NULL;
    if (!found)
        fail_msg("no diagnostic contains '%s'", want);
}

static void verifier_rejects_wrong_shape(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    ir_graph *g = lowered(ctx, "seed");
    find_op(g, IR_OP_ROPE)->ne[1] = ir_const(5);
    assert_verify_fails(ctx, g, "shape or dtype differs");
    attnc_ctx_free(ctx);
}

static void verifier_rejects_dangling_use(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    ir_graph *g = lowered(ctx, "seed");
    find_op(g, IR_OP_SOFTMAX)->dead = true; /* pv still reads it */
    assert_verify_fails(ctx, g, "operand is dangling");
    attnc_ctx_free(ctx);
}

static void verifier_rejects_use_before_definition(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    ir_graph *g = lowered(ctx, "seed");
    ir_node *tmp = g->nodes[0]; /* move the input after its users */
    memmove(g->nodes, g->nodes + 1, (size_t)(g->n_nodes - 1) * sizeof *g->nodes);
    g->nodes[g->n_nodes - 1] = tmp;
    assert_verify_fails(ctx, g, "not defined before its use");
    attnc_ctx_free(ctx);
}

/* ir_ops.def's attribute column: an attribute an op does not have must
 * stay 0, and the ones it has must be in range. */
static void verifier_checks_attributes(void **state) {
    (void)state;
    struct {
        ir_op op;
        const char *want;
    } cases[] = {
        {IR_OP_QK, "scale is set, an attribute qk does not have"},
        {IR_OP_SOFTMAX,
         "causal/alibi/score_mod/mask_mod is set, an attribute softmax does not have"},
        {IR_OP_LINEAR, "cache is set, an attribute linear does not have"},
        {IR_OP_SCALE, "an attribute is out of range"},
        {IR_OP_WEIGHT, "an attribute is out of range"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        attnc_ctx *ctx = attnc_ctx_new();
        ir_graph *g = lowered(ctx, "gemma2_9b"); /* scale, softcap, mask */
        ir_node *n = find_op(g, cases[i].op);
        assert_non_null(n);
        switch (i) {
        case 0: n->scale = 2; break;
        case 1: n->causal = true; break;
        case 2: n->cache = 1; break;
        case 3: n->scale = -1; break;
        case 4: n->weight = ATTN_WEIGHT_COUNT; break;
        }
        assert_verify_fails(ctx, g, cases[i].want);
        attnc_ctx_free(ctx);
    }
    /* every shipped spec's graph keeps to them after every pass */
    for (size_t s = 0; s < n_shipped_specs; s++) {
        attnc_ctx *ctx = attnc_ctx_new();
        char path[512];
        snprintf(path, sizeof path, "%s/specs/%s.yaml", ATTNC_SOURCE_DIR, shipped_specs[s]);
        const char *text;
        if (attnc_ir_text(ctx, path, NULL, NULL, &text) != ATTNC_OK)
            fail_msg("%s: the pipeline's verifier failed", shipped_specs[s]);
        attnc_ctx_free(ctx);
    }
}

/* Gates (mla_absorb's two forms): a gated value is read only by nodes of
 * its gate or by the by_prefill that takes it; what runs in every call
 * has none. */
static void verifier_checks_gates(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++) {
        attnc_ctx *ctx = attnc_ctx_new();
        ir_graph *g = lowered(ctx, "deepseek_v2_lite");
        switch (i) {
        case 0: find_op(g, IR_OP_MLA_KEYS)->gate = 64; break; /* the attention reads it always */
        case 1: find_op(g, IR_OP_CACHE_APPEND)->gate = -64; break;
        case 2: /* the attention of the other calls */
            find_op(g, IR_OP_MLA_KEYS)->gate = -64;
            for (int k = 0; k < g->n_nodes; k++)
                if (g->nodes[k]->op == IR_OP_QK)
                    g->nodes[k]->gate = 64;
            break;
        }
        assert_verify_fails(ctx, g, i == 1 ? "cache_append has no gate" : "may not have");
        attnc_ctx_free(ctx);
    }
}

static void verifier_rejects_stale_use_counts_and_bad_operands(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    ir_graph *g = lowered(ctx, "seed");
    find_op(g, IR_OP_INPUT)->n_uses = 1;
    assert_verify_fails(ctx, g, "use count is stale");
    attnc_ctx_free(ctx);

    ctx = attnc_ctx_new();
    g = lowered(ctx, "seed");
    ir_node *qk = find_op(g, IR_OP_QK);
    qk->args[0] = find_op(g, IR_OP_INPUT); /* a 2-D operand where 3-D is due */
    ir_recount_uses(g);
    assert_verify_fails(ctx, g, "bad operands");
    attnc_ctx_free(ctx);

    ctx = attnc_ctx_new();
    g = lowered(ctx, "seed");
    find_op(g, IR_OP_OUTPUT)->dead = true;
    assert_verify_fails(ctx, g, "0 outputs");
    attnc_ctx_free(ctx);
}

static void builder_rejects_inconsistent_operands(void **state) {
    (void)state;
    attnc_ctx *ctx = attnc_ctx_new();
    ir_graph *g = lowered(ctx, "seed");
    ir_node *args[2] = {find_op(g, IR_OP_INPUT), find_op(g, IR_OP_ROPE)};
    assert_null(ir_add(g, IR_OP_LINEAR, args, 2, (attnc_loc){"x.yaml", 3, 4}));
    const attnc_diag *d = attnc_diag_get(ctx, attnc_diag_count(ctx) - 1);
    assert_int_equal(d->code, ATTNC_E_SHAPE);
    assert_int_equal(d->loc.line, 3);
    attnc_ctx_free(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ir_matches_golden_after_lowering_and_pipeline),
        cmocka_unit_test(ir_matches_golden_after_each_pass),
        cmocka_unit_test(ir_stays_valid_with_any_pass_disabled),
        cmocka_unit_test(ir_rejects_unknown_pass_names),
        cmocka_unit_test(verifier_rejects_wrong_shape),
        cmocka_unit_test(verifier_rejects_dangling_use),
        cmocka_unit_test(verifier_rejects_use_before_definition),
        cmocka_unit_test(verifier_rejects_stale_use_counts_and_bad_operands),
        cmocka_unit_test(verifier_checks_gates),
        cmocka_unit_test(verifier_checks_attributes),
        cmocka_unit_test(opt_reads_back_what_ir_prints),
        cmocka_unit_test(opt_takes_the_config_lines),
        cmocka_unit_test(opt_runs_each_pass_alone),
        cmocka_unit_test(opt_hand_written_graphs),
        cmocka_unit_test(opt_refuses_broken_ir),
        cmocka_unit_test(builder_rejects_inconsistent_operands),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
