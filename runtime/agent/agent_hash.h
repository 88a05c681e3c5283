/* agent_hash.h -- θ's hashes as the round machine holds them, and the seal of
 * the published snapshot (agent_hash.c; rank 0: it calls no other part). */
#ifndef AL_AGENT_HASH_H
#define AL_AGENT_HASH_H

#include "agent_impl.h"

/* θ_global's hash as the machine holds it, and as hex. */
void ag_hash_of(const al_outer *o, al_round_hash *h);
void ag_hash_hex(const al_round_hash *h, char hx[65]);
/* θ_global's hash: the one kept since θ_global last changed (a commit sets
 * it to the candidate's), or hashed now (fresh, or none kept), with its
 * chunks' digests and checksum. Driver thread only. */
void ag_outer_hash(agent *a, al_round_hash *h, int fresh);
/* The same, hashed again if θ_global no longer has the checksum it had when
 * hashed (a memory fault since the commit: the interval's end checks θ_global
 * against the committed base this way, without hashing all of θ each round). */
void ag_outer_check(agent *a, al_round_hash *h);
/* a->cand_h, a->cand_dig and a->cand_sum of a->cand, a copy of θ_global
 * changed in [lo, hi) only (all of θ: [0, P)). */
void ag_cand_hash(agent *a, size_t lo, size_t hi);
/* The published copy's SHA-256 trailer, written before its first reader
 * (a peer's pull, do_reload, a test's fault); the caller holds a->mu. */
void ag_snapshot_seal(ag_snapshot *sn);

#endif
