/*
 * The MLP sublayer (docs/executor.md): SwiGLU or relu² (Nemotron-H), and the
 * routed experts — softmax or DeepSeek-style sigmoid routing with groups,
 * the experts' rows gathered per expert, the weighted scatter back, an
 * optional latent around the experts and the (optionally gated) shared
 * expert.
 */
#include "exec_internal.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* One MLP over n rows of width D, xin [n][D] into out [n][D]: SwiGLU,
 * down(silu(gate x) ⊙ up x), or relu², down(relu(up x + b_up)²) + b_down
 * (Nemotron-H). gu and h: [n][2·inter] and [n][inter] of scratch. */
void hy_fwd_ffn(hy_exec *ex, const hy_mlp_w *w, int n, int D, const float *xin, float *gu, float *h,
                float *out)
{
    const int I = w->inter;
    if (ex->m->cfg.mlp_act == HY_MLP_RELU2) {
        hy_fwd_linear(ex, n, D, I, xin, (size_t)D, w->w_gu, h, (size_t)I);
        if (w->b_up) hy_fwd_add_bias(ex, n, I, w->b_up, h, (size_t)I);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            float *hr = h + (size_t)t * I;
#pragma omp simd
            for (int j = 0; j < I; j++) {
                const float r = hr[j] > 0.0f ? hr[j] : 0.0f;
                hr[j] = r * r;
            }
        }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
        hy_fwd_linear(ex, n, I, D, h, (size_t)I, w->w_down, out, (size_t)D);
        if (w->b_down) hy_fwd_add_bias(ex, n, D, w->b_down, out, (size_t)D);
        return;
    }
    const int H = D;
    hy_fwd_linear(ex, n, H, 2 * I, xin, (size_t)H, w->w_gu, gu, (size_t)(2 * I));
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *gr = gu + (size_t)t * 2 * I;
        float *hr = h + (size_t)t * I;
#pragma omp simd
        for (int j = 0; j < I; j++) hr[j] = hy_siluf(gr[j]) * gr[I + j];
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    hy_fwd_linear(ex, n, I, H, h, (size_t)I, w->w_down, out, (size_t)H);
}

/* Top-k of p[0, E) by selection, skipping entries where skip[e]; ties keep
 * the lower index. */
static void top_k(const float *p, int E, int k, const bool *skip, int *ti)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = skip && skip[e];
            for (int q = 0; q < j; q++) taken |= ti[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        assert(best >= 0);
        ti[j] = best;
    }
}

/* One token's routing from its router logits p[0, E) (overwritten): the k
 * experts ti and their weights tw. Softmax: the top-k probabilities,
 * renormalised with norm_topk. DeepSeek's (Kimi): sigmoid scores s; the
 * biased scores s + bias rank the groups (each by its two best) and, within
 * the topk_group groups kept, the experts; the weights are the chosen s,
 * renormalised (+1e-20) with norm_topk, times routed_scale. */
static void route_token(const hy_model_config *c, const float *bias, float *p, float *tw, int *ti)
{
    const int E = c->n_experts, k = c->top_k;
    if (c->router == HY_ROUTER_SOFTMAX) {
        float mx = p[0], sum = 0.0f;
        for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < E; e++) sum += (p[e] = hy_expf(p[e] - mx));
        for (int e = 0; e < E; e++) p[e] /= sum;
        top_k(p, E, k, NULL, ti);
        float wsum = 0.0f;
        for (int j = 0; j < k; j++) wsum += (tw[j] = p[ti[j]]);
        if (c->norm_topk)
            for (int j = 0; j < k; j++) tw[j] /= wsum;
        return;
    }
    enum { MAXE = 4096, MAXG = 256 }; /* the loader's bounds */
    float sb[MAXE], gs[MAXG] = {0};
    bool drop[MAXE];
    assert(E <= MAXE && c->n_group <= MAXG);
    const int G = c->n_group, per = E / G;
    for (int e = 0; e < E; e++) {
        p[e] = hy_sigmoidf(p[e]);
        sb[e] = p[e] + bias[e];
    }
    for (int g = 0; g < G; g++) { /* a group's score: its two best biased scores */
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++)
            if (sb[e] > a)
                b = a, a = sb[e];
            else if (sb[e] > b)
                b = sb[e];
        gs[g] = a + b;
    }
    int kept[MAXE];
    top_k(gs, G, c->topk_group, NULL, kept);
    for (int e = 0; e < E; e++) drop[e] = true;
    for (int j = 0; j < c->topk_group; j++)
        for (int e = kept[j] * per; e < (kept[j] + 1) * per; e++) drop[e] = false;
    top_k(sb, E, k, drop, ti);
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) wsum += (tw[j] = p[ti[j]]);
    const float scale = c->norm_topk ? c->routed_scale / (wsum + 1e-20f) : c->routed_scale;
    for (int j = 0; j < k; j++) tw[j] *= scale;
}

/* Routed experts and the shared expert over the step's n rows (xn in, y
 * out). The router reads xn; the experts read xn too, or, with a latent
 * (Nemotron-H's moe_latent), fc1_latent_proj(xn), their weighted sum then
 * going through fc2_latent_proj; the shared expert always reads xn. */
void hy_fwd_moe(hy_exec *ex, const hy_layer_w *L, int n)
{
    const hy_model_config *c = &ex->m->cfg;
    const int H = c->hidden, E = c->n_experts, k = c->top_k;
    const int D = c->moe_latent ? c->moe_latent : H; /* the experts' width */
    assert(k >= 1 && k <= E); /* the loader's rule: top-k picks k distinct experts */
    assert(L->shared.inter <= (int)hy_fwd_widest_mlp(c));
    float *logits = ex->big; /* [n][E] */
    hy_fwd_linear(ex, n, H, E, ex->xn, (size_t)H, L->router, logits, (size_t)E);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        route_token(c, L->router_bias, logits + (size_t)t * E, ex->topw + (size_t)t * k,
                    ex->topi + (size_t)t * k);
    prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
    const float *src = ex->xn; /* [n][D]: what the experts read */
    float *acc = ex->y;        /* [n][D]: their weighted sum */
    if (c->moe_latent) {
        hy_fwd_linear(ex, n, H, D, ex->xn, (size_t)H, L->latent.w_gu, ex->lat_in, (size_t)D);
        if (L->latent.b_up) hy_fwd_add_bias(ex, n, D, L->latent.b_up, ex->lat_in, (size_t)D);
        src = ex->lat_in, acc = ex->lat_out;
    }
    memset(acc, 0, (size_t)n * D * sizeof(float));
    int *rows = ex->rows; /* (token, slot) pairs routed to expert e */
    for (int e = 0; e < E; e++) {
        prof_begin(ex);
        int m = 0;
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++)
                if (ex->topi[(size_t)t * k + j] == e) {
                    memcpy(ex->xe + (size_t)m * D, src + (size_t)t * D, (size_t)D * sizeof(float));
                    rows[m++] = t * k + j;
                }
        prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
        if (m == 0) continue;
        /* distinct experts per token: at most n rows, the capacity of xe, ye */
        assert(m <= n && L->experts[e].inter <= (int)hy_fwd_widest_mlp(c));
        hy_fwd_ffn(ex, &L->experts[e], m, D, ex->xe, ex->gu, ex->h, ex->ye);
        prof_begin(ex);
        for (int r = 0; r < m; r++) {
            const int t = rows[r] / k;
            const float w = ex->topw[rows[r]];
            float *yr = acc + (size_t)t * D;
            const float *er = ex->ye + (size_t)r * D;
            for (int d = 0; d < D; d++) yr[d] += w * er[d];
        }
        prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
    }
    if (c->moe_latent) {
        hy_fwd_linear(ex, n, D, H, ex->lat_out, (size_t)D, L->latent.w_down, ex->y, (size_t)H);
        if (L->latent.b_down) hy_fwd_add_bias(ex, n, H, L->latent.b_down, ex->y, (size_t)H);
    }
    if (L->shared.inter > 0) {
        hy_fwd_ffn(ex, &L->shared, n, H, ex->xn, ex->gu, ex->h, ex->ye);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            const float *xr = ex->xn + (size_t)t * H;
            float s = 1.0f; /* Kimi's and Nemotron-H's shared experts are not gated */
            if (c->shared_gated) {
                s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < H; d++) s += xr[d] * L->shared_gate[d];
                s = hy_sigmoidf(s);
            }
            float *yr = ex->y + (size_t)t * H;
            const float *sr = ex->ye + (size_t)t * H;
            for (int d = 0; d < H; d++) yr[d] += s * sr[d];
        }
        prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
    }
}
