/*
 * test_cuda.c -- every CUDA kernel against the naive double reference.
 *
 * Tolerance: 1e-4 relative to the output's scale (fp32, cuBLAS in pedantic
 * fp32 mode, no TF32). Without a usable GPU the whole test reports SKIP
 * (exit 77) with CUDA's reason.
 */
#include "al_test.h"

#include <string.h>

#include "al_cuda.h"
#include "al_kernels.h"

enum { B = 2, T = 64, C = 64, NH = 4, N = B * T, V = 257, VP = 320 };
#define TOL 1e-4

static al_cuda g_gpu; /* the device context of this test process (fixture) */

/* device copy of a host array */
static void *up(const void *h, size_t bytes) {
    void *d = NULL;
    al_err err = {0};
    if (al_cuda_alloc(&g_gpu, &d, bytes, &err) || al_cuda_upload(&g_gpu, d, h, bytes, &err))
        fail_msg("%s", err.msg);
    return d;
}
static void down(void *h, const void *d, size_t bytes) {
    al_err err = {0};
    if (al_cuda_sync(&g_gpu, &err) || al_cuda_download(&g_gpu, h, d, bytes, &err))
        fail_msg("%s", err.msg);
}

static void make_docstart(int *ds) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) ds[b * T + t] = b == 0 ? (t < 20 ? 0 : (t < 45 ? 20 : 45)) : 0;
}

static void test_layernorm_matmul_gelu(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 1);
    static float x[N * C], w[C], bb[C], out[N * C], mean[N], rstd[N], dout[N * C];
    t_fill(&r, x, N * C, 2.0);
    t_fill(&r, w, C, 1.0);
    t_fill(&r, bb, C, 1.0);
    t_fill(&r, dout, N * C, 1.0);
    double *dx = t_to_d(x, N * C), *dw = t_to_d(w, C), *db = t_to_d(bb, C);
    double *ddo = t_to_d(dout, N * C);
    static double rout[N * C], rmean[N], rrstd[N], rdx[N * C], rdw[C], rdb[C];
    al_layernorm_forward_ref(rout, rmean, rrstd, dx, dw, db, N, C);
    al_layernorm_backward_ref(rdx, rdw, rdb, ddo, dx, dw, rmean, rrstd, N, C);
    float *gx = up(x, sizeof x), *gw = up(w, sizeof w), *gb = up(bb, sizeof bb);
    float *gout = up(out, sizeof out), *gm = up(mean, sizeof mean), *gr = up(rstd, sizeof rstd);
    float *gdo = up(dout, sizeof dout);
    static float zeros[N * C];
    float *gdx = up(zeros, sizeof zeros), *gdw = up(zeros, C * 4), *gdb = up(zeros, C * 4);
    al_layernorm_forward_cuda(&g_gpu, gout, gm, gr, gx, gw, gb, N, C);
    al_layernorm_backward_cuda(&g_gpu, gdx, gdw, gdb, gdo, gx, gw, gm, gr, N, C);
    static float hdx[N * C], hdw[C], hdb[C];
    down(out, gout, sizeof out);
    down(hdx, gdx, sizeof hdx);
    down(hdw, gdw, sizeof hdw);
    down(hdb, gdb, sizeof hdb);
    assert_err_below("cuda layernorm forward", t_max_rel_err(out, rout, N * C), TOL);
    assert_err_below("cuda layernorm dinp", t_max_rel_err(hdx, rdx, N * C), TOL);
    assert_err_below("cuda layernorm dw", t_max_rel_err(hdw, rdw, C), TOL);
    assert_err_below("cuda layernorm db", t_max_rel_err(hdb, rdb, C), TOL);

    /* matmul C -> 4C with bias, forward and backward */
    enum { OC = 4 * C };
    static float mw[OC * C], mb[OC], mo[N * OC], mdo[N * OC], mdi[N * C], mdw[OC * C], mdb[OC];
    t_fill(&r, mw, OC * C, 0.5);
    t_fill(&r, mb, OC, 0.5);
    t_fill(&r, mdo, N * OC, 1.0);
    double *dmw = t_to_d(mw, OC * C), *dmb = t_to_d(mb, OC), *dmdo = t_to_d(mdo, N * OC);
    static double rmo[N * OC], rmdi[N * C], rmdw[OC * C], rmdb[OC];
    al_matmul_forward_ref(rmo, dx, dmw, dmb, N, C, OC, 0);
    al_matmul_backward_ref(rmdi, rmdw, rmdb, dmdo, dx, dmw, N, C, OC, 0);
    float *gmw = up(mw, sizeof mw), *gmb = up(mb, sizeof mb), *gmo = up(mo, sizeof mo);
    float *gmdo = up(mdo, sizeof mdo), *gmdi = up(zeros, sizeof mdi);
    static float zw[OC * C];
    float *gmdw = up(zw, sizeof zw), *gmdb = up(zw, OC * 4);
    al_matmul_forward_cuda(&g_gpu, gmo, gx, gmw, gmb, N, C, OC, 0);
    al_matmul_backward_cuda(&g_gpu, gmdi, gmdw, gmdb, gmdo, gx, gmw, N, C, OC, 0);
    down(mo, gmo, sizeof mo);
    down(mdi, gmdi, sizeof mdi);
    down(mdw, gmdw, sizeof mdw);
    down(mdb, gmdb, sizeof mdb);
    assert_err_below("cuda matmul forward", t_max_rel_err(mo, rmo, N * OC), TOL);
    assert_err_below("cuda matmul dinp", t_max_rel_err(mdi, rmdi, N * C), TOL);
    assert_err_below("cuda matmul dw", t_max_rel_err(mdw, rmdw, OC * C), TOL);
    assert_err_below("cuda matmul dbias", t_max_rel_err(mdb, rmdb, OC), TOL);

    /* GELU on the matmul output */
    static float ge[N * OC], gd[N * OC];
    static double rge[N * OC], rgd[N * OC];
    double *dmo = t_to_d(mo, N * OC);
    al_gelu_forward_ref(rge, dmo, N * OC);
    al_gelu_backward_ref(rgd, dmo, dmdo, N * OC);
    float *gge = up(ge, sizeof ge), *ggd = up(gd, sizeof gd);
    al_gelu_forward_cuda(&g_gpu, gge, gmo, N * OC);
    al_gelu_backward_cuda(&g_gpu, ggd, gmo, gmdo, N * OC);
    down(ge, gge, sizeof ge);
    down(gd, ggd, sizeof gd);
    assert_err_below("cuda gelu forward", t_max_rel_err(ge, rge, N * OC), TOL);
    assert_err_below("cuda gelu backward", t_max_rel_err(gd, rgd, N * OC), TOL);
    void *all[] = {gx,  gw,  gb,  gout, gm,   gr,   gdo,  gdx, gdw, gdb,
                   gmw, gmb, gmo, gmdo, gmdi, gmdw, gmdb, gge, ggd};
    for (size_t i = 0; i < AL_ARRAY_LEN(all); i++) al_cuda_release(&g_gpu, all[i]);
    free(dx), free(dw), free(db), free(ddo), free(dmw), free(dmb), free(dmdo), free(dmo);
}

static void test_attention(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 2);
    int ds[N];
    make_docstart(ds);
    static float qkv[N * 3 * C], out[N * C], lse[B * NH * T], dout[N * C], dqkv[N * 3 * C];
    t_fill(&r, qkv, N * 3 * C, 1.5);
    t_fill(&r, dout, N * C, 1.0);
    double *dq = t_to_d(qkv, N * 3 * C), *ddo = t_to_d(dout, N * C);
    static double rout[N * C], rlse[B * NH * T], rdqkv[N * 3 * C];
    al_attention_forward_ref(rout, rlse, dq, ds, B, T, C, NH);
    al_attention_backward_ref(rdqkv, ddo, dq, rlse, ds, B, T, C, NH);
    float *gq = up(qkv, sizeof qkv), *go = up(out, sizeof out), *gl = up(lse, sizeof lse);
    float *gdo = up(dout, sizeof dout), *gdq = up(dqkv, sizeof dqkv);
    int *gds = up(ds, sizeof ds);
    float *scratch = NULL;
    al_err err = {0};
    assert_int_equal(al_cuda_alloc(&g_gpu, (void **)&scratch, 2 * NH * T * T * 4, &err), 0);
    al_attention_forward_cuda(&g_gpu, go, gl, gq, gds, B, T, C, NH, scratch);
    al_attention_backward_cuda(&g_gpu, gdq, gdo, gq, gl, gds, B, T, C, NH, scratch);
    down(out, go, sizeof out);
    down(lse, gl, sizeof lse);
    down(dqkv, gdq, sizeof dqkv);
    assert_err_below("cuda attention forward", t_max_rel_err(out, rout, N * C), TOL);
    assert_err_below("cuda attention lse", t_max_rel_err(lse, rlse, B * NH * T), TOL);
    assert_err_below("cuda attention dqkv", t_max_rel_err(dqkv, rdqkv, N * 3 * C), TOL);
    void *all[] = {gq, go, gl, gdo, gdq, gds, scratch};
    for (size_t i = 0; i < AL_ARRAY_LEN(all); i++) al_cuda_release(&g_gpu, all[i]);
    free(dq), free(ddo);
}

static void test_encoder_ce_adamw(void **state) {
    (void)state;
    al_rng r;
    al_rng_seed(&r, 3);
    int tok[N], pos[N], target[N];
    for (int i = 0; i < N; i++) {
        tok[i] = (int)al_rng_below(&r, V);
        pos[i] = i % T;
        target[i] = i % 7 == 0 ? -1 : (int)al_rng_below(&r, V);
    }
    tok[1] = tok[5] = 9;
    static float wte[VP * C], wpe[T * C], enc[N * C], dout[N * C], gte[VP * C], gpe[T * C];
    t_fill(&r, wte, VP * C, 1.0);
    t_fill(&r, wpe, T * C, 1.0);
    t_fill(&r, dout, N * C, 1.0);
    double *dte = t_to_d(wte, VP * C), *dpe = t_to_d(wpe, T * C), *ddo = t_to_d(dout, N * C);
    static double renc[N * C], rgte[VP * C], rgpe[T * C];
    al_encoder_forward_ref(renc, tok, pos, dte, dpe, N, C);
    al_encoder_backward_ref(rgte, rgpe, ddo, tok, pos, N, C);
    int *gtok = up(tok, sizeof tok), *gpos = up(pos, sizeof pos), *gtg = up(target, sizeof target);
    float *gwte = up(wte, sizeof wte), *gwpe = up(wpe, sizeof wpe), *genc = up(enc, sizeof enc);
    float *gdo = up(dout, sizeof dout), *ggte = up(gte, sizeof gte), *ggpe = up(gpe, sizeof gpe);
    al_encoder_forward_cuda(&g_gpu, genc, gtok, gpos, gwte, gwpe, N, C);
    al_encoder_backward_cuda(&g_gpu, ggte, ggpe, gdo, gtok, gpos, N, C);
    down(enc, genc, sizeof enc);
    down(gte, ggte, sizeof gte);
    down(gpe, ggpe, sizeof gpe);
    assert_err_below("cuda encoder forward", t_max_rel_err(enc, renc, N * C), TOL);
    assert_err_below("cuda encoder dwte", t_max_rel_err(gte, rgte, VP * C), TOL);
    assert_err_below("cuda encoder dwpe", t_max_rel_err(gpe, rgpe, T * C), TOL);

    static float logits[N * VP], losses[N];
    t_fill(&r, logits, N * VP, 4.0);
    double *dl = t_to_d(logits, N * VP);
    static double rlosses[N];
    al_crossentropy_forward_ref(rlosses, dl, target, N, V, VP);
    al_crossentropy_backward_ref(dl, target, 0.5, N, V, VP);
    float *glog = up(logits, sizeof logits), *glos = up(losses, sizeof losses);
    al_crossentropy_forward_cuda(&g_gpu, glos, glog, gtg, N, V, VP);
    al_crossentropy_backward_cuda(&g_gpu, glog, gtg, 0.5f, N, V, VP);
    down(losses, glos, sizeof losses);
    down(logits, glog, sizeof logits);
    assert_err_below("cuda crossentropy losses", t_max_rel_err(losses, rlosses, N), TOL);
    assert_err_below("cuda crossentropy dlogits", t_max_rel_err(logits, dl, N * VP), TOL);

    enum { P = 5000 };
    static float p[P], gr[P], m[P], v[P];
    t_fill(&r, p, P, 1.0);
    t_fill(&r, gr, P, 1.0);
    double *dp = t_to_d(p, P), *dg = t_to_d(gr, P);
    static double dm[P], dv[P];
    float *gp = up(p, sizeof p), *gg = up(gr, sizeof gr), *gm = up(m, sizeof m),
          *gv = up(v, sizeof v);
    for (int t = 1; t <= 3; t++) {
        al_adamw_update_ref(dp, dg, dm, dv, P, 1e-2, 0.9, 0.95, 1e-8, 0.1, t);
        al_adamw_update_cuda(&g_gpu, gp, gg, gm, gv, P, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    down(p, gp, sizeof p);
    assert_err_below("cuda adamw (3 steps)", t_max_rel_err(p, dp, P), TOL);
    void *all[] = {gtok, gpos, gtg, gwte, gwpe, genc, gdo, ggte, ggpe, glog, glos, gp, gg, gm, gv};
    for (size_t i = 0; i < AL_ARRAY_LEN(all); i++) al_cuda_release(&g_gpu, all[i]);
    free(dte), free(dpe), free(ddo), free(dl), free(dp), free(dg);
}

int main(void) {
    al_err err = {0};
    if (al_cuda_init(&g_gpu, 0, &err) != 0) {
        printf("SKIP: %s\n", err.msg);
        return 77;
    }
    printf("GPU: %s\n", g_gpu.name);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_matmul_gelu),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_encoder_ce_adamw),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    al_cuda_free(&g_gpu);
    return rc;
}
