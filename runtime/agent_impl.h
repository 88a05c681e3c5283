/* agent_impl.h -- the agent's private state, shared by agent.c (the driver)
 * and agent_net.c (the network side of a round). Not a public header. */
#ifndef AL_AGENT_IMPL_H
#define AL_AGENT_IMPL_H

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "al_agent.h"
#include "al_codec.h"
#include "al_commit.h"
#include "al_http.h"
#include "al_metrics.h"
#include "al_odc.h"
#include "al_outer.h"
#include "al_policy.h"
#include "al_transport.h"

#define AG_MAX_SITES 16
/* Shard ids name the membership too: shard k of M has id M(M-1)/2 + k, so a
 * redone exchange (fewer members) never collides with the first attempt in
 * the transport's table of transfers. Ids run below AG_SHARD_SPACE. */
#define AG_SHARD_SPACE (AG_MAX_SITES * (AG_MAX_SITES + 1) / 2)
static inline int ag_shard_code(int M, int k) {
    return M * (M - 1) / 2 + k;
}
static inline void ag_shard_decode(int code, int *M, int *k) {
    int m = 1;
    while ((m + 1) * m / 2 <= code) m++;
    *M = m;
    *k = code - m * (m - 1) / 2;
}

/* A received shard: the buffer the transport writes into, and its header. */
typedef struct ag_slot {
    uint8_t *buf;
    int state; /* 0 empty, 1 arriving, 2 complete */
    al_shard_meta meta;
} ag_slot;

/* What a site accumulates over its interval (and reports as statistics). */
typedef struct ag_interval {
    long steps;
    double loss_sum, gnorm_sum, lr_sum, lr_sq_sum, lr_last, compute_s;
    long tokens;
} ag_interval;

/* An immutable copy of the committed state, served to joining sites. Kept
 * alive for a few commits so a reply in flight never reads freed memory. */
typedef struct ag_snapshot {
    uint8_t *outer; /* al_outer_serialize */
    uint64_t outer_len;
    char *meta; /* JSON: round, step, h, policy state */
    uint64_t meta_len;
    long round; /* the round in meta: the next one this site trains */
    int refs;   /* replies streaming it (under mu); freed at 0 once superseded */
} ag_snapshot;

typedef struct agent {
    const al_config *cfg;
    al_log log;
    char hash[65];     /* config hash (whole file) */
    char run_hash[65]; /* what every site must share */
    /* sites: every configured site sorted by name; id = index */
    int nsites, self;
    char name[AG_MAX_SITES][AL_SITE_MAX + 1];
    char addr[AG_MAX_SITES][128];
    al_client *cli[AG_MAX_SITES];
    al_server *srv;
    al_metrics met;
    al_http *http;
    FILE *events;
    /* local training */
    al_model_config mc;
    al_train_opts o;
    al_tokens train, val;
    al_trainer tr; /* W = 1; with W > 1 it only evaluates and checkpoints */
    int workers;
    al_odc odc;
    al_workload wl;
    al_piece *pieces;
    int npieces;
    size_t P;
    /* the outer loop */
    al_outer outer;
    al_policy *pol;
    al_commit_codec cc; /* the codec and its encode buffer */
    long round, step, h;
    int live[AG_MAX_SITES];      /* members of the last committed round */
    int ever_live[AG_MAX_SITES]; /* ... of any round this process committed */
    double xchg_s; /* seconds the last reduce-scatter + all-gather took (0: none yet); sent
                    * as the next statistics' comm_s for the policies' bandwidth floor */
    long h_hist[4096];
    int nh;
    float *delta, *dbar, *part;
    double bytes_raw;
    double recv_base;             /* bytes received before a --resume (the servers count from 0) */
    double peer_tx[AG_MAX_SITES]; /* client bytes counted so far, per peer */
    double tx_retired;            /* bytes of clients replaced by fresh ones */
    double peer_rx[AG_MAX_SITES]; /* server bytes from each peer counted so far */
    int reconnect[AG_MAX_SITES];  /* a peer came back: replace its client */
    double h_base;
    int progress_lr; /* [outer] progress = lr */
    /* the exchange: written by server threads under mu, read by the driver */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long cur_round;                       /* the round slots of parity r&1 are for */
    long cur_step;                        /* inner steps done when cur_round began */
    int exchanging;                       /* members of cur_round are settled */
    ag_slot reduce[2][AG_MAX_SITES];      /* [round&1][sender]: its part of my shard */
    ag_slot gather[2][AG_MAX_SITES];      /* [round&1][sender]: the mean shard its owner sent */
    al_site_stats stats[2][AG_MAX_SITES]; /* [round&1][site] */
    int have_stats[2][AG_MAX_SITES];
    long joining[AG_MAX_SITES]; /* round a pulling site will join, or -1 */
    ag_snapshot *snap;          /* the newest published state (NULL before the first) */
    ag_interval iv;             /* the interval in progress (saved in checkpoints) */
    /* fault injection for tests (env AL_FAULT=interval:R or stats:R): die by
     * SIGKILL halfway through round R's interval, or right after sending
     * round R's statistics (in the middle of the sync) */
    long fault_interval, fault_stats;
    long fault_publish_ms;       /* AL_FAULT=publish:MS: sleep between a commit and its
                                  * snapshot's publication (widens that window for tests) */
    long fault_badstats;         /* AL_FAULT=badstats:R / badtokens:R: send round R's */
    long fault_badtokens;        /* statistics with one inner step too many / with
                                  * tokens 2^64-1 (a lying peer) */
    long fault_freeze;           /* AL_FAULT=freeze:R: SIGSTOP halfway through round R's interval
                                  * (a site that neither answers nor refuses) */
    int fault_badstate;          /* AL_FAULT=badstate: serve half of θ's state to joiners */
    double fault_poison;         /* AL_FAULT=poison:V: send V in every element of Δ */
    volatile sig_atomic_t *stop; /* the driver's stop flag (SIGINT/SIGTERM) */
    /* robust aggregation: members of the committed round whose Δ was left out
     * of the mean ([outer] max_delta_ratio) */
    int excluded[AG_MAX_SITES];
    /* failure detection (agent_hb.c): a thread pings every peer each
     * [round] heartbeat_s on clients of its own; under mu */
    al_client *hb_cli[AG_MAX_SITES];
    pthread_t hb_thread;
    int hb_running, hb_stop;
    pthread_cond_t hb_cv;
    double hb_seen[AG_MAX_SITES]; /* when the peer last answered (al_now) */
    int down[AG_MAX_SITES];       /* silent for peer_timeout_s: rounds stop waiting for it */
} agent;

/* agent_hb.c: heartbeats and failure detection. Start after ag_net_start. */
int ag_hb_start(agent *a, al_err *err);
void ag_hb_stop(agent *a);
/* The client settings every channel to peer i shares (who we are, whom we
 * mean, TLS); callers add deadlines, attempts and backoff. */
static inline al_client_cfg ag_client_cfg(const agent *a, int i) {
    const al_config *c = a->cfg;
    al_client_cfg cc = {.target = a->addr[i],
                        .site = a->name[a->self],
                        .peer = a->name[i],
                        .run_id = c->site_run_id,
                        .tls = {c->tls_ca, c->tls_cert, c->tls_key},
                        .insecure = (int)c->tls_insecure,
                        .log = NULL};
    return cc;
}
/* A configured site's index, or -1. */
static inline int ag_site_id(const agent *a, const char *name) {
    for (int i = 0; i < a->nsites; i++)
        if (!strcmp(a->name[i], name)) return i;
    return -1;
}
/* Peer i was heard from (a call of its arrived): it is up. Under a->mu. */
static inline void ag_heard(agent *a, int i) {
    if (i < 0 || i >= a->nsites) return;
    a->hb_seen[i] = al_now();
    a->down[i] = 0;
}
/* Is peer i down (no heartbeat answered for peer_timeout_s)? Under a->mu. */
static inline int ag_down(const agent *a, int i) {
    return a->down[i];
}

/* agent_net.c */
int ag_net_start(agent *a, al_err *err);
void ag_net_stop(agent *a);
/* Publish the committed state for joiners (copies it). */
int ag_publish_state(agent *a, al_err *err);
/* Handshake with every peer; a site behind the others pulls their state and
 * waits for the round in progress to commit. Sets a->live. */
int ag_join(agent *a, al_err *err);
/* The network part of round a->round: statistics, reduce-scatter,
 * all-gather. On return a->dbar holds Δ̄, members[] the sites that took part
 * and stats[] their statistics. */
int ag_exchange(agent *a, const al_site_stats *mine, int *members, al_site_stats *stats, int *m,
                al_err *err);
/* Our handshake: site, run, round, hashes, members. */
void ag_hello(agent *a, al_hello *h);
/* Start accepting round r (moves the receive window, frees old slots). */
void ag_set_round(agent *a, long r);
/* A membership event ("drop", "join", "rejoin"; "down", "up" from the
 * heartbeats) about `site`: into the
 * metrics (dashboard, /metrics, /api/v1/status) and the event log. */
void ag_event(agent *a, const char *kind, const char *site);
/* The same from another thread (the heartbeats'), at a round and step it read under mu. */
void ag_event_at(agent *a, const char *kind, const char *site, long round, long step);

#endif
