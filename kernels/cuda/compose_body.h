/*
 * The arithmetic of compose.cu's kernel as bodies (hy_cu_body.h): one linear
 * layer's heads composed from an entry's stored forms, S ← T̃·S + S̃, each
 * head in its own forms (hy_rep_apply's contract, head by head).
 *
 * T̃ acts on the key axis, so column j of the new S depends on column j of
 * the old S alone. A block therefore owns a slab of C columns of one head's
 * S: it reads the slab into shared memory, and overwrites it in place once
 * every thread is done reading — no other block touches those columns, and
 * no scratch in global memory is needed, whatever the forms. C is chosen so
 * the slab and the low-rank intermediate take 32 KiB whatever dk. Three
 * phases, separated by barriers:
 *   load     the slab S[:, c0 : c0 + C] into shared memory (not for T̃ = 0,
 *            which does not read S — a NaN there does not survive, as with
 *            hy_rep_apply's memset);
 *   project  for U·Vt and γ·I + U·Vt: W = Vt·S_slab, rank × C;
 *   combine  every element of the slab:
 *              zero     0
 *              scalar   γ·S
 *              diag     d_i·S
 *              lowrank  U·W            iplr  γ·S + U·W
 *              dense    Σ_m T[i][m]·S[m]
 *            plus S̃: its dense entry, or Σ_k Us[i][k]·Vs[k][j] when low
 *            rank; the naive ablation (use_T 0) is S + S̃.
 * Payloads are read where they lie, bf16 widened as read; the records are
 * trusted (hy_rep_section_parse checked them when the entry was read).
 *
 * compose.cu's kernel calls these bodies with __syncthreads() between
 * phases; its twin (emu_attn.c) calls them for every thread of every block,
 * one phase after another, on the host. The launcher's argument check is at
 * the end, host code shared by both.
 */
#ifndef HY_CU_COMPOSE_BODY_H
#define HY_CU_COMPOSE_BODY_H

#include "hy_cu_body.h"
#include "include/hy_cuda_attn.h"

#include <stddef.h>
#include <stdint.h>

#define HY_CU_COMPOSE_THREADS 256

/* Columns of S per block: 4096 / dk, at most 32 (a warp's row). */
HY_CU_BODY int hy_cu_compose_cols(int dk)
{
    const int c = 4096 / dk;
    return c > 32 ? 32 : (c < 1 ? 1 : c);
}

/* Shared floats: the slab [dk][C], then W [dk][C] (a rank is at most dk). */
HY_CU_BODY size_t hy_cu_compose_shared_floats(int dk)
{
    return 2 * (size_t)dk * (size_t)hy_cu_compose_cols(dk);
}

/* Blocks of columns per head: the grid's x. */
HY_CU_BODY int hy_cu_compose_col_blocks(const hy_cu_compose *c)
{
    const int C = hy_cu_compose_cols(c->dk);
    return (c->dv + C - 1) / C;
}

/* Value `at` of a payload, widened. */
HY_CU_BODY float hy_cu_rep_at(const hy_cu_rep *x, size_t at)
{
    if (x->dtype == HY_CU_BF16) return hy_cu_bf16_to_f32(((const uint16_t *)x->p)[at]);
    return ((const float *)x->p)[at];
}

/* The block's slab: columns [c0, c0 + w) of head h (block (bx, h)). */
HY_CU_BODY int hy_cu_compose_c0(const hy_cu_compose *c, int bx)
{
    return bx * hy_cu_compose_cols(c->dk);
}

HY_CU_BODY int hy_cu_compose_width(const hy_cu_compose *c, int bx)
{
    const int C = hy_cu_compose_cols(c->dk), left = c->dv - bx * C;
    return left < C ? left : C;
}

/* Whether the head's new S reads its old S. */
HY_CU_BODY int hy_cu_compose_reads_S(const hy_cu_compose *c, int h)
{
    return !c->use_T || c->t[h].form != HY_CU_FORM_ZERO;
}

/* Phase: the slab into shared memory, [dk][C]. */
HY_CU_BODY void hy_cu_compose_load(const hy_cu_compose *c, int bx, int h, int tid, int nthr,
                                   float *sh)
{
    if (!hy_cu_compose_reads_S(c, h)) return;
    const int C = hy_cu_compose_cols(c->dk), w = hy_cu_compose_width(c, bx);
    const int c0 = hy_cu_compose_c0(c, bx);
    const float *S = c->S + (size_t)h * c->hs;
    for (int e = tid; e < c->dk * w; e += nthr) {
        const int i = e / w, j = e % w;
        sh[(size_t)i * C + j] = S[(size_t)i * c->dv + c0 + j];
    }
}

/* Phase: W [rank][C] = Vt·slab for a low-rank T̃ (nothing otherwise). */
HY_CU_BODY void hy_cu_compose_project(const hy_cu_compose *c, int bx, int h, int tid, int nthr,
                                      float *sh)
{
    if (!c->use_T) return;
    const hy_cu_rep *t = &c->t[h];
    if (t->form != HY_CU_FORM_LOWRANK && t->form != HY_CU_FORM_IPLR) return;
    const int C = hy_cu_compose_cols(c->dk), w = hy_cu_compose_width(c, bx), dk = c->dk;
    const size_t vt = (size_t)dk * t->rank; /* Vt follows U [dk][rank] */
    float *W = sh + (size_t)dk * C;
    for (int e = tid; e < t->rank * w; e += nthr) {
        const int k = e / w, j = e % w;
        float acc = 0.0f;
        for (int i = 0; i < dk; i++)
            acc += hy_cu_rep_at(t, vt + (size_t)k * dk + i) * sh[(size_t)i * C + j];
        W[(size_t)k * C + j] = acc;
    }
}

/* T̃·S at (i, j) of the slab. */
HY_CU_BODY float hy_cu_compose_ts(const hy_cu_compose *c, const hy_cu_rep *t, int i, int j,
                                  const float *sh)
{
    const int C = hy_cu_compose_cols(c->dk), dk = c->dk;
    const float sij = sh[(size_t)i * C + j];
    switch (t->form) {
    case HY_CU_FORM_ZERO:
        return 0.0f;
    case HY_CU_FORM_SCALAR:
        return t->gamma * sij;
    case HY_CU_FORM_DIAG:
        return hy_cu_rep_at(t, (size_t)i) * sij;
    case HY_CU_FORM_LOWRANK:
    case HY_CU_FORM_IPLR: {
        const float *W = sh + (size_t)dk * C;
        float uw = 0.0f;
        for (int k = 0; k < t->rank; k++)
            uw += hy_cu_rep_at(t, (size_t)i * t->rank + k) * W[(size_t)k * C + j];
        return t->form == HY_CU_FORM_IPLR ? t->gamma * sij + uw : uw;
    }
    default: { /* dense */
        float acc = 0.0f;
        for (int m = 0; m < dk; m++)
            acc += hy_cu_rep_at(t, (size_t)i * dk + m) * sh[(size_t)m * C + j];
        return acc;
    }
    }
}

/* S̃ at (i, col): its dense entry, its low-rank product, or 0. */
HY_CU_BODY float hy_cu_compose_sbody(const hy_cu_compose *c, const hy_cu_rep *s, int i, int col)
{
    if (s->form == HY_CU_FORM_DENSE) return hy_cu_rep_at(s, (size_t)i * c->dv + col);
    if (s->form != HY_CU_FORM_LOWRANK) return 0.0f;
    const size_t vs = (size_t)c->dk * s->rank; /* Vs [rank][dv] follows Us [dk][rank] */
    float acc = 0.0f;
    for (int k = 0; k < s->rank; k++)
        acc += hy_cu_rep_at(s, (size_t)i * s->rank + k) *
               hy_cu_rep_at(s, vs + (size_t)k * c->dv + col);
    return acc;
}

/* Phase: the slab's new values, written over S's columns. */
HY_CU_BODY void hy_cu_compose_combine(const hy_cu_compose *c, int bx, int h, int tid, int nthr,
                                      const float *sh)
{
    const int C = hy_cu_compose_cols(c->dk), w = hy_cu_compose_width(c, bx);
    const int c0 = hy_cu_compose_c0(c, bx);
    const hy_cu_rep *s = &c->s[h];
    float *S = c->S + (size_t)h * c->hs;
    for (int e = tid; e < c->dk * w; e += nthr) {
        const int i = e / w, j = e % w;
        const float ts = c->use_T ? hy_cu_compose_ts(c, &c->t[h], i, j, sh) : sh[(size_t)i * C + j];
        S[(size_t)i * c->dv + c0 + j] = ts + hy_cu_compose_sbody(c, s, i, c0 + j);
    }
}

/* --- the launcher's check (host code: compose.cu and emu_attn.c) ------------ */

/* hy_cu_compose_layer: HY_OK for 0 ≤ heads ≤ 65535 (the grid's y),
 * 1 ≤ dk ≤ HY_CU_COMPOSE_MAX_DK, dv ≥ 1 and, with heads, S and the records
 * set (t only when used) and states at least dk·dv apart — with no heads a
 * launch that does nothing, the pointers unchecked; else HY_EINVAL with the
 * reason in err. */
static inline int hy_cu_compose_check(const hy_cu_compose *c, hy_err *err)
{
    if (!c) return hy_err_set(err, HY_EINVAL, "compose: no arguments");
    if (c->heads < 0 || c->heads > 65535 || c->dk < 1 || c->dk > HY_CU_COMPOSE_MAX_DK || c->dv < 1)
        return hy_err_set(err, HY_EINVAL, "compose: %d heads of %d × %d (dk at most %d)", c->heads,
                          c->dk, c->dv, HY_CU_COMPOSE_MAX_DK);
    if (c->heads == 0) return HY_OK;
    if (!c->S || !c->s || (c->use_T && !c->t) || c->hs < (size_t)c->dk * (size_t)c->dv)
        return hy_err_set(err, HY_EINVAL, "compose: missing records or states %zu floats apart",
                          c->hs);
    return HY_OK;
}

#endif
