/* agent_machine.c -- the agent's side of the round state machine
 * (runtime/round/al_round.h): θ_global's hash in the machine's form, peer statuses
 * in and out, feeding events (with the AL_LOG=debug trace), the vote persisted
 * to <checkpoint dir>/vote.json, the machine's start, and the inbox of peer
 * statuses and statistics that become events. agent_round.c drives the
 * machine and carries out its actions. */
#include "agent_machine.h"
#include "agent_events.h"
#include "agent_hash.h"
#include "agent_net.h"

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
        st->value.origin = p->epoch; /* the agent runs the machine without carry */
    }
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
    }
}

/* Feed one event, stamped now. With AL_LOG=debug, every event that changes
 * the machine's (round, epoch, phase, vote, members), and every peer status
 * that is news, is logged with the time since the start: the trace to read
 * when a round stalls. */
void ag_feed(agent *a, al_round_event *ev) {
    ev->now = al_now();
    if (a->log.min > AL_LOG_DEBUG) { /* no trace: nothing to compare */
        al_round_step(&a->rm, ev);
        return;
    }
    al_round_status b, s;
    al_round_status_get(&a->rm, &b);
    al_round_phase ph = a->rm.phase;
    al_round_step(&a->rm, ev);
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

/* ---- the persisted vote ---------------------------------------------------------------- */

static void vote_path(const agent *a, char *p, size_t n) {
    snprintf(p, n, "%s/vote.json", a->cfg->checkpoint_dir);
}

int ag_vote_save(agent *a, const al_round_vote *v, al_err *err) {
    char path[4200], hx[65];
    vote_path(a, path, sizeof path);
    ag_hash_hex(&v->value.hash, hx);
    json_t *j = json_pack("{s:s, s:I, s:I, s:i, s:s, s:I}", "run", a->run_hash, "round",
                          (json_int_t)v->round, "epoch", (json_int_t)v->epoch, "vote", v->vote,
                          "hash", hx, "members", (json_int_t)v->value.members);
    char *js = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    int rc = js ? al_write_file_sync(path, js, strlen(js), err)
                : al_errf(err, AL_ENOMEM, "vote: out of memory");
    free(js);
    return rc ? al_err_prefix(err, "persisting the vote of round %ld", v->round) : 0;
}

/* The last vote this site persisted, on --resume: its promise not to vote
 * otherwise in that (round, epoch). None if absent or of another run. */
static void vote_load(agent *a, al_round_vote *v) {
    v->round = -1;
    char path[4200];
    vote_path(a, path, sizeof path);
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
    } else if (j) {
        al_logf(&a->log, AL_LOG_WARN, "site %s: %s is not a vote of this run: ignored",
                a->name[a->self], path);
    }
    json_decref(j);
}

int ag_machine_init(agent *a, al_err *err) {
    for (int i = 0; i < a->nsites; i++) {
        a->name_p[i] = a->name[i];
        a->fed_round[i] = a->misfit_round[i] = a->liar_round[i] = -1;
    }
    al_round_cfg rc = {.nsites = a->nsites,
                       .self = a->self,
                       .quorum = a->quorum,
                       .min_sites = (int)AL_MIN(a->cfg->round_min_sites, a->nsites),
                       .heartbeat_s = a->cfg->round_heartbeat_s,
                       .peer_timeout_s = a->cfg->round_peer_timeout_s,
                       .deadline_s = a->cfg->round_deadline_s,
                       .names = a->name_p};
    al_round_start st;
    memset(&st, 0, sizeof st);
    st.round = a->round;
    ag_outer_hash(a, &st.base, 1);
    st.last.round = -1;
    st.held_round = -1; /* candidates are not persisted: a restarted voter pulls */
    if (a->resumed) vote_load(a, &st.last);
    int r = al_round_init(&a->rm, &rc, &st, al_now(), err);
    if (r) return r;
    al_round_status s;
    al_round_status_get(&a->rm, &s);
    pthread_mutex_lock(&a->mu);
    ag_status_out(&s, &a->my_status);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

/* ---- the inbox ------------------------------------------------------------------------ */

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
    for (int i = 0; i < a->nsites; i++) {
        if (i == a->self || !ps[i].have_base) continue;
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
        if (a->mine_round != a->round || !have[i] ||
            (a->fed_round[i] == a->round && a->fed_epoch[i] == ep[i]) ||
            a->liar_round[i] == a->round)
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
