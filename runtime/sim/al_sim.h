/*
 * al_sim.h -- `autoloco sim`: M sites in one process (DESIGN.md §4, §7).
 *
 * Each simulated site is a real model replica with its own AdamW state and its
 * own data shard (al_trainer). Every round, each site runs H inner steps; the
 * sim then does what the agents do over the wire, with the agents' own code
 * (al_round.h): the pseudo-gradients Δ^m (al_pseudo_grad), the outliers left
 * out (al_commit_outliers), the exchange shard by shard through the real
 * codec (al_commit_exchange: encode, decode, the mean in site order, the
 * mean encoded and decoded), the policy's decision (al_commit_decide) and the
 * outer step on *every site's own replica* of the outer state (al_commit_step;
 * their SHA-256 must agree). Site m reads its data in the order of
 * al_site_data_seed(seed, m), as the agent whose name sorts m-th. Only the
 * network is missing: a WAN model (bandwidth, round-trip time) turns the
 * measured compute seconds and the encoded bytes each site sends into a
 * projected wall-clock time.
 *
 * Sites run one after another on this machine, so a round's projected compute
 * time is the slowest site's measured time, not the sum.
 *
 * The WAN model, per round: each site reduce-scatters its Δ (M−1 encoded
 * shards of P/M values) and all-gathers the mean (its encoded shard M−1 times),
 * i.e. sends about 2·(M−1)/M · P · bits/8 bytes plus a 48-byte header per
 * shard (measured: the encoded sizes), and the two phases cost one RTT each:
 *     t_round = max_m compute_m + 2·RTT + max_m bytes_m / bandwidth.
 * DDP: the same all-reduce after every step, with the step's compute.
 *
 * Determinism: with the same options, seed and thread count, a run gives the
 * same θ_global bits, losses and H history (measured seconds differ).
 */
#ifndef AL_SIM_H
#define AL_SIM_H

#include <stdbool.h>
#include <stdio.h>

#include "al_codec.h"
#include "al_round.h"
#include "al_outer.h"
#include "al_policy.h"
#include "al_train.h"

/* The unit in which the AutoLoCo correction measures an interval's progress
 * (the S_r passed to al_outer_step, and S_ref):
 *   LR:    S_r = Σ η_t, S_ref = h_base·η_peak (DESIGN.md §4 as written). Under a
 *          decaying lr a round makes less progress, so the momentum's memory
 *          (μ^(S_r/S_ref) per round) stretches over more and more rounds.
 *   STEPS: S_r = H_r, S_ref = h_base: the correction for a changing H only;
 *          fixed H = h_base is exactly DiLoCo whatever the lr schedule. */
typedef enum { AL_SIM_PROGRESS_LR = 0, AL_SIM_PROGRESS_STEPS = 1 } al_sim_progress;

/* What data each site trains on (docs/results/autoloco-sweep.md, "scenarios"):
 *   IID:    every site sees the whole train split, each in its own order;
 *   NONIID: site m gets the m-th of M contiguous runs of documents (documents
 *           are in file order, so: disjoint groups of fortune files = topics);
 *   SHIFT:  IID until inner step ⌊shift_at·steps⌋, then each site on its
 *           non-IID run: the data changes mid-run, at the same step on every
 *           site (inside an interval if a round straddles it);
 *   LANGUAGES: site m on group m of the train file's groups (al_groups,
 *           `data prep --groups`: one language each; data whose region it
 *           may not leave), one group per site. The validation file is the
 *           groups' mix (data prep gives each the same bytes). */
typedef enum {
    AL_SIM_IID = 0,
    AL_SIM_NONIID = 1,
    AL_SIM_SHIFT = 2,
    AL_SIM_LANGUAGES = 3
} al_sim_scenario;

/* "iid", "noniid", "shift", "languages"; and back (AL_ENOTFOUND naming the
 * known ones). */
const char *al_sim_scenario_name(al_sim_scenario s);
int al_sim_scenario_parse(const char *name, al_sim_scenario *out, al_err *err);

#define AL_SIM_TAU_SYNC (-2L) /* al_sim_opts.overlap_steps: merge at the next sync */

typedef struct al_sim_opts {
    al_model_config model;
    al_train_opts train; /* per site; .steps = the inner-step budget, .seed = init and data */
    int sites;           /* M >= 1 */
    al_sim_scenario scenario;
    double shift_at;         /* SHIFT: the fraction of the steps after which sites change data */
    const al_groups *groups; /* LANGUAGES: the train file's groups (n = sites); not owned */
    bool ddp;                /* reference: one model, gradients averaged every step */
    al_outer_cfg outer;      /* .s_ref 0: h_base·lr (LR) or h_base (STEPS) */
    al_sim_progress progress;
    al_policy *policy;  /* configured, not started (the sim starts it); not owned. Unused by ddp */
    al_codec_cfg codec; /* the pseudo-gradients' codec, as the agent's [outer] codec */
    double max_delta_ratio; /* as [outer] max_delta_ratio: outliers left out (0: off) */
    al_overlap overlap;     /* as [outer] overlap (al_round.h) */
    int fragments;          /* overlap streaming: F fragments of the parameters (default 16) */
    long overlap_steps;     /* overlap streaming: τ, the inner steps a fragment's exchange runs
                             * beside before its merge; -1 (default): half a fragment's
                             * period, H/(2F); 0: merged at once (fragments, no overlap);
                             * AL_SIM_TAU_SYNC: at the next fragment's sync (whatever the
                             * spans' lengths: the agents' plan, docs/outer.md) */
    bool stream_eager;      /* overlap streaming: the fragment in flight trains from the
                             * site's eager guess of its new θ_global (default true) */
    double bandwidth_bps;   /* bits per second of each site's link */
    double rtt_s;
    int eval_every;   /* evaluate θ_global every N rounds into the JSONL (0: at the end only) */
    int eval_batches; /* validation microbatches per evaluation (0: the whole split) */
    FILE *jsonl;      /* one JSON record per round, or NULL */
    /* fault injection (tests): at round nan_round, site nan_site's parameters
     * hold fault_value (NaN by default) when it reports; a NaN Δ is refused and
     * the site sits the round out, a huge finite one is left out as an
     * outlier (max_delta_ratio). Streaming with fault_at_merge: the value
     * lands instead just before fragment 0's merge (the τ steps went bad). */
    int nan_site;
    long nan_round; /* -1: off */
    float fault_value;
    bool fault_at_merge;
} al_sim_opts;

/* Defaults: 4 IID sites, the outer defaults, progress in steps, fp32 (block
 * 128, as the agent), max_delta_ratio 4, 1 Gbit/s, 50 ms, no faults.
 * model/train/policy must still be filled in. */
void al_sim_opts_default(al_sim_opts *o);

typedef struct al_sim_result {
    long syncs;              /* outer rounds (DDP: steps) */
    long steps;              /* inner steps per site */
    double bytes;            /* encoded bytes sent over the WAN, summed over sites */
    double bytes_per_site;   /* bytes / sites */
    double final_eval_loss;  /* of θ_global after the last round */
    double final_train_loss; /* mean train loss over the last interval */
    long *h_history;         /* [n_h] the H of each round as run (the last may be cut short) */
    long n_h;
    long dropped;                            /* site-rounds left out (refused Δ) */
    double compute_s;                        /* projected compute: Σ_rounds max_m compute */
    double comm_s;                           /* projected communication on the configured link */
    double projected_s;                      /* compute_s + comm_s */
    double projected_1g_s, projected_100m_s; /* the same at 1 Gbit/s and 100 Mbit/s, 50 ms RTT */
    double overlap_s; /* projected time with overlap on the configured link: Σ max(compute of
                       * interval r + 1, exchange of round r) + the last exchange (= projected_s
                       * without overlap) */
    double wall_s;    /* this process's wall-clock time */
    char hash[65];    /* SHA-256 of the final θ_global (identical on every site) */
    float *theta;     /* copy of the final θ_global [nparams] */
    size_t nparams;
} al_sim_result;

void al_sim_result_free(al_sim_result *r);

/* The documents [*first, *end) of `train` that site m starts on in o's
 * scenario (IID: all of them; NONIID and SHIFT's second half: the m-th of
 * `sites` runs; LANGUAGES: group m). AL_EINVAL for a site out of range or an
 * empty run, AL_EMISMATCH for groups that do not fit the sites or the file. */
int al_sim_site_docs(const al_sim_opts *o, const al_tokens *train, int m, size_t *first,
                     size_t *end, al_err *err);

/* Run a simulation over loaded token files (val: for the eval loss). */
int al_sim_run(const al_sim_opts *o, const al_tokens *train, const al_tokens *val,
               al_sim_result *res, al_err *err);

/* The projected time of a run with `syncs` rounds, `compute_s` of compute and
 * `bytes_per_site` sent by each site, on a link of bandwidth_bps and rtt_s. */
double al_sim_project(double compute_s, long syncs, double bytes_per_site, double bandwidth_bps,
                      double rtt_s);

/* The summary as one JSON object (malloc'd, one line, no newline). */
char *al_sim_result_json(const al_sim_opts *o, const al_sim_result *r);

#endif
