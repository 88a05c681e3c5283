/*
 * test_kernels.c -- every fast fp32 kernel against its naive double reference,
 * every reference backward against central finite differences in double, and
 * AdamW against hand-computed values. And the threads that train flush
 * subnormal floats to zero (al_threads_set), their OpenMP threads too.
 *
 * Sizes are the `tiny` preset's: C = 32, NH = 2, T = 32, B = 2, V = 257 (Vp 320).
 * Tolerances: fast vs reference 1e-4 relative to the output's scale (fp32 with
 * K <= 128 term sums); finite differences 1e-6 relative (h = 1e-6 in double).
 */
#include "al_test.h"

#include <fenv.h>
#include <float.h>
#include <pthread.h>
#include <string.h>

#include "al_kernels.h"

enum { B = 2, T = 32, C = 32, NH = 2, N = B * T, V = 257, VP = 320 };
#define FAST_TOL 1e-4
#define FD_TOL   1e-6
#define FD_H     1e-6

/* Rows with several documents and trailing padding. */
static void make_docstart(int *ds) {
    static const int row0[] = {10, 15, 7}; /* 3 documents filling 32 */
    int i = 0;
    for (int d = 0; d < 3; d++)
        for (int k = 0; k < row0[d]; k++, i++) ds[i] = i - k;
    for (int t = 0; t < T; t++) ds[T + t] = t < 20 ? 0 : t; /* one document, then padding */
}

/* ---- finite differences over a scalar objective -------------------------------- */

typedef double (*objective)(void *ctx);

/* Check grad (dObjective/dx) at up to `samples` entries of x (all if fewer). */
static double fd_rel_err(objective f, void *ctx, double *x, const double *grad, size_t n,
                         size_t samples, al_rng *r) {
    double num = 0, den = 1e-300;
    size_t k = n < samples ? n : samples;
    for (size_t s = 0; s < k; s++) {
        size_t i = n <= samples ? s : (size_t)al_rng_below(r, n);
        double old = x[i];
        x[i] = old + FD_H;
        double lp = f(ctx);
        x[i] = old - FD_H;
        double lm = f(ctx);
        x[i] = old;
        double fd = (lp - lm) / (2 * FD_H);
        if (fabs(fd - grad[i]) > num) num = fabs(fd - grad[i]);
        if (fabs(grad[i]) > den) den = fabs(grad[i]);
    }
    return num / den;
}

static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---- layernorm ------------------------------------------------------------------ */

typedef struct {
    double *inp, *w, *b, *out, *mean, *rstd, *R;
} ln_ctx;
static double ln_obj(void *p) {
    ln_ctx *c = p;
    al_layernorm_forward_ref(c->out, c->mean, c->rstd, c->inp, c->w, c->b, N, C);
    return dot(c->out, c->R, N * C);
}

static void test_layernorm(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 1);
    float inp[N * C], w[C], b[C], out[N * C], mean[N], rstd[N], dout[N * C];
    t_fill(&r, inp, N * C, 2.0);
    t_fill(&r, w, C, 1.0);
    t_fill(&r, b, C, 1.0);
    t_fill(&r, dout, N * C, 1.0);
    al_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    double *di = t_to_d(inp, N * C), *dw = t_to_d(w, C), *db = t_to_d(b, C);
    double *R = t_to_d(dout, N * C);
    double dout_ref[N * C], dmean[N], drstd[N];
    al_layernorm_forward_ref(dout_ref, dmean, drstd, di, dw, db, N, C);
    assert_err_below("layernorm forward fast vs ref", t_max_rel_err(out, dout_ref, N * C),
                     FAST_TOL);
    /* backward */
    float ginp[N * C] = {0}, gw[C] = {0}, gb[C] = {0};
    al_layernorm_backward(ginp, gw, gb, dout, inp, w, mean, rstd, N, C);
    double rginp[N * C] = {0}, rgw[C] = {0}, rgb[C] = {0};
    al_layernorm_backward_ref(rginp, rgw, rgb, R, di, dw, dmean, drstd, N, C);
    assert_err_below("layernorm dinp fast vs ref", t_max_rel_err(ginp, rginp, N * C), FAST_TOL);
    assert_err_below("layernorm dw fast vs ref", t_max_rel_err(gw, rgw, C), FAST_TOL);
    assert_err_below("layernorm db fast vs ref", t_max_rel_err(gb, rgb, C), FAST_TOL);
    /* reference backward against finite differences */
    ln_ctx c = {di, dw, db, dout_ref, dmean, drstd, R};
    assert_err_below("layernorm dinp ref vs FD", fd_rel_err(ln_obj, &c, di, rginp, N * C, 200, &r),
                     FD_TOL);
    assert_err_below("layernorm dw ref vs FD", fd_rel_err(ln_obj, &c, dw, rgw, C, C, &r), FD_TOL);
    assert_err_below("layernorm db ref vs FD", fd_rel_err(ln_obj, &c, db, rgb, C, C, &r), FD_TOL);
    free(di);
    free(dw);
    free(db);
    free(R);
}

/* ---- matmul --------------------------------------------------------------------- */

enum { IC = C, OC = 3 * C };
typedef struct {
    double *inp, *w, *bias, *out, *R;
} mm_ctx;
static double mm_obj(void *p) {
    mm_ctx *c = p;
    al_matmul_forward_ref(c->out, c->inp, c->w, c->bias, N, IC, OC, 0);
    return dot(c->out, c->R, (size_t)N * OC);
}

static void test_matmul(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 2);
    static float inp[N * IC], w[OC * IC], bias[OC], out[N * OC], dout[N * OC], acc[N * OC];
    t_fill(&r, inp, N * IC, 1.0);
    t_fill(&r, w, OC * IC, 0.5);
    t_fill(&r, bias, OC, 0.5);
    t_fill(&r, dout, N * OC, 1.0);
    t_fill(&r, acc, N * OC, 1.0);
    double *di = t_to_d(inp, N * IC), *dw = t_to_d(w, OC * IC), *db = t_to_d(bias, OC);
    double *R = t_to_d(dout, N * OC), *racc = t_to_d(acc, N * OC);
    static double ref[N * OC];
    al_matmul_forward(out, inp, w, bias, N, IC, OC, 0);
    al_matmul_forward_ref(ref, di, dw, db, N, IC, OC, 0);
    assert_err_below("matmul forward fast vs ref", t_max_rel_err(out, ref, N * OC), FAST_TOL);
    /* accumulate form (residual add) */
    al_matmul_forward(acc, inp, w, NULL, N, IC, OC, 1);
    al_matmul_forward_ref(racc, di, dw, NULL, N, IC, OC, 1);
    assert_err_below("matmul forward accumulate fast vs ref", t_max_rel_err(acc, racc, N * OC),
                     FAST_TOL);
    static float ginp[N * IC], gw[OC * IC], gb[OC];
    static double rginp[N * IC], rgw[OC * IC], rgb[OC];
    memset(gw, 0, sizeof gw);
    memset(gb, 0, sizeof gb);
    al_matmul_backward(ginp, gw, gb, dout, inp, w, N, IC, OC, 0);
    al_matmul_backward_ref(rginp, rgw, rgb, R, di, dw, N, IC, OC, 0);
    assert_err_below("matmul dinp fast vs ref", t_max_rel_err(ginp, rginp, N * IC), FAST_TOL);
    assert_err_below("matmul dw fast vs ref", t_max_rel_err(gw, rgw, OC * IC), FAST_TOL);
    assert_err_below("matmul dbias fast vs ref", t_max_rel_err(gb, rgb, OC), FAST_TOL);
    mm_ctx c = {di, dw, db, ref, R};
    assert_err_below("matmul dinp ref vs FD", fd_rel_err(mm_obj, &c, di, rginp, N * IC, 200, &r),
                     FD_TOL);
    assert_err_below("matmul dw ref vs FD", fd_rel_err(mm_obj, &c, dw, rgw, OC * IC, 200, &r),
                     FD_TOL);
    assert_err_below("matmul dbias ref vs FD", fd_rel_err(mm_obj, &c, db, rgb, OC, OC, &r), FD_TOL);
    free(di);
    free(dw);
    free(db);
    free(R);
    free(racc);
}

/* ---- attention ------------------------------------------------------------------ */

typedef struct {
    double *qkv, *out, *lse, *R;
    int *ds;
} at_ctx;
static double at_obj(void *p) {
    at_ctx *c = p;
    al_attention_forward_ref(c->out, c->lse, c->qkv, c->ds, B, T, C, NH);
    return dot(c->out, c->R, N * C);
}

static void test_attention(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 3);
    int ds[N];
    make_docstart(ds);
    static float qkv[N * 3 * C], out[N * C], lse[B * NH * T], dout[N * C], dqkv[N * 3 * C];
    t_fill(&r, qkv, N * 3 * C, 1.5);
    t_fill(&r, dout, N * C, 1.0);
    double *dq = t_to_d(qkv, N * 3 * C), *R = t_to_d(dout, N * C);
    static double rout[N * C], rlse[B * NH * T], rdqkv[N * 3 * C];
    al_attention_forward(out, lse, qkv, ds, B, T, C, NH);
    al_attention_forward_ref(rout, rlse, dq, ds, B, T, C, NH);
    assert_err_below("attention forward fast vs ref", t_max_rel_err(out, rout, N * C), FAST_TOL);
    assert_err_below("attention lse fast vs ref", t_max_rel_err(lse, rlse, B * NH * T), FAST_TOL);
    al_attention_backward(dqkv, dout, qkv, lse, ds, B, T, C, NH);
    al_attention_backward_ref(rdqkv, R, dq, rlse, ds, B, T, C, NH);
    assert_err_below("attention dqkv fast vs ref", t_max_rel_err(dqkv, rdqkv, N * 3 * C), FAST_TOL);
    at_ctx c = {dq, rout, rlse, R, ds};
    assert_err_below("attention dqkv ref vs FD",
                     fd_rel_err(at_obj, &c, dq, rdqkv, N * 3 * C, 300, &r), FD_TOL);
    free(dq);
    free(R);
}

/* Keys outside [docstart, i] must not matter: perturbing another document's k
 * and v leaves a query's output exactly unchanged. */
static void test_attention_isolation(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 4);
    int ds[N];
    make_docstart(ds);
    static float qkv[N * 3 * C], out1[N * C], out2[N * C], lse[B * NH * T];
    t_fill(&r, qkv, N * 3 * C, 1.0);
    al_attention_forward(out1, lse, qkv, ds, B, T, C, NH);
    for (int t = 10; t < 25; t++) /* document 2 of row 0: positions 10..24 */
        for (int c = C; c < 3 * C; c++) qkv[t * 3 * C + c] += 0.5f;
    al_attention_forward(out2, lse, qkv, ds, B, T, C, NH);
    for (int t = 0; t < T; t++) {
        int in_doc2 = t >= 10 && t < 25;
        double diff = 0;
        for (int c = 0; c < C; c++) diff = fmax(diff, fabs(out1[t * C + c] - out2[t * C + c]));
        if (in_doc2)
            assert_true(diff > 1e-3);
        else
            assert_true(diff == 0.0);
    }
}

/* Rows longer than the kernel's query blocks (32): T = 100 (blocks of 32, 32,
 * 32, 4), documents that start inside a block and cross block boundaries,
 * and a row of one document, against the reference. */
static void test_attention_blocks(void **state) {
    (void)state;
    enum { BB = 2, TT = 100, CC = 32, HH = 2, NN = BB * TT };
    al_rng r;
    al_rng_seed(&r, 5);
    int ds[NN];
    static const int starts[] = {0, 7, 30, 33, 64, 95}; /* row 0's documents */
    for (int t = 0, d = 0; t < TT; t++) {
        while (d + 1 < (int)(sizeof starts / sizeof *starts) && t >= starts[d + 1]) d++;
        ds[t] = starts[d];
        ds[TT + t] = 0;
    }
    static float qkv[NN * 3 * CC], out[NN * CC], lse[BB * HH * TT], dout[NN * CC],
        dqkv[NN * 3 * CC];
    t_fill(&r, qkv, NN * 3 * CC, 1.5);
    t_fill(&r, dout, NN * CC, 1.0);
    double *dq = t_to_d(qkv, NN * 3 * CC), *R = t_to_d(dout, NN * CC);
    static double rout[NN * CC], rlse[BB * HH * TT], rdqkv[NN * 3 * CC];
    al_attention_forward(out, lse, qkv, ds, BB, TT, CC, HH);
    al_attention_forward_ref(rout, rlse, dq, ds, BB, TT, CC, HH);
    assert_err_below("attention T=100 forward fast vs ref", t_max_rel_err(out, rout, NN * CC),
                     FAST_TOL);
    assert_err_below("attention T=100 lse fast vs ref", t_max_rel_err(lse, rlse, BB * HH * TT),
                     FAST_TOL);
    al_attention_backward(dqkv, dout, qkv, lse, ds, BB, TT, CC, HH);
    al_attention_backward_ref(rdqkv, R, dq, rlse, ds, BB, TT, CC, HH);
    assert_err_below("attention T=100 dqkv fast vs ref", t_max_rel_err(dqkv, rdqkv, NN * 3 * CC),
                     FAST_TOL);
    free(dq);
    free(R);
}

/* ---- gelu ----------------------------------------------------------------------- */

typedef struct {
    double *inp, *out, *R;
    size_t n;
} ge_ctx;
static double ge_obj(void *p) {
    ge_ctx *c = p;
    al_gelu_forward_ref(c->out, c->inp, c->n);
    return dot(c->out, c->R, c->n);
}

static void test_gelu(void **state) {
    (void)state;
    enum { GN = 4096 };
    al_rng r;
    al_rng_seed(&r, 5);
    static float inp[GN], out[GN], dout[GN], dinp[GN];
    t_fill(&r, inp, GN, 6.0); /* covers the saturated tails */
    t_fill(&r, dout, GN, 1.0);
    double *di = t_to_d(inp, GN), *R = t_to_d(dout, GN);
    static double rout[GN], rdinp[GN];
    al_gelu_forward(out, inp, GN);
    al_gelu_forward_ref(rout, di, GN);
    assert_err_below("gelu forward fast vs ref", t_max_rel_err(out, rout, GN), FAST_TOL);
    al_gelu_backward(dinp, inp, dout, GN);
    al_gelu_backward_ref(rdinp, di, R, GN);
    assert_err_below("gelu backward fast vs ref", t_max_rel_err(dinp, rdinp, GN), FAST_TOL);
    ge_ctx c = {di, rout, R, GN};
    assert_err_below("gelu backward ref vs FD", fd_rel_err(ge_obj, &c, di, rdinp, GN, 500, &r),
                     FD_TOL);
    free(di);
    free(R);
}

/* ---- encoder -------------------------------------------------------------------- */

typedef struct {
    double *wte, *wpe, *out, *R;
    int *tok, *pos;
} en_ctx;
static double en_obj(void *p) {
    en_ctx *c = p;
    al_encoder_forward_ref(c->out, c->tok, c->pos, c->wte, c->wpe, N, C);
    return dot(c->out, c->R, N * C);
}

static void test_encoder(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 6);
    int tok[N], pos[N];
    for (int i = 0; i < N; i++) {
        tok[i] = (int)al_rng_below(&r, V);
        pos[i] = i % T;
    }
    tok[3] = tok[7] = 42; /* a repeated token accumulates twice */
    static float wte[VP * C], wpe[T * C], out[N * C], dout[N * C], gte[VP * C], gpe[T * C];
    t_fill(&r, wte, VP * C, 1.0);
    t_fill(&r, wpe, T * C, 1.0);
    t_fill(&r, dout, N * C, 1.0);
    double *dte = t_to_d(wte, VP * C), *dpe = t_to_d(wpe, T * C), *R = t_to_d(dout, N * C);
    static double rout[N * C], rgte[VP * C], rgpe[T * C];
    al_encoder_forward(out, tok, pos, wte, wpe, N, C);
    al_encoder_forward_ref(rout, tok, pos, dte, dpe, N, C);
    assert_err_below("encoder forward fast vs ref", t_max_rel_err(out, rout, N * C), FAST_TOL);
    al_encoder_backward(gte, gpe, dout, tok, pos, N, C);
    al_encoder_backward_ref(rgte, rgpe, R, tok, pos, N, C);
    assert_err_below("encoder dwte fast vs ref", t_max_rel_err(gte, rgte, VP * C), FAST_TOL);
    assert_err_below("encoder dwpe fast vs ref", t_max_rel_err(gpe, rgpe, T * C), FAST_TOL);
    en_ctx c = {dte, dpe, rout, R, tok, pos};
    assert_err_below("encoder dwte ref vs FD",
                     fd_rel_err(en_obj, &c, dte, rgte, 42 * C + C, 200, &r), FD_TOL);
    assert_err_below("encoder dwpe ref vs FD", fd_rel_err(en_obj, &c, dpe, rgpe, T * C, 200, &r),
                     FD_TOL);
    free(dte);
    free(dpe);
    free(R);
}

/* ---- cross-entropy -------------------------------------------------------------- */

typedef struct {
    double *logits, *losses;
    int *target;
} ce_ctx;
static double ce_obj(void *p) {
    ce_ctx *c = p;
    return al_crossentropy_forward_ref(c->losses, c->logits, c->target, N, V, VP);
}

static void test_crossentropy(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 7);
    int target[N];
    for (int i = 0; i < N; i++) target[i] = i % 9 == 0 ? -1 : (int)al_rng_below(&r, V);
    static float logits[N * VP], losses[N];
    t_fill(&r, logits, N * VP, 4.0);
    double *dl = t_to_d(logits, N * VP);
    static double rlosses[N];
    double s = al_crossentropy_forward(losses, logits, target, N, V, VP);
    double rs = al_crossentropy_forward_ref(rlosses, dl, target, N, V, VP);
    assert_err_below("crossentropy losses fast vs ref", t_max_rel_err(losses, rlosses, N),
                     FAST_TOL);
    assert_err_below("crossentropy sum fast vs ref", fabs(s - rs) / fabs(rs), FAST_TOL);
    for (int i = 0; i < N; i++)
        if (target[i] < 0) assert_true(losses[i] == 0.0f);
    /* backward with scale 1: d(sum of losses)/dlogits */
    double *rgrad = t_to_d(logits, N * VP);
    al_crossentropy_backward(logits, target, 1.0f, N, V, VP);
    al_crossentropy_backward_ref(rgrad, target, 1.0, N, V, VP);
    assert_err_below("crossentropy dlogits fast vs ref", t_max_rel_err(logits, rgrad, N * VP),
                     FAST_TOL);
    for (int i = 0; i < N; i++)
        for (int j = V; j < VP; j++) assert_true(logits[i * VP + j] == 0.0f);
    ce_ctx c = {dl, rlosses, target};
    assert_err_below("crossentropy dlogits ref vs FD",
                     fd_rel_err(ce_obj, &c, dl, rgrad, N * VP, 400, &r), FD_TOL);
    free(dl);
    free(rgrad);
}

/* ---- AdamW ---------------------------------------------------------------------- */

/* Hand-computed: beta 0.9/0.95, eps 1e-8, lr 0.1, wd 0.1, p0 = 1, g = 0.5, -0.25,
 * 0.125. Step 1: m = 0.05, v = 0.0125, mhat = 0.5, vhat = 0.25,
 * p = 1 - 0.1 (0.5/0.5 + 0.1) = 0.89 (to 2e-9); step 2: m = 0.02, v = 0.015,
 * mhat = 0.02/0.19, vhat = 0.015/0.0975, p = 0.854263058; step 3: p = 0.811052265. */
/* ---- subnormals ---------------------------------------------------------------- */

/* A confident row: the target's logit 0, the other 7 at -100 (fast_expf clamps
 * at -87: p = 1.6e-38, a normal float), scaled by 1/64 as a step of 64 target
 * tokens does: 2.6e-40, a subnormal. Counts the subnormal outputs of 64 such
 * rows (spread over the OpenMP threads). */
enum { SN_N = 64, SN_V = 8 };
/* From the bits: with DAZ a comparison (and fpclassify, built from them)
 * reads a subnormal as 0. */
static uint32_t bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static int is_subnormal(float x) {
    uint32_t u = bits_of(x);
    return (u & 0x7f800000u) == 0 && (u & 0x007fffffu) != 0;
}
static int subnormals_in_ce_backward(float *l) {
    int target[SN_N];
    for (int i = 0; i < SN_N; i++) {
        target[i] = i % SN_V;
        for (int j = 0; j < SN_V; j++) l[i * SN_V + j] = j == target[i] ? 0.0f : -100.0f;
    }
    al_crossentropy_backward(l, target, 1.0f / 64, SN_N, SN_V, SN_V);
    int n = 0;
    for (int i = 0; i < SN_N * SN_V; i++) n += is_subnormal(l[i]);
    return n;
}

static void *flushes_in(void *arg) {
    *(int *)arg = al_fp_flushes_subnormals();
    return NULL;
}

/* On a thread of its own from IEEE defaults (fesetenv clears FTZ and DAZ),
 * with al_threads_set(2) (flush) or without (IEEE) before its first kernel:
 * r[0] whether it flushes, r[1] the subnormals the kernel wrote on it and on
 * the OpenMP threads it started, r[2] whether a thread it starts flushes. */
typedef struct {
    int flush, r[3];
    float l[SN_N * SN_V];
} sn_run;
static void *subnormals_thread(void *arg) {
    sn_run *x = arg;
    fesetenv(FE_DFL_ENV);
    if (x->flush) al_threads_set(2);
    x->r[0] = al_fp_flushes_subnormals();
    x->r[1] = subnormals_in_ce_backward(x->l);
    pthread_t th;
    x->r[2] = -1;
    if (pthread_create(&th, NULL, flushes_in, &x->r[2]) == 0) pthread_join(th, NULL);
    return NULL;
}

static void test_subnormals_flushed(void **state) {
    (void)state;
    static sn_run ieee = {.flush = 0}, flushed = {.flush = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, subnormals_thread, &ieee), 0);
    pthread_join(th, NULL);
    assert_int_equal(pthread_create(&th, NULL, subnormals_thread, &flushed), 0);
    pthread_join(th, NULL);
    assert_int_equal(ieee.r[0], 0);                 /* IEEE: FLT_MIN / 2 is not 0 */
    assert_int_equal(ieee.r[1], SN_N * (SN_V - 1)); /* every non-target entry subnormal */
    assert_int_equal(ieee.r[2], 0);
    assert_int_equal(flushed.r[0], 1);
    assert_int_equal(flushed.r[1], 0); /* none, on whichever thread computed the row */
    assert_int_equal(flushed.r[2], 1); /* a thread started afterwards inherits the mode */
    int changed = 0; /* the subnormals became 0; every other entry is the same float */
    for (int i = 0; i < SN_N * SN_V; i++)
        changed += bits_of(flushed.l[i]) != (is_subnormal(ieee.l[i]) ? 0u : bits_of(ieee.l[i]));
    assert_int_equal(changed, 0);
}

static void test_adamw(void **state) {
    (void)state;
    const double expect_p[3] = {0.890000002, 0.8542630578558273, 0.8110522654784149};
    const double expect_m[3] = {0.05, 0.02, 0.0305}, expect_v[3] = {0.0125, 0.015, 0.01503125};
    const float gs[3] = {0.5f, -0.25f, 0.125f};
    float p = 1.0f, m = 0.0f, v = 0.0f;
    double pd = 1.0, md = 0.0, vd = 0.0;
    for (int t = 1; t <= 3; t++) {
        float g = gs[t - 1];
        double gd = g;
        al_adamw_update(&p, &g, &m, &v, 1, 0.1f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        al_adamw_update_ref(&pd, &gd, &md, &vd, 1, 0.1, 0.9, 0.95, 1e-8, 0.1, t);
        assert_true(fabs(p - expect_p[t - 1]) < 2e-7);
        assert_true(fabs(m - expect_m[t - 1]) < 1e-7); /* float rounding of 1 - 0.9f */
        assert_true(fabs(v - expect_v[t - 1]) < 1e-7);
        assert_true(fabs(pd - expect_p[t - 1]) < 1e-12);
    }
    /* a vector update equals the scalar one element by element */
    float pv[1000], gv[1000], mv[1000] = {0}, vv[1000] = {0};
    al_rng r;
    al_rng_seed(&r, 8);
    t_fill(&r, pv, 1000, 1.0);
    t_fill(&r, gv, 1000, 1.0);
    float p5 = pv[517], g5 = gv[517], m5 = 0, v5 = 0;
    al_adamw_update(pv, gv, mv, vv, 1000, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    al_adamw_update(&p5, &g5, &m5, &v5, 1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1);
    assert_true(p5 == pv[517]);
}

static void test_sumsq(void **state) {
    (void)state;
    float x[1001];
    double want = 0;
    for (int i = 0; i < 1001; i++) {
        x[i] = (float)(i % 17) - 8.0f;
        want += (double)x[i] * x[i];
    }
    assert_true(fabs(al_sumsq(x, 1001) - want) < 1e-9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_isolation),
        cmocka_unit_test(test_attention_blocks),
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_encoder),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_sumsq),
        cmocka_unit_test(test_subnormals_flushed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
