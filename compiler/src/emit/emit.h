/* emit.h: turning a module into machine code: target machines for the
 * host or a named CPU, the O3 pipeline, and dumps of IR and assembly. */
#ifndef ATTNC_EMIT_H
#define ATTNC_EMIT_H

#include <llvm-c/Error.h>
#include <llvm-c/TargetMachine.h>

#include "base/base.h"
#include "codegen/cg.h"
#include "emit/kcache.h"

/* A target machine for this host's triple with opt's CPU and features
 * (the host's when NULL). */
ATTNC_HIDDEN attnc_status emit_target_machine(attnc_ctx *ctx, const attnc_options *opt,
                                              LLVMTargetMachineRef *out);
/* The codegen target of tm (cg_target_for): the f32 lanes of its widest
 * vector registers and how many there are, from tm's features where they
 * name AVX-512 or AVX2, else by asking tm to compile a vector add. */
ATTNC_HIDDEN cg_target emit_target_shape(LLVMTargetMachineRef tm);
/* The ATTN_CPU_* features (attn_kernels.h) code for tm may use, as LLVM
 * selects instructions for tm (emit_target.c). */
ATTNC_HIDDEN uint32_t emit_cpu_features(LLVMTargetMachineRef tm);
/* Sets the module's triple and data layout from tm and runs default<O3>
 * (the probes). */
ATTNC_HIDDEN attnc_status emit_optimize(attnc_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm);
/* Sets the module's triple and data layout from tm and runs the pipeline
 * for a unit (light: a cg_unit's vector_ir; emit_target.c says which and
 * why): NULL, or LLVM's message (malloc'd). Safe on several threads at
 * once for modules of distinct contexts. */
ATTNC_HIDDEN char *emit_passes(LLVMModuleRef mod, LLVMTargetMachineRef tm, bool light);
/* The one pipeline from a loaded spec to the units codegen builds, for
 * tm: graph, passes (compile_graph_of; stage times into *t, may be NULL),
 * tm's vector shape, the buffer plan and the units (cg_units_plan). The
 * JIT compiles the units to objects (emit_unit_objects), an object file
 * and the dumps link them (emit_linked_module). */
ATTNC_HIDDEN attnc_status emit_plan_units(attnc_ctx *ctx, const attn_config *cfg,
                                          const spec_locs *locs, const attnc_options *opt,
                                          LLVMTargetMachineRef tm, attnc_timings *t,
                                          cg_result *out);
/* Every unit of r built and optimized on its own as emit_unit_objects
 * does, then linked into one module of llctx (*out): the code of an
 * object file and of --emit-llvm/--emit-asm is the JIT's. */
ATTNC_HIDDEN attnc_status emit_linked_module(attnc_ctx *ctx, const cg_result *r,
                                             LLVMTargetMachineRef tm, LLVMContextRef llctx,
                                             LLVMModuleRef *out);
/* Threads that compile n_units units with opt (opt->threads, else one
 * per CPU, at most n_units). */
ATTNC_HIDDEN int emit_threads(const attnc_options *opt, int n_units);
/* Compiles every unit of r to an object (*objs: r->n_units of them,
 * malloc'd; kc_blobs_free), on emit_threads threads at once. Adds the
 * stages' times and the thread count to *t (may be NULL). */
ATTNC_HIDDEN attnc_status emit_unit_objects(attnc_ctx *ctx, const cg_result *r,
                                            const attnc_options *opt, kc_blob **objs,
                                            attnc_timings *t);
/* Writes opt->emit_llvm / opt->emit_asm if asked (asm from a clone). */
ATTNC_HIDDEN attnc_status emit_dumps(attnc_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                                     const attnc_options *opt);
/* Turns an LLVMErrorRef into a diagnostic and consumes it. */
ATTNC_HIDDEN attnc_status emit_llvm_error(attnc_ctx *ctx, LLVMErrorRef err, const char *what);

#endif
