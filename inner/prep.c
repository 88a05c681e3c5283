/* prep.c -- text to token files with the byte tokenizer (see al_data.h). */
#include "al_data.h"

#include <dirent.h>
#include <jansson.h>
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

static int docs_add(docs *d, const char *p, size_t len, al_err *err) {
    /* trim surrounding whitespace; skip documents that end up empty */
    while (len > 0 && (p[0] == '\n' || p[0] == '\r' || p[0] == ' ' || p[0] == '\t')) p++, len--;
    while (len > 0 &&
           (p[len - 1] == '\n' || p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
        len--;
    if (len == 0) return 0;
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
            json_t *o = json_loadb(s + i, eol - i, 0, &je);
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
    while ((e = readdir(dir)) != NULL) {
        if (skip_name(e->d_name)) continue;
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", path, e->d_name);
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
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

/* Write the documents chosen by `pick` (1 = this split) as one token file. */
static int write_split(const docs *d, const unsigned char *is_val, int want_val, const char *path,
                       size_t *ndocs_out, size_t *ntok_out, al_err *err) {
    size_t nd = 0, nt = 1;
    for (size_t k = 0; k < d->count; k++)
        if (is_val[k] == want_val) {
            nd++;
            nt += 1 + d->start[k + 1] - d->start[k];
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
        tok[t++] = AL_BYTE_EOT;
        for (size_t i = d->start[k]; i < d->start[k + 1]; i++)
            tok[t++] = (unsigned char)d->bytes[i];
    }
    bnd[j] = t;
    tok[t++] = AL_BYTE_EOT;
    int rc = al_tokens_write(path, tok, t, AL_BYTE_VOCAB, AL_BYTE_EOT, bnd, nd, err);
    free(tok);
    free(bnd);
    *ndocs_out = nd;
    *ntok_out = t;
    return rc;
}

int al_data_prep(const char *const *inputs, int ninputs, al_text_format fmt, const char *outdir,
                 double val_frac, uint64_t seed, al_prep_stats *stats, al_err *err) {
    memset(stats, 0, sizeof *stats);
    if (ninputs < 1) return al_errf(err, AL_EINVAL, "data prep: no inputs given");
    if (!(val_frac > 0.0 && val_frac < 1.0))
        return al_errf(err, AL_EINVAL, "data prep: validation fraction %g not in (0, 1)", val_frac);
    docs d = {0};
    int rc = 0;
    for (int i = 0; i < ninputs && rc == 0; i++)
        rc = prep_input(&d, inputs[i], fmt, &stats->files, err);
    if (rc == 0 && d.count < 2)
        rc = al_errf(err, AL_EFORMAT, "data prep: found %zu documents in the inputs (need >= 2)",
                     d.count);
    if (rc == 0) rc = al_mkdirs(outdir, err);
    unsigned char *is_val = rc == 0 ? calloc(d.count, 1) : NULL;
    size_t *lens = rc == 0 ? malloc(d.count * sizeof(size_t)) : NULL;
    if (rc == 0 && (!is_val || !lens)) rc = al_errf(err, AL_ENOMEM, "data prep: out of memory");
    if (rc == 0 && d.count >= 2) {
        al_rng r;
        al_rng_seed(&r, seed);
        size_t nval = 0;
        for (size_t k = 0; k < d.count; k++) {
            is_val[k] = al_rng_uniform(&r) < val_frac;
            nval += is_val[k];
            lens[k] = d.start[k + 1] - d.start[k];
        }
        /* both splits non-empty */
        if (nval == 0) is_val[d.count - 1] = 1;
        if (nval == d.count) is_val[0] = 0;
        qsort(lens, d.count, sizeof(size_t), cmp_size);
        stats->docs = d.count;
        stats->min_len = lens[0];
        stats->median_len = lens[d.count / 2];
        stats->max_len = lens[d.count - 1];
        char path[4096];
        snprintf(path, sizeof path, "%s/train.bin", outdir);
        rc = write_split(&d, is_val, 0, path, &stats->train_docs, &stats->train_tokens, err);
        if (rc == 0) {
            snprintf(path, sizeof path, "%s/val.bin", outdir);
            rc = write_split(&d, is_val, 1, path, &stats->val_docs, &stats->val_tokens, err);
        }
    }
    free(is_val);
    free(lens);
    free(d.bytes);
    free(d.start);
    return rc;
}
