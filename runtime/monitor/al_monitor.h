/*
 * al_monitor.h -- what an agent shows (runtime/monitor/): the metrics
 * registry (metrics.c) and the read-only HTTP server with the dashboard page
 * (http.c, dashboard.html embedded at build time). Uses base/ only.
 */
#ifndef AL_MONITOR_H
#define AL_MONITOR_H

#include <pthread.h>
#include <stdint.h>

#include "al_base.h"

/*
 * Metrics -- what an agent measures, in one thread-safe registry that the
 * HTTP server reads: Prometheus text for /metrics, JSON for /api/v1/status and
 * /api/v1/rounds, and the same round records as JSONL lines for the event log
 * (which `autoloco report` turns into a static page).
 *
 * Scalar metrics are one X-macro table (name, type, help); per-peer byte
 * counters and the round-duration histogram are built in. Names carry their
 * unit (_bytes, _seconds, _total for counters) as Prometheus recommends.
 * Ages (autoloco_seconds_since_commit, autoloco_checkpoint_age_seconds,
 * autoloco_peer_last_seen_age_seconds) are computed when a page is rendered
 * from the stored unix times, so they keep growing while the site is stuck
 * (what an alert needs); unix times are named *_timestamp_seconds.
 */

/* X(id, name, type, help) */
#define AL_METRICS_TABLE(X)                                                                        \
    X(SYNCS, "autoloco_syncs_total", counter, "outer synchronisations completed")                  \
    X(SYNCS_DILOCO, "autoloco_diloco_equivalent_syncs_total", counter,                             \
      "synchronisations DiLoCo at H_base would have made for the same inner steps")                \
    X(INNER_STEPS, "autoloco_inner_steps_total", counter, "inner optimizer steps of this site")    \
    X(TOKENS, "autoloco_tokens_total", counter, "training tokens processed by this site")          \
    X(INTERVAL, "autoloco_interval_steps", gauge, "current sync interval H (inner steps)")         \
    X(TRAIN_LOSS, "autoloco_train_loss", gauge, "mean train loss of this site's last interval")    \
    X(EVAL_LOSS, "autoloco_eval_loss", gauge, "last validation loss (nats per token)")             \
    X(OUTER_LR_SCALE, "autoloco_outer_lr_scale", gauge, "step scale of the last outer update")     \
    X(OUTER_MU, "autoloco_outer_momentum_mu", gauge, "momentum decay mu_r of the last outer step") \
    X(COMPUTE_S, "autoloco_compute_seconds_total", counter, "seconds spent in inner training")     \
    X(COMM_S, "autoloco_communication_seconds_total", counter, "seconds spent exchanging shards")  \
    X(COMM_HIDDEN_S, "autoloco_communication_hidden_seconds_total", counter,                       \
      "seconds of communication that ran beside the next interval's training ([outer] overlap)")   \
    X(WAIT_S, "autoloco_wait_seconds_total", counter, "seconds spent waiting for peers")           \
    X(MEMBERS, "autoloco_members", gauge, "sites in the current membership")                       \
    X(CKPT_AGE, "autoloco_checkpoint_age_seconds", gauge,                                          \
      "seconds since the last checkpoint (since the start before the first; at render time)")      \
    X(SINCE_COMMIT, "autoloco_seconds_since_commit", gauge,                                        \
      "seconds since this site last committed a round (since the start before the first; at "      \
      "render time)")                                                                              \
    X(NO_QUORUM, "autoloco_no_quorum", gauge,                                                      \
      "1 while this site cannot reach a quorum of the configured sites (the health line), else 0") \
    X(BYTES_SENT, "autoloco_sent_bytes_total", counter, "bytes this site sent to peers")           \
    X(BYTES_RECV, "autoloco_received_bytes_total", counter, "bytes this site received")            \
    X(BYTES_RAW, "autoloco_uncompressed_bytes_total", counter,                                     \
      "fp32 bytes the sent shards stood for before encoding")                                      \
    X(BYTES_DILOCO, "autoloco_diloco_equivalent_bytes_total", counter,                             \
      "bytes DiLoCo at H_base would have sent for the same inner steps")                           \
    X(BYTES_DDP, "autoloco_ddp_equivalent_bytes_total", counter,                                   \
      "bytes DDP (fp32 gradient all-reduce every step) would have sent")

typedef enum {
#define AL_M_ENUM(id, name, type, help) AL_M_##id,
    AL_METRICS_TABLE(AL_M_ENUM)
#undef AL_M_ENUM
        AL_M_COUNT
} al_metric_id;

#define AL_METRICS_MAX_PEERS 64
#define AL_METRICS_BUCKETS   12
#define AL_METRICS_NAME      65 /* a site's name and its NUL (AL_SITE_MAX is 64) */

/* One closed round, as this site saw it. */
typedef struct al_round_record {
    long round, step; /* round index, inner step at its end */
    long h;           /* interval that just closed */
    long h_next;      /* the policy's decision */
    int members;
    double t;          /* unix seconds at commit */
    double train_loss; /* this site */
    double eval_loss;  /* NAN if not evaluated */
    int nsites;
    char sites[AL_METRICS_MAX_PEERS][32];
    double site_loss[AL_METRICS_MAX_PEERS]; /* every member's train loss */
    double bytes_sent, bytes_recv, bytes_raw, bytes_diloco, bytes_ddp; /* cumulative */
    double syncs_diloco;                                               /* cumulative */
    double compute_s, comm_s, wait_s;                                  /* this round */
    double hidden_s; /* of comm_s, what ran beside the next interval's training */
    /* what the policy's bandwidth floor saw (al_policy_comm_floor): the round's
     * statistics' exchange and compute seconds (max over members) and the floor */
    double policy_comm_s, policy_compute_s, comm_floor;
    double outer_lr_scale, outer_mu;
    char theta[65]; /* SHA-256 of θ_global after the commit ("" if unknown) */
    /* agreement on theta, by configured site id (bit i: al_metrics_sites'
     * names[i]): equal, sites seen holding it (this one, those that voted it
     * or started the next round from it); differ, sites seen starting the
     * next round from another θ. Kept up to date after the commit
     * (al_metrics_theta_seen): a vote that came after the quorum still counts */
    uint64_t equal, differ;
    int configured; /* configured sites (0: unknown, no agreement shown) */
} al_round_record;

typedef struct al_metrics {
    pthread_mutex_t lock;
    char site[AL_METRICS_NAME];
    double v[AL_M_COUNT];
    int npeers;
    char peer[AL_METRICS_MAX_PEERS][AL_METRICS_NAME];
    double peer_sent[AL_METRICS_MAX_PEERS], peer_recv[AL_METRICS_MAX_PEERS];
    double peer_busy_s[AL_METRICS_MAX_PEERS]; /* seconds spent sending to each peer */
    double peer_up[AL_METRICS_MAX_PEERS];     /* 1 member, 0 left out, NAN not known yet */
    double peer_seen[AL_METRICS_MAX_PEERS]; /* unix seconds of its last round with us (0: never) */
    /* unix seconds of the last committed round and the last checkpoint (0:
     * none yet): the ages in /metrics are computed from them when rendered */
    double last_commit, last_ckpt;
    char event_kind[8][16]; /* membership / checkpoint events so far, by kind */
    double event_count[8];
    int nkinds;
    double bucket[AL_METRICS_BUCKETS]; /* round durations: counts per bucket */
    double dur_sum, dur_count;
    al_round_record *rounds;
    size_t nrounds, cap;
    char events[64][160]; /* last membership / checkpoint events, JSON objects */
    int nevents;
    double started;
    char health[96]; /* the round protocol's warning ("no quorum: 1 of 3 sites reachable"), or "" */
    double peer_reach[AL_METRICS_MAX_PEERS]; /* heartbeats: 1 answered, 0 down, NAN not known */
    int nsites;                              /* configured sites (al_metrics_sites), 0: unknown */
    char site_name[AL_METRICS_MAX_PEERS][AL_METRICS_NAME];
} al_metrics;

int al_metrics_init(al_metrics *m, const char *site, al_err *err);
void al_metrics_free(al_metrics *m);
void al_metrics_set(al_metrics *m, al_metric_id id, double v);
void al_metrics_add(al_metrics *m, al_metric_id id, double dv);
/* Per-peer bytes (peer added on first use); busy_s: seconds the transfer took. */
void al_metrics_peer(al_metrics *m, const char *peer, double sent, double recv, double busy_s);
/* A peer's membership as this site sees it: up = 1 (in the round that just
 * committed; last seen now) or 0 (left out; last seen unchanged). */
void al_metrics_peer_up(al_metrics *m, const char *peer, int up);
/* A peer's heartbeats ([round] peer_timeout_s): reachable = 0 when it stopped
 * answering, 1 when it answers again. The health line names a peer that is down. */
void al_metrics_peer_reachable(al_metrics *m, const char *peer, int reachable);
/* The run's configured sites, this one among them, by site id (0..n-1, at
 * most 64): the agreement of each round and the health line name them, and
 * the peers enter the peer table before their first contact. */
int al_metrics_sites(al_metrics *m, const char *const *names, int n, al_err *err);
/* Site `site` (an id of al_metrics_sites) was seen holding `hash` (SHA-256,
 * 32 bytes) as θ_global after round `round`: definitive = 1, it started the
 * next round from it (what it committed); 0, it voted it in that round (a
 * vote for another hash may be a failed attempt's: it does not count). The
 * round's record (the newest with that index) counts the site equal or
 * differing. Returns the record's agreement as one JSON line for the event
 * log ({"event":"agree",...}, malloc'd) when it changed, else NULL. */
char *al_metrics_theta_seen(al_metrics *m, long round, int site, const unsigned char hash[32],
                            int definitive);
void al_metrics_round_duration(al_metrics *m, double seconds);
/* The round protocol's health line ("" = healthy): in the status JSON and the dashboard. */
void al_metrics_set_health(al_metrics *m, const char *text);
/* Append a round record (copied). */
int al_metrics_add_round(al_metrics *m, const al_round_record *r, al_err *err);
/* Membership or checkpoint event: kind "drop", "join", "rejoin",
 * "checkpoint", ...: kept (the newest 64) for /api/v1/status and /rounds,
 * counted per kind in /metrics (autoloco_events_total{kind}). Returns the
 * event as one JSON line (malloc'd; NULL if out of memory) for the event log. */
char *al_metrics_event(al_metrics *m, const char *kind, const char *site, long round, long step);

/* The saving against DiLoCo at H_base and DDP, from the counters, in its
 * parts. The policy's: DiLoCo's syncs minus ours, and the bytes that makes at
 * DiLoCo's fp32 bytes per sync; the codec's: the fp32 bytes our shards stood
 * for minus the bytes sent; the rest of the total (DiLoCo's fp32 bytes less
 * the policy's part, less our fp32 bytes): the exchange attempts that failed
 * and were sent again, and rounds whose member count moved the bytes per
 * sync (0 in a run without either). A part below zero is a cost, not a
 * saving (the policy synced more often than H_base; framing outweighed the
 * codec's compression; retried attempts): kept signed, and the page says
 * "more". Percentages are of DiLoCo's syncs (the policy's), of the fp32
 * bytes (the codec's), of DiLoCo's bytes (the total) and of DDP's bytes; 0
 * when there is nothing to compare with. */
typedef struct al_savings {
    double syncs_avoided;            /* DiLoCo's syncs minus ours */
    double policy_bytes, policy_pct; /* by the syncs avoided */
    double codec_bytes, codec_pct;   /* by the codec */
    double other_bytes;              /* retried attempts, membership changes */
    double total_bytes, total_pct;   /* all, against DiLoCo */
    double ddp_bytes, ddp_pct;       /* against DDP */
} al_savings;
void al_savings_of(const double v[AL_M_COUNT], al_savings *s);

/* Renderings, malloc'd and NUL-terminated (NULL if out of memory). */
char *al_metrics_prometheus(al_metrics *m);
char *al_metrics_status_json(al_metrics *m);
char *al_metrics_rounds_json(al_metrics *m);
/* One JSONL line (no newline) for a round record. */
char *al_round_record_json(const char *site, const al_round_record *r);

/*
 * HTTP -- the agent's read-only HTTP server (libmicrohttpd).
 *
 *   /                the dashboard page (self-contained, polls the API)
 *   /metrics         Prometheus text format
 *   /api/v1/status   JSON: totals, savings, peers
 *   /api/v1/rounds   JSON: every round record and membership event
 *
 * Anything else is 404; methods other than GET/HEAD are 405. The server runs
 * one polling thread with non-blocking I/O (epoll: an idle or slow connection
 * holds no thread), a per-connection memory limit (so a huge URL or header is
 * refused with an error status instead of growing memory), an idle timeout,
 * a deadline for each request head, and a connection limit beyond which a
 * new connection sheds the one that has waited longest for its request head
 * (so slow clients, even from the browser's own address, cannot keep the page
 * from loading: http.c says why). It only reads the metrics registry under
 * its lock, so training never waits on a client.
 */

typedef struct al_http al_http;

typedef struct al_http_cfg {
    const char *address;   /* IPv4 literal, default 127.0.0.1 */
    int port;              /* 0: pick a free port (see al_http_port) */
    int max_connections;   /* beyond it a new connection sheds the oldest still waiting for its
                            * request head; default 512 */
    int timeout_s;         /* idle connection timeout, default 10 */
    int max_per_client;    /* connections one address may hold; default: no limit of its own
                            * (behind a proxy, and for a local attacker, the browser shares
                            * the address) */
    double head_timeout_s; /* a request head must be complete this long after the connection
                            * opened or its last response went out, default 5 */
} al_http_cfg;

int al_http_start(al_http **out, const al_http_cfg *cfg, al_metrics *m, al_err *err);
int al_http_port(const al_http *h);

/* What the server did with its connections so far (tests, diagnostics). */
typedef struct al_http_count {
    int open;                     /* connections open now */
    unsigned long head_cut, shed; /* closed by the head deadline; shed at the limit */
} al_http_count;
void al_http_counts(al_http *h, al_http_count *c);
void al_http_stop(al_http *h);

/* The dashboard page (generated at build time from runtime/monitor/dashboard.html). */
extern const char al_dashboard_html[];
extern const unsigned long al_dashboard_html_len;

#endif
