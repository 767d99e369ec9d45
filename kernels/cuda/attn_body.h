/*
 * The arithmetic of attn.cu's kernels as bodies (hy_cu_body.h): causal
 * softmax attention over a KV cache with a streaming softmax, the merge of
 * a split context, and a hole's keys rotated to their positions.
 *
 * Attention. A block takes R stacked rows of one KV head g — stacked row s
 * is query row s / G of query head g·G + s % G, G = Hq / Hkv, the order
 * hy_attention_heads stacks them in — so the G heads that read the same
 * keys share each key tile the block loads. It walks its keys in tiles of
 * HY_CU_ATTN_BK, up to the largest position among its rows, keeping per row
 * the running maximum m, the running sum l of exp(score − m) and the
 * unnormalised output O in shared memory; a tile whose maximum exceeds m
 * rescales l and O by exp(m_old − m_new) first. So the context may be as
 * long as the cache, with shared memory fixed by hd alone. Per tile, four
 * phases separated by barriers:
 *   load        the tile's keys and values into shared memory;
 *   scores      s = scale·q·k for every (row, key), −∞ past the row's position;
 *   softmax     per row: the new maximum, the tile's weights, l and the factor;
 *   accumulate  O ← factor·O + P·V_tile.
 * start (queries in, O and the running values reset) comes before the first
 * tile, finish (O / l out) after the last.
 *
 * A few rows over a long context (a decode step) make too few blocks for the
 * device; then each row tile's key tiles are cut into `splits` consecutive
 * ranges, one block each, which write their rows' (m, l, O) to work instead,
 * and a second kernel merges them: o = Σ e^(m_s − M)·O_s / Σ e^(m_s − M)·l_s.
 *
 * A hole. The entry holds each body token's key canonical (unrotated);
 * written at position p it is rotated by the rope table's row p — the
 * rotate_half pairs (i, i + rd/2) — the rest of the key and the value
 * copied. The products are rounded one by one (no fused multiply-add), so
 * the device writes the bits hy_rope_rotate writes.
 *
 * attn.cu's kernels call these bodies with __syncthreads() between phases;
 * their twins (emu_attn.c) call them for every thread of every block, one
 * phase after another, on the host. The launchers' argument checks and
 * their choice of splits are at the end, host code shared by both, so that
 * a launcher and its twin refuse the same arguments with the same message
 * and cut the same context into the same ranges.
 */
#ifndef HY_CU_ATTN_BODY_H
#define HY_CU_ATTN_BODY_H

#include "hy_cu_body.h"
#include "include/hy_cuda_attn.h"

#include <stddef.h>
#include <stdint.h>

#define HY_CU_ATTN_BK           32  /* keys per tile */
#define HY_CU_ATTN_THREADS      128 /* threads per block */
#define HY_CU_ATTN_BUSY         264 /* blocks that fill an H100 (132 SMs) twice */
#define HY_CU_ATTN_SPLIT        512 /* keys a split block reads at least */
#define HY_CU_ATTN_SPLITS       64  /* the most splits of one row tile */
#define HY_CU_ATTN_ELEM_THREADS 256 /* threads per block of the merge and a hole's K/V */

/* a·b rounded on its own: nvcc would otherwise fuse a·b − c·d into an FMA. */
HY_CU_BODY float hy_cu_mul_rn(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

/* Stacked rows per block: about 4096 floats of queries and of outputs. */
HY_CU_BODY int hy_cu_attn_rows(int hd)
{
    const int r = 4096 / hd;
    return r > 64 ? 64 : (r < 8 ? 8 : r);
}

/* A block's shared memory, in floats: Q [R][hd], K [BK][hd + 1] (the odd
 * stride puts a warp's 32 keys in 32 banks), V [BK][hd], P [R][BK + 1],
 * O [R][hd], then m, l and the rescale factor [R] each. */
typedef struct hy_cu_attn_smem {
    float *q, *k, *v, *p, *o, *m, *l, *al;
} hy_cu_attn_smem;

HY_CU_BODY size_t hy_cu_attn_shared_floats(int hd)
{
    const size_t R = (size_t)hy_cu_attn_rows(hd), d = (size_t)hd, B = HY_CU_ATTN_BK;
    return R * d + B * (d + 1) + B * d + R * (B + 1) + R * d + 3 * R;
}

HY_CU_BODY hy_cu_attn_smem hy_cu_attn_smem_of(float *sh, int hd)
{
    const size_t R = (size_t)hy_cu_attn_rows(hd), d = (size_t)hd, B = HY_CU_ATTN_BK;
    hy_cu_attn_smem s;
    s.q = sh;
    s.k = s.q + R * d;
    s.v = s.k + B * (d + 1);
    s.p = s.v + B * d;
    s.o = s.p + R * (B + 1);
    s.m = s.o + R * d;
    s.l = s.m + R;
    s.al = s.l + R;
    return s;
}

/* What one block does, from its index. */
typedef struct hy_cu_attn_plan {
    int G, R;        /* query heads per KV head, stacked rows per block */
    int g;           /* the KV head */
    int row0, nrows; /* stacked rows [row0, row0 + nrows) of the n·G */
    int split, splits;
    int64_t kend;   /* keys the block's rows see: their largest position + 1 */
    int64_t t0, t1; /* the key tiles [t0, t1) this block reads */
} hy_cu_attn_plan;

HY_CU_BODY int64_t hy_cu_attn_pos(const hy_cu_attn *a, int i)
{
    return a->pos ? a->pos[i] : a->pos0 + i;
}

/* Row tiles of the problem: the grid's x. */
HY_CU_BODY int hy_cu_attn_row_tiles(const hy_cu_attn *a)
{
    const int R = hy_cu_attn_rows(a->hd);
    return (a->n * (a->Hq / a->Hkv) + R - 1) / R;
}

/* How many ranges each row tile's keys are cut into: enough blocks for the
 * device when there are few, each range at least HY_CU_ATTN_SPLIT keys. */
HY_CU_BODY int hy_cu_attn_splits(const hy_cu_attn *a)
{
    const int blocks = hy_cu_attn_row_tiles(a) * a->Hkv;
    if (blocks >= HY_CU_ATTN_BUSY) return 1;
    int s = (HY_CU_ATTN_BUSY + blocks - 1) / blocks;
    const int64_t by_ctx = a->ctx / HY_CU_ATTN_SPLIT;
    if ((int64_t)s > by_ctx) s = (int)by_ctx;
    if (s > HY_CU_ATTN_SPLITS) s = HY_CU_ATTN_SPLITS;
    return s < 1 ? 1 : s;
}

/* Floats of work `splits` ranges take: (O [hd], m, l) per range, row, head. */
HY_CU_BODY size_t hy_cu_attn_work_floats(const hy_cu_attn *a, int splits)
{
    if (splits <= 1) return 0;
    return (size_t)splits * (size_t)a->n * (size_t)a->Hq * ((size_t)a->hd + 2);
}

/* Block (bx, by, bz): row tile bx counted from the last (the longest
 * context goes first), KV head by, key range bz of splits. */
HY_CU_BODY void hy_cu_attn_plan_of(const hy_cu_attn *a, int splits, int bx, int by, int bz,
                                   hy_cu_attn_plan *p)
{
    p->G = a->Hq / a->Hkv;
    p->R = hy_cu_attn_rows(a->hd);
    p->g = by;
    p->row0 = (hy_cu_attn_row_tiles(a) - 1 - bx) * p->R;
    const int left = a->n * p->G - p->row0;
    p->nrows = left < p->R ? left : p->R;
    p->split = bz;
    p->splits = splits;
    int64_t last = 0;
    for (int i = p->row0 / p->G; i <= (p->row0 + p->nrows - 1) / p->G; i++) {
        const int64_t at = hy_cu_attn_pos(a, i);
        last = at > last ? at : last;
    }
    p->kend = last + 1;
    const int64_t tiles = (p->kend + HY_CU_ATTN_BK - 1) / HY_CU_ATTN_BK;
    const int64_t per = (tiles + splits - 1) / splits;
    p->t0 = (int64_t)bz * per < tiles ? (int64_t)bz * per : tiles;
    p->t1 = p->t0 + per < tiles ? p->t0 + per : tiles;
}

/* Stacked row r's query row and head; a padding row (r ≥ nrows) reads as
 * the block's last real one. */
HY_CU_BODY void hy_cu_attn_row(const hy_cu_attn_plan *p, int r, int *i, int *h)
{
    const int s = p->row0 + (r < p->nrows ? r : p->nrows - 1);
    *i = s / p->G;
    *h = p->g * p->G + s % p->G;
}

/* Keys of tile kt the block reads (the last tile may be short). */
HY_CU_BODY int hy_cu_attn_tile_keys(const hy_cu_attn_plan *p, int64_t kt)
{
    const int64_t left = p->kend - kt * HY_CU_ATTN_BK;
    return left < HY_CU_ATTN_BK ? (int)left : HY_CU_ATTN_BK;
}

/* Phase: the block's queries into Q (padding rows, past nrows, zero), O and
 * l zero, m −∞. */
HY_CU_BODY void hy_cu_attn_start(const hy_cu_attn *a, const hy_cu_attn_plan *p, int tid, int nthr,
                                 float *sh)
{
    const hy_cu_attn_smem s = hy_cu_attn_smem_of(sh, a->hd);
    const int hd = a->hd;
    for (int e = tid; e < p->R * hd; e += nthr) {
        const int r = e / hd, d = e % hd;
        int i, h;
        hy_cu_attn_row(p, r, &i, &h);
        s.q[e] = r < p->nrows ? a->q[(size_t)i * a->ldq + (size_t)h * a->qhs + d] : 0.0f;
        s.o[e] = 0.0f;
    }
    for (int r = tid; r < p->R; r += nthr) {
        s.m[r] = -INFINITY;
        s.l[r] = 0.0f;
        s.al[r] = 0.0f;
    }
}

/* Phase: key tile kt's keys and values of head g into K and V. */
HY_CU_BODY void hy_cu_attn_load(const hy_cu_attn *a, const hy_cu_attn_plan *p, int64_t kt, int tid,
                                int nthr, float *sh)
{
    const hy_cu_attn_smem s = hy_cu_attn_smem_of(sh, a->hd);
    const int hd = a->hd, nk = hy_cu_attn_tile_keys(p, kt);
    const int64_t k0 = kt * HY_CU_ATTN_BK;
    for (int e = tid; e < nk * hd; e += nthr) {
        const int j = e / hd, d = e % hd;
        const size_t col = (size_t)p->g * hd + d;
        s.k[(size_t)j * (hd + 1) + d] = a->K[(size_t)(k0 + j) * a->ldk + col];
        s.v[e] = a->V[(size_t)(k0 + j) * a->ldv + col];
    }
}

/* Phase: P[r][j] = scale·q_r·k_j, or −∞ for a key past row r's position
 * (the tile's missing keys included). Padding rows are left alone here and
 * below: a decode step's G rows would otherwise cost a whole tile of R. */
HY_CU_BODY void hy_cu_attn_scores(const hy_cu_attn *a, const hy_cu_attn_plan *p, int64_t kt,
                                  int tid, int nthr, float *sh)
{
    const hy_cu_attn_smem s = hy_cu_attn_smem_of(sh, a->hd);
    const int hd = a->hd, B = HY_CU_ATTN_BK;
    for (int e = tid; e < p->nrows * B; e += nthr) {
        const int r = e / B, j = e % B;
        int i, h;
        hy_cu_attn_row(p, r, &i, &h);
        float sc = -INFINITY;
        if (kt * B + j <= hy_cu_attn_pos(a, i)) {
            const float *q = s.q + (size_t)r * hd, *k = s.k + (size_t)j * (hd + 1);
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot += q[d] * k[d];
            sc = dot * a->scale;
        }
        s.p[(size_t)r * (B + 1) + j] = sc;
    }
}

/* Phase, a thread per row: the running maximum over the tile, the tile's
 * weights exp(score − m) in place of the scores (0 where masked), l and the
 * factor that carries the earlier O to the new maximum. */
HY_CU_BODY void hy_cu_attn_softmax(const hy_cu_attn *a, const hy_cu_attn_plan *p, int tid, int nthr,
                                   float *sh)
{
    const hy_cu_attn_smem s = hy_cu_attn_smem_of(sh, a->hd);
    const int B = HY_CU_ATTN_BK;
    for (int r = tid; r < p->nrows; r += nthr) {
        float *pr = s.p + (size_t)r * (B + 1);
        const float mo = s.m[r];
        float mx = mo;
        for (int j = 0; j < B; j++) mx = pr[j] > mx ? pr[j] : mx;
        if (mx == -INFINITY) { /* no key of this row yet (a later split's row) */
            for (int j = 0; j < B; j++) pr[j] = 0.0f;
            s.al[r] = 1.0f;
            continue;
        }
        const float al = mo == -INFINITY ? 0.0f : hy_cu_expf(mo - mx);
        float sum = 0.0f;
        for (int j = 0; j < B; j++) {
            const float w = pr[j] == -INFINITY ? 0.0f : hy_cu_expf(pr[j] - mx);
            pr[j] = w;
            sum += w;
        }
        s.l[r] = s.l[r] * al + sum;
        s.m[r] = mx;
        s.al[r] = al;
    }
}

/* Phase: O[r] ← factor_r·O[r] + Σ_j P[r][j]·V[j]. */
HY_CU_BODY void hy_cu_attn_accumulate(const hy_cu_attn *a, const hy_cu_attn_plan *p, int64_t kt,
                                      int tid, int nthr, float *sh)
{
    const hy_cu_attn_smem s = hy_cu_attn_smem_of(sh, a->hd);
    const int hd = a->hd, B = HY_CU_ATTN_BK, nk = hy_cu_attn_tile_keys(p, kt);
    for (int e = tid; e < p->nrows * hd; e += nthr) {
        const int r = e / hd, d = e % hd;
        const float *pr = s.p + (size_t)r * (B + 1);
        float acc = 0.0f;
        for (int j = 0; j < nk; j++) acc += pr[j] * s.v[(size_t)j * hd + d];
        s.o[e] = s.o[e] * s.al[r] + acc;
    }
}

/* Phase: each real row's output O / l, or with splits its (O, m, l) into
 * work at ((split·n + i)·Hq + h)·(hd + 2). */
HY_CU_BODY void hy_cu_attn_finish(const hy_cu_attn *a, const hy_cu_attn_plan *p, float *work,
                                  int tid, int nthr, float *sh)
{
    const hy_cu_attn_smem s = hy_cu_attn_smem_of(sh, a->hd);
    const int hd = a->hd;
    for (int e = tid; e < p->nrows * hd; e += nthr) {
        const int r = e / hd, d = e % hd;
        int i, h;
        hy_cu_attn_row(p, r, &i, &h);
        if (p->splits == 1) {
            a->o[(size_t)i * a->ldo + (size_t)h * a->ohs + d] = s.o[e] * (1.0f / s.l[r]);
            continue;
        }
        float *w = work + (((size_t)p->split * a->n + i) * a->Hq + h) * ((size_t)hd + 2);
        w[d] = s.o[e];
        if (d == 0) {
            w[hd] = s.m[r];
            w[hd + 1] = s.l[r];
        }
    }
}

/* Element e of the n·Hq·hd outputs from the splits' partial rows. Split 0
 * always holds key 0, so the largest m is finite; a range that saw none of
 * a row's keys left m = −∞ and weighs nothing. */
HY_CU_BODY void hy_cu_attn_merge(const hy_cu_attn *a, int splits, const float *work, size_t e)
{
    const size_t hd = (size_t)a->hd, d = e % hd, ih = e / hd;
    const size_t row = hd + 2, stride = (size_t)a->n * a->Hq * row;
    const float *w = work + ih * row;
    float M = -INFINITY;
    for (int sp = 0; sp < splits; sp++) {
        const float m = w[(size_t)sp * stride + hd];
        M = m > M ? m : M;
    }
    float num = 0.0f, den = 0.0f;
    for (int sp = 0; sp < splits; sp++) {
        const float *ws = w + (size_t)sp * stride;
        if (ws[hd] == -INFINITY) continue;
        const float f = hy_cu_expf(ws[hd] - M);
        num += f * ws[d];
        den += f * ws[hd + 1];
    }
    const size_t i = ih / (size_t)a->Hq, h = ih % (size_t)a->Hq;
    a->o[i * a->ldo + h * a->ohs + d] = num * (1.0f / den);
}

/* --- a hole's keys and values ---------------------------------------------- */

HY_CU_BODY float hy_cu_kv_at(const void *p, int dtype, size_t at)
{
    if (dtype == HY_CU_BF16) return hy_cu_bf16_to_f32(((const uint16_t *)p)[at]);
    return ((const float *)p)[at];
}

/* Element e of the nb·Hkv·hd: the key's dim d rotated to position p0 + t
 * (or copied past rd) and the value's copied, at cache row p0 + t. */
HY_CU_BODY void hy_cu_hole_kv_elem(const hy_cu_hole_kv *hk, size_t e)
{
    const size_t hd = (size_t)hk->hd, d = e % hd, tg = e / hd;
    const size_t t = tg / (size_t)hk->Hkv, g = tg % (size_t)hk->Hkv;
    const size_t row = (size_t)hk->p0 + t, h2 = (size_t)hk->rd / 2;
    float x;
    if (d < (size_t)hk->rd) { /* rotate_half: dst[i] = a·c − b·s, dst[i + h2] = b·c + a·s */
        const float *cs = hk->rope + row * (size_t)hk->rd;
        const size_t i = d < h2 ? d : d - h2;
        const float a = hy_cu_kv_at(hk->eK, hk->dtype, e - (d - i));
        const float b = hy_cu_kv_at(hk->eK, hk->dtype, e - (d - i) + h2);
        const float c = cs[i], s = cs[h2 + i];
        x = d < h2 ? hy_cu_mul_rn(a, c) - hy_cu_mul_rn(b, s)
                   : hy_cu_mul_rn(b, c) + hy_cu_mul_rn(a, s);
    } else {
        x = hy_cu_kv_at(hk->eK, hk->dtype, e);
    }
    hk->K[row * hk->ldk + g * hd + d] = x;
    hk->V[row * hk->ldv + g * hd + d] = hy_cu_kv_at(hk->eV, hk->dtype, e);
}

/* --- the launchers' host side ----------------------------------------------
 *
 * Host code only (they fill an hy_err), shared by attn.cu's launchers and
 * emu_attn.c's twins: a check is HY_OK when the kernel takes the arguments —
 * with no rows (tokens) then a launch that does nothing, the pointers
 * unchecked — else HY_EINVAL with the reason in err. */

/* The shape alone: n ≥ 0, 1 ≤ Hkv ≤ 65535 (the grid's y), Hq a multiple of
 * Hkv, 1 ≤ hd ≤ HY_CU_ATTN_MAX_HD. */
static inline int hy_cu_attention_check_shape(const hy_cu_attn *a, hy_err *err)
{
    if (!a) return hy_err_set(err, HY_EINVAL, "attention: no arguments");
    if (a->n < 0 || a->Hq < 1 || a->Hkv < 1 || a->Hq % a->Hkv != 0)
        return hy_err_set(err, HY_EINVAL, "attention: %d rows of %d query heads over %d KV heads",
                          a->n, a->Hq, a->Hkv);
    if (a->Hkv > 65535)
        return hy_err_set(err, HY_EINVAL, "attention: %d KV heads (a grid holds 65535)", a->Hkv);
    if (a->hd < 1 || a->hd > HY_CU_ATTN_MAX_HD)
        return hy_err_set(err, HY_EINVAL, "attention: head dim %d outside [1, %d]", a->hd,
                          HY_CU_ATTN_MAX_HD);
    return HY_OK;
}

/* hy_cu_attention: the shape; with n > 0 q, K, V and o set, a context of at
 * least one key holding the rows when their positions are pos0 + i (an
 * array of positions lies in device memory, unread here), head strides of
 * at least hd and rows at least as wide as their heads. */
static inline int hy_cu_attention_check(const hy_cu_attn *a, hy_err *err)
{
    const int rc = hy_cu_attention_check_shape(a, err);
    if (rc != HY_OK || a->n == 0) return rc;
    if (!a->q || !a->K || !a->V || !a->o || a->ctx < 1 || (!a->pos && a->pos0 < 0) ||
        (!a->pos && a->pos0 + a->n > a->ctx))
        return hy_err_set(err, HY_EINVAL,
                          "attention: missing operand, or rows at %lld + %d past a context of %lld",
                          (long long)a->pos0, a->n, (long long)a->ctx);
    const size_t hd = (size_t)a->hd, kv = (size_t)a->Hkv * hd, last = (size_t)a->Hq - 1;
    if (a->qhs < hd || a->ohs < hd || a->ldq < last * a->qhs + hd || a->ldo < last * a->ohs + hd ||
        a->ldk < kv || a->ldv < kv)
        return hy_err_set(err, HY_EINVAL,
                          "attention: strides ldq=%zu qhs=%zu ldk=%zu ldv=%zu ldo=%zu ohs=%zu "
                          "shorter than their rows or heads",
                          a->ldq, a->qhs, a->ldk, a->ldv, a->ldo, a->ohs);
    return HY_OK;
}

/* hy_cu_attention_work: the work of the ranges hy_cu_attn_splits cuts the
 * context into; 0 for a shape the launcher refuses, no rows or no split. */
static inline size_t hy_cu_attn_work_wanted(const hy_cu_attn *a)
{
    if (hy_cu_attention_check_shape(a, NULL) != HY_OK || a->n == 0) return 0;
    return hy_cu_attn_work_floats(a, hy_cu_attn_splits(a));
}

/* The ranges a launch cuts each row tile's keys into (the grid's z):
 * hy_cu_attn_splits when work holds their partial rows, else one. For
 * arguments hy_cu_attention_check passed, n > 0. */
static inline int hy_cu_attn_launch_splits(const hy_cu_attn *a, const float *work,
                                           size_t work_floats)
{
    const int splits = hy_cu_attn_splits(a);
    return work && work_floats >= hy_cu_attn_work_floats(a, splits) ? splits : 1;
}

/* hy_cu_hole_kv_write: nb ≥ 0, Hkv, hd ≥ 1, rd even in [0, hd], p0 ≥ 0, an
 * entry dtype; with nb > 0 every operand set (the table when rd > 0) and
 * cache rows at least Hkv·hd wide. */
static inline int hy_cu_hole_kv_check(const hy_cu_hole_kv *h, hy_err *err)
{
    if (!h) return hy_err_set(err, HY_EINVAL, "hole K/V: no arguments");
    if (h->nb < 0 || h->Hkv < 1 || h->hd < 1 || h->rd < 0 || h->rd % 2 || h->rd > h->hd ||
        h->p0 < 0 || (h->dtype != HY_CU_F32 && h->dtype != HY_CU_BF16))
        return hy_err_set(err, HY_EINVAL,
                          "hole K/V: %d tokens of %d heads of %d dims, rotary %d, dtype %d at %lld",
                          h->nb, h->Hkv, h->hd, h->rd, h->dtype, (long long)h->p0);
    if (h->nb == 0) return HY_OK;
    const size_t row = (size_t)h->Hkv * h->hd;
    if (!h->eK || !h->eV || !h->K || !h->V || (h->rd && !h->rope) || h->ldk < row || h->ldv < row)
        return hy_err_set(err, HY_EINVAL, "hole K/V: missing operand or rows narrower than %zu",
                          row);
    return HY_OK;
}

#endif
