/*
 * test_transport_server.c -- a real site server in its own process, for the
 * interoperability test (tests/test_transport_interop.py) and by hand:
 *
 *   test_transport_server CERTDIR SITE PEERS RUN_ID [MAX_MESSAGE]
 *
 * serves with CERTDIR/{ca.pem,SITE.pem,SITE.key}, listed peers PEERS (comma
 * separated), round 10 / epoch 2, 4 shards per vector; prints "PORT n" once
 * listening, then "SHARD site shard bytes xxh64hex" for every completed
 * shard, and stops cleanly when its stdin closes.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "al_codec.h"
#include "al_transport.h"

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static int open_shard(void *u, const al_shard_meta *m, uint8_t **dst, char *why, size_t n) {
    (void)u;
    (void)why;
    (void)n;
    *dst = malloc(m->total_bytes);
    return 0;
}

static void done_shard(void *u, const al_shard_meta *m, uint8_t *dst, int complete) {
    (void)u;
    if (complete) {
        pthread_mutex_lock(&out_mu);
        printf("SHARD %s %u %llu %016llx\n", m->site, m->shard_id,
               (unsigned long long)m->total_bytes,
               (unsigned long long)al_xxh64(dst, m->total_bytes, 0));
        fflush(stdout);
        pthread_mutex_unlock(&out_mu);
    }
    free(dst);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s CERTDIR SITE PEERS RUN_ID [MAX_MESSAGE]\n", argv[0]);
        return 2;
    }
    char ca[512], cert[512], key[512];
    snprintf(ca, sizeof ca, "%s/ca.pem", argv[1]);
    snprintf(cert, sizeof cert, "%s/%s.pem", argv[1], argv[2]);
    snprintf(key, sizeof key, "%s/%s.key", argv[1], argv[2]);
    char *peers_s = strdup(argv[3]);
    const char *peers[16];
    size_t np = 0;
    for (char *save = NULL, *t = strtok_r(peers_s, ",", &save); t && np < 16;
         t = strtok_r(NULL, ",", &save))
        peers[np++] = t;
    al_log log;
    al_log_init(&log, AL_LOG_WARN, stderr);
    al_server_cfg cfg = {.listen = "127.0.0.1:0",
                         .site = argv[2],
                         .run_id = argv[4],
                         .peers = peers,
                         .npeers = np,
                         .tls = {ca, cert, key},
                         .threads = 3,
                         .per_peer_calls = 2, /* one thread stays for the other peer */
                         .max_message = argc > 5 ? (size_t)atol(argv[5]) : 0,
                         .num_shards = 4,
                         .max_shard_bytes = 256u << 20,
                         .hooks = {.shard_open = open_shard, .shard_done = done_shard},
                         .log = &log};
    al_server *s;
    al_err err = {0};
    if (al_server_start(&cfg, &s, &err)) {
        fprintf(stderr, "server: %s\n", err.msg);
        free(peers_s);
        return 1;
    }
    al_server_set_round(s, 10, 2);
    al_hello h = {.round = 10, .epoch = 2, .next_interval = 25};
    al_server_set_hello(s, &h);
    pthread_mutex_lock(&out_mu);
    printf("PORT %d\n", al_server_port(s));
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
    }
    al_server_stop(s);
    free(peers_s);
    printf("STOPPED\n");
    return 0;
}
