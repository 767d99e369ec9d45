/*
 * The hypic.v1 methods: their gRPC paths and shapes, next to the descriptors
 * protoc-c generated. protoc-c drops the proto's `stream` keywords, so the
 * shapes are written here; tests/rpc/test_proto.c checks this table against
 * the generated service descriptor (names, order, message types), so the two
 * cannot drift apart silently.
 */
#include "hy_rpc.h"

#include <string.h>

#define HY_RPC_SERVICE "/hypic.v1.Cache/"
#define M(name, shape, req, resp)                                                                  \
    {                                                                                              \
#name, HY_RPC_SERVICE #name, shape, &hypic__v1__##req##__descriptor,                       \
            &hypic__v1__##resp##__descriptor                                                       \
    }

const hy_rpc_method hy_rpc_methods[] = {
    M(Lookup, HY_RPC_UNARY, lookup_request, lookup_response),
    M(Warm, HY_RPC_SERVER_STREAM, warm_request, warm_progress),
    M(Prefill, HY_RPC_UNARY, prefill_request, prefill_response),
    M(GetEntry, HY_RPC_SERVER_STREAM, get_entry_request, entry_chunk),
    M(PutEntry, HY_RPC_CLIENT_STREAM, entry_chunk, put_entry_response),
    M(Invalidate, HY_RPC_UNARY, invalidate_request, invalidate_response),
    M(List, HY_RPC_UNARY, list_request, list_response),
    M(Inspect, HY_RPC_UNARY, inspect_request, inspect_response),
    M(Watch, HY_RPC_SERVER_STREAM, watch_request, watch_event),
    M(Stats, HY_RPC_UNARY, stats_request, stats_response),
    M(GetPolicy, HY_RPC_UNARY, get_policy_request, policy),
    M(SetPolicy, HY_RPC_UNARY, set_policy_request, policy),
    M(Health, HY_RPC_UNARY, health_request, health_response),
    M(OpenTransport, HY_RPC_UNARY, open_transport_request, open_transport_response),
    M(CloseTransport, HY_RPC_UNARY, close_transport_request, close_transport_response),
    M(Build, HY_RPC_SERVER_STREAM, build_request, entry_chunk),
};
const size_t hy_rpc_method_count = sizeof hy_rpc_methods / sizeof hy_rpc_methods[0];

const hy_rpc_method *hy_rpc_method_find(const char *path, size_t len)
{
    for (size_t i = 0; i < hy_rpc_method_count; i++) {
        const char *p = hy_rpc_methods[i].path;
        if (strlen(p) == len && memcmp(p, path, len) == 0) return &hy_rpc_methods[i];
    }
    return NULL;
}

const hy_rpc_method *hy_rpc_method_named(const char *name)
{
    for (size_t i = 0; i < hy_rpc_method_count; i++)
        if (strcmp(hy_rpc_methods[i].name, name) == 0) return &hy_rpc_methods[i];
    return NULL;
}

int hy_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *buf, size_t len, size_t max,
                  ProtobufCMessage **out, hy_err *err)
{
    *out = NULL;
    if (len > max)
        return hy_err_set(err, HY_ERANGE, "%s: %zu bytes, more than the limit of %zu", d->name, len,
                          max);
    *out = protobuf_c_message_unpack(d, NULL, len, buf);
    if (!*out)
        return hy_err_set(err, HY_EFORMAT, "%s: %zu bytes that are not such a message", d->name,
                          len);
    return HY_OK;
}

const char *hy_rpc_code_name(int code)
{
    static const char *const names[] = {
        "OK",
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
        "UNAUTHENTICATED",
    };
    return code >= 0 && (size_t)code < sizeof names / sizeof names[0] ? names[code] : NULL;
}
