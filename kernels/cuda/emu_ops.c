/*
 * The twins of ops.cu's launchers (hy_cuda_ops.h; hy_cuda.h, "the
 * emulation"): each refuses what its launcher refuses (ops_body.h's checks)
 * and runs its kernel's bodies on the host, over host memory, in the
 * kernel's schedule.
 *
 * A phased kernel runs block after block; a block's shared memory is NaN at
 * its start (hy_emu_shared), and each phase runs for every thread of the
 * block before the next phase starts — what the kernel's barrier
 * guarantees, and no more: with hy_emu_reversed() the threads of a phase run
 * last to first, so a phase that reads what another thread of the same
 * phase writes (a race on the device) gives other bits. An elementwise
 * kernel is its grid-stride loop over the flat index, the index split into
 * (row, column) as the kernel splits it, in reverse with hy_emu_reversed().
 * The conv is two kernels, as on the device: every output, then the state.
 */
#include "hy_cuda_ops.h"

#include "ops_body.h"

#include <math.h>
#include <string.h>

/* An elementwise kernel's flat indices i < count, one after another (last
 * first with hy_emu_reversed()): ops.cu's FOR_EACH on one thread. */
#define FOR_EACH(i, count)                                                                         \
    for (size_t n_ = (count), k_ = 0, rev_ = hy_emu_reversed(), i = rev_ ? n_ - 1 : 0; k_ < n_;    \
         k_++, i = rev_ ? n_ - 1 - k_ : k_)

/* One phase of a block: a family's `_phase` body behind one type. */
typedef void (*phase_fn)(const void *a, int ph, int b, int tid, int nthr, float *sh);

/* A phased kernel: nblocks blocks of nthr threads running `phases` phases,
 * `shared` floats of shared memory each. HY_ENOMEM when that memory cannot
 * be had (nothing run). */
static int run_blocks(phase_fn phase, const void *a, int phases, int nblocks, int nthr,
                      size_t shared, const char *what, hy_err *err)
{
    float *sh = hy_emu_shared(shared);
    if (!sh)
        return hy_err_set(err, HY_ENOMEM, "emulated %s: out of memory (%zu shared floats)", what,
                          shared);
    const bool rev = hy_emu_reversed();
    for (int b = 0; b < nblocks; b++) {
        if (b > 0) /* the block before left its values: poison them again */
            for (size_t i = 0; i < shared; i++) sh[i] = NAN;
        for (int ph = 0; ph < phases; ph++)
            for (int u = 0; u < nthr; u++) phase(a, ph, b, rev ? nthr - 1 - u : u, nthr, sh);
    }
    hy_free(sh);
    return HY_OK;
}

static void norm_phase(const void *a, int ph, int b, int tid, int nthr, float *sh)
{
    hy_cu_norm_phase(a, ph, b, tid, nthr, sh);
}

static void route_phase(const void *a, int ph, int b, int tid, int nthr, float *sh)
{
    hy_cu_route_phase(a, ph, b, tid, nthr, sh);
}

static void plan_phase(const void *a, int ph, int b, int tid, int nthr, float *sh)
{
    hy_cu_plan_phase(a, ph, b, tid, nthr, sh);
}

static void combine_phase(const void *a, int ph, int b, int tid, int nthr, float *sh)
{
    hy_cu_combine_phase(a, ph, b, tid, nthr, sh);
}

static void sgate_phase(const void *a, int ph, int b, int tid, int nthr, float *sh)
{
    hy_cu_sgate_phase(a, ph, b, tid, nthr, sh);
}

/* --- a few rows against bf16 weights ---------------------------------------------- */

static void w16_phase(const void *a, int ph, int b, int tid, int nthr, float *sh)
{
    hy_cu_w16_phase(a, ph, b, tid, nthr, sh);
}

int hy_emu_linear_w16(hy_cu_stream stream, int n, int K, int N, const float *X, size_t ldx,
                      const uint16_t *W, float *Y, size_t ldy, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_linear_w16_check(n, K, N, err);
    if (rc || n == 0) return rc;
    const hy_cu_w16_args a = {n, K, N, X, ldx, W, Y, ldy};
    const int nthr = hy_cu_w16_threads(K);
    return run_blocks(w16_phase, &a, hy_cu_w16_phases(nthr), N, nthr, hy_cu_w16_shared(nthr),
                      "linear_w16", err);
}

/* --- norms ------------------------------------------------------------------------- */

static int norm_run(int n, const hy_cu_norm_args *a, const char *what, hy_err *err)
{
    const int rc = hy_cu_norm_check(n, a->heads, a->d, what, err);
    if (rc != HY_OK || n == 0) return rc;
    const int nthr = hy_cu_norm_threads(a->d);
    return run_blocks(norm_phase, a, hy_cu_norm_phases(nthr), n * a->heads, nthr,
                      hy_cu_norm_shared(nthr), what, err);
}

static hy_cu_norm_args norm_args(int kind, int heads, int d, float eps)
{
    hy_cu_norm_args a;
    memset(&a, 0, sizeof a);
    a.kind = kind, a.heads = heads, a.d = d, a.eps = eps, a.scale = 1.0f;
    return a;
}

int hy_emu_rmsnorm(hy_cu_stream stream, int n, int d, const float *x, size_t ldx, const float *w,
                   float eps, float *out, size_t ldo, hy_err *err)
{
    (void)stream;
    hy_cu_norm_args a = norm_args(HY_CU_NORM_RMS, 1, d, eps);
    a.x = x, a.ldx = ldx, a.w = w, a.out = out, a.ldo = ldo;
    return norm_run(n, &a, "rmsnorm", err);
}

int hy_emu_rmsnorm_heads(hy_cu_stream stream, int n, int heads, int d, const float *x, size_t ldx,
                         size_t xhs, const float *w, float eps, float *out, size_t ldo, size_t ohs,
                         hy_err *err)
{
    (void)stream;
    hy_cu_norm_args a = norm_args(HY_CU_NORM_RMS, heads, d, eps);
    a.x = x, a.ldx = ldx, a.xhs = xhs, a.w = w, a.out = out, a.ldo = ldo, a.ohs = ohs;
    return norm_run(n, &a, "rmsnorm_heads", err);
}

int hy_emu_gated_rmsnorm(hy_cu_stream stream, int n, int heads, int d, float *o, size_t ldo,
                         const float *z, size_t ldz, const float *w, float eps, hy_err *err)
{
    (void)stream;
    hy_cu_norm_args a = norm_args(HY_CU_NORM_GATED, heads, d, eps);
    a.x = o, a.ldx = ldo, a.xhs = (size_t)d, a.out = o, a.ldo = ldo, a.ohs = (size_t)d;
    a.w = w, a.z = z, a.ldz = ldz, a.zhs = (size_t)d;
    return norm_run(n, &a, "gated_rmsnorm", err);
}

int hy_emu_l2norm_heads(hy_cu_stream stream, int n, int heads, int d, float *x, size_t ldx,
                        float eps, float scale, hy_err *err)
{
    (void)stream;
    hy_cu_norm_args a = norm_args(HY_CU_NORM_L2, heads, d, eps);
    a.x = x, a.ldx = ldx, a.xhs = (size_t)d, a.out = x, a.ldo = ldx, a.ohs = (size_t)d;
    a.scale = scale;
    return norm_run(n, &a, "l2norm_heads", err);
}

/* --- conv, elementwise, embedding -------------------------------------------------- */

int hy_emu_conv1d_silu(hy_cu_stream stream, int n, int C, int K, const float *in, size_t ldi,
                       float *state, const float *w, const float *bias, float *out, size_t ldo,
                       hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_conv1d_silu_check(n, C, K, err);
    if (rc != HY_OK || n == 0) return rc;
    hy_cu_conv_args a;
    a.n = n, a.C = C, a.K = K, a.in = in, a.ldi = ldi, a.state = state, a.w = w, a.bias = bias;
    a.out = out, a.ldo = ldo;
    FOR_EACH(i, (size_t)n * C) hy_cu_conv_out(&a, (int)(i / C), (int)(i % C));
    if (K > 1) /* the second kernel, after every output has read the old state */
        FOR_EACH(c, (size_t)C) hy_cu_conv_state(&a, (int)c);
    return HY_OK;
}

int hy_emu_swiglu(hy_cu_stream stream, int n, int I, const float *gu, size_t ldg, float *h,
                  size_t ldh, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_rows_check(n, I, "swiglu", err);
    if (rc != HY_OK || n == 0) return rc;
    FOR_EACH(i, (size_t)n * I) hy_cu_swiglu_elem(I, gu, ldg, h, ldh, (int)(i / I), (int)(i % I));
    return HY_OK;
}

int hy_emu_relu2(hy_cu_stream stream, int n, int d, float *x, size_t ldx, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_rows_check(n, d, "relu2", err);
    if (rc != HY_OK || n == 0) return rc;
    FOR_EACH(i, (size_t)n * d) hy_cu_relu2_elem(x, ldx, (int)(i / d), (int)(i % d));
    return HY_OK;
}

int hy_emu_add_bias(hy_cu_stream stream, int n, int d, const float *b, float *y, size_t ldy,
                    hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_rows_check(n, d, "add_bias", err);
    if (rc != HY_OK || n == 0) return rc;
    FOR_EACH(i, (size_t)n * d) hy_cu_add_bias_elem(b, y, ldy, (int)(i / d), (int)(i % d));
    return HY_OK;
}

int hy_emu_add(hy_cu_stream stream, size_t count, float *x, const float *y, hy_err *err)
{
    (void)stream, (void)err;
    FOR_EACH(i, count) hy_cu_add_elem(x, y, i);
    return HY_OK;
}

int hy_emu_axpby(hy_cu_stream stream, size_t count, float alpha, const float *a, float beta,
                 const float *b, float *x, hy_err *err)
{
    (void)stream, (void)err;
    FOR_EACH(i, count) hy_cu_axpby_elem(alpha, a, beta, b, x, i);
    return HY_OK;
}

int hy_emu_mul_sigmoid(hy_cu_stream stream, int n, int heads, int d, float *o, size_t ldo,
                       size_t ohs, const float *g, size_t ldg, size_t ghs, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_mul_sigmoid_check(n, heads, d, err);
    if (rc != HY_OK || n == 0) return rc;
    const size_t row = (size_t)heads * d;
    FOR_EACH(i, (size_t)n * row)
    {
        const int c = (int)(i % row);
        hy_cu_mul_sigmoid_elem(o, ldo, ohs, g, ldg, ghs, (int)(i / row), c / d, c % d);
    }
    return HY_OK;
}

int hy_emu_embed(hy_cu_stream stream, int n, int H, const int32_t *ids, const float *table,
                 float *out, size_t ldo, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_rows_check(n, H, "embed", err);
    if (rc != HY_OK || n == 0) return rc;
    FOR_EACH(i, (size_t)n * H)
    hy_cu_embed_elem(H, ids, table, out, ldo, (int)(i / H), (int)(i % H));
    return HY_OK;
}

/* --- RoPE ------------------------------------------------------------------------------ */

int hy_emu_rope_table(hy_cu_stream stream, int rd, const float *inv_freq, int64_t pos0,
                      int64_t npos, float *cs, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_rope_table_check(rd, pos0, npos, err);
    if (rc != HY_OK || npos == 0) return rc;
    const size_t h = (size_t)(rd / 2);
    FOR_EACH(i, (size_t)npos * h)
    hy_cu_rope_table_elem(rd, inv_freq, pos0, cs, (int64_t)(i / h), (int)(i % h));
    return HY_OK;
}

int hy_emu_rope_rotate(hy_cu_stream stream, int n, int rd, const int64_t *pos, const float *cs,
                       float *q, size_t ldq, size_t qhs, int nq, float *k, size_t ldk, size_t khs,
                       int nk, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_rope_rotate_check(n, rd, nq, nk, k, err);
    if (rc != HY_OK || n == 0 || rd == 0 || nq + nk == 0) return rc;
    hy_cu_rope_args a;
    a.rd = rd, a.pos = pos, a.cs = cs;
    a.q = q, a.ldq = ldq, a.qhs = qhs, a.nq = nq;
    a.k = k, a.ldk = ldk, a.khs = khs, a.nk = nk;
    const size_t h = (size_t)(rd / 2), row = (size_t)(nq + nk) * h;
    FOR_EACH(i, (size_t)n * row)
    {
        const size_t c = i % row;
        hy_cu_rope_rotate_elem(&a, (int)(i / row), (int)(c / h), (int)(c % h));
    }
    return HY_OK;
}

/* --- routed experts ----------------------------------------------------------------- */

int hy_emu_moe_route(hy_cu_stream stream, int n, int E, int k, int norm_topk, const float *logits,
                     size_t ldl, int32_t *topi, float *topw, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_moe_route_check(n, E, k, err);
    if (rc != HY_OK || n == 0) return rc;
    hy_cu_route_args a;
    a.E = E, a.k = k, a.norm_topk = norm_topk, a.logits = logits, a.ldl = ldl;
    a.topi = topi, a.topw = topw;
    const int nthr = hy_cu_route_threads(E);
    return run_blocks(route_phase, &a, hy_cu_route_phases(nthr), n, nthr,
                      hy_cu_route_shared(E, k, nthr), "moe_route", err);
}

int hy_emu_moe_plan(hy_cu_stream stream, int n, int k, int E, const int32_t *topi, int32_t *offsets,
                    int32_t *rows, int32_t *slot_row, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_moe_plan_check(n, k, E, err);
    if (rc != HY_OK) return rc;
    hy_cu_plan_args a;
    a.N = n * k, a.E = E, a.topi = topi, a.offsets = offsets, a.rows = rows;
    a.slot_row = slot_row;
    const int nthr = hy_cu_plan_threads(a.N);
    /* with no rows the blocks still write offsets, all zero */
    return run_blocks(plan_phase, &a, hy_cu_plan_phases(nthr), E, nthr, hy_cu_plan_shared(nthr),
                      "moe_plan", err);
}

int hy_emu_moe_gather(hy_cu_stream stream, int n, int k, int D, const int32_t *rows,
                      const float *src, size_t lds, float *xe, size_t ldxe, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_moe_gather_check(n, k, D, err);
    if (rc != HY_OK || n == 0) return rc;
    const int N = n * k;
    FOR_EACH(i, (size_t)N * D)
    hy_cu_moe_gather_elem(k, rows, src, lds, xe, ldxe, (int)(i / D), (int)(i % D));
    return HY_OK;
}

int hy_emu_moe_combine(hy_cu_stream stream, int n, int k, int D, const int32_t *slot_row,
                       const float *topw, const float *ye, size_t ldy, float *out, size_t ldo,
                       hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_moe_combine_check(n, k, D, err);
    if (rc != HY_OK || n == 0) return rc;
    hy_cu_combine_args a;
    a.k = k, a.D = D, a.slot_row = slot_row, a.topw = topw, a.ye = ye, a.ldy = ldy;
    a.out = out, a.ldo = ldo;
    const int nthr = hy_cu_combine_threads(D);
    return run_blocks(combine_phase, &a, hy_cu_combine_phases(), n, nthr, hy_cu_combine_shared(k),
                      "moe_combine", err);
}

int hy_emu_moe_shared_gate(hy_cu_stream stream, int n, int H, const float *x, size_t ldx,
                           const float *wg, const float *ye, size_t ldye, float *y, size_t ldy,
                           hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_rows_check(n, H, "moe_shared_gate", err);
    if (rc != HY_OK || n == 0) return rc;
    hy_cu_sgate_args a;
    a.H = H, a.x = x, a.ldx = ldx, a.wg = wg, a.ye = ye, a.ldye = ldye, a.y = y, a.ldy = ldy;
    const int nthr = hy_cu_sgate_threads(H);
    return run_blocks(sgate_phase, &a, hy_cu_sgate_phases(nthr), n, nthr, hy_cu_sgate_shared(nthr),
                      "moe_shared_gate", err);
}
