/* wire.c -- validation of every received message, field by field (the limits
 * are documented in proto/autoloco.proto). */
#include "wire.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "al_codec.h"

const char *al_status_name(int st) {
    static const char *names[] = {"OK",
                                  "CANCELLED",
                                  "UNKNOWN",
                                  "INVALID_ARGUMENT",
                                  "DEADLINE_EXCEEDED",
                                  "NOT_FOUND",
                                  "ALREADY_EXISTS",
                                  "PERMISSION_DENIED",
                                  "RESOURCE_EXHAUSTED",
                                  "FAILED_PRECONDITION",
                                  "ABORTED",
                                  "OUT_OF_RANGE",
                                  "UNIMPLEMENTED",
                                  "INTERNAL",
                                  "UNAVAILABLE",
                                  "DATA_LOSS",
                                  "UNAUTHENTICATED"};
    return st >= 0 && st < (int)AL_ARRAY_LEN(names) ? names[st] : "?";
}

int al_site_name_ok(const char *s) {
    size_t len = s ? strlen(s) : 0;
    if (len == 0 || len > AL_SITE_MAX) return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Write the reason and return the status: `return bad(why, n, ST, "...")`. */
__attribute__((format(printf, 4, 5))) static int bad(char *why, size_t n, int st, const char *fmt,
                                                     ...) {
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return st;
}

int wire_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                ProtobufCMessage **msg, char *why, size_t n) {
    *msg = protobuf_c_message_unpack(desc, NULL, len, data);
    if (!*msg)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "malformed %s (%zu bytes)", desc->short_name,
                   len);
    return AL_ST_OK;
}

/* ---- shard chunks without copying their payload ---------------------------------------
 *
 * protobuf-c copies every bytes field it unpacks; for a chunk that is the whole
 * payload (megabytes) for nothing, since the server copies it once more into
 * the shard. So the top-level fields are walked here (the wire format: a varint
 * key = field << 3 | type, then a varint, 8 bytes, a varint length and that
 * many bytes, or 4 bytes), every `payload` field is cut out, protobuf-c unpacks
 * the small rest, and the payload is pointed at in place. As in protobuf, the
 * last payload field wins. */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* A varint at data[*pos..len): 0 and the value, or -1 if truncated/too long. */
static int read_varint(const uint8_t *data, size_t len, size_t *pos, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (*pos >= len) return -1;
        uint8_t b = data[(*pos)++];
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

int wire_unpack_chunk(const uint8_t *data, size_t len, Autoloco__V1__ShardChunk **out, char *why,
                      size_t n) {
    *out = NULL;
    enum { MAX_CUTS = 8 };
    size_t cut_at[MAX_CUTS], cut_len[MAX_CUTS], ncut = 0, cut_total = 0;
    const uint8_t *payload = NULL;
    size_t payload_len = 0, pos = 0;
    while (pos < len) {
        size_t start = pos;
        uint64_t key, v;
        if (read_varint(data, len, &pos, &key) || (key >> 3) == 0 || (key >> 3) > UINT32_MAX)
            return bad(why, n, AL_ST_INVALID_ARGUMENT, "malformed ShardChunk (%zu bytes)", len);
        int ok = 1;
        switch (key & 7) {
        case WT_VARINT:
            ok = !read_varint(data, len, &pos, &v);
            break;
        case WT_I64:
            ok = len - pos >= 8, pos += 8;
            break;
        case WT_I32:
            ok = len - pos >= 4, pos += 4;
            break;
        case WT_LEN:
            ok = !read_varint(data, len, &pos, &v) && v <= len - pos;
            if (ok && (key >> 3) == WIRE_CHUNK_PAYLOAD_FIELD) {
                if (ncut == MAX_CUTS)
                    return bad(why, n, AL_ST_INVALID_ARGUMENT,
                               "payload: more than %d payload fields in one chunk", MAX_CUTS);
                payload = data + pos;
                payload_len = (size_t)v;
                cut_at[ncut] = start;
                cut_len[ncut] = pos + (size_t)v - start;
                cut_total += cut_len[ncut++];
            }
            if (ok) pos += (size_t)v;
            break;
        default:
            ok = 0; /* groups (3, 4) and reserved types: not in this schema */
        }
        if (!ok)
            return bad(why, n, AL_ST_INVALID_ARGUMENT, "malformed ShardChunk (%zu bytes)", len);
    }
    /* the rest, without the payload fields, through protobuf-c */
    size_t rest_len = len - cut_total;
    /* zeroed: gcc with -fsanitize cannot see that all rest_len bytes are written */
    uint8_t small[512] = {0};
    uint8_t *rest = rest_len <= sizeof small ? small : malloc(rest_len);
    if (!rest) return bad(why, n, AL_ST_RESOURCE_EXHAUSTED, "ShardChunk: out of memory");
    size_t from = 0, w = 0;
    for (size_t i = 0; i < ncut; i++) {
        memcpy(rest + w, data + from, cut_at[i] - from);
        w += cut_at[i] - from;
        from = cut_at[i] + cut_len[i];
    }
    if (len > from) memcpy(rest + w, data + from, len - from);
    Autoloco__V1__ShardChunk *m = (Autoloco__V1__ShardChunk *)protobuf_c_message_unpack(
        &autoloco__v1__shard_chunk__descriptor, NULL, rest_len, rest);
    if (rest != small) free(rest);
    if (!m) return bad(why, n, AL_ST_INVALID_ARGUMENT, "malformed ShardChunk (%zu bytes)", len);
    m->payload.data = (uint8_t *)payload; /* NULL when absent, as protobuf-c leaves it */
    m->payload.len = payload_len;
    *out = m;
    return AL_ST_OK;
}

void wire_free_chunk(Autoloco__V1__ShardChunk *m) {
    if (!m) return;
    m->payload.data = NULL; /* not protobuf-c's to free */
    m->payload.len = 0;
    protobuf_c_message_free_unpacked(&m->base, NULL);
}

static int check_common(uint32_t schema, const char *site, char *why, size_t n) {
    if (schema != AL_SCHEMA)
        return bad(why, n, AL_ST_FAILED_PRECONDITION, "schema: version %u, this site speaks %d",
                   schema, AL_SCHEMA);
    if (!al_site_name_ok(site))
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "site: '%.70s' is not a site name (1..64 of [A-Za-z0-9._-])", site ? site : "");
    return AL_ST_OK;
}

static int run_id_ok(const char *s) {
    size_t len = s ? strlen(s) : 0;
    if (len == 0 || len > AL_RUN_ID_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x21 || s[i] > 0x7e) return 0;
    return 1;
}

int wire_check_hello(const Autoloco__V1__Handshake *m, char *why, size_t n) {
    int st = check_common(m->schema, m->site, why, n);
    if (st) return st;
    if (!run_id_ok(m->run_id))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "run_id: empty, too long or not printable");
    if (m->theta_hash.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "theta_hash: %zu bytes, need 32",
                   m->theta_hash.len);
    if (m->config_hash.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "config_hash: %zu bytes, need 32",
                   m->config_hash.len);
    size_t rl = m->run_config ? strlen(m->run_config) : 0;
    if (rl > AL_RUN_CONFIG_MAX)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "run_config: %zu bytes, at most %d", rl,
                   AL_RUN_CONFIG_MAX);
    for (size_t i = 0; i < rl; i++)
        if ((m->run_config[i] < 0x20 || m->run_config[i] > 0x7e) && m->run_config[i] != '\n')
            return bad(why, n, AL_ST_INVALID_ARGUMENT,
                       "run_config: byte %zu is neither printable ASCII nor a newline", i);
    if (m->next_interval < 1 || m->next_interval > AL_INTERVAL_MAX)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "next_interval: %u outside [1, %u]",
                   m->next_interval, AL_INTERVAL_MAX);
    if (m->n_members > AL_MEMBERS_MAX)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "members: %zu names, at most %d", m->n_members,
                   AL_MEMBERS_MAX);
    for (size_t i = 0; i < m->n_members; i++)
        if (!al_site_name_ok(m->members[i]))
            return bad(why, n, AL_ST_INVALID_ARGUMENT, "members[%zu]: not a site name", i);
    return AL_ST_OK;
}

static int phase_ok(int p) {
    return p == AL_PHASE_REDUCE || p == AL_PHASE_GATHER;
}

static int check_shard_id(uint32_t id, uint32_t count, const wire_limits *lim, char *why,
                          size_t n) {
    /* a round's shard count is its member count, which shrinks when a site
     * drops: anything from 1 to the run's maximum */
    if (count == 0 || count > lim->num_shards)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "num_shards: %u, this run allows 1..%u", count,
                   lim->num_shards);
    if (id >= count)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "shard_id: %u is not below num_shards %u", id,
                   count);
    return AL_ST_OK;
}

int wire_check_chunk(const Autoloco__V1__ShardChunk *m, const wire_limits *lim, char *why,
                     size_t n) {
    int st = check_common(m->schema, m->site, why, n);
    if (st) return st;
    if (!phase_ok(m->phase))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "phase: %d is unknown", (int)m->phase);
    if ((st = check_shard_id(m->shard_id, m->num_shards, lim, why, n))) return st;
    if ((int)m->codec < AL_CODEC_FP32 || (int)m->codec > AL_CODEC_INT4)
        return bad(why, n, AL_ST_UNIMPLEMENTED, "codec: %d is unknown", (int)m->codec);
    if (m->total_bytes == 0 || m->total_bytes > lim->max_shard_bytes)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "total_bytes: %llu outside [1, %llu]",
                   (unsigned long long)m->total_bytes, (unsigned long long)lim->max_shard_bytes);
    if (m->payload.len == 0 || m->payload.len > lim->max_payload)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "payload: %zu bytes outside [1, %zu]",
                   m->payload.len, lim->max_payload);
    if (m->offset > m->total_bytes || m->payload.len > m->total_bytes - m->offset)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "offset: %llu + %zu bytes passes total_bytes %llu",
                   (unsigned long long)m->offset, m->payload.len,
                   (unsigned long long)m->total_bytes);
    if (al_xxh64(m->payload.data, m->payload.len, 0) != m->checksum)
        return bad(why, n, AL_ST_DATA_LOSS, "checksum: payload at offset %llu does not match",
                   (unsigned long long)m->offset);
    return AL_ST_OK;
}

int wire_check_query(const Autoloco__V1__ShardQuery *m, const wire_limits *lim, char *why,
                     size_t n) {
    int st = check_common(m->schema, m->site, why, n);
    if (st) return st;
    if (!phase_ok(m->phase))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "phase: %d is unknown", (int)m->phase);
    if (m->shard_id >= lim->num_shards)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "shard_id: %u is not below %u", m->shard_id,
                   lim->num_shards);
    return AL_ST_OK;
}

static int finite_nonneg(double v) {
    return isfinite(v) && v >= 0;
}

int wire_check_stats(const Autoloco__V1__Stats *m, char *why, size_t n) {
    int st = check_common(m->schema, m->site, why, n);
    if (st) return st;
    if (!isfinite(m->mean_loss))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "mean_loss: not finite");
    if (!finite_nonneg(m->grad_norm))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "grad_norm: not a finite value >= 0");
    if (!finite_nonneg(m->delta_sq_norm))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "delta_sq_norm: not a finite value >= 0");
    if (!finite_nonneg(m->inner_lr_sum))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "inner_lr_sum: not a finite value >= 0");
    if (!finite_nonneg(m->compute_s))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "compute_s: not a finite value >= 0");
    if (!finite_nonneg(m->comm_s))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "comm_s: not a finite value >= 0");
    if (m->steps < 1) return bad(why, n, AL_ST_INVALID_ARGUMENT, "steps: 0");
    return AL_ST_OK;
}

static int part_ok(int p) {
    return p >= AL_STATE_THETA && p <= AL_STATE_META;
}

int wire_check_state_request(const Autoloco__V1__StateRequest *m, char *why, size_t n) {
    int st = check_common(m->schema, m->site, why, n);
    if (st) return st;
    if (!run_id_ok(m->run_id)) return bad(why, n, AL_ST_INVALID_ARGUMENT, "run_id: invalid");
    if (!part_ok(m->part))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "part: %d is unknown", (int)m->part);
    if (m->candidate.len != 0 && m->candidate.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "candidate: a hash of %zu bytes (0 or 32)",
                   m->candidate.len);
    return AL_ST_OK;
}

int wire_check_state_chunk(const Autoloco__V1__StateChunk *m, uint64_t max_total, char *why,
                           size_t n) {
    if (m->schema != AL_SCHEMA)
        return bad(why, n, AL_ST_FAILED_PRECONDITION, "schema: version %u", m->schema);
    if (!part_ok(m->part))
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "part: %d is unknown", (int)m->part);
    if (m->total_bytes > max_total)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "total_bytes: %llu above %llu",
                   (unsigned long long)m->total_bytes, (unsigned long long)max_total);
    if (m->offset > m->total_bytes || m->payload.len > m->total_bytes - m->offset)
        return bad(why, n, AL_ST_OUT_OF_RANGE, "offset: %llu + %zu passes %llu",
                   (unsigned long long)m->offset, m->payload.len,
                   (unsigned long long)m->total_bytes);
    if (al_xxh64(m->payload.data, m->payload.len, 0) != m->checksum)
        return bad(why, n, AL_ST_DATA_LOSS, "checksum: state chunk at %llu does not match",
                   (unsigned long long)m->offset);
    return AL_ST_OK;
}

int wire_check_heartbeat(const Autoloco__V1__Heartbeat *m, char *why, size_t n) {
    int st = check_common(m->schema, m->site, why, n);
    if (st) return st;
    if (m->base_hash.len != 0 && m->base_hash.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "heartbeat: base hash of %zu bytes (0 or 32)",
                   m->base_hash.len);
    if (m->vote > 2)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "heartbeat: vote %u (0 none, 1 null, 2 hash)",
                   m->vote);
    if (m->vote == 2 && (m->vote_hash.len != 32 || m->members == 0))
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: a hash vote needs a 32-byte hash and its members (%zu bytes, "
                   "members %#x)",
                   m->vote_hash.len, m->members);
    if (m->vote != 2 && (m->vote_hash.len != 0 || m->members != 0))
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: a hash or members without a hash vote (vote %u)", m->vote);
    if (m->incarnation != 0 && m->base_hash.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: an incarnation without a round status (no base hash)");
    if (m->excluded != 0 && m->base_hash.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: exclusions without a round status (no base hash)");
    if (m->hears != 0 && m->base_hash.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: the sites heard without a round status (no base hash)");
    int report = m->vote_origin || m->accepted || m->acc_epoch || m->acc_hash.len ||
                 m->acc_members || m->acc_origin;
    if (report && m->base_hash.len != 32)
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: an accepted value without a round status (no base hash)");
    if (m->vote_origin > m->epoch || (m->vote != 2 && m->vote_origin))
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: vote origin %llu (a hash vote's, at most the epoch %llu)",
                   (unsigned long long)m->vote_origin, (unsigned long long)m->epoch);
    if (m->accepted > 1)
        return bad(why, n, AL_ST_INVALID_ARGUMENT, "heartbeat: accepted %u (0 or 1)", m->accepted);
    if (m->accepted && (m->acc_hash.len != 32 || m->acc_members == 0 || m->acc_epoch > m->epoch ||
                        m->acc_origin > m->acc_epoch))
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: an accepted value needs a 32-byte hash, its members and "
                   "origin <= acc_epoch <= epoch (%zu bytes, members %#x, origin %llu, "
                   "acc_epoch %llu, epoch %llu)",
                   m->acc_hash.len, m->acc_members, (unsigned long long)m->acc_origin,
                   (unsigned long long)m->acc_epoch, (unsigned long long)m->epoch);
    if (!m->accepted && (m->acc_hash.len || m->acc_members || m->acc_epoch || m->acc_origin))
        return bad(why, n, AL_ST_INVALID_ARGUMENT,
                   "heartbeat: an accepted hash, members or epoch without accepted = 1");
    return AL_ST_OK;
}

void wire_status_from(al_peer_status *out, const Autoloco__V1__Heartbeat *m) {
    memset(out, 0, sizeof *out);
    out->round = m->round;
    out->epoch = m->epoch;
    out->have_base = m->base_hash.len == 32;
    if (out->have_base) memcpy(out->base, m->base_hash.data, 32);
    out->vote = m->vote;
    if (m->vote_hash.len == 32) memcpy(out->vote_hash, m->vote_hash.data, 32);
    out->members = m->members;
    out->incarnation = out->have_base ? m->incarnation : 0;
    out->excluded = out->have_base ? m->excluded : 0;
    out->hears = out->have_base ? m->hears : 0;
    if (!out->have_base) return;
    out->vote_origin = m->vote_origin;
    out->accepted = m->accepted;
    if (m->accepted) {
        out->acc_epoch = m->acc_epoch;
        memcpy(out->acc_hash, m->acc_hash.data, 32);
        out->acc_members = m->acc_members;
        out->acc_origin = m->acc_origin;
    }
}

/* `st` must outlive m: the bytes fields point into it. */
void wire_status_to(Autoloco__V1__Heartbeat *m, const al_peer_status *st) {
    m->round = st->round;
    m->epoch = st->epoch;
    if (st->have_base) {
        m->base_hash.data = (uint8_t *)st->base;
        m->base_hash.len = 32;
    }
    m->vote = st->vote;
    if (st->vote == 2) {
        m->vote_hash.data = (uint8_t *)st->vote_hash;
        m->vote_hash.len = 32;
        m->members = st->members;
    }
    if (st->have_base) m->incarnation = st->incarnation;
    if (st->have_base) m->excluded = st->excluded;
    if (st->have_base) m->hears = st->hears;
    if (!st->have_base) return;
    if (st->vote == 2) m->vote_origin = st->vote_origin;
    if (st->accepted) {
        m->accepted = 1;
        m->acc_epoch = st->acc_epoch;
        m->acc_hash.data = (uint8_t *)st->acc_hash;
        m->acc_hash.len = 32;
        m->acc_members = st->acc_members;
        m->acc_origin = st->acc_origin;
    }
}

int wire_check_ack(const Autoloco__V1__ShardAck *m, char *why, size_t n) {
    (void)m;
    (void)why;
    (void)n;
    return AL_ST_OK; /* every value is meaningful; the client compares it to its shard */
}

/* ---- conversions ------------------------------------------------------------------ */

static void copy_name(char *dst, size_t cap, const char *src) {
    snprintf(dst, cap, "%s", src ? src : "");
}

void wire_hello_from(al_hello *out, const Autoloco__V1__Handshake *m) {
    memset(out, 0, sizeof *out);
    copy_name(out->site, sizeof out->site, m->site);
    copy_name(out->run_id, sizeof out->run_id, m->run_id);
    out->round = m->round;
    out->epoch = m->epoch;
    if (m->theta_hash.len == 32) memcpy(out->theta_hash, m->theta_hash.data, 32);
    if (m->config_hash.len == 32) memcpy(out->config_hash, m->config_hash.data, 32);
    out->next_interval = m->next_interval;
    if (m->run_config) snprintf(out->run_config, sizeof out->run_config, "%s", m->run_config);
    out->n_members = AL_MIN(m->n_members, AL_ARRAY_LEN(out->members));
    for (size_t i = 0; i < out->n_members; i++)
        copy_name(out->members[i], sizeof out->members[i], m->members[i]);
}

void wire_hello_to(Autoloco__V1__Handshake *m, const al_hello *h, char **members) {
    autoloco__v1__handshake__init(m);
    m->schema = AL_SCHEMA;
    m->site = (char *)h->site;
    m->run_id = (char *)h->run_id;
    m->round = h->round;
    m->epoch = h->epoch;
    m->theta_hash.data = (uint8_t *)h->theta_hash;
    m->theta_hash.len = 32;
    m->config_hash.data = (uint8_t *)h->config_hash;
    m->config_hash.len = 32;
    m->next_interval = h->next_interval;
    m->run_config = (char *)h->run_config;
    m->n_members = AL_MIN(h->n_members, AL_ARRAY_LEN(h->members));
    for (size_t i = 0; i < m->n_members; i++) members[i] = (char *)h->members[i];
    m->members = members;
}

void wire_meta_from(al_shard_meta *out, const Autoloco__V1__ShardChunk *m) {
    memset(out, 0, sizeof *out);
    copy_name(out->site, sizeof out->site, m->site);
    out->round = m->round;
    out->epoch = m->epoch;
    out->phase = (uint32_t)m->phase;
    out->shard_id = m->shard_id;
    out->num_shards = m->num_shards;
    out->total_bytes = m->total_bytes;
    out->codec = (uint32_t)m->codec;
    out->zstd = m->zstd;
    out->shard_checksum = m->shard_checksum;
}

void wire_stats_from(al_stats *out, const Autoloco__V1__Stats *m) {
    memset(out, 0, sizeof *out);
    copy_name(out->site, sizeof out->site, m->site);
    out->round = m->round;
    out->epoch = m->epoch;
    out->mean_loss = m->mean_loss;
    out->grad_norm = m->grad_norm;
    out->delta_sq_norm = m->delta_sq_norm;
    out->inner_lr_sum = m->inner_lr_sum;
    out->compute_s = m->compute_s;
    out->comm_s = m->comm_s;
    out->tokens = m->tokens;
    out->steps = m->steps;
}
