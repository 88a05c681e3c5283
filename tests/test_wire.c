/*
 * test_wire.c -- validation of every received field (transport/wire.c),
 * without a network: a valid message passes, and each field made invalid in
 * turn is refused with its status and a reason naming the field.
 */
#include "al_test.h"

#include <string.h>

#include "al_codec.h"
#include "wire.h"

static char why[400];

#define EXPECT(call, st, field)                                                                    \
    do {                                                                                           \
        why[0] = '\0';                                                                             \
        int got_ = (call);                                                                         \
        if (got_ != (st))                                                                          \
            fail_msg("%s: status %s, expected %s (%s)", #call, al_status_name(got_),               \
                     al_status_name(st), why);                                                     \
        if ((st) && !strstr(why, field)) fail_msg("reason '%s' does not name '%s'", why, field);   \
    } while (0)

static uint8_t hash[32];

static Autoloco__V1__Handshake good_hello(void) {
    Autoloco__V1__Handshake m = AUTOLOCO__V1__HANDSHAKE__INIT;
    m.schema = AL_SCHEMA;
    m.site = (char *)"site-a.eu";
    m.run_id = (char *)"run-2025-01";
    m.theta_hash.data = hash;
    m.theta_hash.len = 32;
    m.config_hash.data = hash;
    m.config_hash.len = 32;
    m.next_interval = 40;
    return m;
}

static void test_hello(void **state) {
    (void)state;
    Autoloco__V1__Handshake m = good_hello();
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_OK, "");
    m.schema = 2;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_FAILED_PRECONDITION, "schema");
    m = good_hello();
    m.site = (char *)"";
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "site");
    char longname[80];
    memset(longname, 'x', 65);
    longname[65] = '\0';
    m.site = longname;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "site");
    m.site = (char *)"a b";
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "site");
    m = good_hello();
    m.run_id = (char *)"";
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "run_id");
    m.run_id = (char *)"run\n1";
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "run_id");
    m = good_hello();
    m.theta_hash.len = 31;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "theta_hash");
    m = good_hello();
    m.config_hash.len = 0;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "config_hash");
    m = good_hello();
    m.next_interval = 0;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "next_interval");
    m.next_interval = AL_INTERVAL_MAX + 1;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "next_interval");
    m = good_hello();
    char *members[] = {(char *)"a", (char *)"b;rm"};
    m.members = members;
    m.n_members = 2;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "members[1]");
    m.n_members = AL_MEMBERS_MAX + 1;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "members");
    m = good_hello(); /* the run configuration text: printable lines, bounded */
    m.run_config = (char *)"model.preset = tiny\npolicy.h_base = 20\n";
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_OK, "");
    m.run_config = (char *)"model.preset = tiny\tx\n";
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "run_config");
    static char big[AL_RUN_CONFIG_MAX + 2];
    memset(big, 'x', sizeof big - 1);
    m.run_config = big;
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_INVALID_ARGUMENT, "run_config");
    big[AL_RUN_CONFIG_MAX] = '\0';
    EXPECT(wire_check_hello(&m, why, sizeof why), AL_ST_OK, "");

    /* conversions both ways keep every field */
    al_hello h = {.round = 3, .epoch = 4, .next_interval = 77, .n_members = 1};
    snprintf(h.site, sizeof h.site, "x");
    snprintf(h.run_id, sizeof h.run_id, "r");
    snprintf(h.members[0], sizeof h.members[0], "y");
    snprintf(h.run_config, sizeof h.run_config, "inner.lr = 0.001\n");
    h.theta_hash[5] = 9;
    char *mem[16];
    wire_hello_to(&m, &h, mem);
    al_hello back;
    wire_hello_from(&back, &m);
    assert_memory_equal(&back, &h, sizeof h);
}

static uint8_t payload[4096];

static Autoloco__V1__ShardChunk good_chunk(void) {
    Autoloco__V1__ShardChunk m = AUTOLOCO__V1__SHARD_CHUNK__INIT;
    m.schema = AL_SCHEMA;
    m.site = (char *)"b";
    m.phase = AUTOLOCO__V1__PHASE__PHASE_GATHER;
    m.shard_id = 3;
    m.num_shards = 4;
    m.offset = 1000;
    m.total_bytes = 10000;
    m.codec = AUTOLOCO__V1__CODEC__CODEC_INT4;
    m.payload.data = payload;
    m.payload.len = sizeof payload;
    m.checksum = al_xxh64(payload, sizeof payload, 0);
    return m;
}

static void test_chunk(void **state) {
    (void)state;
    wire_limits lim = {.num_shards = 4, .max_shard_bytes = 1 << 20, .max_payload = 8192};
    Autoloco__V1__ShardChunk m = good_chunk();
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OK, "");
    m.phase = AUTOLOCO__V1__PHASE__PHASE_UNSPECIFIED;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_INVALID_ARGUMENT, "phase");
    m = good_chunk();
    m.codec = AUTOLOCO__V1__CODEC__CODEC_UNSPECIFIED;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_UNIMPLEMENTED, "codec");
    m = good_chunk();
    m.shard_id = 4;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "shard_id");
    m = good_chunk();
    m.num_shards = 5;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "num_shards");
    m = good_chunk();
    m.total_bytes = 0;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "total_bytes");
    m.total_bytes = (1 << 20) + 1;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "total_bytes");
    m = good_chunk();
    m.payload.len = 0;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "payload");
    lim.max_payload = 4095;
    m = good_chunk();
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "payload");
    lim.max_payload = 8192;
    m.offset = 10000 - 4095; /* one byte past the end */
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "offset");
    m.offset = UINT64_MAX - 10; /* no wrap-around */
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "offset");
    m = good_chunk();
    m.checksum ^= 1u << 20;
    EXPECT(wire_check_chunk(&m, &lim, why, sizeof why), AL_ST_DATA_LOSS, "checksum");

    Autoloco__V1__ShardQuery q = AUTOLOCO__V1__SHARD_QUERY__INIT;
    q.schema = AL_SCHEMA;
    q.site = (char *)"b";
    q.phase = AUTOLOCO__V1__PHASE__PHASE_REDUCE;
    EXPECT(wire_check_query(&q, &lim, why, sizeof why), AL_ST_OK, "");
    q.shard_id = 9;
    EXPECT(wire_check_query(&q, &lim, why, sizeof why), AL_ST_OUT_OF_RANGE, "shard_id");
}

static void test_stats_state_heartbeat(void **state) {
    (void)state;
    Autoloco__V1__Stats s = AUTOLOCO__V1__STATS__INIT;
    s.schema = AL_SCHEMA;
    s.site = (char *)"b";
    s.mean_loss = -0.5; /* a loss may be negative (a log-likelihood); only finite matters */
    s.steps = 10;
    EXPECT(wire_check_stats(&s, why, sizeof why), AL_ST_OK, "");
    s.mean_loss = INFINITY;
    EXPECT(wire_check_stats(&s, why, sizeof why), AL_ST_INVALID_ARGUMENT, "mean_loss");
    s.mean_loss = 1;
    s.grad_norm = -1;
    EXPECT(wire_check_stats(&s, why, sizeof why), AL_ST_INVALID_ARGUMENT, "grad_norm");
    s.grad_norm = 0;
    s.delta_sq_norm = NAN;
    EXPECT(wire_check_stats(&s, why, sizeof why), AL_ST_INVALID_ARGUMENT, "delta_sq_norm");
    s.delta_sq_norm = 0;
    s.inner_lr_sum = -1e-9;
    EXPECT(wire_check_stats(&s, why, sizeof why), AL_ST_INVALID_ARGUMENT, "inner_lr_sum");
    s.inner_lr_sum = 0;
    s.compute_s = NAN;
    EXPECT(wire_check_stats(&s, why, sizeof why), AL_ST_INVALID_ARGUMENT, "compute_s");
    s.compute_s = 0;
    s.steps = 0;
    EXPECT(wire_check_stats(&s, why, sizeof why), AL_ST_INVALID_ARGUMENT, "steps");

    Autoloco__V1__StateRequest r = AUTOLOCO__V1__STATE_REQUEST__INIT;
    r.schema = AL_SCHEMA;
    r.site = (char *)"b";
    r.run_id = (char *)"r";
    r.part = AUTOLOCO__V1__STATE_PART__STATE_THETA;
    EXPECT(wire_check_state_request(&r, why, sizeof why), AL_ST_OK, "");
    uint8_t hash32[33] = {0};
    r.candidate.data = hash32; /* a candidate by its hash (the carry): 32 bytes or none */
    r.candidate.len = 32;
    EXPECT(wire_check_state_request(&r, why, sizeof why), AL_ST_OK, "");
    r.candidate.len = 33;
    EXPECT(wire_check_state_request(&r, why, sizeof why), AL_ST_INVALID_ARGUMENT, "candidate");
    r.candidate.len = 0;
    r.part = (Autoloco__V1__StatePart)4;
    EXPECT(wire_check_state_request(&r, why, sizeof why), AL_ST_INVALID_ARGUMENT, "part");

    Autoloco__V1__StateChunk c = AUTOLOCO__V1__STATE_CHUNK__INIT;
    c.schema = AL_SCHEMA;
    c.part = AUTOLOCO__V1__STATE_PART__STATE_MOMENTUM;
    c.total_bytes = 5000;
    c.payload.data = payload;
    c.payload.len = 4096;
    c.checksum = al_xxh64(payload, 4096, 0);
    EXPECT(wire_check_state_chunk(&c, 5000, why, sizeof why), AL_ST_OK, "");
    EXPECT(wire_check_state_chunk(&c, 4999, why, sizeof why), AL_ST_OUT_OF_RANGE, "total_bytes");
    c.offset = 1000;
    EXPECT(wire_check_state_chunk(&c, 5000, why, sizeof why), AL_ST_OUT_OF_RANGE, "offset");
    c.offset = 0;
    c.checksum++;
    EXPECT(wire_check_state_chunk(&c, 5000, why, sizeof why), AL_ST_DATA_LOSS, "checksum");

    Autoloco__V1__Heartbeat h = AUTOLOCO__V1__HEARTBEAT__INIT;
    h.schema = AL_SCHEMA;
    h.site = (char *)"b";
    EXPECT(wire_check_heartbeat(&h, why, sizeof why), AL_ST_OK, "");
    h.site = NULL;
    EXPECT(wire_check_heartbeat(&h, why, sizeof why), AL_ST_INVALID_ARGUMENT, "site");
    h.site = (char *)"b";

    /* the incarnation: only with a round status; an old peer's 0 stays 0 */
    h.incarnation = 7;
    EXPECT(wire_check_heartbeat(&h, why, sizeof why), AL_ST_INVALID_ARGUMENT, "incarnation");
    h.incarnation = 0; /* the liars it leaves out: only with a round status too */
    h.excluded = 4;
    EXPECT(wire_check_heartbeat(&h, why, sizeof why), AL_ST_INVALID_ARGUMENT, "exclusions");
    h.excluded = 0;
    h.hears = 3; /* the sites it hears: only with a round status too */
    EXPECT(wire_check_heartbeat(&h, why, sizeof why), AL_ST_INVALID_ARGUMENT, "sites heard");
    h.hears = 0;
    al_peer_status ps = {
        .round = 3, .epoch = 1, .have_base = 1, .incarnation = 12345, .excluded = 4, .hears = 5};
    memset(ps.base, 0xab, 32);
    Autoloco__V1__Heartbeat h2 = AUTOLOCO__V1__HEARTBEAT__INIT;
    h2.schema = AL_SCHEMA;
    h2.site = (char *)"b";
    wire_status_to(&h2, &ps);
    EXPECT(wire_check_heartbeat(&h2, why, sizeof why), AL_ST_OK, "");
    al_peer_status back;
    wire_status_from(&back, &h2);
    assert_int_equal(back.incarnation, 12345);
    assert_int_equal(back.excluded, 4);
    assert_int_equal(back.hears, 5);
    assert_int_equal(back.round, 3);
    h2.incarnation = 0; /* a peer from before incarnations */
    EXPECT(wire_check_heartbeat(&h2, why, sizeof why), AL_ST_OK, "");
    wire_status_from(&back, &h2);
    assert_int_equal(back.incarnation, 0);

    /* the carry's report: a hash vote's origin, the latest hash vote */
    al_peer_status pc = {.round = 3, .epoch = 4, .have_base = 1, .vote = 2, .members = 3};
    memset(pc.base, 0xab, 32);
    memset(pc.vote_hash, 0xcd, 32);
    pc.vote_origin = 2;
    pc.accepted = 1;
    pc.acc_epoch = 2;
    memset(pc.acc_hash, 0xcd, 32);
    pc.acc_members = 3;
    pc.acc_origin = 1;
    Autoloco__V1__Heartbeat h3 = AUTOLOCO__V1__HEARTBEAT__INIT;
    h3.schema = AL_SCHEMA;
    h3.site = (char *)"b";
    wire_status_to(&h3, &pc);
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_OK, "");
    wire_status_from(&back, &h3);
    assert_int_equal(back.vote_origin, 2);
    assert_true(back.accepted == 1 && back.acc_epoch == 2 && back.acc_members == 3 &&
                back.acc_origin == 1 && back.acc_hash[31] == 0xcd);
    h3.acc_epoch = 5; /* an accepted vote after the attempt it reports in */
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_INVALID_ARGUMENT, "accepted value");
    h3.acc_epoch = 2;
    h3.acc_origin = 3; /* computed after it was voted */
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_INVALID_ARGUMENT, "accepted value");
    h3.acc_origin = 1;
    h3.acc_hash.len = 0;
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_INVALID_ARGUMENT, "accepted value");
    h3.acc_hash.len = 32;
    h3.accepted = 2;
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_INVALID_ARGUMENT, "accepted 2");
    h3.accepted = 0; /* fields of an accepted value without it */
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_INVALID_ARGUMENT, "without accepted");
    h3.accepted = 1;
    h3.vote_origin = 5; /* a vote computed after its attempt */
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_INVALID_ARGUMENT, "vote origin");
    h3.vote_origin = 2;
    h3.base_hash.len = 0; /* a report without a round status */
    h3.vote = 0;
    h3.vote_hash.len = 0;
    h3.members = 0;
    h3.vote_origin = 0;
    EXPECT(wire_check_heartbeat(&h3, why, sizeof why), AL_ST_INVALID_ARGUMENT, "no base hash");
}

static void test_unpack(void **state) {
    (void)state;
    ProtobufCMessage *m = NULL;
    const uint8_t junk[] = {0x0a, 0x05, 'a'}; /* a string field longer than the buffer */
    EXPECT(
        wire_unpack(&autoloco__v1__handshake__descriptor, junk, sizeof junk, &m, why, sizeof why),
        AL_ST_INVALID_ARGUMENT, "malformed Handshake");
    assert_null(m);
    Autoloco__V1__ShardChunk ch = good_chunk();
    size_t n = protobuf_c_message_get_packed_size(&ch.base);
    uint8_t *buf = malloc(n);
    protobuf_c_message_pack(&ch.base, buf);
    EXPECT(wire_unpack(&autoloco__v1__shard_chunk__descriptor, buf, n, &m, why, sizeof why),
           AL_ST_OK, "");
    Autoloco__V1__ShardChunk *back = (Autoloco__V1__ShardChunk *)m;
    assert_int_equal(back->offset, 1000);
    assert_memory_equal(back->payload.data, payload, sizeof payload);
    al_shard_meta meta;
    wire_meta_from(&meta, back);
    assert_string_equal(meta.site, "b");
    assert_int_equal(meta.codec, AL_CODEC_INT4);
    protobuf_c_message_free_unpacked(m, NULL);
    EXPECT(wire_unpack(&autoloco__v1__shard_chunk__descriptor, buf, n - 1, &m, why, sizeof why),
           AL_ST_INVALID_ARGUMENT, "malformed");
    free(buf);
    assert_string_equal(al_status_name(AL_ST_DATA_LOSS), "DATA_LOSS");
    assert_string_equal(al_status_name(99), "?");
}

/* wire_unpack_chunk (payload not copied) reads what protobuf-c reads: every
 * field, in protobuf's order or with the payload last, the last payload field
 * when there are several, and refuses what is malformed. */
static void same_chunk(const Autoloco__V1__ShardChunk *a, const Autoloco__V1__ShardChunk *b) {
    assert_int_equal(a->schema, b->schema);
    assert_string_equal(a->site, b->site);
    assert_int_equal(a->phase, b->phase);
    assert_int_equal(a->shard_id, b->shard_id);
    assert_int_equal(a->num_shards, b->num_shards);
    assert_int_equal(a->offset, b->offset);
    assert_int_equal(a->total_bytes, b->total_bytes);
    assert_int_equal(a->codec, b->codec);
    assert_true(a->checksum == b->checksum && a->shard_checksum == b->shard_checksum);
    assert_int_equal(a->payload.len, b->payload.len);
    if (a->payload.len) assert_memory_equal(a->payload.data, b->payload.data, a->payload.len);
}

static void test_unpack_chunk(void **state) {
    (void)state;
    Autoloco__V1__ShardChunk m = good_chunk();
    m.shard_checksum = 0x0123456789abcdefull;
    uint8_t buf[8192], buf2[8192];
    size_t len = protobuf_c_message_pack(&m.base, buf);
    Autoloco__V1__ShardChunk *ref = NULL, *got = NULL;
    EXPECT(wire_unpack(&autoloco__v1__shard_chunk__descriptor, buf, len, (ProtobufCMessage **)&ref,
                       why, sizeof why),
           AL_ST_OK, "");
    EXPECT(wire_unpack_chunk(buf, len, &got, why, sizeof why), AL_ST_OK, "");
    same_chunk(got, &m);
    same_chunk(got, ref);
    /* not a copy: the payload is read where it lies */
    assert_true(got->payload.data > buf && got->payload.data < buf + len);
    wire_free_chunk(got);

    /* the payload last (as our client sends it): key 12<<3|2 = 0x62, length */
    Autoloco__V1__ShardChunk h = m;
    h.payload.data = NULL;
    h.payload.len = 0;
    size_t hl = protobuf_c_message_pack(&h.base, buf2);
    buf2[hl++] = 0x62;
    buf2[hl++] = (uint8_t)(0x80 | (sizeof payload & 0x7f));
    buf2[hl++] = (uint8_t)(sizeof payload >> 7);
    memcpy(buf2 + hl, payload, sizeof payload);
    hl += sizeof payload;
    EXPECT(wire_unpack_chunk(buf2, hl, &got, why, sizeof why), AL_ST_OK, "");
    same_chunk(got, &m);
    wire_free_chunk(got);

    /* two payload fields: the last wins, as protobuf-c decides */
    size_t l2 = len;
    memcpy(buf2, buf, len);
    buf2[l2++] = 0x62;
    buf2[l2++] = 3;
    memcpy(buf2 + l2, "xyz", 3);
    l2 += 3;
    protobuf_c_message_free_unpacked(&ref->base, NULL);
    EXPECT(wire_unpack(&autoloco__v1__shard_chunk__descriptor, buf2, l2, (ProtobufCMessage **)&ref,
                       why, sizeof why),
           AL_ST_OK, "");
    EXPECT(wire_unpack_chunk(buf2, l2, &got, why, sizeof why), AL_ST_OK, "");
    assert_int_equal(ref->payload.len, 3);
    same_chunk(got, ref);
    wire_free_chunk(got);
    protobuf_c_message_free_unpacked(&ref->base, NULL);

    /* no payload at all: empty, as protobuf-c leaves it */
    hl = protobuf_c_message_pack(&h.base, buf2);
    EXPECT(wire_unpack_chunk(buf2, hl, &got, why, sizeof why), AL_ST_OK, "");
    assert_int_equal(got->payload.len, 0);
    assert_null(got->payload.data);
    wire_free_chunk(got);

    /* malformed: cut inside the payload, a length past the end, a cut varint,
     * a group, field 0 -- each INVALID_ARGUMENT, nothing allocated */
    EXPECT(wire_unpack_chunk(buf, len - 20, &got, why, sizeof why), AL_ST_INVALID_ARGUMENT,
           "malformed ShardChunk");
    assert_null(got);
    uint8_t bad1[] = {0x62, 0xff, 0xff, 0x03, 1, 2, 3};
    EXPECT(wire_unpack_chunk(bad1, sizeof bad1, &got, why, sizeof why), AL_ST_INVALID_ARGUMENT,
           "malformed");
    uint8_t bad2[] = {0x08, 0x80};
    EXPECT(wire_unpack_chunk(bad2, sizeof bad2, &got, why, sizeof why), AL_ST_INVALID_ARGUMENT,
           "malformed");
    uint8_t bad3[] = {0x0b, 0x0c};
    EXPECT(wire_unpack_chunk(bad3, sizeof bad3, &got, why, sizeof why), AL_ST_INVALID_ARGUMENT,
           "malformed");
    uint8_t bad4[] = {0x02, 0x00};
    EXPECT(wire_unpack_chunk(bad4, sizeof bad4, &got, why, sizeof why), AL_ST_INVALID_ARGUMENT,
           "malformed");
    /* more payload fields than the decoder cuts out */
    uint8_t many[9 * 3];
    for (int i = 0; i < 9; i++) many[3 * i] = 0x62, many[3 * i + 1] = 1, many[3 * i + 2] = 'x';
    EXPECT(wire_unpack_chunk(many, sizeof many, &got, why, sizeof why), AL_ST_INVALID_ARGUMENT,
           "more than 8 payload fields");
    assert_null(got);
    /* the payload field with the wrong wire type: protobuf-c refuses the rest */
    uint8_t bad5[] = {0x60, 0x05};
    EXPECT(wire_unpack_chunk(bad5, sizeof bad5, &got, why, sizeof why), AL_ST_INVALID_ARGUMENT,
           "malformed");
    assert_null(got);
}

int main(void) {
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i ^ (i >> 8));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_chunk),
        cmocka_unit_test(test_stats_state_heartbeat),
        cmocka_unit_test(test_unpack),
        cmocka_unit_test(test_unpack_chunk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
