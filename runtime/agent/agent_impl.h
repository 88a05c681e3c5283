/* agent_impl.h -- the agent's private state (struct agent), shared by its
 * parts, and the small static inline helpers they share. It declares no
 * function: each part exports its own in agent_X.h beside agent_X.c, and a
 * part includes the headers of the parts below it only.
 *
 * The parts, lowest first (tests/test_layers.py checks the order from the
 * includes and from the library's symbols): a driver feeding the round
 * machine and carrying out its actions, over services that never call back
 * up (they post events: statuses, statistics and shards under a->mu, read by
 * the driver):
 *   0  agent_hash.c     θ's hashes in the machine's form, the snapshot's seal
 *      agent_events.c   the event log and membership events
 *   1  agent_stream.c   streaming's schedule of fragments
 *   2  agent_net.c      server hooks, the Δ exchange, state pulls, the handshake
 *      agent_ckpt.c     checkpoints (the trainer's, outer.bin, agent.json)
 *      agent_hard.c     the protocol's hard state: votes, candidates, commits
 *      agent_train.c    the interval's training, inline or on its own thread
 *   3  agent_hb.c       heartbeats and failure detection
 *   4  agent_machine.c  the driver's side of the round machine
 *   5  agent_round.c    the driver: the round protocol's Ready loop
 *   6  agent.c          set-up and the run
 * The state machine (runtime/round) knows none of them. Not a public
 * header. */
#ifndef AL_AGENT_IMPL_H
#define AL_AGENT_IMPL_H

#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "al_agent.h"
#include "al_codec.h"
#include "al_round.h"
#include "al_monitor.h"
#include "al_odc.h"
#include "al_outer.h"
#include "al_policy.h"
#include "al_transport.h"

#define AG_MAX_SITES 16
/* A shard names its attempt: ShardChunk.epoch carries the round's epoch (the
 * attempt, al_round.h) above 16 bits and the attempt's members (bit i = site
 * i) below; shard_id is k, the owner's index among the members. So attempts
 * with other members or another epoch never collide in the transport's table
 * of transfers, and a receiver sees at once that a peer is in another one. */
static inline uint64_t ag_attempt_tag(uint64_t epoch, uint32_t members) {
    return epoch << 16 | (members & 0xffffu);
}
static inline uint64_t ag_tag_epoch(uint64_t tag) {
    return tag >> 16;
}
static inline uint32_t ag_tag_members(uint64_t tag) {
    return (uint32_t)(tag & 0xffffu);
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

/* s += x: a span's statistics into a longer stretch's (lr_last: the latest span's). */
static inline void ag_interval_add(ag_interval *s, const ag_interval *x) {
    s->steps += x->steps;
    s->loss_sum += x->loss_sum;
    s->gnorm_sum += x->gnorm_sum;
    s->lr_sum += x->lr_sum;
    s->lr_sq_sum += x->lr_sq_sum;
    if (x->steps) s->lr_last = x->lr_last;
    s->tokens += x->tokens;
    s->compute_s += x->compute_s;
}

/* [outer] overlap = streaming (agent_stream.c; docs/outer.md, "Streaming"):
 * θ in F fragments, protocol round k exchanging fragment k mod F after a span
 * of H/F inner steps; outer round r = k / F. Everything here but the span's
 * Δ is committed state: it changes only when a round commits, so a round
 * trained again (or resumed) computes the same S and statistics. */
typedef struct ag_stream {
    int F;           /* fragments (0: not streaming) */
    int sync;        /* [outer] overlap_steps = sync: τ is the whole next span (else H/(2F)) */
    long sr_step;    /* the inner step at which this outer round began */
    double lr_cum;   /* Σ η of the committed spans */
    double *lr_at;   /* [F] lr_cum at each fragment's last commit */
    long *step_at;   /* [F] the inner step of each fragment's last commit */
    double *fsq;     /* [F] this site's ‖Δ_p‖² at each fragment's last commit */
    ag_interval sum; /* this outer round's committed spans (the statistics' running sums) */
    double comm_prev, comm_cur; /* exchange seconds of the last outer round, and of this one */
    /* the round in progress (do_train -> do_propose -> do_apply) */
    double S;   /* S_p: Σ η (or steps) since fragment p's last commit */
    double dsq; /* ‖Δ_p‖² */
    /* the span training now (or pending): the merge it makes after `cut` of
     * its steps, once round pend_round (which exchanged fragment pend_p) has
     * committed: merged_round >= pend_round (under mu) */
    int pend_p; /* -1: none */
    long pend_round, pend_cut;
    long merged_round; /* the last committed protocol round (under mu) */
} ag_stream;

/* An immutable copy of the committed state, served to joining sites. Kept
 * alive for a few commits so a reply in flight never reads freed memory. */
typedef struct ag_snapshot {
    uint8_t *outer; /* al_outer_serialize */
    uint64_t outer_len;
    char *meta; /* JSON: round, step, h, policy state */
    uint64_t meta_len;
    long round; /* the round in meta: the next one this site trains */
    int sealed; /* outer's trailer written (ag_snapshot_seal, under mu) */
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
    pthread_mutex_t ev_mu; /* whole lines into the event log from any thread */
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
    int live[AG_MAX_SITES]; /* members of the last committed round */
    /* the round protocol (al_round.h), driven by agent_round.c */
    al_round rm;
    /* its actions, taken after every event (ag_feed) and carried out in order
     * by the driver (ag_next_action); aq_rc: the machine's queue overflowed,
     * or this one could not grow (aq_err says which): fatal */
    al_round_action *aq;
    int aq_head, aq_n, aq_cap, aq_rc;
    al_err aq_err;
    al_quorum quorum;                 /* [round] quorum */
    const char *name_p[AG_MAX_SITES]; /* the names, for the machine's log lines */
    int resumed;                      /* started with --resume: the persisted vote counts */
    al_hard hard;                     /* the hard state as on disk (agent_hard.c) */
    double hard_s, hard_bytes;        /* time in its writes (fsyncs included) and bytes */
    long hard_writes;                 /* files written or renamed into place */
    int finished;                     /* the last commit is done (budget or signal): linger */
    double linger_until;              /* ... until the peers saw it, at most this long */
    al_outer cand;                    /* the candidate outer state beside a->outer */
    int have_cand;                    /* cand holds the candidate of (cand_round, cand_epoch) */
    al_commit_decision cand_d;        /* its decision */
    al_round_hash cand_h;             /* its θ's hash (computed once, in do_propose) */
    al_round_hash outer_h;            /* θ_global's hash (ag_outer_hash), valid while */
    int outer_h_ok;                   /* outer_h_ok: cleared wherever θ_global changes */
    /* while outer_h_ok: the digests of θ_global's chunks (al_theta_hash_part)
     * and its checksum; the candidate's beside them (do_propose), swapped in
     * by do_apply. A streaming candidate differs from θ_global in its fragment
     * only: it rehashes that fragment's chunks, not all of θ */
    uint8_t *outer_dig, *cand_dig;
    uint64_t outer_sum, cand_sum;
    char pol_before[2048];      /* the policy's state before the candidate's decision */
    int cand_mem[AG_MAX_SITES]; /* its members (site ids, increasing) and statistics */
    al_site_stats cand_st[AG_MAX_SITES];
    int cand_M;
    al_site_stats mine;                       /* this site's statistics for round mine_round */
    long mine_round;                          /* -1: none */
    long step0;                               /* a->step when this round's interval began */
    double t_round0, t_train_end, t_comm_end; /* this round's clock: start, interval, exchange */
    double t0;                                /* al_now() at the start: the debug trace's clock */
    double t_first_train, t_last_commit;      /* the run's training wall time (summary.json) */
    int shook[AG_MAX_SITES];                  /* handshake (config check) done with the peer */
    long fed_round[AG_MAX_SITES];             /* statistics fed to the machine: (round, epoch) */
    uint64_t fed_epoch[AG_MAX_SITES];
    long misfit_round[AG_MAX_SITES]; /* statistics that did not fit were logged for it */
    struct {
        long round;         /* its mean shard broke the claim check in this round (-1: none):
                             * its statistics are not fed again ... */
        uint64_t inc;       /* ... while its incarnation is this one (0: unknown, that round
                             * only); a restart is a new chance */
        uint64_t cleared;   /* the incarnation that chance was given to: a peer's older
                             * exclusion of it is not followed */
    } liar[AG_MAX_SITES];   /* sites left out as liars (agent_machine.c, ag_mark_liar) */
    char fault_liar_to[72]; /* AL_FAULT=liar:V:SITE: only the mean shard sent to SITE lies */
    double fed_heard[AG_MAX_SITES]; /* hb_seen value last fed as a status */
    al_outer pulled;                /* a state pulled (AL_ACT_SYNC), adopted by AL_ACT_ADOPT */
    int have_pulled;
    long pulled_round, pulled_step, pulled_h;
    int pulled_from;
    char pulled_policy[2048];
    json_t *pulled_stream; /* (streaming) its fragments' schedule (ag_stream_json) */
    char health[96];       /* the machine's "no quorum: ..." as last reported */
    /* the driver's wait (log_wait, agent_round.c): the machine in (round,
     * epoch) since wait_since, last logged at wait_logged, looked at wait_seen */
    long wait_round;
    uint64_t wait_epoch;
    int wait_fin;
    double wait_since, wait_logged, wait_seen;
    /* the inbox and outbox of the heartbeats (agent_hb.c), under mu */
    al_peer_status pst[AG_MAX_SITES]; /* a peer's latest status */
    int pst_new[AG_MAX_SITES];        /* ... not yet fed to the machine */
    al_peer_status my_status;         /* ours, sent with every heartbeat */
    al_site_stats out_stats;          /* statistics to send for (out_round, out_epoch) */
    long out_round;
    uint64_t out_epoch;
    uint32_t stats_to;           /* peers still to be sent them (bit i) */
    uint32_t stats_took;         /* peers that took them (not sent again) */
    int hb_kick;                 /* send now */
    char refused[400];           /* a peer refused our identity (fatal): why */
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
    long cur_round;                        /* the round slots of parity r&1 are for */
    long cur_step;                         /* inner steps done when cur_round began */
    int exchanging;                        /* members of cur_round are settled */
    ag_slot reduce[2][AG_MAX_SITES];       /* [round&1][sender]: its part of my shard */
    ag_slot gather[2][AG_MAX_SITES];       /* [round&1][sender]: the mean shard its owner sent */
    al_site_stats stats[2][AG_MAX_SITES];  /* [round&1][site] */
    int have_stats[2][AG_MAX_SITES];       /* round + 1 of stats[][], 0: none */
    uint64_t stats_epoch[2][AG_MAX_SITES]; /* ... and its attempt (epoch) */
    ag_snapshot *snap;                     /* the newest published state (NULL before the first) */
    /* the carry (agent_carry.c): the candidate of this site's latest hash
     * vote as peers fetch it (under mu; freed as snap is), its hash and round */
    ag_snapshot *cand_snap;
    al_round_hash cand_snap_h;
    /* a candidate fetched (AL_ACT_FETCH into a->pulled) and its decision,
     * held by AL_ACT_HOLD */
    int have_fetched;
    al_round_hash fetched_h;
    long fetched_round, fetched_h_next;
    uint32_t fetched_members;
    char fetched_policy[2048];
    /* --resume with overlap: the candidate voted for is held without the
     * interval it came from (not replayed): its apply is taken as a pull */
    int cand_noiv;
    ag_interval iv; /* the interval in progress (saved in checkpoints) */
    long iv_h;      /* the H that interval ran with */
    /* [outer] overlap = delayed (agent_train.c): interval r + 1 trains on a
     * thread of its own while the driver exchanges and votes round r. While
     * bg_running the thread owns θ_local, the trainer (or the workers) and
     * bg_iv; the driver touches none of them until ag_bg_join. */
    al_overlap overlap;  /* AL_OVERLAP_NONE (0), _DELAYED or _DELAYED_MID */
    float *from;         /* P floats: where the interval being trained (or pending) started */
    float *blend;        /* P floats (delayed-mid): the eager step's Δ̂ */
    float *iv_from;      /* P floats: where the last merged interval started ... */
    float *iv_end;       /* ... and ended (before the merge): ag_bg_settle's rewind */
    al_outer eager;      /* scratch for the eager start (al_commit_eager) */
    pthread_t bg_thread; /* trains interval bg_round; one for the run (bg_alive) */
    int bg_alive;        /* the thread exists; bg_quit (under mu) ends it */
    int bg_go, bg_quit;  /* (under mu) train the interval set up / end */
    int bg_running;      /* started and not joined */
    int bg_pending;      /* θ_local is interval bg_round's start, not trained yet: trained
                          * after the commit (a checkpoint or a stop came first) */
    int bg_trained;      /* a stop came while it trained: it ran to its end (joined), and
                          * θ_local is its end, `from` its start, iv its statistics, for
                          * round bg_round's exchange after a --resume (interval_start.bin) */
    long bg_round, bg_h; /* the interval's round and H */
    long bg_step;        /* its step counter (a->step when it started) */
    int bg_threads;      /* the driver's kernel threads (OpenMP's count is per thread) */
    ag_interval bg_iv;   /* its statistics */
    int bg_rc;           /* its result, and why */
    al_err bg_err;
    int bg_done;   /* finished (under mu), at bg_t_end */
    int bg_parked; /* (streaming) waiting for a commit to merge, since bg_t_end (under mu) */
    double bg_t_end;
    volatile int bg_cancel; /* stop after the current step (W = 1) */
    ag_stream sm;           /* overlap = streaming: the fragments' schedule */
    /* fault injection for tests (env AL_FAULT=interval:R or stats:R): die by
     * SIGKILL halfway through round R's interval, or right after sending
     * round R's statistics (in the middle of the sync) */
    long fault_interval, fault_stats;
    long fault_publish_ms;       /* AL_FAULT=publish:MS: sleep between a commit and its
                                  * snapshot's publication (widens that window for tests) */
    long fault_badstats;         /* AL_FAULT=badstats:R / badtokens:R: send round R's */
    long fault_badtokens;        /* statistics with one inner step too many / with
                                  * tokens 2^64-1 (a lying peer) */
    long fault_repush;           /* AL_FAULT=repush:R: after each taken push of round >= R's
                                  * statistics, push them again for the same (round, attempt)
                                  * with one inner step more and with tokens 2^64-1 */
    long fault_freeze;           /* AL_FAULT=freeze:R: SIGSTOP halfway through round R's interval
                                  * (a site that neither answers nor refuses) */
    int fault_badstate;          /* AL_FAULT=badstate: serve half of θ's state to joiners */
    double fault_poison;         /* AL_FAULT=poison:V: send V in every element of Δ */
    double fault_liar;           /* AL_FAULT=liar:V: the same, reporting its true |Δ| */
    long fault_corrupt;          /* AL_FAULT=corrupt:R: flip a bit of θ_global and of the
                                  * published copy halfway through round R's interval */
    long fault_corrupt_xchg;     /* AL_FAULT=corrupt:R:exchange: flip a bit of θ_global (not
                                  * of the published copy) as round R's exchange starts, in a
                                  * hash chunk outside the round's fragment (streaming) */
    long fault_nanmerge;         /* AL_FAULT=nanmerge:R (streaming): a NaN in the eager guess
                                  * the merge of round R's fragment starts from */
    long fault_holdvote;         /* AL_FAULT=holdvote:R: round R's first exchange over, hold
                                  * the vote until <checkpoint dir>/release exists, then count
                                  * the exchange as failed (a null vote): with a peer cut off
                                  * meanwhile, the votes split around an unseen one */
    long fault_hidevote;         /* AL_FAULT=hidevote:R: round R's first hash vote persisted,
                                  * the driver waits until <checkpoint dir>/release exists
                                  * (nothing shows the vote meanwhile) */
    volatile sig_atomic_t *stop; /* the driver's stop flag: the signal (SIGINT/SIGTERM/SIGHUP) */
    atomic_llong *stop_ms;       /* ... and when it came (CLOCK_MONOTONIC ms; ag_stop_age) */
    atomic_llong stop_from_ms;   /* overlap: a stop's heartbeat counts from here if later (the
                                  * end of the interval the driver joined after the signal) */
    int stop_told;               /* the driver logged the stop */
    int cut_ok;                  /* the driver's interval: a stop may cut it (do_train) */
    int iv_cut;                  /* the last ag_interval_run stopped early (a stop) */
    /* AL_FAULT=pause:MOMENT:R: SIGSTOP at MOMENT of round R (train, exchange,
     * vote, apply, ckpt, serve; ag_fault_pause; R = any: -2), for a test to SIGKILL every
     * site there, or to stop a site there (tests/test_signals.sh) */
    char fault_pause[16];
    long fault_pause_round;
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
    /* when a call of the peer's own last reached this site (not an answer to
     * ours): the sites it hears (al_round_status.hears, agent_members.c) */
    double call_seen[AG_MAX_SITES];
    uint32_t hears_fed;     /* the last AL_EV_HEARS fed (0: none yet) */
    int down[AG_MAX_SITES]; /* silent for peer_timeout_s: rounds stop waiting for it */
} agent;

/* 64 hex digits (al_outer_hash, the run hash) into 32 bytes; -1 if malformed. */
static inline int ag_hex32(const char *hx, uint8_t out[32]) {
    if (!hx || strlen(hx) != 64) return -1;
    for (int k = 0; k < 32; k++) {
        unsigned v = 0;
        if (sscanf(hx + 2 * k, "%2x", &v) != 1) return -1;
        out[k] = (uint8_t)v;
    }
    return 0;
}

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
    a->hb_seen[i] = a->call_seen[i] = al_now();
    a->down[i] = 0;
}
/* "SIGTERM" for the log lines of a stop. */
static inline const char *ag_sig_name(int sig) {
    return sig == SIGTERM  ? "SIGTERM"
           : sig == SIGINT ? "SIGINT"
           : sig == SIGHUP ? "SIGHUP"
                           : "signal";
}
/* A stop (a signal) came this many seconds ago; -1: none. Any thread. */
static inline double ag_stop_age(const agent *a) {
    if (!a->stop || !*a->stop) return -1;
    long long ms = a->stop_ms ? atomic_load(a->stop_ms) : 0;
    ms = AL_MAX(ms, atomic_load(&a->stop_from_ms));
    return ms > 0 ? AL_MAX(0.0, al_now() - 1e-3 * (double)ms) : 0.0;
}
/* A stop is due: the round in progress had its one heartbeat to commit since
 * the signal; whatever still waits (peers, a pull, an exchange) gives up and
 * the site saves its last committed state. Any thread. */
static inline int ag_stop_due(const agent *a) {
    double age = ag_stop_age(a);
    return age >= 0 && age >= a->cfg->round_heartbeat_s;
}
/* Is peer i down (no heartbeat answered for peer_timeout_s)? Under a->mu. */
static inline int ag_down(const agent *a, int i) {
    return a->down[i];
}

/* Test hook AL_FAULT=pause:MOMENT:R: at MOMENT of round R, say so and stop
 * (SIGSTOP) so that a test can kill every site there at the same instant. */
static inline void ag_fault_pause(agent *a, const char *moment, long round) {
    /* (pause:serve:any: a state served to a joiner, THETA part, in any round) */
    if ((round != a->fault_pause_round && a->fault_pause_round != -2) ||
        strcmp(moment, a->fault_pause) != 0)
        return;
    al_logf(&a->log, AL_LOG_INFO, "site %s: fault: paused at %s of round %ld", a->name[a->self],
            moment, round);
    fflush(NULL);
    raise(SIGSTOP);
}

/* θ_local: the trainer's parameters (W = 1) or the workers' shared ones. */
static inline float *ag_theta_local(agent *a) {
    return a->workers == 1 ? a->tr.model.params : a->odc.params;
}

#endif
