/* agent.c -- one site of a multi-site run: set-up, the inner interval, the
 * commit of each round, checkpoints and metrics (see al_agent.h). */
#include "agent_impl.h"
#include "al_ckpt.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The agent's one global: a signal handler can reach nothing else. */
static volatile sig_atomic_t g_agent_stop = 0;
static void on_stop(int sig) {
    g_agent_stop = sig;
}

static int cmp_name(const void *x, const void *y) {
    return strcmp((const char *)x, (const char *)y);
}

/* ---- configuration --------------------------------------------------------------- */

/* Sites from [site] name and [peers]: sorted by name, with addresses. */
static int load_sites(agent *a, const al_config *c, al_err *err) {
    if (!c->site_name[0]) return al_errf(err, AL_ECONFIG, "[site] name: missing");
    if (!al_site_name_ok(c->site_name))
        return al_errf(err, AL_ECONFIG, "[site] name: '%s' is not a valid site name", c->site_name);
    char tmp[AG_MAX_SITES][AL_SITE_MAX + 1];
    int n = 0;
    snprintf(tmp[n++], sizeof tmp[0], "%s", c->site_name);
    for (int i = 0; i < c->peers.n; i++) {
        const al_kv *kv = &c->peers.items[i];
        if (n == AG_MAX_SITES)
            return al_errf(err, AL_ECONFIG, "%s:%d: [peers] more than %d sites", c->path, kv->line,
                           AG_MAX_SITES);
        if (!al_site_name_ok(kv->key) || !strcmp(kv->key, c->site_name))
            return al_errf(err, AL_ECONFIG, "%s:%d: [peers] %s: not a valid peer site name",
                           c->path, kv->line, kv->key);
        const char *colon = strrchr(kv->value, ':');
        if (!colon || colon == kv->value || atoi(colon + 1) <= 0 || atoi(colon + 1) > 65535)
            return al_errf(err, AL_ECONFIG, "%s:%d: [peers] %s: '%s' is not host:port", c->path,
                           kv->line, kv->key, kv->value);
        snprintf(tmp[n++], sizeof tmp[0], "%s", kv->key);
    }
    qsort(tmp, (size_t)n, sizeof tmp[0], cmp_name);
    a->nsites = n;
    for (int i = 0; i < n; i++) {
        memcpy(a->name[i], tmp[i], sizeof a->name[i]);
        if (!strcmp(tmp[i], c->site_name)) {
            a->self = i;
            snprintf(a->addr[i], sizeof a->addr[i], "%s", c->site_listen);
        }
        for (int k = 0; k < c->peers.n; k++)
            if (!strcmp(c->peers.items[k].key, tmp[i]))
                snprintf(a->addr[i], sizeof a->addr[i], "%s", c->peers.items[k].value);
    }
    return 0;
}

static int make_policy(agent *a, const al_config *c, al_err *err) {
    const char *keys[64], *vals[64];
    int n = 0, bad = -1;
    for (int i = 0; i < c->policy.n && n < 64; i++, n++) {
        keys[n] = c->policy.items[i].key;
        vals[n] = c->policy.items[i].value;
    }
    if (n == 0) { /* no [policy] section: DiLoCo's fixed interval */
        keys[n] = "name";
        vals[n++] = "fixed";
    }
    int rc = al_policy_create_kv(&a->pol, keys, vals, (size_t)n, &bad, err);
    if (rc && bad >= 0 && bad < c->policy.n)
        return al_err_prefix(err, "%s:%d: [policy] %s", c->path, c->policy.items[bad].line,
                             c->policy.items[bad].key);
    return rc;
}

static double policy_h_base(const al_policy *p) {
    char buf[2048];
    al_policy_settings(p, buf, sizeof buf);
    const char *h = strstr(buf, "h_base=");
    return h ? atof(h + 7) : 100.0;
}

int al_agent_check_config(const al_config *c, al_err *err) {
    agent a;
    memset(&a, 0, sizeof a);
    int rc = load_sites(&a, c, err);
    if (rc == 0) rc = make_policy(&a, c, err);
    if (a.pol) al_policy_free(a.pol);
    al_codec_cfg cc;
    if (rc == 0 && (rc = al_codec_parse(c->outer_codec, &cc, err)))
        al_err_prefix(err, "[outer] codec");
    if (rc == 0 && c->round_peer_timeout_s < 2 * c->round_heartbeat_s)
        rc = al_errf(err, AL_ECONFIG,
                     "[round] peer_timeout_s: %g s is less than two heartbeats (heartbeat_s = %g "
                     "s): one late answer would take a peer for down",
                     c->round_peer_timeout_s, c->round_heartbeat_s);
    if (rc == 0 && c->outer_max_delta_ratio > 0 && c->outer_max_delta_ratio < 1)
        rc = al_errf(err, AL_ECONFIG,
                     "[outer] max_delta_ratio: %g would leave out the median site itself (0 = off, "
                     "else >= 1)",
                     c->outer_max_delta_ratio);
    al_model_config mc;
    if (rc == 0) rc = al_model_preset(&mc, c->model_preset, err);
    if (rc == 0 && !c->tls_insecure)
        for (int i = 0; i < 3 && rc == 0; i++) {
            const char *v[] = {c->tls_ca, c->tls_cert, c->tls_key}, *k[] = {"ca", "cert", "key"};
            if (!v[i][0] || access(v[i], R_OK) != 0)
                rc =
                    al_errf(err, AL_ECONFIG, "[tls] %s: '%s' is missing or unreadable", k[i], v[i]);
        }
    if (rc == 0 && access(c->data_train, R_OK) != 0)
        rc = al_errf(err, AL_ECONFIG, "[data] train: '%s' is missing or unreadable", c->data_train);
    return rc;
}

/* ---- the inner interval ------------------------------------------------------------ */

static int src_next(void *ctx, long step, const al_piece **pieces, int *n, al_err *err) {
    (void)step;
    (void)err;
    agent *a = ctx;
    al_workload_next(&a->wl, a->pieces, a->npieces);
    *pieces = a->pieces;
    *n = a->npieces;
    return 0;
}

/* Train until the interval has h steps (or the budget ends). A signal does
 * not cut the interval short: the agent finishes the round with its peers and
 * stops at the round's end, so that sites stopped together stop at the same
 * round and resume bit-for-bit (stopping mid-interval let a peer that had
 * already reached the exchange drop this site and go on alone). */
static int run_interval(agent *a, long h, al_err *err) {
    long target = AL_MIN(h, a->cfg->inner_steps - (a->step - a->iv.steps));
    if (a->workers == 1) {
        int told = 0;
        while (a->iv.steps < target) {
            if (g_agent_stop && !told++)
                al_logf(&a->log, AL_LOG_INFO,
                        "site %s: signal %d: finishing round %ld (%ld of %ld steps done), then "
                        "saving",
                        a->name[a->self], (int)g_agent_stop, a->round, a->iv.steps, target);
            if (a->round == a->fault_interval && a->iv.steps == target / 2) raise(SIGKILL);
            if (a->round == a->fault_freeze && a->iv.steps == target / 2) raise(SIGSTOP);
            al_step_stats st;
            int rc = al_trainer_step(&a->tr, &st, err);
            if (rc) return rc;
            a->iv.steps++;
            a->step++;
            a->iv.loss_sum += st.loss;
            a->iv.gnorm_sum += st.grad_norm;
            a->iv.lr_sum += st.lr;
            a->iv.lr_sq_sum += st.lr * st.lr;
            a->iv.lr_last = st.lr;
            a->iv.tokens += st.tokens;
            a->iv.compute_s += st.seconds;
        }
        return 0;
    }
    double t0 = al_now();
    long first = a->odc.step + 1, n = target - a->iv.steps;
    int rc = al_odc_run(&a->odc, n, err);
    if (rc) return rc;
    for (long s = first; s < first + n; s++) {
        const al_odc_step_stats *st = al_odc_stats(&a->odc, s);
        if (!st) return al_errf(err, AL_EINVAL, "step %ld: statistics not recorded", s);
        a->iv.loss_sum += st->loss;
        a->iv.gnorm_sum += st->grad_norm;
        a->iv.lr_sum += st->lr;
        a->iv.lr_sq_sum += st->lr * st->lr;
        a->iv.lr_last = st->lr;
        a->iv.tokens += st->tokens;
    }
    a->iv.steps += n;
    a->step += n;
    a->iv.compute_s += al_now() - t0;
    return 0;
}

static float *theta_local(agent *a) {
    return a->workers == 1 ? a->tr.model.params : a->odc.params;
}

/* ---- checkpoints ------------------------------------------------------------------- */

static const char *const EXTRA_FILES[] = {"outer.bin", "agent.json"};

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
    if (i == 0) return al_outer_save(&a->outer, path, err);
    char pol[2048] = "";
    al_policy_save(a->pol, pol, sizeof pol);
    json_t *hist = json_array();
    for (int k = 0; k < a->nh; k++) json_array_append_new(hist, json_integer(a->h_hist[k]));
    json_t *live = json_array();
    for (int k = 0; k < a->nsites; k++)
        if (a->live[k]) json_array_append_new(live, json_string(a->name[k]));
    json_t *m = json_pack(
        "{s:s, s:I, s:I, s:I, s:s, s:o, s:o, s:f, s:{s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:f}}",
        "site", a->name[a->self], "round", (json_int_t)a->round, "step", (json_int_t)a->step, "h",
        (json_int_t)a->h, "policy", pol, "h_history", hist, "members", live, "bytes_raw",
        a->bytes_raw, "interval", "steps", (json_int_t)a->iv.steps, "loss_sum", a->iv.loss_sum,
        "gnorm_sum", a->iv.gnorm_sum, "lr_sum", a->iv.lr_sum, "lr_sq_sum", a->iv.lr_sq_sum,
        "lr_last", a->iv.lr_last, "tokens", (json_int_t)a->iv.tokens, "compute_s", a->iv.compute_s);
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

static int save(agent *a, al_err *err) {
    int rc;
    if (a->workers > 1) { /* the trainer is only the carrier of the shared parameters */
        memcpy(a->tr.model.params, a->odc.params, a->P * sizeof(float));
        memcpy(a->tr.m, a->odc.m, a->P * sizeof(float));
        memcpy(a->tr.v, a->odc.v, a->P * sizeof(float));
    }
    a->tr.step = a->step;
    /* W > 1: the workers' data position (their source is the parent's
     * a->wl, replayed in step after every run); the step count is a->step */
    al_ckpt_extra ex = {2, EXTRA_FILES, write_extra, a->workers, {0, 0, 0}};
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

static int load(agent *a, const char *path, al_err *err) {
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
    if ((rc = al_outer_load(&a->outer, f, &a->outer.cfg, err))) return rc;
    snprintf(f, sizeof f, "%s/agent.json", dir);
    json_error_t je;
    json_t *m = json_load_file(f, 0, &je);
    const char *pol = NULL, *site = NULL;
    json_t *hist = NULL, *live = NULL;
    json_int_t round = 0, step = 0, h = 0, ivs = 0, ivt = 0;
    double raw = 0;
    if (!m || json_unpack(m,
                          "{s:s, s:I, s:I, s:I, s:s, s:o, s:o, s:F, s:{s:I, s:F, s:F, s:F, s:F, "
                          "s:F, s:I, s:F}}",
                          "site", &site, "round", &round, "step", &step, "h", &h, "policy", &pol,
                          "h_history", &hist, "members", &live, "bytes_raw", &raw, "interval",
                          "steps", &ivs, "loss_sum", &a->iv.loss_sum, "gnorm_sum", &a->iv.gnorm_sum,
                          "lr_sum", &a->iv.lr_sum, "lr_sq_sum", &a->iv.lr_sq_sum, "lr_last",
                          &a->iv.lr_last, "tokens", &ivt, "compute_s", &a->iv.compute_s) != 0) {
        json_decref(m);
        return al_errf(err, AL_EFORMAT, "%s: malformed agent state", f);
    }
    if (strcmp(site, a->name[a->self]) != 0) {
        rc = al_errf(err, AL_EMISMATCH, "%s: checkpoint of site '%s', this is '%s'", dir, site,
                     a->name[a->self]);
        json_decref(m);
        return rc;
    }
    rc = al_policy_load(a->pol, pol, err);
    a->round = (long)round;
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

/* ---- one round's commit ------------------------------------------------------------ */

/* DiLoCo and DDP send 2 (M-1)/M P fp32 values per synchronisation (ring
 * reduce-scatter + all-gather): every H_base steps, or every step. */
static double sync_bytes(const agent *a, int M) {
    return M > 1 ? 2.0 * (double)(M - 1) / (double)M * (double)a->P * 4.0 : 0.0;
}

static void log_event_line(agent *a, const char *line) {
    if (!a->events || !line) return;
    fprintf(a->events, "%s\n", line); /* one call: whole lines from either thread */
    fflush(a->events);
}

void ag_event_at(agent *a, const char *kind, const char *site, long round, long step) {
    char *line = al_metrics_event(&a->met, kind, site, round, step);
    log_event_line(a, line);
    free(line);
}

void ag_event(agent *a, const char *kind, const char *site) {
    ag_event_at(a, kind, site, a->round, a->step);
}

static int round_once(agent *a, double *eval, al_err *err) {
    double t0 = al_now();
    long h = a->h;
    int rc = run_interval(a, h, err);
    if (rc) return rc;
    double t_train = al_now();
    al_metrics_add(&a->met, AL_M_COMPUTE_S, a->iv.compute_s);
    /* Δ = θ_global − θ_local and my statistics */
    double dsq = 0;
    if ((rc = al_pseudo_grad(a->delta, a->outer.theta, theta_local(a), a->P, &dsq, err))) return rc;
    if (a->fault_poison != 0) { /* test hook: a poisoning member (it reports its norm) */
        for (size_t i = 0; i < a->P; i++) a->delta[i] = (float)a->fault_poison;
        dsq = a->fault_poison * a->fault_poison * (double)a->P;
    }
    al_site_stats mine = {.site = a->self,
                          .steps = a->iv.steps,
                          .loss = a->iv.loss_sum / (double)a->iv.steps,
                          .grad_norm = a->iv.gnorm_sum / (double)a->iv.steps,
                          .delta_sq = dsq,
                          .lr_sum = a->iv.lr_sum,
                          .lr_sq_sum = a->iv.lr_sq_sum,
                          .lr_last = a->iv.lr_last,
                          .tokens = a->iv.tokens,
                          .compute_s = a->iv.compute_s,
                          .comm_s = a->xchg_s};
    if ((rc = al_site_stats_check(&mine, err))) return al_err_prefix(err, "round %ld", a->round);
    int members[AG_MAX_SITES], M = 0;
    al_site_stats stats[AG_MAX_SITES];
    if ((rc = ag_exchange(a, &mine, members, stats, &M, err))) return rc;
    double t_comm = al_now();
    /* commit: identical inputs on every member give identical outputs */
    al_site_stats in_mean[AG_MAX_SITES];
    int n_in = 0;
    for (int j = 0; j < M; j++)
        if (!a->excluded[members[j]]) in_mean[n_in++] = stats[j];
    al_commit_decision d;
    if ((rc = al_commit_decide(a->pol, in_mean, n_in, a->dbar, a->P, a->round, h, &d, err)))
        return rc;
    if ((rc = al_commit_step(&a->outer, a->dbar, &d, a->progress_lr, err))) return rc;
    const al_round_stats rs = d.rs;
    int64_t h_next = d.h_next;
    double comm_floor = d.comm_floor;
    memcpy(theta_local(a), a->outer.theta, a->P * sizeof(float));
    if (a->nh < (int)AL_ARRAY_LEN(a->h_hist)) a->h_hist[a->nh++] = h;
    /* membership events, from the change against the last round: a peer in
     * this round that was out of the last one has (re)joined, one that was in
     * it and is not now was dropped (unreachable, silent, or its statistics
     * or shards did not fit; the log line before says which); every member
     * was seen now */
    int was[AG_MAX_SITES];
    memcpy(was, a->live, sizeof was);
    memset(a->live, 0, sizeof a->live);
    for (int j = 0; j < M; j++) a->live[members[j]] = 1;
    for (int i = 0; i < a->nsites; i++) {
        if (i == a->self) continue;
        if (a->live[i] && !was[i]) ag_event(a, a->ever_live[i] ? "rejoin" : "join", a->name[i]);
        if (!a->live[i] && was[i]) ag_event(a, "drop", a->name[i]);
        if (a->live[i]) a->ever_live[i] = 1;
        al_metrics_peer_up(&a->met, a->name[i], a->live[i]);
    }
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->nsites; i++)
        if (a->joining[i] == a->round) a->joining[i] = -1;
    pthread_mutex_unlock(&a->mu);
    /* metrics and the event log */
    /* bytes: what our clients sent (handshakes and state pulls included, so
     * that the senders' total equals the receivers'), and what our server got */
    double sent = a->tx_retired, recv = 0;
    a->tx_retired = 0;
    for (int i = 0; i < a->nsites; i++) {
        if (!a->cli[i]) continue;
        uint64_t tx, rx;
        al_client_bytes(a->cli[i], &tx, &rx);
        double dtx = (double)tx - a->peer_tx[i];
        a->peer_tx[i] = (double)tx;
        sent += dtx;
        uint64_t srx = 0, stx = 0;
        al_server_bytes(a->srv, a->name[i], &srx, &stx);
        double drx = (double)srx - a->peer_rx[i];
        a->peer_rx[i] = (double)srx;
        al_metrics_peer(&a->met, a->name[i], dtx, drx, t_comm - t_train);
    }
    for (int i = 0; i < a->nsites; i++) {
        uint64_t srx = 0, stx = 0;
        if (i != a->self) al_server_bytes(a->srv, a->name[i], &srx, &stx);
        recv += (double)srx;
    }
    al_metrics_add(&a->met, AL_M_BYTES_SENT, sent);
    al_metrics_set(&a->met, AL_M_BYTES_RECV, a->recv_base + recv);
    al_metrics_set(&a->met, AL_M_BYTES_RAW, a->bytes_raw);
    al_metrics_add(&a->met, AL_M_BYTES_DILOCO, (double)a->iv.steps / a->h_base * sync_bytes(a, M));
    al_metrics_add(&a->met, AL_M_BYTES_DDP, (double)a->iv.steps * sync_bytes(a, M));
    al_metrics_add(&a->met, AL_M_SYNCS, 1);
    al_metrics_add(&a->met, AL_M_SYNCS_DILOCO, (double)a->iv.steps / a->h_base);
    al_metrics_set(&a->met, AL_M_INNER_STEPS, (double)a->step);
    al_metrics_add(&a->met, AL_M_TOKENS, (double)a->iv.tokens);
    al_metrics_set(&a->met, AL_M_INTERVAL, (double)h_next);
    al_metrics_set(&a->met, AL_M_TRAIN_LOSS, mine.loss);
    al_metrics_set(&a->met, AL_M_OUTER_LR_SCALE, a->outer.last.scale);
    al_metrics_set(&a->met, AL_M_OUTER_MU, a->outer.last.mu);
    al_metrics_add(&a->met, AL_M_COMM_S, t_comm - t_train);
    al_metrics_set(&a->met, AL_M_MEMBERS, M);
    al_metrics_round_duration(&a->met, al_now() - t0);
    *eval = NAN;
    long every = a->cfg->inner_eval_every;
    int last = a->step >= a->cfg->inner_steps;
    if (a->val.tok && (last || (every > 0 && a->step / every != (a->step - a->iv.steps) / every))) {
        if (a->workers > 1) memcpy(a->tr.model.params, a->outer.theta, a->P * sizeof(float));
        if ((rc = al_trainer_eval(&a->tr, (int)a->cfg->inner_eval_batches, eval, err))) return rc;
        al_metrics_set(&a->met, AL_M_EVAL_LOSS, *eval);
    }
    al_round_record rec;
    memset(&rec, 0, sizeof rec);
    rec.round = a->round;
    rec.step = a->step;
    rec.h = h;
    rec.h_next = h_next;
    rec.members = M;
    rec.t = (double)time(NULL);
    rec.train_loss = mine.loss;
    rec.eval_loss = *eval;
    rec.nsites = M;
    for (int j = 0; j < M; j++) {
        snprintf(rec.sites[j], sizeof rec.sites[j], "%s", a->name[members[j]]);
        rec.site_loss[j] = stats[j].loss;
    }
    double *v = a->met.v;
    pthread_mutex_lock(&a->met.lock);
    rec.bytes_sent = v[AL_M_BYTES_SENT];
    rec.bytes_recv = v[AL_M_BYTES_RECV];
    rec.bytes_raw = v[AL_M_BYTES_RAW];
    rec.bytes_diloco = v[AL_M_BYTES_DILOCO];
    rec.bytes_ddp = v[AL_M_BYTES_DDP];
    rec.syncs_diloco = v[AL_M_SYNCS_DILOCO];
    pthread_mutex_unlock(&a->met.lock);
    rec.compute_s = a->iv.compute_s;
    rec.comm_s = t_comm - t_train;
    rec.wait_s = 0;
    rec.policy_comm_s = rs.comm_s;
    rec.policy_compute_s = rs.compute_s;
    rec.comm_floor = comm_floor;
    rec.outer_lr_scale = a->outer.last.scale;
    rec.outer_mu = a->outer.last.mu;
    al_outer_hash(&a->outer, rec.theta); /* per round: sites compare their histories */
    al_metrics_add_round(&a->met, &rec, NULL);
    char *line = al_round_record_json(a->name[a->self], &rec);
    log_event_line(a, line);
    free(line);
    char hx[65];
    al_outer_hash(&a->outer, hx);
    al_logf(&a->log, AL_LOG_INFO,
            "site %s | round %ld | step %ld | H %ld -> %lld | sites %d | loss %.4f%s | sent %.0f B "
            "| theta %.12s",
            a->name[a->self], a->round, a->step, h, (long long)h_next, M, mine.loss,
            isnan(*eval) ? "" : " (eval)", sent, hx);
    /* the next round */
    a->h = (long)h_next;
    a->round++;
    memset(&a->iv, 0, sizeof a->iv);
    ag_set_round(a, a->round);
    if (a->fault_publish_ms > 0) { /* test hook, see agent_impl.h */
        struct timespec ts = {a->fault_publish_ms / 1000, (a->fault_publish_ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
    }
    return ag_publish_state(a, err);
}

/* ---- set-up and the loop ------------------------------------------------------------- */

static int setup(agent *a, const al_config *c, al_err *err) {
    al_log_init(&a->log, AL_LOG_INFO, stderr);
    a->cfg = c;
    memset(a->joining, 0xff, sizeof a->joining); /* -1 */
    a->fault_interval = a->fault_stats = a->fault_badstats = a->fault_badtokens = -1;
    a->stop = &g_agent_stop;
    const char *fault = getenv("AL_FAULT");
    if (fault && !strncmp(fault, "interval:", 9)) a->fault_interval = atol(fault + 9);
    if (fault && !strncmp(fault, "stats:", 6)) a->fault_stats = atol(fault + 6);
    if (fault && !strncmp(fault, "publish:", 8)) a->fault_publish_ms = atol(fault + 8);
    if (fault && !strncmp(fault, "badstats:", 9)) a->fault_badstats = atol(fault + 9);
    if (fault && !strncmp(fault, "badtokens:", 10)) a->fault_badtokens = atol(fault + 10);
    if (fault && !strncmp(fault, "poison:", 7)) a->fault_poison = atof(fault + 7);
    if (fault && !strcmp(fault, "badstate")) a->fault_badstate = 1;
    a->fault_freeze = -1;
    if (fault && !strncmp(fault, "freeze:", 7)) a->fault_freeze = atol(fault + 7);
    pthread_mutex_init(&a->mu, NULL);
    pthread_cond_init(&a->cv, NULL);
    al_config_hash(c, a->hash);
    al_config_run_hash(c, a->run_hash);
    int rc = al_agent_check_config(c, err);
    if (rc == 0) rc = load_sites(a, c, err);
    if (rc == 0) rc = make_policy(a, c, err);
    al_codec_cfg codec = {.block = 128}; /* values per absmax scale for int8/int4 */
    if (rc == 0) rc = al_codec_parse(c->outer_codec, &codec, err);
    if (rc == 0) rc = al_commit_codec_init(&a->cc, &codec, err);
    if (rc == 0) rc = al_model_preset(&a->mc, c->model_preset, err);
    if (rc) return rc;
    a->h_base = policy_h_base(a->pol);
    /* local training, as `autoloco train` configures it */
    if ((rc = al_config_train_opts(c, &a->o, err))) return rc;
    a->workers = (int)c->inner_workers;
    if (!strcmp(c->inner_device, "cuda") && a->workers == 1)
        return al_errf(err, AL_EUNSUPPORTED,
                       "agent: [inner] device = cuda needs workers > 1 (the single-worker agent "
                       "keeps the model in host memory)");
    int threads = c->inner_threads > 0 ? (int)c->inner_threads
                                       : (int)AL_MAX(1, sysconf(_SC_NPROCESSORS_ONLN) / a->workers);
    al_threads_set(threads);
    if ((rc = al_tokens_load(&a->train, c->data_train, err))) return rc;
    if (c->data_val[0] && (rc = al_tokens_load(&a->val, c->data_val, err))) return rc;
    if ((rc = al_trainer_init(&a->tr, &a->mc, &a->o, &a->train, a->val.tok ? &a->val : NULL, err)))
        return rc;
    a->P = a->tr.model.lay.nparams;
    /* Every site starts from the same weights ([inner] seed) but reads its own
     * order of the data: the loader's seed is mixed with the site's index
     * among the run's sites (sorted by name), as the simulator's site m. */
    uint64_t data_seed = al_site_data_seed(a->o.seed, a->self);
    al_loader_free(&a->tr.train);
    if ((rc = al_loader_init(&a->tr.train, &a->train, a->o.packing, 1, data_seed, err))) return rc;
    if (a->workers > 1) {
        al_odc_opts eo;
        memset(&eo, 0, sizeof eo);
        if ((rc = al_mode_parse(c->inner_mode, &eo.mode, err))) return rc;
        eo.workers = a->workers;
        eo.threads = threads;
        int seq = a->o.seq > 0 ? a->o.seq : a->mc.T;
        eo.bal.budget = seq;
        eo.bal.method = eo.mode == AL_MODE_ODC ? AL_BAL_LPT : AL_BAL_MICRO;
        eo.train = a->o;
        eo.device = c->inner_device;
        eo.site = a->name[a->self];
        eo.barrier_timeout_s = 60;
        eo.record_steps = 8 * 1024;
        a->npieces = a->o.batch * a->o.accum;
        a->pieces = malloc((size_t)a->npieces * sizeof(al_piece));
        if (!a->pieces) return al_errf(err, AL_ENOMEM, "agent: out of memory");
        rc = al_workload_init(&a->wl, a->o.packing == AL_PACK_STREAM ? AL_WL_FIXED : AL_WL_DOCS,
                              &a->train, seq, data_seed, 0, 0, err);
        if (rc == 0) rc = al_odc_init(&a->odc, &a->mc, &eo, &a->train, src_next, a, err);
        if (rc) return rc;
    }
    /* the outer loop starts from the same initial weights on every site */
    al_outer_cfg oc;
    al_outer_cfg_default(&oc);
    oc.lr = c->outer_lr;
    oc.momentum = c->outer_momentum;
    oc.correction =
        strcmp(c->outer_correction, "none") ? AL_CORRECTION_AUTOLOCO : AL_CORRECTION_NONE;
    /* S_ref: one DiLoCo interval's progress, in the unit [outer] progress names
     * (steps: S_r = H_r; lr: S_r = Σ η_t). docs/results/autoloco-sweep.md has
     * the evidence for steps. */
    a->progress_lr = !strcmp(c->outer_progress, "lr");
    oc.s_ref = a->progress_lr ? a->h_base * c->inner_lr : a->h_base;
    if ((rc = al_outer_init(&a->outer, &oc, theta_local(a), a->P, err))) return rc;
    a->delta = malloc(a->P * sizeof(float));
    a->dbar = malloc(a->P * sizeof(float));
    a->part = malloc(a->P * sizeof(float));
    if (!a->delta || !a->dbar || !a->part) return al_errf(err, AL_ENOMEM, "agent: out of memory");
    return al_metrics_init(&a->met, c->site_name, err);
}

/* W > 1: fork the workers, once, while this process has no other thread yet
 * (gRPC, HTTP and OpenMP start later), and after a --resume has moved the
 * source: each worker keeps its own copy of it from here on. */
static int start_workers(agent *a, al_err *err) {
    if (a->workers == 1) return 0;
    int rc = al_odc_start(&a->odc, err);
    if (rc == 0)
        al_logf(&a->log, AL_LOG_INFO, "site %s: %d workers forked once (process threads: %d)",
                a->name[a->self], a->workers, a->odc.shm.pool_threads);
    return rc;
}

static void teardown(agent *a) {
    al_http_stop(a->http);
    ag_hb_stop(a);
    ag_net_stop(a);
    if (a->events) fclose(a->events);
    if (a->workers > 1) {
        al_odc_free(&a->odc);
        al_workload_free(&a->wl);
    }
    free(a->pieces);
    al_trainer_free(&a->tr);
    al_tokens_free(&a->train);
    al_tokens_free(&a->val);
    al_outer_free(&a->outer);
    if (a->pol) al_policy_free(a->pol);
    free(a->delta);
    free(a->dbar);
    free(a->part);
    al_commit_codec_free(&a->cc);
    al_metrics_free(&a->met);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
}

/* A summary for `autoloco demo` and scripts: SITE_DIR/summary.json. */
static void write_summary(agent *a, double eval) {
    char path[4200], hx[65];
    snprintf(path, sizeof path, "%s/summary.json", a->cfg->checkpoint_dir);
    al_outer_hash(&a->outer, hx);
    json_t *hist = json_array();
    for (int k = 0; k < a->nh; k++) json_array_append_new(hist, json_integer(a->h_hist[k]));
    double *v = a->met.v;
    json_t *m =
        json_pack("{s:s, s:I, s:I, s:I, s:f, s:s, s:o, s:f, s:f, s:f, s:f, s:f, s:i, s:i}", "site",
                  a->name[a->self], "rounds", (json_int_t)a->round, "steps", (json_int_t)a->step,
                  "syncs", (json_int_t)v[AL_M_SYNCS], "syncs_diloco_equiv", v[AL_M_SYNCS_DILOCO],
                  "theta_hash", hx, "h_history", hist, "bytes_sent", v[AL_M_BYTES_SENT],
                  "bytes_recv", v[AL_M_BYTES_RECV], "bytes_raw", v[AL_M_BYTES_RAW],
                  "bytes_diloco_equiv", v[AL_M_BYTES_DILOCO], "bytes_ddp_equiv", v[AL_M_BYTES_DDP],
                  "workers", a->workers, "dashboard_port", a->http ? al_http_port(a->http) : 0);
    json_object_set_new(m, "final_eval_loss", isfinite(eval) ? json_real(eval) : json_null());
    char *js = json_dumps(m, JSON_INDENT(2));
    json_decref(m);
    if (js) al_write_file_sync(path, js, strlen(js), NULL);
    free(js);
}

int al_agent_run(const al_config *c, const al_agent_opts *o, al_err *err) {
    agent *a = calloc(1, sizeof *a);
    if (!a) return al_errf(err, AL_ENOMEM, "agent: out of memory");
    int rc = setup(a, c, err);
    if (rc == 0 && o->resume) rc = load(a, o->resume, err);
    if (rc == 0) rc = start_workers(a, err);
    if (rc == 0 && (rc = al_mkdirs(c->checkpoint_dir, err))) al_err_prefix(err, "[checkpoint] dir");
    if (rc == 0) {
        char path[4200];
        snprintf(path, sizeof path, "%s", c->log_events);
        if (!path[0]) snprintf(path, sizeof path, "%s/events.jsonl", c->checkpoint_dir);
        if (!(a->events = fopen(path, "a")))
            rc = al_errf(err, AL_EIO, "[log] events: cannot open '%s'", path);
    }
    if (rc == 0 && c->dashboard_port >= 0) {
        al_http_cfg hc = {.address = c->dashboard_address,
                          .port = (int)c->dashboard_port,
                          .max_connections = 64,
                          .timeout_s = 10};
        rc = al_http_start(&a->http, &hc, &a->met, err);
        if (rc == 0)
            al_logf(&a->log, AL_LOG_INFO, "site %s: dashboard at http://%s:%d/", c->site_name,
                    c->dashboard_address, al_http_port(a->http));
    }
    if (rc == 0) rc = ag_net_start(a, err);
    if (rc == 0) rc = ag_hb_start(a, err);
    if (rc == 0) {
        if (a->round == 0 && a->nh == 0) {
            int64_t h0;
            rc = al_policy_start(a->pol, &h0, err);
            a->h = (long)h0;
        }
    }
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    if (rc == 0) {
        ag_set_round(a, a->round);
        rc = ag_publish_state(a, err);
    }
    if (rc == 0) {
        long before = a->round;
        rc = ag_join(a, err);
        if (rc == 0 && a->round != before) { /* joined a run ahead of us */
            memcpy(theta_local(a), a->outer.theta, a->P * sizeof(float));
            a->tr.step = a->step;
            if (a->workers > 1) a->odc.step = a->step;
            memset(&a->iv, 0, sizeof a->iv);
            ag_set_round(a, a->round);
            ag_event(a, "join", a->name[a->self]);
            rc = ag_publish_state(a, err);
        }
    }
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    double eval = NAN;
    while (rc == 0 && a->step < c->inner_steps && !g_agent_stop) {
        rc = round_once(a, &eval, err);
        if (rc == 0 && !g_agent_stop && c->checkpoint_every > 0 &&
            a->round % c->checkpoint_every == 0 && a->step < c->inner_steps)
            rc = save(a, err);
    }
    if (rc == 0 && g_agent_stop) {
        al_logf(&a->log, AL_LOG_INFO, "site %s: signal %d, saving and stopping", c->site_name,
                (int)g_agent_stop);
        rc = save(a, err);
    } else if (rc == 0) {
        rc = save(a, err);
        if (rc == 0) write_summary(a, eval);
        char hx[65];
        al_outer_hash(&a->outer, hx);
        al_logf(&a->log, AL_LOG_INFO, "site %s: done: %ld rounds, %ld steps, theta %s",
                c->site_name, a->round, a->step, hx);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    teardown(a);
    free(a);
    return rc;
}
