/*
 * The hypic.v1 methods: their gRPC paths and shapes, next to the descriptors
 * protoc-c generated. protoc-c drops the proto's `stream` keywords, so the
 * shapes are written here; tests/rpc/test_proto.c checks this table against
 * the generated service descriptor (names, order, message types), so the two
 * cannot drift apart silently.
 */
#include "hy_rpc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
    M(Pin, HY_RPC_UNARY, pin_request, pin_response),
    M(Unpin, HY_RPC_UNARY, unpin_request, unpin_response),
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

/* --- decoding bytes from the network -------------------------------------------
 *
 * protobuf-c unpacks a string field into a NUL-terminated copy, so a NUL
 * inside the field's bytes would cut the string the handler sees short of
 * the one the client sent ("recall\0zzz" served as "recall"). The wire is
 * walked first, field by field through the descriptor, and a string with a
 * NUL is refused naming its path. The walk only looks: malformed bytes stop
 * it quietly and are left for protobuf-c's unpack to refuse.
 *
 * A message's decoded form can be far larger than its bytes (an empty
 * sub-message is 2 bytes on the wire and a struct of some 80 bytes plus a
 * pointer decoded), so unpacking allocates under a budget. */

#define WALK_DEPTH 32 /* deeper than any hypic.v1 or etcd message nests */

/* The varint at *p (below end) into *v; false when it runs off the end or
 * past 10 bytes. */
static bool varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < 10 && *p < end; i++) {
        const uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return true;
        }
    }
    return false;
}

/* Appends ".name" (or "name" at the top) and "[i]" for a repeated field to
 * path; returns the old length, to cut it back. */
static size_t path_push(char *path, size_t cap, const ProtobufCFieldDescriptor *f, uint32_t i)
{
    const size_t n = strlen(path);
    if (f->label == PROTOBUF_C_LABEL_REPEATED)
        snprintf(path + n, cap - n, "%s%s[%u]", n ? "." : "", f->name, i);
    else
        snprintf(path + n, cap - n, "%s%s", n ? "." : "", f->name);
    return n;
}

static int walk_strings(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
                        int depth, char *path, size_t cap, hy_err *err)
{
    enum { NCOUNT = 64 };
    uint32_t seen[NCOUNT] = {0}; /* occurrences per field, for repeated fields' indices */
    const uint8_t *end = p + len;
    while (p < end) {
        uint64_t tag, n;
        if (!varint(&p, end, &tag)) return HY_OK;
        const ProtobufCFieldDescriptor *f =
            tag >> 3 <= UINT32_MAX
                ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3))
                : NULL;
        switch (tag & 7) {
        case 0:
            if (!varint(&p, end, &n)) return HY_OK;
            continue;
        case 1:
            if (end - p < 8) return HY_OK;
            p += 8;
            continue;
        case 5:
            if (end - p < 4) return HY_OK;
            p += 4;
            continue;
        case 2:
            break;
        default:
            return HY_OK; /* groups and unknown wire types: unpack refuses them */
        }
        if (!varint(&p, end, &n) || n > (uint64_t)(end - p)) return HY_OK;
        const uint8_t *v = p;
        p += n;
        if (!f) continue;
        const size_t fi = (size_t)(f - d->fields);
        const uint32_t idx = fi < NCOUNT ? seen[fi]++ : 0;
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            const uint8_t *nul = memchr(v, 0, n);
            if (nul) {
                path_push(path, cap, f, idx);
                return hy_err_set(err, HY_EFORMAT,
                                  "field '%s': a NUL byte at offset %td of its %llu (a string "
                                  "may not contain NUL)",
                                  path, nul - v, (unsigned long long)n);
            }
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth < WALK_DEPTH) {
            const size_t keep = path_push(path, cap, f, idx);
            int rc = walk_strings(f->descriptor, v, n, depth + 1, path, cap, err);
            if (rc) return rc;
            path[keep] = '\0';
        }
    }
    return HY_OK;
}

int hy_rpc_check_strings(const ProtobufCMessageDescriptor *d, const void *buf, size_t len,
                         hy_err *err)
{
    char path[256] = "";
    return walk_strings(d, buf, len, 0, path, sizeof path, err);
}

typedef struct budget {
    size_t left;
    bool over; /* the message would take more than the budget */
    bool oom;  /* malloc failed within it */
} budget;

static void *budget_alloc(void *data, size_t n)
{
    budget *b = data;
    if (n > b->left) {
        b->over = true;
        return NULL;
    }
    b->left -= n;
    /* (not a tail call, either: tests/cached/test_alloc_faults.c fails the
     * allocations whose caller is the project's code) */
    void *p = malloc(n ? n : 1);
    if (!p) b->oom = true; /* the host's lack, not the bytes' fault */
    return p;
}

static void budget_free(void *data, void *p)
{
    (void)data;
    free(p);
}

size_t hy_rpc_decode_budget(size_t len)
{
    return len > (SIZE_MAX - HY_RPC_DECODE_FLOOR) / HY_RPC_DECODE_FACTOR
               ? SIZE_MAX
               : len * HY_RPC_DECODE_FACTOR + HY_RPC_DECODE_FLOOR;
}

int hy_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *buf, size_t len, size_t max,
                  ProtobufCMessage **out, hy_err *err)
{
    *out = NULL;
    if (len > max)
        return hy_err_set(err, HY_ERANGE, "%s: %zu bytes, more than the limit of %zu", d->name, len,
                          max);
    int rc = hy_rpc_check_strings(d, buf, len, err);
    if (rc) return rc;
    /* What the budget allocator hands out is plain malloc memory: the
     * message is freed with protobuf_c_message_free_unpacked(m, NULL). */
    budget b = {.left = hy_rpc_decode_budget(len)};
    ProtobufCAllocator a = {.alloc = budget_alloc, .free = budget_free, .allocator_data = &b};
    *out = protobuf_c_message_unpack(d, &a, len, buf);
    if (!*out && b.over)
        return hy_err_set(err, HY_ERANGE,
                          "%s: %zu bytes that would take over %zu bytes decoded (%d x their size "
                          "+ %d KiB)",
                          d->name, len, hy_rpc_decode_budget(len), HY_RPC_DECODE_FACTOR,
                          HY_RPC_DECODE_FLOOR >> 10);
    if (!*out && b.oom)
        return hy_err_set(err, HY_ENOMEM, "%s: out of memory decoding %zu bytes", d->name, len);
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
