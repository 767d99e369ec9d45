/*
 * Eviction and admission policies (tiers/policy_internal.h): each eviction kind names
 * the victim it should on hand-made sequences; pinned ids are skipped and not
 * lost; 100k random operations agree with a brute-force reference (LRU, LFU,
 * GDSF, hybrid) or keep S3-FIFO's invariants; each admission kind admits what
 * it should; hy_policy_parse names bad values.
 */
#include "policy_internal.h"
#include "test_util.h"

#include <string.h>

#define MIB (1ull << 20)

static hy_evictor *make_evictor(hy_evict_kind k, uint64_t capacity)
{
    hy_policy_config c = {.evict = k, .capacity = capacity};
    hy_evictor *ev = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_evictor_new(&c, &ev, &e), 0);
    return ev;
}

static uint64_t victim_of(hy_evictor *ev)
{
    uint64_t id = 0;
    CU_ASSERT_EQUAL(hy_evictor_victim(ev, &id, NULL, NULL), 0);
    return id;
}

/* victim() then remove(): an eviction. */
static uint64_t evict_one(hy_evictor *ev)
{
    uint64_t id = victim_of(ev);
    hy_evictor_remove(ev, id);
    return id;
}

/* A pin set of ids below 64 (a bit mask). */
static bool pinned_mask(void *ctx, uint64_t id)
{
    return id < 64 && ((*(uint64_t *)ctx >> id) & 1);
}

static uint64_t victim_pinned(hy_evictor *ev, uint64_t mask)
{
    uint64_t id = 0;
    CU_ASSERT_EQUAL(hy_evictor_victim(ev, &id, pinned_mask, &mask), 0);
    return id;
}

static void test_lru_evicts_least_recent(void)
{
    hy_evictor *ev = make_evictor(HY_EVICT_LRU, 0);
    uint64_t t = 0;
    for (uint64_t id = 1; id <= 4; id++) hy_evictor_insert(ev, id, MIB, 1e9, 100, ++t);
    hy_evictor_access(ev, 1, ++t);
    CU_ASSERT_EQUAL(victim_of(ev), 2);
    CU_ASSERT_EQUAL(victim_of(ev), 2); /* victim() does not remove */
    CU_ASSERT_EQUAL(evict_one(ev), 2);
    hy_evictor_access(ev, 3, ++t);
    CU_ASSERT_EQUAL(evict_one(ev), 4);
    CU_ASSERT_EQUAL(evict_one(ev), 1);
    CU_ASSERT_EQUAL(evict_one(ev), 3);
    CU_ASSERT_EQUAL(hy_evictor_count(ev), 0);
    uint64_t id = 99;
    CU_ASSERT_EQUAL(hy_evictor_victim(ev, &id, NULL, NULL), HY_ENOTFOUND);
    hy_evictor_remove(ev, 12345); /* absent: a no-op */
    hy_evictor_access(ev, 12345, ++t);
    CU_ASSERT_EQUAL(hy_evictor_count(ev), 0);
    hy_evictor_free(ev);
}

static void test_lfu_evicts_least_frequent_then_least_recent(void)
{
    hy_evictor *ev = make_evictor(HY_EVICT_LFU, 0);
    uint64_t t = 0;
    for (uint64_t id = 1; id <= 3; id++) hy_evictor_insert(ev, id, MIB, 1e9, 100, ++t);
    hy_evictor_access(ev, 1, ++t);
    hy_evictor_access(ev, 1, ++t);
    hy_evictor_access(ev, 3, ++t);
    /* references: 1 -> 3, 2 -> 1, 3 -> 2 */
    CU_ASSERT_EQUAL(victim_of(ev), 2);
    hy_evictor_access(ev, 2, ++t); /* 2 -> 2 as well, more recent than 3 */
    CU_ASSERT_EQUAL(victim_of(ev), 3);
    hy_evictor_insert(ev, 4, MIB, 1e9, 100, ++t); /* a newcomer has 1 reference */
    CU_ASSERT_EQUAL(evict_one(ev), 4);
    CU_ASSERT_EQUAL(evict_one(ev), 3);
    CU_ASSERT_EQUAL(evict_one(ev), 2);
    CU_ASSERT_EQUAL(evict_one(ev), 1);
    hy_evictor_free(ev);
}

/* Capacity 100 bytes, objects of 10: the small queue's share is 10 bytes. */
static void test_s3fifo_one_hit_wonders_first_and_ghosts_to_main(void)
{
    hy_evictor *ev = make_evictor(HY_EVICT_S3FIFO, 100);
    uint64_t t = 0;
    for (uint64_t id = 1; id <= 5; id++) hy_evictor_insert(ev, id, 10, 1e9, 100, ++t);
    hy_evictor_access(ev, 1, ++t);
    hy_evictor_access(ev, 3, ++t);
    /* small (oldest first): 1* 2 3* 4 5 — the hit ones move to main, the
     * one-hit wonders go, oldest first. */
    CU_ASSERT_EQUAL(evict_one(ev), 2);
    CU_ASSERT_EQUAL(evict_one(ev), 4);
    /* 2 comes back: its ghost sends it to main; 6 is new and goes to small. */
    hy_evictor_insert(ev, 2, 10, 1e9, 100, ++t);
    hy_evictor_insert(ev, 6, 10, 1e9, 100, ++t);
    CU_ASSERT_EQUAL(evict_one(ev), 5); /* small: 5 6 (20 bytes >= 10) */
    CU_ASSERT_EQUAL(evict_one(ev), 6); /* small: 6 (10 bytes >= 10) */
    /* small is empty now; main holds 1 3 2, 1 and 3 hit once each: the hand
     * gives them a second chance and takes 2. */
    CU_ASSERT_EQUAL(evict_one(ev), 2);
    CU_ASSERT_EQUAL(evict_one(ev), 1);
    CU_ASSERT_EQUAL(evict_one(ev), 3);
    CU_ASSERT_EQUAL(hy_evictor_count(ev), 0);
    /* A remove() that is not an eviction leaves no ghost: 9, invalidated,
     * comes back to small while 8, evicted from small, comes back to main. */
    hy_evictor_insert(ev, 7, 10, 1e9, 100, ++t);
    hy_evictor_insert(ev, 8, 10, 1e9, 100, ++t);
    hy_evictor_insert(ev, 9, 10, 1e9, 100, ++t);
    CU_ASSERT_EQUAL(evict_one(ev), 7);
    hy_evictor_remove(ev, 9); /* an invalidation */
    CU_ASSERT_EQUAL(evict_one(ev), 8);
    hy_evictor_insert(ev, 8, 10, 1e9, 100, ++t); /* ghost: main */
    hy_evictor_insert(ev, 9, 10, 1e9, 100, ++t); /* no ghost: small */
    hy_evictor_insert(ev, 10, 10, 1e9, 100, ++t);
    CU_ASSERT_EQUAL(evict_one(ev), 9);
    CU_ASSERT_EQUAL(evict_one(ev), 10);
    CU_ASSERT_EQUAL(evict_one(ev), 8);
    hy_evictor_free(ev);
}

static void test_gdsf_evicts_low_cost_per_byte_and_ages(void)
{
    hy_evictor *ev = make_evictor(HY_EVICT_GDSF, 0);
    uint64_t t = 0;
    hy_evictor_insert(ev, 1, 100, 1000, 10, ++t);  /* 10 per byte */
    hy_evictor_insert(ev, 2, 100, 100, 10, ++t);   /* 1 per byte */
    hy_evictor_insert(ev, 3, 1000, 5000, 10, ++t); /* 5 per byte */
    CU_ASSERT_EQUAL(victim_of(ev), 2);
    for (int i = 0; i < 20; i++) hy_evictor_access(ev, 2, ++t); /* 21 references: 21 */
    CU_ASSERT_EQUAL(victim_of(ev), 3);
    hy_evictor_insert(ev, 4, 100, 1200, 10, ++t); /* 12 */
    /* With 3 pinned, 1 (10) is next; evicting it raises the clock to 10. */
    CU_ASSERT_EQUAL(victim_pinned(ev, 1u << 3), 1);
    hy_evictor_remove(ev, 1);
    /* A newcomer worth 1 per byte now ranks 10 + 1 = 11, above 3's 5 and
     * below 4's 12: old objects age relative to new ones. */
    hy_evictor_insert(ev, 5, 100, 100, 10, ++t);
    CU_ASSERT_EQUAL(evict_one(ev), 3);
    CU_ASSERT_EQUAL(evict_one(ev), 5);
    CU_ASSERT_EQUAL(evict_one(ev), 4);
    CU_ASSERT_EQUAL(evict_one(ev), 2);
    hy_evictor_free(ev);
}

/* Two segments of the same bytes, one of 64 tokens and one of 4096: the long
 * one saves 64x the FLOPs. LRU evicts the older (the long one); hybrid keeps
 * it. */
static void test_hybrid_keeps_long_segment_over_short(void)
{
    const double per_token = 2 * 33e6;
    const uint64_t bytes = 8 * MIB;
    for (int k = 0; k < 2; k++) {
        hy_evictor *ev = make_evictor(k ? HY_EVICT_HYBRID : HY_EVICT_LRU, 0);
        hy_evictor_insert(ev, 1, bytes, 4096 * per_token, 4096, 1);
        hy_evictor_insert(ev, 2, bytes, 64 * per_token, 64, 2);
        CU_ASSERT_EQUAL(victim_of(ev), k ? 2u : 1u);
        hy_evictor_free(ev);
    }
    /* Equal worth: the one hit since insert stays. */
    hy_evictor *ev = make_evictor(HY_EVICT_HYBRID, 0);
    hy_evictor_insert(ev, 1, bytes, 512 * per_token, 512, 1);
    hy_evictor_insert(ev, 2, bytes, 512 * per_token, 512, 2);
    hy_evictor_access(ev, 1, 3);
    CU_ASSERT_EQUAL(victim_of(ev), 2);
    /* Frequency is damped: 15 hits of a 64-token segment (x 5) do not outweigh
     * a 4096-token one seen once (64x the FLOPs). */
    hy_evictor_insert(ev, 3, bytes, 64 * per_token, 64, 4);
    hy_evictor_insert(ev, 4, bytes, 4096 * per_token, 4096, 5);
    for (int i = 0; i < 15; i++) hy_evictor_access(ev, 3, 6 + (uint64_t)i);
    uint64_t mask = (1u << 1) | (1u << 2);
    CU_ASSERT_EQUAL(victim_pinned(ev, mask), 3);
    hy_evictor_free(ev);
}

/* Every kind: pinning the victim yields another, unpinning gives the first
 * back (not lost), the count is unchanged; all pinned or none resident is
 * HY_ENOTFOUND. */
static void test_pinned_are_skipped_not_lost(void)
{
    for (int k = 0; k < HY_EVICT_COUNT; k++) {
        hy_evictor *ev = make_evictor((hy_evict_kind)k, 1000);
        uint64_t t = 0;
        for (uint64_t id = 1; id <= 20; id++)
            hy_evictor_insert(ev, id, 10, (double)(id * 37 % 11 + 1), 10, ++t);
        for (uint64_t id = 1; id <= 20; id += 3) hy_evictor_access(ev, id, ++t);
        uint64_t v0 = victim_of(ev), mask = 1ull << v0;
        uint64_t v1 = victim_pinned(ev, mask);
        CU_ASSERT_NOT_EQUAL(v1, v0);
        mask |= 1ull << v1;
        uint64_t v2 = victim_pinned(ev, mask);
        CU_ASSERT(v2 != v0 && v2 != v1);
        CU_ASSERT_EQUAL(hy_evictor_count(ev), 20);
        CU_ASSERT_EQUAL(victim_of(ev), v0);
        uint64_t all = ~0ull, id = 0;
        CU_ASSERT_EQUAL(hy_evictor_victim(ev, &id, pinned_mask, &all), HY_ENOTFOUND);
        CU_ASSERT_EQUAL(hy_evictor_count(ev), 20);
        /* Evicting everything, one pinned throughout, leaves just that one. */
        uint64_t keep = 1ull << 7;
        for (int i = 0; i < 19; i++) {
            uint64_t v = victim_pinned(ev, keep);
            CU_ASSERT_NOT_EQUAL(v, 7);
            hy_evictor_remove(ev, v);
        }
        CU_ASSERT_EQUAL(hy_evictor_count(ev), 1);
        CU_ASSERT_EQUAL(hy_evictor_victim(ev, &id, pinned_mask, &keep), HY_ENOTFOUND);
        CU_ASSERT_EQUAL(victim_of(ev), 7);
        hy_evictor_free(ev);
    }
}

/* --- a brute-force reference for lru, lfu, gdsf and hybrid ------------------ */

enum { UNIVERSE = 300 };

typedef struct ref_obj {
    bool resident;
    uint64_t bytes, seq;
    double cost, prio;
    uint32_t refs;
} ref_obj;

typedef struct ref_cache {
    hy_evict_kind kind;
    ref_obj o[UNIVERSE + 1];
    uint64_t seq;
    double clock;
    size_t n;
} ref_cache;

static void ref_rank(ref_cache *r, ref_obj *x)
{
    double per_byte = x->cost / (double)x->bytes;
    switch (r->kind) {
    case HY_EVICT_LRU:
        x->prio = 0;
        break;
    case HY_EVICT_LFU:
        x->prio = x->refs;
        break;
    case HY_EVICT_GDSF:
        x->prio = r->clock + x->refs * per_byte;
        break;
    default:
        x->prio = r->clock + per_byte * (1.0 + log2((double)x->refs));
        break;
    }
}

/* O(n) scan: the least (prio, seq) among resident, unpinned objects. */
static uint64_t ref_victim(const ref_cache *r, const bool *pin)
{
    uint64_t best = 0;
    for (uint64_t id = 1; id <= UNIVERSE; id++) {
        const ref_obj *x = &r->o[id];
        if (!x->resident || pin[id]) continue;
        const ref_obj *b = &r->o[best];
        if (!best || x->prio < b->prio || (x->prio == b->prio && x->seq < b->seq)) best = id;
    }
    return best;
}

static bool pinned_array(void *ctx, uint64_t id)
{
    return ((const bool *)ctx)[id];
}

static void random_ops_match_reference(hy_evict_kind kind)
{
    static ref_cache r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    hy_evictor *ev = make_evictor(kind, 0);
    hy_rng g;
    hy_rng_seed(&g, 1234 + (uint64_t)kind);
    bool pin[UNIVERSE + 1] = {0};
    int mismatches = 0, victims = 0;
    for (int step = 0; step < 100000; step++) {
        uint64_t id = 1 + hy_rng_next(&g) % UNIVERSE;
        ref_obj *x = &r.o[id];
        unsigned op = (unsigned)(hy_rng_next(&g) % 10);
        if (op < 5) { /* a lookup: access when resident, else insert */
            if (x->resident) {
                hy_evictor_access(ev, id, (uint64_t)step);
                x->refs++, x->seq = ++r.seq;
            } else {
                x->bytes = 1 + hy_rng_next(&g) % 1000;
                x->cost = (double)(1 + hy_rng_next(&g) % 100000);
                hy_evictor_insert(ev, id, x->bytes, x->cost, 10, (uint64_t)step);
                x->resident = true, x->refs = 1, x->seq = ++r.seq, r.n++;
            }
            ref_rank(&r, x);
        } else if (op < 6) { /* an invalidation */
            hy_evictor_remove(ev, id);
            if (x->resident) x->resident = false, r.n--;
        } else if (op < 7) { /* toggle a pin */
            pin[id] = !pin[id];
        } else if (r.n > UNIVERSE / 3) { /* an eviction */
            uint64_t want = ref_victim(&r, pin), got = 0;
            int rc = hy_evictor_victim(ev, &got, pinned_array, pin);
            victims++;
            if (want == 0) {
                mismatches += rc != HY_ENOTFOUND;
                continue;
            }
            if (rc != 0 || got != want) {
                mismatches++;
                continue;
            }
            hy_evictor_remove(ev, got);
            if (r.o[got].prio > r.clock && (kind == HY_EVICT_GDSF || kind == HY_EVICT_HYBRID))
                r.clock = r.o[got].prio;
            r.o[got].resident = false, r.n--;
        }
        if (hy_evictor_count(ev) != r.n) mismatches++;
    }
    printf("\n    %s: %d victims checked, %d mismatches", hy_evict_name(kind), victims, mismatches);
    CU_ASSERT(victims > 10000);
    CU_ASSERT_EQUAL(mismatches, 0);
    hy_evictor_free(ev);
}

static void test_lru_random_ops_match_reference(void)
{
    random_ops_match_reference(HY_EVICT_LRU);
}

static void test_heap_kinds_random_ops_match_reference(void)
{
    random_ops_match_reference(HY_EVICT_LFU);
    random_ops_match_reference(HY_EVICT_GDSF);
    random_ops_match_reference(HY_EVICT_HYBRID);
}

/* S3-FIFO's order has no simple reference; its invariants do: the victim is
 * resident and unpinned, HY_ENOTFOUND exactly when every resident object is
 * pinned, the count follows inserts and removes. */
static void test_s3fifo_random_ops_keep_invariants(void)
{
    hy_evictor *ev = make_evictor(HY_EVICT_S3FIFO, 100 * 500);
    hy_rng g;
    hy_rng_seed(&g, 99);
    bool resident[UNIVERSE + 1] = {0}, pin[UNIVERSE + 1] = {0};
    size_t n = 0;
    int bad = 0;
    for (int step = 0; step < 100000; step++) {
        uint64_t id = 1 + hy_rng_next(&g) % UNIVERSE;
        unsigned op = (unsigned)(hy_rng_next(&g) % 10);
        if (op < 5) {
            if (resident[id])
                hy_evictor_access(ev, id, (uint64_t)step);
            else
                hy_evictor_insert(ev, id, 1 + hy_rng_next(&g) % 1000, 1, 1, (uint64_t)step);
            if (!resident[id]) resident[id] = true, n++;
        } else if (op < 6) {
            hy_evictor_remove(ev, id);
            if (resident[id]) resident[id] = false, n--;
        } else if (op < 7) {
            pin[id] = !pin[id];
        } else if (n > 0) {
            size_t unpinned = 0;
            for (int i = 1; i <= UNIVERSE; i++) unpinned += resident[i] && !pin[i];
            uint64_t got = 0;
            int rc = hy_evictor_victim(ev, &got, pinned_array, pin);
            if (unpinned == 0) {
                bad += rc != HY_ENOTFOUND;
                continue;
            }
            if (rc != 0 || got == 0 || got > UNIVERSE || !resident[got] || pin[got]) {
                bad++;
                continue;
            }
            hy_evictor_remove(ev, got);
            resident[got] = false, n--;
        }
        bad += hy_evictor_count(ev) != n;
    }
    CU_ASSERT_EQUAL(bad, 0);
    hy_evictor_free(ev);
}

/* --- admission -------------------------------------------------------------- */

static hy_admitter *make_admitter(hy_admit_kind k, uint32_t min_tokens, uint64_t capacity)
{
    hy_policy_config c = {.admit = k, .min_tokens = min_tokens, .capacity = capacity};
    hy_admitter *ad = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_admitter_new(&c, &ad, &e), 0);
    return ad;
}

static void test_admit_always_and_min_tokens(void)
{
    hy_admitter *ad = make_admitter(HY_ADMIT_ALWAYS, 0, 0);
    CU_ASSERT(hy_admitter_admit(ad, 1, 1, 2));
    hy_admitter_free(ad);
    ad = make_admitter(HY_ADMIT_MIN_TOKENS, 256, 0);
    CU_ASSERT_FALSE(hy_admitter_admit(ad, 1, 0, 0));
    CU_ASSERT_FALSE(hy_admitter_admit(ad, 1, 255, 0));
    CU_ASSERT(hy_admitter_admit(ad, 1, 256, 0));
    CU_ASSERT(hy_admitter_admit(ad, 1, 8192, 7));
    hy_admitter_free(ad);
}

/* Capacity 0: the smallest window, 256 lookups. */
static void test_admit_second_hit(void)
{
    hy_admitter *ad = make_admitter(HY_ADMIT_SECOND_HIT, 0, 0);
    hy_admitter_record(ad, 5);
    CU_ASSERT_FALSE(hy_admitter_admit(ad, 5, 1000, 0)); /* first sighting */
    hy_admitter_record(ad, 5);
    CU_ASSERT(hy_admitter_admit(ad, 5, 1000, 0)); /* second */
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 5), 2);
    CU_ASSERT_FALSE(hy_admitter_admit(ad, 6, 1000, 0)); /* never seen */
    /* A sighting that has left the window no longer counts. */
    hy_admitter_record(ad, 7);
    for (uint64_t i = 0; i < 255; i++) hy_admitter_record(ad, 1000 + i);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 7), 1); /* 256 lookups: still in */
    hy_admitter_record(ad, 2000);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 7), 0);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 5), 0);
    hy_admitter_record(ad, 7);
    CU_ASSERT_FALSE(hy_admitter_admit(ad, 7, 1000, 0));
    hy_admitter_free(ad);
}

static void test_admit_tinylfu(void)
{
    hy_admitter *ad = make_admitter(HY_ADMIT_TINYLFU, 0, 0); /* width 256: halves every 2560 */
    for (int i = 0; i < 12; i++) hy_admitter_record(ad, 100);
    hy_admitter_record(ad, 200);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 100), 12);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 200), 1);
    CU_ASSERT_FALSE(hy_admitter_admit(ad, 200, 1000, 100)); /* a one-off vs a frequent victim */
    CU_ASSERT(hy_admitter_admit(ad, 100, 1000, 200));
    CU_ASSERT(hy_admitter_admit(ad, 200, 1000, 0)); /* room: nothing displaced */
    hy_admitter_record(ad, 300);
    CU_ASSERT(hy_admitter_admit(ad, 300, 1000, 200)); /* ties admit */
    /* Aging: the 2560th record halves every counter. */
    for (int i = 0; i < 2560 - 14 - 1; i++) hy_admitter_record(ad, 400);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 100), 12);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 400), 15); /* saturated */
    hy_admitter_record(ad, 400);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 100), 6);
    CU_ASSERT_EQUAL(hy_admitter_estimate(ad, 400), 7);
    hy_admitter_free(ad);
}

/* --- configuration ---------------------------------------------------------------- */

static void expect_parse_error(const char *evict, const char *admit, const char *named)
{
    hy_policy_config c = {.capacity = 42};
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_policy_parse(evict, admit, &c, &e), HY_EINVAL);
    if (!strstr(e.msg, named)) printf("\n    message '%s' lacks '%s'", e.msg, named);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, named));
    CU_ASSERT_EQUAL(c.capacity, 42);
}

static void test_parse_names_bad_values(void)
{
    for (int k = 0; k < HY_EVICT_COUNT; k++)
        for (int a = 0; a < HY_ADMIT_COUNT; a++) {
            char admit[32];
            snprintf(admit, sizeof admit, "%s%s", hy_admit_name((hy_admit_kind)a),
                     a == HY_ADMIT_MIN_TOKENS ? " 512" : "");
            hy_policy_config c = {.capacity = 42};
            hy_err e = {0};
            CU_ASSERT_EQUAL(hy_policy_parse(hy_evict_name((hy_evict_kind)k), admit, &c, &e), 0);
            CU_ASSERT_EQUAL(c.evict, (hy_evict_kind)k);
            CU_ASSERT_EQUAL(c.admit, (hy_admit_kind)a);
            CU_ASSERT_EQUAL(c.min_tokens, a == HY_ADMIT_MIN_TOKENS ? 512u : 0u);
            CU_ASSERT_EQUAL(c.capacity, 42);
        }
    expect_parse_error("lruu", "always", "'lruu'");
    expect_parse_error("LRU", "always", "'LRU'");
    expect_parse_error("", "always", "''");
    expect_parse_error(NULL, "always", "(null)");
    expect_parse_error("lru", "sometimes", "'sometimes'");
    expect_parse_error("lru", "min-tokens", "'min-tokens'");
    expect_parse_error("lru", "min-tokens 12x", "'12x'");
    expect_parse_error("lru", "min-tokens -3", "'-3'");
    expect_parse_error("lru", "min-tokens 5000000000", "'5000000000'");
    expect_parse_error("lru", "min-tokens512", "'min-tokens512'");
    CU_ASSERT_STRING_EQUAL(hy_evict_name(HY_EVICT_COUNT), "?");

    hy_err e = {0};
    hy_evictor *ev = NULL;
    hy_policy_config c = {.evict = HY_EVICT_S3FIFO, .capacity = 0};
    CU_ASSERT_EQUAL(hy_evictor_new(&c, &ev, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "capacity"));
    c.evict = HY_EVICT_COUNT;
    CU_ASSERT_EQUAL(hy_evictor_new(&c, &ev, &e), HY_EINVAL);
    CU_ASSERT_PTR_NULL(ev);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"lru evicts the least recent", test_lru_evicts_least_recent},
        {"lfu evicts the least frequent, then the least recent",
         test_lfu_evicts_least_frequent_then_least_recent},
        {"s3fifo: one-hit wonders first, ghosts to main",
         test_s3fifo_one_hit_wonders_first_and_ghosts_to_main},
        {"gdsf evicts low cost per byte and ages", test_gdsf_evicts_low_cost_per_byte_and_ages},
        {"hybrid keeps a long segment over a short one", test_hybrid_keeps_long_segment_over_short},
        {"pinned ids are skipped, not lost", test_pinned_are_skipped_not_lost},
        {"lru: 100k random ops match a reference", test_lru_random_ops_match_reference},
        {"lfu/gdsf/hybrid: 100k random ops match a reference",
         test_heap_kinds_random_ops_match_reference},
        {"s3fifo: 100k random ops keep its invariants", test_s3fifo_random_ops_keep_invariants},
        {"admission: always and min-tokens", test_admit_always_and_min_tokens},
        {"admission: second-hit", test_admit_second_hit},
        {"admission: tinylfu rejects one-offs and ages", test_admit_tinylfu},
        {"hy_policy_parse names bad values", test_parse_names_bad_values},
        {NULL, NULL},
    };
    return hy_test_main("policy", cases);
}
