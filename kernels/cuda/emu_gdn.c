/*
 * The gated delta rule's kernels on the host (include/hy_cuda_gdn.h, and
 * hy_cuda.h's "the emulation"): each twin makes its launcher's checks
 * (gdn_body.h), then runs gdn.cu's kernel as the device would — every block
 * in turn, and within a block gdn_body.h's bodies phase by phase, each
 * phase for every thread (in order, or last to first when
 * hy_emu_reversed()) before the next starts, which is what the kernel's
 * __syncthreads() guarantees. A block's shared memory starts as NaN
 * (hy_emu_shared), so a read of what no phase wrote shows in the results.
 *
 * The loops below mirror gdn.cu's kernels line for line: a change to a
 * kernel's phases or barriers is a change here too.
 */
#include "hy_cuda_gdn.h"

#include "gdn_body.h"

/* Thread i of nthr in the order a phase's threads run. */
static int thread_at(int i, int nthr, bool reversed)
{
    return reversed ? nthr - 1 - i : i;
}

static int no_shared(const char *what, size_t floats, hy_err *err)
{
    return hy_err_set(err, HY_ENOMEM, "%s: emulated shared memory: out of memory (%zu floats)",
                      what, floats);
}

/* gdn_gates_kernel: a block per (row t, head vector vec) of the grid
 * (n, 2·Hk); the squares, the tree one level a phase, the scaling. */
int hy_emu_gdn_gates(hy_cu_stream stream, const hy_cu_gdn_gate_args *a, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_gdn_gates_check(a, err);
    if (rc != HY_OK || a->n == 0) return rc;
    const int nthr = HY_CU_GDN_GATE_THREADS;
    const bool rev = hy_emu_reversed();
    for (int t = 0; t < a->n; t++)
        for (int vec = 0; vec < 2 * a->Hk; vec++) {
            float *sh = hy_emu_shared((size_t)nthr);
            if (!sh) return no_shared("gdn_gates", (size_t)nthr, err);
            for (int i = 0; i < nthr; i++)
                hy_cu_gdn_gate_square(a, t, vec, thread_at(i, nthr, rev), nthr, sh);
            for (int half = nthr / 2; half > 0; half /= 2)
                for (int i = 0; i < nthr; i++)
                    hy_cu_gdn_gate_tree(half, thread_at(i, nthr, rev), sh);
            for (int i = 0; i < nthr; i++)
                hy_cu_gdn_gate_scale(a, t, vec, thread_at(i, nthr, rev), nthr, sh);
            hy_free(sh);
        }
    return HY_OK;
}

/* gdn_recurrent_kernel: a block per (value head h, tile of HY_CU_GDN_REC_COLS
 * columns of [S | T]); the load, per token the staging then the step, the
 * store. */
int hy_emu_gdn_recurrent(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_gdn_check(a, "gdn_recurrent", err);
    if (rc != HY_OK || a->n == 0) return rc;
    const int nthr = HY_CU_GDN_REC_COLS;
    const int tiles = (hy_cu_gdn_rec_width(a) + nthr - 1) / nthr;
    const size_t nf = hy_cu_gdn_rec_floats(a->dk, nthr);
    const bool rev = hy_emu_reversed();
    for (int h = 0; h < a->Hv; h++)
        for (int tile = 0; tile < tiles; tile++) {
            float *sh = hy_emu_shared(nf);
            if (!sh) return no_shared("gdn_recurrent", nf, err);
            for (int i = 0; i < nthr; i++)
                hy_cu_gdn_rec_load(a, h, tile, thread_at(i, nthr, rev), nthr, sh);
            for (int t = 0; t < a->n; t++) {
                for (int i = 0; i < nthr; i++)
                    hy_cu_gdn_rec_stage(a, h, t, thread_at(i, nthr, rev), nthr, sh);
                for (int i = 0; i < nthr; i++)
                    hy_cu_gdn_rec_step(a, h, tile, t, thread_at(i, nthr, rev), nthr, sh);
            }
            for (int i = 0; i < nthr; i++)
                hy_cu_gdn_rec_store(a, h, tile, thread_at(i, nthr, rev), nthr, sh);
            hy_free(sh);
        }
    return HY_OK;
}

/* gdn_chunked_kernel: a block per value head h; the call's chunks in order,
 * each chunk's phases that run (hy_cu_gdn_chunk_runs) for every thread. */
int hy_emu_gdn_chunked(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_gdn_check(a, "gdn_chunked", err);
    if (rc != HY_OK || a->n == 0) return rc;
    const int nthr = HY_CU_GDN_CHUNK_THREADS;
    const size_t nf = hy_cu_gdn_chunk_floats(a->dk, a->dv);
    const bool rev = hy_emu_reversed();
    for (int h = 0; h < a->Hv; h++) {
        float *sh = hy_emu_shared(nf);
        if (!sh) return no_shared("gdn_chunked", nf, err);
        for (int c0 = 0; c0 < a->n; c0 += HY_CU_GDN_CHUNK)
            for (int ph = 0; ph < HY_CU_GDN_NPHASES; ph++) {
                if (!hy_cu_gdn_chunk_runs(a, ph)) continue;
                for (int i = 0; i < nthr; i++)
                    hy_cu_gdn_chunk_phase(a, ph, h, c0, thread_at(i, nthr, rev), nthr, sh);
            }
        hy_free(sh);
    }
    return HY_OK;
}
