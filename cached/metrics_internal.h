/*
 * The daemon's metrics: a growing text buffer, lock-free histograms and the
 * Prometheus text exposition format (version 0.0.4) that /metrics serves.
 *
 * Counters and gauges live where they are counted (the store, the service);
 * this file only renders them. A histogram is the one metric kept here,
 * because its bucket arithmetic and its exposition belong together. Every
 * function that appends to a hy_strbuf is allocation-failure safe: the buffer
 * records the failure and the caller checks `failed` once at the end.
 *
 * Numbers are printed in the "C" locale's format (the daemon never calls
 * setlocale), which is what the exposition format requires.
 */
#ifndef HY_CACHED_METRICS_INTERNAL_H
#define HY_CACHED_METRICS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- hy_strbuf ---------------------------------------------------------- */

/* A growing text buffer; on allocation failure `failed` is set and further
 * appends are ignored. Zero-initialise ({0}) before use. p is NUL-terminated
 * whenever it is not NULL; n counts the bytes before the NUL. p comes from
 * malloc, so an owner may take it over and release it with free(). */
typedef struct hy_strbuf {
    char *p;
    size_t n, cap;
    bool failed;
} hy_strbuf;

/* Appends printf-formatted text. */
void hy_sb_printf(hy_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees the text and resets b to {0}. */
void hy_sb_free(hy_strbuf *b);

/* ---- hy_hist ------------------------------------------------------------ */

/* A histogram with fixed upper bounds (ascending, finite; +Inf implied),
 * updated lock-free from any thread (C11 atomics): cumulative buckets
 * rendered as Prometheus expects.
 *
 * counts[i] holds the observations v with bounds[i-1] < v <= bounds[i]
 * (not cumulative: one atomic increment per observation); counts[nb] those
 * above the last bound. The sum is kept as an integer number of billionths of
 * the bounds' unit (nanoseconds when the unit is seconds), so that concurrent
 * additions are exact and commute (a double would need a CAS loop and would
 * depend on the order of the additions); it is rendered as an exact decimal.
 * It wraps after 2^64 billionths (584 years of summed seconds). */
#define HY_HIST_MAX_BOUNDS 32
typedef struct hy_hist {
    int nb;                                          /* finite bounds, 1..HY_HIST_MAX_BOUNDS */
    double bounds[HY_HIST_MAX_BOUNDS];               /* upper bounds, ascending, > 0, finite */
    _Atomic uint64_t counts[HY_HIST_MAX_BOUNDS + 1]; /* per bucket; [nb] is (bounds[nb-1], +Inf) */
    _Atomic uint64_t count;                          /* observations */
    _Atomic uint64_t sum_nano;                       /* sum of observations, in 1e-9 of the unit */
} hy_hist;

/* Sets the bounds and zeroes the counts. The bounds are constants of the
 * program, so a bad set is a broken invariant: asserts 1 <= nb <= max and
 * that they are finite, positive and strictly ascending. */
void hy_hist_init(hy_hist *h, const double *bounds, int nb);
/* Counts one observation v, in the unit of the bounds (seconds). Histograms
 * here measure non-negative quantities (latencies, sizes): a negative v
 * (a clock that stepped back) counts as 0, and NaN is not counted at all.
 * Safe from any number of threads at once. */
void hy_hist_observe(hy_hist *h, double v);
/* The number of observations so far. */
uint64_t hy_hist_count(const hy_hist *h);
/* The q-quantile estimated from the buckets (linear within a bucket), for logs and tests.
 * The same estimate as PromQL's histogram_quantile: the first bucket's lower edge is 0,
 * a rank that falls in the +Inf bucket returns the last finite bound. NaN when there is
 * no observation or q is outside [0, 1]. */
double hy_hist_quantile(const hy_hist *h, double q);

/* Latency buckets in seconds, 100 µs .. 60 s, for TTFT and per-RPC times. */
extern const double hy_hist_latency_bounds[];
extern const int hy_hist_latency_nb;

/* ---- Prometheus text exposition (format 0.0.4) ----------------------------
 *
 * A family header once, then its samples. Names are constants of the program:
 * a name outside [a-zA-Z_:][a-zA-Z0-9_:]* is a broken invariant (asserted).
 * labels is the inside of the braces, already escaped (hy_prom_escape), e.g.
 * `tier="host"` or `tier="host",op="get"`; NULL or "" for none. */

/* "# HELP name help" and "# TYPE name type"; type is counter, gauge or
 * histogram; help is escaped as the format asks (backslash, newline). */
void hy_prom_family(hy_strbuf *b, const char *name, const char *type, const char *help);
/* "name{labels} v": the shortest decimal that reads back as v; NaN, +Inf, -Inf. */
void hy_prom_sample(hy_strbuf *b, const char *name, const char *labels, double v);
/* The same for an exact integer (counters past 2^53 stay exact). */
void hy_prom_u64(hy_strbuf *b, const char *name, const char *labels, uint64_t v);
/* name_bucket{labels,le="..."} (cumulative, le="+Inf" last), name_sum, name_count.
 * The buckets are read one by one while other threads may observe; name_count is
 * the +Inf bucket's value so that the two always agree, as scrapers expect. */
void hy_prom_hist(hy_strbuf *b, const char *name, const char *labels, const hy_hist *h);

/* Escapes a label value (backslash, quote, newline) into out, NUL-terminated.
 * When out is too small the value is cut short: never inside an escape
 * sequence nor inside a UTF-8 character. cap 0: nothing is written. */
void hy_prom_escape(const char *in, char *out, size_t cap);

#endif
