/*
 * bench_gpu.c -- `autoloco bench gpu`: training-step throughput of the CUDA
 * backend (the same model.c and trainer as the CPU) for the presets `small`
 * and `gpt2-124m`, or one --preset.
 *
 * Achieved FLOP/s count a step as 6*N*tokens + 6*L*C*T*tokens (N = parameters
 * incl. embeddings; the second term is causal attention's QK^T and PV, forward
 * and backward), the formula of `bench inner`. fp32 throughout (cuBLAS in
 * pedantic fp32 mode, no TF32), so compare with the GPU's fp32 peak.
 */
#include "al_bench.h"
#include "al_cli.h"

#include <getopt.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: autoloco bench gpu [--preset P] [--batch B] [--seq T] [--steps N] [--json]\n\n"
            "Times full training steps (forward, backward, clipping, AdamW) on the GPU\n"
            "on random tokens: tokens/s and achieved TFLOP/s (6*N + 6*L*C*T FLOPs per\n"
            "token). Defaults: presets small (batch 16 x seq 256) and gpt2-124m (batch\n"
            "8 x seq 1024), 20 steps each. --json adds one JSON object per preset.\n");
}

int al_bench_gpu(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {{"preset", required_argument, 0, 'p'},
                                         {"batch", required_argument, 0, 'b'},
                                         {"seq", required_argument, 0, 's'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *presets[2] = {"small", "gpt2-124m"};
    long batches[2] = {16, 8}, seqs[2] = {256, 1024}, batch = 0, seq = 0, steps = 20;
    int npresets = 2, json = 0, ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'p':
            presets[0] = optarg;
            npresets = 1;
            break;
        case 'b':
            rc = al_cli_int("--batch", optarg, 1, 4096, &batch, err);
            break;
        case 's':
            rc = al_cli_int("--seq", optarg, 1, 1 << 16, &seq, err);
            break;
        case 'n':
            rc = al_cli_int("--steps", optarg, 1, 1000, &steps, err);
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    const al_backend *be = NULL;
    if ((rc = al_backend_open(&be, "cuda", 0, err))) return rc;
    for (int i = 0; i < npresets && rc == 0; i++) {
        al_model_config mc;
        if ((rc = al_model_preset(&mc, presets[i], err))) break;
        long b = batch ? batch : (npresets == 1 ? 8 : batches[i]);
        long t = seq ? seq : (npresets == 1 ? mc.T : seqs[i]);
        if (t > mc.T) {
            rc = al_errf(err, AL_EINVAL, "--seq %ld exceeds preset '%s' context %d", t, mc.preset,
                         mc.T);
            break;
        }
        al_bench_steps_result res;
        if ((rc = al_bench_steps(&mc, be, (int)b, (int)t, (int)steps, &res, err))) {
            al_err_prefix(err, "bench gpu: preset %s", mc.preset);
            break;
        }
        double tokens = (double)(b * t), tps = tokens / res.step_s,
               tflops = res.flops / res.step_s * 1e-12;
        printf("bench gpu: preset %s (%zu params) on %s, batch %ld x seq %ld, %ld steps\n",
               mc.preset, res.params, res.device, b, t, steps);
        printf("  %-22s %12.2f\n  %-22s %12.0f\n  %-22s %12.2f\n  %-22s %12.4f\n",
               "ms per step (median)", res.step_s * 1e3, "tokens/s", tps, "TFLOP/s (fp32)", tflops,
               "last step loss", res.loss);
        if (json)
            printf("{\"preset\":\"%s\",\"device\":\"%s\",\"batch\":%ld,\"seq\":%ld,\"params\":%zu,"
                   "\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,\"tflops\":%.4f}\n",
                   mc.preset, res.device, b, t, res.params, res.step_s * 1e3, tps, tflops);
        fflush(stdout);
    }
    al_backend_close(be);
    return rc;
}
