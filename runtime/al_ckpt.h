/*
 * al_ckpt.h -- checkpoints: safetensors files named by the parameter table, a
 * JSON manifest with the training state and a SHA-256 per file, written
 * atomically (temporary folder, fsync, rename, fsync of the parent).
 *
 * Layout: ROOT/step-00000100/{model.safetensors, optim.safetensors,
 * manifest.json}. model holds the parameters under their table names
 * ("wte", "h.0.qkvw", ...); optim holds AdamW's "m.<name>" and "v.<name>".
 */
#ifndef AL_CKPT_H
#define AL_CKPT_H

#include "al_safetensors.h"
#include "al_train.h"

/* Save the trainer under root; keeps the newest `keep` checkpoints (0 = all).
 * The folder written is returned in out_dir (may be NULL). */
int al_ckpt_save(const char *root, const al_trainer *tr, const char *config_hash, int keep,
                 char *out_dir, size_t out_cap, al_err *err);

/* Extra files a caller stores in the same checkpoint (hashed in the manifest
 * like the others): write(ctx, i, path) writes files[i] at path. And the
 * state of W > 1 worker processes (inner/al_odc.h), whose parameters and
 * AdamW moments the trainer carries: `data` is their source's position
 * (al_workload_tell), saved in the manifest in place of the trainer's loader,
 * and the manifest records W ("workers"; 0 or 1 here: 1 and the trainer's
 * loader). Each worker keeps no other state between steps: the step count
 * (AdamW's bias correction, the learning-rate schedule) is the trainer's. */
typedef struct al_ckpt_extra {
    int nfiles;
    const char *const *files;
    int (*write)(void *ctx, int i, const char *path, al_err *err);
    int workers;
    al_loader_state data;
} al_ckpt_extra;
int al_ckpt_save_ex(const char *root, const al_trainer *tr, const char *config_hash, int keep,
                    const al_ckpt_extra *extra, void *extra_ctx, char *out_dir, size_t out_cap,
                    al_err *err);

/* Resolve `path` to a checkpoint folder: itself if it holds a manifest, else
 * the newest valid step-* inside it. A newest checkpoint that fails its checks
 * is skipped with a warning on `log` (falls back to the previous one). */
int al_ckpt_find(const char *path, const al_log *log, char *out_dir, size_t out_cap, al_err *err);

/* Verify the manifest and every file's SHA-256, then load parameters, AdamW
 * state, step and data position into an initialised trainer of the same
 * preset. A different config hash is reported on `log` as a warning. */
int al_ckpt_load(const char *dir, al_trainer *tr, const char *config_hash, const al_log *log,
                 al_err *err);
/* The same for a run of `workers` processes. workers > 1: the data position
 * goes to *data (for their source: al_workload_seek), not to the trainer's
 * loader; a checkpoint that does not record its worker count (written before
 * the workers' data position was saved, so its position is not theirs) is
 * refused, naming the manifest. Any W: a checkpoint of another worker count
 * loads with a warning on `log`: parameters, AdamW state, step and data
 * position carry over (both kinds of source read one document order, with
 * the same seed), but gradients are summed in another order, so the run is
 * not bit-identical to one that kept its count. */
int al_ckpt_load_ex(const char *dir, al_trainer *tr, const char *config_hash, const al_log *log,
                    int workers, al_loader_state *data, al_err *err);

/* Which parameters to read: an agent's checkpoint holds θ_local
 * (model.safetensors) and θ_global (outer.bin); train's only the first. */
typedef enum { AL_THETA_AUTO, AL_THETA_LOCAL, AL_THETA_GLOBAL } al_theta;
int al_theta_parse(const char *s, al_theta *out, al_err *err);

/* Resolve `path` (al_ckpt_find), verify the checkpoint, and read its
 * parameters into a new host buffer (*params, malloc'd, laid out for *cfg,
 * whose preset comes from the manifest). AUTO: θ_global where there is one,
 * else the model; *which becomes the one read. The folder read goes to dir
 * (may be NULL). */
int al_ckpt_read_params(const char *path, al_theta *which, const al_log *log, al_model_config *cfg,
                        float **params, char *dir, size_t cap, al_err *err);

#endif
