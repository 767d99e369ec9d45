/*
 * hypic-bench scale: how a request's costs grow with its segments. One
 * hypic-cached (a child process, the tests' fixture) serves the `small`
 * preset with a host tier that holds every entry; D documents of 512 to 1024
 * random tokens are warmed at the default seam (8, for pic and naive) and at
 * seam 0 (noseam). Then for each k (8, 16, 32, 64, 128) and each repetition
 * a request of k documents drawn at random, in a random order, and a 16-token
 * query runs once in every mode (full, prefix, pic, noseam, naive), the
 * modes' order rotated from one request to the next so that the drift of a
 * shared machine falls on all of them alike. A fresh draw per request is the
 * RAG case: prefix reuses only a run of leading documents it has seen in
 * that order, which a new order rarely has.
 *
 * Per request: TTFT (the daemon's ttft_ms: the request received to the first
 * token's logits), the daemon's memory for it (its peak resident set during
 * the request, VmHWM after /proc/PID/clear_refs reset it, over its resident
 * set before), tokens through the forward pass, and the bytes of the entries
 * it fetched (the hits' stored sizes, from Lookup). The pic family is asked
 * to fetch every hit (REUSE_FETCH), so it measures composition, not the
 * daemon's choice to recompute. The limit named beside each TTFT: the
 * forward FLOPs the mode cannot avoid (every token in full; the seams at
 * their positions and the query over the whole context in the pic family)
 * at the machine's sgemm rate.
 *
 * The growth of each mode: the log-log slope of median TTFT against k (over
 * every k, and over the largest three), and a fit TTFT = b·k + c·k² (b, c ≥ 0,
 * least relative squares) with the quadratic term's share at the largest k —
 * full and prefix are quadratic in attention; the pic family computes
 * W tokens per segment whatever k is, and only its seams' and query's
 * attention over the longer context grows faster than k.
 *
 *   hypic-bench scale [--ks 8,16,32,64,128] [--docs D] [--reps N]
 *                     [--modes full,prefix,pic,noseam,naive] [--min-tokens A]
 *                     [--max-tokens B] [--out DIR] [--quick] [--daemon PATH]
 */
#include "bench.h"
#include "bench_trace.h"
#include "hy_common.h"
#include "hypic_client.h"

#include "../tests/cached/daemon_fixture.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { MAXK = 16, NMODES = HY_MODE_COUNT, QUERY = 16, SEAM = 8 };
#define SLOW_MS 60e3
/* the request's mode for each hy_mode */
static const Hypic__V1__Mode k_mode[NMODES] = {
    HYPIC__V1__MODE__MODE_FULL, HYPIC__V1__MODE__MODE_PREFIX, HYPIC__V1__MODE__MODE_PIC,
    HYPIC__V1__MODE__MODE_NOSEAM, HYPIC__V1__MODE__MODE_NAIVE};

typedef struct doc {
    uint32_t *ids;
    size_t n;
    uint64_t bytes[2]; /* its entry's stored size: [0] seam 8, [1] seam 0 */
    Hypic__V1__Tokens tk;
    Hypic__V1__Segment sg;
} doc;

/* One configuration's samples: [rep] */
typedef struct cell {
    double *ttft_ms, *peak_mb, *grow_mb, *held_mb, *computed, *fetched_mb, *limit_ms;
    int n;
} cell;

typedef struct scale {
    int ks[MAXK], nk;
    bool on[NMODES];
    int ndocs, reps, min_tok, max_tok;
    bool quick;
    const char *out;
    doc *docs;
    cell cells[MAXK][NMODES];
    double sgemm, read_bw; /* FLOP/s, bytes/s */
    hy_model_config cfg;
} scale;

static int parse_list(const char *s, int *out, int cap, int lo, int hi)
{
    int n = 0;
    while (*s) {
        char *end;
        const long v = strtol(s, &end, 10);
        if (end == s || v < lo || v > hi || n == cap) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* Resets the peak resident set of pid (VmHWM) to its resident set now. */
static bool reset_peak(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
    const int fd = open(path, O_WRONLY);
    if (fd < 0) return false;
    const bool ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

static void docs_make(scale *x, uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    for (int d = 0; d < x->ndocs; d++) {
        doc *o = &x->docs[d];
        o->n = (size_t)x->min_tok +
               (size_t)(hy_rng_next(&r) % (uint64_t)(x->max_tok - x->min_tok + 1));
        for (size_t i = 0; i < o->n; i++) o->ids[i] = 3 + (uint32_t)(hy_rng_next(&r) % 8000);
        hy_bench_token_segment(&o->tk, &o->sg, o->ids, o->n);
    }
}

static int on_warm(void *ctx, const Hypic__V1__WarmProgress *p)
{
    int *done = ctx;
    (*done)++;
    (void)p;
    return 0;
}

/* Warms every document at seam W, then reads each entry's size. */
static int warm_all(scale *x, hyc *c, int W, int slot)
{
    Hypic__V1__Segment **sp = calloc((size_t)x->ndocs, sizeof *sp);
    if (!sp) return 1;
    for (int i = 0; i < x->ndocs; i++) sp[i] = &x->docs[i].sg;
    hyc_status st;
    int done = 0, rc = 1;
    const double t0 = hy_now_s();
    Hypic__V1__WarmRequest wr = HYPIC__V1__WARM_REQUEST__INIT;
    wr.model = "small";
    wr.n_segments = (size_t)x->ndocs;
    wr.segments = sp;
    wr.seam_opt_case = HYPIC__V1__WARM_REQUEST__SEAM_OPT_SEAM;
    wr.seam = (uint32_t)W;
    if (hyc_warm(c, &wr, on_warm, &done, &st)) {
        fprintf(stderr, "hypic-bench scale: warm (seam %d): %s\n", W, st.msg);
        goto out;
    }
    Hypic__V1__LookupRequest lq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    lq.model = "small";
    lq.n_segments = (size_t)x->ndocs;
    lq.segments = sp;
    lq.seam_opt_case = HYPIC__V1__LOOKUP_REQUEST__SEAM_OPT_SEAM;
    lq.seam = (uint32_t)W;
    Hypic__V1__LookupResponse *lr = NULL;
    if (hyc_lookup(c, &lq, &lr, &st)) {
        fprintf(stderr, "hypic-bench scale: lookup (seam %d): %s\n", W, st.msg);
        goto out;
    }
    uint64_t total = 0;
    int missing = 0;
    for (size_t i = 0; i < lr->n_segments && i < (size_t)x->ndocs; i++) {
        x->docs[i].bytes[slot] = lr->segments[i]->hit ? lr->segments[i]->bytes : 0;
        missing += !lr->segments[i]->hit;
        total += x->docs[i].bytes[slot];
    }
    hyc_free(lr);
    if (missing) {
        fprintf(stderr,
                "hypic-bench scale: %d of %d entries at seam %d are not stored (the host tier "
                "too small?)\n",
                missing, x->ndocs, W);
        goto out;
    }
    printf("  seam %d: %d entries, %.1f MiB (%.2f MiB each on average) in %.1f s\n", W, done,
           (double)total / (1 << 20), (double)total / (1 << 20) / x->ndocs, hy_now_s() - t0);
    fflush(stdout);
    rc = 0;
out:
    free(sp);
    return rc;
}

/* The FLOPs a mode cannot avoid for the request: every token (full, and
 * prefix without a checkpoint), or the seams at their positions and the
 * query over the whole context (the pic family). */
static double mode_flops(const scale *x, int m, const int *pick, int k)
{
    int64_t pos = 0;
    double f = 0;
    const int W = m == HY_MODE_NOSEAM ? 0 : SEAM;
    for (int i = 0; i < k; i++) {
        if (m >= HY_MODE_PIC && W) f += hy_config_prefill_flops(&x->cfg, pos, W);
        pos += (int64_t)x->docs[pick[i]].n;
    }
    if (m <= HY_MODE_PREFIX) return hy_config_prefill_flops(&x->cfg, 0, pos + QUERY);
    return f + hy_config_prefill_flops(&x->cfg, pos, QUERY);
}

static double median_of(const double *v, int n)
{
    double *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t) return 0;
    memcpy(t, v, (size_t)n * sizeof *t);
    const double r = hy_bench_median(t, (size_t)n);
    free(t);
    return r;
}

/* Least squares of y on the columns of a (n×p, p ≤ 3) by the normal
 * equations (tiny systems). */
static int lstsq(const double *a, const double *y, int n, int p, double *beta)
{
    double m[3][4] = {{0}};
    for (int i = 0; i < n; i++)
        for (int r = 0; r < p; r++) {
            for (int s = 0; s < p; s++) m[r][s] += a[i * p + r] * a[i * p + s];
            m[r][p] += a[i * p + r] * y[i];
        }
    for (int c = 0; c < p; c++) {
        int piv = c;
        for (int r = c + 1; r < p; r++)
            if (fabs(m[r][c]) > fabs(m[piv][c])) piv = r;
        if (fabs(m[piv][c]) < 1e-300) return -1;
        for (int s = 0; s <= p; s++) {
            const double t = m[c][s];
            m[c][s] = m[piv][s];
            m[piv][s] = t;
        }
        for (int r = 0; r < p; r++) {
            if (r == c) continue;
            const double f = m[r][c] / m[c][c];
            for (int s = 0; s <= p; s++) m[r][s] -= f * m[c][s];
        }
    }
    for (int c = 0; c < p; c++) beta[c] = m[c][p] / m[c][c];
    return 0;
}

static double loglog_slope(const int *ks, const double *y, int from, int to)
{
    double a[2 * MAXK], ly[MAXK], beta[2];
    int n = 0;
    for (int i = from; i < to; i++) {
        if (y[i] <= 0) continue;
        a[2 * n] = 1, a[2 * n + 1] = log((double)ks[i]);
        ly[n++] = log(y[i]);
    }
    if (n < 2 || lstsq(a, ly, n, 2, beta)) return NAN;
    return beta[1];
}

/* One request of the documents pick[0..k) in mode m: its figures appended to
 * cells[ki][m]. */
/* TTFT ≈ b·k + c·k² with b, c ≥ 0, each point weighted by 1/y (relative
 * errors: the small k count as much as the large); out = {b, c}. */
static int fit_linear_quadratic(const int *ks, const double *y, int n, double out[2])
{
    double a[2 * MAXK], one[MAXK];
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (y[i] <= 0) continue;
        a[2 * m] = ks[i] / y[i], a[2 * m + 1] = (double)ks[i] * ks[i] / y[i];
        one[m++] = 1;
    }
    if (m < 2 || lstsq(a, one, m, 2, out)) return -1;
    if (out[0] >= 0 && out[1] >= 0) return 0;
    /* one term alone: the one the unconstrained fit kept positive */
    const int keep = out[0] < 0 ? 1 : 0;
    double num = 0, den = 0;
    for (int i = 0; i < m; i++) num += a[2 * i + keep], den += a[2 * i + keep] * a[2 * i + keep];
    out[keep] = den > 0 ? num / den : 0;
    out[1 - keep] = 0;
    return 0;
}

static int run_request(scale *x, hyc *c, pid_t pid, int ki, int m, const int *pick)
{
    const int k = x->ks[ki];
    cell *cl = &x->cells[ki][m];
    Hypic__V1__Segment **sp = calloc((size_t)k, sizeof *sp);
    if (!sp) return 1;
    for (int i = 0; i < k; i++) sp[i] = &x->docs[pick[i]].sg;
    static uint32_t query[QUERY];
    for (int i = 0; i < QUERY; i++) query[i] = 100 + 37 * (uint32_t)i;
    Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
    rq.model = "small";
    rq.n_segments = (size_t)k;
    rq.segments = sp;
    rq.n_query = QUERY;
    rq.query = query;
    rq.mode = k_mode[m];
    if (m == HY_MODE_NOSEAM) {
        rq.seam_opt_case = HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM;
        rq.seam = 0;
    }
    if (m >= HY_MODE_PIC) rq.reuse = HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH;
    const long rss0 = hy_bench_proc_status_kb(pid, "VmRSS");
    const bool peak = reset_peak(pid);
    const int rep = cl->n;
    Hypic__V1__PrefillResponse *pr = NULL;
    hyc_status st;
    const int rc = hyc_prefill(c, &rq, &pr, &st);
    const long hwm = hy_bench_proc_status_kb(pid, "VmHWM");
    const long rss1 = hy_bench_proc_status_kb(pid, "VmRSS"); /* what the request left held */
    free(sp);
    if (rc) {
        fprintf(stderr, "hypic-bench scale: k %d, %s: %s\n", k, hy_mode_name((hy_mode)m), st.msg);
        return 1;
    }
    uint64_t fetched = 0;
    int hits = 0;
    for (size_t i = 0; i < pr->n_segments; i++)
        if (pr->segments[i]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT) {
            fetched += x->docs[pick[i]].bytes[m == HY_MODE_NOSEAM];
            hits++;
        }
    cl->ttft_ms[rep] = pr->timings->ttft_ms;
    cl->peak_mb[rep] = peak && hwm > 0 ? (double)hwm / 1024.0 : NAN;
    cl->grow_mb[rep] = peak && rss0 > 0 && hwm > 0 ? (double)(hwm - rss0) / 1024.0 : NAN;
    cl->held_mb[rep] = rss0 > 0 && rss1 > 0 ? (double)(rss1 - rss0) / 1024.0 : NAN;
    cl->computed[rep] = (double)pr->tokens_computed;
    cl->fetched_mb[rep] = (double)fetched / (1 << 20);
    /* what the mode cannot avoid: its FLOPs at the sgemm rate, its entries'
     * bytes read once at the memory's rate, whichever takes longer */
    cl->limit_ms[rep] =
        fmax(mode_flops(x, m, pick, k) / x->sgemm, (double)fetched / x->read_bw) * 1e3;
    cl->n = rep + 1;
    printf("  k %3d  %-6s  TTFT %9.1f ms (limit %8.1f)  peak RSS %7.1f MiB (+%.1f, held "
           "%+.1f)  computed %6llu  hits %3d  fetched %7.1f MiB\n",
           k, hy_mode_name((hy_mode)m), cl->ttft_ms[rep], cl->limit_ms[rep], cl->peak_mb[rep],
           cl->grow_mb[rep], cl->held_mb[rep], (unsigned long long)pr->tokens_computed, hits,
           cl->fetched_mb[rep]);
    fflush(stdout);
    hyc_free(pr);
    return 0;
}

static void plot(const scale *x, double med[MAXK][NMODES])
{
    if (mkdir(x->out, 0755) && errno != EEXIST) {
        fprintf(stderr, "hypic-bench scale: cannot make %s: %s\n", x->out, strerror(errno));
        return;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/scale.dat", x->out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "hypic-bench scale: cannot write %s: %s\n", path, strerror(errno));
        return;
    }
    fprintf(f, "# k");
    for (int m = 0; m < NMODES; m++) fprintf(f, " %s_ttft_ms", hy_mode_name((hy_mode)m));
    fprintf(f, "\n");
    for (int i = 0; i < x->nk; i++) {
        fprintf(f, "%d", x->ks[i]);
        for (int m = 0; m < NMODES; m++)
            fprintf(f, x->on[m] ? " %.3f" : " NaN", x->on[m] ? med[i][m] : 0.0);
        fprintf(f, "\n");
    }
    fclose(f);
    /* The axes' ranges come from the data (gnuplot's stats over k and over
     * each mode's column): a factor of 1.25 around the ks measured, and of 2
     * around the TTFTs, which are in seconds so that the log axis reads
     * 0.01 .. 1000 rather than 10 .. 1e6 ms. */
    char script[4096];
    int at = snprintf(script, sizeof script,
                      "set terminal pngcairo size 900,600\n"
                      "set output 'scale_ttft.png'\n"
                      "set title 'TTFT against segments per request (small, median)'\n"
                      "set xlabel 'segments k (%d-%d tokens each)'\n"
                      "set ylabel 'TTFT (s)'\n"
                      "stats 'scale.dat' u 1 nooutput\n"
                      "set xrange [STATS_min / 1.25 : STATS_max * 1.25]\n"
                      "ymin = 1e30; ymax = 0\n",
                      x->min_tok, x->max_tok);
    for (int m = 0; m < NMODES; m++)
        if (x->on[m])
            at += snprintf(script + at, sizeof script - (size_t)at,
                           "stats 'scale.dat' u ($%d / 1000) nooutput\n"
                           "ymin = STATS_min < ymin ? STATS_min : ymin\n"
                           "ymax = STATS_max > ymax ? STATS_max : ymax\n",
                           m + 2);
    at += snprintf(script + at, sizeof script - (size_t)at,
                   "set yrange [ymin / 2 : ymax * 2]\n"
                   "set logscale x 2\nset logscale y\nset format y '%%g'\n"
                   "set key top left\nset grid\n"
                   "plot ");
    bool first = true;
    for (int m = 0; m < NMODES; m++) {
        if (!x->on[m]) continue;
        at += snprintf(script + at, sizeof script - (size_t)at,
                       "%s'scale.dat' using 1:($%d / 1000) with linespoints title '%s'",
                       first ? "" : ", ", m + 2, hy_mode_name((hy_mode)m));
        first = false;
    }
    snprintf(script + at, sizeof script - (size_t)at, "\n");
    hy_bench_gnuplot(x->out, "scale_ttft.gp", script);
}

int hy_bench_scale(int argc, char **argv)
{
    static scale x;
    memset(&x, 0, sizeof x);
    const int def_ks[] = {8, 16, 32, 64, 128};
    memcpy(x.ks, def_ks, sizeof def_ks);
    x.nk = 5;
    for (int m = 0; m < NMODES; m++) x.on[m] = true;
    x.ndocs = 0, x.reps = 3, x.min_tok = 512, x.max_tok = 1024;
    x.out = "hypic-bench-scale";
    bool ks_given = false, tok_given = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--quick")) {
            x.quick = true;
            continue;
        }
        if (!v) goto usage;
        i++;
        if (!strcmp(a, "--ks")) {
            if ((x.nk = parse_list(v, x.ks, MAXK, 1, 256)) < 1) {
                fprintf(stderr, "hypic-bench scale: --ks: '%s' is not a list of 1..256\n", v);
                return 2;
            }
            ks_given = true;
        } else if (!strcmp(a, "--modes")) {
            for (int m = 0; m < NMODES; m++) x.on[m] = false;
            char buf[128];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                hy_mode m;
                if (hy_mode_parse(t, &m)) {
                    fprintf(stderr, "hypic-bench scale: --modes: '%s' is not a mode (", t);
                    for (int k = 0; k < NMODES; k++)
                        fprintf(stderr, "%s%s", k ? ", " : "", hy_mode_name((hy_mode)k));
                    fprintf(stderr, ")\n");
                    return 2;
                }
                x.on[m] = true;
            }
        } else if (!strcmp(a, "--docs"))
            x.ndocs = atoi(v);
        else if (!strcmp(a, "--reps"))
            x.reps = atoi(v);
        else if (!strcmp(a, "--min-tokens"))
            x.min_tok = atoi(v), tok_given = true;
        else if (!strcmp(a, "--max-tokens"))
            x.max_tok = atoi(v), tok_given = true;
        else if (!strcmp(a, "--out"))
            x.out = v;
        else if (!strcmp(a, "--daemon"))
            setenv("HYPIC_CACHED", v, 1);
        else
            goto usage;
    }
    if (x.quick) {
        if (!ks_given) {
            const int q[] = {2, 4, 8};
            memcpy(x.ks, q, sizeof q);
            x.nk = 3;
        }
        if (!tok_given) x.min_tok = 128, x.max_tok = 256;
        x.reps = 1;
    }
    int kmax = 0;
    for (int i = 0; i < x.nk; i++) kmax = x.ks[i] > kmax ? x.ks[i] : kmax;
    if (!x.ndocs) x.ndocs = kmax;
    if (x.ndocs < kmax || x.ndocs > 1024 || x.reps < 1 || x.reps > 100 || x.min_tok < 16 ||
        x.max_tok < x.min_tok || x.max_tok > 8192) {
        fprintf(stderr, "hypic-bench scale: need --docs in [max k, 1024], --reps in 1..100, "
                        "16 <= --min-tokens <= --max-tokens <= 8192\n");
        return 2;
    }
    int rc = 1;
    char tmp[160], model_dir[192], dir[200];
    if (hy_bench_mkdtemp("scale", tmp, sizeof tmp)) return 1;
    snprintf(model_dir, sizeof model_dir, "%s/small", tmp);
    snprintf(dir, sizeof dir, "%s/daemon", tmp);
    hy_daemon d;
    bool started = false;
    hyc *c = NULL;
    hy_err e = {0};
    uint32_t *pool = NULL;
    int *pick = NULL;
    x.docs = calloc((size_t)x.ndocs, sizeof *x.docs);
    pool = malloc((size_t)x.ndocs * (size_t)x.max_tok * sizeof *pool);
    pick = malloc((size_t)x.ndocs * sizeof *pick);
    if (!x.docs || !pool || !pick) {
        fprintf(stderr, "hypic-bench scale: out of memory\n");
        goto out;
    }
    for (int i = 0; i < x.ndocs; i++) x.docs[i].ids = pool + (size_t)i * (size_t)x.max_tok;
    for (int ki = 0; ki < x.nk; ki++)
        for (int m = 0; m < NMODES; m++) {
            cell *cl = &x.cells[ki][m];
            double **f[] = {&cl->ttft_ms,  &cl->peak_mb,    &cl->grow_mb, &cl->held_mb,
                            &cl->computed, &cl->fetched_mb, &cl->limit_ms};
            for (size_t j = 0; j < sizeof f / sizeof f[0]; j++)
                if (!(*f[j] = calloc((size_t)x.reps, sizeof(double)))) {
                    fprintf(stderr, "hypic-bench scale: out of memory\n");
                    goto out;
                }
        }
    printf("generating the 'small' preset in %s ...\n", model_dir);
    fflush(stdout);
    if (hy_model_init("small", 1, model_dir, "F32", &e) || hy_config_load(model_dir, &x.cfg, &e)) {
        fprintf(stderr, "hypic-bench scale: %s\n", e.msg);
        goto out;
    }
    x.sgemm = hy_bench_sgemm_flops(1024, 1024, 1024, 5);
    x.read_bw = hy_bench_stream_read_bytes_s(5);
    /* every entry in RAM: two per document, at most ~4 MiB each at 1024
     * tokens; the context's tokens within limits.max_tokens' default */
    const size_t host_mb = 256 + (size_t)x.ndocs * 2 * 4 * (size_t)x.max_tok / 1024;
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "listen: 127.0.0.1:0\n"
             "http_listen: \"\"\n"
             "models:\n"
             "  - {name: small, path: \"%s\"}\n"
             "tiers:\n"
             "  host: {bytes: %zuM}\n"
             "limits: {max_segments: 1024}\n"
             "log:\n"
             "  requests: false\n",
             model_dir, host_mb);
    if (mkdir(dir, 0700) != 0 || hy_daemon_start(&d, dir, yaml) != 0) {
        fprintf(stderr, "hypic-bench scale: hypic-cached did not start (%s)\n",
                hy_daemon_bin() ? hy_daemon_bin() : "no binary known");
        goto out;
    }
    started = true;
    hyc_options o = {.target = d.grpc, .deadline_ms = 3600 * 1000};
    hyc_status st;
    if (hyc_open(&o, &c, &st)) {
        fprintf(stderr, "hypic-bench scale: %s\n", st.msg);
        goto out;
    }
    docs_make(&x, 31);
    size_t total_tok = 0;
    for (int i = 0; i < x.ndocs; i++) total_tok += x.docs[i].n;
    printf("hypic-cached (pid %d) on %s: small, a host tier of %zu MiB; on these cores sgemm "
           "%.1f GFLOP/s, memory read %.1f GB/s\nwarming %d documents of %d..%d tokens (%zu in "
           "all) at seam %d and 0 ...\n",
           (int)d.pid, d.grpc, host_mb, x.sgemm / 1e9, x.read_bw / 1e9, x.ndocs, x.min_tok,
           x.max_tok, total_tok, SEAM);
    fflush(stdout);
    if ((x.on[HY_MODE_PIC] || x.on[HY_MODE_NAIVE]) && warm_all(&x, c, SEAM, 0)) goto out;
    if (x.on[HY_MODE_NOSEAM] && warm_all(&x, c, 0, 1)) goto out;
    const long rss_warm = hy_bench_proc_status_kb(d.pid, "VmRSS");
    printf("the daemon's resident set after warming: %.1f MiB\n\n", (double)rss_warm / 1024);
    hy_rng r;
    hy_rng_seed(&r, 77);
    int nmodes = 0, order[NMODES];
    for (int m = 0; m < NMODES; m++)
        if (x.on[m]) order[nmodes++] = m;
    int turn = 0;
    for (int rep = 0; rep < x.reps; rep++)
        for (int ki = 0; ki < x.nk; ki++) {
            const int k = x.ks[ki];
            /* k distinct documents in a random order */
            for (int i = 0; i < x.ndocs; i++) pick[i] = i;
            for (int i = 0; i < k; i++) {
                const int j = i + (int)(hy_rng_next(&r) % (uint64_t)(x.ndocs - i));
                const int t = pick[i];
                pick[i] = pick[j], pick[j] = t;
            }
            size_t ntok = QUERY;
            for (int i = 0; i < k; i++) ntok += x.docs[pick[i]].n;
            printf("repetition %d/%d, k %d: %zu tokens\n", rep + 1, x.reps, k, ntok);
            for (int j = 0; j < nmodes; j++) {
                const int m = order[(j + turn) % nmodes];
                /* a configuration that took over a minute once is not repeated */
                if (rep > 0 && x.cells[ki][m].ttft_ms[0] > SLOW_MS) continue;
                if (run_request(&x, c, d.pid, ki, m, pick)) goto out;
            }
            turn++;
        }
    /* medians, fits */
    static double med[MAXK][NMODES], peak[MAXK][NMODES], grow[MAXK][NMODES], held[MAXK][NMODES],
        comp[MAXK][NMODES], fetch[MAXK][NMODES], lim[MAXK][NMODES], runs[MAXK][NMODES];
    for (int ki = 0; ki < x.nk; ki++)
        for (int m = 0; m < NMODES; m++) {
            if (!x.on[m]) continue;
            const cell *cl = &x.cells[ki][m];
            med[ki][m] = median_of(cl->ttft_ms, cl->n);
            peak[ki][m] = median_of(cl->peak_mb, cl->n);
            grow[ki][m] = 0; /* the most the daemon grew for it: the first time, as a rule */
            held[ki][m] = 0; /* likewise, what it left held after it */
            for (int i = 0; i < cl->n; i++) {
                grow[ki][m] = fmax(grow[ki][m], cl->grow_mb[i]);
                held[ki][m] = fmax(held[ki][m], cl->held_mb[i]);
            }
            runs[ki][m] = cl->n;
            comp[ki][m] = median_of(cl->computed, cl->n);
            fetch[ki][m] = median_of(cl->fetched_mb, cl->n);
            lim[ki][m] = median_of(cl->limit_ms, cl->n);
        }
    printf("\nmedians over the runs (N; a configuration over %.0f s once is not repeated); "
           "limit: the mode's unavoidable forward FLOPs at %.1f GFLOP/s (sgemm on these cores) "
           "or its entries' bytes read once at %.1f GB/s, the longer; peak RSS: the daemon's "
           "during the request, +: over its resident set before it, held: after it over before it "
           "(the most of the runs)\n",
           SLOW_MS / 1e3, x.sgemm / 1e9, x.read_bw / 1e9);
    printf("   k  mode    N     TTFT ms    limit ms  of limit  peak RSS MiB   +MiB   held  "
           "computed  fetched MiB\n");
    for (int ki = 0; ki < x.nk; ki++)
        for (int m = 0; m < NMODES; m++) {
            if (!x.on[m]) continue;
            printf(" %3d  %-6s %2.0f %10.1f  %10.1f  %7.2f  %12.1f %6.1f %6.1f  %8.0f  %11.1f\n",
                   x.ks[ki], hy_mode_name((hy_mode)m), runs[ki][m], med[ki][m], lim[ki][m],
                   med[ki][m] > 0 ? lim[ki][m] / med[ki][m] : 0.0, peak[ki][m], grow[ki][m],
                   held[ki][m], comp[ki][m], fetch[ki][m]);
        }
    double slope_all[NMODES], slope_top[NMODES], quad_share[NMODES], coef[NMODES][2];
    printf("\ngrowth of TTFT in k: log-log slope (all k; the largest three); fit b k + c k^2 "
           "(b, c >= 0, least relative squares) and c k^2's share at k = %d\n",
           kmax);
    for (int m = 0; m < NMODES; m++) {
        slope_all[m] = slope_top[m] = quad_share[m] = NAN;
        coef[m][0] = coef[m][1] = NAN;
        if (!x.on[m]) continue;
        double y[MAXK];
        for (int i = 0; i < x.nk; i++) y[i] = med[i][m];
        slope_all[m] = loglog_slope(x.ks, y, 0, x.nk);
        slope_top[m] = loglog_slope(x.ks, y, x.nk > 3 ? x.nk - 3 : 0, x.nk);
        if (x.nk >= 2 && !fit_linear_quadratic(x.ks, y, x.nk, coef[m])) {
            const double kk = (double)kmax, at = coef[m][0] * kk + coef[m][1] * kk * kk;
            quad_share[m] = at > 0 ? coef[m][1] * kk * kk / at : NAN;
        }
        printf("  %-6s slope %.2f (%.2f)   b %.3f ms/segment  c %.5f ms/segment^2  quadratic "
               "share %.0f%%\n",
               hy_mode_name((hy_mode)m), slope_all[m], slope_top[m], coef[m][0], coef[m][1],
               100 * quad_share[m]);
    }
    if (x.on[HY_MODE_FULL] && x.on[HY_MODE_PIC] && coef[HY_MODE_FULL][1] > 0)
        printf("  pic's quadratic term over full's: %.4f (its seams attend over the context: "
               "W / L of full's at most)\n",
               coef[HY_MODE_PIC][1] / coef[HY_MODE_FULL][1]);
    int kmi = 0;
    for (int i = 0; i < x.nk; i++)
        if (x.ks[i] == kmax) kmi = i;
    if (x.on[HY_MODE_FULL] && x.on[HY_MODE_PIC])
        printf("\nat k = %d: pic's TTFT %.1f ms against full's %.1f ms: %.1fx faster\n", kmax,
               med[kmi][HY_MODE_PIC], med[kmi][HY_MODE_FULL],
               med[kmi][HY_MODE_FULL] / med[kmi][HY_MODE_PIC]);
    plot(&x, med);

    /* the JSON line */
    printf("{\"bench\":\"scale\",\"model\":\"small\",\"reps\":%d,\"docs\":%d,\"min_tokens\":%d,"
           "\"max_tokens\":%d,\"sgemm_gflops\":%.2f,\"read_gbs\":%.2f,\"rss_after_warm_mb\":%.1f,"
           "\"ks\":[",
           x.reps, x.ndocs, x.min_tok, x.max_tok, x.sgemm / 1e9, x.read_bw / 1e9,
           (double)rss_warm / 1024);
    for (int i = 0; i < x.nk; i++) printf("%s%d", i ? "," : "", x.ks[i]);
    printf("]");
    static const char *const fields[] = {
        "runs",          "ttft_ms",     "limit_ms",        "peak_rss_mb",
        "rss_growth_mb", "rss_held_mb", "tokens_computed", "fetched_mb"};
    double(*tabs[])[NMODES] = {runs, med, lim, peak, grow, held, comp, fetch};
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        printf(",\"%s\":{", fields[f]);
        bool first = true;
        for (int m = 0; m < NMODES; m++) {
            if (!x.on[m]) continue;
            printf("%s\"%s\":[", first ? "" : ",", hy_mode_name((hy_mode)m));
            for (int i = 0; i < x.nk; i++) {
                const double v = tabs[f][i][m];
                printf(isfinite(v) ? "%s%.3f" : "%snull", i ? "," : "", v);
            }
            printf("]");
            first = false;
        }
        printf("}");
    }
    static const char *const growth[] = {"slope", "slope_top3", "quadratic_share"};
    const double *gv[] = {slope_all, slope_top, quad_share};
    for (size_t g = 0; g < 3; g++) {
        printf(",\"%s\":{", growth[g]);
        bool first = true;
        for (int m = 0; m < NMODES; m++) {
            if (!x.on[m]) continue;
            printf(isfinite(gv[g][m]) ? "%s\"%s\":%.3f" : "%s\"%s\":null", first ? "" : ",",
                   hy_mode_name((hy_mode)m), gv[g][m]);
            first = false;
        }
        printf("}");
    }
    if (x.on[HY_MODE_FULL] && x.on[HY_MODE_PIC])
        printf(",\"pic_speedup_at_kmax\":%.3f", med[kmi][HY_MODE_FULL] / med[kmi][HY_MODE_PIC]);
    printf(",\"quick\":%s}\n", x.quick ? "true" : "false");
    rc = 0;
out:
    hyc_close(c);
    if (started && !hy_daemon_stop(&d)) {
        fprintf(stderr, "hypic-bench scale: hypic-cached did not stop cleanly\n");
        rc = 1;
    }
    hy_bench_rmtree(tmp);
    for (int ki = 0; ki < MAXK; ki++)
        for (int m = 0; m < NMODES; m++) {
            cell *cl = &x.cells[ki][m];
            free(cl->ttft_ms), free(cl->peak_mb), free(cl->grow_mb), free(cl->held_mb),
                free(cl->computed), free(cl->fetched_mb), free(cl->limit_ms);
        }
    free(x.docs);
    free(pool);
    free(pick);
    return rc;
usage:
    fprintf(stderr, "usage: hypic-bench scale [--ks 8,16,32,64,128] [--docs D] [--reps N] "
                    "[--modes full,prefix,pic,noseam,naive] [--min-tokens A] [--max-tokens B] "
                    "[--out DIR] [--quick] [--daemon PATH]\n");
    return 2;
}
