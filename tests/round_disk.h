/* round_disk.h -- a site's disk in tests/test_round.c's simulation: what the
 * agent keeps in its [checkpoint] dir for the round protocol, changed by the
 * agent's own record code (runtime/round/hard.c, al_hard_*) at the same actions
 * (runtime/agent/agent_machine.c, agent_round.c, agent_hard.c):
 *   hard.json      the record as last written (the agent writes it at every
 *                  change, so memory and disk agree between actions); read
 *                  back at a restart through its text (al_hard_encode/decode)
 *   candidate.bin  the candidate a hash vote named, written before the record
 *   commit-R.bin   θ_global at the start of round R (the candidate renamed, or
 *                  written anew), from al_hard_keep_from on (the rest go at
 *                  each commit and checkpoint, as in the agent)
 *   checkpoints    (round, θ_global), every RD_CKPT_EVERY rounds after the
 *                  commit; a stale restart goes back to an older one and the
 *                  newer ones are gone (as tests/test_durable.sh section 3)
 * θ is a hash, as in the simulation. */
#ifndef ROUND_DISK_H
#define ROUND_DISK_H

#include <stddef.h>

#include "al_round.h"

#define RD_FILES      256
#define RD_CKPT_EVERY 3 /* [checkpoint] every_rounds */

typedef struct rd_file {
    long round;
    al_round_hash hash;
} rd_file;

typedef struct rd_disk {
    al_hard hard;            /* hard.json */
    int cand;                /* candidate.bin exists, */
    al_round_hash cand_hash; /* holding this θ */
    rd_file commit[RD_FILES];
    int ncommit;
    rd_file ckpt[RD_FILES];
    int nckpt;
} rd_disk;

/* A fresh folder: no record, the start (round 0, genesis) as checkpoint 0. */
void rd_init(rd_disk *d, const al_round_hash *genesis);
/* AL_ACT_PERSIST_VOTE while holding candidate cand (NULL: none). */
void rd_vote(rd_disk *d, const al_round_vote *v, const al_round_hash *cand);
/* AL_ACT_APPLY of round r (θ_global := theta, members): the commit file, then
 * the record (torn = 1: the site dies between the two), then a checkpoint if
 * one is due. -1 with why when the simulated folder is full. */
int rd_apply(rd_disk *d, long r, const al_round_hash *theta, uint32_t members, int torn, char *why,
             size_t n);
/* AL_ACT_ADOPT of the state of round r (θ_global := theta). */
int rd_adopt(rd_disk *d, long r, const al_round_hash *theta, char *why, size_t n);
/* A restart (--resume) from checkpoint k (-1: the newest; older ones after it
 * are dropped), as ag_machine_init does: the record read back through its
 * text, the plan (al_hard_plan: replay checks every commit file against the
 * log, take checks commit-R against the record), the held candidate found
 * (candidate.bin, else commit-<R+1>.bin), the start itself a commit. Fills
 * st and *theta, *plan (al_hard_plan_kind); -1 with why when the agent would
 * refuse to start. */
int rd_restart(rd_disk *d, int k, al_round_start *st, al_round_hash *theta, int *plan, char *why,
               size_t n);
/* The commit file of round r, or NULL. */
const rd_file *rd_commit_of(const rd_disk *d, long r);

#endif
