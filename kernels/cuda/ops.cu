/*
 * The executor's small operations on the device: kernels over the bodies of
 * ops_body.h and their launchers (hy_cuda_ops.h).
 *
 * Two kinds of kernel. Elementwise ones run a grid-stride loop over a flat
 * index, 256 threads a block, split into (row, column) by division: memory
 * bound, and any order of the elements gives the same result. Phased ones
 * give a block to one row (a head, a token, an expert) and run the body's
 * phases with a barrier after each, the block size and dynamic shared
 * memory from ops_body.h, so the twins on the host (emu_ops.c) run exactly
 * this schedule. A launcher checks the shape with ops_body.h's check, which
 * its twin makes too, sizes the grid and queues the kernel.
 */
#include "hy_cuda_ops.h"

#include "ops_body.h"

#include <cuda_runtime.h>

#include <string.h>

#define ELEM_THREADS 256
/* At most this many blocks for a grid-stride loop; more work loops. */
#define ELEM_MAX_BLOCKS (1u << 20)

static unsigned elem_blocks(size_t count)
{
    const size_t b = (count + ELEM_THREADS - 1) / ELEM_THREADS;
    return b < ELEM_MAX_BLOCKS ? (unsigned)b : ELEM_MAX_BLOCKS;
}

#define FOR_EACH(i, count)                                                                         \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
         i += (size_t)gridDim.x * blockDim.x)

/* The launch just queued: HY_OK, or HY_EIO naming the CUDA error. */
static int launched(const char *what, hy_err *err)
{
    return hy_cu_check(cudaGetLastError(), what, err);
}

/* --- phased kernels ------------------------------------------------------------ */

/* A phased family's kernel (ops_body.h): each block runs its phases in
 * order, a barrier after each — the schedule the twins follow. */
#define PHASED_KERNEL(fam, nphases)                                                                \
    static __global__ void fam##_kernel(hy_cu_##fam##_args a)                                      \
    {                                                                                              \
        extern __shared__ float sh[];                                                              \
        const int phases = (nphases);                                                              \
        for (int ph = 0; ph < phases; ph++) {                                                      \
            hy_cu_##fam##_phase(&a, ph, blockIdx.x, threadIdx.x, blockDim.x, sh);                  \
            __syncthreads();                                                                       \
        }                                                                                          \
    }

PHASED_KERNEL(norm, hy_cu_norm_phases(blockDim.x))
PHASED_KERNEL(w16, hy_cu_w16_phases(blockDim.x))
PHASED_KERNEL(route, hy_cu_route_phases(blockDim.x))
PHASED_KERNEL(plan, hy_cu_plan_phases(blockDim.x))
PHASED_KERNEL(combine, hy_cu_combine_phases())
PHASED_KERNEL(sgate, hy_cu_sgate_phases(blockDim.x))

/* --- elementwise kernels ----------------------------------------------------------- */

static __global__ void conv_out_kernel(hy_cu_conv_args a)
{
    FOR_EACH(i, (size_t)a.n * a.C) hy_cu_conv_out(&a, (int)(i / a.C), (int)(i % a.C));
}

static __global__ void conv_state_kernel(hy_cu_conv_args a)
{
    FOR_EACH(c, (size_t)a.C) hy_cu_conv_state(&a, (int)c);
}

static __global__ void swiglu_kernel(int n, int I, const float *gu, size_t ldg, float *h,
                                     size_t ldh)
{
    FOR_EACH(i, (size_t)n * I) hy_cu_swiglu_elem(I, gu, ldg, h, ldh, (int)(i / I), (int)(i % I));
}

static __global__ void relu2_kernel(int n, int d, float *x, size_t ldx)
{
    FOR_EACH(i, (size_t)n * d) hy_cu_relu2_elem(x, ldx, (int)(i / d), (int)(i % d));
}

static __global__ void add_bias_kernel(int n, int d, const float *b, float *y, size_t ldy)
{
    FOR_EACH(i, (size_t)n * d) hy_cu_add_bias_elem(b, y, ldy, (int)(i / d), (int)(i % d));
}

static __global__ void add_kernel(size_t count, float *x, const float *y)
{
    FOR_EACH(i, count) hy_cu_add_elem(x, y, i);
}

static __global__ void axpby_kernel(size_t count, float alpha, const float *a, float beta,
                                    const float *b, float *x)
{
    FOR_EACH(i, count) hy_cu_axpby_elem(alpha, a, beta, b, x, i);
}

static __global__ void mul_sigmoid_kernel(int n, int heads, int d, float *o, size_t ldo, size_t ohs,
                                          const float *g, size_t ldg, size_t ghs)
{
    const size_t row = (size_t)heads * d;
    FOR_EACH(i, (size_t)n * row)
    {
        const int c = (int)(i % row);
        hy_cu_mul_sigmoid_elem(o, ldo, ohs, g, ldg, ghs, (int)(i / row), c / d, c % d);
    }
}

static __global__ void embed_kernel(int n, int H, const int32_t *ids, const float *table,
                                    float *out, size_t ldo)
{
    FOR_EACH(i, (size_t)n * H)
    hy_cu_embed_elem(H, ids, table, out, ldo, (int)(i / H), (int)(i % H));
}

static __global__ void rope_table_kernel(int rd, const float *inv_freq, int64_t pos0, int64_t npos,
                                         float *cs)
{
    const size_t h = (size_t)(rd / 2);
    FOR_EACH(i, (size_t)npos * h)
    hy_cu_rope_table_elem(rd, inv_freq, pos0, cs, (int64_t)(i / h), (int)(i % h));
}

static __global__ void rope_rotate_kernel(int n, hy_cu_rope_args a)
{
    const size_t h = (size_t)(a.rd / 2), row = (size_t)(a.nq + a.nk) * h;
    FOR_EACH(i, (size_t)n * row)
    {
        const size_t c = i % row;
        hy_cu_rope_rotate_elem(&a, (int)(i / row), (int)(c / h), (int)(c % h));
    }
}

static __global__ void gather_kernel(int N, int k, int D, const int32_t *rows, const float *src,
                                     size_t lds, float *xe, size_t ldxe)
{
    FOR_EACH(i, (size_t)N * D)
    hy_cu_moe_gather_elem(k, rows, src, lds, xe, ldxe, (int)(i / D), (int)(i % D));
}

/* --- launchers: a few rows against bf16 weights ------------------------------------- */

extern "C" int hy_cu_linear_w16(hy_cu_stream stream, int n, int K, int N, const float *X,
                                size_t ldx, const uint16_t *W, float *Y, size_t ldy, hy_err *err)
{
    const int rc = hy_cu_linear_w16_check(n, K, N, err);
    if (rc || n == 0) return rc;
    const hy_cu_w16_args a = {n, K, N, X, ldx, W, Y, ldy};
    const int nthr = hy_cu_w16_threads(K);
    w16_kernel<<<(unsigned)N, nthr, hy_cu_w16_shared(nthr) * sizeof(float), stream>>>(a);
    return launched("linear_w16", err);
}

/* --- launchers: norms -------------------------------------------------------------- */

static int norm_launch(hy_cu_stream stream, int n, const hy_cu_norm_args *a, const char *what,
                       hy_err *err)
{
    const int rc = hy_cu_norm_check(n, a->heads, a->d, what, err);
    if (rc != HY_OK || n == 0) return rc;
    const int nthr = hy_cu_norm_threads(a->d);
    norm_kernel<<<(unsigned)(n * a->heads), nthr, hy_cu_norm_shared(nthr) * sizeof(float),
                  stream>>>(*a);
    return launched(what, err);
}

static hy_cu_norm_args norm_args(int kind, int heads, int d, float eps)
{
    hy_cu_norm_args a;
    memset(&a, 0, sizeof a);
    a.kind = kind, a.heads = heads, a.d = d, a.eps = eps, a.scale = 1.0f;
    return a;
}

extern "C" int hy_cu_rmsnorm(hy_cu_stream stream, int n, int d, const float *x, size_t ldx,
                             const float *w, float eps, float *out, size_t ldo, hy_err *err)
{
    hy_cu_norm_args a = norm_args(HY_CU_NORM_RMS, 1, d, eps);
    a.x = x, a.ldx = ldx, a.w = w, a.out = out, a.ldo = ldo;
    return norm_launch(stream, n, &a, "rmsnorm", err);
}

extern "C" int hy_cu_rmsnorm_heads(hy_cu_stream stream, int n, int heads, int d, const float *x,
                                   size_t ldx, size_t xhs, const float *w, float eps, float *out,
                                   size_t ldo, size_t ohs, hy_err *err)
{
    hy_cu_norm_args a = norm_args(HY_CU_NORM_RMS, heads, d, eps);
    a.x = x, a.ldx = ldx, a.xhs = xhs, a.w = w, a.out = out, a.ldo = ldo, a.ohs = ohs;
    return norm_launch(stream, n, &a, "rmsnorm_heads", err);
}

extern "C" int hy_cu_gated_rmsnorm(hy_cu_stream stream, int n, int heads, int d, float *o,
                                   size_t ldo, const float *z, size_t ldz, const float *w,
                                   float eps, hy_err *err)
{
    hy_cu_norm_args a = norm_args(HY_CU_NORM_GATED, heads, d, eps);
    a.x = o, a.ldx = ldo, a.xhs = (size_t)d, a.out = o, a.ldo = ldo, a.ohs = (size_t)d;
    a.w = w, a.z = z, a.ldz = ldz, a.zhs = (size_t)d;
    return norm_launch(stream, n, &a, "gated_rmsnorm", err);
}

extern "C" int hy_cu_l2norm_heads(hy_cu_stream stream, int n, int heads, int d, float *x,
                                  size_t ldx, float eps, float scale, hy_err *err)
{
    hy_cu_norm_args a = norm_args(HY_CU_NORM_L2, heads, d, eps);
    a.x = x, a.ldx = ldx, a.xhs = (size_t)d, a.out = x, a.ldo = ldx, a.ohs = (size_t)d;
    a.scale = scale;
    return norm_launch(stream, n, &a, "l2norm_heads", err);
}

/* --- launchers: conv, elementwise, embedding ------------------------------------------ */

extern "C" int hy_cu_conv1d_silu(hy_cu_stream stream, int n, int C, int K, const float *in,
                                 size_t ldi, float *state, const float *w, const float *bias,
                                 float *out, size_t ldo, hy_err *err)
{
    int rc = hy_cu_conv1d_silu_check(n, C, K, err);
    if (rc != HY_OK || n == 0) return rc;
    hy_cu_conv_args a;
    a.n = n, a.C = C, a.K = K, a.in = in, a.ldi = ldi, a.state = state, a.w = w, a.bias = bias;
    a.out = out, a.ldo = ldo;
    conv_out_kernel<<<elem_blocks((size_t)n * C), ELEM_THREADS, 0, stream>>>(a);
    rc = launched("conv1d_silu", err);
    if (rc == HY_OK && K > 1) {
        conv_state_kernel<<<elem_blocks((size_t)C), ELEM_THREADS, 0, stream>>>(a);
        rc = launched("conv1d_silu (state)", err);
    }
    return rc;
}

extern "C" int hy_cu_swiglu(hy_cu_stream stream, int n, int I, const float *gu, size_t ldg,
                            float *h, size_t ldh, hy_err *err)
{
    const int rc = hy_cu_rows_check(n, I, "swiglu", err);
    if (rc != HY_OK || n == 0) return rc;
    swiglu_kernel<<<elem_blocks((size_t)n * I), ELEM_THREADS, 0, stream>>>(n, I, gu, ldg, h, ldh);
    return launched("swiglu", err);
}

extern "C" int hy_cu_relu2(hy_cu_stream stream, int n, int d, float *x, size_t ldx, hy_err *err)
{
    const int rc = hy_cu_rows_check(n, d, "relu2", err);
    if (rc != HY_OK || n == 0) return rc;
    relu2_kernel<<<elem_blocks((size_t)n * d), ELEM_THREADS, 0, stream>>>(n, d, x, ldx);
    return launched("relu2", err);
}

extern "C" int hy_cu_add_bias(hy_cu_stream stream, int n, int d, const float *b, float *y,
                              size_t ldy, hy_err *err)
{
    const int rc = hy_cu_rows_check(n, d, "add_bias", err);
    if (rc != HY_OK || n == 0) return rc;
    add_bias_kernel<<<elem_blocks((size_t)n * d), ELEM_THREADS, 0, stream>>>(n, d, b, y, ldy);
    return launched("add_bias", err);
}

extern "C" int hy_cu_add(hy_cu_stream stream, size_t count, float *x, const float *y, hy_err *err)
{
    if (count == 0) return HY_OK;
    add_kernel<<<elem_blocks(count), ELEM_THREADS, 0, stream>>>(count, x, y);
    return launched("add", err);
}

extern "C" int hy_cu_axpby(hy_cu_stream stream, size_t count, float alpha, const float *a,
                           float beta, const float *b, float *x, hy_err *err)
{
    if (count == 0) return HY_OK;
    axpby_kernel<<<elem_blocks(count), ELEM_THREADS, 0, stream>>>(count, alpha, a, beta, b, x);
    return launched("axpby", err);
}

extern "C" int hy_cu_mul_sigmoid(hy_cu_stream stream, int n, int heads, int d, float *o, size_t ldo,
                                 size_t ohs, const float *g, size_t ldg, size_t ghs, hy_err *err)
{
    const int rc = hy_cu_mul_sigmoid_check(n, heads, d, err);
    if (rc != HY_OK || n == 0) return rc;
    mul_sigmoid_kernel<<<elem_blocks((size_t)n * heads * d), ELEM_THREADS, 0, stream>>>(
        n, heads, d, o, ldo, ohs, g, ldg, ghs);
    return launched("mul_sigmoid", err);
}

extern "C" int hy_cu_embed(hy_cu_stream stream, int n, int H, const int32_t *ids,
                           const float *table, float *out, size_t ldo, hy_err *err)
{
    const int rc = hy_cu_rows_check(n, H, "embed", err);
    if (rc != HY_OK || n == 0) return rc;
    embed_kernel<<<elem_blocks((size_t)n * H), ELEM_THREADS, 0, stream>>>(n, H, ids, table, out,
                                                                          ldo);
    return launched("embed", err);
}

/* --- launchers: RoPE ----------------------------------------------------------------- */

extern "C" int hy_cu_rope_table(hy_cu_stream stream, int rd, const float *inv_freq, int64_t pos0,
                                int64_t npos, float *cs, hy_err *err)
{
    const int rc = hy_cu_rope_table_check(rd, pos0, npos, err);
    if (rc != HY_OK || npos == 0) return rc;
    rope_table_kernel<<<elem_blocks((size_t)npos * (size_t)(rd / 2)), ELEM_THREADS, 0, stream>>>(
        rd, inv_freq, pos0, npos, cs);
    return launched("rope_table", err);
}

extern "C" int hy_cu_rope_rotate(hy_cu_stream stream, int n, int rd, const int64_t *pos,
                                 const float *cs, float *q, size_t ldq, size_t qhs, int nq,
                                 float *k, size_t ldk, size_t khs, int nk, hy_err *err)
{
    const int rc = hy_cu_rope_rotate_check(n, rd, nq, nk, k, err);
    if (rc != HY_OK || n == 0 || rd == 0 || nq + nk == 0) return rc;
    hy_cu_rope_args a;
    a.rd = rd, a.pos = pos, a.cs = cs;
    a.q = q, a.ldq = ldq, a.qhs = qhs, a.nq = nq;
    a.k = k, a.ldk = ldk, a.khs = khs, a.nk = nk;
    const size_t count = (size_t)n * (size_t)(nq + nk) * (size_t)(rd / 2);
    rope_rotate_kernel<<<elem_blocks(count), ELEM_THREADS, 0, stream>>>(n, a);
    return launched("rope_rotate", err);
}

/* --- launchers: routed experts -------------------------------------------------------- */

extern "C" int hy_cu_moe_route(hy_cu_stream stream, int n, int E, int k, int norm_topk,
                               const float *logits, size_t ldl, int32_t *topi, float *topw,
                               hy_err *err)
{
    const int rc = hy_cu_moe_route_check(n, E, k, err);
    if (rc != HY_OK || n == 0) return rc;
    const int nthr = hy_cu_route_threads(E);
    const size_t shared = hy_cu_route_shared(E, k, nthr) * sizeof(float);
    hy_cu_route_args a;
    a.E = E, a.k = k, a.norm_topk = norm_topk, a.logits = logits, a.ldl = ldl;
    a.topi = topi, a.topw = topw;
    route_kernel<<<(unsigned)n, nthr, shared, stream>>>(a);
    return launched("moe_route", err);
}

extern "C" int hy_cu_moe_plan(hy_cu_stream stream, int n, int k, int E, const int32_t *topi,
                              int32_t *offsets, int32_t *rows, int32_t *slot_row, hy_err *err)
{
    const int rc = hy_cu_moe_plan_check(n, k, E, err);
    if (rc != HY_OK) return rc;
    hy_cu_plan_args a;
    a.N = n * k, a.E = E, a.topi = topi, a.offsets = offsets, a.rows = rows;
    a.slot_row = slot_row;
    const int nthr = hy_cu_plan_threads(a.N);
    /* with no rows the blocks still write offsets, all zero */
    plan_kernel<<<(unsigned)E, nthr, hy_cu_plan_shared(nthr) * sizeof(float), stream>>>(a);
    return launched("moe_plan", err);
}

extern "C" int hy_cu_moe_gather(hy_cu_stream stream, int n, int k, int D, const int32_t *rows,
                                const float *src, size_t lds, float *xe, size_t ldxe, hy_err *err)
{
    const int rc = hy_cu_moe_gather_check(n, k, D, err);
    if (rc != HY_OK || n == 0) return rc;
    const int N = n * k;
    gather_kernel<<<elem_blocks((size_t)N * D), ELEM_THREADS, 0, stream>>>(N, k, D, rows, src, lds,
                                                                           xe, ldxe);
    return launched("moe_gather", err);
}

extern "C" int hy_cu_moe_combine(hy_cu_stream stream, int n, int k, int D, const int32_t *slot_row,
                                 const float *topw, const float *ye, size_t ldy, float *out,
                                 size_t ldo, hy_err *err)
{
    const int rc = hy_cu_moe_combine_check(n, k, D, err);
    if (rc != HY_OK || n == 0) return rc;
    hy_cu_combine_args a;
    a.k = k, a.D = D, a.slot_row = slot_row, a.topw = topw, a.ye = ye, a.ldy = ldy;
    a.out = out, a.ldo = ldo;
    const int nthr = hy_cu_combine_threads(D);
    combine_kernel<<<(unsigned)n, nthr, hy_cu_combine_shared(k) * sizeof(float), stream>>>(a);
    return launched("moe_combine", err);
}

extern "C" int hy_cu_moe_shared_gate(hy_cu_stream stream, int n, int H, const float *x, size_t ldx,
                                     const float *wg, const float *ye, size_t ldye, float *y,
                                     size_t ldy, hy_err *err)
{
    const int rc = hy_cu_rows_check(n, H, "moe_shared_gate", err);
    if (rc != HY_OK || n == 0) return rc;
    hy_cu_sgate_args a;
    a.H = H, a.x = x, a.ldx = ldx, a.wg = wg, a.ye = ye, a.ldye = ldye, a.y = y, a.ldy = ldy;
    const int nthr = hy_cu_sgate_threads(H);
    sgate_kernel<<<(unsigned)n, nthr, hy_cu_sgate_shared(nthr) * sizeof(float), stream>>>(a);
    return launched("moe_shared_gate", err);
}
