/* cmd_train.c -- `autoloco train`: train a model on one worker from a config. */
#include "al_store.h"
#include "al_cli.h"

#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The one piece of global state: a signal can only reach us through one. */
static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {
    g_stop = sig;
}

static void train_usage(FILE *f) {
    fprintf(f, "usage: autoloco train [-c FILE.ini] [--set section.key=value]... [options]\n\n"
               "Train a GPT model on one worker (CPU or GPU). Prints step, loss, learning\n"
               "rate and tokens/s; evaluates on the validation split; checkpoints at the\n"
               "end, every [checkpoint] every steps, and on SIGINT/SIGTERM (then exits 0).\n\n"
               "options:\n"
               "  -c, --config FILE   INI configuration (see --help-config for every key)\n"
               "  --set S.K=V         override one key, e.g. --set inner.steps=500\n"
               "  --steps N           same as --set inner.steps=N\n"
               "  --threads N         same as --set inner.threads=N\n"
               "  --resume PATH       continue from a checkpoint folder, or the newest valid\n"
               "                      one under PATH\n"
               "  --fresh             start at step 0 even if [checkpoint] dir holds\n"
               "                      checkpoints (without --resume or --fresh, refused)\n"
               "  --workers W         same as --set inner.workers=W (> 1: W worker processes\n"
               "                      sharing one model over shared memory)\n"
               "  --mode odc|fsdp     same as --set inner.mode=...\n"
               "  --device cpu|cuda   same as --set inner.device=... (cuda: the GPU backend;\n"
               "                      with workers > 1, one GPU per worker, mod the count)\n"
               "  --help-config       list every configuration key with its default\n");
}

typedef struct run {
    al_config cfg;
    al_tokens train, val;
    al_trainer tr;
    const al_backend *be; /* the single worker's device (NULL: not opened) */
    al_log log;
    char hash[65];
    long ckpt_every; /* [checkpoint] every_steps (or every) */
} run;

static int save(run *r, al_err *err) {
    char dir[4096];
    int rc = al_ckpt_save(r->cfg.checkpoint_dir, &r->tr, r->hash, (int)r->cfg.checkpoint_keep, dir,
                          sizeof dir, err);
    if (rc == 0) printf("saved checkpoint %s\n", dir);
    return rc;
}

static int eval_and_print(run *r, al_err *err) {
    double vl;
    int rc = al_trainer_eval(&r->tr, (int)r->cfg.inner_eval_batches, &vl, err);
    if (rc == 0) printf("eval  step %6ld | val loss %.4f\n", r->tr.step, vl);
    fflush(stdout);
    return rc;
}

static int train_loop(run *r, al_err *err) {
    al_config *c = &r->cfg;
    long steps = c->inner_steps;
    double t_win = 0, loss_win = 0;
    long tok_win = 0, n_win = 0;
    double t_start = al_now();
    long tok_total = 0;
    int rc = 0;
    while (r->tr.step < steps && !g_stop) {
        al_step_stats st;
        rc = al_trainer_step(&r->tr, &st, err);
        if (rc) return rc;
        t_win += st.seconds;
        tok_win += st.tokens;
        tok_total += st.tokens;
        loss_win += st.loss;
        n_win++;
        long s = r->tr.step;
        if (s % c->inner_log_every == 0 || s == steps) {
            double eta = t_win / (double)n_win * (double)(steps - s);
            printf("step %6ld/%ld | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | eta %.0f s\n", s,
                   steps, loss_win / (double)n_win, st.lr, st.grad_norm, (double)tok_win / t_win,
                   eta);
            fflush(stdout);
            t_win = loss_win = 0;
            tok_win = n_win = 0;
        }
        if (r->val.tok && c->inner_eval_every > 0 && s % c->inner_eval_every == 0 && s != steps)
            if ((rc = eval_and_print(r, err))) return rc;
        if (r->ckpt_every > 0 && s % r->ckpt_every == 0 && s != steps)
            if ((rc = save(r, err))) return rc;
    }
    if (g_stop) {
        printf("signal %d: stopping after step %ld\n", (int)g_stop, r->tr.step);
        return save(r, err);
    }
    double secs = al_now() - t_start;
    if (r->val.tok && (rc = eval_and_print(r, err))) return rc;
    printf("done: %ld steps, %ld tokens in %.1f s (%.0f tok/s)\n", r->tr.step, tok_total, secs,
           secs > 0 ? (double)tok_total / secs : 0.0);
    return save(r, err);
}

int al_cmd_train(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'},  {"set", required_argument, 0, 's'},
        {"steps", required_argument, 0, 'n'},   {"threads", required_argument, 0, 't'},
        {"resume", required_argument, 0, 'r'},  {"fresh", no_argument, 0, 'F'},
        {"help-config", no_argument, 0, 'H'},   {"help", no_argument, 0, 'h'},
        {"workers", required_argument, 0, 'W'}, {"mode", required_argument, 0, 'M'},
        {"device", required_argument, 0, 'D'},  {0, 0, 0, 0}};
    run r;
    memset(&r, 0, sizeof r);
    al_log_init(&r.log, AL_LOG_INFO, stderr);
    int rc = al_config_init(&r.cfg, err);
    if (rc) return rc;
    const char *resume = NULL;
    int fresh = 0;
    /* first pass: the config file, so that later flags override it */
    optind = 1;
    int ch;
    while ((ch = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        if (ch == 'h') {
            train_usage(stdout);
            goto out;
        }
        if (ch == 'H') {
            al_config_print_help(stdout);
            goto out;
        }
        if (ch == '?') {
            train_usage(stderr);
            rc = AL_CLI_USAGE;
            goto out;
        }
        if (ch == 'c' && (rc = al_config_load(&r.cfg, optarg, err))) goto out;
    }
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        if (ch == 's')
            rc = al_config_set_arg(&r.cfg, optarg, err);
        else if (ch == 'n' && (rc = al_config_set(&r.cfg, "inner", "steps", optarg, err)))
            al_err_prefix(err, "--steps");
        else if (ch == 't' && (rc = al_config_set(&r.cfg, "inner", "threads", optarg, err)))
            al_err_prefix(err, "--threads");
        else if (ch == 'W' && (rc = al_config_set(&r.cfg, "inner", "workers", optarg, err)))
            al_err_prefix(err, "--workers");
        else if (ch == 'M' && (rc = al_config_set(&r.cfg, "inner", "mode", optarg, err)))
            al_err_prefix(err, "--mode");
        else if (ch == 'D' && (rc = al_config_set(&r.cfg, "inner", "device", optarg, err)))
            al_err_prefix(err, "--device");
        else if (ch == 'r')
            resume = optarg;
        else if (ch == 'F')
            fresh = 1;
        if (rc) goto out;
    }
    if (resume && fresh) {
        rc = al_errf(err, AL_EINVAL, "train: --resume and --fresh: say one of them");
        goto out;
    }
    if (optind < argc) {
        rc = al_errf(err, AL_EINVAL, "train: unexpected argument '%s'", argv[optind]);
        goto out;
    }
    al_config *c = &r.cfg;
    if (!resume && (rc = al_cli_fresh_ok("train", c->checkpoint_dir, fresh, err))) goto out;
    al_config_hash(c, r.hash);
    int threads = c->inner_threads > 0 ? (int)c->inner_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    al_threads_set(threads);

    al_model_config mc;
    if ((rc = al_model_preset(&mc, c->model_preset, err))) goto out;
    al_train_opts o;
    if ((rc = al_config_train_opts(c, &o, err))) goto out;
    if ((rc = al_config_checkpoint_every(c, 't', &r.ckpt_every, err))) goto out;
    if (o.seq > mc.T) {
        rc = al_errf(err, AL_ECONFIG, "[inner] seq: %d exceeds preset '%s' context %d", o.seq,
                     mc.preset, mc.T);
        goto out;
    }
    /* one worker: this process opens the device (workers > 1 open their own,
     * after the fork: the parent must not initialise CUDA) */
    if (c->inner_workers == 1 && (rc = al_backend_open(&r.be, c->inner_device, 0, err))) goto out;
    /* fail before training, not after it, if checkpoints cannot be written */
    if ((rc = al_mkdirs(c->checkpoint_dir, err))) {
        al_err_prefix(err, "[checkpoint] dir");
        goto out;
    }
    if ((rc = al_tokens_load(&r.train, c->data_train, err))) goto out;
    if (c->data_val[0] && (rc = al_tokens_load(&r.val, c->data_val, err))) goto out;
    if (c->inner_workers > 1) { /* one site, W worker processes (issue 3) */
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        rc = al_train_workers(c, &mc, &o, &r.train, r.val.tok ? &r.val : NULL, r.hash, resume,
                              &r.log, &g_stop, err);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        goto out;
    }
    o.backend = r.be;
    if ((rc = al_trainer_init(&r.tr, &mc, &o, &r.train, r.val.tok ? &r.val : NULL, err))) goto out;
    if (resume) {
        char dir[4096];
        if ((rc = al_ckpt_find(resume, &r.log, dir, sizeof dir, err))) goto out;
        if ((rc = al_ckpt_load(dir, &r.tr, r.hash, &r.log, err))) goto out;
        printf("resumed from %s at step %ld\n", dir, r.tr.step);
    }
    printf("autoloco train: preset %s (%zu parameters, L=%d C=%d NH=%d) on %s, %d x %d tokens x "
           "%d accum, %ld steps, %d threads, packing %s\n",
           mc.preset, r.tr.model.lay.nparams, mc.L, mc.C, mc.NH, r.be->device, r.tr.o.batch,
           r.tr.o.seq, o.accum, o.steps, threads, c->data_packing);
    printf("data: %s (%zu tokens, %zu documents)", r.train.path, r.train.n, r.train.ndocs);
    if (r.val.tok) printf(", val %s (%zu tokens)", r.val.path, r.val.n);
    printf("\n");
    fflush(stdout);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    rc = train_loop(&r, err);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
out:
    al_trainer_free(&r.tr);
    al_backend_close(r.be);
    al_tokens_free(&r.train);
    al_tokens_free(&r.val);
    al_config_free(&r.cfg);
    return rc;
}
