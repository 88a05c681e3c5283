/*
 * al_transport.h -- the cross-site link: a gRPC (C core) server and one client
 * per peer, over mutual TLS, carrying the messages of transport/proto/
 * autoloco.proto: handshakes, pseudo-gradient shards in chunks, scalar
 * statistics, state for a joining site, heartbeats.
 *
 * Who is who. Every site has a certificate whose subject CN is its site name,
 * signed by the run's CA (`autoloco certs`). The server requires and verifies
 * the client's certificate, and accepts a message only if the site the message
 * claims equals that CN and is one of the configured peers; otherwise
 * PERMISSION_DENIED. A client certificate from another CA, or none, fails the
 * TLS handshake: the client sees UNAVAILABLE, like an outage (it retries a
 * capped number of times, then gives up with the last status).
 *
 * Memory. A shard streams as chunks (1 MiB by default) straight from the
 * sender's buffer into the destination the receiver's `shard_open` hook gives:
 * neither side ever holds a second full copy, whatever the shard's size.
 *
 * Failures. Every call has a deadline. The server answers each malformed or
 * unacceptable message with a specific gRPC status (the table in
 * docs/transport.md) and keeps serving everybody else. Client functions
 * return 0 or a negative AL_E* code with a message naming the peer, the
 * method and the status; `al_client_last_status` gives the status itself.
 *
 * Threads. The server runs `threads` completion-queue threads, each serving
 * one call at a time; hooks are called from those threads, concurrently. A
 * client is used by one thread at a time.
 */
#ifndef AL_TRANSPORT_H
#define AL_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "al_base.h"

/* gRPC's status codes, same numbers, so that this header needs no gRPC. */
typedef enum {
    AL_ST_OK = 0,
    AL_ST_CANCELLED = 1,
    AL_ST_UNKNOWN = 2,
    AL_ST_INVALID_ARGUMENT = 3,
    AL_ST_DEADLINE_EXCEEDED = 4,
    AL_ST_NOT_FOUND = 5,
    AL_ST_ALREADY_EXISTS = 6,
    AL_ST_PERMISSION_DENIED = 7,
    AL_ST_RESOURCE_EXHAUSTED = 8,
    AL_ST_FAILED_PRECONDITION = 9,
    AL_ST_ABORTED = 10,
    AL_ST_OUT_OF_RANGE = 11,
    AL_ST_UNIMPLEMENTED = 12,
    AL_ST_INTERNAL = 13,
    AL_ST_UNAVAILABLE = 14,
    AL_ST_DATA_LOSS = 15,
    AL_ST_UNAUTHENTICATED = 16,
} al_status;
const char *al_status_name(int st);

#define AL_SITE_MAX       64   /* longest site name */
#define AL_RUN_ID_MAX     128  /* longest run id */
#define AL_RUN_CONFIG_MAX 8192 /* longest run configuration text in a handshake */
#define AL_MEMBERS_MAX    256  /* most sites in one handshake */
#define AL_SHARDS_MAX     1024
#define AL_INTERVAL_MAX   10000000u
#define AL_SCHEMA         1 /* the wire schema version this build speaks */

enum { AL_PHASE_REDUCE = 1, AL_PHASE_GATHER = 2 };
enum { AL_STATE_THETA = 1, AL_STATE_MOMENTUM = 2, AL_STATE_META = 3 };

/* A valid site name: 1..64 of [A-Za-z0-9._-]. */
int al_site_name_ok(const char *s);

/* The site a peer's certificate (PEM, len bytes) names: its subject's single
 * CN, which must be a valid site name with no embedded NUL (compared with its
 * length, not as a C string), and, if the certificate has DNS subject
 * alternative names, one of them. Anything else — no CN, two CNs, a NUL, a CN
 * that no DNS SAN confirms, an unparsable certificate — is refused:
 * AL_EPERM with the reason in err, *site untouched. */
int al_cert_site(const char *pem, size_t len, char site[AL_SITE_MAX + 1], al_err *err);

/* ---- what the messages carry, as plain C ---------------------------------------- */

typedef struct al_hello {
    char site[AL_SITE_MAX + 1];
    char run_id[AL_RUN_ID_MAX + 1];
    uint64_t round, epoch;
    uint8_t theta_hash[32], config_hash[32];
    uint32_t next_interval;
    size_t n_members;
    char members[16][AL_SITE_MAX + 1];      /* the first 16 (the wire allows AL_MEMBERS_MAX) */
    char run_config[AL_RUN_CONFIG_MAX + 1]; /* the keys config_hash covers ("" if not sent) */
} al_hello;

typedef struct al_shard_meta {
    char site[AL_SITE_MAX + 1]; /* the sender */
    uint64_t round, epoch;
    uint32_t phase, shard_id, num_shards;
    uint64_t total_bytes;
    uint32_t codec; /* al_codec_kind */
    int zstd;
    uint64_t shard_checksum; /* al_xxh64 of all total_bytes */
} al_shard_meta;

typedef struct al_stats {
    char site[AL_SITE_MAX + 1];
    uint64_t round, epoch;
    double mean_loss, grad_norm, delta_sq_norm, inner_lr_sum, compute_s, comm_s;
    uint64_t tokens;
    uint32_t steps;
} al_stats;

/* A site's round status as heartbeats carry it (runtime/round/al_round.h's
 * al_round_status in wire terms): vote 0 none, 1 null, 2 a hash. */
typedef struct al_peer_status {
    uint64_t round, epoch;
    int have_base; /* 0: the sender has no round protocol (then only round, epoch) */
    uint8_t base[32];
    uint32_t vote;
    uint8_t vote_hash[32];
    uint32_t members;
    uint64_t incarnation; /* the sender's start, greater at each restart; 0: none */
    uint32_t excluded;    /* sites it leaves out as liars until they restart (bit i) */
    uint32_t hears;       /* sites whose own calls reach it, itself included (bit i); 0: none */
    uint64_t vote_origin; /* a hash vote's: the attempt whose exchange computed it */
    /* the latest hash vote in this round (Paxos' report; the carry) */
    int accepted;
    uint64_t acc_epoch;
    uint8_t acc_hash[32];
    uint32_t acc_members;
    uint64_t acc_origin;
} al_peer_status;

/* ---- TLS --------------------------------------------------------------------------- */

typedef struct al_tls_paths {
    const char *ca;   /* the run's CA certificate (PEM) */
    const char *cert; /* this site's certificate */
    const char *key;  /* this site's key: refused if readable by others than its owner */
} al_tls_paths;

/* Create a CA (ca.pem, ca.key) in dir, or reuse the one there, and a key +
 * certificate for each site (<site>.pem, <site>.key) with CN = site and SANs
 * DNS:<site>, DNS:localhost, IP:127.0.0.1, through the OpenSSL API. Keys are
 * written 0600; an existing site file is never overwritten (AL_EIO). */
int al_certs_create(const char *dir, const char *const *sites, size_t nsites, int days,
                    al_err *err);

/* ---- server ------------------------------------------------------------------------ */

typedef struct al_server al_server;

typedef struct al_server_hooks {
    void *user;
    /* A new shard starts arriving (meta validated). Return 0 and a destination
     * of meta->total_bytes bytes that stays valid until shard_done, or an
     * al_status > 0 with a reason in why (the sender gets that status). */
    int (*shard_open)(void *user, const al_shard_meta *m, uint8_t **dst, char *why, size_t n);
    /* Exactly once per successful open: complete = 1 when every byte arrived
     * and the shard checksum matched, 0 when the transfer was abandoned (a
     * newer round, a failed checksum, server stop). The server no longer
     * touches dst afterwards. */
    void (*shard_done)(void *user, const al_shard_meta *m, uint8_t *dst, int complete);
    /* Stats from a peer (validated). Return 0 or an al_status to refuse. */
    int (*stats)(void *user, const al_stats *s, char *why, size_t n);
    /* A joining peer (`site`, authenticated) asks for a part of the state:
     * point *data at it and set *ref to whatever keeps it alive, or return an
     * al_status. After a 0 the server calls state_done(ref) exactly once, when
     * it no longer reads data (reply sent or stream broken). */
    int (*state)(void *user, const char *site, uint32_t part, const uint8_t **data, uint64_t *len,
                 void **ref, char *why, size_t n);
    void (*state_done)(void *user, void *ref);
    /* A heartbeat from `site` (authenticated, validated) with its status: fill
     * *mine with ours for the reply. NULL: the reply carries the server's
     * round and epoch only. */
    void (*status)(void *user, const char *site, const al_peer_status *theirs,
                   al_peer_status *mine);
    /* A peer asks for a part of the candidate hashing to `hash` (a hash vote's
     * value, the carry): as `state`, released by state_done; NOT_FOUND when
     * no such candidate is held. NULL: such requests are refused. */
    int (*candidate)(void *user, const char *site, uint32_t part, const uint8_t *hash,
                     const uint8_t **data, uint64_t *len, void **ref, char *why, size_t n);
} al_server_hooks;

typedef struct al_server_cfg {
    const char *listen;       /* "127.0.0.1:0" picks a free port (al_server_port) */
    const char *site;         /* our own name */
    const char *run_id;       /* a handshake with another run id is refused */
    const char *const *peers; /* the sites allowed to talk to us */
    size_t npeers;
    al_tls_paths tls;
    int insecure;             /* no TLS at all: only for benchmarks; identities unchecked */
    int threads;              /* completion-queue threads = concurrent calls (default 4) */
    int per_peer_calls;       /* most calls one peer may have in progress (default 2): with
                               * threads >= per_peer_calls x npeers no peer can hold a thread
                               * another needs */
    size_t max_message;       /* largest message accepted (default 4 MiB + 64 KiB) */
    uint32_t num_shards;      /* shards per vector this run (default 1) */
    uint64_t max_shard_bytes; /* largest shard accepted (default 1 GiB + 64 KiB) */
    double idle_timeout_s;    /* longest wait for a client's next message (default 30) */
    double evict_idle_s;      /* a call silent this long (or that has received nothing) gives
                               * its slot to a new call of the same peer whose slots are full
                               * (default min(1, idle_timeout_s)); see server.c */
    int attempts;             /* 1: `epoch` tags an attempt within a round, in any order
                               * (the hooks judge it); the window is by round only */
    al_server_hooks hooks;
    const al_log *log; /* may be NULL */
} al_server_cfg;

int al_server_start(const al_server_cfg *cfg, al_server **out, al_err *err);
int al_server_port(const al_server *s);
/* The round and membership epoch chunks must belong to: round r or r + 1 of
 * epoch e. Older transfers are abandoned (shard_done with complete = 0). */
void al_server_set_round(al_server *s, uint64_t round, uint64_t epoch);
/* What the server answers to a Hello (its site and run id are filled in). */
void al_server_set_hello(al_server *s, const al_hello *mine);
/* Bytes received from and sent to one peer (0 for an unknown one); heartbeats
 * (Ping) and statistics (PushStats) are control traffic, counted on neither
 * side (a client for them sets `uncounted`). */
void al_server_bytes(al_server *s, const char *peer, uint64_t *rx, uint64_t *tx);
/* Calls refused so far, by status (for tests and the dashboard). */
uint64_t al_server_refusals(al_server *s, al_status st);
/* Shut down: cancel calls in flight, join threads, release every shard. */
void al_server_stop(al_server *s);

/* ---- client ------------------------------------------------------------------------ */

typedef struct al_client al_client;

typedef struct al_client_cfg {
    const char *target; /* "host:port" of the peer's server (or of a wanem in between) */
    const char *site;   /* our own name, claimed in every message */
    const char *peer;   /* the peer's site name: its certificate must be for this name */
    const char *run_id; /* sent when pulling state */
    al_tls_paths tls;
    int insecure;
    size_t chunk_bytes;        /* default 1 MiB */
    size_t max_message;        /* default max(chunk_bytes, 4 MiB) + 64 KiB */
    double deadline_s;         /* per call (default 60) */
    double control_deadline_s; /* per small unary call: stats, ping, hello (default deadline_s) */
    int max_attempts;          /* per operation, retrying UNAVAILABLE / DEADLINE (default 6) */
    double backoff_s, backoff_max_s; /* capped exponential backoff, full jitter (0.1, 5) */
    uint64_t seed;                   /* jitter RNG */
    int uncounted;                   /* 1: control traffic (heartbeats, statistics): its
                                      * bytes are in no count (al_client_bytes gives 0) */
    const al_log *log;
} al_client_cfg;

int al_client_new(const al_client_cfg *cfg, al_client **out, al_err *err);
void al_client_free(al_client *c);
/* Send our handshake; *theirs receives the server's view. */
int al_client_hello(al_client *c, const al_hello *mine, al_hello *theirs, al_err *err);
/* Send one shard (meta->total_bytes bytes of data) in chunks. A broken stream
 * is retried with backoff and resumes at the offset the server holds. */
int al_client_push_shard(al_client *c, const al_shard_meta *m, const uint8_t *data, al_err *err);
/* Ask how many bytes of a shard the server holds in order (and if complete). */
int al_client_query_shard(al_client *c, const al_shard_meta *m, uint64_t *received, int *complete,
                          al_err *err);
int al_client_push_stats(al_client *c, const al_stats *s, al_err *err);
/* Pull one part of the state into a malloc'd buffer (at most max_bytes). */
int al_client_pull_state(al_client *c, uint32_t part, uint64_t max_bytes, uint8_t **data,
                         uint64_t *len, al_err *err);
/* The same for the candidate hashing to `hash` (32 bytes) that the peer holds
 * (the carry: THETA its outer state, META its decision); the caller checks
 * what arrives against the hash. */
int al_client_pull_candidate(al_client *c, uint32_t part, const uint8_t *hash, uint64_t max_bytes,
                             uint8_t **data, uint64_t *len, al_err *err);
/* Heartbeat: round trip; *peer_ms receives the peer's clock. Its bytes are not
 * in al_client_bytes (nor in the server's count). */
int al_client_ping(al_client *c, uint64_t round, uint64_t epoch, uint64_t *peer_ms, al_err *err);
/* The same carrying our round status; *theirs receives the peer's (have_base
 * = 0 from a server without a status hook). Control traffic, uncounted. */
int al_client_status(al_client *c, const al_peer_status *mine, al_peer_status *theirs, al_err *err);
/* From any thread: end the operation in progress (its call in flight fails
 * with CANCELLED at once, and it makes no retry). Operations begun later are
 * not affected. The agent calls it when its heartbeats find a peer down, so
 * that a push to a peer that froze mid-exchange does not wait out its
 * deadline (and retries). */
void al_client_cancel(al_client *c);
/* The gRPC status of the last call and its details. */
int al_client_last_status(const al_client *c);
const char *al_client_last_details(const al_client *c);
void al_client_bytes(const al_client *c, uint64_t *tx, uint64_t *rx);
/* Low level, for tests and tools: one call of `method` ("Hello", "PushShard",
 * ...) sending n raw messages, no retry. Returns the gRPC status (>= 0), the
 * first reply message in *reply (malloc'd, may be NULL), or a negative AL_E*
 * code if the call could not even be made. */
int al_client_call_raw(al_client *c, const char *method, const uint8_t *const *msgs,
                       const size_t *lens, size_t n, uint8_t **reply, size_t *reply_len,
                       al_err *err);

#endif
