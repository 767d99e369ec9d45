/*
 * hypic-bench pic: RAG-shaped requests on the `small` preset — a system
 * segment, then 8 documents of ~512 tokens drawn from a pool of 32 (already
 * cached: entries built independently, for W = 8 and W = 0) in random order,
 * then a 32-token query. Every request runs in every mode on the same
 * executor, so the ratios are measured side by side:
 *   - TTFT per mode, mean and median (a parallel region stalled by another
 *     process inflates a mean; the median resists it). The pic-family modes get their entries out
 * of a store as the service does (cached/handlers.c, h_fetch_entry): per hit a host lease
 * (hy_store_acquire), every section's checksum verified and the entry used in place in the
 * leased bytes (hy_entry_view), the lease released once the request is done — all inside
 * the TTFT. The pool's serialised entries
 * sit in a store whose host tier holds them all. A second `pic` figure reads them from an NVMe tier
 * with the host tier cold: a second store whose host tier admits nothing (min-tokens above any
 * segment), so every lease reads NVMe (O_DIRECT, XXH3 per MiB verified) into a temporary host
 * block. A third runs on the decoded entries already in memory (no store: the figure before the
 * store was counted). Entry bytes per request are printed beside them;
 *   - the `prefix` baseline warmed as much as pic: before measuring, a
 *     checkpoint of [system] and of [system, d] for every document d of the
 *     pool, under a budget that holds them all plus one request's deeper
 *     checkpoints. Before each request every [system, d] is touched, so the
 *     LRU evicts the deeper checkpoints of earlier requests first, as a
 *     radix cache evicts leaves before the prefixes they extend; each
 *     request restores its [system, d1] (checked: counted and printed);
 *   - the inline build overhead: requests whose segments are all misses,
 *     built inline by `pic`, against `full` on the same tokens (full runs
 *     before and after, so drift cancels); over 20 requests, with the
 *     per-request spread;
 *   - entry bytes per body token;
 *   - each mode's divergence from `full` on the first generated token:
 *     KL(full ‖ mode) of the next-token distributions and top-1 agreement;
 *   - the composition time per hit: hy_entry_apply of the W = 0 entries of a
 *     request's segments onto a running state. With no seam to recompute it
 *     is all composition — S ← T·S + S_body and the conv tail per linear
 *     layer, K re-rotated and K, V appended per attention layer — the part of
 *     a `pic` hit that does not depend on W (a W = 8 hit adds an 8-token
 *     prefill). Reported over every hit of several requests as the median
 *     and the fastest tenth: on a loaded machine a parallel region whose
 *     thread is descheduled stalls the whole apply, which the median shows
 *     and the fastest tenth mostly does not.
 * The physical limits next to the figures: the tokens each mode sends
 * through the forward pass (pic recomputes 8-token seams and the query
 * only); for the fetch, the entry bytes over this machine's XXH3 rate
 * (host tier: a view hashes every byte once and copies none) — the NVMe tier's limit is the
 * device's raw O_DIRECT read rate, which `hypic-bench tiers` measures.
 */
#include "bench.h"
#include "land_internal.h"
#include "hy_common.h"
#include "hy_kernels.h"
#include "hy_tiers.h"
#include "model_internal.h" /* a state's position set by hand: the plain prefill's context */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { POOL = 32, DOCS = 8, QUERY = 32, SYSTEM = 256, NSEG = DOCS + 1, DOC_MAX = 575 };
enum { N_OVER = 20 }; /* all-miss requests for the inline build overhead */

static const char k_tenant[] = "bench";

static int32_t *random_tokens(hy_rng *r, int n, int vocab)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(3 + hy_rng_next(r) % (uint64_t)(vocab - 3));
    return t;
}

typedef struct segset {
    int32_t *tok[POOL + 1]; /* [0..POOL) documents, [POOL] the system segment */
    int len[POOL + 1];
    hy_entry *e8[POOL + 1], *e0[POOL + 1]; /* W = 8 and W = 0 entries */
    hy_key k8[POOL + 1], k0[POOL + 1];     /* their store keys */
} segset;

/* Serialises `ent` into the store under key k, as PutEntry does; *placed is
 * the tier it landed in, *bytes its serialised size. */
static int store_put(hy_store *s, const hy_key *k, const uint8_t fp[32], const hy_model_config *c,
                     const hy_entry *ent, hy_tier_id *placed, size_t *bytes, hy_err *e)
{
    void *buf;
    size_t len;
    int rc = hy_entry_serialize(ent, &buf, &len, e);
    if (rc) return rc;
    const int32_t *tok;
    hy_meta m = {0};
    m.key = *k;
    snprintf(m.tenant, sizeof m.tenant, "%s", k_tenant);
    memcpy(m.model, fp, 32);
    m.tokens = (uint32_t)hy_entry_tokens(ent, &tok);
    m.flops = hy_config_prefill_flops(c, 0, hy_entry_body_tokens(ent));
    m.bytes = len;
    hy_put *p;
    void *dst;
    rc = hy_store_reserve(s, &m, &p, &dst, e);
    if (!rc) {
        memcpy(dst, buf, len);
        rc = hy_store_commit(s, p, placed, e);
    }
    free(buf);
    *bytes = len;
    return rc;
}

/* The service's fetch of n hits (h_fetch_entry): lease, decode with every
 * checksum verified, release. *bytes adds the payload bytes; *off_tier
 * counts leases served by a tier other than `want`. */
static int store_fetch(hy_store *s, const hy_model *m, const hy_key *const *keys, int n,
                       hy_entry **out, hy_lease **leases, hy_tier_id want, uint64_t *bytes,
                       int *off_tier, hy_err *e)
{
    int rc = HY_OK;
    for (int i = 0; i < n && !rc; i++) {
        if ((rc = hy_store_acquire(s, keys[i], &leases[i], e))) break;
        const hy_meta *meta = hy_lease_meta(leases[i]);
        *off_tier += hy_lease_tier(leases[i]) != want;
        *bytes += meta->bytes;
        /* as the service does: every checksum verified, the sections used in
         * place in the lease, which is held until the request is done */
        rc = hy_entry_view(m, hy_lease_data(leases[i]), meta->bytes, &out[i], e);
    }
    return rc;
}

/* The service's fetch of n hits only the NVMe tier holds (Prefill's
 * landing, cached/land.c): every read started at once, each in layer
 * order; this returns when each one's header and tokens are in, and the
 * pass that follows waits per layer for the rest (*land: end and free it
 * after the pass, before the entries). */
static int store_land(hy_store *s, const hy_model *m, const hy_key *const *keys, int n,
                      hy_entry **out, hy_lease **leases, uint64_t *bytes, int *off_tier,
                      land_batch **land, hy_err *e)
{
    uint8_t fp[32];
    hy_model_fingerprint(m, fp);
    if (land_new(s, m, fp, k_tenant, (size_t)n, land))
        return hy_err_set(e, HY_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        uint64_t b;
        unsigned mask;
        if (!land_peek(s, fp, k_tenant, keys[i], &b, &mask) || mask != 1u << HY_TIER_NVME) {
            *off_tier += 1;
            return hy_err_set(e, HY_ENOTFOUND, "hit %d is not on NVMe alone", i);
        }
        land_add(*land, keys[i], b, &out[i], &leases[i]);
        *bytes += b;
    }
    land_go(*land);
    for (int i = 0; i < n; i++)
        if (!land_opened(*land, (size_t)i))
            return hy_err_set(e, HY_ENOTFOUND, "hit %d did not open", i);
    return HY_OK;
}

/* The entries, then the leases their bytes live in. */
static void free_entries(hy_store *s, hy_entry **ents, hy_lease **leases, int n)
{
    for (int i = 0; i < n; i++) {
        hy_entry_free(ents[i]), ents[i] = NULL;
        if (leases && leases[i]) hy_store_release(s, leases[i]), leases[i] = NULL;
    }
}

/* Best of 5 XXH3 passes over n bytes, bytes per second: the host fetch's
 * limit (a view verifies every byte once and copies none). */
static double xxh3_rate(size_t n)
{
    char *a = malloc(n);
    if (!a) return 0;
    memset(a, 1, n);
    double best = 1e30;
    uint64_t sink = 0;
    for (int i = 0; i < 5; i++) {
        const double t0 = hy_now_s();
        sink ^= hy_xxh3(a, n);
        const double t = hy_now_s() - t0;
        if (t < best) best = t;
        a[i] = (char)sink; /* keep the hashes observable */
    }
    free(a);
    return (double)n / best;
}

/* Best of 5 memcpy passes over n bytes, bytes per second: the rate at which
 * a composition can read its entry's bytes. */
static double memcpy_rate(size_t n)
{
    char *a = malloc(n), *b = malloc(n);
    if (!a || !b) {
        free(a), free(b);
        return 0;
    }
    memset(a, 1, n), memset(b, 2, n);
    double best = 1e30;
    for (int i = 0; i < 5; i++) {
        const double t0 = hy_now_s();
        memcpy(b, a, n);
        const double t = hy_now_s() - t0;
        if (t < best) best = t;
        a[i] = b[n - 1 - i]; /* keep the copies observable */
    }
    free(a), free(b);
    return (double)n / best;
}

/* [system, d] for every document d through `prefix` (untimed): restores, or
 * the first time creates, the checkpoints of [system] and [system, d], which
 * become the most recently used, so that the LRU evicts deeper checkpoints
 * first — as a radix cache evicts leaves before the prefixes they extend. */
/* The representation of this run's entries (--repr). */
static hy_entry_repr g_repr;
static const char *g_repr_name = "f32";

static int touch_prefixes(hy_bench_model *bm, const segset *S, hy_prefix_cache *pc, float *logits,
                          hy_err *e)
{
    const int32_t one = 3;
    int rc = HY_OK;
    for (int d = 0; d < POOL && !rc; d++) {
        const hy_segment two[2] = {{S->tok[POOL], (size_t)S->len[POOL], NULL},
                                   {S->tok[d], (size_t)S->len[d], NULL}};
        const hy_request tq = {.segs = two,
                               .nsegs = 2,
                               .query = &one,
                               .nq = 1,
                               .mode = HY_MODE_PREFIX,
                               .W = HY_SEAM_DEFAULT,
                               .repr = g_repr,
                               .prefix = pc};
        hy_result tr = {0};
        rc = hy_combine(bm->ex, bm->st, &tq, logits, &tr, e);
    }
    return rc;
}

/* --device: where the executor runs */
static hy_exec_device g_dev_kind = HY_EXEC_CPU;
static int g_dev_num;
static const char *g_dev_name = "cpu";

static void usage(void)
{
    fprintf(stderr, "usage: hypic-bench pic [--model DIR] [--requests N] [--seed N] [--dir DIR] "
                    "[--repr R] [--device D]\n"
                    "  D: where the passes run: cpu (the default), cuda, cuda:N or emulated\n"
                    "  R: how entries are stored: f32 (exact, the default), bf16, a tolerance "
                    "(0.03) or a tolerance/f32\n");
}

/* pic's forward pass without its holes: the tokens pic computes for this
 * request (each hit's seam, then the query) prefilled in one call from a
 * state at the position they would start from — full's state just after the
 * request, copied and moved back, so attention sees a context of the same
 * length. The copy is not timed; the prefill is. */
static int plain_computed(hy_bench_model *bm, hy_state *pst, const hy_segment *seg,
                          const hy_request *rq, double *took, hy_err *e)
{
    int32_t tok[NSEG * DOC_MAX + QUERY];
    size_t n = 0;
    for (int i = 0; i < NSEG; i++) {
        const int32_t *t;
        hy_entry_tokens(seg[i].entry, &t);
        const int w = hy_entry_seam_width(seg[i].entry);
        memcpy(tok + n, t, (size_t)w * sizeof *t);
        n += (size_t)w;
    }
    memcpy(tok + n, rq->query, rq->nq * sizeof *tok);
    n += rq->nq;
    int rc = hy_state_copy(pst, bm->st, e);
    if (rc) return rc;
    pst->pos -= (int64_t)n;
    float *lg = malloc((size_t)bm->c->vocab * sizeof *lg);
    if (!lg) return hy_err_set(e, HY_ENOMEM, "out of memory");
    const double t0 = hy_now_s();
    rc = hy_exec_prefill(bm->ex, pst, tok, n, lg, e);
    *took = hy_now_s() - t0;
    free(lg);
    return rc;
}

/* The FLOPs a request costs in `prefix` (every token after the restored
 * checkpoint) or `pic` (each hit's seam and the query, computed at their
 * positions, plus each hit's composition), attention over the context
 * included (hy_config_prefill_flops). */
static double request_flops(const hy_bench_model *bm, const hy_segment *seg, const hy_request *rq,
                            const hy_result *res, hy_mode mode, double hit_flops)
{
    const hy_model_config *c = bm->c;
    const double logits = 2.0 * c->vocab * c->hidden; /* counted once per call below */
    int64_t at = 0, total = (int64_t)rq->nq;
    for (int i = 0; i < NSEG; i++) total += (int64_t)seg[i].n;
    if (mode == HY_MODE_PREFIX) {
        for (int i = 0; i < res->prefix_segments; i++) at += (int64_t)seg[i].n;
        return hy_config_prefill_flops(c, at, total - at);
    }
    double f = 0;
    for (int i = 0; i < NSEG; i++) {
        const int w = hy_entry_seam_width(seg[i].entry);
        if (w > 0) f += hy_config_prefill_flops(c, at, w) - logits;
        f += hit_flops;
        at += (int64_t)seg[i].n;
    }
    return f + hy_config_prefill_flops(c, at, (int64_t)rq->nq);
}

int hy_bench_pic(int argc, char **argv)
{
    const char *model = NULL, *parent = "/tmp";
    long nreq = 50, seed = 1;
    g_repr = hy_entry_exact(HY_ENTRY_F32);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc)
            nreq = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            parent = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
                 hy_exec_device_parse(argv[i + 1], &g_dev_kind, &g_dev_num) == 0)
            g_dev_name = argv[++i];
        else if (strcmp(argv[i], "--repr") == 0 && i + 1 < argc) {
            char why[160];
            g_repr_name = argv[++i];
            if (hy_bench_parse_repr(g_repr_name, &g_repr, why, sizeof why)) {
                fprintf(stderr, "hypic-bench pic: --repr: %s\n", why);
                return 2;
            }
        } else
            nreq = -1;
        if (nreq < 1 || nreq > 100000) {
            usage();
            return 2;
        }
    }
    char nvdir[4096];
    snprintf(nvdir, sizeof nvdir, "%s/hypic-bench-pic-XXXXXX", parent);
    if (!mkdtemp(nvdir)) {
        perror("hypic-bench: mkdtemp under --dir");
        return 1;
    }
    hy_bench_model bm;
    if (hy_bench_open(&bm, model)) {
        hy_bench_rmtree(nvdir);
        return 1;
    }
    if (g_dev_kind != HY_EXEC_CPU) { /* every mode's passes on the device */
        hy_err de = {0};
        if (hy_exec_set_device(bm.ex, g_dev_kind, g_dev_num, &de)) {
            fprintf(stderr, "hypic-bench pic: --device %s: %s\n", g_dev_name, de.msg);
            hy_bench_close(&bm);
            hy_bench_rmtree(nvdir);
            return 1;
        }
        printf("the executor runs on %s\n", hy_exec_device_name(bm.ex));
    }
    const int V = bm.c->vocab;
    uint8_t fp[32];
    hy_model_fingerprint(bm.m, fp);
    hy_err e = {0};
    hy_rng r;
    hy_rng_seed(&r, (uint64_t)seed);
    segset S = {0};
    int rc = 0;

    /* The pool: documents of 448..575 tokens and a system segment, cached. */
    printf("building entries for %d documents and the system segment (W = 8 and W = 0) ...\n",
           POOL);
    fflush(stdout);
    size_t entry_bytes = 0, body_tokens = 0, exact_bytes = 0, exact_k, exact_per;
    hy_entry_bytes_for(bm.c, HY_ENTRY_F32, &exact_k, &exact_per);
    double t_build = 0;
    for (int d = 0; d <= POOL && !rc; d++) {
        S.len[d] = d == POOL ? SYSTEM : 448 + (int)(hy_rng_next(&r) % 128);
        S.tok[d] = random_tokens(&r, S.len[d], V);
        double t0 = hy_now_s();
        hy_state_reset(bm.st);
        rc = hy_entry_build(bm.ex, bm.st, S.tok[d], (size_t)S.len[d], HY_SEAM_DEFAULT, g_repr, NULL,
                            &S.e8[d], &e);
        t_build += hy_now_s() - t0;
        hy_state_reset(bm.st);
        if (!rc)
            rc = hy_entry_build(bm.ex, bm.st, S.tok[d], (size_t)S.len[d], 0, g_repr, NULL, &S.e0[d],
                                &e);
        if (!rc) {
            entry_bytes += hy_entry_payload_bytes(S.e8[d]);
            body_tokens += (size_t)hy_entry_body_tokens(S.e8[d]);
            /* what the exact fp32 entry of the segment holds */
            exact_bytes +=
                exact_k + exact_per * (size_t)hy_entry_body_tokens(S.e8[d]) + 4 * (size_t)S.len[d];
            hy_entry_key(k_tenant, fp, HY_SEAM_DEFAULT, g_repr, S.tok[d], (size_t)S.len[d],
                         S.k8[d].b);
            hy_entry_key(k_tenant, fp, 0, g_repr, S.tok[d], (size_t)S.len[d], S.k0[d].b);
        }
    }
    const double bytes_per_token = (double)entry_bytes / (double)body_tokens;
    if (!rc)
        printf("  %zu body tokens, %.1f MiB of W = 8 entries stored as %s: %.0f bytes per body "
               "token, %.2fx smaller than exact fp32 entries; independent builds at %.0f "
               "tokens/s\n",
               body_tokens, (double)entry_bytes / (1 << 20), g_repr_name, bytes_per_token,
               (double)exact_bytes / (double)entry_bytes, (double)body_tokens / t_build);

    /* The stores. host: every entry (W = 8 and W = 0) in a host tier that
     * holds them all (LRU, admit always: nothing is evicted). nvme: the W = 8
     * entries on an NVMe tier under --dir, with a host tier that admits
     * nothing, so each lease reads NVMe into a temporary host block. */
    hy_store *hs = NULL, *ns = NULL;
    size_t ser_bytes = 0;
    int misplaced = 0;
    for (int d = 0; d <= POOL && !rc; d++)
        ser_bytes += hy_entry_payload_bytes(S.e8[d]) + hy_entry_payload_bytes(S.e0[d]);
    if (!rc) {
        hy_store_config cfg;
        const size_t host = ser_bytes + ser_bytes / 4 + ((size_t)64 << 20);
        hy_store_config_default(&cfg, host, NULL);
        cfg.host_policy = (hy_policy_config){HY_EVICT_LRU, HY_ADMIT_ALWAYS, 0, host};
        rc = hy_store_open(&cfg, &hs, &e);
    }
    if (!rc) {
        char tier[4200];
        snprintf(tier, sizeof tier, "%s/tier", nvdir);
        hy_store_config cfg;
        /* the temporary blocks of one request's leases, all held at once
         * (each hit is used in place until the request is done) */
        size_t biggest = 0;
        for (int d = 0; d <= POOL; d++) biggest = HY_MAX(biggest, hy_entry_payload_bytes(S.e8[d]));
        const size_t host = (size_t)NSEG * (biggest + ((size_t)1 << 20)) + ((size_t)16 << 20);
        hy_store_config_default(&cfg, host, tier);
        cfg.host_policy = (hy_policy_config){HY_EVICT_LRU, HY_ADMIT_MIN_TOKENS, UINT32_MAX, host};
        rc = hy_store_open(&cfg, &ns, &e);
    }
    ser_bytes = 0;
    for (int d = 0; d <= POOL && !rc; d++) {
        hy_tier_id placed;
        size_t b;
        rc = store_put(hs, &S.k8[d], fp, bm.c, S.e8[d], &placed, &b, &e);
        misplaced += !rc && placed != HY_TIER_HOST;
        ser_bytes += b;
        if (!rc) rc = store_put(hs, &S.k0[d], fp, bm.c, S.e0[d], &placed, &b, &e);
        misplaced += !rc && placed != HY_TIER_HOST;
        ser_bytes += b;
        if (!rc) rc = store_put(ns, &S.k8[d], fp, bm.c, S.e8[d], &placed, &b, &e);
        misplaced += !rc && placed != HY_TIER_NVME;
    }
    if (!rc && misplaced)
        rc = hy_err_set(&e, HY_EINVAL, "%d entries did not land in the tier meant for them",
                        misplaced);
    if (!rc)
        printf("  stores: %.1f MiB serialised (W = 8 and W = 0) in a host tier; the W = 8 ones "
               "also on an NVMe tier in %s whose host tier admits nothing\n",
               (double)ser_bytes / (1 << 20), nvdir);

    /* The prefix baseline's checkpoints. A state's bytes are fixed (linear
     * layers' S and conv) plus K/V per position; from them the checkpoints'
     * bytes and the budget (those, plus the deeper checkpoints one request
     * adds, which are the LRU's victims at the next one). */
    hy_prefix_cache *pc = NULL;
    size_t ckpt_bytes = 0, budget = 0;
    int n_ckpt = 0;
    if (!rc) {
        hy_state_reset(bm.st);
        const size_t fixed = hy_state_bytes(bm.st);
        rc = hy_exec_prefill(bm.ex, bm.st, S.tok[POOL], 1, NULL, &e);
        const size_t per_tok = hy_state_bytes(bm.st) - fixed;
        ckpt_bytes = fixed + (size_t)SYSTEM * per_tok;
        for (int d = 0; d < POOL; d++) ckpt_bytes += fixed + (size_t)(SYSTEM + S.len[d]) * per_tok;
        n_ckpt = POOL + 1;
        budget = ckpt_bytes;
        for (int i = 2; i <= DOCS; i++) budget += fixed + (size_t)(SYSTEM + i * DOC_MAX) * per_tok;
    }
    if (!rc) rc = hy_prefix_cache_new(budget, &pc, &e);
    float *lf = malloc((size_t)V * 4), *lm = malloc((size_t)V * 4);
    if (!rc) {
        printf("warming the prefix baseline: %d checkpoints ([system], [system, d] for every d) "
               "...\n",
               n_ckpt);
        fflush(stdout);
        rc = touch_prefixes(&bm, &S, pc, lm, &e);
    }

    /* The inline build overhead: all misses; pic prefills every segment and
     * builds its entry inline; full runs before and after it. */
    double over_full = 0, over_pic = 0, over_pct[N_OVER];
    double finish_s = 0; /* the inline builds' forms chosen after the first token */
    int n_over = 0;
    if (!rc) {
        printf("inline build overhead: %d requests of all misses (full, pic, full) ...\n", N_OVER);
        fflush(stdout);
    }

    /* measured: per mode; [HY_MODE_COUNT] pic from NVMe, [+1] pic on
     * entries already decoded in memory */
    enum { PIC_NVME = HY_MODE_COUNT, PIC_MEM, NRUN };
    double ttft[NRUN] = {0}, kl[NRUN] = {0}, fetch_s[NRUN] = {0};
    double landing_s = 0, nvme_read_s = 0; /* NVMe hits: the pass's waits, the reads' own time */
    double nvme_alone_s = 0;               /* the same reads again with no pass beside them */
    /* per request too: on a shared machine a stalled parallel region
     * inflates a mean, which the median resists */
    double *per[NRUN];
    for (int i = 0; i < NRUN; i++) per[i] = calloc((size_t)nreq, sizeof *per[i]);
    /* MLA models: pic (entries in memory) forced expanded [0] and forced into
     * the latent space [1], alternating which goes first; the passes AUTO
     * (every other run) put in the latent space */
    double *mla_ms[2] = {calloc((size_t)nreq, sizeof(double)),
                         calloc((size_t)nreq, sizeof(double))};
    long mla_auto_latent = 0, mla_auto_passes = 0;
    for (int i = 0; i < NRUN && !rc; i++)
        if (!per[i]) rc = hy_err_set(&e, HY_ENOMEM, "out of memory");
    /* the plain prefill of as many tokens as pic computes, on a copy of
     * full's state moved back to where those tokens would start */
    double *plain = calloc((size_t)nreq, sizeof *plain), plain_sum = 0, pass_compose_s = 0;
    long pass_hits = 0;
    hy_state *pst = NULL;
    if (!rc && !plain) rc = hy_err_set(&e, HY_ENOMEM, "out of memory");
    if (!rc) rc = hy_state_new(bm.m, &pst, &e);
    /* FLOPs per request of prefix [0] and pic [1]: the bound their TTFTs'
     * ratio meets when both run at the same rate */
    double flops[2] = {0};
    int n_lin = 0;
    for (int i = 0; i < bm.c->n_layers; i++) n_lin += bm.c->layer_kind[i] == HY_LAYER_LINEAR;
    /* T·S per head: a dk×dk by dk×dv product, or, for a scalar T (lightning,
     * Mamba2), a scale and an add of the dk×dv state */
    const bool scalar_t = bm.c->lin_kind == HY_LIN_LIGHTNING || bm.c->lin_kind == HY_LIN_MAMBA2;
    const double t_rows = scalar_t ? 1.0 : (double)bm.c->lin_dk;
    const double hit_flops = 2.0 * n_lin * bm.c->lin_v_heads * t_rows * bm.c->lin_dk * bm.c->lin_dv;
    int agree[NRUN] = {0}, off_tier[NRUN] = {0};
    int64_t prefilled[NRUN] = {0};
    uint64_t fetched_bytes[NRUN] = {0};
    long prefix_reused = 0; /* requests whose prefix run restored [system, d1] or deeper */

    for (long q = -N_OVER; q < nreq && !rc; q++) {
        hy_segment seg[NSEG];
        int pick[DOCS];
        seg[0] = (hy_segment){S.tok[POOL], (size_t)S.len[POOL], NULL};
        for (int i = 0; i < DOCS; i++) {
            int d, dup;
            do {
                d = (int)(hy_rng_next(&r) % POOL);
                dup = 0;
                for (int j = 0; j < i; j++) dup |= pick[j] == d;
            } while (dup);
            pick[i] = d;
            seg[1 + i] = (hy_segment){S.tok[d], (size_t)S.len[d], NULL};
        }
        int32_t *query = random_tokens(&r, QUERY, V);
        hy_request rq = {.segs = seg,
                         .nsegs = NSEG,
                         .query = query,
                         .nq = QUERY,
                         .W = HY_SEAM_DEFAULT,
                         .repr = g_repr,
                         .prefix = pc};
        hy_result res = {0};
        if (q < 0) {
            double t0 = hy_now_s();
            rq.mode = HY_MODE_FULL;
            rc = hy_combine(bm.ex, bm.st, &rq, lf, &res, &e);
            double t1 = hy_now_s();
            rq.mode = HY_MODE_PIC;
            /* as the service does: the built entries' forms chosen after the
             * first token (hy_entry_finish), timed apart */
            hy_entry *built[NSEG] = {0};
            rq.defer_builds = true;
            res.built = built;
            if (!rc) rc = hy_combine(bm.ex, bm.st, &rq, lm, &res, &e);
            double t2 = hy_now_s();
            const double pic_s = t2 - t1;
            for (int i = 0; i < NSEG; i++) {
                if (!rc) rc = hy_entry_finish(built[i], &e);
                hy_entry_free(built[i]);
            }
            finish_s += hy_now_s() - t2;
            rq.defer_builds = false;
            res.built = NULL;
            t2 = hy_now_s();
            rq.mode = HY_MODE_FULL;
            if (!rc) rc = hy_combine(bm.ex, bm.st, &rq, lf, &res, &e);
            const double full = ((t1 - t0) + (hy_now_s() - t2)) / 2;
            over_full += full;
            over_pic += pic_s;
            over_pct[n_over++] = (pic_s - full) / full * 100.0;
            free(query);
            continue;
        }
        for (int run = 0; run < NRUN && !rc; run++) {
            const hy_mode mode = run >= HY_MODE_COUNT ? HY_MODE_PIC : (hy_mode)run;
            const bool w0 = mode == HY_MODE_NOSEAM;
            hy_entry *got[NSEG] = {0};
            hy_lease *lease[NSEG] = {0};
            const hy_key *keys[NSEG];
            for (int i = 0; i < NSEG; i++) {
                const int d = i == 0 ? POOL : pick[i - 1];
                seg[i].entry = w0 ? S.e0[d] : S.e8[d];
                keys[i] = w0 ? &S.k0[d] : &S.k8[d];
            }
            if (mode == HY_MODE_PREFIX && (rc = touch_prefixes(&bm, &S, pc, lm, &e))) break;
            rq.mode = mode;
            hy_store *from = run == PIC_NVME                         ? ns
                             : mode >= HY_MODE_PIC && run != PIC_MEM ? hs
                                                                     : NULL;
            const double t0 = hy_now_s();
            land_batch *land = NULL;
            if (from == ns) {
                rc = store_land(from, bm.m, keys, NSEG, got, lease, &fetched_bytes[run],
                                &off_tier[run], &land, &e);
                for (int i = 0; i < NSEG; i++) seg[i].entry = land_opened(land, (size_t)i);
                fetch_s[run] += hy_now_s() - t0;
            } else if (from) {
                rc = store_fetch(from, bm.m, keys, NSEG, got, lease, HY_TIER_HOST,
                                 &fetched_bytes[run], &off_tier[run], &e);
                for (int i = 0; i < NSEG; i++) seg[i].entry = got[i];
                fetch_s[run] += hy_now_s() - t0;
            }
            if (!rc) rc = hy_combine(bm.ex, bm.st, &rq, mode == HY_MODE_FULL ? lf : lm, &res, &e);
            per[run][q] = hy_now_s() - t0;
            if (land) {
                landing_s += res.arrival_s;
                land_wait(land);
                uint64_t rb;
                double rs;
                land_read(land, COST_FROM_NVME, &rb, &rs);
                nvme_read_s += rs;
                size_t bad;
                hy_err le;
                if (!rc && land_failed(land, &bad, &le))
                    rc = hy_err_set(&e, le.code, "hit %zu: %s", bad, le.msg);
                land_free(land);
            }
            ttft[run] += per[run][q];
            if (!rc && (mode == HY_MODE_PREFIX || run == HY_MODE_PIC)) /* before the free */
                flops[mode == HY_MODE_PIC] += request_flops(&bm, seg, &rq, &res, mode, hit_flops);
            free_entries(from, got, lease, NSEG);
            if (!rc && run == PIC_NVME) { /* the read path alone, the cores free */
                hy_entry *g2[NSEG] = {0};
                hy_lease *l2[NSEG] = {0};
                uint64_t b2 = 0, rb;
                int o2 = 0;
                double rs;
                land_batch *l_alone = NULL;
                rc = store_land(ns, bm.m, keys, NSEG, g2, l2, &b2, &o2, &l_alone, &e);
                land_wait(l_alone);
                if (!rc && land_read(l_alone, COST_FROM_NVME, &rb, &rs)) nvme_alone_s += rs;
                land_free(l_alone);
                free_entries(ns, g2, l2, NSEG);
            }
            if (!rc && run == HY_MODE_PIC) {
                pass_compose_s += res.compose_s;
                pass_hits += res.hits;
            }
            if (!rc && mode == HY_MODE_FULL) rc = plain_computed(&bm, pst, seg, &rq, &plain[q], &e);
            if (!rc && bm.c->mla && mode >= HY_MODE_PIC) {
                mla_auto_passes++;
                mla_auto_latent += hy_exec_mla_mode_used(bm.ex) == HY_MLA_ABSORBED;
            }
            prefilled[run] += res.prefilled;
            if (mode == HY_MODE_PREFIX) prefix_reused += res.prefix_segments >= 2;
            if (rc || mode == HY_MODE_FULL) continue;
            kl[run] += hy_kl_logits(lf, lm, V);
            agree[run] += hy_argmax(lf, V) == hy_argmax(lm, V);
        }
        for (int k = 0; k < 2 && !rc && bm.c->mla; k++) {
            const int m = (int)((q + k) % 2); /* 0 expanded, 1 latent */
            for (int i = 0; i < NSEG; i++) seg[i].entry = S.e8[i == 0 ? POOL : pick[i - 1]];
            rq.mode = HY_MODE_PIC;
            hy_exec_set_mla_mode(bm.ex, m ? HY_MLA_ABSORBED : HY_MLA_EXPANDED);
            const double t0 = hy_now_s();
            rc = hy_combine(bm.ex, bm.st, &rq, lm, &res, &e);
            mla_ms[m][q] = (hy_now_s() - t0) * 1e3;
            hy_exec_set_mla_mode(bm.ex, HY_MLA_AUTO);
        }
        if ((q + 1) % 10 == 0 || q + 1 == nreq) {
            printf("  %ld/%ld requests: mean TTFT full %.0f ms, prefix %.0f ms, pic %.1f ms (host "
                   "tier), %.1f ms (NVMe)\n",
                   q + 1, nreq, ttft[HY_MODE_FULL] / (double)(q + 1) * 1e3,
                   ttft[HY_MODE_PREFIX] / (double)(q + 1) * 1e3,
                   ttft[HY_MODE_PIC] / (double)(q + 1) * 1e3,
                   ttft[PIC_NVME] / (double)(q + 1) * 1e3);
            fflush(stdout);
        }
        free(query);
    }

    /* Composition per hit: requests' segments applied from their W = 0
     * entries, each hy_entry_apply timed alone (the KV cache already has the
     * capacity of a request, so no apply reallocates it). */
    enum { COMPOSE_ROUNDS = 24 };
    double compose_s[COMPOSE_ROUNDS * NSEG];
    int n_compose = 0, n_expanded = 0; /* applies whose MLA layers expanded the body */
    for (int round = 0; round < COMPOSE_ROUNDS && !rc; round++) {
        hy_state_reset(bm.st);
        for (int i = 0; i < NSEG && !rc; i++) {
            const int d = i == 0 ? POOL : (int)(hy_rng_next(&r) % POOL);
            const uint64_t t0 = hy_now_ns();
            rc = hy_entry_apply(bm.ex, bm.st, S.e0[d], true, &e);
            compose_s[n_compose++] = (double)(hy_now_ns() - t0) * 1e-9;
            n_expanded += hy_exec_mla_mode_used(bm.ex) == HY_MLA_EXPANDED;
        }
    }
    hy_store_stats nst = {0};
    if (ns) hy_store_stats_get(ns, &nst);
    int off = 0;
    for (int i = 0; i < NRUN; i++) off += off_tier[i];
    if (!rc && off)
        rc = hy_err_set(&e, HY_EINVAL, "%d leases came from another tier than the one measured",
                        off);
    if (!rc && prefix_reused != nreq)
        rc = hy_err_set(&e, HY_EINVAL,
                        "the prefix baseline restored [system, d] in %ld of %ld requests: its "
                        "checkpoints were evicted",
                        prefix_reused, nreq);
    const double N = (double)nreq;
    const double req_bytes = (double)fetched_bytes[HY_MODE_PIC] / N;
    const double xr = rc ? 0 : xxh3_rate((size_t)req_bytes);
    hy_store_close(hs);
    hy_store_close(ns);
    hy_bench_rmtree(nvdir);
    if (rc) {
        fprintf(stderr, "hypic-bench: %s\n", e.msg);
        hy_bench_close(&bm);
        return 1;
    }
    /* the limits: pic's pass without holes, and a hit's composition — its
     * T·S products at the machine's sgemm rate plus reading its bytes */
    double plain_p50 = 0;
    for (long q = 0; q < nreq; q++) plain_sum += plain[q];
    plain_p50 = hy_bench_median(plain, (size_t)nreq) * 1e3;
    free(plain);
    hy_state_free(pst);
    double e0_bytes = 0, e0_body = 0;
    for (int d = 0; d <= POOL; d++) {
        e0_bytes += (double)hy_entry_payload_bytes(S.e0[d]);
        e0_body += hy_entry_body_tokens(S.e0[d]);
    }
    e0_bytes /= POOL + 1;
    e0_body /= POOL + 1;
    /* MLA: a pass that attends over expanded rows expands each body
     * position's latent by kv_b_proj where it is placed (kv_lora ×
     * heads·(qk_nope + v_head) per position and layer); one in the latent
     * space, as AUTO runs a pass of holes alone, places the latents as they
     * are */
    const hy_model_config *mc = bm.c;
    int n_att = 0;
    for (int i = 0; i < mc->n_layers; i++) n_att += mc->layer_kind[i] == HY_LAYER_ATTENTION;
    const double expand_flops =
        mc->mla && 2 * n_expanded > n_compose
            ? 2.0 * e0_body * n_att * mc->kv_lora * mc->n_heads * (double)(mc->qk_nope + mc->v_head)
            : 0.0;
    const double sgemm = hy_bench_sgemm_flops(2048, 2048, 2048, 2);
    const double compose_limit_us =
        ((hit_flops + expand_flops) / sgemm + e0_bytes / memcpy_rate((size_t)e0_bytes)) * 1e6;
    const double pass_compose_us = pass_hits ? pass_compose_s / (double)pass_hits * 1e6 : 0;
    qsort(compose_s, (size_t)n_compose, sizeof *compose_s, hy_bench_cmp_double);
    const double compose_us = compose_s[n_compose / 2] * 1e6;
    const double compose_p10_us = compose_s[n_compose / 10] * 1e6;
    double compose_mean_us = 0;
    for (int i = 0; i < n_compose; i++) compose_mean_us += compose_s[i] * 1e6 / n_compose;
    const double over_p50 = hy_bench_median(over_pct, (size_t)n_over);

    const char *run_name[NRUN] = {
        [PIC_NVME] = "pic, entries from NVMe", [PIC_MEM] = "pic, entries in memory"};
    for (int m = 0; m < HY_MODE_COUNT; m++) run_name[m] = hy_mode_name((hy_mode)m);
    double mla_p50[2] = {0};
    for (int m = 0; m < 2; m++) {
        qsort(mla_ms[m], (size_t)nreq, sizeof *mla_ms[m], hy_bench_cmp_double);
        mla_p50[m] =
            nreq % 2 ? mla_ms[m][nreq / 2] : (mla_ms[m][nreq / 2 - 1] + mla_ms[m][nreq / 2]) / 2;
        free(mla_ms[m]);
    }
    double p50[NRUN];
    for (int run = 0; run < NRUN; run++) {
        qsort(per[run], (size_t)nreq, sizeof *per[run], hy_bench_cmp_double);
        p50[run] =
            (nreq % 2 ? per[run][nreq / 2] : (per[run][nreq / 2 - 1] + per[run][nreq / 2]) / 2) *
            1e3;
        free(per[run]);
    }
    printf("\n mode                      TTFT ms (mean, median)   of it fetching   tokens prefilled"
           "   KL vs full   top-1 agree\n");
    for (int run = 0; run < NRUN; run++)
        printf(" %-24s %8.1f %8.1f   %14.1f   %16.0f   %10.2e   %10.2f\n", run_name[run],
               ttft[run] / N * 1e3, p50[run], fetch_s[run] / N * 1e3, (double)prefilled[run] / N,
               run ? kl[run] / N : 0.0, run ? agree[run] / N : 1.0);
    printf("(pic, noseam, naive: entries leased from the host tier, decoded and verified inside "
           "the TTFT)\n");
    const double sp_prefix = ttft[HY_MODE_PREFIX] / ttft[HY_MODE_PIC];
    const double sp_full = ttft[HY_MODE_FULL] / ttft[HY_MODE_PIC];
    const double overhead = (over_pic - over_full) / over_full * 100.0;
    const double tok_ratio = (double)prefilled[HY_MODE_PREFIX] / (double)prefilled[HY_MODE_PIC];
    const double fetch_host_ms = fetch_s[HY_MODE_PIC] / N * 1e3;
    const double fetch_nvme_ms = fetch_s[PIC_NVME] / N * 1e3;
    printf("\nentry bytes per request (pic, %d W = 8 entries): %.1f MiB; fetching them took %.1f "
           "ms from the host tier (%.2f GB/s; its limit, hashing every byte once: XXH3 at %.2f "
           "GB/s, %.1f ms) and "
           "%.1f ms from NVMe before the pass could start (every read started at once, each "
           "entry in layer order; the pass begins when their headers and tokens are in), "
           "NVMe leases %llu, host promotions %llu\n",
           NSEG, req_bytes / (1 << 20), fetch_host_ms, req_bytes / (fetch_host_ms * 1e6), xr / 1e9,
           req_bytes / xr * 1e3, fetch_nvme_ms, (unsigned long long)nst.hits_nvme,
           (unsigned long long)nst.promotions);
    printf("NVMe reads while the pass runs: %.1f ms from the first read's start to the last's "
           "end (%.2f GB/s, verified; its limit is the device's raw O_DIRECT read rate, "
           "`hypic-bench tiers`); the pass waited %.1f ms for layers still landing; TTFT with "
           "every hit on NVMe over every hit in the host tier: %.2f (mean), %.2f (median) "
           "(target <= 1.15)\n",
           nvme_read_s / N * 1e3, req_bytes / (nvme_read_s / N * 1e9), landing_s / N * 1e3,
           ttft[PIC_NVME] / ttft[HY_MODE_PIC], p50[PIC_NVME] / p50[HY_MODE_PIC]);
    printf("the same reads with no pass beside them (the read path's own rate, the cores "
           "free): %.1f ms, %.2f GB/s\n",
           nvme_alone_s / N * 1e3, req_bytes / (nvme_alone_s / N * 1e9));
    printf("prefix baseline: %d checkpoints ([system] and [system, d] for all %d documents) of "
           "%.1f MiB, under a budget of %.1f MiB (plus one request's deeper checkpoints); "
           "restored [system, d1] or deeper in %ld of %ld requests\n",
           n_ckpt, POOL, (double)ckpt_bytes / (1 << 20), (double)budget / (1 << 20), prefix_reused,
           nreq);
    printf("pic over prefix: %.1fx TTFT (target >= 25x); the token-count bound is %.1fx "
           "(tokens prefix prefills / tokens pic prefills), the FLOP-count bound %.1fx "
           "(%.1f GFLOP / %.2f GFLOP per request: attention over the context and composition "
           "counted too)\n",
           sp_prefix, tok_ratio, flops[0] / flops[1], flops[0] / N / 1e9, flops[1] / N / 1e9);
    printf("pic over full: %.1fx TTFT\n", sp_full);
    printf("the same over median TTFTs: pic over prefix %.1fx, pic over full %.1fx\n",
           p50[HY_MODE_PREFIX] / p50[HY_MODE_PIC], p50[HY_MODE_FULL] / p50[HY_MODE_PIC]);
    printf("inline build overhead over a plain prefill: %.1f%% over %d requests of all misses "
           "(target <= 6%%); per request p50 %.1f%%, min %.1f%%, max %.1f%%; then, after the "
           "first token, choosing the built entries' forms: %.1f ms per request\n",
           overhead, n_over, over_p50, over_pct[0], over_pct[n_over - 1], finish_s / n_over * 1e3);
    printf("entry bytes per body token: %.0f\n", bytes_per_token);
    printf("composition per hit (hy_entry_apply of a W = 0 entry, no seam): median %.0f us, "
           "fastest tenth %.0f us, mean %.0f us over %d hits\n",
           compose_us, compose_p10_us, compose_mean_us, n_compose);
    printf("composition inside pic's one pass: %.0f us per hit (threads' seconds composing / "
           "threads, plus the holes' K/V writes)\n",
           pass_compose_us);
    char expand[96] = "";
    if (expand_flops > 0)
        snprintf(expand, sizeof expand, " and %.3g MFLOP expanding the MLA latents",
                 expand_flops / 1e6);
    printf("  its limit: %.3g MFLOP of T.S per hit%s at the sgemm rate (%.1f GFLOP/s, 2048^3) plus "
           "reading %.1f MiB at memcpy speed = %.0f us; composition over that limit: %.2f "
           "(target <= 2)\n",
           hit_flops / 1e6, expand, sgemm / 1e9, e0_bytes / (1 << 20), compose_limit_us,
           compose_us / compose_limit_us);
    const double plain_ms = plain_sum / N * 1e3;
    if (mc->mla)
        printf("MLA, pic with entries in memory, median of %ld requests each (the two alternate): "
               "attending over expanded rows %.1f ms, in the latent space %.1f ms (%.2fx); AUTO "
               "chose the latent space in %ld of its %ld pic passes\n",
               nreq, mla_p50[0], mla_p50[1], mla_p50[1] / mla_p50[0], mla_auto_latent,
               mla_auto_passes);
    printf("plain prefill of the %.0f tokens pic computes, from a state at their position: "
           "%.1f ms mean, %.1f ms median; pic over it: %.2f (host tier), %.2f (entries in "
           "memory) (limit ~1: the holes cost only their composition; target <= 1.3)\n",
           (double)prefilled[HY_MODE_PIC] / N, plain_ms, plain_p50,
           ttft[HY_MODE_PIC] / N * 1e3 / plain_ms, ttft[PIC_MEM] / N * 1e3 / plain_ms);
    printf("(random weights: KL and agreement show how far each approximation moves the output, "
           "not task quality)\n");
    printf("{\"bench\":\"pic\",\"device\":\"%s\",", hy_exec_device_name(bm.ex));
    printf("\"repr\":\"%s\",\"tol\":%g,\"entry_bytes_per_entry\":%.0f,"
           "\"smaller_than_exact_x\":%.3f,\"build_tokens_per_s\":%.0f,",
           g_repr_name, (double)g_repr.tol, (double)entry_bytes / (POOL + 1),
           (double)exact_bytes / (double)entry_bytes, (double)body_tokens / t_build);
    printf("\"requests\":%ld,\"ttft_ms\":{\"full\":%.2f,\"prefix\":%.2f,"
           "\"pic\":%.2f,\"noseam\":%.2f,\"naive\":%.2f,\"pic_store_host\":%.2f,"
           "\"pic_store_nvme\":%.2f,\"pic_in_memory\":%.2f,\"plain_computed\":%.2f},"
           "\"ttft_p50_ms\":{\"full\":%.2f,\"prefix\":%.2f,\"pic\":%.2f,\"noseam\":%.2f,"
           "\"naive\":%.2f,\"pic_store_nvme\":%.2f,\"pic_in_memory\":%.2f,"
           "\"plain_computed\":%.2f},\"pic_over_plain_computed\":%.3f,"
           "\"pic_in_memory_over_plain_computed\":%.3f,\"pic_over_prefix_speedup_p50\":%.2f,"
           "\"fetch_ms\":{\"host\":%.2f,\"nvme\":%.2f},\"entry_bytes_per_request\":%.0f,"
           "\"xxh3_gbps\":%.2f,\"prefix_checkpoints\":%d,\"prefix_checkpoint_bytes\":%zu,"
           "\"prefix_budget_bytes\":%zu,\"prefix_reused_requests\":%ld,"
           "\"pic_over_prefix_speedup\":%.2f,\"pic_over_full_speedup\":%.2f,"
           "\"build_overhead_pct\":%.2f,\"build_overhead_requests\":%d,"
           "\"build_overhead_pct_p50\":%.2f,\"build_overhead_pct_min\":%.2f,"
           "\"build_overhead_pct_max\":%.2f,"
           "\"kl_vs_full\":{\"prefix\":%.3e,\"pic\":%.3e,\"noseam\":%.3e,\"naive\":%.3e},"
           "\"top1_agree_vs_full\":{\"prefix\":%.3f,\"pic\":%.3f,\"noseam\":%.3f,\"naive\":%.3f},"
           "\"tokens_prefilled\":{\"full\":%.0f,\"prefix\":%.0f,\"pic\":%.0f},"
           "\"entry_bytes_per_token\":%.1f,\"compose_us_per_hit\":%.1f,"
           "\"compose_p10_us_per_hit\":%.1f,\"compose_mean_us_per_hit\":%.1f,"
           "\"compose_in_pass_us_per_hit\":%.1f,\"compose_limit_us_per_hit\":%.1f,"
           "\"compose_over_limit\":%.2f,\"sgemm_gflops\":%.1f,\"token_bound\":%.2f,"
           "\"flop_bound\":%.2f",
           nreq, ttft[0] / N * 1e3, ttft[1] / N * 1e3, ttft[2] / N * 1e3, ttft[3] / N * 1e3,
           ttft[4] / N * 1e3, ttft[HY_MODE_PIC] / N * 1e3, ttft[PIC_NVME] / N * 1e3,
           ttft[PIC_MEM] / N * 1e3, plain_ms, p50[0], p50[1], p50[2], p50[3], p50[4], p50[PIC_NVME],
           p50[PIC_MEM], plain_p50, ttft[HY_MODE_PIC] / N * 1e3 / plain_ms,
           ttft[PIC_MEM] / N * 1e3 / plain_ms, p50[HY_MODE_PREFIX] / p50[HY_MODE_PIC],
           fetch_host_ms, fetch_nvme_ms, req_bytes, xr / 1e9, n_ckpt, ckpt_bytes, budget,
           prefix_reused, sp_prefix, sp_full, overhead, n_over, over_p50, over_pct[0],
           over_pct[n_over - 1], kl[1] / N, kl[2] / N, kl[3] / N, kl[4] / N, agree[1] / N,
           agree[2] / N, agree[3] / N, agree[4] / N, (double)prefilled[0] / N,
           (double)prefilled[1] / N, (double)prefilled[2] / N, bytes_per_token, compose_us,
           compose_p10_us, compose_mean_us, pass_compose_us, compose_limit_us,
           compose_us / compose_limit_us, sgemm / 1e9, tok_ratio, flops[0] / flops[1]);
    if (mc->mla)
        printf(",\"mla_pic_in_memory_p50_ms\":{\"expanded\":%.2f,\"latent\":%.2f},"
               "\"mla_latent_over_expanded\":%.3f,\"mla_auto_latent_passes\":%ld,"
               "\"mla_auto_passes\":%ld",
               mla_p50[0], mla_p50[1], mla_p50[1] / mla_p50[0], mla_auto_latent, mla_auto_passes);
    printf(",\"build_finish_ms_per_request\":%.2f", finish_s / n_over * 1e3);
    printf(",\"nvme_over_host_ttft\":%.3f,\"nvme_over_host_ttft_p50\":%.3f,"
           "\"nvme_landing_wait_ms\":%.2f,\"nvme_read_ms\":%.2f,\"nvme_read_gbps\":%.3f,"
           "\"nvme_read_alone_gbps\":%.3f}\n",
           ttft[PIC_NVME] / ttft[HY_MODE_PIC], p50[PIC_NVME] / p50[HY_MODE_PIC],
           landing_s / N * 1e3, nvme_read_s / N * 1e3, req_bytes / (nvme_read_s / N * 1e9),
           req_bytes / (nvme_alone_s / N * 1e9));
    for (int d = 0; d <= POOL; d++) {
        free(S.tok[d]);
        hy_entry_free(S.e8[d]);
        hy_entry_free(S.e0[d]);
    }
    free(lf), free(lm);
    hy_prefix_cache_free(pc);
    hy_bench_close(&bm);
    return 0;
}
