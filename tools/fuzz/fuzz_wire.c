/*
 * fuzz_wire.c -- libFuzzer target: arbitrary bytes as each message of the
 * wire schema, through protobuf-c's unpacker and transport/wire.c's checks,
 * exactly as the server meets them; shard chunks also through the server's
 * zero-copy decoder, checked against protobuf-c's reading. The first byte picks the message type.
 * Built and run by tools/fuzz/smoke.
 */
#include "wire.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const ProtobufCMessageDescriptor *descs[] = {
        &autoloco__v1__handshake__descriptor,      &autoloco__v1__shard_chunk__descriptor,
        &autoloco__v1__shard_query__descriptor,    &autoloco__v1__stats__descriptor,
        &autoloco__v1__state_request__descriptor,  &autoloco__v1__state_chunk__descriptor,
        &autoloco__v1__heartbeat__descriptor,      &autoloco__v1__shard_ack__descriptor,
        &autoloco__v1__handshake_reply__descriptor};
    const ProtobufCMessageDescriptor *d = descs[data[0] % (sizeof descs / sizeof descs[0])];
    ProtobufCMessage *m = NULL;
    char why[400];
    if (d == &autoloco__v1__shard_chunk__descriptor) {
        /* the server's zero-copy decoder must never read out of bounds, and
         * where both decoders accept, it must read what protobuf-c reads */
        Autoloco__V1__ShardChunk *z = NULL;
        if (!wire_unpack_chunk(data + 1, size - 1, &z, why, sizeof why)) {
            if (z->payload.len) {
                if (z->payload.data < data + 1 || z->payload.data + z->payload.len > data + size)
                    __builtin_trap();
            }
            ProtobufCMessage *ref = NULL;
            if (!wire_unpack(d, data + 1, size - 1, &ref, why, sizeof why)) {
                Autoloco__V1__ShardChunk *r = (Autoloco__V1__ShardChunk *)ref;
                if (r->payload.len != z->payload.len || r->offset != z->offset ||
                    r->checksum != z->checksum ||
                    (r->payload.len && memcmp(r->payload.data, z->payload.data, r->payload.len)))
                    __builtin_trap();
                protobuf_c_message_free_unpacked(ref, NULL);
            }
            wire_limits lim0 = {
                .num_shards = 4, .max_shard_bytes = 1 << 20, .max_payload = 1 << 16};
            al_shard_meta meta0;
            if (!wire_check_chunk(z, &lim0, why, sizeof why)) wire_meta_from(&meta0, z);
            wire_free_chunk(z);
        }
    }
    if (wire_unpack(d, data + 1, size - 1, &m, why, sizeof why)) return 0;
    wire_limits lim = {.num_shards = 4, .max_shard_bytes = 1 << 20, .max_payload = 1 << 16};
    al_hello h;
    al_shard_meta meta;
    al_stats st;
    if (d == &autoloco__v1__handshake__descriptor) {
        if (!wire_check_hello((Autoloco__V1__Handshake *)m, why, sizeof why))
            wire_hello_from(&h, (Autoloco__V1__Handshake *)m);
    } else if (d == &autoloco__v1__shard_chunk__descriptor) {
        if (!wire_check_chunk((Autoloco__V1__ShardChunk *)m, &lim, why, sizeof why))
            wire_meta_from(&meta, (Autoloco__V1__ShardChunk *)m);
    } else if (d == &autoloco__v1__shard_query__descriptor) {
        wire_check_query((Autoloco__V1__ShardQuery *)m, &lim, why, sizeof why);
    } else if (d == &autoloco__v1__stats__descriptor) {
        if (!wire_check_stats((Autoloco__V1__Stats *)m, why, sizeof why))
            wire_stats_from(&st, (Autoloco__V1__Stats *)m);
    } else if (d == &autoloco__v1__state_request__descriptor) {
        wire_check_state_request((Autoloco__V1__StateRequest *)m, why, sizeof why);
    } else if (d == &autoloco__v1__state_chunk__descriptor) {
        wire_check_state_chunk((Autoloco__V1__StateChunk *)m, 1 << 20, why, sizeof why);
    } else if (d == &autoloco__v1__heartbeat__descriptor) {
        wire_check_heartbeat((Autoloco__V1__Heartbeat *)m, why, sizeof why);
    } else if (d == &autoloco__v1__handshake_reply__descriptor) {
        Autoloco__V1__HandshakeReply *r = (Autoloco__V1__HandshakeReply *)m;
        if (r->server && !wire_check_hello(r->server, why, sizeof why))
            wire_hello_from(&h, r->server);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
