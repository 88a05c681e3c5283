/*
 * grpc_util.h -- inside transport/: what the server and the client share on
 * top of the gRPC C core: credentials from PEM files, channel arguments,
 * packing a protobuf-c message into a byte buffer and back, deadlines.
 */
#ifndef AL_GRPC_UTIL_H
#define AL_GRPC_UTIL_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "al_transport.h"
#include "autoloco.pb-c.h"

#define AL_METHOD_PREFIX "/autoloco.v1.Site/"
/* Shard chunk: 1 MiB stays in L2 between the decrypt, the checksum and the
 * copy into the shard, and bounds what a cut connection re-sends. */
#define AL_DEFAULT_CHUNK   (1u << 20)
#define AL_HTTP2_MAX_FRAME (1 << 20)
/* what a server accepts by default: chunks of up to 4 MiB (+ overhead) */
#define AL_DEFAULT_MAX_CHUNK (4u << 20)
#define AL_MSG_OVERHEAD      (64u << 10) /* room for a chunk's fields beside its payload */

/* Read a PEM file. For a key (is_key), refuse a file that others than its
 * owner may read or write (AL_ECONFIG): a key is a site's identity. */
int tu_read_pem(const char *path, int is_key, char **out, al_err *err);

/* Server / channel credentials from the three PEM files (or insecure ones). */
int tu_server_creds(const al_tls_paths *tls, int insecure, grpc_server_credentials **out,
                    al_err *err);
int tu_channel_creds(const al_tls_paths *tls, int insecure, grpc_channel_credentials **out,
                     al_err *err);

/* Channel arguments shared by both sides; `peer` (client side, may be NULL)
 * becomes the TLS target name the server's certificate must match. */
typedef struct tu_args {
    grpc_arg a[12];
    grpc_channel_args args;
} tu_args;
void tu_args_init(tu_args *t, size_t max_message, const char *peer, int server);

/* Serialise a protobuf-c message into a new byte buffer (one copy). */
grpc_byte_buffer *tu_pack(const ProtobufCMessage *m, size_t *len);
/* A byte buffer's bytes as one contiguous slice (unref it when done). */
/* m packed, then one more bytes field (number `field`) holding payload, which
 * is referenced, not copied: it must stay valid until the send completes. m
 * itself must leave that field empty. */
grpc_byte_buffer *tu_pack_with_payload(const ProtobufCMessage *m, uint32_t field,
                                       const uint8_t *payload, size_t len);
grpc_slice tu_flatten(grpc_byte_buffer *bb);

gpr_timespec tu_deadline(double seconds);
grpc_slice tu_method(const char *name);

#endif
