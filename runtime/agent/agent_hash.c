/* agent_hash.c -- θ_global's and the candidate's hashes in the round
 * machine's form (al_round_hash), kept between commits with the digests of
 * θ's chunks so that a commit or a streaming candidate rehashes only what
 * changed, and the seal of the snapshot peers pull. The bottom of the agent:
 * it calls no other part of it (see agent_impl.h). */
#include "agent_hash.h"

#include <string.h>

void ag_hash_of(const al_outer *o, al_round_hash *h) {
    char hx[65];
    al_outer_hash(o, hx);
    ag_hex32(hx, h->b);
}

void ag_outer_hash(agent *a, al_round_hash *h, int fresh) {
    if (fresh || !a->outer_h_ok) {
        char hx[65];
        al_theta_hash_part(a->outer.theta, a->P, a->outer_dig, 0, a->P, hx);
        ag_hex32(hx, a->outer_h.b);
        a->outer_sum = al_theta_checksum(a->outer.theta, a->P);
        a->outer_h_ok = 1;
    }
    *h = a->outer_h;
}

void ag_outer_check(agent *a, al_round_hash *h) {
    ag_outer_hash(a, h, al_theta_checksum(a->outer.theta, a->P) != a->outer_sum);
}

void ag_cand_hash(agent *a, size_t lo, size_t hi) {
    char hx[65];
    if (a->outer_h_ok) { /* the chunks [lo, hi) touched */
        memcpy(a->cand_dig, a->outer_dig, 32 * al_theta_chunks(a->P));
        al_theta_hash_part(a->cand.theta, a->P, a->cand_dig, lo, hi, hx);
    } else {
        al_theta_hash_part(a->cand.theta, a->P, a->cand_dig, 0, a->P, hx);
    }
    ag_hex32(hx, a->cand_h.b);
    a->cand_sum = al_theta_checksum(a->cand.theta, a->P);
}

void ag_hash_hex(const al_round_hash *h, char hx[65]) {
    al_hex(h->b, sizeof h->b, hx);
}

void ag_snapshot_seal(ag_snapshot *sn) {
    if (sn && !sn->sealed) al_outer_seal(sn->outer, sn->outer_len);
    if (sn) sn->sealed = 1;
}
