/*
 * The attention mixers (docs/executor.md): softmax attention (GQA with
 * partial RoPE, q/k norms and an optional output gate) and multi-head
 * latent attention (Kimi-Linear, Ling), each writing the holes' keys and
 * values at their true positions before the step's queries attend.
 */
#include "exec_internal.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* --- attention layers ------------------------------------------------------ */

/* dst[i] ← src[i] widened from bf16, over the threads. */
static void hole_kv_widen(float *dst, const void *src, size_t n)
{
    const uint16_t *b = src;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) dst[i] = hy_bf16_to_f32(b[i]);
}

/* Each hole's K, rotated to the hole's positions, and V into the cache:
 * exactly what computing those tokens there would have written. */
static void write_holes(hy_exec *ex, hy_state *st, int li, const item *it, int ni)
{
    const hy_model_config *c = &ex->m->cfg;
    const int KV = c->n_kv_heads * c->head_dim, hd = c->head_dim;
    const double t0 = hy_now_s();
    for (int i = 0; i < ni; i++) {
        const hy_entry *e = it[i].p->hole;
        if (it[i].p->tokens) continue;
        const int64_t p0 = it[i].pos;
        assert(p0 + e->nb <= st->kv_cap);
        float *K = st->k[li] + (size_t)p0 * KV, *V = st->v[li] + (size_t)p0 * KV;
        const int rd = c->rotary_dim;
        assert(rd == 0 || p0 + e->nb <= ex->rope_n);
        if (e->repr.kv == HY_ENTRY_BF16) { /* widened in place, then rotated there */
            hole_kv_widen(K, e->K[li], (size_t)e->nb * KV);
            hole_kv_widen(V, e->V[li], (size_t)e->nb * KV);
        }
        const float *eK = e->repr.kv == HY_ENTRY_BF16 ? K : e->K[li];
        const float *eV = e->V[li];
#pragma omp parallel for schedule(static)
        for (int t = 0; t < e->nb; t++) {
            const float *cs = rd ? ex->rope + (size_t)(p0 + t) * (size_t)rd : NULL;
            for (int g = 0; g < c->n_kv_heads; g++) {
                const size_t at = (size_t)t * KV + (size_t)g * hd;
                hy_rope_rotate(K + at, eK + at, rd, cs);
                if (eK != K) memcpy(K + at + rd, eK + at + rd, (size_t)(hd - rd) * sizeof(float));
            }
            if (e->repr.kv != HY_ENTRY_BF16)
                memcpy(V + (size_t)t * KV, eV + (size_t)t * KV, (size_t)KV * sizeof(float));
        }
    }
    ex->hole_kv_s += hy_now_s() - t0;
}

/* An attention layer over the step's n computed rows (n may be 0: holes
 * only). The holes' K/V are written first, so every computed token attends
 * causally to every position before it, computed or composed. */
void hy_fwd_attn_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                       int nholes)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_attn_w *w = &ex->m->layers[li].attn;
    const int H = c->hidden, Hq = c->n_heads, Hkv = c->n_kv_heads, hd = c->head_dim;
    /* q_proj's rows: [query|gate] per head with the output gate, else queries */
    const int qs = c->attn_gate ? 2 * hd : hd, Q2 = Hq * qs;
    const int KV = Hkv * hd, P = Q2 + 2 * KV, Qd = Hq * hd, grp = Hq / Hkv, rd = c->rotary_dim;
    float *proj = ex->big, *ob = ex->mid;
    float *Kc = st->k[li], *Vc = st->v[li];
    assert(Hq % Hkv == 0 && Kc && Vc);
    assert(rd % 2 == 0 && rd <= hd);
    assert(!(c->qk_norm_flat && c->attn_gate)); /* a flat q norm needs the queries contiguous */

    if (nholes > 0) {
        prof_begin(ex);
        write_holes(ex, st, li, it, ni);
        prof_end(ex, HY_EXEC_OP_ATTENTION);
    }
    if (n == 0) return;

    hy_fwd_linear(ex, n, H, P, ex->xn, (size_t)H, w->w_qkv, proj, (size_t)P);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = proj + (size_t)t * P;
        const int64_t pos = ex->rowpos[t];
        /* rows are written at their positions; the scores need HY_ATTN_BLOCK
         * × context floats per thread */
        assert(pos < st->kv_cap && ex->scratch_per_thread >= (size_t)HY_ATTN_BLOCK * (pos + 1));
        assert(rd == 0 || pos < ex->rope_n);
        const float *cs = rd ? ex->rope + (size_t)pos * (size_t)rd : NULL;
        float *krow = Kc + (size_t)pos * KV, *vrow = Vc + (size_t)pos * KV;
        const bool per_head = c->qk_norm && !c->qk_norm_flat;
        if (!c->qk_norm) { /* MiniMax: the projections as they are */
            memcpy(krow, row + Q2, (size_t)KV * sizeof(float));
        } else if (c->qk_norm_flat) { /* OLMo: one norm over all queries, one over the keys */
            hy_fwd_rmsnorm_row(row, w->q_norm1, Qd, c->rms_eps, row);
            hy_fwd_rmsnorm_row(row + Q2, w->k_norm1, KV, c->rms_eps, krow);
        }
        for (int h = 0; h < Hq; h++) {
            float *qh = row + (size_t)h * qs;
            if (per_head) hy_fwd_rmsnorm_row(qh, w->q_norm1, hd, c->rms_eps, qh);
            hy_rope_rotate(qh, qh, rd, cs);
        }
        const hy_capture *cap = ex->rowcap[t];
        const int64_t crow = cap && pos >= cap->start ? pos - cap->start : -1; /* capture row */
        float *ck = crow >= 0 ? cap->K[li] + (size_t)crow * KV : NULL;
        for (int g = 0; g < Hkv; g++) {
            float *kh = krow + (size_t)g * hd;
            if (per_head)
                hy_fwd_rmsnorm_row(row + Q2 + (size_t)g * hd, w->k_norm1, hd, c->rms_eps, kh);
            if (ck) memcpy(ck + (size_t)g * hd, kh, (size_t)hd * sizeof(float)); /* canonical */
            hy_rope_rotate(kh, kh, rd, cs);
        }
        memcpy(vrow, row + Q2 + KV, (size_t)KV * sizeof(float));
        if (ck) memcpy(cap->V[li] + (size_t)crow * KV, vrow, (size_t)KV * sizeof(float));
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    const float scale = 1.0f / sqrtf((float)hd);
    prof_begin(ex);
    /* the query heads of a KV head together, when the scratch holds their
     * scores: a block's context is its last row's position + 1 */
    int64_t ctx = 0;
    for (int b = 0; b < nblk; b++)
        ctx = HY_MAX(ctx, ex->rowpos[HY_MIN_INT(n, (b + 1) * HY_ATTN_BLOCK) - 1] + 1);
    const bool together =
        grp > 1 && ex->scratch_per_thread >= hy_attention_heads_scratch(grp, hd, hd, ctx);
    if (together) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < Hkv * nblk; job++) {
            const int g = job % Hkv;
            const int r0 = (nblk - 1 - job / Hkv) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *work = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_heads(B, grp, hd, hd, ex->rowpos + r0,
                               proj + (size_t)r0 * P + (size_t)g * grp * qs, (size_t)P, (size_t)qs,
                               Kc + (size_t)g * hd, (size_t)KV, Vc + (size_t)g * hd, (size_t)KV,
                               scale, ob + (size_t)r0 * Qd + (size_t)g * grp * hd, (size_t)Qd,
                               (size_t)hd, work);
        }
    } else {
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < Hq * nblk; job++) {
            const int h = job % Hq, g = h / grp;
            /* blocks of the step's rows, whatever runs they belong to; the
             * last (the longest context) first */
            const int r0 = (nblk - 1 - job / Hq) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *scores = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_at(B, hd, hd, ex->rowpos + r0, proj + (size_t)r0 * P + (size_t)h * qs,
                            (size_t)P, Kc + (size_t)g * hd, (size_t)KV, Vc + (size_t)g * hd,
                            (size_t)KV, scale, ob + (size_t)r0 * Qd + (size_t)h * hd, (size_t)Qd,
                            scores);
        }
    }
    prof_end(ex, HY_EXEC_OP_ATTENTION);
    if (c->attn_gate) {
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++)
            for (int h = 0; h < Hq; h++) {
                float *oh = ob + (size_t)t * Qd + (size_t)h * hd;
                const float *gate = proj + (size_t)t * P + (size_t)h * qs + hd;
#pragma omp simd
                for (int j = 0; j < hd; j++) oh[j] *= hy_sigmoidf(gate[j]);
            }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    hy_fwd_linear(ex, n, Qd, H, ob, (size_t)Qd, w->w_o, ex->y, (size_t)H);
}

/* --- multi-head latent attention (Kimi) ----------------------------------- */

/* MLA's latent norms: transformers builds them without an eps argument. */
#define MLA_NORM_EPS 1e-6f

/* Expands `count` cached latents (rows of lat, stride ldl) at positions
 * pos[r] (or p0 + r when pos is NULL) into the layer's expanded rows: per
 * head the key kv_b_proj gives (qk_nope) followed by the shared key part
 * (the V row, qk_rope), then per head the value (v_head). In chunks of the
 * step's rows (MLA_EXPAND_ROWS at least), through ex->aux. */
void hy_fwd_mla_expand(hy_exec *ex, hy_state *st, int li, const float *lat, size_t ldl,
                       const int64_t *pos, int64_t p0, int count)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_mla_w *w = &ex->m->layers[li].mla;
    const int nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head, R = c->kv_lora;
    const int KB = nh * (dn + dv), Kw = nh * (dn + dr);
    const size_t XW = hy_state_x_row(c);
    const int chunk = (int)HY_MAX(ex->step_cap, (size_t)MLA_EXPAND_ROWS); /* ex->aux's rows */
    for (int r0 = 0; r0 < count; r0 += chunk) {
        const int m = HY_MIN_INT(chunk, count - r0);
        hy_fwd_linear_f32(ex, m, R, KB, lat + (size_t)r0 * ldl, ldl, w->w_kvb, ex->aux, (size_t)KB);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < m; r++) {
            const int64_t at = pos ? pos[r0 + r] : p0 + r0 + r;
            assert(at < st->kv_cap);
            float *X = st->x[li] + (size_t)at * XW;
            const float *kr = st->v[li] + (size_t)at * dr, *e = ex->aux + (size_t)r * KB;
            for (int h = 0; h < nh; h++) {
                memcpy(X + (size_t)h * (dn + dr), e + (size_t)h * (dn + dv), (size_t)dn * 4);
                memcpy(X + (size_t)h * (dn + dr) + dn, kr, (size_t)dr * 4);
                memcpy(X + Kw + (size_t)h * dv, e + (size_t)h * (dn + dv) + dn, (size_t)dv * 4);
            }
        }
        prof_end(ex, HY_EXEC_OP_ATTENTION);
    }
}

/* An MLA layer over the step's n computed rows (n may be 0: holes only).
 * Each token caches its normalised latent (K row) and the shared key part
 * (V row) as transformers' cache holds them: Kimi's as projected (no
 * positional encoding), Ling's rotated to the token's position (RoPE on the
 * shared key and on each query's rope part; the loader reordered the
 * checkpoint's interleaved pairs to halves). An entry keeps the key part
 * unrotated and a hole's is rotated to the hole's positions. Every cached
 * row is expanded once into per-head keys and values, against which the
 * queries attend (scale (dn+dr)^−½); Ling then scales each head's output by
 * sigmoid(g_proj x). With attention_bias, kv_a_proj_with_mqa and the output
 * projection add their biases. */
void hy_fwd_mla_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                      int nholes)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_mla_w *w = &ex->m->layers[li].mla;
    const int H = c->hidden, nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head;
    const int R = c->kv_lora, ql = c->q_lora, Qa = ql ? ql : nh * (dn + dr);
    const int Pa = Qa + R + dr + (c->mla_head_gate ? nh : 0), rd = c->rotary_dim;
    const int Kw = nh * (dn + dr), Od = nh * dv;
    const size_t XW = hy_state_x_row(c);
    float *proj = ex->big, *lat = ex->mid;
    assert(st->k[li] && st->v[li] && st->x[li] && (rd == 0 || rd == dr));

    if (nholes > 0) {
        const double t0 = hy_now_s();
        for (int i = 0; i < ni; i++) {
            const hy_entry *e = it[i].p->hole;
            if (it[i].p->tokens) continue;
            const int64_t p0 = it[i].pos;
            assert(p0 + e->nb <= st->kv_cap && (rd == 0 || p0 + e->nb <= ex->rope_n));
            float *kr = st->v[li] + (size_t)p0 * dr;
            const float *ekr = e->V[li];
            if (e->repr.kv == HY_ENTRY_BF16) { /* widened in place, rotated there */
                hole_kv_widen(st->k[li] + (size_t)p0 * R, e->K[li], (size_t)e->nb * R);
                hole_kv_widen(kr, e->V[li], (size_t)e->nb * dr);
                ekr = kr;
            } else {
                memcpy(st->k[li] + (size_t)p0 * R, e->K[li], (size_t)e->nb * R * sizeof(float));
            }
            if (rd == 0) {
                if (ekr != kr) memcpy(kr, ekr, (size_t)e->nb * dr * sizeof(float));
            } else
#pragma omp parallel for schedule(static)
                for (int t = 0; t < e->nb; t++)
                    hy_rope_rotate(kr + (size_t)t * dr, ekr + (size_t)t * dr, rd,
                                   ex->rope + (size_t)(p0 + t) * (size_t)rd);
            if (!ex->mla_absorbed)
                hy_fwd_mla_expand(ex, st, li, st->k[li] + (size_t)p0 * R, (size_t)R, NULL, p0,
                                  e->nb);
        }
        ex->hole_kv_s += hy_now_s() - t0;
    }
    if (n == 0) return;

    hy_fwd_linear(ex, n, H, Pa, ex->xn, (size_t)H, w->w_a, proj, (size_t)Pa);
    if (w->b_kva) hy_fwd_add_bias(ex, n, R + dr, w->b_kva, proj + Qa, (size_t)Pa);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = proj + (size_t)t * Pa, *lt = lat + (size_t)t * R;
        const int64_t pos = ex->rowpos[t];
        assert(pos < st->kv_cap && ex->scratch_per_thread >= (size_t)HY_ATTN_BLOCK * (pos + 1));
        assert(rd == 0 || pos < ex->rope_n);
        hy_fwd_rmsnorm_row(row + Qa, w->kv_norm, R, MLA_NORM_EPS, lt);
        memcpy(st->k[li] + (size_t)pos * R, lt, (size_t)R * sizeof(float));
        const float *kr = row + Qa + R; /* the shared key part, unrotated */
        const hy_capture *cap = ex->rowcap[t];
        if (cap && pos >= cap->start) { /* canonical rows for the entry */
            const int64_t crow = pos - cap->start;
            memcpy(cap->K[li] + (size_t)crow * R, lt, (size_t)R * sizeof(float));
            memcpy(cap->V[li] + (size_t)crow * dr, kr, (size_t)dr * sizeof(float));
        }
        float *vrow = st->v[li] + (size_t)pos * dr;
        if (rd == 0)
            memcpy(vrow, kr, (size_t)dr * sizeof(float));
        else
            hy_rope_rotate(vrow, kr, rd, ex->rope + (size_t)pos * (size_t)rd);
        if (ql) hy_fwd_rmsnorm_row(row, w->q_norm, ql, MLA_NORM_EPS, row);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    float *q = proj; /* the queries: proj's rows, or q_b_proj's */
    size_t ldq = (size_t)Pa;
    if (ql) {
        hy_fwd_linear(ex, n, ql, Kw, proj, (size_t)Pa, w->w_qb, ex->o, (size_t)Kw);
        q = ex->o, ldq = (size_t)Kw;
    }
    if (rd) { /* each head's rope part of the queries, wherever they are */
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++)
            for (int h = 0; h < nh; h++) {
                float *qr = q + (size_t)t * ldq + (size_t)h * (dn + dr) + dn;
                hy_rope_rotate(qr, qr, rd, ex->rope + (size_t)ex->rowpos[t] * (size_t)rd);
            }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    float *ob = ex->mid; /* the latents are in the cache now */
    const float scale = 1.0f / sqrtf((float)(dn + dr));
    if (ex->mla_absorbed) {
        /* in the latent space: per head q_nope·W_UK (kv_b_proj's key rows),
         * scores against the latents plus q_rope·k_rope, the weighted sum of
         * latents, then through W_UV (its value rows) */
        float *qa = ex->mla_q, *oa = ex->mla_o;
        const size_t lda = (size_t)nh * R;
        for (int h = 0; h < nh; h++)
            hy_fwd_gemm_nn(ex, n, dn, R, q + (size_t)h * (dn + dr), ldq,
                           w->w_kvb + (size_t)h * (dn + dv) * R, (size_t)R, qa + (size_t)h * R,
                           lda);
        prof_begin(ex);
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < nh * nblk; job++) {
            const int h = job % nh;
            const int r0 = (nblk - 1 - job / nh) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *scores = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_at2(B, R, dr, R, ex->rowpos + r0, qa + (size_t)r0 * lda + (size_t)h * R,
                             lda, st->k[li], (size_t)R,
                             q + (size_t)r0 * ldq + (size_t)h * (dn + dr) + dn, ldq, st->v[li],
                             (size_t)dr, st->k[li], (size_t)R, scale,
                             oa + (size_t)r0 * lda + (size_t)h * R, lda, scores);
        }
        prof_end(ex, HY_EXEC_OP_ATTENTION);
        for (int h = 0; h < nh; h++)
            hy_fwd_linear_f32(ex, n, R, dv, oa + (size_t)h * R, lda,
                              w->w_kvb + ((size_t)h * (dn + dv) + dn) * R, ob + (size_t)h * dv,
                              (size_t)Od);
    } else {
        hy_fwd_mla_expand(ex, st, li, lat, (size_t)R, ex->rowpos, 0, n);
        const float *X = st->x[li];
        prof_begin(ex);
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < nh * nblk; job++) {
            const int h = job % nh;
            const int r0 = (nblk - 1 - job / nh) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *scores = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_at(B, dn + dr, dv, ex->rowpos + r0,
                            q + (size_t)r0 * ldq + (size_t)h * (dn + dr), ldq,
                            X + (size_t)h * (dn + dr), XW, X + Kw + (size_t)h * dv, XW, scale,
                            ob + (size_t)r0 * Od + (size_t)h * dv, (size_t)Od, scores);
        }
        prof_end(ex, HY_EXEC_OP_ATTENTION);
    }
    if (c->mla_head_gate) { /* Ling: one sigmoid gate per head */
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            const float *gate = proj + (size_t)t * Pa + Qa + R + dr;
            for (int h = 0; h < nh; h++) {
                const float s = hy_sigmoidf(gate[h]);
                float *oh = ob + (size_t)t * Od + (size_t)h * dv;
#pragma omp simd
                for (int j = 0; j < dv; j++) oh[j] *= s;
            }
        }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    hy_fwd_linear(ex, n, Od, H, ob, (size_t)Od, w->w_o, ex->y, (size_t)H);
    if (w->b_o) hy_fwd_add_bias(ex, n, H, w->b_o, ex->y, (size_t)H);
}
