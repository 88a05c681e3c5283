/*
 * al_round.h -- one round between sites (runtime/round/):
 *   the protocol   a pure state machine that decides which outer step a quorum
 *                  commits (round.c; model-checked by tests/test_round.c)
 *   the arithmetic the members' pseudo-gradients into one outer step, shared
 *                  by the agent and the simulator (commit.c)
 *   the hard state what a site must never forget across a crash (votes, the
 *                  candidate a hash vote names, commits): the record, when
 *                  it changes, its text and how a restart reads it (hard.c;
 *                  the agent writes it to disk, tests/test_round.c keeps it
 *                  on its simulated disk)
 * Uses base/, outer/ and policies/ only; knows no network, thread or file.
 */
#ifndef AL_ROUND_H
#define AL_ROUND_H

#include <stddef.h>
#include <stdint.h>

#include "al_base.h"
#include "al_codec.h"
#include "al_outer.h"
#include "al_policy.h"

/*
 * The protocol -- the round protocol between sites as a pure state machine.
 *
 * No sockets, threads, clocks or files: the caller feeds events (a tick with
 * the time, a peer's status or statistics, the end of the local interval, the
 * result of the Δ exchange, the candidate's hash, the result of a pull) with
 * al_round_step, then takes the actions that follow with al_round_ready and
 * carries them out in order (send a status or statistics, train, exchange,
 * propose, persist a vote, apply, revert, pull state, adopt it, drop a peer,
 * log) -- the Ready/Advance loop of etcd's raft package. Every event carries
 * the time, so M machines run over a simulated network and clock in
 * tests/test_round.c. runtime/agent/agent_round.c drives it in the agent.
 *
 * The protocol for round r (every site runs the same machine):
 *   1. After its interval a site sends its statistics for (r, e) to every
 *      peer; e is the attempt (epoch): 0 at the start of a round, it only
 *      grows within the round. Members are the live sites whose statistics
 *      for (r, e) arrived and whose status says the same base (the hash of
 *      θ_global the round starts from); a site waits for every live peer
 *      that may still send at most deadline_s. Fewer members than the quorum:
 *      "no quorum: k of n sites reachable" and a null vote.
 *   2. The members exchange Δ (AL_ACT_EXCHANGE, answered by
 *      AL_EV_EXCHANGE_DONE or _FAILED) and compute the outer step into a
 *      candidate beside θ_global (AL_ACT_PROPOSE, answered by AL_EV_CANDIDATE).
 *   3. Each site votes once per (r, e), ever: the candidate's hash, or null.
 *      The vote, and for a hash the candidate it names, are persisted
 *      (AL_ACT_PERSIST_VOTE, done before the next action) before any status
 *      carries the vote; a restarted site resumes at the epoch of its
 *      persisted vote, holding it, and holds the candidate of its round's
 *      last hash vote until AL_ACT_REVERT or AL_ACT_APPLY (raft's rule: an
 *      entry is durable before it is acknowledged; without it a round whose
 *      voters all restarted would be committed with its θ lost).
 *   4. Round r commits hash h once a quorum of the *configured* sites voted h
 *      in one (r, e) (majority: n/2 + 1, all: n, any: 1). The site whose vote
 *      is h applies its candidate (AL_ACT_APPLY: θ_global := candidate, and
 *      the commit (r + 1, h) is persisted before the next action); any other
 *      site pulls the state of round r + 1 from a voter (AL_ACT_SYNC, then
 *      AL_ACT_ADOPT). A peer at a later round proves a commit the same way.
 *   5. When the votes seen for (r, e) leave no value able to reach the quorum
 *      (nulls, splits), (r, e) is void: the site reverts its candidate and
 *      sends its statistics again for (r, e + 1). A peer at a later epoch of
 *      the same round proves the void.
 *   6. Only a member can vote for a value (a site votes for its own candidate
 *      and is a member of its own exchange), so a value's votes can still
 *      grow only by its unseen members: a member that died before voting does
 *      not hold the others back once they split their votes.
 * θ_global is checked at the end of every interval (AL_EV_INTERVAL_DONE's
 * hash) and with every candidate (AL_EV_CANDIDATE's theta): one that differs
 * from the committed base was corrupted here (after a null vote when found
 * with a candidate) and is reloaded from this site's persisted commit
 * (AL_ACT_RELOAD), or pulled from a peer if that copy is bad too; the
 * interval is then trained again; a site whose base differs from the one a
 * majority of the configured sites holds at its round pulls theirs. A pull
 * is checked against the hash its source announced (the caller's job) and
 * adopted only if it is at least the round asked for.
 * Failure detection: a status goes to every peer every heartbeat_s; a peer
 * not heard for peer_timeout_s is dropped (AL_ACT_DROP); if it was a member
 * of the exchange in progress, the exchange is aborted and the vote is null.
 */

#define AL_ROUND_MAX_SITES   16
#define AL_ROUND_MAX_ACTIONS (8 * AL_ROUND_MAX_SITES + 32)
/* In sync, no source for the goal this many heartbeats: back to the round. */
#define AL_ROUND_SYNC_BEATS 5

/* [round] quorum: how many of the configured sites must vote for a hash.
 * `any` lets each side of a partition commit its own history (unsafe). */
#define AL_QUORUMS(X)                                                                              \
    X(AL_QUORUM_MAJORITY, "majority")                                                              \
    X(AL_QUORUM_ALL, "all")                                                                        \
    X(AL_QUORUM_ANY, "any")
typedef enum {
#define AL_QUORUM_ENUM(e, s) e,
    AL_QUORUMS(AL_QUORUM_ENUM)
#undef AL_QUORUM_ENUM
} al_quorum;
int al_quorum_parse(const char *s, al_quorum *q, al_err *err);
const char *al_quorum_name(al_quorum q);
/* Votes a commit needs among n configured sites. */
int al_quorum_size(al_quorum q, int n);

enum { AL_VOTE_NONE = 0, AL_VOTE_NULL = 1, AL_VOTE_HASH = 2 };

typedef struct al_round_hash {
    uint8_t b[32];
} al_round_hash;

/* A value voted for: a candidate's hash and the members whose Δ it averages. */
typedef struct al_round_value {
    al_round_hash hash;
    uint32_t members; /* bit i = site i */
    uint64_t origin;  /* the attempt whose exchange computed it: a vote in a later
                       * attempt carries it there (Paxos), and any site may cast one */
} al_round_value;

/* What a site tells its peers: sent every heartbeat and whenever it votes. */
typedef struct al_round_status {
    long round;           /* the round in progress (round - 1 is committed) */
    uint64_t epoch;       /* the attempt of that round */
    al_round_hash base;   /* θ_global the round starts from */
    int vote;             /* AL_VOTE_* for (round, epoch) */
    al_round_value value; /* of a hash vote */
    /* the latest hash vote this site cast in this round, at acc_epoch <= epoch
     * (Paxos' "accepted"): a status at (round, epoch) with no vote is a promise
     * never to vote in an earlier attempt, and this is its report */
    int accepted;
    uint64_t acc_epoch;
    al_round_value acc_value;
    /* the sender's incarnation (al_round_cfg.incarnation): a status of a later
     * one replaces the peer's kept status even when it is not newer (a site
     * restarted from an older state); 0: a sender without incarnations */
    uint64_t inc;
    /* the sites whose own messages reach the sender, itself included (bit i;
     * al_round_hears): every site leaves out the same end of a pair where one
     * does not hear the other (al_round_left_out); 0: a sender without it */
    uint32_t hears;
} al_round_status;

/* A vote as persisted: the last one a site cast in `round`, the highest
 * attempt it entered there (its promise: it never votes below it), and its
 * latest hash vote there. */
typedef struct al_round_vote {
    long round; /* -1: none */
    uint64_t epoch;
    int vote; /* AL_VOTE_NONE: a promise only */
    al_round_value value;
    uint64_t promised;
    int accepted;
    uint64_t acc_epoch;
    al_round_value acc_value;
} al_round_vote;

/* The events fed to the machine: (name, its text) once, for the enum and
 * al_round_event_name. */
#define AL_ROUND_EVENTS(X)                                                                         \
    X(AL_EV_TICK, "tick")                       /* now */                                          \
    X(AL_EV_STATUS, "status")                   /* peer, st */                                     \
    X(AL_EV_STATS, "stats")                     /* peer, round, epoch: its statistics arrived */   \
    X(AL_EV_INTERVAL_DONE, "interval-done")     /* round, hash: of θ_global as it is now */       \
    X(AL_EV_EXCHANGE_DONE, "exchange-done")     /* round, epoch */                                 \
    X(AL_EV_EXCHANGE_FAILED, "exchange-failed") /* round, epoch, peer (-1: unknown) */             \
    X(AL_EV_CANDIDATE, "candidate")     /* round, epoch, hash; theta: of θ_global it came from */ \
    X(AL_EV_SYNCED, "synced")           /* peer, round, hash: the state pulled (verified) */       \
    X(AL_EV_SYNC_FAILED, "sync-failed") /* peer */                                                 \
    X(AL_EV_RELOADED, "reloaded")       /* hash: of θ_global reloaded from this site's commit */  \
    X(AL_EV_FETCHED, "fetched")         /* peer, round, hash: its candidate, fetched (not held) */ \
    X(AL_EV_FETCH_FAILED, "fetch-failed") /* peer */                                               \
    X(AL_EV_EXCLUDE, "exclude") /* peer, round: left out from round on (-1: taken again) */        \
    X(AL_EV_HEARS, "hears")     /* st.hears: the peers whose own messages reach this site */

typedef enum {
#define AL_EV_ENUM(e, s) e,
    AL_ROUND_EVENTS(AL_EV_ENUM)
#undef AL_EV_ENUM
} al_round_event_type;

const char *al_round_event_name(al_round_event_type t);

typedef struct al_round_event {
    al_round_event_type type;
    double now; /* every event carries the time (seconds, any origin) */
    int peer;
    long round;
    uint64_t epoch;
    al_round_hash hash;
    al_round_hash theta;
    al_round_status st;
    /* AL_EV_SYNC_FAILED: 1 when the source answered with less than it
     * announced (a state that does not fit, or not the round or hash its
     * status showed): not asked again for this goal; 0: no answer */
    int short_served;
} al_round_event;

#define AL_ROUND_ACTIONS(X)                                                                        \
    X(AL_ACT_SEND_STATUS, "send-status")   /* peer, st: the status as of this action */            \
    X(AL_ACT_SEND_STATS, "send-stats")     /* peer, round, epoch */                                \
    X(AL_ACT_TRAIN, "train")               /* round: train the interval */                         \
    X(AL_ACT_EXCHANGE, "exchange")         /* round, epoch, members */                             \
    X(AL_ACT_ABORT, "abort")               /* round, epoch: stop the exchange in progress */       \
    X(AL_ACT_PROPOSE, "propose")           /* round, epoch, members: compute the candidate */      \
    X(AL_ACT_PERSIST_VOTE, "persist-vote") /* round, epoch, vote, hash, members */                 \
    X(AL_ACT_APPLY, "apply")               /* round, epoch, hash: commit; persist (round+1, h) */  \
    X(AL_ACT_REVERT, "revert")             /* round, epoch: drop the candidate, persisted too */   \
    X(AL_ACT_SYNC, "sync")                 /* peer, round, hash: pull state >= round */            \
    X(AL_ACT_ADOPT, "adopt")               /* round, hash: the pulled state; persist it */         \
    X(AL_ACT_RELOAD, "reload")             /* round, hash: reload θ_global from the commit */     \
    X(AL_ACT_DROP, "drop")                 /* peer: declared dead */                               \
    X(AL_ACT_FETCH, "fetch")               /* peer, round, hash, members: pull its candidate */    \
    X(AL_ACT_HOLD, "hold")                 /* round, hash: the fetched value is the candidate */   \
    X(AL_ACT_LOG, "log")                   /* level, text */
typedef enum {
#define AL_ACT_ENUM(e, s) e,
    AL_ROUND_ACTIONS(AL_ACT_ENUM)
#undef AL_ACT_ENUM
} al_round_action_type;
const char *al_round_action_name(al_round_action_type t);

typedef struct al_round_action {
    al_round_action_type type;
    int peer, vote, level; /* level: AL_LOG_* */
    long round;
    uint64_t epoch;
    uint32_t members;
    al_round_hash hash;
    al_round_status st; /* AL_ACT_SEND_STATUS: never ahead of the votes persisted before it */
    al_round_vote rec;  /* AL_ACT_PERSIST_VOTE: the record to persist */
    char text[160];
} al_round_action;

typedef struct al_round_cfg {
    int nsites, self;
    al_quorum quorum;
    int min_sites;            /* reachable sites (self included) needed to start training */
    double heartbeat_s;       /* status to every peer this often */
    double peer_timeout_s;    /* a peer not heard this long is dead */
    double deadline_s;        /* longest wait for a live peer's statistics */
    const char *const *names; /* site names, for log lines (may be NULL) */
    /* 1: a later attempt carries a value an earlier one may have committed
     * (Paxos; see "Carrying a value" in docs/ARCHITECTURE.md); needs the peers'
     * statuses to report their accepted values and AL_ACT_FETCH carried out.
     * 0: the first protocol, which waits for the votes of dead sites. */
    int carry;
    /* this start of the site, greater at every restart (the agent: the start
     * time in microseconds and the pid), shown in every status; 0: none */
    uint64_t incarnation;
} al_round_cfg;

/* Where a site (re)starts: its persisted commit and its persisted last vote. */
typedef struct al_round_start {
    long round;          /* the round after the last committed one */
    al_round_hash base;  /* θ_global committed by round - 1 */
    al_round_vote last;  /* last.round = -1: none */
    long held_round;     /* the candidate persisted with the round's last hash vote: */
    al_round_value held; /* ... restored with it when held_round == round (-1: none) */
} al_round_start;

#define AL_ROUND_PHASES(X)                                                                         \
    X(AL_PH_JOIN, "join")         /* finding the peers */                                          \
    X(AL_PH_TRAIN, "train")       /* the interval runs */                                          \
    X(AL_PH_STATS, "stats")       /* waiting for the peers' statistics */                          \
    X(AL_PH_EXCHANGE, "exchange") /* Δ exchange with the members */                               \
    X(AL_PH_PROPOSE, "propose")   /* computing the candidate */                                    \
    X(AL_PH_VOTED, "voted")       /* voted; waiting for the outcome */                             \
    X(AL_PH_SYNC, "sync")         /* pulling committed state */                                    \
    X(AL_PH_RELOAD, "reload")     /* reloading θ_global from this site's persisted commit */
typedef enum {
#define AL_PH_ENUM(e, s) e,
    AL_ROUND_PHASES(AL_PH_ENUM)
#undef AL_PH_ENUM
} al_round_phase;
const char *al_round_phase_name(al_round_phase p);

typedef struct al_round_peer {
    int have;     /* a status was received */
    int alive;    /* heard within peer_timeout_s */
    double heard; /* when */
    al_round_status st;
    long stats_round; /* the last statistics received: (round, epoch); -1 none */
    uint64_t stats_epoch;
    long excluded; /* AL_EV_EXCLUDE: never a member, nor waited for, from this round on (-1) */
} al_round_peer;

typedef struct al_round {
    al_round_cfg cfg;
    int q; /* votes a commit needs */
    al_round_phase phase;
    long round;
    uint64_t epoch;
    al_round_hash base;
    int vote;             /* for (round, epoch) */
    al_round_value value; /* of a hash vote */
    uint32_t members;     /* of the exchange in progress */
    al_round_value cand;  /* the candidate held, when have_candidate */
    al_round_vote last;   /* the last vote persisted */
    int interval_done;    /* this round's statistics are ready */
    int have_candidate;   /* a candidate is held beside θ_global */
    double t_start;       /* join started */
    double t_stats;       /* statistics sent for (round, epoch) */
    double t_hb;          /* next heartbeat */
    double t_note;        /* next repeat of a waiting line */
    double t_sync;        /* next attempt to pick a source */
    int sync_peer;        /* -1: no pull in flight */
    uint32_t sync_tried;  /* sources that failed this goal, tried again only after the others */
    uint32_t sync_short;  /* sources that served less than they announced: not asked again */
    double t_nosrc;       /* since then no source for the goal was found (0: one was) */
    long sync_round;      /* pull goal: a state at sync_round or later, */
    int sync_check;       /* ... and if at sync_round, with sync_hash */
    al_round_hash sync_hash;
    int fetch_peer;           /* -1: no fetch of a carried value in flight */
    uint32_t fetch_tried;     /* holders that failed it in this attempt */
    double t_fetch;           /* the fetch in flight is given up then */
    al_round_value fetch_val; /* the value fetched */
    int fetch_commit;         /* ... because it was committed (else to carry it) */
    char health[96];          /* "" or "no quorum: 1 of 3 sites reachable" */
    int unreachable;          /* health says fewer sites are reachable than the quorum */
    int hears_fed;            /* AL_EV_HEARS was fed: hears is the caller's measure, */
    uint32_t hears;           /* ... else the live peers are the sites heard */
    uint32_t out_noted;       /* al_round_left_out's set last logged */
    al_round_peer peer[AL_ROUND_MAX_SITES];
    al_round_action out[AL_ROUND_MAX_ACTIONS];
    int nout, lost;        /* actions waiting; actions lost to a full queue (a bug) */
    int lost_type;         /* the first lost action's type, */
    long lost_round;       /* ... and round */
    al_round_action spill; /* where a lost action is written (never a queued one) */
} al_round;

/* Checks cfg (nsites 1..AL_ROUND_MAX_SITES, self, min_sites, timeouts). */
int al_round_init(al_round *m, const al_round_cfg *cfg, const al_round_start *s, double now,
                  al_err *err);
/* Feed one event; the actions it causes queue up for al_round_ready. */
void al_round_step(al_round *m, const al_round_event *ev);
/* Take up to max queued actions, oldest first; returns how many. */
int al_round_ready(al_round *m, al_round_action *out, int max);
/* The queue holds AL_ROUND_MAX_ACTIONS, far more than one event emits: a
 * caller that takes the actions after every al_round_step never fills it.
 * When it was full, the actions that did not fit were lost (the queued ones
 * are kept, never overwritten) and the machine no longer matches what its
 * caller did: 0, or AL_EINVAL with a message naming the overflow, for good. */
int al_round_overflow(const al_round *m, al_err *err);
/* This site's status as its peers should see it now. */
void al_round_status_get(const al_round *m, al_round_status *st);
/* Live peers + this site. */
int al_round_reachable(const al_round *m);
/* The sites this site hears, itself included (bit i): the caller's measure
 * when it feeds AL_EV_HEARS (the agent: peers whose own calls reach it), else
 * the live peers. Published in every status (al_round_status.hears). */
uint32_t al_round_hears(const al_round *m);
/* One membership per attempt (members.c): the sites no site takes as a member
 * now because of a broken pair -- two sites of which one does not hear the
 * other, as the statuses show (the sender's hears, this site's own): of each
 * such pair, in the order (0,1), (0,2), ..., (1,2), ..., the higher index is
 * left out unless an end is out already. Computed from what the statuses
 * share, so the sites of a one-way cut, and a rejoining site heard by some
 * peers only, count the same members; may include this site. */
uint32_t al_round_left_out(const al_round *m);

/*
 * The hard state -- what the protocol's safety argument assumes a site never
 * forgets (issue 31; docs/ARCHITECTURE.md, "Durable rounds"): the committed
 * round and its base, the last vote and promise, the candidate a hash vote
 * names, and the log of commits since the last checkpoint. Pure: the caller
 * does the I/O (runtime/agent/agent_hard.c: hard.json, candidate.bin,
 * commit-R.bin, each written atomically) and the simulation of
 * tests/test_round.c keeps the same record on its simulated disk, changed by
 * the same calls at the same actions:
 *
 *   AL_ACT_PERSIST_VOTE  al_hard_vote_holds (1: the caller writes the
 *                        candidate first), then al_hard_vote, then the record
 *   AL_ACT_APPLY/ADOPT,  the commit file (the candidate's, renamed when
 *   a start at a round   al_hard_commit_renames, or θ_global written anew),
 *                        then al_hard_commit, then the record
 *   a checkpoint at c    al_hard_prune(c), then the record; commit files < c go
 *   --resume             al_hard_decode, al_hard_plan (checkpoint round c vs
 *                        the record), then al_hard_start for the machine
 */
#define AL_HARD_LOG     64   /* commits kept in the log (since the last checkpoint) */
#define AL_HARD_POLICY  2048 /* a policy's saved state (al_policy_save) */
#define AL_HARD_VERSION 1

typedef struct al_hard_entry {
    long round;         /* committed ... */
    al_round_hash hash; /* ... with this θ_global (the base of round + 1) */
    long h, step;       /* the interval it trained and the inner steps after it */
    uint32_t members;
} al_hard_entry;

typedef struct al_hard {
    char run[65];                   /* the run configuration's hash (al_config_run_hash) */
    long committed;                 /* the round after the last committed one (-1: none) */
    al_round_hash base;             /* θ_global it starts from (commit-<committed>.bin) */
    long step, h;                   /* inner steps done at its start, and its H */
    char policy[AL_HARD_POLICY];    /* the policy's state then */
    al_hard_entry log[AL_HARD_LOG]; /* committed rounds since the last checkpoint */
    int nlog;
    al_round_vote vote;               /* the last vote and promise (round -1: none) */
    long held_round;                  /* the candidate of that round's last hash vote (-1: none), */
    al_round_value held;              /* on disk (candidate.bin), with the decision it came with: */
    long held_h_next;                 /* the next H, */
    char held_policy[AL_HARD_POLICY]; /* the policy's state after it */
} al_hard;

/* An empty record: nothing committed, no vote, no candidate. */
void al_hard_clear(al_hard *h, const char *run);
/* A vote (or promise) v is about to be persisted while the site holds
 * candidate `cand` (NULL: none): 1 when v is a hash vote for it that the
 * record does not hold yet, i.e. the caller must write the candidate to disk
 * before the record. */
int al_hard_vote_holds(const al_hard *h, const al_round_vote *v, const al_round_hash *cand);
/* The vote into the record; `holds` (al_hard_vote_holds' answer): its value
 * becomes the held candidate, with the decision it came with (h_next,
 * policy: the policy's state after the decision). */
void al_hard_vote(al_hard *h, const al_round_vote *v, int holds, long h_next, const char *policy);
/* Round r applies θ_global = theta: 1 when the held candidate (candidate.bin)
 * is that θ, so the caller renames its file to the commit's; else it writes
 * θ_global anew (a file holding another θ must never become a commit). */
int al_hard_commit_renames(const al_hard *h, long r, const al_round_hash *theta);
/* Round committed - 1 committed θ_global = base (its commit file written
 * first): committed, base, step, H and policy move on; h_run > 0 (an interval
 * this site trained) logs the commit (round, base, h_run, step, members),
 * h_run <= 0 (adopted, a start) restarts the log: the rounds before are not
 * replayable here. A held candidate of an earlier round is dropped (its file
 * became the commit). */
void al_hard_commit(al_hard *h, long committed, const al_round_hash *base, long step, long hh,
                    const char *policy, long h_run, uint32_t members);
/* After a checkpoint at round c: the log's entries below c go. Returns how
 * many went (the caller rewrites the record when > 0 and removes the commit
 * files below c). */
int al_hard_prune(al_hard *h, long c);
/* The oldest round whose commit file a restart can still use: the first
 * logged round (a replay from the newest checkpoint starts there), else the
 * committed one (a take needs commit-<committed> only). The files below it go
 * at each commit, so a run that checkpoints seldom or never keeps at most
 * AL_HARD_LOG + 1 copies of θ. */
long al_hard_keep_from(const al_hard *h);
/* The log's entry for round r, or NULL. */
const al_hard_entry *al_hard_entry_of(const al_hard *h, long r);

/* The record's text: JSON with the SHA-256 of the rest ("check"); malloc'd,
 * NULL when out of memory. */
char *al_hard_encode(const al_hard *h);
/* Text into *h. AL_EFORMAT with err saying why (not JSON, checksum, version,
 * another run when run != NULL, a malformed vote, log or candidate); *h is
 * then cleared. */
int al_hard_decode(const char *text, size_t len, const char *run, al_hard *h, al_err *err);

/* How a restart from a checkpoint at round c meets the record. */
typedef enum {
    AL_HARD_AT,     /* c == committed (or no record): start at c from the checkpoint */
    AL_HARD_AHEAD,  /* c > committed (not expected: a checkpoint follows its commit) */
    AL_HARD_REPLAY, /* c < committed, each round c..committed-1 logged with its commit file
                       (has_commit): replay them, each checked against the log */
    AL_HARD_TAKE    /* c < committed otherwise: θ_global := commit-<committed> (as a pull) */
} al_hard_plan_kind;
/* has_commit(ctx, r): commit-<r> exists (the caller's disk); replayable: the
 * caller can replay intervals at all (the agent: not with overlap). */
al_hard_plan_kind al_hard_plan(const al_hard *h, long c, int replayable,
                               int (*has_commit)(void *ctx, long round), void *ctx);
/* Where the machine starts once θ_global is at round `round` with hash base:
 * the record's vote if it is of this round or later, its held candidate if
 * of this round (the caller restores the candidate's file, or clears it). */
void al_hard_start(const al_hard *h, long round, const al_round_hash *base, al_round_start *st);

/*
 * The arithmetic -- the round's arithmetic, shared by the agent and `autoloco sim`.
 *
 * A round turns M members' pseudo-gradients Δ^m into one outer step. The agent
 * does it across processes (runtime/agent/agent_net.c: reduce-scatter of encoded
 * shards to their owners, the owner's mean, all-gather of the encoded mean);
 * the simulator does it in one process (al_commit_exchange). Both cut the
 * shards with al_shard_range, leave out the same outliers (al_commit_outliers),
 * push every value through the same codec round trips in the same order, and
 * then commit with the same two calls:
 *
 *   al_commit_decide   the round's statistics, the bandwidth floor and the
 *                      policy's next H (once per round: the policy is one)
 *   al_commit_step     the outer step on a replica of θ_global
 *
 * so that a 2-site sim and a 2-site agent run with the same settings and data
 * order end on the same θ_global hash (tests/test_agent.sh checks it).
 *
 * The exchange's numbers, per shard k = [lo, hi) owned by member k:
 *   part_m  = decode(encode(Δ^m[lo, hi)))        every member m not left out
 *   mean    = Σ part_m / n  in site-id order     (al_mean: bitwise the same
 *                                                  whatever the arrival order)
 *   Δ̄[lo, hi) = decode(encode(mean))             the bytes every member gets
 * With fp32 both round trips are exact; with int8/int4 the block scales start
 * at each shard's first value, so the shard cut is part of the result.
 */

/* Most members of one exchange (the simulator's largest run). */
#define AL_COMMIT_MAX_MEMBERS 256

/* Shard k of M over P values: [P·k/M, P·(k+1)/M). */
void al_shard_range(size_t P, int M, int k, size_t *lo, size_t *hi);

/* The data-order seed of the site with index m (its rank among the run's
 * sites, sorted by name) for run seed `seed`; the init seed is the run seed. */
uint64_t al_site_data_seed(uint64_t seed, int m);

/* Robust aggregation ([outer] max_delta_ratio = k): member j is left out of
 * the mean (left_out[j] = 1) when ‖Δ^j‖ = sqrt(st[j].delta_sq) exceeds k × the
 * median over the M members. Off when k <= 0 or M < 3 (with two, neither is
 * an outlier of the other) or the median is 0. Uses only the statistics, so
 * every member decides alike. Returns how many were left out; *median gets the
 * median norm (0 when off). */
int al_commit_outliers(const al_site_stats *st, int M, double k, int *left_out, double *median);

/* Scratch for the codec's round trips (encode buffer and one shard). */
typedef struct al_commit_codec {
    al_codec_cfg cfg;
    uint8_t *enc;
    size_t cap;
    float *part;
    size_t part_cap;
} al_commit_codec;

int al_commit_codec_init(al_commit_codec *c, const al_codec_cfg *cfg, al_err *err);
void al_commit_codec_free(al_commit_codec *c);
/* Encode x[0..n) into c->enc (grown as needed); *len gets the encoded size. */
int al_commit_encode(al_commit_codec *c, const float *x, size_t n, size_t *len, al_err *err);

/* The claim check (issue 17: a member that reports a small ‖Δ‖, which the
 * median rule judges, and sends a large Δ). A member's part of one shard is
 * no longer than its whole Δ, whose squared norm it reported (delta_sq); an
 * owner's mean shard is no longer than the longest Δ a member of the round
 * reported. The slack leaves room for the codecs' error (int4 included): an
 * honest run never comes near it. */
#define AL_COMMIT_CLAIM_SLACK 1.5
/* 1 when ‖x[0..n)‖ ≤ AL_COMMIT_CLAIM_SLACK · sqrt(claimed_sq), else 0; *norm
 * gets ‖x‖ (a non-finite x never fits). */
int al_commit_fits_claim(const float *x, size_t n, double claimed_sq, double *norm);

/* The exchange of M members in one process: delta[j] is member j's Δ (P
 * values), sites[j] its site id (strictly increasing), left_out[j] (may be
 * NULL) leaves it out of the mean. claimed_sq[j] (may be NULL: no check) is
 * the ‖Δ‖² member j reported: a part longer than that claim is left out of
 * its shard's mean (al_commit_fits_claim), as the agent's owners do, and
 * counted in *n_lies (may be NULL). Writes Δ̄ (P values) and, when sent is
 * not NULL, the bytes member j would send: its M−1 encoded parts and M−1
 * copies of its encoded mean shard. AL_EINVAL when every member is left out;
 * codec errors as al_codec_encode/decode give them. */
int al_commit_exchange(al_commit_codec *c, const float *const *delta, const int *sites,
                       const int *left_out, const double *claimed_sq, int M, size_t P, float *dbar,
                       double *sent, int *n_lies, al_err *err);

/* What the round decided. */
typedef struct al_commit_decision {
    al_round_stats rs; /* combined over the members in the mean */
    int64_t h_next;    /* the policy's next interval */
    double comm_floor; /* the policy's bandwidth floor (al_policy_comm_floor) */
} al_commit_decision;

/* Combine the statistics of the n members in the mean (st) with ‖Δ̄‖², and
 * ask the policy (it advances) for the next H; h is the interval just run
 * (the policy keeps it when it has no opinion). */
int al_commit_decide(al_policy *pol, const al_site_stats *st, int n, const float *dbar, size_t P,
                     long round, int64_t h, al_commit_decision *d, al_err *err);

/* The outer step on one replica: S_r = Σ η (progress_lr) or the steps. */
int al_commit_step(al_outer *o, const float *dbar, const al_commit_decision *d, int progress_lr,
                   al_err *err);

/* [outer] overlap: how the exchange of round r meets the next interval.
 *   none:    the sites wait for round r's commit and start interval r + 1 from
 *            the new θ_global (DiLoCo);
 *   delayed: interval r + 1 starts at once from each site's own θ_local while
 *            round r's Δ crosses the WAN; when it ends, its progress is re-based
 *            onto the θ_global round r committed (al_commit_merge), and the
 *            policy's decision of round r sets H for interval r + 2. The maths:
 *            docs/outer.md, "Overlapping the exchange with compute".
 *   delayed-mean: as delayed, but the eager step takes the others' last mean
 *            for theirs: Δ̂ = Δ^m/M + (M − 1)/M · Δ̄_{r−1} (al_commit_eager's
 *            dbar_prev; the simulator only: it diverges, docs/outer.md).
 *   delayed-mid: as delayed, but the eager step measures the interval's
 *            displacement from halfway between where it started and the θ it
 *            was re-based onto: Δ̂ = Δ^m − (s^m − θ_r)/2, so that the start's
 *            own error is not fed back whole (docs/outer.md).
 *   streaming: the parameters are cut into F fragments (al_shard_range) that
 *            synchronise in turn, one every H/F steps (Streaming DiLoCo); a
 *            fragment's exchange runs beside the next τ inner steps and its
 *            result is merged then, the fragment's progress over those τ steps
 *            re-based onto it (al_commit_merge). Each Δ is measured from the
 *            θ_global its fragment last committed; meanwhile the fragment in
 *            flight trains from the site's eager guess (stream_eager). The
 *            simulator only, for now (docs/outer.md, "Streaming"). */
#define AL_OVERLAPS(X)                                                                             \
    X(AL_OVERLAP_NONE, "none")                                                                     \
    X(AL_OVERLAP_DELAYED, "delayed")                                                               \
    X(AL_OVERLAP_DELAYED_MEAN, "delayed-mean")                                                     \
    X(AL_OVERLAP_DELAYED_MID, "delayed-mid")                                                       \
    X(AL_OVERLAP_STREAMING, "streaming")
typedef enum {
#define AL_OVERLAP_ENUM(e, s) e,
    AL_OVERLAPS(AL_OVERLAP_ENUM)
#undef AL_OVERLAP_ENUM
} al_overlap;
int al_overlap_parse(const char *s, al_overlap *out, al_err *err);
const char *al_overlap_name(al_overlap o);

/* The delayed merge for one site, n values: its interval started at
 * theta_from and ended at theta_local; round r committed theta_global. Then
 *     delta       = theta_from − theta_local        (the interval's pseudo-gradient)
 *     theta_local ← theta_global − delta            (its progress, re-based)
 * so delta = theta_global − theta_local afterwards, as in a blocking round, and
 * *delta_sq = ‖delta‖² (summed in double, in index order). AL_ENUMERIC on a
 * non-finite value, before anything is written. */
int al_commit_merge(float *theta_local, const float *theta_from, const float *theta_global,
                    size_t n, float *delta, double *delta_sq, al_err *err);

/* What the eager step of one site knows (al_commit_eager). */
typedef struct {
    const float *delta;     /* Δ^m_r: the interval's own displacement (al_commit_merge's) */
    const float *from;      /* delayed-mid: where the interval started (s^m_r); else NULL */
    const float *dbar_prev; /* delayed-mean: the last round's mean, of M members; else NULL */
    int M;
    float *blend; /* n floats of scratch for Δ̂ when from or dbar_prev is set */
} al_eager_in;

/* The eager start of the next interval (overlap delayed): the outer step this
 * site would take with its own Δ^m in place of Δ̄,
 *     out = OuterStep(o's θ and momentum; Δ̂, s_r)
 * taken on `scratch` (initialised here on first use, then reused; free it
 * with al_outer_free), so `o` is untouched. s_r: the interval's progress (Σ η
 * or its steps). The simulator and the agent both start there. Δ̂:
 *     delayed:      Δ^m
 *     delayed-mid:  Δ^m − (from − θ_r)/2      (θ_r: o's θ, the committed one)
 *     delayed-mean: Δ^m/M + (M − 1)/M · dbar_prev
 * built in `blend`. */
int al_commit_eager(al_outer *scratch, const al_outer *o, const al_eager_in *in, double s_r,
                    float *out, al_err *err);

#endif
