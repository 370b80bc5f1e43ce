/* attnc.h: the attnc compiler library's public API. A context owns every
 * diagnostic and all memory of one compilation; the spec comes out as the
 * runtime's plain attn_config (attn.h), the one type the two share.
 * Contexts are independent: distinct contexts may be used from distinct
 * threads at once; one context is never shared between threads. */
#ifndef ATTNC_H
#define ATTNC_H

#include <stddef.h>
#include <stdint.h>

#include "attn.h"
#include "attn_kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef ATTNC_BUILD
#define ATTNC_API __attribute__((visibility("default")))
#else
#define ATTNC_API
#endif

typedef enum attnc_status {
    ATTNC_OK = 0,
    ATTNC_E_IO,    /* file not found or unreadable */
    ATTNC_E_YAML,  /* not well-formed YAML */
    ATTNC_E_SPEC,  /* well-formed, but not a valid spec */
    ATTNC_E_SHAPE, /* inconsistent shapes found after parsing */
    ATTNC_E_LLVM,  /* code generation failed */
    ATTNC_E_NOMEM,
    ATTNC_STATUS_COUNT
} attnc_status;

typedef enum attnc_severity { ATTNC_SEV_ERROR, ATTNC_SEV_NOTE, ATTNC_SEV_COUNT } attnc_severity;

/* line and col are 1-based; 0 means unknown. */
typedef struct attnc_loc {
    const char *file;
    uint32_t line, col;
} attnc_loc;

typedef struct attnc_diag {
    attnc_severity sev;
    attnc_status code;
    attnc_loc loc;
    const char *msg; /* borrowed: lives as long as the context */
} attnc_diag;

/* At most this many errors are kept per context; one more adds a note. */
#define ATTNC_MAX_ERRORS 20

typedef struct attnc_ctx attnc_ctx;

/* NULL when out of memory. */
ATTNC_API attnc_ctx *attnc_ctx_new(void);
/* Frees the context and everything it owns (diagnostics included). */
ATTNC_API void attnc_ctx_free(attnc_ctx *ctx);

ATTNC_API size_t attnc_diag_count(const attnc_ctx *ctx);
/* The i-th diagnostic in the order found; NULL past the end. */
ATTNC_API const attnc_diag *attnc_diag_get(const attnc_ctx *ctx, size_t i);
/* Renders d as "file:line:col: error: msg" (parts that are unknown are
 * left out) into buf like snprintf; returns the full length. */
ATTNC_API int attnc_diag_format(const attnc_diag *d, char *buf, size_t n);

/* Parses and validates a spec file into *out (set only on success). Every
 * problem becomes a diagnostic on ctx (up to ATTNC_MAX_ERRORS); the status
 * is the first error's code. */
ATTNC_API attnc_status attnc_spec_load_file(attnc_ctx *ctx, const char *path, attn_config *out);
/* The same for a spec in memory; name is used as the file in locations. */
ATTNC_API attnc_status attnc_spec_load_string(attnc_ctx *ctx, const char *name, const char *text,
                                              size_t len, attn_config *out);
/* The normalized spec as YAML, every default filled in; it loads back to
 * the same config. malloc'd (caller frees); NULL when out of memory. */
ATTNC_API char *attnc_spec_to_yaml(const attn_config *c);

/* ---- compiling ------------------------------------------------------------ */

/* How to compile a spec; start from attnc_options_default(). */
typedef struct attnc_options {
    const char *const *disabled_passes; /* pass names to skip (see attnc_pass_name) */
    int n_disabled_passes;
    const char *target;   /* LLVM target triple ("aarch64-linux-gnu"); NULL = this host's */
    const char *cpu;      /* LLVM CPU name ("x86-64-v3", "generic"); NULL = this host's
                             (or the target's generic CPU for another target) */
    const char *features; /* LLVM feature string; NULL = the CPU's (host: detected) */
    const char *emit_llvm; /* if set, the optimized module's LLVM IR is written here */
    const char *emit_asm;  /* if set, its assembly is written here */
} attnc_options;

ATTNC_API attnc_options attnc_options_default(void);

/* The passes of the pipeline, in order; NULL past the end. */
ATTNC_API const char *attnc_pass_name(int i);
ATTNC_API const char *attnc_pass_summary(int i);

/* The graph IR of a spec as text: after lowering when after_pass is
 * "lower", after that pass when it names one, after the whole pipeline
 * when NULL. *text lives as long as ctx. */
ATTNC_API attnc_status attnc_ir_text(attnc_ctx *ctx, const char *spec_path,
                                     const attnc_options *opt, const char *after_pass,
                                     const char **text);

/* ---- ahead of time ------------------------------------------------------------ */

typedef enum attnc_emit_kind {
    ATTNC_EMIT_OBJ,  /* relocatable object defining <name>_kernels() */
    ATTNC_EMIT_ASM,  /* its assembly */
    ATTNC_EMIT_LLVM, /* its LLVM IR */
    ATTNC_EMIT_COUNT
} attnc_emit_kind;

/* Compiles a spec into out_path (and, if header_path is not NULL, a header
 * declaring `const attn_kernels *<name>_kernels(void);` with the spec and
 * options as a comment). Both are written to temporary files renamed on
 * success: on failure neither exists (or an old one is untouched). The
 * same spec, target and options give byte-identical files. *error as for
 * attnc_jit_compile_file. */
ATTNC_API attnc_status attnc_compile_file(const char *spec_path, const attnc_options *opt,
                                          attnc_emit_kind kind, const char *out_path,
                                          const char *header_path, char **error);

/* ---- JIT ------------------------------------------------------------------ */

typedef struct attnc_jit attnc_jit;

/* Milliseconds spent in each stage of one compile. */
typedef struct attnc_timings {
    double spec_ms;     /* reading and validating the spec */
    double ir_ms;       /* lowering to the graph IR */
    double passes_ms;   /* the pass pipeline */
    double llvm_ms;     /* building the LLVM module */
    double optimize_ms; /* LLVM's O3 pipeline */
    double jit_ms;      /* machine code generation and linking */
} attnc_timings;

/* Compiles a spec into kernels in memory for this process. On failure
 * *error gets a malloc'd message (every diagnostic, one a line; caller
 * frees) and *out is untouched. Thread-safe: compiles from several threads
 * may run at once (LLVM's shared steps are serialized inside). */
ATTNC_API attnc_status attnc_jit_compile_file(const char *spec_path, const attnc_options *opt,
                                              attnc_jit **out, char **error);
/* The kernel table; valid until attnc_jit_free. */
ATTNC_API const attn_kernels *attnc_jit_kernels(const attnc_jit *jit);
ATTNC_API attnc_timings attnc_jit_timings(const attnc_jit *jit);
/* Frees the machine code: the kernel table is invalid afterwards. */
ATTNC_API void attnc_jit_free(attnc_jit *jit);

/* Probes of this machine's limits, compiled for the host as the kernels
 * are (`attnc roofline` times them on every thread):
 * - fma(io, iters): iters rounds of flops_per_iter FP32 FLOPs, fused
 *   multiply-adds on independent registers (io[0], io[1]: the factors,
 *   e.g. 0.999999 and 1e-6; the result goes back to io[0..lanes));
 * - read(p, n): the sum of p[0..n), n a multiple of 64, streamed from
 *   memory. */
typedef struct attnc_probes {
    void (*fma)(float *io, int64_t iters);
    float (*read)(const float *p, int64_t n);
    int64_t flops_per_iter;
    int lanes; /* f32 lanes of the vectors used */
} attnc_probes;

/* The probes live in *jit until attnc_jit_free (whose kernel table is
 * then empty). *error as for attnc_jit_compile_file. */
ATTNC_API attnc_status attnc_probes_compile(attnc_jit **jit, attnc_probes *out, char **error);

#ifdef __cplusplus
}
#endif
#endif
