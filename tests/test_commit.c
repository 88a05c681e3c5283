/*
 * test_commit.c -- the round's arithmetic shared by the agent and the sim
 * (runtime/round/al_round.h):
 *  - shards tile [0, P) in order, whatever P and M;
 *  - with fp32 the exchange is the plain mean in site order, bit for bit, and
 *    left-out members are not in it;
 *  - with int8 each value is within the codec's bounds of the true mean (a
 *    part's round trip, then the mean's), and the bytes are the encoded sizes;
 *  - the outlier rule against hand-computed cases;
 *  - decide + step: the statistics combined, the policy asked once, the outer
 *    step applied with S_r in steps or in lr;
 *  - bad input refused: no member in the mean, site ids out of order, too many
 *    members, a NaN in a Δ.
 */
#include "al_test.h"

#include <string.h>

#include "al_round.h"

enum { P = 1000, M = 3 };

static void fill(float **d, int m, size_t n, uint64_t seed) {
    al_rng r;
    al_rng_seed(&r, seed);
    for (int j = 0; j < m; j++) {
        d[j] = malloc(n * sizeof(float));
        t_fill(&r, d[j], n, 1.0 + j);
    }
}

static void test_shard_range(void **state) {
    (void)state;
    const size_t ps[] = {1, 7, 1000, 1001};
    for (size_t i = 0; i < AL_ARRAY_LEN(ps); i++)
        for (int m = 1; m <= 5; m++) {
            size_t prev = 0, lo, hi;
            for (int k = 0; k < m; k++) {
                al_shard_range(ps[i], m, k, &lo, &hi);
                assert_int_equal(lo, prev);
                assert_true(hi >= lo && hi - lo <= ps[i] / (size_t)m + 1);
                prev = hi;
            }
            assert_int_equal(prev, ps[i]);
        }
    assert_int_not_equal(al_site_data_seed(1, 0), al_site_data_seed(1, 1));
    assert_int_not_equal(al_site_data_seed(1, 0), al_site_data_seed(2, 0));
}

static void test_fp32_is_the_mean(void **state) {
    (void)state;
    float *d[M], dbar[P];
    fill(d, M, P, 1);
    al_err err = {0};
    al_commit_codec c;
    al_codec_cfg cfg = {.kind = AL_CODEC_FP32, .block = 128};
    assert_int_equal(al_commit_codec_init(&c, &cfg, &err), 0);
    int sites[M] = {0, 2, 5};
    double sent[M];
    assert_int_equal(al_commit_exchange(&c, (const float *const *)d, sites, NULL, NULL, M, P, dbar,
                                        sent, NULL, &err),
                     0);
    for (size_t i = 0; i < P; i++) {
        float want = ((d[0][i] + d[1][i]) + d[2][i]) / 3.0f; /* site order, fp32, divided */
        if (memcmp(&want, &dbar[i], 4)) fail_msg("value %zu: %.9g, want %.9g", i, dbar[i], want);
    }
    /* member j: its 2 parts of the others' shards, and its own mean shard twice */
    for (int j = 0; j < M; j++) {
        size_t lo, hi;
        al_shard_range(P, M, j, &lo, &hi);
        double want = 2 * 48 + 4.0 * (double)(P - (hi - lo)) + 2 * (48 + 4.0 * (double)(hi - lo));
        assert_true(sent[j] == want);
    }
    /* member 1 left out: the mean of 0 and 2 */
    int out[M] = {0, 1, 0};
    assert_int_equal(al_commit_exchange(&c, (const float *const *)d, sites, out, NULL, M, P, dbar,
                                        NULL, NULL, &err),
                     0);
    for (size_t i = 0; i < P; i++) {
        float want = (d[0][i] + d[2][i]) / 2.0f;
        if (memcmp(&want, &dbar[i], 4)) fail_msg("left out, value %zu", i);
    }
    al_commit_codec_free(&c);
    for (int j = 0; j < M; j++) free(d[j]);
}

/* The claim check (issue 17): a member whose Δ is ten times longer than the
 * norm it reported has every part left out of its shard's mean, so Δ̄ is
 * what leaving it out gives, bit for bit; honest members never trip it, with
 * fp32 or the coarsest codec (int4, whose error the slack must cover). */
static void test_claim_check(void **state) {
    (void)state;
    float *d[M], dbar[P], want[P];
    fill(d, M, P, 4);
    double claim[M];
    for (int j = 0; j < M; j++) claim[j] = al_sq_norm(d[j], P);
    al_err err = {0};
    int sites[M] = {0, 1, 2}, lies = -1;
    const al_codec_kind kinds[] = {AL_CODEC_FP32, AL_CODEC_INT8, AL_CODEC_INT4};
    for (size_t k = 0; k < AL_ARRAY_LEN(kinds); k++) {
        al_commit_codec c;
        al_codec_cfg cfg = {.kind = kinds[k], .block = 64};
        assert_int_equal(al_commit_codec_init(&c, &cfg, &err), 0);
        const float *const *dd = (const float *const *)d;
        assert_int_equal(
            al_commit_exchange(&c, dd, sites, NULL, NULL, M, P, want, NULL, NULL, &err), 0);
        assert_int_equal(
            al_commit_exchange(&c, dd, sites, NULL, claim, M, P, dbar, NULL, &lies, &err), 0);
        assert_int_equal(lies, 0);
        assert_memory_equal(dbar, want, sizeof dbar);
        al_commit_codec_free(&c);
    }
    for (size_t i = 0; i < P; i++) d[1][i] *= 10.0f; /* member 1 lies: claims 1/10 of its Δ */
    al_commit_codec c;
    al_codec_cfg cfg = {.kind = AL_CODEC_FP32, .block = 64};
    assert_int_equal(al_commit_codec_init(&c, &cfg, &err), 0);
    const float *const *dd = (const float *const *)d;
    int out[M] = {0, 1, 0};
    assert_int_equal(al_commit_exchange(&c, dd, sites, out, NULL, M, P, want, NULL, NULL, &err), 0);
    assert_int_equal(al_commit_exchange(&c, dd, sites, NULL, claim, M, P, dbar, NULL, &lies, &err),
                     0);
    assert_int_equal(lies, M); /* one part per shard */
    assert_memory_equal(dbar, want, sizeof dbar);
    /* the rule itself: at the slack, just past it, and non-finite */
    float x[2] = {3, 4};
    double nrm;
    assert_true(
        al_commit_fits_claim(x, 2, 25.0 / (AL_COMMIT_CLAIM_SLACK * AL_COMMIT_CLAIM_SLACK), &nrm));
    assert_true(nrm == 5.0);
    assert_false(
        al_commit_fits_claim(x, 2, 24.9 / (AL_COMMIT_CLAIM_SLACK * AL_COMMIT_CLAIM_SLACK), &nrm));
    x[1] = NAN;
    assert_false(al_commit_fits_claim(x, 2, 1e30, &nrm));
    al_commit_codec_free(&c);
    for (int j = 0; j < M; j++) free(d[j]);
}

static void test_int8_within_bounds(void **state) {
    (void)state;
    float *d[M], dbar[P];
    fill(d, M, P, 2);
    al_err err = {0};
    al_commit_codec c;
    al_codec_cfg cfg = {.kind = AL_CODEC_INT8, .block = 64};
    assert_int_equal(al_commit_codec_init(&c, &cfg, &err), 0);
    int sites[M] = {0, 1, 2};
    double sent[M];
    assert_int_equal(al_commit_exchange(&c, (const float *const *)d, sites, NULL, NULL, M, P, dbar,
                                        sent, NULL, &err),
                     0);
    double worst = 0, bound = 0;
    for (int j = 0; j < M; j++) bound += al_codec_error_bound(&cfg, d[j], P) / M;
    float mean[P];
    for (size_t i = 0; i < P; i++) mean[i] = (d[0][i] + d[1][i] + d[2][i]) / 3.0f;
    bound += al_codec_error_bound(&cfg, mean, P) * 1.01 + 1e-6; /* the mean's round trip */
    for (size_t i = 0; i < P; i++) worst = fmax(worst, fabs((double)dbar[i] - mean[i]));
    print_message("  int8: max |error| %.3e, bound %.3e; member 0 sent %.0f B\n", worst, bound,
                  sent[0]);
    assert_true(worst > 0 && worst <= bound);
    assert_true(sent[0] < 0.4 * 4 * (double)P * 4 / 3); /* well under fp32's */
    al_commit_codec_free(&c);
    for (int j = 0; j < M; j++) free(d[j]);
}

static void test_outliers(void **state) {
    (void)state;
    al_site_stats st[5];
    memset(st, 0, sizeof st);
    const double norms[] = {1, 2, 3, 13, 0.5};
    for (int j = 0; j < 5; j++) st[j].delta_sq = norms[j] * norms[j];
    int out[5];
    double med;
    /* median of 1 2 3 13 0.5 is 2: 13 > 4·2 is out, 3 is not */
    assert_int_equal(al_commit_outliers(st, 5, 4, out, &med), 1);
    assert_true(med == 2);
    assert_int_equal(out[3], 1);
    assert_int_equal(out[0] + out[1] + out[2] + out[4], 0);
    /* four: median (2 + 3) / 2 = 2.5; k = 4 leaves 13 out, k = 1.1 (2.75) 3 too */
    assert_int_equal(al_commit_outliers(st, 4, 4, out, &med), 1);
    assert_true(med == 2.5);
    assert_int_equal(out[3], 1);
    assert_int_equal(al_commit_outliers(st, 4, 1.1, out, &med), 2);
    assert_int_equal(out[2] + out[3], 2);
    /* off: k = 0, two members, a zero median */
    assert_int_equal(al_commit_outliers(st, 5, 0, out, &med), 0);
    assert_int_equal(al_commit_outliers(st, 2, 1, out, &med), 0);
    memset(st, 0, sizeof st);
    assert_int_equal(al_commit_outliers(st, 3, 4, out, &med), 0);
    assert_true(med == 0);
}

static void test_decide_and_step(void **state) {
    (void)state;
    al_err err = {0};
    al_policy *pol;
    assert_int_equal(al_policy_create(&pol, "fixed", &err), 0);
    assert_int_equal(al_policy_set(pol, "h_base", "20", &err), 0);
    int64_t h;
    assert_int_equal(al_policy_start(pol, &h, &err), 0);
    al_site_stats st[2];
    memset(st, 0, sizeof st);
    for (int j = 0; j < 2; j++) {
        st[j].site = j;
        st[j].steps = 20;
        st[j].loss = 2.0 + j;
        st[j].delta_sq = 4.0 * (j + 1);
        st[j].lr_sum = 0.05;
        st[j].lr_sq_sum = 1e-4;
        st[j].lr_last = 1e-3;
        st[j].tokens = 100;
    }
    float dbar[4] = {1, -1, 0.5f, 0}, theta[4] = {0}, t2[4];
    al_commit_decision d;
    assert_int_equal(al_commit_decide(pol, st, 2, dbar, 4, 3, h, &d, &err), 0);
    assert_int_equal(d.h_next, 20);
    assert_true(d.rs.loss == 2.5 && d.rs.delta_sq_mean == 6 && d.rs.mean_delta_sq == 2.25);
    assert_int_equal(d.rs.tokens, 200);
    assert_int_equal(d.rs.round, 3);
    /* the step in steps and in lr: S_r = 20 or 0.05 (none: the same step) */
    al_outer_cfg oc;
    al_outer_cfg_default(&oc);
    oc.s_ref = 20;
    al_outer o1, o2;
    assert_int_equal(al_outer_init(&o1, &oc, theta, 4, &err), 0);
    assert_int_equal(al_outer_init(&o2, &oc, theta, 4, &err), 0);
    assert_int_equal(al_commit_step(&o1, dbar, &d, 0, &err), 0);
    assert_int_equal(al_outer_step(&o2, dbar, 20.0, &err), 0);
    assert_memory_equal(o1.theta, o2.theta, sizeof t2);
    assert_int_equal(al_commit_step(&o1, dbar, &d, 1, &err), 0);
    assert_int_equal(al_outer_step(&o2, dbar, 0.05, &err), 0);
    assert_memory_equal(o1.theta, o2.theta, sizeof t2);
    /* a statistics mismatch is refused by the combine (the schedules diverged) */
    st[1].lr_sum = 0.06;
    assert_int_equal(al_commit_decide(pol, st, 2, dbar, 4, 4, h, &d, &err), AL_EMISMATCH);
    print_message("  refused: %s\n", err.msg);
    al_outer_free(&o1);
    al_outer_free(&o2);
    al_policy_free(pol);
}

static void test_bad_input(void **state) {
    (void)state;
    float *d[M], dbar[P];
    fill(d, M, P, 3);
    al_err err = {0};
    al_commit_codec c;
    al_codec_cfg cfg = {.kind = AL_CODEC_INT8, .block = 128};
    assert_int_equal(al_commit_codec_init(&c, &cfg, &err), 0);
    const float *const *dd = (const float *const *)d;
    int sites[M] = {0, 1, 2}, all[M] = {1, 1, 1};
    assert_int_equal(al_commit_exchange(&c, dd, sites, all, NULL, M, P, dbar, NULL, NULL, &err),
                     AL_EINVAL);
    print_message("  %s\n", err.msg);
    int twisted[M] = {0, 2, 1};
    assert_int_equal(al_commit_exchange(&c, dd, twisted, NULL, NULL, M, P, dbar, NULL, NULL, &err),
                     AL_EINVAL);
    print_message("  %s\n", err.msg);
    assert_int_equal(al_commit_exchange(&c, dd, sites, NULL, NULL, 0, P, dbar, NULL, NULL, &err),
                     AL_EINVAL);
    assert_int_equal(al_commit_exchange(&c, dd, sites, NULL, NULL, AL_COMMIT_MAX_MEMBERS + 1, P,
                                        dbar, NULL, NULL, &err),
                     AL_EINVAL);
    d[1][500] = NAN;
    assert_int_equal(al_commit_exchange(&c, dd, sites, NULL, NULL, M, P, dbar, NULL, NULL, &err),
                     AL_ENUMERIC);
    print_message("  %s\n", err.msg);
    al_commit_codec_free(&c);
    al_codec_cfg bad = {.kind = AL_CODEC_INT8, .block = 3};
    assert_int_equal(al_commit_codec_init(&c, &bad, &err), AL_EINVAL);
    al_commit_codec_free(&c);
    for (int j = 0; j < M; j++) free(d[j]);
}

/* [outer] overlap = delayed: the merge against the hand-computed two-site
 * example of docs/outer.md. θ_1 = (1, 1); a ran from (0.9, 1.1) to (0.7, 1.0),
 * b from (1.2, 0.8) to (1.1, 0.9): Δ^a = (0.2, 0.1), Δ^b = (0.1, -0.1),
 * merged θ^a = (0.8, 0.9), θ^b = (0.9, 1.1), Δ̄ = (0.15, 0), and DiLoCo's
 * step with lr 1 and no momentum gives θ_2 = (0.85, 1). */
static void test_overlap_merge(void **state) {
    (void)state;
    const float g[2] = {1.0f, 1.0f};
    float from_a[2] = {0.9f, 1.1f}, a[2] = {0.7f, 1.0f};
    float from_b[2] = {1.2f, 0.8f}, b[2] = {1.1f, 0.9f};
    float da[2], db[2], dbar[2];
    double sqa, sqb;
    al_err err = {0};
    assert_int_equal(al_commit_merge(a, from_a, g, 2, da, &sqa, &err), 0);
    assert_int_equal(al_commit_merge(b, from_b, g, 2, db, &sqb, &err), 0);
    const float want_da[2] = {0.2f, 0.1f}, want_db[2] = {0.1f, -0.1f};
    const float want_a[2] = {0.8f, 0.9f}, want_b[2] = {0.9f, 1.1f};
    for (int i = 0; i < 2; i++) {
        assert_float_equal(da[i], want_da[i], 1e-6);
        assert_float_equal(db[i], want_db[i], 1e-6);
        assert_float_equal(a[i], want_a[i], 1e-6);
        assert_float_equal(b[i], want_b[i], 1e-6);
        /* afterwards Δ is measured from θ_global, as in a blocking round */
        assert_float_equal(g[i] - a[i], da[i], 1e-6);
    }
    assert_double_near(sqa, (double)da[0] * da[0] + (double)da[1] * da[1], 1e-12);
    /* the round: the mean of the two, and the outer step on θ_1 */
    al_commit_codec c;
    al_codec_cfg cfg = {.kind = AL_CODEC_FP32, .block = 128};
    assert_int_equal(al_commit_codec_init(&c, &cfg, &err), 0);
    const float *d[2] = {da, db};
    int sites[2] = {0, 1};
    assert_int_equal(al_commit_exchange(&c, d, sites, NULL, NULL, 2, 2, dbar, NULL, NULL, &err), 0);
    assert_float_equal(dbar[0], 0.15f, 1e-6);
    assert_float_equal(dbar[1], 0.0f, 1e-6);
    al_outer_cfg oc;
    al_outer_cfg_default(&oc);
    oc.lr = 1.0;
    oc.momentum = 0.0;
    oc.correction = AL_CORRECTION_NONE;
    al_outer o;
    assert_int_equal(al_outer_init(&o, &oc, g, 2, &err), 0);
    assert_int_equal(al_outer_step(&o, dbar, 1.0, &err), 0);
    assert_float_equal(o.theta[0], 0.85f, 1e-6);
    assert_float_equal(o.theta[1], 1.0f, 1e-6);
    al_outer_free(&o);
    al_commit_codec_free(&c);
    /* a non-finite value is refused, naming where, and nothing is written */
    float bad[2] = {0.5f, NAN}, keep[2] = {0.5f, NAN};
    assert_int_equal(al_commit_merge(bad, from_a, g, 2, da, &sqa, &err), AL_ENUMERIC);
    assert_non_null(strstr(err.msg, "index 1"));
    assert_memory_equal(bad, keep, sizeof bad);
    /* the names */
    al_overlap ov;
    assert_int_equal(al_overlap_parse("delayed", &ov, &err), 0);
    assert_int_equal(ov, AL_OVERLAP_DELAYED);
    assert_string_equal(al_overlap_name(AL_OVERLAP_NONE), "none");
    assert_int_equal(al_overlap_parse("streaming", &ov, &err), 0);
    assert_int_equal(ov, AL_OVERLAP_STREAMING);
    assert_int_equal(al_overlap_parse("eventually", &ov, &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'eventually'"));
}

/* Streaming's merge rule, by hand (docs/outer.md, "Streaming"): θ_global =
 * (1, 1, 1, 1) in F = 2 fragments, [0, 2) and [2, 4); outer step lr 0.5, no
 * momentum, no correction: OuterStep_p(θ; Δ) = θ_p − Δ_p/2 on fragment p only.
 * At the end of span 0 site a stands at (0.8, 0.9, 0.7, 1.2), site b at
 * (1.0, 1.1, 0.9, 0.8). Fragment 0 synchronises:
 *   Δ^a_0 = θ_global_0 − θ^a_0 = (0.2, 0.1),   Δ^b_0 = (0.0, −0.1),   Δ̄_0 = (0.1, 0.0)
 *   θ_global = (0.95, 1.0, 1, 1)                        (fragment 1 untouched)
 *   a's eager guess g^a_0 = (1, 1) − Δ^a_0/2 = (0.9, 0.95); b's (1.0, 1.05)
 * a trains τ steps from its guess to (0.85, 1.0) on fragment 0; the merge:
 *   θ^a_0 = θ_global_0 + (θ^a_0 − g^a_0) = (0.95 − 0.05, 1.0 + 0.05) = (0.9, 1.05)
 * so its next Δ^a_0 = θ_global_0 − θ^a_0 = (0.05, −0.05): the τ steps' progress. */
static void test_overlap_streaming_merge(void **state) {
    (void)state;
    const float g0[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    float a[4] = {0.8f, 0.9f, 0.7f, 1.2f}, b[4] = {1.0f, 1.1f, 0.9f, 0.8f};
    float da[2], db[2], dbar[2];
    double sqa, sqb;
    al_err err = {0};
    assert_int_equal(al_pseudo_grad(da, g0, a, 2, &sqa, &err), 0); /* fragment 0: [0, 2) */
    assert_int_equal(al_pseudo_grad(db, g0, b, 2, &sqb, &err), 0);
    assert_float_equal(da[0], 0.2f, 1e-6);
    assert_float_equal(da[1], 0.1f, 1e-6);
    assert_float_equal(db[0], 0.0f, 1e-6);
    assert_float_equal(db[1], -0.1f, 1e-6);
    assert_double_near(sqa, 0.05, 1e-6);
    al_commit_codec c;
    al_codec_cfg cfg = {.kind = AL_CODEC_FP32, .block = 128};
    assert_int_equal(al_commit_codec_init(&c, &cfg, &err), 0);
    const float *d[2] = {da, db};
    int sites[2] = {0, 1};
    assert_int_equal(al_commit_exchange(&c, d, sites, NULL, NULL, 2, 2, dbar, NULL, NULL, &err), 0);
    assert_float_equal(dbar[0], 0.1f, 1e-6);
    assert_float_equal(dbar[1], 0.0f, 1e-6);
    al_outer_cfg oc;
    al_outer_cfg_default(&oc);
    oc.lr = 0.5;
    oc.momentum = 0.0;
    oc.correction = AL_CORRECTION_NONE;
    al_outer o, ea, eb;
    assert_int_equal(al_outer_init(&o, &oc, g0, 4, &err), 0);
    assert_int_equal(al_outer_init(&ea, &oc, g0, 4, &err), 0);
    assert_int_equal(al_outer_init(&eb, &oc, g0, 4, &err), 0);
    /* the eager guesses, each site's own Δ for the mean, on copies */
    assert_int_equal(al_outer_step_part(&ea, da, 0, 2, 1.0, &err), 0);
    assert_int_equal(al_outer_step_part(&eb, db, 0, 2, 1.0, &err), 0);
    const float want_ga[2] = {0.9f, 0.95f}, want_gb[2] = {1.0f, 1.05f};
    /* the committed step */
    assert_int_equal(al_outer_step_part(&o, dbar, 0, 2, 1.0, &err), 0);
    const float want_g[4] = {0.95f, 1.0f, 1.0f, 1.0f};
    for (int i = 0; i < 4; i++) assert_float_equal(o.theta[i], want_g[i], 1e-6);
    for (int i = 0; i < 2; i++) {
        assert_float_equal(ea.theta[i], want_ga[i], 1e-6);
        assert_float_equal(eb.theta[i], want_gb[i], 1e-6);
    }
    assert_int_equal(o.steps, 0); /* a fragment's step is not a whole round's */
    /* a trains τ steps from its guess, then merges fragment 0 */
    memcpy(a, ea.theta, 2 * sizeof(float));
    a[0] = 0.85f;
    a[1] = 1.0f;
    float prog[2];
    double sq;
    assert_int_equal(al_commit_merge(a, ea.theta, o.theta, 2, prog, &sq, &err), 0);
    assert_float_equal(a[0], 0.9f, 1e-6);
    assert_float_equal(a[1], 1.05f, 1e-6);
    assert_float_equal(a[2], 0.7f, 1e-6); /* fragment 1: not touched by fragment 0's merge */
    assert_float_equal(prog[0], 0.05f, 1e-6);
    assert_float_equal(prog[1], -0.05f, 1e-6);
    float next[2];
    assert_int_equal(al_pseudo_grad(next, o.theta, a, 2, &sq, &err), 0);
    assert_float_equal(next[0], 0.05f, 1e-6);
    assert_float_equal(next[1], -0.05f, 1e-6);
    al_outer_free(&o);
    al_outer_free(&ea);
    al_outer_free(&eb);
    al_commit_codec_free(&c);
}

/* The eager start after the merge above (site a of overlap_merge): θ_1 =
 * (1, 1) committed, a's interval started at s = (0.9, 1.1) and its Δ^a is
 * (0.2, 0.1); plain outer step (lr 1, no momentum): OuterStep(θ; Δ̂) = θ − Δ̂.
 *   delayed:      Δ̂ = Δ^a                          = (0.2, 0.1)    -> (0.8, 0.9)
 *   delayed-mid:  Δ̂ = Δ^a − (s − θ_1)/2            = (0.25, 0.05)  -> (0.75, 0.95)
 *   delayed-mean: Δ̂ = Δ^a/2 + Δ̄_prev/2, Δ̄_prev = (0.4, −0.2)
 *                                                   = (0.3, −0.05)  -> (0.7, 1.05) */
static void test_overlap_eager(void **state) {
    (void)state;
    const float th[2] = {1.0f, 1.0f}, from[2] = {0.9f, 1.1f}, da[2] = {0.2f, 0.1f};
    const float prev[2] = {0.4f, -0.2f};
    float blend[2], out[2];
    al_err err = {0};
    al_outer_cfg oc;
    al_outer_cfg_default(&oc);
    oc.lr = 1.0;
    oc.momentum = 0.0;
    oc.correction = AL_CORRECTION_NONE;
    al_outer o, scratch = {0};
    assert_int_equal(al_outer_init(&o, &oc, th, 2, &err), 0);
    const struct {
        al_eager_in in;
        float want[2];
    } cases[] = {
        {{.delta = da, .blend = blend}, {0.8f, 0.9f}},
        {{.delta = da, .from = from, .blend = blend}, {0.75f, 0.95f}},
        {{.delta = da, .dbar_prev = prev, .M = 2, .blend = blend}, {0.7f, 1.05f}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        assert_int_equal(al_commit_eager(&scratch, &o, &cases[k].in, 1.0, out, &err), 0);
        for (int i = 0; i < 2; i++) {
            assert_float_equal(out[i], cases[k].want[i], 1e-6);
            assert_float_equal(o.theta[i], th[i], 0); /* the committed state is untouched */
        }
        assert_int_equal(o.steps, 0);
    }
    al_outer_free(&scratch);
    al_outer_free(&o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_range),
        cmocka_unit_test(test_fp32_is_the_mean),
        cmocka_unit_test(test_int8_within_bounds),
        cmocka_unit_test(test_outliers),
        cmocka_unit_test(test_decide_and_step),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_overlap_merge),
        cmocka_unit_test(test_overlap_eager),
        cmocka_unit_test(test_overlap_streaming_merge),
        cmocka_unit_test(test_claim_check),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
