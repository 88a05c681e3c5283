/* agent_ckpt.c -- a site's checkpoints: the trainer's (al_store.h) plus the
 * outer state (outer.bin) and the agent's (agent.json: round, step, H, the
 * policy, the interval in progress, the counters), and their loading on
 * --resume. */
#include "agent_ckpt.h"
#include "agent_stream.h"
#include "al_store.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- checkpoints ------------------------------------------------------------------- */

/* interval_start.bin (overlap, a stop while the next interval trained): its
 * start, P floats; θ_local in the trainer's files is its end */
static const char *const EXTRA_FILES[] = {"outer.bin", "agent.json", "interval_start.bin"};

/* The metrics a checkpoint carries so that a resumed run continues them
 * instead of counting from zero: every counter of the table. */
static const struct {
    al_metric_id id;
    const char *name;
    int counter;
} METRIC_NAMES[] = {
#define AL_M_NAME(id, name, type, help) {AL_M_##id, name, !strcmp(#type, "counter")},
    AL_METRICS_TABLE(AL_M_NAME)
#undef AL_M_NAME
};

/* {"counters": {name: value}, "peers": {site: [sent, recv, busy_s]}} */
static json_t *counters_json(agent *a) {
    json_t *cs = json_object(), *ps = json_object();
    al_metrics *m = &a->met;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < AL_ARRAY_LEN(METRIC_NAMES); i++)
        if (METRIC_NAMES[i].counter)
            json_object_set_new(cs, METRIC_NAMES[i].name, json_real(m->v[METRIC_NAMES[i].id]));
    for (int k = 0; k < m->npeers; k++)
        json_object_set_new(
            ps, m->peer[k],
            json_pack("[f, f, f]", m->peer_sent[k], m->peer_recv[k], m->peer_busy_s[k]));
    pthread_mutex_unlock(&m->lock);
    return json_pack("{s:o, s:o}", "counters", cs, "peers", ps);
}

/* The inverse, on --resume. A checkpoint without them (older versions) leaves
 * the counters at zero; a malformed value is an error naming it. */
static int counters_load(agent *a, json_t *j, const char *f, al_err *err) {
    json_t *cs = json_object_get(j, "counters"), *ps = json_object_get(j, "peers");
    if (!cs && !ps) {
        al_logf(&a->log, AL_LOG_WARN,
                "%s: no counters (older checkpoint): bytes and syncs restart "
                "from zero",
                f);
        return 0;
    }
    if (!json_is_object(cs) || !json_is_object(ps))
        return al_errf(err, AL_EFORMAT, "%s: 'counters' and 'peers' must be objects", f);
    for (size_t i = 0; i < AL_ARRAY_LEN(METRIC_NAMES); i++) {
        if (!METRIC_NAMES[i].counter) continue;
        json_t *v = json_object_get(cs, METRIC_NAMES[i].name);
        if (!v) continue;
        double x = json_number_value(v);
        if (!json_is_number(v) || !(x >= 0) || !isfinite(x))
            return al_errf(err, AL_EFORMAT, "%s: counter %s: not a finite number >= 0", f,
                           METRIC_NAMES[i].name);
        al_metrics_set(&a->met, METRIC_NAMES[i].id, x);
    }
    a->recv_base = a->met.v[AL_M_BYTES_RECV];
    const char *site;
    json_t *v;
    json_object_foreach(ps, site, v) {
        double sent, recv, busy;
        if (json_unpack(v, "[F, F, F]", &sent, &recv, &busy) != 0 || !(sent >= 0) || !(recv >= 0) ||
            !(busy >= 0))
            return al_errf(err, AL_EFORMAT, "%s: peers.%s: not [sent, recv, seconds] >= 0", f,
                           site);
        al_metrics_peer(&a->met, site, sent, recv, busy);
    }
    return 0;
}

static int write_extra(void *ctx, int i, const char *path, al_err *err) {
    agent *a = ctx;
    if (i == 0) ag_fault_pause(a, "ckpt", a->round); /* (test hook: halfway through a save) */
    if (i == 0) return al_outer_save(&a->outer, path, err);
    if (i == 2) return al_write_file_sync(path, a->from, a->P * sizeof(float), err);
    char pol[2048] = "";
    al_policy_save(a->pol, pol, sizeof pol);
    json_t *hist = json_array();
    for (int k = 0; k < a->nh; k++) json_array_append_new(hist, json_integer(a->h_hist[k]));
    json_t *live = json_array();
    for (int k = 0; k < a->nsites; k++)
        if (a->live[k]) json_array_append_new(live, json_string(a->name[k]));
    /* bytes_raw as of the last commit (round_metrics), not a->bytes_raw: a stop
     * between an exchange and its commit saves the round before it, and the
     * resumed site exchanges that interval again (and counts it then) */
    json_t *m = json_pack(
        "{s:s, s:I, s:I, s:I, s:s, s:o, s:o, s:f, s:{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:f}}",
        "site", a->name[a->self], "round", (json_int_t)a->round, "step", (json_int_t)a->step, "h",
        (json_int_t)a->h, "policy", pol, "h_history", hist, "members", live, "bytes_raw",
        a->met.v[AL_M_BYTES_RAW], "interval", "steps", (json_int_t)a->iv.steps, "loss_sum",
        a->iv.loss_sum, "gnorm_sum", a->iv.gnorm_sum, "lr_sum", a->iv.lr_sum, "lr_sq_sum",
        a->iv.lr_sq_sum, "lr_last", a->iv.lr_last, "tokens", (json_int_t)a->iv.tokens, "compute_s",
        a->iv.compute_s);
    /* overlap: θ_local (the trainer's parameters) is where interval `round`
     * starts, with H `h` (docs/outer.md): a resumed run trains it from there */
    if (m && (a->bg_pending || a->bg_trained))
        json_object_set_new(m, "overlap_interval",
                            json_pack("{s:I, s:I, s:s}", "round", (json_int_t)a->bg_round, "h",
                                      (json_int_t)a->bg_h, "state",
                                      a->bg_trained ? "trained" : "pending"));
    /* streaming: the fragments' schedule, and the merge the pending span makes */
    if (m && a->sm.F) json_object_set_new(m, "stream", ag_stream_json(a));
    json_t *cj = counters_json(a);
    if (m && cj) json_object_update(m, cj);
    json_decref(cj);
    char *js = json_dumps(m, JSON_INDENT(2));
    json_decref(m);
    int rc = js ? al_write_file_sync(path, js, strlen(js), err)
                : al_errf(err, AL_ENOMEM, "agent.json: out of memory");
    free(js);
    return rc;
}

int ag_save(agent *a, al_err *err) {
    int rc;
    if (a->workers > 1) { /* the trainer is only the carrier of the shared parameters */
        memcpy(a->tr.model.params, a->odc.params, a->P * sizeof(float));
        memcpy(a->tr.m, a->odc.m, a->P * sizeof(float));
        memcpy(a->tr.v, a->odc.v, a->P * sizeof(float));
    }
    a->tr.step = a->step;
    /* W > 1: the workers' data position (their source is the parent's
     * a->wl, replayed in step after every run); the step count is a->step */
    al_ckpt_extra ex = {a->bg_trained ? 3 : 2, EXTRA_FILES, write_extra, a->workers, {0, 0, 0}};
    if (a->workers > 1 && (rc = al_workload_tell(&a->wl, &ex.data, err))) return rc;
    char dir[4096];
    rc = al_ckpt_save_ex(a->cfg->checkpoint_dir, &a->tr, a->hash, (int)a->cfg->checkpoint_keep, &ex,
                         a, dir, sizeof dir, err);
    if (rc == 0) {
        al_logf(&a->log, AL_LOG_INFO, "site %s: saved checkpoint %s (round %ld, step %ld)",
                a->name[a->self], dir, a->round, a->step);
        free(al_metrics_event(&a->met, "checkpoint", a->name[a->self], a->round, a->step));
        al_metrics_set(&a->met, AL_M_CKPT_AGE, 0);
    }
    return rc;
}

/* agent.json's core: the site, round, step, H, policy, history, members, the
 * interval in progress and the counters. *round: the round as saved. On an
 * error past the site's check, what was read is kept (the caller fails). */
static int state_load(agent *a, json_t *m, const char *f, const char *dir, json_int_t *round,
                      al_err *err) {
    const char *pol = NULL, *site = NULL;
    json_t *hist = NULL, *live = NULL;
    json_int_t step = 0, h = 0, ivs = 0, ivt = 0;
    double raw = 0;
    if (!m || json_unpack(m,
                          "{s:s, s:I, s:I, s:I, s:s, s:o, s:o, s:F, s:{s:I, s:F, s:F, s:F, s:F, "
                          "s:F, s:I, s:F}}",
                          "site", &site, "round", round, "step", &step, "h", &h, "policy", &pol,
                          "h_history", &hist, "members", &live, "bytes_raw", &raw, "interval",
                          "steps", &ivs, "loss_sum", &a->iv.loss_sum, "gnorm_sum", &a->iv.gnorm_sum,
                          "lr_sum", &a->iv.lr_sum, "lr_sq_sum", &a->iv.lr_sq_sum, "lr_last",
                          &a->iv.lr_last, "tokens", &ivt, "compute_s", &a->iv.compute_s) != 0)
        return al_errf(err, AL_EFORMAT, "%s: malformed agent state", f);
    if (strcmp(site, a->name[a->self]) != 0)
        return al_errf(err, AL_EMISMATCH, "%s: checkpoint of site '%s', this is '%s'", dir, site,
                       a->name[a->self]);
    int rc = al_policy_load(a->pol, pol, err);
    a->round = (long)*round;
    a->step = (long)step;
    a->h = (long)h;
    a->bytes_raw = raw;
    a->iv.steps = (long)ivs;
    a->iv.tokens = (long)ivt;
    a->nh = 0;
    size_t i;
    json_t *v;
    json_array_foreach(hist, i, v) if (a->nh < (int)AL_ARRAY_LEN(a->h_hist)) a->h_hist[a->nh++] =
        (long)json_integer_value(v);
    memset(a->live, 0, sizeof a->live);
    json_array_foreach(live, i, v) {
        for (int k = 0; k < a->nsites; k++)
            if (json_is_string(v) && !strcmp(a->name[k], json_string_value(v))) a->live[k] = 1;
    }
    if (rc == 0) rc = counters_load(a, m, f, err);
    return rc;
}

/* interval_start.bin: the start of an interval trained before a stop (the
 * manifest checked it) into a->from. */
static int interval_start_load(agent *a, const char *dir, al_err *err) {
    char g[4300], *buf = NULL;
    size_t n = 0;
    snprintf(g, sizeof g, "%s/interval_start.bin", dir);
    int rc = al_read_file(g, &buf, &n, err);
    if (rc == 0 && n != a->P * sizeof(float))
        rc = al_errf(err, AL_EFORMAT, "%s: %zu bytes, not %zu floats", g, n, a->P);
    if (rc == 0) {
        memcpy(a->from, buf, n);
        a->bg_trained = 1;
    }
    free(buf);
    return rc;
}

/* agent.json's overlap: the next interval's start (overlap_interval) and
 * streaming's schedule (stream), checked against this configuration. */
static int overlap_load(agent *a, json_t *m, const char *f, const char *dir, json_int_t round,
                        al_err *err) {
    int rc = 0;
    json_t *pi = json_object_get(m, "overlap_interval");
    json_int_t pr = 0, ph = 0;
    const char *state = "";
    if (pi && (json_unpack(pi, "{s:I, s:I, s:s}", "round", &pr, "h", &ph, "state", &state) != 0 ||
               pr != round || ph < 1 || (strcmp(state, "pending") && strcmp(state, "trained"))))
        rc = al_errf(err, AL_EFORMAT,
                     "%s: overlap_interval: expected {\"round\": %lld, \"h\": H >= 1, "
                     "\"state\": \"pending\" or \"trained\"}",
                     f, (long long)round);
    if (rc == 0 && pi && !a->overlap)
        rc = al_errf(err, AL_EMISMATCH,
                     "%s: saved with [outer] overlap on (the next interval's start is "
                     "in it); this configuration has overlap = none",
                     f);
    json_t *sj = json_object_get(m, "stream");
    if (rc == 0 && sj && !a->sm.F)
        rc = al_errf(err, AL_EMISMATCH,
                     "%s: saved with [outer] overlap = streaming; this configuration has "
                     "overlap = %s",
                     f, al_overlap_name(a->overlap));
    if (rc == 0 && a->sm.F) rc = ag_stream_load(a, sj, f, 1, err);
    if (rc == 0 && pi) {
        a->bg_round = (long)pr;
        a->bg_h = (long)ph;
        if (!strcmp(state, "pending"))
            a->bg_pending = 1;
        else /* trained: its start beside the checkpoint */
            rc = interval_start_load(a, dir, err);
    }
    return rc;
}

int ag_load(agent *a, const char *path, al_err *err) {
    char dir[4096], f[4200];
    al_loader_state pos;
    int rc = al_ckpt_find(path, &a->log, dir, sizeof dir, err);
    if (rc == 0) rc = al_ckpt_load_ex(dir, &a->tr, a->hash, &a->log, a->workers, &pos, err);
    /* W > 1: the workers' source continues where it stood (the workers are
     * forked after this, with it) */
    if (rc == 0 && a->workers > 1 && (rc = al_workload_seek(&a->wl, &pos, err)))
        al_err_prefix(err, "%s", dir);
    if (rc) return rc;
    snprintf(f, sizeof f, "%s/outer.bin", dir);
    a->outer_h_ok = 0;
    if ((rc = al_outer_load(&a->outer, f, &a->outer.cfg, err))) return rc;
    snprintf(f, sizeof f, "%s/agent.json", dir);
    json_error_t je;
    json_t *m = json_load_file(f, 0, &je);
    json_int_t round = 0;
    rc = state_load(a, m, f, dir, &round, err);
    if (rc == 0) rc = overlap_load(a, m, f, dir, round, err);
    json_decref(m);
    if (rc == 0 && a->workers > 1) {
        memcpy(a->odc.params, a->tr.model.params, a->P * sizeof(float));
        memcpy(a->odc.m, a->tr.m, a->P * sizeof(float));
        memcpy(a->odc.v, a->tr.v, a->P * sizeof(float));
        a->odc.step = a->step; /* AdamW's bias correction and the lr schedule go on from here */
    }
    if (rc == 0)
        al_logf(&a->log, AL_LOG_INFO, "site %s: resumed from %s at round %ld, step %ld",
                a->name[a->self], dir, a->round, a->step);
    return rc;
}
