/* nccl.c -- sharded device arrays between GPU worker processes: CUDA IPC for
 * ODC, NCCL all-gather / reduce-scatter for fsdp (see al_nccl.h). */
#include "al_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(ncclUniqueId) <= AL_NCCL_ID_BYTES, "NCCL id does not fit");
_Static_assert(sizeof(cudaIpcMemHandle_t) <= AL_NCCL_HANDLE_BYTES, "IPC handle does not fit");

int al_nccl_available(void) {
    return 1;
}

static void nccl_fail(al_nccl *x, ncclResult_t r, const char *what) {
    if (r == ncclSuccess || x->rc) return;
    x->rc = al_errf(&x->err, AL_EIO, "%s: %s", what, ncclGetErrorString(r));
}

float *al_nccl_own(const al_nccl *x, int which, int u) {
    return x->peer[x->w] + (size_t)which * x->own_floats + x->own_off[u];
}

/* unit u's chunk of owner o in array `which` */
static float *at(const al_nccl *x, int o, int which, int u) {
    return x->peer[o] + (size_t)which * x->own_floats + x->own_off[u];
}

int al_nccl_open(al_nccl *x, const al_backend *be, al_shm *s, void *shared, const size_t *unit_len,
                 int nunits, int collective, al_err *err) {
    memset(x, 0, sizeof *x);
    x->be = be;
    x->s = s;
    x->w = s->me;
    x->W = s->W;
    x->nunits = nunits;
    x->collective = collective;
    if (be->on_host || !be->stream)
        return al_errf(err, AL_EINVAL, "GPU transport: backend '%s' is not CUDA", be->name);
    int ndev = 0;
    if (collective && (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < x->W))
        return al_errf(err, AL_EUNSUPPORTED,
                       "fsdp over NCCL needs one GPU per worker: %d workers, %d GPU(s) (NCCL "
                       "refuses two ranks on one device)",
                       x->W, ndev);
    x->unit_len = calloc((size_t)nunits, sizeof(size_t));
    x->own_off = calloc((size_t)nunits, sizeof(size_t));
    if (!x->unit_len || !x->own_off) {
        al_nccl_close(x);
        return al_errf(err, AL_ENOMEM, "GPU transport: out of memory");
    }
    size_t maxS = 0;
    for (int u = 0; u < nunits; u++) {
        size_t S = al_nccl_chunk(unit_len[u], x->W);
        x->unit_len[u] = unit_len[u];
        x->own_off[u] = x->own_floats;
        x->own_floats += S;
        maxS = S > maxS ? S : maxS;
    }
    size_t bytes = (size_t)(AL_NCCL_SLOT + x->W) * x->own_floats * sizeof(float);
    int rc = AL_BE(be, alloc, (void **)&x->peer[x->w], bytes, err);
    if (rc == 0 && collective)
        rc = AL_BE(be, alloc, (void **)&x->scratch, maxS * sizeof(float), err);
    if (rc == 0) rc = AL_BE(be, sync, err);
    if (rc) {
        al_nccl_close(x);
        return al_err_prefix(err, "sharded state (%zu bytes)", bytes);
    }
    char *handles = (char *)shared + AL_NCCL_ID_BYTES;
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, x->peer[x->w]);
    if (e != cudaSuccess) {
        al_nccl_close(x);
        return al_errf(err, AL_EIO, "cudaIpcGetMemHandle: %s", cudaGetErrorString(e));
    }
    memcpy(handles + (size_t)x->w * AL_NCCL_HANDLE_BYTES, &h, sizeof h);
    if (collective && x->w == 0) {
        ncclUniqueId id;
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            al_nccl_close(x);
            return al_errf(err, AL_EIO, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        }
        memcpy(shared, &id, sizeof id);
    }
    /* every handle (and the id) is published */
    if ((rc = al_shm_barrier(s, err))) {
        al_nccl_close(x);
        return rc;
    }
    for (int o = 0; o < x->W; o++) {
        if (o == x->w) continue;
        memcpy(&h, handles + (size_t)o * AL_NCCL_HANDLE_BYTES, sizeof h);
        void *p = NULL;
        e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
        if (e != cudaSuccess) {
            al_nccl_close(x);
            return al_errf(err, AL_EIO, "cudaIpcOpenMemHandle of worker %d: %s", o,
                           cudaGetErrorString(e));
        }
        x->peer[o] = p;
    }
    if (collective) {
        ncclUniqueId id;
        memcpy(&id, shared, sizeof id);
        ncclComm_t comm;
        ncclResult_t r = ncclCommInitRank(&comm, x->W, id, x->w);
        if (r != ncclSuccess) {
            al_nccl_close(x);
            return al_errf(err, AL_EIO, "ncclCommInitRank: %s", ncclGetErrorString(r));
        }
        x->comm = comm;
    }
    return 0;
}

void al_nccl_close(al_nccl *x) {
    if (x->comm) ncclCommDestroy((ncclComm_t)x->comm);
    for (int o = 0; o < x->W; o++)
        if (o != x->w && x->peer[o]) cudaIpcCloseMemHandle(x->peer[o]);
    if (x->be) {
        AL_BE(x->be, release, x->peer[x->w]);
        AL_BE(x->be, release, x->scratch);
    }
    free(x->unit_len);
    free(x->own_off);
    memset(x, 0, sizeof *x);
}

void al_nccl_get(al_nccl *x, float *dst, int u) {
    size_t n = x->unit_len[u], S = al_nccl_chunk(n, x->W);
    if (x->collective) {
        nccl_fail(x,
                  ncclAllGather(al_nccl_own(x, AL_NCCL_PARAMS, u), dst, S, ncclFloat,
                                (ncclComm_t)x->comm, (cudaStream_t)x->be->stream),
                  "ncclAllGather");
    } else {
        for (int o = 0; o < x->W; o++) {
            size_t lo = al_nccl_slice_lo(n, x->W, o), hi = al_nccl_slice_lo(n, x->W, o + 1);
            if (hi > lo)
                AL_BE(x->be, copy, dst + lo, at(x, o, AL_NCCL_PARAMS, u),
                      (hi - lo) * sizeof(float));
        }
    }
    x->s->bytes_got += (double)n * sizeof(float);
}

void al_nccl_push(al_nccl *x, const float *src, int u) {
    size_t n = x->unit_len[u], S = al_nccl_chunk(n, x->W);
    if (x->collective) {
        nccl_fail(x,
                  ncclReduceScatter(src, x->scratch, S, ncclFloat, ncclSum, (ncclComm_t)x->comm,
                                    (cudaStream_t)x->be->stream),
                  "ncclReduceScatter");
        AL_BE(x->be, add, al_nccl_own(x, AL_NCCL_SLOT + x->w, u), x->scratch, S);
    } else {
        for (int o = 0; o < x->W; o++) {
            size_t lo = al_nccl_slice_lo(n, x->W, o), hi = al_nccl_slice_lo(n, x->W, o + 1);
            if (hi > lo) AL_BE(x->be, add, at(x, o, AL_NCCL_SLOT + x->w, u), src + lo, hi - lo);
        }
    }
    x->s->bytes_pushed += (double)n * sizeof(float);
}

int al_nccl_fence(al_nccl *x, al_err *err) {
    int rc = AL_BE(x->be, sync, err);
    if (x->rc) {
        rc = x->rc;
        if (err) *err = x->err;
    }
    return rc;
}
