/*
 * test_codec.c -- every codec, with and without zstd: the round trip stays
 * within the documented bound (checked per block, per element), encoding is
 * deterministic, int4+zstd is >= 7x smaller than fp32, and every malformed
 * buffer a decoder can meet is refused with the right code.
 */
#include "al_test.h"

#include <float.h>
#include <string.h>

#include "al_codec.h"

/* Vectors with a wide spread of block scales, like a real pseudo-gradient. */
static float *make_vec(uint64_t n, uint64_t seed) {
    al_rng r;
    al_rng_seed(&r, seed);
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (uint64_t i = 0; i < n; i++) {
        double scale = pow(10.0, -4.0 + 4.0 * (double)((i / 97) % 5) / 4.0);
        x[i] = (float)(scale * al_rng_normal(&r));
    }
    return x;
}

static uint8_t *encode(const al_codec_cfg *cfg, const float *x, uint64_t n, size_t *len) {
    size_t cap = al_codec_max_encoded(cfg, n);
    uint8_t *buf = malloc(cap);
    al_err err = {0};
    int rc = al_codec_encode(cfg, x, n, buf, cap, len, &err);
    if (rc) fail_msg("encode %s: %s", al_codec_name(cfg->kind), err.msg);
    return buf;
}

/* Per-element bound for the block holding element i (see al_codec.h). */
static double elem_bound(const al_codec_cfg *cfg, const float *x, uint64_t n, uint64_t i) {
    if (cfg->kind == AL_CODEC_FP32) return 0;
    if (cfg->kind == AL_CODEC_BF16) return fabs((double)x[i]) / 256.0 + 0x1p-134;
    uint64_t lo = i / cfg->block * cfg->block, hi = AL_MIN(lo + cfg->block, n);
    double a = 0;
    for (uint64_t k = lo; k < hi; k++) a = fmax(a, fabs((double)x[k]));
    return a / (cfg->kind == AL_CODEC_INT8 ? 254.0 : 14.0) + 4.0 * FLT_EPSILON * a;
}

static void round_trip(al_codec_kind kind, int zstd, uint32_t block, uint64_t n) {
    al_codec_cfg cfg = {.kind = kind, .block = block, .zstd = zstd, .zstd_level = 3};
    float *x = make_vec(n, 42 + n), *y = malloc((n ? n : 1) * sizeof(float));
    size_t len, len2;
    uint8_t *buf = encode(&cfg, x, n, &len), *buf2 = encode(&cfg, x, n, &len2);
    assert_int_equal(len, len2);
    assert_memory_equal(buf, buf2, len); /* deterministic */
    al_err err = {0};
    int rc = al_codec_decode(buf, len, y, n, &err);
    if (rc) fail_msg("decode %s n=%llu: %s", al_codec_name(kind), (unsigned long long)n, err.msg);
    double worst = 0; /* largest error as a fraction of its element's bound */
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - (double)y[i]), b = elem_bound(&cfg, x, n, i);
        if (e > b)
            fail_msg("%s%s n=%llu i=%llu: |%g - %g| = %g above bound %g", al_codec_name(kind),
                     zstd ? "+zstd" : "", (unsigned long long)n, (unsigned long long)i,
                     (double)x[i], (double)y[i], e, b);
        if (b > 0 && e / b > worst) worst = e / b;
    }
    double whole = 0;
    for (uint64_t i = 0; i < n; i++) whole = fmax(whole, fabs((double)x[i] - (double)y[i]));
    assert_true(whole <= al_codec_error_bound(&cfg, x, n));
    if (n > 1000)
        print_message("  %s%-5s n=%-6llu %8zu bytes  worst error %.3f of bound\n",
                      al_codec_name(kind), zstd ? "+zstd" : "", (unsigned long long)n, len, worst);
    free(x);
    free(y);
    free(buf);
    free(buf2);
}

static void test_round_trips(void **state) {
    (void)state;
    static const al_codec_kind kinds[] = {AL_CODEC_FP32, AL_CODEC_BF16, AL_CODEC_INT8,
                                          AL_CODEC_INT4};
    static const uint64_t sizes[] = {0, 1, 7, 64, 1000, 100003};
    for (size_t k = 0; k < AL_ARRAY_LEN(kinds); k++)
        for (int z = 0; z < 2; z++)
            for (size_t s = 0; s < AL_ARRAY_LEN(sizes); s++) round_trip(kinds[k], z, 128, sizes[s]);
    round_trip(AL_CODEC_INT4, 1, 8, 1001); /* smallest block, odd tail */
    round_trip(AL_CODEC_INT8, 0, 256, 1001);
}

static void test_extremes(void **state) {
    (void)state;
    /* all zero, a lone spike, values at the top of the fp32 range */
    float x[10] = {0}, y[10];
    x[3] = FLT_MAX;
    x[4] = -FLT_MAX;
    x[5] = FLT_MIN;
    al_codec_kind kinds[] = {AL_CODEC_BF16, AL_CODEC_INT8, AL_CODEC_INT4};
    for (size_t k = 0; k < 3; k++) {
        al_codec_cfg cfg = {.kind = kinds[k], .block = 8, .zstd = 0};
        size_t len;
        uint8_t *buf = encode(&cfg, x, 10, &len);
        al_err err = {0};
        assert_int_equal(al_codec_decode(buf, len, y, 10, &err), 0);
        for (int i = 0; i < 10; i++) assert_true(isfinite(y[i]));
        assert_true(y[3] > 0 && y[4] < 0);
        free(buf);
    }
}

static void test_int4_ratio(void **state) {
    (void)state;
    uint64_t n = 1 << 20;
    float *x = make_vec(n, 7);
    al_codec_cfg f32 = {.kind = AL_CODEC_FP32, .zstd = 0};
    al_codec_cfg i4 = {.kind = AL_CODEC_INT4, .block = 128, .zstd = 1, .zstd_level = 3};
    size_t lf, l4;
    uint8_t *bf = encode(&f32, x, n, &lf), *b4 = encode(&i4, x, n, &l4);
    double ratio = (double)lf / (double)l4;
    print_message("  fp32 %zu bytes, int4+zstd %zu bytes: %.2fx\n", lf, l4, ratio);
    assert_true(ratio >= 7.0);
    free(x);
    free(bf);
    free(b4);
}

static void test_xxh64_vectors(void **state) {
    (void)state;
    /* published XXH64 test values */
    assert_true(al_xxh64("", 0, 0) == 0xEF46DB3751D8E999ull);
    assert_true(al_xxh64(NULL, 0, 0) == 0xEF46DB3751D8E999ull); /* protobuf-c's empty bytes */
    assert_true(al_xxh64("abc", 3, 0) == 0x44BC2CF5AD770999ull);
    const char *s = "Nobody inspects the spammish repetition";
    assert_true(al_xxh64(s, strlen(s), 0) == 0xFBCEA83C8A378BF1ull);
}

/* The streaming form gives the one-shot digest however the data is cut:
 * pieces of 0, 1, 31, 32, 33 bytes and random sizes, over lengths that end
 * inside and on stripe boundaries. */
static void test_xxh64_stream(void **state) {
    (void)state;
    uint8_t buf[3000];
    al_rng rng;
    al_rng_seed(&rng, 7);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)al_rng_u64(&rng);
    static const size_t lens[] = {0, 1, 5, 31, 32, 33, 63, 64, 65, 100, 1000, 2999, 3000};
    static const size_t fixed[] = {1, 31, 32, 33, 7};
    for (size_t li = 0; li < AL_ARRAY_LEN(lens); li++) {
        size_t len = lens[li];
        uint64_t want = al_xxh64(buf, len, 42);
        for (size_t mode = 0; mode < AL_ARRAY_LEN(fixed) + 1; mode++) {
            al_xxh64_state s;
            al_xxh64_init(&s, 42);
            al_xxh64_update(&s, NULL, 0); /* an empty piece changes nothing */
            for (size_t off = 0; off < len;) {
                size_t k = mode < AL_ARRAY_LEN(fixed) ? fixed[mode] : al_rng_u64(&rng) % 80;
                if (k > len - off) k = len - off;
                al_xxh64_update(&s, buf + off, k);
                off += k;
            }
            assert_true(al_xxh64_digest(&s) == want);
        }
    }
    /* and the published value, streamed */
    al_xxh64_state s;
    al_xxh64_init(&s, 0);
    al_xxh64_update(&s, "Nobody inspects ", 16);
    al_xxh64_update(&s, "the spammish repetition", 23);
    assert_true(al_xxh64_digest(&s) == 0xFBCEA83C8A378BF1ull);
}

/* ---- rejections -------------------------------------------------------------- */

static void rechecksum(uint8_t *buf, size_t len) {
    uint64_t c = al_xxh64(buf + AL_CODEC_HEADER_BYTES, len - AL_CODEC_HEADER_BYTES, 0);
    memcpy(buf + 40, &c, 8);
}

static int decode_code(const uint8_t *buf, size_t len, uint64_t n) {
    float *y = malloc((n ? n : 1) * sizeof(float));
    al_err err = {0};
    int rc = al_codec_decode(buf, len, y, n, &err);
    if (rc) {
        assert_true(err.msg[0] != '\0');
        print_message("    refused (%s): %s\n", al_errname(rc), err.msg);
    }
    free(y);
    return rc;
}

static void test_decode_rejects(void **state) {
    (void)state;
    enum { N = 300 };
    float *x = make_vec(N, 3);
    al_codec_cfg i8 = {.kind = AL_CODEC_INT8, .block = 64};
    al_codec_cfg i4 = {.kind = AL_CODEC_INT4, .block = 64};
    al_codec_cfg f32z = {.kind = AL_CODEC_FP32, .zstd = 1, .zstd_level = 1};
    size_t len, l4, lz;
    uint8_t *good = encode(&i8, x, N, &len), *b4 = encode(&i4, x, N - 1, &l4),
            *bz = encode(&f32z, x, N, &lz);
    uint8_t *b = malloc(len + 16);
#define FRESH() memcpy(b, good, len)

    assert_int_equal(decode_code(good, 10, N), AL_EFORMAT); /* truncated header */
    FRESH();
    b[0] ^= 1;
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT); /* magic */
    FRESH();
    b[4] = 2;
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT); /* version */
    FRESH();
    b[5] = 9;
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT); /* unknown codec */
    FRESH();
    b[6] = 4;
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT); /* unknown flag */
    FRESH();
    b[8] = 7; /* odd block */
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT);
    assert_int_equal(decode_code(good, len - 1, N), AL_EFORMAT);   /* truncated body */
    assert_int_equal(decode_code(good, len, N + 1), AL_EMISMATCH); /* wrong size */
    FRESH();
    uint64_t bign = UINT64_C(1) << 41;
    memcpy(b + 16, &bign, 8);
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT); /* absurd n */
    FRESH();
    b[len - 1] ^= 0x40;
    assert_int_equal(decode_code(b, len, N), AL_EINTEGRITY); /* checksum */
    FRESH();
    float nan = NAN;
    memcpy(b + AL_CODEC_HEADER_BYTES, &nan, 4); /* first scale */
    rechecksum(b, len);
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT);
    FRESH();
    b[AL_CODEC_HEADER_BYTES + 4 * 5 + 10] = 0x80; /* int8 code -128 */
    rechecksum(b, len);
    assert_int_equal(decode_code(b, len, N), AL_EFORMAT);

    uint8_t *c = malloc(l4);
    memcpy(c, b4, l4);
    c[l4 - 1] |= 0xF0; /* N - 1 = 299 values: the last high nibble is padding */
    rechecksum(c, l4);
    assert_int_equal(decode_code(c, l4, N - 1), AL_EFORMAT);
    memcpy(c, b4, l4);
    c[AL_CODEC_HEADER_BYTES + 4 * 5] &= 0xF0; /* nibble 0 is not a code */
    rechecksum(c, l4);
    assert_int_equal(decode_code(c, l4, N - 1), AL_EFORMAT);

    uint8_t *z = malloc(lz);
    memcpy(z, bz, lz);
    z[AL_CODEC_HEADER_BYTES] ^= 0xFF; /* break the zstd frame's magic, fix the checksum */
    rechecksum(z, lz);
    assert_int_equal(decode_code(z, lz, N), AL_EINTEGRITY);
    memcpy(z, bz, lz);
    z[lz - 1] ^= 0xFF; /* a frame cut short: a wrong last block */
    rechecksum(z, lz);
    int rc = decode_code(z, lz, N);
    assert_true(rc == AL_EINTEGRITY || rc == AL_ENUMERIC || rc == 0); /* zstd may not notice */

    /* fp32 body holding an Inf */
    al_codec_cfg f32 = {.kind = AL_CODEC_FP32};
    size_t lf;
    uint8_t *bf = encode(&f32, x, N, &lf);
    float inf = INFINITY;
    memcpy(bf + AL_CODEC_HEADER_BYTES + 8, &inf, 4);
    rechecksum(bf, lf);
    assert_int_equal(decode_code(bf, lf, N), AL_ENUMERIC);
#undef FRESH
    free(x);
    free(good);
    free(b4);
    free(bz);
    free(b);
    free(c);
    free(z);
    free(bf);
}

static void test_encode_rejects(void **state) {
    (void)state;
    float x[4] = {1, 2, NAN, 4};
    uint8_t buf[256];
    size_t len;
    al_err err = {0};
    al_codec_cfg cfg = {.kind = AL_CODEC_INT8, .block = 64};
    assert_int_equal(al_codec_encode(&cfg, x, 4, buf, sizeof buf, &len, &err), AL_ENUMERIC);
    x[2] = 3;
    assert_int_equal(al_codec_encode(&cfg, x, 4, buf, 10, &len, &err), AL_EINVAL); /* small */
    cfg.block = 63;
    assert_int_equal(al_codec_encode(&cfg, x, 4, buf, sizeof buf, &len, &err), AL_EINVAL);
    cfg = (al_codec_cfg){.kind = (al_codec_kind)7};
    assert_int_equal(al_codec_encode(&cfg, x, 4, buf, sizeof buf, &len, &err), AL_EINVAL);
    cfg = (al_codec_cfg){.kind = AL_CODEC_FP32, .zstd = 1, .zstd_level = 40};
    assert_int_equal(al_codec_encode(&cfg, x, 4, buf, sizeof buf, &len, &err), AL_EINVAL);
    print_message("    last refusal: %s\n", err.msg);
}

static void test_parse(void **state) {
    (void)state;
    al_codec_cfg cfg = {.block = 128, .zstd_level = 3};
    al_err err = {0};
    assert_int_equal(al_codec_parse("int4+zstd", &cfg, &err), 0);
    assert_int_equal(cfg.kind, AL_CODEC_INT4);
    assert_int_equal(cfg.zstd, 1);
    assert_int_equal(cfg.block, 128);
    assert_int_equal(al_codec_parse("bf16", &cfg, &err), 0);
    assert_int_equal(cfg.zstd, 0);
    assert_int_equal(al_codec_parse("int3", &cfg, &err), AL_EINVAL);
    assert_int_equal(al_codec_parse("fp32+gzip", &cfg, &err), AL_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xxh64_vectors),  cmocka_unit_test(test_xxh64_stream),
        cmocka_unit_test(test_round_trips),    cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_int4_ratio),     cmocka_unit_test(test_decode_rejects),
        cmocka_unit_test(test_encode_rejects), cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
