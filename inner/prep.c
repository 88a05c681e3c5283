/* prep.c -- text to token files with the byte tokenizer or GPT-2's BPE (see
 * al_data.h). */
#include "al_data.h"

#include <dirent.h>
#include <jansson.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int al_text_format_parse(const char *s, al_text_format *out, al_err *err) {
    if (!strcmp(s, "fortune"))
        *out = AL_FMT_FORTUNE;
    else if (!strcmp(s, "text"))
        *out = AL_FMT_TEXT;
    else if (!strcmp(s, "jsonl"))
        *out = AL_FMT_JSONL;
    else
        return al_errf(err, AL_EINVAL, "unknown input format '%s' (fortune|text|jsonl)", s);
    return 0;
}

/* A growing list of documents: all bytes in one buffer, plus boundaries. */
typedef struct docs {
    char *bytes;
    size_t n, cap;
    size_t *start; /* [count + 1] */
    size_t count, scap;
} docs;

/* Append a document as it is (len > 0). */
static int docs_append(docs *d, const char *p, size_t len, al_err *err) {
    if (d->n + len > d->cap) {
        size_t nc = (d->cap ? d->cap * 2 : 1 << 20);
        while (nc < d->n + len) nc *= 2;
        char *nb = realloc(d->bytes, nc);
        if (!nb) return al_errf(err, AL_ENOMEM, "data prep: out of memory");
        d->bytes = nb;
        d->cap = nc;
    }
    if (d->count + 2 > d->scap) {
        size_t nc = d->scap ? d->scap * 2 : 1024;
        size_t *ns = realloc(d->start, nc * sizeof(size_t));
        if (!ns) return al_errf(err, AL_ENOMEM, "data prep: out of memory");
        d->start = ns;
        d->scap = nc;
    }
    if (d->count == 0) d->start[0] = 0;
    memcpy(d->bytes + d->n, p, len);
    d->n += len;
    d->start[++d->count] = d->n;
    return 0;
}

static int docs_add(docs *d, const char *p, size_t len, al_err *err) {
    /* trim surrounding whitespace; skip documents that end up empty */
    while (len > 0 && (p[0] == '\n' || p[0] == '\r' || p[0] == ' ' || p[0] == '\t')) p++, len--;
    while (len > 0 &&
           (p[len - 1] == '\n' || p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
        len--;
    return len ? docs_append(d, p, len, err) : 0;
}

static void docs_free(docs *d) {
    free(d->bytes);
    free(d->start);
    memset(d, 0, sizeof *d);
}

/* fortune: documents separated by lines that are exactly "%" */
static int split_fortune(docs *d, const char *s, size_t n, al_err *err) {
    size_t doc0 = 0, i = 0;
    while (i < n) {
        size_t eol = i;
        while (eol < n && s[eol] != '\n') eol++;
        size_t ll = eol - i;
        if (ll > 0 && s[i + ll - 1] == '\r') ll--;
        if (ll == 1 && s[i] == '%') {
            int rc = docs_add(d, s + doc0, i - doc0, err);
            if (rc) return rc;
            doc0 = eol + 1 < n ? eol + 1 : n;
        }
        i = eol + 1;
    }
    return doc0 < n ? docs_add(d, s + doc0, n - doc0, err) : 0;
}

/* text: documents separated by one or more blank lines */
static int split_text(docs *d, const char *s, size_t n, al_err *err) {
    size_t doc0 = 0, i = 0;
    while (i < n) {
        size_t eol = i;
        while (eol < n && s[eol] != '\n') eol++;
        int blank = 1;
        for (size_t k = i; k < eol; k++)
            if (s[k] != ' ' && s[k] != '\t' && s[k] != '\r') blank = 0;
        if (blank) {
            int rc = docs_add(d, s + doc0, i - doc0, err);
            if (rc) return rc;
            doc0 = eol + 1 < n ? eol + 1 : n;
        }
        i = eol + 1;
    }
    return doc0 < n ? docs_add(d, s + doc0, n - doc0, err) : 0;
}

/* jsonl: one JSON object per line with a string field "text" */
static int split_jsonl(docs *d, const char *path, const char *s, size_t n, al_err *err) {
    size_t i = 0, line = 0;
    while (i < n) {
        size_t eol = i;
        while (eol < n && s[eol] != '\n') eol++;
        line++;
        size_t k = i;
        while (k < eol && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k < eol) {
            json_error_t je;
            json_t *o = json_loadb(s + i, eol - i, JSON_ALLOW_NUL, &je);
            if (!o) return al_errf(err, AL_EFORMAT, "%s:%zu: bad JSON: %s", path, line, je.text);
            json_t *t = json_object_get(o, "text");
            if (!json_is_string(t)) {
                json_decref(o);
                return al_errf(err, AL_EFORMAT, "%s:%zu: no string field \"text\"", path, line);
            }
            int rc = docs_add(d, json_string_value(t), json_string_length(t), err);
            json_decref(o);
            if (rc) return rc;
        }
        i = eol + 1;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}
static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

static int prep_file(docs *d, const char *path, al_text_format fmt, al_err *err) {
    char *s;
    size_t n;
    int rc = al_read_file(path, &s, &n, err);
    if (rc) return rc;
    if (fmt == AL_FMT_FORTUNE)
        rc = split_fortune(d, s, n, err);
    else if (fmt == AL_FMT_TEXT)
        rc = split_text(d, s, n, err);
    else
        rc = split_jsonl(d, path, s, n, err);
    free(s);
    return rc;
}

static int skip_name(const char *name) {
    size_t n = strlen(name);
    return name[0] == '.' || (n > 4 && !strcmp(name + n - 4, ".dat")) ||
           (n > 3 && !strcmp(name + n - 3, ".u8"));
}

/* Is `full`, an entry of folder `dir` (whose resolved path is `real_dir`), a
 * symbolic link to a file inside that folder or below it? Such a link is an
 * alias: Debian's fortunes-it links each of its files from fortunes/ into
 * fortunes/it/, and the `.u8` names link to their own folder's files, so
 * reading them would take another package's text, or the same text twice,
 * into a corpus named for the folder. A link that leaves the folder is read. */
static int alias_link(const char *full, const char *real_dir) {
    struct stat ls;
    if (!real_dir || lstat(full, &ls) != 0 || !S_ISLNK(ls.st_mode)) return 0;
    char *target = realpath(full, NULL);
    if (!target) return 0;
    size_t n = strlen(real_dir);
    int inside = strncmp(target, real_dir, n) == 0 && target[n] == '/';
    free(target);
    return inside;
}

static int prep_input(docs *d, const char *path, al_text_format fmt, size_t *files, al_err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return al_errf(err, AL_ENOTFOUND, "input %s: does not exist", path);
    if (!S_ISDIR(st.st_mode)) {
        (*files)++;
        return prep_file(d, path, fmt, err);
    }
    DIR *dir = opendir(path);
    if (!dir) return al_errf(err, AL_EIO, "input %s: cannot open directory", path);
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    char *real_dir = realpath(path, NULL);
    while ((e = readdir(dir)) != NULL) {
        if (skip_name(e->d_name)) continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (alias_link(full, real_dir)) continue;
        if (nn == cap) {
            cap = cap ? 2 * cap : 64;
            char **nb = realloc(names, cap * sizeof *names);
            if (!nb) {
                rc = al_errf(err, AL_ENOMEM, "data prep: out of memory");
                break;
            }
            names = nb;
        }
        names[nn++] = strdup(full);
    }
    closedir(dir);
    free(real_dir);
    if (rc == 0 && nn > 1) qsort(names, nn, sizeof *names, cmp_str);
    for (size_t i = 0; i < nn; i++) {
        if (rc == 0) {
            (*files)++;
            rc = prep_file(d, names[i], fmt, err);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

/* Every document's tokens back to back, without EOT: document k is
 * tok[ts[k] .. ts[k + 1]). */
typedef struct toks {
    uint16_t *tok;
    size_t n, cap;
    size_t *ts; /* [count + 1] */
} toks;

static int toks_append(toks *t, const uint32_t *v, size_t n, al_err *err) {
    if (t->n + n > t->cap) {
        size_t nc = t->cap ? t->cap : 1 << 20;
        while (nc < t->n + n) nc *= 2;
        uint16_t *nt = realloc(t->tok, nc * sizeof *nt);
        if (!nt) return al_errf(err, AL_ENOMEM, "data prep: out of memory (%zu tokens)", nc);
        t->tok = nt;
        t->cap = nc;
    }
    for (size_t i = 0; i < n; i++) t->tok[t->n + i] = (uint16_t)v[i];
    t->n += n;
    return 0;
}

/* The byte tokenizer: a byte is its token. */
static int encode_bytes(const docs *d, toks *t, al_err *err) {
    t->tok = malloc((d->n + 1) * sizeof *t->tok);
    t->ts = malloc((d->count + 1) * sizeof *t->ts);
    if (!t->tok || !t->ts) return al_errf(err, AL_ENOMEM, "data prep: out of memory");
    for (size_t i = 0; i < d->n; i++) t->tok[i] = (unsigned char)d->bytes[i];
    memcpy(t->ts, d->start, (d->count + 1) * sizeof *t->ts);
    t->n = d->n;
    return 0;
}

/* A piece of a document that one thread encodes: bytes [a, b). */
typedef struct unit {
    size_t doc, a, b;
} unit;

#define AL_PREP_UNIT  (1u << 20)  /* a long document is cut into pieces of ~1 MB */
#define AL_PREP_BLOCK (32u << 20) /* encoded per round, then appended in order */

/* GPT-2's BPE, by threads: documents (and ~1 MB pieces of long ones) in
 * rounds of ~32 MB; each round's pieces are encoded in parallel, then
 * appended in document order, so the ids do not depend on the threads. */
static int encode_bpe(const docs *d, const al_prep_opts *o, toks *t, al_prep_stats *st,
                      al_err *err) {
    if (o->bpe->n > 65536)
        return al_errf(err, AL_EUNSUPPORTED,
                       "data prep: a vocabulary of %d tokens does not fit token files (uint16)",
                       o->bpe->n);
    size_t nu = 0, ucap = d->count + d->n / AL_PREP_UNIT + 1;
    unit *u = malloc(ucap * sizeof *u);
    t->ts = malloc((d->count + 1) * sizeof *t->ts);
    if (!u || !t->ts) {
        free(u);
        return al_errf(err, AL_ENOMEM, "data prep: out of memory");
    }
    for (size_t k = 0; k < d->count; k++) {
        size_t a = d->start[k], end = d->start[k + 1];
        while (a < end) {
            size_t b =
                end - a > AL_PREP_UNIT ? a + al_bpe_cut(d->bytes + a, end - a, AL_PREP_UNIT) : end;
            if (nu == ucap) {
                unit *nu2 = realloc(u, 2 * ucap * sizeof *u);
                if (!nu2) {
                    free(u);
                    return al_errf(err, AL_ENOMEM, "data prep: out of memory");
                }
                u = nu2;
                ucap *= 2;
            }
            u[nu++] = (unit){k, a, b};
            a = b;
        }
    }
    int nt = o->threads > 0 ? o->threads : omp_get_max_threads();
    st->threads = nt;
    al_bpe_ids *out = NULL;
    size_t ocap = 0, done = 0;
    int rc = 0;
    double t0 = al_now(), last = t0;
    t->ts[0] = 0;
    for (size_t u0 = 0; rc == 0 && u0 < nu;) {
        size_t u1 = u0, bytes = 0;
        while (u1 < nu && (u1 == u0 || bytes + (u[u1].b - u[u1].a) <= AL_PREP_BLOCK) &&
               u1 - u0 < 65536)
            bytes += u[u1].b - u[u1].a, u1++;
        if (u1 - u0 > ocap) {
            al_bpe_ids *no = realloc(out, (u1 - u0) * sizeof *out);
            if (!no) {
                rc = al_errf(err, AL_ENOMEM, "data prep: out of memory");
                break;
            }
            memset(no + ocap, 0, (u1 - u0 - ocap) * sizeof *no);
            out = no;
            ocap = u1 - u0;
        }
        int fail = 0;
#pragma omp parallel num_threads(nt)
        {
            al_err lerr = {0};
            al_bpe_enc e;
            int my = al_bpe_enc_init(&e, o->bpe, &lerr);
#pragma omp for schedule(dynamic, 1)
            for (long i = (long)u0; i < (long)u1; i++) {
                if (my) continue;
                al_bpe_ids *ids = &out[i - (long)u0];
                ids->n = 0;
                my = al_bpe_encode(&e, d->bytes + u[i].a, u[i].b - u[i].a, ids, &lerr);
                size_t now_done;
#pragma omp atomic capture
                now_done = done += u[i].b - u[i].a;
                if (o->progress && omp_get_thread_num() == 0 && al_now() - last >= 1.0) {
                    last = al_now();
                    o->progress(o->progress_ctx, now_done, d->n, last - t0);
                }
            }
            if (my) {
#pragma omp critical
                if (!fail) {
                    fail = my;
                    *err = lerr;
                }
            }
            al_bpe_enc_free(&e);
        }
        if ((rc = fail)) break;
        for (size_t i = u0; rc == 0 && i < u1; i++) {
            rc = toks_append(t, out[i - u0].v, out[i - u0].n, err);
            if (u[i].b == d->start[u[i].doc + 1]) t->ts[u[i].doc + 1] = t->n;
        }
        u0 = u1;
    }
    st->encode_s = al_now() - t0;
    for (size_t i = 0; i < ocap; i++) al_bpe_ids_free(&out[i]);
    free(out);
    free(u);
    return rc;
}

/* Write the documents of one split (is_val[k] == want_val) as one token file:
 * EOT d0 EOT d1 ... EOT. */
static int write_split(const docs *d, const toks *tk, const unsigned char *is_val, int want_val,
                       int vocab, int eot, const char *path, size_t *ndocs_out, size_t *ntok_out,
                       al_err *err) {
    size_t nd = 0, nt = 1;
    for (size_t k = 0; k < d->count; k++)
        if (is_val[k] == want_val) {
            nd++;
            nt += 1 + tk->ts[k + 1] - tk->ts[k];
        }
    uint16_t *tok = malloc(nt * sizeof(uint16_t));
    uint64_t *bnd = malloc((nd + 1) * sizeof(uint64_t));
    if (!tok || !bnd) {
        free(tok);
        free(bnd);
        return al_errf(err, AL_ENOMEM, "data prep: out of memory");
    }
    size_t t = 0, j = 0;
    for (size_t k = 0; k < d->count; k++) {
        if (is_val[k] != want_val) continue;
        bnd[j++] = t;
        tok[t++] = (uint16_t)eot;
        size_t len = tk->ts[k + 1] - tk->ts[k];
        memcpy(tok + t, tk->tok + tk->ts[k], len * sizeof *tok);
        t += len;
    }
    bnd[j] = t;
    tok[t++] = (uint16_t)eot;
    int rc = al_tokens_write(path, tok, t, vocab, eot, bnd, nd, err);
    free(tok);
    free(bnd);
    *ndocs_out = nd;
    *ntok_out = t;
    return rc;
}

int al_data_prep(const char *const *inputs, int ninputs, al_text_format fmt, const char *outdir,
                 double val_frac, uint64_t seed, al_prep_stats *stats, al_err *err) {
    al_prep_opts o = {.val_frac = val_frac, .seed = seed};
    return al_data_prep_ex(inputs, ninputs, fmt, outdir, &o, stats, err);
}

/* Grouped prep (al_prep_opts.group_names): from the documents d (group k is
 * documents [gfirst[k], gfirst[k + 1])) and their draw is_val, the documents
 * as written: *out holds each group's training documents, group after group,
 * then the validation pieces interleaved (al_data.h says how they are
 * chosen); (*out_val)[j] says whether out's document j is one of them, and
 * g the groups' training documents. */
static int balance_groups(const docs *d, const size_t *gfirst, int ng, unsigned char *is_val,
                          docs *out, unsigned char **out_val, al_groups *g, al_prep_stats *st,
                          al_err *err) {
    size_t budget = SIZE_MAX;
    for (int k = 0; k < ng; k++) {
        size_t a = gfirst[k], b = gfirst[k + 1], nv = 0, vb = 0;
        if (b - a < 2)
            return al_errf(err, AL_EFORMAT,
                           "data prep: group '%s' has %zu document(s) (need >= 2: one for "
                           "training, one for validation)",
                           g->name[k], b - a);
        for (size_t j = a; j < b; j++) nv += is_val[j];
        if (nv == 0) is_val[b - 1] = 1; /* both splits non-empty in every group */
        if (nv == b - a) is_val[a] = 0;
        for (size_t j = a; j < b; j++)
            if (is_val[j]) vb += d->start[j + 1] - d->start[j];
        if (vb < budget) budget = vb;
    }
    /* each group's validation pieces, at [gfirst[k], gfirst[k] + npiece[k]) */
    size_t *off = malloc(d->count * sizeof *off), *len = malloc(d->count * sizeof *len);
    size_t npiece[AL_GROUPS_MAX] = {0};
    int rc = off && len ? 0 : al_errf(err, AL_ENOMEM, "data prep: out of memory");
    for (int k = 0; rc == 0 && k < ng; k++) {
        al_prep_group_stats *gs = &st->group[k];
        size_t cum = 0;
        g->first[k] = out->count;
        for (size_t j = gfirst[k]; rc == 0 && j < gfirst[k + 1]; j++) {
            size_t a = d->start[j], n = d->start[j + 1] - a;
            size_t c = 0;
            if (is_val[j] && cum < budget) {
                c = n <= budget - cum ? n : budget - cum;
                /* cut at a character boundary: never before a continuation byte */
                while (c < n && c > 0 && ((unsigned char)d->bytes[a + c] & 0xC0) == 0x80) c--;
                if (c == 0) cum = budget; /* not one character fits: the group's share is done */
            }
            if (c > 0) {
                gs->val_cut += c < n;
                off[gfirst[k] + npiece[k]] = a;
                len[gfirst[k] + npiece[k]++] = c;
                cum += c < n ? budget - cum : c; /* a cut piece ends the group's share */
                gs->val_docs++;
                gs->val_bytes += c;
            } else { /* training, or validation beyond the budget: back to training */
                rc = docs_append(out, d->bytes + a, n, err);
                gs->train_docs++;
                gs->train_bytes += n;
            }
        }
        if (rc == 0 && out->count == g->first[k])
            rc = al_errf(err, AL_EFORMAT, "data prep: group '%s' has no training documents",
                         g->name[k]);
    }
    g->n = ng;
    g->first[ng] = out->count;
    size_t ntrain = out->count;
    for (size_t j = 0, more = 1; rc == 0 && more; j++) {
        more = 0;
        for (int k = 0; rc == 0 && k < ng; k++)
            if (j < npiece[k]) {
                rc = docs_append(out, d->bytes + off[gfirst[k] + j], len[gfirst[k] + j], err);
                more = 1;
            }
    }
    if (rc == 0 && !(*out_val = calloc(out->count + 1, 1)))
        rc = al_errf(err, AL_ENOMEM, "data prep: out of memory");
    for (size_t j = ntrain; rc == 0 && j < out->count; j++) (*out_val)[j] = 1;
    st->ngroups = ng;
    free(off);
    free(len);
    return rc;
}

int al_data_prep_ex(const char *const *inputs, int ninputs, al_text_format fmt, const char *outdir,
                    const al_prep_opts *o, al_prep_stats *stats, al_err *err) {
    memset(stats, 0, sizeof *stats);
    double val_frac = o->val_frac;
    if (ninputs < 1) return al_errf(err, AL_EINVAL, "data prep: no inputs given");
    if (!(val_frac > 0.0 && val_frac < 1.0))
        return al_errf(err, AL_EINVAL, "data prep: validation fraction %g not in (0, 1)", val_frac);
    if (o->bpe && o->bpe->eot < 0)
        return al_errf(err, AL_EINVAL, "data prep: the tokenizer (%s) has no %s token",
                       o->bpe->source, AL_BPE_EOT_TEXT);
    int ng = o->group_names ? ninputs : 0;
    al_groups g = {0};
    if (ng > AL_GROUPS_MAX)
        return al_errf(err, AL_EINVAL, "data prep --groups: %d inputs, at most %d groups", ng,
                       AL_GROUPS_MAX);
    for (int k = 0; k < ng; k++) {
        if (!al_group_name_ok(o->group_names[k]))
            return al_errf(err, AL_EINVAL,
                           "data prep --groups: input %s: group name '%s' must be 1 to %d "
                           "characters of A-Z a-z 0-9 . _ -",
                           inputs[k], o->group_names[k], AL_GROUP_NAME_MAX - 1);
        for (int j = 0; j < k; j++)
            if (!strcmp(o->group_names[j], o->group_names[k]))
                return al_errf(err, AL_EINVAL, "data prep --groups: group name '%s' given twice",
                               o->group_names[k]);
        snprintf(g.name[k], AL_GROUP_NAME_MAX, "%s", o->group_names[k]);
    }
    int vocab = o->bpe ? o->bpe->n : AL_BYTE_VOCAB, eot = o->bpe ? o->bpe->eot : AL_BYTE_EOT;
    docs d = {0}, grouped = {0};
    toks tk = {0};
    size_t gfirst[AL_GROUPS_MAX + 1] = {0};
    int rc = 0;
    for (int i = 0; i < ninputs && rc == 0; i++) {
        if (i < ng) gfirst[i] = d.count;
        rc = prep_input(&d, inputs[i], fmt, &stats->files, err);
    }
    gfirst[ng] = d.count;
    if (rc == 0 && d.count < 2)
        rc = al_errf(err, AL_EFORMAT, "data prep: found %zu documents in the inputs (need >= 2)",
                     d.count);
    if (rc == 0) rc = al_mkdirs(outdir, err);
    unsigned char *is_val = rc == 0 ? calloc(d.count + 1, 1) : NULL;
    size_t *lens = rc == 0 ? malloc(d.count * sizeof(size_t)) : NULL;
    if (rc == 0 && (!is_val || !lens)) rc = al_errf(err, AL_ENOMEM, "data prep: out of memory");
    if (rc == 0) {
        al_rng r;
        al_rng_seed(&r, o->seed);
        size_t nval = 0;
        for (size_t k = 0; k < d.count; k++) {
            is_val[k] = al_rng_uniform(&r) < val_frac;
            nval += is_val[k];
            lens[k] = d.start[k + 1] - d.start[k];
        }
        /* both splits non-empty */
        if (nval == 0) is_val[d.count > 0 ? d.count - 1 : 0] = 1;
        if (nval == d.count) is_val[0] = 0;
        qsort(lens, d.count, sizeof(size_t), cmp_size);
        stats->docs = d.count;
        stats->min_len = lens[0];
        stats->median_len = lens[d.count / 2];
        stats->max_len = lens[d.count - 1];
        stats->bytes = d.n;
    }
    if (rc == 0 && ng) {
        unsigned char *flags = NULL;
        rc = balance_groups(&d, gfirst, ng, is_val, &grouped, &flags, &g, stats, err);
        free(is_val);
        is_val = flags;
        docs t = d;
        d = grouped;
        grouped = t; /* freed below */
    }
    if (rc == 0) rc = o->bpe ? encode_bpe(&d, o, &tk, stats, err) : encode_bytes(&d, &tk, err);
    if (rc == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/train.bin", outdir);
        rc = write_split(&d, &tk, is_val, 0, vocab, eot, path, &stats->train_docs,
                         &stats->train_tokens, err);
        if (rc == 0 && ng) rc = al_groups_write(&g, path, err);
        if (rc == 0) {
            snprintf(path, sizeof path, "%s/val.bin", outdir);
            rc = write_split(&d, &tk, is_val, 1, vocab, eot, path, &stats->val_docs,
                             &stats->val_tokens, err);
        }
    }
    free(is_val);
    free(lens);
    docs_free(&d);
    docs_free(&grouped);
    free(tk.tok);
    free(tk.ts);
    return rc;
}
