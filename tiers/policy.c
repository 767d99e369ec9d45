/*
 * Policy names and their parsing (policy_internal.h): the one place that maps the
 * YAML spellings of eviction and admission kinds to the enums. The policies
 * themselves live in evict.c and admit.c.
 */
#include "policy_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_evict_names[HY_EVICT_COUNT] = {
    [HY_EVICT_LRU] = "lru",   [HY_EVICT_LFU] = "lfu",       [HY_EVICT_S3FIFO] = "s3fifo",
    [HY_EVICT_GDSF] = "gdsf", [HY_EVICT_HYBRID] = "hybrid",
};

static const char *const k_admit_names[HY_ADMIT_COUNT] = {
    [HY_ADMIT_ALWAYS] = "always",
    [HY_ADMIT_SECOND_HIT] = "second-hit",
    [HY_ADMIT_TINYLFU] = "tinylfu",
    [HY_ADMIT_MIN_TOKENS] = "min-tokens",
};

const char *hy_evict_name(hy_evict_kind k)
{
    return (unsigned)k < HY_EVICT_COUNT ? k_evict_names[k] : "?";
}

const char *hy_admit_name(hy_admit_kind k)
{
    return (unsigned)k < HY_ADMIT_COUNT ? k_admit_names[k] : "?";
}

/* "min-tokens N": N after one or more spaces, a decimal count up to
 * UINT32_MAX and nothing after it. */
static int parse_min_tokens(const char *admit, uint32_t *n, hy_err *err)
{
    const char *p = admit + strlen("min-tokens");
    if (*p != ' ')
        return hy_err_set(err, HY_EINVAL,
                          "admission policy '%s': expected 'min-tokens N' (N a token count)",
                          admit);
    while (*p == ' ') p++;
    char *end;
    errno = 0;
    unsigned long long v = *p >= '0' && *p <= '9' ? strtoull(p, &end, 10) : 0;
    if (!(*p >= '0' && *p <= '9') || *end != '\0' || errno || v > UINT32_MAX)
        return hy_err_set(err, HY_EINVAL,
                          "admission policy '%s': '%s' is not a token count (0..%u)", admit, p,
                          UINT32_MAX);
    *n = (uint32_t)v;
    return 0;
}

/* Fills out's evict, admit and min_tokens (0 unless min-tokens); leaves its
 * capacity as it was. out is untouched on error. */
int hy_policy_parse(const char *evict, const char *admit, hy_policy_config *out, hy_err *err)
{
    int e = -1, a = -1;
    for (int i = 0; evict && i < HY_EVICT_COUNT; i++)
        if (strcmp(evict, k_evict_names[i]) == 0) e = i;
    if (e < 0)
        return hy_err_set(err, HY_EINVAL,
                          "eviction policy '%s': unknown (expected lru, lfu, s3fifo, gdsf or "
                          "hybrid)",
                          evict ? evict : "(null)");
    uint32_t min_tokens = 0;
    for (int i = 0; admit && i < HY_ADMIT_COUNT; i++)
        if (strcmp(admit, k_admit_names[i]) == 0) a = i;
    if (a == HY_ADMIT_MIN_TOKENS || (admit && a < 0 && strncmp(admit, "min-tokens", 10) == 0)) {
        int rc = parse_min_tokens(admit, &min_tokens, err);
        if (rc) return rc;
        a = HY_ADMIT_MIN_TOKENS;
    }
    if (a < 0)
        return hy_err_set(err, HY_EINVAL,
                          "admission policy '%s': unknown (expected always, second-hit, tinylfu "
                          "or min-tokens N)",
                          admit ? admit : "(null)");
    out->evict = (hy_evict_kind)e;
    out->admit = (hy_admit_kind)a;
    out->min_tokens = min_tokens;
    return 0;
}
