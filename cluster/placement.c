/*
 * Rendezvous hashing (hy_cluster.h).
 */
#include "hy_cluster.h"

#include "hy_common.h"

#include <assert.h>
#include <string.h>

static const char k_domain[] = "hypic-owner"; /* hashed with its NUL */

uint64_t hy_rendezvous_score(const uint8_t key[32], const char *id)
{
    uint8_t buf[sizeof k_domain + 32 + HY_MEMBER_ID_MAX];
    size_t n = strnlen(id, HY_MEMBER_ID_MAX);
    memcpy(buf, k_domain, sizeof k_domain);
    memcpy(buf + sizeof k_domain, key, 32);
    memcpy(buf + sizeof k_domain + 32, id, n);
    uint8_t d[32];
    hy_sha256(buf, sizeof k_domain + 32 + n, d);
    uint64_t s = 0;
    for (int i = 0; i < 8; i++) s = (s << 8) | d[i];
    return s;
}

/* Whether member a (score sa) ranks before member b. */
static int before(uint64_t sa, const char *a, uint64_t sb, const char *b)
{
    return sa != sb ? sa > sb : strcmp(a, b) < 0;
}

size_t hy_rendezvous_owners(const uint8_t key[32], const char *const *ids, size_t n, size_t r,
                            size_t *out)
{
    uint64_t best[HY_OWNERS_MAX];
    if (r > HY_OWNERS_MAX) r = HY_OWNERS_MAX;
    if (r > n) r = n;
    size_t k = 0;
    /* insertion into the top r, kept sorted; r is small (replicas) */
    for (size_t i = 0; i < n; i++) {
        const uint64_t s = hy_rendezvous_score(key, ids[i]);
        size_t at = k;
        while (at > 0 && before(s, ids[i], best[at - 1], ids[out[at - 1]])) at--;
        if (at >= r) continue;
        const size_t last = k < r ? k : r - 1;
        for (size_t j = last; j > at; j--) {
            best[j] = best[j - 1];
            out[j] = out[j - 1];
        }
        best[at] = s;
        out[at] = i;
        if (k < r) k++;
    }
    /* r ≤ n, so the top r are filled, best first */
    assert(k == r);
    for (size_t j = 1; j < k; j++)
        assert(!before(best[j], ids[out[j]], best[j - 1], ids[out[j - 1]]));
    return k;
}
