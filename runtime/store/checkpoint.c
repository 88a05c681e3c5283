/* checkpoint.c -- safetensors I/O and atomic checkpoints (see al_store.h). */
#include "al_store.h"
#include "al_outer.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_FORMAT "autoloco-checkpoint-1"
static const char *const CKPT_FILES[] = {"model.safetensors", "optim.safetensors"};

/* ---- checkpoints ------------------------------------------------------------------- */

/* The trainer's parameters and AdamW moments as host arrays: the trainer's
 * own buffers on the CPU; on a device, host copies (download = 1: filled from
 * the device). Free with host_state_free. */
typedef struct host_state {
    float *buf[3]; /* params, m, v */
    int copied;
} host_state;

static void host_state_free(host_state *h) {
    if (h->copied)
        for (int i = 0; i < 3; i++) free(h->buf[i]);
    memset(h, 0, sizeof *h);
}

static int host_state_get(host_state *h, const al_trainer *tr, int download, al_err *err) {
    memset(h, 0, sizeof *h);
    float *dev[3] = {tr->model.params, tr->m, tr->v};
    if (tr->model.be->on_host) {
        memcpy(h->buf, dev, sizeof dev);
        return 0;
    }
    h->copied = 1;
    size_t P = tr->model.lay.nparams;
    for (int i = 0; i < 3; i++) {
        h->buf[i] = malloc(P * sizeof(float));
        if (!h->buf[i]) {
            host_state_free(h);
            return al_errf(err, AL_ENOMEM, "checkpoint: host copy of the model: out of memory");
        }
        if (download) AL_BE(tr->model.be, download, h->buf[i], dev[i], P * sizeof(float));
    }
    int rc = download ? AL_BE(tr->model.be, sync, err) : 0;
    if (rc) host_state_free(h);
    return rc;
}

/* Back to the device after a load (nothing to do on the CPU). */
static int host_state_put(host_state *h, al_trainer *tr, al_err *err) {
    if (!h->copied) return 0;
    float *dev[3] = {tr->model.params, tr->m, tr->v};
    for (int i = 0; i < 3; i++)
        AL_BE(tr->model.be, upload, dev[i], h->buf[i], tr->model.lay.nparams * sizeof(float));
    return AL_BE(tr->model.be, sync, err);
}

static int is_step_dir(const char *name, long *step) {
    if (strncmp(name, "step-", 5) != 0) return 0;
    char *end;
    long s = strtol(name + 5, &end, 10);
    if (*end != '\0' || end == name + 5) return 0;
    *step = s;
    return 1;
}

static int cmp_long_desc(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? 1 : (x > y ? -1 : 0);
}

/* Step numbers of ROOT/step-* folders, newest first. */
static int list_steps(const char *root, long **steps, size_t *n, al_err *err) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(root);
    if (!d) return al_errf(err, AL_ENOTFOUND, "%s: cannot open: %s", root, strerror(errno));
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long s;
        if (!is_step_dir(e->d_name, &s)) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            long *ns = realloc(*steps, cap * sizeof(long));
            if (!ns) {
                closedir(d);
                return al_errf(err, AL_ENOMEM, "out of memory");
            }
            *steps = ns;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n > 1) qsort(*steps, *n, sizeof(long), cmp_long_desc);
    return 0;
}

int al_ckpt_save(const char *root, const al_trainer *tr, const char *config_hash, int keep,
                 char *out_dir, size_t out_cap, al_err *err) {
    return al_ckpt_save_ex(root, tr, config_hash, keep, NULL, NULL, out_dir, out_cap, err);
}

int al_ckpt_save_ex(const char *root, const al_trainer *tr, const char *config_hash, int keep,
                    const al_ckpt_extra *extra, void *extra_ctx, char *out_dir, size_t out_cap,
                    al_err *err) {
    int rc = al_mkdirs(root, err);
    if (rc) return al_err_prefix(err, "checkpoint");
    char tmp[4096], fin[4096], path[4200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%08ld", root, tr->step);
    snprintf(fin, sizeof fin, "%s/step-%08ld", root, tr->step);
    al_remove_tree(tmp, NULL); /* a leftover from a crash mid-save */
    if (mkdir(tmp, 0755) != 0)
        return al_errf(err, AL_EIO, "checkpoint %s: cannot create: %s", tmp, strerror(errno));
    const al_layout *lay = &tr->model.lay;
    const char *pfx_model[] = {""}, *pfx_optim[] = {"m.", "v."};
    host_state hs;
    if ((rc = host_state_get(&hs, tr, 1, err))) return rc;
    const float *buf_model[] = {hs.buf[0]}, *buf_optim[] = {hs.buf[1], hs.buf[2]};
    snprintf(path, sizeof path, "%s/%s", tmp, CKPT_FILES[0]);
    rc = al_safetensors_write(path, lay, 1, pfx_model, buf_model, err);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/%s", tmp, CKPT_FILES[1]);
        rc = al_safetensors_write(path, lay, 2, pfx_optim, buf_optim, err);
    }
    host_state_free(&hs);
    /* the caller's own files (the agent's outer state, ...) go in the same folder */
    for (int i = 0; extra && i < extra->nfiles && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", tmp, extra->files[i]);
        rc = extra->write(extra_ctx, i, path, err);
    }
    json_t *files = json_object();
    int nall = (int)AL_ARRAY_LEN(CKPT_FILES) + (extra ? extra->nfiles : 0);
    for (int i = 0; i < nall && rc == 0; i++) {
        const char *name = i < (int)AL_ARRAY_LEN(CKPT_FILES)
                               ? CKPT_FILES[i]
                               : extra->files[i - (int)AL_ARRAY_LEN(CKPT_FILES)];
        char hex[65];
        snprintf(path, sizeof path, "%s/%s", tmp, name);
        rc = al_sha256_file(path, hex, err);
        if (rc == 0) json_object_set_new(files, name, json_string(hex));
    }
    if (rc == 0) {
        int W = extra && extra->workers > 1 ? extra->workers : 1;
        const al_loader_state *ds = W > 1 ? &extra->data : &tr->train.st;
        json_t *man = json_pack(
            "{s:s, s:I, s:s, s:I, s:s, s:s, s:i, s:{s:I, s:I, s:I}, s:o}", "format", CKPT_FORMAT,
            "step", (json_int_t)tr->step, "preset", tr->model.cfg.preset, "nparams",
            (json_int_t)lay->nparams, "config_hash", config_hash ? config_hash : "", "packing",
            al_packing_name(tr->o.packing), "workers", W, "data", "epoch", (json_int_t)ds->epoch,
            "next", (json_int_t)ds->next, "offset", (json_int_t)ds->offset, "files", files);
        files = NULL;
        char *js = json_dumps(man, JSON_INDENT(2) | JSON_SORT_KEYS);
        json_decref(man);
        snprintf(path, sizeof path, "%s/manifest.json", tmp);
        rc = js ? al_write_file_sync(path, js, strlen(js), err)
                : al_errf(err, AL_ENOMEM, "manifest: out of memory");
        free(js);
    }
    json_decref(files);
    if (rc == 0) rc = al_fsync_dir(tmp, err);
    if (rc == 0) {
        al_remove_tree(fin, NULL); /* re-saving the same step replaces it */
        if (rename(tmp, fin) != 0)
            rc = al_errf(err, AL_EIO, "checkpoint: rename %s -> %s: %s", tmp, fin, strerror(errno));
    }
    if (rc == 0) rc = al_fsync_dir(root, err);
    if (rc) {
        al_remove_tree(tmp, NULL);
        return rc;
    }
    if (out_dir) snprintf(out_dir, out_cap, "%s", fin);
    if (keep > 0) {
        long *steps;
        size_t n;
        if (list_steps(root, &steps, &n, NULL) == 0) {
            for (size_t i = (size_t)keep; i < n; i++) {
                snprintf(path, sizeof path, "%s/step-%08ld", root, steps[i]);
                al_remove_tree(path, NULL);
            }
            free(steps);
        }
    }
    return 0;
}

/* Parse the manifest and check every file's SHA-256. */
static int verify(const char *dir, json_t **man_out, al_err *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    json_error_t je;
    json_t *man = json_load_file(path, 0, &je);
    if (!man) return al_errf(err, AL_EFORMAT, "%s: unreadable manifest: %s", path, je.text);
    const char *fmt = NULL;
    json_t *files = NULL;
    if (json_unpack(man, "{s:s, s:o}", "format", &fmt, "files", &files) != 0 ||
        strcmp(fmt, CKPT_FORMAT) != 0 || !json_is_object(files)) {
        json_decref(man);
        return al_errf(err, AL_EFORMAT, "%s: not an autoloco checkpoint manifest", path);
    }
    const char *name;
    json_t *want;
    json_object_foreach(files, name, want) {
        char hex[65];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        int rc = al_sha256_file(path, hex, err);
        if (rc) {
            json_decref(man);
            return rc;
        }
        if (!json_is_string(want) || strcmp(hex, json_string_value(want)) != 0) {
            json_decref(man);
            return al_errf(err, AL_EINTEGRITY, "%s: SHA-256 mismatch (file corrupt)", path);
        }
    }
    *man_out = man;
    return 0;
}

int al_ckpt_find(const char *path, const al_log *log, char *out_dir, size_t out_cap, al_err *err) {
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/manifest.json", path);
    if (access(probe, F_OK) == 0) {
        snprintf(out_dir, out_cap, "%s", path);
        return 0;
    }
    long *steps;
    size_t n;
    int rc = list_steps(path, &steps, &n, err);
    if (rc) return rc;
    if (n == 0) {
        free(steps);
        return al_errf(err, AL_ENOTFOUND, "no checkpoint (step-*) in %s", path);
    }
    for (size_t i = 0; i < n; i++) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s/step-%08ld", path, steps[i]);
        json_t *man = NULL;
        al_err e = {0};
        if (verify(dir, &man, &e) == 0) {
            json_decref(man);
            snprintf(out_dir, out_cap, "%s", dir);
            free(steps);
            return 0;
        }
        al_logf(log, AL_LOG_WARN, "skipping checkpoint %s: %s", dir, e.msg);
    }
    free(steps);
    return al_errf(err, AL_EINTEGRITY, "no valid checkpoint in %s", path);
}

/* The manifest's worker count against this run's: none (saved before it was
 * recorded) counts as 1, but a run of W > 1 refuses it. */
static int check_workers(const char *dir, json_t *man, int workers, const al_log *log,
                         al_err *err) {
    json_t *w = json_object_get(man, "workers");
    if (!w && workers > 1)
        return al_errf(err, AL_EFORMAT,
                       "%s/manifest.json: no worker state (\"workers\"; written before the "
                       "workers' data position was saved): cannot resume %d workers exactly",
                       dir, workers);
    json_int_t n = w ? json_integer_value(w) : 1;
    if (w && (!json_is_integer(w) || n < 1 || n > 1 << 20))
        return al_errf(err, AL_EFORMAT, "%s/manifest.json: workers: not a count >= 1", dir);
    if (n != workers)
        al_logf(log, AL_LOG_WARN,
                "%s: saved by %lld worker(s), this run has %d: parameters, AdamW state, step and "
                "data position carry over, but the run is not bit-identical to one that kept %lld",
                dir, (long long)n, workers, (long long)n);
    return 0;
}

int al_ckpt_load(const char *dir, al_trainer *tr, const char *config_hash, const al_log *log,
                 al_err *err) {
    return al_ckpt_load_ex(dir, tr, config_hash, log, 1, NULL, err);
}

int al_ckpt_load_ex(const char *dir, al_trainer *tr, const char *config_hash, const al_log *log,
                    int workers, al_loader_state *data, al_err *err) {
    json_t *man = NULL;
    int rc = verify(dir, &man, err);
    if (rc) return rc;
    const char *preset = NULL, *chash = NULL, *packing = NULL;
    json_int_t step = 0, nparams = 0, epoch = 0, next = 0, offset = 0;
    if (json_unpack(man, "{s:I, s:s, s:I, s:s, s:s, s:{s:I, s:I, s:I}}", "step", &step, "preset",
                    &preset, "nparams", &nparams, "config_hash", &chash, "packing", &packing,
                    "data", "epoch", &epoch, "next", &next, "offset", &offset) != 0) {
        json_decref(man);
        return al_errf(err, AL_EFORMAT, "%s/manifest.json: missing fields", dir);
    }
    if (strcmp(preset, tr->model.cfg.preset) != 0 || (size_t)nparams != tr->model.lay.nparams) {
        rc = al_errf(err, AL_EMISMATCH,
                     "%s: checkpoint of preset '%s' (%lld params), run uses "
                     "'%s' (%zu params)",
                     dir, preset, (long long)nparams, tr->model.cfg.preset, tr->model.lay.nparams);
    } else if (strcmp(packing, al_packing_name(tr->o.packing)) != 0) {
        rc = al_errf(err, AL_EMISMATCH, "%s: checkpoint packing '%s', run uses '%s'", dir, packing,
                     al_packing_name(tr->o.packing));
    }
    if (rc == 0) rc = check_workers(dir, man, workers, log, err);
    if (rc == 0 && config_hash && strcmp(chash, config_hash) != 0)
        al_logf(log, AL_LOG_WARN,
                "%s: saved with a different configuration (hash %.12s, now %.12s)", dir, chash,
                config_hash);
    char path[4200];
    const al_layout *lay = &tr->model.lay;
    const char *pfx_model[] = {""}, *pfx_optim[] = {"m.", "v."};
    host_state hs = {0};
    if (rc == 0) rc = host_state_get(&hs, tr, 0, err);
    float *buf_model[] = {hs.buf[0]}, *buf_optim[] = {hs.buf[1], hs.buf[2]};
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/%s", dir, CKPT_FILES[0]);
        rc = al_safetensors_read(path, lay, 1, pfx_model, buf_model, err);
    }
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/%s", dir, CKPT_FILES[1]);
        rc = al_safetensors_read(path, lay, 2, pfx_optim, buf_optim, err);
    }
    if (rc == 0) rc = host_state_put(&hs, tr, err);
    host_state_free(&hs);
    al_loader_state st = {(uint64_t)epoch, (uint64_t)next, (uint64_t)offset};
    if (rc == 0 && workers > 1)
        *data = st;
    else if (rc == 0)
        rc = al_loader_seek(&tr->train, &st, err);
    if (rc == 0) tr->step = (long)step;
    json_decref(man);
    return rc;
}

int al_theta_parse(const char *s, al_theta *out, al_err *err) {
    if (!strcmp(s, "auto"))
        *out = AL_THETA_AUTO;
    else if (!strcmp(s, "local"))
        *out = AL_THETA_LOCAL;
    else if (!strcmp(s, "global"))
        *out = AL_THETA_GLOBAL;
    else
        return al_errf(err, AL_EINVAL, "--theta: unknown value '%s' (auto|local|global)", s);
    return 0;
}

int al_ckpt_read_params(const char *path, al_theta *which, const al_log *log, al_model_config *cfg,
                        float **params, char *dir_out, size_t cap, al_err *err) {
    char dir[4096], f[4200];
    *params = NULL;
    int rc = al_ckpt_find(path, log, dir, sizeof dir, err);
    json_t *man = NULL;
    if (rc == 0) rc = verify(dir, &man, err);
    if (rc) return rc;
    const char *preset = NULL;
    json_int_t nparams = 0;
    if (json_unpack(man, "{s:s, s:I}", "preset", &preset, "nparams", &nparams) != 0) {
        json_decref(man);
        return al_errf(err, AL_EFORMAT, "%s/manifest.json: missing preset or nparams", dir);
    }
    al_layout lay = {0};
    rc = al_model_preset(cfg, preset, err);
    if (rc) al_err_prefix(err, "%s/manifest.json", dir);
    if (rc == 0) rc = al_layout_init(&lay, cfg, err);
    if (rc == 0 && (size_t)nparams != lay.nparams)
        rc = al_errf(err, AL_EMISMATCH,
                     "%s: manifest says preset '%s' with %lld parameters, but '%s' has %zu", dir,
                     preset, (long long)nparams, preset, lay.nparams);
    json_decref(man);
    if (rc) {
        al_layout_free(&lay);
        return rc;
    }
    snprintf(f, sizeof f, "%s/outer.bin", dir);
    int has_global = access(f, F_OK) == 0;
    if (*which == AL_THETA_GLOBAL && !has_global)
        rc = al_errf(err, AL_ENOTFOUND,
                     "%s: no theta_global (outer.bin): not an agent's checkpoint", dir);
    float *p = rc ? NULL : malloc(lay.nparams * sizeof(float));
    if (rc == 0 && !p) rc = al_errf(err, AL_ENOMEM, "%s: out of memory", dir);
    if (rc == 0 && has_global && *which != AL_THETA_LOCAL) {
        *which = AL_THETA_GLOBAL;
        al_outer o = {0};
        rc = al_outer_load(&o, f, NULL, err);
        if (rc == 0 && o.n != lay.nparams)
            rc = al_errf(err, AL_EMISMATCH, "%s: theta_global has %zu parameters, preset '%s' %zu",
                         f, o.n, cfg->preset, lay.nparams);
        if (rc == 0) memcpy(p, o.theta, lay.nparams * sizeof(float));
        al_outer_free(&o);
    } else if (rc == 0) {
        *which = AL_THETA_LOCAL;
        const char *pfx[] = {""};
        float *buf[] = {p};
        snprintf(f, sizeof f, "%s/%s", dir, CKPT_FILES[0]);
        rc = al_safetensors_read(f, &lay, 1, pfx, buf, err);
    }
    al_layout_free(&lay);
    if (rc) {
        free(p);
        return rc;
    }
    *params = p;
    if (dir_out) snprintf(dir_out, cap, "%s", dir);
    return 0;
}
