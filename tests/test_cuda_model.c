/*
 * test_cuda_model.c -- the same model.c on the GPU backend against the CPU.
 *
 * The tiny preset, the same weights (perturbed so every path carries signal),
 * a batch of 4 rows with several documents per row and padding: the GPU's
 * summed loss and every parameter gradient against the CPU model's, and five
 * AdamW steps of training (al_trainer, clipping on) on each device.
 *
 * Tolerances (fp32 on both, cuBLAS in pedantic fp32 mode, no TF32; the
 * devices differ only in summation order): loss and gradients 1e-4 relative
 * (per tensor, to the CPU tensor's largest magnitude); training: every step's
 * loss and gradient norm 1e-4 relative, parameters after five steps 1e-4
 * relative to the largest parameter (the measure tests/test_odc.c uses: AdamW
 * divides by sqrt(v), which amplifies rounding where a gradient is near zero,
 * so a per-tensor measure would punish small tensors for what is absolute
 * noise of the order of lr * 1e-2). Without a usable GPU: "SKIP: <reason>",
 * exit 77.
 */
#include "al_test.h"

#include <string.h>

#include "al_backend.h"
#include "al_train.h"

enum { B = 4, T = 32, STEPS = 5 };
#define TOL       1e-4
#define TOL_TRAIN 1e-4

static const al_backend *g_be; /* the CUDA backend of this process (fixture) */

/* Row r holds documents cut at positions r*3+5 and r*5+17 (three documents);
 * the last row ends with 6 padding positions (target -1). */
static void make_batch(al_batch *b, al_rng *r, int V) {
    b->ntargets = 0;
    for (int i = 0; i < B * T; i++) {
        int row = i / T, t = i % T, c1 = row * 3 + 5, c2 = row * 5 + 17;
        int start = t < c1 ? 0 : (t < c2 ? c1 : c2);
        b->tokens[i] = (int)al_rng_below(r, V);
        b->targets[i] = (row == B - 1 && t >= T - 6) ? -1 : (int)al_rng_below(r, V);
        b->pos[i] = t - start;
        b->docstart[i] = start;
        b->ntargets += b->targets[i] >= 0;
    }
}

static float *host_copy(al_model *m, const float *buf, size_t n) {
    float *h = malloc(n * sizeof(float));
    al_err err = {0};
    assert_non_null(h);
    if (al_model_to_host(m, h, buf, n, &err)) fail_msg("%s", err.msg);
    return h;
}

/* per tensor: max |gpu - cpu| relative to the CPU tensor's scale */
static void compare_tensors(const char *what, const al_layout *lay, const float *gpu,
                            const float *cpu, double tol) {
    double worst = 0;
    const char *at = "";
    for (int t = 0; t < lay->ntensors; t++) {
        const al_tensor_info *ti = &lay->tensors[t];
        double *ref = t_to_d(cpu + ti->offset, ti->numel);
        double e = t_max_rel_err(gpu + ti->offset, ref, ti->numel);
        free(ref);
        if (e > worst || isnan(e)) worst = e, at = ti->name;
    }
    char label[128];
    snprintf(label, sizeof label, "%s (worst: %s)", what, at);
    assert_err_below(label, worst, tol);
}

static void test_forward_backward(void **state) {
    (void)state;
    al_err err = {0};
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_model cpu, gpu;
    assert_int_equal(al_model_init(&cpu, &c, B, T, &err), 0);
    if (al_model_init_on(&gpu, g_be, &c, B, T, &err)) fail_msg("%s", err.msg);
    al_model_init_weights(&cpu, 42);
    al_rng r;
    al_rng_seed(&r, 9);
    for (size_t i = 0; i < cpu.lay.nparams; i++) cpu.params[i] += (float)(0.05 * al_rng_normal(&r));
    if (al_model_from_host(&gpu, gpu.params, cpu.params, cpu.lay.nparams, &err))
        fail_msg("%s", err.msg);
    al_batch b;
    assert_int_equal(al_batch_init(&b, B, T, &err), 0);
    make_batch(&b, &r, c.V);
    float scale = 1.0f / (float)b.ntargets;
    al_model_zero_grad(&cpu);
    al_model_zero_grad(&gpu);
    double lc = al_model_forward(&cpu, &b), lg = al_model_forward(&gpu, &b);
    al_model_backward(&cpu, &b, scale);
    al_model_backward(&gpu, &b, scale);
    if (al_model_sync(&gpu, &err)) fail_msg("%s", err.msg);
    print_message("  loss cpu %.7f gpu %.7f (%d targets)\n", lc / b.ntargets, lg / b.ntargets,
                  b.ntargets);
    assert_err_below("summed loss", fabs(lg - lc) / fabs(lc), TOL);
    float *gg = host_copy(&gpu, gpu.grads, gpu.lay.nparams);
    compare_tensors("parameter gradients", &cpu.lay, gg, cpu.grads, TOL);
    free(gg);
    /* the same weights generated on the device from a seed */
    al_model_init_weights(&cpu, 7);
    al_model_init_weights(&gpu, 7);
    float *gp = host_copy(&gpu, gpu.params, gpu.lay.nparams);
    assert_memory_equal(gp, cpu.params, cpu.lay.nparams * sizeof(float));
    free(gp);
    al_batch_free(&b);
    al_model_free(&cpu);
    al_model_free(&gpu);
}

static void test_training_tracks_cpu(void **state) {
    (void)state;
    al_err err = {0};
    al_model_config c;
    assert_int_equal(al_model_preset(&c, "tiny", &err), 0);
    al_train_opts o;
    al_train_opts_default(&o);
    o.batch = B;
    o.seq = T;
    o.steps = 100;
    o.warmup = 2;
    o.lr = 1e-3;
    o.grad_clip = 0.5; /* low enough to clip */
    al_trainer tc, tg;
    assert_int_equal(al_trainer_init(&tc, &c, &o, NULL, NULL, &err), 0);
    o.backend = g_be;
    if (al_trainer_init(&tg, &c, &o, NULL, NULL, &err)) fail_msg("%s", err.msg);
    al_batch mb[2];
    al_rng r;
    al_rng_seed(&r, 5);
    for (int i = 0; i < 2; i++) assert_int_equal(al_batch_init(&mb[i], B, T, &err), 0);
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < 2; i++) make_batch(&mb[i], &r, c.V);
        al_step_stats sc, sg;
        if (al_trainer_step_batches(&tc, mb, 2, &sc, &err)) fail_msg("%s", err.msg);
        if (al_trainer_step_batches(&tg, mb, 2, &sg, &err)) fail_msg("%s", err.msg);
        print_message("  step %d: loss cpu %.7f gpu %.7f, norm cpu %.6f gpu %.6f\n", s + 1, sc.loss,
                      sg.loss, sc.grad_norm, sg.grad_norm);
        assert_err_below("step loss", fabs(sg.loss - sc.loss) / fabs(sc.loss), TOL);
        assert_err_below("step gradient norm", fabs(sg.grad_norm - sc.grad_norm) / sc.grad_norm,
                         TOL);
    }
    size_t P = tg.model.lay.nparams;
    float *gp = host_copy(&tg.model, tg.model.params, P);
    double *ref = t_to_d(tc.model.params, P);
    assert_err_below("parameters after 5 AdamW steps", t_max_rel_err(gp, ref, P), TOL_TRAIN);
    free(gp), free(ref);
    for (int i = 0; i < 2; i++) al_batch_free(&mb[i]);
    al_trainer_free(&tc);
    al_trainer_free(&tg);
}

int main(void) {
    al_err err = {0};
    if (al_backend_open(&g_be, "cuda", 0, &err) != 0) {
        printf("SKIP: %s\n", err.msg);
        return 77;
    }
    printf("GPU: %s\n", g_be->device);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_backward),
        cmocka_unit_test(test_training_tracks_cpu),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    al_backend_close(g_be);
    return rc;
}
