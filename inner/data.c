/* data.c -- token files, document index, and the microbatch loader (see al_data.h). */
#include "al_data.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HEADER_INTS 256
static const char IDX_MAGIC[8] = {'A', 'L', 'I', 'D', 'X', '0', '0', '1'};

static void idx_path(char *out, size_t cap, const char *bin) {
    size_t n = strlen(bin);
    if (n > 4 && !strcmp(bin + n - 4, ".bin"))
        snprintf(out, cap, "%.*s.idx", (int)(n - 4), bin);
    else
        snprintf(out, cap, "%s.idx", bin);
}

void al_tokens_free(al_tokens *t) {
    free(t->tok);
    free(t->doc);
    memset(t, 0, sizeof *t);
}

/* Documents from EOT positions (files written without an index, e.g. llm.c's). */
static int scan_docs(al_tokens *t, al_err *err) {
    size_t k = 0;
    for (size_t i = 0; i < t->n; i++) k += t->tok[i] == t->eot;
    if (k < 2)
        return al_errf(err, AL_EFORMAT, "%s: fewer than 2 end-of-document tokens (%d)", t->path,
                       t->eot);
    t->doc = malloc(k * sizeof(uint64_t));
    if (!t->doc) return al_errf(err, AL_ENOMEM, "%s: out of memory", t->path);
    size_t j = 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->tok[i] == t->eot) t->doc[j++] = i;
    t->ndocs = k - 1;
    return 0;
}

static int load_index(al_tokens *t, const char *ipath, FILE *f, al_err *err) {
    char magic[8];
    uint64_t nd;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, IDX_MAGIC, 8) != 0)
        return al_errf(err, AL_EFORMAT, "%s: not an autoloco index (bad magic)", ipath);
    if (fread(&nd, sizeof nd, 1, f) != 1 || nd == 0 || nd > t->n)
        return al_errf(err, AL_EFORMAT, "%s: bad document count", ipath);
    t->doc = malloc((nd + 1) * sizeof(uint64_t));
    if (!t->doc) return al_errf(err, AL_ENOMEM, "%s: out of memory", ipath);
    if (fread(t->doc, sizeof(uint64_t), nd + 1, f) != nd + 1)
        return al_errf(err, AL_EFORMAT, "%s: truncated (expected %llu boundaries)", ipath,
                       (unsigned long long)(nd + 1));
    t->ndocs = nd;
    for (uint64_t k = 0; k <= nd; k++) {
        if (t->doc[k] >= t->n || (k > 0 && t->doc[k] <= t->doc[k - 1]))
            return al_errf(err, AL_EFORMAT, "%s: boundary %llu out of order or range", ipath,
                           (unsigned long long)k);
        if (t->tok[t->doc[k]] != t->eot)
            return al_errf(err, AL_EFORMAT,
                           "%s: boundary %llu is not an end-of-document token (index does not "
                           "match %s)",
                           ipath, (unsigned long long)k, t->path);
    }
    return 0;
}

int al_tokens_load(al_tokens *t, const char *path, al_err *err) {
    memset(t, 0, sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", path);
    FILE *f = fopen(path, "rb");
    if (!f) return al_errf(err, AL_EIO, "token file %s: cannot open: %s", path, strerror(errno));
    int32_t h[HEADER_INTS];
    int rc = 0;
    if (fread(h, sizeof(int32_t), HEADER_INTS, f) != HEADER_INTS) {
        rc = al_errf(err, AL_EFORMAT, "token file %s: truncated header (need %d bytes)", path,
                     HEADER_INTS * 4);
        goto done;
    }
    if (h[0] != AL_TOKENS_MAGIC) {
        rc = al_errf(err, AL_EFORMAT, "token file %s: wrong magic %d (expected %d)", path, h[0],
                     AL_TOKENS_MAGIC);
        goto done;
    }
    if (h[1] != 1) {
        rc = al_errf(err, AL_EFORMAT, "token file %s: unsupported version %d (expected 1)", path,
                     h[1]);
        goto done;
    }
    if (h[2] < 2) {
        rc = al_errf(err, AL_EFORMAT, "token file %s: bad token count %d", path, h[2]);
        goto done;
    }
    t->n = (size_t)h[2];
    t->vocab = h[3] > 0 ? h[3] : 50257;
    t->eot = h[3] > 0 && h[4] > 0 ? h[4] : t->vocab - 1;
    if (fseek(f, 0, SEEK_END) != 0) {
        rc = al_errf(err, AL_EIO, "token file %s: cannot seek", path);
        goto done;
    }
    long size = ftell(f);
    long want = (long)(HEADER_INTS * 4 + 2 * t->n);
    if (size != want) {
        rc = al_errf(err, AL_EFORMAT,
                     "token file %s: %s: header says %zu tokens (%ld bytes), file has %ld bytes",
                     path, size < want ? "truncated" : "trailing data", t->n, want, size);
        goto done;
    }
    fseek(f, HEADER_INTS * 4, SEEK_SET);
    t->tok = malloc(t->n * sizeof(uint16_t));
    if (!t->tok) {
        rc = al_errf(err, AL_ENOMEM, "token file %s: out of memory", path);
        goto done;
    }
    if (fread(t->tok, sizeof(uint16_t), t->n, f) != t->n) {
        rc = al_errf(err, AL_EIO, "token file %s: read error", path);
        goto done;
    }
    for (size_t i = 0; i < t->n; i++)
        if (t->tok[i] >= t->vocab) {
            rc = al_errf(err, AL_EFORMAT, "token file %s: token %u at %zu outside vocabulary %d",
                         path, t->tok[i], i, t->vocab);
            goto done;
        }
    char ipath[600];
    idx_path(ipath, sizeof ipath, path);
    FILE *fi = fopen(ipath, "rb");
    if (fi) {
        rc = load_index(t, ipath, fi, err);
        fclose(fi);
    } else {
        rc = scan_docs(t, err);
    }
done:
    fclose(f);
    if (rc) al_tokens_free(t);
    return rc;
}

int al_tokens_check_vocab(const al_tokens *t, const al_model_config *cfg, al_err *err) {
    if (t->vocab != cfg->V)
        return al_errf(err, AL_EMISMATCH,
                       "token file %s has vocabulary %d but preset '%s' expects %d", t->path,
                       t->vocab, cfg->preset, cfg->V);
    return 0;
}

int al_tokens_write(const char *path, const uint16_t *tok, size_t n, int vocab, int eot,
                    const uint64_t *doc, size_t ndocs, al_err *err) {
    if (n > INT32_MAX) return al_errf(err, AL_EINVAL, "%s: too many tokens (%zu)", path, n);
    int32_t h[HEADER_INTS] = {AL_TOKENS_MAGIC, 1, (int32_t)n, vocab, eot};
    FILE *f = fopen(path, "wb");
    if (!f) return al_errf(err, AL_EIO, "%s: cannot create: %s", path, strerror(errno));
    int ok = fwrite(h, sizeof h, 1, f) == 1 && fwrite(tok, sizeof(uint16_t), n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok) return al_errf(err, AL_EIO, "%s: write failed", path);
    char ipath[600];
    idx_path(ipath, sizeof ipath, path);
    f = fopen(ipath, "wb");
    if (!f) return al_errf(err, AL_EIO, "%s: cannot create: %s", ipath, strerror(errno));
    uint64_t nd = ndocs;
    ok = fwrite(IDX_MAGIC, 8, 1, f) == 1 && fwrite(&nd, 8, 1, f) == 1 &&
         fwrite(doc, sizeof(uint64_t), ndocs + 1, f) == ndocs + 1;
    ok = (fclose(f) == 0) && ok;
    if (!ok) return al_errf(err, AL_EIO, "%s: write failed", ipath);
    return 0;
}

/* ---- loader ------------------------------------------------------------------------ */

int al_packing_parse(const char *s, al_packing *out, al_err *err) {
    if (!strcmp(s, "docs"))
        *out = AL_PACK_DOCS;
    else if (!strcmp(s, "stream"))
        *out = AL_PACK_STREAM;
    else
        return al_errf(err, AL_EINVAL, "unknown packing '%s' (docs|stream)", s);
    return 0;
}

const char *al_packing_name(al_packing p) {
    return p == AL_PACK_STREAM ? "stream" : "docs";
}

/* Fisher-Yates with an RNG seeded by (seed, epoch): the permutation of an epoch
 * can be recomputed from the saved state alone. */
static void make_perm(al_loader *ld) {
    size_t n = ld->data->ndocs;
    for (size_t i = 0; i < n; i++) ld->perm[i] = (uint32_t)i;
    if (!ld->shuffle) return;
    al_rng r;
    al_rng_seed(&r, ld->seed * 0x9e3779b97f4a7c15ULL + ld->st.epoch + 1);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)al_rng_below(&r, i + 1);
        uint32_t tmp = ld->perm[i];
        ld->perm[i] = ld->perm[j];
        ld->perm[j] = tmp;
    }
}

int al_loader_init(al_loader *ld, const al_tokens *data, al_packing packing, int shuffle,
                   uint64_t seed, al_err *err) {
    memset(ld, 0, sizeof *ld);
    ld->data = data;
    ld->packing = packing;
    ld->shuffle = shuffle;
    ld->seed = seed;
    if (data->ndocs > UINT32_MAX)
        return al_errf(err, AL_EUNSUPPORTED, "%s: too many documents", data->path);
    ld->perm = malloc((data->ndocs ? data->ndocs : 1) * sizeof(uint32_t));
    if (!ld->perm) return al_errf(err, AL_ENOMEM, "loader: out of memory");
    make_perm(ld);
    return 0;
}

void al_loader_free(al_loader *ld) {
    free(ld->perm);
    memset(ld, 0, sizeof *ld);
}

int al_loader_seek(al_loader *ld, const al_loader_state *st, al_err *err) {
    if (ld->packing == AL_PACK_DOCS && st->next >= ld->data->ndocs)
        return al_errf(err, AL_EMISMATCH, "loader state (doc %llu) beyond %s (%zu documents)",
                       (unsigned long long)st->next, ld->data->path, ld->data->ndocs);
    if (ld->packing == AL_PACK_STREAM && st->next >= ld->data->n)
        return al_errf(err, AL_EMISMATCH, "loader state (token %llu) beyond %s (%zu tokens)",
                       (unsigned long long)st->next, ld->data->path, ld->data->n);
    al_loader_state old = ld->st;
    ld->st = *st;
    make_perm(ld);
    if (ld->packing == AL_PACK_DOCS && st->offset >= al_doc_len(ld->data, ld->perm[st->next])) {
        ld->st = old;
        make_perm(ld);
        return al_errf(err, AL_EMISMATCH, "loader state offset %llu beyond its document in %s",
                       (unsigned long long)st->offset, ld->data->path);
    }
    return 0;
}

static void next_doc(al_loader *ld) {
    ld->st.offset = 0;
    if (++ld->st.next >= ld->data->ndocs) {
        ld->st.next = 0;
        ld->st.epoch++;
        make_perm(ld);
    }
}

void al_loader_next(al_loader *ld, al_batch *b) {
    const al_tokens *d = ld->data;
    int T = b->T;
    b->ntargets = 0;
    for (int r = 0; r < b->B; r++) {
        int *tok = b->tokens + (size_t)r * T, *tgt = b->targets + (size_t)r * T;
        int *pos = b->pos + (size_t)r * T, *ds = b->docstart + (size_t)r * T;
        if (ld->packing == AL_PACK_STREAM) {
            if (ld->st.next + (uint64_t)T + 1 > d->n) {
                ld->st.next = 0;
                ld->st.epoch++;
            }
            const uint16_t *src = d->tok + ld->st.next;
            for (int t = 0; t < T; t++) {
                tok[t] = src[t];
                tgt[t] = src[t + 1];
                pos[t] = t;
                ds[t] = 0;
            }
            ld->st.next += (uint64_t)T;
            b->ntargets += T;
            continue;
        }
        int t = 0;
        while (t < T) {
            uint32_t k = ld->perm[ld->st.next];
            size_t len = al_doc_len(d, k), left = len - ld->st.offset;
            int take = (int)(left < (size_t)(T - t) ? left : (size_t)(T - t));
            const uint16_t *src = d->tok + d->doc[k] + ld->st.offset;
            for (int i = 0; i < take; i++) {
                tok[t + i] = src[i];
                tgt[t + i] = src[i + 1];
                pos[t + i] = i;
                ds[t + i] = t;
            }
            t += take;
            ld->st.offset += (uint64_t)take;
            if (ld->st.offset == len) next_doc(ld);
        }
        b->ntargets += T;
    }
}
