/* backend_cpu.c -- the CPU backend: al_kernels.h on host memory (al_backend.h).
 * Also al_backend_open/close, which pick a backend by name. */
#include "al_backend.h"
#include "al_kernels.h"

#include <stdlib.h>
#include <string.h>

#ifdef AL_HAVE_CUDA
int al_backend_cuda_open(const al_backend **be, int device, al_err *err);
int al_backend_cuda_count(void);
#endif

static int cpu_alloc(void *ctx, void **p, size_t bytes, al_err *err) {
    (void)ctx;
    *p = calloc(1, bytes ? bytes : 1);
    return *p ? 0 : al_errf(err, AL_ENOMEM, "host allocation of %zu bytes failed", bytes);
}
static void cpu_release(void *ctx, void *p) {
    (void)ctx;
    free(p);
}
static void cpu_zero(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    memset(p, 0, bytes);
}
static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (dst != src) memcpy(dst, src, bytes);
}
static void cpu_upload(void *ctx, void *dst, const void *src, size_t bytes) {
    cpu_copy(ctx, dst, src, bytes);
}
static void cpu_download(void *ctx, void *dst, const void *src, size_t bytes) {
    cpu_copy(ctx, dst, src, bytes);
}
static int cpu_reserve(void *ctx, int T, int NH, al_err *err) {
    (void)ctx, (void)T, (void)NH, (void)err;
    return 0;
}
static int cpu_sync(void *ctx, al_err *err) {
    (void)ctx, (void)err;
    return 0;
}

/* every kernel op: the al_kernels.h function of the same name */
#define AL_CPU_WRAP(kind, ret, name, params, args)                                                 \
    AL_GEN_CPU_##kind(static ret cpu_##name(void *ctx, AL_UNPAREN params) {                        \
        (void)ctx;                                                                                 \
        AL_RETURN_##ret al_##name args;                                                            \
    })
AL_BACKEND_OPS(AL_CPU_WRAP)
#undef AL_CPU_WRAP

/* the two host backends: the same functions, told apart by on_host */
#define AL_CPU_FIELD(kind, ret, name, params, args) .name = cpu_##name,
static const al_backend cpu_backend = {
    .name = "cpu", .device = "CPU", .on_host = 1, AL_BACKEND_OPS(AL_CPU_FIELD)};
static const al_backend staged_backend = {
    .name = "staged", .device = "CPU", .on_host = 0, AL_BACKEND_OPS(AL_CPU_FIELD)};
#undef AL_CPU_FIELD

const al_backend *al_backend_cpu(void) {
    return &cpu_backend;
}

const al_backend *al_backend_staged(void) {
    return &staged_backend;
}

int al_backend_has_cuda(void) {
#ifdef AL_HAVE_CUDA
    return 1;
#else
    return 0;
#endif
}

int al_backend_device_count(const char *name) {
    if (!strcmp(name, "cpu")) return 1;
#ifdef AL_HAVE_CUDA
    if (!strcmp(name, "cuda")) return al_backend_cuda_count();
#endif
    return 0;
}

int al_backend_open(const al_backend **be, const char *name, int device, al_err *err) {
    *be = NULL;
    if (!strcmp(name, "cpu")) {
        *be = al_backend_cpu();
        return 0;
    }
    if (!strcmp(name, "cuda")) {
#ifdef AL_HAVE_CUDA
        return al_backend_cuda_open(be, device, err);
#else
        (void)device;
        return al_errf(err, AL_EUNSUPPORTED,
                       "this build has no CUDA backend (configure with -Dcuda=enabled)");
#endif
    }
    return al_errf(err, AL_EINVAL, "unknown device '%s' (cpu, cuda)", name);
}

void al_backend_close(const al_backend *be) {
    if (be && be->close) be->close((al_backend *)be);
}
