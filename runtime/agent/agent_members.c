/* agent_members.c -- the sites this site hears (issue 32).
 *
 * The round machine leaves out of an attempt's members one site of every pair
 * where one does not hear the other, as the statuses show
 * (runtime/round/members.c), so that every site counts the same members. The
 * agent's measure of "hears" is the peer's own calls: a ping answered by a
 * peer says the peer's server is reachable, not that the peer's calls reach
 * this site. With a one-way cut (x's calls to y refused, y's to x delivered)
 * each still has the other's status -- y's pings to x come back with x's --
 * but y never gets x's statistics or shards; counted by answers, both would
 * hear each other and disagree on the members attempt after attempt. */
#include "agent_members.h"

uint32_t ag_hears(agent *a) {
    uint32_t h = 1u << a->self;
    double now = al_now(), timeout = a->cfg->round_peer_timeout_s;
    pthread_mutex_lock(&a->mu);
    for (int i = 0; i < a->nsites; i++)
        if (i != a->self && now - a->call_seen[i] <= timeout) h |= 1u << i;
    pthread_mutex_unlock(&a->mu);
    return h;
}
