/*
 * hy_combine in the pic family of modes (pic, noseam, naive) against a
 * reference combiner written here from public calls only: segment by
 * segment on one running state, a hit reused with hy_entry_apply (its seam
 * recomputed through every layer, its body composed), a miss prefilled with
 * its entry built inline by hy_entry_build, a segment too short to cache
 * (hy_entry_seam) prefilled with hy_exec_prefill, then the query.
 *
 * hy_combine may compute a request any way it likes — in one layer-major
 * forward pass over only the tokens it must compute, each hit's body a
 * composed hole in it, in steps of the executor's max_batch — so long as the
 * result is the segment-by-segment one: next-token logits within fp32
 * rounding (max |a − b| / max |b| ≤ 1e-4), the same counters (hits, misses,
 * uncacheable, tokens prefilled) and, for misses, entries that are built
 * alike and compose alike when reused. Every case runs a third time through
 * hy_combine_stream, its entries arriving in a pattern that splits the
 * request into several passes, held to the same reference.
 *
 * Shapes: all hits, all misses, mixed, uncacheable short segments between
 * hits, a hit first, BF16 entries, and requests longer than one step with
 * step boundaries inside seams, misses and the query and on either side of a
 * hole, on the presets tiny, tiny-moe, tiny-olmo, tiny-minimax, tiny-kimi, tiny-nemotron,
 * tiny-ling and small (fewer, shorter cases). Then: bad requests are refused with clear errors and
 * nothing built is left behind.
 */
#include "hy_model.h"
#include "random_tokens.h"
#include "test_util.h"

#include <stdbool.h>
#include <string.h>

static char g_tmp[64];

#define TOL 1e-4 /* fp32 rounding of a differently ordered computation */

enum { N_PRESETS = 8, N_MODES = 3, MAX_SEGS = 8 };
static const char *const k_presets[N_PRESETS] = {"tiny",          "tiny-moe",     "small",
                                                 "tiny-olmo",     "tiny-minimax", "tiny-kimi",
                                                 "tiny-nemotron", "tiny-ling"};
static const hy_mode k_modes[N_MODES] = {HY_MODE_PIC, HY_MODE_NOSEAM, HY_MODE_NAIVE};

/* One generated model per preset, opened on first use and shared by the
 * tests (generating `small` costs more than most cases here). */
typedef struct fixture {
    const char *preset;
    hy_model *m;
    hy_exec *ex; /* max_batch 0 (1024): the reference's executor */
    hy_state *st, *ref_st;
    const hy_model_config *c;
    float *lc, *lr; /* logits: hy_combine's, the reference's */
} fixture;

static fixture g_fix[N_PRESETS];

static fixture *fixture_get(int p)
{
    fixture *f = &g_fix[p];
    if (f->m) return f;
    char dir[160];
    hy_err e = {0};
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, k_presets[p]);
    f->preset = k_presets[p];
    CU_ASSERT_EQUAL_FATAL(hy_model_init(f->preset, 1, dir, "F32", &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&f->m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(f->m, 0, &f->ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(f->m, &f->st, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(f->m, &f->ref_st, &e), 0);
    f->c = hy_model_cfg(f->m);
    f->lc = malloc((size_t)f->c->vocab * sizeof *f->lc);
    f->lr = malloc((size_t)f->c->vocab * sizeof *f->lr);
    return f;
}

static void fixtures_close(void)
{
    for (int p = 0; p < N_PRESETS; p++) {
        fixture *f = &g_fix[p];
        if (!f->m) continue;
        free(f->lc), free(f->lr);
        hy_state_free(f->st), hy_state_free(f->ref_st);
        hy_exec_free(f->ex);
        hy_model_close(f->m);
        memset(f, 0, sizeof *f);
    }
}

/* The seam setting a mode's entries carry: noseam caches whole segments. */
static int mode_W(hy_mode mode, int W)
{
    return mode == HY_MODE_NOSEAM ? 0 : W;
}

/* --- the reference ------------------------------------------------------------ */

typedef struct ref_counts {
    int hits, misses, uncacheable;
    int64_t prefilled; /* seams of hits + misses + uncacheable segments + query */
} ref_counts;

/* What hy_combine did segment by segment before the one-pass rewrite (see
 * the file comment), for the pic-family modes only: from the empty state;
 * pic and naive use entries of seam W, noseam entries of W = 0; naive
 * composes without T. built[ns] receives the entries built inline for misses
 * (the caller frees them), NULL elsewhere; cnt what the request cost. */
static int reference_combine(const hy_model_config *c, hy_exec *ex, hy_state *st,
                             const hy_segment *segs, size_t ns, const int32_t *query, size_t nq,
                             hy_mode mode, int W, hy_entry_dtype dtype, float *logits,
                             hy_entry **built, ref_counts *cnt, hy_err *err)
{
    CU_ASSERT_FATAL(mode == HY_MODE_PIC || mode == HY_MODE_NOSEAM || mode == HY_MODE_NAIVE);
    const int Wm = mode_W(mode, W);
    const bool use_T = mode != HY_MODE_NAIVE;
    memset(cnt, 0, sizeof *cnt);
    memset(built, 0, ns * sizeof *built);
    hy_state_reset(st);
    int rc = HY_OK;
    for (size_t i = 0; i < ns && !rc; i++) {
        const hy_segment *s = &segs[i];
        if (s->entry) {
            const int32_t *et;
            const size_t en = (size_t)hy_entry_tokens(s->entry, &et);
            if (en != s->n || memcmp(et, s->tokens, s->n * sizeof *et) != 0)
                rc = hy_err_set(err, HY_EINVAL, "reference: segment %zu: other tokens", i);
            else if (hy_entry_seam_setting(s->entry) != Wm)
                rc = hy_err_set(err, HY_EINVAL, "reference: segment %zu: another seam W", i);
            else
                rc = hy_entry_apply(ex, st, s->entry, use_T, err);
            cnt->hits++;
            cnt->prefilled += hy_entry_seam_width(s->entry);
            continue;
        }
        cnt->prefilled += (int64_t)s->n;
        int w;
        hy_err ignored = {0};
        if (hy_entry_seam(c, s->n, Wm, &w, &ignored) != HY_OK) { /* too short: just prefill */
            cnt->uncacheable++;
            rc = hy_exec_prefill(ex, st, s->tokens, s->n, NULL, err);
            continue;
        }
        cnt->misses++;
        rc = hy_entry_build(ex, st, s->tokens, s->n, Wm, hy_entry_exact(dtype), NULL, &built[i],
                            err);
    }
    if (!rc) rc = hy_exec_prefill(ex, st, query, nq, logits, err);
    cnt->prefilled += (int64_t)nq;
    if (rc)
        for (size_t i = 0; i < ns; i++) hy_entry_free(built[i]), built[i] = NULL;
    return rc;
}

/* --- comparing a request's two runs --------------------------------------------- */

/* Worst relative difference between two states of the same positions, array
 * by array: every linear layer's S and conv state, every attention layer's
 * K and V rows of the positions filled. */
static double state_diff(const hy_model_config *c, hy_state *a, hy_state *ref)
{
    const size_t nS = (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv;
    const size_t nC = (size_t)(c->conv_kernel - 1) * (size_t)hy_config_conv_dim(c);
    const size_t nK = (size_t)hy_state_pos(ref) * hy_config_kv_k(c);
    const size_t nV = (size_t)hy_state_pos(ref) * hy_config_kv_v(c);
    double worst = 0;
    for (int li = 0; li < c->n_layers; li++) {
        double d[4] = {0};
        if (c->layer_kind[li] == HY_LAYER_LINEAR) {
            d[0] = hy_rel_diff(hy_state_S(a, li), hy_state_S(ref, li), nS);
            d[1] = hy_rel_diff(hy_state_conv(a, li), hy_state_conv(ref, li), nC);
        } else if (c->layer_kind[li] == HY_LAYER_ATTENTION) {
            d[2] = hy_rel_diff(hy_state_k(a, li), hy_state_k(ref, li), nK);
            d[3] = hy_rel_diff(hy_state_v(a, li), hy_state_v(ref, li), nV);
        }
        for (int j = 0; j < 4; j++)
            if (!(d[j] <= worst)) worst = d[j]; /* NaN counts as the worst */
    }
    return worst;
}

/* Entries built inline for the same misses, by hy_combine (bc) and by the
 * reference (br): the same segments get one, of the same shape, and reusing
 * either set (through the reference, in a second request of the same
 * segments, every miss now a hit) gives the same logits. Returns that
 * difference; 0 when nothing was built. */
static double compare_built(fixture *f, const hy_request *rq, hy_entry **bc, hy_entry **br)
{
    hy_segment sc[MAX_SEGS], sr[MAX_SEGS];
    bool any = false;
    for (size_t i = 0; i < rq->nsegs; i++) {
        sc[i] = sr[i] = rq->segs[i];
        CU_ASSERT_EQUAL(bc[i] != NULL, br[i] != NULL);
        if (!bc[i] || !br[i]) continue;
        const int32_t *tc, *tr;
        const int n = hy_entry_tokens(bc[i], &tc);
        CU_ASSERT_EQUAL(n, hy_entry_tokens(br[i], &tr));
        CU_ASSERT(n == (int)rq->segs[i].n && memcmp(tc, tr, (size_t)n * sizeof *tc) == 0);
        CU_ASSERT_EQUAL(hy_entry_seam_width(bc[i]), hy_entry_seam_width(br[i]));
        CU_ASSERT_EQUAL(hy_entry_seam_setting(bc[i]), hy_entry_seam_setting(br[i]));
        CU_ASSERT_EQUAL(hy_entry_body_tokens(bc[i]), hy_entry_body_tokens(br[i]));
        CU_ASSERT_EQUAL(hy_entry_dtype_of(bc[i]), rq->repr.s);
        CU_ASSERT_EQUAL(hy_entry_dtype_of(br[i]), rq->repr.s);
        CU_ASSERT_EQUAL(hy_entry_payload_bytes(bc[i]), hy_entry_payload_bytes(br[i]));
        sc[i].entry = bc[i], sr[i].entry = br[i];
        any = true;
    }
    if (!any) return 0;
    hy_err e = {0};
    hy_entry *none[MAX_SEGS];
    ref_counts cnt;
    CU_ASSERT_EQUAL_FATAL(reference_combine(f->c, f->ex, f->ref_st, sc, rq->nsegs, rq->query,
                                            rq->nq, rq->mode, rq->W, rq->repr.s, f->lc, none, &cnt,
                                            &e),
                          0);
    CU_ASSERT_EQUAL(cnt.misses, 0); /* every cacheable segment is a hit now */
    for (size_t i = 0; i < rq->nsegs; i++) hy_entry_free(none[i]);
    CU_ASSERT_EQUAL_FATAL(reference_combine(f->c, f->ex, f->ref_st, sr, rq->nsegs, rq->query,
                                            rq->nq, rq->mode, rq->W, rq->repr.s, f->lr, none, &cnt,
                                            &e),
                          0);
    for (size_t i = 0; i < rq->nsegs; i++) hy_entry_free(none[i]);
    return hy_rel_diff(f->lc, f->lr, (size_t)f->c->vocab);
}

/* hy_combine_stream's view of a request: segment i's entry (rq->segs[i].entry)
 * becomes known only when the combiner waits for it when i is odd, at once
 * otherwise, so the request runs in several passes, some segments composed
 * together and some alone. Counts the waits and the probes. */
typedef struct arrivals {
    const hy_request *rq;
    int waits, early;
} arrivals;

static int arrive(void *ctx, size_t i, bool wait, const hy_entry **entry, hy_err *err)
{
    arrivals *a = ctx;
    (void)err;
    if (!wait && (i % 2) == 1) return HY_EAGAIN;
    if (wait)
        a->waits++;
    else
        a->early++;
    *entry = a->rq->segs[i].entry;
    return HY_OK;
}

static int refuse_third(void *ctx, size_t i, bool wait, const hy_entry **entry, hy_err *err)
{
    if (i == 2) return hy_err_set(err, HY_ECANCELED, "cancelled at segment 2");
    return arrive(ctx, i, wait, entry, err);
}

/* The same request through hy_combine_stream: the reference's logits, state
 * and counters, every segment asked for once, and the inline builds alike;
 * then a request whose await refuses its third segment fails with that code
 * and leaves nothing built. */
static void check_stream(fixture *f, hy_exec *ex, const char *label, const hy_request *rq,
                         const ref_counts *want)
{
    hy_err e = {0};
    hy_entry *bs[MAX_SEGS], *br[MAX_SEGS];
    ref_counts again; /* the reference again: compare_built ran other requests since */
    CU_ASSERT_EQUAL_FATAL(reference_combine(f->c, f->ex, f->ref_st, rq->segs, rq->nsegs, rq->query,
                                            rq->nq, rq->mode, rq->W, rq->repr.s, f->lr, br, &again,
                                            &e),
                          0);
    for (size_t i = 0; i < rq->nsegs; i++) hy_entry_free(br[i]);
    hy_result res = {.built = bs};
    arrivals a = {.rq = rq};
    const int rc = hy_combine_stream(ex, f->st, rq, arrive, &a, f->lc, &res, &e);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc) {
        printf("\n    %s %s %s: hy_combine_stream failed: %s", f->preset, hy_mode_name(rq->mode),
               label, e.msg);
        return;
    }
    CU_ASSERT_EQUAL(a.waits + a.early, (int)rq->nsegs);
    CU_ASSERT_EQUAL(res.hits, want->hits);
    CU_ASSERT_EQUAL(res.misses, want->misses);
    CU_ASSERT_EQUAL(res.uncacheable, want->uncacheable);
    CU_ASSERT_EQUAL(res.prefilled, want->prefilled);
    CU_ASSERT(res.passes >= 1 && res.passes <= (int)rq->nsegs + 1);
    const double dl = hy_rel_diff(f->lc, f->lr, (size_t)f->c->vocab);
    CU_ASSERT_EQUAL(hy_state_pos(f->st), hy_state_pos(f->ref_st));
    const double ds = hy_state_pos(f->st) == hy_state_pos(f->ref_st)
                          ? state_diff(f->c, f->st, f->ref_st)
                          : INFINITY;
    printf("\n    %-8s %-6s %-30s streamed in %d pass(es): logits %.1e, state %.1e", f->preset,
           hy_mode_name(rq->mode), label, res.passes, dl, ds);
    CU_ASSERT(dl <= TOL);
    CU_ASSERT(ds <= TOL);
    for (size_t i = 0; i < rq->nsegs; i++) {
        int w;
        hy_err ignored = {0};
        const bool cacheable =
            hy_entry_seam(f->c, rq->segs[i].n, mode_W(rq->mode, rq->W), &w, &ignored) == HY_OK;
        CU_ASSERT_EQUAL(bs[i] != NULL, !rq->segs[i].entry && cacheable); /* a miss built inline */
        hy_entry_free(bs[i]);
    }
    if (rq->nsegs < 3) return;
    hy_entry *bx[MAX_SEGS];
    hy_result rx = {.built = bx};
    arrivals b = {.rq = rq};
    CU_ASSERT_EQUAL(hy_combine_stream(ex, f->st, rq, refuse_third, &b, f->lc, &rx, &e),
                    HY_ECANCELED);
    for (size_t i = 0; i < rq->nsegs; i++) CU_ASSERT_PTR_NULL(bx[i]);
}

/* Runs rq through hy_combine on ex and through the reference on the
 * fixture's default executor. Asserts: the same counters, logits and final
 * state within TOL, entries for misses built alike. Prints the figures, and
 * returns the reference's counters in want. */
static void check_case(fixture *f, hy_exec *ex, const char *label, const hy_request *rq,
                       ref_counts *want)
{
    CU_ASSERT_FATAL(rq->nsegs <= MAX_SEGS);
    hy_err e = {0};
    hy_entry *bc[MAX_SEGS], *br[MAX_SEGS];
    CU_ASSERT_EQUAL_FATAL(reference_combine(f->c, f->ex, f->ref_st, rq->segs, rq->nsegs, rq->query,
                                            rq->nq, rq->mode, rq->W, rq->repr.s, f->lr, br, want,
                                            &e),
                          0);
    hy_result res = {.built = bc};
    const int rc = hy_combine(ex, f->st, rq, f->lc, &res, &e);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc) {
        printf("\n    %s %s %s: hy_combine failed: %s", f->preset, hy_mode_name(rq->mode), label,
               e.msg);
        for (size_t i = 0; i < rq->nsegs; i++) hy_entry_free(br[i]);
        return;
    }
    const double dl = hy_rel_diff(f->lc, f->lr, (size_t)f->c->vocab);
    CU_ASSERT_EQUAL(hy_state_pos(f->st), hy_state_pos(f->ref_st));
    const double ds = hy_state_pos(f->st) == hy_state_pos(f->ref_st)
                          ? state_diff(f->c, f->st, f->ref_st)
                          : INFINITY;
    CU_ASSERT_EQUAL(res.hits, want->hits);
    CU_ASSERT_EQUAL(res.misses, want->misses);
    CU_ASSERT_EQUAL(res.uncacheable, want->uncacheable);
    CU_ASSERT_EQUAL(res.prefilled, want->prefilled);
    CU_ASSERT_EQUAL(res.prefix_segments, 0);
    const double dr = compare_built(f, rq, bc, br);
    printf("\n    %-8s %-6s %-30s h%d m%d u%d, %4lld of %4lld computed: logits %.1e, state %.1e",
           f->preset, hy_mode_name(rq->mode), label, want->hits, want->misses, want->uncacheable,
           (long long)want->prefilled, (long long)hy_state_pos(f->ref_st), dl, ds);
    if (want->misses) printf(", built entries reused %.1e", dr);
    CU_ASSERT(dl <= TOL); /* NaN fails */
    CU_ASSERT(ds <= TOL);
    CU_ASSERT(dr <= TOL);
    for (size_t i = 0; i < rq->nsegs; i++) hy_entry_free(bc[i]), hy_entry_free(br[i]);
    check_stream(f, ex, label, rq, want);
}

/* --- request shapes --------------------------------------------------------------- */

/* A request's shape: per segment a kind and a length — 'h' a hit (its entry
 * built independently, from the empty state, under the mode's W), 'm' a
 * miss, 'u' a segment too short to cache under W = 8 (a miss under noseam,
 * which caches any length) — and the query's length. */
typedef struct shape {
    const char *label;
    const char *kinds;
    int lens[MAX_SEGS];
    int nq;
} shape;

/* The segments of a shape, with their tokens and entries. */
typedef struct segset {
    size_t ns;
    int32_t *tok[MAX_SEGS];
    hy_entry *ent[MAX_SEGS];
    hy_segment s[MAX_SEGS];
    int32_t *q;
} segset;

static void segset_make(fixture *f, segset *ss, const shape *sh, int Wm, hy_entry_dtype dt,
                        uint64_t seed)
{
    hy_err e = {0};
    ss->ns = strlen(sh->kinds);
    CU_ASSERT_FATAL(ss->ns <= MAX_SEGS);
    for (size_t i = 0; i < ss->ns; i++) {
        ss->tok[i] = tokens(sh->lens[i], f->c->vocab, 1000 * seed + i);
        ss->ent[i] = NULL;
        if (sh->kinds[i] == 'h') {
            hy_state_reset(f->ref_st); /* independent build */
            CU_ASSERT_EQUAL_FATAL(hy_entry_build(f->ex, f->ref_st, ss->tok[i], (size_t)sh->lens[i],
                                                 Wm, hy_entry_exact(dt), NULL, &ss->ent[i], &e),
                                  0);
        }
        ss->s[i] = (hy_segment){ss->tok[i], (size_t)sh->lens[i], ss->ent[i]};
    }
    ss->q = tokens(sh->nq, f->c->vocab, 1000 * seed + 999);
}

static void segset_free(segset *ss)
{
    for (size_t i = 0; i < ss->ns; i++) hy_entry_free(ss->ent[i]), free(ss->tok[i]);
    free(ss->q);
}

/* The shape's request in mode (W = 8, entries of dt) on executor ex (NULL:
 * the fixture's), checked against the reference; also checks that the
 * reference saw the shape as labelled, so that no case is vacuous. */
static void check_shape(fixture *f, hy_exec *ex, const shape *sh, hy_mode mode, hy_entry_dtype dt,
                        const char *label)
{
    const int W = HY_SEAM_DEFAULT, Wm = mode_W(mode, W);
    segset ss;
    segset_make(f, &ss, sh, Wm, dt, (uint64_t)(sh->lens[0] + 7 * sh->nq));
    hy_request rq = {.segs = ss.s,
                     .nsegs = ss.ns,
                     .query = ss.q,
                     .nq = (size_t)sh->nq,
                     .mode = mode,
                     .W = W,
                     .repr = hy_entry_exact(dt)};
    ref_counts want;
    check_case(f, ex ? ex : f->ex, label ? label : sh->label, &rq, &want);
    int h = 0, m = 0, u = 0;
    for (size_t i = 0; i < ss.ns; i++) {
        h += sh->kinds[i] == 'h', m += sh->kinds[i] == 'm', u += sh->kinds[i] == 'u';
        /* the 'u' lengths are what W = 8 cannot cache (conv window K − 1 = 3) */
        if (sh->kinds[i] == 'u' && f->c->conv_kernel > 1)
            CU_ASSERT(sh->lens[i] <= f->c->conv_kernel - 1);
    }
    /* without a conv (lightning) any segment of a token or more caches: the
     * 'u' ones are misses like the others */
    const bool conv = f->c->conv_kernel > 1;
    CU_ASSERT_EQUAL(want.hits, h);
    CU_ASSERT_EQUAL(want.misses, m + (Wm && conv ? 0 : u));
    CU_ASSERT_EQUAL(want.uncacheable, Wm && conv ? u : 0);
    segset_free(&ss);
}

/* tiny_shapes on tiny and tiny-moe, small_shapes on small, in every mode of
 * the pic family, on the fixture's executor, with fp32 entries. */
static void check_shapes(const shape *tiny_shapes, int n_tiny, const shape *small_shapes,
                         int n_small)
{
    for (int p = 0; p < N_PRESETS; p++) {
        fixture *f = fixture_get(p);
        const bool small = strcmp(f->preset, "small") == 0;
        const shape *sh = small ? small_shapes : tiny_shapes;
        const int n = small ? n_small : n_tiny;
        for (int k = 0; k < n; k++)
            for (int mi = 0; mi < N_MODES; mi++)
                check_shape(f, NULL, &sh[k], k_modes[mi], HY_ENTRY_F32, NULL);
    }
}

/* --- the tests ---------------------------------------------------------------------- */

static void test_all_hits_equal_reference(void)
{
    static const shape t[] = {{"all hits", "hhhh", {40, 70, 9, 55}, 7}};
    static const shape s[] = {{"all hits", "hhh", {24, 40, 12}, 5}};
    check_shapes(t, 1, s, 1);
}

/* misses also build entries alike (compare_built) */
static void test_all_misses_equal_reference_and_build_alike(void)
{
    static const shape t[] = {{"all misses", "mmmm", {40, 70, 9, 55}, 7}};
    static const shape s[] = {{"all misses", "mmm", {24, 40, 12}, 5}};
    check_shapes(t, 1, s, 1);
}

static void test_hits_and_misses_mixed_equal_reference(void)
{
    static const shape t[] = {
        {"miss, hit, miss, hit, hit", "mhmhh", {33, 50, 4, 64, 9}, 6},
        {"hits then misses", "hhmm", {20, 30, 25, 17}, 3},
    };
    static const shape s[] = {{"miss, hit, miss, hit", "mhmh", {20, 16, 9, 12}, 4}};
    check_shapes(t, 2, s, 1);
}

/* 1, 2 and 3 tokens: under W = 8 a seam narrower than the conv window, so
 * prefilled uncached between composed bodies; under noseam, misses. */
static void test_uncacheable_segments_between_hits_equal_reference(void)
{
    static const shape t[] = {
        {"hits around 1, 2, 3 tokens", "huhuhuh", {30, 1, 20, 2, 25, 3, 12}, 5},
        {"short ones together", "huuumh", {26, 3, 1, 2, 10, 15}, 1},
    };
    static const shape s[] = {{"hits around 1, 3 tokens", "huhuh", {16, 1, 12, 3, 10}, 3}};
    check_shapes(t, 2, s, 1);
}

static void test_hit_first_equal_reference(void)
{
    static const shape t[] = {
        {"one hit", "h", {60}, 4},
        {"hit, miss, short", "hmu", {45, 30, 2}, 2},
        {"one hit, one query token", "h", {5}, 1},
    };
    static const shape s[] = {{"hit, miss", "hm", {20, 16}, 3}};
    check_shapes(t, 3, s, 1);
}

/* bf16 storage of S in the hits and in the entries built inline: the
 * request's dtype reaches the inline builds, and both paths compose the same
 * rounded values. */
static void test_bf16_entries_mixed_equal_reference(void)
{
    static const shape t = {"bf16, mixed", "hmuhm", {40, 30, 2, 50, 12}, 4};
    static const shape s = {"bf16, mixed", "hmh", {18, 14, 12}, 3};
    for (int p = 0; p < N_PRESETS; p++) {
        fixture *f = fixture_get(p);
        const bool small = strcmp(f->preset, "small") == 0;
        check_shape(f, NULL, small ? &s : &t, HY_MODE_PIC, HY_ENTRY_BF16, NULL);
        if (!small) check_shape(f, NULL, &t, HY_MODE_NAIVE, HY_ENTRY_BF16, NULL);
    }
}

/* Where a hit's body sits among the tokens a one-pass forward computes
 * (seams of hits, other segments, the query): the count of those before it.
 * Writes at most MAX_SEGS; returns how many. */
static int hole_offsets(const shape *sh, hy_mode mode, const hy_model_config *c, int *out)
{
    const int Wm = mode_W(mode, HY_SEAM_DEFAULT);
    int n = 0, at = 0;
    for (int i = 0; sh->kinds[i]; i++) {
        if (sh->kinds[i] != 'h') {
            at += sh->lens[i];
            continue;
        }
        int w;
        hy_err e = {0};
        CU_ASSERT_EQUAL_FATAL(hy_entry_seam(c, (size_t)sh->lens[i], Wm, &w, &e), 0);
        at += w;
        out[n++] = at;
    }
    return n;
}

/* A request in several forward steps: executors of max_batch 5, 16 and 33
 * put step boundaries inside seams, misses and the query; max_batch h − 1,
 * h and h + 1 for each hole at computed offset h end a step just before a
 * hole's seam ends, at the hole, and one token past it. The reference runs on
 * the default executor (one step). */
static void check_steps(fixture *f, const shape *sh, hy_mode mode)
{
    hy_err e = {0};
    int holes[MAX_SEGS], B[8 + 3 * MAX_SEGS] = {5, 16, 33};
    int nB = 3;
    const int nh = hole_offsets(sh, mode, f->c, holes);
    for (int k = 0; k < nh; k++)
        for (int d = -1; d <= 1; d++) {
            const int b = holes[k] + d;
            bool seen = b < 1; /* 0 would be the default, not a boundary */
            for (int j = 0; j < nB; j++) seen |= B[j] == b;
            if (!seen) B[nB++] = b;
        }
    for (int b = 0; b < nB; b++) {
        hy_exec *ex;
        CU_ASSERT_EQUAL_FATAL(hy_exec_new(f->m, B[b], &ex, &e), 0);
        char label[64];
        snprintf(label, sizeof label, "%s, max_batch %d", sh->label, B[b]);
        check_shape(f, ex, sh, mode, HY_ENTRY_F32, label);
        hy_exec_free(ex);
    }
}

static void test_steps_inside_seams_misses_query_and_at_holes_equal_reference(void)
{
    /* two adjacent hits: under noseam their holes touch */
    static const shape t = {"hh m u h m", "hhmuhm", {40, 25, 30, 2, 33, 12}, 9};
    static const shape s = {"h m u h", "hmuh", {20, 14, 2, 18}, 6};
    for (int p = 0; p < N_PRESETS; p++) {
        fixture *f = fixture_get(p);
        if (strcmp(f->preset, "small") == 0) {
            check_steps(f, &s, HY_MODE_PIC);
            continue;
        }
        for (int mi = 0; mi < N_MODES; mi++) check_steps(f, &t, k_modes[mi]);
    }
}

/* More computed tokens than the default max_batch (1024): the boundary falls
 * inside the query, and inside the miss when counted in positions. */
static void test_longer_than_default_step_equal_reference(void)
{
    static const shape t = {"hit, 1000-token miss, hit", "hmh", {300, 1000, 200}, 40};
    for (int p = 0; p < 2; p++) { /* tiny, tiny-moe */
        fixture *f = fixture_get(p);
        for (int mi = 0; mi < N_MODES; mi++)
            check_shape(f, NULL, &t, k_modes[mi], HY_ENTRY_F32, NULL);
    }
}

/* A refused request: code and message, nothing built left behind. */
static void expect_refusal(fixture *f, hy_segment *s, size_t ns, const int32_t *q, size_t nq,
                           hy_mode mode, const char *what, const char *needle)
{
    hy_err e = {0};
    hy_entry *built[MAX_SEGS];
    for (size_t i = 0; i < ns; i++) built[i] = (hy_entry *)(uintptr_t)1; /* must be cleared */
    hy_request rq = {.segs = s, .nsegs = ns, .query = q, .nq = nq, .mode = mode, .W = 8};
    hy_result res = {.built = built};
    const int rc = hy_combine(f->ex, f->st, &rq, f->lc, &res, &e);
    printf("\n    %s: %s", what, e.msg);
    CU_ASSERT_EQUAL(rc, HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, needle));
    for (size_t i = 0; i < ns; i++) CU_ASSERT_PTR_NULL(built[i]);
}

static void test_bad_requests_refused_with_clear_errors(void)
{
    fixture *f = fixture_get(0);
    hy_err e = {0};
    int32_t *a = tokens(30, f->c->vocab, 1), *b = tokens(20, f->c->vocab, 2),
            *q = tokens(4, f->c->vocab, 3);
    hy_entry *b8, *b0, *a8;
    hy_state_reset(f->ref_st);
    CU_ASSERT_EQUAL_FATAL(
        hy_entry_build(f->ex, f->ref_st, b, 20, 8, hy_entry_exact(HY_ENTRY_F32), NULL, &b8, &e), 0);
    hy_state_reset(f->ref_st);
    CU_ASSERT_EQUAL_FATAL(
        hy_entry_build(f->ex, f->ref_st, b, 20, 0, hy_entry_exact(HY_ENTRY_F32), NULL, &b0, &e), 0);
    hy_state_reset(f->ref_st);
    CU_ASSERT_EQUAL_FATAL(
        hy_entry_build(f->ex, f->ref_st, a, 20, 8, hy_entry_exact(HY_ENTRY_F32), NULL, &a8, &e), 0);
    /* a miss first each time: its inline entry must not outlive the refusal */
    hy_segment s[2] = {{a, 30, NULL}, {b, 20, b8}};
    expect_refusal(f, s, 2, q, 0, HY_MODE_PIC, "empty query", "query is empty");
    expect_refusal(f, s, 2, NULL, 4, HY_MODE_PIC, "no query", "query");
    s[1].n = 0;
    expect_refusal(f, s, 2, q, 4, HY_MODE_PIC, "empty segment", "segment 1 is empty");
    s[1].n = 20;
    expect_refusal(f, s, 2, q, 4, HY_MODE_NOSEAM, "W = 8 entry in noseam", "seam");
    s[1].entry = b0;
    expect_refusal(f, s, 2, q, 4, HY_MODE_PIC, "W = 0 entry in pic", "seam");
    expect_refusal(f, s, 2, q, 4, HY_MODE_NAIVE, "W = 0 entry in naive", "seam");
    s[1].entry = a8; /* the first 20 tokens of a, not b */
    expect_refusal(f, s, 2, q, 4, HY_MODE_PIC, "entry of other tokens", "other tokens");
    s[1] = (hy_segment){a, 30, a8}; /* a prefix of the segment's tokens */
    expect_refusal(f, s, 2, q, 4, HY_MODE_PIC, "entry of a prefix", "other tokens");
    /* after the refusals the same state and executor still give the reference */
    s[1] = (hy_segment){b, 20, b8};
    hy_request rq = {.segs = s, .nsegs = 2, .query = q, .nq = 4, .mode = HY_MODE_PIC, .W = 8};
    ref_counts want;
    check_case(f, f->ex, "good request after refusals", &rq, &want);
    CU_ASSERT_EQUAL(want.hits, 1);
    CU_ASSERT_EQUAL(want.misses, 1);
    hy_entry_free(b8), hy_entry_free(b0), hy_entry_free(a8);
    free(a), free(b), free(q);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_onepass_", g_tmp, sizeof g_tmp)) return 1;
    static const hy_test_case cases[] = {
        {"all_hits_equal_reference", test_all_hits_equal_reference},
        {"all_misses_equal_reference_and_build_alike",
         test_all_misses_equal_reference_and_build_alike},
        {"hits_and_misses_mixed_equal_reference", test_hits_and_misses_mixed_equal_reference},
        {"uncacheable_segments_between_hits_equal_reference",
         test_uncacheable_segments_between_hits_equal_reference},
        {"hit_first_equal_reference", test_hit_first_equal_reference},
        {"bf16_entries_mixed_equal_reference", test_bf16_entries_mixed_equal_reference},
        {"steps_inside_seams_misses_query_and_at_holes_equal_reference",
         test_steps_inside_seams_misses_query_and_at_holes_equal_reference},
        {"longer_than_default_step_equal_reference", test_longer_than_default_step_equal_reference},
        {"bad_requests_refused_with_clear_errors", test_bad_requests_refused_with_clear_errors},
        {NULL, NULL},
    };
    int rc = hy_test_main("combine_one_pass", cases);
    fixtures_close();
    hy_test_rmtree(g_tmp);
    return rc;
}
