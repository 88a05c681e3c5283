/*
 * al_kernels.h -- the GPT building blocks: each op as a forward/backward pair.
 *
 * Conventions (as in llm.c): outputs first, then inputs, then sizes. Shapes are
 * in the comments, row-major. B = rows in a microbatch, T = tokens per row,
 * C = channels, NH = heads, N = B*T positions, V = real vocabulary, Vp = padded.
 * Backward kernels *accumulate* (+=) into parameter gradients; what they do to
 * activation gradients is stated per kernel.
 *
 * Two implementations share these signatures:
 *  - the fast fp32 CPU kernels (inner/cpu/kernels.c): OpenBLAS sgemm for every
 *    matmul, OpenMP over rows / (batch, head), deterministic for a fixed thread
 *    count (no atomics, reductions in a fixed order);
 *  - the naive double-precision references (inner/ref/kernels_ref.c), named
 *    *_ref: plain loops that follow the maths, used by the tests as the oracle
 *    (and checked themselves against finite differences).
 */
#ifndef AL_KERNELS_H
#define AL_KERNELS_H

#include <stddef.h>

/* Document structure of a packed microbatch: for position i of a row, docstart
 * is the row-local index where i's document begins (0 <= docstart[i] <= i).
 * Query i attends to keys j with docstart[i] <= j <= i: causal, and never across
 * a document boundary. */

/* ---- fast fp32 ------------------------------------------------------------ */

/* out[N,C] = wte[tok[i]] + wpe[pos[i]] */
void al_encoder_forward(float *out, const int *tok, const int *pos, const float *wte,
                        const float *wpe, int N, int C);
/* dwte[tok[i]] += dout[i]; dwpe[pos[i]] += dout[i] */
void al_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *tok,
                         const int *pos, int N, int C);

/* out[N,C] = (inp - mean) * rstd * w + b; saves mean[N], rstd[N] */
void al_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int N, int C);
/* dinp[N,C] += ..., dw[C] += ..., db[C] += ... */
void al_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int N, int C);

/* out[N,OC] = (accumulate ? out : 0) + inp[N,IC] @ w[OC,IC]^T + bias[OC] (bias may be NULL) */
void al_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                       int IC, int OC, int accumulate);
/* dinp[N,IC] (= or += per accumulate) dout @ w; dw[OC,IC] += dout^T @ inp; dbias[OC] += colsum */
void al_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int N, int IC, int OC, int accumulate);

/* out[B,T,C], lse[B,NH,T] (log-sum-exp of each softmax row, for the backward)
 * from qkv[B,T,3C] (q | k | v, head h at channels h*hs..), docstart[B,T]. */
void al_attention_forward(float *out, float *lse, const float *qkv, const int *docstart, int B,
                          int T, int C, int NH);
/* dqkv[B,T,3C] = gradient (overwritten) */
void al_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                           const int *docstart, int B, int T, int C, int NH);

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void al_gelu_forward(float *out, const float *inp, size_t n);
/* dinp = dout * gelu'(inp) (overwritten) */
void al_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* losses[N] = -log softmax(logits[i, :V])[target[i]], 0 where target < 0 (padding).
 * Returns the sum of losses (double). */
double al_crossentropy_forward(float *losses, const float *logits, const int *target, int N, int V,
                               int Vp);
/* In place: logits[N,Vp] becomes dlogits = scale * (softmax - onehot) on real
 * columns, 0 on padded columns and on ignored rows. */
void al_crossentropy_backward(float *logits, const int *target, float scale, int N, int V, int Vp);

/* AdamW on n elements (bias-corrected, decoupled weight decay, step t >= 1). */
void al_adamw_update(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                     float beta2, float eps, float wd, int t);

/* Sum of squares in double, deterministic for a fixed thread count. */
double al_sumsq(const float *x, size_t n);
/* x *= s */
void al_scale(float *x, size_t n, float s);
/* acc += x, element by element (sequential: the same sums on every machine) */
void al_add(float *acc, const float *x, size_t n);

/* ---- naive double references ----------------------------------------------- */
void al_encoder_forward_ref(double *out, const int *tok, const int *pos, const double *wte,
                            const double *wpe, int N, int C);
void al_encoder_backward_ref(double *dwte, double *dwpe, const double *dout, const int *tok,
                             const int *pos, int N, int C);
void al_layernorm_forward_ref(double *out, double *mean, double *rstd, const double *inp,
                              const double *w, const double *b, int N, int C);
void al_layernorm_backward_ref(double *dinp, double *dw, double *db, const double *dout,
                               const double *inp, const double *w, const double *mean,
                               const double *rstd, int N, int C);
void al_matmul_forward_ref(double *out, const double *inp, const double *w, const double *bias,
                           int N, int IC, int OC, int accumulate);
void al_matmul_backward_ref(double *dinp, double *dw, double *dbias, const double *dout,
                            const double *inp, const double *w, int N, int IC, int OC,
                            int accumulate);
void al_attention_forward_ref(double *out, double *lse, const double *qkv, const int *docstart,
                              int B, int T, int C, int NH);
void al_attention_backward_ref(double *dqkv, const double *dout, const double *qkv,
                               const double *lse, const int *docstart, int B, int T, int C, int NH);
void al_gelu_forward_ref(double *out, const double *inp, size_t n);
void al_gelu_backward_ref(double *dinp, const double *inp, const double *dout, size_t n);
double al_crossentropy_forward_ref(double *losses, const double *logits, const int *target, int N,
                                   int V, int Vp);
void al_crossentropy_backward_ref(double *logits, const int *target, double scale, int N, int V,
                                  int Vp);
void al_adamw_update_ref(double *p, const double *g, double *m, double *v, size_t n, double lr,
                         double beta1, double beta2, double eps, double wd, int t);

#endif
