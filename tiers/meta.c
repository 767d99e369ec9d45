/*
 * Keys and metadata shared by every tier: hex forms, validation, the clock
 * that timestamps entries.
 */
#include "hy_tiers.h"

#include <string.h>
#include <time.h>

void hy_key_hex(const hy_key *k, char out[65])
{
    hy_hex(k->b, HY_KEY_BYTES, out);
}

int hy_key_parse(const char *hex, hy_key *out)
{
    if (!hex || strlen(hex) != 2 * HY_KEY_BYTES) return HY_EINVAL;
    for (int i = 0; i < HY_KEY_BYTES; i++) {
        int v = 0;
        for (int j = 0; j < 2; j++) {
            char c = hex[2 * i + j];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0) return HY_EINVAL;
            v = v * 16 + d;
        }
        out->b[i] = (uint8_t)v;
    }
    return HY_OK;
}

uint64_t hy_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int hy_meta_validate(const hy_meta *m, hy_err *err)
{
    if (memchr(m->tenant, '\0', HY_TENANT_MAX) == NULL)
        return hy_err_set(err, HY_EINVAL, "meta.tenant is longer than %d bytes", HY_TENANT_MAX - 1);
    if (m->ntags > HY_MAX_TAGS)
        return hy_err_set(err, HY_ERANGE, "meta.ntags = %u exceeds the limit of %d", m->ntags,
                          HY_MAX_TAGS);
    for (uint32_t i = 0; i < m->ntags; i++)
        if (memchr(m->tags[i], '\0', HY_TAG_MAX) == NULL || m->tags[i][0] == '\0')
            return hy_err_set(err, HY_EINVAL, "meta.tags[%u] is empty or longer than %d bytes", i,
                              HY_TAG_MAX - 1);
    if (m->bytes == 0) return hy_err_set(err, HY_EINVAL, "meta.bytes is 0: an entry has a payload");
    return HY_OK;
}
