/*
 * Admission policies (policy_internal.h): whether a put enters a tier at all.
 *
 *   always      every put enters.
 *   second-hit  a sliding window of the last W recorded lookups (a ring of
 *               ids plus an id -> occurrences map); a put enters when its id
 *               occurs at least twice in the window — the lookup that missed
 *               and one before it. O(1) per record and per admit.
 *   tinylfu     a count-min sketch: 4 rows of saturating 4-bit counters (held
 *               in bytes, capped at 15), each row indexed by its own mix of
 *               the id; the estimate is the smallest of the 4. After every
 *               10 × width recorded lookups all counters halve (aging), so
 *               the sketch tracks recent popularity. A put enters when its
 *               estimate is at least the would-be victim's (ties admit, so a
 *               cold cache fills). O(1) per record and admit; the halving is
 *               O(width) once per 10 × width records, O(1) amortised.
 *   min-tokens  a put enters when its segment has at least N tokens: short
 *               segments are cheap to recompute and not worth a slot.
 *
 * Sizes come from the tier's capacity in bytes: W and the sketch width are
 * one slot per HY_ADMIT_OBJ_BYTES of capacity (entries are MBs each, so this
 * leaves room for several times the resident objects), between 256 and 2^22.
 */
#include "idmap_internal.h"
#include "policy_internal.h"

#include <stdlib.h>
#include <string.h>

#define HY_ADMIT_OBJ_BYTES (1ull << 20)
#define CMS_ROWS           4
#define CMS_MAX            15

struct hy_admitter {
    hy_admit_kind kind;
    uint32_t min_tokens;
    /* second-hit */
    uint64_t *ring; /* the last ring_n (<= window) recorded ids, oldest at ring_pos */
    size_t window, ring_n, ring_pos;
    hy_idmap seen; /* id -> occurrences in the ring */
    /* tinylfu */
    uint8_t *cms;       /* [CMS_ROWS][width] */
    size_t width;       /* a power of two */
    uint64_t additions; /* records since the last halving (halved with it) */
};

static size_t slots_for(uint64_t capacity)
{
    uint64_t n = capacity / HY_ADMIT_OBJ_BYTES;
    return (size_t)(n < 256 ? 256 : n > (1u << 22) ? (1u << 22) : n);
}

int hy_admitter_new(const hy_policy_config *cfg, hy_admitter **out, hy_err *err)
{
    *out = NULL;
    if (!cfg || (unsigned)cfg->admit >= HY_ADMIT_COUNT)
        return hy_err_set(err, HY_EINVAL, "admission kind %d: unknown", cfg ? (int)cfg->admit : -1);
    hy_admitter *ad = calloc(1, sizeof *ad);
    if (!ad) return hy_err_set(err, HY_ENOMEM, "admitter: out of memory");
    ad->kind = cfg->admit;
    ad->min_tokens = cfg->min_tokens;
    const size_t slots = slots_for(cfg->capacity);
    if (ad->kind == HY_ADMIT_SECOND_HIT) {
        ad->window = slots;
        ad->ring = malloc(slots * sizeof *ad->ring);
    } else if (ad->kind == HY_ADMIT_TINYLFU) {
        ad->width = 1;
        while (ad->width < slots) ad->width *= 2;
        ad->cms = calloc(CMS_ROWS, ad->width);
    }
    if ((ad->kind == HY_ADMIT_SECOND_HIT && !ad->ring) ||
        (ad->kind == HY_ADMIT_TINYLFU && !ad->cms)) {
        hy_admitter_free(ad);
        return hy_err_set(err, HY_ENOMEM, "admitter %s: out of memory", hy_admit_name(cfg->admit));
    }
    *out = ad;
    return 0;
}

void hy_admitter_free(hy_admitter *ad)
{
    if (!ad) return;
    free(ad->ring);
    hy_idmap_clear(&ad->seen);
    free(ad->cms);
    free(ad);
}

/* --- tinylfu's sketch ------------------------------------------------------ */

/* Row r's counter index for id: a different odd multiplier per row, then the
 * high bits (the well-mixed ones) of the product. */
static size_t cms_index(const hy_admitter *ad, uint64_t id, int r)
{
    static const uint64_t k_seed[CMS_ROWS] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full,
                                              0x165667b19e3779f9ull, 0xd6e8feb86659fd93ull};
    uint64_t h = (id ^ (id >> 29)) * k_seed[r];
    h ^= h >> 32;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 29;
    return (size_t)r * ad->width + (size_t)(h & (ad->width - 1));
}

static unsigned cms_estimate(const hy_admitter *ad, uint64_t id)
{
    unsigned m = CMS_MAX;
    for (int r = 0; r < CMS_ROWS; r++) m = HY_MIN(m, ad->cms[cms_index(ad, id, r)]);
    return m;
}

static void cms_add(hy_admitter *ad, uint64_t id)
{
    for (int r = 0; r < CMS_ROWS; r++) {
        uint8_t *c = &ad->cms[cms_index(ad, id, r)];
        if (*c < CMS_MAX) (*c)++;
    }
    if (++ad->additions >= 10 * (uint64_t)ad->width) {
        for (size_t i = 0; i < CMS_ROWS * ad->width; i++) ad->cms[i] >>= 1;
        ad->additions /= 2;
    }
}

/* --- second-hit's window --------------------------------------------------------- */

static void window_add(hy_admitter *ad, uint64_t id)
{
    if (ad->ring_n == ad->window) { /* forget the oldest */
        uint64_t old = ad->ring[ad->ring_pos];
        uint32_t c = hy_idmap_get(&ad->seen, old);
        if (c <= 1)
            hy_idmap_del(&ad->seen, old);
        else
            hy_idmap_put(&ad->seen, old, c - 1); /* present: cannot grow, cannot fail */
        ad->ring_pos = (ad->ring_pos + 1) % ad->window;
        ad->ring_n--;
    }
    uint32_t c = hy_idmap_get(&ad->seen, id);
    if (hy_idmap_put(&ad->seen, id, c == HY_IDMAP_NONE ? 1 : c + 1)) {
        hy_log(HY_LOG_WARN, "second-hit: out of memory; lookup of %016llx not recorded",
               (unsigned long long)id);
        return;
    }
    ad->ring[(ad->ring_pos + ad->ring_n) % ad->window] = id;
    ad->ring_n++;
}

void hy_admitter_record(hy_admitter *ad, uint64_t id)
{
    if (ad->kind == HY_ADMIT_SECOND_HIT)
        window_add(ad, id);
    else if (ad->kind == HY_ADMIT_TINYLFU)
        cms_add(ad, id);
}

bool hy_admitter_admit(hy_admitter *ad, uint64_t id, uint32_t tokens, uint64_t victim_id)
{
    switch (ad->kind) {
    case HY_ADMIT_ALWAYS:
        return true;
    case HY_ADMIT_MIN_TOKENS:
        return tokens >= ad->min_tokens;
    case HY_ADMIT_SECOND_HIT: {
        uint32_t c = hy_idmap_get(&ad->seen, id);
        return c != HY_IDMAP_NONE && c >= 2;
    }
    case HY_ADMIT_TINYLFU:
        return victim_id == 0 || cms_estimate(ad, id) >= cms_estimate(ad, victim_id);
    default:
        return false;
    }
}

uint32_t hy_admitter_estimate(const hy_admitter *ad, uint64_t id)
{
    if (ad->kind == HY_ADMIT_TINYLFU) return cms_estimate(ad, id);
    if (ad->kind == HY_ADMIT_SECOND_HIT) {
        uint32_t c = hy_idmap_get(&ad->seen, id);
        return c == HY_IDMAP_NONE ? 0 : c;
    }
    return 0;
}
