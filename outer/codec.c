/* codec.c -- fp32 / bf16 / int8 / int4 (+ zstd) encoding of fp32 vectors.
 * The format and the error bounds are described in al_codec.h. */
#include "al_codec.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#define CODEC_MAGIC   0x44434c41u /* "ALCD" read as a little-endian u32 */
#define CODEC_VERSION 1
#define CODEC_MAX_N   (UINT64_C(1) << 40) /* 4 Ti values: keeps every size computation exact */
#define FLAG_ZSTD     1u

/* ---- XXH64 ---------------------------------------------------------------- */

static const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full,
                      P3 = 0x165667B19E3779F9ull, P4 = 0x85EBCA77C2B2AE63ull,
                      P5 = 0x27D4EB2F165667C5ull;

static inline uint64_t rotl64(uint64_t x, int r) {
    return (x << r) | (x >> (64 - r));
}
static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8); /* little-endian host assumed (x86-64, aarch64) */
    return v;
}
static inline uint32_t rd32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t xxh_round(uint64_t acc, uint64_t in) {
    acc += in * P2;
    acc = rotl64(acc, 31);
    return acc * P1;
}
static inline uint64_t xxh_merge(uint64_t acc, uint64_t v) {
    acc ^= xxh_round(0, v);
    return acc * P1 + P4;
}

/* Four independent lanes over 32-byte stripes (what makes it fast); the
 * stream keeps the lanes and up to 31 bytes not yet a whole stripe. */
static const uint8_t *xxh_stripes(uint64_t v[4], const uint8_t *p, const uint8_t *end) {
    uint64_t v1 = v[0], v2 = v[1], v3 = v[2], v4 = v[3];
    while (end - p >= 32) {
        v1 = xxh_round(v1, rd64(p));
        v2 = xxh_round(v2, rd64(p + 8));
        v3 = xxh_round(v3, rd64(p + 16));
        v4 = xxh_round(v4, rd64(p + 24));
        p += 32;
    }
    v[0] = v1, v[1] = v2, v[2] = v3, v[3] = v4;
    return p;
}

void al_xxh64_init(al_xxh64_state *s, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->seed = seed;
    s->v[0] = seed + P1 + P2;
    s->v[1] = seed + P2;
    s->v[2] = seed;
    s->v[3] = seed - P1;
}

void al_xxh64_update(al_xxh64_state *s, const void *data, size_t len) {
    if (!len) return; /* data may be NULL (protobuf-c's empty bytes) */
    const uint8_t *p = data, *end = p + len;
    s->total += len;
    if (s->nbuf) { /* complete the pending stripe first */
        size_t take = AL_MIN(len, (size_t)32 - s->nbuf);
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += (uint32_t)take;
        p += take;
        if (s->nbuf < 32) return;
        xxh_stripes(s->v, s->buf, s->buf + 32);
        s->nbuf = 0;
    }
    p = xxh_stripes(s->v, p, end);
    memcpy(s->buf, p, (size_t)(end - p));
    s->nbuf = (uint32_t)(end - p);
}

uint64_t al_xxh64_digest(const al_xxh64_state *s) {
    uint64_t h;
    if (s->total >= 32) {
        const uint64_t *v = s->v;
        h = rotl64(v[0], 1) + rotl64(v[1], 7) + rotl64(v[2], 12) + rotl64(v[3], 18);
        for (int i = 0; i < 4; i++) h = xxh_merge(h, v[i]);
    } else {
        h = s->seed + P5;
    }
    h += s->total;
    const uint8_t *p = s->buf, *end = p + s->nbuf;
    for (; p + 8 <= end; p += 8) {
        h ^= xxh_round(0, rd64(p));
        h = rotl64(h, 27) * P1 + P4;
    }
    if (p + 4 <= end) {
        h ^= (uint64_t)rd32(p) * P1;
        h = rotl64(h, 23) * P2 + P3;
        p += 4;
    }
    for (; p < end; p++) {
        h ^= (uint64_t)(*p) * P5;
        h = rotl64(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

uint64_t al_xxh64(const void *data, size_t len, uint64_t seed) {
    al_xxh64_state s;
    al_xxh64_init(&s, seed);
    al_xxh64_update(&s, data, len);
    return al_xxh64_digest(&s);
}

/* ---- configuration ---------------------------------------------------------- */

const char *al_codec_name(al_codec_kind kind) {
    switch (kind) {
    case AL_CODEC_FP32:
        return "fp32";
    case AL_CODEC_BF16:
        return "bf16";
    case AL_CODEC_INT8:
        return "int8";
    case AL_CODEC_INT4:
        return "int4";
    }
    return "?";
}

int al_codec_parse(const char *s, al_codec_cfg *cfg, al_err *err) {
    static const al_codec_kind kinds[] = {AL_CODEC_FP32, AL_CODEC_BF16, AL_CODEC_INT8,
                                          AL_CODEC_INT4};
    for (size_t i = 0; i < AL_ARRAY_LEN(kinds); i++) {
        const char *name = al_codec_name(kinds[i]);
        size_t l = strlen(name);
        if (strncmp(s, name, l)) continue;
        if (s[l] == '\0' || !strcmp(s + l, "+zstd")) {
            cfg->kind = kinds[i];
            cfg->zstd = s[l] != '\0';
            return 0;
        }
    }
    return al_errf(err, AL_EINVAL,
                   "codec '%s' is unknown (fp32, bf16, int8, int4, each optionally +zstd)", s);
}

static int is_quantised(al_codec_kind k) {
    return k == AL_CODEC_INT8 || k == AL_CODEC_INT4;
}

int al_codec_check(const al_codec_cfg *cfg, al_err *err) {
    if (cfg->kind < AL_CODEC_FP32 || cfg->kind > AL_CODEC_INT4)
        return al_errf(err, AL_EINVAL, "codec: kind %d is unknown", (int)cfg->kind);
    if (is_quantised(cfg->kind) &&
        (cfg->block < AL_CODEC_BLOCK_MIN || cfg->block > AL_CODEC_BLOCK_MAX || cfg->block % 2))
        return al_errf(err, AL_EINVAL, "codec %s: block %u must be even and in [%d, %d]",
                       al_codec_name(cfg->kind), cfg->block, AL_CODEC_BLOCK_MIN,
                       AL_CODEC_BLOCK_MAX);
    if (cfg->zstd && (cfg->zstd_level < AL_CODEC_ZSTD_MIN || cfg->zstd_level > AL_CODEC_ZSTD_MAX))
        return al_errf(err, AL_EINVAL, "codec: zstd level %d is outside [%d, %d]", cfg->zstd_level,
                       AL_CODEC_ZSTD_MIN, AL_CODEC_ZSTD_MAX);
    return 0;
}

static uint64_t raw_len_of(al_codec_kind kind, uint32_t block, uint64_t n) {
    switch (kind) {
    case AL_CODEC_FP32:
        return 4 * n;
    case AL_CODEC_BF16:
        return 2 * n;
    case AL_CODEC_INT8:
        return 4 * ((n + block - 1) / block) + n;
    case AL_CODEC_INT4:
        return 4 * ((n + block - 1) / block) + (n + 1) / 2;
    }
    return 0;
}

uint64_t al_codec_raw_len(const al_codec_cfg *cfg, uint64_t n) {
    return raw_len_of(cfg->kind, cfg->block, n);
}

size_t al_codec_max_encoded(const al_codec_cfg *cfg, uint64_t n) {
    uint64_t raw = al_codec_raw_len(cfg, n);
    return AL_CODEC_HEADER_BYTES + (cfg->zstd ? ZSTD_compressBound(raw) : raw);
}

/* ---- the body: quantise and dequantise ------------------------------------- */

/* bf16 = the top half of an fp32, rounded to nearest even. A value so large
 * that rounding would carry it to Inf is truncated instead (stays finite). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    if ((r & 0x7F80u) == 0x7F80u) r = u >> 16;
    return (uint16_t)r;
}
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round half away from zero: vectorises, unlike lrintf, and is deterministic. */
static inline int32_t round_q(float v, int32_t qmax) {
    int32_t q = (int32_t)(v + (v >= 0.0f ? 0.5f : -0.5f));
    return q > qmax ? qmax : (q < -qmax ? -qmax : q);
}

static float block_absmax(const float *x, uint64_t len) {
    float a = 0.0f;
    for (uint64_t i = 0; i < len; i++) a = fmaxf(a, fabsf(x[i]));
    return a;
}

/* Write the unpacked body of n values into raw (al_codec_raw_len bytes). */
static void quantise(const al_codec_cfg *cfg, const float *x, uint64_t n, uint8_t *raw) {
    if (cfg->kind == AL_CODEC_FP32) {
        memcpy(raw, x, 4 * n);
        return;
    }
    if (cfg->kind == AL_CODEC_BF16) {
        for (uint64_t i = 0; i < n; i++) {
            uint16_t h = f32_to_bf16(x[i]);
            memcpy(raw + 2 * i, &h, 2);
        }
        return;
    }
    int32_t qmax = cfg->kind == AL_CODEC_INT8 ? 127 : 7;
    uint64_t nb = (n + cfg->block - 1) / cfg->block;
    uint8_t *scales = raw, *q = raw + 4 * nb;
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t lo = b * cfg->block, len = AL_MIN((uint64_t)cfg->block, n - lo);
        float a = block_absmax(x + lo, len);
        float s = a / (float)qmax, inv = a > 0.0f ? (float)qmax / a : 0.0f;
        /* near FLT_MAX, qmax * s could round up to Inf: step s down until it cannot */
        while (!isfinite(s * (float)qmax)) s = nextafterf(s, 0.0f);
        memcpy(scales + 4 * b, &s, 4);
        if (cfg->kind == AL_CODEC_INT8) {
            for (uint64_t i = 0; i < len; i++)
                q[lo + i] = (uint8_t)(int8_t)round_q(x[lo + i] * inv, qmax);
        } else {
            /* blocks are even-sized, so a block never shares a byte with the next */
            for (uint64_t i = 0; i < len; i += 2) {
                uint8_t v0 = (uint8_t)(round_q(x[lo + i] * inv, qmax) + 8);
                uint8_t v1 = i + 1 < len ? (uint8_t)(round_q(x[lo + i + 1] * inv, qmax) + 8) : 0;
                q[(lo + i) / 2] = (uint8_t)(v0 | (v1 << 4));
            }
        }
    }
}

/* Inverse of quantise, checking everything a corrupted body could hold. */
static int dequantise(al_codec_kind kind, uint32_t block, const uint8_t *raw, uint64_t n, float *x,
                      al_err *err) {
    if (kind == AL_CODEC_FP32 || kind == AL_CODEC_BF16) {
        int bad = 0;
        if (kind == AL_CODEC_FP32) {
            if ((const void *)raw != (void *)x) memcpy(x, raw, 4 * n);
        } else {
            for (uint64_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, raw + 2 * i, 2);
                x[i] = bf16_to_f32(h);
            }
        }
        for (uint64_t i = 0; i < n; i++) bad |= !isfinite(x[i]);
        if (bad) return al_errf(err, AL_ENUMERIC, "codec decode: body holds NaN or Inf");
        return 0;
    }
    uint64_t nb = (n + block - 1) / block;
    const uint8_t *q = raw + 4 * nb;
    for (uint64_t b = 0; b < nb; b++) {
        float s;
        memcpy(&s, raw + 4 * b, 4);
        float qm = kind == AL_CODEC_INT8 ? 127.0f : 7.0f;
        if (!isfinite(s) || s < 0.0f || !isfinite(s * qm))
            return al_errf(err, AL_EFORMAT, "codec decode: block %llu has scale %g",
                           (unsigned long long)b, (double)s);
        uint64_t lo = b * block, len = AL_MIN((uint64_t)block, n - lo);
        int bad = 0;
        if (kind == AL_CODEC_INT8) {
            for (uint64_t i = 0; i < len; i++) {
                int8_t v = (int8_t)q[lo + i];
                bad |= v == -128;
                x[lo + i] = (float)v * s;
            }
        } else {
            for (uint64_t i = 0; i < len; i += 2) {
                uint8_t byte = q[(lo + i) / 2], v0 = byte & 15u, v1 = byte >> 4;
                bad |= v0 == 0;
                x[lo + i] = (float)((int)v0 - 8) * s;
                if (i + 1 < len) {
                    bad |= v1 == 0;
                    x[lo + i + 1] = (float)((int)v1 - 8) * s;
                } else {
                    bad |= v1 != 0; /* the padding nibble of an odd tail */
                }
            }
        }
        if (bad)
            return al_errf(err, AL_EFORMAT, "codec decode: block %llu holds an invalid %s code",
                           (unsigned long long)b, al_codec_name(kind));
    }
    return 0;
}

/* ---- header ------------------------------------------------------------------ */

static void put32(uint8_t *p, uint32_t v) {
    memcpy(p, &v, 4);
}
static void put64(uint8_t *p, uint64_t v) {
    memcpy(p, &v, 8);
}

int al_codec_peek(const uint8_t *buf, size_t len, al_codec_info *info, al_err *err) {
    if (len < AL_CODEC_HEADER_BYTES)
        return al_errf(err, AL_EFORMAT, "codec header: %zu bytes, need %d", len,
                       AL_CODEC_HEADER_BYTES);
    if (rd32(buf) != CODEC_MAGIC) return al_errf(err, AL_EFORMAT, "codec header: bad magic");
    if (buf[4] != CODEC_VERSION)
        return al_errf(err, AL_EFORMAT, "codec header: version %u, this build reads %d", buf[4],
                       CODEC_VERSION);
    if (buf[5] < AL_CODEC_FP32 || buf[5] > AL_CODEC_INT4)
        return al_errf(err, AL_EFORMAT, "codec header: unknown codec %u", buf[5]);
    if ((buf[6] & ~FLAG_ZSTD) || buf[7] || rd32(buf + 12))
        return al_errf(err, AL_EFORMAT, "codec header: unknown flags or nonzero reserved bytes");
    memset(info, 0, sizeof *info);
    info->kind = (al_codec_kind)buf[5];
    info->zstd = buf[6] & FLAG_ZSTD;
    info->block = rd32(buf + 8);
    info->n = rd64(buf + 16);
    info->raw_len = rd64(buf + 24);
    info->body_len = rd64(buf + 32);
    info->checksum = rd64(buf + 40);
    if (is_quantised(info->kind) ? (info->block < AL_CODEC_BLOCK_MIN ||
                                    info->block > AL_CODEC_BLOCK_MAX || info->block % 2)
                                 : info->block != 0)
        return al_errf(err, AL_EFORMAT, "codec header: block %u is invalid for %s", info->block,
                       al_codec_name(info->kind));
    if (info->n > CODEC_MAX_N)
        return al_errf(err, AL_EFORMAT, "codec header: n = %llu is too large",
                       (unsigned long long)info->n);
    if (info->raw_len != raw_len_of(info->kind, info->block, info->n))
        return al_errf(err, AL_EFORMAT,
                       "codec header: raw length %llu, %s of %llu values needs %llu",
                       (unsigned long long)info->raw_len, al_codec_name(info->kind),
                       (unsigned long long)info->n,
                       (unsigned long long)raw_len_of(info->kind, info->block, info->n));
    if (info->body_len != len - AL_CODEC_HEADER_BYTES)
        return al_errf(err, AL_EFORMAT, "codec header: body of %llu bytes, buffer has %zu",
                       (unsigned long long)info->body_len, len - AL_CODEC_HEADER_BYTES);
    if (!info->zstd && info->body_len != info->raw_len)
        return al_errf(err, AL_EFORMAT, "codec header: uncompressed body %llu != raw length %llu",
                       (unsigned long long)info->body_len, (unsigned long long)info->raw_len);
    return 0;
}

/* ---- encode / decode ------------------------------------------------------------ */

int al_codec_encode(const al_codec_cfg *cfg, const float *x, uint64_t n, uint8_t *out, size_t cap,
                    size_t *out_len, al_err *err) {
    int rc = al_codec_check(cfg, err);
    if (rc) return rc;
    if (n > CODEC_MAX_N)
        return al_errf(err, AL_EINVAL, "codec encode: n = %llu too large", (unsigned long long)n);
    if (cap < al_codec_max_encoded(cfg, n))
        return al_errf(err, AL_EINVAL, "codec encode: buffer of %zu bytes, need up to %zu", cap,
                       al_codec_max_encoded(cfg, n));
    int finite = 1;
    for (uint64_t i = 0; i < n; i++) finite &= isfinite(x[i]) != 0;
    if (!finite) return al_errf(err, AL_ENUMERIC, "codec encode: input holds NaN or Inf");

    uint64_t raw_len = al_codec_raw_len(cfg, n), body_len = raw_len;
    uint8_t *body = out + AL_CODEC_HEADER_BYTES;
    if (!cfg->zstd) {
        quantise(cfg, x, n, body);
    } else {
        /* fp32 compresses straight from x; the others need their packed body first */
        uint8_t *raw = NULL;
        const void *src = x;
        if (cfg->kind != AL_CODEC_FP32) {
            raw = malloc(raw_len ? raw_len : 1);
            if (!raw)
                return al_errf(err, AL_ENOMEM, "codec encode: %llu bytes",
                               (unsigned long long)raw_len);
            quantise(cfg, x, n, raw);
            src = raw;
        }
        size_t z = ZSTD_compress(body, cap - AL_CODEC_HEADER_BYTES, src, raw_len,
                                 cfg->zstd_level ? cfg->zstd_level : ZSTD_CLEVEL_DEFAULT);
        free(raw);
        if (ZSTD_isError(z))
            return al_errf(err, AL_EIO, "codec encode: zstd: %s", ZSTD_getErrorName(z));
        body_len = z;
    }
    memset(out, 0, AL_CODEC_HEADER_BYTES);
    put32(out, CODEC_MAGIC);
    out[4] = CODEC_VERSION;
    out[5] = (uint8_t)cfg->kind;
    out[6] = cfg->zstd ? FLAG_ZSTD : 0;
    put32(out + 8, is_quantised(cfg->kind) ? cfg->block : 0);
    put64(out + 16, n);
    put64(out + 24, raw_len);
    put64(out + 32, body_len);
    put64(out + 40, al_xxh64(body, body_len, 0));
    *out_len = AL_CODEC_HEADER_BYTES + body_len;
    return 0;
}

int al_codec_decode(const uint8_t *buf, size_t len, float *x, uint64_t n, al_err *err) {
    al_codec_info h;
    int rc = al_codec_peek(buf, len, &h, err);
    if (rc) return rc;
    if (h.n != n)
        return al_errf(err, AL_EMISMATCH, "codec decode: buffer holds %llu values, expected %llu",
                       (unsigned long long)h.n, (unsigned long long)n);
    const uint8_t *body = buf + AL_CODEC_HEADER_BYTES;
    if (al_xxh64(body, h.body_len, 0) != h.checksum)
        return al_errf(err, AL_EINTEGRITY, "codec decode: checksum mismatch over %llu bytes",
                       (unsigned long long)h.body_len);
    if (!h.zstd) return dequantise(h.kind, h.block, body, n, x, err);

    unsigned long long fcs = ZSTD_getFrameContentSize(body, h.body_len);
    if (fcs != h.raw_len)
        return al_errf(err, AL_EINTEGRITY,
                       "codec decode: zstd frame declares %lld bytes, need %llu", (long long)fcs,
                       (unsigned long long)h.raw_len);
    /* fp32 inflates straight into x: no second copy of the vector */
    uint8_t *raw = h.kind == AL_CODEC_FP32 ? (uint8_t *)x : malloc(h.raw_len ? h.raw_len : 1);
    if (!raw)
        return al_errf(err, AL_ENOMEM, "codec decode: %llu bytes", (unsigned long long)h.raw_len);
    size_t z = ZSTD_decompress(raw, h.raw_len, body, h.body_len);
    if (ZSTD_isError(z) || z != h.raw_len) {
        rc = al_errf(err, AL_EINTEGRITY, "codec decode: zstd: %s",
                     ZSTD_isError(z) ? ZSTD_getErrorName(z) : "short frame");
    } else {
        rc = dequantise(h.kind, h.block, raw, n, x, err);
    }
    if ((void *)raw != (void *)x) free(raw);
    return rc;
}

double al_codec_error_bound(const al_codec_cfg *cfg, const float *x, uint64_t n) {
    double amax = 0;
    for (uint64_t i = 0; i < n; i++) amax = fmax(amax, fabs((double)x[i]));
    /* a few fp32 ulps of A cover the rounding of x * (q/A) and of q * s */
    double slack = 4.0 * FLT_EPSILON * amax;
    switch (cfg->kind) {
    case AL_CODEC_FP32:
        return 0.0;
    case AL_CODEC_BF16:
        return amax / 256.0 + 0x1p-134;
    case AL_CODEC_INT8:
        return amax / 254.0 + slack;
    case AL_CODEC_INT4:
        return amax / 14.0 + slack;
    }
    return INFINITY;
}
