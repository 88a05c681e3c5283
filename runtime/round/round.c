/* round.c -- the round protocol as a pure state machine (see al_round.h). */
#include "al_round.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Deliberate bugs, for tests/meson.build's round_bug* binaries only: 1: a commit counts
 * one vote fewer than the quorum; 2: a restarted site forgets its persisted vote;
 * 3: a later attempt skips the carry (Paxos' phase 1) and exchanges afresh; 4 (hard.c):
 * the commit persisted only at checkpoints. */
#ifndef AL_ROUND_BUG
#define AL_ROUND_BUG 0
#endif

static const char *const QUORUM_NAMES[] = {
#define AL_QUORUM_NAME(e, s) s,
    AL_QUORUMS(AL_QUORUM_NAME)
#undef AL_QUORUM_NAME
};
static const char *const ACTION_NAMES[] = {
#define AL_ACT_NAME(e, s) s,
    AL_ROUND_ACTIONS(AL_ACT_NAME)
#undef AL_ACT_NAME
};
static const char *const EVENT_NAMES[] = {
#define AL_EV_NAME(e, s) s,
    AL_ROUND_EVENTS(AL_EV_NAME)
#undef AL_EV_NAME
};
static const char *const PHASE_NAMES[] = {
#define AL_PH_NAME(e, s) s,
    AL_ROUND_PHASES(AL_PH_NAME)
#undef AL_PH_NAME
};

int al_quorum_parse(const char *s, al_quorum *q, al_err *err) {
    for (size_t i = 0; i < AL_ARRAY_LEN(QUORUM_NAMES); i++)
        if (s && !strcmp(s, QUORUM_NAMES[i])) {
            *q = (al_quorum)i;
            return 0;
        }
    return al_errf(err, AL_ECONFIG, "[round] quorum = '%s': expected majority, all or any",
                   s ? s : "");
}

const char *al_quorum_name(al_quorum q) {
    return (unsigned)q < AL_ARRAY_LEN(QUORUM_NAMES) ? QUORUM_NAMES[q] : "?";
}

int al_quorum_size(al_quorum q, int n) {
    return q == AL_QUORUM_ALL ? n : q == AL_QUORUM_ANY ? 1 : n / 2 + 1;
}

const char *al_round_action_name(al_round_action_type t) {
    return (unsigned)t < AL_ARRAY_LEN(ACTION_NAMES) ? ACTION_NAMES[t] : "?";
}

const char *al_round_event_name(al_round_event_type t) {
    return (unsigned)t < AL_ARRAY_LEN(EVENT_NAMES) ? EVENT_NAMES[t] : "?";
}

const char *al_round_phase_name(al_round_phase p) {
    return (unsigned)p < AL_ARRAY_LEN(PHASE_NAMES) ? PHASE_NAMES[p] : "?";
}

/* ---- helpers ------------------------------------------------------------------------ */

static int heq(const al_round_hash *x, const al_round_hash *y) {
    return !memcmp(x->b, y->b, sizeof x->b);
}

/* First 8 bytes in hex, for log lines. */
static const char *hshort(const al_round_hash *h, char buf[17]) {
    al_hex(h->b, 8, buf);
    return buf;
}

static void site_name(const al_round *m, int i, char buf[16]) {
    if (m->cfg.names)
        snprintf(buf, 16, "%s", m->cfg.names[i]);
    else
        snprintf(buf, 16, "site %u", (unsigned)i % 1000u); /* (i < AL_ROUND_MAX_SITES) */
}

/* The names of the sites in `set` (bit i), comma-separated, cut at 96 bytes. */
static void site_names(const al_round *m, uint32_t set, char who[96]) {
    who[0] = 0;
    for (int i = 0, n = 0; i < m->cfg.nsites; i++) {
        char nm[16];
        if (!(set >> i & 1)) continue;
        site_name(m, i, nm);
        n += snprintf(who + n, 96 - (size_t)n, "%s%s", n ? ", " : "", nm);
        if (n >= 96) break;
    }
}

/* A new action at the queue's end. A full queue (the caller fed events without
 * taking their actions: one event emits far fewer than AL_ROUND_MAX_ACTIONS)
 * keeps what it holds: the new action goes to a scratch slot, is counted as
 * lost, and al_round_overflow reports it from then on (a fatal error). */
static al_round_action *emit(al_round *m, al_round_action_type t) {
    al_round_action *a = &m->spill;
    if (m->nout < AL_ROUND_MAX_ACTIONS) {
        a = &m->out[m->nout++];
    } else if (m->lost++ == 0) {
        m->lost_type = t;
        m->lost_round = m->round;
    }
    memset(a, 0, sizeof *a);
    a->type = t;
    a->peer = -1;
    a->round = m->round;
    a->epoch = m->epoch;
    return a;
}

__attribute__((format(printf, 3, 4))) static void note(al_round *m, int level, const char *fmt,
                                                       ...) {
    al_round_action *a = emit(m, AL_ACT_LOG);
    a->level = level;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->text, sizeof a->text, fmt, ap);
    va_end(ap);
}

static void to_peers(al_round *m, al_round_action_type t) {
    for (int i = 0; i < m->cfg.nsites; i++) {
        if (i == m->cfg.self) continue;
        al_round_action *a = emit(m, t);
        a->peer = i;
        if (t == AL_ACT_SEND_STATUS) al_round_status_get(m, &a->st);
    }
}

static int popcount(uint32_t x) {
    int n = 0;
    for (; x; x &= x - 1) n++;
    return n;
}

static int veq(const al_round_value *x, const al_round_value *y) {
    return heq(&x->hash, &y->hash) && x->members == y->members;
}

/* Is status x newer than y? A later incarnation (a restart) first, then
 * (round, epoch), then a vote over none. A restarted peer's status replaces
 * what it showed before it even at an older (round, epoch): what it showed
 * then is facts it persisted, so it shows them again, or a state it left;
 * counting a vote no longer shown as unseen only adds possible votes, which
 * never proves a void or a commit that did not happen. A late status of an
 * earlier incarnation is stale. */
static int newer(const al_round_status *x, const al_round_status *y) {
    if (x->inc != y->inc) return x->inc > y->inc;
    if (x->round != y->round) return x->round > y->round;
    if (x->epoch != y->epoch) return x->epoch > y->epoch;
    return x->vote != AL_VOTE_NONE || y->vote == AL_VOTE_NONE;
}

/* Start (round, epoch); never below the epoch of a vote persisted in this round,
 * and in that epoch holding the vote. Going back to an earlier epoch (after a pull
 * of this round's state) is safe: a void was proved with every unseen vote counted
 * as possible. */
static void enter(al_round *m, long round, uint64_t epoch) {
    if (AL_ROUND_BUG == 2) m->last.round = -1;
    if (m->last.round == round && m->last.epoch > epoch) epoch = m->last.epoch;
    if (m->last.round == round && m->last.promised > epoch) epoch = m->last.promised;
    if (round != m->round) m->have_candidate = 0; /* within a round only leave() drops it */
    m->round = round;
    m->epoch = epoch;
    m->vote = AL_VOTE_NONE;
    m->members = 0;
    m->health[0] = 0;
    if (m->last.round == round && m->last.epoch == epoch) {
        m->vote = m->last.vote;
        m->value = m->last.value;
    }
    /* a later attempt of a round: the promise never to vote below it is
     * persisted before any status shows it (Paxos' phase 1; the first attempt
     * of a round promises nothing) */
    m->fetch_peer = -1;
    m->fetch_tried = 0;
    if (m->cfg.carry && epoch > 0 && (m->last.round != round || m->last.promised < epoch)) {
        if (m->last.round != round)
            m->last = (al_round_vote){.round = round, .epoch = 0, .vote = AL_VOTE_NONE};
        m->last.promised = epoch;
        al_round_action *a = emit(m, AL_ACT_PERSIST_VOTE);
        a->vote = AL_VOTE_NONE;
        a->rec = m->last;
    }
}

/* This site's latest hash vote in the round in progress, or NULL. */
static const al_round_value *accepted(const al_round *m) {
    return m->cfg.carry && m->last.round == m->round && m->last.accepted ? &m->last.acc_value
                                                                         : NULL;
}

static void cast(al_round *m, int vote, const al_round_value *v) {
    if (m->vote == AL_VOTE_NONE) { /* one vote per (round, epoch), ever */
        m->vote = vote;
        memset(&m->value, 0, sizeof m->value);
        if (v) m->value = *v;
        if (m->last.round != m->round) m->last = (al_round_vote){.round = m->round};
        m->last.epoch = m->epoch;
        m->last.vote = vote;
        m->last.value = m->value;
        if (m->last.promised < m->epoch) m->last.promised = m->epoch;
        if (vote == AL_VOTE_HASH) {
            m->last.accepted = 1;
            m->last.acc_epoch = m->epoch;
            m->last.acc_value = m->value;
        }
        al_round_action *a = emit(m, AL_ACT_PERSIST_VOTE);
        a->vote = vote;
        a->hash = m->value.hash;
        a->members = m->value.members;
        a->rec = m->last;
    }
    m->phase = AL_PH_VOTED;
    to_peers(m, AL_ACT_SEND_STATUS);
}

/* Leave the exchange of the current (round, epoch), and its candidate unless kept. */
static void leave(al_round *m, const al_round_value *keep) {
    if (m->phase == AL_PH_EXCHANGE) emit(m, AL_ACT_ABORT);
    const al_round_value *acc = accepted(m); /* may be carried into a later attempt */
    if (m->have_candidate && !(keep && veq(&m->cand, keep)) && !(acc && veq(&m->cand, acc))) {
        emit(m, AL_ACT_REVERT);
        m->have_candidate = 0;
    }
}

static void train(al_round *m) {
    m->phase = AL_PH_TRAIN;
    m->interval_done = 0;
    emit(m, AL_ACT_TRAIN);
    to_peers(m, AL_ACT_SEND_STATUS);
}

/* The interval is done: send the statistics of this (round, epoch). */
static void start_stats(al_round *m, double now) {
    m->t_stats = now;
    m->phase = AL_PH_STATS;
    to_peers(m, AL_ACT_SEND_STATUS);
    to_peers(m, AL_ACT_SEND_STATS);
}

static void next_epoch(al_round *m, uint64_t epoch, double now) {
    leave(m, NULL);
    enter(m, m->round, epoch);
    if (m->interval_done) start_stats(m, now);
}

/* A live peer holding the pull goal: at sync_round or later, and with sync_hash
 * if at sync_round when sync_check, that has not served less than it announced
 * for this goal; the furthest (ties: the lowest id) of those not tried yet, or
 * of all once each was tried. -1: none. */
static int sync_source(al_round *m) {
    for (int pass = 0; pass < 2; pass++) {
        int best = -1;
        for (int i = 0; i < m->cfg.nsites; i++) {
            const al_round_peer *p = &m->peer[i];
            if (i == m->cfg.self || !p->have || !p->alive || p->st.round < m->sync_round ||
                ((m->sync_tried | m->sync_short) >> i & 1))
                continue;
            if (m->sync_check && p->st.round == m->sync_round && !heq(&p->st.base, &m->sync_hash))
                continue;
            if (best < 0 || p->st.round > m->peer[best].st.round) best = i;
        }
        if (best >= 0) return best;
        m->sync_tried = 0;
    }
    return -1;
}

/* Fetch the value hashing to h from a live site at this round whose status
 * shows a vote for it or reports it accepted (it holds it), unless that fetch
 * is in flight already or every such site failed it in this attempt. commit:
 * to apply it (it is committed), else to vote for it (carried); want: the value
 * to hold once fetched (NULL: the one the site reports). 1: a fetch is in
 * flight; 0: no site left to ask. */
static int fetch_value(al_round *m, const al_round_hash *h, const al_round_value *want, int commit,
                       double now) {
    if (!m->cfg.carry) return 0;
    if (m->fetch_peer >= 0 && m->fetch_commit == commit && now < m->t_fetch) return 1;
    if (m->fetch_peer >= 0) m->fetch_tried |= 1u << m->fetch_peer; /* unanswered */
    m->fetch_peer = -1;
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i == m->cfg.self || !p->have || !p->alive || p->st.round != m->round ||
            (m->fetch_tried >> i & 1))
            continue;
        const al_round_value *v =
            p->st.vote == AL_VOTE_HASH && heq(&p->st.value.hash, h) ? &p->st.value
            : p->st.accepted && heq(&p->st.acc_value.hash, h)       ? &p->st.acc_value
                                                                    : NULL;
        if (!v) continue;
        if (m->phase == AL_PH_EXCHANGE) emit(m, AL_ACT_ABORT);
        m->fetch_peer = i;
        m->fetch_val = want ? *want : *v;
        m->fetch_commit = commit;
        m->t_fetch = now + m->cfg.deadline_s;
        al_round_action *a = emit(m, AL_ACT_FETCH);
        a->peer = i;
        a->hash = m->fetch_val.hash;
        a->members = m->fetch_val.members;
        return 1;
    }
    return 0;
}

/* In sync with no source for AL_ROUND_SYNC_BEATS heartbeats (the sites that
 * announced the goal are gone, restarted from older states, or served less than
 * they announced): back to the round, as at a start, where what the peers show
 * now decides again (a peer still ahead and trusted: a pull again). */
static void sync_give_up(al_round *m, double now) {
    char who[96];
    site_names(m, m->sync_short, who);
    note(m, AL_LOG_WARN,
         "round %ld: no site serves the state of round %ld for %d heartbeats%s%s%s: back to the "
         "round",
         m->round, m->sync_round, AL_ROUND_SYNC_BEATS, *who ? " (served less than announced: " : "",
         who, *who ? ")" : "");
    m->sync_peer = -1;
    m->sync_tried = m->sync_short = 0;
    m->t_nosrc = 0;
    m->phase = AL_PH_JOIN;
    m->t_start = now;
}

static void try_sync(al_round *m, double now) {
    if (m->sync_peer >= 0) m->sync_tried |= 1u << m->sync_peer; /* unanswered */
    m->sync_peer = -1;
    int src = sync_source(m);
    if (src < 0) { /* nobody has applied it yet: a voter still holds it */
        if (m->sync_round == m->round + 1 && m->sync_check &&
            fetch_value(m, &m->sync_hash, NULL, 1, now)) {
            m->t_sync = m->t_fetch;
            m->t_nosrc = 0;
            return;
        }
        if (m->t_nosrc == 0) m->t_nosrc = now;
        /* asked again at every event until a source shows (not when an
         * earlier pull's deadline, still in t_sync, passes) */
        m->t_sync = now;
        if (now - m->t_nosrc >= AL_ROUND_SYNC_BEATS * m->cfg.heartbeat_s) sync_give_up(m, now);
        return;
    }
    m->t_nosrc = 0;
    char nm[16];
    site_name(m, src, nm);
    m->sync_peer = src;
    m->t_sync = now + m->cfg.deadline_s; /* a pull unanswered by then is tried elsewhere */
    al_round_action *a = emit(m, AL_ACT_SYNC);
    a->peer = src;
    a->round = m->sync_round;
    a->hash = m->sync_hash;
    note(m, AL_LOG_INFO, "round %ld: pulling the committed state from %s (its round %ld)", m->round,
         nm, m->peer[src].st.round);
}

/* Pull a state at `round` or later; at `round` it must hash to h (NULL: any). */
static void sync_to(al_round *m, long round, const al_round_hash *h, double now, const char *why) {
    /* a pull of this round's state keeps the candidate: it may be the one committed */
    leave(m, round == m->round && m->have_candidate ? &m->cand : NULL);
    note(m, AL_LOG_WARN, "round %ld: %s", m->round, why);
    m->phase = AL_PH_SYNC;
    m->sync_round = round;
    m->sync_check = h != NULL;
    m->sync_tried = m->sync_short = 0;
    m->t_nosrc = 0;
    memset(&m->sync_hash, 0, sizeof m->sync_hash);
    if (h) m->sync_hash = *h;
    m->sync_peer = -1;
    try_sync(m, now);
}

static void apply(al_round *m, const al_round_hash *h) {
    al_round_action *a = emit(m, AL_ACT_APPLY);
    a->hash = *h;
    a->members = m->cand.members;
    m->base = *h;
    m->have_candidate = 0;
    enter(m, m->round + 1, 0);
    train(m);
}

/* ---- deciding --------------------------------------------------------------------- */

/* The votes known for (round, epoch). Only a member votes for a value computed
 * in this attempt (a site votes for its own candidate and is a member of its
 * own exchange), so such a value can gain votes only from its unseen members;
 * a value carried from an earlier attempt, from any unseen site. */
typedef struct tally {
    al_round_value best; /* the value with the most votes */
    int nbest, seen;     /* its votes; votes known, null ones included */
    int reach;           /* the most votes any value can still reach */
    int reach_alive;     /* the same, counting only the unseen sites alive */
} tally;

static void count_votes(const al_round *m, tally *t) {
    al_round_value vs[AL_ROUND_MAX_SITES];
    int cnt[AL_ROUND_MAX_SITES], carried[AL_ROUND_MAX_SITES], nv = 0;
    uint32_t seen = 0, alive = 0;
    memset(t, 0, sizeof *t);
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        int me = i == m->cfg.self;
        if (me || p->alive) alive |= 1u << i;
        int here = me || (p->have && p->st.round == m->round && p->st.epoch == m->epoch);
        int vote = !here ? AL_VOTE_NONE : me ? m->vote : p->st.vote;
        if (vote == AL_VOTE_NONE) continue;
        seen |= 1u << i;
        if (vote != AL_VOTE_HASH) continue;
        const al_round_value *v = me ? &m->value : &p->st.value;
        int k = 0;
        while (k < nv && !veq(&vs[k], v)) k++;
        if (k == nv) {
            vs[nv] = *v;
            cnt[nv] = carried[nv] = 0;
            nv++;
        }
        cnt[k]++;
        carried[k] |= m->cfg.carry && v->origin < m->epoch;
    }
    uint32_t unseen = ~seen & (uint32_t)((1ull << m->cfg.nsites) - 1);
    t->seen = popcount(seen);
    t->reach = popcount(unseen); /* a value nobody was seen voting for */
    t->reach_alive = popcount(unseen & alive);
    for (int k = 0; k < nv; k++) {
        uint32_t can = carried[k] ? unseen : unseen & vs[k].members;
        int r = cnt[k] + popcount(can);
        if (r > t->reach) t->reach = r;
        int ra = cnt[k] + popcount(can & alive);
        if (ra > t->reach_alive) t->reach_alive = ra;
        if (cnt[k] > t->nbest) {
            t->nbest = cnt[k];
            t->best = vs[k];
        }
    }
}

/* A peer at a later round proves that round m->round was committed. */
static int follow_ahead(al_round *m, double now) {
    int ahead = 0;
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i == m->cfg.self || !p->have || !p->alive || p->st.round <= m->round) continue;
        ahead = 1;
        if (m->have_candidate && p->st.round == m->round + 1 && heq(&p->st.base, &m->cand.hash)) {
            apply(m, &m->cand.hash); /* they committed the candidate held here */
            return 1;
        }
    }
    if (!ahead) return 0;
    /* a peer at the next round holds its base: the value committed here */
    const al_round_hash *h = NULL;
    for (int i = 0; i < m->cfg.nsites && m->cfg.carry; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i != m->cfg.self && p->have && p->alive && p->st.round == m->round + 1) h = &p->st.base;
    }
    sync_to(m, m->round + 1, h, now, "the peers committed it without this site");
    return 1;
}

/* A peer at this round in a later epoch proves that this epoch is void: follow it. */
static void follow_epoch(al_round *m, double now) {
    int src = -1;
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i != m->cfg.self && p->have && p->st.round == m->round && p->st.epoch > m->epoch &&
            (src < 0 || p->st.epoch > m->peer[src].st.epoch))
            src = i;
    }
    if (src >= 0) next_epoch(m, m->peer[src].st.epoch, now);
}

/* A majority of the configured sites holds another base at this round. */
static int follow_majority_base(al_round *m, double now) {
    int need = m->cfg.nsites / 2 + 1;
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i == m->cfg.self || !p->have || p->st.round != m->round || heq(&p->st.base, &m->base))
            continue;
        int n = 0;
        for (int j = 0; j < m->cfg.nsites; j++)
            n += j != m->cfg.self && m->peer[j].have && m->peer[j].st.round == m->round &&
                 heq(&m->peer[j].st.base, &p->st.base);
        if (n >= need) {
            char a[17], b[17];
            char why[128];
            snprintf(why, sizeof why, "theta_global %s differs from %s, held by %d of %d sites",
                     hshort(&m->base, a), hshort(&p->st.base, b), n, m->cfg.nsites);
            sync_to(m, m->round, &p->st.base, now, why);
            return 1;
        }
    }
    return 0;
}

/* Paxos' phase 1 without a leader: the reports (al_round_status.accepted) of the
 * sites promised at (round, epoch) that have not voted in it, this one included.
 * A value possibly committed in an earlier attempt was voted for by a quorum,
 * which meets every quorum of reports: so with a quorum of reports, the value
 * with the latest acc_epoch among them is the only one this attempt may
 * commit, and with none among them every value is safe. A peer that voted for
 * a carried value here did that check: follow it. 1 when this site voted. */
static int carry(al_round *m, double now) {
    if (!m->cfg.carry || m->vote != AL_VOTE_NONE) return 0;
    if (m->fetch_peer >= 0 && now < m->t_fetch) return 1; /* a fetch in flight */
    const al_round_value *best = accepted(m);
    uint64_t best_epoch = best ? m->last.acc_epoch : 0;
    int nrep = 1, follow = 0;
    for (int i = 0; i < m->cfg.nsites && !follow; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i == m->cfg.self || !p->have || p->st.round != m->round || p->st.epoch != m->epoch)
            continue;
        /* a site left out (a liar) is neither followed nor counted: its report
         * may name a value no honest site computed. Still safe: the reports
         * counted are a quorum of the others, which meets every quorum that
         * may have committed a value in a site that reports it */
        if (p->excluded >= 0 && p->excluded <= m->round) continue;
        if (p->st.vote == AL_VOTE_HASH && p->st.value.origin < m->epoch) {
            best = &p->st.value; /* it carried this here: follow it */
            follow = 1;
            break;
        }
        if (p->st.vote != AL_VOTE_NONE) continue;
        nrep++;
        if (p->st.accepted && (!best || p->st.acc_epoch > best_epoch)) {
            best = &p->st.acc_value;
            best_epoch = p->st.acc_epoch;
        }
    }
    if (AL_ROUND_BUG == 3) return 0; /* phase 1 skipped: a fresh value in every attempt */
    if (!best || (!follow && nrep < m->q)) return 0;
    al_round_value v = *best;
    char h[17];
    if (m->have_candidate && veq(&m->cand, &v)) {
        note(m, AL_LOG_INFO, "round %ld: attempt %llu carries %s (it may have been committed)",
             m->round, (unsigned long long)m->epoch, hshort(&v.hash, h));
        cast(m, AL_VOTE_HASH, &v);
        return 1;
    }
    /* not held here: a vote only with the value in hand (every vote for a
     * value is a copy of it), fetched from a site that voted for it */
    if (fetch_value(m, &v.hash, &v, 0, now)) return 1;
    /* every holder tried: no vote for it from here in this attempt */
    note(m, AL_LOG_WARN, "round %ld: attempt %llu: no site could give %s to carry: voting null",
         m->round, (unsigned long long)m->epoch, hshort(&v.hash, h));
    cast(m, AL_VOTE_NULL, NULL);
    return 1;
}

static void on_fetched(al_round *m, const al_round_event *ev) {
    if (ev->peer != m->fetch_peer || m->fetch_peer < 0) return;
    m->fetch_peer = -1;
    int ok = ev->type == AL_EV_FETCHED && ev->round == m->round &&
             heq(&ev->hash, &m->fetch_val.hash) && m->phase != AL_PH_JOIN &&
             m->phase != AL_PH_RELOAD && (m->phase != AL_PH_SYNC || m->fetch_commit);
    if (!ok || (!m->fetch_commit && (m->vote != AL_VOTE_NONE || m->phase != AL_PH_STATS))) {
        m->fetch_tried |= 1u << ev->peer;
        return;
    }
    if (m->have_candidate) emit(m, AL_ACT_REVERT); /* not the value fetched */
    al_round_action *a = emit(m, AL_ACT_HOLD);
    a->hash = m->fetch_val.hash;
    a->members = m->fetch_val.members;
    m->have_candidate = 1;
    m->cand = m->fetch_val;
    if (m->fetch_commit) { /* committed: the fetched copy is this site's */
        apply(m, &m->cand.hash);
        return;
    }
    char h[17];
    note(m, AL_LOG_INFO, "round %ld: attempt %llu carries %s (it may have been committed)",
         m->round, (unsigned long long)m->epoch, hshort(&m->cand.hash, h));
    cast(m, AL_VOTE_HASH, &m->cand);
}

static void decide_members(al_round *m, double now) {
    if (carry(m, now)) return;
    uint32_t mem = 1u << m->cfg.self, out = al_round_left_out(m);
    int waiting = 0;
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i == m->cfg.self || !p->alive || (p->excluded >= 0 && p->excluded <= m->round) ||
            (out >> i & 1))
            continue; /* not alive, left out by the caller (a liar), or of a broken pair */
        const al_round_status *s = &p->st;
        int here = p->have && s->round == m->round && s->epoch == m->epoch;
        int open = here && heq(&s->base, &m->base) && s->vote == AL_VOTE_NONE;
        if (open && p->stats_round == m->round && p->stats_epoch == m->epoch)
            mem |= 1u << i;
        else if (open || !p->have || s->round < m->round ||
                 (s->round == m->round && s->epoch < m->epoch))
            waiting++; /* may still send statistics for (round, epoch) */
    }
    int self_out = (int)(out >> m->cfg.self & 1);
    if (waiting && !self_out && now < m->t_stats + m->cfg.deadline_s) return;
    if (m->vote != AL_VOTE_NONE) { /* voted here before a restart: that vote stands */
        m->phase = AL_PH_VOTED;
        return;
    }
    if (out != m->out_noted) {
        m->out_noted = out;
        if (out) {
            char who[96];
            site_names(m, out, who);
            note(m, AL_LOG_WARN,
                 "round %ld: attempt %llu leaves out %s: a site of a pair where one does not "
                 "hear the other (the statuses' hears)",
                 m->round, (unsigned long long)m->epoch, who);
        }
    }
    if (self_out) { /* this site is the one left out: it casts no vote (a null one would
                     * void the attempt for the others and start a storm of attempts),
                     * and follows the others' commit or void */
        m->members = 0;
        return;
    }
    m->members = mem;
    int k = popcount(mem);
    if (k < m->q) {
        snprintf(m->health, sizeof m->health, "no quorum: %d of %d sites reachable", k,
                 m->cfg.nsites);
        note(m, AL_LOG_WARN, "round %ld: %s (%s needs %d): not committing", m->round, m->health,
             al_quorum_name(m->cfg.quorum), m->q);
        cast(m, AL_VOTE_NULL, NULL);
        return;
    }
    m->health[0] = 0;
    m->phase = AL_PH_EXCHANGE;
    emit(m, AL_ACT_EXCHANGE)->members = mem;
}

/* In the exchange: a member that voted, or voted with other members, will not send. */
static void check_exchange(al_round *m) {
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        if (!(m->members >> i & 1) || i == m->cfg.self || !p->have) continue;
        if (p->st.round == m->round && p->st.epoch == m->epoch &&
            (p->st.vote == AL_VOTE_NULL ||
             (p->st.vote == AL_VOTE_HASH &&
              (p->st.value.members != m->members || p->st.value.origin < m->epoch)))) {
            emit(m, AL_ACT_ABORT);
            cast(m, AL_VOTE_NULL, NULL);
            return;
        }
    }
}

/* v is committed and not held here: fetch it from a voter, or pull the next
 * round's state from a site that applied it. */
static void get_committed(al_round *m, const al_round_value *v, double now, const char *why) {
    if (!fetch_value(m, &v->hash, v, 1, now)) sync_to(m, m->round + 1, &v->hash, now, why);
}

static void decide_outcome(al_round *m, double now) {
    tally t;
    count_votes(m, &t);
    if (t.nbest >= m->q - (AL_ROUND_BUG == 1)) { /* (round, epoch) committed t.best */
        if (m->have_candidate && veq(&m->cand, &t.best)) {
            apply(m, &t.best.hash);
        } else if ((m->phase == AL_PH_EXCHANGE && m->members == t.best.members) ||
                   m->phase == AL_PH_PROPOSE) {
            return; /* a candidate is on its way: it may be this one */
        } else {
            char h[17], why[96];
            snprintf(why, sizeof why, "a quorum committed %s, not this site's candidate",
                     hshort(&t.best.hash, h));
            get_committed(m, &t.best, now, why);
        }
        return;
    }
    /* nobody can commit (round, epoch): try the next attempt -- but only when
     * enough sites are reachable for one to succeed. With fewer, every new
     * attempt would be void at once (this site's null vote, the others
     * unseen): the agent ran through a million attempts in seconds, a
     * persisted vote each, while its only peer was down; the peers' statuses
     * wake it when they are back. With the carry, leaving an attempt is always
     * safe (a value it may commit is carried into the next), so it is left
     * also when the votes it waits for are of sites not alive. */
    int reach = m->cfg.carry ? t.reach_alive : t.reach;
    if (t.seen > 0 && reach < m->q && al_round_reachable(m) >= m->q) {
        note(m, AL_LOG_INFO, "round %ld: attempt %llu cannot reach a quorum (%d votes seen)",
             m->round, (unsigned long long)m->epoch, t.seen);
        next_epoch(m, m->epoch + 1, now);
    }
}

/* Fewer sites reachable than a commit needs: say so once (the dashboard shows
 * m->health), whatever the phase; clear it when they are back. */
static void check_reachable(al_round *m) {
    int r = al_round_reachable(m);
    if (r < m->q && m->phase != AL_PH_JOIN) {
        char h[sizeof m->health];
        snprintf(h, sizeof h, "no quorum: %d of %d sites reachable", r, m->cfg.nsites);
        if (strcmp(h, m->health) != 0) {
            snprintf(m->health, sizeof m->health, "%s", h);
            note(m, AL_LOG_WARN, "round %ld: %s (%s needs %d): not committing", m->round, m->health,
                 al_quorum_name(m->cfg.quorum), m->q);
        }
        m->unreachable = 1;
    } else if (m->unreachable) {
        m->unreachable = 0;
        if (m->health[0])
            note(m, AL_LOG_INFO, "round %ld: %d of %d sites reachable again", m->round, r,
                 m->cfg.nsites);
        m->health[0] = 0;
    }
}

/* Does site j's status show a hash vote for v in (round, epoch)? */
static int voted_for(const al_round *m, int j, uint64_t epoch, const al_round_value *v) {
    if (j == m->cfg.self) { /* the last vote, or the latest hash vote */
        const al_round_vote *l = &m->last;
        return l->round == m->round &&
               ((l->epoch == epoch && l->vote == AL_VOTE_HASH && veq(&l->value, v)) ||
                (l->accepted && l->acc_epoch == epoch && veq(&l->acc_value, v)));
    }
    const al_round_peer *p = &m->peer[j];
    return p->have && p->st.round == m->round && p->st.epoch == epoch &&
           p->st.vote == AL_VOTE_HASH && veq(&p->st.value, v);
}

/* A quorum voted for one value in another attempt of this round (their
 * statuses still show it): that value is committed. A site that left that
 * attempt before the votes came (they carried its value without it) applies
 * it if it holds it, or pulls it. */
static int follow_commit(al_round *m, double now) {
    if (!m->cfg.carry) return 0;
    for (int i = 0; i < m->cfg.nsites; i++) {
        const al_round_peer *p = &m->peer[i];
        if (i == m->cfg.self || !p->have || p->st.round != m->round || p->st.epoch == m->epoch ||
            p->st.vote != AL_VOTE_HASH)
            continue;
        int n = 0;
        for (int j = 0; j < m->cfg.nsites; j++) n += voted_for(m, j, p->st.epoch, &p->st.value);
        if (n < m->q) continue;
        if (m->have_candidate && veq(&m->cand, &p->st.value)) {
            if (m->phase == AL_PH_EXCHANGE) emit(m, AL_ACT_ABORT);
            apply(m, &m->cand.hash);
            return 1;
        }
        char h[17], why[128];
        snprintf(why, sizeof why,
                 "a quorum committed %s in attempt %llu, not this site's candidate",
                 hshort(&p->st.value.hash, h), (unsigned long long)p->st.epoch);
        get_committed(m, &p->st.value, now, why);
        return 1;
    }
    return 0;
}

/* After any event: move on as far as what is known allows. */
static void advance(al_round *m, double now) {
    check_reachable(m);
    if (m->phase == AL_PH_SYNC) {
        if (now >= m->t_sync) try_sync(m, now); /* none in flight, or one unanswered */
        return;
    }
    if (follow_ahead(m, now)) return;
    if (m->phase != AL_PH_JOIN && m->phase != AL_PH_RELOAD && follow_commit(m, now)) return;
    follow_epoch(m, now);
    if (follow_majority_base(m, now)) return;
    if (m->phase == AL_PH_JOIN) {
        int heard = 0;
        for (int i = 0; i < m->cfg.nsites; i++) heard += i != m->cfg.self && m->peer[i].have;
        if (heard < m->cfg.nsites - 1 && now < m->t_start + m->cfg.deadline_s) return;
        int r = al_round_reachable(m);
        if (r >= m->cfg.min_sites) {
            note(m, AL_LOG_INFO, "starting at round %ld (%d of %d sites reachable)", m->round, r,
                 m->cfg.nsites);
            train(m);
        } else if (now >= m->t_note) {
            note(m, AL_LOG_INFO, "%d of %d sites reachable, waiting for [round] min_sites = %d", r,
                 m->cfg.nsites, m->cfg.min_sites);
            m->t_note = now + 10 * m->cfg.heartbeat_s;
        }
        return;
    }
    if (m->phase == AL_PH_TRAIN || m->phase == AL_PH_RELOAD) return;
    if (m->phase == AL_PH_STATS) decide_members(m, now);
    if (m->phase == AL_PH_EXCHANGE) check_exchange(m);
    if (m->phase >= AL_PH_STATS) decide_outcome(m, now);
}

/* ---- the interface ------------------------------------------------------------------ */

int al_round_init(al_round *m, const al_round_cfg *cfg, const al_round_start *s, double now,
                  al_err *err) {
    memset(m, 0, sizeof *m);
    if (cfg->nsites < 1 || cfg->nsites > AL_ROUND_MAX_SITES)
        return al_errf(err, AL_ECONFIG, "round: %d sites configured: need 1 to %d", cfg->nsites,
                       AL_ROUND_MAX_SITES);
    if (cfg->self < 0 || cfg->self >= cfg->nsites)
        return al_errf(err, AL_ECONFIG, "round: this site's index %d is not one of the %d sites",
                       cfg->self, cfg->nsites);
    if ((unsigned)cfg->quorum >= AL_ARRAY_LEN(QUORUM_NAMES))
        return al_errf(err, AL_ECONFIG, "round: quorum %d is not majority, all or any",
                       (int)cfg->quorum);
    if (cfg->min_sites < 1 || cfg->min_sites > cfg->nsites)
        return al_errf(err, AL_ECONFIG, "[round] min_sites = %d: need 1 to %d (the sites)",
                       cfg->min_sites, cfg->nsites);
    if (!(cfg->heartbeat_s > 0 && cfg->heartbeat_s < 1e6))
        return al_errf(err, AL_ECONFIG, "[round] heartbeat_s = %g: need a positive number",
                       cfg->heartbeat_s);
    if (!(cfg->peer_timeout_s > cfg->heartbeat_s && cfg->peer_timeout_s < 1e6))
        return al_errf(err, AL_ECONFIG,
                       "[round] peer_timeout_s = %g: must exceed heartbeat_s = %g (a live peer "
                       "would be dropped between two heartbeats)",
                       cfg->peer_timeout_s, cfg->heartbeat_s);
    if (!(cfg->deadline_s > 0 && cfg->deadline_s < 1e6))
        return al_errf(err, AL_ECONFIG, "[round] deadline_s = %g: need a positive number",
                       cfg->deadline_s);
    if (s->round < 0)
        return al_errf(err, AL_EINVAL, "round: start round %ld is negative", s->round);
    m->cfg = *cfg;
    m->q = al_quorum_size(cfg->quorum, cfg->nsites);
    m->base = s->base;
    m->last = s->last;
    m->phase = AL_PH_JOIN;
    m->t_start = now;
    m->t_hb = now; /* first heartbeat at the first event */
    m->sync_peer = -1;
    enter(m, s->round, 0);
    m->have_candidate = s->held_round == s->round; /* the caller restored it */
    m->cand = s->held;
    for (int i = 0; i < cfg->nsites; i++) m->peer[i].stats_round = m->peer[i].excluded = -1;
    return 0;
}

static void on_tick(al_round *m, double now) {
    for (int i = 0; i < m->cfg.nsites; i++) {
        al_round_peer *p = &m->peer[i];
        if (i == m->cfg.self || !p->alive || now - p->heard <= m->cfg.peer_timeout_s) continue;
        char nm[16];
        site_name(m, i, nm);
        p->alive = 0;
        emit(m, AL_ACT_DROP)->peer = i;
        note(m, AL_LOG_WARN, "%s: not heard for %.1f s, dropping it", nm, now - p->heard);
        if (m->phase == AL_PH_EXCHANGE && (m->members >> i & 1)) {
            emit(m, AL_ACT_ABORT);
            cast(m, AL_VOTE_NULL, NULL);
        }
        if (m->phase == AL_PH_SYNC && m->sync_peer == i) {
            m->sync_peer = -1;
            m->t_sync = now;
        }
    }
}

static void heard(al_round *m, int j, double now) {
    al_round_peer *p = &m->peer[j];
    if (!p->alive && p->have) {
        char nm[16];
        site_name(m, j, nm);
        note(m, AL_LOG_INFO, "%s is back", nm);
    }
    p->alive = 1;
    p->heard = now;
}

/* θ_global hashes to h: if that is not the committed base, reload it from the
 * persisted commit (on_reloaded pulls it from a peer if that copy is bad too). */
static int corrupted(al_round *m, const al_round_hash *h) {
    if (heq(h, &m->base)) return 0;
    char a[17], b[17];
    note(m, AL_LOG_WARN,
         "round %ld: theta_global hashes to %s, not the committed %s: corrupted here, reloading",
         m->round, hshort(h, a), hshort(&m->base, b));
    leave(m, m->have_candidate ? &m->cand : NULL); /* the candidate may be the committed one */
    m->phase = AL_PH_RELOAD;
    m->interval_done = 0; /* trained from a bad θ_global, perhaps: train again */
    emit(m, AL_ACT_RELOAD)->hash = m->base;
    return 1;
}

static void on_reloaded(al_round *m, const al_round_event *ev, double now) {
    if (m->phase != AL_PH_RELOAD) return;
    if (heq(&ev->hash, &m->base)) {
        note(m, AL_LOG_INFO, "round %ld: theta_global reloaded; training the interval again",
             m->round);
        train(m);
        return;
    }
    sync_to(m, m->round, &m->base, now, "the persisted theta_global is corrupted too");
}

static void on_interval_done(al_round *m, const al_round_event *ev, double now) {
    if (m->phase != AL_PH_TRAIN || ev->round != m->round) return;
    m->interval_done = 1;
    if (!corrupted(m, &ev->hash)) start_stats(m, now);
}

static void on_candidate(al_round *m, const al_round_event *ev) {
    if (heq(&ev->theta, &m->base)) {
        m->have_candidate = 1;
        m->cand = (al_round_value){ev->hash, m->members, m->epoch};
        cast(m, AL_VOTE_HASH, &m->cand);
        return;
    }
    cast(m, AL_VOTE_NULL, NULL); /* a candidate from a corrupted θ_global */
    corrupted(m, &ev->theta);
}

static void on_synced(al_round *m, const al_round_event *ev) {
    if (m->phase != AL_PH_SYNC || ev->peer != m->sync_peer) return;
    m->sync_tried |= 1u << m->sync_peer;
    m->sync_peer = -1;
    if (ev->round < m->sync_round ||
        (m->sync_check && ev->round == m->sync_round && !heq(&ev->hash, &m->sync_hash))) {
        char nm[16];
        site_name(m, ev->peer, nm); /* less than it announced: not asked again for this goal */
        m->sync_short |= 1u << ev->peer;
        note(m, AL_LOG_WARN,
             "round %ld: %s served a state of round %ld, less than it announced (round %ld%s): "
             "not asked again for it",
             m->round, nm, ev->round, m->sync_round,
             m->sync_check ? " with its base" : " or later");
        m->t_sync = ev->now + m->cfg.heartbeat_s; /* ask another */
        return;
    }
    if (ev->round != m->round && m->have_candidate) emit(m, AL_ACT_REVERT); /* superseded */
    al_round_action *a = emit(m, AL_ACT_ADOPT);
    a->round = ev->round;
    a->hash = ev->hash;
    m->base = ev->hash;
    enter(m, ev->round, 0);
    note(m, AL_LOG_INFO, "synced: now at round %ld", m->round);
    train(m);
}

void al_round_step(al_round *m, const al_round_event *ev) {
    double now = ev->now;
    int j = ev->peer;
    int from_peer = j >= 0 && j < m->cfg.nsites && j != m->cfg.self;
    int here = ev->round == m->round && ev->epoch == m->epoch;
    switch (ev->type) {
    case AL_EV_TICK:
        on_tick(m, now);
        break;
    case AL_EV_STATUS:
        if (!from_peer) break;
        heard(m, j, now);
        if (m->peer[j].have && ev->st.inc > m->peer[j].st.inc && m->peer[j].st.inc) {
            char nm[16];
            site_name(m, j, nm);
            note(m, AL_LOG_INFO, "%s restarted: at round %ld, attempt %llu (it showed %ld, %llu)",
                 nm, ev->st.round, (unsigned long long)ev->st.epoch, m->peer[j].st.round,
                 (unsigned long long)m->peer[j].st.epoch);
            m->sync_short &= ~(1u << j); /* another start: another state to serve */
        }
        if (!m->peer[j].have || newer(&ev->st, &m->peer[j].st)) m->peer[j].st = ev->st;
        m->peer[j].have = 1;
        break;
    case AL_EV_STATS:
        if (!from_peer) break;
        heard(m, j, now);
        if (ev->round > m->peer[j].stats_round ||
            (ev->round == m->peer[j].stats_round && ev->epoch > m->peer[j].stats_epoch)) {
            m->peer[j].stats_round = ev->round;
            m->peer[j].stats_epoch = ev->epoch;
        }
        break;
    case AL_EV_INTERVAL_DONE:
        on_interval_done(m, ev, now);
        break;
    case AL_EV_EXCHANGE_DONE:
        if (m->phase != AL_PH_EXCHANGE || !here) break;
        m->phase = AL_PH_PROPOSE;
        emit(m, AL_ACT_PROPOSE)->members = m->members;
        break;
    case AL_EV_EXCHANGE_FAILED:
        if (m->phase != AL_PH_EXCHANGE || !here) break;
        if (from_peer) {
            char nm[16];
            site_name(m, j, nm);
            note(m, AL_LOG_WARN, "round %ld: the exchange with %s failed: voting null", m->round,
                 nm);
        }
        cast(m, AL_VOTE_NULL, NULL);
        break;
    case AL_EV_CANDIDATE:
        if (m->phase == AL_PH_PROPOSE && here) on_candidate(m, ev);
        break;
    case AL_EV_RELOADED:
        on_reloaded(m, ev, now);
        break;
    case AL_EV_FETCHED:
    case AL_EV_FETCH_FAILED:
        on_fetched(m, ev);
        break;
    case AL_EV_EXCLUDE:
        if (from_peer) m->peer[j].excluded = ev->round;
        break;
    case AL_EV_HEARS:
        m->hears_fed = 1;
        m->hears = ev->st.hears;
        break;
    case AL_EV_SYNCED:
        on_synced(m, ev);
        break;
    case AL_EV_SYNC_FAILED:
        if (m->phase != AL_PH_SYNC || ev->peer != m->sync_peer) break;
        m->sync_tried |= 1u << m->sync_peer;
        if (ev->short_served) m->sync_short |= 1u << m->sync_peer;
        m->sync_peer = -1;
        m->t_sync = now + m->cfg.heartbeat_s;
        break;
    }
    advance(m, now);
    if (now >= m->t_hb) {
        m->t_hb = now + m->cfg.heartbeat_s;
        to_peers(m, AL_ACT_SEND_STATUS);
        if (m->phase >= AL_PH_STATS && m->phase <= AL_PH_VOTED) to_peers(m, AL_ACT_SEND_STATS);
    }
}

int al_round_ready(al_round *m, al_round_action *out, int max) {
    int n = m->nout < max ? m->nout : max;
    memcpy(out, m->out, (size_t)n * sizeof *out);
    memmove(m->out, m->out + n, (size_t)(m->nout - n) * sizeof *out);
    m->nout -= n;
    return n;
}

int al_round_overflow(const al_round *m, al_err *err) {
    if (!m->lost) return 0;
    return al_errf(err, AL_EINVAL,
                   "round machine: action queue overflow: %d action%s lost, the first a %s at "
                   "round %ld (the queue holds %d; its actions must be taken after every event)",
                   m->lost, m->lost == 1 ? "" : "s", al_round_action_name(m->lost_type),
                   m->lost_round, AL_ROUND_MAX_ACTIONS);
}

void al_round_status_get(const al_round *m, al_round_status *st) {
    memset(st, 0, sizeof *st);
    st->round = m->round;
    st->epoch = m->epoch;
    st->base = m->base;
    st->vote = m->vote;
    st->value = m->value;
    st->inc = m->cfg.incarnation;
    st->hears = al_round_hears(m);
    const al_round_value *acc = accepted(m);
    if (acc) {
        st->accepted = 1;
        st->acc_epoch = m->last.acc_epoch;
        st->acc_value = *acc;
    }
}

int al_round_reachable(const al_round *m) {
    int n = 1;
    for (int i = 0; i < m->cfg.nsites; i++) n += i != m->cfg.self && m->peer[i].alive;
    return n;
}
