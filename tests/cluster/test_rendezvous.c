/*
 * Rendezvous hashing (hy_cluster.h), the cluster's placement rule, held to
 * what it promises: the score is the documented SHA-256 prefix (checked
 * against a digest computed here); owners are the top r by score, distinct,
 * best first, r clipped to the members; the result does not depend on the
 * members' order; keys spread evenly; a fourth member joining takes about a
 * quarter of the keys, each from its previous owner, and no other key moves;
 * a member leaving moves its keys only; with r = 2 a join changes at most one
 * owner of a key.
 */
#include "hy_cluster.h"
#include "hy_common.h"
#include "test_util.h"

#include <string.h>

enum { KEYS = 20000 };

static void key_of(uint32_t i, uint8_t key[32])
{
    hy_sha256(&i, sizeof i, key); /* a spread of keys, as entry keys are */
}

static void test_score_is_the_documented_hash(void)
{
    uint8_t key[32], d[32];
    key_of(7, key);
    uint8_t buf[12 + 32 + 6];
    memcpy(buf, "hypic-owner", 12); /* with its NUL */
    memcpy(buf + 12, key, 32);
    memcpy(buf + 44, "node-a", 6);
    hy_sha256(buf, sizeof buf, d);
    uint64_t want = 0;
    for (int i = 0; i < 8; i++) want = (want << 8) | d[i];
    CU_ASSERT_EQUAL(hy_rendezvous_score(key, "node-a"), want);
    /* the vector the Python client's test checks too (client/python/tests/test_cluster.py) */
    CU_ASSERT_EQUAL(want, UINT64_C(5752632589512009862));
    CU_ASSERT_NOT_EQUAL(hy_rendezvous_score(key, "node-b"), want);
}

static void test_owners_ranked_and_clipped(void)
{
    const char *ids[] = {"a", "b", "c", "d", "e"};
    uint8_t key[32];
    for (uint32_t k = 0; k < 200; k++) {
        key_of(k, key);
        size_t out[8];
        CU_ASSERT_EQUAL_FATAL(hy_rendezvous_owners(key, ids, 5, 3, out), 3);
        CU_ASSERT(out[0] != out[1] && out[1] != out[2] && out[0] != out[2]);
        CU_ASSERT(hy_rendezvous_score(key, ids[out[0]]) >= hy_rendezvous_score(key, ids[out[1]]));
        CU_ASSERT(hy_rendezvous_score(key, ids[out[1]]) >= hy_rendezvous_score(key, ids[out[2]]));
        /* the best of all five */
        for (size_t i = 0; i < 5; i++)
            CU_ASSERT(hy_rendezvous_score(key, ids[i]) <= hy_rendezvous_score(key, ids[out[0]]));
        /* the first owner alone is the first of three */
        size_t one;
        CU_ASSERT_EQUAL(hy_rendezvous_owners(key, ids, 5, 1, &one), 1);
        CU_ASSERT_EQUAL(one, out[0]);
        /* more replicas than members: every member, once */
        size_t all[8];
        CU_ASSERT_EQUAL(hy_rendezvous_owners(key, ids, 5, 8, all), 5);
        unsigned seen = 0;
        for (int i = 0; i < 5; i++) seen |= 1u << all[i];
        CU_ASSERT_EQUAL(seen, 0x1fu);
        /* the members' order does not matter */
        const char *rev[] = {"e", "d", "c", "b", "a"};
        size_t o2;
        hy_rendezvous_owners(key, rev, 5, 1, &o2);
        CU_ASSERT_STRING_EQUAL(rev[o2], ids[out[0]]);
    }
    size_t none;
    CU_ASSERT_EQUAL(hy_rendezvous_owners(key, ids, 0, 1, &none), 0);
}

/* The owner (r = 1) of every key among ids[0..n). */
static void owners_of_all(const char *const *ids, size_t n, size_t *owner)
{
    uint8_t key[32];
    for (uint32_t k = 0; k < KEYS; k++) {
        key_of(k, key);
        hy_rendezvous_owners(key, ids, n, 1, &owner[k]);
    }
}

static void test_join_and_leave(void)
{
    static const char *const ids[] = {"hypic-0", "hypic-1", "hypic-2", "hypic-3"};
    static size_t three[KEYS], four[KEYS], back[KEYS];
    owners_of_all(ids, 3, three);
    owners_of_all(ids, 4, four);
    size_t moved = 0, wrong = 0, share[4] = {0};
    for (int k = 0; k < KEYS; k++) {
        share[four[k]]++;
        if (four[k] != three[k]) {
            moved++;
            wrong += four[k] != 3; /* a key that moved anywhere but to the newcomer */
        }
    }
    const double frac = (double)moved / KEYS;
    printf("\n    join: %.4f of %d keys moved (ideal 1/4), %zu elsewhere than the new member", frac,
           KEYS, wrong);
    CU_ASSERT(frac > 0.23 && frac < 0.27);
    CU_ASSERT_EQUAL(wrong, 0);
    for (int i = 0; i < 4; i++) /* an even spread: each within 5 % of a quarter */
        CU_ASSERT(share[i] > KEYS / 4 * 0.95 && share[i] < KEYS / 4 * 1.05);
    /* member 1 leaves: only its keys move */
    static const char *const left[] = {"hypic-0", "hypic-2", "hypic-3"};
    owners_of_all(left, 3, back);
    size_t moved2 = 0, wrong2 = 0;
    for (int k = 0; k < KEYS; k++) {
        const char *before = ids[four[k]], *after = left[back[k]];
        if (strcmp(before, after) != 0) {
            moved2++;
            wrong2 += strcmp(before, "hypic-1") != 0;
        }
    }
    printf("\n    leave: %.4f moved (ideal 1/4), %zu not the leaver's", (double)moved2 / KEYS,
           wrong2);
    CU_ASSERT_EQUAL(moved2, share[1]);
    CU_ASSERT_EQUAL(wrong2, 0);
}

static void test_replicas_on_join(void)
{
    static const char *const ids[] = {"n0", "n1", "n2", "n3", "n4"};
    uint8_t key[32];
    size_t changed_two = 0;
    for (uint32_t k = 0; k < 5000; k++) {
        key_of(k, key);
        size_t a[2], b[2];
        hy_rendezvous_owners(key, ids, 4, 2, a);
        hy_rendezvous_owners(key, ids, 5, 2, b);
        int kept = 0;
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) kept += a[i] == b[j];
        changed_two += kept == 0;
        if (kept < 2) /* the newcomer is the one that came in */
            CU_ASSERT(b[0] == 4 || b[1] == 4);
    }
    CU_ASSERT_EQUAL(changed_two, 0);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"the score is the documented SHA-256 prefix", test_score_is_the_documented_hash},
        {"owners ranked, distinct, clipped, order-free", test_owners_ranked_and_clipped},
        {"a join moves about 1/n, to the newcomer only; a leave only the leaver's",
         test_join_and_leave},
        {"r = 2: a join replaces at most one owner of a key", test_replicas_on_join},
        {NULL, NULL},
    };
    return hy_test_main("rendezvous", cases);
}
