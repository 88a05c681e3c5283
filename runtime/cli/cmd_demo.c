/* cmd_demo.c -- `autoloco demo`: a whole multi-site run on this machine.
 *
 * Makes a run folder with a CA and per-site certificates, one config per site
 * (IID: every site reads the whole corpus in its own order), starts one agent
 * process per site on loopback with mutual TLS and a dashboard, shows their
 * progress, and prints what the run cost on the wire against DiLoCo at H_base
 * and DDP for the same steps -- split into the syncs the policy avoided and
 * the bytes the codec saved -- and a sample from the final theta_global. The
 * microbatch follows the preset: rows of its context length T, about 2048
 * tokens per microbatch. */
#include "al_cli.h"
#include "al_round.h"
#include "al_data.h"
#include "al_model.h"
#include "al_transport.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEMO_MAX 8

typedef struct demo {
    int sites, workers;
    int batch, seq; /* the microbatch, from the preset */
    const char *train_in, *val_in;
    long steps, h_base;
    const char *policy, *codec, *preset, *correction, *overlap;
    char dir[1024], train[1200], val[1200];
    int json, quiet;
    double deadline;
} demo;

static void demo_usage(FILE *f) {
    fprintf(f,
            "usage: autoloco demo [options]\n\n"
            "Run a complete multi-site training on this machine: N sites x W workers on\n"
            "loopback over mutual TLS, the `demo` model on the bundled fortunes corpus, the\n"
            "AutoLoCo policy, a dashboard per site; then a table of loss, syncs, H history,\n"
            "bytes sent and the savings against DiLoCo at H_base and DDP.\n\n"
            "options:\n"
            "  --sites N        sites (default 2, at most %d)\n"
            "  --workers W      worker processes per site (default 2)\n"
            "  --steps S        inner steps per site (default 600)\n"
            "  --policy P       fixed|adacomm|qsr|autoloco (default autoloco)\n"
            "  --h-base H       the DiLoCo interval to compare with (default 50)\n"
            "  --codec C        pseudo-gradient codec (default int8+zstd)\n"
            "  --correction C   autoloco|none (default autoloco)\n"
            "  --overlap O      none|delayed|delayed-mid|streaming: the overlapped modes\n"
            "                   train on while a round's exchange crosses the link;\n"
            "                   delayed-mid starts the next interval closer to the next\n"
            "                   theta_global; streaming syncs 16 fragments of theta in\n"
            "                   turn (docs/outer.md; default none)\n"
            "  --preset P       model preset (default demo); the microbatch is rows of its\n"
            "                   context length T, about 2048 tokens\n"
            "  --train FILE     training token file (default: the fortunes corpus; the\n"
            "  --val FILE       gpt2-124m preset needs GPT-2 token files, e.g. llm.c's)\n"
            "  --dir DIR        run folder (default: a new one under /tmp)\n"
            "  --json           print one JSON object as the last line\n",
            DEMO_MAX);
}

int al_cli_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    socklen_t l = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &l) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

static int write_config(const demo *d, int s, const int *grpc, const int *dash, al_err *err) {
    char path[1200];
    snprintf(path, sizeof path, "%s/site-%c.ini", d->dir, 'a' + s);
    FILE *f = fopen(path, "w");
    if (!f) return al_errf(err, AL_EIO, "%s: cannot create", path);
    fprintf(
        f,
        "; written by autoloco demo\n[site]\nname = %c\nlisten = 127.0.0.1:%d\nrun_id = demo\n\n",
        'a' + s, grpc[s]);
    fprintf(f, "[peers]\n");
    for (int p = 0; p < d->sites; p++)
        if (p != s) fprintf(f, "%c = 127.0.0.1:%d\n", 'a' + p, grpc[p]);
    fprintf(f, "\n[tls]\nca = %s/certs/ca.pem\ncert = %s/certs/%c.pem\nkey = %s/certs/%c.key\n\n",
            d->dir, d->dir, 'a' + s, d->dir, 'a' + s);
    fprintf(f, "[model]\npreset = %s\n\n[data]\ntrain = %s\nval = %s\npacking = docs\n\n",
            d->preset, d->train, d->val);
    fprintf(f,
            "[inner]\nbatch = %d\nseq = %d\nsteps = %ld\nlr = 3e-3\nwarmup = 50\n"
            "workers = %d\nthreads = 1\nseed = 1337\neval_every = 0\neval_batches = 0\n\n",
            d->batch, d->seq, d->steps, d->workers);
    fprintf(f, "[outer]\nlr = 0.7\nmomentum = 0.9\ncorrection = %s\ncodec = %s\noverlap = %s\n\n",
            d->correction, d->codec, d->overlap);
    fprintf(f, "[policy]\nname = %s\nh_base = %ld\n\n", d->policy, d->h_base);
    fprintf(f, "[round]\ndeadline_s = %g\nquorum = majority\n\n", d->deadline);
    fprintf(f, "[dashboard]\naddress = 127.0.0.1\nport = %d\n\n", dash[s]);
    fprintf(f, "[checkpoint]\ndir = %s/site-%c\nevery = 0\nkeep = 2\n", d->dir, 'a' + s);
    return fclose(f) == 0 ? 0 : al_errf(err, AL_EIO, "%s: write failed", path);
}

int al_cli_spawn_agent(const char *cfg, const char *log, int death_sig, al_err *err) {
    char self[1024];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        al_errf(err, AL_EIO, "cannot find my own executable");
        return -1;
    }
    self[n] = '\0';
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) {
        al_errf(err, AL_EIO, "fork failed");
        return -1;
    }
    if (pid == 0) {
        /* (the parent may have ended before prctl: then it is not ours) */
        if (death_sig && (prctl(PR_SET_PDEATHSIG, death_sig) != 0 || getppid() != parent))
            _exit(126);
        FILE *f = freopen(log, "w", stdout);
        if (f) dup2(fileno(stdout), 2);
        /* (a run folder given again with --dir: the demo starts over) */
        execl(self, self, "agent", "-c", cfg, "--fresh", (char *)NULL);
        _exit(127);
    }
    return (int)pid;
}

static pid_t spawn(const demo *d, int s, al_err *err) {
    char cfg[1200], log[1200];
    snprintf(cfg, sizeof cfg, "%s/site-%c.ini", d->dir, 'a' + s);
    snprintf(log, sizeof log, "%s/site-%c.log", d->dir, 'a' + s);
    return al_cli_spawn_agent(cfg, log, SIGTERM, err); /* they save and stop */
}

/* The last line of a file (for progress), into buf. */
static void last_line(const char *path, char *buf, size_t cap) {
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[8192];
    while (fgets(line, sizeof line, f))
        if (line[0] != '\n') snprintf(buf, cap, "%s", line);
    fclose(f);
    size_t l = strlen(buf);
    if (l && buf[l - 1] == '\n') buf[l - 1] = '\0';
}

int al_cli_corpus(const char *dir, char *train, size_t ntrain, char *val, size_t nval,
                  al_err *err) {
    if (access("data/fortunes/train.bin", R_OK) == 0 &&
        access("data/fortunes/val.bin", R_OK) == 0) {
        char cwd[512];
        if (!getcwd(cwd, sizeof cwd)) return al_errf(err, AL_EIO, "getcwd failed");
        snprintf(train, ntrain, "%s/data/fortunes/train.bin", cwd);
        snprintf(val, nval, "%s/data/fortunes/val.bin", cwd);
        return 0;
    }
    char out[1100];
    snprintf(out, sizeof out, "%s/data", dir);
    const char *in[] = {"/usr/share/games/fortunes"};
    al_prep_stats st;
    int rc = al_data_prep(in, 1, AL_FMT_FORTUNE, out, 0.05, 1, &st, err);
    if (rc) return al_err_prefix(err, "the corpus (apt-get install fortunes)");
    snprintf(train, ntrain, "%s/train.bin", out);
    snprintf(val, nval, "%s/val.bin", out);
    return 0;
}

static int prepare(demo *d, al_err *err) {
    if (!d->dir[0]) {
        snprintf(d->dir, sizeof d->dir, "/tmp/autoloco-demo-XXXXXX");
        if (!mkdtemp(d->dir)) return al_errf(err, AL_EIO, "cannot create a run folder in /tmp");
    } else {
        int rc = al_mkdirs(d->dir, err);
        if (rc) return rc;
    }
    /* the corpus: given, the setup's token files, or tokenized now */
    if (d->train_in || d->val_in) {
        if (!d->train_in || !d->val_in)
            return al_errf(err, AL_EINVAL, "demo: --train and --val go together");
        snprintf(d->train, sizeof d->train, "%s", d->train_in);
        snprintf(d->val, sizeof d->val, "%s", d->val_in);
    } else {
        int rc = al_cli_corpus(d->dir, d->train, sizeof d->train, d->val, sizeof d->val, err);
        if (rc) return al_err_prefix(err, "demo");
    }
    char certs[1100];
    snprintf(certs, sizeof certs, "%s/certs", d->dir);
    const char *names[DEMO_MAX];
    static const char *letters[DEMO_MAX] = {"a", "b", "c", "d", "e", "f", "g", "h"};
    for (int s = 0; s < d->sites; s++) names[s] = letters[s];
    return al_certs_create(certs, names, (size_t)d->sites, 30, err);
}

/* Both token files must be in the preset's vocabulary: say so before any
 * site starts (gpt2-124m reads GPT-2 tokens, the bundled corpus is bytes). */
static int check_data(const demo *d, const al_model_config *mc, al_err *err) {
    const char *files[] = {d->train, d->val};
    for (int i = 0; i < 2; i++) {
        al_tokens t;
        int rc = al_tokens_load(&t, files[i], err);
        if (rc) return al_err_prefix(err, "demo");
        if (t.vocab != mc->V)
            rc = al_errf(err, AL_EMISMATCH,
                         "demo: preset '%s' reads a vocabulary of %d tokens, %s has %d%s",
                         mc->preset, mc->V, files[i], t.vocab,
                         mc->V == 50257 ? " (give GPT-2 token files with --train and --val)"
                                        : " (choose another --preset)");
        al_tokens_free(&t);
        if (rc) return rc;
    }
    return 0;
}

int al_cmd_demo(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {{"sites", required_argument, 0, 's'},
                                         {"workers", required_argument, 0, 'w'},
                                         {"steps", required_argument, 0, 'n'},
                                         {"policy", required_argument, 0, 'p'},
                                         {"h-base", required_argument, 0, 'b'},
                                         {"codec", required_argument, 0, 'c'},
                                         {"correction", required_argument, 0, 'r'},
                                         {"overlap", required_argument, 0, 'o'},
                                         {"preset", required_argument, 0, 'P'},
                                         {"dir", required_argument, 0, 'd'},
                                         {"train", required_argument, 0, 't'},
                                         {"val", required_argument, 0, 'v'},
                                         {"json", no_argument, 0, 'j'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    demo d = {.sites = 2,
              .workers = 2,
              .steps = 600,
              .h_base = 50,
              .policy = "autoloco",
              .codec = "int8+zstd",
              .preset = "demo",
              .correction = "autoloco",
              .overlap = "none",
              .deadline = 60};
    long v;
    int ch, rc = 0;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 's':
            rc = al_cli_int("--sites", optarg, 1, DEMO_MAX, &v, err), d.sites = (int)v;
            break;
        case 'w':
            rc = al_cli_int("--workers", optarg, 1, 16, &v, err), d.workers = (int)v;
            break;
        case 'n':
            rc = al_cli_int("--steps", optarg, 1, 1L << 30, &d.steps, err);
            break;
        case 'b':
            rc = al_cli_int("--h-base", optarg, 1, 1L << 20, &d.h_base, err);
            break;
        case 'p':
            d.policy = optarg;
            break;
        case 'c':
            d.codec = optarg;
            break;
        case 'r':
            d.correction = optarg;
            break;
        case 'o':
            d.overlap = optarg;
            break;
        case 'P':
            d.preset = optarg;
            break;
        case 't':
            d.train_in = optarg;
            break;
        case 'v':
            d.val_in = optarg;
            break;
        case 'd':
            snprintf(d.dir, sizeof d.dir, "%s", optarg);
            break;
        case 'j':
            d.json = 1;
            break;
        case 'h':
            demo_usage(stdout);
            return 0;
        default:
            demo_usage(stderr);
            return AL_CLI_USAGE;
        }
        if (rc) return rc;
    }
    al_overlap ov;
    if ((rc = al_overlap_parse(d.overlap, &ov, err))) return al_err_prefix(err, "demo: --overlap");
    if (ov == AL_OVERLAP_DELAYED_MEAN)
        return al_errf(err, AL_EUNSUPPORTED,
                       "demo: --overlap: %s is the simulator's only (autoloco sim); "
                       "the agents run none, delayed, delayed-mid or streaming",
                       al_overlap_name(ov));
    al_model_config mc;
    if ((rc = al_model_preset(&mc, d.preset, err))) return al_err_prefix(err, "demo: --preset");
    d.seq = mc.T;
    d.batch = AL_MAX(1, 2048 / mc.T);
    if ((rc = prepare(&d, err))) return rc;
    if ((rc = check_data(&d, &mc, err))) return rc;
    int grpc[DEMO_MAX], dash[DEMO_MAX];
    for (int s = 0; s < d.sites; s++) {
        grpc[s] = al_cli_free_port();
        dash[s] = al_cli_free_port();
        if (grpc[s] <= 0 || dash[s] <= 0) return al_errf(err, AL_EIO, "no free port on 127.0.0.1");
    }
    for (int s = 0; s < d.sites; s++)
        if ((rc = write_config(&d, s, grpc, dash, err))) return rc;
    printf("autoloco demo: %d sites x %d workers, preset %s (microbatch %dx%d), %ld steps per "
           "site, policy %s (H_base %ld), codec %s, mutual TLS on loopback\n",
           d.sites, d.workers, d.preset, d.batch, d.seq, d.steps, d.policy, d.h_base, d.codec);
    printf("run folder: %s\n", d.dir);
    for (int s = 0; s < d.sites; s++)
        printf("  site %c: gRPC 127.0.0.1:%d, dashboard http://127.0.0.1:%d/\n", 'a' + s, grpc[s],
               dash[s]);
    fflush(stdout);
    pid_t pids[DEMO_MAX];
    for (int s = 0; s < d.sites; s++)
        if ((pids[s] = spawn(&d, s, err)) < 0) {
            for (int k = 0; k < s; k++) kill(pids[k], SIGTERM);
            return AL_EIO;
        }
    /* progress: each site's newest round, every few seconds, until all exit */
    int left = d.sites, status[DEMO_MAX] = {0}, done[DEMO_MAX] = {0};
    double t0 = al_now(), last = 0;
    while (left > 0) {
        for (int s = 0; s < d.sites; s++) {
            if (done[s]) continue;
            if (waitpid(pids[s], &status[s], WNOHANG) == pids[s]) {
                done[s] = 1;
                left--;
                /* one site failing ends the demo: stop the others */
                if (!WIFEXITED(status[s]) || WEXITSTATUS(status[s]) != 0)
                    for (int k = 0; k < d.sites; k++)
                        if (!done[k]) kill(pids[k], SIGTERM);
            }
        }
        if (al_now() - last >= 5 && left > 0) {
            last = al_now();
            for (int s = 0; s < d.sites; s++) {
                char path[1200], line[8192];
                snprintf(path, sizeof path, "%s/site-%c/events.jsonl", d.dir, 'a' + s);
                last_line(path, line, sizeof line);
                json_t *o = json_loads(line, 0, NULL);
                const char *ev = json_string_value(json_object_get(o, "event"));
                const char *who = json_string_value(json_object_get(o, "site"));
                if (ev && strcmp(ev, "round") != 0) /* a membership event */
                    printf("[%5.0fs] site %c: %s of %s at round %lld\n", al_now() - t0, 'a' + s, ev,
                           who ? who : "?",
                           (long long)json_integer_value(json_object_get(o, "round")));
                else if (o && json_is_integer(json_object_get(o, "round")))
                    printf("[%5.0fs] site %c: round %lld, step %lld/%ld, H %lld, loss %.3f\n",
                           al_now() - t0, 'a' + s,
                           (long long)json_integer_value(json_object_get(o, "round")),
                           (long long)json_integer_value(json_object_get(o, "step")), d.steps,
                           (long long)json_integer_value(json_object_get(o, "h_next")),
                           json_number_value(json_object_get(o, "train_loss")));
                else
                    printf("[%5.0fs] site %c: training its first interval\n", al_now() - t0,
                           'a' + s);
                json_decref(o);
            }
            fflush(stdout);
        }
        usleep(100 * 1000);
    }
    for (int s = 0; s < d.sites; s++)
        if (!WIFEXITED(status[s]) || WEXITSTATUS(status[s]) != 0) {
            char path[1200], line[8192];
            snprintf(path, sizeof path, "%s/site-%c.log", d.dir, 'a' + s);
            last_line(path, line, sizeof line);
            return al_errf(err, AL_EPEER, "site %c failed (see %s): %s", 'a' + s, path, line);
        }
    /* the summary */
    json_t *sum[DEMO_MAX];
    for (int s = 0; s < d.sites; s++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/site-%c/summary.json", d.dir, 'a' + s);
        if (!(sum[s] = json_load_file(path, 0, NULL))) {
            for (int k = 0; k < s; k++) json_decref(sum[k]);
            return al_errf(err, AL_EFORMAT, "%s: missing or unreadable", path);
        }
    }
#define NUM(o, k) json_number_value(json_object_get(o, k))
    int agree = 1;
    const char *h0 = json_string_value(json_object_get(sum[0], "theta_hash"));
    double sent = 0, diloco = 0, ddp = 0, raw = 0, eval = NUM(sum[0], "final_eval_loss");
    printf("\n%-6s %8s %6s %10s %14s %14s %14s\n", "site", "steps", "syncs", "eval loss",
           "bytes sent", "DiLoCo equiv", "DDP equiv");
    for (int s = 0; s < d.sites; s++) {
        const char *h = json_string_value(json_object_get(sum[s], "theta_hash"));
        agree &= h && h0 && !strcmp(h, h0);
        sent += NUM(sum[s], "bytes_sent");
        diloco += NUM(sum[s], "bytes_diloco_equiv");
        ddp += NUM(sum[s], "bytes_ddp_equiv");
        raw += NUM(sum[s], "bytes_raw");
        printf("%-6c %8lld %6lld %10.4f %14.0f %14.0f %14.0f\n", 'a' + s,
               (long long)NUM(sum[s], "steps"), (long long)NUM(sum[s], "syncs"),
               NUM(sum[s], "final_eval_loss"), NUM(sum[s], "bytes_sent"),
               NUM(sum[s], "bytes_diloco_equiv"), NUM(sum[s], "bytes_ddp_equiv"));
    }
    json_t *hist = json_object_get(sum[0], "h_history");
    printf("\nH history: ");
    size_t i;
    json_t *hv;
    json_array_foreach(hist, i, hv)
        printf("%s%lld", i ? " " : "", (long long)json_integer_value(hv));
    double sv_d = diloco > 0 ? 100.0 * (1 - sent / diloco) : 0,
           sv_p = ddp > 0 ? 100.0 * (1 - sent / ddp) : 0;
    /* the saving against DiLoCo in two parts: syncs the policy avoided (DiLoCo's
     * bytes minus the fp32 bytes our syncs stood for) and the codec (those fp32
     * bytes minus the bytes on the wire, framing and TLS included) */
    double syncs = NUM(sum[0], "syncs"), syncs_d = NUM(sum[0], "syncs_diloco_equiv");
    printf("\nsyncs: %.0f made; DiLoCo at H_base=%ld makes %.1f: %.1f avoided (%.1f%%), %.0f "
           "bytes of fp32 not sent\n",
           syncs, d.h_base, syncs_d, syncs_d - syncs,
           syncs_d > 0 ? 100.0 * (1 - syncs / syncs_d) : 0.0, diloco - raw);
    printf("codec %s: %.0f bytes sent for %.0f bytes of fp32 shards: %.0f saved (%.1f%%, %.1fx "
           "smaller)\n",
           d.codec, sent, raw, raw - sent, raw > 0 ? 100.0 * (1 - sent / raw) : 0.0,
           sent > 0 ? raw / sent : 0.0);
    printf("bytes sent: %.0f; vs DiLoCo at H_base=%ld (fp32): %.1f%% saved (both together); vs "
           "DDP: %.2f%% saved\n",
           sent, d.h_base, sv_d, sv_p);
    printf("theta_global identical on all sites: %s (%.16s)\n", agree ? "yes" : "NO",
           h0 ? h0 : "?");
    /* what the model writes now: a short sample from site a's final theta_global */
    char site_a[1200], *text = NULL;
    snprintf(site_a, sizeof site_a, "%s/site-a", d.dir);
    al_threads_set(1); /* as `autoloco sample` does */
    rc = al_cli_sample(site_a, AL_MIN(160, d.seq - 1), 0.8, 40, 1337, &text, err);
    if (rc == 0) {
        printf("sample from the final theta_global (autoloco sample --ckpt %s --temperature 0.8 "
               "--seed 1337):\n  | ",
               site_a);
        for (const char *p = text; *p; p++) printf(*p == '\n' ? "\n  | " : "%c", *p);
        printf("\n");
    }
    printf("logs and dashboards' event logs: %s\n", d.dir);
    if (rc == 0 && d.json) {
        json_t *o = json_pack(
            "{s:i, s:i, s:s, s:i, s:i, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, "
            "s:b, s:O, s:f, s:s}",
            "sites", d.sites, "workers", d.workers, "preset", d.preset, "batch", d.batch, "seq",
            d.seq, "steps", (json_int_t)NUM(sum[0], "steps"), "syncs", (json_int_t)syncs,
            "syncs_diloco_equiv", syncs_d, "syncs_avoided", syncs_d - syncs, "bytes_sent", sent,
            "bytes_raw", raw, "bytes_saved_by_codec", raw - sent, "bytes_diloco_equiv", diloco,
            "bytes_ddp_equiv", ddp, "savings_vs_diloco", sv_d / 100.0, "savings_vs_ddp",
            sv_p / 100.0, "theta_hash_agree", agree, "h_history", hist, "seconds", al_now() - t0,
            "dir", d.dir);
        json_object_set_new(o, "final_eval_loss", isfinite(eval) ? json_real(eval) : json_null());
        json_object_set_new(o, "sample", json_string(al_cli_utf8(text)));
        char *js = json_dumps(o, JSON_COMPACT);
        printf("%s\n", js ? js : "{}");
        free(js);
        json_decref(o);
    }
    free(text);
#undef NUM
    for (int s = 0; s < d.sites; s++) json_decref(sum[s]);
    if (rc) return al_err_prefix(err, "demo: sample");
    return agree ? 0 : al_errf(err, AL_EINTEGRITY, "sites ended with different theta_global");
}
