/*
 * test_use.c -- using a trained checkpoint: sampling, evaluation, export.
 *
 *  - the KV-cache decoder's next-token distribution equals the full forward's
 *    at every position of a prompt, and greedy generation with the cache equals
 *    greedy generation that reruns the full forward on the growing prefix;
 *  - a seeded generation repeats exactly; another seed gives another one;
 *  - al_eval_params on a saved checkpoint equals the trainer's own eval
 *    bit-for-bit (both packings);
 *  - export to the Hugging Face layout then import is bit-identical, and the
 *    import refuses a missing tensor, another preset, a wrong dtype.
 */
#include "al_test.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_store.h"
#include "al_data.h"
#include "al_sample.h"
#include "al_train.h"

static char g_tmp[256]; /* per-process scratch folder (test fixture) */

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/al-test-use-%d", (int)getpid());
    al_remove_tree(g_tmp, NULL);
    mkdir(g_tmp, 0755);
    char path[512], out[512];
    snprintf(path, sizeof path, "%s/corpus.txt", g_tmp);
    FILE *f = fopen(path, "w");
    al_rng r;
    al_rng_seed(&r, 5);
    for (int d = 0; d < 300; d++) {
        int len = 5 + (int)al_rng_below(&r, 90);
        for (int i = 0; i < len; i++) fputc("the cat sat on a mat\n"[al_rng_below(&r, 21)], f);
        fputs("\n\n", f);
    }
    fclose(f);
    snprintf(out, sizeof out, "%s/data", g_tmp);
    const char *in[] = {path};
    al_prep_stats st;
    al_err err = {0};
    int rc = al_data_prep(in, 1, AL_FMT_TEXT, out, 0.1, 1, &st, &err);
    if (rc) fprintf(stderr, "setup: %s\n", err.msg);
    return rc;
}

static int teardown(void **state) {
    (void)state;
    return al_remove_tree(g_tmp, NULL);
}

/* A tiny model trained for a few steps and saved; returns its parameters. */
static float *trained(al_model_config *c, al_packing packing, const char *name, double *eval) {
    al_err err = {0};
    char p[512];
    al_tokens tr, va;
    snprintf(p, sizeof p, "%s/data/train.bin", g_tmp);
    assert_int_equal(al_tokens_load(&tr, p, &err), 0);
    snprintf(p, sizeof p, "%s/data/val.bin", g_tmp);
    assert_int_equal(al_tokens_load(&va, p, &err), 0);
    assert_int_equal(al_model_preset(c, "tiny", &err), 0);
    al_train_opts o;
    al_train_opts_default(&o);
    o.batch = 3;
    o.steps = 30;
    o.warmup = 3;
    o.lr = 1e-2;
    o.packing = packing;
    al_trainer t;
    al_step_stats st;
    assert_int_equal(al_trainer_init(&t, c, &o, &tr, &va, &err), 0);
    for (int i = 0; i < 30; i++) assert_int_equal(al_trainer_step(&t, &st, &err), 0);
    assert_int_equal(al_trainer_eval(&t, 0, eval, &err), 0);
    snprintf(p, sizeof p, "%s/%s", g_tmp, name);
    char dir[4096];
    assert_int_equal(al_ckpt_save(p, &t, "", 0, dir, sizeof dir, &err), 0);
    float *params = malloc(t.model.lay.nparams * sizeof(float));
    memcpy(params, t.model.params, t.model.lay.nparams * sizeof(float));
    al_trainer_free(&t);
    al_tokens_free(&tr);
    al_tokens_free(&va);
    return params;
}

/* softmax over the first V of a logits row, in double */
static void probs(double *p, const float *logits, int V) {
    double mx = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) mx = fmax(mx, logits[i]);
    for (int i = 0; i < V; i++) s += (p[i] = exp(logits[i] - mx));
    for (int i = 0; i < V; i++) p[i] /= s;
}

/* The full forward's logits for one row of n tokens (positions 0..n-1). */
static void full_logits(al_model *m, const int *tok, int n, float *out) {
    al_batch b;
    al_err err = {0};
    assert_int_equal(al_batch_init(&b, 1, n, &err), 0);
    for (int i = 0; i < n; i++) {
        b.tokens[i] = tok[i];
        b.targets[i] = i + 1 < n ? tok[i + 1] : -1;
        b.pos[i] = i;
        b.docstart[i] = 0;
        b.ntargets += b.targets[i] >= 0;
    }
    al_model_forward(m, &b);
    memcpy(out, m->logits, (size_t)n * m->cfg.Vp * sizeof(float));
    al_batch_free(&b);
}

static void test_kv_cache_equals_forward(void **state) {
    (void)state;
    al_model_config c;
    double ev;
    float *params = trained(&c, AL_PACK_DOCS, "ck-kv", &ev);
    al_err err = {0};
    const char *text = "the cat sat on the mat and the";
    int n = 1 + (int)strlen(text), tok[64];
    tok[0] = AL_BYTE_EOT;
    for (int i = 1; i < n; i++) tok[i] = (unsigned char)text[i - 1];
    al_model m;
    assert_int_equal(al_model_init(&m, &c, 1, c.T, &err), 0);
    memcpy(m.params, params, m.lay.nparams * sizeof(float));
    float *full = malloc((size_t)c.T * c.Vp * sizeof(float));
    full_logits(&m, tok, n, full);
    al_decoder d;
    assert_int_equal(al_decoder_init(&d, &c, params, &err), 0);
    double worst = 0, pa[320], pb[320], first_vs_last = 0;
    for (int t = 0; t < n; t++) {
        assert_int_equal(al_decoder_step(&d, tok[t], &err), 0);
        probs(pa, d.logits, c.V);
        probs(pb, full + (size_t)t * c.Vp, c.V);
        for (int i = 0; i < c.V; i++) worst = fmax(worst, fabs(pa[i] - pb[i]));
    }
    /* the cache matters: the last token alone at position 0 predicts otherwise */
    al_decoder_reset(&d);
    assert_int_equal(al_decoder_step(&d, tok[n - 1], &err), 0);
    probs(pa, d.logits, c.V);
    for (int i = 0; i < c.V; i++) first_vs_last = fmax(first_vs_last, fabs(pa[i] - pb[i]));
    print_message("  next-token probabilities: cache vs full forward max |diff| %.3e over %d "
                  "positions; without the context %.3e\n",
                  worst, n, first_vs_last);
    assert_true(worst <= 1e-6);
    assert_true(first_vs_last > 100 * worst);
    /* greedy generation with the cache = greedy with the full forward each step */
    int gen[64], ng = 0, ref[64];
    al_sample_opts o = {c.T, 0.0, 0, 1, -1};
    assert_int_equal(al_generate(&d, tok, 4, &o, gen, &ng, &err), 0);
    assert_int_equal(ng, c.T - 4 + 1); /* stops when the context is full */
    memcpy(ref, tok, 4 * sizeof(int));
    for (int k = 0; k < ng; k++) {
        int len = 4 + k;
        full_logits(&m, ref, len, full);
        const float *row = full + (size_t)(len - 1) * c.Vp;
        int best = 0;
        for (int i = 1; i < c.V; i++)
            if (row[i] > row[best]) best = i;
        assert_int_equal(gen[k], best);
        if (len < c.T) ref[len] = best;
    }
    /* top-k 1 at any temperature is greedy too */
    int g1[64], n1 = 0;
    al_sample_opts o1 = {c.T, 1.5, 1, 99, -1};
    assert_int_equal(al_generate(&d, tok, 4, &o1, g1, &n1, &err), 0);
    assert_int_equal(n1, ng);
    assert_memory_equal(g1, gen, (size_t)ng * sizeof(int));
    al_decoder_free(&d);
    al_model_free(&m);
    free(full);
    free(params);
}

static void test_sample_seeded(void **state) {
    (void)state;
    al_model_config c;
    double ev;
    float *params = trained(&c, AL_PACK_DOCS, "ck-seed", &ev);
    al_err err = {0};
    al_decoder d;
    assert_int_equal(al_decoder_init(&d, &c, params, &err), 0);
    int prompt[] = {AL_BYTE_EOT, 't', 'h'}, a[40], b[40], x[40], na, nb, nx;
    al_sample_opts o = {20, 1.0, 40, 7, -1};
    assert_int_equal(al_generate(&d, prompt, 3, &o, a, &na, &err), 0);
    assert_int_equal(al_generate(&d, prompt, 3, &o, b, &nb, &err), 0);
    o.seed = 8;
    assert_int_equal(al_generate(&d, prompt, 3, &o, x, &nx, &err), 0);
    assert_int_equal(na, 20);
    assert_int_equal(nb, na);
    assert_memory_equal(a, b, (size_t)na * sizeof(int));
    assert_true(nx != na || memcmp(a, x, (size_t)na * sizeof(int)) != 0);
    /* a stop token ends the generation and is kept */
    o.stop = a[5];
    o.seed = 7;
    assert_int_equal(al_generate(&d, prompt, 3, &o, b, &nb, &err), 0);
    assert_true(nb <= 6 && b[nb - 1] == a[5]);
    /* a prompt longer than the context, an empty one, a token out of range */
    int longp[40] = {0};
    assert_int_equal(al_generate(&d, longp, c.T + 1, &o, b, &nb, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "longer than the model's context (T = 32)"));
    assert_int_equal(al_generate(&d, longp, 0, &o, b, &nb, &err), AL_EINVAL);
    int bad[] = {AL_BYTE_EOT, 999};
    assert_int_equal(al_generate(&d, bad, 2, &o, b, &nb, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "token 999 is outside the vocabulary"));
    al_decoder_free(&d);
    free(params);
}

static void test_eval_equals_training_eval(void **state) {
    (void)state;
    al_packing packs[] = {AL_PACK_DOCS, AL_PACK_STREAM};
    for (int k = 0; k < 2; k++) {
        al_model_config c, c2;
        double want, got = NAN;
        char root[512], dir[4096], p[512];
        snprintf(root, sizeof root, "%s/ck-eval-%d", g_tmp, k);
        float *params = trained(&c, packs[k], root + strlen(g_tmp) + 1, &want);
        float *back = NULL;
        al_err err = {0};
        al_theta th = AL_THETA_AUTO;
        assert_int_equal(al_ckpt_read_params(root, &th, NULL, &c2, &back, dir, sizeof dir, &err),
                         0);
        assert_int_equal(th, AL_THETA_LOCAL);
        assert_string_equal(c2.preset, "tiny");
        al_tokens va;
        snprintf(p, sizeof p, "%s/data/val.bin", g_tmp);
        assert_int_equal(al_tokens_load(&va, p, &err), 0);
        al_train_opts o;
        al_train_opts_default(&o);
        o.batch = 3;
        o.packing = packs[k];
        assert_int_equal(al_eval_params(&c2, back, &o, &va, 0, &got, &err), 0);
        print_message("  %s packing: trainer eval %.9f, from the checkpoint %.9f\n",
                      al_packing_name(packs[k]), want, got);
        assert_true(got == want);
        /* another batch shape evaluates other windows: a different number. (Not
         * batch 2: the split's 1375 positions make 14 batches of 3 rows and 21
         * of 2, the same 42 windows, and on a CPU whose kernels round a row
         * alike in both shapes the same number; 4 rows x 10 batches are 40.) */
        size_t rows3 = (size_t)(va.n - 1) / (3 * (size_t)c2.T) * 3;
        size_t rows4 = (size_t)(va.n - 1) / (4 * (size_t)c2.T) * 4;
        assert_true(rows4 != rows3);
        o.batch = 4;
        double other;
        assert_int_equal(al_eval_params(&c2, back, &o, &va, 0, &other, &err), 0);
        assert_true(other != want);
        /* a train checkpoint has no theta_global */
        free(back);
        th = AL_THETA_GLOBAL;
        assert_int_equal(al_ckpt_read_params(root, &th, NULL, &c2, &back, dir, sizeof dir, &err),
                         AL_ENOTFOUND);
        assert_non_null(strstr(err.msg, "no theta_global"));
        al_tokens_free(&va);
        free(params);
    }
}

static void test_hf_round_trip(void **state) {
    (void)state;
    al_model_config c, c2;
    double ev;
    float *params = trained(&c, AL_PACK_DOCS, "ck-hf", &ev);
    al_err err = {0};
    al_layout lay;
    assert_int_equal(al_layout_init(&lay, &c, &err), 0);
    /* padded vocabulary rows stayed zero through training: what makes it exact */
    for (size_t i = (size_t)c.V * c.C; i < (size_t)c.Vp * c.C; i++) assert_true(params[i] == 0.0f);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/hf", g_tmp);
    assert_int_equal(al_hf_export(dir, &c, params, &err), 0);
    float *back = NULL;
    assert_int_equal(al_hf_import(dir, NULL, &c2, &back, &err), 0);
    assert_string_equal(c2.preset, "tiny");
    assert_memory_equal(back, params, lay.nparams * sizeof(float));
    free(back);
    assert_int_equal(al_hf_import(dir, "demo", &c2, &back, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "a model of preset 'tiny', not 'demo'"));
    /* a file without one tensor (qkv of block 1) and one with another dtype */
    al_st_file f;
    char st[600];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    assert_int_equal(al_st_open(&f, st, &err), 0);
    al_st_close(&f);
    float *w = calloc((size_t)3 * c.C * c.C, sizeof(float));
    al_st_tensor one = {"transformer.h.0.ln_1.weight", 1, {c.C, 0}, w};
    assert_int_equal(al_st_write(st, &one, 1, "pt", &err), 0);
    assert_int_equal(al_hf_import(dir, NULL, &c2, &back, &err), AL_ENOTFOUND);
    assert_non_null(strstr(err.msg, "tensor 'transformer.wte.weight' is missing"));
    /* the Hub's GPT-2 names (no "transformer.") but a wrong shape */
    al_st_tensor wte = {"wte.weight", 2, {c.Vp, c.C}, params};
    assert_int_equal(al_st_write(st, &wte, 1, "pt", &err), 0);
    assert_int_equal(al_hf_import(dir, NULL, &c2, &back, &err), AL_EMISMATCH);
    assert_non_null(
        strstr(err.msg, "tensor 'wte.weight' is F32 [320, 32], expected F32 [257, 32]"));
    free(w);
    al_layout_free(&lay);
    free(params);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_cache_equals_forward),
        cmocka_unit_test(test_sample_seeded),
        cmocka_unit_test(test_eval_equals_training_eval),
        cmocka_unit_test(test_hf_round_trip),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
