/*
 * al_cuda.h -- the GPT kernels on an NVIDIA GPU (fp32), C-callable.
 *
 * Same ops and contracts as al_kernels.h, on device pointers, with an explicit
 * context (stream + cuBLAS handle) as first argument. Matmuls go through
 * cuBLAS; everything else is a hand-written kernel in kernels.cu. Reductions
 * across rows (bias, LayerNorm gains, embedding gradients) use one thread per
 * output column looping over rows in order, so results are repeatable.
 *
 * Built only with -Dcuda=enabled/auto and nvcc present. Without a GPU at run
 * time al_cuda_init fails with AL_EUNSUPPORTED and a reason; tests then skip.
 */
#ifndef AL_CUDA_H
#define AL_CUDA_H

#include <stddef.h>

#include "al_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct al_cuda {
    int device;
    void *stream; /* cudaStream_t */
    void *blas;   /* cublasHandle_t */
    char name[256];
} al_cuda;

/* GPUs CUDA can use (0 when there is no driver or device). */
int al_cuda_device_count(void);
/* Pick `device`, create a stream and a cuBLAS handle. */
int al_cuda_init(al_cuda *g, int device, al_err *err);
void al_cuda_free(al_cuda *g);
/* Wait for the stream; AL_EIO with CUDA's message if a kernel failed. */
int al_cuda_sync(al_cuda *g, al_err *err);

int al_cuda_alloc(al_cuda *g, void **p, size_t bytes, al_err *err);
void al_cuda_release(al_cuda *g, void *p);
int al_cuda_upload(al_cuda *g, void *dst, const void *src, size_t bytes, al_err *err);
int al_cuda_download(al_cuda *g, void *dst, const void *src, size_t bytes, al_err *err);
int al_cuda_zero(al_cuda *g, void *p, size_t bytes, al_err *err);
/* device to device, on the stream (does not wait) */
int al_cuda_copy(al_cuda *g, void *dst, const void *src, size_t bytes, al_err *err);

void al_encoder_forward_cuda(al_cuda *g, float *out, const int *tok, const int *pos,
                             const float *wte, const float *wpe, int N, int C);
void al_encoder_backward_cuda(al_cuda *g, float *dwte, float *dwpe, const float *dout,
                              const int *tok, const int *pos, int N, int C);
void al_layernorm_forward_cuda(al_cuda *g, float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, int N, int C);
void al_layernorm_backward_cuda(al_cuda *g, float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C);
void al_matmul_forward_cuda(al_cuda *g, float *out, const float *inp, const float *w,
                            const float *bias, int N, int IC, int OC, int accumulate);
void al_matmul_backward_cuda(al_cuda *g, float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int N, int IC, int OC,
                             int accumulate);
/* scratch: at least 2 * NH * T * T floats of device memory */
void al_attention_forward_cuda(al_cuda *g, float *out, float *lse, const float *qkv,
                               const int *docstart, int B, int T, int C, int NH, float *scratch);
void al_attention_backward_cuda(al_cuda *g, float *dqkv, const float *dout, const float *qkv,
                                const float *lse, const int *docstart, int B, int T, int C, int NH,
                                float *scratch);
void al_gelu_forward_cuda(al_cuda *g, float *out, const float *inp, size_t n);
void al_gelu_backward_cuda(al_cuda *g, float *dinp, const float *inp, const float *dout, size_t n);
void al_crossentropy_forward_cuda(al_cuda *g, float *losses, const float *logits, const int *target,
                                  int N, int V, int Vp);
void al_crossentropy_backward_cuda(al_cuda *g, float *logits, const int *target, float scale, int N,
                                   int V, int Vp);
void al_adamw_update_cuda(al_cuda *g, float *p, const float *grad, float *m, float *v, size_t n,
                          float lr, float beta1, float beta2, float eps, float wd, int t);
/* Sum of squares: AL_CUDA_SUMSQ_BLOCKS partial sums (double, device memory);
 * the caller adds them in order. Repeatable for a given n. */
#define AL_CUDA_SUMSQ_BLOCKS 1024
void al_sumsq_cuda(al_cuda *g, double *partials, const float *x, size_t n);
/* x *= s */
void al_scale_cuda(al_cuda *g, float *x, size_t n, float s);
/* acc += x (acc may be another process's memory opened through CUDA IPC) */
void al_add_cuda(al_cuda *g, float *acc, const float *x, size_t n);

#ifdef __cplusplus
}
#endif

#endif
