/*
 * kernels.c -- fast fp32 CPU kernels (see al_kernels.h for the contracts).
 *
 * Every matmul goes through OpenBLAS sgemm. Element-wise and row-wise work is
 * split over OpenMP threads with static schedules, and every reduction that
 * crosses rows is done in per-thread partials combined in thread order, or by
 * a thread that owns the output outright, so a run is bit-for-bit repeatable
 * for a fixed thread count (resume depends on it).
 *
 * Sums inside a row (LayerNorm's mean, softmax's normaliser, dot products)
 * run in LANES independent partial sums combined in a fixed order at the
 * end: the compiler turns the lanes into SIMD registers, where one running
 * sum would wait a full add latency per element. The order depends only on
 * the length, never on the machine or the thread count.
 *
 * No kernel allocates: scratch lives on the calling thread's stack, bounded
 * (attention: 2 x 32 x T floats per thread).
 */
#include "al_kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <omp.h>

static inline int imin(int a, int b) {
    return a < b ? a : b;
}

/* ---- a vectorisable exp ---------------------------------------------------
 * exp(x) = 2^k * exp(r), k = round(x / ln 2), r = x - k ln 2 in [-ln2/2, ln2/2].
 * exp(r) by its Taylor series to degree 6: the truncation error is below
 * |r|^7/7! = 1.2e-7 relative, about one float ulp. 2^k is built in the exponent
 * bits. Written branch-free so that gcc turns loops over it into SIMD. */
static inline float fast_expf(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float kf = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - kf * 0.693145751953125f;   /* ln 2, high bits */
    r = r - kf * 1.42860682030941723212e-6f; /* ln 2, low bits */
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        int32_t i;
        float f;
    } s;
    s.i = ((int32_t)kf + 127) << 23;
    return p * s.f;
}

/* ---- fixed-order lane reductions -------------------------------------------
 * Element i goes to lane i % LANES; the lanes are added pairwise (a tree), then
 * the tail. Same order for a given n everywhere. */
enum { LANES = 16 };

static inline float lanes_total(float *acc) {
    for (int w = LANES / 2; w > 0; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    return acc[0];
}

/* sum of x[0..n) */
static inline float sum_f(const float *x, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += x[i + j];
    float s = lanes_total(acc);
    for (; i < n; i++) s += x[i];
    return s;
}

/* sum of a[i] * b[i] over [0, n) */
static inline float dot_f(const float *a, const float *b, int n) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += a[i + j] * b[i + j];
    float s = lanes_total(acc);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* max of x[0..n), n >= 1 (max is exact: any order gives the same value) */
static inline float max_f(const float *x, int n) {
    float acc[LANES];
    for (int j = 0; j < LANES; j++) acc[j] = x[0];
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
    float m = acc[0];
    for (int j = 1; j < LANES; j++) m = acc[j] > m ? acc[j] : m;
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* x[i] = exp(x[i] - shift) over [0, n); returns their sum (lanes) */
static inline float exp_shift_sum(float *x, int n, float shift) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) {
            float e = fast_expf(x[i + j] - shift);
            x[i + j] = e;
            acc[j] += e;
        }
    float s = lanes_total(acc);
    for (; i < n; i++) {
        x[i] = fast_expf(x[i] - shift);
        s += x[i];
    }
    return s;
}

/* ---- encoder ------------------------------------------------------------ */

void al_encoder_forward(float *out, const int *tok, const int *pos, const float *wte,
                        const float *wpe, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *a = wte + (size_t)tok[i] * C, *b = wpe + (size_t)pos[i] * C;
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = a[c] + b[c];
    }
}

void al_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok,
                         const int *pos, int N, int C) {
    /* Serial over positions: two positions may share a token, and a fixed order
     * keeps the sums repeatable. N*C adds, negligible next to the matmuls. */
    for (int i = 0; i < N; i++) {
        const float *d = dout + (size_t)i * C;
        float *a = dwte + (size_t)tok[i] * C, *b = dwpe + (size_t)pos[i] * C;
        for (int c = 0; c < C; c++) {
            a[c] += d[c];
            b[c] += d[c];
        }
    }
}

/* ---- layernorm ---------------------------------------------------------- */

void al_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        const float *x = inp + (size_t)i * C;
        float m = sum_f(x, C) / (float)C;
        /* variance about the mean (two passes: no cancellation) */
        float acc[LANES] = {0};
        int c = 0;
        for (; c + LANES <= C; c += LANES)
            for (int j = 0; j < LANES; j++) acc[j] += (x[c + j] - m) * (x[c + j] - m);
        float v = lanes_total(acc);
        for (; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = 1.0f / sqrtf(v / (float)C + 1e-5f);
        float *o = out + (size_t)i * C;
        for (c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[i] = m;
        rstd[i] = r;
    }
}

void al_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C) {
    /* Two loops in one parallel region. Rows: with norm = (x - mean) * rstd and
     * dnorm = dout * w, dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)).
     * Columns: dw[c] += sum_i dout[i,c] norm[i,c], db[c] += sum_i dout[i,c], each
     * block of 16 columns summed by one thread over all rows in row order, so the
     * parameter gradients are the same for any thread count and need no
     * per-thread partials. */
    int nblk = (C + 15) / 16;
#pragma omp parallel
    {
#pragma omp for schedule(static) nowait
        for (int i = 0; i < N; i++) {
            const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
            float *dx = dinp + (size_t)i * C;
            float m = mean[i], r = rstd[i];
            float acc_a[LANES] = {0}, acc_b[LANES] = {0};
            int c = 0;
            for (; c + LANES <= C; c += LANES)
                for (int j = 0; j < LANES; j++) {
                    float norm = (x[c + j] - m) * r, dn = d[c + j] * w[c + j];
                    acc_a[j] += dn;
                    acc_b[j] += dn * norm;
                }
            float a = lanes_total(acc_a), bsum = lanes_total(acc_b);
            for (; c < C; c++) {
                float norm = (x[c] - m) * r, dn = d[c] * w[c];
                a += dn;
                bsum += dn * norm;
            }
            a /= (float)C;
            bsum /= (float)C;
            for (c = 0; c < C; c++) {
                float norm = (x[c] - m) * r;
                dx[c] += r * (d[c] * w[c] - a - norm * bsum);
            }
        }
#pragma omp for schedule(static)
        for (int bk = 0; bk < nblk; bk++) {
            int c0 = bk * 16, n = imin(16, C - c0);
            float aw[16] = {0}, ab[16] = {0};
            for (int i = 0; i < N; i++) {
                const float *x = inp + (size_t)i * C + c0, *d = dout + (size_t)i * C + c0;
                float m = mean[i], r = rstd[i];
                for (int j = 0; j < n; j++) {
                    aw[j] += d[j] * ((x[j] - m) * r);
                    ab[j] += d[j];
                }
            }
            for (int j = 0; j < n; j++) {
                dw[c0 + j] += aw[j];
                db[c0 + j] += ab[j];
            }
        }
    }
}

/* ---- matmul ------------------------------------------------------------- */

/* The threads split each product by rows of its output, and each calls sgemm
 * on its own rows: inside a parallel region OpenBLAS runs on the calling
 * thread alone. A row of the output is one thread's sgemm for any split (its
 * sums over K are never cut), and every split point is fixed by the thread
 * count, so the run is repeatable. Measured against handing the whole product
 * to OpenBLAS's own threads: docs/results/inner.md. */

/* Part t of k of [0, n), boundaries rounded to multiples of 16 rows (whole
 * tiles of the sgemm kernel) */
static void split_rows(int n, int t, int k, int *lo, int *hi) {
    *lo = t == 0 ? 0 : imin(n, (int)((long)n * t / k + 15) / 16 * 16);
    *hi = t == k - 1 ? n : imin(n, (int)((long)n * (t + 1) / k + 15) / 16 * 16);
}

void al_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                       int IC, int OC, int accumulate) {
    /* With a bias: out = bias (or out += bias), then the product added on top
     * (beta = 1). One pass over out, where beta = 0 and a bias pass after the
     * product would make two; the thread that writes the bias into its rows
     * then multiplies into them while they are in its cache. */
#pragma omp parallel
    {
        int lo, hi;
        split_rows(N, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (bias)
            for (int i = lo; i < hi; i++) {
                float *o = out + (size_t)i * OC;
                if (accumulate)
                    for (int c = 0; c < OC; c++) o[c] += bias[c];
                else
                    for (int c = 0; c < OC; c++) o[c] = bias[c];
            }
        if (hi > lo)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, OC, IC, 1.0f,
                        inp + (size_t)lo * IC, IC, w, IC, accumulate || bias ? 1.0f : 0.0f,
                        out + (size_t)lo * OC, OC);
    }
}

void al_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int IC, int OC, int accumulate) {
    /* dinp rows split like the forward's; dw = dout^T inp by rows of dw (=
     * columns of dout), each summed over all N positions by one sgemm, and
     * the bias's column sums by the same columns. */
#pragma omp parallel
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads(), lo, hi;
        if (dinp) {
            split_rows(N, t, k, &lo, &hi);
            if (hi > lo)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, IC, OC, 1.0f,
                            dout + (size_t)lo * OC, OC, w, IC, accumulate ? 1.0f : 0.0f,
                            dinp + (size_t)lo * IC, IC);
        }
        split_rows(OC, t, k, &lo, &hi);
        if (hi > lo)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, IC, N, 1.0f, dout + lo,
                        OC, inp, IC, 1.0f, dw + (size_t)lo * IC, IC);
        /* column sums in blocks of 64 columns (16-row-aligned ranges keep
         * whole blocks apart only when they are 64-aligned, so by range) */
        for (int c0 = lo; dbias && c0 < hi; c0 += 64) {
            int c1 = imin(c0 + 64, hi);
            float acc[64] = {0};
            for (int i = 0; i < N; i++) {
                const float *d = dout + (size_t)i * OC;
                for (int c = c0; c < c1; c++) acc[c - c0] += d[c];
            }
            for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
        }
    }
}

/* ---- attention ----------------------------------------------------------
 * Per (row b, head h), with q, k, v the head's [T, hs] slices of qkv:
 *   S = q k^T / sqrt(hs);  P_i = softmax(S_i over keys docstart[i]..i);  out_h = P v
 * Backward, with dP = dout_h v^T:
 *   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik);  dq = dS k / sqrt(hs);
 *   dk = dS^T q / sqrt(hs);  dv = P^T dout_h.
 * Queries go in blocks of QB rows. Block [i0, i1) needs only keys [k0, i1),
 * k0 = the smallest docstart in the block: causal masking and document
 * boundaries skip whole columns of S, and S and P for a block fit in QB x T
 * floats of stack. The backward recomputes P from the saved log-sum-exp
 * instead of storing B*NH*T*T floats; dk and dv are summed over the blocks in
 * block order. (b, h) pairs run in parallel, each on one thread, and sgemm
 * inside runs on that thread, so every sum has one order for any thread count.
 * (Plain loops over each query's own keys, vectorised over keys and channels,
 * were measured instead: 1.5x slower forward and 2.3x backward than these
 * sgemm calls at T = 64 and 128, docs/results/inner.md.) */
enum { QB = 32 };

typedef struct qblock {
    int i0, i1, k0; /* query rows [i0, i1), keys [k0, i1) */
} qblock;

static qblock qblock_at(const int *ds, int i0, int T) {
    qblock q = {i0, imin(i0 + QB, T), ds[i0]};
    for (int i = i0 + 1; i < q.i1; i++) q.k0 = imin(q.k0, ds[i]);
    return q;
}

/* One head of one row: q, k, v, dout rows at stride ld (3C) and ldo (C). */
typedef struct head {
    const float *q, *k, *v, *dO;
    float *out, *dq, *dk, *dv;
    const float *lse_in; /* backward: the forward's log-sum-exp */
    float *lse_out;      /* forward */
    const int *ds;
    int T, hs, ld, ldo;
    float scale;
} head;

/* P row r of block q (leading dimension nk) holds S over the block's keys.
 * Forward (lse_in NULL): softmax the row over its keys ds[i]..i, write its
 * log-sum-exp; backward: P = exp(S - lse). Zero outside the row's keys. */
static void attn_prob_row(float *row, int nk, int lo, int n, const float *lse_in, float *lse_out) {
    float *x = row + lo;
    if (lse_in) {
        float l = *lse_in;
        for (int j = 0; j < n; j++) x[j] = fast_expf(x[j] - l);
    } else {
        float mx = max_f(x, n);
        float sum = exp_shift_sum(x, n, mx);
        float inv = 1.0f / sum;
        for (int j = 0; j < n; j++) x[j] *= inv;
        *lse_out = mx + logf(sum);
    }
    for (int j = 0; j < lo; j++) row[j] = 0.0f;
    for (int j = lo + n; j < nk; j++) row[j] = 0.0f;
}

static void attn_fwd_gemm(const head *H, float *P) {
    int T = H->T, hs = H->hs, ld = H->ld;
    for (int i0 = 0; i0 < T; i0 += QB) {
        qblock qb = qblock_at(H->ds, i0, T);
        int mq = qb.i1 - qb.i0, nk = qb.i1 - qb.k0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, nk, hs, H->scale,
                    H->q + (size_t)i0 * ld, ld, H->k + (size_t)qb.k0 * ld, ld, 0.0f, P, nk);
        for (int i = qb.i0; i < qb.i1; i++)
            attn_prob_row(P + (size_t)(i - i0) * nk, nk, H->ds[i] - qb.k0, i - H->ds[i] + 1, NULL,
                          H->lse_out + i);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hs, nk, 1.0f, P, nk,
                    H->v + (size_t)qb.k0 * ld, ld, 0.0f, H->out + (size_t)i0 * H->ldo, H->ldo);
    }
}

static void attn_bwd_gemm(const head *H, float *P, float *dS) {
    int T = H->T, hs = H->hs, ld = H->ld;
    for (int t = 0; t < T; t++) { /* dk, dv are sums over the blocks */
        memset(H->dk + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
        memset(H->dv + (size_t)t * ld, 0, (size_t)hs * sizeof(float));
    }
    for (int i0 = 0; i0 < T; i0 += QB) {
        qblock qb = qblock_at(H->ds, i0, T);
        int mq = qb.i1 - qb.i0, nk = qb.i1 - qb.k0;
        const float *qi = H->q + (size_t)i0 * ld, *kk = H->k + (size_t)qb.k0 * ld;
        const float *dOi = H->dO + (size_t)i0 * H->ldo;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, nk, hs, H->scale, qi, ld, kk, ld,
                    0.0f, P, nk);
        for (int i = qb.i0; i < qb.i1; i++)
            attn_prob_row(P + (size_t)(i - i0) * nk, nk, H->ds[i] - qb.k0, i - H->ds[i] + 1,
                          H->lse_in + i, NULL);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mq, nk, hs, 1.0f, dOi, H->ldo,
                    H->v + (size_t)qb.k0 * ld, ld, 0.0f, dS, nk);
        for (int r = 0; r < mq; r++) {
            float *p = P + (size_t)r * nk, *d = dS + (size_t)r * nk;
            int lo = H->ds[i0 + r] - qb.k0, n = i0 + r - H->ds[i0 + r] + 1;
            float dot = dot_f(p + lo, d + lo, n);
            for (int j = 0; j < nk; j++) d[j] = p[j] * (d[j] - dot); /* p = 0 off-mask */
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mq, hs, nk, H->scale, dS, nk, kk, ld,
                    0.0f, H->dq + (size_t)i0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, mq, H->scale, dS, nk, qi, ld,
                    1.0f, H->dk + (size_t)qb.k0 * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, mq, 1.0f, P, nk, dOi, H->ldo,
                    1.0f, H->dv + (size_t)qb.k0 * ld, ld);
    }
}

static head head_at(const float *qkv, const float *dout, float *out, float *dqkv,
                    const float *lse_in, float *lse_out, const int *docstart, int bh, int T, int C,
                    int NH) {
    int b = bh / NH, h = bh % NH, hs = C / NH, C3 = 3 * C;
    head H = {0};
    H.q = qkv + (size_t)b * T * C3 + h * hs;
    H.k = H.q + C;
    H.v = H.q + 2 * C;
    if (dout) H.dO = dout + (size_t)b * T * C + h * hs;
    if (out) H.out = out + (size_t)b * T * C + h * hs;
    if (dqkv) {
        H.dq = dqkv + (size_t)b * T * C3 + h * hs;
        H.dk = H.dq + C;
        H.dv = H.dq + 2 * C;
    }
    if (lse_in) H.lse_in = lse_in + (size_t)bh * T;
    if (lse_out) H.lse_out = lse_out + (size_t)bh * T;
    H.ds = docstart + (size_t)b * T;
    H.T = T, H.hs = hs, H.ld = C3, H.ldo = C;
    H.scale = 1.0f / sqrtf((float)hs);
    return H;
}

void al_attention_forward(float *out, float *lse, const float *qkv, const int *docstart, int B,
                          int T, int C, int NH) {
#pragma omp parallel
    {
        float P[QB * T];
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            head H = head_at(qkv, NULL, out, NULL, NULL, lse, docstart, bh, T, C, NH);
            attn_fwd_gemm(&H, P);
        }
    }
}

void al_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                           const int *docstart, int B, int T, int C, int NH) {
#pragma omp parallel
    {
        float P[QB * T], dS[QB * T];
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            head H = head_at(qkv, dout, NULL, dqkv, lse, NULL, docstart, bh, T, C, NH);
            attn_bwd_gemm(&H, P, dS);
        }
    }
}

/* ---- GELU ----------------------------------------------------------------
 * gelu(x) = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3). With
 * e = exp(2u) and s = 1 / (e + 1): tanh u = 1 - 2s, so 1 + tanh u = 2 (1 - s)
 * and 1 - tanh^2 u = 4 s (1 - s). Hence
 *   gelu(x)  = x (1 - s)                          (= x * sigmoid(2u))
 *   gelu'(x) = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx
 *            = (1 - s) (1 + 2 x s du/dx),          du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
 * one exp and one division each, and no 1 + tanh u cancelling to nothing for
 * very negative x. */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

static inline float gelu_s(float x) {
    float u = GELU_K * (x + 0.044715f * x * x * x);
    return 1.0f / (fast_expf(2.0f * u) + 1.0f);
}

void al_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = x * (1.0f - gelu_s(x));
    }
}

void al_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], s = gelu_s(x);
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * ((1.0f - s) * (1.0f + 2.0f * x * s * du));
    }
}

/* ---- softmax + cross-entropy ---------------------------------------------- */

double al_crossentropy_forward(float *losses, const float *logits, const int *target, int N, int V,
                               int Vp) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        if (target[i] < 0) {
            losses[i] = 0.0f;
            continue;
        }
        const float *l = logits + (size_t)i * Vp;
        float mx = max_f(l, V);
        /* log sum_j exp(l_j - mx), the sum in lanes */
        float acc[LANES] = {0};
        int j = 0;
        for (; j + LANES <= V; j += LANES)
            for (int u = 0; u < LANES; u++) acc[u] += fast_expf(l[j + u] - mx);
        float sum = lanes_total(acc);
        for (; j < V; j++) sum += fast_expf(l[j] - mx);
        losses[i] = logf(sum) + mx - l[target[i]];
    }
    double total = 0.0;
    for (int i = 0; i < N; i++) total += losses[i];
    return total;
}

void al_crossentropy_backward(float *logits, const int *target, float scale, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        float *l = logits + (size_t)i * Vp;
        if (target[i] < 0) {
            memset(l, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        float mx = max_f(l, V);
        float sum = exp_shift_sum(l, V, mx);
        float inv = scale / sum;
        for (int j = 0; j < V; j++) l[j] *= inv;
        l[target[i]] -= scale;
        for (int j = V; j < Vp; j++) l[j] = 0.0f;
    }
}

/* ---- optimizer and reductions ------------------------------------------------ */

void al_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                     float beta2, float eps, float wd, int t) {
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
        float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / c1, vhat = vi / c2;
        p[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p[i]);
    }
}

double al_sumsq(const float *x, size_t n) {
    enum { MAXT = 256 };
    double part[MAXT] = {0};
    int nt = imin(omp_get_max_threads(), MAXT);
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads();
        size_t lo = n * (size_t)t / (size_t)k, hi = n * (size_t)(t + 1) / (size_t)k;
        /* 8 double lanes, combined pairwise, then the tail */
        double acc[8] = {0};
        size_t i = lo;
        for (; i + 8 <= hi; i += 8)
            for (int j = 0; j < 8; j++) acc[j] += (double)x[i + j] * (double)x[i + j];
        for (int w = 4; w > 0; w /= 2)
            for (int j = 0; j < w; j++) acc[j] += acc[j + w];
        double s = acc[0];
        for (; i < hi; i++) s += (double)x[i] * (double)x[i];
        part[t] = s;
    }
    double s = 0.0;
    for (int t = 0; t < nt; t++) s += part[t];
    return s;
}

void al_add(float *acc, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) acc[i] += x[i];
}

void al_scale(float *x, size_t n, float s) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}
