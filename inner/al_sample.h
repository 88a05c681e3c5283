/*
 * al_sample.h -- generating text from a trained model: an incremental forward
 * with a KV cache, and the sampler.
 *
 * The decoder runs the same GPT-2 as al_model.h, one position at a time, on
 * the CPU, from a host copy of the parameters (layout al_layout). Each step
 * appends the position's keys and values to a per-layer cache and attends over
 * the cache, so a step costs O(pos) instead of a whole forward. Position p of
 * a generation is document position p: the model was trained on documents
 * that begin with EOT at position 0, so a generation starts with EOT too.
 * The logits of each step equal the full forward's at that position (up to
 * float rounding: tests/test_use.c checks the distributions).
 */
#ifndef AL_SAMPLE_H
#define AL_SAMPLE_H

#include "al_base.h"
#include "al_model.h"

typedef struct al_decoder {
    al_model_config cfg;
    al_emb_ptrs pe;
    al_layer_ptrs *pl; /* [L] */
    al_final_ptrs pf;
    int pos;                               /* positions in the cache */
    float *mem;                            /* everything below, one allocation */
    float *kc, *vc;                        /* [L, T, C] each */
    float *x, *ln, *qkv, *att, *fch, *fcg; /* one position's activations */
    float *logits;                         /* [Vp]: the next token's, after a step */
    float *scores;                         /* [T] */
    float mean, rstd;                      /* LayerNorm statistics (unused after) */
    struct al_pick {
        float l;
        int i;
    } * pick; /* [V]: the sampler's scratch */
} al_decoder;

/* params: host, laid out for cfg; the decoder keeps pointers into it. */
int al_decoder_init(al_decoder *d, const al_model_config *cfg, const float *params, al_err *err);
void al_decoder_free(al_decoder *d);
/* Empty the cache: the next token goes to position 0. */
void al_decoder_reset(al_decoder *d);
/* Feed `token` at the next position; d->logits then holds the next token's
 * logits. AL_EINVAL for a token outside the vocabulary or a full context. */
int al_decoder_step(al_decoder *d, int token, al_err *err);

typedef struct al_sample_opts {
    int max_tokens;     /* tokens to generate (fewer if stop or the context ends) */
    double temperature; /* 0: greedy (argmax) */
    int top_k;          /* 0: the whole vocabulary */
    uint64_t seed;
    int stop; /* token that ends a generation (kept in the output), -1: none */
} al_sample_opts;

/* The next token from logits[0..V): argmax at temperature 0, else a draw from
 * softmax(logits / temperature) over the top_k largest (ties: lower id first).
 * Deterministic in the RNG's state. d->pick is the scratch. */
int al_sample_pick(al_decoder *d, const float *logits, double temperature, int top_k, al_rng *rng);

/* Feed prompt[0..n) from position 0, then sample up to o->max_tokens tokens
 * into out (room for max_tokens), stopping after o->stop or when the context
 * (T) is full. *nout: tokens generated. AL_EINVAL: empty prompt, a prompt
 * longer than T, or a token outside the vocabulary. */
int al_generate(al_decoder *d, const int *prompt, int n, const al_sample_opts *o, int *out,
                int *nout, al_err *err);

#endif
