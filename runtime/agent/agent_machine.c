/* agent_machine.c -- the agent's side of the round state machine
 * (runtime/round/al_round.h): θ_global's hash in the machine's form, peer statuses
 * in and out, feeding events (with the AL_LOG=debug trace), the vote persisted
 * to <checkpoint dir>/vote.json, the machine's start, and the inbox of peer
 * statuses and statistics that become events. agent_round.c drives the
 * machine and carries out its actions. */
#include "agent_machine.h"
#include "agent_carry.h"
#include "agent_events.h"
#include "agent_members.h"
#include "agent_hard.h"
#include "agent_hash.h"
#include "agent_net.h"
#include "agent_train.h"

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- hashes and statuses -------------------------------------------------------------- */

static void status_in(const al_peer_status *p, al_round_status *st) {
    memset(st, 0, sizeof *st);
    st->round = (long)AL_MIN(p->round, (uint64_t)LONG_MAX);
    st->epoch = p->epoch;
    memcpy(st->base.b, p->base, 32);
    st->vote = (int)p->vote;
    if (p->vote == AL_VOTE_HASH) {
        memcpy(st->value.hash.b, p->vote_hash, 32);
        st->value.members = p->members;
        st->value.origin = p->vote_origin;
    }
    if (p->accepted) {
        st->accepted = 1;
        st->acc_epoch = p->acc_epoch;
        memcpy(st->acc_value.hash.b, p->acc_hash, 32);
        st->acc_value.members = p->acc_members;
        st->acc_value.origin = p->acc_origin;
    }
    st->inc = p->incarnation;
    st->hears = p->hears;
}

void ag_status_out(const al_round_status *st, al_peer_status *p) {
    memset(p, 0, sizeof *p);
    p->round = (uint64_t)AL_MAX(st->round, 0);
    p->epoch = st->epoch;
    p->have_base = 1;
    memcpy(p->base, st->base.b, 32);
    p->vote = (uint32_t)st->vote;
    if (st->vote == AL_VOTE_HASH) {
        memcpy(p->vote_hash, st->value.hash.b, 32);
        p->members = st->value.members;
        p->vote_origin = st->value.origin;
    }
    if (st->accepted) {
        p->accepted = 1;
        p->acc_epoch = st->acc_epoch;
        memcpy(p->acc_hash, st->acc_value.hash.b, 32);
        p->acc_members = st->acc_value.members;
        p->acc_origin = st->acc_value.origin;
    }
    p->incarnation = st->inc;
    p->hears = st->hears;
}

/* Feed one event, stamped now. With AL_LOG=debug, every event that changes
 * the machine's (round, epoch, phase, vote, members), and every peer status
 * that is news, is logged with the time since the start: the trace to read
 * when a round stalls. */
/* The actions one event caused, from the machine's queue (AL_ROUND_MAX_ACTIONS,
 * far more than one event emits) to the end of the agent's (a->aq, grown as
 * needed): fed several events before its actions were taken (the inbox's
 * statuses and statistics, then a tick), the machine's queue filled past about
 * 8 sites and lost actions. An overflow anyway, or no memory, is fatal. */
static void take_actions(agent *a) {
    if (a->aq_rc) return;
    if ((a->aq_rc = al_round_overflow(&a->rm, &a->aq_err))) return;
    int n = a->rm.nout;
    if (a->aq_n + n > a->aq_cap) {
        int cap = AL_MAX(2 * a->aq_cap, AL_MAX(a->aq_n + n, 64));
        al_round_action *q = realloc(a->aq, (size_t)cap * sizeof *q);
        if (!q) {
            a->aq_rc = al_errf(&a->aq_err, AL_ENOMEM, "round actions: out of memory (%d queued)",
                               a->aq_n - a->aq_head);
            return;
        }
        a->aq = q;
        a->aq_cap = cap;
    }
    a->aq_n += al_round_ready(&a->rm, a->aq + a->aq_n, n);
}

int ag_next_action(agent *a, al_round_action *act, al_err *err) {
    if (a->aq_rc) {
        *err = a->aq_err;
        return a->aq_rc;
    }
    if (a->aq_head == a->aq_n) return 0;
    *act = a->aq[a->aq_head++];
    if (a->aq_head == a->aq_n) a->aq_head = a->aq_n = 0; /* empty: from the start again */
    return 1;
}

void ag_feed(agent *a, al_round_event *ev) {
    ev->now = al_now();
    if (a->log.min > AL_LOG_DEBUG) { /* no trace: nothing to compare */
        al_round_step(&a->rm, ev);
        take_actions(a);
        return;
    }
    al_round_status b, s;
    al_round_status_get(&a->rm, &b);
    al_round_phase ph = a->rm.phase;
    al_round_step(&a->rm, ev);
    take_actions(a);
    al_round_status_get(&a->rm, &s);
    int peer_news = ev->type == AL_EV_STATUS && ev->peer >= 0;
    if (!peer_news && s.round == b.round && s.epoch == b.epoch && ph == a->rm.phase &&
        s.vote == b.vote)
        return;
    char who[32] = "";
    if (ev->peer >= 0 && ev->peer < a->nsites) snprintf(who, sizeof who, " %s", a->name[ev->peer]);
    char what[96] = "";
    if (peer_news)
        snprintf(what, sizeof what, " (r%ld e%llu vote %d%s)", ev->st.round,
                 (unsigned long long)ev->st.epoch, ev->st.vote,
                 a->rm.peer[ev->peer].alive ? "" : ", not alive");
    else if (ev->type != AL_EV_TICK)
        snprintf(what, sizeof what, " (r%ld e%llu)", ev->round, (unsigned long long)ev->epoch);
    al_logf(&a->log, AL_LOG_DEBUG,
            "site %s: t=%.3f %s%s%s: r%ld e%llu %s vote %d -> r%ld e%llu %s vote %d members %#x",
            a->name[a->self], ev->now - a->t0, al_round_event_name(ev->type), who, what, b.round,
            (unsigned long long)b.epoch, al_round_phase_name(ph), b.vote, s.round,
            (unsigned long long)s.epoch, al_round_phase_name(a->rm.phase), s.vote, a->rm.members);
}

/* ---- the hard state: votes, candidates, commits ---------------------------------------- */

/* AL_ACT_PERSIST_VOTE: the vote (or promise) into hard.json, and for a hash
 * vote the candidate it names into candidate.bin first (once per candidate),
 * with the decision that came with it: a quorum of voters is then a quorum of
 * durable copies of what they commit. */
int ag_vote_save(agent *a, const al_round_vote *v, al_err *err) {
    al_hard *h = &a->hard;
    int holds = al_hard_vote_holds(h, v, a->have_cand ? &a->cand_h : NULL);
    char pol[AL_HARD_POLICY] = "";
    int rc = 0;
    if (holds) { /* (the policy's state after the decision), kept for peers too */
        al_policy_save(a->pol, pol, sizeof pol);
        if ((rc = ag_carry_save(a, (long)a->cand_d.h_next, pol, err))) return rc;
    }
    al_hard_vote(h, v, holds, (long)a->cand_d.h_next, pol);
    rc = ag_hard_save(a, err);
    return rc ? al_err_prefix(err, "persisting the vote of round %ld", v->round) : 0;
}

/* An older agent's vote.json (before hard.json): its last vote, read once. */
static void vote_load_legacy(agent *a, al_round_vote *v) {
    char path[4200];
    snprintf(path, sizeof path, "%s/vote.json", a->cfg->checkpoint_dir);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    const char *run = NULL, *hx = NULL;
    json_int_t r = -1, e = 0, mem = 0;
    int vote = 0;
    if (j &&
        json_unpack(j, "{s:s, s:I, s:I, s:i, s:s, s:I}", "run", &run, "round", &r, "epoch", &e,
                    "vote", &vote, "hash", &hx, "members", &mem) == 0 &&
        !strcmp(run, a->run_hash) && r >= 0 && e >= 0 && vote >= AL_VOTE_NULL &&
        vote <= AL_VOTE_HASH && ag_hex32(hx, v->value.hash.b) == 0) {
        v->round = (long)r;
        v->epoch = (uint64_t)e;
        v->vote = vote;
        v->value.members = (uint32_t)mem;
    }
    json_decref(j);
}

/* θ_global := commit-<round>.bin, checked against the hash it was committed with. */
static int commit_load(agent *a, long round, const al_round_hash *want, al_err *err) {
    char p[4300];
    ag_hard_path(a, NULL, round, p, sizeof p);
    int rc = al_outer_load(&a->outer, p, &a->outer.cfg, err);
    if (rc) return rc;
    a->outer_h_ok = 0;
    al_round_hash got;
    ag_outer_hash(a, &got, 1);
    if (memcmp(got.b, want->b, 32) != 0) {
        char g[65], w[65];
        ag_hash_hex(&got, g);
        ag_hash_hex(want, w);
        return al_errf(err, AL_EINTEGRITY, "%s: theta %.16s, committed as %.16s", p, g, w);
    }
    return 0;
}

/* --resume: the checkpoint (round c) and the hard state (committed R) agree.
 * c < R: the site replays its own intervals c .. R-1, each from the θ_global
 * its round started from (the checkpoint's, then commit-<r>.bin), checking
 * every replayed step count and θ against the log: the trainer's state,
 * AdamW's moments and the data position end where the uninterrupted run's
 * were (bitwise: the run is deterministic). Where a file or log entry is
 * missing (a checkpoint older than the log, overlap, streaming) it takes
 * commit-<R>.bin as θ_global directly, as a pull would, and says so. Either
 * way no round below R is decided again. */
static int has_commit(void *ctx, long round) {
    char p[4300];
    ag_hard_path(ctx, NULL, round, p, sizeof p);
    return access(p, R_OK) == 0;
}

static int reconcile(agent *a, al_err *err) {
    al_hard *h = &a->hard;
    long c = a->round;
    al_hard_plan_kind plan =
        al_hard_plan(h, c, !a->overlap && !a->sm.F && a->iv.steps == 0, has_commit, a);
    if (plan == AL_HARD_AHEAD) /* a checkpoint is written after its commit is: not expected */
        al_logf(&a->log, AL_LOG_WARN,
                "site %s: the checkpoint (round %ld) is ahead of the hard state (round %ld): "
                "going on from the checkpoint",
                a->name[a->self], c, h->committed);
    if (plan == AL_HARD_AT || plan == AL_HARD_AHEAD) return 0;
    int replay = plan == AL_HARD_REPLAY;
    int rc = 0;
    if (replay) {
        al_logf(&a->log, AL_LOG_INFO,
                "site %s: the checkpoint is at round %ld, the hard state at round %ld: replaying "
                "this site's intervals of rounds %ld..%ld from the commit log",
                a->name[a->self], c, h->committed, c, h->committed - 1);
        for (long r = c; r < h->committed && rc == 0; r++) {
            const al_hard_entry *e = al_hard_entry_of(h, r);
            memset(&a->iv, 0, sizeof a->iv);
            rc = ag_interval_run(a, r, e->h, &a->iv, &a->step, err);
            if (rc == 0 && a->step != e->step)
                rc = al_errf(err, AL_EINTEGRITY,
                             "replaying round %ld: %ld inner steps, the log says %ld", r, a->step,
                             e->step);
            if (rc == 0) rc = commit_load(a, r + 1, &e->hash, err);
            if (rc == 0) {
                a->round = r + 1;
                if (a->nh < (int)AL_ARRAY_LEN(a->h_hist)) a->h_hist[a->nh++] = e->h;
                for (int k = 0; k < a->nsites; k++) a->live[k] = (int)(e->members >> k & 1);
                ag_local_from_global(a);
            }
        }
        memset(&a->iv, 0, sizeof a->iv); /* (round committed-1's interval: done) */
    } else {
        al_logf(&a->log, AL_LOG_WARN,
                "site %s: the checkpoint is at round %ld, the hard state at round %ld: taking "
                "the committed theta_global of round %ld from %s/commit-%08ld.bin (the inner "
                "optimizer's state stays the checkpoint's)",
                a->name[a->self], c, h->committed, h->committed, a->cfg->checkpoint_dir,
                h->committed);
        rc = commit_load(a, h->committed, &h->base, err);
        if (rc == 0) {
            a->round = h->committed;
            a->step = h->step;
            ag_bg_discard(a, 0);
            a->bg_pending = a->bg_trained = 0;
            memset(&a->iv, 0, sizeof a->iv);
            ag_local_from_global(a);
        }
    }
    if (rc == 0) {
        a->h = h->h;
        rc = al_policy_load(a->pol, h->policy, err);
    }
    if (rc) return al_err_prefix(err, "resuming at the hard state's round %ld", h->committed);
    al_logf(&a->log, AL_LOG_INFO, "site %s: at round %ld, step %ld, as last committed",
            a->name[a->self], a->round, a->step);
    return 0;
}

/* --resume with a vote of this round that named a candidate: the candidate
 * back (candidate.bin, checked against the hash voted for), with the decision
 * it came with, so that the machine can apply it when the votes show its
 * commit (rather than ask peers for a state none may have yet). */
static int restore_candidate(agent *a, al_round_start *st, al_err *err) {
    al_hard *h = &a->hard;
    if (st->held_round != a->round) return 0;
    /* with [outer] overlap the interval beside the round is not replayed: the
     * candidate is held (this site's status reports it, and peers may fetch
     * it) and an apply of it is taken as a pull (cand_noiv) */
    int replay = !a->overlap && !a->sm.F;
    char p[4300];
    ag_hard_path(a, "candidate.bin", -1, p, sizeof p);
    if (access(p, F_OK) != 0) { /* stopped between the apply's rename and hard.json */
        char c[4300];
        ag_hard_path(a, NULL, a->round + 1, c, sizeof c);
        if (access(c, R_OK) == 0) {
            al_logf(&a->log, AL_LOG_INFO,
                    "site %s: round %ld: no candidate.bin: the candidate voted for was renamed "
                    "to %s by the commit (checked below)",
                    a->name[a->self], a->round, c);
            snprintf(p, sizeof p, "%s", c);
        }
    }
    int rc = al_outer_load(&a->cand, p, &a->outer.cfg, err);
    if (rc) return al_err_prefix(err, "round %ld: the candidate voted for", a->round);
    ag_cand_hash(a, 0, a->P);
    if (memcmp(a->cand_h.b, h->held.hash.b, 32) != 0)
        return al_errf(err, AL_EINTEGRITY, "%s: not the candidate round %ld voted for", p,
                       a->round);
    al_policy_save(a->pol, a->pol_before, sizeof a->pol_before);
    if ((rc = al_policy_load(a->pol, h->held_policy, err))) return rc;
    memset(&a->cand_d, 0, sizeof a->cand_d);
    a->cand_d.h_next = h->held_h_next;
    a->cand_M = 0;
    for (int i = 0; i < a->nsites; i++)
        if (h->held.members >> i & 1) {
            a->cand_mem[a->cand_M] = i;
            memset(&a->cand_st[a->cand_M], 0, sizeof a->cand_st[0]);
            a->cand_st[a->cand_M++].site = i;
        }
    /* the interval the candidate came from, trained again (deterministic:
     * θ_local, AdamW and the data position end where they were at the vote),
     * so that an apply at once starts the next round where the uninterrupted
     * run did; a TRAIN asked first finds it done (iv holds its statistics) */
    if (replay && a->iv.steps < a->h &&
        (rc = ag_interval_run(a, a->round, a->h, &a->iv, &a->step, err)))
        return al_err_prefix(err, "round %ld: replaying the interval voted on", a->round);
    if ((rc = ag_carry_keep_file(a, p, err))) /* for peers that carry it */
        return al_err_prefix(err, "round %ld: the candidate voted for", a->round);
    a->iv_h = a->h;
    a->cand_noiv = !replay;
    a->have_cand = 1;
    al_logf(&a->log, AL_LOG_INFO, "site %s: round %ld: holding the candidate voted for (%s)",
            a->name[a->self], a->round, p);
    return 0;
}

/* This start of the site, shown in its statuses: the wall clock's microseconds
 * times 1024 plus the pid's low bits, so a restart's is greater (peers then take
 * its status even at an older round) and two starts in one microsecond differ. */
static uint64_t incarnation(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
    uint64_t v = us << 10 | ((uint64_t)getpid() & 1023u);
    return v ? v : 1; /* 0 means none */
}

int ag_machine_init(agent *a, al_err *err) {
    for (int i = 0; i < a->nsites; i++) {
        a->name_p[i] = a->name[i];
        a->fed_round[i] = a->misfit_round[i] = a->liar[i].round = -1;
    }
    al_round_cfg rc = {.nsites = a->nsites,
                       .self = a->self,
                       .quorum = a->quorum,
                       .min_sites = (int)AL_MIN(a->cfg->round_min_sites, a->nsites),
                       .heartbeat_s = a->cfg->round_heartbeat_s,
                       .peer_timeout_s = a->cfg->round_peer_timeout_s,
                       .deadline_s = a->cfg->round_deadline_s,
                       .names = a->name_p,
                       .carry = 1, /* (docs/ARCHITECTURE.md, "Carrying a value") */
                       .incarnation = incarnation()};
    al_logf(&a->log, AL_LOG_INFO, "site %s: incarnation %016llx", a->name[a->self],
            (unsigned long long)rc.incarnation);
    al_round_start st;
    int r = 0;
    if (a->resumed) { /* the hard state: a record that exists must be whole */
        r = ag_hard_load(a, err);
        if (r < 0) return r;
        if (r == 1) vote_load_legacy(a, &a->hard.vote);
        if ((r = reconcile(a, err))) return r;
    } else { /* a fresh start: a new record (the old one's votes are forgotten) */
        al_hard_clear(&a->hard, a->run_hash);
    }
    al_round_hash base;
    ag_outer_hash(a, &base, 1);
    al_hard_start(&a->hard, a->round, &base, &st);
    if (a->resumed && (r = restore_candidate(a, &st, err))) return r;
    if (a->hard.committed != a->round) { /* the start is a commit too (round 0, a checkpoint) */
        if ((r = ag_hard_commit(a, 0, 0, 0, err))) return r;
    }
    r = al_round_init(&a->rm, &rc, &st, al_now(), err);
    if (r) return r;
    al_round_status s;
    al_round_status_get(&a->rm, &s);
    pthread_mutex_lock(&a->mu);
    ag_status_out(&s, &a->my_status);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

/* ---- the inbox ------------------------------------------------------------------------ */

/* ---- liars: left out alike by every site ------------------------------------------------ */

uint32_t ag_liars(const agent *a) {
    uint32_t m = 0;
    for (int i = 0; i < a->nsites; i++)
        if (a->liar[i].round >= 0) m |= 1u << i;
    return m;
}

void ag_publish_liars(agent *a) {
    pthread_mutex_lock(&a->mu);
    a->my_status.excluded = ag_liars(a);
    a->hb_kick = 1;
    pthread_cond_broadcast(&a->hb_cv);
    pthread_mutex_unlock(&a->mu);
}

void ag_mark_liar(agent *a, int i, const char *why) {
    pthread_mutex_lock(&a->mu);
    uint64_t inc = a->pst[i].have_base ? a->pst[i].incarnation : 0;
    pthread_mutex_unlock(&a->mu);
    a->liar[i].round = a->round;
    a->liar[i].inc = inc;
    al_logf(&a->log, AL_LOG_WARN, "round %ld: leaving %s out of the round's next attempts%s (%s)",
            a->round, a->name[i], inc ? " and of every later round until it restarts" : "", why);
    /* the machine neither counts it as a member nor waits for it */
    al_round_event ex = {.type = AL_EV_EXCLUDE, .peer = i, .round = a->round};
    ag_feed(a, &ex);
    ag_publish_liars(a); /* peers whose exchange did not see the lie leave it out too */
}

/* A peer's status names the liars it leaves out: leave them out too, so the
 * members of the next attempt agree (a site whose exchange failed before the
 * lie reached it would keep the liar as a member, and every attempt would be
 * void). Not followed: a peer this site leaves out itself, an exclusion of
 * this site, and one of a site that restarted since this site gave it a new
 * chance (the peer has not yet seen the restart). */
static void follow_exclusions(agent *a, const al_peer_status *ps) {
    for (int j = 0; j < a->nsites; j++) {
        if (j == a->self || !ps[j].have_base || !ps[j].excluded || a->liar[j].round >= 0 ||
            !a->rm.peer[j].alive)
            continue;
        for (int x = 0; x < a->nsites; x++) {
            if (!(ps[j].excluded >> x & 1) || x == a->self || a->liar[x].round >= 0) continue;
            if (ps[x].have_base && ps[x].incarnation && ps[x].incarnation == a->liar[x].cleared)
                continue;
            char why[160];
            snprintf(why, sizeof why, "%s leaves it out as a liar", a->name[j]);
            ag_mark_liar(a, x, why);
        }
    }
}

/* Statuses and statistics that arrived since the last look become events.
 * A peer's first status waits for the configuration handshake (a peer of
 * another run configuration ends this agent with an error); statistics wait
 * for this site's own (they must fit them). */
int ag_feed_inbox(agent *a, al_err *err) {
    al_peer_status ps[AG_MAX_SITES];
    int fresh[AG_MAX_SITES], p = (int)(a->round & 1), have[AG_MAX_SITES];
    uint64_t ep[AG_MAX_SITES];
    al_site_stats st[AG_MAX_SITES];
    double seen[AG_MAX_SITES];
    pthread_mutex_lock(&a->mu);
    if (a->refused[0]) {
        int rc = al_errf(err, AL_EPERM, "%s", a->refused);
        pthread_mutex_unlock(&a->mu);
        return rc;
    }
    for (int i = 0; i < a->nsites; i++) {
        ps[i] = a->pst[i];
        fresh[i] = a->pst_new[i];
        a->pst_new[i] = 0;
        seen[i] = a->hb_seen[i];
        have[i] = a->have_stats[p][i] == a->round + 1;
        ep[i] = a->stats_epoch[p][i];
        st[i] = a->stats[p][i];
    }
    pthread_mutex_unlock(&a->mu);
    double now = al_now();
    uint32_t hears = ag_hears(a); /* whose own calls reach this site: in its statuses */
    if (hears != a->hears_fed) {
        a->hears_fed = hears;
        al_round_event ev = {.type = AL_EV_HEARS};
        ev.st.hears = hears;
        ag_feed(a, &ev);
    }
    follow_exclusions(a, ps);
    for (int i = 0; i < a->nsites; i++) {
        if (i == a->self || !ps[i].have_base) continue;
        if (fresh[i]) { /* the dashboard's agreement: what it committed, what it voted */
            if (ps[i].round >= 1) ag_theta_seen(a, i, (long)ps[i].round - 1, ps[i].base, 1);
            if (ps[i].vote == AL_VOTE_HASH)
                ag_theta_seen(a, i, (long)ps[i].round, ps[i].vote_hash, 0);
        }
        if (!a->shook[i]) {
            if (!fresh[i]) continue;
            al_err e = {0};
            int rc = ag_handshake(a, i, &e);
            if (rc == AL_EMISMATCH) {
                *err = e;
                return rc;
            }
            if (rc) continue;
            a->shook[i] = 1;
        }
        /* a status, or a sign of life since the last one (any call of the peer) */
        if (fresh[i] || seen[i] > a->fed_heard[i] + 0.5 * a->cfg->round_heartbeat_s) {
            al_round_event ev = {.type = AL_EV_STATUS, .peer = i};
            status_in(&ps[i], &ev.st);
            a->fed_heard[i] = seen[i] > 0 ? seen[i] : now;
            ag_feed(a, &ev);
        }
        if (a->liar[i].round >= 0 && a->liar[i].round != a->round &&
            (!a->liar[i].inc || ps[i].incarnation != a->liar[i].inc)) {
            if (a->liar[i].inc)
                al_logf(&a->log, AL_LOG_INFO,
                        "round %ld: %s restarted since it was left out as a liar in round %ld: "
                        "its statistics count again",
                        a->round, a->name[i], a->liar[i].round);
            a->liar[i].round = -1; /* a new incarnation, or one round for a sender without */
            a->liar[i].cleared = ps[i].incarnation;
            ag_publish_liars(a);
            al_round_event ex = {.type = AL_EV_EXCLUDE, .peer = i, .round = -1};
            ag_feed(a, &ex);
        }
        if (a->mine_round != a->round || !have[i] ||
            (a->fed_round[i] == a->round && a->fed_epoch[i] == ep[i]) || a->liar[i].round >= 0)
            continue;
        al_site_stats theirs = st[i];
        theirs.lr_sq_sum = a->mine.lr_sq_sum;
        theirs.lr_last = a->mine.lr_last;
        char why[300];
        if (!ag_stats_fit(&a->mine, &theirs, why, sizeof why)) {
            if (a->misfit_round[i] != a->round)
                al_logf(&a->log, AL_LOG_WARN, "round %ld: leaving %s out: %s", a->round, a->name[i],
                        why);
            a->misfit_round[i] = a->round;
            continue;
        }
        a->fed_round[i] = a->round;
        a->fed_epoch[i] = ep[i];
        al_round_event ev = {.type = AL_EV_STATS, .peer = i, .round = a->round, .epoch = ep[i]};
        ag_feed(a, &ev);
    }
    return 0;
}

/* The machine's health line ("no quorum: 1 of 3 sites reachable") into the
 * dashboard and the event log when it changes. */
void ag_report_health(agent *a) {
    if (!strcmp(a->health, a->rm.health)) return;
    snprintf(a->health, sizeof a->health, "%s", a->rm.health);
    al_metrics_set_health(&a->met, a->health);
    ag_event(a, a->health[0] ? "no-quorum" : "quorum", a->name[a->self]);
}

/* Done lingering: every peer has seen our last commit (its status is at our
 * round or later) or is not alive. */
int ag_peers_caught_up(agent *a) {
    int ok = 1;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->nsites && ok; i++)
        if (i != a->self && a->rm.peer[i].alive && !a->down[i] &&
            (!a->pst[i].have_base || (long)a->pst[i].round < a->round))
            ok = 0;
    pthread_mutex_unlock(&a->mu);
    return ok;
}
