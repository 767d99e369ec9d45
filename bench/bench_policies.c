/*
 * hypic-bench policies: replays a trace of segment lookups through every
 * eviction × admission pair of tiers/policy_internal.h at several capacities (fractions
 * of the trace's unique bytes) and reports, per pair and capacity:
 *   - hit rate: hits / lookups;
 *   - byte hit rate: bytes of hits / bytes of lookups;
 *   - FLOPs saved: recompute cost of hits / recompute cost of all lookups —
 *     the prefill work the tier spares, the number a cache for hybrid models
 *     is for.
 *
 * The simulator is one tier: an object is a hit when resident; on a miss it is
 * offered to the admitter (with the victim it would displace when the tier is
 * full) and, if admitted, victims are evicted until it fits. Every lookup is
 * recorded with the admitter first. The segments of the request being served
 * (consecutive lines with the same timestamp) are pinned, as the store's
 * leases pin them.
 *
 * Traces: --trace FILE (the format is in docs/policies.md: one lookup a line,
 * `<timestamp> <segment-key> <tokens> <bytes> [<flops>]`), or the built-in
 * zipf-rag generator (the default): each request is a system prompt (one of
 * 4, Zipf-popular) plus k distinct documents drawn from a Zipf(0.9)
 * popularity over a pool, with document lengths log-normal around 512 tokens
 * clamped to 64–8192, and entry bytes = 6 MiB of linear state + 4 KiB per
 * token, so bytes vary little while recompute cost grows with tokens.
 */
#include "bench.h"
#include "hy_common.h"
#include "policy_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KIB 1024.0
#define MIB (1024.0 * 1024.0)
#define GIB (1024.0 * MIB)

static const double k_fracs[] = {0.05, 0.10, 0.25, 0.50};
enum { NFRAC = sizeof k_fracs / sizeof *k_fracs };

typedef struct trace {
    char name[256];
    hy_bench_lookup *l;
    size_t n, cap;
    uint32_t nobj;   /* object indices are below this */
    uint32_t unique; /* objects looked up */
    size_t requests;
    double unique_bytes; /* Σ over keys of the bytes at their first lookup */
} trace;

static int trace_push(trace *t, hy_bench_lookup l)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        hy_bench_lookup *p = realloc(t->l, cap * sizeof *p);
        if (!p) return HY_ENOMEM;
        t->l = p, t->cap = cap;
    }
    t->l[t->n++] = l;
    t->requests += l.starts_request;
    return 0;
}

/* Counts the objects looked up and Σ bytes of each one's first lookup. */
static int trace_unique(trace *t)
{
    bool *seen = calloc(t->nobj ? t->nobj : 1, 1);
    if (!seen) return HY_ENOMEM;
    t->unique_bytes = 0, t->unique = 0;
    for (size_t i = 0; i < t->n; i++)
        if (!seen[t->l[i].obj]) {
            seen[t->l[i].obj] = true, t->unique++;
            t->unique_bytes += (double)t->l[i].bytes;
        }
    free(seen);
    return 0;
}

/* --- the zipf-rag generator ------------------------------------------------- */

typedef struct zipf_opts {
    long requests, docs, k, seed;
} zipf_opts;

/* Cumulative Zipf(alpha) weights over n ranks, normalised to end at 1. */
static double *zipf_cdf(long n, double alpha)
{
    double *c = malloc((size_t)n * sizeof *c), s = 0;
    for (long i = 0; i < n; i++) c[i] = s += pow((double)(i + 1), -alpha);
    for (long i = 0; i < n; i++) c[i] /= s;
    return c;
}

static long zipf_draw(const double *cdf, long n, hy_rng *r)
{
    double u = hy_rng_uniform(r);
    long lo = 0, hi = n - 1;
    while (lo < hi) {
        long mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static uint64_t entry_bytes(uint32_t tokens)
{
    return (uint64_t)(6 * MIB) + (uint64_t)tokens * 4096;
}

static int trace_zipf(trace *t, const zipf_opts *o, double params)
{
    enum { NSYS = 4 };
    hy_rng r;
    hy_rng_seed(&r, (uint64_t)o->seed);
    const long nobj = NSYS + o->docs;
    uint32_t *tokens = malloc((size_t)nobj * sizeof *tokens);
    long *rank_to_doc = malloc((size_t)o->docs * sizeof *rank_to_doc);
    double *dcdf = zipf_cdf(o->docs, 0.9), *scdf = zipf_cdf(NSYS, 0.9);
    long *pick = malloc((size_t)o->k * sizeof *pick);
    int rc = tokens && rank_to_doc && dcdf && scdf && pick ? 0 : HY_ENOMEM;
    for (long s = 0; !rc && s < NSYS; s++)
        tokens[s] = (uint32_t)(256 + hy_rng_next(&r) % 1793); /* 256..2048 */
    for (long d = 0; !rc && d < o->docs; d++) {
        double x = exp(log(512.0) + hy_rng_normal(&r));
        tokens[NSYS + d] = (uint32_t)fmin(8192, fmax(64, round(x)));
        rank_to_doc[d] = d;
    }
    for (long d = o->docs - 1; !rc && d > 0; d--) { /* popularity independent of length */
        long j = (long)(hy_rng_next(&r) % (uint64_t)(d + 1)), tmp = rank_to_doc[d];
        rank_to_doc[d] = rank_to_doc[j], rank_to_doc[j] = tmp;
    }
    for (long q = 0; !rc && q < o->requests; q++) {
        long sys = zipf_draw(scdf, NSYS, &r);
        for (long i = 0; i < o->k; i++) {
            bool dup;
            do {
                pick[i] = NSYS + rank_to_doc[zipf_draw(dcdf, o->docs, &r)];
                dup = false;
                for (long j = 0; j < i; j++) dup |= pick[j] == pick[i];
            } while (dup);
        }
        for (long i = -1; !rc && i < o->k; i++) {
            uint32_t obj = (uint32_t)(i < 0 ? sys : pick[i]);
            hy_bench_lookup l = {.obj = obj,
                                 .tokens = tokens[obj],
                                 .bytes = entry_bytes(tokens[obj]),
                                 .cost = 2.0 * tokens[obj] * params,
                                 .starts_request = i < 0};
            rc = trace_push(t, l);
        }
    }
    t->nobj = (uint32_t)nobj;
    snprintf(t->name, sizeof t->name, "zipf-rag");
    free(tokens), free(rank_to_doc), free(dcdf), free(scdf), free(pick);
    return rc ? rc : trace_unique(t);
}

/* Writes a trace in the file format (keys: "sys<i>" and "doc<i>"). */
static int trace_dump(const trace *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "hypic-bench policies: %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f,
            "# hypic-bench policies trace: <timestamp> <segment-key> <tokens> <bytes> "
            "[<flops>]\n# %s, %zu requests, %zu lookups\n",
            t->name, t->requests, t->n);
    size_t req = 0;
    for (size_t i = 0; i < t->n; i++) {
        const hy_bench_lookup *l = &t->l[i];
        req += l->starts_request;
        if (l->obj < 4)
            fprintf(f, "%zu sys%u %u %llu %.10g\n", req, l->obj, l->tokens,
                    (unsigned long long)l->bytes, l->cost);
        else
            fprintf(f, "%zu doc%u %u %llu %.10g\n", req, l->obj - 4, l->tokens,
                    (unsigned long long)l->bytes, l->cost);
    }
    if (fclose(f)) {
        fprintf(stderr, "hypic-bench policies: %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* --- trace files ------------------------------------------------------------ */

typedef struct keyref {
    uint64_t hash;
    size_t line; /* index into the lookups */
} keyref;

static int keyref_cmp(const void *a, const void *b)
{
    const keyref *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

static int bad_field(hy_err *err, const char *path, size_t line, int field, const char *what,
                     const char *tok, size_t len, const char *need)
{
    return hy_err_set(err, HY_EFORMAT, "%s:%zu: field %d (%s): '%.*s' %s", path, line, field, what,
                      (int)HY_MIN(len, 64), tok, need);
}

/* Parses lines `<timestamp> <segment-key> <tokens> <bytes> [<flops>]`; '#'
 * starts a comment (at the start of a field); blank lines are skipped. Keys
 * are interned by their XXH3 hash (a 64-bit collision between distinct keys
 * is treated as one key). */
static int trace_load(trace *t, const char *path, double params, hy_err *err)
{
    char *buf;
    size_t len;
    int rc = hy_read_file(path, (size_t)1 << 34, &buf, &len, err);
    if (rc) return rc;
    keyref *keys = NULL;
    size_t nkeys = 0, capkeys = 0, lineno = 0;
    double prev_ts = NAN;
    for (char *p = buf, *nl; !rc && p < buf + len; p = nl + 1) {
        nl = memchr(p, '\n', (size_t)(buf + len - p));
        if (!nl) nl = buf + len;
        *nl = '\0';
        lineno++;
        char *tok[6];
        size_t tl[6];
        int nf = 0;
        for (char *q = p; *q;) {
            while (*q && isspace((unsigned char)*q)) q++;
            if (!*q || *q == '#') break;
            char *s = q;
            while (*q && !isspace((unsigned char)*q)) q++;
            if (nf == 5) {
                rc = hy_err_set(err, HY_EFORMAT, "%s:%zu: more than 5 fields (extra '%.*s')", path,
                                lineno, (int)HY_MIN(q - s, 64), s);
                break;
            }
            tok[nf] = s, tl[nf] = (size_t)(q - s), nf++;
            if (*q) *q++ = '\0';
        }
        if (rc || nf == 0) continue;
        if (nf < 4) {
            rc = hy_err_set(err, HY_EFORMAT,
                            "%s:%zu: %d field%s; need <timestamp> <segment-key> <tokens> <bytes> "
                            "[<flops>]",
                            path, lineno, nf, nf == 1 ? "" : "s");
            break;
        }
        char *end;
        errno = 0;
        double ts = strtod(tok[0], &end);
        if (*end || errno || !isfinite(ts)) {
            rc = bad_field(err, path, lineno, 1, "timestamp", tok[0], tl[0], "is not a number");
            break;
        }
        errno = 0;
        unsigned long long tk = isdigit((unsigned char)tok[2][0]) ? strtoull(tok[2], &end, 10) : 0;
        if (!isdigit((unsigned char)tok[2][0]) || *end || errno || tk == 0 || tk > UINT32_MAX) {
            rc = bad_field(err, path, lineno, 3, "tokens", tok[2], tl[2],
                           "is not a token count (1..4294967295)");
            break;
        }
        errno = 0;
        unsigned long long by = isdigit((unsigned char)tok[3][0]) ? strtoull(tok[3], &end, 10) : 0;
        if (!isdigit((unsigned char)tok[3][0]) || *end || errno || by == 0) {
            rc = bad_field(err, path, lineno, 4, "bytes", tok[3], tl[3],
                           "is not a positive byte count");
            break;
        }
        double fl = 2.0 * (double)tk * params;
        if (nf == 5) {
            errno = 0;
            fl = strtod(tok[4], &end);
            if (*end || errno || !isfinite(fl) || fl < 0) {
                rc = bad_field(err, path, lineno, 5, "flops", tok[4], tl[4],
                               "is not a non-negative number");
                break;
            }
        }
        if (nkeys == capkeys) {
            capkeys = capkeys ? 2 * capkeys : 4096;
            keyref *k = realloc(keys, capkeys * sizeof *k);
            if (!k) {
                rc = hy_err_set(err, HY_ENOMEM, "%s: out of memory at line %zu", path, lineno);
                break;
            }
            keys = k;
        }
        keys[nkeys++] = (keyref){hy_xxh3(tok[1], tl[1]), t->n};
        hy_bench_lookup l = {
            .tokens = (uint32_t)tk, .bytes = by, .cost = fl, .starts_request = !(ts == prev_ts)};
        prev_ts = ts;
        if (trace_push(t, l))
            rc = hy_err_set(err, HY_ENOMEM, "%s: out of memory at line %zu", path, lineno);
    }
    if (!rc && t->n == 0) rc = hy_err_set(err, HY_EFORMAT, "%s: no lookups in the trace", path);
    if (!rc) { /* dense object indices, by key hash */
        qsort(keys, nkeys, sizeof *keys, keyref_cmp);
        uint32_t obj = 0;
        for (size_t i = 0; i < nkeys; i++) {
            if (i && keys[i].hash != keys[i - 1].hash) obj++;
            t->l[keys[i].line].obj = obj;
        }
        t->nobj = obj + 1;
        snprintf(t->name, sizeof t->name, "%s", path);
        if (trace_unique(t)) rc = hy_err_set(err, HY_ENOMEM, "%s: out of memory", path);
    }
    free(keys);
    hy_free(buf);
    return rc;
}

/* --- the simulator ------------------------------------------------------------ */

typedef struct sim_pins {
    const uint32_t *stamp; /* per object: the request it was last used by */
    uint32_t request;
    uint32_t window; /* requests in flight: the last `window` requests' objects are pinned */
} sim_pins;

static bool sim_pinned(void *ctx, uint64_t id)
{
    const sim_pins *p = ctx;
    return p->request - p->stamp[id - 1] < p->window;
}

/* Evictor ids are object indices + 1 (0 means "no victim" to the admitter). */
int hy_bench_policy_replay(const hy_bench_lookup *lk, size_t n, uint32_t nobj,
                           const hy_policy_config *cfg, uint32_t in_flight, hy_bench_sim *out)
{
    hy_err e = {0};
    hy_evictor *ev = NULL;
    hy_admitter *ad = NULL;
    bool *resident = calloc(nobj ? nobj : 1, sizeof *resident);
    uint64_t *res_bytes = calloc(nobj ? nobj : 1, sizeof *res_bytes);
    uint32_t *stamp = calloc(nobj ? nobj : 1, sizeof *stamp);
    if (!resident || !res_bytes || !stamp || hy_evictor_new(cfg, &ev, &e) ||
        hy_admitter_new(cfg, &ad, &e)) {
        fprintf(stderr, "hypic-bench policies: %s\n", e.msg[0] ? e.msg : "out of memory");
        free(resident), free(res_bytes), free(stamp);
        hy_evictor_free(ev);
        return 1;
    }
    sim_pins pins = {stamp, 0, in_flight ? in_flight : 1};
    uint64_t used = 0, hits = 0;
    double hit_bytes = 0, all_bytes = 0, hit_cost = 0, all_cost = 0;
    for (size_t i = 0; i < n; i++) {
        const hy_bench_lookup *l = &lk[i];
        const uint64_t id = (uint64_t)l->obj + 1;
        pins.request += l->starts_request;
        stamp[l->obj] = pins.request;
        hy_admitter_record(ad, id);
        all_bytes += (double)l->bytes, all_cost += l->cost;
        if (resident[l->obj]) {
            hits++, hit_bytes += (double)l->bytes, hit_cost += l->cost;
            hy_evictor_access(ev, id, i);
            continue;
        }
        if (l->bytes > cfg->capacity) continue;
        uint64_t victim = 0;
        if (used + l->bytes > cfg->capacity &&
            hy_evictor_victim(ev, &victim, sim_pinned, &pins) != 0)
            continue; /* everything resident is pinned */
        if (!hy_admitter_admit(ad, id, l->tokens, victim)) continue;
        while (used + l->bytes > cfg->capacity &&
               hy_evictor_victim(ev, &victim, sim_pinned, &pins) == 0) {
            hy_evictor_remove(ev, victim);
            resident[victim - 1] = false;
            used -= res_bytes[victim - 1];
        }
        if (used + l->bytes > cfg->capacity) continue;
        hy_evictor_insert(ev, id, l->bytes, l->cost, l->tokens, i);
        resident[l->obj] = true, res_bytes[l->obj] = l->bytes, used += l->bytes;
    }
    out->hit_rate = (double)hits / (double)n;
    out->byte_hit_rate = hit_bytes / all_bytes;
    out->flops_saved = all_cost > 0 ? hit_cost / all_cost : 0;
    free(resident), free(res_bytes), free(stamp);
    hy_evictor_free(ev);
    hy_admitter_free(ad);
    return 0;
}

/* Replays t through one tier of `capacity` bytes. */
static int simulate(const trace *t, const hy_policy_config *cfg, hy_bench_sim *out)
{
    return hy_bench_policy_replay(t->l, t->n, t->nobj, cfg, 1, out);
}

/* --- reporting ------------------------------------------------------------------ */

static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static const char *admit_label(int a, uint32_t min_tokens, char *buf, size_t n)
{
    if (a == HY_ADMIT_MIN_TOKENS)
        snprintf(buf, n, "min-tokens %u", min_tokens);
    else
        snprintf(buf, n, "%s", hy_admit_name((hy_admit_kind)a));
    return buf;
}

enum { NPAIR = HY_EVICT_COUNT * HY_ADMIT_COUNT };

static void print_table(const char *title, const hy_bench_sim (*r)[NFRAC], int metric,
                        uint32_t min_tokens)
{
    printf("\n%-26s", title);
    for (int f = 0; f < NFRAC; f++) printf(" %6.0f%%", k_fracs[f] * 100);
    printf("\n");
    for (int p = 0; p < NPAIR; p++) {
        char a[32];
        printf("  %-7s %-16s", hy_evict_name((hy_evict_kind)(p / HY_ADMIT_COUNT)),
               admit_label(p % HY_ADMIT_COUNT, min_tokens, a, sizeof a));
        for (int f = 0; f < NFRAC; f++) {
            const hy_bench_sim *x = &r[p][f];
            double v = metric == 0 ? x->flops_saved : metric == 1 ? x->hit_rate : x->byte_hit_rate;
            printf(" %7.1f", 100 * v);
        }
        printf("\n");
    }
}

static int usage(void)
{
    fprintf(stderr, "usage: hypic-bench policies [--trace FILE | --zipf [--requests N] "
                    "[--docs N] [--k N] [--seed N]]\n"
                    "                            [--params P] [--min-tokens N] [--dump FILE]\n");
    return 2;
}

int hy_bench_policies(int argc, char **argv)
{
    const char *path = NULL, *dump = NULL;
    zipf_opts z = {.requests = 200000, .docs = 50000, .k = 4, .seed = 1};
    double params = 33e6;
    long min_tokens = 128;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--zipf") == 0) {
            path = NULL;
            continue;
        }
        if (!v) return usage();
        i++;
        if (strcmp(a, "--trace") == 0)
            path = v;
        else if (strcmp(a, "--dump") == 0)
            dump = v;
        else if (strcmp(a, "--params") == 0)
            params = strtod(v, &end);
        else if (strcmp(a, "--requests") == 0)
            z.requests = strtol(v, &end, 10);
        else if (strcmp(a, "--docs") == 0)
            z.docs = strtol(v, &end, 10);
        else if (strcmp(a, "--k") == 0)
            z.k = strtol(v, &end, 10);
        else if (strcmp(a, "--seed") == 0)
            z.seed = strtol(v, &end, 10);
        else if (strcmp(a, "--min-tokens") == 0)
            min_tokens = strtol(v, &end, 10);
        else
            return usage();
        if (end && *end) {
            fprintf(stderr, "hypic-bench policies: %s '%s': not a number\n", a, v);
            return 2;
        }
    }
    if (z.requests < 1 || z.requests > 10000000 || z.docs < 1 || z.docs > 10000000 || z.k < 1 ||
        z.k > z.docs || z.k > 64 || !(params > 0) || min_tokens < 0 || min_tokens > UINT32_MAX) {
        fprintf(stderr, "hypic-bench policies: an option is out of range (requests and docs "
                        "1..1e7, k 1..min(64, docs), params > 0, min-tokens >= 0)\n");
        return 2;
    }
    trace t = {0};
    hy_err e = {0};
    const double t0 = hy_now_s();
    int rc = path ? trace_load(&t, path, params, &e) : trace_zipf(&t, &z, params);
    if (rc) {
        fprintf(stderr, "hypic-bench policies: %s\n", e.msg[0] ? e.msg : hy_strerror(rc));
        free(t.l);
        return 1;
    }
    if (dump && trace_dump(&t, dump)) {
        free(t.l);
        return 1;
    }
    printf("trace %s: %zu requests, %zu lookups, %u unique segments, %.1f GiB unique; "
           "params %.3g (2 x params FLOPs per token when a line gives none)\n",
           t.name, t.requests, t.n, t.unique, t.unique_bytes / GIB, params);
    if (!path)
        printf("  zipf-rag: a system prompt (1 of 4) + %ld of %ld documents, Zipf(0.9); "
               "bytes = 6 MiB + 4 KiB/token; seed %ld\n",
               z.k, z.docs, z.seed);
    printf("capacities:");
    for (int f = 0; f < NFRAC; f++)
        printf(" %.0f%% = %.2f GiB%s", k_fracs[f] * 100, k_fracs[f] * t.unique_bytes / GIB,
               f + 1 < NFRAC ? "," : "\n");
    static hy_bench_sim r[NPAIR][NFRAC];
    for (int p = 0; p < NPAIR && !rc; p++)
        for (int f = 0; f < NFRAC && !rc; f++) {
            hy_policy_config cfg = {.evict = (hy_evict_kind)(p / HY_ADMIT_COUNT),
                                    .admit = (hy_admit_kind)(p % HY_ADMIT_COUNT),
                                    .min_tokens = (uint32_t)min_tokens,
                                    .capacity = (uint64_t)(k_fracs[f] * t.unique_bytes)};
            rc = simulate(&t, &cfg, &r[p][f]);
        }
    free(t.l);
    if (rc) return 1;
    const double secs = hy_now_s() - t0;
    print_table("FLOPs saved (%)", r, 0, (uint32_t)min_tokens);
    print_table("hit rate (%)", r, 1, (uint32_t)min_tokens);
    print_table("byte hit rate (%)", r, 2, (uint32_t)min_tokens);
    int best[NFRAC] = {0};
    printf("\nbest FLOPs saved:");
    for (int f = 0; f < NFRAC; f++) {
        for (int p = 1; p < NPAIR; p++)
            if (r[p][f].flops_saved > r[best[f]][f].flops_saved) best[f] = p;
        char a[32];
        printf(" %.0f%%: %s/%s %.1f%%%s", k_fracs[f] * 100,
               hy_evict_name((hy_evict_kind)(best[f] / HY_ADMIT_COUNT)),
               admit_label(best[f] % HY_ADMIT_COUNT, (uint32_t)min_tokens, a, sizeof a),
               100 * r[best[f]][f].flops_saved, f + 1 < NFRAC ? ";" : "\n");
    }
    printf("(%d simulations in %.1f s)\n", NPAIR * NFRAC, secs);

    printf("{\"bench\":\"policies\",\"trace\":");
    json_string(t.name);
    printf(",\"requests\":%zu,\"lookups\":%zu,\"unique_segments\":%u,\"unique_bytes\":%.0f,"
           "\"params\":%.4g,\"min_tokens\":%ld,\"seconds\":%.2f,\"results\":[",
           t.requests, t.n, t.unique, t.unique_bytes, params, min_tokens, secs);
    for (int p = 0; p < NPAIR; p++)
        for (int f = 0; f < NFRAC; f++)
            printf("%s{\"evict\":\"%s\",\"admit\":\"%s\",\"capacity_frac\":%.2f,\"hit_rate\":%.4f,"
                   "\"byte_hit_rate\":%.4f,\"flops_saved\":%.4f}",
                   p || f ? "," : "", hy_evict_name((hy_evict_kind)(p / HY_ADMIT_COUNT)),
                   hy_admit_name((hy_admit_kind)(p % HY_ADMIT_COUNT)), k_fracs[f], r[p][f].hit_rate,
                   r[p][f].byte_hit_rate, r[p][f].flops_saved);
    const int b10 = best[1];
    printf(
        "],\"best_flops_saved_at_10pct\":{\"evict\":\"%s\",\"admit\":\"%s\",\"flops_saved\":%.4f}}"
        "\n",
        hy_evict_name((hy_evict_kind)(b10 / HY_ADMIT_COUNT)),
        hy_admit_name((hy_admit_kind)(b10 % HY_ADMIT_COUNT)), r[b10][1].flops_saved);
    return 0;
}
