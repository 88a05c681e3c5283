/*
 * al_commit.h -- the round's arithmetic, shared by the agent and `autoloco sim`.
 *
 * A round turns M members' pseudo-gradients Δ^m into one outer step. The agent
 * does it across processes (runtime/agent_net.c: reduce-scatter of encoded
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
#ifndef AL_COMMIT_H
#define AL_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "al_codec.h"
#include "al_outer.h"
#include "al_policy.h"

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
