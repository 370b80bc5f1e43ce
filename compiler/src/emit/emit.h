/* emit.h: turning a module into machine code: target machines for the
 * host or a named CPU, the O3 pipeline, and dumps of IR and assembly. */
#ifndef ATTNC_EMIT_H
#define ATTNC_EMIT_H

#include <llvm-c/Error.h>
#include <llvm-c/TargetMachine.h>

#include "base/base.h"

/* A target machine for this host's triple with opt's CPU and features
 * (the host's when NULL). */
ATTNC_HIDDEN attnc_status emit_target_machine(attnc_ctx *ctx, const attnc_options *opt,
                                              LLVMTargetMachineRef *out);
/* The f32 lanes of tm's widest vector registers and how many there are
 * (codegen blocks its kernels for them): from tm's features where they
 * name AVX-512 or AVX2, else by asking tm to compile a vector add. */
ATTNC_HIDDEN void emit_target_shape(LLVMTargetMachineRef tm, int *lanes, int *regs);
/* Sets the module's triple and data layout from tm and runs default<O3>
 * with loop and SLP vectorization. */
ATTNC_HIDDEN attnc_status emit_optimize(attnc_ctx *ctx, LLVMModuleRef mod,
                                        LLVMTargetMachineRef tm);
/* Writes opt->emit_llvm / opt->emit_asm if asked (asm from a clone). */
ATTNC_HIDDEN attnc_status emit_dumps(attnc_ctx *ctx, LLVMModuleRef mod, LLVMTargetMachineRef tm,
                                     const attnc_options *opt);
/* Turns an LLVMErrorRef into a diagnostic and consumes it. */
ATTNC_HIDDEN attnc_status emit_llvm_error(attnc_ctx *ctx, LLVMErrorRef err, const char *what);

#endif
