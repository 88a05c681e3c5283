/* metrics_page.c -- for tests/test_prometheus.sh: fill a metrics registry as
 * an agent of three sites does (rounds, peers up and left out, a drop and a
 * checkpoint event, round durations, the health line of a site that lost
 * its quorum), serve it with the agent's HTTP server on
 * 127.0.0.1 and a free port, GET /metrics over a socket and print the body on
 * stdout: the page `promtool check metrics` reads. Exits 1 (stderr says why)
 * if the server cannot start or the answer is not 200. */
#include "al_monitor.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static char *get(int port, const char *path) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return NULL;
    }
    char req[256];
    int n =
        snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n) {
        close(fd);
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    ssize_t r;
    while (buf && (r = recv(fd, buf + len, cap - len, 0)) > 0) {
        len += (size_t)r;
        if (len == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    close(fd);
    if (buf) buf[len] = '\0';
    return buf;
}

int main(void) {
    al_err err = {0};
    al_metrics m;
    al_http *h;
    al_http_cfg cfg = {.address = "127.0.0.1", .port = 0, .max_connections = 8, .timeout_s = 3};
    if (al_metrics_init(&m, "a", &err) || al_http_start(&h, &cfg, &m, &err)) {
        fprintf(stderr, "metrics_page: %s\n", err.msg);
        return 1;
    }
    const char *sites[] = {"a", "b", "c"};
    for (int r = 1; r <= 3; r++) {
        al_round_record rec = {.round = r, .step = 20L * r, .h = 20, .h_next = 20, .members = 3};
        rec.nsites = 3;
        for (int s = 0; s < 3; s++) {
            snprintf(rec.sites[s], sizeof rec.sites[s], "%s", sites[s]);
            rec.site_loss[s] = 5.0 - 0.1 * r - 0.01 * s;
        }
        rec.train_loss = rec.site_loss[0];
        rec.eval_loss = 4.5;
        if (al_metrics_add_round(&m, &rec, &err)) {
            fprintf(stderr, "metrics_page: %s\n", err.msg);
            return 1;
        }
        al_metrics_round_duration(&m, 0.8 + 0.1 * r);
        al_metrics_peer(&m, "b", 1000, 900, 0.01);
        al_metrics_peer(&m, "c", 1000, 950, 0.02);
        al_metrics_peer_up(&m, "b", 1);
        al_metrics_peer_up(&m, "c", r < 3);
    }
    al_metrics_add(&m, AL_M_SYNCS, 3);
    al_metrics_set(&m, AL_M_MEMBERS, 2);
    al_metrics_set(&m, AL_M_INTERVAL, 20);
    free(al_metrics_event(&m, "checkpoint", "a", 2, 40));
    free(al_metrics_event(&m, "drop", "c", 3, 60));
    al_metrics_set_health(&m, "no quorum: 1 of 3 sites reachable");
    char *page = get(al_http_port(h), "/metrics");
    int ok = page && strncmp(page, "HTTP/1.1 200", 12) == 0 && strstr(page, "\r\n\r\n");
    if (ok)
        fputs(strstr(page, "\r\n\r\n") + 4, stdout);
    else
        fprintf(stderr, "metrics_page: GET /metrics failed: %.80s\n", page ? page : "(no answer)");
    free(page);
    al_http_stop(h);
    al_metrics_free(&m);
    return ok ? 0 : 1;
}
