/*
 * kernels.c -- fast fp32 CPU kernels (see al_kernels.h for the contracts).
 *
 * Every matmul goes through OpenBLAS sgemm. Element-wise and row-wise work is
 * split over OpenMP threads with static schedules, and every reduction that
 * crosses rows is done in per-thread partials combined in thread order, so a
 * run is bit-for-bit repeatable for a fixed thread count (resume depends on it).
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

/* tanh(u) = 1 - 2 / (exp(2u) + 1); absolute error ~1e-7, which is what GELU needs. */
static inline float fast_tanhf(float u) {
    return 1.0f - 2.0f / (fast_expf(2.0f * u) + 1.0f);
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
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += x[c];
        float m = s / (float)C;
        float v = 0.0f;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        float r = 1.0f / sqrtf(v / (float)C + 1e-5f);
        float *o = out + (size_t)i * C;
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        mean[i] = m;
        rstd[i] = r;
    }
}

void al_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C) {
    int nt = omp_get_max_threads();
    float *part = calloc((size_t)nt * 2 * C, sizeof(float)); /* per-thread dw | db */
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), n = omp_get_num_threads();
        float *pdw = part + (size_t)t * 2 * C, *pdb = pdw + C;
        int lo = (int)((long)N * t / n), hi = (int)((long)N * (t + 1) / n);
        for (int i = lo; i < hi; i++) {
            const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
            float *dx = dinp + (size_t)i * C;
            float m = mean[i], r = rstd[i];
            /* dnorm = dout * w; dx = r * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) */
            float a = 0.0f, bsum = 0.0f;
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * r, dn = d[c] * w[c];
                a += dn;
                bsum += dn * norm;
            }
            a /= (float)C;
            bsum /= (float)C;
            for (int c = 0; c < C; c++) {
                float norm = (x[c] - m) * r, dn = d[c] * w[c];
                pdw[c] += d[c] * norm;
                pdb[c] += d[c];
                dx[c] += r * (dn - a - norm * bsum);
            }
        }
    }
    for (int t = 0; t < nt; t++)
        for (int c = 0; c < C; c++) {
            dw[c] += part[(size_t)t * 2 * C + c];
            db[c] += part[(size_t)t * 2 * C + C + c];
        }
    free(part);
}

/* ---- matmul ------------------------------------------------------------- */

void al_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                       int IC, int OC, int accumulate) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp, IC, w, IC,
                accumulate ? 1.0f : 0.0f, out, OC);
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++) {
            float *o = out + (size_t)i * OC;
            for (int c = 0; c < OC; c++) o[c] += bias[c];
        }
    }
}

void al_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int IC, int OC, int accumulate) {
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout, OC, w, IC,
                    accumulate ? 1.0f : 0.0f, dinp, IC);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f,
                dw, IC);
    if (dbias) {
        /* column sums, each thread owns a block of 64 columns: no shared sums */
        int nblk = (OC + 63) / 64;
#pragma omp parallel for schedule(static)
        for (int bk = 0; bk < nblk; bk++) {
            int c0 = bk * 64, c1 = imin(c0 + 64, OC);
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
 * S and P are T x T per head, computed with sgemm (O(T^2 hs) per head) and kept
 * only in per-thread scratch; the backward recomputes P from the saved
 * log-sum-exp instead of storing B*NH*T*T floats. Backward, with dP = dout_h v^T:
 *   dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik);  dq = dS k / sqrt(hs);
 *   dk = dS^T q / sqrt(hs);  dv = P^T dout_h.
 * (b, h) pairs run in parallel; sgemm inside runs on one thread there. */

static void attn_probs(float *P, const float *lse_or_null, float *lse_out, const int *ds, int T) {
    for (int i = 0; i < T; i++) {
        float *row = P + (size_t)i * T;
        int s = ds[i];
        if (lse_or_null) {
            float l = lse_or_null[i];
            for (int j = s; j <= i; j++) row[j] = fast_expf(row[j] - l);
        } else {
            float mx = -INFINITY;
            for (int j = s; j <= i; j++) mx = row[j] > mx ? row[j] : mx;
            float sum = 0.0f;
            for (int j = s; j <= i; j++) {
                row[j] = fast_expf(row[j] - mx);
                sum += row[j];
            }
            float inv = 1.0f / sum;
            for (int j = s; j <= i; j++) row[j] *= inv;
            lse_out[i] = mx + logf(sum);
        }
        for (int j = 0; j < s; j++) row[j] = 0.0f;
        for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
}

void al_attention_forward(float *out, float *lse, const float *qkv, const int *docstart, int B,
                          int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *P = malloc((size_t)T * T * sizeof(float));
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3,
                        0.0f, P, T);
            attn_probs(P, NULL, lse + (size_t)bh * T, docstart + (size_t)b * T, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, v, C3,
                        0.0f, out + (size_t)b * T * C + h * hs, C);
        }
        free(P);
    }
}

void al_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                           const int *docstart, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel
    {
        float *P = malloc((size_t)T * T * sizeof(float));
        float *dS = malloc((size_t)T * T * sizeof(float));
#pragma omp for schedule(static)
        for (int bh = 0; bh < B * NH; bh++) {
            int b = bh / NH, h = bh % NH;
            const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            float *dq = dqkv + (size_t)b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
            const int *ds = docstart + (size_t)b * T;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3,
                        0.0f, P, T);
            attn_probs(P, lse + (size_t)bh * T, NULL, ds, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dO, C, v, C3, 0.0f,
                        dS, T);
            for (int i = 0; i < T; i++) {
                float *p = P + (size_t)i * T, *d = dS + (size_t)i * T;
                float dot = 0.0f;
                for (int j = ds[i]; j <= i; j++) dot += p[j] * d[j];
                for (int j = 0; j < T; j++) d[j] = p[j] * (d[j] - dot); /* p = 0 off-mask */
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, dS, T, k, C3,
                        0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, dS, T, q, C3,
                        0.0f, dk, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, dO, C, 0.0f,
                        dv, C3);
        }
        free(P);
        free(dS);
    }
}

/* ---- GELU ---------------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

void al_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        out[i] = 0.5f * x * (1.0f + fast_tanhf(u));
    }
}

void al_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    /* d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx,
     * du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2) */
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = fast_tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
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
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j < V; j++) sum += fast_expf(l[j] - mx);
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
        float mx = -INFINITY;
        for (int j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        float sum = 0.0f;
        for (int j = 0; j < V; j++) {
            l[j] = fast_expf(l[j] - mx);
            sum += l[j];
        }
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
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];
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
