/* test_round.c -- the round state machine (runtime/round/round.c): its configuration
 * checks, a few direct cases, and a deterministic simulation: M sites, each
 * running the machine, over the simulated network of round_simnet.c that
 * drops, delays, duplicates, reorders and partitions messages, with crashes
 * (of one site, also between two actions of one step or inside an apply; of
 * every site at once), restarts from what the agent persists (round_disk.c over
 * runtime/round/hard.c: the record, candidate and commit files, checkpoints),
 * also from a checkpoint older than the newest, and corrupted θ. θ is a hash:
 * the candidate of round r from base b with members S is mix(b, r, S). After
 * every event the invariants are checked:
 *   (a) no two sites commit different hashes for one round;
 *   (b) every commit had a quorum of votes for its hash in one (round, epoch);
 *   (d) no site votes twice in one (round, epoch); a site applies only the
 *       candidate it computed and adopts only what it pulled;
 *   (m) while partitioned, a side smaller than the quorum commits no new round;
 *   (t) a peer silent for peer_timeout_s is dropped within peer_timeout_s + 1 s;
 *   (p) a restart finds on its disk what the agent would need to start: the
 *       record reads back from its text, each replayed commit file holds what
 *       the log says, a commit file taken holds the record's base, the held
 *       candidate's file holds the hash voted for;
 * and at the end of each schedule (after the faults stop):
 *   (c) all sites were together at a round >= 3 past the one at the heal, on
 *       the same base, and no corrupted θ is left. With AL_ROUND_DEAD=1, the
 *       majority schedules keep one site down for good from the heal on and
 *       the others must go on without it (a known limit: see ARCHITECTURE.md).
 *       AL_ROUND_KEEP_GOING=1 counts failures instead of stopping at one.
 * AL_ROUND_CARRY=0 runs the machine without the carry (al_round_cfg.carry: the
 * agent's protocol before issue 32), which waits for the votes of dead sites.
 * AL_ROUND_SCHEDULES sets the number of schedules (default 10000: seeds 0..9999,
 * configuration = seed mod 3), AL_ROUND_FIRST_SEED the first seed; `--seed N`
 * replays one schedule with every event and log line printed. */
#include "al_test.h"

#include <string.h>

#include "al_round.h"
#include "round_disk.h"
#include "round_simnet.h"

#define MAXR 2048

static const char *prog = "test_round"; /* for the replay line */
#define TICK_S 0.5

/* Every restart reads the site's disk as the agent does (round_disk.c over
 * runtime/round/hard.c: the record, candidate.bin, commit-R.bin, checkpoints).
 * F_CRASH_ALL: every site at the same instant (a power cut of the whole run),
 * each back from its newest checkpoint or, one in two, an older one; F_STALE:
 * one site back from an older checkpoint than its newest (its hard state and
 * commit files kept, as test_durable.sh section 3 does to the agent) */
enum {
    F_PARTITION,
    F_HEAL,
    F_CRASH,
    F_CRASH_MID,
    F_CORRUPT,
    F_CUT,
    F_UNCUT,
    F_CRASH_ALL,
    F_STALE,
    F_CUT1, /* one way: a's messages to b lost, b's to a delivered (issue 32) */
    F_NFAULTS
};

static al_round_hash hmk(uint64_t x) {
    al_round_hash h;
    memset(&h, 0, sizeof h);
    memcpy(h.b, &x, sizeof x);
    return h;
}
static uint64_t hval(const al_round_hash *h) {
    uint64_t x;
    memcpy(&x, h->b, sizeof x);
    return x;
}
static int heq(const al_round_hash *x, const al_round_hash *y) {
    return !memcmp(x, y, sizeof *x);
}
static uint64_t mix(uint64_t a, uint64_t b) { /* splitmix64's finaliser over a and b */
    uint64_t z = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
#define GENESIS 0x67656e65736973ull

typedef struct site {
    al_round m;
    int up, inc, crash_mid; /* crash_mid >= 0: crash before that many more actions */
    int stale;              /* its restart goes back to an older checkpoint */
    rd_disk disk;           /* what survives a crash */
    al_round_hash theta, pulled, fetched;
    long fetched_round;
    int cand_ok;
    long cand_round;
    al_round_hash cand;
    int xch; /* exchange intent (round, epoch, members) since xt0 */
    long xr;
    uint64_t xe;
    uint32_t xm;
    double xt0;
    long train_seq;
    uint64_t lives;                   /* starts so far: the incarnation in its statuses */
    double heard[AL_ROUND_MAX_SITES]; /* last message from each peer */
} site;

typedef struct vote_rec {
    int site, vote;
    long round;
    uint64_t epoch;
    al_round_hash h;
} vote_rec;

typedef struct counts {
    long schedules, events, commits, adopts, repairs, crashes, partitions, corrupts, drops;
    long reloads, fetches, carried;
    long stale, replays, takes, torn; /* restarts from an older checkpoint; how they caught up */
    long short_served, sync_gave_up;  /* sources that served less than announced; pulls given up */
    long sent, lost, dups;
    long one_way;        /* one-way cuts */
    long cut_rounds_min; /* the one-way test: fewest rounds committed during a cut */
    uint64_t max_epoch;
    int max_queue; /* the most actions one event left in a machine's queue */
} counts;

typedef struct world {
    uint64_t seed;
    int n, q, verbose, failed, quiesced, partitioned;
    int dead;                  /* a site down for good from the heal on (majority only), -1: none */
    int dead_mode, keep_going; /* AL_ROUND_DEAD, AL_ROUND_KEEP_GOING */
    int carry;                 /* al_round_cfg.carry: AL_ROUND_CARRY (default 1) */
    int nine;                  /* every schedule with 9 sites (AL_ROUND_NINE=1 to replay) */
    int one_way;               /* the one-way test: one long one-way cut, no other fault */
    long cut_r0;               /* the one-way test: the highest round committed at the cut */
    al_round_cfg cfg;
    al_rng rng;
    sn_net net;
    sn_heap heap;
    sn_trace trace;
    double now, t_quiesce, t_end;
    site s[AL_ROUND_MAX_SITES];
    uint8_t has[MAXR];
    al_round_hash committed[MAXR];
    vote_rec *votes;
    int nvotes, capvotes;
    long cap[2];                /* per side of a partition: the highest round it may reach */
    long r_quiesce, conv_round; /* at the heal; the highest round all shared since */
    counts c;
    char why[320];
} world;

__attribute__((format(printf, 2, 3))) static void fail_inv(world *w, const char *fmt, ...) {
    if (w->failed) return;
    w->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->why, sizeof w->why, fmt, ap);
    va_end(ap);
}

static void trace(world *w, int site, int what, long a, long b, long c) {
    sn_trace_add(&w->trace, w->now, site, what, a, b, c);
    if (w->verbose) sn_trace_print(&w->trace, 1);
}

/* ---- the ledger: votes and commits seen by the whole simulation ------------------- */

static void record_vote(world *w, int i, const al_round_action *a) {
    for (int k = 0; k < w->nvotes; k++) {
        const vote_rec *v = &w->votes[k];
        if (v->site != i || v->round != a->round || v->epoch != a->epoch) continue;
        if (v->vote != a->vote || !heq(&v->h, &a->hash))
            fail_inv(w, "(d) site %d voted twice in round %ld epoch %llu", i, a->round,
                     (unsigned long long)a->epoch);
        return;
    }
    if (w->nvotes == w->capvotes) {
        w->capvotes = w->capvotes ? 2 * w->capvotes : 1024;
        w->votes = realloc(w->votes, (size_t)w->capvotes * sizeof *w->votes);
        assert_non_null(w->votes);
    }
    w->votes[w->nvotes++] = (vote_rec){i, a->vote, a->round, a->epoch, a->hash};
    w->c.carried += a->vote == AL_VOTE_HASH && a->rec.value.origin < a->epoch;
    if (a->epoch > w->c.max_epoch) w->c.max_epoch = a->epoch;
}

/* The most votes for h in one epoch of round r. */
static int votes_for(const world *w, long r, const al_round_hash *h) {
    int best = 0;
    for (int k = 0; k < w->nvotes; k++) {
        const vote_rec *v = &w->votes[k];
        if (v->round != r || v->vote != AL_VOTE_HASH || !heq(&v->h, h)) continue;
        int n = 0;
        for (int j = 0; j < w->nvotes; j++)
            n += w->votes[j].round == r && w->votes[j].epoch == v->epoch &&
                 w->votes[j].vote == AL_VOTE_HASH && heq(&w->votes[j].h, h);
        if (n > best) best = n;
    }
    return best;
}

static int side_size(const world *w, int g) {
    int n = 0;
    for (int i = 0; i < w->n; i++) n += w->net.group[i] == g;
    return n;
}

/* Site i now holds round r committed as h and is at round `now_round`. */
static void commit(world *w, int i, long r, const al_round_hash *h, long now_round) {
    if (r < 0 || r >= MAXR) return fail_inv(w, "round %ld out of the ledger", r);
    if (w->has[r] && !heq(&w->committed[r], h))
        return fail_inv(w, "(a) site %d committed round %ld as %016llx, others as %016llx", i, r,
                        (unsigned long long)hval(h), (unsigned long long)hval(&w->committed[r]));
    w->has[r] = 1;
    w->committed[r] = *h;
    int k = votes_for(w, r, h);
    if (k < w->q)
        return fail_inv(w, "(b) site %d committed round %ld as %016llx with %d votes, quorum %d", i,
                        r, (unsigned long long)hval(h), k, w->q);
    int g = w->net.group[i];
    if (w->partitioned && side_size(w, g) < w->q && now_round > w->cap[g])
        fail_inv(w, "(m) site %d on a side of %d (quorum %d) reached round %ld, past %ld", i,
                 side_size(w, g), w->q, now_round, w->cap[g]);
}

/* ---- carrying out a site's actions --------------------------------------------------- */

static void push(world *w, int kind, int i, double dt, sn_event e) {
    e.kind = kind;
    e.site = i;
    e.inc = w->s[i].inc;
    e.t = w->now + dt;
    sn_push(&w->heap, &e);
}

static void crash(world *w, int i, double down, int stale) {
    site *s = &w->s[i];
    s->stale = stale;
    s->up = 0;
    s->inc++;
    s->xch = s->cand_ok = 0;
    s->crash_mid = -1;
    w->c.crashes++;
    trace(w, i, SN_FAULT, F_CRASH, (long)(down * 1000), 0);
    push(w, SN_RESTART, i, down, (sn_event){0});
}

/* Carry out action a of site i; torn: an apply the site dies in the middle of. */
static void act(world *w, int i, const al_round_action *a, int torn) {
    site *s = &w->s[i];
    sn_event e = {0};
    char why[200];
    if (a->type != AL_ACT_SEND_STATUS && a->type != AL_ACT_SEND_STATS && a->type != AL_ACT_LOG)
        trace(w, i, SN_NKINDS + (int)a->type, a->peer, a->round, (long)a->epoch);
    switch (a->type) {
    case AL_ACT_SEND_STATUS:
    case AL_ACT_SEND_STATS:
        e.kind = a->type == AL_ACT_SEND_STATUS ? SN_STATUS : SN_STATS;
        e.site = a->peer;
        e.from = i;
        e.st = a->st;
        e.round = a->round;
        e.epoch = a->epoch;
        sn_send(&w->net, &w->heap, w->now, e);
        break;
    case AL_ACT_TRAIN:
        e.n = ++s->train_seq;
        e.round = a->round;
        push(w, SN_TRAINED, i, sn_uniform(&w->rng, 1.0, 2.5), e);
        break;
    case AL_ACT_EXCHANGE:
        s->xch = 1;
        s->xr = a->round;
        s->xe = a->epoch;
        s->xm = a->members;
        s->xt0 = w->now;
        e.round = a->round;
        e.epoch = a->epoch;
        e.members = a->members;
        push(w, SN_XCHECK, i, sn_uniform(&w->rng, 0.2, 0.6), e);
        break;
    case AL_ACT_ABORT:
        s->xch = 0;
        break;
    case AL_ACT_PROPOSE:
        e.round = a->round;
        e.epoch = a->epoch;
        e.hash = hmk(mix(mix(hval(&s->theta), (uint64_t)a->round), a->members));
        e.st.base = s->theta; /* the θ_global it was computed from */
        push(w, SN_CAND, i, sn_uniform(&w->rng, 0.05, 0.3), e);
        break;
    case AL_ACT_PERSIST_VOTE:                              /* ag_vote_save */
        if (a->vote != AL_VOTE_NONE) record_vote(w, i, a); /* NONE: a promise only */
        rd_vote(&s->disk, &a->rec, s->cand_ok && s->cand_round == a->round ? &s->cand : NULL);
        break;
    case AL_ACT_APPLY:
        if (!s->cand_ok || s->cand_round != a->round || !heq(&s->cand, &a->hash))
            return fail_inv(w, "(d) site %d applied %016llx in round %ld, not its candidate", i,
                            (unsigned long long)hval(&a->hash), a->round);
        s->theta = a->hash;
        if (rd_apply(&s->disk, a->round, &a->hash, a->members, torn, why, sizeof why))
            return fail_inv(w, "site %d: %s", i, why);
        if (torn) { /* between the rename of candidate.bin and the record */
            w->c.torn++;
            return crash(w, i, sn_uniform(&w->rng, 0.5, 10), 0);
        }
        w->c.commits++;
        commit(w, i, a->round, &a->hash, a->round + 1);
        break;
    case AL_ACT_REVERT: /* (the agent persists nothing: the held candidate stays) */
        s->cand_ok = 0;
        break;
    case AL_ACT_SYNC:
        e.from = a->peer;
        push(w, SN_SYNCED, i, sn_uniform(&w->rng, 0.1, 0.8), e);
        break;
    case AL_ACT_HOLD:
        if (s->fetched_round != a->round || !heq(&s->fetched, &a->hash))
            return fail_inv(w, "(d) site %d holds %016llx in round %ld, which it did not fetch", i,
                            (unsigned long long)hval(&a->hash), a->round);
        s->cand_ok = 1;
        s->cand_round = a->round;
        s->cand = a->hash;
        break;
    case AL_ACT_FETCH:
        e.from = a->peer;
        e.round = a->round;
        e.hash = a->hash;
        push(w, SN_FETCHED, i, sn_uniform(&w->rng, 0.1, 0.8), e);
        break;
    case AL_ACT_ADOPT:
        if (!heq(&a->hash, &s->pulled))
            return fail_inv(w, "(d) site %d adopted a state it did not pull", i);
        w->c.adopts++;
        w->c.repairs += a->round == s->disk.hard.committed;
        s->theta = a->hash;
        if (rd_adopt(&s->disk, a->round, &a->hash, why, sizeof why))
            return fail_inv(w, "site %d: %s", i, why);
        if (a->round > 0) commit(w, i, a->round - 1, &a->hash, a->round);
        break;
    case AL_ACT_RELOAD: /* the persisted commit, unless the disk copy is bad too (1 in 4) */
        e.hash = al_rng_below(&w->rng, 4) ? s->disk.hard.base
                                          : hmk(mix(hval(&s->disk.hard.base), 0xd15c));
        push(w, SN_RELOADED, i, sn_uniform(&w->rng, 0.1, 0.3), e);
        break;
    case AL_ACT_DROP:
        w->c.drops++;
        break;
    case AL_ACT_LOG:
        w->c.sync_gave_up += strstr(a->text, ": back to the round") != NULL;
        if (w->verbose) printf("    t=%8.3f site %d log: %s\n", w->now, i, a->text);
        break;
    }
}

static void feed(world *w, int i, al_round_event ev) {
    site *s = &w->s[i];
    al_round_action acts[AL_ROUND_MAX_ACTIONS];
    ev.now = w->now;
    al_round_step(&s->m, &ev);
    if (s->m.nout > w->c.max_queue) w->c.max_queue = s->m.nout;
    if (s->m.lost) fail_inv(w, "site %d lost %d actions to a full queue", i, s->m.lost);
    int n = al_round_ready(&s->m, acts, AL_ROUND_MAX_ACTIONS);
    for (int k = 0; k < n && !w->failed && s->up; k++) {
        int torn = 0;
        if (s->crash_mid == 0) { /* an apply dies half done one time in two */
            if (acts[k].type != AL_ACT_APPLY || al_rng_below(&w->rng, 2))
                return crash(w, i, sn_uniform(&w->rng, 0.5, 10), 0);
            torn = 1;
        }
        if (s->crash_mid > 0) s->crash_mid--;
        act(w, i, &acts[k], torn);
    }
}

/* Site i (re)starts from its disk, as the agent's --resume (rd_restart: the
 * record, the checkpoint, the commit and candidate files); a stale restart
 * from a checkpoint older than its newest. */
static void start_site(world *w, int i) {
    site *s = &w->s[i];
    al_round_cfg cfg = w->cfg;
    cfg.self = i;
    cfg.incarnation = ++s->lives; /* greater at every start, as the agent's */
    int k = -1;
    if (s->stale && s->disk.nckpt > 1) {
        k = (int)al_rng_below(&w->rng, (uint64_t)s->disk.nckpt - 1);
        w->c.stale++;
    }
    s->stale = 0;
    al_round_start st;
    int plan = 0;
    char why[200];
    if (rd_restart(&s->disk, k, &st, &s->theta, &plan, why, sizeof why))
        return fail_inv(w, "(p) site %d cannot restart: %s", i, why);
    w->c.replays += plan == AL_HARD_REPLAY;
    w->c.takes += plan == AL_HARD_TAKE;
    al_err err;
    if (al_round_init(&s->m, &cfg, &st, w->now, &err))
        return fail_inv(w, "site %d could not restart: %s", i, err.msg);
    s->up = 1;
    s->crash_mid = -1;
    s->cand_ok = st.held_round == st.round; /* the candidate voted for, restored */
    s->cand_round = st.held_round;
    s->cand = st.held.hash;
    for (int j = 0; j < w->n; j++) s->heard[j] = w->now;
}

/* ---- the simulated world's events ----------------------------------------------------- */

static void exchange_check(world *w, const sn_event *e) {
    site *s = &w->s[e->site];
    if (!s->xch || s->xr != e->round || s->xe != e->epoch || s->xm != e->members) return;
    int fail = -1, pending = 0;
    for (int j = 0; j < w->n && fail < 0; j++) {
        const site *p = &w->s[j];
        if (j == e->site || !(e->members >> j & 1)) continue;
        if (!p->up || !sn_link_up(&w->net, e->site, j) || !sn_link_up(&w->net, j, e->site)) {
            fail = j;
        } else if (!(p->xch && p->xr == e->round && p->xe == e->epoch && p->xm == e->members)) {
            long r = p->m.round;
            uint64_t ep = p->m.epoch;
            if (r < e->round || (r == e->round && ep < e->epoch) ||
                (r == e->round && ep == e->epoch && p->m.phase <= AL_PH_STATS))
                pending = 1; /* not there yet */
            else
                fail = j;
        }
    }
    al_round_event ev = {.round = e->round, .epoch = e->epoch, .peer = fail};
    if (fail < 0 && pending && w->now < s->xt0 + w->cfg.deadline_s) {
        push(w, SN_XCHECK, e->site, 0.3, *e);
        return;
    }
    ev.type = fail < 0 && !pending ? AL_EV_EXCHANGE_DONE : AL_EV_EXCHANGE_FAILED;
    if (ev.type == AL_EV_EXCHANGE_FAILED) s->xch = 0;
    feed(w, e->site, ev);
}

static void sync_answer(world *w, const sn_event *e) {
    int i = e->site, p = e->from;
    const site *src = &w->s[p];
    al_round_event ev = {.type = AL_EV_SYNC_FAILED, .peer = p};
    /* the source serves its committed state; the puller checks it hashes to what the
     * source announces (a corrupted θ does not) */
    if (src->up && sn_link_up(&w->net, i, p) && heq(&src->theta, &src->m.base)) {
        ev.type = AL_EV_SYNCED;
        ev.round = src->m.round;
        ev.hash = src->m.base;
        w->s[i].pulled = ev.hash;
    } else if (src->up && sn_link_up(&w->net, i, p)) {
        ev.short_served = 1; /* a state that does not hash to what it announced */
        w->c.short_served++;
    }
    feed(w, i, ev);
}

/* A fetch of a candidate to carry: the source serves the candidate it holds if
 * it is the one asked for. */
static void fetch_answer(world *w, const sn_event *e) {
    int i = e->site, p = e->from;
    const site *src = &w->s[p];
    al_round_event ev = {.type = AL_EV_FETCH_FAILED, .peer = p};
    if (src->up && sn_link_up(&w->net, i, p) && src->cand_ok && src->cand_round == e->round &&
        heq(&src->cand, &e->hash)) {
        ev.type = AL_EV_FETCHED;
        ev.round = e->round;
        ev.hash = e->hash;
        w->s[i].fetched = e->hash; /* held once the machine says AL_ACT_HOLD */
        w->s[i].fetched_round = e->round;
        w->c.fetches++;
    }
    feed(w, i, ev);
}

static void recompute_caps(world *w) {
    w->cap[0] = w->cap[1] = 0;
    for (int i = 0; i < w->n; i++) {
        long r = w->s[i].up ? w->s[i].m.round : w->s[i].disk.hard.committed;
        int g = w->net.group[i];
        if (r + 1 > w->cap[g]) w->cap[g] = r + 1;
    }
}

static long top_round(const world *w) {
    long r = 0;
    for (int i = 0; i < w->n; i++)
        if (w->s[i].up && w->s[i].m.round > r) r = w->s[i].m.round;
    return r;
}

/* The one-way test, at the cut's end: (l) the sites that can reach each other
 * both ways committed at least ONE_WAY_MIN rounds during its 60 s (a round
 * takes about 3 s here; the rule of one site's own view committed none). */
#define ONE_WAY_MIN 8
static void one_way_check(world *w) {
    long k = top_round(w) - w->cut_r0;
    if (w->c.cut_rounds_min < 0 || k < w->c.cut_rounds_min) w->c.cut_rounds_min = k;
    if (k < ONE_WAY_MIN)
        fail_inv(w, "(l) a one-way cut of 60 s: %ld rounds committed during it (at least %d)", k,
                 ONE_WAY_MIN);
}

static void fault(world *w, const sn_event *e) {
    site *s = &w->s[e->a];
    trace(w, e->a, SN_FAULT, e->fault, e->b, 0);
    if (w->one_way && e->fault == F_CUT1) w->cut_r0 = top_round(w);
    if (w->one_way && e->fault == F_UNCUT) one_way_check(w);
    switch (e->fault) {
    case F_PARTITION: {
        int n0 = 0;
        for (int i = 0; i < w->n; i++) n0 += !(w->net.group[i] = (int)al_rng_below(&w->rng, 2));
        if (n0 == 0 || n0 == w->n) w->net.group[e->a] ^= 1;
        w->partitioned = 1;
        w->c.partitions++;
        recompute_caps(w);
        break;
    }
    case F_HEAL:
        memset(w->net.group, 0, sizeof w->net.group);
        w->partitioned = 0;
        break;
    case F_CRASH:
        if (s->up) crash(w, e->a, e->dur, 0);
        break;
    case F_STALE:
        if (s->up) crash(w, e->a, e->dur, 1);
        break;
    case F_CRASH_ALL:
        for (int i = 0; i < w->n; i++)
            if (w->s[i].up) crash(w, i, e->dur, (int)al_rng_below(&w->rng, 2));
        break;
    case F_CRASH_MID:
        if (s->up) s->crash_mid = (int)al_rng_below(&w->rng, 12);
        break;
    case F_CORRUPT: { /* one site at a time: a good copy must exist somewhere to pull */
        int bad = 0;
        for (int i = 0; i < w->n; i++) bad += w->s[i].up && !heq(&w->s[i].theta, &w->s[i].m.base);
        if (s->up && !bad)
            s->theta = hmk(mix(hval(&s->theta), 0xbadull + (uint64_t)w->c.corrupts++));
        break;
    }
    case F_CUT:
    case F_UNCUT:
        w->net.cut[e->a][e->b] = w->net.cut[e->b][e->a] = e->fault == F_CUT;
        break;
    case F_CUT1:
        w->net.cut[e->a][e->b] = 1;
        w->c.one_way++;
        break;
    }
}

static void quiesce(world *w) {
    w->quiesced = 1;
    w->partitioned = 0;
    memset(w->net.group, 0, sizeof w->net.group);
    memset(w->net.cut, 0, sizeof w->net.cut);
    w->net.drop = 0;
    for (int i = 0; i < w->n; i++) {
        w->s[i].crash_mid = -1;
        if (i == w->dead && w->s[i].up) crash(w, i, 1e9, 0);
        if (i != w->dead && !w->s[i].up) start_site(w, i);
    }
    w->r_quiesce = 0;
    for (int i = 0; i < w->n; i++)
        if (w->s[i].m.round > w->r_quiesce) w->r_quiesce = w->s[i].m.round;
}

static void dispatch(world *w, const sn_event *e) {
    site *s = &w->s[e->site];
    int mine = s->up && e->inc == s->inc; /* a local event of this incarnation */
    if (e->kind != SN_TICK && e->kind != SN_STATUS && e->kind != SN_STATS)
        trace(w, e->site, e->kind, e->from, e->round, (long)e->epoch);
    switch (e->kind) {
    case SN_STATUS:
    case SN_STATS:
        if (!s->up || !sn_link_up(&w->net, e->from, e->site)) break; /* lost in the partition */
        s->heard[e->from] = w->now;
        feed(w, e->site,
             (al_round_event){.type = e->kind == SN_STATUS ? AL_EV_STATUS : AL_EV_STATS,
                              .peer = e->from,
                              .round = e->round,
                              .epoch = e->epoch,
                              .st = e->st});
        break;
    case SN_TICK:
        if (s->up) feed(w, e->site, (al_round_event){.type = AL_EV_TICK});
        push(w, SN_TICK, e->site, TICK_S, (sn_event){0});
        break;
    case SN_TRAINED:
        if (mine && e->n == s->train_seq)
            feed(
                w, e->site,
                (al_round_event){.type = AL_EV_INTERVAL_DONE, .round = e->round, .hash = s->theta});
        break;
    case SN_XCHECK:
        if (mine) exchange_check(w, e);
        break;
    case SN_CAND:
        if (!mine) break;
        s->cand_ok = 1;
        s->cand_round = e->round;
        s->cand = e->hash;
        feed(w, e->site,
             (al_round_event){.type = AL_EV_CANDIDATE,
                              .round = e->round,
                              .epoch = e->epoch,
                              .hash = e->hash,
                              .theta = e->st.base});
        break;
    case SN_SYNCED:
        if (mine) sync_answer(w, e);
        break;
    case SN_FETCHED:
        if (mine) fetch_answer(w, e);
        break;
    case SN_RELOADED:
        if (!mine) break;
        s->theta = e->hash;
        w->c.reloads += heq(&e->hash, &s->disk.hard.base);
        feed(w, e->site, (al_round_event){.type = AL_EV_RELOADED, .hash = e->hash});
        break;
    case SN_FAULT:
        fault(w, e);
        break;
    case SN_RESTART:
        if (!s->up && e->inc == s->inc && !(w->quiesced && e->site == w->dead))
            start_site(w, e->site);
        break;
    case SN_QUIESCE:
        quiesce(w);
        break;
    }
}

/* After every event: (t), and after the heal, how far the sites are together. */
static void check_after(world *w) {
    int together = 1, ref = w->dead == 0;
    for (int i = 0; i < w->n; i++) {
        const site *s = &w->s[i];
        if (i == w->dead && w->quiesced) continue;
        together &= s->up && s->m.round == w->s[ref].m.round && heq(&s->m.base, &w->s[ref].m.base);
        if (!s->up) continue;
        for (int j = 0; j < w->n; j++)
            if (j != i && s->m.peer[j].alive && w->now - s->heard[j] > w->cfg.peer_timeout_s + 1)
                return fail_inv(w, "(t) site %d still counts site %d live after %.2f s of silence",
                                i, j, w->now - s->heard[j]);
    }
    if (w->quiesced && together && w->s[ref].m.round > w->conv_round)
        w->conv_round = w->s[ref].m.round;
}

static const char *const CONFIG_NAMES[] = {"3 sites, majority", "5 sites, majority", "2 sites, all",
                                           "9 sites, majority"};
/* configuration = seed mod 3, or 3 (9 sites) in the 9-site test */
#define CONFIG_OF(w, seed) ((w)->nine ? 3 : (int)((seed) % 3))

static void setup(world *w, uint64_t seed) {
    static const int nsites[] = {3, 5, 2, 9};
    static const al_quorum quorum[] = {AL_QUORUM_MAJORITY, AL_QUORUM_MAJORITY, AL_QUORUM_ALL,
                                       AL_QUORUM_MAJORITY};
    w->heap.n = 0;
    w->nvotes = 0;
    w->seed = seed;
    w->failed = w->quiesced = w->partitioned = 0;
    w->conv_round = -1;
    w->now = 0;
    memset(w->has, 0, sizeof w->has);
    memset(&w->trace, 0, sizeof w->trace);
    al_rng_seed(&w->rng, seed);
    int kind = CONFIG_OF(w, seed);
    w->n = nsites[kind];
    w->cfg = (al_round_cfg){.nsites = w->n,
                            .quorum = quorum[kind],
                            .min_sites = 1,
                            .heartbeat_s = 1,
                            .peer_timeout_s = 5,
                            .deadline_s = 4,
                            .carry = w->carry};
    w->q = al_quorum_size(w->cfg.quorum, w->n);
    memset(&w->net, 0, sizeof w->net);
    w->net = (sn_net){.n = w->n,
                      .rng = &w->rng,
                      .drop = sn_uniform(&w->rng, 0, 0.2),
                      .dup = sn_uniform(&w->rng, 0, 0.1),
                      .dmin = 0.005,
                      .dmax = sn_uniform(&w->rng, 0.02, 0.5)};
    w->t_quiesce = sn_uniform(&w->rng, 15, 60);
    w->t_end = w->t_quiesce + 45;
    for (int i = 0; i < w->n; i++) {
        memset(&w->s[i], 0, sizeof w->s[i]);
        al_round_hash genesis = hmk(GENESIS);
        rd_init(&w->s[i].disk, &genesis);
        start_site(w, i);
        push(w, SN_TICK, i, sn_uniform(&w->rng, 0, TICK_S), (sn_event){0});
    }
    int dead = (int)al_rng_below(&w->rng, (uint64_t)w->n);
    w->dead = w->dead_mode && w->cfg.quorum == AL_QUORUM_MAJORITY ? dead : -1;
    if (w->one_way) { /* one one-way cut of 60 s from t = 5 s, a few lost messages */
        w->net.drop = sn_uniform(&w->rng, 0, 0.05);
        sn_event e = {.fault = F_CUT1, .a = (int)al_rng_below(&w->rng, (uint64_t)w->n)};
        e.b = (e.a + 1 + (int)al_rng_below(&w->rng, (uint64_t)w->n - 1)) % w->n;
        push(w, SN_FAULT, 0, 5, e);
        e.fault = F_UNCUT;
        push(w, SN_FAULT, 0, 65, e);
        w->t_quiesce = 70;
        w->t_end = w->t_quiesce + 45;
        push(w, SN_QUIESCE, 0, w->t_quiesce, (sn_event){0});
        return;
    }
    int nf = 1 + (int)al_rng_below(&w->rng, 12);
    for (int k = 0; k < nf; k++) {
        sn_event e = {.fault = (int)al_rng_below(&w->rng, F_NFAULTS),
                      .a = (int)al_rng_below(&w->rng, (uint64_t)w->n),
                      .dur = sn_uniform(&w->rng, 0.5, 15)};
        e.b = (e.a + 1 + (int)al_rng_below(&w->rng, (uint64_t)w->n - 1)) % w->n;
        push(w, SN_FAULT, 0, sn_uniform(&w->rng, 0.5, w->t_quiesce), e);
    }
    push(w, SN_QUIESCE, 0, w->t_quiesce, (sn_event){0});
}

/* One schedule; 0 when every invariant held. */
static int run_schedule(world *w, uint64_t seed) {
    setup(w, seed);
    sn_event e;
    while (!w->failed && sn_pop(&w->heap, &e) && e.t <= w->t_end) {
        w->now = e.t;
        w->c.events++;
        dispatch(w, &e);
        if (!w->failed) check_after(w);
    }
    if (!w->failed && w->conv_round < w->r_quiesce + 3)
        fail_inv(w, "(c) after the heal at round %ld the sites were together only up to round %ld",
                 w->r_quiesce, w->conv_round);
    for (int i = 0; i < w->n && !w->failed; i++)
        if (i != w->dead && !heq(&w->s[i].theta, &w->s[i].m.base) && w->s[i].m.phase != AL_PH_SYNC)
            fail_inv(w, "(c) site %d ends with a corrupted theta_global never repaired", i);
    w->c.schedules++;
    w->c.sent += w->net.sent;
    w->c.lost += w->net.dropped;
    w->c.dups += w->net.duplicated;
    if (w->failed && w->keep_going) {
        printf("  seed %llu (%s): %s\n", (unsigned long long)seed, CONFIG_NAMES[CONFIG_OF(w, seed)],
               w->why);
    } else if (w->failed) {
        printf("  seed %llu (%s) failed at t=%.3f: %s\n  replay: %s%s --seed %llu\n"
               "  last events:\n",
               (unsigned long long)seed, CONFIG_NAMES[CONFIG_OF(w, seed)], w->now, w->why,
               w->nine      ? "AL_ROUND_NINE=1 "
               : w->one_way ? "AL_ROUND_ONEWAY=1 "
                            : "",
               prog, (unsigned long long)seed);
        sn_trace_print(&w->trace, 40);
    }
    return w->failed;
}

static void world_free(world *w) {
    sn_heap_free(&w->heap);
    free(w->votes);
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *s = getenv(name);
    return s && *s ? strtoull(s, NULL, 10) : dflt;
}

/* Seeds first + k (mod 3), stepping by 3: the share of configuration k; kind
 * 3 (9 sites): AL_ROUND_SCHEDULES9 seeds from first, each with 9 sites. */
static void simulate(int kind) {
    world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    uint64_t first = env_u64("AL_ROUND_FIRST_SEED", 0);
    uint64_t end = first + env_u64("AL_ROUND_SCHEDULES", 10000);
    w->nine = kind == 3;
    if (w->nine) end = first + 3 * env_u64("AL_ROUND_SCHEDULES9", 300); /* (every third seed) */
    w->dead_mode = (int)env_u64("AL_ROUND_DEAD", 0);
    w->carry = (int)env_u64("AL_ROUND_CARRY", 1);
    w->keep_going = (int)env_u64("AL_ROUND_KEEP_GOING", 0);
    long failed = 0;
    double t0 = al_now();
    for (uint64_t seed = first + (3 + (uint64_t)kind - first % 3) % 3;
         seed < end && (!failed || w->keep_going); seed += 3)
        failed += run_schedule(w, seed);
    if (failed) print_message("  %ld schedules failed\n", failed);
    counts c = w->c;
    print_message(
        "  %s: %ld schedules in %.1f s wall, %ld events; %ld commits, %ld pulls (%ld "
        "repairs), %ld reloads, %ld crashes, %ld partitions, %ld corruptions, %ld peer drops, "
        "epoch max %llu, %ld values carried (%ld fetched); %ld messages, %ld lost, %ld "
        "duplicated; %ld restarts from an older checkpoint, %ld replays of the commit log, %ld "
        "commits taken from a commit file, %ld applies torn; %ld pulls served short, %ld pulls "
        "given up\n",
        CONFIG_NAMES[kind], c.schedules, al_now() - t0, c.events, c.commits, c.adopts, c.repairs,
        c.reloads, c.crashes, c.partitions, c.corrupts, c.drops, (unsigned long long)c.max_epoch,
        c.carried, c.fetches, c.sent, c.lost, c.dups, c.stale, c.replays, c.takes, c.torn,
        c.short_served, c.sync_gave_up);
    if (kind == 3)
        print_message("  at most %d actions queued by one event (the queue holds %d), none lost\n",
                      c.max_queue, AL_ROUND_MAX_ACTIONS);
    world_free(w);
    free(w);
    if (failed) fail_msg("an invariant failed (seed above)");
    assert_true(c.commits > c.schedules * 3); /* the schedules did make progress */
}

static void test_sim_3_majority(void **st) {
    (void)st;
    simulate(0);
}
static void test_sim_5_majority(void **st) {
    (void)st;
    simulate(1);
}
static void test_sim_2_all(void **st) {
    (void)st;
    simulate(2);
}
/* 9 sites (issue 32): more peers than the agent's action queue once held for
 * the actions of several events; taken after every event, none is lost */
static void test_sim_9_majority(void **st) {
    (void)st;
    simulate(3);
}

/* One-way cuts (issue 32): 3 or 5 sites (seed mod 3 = 0 or 1), one site's
 * messages to one peer lost for 60 s and nothing else wrong but a few lost
 * messages; every schedule alternates the carry (odd seed / 3: on, even: off,
 * the agent's mode). (l): the others commit at least ONE_WAY_MIN rounds during
 * the cut; every other invariant as in the random schedules.
 * AL_ROUND_SCHEDULES_ONEWAY schedules (default 600); AL_ROUND_ONEWAY=1 with
 * --seed replays one. */
static void test_sim_one_way(void **st) {
    (void)st;
    world *w = calloc(1, sizeof *w);
    assert_non_null(w);
    w->one_way = 1;
    w->c.cut_rounds_min = -1;
    w->keep_going = (int)env_u64("AL_ROUND_KEEP_GOING", 0);
    uint64_t first = env_u64("AL_ROUND_FIRST_SEED", 0),
             n = env_u64("AL_ROUND_SCHEDULES_ONEWAY", 600);
    long failed = 0, runs = 0;
    double t0 = al_now();
    for (uint64_t seed = first; runs < (long)n && (!failed || w->keep_going); seed++) {
        if (seed % 3 == 2) continue; /* (2 sites, quorum all: a cut leaves no quorum) */
        w->carry = (int)(seed / 3 & 1);
        failed += run_schedule(w, seed);
        runs++;
    }
    if (failed) print_message("  %ld schedules failed\n", failed);
    print_message("  one-way cuts of 60 s: %ld schedules (3 and 5 sites, carry on and off) in "
                  "%.1f s wall; %ld commits; at least %ld rounds committed during a cut\n",
                  runs, al_now() - t0, w->c.commits, w->c.cut_rounds_min);
    world_free(w);
    free(w);
    if (failed) fail_msg("an invariant failed (seed above)");
}

/* ---- direct cases ------------------------------------------------------------------ */

static void test_quorum_names(void **st) {
    (void)st;
    const char *names[] = {"majority", "all", "any"};
    for (int k = 0; k < 3; k++) {
        al_quorum q = AL_QUORUM_ANY;
        al_err err;
        assert_int_equal(al_quorum_parse(names[k], &q, &err), 0);
        assert_string_equal(al_quorum_name(q), names[k]);
    }
    int want[3][5] = {{1, 2, 2, 3, 3}, {1, 2, 3, 4, 5}, {1, 1, 1, 1, 1}};
    for (int q = 0; q < 3; q++)
        for (int n = 1; n <= 5; n++)
            assert_int_equal(al_quorum_size((al_quorum)q, n), want[q][n - 1]);
    al_quorum q = AL_QUORUM_ALL;
    al_err err;
    assert_int_equal(al_quorum_parse("most", &q, &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'most': expected majority, all or any"));
    assert_int_equal(q, AL_QUORUM_ALL); /* untouched */
    assert_int_equal(al_quorum_parse(NULL, &q, &err), AL_ECONFIG);
    assert_string_equal(al_quorum_name((al_quorum)7), "?");
    /* the events' names (the debug trace): one each, distinct, "?" past the end */
    assert_string_equal(al_round_event_name(AL_EV_TICK), "tick");
    assert_string_equal(al_round_event_name(AL_EV_EXCHANGE_FAILED), "exchange-failed");
    assert_string_equal(al_round_event_name(AL_EV_RELOADED), "reloaded");
#define ONE(e, s) +1
    const int nev = 0 AL_ROUND_EVENTS(ONE);
#undef ONE
    for (int i = 0; i < nev; i++)
        for (int j = 0; j < i; j++)
            assert_string_not_equal(al_round_event_name((al_round_event_type)i),
                                    al_round_event_name((al_round_event_type)j));
    assert_string_equal(al_round_event_name((al_round_event_type)nev), "?");
}

static const al_round_cfg GOOD = {.nsites = 3,
                                  .self = 0,
                                  .quorum = AL_QUORUM_MAJORITY,
                                  .min_sites = 1,
                                  .heartbeat_s = 1,
                                  .peer_timeout_s = 5,
                                  .deadline_s = 4};
static const al_round_start START = {.round = 0, .last.round = -1, .held_round = -1};

static void test_bad_cfg(void **st) {
    (void)st;
    al_round *m = calloc(1, sizeof *m);
    assert_non_null(m);
    al_err err;
    assert_int_equal(al_round_init(m, &GOOD, &START, 0, &err), 0);
    struct {
        al_round_cfg cfg;
        const char *msg;
    } bad[] = {
        {{.nsites = 0}, "0 sites configured: need 1 to 16"},
        {{.nsites = 17}, "17 sites configured: need 1 to 16"},
        {{.self = -1}, "index -1 is not one of the 3 sites"},
        {{.self = 3}, "index 3 is not one of the 3 sites"},
        {{.quorum = (al_quorum)3}, "quorum 3 is not majority, all or any"},
        {{.min_sites = 0}, "min_sites = 0: need 1 to 3"},
        {{.min_sites = 4}, "min_sites = 4: need 1 to 3"},
        {{.heartbeat_s = 0}, "heartbeat_s = 0: need a positive number"},
        {{.heartbeat_s = NAN}, "heartbeat_s = nan: need a positive number"},
        {{.peer_timeout_s = 1}, "peer_timeout_s = 1: must exceed heartbeat_s = 1"},
        {{.peer_timeout_s = INFINITY}, "peer_timeout_s = inf: must exceed"},
        {{.deadline_s = -2}, "deadline_s = -2: need a positive number"},
    };
    for (size_t k = 0; k < AL_ARRAY_LEN(bad); k++) {
        al_round_cfg c = GOOD; /* one field changed per case */
        const al_round_cfg *b = &bad[k].cfg;
        if (k < 2) c.nsites = b->nsites;
        if (k >= 2 && k < 4) c.self = b->self;
        if (k == 4) c.quorum = b->quorum;
        if (k >= 5 && k < 7) c.min_sites = b->min_sites;
        if (k >= 7 && k < 9) c.heartbeat_s = b->heartbeat_s;
        if (k >= 9 && k < 11) c.peer_timeout_s = b->peer_timeout_s;
        if (k == 11) c.deadline_s = b->deadline_s;
        assert_int_equal(al_round_init(m, &c, &START, 0, &err), AL_ECONFIG);
        if (!strstr(err.msg, bad[k].msg))
            fail_msg("case %zu: '%s' lacks '%s'", k, err.msg, bad[k].msg);
    }
    al_round_start neg = START;
    neg.round = -1;
    assert_int_equal(al_round_init(m, &GOOD, &neg, 0, &err), AL_EINVAL);
    free(m);
}

/* Feed one event and return the actions of the given type (up to max). */
/* Feed ev; the actions it produced, into got (at most AL_ROUND_MAX_ACTIONS). */
static int feed_all(al_round *m, al_round_event ev, al_round_action *got) {
    al_round_step(m, &ev);
    return al_round_ready(m, got, AL_ROUND_MAX_ACTIONS);
}

/* Feed ev; of the actions it produced, those of type t into got (at most max). */
static int step_take(al_round *m, al_round_event ev, al_round_action_type t, al_round_action *got,
                     int max) {
    al_round_action acts[AL_ROUND_MAX_ACTIONS];
    int n = feed_all(m, ev, acts), k = 0;
    for (int i = 0; i < n; i++)
        if (acts[i].type == t && k < max) got[k++] = acts[i];
    return k;
}

/* A machine started from s under cfg (freed by the caller). */
static al_round *new_machine(const al_round_cfg *cfg, const al_round_start *s) {
    al_round *m = calloc(1, sizeof *m);
    assert_non_null(m);
    al_err err;
    assert_int_equal(al_round_init(m, cfg, s, 0, &err), 0);
    return m;
}

/* Two of three sites at this round hold another base: pull theirs, adopt only it. */
static void test_majority_base(void **st) {
    (void)st;
    al_round_start s = START;
    s.round = 4;
    s.base = hmk(1);
    al_round *m = new_machine(&GOOD, &s);
    al_round_status peer = {.round = 4, .base = hmk(2)};
    al_round_action a[4];
    al_round_event ev = {.type = AL_EV_STATUS, .now = 0.1, .peer = 1, .st = peer};
    assert_int_equal(step_take(m, ev, AL_ACT_SYNC, a, 4), 0); /* one site is not a majority */
    ev.peer = 2;
    assert_int_equal(step_take(m, ev, AL_ACT_SYNC, a, 4), 1);
    assert_int_equal(a[0].peer, 1);
    assert_int_equal(a[0].round, 4);
    assert_true(heq(&a[0].hash, &peer.base));
    al_round_event got = {.type = AL_EV_SYNCED, .now = 0.5, .peer = 1, .round = 4, .hash = hmk(3)};
    assert_int_equal(step_take(m, got, AL_ACT_ADOPT, a, 4), 0); /* not the hash asked for */
    got.now = 2;                                                /* asked again after a heartbeat */
    assert_int_equal(
        step_take(m, (al_round_event){.type = AL_EV_TICK, .now = 2}, AL_ACT_SYNC, a, 4), 1);
    got.peer = a[0].peer;
    got.hash = peer.base;
    assert_int_equal(step_take(m, got, AL_ACT_ADOPT, a, 4), 1);
    assert_int_equal(a[0].round, 4);
    assert_true(heq(&m->base, &peer.base));
    assert_int_equal(m->phase, AL_PH_TRAIN);
    free(m);
}

/* A restarted site holds the vote it persisted, in its epoch. */
static void test_restart_holds_vote(void **st) {
    (void)st;
    al_round *m = calloc(1, sizeof *m);
    assert_non_null(m);
    al_err err;
    al_round_start s = START;
    s.round = 7;
    s.last = (al_round_vote){.round = 7, .epoch = 3, .vote = AL_VOTE_HASH, .value.hash = hmk(9)};
    s.held_round = 7;
    s.held = s.last.value;
    assert_int_equal(al_round_init(m, &GOOD, &s, 0, &err), 0);
    al_round_status me;
    al_round_status_get(m, &me);
    assert_int_equal(me.epoch, 3);
    assert_int_equal(me.vote, AL_VOTE_HASH);
    assert_true(heq(&me.value.hash, &s.last.value.hash));
    assert_true(m->have_candidate);  /* the candidate persisted with the vote */
    s.last.round = s.held_round = 6; /* a vote of a committed round binds nothing */

    assert_int_equal(al_round_init(m, &GOOD, &s, 0, &err), 0);
    al_round_status_get(m, &me);
    assert_int_equal(me.epoch, 0);
    assert_int_equal(me.vote, AL_VOTE_NONE);
    free(m);
}

/* A peer's status of a later incarnation (a restart) replaces the kept one
 * even at an older round; a late status of an earlier one does not; a peer
 * without incarnations (0) is compared by (round, epoch, vote). */
static void test_restart_incarnation(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.incarnation = 5;
    al_round *m = new_machine(&cfg, &START);
    al_round_status me;
    al_round_status_get(m, &me);
    assert_int_equal(me.inc, 5);
    al_round_event ev = {.type = AL_EV_STATUS, .now = 0.1, .peer = 1};
    ev.st = (al_round_status){.round = 9, .epoch = 2, .inc = 100};
    al_round_step(m, &ev);
    ev.st = (al_round_status){.round = 4, .inc = 200}; /* restarted from an older state */
    al_round_step(m, &ev);
    assert_int_equal(m->peer[1].st.round, 4);
    assert_int_equal(m->peer[1].st.inc, 200);
    ev.st = (al_round_status){.round = 9, .epoch = 2, .inc = 100}; /* late, of its past life */
    al_round_step(m, &ev);
    assert_int_equal(m->peer[1].st.round, 4);
    ev.st = (al_round_status){.round = 5, .inc = 200};
    al_round_step(m, &ev);
    assert_int_equal(m->peer[1].st.round, 5);
    ev.peer = 2; /* no incarnations: an older status is not newer */
    ev.st = (al_round_status){.round = 9};
    al_round_step(m, &ev);
    ev.st = (al_round_status){.round = 4};
    al_round_step(m, &ev);
    assert_int_equal(m->peer[2].st.round, 9);
    free(m);
}

/* The first action of type t among got[0..n), or NULL. */
static const al_round_action *find_act(const al_round_action *got, int n, al_round_action_type t) {
    for (int i = 0; i < n; i++)
        if (got[i].type == t) return &got[i];
    return NULL;
}

/* Paxos' carry (al_round_cfg.carry), site 0 of three: it voted for its
 * candidate V in attempt 0, 1 voted null, 2 died before its vote was seen. V
 * may have been committed (2 may have voted for it), so no other value may be:
 * site 0 leaves attempt 0 (the vote it waits for is a dead site's), persists
 * its promise for attempt 1 and, with a quorum of reports (its own and 1's),
 * votes for V again, which commits with 1's vote. */
static void test_carry_holder(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.carry = 1;
    al_round_start s = START;
    s.base = hmk(1);
    al_round *m = new_machine(&cfg, &s);
    al_round_action a[AL_ROUND_MAX_ACTIONS];
    const al_round_action *x;
    al_round_status open0 = {.round = 0, .base = hmk(1)};
    feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.1, .peer = 1, .st = open0}, a);
    int n =
        feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.1, .peer = 2, .st = open0}, a);
    assert_non_null(find_act(a, n, AL_ACT_TRAIN));
    feed_all(m, (al_round_event){.type = AL_EV_INTERVAL_DONE, .now = 0.2, .hash = hmk(1)}, a);
    feed_all(m, (al_round_event){.type = AL_EV_STATS, .now = 0.3, .peer = 1}, a);
    n = feed_all(m, (al_round_event){.type = AL_EV_STATS, .now = 0.3, .peer = 2}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_EXCHANGE));
    assert_int_equal(x->members, 7);
    n = feed_all(m, (al_round_event){.type = AL_EV_EXCHANGE_DONE, .now = 0.4}, a);
    assert_non_null(find_act(a, n, AL_ACT_PROPOSE));
    al_round_hash v = hmk(50);
    n = feed_all(
        m, (al_round_event){.type = AL_EV_CANDIDATE, .now = 0.5, .hash = v, .theta = hmk(1)}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_PERSIST_VOTE));
    assert_int_equal(x->vote, AL_VOTE_HASH);
    al_round_status null1 = {.round = 0, .base = hmk(1), .vote = AL_VOTE_NULL};
    for (double t = 1; t < 5.6; t += 1) /* 1 is heard, 2 is not */
        feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = t, .peer = 1, .st = null1}, a);
    assert_int_equal(m->epoch, 0); /* 2 is alive: its vote may come */
    n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = 5.6}, a);
    assert_non_null(find_act(a, n, AL_ACT_DROP));
    assert_int_equal(m->epoch, 1);
    assert_null(find_act(a, n, AL_ACT_REVERT)); /* V is kept: it may be carried */
    assert_non_null(x = find_act(a, n, AL_ACT_PERSIST_VOTE));
    assert_int_equal(x->vote, AL_VOTE_NONE); /* the promise */
    assert_int_equal(x->rec.promised, 1);
    assert_true(x->rec.accepted && x->rec.acc_epoch == 0 && heq(&x->rec.acc_value.hash, &v));
    al_round_status open1 = {.round = 0, .epoch = 1, .base = hmk(1)};
    n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 5.7, .peer = 1, .st = open1}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_PERSIST_VOTE));
    assert_int_equal(x->vote, AL_VOTE_HASH);
    assert_true(heq(&x->hash, &v));
    assert_int_equal(x->rec.epoch, 1);
    assert_int_equal(x->rec.value.origin, 0); /* carried from attempt 0 */
    assert_int_equal(x->rec.value.members, 7);
    al_round_status voted1 = open1;
    voted1.vote = AL_VOTE_HASH;
    voted1.value = x->rec.value;
    n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 5.8, .peer = 1, .st = voted1}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_APPLY));
    assert_true(heq(&x->hash, &v));
    assert_int_equal(m->round, 1);
    free(m);
}

/* The agent's restart with the carry (every [outer] overlap since issue 32):
 * site 0 voted V in attempt 0 of round 4 and restarted with V's candidate
 * restored (hard.json's held candidate). Its first status reports V as its
 * latest hash vote and its vote stands; 1 voted null, 2 is never heard. Once
 * 1 is heard (2 counts as not alive), attempt 0 is left; the promise of
 * attempt 1 is persisted before a status shows attempt 1, and with 1's report
 * V is carried from the held copy: no fetch. */
static void test_carry_restart(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.carry = 1;
    al_round_hash v = hmk(60);
    al_round_value val = {.hash = v, .members = 7, .origin = 0};
    al_round_start s = START;
    s.round = 4;
    s.base = hmk(4);
    s.last = (al_round_vote){.round = 4,
                             .epoch = 0,
                             .vote = AL_VOTE_HASH,
                             .value = val,
                             .accepted = 1,
                             .acc_epoch = 0,
                             .acc_value = val};
    s.held_round = 4;
    s.held = val;
    al_round *m = new_machine(&cfg, &s);
    al_round_status me;
    al_round_status_get(m, &me);
    assert_int_equal(me.vote, AL_VOTE_HASH);
    assert_true(me.accepted && me.acc_epoch == 0 && heq(&me.acc_value.hash, &v));
    assert_true(m->have_candidate);
    al_round_action a[AL_ROUND_MAX_ACTIONS];
    const al_round_action *x;
    al_round_status null1 = {.round = 4, .base = hmk(4), .vote = AL_VOTE_NULL};
    int n = 0;
    for (double t = 0.1; t < 30 && m->epoch == 0; t += 0.25) {
        al_round_event ev = {.type = AL_EV_STATUS, .now = t, .peer = 1, .st = null1};
        if (t - (int)t >= 0.5) ev = (al_round_event){.type = AL_EV_TICK, .now = t};
        n = feed_all(m, ev, a);
        if (find_act(a, n, AL_ACT_TRAIN)) { /* (the agent replays the interval voted on) */
            ev =
                (al_round_event){.type = AL_EV_INTERVAL_DONE, .now = t, .round = 4, .hash = hmk(4)};
            n = feed_all(m, ev, a);
        }
    }
    assert_int_equal(m->epoch, 1);
    int promise = -1, status = -1;
    for (int i = 0; i < n; i++) {
        if (a[i].type == AL_ACT_PERSIST_VOTE && promise < 0) promise = i;
        if (a[i].type == AL_ACT_SEND_STATUS && a[i].st.epoch == 1 && status < 0) status = i;
    }
    assert_true(promise >= 0 && a[promise].vote == AL_VOTE_NONE && a[promise].rec.promised == 1);
    assert_true(status < 0 || promise < status); /* persisted before any status shows it */
    assert_true(a[promise].rec.accepted && heq(&a[promise].rec.acc_value.hash, &v));
    al_round_status open1 = {.round = 4, .epoch = 1, .base = hmk(4)};
    n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 31, .peer = 1, .st = open1}, a);
    assert_null(find_act(a, n, AL_ACT_FETCH)); /* held: carried from the restored copy */
    assert_non_null(x = find_act(a, n, AL_ACT_PERSIST_VOTE));
    assert_int_equal(x->vote, AL_VOTE_HASH);
    assert_true(heq(&x->hash, &v));
    assert_int_equal(x->rec.value.origin, 0);
    free(m);
}

/* A site left out as a liar (AL_EV_EXCLUDE, as the agent feeds it) reports
 * W, a value only it voted for (its own exchange, whose lie the others
 * refused): its report is neither counted nor carried, so the attempt
 * exchanges afresh among the others; before, the agent fetched W from the
 * liar and committed it (test_agent 2j with streaming, once). */
static void test_carry_not_from_liar(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.carry = 1;
    al_round_start s = START;
    s.base = hmk(1);
    s.last = (al_round_vote){.round = 0, .epoch = 0, .vote = AL_VOTE_NULL, .promised = 1};
    al_round *m = new_machine(&cfg, &s);
    assert_int_equal(m->epoch, 1);
    al_round_action a[4 * AL_ROUND_MAX_ACTIONS]; /* (four feeds a step) */
    feed_all(m, (al_round_event){.type = AL_EV_EXCLUDE, .now = 0.05, .peer = 2, .round = 0}, a);
    al_round_status open1 = {.round = 0, .epoch = 1, .base = hmk(1)};
    al_round_status liar = open1;
    liar.accepted = 1;
    liar.acc_epoch = 0;
    liar.acc_value = (al_round_value){.hash = hmk(66), .members = 7};
    int fetched = 0, carried = 0;
    for (double t = 0.1; t < 8; t += 0.25) {
        al_round_event ev = {.type = AL_EV_STATUS, .now = t, .peer = 1, .st = open1};
        int n = feed_all(m, ev, a);
        ev.peer = 2;
        ev.st = liar;
        n += feed_all(m, ev, a + n);
        n += feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = t + 0.1}, a + n);
        if (find_act(a, n, AL_ACT_TRAIN))
            n += feed_all(
                m,
                (al_round_event){.type = AL_EV_INTERVAL_DONE, .now = t, .round = 0, .hash = hmk(1)},
                a + n);
        for (int i = 0; i < n; i++) {
            fetched += a[i].type == AL_ACT_FETCH;
            carried += a[i].type == AL_ACT_PERSIST_VOTE && a[i].vote == AL_VOTE_HASH;
        }
    }
    assert_int_equal(fetched, 0);
    assert_int_equal(carried, 0);
    assert_true(m->phase == AL_PH_STATS || m->phase == AL_PH_EXCHANGE || m->phase == AL_PH_VOTED);
    free(m);
}

/* The other side, site 1: it voted null in attempt 0 and does not hold V;
 * site 0 reports V as its latest hash vote. In attempt 1 site 1 fetches V from
 * 0 and votes for it once it holds it; a failed fetch with no other voter to
 * ask is a null vote, never a vote for a value not held. */
static void test_carry_fetch(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.self = 1;
    cfg.carry = 1;
    al_round_start s = START;
    s.base = hmk(1);
    s.last = (al_round_vote){.round = 0, .epoch = 0, .vote = AL_VOTE_NULL};
    al_round_value v = {.hash = hmk(50), .members = 7, .origin = 0};
    al_round_status rep0 = {
        .round = 0, .epoch = 1, .base = hmk(1), .accepted = 1, .acc_epoch = 0, .acc_value = v};
    for (int fail = 0; fail < 2; fail++) {
        al_round *m = new_machine(&cfg, &s);
        al_round_action a[AL_ROUND_MAX_ACTIONS];
        const al_round_action *x;
        int n = feed_all(
            m, (al_round_event){.type = AL_EV_STATUS, .now = 0.1, .peer = 0, .st = rep0}, a);
        assert_int_equal(m->epoch, 1); /* followed 0 */
        assert_non_null(x = find_act(a, n, AL_ACT_PERSIST_VOTE));
        assert_int_equal(x->rec.promised, 1);
        feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 3.9, .peer = 0, .st = rep0}, a);
        n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = 4.1}, a); /* join deadline */
        assert_non_null(find_act(a, n, AL_ACT_TRAIN));
        n = feed_all(m, (al_round_event){.type = AL_EV_INTERVAL_DONE, .now = 4.2, .hash = hmk(1)},
                     a);
        assert_non_null(x = find_act(a, n, AL_ACT_FETCH));
        assert_int_equal(x->peer, 0);
        assert_true(heq(&x->hash, &v.hash));
        assert_null(find_act(a, n, AL_ACT_PERSIST_VOTE)); /* no vote before it holds V */
        al_round_event got = {.type = fail ? AL_EV_FETCH_FAILED : AL_EV_FETCHED,
                              .now = 4.4,
                              .peer = 0,
                              .round = 0,
                              .hash = v.hash};
        n = feed_all(m, got, a);
        assert_non_null(x = find_act(a, n, AL_ACT_PERSIST_VOTE));
        if (fail) {
            assert_int_equal(x->vote, AL_VOTE_NULL);
            assert_null(find_act(a, n, AL_ACT_HOLD));
        } else {
            assert_int_equal(x->vote, AL_VOTE_HASH);
            assert_true(heq(&x->hash, &v.hash));
            assert_non_null(x = find_act(a, n, AL_ACT_HOLD));
            assert_true(heq(&x->hash, &v.hash));
            assert_true(m->have_candidate);
        }
        free(m);
    }
}

/* Sites 1 and 2 committed V in attempt 1 (their statuses show both votes);
 * site 0, which does not hold V, restarted in attempt 2 (it had left attempt 1
 * with a null vote before their votes came). It knows V is committed, fetches
 * it from a voter (the other one when the first fails) and applies it. */
static void test_commit_elsewhere(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.carry = 1;
    al_round_start s = START;
    s.base = hmk(1);
    s.last = (al_round_vote){.round = 0, .epoch = 1, .vote = AL_VOTE_NULL, .promised = 2};
    al_round *m = new_machine(&cfg, &s);
    assert_int_equal(m->epoch, 2);
    al_round_action a[AL_ROUND_MAX_ACTIONS];
    const al_round_action *x;
    al_round_value v = {.hash = hmk(60), .members = 6, .origin = 1};
    al_round_status voted = {.round = 0,
                             .epoch = 1,
                             .base = hmk(1),
                             .vote = AL_VOTE_HASH,
                             .value = v,
                             .accepted = 1,
                             .acc_epoch = 1,
                             .acc_value = v};
    int n =
        feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.1, .peer = 1, .st = voted}, a);
    assert_null(find_act(a, n, AL_ACT_FETCH)); /* one vote is no commit */
    n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.2, .peer = 2, .st = voted}, a);
    assert_non_null(find_act(a, n, AL_ACT_TRAIN)); /* both heard: joined */
    n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = 0.3}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_FETCH));
    assert_int_equal(x->peer, 1);
    assert_true(heq(&x->hash, &v.hash));
    n = feed_all(m, (al_round_event){.type = AL_EV_FETCH_FAILED, .now = 0.5, .peer = 1}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_FETCH)); /* the other voter */
    assert_int_equal(x->peer, 2);
    assert_null(find_act(a, n, AL_ACT_APPLY));
    n = feed_all(
        m,
        (al_round_event){.type = AL_EV_FETCHED, .now = 0.8, .peer = 2, .round = 0, .hash = v.hash},
        a);
    assert_non_null(x = find_act(a, n, AL_ACT_HOLD));
    assert_true(heq(&x->hash, &v.hash));
    assert_non_null(x = find_act(a, n, AL_ACT_APPLY));
    assert_true(heq(&x->hash, &v.hash));
    assert_int_equal(m->round, 1);
    assert_true(heq(&m->base, &v.hash));
    free(m);
}

/* As test_commit_elsewhere, but both voters have applied V and moved on: each
 * fetch fails (they no longer hold a round-0 candidate). When their statuses
 * show round 1 on V, the site pulls that state at once, not after the fetch's
 * deadline_s, nor when an earlier pull's deadline passes (test_signals'
 * rejoin: c waited 30 s in sync while a and b ran 120 rounds ahead: try_sync
 * with no source kept the last pull's t_sync). */
static void test_commit_fetch_fails(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.carry = 1;
    al_round_start s = START;
    s.base = hmk(1);
    al_round *m = new_machine(&cfg, &s);
    al_round_action a[AL_ROUND_MAX_ACTIONS];
    const al_round_action *x;
    /* the peers are a round ahead: the site pulls round 1 (a sync that sets
     * the pull's deadline, deadline_s ahead) */
    al_round_status one = {.round = 1, .epoch = 0, .base = hmk(2)};
    int n =
        feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.1, .peer = 1, .st = one}, a);
    if (!find_act(a, n, AL_ACT_SYNC))
        n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.2, .peer = 2, .st = one},
                     a);
    for (double t = 0.3; t < 4.05 && !find_act(a, n, AL_ACT_SYNC); t += 0.1)
        n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = t}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_SYNC));
    n = feed_all(m,
                 (al_round_event){
                     .type = AL_EV_SYNCED, .now = 0.4, .peer = x->peer, .round = 1, .hash = hmk(2)},
                 a);
    assert_int_equal(m->round, 1);
    assert_non_null(find_act(a, n, AL_ACT_TRAIN));
    feed_all(m,
             (al_round_event){.type = AL_EV_INTERVAL_DONE, .now = 0.5, .round = 1, .hash = hmk(2)},
             a);
    /* sites 1 and 2 commit V in round 1 between themselves; both fetches of
     * it fail (they applied it and moved on) */
    al_round_value v = {.hash = hmk(60), .members = 6, .origin = 0};
    al_round_status voted = {.round = 1,
                             .epoch = 0,
                             .base = hmk(2),
                             .vote = AL_VOTE_HASH,
                             .value = v,
                             .accepted = 1,
                             .acc_epoch = 0,
                             .acc_value = v};
    feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.6, .peer = 1, .st = voted}, a);
    n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 0.7, .peer = 2, .st = voted}, a);
    for (int k = 0; k < 4 && (x = find_act(a, n, AL_ACT_FETCH)); k++)
        n = feed_all(
            m, (al_round_event){.type = AL_EV_FETCH_FAILED, .now = 0.8 + 0.01 * k, .peer = x->peer},
            a);
    assert_int_equal(m->phase, AL_PH_SYNC);
    /* their statuses show round 2 on V: pulled at once, within a heartbeat,
     * not when the earlier pull's deadline (0.3 + deadline_s) passes */
    al_round_status two = {.round = 2, .epoch = 0, .base = v.hash};
    n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = 1.0, .peer = 1, .st = two}, a);
    for (double t = 1.1; t < 2.05 && !find_act(a, n, AL_ACT_SYNC); t += 0.1)
        n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = t}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_SYNC));
    assert_int_equal(x->peer, 1);
    assert_int_equal(x->round, 2);
    free(m);
}

/* Two sites, quorum majority (both), the peer never heard: the site trains,
 * says "no quorum", votes null once and waits. It used to void attempt after
 * attempt, one per event (over a million in seconds in the agent, a persisted
 * vote each). When the peer is heard, the void attempt is left and the next
 * one begins. */
static void test_alone_no_storm(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.nsites = 2;
    al_round *m = new_machine(&cfg, &START);
    al_round_action a[AL_ROUND_MAX_ACTIONS];
    int trained = 0, votes = 0;
    for (int k = 1; k <= 1200; k++) { /* 60 s of ticks */
        al_round_event ev = {.type = AL_EV_TICK, .now = 0.05 * k, .peer = -1};
        al_round_step(m, &ev);
        int n = al_round_ready(m, a, AL_ROUND_MAX_ACTIONS);
        for (int i = 0; i < n; i++) {
            votes += a[i].type == AL_ACT_PERSIST_VOTE;
            if (a[i].type == AL_ACT_TRAIN && !trained++) {
                al_round_event done = {.type = AL_EV_INTERVAL_DONE,
                                       .now = ev.now,
                                       .peer = -1,
                                       .round = 0,
                                       .hash = m->base};
                al_round_step(m, &done);
            }
        }
    }
    print_message("  alone for 60 s: trained %d, votes persisted %d, epoch %llu, '%s'\n", trained,
                  votes, (unsigned long long)m->epoch, m->health);
    assert_int_equal(trained, 1);
    assert_int_equal(votes, 1);
    assert_int_equal(m->epoch, 0);
    assert_string_equal(m->health, "no quorum: 1 of 2 sites reachable");
    /* the peer is back, at this round and attempt, not yet voted: the null
     * attempt is void now, and the next one starts */
    al_round_event back = {.type = AL_EV_STATUS, .now = 61, .peer = 1, .st = {.round = 0}};
    al_round_step(m, &back);
    assert_int_equal(m->epoch, 1);
    free(m);
}

/* The action queue when its caller does not take the actions (issue 32): 16
 * sites, ticks every heartbeat, nothing taken. The queue fills; what it holds
 * is kept as it was (the newest action used to overwrite the last one),
 * al_round_overflow says so for good, naming the overflow; a machine whose
 * actions are taken after every event never overflows. */
static void test_queue_overflow(void **st) {
    (void)st;
    al_round_cfg cfg = GOOD;
    cfg.nsites = AL_ROUND_MAX_SITES;
    al_round *m = new_machine(&cfg, &START), *ok = new_machine(&cfg, &START);
    al_round_action *full = calloc(AL_ROUND_MAX_ACTIONS, sizeof *full);
    al_round_action *got = calloc(AL_ROUND_MAX_ACTIONS, sizeof *got);
    assert_non_null(full);
    assert_non_null(got);
    al_err err = {0};
    int k = 0;
    for (k = 1; k <= 1000 && m->nout < AL_ROUND_MAX_ACTIONS; k++) {
        al_round_event ev = {.type = AL_EV_TICK, .now = 1.0 * k, .peer = -1};
        al_round_step(m, &ev);
    }
    assert_int_equal(m->nout, AL_ROUND_MAX_ACTIONS);
    memcpy(full, m->out, AL_ROUND_MAX_ACTIONS * sizeof *full);
    /* more, into a full queue: the interval's end (statistics to send, other
     * actions than the queue's last), then ticks */
    al_round_event done = {
        .type = AL_EV_INTERVAL_DONE, .now = 1.0 * k, .peer = -1, .round = 0, .hash = m->base};
    al_round_step(m, &done);
    for (int j = 0; j < 5; j++, k++) {
        al_round_event ev = {.type = AL_EV_TICK, .now = 1.0 * k, .peer = -1};
        al_round_step(m, &ev);
    }
    print_message("  %d sites, %d ticks untaken: %d queued, %d lost\n", cfg.nsites, k - 1, m->nout,
                  m->lost);
    assert_true(m->lost > 0);
    assert_int_equal(m->nout, AL_ROUND_MAX_ACTIONS);
    assert_int_equal(al_round_overflow(m, &err), AL_EINVAL);
    print_message("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "action queue overflow"));
    assert_non_null(strstr(err.msg, "lost"));
    assert_int_equal(al_round_ready(m, got, AL_ROUND_MAX_ACTIONS), AL_ROUND_MAX_ACTIONS);
    assert_memory_equal(got, full, AL_ROUND_MAX_ACTIONS * sizeof *got); /* none overwritten */
    assert_int_equal(al_round_overflow(m, &err), AL_EINVAL);            /* for good */
    for (int j = 1; j <= k; j++) { /* taken after every event: never */
        al_round_event ev = {.type = AL_EV_TICK, .now = 1.0 * j, .peer = -1};
        feed_all(ok, ev, got);
        if (j == 11) {
            done.hash = ok->base;
            feed_all(ok, done, got);
        }
    }
    assert_int_equal(al_round_overflow(ok, &err), 0);
    free(full);
    free(got);
    free(m);
    free(ok);
}

/* Site 0 at round 4; sites 1 and 2 announce round 6 and serve less (a state
 * that does not fit, an older round): neither is asked again for that goal,
 * and with no source left for AL_ROUND_SYNC_BEATS heartbeats the site goes
 * back to the round, saying so; there, a peer still ahead is asked again. */
static void test_sync_short(void **st) {
    (void)st;
    al_round_start s = START;
    s.round = 4;
    al_round *m = new_machine(&GOOD, &s);
    al_round_action a[AL_ROUND_MAX_ACTIONS];
    const al_round_action *x;
    al_round_status ahead = {.round = 6, .base = hmk(7), .inc = 1};
    al_round_event ev = {.type = AL_EV_STATUS, .now = 0.1, .peer = 1, .st = ahead};
    int n = feed_all(m, ev, a);
    assert_non_null(x = find_act(a, n, AL_ACT_SYNC)); /* ahead: its state is pulled */
    assert_int_equal(x->peer, 1);
    ev.peer = 2;
    feed_all(m, ev, a);
    al_round_event bad = {.type = AL_EV_SYNC_FAILED, .now = 0.3, .peer = 1, .short_served = 1};
    feed_all(m, bad, a);
    n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = 1.4}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_SYNC));
    assert_int_equal(x->peer, 2);
    al_round_event older = {.type = AL_EV_SYNCED, .now = 1.6, .peer = 2, .round = 3};
    n = feed_all(m, older, a); /* round 3: less than the 6 it announced */
    assert_null(find_act(a, n, AL_ACT_ADOPT));
    int syncs = 0, back = 0;
    double t_back = 0;
    for (double t = 1.7; t < 8.5 && !back; t += 0.1) { /* both keep announcing round 6 */
        ev.now = t;
        for (int p = 1; p <= 2 && !back; p++) {
            ev.peer = p;
            n = feed_all(m, ev, a);
            for (int i = 0; i < n; i++)
                if (a[i].type == AL_ACT_LOG && strstr(a[i].text, "back to the round")) {
                    back = 1;
                    t_back = t;
                    print_message("  %s\n", a[i].text);
                    assert_non_null(
                        strstr(a[i].text, "served less than announced: site 1, site 2"));
                }
            if (!back) syncs += find_act(a, n, AL_ACT_SYNC) != NULL;
        }
    }
    assert_int_equal(syncs, 0); /* neither asked again, though each was tried once only */
    assert_true(back);
    /* (the next source is looked for a heartbeat after the short answer: from
     * then on, none is found) */
    double t_none = 1.6 + GOOD.heartbeat_s, beats = AL_ROUND_SYNC_BEATS * GOOD.heartbeat_s;
    assert_true(t_back >= t_none + beats - 0.05 && t_back <= t_none + beats + 0.15);
    /* back in the round: a peer still ahead, so its state is asked for again */
    n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = t_back + 0.05}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_SYNC));
    /* within that goal both serve short again; then 2 restarts: another start
     * is another state to serve, so it is asked */
    double t = t_back + 0.2;
    feed_all(m, (al_round_event){.type = AL_EV_SYNC_FAILED, .now = t, .peer = 1, .short_served = 1},
             a);
    n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = t + 1.1}, a);
    assert_non_null(x = find_act(a, n, AL_ACT_SYNC));
    assert_int_equal(x->peer, 2);
    feed_all(
        m,
        (al_round_event){.type = AL_EV_SYNC_FAILED, .now = t + 1.2, .peer = 2, .short_served = 1},
        a);
    n = feed_all(m, (al_round_event){.type = AL_EV_TICK, .now = t + 2.3}, a);
    assert_null(find_act(a, n, AL_ACT_SYNC));
    al_round_status again = ahead;
    again.inc = 2;
    n = feed_all(m, (al_round_event){.type = AL_EV_STATUS, .now = t + 2.4, .peer = 2, .st = again},
                 a);
    assert_non_null(x = find_act(a, n, AL_ACT_SYNC));
    assert_int_equal(x->peer, 2);
    free(m);
}

/* al_round_left_out from each site's view (issue 32): sites a, b, c = 0, 1, 2,
 * all live; hears[i] is what site i's status says it hears. */
static uint32_t left_out_at(int self, const uint32_t hears[3], int fed) {
    al_round_cfg cfg = GOOD;
    cfg.self = self;
    al_round *m = new_machine(&cfg, &START);
    al_round_action got[AL_ROUND_MAX_ACTIONS];
    if (fed) { /* the caller's measure (the agent) */
        al_round_event ev = {.type = AL_EV_HEARS, .now = 0.1};
        ev.st.hears = hears[self];
        feed_all(m, ev, got);
    }
    for (int i = 0; i < 3; i++) {
        if (i == self) continue;
        al_round_event ev = {.type = AL_EV_STATUS, .now = 0.1, .peer = i};
        ev.st.hears = hears[i];
        feed_all(m, ev, got);
    }
    uint32_t out = al_round_left_out(m);
    free(m);
    return out;
}

static void test_left_out(void **st) {
    (void)st;
    /* the agent's one-way cut: c's calls to a refused; a hears b only, every
     * site has every status: all three leave c out */
    const uint32_t cut_ca[3] = {0x3, 0x7, 0x7};
    for (int i = 0; i < 3; i++) assert_int_equal(left_out_at(i, cut_ca, 1), 1u << 2);
    /* a's calls to c refused: c hears a and b; still the higher index, c, goes */
    const uint32_t cut_ac[3] = {0x7, 0x7, 0x6};
    for (int i = 0; i < 3; i++) assert_int_equal(left_out_at(i, cut_ac, 1), 1u << 2);
    /* everyone hears everyone, or a sender without the field: no one out */
    const uint32_t all[3] = {0x7, 0x7, 0x7}, none[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) assert_int_equal(left_out_at(i, all, 1), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(left_out_at(i, none, 0), 0);
    /* a rejoining site a heard by b, not yet by c: c, the higher index of the
     * broken pair (a, c), waits, at b and c alike */
    const uint32_t rejoin[3] = {0x7, 0x7, 0x6};
    assert_int_equal(left_out_at(1, rejoin, 1), 1u << 2);
    assert_int_equal(left_out_at(2, rejoin, 1), 1u << 2);
    /* a claims to hear no one (hostile, or cut off all round): b and c leave
     * a out, not each other, and still make a quorum (a's own view is
     * exempt: it leaves b and c out, and cannot commit alone) */
    const uint32_t deaf_a[3] = {0x1, 0x7, 0x7};
    for (int i = 1; i < 3; i++) assert_int_equal(left_out_at(i, deaf_a, 1), 1u << 0);
    assert_int_equal(left_out_at(0, deaf_a, 1), 0x6);
    /* a names only c as unheard: c goes, a and b still make a quorum */
    const uint32_t a_not_c[3] = {0x3, 0x7, 0x7};
    for (int i = 0; i < 3; i++) assert_int_equal(left_out_at(i, a_not_c, 1), 1u << 2);
}

#define ROUND_CASES                                                                                \
    cmocka_unit_test(test_quorum_names), cmocka_unit_test(test_bad_cfg),                           \
        cmocka_unit_test(test_majority_base), cmocka_unit_test(test_restart_holds_vote),           \
        cmocka_unit_test(test_restart_incarnation), cmocka_unit_test(test_alone_no_storm),         \
        cmocka_unit_test(test_carry_holder), cmocka_unit_test(test_carry_fetch),                   \
        cmocka_unit_test(test_carry_restart), cmocka_unit_test(test_carry_not_from_liar),          \
        cmocka_unit_test(test_commit_elsewhere), cmocka_unit_test(test_commit_fetch_fails),        \
        cmocka_unit_test(test_queue_overflow), cmocka_unit_test(test_sync_short),                  \
        cmocka_unit_test(test_left_out)

int main(int argc, char **argv) {
    prog = argv[0];
    if (argc == 3 && !strcmp(argv[1], "--seed")) {
        world *w = calloc(1, sizeof *w);
        if (!w) return 1;
        w->verbose = 1;
        w->dead_mode = (int)env_u64("AL_ROUND_DEAD", 0);
        w->carry = (int)env_u64("AL_ROUND_CARRY", 1);
        w->nine = (int)env_u64("AL_ROUND_NINE", 0);
        uint64_t seed = strtoull(argv[2], NULL, 10);
        w->one_way = (int)env_u64("AL_ROUND_ONEWAY", 0);
        if (w->one_way) w->carry = (int)(seed / 3 & 1);
        int rc = run_schedule(w, seed);
        printf("seed %llu: %s\n", (unsigned long long)seed, rc ? "FAILED" : "every invariant held");
        world_free(w);
        free(w);
        return rc;
    }
    const struct CMUnitTest tests[] = {ROUND_CASES,
                                       cmocka_unit_test(test_sim_3_majority),
                                       cmocka_unit_test(test_sim_5_majority),
                                       cmocka_unit_test(test_sim_2_all),
                                       cmocka_unit_test(test_sim_9_majority),
                                       cmocka_unit_test(test_sim_one_way)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
