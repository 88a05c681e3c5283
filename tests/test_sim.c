/*
 * test_sim.c -- `autoloco sim` (runtime/sim/al_sim.h) on the tiny preset:
 *  - the same seed gives the same run: θ_global bits, eval loss, H history;
 *  - every simulated site's replica of θ_global has the same hash every round
 *    (the sim checks it and fails with AL_EINTEGRITY; the log carries it);
 *  - `fixed` + correction none in the sim loop equals DiLoCo transcribed by
 *    hand over real trainers, bit for bit;
 *  - a site whose Δ holds a NaN is refused and left out of that round, and
 *    the run goes on; with no site left the round fails cleanly;
 *  - DDP with one site is plain training; the bytes are the real codec's
 *    encoded shards (fp32: exactly 48-byte headers + 4 bytes a value).
 */
#include "al_test.h"

#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_round.h"
#include "al_data.h"
#include "al_policy.h"
#include "al_sim.h"

static char g_tmp[256]; /* per-process scratch folder (test fixture, not library state) */
static al_tokens g_train, g_val;

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/al-test-sim-%d", (int)getpid());
    al_remove_tree(g_tmp, NULL);
    mkdir(g_tmp, 0755);
    char path[512], out[512];
    snprintf(path, sizeof path, "%s/corpus.txt", g_tmp);
    FILE *f = fopen(path, "w");
    al_rng r;
    al_rng_seed(&r, 5);
    for (int d = 0; d < 400; d++) {
        int len = 5 + (int)al_rng_below(&r, 60);
        for (int i = 0; i < len; i++) fputc("abcdefgh ijk\n"[al_rng_below(&r, 12)], f);
        fputs("\n\n", f);
    }
    fclose(f);
    snprintf(out, sizeof out, "%s/data", g_tmp);
    const char *in[] = {path};
    al_prep_stats st;
    al_err err = {0};
    int rc = al_data_prep(in, 1, AL_FMT_TEXT, out, 0.1, 1, &st, &err);
    snprintf(path, sizeof path, "%s/data/train.bin", g_tmp);
    if (rc == 0) rc = al_tokens_load(&g_train, path, &err);
    snprintf(path, sizeof path, "%s/data/val.bin", g_tmp);
    if (rc == 0) rc = al_tokens_load(&g_val, path, &err);
    if (rc) fprintf(stderr, "setup: %s\n", err.msg);
    al_threads_set(1);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    al_tokens_free(&g_train);
    al_tokens_free(&g_val);
    return al_remove_tree(g_tmp, NULL);
}

/* A small run: tiny preset, 4 rows of 32, `steps` inner steps per site. */
static void opts_for(al_sim_opts *o, al_policy **pol, const char *policy, int sites, long steps,
                     int h_base) {
    al_err err = {0};
    al_sim_opts_default(o);
    assert_int_equal(al_model_preset(&o->model, "tiny", &err), 0);
    al_train_opts_default(&o->train);
    o->train.batch = 4;
    o->train.seq = 32;
    o->train.steps = steps;
    o->train.warmup = 4;
    o->train.seed = 7;
    o->sites = sites;
    o->eval_batches = 4;
    assert_int_equal(al_policy_create(pol, policy, &err), 0);
    char hb[32];
    snprintf(hb, sizeof hb, "%d", h_base);
    assert_int_equal(al_policy_set(*pol, "h_base", hb, &err), 0);
    o->policy = *pol;
}

static void run_ok(const al_sim_opts *o, al_sim_result *r) {
    al_err err = {0};
    int rc = al_sim_run(o, &g_train, &g_val, r, &err);
    if (rc) fail_msg("al_sim_run: %s", err.msg);
}

static void test_deterministic(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p1, *p2;
    al_sim_result a, b;
    opts_for(&o, &p1, "autoloco", 3, 48, 4);
    o.scenario = AL_SIM_NONIID;
    run_ok(&o, &a);
    opts_for(&o, &p2, "autoloco", 3, 48, 4);
    o.scenario = AL_SIM_NONIID;
    run_ok(&o, &b);
    print_message("  autoloco, 3 non-IID sites: %ld syncs, eval %.6f, %s\n", a.syncs,
                  a.final_eval_loss, a.hash);
    assert_true(a.syncs >= 2);
    assert_string_equal(a.hash, b.hash);
    assert_memory_equal(&a.final_eval_loss, &b.final_eval_loss, sizeof(double));
    assert_int_equal(a.n_h, b.n_h);
    assert_memory_equal(a.h_history, b.h_history, (size_t)a.n_h * sizeof(long));
    assert_true(a.bytes == b.bytes);
    char *ja = al_sim_result_json(&o, &a);
    json_t *j = json_loads(ja, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_integer_value(json_object_get(j, "syncs")), a.syncs);
    assert_int_equal(json_array_size(json_object_get(j, "h_history")), a.n_h);
    assert_non_null(json_object_get(j, "final_eval_loss"));
    assert_non_null(json_object_get(j, "bytes"));
    json_decref(j);
    free(ja);
    /* another seed is another run */
    al_sim_result c;
    o.train.seed = 8;
    al_policy_free(p2);
    opts_for(&o, &p2, "autoloco", 3, 48, 4);
    o.train.seed = 8;
    run_ok(&o, &c);
    assert_string_not_equal(a.hash, c.hash);
    al_sim_result_free(&a);
    al_sim_result_free(&b);
    al_sim_result_free(&c);
    al_policy_free(p1);
    al_policy_free(p2);
}

/* The per-round log: one record a round, θ_global's hash agreed by every site
 * (the sim compares the replicas' hashes and would stop with AL_EINTEGRITY). */
static void test_hash_each_round(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    opts_for(&o, &p, "adacomm", 4, 40, 5);
    char path[512];
    snprintf(path, sizeof path, "%s/rounds.jsonl", g_tmp);
    o.jsonl = fopen(path, "w");
    al_sim_result r;
    run_ok(&o, &r);
    fclose(o.jsonl);
    FILE *f = fopen(path, "r");
    char line[8192];
    long rounds = 0;
    char last[65] = "";
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        assert_int_equal(json_integer_value(json_object_get(j, "round")), rounds);
        assert_int_equal(json_integer_value(json_object_get(j, "live")), 4);
        const char *h = json_string_value(json_object_get(j, "hash"));
        assert_non_null(h);
        assert_int_equal(strlen(h), 64);
        assert_string_not_equal(h, last); /* θ moved */
        snprintf(last, sizeof last, "%s", h);
        json_decref(j);
        rounds++;
    }
    fclose(f);
    assert_int_equal(rounds, r.syncs);
    assert_string_equal(last, r.hash);
    char hex[65];
    al_theta_hash(r.theta, r.nparams, hex);
    assert_string_equal(hex, r.hash);
    al_sim_result_free(&r);
    al_policy_free(p);
}

/* fixed + correction none in the sim = DiLoCo by hand over the same trainers. */
static void test_fixed_none_is_diloco(void **state) {
    (void)state;
    enum { M = 2, H = 5, R = 3 };
    al_sim_opts o;
    al_policy *p;
    opts_for(&o, &p, "fixed", M, H * R, H);
    o.outer.correction = AL_CORRECTION_NONE;
    al_sim_result res;
    run_ok(&o, &res);
    assert_int_equal(res.syncs, R);

    al_err err = {0};
    al_trainer tr[M];
    for (int m = 0; m < M; m++) {
        assert_int_equal(al_trainer_init(&tr[m], &o.model, &o.train, &g_train, NULL, &err), 0);
        al_loader_free(&tr[m].train);
        assert_int_equal(al_loader_init(&tr[m].train, &g_train, o.train.packing, 1,
                                        al_site_data_seed(o.train.seed, m), &err),
                         0);
    }
    size_t n = tr[0].model.lay.nparams;
    float *th = malloc(n * sizeof(float)), *b = calloc(n, sizeof(float));
    float *sum = malloc(n * sizeof(float));
    memcpy(th, tr[0].model.params, n * sizeof(float));
    for (int r = 0; r < R; r++) {
        for (int m = 0; m < M; m++)
            for (int k = 0; k < H; k++) {
                al_step_stats st;
                assert_int_equal(al_trainer_step(&tr[m], &st, &err), 0);
            }
        /* Δ̄ = Σ_m (θ − θ_m) in site order, / M; b ← μb + Δ̄; θ ← θ − α(Δ̄ + μb) */
        for (size_t i = 0; i < n; i++) sum[i] = th[i] - tr[0].model.params[i];
        for (int m = 1; m < M; m++)
            for (size_t i = 0; i < n; i++) sum[i] = sum[i] + (th[i] - tr[m].model.params[i]);
        for (size_t i = 0; i < n; i++) {
            float d = sum[i] / (float)M;
            b[i] = fmaf(0.9f, b[i], d);
            th[i] = fmaf(-0.7f, fmaf(0.9f, b[i], d), th[i]);
        }
        for (int m = 0; m < M; m++) memcpy(tr[m].model.params, th, n * sizeof(float));
    }
    assert_int_equal(res.nparams, n);
    assert_memory_equal(res.theta, th, n * sizeof(float));
    print_message("  DiLoCo by hand == sim (fixed, none), %zu params, %d rounds: bitwise\n", n, R);
    for (int m = 0; m < M; m++) al_trainer_free(&tr[m]);
    free(th);
    free(b);
    free(sum);
    al_sim_result_free(&res);
    al_policy_free(p);
}

/* progress = steps: the correction measures intervals in steps, so fixed H =
 * h_base with the correction on is DiLoCo up to float rounding (g = Δ̄/H and
 * m·H in place of b), whatever the lr schedule; progress = lr is not (the
 * warmup and the cosine move S_r away from S_ref). */
static void test_progress_steps_fixed_is_diloco(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    al_sim_result none, steps, lr;
    opts_for(&o, &p, "fixed", 2, 20, 5);
    o.outer.correction = AL_CORRECTION_NONE;
    run_ok(&o, &none);
    o.outer.correction = AL_CORRECTION_AUTOLOCO;
    o.progress = AL_SIM_PROGRESS_STEPS;
    run_ok(&o, &steps);
    o.progress = AL_SIM_PROGRESS_LR;
    run_ok(&o, &lr);
    double *ref = t_to_d(none.theta, none.nparams);
    double e_steps = t_max_rel_err(steps.theta, ref, none.nparams);
    double e_lr = t_max_rel_err(lr.theta, ref, none.nparams);
    print_message("  correction lr vs DiLoCo: rel diff %.3e (expected large)\n", e_lr);
    assert_err_below("correction (steps) vs DiLoCo, 4 rounds", e_steps, 1e-5);
    assert_true(e_lr > 1e-3);
    free(ref);
    al_sim_result_free(&none);
    al_sim_result_free(&steps);
    al_sim_result_free(&lr);
    al_policy_free(p);
}

static void test_nan_site_left_out(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    opts_for(&o, &p, "fixed", 3, 20, 5);
    o.nan_site = 1;
    o.nan_round = 1;
    char path[512];
    snprintf(path, sizeof path, "%s/nan.jsonl", g_tmp);
    o.jsonl = fopen(path, "w");
    al_sim_result r;
    run_ok(&o, &r);
    fclose(o.jsonl);
    assert_int_equal(r.dropped, 1);
    assert_int_equal(r.syncs, 4);
    assert_true(isfinite(r.final_eval_loss));
    assert_int_equal(al_find_nonfinite(r.theta, r.nparams), r.nparams);
    FILE *f = fopen(path, "r");
    char line[8192];
    for (int round = 0; fgets(line, sizeof line, f); round++) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *refused = json_object_get(j, "refused");
        assert_int_equal(json_integer_value(json_object_get(j, "live")), round == 1 ? 2 : 3);
        assert_int_equal(json_array_size(refused), round == 1 ? 1 : 0);
        if (round == 1) {
            json_t *e = json_array_get(refused, 0);
            assert_int_equal(json_integer_value(json_object_get(e, "site")), 1);
            const char *why = json_string_value(json_object_get(e, "why"));
            print_message("  round 1, site 1 refused: %s\n", why);
            assert_non_null(strstr(why, "non-finite"));
        }
        json_decref(j);
    }
    fclose(f);
    al_sim_result_free(&r);
    al_policy_free(p);

    /* one site, and it is refused: the round fails with a clear error */
    opts_for(&o, &p, "fixed", 1, 20, 5);
    o.nan_site = 0;
    o.nan_round = 0;
    al_err err = {0};
    assert_int_equal(al_sim_run(&o, &g_train, &g_val, &r, &err), AL_ENUMERIC);
    print_message("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "every site"));
    al_policy_free(p);
}

/* DDP with one site is one trainer fed by site 0's loader. */
static void test_ddp_one_site_is_training(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    opts_for(&o, &p, "fixed", 1, 12, 4);
    o.ddp = true;
    al_sim_result r;
    run_ok(&o, &r);
    assert_int_equal(r.syncs, 12);
    al_err err = {0};
    al_trainer tr;
    assert_int_equal(al_trainer_init(&tr, &o.model, &o.train, &g_train, NULL, &err), 0);
    al_loader_free(&tr.train);
    assert_int_equal(al_loader_init(&tr.train, &g_train, o.train.packing, 1,
                                    al_site_data_seed(o.train.seed, 0), &err),
                     0);
    for (int k = 0; k < 12; k++) {
        al_step_stats st;
        assert_int_equal(al_trainer_step(&tr, &st, &err), 0);
    }
    assert_memory_equal(r.theta, tr.model.params, r.nparams * sizeof(float));
    al_trainer_free(&tr);
    al_sim_result_free(&r);
    al_policy_free(p);
}

/* The codec is the agent's (al_commit_exchange): the bytes are the encoded
 * shards. With fp32 and M sites, a round sends, summed over sites, every
 * member's M-1 parts and every owner's mean shard M-1 times: 2·(M-1)·(48·M +
 * 4·P) bytes (a 48-byte header per shard). int8 sends about 8.25/32 of that
 * and its quantisation error reaches θ; zstd makes int8 smaller still. */
static void test_codec_bytes(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    al_sim_result a, b, c;
    opts_for(&o, &p, "fixed", 4, 10, 5);
    run_ok(&o, &a);
    al_err err = {0};
    assert_int_equal(al_codec_parse("int8", &o.codec, &err), 0);
    run_ok(&o, &b);
    assert_int_equal(al_codec_parse("int8+zstd", &o.codec, &err), 0);
    run_ok(&o, &c);
    assert_int_equal(a.syncs, 2);
    double want = 2.0 * 2 * 3 * (48.0 * 4 + 4.0 * (double)a.nparams);
    print_message("  fp32 %.0f B (want %.0f), int8 %.0f B, int8+zstd %.0f B\n", a.bytes, want,
                  b.bytes, c.bytes);
    assert_true(a.bytes == want);
    assert_true(a.bytes_per_site == want / 4);
    assert_true(fabs(b.bytes / a.bytes - 8.25 / 32) < 0.01);
    assert_true(c.bytes < b.bytes);
    assert_string_not_equal(a.hash, b.hash); /* the quantisation error reached θ */
    assert_string_equal(b.hash, c.hash);     /* zstd is lossless */
    al_sim_result_free(&a);
    al_sim_result_free(&b);
    al_sim_result_free(&c);
    al_policy_free(p);
}

/* Scenarios: `shift` is `iid` up to ⌊shift_at·steps⌋ and each site on its own
 * shard after. So shift_at = 1 is bit-identical to iid and shift_at = 0 to
 * noniid, while shift_at = 0.5 (mid-interval: 24 steps, H = 10) is neither;
 * and the record names the scenario. A shift_at outside [0, 1] is refused. */
static void test_scenarios(void **state) {
    (void)state;
    const struct {
        al_sim_scenario sc;
        double at;
    } cases[] = {{AL_SIM_IID, 0.5},
                 {AL_SIM_NONIID, 0.5},
                 {AL_SIM_SHIFT, 1.0},
                 {AL_SIM_SHIFT, 0.0},
                 {AL_SIM_SHIFT, 0.5}};
    char hash[5][65];
    for (int i = 0; i < 5; i++) {
        al_sim_opts o;
        al_policy *p;
        al_sim_result r;
        opts_for(&o, &p, "fixed", 3, 48, 10);
        o.scenario = cases[i].sc;
        o.shift_at = cases[i].at;
        run_ok(&o, &r);
        memcpy(hash[i], r.hash, sizeof r.hash);
        char *js = al_sim_result_json(&o, &r);
        json_t *j = json_loads(js, 0, NULL);
        assert_string_equal(json_string_value(json_object_get(j, "scenario")),
                            al_sim_scenario_name(cases[i].sc));
        assert_string_equal(json_string_value(json_object_get(j, "preset")), "tiny");
        json_decref(j);
        free(js);
        al_sim_result_free(&r);
        al_policy_free(p);
    }
    assert_string_not_equal(hash[0], hash[1]); /* iid and noniid differ at all */
    assert_string_equal(hash[2], hash[0]);     /* shift at the end = iid */
    assert_string_equal(hash[3], hash[1]);     /* shift at the start = noniid */
    assert_string_not_equal(hash[4], hash[0]);
    assert_string_not_equal(hash[4], hash[1]);

    al_sim_opts o;
    al_policy *p;
    al_sim_result r;
    al_err err = {0};
    opts_for(&o, &p, "fixed", 3, 48, 10);
    o.scenario = AL_SIM_SHIFT;
    o.shift_at = 1.5;
    assert_int_equal(al_sim_run(&o, &g_train, &g_val, &r, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "shift_at"));
    al_policy_free(p);
    al_sim_scenario sc;
    assert_int_equal(al_sim_scenario_parse("drift", &sc, &err), AL_ENOTFOUND);
    assert_non_null(strstr(err.msg, "'drift'"));
    assert_int_equal(al_sim_scenario_parse("shift", &sc, &err), 0);
    assert_int_equal(sc, AL_SIM_SHIFT);
}

/* languages: site m trains on group m of the train file's groups (data prep
 * --groups) and nothing else. Groups cut where noniid cuts give noniid's run
 * bit for bit (the shards are exactly the groups' documents); uneven groups
 * give site m [first[m], first[m + 1]) and another run; the record names the
 * groups. Refused: no groups, a group count other than the sites, groups
 * that do not cover the train file. */
static void test_languages(void **state) {
    (void)state;
    al_groups g = {.n = 3};
    snprintf(g.path, sizeof g.path, "train.groups");
    const char *names[] = {"en", "de", "es"};
    size_t D = g_train.ndocs;
    for (int m = 0; m < 3; m++) {
        snprintf(g.name[m], sizeof g.name[m], "%s", names[m]);
        g.first[m] = D * (size_t)m / 3;
    }
    g.first[3] = D;
    al_sim_opts o;
    al_policy *p;
    al_sim_result r;
    al_err err = {0};
    char hash[3][65];
    for (int i = 0; i < 3; i++) {
        if (i == 2) g.first[1] = 20, g.first[2] = D - 30; /* uneven: 20, D - 50, 30 */
        opts_for(&o, &p, "fixed", 3, 48, 10);
        o.scenario = i == 0 ? AL_SIM_NONIID : AL_SIM_LANGUAGES;
        o.groups = &g;
        for (int m = 0; m < 3; m++) {
            size_t a, b;
            assert_int_equal(al_sim_site_docs(&o, &g_train, m, &a, &b, &err), 0);
            if (i == 0) {
                assert_int_equal(a, D * (size_t)m / 3);
                assert_int_equal(b, D * (size_t)(m + 1) / 3);
            } else {
                assert_int_equal(a, g.first[m]);
                assert_int_equal(b, g.first[m + 1]);
            }
        }
        run_ok(&o, &r);
        memcpy(hash[i], r.hash, sizeof r.hash);
        char *js = al_sim_result_json(&o, &r);
        json_t *j = json_loads(js, 0, NULL);
        json_t *gj = json_object_get(j, "groups");
        if (i == 0)
            assert_null(gj);
        else {
            assert_string_equal(json_string_value(json_object_get(j, "scenario")), "languages");
            assert_int_equal(json_array_size(gj), 3);
            assert_string_equal(json_string_value(json_array_get(gj, 1)), "de");
        }
        json_decref(j);
        free(js);
        al_sim_result_free(&r);
        al_policy_free(p);
    }
    assert_string_equal(hash[1], hash[0]);
    assert_string_not_equal(hash[2], hash[0]);

    opts_for(&o, &p, "fixed", 3, 48, 10);
    o.scenario = AL_SIM_LANGUAGES;
    assert_int_equal(al_sim_run(&o, &g_train, &g_val, &r, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "needs the train file's groups"));
    o.groups = &g;
    o.sites = 2;
    assert_int_equal(al_sim_run(&o, &g_train, &g_val, &r, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "has 3 groups but there are 2 sites"));
    o.sites = 3;
    g.first[3] = D - 1;
    assert_int_equal(al_sim_run(&o, &g_train, &g_val, &r, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "does not belong"));
    size_t a, b;
    assert_int_equal(al_sim_site_docs(&o, &g_train, 3, &a, &b, &err), AL_EINVAL);
    al_policy_free(p);
    al_sim_scenario sc;
    assert_int_equal(al_sim_scenario_parse("languages", &sc, &err), 0);
    assert_int_equal(sc, AL_SIM_LANGUAGES);
}

/* The bandwidth floor in the sim: on a slow modelled link (1 Mbit/s, 0 RTT)
 * every round after the first carries comm_s > 0, so with max_comm_fraction 0.5 the
 * policy's H rises to at least the floor the round's statistics imply; the
 * per-round records carry that floor and the H that followed it. */
static void test_sim_comm_floor(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    al_sim_result r;
    al_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/floor.jsonl", g_tmp);
    opts_for(&o, &p, "fixed", 2, 60, 4);
    assert_int_equal(al_policy_set(p, "max_comm_fraction", "0.5", &err), 0);
    assert_int_equal(al_policy_set(p, "h_max", "1000000", &err), 0);
    o.bandwidth_bps = 1e6;
    o.rtt_s = 0;
    o.jsonl = fopen(path, "w");
    assert_non_null(o.jsonl);
    run_ok(&o, &r);
    fclose(o.jsonl);
    FILE *f = fopen(path, "r");
    char line[8192];
    int n = 0, raised = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        double fl = json_real_value(json_object_get(j, "comm_floor"));
        long hn = (long)json_integer_value(json_object_get(j, "h_next"));
        if (n == 0) assert_true(fl == 0); /* nothing measured before the first exchange */
        if (n > 0) {
            assert_true(fl > 4);
            assert_true(hn >= (long)fl);
            raised++;
        }
        n++;
        json_decref(j);
    }
    fclose(f);
    print_message("  1 Mbit/s, f = 0.5: %d rounds, H history %ld %ld %ld\n", n, r.h_history[0],
                  r.n_h > 1 ? r.h_history[1] : 0, r.n_h > 2 ? r.h_history[2] : 0);
    /* round 0's statistics carry no measurement (comm_s is the previous
     * exchange's), so H_1 and H_2 are the rule's and H_3 is raised */
    assert_true(n >= 3);
    assert_int_equal(r.h_history[0], 4);
    assert_int_equal(r.h_history[1], 4);
    assert_true(r.h_history[2] > 4);
    assert_true(raised >= 1);
    al_sim_result_free(&r);
    al_policy_free(p);
}

/* [outer] overlap = delayed: one round is exactly a blocking round (the merge
 * computes the same Δ from θ_global), so a one-round run ends on the same
 * hash; over four rounds the eager starts change the trajectory, the bytes
 * and syncs stay those of blocking, and the projected time hides the
 * exchanges behind the intervals: compute ≤ overlap_s ≤ projected_s, with
 * overlap_s = projected_s when blocking. */
static void test_overlap_delayed(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    al_sim_result a1, b1, a, b;
    opts_for(&o, &p, "fixed", 2, 10, 10);
    run_ok(&o, &a1);
    o.overlap = AL_OVERLAP_DELAYED;
    run_ok(&o, &b1);
    assert_int_equal(a1.syncs, 1);
    assert_string_equal(a1.hash, b1.hash);
    o.train.steps = 40;
    o.overlap = AL_OVERLAP_NONE;
    run_ok(&o, &a);
    o.overlap = AL_OVERLAP_DELAYED;
    run_ok(&o, &b);
    print_message("  blocking eval %.4f, %.3f s; delayed eval %.4f, %.3f s (compute %.3f)\n",
                  a.final_eval_loss, a.overlap_s, b.final_eval_loss, b.overlap_s, b.compute_s);
    assert_int_equal(b.syncs, 4);
    assert_true(a.bytes == b.bytes);
    assert_string_not_equal(a.hash, b.hash);
    assert_true(isfinite(b.final_eval_loss) && fabs(b.final_eval_loss - a.final_eval_loss) < 0.5);
    assert_true(a.overlap_s == a.projected_s);
    assert_true(b.overlap_s < b.projected_s && b.overlap_s >= b.compute_s);
    al_sim_result_free(&a1);
    al_sim_result_free(&b1);
    al_sim_result_free(&a);
    al_sim_result_free(&b);
    al_policy_free(p);
}

/* [outer] overlap = streaming. One fragment merged at once (τ = 0) is
 * exactly blocking: the same Δ from the same θ_global each round, so the
 * same hash. Four fragments, each exchange beside τ = 2 steps: every fragment
 * synchronises once a round (the bytes of blocking, plus the flush of the
 * fragments still holding progress at the end), the replicas agree (the run
 * checks every fragment's step), and on a slow link the projected time hides
 * part of the exchanges: compute ≤ overlap_s < projected_s; without the eager
 * start the trajectory differs. A site whose
 * fragment Δ is not finite sits that exchange out and starts again from
 * θ_global; bad settings are refused. */
static void test_overlap_streaming(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    al_sim_result a, b, c;
    opts_for(&o, &p, "fixed", 2, 40, 10);
    o.bandwidth_bps = 1e6; /* 1 Mbit/s: the exchanges cost more than the compute */
    run_ok(&o, &a);
    o.overlap = AL_OVERLAP_STREAMING;
    o.fragments = 1;
    o.overlap_steps = 0;
    run_ok(&o, &b);
    assert_int_equal(a.syncs, 4);
    assert_int_equal(b.syncs, 4);
    assert_string_equal(a.hash, b.hash);
    assert_true(a.final_eval_loss == b.final_eval_loss);
    assert_true(a.bytes == b.bytes);
    al_sim_result_free(&b);

    o.fragments = 4;
    o.overlap_steps = 2;
    al_sim_opts dflt;
    al_sim_opts_default(&dflt);
    assert_int_equal(dflt.fragments, 16); /* the frozen rule (docs/results/overlap.md) */
    assert_int_equal(dflt.overlap_steps, -1);
    assert_true(dflt.stream_eager);
    run_ok(&o, &b);
    print_message("  blocking eval %.4f, %.3f s; streaming F=4 tau=2 eval %.4f, %.3f s of "
                  "%.3f (compute %.3f), bytes %.0f vs %.0f\n",
                  a.final_eval_loss, a.overlap_s, b.final_eval_loss, b.overlap_s, b.projected_s,
                  b.compute_s, b.bytes, a.bytes);
    assert_int_equal(b.syncs, 4);
    assert_string_not_equal(a.hash, b.hash);
    /* 4 rounds of the whole θ, then fragments 0..2 flushed: 3/4 of one more */
    assert_true(b.bytes > a.bytes && b.bytes < 1.25 * a.bytes);
    assert_true(isfinite(b.final_eval_loss) && fabs(b.final_eval_loss - a.final_eval_loss) < 0.5);
    assert_true(b.overlap_s < b.projected_s && b.overlap_s >= b.compute_s);
    assert_int_equal(al_find_nonfinite(b.theta, b.nparams), b.nparams);
    /* the fragment in flight trained from where each site stood, not from its
     * eager guess: another trajectory, the same bytes */
    o.stream_eager = false;
    run_ok(&o, &c);
    assert_string_not_equal(c.hash, b.hash);
    assert_true(c.bytes == b.bytes && isfinite(c.final_eval_loss));
    al_sim_result_free(&c);
    o.stream_eager = true;

    /* a NaN in site 1's fragment 0 at round 1: refused, the run goes on */
    o.sites = 3;
    o.nan_site = 1;
    o.nan_round = 1;
    run_ok(&o, &c);
    assert_int_equal(c.dropped, 1);
    assert_true(isfinite(c.final_eval_loss));
    assert_int_equal(al_find_nonfinite(c.theta, c.nparams), c.nparams);
    al_sim_result_free(&c);

    /* τ = sync: the merge at the next fragment's sync. A merge never waits
     * past that sync, so sync is any τ ≥ the longest span: with F = 2 and
     * H = 10 (spans of 5) it is τ = 5 bit for bit; with F = 4 the spans are
     * 2, 3, 2, 3 steps, so it is τ = 3, and not τ = 2 */
    o.sites = 2;
    o.nan_site = -1;
    o.nan_round = -1;
    al_sim_result d;
    o.fragments = 2;
    o.overlap_steps = 5;
    run_ok(&o, &c);
    o.overlap_steps = AL_SIM_TAU_SYNC;
    run_ok(&o, &d);
    assert_string_equal(c.hash, d.hash);
    al_sim_result_free(&c);
    al_sim_result_free(&d);
    o.fragments = 4;
    run_ok(&o, &d);
    for (long tau = 2; tau <= 3; tau++) {
        o.overlap_steps = tau;
        run_ok(&o, &c);
        if (tau == 3)
            assert_string_equal(c.hash, d.hash);
        else
            assert_string_not_equal(c.hash, d.hash);
        al_sim_result_free(&c);
    }
    assert_true(isfinite(d.final_eval_loss) && d.bytes == b.bytes);
    al_sim_result_free(&d);

    al_err err = {0};
    o.fragments = 0;
    assert_int_equal(al_sim_run(&o, &g_train, &g_val, &c, &err), AL_EINVAL);
    print_message("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "0 fragments"));
    al_sim_result_free(&a);
    al_sim_result_free(&b);
    al_policy_free(p);
}

/* Round `round`'s refusals in a JSONL written by the simulator: how many,
 * and the first one's site and reason (copied into why). */
static int refusals(const char *path, int round, int *site, char *why, size_t n) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[16384];
    int count = -1;
    for (int r = 0; fgets(line, sizeof line, f); r++) {
        if (r != round) continue;
        json_t *j = json_loads(line, 0, NULL);
        assert_non_null(j);
        json_t *refused = json_object_get(j, "refused");
        count = (int)json_array_size(refused);
        if (count > 0) {
            json_t *e = json_array_get(refused, 0);
            *site = (int)json_integer_value(json_object_get(e, "site"));
            snprintf(why, n, "%s", json_string_value(json_object_get(e, "why")));
        }
        json_decref(j);
    }
    fclose(f);
    return count;
}

/* The failure paths of a round other than a NaN at the report: a site whose
 * Δ is finite but 10⁶ times too large is left out of the mean as an outlier
 * (blocking, and a fragment under streaming), and under streaming a site
 * whose θ goes non-finite while the fragment's exchange is in flight is reset
 * to θ_global at the merge. Each is recorded in the round's `refused`, and
 * the run ends on a finite θ with an eval loss near the clean run's. */
static void test_round_faults(void **state) {
    (void)state;
    al_sim_opts o;
    al_policy *p;
    al_sim_result clean, r;
    char path[512], why[256];
    int site = -1;
    snprintf(path, sizeof path, "%s/faults.jsonl", g_tmp);
    for (int streaming = 0; streaming < 2; streaming++) {
        opts_for(&o, &p, "fixed", 3, 40, 10);
        if (streaming) {
            o.overlap = AL_OVERLAP_STREAMING;
            o.fragments = 4;
            o.overlap_steps = 2;
        }
        run_ok(&o, &clean);
        o.nan_site = 2;
        o.nan_round = 1;
        o.fault_value = 1e6f;
        o.jsonl = fopen(path, "w");
        run_ok(&o, &r);
        fclose(o.jsonl);
        o.jsonl = NULL;
        assert_int_equal(refusals(path, 0, &site, why, sizeof why), 0);
        assert_int_equal(refusals(path, 1, &site, why, sizeof why), 1);
        print_message("  %s: round 1, site %d left out: %s\n", streaming ? "streaming" : "blocking",
                      site, why);
        assert_int_equal(site, 2);
        assert_non_null(strstr(why, "max_delta_ratio"));
        assert_int_equal(r.dropped, 0); /* left out, not refused */
        assert_string_not_equal(r.hash, clean.hash);
        assert_int_equal(al_find_nonfinite(r.theta, r.nparams), r.nparams);
        assert_true(fabs(r.final_eval_loss - clean.final_eval_loss) < 0.1);
        al_sim_result_free(&r);

        if (streaming) { /* NaN during the τ steps of fragment 0's exchange */
            o.fault_value = NAN;
            o.fault_at_merge = true;
            o.jsonl = fopen(path, "w");
            run_ok(&o, &r);
            fclose(o.jsonl);
            o.jsonl = NULL;
            assert_int_equal(r.dropped, 1);
            assert_int_equal(refusals(path, 1, &site, why, sizeof why), 1);
            print_message("  streaming: round 1, site %d reset at the merge: %s\n", site, why);
            assert_int_equal(site, 2);
            assert_non_null(strstr(why, "non-finite"));
            assert_int_equal(al_find_nonfinite(r.theta, r.nparams), r.nparams);
            assert_true(fabs(r.final_eval_loss - clean.final_eval_loss) < 0.1);
            al_sim_result_free(&r);
        }
        al_sim_result_free(&clean);
        al_policy_free(p);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_scenarios),
        cmocka_unit_test(test_languages),
        cmocka_unit_test(test_sim_comm_floor),
        cmocka_unit_test(test_hash_each_round),
        cmocka_unit_test(test_fixed_none_is_diloco),
        cmocka_unit_test(test_progress_steps_fixed_is_diloco),
        cmocka_unit_test(test_nan_site_left_out),
        cmocka_unit_test(test_round_faults),
        cmocka_unit_test(test_ddp_one_site_is_training),
        cmocka_unit_test(test_codec_bytes),
        cmocka_unit_test(test_overlap_delayed),
        cmocka_unit_test(test_overlap_streaming),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
