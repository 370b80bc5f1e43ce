/* compile.c: the pipeline, top to bottom, and the public entry points
 * that run it:
 *   spec (spec/) -> graph IR (ir/) -> passes (pass/) -> buffer plan and
 *   units (codegen/) -> objects (emit/), through the kernel cache ->
 *   JIT (attnc_jit_compile_file), an object file, assembly or LLVM IR
 *   (attnc_compile_file), or IR text (attnc_ir_text, attnc_opt_text). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile.h"
#include "emit/emit.h"

attnc_options attnc_options_default(void) {
    return (attnc_options){0};
}

const char *attnc_pass_name(int i) {
    const attnc_pass *p = pass_at(i);
    return p ? p->name : NULL;
}

const char *attnc_pass_summary(int i) {
    const attnc_pass *p = pass_at(i);
    return p ? p->summary : NULL;
}

attnc_status compile_load_spec(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                               attn_config *cfg, spec_locs *locs) {
    attnc_status st = spec_load_file(ctx, spec_path, cfg, locs);
    if (st != ATTNC_OK || !opt || opt->shard_count <= 0)
        return st;
    attn_msg why;
    attn_config whole = *cfg;
    if (attn_config_shard(&whole, opt->shard_index, opt->shard_count, cfg, &why) != ATTN_OK) {
        diag_error(ctx, ATTNC_E_SPEC, (attnc_loc){spec_path, 0, 0}, "--shard %lld/%lld: %s",
                   (long long)opt->shard_index, (long long)opt->shard_count, why.text);
        return ATTNC_E_SPEC;
    }
    return ATTNC_OK;
}

attnc_status compile_graph_of(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                              const attnc_options *opt, const char *after, ir_graph **out,
                              attnc_timings *t) {
    ir_graph *g = NULL;
    double t1 = base_now_ms();
    attnc_status st = ir_build(ctx, cfg, locs, &g);
    double t2 = base_now_ms();
    if (t)
        t->ir_ms = t2 - t1;
    if (st != ATTNC_OK)
        return st;
    pass_options po = {0};
    if (opt) {
        po.disabled = opt->disabled_passes;
        po.n_disabled = opt->n_disabled_passes;
    }
    if (after && strcmp(after, "lower") == 0) {
        st = ir_verify(g);
    } else {
        po.stop_after = after;
        st = pass_run_pipeline(g, &po);
    }
    if (t)
        t->passes_ms = base_now_ms() - t2;
    if (st == ATTNC_OK)
        *out = g;
    return st;
}

attnc_status compile_graph(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                           const char *after, ir_graph **out, attnc_timings *t) {
    attn_config cfg;
    spec_locs locs;
    double t0 = base_now_ms();
    attnc_status st = compile_load_spec(ctx, spec_path, opt, &cfg, &locs);
    if (t)
        t->spec_ms = base_now_ms() - t0;
    return st == ATTNC_OK ? compile_graph_of(ctx, &cfg, &locs, opt, after, out, t) : st;
}

attnc_status attnc_ir_text(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                           const char *after_pass, const char **text) {
    if (!ctx || !spec_path || !text)
        return ATTNC_E_INVALID;
    ir_graph *g;
    attnc_status st = compile_graph(ctx, spec_path, opt, after_pass, &g, NULL);
    if (st != ATTNC_OK)
        return st;
    *text = ir_print(g);
    if (!*text) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory printing the graph");
        return ATTNC_E_NOMEM;
    }
    return ATTNC_OK;
}

attnc_status attnc_opt_text(attnc_ctx *ctx, const char *spec_path, const char *ir_path,
                            const char *const *passes, int n_passes, const char **text) {
    if (!ctx || !ir_path || !text || n_passes < 0 || (n_passes && !passes))
        return ATTNC_E_INVALID;
    attn_config cfg;
    spec_locs locs;
    attnc_status st = spec_path ? spec_load_file(ctx, spec_path, &cfg, &locs) : ATTNC_OK;
    if (st != ATTNC_OK)
        return st;
    for (int i = 0; i < n_passes; i++)
        if (!passes[i] || !pass_find(passes[i])) {
            diag_error(ctx, ATTNC_E_SPEC, (attnc_loc){0}, "unknown pass '%s'",
                       passes[i] ? passes[i] : "(null)");
            return ATTNC_E_SPEC;
        }
    char *src;
    size_t len;
    ir_graph *g;
    if ((st = diag_read_file(ctx, (attnc_loc){ir_path, 0, 0}, ir_path, "IR file", 64u << 20, &src,
                             &len)) != ATTNC_OK)
        return st;
    st = ir_parse(ctx, spec_path ? &cfg : NULL, spec_path ? &locs : NULL, ir_path, src, &g);
    free(src);
    if (st != ATTNC_OK)
        return st;
    for (int i = 0; i < n_passes; i++) {
        bool changed = false;
        if ((st = pass_find(passes[i])->run(ctx, g, &changed)) != ATTNC_OK)
            return st;
        ir_recount_uses(g);
        if ((st = ir_verify(g)) != ATTNC_OK) {
            diag_note(ctx, (attnc_loc){0}, "the graph broke in pass '%s'", passes[i]);
            return st;
        }
    }
    if (!(*text = ir_print(g))) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory printing the graph");
        return ATTNC_E_NOMEM;
    }
    return ATTNC_OK;
}

/* ---- codegen and emission ---------------------------------------------- */

/* From a loaded spec to the units codegen builds, for tm: graph, passes
 * (stage times into *t, may be NULL), tm's vector shape, the buffer plan
 * and the units. The JIT compiles them to objects (emit_unit_objects), an
 * object file and the dumps link them (emit_linked_module). */
static attnc_status plan_units(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                               const attnc_options *opt, LLVMTargetMachineRef tm, attnc_timings *t,
                               cg_result *out) {
    ir_graph *g = NULL;
    attnc_status st = compile_graph_of(ctx, cfg, locs, opt, NULL, &g, t);
    if (st != ATTNC_OK)
        return st;
    cg_target target = emit_target_shape(tm);
    return cg_units_plan(g, &target, out);
}

/* opt->emit_llvm / emit_asm: every unit, optimized as the JIT's are,
 * linked into one module as an object file has them. */
static attnc_status dump_module(attnc_ctx *ctx, const cg_result *res, LLVMTargetMachineRef tm,
                                const attnc_options *opt) {
    LLVMContextRef llctx = LLVMContextCreate();
    LLVMModuleRef mod = NULL;
    attnc_status st = emit_linked_module(ctx, res, tm, llctx, &mod);
    if (st == ATTNC_OK)
        st = emit_dumps(ctx, mod, tm, opt);
    if (mod)
        LLVMDisposeModule(mod);
    LLVMContextDispose(llctx);
    return st;
}

static attnc_status jit_compile(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                                attnc_jit **out) {
    double t0 = base_now_ms();
    attnc_jit *jit = emit_jit_new();
    if (!jit) {
        diag_error(ctx, ATTNC_E_NOMEM, (attnc_loc){0}, "out of memory");
        return ATTNC_E_NOMEM;
    }
    attnc_timings *t = emit_jit_timings(jit);
    attn_config cfg;
    spec_locs locs;
    LLVMTargetMachineRef tm = NULL;
    char *dir = NULL, *key = NULL;
    kc_blob *objs = NULL;
    int n = 0;
    attnc_status st = compile_load_spec(ctx, spec_path, opt, &cfg, &locs);
    t->spec_ms = base_now_ms() - t0;
    if (st == ATTNC_OK)
        st = emit_target_machine(ctx, opt, &tm);
    if (st != ATTNC_OK)
        goto done;
    double tc = base_now_ms();
    bool hit = false;
    if ((dir = kc_dir(opt)) && (key = kc_key(&cfg, opt, tm, "jit")))
        hit = kc_get(ctx, dir, key, &objs, &n);
    t->cache = !key ? ATTNC_CACHE_OFF : hit ? ATTNC_CACHE_HIT : ATTNC_CACHE_MISS;
    t->cache_ms = base_now_ms() - tc;
    if (!hit || (opt && (opt->emit_llvm || opt->emit_asm))) {
        cg_result res;
        if ((st = plan_units(ctx, &cfg, &locs, opt, tm, t, &res)) != ATTNC_OK)
            goto done;
        if (!hit && (st = emit_unit_objects(ctx, &res, opt, &objs, t)) == ATTNC_OK) {
            n = res.n_units;
            tc = base_now_ms();
            if (key)
                kc_put(ctx, dir, key, objs, n);
            t->cache_ms += base_now_ms() - tc;
        }
        if (st == ATTNC_OK && opt && (opt->emit_llvm || opt->emit_asm))
            st = dump_module(ctx, &res, tm, opt);
        if (st != ATTNC_OK)
            goto done;
    }
    double tj = base_now_ms();
    st = emit_jit_link(ctx, tm, cfg.name, objs, n, jit); /* consumes tm */
    tm = NULL;
    if (st != ATTNC_OK)
        goto done;
    t->jit_ms = base_now_ms() - tj;
    t->total_ms = base_now_ms() - t0;
done:
    kc_blobs_free(objs, n);
    free(key);
    free(dir);
    if (tm)
        LLVMDisposeTargetMachine(tm);
    if (st == ATTNC_OK)
        *out = jit;
    else
        attnc_jit_free(jit);
    return st;
}

attnc_status attnc_jit_compile_file(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                                    attnc_jit **out) {
    attnc_ctx *work = attnc_ctx_new();
    if (!work)
        return ATTNC_E_NOMEM;
    attnc_status st = ATTNC_E_INVALID;
    if (spec_path && out)
        st = jit_compile(work, spec_path, opt, out);
    else
        diag_error(work, st, (attnc_loc){0}, "attnc_jit_compile_file: NULL spec path or out");
    return diag_call_end(ctx, work, st);
}

/* The output file's bytes for cfg: from the kernel cache, or compiled
 * (every unit in one module) and then stored. */
static attnc_status aot_bytes(attnc_ctx *ctx, const attn_config *cfg, const spec_locs *locs,
                              const attnc_options *opt, LLVMTargetMachineRef tm,
                              attnc_emit_kind kind, kc_blob **out) {
    static const char *const what[ATTNC_EMIT_COUNT] = {"obj", "asm", "llvm"};
    char *dir = kc_dir(opt), *key = dir ? kc_key(cfg, opt, tm, what[kind]) : NULL;
    int n = 0;
    attnc_status st = ATTNC_OK;
    if (!key || !kc_get(ctx, dir, key, out, &n) || n != 1) {
        if (n != 0) /* a whole entry of another shape: compile anew */
            kc_blobs_free(*out, n);
        LLVMContextRef llctx = LLVMContextCreate();
        LLVMModuleRef mod = NULL;
        cg_result res;
        st = plan_units(ctx, cfg, locs, opt, tm, NULL, &res);
        if (st == ATTNC_OK)
            st = emit_linked_module(ctx, &res, tm, llctx, &mod);
        if (st == ATTNC_OK)
            st = emit_module_bytes(ctx, mod, tm, kind, out);
        if (mod)
            LLVMDisposeModule(mod);
        LLVMContextDispose(llctx);
        if (st == ATTNC_OK && key)
            kc_put(ctx, dir, key, *out, 1);
    }
    free(key);
    free(dir);
    return st;
}

static attnc_status compile_aot(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                                attnc_emit_kind kind, const char *out_path,
                                const char *header_path) {
    if ((unsigned)kind >= ATTNC_EMIT_COUNT || !out_path) {
        diag_error(ctx, ATTNC_E_INVALID, (attnc_loc){0}, "no output path or unknown output kind");
        return ATTNC_E_INVALID;
    }
    attn_config cfg;
    spec_locs locs;
    LLVMTargetMachineRef tm = NULL;
    kc_blob *bytes = NULL;
    char *tmp_out = NULL, *tmp_h = NULL;
    attnc_status st = compile_load_spec(ctx, spec_path, opt, &cfg, &locs);
    if (st == ATTNC_OK)
        st = emit_target_machine(ctx, opt, &tm);
    if (st == ATTNC_OK)
        st = emit_check_layout(ctx, tm);
    if (st == ATTNC_OK)
        st = aot_bytes(ctx, &cfg, &locs, opt, tm, kind, &bytes);
    if (st == ATTNC_OK && !(tmp_out = emit_temp_beside(ctx, out_path)))
        st = diag_first_code(ctx);
    if (st == ATTNC_OK && header_path && !(tmp_h = emit_temp_beside(ctx, header_path)))
        st = diag_first_code(ctx);
    if (st == ATTNC_OK)
        st = emit_write_bytes(ctx, bytes, tmp_out);
    if (st == ATTNC_OK && tmp_h)
        st = emit_write_header(ctx, &cfg, spec_path, opt, tmp_h);
    if (st == ATTNC_OK && rename(tmp_out, out_path) != 0) {
        diag_error(ctx, ATTNC_E_IO, (attnc_loc){out_path, 0, 0}, "cannot write: %s",
                   strerror(errno));
        st = ATTNC_E_IO;
    }
    if (st == ATTNC_OK && tmp_h && rename(tmp_h, header_path) != 0) {
        diag_error(ctx, ATTNC_E_IO, (attnc_loc){header_path, 0, 0}, "cannot write: %s",
                   strerror(errno));
        unlink(out_path);
        st = ATTNC_E_IO;
    }
    if (st != ATTNC_OK) {
        if (tmp_out)
            unlink(tmp_out);
        if (tmp_h)
            unlink(tmp_h);
    }
    kc_blobs_free(bytes, bytes ? 1 : 0);
    free(tmp_out);
    free(tmp_h);
    if (tm)
        LLVMDisposeTargetMachine(tm);
    return st;
}

attnc_status attnc_compile_file(attnc_ctx *ctx, const char *spec_path, const attnc_options *opt,
                                attnc_emit_kind kind, const char *out_path,
                                const char *header_path) {
    attnc_ctx *work = attnc_ctx_new();
    if (!work)
        return ATTNC_E_NOMEM;
    attnc_status st = ATTNC_E_INVALID;
    if (spec_path)
        st = compile_aot(work, spec_path, opt, kind, out_path, header_path);
    else
        diag_error(work, st, (attnc_loc){0}, "attnc_compile_file: NULL spec path");
    return diag_call_end(ctx, work, st);
}
