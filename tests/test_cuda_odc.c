/*
 * test_cuda_odc.c -- the ODC engine and the FSDP baseline on GPU workers
 * (transport/nccl) against the CPU.
 *
 *  - odc on GPUs, W = 1, 2, 3 worker processes (CUDA IPC; they may share one
 *    GPU), two runs of 3 + 2 steps (state goes back to the segment between
 *    runs): parameters within TOL_PARAM of the single-worker CPU trainer on
 *    the same 5 minibatches (max difference relative to the largest
 *    parameter), every step's loss within TOL_LOSS, and within TOL_PARAM of the
 *    CPU engine with the same W.
 *  - fsdp on GPUs over NCCL, W = 1 and, where at least W GPUs exist, W = 2, 3
 *    (NCCL refuses two ranks on one device: with fewer GPUs that W is skipped,
 *    and the test says so): the same tolerances against the same reference,
 *    and parameters within TOL_PARAM of GPU odc with the same W.
 *
 * Tolerances: TOL_PARAM 1e-4, TOL_LOSS 1e-5. The devices differ in fp32
 * summation order (and the GPU engine cuts units into ceil(n/W) chunks), as
 * the CPU engine's test does, plus the GPU kernels' rounding (1e-4 per kernel,
 * tests/test_cuda.c).
 *
 * Without a usable GPU: "SKIP: <reason>", exit 77. The check runs in a child
 * process: CUDA must not be initialised in a parent that forks GPU workers.
 */
#include "al_test.h"

#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "al_odc.h"

#define STEPS     5
#define PIECES    12
#define TOL_PARAM 1e-4
#define TOL_LOSS  1e-5

#include "odc_fixture.h"

static int g_ngpu; /* GPUs seen by the probe child */

static int setup(void **state) {
    int rc = odc_fixture_setup(state, "test-cuda-odc");
    ((fixture *)*state)->ngpu = g_ngpu;
    return rc;
}

static int teardown(void **state) {
    return odc_fixture_teardown(state);
}

static void test_gpu_engines(void **state) {
    fixture *f = *state;
    al_model_config mc;
    al_err err = {0};
    assert_int_equal(al_model_preset(&mc, "tiny", &err), 0);
    al_layout lay;
    assert_int_equal(al_layout_init(&lay, &mc, &err), 0);
    size_t P = lay.nparams;
    float *ref = malloc(P * sizeof(float)), *got = malloc(P * sizeof(float));
    double ref_loss[STEPS], loss[STEPS];
    reference(f, &mc, ref, ref_loss);
    double *refd = t_to_d(ref, P), *odcd[4] = {0};
    char what[96];
    for (int W = 1; W <= 3; W++) odcd[W] = odc_vs_cpu(f, &mc, W, "cuda", refd, ref_loss, P);
    for (int W = 1; W <= 3; W++) {
        if (W > f->ngpu) {
            print_message("  SKIP: fsdp over NCCL with W=%d needs %d GPUs, %d present (NCCL "
                          "refuses two ranks on one GPU)\n",
                          W, W, f->ngpu);
            continue;
        }
        if (run_engine(f, &mc, AL_MODE_FSDP, W, "cuda", got, loss, &err))
            fail_msg("cuda fsdp W=%d: %s", W, err.msg);
        snprintf(what, sizeof what, "cuda fsdp W=%d vs cpu trainer:", W);
        check(what, got, loss, refd, ref_loss, P);
        snprintf(what, sizeof what, "cuda fsdp W=%d vs cuda odc W=%d: params", W, W);
        assert_err_below(what, t_max_rel_err(got, odcd[W], P), TOL_PARAM);
    }
    for (int W = 1; W <= 3; W++) free(odcd[W]);
    free(refd), free(ref), free(got);
    al_layout_free(&lay);
}

/* GPUs a child process sees (CUDA stays uninitialised here); -1 with the
 * reason in `why` when none is usable. */
static int probe(char *why, size_t n) {
    if (!al_odc_gpu_available()) {
        snprintf(why, n, "this build has no CUDA backend with NCCL");
        return -1;
    }
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        const al_backend *be = NULL;
        al_err err = {0};
        int count = al_backend_device_count("cuda");
        if (al_backend_open(&be, "cuda", 0, &err) == 0) {
            snprintf(err.msg, sizeof err.msg, "%d %s", count, be->device);
            al_backend_close(be);
        } else {
            count = -1;
        }
        char msg[600];
        int len = snprintf(msg, sizeof msg, "%d|%s", count, err.msg);
        ssize_t wr = write(fd[1], msg, (size_t)len);
        _exit(wr == len ? 0 : 1);
    }
    close(fd[1]);
    char buf[600] = {0};
    ssize_t got = read(fd[0], buf, sizeof buf - 1);
    close(fd[0]);
    waitpid(pid, NULL, 0);
    if (got <= 0) {
        snprintf(why, n, "GPU probe process failed");
        return -1;
    }
    char *bar = strchr(buf, '|');
    snprintf(why, n, "%s", bar ? bar + 1 : buf);
    return atoi(buf);
}

int main(void) {
    char why[600];
    g_ngpu = probe(why, sizeof why);
    if (g_ngpu < 1) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    printf("GPU: %s\n", why);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_gpu_engines, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
