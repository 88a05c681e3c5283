/* round_simnet.h -- the simulated clock and network of tests/test_round.c: a
 * queue of timed events (a binary heap ordered by time, then by insertion), a
 * network of n sites that drops, delays, duplicates and reorders messages and
 * can be partitioned or have single links cut, and a ring of the last events
 * for a failure's report. Everything is driven by one seeded RNG. */
#ifndef ROUND_SIMNET_H
#define ROUND_SIMNET_H

#include <stdint.h>

#include "al_round.h"

/* The simulated world's event kinds, (name, text) once for the enum and
 * sn_kind_name. */
#define SN_KINDS(X)                                                                                \
    X(SN_STATUS, "status")     /* message: a status from `from` to `site` */                       \
    X(SN_STATS, "stats")       /* message: statistics for (round, epoch) */                        \
    X(SN_TICK, "tick")         /* the site's timer */                                              \
    X(SN_TRAINED, "trained")   /* the site's interval ends (seq: which TRAIN) */                   \
    X(SN_XCHECK, "xcheck")     /* look at the site's exchange (round, epoch, members) */           \
    X(SN_CAND, "candidate")    /* the site's candidate is computed (hash) */                       \
    X(SN_SYNCED, "synced")     /* the site's pull from `from` is answered */                       \
    X(SN_FETCHED, "fetched")   /* its fetch of a candidate from `from` is answered */              \
    X(SN_RELOADED, "reloaded") /* the site's reload of its persisted commit is done (hash) */      \
    X(SN_FAULT, "fault")       /* fault: a, b, dur */                                              \
    X(SN_RESTART, "restart")   /* the site comes back (inc: the incarnation that crashed) */       \
    X(SN_QUIESCE, "quiesce")   /* faults end: heal, restart, stop dropping */

enum {
#define SN_ENUM(e, s) e,
    SN_KINDS(SN_ENUM)
#undef SN_ENUM
        SN_NKINDS
};

typedef struct sn_event {
    double t;
    uint64_t seq; /* insertion order: ties in t break by it */
    int kind, site, from, inc, fault, a, b;
    long round, n;
    uint64_t epoch;
    uint32_t members;
    double dur;
    al_round_hash hash;
    al_round_status st;
} sn_event;

typedef struct sn_heap {
    sn_event *v;
    int n, cap;
    uint64_t seq;
} sn_heap;

void sn_push(sn_heap *h, const sn_event *e);
int sn_pop(sn_heap *h, sn_event *e); /* 0 when empty */
void sn_heap_free(sn_heap *h);

typedef struct sn_net {
    int n;
    al_rng *rng;
    double drop, dup, dmin, dmax;  /* per message: P(lost), P(sent twice), delay range (s) */
    int group[AL_ROUND_MAX_SITES]; /* partition: sites talk only inside their group */
    uint8_t cut[AL_ROUND_MAX_SITES][AL_ROUND_MAX_SITES]; /* single links cut (both ways) */
    long sent, dropped, duplicated;
} sn_net;

int sn_link_up(const sn_net *net, int a, int b);
/* Send message e (kind, site = to, from, payload) at time now: drop it, delay it, or
 * deliver it twice, as the network's rates say. */
void sn_send(sn_net *net, sn_heap *h, double now, sn_event e);
double sn_uniform(al_rng *rng, double lo, double hi);

/* The last SN_TRACE records, printed when an invariant fails. */
#define SN_TRACE 96
typedef struct sn_trace {
    struct {
        double t;
        int site, what; /* what: an SN_* kind, or SN_NKINDS + an AL_ACT_* */
        long a, b, c;
    } r[SN_TRACE];
    long n;
} sn_trace;
void sn_trace_add(sn_trace *tr, double t, int site, int what, long a, long b, long c);
void sn_trace_print(const sn_trace *tr, int last);
const char *sn_kind_name(int kind);

#endif
