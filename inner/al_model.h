/*
 * al_model.h -- a GPT-2 language model, on the CPU or the GPU.
 *
 * Architecture: token + learned position embeddings, L pre-LayerNorm blocks
 * (LayerNorm with bias, causal multi-head attention, GELU MLP), a final
 * LayerNorm, and the output projection tied to the token embedding. The
 * vocabulary is padded to a multiple of 64 (Vp); padded logits are ignored.
 *
 * All parameters live in one contiguous fp32 buffer laid out *unit by unit*:
 * unit 0 = embeddings, units 1..L = the blocks, unit L+1 = the final LayerNorm.
 * A unit is one contiguous range, which is what sharding (ODC, FSDP) cuts into
 * W slices. One X-macro table (AL_PARAM_TABLE) describes every tensor and
 * drives sizes, pointer tables, checkpoint names, weight-decay masks and tests.
 *
 * Device: every op goes through the model's backend (al_backend.h), and the
 * parameters, gradients and activations live in the backend's memory (device
 * memory for CUDA: the pointers below are then device pointers). The same
 * code drives both devices. al_model_init uses the CPU backend.
 */
#ifndef AL_MODEL_H
#define AL_MODEL_H

#include "al_backend.h"
#include "al_base.h"

/* Presets: X(name, L, C, NH, T, V) */
#define AL_PRESET_TABLE(X)                                                                         \
    X("tiny", 2, 32, 2, 32, 257)                                                                   \
    X("demo", 2, 128, 4, 128, 257)                                                                 \
    X("small", 4, 256, 4, 256, 257)                                                                \
    X("tiny-gpt2", 2, 32, 2, 64, 50257)                                                            \
    X("gpt2-124m", 12, 768, 12, 1024, 50257)

/* Parameter tensors: X(name, unit, rows, cols, decay, init). `c` is the config
 * in scope at the expansion site; cols = 1 marks a vector. unit: EMB once,
 * LAYER once per block (in this order inside each block), FINAL once. decay = 1
 * for matrices (weight decay applies), 0 for vectors (biases, LayerNorm gains).
 * init: NORMAL N(0, 0.02), RESID N(0, 0.02/sqrt(2L)) for projections into the
 * residual stream, ONE, ZERO. */
#define AL_PARAM_TABLE(X)                                                                          \
    X(wte, EMB, (c)->Vp, (c)->C, 1, NORMAL)                                                        \
    X(wpe, EMB, (c)->T, (c)->C, 1, NORMAL)                                                         \
    X(ln1w, LAYER, (c)->C, 1, 0, ONE)                                                              \
    X(ln1b, LAYER, (c)->C, 1, 0, ZERO)                                                             \
    X(qkvw, LAYER, 3 * (c)->C, (c)->C, 1, NORMAL)                                                  \
    X(qkvb, LAYER, 3 * (c)->C, 1, 0, ZERO)                                                         \
    X(attprojw, LAYER, (c)->C, (c)->C, 1, RESID)                                                   \
    X(attprojb, LAYER, (c)->C, 1, 0, ZERO)                                                         \
    X(ln2w, LAYER, (c)->C, 1, 0, ONE)                                                              \
    X(ln2b, LAYER, (c)->C, 1, 0, ZERO)                                                             \
    X(fcw, LAYER, 4 * (c)->C, (c)->C, 1, NORMAL)                                                   \
    X(fcb, LAYER, 4 * (c)->C, 1, 0, ZERO)                                                          \
    X(fcprojw, LAYER, (c)->C, 4 * (c)->C, 1, RESID)                                                \
    X(fcprojb, LAYER, (c)->C, 1, 0, ZERO)                                                          \
    X(lnfw, FINAL, (c)->C, 1, 0, ONE)                                                              \
    X(lnfb, FINAL, (c)->C, 1, 0, ZERO)

typedef struct al_model_config {
    char preset[32];
    int L, C, NH, T; /* layers, channels, heads, max sequence length */
    int V, Vp;       /* vocabulary, padded vocabulary */
} al_model_config;

/* Fill cfg from a preset name; AL_ENOTFOUND lists the known presets. */
int al_model_preset(al_model_config *cfg, const char *name, al_err *err);
/* "tiny, demo, small, gpt2-124m" */
const char *al_model_preset_names(void);

/* Pointers into one unit of a parameter (or gradient) buffer: one struct per
 * unit kind, fields generated from the table. AL_IF_<want>_<unit>(code) keeps
 * `code` only where the tensor's unit is the wanted one. */
#define AL_IF_EMB_EMB(...) __VA_ARGS__
#define AL_IF_EMB_LAYER(...)
#define AL_IF_EMB_FINAL(...)
#define AL_IF_LAYER_EMB(...)
#define AL_IF_LAYER_LAYER(...) __VA_ARGS__
#define AL_IF_LAYER_FINAL(...)
#define AL_IF_FINAL_EMB(...)
#define AL_IF_FINAL_LAYER(...)
#define AL_IF_FINAL_FINAL(...)                   __VA_ARGS__
#define AL_FIELD_EMB(name, unit, r, cc, d, in)   AL_IF_EMB_##unit(float *name;)
#define AL_FIELD_LAYER(name, unit, r, cc, d, in) AL_IF_LAYER_##unit(float *name;)
#define AL_FIELD_FINAL(name, unit, r, cc, d, in) AL_IF_FINAL_##unit(float *name;)
typedef struct al_emb_ptrs {
    AL_PARAM_TABLE(AL_FIELD_EMB)
} al_emb_ptrs;
typedef struct al_layer_ptrs {
    AL_PARAM_TABLE(AL_FIELD_LAYER)
} al_layer_ptrs;
typedef struct al_final_ptrs {
    AL_PARAM_TABLE(AL_FIELD_FINAL)
} al_final_ptrs;

enum { AL_INIT_NORMAL, AL_INIT_RESID, AL_INIT_ONE, AL_INIT_ZERO };

/* One tensor of the flat layout (for checkpoints, decay masks, tests). */
typedef struct al_tensor_info {
    char name[32]; /* "wte", "h.3.qkvw", "lnfw" */
    size_t offset, numel;
    int rows, cols; /* cols == 1: vector */
    int decay;
    int init; /* AL_INIT_* */
    int unit; /* 0 = embeddings, 1..L = blocks, L+1 = final */
} al_tensor_info;

/* Flat layout of all parameters for a config. */
typedef struct al_layout {
    int nunits;       /* L + 2 */
    size_t *unit_off; /* [nunits + 1], unit u = [unit_off[u], unit_off[u+1]) */
    int ntensors;
    al_tensor_info *tensors;
    size_t nparams;
} al_layout;
int al_layout_init(al_layout *lay, const al_model_config *cfg, al_err *err);
void al_layout_free(al_layout *lay);

/* Point a pointer table at a unit's range of a buffer laid out as `lay`.
 * base is the start of the unit (not of the whole buffer). */
void al_emb_ptrs_at(al_emb_ptrs *p, const al_model_config *cfg, float *base);
void al_layer_ptrs_at(al_layer_ptrs *p, const al_model_config *cfg, float *base);
void al_final_ptrs_at(al_final_ptrs *p, const al_model_config *cfg, float *base);

/* A packed microbatch: B rows of T positions (see al_kernels.h for docstart).
 * target < 0 marks padding (no loss). */
typedef struct al_batch {
    int B, T;
    int *tokens, *targets, *pos, *docstart; /* each [B*T] */
    int ntargets;                           /* positions with target >= 0 */
} al_batch;
int al_batch_init(al_batch *b, int B, int T, al_err *err);
void al_batch_free(al_batch *b);

/* Activations of one block for one microbatch. */
typedef struct al_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* [N,C], [N], [N] */
    float *qkv;                       /* [N,3C] */
    float *atty, *att_lse;            /* [N,C], [B,NH,T] */
    float *res_mid;                   /* [N,C] residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* [N,C], [N], [N] */
    float *fch, *fch_gelu;            /* [N,4C] */
    float *res_out;                   /* [N,C] residual after the MLP */
} al_layer_acts;

typedef struct al_model {
    const al_backend *be; /* where the buffers below live and the ops run */
    al_model_config cfg;
    al_layout lay;
    int B, T;              /* microbatch shape the activations are sized for */
    float *params, *grads; /* [nparams] each, layout `lay` */
    al_emb_ptrs p_emb, g_emb;
    al_layer_ptrs *p_layer, *g_layer; /* [L] */
    al_final_ptrs p_final, g_final;
    /* activations */
    float *acts_mem;
    float *encoded;       /* [N,C] residual stream input to block 0 */
    al_layer_acts *layer; /* [L] */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits; /* [N,Vp]; holds dlogits after backward */
    float *losses; /* [N] */
    /* activation-gradient scratch, reused across blocks */
    float *dres, *dln, *dqkv, *datty, *dfch;
    /* device copy of the current batch (backends whose memory is not the
     * host's): tokens, targets, pos, docstart, uploaded by al_embed_forward */
    int *dbatch, *dtok, *dtgt, *dpos, *dds;
} al_model;

/* Allocate a model for microbatches of B rows x T tokens (T <= cfg->T). */
int al_model_init(al_model *m, const al_model_config *cfg, int B, int T, al_err *err);
/* The same without the parameter and gradient buffers (params, grads and the
 * pointer tables stay NULL): for sharded engines that hold one gathered unit
 * at a time and pass pointer tables to the pieces below. A microbatch may then
 * be any B' x T' with B'*T' <= B*T (one long row of packed documents, say). */
int al_model_init_acts(al_model *m, const al_model_config *cfg, int B, int T, al_err *err);
/* The same two on a given backend (al_backend_cpu(), or one from
 * al_backend_open); the backend must outlive the model. */
int al_model_init_on(al_model *m, const al_backend *be, const al_model_config *cfg, int B, int T,
                     al_err *err);
int al_model_init_acts_on(al_model *m, const al_backend *be, const al_model_config *cfg, int B,
                          int T, al_err *err);
void al_model_free(al_model *m);
/* Wait for the backend's queued work; report its first failure since the last
 * call (ops do not fail on the CPU; on the GPU their errors are sticky). */
int al_model_sync(al_model *m, al_err *err);
/* Copy n floats between a model buffer (params, grads, or any buffer of the
 * model's backend) and host memory. Waits; reports a failure like sync. */
int al_model_to_host(al_model *m, float *host, const float *buf, size_t n, al_err *err);
int al_model_from_host(al_model *m, float *buf, const float *host, size_t n, al_err *err);
/* GPT-2 init: N(0, 0.02) matrices, residual projections scaled by 1/sqrt(2L),
 * zero biases, unit LayerNorm gains. Deterministic in seed. */
void al_model_init_weights(al_model *m, uint64_t seed);
/* Forward pass; returns the summed loss over b->ntargets positions (the mean
 * is that divided by ntargets). Keeps activations for the backward. b is host
 * memory; a non-host backend gets a copy (uploaded by al_embed_forward). On a
 * backend failure the loss is NaN and al_model_sync says why. */
double al_model_forward(al_model *m, const al_batch *b);
/* Backward of loss_scale * (summed loss); accumulates into m->grads. Call
 * after al_model_forward on the same batch. */
void al_model_backward(al_model *m, const al_batch *b, float loss_scale);
void al_model_zero_grad(al_model *m);

/* The pieces the forward and backward are made of, for engines that hold one
 * gathered unit at a time (ODC, FSDP). x_in/res_out are [B*T, C].
 * al_block_backward: dres holds d(res_out) on entry and d(x_in) on return;
 * parameter gradients are accumulated into g. */
void al_block_forward(al_model *m, int l, const al_layer_ptrs *p, const float *x_in,
                      const al_batch *b);
void al_block_backward(al_model *m, int l, const al_layer_ptrs *p, const al_layer_ptrs *g,
                       const float *x_in, const al_batch *b);
/* Input of block l: the encoder output for l = 0, else block l-1's output;
 * al_block_input(m, L) feeds the head. */
const float *al_block_input(const al_model *m, int l);
/* Unit 0 at the bottom: encoded = wte[tok] + wpe[pos]. Backward accumulates
 * m->dres (d encoded, left there by block 0's backward) into g. */
void al_embed_forward(al_model *m, const al_emb_ptrs *p, const al_batch *b);
void al_embed_backward(al_model *m, const al_emb_ptrs *g, const al_batch *b);
/* The head, which needs unit L+1 (final LayerNorm) and unit 0 (the tied
 * output embedding): returns the summed loss. The backward (loss_scale as in
 * al_model_backward) accumulates into ge->wte, gf, and leaves d(block L's
 * output) in m->dres. al_model_forward/backward are these pieces in order. */
double al_head_forward(al_model *m, const al_emb_ptrs *pe, const al_final_ptrs *pf,
                       const al_batch *b);
void al_head_backward(al_model *m, const al_emb_ptrs *pe, const al_emb_ptrs *ge,
                      const al_final_ptrs *pf, const al_final_ptrs *gf, const al_batch *b,
                      float loss_scale);

#endif
