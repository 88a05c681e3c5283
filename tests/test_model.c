/*
 * test_model.c -- the whole GPT on the `tiny` preset:
 *  - the fp32 backward's gradient matches central finite differences of a
 *    double-precision reference forward (built from the *_ref kernels) on a
 *    sample of parameters from every tensor;
 *  - documents packed in one row do not see each other: changing one leaves the
 *    other's logits unchanged;
 *  - the parameter table drives sizes and names;
 *  - the backend plumbing: model.c on a staged backend (the CPU kernels behind
 *    on_host = 0, so the model keeps its own uploaded copy of the batch, and
 *    weights and gradients travel through upload/download) gives bit-identical
 *    loss and gradients, even with the host batch scribbled over after its
 *    upload; al_backend_open names what is missing.
 */
#include "al_test.h"

#include <string.h>

#include "al_kernels.h"
#include "al_model.h"

enum { B = 2, T = 32 };

/* ---- double reference forward ----------------------------------------------------- */

static double *tensor(const al_layout *lay, double *base, const char *name) {
    for (int t = 0; t < lay->ntensors; t++)
        if (!strcmp(lay->tensors[t].name, name)) return base + lay->tensors[t].offset;
    fail_msg("no tensor %s", name);
    return NULL;
}

/* Mean loss over b's targets, everything in double. */
static double ref_forward(const al_model_config *c, const al_layout *lay, double *p,
                          const al_batch *b) {
    int N = b->B * b->T, C = c->C;
    size_t NC = (size_t)N * C;
    double *x = malloc(NC * sizeof(double)), *ln = malloc(NC * sizeof(double));
    double *qkv = malloc(3 * NC * sizeof(double)), *att = malloc(NC * sizeof(double));
    double *h = malloc(4 * NC * sizeof(double)), *g = malloc(4 * NC * sizeof(double));
    double *mean = malloc(N * sizeof(double)), *rstd = malloc(N * sizeof(double));
    double *lse = malloc((size_t)N * c->NH * sizeof(double));
    double *logits = malloc((size_t)N * c->Vp * sizeof(double)),
           *losses = malloc(N * sizeof(double));
    al_encoder_forward_ref(x, b->tokens, b->pos, tensor(lay, p, "wte"), tensor(lay, p, "wpe"), N,
                           C);
    for (int l = 0; l < c->L; l++) {
        char nm[32];
#define W(s) (snprintf(nm, sizeof nm, "h.%d.%s", l, s), tensor(lay, p, nm))
        al_layernorm_forward_ref(ln, mean, rstd, x, W("ln1w"), W("ln1b"), N, C);
        al_matmul_forward_ref(qkv, ln, W("qkvw"), W("qkvb"), N, C, 3 * C, 0);
        al_attention_forward_ref(att, lse, qkv, b->docstart, b->B, b->T, C, c->NH);
        al_matmul_forward_ref(x, att, W("attprojw"), W("attprojb"), N, C, C, 1);
        al_layernorm_forward_ref(ln, mean, rstd, x, W("ln2w"), W("ln2b"), N, C);
        al_matmul_forward_ref(h, ln, W("fcw"), W("fcb"), N, C, 4 * C, 0);
        al_gelu_forward_ref(g, h, 4 * NC);
        al_matmul_forward_ref(x, g, W("fcprojw"), W("fcprojb"), N, 4 * C, C, 1);
#undef W
    }
    al_layernorm_forward_ref(ln, mean, rstd, x, tensor(lay, p, "lnfw"), tensor(lay, p, "lnfb"), N,
                             C);
    al_matmul_forward_ref(logits, ln, tensor(lay, p, "wte"), NULL, N, C, c->Vp, 0);
    double loss = al_crossentropy_forward_ref(losses, logits, b->targets, N, c->V, c->Vp);
    free(x), free(ln), free(qkv), free(att), free(h), free(g), free(mean), free(rstd), free(lse);
    free(logits), free(losses);
    return loss / b->ntargets;
}

/* Two rows: row 0 holds documents of 12 and 20 positions, row 1 one document of
 * 25 and 7 padding positions (target -1). */
static void make_batch(al_batch *b, al_rng *r, int V) {
    b->ntargets = 0;
    for (int i = 0; i < B * T; i++) {
        int row = i / T, t = i % T;
        int start = row == 0 ? (t < 12 ? 0 : 12) : (t < 25 ? 0 : t);
        b->tokens[i] = (int)al_rng_below(r, V);
        b->targets[i] = (row == 1 && t >= 25) ? -1 : (int)al_rng_below(r, V);
        b->pos[i] = t - start;
        b->docstart[i] = start;
        b->ntargets += b->targets[i] >= 0;
    }
}

static void test_gradient_fd(void **state) {
    (void)state;
    al_err err = {0};
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_model m;
    assert_int_equal(al_model_init(&m, &c, B, T, &err), 0);
    al_model_init_weights(&m, 42);
    /* larger weights than the init so that every path carries signal */
    al_rng r;
    al_rng_seed(&r, 9);
    for (size_t i = 0; i < m.lay.nparams; i++) m.params[i] += (float)(0.05 * al_rng_normal(&r));
    al_batch b;
    assert_int_equal(al_batch_init(&b, B, T, &err), 0);
    make_batch(&b, &r, c.V);
    al_model_zero_grad(&m);
    double loss = al_model_forward(&m, &b) / b.ntargets;
    al_model_backward(&m, &b, 1.0f / (float)b.ntargets);

    double *pd = t_to_d(m.params, m.lay.nparams);
    double ref_loss = ref_forward(&c, &m.lay, pd, &b);
    assert_err_below("model loss fp32 vs double ref", fabs(loss - ref_loss) / ref_loss, 1e-5);

    /* 3 samples from every tensor; wte rows from tokens of the batch */
    const double h = 1e-5;
    double num = 0, den = 0;
    int samples = 0;
    for (int t = 0; t < m.lay.ntensors; t++) {
        const al_tensor_info *ti = &m.lay.tensors[t];
        for (int s = 0; s < 3; s++) {
            size_t k = (size_t)al_rng_below(&r, ti->numel);
            if (!strcmp(ti->name, "wte"))
                k = (size_t)b.tokens[al_rng_below(&r, B * T)] * c.C + al_rng_below(&r, c.C);
            size_t i = ti->offset + k;
            double old = pd[i];
            pd[i] = old + h;
            double lp = ref_forward(&c, &m.lay, pd, &b);
            pd[i] = old - h;
            double lm = ref_forward(&c, &m.lay, pd, &b);
            pd[i] = old;
            double fd = (lp - lm) / (2 * h);
            num = fmax(num, fabs(fd - m.grads[i]));
            den = fmax(den, fabs(fd));
            samples++;
        }
    }
    print_message("  %d sampled parameters, max |fd| %.3e\n", samples, den);
    assert_true(den > 1e-4); /* the check is not vacuous */
    assert_err_below("model gradient fp32 vs FD(double ref)", num / den, 1e-4);
    free(pd);
    al_batch_free(&b);
    al_model_free(&m);
}

static void test_documents_isolated(void **state) {
    (void)state;
    al_err err = {0};
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_model m;
    assert_int_equal(al_model_init(&m, &c, B, T, &err), 0);
    al_model_init_weights(&m, 7);
    al_batch b;
    assert_int_equal(al_batch_init(&b, B, T, &err), 0);
    al_rng r;
    al_rng_seed(&r, 10);
    make_batch(&b, &r, c.V);
    size_t Vp = (size_t)c.Vp, n = (size_t)B * T * Vp;
    al_model_forward(&m, &b);
    float *before = malloc(n * sizeof(float));
    memcpy(before, m.logits, n * sizeof(float));
    /* change the first document of row 0 (positions 0..11) */
    for (int t = 0; t < 12; t++) b.tokens[t] = (b.tokens[t] + 1 + t) % c.V;
    al_model_forward(&m, &b);
    double changed = 0, other = 0;
    for (int i = 0; i < B * T; i++)
        for (size_t j = 0; j < Vp; j++) {
            double d = fabs(before[i * Vp + j] - m.logits[i * Vp + j]);
            if (i < 12)
                changed = fmax(changed, d);
            else
                other = fmax(other, d);
        }
    print_message("  changed document: max logit change %.3e; other documents: %.3e\n", changed,
                  other);
    assert_true(changed > 1e-3);
    assert_true(other == 0.0);
    free(before);
    al_batch_free(&b);
    al_model_free(&m);
}

static void test_layout_table(void **state) {
    (void)state;
    al_err err = {0};
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "demo", &err), 0);
    assert_int_equal(c.Vp % 64, 0);
    assert_true(c.Vp >= c.V);
    al_layout lay;
    assert_int_equal(al_layout_init(&lay, &c, &err), 0);
    /* GPT-2 count: Vp*C + T*C + L*(12 C^2 + 13 C) + 2C */
    size_t C = (size_t)c.C,
           want = (size_t)c.Vp * C + (size_t)c.T * C + (size_t)c.L * (12 * C * C + 13 * C) + 2 * C;
    assert_int_equal(lay.nparams, want);
    assert_int_equal(lay.ntensors, 2 + 12 * c.L + 2);
    assert_string_equal(lay.tensors[2].name, "h.0.ln1w");
    assert_string_equal(lay.tensors[lay.ntensors - 1].name, "lnfb");
    /* units are contiguous and cover the buffer */
    assert_int_equal(lay.unit_off[0], 0);
    assert_int_equal(lay.unit_off[lay.nunits], lay.nparams);
    for (int t = 0; t + 1 < lay.ntensors; t++)
        assert_int_equal(lay.tensors[t].offset + lay.tensors[t].numel, lay.tensors[t + 1].offset);
    al_layout_free(&lay);
    assert_int_equal(al_model_preset(&c, "gpt2-124m", &err), 0);
    assert_int_equal(c.Vp, 50304);
    assert_int_equal(al_layout_init(&lay, &c, &err), 0);
    /* 124,475,904 with the padded vocabulary (124,439,808 unpadded) */
    assert_int_equal(lay.nparams, 124475904);
    al_layout_free(&lay);
    assert_int_equal(al_model_preset(&c, "huge", &err), AL_ENOTFOUND);
    assert_non_null(strstr(err.msg, "huge"));
    assert_non_null(strstr(err.msg, "gpt2-124m"));
}

static void test_staged_backend(void **state) {
    (void)state;
    al_err err = {0};
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_model cpu, dev;
    assert_int_equal(al_model_init(&cpu, &c, B, T, &err), 0);
    assert_int_equal(al_model_init_on(&dev, al_backend_staged(), &c, B, T, &err), 0);
    assert_non_null(dev.dbatch);
    assert_null(cpu.dbatch);
    al_model_init_weights(&cpu, 3);
    al_model_init_weights(&dev, 3);
    size_t P = cpu.lay.nparams;
    float *h = malloc(P * sizeof(float));
    assert_int_equal(al_model_to_host(&dev, h, dev.params, P, &err), 0);
    assert_memory_equal(h, cpu.params, P * sizeof(float));
    al_batch b, bb;
    al_rng r;
    al_rng_seed(&r, 4);
    assert_int_equal(al_batch_init(&b, B, T, &err), 0);
    assert_int_equal(al_batch_init(&bb, B, T, &err), 0);
    make_batch(&b, &r, c.V);
    size_t n = (size_t)B * T * sizeof(int);
    memcpy(bb.tokens, b.tokens, n), memcpy(bb.targets, b.targets, n);
    memcpy(bb.pos, b.pos, n), memcpy(bb.docstart, b.docstart, n);
    bb.ntargets = b.ntargets;
    al_model_zero_grad(&cpu);
    al_model_zero_grad(&dev);
    double lc = al_model_forward(&cpu, &b);
    al_model_backward(&cpu, &b, 0.01f);
    /* the staged model reads its uploaded copy: scribble the host batch */
    al_embed_forward(&dev, &dev.p_emb, &bb);
    for (int i = 0; i < B * T; i++) {
        bb.tokens[i] = (bb.tokens[i] + 1) % c.V;
        bb.targets[i] = i % 3 ? -1 : 5;
        bb.pos[i] = 0;
        bb.docstart[i] = i % T;
    }
    for (int l = 0; l < c.L; l++)
        al_block_forward(&dev, l, &dev.p_layer[l], al_block_input(&dev, l), &bb);
    double ld = al_head_forward(&dev, &dev.p_emb, &dev.p_final, &bb);
    al_model_backward(&dev, &bb, 0.01f);
    assert_int_equal(al_model_sync(&dev, &err), 0);
    assert_true(lc == ld);
    assert_int_equal(al_model_to_host(&dev, h, dev.grads, P, &err), 0);
    assert_memory_equal(h, cpu.grads, P * sizeof(float));
    free(h);
    al_batch_free(&b);
    al_batch_free(&bb);
    al_model_free(&cpu);
    al_model_free(&dev);
    /* opening backends by name */
    const al_backend *be = NULL;
    assert_int_equal(al_backend_open(&be, "cpu", 0, &err), 0);
    assert_ptr_equal(be, al_backend_cpu());
    al_backend_close(be);
    assert_int_equal(al_backend_open(&be, "tpu", 0, &err), AL_EINVAL);
    assert_non_null(strstr(err.msg, "cpu, cuda"));
    if (!al_backend_has_cuda()) {
        assert_int_equal(al_backend_open(&be, "cuda", 0, &err), AL_EUNSUPPORTED);
        assert_string_equal(err.msg,
                            "this build has no CUDA backend (configure with -Dcuda=enabled)");
        assert_int_equal(al_backend_device_count("cuda"), 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staged_backend),
        cmocka_unit_test(test_layout_table),
        cmocka_unit_test(test_gradient_fd),
        cmocka_unit_test(test_documents_isolated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
