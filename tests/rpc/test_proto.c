/*
 * The hypic.v1 wire format and method table (rpc/hypic.proto, rpc/methods.c):
 * a message of known content encodes to bytes written out by hand from the
 * protobuf encoding rules, so a renumbered or retyped field fails here before
 * it breaks a deployed client; every request and response type round-trips;
 * malformed, truncated and oversize input is refused with an error naming the
 * type; and the method table agrees with the service descriptor protoc-c
 * generated (names, order, message types), with paths gRPC will route.
 */
#include "hy_rpc.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

/* LookupRequest{model "tiny", segments [{tokens [1, 2, 300]}], seam 8,
 * lease_ms 100}, encoded by hand:
 *   0a 04 't' 'i' 'n' 'y'     field 1 (model), length-delimited, 4 bytes
 *   12 08                     field 2 (segments), 8 bytes of Segment:
 *     0a 06                     field 1 (tokens), 6 bytes of Tokens:
 *       0a 04 01 02 ac 02         field 1 (ids), packed varints 1, 2, 300
 *   18 08                     field 3 (seam), varint 8
 *   28 64                     field 5 (lease_ms), varint 100 */
static const uint8_t k_lookup_wire[] = {0x0a, 0x04, 't',  'i',  'n',  'y',  0x12, 0x08, 0x0a, 0x06,
                                        0x0a, 0x04, 0x01, 0x02, 0xac, 0x02, 0x18, 0x08, 0x28, 0x64};

static void test_wire_format_pinned(void)
{
    uint32_t ids[] = {1, 2, 300};
    Hypic__V1__Tokens toks = HYPIC__V1__TOKENS__INIT;
    toks.n_ids = 3;
    toks.ids = ids;
    Hypic__V1__Segment seg = HYPIC__V1__SEGMENT__INIT;
    seg.ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
    seg.tokens = &toks;
    Hypic__V1__Segment *segs[] = {&seg};
    Hypic__V1__LookupRequest req = HYPIC__V1__LOOKUP_REQUEST__INIT;
    req.model = "tiny";
    req.n_segments = 1;
    req.segments = segs;
    req.seam_opt_case = HYPIC__V1__LOOKUP_REQUEST__SEAM_OPT_SEAM;
    req.seam = 8;
    req.lease_ms = 100;

    size_t n = hypic__v1__lookup_request__get_packed_size(&req);
    CU_ASSERT_EQUAL_FATAL(n, sizeof k_lookup_wire);
    uint8_t buf[64];
    CU_ASSERT_EQUAL(hypic__v1__lookup_request__pack(&req, buf), n);
    CU_ASSERT(memcmp(buf, k_lookup_wire, n) == 0);

    /* and back, from the hand-written bytes */
    ProtobufCMessage *m;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_unpack(&hypic__v1__lookup_request__descriptor, k_lookup_wire,
                                        sizeof k_lookup_wire, 1024, &m, &e),
                          HY_OK);
    Hypic__V1__LookupRequest *r = (Hypic__V1__LookupRequest *)m;
    CU_ASSERT_STRING_EQUAL(r->model, "tiny");
    CU_ASSERT_EQUAL_FATAL(r->n_segments, 1);
    CU_ASSERT_EQUAL(r->segments[0]->ref_case, HYPIC__V1__SEGMENT__REF_TOKENS);
    CU_ASSERT_EQUAL_FATAL(r->segments[0]->tokens->n_ids, 3);
    CU_ASSERT_EQUAL(r->segments[0]->tokens->ids[2], 300);
    CU_ASSERT_EQUAL(r->seam_opt_case, HYPIC__V1__LOOKUP_REQUEST__SEAM_OPT_SEAM);
    CU_ASSERT_EQUAL(r->seam, 8);
    CU_ASSERT_EQUAL(r->lease_ms, 100);
    protobuf_c_message_free_unpacked(m, NULL);
}

/* W = 0 (noseam) must be distinguishable from "no seam given": proto3 drops a
 * plain zero, so seam sits in a oneof, which keeps its presence. */
static void test_seam_zero_keeps_presence(void)
{
    Hypic__V1__PrefillRequest req = HYPIC__V1__PREFILL_REQUEST__INIT;
    uint32_t q[] = {5};
    req.model = "tiny";
    req.n_query = 1;
    req.query = q;
    req.seam_opt_case = HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM;
    req.seam = 0;
    uint8_t buf[64];
    size_t n = hypic__v1__prefill_request__pack(&req, buf);
    Hypic__V1__PrefillRequest *r = hypic__v1__prefill_request__unpack(NULL, n, buf);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(r->seam_opt_case, HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM);
    CU_ASSERT_EQUAL(r->seam, 0);
    hypic__v1__prefill_request__free_unpacked(r, NULL);

    req.seam_opt_case = HYPIC__V1__PREFILL_REQUEST__SEAM_OPT__NOT_SET;
    n = hypic__v1__prefill_request__pack(&req, buf);
    r = hypic__v1__prefill_request__unpack(NULL, n, buf);
    CU_ASSERT_FATAL(r != NULL);
    CU_ASSERT_EQUAL(r->seam_opt_case, HYPIC__V1__PREFILL_REQUEST__SEAM_OPT__NOT_SET);
    hypic__v1__prefill_request__free_unpacked(r, NULL);
}

/* Every method's request and response type: the empty message and a
 * message whose bytes are packed and unpacked again re-encode identically. */
static void test_every_message_round_trips(void)
{
    for (size_t i = 0; i < hy_rpc_method_count; i++) {
        const ProtobufCMessageDescriptor *ds[2] = {hy_rpc_methods[i].request,
                                                   hy_rpc_methods[i].response};
        for (int k = 0; k < 2; k++) {
            ProtobufCMessage *msg = calloc(1, ds[k]->sizeof_message);
            CU_ASSERT_FATAL(msg != NULL);
            ds[k]->message_init(msg);
            size_t n = protobuf_c_message_get_packed_size(msg);
            uint8_t *b = malloc(n + 1);
            CU_ASSERT_EQUAL(protobuf_c_message_pack(msg, b), n);
            ProtobufCMessage *back;
            hy_err e = {0};
            CU_ASSERT_EQUAL(hy_rpc_unpack(ds[k], b, n, 1 << 20, &back, &e), HY_OK);
            if (back) {
                CU_ASSERT_EQUAL(protobuf_c_message_get_packed_size(back), n);
                protobuf_c_message_free_unpacked(back, NULL);
            }
            free(b);
            free(msg);
        }
    }
}

static void test_bad_bytes_refused(void)
{
    const ProtobufCMessageDescriptor *d = &hypic__v1__lookup_request__descriptor;
    ProtobufCMessage *m;
    hy_err e = {0};
    /* every strict prefix of a valid message that cuts a field short */
    int refused = 0;
    for (size_t len = 1; len < sizeof k_lookup_wire; len++) {
        int rc = hy_rpc_unpack(d, k_lookup_wire, len, 1024, &m, &e);
        if (rc == HY_OK) {
            protobuf_c_message_free_unpacked(m, NULL);
        } else {
            CU_ASSERT_EQUAL(rc, HY_EFORMAT);
            CU_ASSERT(m == NULL);
            refused++;
        }
    }
    /* cuts after a whole field (at 6, 16 and 18 bytes) are valid messages */
    CU_ASSERT_EQUAL(refused, (int)sizeof k_lookup_wire - 1 - 3);

    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0x01};
    CU_ASSERT_EQUAL(hy_rpc_unpack(d, garbage, sizeof garbage, 1024, &m, &e), HY_EFORMAT);
    CU_ASSERT(strstr(e.msg, "hypic.v1.LookupRequest") != NULL);
    /* a length prefix pointing past the end */
    static const uint8_t overrun[] = {0x0a, 0x7f, 't'};
    CU_ASSERT_EQUAL(hy_rpc_unpack(d, overrun, sizeof overrun, 1024, &m, &e), HY_EFORMAT);
    /* wrong wire type for field 1 (varint where a string is) */
    static const uint8_t wrong_type[] = {0x08, 0x01};
    CU_ASSERT_EQUAL(hy_rpc_unpack(d, wrong_type, sizeof wrong_type, 1024, &m, &e), HY_EFORMAT);
    /* over the size limit: refused before reading, naming both sizes */
    CU_ASSERT_EQUAL(hy_rpc_unpack(d, k_lookup_wire, sizeof k_lookup_wire, 8, &m, &e), HY_ERANGE);
    CU_ASSERT(m == NULL);
    CU_ASSERT(strstr(e.msg, "20 bytes") != NULL && strstr(e.msg, "limit of 8") != NULL);
}

static void test_method_table_matches_service(void)
{
    const ProtobufCServiceDescriptor *s = &hypic__v1__cache__descriptor;
    CU_ASSERT_STRING_EQUAL(s->name, "hypic.v1.Cache");
    CU_ASSERT_EQUAL_FATAL(s->n_methods, hy_rpc_method_count);
    for (size_t i = 0; i < hy_rpc_method_count; i++) {
        const hy_rpc_method *m = &hy_rpc_methods[i];
        CU_ASSERT_STRING_EQUAL(m->name, s->methods[i].name);
        CU_ASSERT_PTR_EQUAL(m->request, s->methods[i].input);
        CU_ASSERT_PTR_EQUAL(m->response, s->methods[i].output);
        char path[128];
        snprintf(path, sizeof path, "/%s/%s", s->name, s->methods[i].name);
        CU_ASSERT_STRING_EQUAL(m->path, path);
        CU_ASSERT_PTR_EQUAL(hy_rpc_method_find(path, strlen(path)), m);
    }
    CU_ASSERT(hy_rpc_method_find("/hypic.v1.Cache/Nope", 20) == NULL);
    CU_ASSERT(hy_rpc_method_find("/hypic.v1.Cache/Lookup", 21) == NULL); /* a prefix */
    /* the streaming methods, as hypic.proto declares them */
    CU_ASSERT_EQUAL(hy_rpc_method_find("/hypic.v1.Cache/Warm", 20)->shape, HY_RPC_SERVER_STREAM);
    CU_ASSERT_EQUAL(hy_rpc_method_find("/hypic.v1.Cache/PutEntry", 24)->shape,
                    HY_RPC_CLIENT_STREAM);
    int streams = 0;
    for (size_t i = 0; i < hy_rpc_method_count; i++) streams += hy_rpc_methods[i].shape != 0;
    CU_ASSERT_EQUAL(streams, 5); /* Warm, GetEntry, PutEntry, Watch, Build */
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"wire_format_pinned", test_wire_format_pinned},
        {"seam_zero_keeps_presence", test_seam_zero_keeps_presence},
        {"every_message_round_trips", test_every_message_round_trips},
        {"bad_bytes_refused", test_bad_bytes_refused},
        {"method_table_matches_service", test_method_table_matches_service},
        {NULL, NULL},
    };
    return hy_test_main("rpc_proto", cases);
}
