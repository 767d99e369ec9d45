/*
 * fuzz_request_seeds DIR: writes fuzz_request's seed corpus, one valid
 * request of every method with every field set (both members of a oneof in
 * separate seeds), each prefixed with the byte that selects its method.
 * The committed corpus (tests/fuzz/corpus/fuzz_request) is this program's
 * output; rerun it after a change to rpc/hypic.proto.
 */
#include "fuzz_util.h"
#include "hy_rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_dir;
static int g_failed;
static unsigned g_seeded; /* bit i: method i has a seed */

/* Writes method index + encoding of msg as DIR/<index>-<method>[-variant]. */
static void seed(const char *method, const char *variant, const ProtobufCMessage *msg)
{
    size_t i = 0;
    while (i < hy_rpc_method_count && strcmp(hy_rpc_methods[i].name, method) != 0) i++;
    if (i == hy_rpc_method_count || hy_rpc_methods[i].request != msg->descriptor) {
        fprintf(stderr, "fuzz_request_seeds: %s is not a method taking %s\n", method,
                msg->descriptor->name);
        g_failed = 1;
        return;
    }
    size_t n = protobuf_c_message_get_packed_size(msg);
    unsigned char *b = malloc(n + 1);
    if (!b) {
        g_failed = 1;
        return;
    }
    b[0] = (unsigned char)i;
    g_seeded |= 1u << i;
    protobuf_c_message_pack(msg, b + 1);
    char name[128];
    snprintf(name, sizeof name, "%02zu-%s%s%s", i, method, variant ? "-" : "",
             variant ? variant : "");
    g_failed |= fuzz_write_seed(g_dir, name, b, n + 1);
    free(b);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_request_seeds DIR\n");
        return 2;
    }
    g_dir = argv[1];

    int32_t ids[64];
    size_t nids = hy_tokenize_bytes("Hybrid models keep a constant-size state.", ids, 64, 259);
    uint32_t uids[64], query[3] = {40, 41, 42};
    for (size_t i = 0; i < nids; i++) uids[i] = (uint32_t)ids[i];
    uint8_t key[32], fp[32];
    for (int i = 0; i < 32; i++) key[i] = (uint8_t)(0xa0 + i), fp[i] = (uint8_t)(0x10 + i);
    char *tags[] = {"doc-17", "manual"};

    Hypic__V1__Tokens toks = HYPIC__V1__TOKENS__INIT;
    toks.n_ids = nids, toks.ids = uids;
    Hypic__V1__Segment by_tokens = HYPIC__V1__SEGMENT__INIT, by_key = HYPIC__V1__SEGMENT__INIT;
    by_tokens.ref_case = HYPIC__V1__SEGMENT__REF_TOKENS, by_tokens.tokens = &toks;
    by_tokens.n_tags = 2, by_tokens.tags = tags;
    by_key.ref_case = HYPIC__V1__SEGMENT__REF_KEY, by_key.key = (ProtobufCBinaryData){32, key};
    Hypic__V1__Segment *segs[] = {&by_tokens, &by_key};

    Hypic__V1__LookupRequest lookup = HYPIC__V1__LOOKUP_REQUEST__INIT;
    lookup.model = "tiny", lookup.n_segments = 2, lookup.segments = segs;
    lookup.seam_opt_case = HYPIC__V1__LOOKUP_REQUEST__SEAM_OPT_SEAM, lookup.seam = 8;
    lookup.dtype = HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16, lookup.lease_ms = 500;
    lookup.tenant = "acme";
    seed("Lookup", NULL, &lookup.base);

    Hypic__V1__WarmRequest warm = HYPIC__V1__WARM_REQUEST__INIT;
    warm.model = "tiny", warm.n_segments = 1, warm.segments = segs;
    warm.seam_opt_case = HYPIC__V1__WARM_REQUEST__SEAM_OPT_SEAM, warm.seam = 0;
    warm.dtype = HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32, warm.tenant = "acme";
    seed("Warm", NULL, &warm.base);

    Hypic__V1__PrefillRequest prefill = HYPIC__V1__PREFILL_REQUEST__INIT;
    prefill.model = "tiny", prefill.n_segments = 2, prefill.segments = segs;
    prefill.n_query = 3, prefill.query = query, prefill.mode = HYPIC__V1__MODE__MODE_PIC;
    prefill.seam_opt_case = HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM, prefill.seam = 4;
    prefill.top_k = 5, prefill.max_new_tokens = 4;
    prefill.dtype = HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32, prefill.tenant = "acme";
    seed("Prefill", NULL, &prefill.base);
    prefill.return_state = 1, prefill.transport_session = 7, prefill.state_offset = 4096;
    seed("Prefill", "state", &prefill.base);

    Hypic__V1__GetEntryRequest get = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    get.model = "tiny", get.key = (ProtobufCBinaryData){32, key}, get.tenant = "acme";
    seed("GetEntry", NULL, &get.base);
    get.transport_session = 7, get.offset = 256;
    seed("GetEntry", "session", &get.base);

    Hypic__V1__Tier tiers[] = {HYPIC__V1__TIER__TIER_HOST, HYPIC__V1__TIER__TIER_NVME};
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    meta.key = (ProtobufCBinaryData){32, key}, meta.model = "tiny";
    meta.model_fingerprint = (ProtobufCBinaryData){32, fp}, meta.tenant = "acme";
    meta.n_tags = 2, meta.tags = tags, meta.tokens = 12, meta.flops = 1.5e6, meta.bytes = 64;
    meta.created_unix_ns = 1700000000000000000ull,
    meta.last_access_unix_ns = 1700000001000000000ull;
    meta.expires_unix_ns = 1700003600000000000ull, meta.hits = 3, meta.n_tiers = 2;
    meta.tiers = tiers;
    uint8_t piece[64];
    for (int i = 0; i < 64; i++) piece[i] = (uint8_t)i;
    Hypic__V1__EntryChunk first = HYPIC__V1__ENTRY_CHUNK__INIT, next = HYPIC__V1__ENTRY_CHUNK__INIT;
    first.meta = &meta, first.data = (ProtobufCBinaryData){32, piece};
    next.data = (ProtobufCBinaryData){32, piece + 32};
    seed("PutEntry", "first", &first.base);
    seed("PutEntry", "next", &next.base);

    Hypic__V1__InvalidateRequest inv = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    inv.tenant = "acme";
    inv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_TAG, inv.tag = "doc-17";
    seed("Invalidate", "tag", &inv.base);
    inv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_KEY;
    inv.key = (ProtobufCBinaryData){32, key};
    seed("Invalidate", "key", &inv.base);
    inv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_ALL_OF_TENANT, inv.all_of_tenant = 1;
    seed("Invalidate", "tenant", &inv.base);
    inv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_MODEL, inv.model = "tiny";
    seed("Invalidate", "model", &inv.base);

    Hypic__V1__PinRequest pin = HYPIC__V1__PIN_REQUEST__INIT;
    pin.tenant = "acme", pin.ttl_ms = 600000;
    pin.target_case = HYPIC__V1__PIN_REQUEST__TARGET_TAG, pin.tag = "doc-17";
    seed("Pin", "tag", &pin.base);
    pin.target_case = HYPIC__V1__PIN_REQUEST__TARGET_KEY, pin.ttl_ms = 0;
    pin.key = (ProtobufCBinaryData){32, key};
    seed("Pin", "key", &pin.base);
    Hypic__V1__UnpinRequest unpin = HYPIC__V1__UNPIN_REQUEST__INIT;
    unpin.target_case = HYPIC__V1__UNPIN_REQUEST__TARGET_ALL_OF_TENANT, unpin.all_of_tenant = 1;
    seed("Unpin", "tenant", &unpin.base);

    Hypic__V1__ListRequest list = HYPIC__V1__LIST_REQUEST__INIT;
    list.tier = HYPIC__V1__TIER__TIER_NVME, list.tag = "doc-17", list.model = "tiny";
    list.sort = HYPIC__V1__LIST_REQUEST__SORT__SORT_HITS, list.descending = 1;
    list.page_size = 50, list.page_token = "k:a0a1a2", list.tenant = "acme";
    seed("List", NULL, &list.base);

    Hypic__V1__InspectRequest insp = HYPIC__V1__INSPECT_REQUEST__INIT;
    insp.key = (ProtobufCBinaryData){32, key}, insp.verify = 1, insp.tenant = "acme";
    seed("Inspect", NULL, &insp.base);

    Hypic__V1__WatchRequest watch = HYPIC__V1__WATCH_REQUEST__INIT;
    watch.model = "tiny", watch.tenant = "acme";
    seed("Watch", NULL, &watch.base);

    Hypic__V1__StatsRequest stats = HYPIC__V1__STATS_REQUEST__INIT;
    seed("Stats", NULL, &stats.base);

    Hypic__V1__GetPolicyRequest getp = HYPIC__V1__GET_POLICY_REQUEST__INIT;
    getp.tier = HYPIC__V1__TIER__TIER_HOST;
    seed("GetPolicy", NULL, &getp.base);

    Hypic__V1__Policy pol = HYPIC__V1__POLICY__INIT;
    pol.tier = HYPIC__V1__TIER__TIER_HBM, pol.evict = "s3fifo", pol.admit = "min-tokens";
    pol.min_tokens = 16;
    Hypic__V1__SetPolicyRequest setp = HYPIC__V1__SET_POLICY_REQUEST__INIT;
    setp.policy = &pol;
    seed("SetPolicy", NULL, &setp.base);

    Hypic__V1__HealthRequest health = HYPIC__V1__HEALTH_REQUEST__INIT;
    seed("Health", NULL, &health.base);

    uint8_t gid[16];
    for (int i = 0; i < 16; i++) gid[i] = (uint8_t)(0xfe - i);
    Hypic__V1__RdmaPeer peer = HYPIC__V1__RDMA_PEER__INIT;
    peer.qpn = 0x1234, peer.psn = 0x42, peer.lid = 3, peer.gid = (ProtobufCBinaryData){16, gid};
    peer.mtu = 4096, peer.addr = 0x7f0000001000, peer.rkey = 0x55, peer.bytes = 1 << 20;
    Hypic__V1__TransportOffer offers[3] = {HYPIC__V1__TRANSPORT_OFFER__INIT,
                                           HYPIC__V1__TRANSPORT_OFFER__INIT,
                                           HYPIC__V1__TRANSPORT_OFFER__INIT};
    Hypic__V1__TransportOffer *offp[3] = {&offers[0], &offers[1], &offers[2]};
    offers[0].kind = HYPIC__V1__TRANSPORT__TRANSPORT_RDMA, offers[0].capacity = 1 << 20;
    offers[0].rdma = &peer;
    offers[1].kind = HYPIC__V1__TRANSPORT__TRANSPORT_SHM, offers[1].capacity = 1 << 20;
    offers[2].kind = HYPIC__V1__TRANSPORT__TRANSPORT_TCP, offers[2].capacity = 1 << 20;
    Hypic__V1__OpenTransportRequest open = HYPIC__V1__OPEN_TRANSPORT_REQUEST__INIT;
    open.n_offers = 3, open.offers = offp, open.tenant = "acme";
    seed("OpenTransport", NULL, &open.base);

    Hypic__V1__CloseTransportRequest close = HYPIC__V1__CLOSE_TRANSPORT_REQUEST__INIT;
    close.session = 7, close.tenant = "acme";
    seed("CloseTransport", NULL, &close.base);

    Hypic__V1__BuildRequest build = HYPIC__V1__BUILD_REQUEST__INIT;
    build.model = "tiny", build.tokens = &toks, build.n_tags = 2, build.tags = tags;
    build.seam_opt_case = HYPIC__V1__BUILD_REQUEST__SEAM_OPT_SEAM, build.seam = 8;
    build.dtype = HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16, build.tenant = "acme";
    seed("Build", NULL, &build.base);
    for (size_t i = 0; i < hy_rpc_method_count; i++)
        if (!(g_seeded & 1u << i)) {
            fprintf(stderr, "fuzz_request_seeds: no seed for %s\n", hy_rpc_methods[i].name);
            g_failed = 1;
        }
    return g_failed;
}
