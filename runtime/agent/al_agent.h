/*
 * al_agent.h -- one site of a multi-site run: `autoloco agent -c site.ini`.
 *
 * The agent trains locally for H inner steps (one worker, or W worker
 * processes through the ODC engine), then runs a round with its peers over
 * mutual-TLS gRPC:
 *
 *   1. statistics: every site sends its interval's scalars to every other;
 *      the round's members are the sites whose statistics arrived before the
 *      deadline (a site that died mid-interval is left out here);
 *   2. reduce-scatter: Δ = θ_global − θ_local is cut into M shards (shard k
 *      belongs to the k-th member by name); each site encodes its shards with
 *      the codec and sends shard k to its owner; the owner decodes the M
 *      contributions and averages them in site order (bitwise the same
 *      whatever the arrival order);
 *   3. all-gather: the owner encodes the mean shard, decodes it itself, and
 *      sends the same bytes to every member, so all sites assemble the
 *      identical Δ̄;
 *   4. commit: every site combines the same statistics, asks the policy for
 *      the next H, and applies the same outer step: θ_global stays bitwise
 *      equal everywhere (its hash travels in the handshakes and logs).
 *
 * A site that fails during steps 2-3 (a send to it fails or its shard misses
 * the deadline) is dropped and the survivors redo the exchange without it,
 * from the Δ they still hold. A restarted or new site pulls θ_global and the
 * outer state from the live sites, waits for the round in progress to commit,
 * and joins the next one.
 */
#ifndef AL_AGENT_H
#define AL_AGENT_H

#include "al_store.h"

typedef struct al_agent_opts {
    const char *resume; /* checkpoint folder or its parent; NULL: fresh */
    int quiet;          /* no per-round progress lines */
} al_agent_opts;

/* Validate everything an agent needs from a config without starting (used by
 * `autoloco config check` too). */
int al_agent_check_config(const al_config *c, al_err *err);

/* Run a site until [inner] steps are done, or SIGINT/SIGTERM (then save a
 * checkpoint and return 0). */
int al_agent_run(const al_config *c, const al_agent_opts *o, al_err *err);

#endif
