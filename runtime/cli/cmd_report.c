/* cmd_report.c -- `autoloco report RUN.jsonl -o report.html`: the dashboard's charts
 * from an event log, as one static HTML file that opens offline. */
#include "al_cli.h"
#include "al_monitor.h"

#include <getopt.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static void report_usage(FILE *f) {
    fprintf(f, "usage: autoloco report RUN.jsonl [-o report.html]\n\n"
               "Draw the dashboard's charts (loss per site, H per round, bytes against DiLoCo\n"
               "and DDP, time split, membership events) from an agent's JSONL event log into\n"
               "one self-contained HTML file (default: RUN.html next to the log).\n");
}

/* Read the log: round records and membership events; any other line is an error. */
static int read_log(const char *path, json_t **out, al_err *err) {
    char *text;
    size_t n;
    int rc = al_read_file(path, &text, &n, err);
    if (rc) return rc;
    json_t *rounds = json_array(), *events = json_array();
    const char *site = NULL;
    size_t line = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        line++;
        while (*l == ' ' || *l == '\t' || *l == '\r') l++;
        if (!*l) continue;
        json_error_t je;
        json_t *o = json_loads(l, 0, &je);
        const char *ev = o ? json_string_value(json_object_get(o, "event")) : NULL;
        if (!o || !json_is_object(o) || !ev) {
            rc = al_errf(err, AL_EFORMAT, "%s:%zu: not an event record (%s)", path, line,
                         o ? "no \"event\" field" : je.text);
            json_decref(o);
            break;
        }
        if (!strcmp(ev, "round")) {
            if (!json_is_integer(json_object_get(o, "step")) ||
                !json_is_integer(json_object_get(o, "round"))) {
                rc =
                    al_errf(err, AL_EFORMAT, "%s:%zu: round record without round/step", path, line);
                json_decref(o);
                break;
            }
            if (!site) site = json_string_value(json_object_get(o, "site"));
            json_array_append_new(rounds, o);
        } else {
            json_object_set(o, "kind", json_object_get(o, "event"));
            json_array_append_new(events, o);
        }
    }
    if (rc == 0 && json_array_size(rounds) == 0)
        rc = al_errf(err, AL_EFORMAT, "%s: no round records", path);
    if (rc == 0)
        *out = json_pack("{s:s, s:o, s:o}", "site", site ? site : "?", "rounds", rounds, "events",
                         events);
    else {
        json_decref(rounds);
        json_decref(events);
    }
    free(text);
    return rc;
}

int al_cmd_report(int argc, char **argv, al_err *err) {
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL;
    int ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        if (ch == 'o')
            out = optarg;
        else if (ch == 'h') {
            report_usage(stdout);
            return 0;
        } else {
            report_usage(stderr);
            return AL_CLI_USAGE;
        }
    }
    if (optind != argc - 1) {
        report_usage(stderr);
        return AL_CLI_USAGE;
    }
    const char *in = argv[optind];
    char def[4096];
    if (!out) {
        size_t n = strlen(in);
        snprintf(def, sizeof def, "%.*s.html",
                 (int)(n > 6 && !strcmp(in + n - 6, ".jsonl") ? n - 6 : n), in);
        out = def;
    }
    json_t *data = NULL;
    int rc = read_log(in, &data, err);
    if (rc) return rc;
    char *js = json_dumps(data, JSON_COMPACT);
    size_t nrounds = json_array_size(json_object_get(data, "rounds"));
    json_decref(data);
    if (!js) return al_errf(err, AL_ENOMEM, "report: out of memory");
    /* Insert the data before the page's script; "</" is escaped so that no
     * string in the log can close the script element. */
    const char *page = al_dashboard_html, *at = strstr(page, "<script>");
    size_t cap = strlen(page) + 2 * strlen(js) + 64, n = 0;
    char *html = malloc(cap);
    if (!html || !at) {
        free(js);
        free(html);
        return al_errf(err, AL_ENOMEM, "report: out of memory");
    }
    memcpy(html, page, (size_t)(at - page));
    n = (size_t)(at - page);
    n += (size_t)sprintf(html + n, "<script>window.AL_DATA = ");
    for (const char *p = js; *p; p++) {
        if (p[0] == '<' && p[1] == '/') {
            memcpy(html + n, "<\\/", 3);
            n += 3;
            p++;
        } else
            html[n++] = *p;
    }
    n += (size_t)sprintf(html + n, ";</script>\n");
    size_t rest = strlen(at);
    memcpy(html + n, at, rest);
    n += rest;
    free(js);
    rc = al_write_file_sync(out, html, n, err);
    free(html);
    if (rc == 0) printf("report: %zu rounds from %s -> %s\n", nrounds, in, out);
    return rc;
}
