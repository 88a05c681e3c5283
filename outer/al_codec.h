/*
 * al_codec.h -- how a pseudo-gradient (a vector of fp32) becomes bytes on the
 * wire and back: fp32, bf16, int8 or int4 with one absmax scale per block,
 * each optionally followed by zstd.
 *
 * Quantisation is what shrinks the bytes; zstd then squeezes what structure is
 * left (on random-like data it saves ~8% of int4, ~7% of int8, little of fp32).
 *
 * Encoding is deterministic (same input, same settings, same libzstd -> same
 * bytes), so every site can re-encode a mean and get identical bytes.
 *
 * Worst-case error of one round trip, per element x in a block whose largest
 * magnitude is A (every bound is checked by tests/test_codec.c):
 *   fp32  exact
 *   bf16  |x - x'| <= 2^-8 |x| + 2^-134     (round to nearest even, 8 significant bits;
 *                                           the constant covers subnormals)
 *   int8  |x - x'| <= A / 254 + 4 eps A    q = round(x * 127/A), |q| <= 127
 *   int4  |x - x'| <= A / 14  + 4 eps A    q = round(x * 7/A),   |q| <= 7
 * (eps = FLT_EPSILON: the slack covers fp32 rounding of x * q/A and of q * s.)
 * `al_codec_error_bound` returns that bound for a whole vector (using the
 * largest block absmax), which is what callers usually want.
 *
 * Encoded layout (all little-endian), 48 bytes of header then the body:
 *   u32 magic "ALCD"   u8 version (1)   u8 kind   u8 flags (bit 0: zstd)   u8 0
 *   u32 block          u32 0
 *   u64 n              number of fp32 values
 *   u64 raw_len        body length before zstd (fixed by kind, n, block)
 *   u64 body_len       bytes that follow the header
 *   u64 checksum       al_xxh64 of the body as sent (after zstd)
 * Body before zstd: fp32 / bf16 values; or for int8 / int4 the fp32 scales of
 * all blocks, then the quantised values (int4: two per byte, low nibble first,
 * stored as q + 8). The decoder rejects a wrong magic, version, kind, size,
 * checksum, a zstd frame that does not inflate to exactly raw_len, and any
 * non-finite value or scale, so a decoded vector is always finite.
 */
#ifndef AL_CODEC_H
#define AL_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "al_base.h"

typedef enum {
    AL_CODEC_FP32 = 1,
    AL_CODEC_BF16 = 2,
    AL_CODEC_INT8 = 3,
    AL_CODEC_INT4 = 4,
} al_codec_kind;

#define AL_CODEC_HEADER_BYTES 48
#define AL_CODEC_BLOCK_MIN    8
#define AL_CODEC_BLOCK_MAX    65536
#define AL_CODEC_ZSTD_MIN     (-7) /* zstd's fast negative levels */
#define AL_CODEC_ZSTD_MAX     19

typedef struct al_codec_cfg {
    al_codec_kind kind;
    uint32_t block; /* values per absmax scale (int8/int4), AL_CODEC_BLOCK_MIN..MAX, even */
    int zstd;       /* 0: no zstd; 1: compress with zstd_level */
    int zstd_level; /* AL_CODEC_ZSTD_MIN..AL_CODEC_ZSTD_MAX, 0 meaning zstd's default (3) */
} al_codec_cfg;

/* What a header says, read without decoding the body. */
typedef struct al_codec_info {
    al_codec_kind kind;
    uint32_t block;
    int zstd;
    uint64_t n;
    uint64_t raw_len;
    uint64_t body_len;
    uint64_t checksum;
} al_codec_info;

/* "fp32", "bf16", "int8", "int4" (and "?" for anything else). */
const char *al_codec_name(al_codec_kind kind);
/* Parse "fp32", "bf16", "int8", "int4", optionally suffixed "+zstd", into cfg
 * (block and level keep the values cfg already holds). AL_EINVAL if unknown. */
int al_codec_parse(const char *s, al_codec_cfg *cfg, al_err *err);
/* Check a configuration: known kind, block in range and even, level in range. */
int al_codec_check(const al_codec_cfg *cfg, al_err *err);

/* Bytes of body before zstd for n values. */
uint64_t al_codec_raw_len(const al_codec_cfg *cfg, uint64_t n);
/* Upper bound on the encoded size (header + body, zstd's worst case included). */
size_t al_codec_max_encoded(const al_codec_cfg *cfg, uint64_t n);

/* Encode x[0..n) into out (capacity cap, see al_codec_max_encoded); *out_len
 * receives the bytes written. AL_ENUMERIC if x holds NaN or Inf, AL_EINVAL for
 * a bad configuration or a too-small buffer, AL_ENOMEM. */
int al_codec_encode(const al_codec_cfg *cfg, const float *x, uint64_t n, uint8_t *out, size_t cap,
                    size_t *out_len, al_err *err);

/* Read and check the header of an encoded buffer of `len` bytes (magic,
 * version, kind, block, sizes against len). Does not touch the body. */
int al_codec_peek(const uint8_t *buf, size_t len, al_codec_info *info, al_err *err);

/* Decode buf (len bytes) into x, which must hold exactly `n` values: the header
 * must say n too (AL_EMISMATCH otherwise). AL_EFORMAT for a malformed buffer,
 * AL_EINTEGRITY for a checksum or zstd failure, AL_ENUMERIC for non-finite data. */
int al_codec_decode(const uint8_t *buf, size_t len, float *x, uint64_t n, al_err *err);

/* Largest |x - decode(encode(x))| the codec allows for this x (see the table
 * above); 0 for fp32. x must be finite. */
double al_codec_error_bound(const al_codec_cfg *cfg, const float *x, uint64_t n);

/* XXH64 (Yann Collet's xxHash, 64-bit variant) with a seed: the checksum of
 * codec bodies and of transport chunks. Fast (several GB/s), not cryptographic:
 * it catches corruption, not an attacker -- TLS covers that on the wire. */
uint64_t al_xxh64(const void *data, size_t len, uint64_t seed);

/* The same over data that arrives in pieces: init, update with each piece in
 * order (any sizes), digest = al_xxh64 of the concatenation. */
typedef struct al_xxh64_state {
    uint64_t v[4], seed, total;
    uint8_t buf[32]; /* the tail that is not yet a whole 32-byte stripe */
    uint32_t nbuf;
} al_xxh64_state;
void al_xxh64_init(al_xxh64_state *s, uint64_t seed);
void al_xxh64_update(al_xxh64_state *s, const void *data, size_t len);
uint64_t al_xxh64_digest(const al_xxh64_state *s);

#endif
