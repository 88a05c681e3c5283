/* bench_tokenizer.c -- `autoloco bench tokenizer`: GPT-2's BPE in C against
 * tiktoken (the npm package's WASM build of OpenAI's Rust code, under node)
 * on the same text in the same run: MB/s of each on one thread (the median
 * of --repeats runs, the two alternating), their ratio, and ours on every
 * core (the text cut at al_bpe_cut's places, as data prep does). */
#include "al_bench.h"
#include "al_cli.h"
#include "al_tokenizer.h"

#include <dirent.h>
#include <getopt.h>
#include <jansson.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: autoloco bench tokenizer [--text FILE] [--repeats R] [--npm DIR] [--json]\n"
               "                                [-c FILE.ini] [--set data.tokenizer_dir=DIR]\n\n"
               "Encode the same text with autoloco's GPT-2 BPE (one thread) and with tiktoken\n"
               "(node, tools/npm/tiktoken-ref.js), alternating, --repeats times each (default 5);\n"
               "report MB/s of each (median), the ratio, and autoloco on all threads. The text:\n"
               "--text FILE, else the fortunes in English, German, Spanish and Italian\n"
               "(/usr/share/games/fortunes, its de/, es/ and it/; files that are not UTF-8 left\n"
               "out). --npm: the folder of tools/setup's npm packages (default tools/npm).\n"
               "--json prints one JSON object as the last line.\n");
}

/* Append the valid-UTF-8 fortune files of dir (sorted) to *s. */
static int add_folder(const char *dir, char **s, size_t *n, int *files, al_err *err) {
    struct dirent **names;
    int k = scandir(dir, &names, NULL, alphasort);
    if (k < 0) return 0;
    int rc = 0;
    for (int i = 0; i < k; i++) {
        const char *nm = names[i]->d_name;
        size_t l = strlen(nm);
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        struct stat st;
        int skip = nm[0] == '.' || (l > 4 && !strcmp(nm + l - 4, ".dat")) ||
                   (l > 3 && !strcmp(nm + l - 3, ".u8")) || lstat(path, &st) != 0 ||
                   !S_ISREG(st.st_mode); /* symbolic links: fortunes-it's duplicates */
        char *text;
        size_t tn;
        if (rc == 0 && !skip && al_read_file(path, &text, &tn, err) == 0) {
            json_t *j = json_stringn(text, tn); /* NULL unless valid UTF-8 */
            if (j) {
                char *ns = realloc(*s, *n + tn + 1);
                if (!ns)
                    rc = al_errf(err, AL_ENOMEM, "bench tokenizer: out of memory");
                else {
                    memcpy(ns + *n, text, tn);
                    *n += tn;
                    ns[*n] = '\0';
                    *s = ns;
                    (*files)++;
                }
            }
            json_decref(j);
            free(text);
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

/* tiktoken's seconds for one encode of path's text, and its token count. */
static int tiktoken_once(const char *npm, const char *path, double *s, long *tokens, al_err *err) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "node '%s/tiktoken-ref.js' bench '%s' 1", npm, path);
    FILE *p = popen(cmd, "r");
    if (!p) return al_errf(err, AL_EIO, "bench tokenizer: cannot run node");
    char line[4096] = "";
    char *got = fgets(line, sizeof line, p);
    int st = pclose(p);
    json_t *o = got ? json_loads(line, 0, NULL) : NULL;
    json_t *secs = json_object_get(o, "seconds");
    int rc = 0;
    if (st != 0 || !json_is_array(secs) || json_array_size(secs) < 1)
        rc = al_errf(err, AL_EIO,
                     "bench tokenizer: %s/tiktoken-ref.js failed (exit status %d): is node "
                     "installed and tools/setup's npm folder there (--npm)?",
                     npm, st);
    else {
        *s = json_real_value(json_array_get(secs, 0));
        *tokens = (long)json_integer_value(json_object_get(o, "tokens"));
    }
    json_decref(o);
    return rc;
}

/* All threads: pieces cut at al_bpe_cut's places, ~256 KB each. */
static int encode_threads(const al_bpe *t, const char *s, size_t n, size_t *tokens, al_err *err) {
    size_t cuts[4096], nc = 0, at = 0;
    while (at < n && nc + 1 < AL_ARRAY_LEN(cuts)) {
        cuts[nc++] = at;
        at = at + (1u << 18) < n ? at + al_bpe_cut(s + at, n - at, 1u << 18) : n;
    }
    cuts[nc] = n;
    size_t total = 0;
    int fail = 0;
#pragma omp parallel reduction(+ : total)
    {
        al_err lerr = {0};
        al_bpe_enc e;
        al_bpe_ids ids = {0};
        int my = al_bpe_enc_init(&e, t, &lerr);
#pragma omp for schedule(dynamic, 1)
        for (long i = 0; i < (long)nc; i++) {
            if (my) continue;
            ids.n = 0;
            my = al_bpe_encode(&e, s + cuts[i], cuts[i + 1] - cuts[i], &ids, &lerr);
            total += ids.n;
        }
        if (my) {
#pragma omp critical
            if (!fail) fail = my, *err = lerr;
        }
        al_bpe_ids_free(&ids);
        al_bpe_enc_free(&e);
    }
    *tokens = total;
    return fail;
}

int al_bench_tokenizer(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {
        {"text", required_argument, 0, 'x'},   {"repeats", required_argument, 0, 'r'},
        {"npm", required_argument, 0, 'n'},    {"json", no_argument, 0, 'j'},
        {"config", required_argument, 0, 'c'}, {"set", required_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},         {0, 0, 0, 0}};
    const char *textf = NULL, *npm = "tools/npm";
    long repeats = 5;
    int json = 0, ch, rc = 0;
    al_cli_tokcfg tc = {0};
    optind = 1;
    while ((ch = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'x':
            textf = optarg;
            break;
        case 'r':
            rc = al_cli_int("--repeats", optarg, 1, 99, &repeats, err);
            break;
        case 'n':
            npm = optarg;
            break;
        case 'j':
            json = 1;
            break;
        case 'c':
        case 'S':
            rc = al_cli_tokcfg_arg(&tc, ch == 'c' ? 'c' : 's', optarg, err);
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
    if (optind < argc)
        return al_errf(err, AL_EINVAL, "bench tokenizer: unexpected argument '%s'", argv[optind]);
    al_bpe t;
    if ((rc = al_cli_load_bpe(&tc, &t, err))) return al_err_prefix(err, "bench tokenizer");
    char *s = NULL;
    size_t n = 0;
    int files = 0;
    char tmp[] = "/tmp/al-bench-tokenizer-XXXXXX";
    const char *path = textf;
    if (textf) {
        rc = al_read_file(textf, &s, &n, err);
        files = 1;
    } else {
        const char *dirs[] = {"/usr/share/games/fortunes", "/usr/share/games/fortunes/de",
                              "/usr/share/games/fortunes/es", "/usr/share/games/fortunes/it"};
        for (size_t i = 0; rc == 0 && i < AL_ARRAY_LEN(dirs); i++)
            rc = add_folder(dirs[i], &s, &n, &files, err);
        if (rc == 0 && n == 0)
            rc = al_errf(err, AL_ENOTFOUND,
                         "bench tokenizer: no fortunes in /usr/share/games/fortunes (tools/setup "
                         "installs them); --text FILE names another text");
        int fd = rc == 0 ? mkstemp(tmp) : -1;
        if (rc == 0 && (fd < 0 || write(fd, s, n) != (ssize_t)n))
            rc = al_errf(err, AL_EIO, "bench tokenizer: cannot write %s", tmp);
        if (fd >= 0) close(fd);
        path = tmp;
    }
    al_bpe_enc e = {0};
    al_bpe_ids ids = {0};
    if (rc == 0) rc = al_bpe_enc_init(&e, &t, err);
    if (rc == 0) rc = al_bpe_encode(&e, s, AL_MIN(n, (size_t)100000), &ids, err); /* warm */
    double ours[99], theirs[99];
    long ttok = 0;
    if (rc == 0)
        printf("bench tokenizer: %.2f MB of text (%d files), %ld repeats, one thread each\n",
               n / 1e6, files, repeats);
    for (long r = 0; rc == 0 && r < repeats; r++) {
        ids.n = 0;
        double t0 = al_now();
        if ((rc = al_bpe_encode(&e, s, n, &ids, err))) break;
        ours[r] = al_now() - t0;
        if ((rc = tiktoken_once(npm, path, &theirs[r], &ttok, err))) break;
        printf("  repeat %ld: autoloco %.3f s (%.2f MB/s), tiktoken %.3f s (%.2f MB/s)\n", r + 1,
               ours[r], n / 1e6 / ours[r], theirs[r], n / 1e6 / theirs[r]);
        fflush(stdout);
    }
    size_t mtok = 0;
    double mt_s = 0;
    if (rc == 0) {
        double t0 = al_now();
        rc = encode_threads(&t, s, n, &mtok, err);
        mt_s = al_now() - t0;
    }
    if (rc == 0) {
        double a = al_bench_median(ours, (int)repeats), b = al_bench_median(theirs, (int)repeats);
        int same = (long)ids.n == ttok && mtok == ids.n;
        printf("  %-34s %10.2f\n  %-34s %10.2f\n  %-34s %10.2f\n  %-28s%3d %10.2f\n"
               "  tokens: autoloco %zu, tiktoken %ld, autoloco on all threads %zu (%s)\n",
               "autoloco MB/s, one thread (median)", n / 1e6 / a,
               "tiktoken MB/s, one thread (median)", n / 1e6 / b, "ratio autoloco / tiktoken",
               b / a, "autoloco MB/s, threads:", omp_get_max_threads(), n / 1e6 / mt_s, ids.n, ttok,
               mtok, same ? "equal" : "DIFFERENT");
        if (json)
            printf("{\"bench\":\"tokenizer\",\"text_bytes\":%zu,\"files\":%d,\"repeats\":%ld,"
                   "\"autoloco_mb_s\":%.3f,\"tiktoken_mb_s\":%.3f,\"ratio\":%.3f,"
                   "\"threads\":%d,\"autoloco_threads_mb_s\":%.3f,\"tokens\":%zu,"
                   "\"tiktoken_tokens\":%ld,\"same_count\":%s}\n",
                   n, files, repeats, n / 1e6 / a, n / 1e6 / b, b / a, omp_get_max_threads(),
                   n / 1e6 / mt_s, ids.n, ttok, same ? "true" : "false");
        if (!same) rc = al_errf(err, AL_EMISMATCH, "bench tokenizer: the token counts differ");
    }
    if (!textf) unlink(tmp);
    al_bpe_ids_free(&ids);
    al_bpe_enc_free(&e);
    al_bpe_free(&t);
    free(s);
    return rc;
}
