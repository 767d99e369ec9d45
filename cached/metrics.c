/*
 * Metrics: the text buffer, the histograms and the Prometheus exposition
 * (metrics_internal.h states the contracts).
 *
 * Histograms are written on the request path by many threads and read by a
 * scrape now and then, so an observation is a few relaxed atomic additions
 * and no lock: a scrape may see one observation in a bucket before it sees it
 * in the sum, which is as exact as a scrape needs to be. Relaxed ordering is
 * enough because no other memory is published through these counters.
 */
#include "metrics_internal.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hy_strbuf ------------------------------------------------------------ */

/* Makes room for `extra` more bytes and the NUL; false (and failed set) when
 * that cannot be had. */
static bool sb_reserve(hy_strbuf *b, size_t extra)
{
    if (b->failed) return false;
    if (extra < b->cap - b->n && b->p) return true;
    size_t need = b->n + extra + 1;
    if (need < b->n) { /* overflow */
        b->failed = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void hy_sb_printf(hy_strbuf *b, const char *fmt, ...)
{
    if (b->failed) return;
    va_list ap;
    va_start(ap, fmt);
    /* First try in the room already there; most appends are short lines. */
    size_t room = b->p ? b->cap - b->n : 0;
    int len = vsnprintf(room ? b->p + b->n : NULL, room, fmt, ap);
    va_end(ap);
    if (len < 0) { /* an encoding error: the text cannot be rendered */
        b->failed = true;
        return;
    }
    if ((size_t)len >= room) {
        if (!sb_reserve(b, (size_t)len)) {
            if (b->p) b->p[b->n] = '\0'; /* undo the truncated attempt */
            return;
        }
        va_start(ap, fmt);
        vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
    }
    b->n += (size_t)len;
}

void hy_sb_free(hy_strbuf *b)
{
    free(b->p);
    *b = (hy_strbuf){0};
}

/* ---- hy_hist -------------------------------------------------------------- */

const double hy_hist_latency_bounds[] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60,
};
const int hy_hist_latency_nb = sizeof hy_hist_latency_bounds / sizeof hy_hist_latency_bounds[0];

void hy_hist_init(hy_hist *h, const double *bounds, int nb)
{
    assert(nb >= 1 && nb <= HY_HIST_MAX_BOUNDS);
    h->nb = nb;
    for (int i = 0; i < nb; i++) {
        assert(isfinite(bounds[i]) && bounds[i] > 0);
        assert(i == 0 || bounds[i] > bounds[i - 1]);
        h->bounds[i] = bounds[i];
    }
    for (int i = 0; i <= HY_HIST_MAX_BOUNDS; i++) atomic_init(&h->counts[i], 0);
    atomic_init(&h->count, 0);
    atomic_init(&h->sum_nano, 0);
}

/* The bucket of v: the first i with v <= bounds[i], or nb (+Inf). Binary
 * search; the bounds are few, but observe runs on every request. */
static int hist_bucket(const hy_hist *h, double v)
{
    int lo = 0, hi = h->nb; /* the answer is in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v <= h->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void hy_hist_observe(hy_hist *h, double v)
{
    if (isnan(v)) return;
    if (v < 0) v = 0;
    /* Billionths, rounded; saturated below 2^63 so the conversion is defined
     * for any v (+Inf included). */
    double nano = v * 1e9 + 0.5;
    uint64_t add = nano < 9.2e18 ? (uint64_t)nano : UINT64_C(9200000000000000000);
    atomic_fetch_add_explicit(&h->counts[hist_bucket(h, v)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_nano, add, memory_order_relaxed);
}

uint64_t hy_hist_count(const hy_hist *h)
{
    return atomic_load_explicit(&h->count, memory_order_relaxed);
}

/* A snapshot of the cumulative counts: cum[i] = observations <= bounds[i],
 * cum[nb] = all. */
static void hist_cumulative(const hy_hist *h, uint64_t cum[HY_HIST_MAX_BOUNDS + 1])
{
    uint64_t c = 0;
    for (int i = 0; i <= h->nb; i++) {
        c += atomic_load_explicit(&h->counts[i], memory_order_relaxed);
        cum[i] = c;
    }
}

double hy_hist_quantile(const hy_hist *h, double q)
{
    if (!(q >= 0 && q <= 1)) return NAN;
    uint64_t cum[HY_HIST_MAX_BOUNDS + 1] = {0};
    hist_cumulative(h, cum);
    uint64_t total = cum[h->nb];
    if (total == 0) return NAN;
    double rank = q * (double)total;
    /* The first bucket that reaches the rank and holds something (q = 0
     * would otherwise stop at a leading empty bucket). */
    int b = 0;
    while (b < h->nb && !((double)cum[b] >= rank && cum[b] > 0)) b++;
    if (b == h->nb) return h->bounds[h->nb - 1];
    double lower = b == 0 ? 0 : h->bounds[b - 1];
    uint64_t before = b == 0 ? 0 : cum[b - 1];
    double in_bucket = (double)(cum[b] - before);
    return lower + (h->bounds[b] - lower) * ((rank - (double)before) / in_bucket);
}

/* ---- exposition ----------------------------------------------------------- */

/* Used by assert() only, hence unused under NDEBUG. */
__attribute__((unused)) static bool name_ok(const char *name)
{
    if (!name || !*name) return false;
    for (const char *c = name; *c; c++) {
        bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_' || *c == ':';
        bool digit = *c >= '0' && *c <= '9';
        if (!alpha && !(digit && c != name)) return false;
    }
    return true;
}

/* v as the exposition writes a float: the shortest of %.15g..%.17g that
 * reads back as v (0.1 stays "0.1"), or NaN / +Inf / -Inf. */
static void fmt_double(double v, char out[32])
{
    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(out, 32, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

void hy_prom_family(hy_strbuf *b, const char *name, const char *type, const char *help)
{
    assert(name_ok(name));
    assert(!strcmp(type, "counter") || !strcmp(type, "gauge") || !strcmp(type, "histogram"));
    hy_sb_printf(b, "# HELP %s ", name);
    /* HELP text escapes backslash and newline only (quotes stay as they are). */
    for (const char *c = help ? help : ""; *c; c++) {
        if (*c == '\\')
            hy_sb_printf(b, "\\\\");
        else if (*c == '\n')
            hy_sb_printf(b, "\\n");
        else
            hy_sb_printf(b, "%c", *c);
    }
    hy_sb_printf(b, "\n# TYPE %s %s\n", name, type);
}

/* "name" or "name{labels}" */
static void sample_head(hy_strbuf *b, const char *name, const char *suffix, const char *labels)
{
    assert(name_ok(name));
    if (labels && *labels)
        hy_sb_printf(b, "%s%s{%s} ", name, suffix, labels);
    else
        hy_sb_printf(b, "%s%s ", name, suffix);
}

void hy_prom_sample(hy_strbuf *b, const char *name, const char *labels, double v)
{
    char num[32];
    fmt_double(v, num);
    sample_head(b, name, "", labels);
    hy_sb_printf(b, "%s\n", num);
}

void hy_prom_u64(hy_strbuf *b, const char *name, const char *labels, uint64_t v)
{
    sample_head(b, name, "", labels);
    hy_sb_printf(b, "%" PRIu64 "\n", v);
}

void hy_prom_hist(hy_strbuf *b, const char *name, const char *labels, const hy_hist *h)
{
    assert(name_ok(name));
    uint64_t cum[HY_HIST_MAX_BOUNDS + 1] = {0};
    hist_cumulative(h, cum);
    uint64_t sum = atomic_load_explicit(&h->sum_nano, memory_order_relaxed);
    const char *sep = labels && *labels ? "," : "";
    const char *lab = labels ? labels : "";
    for (int i = 0; i <= h->nb; i++) {
        char le[32];
        if (i < h->nb)
            fmt_double(h->bounds[i], le);
        else
            strcpy(le, "+Inf");
        hy_sb_printf(b, "%s_bucket{%s%sle=\"%s\"} %" PRIu64 "\n", name, lab, sep, le, cum[i]);
    }
    /* The sum as an exact decimal: whole units, then the nine digits of the
     * fraction without their trailing zeros. */
    char frac[16] = "";
    uint64_t whole = sum / 1000000000u, part = sum % 1000000000u;
    if (part) {
        snprintf(frac, sizeof frac, ".%09" PRIu64, part);
        size_t n = strlen(frac); /* 10: the point and nine digits, not all zeros */
        while (n > 1 && frac[n - 1] == '0') n--;
        frac[n] = '\0';
    }
    sample_head(b, name, "_sum", labels);
    hy_sb_printf(b, "%" PRIu64 "%s\n", whole, frac);
    sample_head(b, name, "_count", labels);
    hy_sb_printf(b, "%" PRIu64 "\n", cum[h->nb]);
}

void hy_prom_escape(const char *in, char *out, size_t cap)
{
    if (cap == 0) return;
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)in; *c;) {
        /* The next unit to copy: one escape sequence, or one whole UTF-8
         * character (its length from the lead byte; a stray byte alone). */
        char unit[4];
        size_t len = 0;
        if (*c == '\\' || *c == '"' || *c == '\n') {
            unit[0] = '\\';
            unit[1] = *c == '\n' ? 'n' : (char)*c;
            len = 2;
            c++;
        } else {
            size_t want = *c >= 0xF0 ? 4 : *c >= 0xE0 ? 3 : *c >= 0xC0 ? 2 : 1;
            unit[len++] = (char)*c++;
            while (len < want && (*c & 0xC0) == 0x80) unit[len++] = (char)*c++;
        }
        if (o + len >= cap) break;
        memcpy(out + o, unit, len);
        o += len;
    }
    out[o] = '\0';
}
