/* model.c -- GPT-2 layout, initialisation, forward and backward (see al_model.h). */
#include "al_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- presets --------------------------------------------------------------- */

int al_model_preset(al_model_config *cfg, const char *name, al_err *err) {
    memset(cfg, 0, sizeof *cfg);
#define AL_PRESET_MATCH(pn, pl, pc, pnh, pt, pv)                                                   \
    if (!strcmp(name, pn)) {                                                                       \
        snprintf(cfg->preset, sizeof cfg->preset, "%s", pn);                                       \
        cfg->L = pl;                                                                               \
        cfg->C = pc;                                                                               \
        cfg->NH = pnh;                                                                             \
        cfg->T = pt;                                                                               \
        cfg->V = pv;                                                                               \
        cfg->Vp = (pv + 63) / 64 * 64;                                                             \
        return 0;                                                                                  \
    }
    AL_PRESET_TABLE(AL_PRESET_MATCH)
#undef AL_PRESET_MATCH
    return al_errf(err, AL_ENOTFOUND, "unknown model preset '%s' (known: %s)", name,
                   al_model_preset_names());
}

const char *al_model_preset_names(void) {
#define AL_PRESET_NAME(pn, pl, pc, pnh, pt, pv) pn ", "
    static const char names[] = AL_PRESET_TABLE(AL_PRESET_NAME);
#undef AL_PRESET_NAME
    static char trimmed[sizeof names];
    /* drop the trailing ", " (a constant string, so this is idempotent) */
    memcpy(trimmed, names, sizeof names);
    trimmed[sizeof names - 3] = '\0';
    return trimmed;
}

/* ---- layout ---------------------------------------------------------------- */

enum { KIND_EMB, KIND_LAYER, KIND_FINAL };
enum { KIND_OF_EMB = KIND_EMB, KIND_OF_LAYER = KIND_LAYER, KIND_OF_FINAL = KIND_FINAL };

typedef struct tdesc {
    const char *name;
    int kind;
    int rows, cols, decay, init;
} tdesc;

static int table(const al_model_config *c, tdesc *out) {
    int n = 0;
#define AL_TDESC(name, unit, r, cc, d, in)                                                         \
    out[n++] = (tdesc){#name, KIND_OF_##unit, (r), (cc), (d), AL_INIT_##in};
    AL_PARAM_TABLE(AL_TDESC)
#undef AL_TDESC
    return n;
}
#define NDESC 32

int al_layout_init(al_layout *lay, const al_model_config *c, al_err *err) {
    memset(lay, 0, sizeof *lay);
    tdesc d[NDESC];
    int nd = table(c, d);
    int per_kind[3] = {0};
    for (int i = 0; i < nd; i++) per_kind[d[i].kind]++;
    lay->nunits = c->L + 2;
    lay->ntensors = per_kind[KIND_EMB] + c->L * per_kind[KIND_LAYER] + per_kind[KIND_FINAL];
    lay->unit_off = calloc((size_t)lay->nunits + 1, sizeof(size_t));
    lay->tensors = calloc((size_t)lay->ntensors, sizeof(al_tensor_info));
    if (!lay->unit_off || !lay->tensors) {
        al_layout_free(lay);
        return al_errf(err, AL_ENOMEM, "model layout: out of memory");
    }
    size_t off = 0;
    int t = 0;
    for (int u = 0; u < lay->nunits; u++) {
        int kind = u == 0 ? KIND_EMB : (u == lay->nunits - 1 ? KIND_FINAL : KIND_LAYER);
        lay->unit_off[u] = off;
        for (int i = 0; i < nd; i++) {
            if (d[i].kind != kind) continue;
            al_tensor_info *ti = &lay->tensors[t++];
            if (kind == KIND_LAYER)
                snprintf(ti->name, sizeof ti->name, "h.%d.%s", u - 1, d[i].name);
            else
                snprintf(ti->name, sizeof ti->name, "%s", d[i].name);
            ti->offset = off;
            ti->rows = d[i].rows;
            ti->cols = d[i].cols;
            ti->numel = (size_t)d[i].rows * (size_t)d[i].cols;
            ti->decay = d[i].decay;
            ti->init = d[i].init;
            ti->unit = u;
            off += ti->numel;
        }
    }
    lay->unit_off[lay->nunits] = off;
    lay->nparams = off;
    return 0;
}

void al_layout_free(al_layout *lay) {
    free(lay->unit_off);
    free(lay->tensors);
    memset(lay, 0, sizeof *lay);
}

/* Pointer tables: walk the table in order, keeping only the unit's tensors. */
#define AL_PTR_EMB(name, unit, r, cc, d, in)                                                       \
    AL_IF_EMB_##unit(p->name = base + off; off += (size_t)(r) * (size_t)(cc);)
#define AL_PTR_LAYER(name, unit, r, cc, d, in)                                                     \
    AL_IF_LAYER_##unit(p->name = base + off; off += (size_t)(r) * (size_t)(cc);)
#define AL_PTR_FINAL(name, unit, r, cc, d, in)                                                     \
    AL_IF_FINAL_##unit(p->name = base + off; off += (size_t)(r) * (size_t)(cc);)

void al_emb_ptrs_at(al_emb_ptrs *p, const al_model_config *c, float *base) {
    size_t off = 0;
    AL_PARAM_TABLE(AL_PTR_EMB)
}
void al_layer_ptrs_at(al_layer_ptrs *p, const al_model_config *c, float *base) {
    size_t off = 0;
    AL_PARAM_TABLE(AL_PTR_LAYER)
}
void al_final_ptrs_at(al_final_ptrs *p, const al_model_config *c, float *base) {
    size_t off = 0;
    AL_PARAM_TABLE(AL_PTR_FINAL)
}

/* ---- batches ----------------------------------------------------------------- */

int al_batch_init(al_batch *b, int B, int T, al_err *err) {
    memset(b, 0, sizeof *b);
    size_t n = (size_t)B * T;
    b->B = B;
    b->T = T;
    b->tokens = calloc(n, sizeof(int));
    b->targets = calloc(n, sizeof(int));
    b->pos = calloc(n, sizeof(int));
    b->docstart = calloc(n, sizeof(int));
    if (!b->tokens || !b->targets || !b->pos || !b->docstart) {
        al_batch_free(b);
        return al_errf(err, AL_ENOMEM, "batch %dx%d: out of memory", B, T);
    }
    return 0;
}

void al_batch_free(al_batch *b) {
    free(b->tokens);
    free(b->targets);
    free(b->pos);
    free(b->docstart);
    memset(b, 0, sizeof *b);
}

/* ---- model ------------------------------------------------------------------- */

static int model_init(al_model *m, const al_backend *be, const al_model_config *cfg, int B, int T,
                      int with_params, al_err *err) {
    memset(m, 0, sizeof *m);
    if (B < 1 || T < 1 || T > cfg->T)
        return al_errf(err, AL_EINVAL, "microbatch %dx%d does not fit preset '%s' (T <= %d)", B, T,
                       cfg->preset, cfg->T);
    if (cfg->C % cfg->NH != 0)
        return al_errf(err, AL_EINVAL, "C=%d is not a multiple of NH=%d", cfg->C, cfg->NH);
    m->be = be;
    m->cfg = *cfg;
    m->B = B;
    m->T = T;
    int rc = al_layout_init(&m->lay, cfg, err);
    if (rc) return rc;
    int L = cfg->L;
    size_t P = m->lay.nparams, N = (size_t)B * T, C = (size_t)cfg->C, NH = (size_t)cfg->NH;
    /* activations: per block 16NC + 4N + N*NH; encoder, head, 10NC of scratch */
    size_t per_layer = 16 * N * C + 4 * N + N * NH;
    size_t total = N * C + L * per_layer + N * C + 2 * N + N * (size_t)cfg->Vp + N + 10 * N * C;
    m->p_layer = calloc((size_t)L, sizeof(al_layer_ptrs));
    m->g_layer = calloc((size_t)L, sizeof(al_layer_ptrs));
    m->layer = calloc((size_t)L, sizeof(al_layer_acts));
    if (!m->p_layer || !m->g_layer || !m->layer) {
        al_model_free(m);
        return al_errf(err, AL_ENOMEM, "model '%s': out of memory", cfg->preset);
    }
    if (with_params) {
        if ((rc = AL_BE(be, alloc, (void **)&m->params, P * sizeof(float), err)) == 0)
            rc = AL_BE(be, alloc, (void **)&m->grads, P * sizeof(float), err);
    }
    if (rc == 0) rc = AL_BE(be, alloc, (void **)&m->acts_mem, total * sizeof(float), err);
    if (rc == 0 && !be->on_host)
        rc = AL_BE(be, alloc, (void **)&m->dbatch, 4 * N * sizeof(int), err);
    /* attention scratch for the longest row a microbatch of B*T positions can have */
    if (rc == 0) rc = AL_BE(be, reserve, (int)AL_MIN(N, (size_t)cfg->T), cfg->NH, err);
    if (rc) {
        al_model_free(m);
        return al_err_prefix(err, "model '%s' (%zu params, %zu activation floats) on %s",
                             cfg->preset, P, total, be->name);
    }
    if (m->dbatch) {
        m->dtok = m->dbatch;
        m->dtgt = m->dbatch + N;
        m->dpos = m->dbatch + 2 * N;
        m->dds = m->dbatch + 3 * N;
    }
    float *a = m->acts_mem;
#define TAKE(n) (a += (n), a - (n))
    m->encoded = TAKE(N * C);
    for (int l = 0; l < L; l++) {
        al_layer_acts *la = &m->layer[l];
        la->ln1 = TAKE(N * C);
        la->ln1_mean = TAKE(N);
        la->ln1_rstd = TAKE(N);
        la->qkv = TAKE(3 * N * C);
        la->atty = TAKE(N * C);
        la->att_lse = TAKE(N * NH);
        la->res_mid = TAKE(N * C);
        la->ln2 = TAKE(N * C);
        la->ln2_mean = TAKE(N);
        la->ln2_rstd = TAKE(N);
        la->fch = TAKE(4 * N * C);
        la->fch_gelu = TAKE(4 * N * C);
        la->res_out = TAKE(N * C);
    }
    m->lnf = TAKE(N * C);
    m->lnf_mean = TAKE(N);
    m->lnf_rstd = TAKE(N);
    m->logits = TAKE(N * (size_t)cfg->Vp);
    m->losses = TAKE(N);
    m->dres = TAKE(N * C);
    m->dln = TAKE(N * C);
    m->dqkv = TAKE(3 * N * C);
    m->datty = TAKE(N * C);
    m->dfch = TAKE(4 * N * C);
#undef TAKE
    if (!with_params) return 0;
    /* pointer tables into the flat buffers */
    al_emb_ptrs_at(&m->p_emb, cfg, m->params + m->lay.unit_off[0]);
    al_emb_ptrs_at(&m->g_emb, cfg, m->grads + m->lay.unit_off[0]);
    for (int l = 0; l < L; l++) {
        al_layer_ptrs_at(&m->p_layer[l], cfg, m->params + m->lay.unit_off[l + 1]);
        al_layer_ptrs_at(&m->g_layer[l], cfg, m->grads + m->lay.unit_off[l + 1]);
    }
    al_final_ptrs_at(&m->p_final, cfg, m->params + m->lay.unit_off[L + 1]);
    al_final_ptrs_at(&m->g_final, cfg, m->grads + m->lay.unit_off[L + 1]);
    return 0;
}

int al_model_init(al_model *m, const al_model_config *cfg, int B, int T, al_err *err) {
    return model_init(m, al_backend_cpu(), cfg, B, T, 1, err);
}

int al_model_init_acts(al_model *m, const al_model_config *cfg, int B, int T, al_err *err) {
    return model_init(m, al_backend_cpu(), cfg, B, T, 0, err);
}

int al_model_init_on(al_model *m, const al_backend *be, const al_model_config *cfg, int B, int T,
                     al_err *err) {
    return model_init(m, be, cfg, B, T, 1, err);
}

int al_model_init_acts_on(al_model *m, const al_backend *be, const al_model_config *cfg, int B,
                          int T, al_err *err) {
    return model_init(m, be, cfg, B, T, 0, err);
}

void al_model_free(al_model *m) {
    if (m->be) {
        AL_BE(m->be, release, m->params);
        AL_BE(m->be, release, m->grads);
        AL_BE(m->be, release, m->acts_mem);
        AL_BE(m->be, release, m->dbatch);
    }
    free(m->p_layer);
    free(m->g_layer);
    free(m->layer);
    al_layout_free(&m->lay);
    memset(m, 0, sizeof *m);
}

int al_model_sync(al_model *m, al_err *err) {
    return AL_BE(m->be, sync, err);
}

int al_model_to_host(al_model *m, float *host, const float *buf, size_t n, al_err *err) {
    AL_BE(m->be, download, host, buf, n * sizeof(float));
    return al_model_sync(m, err);
}

int al_model_from_host(al_model *m, float *buf, const float *host, size_t n, al_err *err) {
    AL_BE(m->be, upload, buf, host, n * sizeof(float));
    return al_model_sync(m, err);
}

/* GPT-2 init, generated in layout order through a host chunk that is uploaded
 * to the backend as it fills (a plain copy on the CPU). */
void al_model_init_weights(al_model *m, uint64_t seed) {
    enum { CHUNK = 16384 };
    float buf[CHUNK];
    size_t k = 0, at = 0; /* at: layout index of buf[0] */
    al_rng rng;
    al_rng_seed(&rng, seed);
    const al_model_config *c = &m->cfg;
    double resid_std = 0.02 / sqrt(2.0 * c->L);
    /* padded vocabulary rows are never used: keep them at zero */
    size_t pad_lo = m->lay.unit_off[0] + (size_t)c->V * c->C,
           pad_hi = m->lay.unit_off[0] + (size_t)c->Vp * c->C;
    for (int t = 0; t < m->lay.ntensors; t++) {
        const al_tensor_info *ti = &m->lay.tensors[t];
        for (size_t i = 0; i < ti->numel; i++) {
            float x;
            switch (ti->init) {
            case AL_INIT_NORMAL:
                x = (float)(0.02 * al_rng_normal(&rng));
                break;
            case AL_INIT_RESID:
                x = (float)(resid_std * al_rng_normal(&rng));
                break;
            case AL_INIT_ONE:
                x = 1.0f;
                break;
            default:
                x = 0.0f;
                break;
            }
            size_t j = ti->offset + i;
            buf[k++] = j >= pad_lo && j < pad_hi ? 0.0f : x;
            if (k == CHUNK) {
                AL_BE(m->be, upload, m->params + at, buf, k * sizeof(float));
                at += k;
                k = 0;
            }
        }
    }
    if (k) AL_BE(m->be, upload, m->params + at, buf, k * sizeof(float));
}

void al_model_zero_grad(al_model *m) {
    AL_BE(m->be, zero, m->grads, m->lay.nparams * sizeof(float));
}

/* The batch arrays the backend reads: the host batch itself, or the model's
 * device copy (uploaded by al_embed_forward). */
#define TOKENS(m, b)   ((m)->be->on_host ? (b)->tokens : (m)->dtok)
#define TARGETS(m, b)  ((m)->be->on_host ? (b)->targets : (m)->dtgt)
#define POS(m, b)      ((m)->be->on_host ? (b)->pos : (m)->dpos)
#define DOCSTART(m, b) ((m)->be->on_host ? (b)->docstart : (m)->dds)

void al_block_forward(al_model *m, int l, const al_layer_ptrs *p, const float *x_in,
                      const al_batch *b) {
    const al_backend *be = m->be;
    int B = b->B, T = b->T, C = m->cfg.C, N = B * T;
    al_layer_acts *a = &m->layer[l];
    AL_BE(be, layernorm_forward, a->ln1, a->ln1_mean, a->ln1_rstd, x_in, p->ln1w, p->ln1b, N, C);
    AL_BE(be, matmul_forward, a->qkv, a->ln1, p->qkvw, p->qkvb, N, C, 3 * C, 0);
    AL_BE(be, attention_forward, a->atty, a->att_lse, a->qkv, DOCSTART(m, b), B, T, C, m->cfg.NH);
    /* res_mid = x_in + atty @ attprojw^T + attprojb */
    AL_BE(be, copy, a->res_mid, x_in, (size_t)N * C * sizeof(float));
    AL_BE(be, matmul_forward, a->res_mid, a->atty, p->attprojw, p->attprojb, N, C, C, 1);
    AL_BE(be, layernorm_forward, a->ln2, a->ln2_mean, a->ln2_rstd, a->res_mid, p->ln2w, p->ln2b, N,
          C);
    AL_BE(be, matmul_forward, a->fch, a->ln2, p->fcw, p->fcb, N, C, 4 * C, 0);
    AL_BE(be, gelu_forward, a->fch_gelu, a->fch, (size_t)N * 4 * C);
    /* res_out = res_mid + gelu @ fcprojw^T + fcprojb */
    AL_BE(be, copy, a->res_out, a->res_mid, (size_t)N * C * sizeof(float));
    AL_BE(be, matmul_forward, a->res_out, a->fch_gelu, p->fcprojw, p->fcprojb, N, 4 * C, C, 1);
}

void al_block_backward(al_model *m, int l, const al_layer_ptrs *p, const al_layer_ptrs *g,
                       const float *x_in, const al_batch *b) {
    const al_backend *be = m->be;
    int B = b->B, T = b->T, C = m->cfg.C, N = B * T;
    al_layer_acts *a = &m->layer[l];
    /* MLP: res_out = res_mid + fcproj(gelu(fc(ln2(res_mid)))) */
    AL_BE(be, matmul_backward, m->dfch, g->fcprojw, g->fcprojb, m->dres, a->fch_gelu, p->fcprojw, N,
          4 * C, C, 0);
    AL_BE(be, gelu_backward, m->dfch, a->fch, m->dfch, (size_t)N * 4 * C);
    AL_BE(be, matmul_backward, m->dln, g->fcw, g->fcb, m->dfch, a->ln2, p->fcw, N, C, 4 * C, 0);
    AL_BE(be, layernorm_backward, m->dres, g->ln2w, g->ln2b, m->dln, a->res_mid, p->ln2w,
          a->ln2_mean, a->ln2_rstd, N, C);
    /* attention: res_mid = x_in + attproj(attn(qkv(ln1(x_in)))) */
    AL_BE(be, matmul_backward, m->datty, g->attprojw, g->attprojb, m->dres, a->atty, p->attprojw, N,
          C, C, 0);
    AL_BE(be, attention_backward, m->dqkv, m->datty, a->qkv, a->att_lse, DOCSTART(m, b), B, T, C,
          m->cfg.NH);
    AL_BE(be, matmul_backward, m->dln, g->qkvw, g->qkvb, m->dqkv, a->ln1, p->qkvw, N, C, 3 * C, 0);
    AL_BE(be, layernorm_backward, m->dres, g->ln1w, g->ln1b, m->dln, x_in, p->ln1w, a->ln1_mean,
          a->ln1_rstd, N, C);
}

const float *al_block_input(const al_model *m, int l) {
    return l == 0 ? m->encoded : m->layer[l - 1].res_out;
}

void al_embed_forward(al_model *m, const al_emb_ptrs *p, const al_batch *b) {
    size_t N = (size_t)b->B * b->T;
    if (!m->be->on_host) { /* the batch's device copy, for every op until the next batch */
        AL_BE(m->be, upload, m->dtok, b->tokens, N * sizeof(int));
        AL_BE(m->be, upload, m->dtgt, b->targets, N * sizeof(int));
        AL_BE(m->be, upload, m->dpos, b->pos, N * sizeof(int));
        AL_BE(m->be, upload, m->dds, b->docstart, N * sizeof(int));
    }
    AL_BE(m->be, encoder_forward, m->encoded, TOKENS(m, b), POS(m, b), p->wte, p->wpe, (int)N,
          m->cfg.C);
}

void al_embed_backward(al_model *m, const al_emb_ptrs *g, const al_batch *b) {
    AL_BE(m->be, encoder_backward, g->wte, g->wpe, m->dres, TOKENS(m, b), POS(m, b), b->B * b->T,
          m->cfg.C);
}

double al_head_forward(al_model *m, const al_emb_ptrs *pe, const al_final_ptrs *pf,
                       const al_batch *b) {
    const al_backend *be = m->be;
    const al_model_config *c = &m->cfg;
    int N = b->B * b->T;
    AL_BE(be, layernorm_forward, m->lnf, m->lnf_mean, m->lnf_rstd, al_block_input(m, c->L),
          pf->lnfw, pf->lnfb, N, c->C);
    /* logits = lnf @ wte^T (tied output embedding) */
    AL_BE(be, matmul_forward, m->logits, m->lnf, pe->wte, NULL, N, c->C, c->Vp, 0);
    return AL_BE(be, crossentropy_forward, m->losses, m->logits, TARGETS(m, b), N, c->V, c->Vp);
}

void al_head_backward(al_model *m, const al_emb_ptrs *pe, const al_emb_ptrs *ge,
                      const al_final_ptrs *pf, const al_final_ptrs *gf, const al_batch *b,
                      float loss_scale) {
    const al_backend *be = m->be;
    const al_model_config *c = &m->cfg;
    int N = b->B * b->T;
    AL_BE(be, crossentropy_backward, m->logits, TARGETS(m, b), loss_scale, N, c->V, c->Vp);
    AL_BE(be, matmul_backward, m->dln, ge->wte, NULL, m->logits, m->lnf, pe->wte, N, c->C, c->Vp,
          0);
    AL_BE(be, zero, m->dres, (size_t)N * c->C * sizeof(float));
    AL_BE(be, layernorm_backward, m->dres, gf->lnfw, gf->lnfb, m->dln, al_block_input(m, c->L),
          pf->lnfw, m->lnf_mean, m->lnf_rstd, N, c->C);
}

double al_model_forward(al_model *m, const al_batch *b) {
    al_embed_forward(m, &m->p_emb, b);
    for (int l = 0; l < m->cfg.L; l++)
        al_block_forward(m, l, &m->p_layer[l], al_block_input(m, l), b);
    return al_head_forward(m, &m->p_emb, &m->p_final, b);
}

void al_model_backward(al_model *m, const al_batch *b, float loss_scale) {
    al_head_backward(m, &m->p_emb, &m->g_emb, &m->p_final, &m->g_final, b, loss_scale);
    for (int l = m->cfg.L - 1; l >= 0; l--)
        al_block_backward(m, l, &m->p_layer[l], &m->g_layer[l], al_block_input(m, l), b);
    al_embed_backward(m, &m->g_emb, b);
}
