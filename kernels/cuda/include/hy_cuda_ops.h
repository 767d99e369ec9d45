/*
 * The executor's small operations on the device (kernels/cuda/ops.cu): the
 * norms, the short convolution, the elementwise gates and residuals, the
 * embedding gather, RoPE, and the routed experts' bookkeeping around the
 * products cuBLAS runs (hy_cuda.h). Each follows a CPU kernel's or the CPU
 * executor's contract, named beside it; the arithmetic is in ops_body.h.
 *
 * Every pointer is device memory; hy_cuda.h's conventions hold (row-major,
 * leading dimensions in elements, a launcher queues on `stream` and returns
 * HY_OK, HY_EINVAL for a shape it does not take, or HY_EIO for a failed
 * launch). Zero rows queue nothing (hy_cu_moe_plan excepted: it still
 * writes the offsets, all zero).
 *
 * Beside each launcher hy_cu_X is its twin hy_emu_X (hy_cuda.h, "the
 * emulation"; emu_ops.c): the same signature and contract over host memory,
 * the stream ignored. It refuses what the launcher refuses, with the same
 * message, runs the kernel's bodies for every block and thread, phase by
 * phase in the kernel's order, and returns HY_ENOMEM where it cannot
 * allocate a block's shared memory.
 *
 * The routed experts (hy_fwd_moe's softmax router) run as
 *   hy_cu_linear             logits [n][E] = x · routerᵀ
 *   hy_cu_moe_route          topi, topw [n][k]
 *   hy_cu_moe_plan           offsets [E+1], rows [n·k], slot_row [n·k]
 *   hy_cu_moe_gather         xe [n·k][D]: each expert's rows contiguous
 *   per expert e with rows:  cuBLAS over xe rows [offsets[e], offsets[e+1])
 *                            into the same rows of ye [n·k][D]
 *   hy_cu_moe_combine        y [n][D] = Σ weight · ye, per token
 *   hy_cu_moe_shared_gate    y += sigmoid(x·w_gate) · shared expert's output
 * Everything stays on the device: the plan's counts and offsets are
 * computed there, and gather, combine and the plan itself are sized by n, k,
 * E and D alone. Only cuBLAS needs an expert's row count on the host, so the
 * executor reads offsets back once per layer (E+1 ints, one copy) before
 * its products — not the routing itself, and not per expert.
 */
#ifndef HY_CUDA_OPS_H
#define HY_CUDA_OPS_H

#include "hy_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- norms ------------------------------------------------------------------ */

/* hy_rmsnorm: out[t] = x[t]·rsqrt(mean(x[t]²) + eps)·w over d features per
 * row; w [d] is the effective multiplier (1 + weight for Qwen's zero-centred
 * norms). out may be x. */
int hy_cu_rmsnorm(hy_cu_stream stream, int n, int d, const float *x, size_t ldx, const float *w,
                  float eps, float *out, size_t ldo, hy_err *err);
int hy_emu_rmsnorm(hy_cu_stream stream, int n, int d, const float *x, size_t ldx, const float *w,
                   float eps, float *out, size_t ldo, hy_err *err);
/* The same per head (q_norm, k_norm): head h of row t is the d values at
 * x + t·ldx + h·xhs, normalised into out + t·ldo + h·ohs; w [d] for every
 * head (hy_fwd_rmsnorm_row). */
int hy_cu_rmsnorm_heads(hy_cu_stream stream, int n, int heads, int d, const float *x, size_t ldx,
                        size_t xhs, const float *w, float eps, float *out, size_t ldo, size_t ohs,
                        hy_err *err);
int hy_emu_rmsnorm_heads(hy_cu_stream stream, int n, int heads, int d, const float *x, size_t ldx,
                         size_t xhs, const float *w, float eps, float *out, size_t ldo, size_t ohs,
                         hy_err *err);
/* hy_fwd_gated_rmsnorm per value head, in place: head h of row t, the d
 * values at o + t·ldo + h·d, ← o·rsqrt(mean(o²) + eps)·w·silu(z), z the d
 * values at z + t·ldz + h·d; w [d]. */
int hy_cu_gated_rmsnorm(hy_cu_stream stream, int n, int heads, int d, float *o, size_t ldo,
                        const float *z, size_t ldz, const float *w, float eps, hy_err *err);
int hy_emu_gated_rmsnorm(hy_cu_stream stream, int n, int heads, int d, float *o, size_t ldo,
                         const float *z, size_t ldz, const float *w, float eps, hy_err *err);
/* hy_l2norm_scale per head, in place: the d values at x + t·ldx + h·d
 * ← x·scale / sqrt(Σx² + eps). */
int hy_cu_l2norm_heads(hy_cu_stream stream, int n, int heads, int d, float *x, size_t ldx,
                       float eps, float scale, hy_err *err);
int hy_emu_l2norm_heads(hy_cu_stream stream, int n, int heads, int d, float *x, size_t ldx,
                        float eps, float scale, hy_err *err);

/* --- a few rows against bf16 weights ---------------------------------------------- */

/* The rows up to which hy_linear_bf16 multiplies directly in fp32 (the CPU's
 * DIRECT_ROWS, kernels/linear_narrow.c), bf16 arithmetic past them. */
#define HY_CU_W16_ROWS 4
/* hy_linear_bf16 for up to HY_CU_W16_ROWS rows, its direct path: Y [n][N]
 * = X [n][K] · Wᵀ, W [N][K] bf16 widened as read, fp32 products and sums (X
 * not rounded). What the device executor runs for a decode step's products
 * when it keeps the weights in bf16; more rows go to cuBLAS in bf16
 * (hy_cu_linear_bf16). */
int hy_cu_linear_w16(hy_cu_stream stream, int n, int K, int N, const float *X, size_t ldx,
                     const uint16_t *W, float *Y, size_t ldy, hy_err *err);
int hy_emu_linear_w16(hy_cu_stream stream, int n, int K, int N, const float *X, size_t ldx,
                      const uint16_t *W, float *Y, size_t ldy, hy_err *err);

/* --- the short convolution ----------------------------------------------------- */

/* hy_conv1d_silu: in [n] rows of C (ldi); state [K-1][C], oldest first,
 * updated to the last K-1 inputs; w [K][C] tap-major; bias [C] or NULL;
 * out [n] rows of C (ldo), not overlapping in or state. Two kernels: the
 * outputs, then the state. */
int hy_cu_conv1d_silu(hy_cu_stream stream, int n, int C, int K, const float *in, size_t ldi,
                      float *state, const float *w, const float *bias, float *out, size_t ldo,
                      hy_err *err);
int hy_emu_conv1d_silu(hy_cu_stream stream, int n, int C, int K, const float *in, size_t ldi,
                       float *state, const float *w, const float *bias, float *out, size_t ldo,
                       hy_err *err);

/* --- elementwise ----------------------------------------------------------------- */

/* SwiGLU: h[t][j] = silu(gu[t][j])·gu[t][I + j], gu rows gate | up of 2I. */
int hy_cu_swiglu(hy_cu_stream stream, int n, int I, const float *gu, size_t ldg, float *h,
                 size_t ldh, hy_err *err);
int hy_emu_swiglu(hy_cu_stream stream, int n, int I, const float *gu, size_t ldg, float *h,
                  size_t ldh, hy_err *err);
/* x ← max(x, 0)² over n rows of d, in place (relu², Nemotron-H). */
int hy_cu_relu2(hy_cu_stream stream, int n, int d, float *x, size_t ldx, hy_err *err);
int hy_emu_relu2(hy_cu_stream stream, int n, int d, float *x, size_t ldx, hy_err *err);
/* y[t][j] += b[j] over n rows of d (hy_fwd_add_bias). */
int hy_cu_add_bias(hy_cu_stream stream, int n, int d, const float *b, float *y, size_t ldy,
                   hy_err *err);
int hy_emu_add_bias(hy_cu_stream stream, int n, int d, const float *b, float *y, size_t ldy,
                    hy_err *err);
/* x[i] += y[i], i < count: the residual. */
int hy_cu_add(hy_cu_stream stream, size_t count, float *x, const float *y, hy_err *err);
int hy_emu_add(hy_cu_stream stream, size_t count, float *x, const float *y, hy_err *err);
/* x[i] = alpha·a[i] + beta·b[i], i < count: the scaled residual (x may be a or b). */
int hy_cu_axpby(hy_cu_stream stream, size_t count, float alpha, const float *a, float beta,
                const float *b, float *x, hy_err *err);
int hy_emu_axpby(hy_cu_stream stream, size_t count, float alpha, const float *a, float beta,
                 const float *b, float *x, hy_err *err);
/* o ← o·sigmoid(g) for d values of each of `heads` heads of n rows: head h
 * of row t at o + t·ldo + h·ohs, its gate at g + t·ldg + h·ghs (attention's
 * output gate). */
int hy_cu_mul_sigmoid(hy_cu_stream stream, int n, int heads, int d, float *o, size_t ldo,
                      size_t ohs, const float *g, size_t ldg, size_t ghs, hy_err *err);
int hy_emu_mul_sigmoid(hy_cu_stream stream, int n, int heads, int d, float *o, size_t ldo,
                       size_t ohs, const float *g, size_t ldg, size_t ghs, hy_err *err);
/* out[t] = table[ids[t]], table [vocab][H] fp32, ids [n] int32 already
 * checked to be in [0, vocab). */
int hy_cu_embed(hy_cu_stream stream, int n, int H, const int32_t *ids, const float *table,
                float *out, size_t ldo, hy_err *err);
int hy_emu_embed(hy_cu_stream stream, int n, int H, const int32_t *ids, const float *table,
                 float *out, size_t ldo, hy_err *err);

/* --- RoPE ------------------------------------------------------------------------ */

/* hy_rope_cos_sin for positions pos0 … pos0 + npos − 1: cs [npos][rd], row p
 * cos then sin of the fp32 angle (pos0 + p)·inv_freq[i], inv_freq [rd/2]. */
int hy_cu_rope_table(hy_cu_stream stream, int rd, const float *inv_freq, int64_t pos0, int64_t npos,
                     float *cs, hy_err *err);
int hy_emu_rope_table(hy_cu_stream stream, int rd, const float *inv_freq, int64_t pos0,
                      int64_t npos, float *cs, hy_err *err);
/* hy_rope_rotate in place on the first rd dims of every head of q and k for
 * n rows, row t by the table row cs + pos[t]·rd (pos [n] int64, the tokens'
 * positions); dims rd … of a head are not touched. q: nq heads, head h of
 * row t at q + t·ldq + h·qhs; k likewise (k NULL when nk is 0). */
int hy_cu_rope_rotate(hy_cu_stream stream, int n, int rd, const int64_t *pos, const float *cs,
                      float *q, size_t ldq, size_t qhs, int nq, float *k, size_t ldk, size_t khs,
                      int nk, hy_err *err);
int hy_emu_rope_rotate(hy_cu_stream stream, int n, int rd, const int64_t *pos, const float *cs,
                       float *q, size_t ldq, size_t qhs, int nq, float *k, size_t ldk, size_t khs,
                       int nk, hy_err *err);

/* --- routed experts (softmax router) ----------------------------------------------- */

/* Per token: softmax of its E logits (ldl), the k most probable experts
 * (ties to the lower index) into topi [n][k] in the order chosen, their
 * probabilities into topw [n][k], renormalised to sum 1 with norm_topk.
 * 1 <= k <= E; logits finite. */
int hy_cu_moe_route(hy_cu_stream stream, int n, int E, int k, int norm_topk, const float *logits,
                    size_t ldl, int32_t *topi, float *topw, hy_err *err);
int hy_emu_moe_route(hy_cu_stream stream, int n, int E, int k, int norm_topk, const float *logits,
                     size_t ldl, int32_t *topi, float *topw, hy_err *err);
/* The n·k slots (s = t·k + j) sorted by expert, then by slot: offsets
 * [E+1] (expert e's rows are [offsets[e], offsets[e+1])), rows [n·k] (each
 * sorted row's slot), slot_row [n·k] (each slot's sorted row). n·k < 2^24. */
int hy_cu_moe_plan(hy_cu_stream stream, int n, int k, int E, const int32_t *topi, int32_t *offsets,
                   int32_t *rows, int32_t *slot_row, hy_err *err);
int hy_emu_moe_plan(hy_cu_stream stream, int n, int k, int E, const int32_t *topi, int32_t *offsets,
                    int32_t *rows, int32_t *slot_row, hy_err *err);
/* xe row r (ldxe) = src row rows[r] / k (lds), r < n·k, D values each. */
int hy_cu_moe_gather(hy_cu_stream stream, int n, int k, int D, const int32_t *rows,
                     const float *src, size_t lds, float *xe, size_t ldxe, hy_err *err);
int hy_emu_moe_gather(hy_cu_stream stream, int n, int k, int D, const int32_t *rows,
                      const float *src, size_t lds, float *xe, size_t ldxe, hy_err *err);
/* out[t] = Σ_j topw[t][j]·ye[slot_row[t·k + j]] over D values, summed in
 * ascending expert order from zero (hy_fwd_moe's scatter, deterministic:
 * no atomics). ye: [n·k] rows (ldy) in sorted-row order. */
int hy_cu_moe_combine(hy_cu_stream stream, int n, int k, int D, const int32_t *slot_row,
                      const float *topw, const float *ye, size_t ldy, float *out, size_t ldo,
                      hy_err *err);
int hy_emu_moe_combine(hy_cu_stream stream, int n, int k, int D, const int32_t *slot_row,
                       const float *topw, const float *ye, size_t ldy, float *out, size_t ldo,
                       hy_err *err);
/* y[t] += s·ye[t] over H values, s = sigmoid(x[t]·wg) (wg [H]: the shared
 * expert's gate), or 1 with wg NULL. */
int hy_cu_moe_shared_gate(hy_cu_stream stream, int n, int H, const float *x, size_t ldx,
                          const float *wg, const float *ye, size_t ldye, float *y, size_t ldy,
                          hy_err *err);
int hy_emu_moe_shared_gate(hy_cu_stream stream, int n, int H, const float *x, size_t ldx,
                           const float *wg, const float *ye, size_t ldye, float *y, size_t ldy,
                           hy_err *err);

#ifdef __cplusplus
}
#endif

#endif
