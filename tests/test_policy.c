/*
 * test_policy.c -- each sync-interval policy's H sequence on scripted round
 * statistics against hand-computed values, determinism (and across a
 * save/load), refusal of NaN/Inf with the state untouched, and the settings
 * interface (issue 5, "Done when" 2).
 *
 * Scripted numbers are chosen binary-exact (powers of two, c = 0.5, 0.25...)
 * so that the hand computations in the comments are exact.
 */
#include "al_test.h"

#include <string.h>

#include "al_policy.h"

/* Round statistics for M sites with coherence ratio ρ = ‖Δ̄‖²/mean‖Δ^m‖²:
 * mean ‖Δ^m‖² = 1, ‖Δ̄‖² = ρ; H steps at a constant lr. */
static al_round_stats rs(int64_t round, int m, double loss, double rho, double lr, int64_t steps) {
    return (al_round_stats){.round = round,
                            .n_sites = m,
                            .steps = steps,
                            .loss = loss,
                            .grad_norm = 1,
                            .delta_sq_mean = 1,
                            .mean_delta_sq = rho,
                            .lr_sum = lr * steps,
                            .lr_sq_sum = lr * lr * steps,
                            .lr_last = lr,
                            .tokens = 1000,
                            .compute_s = 1};
}

static al_policy *make(const char *name, const char *const *kv) {
    al_policy *p;
    al_err err = {0};
    if (al_policy_create(&p, name, &err)) fail_msg("%s", err.msg);
    for (; kv && kv[0]; kv += 2)
        if (al_policy_set(p, kv[0], kv[1], &err)) fail_msg("%s", err.msg);
    return p;
}

static int64_t start(al_policy *p) {
    int64_t h;
    al_err err = {0};
    if (al_policy_start(p, &h, &err)) fail_msg("%s", err.msg);
    return h;
}

static int64_t next(al_policy *p, al_round_stats s) {
    int64_t h;
    al_err err = {0};
    if (al_policy_next_interval(p, &s, &h, &err)) fail_msg("%s", err.msg);
    assert_int_equal(h, al_policy_current(p));
    return h;
}

/* A state variable from the policy's saved text (for diagnostics like the signal). */
static double state_of(const al_policy *p, const char *key) {
    char buf[1024], pat[64];
    assert_true(al_policy_save(p, buf, sizeof buf) < sizeof buf);
    snprintf(pat, sizeof pat, "\n%s=", key);
    char *at = strstr(buf, pat);
    assert_non_null(at);
    return strtod(at + strlen(pat), NULL);
}

static void test_registry(void **state) {
    (void)state;
    const char *want[] = {"fixed", "adacomm", "qsr", "autoloco", "coherence", "schedule"};
    assert_int_equal(al_policy_count(), 6);
    for (size_t i = 0; i < 6; i++) assert_string_equal(al_policy_name_at(i), want[i]);
    assert_null(al_policy_name_at(6));
    al_policy *p;
    al_err err = {0};
    assert_int_equal(al_policy_create(&p, "diloco", &err), AL_ENOTFOUND);
    assert_null(p);
    assert_non_null(strstr(err.msg, "'diloco'"));
}

/* fixed: H = h, or h_base; clipped to h_max (auto 8·h_base). */
static void test_fixed(void **state) {
    (void)state;
    al_policy *p = make("fixed", (const char *[]){"h_base", "40", NULL});
    assert_int_equal(start(p), 40);
    for (int r = 0; r < 5; r++)
        assert_int_equal(next(p, rs(r, 4, 3.0 - 0.1 * r, 0.5, 1e-3, 40)), 40);
    al_policy_free(p);
    p = make("fixed", (const char *[]){"h_base", "40", "h", "80", NULL});
    assert_int_equal(start(p), 80);
    assert_int_equal(next(p, rs(0, 2, 3.0, 1.0, 1e-3, 80)), 80);
    al_policy_free(p);
    p = make("fixed", (const char *[]){"h_base", "40", "h", "500", NULL});
    assert_int_equal(start(p), 320); /* h_max = 8·40 */
    al_policy_free(p);
}

/* adacomm, h_base 40 (h_min auto 10, h_max auto 320), L_0 and η_0 learned:
 *  r  loss  η_r     L_0  η_0   ratio = L/L_0 · η_0/η   H = ⌈sqrt(ratio)·40⌉
 *  0  4     0.25    4    0.25  1                       40
 *  1  1     0.25               0.25                    20
 *  2  2     0.25               0.5                     ⌈28.28⌉ = 29
 *  3  1     0.0625             0.25·4 = 1              40
 *  4  0.25  0.25               1/16                    10
 *  5  0.04  0.25               0.01                    ⌈4.0…⌉ → clipped to h_min 10
 *  6  1     0                  η = 0                   h_max 320
 *  7  4     0.5          0.5   1·(0.5/0.5) = 1         40 (η_0 follows the largest η) */
static void test_adacomm(void **state) {
    (void)state;
    al_policy *p = make("adacomm", (const char *[]){"h_base", "40", NULL});
    assert_int_equal(start(p), 40);
    const double loss[] = {4, 1, 2, 1, 0.25, 0.04, 1, 4},
                 lr[] = {0.25, 0.25, 0.25, 0.0625, 0.25, 0.25, 0, 0.5};
    const int64_t want[] = {40, 20, 29, 40, 10, 10, 320, 40};
    for (int r = 0; r < 8; r++)
        assert_int_equal(next(p, rs(r, 4, loss[r], 0.5, lr[r], 40)), want[r]);
    al_policy_free(p);
    /* set L_0 = 8, η_0 = 0.5: loss 2 at η 0.25 → ratio (2/8)·(0.5/0.25) = 0.5 → 29 */
    p = make("adacomm", (const char *[]){"h_base", "40", "l0", "8", "lr0", "0.5", NULL});
    start(p);
    assert_int_equal(next(p, rs(0, 4, 2, 0.5, 0.25, 40)), 29);
    assert_int_equal(next(p, rs(1, 4, 2, 0.5, 1.0, 40)), 15); /* η_0 fixed: ratio 1/8, ⌈14.14⌉ */
    al_policy_free(p);
}

/* qsr, h_base 10, h_max 1000, a = 0.5: H = max(10, ⌊(0.5/η)²⌋)
 *   η 0.0625 → 64; 0.125 → 16; 0.25 → 4 → 10; 0.03125 → 256; 2^-6 → 1024 → 1000; 0 → 1000
 * default a (sqrt(h_base)·η_0): H = max(10, ⌊10·(η_0/η)²⌋), h_max auto 80:
 *   η 0.25 (η_0 0.25) → 10; 0.125 → 40; 0.5 (η_0 0.5) → 10; 0.25 → 40; 0.0625 → 640 → 80 */
static void test_qsr(void **state) {
    (void)state;
    al_policy *p = make("qsr", (const char *[]){"h_base", "10", "h_max", "1000", "a", "0.5", NULL});
    assert_int_equal(start(p), 10);
    const double lr[] = {0.0625, 0.125, 0.25, 0.03125, 0.015625, 0};
    const int64_t want[] = {64, 16, 10, 256, 1000, 1000};
    for (int r = 0; r < 6; r++) assert_int_equal(next(p, rs(r, 4, 3.0, 0.5, lr[r], 10)), want[r]);
    al_policy_free(p);
    p = make("qsr", (const char *[]){"h_base", "10", NULL});
    assert_int_equal(start(p), 10);
    const double lr2[] = {0.25, 0.125, 0.5, 0.25, 0.0625};
    const int64_t want2[] = {10, 40, 10, 40, 80};
    for (int r = 0; r < 5; r++) assert_int_equal(next(p, rs(r, 4, 3.0, 0.5, lr2[r], 10)), want2[r]);
    al_policy_free(p);
}

/* autoloco with exact settings: h_base 40 (h_min 10, h_max 320), grow 1.25,
 * shrink 0.75, ema 0.5, warmup 1, c_min 0.25, drop 0.25, spike 0.125, no
 * normalisation, c_low 0 (no collapse test; test_coherence_defaults has it). M = 4, c = (4ρ − 1)/3:
 * ρ 0.625 → c 0.5; ρ 0.4375 → 0.25; ρ 1 → 1; ρ 0.25 → 0. r  loss c     rule hc            H   EMA
 * after 0  3.0  0.5   warmup: hold                            40            40  0.5 1  2.9  0.5 0.5
 * ≥ 0.5·0.75, ≥ c_min: grow           50            50  0.5 2  2.8  0.5 grow 62.5          63  0.5
 *  3  2.7  0.25  0.25 < 0.375: shrink                    46.875        47  0.375
 *  4  2.6  0.25  0.25 < 0.28125: shrink                  35.15625      35  0.3125
 *  5  2.6  0.25  0.25 ≥ 0.234375, ≥ c_min: grow          43.9453125    44  0.28125
 *  6  3.0  1     spike (3.0 > 2.6·1.125): shrink         32.958984375  33  0.640625
 *  7  2.9  0     0 < 0.48…: shrink                       24.719…       25  0.3203125
 *  8  2.8  0     shrink                                  18.539…       19  0.16015625
 *  9  2.7  0     shrink                                  13.904…       14  0.080078125
 * 10  2.6  0     shrink                                  10.428…       10  0.0400390625
 * 11  2.5  0     shrink, clipped to h_min                10            10  0.02001953125
 * 12  2.4  1     grow                                    12.5          13  0.510009765625
 * 13  2.3  M = 1: grow                                   15.625        16  (unchanged) */
static const char *const exact_auto[] = {
    "h_base", "40",    "grow", "1.25", "shrink", "0.75",  "ema",   "0.5",       "warmup",
    "1",      "c_min", "0.25", "drop", "0.25",   "spike", "0.125", "normalize", "false",
    "floor",  "0",     "cap",  "0",    "c_low",  "0",     NULL};
static const double a_loss[] = {3.0, 2.9, 2.8, 2.7, 2.6, 2.6, 3.0,
                                2.9, 2.8, 2.7, 2.6, 2.5, 2.4, 2.3};
static const double a_rho[] = {0.625, 0.625, 0.625, 0.4375, 0.4375, 0.4375, 1,
                               0.25,  0.25,  0.25,  0.25,   0.25,   1,      1};
static const int64_t a_want[] = {40, 50, 63, 47, 35, 44, 33, 25, 19, 14, 10, 10, 13, 16};
enum { A_ROUNDS = 14 };

static al_round_stats a_stats(int r) {
    return rs(r, r == 13 ? 1 : 4, a_loss[r], a_rho[r], 0.25, a_want[r > 0 ? r - 1 : 0]);
}

static void test_coherence_hand(void **state) {
    (void)state;
    al_policy *p = make("coherence", exact_auto);
    assert_int_equal(start(p), 40);
    const double ema_after[] = {0.5, 0.5, 0.5, 0.375, 0.3125, 0.28125, 0.640625};
    for (int r = 0; r < A_ROUNDS; r++) {
        assert_int_equal(next(p, a_stats(r)), a_want[r]);
        if (r < 7) assert_true(state_of(p, "ema") == ema_after[r]);
    }
    assert_true(state_of(p, "ema") == 0.510009765625);
    /* sustained full coherence grows to h_max and stays there */
    int64_t h = 0;
    for (int r = A_ROUNDS; r < A_ROUNDS + 40; r++) h = next(p, rs(r, 4, 2.0, 1.0, 0.25, 40));
    assert_int_equal(h, 320);
    al_policy_free(p);
}

/* floor 1 (the default): the same decisions as test_coherence_hand, but hc
 * never goes below h_base = 40 (r4: 35.16 → 40; r6: spike 37.5 → 40; r13:
 * 62.5 rounds half away from zero to 63). */
static void test_coherence_floor(void **state) {
    (void)state;
    al_policy *p = make("coherence", exact_auto);
    al_err err = {0};
    assert_int_equal(al_policy_set(p, "floor", "1", &err), 0);
    assert_int_equal(start(p), 40);
    const int64_t want[A_ROUNDS] = {40, 50, 63, 47, 40, 50, 40, 40, 40, 40, 40, 40, 50, 63};
    for (int r = 0; r < A_ROUNDS; r++) assert_int_equal(next(p, a_stats(r)), want[r]);
    al_policy_free(p);
}

/* cap 1.5: growth stops at 1.5·h_base = 60 (r2: 62.5 → 60), shrinks from there
 * (r3: 45, r4: 33.75 → 34). */
static void test_coherence_cap(void **state) {
    (void)state;
    al_policy *p = make("coherence", exact_auto);
    al_err err = {0};
    assert_int_equal(al_policy_set(p, "cap", "1.5", &err), 0);
    assert_int_equal(start(p), 40);
    const int64_t want[] = {40, 50, 60, 45, 34};
    for (int r = 0; r < 5; r++) assert_int_equal(next(p, a_stats(r)), want[r]);
    al_policy_free(p);
}

/* The defaults, h_base 40: grow 2, shrink 0.7, ema 0.7, warmup 0, c_min 0.75,
 * c_low 0.5, drop off, spike 0.02, normalize, floor 1, cap 2 (so H in [40, 80]).
 * Constant lr, so H_eff = H: ρ 0.625 (c 0.5, snr 1) over H = 80 is referred to
 * 40 steps as snr 0.5, signal 1/3; ρ 1 → signal 1; ρ 0.25 → 0. Computed by an
 * independent transcription of docs/outer.md's rule (EMA after the round):
 *  r  M H  loss ρ      signal EMA       rule                       H
 *  0  4 40 3.0  1      1      1         grow ×2, capped            80
 *  1  4 80 2.9  0.625  1/3    0.8       one low round: hold        80
 *  2  4 80 2.8  0.625  1/3    0.66      hold                       80
 *  3  4 80 2.7  0.625  1/3    0.562     hold                       80
 *  4  4 80 2.6  0.625  1/3    0.4934    EMA < c_low: shrink        56
 *  5  4 56 2.5  1      1      0.64538   grow, capped               80
 *  6  4 80 2.6  1      1      0.751766  spike (2.6 > 2.55): shrink 56
 *  7  4 56 2.5  0.25   0      0.526236  hold                       56
 *  8  4 56 2.4  0.25   0      0.368365  shrink 39.2 → floor        40
 *  9  4 40 2.3  0.25   0      0.257856  shrink, floor              40
 * 10  1 40 2.2  —      —      0.257856  M = 1: grow                80
 * 11  4 80 2.1  1      1      0.480499  EMA still < c_low: shrink  56
 * 12  4 56 2.0  1      1      0.636349  grow, capped               80 */
static void test_coherence_defaults(void **state) {
    (void)state;
    al_policy *p = make("coherence", (const char *[]){"h_base", "40", NULL});
    assert_int_equal(start(p), 40);
    const int m[] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1, 4, 4};
    const double loss[] = {3.0, 2.9, 2.8, 2.7, 2.6, 2.5, 2.6, 2.5, 2.4, 2.3, 2.2, 2.1, 2.0};
    const double rho[] = {1, 0.625, 0.625, 0.625, 0.625, 1, 1, 0.25, 0.25, 0.25, 1, 1, 1};
    const int64_t want[] = {80, 80, 80, 80, 56, 80, 56, 56, 40, 40, 80, 56, 80};
    const double ema[] = {1,        0.8,      0.66,     0.562,    0.4934,   0.64538, 0.751766,
                          0.526236, 0.368365, 0.257856, 0.257856, 0.480499, 0.636349};
    int64_t h = 40;
    for (int r = 0; r < 13; r++) {
        h = next(p, rs(r, m[r], loss[r], rho[r], 0.25, h));
        assert_int_equal(h, want[r]);
        assert_true(fabs(state_of(p, "ema") - ema[r]) < 1e-6);
    }
    al_policy_free(p);
}

/* Normalisation: with c = 0.5 over H_eff = S²/Ση² = 80 steps (η 0.25: S = 20,
 * Ση² = 5), snr = 1 is referred to 40 steps: snr_ref = 0.5, c_ref = 1/3.
 * Over 40 steps c_ref = c = 0.5. A c that rises with H only because the signal
 * accumulates (snr = H/40: c = 2/3 at H = 80, ρ = 0.75) gives c_ref = 0.5. */
static void test_coherence_normalized(void **state) {
    (void)state;
    al_policy *p = make("coherence", (const char *[]){"h_base", "40", NULL});
    start(p);
    next(p, rs(0, 4, 3.0, 0.625, 0.25, 80));
    assert_true(fabs(state_of(p, "signal") - 1.0 / 3.0) < 1e-15);
    next(p, rs(1, 4, 3.0, 0.625, 0.25, 40));
    assert_true(state_of(p, "signal") == 0.5);
    next(p, rs(2, 4, 3.0, 0.75, 0.25, 80));
    assert_true(fabs(state_of(p, "signal") - 0.5) < 1e-15);
    al_policy_free(p);
}

/* lr_power 2 on top of the exact settings above (warmup 1):
 *  r0 η 0.25 (η_max 0.25), hold: hc 40, H = 40·1 = 40
 *  r1 η 0.125, c 0.5, grow: hc 50, H = 50·(0.25/0.125)² = 200
 *  r2 η 0: H = h_max 320 (hc still moves: grow to 62.5)
 *  r3 η 0.25, c 0.5, grow: hc 78.125, H = 78 */
static void test_coherence_lr_power(void **state) {
    (void)state;
    al_policy *p = make("coherence", exact_auto);
    al_err err = {0};
    assert_int_equal(al_policy_set(p, "lr_power", "2", &err), 0);
    assert_int_equal(start(p), 40);
    assert_int_equal(next(p, rs(0, 4, 3.0, 0.625, 0.25, 40)), 40);
    assert_int_equal(next(p, rs(1, 4, 2.9, 0.625, 0.125, 40)), 200);
    assert_int_equal(next(p, rs(2, 4, 2.8, 0.625, 0.0, 200)), 320);
    assert_true(state_of(p, "hc") == 62.5);
    assert_int_equal(next(p, rs(3, 4, 2.7, 0.625, 0.25, 320)), 78);
    al_policy_free(p);
}

/* Same statistics, same H: two instances, and a run interrupted by save/load. */
/* The bandwidth floor (al_policy.h): with f = max_comm_fraction, an exchange of
 * t_c seconds and t_s seconds per inner step, H >= ⌈t_c·(1 − f)/(f·t_s)⌉.
 * fixed H = 100, steps of 0.01 s (compute 1 s over 100 steps):
 *   t_c = 4 s, f = 0.5:  ⌈4·0.5/(0.5·0.01)⌉ = 400 → H = 400 (the floor wins)
 *   t_c = 0.5 s, f = 0.5: ⌈0.5·0.5/0.005⌉ = 50 < 100 → H = 100 (the rule's)
 *   t_c = 4 s, f = 0.25: ⌈4·0.75/0.0025⌉ = 1200 → h_max (800) wins
 * and it applies to every policy: adacomm and autoloco as well. */
static void test_comm_floor(void **state) {
    (void)state;
    al_policy *p =
        make("fixed", (const char *const[]){"h_base", "100", "max_comm_fraction", "0.5", NULL});
    assert_int_equal(start(p), 100); /* nothing measured yet: no floor */
    al_round_stats s = rs(0, 2, 3.0, 0.5, 1e-3, 100);
    assert_int_equal(next(p, s), 100); /* comm_s 0: no floor */
    s.comm_s = 4;
    assert_double_near(al_policy_comm_floor(p, &s), 400, 0);
    assert_int_equal(next(p, s), 400);
    /* the projected fraction at the chosen H is the setting: 4/(4 + 400·0.01) = 0.5 */
    assert_double_near(s.comm_s / (s.comm_s + 400 * (s.compute_s / (double)s.steps)), 0.5, 1e-12);
    s.comm_s = 0.5;
    assert_int_equal(next(p, s), 100);
    al_policy_free(p);

    p = make("fixed", (const char *const[]){"h_base", "100", "max_comm_fraction", "0.25", NULL});
    start(p);
    s.comm_s = 4;
    assert_double_near(al_policy_comm_floor(p, &s), 1200, 0);
    assert_int_equal(next(p, s), 800);
    al_policy_free(p);

    /* off by default: the same statistics leave every policy alone */
    for (size_t i = 0; i < al_policy_count(); i++) {
        const char *name = al_policy_name_at(i);
        al_policy *a = make(name, (const char *const[]){"h_base", "100", NULL});
        al_policy *b =
            make(name, (const char *const[]){"h_base", "100", "max_comm_fraction", "0.5", NULL});
        start(a);
        start(b);
        assert_double_near(al_policy_comm_floor(a, &s), 0, 0);
        int64_t ha = next(a, s), hb = next(b, s);
        assert_true(ha < 400);
        assert_int_equal(hb, 400);
        al_policy_free(a);
        al_policy_free(b);
    }
}

/* max_comm_fraction must be in [0, 0.99]: 1 (all the time communicating) and
 * negative values are refused naming the key. */
static void test_comm_floor_refused(void **state) {
    (void)state;
    al_policy *p = make("autoloco", NULL);
    al_err err = {0};
    assert_int_equal(al_policy_set(p, "max_comm_fraction", "1", &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "max_comm_fraction"));
    assert_int_equal(al_policy_set(p, "max_comm_fraction", "-0.1", &err), AL_ECONFIG);
    assert_int_equal(al_policy_set(p, "max_comm_fraction", "half", &err), AL_ECONFIG);
    al_policy_free(p);
}

/* Statistics with a chosen between-site variance V = M/(M−1)·(mean‖Δ^m‖² −
 * ‖Δ̄‖²) for M = 4: mean‖Δ^m‖² = 1 + 0.75·V, ‖Δ̄‖² = 1 (exact for these V). */
static al_round_stats drs(int64_t round, int m, double loss, double v, int64_t steps) {
    al_round_stats s = rs(round, m, loss, 1, 1e-3, steps);
    s.delta_sq_mean = 1 + 0.75 * v;
    s.mean_delta_sq = 1;
    return s;
}

/* autoloco (the drift rule, policies/drift.c), no smoothing (ema 0), power ½,
 * h_base 40, floor 1, cap 4 (H in [40, 160]), spike 0.125, shrink 0.5.
 * D = V/H, H_next = 40·sqrt(D_max/D):
 *   r  H    loss  V     D        D_max   rule                         H_next
 *   0  40   4.0   1     1/40     1/40    first measurement             40
 *   1  40   3.8   4     1/10     1/10    D rising (warmup): h_base     40
 *   2  40   3.6   1     1/40     1/10    40·sqrt(4) = 80               80
 *   3  80   3.4   1     1/80     1/10    40·sqrt(8) = 113.137          113
 *   4  113  3.3   0.5   1/226    1/10    40·sqrt(22.6) = 190 → cap     160
 *   5  160  3.8   0.25  1/640    1/10    loss +15% > 12.5%: spike,
 *                                        min(40·sqrt(64), 0.5·160)     80
 *   6  80   3.7   —     —        1/10    M = 1: nothing measured, hold 80
 *   7  80   3.6   8     1/10     1/10    back at the largest drift     40 */
static void test_autoloco_drift_hand(void **state) {
    (void)state;
    al_policy *p = make("autoloco", (const char *const[]){"h_base", "40", "ema", "0", "cap", "4",
                                                          "spike", "0.125", "shrink", "0.5", NULL});
    assert_int_equal(start(p), 40);
    const struct {
        int m;
        double loss, v;
        int64_t steps, want;
    } t[] = {{4, 4.0, 1, 40, 40},  {4, 3.8, 4, 40, 40},     {4, 3.6, 1, 40, 80},
             {4, 3.4, 1, 80, 113}, {4, 3.3, 0.5, 113, 160}, {4, 3.8, 0.25, 160, 80},
             {1, 3.7, 0, 80, 80},  {4, 3.6, 8, 80, 40}};
    for (size_t i = 0; i < AL_ARRAY_LEN(t); i++) {
        int64_t h = next(p, drs((int64_t)i, t[i].m, t[i].loss, t[i].v, t[i].steps));
        if (h != t[i].want)
            fail_msg("round %zu: H = %lld, expected %lld", i, (long long)h, (long long)t[i].want);
    }
    assert_double_near(state_of(p, "d"), 0.1, 1e-15);
    al_policy_free(p);

    /* the EMA is geometric: ema ½ after D = 1/10 then 1/40 holds D̄ = 1/20, so
     * H = 40·sqrt(2) = 56.57 → 57 */
    p = make("autoloco", (const char *const[]){"h_base", "40", NULL});
    start(p);
    assert_int_equal(next(p, drs(0, 4, 3.0, 4, 40)), 40);
    assert_int_equal(next(p, drs(1, 4, 3.0, 1, 40)), 57);
    assert_double_near(exp(state_of(p, "log_d")), 1.0 / 20, 1e-15);
    al_policy_free(p);
}

/* Settings of the drift rule: out of range, not numbers, floor above cap. */
static void test_autoloco_drift_settings(void **state) {
    (void)state;
    al_policy *p = make("autoloco", NULL);
    al_err err = {0};
    int64_t h;
    assert_int_equal(al_policy_set(p, "power", "x", &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'power'"));
    assert_int_equal(al_policy_set(p, "power", "3", &err), AL_ECONFIG); /* above 2 */
    assert_int_equal(al_policy_set(p, "ema", "1", &err), AL_ECONFIG);   /* would never move */
    assert_int_equal(al_policy_set(p, "shrink", "0", &err), AL_ECONFIG);
    assert_int_equal(al_policy_set(p, "grow", "2", &err), AL_ECONFIG); /* the coherence rule's */
    assert_non_null(strstr(err.msg, "power"));                         /* lists the known keys */
    assert_int_equal(al_policy_set(p, "floor", "3", &err), 0);
    assert_int_equal(al_policy_set(p, "cap", "2", &err), 0);
    assert_int_equal(al_policy_start(p, &h, &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "floor 3 is above cap 2"));
    al_policy_free(p);
}

/* schedule: h1 = 30 until inner step 100, then h2 = 70; the switch at the first
 * round boundary at or after step 100: rounds end at 30, 60, 90, 120 → H 30,
 * 30, 30, 30, 70 (120 >= 100), then 70. h1 = 0 means h_base. */
static void test_schedule(void **state) {
    (void)state;
    al_policy *p = make("schedule", (const char *const[]){"h_base", "40", "h1", "30", "h2", "70",
                                                          "at", "100", NULL});
    assert_int_equal(start(p), 30);
    int64_t steps = 30, want[] = {30, 30, 30, 70, 70};
    for (int i = 0; i < 5; i++) {
        int64_t h = next(p, rs(i, 2, 3.0, 0.5, 1e-3, steps));
        assert_int_equal(h, want[i]);
        steps = h;
    }
    al_policy_free(p);
    p = make("schedule", (const char *const[]){"h_base", "40", "h2", "70", "at", "40", NULL});
    assert_int_equal(start(p), 40);
    assert_int_equal(next(p, rs(0, 2, 3.0, 0.5, 1e-3, 40)), 70);
    al_policy_free(p);
}

/* schedule in three phases (the sweep's ceiling): h1 = 30 until step 100, h2 =
 * 70 until step 200, then h3 = 50. Rounds end at 30, 60, 90, 120 (>= 100: 70),
 * 190 (< 200: 70), 260 (>= 200: 50), 310 → H (after start's 30) 30, 30, 30, 70, 70,
 * 50, 50. h3 = 0
 * means h_base; at2 before at is refused, naming both. */
static void test_schedule_three_phases(void **state) {
    (void)state;
    al_policy *p =
        make("schedule", (const char *const[]){"h_base", "40", "h1", "30", "h2", "70", "at", "100",
                                               "h3", "50", "at2", "200", NULL});
    assert_int_equal(start(p), 30);
    int64_t steps = 30, want[] = {30, 30, 30, 70, 70, 50, 50};
    for (int i = 0; i < 7; i++) {
        int64_t h = next(p, rs(i, 2, 3.0, 0.5, 1e-3, steps));
        assert_int_equal(h, want[i]);
        steps = h;
    }
    al_policy_free(p);
    p = make("schedule",
             (const char *const[]){"h_base", "40", "h1", "30", "at", "30", "at2", "60", NULL});
    assert_int_equal(start(p), 30);
    assert_int_equal(next(p, rs(0, 2, 3.0, 0.5, 1e-3, 30)), 40); /* h2 = 0: h_base */
    assert_int_equal(next(p, rs(1, 2, 3.0, 0.5, 1e-3, 40)), 40); /* h3 = 0: h_base */
    al_policy_free(p);
    p = make("schedule", (const char *const[]){"at", "200", "at2", "100", NULL});
    int64_t h;
    al_err err = {0};
    assert_int_equal(al_policy_start(p, &h, &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "at2 = 100 comes before at = 200"));
    al_policy_free(p);
}

static void test_deterministic_and_resume(void **state) {
    (void)state;
    al_rng r;
    for (size_t k = 0; k < al_policy_count(); k++) {
        const char *name = al_policy_name_at(k);
        al_policy *a = make(name, (const char *[]){"h_base", "40", NULL});
        al_policy *b = make(name, (const char *[]){"h_base", "40", NULL});
        al_policy *c = make(name, (const char *[]){"h_base", "40", NULL});
        assert_int_equal(start(a), start(b));
        al_rng_seed(&r, 21 + k);
        char saved[1024];
        double loss = 4.0;
        for (int i = 0; i < 60; i++) {
            loss *= 0.97 + 0.05 * al_rng_uniform(&r);
            double lr = 3e-3 * (0.1 + 0.9 * al_rng_uniform(&r));
            al_round_stats s = rs(i, 4, loss, 0.25 + 0.75 * al_rng_uniform(&r), lr, 40);
            int64_t ha = next(a, s), hb = next(b, s);
            assert_int_equal(ha, hb);
            if (i == 29) {
                assert_true(al_policy_save(a, saved, sizeof saved) < sizeof saved);
                al_err err = {0};
                if (al_policy_load(c, saved, &err)) fail_msg("%s", err.msg);
                assert_int_equal(al_policy_current(c), ha);
            }
            if (i >= 30) assert_int_equal(next(c, s), ha);
        }
        char sa[1024], sc[1024];
        al_policy_save(a, sa, sizeof sa);
        al_policy_save(c, sc, sizeof sc);
        assert_string_equal(sa, sc);
        al_policy_free(a);
        al_policy_free(b);
        al_policy_free(c);
    }
}

/* NaN or Inf in any statistic: AL_ENUMERIC naming it, the state byte-identical. */
static void test_refuses_nonfinite(void **state) {
    (void)state;
    const size_t offs[] = {
        offsetof(al_round_stats, loss),          offsetof(al_round_stats, grad_norm),
        offsetof(al_round_stats, delta_sq_mean), offsetof(al_round_stats, mean_delta_sq),
        offsetof(al_round_stats, lr_sum),        offsetof(al_round_stats, lr_sq_sum),
        offsetof(al_round_stats, lr_last),       offsetof(al_round_stats, compute_s)};
    const char *fields[] = {"loss",   "grad_norm", "delta_sq_mean", "mean_delta_sq",
                            "lr_sum", "lr_sq_sum", "lr_last",       "compute_s"};
    for (size_t k = 0; k < al_policy_count(); k++) {
        al_policy *p = make(al_policy_name_at(k), (const char *[]){"h_base", "40", NULL});
        start(p);
        for (int i = 0; i < 3; i++) next(p, rs(i, 4, 3.0 - 0.1 * i, 0.7, 1e-3, 40));
        char before[1024], after[1024];
        al_policy_save(p, before, sizeof before);
        for (size_t f = 0; f < AL_ARRAY_LEN(offs); f++) {
            for (int v = 0; v < 2; v++) {
                al_round_stats s = rs(3, 4, 2.5, 0.7, 1e-3, 40);
                *(double *)((char *)&s + offs[f]) = v ? -INFINITY : NAN;
                int64_t h = -1;
                al_err err = {0};
                assert_int_equal(al_policy_next_interval(p, &s, &h, &err), AL_ENUMERIC);
                assert_int_equal(h, -1);
                char want[64];
                snprintf(want, sizeof want, "'%s'", fields[f]);
                if (!strstr(err.msg, want)) fail_msg("message '%s' lacks %s", err.msg, want);
                al_policy_save(p, after, sizeof after);
                assert_string_equal(before, after);
            }
        }
        al_round_stats s = rs(3, 0, 2.5, 0.7, 1e-3, 40); /* no sites */
        int64_t h;
        assert_int_equal(al_policy_next_interval(p, &s, &h, NULL), AL_EINVAL);
        al_policy_save(p, after, sizeof after);
        assert_string_equal(before, after);
        al_policy_free(p);
    }
}

static void test_settings(void **state) {
    (void)state;
    al_policy *p;
    al_err err = {0};
    int64_t h;
    assert_int_equal(al_policy_create(&p, "coherence", &err), 0);
    assert_int_equal(al_policy_set(p, "gorw", "1.5", &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'gorw'"));
    assert_non_null(strstr(err.msg, "grow")); /* lists the known keys */
    assert_int_equal(al_policy_set(p, "grow", "fast", &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'grow'"));
    assert_int_equal(al_policy_set(p, "grow", "0.5", &err), AL_ECONFIG); /* below 1 */
    assert_int_equal(al_policy_set(p, "warmup", "1.5", &err), AL_ECONFIG);
    assert_int_equal(al_policy_set(p, "normalize", "maybe", &err), AL_ECONFIG);
    assert_int_equal(al_policy_set(p, "h_base", "inf", &err), AL_ECONFIG);
    assert_int_equal(al_policy_set(p, "h_base", "20", &err), 0);
    assert_int_equal(al_policy_set(p, "h_min", "30", &err), 0);
    assert_int_equal(al_policy_start(p, &h, &err), AL_ECONFIG); /* h_min > h_base */
    assert_non_null(strstr(err.msg, "h_min"));
    assert_int_equal(al_policy_next_interval(p, &(al_round_stats){0}, &h, &err), AL_EINVAL);
    assert_int_equal(al_policy_set(p, "h_min", "5", &err), 0);
    assert_int_equal(al_policy_start(p, &h, &err), 0);
    assert_int_equal(h, 20);
    assert_int_equal(al_policy_set(p, "grow", "1.5", &err), AL_ECONFIG); /* started */
    char buf[512];
    size_t need = al_policy_settings(p, buf, sizeof buf);
    assert_true(need < sizeof buf && strstr(buf, "name=coherence\n") == buf);
    assert_non_null(strstr(buf, "\nh_min=5\n"));
    assert_non_null(strstr(buf, "\nh_max=160\n"));         /* resolved: 8·20 */
    assert_int_equal(al_policy_settings(p, buf, 8), need); /* truncation reports the need */
    assert_int_equal(strlen(buf), 7);
    al_policy_free(p);

    /* a config section as key/value pairs: name anywhere, bad pair reported by index */
    const char *keys[] = {"h_base", "name", "h"}, *vals[] = {"40", "fixed", "60"};
    int bad;
    assert_int_equal(al_policy_create_kv(&p, keys, vals, 3, &bad, &err), 0);
    assert_int_equal(al_policy_start(p, &h, &err), 0);
    assert_int_equal(h, 60);
    al_policy_free(p);
    vals[2] = "-3";
    assert_int_equal(al_policy_create_kv(&p, keys, vals, 3, &bad, &err), AL_ECONFIG);
    assert_int_equal(bad, 2);
    assert_null(p);
    vals[1] = "nope";
    assert_int_equal(al_policy_create_kv(&p, keys, vals, 3, &bad, &err), AL_ECONFIG);
    assert_int_equal(bad, 1);
    assert_int_equal(al_policy_create_kv(&p, keys, vals, 1, &bad, &err), AL_ECONFIG);
    assert_non_null(strstr(err.msg, "'name'"));

    /* load refuses another policy's state, unknown or missing keys */
    p = make("qsr", (const char *[]){"h_base", "40", NULL});
    assert_int_equal(al_policy_load(p, "policy=fixed\nrounds=0x0p+0\nh=0x1.4p+5\n", &err),
                     AL_EFORMAT);
    assert_int_equal(al_policy_load(p, "policy=qsr\nrounds=0x0p+0\nh=0x1.4p+5\n", &err),
                     AL_EFORMAT);
    assert_non_null(strstr(err.msg, "'lr0'"));
    assert_int_equal(al_policy_load(p, "policy=qsr\nrounds=0\nh=40\nlr0=1e-3\nx=1\n", &err),
                     AL_EFORMAT);
    assert_non_null(strstr(err.msg, "line 5"));
    assert_int_equal(al_policy_load(p, "policy=qsr\nrounds=0\nh=400\nlr0=1e-3\n", &err),
                     AL_EFORMAT);
    assert_int_equal(al_policy_load(p, "policy=qsr\nrounds=3\nh=40\nlr0=1e-3\n", &err), 0);
    assert_int_equal(al_policy_current(p), 40);
    al_policy_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_fixed),
        cmocka_unit_test(test_adacomm),
        cmocka_unit_test(test_qsr),
        cmocka_unit_test(test_coherence_hand),
        cmocka_unit_test(test_coherence_defaults),
        cmocka_unit_test(test_coherence_normalized),
        cmocka_unit_test(test_coherence_lr_power),
        cmocka_unit_test(test_coherence_floor),
        cmocka_unit_test(test_coherence_cap),
        cmocka_unit_test(test_autoloco_drift_hand),
        cmocka_unit_test(test_autoloco_drift_settings),
        cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_schedule_three_phases),
        cmocka_unit_test(test_comm_floor),
        cmocka_unit_test(test_comm_floor_refused),
        cmocka_unit_test(test_deterministic_and_resume),
        cmocka_unit_test(test_refuses_nonfinite),
        cmocka_unit_test(test_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
