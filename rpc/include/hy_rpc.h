/*
 * rpc: the hypic.v1 API shared by the daemon and its clients. The messages
 * are protoc-c's, generated from rpc/hypic.proto at build time
 * (Hypic__V1__LookupRequest, hypic__v1__lookup_request__pack/unpack, ...);
 * this header adds what protoc-c does not say: each method's gRPC path and
 * whether its request or its response is a stream, and bounded decoding of
 * bytes from the network.
 *
 * Uses common only: the model and the store are the daemon's business, and a
 * client links this library without either (docs/architecture.md#layering).
 */
#ifndef HY_RPC_H
#define HY_RPC_H

#include "hy_common.h"
#include "hypic.pb-c.h"

#include <stddef.h>

/* How a method's messages flow (proto `stream` keywords). */
typedef enum hy_rpc_shape {
    HY_RPC_UNARY = 0,     /* one request, one response */
    HY_RPC_SERVER_STREAM, /* one request, a stream of responses (Warm, GetEntry, Watch) */
    HY_RPC_CLIENT_STREAM, /* a stream of requests, one response (PutEntry) */
} hy_rpc_shape;

typedef struct hy_rpc_method {
    const char *name; /* "Lookup" */
    const char *path; /* "/hypic.v1.Cache/Lookup": gRPC's :path */
    hy_rpc_shape shape;
    const ProtobufCMessageDescriptor *request, *response;
} hy_rpc_method;

/* The service's methods, in hypic.proto's order (the same order as
 * hypic__v1__cache__descriptor.methods). */
extern const hy_rpc_method hy_rpc_methods[];
extern const size_t hy_rpc_method_count;

/* The method whose gRPC path is path[0..len), or NULL. */
const hy_rpc_method *hy_rpc_method_find(const char *path, size_t len);

/* Decodes len bytes as a message of descriptor d. HY_ERANGE when len exceeds
 * max (the message is not read), HY_EFORMAT when the bytes are not such a
 * message (protobuf-c's unpack refuses them); the error names the message
 * type. *out is freed with protobuf_c_message_free_unpacked(*out, NULL). */
int hy_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *buf, size_t len, size_t max,
                  ProtobufCMessage **out, hy_err *err);

#endif
