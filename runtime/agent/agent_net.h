/* agent_net.h -- the server hooks, clients, state pulls and the
 * configuration handshake (agent_net.c; rank 2: it calls agent_hash.c and
 * agent_stream.c). It carries out what it is asked and decides nothing. The
 * round's Δ exchange is agent_exchange.h. */
#ifndef AL_AGENT_NET_H
#define AL_AGENT_NET_H

#include "agent_impl.h"

int ag_net_start(agent *a, al_err *err);
void ag_net_stop(agent *a);
/* Publish the committed state for peers that pull it (copies it). */
int ag_publish_state(agent *a, al_err *err);
/* Shake hands with peer i: both must run the same configuration. 0: done;
 * AL_EMISMATCH: it runs another (fatal); else not reachable now. */
int ag_handshake(agent *a, int i, al_err *err);
/* Do a peer's statistics fit this site's for the round? Else why. */
int ag_stats_fit(const al_site_stats *mine, const al_site_stats *theirs, char *why, size_t n);
/* Send our statistics for (a->round, epoch) to peer i (one try). */
int ag_push_stats(agent *a, al_client *c, const al_site_stats *mine, long round, uint64_t epoch,
                  al_err *err);
/* Pull the committed state (θ_global, outer and policy state) from peer i
 * into a->pulled*; checked against the hash its metadata names. */
int ag_pull(agent *a, int i, al_err *err);
/* The clients to the peers, (re)made where the configuration asks. */
int ag_refresh_clients(agent *a, al_err *err);
/* Start accepting round r (moves the receive window, frees old slots). */
void ag_set_round(agent *a, long r);

#endif
