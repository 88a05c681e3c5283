/*
 * al_cli.h -- the `autoloco` command's subcommands.
 *
 * Each subcommand is `int fn(int argc, char **argv, al_err *err)`: argv[0] is
 * the subcommand's own name; it returns 0, AL_CLI_USAGE after printing usage
 * for bad flags, or a negative AL_E* code with err filled. main() turns that
 * into one line on stderr and an exit status (0 ok, 1 error, 2 usage).
 */
#ifndef AL_CLI_H
#define AL_CLI_H

#include "al_base.h"

#define AL_CLI_USAGE 1 /* positive: usage already printed */

/* X(name, function, one-line summary) -- the table drives dispatch and help. */
#define AL_COMMANDS(X)                                                                             \
    X("train", al_cmd_train, "train a model on one site (CPU workers)")                            \
    X("sim", al_cmd_sim, "simulate M sites in one process: outer loop, policies, WAN model")     \
    X("data", al_cmd_data, "prepare token files: data prep --format fortune|text|jsonl")           \
    X("bench", al_cmd_bench, "benchmarks: bench inner")                                            \
    X("version", al_cmd_version, "print the version")

/* X(name, function, one-line summary) for `autoloco bench NAME`. */
#define AL_BENCHES(X) X("inner", al_bench_inner, "time training steps against OpenBLAS sgemm")

#define AL_CMD_DECL(name, fn, summary) int fn(int argc, char **argv, al_err *err);
AL_COMMANDS(AL_CMD_DECL)
AL_BENCHES(AL_CMD_DECL)
#undef AL_CMD_DECL

/* Parse an integer / double flag value strictly ("--steps" "12x" is an error). */
int al_cli_int(const char *flag, const char *s, long lo, long hi, long *out, al_err *err);
int al_cli_double(const char *flag, const char *s, double *out, al_err *err);

#endif
