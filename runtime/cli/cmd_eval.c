/* cmd_eval.c -- `autoloco eval`: a checkpoint's loss on a token file. */
#include "al_store.h"
#include "al_cli.h"
#include "al_train.h"

#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void eval_usage(FILE *f) {
    fprintf(f,
            "usage: autoloco eval --ckpt PATH --data FILE.bin [options]\n\n"
            "Mean cross-entropy (nats per token) and perplexity of a checkpoint on a token\n"
            "file, exactly as training evaluates its validation split: microbatches of\n"
            "--batch rows x --seq tokens in file order, every full microbatch the file holds\n"
            "(or the first --batches). docs packing restarts positions at each document;\n"
            "stream packing reads fixed windows of the token stream at positions 0..seq-1.\n\n"
            "options:\n"
            "  --ckpt PATH        checkpoint folder, or a folder of step-* checkpoints (newest)\n"
            "  --data FILE.bin    token file (autoloco data prep, or llm.c's GPT-2 files)\n"
            "  --batch B          rows per microbatch (default 16, as [inner] batch)\n"
            "  --seq T            tokens per row (default: the preset's context length)\n"
            "  --packing P        docs|stream (default docs, as [data] packing)\n"
            "  --batches N        evaluate the first N microbatches (default 0 = all)\n"
            "  --theta W          auto|local|global (default auto: theta_global where present)\n"
            "  --json             one JSON object\n");
}

int al_cmd_eval(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {
        {"ckpt", required_argument, 0, 'c'},    {"data", required_argument, 0, 'd'},
        {"batch", required_argument, 0, 'b'},   {"seq", required_argument, 0, 'T'},
        {"packing", required_argument, 0, 'P'}, {"batches", required_argument, 0, 'n'},
        {"theta", required_argument, 0, 'W'},   {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},          {0, 0, 0, 0}};
    const char *ckpt = NULL, *data = NULL;
    long batch = 16, seq = 0, batches = 0;
    al_packing packing = AL_PACK_DOCS;
    al_theta theta = AL_THETA_AUTO;
    int json = 0, ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            ckpt = optarg;
            break;
        case 'd':
            data = optarg;
            break;
        case 'b':
            rc = al_cli_int("--batch", optarg, 1, 65536, &batch, err);
            break;
        case 'T':
            rc = al_cli_int("--seq", optarg, 1, 1 << 20, &seq, err);
            break;
        case 'P':
            rc = al_packing_parse(optarg, &packing, err);
            break;
        case 'n':
            rc = al_cli_int("--batches", optarg, 0, 1 << 30, &batches, err);
            break;
        case 'W':
            rc = al_theta_parse(optarg, &theta, err);
            break;
        case 'j':
            json = 1;
            break;
        case 'h':
            eval_usage(stdout);
            return 0;
        default:
            eval_usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    if (optind < argc)
        return al_errf(err, AL_EINVAL, "eval: unexpected argument '%s'", argv[optind]);
    if (!ckpt || !data)
        return al_errf(err, AL_EINVAL, "eval: --ckpt PATH and --data FILE.bin are required");
    al_log log;
    al_log_init(&log, AL_LOG_WARN, stderr);
    al_model_config cfg;
    float *params = NULL;
    char dir[4096];
    if ((rc = al_ckpt_read_params(ckpt, &theta, &log, &cfg, &params, dir, sizeof dir, err)))
        return rc;
    al_tokens tok = {0};
    al_train_opts o;
    al_train_opts_default(&o);
    o.batch = (int)batch;
    o.seq = seq ? (int)seq : cfg.T;
    o.packing = packing;
    double loss = NAN, t0 = al_now();
    rc = al_tokens_load(&tok, data, err);
    if (rc == 0) rc = al_eval_params(&cfg, params, &o, &tok, (int)batches, &loss, err);
    if (rc == 0 && json) {
        json_t *j = json_pack(
            "{s:s, s:s, s:s, s:s, s:i, s:i, s:s, s:I, s:f, s:f, s:f}", "checkpoint", dir, "theta",
            theta == AL_THETA_GLOBAL ? "global" : "local", "preset", cfg.preset, "data", data,
            "batch", o.batch, "seq", o.seq, "packing", al_packing_name(packing), "batches",
            (json_int_t)batches, "loss", loss, "perplexity", exp(loss), "seconds", al_now() - t0);
        char *js = j ? json_dumps(j, JSON_COMPACT) : NULL;
        printf("%s\n", js ? js : "{}");
        free(js);
        json_decref(j);
    } else if (rc == 0)
        printf("eval %s (theta_%s, preset %s) on %s: loss %.6f, perplexity %.4f (%s packing, "
               "microbatches of %dx%d)\n",
               dir, theta == AL_THETA_GLOBAL ? "global" : "local", cfg.preset, data, loss,
               exp(loss), al_packing_name(packing), o.batch, o.seq);
    al_tokens_free(&tok);
    free(params);
    return rc;
}
