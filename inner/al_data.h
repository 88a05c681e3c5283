/*
 * al_data.h -- token files, documents, and packing documents into microbatches.
 *
 * Token file (llm.c's format, so llm.c's GPT-2 files load too): a header of 256
 * int32 -- [0] magic 20240520, [1] version 1 (uint16 tokens), [2] token count,
 * [3] vocabulary size (autoloco; 0 in llm.c files, meaning GPT-2's 50257),
 * [4] end-of-document token (autoloco; 0 = vocabulary - 1) -- then the tokens.
 *
 * Documents: the stream is EOT d0 d1 ... EOT e0 e1 ... EOT. Document k spans
 * tokens [s_k, s_{k+1}): its EOT (the "beginning" token), then its bytes; its
 * last target is the next EOT. The boundaries s_0 < ... < s_ndocs are kept in an
 * index file beside the token file (X.bin -> X.idx: "ALIDX001", uint64 ndocs,
 * uint64 s[ndocs + 1]); without one they are found by scanning for EOT.
 *
 * Byte tokenizer: token = byte value (0..255), EOT = 256, vocabulary 257.
 * GPT-2's BPE (al_tokenizer.h): its ids, EOT = 50256, vocabulary 50257.
 */
#ifndef AL_DATA_H
#define AL_DATA_H

#include <stdbool.h>

#include "al_base.h"
#include "al_model.h"
#include "al_tokenizer.h"

#define AL_TOKENS_MAGIC 20240520
#define AL_BYTE_VOCAB   257
#define AL_BYTE_EOT     256

typedef struct al_tokens {
    uint16_t *tok;
    size_t n;
    int vocab, eot;
    size_t ndocs;
    uint64_t *doc; /* [ndocs + 1] boundaries, each the index of an EOT */
    char path[512];
} al_tokens;

/* Load X.bin (and X.idx if present). Errors name the file and what is wrong:
 * missing, truncated, bad magic/version, tokens out of the vocabulary. */
int al_tokens_load(al_tokens *t, const char *path, al_err *err);
void al_tokens_free(al_tokens *t);
/* The file's vocabulary must equal the model's: AL_EMISMATCH otherwise. */
int al_tokens_check_vocab(const al_tokens *t, const al_model_config *cfg, al_err *err);
/* Write tokens + index (used by data prep and tests). */
int al_tokens_write(const char *path, const uint16_t *tok, size_t n, int vocab, int eot,
                    const uint64_t *doc, size_t ndocs, al_err *err);

/* Length of document k in positions (inputs), = s_{k+1} - s_k. */
static inline size_t al_doc_len(const al_tokens *t, size_t k) {
    return (size_t)(t->doc[k + 1] - t->doc[k]);
}

/* How microbatches are filled. */
typedef enum {
    AL_PACK_DOCS,   /* documents packed into rows, attention within each document */
    AL_PACK_STREAM, /* fixed windows of the token stream (pretraining rows) */
} al_packing;
int al_packing_parse(const char *s, al_packing *out, al_err *err);
const char *al_packing_name(al_packing p);

/* Where a loader stands; saved in checkpoints so a resume continues exactly. */
typedef struct al_loader_state {
    uint64_t epoch;  /* passes completed over the data */
    uint64_t next;   /* docs mode: index into the epoch's permutation; stream: token offset */
    uint64_t offset; /* docs mode: positions of the current document already used */
} al_loader_state;

typedef struct al_loader {
    const al_tokens *data;
    al_packing packing;
    int shuffle;
    uint64_t seed;
    uint32_t *perm; /* [ndocs] order of documents in this epoch */
    al_loader_state st;
} al_loader;

int al_loader_init(al_loader *ld, const al_tokens *data, al_packing packing, int shuffle,
                   uint64_t seed, al_err *err);
void al_loader_free(al_loader *ld);
/* Jump to a saved state (recomputes the epoch's permutation). */
int al_loader_seek(al_loader *ld, const al_loader_state *st, al_err *err);
/* Fill b (B rows x T positions) with the next tokens. Long documents are split
 * into pieces of at most T; every piece starts at position 0. */
void al_loader_next(al_loader *ld, al_batch *b);

/* ---- groups: which documents of a token file came from which input ---------------- *
 * `data prep --groups` (each input one group, e.g. a language) writes beside
 * X.bin a text file X.groups: '#' comment lines, then one line per group,
 * "NAME FIRST END": the group holds documents [FIRST, END) of X.bin, the
 * groups in order, contiguous, the first at 0 and the last ending at the
 * file's document count. The simulator's `languages` scenario gives site m
 * group m (al_sim.h). NAME: 1..31 of [A-Za-z0-9._-]. */
#define AL_GROUP_NAME_MAX 32
#define AL_GROUPS_MAX     64
typedef struct al_groups {
    int n;
    char name[AL_GROUPS_MAX][AL_GROUP_NAME_MAX];
    size_t first[AL_GROUPS_MAX + 1]; /* group g: documents [first[g], first[g + 1]) */
    char path[512];
} al_groups;

/* The groups file of token file `bin` (X.bin -> X.groups). AL_ENOTFOUND if
 * there is none; AL_EFORMAT naming the file and line for anything else wrong. */
int al_groups_load(al_groups *g, const char *bin, al_err *err);
/* The groups must cover t's documents exactly (AL_EMISMATCH otherwise). */
int al_groups_check(const al_groups *g, const al_tokens *t, al_err *err);
/* Write X.groups beside `bin`. */
int al_groups_write(const al_groups *g, const char *bin, al_err *err);
/* The groups file's path for token file `bin`. */
void al_groups_path(char *out, size_t cap, const char *bin);
/* Is `name` a valid group name (see above)? */
bool al_group_name_ok(const char *name);

/* ---- data prep -------------------------------------------------------------------- */
typedef enum { AL_FMT_FORTUNE, AL_FMT_TEXT, AL_FMT_JSONL } al_text_format;
int al_text_format_parse(const char *s, al_text_format *out, al_err *err);

typedef struct al_prep_group_stats {
    size_t train_docs, train_bytes; /* documents for training, and their bytes of text */
    size_t val_docs, val_bytes;     /* validation pieces (the last may be cut), their bytes */
    size_t val_cut;                 /* 1 if the group's last validation piece was cut */
} al_prep_group_stats;

typedef struct al_prep_stats {
    size_t files, docs, train_docs, val_docs, train_tokens, val_tokens;
    int ngroups;                              /* grouped prep: the groups, else 0 */
    al_prep_group_stats group[AL_GROUPS_MAX]; /* grouped prep: per group */
    size_t min_len, median_len, max_len;      /* document lengths in bytes */
    size_t bytes;                             /* of all documents */
    double encode_s;                          /* seconds spent tokenizing */
    int threads;                              /* that tokenized */
} al_prep_stats;

/* Read the inputs (files, or directories of files: sorted, skipping *.dat,
 * *.u8 and hidden files), split them into documents by format, assign each
 * document to validation with probability val_frac (deterministic in seed),
 * and write OUTDIR/{train,val}.{bin,idx} with the byte tokenizer. */
int al_data_prep(const char *const *inputs, int ninputs, al_text_format fmt, const char *outdir,
                 double val_frac, uint64_t seed, al_prep_stats *stats, al_err *err);

/* The same with a choice of tokenizer. bpe (NULL: bytes): GPT-2's BPE, the
 * documents encoded by `threads` threads (0: OpenMP's default), a long
 * document cut at al_bpe_cut's places into pieces of about 1 MB so that it
 * is shared too; the ids do not depend on the thread count. progress (may
 * be NULL) is called about once a second while tokenizing. */
typedef struct al_prep_opts {
    double val_frac;
    uint64_t seed;
    const al_bpe *bpe;
    int threads;
    void (*progress)(void *ctx, size_t done_bytes, size_t total_bytes, double seconds);
    void *progress_ctx;
    /* Grouped prep (NULL: off): group_names[i] names input i, each input one
     * group (at most AL_GROUPS_MAX, names as al_group_name_ok, distinct).
     * train.bin holds the groups' training documents group after group, in
     * input order, and train.groups says where each starts. val.bin mixes the
     * groups equally: every group gives the same number of bytes of text, B,
     * the smallest group's validation bytes (its documents drawn with
     * val_frac, at least one): a group's validation documents in order until
     * B, the last one cut at the UTF-8 character boundary at or before B (so
     * each group's share is B minus at most 3 bytes; the cut-off rest is in
     * neither split); its further validation documents go back to training.
     * The pieces are interleaved (group 0's first, group 1's first, ...), so
     * any prefix of val.bin is mixed too. Bytes are kept as they are (the
     * byte tokenizer: UTF-8 stays UTF-8). */
    const char *const *group_names;
} al_prep_opts;
int al_data_prep_ex(const char *const *inputs, int ninputs, al_text_format fmt, const char *outdir,
                    const al_prep_opts *o, al_prep_stats *stats, al_err *err);

#endif
