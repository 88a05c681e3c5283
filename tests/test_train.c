/*
 * test_train.c -- data files, the loader, the trainer, checkpoints and config:
 *  - resume: N steps, save, load into a fresh trainer, N more steps gives
 *    parameters and AdamW state bit-identical to 2N uninterrupted steps;
 *  - the loader packs documents correctly and a saved position is exact;
 *  - bad inputs fail with a clear message, never a crash: missing, truncated
 *    or foreign token files, vocabulary mismatch, bad config, unwritable or
 *    corrupt checkpoints (a corrupt newest checkpoint falls back to the previous);
 *  - the trainer on a staged backend (CPU kernels, on_host = 0: moments on the
 *    "device", checkpoints copied through the host) is bit-identical to the
 *    CPU trainer, across a save and a load.
 */
#include "al_test.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_store.h"
#include "al_data.h"
#include "al_train.h"

static char g_tmp[256]; /* per-process scratch folder (test fixture, not library state) */

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/al-test-train-%d", (int)getpid());
    al_remove_tree(g_tmp, NULL);
    mkdir(g_tmp, 0755);
    /* a small corpus in the text format: documents of varied length */
    char path[512];
    snprintf(path, sizeof path, "%s/corpus.txt", g_tmp);
    FILE *f = fopen(path, "w");
    al_rng r;
    al_rng_seed(&r, 3);
    for (int d = 0; d < 300; d++) {
        int len = 5 + (int)al_rng_below(&r, 90);
        for (int i = 0; i < len; i++) fputc("abcdefgh ijk\n"[al_rng_below(&r, 12)], f);
        fputs("\n\n", f);
    }
    fclose(f);
    char out[512];
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

static void path_of(char *out, const char *name) {
    snprintf(out, 512, "%s/%s", g_tmp, name);
}

static void load_data(al_tokens *tr, al_tokens *va) {
    char p[512];
    al_err err = {0};
    path_of(p, "data/train.bin");
    assert_int_equal(al_tokens_load(tr, p, &err), 0);
    path_of(p, "data/val.bin");
    assert_int_equal(al_tokens_load(va, p, &err), 0);
}

static void tiny_opts(al_train_opts *o) {
    al_train_opts_default(o);
    o->batch = 2;
    o->seq = 32;
    o->accum = 2;
    o->steps = 20;
    o->warmup = 3;
    o->lr = 1e-2;
}

static void test_resume_bit_identical(void **state) {
    (void)state;
    al_err err = {0};
    al_tokens tr_tok, va_tok;
    load_data(&tr_tok, &va_tok);
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_train_opts o;
    tiny_opts(&o);
    const int N = 6;
    al_step_stats st;
    /* 2N uninterrupted */
    al_trainer a;
    assert_int_equal(al_trainer_init(&a, &c, &o, &tr_tok, &va_tok, &err), 0);
    for (int i = 0; i < 2 * N; i++) assert_int_equal(al_trainer_step(&a, &st, &err), 0);
    /* N, save, fresh trainer, load, N more */
    char root[512], dir[4096];
    path_of(root, "ckpt-resume");
    al_trainer b;
    assert_int_equal(al_trainer_init(&b, &c, &o, &tr_tok, &va_tok, &err), 0);
    for (int i = 0; i < N; i++) assert_int_equal(al_trainer_step(&b, &st, &err), 0);
    assert_int_equal(al_ckpt_save(root, &b, "hash", 2, dir, sizeof dir, &err), 0);
    al_trainer_free(&b);
    al_trainer c2;
    assert_int_equal(al_trainer_init(&c2, &c, &o, &tr_tok, &va_tok, &err), 0);
    al_log log;
    al_log_init(&log, AL_LOG_ERROR, stderr);
    assert_int_equal(al_ckpt_load(dir, &c2, "hash", &log, &err), 0);
    assert_int_equal(c2.step, N);
    for (int i = 0; i < N; i++) assert_int_equal(al_trainer_step(&c2, &st, &err), 0);
    size_t P = a.model.lay.nparams;
    assert_int_equal(c2.step, a.step);
    assert_memory_equal(a.model.params, c2.model.params, P * sizeof(float));
    assert_memory_equal(a.m, c2.m, P * sizeof(float));
    assert_memory_equal(a.v, c2.v, P * sizeof(float));
    /* and training did move the parameters */
    al_trainer fresh;
    assert_int_equal(al_trainer_init(&fresh, &c, &o, &tr_tok, &va_tok, &err), 0);
    assert_memory_not_equal(fresh.model.params, a.model.params, P * sizeof(float));
    al_trainer_free(&fresh);
    al_trainer_free(&a);
    al_trainer_free(&c2);
    al_tokens_free(&tr_tok);
    al_tokens_free(&va_tok);
}

static void test_staged_trainer(void **state) {
    (void)state;
    al_err err = {0};
    al_tokens tr_tok, va_tok;
    load_data(&tr_tok, &va_tok);
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_train_opts o;
    tiny_opts(&o);
    const int N = 3;
    al_step_stats st;
    al_trainer a;
    assert_int_equal(al_trainer_init(&a, &c, &o, &tr_tok, &va_tok, &err), 0);
    for (int i = 0; i < 2 * N; i++) assert_int_equal(al_trainer_step(&a, &st, &err), 0);
    o.backend = al_backend_staged();
    char root[512], dir[4096];
    path_of(root, "ckpt-staged");
    al_trainer b;
    assert_int_equal(al_trainer_init(&b, &c, &o, &tr_tok, &va_tok, &err), 0);
    for (int i = 0; i < N; i++) assert_int_equal(al_trainer_step(&b, &st, &err), 0);
    assert_int_equal(al_ckpt_save(root, &b, "hash", 2, dir, sizeof dir, &err), 0);
    al_trainer_free(&b);
    al_trainer s;
    assert_int_equal(al_trainer_init(&s, &c, &o, &tr_tok, &va_tok, &err), 0);
    al_log log;
    al_log_init(&log, AL_LOG_ERROR, stderr);
    assert_int_equal(al_ckpt_load(dir, &s, "hash", &log, &err), 0);
    for (int i = 0; i < N; i++) assert_int_equal(al_trainer_step(&s, &st, &err), 0);
    size_t P = a.model.lay.nparams;
    float *h = malloc(P * sizeof(float));
    const float *want[] = {a.model.params, a.m, a.v}, *got[] = {s.model.params, s.m, s.v};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(al_model_to_host(&s.model, h, got[k], P, &err), 0);
        assert_memory_equal(h, want[k], P * sizeof(float));
    }
    free(h);
    double la, ls;
    assert_int_equal(al_trainer_eval(&a, 2, &la, &err), 0);
    assert_int_equal(al_trainer_eval(&s, 2, &ls, &err), 0);
    assert_true(la == ls);
    al_trainer_free(&a);
    al_trainer_free(&s);
    al_tokens_free(&tr_tok);
    al_tokens_free(&va_tok);
}

static void test_training_reduces_loss(void **state) {
    (void)state;
    al_err err = {0};
    al_tokens tr_tok, va_tok;
    load_data(&tr_tok, &va_tok);
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_train_opts o;
    tiny_opts(&o);
    o.steps = 60;
    al_trainer t;
    assert_int_equal(al_trainer_init(&t, &c, &o, &tr_tok, &va_tok, &err), 0);
    double before, after;
    assert_int_equal(al_trainer_eval(&t, 4, &before, &err), 0);
    assert_true(fabs(before - log(257.0)) < 0.2); /* uniform prediction at init */
    al_step_stats st;
    for (int i = 0; i < 60; i++) assert_int_equal(al_trainer_step(&t, &st, &err), 0);
    assert_int_equal(al_trainer_eval(&t, 4, &after, &err), 0);
    print_message("  val loss %.3f -> %.3f (12-symbol alphabet: ln 12 = 2.48)\n", before, after);
    assert_true(after < 2.7);
    al_trainer_free(&t);
    al_tokens_free(&tr_tok);
    al_tokens_free(&va_tok);
}

static void test_loader_packing(void **state) {
    (void)state;
    al_err err = {0};
    al_tokens tr_tok, va_tok;
    load_data(&tr_tok, &va_tok);
    al_loader ld;
    assert_int_equal(al_loader_init(&ld, &tr_tok, AL_PACK_DOCS, 1, 5, &err), 0);
    al_batch b;
    assert_int_equal(al_batch_init(&b, 3, 32, &err), 0);
    for (int it = 0; it < 50; it++) {
        al_loader_next(&ld, &b);
        assert_int_equal(b.ntargets, 3 * 32);
        for (int i = 0; i < 3 * 32; i++) {
            int t = i % 32;
            assert_true(b.docstart[i] <= t);
            assert_int_equal(b.pos[i], t - b.docstart[i]);
            /* within a document, each target is the next input */
            if (t + 1 < 32 && b.docstart[i + 1] == b.docstart[i])
                assert_int_equal(b.targets[i], b.tokens[i + 1]);
            /* a document's first position is its EOT, unless it continues a split one */
            if (b.targets[i] == AL_BYTE_EOT) assert_true(t + 1 == 32 || b.docstart[i + 1] == t + 1);
        }
    }
    /* a saved position replays exactly */
    al_loader_state saved = ld.st;
    al_batch b2;
    assert_int_equal(al_batch_init(&b2, 3, 32, &err), 0);
    al_loader_next(&ld, &b);
    al_loader ld2;
    assert_int_equal(al_loader_init(&ld2, &tr_tok, AL_PACK_DOCS, 1, 5, &err), 0);
    assert_int_equal(al_loader_seek(&ld2, &saved, &err), 0);
    al_loader_next(&ld2, &b2);
    assert_memory_equal(b.tokens, b2.tokens, 3 * 32 * sizeof(int));
    assert_memory_equal(b.docstart, b2.docstart, 3 * 32 * sizeof(int));
    /* a position beyond the data is refused, state untouched */
    al_loader_state bad = {0, tr_tok.ndocs + 5, 0};
    assert_int_equal(al_loader_seek(&ld2, &bad, &err), AL_EMISMATCH);
    al_batch_free(&b);
    al_batch_free(&b2);
    al_loader_free(&ld);
    al_loader_free(&ld2);
    al_tokens_free(&tr_tok);
    al_tokens_free(&va_tok);
}

/* ---- bad inputs -------------------------------------------------------------------- */

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static void test_bad_token_files(void **state) {
    (void)state;
    al_err err = {0};
    al_tokens t;
    char p[512];
    path_of(p, "nope.bin");
    assert_int_equal(al_tokens_load(&t, p, &err), AL_EIO);
    assert_non_null(strstr(err.msg, "nope.bin"));
    /* truncated: header says 100 tokens, file has 10 */
    int32_t h[256] = {AL_TOKENS_MAGIC, 1, 100, 257, 256};
    uint16_t tok[10] = {256, 1, 2, 256, 3, 4, 256, 5, 6, 256};
    char buf[1024 + 20];
    memcpy(buf, h, 1024);
    memcpy(buf + 1024, tok, 20);
    path_of(p, "trunc.bin");
    write_bytes(p, buf, sizeof buf);
    assert_int_equal(al_tokens_load(&t, p, &err), AL_EFORMAT);
    assert_non_null(strstr(err.msg, "truncated"));
    /* short header */
    write_bytes(p, buf, 100);
    assert_int_equal(al_tokens_load(&t, p, &err), AL_EFORMAT);
    assert_non_null(strstr(err.msg, "header"));
    /* wrong magic */
    h[0] = 12345;
    h[2] = 10;
    memcpy(buf, h, 1024);
    path_of(p, "magic.bin");
    write_bytes(p, buf, sizeof buf);
    assert_int_equal(al_tokens_load(&t, p, &err), AL_EFORMAT);
    assert_non_null(strstr(err.msg, "magic"));
    /* token outside the vocabulary */
    h[0] = AL_TOKENS_MAGIC;
    memcpy(buf, h, 1024);
    tok[4] = 300;
    memcpy(buf + 1024, tok, 20);
    path_of(p, "oov.bin");
    write_bytes(p, buf, sizeof buf);
    assert_int_equal(al_tokens_load(&t, p, &err), AL_EFORMAT);
    assert_non_null(strstr(err.msg, "vocabulary"));
    /* a GPT-2 (llm.c) file with a byte-vocabulary preset: mismatch */
    h[3] = 0; /* llm.c header: vocabulary not stored, means 50257 */
    h[4] = 0;
    memcpy(buf, h, 1024);
    uint16_t g[10] = {50256, 464, 3290, 50256, 1, 2, 50256, 7, 8, 50256};
    memcpy(buf + 1024, g, 20);
    path_of(p, "gpt2.bin");
    write_bytes(p, buf, sizeof buf);
    assert_int_equal(al_tokens_load(&t, p, &err), 0);
    assert_int_equal(t.ndocs, 3); /* documents found from EOT, no index */
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "demo", &err), 0);
    assert_int_equal(al_tokens_check_vocab(&t, &c, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "50257"));
    assert_int_equal(al_model_preset(&c, "gpt2-124m", &err), 0);
    assert_int_equal(al_tokens_check_vocab(&t, &c, &err), 0);
    al_tokens_free(&t);
}

static void test_bad_config(void **state) {
    (void)state;
    al_err err = {0};
    al_config c;
    assert_int_equal(al_config_init(&c, &err), 0);
    char p[512];
    path_of(p, "bad.ini");
    const char *cases[][2] = {
        {"[inner]\nsteps = 10\nlrr = 0.1\n", "bad.ini:3: [inner] lrr: unknown key"},
        {"[inner]\nlr = fast\n", "bad.ini:2: [inner] lr: 'fast' is not a number"},
        {"[inner]\nbatch = 0\n", "bad.ini:2: [inner] batch: 0 is out of range"},
        {"[model]\npreset = huge\n", "bad.ini:2: [model] preset: 'huge' is not one of"},
        {"[wat]\nx = 1\n", "bad.ini:2: unknown section [wat]"},
        {"[inner]\nthis line has no equals\n", "bad.ini:2: syntax error"},
    };
    for (size_t i = 0; i < AL_ARRAY_LEN(cases); i++) {
        write_bytes(p, cases[i][0], strlen(cases[i][0]));
        assert_int_equal(al_config_load(&c, p, &err), AL_ECONFIG);
        if (!strstr(err.msg, cases[i][1])) fail_msg("got '%s', want '%s'", err.msg, cases[i][1]);
    }
    write_bytes(p, "[inner]\nsteps = 77\n; comment\n[model]\npreset = tiny\n", 50);
    assert_int_equal(al_config_load(&c, p, &err), 0);
    assert_int_equal(c.inner_steps, 77);
    assert_string_equal(c.model_preset, "tiny");
    char h1[65], h2[65];
    al_config_hash(&c, h1);
    assert_int_equal(al_config_set_arg(&c, "inner.lr=0.5", &err), 0);
    al_config_hash(&c, h2);
    assert_string_not_equal(h1, h2);
    assert_int_equal(al_config_set_arg(&c, "inner.nope=1", &err), AL_ECONFIG);
    assert_int_equal(al_config_set_arg(&c, "garbage", &err), AL_ECONFIG);
    path_of(p, "missing.ini");
    assert_int_equal(al_config_load(&c, p, &err), AL_EIO);
    al_config_free(&c);
}

static void test_bad_checkpoints(void **state) {
    (void)state;
    al_err err = {0};
    al_tokens tr_tok, va_tok;
    load_data(&tr_tok, &va_tok);
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_train_opts o;
    tiny_opts(&o);
    al_trainer t;
    assert_int_equal(al_trainer_init(&t, &c, &o, &tr_tok, &va_tok, &err), 0);
    al_step_stats st;
    char root[512], dir1[4096], dir2[4096], found[4096];
    /* unwritable: a regular file where the folder should be */
    path_of(root, "afile");
    write_bytes(root, "x", 1);
    strcat(root, "/ckpt");
    assert_int_equal(al_ckpt_save(root, &t, "h", 0, NULL, 0, &err), AL_EIO);
    assert_non_null(strstr(err.msg, "afile"));
    /* two checkpoints, then corrupt the newest */
    path_of(root, "ckpt-bad");
    assert_int_equal(al_trainer_step(&t, &st, &err), 0);
    assert_int_equal(al_ckpt_save(root, &t, "h", 0, dir1, sizeof dir1, &err), 0);
    assert_int_equal(al_trainer_step(&t, &st, &err), 0);
    assert_int_equal(al_ckpt_save(root, &t, "h", 0, dir2, sizeof dir2, &err), 0);
    al_log quiet;
    al_log_init(&quiet, AL_LOG_ERROR, stderr);
    assert_int_equal(al_ckpt_find(root, &quiet, found, sizeof found, &err), 0);
    assert_string_equal(found, dir2);
    char f[4200];
    snprintf(f, sizeof f, "%s/model.safetensors", dir2);
    FILE *fp = fopen(f, "r+b");
    fseek(fp, 4000, SEEK_SET);
    fputc(0x5a, fp);
    fclose(fp);
    assert_int_equal(al_ckpt_load(dir2, &t, "h", &quiet, &err), AL_EINTEGRITY);
    assert_non_null(strstr(err.msg, "SHA-256"));
    assert_int_equal(al_ckpt_find(root, &quiet, found, sizeof found, &err), 0);
    assert_string_equal(found, dir1); /* fell back */
    /* a checkpoint of another preset is refused */
    al_model_config c2;
    assert_int_equal(al_model_preset(&c2, "demo", &err), 0);
    al_trainer t2;
    o.seq = 32;
    assert_int_equal(al_trainer_init(&t2, &c2, &o, &tr_tok, &va_tok, &err), 0);
    assert_int_equal(al_ckpt_load(dir1, &t2, "h", &quiet, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "preset"));
    /* keep = 1 prunes older checkpoints */
    assert_int_equal(al_ckpt_save(root, &t, "h", 1, dir2, sizeof dir2, &err), 0);
    assert_int_equal(access(dir1, F_OK), -1);
    al_trainer_free(&t2);
    al_trainer_free(&t);
    al_tokens_free(&tr_tok);
    al_tokens_free(&va_tok);
}

/* Each format splits into the documents it should, and tokens are the bytes. */
static void test_prep_formats(void **state) {
    (void)state;
    al_err err = {0};
    char in[512], out[512], bin[600];
    const char *inputs[1] = {in};
    al_prep_stats st;
    struct {
        al_text_format fmt;
        const char *text;
        size_t docs, bytes;
    } cases[] = {
        {AL_FMT_FORTUNE, "first\n%\nsecond one\nline 2\n%\n\n%\nthird\n", 3, 5 + 17 + 5},
        {AL_FMT_TEXT, "para one\nstill one\n\n\npara two\n  \npara three", 3, 18 + 8 + 10},
        {AL_FMT_JSONL,
         "{\"text\": \"x\\ny\"}\n\n{\"text\": \"zz\", \"id\": 3}\n{\"text\": \"w\"}\n", 3,
         3 + 2 + 1},
    };
    for (size_t i = 0; i < AL_ARRAY_LEN(cases); i++) {
        path_of(in, "prep-input");
        write_bytes(in, cases[i].text, strlen(cases[i].text));
        path_of(out, "prep-out");
        assert_int_equal(al_data_prep(inputs, 1, cases[i].fmt, out, 0.5, 2, &st, &err), 0);
        assert_int_equal(st.docs, cases[i].docs);
        /* every document: EOT + its bytes; plus one final EOT per split */
        assert_int_equal(st.train_tokens + st.val_tokens, cases[i].bytes + cases[i].docs + 2);
        al_tokens t;
        snprintf(bin, sizeof bin, "%s/train.bin", out);
        assert_int_equal(al_tokens_load(&t, bin, &err), 0);
        assert_int_equal(t.ndocs, st.train_docs);
        assert_int_equal(t.vocab, AL_BYTE_VOCAB);
        assert_int_equal(t.tok[0], AL_BYTE_EOT);
        assert_int_equal(t.tok[t.n - 1], AL_BYTE_EOT);
        al_tokens_free(&t);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loader_packing),  cmocka_unit_test(test_resume_bit_identical),
        cmocka_unit_test(test_staged_trainer),  cmocka_unit_test(test_training_reduces_loss),
        cmocka_unit_test(test_bad_token_files), cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_bad_checkpoints), cmocka_unit_test(test_prep_formats),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
