/* emit_units.c: the units of a planned graph (cg_module.c) compiled to
 * objects in memory on several threads at once. Each unit gets its own
 * LLVM context and module on the thread that takes it; each thread owns
 * a target machine. Units are taken biggest first from a shared counter,
 * and what a unit compiles to does not depend on the thread that takes
 * it, so the objects are the same on any number of threads. */
#include <llvm-c/Core.h>
#include <llvm-c/Linker.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "emit/emit.h"

enum { MAX_THREADS = 64 };

typedef struct unit_out {
    char *why; /* LLVM's message when the unit failed (malloc'd) */
    double build_ms, optimize_ms, codegen_ms;
} unit_out;

typedef struct units_job {
    const cg_result *r;
    const int *order; /* unit indices, biggest first */
    atomic_int next;
    kc_blob *objs;
    unit_out *out;
} units_job;

typedef struct worker {
    units_job *job;
    LLVMTargetMachineRef tm; /* owned */
} worker;

static char *dup_msg(const char *what, const char *msg) {
    size_t n = strlen(what) + strlen(msg ? msg : "?") + 3;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s: %s", what, msg ? msg : "?");
    return s;
}

/* Unit i: build, optimize, emit an object into job->objs[i]. */
static void compile_unit(units_job *job, LLVMTargetMachineRef tm, int i) {
    unit_out *o = &job->out[i];
    LLVMContextRef llctx = LLVMContextCreate();
    double t0 = base_now_ms();
    char *why = NULL;
    LLVMModuleRef mod = cg_units_build(job->r, &i, 1, llctx, &why);
    double t1 = base_now_ms();
    o->build_ms = t1 - t0;
    if (!mod) {
        o->why = dup_msg("generated module is invalid", why);
        LLVMDisposeMessage(why);
        LLVMContextDispose(llctx);
        return;
    }
    if ((why = emit_passes(mod, tm, job->r->units[i].vector_ir))) {
        o->why = dup_msg("optimizing", why);
        free(why);
    }
    double t2 = base_now_ms();
    o->optimize_ms = t2 - t1;
    LLVMMemoryBufferRef buf = NULL;
    if (!o->why && LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &why, &buf)) {
        o->why = dup_msg("generating code", why);
        LLVMDisposeMessage(why);
    } else if (!o->why) {
        size_t n = LLVMGetBufferSize(buf);
        kc_blob *b = &job->objs[i];
        if ((b->data = malloc(n ? n : 1))) {
            memcpy(b->data, LLVMGetBufferStart(buf), n);
            b->size = n;
        } else {
            o->why = dup_msg("generating code", "out of memory");
        }
        LLVMDisposeMemoryBuffer(buf);
    }
    o->codegen_ms = base_now_ms() - t2;
    LLVMDisposeModule(mod);
    LLVMContextDispose(llctx);
}

static void *work(void *arg) {
    worker *w = arg;
    units_job *job = w->job;
    for (int k; (k = atomic_fetch_add(&job->next, 1)) < job->r->n_units;)
        compile_unit(job, w->tm, job->order[k]);
    return NULL;
}

attnc_status emit_linked_module(attnc_ctx *ctx, const cg_result *r, LLVMTargetMachineRef tm,
                                LLVMContextRef llctx, LLVMModuleRef *out) {
    LLVMModuleRef all = NULL;
    attnc_status st = ATTNC_OK;
    for (int i = 0; st == ATTNC_OK && i < r->n_units; i++) {
        char *why = NULL;
        LLVMModuleRef mod = cg_units_build(r, &i, 1, llctx, &why);
        if (!mod) {
            diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "%s: generated module is invalid: %s",
                       r->units[i].name, why ? why : "?");
            LLVMDisposeMessage(why);
            st = ATTNC_E_LLVM;
        } else if ((why = emit_passes(mod, tm, r->units[i].vector_ir))) {
            diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "%s: optimizing: %s", r->units[i].name,
                       why);
            free(why);
            LLVMDisposeModule(mod);
            st = ATTNC_E_LLVM;
        } else if (!all) {
            all = mod;
        } else if (LLVMLinkModules2(all, mod)) { /* consumes mod */
            diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "%s: linking the units failed",
                       r->units[i].name);
            st = ATTNC_E_LLVM;
        }
    }
    if (st != ATTNC_OK) {
        if (all)
            LLVMDisposeModule(all);
        return st;
    }
    *out = all;
    return ATTNC_OK;
}

/* LLVM makes some statics on first use (the lock of its pass timers, in
 * every pass pipeline): a first compile on one thread, before any two run
 * at once, has them made before those start, in a way a thread checker
 * (which cannot see LLVM's own synchronization) can see too. */
static pthread_once_t warm_once = PTHREAD_ONCE_INIT;

static void warm_up(void) {
    char *triple = LLVMGetDefaultTargetTriple(), *why = NULL;
    LLVMTargetRef target;
    if (!LLVMGetTargetFromTriple(triple, &target, &why)) {
        LLVMTargetMachineRef tm = LLVMCreateTargetMachine(
            target, triple, "", "", LLVMCodeGenLevelAggressive, LLVMRelocPIC, LLVMCodeModelSmall);
        LLVMContextRef llctx = LLVMContextCreate();
        cg_probe_work work;
        cg_target t = cg_target_for(4, 16);
        LLVMModuleRef mod = cg_probe_build(llctx, &t, &work);
        LLVMMemoryBufferRef buf = NULL;
        char *err = emit_passes(mod, tm, false);
        if (!err && !LLVMTargetMachineEmitToMemoryBuffer(tm, mod, LLVMObjectFile, &why, &buf))
            LLVMDisposeMemoryBuffer(buf);
        free(err);
        LLVMDisposeModule(mod);
        LLVMContextDispose(llctx);
        LLVMDisposeTargetMachine(tm);
    }
    LLVMDisposeMessage(why);
    LLVMDisposeMessage(triple);
}

int emit_threads(const attnc_options *opt, int n_units) {
    long n = opt && opt->threads > 0 ? opt->threads : sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    if (n > n_units)
        n = n_units;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

attnc_status emit_unit_objects(attnc_ctx *ctx, const cg_result *r, const attnc_options *opt,
                               kc_blob **objs_out, attnc_timings *t) {
    int n = r->n_units, nt = emit_threads(opt, n);
    int *order = malloc((size_t)n * sizeof *order);
    kc_blob *objs = calloc((size_t)n, sizeof *objs);
    unit_out *out = calloc((size_t)n, sizeof *out);
    worker w[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    int made = 0, started = 0;
    attnc_status st = order && objs && out ? ATTNC_OK : ATTNC_E_NOMEM;
    if (st != ATTNC_OK)
        diag_error(ctx, st, (attnc_loc){0}, "out of memory");
    /* biggest first, ties in unit order (insertion sort: a few dozen units) */
    for (int i = 0; st == ATTNC_OK && i < n; i++) {
        int j = i;
        for (; j > 0 && r->units[order[j - 1]].cost < r->units[i].cost; j--)
            order[j] = order[j - 1];
        order[j] = i;
    }
    units_job job = {.r = r, .order = order, .objs = objs, .out = out};
    atomic_init(&job.next, 0);
    for (int i = 0; st == ATTNC_OK && i < nt; i++) {
        w[i].job = &job;
        if ((st = emit_target_machine(ctx, opt, &w[i].tm)) == ATTNC_OK)
            made++;
    }
    pthread_once(&warm_once, warm_up); /* after emit_target_machine initialized LLVM */
    double t0 = base_now_ms();
    /* this thread is worker 0; the others run beside it */
    for (int i = 1; st == ATTNC_OK && i < made; i++, started++)
        if (pthread_create(&th[i], NULL, work, &w[i]) != 0)
            break;
    if (st == ATTNC_OK)
        work(&w[0]);
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < made; i++)
        LLVMDisposeTargetMachine(w[i].tm);
    if (t) {
        t->objects_ms = base_now_ms() - t0;
        t->threads = started + 1;
    }
    for (int i = 0; st == ATTNC_OK && i < n; i++) {
        if (t) {
            t->llvm_ms += out[i].build_ms;
            t->optimize_ms += out[i].optimize_ms;
            t->codegen_ms += out[i].codegen_ms;
        }
        if (out[i].why) {
            diag_error(ctx, ATTNC_E_LLVM, (attnc_loc){0}, "%s: %s", r->units[i].name, out[i].why);
            st = ATTNC_E_LLVM;
        }
    }
    for (int i = 0; out && i < n; i++)
        free(out[i].why);
    free(out);
    free(order);
    if (st != ATTNC_OK) {
        kc_blobs_free(objs, objs ? n : 0);
        return st;
    }
    *objs_out = objs;
    return ATTNC_OK;
}
