/* members.c -- who may be a member of an attempt, decided alike by every site
 * (issue 32; runtime/round/al_round.h, "One membership per attempt").
 *
 * Each status names the sites its sender hears (al_round_status.hears: the
 * peers whose own messages reach it, itself included). A pair of sites where
 * one does not hear the other cannot both be members of one exchange; of such
 * a broken pair the site with the higher index is left out, pairs taken in
 * order (0,1), (0,2), ..., (1,2), ..., skipping a pair of which one end is
 * left out already. Every site applies the rule to the same statuses, so a
 * one-way cut (x's messages to y lost, y's to x delivered), which y sees as
 * x's silence and x does not see at all, leaves the same site out everywhere,
 * and the rest, connected, commit. */
#include "al_round.h"

#ifndef AL_ROUND_BUG
#define AL_ROUND_BUG 0
#endif

static uint32_t all_sites(const al_round *m) {
    return m->cfg.nsites >= 32 ? ~0u : (1u << m->cfg.nsites) - 1;
}

uint32_t al_round_hears(const al_round *m) {
    uint32_t h = 1u << m->cfg.self;
    if (m->hears_fed) return (m->hears | h) & all_sites(m);
    for (int i = 0; i < m->cfg.nsites; i++)
        if (i != m->cfg.self && m->peer[i].alive) h |= 1u << i;
    return h;
}

/* Whom site i hears, as this site knows it: its own view, a live peer's
 * latest status (a sender without the field: everyone). */
static uint32_t hears_of(const al_round *m, int i) {
    if (i == m->cfg.self) return al_round_hears(m);
    uint32_t h = m->peer[i].st.hears;
    return h ? h | 1u << i : all_sites(m);
}

uint32_t al_round_left_out(const al_round *m) {
    if (AL_ROUND_BUG == 5) return 0; /* each site's own view alone decides */
    uint32_t live = 1u << m->cfg.self, present;
    for (int i = 0; i < m->cfg.nsites; i++)
        if (i != m->cfg.self && m->peer[i].alive && m->peer[i].have) live |= 1u << i;
    present = live;
    for (int i = 0; i < m->cfg.nsites; i++)
        if (live >> i & 1) present |= hears_of(m, i) & all_sites(m);
    uint32_t in = present;
    /* A peer that hears fewer than a quorum (itself included) is left out
     * first, and its view breaks no pair: it could not be in a connected
     * quorum anyway, and a peer that claims to hear no one (a hostile one, or
     * one cut off all round) would otherwise leave every higher index out and
     * stall the rest. What a peer can still do by naming whom it does not
     * hear is leave out sites while keeping a quorum that includes itself.
     * This site's own view is exempt: a site that hears too few cannot commit
     * whatever it decides, and keeps its behaviour when alone (one null vote,
     * test_alone_no_storm). */
    uint32_t judge = live;
    for (int i = 0; i < m->cfg.nsites; i++)
        if (i != m->cfg.self && (live >> i & 1) &&
            __builtin_popcount(hears_of(m, i) & all_sites(m)) < m->q) {
            in &= ~(1u << i);
            judge &= ~(1u << i);
        }
    for (int i = 0; i < m->cfg.nsites; i++) {
        for (int j = i + 1; j < m->cfg.nsites; j++) {
            if (!(in >> i & 1) || !(in >> j & 1)) continue;
            /* known broken: a live site (whose view this site has) does not
             * hear the other end */
            int broken = ((judge >> i & 1) && !(hears_of(m, i) >> j & 1)) ||
                         ((judge >> j & 1) && !(hears_of(m, j) >> i & 1));
            if (broken) in &= ~(1u << j);
        }
    }
    return present & ~in;
}
