/* sample.c -- the KV-cache decoder and the sampler (see al_sample.h). */
#include "al_sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "al_kernels.h"

int al_decoder_init(al_decoder *d, const al_model_config *cfg, const float *params, al_err *err) {
    memset(d, 0, sizeof *d);
    d->cfg = *cfg;
    size_t L = (size_t)cfg->L, T = (size_t)cfg->T, C = (size_t)cfg->C;
    size_t total = 2 * L * T * C + C + C + 3 * C + C + 4 * C + 4 * C + (size_t)cfg->Vp + T;
    d->mem = malloc(total * sizeof(float));
    d->pl = calloc(L, sizeof *d->pl);
    d->pick = malloc((size_t)cfg->V * sizeof *d->pick);
    al_layout lay;
    int rc = al_layout_init(&lay, cfg, err);
    if (rc == 0 && (!d->mem || !d->pl || !d->pick))
        rc =
            al_errf(err, AL_ENOMEM, "decoder '%s': out of memory (%zu floats)", cfg->preset, total);
    if (rc) {
        al_layout_free(&lay);
        al_decoder_free(d);
        return rc;
    }
    float *p = (float *)params; /* the pointer tables are not const; nothing writes */
    al_emb_ptrs_at(&d->pe, cfg, p + lay.unit_off[0]);
    for (int l = 0; l < cfg->L; l++) al_layer_ptrs_at(&d->pl[l], cfg, p + lay.unit_off[l + 1]);
    al_final_ptrs_at(&d->pf, cfg, p + lay.unit_off[cfg->L + 1]);
    al_layout_free(&lay);
    float *a = d->mem;
#define TAKE(n) (a += (n), a - (n))
    d->kc = TAKE(L * T * C);
    d->vc = TAKE(L * T * C);
    d->x = TAKE(C);
    d->ln = TAKE(C);
    d->qkv = TAKE(3 * C);
    d->att = TAKE(C);
    d->fch = TAKE(4 * C);
    d->fcg = TAKE(4 * C);
    d->logits = TAKE((size_t)cfg->Vp);
    d->scores = TAKE(T);
#undef TAKE
    return 0;
}

void al_decoder_free(al_decoder *d) {
    free(d->mem);
    free(d->pl);
    free(d->pick);
    memset(d, 0, sizeof *d);
}

void al_decoder_reset(al_decoder *d) {
    d->pos = 0;
}

/* Attention of one query (this position) over the cached keys 0..pos of
 * layer l, head by head: what al_attention_forward computes for the last row
 * of a causal window. */
static void attend(al_decoder *d, int l) {
    int C = d->cfg.C, NH = d->cfg.NH, hs = C / NH, t = d->pos;
    const float *K = d->kc + (size_t)l * d->cfg.T * C, *V = d->vc + (size_t)l * d->cfg.T * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int h = 0; h < NH; h++) {
        const float *q = d->qkv + h * hs;
        float mx = -INFINITY;
        for (int j = 0; j <= t; j++) {
            const float *k = K + (size_t)j * C + h * hs;
            float s = 0.0f;
            for (int i = 0; i < hs; i++) s += q[i] * k[i];
            d->scores[j] = s * scale;
            mx = fmaxf(mx, d->scores[j]);
        }
        float sum = 0.0f;
        for (int j = 0; j <= t; j++) sum += (d->scores[j] = expf(d->scores[j] - mx));
        float *y = d->att + h * hs;
        memset(y, 0, (size_t)hs * sizeof(float));
        for (int j = 0; j <= t; j++) {
            const float *v = V + (size_t)j * C + h * hs;
            float w = d->scores[j] / sum;
            for (int i = 0; i < hs; i++) y[i] += w * v[i];
        }
    }
}

int al_decoder_step(al_decoder *d, int token, al_err *err) {
    const al_model_config *c = &d->cfg;
    int C = c->C;
    if (token < 0 || token >= c->V)
        return al_errf(err, AL_EINVAL, "token %d is outside the vocabulary (0..%d)", token,
                       c->V - 1);
    if (d->pos >= c->T)
        return al_errf(err, AL_EINVAL, "the context is full (T = %d positions)", c->T);
    int t = d->pos;
    al_encoder_forward(d->x, &token, &t, d->pe.wte, d->pe.wpe, 1, C);
    for (int l = 0; l < c->L; l++) {
        const al_layer_ptrs *p = &d->pl[l];
        al_layernorm_forward(d->ln, &d->mean, &d->rstd, d->x, p->ln1w, p->ln1b, 1, C);
        al_matmul_forward(d->qkv, d->ln, p->qkvw, p->qkvb, 1, C, 3 * C, 0);
        size_t at = ((size_t)l * c->T + (size_t)t) * C;
        memcpy(d->kc + at, d->qkv + C, (size_t)C * sizeof(float));
        memcpy(d->vc + at, d->qkv + 2 * C, (size_t)C * sizeof(float));
        attend(d, l);
        al_matmul_forward(d->x, d->att, p->attprojw, p->attprojb, 1, C, C, 1);
        al_layernorm_forward(d->ln, &d->mean, &d->rstd, d->x, p->ln2w, p->ln2b, 1, C);
        al_matmul_forward(d->fch, d->ln, p->fcw, p->fcb, 1, C, 4 * C, 0);
        al_gelu_forward(d->fcg, d->fch, (size_t)4 * C);
        al_matmul_forward(d->x, d->fcg, p->fcprojw, p->fcprojb, 1, 4 * C, C, 1);
    }
    al_layernorm_forward(d->ln, &d->mean, &d->rstd, d->x, d->pf.lnfw, d->pf.lnfb, 1, C);
    al_matmul_forward(d->logits, d->ln, d->pe.wte, NULL, 1, C, c->Vp, 0);
    d->pos++;
    return 0;
}

static int by_logit_desc(const void *a, const void *b) {
    const struct al_pick *x = a, *y = b;
    if (x->l != y->l) return x->l > y->l ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

int al_sample_pick(al_decoder *d, const float *logits, double temperature, int top_k, al_rng *rng) {
    int V = d->cfg.V;
    if (temperature <= 0) {
        int best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        return best;
    }
    for (int i = 0; i < V; i++) d->pick[i] = (struct al_pick){logits[i], i};
    int n = V;
    if (top_k > 0 && top_k < V) {
        qsort(d->pick, (size_t)V, sizeof *d->pick, by_logit_desc);
        n = top_k;
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, d->pick[i].l);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)(d->pick[i].l - mx) / temperature);
    double u = al_rng_uniform(rng) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp((double)(d->pick[i].l - mx) / temperature);
        if (u < acc) return d->pick[i].i;
    }
    return d->pick[n - 1].i; /* u within rounding of sum */
}

int al_generate(al_decoder *d, const int *prompt, int n, const al_sample_opts *o, int *out,
                int *nout, al_err *err) {
    *nout = 0;
    if (n < 1) return al_errf(err, AL_EINVAL, "empty prompt");
    if (n > d->cfg.T)
        return al_errf(err, AL_EINVAL,
                       "the prompt is %d tokens, longer than the model's context (T = %d)", n,
                       d->cfg.T);
    al_decoder_reset(d);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) rc = al_decoder_step(d, prompt[i], err);
    al_rng rng;
    al_rng_seed(&rng, o->seed);
    while (rc == 0 && *nout < o->max_tokens) {
        int tok = al_sample_pick(d, d->logits, o->temperature, o->top_k, &rng);
        out[(*nout)++] = tok;
        if (tok == o->stop || d->pos >= d->cfg.T || *nout == o->max_tokens) break;
        rc = al_decoder_step(d, tok, err);
    }
    return rc;
}
