/* agent_hard.h -- the round protocol's hard state on disk (agent_hard.c;
 * rank 2: it calls agent_hash.c only). What the state machine's safety
 * argument assumes a site never forgets, written atomically (a temporary
 * file, fsync, rename, fsync of the folder) before any status or action can
 * show it:
 *   hard.json       the record (al_hard, runtime/round/hard.c: its fields, how
 *                   each action changes it, its text): the committed round
 *                   and its base hash, step, H and policy state; the log of
 *                   the rounds committed since the last checkpoint; the last
 *                   vote and promise; the candidate a hash vote names
 *   candidate.bin   that candidate's outer state (θ and momentum)
 *   commit-R.bin    θ_global as round R - 1 committed it, for every R since
 *                   the last checkpoint (a resume replays its intervals)
 * all in the [checkpoint] dir. docs/ARCHITECTURE.md, "Durable rounds". */
#ifndef AL_AGENT_HARD_H
#define AL_AGENT_HARD_H

#include "agent_impl.h"

/* Write buf to dir/name atomically: dir/name.tmp, fsync, rename, fsync dir. */
int ag_hard_write(const char *dir, const char *name, const void *buf, size_t len, al_err *err);
/* The record a->hard into hard.json (atomically, with its checksum). */
int ag_hard_save(agent *a, al_err *err);
/* hard.json into a->hard. Returns 1 when there is none (a->hard empty), 0
 * when read, and AL_EFORMAT naming the file and what to do when it exists
 * but is not a whole record of this run (never a silent fresh start). */
int ag_hard_load(agent *a, al_err *err);
/* A hash vote's candidate (a->cand) into candidate.bin; *bytes (malloc'd,
 * the caller's) and *len get what was written. */
int ag_hard_save_candidate(agent *a, uint8_t **bytes, size_t *len, al_err *err);
/* The commit of round a->round - 1 (θ_global = a->outer, already applied
 * or adopted) into commit-<a->round>.bin and the record: by renaming
 * candidate.bin when it holds that θ (`from_candidate`), else written anew.
 * `h_run`: the interval the committed round trained (0: unknown, adopted). */
int ag_hard_commit(agent *a, int from_candidate, long h_run, uint32_t members, al_err *err);
/* The log line of what the hard state cost this process: files, bytes, the
 * time in their writes (fsyncs included) and per round. */
void ag_hard_report(agent *a);
/* After a checkpoint at a->round: the log and commit files before it go. */
void ag_hard_prune(agent *a);
/* Path of commit-<round>.bin / candidate.bin into p. */
void ag_hard_path(const agent *a, const char *name, long round, char *p, size_t n);

#endif
