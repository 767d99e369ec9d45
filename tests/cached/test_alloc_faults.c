/*
 * Allocation faults on the request path (SQLite's habit): the service runs
 * in this process (svc_open, hy_rpc_call_local into svc_front_door: the front
 * door, the handlers, the store, the codec), and for each method the Nth
 * allocation the call makes from the project's own code fails, for N = 1, 2,
 * ... until the call makes fewer than N. Every call must end with a status
 * (a gRPC code, never a crash), and the entries stored before must read
 * back byte for byte after each. PutEntry (its chunks through
 * hy_rpc_call_local_stream) puts an entry the store was made to lack: after
 * each fault it is stored whole or not at all. HY_FAULT_VERBOSE=1 prints
 * each faulted call's status.
 *
 * malloc, calloc and realloc are interposed here (glibc's __libc_* do the
 * work). A fault is injected only on the thread that armed it and only for
 * a caller inside this executable, where every project library is linked
 * statically: libgomp, gRPC and friends abort on a failed allocation by
 * design, and they are not the code under test. Not built with the
 * sanitizers, which interpose malloc themselves.
 */
#include "hy_rpc.h"
#include "hy_tiers.h"
#include "inproc_service.h"
#include "service_internal.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern char __executable_start, etext;

static __thread long t_countdown = -1; /* allocations left before the fault; -1: off */
static __thread bool t_fired;

static bool fault(const void *caller)
{
    if (t_countdown < 0) return false;
    if ((const char *)caller < &__executable_start || (const char *)caller >= &etext) return false;
    if (t_countdown-- > 0) return false;
    t_fired = true;
    t_countdown = -1; /* one fault per call: what follows runs as it would */
    return true;
}

void *malloc(size_t n)
{
    return fault(__builtin_return_address(0)) ? NULL : __libc_malloc(n);
}

void *calloc(size_t a, size_t b)
{
    return fault(__builtin_return_address(0)) ? NULL : __libc_calloc(a, b);
}

void *realloc(void *p, size_t n)
{
    return fault(__builtin_return_address(0)) ? NULL : __libc_realloc(p, n);
}

static hy_svc g_svc;
static char g_dir[] = "/tmp/hy_alloc_faults_XXXXXX";
#define NSEG 3
static uint32_t g_ids[NSEG][HY_INPROC_SEG_MAX];
static Hypic__V1__Tokens g_tk[NSEG];
static Hypic__V1__Segment g_sg[NSEG], *g_sp[NSEG];
static uint8_t g_keys[NSEG][32];
static void *g_bytes[NSEG];
static size_t g_n[NSEG];

static int on_warm(void *ctx, const ProtobufCMessage *m)
{
    (void)ctx;
    const Hypic__V1__WarmProgress *p = (const void *)m;
    if (p->index < NSEG && p->key.len == 32) memcpy(g_keys[p->index], p->key.data, 32);
    return 0;
}

/* The stored entries, as they were before the faults. */
static bool store_unchanged(void)
{
    for (int i = 0; i < NSEG; i++) {
        hy_key k;
        memcpy(k.b, g_keys[i], 32);
        hy_lease *l;
        hy_err e = {0};
        if (hy_store_acquire(g_svc.store, &k, &l, &e)) return false;
        const bool same =
            hy_lease_meta(l)->bytes == g_n[i] && !memcmp(hy_lease_data(l), g_bytes[i], g_n[i]);
        hy_store_release(g_svc.store, l);
        if (!same) return false;
    }
    hy_store_stats st;
    hy_store_stats_get(g_svc.store, &st);
    return st.host_entries == NSEG;
}

/* Removes stored entry i (what a PutEntry of it then stores again). */
static void remove_entry(int i)
{
    hy_key k;
    memcpy(k.b, g_keys[i], 32);
    const hy_store_filter f = {.key = &k};
    size_t removed = 0;
    hy_err e = {0};
    CU_ASSERT(hy_store_invalidate(g_svc.store, &f, &removed, &e) == 0 && removed == 1);
}

/* After a PutEntry of entry 0 into a store without it: stored byte for byte
 * when the call succeeded; when it did not, absent, or whole (the fault hit
 * the response after the commit, as a client gone then would); the others
 * unchanged. */
static bool put_all_or_nothing(int code)
{
    hy_key k;
    memcpy(k.b, g_keys[0], 32);
    hy_meta m;
    unsigned mask = 0;
    if (code != HY_RPC_OK && hy_store_peek(g_svc.store, &k, &m, &mask) != 0) {
        hy_store_stats st;
        hy_store_stats_get(g_svc.store, &st);
        return st.host_entries == NSEG - 1;
    }
    return store_unchanged();
}

/* Sweeps method name's call over every allocation it makes: on req, or for
 * a client stream on the nreqs messages of reqs; before each call prepare
 * runs (NULL: nothing), after it check judges the store (NULL: unchanged). */
static void sweep_with(const char *name, const ProtobufCMessage *req,
                       const ProtobufCMessage *const *reqs, size_t nreqs, void (*prepare)(void),
                       bool (*check)(int code))
{
    const hy_rpc_method *m = hy_rpc_method_named(name);
    int codes[17] = {0};
    long n;
    for (n = 0; n < 20000; n++) {
        hy_rpc_status st = {0};
        if (prepare) prepare();
        t_fired = false;
        t_countdown = n;
        const int rc =
            reqs ? hy_rpc_call_local_stream(m, reqs, nreqs, svc_front_door, &g_svc, NULL, NULL,
                                            NULL, &st)
                 : hy_rpc_call_local(m, req, svc_front_door, &g_svc, NULL, NULL, NULL, &st);
        t_countdown = -1;
        const bool fired = t_fired;
        CU_ASSERT_EQUAL(rc, 0);
        CU_ASSERT(st.code >= 0 && st.code <= 16);
        if (st.code >= 0 && st.code <= 16) codes[st.code]++;
        if (getenv("HY_FAULT_VERBOSE"))
            fprintf(stderr, "    %ld: %s %s\n", n + 1, hy_rpc_code_name(st.code), st.msg);
        const bool same = check ? check(st.code) : store_unchanged();
        if (!same)
            fprintf(stderr,
                    "  %s, allocation %ld failed (%s: %s): the store is not as it should be\n",
                    name, n + 1, hy_rpc_code_name(st.code), st.msg);
        CU_ASSERT(same);
        if (!fired) {
            CU_ASSERT_EQUAL(st.code, HY_RPC_OK); /* the clean run */
            if (st.code) fprintf(stderr, "  %s without a fault: %s\n", name, st.msg);
            break;
        }
    }
    /* a failed allocation is never reported as a corrupt entry, nor as the server's bug */
    CU_ASSERT_EQUAL(codes[HY_RPC_DATA_LOSS], 0);
    CU_ASSERT_EQUAL(codes[HY_RPC_INTERNAL], 0);
    CU_ASSERT_EQUAL(codes[HY_RPC_INVALID_ARGUMENT], 0); /* nor as the client's */
    fprintf(stderr, "  %-10s %5ld allocations failed one at a time; statuses:", name, n);
    for (int c = 0; c <= 16; c++)
        if (codes[c]) fprintf(stderr, " %s %d", hy_rpc_code_name(c), codes[c]);
    fprintf(stderr, "\n");
    CU_ASSERT(n > 0 && n < 20000);
}

static void sweep(const char *name, const ProtobufCMessage *req)
{
    sweep_with(name, req, NULL, 0, NULL, NULL);
}

/* The store without entry 0, as a PutEntry of it finds it. */
static void without_entry0(void)
{
    hy_key k;
    memcpy(k.b, g_keys[0], 32);
    hy_meta m;
    unsigned mask = 0;
    if (hy_store_peek(g_svc.store, &k, &m, &mask) == 0) remove_entry(0);
}

static void test_put_entry(void)
{
    /* entry 0's bytes in three chunks, the first with the meta */
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    meta.model = "tiny";
    meta.bytes = g_n[0];
    meta.key = (ProtobufCBinaryData){32, g_keys[0]};
    static char *tags[] = {"fault-sweep"};
    meta.n_tags = 1;
    meta.tags = tags;
    Hypic__V1__EntryChunk ch[3];
    const ProtobufCMessage *reqs[3];
    const size_t third = g_n[0] / 3;
    for (int i = 0; i < 3; i++) {
        hypic__v1__entry_chunk__init(&ch[i]);
        const size_t at = (size_t)i * third, len = i == 2 ? g_n[0] - at : third;
        ch[i].data = (ProtobufCBinaryData){len, (uint8_t *)g_bytes[0] + at};
        reqs[i] = &ch[i].base;
    }
    ch[0].meta = &meta;
    sweep_with("PutEntry", NULL, reqs, 3, without_entry0, put_all_or_nothing);
    CU_ASSERT(store_unchanged()); /* the clean run stored it again */
}

static void test_lookup_prefill_warm(void)
{
    Hypic__V1__LookupRequest lq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    lq.model = "tiny";
    lq.n_segments = NSEG;
    lq.segments = g_sp;
    sweep("Lookup", &lq.base);
    lq.lease_ms = 100;
    sweep("Lookup", &lq.base);
    static uint32_t query[4] = {11, 22, 33, 44};
    Hypic__V1__PrefillRequest pq = HYPIC__V1__PREFILL_REQUEST__INIT;
    pq.model = "tiny";
    pq.n_segments = NSEG;
    pq.segments = g_sp;
    pq.n_query = 4;
    pq.query = query;
    pq.mode = HYPIC__V1__MODE__MODE_PIC;
    pq.max_new_tokens = 2;
    sweep("Prefill", &pq.base);
    Hypic__V1__WarmRequest wq = HYPIC__V1__WARM_REQUEST__INIT; /* all hits: nothing new */
    wq.model = "tiny";
    wq.n_segments = NSEG;
    wq.segments = g_sp;
    sweep("Warm", &wq.base);
}

static void test_entry_methods(void)
{
    Hypic__V1__GetEntryRequest gq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    gq.model = "tiny";
    gq.key = (ProtobufCBinaryData){32, g_keys[0]};
    sweep("GetEntry", &gq.base);
    Hypic__V1__ListRequest lq = HYPIC__V1__LIST_REQUEST__INIT;
    sweep("List", &lq.base);
    Hypic__V1__InspectRequest iq = HYPIC__V1__INSPECT_REQUEST__INIT;
    iq.key = (ProtobufCBinaryData){32, g_keys[1]};
    iq.verify = true;
    sweep("Inspect", &iq.base);
    Hypic__V1__InvalidateRequest vq = HYPIC__V1__INVALIDATE_REQUEST__INIT; /* removes nothing */
    vq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_TAG;
    vq.tag = "no-such-tag";
    sweep("Invalidate", &vq.base);
}

static void test_other_methods(void)
{
    Hypic__V1__StatsRequest sq = HYPIC__V1__STATS_REQUEST__INIT;
    sweep("Stats", &sq.base);
    Hypic__V1__GetPolicyRequest pq = HYPIC__V1__GET_POLICY_REQUEST__INIT;
    pq.tier = HYPIC__V1__TIER__TIER_HOST;
    sweep("GetPolicy", &pq.base);
    Hypic__V1__HealthRequest hq = HYPIC__V1__HEALTH_REQUEST__INIT;
    sweep("Health", &hq.base);
    Hypic__V1__BuildRequest bq = HYPIC__V1__BUILD_REQUEST__INIT;
    bq.model = "tiny";
    bq.tokens = &g_tk[0];
    sweep("Build", &bq.base);
}

int main(void)
{
    if (!mkdtemp(g_dir)) return 1;
    hy_err e = {0};
    static hy_cached_config cfg;
    hy_log_set_level(HY_LOG_ERROR + 1); /* the faults' own messages are the expected ones */
    if (hy_inproc_open(&g_svc, g_dir, &cfg, false, &e)) {
        fprintf(stderr, "svc_open: %s\n", e.msg);
        return 1;
    }
    hy_inproc_segments(NSEG, g_ids, g_tk, g_sg, g_sp);
    Hypic__V1__WarmRequest w = HYPIC__V1__WARM_REQUEST__INIT;
    w.model = "tiny";
    w.n_segments = NSEG;
    w.segments = g_sp;
    hy_rpc_status st;
    if (hy_rpc_call_local(hy_rpc_method_named("Warm"), &w.base, svc_front_door, &g_svc, on_warm,
                          NULL, NULL, &st) ||
        st.code) {
        fprintf(stderr, "warm: %s\n", st.msg);
        return 1;
    }
    for (int i = 0; i < NSEG; i++) {
        hy_key k;
        memcpy(k.b, g_keys[i], 32);
        hy_lease *l;
        if (hy_store_acquire(g_svc.store, &k, &l, &e)) return 1;
        g_n[i] = hy_lease_meta(l)->bytes;
        g_bytes[i] = __libc_malloc(g_n[i]);
        memcpy(g_bytes[i], hy_lease_data(l), g_n[i]);
        hy_store_release(g_svc.store, l);
    }
    static const hy_test_case cases[] = {
        {"Lookup, Prefill, Warm", test_lookup_prefill_warm},
        {"GetEntry, List, Inspect, Invalidate", test_entry_methods},
        {"Stats, GetPolicy, Health, Build", test_other_methods},
        {"PutEntry", test_put_entry},
        {NULL, NULL},
    };
    int failed = hy_test_main("allocation faults", cases);
    svc_lease_reap(&g_svc, true);
    svc_close(&g_svc);
    for (int i = 0; i < NSEG; i++) free(g_bytes[i]);
    hy_test_rmtree(g_dir);
    return failed;
}
