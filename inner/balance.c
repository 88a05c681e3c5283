/* balance.c -- partitioning, packing, plans and workloads (see al_balance.h). */
#include "al_balance.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const method_names[] = {"naive", "micro", "lpt", "kk"};

int al_balance_parse(const char *s, al_balance_method *out, al_err *err) {
    for (int i = 0; i < (int)AL_ARRAY_LEN(method_names); i++)
        if (!strcmp(s, method_names[i])) {
            *out = (al_balance_method)i;
            return 0;
        }
    return al_errf(err, AL_EINVAL, "unknown balance method '%s' (naive, micro, lpt, kk)", s);
}

const char *al_balance_name(al_balance_method m) {
    return (unsigned)m < AL_ARRAY_LEN(method_names) ? method_names[m] : "?";
}

/* ---- partitioning ------------------------------------------------------------------ */

/* Sort indices by decreasing key, ties by increasing index (qsort is not
 * stable, so the index is part of the order). */
typedef struct keyed {
    double key;
    int idx;
} keyed;
static int cmp_keyed_desc(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static keyed *sorted_desc(const double *key, int n) {
    keyed *k = malloc((n > 0 ? (size_t)n : 1) * sizeof *k);
    if (!k) return NULL;
    for (int i = 0; i < n; i++) k[i] = (keyed){key[i], i};
    qsort(k, (size_t)n, sizeof *k, cmp_keyed_desc);
    return k;
}

int al_partition_lpt(const double *cost, int n, int W, int *owner, al_err *err) {
    if (W < 1) return al_errf(err, AL_EINVAL, "partition: %d workers", W);
    keyed *k = sorted_desc(cost, n);
    double *load = calloc((size_t)W, sizeof(double));
    if (!k || !load) {
        free(k), free(load);
        return al_errf(err, AL_ENOMEM, "partition: out of memory");
    }
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int w = 1; w < W; w++)
            if (load[w] < load[best]) best = w;
        owner[k[i].idx] = best;
        load[best] += k[i].key;
    }
    free(k), free(load);
    return 0;
}

/* Karmarkar-Karp, multiway (largest differencing method). Every item starts
 * as a W-tuple of subsets (itself, then W-1 empty ones). Repeatedly take the
 * two tuples with the largest spread (max - min sum) and merge them, pairing
 * the heaviest subset of one with the lightest of the other, so their
 * differences cancel. The last tuple is the partition. Subsets are linked
 * lists of items, so a merge is O(W log W). */
typedef struct kk_tuple {
    double *sum; /* [W] sorted decreasing */
    int *head, *tail;
} kk_tuple;

static double spread(const kk_tuple *t, int W) {
    return t->sum[0] - t->sum[W - 1];
}

static void heap_sift(kk_tuple **h, int n, int i, int W) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && spread(h[l], W) > spread(h[m], W)) m = l;
        if (r < n && spread(h[r], W) > spread(h[m], W)) m = r;
        if (m == i) return;
        kk_tuple *t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

static void heap_up(kk_tuple **h, int i, int W) {
    while (i > 0 && spread(h[(i - 1) / 2], W) < spread(h[i], W)) {
        kk_tuple *t = h[i];
        h[i] = h[(i - 1) / 2];
        h[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

int al_partition_kk(const double *cost, int n, int W, int *owner, al_err *err) {
    if (W < 1) return al_errf(err, AL_EINVAL, "partition: %d workers", W);
    if (n == 0) return 0;
    kk_tuple *tup = calloc((size_t)n, sizeof *tup), **heap = calloc((size_t)n, sizeof *heap);
    double *sums = calloc((size_t)n * W, sizeof(double));
    int *links = malloc((size_t)n * W * 2 * sizeof(int)), *next = malloc((size_t)n * sizeof(int));
    double *tmp_s = malloc((size_t)W * 2 * sizeof(double));
    int *tmp_i = malloc((size_t)W * 4 * sizeof(int));
    if (!tup || !heap || !sums || !links || !next || !tmp_s || !tmp_i) {
        free(tup), free(heap), free(sums), free(links), free(next), free(tmp_s), free(tmp_i);
        return al_errf(err, AL_ENOMEM, "partition: out of memory");
    }
    for (int i = 0; i < n; i++) {
        kk_tuple *t = &tup[i];
        t->sum = sums + (size_t)i * W;
        t->head = links + (size_t)i * W * 2;
        t->tail = t->head + W;
        for (int w = 0; w < W; w++) t->head[w] = t->tail[w] = -1;
        t->sum[0] = cost[i];
        t->head[0] = t->tail[0] = i;
        next[i] = -1;
        heap[i] = t;
        heap_up(heap, i, W);
    }
    int hn = n;
    while (hn > 1) {
        kk_tuple *a = heap[0];
        heap[0] = heap[--hn];
        heap_sift(heap, hn, 0, W);
        kk_tuple *b = heap[0];
        heap[0] = heap[--hn];
        heap_sift(heap, hn, 0, W);
        /* a's subset j (heavy first) joins b's subset W-1-j (light first) */
        for (int j = 0; j < W; j++) {
            int bj = W - 1 - j;
            tmp_s[j] = a->sum[j] + b->sum[bj];
            int h = a->head[j], t = a->tail[j];
            if (b->head[bj] >= 0) {
                if (h < 0)
                    h = b->head[bj];
                else
                    next[t] = b->head[bj];
                t = b->tail[bj];
            }
            tmp_i[j] = h;
            tmp_i[W + j] = t;
        }
        /* re-sort the merged subsets by decreasing sum (insertion sort: W is small) */
        for (int j = 0; j < W; j++) {
            double s = tmp_s[j];
            int h = tmp_i[j], t = tmp_i[W + j], k = j - 1;
            while (k >= 0 && a->sum[k] < s) {
                a->sum[k + 1] = a->sum[k];
                a->head[k + 1] = a->head[k];
                a->tail[k + 1] = a->tail[k];
                k--;
            }
            a->sum[k + 1] = s;
            a->head[k + 1] = h;
            a->tail[k + 1] = t;
        }
        heap[hn++] = a;
        heap_up(heap, hn - 1, W);
    }
    kk_tuple *r = heap[0];
    for (int w = 0; w < W; w++)
        for (int i = r->head[w]; i >= 0; i = next[i]) owner[i] = w;
    free(tup), free(heap), free(sums), free(links), free(next), free(tmp_s), free(tmp_i);
    return 0;
}

/* ---- packing --------------------------------------------------------------------- */

int al_pack_ffd(const int *len, const int *items, int n, int budget, int *bin, al_err *err) {
    double *key = malloc((size_t)(n ? n : 1) * sizeof(double));
    int *room = malloc((size_t)(n ? n : 1) * sizeof(int));
    if (!key || !room) {
        free(key), free(room);
        return al_errf(err, AL_ENOMEM, "packing: out of memory");
    }
    for (int k = 0; k < n; k++) key[k] = (double)len[items[k]];
    keyed *order = sorted_desc(key, n);
    int nb = 0, rc = 0;
    for (int i = 0; order && i < n; i++) {
        int k = order[i].idx, l = len[items[k]];
        if (l > budget || l < 1) {
            rc = al_errf(err, AL_EINVAL,
                         "packing: a piece of %d tokens does not fit a budget of %d", l, budget);
            break;
        }
        int b = 0;
        while (b < nb && room[b] < l) b++;
        if (b == nb) room[nb++] = budget;
        room[b] -= l;
        bin[k] = b;
    }
    if (!order) rc = al_errf(err, AL_ENOMEM, "packing: out of memory");
    free(order), free(key), free(room);
    return rc ? rc : nb;
}

/* ---- plans ----------------------------------------------------------------------- */

void al_plan_free(al_plan *p) {
    free(p->mb_first), free(p->item_first), free(p->items), free(p->mb_tokens), free(p->load);
    memset(p, 0, sizeof *p);
}

/* Per worker: the items it got, packed; appended to the plan in worker order. */
static int plan_alloc(al_plan *p, int n, int W, al_err *err) {
    memset(p, 0, sizeof *p);
    p->W = W;
    p->npieces = n;
    p->mb_first = calloc((size_t)W + 1, sizeof(int));
    p->item_first = calloc((size_t)n + (size_t)W + 1, sizeof(int)); /* nmb <= n + W */
    p->items = calloc((size_t)(n ? n : 1), sizeof(int));
    p->mb_tokens = calloc((size_t)n + (size_t)W + 1, sizeof(int));
    p->load = calloc((size_t)W, sizeof(double));
    if (!p->mb_first || !p->item_first || !p->items || !p->mb_tokens || !p->load) {
        al_plan_free(p);
        return al_errf(err, AL_ENOMEM, "plan: out of memory");
    }
    return 0;
}

/* Pack `items` (one worker's pieces) and append its microbatches to the plan. */
static int append_worker(al_plan *p, const int *len, int *items, int n, int budget, double c, int w,
                         int *bin, int *ni, al_err *err) {
    int nb = al_pack_ffd(len, items, n, budget, bin, err);
    if (nb < 0) return nb;
    p->mb_first[w] = p->nmb;
    for (int b = 0; b < nb; b++) {
        int k0 = *ni, tok = 0;
        for (int k = 0; k < n; k++)
            if (bin[k] == b) {
                p->items[(*ni)++] = items[k];
                tok += len[items[k]];
            }
        p->item_first[p->nmb] = k0;
        p->mb_tokens[p->nmb] = tok;
        p->load[w] += al_cost(tok, c);
        p->nmb++;
    }
    p->item_first[p->nmb] = *ni;
    p->mb_first[w + 1] = p->nmb;
    return 0;
}

/* micro: pack everything, then deal microbatches with a count limit. */
static int plan_micro(al_plan *p, const int *len, int n, int W, const al_balance_opts *o, int *bin,
                      al_err *err) {
    int *all = malloc((size_t)(n ? n : 1) * sizeof(int));
    if (!all) return al_errf(err, AL_ENOMEM, "plan: out of memory");
    for (int i = 0; i < n; i++) all[i] = i;
    int nb = al_pack_ffd(len, all, n, o->budget, bin, err);
    free(all);
    if (nb < 0) return nb;
    double *cost = calloc((size_t)(nb ? nb : 1), sizeof(double));
    int *count = calloc((size_t)W, sizeof(int)),
        *mb_owner = calloc((size_t)(nb ? nb : 1), sizeof(int));
    int *tok = calloc((size_t)(nb ? nb : 1), sizeof(int));
    keyed *order = NULL;
    int rc = 0;
    if (!cost || !count || !mb_owner || !tok) {
        rc = al_errf(err, AL_ENOMEM, "plan: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) tok[bin[i]] += len[i];
    for (int b = 0; b < nb; b++) cost[b] = al_cost(tok[b], o->quad_c);
    order = sorted_desc(cost, nb);
    int cap = (nb + W - 1) / W;
    for (int i = 0; order && i < nb; i++) {
        int best = -1;
        for (int w = 0; w < W; w++)
            if (count[w] < cap && (best < 0 || p->load[w] < p->load[best])) best = w;
        mb_owner[order[i].idx] = best;
        count[best]++;
        p->load[best] += order[i].key;
    }
    /* lay out worker by worker, microbatches in decreasing cost */
    int ni = 0;
    for (int w = 0; order && w < W; w++) {
        p->mb_first[w] = p->nmb;
        for (int i = 0; i < nb; i++) {
            int b = order[i].idx;
            if (mb_owner[b] != w) continue;
            p->item_first[p->nmb] = ni;
            for (int k = 0; k < n; k++)
                if (bin[k] == b) p->items[ni++] = k;
            p->mb_tokens[p->nmb++] = tok[b];
        }
        p->item_first[p->nmb] = ni;
        p->mb_first[w + 1] = p->nmb;
    }
    if (!order) rc = al_errf(err, AL_ENOMEM, "plan: out of memory");
out:
    free(cost), free(count), free(mb_owner), free(tok), free(order);
    return rc;
}

int al_plan_build(al_plan *p, const al_piece *pieces, int n, int W, const al_balance_opts *o,
                  al_err *err) {
    if (W < 1 || o->budget < 1 || n < 0)
        return al_errf(err, AL_EINVAL, "plan: %d workers, budget %d, %d pieces", W, o->budget, n);
    int rc = plan_alloc(p, n, W, err);
    if (rc) return rc;
    size_t sz = n > 0 ? (size_t)n : 1;
    int *len = malloc(sz * sizeof(int)), *owner = malloc(sz * sizeof(int));
    int *mine = malloc(sz * sizeof(int)), *bin = malloc(sz * sizeof(int));
    double *cost = malloc(sz * sizeof(double));
    if (!len || !owner || !mine || !bin || !cost) {
        rc = al_errf(err, AL_ENOMEM, "plan: out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        len[i] = pieces[i].len;
        cost[i] = al_cost(len[i], o->quad_c);
    }
    if (o->method == AL_BAL_MICRO) {
        rc = plan_micro(p, len, n, W, o, bin, err);
        goto out;
    }
    if (o->method == AL_BAL_NAIVE)
        for (int i = 0; i < n; i++) owner[i] = (int)((long long)i * W / (n ? n : 1));
    else if (o->method == AL_BAL_LPT)
        rc = al_partition_lpt(cost, n, W, owner, err);
    else
        rc = al_partition_kk(cost, n, W, owner, err);
    int ni = 0;
    for (int w = 0; w < W && rc == 0; w++) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (owner[i] == w) mine[m++] = i;
        rc = append_worker(p, len, mine, m, o->budget, o->quad_c, w, bin, &ni, err);
    }
out:
    if (rc == 0)
        for (int w = 0; w < W; w++)
            p->max_nmb = AL_MAX(p->max_nmb, p->mb_first[w + 1] - p->mb_first[w]);
    free(len), free(owner), free(mine), free(bin), free(cost);
    if (rc) al_plan_free(p);
    return rc;
}

double al_plan_imbalance(const al_plan *p) {
    double lo = INFINITY, hi = 0;
    for (int w = 0; w < p->W; w++) {
        lo = AL_MIN(lo, p->load[w]);
        hi = AL_MAX(hi, p->load[w]);
    }
    return lo > 0 ? hi / lo : INFINITY;
}

void al_plan_batch(const al_plan *p, int k, const al_piece *pieces, const al_tokens *data,
                   al_batch *b) {
    int t = 0;
    for (int i = p->item_first[k]; i < p->item_first[k + 1]; i++) {
        const al_piece *pc = &pieces[p->items[i]];
        const uint16_t *src = data->tok + pc->start;
        for (int j = 0; j < pc->len; j++, t++) {
            b->tokens[t] = src[j];
            b->targets[t] = src[j + 1];
            b->pos[t] = j;
            b->docstart[t] = t - j;
        }
    }
    b->B = 1;
    b->T = t;
    b->ntargets = t;
}

/* ---- workloads ------------------------------------------------------------------- */

static const char *const workload_names[] = {"fixed", "docs", "lognormal"};

int al_workload_parse(const char *s, al_workload_kind *out, al_err *err) {
    for (int i = 0; i < (int)AL_ARRAY_LEN(workload_names); i++)
        if (!strcmp(s, workload_names[i])) {
            *out = (al_workload_kind)i;
            return 0;
        }
    return al_errf(err, AL_EINVAL, "unknown workload '%s' (fixed, docs, lognormal)", s);
}

const char *al_workload_name(al_workload_kind k) {
    return (unsigned)k < AL_ARRAY_LEN(workload_names) ? workload_names[k] : "?";
}

int al_workload_init(al_workload *wl, al_workload_kind kind, const al_tokens *data, int T,
                     uint64_t seed, double median, double sigma, al_err *err) {
    memset(wl, 0, sizeof *wl);
    wl->kind = kind;
    wl->data = data;
    wl->T = T;
    wl->median = median > 0 ? median : 64;
    wl->sigma = sigma;
    al_rng_seed(&wl->rng, seed);
    if (data->n < (size_t)T + 2)
        return al_errf(err, AL_EFORMAT, "%s: %zu tokens, fewer than one piece of %d", data->path,
                       data->n, T);
    if (kind == AL_WL_DOCS) return al_loader_init(&wl->ld, data, AL_PACK_DOCS, 1, seed, err);
    return 0;
}

void al_workload_free(al_workload *wl) {
    if (wl->kind == AL_WL_DOCS) al_loader_free(&wl->ld);
    memset(wl, 0, sizeof *wl);
}

void al_workload_next(al_workload *wl, al_piece *out, int n) {
    const al_tokens *d = wl->data;
    for (int i = 0; i < n; i++) {
        if (wl->kind == AL_WL_FIXED) {
            if (wl->off + (uint64_t)wl->T + 1 > d->n) wl->off = 0;
            out[i] = (al_piece){wl->off, wl->T};
            wl->off += (uint64_t)wl->T;
        } else if (wl->kind == AL_WL_LOGNORMAL) {
            double x = exp(log(wl->median) + wl->sigma * al_rng_normal(&wl->rng));
            int len = x >= wl->T ? wl->T : AL_MAX(1, (int)lround(x));
            uint64_t start = al_rng_below(&wl->rng, (uint64_t)(d->n - (size_t)len - 1));
            out[i] = (al_piece){start, len};
        } else {
            al_loader_state *st = &wl->ld.st;
            uint32_t k = wl->ld.perm[st->next];
            uint64_t len = al_doc_len(d, k), left = len - st->offset;
            int take = left > (uint64_t)wl->T ? wl->T : (int)left;
            out[i] = (al_piece){d->doc[k] + st->offset, take};
            st->offset += (uint64_t)take;
            if (st->offset == len) {
                st->offset = 0;
                if (++st->next >= d->ndocs) {
                    al_loader_state ns = {st->epoch + 1, 0, 0};
                    al_loader_seek(&wl->ld, &ns, NULL); /* cannot fail at the start of an epoch */
                }
            }
        }
    }
}

int al_workload_tell(const al_workload *wl, al_loader_state *st, al_err *err) {
    if (wl->kind == AL_WL_DOCS) {
        *st = wl->ld.st;
        return 0;
    }
    if (wl->kind == AL_WL_FIXED) {
        *st = (al_loader_state){0, wl->off, 0};
        return 0;
    }
    return al_errf(err, AL_EUNSUPPORTED, "workload %s: draws at random, it has no position",
                   al_workload_name(wl->kind));
}

int al_workload_seek(al_workload *wl, const al_loader_state *st, al_err *err) {
    if (wl->kind == AL_WL_DOCS) return al_loader_seek(&wl->ld, st, err);
    if (wl->kind != AL_WL_FIXED)
        return al_errf(err, AL_EUNSUPPORTED, "workload %s: draws at random, it has no position",
                       al_workload_name(wl->kind));
    if (st->next >= wl->data->n)
        return al_errf(err, AL_EMISMATCH, "data position (token %llu) beyond %s (%zu tokens)",
                       (unsigned long long)st->next, wl->data->path, wl->data->n);
    wl->off = st->next;
    return 0;
}
