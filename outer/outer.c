/*
 * outer.c -- the outer optimizer: DiLoCo's Nesterov SGD and the AutoLoCo
 * correction, the pseudo-gradient, and the outer state's hash and save/load.
 *
 * The maths (DESIGN.md §4). DiLoCo, in PyTorch's Nesterov form, treats the
 * mean pseudo-gradient Δ̄ of a round as a gradient:
 *     b ← μ·b + Δ̄;   θ ← θ − α·(Δ̄ + μ·b)
 * Its momentum decays by μ per round and every round adds one Δ̄, which
 * silently assumes each round carries the same inner progress. Measure that
 * progress by the accumulated inner learning rate S_r = Σ η_t of the interval;
 * a DiLoCo interval carries S_ref = H_base·η_peak. The AutoLoCo correction
 * works per unit of progress instead: g = Δ̄/S_r is the pseudo-gradient per
 * unit of accumulated lr, and an interval of s = S_r/S_ref DiLoCo intervals
 *  - decays the momentum by μ_r = μ^s (as s DiLoCo rounds would),
 *  - adds g with weight w_r = (1 − μ_r)/(1 − μ): under a constant g the
 *    momentum's fixed point is m* = w_r·g/(1 − μ_r) = g/(1 − μ) for every s,
 *    the same as DiLoCo's b* divided by S_ref, so short intervals do not pump it up,
 *  - moves θ by α·S_r·(g + μ_r·m): proportional to the progress made.
 * At s = 1: μ_r = μ, w_r = 1 and m·S_ref follows b exactly (up to rounding).
 */
#include "al_outer.h"

/* (SHA256_Init and friends: deprecated in OpenSSL 3, but they need no heap
 * context, so hashing θ cannot fail; they use the same SHA-NI code) */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t al_find_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

double al_sq_norm(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s = fma((double)x[i], (double)x[i], s);
    return s;
}

int al_pseudo_grad(float *delta, const float *theta_global, const float *theta_local, size_t n,
                   double *sq, al_err *err) {
    if ((!delta || !theta_global || !theta_local) && n)
        return al_errf(err, AL_EINVAL, "pseudo-gradient: NULL vector");
    for (size_t i = 0; i < n; i++) delta[i] = theta_global[i] - theta_local[i];
    size_t bad = al_find_nonfinite(delta, n);
    if (bad < n)
        return al_errf(err, AL_ENUMERIC,
                       "pseudo-gradient: non-finite value %g at index %zu of %zu (local %g)",
                       (double)delta[bad], bad, n, (double)theta_local[bad]);
    if (sq) *sq = al_sq_norm(delta, n);
    return 0;
}

/* ---- configuration ---------------------------------------------------------------- */

void al_outer_cfg_default(al_outer_cfg *c) {
    c->lr = 0.7;
    c->momentum = 0.9;
    c->correction = AL_CORRECTION_AUTOLOCO;
    c->s_ref = 0.0;
}

const char *al_correction_name(al_correction c) {
    return c == AL_CORRECTION_NONE ? "none" : "autoloco";
}

static int parse_double(const char *key, const char *value, double *out, al_err *err) {
    char *end;
    errno = 0;
    double v = strtod(value ? value : "", &end);
    if (!value || end == value || *end || errno == ERANGE || !isfinite(v))
        return al_errf(err, AL_ECONFIG, "outer: key '%s': '%s' is not a finite number", key,
                       value ? value : "(null)");
    *out = v;
    return 0;
}

int al_outer_cfg_set(al_outer_cfg *c, const char *key, const char *value, al_err *err) {
    double v = 0;
    int rc;
    if (!key) return al_errf(err, AL_ECONFIG, "outer: NULL key");
    if (!strcmp(key, "correction")) {
        if (value && !strcmp(value, "autoloco"))
            c->correction = AL_CORRECTION_AUTOLOCO;
        else if (value && !strcmp(value, "none"))
            c->correction = AL_CORRECTION_NONE;
        else
            return al_errf(err, AL_ECONFIG,
                           "outer: key 'correction': '%s' is not one of autoloco, none",
                           value ? value : "(null)");
        return 0;
    }
    if (!strcmp(key, "lr")) {
        if ((rc = parse_double(key, value, &v, err))) return rc;
        if (!(v > 0)) return al_errf(err, AL_ECONFIG, "outer: key 'lr': %g must be > 0", v);
        c->lr = v;
        return 0;
    }
    if (!strcmp(key, "momentum")) {
        if ((rc = parse_double(key, value, &v, err))) return rc;
        if (!(v >= 0 && v < 1))
            return al_errf(err, AL_ECONFIG, "outer: key 'momentum': %g must be in [0, 1)", v);
        c->momentum = v;
        return 0;
    }
    if (!strcmp(key, "s_ref")) {
        if ((rc = parse_double(key, value, &v, err))) return rc;
        if (!(v > 0)) return al_errf(err, AL_ECONFIG, "outer: key 's_ref': %g must be > 0", v);
        c->s_ref = v;
        return 0;
    }
    return al_errf(err, AL_ECONFIG,
                   "outer: unknown key '%s' (known: lr, momentum, correction, s_ref)", key);
}

int al_outer_cfg_check(const al_outer_cfg *c, al_err *err) {
    if (!(isfinite(c->lr) && c->lr > 0))
        return al_errf(err, AL_ECONFIG, "outer: lr %g must be finite and > 0", c->lr);
    if (!(c->momentum >= 0 && c->momentum < 1))
        return al_errf(err, AL_ECONFIG, "outer: momentum %g must be in [0, 1)", c->momentum);
    if (c->correction != AL_CORRECTION_NONE && c->correction != AL_CORRECTION_AUTOLOCO)
        return al_errf(err, AL_ECONFIG, "outer: unknown correction %d", (int)c->correction);
    if (c->correction == AL_CORRECTION_AUTOLOCO && !(isfinite(c->s_ref) && c->s_ref > 0))
        return al_errf(err, AL_ECONFIG,
                       "outer: correction autoloco needs s_ref = h_base*lr_peak > 0 (got %g)",
                       c->s_ref);
    return 0;
}

int al_outer_coefs_for(const al_outer_cfg *c, double s_r, al_outer_coefs *k, al_err *err) {
    if (!isfinite(s_r))
        return al_errf(err, AL_ENUMERIC, "outer step: S_r (accumulated inner lr) is %g", s_r);
    if (c->correction == AL_CORRECTION_NONE) {
        *k = (al_outer_coefs){.mu = c->momentum, .w = 1.0, .scale = c->lr, .div = 1.0};
        return 0;
    }
    if (!(s_r > 0))
        return al_errf(err, AL_EINVAL, "outer step: S_r (accumulated inner lr) %g must be > 0",
                       s_r);
    double s = s_r / c->s_ref; /* interval length in DiLoCo intervals */
    double mu_r = pow(c->momentum, s);
    /* μ = 0: no momentum at all (μ_r = 0, w_r = 1). */
    double w_r = (1.0 - mu_r) / (1.0 - c->momentum);
    *k = (al_outer_coefs){.mu = mu_r, .w = w_r, .scale = c->lr * s_r, .div = s_r};
    if (!isfinite(k->mu) || !isfinite(k->w) || !isfinite(k->scale))
        return al_errf(err, AL_ENUMERIC, "outer step: coefficients not finite for S_r %g", s_r);
    return 0;
}

/* ---- state ------------------------------------------------------------------------ */

int al_outer_init(al_outer *o, const al_outer_cfg *cfg, const float *theta0, size_t n,
                  al_err *err) {
    int rc = al_outer_cfg_check(cfg, err);
    if (rc) return rc;
    if (n == 0 || !theta0) return al_errf(err, AL_EINVAL, "outer: empty parameter vector");
    size_t bad = al_find_nonfinite(theta0, n);
    if (bad < n) return al_errf(err, AL_ENUMERIC, "outer: theta0[%zu] is not finite", bad);
    memset(o, 0, sizeof *o);
    o->theta = malloc(n * sizeof(float));
    o->mom = calloc(n, sizeof(float));
    if (!o->theta || !o->mom) {
        free(o->theta);
        free(o->mom);
        memset(o, 0, sizeof *o);
        return al_errf(err, AL_ENOMEM, "outer: cannot allocate 2 x %zu floats", n);
    }
    memcpy(o->theta, theta0, n * sizeof(float));
    o->cfg = *cfg;
    o->n = n;
    return 0;
}

void al_outer_free(al_outer *o) {
    if (!o) return;
    free(o->theta);
    free(o->mom);
    memset(o, 0, sizeof *o);
}

int al_outer_step_part(al_outer *o, const float *dbar, size_t lo, size_t hi, double s_r,
                       al_err *err) {
    if (lo > hi || hi > o->n)
        return al_errf(err, AL_EINVAL, "outer step: part [%zu, %zu) is not within [0, %zu)", lo, hi,
                       o->n);
    al_outer_coefs k;
    int rc = al_outer_coefs_for(&o->cfg, s_r, &k, err);
    if (rc) return rc;
    size_t n = hi - lo, bad = al_find_nonfinite(dbar, n);
    if (bad < n)
        return al_errf(err, AL_ENUMERIC,
                       "outer step: mean pseudo-gradient has non-finite value %g at index %zu; "
                       "state untouched",
                       (double)dbar[bad], lo + bad);
    float *restrict th = o->theta + lo, *restrict mb = o->mom + lo;
    if (o->cfg.correction == AL_CORRECTION_NONE) {
        const float mu = (float)k.mu, na = -(float)k.scale;
        for (size_t i = 0; i < n; i++) {
            float b = fmaf(mu, mb[i], dbar[i]); /* b ← μ·b + Δ̄ */
            mb[i] = b;
            th[i] = fmaf(na, fmaf(mu, b, dbar[i]), th[i]); /* θ ← θ − α·(Δ̄ + μ·b) */
        }
    } else {
        const float mu = (float)k.mu, w = (float)k.w, ns = -(float)k.scale, div = (float)k.div;
        for (size_t i = 0; i < n; i++) {
            float g = dbar[i] / div;          /* g = Δ̄ / S_r */
            float m = fmaf(mu, mb[i], w * g); /* m ← μ_r·m + w_r·g */
            mb[i] = m;
            th[i] = fmaf(ns, fmaf(mu, m, g), th[i]); /* θ ← θ − α·S_r·(g + μ_r·m) */
        }
    }
    o->last = k;
    return 0;
}

int al_outer_step(al_outer *o, const float *dbar, double s_r, al_err *err) {
    int rc = al_outer_step_part(o, dbar, 0, o->n, s_r, err);
    if (rc == 0) o->steps++;
    return rc;
}

/* ---- θ's hash and checksum --------------------------------------------------------------
 * hash(θ) = SHA-256(d_0 | d_1 | ... | d_{k-1}),  d_i = SHA-256(bytes of θ[i·C, min((i+1)·C, n)))
 * with C = AL_THETA_CHUNK values: a hash tree of one level. The chunk
 * boundaries are fixed by index, so θ's bytes alone decide it, and a change
 * to θ[lo, hi) changes only the digests of the chunks it overlaps: a site
 * that committed one fragment of θ rehashes those (al_theta_hash_part). */

size_t al_theta_chunks(size_t n) {
    return (n + AL_THETA_CHUNK - 1) / AL_THETA_CHUNK;
}

static void chunk_digest(const float *theta, size_t n, size_t i, uint8_t d[32]) {
    size_t lo = i * AL_THETA_CHUNK, hi = AL_MIN(n, lo + AL_THETA_CHUNK);
    SHA256((const unsigned char *)(theta + lo), (hi - lo) * sizeof(float), d);
}

void al_theta_hash_part(const float *theta, size_t n, uint8_t *dig, size_t lo, size_t hi,
                        char hex[65]) {
    size_t k = al_theta_chunks(n);
    if (lo < hi && lo < n)
        for (size_t i = lo / AL_THETA_CHUNK; i < k && i * AL_THETA_CHUNK < hi; i++)
            chunk_digest(theta, n, i, dig + 32 * i);
    uint8_t d[32];
    SHA256(dig, 32 * k, d);
    al_hex(d, sizeof d, hex);
}

void al_theta_hash(const float *theta, size_t n, char hex[65]) {
    SHA256_CTX c;
    SHA256_Init(&c);
    for (size_t i = 0; i < al_theta_chunks(n); i++) {
        uint8_t d[32];
        chunk_digest(theta, n, i, d);
        SHA256_Update(&c, d, sizeof d);
    }
    uint8_t d[32];
    SHA256_Final(d, &c);
    al_hex(d, sizeof d, hex);
}

void al_outer_hash(const al_outer *o, char hex[65]) {
    al_theta_hash(o->theta, o->n, hex);
}

/* sum_i (w_i XOR i·G)·K mod 2^64 over θ's 64-bit words (an odd count's last
 * value padded with zeros): w ↦ (w XOR i·G)·K is a bijection (K odd), so a
 * change to any one word always changes the sum; the XOR (not a +, which
 * would split off as i·G·K) makes a word's term depend on its place. */
uint64_t al_theta_checksum(const float *theta, size_t n) {
    const uint64_t G = 0x9e3779b97f4a7c15ull, K = 0xff51afd7ed558ccdull;
    uint64_t s = 0;
    size_t w = n / 2;
    for (size_t i = 0; i < w; i++) {
        uint64_t x;
        memcpy(&x, theta + 2 * i, sizeof x);
        s += (x ^ (i * G)) * K;
    }
    if (n & 1) {
        uint32_t x;
        memcpy(&x, theta + n - 1, sizeof x);
        s += ((uint64_t)x ^ (w * G)) * K;
    }
    return s;
}

/* ---- serialization -------------------------------------------------------------------
 * "ALOUTER1" | u32 version 1 | u32 correction | u64 n | i64 steps |
 * f64 lr | f64 momentum | f64 s_ref | f32 theta[n] | f32 mom[n] | 64 hex of SHA-256
 * of everything before it. Little-endian host assumed (checked). */

enum { HDR = 8 + 4 + 4 + 8 + 8 + 3 * 8, TRAILER = 64 };
static const char MAGIC[8] = {'A', 'L', 'O', 'U', 'T', 'E', 'R', '1'};

static bool little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

size_t al_outer_state_bytes(size_t n) {
    return HDR + 2 * n * sizeof(float) + TRAILER;
}

int al_outer_serialize(const al_outer *o, uint8_t **buf, size_t *len, al_err *err) {
    int rc = al_outer_serialize_unsealed(o, buf, len, err);
    if (rc == 0) al_outer_seal(*buf, *len);
    return rc;
}

void al_outer_seal(uint8_t *buf, size_t len) {
    char hex[65];
    al_sha256_hex(buf, len - TRAILER, hex);
    memcpy(buf + len - TRAILER, hex, TRAILER);
}

int al_outer_serialize_unsealed(const al_outer *o, uint8_t **buf, size_t *len, al_err *err) {
    if (!little_endian()) return al_errf(err, AL_EUNSUPPORTED, "outer: big-endian host");
    size_t vec = o->n * sizeof(float), total = HDR + 2 * vec + TRAILER;
    uint8_t *b = malloc(total), *p = b;
    if (!b) return al_errf(err, AL_ENOMEM, "outer: cannot allocate %zu bytes", total);
    uint32_t ver = 1, corr = (uint32_t)o->cfg.correction;
    uint64_t n = o->n;
    memcpy(p, MAGIC, 8), p += 8;
    memcpy(p, &ver, 4), p += 4;
    memcpy(p, &corr, 4), p += 4;
    memcpy(p, &n, 8), p += 8;
    memcpy(p, &o->steps, 8), p += 8;
    memcpy(p, &o->cfg.lr, 8), p += 8;
    memcpy(p, &o->cfg.momentum, 8), p += 8;
    memcpy(p, &o->cfg.s_ref, 8), p += 8;
    memcpy(p, o->theta, vec), p += vec;
    memcpy(p, o->mom, vec), p += vec;
    memset(p, '0', TRAILER); /* al_outer_seal */
    *buf = b;
    *len = total;
    return 0;
}

int al_outer_deserialize(al_outer *o, const uint8_t *buf, size_t len, const al_outer_cfg *expect,
                         al_err *err) {
    if (!little_endian()) return al_errf(err, AL_EUNSUPPORTED, "outer: big-endian host");
    if (len < HDR + TRAILER || memcmp(buf, MAGIC, 8))
        return al_errf(err, AL_EFORMAT, "outer state: not an ALOUTER1 record (%zu bytes)", len);
    char hex[65];
    al_sha256_hex(buf, len - TRAILER, hex);
    if (memcmp(hex, buf + len - TRAILER, TRAILER))
        return al_errf(err, AL_EINTEGRITY, "outer state: SHA-256 does not match its content");
    uint32_t ver, corr;
    uint64_t n;
    al_outer t = {0};
    const uint8_t *p = buf + 8;
    memcpy(&ver, p, 4), p += 4;
    memcpy(&corr, p, 4), p += 4;
    memcpy(&n, p, 8), p += 8;
    memcpy(&t.steps, p, 8), p += 8;
    memcpy(&t.cfg.lr, p, 8), p += 8;
    memcpy(&t.cfg.momentum, p, 8), p += 8;
    memcpy(&t.cfg.s_ref, p, 8), p += 8;
    if (ver != 1) return al_errf(err, AL_EFORMAT, "outer state: version %u, expected 1", ver);
    if (corr > 1) return al_errf(err, AL_EFORMAT, "outer state: bad correction %u", corr);
    t.cfg.correction = (al_correction)corr;
    if (n == 0 || n > (SIZE_MAX - HDR - TRAILER) / (2 * sizeof(float)) ||
        len != HDR + 2 * n * sizeof(float) + TRAILER)
        return al_errf(err, AL_EFORMAT, "outer state: %zu bytes do not hold n = %llu", len,
                       (unsigned long long)n);
    int rc = al_outer_cfg_check(&t.cfg, err);
    if (rc) {
        al_err_prefix(err, "outer state");
        return rc;
    }
    if (expect) {
        if (expect->lr != t.cfg.lr)
            return al_errf(err, AL_EMISMATCH, "outer state: lr %g, configured %g", t.cfg.lr,
                           expect->lr);
        if (expect->momentum != t.cfg.momentum)
            return al_errf(err, AL_EMISMATCH, "outer state: momentum %g, configured %g",
                           t.cfg.momentum, expect->momentum);
        if (expect->correction != t.cfg.correction)
            return al_errf(err, AL_EMISMATCH, "outer state: correction %s, configured %s",
                           al_correction_name(t.cfg.correction),
                           al_correction_name(expect->correction));
        if (t.cfg.correction == AL_CORRECTION_AUTOLOCO && expect->s_ref != t.cfg.s_ref)
            return al_errf(err, AL_EMISMATCH, "outer state: s_ref %g, configured %g", t.cfg.s_ref,
                           expect->s_ref);
    }
    if (o->n > 0 && n != o->n)
        return al_errf(err, AL_EMISMATCH, "outer state: n = %llu parameters, this model has %zu",
                       (unsigned long long)n, o->n);
    t.n = (size_t)n;
    t.theta = malloc(t.n * sizeof(float));
    t.mom = malloc(t.n * sizeof(float));
    if (!t.theta || !t.mom) {
        free(t.theta);
        free(t.mom);
        return al_errf(err, AL_ENOMEM, "outer state: cannot allocate 2 x %zu floats", t.n);
    }
    memcpy(t.theta, p, t.n * sizeof(float));
    memcpy(t.mom, p + t.n * sizeof(float), t.n * sizeof(float));
    al_outer_free(o);
    *o = t;
    return 0;
}

int al_outer_save(const al_outer *o, const char *path, al_err *err) {
    uint8_t *buf;
    size_t len;
    int rc = al_outer_serialize(o, &buf, &len, err);
    if (rc) return rc;
    rc = al_write_file_sync(path, buf, len, err);
    free(buf);
    return rc;
}

int al_outer_load(al_outer *o, const char *path, const al_outer_cfg *expect, al_err *err) {
    char *data;
    size_t len;
    int rc = al_read_file(path, &data, &len, err);
    if (rc) return rc;
    rc = al_outer_deserialize(o, (const uint8_t *)data, len, expect, err);
    free(data);
    if (rc) al_err_prefix(err, "%s", path);
    return rc;
}
