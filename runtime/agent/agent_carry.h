/* agent_carry.h -- the carry (Paxos' phase 1, docs/ARCHITECTURE.md "Carrying
 * a value"): the candidate of this site's latest hash vote, persisted and
 * kept for peers to fetch by its hash, and the fetch and hold of a peer's. */
#ifndef AL_AGENT_CARRY_H
#define AL_AGENT_CARRY_H

#include "agent_impl.h"

/* The candidate a hash vote names: into candidate.bin (before the vote is
 * recorded) and kept, with its decision (h_next, the policy's state after
 * it), as the copy peers fetch by its hash. */
int ag_carry_save(agent *a, long h_next, const char *policy, al_err *err);
/* --resume: the candidate restored from `path` (its bytes, checked against
 * the hash voted for by the caller) kept for peers as ag_carry_save keeps it. */
int ag_carry_keep_file(agent *a, const char *path, al_err *err);
/* The kept copy is of a round before `round`: dropped (its memory). */
void ag_carry_drop_before(agent *a, long round);
/* AL_ACT_FETCH: the candidate act->hash from act->peer (its decision, then
 * its outer state, checked against the hash) into *ev, the event to feed:
 * AL_EV_FETCHED or AL_EV_FETCH_FAILED. */
void ag_carry_fetch(agent *a, const al_round_action *act, al_round_event *ev);
/* AL_ACT_HOLD: the fetched candidate becomes this site's (a->cand, its
 * decision and members), as if proposed here. */
int ag_carry_hold(agent *a, const al_round_action *act, al_err *err);

/* Test hooks (agent_impl.h): AL_FAULT=hidevote:R, the driver waits with its
 * persisted vote unseen; AL_FAULT=holdvote:R, the exchange's result rc is held,
 * then counts as failed. Both wait for <checkpoint dir>/release. */
void ag_fault_hide_vote(agent *a, long round);
int ag_fault_hold_vote(agent *a, int rc, al_err *err);

#endif
