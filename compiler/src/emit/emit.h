/* emit.h: turning units into machine code, the leaf of the pipeline
 * (compile.c drives it): target machines for the host or a named CPU,
 * the optimization pipelines, units compiled to objects on all threads,
 * objects linked into an LLJIT, object files and headers written, dumps
 * of IR and assembly. Nothing here knows the spec stage or the passes. */
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
/* $ATTNC_AMX_EMULATE is 1: a target with AVX512-BF16 and no AMX takes the
 * AMX kernels, their tile instructions emulated (cg_amx.c; for tests). */
ATTNC_HIDDEN bool emit_amx_emulated(void);
/* Sets the module's triple and data layout from tm and runs default<O3>
 * (the probes). */
ATTNC_HIDDEN attnc_status emit_optimize(attnc_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm);
/* Sets the module's triple and data layout from tm and runs the pipeline
 * for a unit (light: a cg_unit's vector_ir; emit_target.c says which and
 * why): NULL, or LLVM's message (malloc'd). Safe on several threads at
 * once for modules of distinct contexts. */
ATTNC_HIDDEN char *emit_passes(LLVMModuleRef mod, LLVMTargetMachineRef tm, bool light);
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

/* ---- the JIT (emit_jit.c) ---- */

/* A zeroed kernel handle (attnc_jit_free frees it), and its timings. */
ATTNC_HIDDEN attnc_jit *emit_jit_new(void);
ATTNC_HIDDEN attnc_timings *emit_jit_timings(attnc_jit *jit);
/* The n objects linked into a fresh LLJIT for jit_tm's CPU (consumed),
 * and the table `<name>_kernels` returns copied into jit. */
ATTNC_HIDDEN attnc_status emit_jit_link(attnc_ctx *ctx, LLVMTargetMachineRef jit_tm,
                                        const char *name, const kc_blob *objs, int n,
                                        attnc_jit *jit);

/* ---- object files (emit_obj.c) ---- */

/* A fresh temporary path beside path (malloc'd), or NULL with a
 * diagnostic. */
ATTNC_HIDDEN char *emit_temp_beside(attnc_ctx *ctx, const char *path);
/* The module as an object, assembly or LLVM IR, in memory (*out: one blob). */
ATTNC_HIDDEN attnc_status emit_module_bytes(attnc_ctx *ctx, LLVMModuleRef mod,
                                            LLVMTargetMachineRef tm, attnc_emit_kind kind,
                                            kc_blob **out);
ATTNC_HIDDEN attnc_status emit_write_bytes(attnc_ctx *ctx, const kc_blob *b, const char *path);
/* The header declaring cfg's `<name>_kernels`, with the normalized spec
 * and the options in a comment. */
ATTNC_HIDDEN attnc_status emit_write_header(attnc_ctx *ctx, const attn_config *cfg,
                                            const char *spec_path, const attnc_options *opt,
                                            const char *path);
/* Refuses a target whose layout the kernel table's bytes do not fit. */
ATTNC_HIDDEN attnc_status emit_check_layout(attnc_ctx *ctx, LLVMTargetMachineRef tm);

#endif
