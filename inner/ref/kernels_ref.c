/*
 * kernels_ref.c -- naive double-precision reference kernels.
 *
 * Plain loops that follow the maths line by line, with no care for speed. The
 * tests check the fast fp32 kernels against these, and check these backwards
 * against central finite differences of these forwards.
 */
#include "al_kernels.h"

#include <math.h>
#include <string.h>

void al_encoder_forward_ref(double *out, const int *tok, const int *pos, const double *wte,
                            const double *wpe, int N, int C) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++)
            out[i * C + c] = wte[(size_t)tok[i] * C + c] + wpe[(size_t)pos[i] * C + c];
}

void al_encoder_backward_ref(double *dwte, double *dwpe, const double *dout, const int *tok,
                             const int *pos, int N, int C) {
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            dwte[(size_t)tok[i] * C + c] += dout[i * C + c];
            dwpe[(size_t)pos[i] * C + c] += dout[i * C + c];
        }
}

void al_layernorm_forward_ref(double *out, double *mean, double *rstd, const double *inp,
                              const double *w, const double *b, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double *x = inp + (size_t)i * C;
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        v /= C;
        double r = 1.0 / sqrt(v + 1e-5);
        for (int c = 0; c < C; c++) out[(size_t)i * C + c] = (x[c] - m) * r * w[c] + b[c];
        mean[i] = m;
        rstd[i] = r;
    }
}

void al_layernorm_backward_ref(double *dinp, double *dw, double *db, const double *dout,
                               const double *inp, const double *w, const double *mean,
                               const double *rstd, int N, int C) {
    for (int i = 0; i < N; i++) {
        const double *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
        double dn_mean = 0, dn_norm_mean = 0;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - mean[i]) * rstd[i];
            dn_mean += d[c] * w[c];
            dn_norm_mean += d[c] * w[c] * norm;
        }
        dn_mean /= C;
        dn_norm_mean /= C;
        for (int c = 0; c < C; c++) {
            double norm = (x[c] - mean[i]) * rstd[i];
            dw[c] += d[c] * norm;
            db[c] += d[c];
            dinp[(size_t)i * C + c] += rstd[i] * (d[c] * w[c] - dn_mean - norm * dn_norm_mean);
        }
    }
}

void al_matmul_forward_ref(double *out, const double *inp, const double *w, const double *bias,
                           int N, int IC, int OC, int accumulate) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int k = 0; k < IC; k++) s += inp[(size_t)i * IC + k] * w[(size_t)o * IC + k];
            out[(size_t)i * OC + o] = (accumulate ? out[(size_t)i * OC + o] : 0.0) + s;
        }
}

void al_matmul_backward_ref(double *dinp, double *dw, double *dbias, const double *dout,
                            const double *inp, const double *w, int N, int IC, int OC,
                            int accumulate) {
    for (int i = 0; i < N; i++)
        for (int k = 0; k < IC; k++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += dout[(size_t)i * OC + o] * w[(size_t)o * IC + k];
            if (dinp) dinp[(size_t)i * IC + k] = (accumulate ? dinp[(size_t)i * IC + k] : 0.0) + s;
        }
    for (int o = 0; o < OC; o++) {
        for (int k = 0; k < IC; k++) {
            double s = 0;
            for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + o] * inp[(size_t)i * IC + k];
            dw[(size_t)o * IC + k] += s;
        }
        if (dbias)
            for (int i = 0; i < N; i++) dbias[o] += dout[(size_t)i * OC + o];
    }
}

/* The allowed keys of query i in a row: docstart[i] <= j <= i. */
void al_attention_forward_ref(double *out, double *lse, const double *qkv, const int *docstart,
                              int B, int T, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                int s = docstart[b * T + i];
                double mx = -INFINITY, score[4096];
                for (int j = s; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double dot = 0;
                    for (int c = 0; c < hs; c++) dot += q[c] * k[c];
                    score[j] = dot * scale;
                    if (score[j] > mx) mx = score[j];
                }
                double sum = 0;
                for (int j = s; j <= i; j++) sum += exp(score[j] - mx);
                lse[((size_t)b * NH + h) * T + i] = mx + log(sum);
                double *o = out + ((size_t)b * T + i) * C + h * hs;
                for (int c = 0; c < hs; c++) o[c] = 0;
                for (int j = s; j <= i; j++) {
                    double p = exp(score[j] - mx) / sum;
                    const double *v = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    for (int c = 0; c < hs; c++) o[c] += p * v[c];
                }
            }
}

void al_attention_backward_ref(double *dqkv, const double *dout, const double *qkv,
                               const double *lse, const int *docstart, int B, int T, int C,
                               int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    memset(dqkv, 0, (size_t)B * T * 3 * C * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)b * T + i) * 3 * C + h * hs;
                const double *dO = dout + ((size_t)b * T + i) * C + h * hs;
                double *dq = dqkv + ((size_t)b * T + i) * 3 * C + h * hs;
                int s = docstart[b * T + i];
                double p[4096], dp[4096], dot = 0;
                for (int j = s; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    const double *v = k + C;
                    double sc = 0;
                    for (int c = 0; c < hs; c++) sc += q[c] * k[c];
                    p[j] = exp(sc * scale - lse[((size_t)b * NH + h) * T + i]);
                    dp[j] = 0;
                    for (int c = 0; c < hs; c++) dp[j] += dO[c] * v[c];
                    dot += p[j] * dp[j];
                }
                for (int j = s; j <= i; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double *dk = dqkv + ((size_t)b * T + j) * 3 * C + C + h * hs, *dv = dk + C;
                    double ds = p[j] * (dp[j] - dot) * scale;
                    for (int c = 0; c < hs; c++) {
                        dq[c] += ds * k[c];
                        dk[c] += ds * q[c];
                        dv[c] += p[j] * dO[c];
                    }
                }
            }
}

static double gelu_ref(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

void al_gelu_forward_ref(double *out, const double *inp, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gelu_ref(inp[i]);
}

void al_gelu_backward_ref(double *dinp, const double *inp, const double *dout, size_t n) {
    double k = sqrt(2.0 / M_PI);
    for (size_t i = 0; i < n; i++) {
        double x = inp[i], th = tanh(k * (x + 0.044715 * x * x * x));
        double du = k * (1.0 + 3.0 * 0.044715 * x * x);
        dinp[i] = dout[i] * (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du);
    }
}

double al_crossentropy_forward_ref(double *losses, const double *logits, const int *target, int N,
                                   int V, int Vp) {
    double total = 0;
    for (int i = 0; i < N; i++) {
        losses[i] = 0;
        if (target[i] < 0) continue;
        const double *l = logits + (size_t)i * Vp;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, l[j]);
        for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
        losses[i] = log(sum) + mx - l[target[i]];
        total += losses[i];
    }
    return total;
}

void al_crossentropy_backward_ref(double *logits, const int *target, double scale, int N, int V,
                                  int Vp) {
    for (int i = 0; i < N; i++) {
        double *l = logits + (size_t)i * Vp;
        if (target[i] < 0) {
            for (int j = 0; j < Vp; j++) l[j] = 0;
            continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++) mx = fmax(mx, l[j]);
        for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
        for (int j = 0; j < V; j++) l[j] = scale * (exp(l[j] - mx) / sum - (j == target[i]));
        for (int j = V; j < Vp; j++) l[j] = 0;
    }
}

void al_adamw_update_ref(double *p, const double *g, double *m, double *v, size_t n, double lr,
                         double beta1, double beta2, double eps, double wd, int t) {
    for (size_t i = 0; i < n; i++) {
        m[i] = beta1 * m[i] + (1 - beta1) * g[i];
        v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
        double mhat = m[i] / (1 - pow(beta1, t)), vhat = v[i] / (1 - pow(beta2, t));
        p[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * p[i]);
    }
}
