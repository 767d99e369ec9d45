/*
 * Small shared utilities: logging, clocks, aligned memory, whole-file reads,
 * half-precision conversions and a seeded random generator (xoshiro256**,
 * seeded through splitmix64) so that generated models are reproducible.
 */
#include "hy_common.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

static int g_log_level = HY_LOG_INFO;
static char g_log_name[64] = "hypic";

void hy_log_set_level(int level)
{
    g_log_level = level;
}

void hy_log_set_name(const char *name)
{
    snprintf(g_log_name, sizeof g_log_name, "%s", name);
}

void hy_log(int level, const char *fmt, ...)
{
    static const char *tags[] = {"debug", "info", "warn", "error"};
    if (level < g_log_level) return;
    if (level < 0) level = 0;
    if (level > 3) level = 3;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", g_log_name, tags[level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

uint64_t hy_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double hy_now_s(void)
{
    return (double)hy_now_ns() * 1e-9;
}

size_t hy_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

void *hy_alloc(size_t bytes)
{
    size_t n = (bytes + 63u) & ~(size_t)63u;
    if (n == 0) n = 64;
    return aligned_alloc(64, n);
}

void *hy_calloc(size_t bytes)
{
    void *p = hy_alloc(bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void hy_free(void *p)
{
    free(p);
}

int hy_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) return HY_ERANGE;
    *out = a * b;
    return HY_OK;
}

float hy_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t hy_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float hy_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while ((man & 0x400u) == 0);
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int hy_read_file(const char *path, size_t max_bytes, char **out, size_t *len, hy_err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hy_err_set(err, HY_ENOTFOUND, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return hy_err_set(err, HY_EIO, "%s: not a regular file", path);
    }
    if ((size_t)st.st_size > max_bytes) {
        fclose(f);
        return hy_err_set(err, HY_ERANGE, "%s: %lld bytes exceeds the limit of %zu bytes", path,
                          (long long)st.st_size, max_bytes);
    }
    char *buf = hy_alloc((size_t)st.st_size + 1);
    if (!buf) {
        fclose(f);
        return hy_err_set(err, HY_ENOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (got != (size_t)st.st_size) {
        hy_free(buf);
        return hy_err_set(err, HY_EIO, "%s: short read (%zu of %lld bytes)", path, got,
                          (long long)st.st_size);
    }
    buf[got] = '\0';
    *out = buf;
    if (len) *len = got;
    return HY_OK;
}

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void hy_rng_seed(hy_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t hy_rng_next(hy_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double hy_rng_uniform(hy_rng *r)
{
    return (double)(hy_rng_next(r) >> 11) * 0x1.0p-53;
}

double hy_rng_normal(hy_rng *r)
{
    double u1 = hy_rng_uniform(r), u2 = hy_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int hy_argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

size_t hy_tokenize_bytes(const char *text, int32_t *out, size_t cap, int vocab)
{
    size_t n = 0;
    for (const unsigned char *s = (const unsigned char *)text; *s && n < cap; s++)
        out[n++] = vocab >= 259 ? (int32_t)*s + 3 : (int32_t)(*s % (vocab - 3)) + 3;
    return n;
}
