/* util.h: what the attnc subcommands share: exit codes, option parsing,
 * loading a spec with its diagnostics printed. Only the driver prints. */
#ifndef ATTNC_DRIVER_UTIL_H
#define ATTNC_DRIVER_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "attnc.h"

enum { EXIT_OK = 0, EXIT_USAGE = 1, EXIT_INPUT = 2, EXIT_INTERNAL = 3 };

/* One command-line option: `--name VALUE`, `--name=VALUE`, or a flag. */
typedef struct opt {
    const char *name;  /* "--weights" */
    const char *alias; /* "-o" or NULL */
    bool has_arg;
    const char **value; /* receives the argument (or "1" for a flag) */
    int *n_values;      /* repeatable: value is an array, n_values its count */
    int max_values;
} opt;

/* Parses argv[first..argc) against opts; non-option words go to
 * positional (at most max_pos). Prints a usage error and returns false on
 * an unknown option, a missing argument or too many words. */
bool parse_opts(const char *cmd, int argc, char **argv, int first, const opt *opts,
                const char **positional, int max_pos, int *n_pos);

/* Strict integer in lo..hi; prints "CMD: NAME expects ..." on failure. */
bool parse_int(const char *cmd, const char *name, const char *text, int64_t lo, int64_t hi,
               int64_t *out);
/* A dtype's name; the block formats (q8_0, q4_0) only where blocks is
 * set (weights; activations and caches are f32, f16 or bf16). */
/* --shard I/N into o's shard_index and shard_count (usage error when not
 * 0 <= I < N). */
bool parse_shard(const char *cmd, const char *text, attnc_options *o);
bool parse_dtype(const char *cmd, const char *name, const char *text, bool blocks, attn_dtype *out);

/* Prints ctx's diagnostics; the exit code for st (0, 2 for bad input, 3
 * for internal failures: shape bugs, LLVM, memory). */
int print_diags(const attnc_ctx *ctx, attnc_status st);

/* Loads and validates a spec, printing every diagnostic; EXIT_OK or an
 * exit code. */
int load_spec(const char *path, attn_config *cfg);
/* load_spec, then shard o->shard_index of o->shard_count when o asks for
 * one (exit 2 with the reason when the spec cannot be sharded so). */
int load_spec_shard(const char *path, const attnc_options *o, attn_config *cfg);

/* After a call of the compiler library with ctx (which may be NULL; it is
 * freed): print_diags, with the status's name when ctx holds no reason. */
int compile_report(attnc_ctx *ctx, attnc_status st);
/* "off", "miss" or "hit". */
const char *cache_result_name(attnc_cache_result r);

/* Exit code for a runtime status after printing "attnc: error: MSG". */
int runtime_error(attn_status st, const attn_msg *msg);

/* Prints "CMD: error: ...; see 'attnc CMD --help'" and returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

double now_seconds(void);

/* The subcommands; argv[0] is the subcommand's name. */
int cmd_run(int argc, char **argv);
int cmd_ir(int argc, char **argv);
int cmd_opt(int argc, char **argv);
int cmd_compile(int argc, char **argv);
int cmd_import(int argc, char **argv);

/* True if every name is a pass; else prints a usage error. */
bool check_pass_names(const char *cmd, const char *const *names, int n);
int cmd_gen_weights(int argc, char **argv);
int cmd_gen_input(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_roofline(int argc, char **argv);
int cmd_cache(int argc, char **argv);

#endif
