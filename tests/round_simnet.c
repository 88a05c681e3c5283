/* round_simnet.c -- simulated clock and network for tests/test_round.c. */
#include "round_simnet.h"

#include <stdio.h>
#include <stdlib.h>

static int before(const sn_event *x, const sn_event *y) {
    return x->t < y->t || (x->t == y->t && x->seq < y->seq);
}

void sn_push(sn_heap *h, const sn_event *e) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 1024;
        h->v = realloc(h->v, (size_t)h->cap * sizeof *h->v);
        if (!h->v) abort(); /* a test binary: no memory, no test */
    }
    int i = h->n++;
    h->v[i] = *e;
    h->v[i].seq = h->seq++;
    while (i > 0 && before(&h->v[i], &h->v[(i - 1) / 2])) {
        sn_event t = h->v[i];
        h->v[i] = h->v[(i - 1) / 2];
        h->v[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

int sn_pop(sn_heap *h, sn_event *e) {
    if (!h->n) return 0;
    *e = h->v[0];
    h->v[0] = h->v[--h->n];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && before(&h->v[l], &h->v[m])) m = l;
        if (r < h->n && before(&h->v[r], &h->v[m])) m = r;
        if (m == i) break;
        sn_event t = h->v[i];
        h->v[i] = h->v[m];
        h->v[m] = t;
        i = m;
    }
    return 1;
}

void sn_heap_free(sn_heap *h) {
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

double sn_uniform(al_rng *rng, double lo, double hi) {
    return lo + (hi - lo) * al_rng_uniform(rng);
}

int sn_link_up(const sn_net *net, int a, int b) {
    return net->group[a] == net->group[b] && !net->cut[a][b];
}

void sn_send(sn_net *net, sn_heap *h, double now, sn_event e) {
    net->sent++;
    if (al_rng_uniform(net->rng) < net->drop) {
        net->dropped++;
        return;
    }
    int copies = 1 + (al_rng_uniform(net->rng) < net->dup);
    net->duplicated += copies - 1;
    for (int k = 0; k < copies; k++) {
        e.t = now + sn_uniform(net->rng, net->dmin, net->dmax);
        sn_push(h, &e);
    }
}

static const char *const KIND_NAMES[SN_NKINDS] = {
#define SN_NAME(e, s) s,
    SN_KINDS(SN_NAME)
#undef SN_NAME
};

const char *sn_kind_name(int kind) {
    if (kind >= 0 && kind < SN_NKINDS) return KIND_NAMES[kind];
    return al_round_action_name((al_round_action_type)(kind - SN_NKINDS));
}

void sn_trace_add(sn_trace *tr, double t, int site, int what, long a, long b, long c) {
    int i = (int)(tr->n++ % SN_TRACE);
    tr->r[i].t = t;
    tr->r[i].site = site;
    tr->r[i].what = what;
    tr->r[i].a = a;
    tr->r[i].b = b;
    tr->r[i].c = c;
}

void sn_trace_print(const sn_trace *tr, int last) {
    long from = tr->n - (last < SN_TRACE ? last : SN_TRACE);
    if (from < 0) from = 0;
    for (long k = from; k < tr->n; k++) {
        int i = (int)(k % SN_TRACE);
        const char *act = tr->r[i].what >= SN_NKINDS ? "  do " : "  on ";
        printf("    t=%8.3f site %d%s%-12s %ld %ld %ld\n", tr->r[i].t, tr->r[i].site, act,
               sn_kind_name(tr->r[i].what), tr->r[i].a, tr->r[i].b, tr->r[i].c);
    }
}
