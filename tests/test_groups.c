/* test_groups.c -- `data prep --groups` (al_prep_opts.group_names) and the
 * groups file (al_groups_*): the `languages` scenario's data (issue 33).
 *
 * Four fixture "languages", each a folder with one fortune file whose
 * documents carry a marker (a first byte of its own: "D: ...") and multi-byte UTF-8 (umlauts, ß, ñ,
 * ¿¡, à è): every training document of group g is byte for byte one of g's
 * documents (UTF-8 intact through prep, the token file and the loader), the
 * validation set gives every language the same bytes (the smallest group's,
 * a cut at a character boundary), interleaved; bad inputs and groups files
 * are refused with messages that name what is wrong. */
#include "al_test.h"

#include "al_data.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_tmp[256];
static const char *const LANG[4] = {"en", "de", "es", "it"};
static const int NDOCS[4] = {220, 130, 60, 95};

/* Document i of language l (NUL-terminated, static buffer). */
static const char *doc_text(int l, int i) {
    static char buf[256];
    static const char *const body[4] = {
        "E: The quick brown fox number %d jumps over the lazy dog, again and again.",
        "D: Grüße aus Köln, Nr. %d: Straße, Bäume, Übermut, schön und süß.",
        "S: El niño %d añora la montaña: ¿sí? ¡Olé! Mañana, señor.",
        "I: Perché è così? Città %d, caffè, più già."};
    snprintf(buf, sizeof buf, body[l], i);
    for (int k = 0; k < i % 4; k++) strcat(buf, " +"); /* lengths vary */
    return buf;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/al-test-groups-%d", (int)getpid());
    al_remove_tree(g_tmp, NULL);
    if (mkdir(g_tmp, 0755)) return -1;
    for (int l = 0; l < 4; l++) {
        char dir[512], path[600];
        snprintf(dir, sizeof dir, "%s/%s", g_tmp, LANG[l]);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/fortunes", dir);
        FILE *f = fopen(path, "w");
        if (!f) return -1;
        for (int i = 0; i < NDOCS[l]; i++) fprintf(f, "%s\n%%\n", doc_text(l, i));
        fclose(f);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return al_remove_tree(g_tmp, NULL);
}

/* Is [p, p + n) well-formed UTF-8 (no character cut)? */
static int utf8_ok(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        int k = c < 0x80             ? 0
                : (c & 0xE0) == 0xC0 ? 1
                : (c & 0xF0) == 0xE0 ? 2
                : (c & 0xF8) == 0xF0 ? 3
                                     : -1;
        if (k < 0 || i + (size_t)k >= n) return 0;
        for (int j = 1; j <= k; j++)
            if ((p[i + j] & 0xC0) != 0x80) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

/* Document k of t as bytes (tokens after its EOT, up to the next). */
static size_t doc_bytes(const al_tokens *t, size_t k, unsigned char *out, size_t cap) {
    size_t n = 0;
    for (uint64_t i = t->doc[k] + 1; i < t->doc[k + 1] && n < cap; i++) {
        assert_true(t->tok[i] < 256);
        out[n++] = (unsigned char)t->tok[i];
    }
    return n;
}

/* Which fixture language a document's bytes are, and whether they are
 * (prefix: begin) one of its documents byte for byte. */
static int lang_of(const unsigned char *b, size_t n, bool prefix_ok, bool *exact) {
    *exact = false;
    for (int l = 0; l < 4; l++) {
        if (n < 1 || b[0] != "EDSI"[l]) continue; /* the marker: a unique first byte */
        for (int i = 0; i < NDOCS[l]; i++) {
            const char *d = doc_text(l, i);
            size_t dn = strlen(d);
            if ((dn == n || (prefix_ok && n < dn)) && memcmp(d, b, n) == 0) *exact = true;
        }
        return l;
    }
    return -1;
}

static int prep4(const char *out, double val_frac, al_prep_stats *st, al_err *err) {
    char in[4][512];
    const char *inputs[4];
    for (int l = 0; l < 4; l++) {
        snprintf(in[l], sizeof in[l], "%s/%s", g_tmp, LANG[l]);
        inputs[l] = in[l];
    }
    al_prep_opts o = {.val_frac = val_frac, .seed = 3, .group_names = LANG};
    return al_data_prep_ex(inputs, 4, AL_FMT_FORTUNE, out, &o, st, err);
}

/* Training: the groups file covers train.bin, group g holds g's documents
 * only, each byte for byte as written (umlauts, ñ intact), and the loader's
 * rows are those bytes too. */
static void test_train_split_by_language(void **state) {
    (void)state;
    char out[512], path[600];
    snprintf(out, sizeof out, "%s/lang", g_tmp);
    al_prep_stats st;
    al_err err = {0};
    assert_int_equal(prep4(out, 0.1, &st, &err), 0);
    assert_int_equal(st.ngroups, 4);
    al_tokens t;
    al_groups g;
    snprintf(path, sizeof path, "%s/train.bin", out);
    assert_int_equal(al_tokens_load(&t, path, &err), 0);
    assert_int_equal(al_groups_load(&g, path, &err), 0);
    assert_int_equal(al_groups_check(&g, &t, &err), 0);
    assert_int_equal(g.n, 4);
    size_t total = 0;
    unsigned char b[512];
    for (int l = 0; l < 4; l++) {
        assert_string_equal(g.name[l], LANG[l]);
        assert_int_equal(g.first[l + 1] - g.first[l], st.group[l].train_docs);
        for (size_t k = g.first[l]; k < g.first[l + 1]; k++) {
            size_t n = doc_bytes(&t, k, b, sizeof b);
            bool exact;
            int got = lang_of(b, n, false, &exact);
            if (got != l || !exact)
                fail_msg("train document %zu of group %s: language %d, exact %d: '%.*s'", k,
                         LANG[l], got, exact, (int)n, b);
            total++;
        }
    }
    assert_int_equal(total, t.ndocs);
    /* a known multi-byte document, byte for byte: "Grüße" is 47 72 C3 BC C3 9F 65 */
    bool found = false;
    for (size_t k = g.first[1]; k < g.first[2] && !found; k++) {
        size_t n = doc_bytes(&t, k, b, sizeof b);
        found = n > 9 && memcmp(b + 3, "\x47\x72\xC3\xBC\xC3\x9F\x65", 7) == 0;
    }
    assert_true(found);
    /* the loader (documents packed into rows) hands out the same bytes */
    al_loader ld;
    al_batch bt;
    assert_int_equal(al_loader_init(&ld, &t, AL_PACK_DOCS, 1, 7, &err), 0);
    assert_int_equal(al_batch_init(&bt, 4, 64, &err), 0);
    int enye = 0;
    for (int step = 0; step < 50; step++) {
        al_loader_next(&ld, &bt);
        for (int i = 0; i + 1 < bt.B * bt.T; i++)
            enye += bt.tokens[i] == 0xC3 && bt.tokens[i + 1] == 0xB1; /* ñ */
    }
    assert_true(enye > 0);
    al_batch_free(&bt);
    al_loader_free(&ld);
    al_tokens_free(&t);
}

/* Validation: the same bytes of text from every language (the smallest
 * group's share; the others' cut at a character boundary, so within 3
 * bytes), every piece well-formed UTF-8 and a prefix of one document,
 * interleaved en de es it en ...; validation beyond the share went back to
 * training (so a larger group trains on more than 1 - val_frac). */
static void test_val_balanced(void **state) {
    (void)state;
    char out[512], path[600];
    snprintf(out, sizeof out, "%s/lang", g_tmp);
    al_prep_stats st;
    al_err err = {0};
    assert_int_equal(prep4(out, 0.2, &st, &err), 0);
    al_tokens v;
    snprintf(path, sizeof path, "%s/val.bin", out);
    assert_int_equal(al_tokens_load(&v, path, &err), 0);
    size_t bytes[4] = {0}, lo = SIZE_MAX, hi = 0;
    unsigned char b[512];
    for (size_t k = 0; k < v.ndocs; k++) {
        size_t n = doc_bytes(&v, k, b, sizeof b);
        bool exact;
        int l = lang_of(b, n, true, &exact);
        if (l < 0 || !exact)
            fail_msg("val piece %zu (%zu bytes) is no fixture document's beginning: '%.*s'", k, n,
                     (int)n, b);
        if (!utf8_ok(b, n)) fail_msg("val piece %zu cuts a character: '%.*s'", k, (int)n, b);
        if (k < 4) assert_int_equal(l, (int)k); /* interleaved */
        bytes[l] += n;
    }
    for (int l = 0; l < 4; l++) {
        print_message("  val bytes %s: %zu (prep says %zu)\n", LANG[l], bytes[l],
                      st.group[l].val_bytes);
        assert_int_equal(bytes[l], st.group[l].val_bytes);
        lo = bytes[l] < lo ? bytes[l] : lo;
        hi = bytes[l] > hi ? bytes[l] : hi;
    }
    assert_true(lo > 300);
    assert_true(hi - lo <= 3);
    /* es is the smallest: all of its drawn validation is used, uncut */
    assert_int_equal(st.group[2].val_cut, 0);
    for (int l = 0; l < 4; l++) /* every document is in one split: none is lost */
        assert_int_equal(st.group[l].train_docs + st.group[l].val_docs, NDOCS[l]);
    al_tokens_free(&v);
}

/* A cut that would land inside a character backs off to its start: group a's
 * validation is 6 + 7 = 13 bytes; b's documents are "ü" x 5 (10 bytes), so its
 * share is 10 bytes, then 3 bytes of the next would split a "ü": 2 are kept. */
static void test_cut_at_character(void **state) {
    (void)state;
    char a[512], bdir[512], path[600], out[512];
    snprintf(a, sizeof a, "%s/cut-a", g_tmp);
    snprintf(bdir, sizeof bdir, "%s/cut-b", g_tmp);
    mkdir(a, 0755);
    mkdir(bdir, 0755);
    snprintf(path, sizeof path, "%s/f", a);
    write_file(path, "t\n%\naaaaaa\n%\naaaaaaa\n");
    snprintf(path, sizeof path, "%s/f", bdir);
    write_file(path, "t\n%\nüüüüü\n%\nüüüüü\n");
    snprintf(out, sizeof out, "%s/cut-out", g_tmp);
    const char *in[] = {a, bdir}, *names[] = {"a", "b"};
    al_prep_opts o = {.val_frac = 0.999, .seed = 1, .group_names = names};
    al_prep_stats st;
    al_err err = {0};
    assert_int_equal(al_data_prep_ex(in, 2, AL_FMT_FORTUNE, out, &o, &st, &err), 0);
    assert_int_equal(st.group[0].val_bytes, 13);
    assert_int_equal(st.group[1].val_bytes, 12);
    assert_int_equal(st.group[1].val_cut, 1);
    al_tokens v;
    snprintf(path, sizeof path, "%s/val.bin", out);
    assert_int_equal(al_tokens_load(&v, path, &err), 0);
    unsigned char b[64];
    size_t n = doc_bytes(&v, 3, b, sizeof b); /* a, b, a, b: b's second piece */
    assert_int_equal(n, 2);
    assert_memory_equal(b, "\xC3\xBC", 2);
    al_tokens_free(&v);
}

static void expect_prep_error(const char *const *in, const char *const *names, int n,
                              const char *what) {
    char out[512];
    snprintf(out, sizeof out, "%s/bad-out", g_tmp);
    al_prep_opts o = {.val_frac = 0.1, .seed = 1, .group_names = names};
    al_prep_stats st;
    al_err err = {0};
    assert_true(al_data_prep_ex(in, n, AL_FMT_FORTUNE, out, &o, &st, &err) < 0);
    if (!strstr(err.msg, what)) fail_msg("expected '%s' in: %s", what, err.msg);
    print_message("  refused: %s\n", err.msg);
}

static void test_prep_refuses(void **state) {
    (void)state;
    char one[512], path[600], en[512], de[512];
    snprintf(one, sizeof one, "%s/one", g_tmp);
    mkdir(one, 0755);
    snprintf(path, sizeof path, "%s/f", one);
    write_file(path, "only one document\n");
    snprintf(en, sizeof en, "%s/en", g_tmp);
    snprintf(de, sizeof de, "%s/de", g_tmp);
    expect_prep_error((const char *[]){en, one}, (const char *[]){"en", "one"}, 2,
                      "group 'one' has 1 document(s)");
    expect_prep_error((const char *[]){en, de}, (const char *[]){"en", "d e"}, 2,
                      "group name 'd e' must be");
    expect_prep_error((const char *[]){en, de}, (const char *[]){"en", "en"}, 2,
                      "group name 'en' given twice");
}

/* The groups file: found beside X.bin, and refused when malformed. */
static void expect_groups_error(const char *text, int code, const char *what) {
    char bin[600], path[700];
    snprintf(bin, sizeof bin, "%s/g.bin", g_tmp);
    al_groups_path(path, sizeof path, bin);
    if (text) write_file(path, text);
    al_groups g;
    al_err err = {0};
    assert_int_equal(al_groups_load(&g, bin, &err), code);
    if (!strstr(err.msg, what)) fail_msg("expected '%s' in: %s", what, err.msg);
    print_message("  refused: %s\n", err.msg);
    unlink(path);
}

static void test_groups_file(void **state) {
    (void)state;
    expect_groups_error(NULL, AL_ENOTFOUND, "g.groups: cannot open");
    expect_groups_error("# nothing\n", AL_EFORMAT, "no groups");
    expect_groups_error("en 0 10\nde 11 20\n", AL_EFORMAT, "g.groups:2: group 'de' spans");
    expect_groups_error("en 0 10 extra\n", AL_EFORMAT, "g.groups:1: expected 'NAME FIRST END'");
    expect_groups_error("en 0 10\nen 10 20\n", AL_EFORMAT, "group 'en' named twice");
    expect_groups_error("e/n 0 10\n", AL_EFORMAT, "group name 'e/n'");
    expect_groups_error("en 0 0\n", AL_EFORMAT, "to hold at least one");
    /* a groups file that does not cover the token file's documents */
    char bin[600], path[700];
    snprintf(bin, sizeof bin, "%s/g.bin", g_tmp);
    al_groups_path(path, sizeof path, bin);
    write_file(path, "# ok\nen 0 3\n  de 3 5\n");
    al_groups g;
    al_err err = {0};
    assert_int_equal(al_groups_load(&g, bin, &err), 0);
    assert_int_equal(g.n, 2);
    al_tokens t = {.ndocs = 6, .path = "g.bin"};
    assert_int_equal(al_groups_check(&g, &t, &err), AL_EMISMATCH);
    assert_non_null(strstr(err.msg, "cover documents [0, 5) but"));
    t.ndocs = 5;
    assert_int_equal(al_groups_check(&g, &t, &err), 0);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_split_by_language),
        cmocka_unit_test(test_val_balanced),
        cmocka_unit_test(test_cut_at_character),
        cmocka_unit_test(test_prep_refuses),
        cmocka_unit_test(test_groups_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
