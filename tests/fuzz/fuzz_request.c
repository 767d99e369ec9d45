/*
 * fuzz_request: the request decoder of every method, as the server runs it on
 * a call's bytes (hy_rpc_unpack, before any handler).
 *
 * Input: byte 0 picks the method (modulo hy_rpc_method_count, in
 * hy_rpc_methods' order: 0 Lookup, 1 Warm, ... 12 Health); the rest is the
 * request's encoding, decoded under the server's default message limit. Bytes
 * that are not such a message must be refused with HY_EFORMAT. A message that
 * decodes must
 *   - pass protobuf_c_message_check;
 *   - be readable field by field as a handler reads it: every string
 *     NUL-terminated, every bytes and repeated field as long as it says
 *     (AddressSanitizer checks each read, since libprotobuf-c itself is not
 *     instrumented);
 *   - re-encode to bytes that decode again and re-encode to the same bytes
 *     (but for one quirk of libprotobuf-c's, below);
 * and everything is freed (LeakSanitizer).
 */
#include "fuzz_check.h"
#include "hy_rpc.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* The server's default bytes per message (hy_rpc_server_config.max_message). */
#define FUZZ_MAX_MESSAGE (4u << 20)

static uint64_t read_message(const ProtobufCMessage *msg);

/* Reads every byte one value of field f at v refers to; returns a digest so
 * the reads cannot be optimised away. */
static uint64_t read_value(const ProtobufCFieldDescriptor *f, const void *v)
{
    uint64_t h = 0;
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)v;
        FUZZ_CHECK(s != NULL, "string field %s is NULL", f->name);
        h = strlen(s);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *b = v;
        FUZZ_CHECK(b->len == 0 || b->data, "bytes field %s: %zu bytes at NULL", f->name, b->len);
        for (size_t i = 0; i < b->len; i++) h = h * 31 + b->data[i];
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *m = *(ProtobufCMessage *const *)v;
        if (m) h = read_message(m);
        break;
    }
    default: { /* scalars: 4 or 8 bytes */
        size_t n = (f->type == PROTOBUF_C_TYPE_INT64 || f->type == PROTOBUF_C_TYPE_SINT64 ||
                    f->type == PROTOBUF_C_TYPE_SFIXED64 || f->type == PROTOBUF_C_TYPE_UINT64 ||
                    f->type == PROTOBUF_C_TYPE_FIXED64 || f->type == PROTOBUF_C_TYPE_DOUBLE)
                       ? 8
                       : 4;
        const unsigned char *p = v;
        for (size_t i = 0; i < n; i++) h = h * 31 + p[i];
    }
    }
    return h;
}

/* The size of one element of a repeated field of f's type in its C array. */
static size_t elem_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    default:
        return 4; /* 32-bit integers, enums, float, protobuf_c_boolean */
    }
}

/* Set by read_message when a message holds an unknown field numbered 0. */
static bool g_field0;

static uint64_t read_message(const ProtobufCMessage *msg)
{
    const ProtobufCMessageDescriptor *d = msg->descriptor;
    const char *base = (const char *)msg;
    uint64_t h = 0;
    for (unsigned i = 0; i < msg->n_unknown_fields; i++) {
        const ProtobufCMessageUnknownField *u = &msg->unknown_fields[i];
        FUZZ_CHECK(u->len == 0 || u->data, "unknown field %u: %zu bytes at NULL", u->tag, u->len);
        for (size_t k = 0; k < u->len; k++) h = h * 31 + u->data[k];
        g_field0 |= u->tag == 0;
    }
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *v = base + f->offset;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            /* quantifier: the member of the oneof that is set */
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id) continue;
            h = h * 31 + read_value(f, v);
        } else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            const char *a = *(char *const *)v;
            FUZZ_CHECK(n == 0 || a, "repeated field %s.%s: %zu elements at NULL", d->name, f->name,
                       n);
            for (size_t k = 0; k < n; k++) h = h * 31 + read_value(f, a + k * elem_size(f));
        } else {
            h = h * 31 + read_value(f, v);
        }
    }
    return h;
}

/* The encoding of m into a malloc'd buffer. */
static uint8_t *pack(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*len ? *len : 1);
    FUZZ_CHECK(b != NULL, "out of memory for %zu bytes", *len);
    size_t n = protobuf_c_message_pack(m, b);
    FUZZ_CHECK(n == *len, "%s packed %zu bytes, sized %zu", m->descriptor->name, n, *len);
    return b;
}

static volatile uint64_t g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const hy_rpc_method *m = &hy_rpc_methods[data[0] % hy_rpc_method_count];
    ProtobufCMessage *msg = NULL;
    hy_err err = {0};
    int rc = hy_rpc_unpack(m->request, data + 1, size - 1, FUZZ_MAX_MESSAGE, &msg, &err);
    if (rc) { /* malformed, or past a limit (the decoder's size and amplification guards) */
        FUZZ_CHECK((rc == HY_EFORMAT || rc == HY_ERANGE) && msg == NULL && err.code == rc &&
                       err.msg[0],
                   "%s: refused with %d (%s) \"%s\"", m->name, rc, hy_strerror(rc), err.msg);
        return 0;
    }
    FUZZ_CHECK(msg && msg->descriptor == m->request, "%s: decoded to another message type",
               m->name);
    FUZZ_CHECK(protobuf_c_message_check(msg), "%s: decoded message fails its check", m->name);
    g_field0 = false;
    g_sink = read_message(msg);

    /* The daemon's request validation (limits, tenants, sizes: a pure
     * function of the method and the decoded request) belongs here, on every
     * request that decodes: it must accept or refuse with a message, never
     * crash, leak or read outside the message. */

    /* libprotobuf-c (1.4.1) accepts field number 0, which protobuf forbids,
     * when its tag is written in more than one byte (80 00), keeps it as an
     * unknown field and re-encodes it as the one-byte tag 00, which it then
     * refuses: such a message cannot round-trip, through no fault of ours. */
    if (g_field0) {
        protobuf_c_message_free_unpacked(msg, NULL);
        return 0;
    }
    size_t n1, n2;
    uint8_t *b1 = pack(msg, &n1);
    ProtobufCMessage *again = NULL;
    rc = hy_rpc_unpack(m->request, b1, n1, SIZE_MAX, &again, &err);
    FUZZ_CHECK(rc == 0, "%s: its own encoding (%zu bytes) does not decode: %s", m->name, n1,
               err.msg);
    uint8_t *b2 = pack(again, &n2);
    FUZZ_CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0, "%s: re-encoding differs (%zu bytes, then %zu)",
               m->name, n1, n2);
    free(b1);
    free(b2);
    protobuf_c_message_free_unpacked(again, NULL);
    protobuf_c_message_free_unpacked(msg, NULL);
    return 0;
}
