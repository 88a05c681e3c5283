/* agent_machine.h -- the driver's side of the round state machine
 * (agent_machine.c; rank 4: it calls agent_net.c, agent_hash.c and
 * agent_events.c). */
#ifndef AL_AGENT_MACHINE_H
#define AL_AGENT_MACHINE_H

#include "agent_impl.h"

/* The machine's status as the heartbeats carry it. */
void ag_status_out(const al_round_status *st, al_peer_status *p);
/* Feed one event to the machine, stamped now (traced with AL_LOG=debug); the
 * actions it causes join the agent's queue at once. */
void ag_feed(agent *a, al_round_event *ev);
/* Liars (a mean shard that broke the claim check): the sites this site
 * leaves out until they restart, as a status field (bit i); publish that
 * field; mark site i one (why: for the log), telling the machine and peers. */
uint32_t ag_liars(const agent *a);
void ag_publish_liars(agent *a);
void ag_mark_liar(agent *a, int i, const char *why);
/* The oldest action not yet carried out: 1 (into *act), 0 when none waits, or
 * a negative code when the machine's queue overflowed (a fatal error that
 * names itself) or the agent's could not grow. */
int ag_next_action(agent *a, al_round_action *act, al_err *err);
/* Persist a vote before any status shows it (<checkpoint dir>/vote.json). */
int ag_vote_save(agent *a, const al_round_vote *v, al_err *err);
/* Start the machine at a->round from θ_global (and, resumed, the persisted vote). */
int ag_machine_init(agent *a, al_err *err);
/* Peer statuses and statistics that arrived since the last look become
 * events; a peer of another run configuration is an error. */
int ag_feed_inbox(agent *a, al_err *err);
/* The machine's health line into the dashboard and the event log on change. */
void ag_report_health(agent *a);
/* Every alive peer has seen this site's last commit. */
int ag_peers_caught_up(agent *a);

#endif
