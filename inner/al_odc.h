/*
 * al_odc.h -- one site, W worker processes, one sharded model: the ODC engine
 * and the FSDP-style baseline (DESIGN.md section 3).
 *
 * Sharding: every model unit (embeddings, each block, the final LayerNorm) is
 * cut into W equal slices; worker w owns slice w of every unit: its
 * parameters, its reduced gradient and its AdamW moments, all in the site's
 * shared-memory segment (transport/shm). A worker keeps no full copy of the
 * model. Per microbatch it walks the units:
 *
 *   forward:  get unit 0, embed; for each block: get, forward, drop; get the
 *             final LayerNorm; head (loss).
 *   backward: head backward, push the final LayerNorm's gradient, drop it and
 *             unit 0's parameters; for each block in reverse: get again,
 *             backward, push its gradient slices, drop; embedding backward,
 *             push unit 0's gradient.
 *
 * So at most unit 0, the final LayerNorm and one block (parameters and
 * gradient) are gathered at once; the engine measures the peak.
 *
 * Push target: every worker (client) has its own gradient slot in the
 * segment, and pushes add into the owner's slice of it without locks. At
 * minibatch end the owner sums the W slots of its slices in client order
 * 0..W-1, which makes the result deterministic and independent of timing.
 *
 * Modes differ only in communication:
 *  - odc:  gets and pushes are one-sided, no barrier inside the minibatch;
 *          each worker runs its own microbatches (plans may give workers
 *          different counts).
 *  - fsdp: every get is an all-gather and every push a reduce-scatter that all
 *          W workers must enter (a barrier each, as NCCL collectives are), so
 *          all run the same number of microbatches (the plan's maximum; a
 *          worker without one enters the collectives with no compute).
 *
 * Minibatch end (both): barrier; each owner reduces its slots and publishes
 * its partial sum of squares; barrier; every worker adds the W partials in
 * order (same norm everywhere), clips, and runs AdamW on its own slices;
 * barrier, so the next gets see the new parameters.
 *
 * The result equals the single-worker trainer's update on the same samples up
 * to fp32 summation order (tests/test_odc.c states and asserts the tolerance).
 *
 * On GPUs (opts.device = "cuda") the same engine runs with every op through
 * the worker's CUDA backend and the gets and pushes through transport/nccl;
 * a unit is then cut into W chunks of ceil(n/W) (NCCL's collectives need
 * equal counts) instead of al_shm_slice_lo's slices. tests/test_cuda_odc.c.
 */
#ifndef AL_ODC_H
#define AL_ODC_H

#include "al_balance.h"
#include "al_shm.h"
#include "al_train.h"

typedef enum { AL_MODE_ODC, AL_MODE_FSDP } al_engine_mode;
int al_mode_parse(const char *s, al_engine_mode *out, al_err *err);
const char *al_mode_name(al_engine_mode m);

/* The minibatch of a step, as pieces of `data`. Called in every worker (and
 * replayed in the parent after a run to keep its copy of ctx in step), in
 * step order: it must return the same pieces everywhere. The array stays
 * owned by the source and valid until the next call. */
typedef int (*al_odc_source_fn)(void *ctx, long step, const al_piece **pieces, int *n, al_err *err);

typedef struct al_odc_step_stats {
    long step; /* 1-based, after the update */
    double loss, grad_norm, lr;
    long tokens;
    double seconds;                       /* minibatch wall time */
    double compute_s[AL_SHM_MAX_WORKERS]; /* per worker: outside barriers */
    double wait_s[AL_SHM_MAX_WORKERS];    /* per worker: inside barriers */
    int nmb[AL_SHM_MAX_WORKERS];          /* microbatches with work */
    int lockstep_nmb;                     /* fsdp: the count everyone ran */
} al_odc_step_stats;

/* Called in worker 0 after each step (print, log). */
typedef void (*al_odc_step_fn)(void *ctx, const al_odc_step_stats *st);

typedef struct al_odc_opts {
    al_engine_mode mode;
    int workers;         /* W */
    int threads;         /* per worker (OpenMP + OpenBLAS) */
    al_balance_opts bal; /* plan method, token budget per microbatch row, cost model */
    al_train_opts train; /* schedule, AdamW, clipping, init seed (batch/seq/accum unused) */
    const char *site;    /* names the segment */
    /* "cpu" (NULL: the same) or "cuda": each worker opens a CUDA backend on
     * GPU w mod (GPUs present), keeps its shards in device memory and moves
     * units over transport/nccl (CUDA IPC for odc, NCCL collectives for
     * fsdp). The segment still holds the state between runs (uploaded at a
     * run's start, downloaded at its end) and the barriers. */
    const char *device; /* (tests: "staged" = the GPU engine's code path -- chunked
                         * shards, transport/nccl in host mode -- on the CPU
                         * kernels behind on_host = 0; odc only) */
    double barrier_timeout_s;
    int record_steps; /* how many recent steps' stats are kept (<= 0: 64) */
    /* fault injection for tests: worker fault_worker kills itself with SIGKILL
     * in the middle of step fault_step (1-based; 0 = off) */
    int fault_worker;
    long fault_step;
} al_odc_opts;

typedef struct al_odc {
    al_model_config cfg;
    al_layout lay;
    al_odc_opts o;
    al_shm shm;
    const al_tokens *data;
    al_odc_source_fn src;
    void *src_ctx;
    al_odc_step_fn on_step;
    void *on_step_ctx;
    long step;      /* optimizer steps done */
    long run_until; /* the step the current run stops at */
    /* in the segment (global layout, P floats each; owners touch their slices) */
    float *params, *grad, *m, *v;
    float *slots;           /* [W][P]: client c's pushes */
    al_odc_step_stats *rec; /* [record_steps] ring, by step */
    double *peak_gathered;  /* [W] bytes */
    double *pool_bytes;     /* [W] bytes of the gather buffers */
    void *gpu_shared;       /* AL_NCCL_SHARED_BYTES: IPC handles, NCCL id (GPU runs) */
    float *staged_region;   /* device "staged": the owners' arrays (host-mode transport) */
} al_odc;

/* Create the segment and initialise parameters exactly as al_trainer_init
 * does (same seed, same values). data must outlive the engine. */
int al_odc_init(al_odc *e, const al_model_config *cfg, const al_odc_opts *o, const al_tokens *data,
                al_odc_source_fn src, void *src_ctx, al_err *err);
void al_odc_free(al_odc *e);
/* Fork the W workers now and keep them for every later al_odc_run (see
 * al_shm_pool_start): call it before the process starts threads. The
 * workers see this process's memory as it is now; later changes reach them
 * only through the segment (parameters, moments) and e->step, which each run
 * passes on. Without it every al_odc_run forks afresh. */
int al_odc_start(al_odc *e, al_err *err);
/* Run `steps` optimizer steps in the W workers (forked for this run, or the
 * pool's). On failure (a worker died,
 * a barrier timed out, a non-finite loss) the message names the worker. */
int al_odc_run(al_odc *e, long steps, al_err *err);
/* Stats of a recorded step (1-based); NULL if it is not in the ring. */
const al_odc_step_stats *al_odc_stats(const al_odc *e, long step);
/* Whether this build can run the engine on GPUs (CUDA backend and NCCL). */
int al_odc_gpu_available(void);
/* Whether opts.device (NULL, "cpu", "cuda", the tests' "staged") can run
 * `mode` in this build: AL_EINVAL / AL_EUNSUPPORTED saying why. al_odc_init
 * checks it; callers may check it before they do anything else. */
int al_odc_check_device(const char *device, al_engine_mode mode, al_err *err);

#endif
