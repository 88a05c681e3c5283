/*
 * test_outer.c -- the outer optimizer against DiLoCo's formula, the AutoLoCo
 * correction on hand-computed cases, the order-independent mean, the round's
 * statistics, refusal of NaN/Inf, and save/load (issue 5, "Done when" 1-3).
 *
 * Rounding convention of the specification: each multiply-add of the outer
 * step is one fused operation (fmaf, a single rounding), as PyTorch's
 * add(x, alpha=) does; the transcriptions below follow it, so "bit for bit"
 * means exactly that. A double-precision evaluation of the same formulas
 * checks that both are the formula and not just equal to each other.
 */
#include "al_test.h"

#include <string.h>
#include <unistd.h>

#include "al_outer.h"

enum { N = 1037 }; /* odd, so vector loops run their scalar tails too */

static al_outer_cfg cfg_none(double lr, double mu) {
    al_outer_cfg c;
    al_outer_cfg_default(&c);
    c.correction = AL_CORRECTION_NONE;
    c.lr = lr;
    c.momentum = mu;
    return c;
}
static al_outer_cfg cfg_auto(double lr, double mu, double s_ref) {
    al_outer_cfg c = cfg_none(lr, mu);
    c.correction = AL_CORRECTION_AUTOLOCO;
    c.s_ref = s_ref;
    return c;
}

/* ---- DiLoCo, transcribed: M sites, pseudo-gradients, mean, Nesterov step --------- */

static void test_none_is_diloco_bitwise(void **state) {
    (void)state;
    enum { M = 3, R = 6 };
    al_rng r;
    al_rng_seed(&r, 11);
    static float theta0[N], local[M][N], dbar[N], delta[N];
    static float th_ref[N], b_ref[N], u_ref[N], sum[N];
    static double th_d[N], b_d[N];
    t_fill(&r, theta0, N, 1.0);
    al_outer o;
    al_outer_cfg c = cfg_none(0.7, 0.9);
    al_err err = {0};
    assert_int_equal(al_outer_init(&o, &c, theta0, N, &err), 0);
    memcpy(th_ref, theta0, sizeof th_ref);
    memset(b_ref, 0, sizeof b_ref);
    for (int i = 0; i < N; i++) th_d[i] = theta0[i], b_d[i] = 0;
    al_mean mean;
    assert_int_equal(al_mean_init(&mean, M, N, &err), 0);
    for (int round = 0; round < R; round++) {
        /* every site drifted from θ_global by its own inner steps */
        for (int m = 0; m < M; m++)
            for (int i = 0; i < N; i++)
                local[m][i] = o.theta[i] + (float)(0.01 * (2 * al_rng_uniform(&r) - 1));
        al_mean_reset(&mean);
        for (int m = M - 1; m >= 0; m--) { /* arrive in reverse order */
            assert_int_equal(al_pseudo_grad(delta, o.theta, local[m], N, NULL, &err), 0);
            assert_int_equal(al_mean_add(&mean, m, delta, &err), 0);
        }
        assert_int_equal(al_mean_finish(&mean, dbar, &err), 0);
        /* transcription: Δ̄ = (Σ_m (θ − θ_m)) / M in site order, then PyTorch's
         * SGD(nesterov): buf = μ·buf + d; d' = d + μ·buf; θ = θ − α·d' */
        for (int i = 0; i < N; i++) sum[i] = th_ref[i] - local[0][i];
        for (int m = 1; m < M; m++)
            for (int i = 0; i < N; i++) sum[i] = sum[i] + (th_ref[i] - local[m][i]);
        for (int i = 0; i < N; i++) sum[i] = sum[i] / (float)M;
        assert_memory_equal(sum, dbar, sizeof sum);
        for (int i = 0; i < N; i++) b_ref[i] = fmaf(0.9f, b_ref[i], sum[i]);
        for (int i = 0; i < N; i++) u_ref[i] = fmaf(0.9f, b_ref[i], sum[i]);
        for (int i = 0; i < N; i++) th_ref[i] = fmaf(-0.7f, u_ref[i], th_ref[i]);
        /* the same formula in double, from the same Δ̄ */
        for (int i = 0; i < N; i++) {
            b_d[i] = 0.9 * b_d[i] + sum[i];
            th_d[i] -= 0.7 * (sum[i] + 0.9 * b_d[i]);
        }
        assert_int_equal(al_outer_step(&o, dbar, 123.0 /* ignored by none */, &err), 0);
        assert_memory_equal(o.theta, th_ref, sizeof th_ref);
        assert_memory_equal(o.mom, b_ref, sizeof b_ref);
    }
    assert_err_below("DiLoCo fp32 vs double, 6 rounds", t_max_rel_err(o.theta, th_d, N), 1e-6);
    assert_int_equal(o.steps, R);
    al_mean_free(&mean);
    al_outer_free(&o);
}

/* Hand-computed DiLoCo steps with exactly representable numbers:
 * α = 0.5, μ = 0.5, θ = 1, Δ̄ = 0.5:   b = 0.5,  θ = 1 − 0.5·(0.5 + 0.25) = 0.625
 * then Δ̄ = 0.5 again:               b = 0.75, θ = 0.625 − 0.5·(0.5 + 0.375) = 0.1875 */
static void test_none_hand(void **state) {
    (void)state;
    al_outer o;
    al_outer_cfg c = cfg_none(0.5, 0.5);
    float th = 1.0f, d = 0.5f;
    assert_int_equal(al_outer_init(&o, &c, &th, 1, NULL), 0);
    assert_int_equal(al_outer_step(&o, &d, 1.0, NULL), 0);
    assert_true(o.mom[0] == 0.5f && o.theta[0] == 0.625f);
    assert_int_equal(al_outer_step(&o, &d, 1.0, NULL), 0);
    assert_true(o.mom[0] == 0.75f && o.theta[0] == 0.1875f);
    al_outer_free(&o);
}

/* ---- the correction ----------------------------------------------------------------- */

/* With S_r = S_ref every round: μ_r = μ, w_r = 1, scale = α·S_ref, and
 * m·S_ref tracks b, so θ follows DiLoCo up to float rounding (g = Δ̄/S_r and
 * the product α·S_r are rounded differently). */
static void test_correction_at_s_ref_is_diloco(void **state) {
    (void)state;
    enum { R = 20 };
    const double s_ref = 40 * 3e-3; /* H_base = 40 steps at η_peak = 3e-3 */
    al_rng r;
    al_rng_seed(&r, 12);
    static float theta0[N], dbar[N];
    static double bs[N];
    t_fill(&r, theta0, N, 1.0);
    al_outer a, d;
    al_outer_cfg ca = cfg_auto(0.7, 0.9, s_ref), cd = cfg_none(0.7, 0.9);
    assert_int_equal(al_outer_init(&a, &ca, theta0, N, NULL), 0);
    assert_int_equal(al_outer_init(&d, &cd, theta0, N, NULL), 0);
    for (int round = 0; round < R; round++) {
        t_fill(&r, dbar, N, 1e-2);
        assert_int_equal(al_outer_step(&a, dbar, s_ref, NULL), 0);
        assert_int_equal(al_outer_step(&d, dbar, s_ref, NULL), 0);
        assert_true(a.last.mu == 0.9 && a.last.w == 1.0); /* pow(μ, 1) is exact */
    }
    double *th_d = t_to_d(d.theta, N);
    for (int i = 0; i < N; i++) bs[i] = a.mom[i] * s_ref;
    double *b_d = t_to_d(d.mom, N);
    /* θ moved by ~0.1 over the run; rounding differences of ~1e-7 relative per step */
    assert_err_below("autoloco(S_r=S_ref) vs DiLoCo, theta", t_max_rel_err(a.theta, th_d, N), 1e-6);
    assert_err_below("autoloco m*S_ref vs DiLoCo b", t_max_rel_err_dd(bs, b_d, N), 1e-5);
    free(th_d);
    free(b_d);
    al_outer_free(&a);
    al_outer_free(&d);
}

/* μ_r = μ^(S_r/S_ref), w_r = (1 − μ_r)/(1 − μ), scale = α·S_r, on hand cases. */
static void test_coefs_hand(void **state) {
    (void)state;
    al_outer_coefs k;
    al_outer_cfg c = cfg_auto(0.5, 0.25, 1.0);
    /* s = 2: μ_r = 0.25² = 0.0625, w_r = 0.9375/0.75 = 1.25, scale = 0.5·2 = 1 */
    assert_int_equal(al_outer_coefs_for(&c, 2.0, &k, NULL), 0);
    assert_true(k.mu == 0.0625 && k.w == 1.25 && k.scale == 1.0 && k.div == 2.0);
    /* s = 0.5: μ_r = sqrt(0.25) = 0.5, w_r = 0.5/0.75 = 2/3, scale = 0.25 */
    assert_int_equal(al_outer_coefs_for(&c, 0.5, &k, NULL), 0);
    assert_true(k.mu == 0.5 && k.scale == 0.25);
    assert_true(fabs(k.w - 2.0 / 3.0) < 1e-15);
    /* DiLoCo's μ = 0.9 with S_ref = 0.12, an interval of twice the progress:
     * μ_r = 0.81, w_r = 0.19/0.1 = 1.9, scale = 0.7·0.24 = 0.168 */
    c = cfg_auto(0.7, 0.9, 0.12);
    assert_int_equal(al_outer_coefs_for(&c, 0.24, &k, NULL), 0);
    assert_true(fabs(k.mu - 0.81) < 1e-15 && fabs(k.w - 1.9) < 1e-14);
    assert_true(fabs(k.scale - 0.168) < 1e-15);
    /* μ = 0: no momentum for any s (μ_r = 0, w_r = 1) */
    c = cfg_auto(0.7, 0.0, 0.12);
    assert_int_equal(al_outer_coefs_for(&c, 0.03, &k, NULL), 0);
    assert_true(k.mu == 0.0 && k.w == 1.0);
    /* none: μ, 1, α whatever S_r */
    c = cfg_none(0.7, 0.9);
    assert_int_equal(al_outer_coefs_for(&c, 5.0, &k, NULL), 0);
    assert_true(k.mu == 0.9 && k.w == 1.0 && k.scale == 0.7 && k.div == 1.0);
}

/* Two corrected steps by hand, α = 0.5, μ = 0.25, S_ref = 1, θ = 1, m = 0:
 * 1) S_r = 2, Δ̄ = 1: g = 0.5, μ_r = 1/16, w_r = 1.25
 *    m = 1.25·0.5 = 0.625;  θ = 1 − 0.5·2·(0.5 + 0.625/16) = 1 − 0.5390625 = 0.4609375
 * 2) S_r = 0.5, Δ̄ = 0.25: g = 0.5, μ_r = 0.5, w_r = 2/3
 *    m = 0.5·0.625 + (2/3)·0.5 = 0.6458333…
 *    θ = 0.4609375 − 0.25·(0.5 + 0.5·0.6458333…) = 0.2552083… */
static void test_correction_hand(void **state) {
    (void)state;
    al_outer o;
    al_outer_cfg c = cfg_auto(0.5, 0.25, 1.0);
    float th = 1.0f, d = 1.0f;
    assert_int_equal(al_outer_init(&o, &c, &th, 1, NULL), 0);
    assert_int_equal(al_outer_step(&o, &d, 2.0, NULL), 0);
    assert_true(o.mom[0] == 0.625f && o.theta[0] == 0.4609375f);
    d = 0.25f;
    assert_int_equal(al_outer_step(&o, &d, 0.5, NULL), 0);
    assert_true(fabs(o.mom[0] - (0.3125 + 1.0 / 3.0)) < 1e-7);
    assert_true(fabs(o.theta[0] - (0.4609375 - 0.25 * (0.5 + 0.5 * (0.3125 + 1.0 / 3.0)))) < 1e-7);
    al_outer_free(&o);
}

/* Under a constant g the corrected momentum settles at g/(1 − μ) whatever the
 * interval length s (DiLoCo's b settles at Δ̄/(1 − μ), i.e. g·S_r/(1 − μ)), and
 * θ moves α·S_r·(1 + μ_r/(1 − μ))·g per round. */
static void test_correction_fixed_point(void **state) {
    (void)state;
    const double s_ref = 0.1, ss[] = {0.25, 1.0, 4.0};
    for (size_t t = 0; t < AL_ARRAY_LEN(ss); t++) {
        double s_r = ss[t] * s_ref, g = 0.01;
        al_outer o;
        al_outer_cfg c = cfg_auto(0.7, 0.9, s_ref);
        float th = 0.0f, d = (float)(g * s_r);
        assert_int_equal(al_outer_init(&o, &c, &th, 1, NULL), 0);
        for (int k = 0; k < 2000; k++) assert_int_equal(al_outer_step(&o, &d, s_r, NULL), 0);
        double gg = (double)d / (float)s_r; /* g as the code sees it */
        print_message("  s = %-5g m = %.7g (g/(1-mu) = %.7g)\n", ss[t], o.mom[0], gg / 0.1);
        assert_true(fabs(o.mom[0] - gg / 0.1) < 1e-5 * (gg / 0.1));
        float before = o.theta[0];
        assert_int_equal(al_outer_step(&o, &d, s_r, NULL), 0);
        double mu_r = pow(0.9, ss[t]);
        double want = 0.7 * s_r * (1 + mu_r / 0.1) * gg;
        assert_true(fabs((before - o.theta[0]) - want) < 1e-3 * want);
        al_outer_free(&o);
    }
}

/* ---- refusals leave the state untouched ------------------------------------------- */

static void test_step_refuses_nonfinite(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 13);
    static float theta0[N], dbar[N], th_before[N], m_before[N];
    t_fill(&r, theta0, N, 1.0);
    const al_correction corr[] = {AL_CORRECTION_NONE, AL_CORRECTION_AUTOLOCO};
    for (size_t t = 0; t < 2; t++) {
        al_outer o;
        al_outer_cfg c = cfg_auto(0.7, 0.9, 0.1);
        c.correction = corr[t];
        al_err err = {0};
        assert_int_equal(al_outer_init(&o, &c, theta0, N, &err), 0);
        t_fill(&r, dbar, N, 1e-2);
        assert_int_equal(al_outer_step(&o, dbar, 0.1, &err), 0); /* non-zero momentum */
        memcpy(th_before, o.theta, sizeof th_before);
        memcpy(m_before, o.mom, sizeof m_before);
        const float bad[] = {NAN, INFINITY, -INFINITY};
        for (size_t b = 0; b < 3; b++) {
            t_fill(&r, dbar, N, 1e-2);
            dbar[N - 1 - b] = bad[b]; /* at the very end: nothing may be written first */
            assert_int_equal(al_outer_step(&o, dbar, 0.1, &err), AL_ENUMERIC);
            assert_non_null(strstr(err.msg, "non-finite"));
            assert_memory_equal(o.theta, th_before, sizeof th_before);
            assert_memory_equal(o.mom, m_before, sizeof m_before);
            assert_int_equal(o.steps, 1);
        }
        t_fill(&r, dbar, N, 1e-2);
        assert_int_equal(al_outer_step(&o, dbar, NAN, &err), AL_ENUMERIC);
        assert_non_null(strstr(err.msg, "S_r"));
        assert_int_equal(al_outer_step(&o, dbar, INFINITY, &err), AL_ENUMERIC);
        if (corr[t] == AL_CORRECTION_AUTOLOCO) {
            assert_int_equal(al_outer_step(&o, dbar, 0.0, &err), AL_EINVAL);
            assert_int_equal(al_outer_step(&o, dbar, -1.0, &err), AL_EINVAL);
        }
        assert_memory_equal(o.theta, th_before, sizeof th_before);
        assert_memory_equal(o.mom, m_before, sizeof m_before);
        assert_int_equal(o.steps, 1);
        al_outer_free(&o);
    }
}

/* The step of a part ([outer] overlap = streaming): stepping [0, k) and [k, n)
 * with the same mean and S_r is bitwise the whole step (the update is
 * elementwise), a part leaves the rest of θ and the momentum alone, does
 * not count as a step, and an out-of-range part or a NaN in it is refused
 * before anything is written (the index named is θ's, not the part's). */
static void test_step_part(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 14);
    static float theta0[N], dbar[N], th_before[N], m_before[N];
    t_fill(&r, theta0, N, 1.0);
    const al_correction corr[] = {AL_CORRECTION_NONE, AL_CORRECTION_AUTOLOCO};
    for (size_t t = 0; t < 2; t++) {
        al_outer a, b;
        al_outer_cfg c = cfg_auto(0.7, 0.9, 0.1);
        c.correction = corr[t];
        al_err err = {0};
        assert_int_equal(al_outer_init(&a, &c, theta0, N, &err), 0);
        assert_int_equal(al_outer_init(&b, &c, theta0, N, &err), 0);
        const size_t k = 400;
        for (int round = 0; round < 3; round++) {
            t_fill(&r, dbar, N, 1e-2);
            assert_int_equal(al_outer_step(&a, dbar, 0.13, &err), 0);
            memcpy(th_before, b.theta, sizeof th_before);
            memcpy(m_before, b.mom, sizeof m_before);
            assert_int_equal(al_outer_step_part(&b, dbar, 0, k, 0.13, &err), 0);
            assert_memory_equal(b.theta + k, th_before + k, (N - k) * sizeof(float));
            assert_memory_equal(b.mom + k, m_before + k, (N - k) * sizeof(float));
            assert_true(memcmp(b.theta, th_before, k * sizeof(float)) != 0);
            assert_int_equal(al_outer_step_part(&b, dbar + k, k, N, 0.13, &err), 0);
        }
        assert_memory_equal(a.theta, b.theta, sizeof th_before);
        assert_memory_equal(a.mom, b.mom, sizeof m_before);
        assert_int_equal(a.steps, 3);
        assert_int_equal(b.steps, 0);
        assert_true(a.last.scale == b.last.scale && a.last.mu == b.last.mu);
        memcpy(th_before, b.theta, sizeof th_before);
        assert_int_equal(al_outer_step_part(&b, dbar, k, N + 1, 0.13, &err), AL_EINVAL);
        assert_non_null(strstr(err.msg, "not within"));
        assert_int_equal(al_outer_step_part(&b, dbar, 5, 4, 0.13, &err), AL_EINVAL);
        dbar[k + 7] = NAN;
        assert_int_equal(al_outer_step_part(&b, dbar + k, k, N, 0.13, &err), AL_ENUMERIC);
        char want[32];
        snprintf(want, sizeof want, "index %zu", k + 7);
        assert_non_null(strstr(err.msg, want));
        assert_memory_equal(b.theta, th_before, sizeof th_before);
        al_outer_free(&a);
        al_outer_free(&b);
    }
}

static void test_pseudo_grad(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 14);
    static float g[N], l[N], d[N];
    t_fill(&r, g, N, 1.0);
    t_fill(&r, l, N, 1.0);
    double sq, want = 0;
    assert_int_equal(al_pseudo_grad(d, g, l, N, &sq, NULL), 0);
    for (int i = 0; i < N; i++) {
        assert_true(d[i] == g[i] - l[i]);
        want += (double)d[i] * d[i];
    }
    assert_true(fabs(sq - want) <= 1e-12 * want);
    assert_true(sq == al_sq_norm(d, N));
    l[500] = NAN;
    al_err err = {0};
    assert_int_equal(al_pseudo_grad(d, g, l, N, &sq, &err), AL_ENUMERIC);
    assert_non_null(strstr(err.msg, "index 500"));
    l[500] = 0;
    g[7] = INFINITY;
    assert_int_equal(al_pseudo_grad(d, g, l, N, &sq, &err), AL_ENUMERIC);
}

/* ---- the mean: any arrival order, any site, same bits ----------------------------- */

static int next_perm(int *p, int n) { /* lexicographic successor; 0 after the last */
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1]) i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (p[j] <= p[i]) j--;
    int t = p[i];
    p[i] = p[j], p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) t = p[a], p[a] = p[b], p[b] = t;
    return 1;
}

static void test_mean_any_arrival_order(void **state) {
    (void)state;
    enum { M = 5 };
    al_rng r;
    al_rng_seed(&r, 15);
    static float x[M][N], want[N], got[N], other[N];
    /* magnitudes spread over 6 decades: a different summation order changes bits */
    for (int m = 0; m < M; m++)
        for (int i = 0; i < N; i++)
            x[m][i] = (float)((2 * al_rng_uniform(&r) - 1) * pow(10.0, 3 - 6 * al_rng_uniform(&r)));
    for (int i = 0; i < N; i++) {
        float s = x[0][i];
        for (int m = 1; m < M; m++) s += x[m][i];
        want[i] = s / (float)M;
        float s2 = x[M - 1][i]; /* reverse order: must differ somewhere */
        for (int m = M - 2; m >= 0; m--) s2 += x[m][i];
        other[i] = s2 / (float)M;
    }
    assert_true(memcmp(want, other, sizeof want) != 0);
    al_mean a, b; /* two "sites" computing the same mean */
    assert_int_equal(al_mean_init(&a, M, N, NULL), 0);
    assert_int_equal(al_mean_init(&b, M, N, NULL), 0);
    int p[M] = {0, 1, 2, 3, 4}, perms = 0;
    do {
        al_mean_reset(&a);
        for (int k = 0; k < M; k++) {
            assert_false(al_mean_ready(&a));
            assert_int_equal(al_mean_add(&a, p[k], x[p[k]], NULL), 0);
        }
        assert_true(al_mean_ready(&a));
        assert_int_equal(al_mean_finish(&a, got, NULL), 0);
        assert_memory_equal(got, want, sizeof want);
        perms++;
    } while (next_perm(p, M));
    assert_int_equal(perms, 120);
    for (int m = 0; m < M; m++)
        assert_int_equal(al_mean_add(&b, (m * 3) % M, x[(m * 3) % M], NULL), 0);
    assert_int_equal(al_mean_finish(&b, got, NULL), 0);
    assert_memory_equal(got, want, sizeof want);

    /* dropping a site: the mean of the other four, still in id order */
    al_err err = {0};
    al_mean_reset(&a);
    assert_int_equal(al_mean_add(&a, 2, x[2], &err), 0);
    assert_int_equal(al_mean_drop(&a, 2, &err), 0); /* contributed, then dropped */
    for (int m = M - 1; m >= 0; m--)
        if (m != 2) assert_int_equal(al_mean_add(&a, m, x[m], &err), 0);
    assert_int_equal(al_mean_add(&a, 2, x[2], &err), AL_EINVAL);
    assert_int_equal(al_mean_finish(&a, got, &err), 0);
    for (int i = 0; i < N; i++) {
        float s = ((x[0][i] + x[1][i]) + x[3][i]) + x[4][i];
        assert_true(got[i] == s / 4.0f);
    }
    /* refusals */
    al_mean_reset(&a);
    assert_int_equal(al_mean_add(&a, 5, x[0], &err), AL_EINVAL);
    assert_int_equal(al_mean_add(&a, -1, x[0], &err), AL_EINVAL);
    assert_int_equal(al_mean_add(&a, 1, x[1], &err), 0);
    assert_int_equal(al_mean_add(&a, 1, x[1], &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "twice"));
    x[3][100] = NAN;
    assert_int_equal(al_mean_add(&a, 3, x[3], &err), AL_ENUMERIC);
    assert_non_null(strstr(err.msg, "site 3"));
    assert_int_equal(al_mean_finish(&a, got, &err), AL_EINVAL); /* not ready */
    assert_int_equal(al_mean_drop(&a, 3, &err), 0);             /* the caller leaves it out */
    for (int m = 0; m < M; m++)
        if (m != 1 && m != 3) assert_int_equal(al_mean_add(&a, m, x[m], &err), 0);
    assert_int_equal(al_mean_finish(&a, got, &err), 0);
    for (int i = 0; i < N; i++)
        assert_true(got[i] == ((x[0][i] + x[1][i]) + x[2][i] + x[4][i]) / 4.0f);
    al_mean_free(&a);
    al_mean_free(&b);
}

/* ---- the round's statistics ---------------------------------------------------------- */

static al_site_stats site(int id, double loss, double dsq) {
    return (al_site_stats){.site = id,
                           .steps = 40,
                           .loss = loss,
                           .grad_norm = 2 * loss,
                           .delta_sq = dsq,
                           .lr_sum = 0.12,
                           .lr_sq_sum = 3.6e-4,
                           .lr_last = 3e-3,
                           .tokens = 1000 + id,
                           .compute_s = 1.0 + id};
}

static void test_round_stats(void **state) {
    (void)state;
    al_site_stats s[3] = {site(2, 3.0, 4.0), site(0, 2.0, 2.0), site(1, 2.5, 3.0)};
    al_round_stats rs;
    al_err err = {0};
    assert_int_equal(al_round_stats_combine(&rs, 7, s, 3, 1.5, &err), 0);
    /* means: loss (2 + 2.5 + 3)/3 = 2.5, ‖Δ^m‖² (2 + 3 + 4)/3 = 3; tokens sum; time max */
    assert_true(rs.round == 7 && rs.n_sites == 3 && rs.steps == 40);
    assert_true(rs.loss == 2.5 && rs.grad_norm == 5.0 && rs.delta_sq_mean == 3.0);
    assert_true(rs.mean_delta_sq == 1.5 && rs.lr_sum == 0.12 && rs.lr_last == 3e-3);
    assert_true(rs.tokens == 3003 && rs.compute_s == 3.0);
    assert_int_equal(al_round_stats_check(&rs, &err), 0);
    /* coherence: ρ = 1.5/3 = 0.5, c = (3·0.5 − 1)/2 = 0.25 */
    double rho, c;
    assert_int_equal(al_coherence(&rs, &rho, &c, &err), 0);
    assert_true(rho == 0.5 && c == 0.25);
    rs.mean_delta_sq = 3.0; /* all alike: ρ = 1, c = 1 */
    assert_int_equal(al_coherence(&rs, &rho, &c, &err), 0);
    assert_true(rho == 1.0 && c == 1.0);
    rs.mean_delta_sq = 1.0; /* pure noise: ρ = 1/M, c = 0 */
    assert_int_equal(al_coherence(&rs, &rho, &c, &err), 0);
    assert_true(fabs(c) < 1e-15);
    rs.n_sites = 1;
    assert_int_equal(al_coherence(&rs, &rho, &c, &err), AL_EINVAL);

    /* refusals: NaN/Inf in any field, a diverged schedule, a site twice */
    const size_t offs[] = {offsetof(al_site_stats, loss),      offsetof(al_site_stats, grad_norm),
                           offsetof(al_site_stats, delta_sq),  offsetof(al_site_stats, lr_sum),
                           offsetof(al_site_stats, lr_sq_sum), offsetof(al_site_stats, lr_last),
                           offsetof(al_site_stats, compute_s)};
    for (size_t k = 0; k < AL_ARRAY_LEN(offs); k++) {
        al_site_stats t[3] = {s[0], s[1], s[2]};
        *(double *)((char *)&t[1] + offs[k]) = k % 2 ? INFINITY : NAN;
        al_round_stats before = rs, out = rs;
        assert_int_equal(al_round_stats_combine(&out, 7, t, 3, 1.5, &err), AL_ENUMERIC);
        assert_non_null(strstr(err.msg, "site 0"));
        assert_memory_equal(&out, &before, sizeof out);
    }
    assert_int_equal(al_round_stats_combine(&rs, 7, s, 3, NAN, &err), AL_ENUMERIC);
    s[1].lr_sum = 0.13;
    assert_int_equal(al_round_stats_combine(&rs, 7, s, 3, 1.5, &err), AL_EMISMATCH);
    s[1].lr_sum = 0.12;
    s[1].site = 2;
    assert_int_equal(al_round_stats_combine(&rs, 7, s, 3, 1.5, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "twice"));
    al_round_stats bad = rs;
    bad.loss = NAN;
    assert_int_equal(al_round_stats_check(&bad, &err), AL_ENUMERIC);
    assert_non_null(strstr(err.msg, "'loss'"));
    bad = rs;
    bad.mean_delta_sq = -INFINITY;
    assert_int_equal(al_round_stats_check(&bad, &err), AL_ENUMERIC);
    assert_non_null(strstr(err.msg, "mean_delta_sq"));
}

/* ---- configuration, hash, save/load -------------------------------------------------- */

static void test_cfg_set(void **state) {
    (void)state;
    al_outer_cfg c;
    al_outer_cfg_default(&c);
    al_err err = {0};
    assert_true(c.lr == 0.7 && c.momentum == 0.9 && c.correction == AL_CORRECTION_AUTOLOCO);
    assert_int_equal(al_outer_cfg_check(&c, &err), AL_ECONFIG); /* autoloco needs s_ref */
    assert_non_null(strstr(err.msg, "s_ref"));
    assert_int_equal(al_outer_cfg_set(&c, "s_ref", "0.12", &err), 0);
    assert_int_equal(al_outer_cfg_check(&c, &err), 0);
    assert_int_equal(al_outer_cfg_set(&c, "correction", "none", &err), 0);
    assert_int_equal(c.correction, AL_CORRECTION_NONE);
    assert_int_equal(al_outer_cfg_set(&c, "correction", "nesterov", &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'correction'"));
    assert_int_equal(al_outer_cfg_set(&c, "momentum", "1", &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'momentum'"));
    assert_int_equal(al_outer_cfg_set(&c, "lr", "0.7x", &err), AL_ECONFIG);
    assert_int_equal(al_outer_cfg_set(&c, "lr", "nan", &err), AL_ECONFIG);
    assert_int_equal(al_outer_cfg_set(&c, "beta", "0.5", &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'beta'"));
    assert_true(c.lr == 0.7 && c.momentum == 0.9);
}

static void hex_bytes(const char *hx, uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned v = 0;
        assert_int_equal(sscanf(hx + 2 * i, "%2x", &v), 1);
        b[i] = (uint8_t)v;
    }
}

/* θ's hash from its definition (al_outer.h), with the plain SHA-256 of al_base.h */
static void theta_hash_ref(const float *x, size_t n, char hex[65]) {
    size_t k = (n + AL_THETA_CHUNK - 1) / AL_THETA_CHUNK;
    uint8_t *cat = malloc(32 * k + 1);
    assert_non_null(cat);
    for (size_t i = 0; i < k; i++) {
        size_t lo = i * AL_THETA_CHUNK, hi = AL_MIN(n, lo + AL_THETA_CHUNK);
        char hx[65];
        al_sha256_hex(x + lo, (hi - lo) * sizeof(float), hx);
        hex_bytes(hx, cat + 32 * i, 32);
    }
    al_sha256_hex(cat, 32 * k, hex);
    free(cat);
}

static void test_theta_hash(void **state) {
    (void)state;
    enum { M = 2 * AL_THETA_CHUNK + 4097 }; /* two whole chunks and an odd part */
    static float x[M], y[M];
    al_rng r;
    al_rng_seed(&r, 61);
    t_fill(&r, x, M, 1.0);
    char h[65], want[65];
    size_t sizes[] = {0, 1, 7, AL_THETA_CHUNK, AL_THETA_CHUNK + 1, M};
    for (size_t k = 0; k < AL_ARRAY_LEN(sizes); k++) {
        al_theta_hash(x, sizes[k], h);
        theta_hash_ref(x, sizes[k], want);
        assert_string_equal(h, want);
    }
    assert_int_equal(al_theta_chunks(M), 3);
    assert_int_equal(al_theta_chunks(AL_THETA_CHUNK), 1);
    /* the digests kept: a change to [lo, hi) rehashes the chunks it overlaps */
    uint8_t dig[3 * 32], dig2[3 * 32];
    al_theta_hash_part(x, M, dig, 0, M, h);
    assert_string_equal(h, want);
    memcpy(y, x, sizeof x);
    size_t lo = AL_THETA_CHUNK - 5, hi = AL_THETA_CHUNK + 9; /* across chunks 0 and 1 */
    for (size_t i = lo; i < hi; i++) y[i] += 1.0f;
    memcpy(dig2, dig, sizeof dig);
    al_theta_hash_part(y, M, dig2, lo, hi, h);
    al_theta_hash(y, M, want);
    assert_string_equal(h, want);
    memcpy(dig2, dig, sizeof dig); /* the wrong range leaves chunk 0's stale digest */
    al_theta_hash_part(y, M, dig2, hi, M, h);
    assert_string_not_equal(h, want);
    y[M - 1] = -y[M - 1]; /* the last, shorter chunk */
    al_theta_hash_part(y, M, dig, M - 1, M, h);
    al_theta_hash(y, M, want);
    assert_string_not_equal(h, want); /* dig was x's: chunks 0 and 1 stale */
    al_theta_hash_part(y, M, dig, 0, M, h);
    assert_string_equal(h, want);

    /* the checksum: any one bit of any word, and a word moved */
    memcpy(y, x, sizeof x);
    uint64_t c0 = al_theta_checksum(x, M);
    assert_true(al_theta_checksum(y, M) == c0);
    size_t at[] = {0, 1, AL_THETA_CHUNK, M - 2, M - 1};
    for (size_t k = 0; k < AL_ARRAY_LEN(at); k++)
        for (int b = 0; b < 32; b++) {
            uint32_t u;
            memcpy(&u, &y[at[k]], 4);
            u ^= 1u << b;
            memcpy(&y[at[k]], &u, 4);
            assert_true(al_theta_checksum(y, M) != c0);
            u ^= 1u << b;
            memcpy(&y[at[k]], &u, 4);
        }
    assert_true(al_theta_checksum(y, M) == c0);
    float t0 = y[10], t1 = y[11]; /* two words swapped */
    y[10] = y[12], y[11] = y[13], y[12] = t0, y[13] = t1;
    assert_true(al_theta_checksum(y, M) != c0);
    assert_true(al_theta_checksum(x, M - 1) != c0); /* a value fewer */
}

static void test_save_load_hash(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 16);
    static float theta0[N], dbar[N];
    t_fill(&r, theta0, N, 1.0);
    al_outer o, p = {0};
    al_outer_cfg c = cfg_auto(0.7, 0.9, 0.12);
    al_err err = {0};
    assert_int_equal(al_outer_init(&o, &c, theta0, N, &err), 0);
    char h0[65], h1[65], h2[65];
    al_outer_hash(&o, h0);
    al_theta_hash(theta0, N, h1);
    assert_string_equal(h0, h1);
    for (int k = 0; k < 3; k++) {
        t_fill(&r, dbar, N, 1e-2);
        assert_int_equal(al_outer_step(&o, dbar, 0.06 * (k + 1), &err), 0);
    }
    al_outer_hash(&o, h1);
    assert_string_not_equal(h0, h1);

    char path[] = "/tmp/al_test_outer_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(al_outer_save(&o, path, &err), 0);
    assert_int_equal(al_outer_load(&p, path, &c, &err), 0);
    assert_true(p.n == N && p.steps == 3 && p.cfg.s_ref == 0.12);
    assert_memory_equal(p.theta, o.theta, sizeof theta0);
    assert_memory_equal(p.mom, o.mom, sizeof theta0);
    /* resume: the same next step gives the same bits */
    t_fill(&r, dbar, N, 1e-2);
    assert_int_equal(al_outer_step(&o, dbar, 0.2, &err), 0);
    assert_int_equal(al_outer_step(&p, dbar, 0.2, &err), 0);
    al_outer_hash(&o, h1);
    al_outer_hash(&p, h2);
    assert_string_equal(h1, h2);
    assert_memory_equal(p.mom, o.mom, sizeof theta0);

    /* a configured correction that differs, a flipped byte, a short buffer */
    uint8_t *buf;
    size_t len;
    assert_int_equal(al_outer_serialize(&o, &buf, &len, &err), 0);
    al_outer_cfg other = cfg_none(0.7, 0.9);
    assert_int_equal(al_outer_deserialize(&p, buf, len, &other, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "correction"));
    other = cfg_auto(0.7, 0.9, 0.24);
    assert_int_equal(al_outer_deserialize(&p, buf, len, &other, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "s_ref"));
    buf[100] ^= 1;
    assert_int_equal(al_outer_deserialize(&p, buf, len, NULL, &err), AL_EINTEGRITY);
    buf[100] ^= 1;
    assert_int_equal(al_outer_deserialize(&p, buf, 20, NULL, &err), AL_EFORMAT);
    assert_int_equal(len, al_outer_state_bytes(N));
    /* a state of another size (a lying peer's) into a model of N parameters */
    al_outer small;
    al_outer_cfg sc = cfg_none(0.7, 0.9);
    assert_int_equal(al_outer_init(&small, &sc, theta0, N - 1, &err), 0);
    uint8_t *sbuf;
    size_t slen;
    assert_int_equal(al_outer_serialize(&small, &sbuf, &slen, &err), 0);
    assert_int_equal(al_outer_deserialize(&p, sbuf, slen, NULL, &err), AL_EMISMATCH);
    print_message("  other size: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "this model has"));
    free(sbuf);
    al_outer_free(&small);
    assert_int_equal(p.steps, 4); /* untouched by the failures */
    assert_int_equal(al_outer_deserialize(&p, buf, len, NULL, &err), 0);
    /* unsealed (an agent's per-round copy): refused until sealed, then the
     * same bytes as the sealed form */
    uint8_t *ubuf;
    size_t ulen;
    assert_int_equal(al_outer_serialize_unsealed(&o, &ubuf, &ulen, &err), 0);
    assert_int_equal(ulen, len);
    assert_int_equal(al_outer_deserialize(&p, ubuf, ulen, NULL, &err), AL_EINTEGRITY);
    al_outer_seal(ubuf, ulen);
    assert_memory_equal(ubuf, buf, len);
    assert_int_equal(al_outer_deserialize(&p, ubuf, ulen, NULL, &err), 0);
    free(ubuf);
    free(buf);
    unlink(path);
    al_outer_free(&o);
    al_outer_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_is_diloco_bitwise),
        cmocka_unit_test(test_none_hand),
        cmocka_unit_test(test_correction_at_s_ref_is_diloco),
        cmocka_unit_test(test_coefs_hand),
        cmocka_unit_test(test_correction_hand),
        cmocka_unit_test(test_correction_fixed_point),
        cmocka_unit_test(test_step_refuses_nonfinite),
        cmocka_unit_test(test_step_part),
        cmocka_unit_test(test_pseudo_grad),
        cmocka_unit_test(test_mean_any_arrival_order),
        cmocka_unit_test(test_round_stats),
        cmocka_unit_test(test_cfg_set),
        cmocka_unit_test(test_save_load_hash),
        cmocka_unit_test(test_theta_hash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
