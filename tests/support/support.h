/* support.h: fixtures shared by the test suites: temporary directories,
 * files, child processes, random configs. */
#ifndef ATTNC_TEST_SUPPORT_H
#define ATTNC_TEST_SUPPORT_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "attn.h"
#include "attnc.h"

/* A fresh directory under $TMPDIR (or /tmp); removed with its files by
 * tmpdir_remove. */
char *tmpdir_new(void);
void tmpdir_remove(char *dir);
/* dir/name in a static rotating buffer (valid for 8 more calls). */
const char *path_in(const char *dir, const char *name);
/* Number of entries in dir other than . and .. */
int dir_count(const char *dir);

void write_file(const char *path, const void *data, size_t n);
/* Whole file, NUL-terminated, malloc'd; NULL if it cannot be read. */
char *read_file(const char *path, size_t *n);

/* Runs argv (NULL-terminated) with stdout and stderr to the given files
 * (NULL = /dev/null); returns the exit code, or -1 if it did not exit. */
int run_cmd(const char *const *argv, const char *out_path, const char *err_path);

/* For suites that run attnc: a fresh directory, plus files beside it that
 * capture a command's stdout and stderr. Setup/teardown for cmocka. */
typedef struct cli_fixture {
    char *dir;
    char out[1024], err[1024];
} cli_fixture;
int cli_fixture_setup(void **state);
int cli_fixture_teardown(void **state);

/* The text of a file (fails the test if it cannot be read), malloc'd;
 * and a check that it contains want (the file is printed otherwise). */
char *file_text(const char *path);
void assert_file_has(const char *path, const char *want);

/* The names of the specs in specs/, each once. */
extern const char *const shipped_specs[];
extern const size_t n_shipped_specs;

/* Prints each diagnostic of ctx (cmocka's print_error), as a failing
 * test's context. */
void print_diags(attnc_ctx *ctx);

/* The kernels of the spec at path compiled with o (NULL: the defaults);
 * fails the test with every diagnostic when they do not compile. */
attnc_jit *jit_or_fail(const char *path, const attnc_options *o);
/* Default options with every pass disabled (the unfused kernels); names
 * receives the pass names the options point at (room for 16). */
attnc_options options_without_passes(const char **names);

/* specs/name.yaml of the source tree (a static buffer). */
const char *spec_path(const char *name);
/* Writes the config c to dir/name as a spec; its path (path_in's). */
const char *write_spec(const char *dir, const attn_config *c, const char *name);

/* A small valid config; callers change fields, then attn_config_check. */
attn_config config_small(int64_t heads, int64_t kv, int64_t head_dim, int64_t d_model);

/* The relative error kernels may show against the reference with a cache
 * of dtype kv: the reference rounds K and V as the kernels do, but from
 * values computed in double, so a rounding step may fall the other way:
 * f16's 2^-11, bf16's 2^-8, q8_0's max|x|/127 of a block of 32 (measured
 * 2.6e-4 on seed; its steps are rarely hit). 1e-4 with f32. */
double kv_tolerance(attn_dtype kv);
/* compute bf16 against the bf16 reference: an operand on a rounding
 * boundary may fall one bf16 step the other way, and the kernels' p is
 * rounded against the running maximum (README: compute). */
#define BF16_TOL 8e-3

/* max |a-b| / max |b| over n values. */
double rel_err(const float *a, const float *b, size_t n);

/* Deterministic uniform doubles in [-1, 1). */
double rnd_unit(uint64_t *state);
/* n floats uniform in [-sqrt 3, sqrt 3) (unit variance), malloc'd. */
float *random_floats(size_t n, uint64_t seed);

/* A safetensors-shaped file: 8-byte length hlen (the header's own length
 * when hlen is UINT64_MAX), the header text, then data_len bytes 0, 1, ... */
void write_raw_safetensors(const char *path, const char *header, uint64_t hlen, size_t data_len);

/* A GGUF file (version 3) for tests: metadata entries and tensors written
 * as given, data aligned to `alignment` (general.alignment is written when
 * it is not 32). */
typedef struct test_gguf_kv {
    const char *key;
    int type;           /* ATTN_GGUF_UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY (of INT32) */
    int64_t i;          /* integers and bools */
    double f;           /* FLOAT32 */
    const char *s;      /* STRING */
    const int32_t *arr; /* ARRAY of INT32 */
    int n;
} test_gguf_kv;
typedef struct test_gguf_tensor {
    const char *name;
    uint32_t type; /* ggml type id */
    int ndim;
    int64_t shape[2]; /* outermost first, as a Linear weight [out, in] */
    const void *data;
    size_t nbytes;
} test_gguf_tensor;
void write_gguf(const char *path, const test_gguf_kv *kv, int n_kv, const test_gguf_tensor *t,
                int n_t, uint32_t alignment);

/* In sanitizer builds (ATTNC_SANITIZED, set by tests/CMakeLists.txt) a
 * loop over many specs or configurations takes every step-th: the
 * sanitizers look for memory errors around the kernels, which a few
 * reach as all do, and the plain build runs them all (the reference
 * engine, instrumented, made the CI's sanitizer stage 17 minutes). 1
 * otherwise. */
int sanitized_step(int step);

/* The validated config of the spec at path (fails the test otherwise). */
attn_config load_spec_file(const char *path);
/* Runs T tokens of x [T, d_model] through jit's kernels with weights w,
 * chunk tokens a call, on `threads` threads, into y. */
/* Values of c's token inputs (p / len at position p: documents of len
 * tokens) for positions [at, at + n), and (at 0) of its sequence inputs
 * (value): into cache's sequence seq, or into r where cache is NULL. */
void give_inputs(const attn_config *c, attn_cache *cache, int32_t seq, attn_ref *r, int64_t at,
                 int64_t n, int64_t len, int32_t value);
void run_jit(const attnc_jit *jit, const attn_weights *w, int64_t T, const float *x, float *y,
             int64_t chunk, int threads);
/* The reference engine's y for the same, in one call. */
void run_ref(const attn_weights *w, int64_t T, const float *x, float *y);
/* Compiles spec (with o), runs T tokens of random x with random weights
 * (seed) in chunks, and gives rel_err against the reference in one call. */
double jit_vs_ref(const char *spec, const attnc_options *o, int64_t T, int64_t chunk, int threads,
                  uint64_t seed);
/* jit_vs_ref with the spec's inputs given call by call (give_inputs:
 * documents of len tokens, sequence inputs value) and the reference fed
 * the same calls. */
double jit_vs_ref_inputs(const char *spec, const attnc_options *o, int64_t T, int64_t chunk,
                         int threads, uint64_t seed, int64_t len, int32_t value);
/* Configuration i of the randomized sweep (s: its random state): every
 * feature, weight and cache dtype spread over 60 configs; *T tokens fed
 * *chunk at a time. */
attn_config sweep_config(int i, uint64_t *s, int64_t *T, int64_t *chunk);

/* n f32 values as raw F16 or BF16 bytes (round to nearest even), malloc'd. */
void *to_half(const float *x, size_t n, bool bf16);

#endif
