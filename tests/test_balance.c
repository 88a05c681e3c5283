/*
 * test_balance.c -- the load balancer:
 *  - LPT on Graham's known input {5,5,4,4,3,3,3} over 3 workers gives loads
 *    11, 8, 8 (max/min = 11/8 exactly; the optimum is 9, 9, 9); KK finds a
 *    partition at least as even here;
 *  - every method on random long-tailed inputs: every piece in exactly one
 *    microbatch of exactly one worker, no microbatch over the token budget,
 *    micro gives every worker the same count (or one less), and lpt/kk are
 *    never less even than naive;
 *  - packing errors: a piece longer than the budget is refused;
 *  - workloads: lengths within [1, T], fixed rows exactly T, docs in order;
 *    a workload seeked to another's told position (past an epoch's end) draws
 *    the same pieces as that one does next, and not those of a fresh one; a
 *    position outside the data and lognormal's (it has none) are refused.
 */
#include "al_test.h"

#include <string.h>

#include "al_balance.h"

static void loads(const double *cost, const int *owner, int n, int W, double *load) {
    memset(load, 0, (size_t)W * sizeof(double));
    for (int i = 0; i < n; i++) load[owner[i]] += cost[i];
}

static void test_lpt_known(void **state) {
    (void)state;
    const double cost[] = {5, 5, 4, 4, 3, 3, 3};
    int owner[7];
    double load[3];
    al_err err = {0};
    assert_int_equal(al_partition_lpt(cost, 7, 3, owner, &err), 0);
    loads(cost, owner, 7, 3, load);
    double hi = fmax(load[0], fmax(load[1], load[2])), lo = fmin(load[0], fmin(load[1], load[2]));
    print_message("  LPT loads %g %g %g\n", load[0], load[1], load[2]);
    assert_true(hi == 11.0 && lo == 8.0);
    assert_true(hi / lo == 11.0 / 8.0);
    assert_int_equal(al_partition_kk(cost, 7, 3, owner, &err), 0);
    loads(cost, owner, 7, 3, load);
    double khi = fmax(load[0], fmax(load[1], load[2])), klo = fmin(load[0], fmin(load[1], load[2]));
    print_message("  KK  loads %g %g %g\n", load[0], load[1], load[2]);
    assert_true(khi / klo <= hi / lo);
    assert_true(load[0] + load[1] + load[2] == 27.0);
    assert_int_equal(al_partition_lpt(cost, 7, 0, owner, &err), AL_EINVAL);
}

static void test_plans_random(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 9);
    al_err err = {0};
    for (int trial = 0; trial < 40; trial++) {
        int n = 1 + (int)al_rng_below(&r, 200), W = 1 + (int)al_rng_below(&r, 9);
        int budget = 64 + (int)al_rng_below(&r, 200);
        al_piece *pc = malloc((size_t)n * sizeof *pc);
        for (int i = 0; i < n; i++) {
            double x = exp(log(30.0) + 1.2 * al_rng_normal(&r));
            pc[i] = (al_piece){(uint64_t)i * 1000, AL_MAX(1, AL_MIN(budget, (int)x))};
        }
        double imb[4];
        for (int m = 0; m < 4; m++) {
            al_balance_opts o = {(al_balance_method)m, budget, m == 3 ? 1e-3 : 0.0};
            al_plan p;
            assert_int_equal(al_plan_build(&p, pc, n, W, &o, &err), 0);
            int *seen = calloc((size_t)n, sizeof(int));
            for (int w = 0; w < W; w++) {
                int cnt = p.mb_first[w + 1] - p.mb_first[w];
                assert_true(cnt <= p.max_nmb);
                if (m == AL_BAL_MICRO) assert_true(cnt >= p.max_nmb - 1);
                for (int k = p.mb_first[w]; k < p.mb_first[w + 1]; k++) {
                    int tok = 0;
                    for (int i = p.item_first[k]; i < p.item_first[k + 1]; i++) {
                        seen[p.items[i]]++;
                        tok += pc[p.items[i]].len;
                    }
                    assert_int_equal(tok, p.mb_tokens[k]);
                    assert_true(tok <= budget && tok > 0);
                }
            }
            for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
            assert_int_equal(p.mb_first[W], p.nmb);
            imb[m] = al_plan_imbalance(&p);
            free(seen);
            al_plan_free(&p);
        }
        /* balanced partitions are no worse than cutting the list (when every
         * worker gets something under naive) */
        if (isfinite(imb[0]) && n >= 4 * W) {
            assert_true(imb[AL_BAL_LPT] <= imb[AL_BAL_NAIVE] + 1e-9);
        }
        free(pc);
    }
}

static void test_lpt_ratio_large(void **state) {
    (void)state;
    /* many pieces: LPT's max/min over 2 workers is within 1 + (largest/total) */
    al_rng r;
    al_rng_seed(&r, 4);
    int n = 300;
    double *cost = malloc((size_t)n * sizeof(double)), total = 0, big = 0;
    int *owner = malloc((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) {
        cost[i] = 1 + (double)al_rng_below(&r, 256);
        total += cost[i];
        big = fmax(big, cost[i]);
    }
    al_err err = {0};
    double load[2];
    assert_int_equal(al_partition_lpt(cost, n, 2, owner, &err), 0);
    loads(cost, owner, n, 2, load);
    double ratio = fmax(load[0], load[1]) / fmin(load[0], load[1]);
    print_message("  LPT 300 pieces over 2: max/min = %.5f\n", ratio);
    assert_true(ratio <= 1.0 + 2 * big / total);
    assert_int_equal(al_partition_kk(cost, n, 2, owner, &err), 0);
    loads(cost, owner, n, 2, load);
    print_message("  KK  300 pieces over 2: max/min = %.5f\n",
                  fmax(load[0], load[1]) / fmin(load[0], load[1]));
    assert_true(fmax(load[0], load[1]) / fmin(load[0], load[1]) <= ratio + 1e-12);
    free(cost);
    free(owner);
}

static void test_pack_errors(void **state) {
    (void)state;
    int len[] = {10, 40, 5}, items[] = {0, 1, 2}, bin[3];
    al_err err = {0};
    assert_int_equal(al_pack_ffd(len, items, 3, 32, bin, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "40 tokens"));
    assert_int_equal(al_pack_ffd(len, items, 3, 45, bin, &err), 2); /* {40,5} {10} */
    assert_int_equal(bin[1], 0);
    assert_int_equal(bin[2], 0);
    assert_int_equal(bin[0], 1);
    al_balance_method m;
    assert_int_equal(al_balance_parse("lpt", &m, &err), 0);
    assert_int_equal(m, AL_BAL_LPT);
    assert_int_equal(al_balance_parse("best", &m, &err), AL_EINVAL);
}

/* A token file in memory: 50 documents of length 1..80 (free tok and doc). */
static void fifty_docs(al_tokens *t) {
    memset(t, 0, sizeof *t);
    size_t cap = 6000;
    t->tok = calloc(cap, sizeof(uint16_t));
    t->doc = calloc(51, sizeof(uint64_t));
    t->vocab = 257;
    t->eot = 256;
    size_t pos = 0;
    for (int d = 0; d < 50; d++) {
        t->doc[d] = pos;
        t->tok[pos++] = 256;
        int len = 1 + (d * 37) % 80;
        for (int i = 0; i < len - 1; i++) t->tok[pos++] = (uint16_t)('a' + i % 26);
    }
    t->doc[50] = pos;
    t->tok[pos++] = 256;
    t->n = pos;
    t->ndocs = 50;
}

static void test_workloads(void **state) {
    (void)state;
    al_tokens t;
    fifty_docs(&t);
    al_err err = {0};
    al_piece pc[200];
    for (int kind = 0; kind < 3; kind++) {
        al_workload wl;
        assert_int_equal(al_workload_init(&wl, (al_workload_kind)kind, &t, 32, 3, 20, 1.0, &err),
                         0);
        al_workload_next(&wl, pc, 200);
        long covered = 0;
        for (int i = 0; i < 200; i++) {
            assert_true(pc[i].len >= 1 && pc[i].len <= 32);
            assert_true(pc[i].start + (uint64_t)pc[i].len + 1 <= t.n);
            if (kind == AL_WL_FIXED) assert_int_equal(pc[i].len, 32);
            covered += pc[i].len;
        }
        if (kind == AL_WL_DOCS) { /* the first epoch covers every position once */
            long sum = 0, i = 0;
            for (; i < 200 && sum < (long)(t.n - 1); i++) sum += pc[i].len;
            assert_int_equal(sum, (long)(t.n - 1));
        }
        (void)covered;
        al_workload_free(&wl);
    }
    al_workload_kind k;
    assert_int_equal(al_workload_parse("lognormal", &k, &err), 0);
    assert_int_equal(al_workload_parse("zipf", &k, &err), AL_EINVAL);
    free(t.tok);
    free(t.doc);
}

static int same_pieces(const al_piece *x, const al_piece *y, int n) {
    for (int i = 0; i < n; i++)
        if (x[i].start != y[i].start || x[i].len != y[i].len) return 0;
    return 1;
}

static void test_workload_seek(void **state) {
    (void)state;
    al_tokens t;
    fifty_docs(&t);
    al_err err = {0};
    al_piece skip[137], a[100], b[100], fresh[100];
    for (int kind = AL_WL_FIXED; kind <= AL_WL_DOCS; kind++) {
        al_workload w1, w2;
        assert_int_equal(al_workload_init(&w1, (al_workload_kind)kind, &t, 32, 3, 0, 0, &err), 0);
        assert_int_equal(al_workload_init(&w2, (al_workload_kind)kind, &t, 32, 3, 0, 0, &err), 0);
        al_workload_next(&w2, fresh, 100);
        /* 137 pieces: past the end of the first epoch (docs: ~90 pieces) */
        al_workload_next(&w1, skip, 137);
        al_loader_state st;
        assert_int_equal(al_workload_tell(&w1, &st, &err), 0);
        if (kind == AL_WL_DOCS) assert_int_equal(st.epoch, 1);
        al_workload_next(&w1, a, 100);
        al_workload_free(&w2);
        assert_int_equal(al_workload_init(&w2, (al_workload_kind)kind, &t, 32, 3, 0, 0, &err), 0);
        assert_int_equal(al_workload_seek(&w2, &st, &err), 0);
        al_workload_next(&w2, b, 100);
        assert_true(same_pieces(a, b, 100));
        assert_false(same_pieces(fresh, b, 100));
        al_loader_state bad = {0, kind == AL_WL_DOCS ? 50 : t.n, 0};
        assert_int_equal(al_workload_seek(&w2, &bad, &err), AL_EMISMATCH);
        print_message("  %s: %s\n", al_workload_name((al_workload_kind)kind), err.msg);
        al_workload_free(&w1);
        al_workload_free(&w2);
    }
    al_workload wl;
    al_loader_state st = {0, 0, 0};
    assert_int_equal(al_workload_init(&wl, AL_WL_LOGNORMAL, &t, 32, 3, 20, 1.0, &err), 0);
    assert_int_equal(al_workload_tell(&wl, &st, &err), AL_EUNSUPPORTED);
    assert_int_equal(al_workload_seek(&wl, &st, &err), AL_EUNSUPPORTED);
    al_workload_free(&wl);
    free(t.tok);
    free(t.doc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lpt_known),       cmocka_unit_test(test_plans_random),
        cmocka_unit_test(test_lpt_ratio_large), cmocka_unit_test(test_pack_errors),
        cmocka_unit_test(test_workloads),       cmocka_unit_test(test_workload_seek),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
