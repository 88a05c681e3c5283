/* agent_stream.h -- [outer] overlap = streaming: the fragments' schedule
 * (agent_stream.c; rank 1). The span's training, and the merge it makes on
 * the way, is agent_train.c's (ag_span_run). */
#ifndef AL_AGENT_STREAM_H
#define AL_AGENT_STREAM_H

#include "agent_impl.h"

int ag_stream_init(agent *a, al_err *err);
void ag_stream_free(agent *a);
/* Fragment [lo, hi) that protocol round `round` exchanges (all of θ unless streaming). */
void ag_frag(const agent *a, long round, size_t *lo, size_t *hi);
/* The inner steps of round `round`'s span (its outer round's H cut in F). */
long ag_span_len(const agent *a, long round);
/* After the span: Δ_p, S_p and this site's statistics (cumulative over the
 * outer round) into a->mine's fields; θ_local's fragment p becomes the eager guess. */
int ag_stream_delta(agent *a, al_site_stats *mine, al_err *err);
/* The next span's merge: fragment p of this round after τ steps. */
void ag_stream_next(agent *a);
/* The candidate: the policy decides at the last fragment; fragment p steps. */
int ag_stream_propose(agent *a, al_outer *cand, const al_site_stats *in_mean, int n_in,
                      al_commit_decision *d, al_err *err);
/* Round a->round committed (before a->round advances): the schedule moves on, and
 * the thread may merge. comm_s: the round's exchange seconds. */
void ag_stream_commit(agent *a, double comm_s);
/* Does round k's commit end the run (the budget spent and every fragment's
 * progress in θ_global)? Asked before it commits. */
int ag_stream_ends(const agent *a, long k);
/* The committed schedule as JSON (checkpoints, snapshots), and back (apply 0:
 * only check it; nothing is written before all of it is checked). */
json_t *ag_stream_json(const agent *a);
int ag_stream_load(agent *a, json_t *j, const char *what, int apply, al_err *err);

#endif
