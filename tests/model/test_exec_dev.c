/*
 * The executor on a device (model/exec_dev.c) against the CPU executor, on
 * every Gated DeltaNet golden fixture and the generated tiny presets of the
 * family: a prefill in steps of 7 tokens (so steps cut runs and a chunk of
 * the delta rule spans steps), two decode steps, entries built on the device
 * (captures: T, S(body|0), the conv tail, canonical K/V) and reused there
 * (holes: composition in every stored form, K rotated to its positions), in
 * the modes pic and naive, chunked and token by token.
 *
 * In every build it runs the device executor with the CUDA kernels' twins
 * (HY_EXEC_EMULATED: the kernels' own bodies on the CPU, every launch,
 * pointer and stride of the executor the device would see); with a GPU it
 * runs the same comparisons on the device (HY_EXEC_CUDA), and says it
 * skipped them otherwise.
 *
 * Tolerances, relative to the reference's largest magnitude (hy_rel_diff):
 * logits and states 1e-4 (emulated: 5e-6 seen). Both executors compute in fp32 with the same
 * exp; they differ in the order of additions — the products (cuBLAS or the
 * CPU's BLAS against the CPU's own GEMM paths), the delta rule's chunked
 * sums (test_cuda_gdn holds one layer to 1e-5), the softmax over the
 * context — each ~1e-6 relative per layer, compounded through the layers
 * and the final norm of a random model whose activations are not damped
 * the way a trained model's are; the largest seen here is printed per case.
 * A wrong stride, row or head moves them by orders of magnitude more
 * (hole K at the wrong position: ~1e-1). A compact entry built on the
 * device, reused against the CPU's own: 5e-3 (its values were rounded to
 * bf16 independently of the CPU's; see the case).
 */
#include "exec_internal.h"
#include "hy_model.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <dirent.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HY_HAVE_CUDA_KERNELS
#include "hy_cuda.h"
#endif

#define TOL         1e-4
#define TOL_COMPACT 5e-3
#define TOL_BF16    6e-2

static char g_tmp[128];
static const char *const k_presets[] = {"tiny", "tiny-moe", "tiny-linear", NULL};

static double g_worst;
static double g_tol = TOL; /* the case's: TOL, or TOL_BF16 (test_bf16) */

/* Every part of two states at the same position: the largest relative
 * difference. */
static double state_diff(const hy_model *m, hy_state *a, hy_state *b)
{
    const hy_model_config *c = hy_model_cfg(m);
    CU_ASSERT_EQUAL_FATAL(hy_state_pos(a), hy_state_pos(b));
    static hy_state_tensor la[2 * HY_MAX_LAYERS], lb[2 * HY_MAX_LAYERS];
    uint64_t ta, tb;
    const int n = hy_state_layout(c, hy_state_pos(a), la, &ta);
    CU_ASSERT_EQUAL(hy_state_layout(c, hy_state_pos(b), lb, &tb), n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const float *x = hy_state_part_data(a, &la[i]), *y = hy_state_part_data(b, &lb[i]);
        if (!x || !y || !la[i].bytes) continue;
        const double r = hy_rel_diff(x, y, la[i].bytes / 4);
        if (!(r <= worst)) worst = r;
    }
    return worst;
}

static void check_within(const char *what, double r, double tol)
{
    if (tol == g_tol && !(r <= g_worst)) g_worst = r;
    if (!(r <= tol)) printf("\n    %s: relative difference %.3g > %.1g", what, r, tol);
    CU_ASSERT(r <= tol);
}

static void check(const char *what, double r)
{
    check_within(what, r, g_tol);
}

/* n bytes of p copied into the device's memory (the emulated device's is
 * the host's): where an hbm lease's bytes lie. */
static void *dev_copy(hy_exec_device kind, const void *p, size_t n)
{
    void *d = NULL;
    if (kind == HY_EXEC_EMULATED) {
        d = aligned_alloc(64, (n + 63) & ~(size_t)63);
        if (d) memcpy(d, p, n);
        return d;
    }
#ifdef HY_HAVE_CUDA_KERNELS
    hy_err e = {0};
    if (hy_cu_malloc(NULL, n, &d, &e) || hy_cu_copy(NULL, d, p, n, HY_CU_H2D, &e)) {
        printf("\n    device copy: %s", e.msg);
        return NULL;
    }
#endif
    return d;
}

static void dev_free(hy_exec_device kind, void *d)
{
    if (kind == HY_EXEC_EMULATED) {
        free(d);
        return;
    }
#ifdef HY_HAVE_CUDA_KERNELS
    hy_cu_free(NULL, d);
#endif
}

/* Entry ce (the CPU's) composed by the device executor dx from the host,
 * and from a copy lying in the device's memory, composed where it lies
 * (hy_exec_view_device): the same bytes through the same kernels, so the
 * same bits; everything else refuses the device's copy, naming why. */
static void device_resident(const char *dir, const hy_model *m, hy_exec_device kind, hy_exec *cx,
                            hy_exec *dx, hy_state *cs, hy_state *ds, const hy_entry *ce,
                            const int32_t *tok, float *lc, float *ld, int r)
{
    hy_err e = {0};
    const hy_model_config *c = hy_model_cfg(m);
    const size_t V = (size_t)c->vocab;
    void *buf = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(ce, &buf, &len, &e), 0);
    hy_entry *he = NULL, *ve = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_entry_deserialize(m, buf, len, &he, &e), 0);
    void *dev = dev_copy(kind, buf, len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dev);
    int rc = hy_exec_view_device(dx, dev, len, &ve, &e);
    if (rc) printf("\n    %s: device view: %s", dir, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(hy_entry_device(ve), kind == HY_EXEC_EMULATED ? -1 : 0);
    CU_ASSERT_EQUAL(hy_entry_device(he), HY_ENTRY_ON_HOST);
    const int32_t *ta, *tb;
    CU_ASSERT_EQUAL(hy_entry_tokens(ve, &ta), hy_entry_tokens(ce, &tb));
    CU_ASSERT(memcmp(ta, tb, (size_t)hy_entry_tokens(ce, &tb) * sizeof *ta) == 0);
    for (int use_T = 0; use_T < 2; use_T++) {
        for (int side = 0; side < 2; side++) {
            hy_state_reset(ds);
            CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(dx, ds, tok, 12, NULL, &e), 0);
            rc = hy_entry_apply(dx, ds, side ? ve : he, use_T, &e);
            if (rc) printf("\n    %s: apply (%s): %s", dir, side ? "on the device" : "host", e.msg);
            CU_ASSERT_EQUAL_FATAL(rc, 0);
            CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(dx, ds, tok + 3, 9, side ? ld : lc, &e), 0);
            if (!side) { /* the host side's state kept in cs for the comparison */
                hy_state_reset(cs);
                CU_ASSERT_EQUAL_FATAL(hy_state_copy(cs, ds, &e), 0);
            }
        }
        char what[200];
        snprintf(what, sizeof what, "%s entry lying on the device (repr %d, %s)", dir, r,
                 use_T ? "pic" : "naive");
        const int same = memcmp(lc, ld, V * sizeof *lc) == 0 && state_diff(m, ds, cs) == 0;
        if (!same) printf("\n    %s: not the same bits as from the host", what);
        CU_ASSERT(same);
    }
    /* the CPU executor, and serialising, refuse it */
    hy_state_reset(cs);
    CU_ASSERT_EQUAL(hy_entry_apply(cx, cs, ve, true, &e), HY_EINVAL);
    CU_ASSERT(strstr(e.msg, "lies in the memory of") != NULL);
    void *b2 = NULL;
    size_t l2 = 0;
    CU_ASSERT_EQUAL(hy_entry_serialize(ve, &b2, &l2, &e), HY_EINVAL);
    hy_entry_free(ve);
    if (kind == HY_EXEC_EMULATED) { /* a wrong byte in what is read fails the view */
        unsigned char *d = dev;
        d[100] ^= 1; /* the header (its checksum) */
        CU_ASSERT_EQUAL(hy_exec_view_device(dx, dev, len, &ve, &e), HY_EFORMAT);
        CU_ASSERT(strstr(e.msg, "header checksum") != NULL);
        d[100] ^= 1;
        CU_ASSERT_EQUAL(hy_exec_view_device(dx, dev, len - 64, &ve, &e), HY_EFORMAT);
        CU_ASSERT(strstr(e.msg, "truncated") != NULL);
        CU_ASSERT_EQUAL(hy_exec_view_device(cx, dev, len, &ve, &e), HY_EINVAL); /* on the CPU */
    }
    dev_free(kind, dev);
    hy_entry_free(he);
    free(buf);
}

/* One model, its matrices kept as w says: the device executor (kind)
 * against the CPU's on the same inputs. */
static void compare(const char *dir, hy_exec_device kind, hy_gdn_mode mode, hy_weights w)
{
    hy_err e = {0};
    hy_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_model_open_with(&m, dir, w, &e), 0);
    const hy_model_config *c = hy_model_cfg(m);
    hy_exec *cx = NULL, *dx = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 7, &cx, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 7, &dx, &e), 0);
    hy_exec_set_gdn_mode(cx, mode);
    hy_exec_set_gdn_mode(dx, mode);
    int rc = hy_exec_set_device(dx, kind, 0, &e);
    if (rc) printf("\n    %s: %s", dir, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    hy_state *cs = NULL, *ds = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &cs, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &ds, &e), 0);
    const int V = c->vocab;
    float *lc = malloc((size_t)V * sizeof *lc), *ld = malloc((size_t)V * sizeof *ld);
    int32_t tok[96];
    for (int i = 0; i < 96; i++) tok[i] = (i * 37 + 11) % V;
    char what[160];

    /* a prefill in steps, then decode steps */
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, cs, tok, 50, lc, &e), 0);
    rc = hy_exec_prefill(dx, ds, tok, 50, ld, &e);
    if (rc) printf("\n    device prefill: %s", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    snprintf(what, sizeof what, "%s prefill logits", dir);
    check(what, hy_rel_diff(ld, lc, (size_t)V));
    snprintf(what, sizeof what, "%s prefill state", dir);
    check(what, state_diff(m, ds, cs));
    for (int t = 0; t < 2; t++) {
        CU_ASSERT_EQUAL_FATAL(hy_exec_decode(cx, cs, 5 + t, lc, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_exec_decode(dx, ds, 5 + t, ld, &e), 0);
    }
    snprintf(what, sizeof what, "%s decode logits", dir);
    check(what, hy_rel_diff(ld, lc, (size_t)V));
    snprintf(what, sizeof what, "%s decode state", dir);
    check(what, state_diff(m, ds, cs));

    /* entries: built on each executor from an empty state, in the exact
     * form and the compact one (bf16 parts, tolerance 0.03); the CPU's
     * entry reused after a prefix by both executors, with T (pic) and
     * without (naive): the same sections composed by each */
    const hy_entry_repr reps[2] = {hy_entry_exact(HY_ENTRY_F32),
                                   {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.03f}};
    for (int r = 0; r < 2; r++) {
        hy_entry *ce = NULL, *de = NULL;
        hy_state_reset(cs);
        hy_state_reset(ds);
        CU_ASSERT_EQUAL_FATAL(hy_entry_build(cx, cs, tok + 20, 40, 8, reps[r], lc, &ce, &e), 0);
        rc = hy_entry_build(dx, ds, tok + 20, 40, 8, reps[r], ld, &de, &e);
        if (rc) printf("\n    device build: %s", e.msg);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        snprintf(what, sizeof what, "%s build (repr %d) logits", dir, r);
        check(what, hy_rel_diff(ld, lc, (size_t)V));
        for (int use_T = 0; use_T < 2; use_T++) {
            hy_state_reset(cs);
            hy_state_reset(ds);
            CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, cs, tok, 12, NULL, &e), 0);
            CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(dx, ds, tok, 12, NULL, &e), 0);
            CU_ASSERT_EQUAL_FATAL(hy_entry_apply(cx, cs, ce, use_T, &e), 0);
            rc = hy_entry_apply(dx, ds, ce, use_T, &e);
            if (rc) printf("\n    device apply: %s", e.msg);
            CU_ASSERT_EQUAL_FATAL(rc, 0);
            CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, cs, tok + 3, 9, lc, &e), 0);
            CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(dx, ds, tok + 3, 9, ld, &e), 0);
            snprintf(what, sizeof what, "%s reuse (repr %d, %s) logits", dir, r,
                     use_T ? "pic" : "naive");
            check(what, hy_rel_diff(ld, lc, (size_t)V));
            snprintf(what, sizeof what, "%s reuse (repr %d, %s) state", dir, r,
                     use_T ? "pic" : "naive");
            check(what, state_diff(m, ds, cs));
        }
        device_resident(dir, m, kind, cx, dx, cs, ds, ce, tok, lc, ld, r);
        /* the device's entry reused on the CPU against the CPU's: the same
         * sections to the executors' agreement when exact; compact, each was
         * rounded from T and S that differ by ~1e-6, so a bf16 value may
         * round the other way (2^-8 of it) or a head take another rank —
         * both within the representation's bound of the exact entry */
        hy_state_reset(cs);
        CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, cs, tok, 12, NULL, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_entry_apply(cx, cs, de, true, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, cs, tok + 3, 9, ld, &e), 0);
        hy_state_reset(ds);
        CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, ds, tok, 12, NULL, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_entry_apply(cx, ds, ce, true, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, ds, tok + 3, 9, lc, &e), 0);
        snprintf(what, sizeof what, "%s device-built entry on the CPU (repr %d)", dir, r);
        check_within(what, hy_rel_diff(ld, lc, (size_t)V), r ? fmax(TOL_COMPACT, g_tol) : g_tol);
        hy_entry_free(ce);
        hy_entry_free(de);
    }
    free(lc);
    free(ld);
    hy_state_free(cs);
    hy_state_free(ds);
    hy_exec_free(cx);
    hy_exec_free(dx);
    hy_model_close(m);
}

static void bf16_products(hy_exec_device kind);

/* Every golden fixture of the family the device executor runs (Qwen3-Next,
 * Qwen3.5 dense and MoE): found in tests/fixtures/golden rather than listed
 * again, so that a new one is compared too. */
static void every_golden(hy_exec_device kind)
{
    char base[300], dir[600];
    snprintf(base, sizeof base, "%s/golden", HY_FIXTURES_DIR);
    struct dirent **names = NULL;
    const int n = scandir(base, &names, NULL, alphasort);
    CU_ASSERT_FATAL(n > 0);
    int used = 0;
    for (int i = 0; i < n; i++) {
        snprintf(dir, sizeof dir, "%s/%s", base, names[i]->d_name);
        free(names[i]);
        hy_err e = {0};
        hy_model *m = NULL;
        if (dir[strlen(base) + 1] == '.' || hy_model_open(&m, dir, &e)) continue;
        const hy_arch a = hy_model_cfg(m)->arch;
        hy_model_close(m);
        if (a != HY_ARCH_QWEN3_NEXT && a != HY_ARCH_QWEN3_5 && a != HY_ARCH_QWEN3_5_MOE) continue;
        compare(dir, kind, HY_GDN_CHUNKED, HY_WEIGHTS_AUTO);
        used++;
    }
    free(names);
    printf("\n    %d golden fixtures of the family", used);
    CU_ASSERT(used >= 8); /* the eight there are today */
}

static void every_model(hy_exec_device kind)
{
    char dir[400];
    g_worst = 0;
    every_golden(kind);
    for (int i = 0; k_presets[i]; i++) {
        snprintf(dir, sizeof dir, "%s/%s", g_tmp, k_presets[i]);
        compare(dir, kind, HY_GDN_CHUNKED, HY_WEIGHTS_AUTO);
        compare(dir, kind, HY_GDN_RECURRENT, HY_WEIGHTS_AUTO);
    }
    printf("\n    largest relative difference: %.3g (tolerance %.1g) ", g_worst, TOL);
    bf16_products(kind);
}

/* bf16 products (HY_WEIGHTS_BF16 on BF16 checkpoints): the device keeps
 * the matrices in bf16 and multiplies more than 4 rows in bf16 (activations
 * rounded to bf16, sums in fp32), fewer in fp32 — the CPU's rule. Where the
 * CPU has bf16 arithmetic too (AVX512-BF16: hy_model_bf16_math) the two
 * round the same activations and only the order of sums differs: TOL, on
 * the dense and the MoE preset. Where it has not, the CPU multiplies the
 * activations unrounded, and the device's rounding (2^-9 relative per
 * value) is the difference, compounded through the layers of a random
 * model: TOL_BF16 (3.4e-2 seen), the dense preset only — a router's logits
 * that close may pick another expert, a difference of order one. A wrong
 * row or stride is of order one too. */
static void bf16_products(hy_exec_device kind)
{
    static const char *const presets[] = {"tiny-bf16", "tiny-moe-bf16", NULL};
    char dir[400];
    for (int i = 0; presets[i]; i++) {
        snprintf(dir, sizeof dir, "%s/%s", g_tmp, presets[i]);
        hy_err e = {0};
        hy_model *m = NULL;
        CU_ASSERT_EQUAL_FATAL(hy_model_open_with(&m, dir, HY_WEIGHTS_BF16, &e), 0);
        const bool cpu_rounds = hy_model_bf16_math(m), routed = hy_model_cfg(m)->n_experts > 0;
        hy_model_close(m);
        if (routed && !cpu_rounds) {
            printf("\n    %s, bf16 products: not compared (this CPU multiplies in fp32, and "
                   "the routing may differ) ",
                   presets[i]);
            continue;
        }
        g_tol = cpu_rounds ? TOL : TOL_BF16;
        g_worst = 0;
        compare(dir, kind, HY_GDN_CHUNKED, HY_WEIGHTS_BF16);
        printf("\n    %s, bf16 products (the CPU's in %s): largest relative difference %.3g "
               "(tolerance %.1g) ",
               presets[i], cpu_rounds ? "bf16 too" : "fp32", g_worst, g_tol);
        g_tol = TOL;
    }
}

static void test_emulated(void)
{
    every_model(HY_EXEC_EMULATED);
}

static void test_cuda(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tiny", g_tmp);
    hy_err e = {0};
    hy_model *m = NULL;
    hy_exec *x = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 0, &x, &e), 0);
    const int rc = hy_exec_set_device(x, HY_EXEC_CUDA, 0, &e);
    hy_exec_free(x);
    hy_model_close(m);
    if (rc) {
        /* no GPU here, or a build without the kernels: the clear error, and
         * the CPU executor untouched */
        CU_ASSERT(rc == HY_ENOTFOUND || rc == HY_EUNSUPPORTED);
        printf("\n    test_exec_dev: CUDA cases skipped: %s ", e.msg);
        return;
    }
    every_model(HY_EXEC_CUDA);
}

/* The state's mirror on the device: a decode step after a pass of the same
 * state copies nothing up, and anything the host does to the state between
 * passes (a write through hy_state_S, a CPU pass, another state) makes the
 * next pass copy it up again — a stale mirror would decode from the state
 * as it was. */
static void test_mirror(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tiny", g_tmp);
    hy_err e = {0};
    hy_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, dir, &e), 0);
    const hy_model_config *c = hy_model_cfg(m);
    hy_exec *cx = NULL, *dx = NULL;
    hy_state *cs = NULL, *ds = NULL, *other = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 7, &cx, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 7, &dx, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_set_device(dx, HY_EXEC_EMULATED, 0, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &cs, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &ds, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &other, &e), 0);
    const size_t V = (size_t)c->vocab;
    float *lc = malloc(V * sizeof *lc), *ld = malloc(V * sizeof *ld);
    int32_t tok[20];
    for (int i = 0; i < 20; i++) tok[i] = (i * 31 + 5) % c->vocab;
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, cs, tok, 20, lc, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(dx, ds, tok, 20, ld, &e), 0);
    const uint64_t u0 = hy_dev_exec_state_uploads(dx->dev);
    for (int t = 0; t < 3; t++) {
        CU_ASSERT_EQUAL_FATAL(hy_exec_decode(cx, cs, 7 + t, lc, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_exec_decode(dx, ds, 7 + t, ld, &e), 0);
        check("mirror: decode after a pass", hy_rel_diff(ld, lc, V));
    }
    CU_ASSERT_EQUAL(hy_dev_exec_state_uploads(dx->dev), u0); /* nothing went up */
    int li = 0;
    while (c->layer_kind[li] != HY_LAYER_LINEAR) li++;
    const size_t ss = (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv * sizeof(float);
    memset(hy_state_S(cs, li), 0, ss); /* the host writes the state */
    memset(hy_state_S(ds, li), 0, ss);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(cx, cs, 11, lc, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(dx, ds, 11, ld, &e), 0);
    check("mirror: decode after the host wrote S", hy_rel_diff(ld, lc, V));
    CU_ASSERT_EQUAL(hy_dev_exec_state_uploads(dx->dev), u0 + 1);
    /* another state through the same executor, then the first again */
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(dx, other, tok, 5, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(cx, cs, 12, lc, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(dx, ds, 12, ld, &e), 0);
    check("mirror: decode after another state's pass", hy_rel_diff(ld, lc, V));
    /* a CPU pass over the device's state */
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(cx, cs, 13, lc, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(cx, ds, 13, ld, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(cx, cs, 14, lc, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(dx, ds, 14, ld, &e), 0);
    check("mirror: decode after a CPU pass", hy_rel_diff(ld, lc, V));
    CU_ASSERT_EQUAL(hy_dev_exec_state_uploads(dx->dev), u0 + 4);
    free(lc), free(ld);
    hy_state_free(cs), hy_state_free(ds), hy_state_free(other);
    hy_exec_free(cx), hy_exec_free(dx);
    hy_model_close(m);
}

/* The executors of one model on one device share its weights: uploaded by
 * the first, still there for the others when it goes, freed with the last. */
static void test_shared_weights(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tiny", g_tmp);
    hy_err e = {0};
    hy_model *m = NULL, *m2 = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m2, dir, &e), 0);
    hy_exec *cx = NULL, *a = NULL, *b = NULL, *other = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 7, &cx, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 7, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 7, &b, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m2, 7, &other, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_set_device(a, HY_EXEC_EMULATED, 0, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_set_device(b, HY_EXEC_EMULATED, 0, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_set_device(other, HY_EXEC_EMULATED, 0, &e), 0);
    CU_ASSERT_PTR_EQUAL(hy_dev_exec_weights(a->dev), hy_dev_exec_weights(b->dev));
    CU_ASSERT_PTR_NOT_EQUAL(hy_dev_exec_weights(a->dev), hy_dev_exec_weights(other->dev));
    hy_exec_free(a); /* the first goes: the second still computes */
    const size_t V = (size_t)hy_model_cfg(m)->vocab;
    float *lc = malloc(V * sizeof *lc), *ld = malloc(V * sizeof *ld);
    int32_t tok[16];
    for (int i = 0; i < 16; i++) tok[i] = (i * 13 + 3) % (int)V;
    hy_state *cs = NULL, *ds = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &cs, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &ds, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(cx, cs, tok, 16, lc, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(b, ds, tok, 16, ld, &e), 0);
    check("shared weights, after the first executor went", hy_rel_diff(ld, lc, V));
    free(lc), free(ld);
    hy_state_free(cs), hy_state_free(ds);
    hy_exec_free(b), hy_exec_free(other), hy_exec_free(cx);
    hy_model_close(m), hy_model_close(m2);
}

/* What the device executor does not run is refused, naming why, and the
 * executor stays on the CPU. */
static void test_refusals(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tiny-kimi", g_tmp);
    hy_err e = {0};
    hy_model *m = NULL;
    hy_exec *x = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 0, &x, &e), 0);
    CU_ASSERT_EQUAL(hy_exec_set_device(x, HY_EXEC_EMULATED, 0, &e), HY_EUNSUPPORTED);
    CU_ASSERT(strstr(e.msg, "Gated DeltaNet") != NULL);
    CU_ASSERT_STRING_EQUAL(hy_exec_device_name(x), "cpu");
    hy_exec_free(x);
    hy_model_close(m);
    snprintf(dir, sizeof dir, "%s/tiny", g_tmp);
    CU_ASSERT_EQUAL_FATAL(hy_model_open_with(&m, dir, HY_WEIGHTS_Q8, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 0, &x, &e), 0);
    CU_ASSERT_EQUAL(hy_exec_set_device(x, HY_EXEC_EMULATED, 0, &e), HY_EUNSUPPORTED);
    CU_ASSERT(strstr(e.msg, "q8") != NULL);
    hy_exec_free(x);
    hy_model_close(m);
    hy_exec_device k;
    int dev;
    CU_ASSERT(hy_exec_device_parse("cuda:3", &k, &dev) == HY_OK && k == HY_EXEC_CUDA && dev == 3);
    CU_ASSERT(hy_exec_device_parse("cuda", &k, &dev) == HY_OK && k == HY_EXEC_CUDA && dev == 0);
    CU_ASSERT(hy_exec_device_parse("cpu", &k, &dev) == HY_OK && k == HY_EXEC_CPU);
    CU_ASSERT(hy_exec_device_parse("emulated", &k, &dev) == HY_OK && k == HY_EXEC_EMULATED);
    CU_ASSERT_EQUAL(hy_exec_device_parse("cuda:", &k, &dev), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_exec_device_parse("cuda:x", &k, &dev), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_exec_device_parse("gpu", &k, &dev), HY_EINVAL);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_exec_dev_", g_tmp, sizeof g_tmp)) return 1;
    const char *presets[] = {"tiny", "tiny-moe", "tiny-linear", "tiny-kimi", "tiny", "tiny-moe"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char dir[400];
        hy_err e = {0};
        const bool bf16 = i >= 4; /* the last two as BF16 checkpoints */
        snprintf(dir, sizeof dir, "%s/%s%s", g_tmp, presets[i], bf16 ? "-bf16" : "");
        if (hy_model_init(presets[i], 7, dir, bf16 ? "BF16" : "F32", &e)) {
            fprintf(stderr, "%s: %s\n", presets[i], e.msg);
            return 1;
        }
    }
    static const hy_test_case cases[] = {
        {"the device executor, its kernels emulated, equals the CPU's", test_emulated},
        {"on a GPU: the same", test_cuda},
        {"the state's mirror: reused while current, copied up when not", test_mirror},
        {"the executors of a model on a device share its weights", test_shared_weights},
        {"refusals", test_refusals},
        {NULL, NULL},
    };
    int rc = hy_test_main("exec_dev", cases);
    hy_test_rmtree(g_tmp);
    return rc;
}
