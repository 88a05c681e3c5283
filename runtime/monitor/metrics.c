/* metrics.c -- the agent's metric registry and its renderings (see al_monitor.h). */
#include "al_monitor.h"

#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const struct {
    const char *name, *type, *help;
} DEFS[AL_M_COUNT] = {
#define AL_M_DEF(id, name, type, help) {name, #type, help},
    AL_METRICS_TABLE(AL_M_DEF)
#undef AL_M_DEF
};

/* upper bounds of the round-duration buckets, seconds (+Inf is implicit) */
static const double BUCKETS[AL_METRICS_BUCKETS] = {0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                                   2.5,  5,    10,  30,   60,  300};

/* timestamps shown on /metrics and the dashboard and written to events.jsonl */
static double wall_now(void) {
    return al_wall_now();
}

int al_metrics_init(al_metrics *m, const char *site, al_err *err) {
    memset(m, 0, sizeof *m);
    if (pthread_mutex_init(&m->lock, NULL) != 0)
        return al_errf(err, AL_ENOMEM, "metrics: cannot create lock");
    snprintf(m->site, sizeof m->site, "%s", site);
    m->v[AL_M_EVAL_LOSS] = NAN;
    m->v[AL_M_TRAIN_LOSS] = NAN;
    m->started = wall_now();
    return 0;
}

void al_metrics_free(al_metrics *m) {
    free(m->rounds);
    pthread_mutex_destroy(&m->lock);
    memset(m, 0, sizeof *m);
}

void al_metrics_set(al_metrics *m, al_metric_id id, double v) {
    pthread_mutex_lock(&m->lock);
    m->v[id] = v;
    pthread_mutex_unlock(&m->lock);
}

void al_metrics_add(al_metrics *m, al_metric_id id, double dv) {
    pthread_mutex_lock(&m->lock);
    m->v[id] += dv;
    pthread_mutex_unlock(&m->lock);
}

/* The peer's index, added on first use; -1 if the table is full. Locked. */
static int peer_index(al_metrics *m, const char *peer) {
    int k = 0;
    while (k < m->npeers && strcmp(m->peer[k], peer) != 0) k++;
    if (k == m->npeers && m->npeers < AL_METRICS_MAX_PEERS) {
        snprintf(m->peer[m->npeers++], sizeof m->peer[0], "%s", peer);
        m->peer_up[k] = NAN;
        m->peer_reach[k] = NAN;
        m->peer_seen[k] = 0;
    }
    return k < m->npeers ? k : -1;
}

void al_metrics_peer_reachable(al_metrics *m, const char *peer, int reachable) {
    pthread_mutex_lock(&m->lock);
    int k = peer_index(m, peer);
    if (k >= 0) m->peer_reach[k] = reachable ? 1 : 0;
    pthread_mutex_unlock(&m->lock);
}

int al_metrics_sites(al_metrics *m, const char *const *names, int n, al_err *err) {
    if (n < 1 || n > AL_METRICS_MAX_PEERS)
        return al_errf(err, AL_EINVAL, "metrics: %d configured sites (need 1 to %d)", n,
                       AL_METRICS_MAX_PEERS);
    for (int i = 0; i < n; i++)
        if (!names[i] || !names[i][0] || strlen(names[i]) >= sizeof m->site_name[0])
            return al_errf(err, AL_EINVAL, "metrics: site %d's name is empty or longer than %zu", i,
                           sizeof m->site_name[0] - 1);
    pthread_mutex_lock(&m->lock);
    m->nsites = n;
    for (int i = 0; i < n; i++) {
        snprintf(m->site_name[i], sizeof m->site_name[0], "%s", names[i]);
        if (strcmp(names[i], m->site) != 0) peer_index(m, names[i]);
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

void al_metrics_peer_up(al_metrics *m, const char *peer, int up) {
    pthread_mutex_lock(&m->lock);
    int k = peer_index(m, peer);
    if (k >= 0) {
        m->peer_up[k] = up ? 1 : 0;
        if (up) m->peer_seen[k] = wall_now();
    }
    pthread_mutex_unlock(&m->lock);
}

void al_metrics_peer(al_metrics *m, const char *peer, double sent, double recv, double busy_s) {
    pthread_mutex_lock(&m->lock);
    int k = peer_index(m, peer);
    if (k >= 0) {
        m->peer_sent[k] += sent;
        m->peer_recv[k] += recv;
        m->peer_busy_s[k] += busy_s;
    }
    pthread_mutex_unlock(&m->lock);
}

void al_metrics_round_duration(al_metrics *m, double s) {
    pthread_mutex_lock(&m->lock);
    for (int i = 0; i < AL_METRICS_BUCKETS; i++)
        if (s <= BUCKETS[i]) m->bucket[i] += 1;
    m->dur_sum += s;
    m->dur_count += 1;
    pthread_mutex_unlock(&m->lock);
}

int al_metrics_add_round(al_metrics *m, const al_round_record *r, al_err *err) {
    pthread_mutex_lock(&m->lock);
    int rc = 0;
    if (m->nrounds == m->cap) {
        size_t nc = m->cap ? 2 * m->cap : 64;
        al_round_record *nr = realloc(m->rounds, nc * sizeof *nr);
        if (!nr)
            rc = al_errf(err, AL_ENOMEM, "metrics: out of memory for round records");
        else {
            m->rounds = nr;
            m->cap = nc;
        }
    }
    if (rc == 0) {
        m->rounds[m->nrounds++] = *r;
        m->last_commit = r->t > 0 ? r->t : wall_now();
    }
    pthread_mutex_unlock(&m->lock);
    return rc;
}

static json_t *agree_json(const al_metrics *m, const al_round_record *r);

char *al_metrics_theta_seen(al_metrics *m, long round, int site, const unsigned char hash[32],
                            int definitive) {
    if (site < 0 || site >= 64) return NULL;
    char hx[65];
    for (int i = 0; i < 32; i++) snprintf(hx + 2 * i, 3, "%02x", hash[i]);
    char *line = NULL;
    pthread_mutex_lock(&m->lock);
    al_round_record *r = NULL;
    for (size_t i = m->nrounds; i-- > 0 && !r;)
        if (m->rounds[i].round == round) r = &m->rounds[i];
    if (r && r->theta[0] && r->configured > 0) {
        uint64_t bit = (uint64_t)1 << site, eq = r->equal, df = r->differ;
        if (!strcmp(hx, r->theta))
            r->equal |= bit;
        else if (definitive)
            r->differ |= bit;
        if (r->equal != eq || r->differ != df) {
            json_t *o = agree_json(m, r);
            json_object_set_new(o, "event", json_string("agree"));
            json_object_set_new(o, "site", json_string(m->site));
            json_object_set_new(o, "round", json_integer((json_int_t)r->round));
            line = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
            json_decref(o);
        }
    }
    pthread_mutex_unlock(&m->lock);
    return line;
}

char *al_metrics_event(al_metrics *m, const char *kind, const char *site, long round, long step) {
    pthread_mutex_lock(&m->lock);
    int j = 0;
    while (j < m->nkinds && strcmp(m->event_kind[j], kind) != 0) j++;
    if (j == m->nkinds && m->nkinds < (int)AL_ARRAY_LEN(m->event_kind))
        snprintf(m->event_kind[m->nkinds++], sizeof m->event_kind[0], "%s", kind);
    if (j < m->nkinds) m->event_count[j] += 1;
    if (strcmp(kind, "checkpoint") == 0) m->last_ckpt = wall_now();
    if (m->nevents == (int)AL_ARRAY_LEN(m->events)) { /* keep the newest */
        memmove(m->events[0], m->events[1], sizeof m->events - sizeof m->events[0]);
        m->nevents--;
    }
    json_t *e =
        json_pack("{s:s, s:s, s:s, s:I, s:I, s:f}", "event", kind, "kind", kind, "site", site,
                  "round", (json_int_t)round, "step", (json_int_t)step, "t", wall_now());
    char *s = e ? json_dumps(e, JSON_COMPACT) : NULL;
    if (s && strlen(s) < sizeof m->events[0]) memcpy(m->events[m->nevents++], s, strlen(s) + 1);
    json_decref(e);
    pthread_mutex_unlock(&m->lock);
    return s;
}

/* ---- Prometheus text format ---------------------------------------------------------
 * # HELP name text / # TYPE name counter|gauge|histogram / name{label="v"} value */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int w = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (w < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)w < b->cap - b->n) {
            b->n += (size_t)w;
            return;
        }
        size_t nc = 2 * b->cap + (size_t)w;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
}

/* label values: backslash, double quote and newline escaped */
static void sb_label(sbuf *b, const char *v) {
    for (; *v; v++) {
        if (*v == '\\')
            sb_printf(b, "\\\\");
        else if (*v == '"')
            sb_printf(b, "\\\"");
        else if (*v == '\n')
            sb_printf(b, "\\n");
        else
            sb_printf(b, "%c", *v);
    }
}

static void sb_value(sbuf *b, double v) {
    if (isnan(v))
        sb_printf(b, "NaN\n");
    else if (isinf(v))
        sb_printf(b, v > 0 ? "+Inf\n" : "-Inf\n");
    else
        sb_printf(b, "%.17g\n", v);
}

/* The scalar values with the ages filled in at time now (locked). */
static void values_at(const al_metrics *m, double now, double v[AL_M_COUNT]) {
    memcpy(v, m->v, sizeof m->v);
    v[AL_M_CKPT_AGE] = now - (m->last_ckpt > 0 ? m->last_ckpt : m->started);
    v[AL_M_SINCE_COMMIT] = now - (m->last_commit > 0 ? m->last_commit : m->started);
    v[AL_M_NO_QUORUM] = strncmp(m->health, "no quorum", 9) == 0;
}

char *al_metrics_prometheus(al_metrics *m) {
    sbuf b = {malloc(8192), 0, 8192, 0};
    if (!b.p) return NULL;
    b.p[0] = '\0';
    pthread_mutex_lock(&m->lock);
    double now = wall_now(), v[AL_M_COUNT];
    values_at(m, now, v);
    for (int i = 0; i < AL_M_COUNT; i++) {
        sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n%s{site=\"", DEFS[i].name, DEFS[i].help,
                  DEFS[i].name, DEFS[i].type, DEFS[i].name);
        sb_label(&b, m->site);
        sb_printf(&b, "\"} ");
        sb_value(&b, v[i]);
    }
    /* per peer: one table, one loop; age: the value is now minus the stored
     * unix time (minus the start for a peer never seen) */
    static const struct {
        const char *name, *type, *help;
        size_t off;
        int age;
    } PEER[] = {
        {"autoloco_peer_sent_bytes_total", "counter", "bytes sent to each peer",
         offsetof(al_metrics, peer_sent), 0},
        {"autoloco_peer_received_bytes_total", "counter", "bytes received from each peer",
         offsetof(al_metrics, peer_recv), 0},
        {"autoloco_peer_up", "gauge",
         "1 if the peer was a member of the last committed round, 0 if it was left out",
         offsetof(al_metrics, peer_up), 0},
        {"autoloco_peer_last_seen_timestamp_seconds", "gauge",
         "unix time of the last round the peer committed with this site (0: never)",
         offsetof(al_metrics, peer_seen), 0},
        {"autoloco_peer_last_seen_age_seconds", "gauge",
         "seconds since the peer last committed a round with this site (since this site started "
         "if never)",
         offsetof(al_metrics, peer_seen), 1},
    };
    for (size_t d = 0; d < AL_ARRAY_LEN(PEER); d++) {
        const double *x = (const double *)((const char *)m + PEER[d].off);
        sb_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", PEER[d].name, PEER[d].help, PEER[d].name,
                  PEER[d].type);
        for (int k = 0; k < m->npeers; k++) {
            if (isnan(x[k])) continue; /* not known yet */
            sb_printf(&b, "%s{site=\"", PEER[d].name);
            sb_label(&b, m->site);
            sb_printf(&b, "\",peer=\"");
            sb_label(&b, m->peer[k]);
            sb_printf(&b, "\"} ");
            sb_value(&b, PEER[d].age ? now - (x[k] > 0 ? x[k] : m->started) : x[k]);
        }
    }
    const char *ev = "autoloco_events_total";
    sb_printf(&b,
              "# HELP %s membership and checkpoint events (drop, join, rejoin, checkpoint)\n"
              "# TYPE %s counter\n",
              ev, ev);
    for (int j = 0; j < m->nkinds; j++) {
        sb_printf(&b, "%s{site=\"", ev);
        sb_label(&b, m->site);
        sb_printf(&b, "\",kind=\"");
        sb_label(&b, m->event_kind[j]);
        sb_printf(&b, "\"} ");
        sb_value(&b, m->event_count[j]);
    }
    const char *h = "autoloco_round_duration_seconds";
    sb_printf(&b, "# HELP %s wall-clock duration of an outer round\n# TYPE %s histogram\n", h, h);
    for (int i = 0; i < AL_METRICS_BUCKETS; i++) {
        sb_printf(&b, "%s_bucket{site=\"", h);
        sb_label(&b, m->site);
        sb_printf(&b, "\",le=\"%g\"} ", BUCKETS[i]);
        sb_value(&b, m->bucket[i]);
    }
    sb_printf(&b, "%s_bucket{site=\"", h);
    sb_label(&b, m->site);
    sb_printf(&b, "\",le=\"+Inf\"} ");
    sb_value(&b, m->dur_count);
    sb_printf(&b, "%s_sum{site=\"", h);
    sb_label(&b, m->site);
    sb_printf(&b, "\"} ");
    sb_value(&b, m->dur_sum);
    sb_printf(&b, "%s_count{site=\"", h);
    sb_label(&b, m->site);
    sb_printf(&b, "\"} ");
    sb_value(&b, m->dur_count);
    pthread_mutex_unlock(&m->lock);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* ---- JSON ------------------------------------------------------------------------- */

static json_t *num_or_null(double v) {
    return isfinite(v) ? json_real(v) : json_null();
}

/* A round's agreement: {"agree": equal sites, "differ": differing sites,
 * "configured": N, "sites_equal": [...], "sites_differ": [...]} (names when
 * the configured sites are known). Locked (or m NULL: no names). */
static json_t *agree_json(const al_metrics *m, const al_round_record *r) {
    json_t *o = json_object(), *eq = json_array(), *df = json_array();
    int ne = 0, nd = 0;
    for (int i = 0; i < 64; i++) {
        uint64_t bit = (uint64_t)1 << i;
        ne += (r->equal & bit) != 0;
        nd += (r->differ & bit) != 0;
        if (m && i < m->nsites && (r->equal & bit))
            json_array_append_new(eq, json_string(m->site_name[i]));
        if (m && i < m->nsites && (r->differ & bit))
            json_array_append_new(df, json_string(m->site_name[i]));
    }
    json_object_set_new(o, "agree", json_integer(ne));
    json_object_set_new(o, "differ", json_integer(nd));
    json_object_set_new(o, "configured", json_integer(r->configured));
    json_object_set_new(o, "sites_equal", eq);
    json_object_set_new(o, "sites_differ", df);
    return o;
}

static json_t *record_json(const al_metrics *m, const char *site, const al_round_record *r) {
    json_t *losses = json_object();
    for (int i = 0; i < r->nsites; i++)
        json_object_set_new(losses, r->sites[i], num_or_null(r->site_loss[i]));
    json_t *o =
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:i, s:f}", "event", "round", "site", site,
                  "round", (json_int_t)r->round, "step", (json_int_t)r->step, "h", (json_int_t)r->h,
                  "h_next", (json_int_t)r->h_next, "members", r->members, "t", r->t);
    json_object_set_new(o, "train_loss", num_or_null(r->train_loss));
    json_object_set_new(o, "eval_loss", num_or_null(r->eval_loss));
    json_object_set_new(o, "losses", losses);
    if (r->theta[0]) json_object_set_new(o, "theta", json_string(r->theta));
    if (r->configured > 0) {
        json_t *ag = agree_json(m, r);
        json_object_update(o, ag);
        json_decref(ag);
    }
    const struct {
        const char *k;
        double v;
    } nums[] = {{"bytes_sent", r->bytes_sent},
                {"bytes_recv", r->bytes_recv},
                {"bytes_raw", r->bytes_raw},
                {"bytes_diloco", r->bytes_diloco},
                {"bytes_ddp", r->bytes_ddp},
                {"syncs_diloco", r->syncs_diloco},
                {"compute_s", r->compute_s},
                {"comm_s", r->comm_s},
                {"wait_s", r->wait_s},
                {"hidden_s", r->hidden_s},
                {"policy_comm_s", r->policy_comm_s},
                {"policy_compute_s", r->policy_compute_s},
                {"comm_floor", r->comm_floor},
                {"outer_lr_scale", r->outer_lr_scale},
                {"outer_mu", r->outer_mu}};
    for (size_t i = 0; i < AL_ARRAY_LEN(nums); i++)
        json_object_set_new(o, nums[i].k, num_or_null(nums[i].v));
    return o;
}

char *al_round_record_json(const char *site, const al_round_record *r) {
    json_t *o = record_json(NULL, site, r);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

static double pct_of(double part, double whole) {
    return whole > 0 ? 100.0 * part / whole : 0.0;
}

void al_savings_of(const double v[AL_M_COUNT], al_savings *s) {
    double sent = v[AL_M_BYTES_SENT], raw = v[AL_M_BYTES_RAW], diloco = v[AL_M_BYTES_DILOCO];
    s->syncs_avoided = v[AL_M_SYNCS_DILOCO] - v[AL_M_SYNCS];
    double per_sync = v[AL_M_SYNCS_DILOCO] > 0 ? diloco / v[AL_M_SYNCS_DILOCO] : 0;
    s->policy_bytes = s->syncs_avoided * per_sync;
    s->policy_pct = pct_of(s->syncs_avoided, v[AL_M_SYNCS_DILOCO]);
    s->other_bytes = diloco - raw - s->policy_bytes;
    s->codec_bytes = raw - sent;
    s->codec_pct = pct_of(s->codec_bytes, raw);
    s->total_bytes = diloco - sent;
    s->total_pct = pct_of(s->total_bytes, diloco);
    s->ddp_bytes = v[AL_M_BYTES_DDP] - sent;
    s->ddp_pct = pct_of(s->ddp_bytes, v[AL_M_BYTES_DDP]);
}

/* The health line: the round protocol's warning, then every peer that is
 * down (its heartbeats stopped) or was left out of the last round while
 * answering, e.g. "no quorum: 1 of 3 sites reachable; b down, last round with
 * us 41 s ago; c down, never seen". Locked. */
static void health_text(const al_metrics *m, double now, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "%s", m->health);
    for (int k = 0; k < m->npeers && n < cap; k++) {
        const char *sep = n ? "; " : "";
        if (m->peer_reach[k] == 0) {
            if (m->peer_seen[k] > 0)
                n += (size_t)snprintf(buf + n, cap - n, "%s%s down, last round with us %.0f s ago",
                                      sep, m->peer[k], now - m->peer_seen[k]);
            else
                n += (size_t)snprintf(buf + n, cap - n, "%s%s down, never seen", sep, m->peer[k]);
        } else if (m->peer_up[k] == 0) {
            n += (size_t)snprintf(buf + n, cap - n, "%s%s left out of the last round", sep,
                                  m->peer[k]);
        }
    }
}

void al_metrics_set_health(al_metrics *m, const char *text) {
    pthread_mutex_lock(&m->lock);
    snprintf(m->health, sizeof m->health, "%s", text ? text : "");
    pthread_mutex_unlock(&m->lock);
}

char *al_metrics_status_json(al_metrics *m) {
    pthread_mutex_lock(&m->lock);
    double now = wall_now(), v[AL_M_COUNT];
    values_at(m, now, v);
    json_t *o =
        json_pack("{s:s, s:f, s:I, s:I, s:I, s:I}", "site", m->site, "uptime_s", now - m->started,
                  "syncs", (json_int_t)v[AL_M_SYNCS], "step", (json_int_t)v[AL_M_INNER_STEPS], "h",
                  (json_int_t)v[AL_M_INTERVAL], "members", (json_int_t)v[AL_M_MEMBERS]);
    json_object_set_new(o, "round", json_integer(m->nrounds ? m->rounds[m->nrounds - 1].round : 0));
    char health[1024];
    health_text(m, now, health, sizeof health);
    json_object_set_new(o, "health", json_string(health));
    json_object_set_new(o, "configured", json_integer(m->nsites));
    json_t *names = json_array();
    for (int i = 0; i < m->nsites; i++) json_array_append_new(names, json_string(m->site_name[i]));
    json_object_set_new(o, "sites", names);
    al_savings sv;
    al_savings_of(v, &sv);
    json_object_set_new(o, "train_loss", num_or_null(v[AL_M_TRAIN_LOSS]));
    json_object_set_new(o, "eval_loss", num_or_null(v[AL_M_EVAL_LOSS]));
    const struct {
        const char *k;
        double x;
    } nums[] = {
        {"tokens", v[AL_M_TOKENS]},
        {"bytes_sent", v[AL_M_BYTES_SENT]},
        {"bytes_recv", v[AL_M_BYTES_RECV]},
        {"bytes_raw", v[AL_M_BYTES_RAW]},
        {"bytes_diloco", v[AL_M_BYTES_DILOCO]},
        {"bytes_ddp", v[AL_M_BYTES_DDP]},
        /* the saving against DiLoCo in its parts (al_savings_of): the
         * policy's syncs avoided, the codec's bytes, both together */
        {"syncs_diloco", v[AL_M_SYNCS_DILOCO]},
        {"syncs_avoided", sv.syncs_avoided},
        {"saved_by_syncs_bytes", sv.policy_bytes},
        {"saved_by_syncs_pct", sv.policy_pct},
        {"saved_by_codec_bytes", sv.codec_bytes},
        {"saved_by_codec_pct", sv.codec_pct},
        {"saved_other_bytes", sv.other_bytes},
        {"saved_vs_diloco_bytes", sv.total_bytes},
        {"savings_vs_diloco_pct", sv.total_pct},
        {"saved_vs_ddp_bytes", sv.ddp_bytes},
        {"savings_vs_ddp_pct", sv.ddp_pct},
        {"compression_ratio", v[AL_M_BYTES_SENT] > 0 ? v[AL_M_BYTES_RAW] / v[AL_M_BYTES_SENT] : 0},
        {"compute_s", v[AL_M_COMPUTE_S]},
        {"comm_s", v[AL_M_COMM_S]},
        {"wait_s", v[AL_M_WAIT_S]},
        {"comm_hidden_s", v[AL_M_COMM_HIDDEN_S]},
        {"comm_hidden_pct",
         v[AL_M_COMM_S] > 0 ? 100.0 * v[AL_M_COMM_HIDDEN_S] / v[AL_M_COMM_S] : 0},
        {"outer_lr_scale", v[AL_M_OUTER_LR_SCALE]},
        {"outer_mu", v[AL_M_OUTER_MU]},
        {"checkpoint_age_s", v[AL_M_CKPT_AGE]},
        {"since_commit_s", v[AL_M_SINCE_COMMIT]},
    };
    for (size_t i = 0; i < AL_ARRAY_LEN(nums); i++)
        json_object_set_new(o, nums[i].k, num_or_null(nums[i].x));
    json_t *peers = json_array();
    for (int k = 0; k < m->npeers; k++)
        json_array_append_new(
            peers,
            json_pack("{s:s, s:f, s:f, s:f, s:o, s:o, s:o}", "peer", m->peer[k], "sent",
                      m->peer_sent[k], "recv", m->peer_recv[k], "throughput_Bps",
                      m->peer_busy_s[k] > 0 ? m->peer_sent[k] / m->peer_busy_s[k] : 0.0, "up",
                      isnan(m->peer_up[k]) ? json_null() : json_boolean(m->peer_up[k]), "down",
                      isnan(m->peer_reach[k]) ? json_null() : json_boolean(m->peer_reach[k] == 0),
                      "last_seen", m->peer_seen[k] > 0 ? json_real(m->peer_seen[k]) : json_null()));
    json_object_set_new(o, "peers", peers);
    json_t *events = json_array();
    for (int i = 0; i < m->nevents; i++)
        json_array_append_new(events, json_loads(m->events[i], 0, NULL));
    json_object_set_new(o, "events", events);
    pthread_mutex_unlock(&m->lock);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

char *al_metrics_rounds_json(al_metrics *m) {
    pthread_mutex_lock(&m->lock);
    json_t *rounds = json_array(), *events = json_array();
    for (size_t i = 0; i < m->nrounds; i++)
        json_array_append_new(rounds, record_json(m, m->site, &m->rounds[i]));
    for (int i = 0; i < m->nevents; i++)
        json_array_append_new(events, json_loads(m->events[i], 0, NULL));
    json_t *o = json_pack("{s:s, s:o, s:o}", "site", m->site, "rounds", rounds, "events", events);
    pthread_mutex_unlock(&m->lock);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}
