/* agent_exchange.h -- the round's Δ exchange among the members
 * (agent_exchange.c; rank 3: it calls agent_net.c, agent_stream.c). It
 * carries out what the driver asks and decides nothing. */
#ifndef AL_AGENT_EXCHANGE_H
#define AL_AGENT_EXCHANGE_H

#include "agent_impl.h"

/* The Δ exchange of (a->round, epoch) among the M members mem[] (site ids,
 * increasing; `members` as a bit set) with statistics st[]: reduce-scatter,
 * then all-gather; on return a->dbar holds Δ̄. On failure *peer names the
 * member at fault (-1: none known). Sets a->excluded ([outer] max_delta_ratio). */
int ag_exchange(agent *a, uint64_t epoch, uint32_t members, const int *mem, const al_site_stats *st,
                int M, int *peer, al_err *err);

#endif
