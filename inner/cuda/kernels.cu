/*
 * kernels.cu -- fp32 CUDA kernels for the GPT ops (see al_cuda.h).
 *
 * Row-wise ops use one warp per row (shuffle reductions); column reductions use
 * one thread per column walking the rows in order (deterministic); matmuls are
 * cuBLAS calls on the row-major buffers read as column-major transposes:
 * a row-major [R, K] matrix is a column-major [K, R] one with leading dim K.
 */
#include "al_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <string.h>

#define STREAM(g) ((cudaStream_t)(g)->stream)
#define BLAS(g) ((cublasHandle_t)(g)->blas)

static unsigned blocks_for(size_t n, unsigned threads) {
    return (unsigned)((n + threads - 1) / threads);
}

/* ---- context -------------------------------------------------------------------- */

extern "C" int al_cuda_device_count(void) {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

extern "C" int al_cuda_init(al_cuda *g, int device, al_err *err) {
    memset(g, 0, sizeof *g);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return al_errf(err, AL_EUNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    if (device < 0 || device >= count)
        return al_errf(err, AL_EUNSUPPORTED, "no CUDA device: device %d requested, %d present",
                       device, count);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return al_errf(err, AL_EIO, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(g->name, sizeof g->name, "%s", prop.name);
    cudaStream_t s;
    if ((e = cudaStreamCreate(&s)) != cudaSuccess)
        return al_errf(err, AL_EIO, "cudaStreamCreate: %s", cudaGetErrorString(e));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(s);
        return al_errf(err, AL_EIO, "cublasCreate failed");
    }
    cublasSetStream(h, s);
    /* fp32 reference mode: no TF32 tensor-core rounding */
    cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
    g->device = device;
    g->stream = s;
    g->blas = h;
    return 0;
}

extern "C" void al_cuda_free(al_cuda *g) {
    if (g->blas) cublasDestroy(BLAS(g));
    if (g->stream) cudaStreamDestroy(STREAM(g));
    memset(g, 0, sizeof *g);
}

extern "C" int al_cuda_sync(al_cuda *g, al_err *err) {
    cudaError_t e = cudaStreamSynchronize(STREAM(g));
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) return al_errf(err, AL_EIO, "CUDA: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int al_cuda_alloc(al_cuda *g, void **p, size_t bytes, al_err *err) {
    (void)g;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e != cudaSuccess)
        return al_errf(err, AL_ENOMEM, "cudaMalloc(%zu): %s", bytes, cudaGetErrorString(e));
    return 0;
}

extern "C" void al_cuda_release(al_cuda *g, void *p) {
    (void)g;
    if (p) cudaFree(p);
}

static int copy(al_cuda *g, void *dst, const void *src, size_t n, cudaMemcpyKind k, al_err *err) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, k, STREAM(g));
    if (e == cudaSuccess) e = cudaStreamSynchronize(STREAM(g));
    if (e != cudaSuccess) return al_errf(err, AL_EIO, "cudaMemcpy: %s", cudaGetErrorString(e));
    return 0;
}

extern "C" int al_cuda_upload(al_cuda *g, void *dst, const void *src, size_t n, al_err *err) {
    return copy(g, dst, src, n, cudaMemcpyHostToDevice, err);
}
extern "C" int al_cuda_download(al_cuda *g, void *dst, const void *src, size_t n, al_err *err) {
    return copy(g, dst, src, n, cudaMemcpyDeviceToHost, err);
}
extern "C" int al_cuda_zero(al_cuda *g, void *p, size_t n, al_err *err) {
    cudaError_t e = cudaMemsetAsync(p, 0, n, STREAM(g));
    if (e != cudaSuccess) return al_errf(err, AL_EIO, "cudaMemset: %s", cudaGetErrorString(e));
    return 0;
}

/* ---- warp helpers ---------------------------------------------------------------- */

__device__ static float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ static float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

/* one warp per row: 4 warps (128 threads) per block */
#define ROW_WARPS 4
static unsigned row_blocks(int rows) {
    return (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS);
}
#define ROW_INDEX() (blockIdx.x * ROW_WARPS + threadIdx.x / 32)
#define LANE() (threadIdx.x % 32)

/* ---- encoder ------------------------------------------------------------------- */

__global__ static void encoder_fwd(float *out, const int *tok, const int *pos, const float *wte,
                                   const float *wpe, int N, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C) return;
    int i = (int)(idx / C), c = (int)(idx % C);
    out[idx] = wte[(size_t)tok[i] * C + c] + wpe[(size_t)pos[i] * C + c];
}

/* one thread per column, rows in order: repeated tokens sum deterministically */
__global__ static void encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tok,
                                   const int *pos, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int i = 0; i < N; i++) {
        float d = dout[(size_t)i * C + c];
        dwte[(size_t)tok[i] * C + c] += d;
        dwpe[(size_t)pos[i] * C + c] += d;
    }
}

extern "C" void al_encoder_forward_cuda(al_cuda *g, float *out, const int *tok, const int *pos,
                                        const float *wte, const float *wpe, int N, int C) {
    size_t n = (size_t)N * C;
    encoder_fwd<<<blocks_for(n, 256), 256, 0, STREAM(g)>>>(out, tok, pos, wte, wpe, N, C);
}

extern "C" void al_encoder_backward_cuda(al_cuda *g, float *dwte, float *dwpe, const float *dout,
                                         const int *tok, const int *pos, int N, int C) {
    encoder_bwd<<<blocks_for((size_t)C, 128), 128, 0, STREAM(g)>>>(dwte, dwpe, dout, tok, pos, N,
                                                                   C);
}

/* ---- layernorm ----------------------------------------------------------------- */

__global__ static void layernorm_fwd(float *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, int N, int C) {
    int i = ROW_INDEX(), lane = LANE();
    if (i >= N) return;
    const float *x = inp + (size_t)i * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    float r = rsqrtf(warp_sum(v) / (float)C + 1e-5f);
    float *o = out + (size_t)i * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        mean[i] = m;
        rstd[i] = r;
    }
}

/* dinp += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dout * w */
__global__ static void layernorm_bwd_inp(float *dinp, const float *dout, const float *inp,
                                         const float *w, const float *mean, const float *rstd,
                                         int N, int C) {
    int i = ROW_INDEX(), lane = LANE();
    if (i >= N) return;
    const float *x = inp + (size_t)i * C, *d = dout + (size_t)i * C;
    float m = mean[i], r = rstd[i], a = 0.0f, b = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * r, dn = d[c] * w[c];
        a += dn;
        b += dn * norm;
    }
    a = warp_sum(a) / (float)C;
    b = warp_sum(b) / (float)C;
    float *dx = dinp + (size_t)i * C;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * r;
        dx[c] += r * (d[c] * w[c] - a - norm * b);
    }
}

__global__ static void layernorm_bwd_params(float *dw, float *db, const float *dout,
                                            const float *inp, const float *mean, const float *rstd,
                                            int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int i = 0; i < N; i++) {
        float d = dout[(size_t)i * C + c];
        sw += d * (inp[(size_t)i * C + c] - mean[i]) * rstd[i];
        sb += d;
    }
    dw[c] += sw;
    db[c] += sb;
}

extern "C" void al_layernorm_forward_cuda(al_cuda *g, float *out, float *mean, float *rstd,
                                          const float *inp, const float *w, const float *b, int N,
                                          int C) {
    layernorm_fwd<<<row_blocks(N), ROW_WARPS * 32, 0, STREAM(g)>>>(out, mean, rstd, inp, w, b, N,
                                                                   C);
}

extern "C" void al_layernorm_backward_cuda(al_cuda *g, float *dinp, float *dw, float *db,
                                           const float *dout, const float *inp, const float *w,
                                           const float *mean, const float *rstd, int N, int C) {
    layernorm_bwd_inp<<<row_blocks(N), ROW_WARPS * 32, 0, STREAM(g)>>>(dinp, dout, inp, w, mean,
                                                                       rstd, N, C);
    layernorm_bwd_params<<<blocks_for((size_t)C, 128), 128, 0, STREAM(g)>>>(dw, db, dout, inp,
                                                                            mean, rstd, N, C);
}

/* ---- matmul ------------------------------------------------------------------------ */

__global__ static void add_bias(float *out, const float *bias, int N, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (size_t)N * OC) out[idx] += bias[idx % OC];
}

__global__ static void col_sum(float *dbias, const float *dout, int N, int OC) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) return;
    float s = 0.0f;
    for (int i = 0; i < N; i++) s += dout[(size_t)i * OC + c];
    dbias[c] += s;
}

extern "C" void al_matmul_forward_cuda(al_cuda *g, float *out, const float *inp, const float *w,
                                       const float *bias, int N, int IC, int OC, int accumulate) {
    /* column-major: out^T[OC,N] = w^T^T[OC,IC] * inp^T[IC,N] */
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    cublasSgemm(BLAS(g), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, IC, inp, IC, &beta, out,
                OC);
    if (bias) {
        size_t n = (size_t)N * OC;
        add_bias<<<blocks_for(n, 256), 256, 0, STREAM(g)>>>(out, bias, N, OC);
    }
}

extern "C" void al_matmul_backward_cuda(al_cuda *g, float *dinp, float *dw, float *dbias,
                                        const float *dout, const float *inp, const float *w, int N,
                                        int IC, int OC, int accumulate) {
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    /* dinp^T[IC,N] = w^T[IC,OC] * dout^T[OC,N] */
    if (dinp)
        cublasSgemm(BLAS(g), CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w, IC, dout, OC, &beta,
                    dinp, IC);
    /* dw^T[IC,OC] += inp^T[IC,N] * dout[N,OC] */
    cublasSgemm(BLAS(g), CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one, inp, IC, dout, OC, &one, dw, IC);
    if (dbias) col_sum<<<blocks_for((size_t)OC, 128), 128, 0, STREAM(g)>>>(dbias, dout, N, OC);
}

/* ---- attention ------------------------------------------------------------------------
 * Per row b, all heads at once with strided-batched cuBLAS (head stride hs in
 * qkv, T*T in the score scratch). S = scale q k^T, masked softmax per query row
 * over keys docstart[i]..i, out = P v. The backward recomputes P from the saved
 * log-sum-exp; see al_kernels.h for the formulas. */

/* rows of S [NH*T, T] for one batch row: softmax and its lse (lse_in NULL), or
 * P recomputed from a saved lse */
__global__ static void attn_softmax(float *S, float *lse_out, const float *lse_in, const int *ds,
                                    int NH, int T) {
    int r = ROW_INDEX(), lane = LANE();
    if (r >= NH * T) return;
    int i = r % T, s = ds[i];
    float *row = S + (size_t)r * T;
    if (!lse_in) {
        float mx = -INFINITY;
        for (int j = s + lane; j <= i; j += 32) mx = fmaxf(mx, row[j]);
        mx = warp_max(mx);
        float sum = 0.0f;
        for (int j = s + lane; j <= i; j += 32) sum += __expf(row[j] - mx);
        sum = warp_sum(sum);
        for (int j = lane; j < T; j += 32)
            row[j] = (j >= s && j <= i) ? __expf(row[j] - mx) / sum : 0.0f;
        if (lane == 0) lse_out[r] = mx + logf(sum);
    } else {
        float l = lse_in[r];
        for (int j = lane; j < T; j += 32) row[j] = (j >= s && j <= i) ? __expf(row[j] - l) : 0.0f;
    }
}

/* dS = P * (dP - rowsum(P * dP)), in place over dP */
__global__ static void attn_dsoftmax(float *dP, const float *P, int rows, int T) {
    int r = ROW_INDEX(), lane = LANE();
    if (r >= rows) return;
    const float *p = P + (size_t)r * T;
    float *d = dP + (size_t)r * T;
    float dot = 0.0f;
    for (int j = lane; j < T; j += 32) dot += p[j] * d[j];
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += 32) d[j] = p[j] * (d[j] - dot);
}

extern "C" void al_attention_forward_cuda(al_cuda *g, float *out, float *lse, const float *qkv,
                                          const int *docstart, int B, int T, int C, int NH,
                                          float *scratch) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs), one = 1.0f, zero = 0.0f;
    long long sT = (long long)T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + C, *v = q + 2 * C;
        /* S^T (column-major) = k_cm^T q_cm, i.e. S = q k^T row-major */
        cublasSgemmStridedBatched(BLAS(g), CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, C3, hs,
                                  q, C3, hs, &zero, scratch, T, sT, NH);
        attn_softmax<<<row_blocks(NH * T), ROW_WARPS * 32, 0, STREAM(g)>>>(
            scratch, lse + (size_t)b * NH * T, NULL, docstart + (size_t)b * T, NH, T);
        /* out_h^T[hs,T] = v_cm[hs,T] * P^T */
        cublasSgemmStridedBatched(BLAS(g), CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &one, v, C3, hs,
                                  scratch, T, sT, &zero, out + (size_t)b * T * C, C, hs, NH);
    }
}

extern "C" void al_attention_backward_cuda(al_cuda *g, float *dqkv, const float *dout,
                                           const float *qkv, const float *lse,
                                           const int *docstart, int B, int T, int C, int NH,
                                           float *scratch) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs), one = 1.0f, zero = 0.0f;
    long long sT = (long long)T * T;
    float *P = scratch, *dS = scratch + (size_t)NH * T * T;
    for (int b = 0; b < B; b++) {
        const float *q = qkv + (size_t)b * T * C3, *k = q + C, *v = q + 2 * C;
        const float *dO = dout + (size_t)b * T * C;
        float *dq = dqkv + (size_t)b * T * C3, *dk = dq + C, *dv = dq + 2 * C;
        cublasSgemmStridedBatched(BLAS(g), CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &scale, k, C3, hs,
                                  q, C3, hs, &zero, P, T, sT, NH);
        attn_softmax<<<row_blocks(NH * T), ROW_WARPS * 32, 0, STREAM(g)>>>(
            P, NULL, lse + (size_t)b * NH * T, docstart + (size_t)b * T, NH, T);
        /* dP = dO v^T */
        cublasSgemmStridedBatched(BLAS(g), CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, &one, v, C3, hs,
                                  dO, C, hs, &zero, dS, T, sT, NH);
        attn_dsoftmax<<<row_blocks(NH * T), ROW_WARPS * 32, 0, STREAM(g)>>>(dS, P, NH * T, T);
        /* dq = scale dS k;  dk = scale dS^T q;  dv = P^T dO */
        cublasSgemmStridedBatched(BLAS(g), CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, &scale, k, C3, hs,
                                  dS, T, sT, &zero, dq, C3, hs, NH);
        cublasSgemmStridedBatched(BLAS(g), CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &scale, q, C3, hs,
                                  dS, T, sT, &zero, dk, C3, hs, NH);
        cublasSgemmStridedBatched(BLAS(g), CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, &one, dO, C, hs, P,
                                  T, sT, &zero, dv, C3, hs, NH);
    }
}

/* ---- GELU --------------------------------------------------------------------------- */

#define GELU_K 0.7978845608028654f

__global__ static void gelu_fwd(float *out, const float *inp, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
}

__global__ static void gelu_bwd(float *dinp, const float *inp, const float *dout, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = inp[i], th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
    float du = GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = dout[i] * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
}

extern "C" void al_gelu_forward_cuda(al_cuda *g, float *out, const float *inp, size_t n) {
    gelu_fwd<<<blocks_for(n, 256), 256, 0, STREAM(g)>>>(out, inp, n);
}
extern "C" void al_gelu_backward_cuda(al_cuda *g, float *dinp, const float *inp, const float *dout,
                                      size_t n) {
    gelu_bwd<<<blocks_for(n, 256), 256, 0, STREAM(g)>>>(dinp, inp, dout, n);
}

/* ---- softmax + cross-entropy ---------------------------------------------------------- */

__global__ static void ce_fwd(float *losses, const float *logits, const int *target, int N, int V,
                              int Vp) {
    int i = ROW_INDEX(), lane = LANE();
    if (i >= N) return;
    if (target[i] < 0) {
        if (lane == 0) losses[i] = 0.0f;
        return;
    }
    const float *l = logits + (size_t)i * Vp;
    float mx = -INFINITY;
    for (int j = lane; j < V; j += 32) mx = fmaxf(mx, l[j]);
    mx = warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j < V; j += 32) s += __expf(l[j] - mx);
    s = warp_sum(s);
    if (lane == 0) losses[i] = logf(s) + mx - l[target[i]];
}

__global__ static void ce_bwd(float *logits, const int *target, float scale, int N, int V,
                              int Vp) {
    int i = ROW_INDEX(), lane = LANE();
    if (i >= N) return;
    float *l = logits + (size_t)i * Vp;
    int t = target[i];
    if (t < 0) {
        for (int j = lane; j < Vp; j += 32) l[j] = 0.0f;
        return;
    }
    float mx = -INFINITY;
    for (int j = lane; j < V; j += 32) mx = fmaxf(mx, l[j]);
    mx = warp_max(mx);
    float s = 0.0f;
    for (int j = lane; j < V; j += 32) s += __expf(l[j] - mx);
    s = warp_sum(s);
    for (int j = lane; j < Vp; j += 32)
        l[j] = j < V ? scale * (__expf(l[j] - mx) / s - (j == t ? 1.0f : 0.0f)) : 0.0f;
}

extern "C" void al_crossentropy_forward_cuda(al_cuda *g, float *losses, const float *logits,
                                             const int *target, int N, int V, int Vp) {
    ce_fwd<<<row_blocks(N), ROW_WARPS * 32, 0, STREAM(g)>>>(losses, logits, target, N, V, Vp);
}
extern "C" void al_crossentropy_backward_cuda(al_cuda *g, float *logits, const int *target,
                                              float scale, int N, int V, int Vp) {
    ce_bwd<<<row_blocks(N), ROW_WARPS * 32, 0, STREAM(g)>>>(logits, target, scale, N, V, Vp);
}

/* ---- AdamW -------------------------------------------------------------------------- */

__global__ static void adamw(float *p, const float *g, float *m, float *v, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float c1, float c2) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float mi = b1 * m[i] + (1.0f - b1) * g[i];
    float vi = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
}

extern "C" void al_adamw_update_cuda(al_cuda *g, float *p, const float *grad, float *m, float *v,
                                     size_t n, float lr, float beta1, float beta2, float eps,
                                     float wd, int t) {
    float c1 = 1.0f - powf(beta1, (float)t), c2 = 1.0f - powf(beta2, (float)t);
    adamw<<<blocks_for(n, 256), 256, 0, STREAM(g)>>>(p, grad, m, v, n, lr, beta1, beta2, eps, wd,
                                                     c1, c2);
}

/* ---- sum of squares, scale ------------------------------------------------------------ */

/* AL_CUDA_SUMSQ_BLOCKS blocks of 256 threads stride over x; each block reduces
 * its threads' partials in a fixed tree, so the partials are repeatable. */
__global__ static void sumsq_partials(double *out, const float *x, size_t n) {
    __shared__ double sh[256];
    double s = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        s += (double)x[i] * (double)x[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int o = 128; o > 0; o >>= 1) {
        if ((int)threadIdx.x < o) sh[threadIdx.x] += sh[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}

extern "C" void al_sumsq_cuda(al_cuda *g, double *partials, const float *x, size_t n) {
    sumsq_partials<<<AL_CUDA_SUMSQ_BLOCKS, 256, 0, STREAM(g)>>>(partials, x, n);
}

__global__ static void scale_kernel(float *x, size_t n, float s) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

extern "C" void al_scale_cuda(al_cuda *g, float *x, size_t n, float s) {
    if (n) scale_kernel<<<blocks_for(n, 256), 256, 0, STREAM(g)>>>(x, n, s);
}

__global__ static void add_kernel(float *acc, const float *x, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += x[i];
}

extern "C" void al_add_cuda(al_cuda *g, float *acc, const float *x, size_t n) {
    if (n) add_kernel<<<blocks_for(n, 256), 256, 0, STREAM(g)>>>(acc, x, n);
}

extern "C" int al_cuda_copy(al_cuda *g, void *dst, const void *src, size_t n, al_err *err) {
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, STREAM(g));
    if (e != cudaSuccess) return al_errf(err, AL_EIO, "cudaMemcpy: %s", cudaGetErrorString(e));
    return 0;
}
