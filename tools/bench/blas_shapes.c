/*
 * blas_shapes.c -- the GEMM calls of one training step, timed in isolation
 * against whichever CBLAS it is linked with (tools/bench/blas-compare builds
 * it once per library and runs the builds interleaved).
 *
 * For a preset (L, C, NH, Vp) and a microbatch B x T it replays every sgemm
 * the CPU kernels issue in one step, with the kernels' exact transposes,
 * leading dimensions and beta:
 *   matmul forward   out[N,OC] = inp[N,IC] w[OC,IC]^T        (NoTrans, Trans)
 *   matmul dinp      dinp[N,IC] = dout[N,OC] w[OC,IC]        (NoTrans, NoTrans)
 *   matmul dw        dw[OC,IC] += dout^T inp                 (Trans, NoTrans, beta 1)
 *   attention        per (row, head) and block of 32 queries [i0, i1) against
 *                    keys [0, i1) (rows of one document, as `bench inner`):
 *                    S = q k^T, O = P v; backward S again, dP = dO v^T,
 *                    dq = dS k, dk += dS^T q, dv += P^T dO
 * and prints, per call kind, the median time of a step's worth of calls and
 * its GFLOP/s, in thread CPU time. Single-threaded: the kernels call sgemm
 * from one thread per row range or (row, head).
 *   blas_shapes L C NH Vp B T [repeats]   ->  one JSON object per kind, then a total
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

/* CPU time of this thread: the calls are single-threaded, and a busy machine
 * (other processes on the cores) then costs them cache, not their count */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct gemm {
    const char *kind;
    enum CBLAS_TRANSPOSE ta, tb;
    int m, n, k, lda, ldb, ldc, calls;
    float beta;
} gemm;

static float *buf(size_t n) {
    float *p = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
    return p;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: blas_shapes L C NH Vp B T [repeats]\n");
        return 2;
    }
    int L = atoi(argv[1]), C = atoi(argv[2]), NH = atoi(argv[3]), Vp = atoi(argv[4]);
    int B = atoi(argv[5]), T = atoi(argv[6]), reps = argc > 7 ? atoi(argv[7]) : 21;
    int N = B * T, hs = C / NH, C3 = 3 * C;
    int shapes[5][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, Vp}};
    int per[5] = {L, L, L, L, 1};
    gemm g[128];
    int ng = 0;
    for (int s = 0; s < 5; s++) {
        int IC = shapes[s][0], OC = shapes[s][1];
        g[ng++] = (gemm){"fwd", CblasNoTrans, CblasTrans, N, OC, IC, IC, IC, OC, per[s], 0.0f};
        g[ng++] = (gemm){"dinp", CblasNoTrans, CblasNoTrans, N, IC, OC, OC, IC, IC, per[s], 0.0f};
        g[ng++] = (gemm){"dw", CblasTrans, CblasNoTrans, OC, IC, N, OC, IC, IC, per[s], 1.0f};
    }
    int bh = L * B * NH;
    for (int i0 = 0; i0 < T && ng + 5 <= 128; i0 += 32) {
        int mq = T - i0 < 32 ? T - i0 : 32, nk = i0 + mq;
        g[ng++] = (gemm){"att_qk", CblasNoTrans, CblasTrans, mq, nk, hs, C3, C3, nk, 2 * bh, 0.0f};
        g[ng++] = (gemm){"att_pv", CblasNoTrans, CblasNoTrans, mq, hs, nk, nk, C3, C, bh, 0.0f};
        g[ng++] = (gemm){"att_dp", CblasNoTrans, CblasTrans, mq, nk, hs, C, C3, nk, bh, 0.0f};
        g[ng++] = (gemm){"att_dq", CblasNoTrans, CblasNoTrans, mq, hs, nk, nk, C3, C3, bh, 0.0f};
        g[ng++] = (gemm){"att_dkv", CblasTrans, CblasNoTrans, nk, hs, mq, nk, C3, C3, 2 * bh, 1.0f};
    }
    size_t big = (size_t)N * 4 * C > (size_t)N * Vp ? (size_t)N * 4 * C : (size_t)N * Vp;
    if (big < (size_t)Vp * 4 * C) big = (size_t)Vp * 4 * C;
    float *A = buf(big), *Bm = buf(big), *Cm = buf(big);
    double total = 0, total_flops = 0, *t = malloc((size_t)reps * sizeof(double));
    for (int i = 0; i < ng; i++) {
        gemm *q = &g[i];
        /* one call per repeat for matmuls (the step's L calls of a shape are
         * identical); attention calls are tiny, so time a step's worth */
        int inner = q->kind[0] == 'a' ? q->calls : 1;
        for (int r = -2; r < reps; r++) {
            double t0 = now();
            for (int c = 0; c < inner; c++)
                cblas_sgemm(CblasRowMajor, q->ta, q->tb, q->m, q->n, q->k, 1.0f, A, q->lda, Bm,
                            q->ldb, q->beta, Cm, q->ldc);
            if (r >= 0) t[r] = (now() - t0) / inner;
        }
        qsort(t, (size_t)reps, sizeof(double), cmp);
        double s = t[reps / 2], fl = 2.0 * q->m * q->n * q->k;
        total += s * q->calls;
        total_flops += fl * q->calls;
        printf("{\"kind\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"calls\":%d,\"us\":%.2f,"
               "\"gflops\":%.2f}\n",
               q->kind, q->m, q->n, q->k, q->calls, s * 1e6, fl / s * 1e-9);
    }
    printf("{\"kind\":\"total\",\"ms_per_step\":%.3f,\"gflops\":%.2f}\n", total * 1e3,
           total_flops / total * 1e-9);
    free(A), free(Bm), free(Cm), free(t);
    return 0;
}
