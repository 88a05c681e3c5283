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

#include <signal.h>

#define AL_CLI_USAGE 1 /* positive: usage already printed */

/* X(name, function, one-line summary) -- the table drives dispatch and help. */
#define AL_COMMANDS(X)                                                                             \
    X("demo", al_cmd_demo, "two local sites over mTLS with the dashboard: the quick start")        \
    X("agent", al_cmd_agent, "run one site of a multi-site run: agent -c SITE.ini")                \
    X("config", al_cmd_config, "validate a site configuration: config check SITE.ini")             \
    X("train", al_cmd_train, "train a model on one site (CPU workers)")                            \
    X("sim", al_cmd_sim, "simulate M sites in one process: outer loop, policies, WAN model")       \
    X("sample", al_cmd_sample, "generate text from a checkpoint (KV cache): sample --ckpt PATH")   \
    X("eval", al_cmd_eval, "loss and perplexity of a checkpoint on a token file")                  \
    X("export", al_cmd_export, "write a checkpoint in Hugging Face GPT-2 layout: --format hf")     \
    X("import", al_cmd_import, "a Hugging Face GPT-2 folder into a checkpoint: --format hf")       \
    X("data", al_cmd_data, "prepare token files: data prep --format fortune|text|jsonl")           \
    X("bench", al_cmd_bench, "benchmarks: bench inner|odc|transport|gpu|overlap|subnormal")        \
    X("report", al_cmd_report, "static HTML charts from an agent's JSONL event log")               \
    X("certs", al_cmd_certs, "create a run's CA and per-site mTLS keys and certificates")          \
    X("wanem", al_cmd_wanem, "WAN emulator: a TCP proxy with rate, latency, scheduled cuts")       \
    X("version", al_cmd_version, "print the version")

/* X(name, function, one-line summary) for `autoloco bench NAME`. */
#define AL_BENCHES(X)                                                                              \
    X("inner", al_bench_inner, "time training steps against OpenBLAS sgemm")                       \
    X("transport", al_bench_transport, "cross-site link: mTLS vs insecure MB/s, codecs")           \
    X("odc", al_bench_odc,                                                                         \
      "ODC vs the FSDP baseline over W worker processes (--simulate: W=8..64)")                    \
    X("gpu", al_bench_gpu, "training steps on the GPU: tokens/s and TFLOP/s, small and gpt2-124m") \
    X("overlap", al_bench_overlap,                                                                 \
      "agents over a slow link: blocking vs [outer] overlap = delayed, hidden communication")      \
    X("subnormal", al_bench_subnormal,                                                             \
      "a confident model's steps with subnormal floats flushed to zero vs IEEE")                   \
    X("tokenizer", al_bench_tokenizer, "GPT-2's BPE in C vs tiktoken (node): MB/s on the same text")

#define AL_CMD_DECL(name, fn, summary) int fn(int argc, char **argv, al_err *err);
AL_COMMANDS(AL_CMD_DECL)
AL_BENCHES(AL_CMD_DECL)
#undef AL_CMD_DECL

/* A start without --resume in a checkpoint folder that holds checkpoints
 * would train from step 0 and write over them (same step-* names, `keep`
 * pruning): unless `fresh` (--fresh) says so, an error naming the folder and
 * both flags. 0 when the folder holds none (missing, empty, no step-*). */
int al_cli_fresh_ok(const char *cmd, const char *dir, int fresh, al_err *err);

/* `autoloco train` with [inner] workers > 1 (runtime/cli/train_workers.c). When
 * *stop becomes nonzero (SIGINT/SIGTERM) the workers stop after their current
 * step and the parent saves a checkpoint there, as one worker does. resume
 * (NULL: none): continue from that checkpoint (al_ckpt_find), exactly. */
struct al_config;
struct al_model_config;
struct al_train_opts;
struct al_tokens;
int al_train_workers(const struct al_config *c, const struct al_model_config *mc,
                     const struct al_train_opts *o, const struct al_tokens *train,
                     const struct al_tokens *val, const char *hash, const char *resume,
                     const al_log *log, volatile sig_atomic_t *stop, al_err *err);

/* Generate from a checkpoint as `autoloco sample` does (an empty prompt;
 * theta_global where present): the continuation as text (bytes, or token ids
 * for other vocabularies) in *text (malloc'd). For the demo's last word. */
int al_cli_sample(const char *ckpt, int tokens, double temperature, int top_k, uint64_t seed,
                  char **text, al_err *err);

/* Make s valid UTF-8 in place, for JSON (a sampled byte sequence may cut a
 * character: then every byte >= 0x80 becomes '?'); returns s. */
char *al_cli_utf8(char *s);

/* What `autoloco demo` and `bench overlap` share: a free TCP port on
 * 127.0.0.1 (the kernel's choice, released again; -1: none); an agent process
 * (this executable, `agent -c cfg`, stdout and stderr into log; -1 and a
 * message on failure); the bundled corpus's token files (data/fortunes of
 * the setup, or /usr/share/games/fortunes tokenized into dir/data). */
int al_cli_free_port(void);
/* death_sig (0: none): the signal the agent gets when this process ends,
 * however it ends (Linux's PR_SET_PDEATHSIG), so that none is left behind
 * holding its ports. */
int al_cli_spawn_agent(const char *cfg, const char *log, int death_sig, al_err *err);
int al_cli_corpus(const char *dir, char *train, size_t ntrain, char *val, size_t nval, al_err *err);

/* Where GPT-2's tokenizer files are: [data] tokenizer_dir of a configuration
 * (its default: tools/setup's folder), which `data prep`, `sample`, `export`
 * and `bench tokenizer` take as `train` does: -c FILE.ini, then --set
 * section.key=value in order. al_cli_tokcfg_arg records one of them. */
typedef struct al_cli_tokcfg {
    const char *arg[32];
    char kind[32]; /* 'c' or 's' */
    int n;
} al_cli_tokcfg;
int al_cli_tokcfg_arg(al_cli_tokcfg *c, char kind, const char *arg, al_err *err);
/* The configured folder into dir; 1 if it was set explicitly (-c or --set
 * naming the key), 0 for the default. */
int al_cli_tokenizer_dir(const al_cli_tokcfg *c, char *dir, size_t cap, int *explicit_,
                         al_err *err);
struct al_bpe;
/* Load the tokenizer of the configured folder; errors name the key. */
int al_cli_load_bpe(const al_cli_tokcfg *c, struct al_bpe *t, al_err *err);

/* Parse an integer / double flag value strictly ("--steps" "12x" is an error). */
int al_cli_int(const char *flag, const char *s, long lo, long hi, long *out, al_err *err);
int al_cli_double(const char *flag, const char *s, double *out, al_err *err);

#endif
