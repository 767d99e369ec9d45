/*
 * The linear mixers (docs/executor.md): Gated DeltaNet (Qwen3-Next,
 * Qwen3.5, OLMo-Hybrid), Kimi Delta Attention (Kimi-Linear, Ling), Mamba2
 * (Nemotron-H) and lightning attention (MiniMax). Each is its projection,
 * the short conv where it has one, its gates, then the family's kernel per
 * head over the step's items — runs advance the state (and a capture's T),
 * holes compose into it — and its output norm and projection.
 */
#include "exec_internal.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* --- linear layers ------------------------------------------------------ */

/* A hole composed into one head's state: S ← T·S + S_body, or S ← S + S_body
 * without T (naive: T replaced by I — wrong for any decaying layer). work:
 * hy_fwd_compose_floats(). */
static void compose_head(const hy_model_config *c, const hy_entry *e, int li, int h, bool use_T,
                         float *S, float *work)
{
    const size_t at = (size_t)li * c->lin_v_heads + h;
    hy_rep_apply(hy_lin_tkind(c), c->lin_dk, c->lin_dv, &e->th[at], &e->sh[at], use_T, S, work);
}

/* Advances one head's state S over the step's rows [off, off + len) of a
 * run (and T beside it when not NULL), writing their outputs: the family's
 * kernel. ctx: the step's activations it reads. */
typedef void (*head_run_fn)(hy_exec *ex, int li, int h, int off, int len, float *S, float *T,
                            float *work, const float *ctx);
/* Σ of head h's scalar log-decays over rows [off, off + len) of the step, for
 * families whose decay is one scalar per token and head (T = γ·Π(…) with
 * γ = exp of it), else NULL. */
typedef double (*head_logdecay_fn)(const hy_exec *ex, int h, int off, int len);

/* One head over the step's items in request order, whatever the family: runs
 * advance S through `run` (from a capture's start, T beside it; the state is
 * kept at the body's start and replaced at the segment's end by S_body = S −
 * T·S_w), holes compose into S. Returns the seconds spent composing. */
static double head_items(hy_exec *ex, hy_state *st, int li, int h, const item *it, int ni,
                         float *work, head_run_fn run, head_logdecay_fn logdecay, const float *ctx)
{
    const hy_model_config *c = &ex->m->cfg;
    const int dk = c->lin_dk, dv = c->lin_dv;
    const size_t ss = (size_t)dk * dv, th = hy_la_t_size(hy_lin_family(c), dk);
    float *S = st->S[li] + (size_t)h * ss;
    double composing = 0.0;
    for (int i = 0; i < ni; i++) {
        const hy_piece *p = it[i].p;
        if (!p->tokens) {
            const double t0 = hy_now_s();
            compose_head(c, p->hole, li, h, p->use_T, S, work);
            composing += hy_now_s() - t0;
            continue;
        }
        const int r0 = it[i].r0, n = it[i].n;
        const hy_capture *cap = p->cap;
        /* With a capture, rows [0, s) run without T, the state is kept at s
         * (the body's start), and rows [s, n) advance T too. */
        const int s = hy_fwd_capture_split(cap, it[i].pos, n);
        for (int part = 0; part < 2; part++) {
            const int off = r0 + (part ? s : 0), len = part ? n - s : s;
            if (len > 0)
                run(ex, li, h, off, len, S, part ? cap->T[li] + (size_t)h * th : NULL, work, ctx);
            if (len > 0 && part && logdecay && cap->logdecay[li])
                cap->logdecay[li][h] += logdecay(ex, h, off, len);
            if (part == 0 && cap && it[i].pos + s == cap->start)
                memcpy(cap->S_w[li] + (size_t)h * ss, S, ss * sizeof(float));
        }
        if (cap && it[i].last) { /* the segment's end: S_w ← S_body = S − T·S_w */
            float *sw = cap->S_w[li] + (size_t)h * ss;
            hy_la_extract(hy_lin_tkind(c), dk, dv, cap->T[li] + (size_t)h * th, sw, S, sw, work);
        }
    }
    return composing;
}

/* Every head of a linear layer over the step's items (head_items with the
 * family's kernel), in parallel; each thread's composing time is added to
 * its compose timer. */
static void heads_over_items(hy_exec *ex, hy_state *st, int li, int nheads, int group,
                             const item *it, int ni, head_run_fn run, head_logdecay_fn logdecay,
                             const float *ctx)
{
    prof_begin(ex);
    /* heads [g·group, (g+1)·group) on one thread, one after another */
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < nheads / group; g++) {
        const int tid = omp_get_thread_num();
        assert(tid < ex->nthreads && tid < ex->tcompose_n);
        float *work = ex->scratch + (size_t)tid * ex->scratch_per_thread;
        for (int h = g * group; h < (g + 1) * group; h++)
            ex->tcompose[(size_t)tid * TC_PAD] +=
                head_items(ex, st, li, h, it, ni, work, run, logdecay, ctx);
    }
    prof_end(ex, HY_EXEC_OP_DELTA_RULE);
}

/* A family kernel over one head's rows: chunked for runs of more than one
 * token unless the recurrent form is asked for. */
static void la_kernel(const hy_exec *ex, const hy_la_in *in, float *S, float *o, size_t ldo,
                      float *T, float *work)
{
    if (ex->mode == HY_GDN_CHUNKED && in->n > 1)
        hy_la_chunked(in, S, o, ldo, T, work);
    else
        hy_la_recurrent(in, S, o, ldo, T);
}

/* The short conv (SiLU) over the first C channels of each run's projection
 * rows (stride P), from the state the item before left, into cv [n][C]; a
 * hole leaves its tail, the last K−1 inputs of its segment, and a capture
 * ending in the step takes the conv state at its end. */
static void conv_items(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int C,
                       const float *proj, int P, const float *conv_w, const float *conv_b,
                       float *cv)
{
    const int K = ex->m->cfg.conv_kernel;
    const size_t tail = (size_t)(K - 1) * (size_t)C * sizeof(float);
    prof_begin(ex);
    for (int i = 0; i < ni; i++) {
        const hy_piece *p = it[i].p;
        if (!p->tokens) {
            memcpy(st->conv[li], p->hole->tail[li], tail);
            continue;
        }
        hy_conv1d_silu(it[i].n, C, K, proj + (size_t)it[i].r0 * P, (size_t)P, st->conv[li], conv_w,
                       conv_b, cv + (size_t)it[i].r0 * C, (size_t)C);
        if (p->cap && it[i].last) memcpy(p->cap->tail[li], st->conv[li], tail);
    }
    prof_end(ex, HY_EXEC_OP_CONV);
}

/* The delta rule of head h over rows [off, off + len); cv: the conv's output
 * rows q | k | v (q, k normalised). */
static void gdn_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                    const float *cv)
{
    (void)li;
    const hy_model_config *c = &ex->m->cfg;
    const int Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    const int Kd = Hk * dk, Vd = Hv * dv, C = 2 * Kd + Vd, hk = h / (Hv / Hk);
    const hy_gdn_in in = {.n = len,
                          .dk = dk,
                          .dv = dv,
                          .q = cv + (size_t)off * C + hk * dk,
                          .k = cv + (size_t)off * C + Kd + hk * dk,
                          .v = cv + (size_t)off * C + 2 * Kd + h * dv,
                          .ldq = (size_t)C,
                          .ldk = (size_t)C,
                          .ldv = (size_t)C,
                          .g = ex->g + (size_t)off * Hv + h,
                          .beta = ex->beta + (size_t)off * Hv + h,
                          .ldgb = (size_t)Hv};
    float *o = ex->o + (size_t)off * Vd + (size_t)h * dv;
    if (ex->mode == HY_GDN_CHUNKED && len > 1 && ex->share_slots) {
        const size_t tid = (size_t)omp_get_thread_num();
        const hy_gdn_share sh = {.prods = work + hy_gdn_chunked_scratch(dk, dv),
                                 .tags = ex->share_tags + tid * 2 * ex->share_slots,
                                 .nslots = ex->share_slots,
                                 .id = ex->share_gen * Hk + hk,
                                 .row0 = off};
        hy_gdn_chunked_shared(&in, S, o, (size_t)Vd, T, work, &sh);
    } else if (ex->mode == HY_GDN_CHUNKED && len > 1)
        hy_gdn_chunked(&in, S, o, (size_t)Vd, T, work);
    else
        hy_gdn_recurrent(&in, S, o, (size_t)Vd, T);
}

/* GDN's log-decay of head h per row, ex->g [rows][Hv]. */
static double gdn_logdecay(const hy_exec *ex, int h, int off, int len)
{
    const int Hv = ex->m->cfg.lin_v_heads;
    double s = 0.0;
    for (int t = off; t < off + len; t++) s += ex->g[(size_t)t * Hv + h];
    return s;
}

/* A linear layer over the step's n computed rows (n may be 0: holes only). */
void hy_fwd_gdn_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                      int nholes)
{
    (void)nblk, (void)nholes; /* a linear layer reads the items alone */
    const hy_model_config *c = &ex->m->cfg;
    const hy_gdn_w *w = &ex->m->layers[li].gdn;
    const int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_dk,
              dv = c->lin_dv;
    const int Kd = Hk * dk, Vd = Hv * dv, C = 2 * Kd + Vd, P = C + Vd + 2 * Hv;
    float *proj = ex->big, *cv = ex->mid;
    /* the state's S and conv buffers are sized from the same config */
    assert(Hv % Hk == 0 && C == hy_config_conv_dim(c) && st->S[li] && st->conv[li]);
    assert(ex->scratch_per_thread >= hy_gdn_chunked_scratch(dk, dv));
    assert(ex->scratch_per_thread >= hy_fwd_compose_floats(c));

    if (n > 0) hy_fwd_linear(ex, n, H, P, ex->xn, (size_t)H, w->w_in, proj, (size_t)P);
    conv_items(ex, st, li, it, ni, C, proj, P, w->conv_w, NULL, cv);

    const float qscale = 1.0f / sqrtf((float)dk);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = cv + (size_t)t * C;
        for (int hk = 0; hk < Hk; hk++) {
            hy_l2norm_scale(row + hk * dk, dk, 1e-6f, qscale);
            hy_l2norm_scale(row + Kd + hk * dk, dk, 1e-6f, 1.0f);
        }
        const float *b = proj + (size_t)t * P + C + Vd, *a = b + Hv;
        for (int h = 0; h < Hv; h++) {
            ex->beta[(size_t)t * Hv + h] = c->lin_beta_scale * hy_sigmoidf(b[h]);
            ex->g[(size_t)t * Hv + h] = w->neg_A[h] * hy_softplusf(a[h] + w->dt_bias[h]);
        }
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    /* a key head's value heads on one thread, sharing its products */
    const bool share = ex->share_slots > 0;
    if (share) ex->share_gen++;
    heads_over_items(ex, st, li, Hv, share ? Hv / Hk : 1, it, ni, gdn_run, gdn_logdecay, cv);
    if (n == 0) return;

    /* Gated RMSNorm per value head: w · norm(o) · silu(z). */
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hv; h++)
            hy_fwd_gated_rmsnorm(ex->o + (size_t)t * Vd + (size_t)h * dv,
                                 proj + (size_t)t * P + C + (size_t)h * dv, w->norm_w, dv,
                                 c->lin_norm_eps);
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    hy_fwd_linear(ex, n, Vd, H, ex->o, (size_t)Vd, w->w_out, ex->y, (size_t)H);
}

/* --- Kimi Delta Attention -------------------------------------------------- */

/* KDA of head h over rows [off, off + len): the delta rule with a decay per
 * key channel (T dense). cv: the conv's output rows q | k | v (q, k
 * normalised, q scaled); ex->g the per-channel log-decays, ex->beta β. */
static void kda_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                    const float *cv)
{
    (void)li;
    const hy_model_config *c = &ex->m->cfg;
    const int H = c->lin_v_heads, d = c->lin_dk, Q = H * d, C = 3 * Q;
    const float *row = cv + (size_t)off * C + (size_t)h * d;
    const hy_la_in in = {.family = HY_LA_KDA,
                         .n = len,
                         .dk = d,
                         .dv = d,
                         .q = row,
                         .k = row + Q,
                         .v = row + 2 * Q,
                         .ldq = (size_t)C,
                         .ldk = (size_t)C,
                         .ldv = (size_t)C,
                         .g = ex->g + (size_t)off * Q + (size_t)h * d,
                         .ldg = (size_t)Q,
                         .beta = ex->beta + (size_t)off * H + h,
                         .ldb = (size_t)H};
    float *o = ex->o + (size_t)off * Q + (size_t)h * d;
    la_kernel(ex, &in, S, o, (size_t)Q, T, work);
}

/* A KDA layer over the step's n computed rows (n may be 0: holes only): the
 * fused projection, the SiLU short conv over q | k | v, the per-channel
 * log-decay g = −exp(A_log)·softplus(f + dt_bias) — or Ling's bounded
 * lower_bound·sigmoid(exp(A_log)·(f + dt_bias)) — with f = f_b(f_a x) (Kimi)
 * or f_proj x (Ling), β = sigmoid(b), l2-normalised q (scaled by d^−½) and
 * k, the delta rule per head, then per head w·norm(o)·sigmoid(z) with z =
 * g_b(g_a x) or g_proj x, and o_proj. */
void hy_fwd_kda_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                      int nholes)
{
    (void)nblk, (void)nholes; /* a linear layer reads the items alone */
    const hy_model_config *c = &ex->m->cfg;
    const hy_kda_w *w = &ex->m->layers[li].kda;
    const int Hd = c->hidden, H = c->lin_v_heads, d = c->lin_dk, Q = H * d, C = 3 * Q;
    const bool full = c->kda_full_gates;           /* Ling: f and g straight from the projection */
    const int G = full ? Q : d, P = C + 2 * G + H; /* rows q | k | v | f | g | b */
    float *proj = ex->big, *cv = ex->mid;
    assert(c->lin_dk == c->lin_dv && c->lin_k_heads == H && C == hy_config_conv_dim(c));
    assert(st->S[li] && st->conv[li]);
    assert(ex->scratch_per_thread >= hy_la_chunked_scratch(HY_LA_KDA, d, d));
    if (n > 0) {
        hy_fwd_linear(ex, n, Hd, P, ex->xn, (size_t)Hd, w->w_in, proj, (size_t)P);
        if (full) {
            prof_begin(ex);
#pragma omp parallel for schedule(static)
            for (int t = 0; t < n; t++) {
                memcpy(ex->g + (size_t)t * Q, proj + (size_t)t * P + C, (size_t)Q * sizeof(float));
                memcpy(ex->aux + (size_t)t * Q, proj + (size_t)t * P + C + Q,
                       (size_t)Q * sizeof(float));
            }
            prof_end(ex, HY_EXEC_OP_NORM_GATE);
        } else {
            hy_fwd_linear(ex, n, d, Q, proj + C, (size_t)P, w->w_fb, ex->g, (size_t)Q);
            hy_fwd_linear(ex, n, d, Q, proj + C + d, (size_t)P, w->w_gb, ex->aux, (size_t)Q);
        }
    }
    conv_items(ex, st, li, it, ni, C, proj, P, w->conv_w, NULL, cv);

    const float qscale = 1.0f / sqrtf((float)d);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = cv + (size_t)t * C, *g = ex->g + (size_t)t * Q;
        for (int h = 0; h < H; h++) {
            hy_l2norm_scale(row + h * d, d, 1e-6f, qscale);
            hy_l2norm_scale(row + Q + h * d, d, 1e-6f, 1.0f);
            if (c->kda_safe_gate) /* Ling: lb·sigmoid(exp(A_log)·(f + dt_bias)) ∈ (lb, 0) */
                for (int j = 0; j < d; j++) {
                    const int ch = h * d + j;
                    g[ch] =
                        c->kda_lower_bound * hy_sigmoidf(-w->neg_A[h] * (g[ch] + w->dt_bias[ch]));
                }
            else
                for (int j = 0; j < d; j++) {
                    const int ch = h * d + j;
                    g[ch] = w->neg_A[h] * hy_softplusf(g[ch] + w->dt_bias[ch]);
                }
        }
        const float *b = proj + (size_t)t * P + C + 2 * G;
        for (int h = 0; h < H; h++) ex->beta[(size_t)t * H + h] = hy_sigmoidf(b[h]);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    heads_over_items(ex, st, li, H, 1, it, ni, kda_run, NULL, cv);
    if (n == 0) return;

    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            float *o = ex->o + (size_t)t * Q + (size_t)h * d;
            const float *z = ex->aux + (size_t)t * Q + (size_t)h * d;
            hy_fwd_rmsnorm_row(o, w->norm_w, d, c->rms_eps, o);
#pragma omp simd
            for (int j = 0; j < d; j++) o[j] *= hy_sigmoidf(z[j]);
        }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    hy_fwd_linear(ex, n, Q, Hd, ex->o, (size_t)Q, w->w_out, ex->y, (size_t)Hd);
}

/* --- Mamba2 (Nemotron-H) ---------------------------------------------------- */

/* Mamba2 of head h over rows [off, off + len): per token S ← a·S + B (dt·x)ᵀ
 * with a = exp(dt·A) (one decay per head and token: T a scalar) and
 * o = Sᵀ C, the kernels' MAMBA2 family with key B, query C and value dt·x.
 * cv: the conv's output rows x | B | C; ex->aux the rows of dt·x, ex->g
 * those of dt·A. */
static void mamba_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                      const float *cv)
{
    (void)li;
    const hy_model_config *c = &ex->m->cfg;
    const int nh = c->lin_v_heads, G = c->lin_k_heads, N = c->lin_dk, P = c->lin_dv;
    const int I = nh * P, C = I + 2 * G * N, g = h / (nh / G);
    const float *row = cv + (size_t)off * C;
    const hy_la_in in = {.family = HY_LA_MAMBA2,
                         .n = len,
                         .dk = N,
                         .dv = P,
                         .q = row + I + G * N + g * N,
                         .k = row + I + g * N,
                         .v = ex->aux + (size_t)off * I + (size_t)h * P,
                         .ldq = (size_t)C,
                         .ldk = (size_t)C,
                         .ldv = (size_t)I,
                         .g = ex->g + (size_t)off * nh + h,
                         .ldg = (size_t)nh};
    float *o = ex->o + (size_t)off * I + (size_t)h * P;
    la_kernel(ex, &in, S, o, (size_t)I, T, work);
}

/* A Mamba2 layer over the step's n computed rows (n may be 0: holes only):
 * in_proj to z | x B C | dt, the SiLU conv over x B C, dt = softplus(dt +
 * dt_bias) — clamped below at dt_min unless the call is a decode step, as
 * transformers' chunked scan clamps and its one-token update does not — the
 * scan per head, y + D·x, then the gated norm: y ⊙ silu(z) normalised over
 * each group's heads, times its weight, and out_proj. */
void hy_fwd_mamba_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                        int nholes)
{
    (void)nblk, (void)nholes; /* a linear layer reads the items alone */
    const hy_model_config *c = &ex->m->cfg;
    const hy_mamba_w *w = &ex->m->layers[li].mamba;
    const int H = c->hidden, nh = c->lin_v_heads, G = c->lin_k_heads, N = c->lin_dk, P = c->lin_dv;
    const int I = nh * P, C = I + 2 * G * N, Pin = I + C + nh, gw = I / G;
    float *proj = ex->big, *cv = ex->mid;
    assert(C == hy_config_conv_dim(c) && nh % G == 0 && st->S[li] && st->conv[li]);
    assert(ex->scratch_per_thread >= hy_la_chunked_scratch(HY_LA_MAMBA2, N, P));
    if (n > 0) {
        hy_fwd_linear(ex, n, H, Pin, ex->xn, (size_t)H, w->w_in, proj, (size_t)Pin);
        if (w->b_in) hy_fwd_add_bias(ex, n, Pin, w->b_in, proj, (size_t)Pin);
    }
    conv_items(ex, st, li, it, ni, C, proj + I, Pin, w->conv_w, w->conv_b, cv);

    const float lo = ex->decode_step ? 0.0f : c->dt_min; /* softplus is > 0 anyway */
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *dtr = proj + (size_t)t * Pin + I + C, *x = cv + (size_t)t * C;
        float *v = ex->aux + (size_t)t * I;
        for (int h = 0; h < nh; h++) {
            float dt = hy_softplusf(dtr[h] + w->dt_bias[h]);
            dt = dt < lo ? lo : dt;
            ex->g[(size_t)t * nh + h] = w->neg_A[h] * dt;
#pragma omp simd
            for (int p = 0; p < P; p++) v[h * P + p] = dt * x[h * P + p];
        }
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    heads_over_items(ex, st, li, nh, 1, it, ni, mamba_run, NULL, cv);
    if (n == 0) return;

    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *o = ex->o + (size_t)t * I;
        const float *x = cv + (size_t)t * C, *z = proj + (size_t)t * Pin;
        for (int h = 0; h < nh; h++)
#pragma omp simd
            for (int p = 0; p < P; p++) o[h * P + p] += w->D[h] * x[h * P + p];
#pragma omp simd
        for (int j = 0; j < I; j++) o[j] *= hy_siluf(z[j]);
        for (int g = 0; g < G; g++)
            hy_fwd_rmsnorm_row(o + (size_t)g * gw, w->norm_w + (size_t)g * gw, gw, c->lin_norm_eps,
                               o + (size_t)g * gw);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    hy_fwd_linear(ex, n, I, H, ex->o, (size_t)I, w->w_out, ex->y, (size_t)H);
    if (w->b_out) hy_fwd_add_bias(ex, n, H, w->b_out, ex->y, (size_t)H);
}

/* --- lightning attention (MiniMax) ----------------------------------------- */

/* Lightning attention of head h over rows [off, off + len): S ← a·S + k vᵀ
 * per token with the head's constant decay a = exp(g0), o = Sᵀq (T a
 * scalar). proj: the step's rows of silu(qkv) | gate. */
static void light_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                      const float *proj)
{
    const hy_model_config *c = &ex->m->cfg;
    const int d = c->lin_dk, D = c->lin_v_heads * d, P = 4 * D;
    const float *row = proj + (size_t)off * P + (size_t)h * 3 * d;
    const hy_la_in in = {.family = HY_LA_LIGHTNING,
                         .n = len,
                         .dk = d,
                         .dv = d,
                         .q = row,
                         .k = row + d,
                         .v = row + 2 * d,
                         .ldq = (size_t)P,
                         .ldk = (size_t)P,
                         .ldv = (size_t)P,
                         .g0 = ex->m->layers[li].light.g0[h]};
    float *o = ex->o + (size_t)off * D + (size_t)h * d;
    la_kernel(ex, &in, S, o, (size_t)D, T, work);
}

/* A lightning layer over the step's n computed rows (n may be 0: holes
 * only): silu over qkv_proj (per head [q | k | v], no scaling, no norm), the
 * decayed linear attention per head, the output RMSNorm over all heads,
 * times sigmoid(output_gate(x)), then out_proj. No conv: a hole leaves
 * nothing but its state. */
void hy_fwd_light_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                        int nholes)
{
    (void)nblk, (void)nholes; /* a linear layer reads the items alone */
    const hy_model_config *c = &ex->m->cfg;
    const hy_light_w *w = &ex->m->layers[li].light;
    const int H = c->hidden, nh = c->lin_v_heads, d = c->lin_dk, D = nh * d, P = 4 * D;
    float *proj = ex->big;
    assert(c->lin_dk == c->lin_dv && st->S[li]);
    assert(ex->scratch_per_thread >= hy_la_chunked_scratch(HY_LA_LIGHTNING, d, d));
    if (n > 0) {
        hy_fwd_linear(ex, n, H, P, ex->xn, (size_t)H, w->w_in, proj, (size_t)P);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            float *row = proj + (size_t)t * P;
#pragma omp simd
            for (int j = 0; j < 3 * D; j++) row[j] = hy_siluf(row[j]);
        }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    heads_over_items(ex, st, li, nh, 1, it, ni, light_run, NULL, proj);
    if (n == 0) return;
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *o = ex->o + (size_t)t * D;
        const float *gate = proj + (size_t)t * P + 3 * D;
        hy_fwd_rmsnorm_row(o, w->norm_w, D, c->lin_norm_eps, o);
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] *= hy_sigmoidf(gate[j]);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    hy_fwd_linear(ex, n, D, H, ex->o, (size_t)D, w->w_out, ex->y, (size_t)H);
}
