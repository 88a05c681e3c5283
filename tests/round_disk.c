/* round_disk.c -- a site's disk in tests/test_round.c (round_disk.h). */
#include "round_disk.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN "sim" /* the run configuration's hash, for the record */

static uint64_t hv(const al_round_hash *h) {
    uint64_t x;
    memcpy(&x, h->b, sizeof x);
    return x;
}

static int heq(const al_round_hash *x, const al_round_hash *y) {
    return !memcmp(x, y, sizeof *x);
}

const rd_file *rd_commit_of(const rd_disk *d, long r) {
    for (int i = 0; i < d->ncommit; i++)
        if (d->commit[i].round == r) return &d->commit[i];
    return NULL;
}

/* commit-<r>.bin := theta (over an older one). */
static int commit_put(rd_disk *d, long r, const al_round_hash *theta, char *why, size_t n) {
    for (int i = 0; i < d->ncommit; i++)
        if (d->commit[i].round == r) {
            d->commit[i].hash = *theta;
            return 0;
        }
    if (d->ncommit == RD_FILES) {
        snprintf(why, n, "more than %d commit files", RD_FILES);
        return -1;
    }
    d->commit[d->ncommit++] = (rd_file){r, *theta};
    return 0;
}

/* ag_hard_commit after the record: the commit files no restart can use go. */
static void commit_drop_old(rd_disk *d) {
    long keep = al_hard_keep_from(&d->hard);
    int k = 0;
    for (int i = 0; i < d->ncommit; i++)
        if (d->commit[i].round >= keep) d->commit[k++] = d->commit[i];
    d->ncommit = k;
}

/* The start or a pull: commit-<r>.bin written anew, the log restarts. */
static int commit_new(rd_disk *d, long r, const al_round_hash *theta, char *why, size_t n) {
    if (commit_put(d, r, theta, why, n)) return -1;
    al_hard_commit(&d->hard, r, theta, r, 1, "", 0, 0);
    commit_drop_old(d);
    return 0;
}

void rd_init(rd_disk *d, const al_round_hash *genesis) {
    memset(d, 0, sizeof *d);
    al_hard_clear(&d->hard, RUN);
    d->ckpt[0] = (rd_file){0, *genesis};
    d->nckpt = 1;
}

void rd_vote(rd_disk *d, const al_round_vote *v, const al_round_hash *cand) {
    int holds = al_hard_vote_holds(&d->hard, v, cand);
    if (holds) { /* candidate.bin first */
        d->cand = 1;
        d->cand_hash = *cand;
    }
    al_hard_vote(&d->hard, v, holds, 1, "");
}

int rd_apply(rd_disk *d, long r, const al_round_hash *theta, uint32_t members, int torn, char *why,
             size_t n) {
    /* ag_hard_commit: candidate.bin renamed to commit-<r+1>.bin when it holds
     * the θ applied (the record says so), else θ written anew */
    int ren = d->cand && al_hard_commit_renames(&d->hard, r, theta);
    int rc = commit_put(d, r + 1, ren ? &d->cand_hash : theta, why, n);
    if (rc) return rc;
    if (ren) d->cand = 0;
    if (torn) return 0;
    al_hard_commit(&d->hard, r + 1, theta, r + 1, 1, "", 1, members);
    commit_drop_old(d);
    if ((r + 1) % RD_CKPT_EVERY == 0) { /* ag_save, then ag_hard_prune */
        if (d->nckpt == RD_FILES) {
            snprintf(why, n, "more than %d checkpoints", RD_FILES);
            return -1;
        }
        d->ckpt[d->nckpt++] = (rd_file){r + 1, *theta};
        al_hard_prune(&d->hard, r + 1);
        int k = 0;
        for (int i = 0; i < d->ncommit; i++)
            if (d->commit[i].round >= r + 1) d->commit[k++] = d->commit[i];
        d->ncommit = k;
    }
    return 0;
}

int rd_adopt(rd_disk *d, long r, const al_round_hash *theta, char *why, size_t n) {
    return commit_new(d, r, theta, why, n);
}

static int has_commit(void *ctx, long r) {
    return rd_commit_of(ctx, r) != NULL;
}

int rd_restart(rd_disk *d, int k, al_round_start *st, al_round_hash *theta, int *plan, char *why,
               size_t n) {
    /* hard.json, read back from its text (ag_hard_load) */
    char *text = al_hard_encode(&d->hard);
    al_hard rec;
    al_err err = {0};
    int rc = text ? al_hard_decode(text, strlen(text), RUN, &rec, &err) : -1;
    char *again = rc == 0 ? al_hard_encode(&rec) : NULL;
    if (rc == 0 && (!again || strcmp(text, again) != 0)) rc = -1;
    free(again);
    free(text);
    if (rc) {
        snprintf(why, n, "hard.json does not read back: %s", err.msg);
        return -1;
    }
    d->hard = rec;
    if (k < 0 || k >= d->nckpt) k = d->nckpt - 1;
    d->nckpt = k + 1; /* (the newer checkpoints are gone) */
    long c = d->ckpt[k].round, round = c;
    *theta = d->ckpt[k].hash;
    *plan = (int)al_hard_plan(&rec, c, 1, has_commit, d);
    const rd_file *f;
    switch ((al_hard_plan_kind)*plan) {
    case AL_HARD_AT:
    case AL_HARD_AHEAD:
        break;
    case AL_HARD_REPLAY: /* reconcile: each replayed commit checked against the log */
        for (long r = c; r < rec.committed; r++) {
            const al_hard_entry *e = al_hard_entry_of(&rec, r);
            f = rd_commit_of(d, r + 1);
            if (!heq(&f->hash, &e->hash)) {
                snprintf(why, n,
                         "replaying round %ld: commit-%ld holds %016" PRIx64
                         ", the log says %016" PRIx64,
                         r, r + 1, hv(&f->hash), hv(&e->hash));
                return -1;
            }
            *theta = f->hash;
        }
        round = rec.committed;
        break;
    case AL_HARD_TAKE:
        if (!(f = rd_commit_of(d, rec.committed)) || !heq(&f->hash, &rec.base)) {
            snprintf(why, n, "commit-%ld %s the record's base %016" PRIx64, rec.committed,
                     f ? "does not hold" : "is missing, wanted for", hv(&rec.base));
            return -1;
        }
        *theta = f->hash;
        round = rec.committed;
        break;
    }
    al_hard_start(&rec, round, theta, st);
    if (st->held_round == round) { /* restore_candidate */
        const al_round_hash *h = d->cand ? &d->cand_hash : NULL;
        if (!h && (f = rd_commit_of(d, round + 1))) h = &f->hash; /* renamed by a torn apply */
        if (!h || !heq(h, &st->held.hash)) {
            snprintf(why, n, "round %ld: %s the candidate voted for (%016" PRIx64 ")", round,
                     h ? "candidate.bin is not" : "no file holds", hv(&st->held.hash));
            return -1;
        }
    }
    if (d->hard.committed != round) return commit_new(d, round, theta, why, n);
    return 0;
}
