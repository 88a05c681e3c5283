/* agent.c -- one site of a multi-site run: set-up, the inner interval, the
 * commit of each round, checkpoints and metrics (see al_agent.h). */
#include "agent_ckpt.h"
#include "agent_hard.h"
#include "agent_hb.h"
#include "agent_net.h"
#include "agent_round.h"
#include "agent_stream.h"
#include "agent_train.h"
#include "al_store.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The agent's globals: a signal handler can reach nothing else. The signal,
 * and when it came (CLOCK_MONOTONIC, ms; clock_gettime and a lock-free
 * atomic store are async-signal-safe): a stop is due one heartbeat later in
 * every phase (ag_stop_due). */
static volatile sig_atomic_t g_agent_stop = 0;
static atomic_llong g_agent_stop_ms = 0;
static void on_stop(int sig) {
    if (!g_agent_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        atomic_store(&g_agent_stop_ms, (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    }
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
    long every;
    int rc = al_config_checkpoint_every(c, 'a', &every, err); /* rounds, not steps */
    if (rc == 0) rc = load_sites(&a, c, err);
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

/* ---- set-up and the loop ------------------------------------------------------------- */

/* AL_FAULT (tests): the fault this site injects, if any (agent_impl.h). */
static void parse_faults(agent *a) {
    a->fault_interval = a->fault_stats = a->fault_badstats = a->fault_badtokens = -1;
    a->fault_repush = -1;
    const char *fault = getenv("AL_FAULT");
    if (fault && !strncmp(fault, "interval:", 9)) a->fault_interval = atol(fault + 9);
    if (fault && !strncmp(fault, "stats:", 6)) a->fault_stats = atol(fault + 6);
    if (fault && !strncmp(fault, "publish:", 8)) a->fault_publish_ms = atol(fault + 8);
    if (fault && !strncmp(fault, "badstats:", 9)) a->fault_badstats = atol(fault + 9);
    if (fault && !strncmp(fault, "badtokens:", 10)) a->fault_badtokens = atol(fault + 10);
    if (fault && !strncmp(fault, "repush:", 7)) a->fault_repush = atol(fault + 7);
    if (fault && !strncmp(fault, "poison:", 7)) a->fault_poison = atof(fault + 7);
    if (fault && !strncmp(fault, "liar:", 5)) {
        a->fault_liar = atof(fault + 5);
        const char *to = strchr(fault + 5, ':');
        if (to) snprintf(a->fault_liar_to, sizeof a->fault_liar_to, "%s", to + 1);
    }
    if (fault && !strcmp(fault, "badstate")) a->fault_badstate = 1;
    a->fault_freeze = a->fault_corrupt = a->fault_nanmerge = -1;
    if (fault && !strncmp(fault, "nanmerge:", 9)) a->fault_nanmerge = atol(fault + 9);
    a->fault_holdvote = fault && !strncmp(fault, "holdvote:", 9) ? atol(fault + 9) : -1;
    a->fault_hidevote = fault && !strncmp(fault, "hidevote:", 9) ? atol(fault + 9) : -1;
    a->fault_corrupt_xchg = -1;
    if (fault && !strncmp(fault, "corrupt:", 8)) {
        if (strstr(fault + 8, ":exchange"))
            a->fault_corrupt_xchg = atol(fault + 8);
        else
            a->fault_corrupt = atol(fault + 8);
    }
    if (fault && !strncmp(fault, "freeze:", 7)) a->fault_freeze = atol(fault + 7);
    a->fault_pause_round = -1;
    const char *colon = fault && !strncmp(fault, "pause:", 6) ? strchr(fault + 6, ':') : NULL;
    if (colon && colon - (fault + 6) < (long)sizeof a->fault_pause) {
        memcpy(a->fault_pause, fault + 6, (size_t)(colon - (fault + 6)));
        a->fault_pause_round = strcmp(colon + 1, "any") ? atol(colon + 1) : -2;
    }
}

/* W > 1: the ODC engine over the workers (forked later, start_workers), fed by
 * a->wl through ag_src_next. */
static int setup_workers(agent *a, const al_config *c, int threads, uint64_t data_seed,
                         al_err *err) {
    al_odc_opts eo;
    memset(&eo, 0, sizeof eo);
    int rc = al_mode_parse(c->inner_mode, &eo.mode, err);
    if (rc) return rc;
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
    if (rc == 0) rc = al_odc_init(&a->odc, &a->mc, &eo, &a->train, ag_src_next, a, err);
    return rc;
}

/* Local training, as `autoloco train` configures it: the trainer (W = 1, or
 * the carrier of the workers' parameters) and its data. */
static int setup_training(agent *a, const al_config *c, al_err *err) {
    int rc;
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
    if (a->workers > 1) return setup_workers(a, c, threads, data_seed, err);
    return 0;
}

/* The outer loop (it starts from the same initial weights on every site), the
 * buffers of the exchange and of [outer] overlap. */
static int setup_outer(agent *a, const al_config *c, al_err *err) {
    al_outer_cfg oc;
    al_outer_cfg_default(&oc);
    oc.lr = c->outer_lr;
    oc.momentum = c->outer_momentum;
    oc.correction =
        strcmp(c->outer_correction, "none") ? AL_CORRECTION_AUTOLOCO : AL_CORRECTION_NONE;
    /* S_ref: one DiLoCo interval's progress, in the unit [outer] progress names
     * (steps: S_r = H_r; lr: S_r = Σ η_t). docs/results/autoloco-sweep.md has
     * the evidence for steps. [outer] s_ref > 0 sets it outright, as it does
     * in the simulator (where 0 derives it from h_base the same way). */
    a->progress_lr = !strcmp(c->outer_progress, "lr");
    oc.s_ref = c->outer_s_ref > 0 ? c->outer_s_ref
               : a->progress_lr   ? a->h_base * c->inner_lr
                                  : a->h_base;
    int rc;
    if ((rc = al_outer_init(&a->outer, &oc, ag_theta_local(a), a->P, err))) return rc;
    a->outer_h_ok = 0;
    a->outer_dig = malloc(32 * al_theta_chunks(a->P));
    a->cand_dig = malloc(32 * al_theta_chunks(a->P));
    if (!a->outer_dig || !a->cand_dig) return al_errf(err, AL_ENOMEM, "agent: out of memory");
    a->delta = malloc(a->P * sizeof(float));
    a->dbar = calloc(a->P, sizeof(float)); /* streaming: the fragments' latest Δ̄ */
    a->part = malloc(a->P * sizeof(float));
    if (!a->delta || !a->dbar || !a->part) return al_errf(err, AL_ENOMEM, "agent: out of memory");
    if ((rc = al_overlap_parse(c->outer_overlap, &a->overlap, err)))
        return al_err_prefix(err, "[outer] overlap");
    if (a->overlap == AL_OVERLAP_DELAYED_MEAN)
        return al_errf(err, AL_EUNSUPPORTED,
                       "[outer] overlap: %s runs in autoloco sim only; the agents run none, "
                       "delayed, delayed-mid or streaming",
                       al_overlap_name(a->overlap));
    if ((rc = ag_stream_init(a, err))) return rc;
    if (a->overlap && (!(a->from = malloc(a->P * sizeof(float))) ||
                       !(a->iv_from = malloc(a->P * sizeof(float))) ||
                       !(a->iv_end = malloc(a->P * sizeof(float)))))
        return al_errf(err, AL_ENOMEM, "agent: out of memory");
    if ((a->overlap == AL_OVERLAP_DELAYED_MID || a->overlap == AL_OVERLAP_STREAMING) &&
        !(a->blend = malloc(a->P * sizeof(float))))
        return al_errf(err, AL_ENOMEM, "agent: out of memory");
    return 0;
}

static int setup(agent *a, const al_config *c, al_err *err) {
    /* AL_LOG=debug: the round machine's trace too (agent_machine.c ag_feed) */
    const char *lv = getenv("AL_LOG");
    al_log_init(&a->log, lv && !strcmp(lv, "debug") ? AL_LOG_DEBUG : AL_LOG_INFO, stderr);
    a->t0 = al_now();
    a->cfg = c;
    a->stop = &g_agent_stop;
    a->stop_ms = &g_agent_stop_ms;
    parse_faults(a);
    pthread_mutex_init(&a->mu, NULL);
    pthread_mutex_init(&a->ev_mu, NULL);
    int rc = al_cond_init(&a->cv, err); /* its timed waits count on the monotonic clock */
    al_config_hash(c, a->hash);
    al_config_run_hash(c, a->run_hash);
    if (rc == 0) rc = al_agent_check_config(c, err);
    if (rc == 0) rc = load_sites(a, c, err);
    if (rc == 0) rc = al_quorum_parse(c->round_quorum, &a->quorum, err);
    if (rc == 0) rc = make_policy(a, c, err);
    al_codec_cfg codec = {.block = 128}; /* values per absmax scale for int8/int4 */
    if (rc == 0) rc = al_codec_parse(c->outer_codec, &codec, err);
    if (rc == 0) rc = al_commit_codec_init(&a->cc, &codec, err);
    if (rc == 0) rc = al_model_preset(&a->mc, c->model_preset, err);
    if (rc) return rc;
    a->h_base = policy_h_base(a->pol);
    if ((rc = setup_training(a, c, err)) || (rc = setup_outer(a, c, err))) return rc;
    if ((rc = al_metrics_init(&a->met, c->site_name, err))) return rc;
    const char *names[AG_MAX_SITES]; /* the dashboard's agreement and health name them */
    for (int i = 0; i < a->nsites; i++) names[i] = a->name[i];
    return al_metrics_sites(&a->met, names, a->nsites, err);
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
    al_log_flush(&a->log); /* the counts of lines the logger held back */
    ag_bg_discard(a, 1);   /* overlap: the training thread first (it may use the workers) */
    ag_bg_quit(a);
    al_http_stop(a->http);
    ag_hb_stop(a);
    ag_net_stop(a);
    if (a->events) fclose(a->events);
    if (a->workers > 1) {
        al_odc_free(&a->odc);
        al_workload_free(&a->wl);
    }
    free(a->pieces);
    free(a->aq);
    al_trainer_free(&a->tr);
    al_tokens_free(&a->train);
    al_tokens_free(&a->val);
    al_outer_free(&a->outer);
    al_outer_free(&a->cand);
    free(a->outer_dig);
    free(a->cand_dig);
    al_outer_free(&a->pulled);
    al_outer_free(&a->eager);
    free(a->from);
    free(a->blend);
    free(a->iv_from);
    free(a->iv_end);
    ag_stream_free(a);
    json_decref(a->pulled_stream);
    if (a->pol) al_policy_free(a->pol);
    free(a->delta);
    free(a->dbar);
    free(a->part);
    al_commit_codec_free(&a->cc);
    al_metrics_free(&a->met);
    pthread_mutex_destroy(&a->mu);
    pthread_mutex_destroy(&a->ev_mu);
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
    /* the time this process spent from its first interval to its last commit,
     * and in it: training, the rounds' exchanges, and of those what ran beside
     * training ([outer] overlap); `bench overlap` reads them */
    json_object_set_new(m, "overlap", json_string(al_overlap_name(a->overlap)));
    json_object_set_new(
        m, "train_wall_s",
        json_real(a->t_last_commit > a->t_first_train ? a->t_last_commit - a->t_first_train : 0));
    json_object_set_new(m, "compute_s", json_real(v[AL_M_COMPUTE_S]));
    json_object_set_new(m, "comm_s", json_real(v[AL_M_COMM_S]));
    json_object_set_new(m, "comm_hidden_s", json_real(v[AL_M_COMM_HIDDEN_S]));
    json_object_set_new(m, "hard_state",
                        json_pack("{s:I, s:f, s:f}", "writes", (json_int_t)a->hard_writes, "bytes",
                                  a->hard_bytes, "seconds", a->hard_s));
    char *js = json_dumps(m, JSON_INDENT(2));
    json_decref(m);
    if (js) al_write_file_sync(path, js, strlen(js), NULL);
    free(js);
}

/* The start-up line: what runs (site, sites, policy and h_base, codec, overlap,
 * quorum, workers, data, steps) and from where (a fresh start or a resume). */
static void log_start(agent *a, const al_agent_opts *o) {
    const al_config *c = a->cfg;
    char pol[2048], sites[AG_MAX_SITES * (AL_SITE_MAX + 2) + 1] = "";
    al_policy_settings(a->pol, pol, sizeof pol);
    char *nl = strchr(pol, '\n'); /* "name=fixed\n..." */
    if (nl) *nl = 0;
    for (int i = 0; i < a->nsites; i++) {
        strcat(sites, a->name[i]);
        if (i + 1 < a->nsites) strcat(sites, ",");
    }
    al_logf(&a->log, AL_LOG_INFO,
            "site %s: runs: sites %s; policy %s, h_base %g; codec %s; overlap %s; quorum %s of %d; "
            "%d worker(s); model %s; data %s (val %s); %ld steps; %s%s",
            c->site_name, sites, strncmp(pol, "name=", 5) ? pol : pol + 5, a->h_base,
            c->outer_codec, al_overlap_name(a->overlap), c->round_quorum, a->nsites, a->workers,
            c->model_preset, c->data_train, c->data_val[0] ? c->data_val : "none",
            (long)c->inner_steps, o->resume ? "resume from " : "fresh start",
            o->resume ? o->resume : "");
}

/* The end-of-run summary line: θ_global's final eval loss (summary.json's
 * final_eval_loss, not a round line's training loss), syncs against DiLoCo's,
 * bytes against DiLoCo's and DDP's. */
static void log_summary(agent *a, double eval) {
    double *v = a->met.v;
    char hx[65];
    al_outer_hash(&a->outer, hx);
    double dil = v[AL_M_BYTES_DILOCO], sent = v[AL_M_BYTES_SENT], sy = v[AL_M_SYNCS],
           sy_dil = v[AL_M_SYNCS_DILOCO];
    char ev[48] = "none (no [data] val)";
    if (isfinite(eval)) snprintf(ev, sizeof ev, "%.4f", eval);
    al_logf(&a->log, AL_LOG_INFO,
            "site %s: summary: theta_global eval loss %s; %ld rounds, %ld steps; syncs %.2f "
            "(DiLoCo %.2f: the policy saved %.1f%%); bytes sent %.0f, received %.0f (DiLoCo "
            "%.0f: saved %.1f%% with the codec; DDP %.0f); theta %.12s",
            a->name[a->self], ev, a->round, a->step, sy, sy_dil,
            sy_dil > 0 ? AL_MAX(0.0, 100.0 * (1.0 - sy / sy_dil)) : 0.0, sent, v[AL_M_BYTES_RECV],
            dil, dil > 0 ? AL_MAX(0.0, 100.0 * (1.0 - sent / dil)) : 0.0, v[AL_M_BYTES_DDP], hx);
}

int al_agent_run(const al_config *c, const al_agent_opts *o, al_err *err) {
    agent *a = calloc(1, sizeof *a);
    if (!a) return al_errf(err, AL_ENOMEM, "agent: out of memory");
    int rc = setup(a, c, err);
    if (rc == 0 && o->resume) rc = ag_load(a, o->resume, err);
    a->resumed = o->resume != NULL;
    if (rc == 0) log_start(a, o);
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
                          .max_connections = 0, /* the server's default (al_monitor.h) */
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
    /* SIGHUP (a dropped ssh session) stops the site as SIGTERM does, logged */
    signal(SIGINT, on_stop);
    signal(SIGTERM, on_stop);
    signal(SIGHUP, on_stop);
    if (rc == 0) {
        ag_set_round(a, a->round);
        rc = ag_publish_state(a, err);
    }
    double eval = NAN;
    if (rc == 0) rc = ag_drive(a, &eval, err);
    if (rc == 0 && g_agent_stop) {
        /* the last committed round (θ_global, its round and H) with this
         * site's interval as it stands: trained in part (a stop cuts it) or
         * whole, exchanged again after --resume */
        int sig = (int)g_agent_stop;
        double t_save = al_now();
        rc = ag_save(a, err);
        char hx[65];
        al_outer_hash(&a->outer, hx);
        if (rc == 0)
            al_logf(&a->log, AL_LOG_INFO,
                    "site %s: %s: stopped: saved round %ld (theta %.12s), step %ld; %.2f s after "
                    "the signal (save %.2f s)",
                    c->site_name, ag_sig_name(sig), a->round, hx, a->step, ag_stop_age(a),
                    al_now() - t_save);
    } else if (rc == 0) {
        rc = ag_save(a, err);
        if (rc == 0) write_summary(a, eval);
        char hx[65];
        al_outer_hash(&a->outer, hx);
        al_logf(&a->log, AL_LOG_INFO, "site %s: done: %ld rounds, %ld steps, theta %s",
                c->site_name, a->round, a->step, hx);
        ag_hard_report(a); /* (issue 31: the cost of durability) */
        log_summary(a, eval);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    teardown(a);
    free(a);
    return rc;
}
