/*
 * wire.h -- inside transport/: decoding and validating the messages of
 * proto/autoloco.proto. Pure functions over bytes (no gRPC, no I/O), so the
 * fuzz target and the unit tests drive them directly.
 *
 * Every check returns an al_status: AL_ST_OK, or the status the sender gets,
 * with a reason written to why ("field: what is wrong").
 */
#ifndef AL_WIRE_H
#define AL_WIRE_H

#include "al_transport.h"
#include "autoloco.pb-c.h"

/* Limits a receiver applies to shard chunks. */
typedef struct wire_limits {
    uint32_t num_shards;
    uint64_t max_shard_bytes;
    size_t max_payload;
} wire_limits;

/* Unpack `len` bytes as message `desc`; INVALID_ARGUMENT if malformed. The
 * result is freed with protobuf_c_message_free_unpacked(msg, NULL). */
int wire_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *data, size_t len,
                ProtobufCMessage **msg, char *why, size_t n);

/* ShardChunk.payload's field number in proto/autoloco.proto: the client
 * appends the payload itself under it, the server cuts it out (no copies). */
#define WIRE_CHUNK_PAYLOAD_FIELD 12

/* A ShardChunk whose payload is not copied: (*m)->payload points into data,
 * which must outlive *m. Same statuses as wire_unpack. Free with
 * wire_free_chunk (never with protobuf_c_message_free_unpacked). */
int wire_unpack_chunk(const uint8_t *data, size_t len, Autoloco__V1__ShardChunk **m, char *why,
                      size_t n);
void wire_free_chunk(Autoloco__V1__ShardChunk *m);

int wire_check_hello(const Autoloco__V1__Handshake *m, char *why, size_t n);
int wire_check_chunk(const Autoloco__V1__ShardChunk *m, const wire_limits *lim, char *why,
                     size_t n);
int wire_check_query(const Autoloco__V1__ShardQuery *m, const wire_limits *lim, char *why,
                     size_t n);
int wire_check_stats(const Autoloco__V1__Stats *m, char *why, size_t n);
int wire_check_state_request(const Autoloco__V1__StateRequest *m, char *why, size_t n);
int wire_check_state_chunk(const Autoloco__V1__StateChunk *m, uint64_t max_total, char *why,
                           size_t n);
int wire_check_heartbeat(const Autoloco__V1__Heartbeat *m, char *why, size_t n);
void wire_status_from(al_peer_status *out, const Autoloco__V1__Heartbeat *m);
void wire_status_to(Autoloco__V1__Heartbeat *m, const al_peer_status *st);
int wire_check_ack(const Autoloco__V1__ShardAck *m, char *why, size_t n);

/* Conversions between the wire structs and al_transport.h's (after a check). */
void wire_hello_from(al_hello *out, const Autoloco__V1__Handshake *m);
/* Fills m, pointing into h (no allocation); members points at caller storage
 * of 16 pointers. */
void wire_hello_to(Autoloco__V1__Handshake *m, const al_hello *h, char **members);
void wire_meta_from(al_shard_meta *out, const Autoloco__V1__ShardChunk *m);
void wire_stats_from(al_stats *out, const Autoloco__V1__Stats *m);

#endif
