/* odc.c -- the ODC engine and the FSDP-style baseline over transport/shm
 * (see al_odc.h for the algorithm). */
#include "al_odc.h"
#include "al_kernels.h"
#include "al_nccl.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const mode_names[] = {"odc", "fsdp"};

int al_mode_parse(const char *s, al_engine_mode *out, al_err *err) {
    for (int i = 0; i < (int)AL_ARRAY_LEN(mode_names); i++)
        if (!strcmp(s, mode_names[i])) {
            *out = (al_engine_mode)i;
            return 0;
        }
    return al_errf(err, AL_EINVAL, "unknown mode '%s' (odc, fsdp)", s);
}

const char *al_mode_name(al_engine_mode m) {
    return (unsigned)m < AL_ARRAY_LEN(mode_names) ? mode_names[m] : "?";
}

/* Scalars each worker publishes at minibatch end (al_shm_scalars). */
enum { SC_SUMSQ, SC_LOSS, SC_STOP };
/* The run's job words (al_shm_job): the parent writes the first two, worker 0
 * the step the run ended at (earlier than JOB_UNTIL after a stop request). */
enum { JOB_FROM, JOB_UNTIL, JOB_ENDED };
_Static_assert(JOB_ENDED < AL_SHM_JOB_STOP, "job words overlap the stop word");

static size_t align16(size_t n) {
    return (n + 15) / 16 * 16;
}

static size_t unit_len(const al_odc *e, int u) {
    return e->lay.unit_off[u + 1] - e->lay.unit_off[u];
}

/* The unit sizes, as transport/nccl wants them (free the result). */
static size_t *unit_lens(const al_odc *e) {
    size_t *lens = malloc((size_t)e->lay.nunits * sizeof(size_t));
    for (int u = 0; lens && u < e->lay.nunits; u++) lens[u] = unit_len(e, u);
    return lens;
}

int al_odc_init(al_odc *e, const al_model_config *cfg, const al_odc_opts *o, const al_tokens *data,
                al_odc_source_fn src, void *src_ctx, al_err *err) {
    memset(e, 0, sizeof *e);
    e->cfg = *cfg;
    e->o = *o;
    e->data = data;
    e->src = src;
    e->src_ctx = src_ctx;
    if (e->o.record_steps <= 0) e->o.record_steps = 64;
    if (e->o.threads < 1) e->o.threads = 1;
    int staged = o->device && !strcmp(o->device, "staged");
    int rc = al_odc_check_device(o->device, o->mode, err);
    if (rc) return rc;
    if (o->bal.budget < 1 || o->bal.budget > cfg->T)
        return al_errf(err, AL_EINVAL,
                       "token budget %d per microbatch: must be 1..%d (the context)", o->bal.budget,
                       cfg->T);
    if ((rc = al_layout_init(&e->lay, cfg, err))) return rc;
    size_t P = align16(e->lay.nparams), W = (size_t)o->workers;
    size_t floats = (4 + W) * P;
    size_t bytes = floats * sizeof(float) + (size_t)e->o.record_steps * sizeof(al_odc_step_stats) +
                   2 * AL_SHM_MAX_WORKERS * sizeof(double) + AL_NCCL_SHARED_BYTES;
    size_t staged_floats = 0; /* staged: the owners' arrays of the host-mode transport */
    if (staged) {
        size_t *lens = unit_lens(e);
        if (!lens) {
            al_layout_free(&e->lay);
            return al_errf(err, AL_ENOMEM, "engine: out of memory");
        }
        staged_floats = W * (AL_NCCL_SLOT + W) * al_nccl_own_floats(lens, e->lay.nunits, (int)W);
        free(lens);
        bytes += 64 + staged_floats * sizeof(float);
    }
    al_shm_opts so = {o->site, o->workers, bytes, o->barrier_timeout_s, 2.0};
    if ((rc = al_shm_create(&e->shm, &so, err))) {
        al_layout_free(&e->lay);
        return rc;
    }
    float *f = e->shm.data;
    e->params = f;
    e->grad = f + P;
    e->m = f + 2 * P;
    e->v = f + 3 * P;
    e->slots = f + 4 * P;
    e->rec = (al_odc_step_stats *)(f + floats);
    e->peak_gathered = (double *)(e->rec + e->o.record_steps);
    e->pool_bytes = e->peak_gathered + AL_SHM_MAX_WORKERS;
    e->gpu_shared = e->pool_bytes + AL_SHM_MAX_WORKERS;
    if (staged) { /* 64-byte aligned, after the shared area */
        uintptr_t a = (uintptr_t)((char *)e->gpu_shared + AL_NCCL_SHARED_BYTES);
        e->staged_region = (float *)((a + 63) / 64 * 64);
    }
    /* the same initial values as the single-worker trainer: build a model
     * with the same seed and copy its parameters in */
    al_model tmp;
    if ((rc = al_model_init(&tmp, cfg, 1, 1, err))) {
        al_odc_free(e);
        return rc;
    }
    al_model_init_weights(&tmp, o->train.seed);
    memcpy(e->params, tmp.params, e->lay.nparams * sizeof(float));
    al_model_free(&tmp);
    return 0;
}

void al_odc_free(al_odc *e) {
    al_shm_destroy(&e->shm);
    al_layout_free(&e->lay);
    memset(e, 0, sizeof *e);
}

const al_odc_step_stats *al_odc_stats(const al_odc *e, long step) {
    if (step < 1) return NULL;
    const al_odc_step_stats *r = &e->rec[(step - 1) % e->o.record_steps];
    return r->step == step ? r : NULL;
}

int al_odc_gpu_available(void) {
    return al_backend_has_cuda() && al_nccl_available();
}

int al_odc_check_device(const char *device, al_engine_mode mode, al_err *err) {
    if (!device || !strcmp(device, "cpu")) return 0;
    if (!strcmp(device, "staged"))
        return mode == AL_MODE_ODC
                   ? 0
                   : al_errf(err, AL_EINVAL, "device 'staged' (host-mode GPU transport): odc only");
    if (strcmp(device, "cuda"))
        return al_errf(err, AL_EINVAL, "unknown device '%s' (cpu, cuda)", device);
    if (!al_backend_has_cuda())
        return al_errf(err, AL_EUNSUPPORTED,
                       "this build has no CUDA backend (configure with -Dcuda=enabled)");
    if (!al_nccl_available())
        return al_errf(err, AL_EUNSUPPORTED,
                       "this build has no NCCL, which GPU workers need (NCCL was not found when "
                       "it was configured)");
    return 0;
}

/* ---- one worker -------------------------------------------------------------------- */

/* A worker's private state: its backend, activations for one microbatch row,
 * and the gather buffers (unit 0, the final LayerNorm, one block: parameters
 * and gradient each) in the backend's memory. `gathered` counts the bytes of
 * live gathered copies. On a GPU, `gpu` moves the units (transport/nccl). */
typedef struct worker {
    al_odc *e;
    al_shm *s;
    int w, W, L;
    size_t P;
    const al_backend *be;
    al_nccl gpu;
    int sharded; /* state in this worker's device shards, units over transport/nccl */
    al_model acts;
    al_batch mb;
    float *p0, *g0, *pf, *gf, *pb, *gb;
    al_emb_ptrs pe, ge;
    al_final_ptrs pfp, gfp;
    al_layer_ptrs pbp, gbp;
    double gathered, peak;
    al_err *err;
} worker;

/* Where worker w's slice of a unit of n floats starts (w = W: n). */
static size_t slice_lo(const worker *k, size_t n, int w) {
    return k->sharded ? al_nccl_slice_lo(n, k->W, w) : al_shm_slice_lo(n, k->W, w);
}

/* Floats of a gather buffer for unit u (GPU: W equal chunks, padded). */
static size_t buf_len(const worker *k, int u) {
    size_t n = unit_len(k->e, u);
    return k->sharded ? al_nccl_chunk(n, k->W) * (size_t)k->W : n;
}

/* The arrays a worker owns a slice of (numbered as the GPU transport numbers
 * them: own() passes `which` through), and where its slice of unit u is. */
enum {
    OWN_PARAMS = (int)AL_NCCL_PARAMS,
    OWN_GRAD = (int)AL_NCCL_GRAD,
    OWN_M = (int)AL_NCCL_M,
    OWN_V = (int)AL_NCCL_V,
    OWN_SLOT = (int)AL_NCCL_SLOT
};
static float *own(worker *k, int which, int u) {
    if (k->sharded) return al_nccl_own(&k->gpu, which, u);
    al_odc *e = k->e;
    float *arr[] = {e->params, e->grad, e->m, e->v};
    float *base = which < OWN_SLOT
                      ? arr[which]
                      : e->slots + (size_t)(which - OWN_SLOT) * align16(e->lay.nparams);
    return base + e->lay.unit_off[u] + slice_lo(k, unit_len(e, u), k->w);
}

/* Before a shm barrier: what this worker issued on its GPU is complete. */
static int fence(worker *k) {
    return k->sharded ? al_nccl_fence(&k->gpu, k->err) : 0;
}

static int barrier(worker *k) {
    int rc = fence(k);
    return rc ? rc : al_shm_barrier(k->s, k->err);
}

/* Bring unit u's parameters into dst. fsdp: an all-gather, which no worker
 * leaves before all have entered (NCCL's own, on GPUs). */
static int acquire(worker *k, int u, float *dst) {
    size_t n = unit_len(k->e, u);
    if (k->sharded) {
        al_nccl_get(&k->gpu, dst, u);
    } else {
        if (k->e->o.mode == AL_MODE_FSDP) {
            int rc = al_shm_barrier(k->s, k->err);
            if (rc) return rc;
        }
        al_shm_get(k->s, dst, k->e->params + k->e->lay.unit_off[u], n);
    }
    k->gathered += (double)n * sizeof(float);
    k->peak = AL_MAX(k->peak, k->gathered);
    return 0;
}

static void drop(worker *k, int u) {
    k->gathered -= (double)unit_len(k->e, u) * sizeof(float);
}

/* A zeroed gradient buffer for unit u becomes live. */
static void grad_begin(worker *k, int u, float *g) {
    size_t n = unit_len(k->e, u);
    AL_BE(k->be, zero, g, buf_len(k, u) * sizeof(float));
    k->gathered += (double)n * sizeof(float);
    k->peak = AL_MAX(k->peak, k->gathered);
}

/* Push unit u's gradient (if this worker computed one) into its slot at the
 * owners, then drop the buffer. fsdp: a reduce-scatter, so a barrier (on
 * GPUs NCCL's, which every worker enters, with a zero gradient if it has
 * none). */
static int push(worker *k, int u, float *g, int has) {
    al_odc *e = k->e;
    size_t n = unit_len(e, u), off = e->lay.unit_off[u];
    if (k->sharded) {
        int collective = e->o.mode == AL_MODE_FSDP;
        if (!has && collective) AL_BE(k->be, zero, g, buf_len(k, u) * sizeof(float));
        if (has || collective) al_nccl_push(&k->gpu, g, u);
        if (has) k->gathered -= (double)n * sizeof(float);
        return 0;
    }
    if (has) {
        al_shm_push(k->s, e->slots + (size_t)k->w * align16(e->lay.nparams) + off, g, n);
        k->gathered -= (double)n * sizeof(float);
    }
    return e->o.mode == AL_MODE_FSDP ? al_shm_barrier(k->s, k->err) : 0;
}

/* One microbatch (has = 0: fsdp's empty slot, collectives only). */
static int microbatch(worker *k, int has, float scale, double *loss, const al_piece *pieces,
                      const al_plan *plan, int mb) {
    al_odc *e = k->e;
    int L = k->L, rc;
    al_model *m = &k->acts;
    if (has) al_plan_batch(plan, mb, pieces, e->data, &k->mb);
    /* forward */
    if ((rc = acquire(k, 0, k->p0))) return rc;
    if (has) al_embed_forward(m, &k->pe, &k->mb);
    for (int l = 0; l < L; l++) {
        if ((rc = acquire(k, l + 1, k->pb))) return rc;
        if (has) al_block_forward(m, l, &k->pbp, al_block_input(m, l), &k->mb);
        drop(k, l + 1);
    }
    if ((rc = acquire(k, L + 1, k->pf))) return rc;
    if (has) *loss += al_head_forward(m, &k->pe, &k->pfp, &k->mb);
    if (e->o.fault_step == e->step + 1 && e->o.fault_worker == k->w) raise(SIGKILL);
    /* backward */
    if (has) {
        grad_begin(k, 0, k->g0);
        grad_begin(k, L + 1, k->gf);
        al_head_backward(m, &k->pe, &k->ge, &k->pfp, &k->gfp, &k->mb, scale);
    }
    if ((rc = push(k, L + 1, k->gf, has))) return rc;
    drop(k, L + 1);
    drop(k, 0); /* the embedding backward needs no parameters */
    for (int l = L - 1; l >= 0; l--) {
        if ((rc = acquire(k, l + 1, k->pb))) return rc;
        if (has) {
            grad_begin(k, l + 1, k->gb);
            al_block_backward(m, l, &k->pbp, &k->gbp, al_block_input(m, l), &k->mb);
        }
        rc = push(k, l + 1, k->gb, has);
        drop(k, l + 1);
        if (rc) return rc;
    }
    if (has) al_embed_backward(m, &k->ge, &k->mb);
    return push(k, 0, k->g0, has);
}

/* Owner side of the minibatch end: reduce the W slots of my slices in client
 * order, clear them, and return my partial sum of squares. */
static double reduce_my_slices(worker *k) {
    al_odc *e = k->e;
    double ss = 0;
    for (int u = 0; u < e->lay.nunits; u++) {
        size_t n = unit_len(e, u), len = slice_lo(k, n, k->w + 1) - slice_lo(k, n, k->w);
        float *g = own(k, OWN_GRAD, u);
        AL_BE(k->be, zero, g, len * sizeof(float));
        for (int c = 0; c < k->W; c++) {
            float *slot = own(k, OWN_SLOT + c, u);
            AL_BE(k->be, add, g, slot, len);
            AL_BE(k->be, zero, slot, len * sizeof(float));
        }
        ss += AL_BE(k->be, sumsq, g, len);
    }
    return ss;
}

/* AdamW on my slices, tensor by tensor (weight decay is per tensor). */
static void update_my_slices(worker *k, double clip_scale, double lr, int t) {
    al_odc *e = k->e;
    const al_train_opts *o = &e->o.train;
    for (int i = 0; i < e->lay.ntensors; i++) {
        const al_tensor_info *ti = &e->lay.tensors[i];
        int u = ti->unit;
        size_t n = unit_len(e, u), off = e->lay.unit_off[u];
        size_t lo = off + slice_lo(k, n, k->w), hi = off + slice_lo(k, n, k->w + 1);
        size_t a = AL_MAX(lo, ti->offset), b = AL_MIN(hi, ti->offset + ti->numel);
        if (a >= b) continue;
        float *p = own(k, OWN_PARAMS, u) + (a - lo), *g = own(k, OWN_GRAD, u) + (a - lo);
        if (clip_scale != 1.0) AL_BE(k->be, scale, g, b - a, (float)clip_scale);
        AL_BE(k->be, adamw_update, p, g, own(k, OWN_M, u) + (a - lo), own(k, OWN_V, u) + (a - lo),
              b - a, (float)lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
              ti->decay ? (float)o->weight_decay : 0.0f, t);
    }
}

static int step(worker *k, al_plan *plan) {
    al_odc *e = k->e;
    al_shm *s = k->s;
    double t0 = al_now(), wait0 = s->wait_s;
    const al_piece *pieces;
    int n, rc;
    if ((rc = e->src(e->src_ctx, e->step, &pieces, &n, k->err))) return rc;
    if ((rc = al_plan_build(plan, pieces, n, k->W, &e->o.bal, k->err))) return rc;
    long ntargets = 0;
    for (int i = 0; i < n; i++) ntargets += pieces[i].len;
    if (ntargets == 0) {
        al_plan_free(plan);
        return al_errf(k->err, AL_EFORMAT, "step %ld: no target tokens", e->step + 1);
    }
    float scale = (float)(1.0 / (double)ntargets);
    int first = plan->mb_first[k->w], mine = plan->mb_first[k->w + 1] - first;
    int count = e->o.mode == AL_MODE_FSDP ? plan->max_nmb : mine;
    double loss = 0;
    for (int j = 0; j < count && rc == 0; j++)
        rc = microbatch(k, j < mine, scale, &loss, pieces, plan, first + j);
    int lockstep = plan->max_nmb;
    al_plan_free(plan);
    if (rc) return rc;
    double *sc = al_shm_scalars(s, k->w);
    /* 1: every push has landed */
    if ((rc = barrier(k))) return rc;
    sc[SC_SUMSQ] = reduce_my_slices(k);
    sc[SC_LOSS] = loss;
    /* 2: every partial is published */
    if ((rc = barrier(k))) return rc;
    double ss = 0, lsum = 0;
    for (int w = 0; w < k->W; w++) {
        ss += al_shm_scalars(s, w)[SC_SUMSQ];
        lsum += al_shm_scalars(s, w)[SC_LOSS];
    }
    double norm = sqrt(ss), mean_loss = lsum / (double)ntargets;
    if (!isfinite(norm) || !isfinite(mean_loss))
        return al_errf(k->err, AL_ENUMERIC, "step %ld: loss %g, gradient norm %g (not finite)",
                       e->step + 1, mean_loss, norm);
    const al_train_opts *o = &e->o.train;
    double clip = o->grad_clip > 0 && norm > o->grad_clip ? o->grad_clip / norm : 1.0;
    double lr = al_lr_at(o, e->step);
    update_my_slices(k, clip, lr, (int)(e->step + 1));
    /* worker 0 decides whether the run stops after this step (a signal
     * reached the parent); everyone reads its decision after the barrier, so
     * all stop at the same step */
    if (k->w == 0) sc[SC_STOP] = al_shm_job(s)[AL_SHM_JOB_STOP] != 0;
    /* 3: the new parameters are visible to every get */
    if ((rc = barrier(k))) return rc;
    e->step++;
    if (al_shm_scalars(s, 0)[SC_STOP] != 0) e->run_until = e->step;
    double wall = al_now() - t0, waited = s->wait_s - wait0;
    al_odc_step_stats *r = &e->rec[(e->step - 1) % e->o.record_steps];
    r->compute_s[k->w] = wall - waited;
    r->wait_s[k->w] = waited;
    r->nmb[k->w] = mine;
    if (k->w == 0) {
        r->step = e->step;
        r->loss = mean_loss;
        r->grad_norm = norm;
        r->lr = lr;
        r->tokens = ntargets;
        r->seconds = wall;
        r->lockstep_nmb = e->o.mode == AL_MODE_FSDP ? lockstep : 0;
    }
    return 0;
}

/* GPU runs: copy my slices of parameters and moments between the segment
 * (the state between runs) and my device shards. */
static int sync_state(worker *k, int to_device) {
    al_odc *e = k->e;
    float *host[] = {e->params, e->m, e->v};
    int which[] = {OWN_PARAMS, OWN_M, OWN_V};
    for (int a = 0; a < 3; a++)
        for (int u = 0; u < e->lay.nunits; u++) {
            size_t n = unit_len(e, u), lo = slice_lo(k, n, k->w), hi = slice_lo(k, n, k->w + 1);
            float *h = host[a] + e->lay.unit_off[u] + lo, *d = own(k, which[a], u);
            if (to_device)
                AL_BE(k->be, upload, d, h, (hi - lo) * sizeof(float));
            else
                AL_BE(k->be, download, h, d, (hi - lo) * sizeof(float));
        }
    return fence(k);
}

/* Open this worker's backend (and, on GPUs or staged, its transport). */
static int worker_open(worker *k) {
    al_odc *e = k->e;
    k->be = al_backend_cpu();
    if (!e->o.device || !strcmp(e->o.device, "cpu")) return 0;
    int rc;
    float *region = NULL;
    if (!strcmp(e->o.device, "staged")) {
        k->be = al_backend_staged();
        region = e->staged_region;
    } else {
        int ndev = al_backend_device_count("cuda");
        if ((rc = al_backend_open(&k->be, "cuda", ndev > 0 ? k->w % ndev : 0, k->err))) {
            k->be = al_backend_cpu();
            return rc; /* al_shm_run names the worker */
        }
    }
    k->sharded = 1;
    size_t *lens = unit_lens(e);
    if (!lens) return al_errf(k->err, AL_ENOMEM, "GPU transport: out of memory");
    rc = al_nccl_open(&k->gpu, k->be, k->s, e->gpu_shared, region, lens, e->lay.nunits,
                      e->o.mode == AL_MODE_FSDP, k->err);
    free(lens);
    if (rc) {
        k->sharded = 0;
        return rc;
    }
    rc = sync_state(k, 1);
    /* every owner's shards hold the state before anyone's first get */
    if (rc == 0) rc = barrier(k);
    return rc;
}

static void worker_close(worker *k) {
    if (k->sharded) al_nccl_close(&k->gpu);
    al_backend_close(k->be); /* (a no-op for the host backends) */
}

static int worker_run(al_shm *s, int w, void *ctx, al_err *err) {
    al_odc *e = ctx;                    /* this process's copy: e->step advances here only */
    const int64_t *job = al_shm_job(s); /* where the parent wants this run to go */
    e->step = (long)job[JOB_FROM];
    e->run_until = (long)job[JOB_UNTIL];
    worker k = {.e = e, .s = s, .w = w, .W = s->W, .L = e->cfg.L, .err = err};
    al_threads_set(e->o.threads);
    int budget = e->o.bal.budget, rc;
    if ((rc = worker_open(&k))) {
        worker_close(&k);
        return rc;
    }
    const al_backend *be = k.be;
    size_t nb = buf_len(&k, 1), n0 = buf_len(&k, 0), nf = buf_len(&k, e->cfg.L + 1);
    float **bufs[] = {&k.p0, &k.g0, &k.pf, &k.gf, &k.pb, &k.gb};
    size_t lens[] = {n0, n0, nf, nf, nb, nb};
    if ((rc = al_model_init_acts_on(&k.acts, be, &e->cfg, 1, budget, err))) {
        worker_close(&k);
        return rc;
    }
    if ((rc = al_batch_init(&k.mb, 1, budget, err))) goto out;
    for (int i = 0; i < 6 && rc == 0; i++)
        rc = AL_BE(be, alloc, (void **)bufs[i], lens[i] * sizeof(float), err);
    if (rc) {
        al_err_prefix(err, "gather buffers");
        goto out;
    }
    e->pool_bytes[w] = (double)(2 * (n0 + nf + nb)) * sizeof(float);
    al_emb_ptrs_at(&k.pe, &e->cfg, k.p0);
    al_emb_ptrs_at(&k.ge, &e->cfg, k.g0);
    al_final_ptrs_at(&k.pfp, &e->cfg, k.pf);
    al_final_ptrs_at(&k.gfp, &e->cfg, k.gf);
    al_layer_ptrs_at(&k.pbp, &e->cfg, k.pb);
    al_layer_ptrs_at(&k.gbp, &e->cfg, k.gb);
    al_plan plan;
    while (rc == 0 && e->step < e->run_until) {
        rc = step(&k, &plan);
        if (rc == 0 && w == 0 && e->on_step) e->on_step(e->on_step_ctx, al_odc_stats(e, e->step));
    }
    if (rc == 0 && w == 0) al_shm_job(s)[JOB_ENDED] = e->step;
    if (rc == 0 && k.sharded) rc = sync_state(&k, 0);
    e->peak_gathered[w] = k.peak;
out:
    for (int i = 0; i < 6; i++) AL_BE(be, release, *bufs[i]);
    al_batch_free(&k.mb);
    al_model_free(&k.acts);
    worker_close(&k);
    return rc;
}

int al_odc_start(al_odc *e, al_err *err) {
    return al_shm_pool_start(&e->shm, worker_run, e, err);
}

int al_odc_run(al_odc *e, long steps, al_err *err) {
    e->run_until = e->step + steps;
    int64_t *job = al_shm_job(&e->shm);
    job[JOB_FROM] = e->step;
    job[JOB_UNTIL] = e->run_until;
    job[JOB_ENDED] = e->step;
    int rc = al_shm_run(&e->shm, worker_run, e, err);
    if (rc) return rc;
    e->run_until = (long)job[JOB_ENDED]; /* earlier than asked if e->shm.stop was raised */
    /* The workers advanced their copies of the source; replay it here so the
     * next run continues where they stopped. */
    for (long s = e->step; s < e->run_until && rc == 0; s++) {
        const al_piece *pieces;
        int n;
        rc = e->src(e->src_ctx, s, &pieces, &n, err);
    }
    e->step = e->run_until;
    return rc;
}
