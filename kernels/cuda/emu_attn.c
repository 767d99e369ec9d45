/*
 * Attention, a hole's keys and values, and an entry's composition on the
 * host (include/hy_cuda_attn.h, and hy_cuda.h's "the emulation"): each twin
 * makes its launcher's checks (attn_body.h, compose_body.h), then runs
 * attn.cu's or compose.cu's kernels as the device would — the whole grid,
 * block after block in the order of their indices (x fastest), and within
 * a block the bodies phase by phase, each phase for every thread (in order,
 * or last to first when hy_emu_reversed()) before the next starts, which is
 * what the kernels' __syncthreads() guarantees. A block's shared memory
 * starts as NaN (hy_emu_shared), so a read of what no phase wrote shows in
 * the results. A split attention runs its ranges' blocks, then the merge,
 * with the launcher's choice of splits (hy_cu_attn_launch_splits).
 *
 * The loops below mirror the kernels line for line: a change to a kernel's
 * phases, barriers or grid is a change here too.
 */
#include "hy_cuda_attn.h"

#include "attn_body.h"
#include "compose_body.h"

/* Each twin's type is its launcher's, so the device executor takes either. */
#define HY_SAME_TYPE(a, b) __builtin_types_compatible_p(__typeof__(a), __typeof__(b))
_Static_assert(HY_SAME_TYPE(hy_emu_attention_work, hy_cu_attention_work), "attention_work");
_Static_assert(HY_SAME_TYPE(hy_emu_attention, hy_cu_attention), "attention");
_Static_assert(HY_SAME_TYPE(hy_emu_compose_layer, hy_cu_compose_layer), "compose_layer");
_Static_assert(HY_SAME_TYPE(hy_emu_hole_kv_write, hy_cu_hole_kv_write), "hole_kv_write");

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

/* --- causal attention ------------------------------------------------------ */

size_t hy_emu_attention_work(const hy_cu_attn *a)
{
    return hy_cu_attn_work_wanted(a);
}

/* attn_kernel's block (bx, by, bz) over its shared memory sh: the start,
 * per key tile the load, scores, softmax and accumulation, the finish. */
static void attn_block(const hy_cu_attn *a, int splits, float *work, int bx, int by, int bz,
                       bool rev, float *sh)
{
    const int nthr = HY_CU_ATTN_THREADS;
    hy_cu_attn_plan p;
    hy_cu_attn_plan_of(a, splits, bx, by, bz, &p);
    for (int i = 0; i < nthr; i++) hy_cu_attn_start(a, &p, thread_at(i, nthr, rev), nthr, sh);
    for (int64_t kt = p.t0; kt < p.t1; kt++) {
        for (int i = 0; i < nthr; i++)
            hy_cu_attn_load(a, &p, kt, thread_at(i, nthr, rev), nthr, sh);
        for (int i = 0; i < nthr; i++)
            hy_cu_attn_scores(a, &p, kt, thread_at(i, nthr, rev), nthr, sh);
        for (int i = 0; i < nthr; i++) hy_cu_attn_softmax(a, &p, thread_at(i, nthr, rev), nthr, sh);
        for (int i = 0; i < nthr; i++)
            hy_cu_attn_accumulate(a, &p, kt, thread_at(i, nthr, rev), nthr, sh);
    }
    for (int i = 0; i < nthr; i++)
        hy_cu_attn_finish(a, &p, work, thread_at(i, nthr, rev), nthr, sh);
}

/* merge_kernel: a thread per output value, in blocks of
 * HY_CU_ATTN_ELEM_THREADS. */
static void merge_grid(const hy_cu_attn *a, int splits, const float *work, bool rev)
{
    const int nthr = HY_CU_ATTN_ELEM_THREADS;
    const size_t total = (size_t)a->n * a->Hq * a->hd;
    for (size_t b0 = 0; b0 < total; b0 += (size_t)nthr)
        for (int i = 0; i < nthr; i++) {
            const size_t e = b0 + (size_t)thread_at(i, nthr, rev);
            if (e < total) hy_cu_attn_merge(a, splits, work, e);
        }
}

/* attn_kernel's grid (row tiles, Hkv, splits), then the merge when split. */
int hy_emu_attention(hy_cu_stream stream, const hy_cu_attn *a, float *work, size_t work_floats,
                     hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_attention_check(a, err);
    if (rc != HY_OK || a->n == 0) return rc;
    const int splits = hy_cu_attn_launch_splits(a, work, work_floats);
    const int tiles = hy_cu_attn_row_tiles(a);
    const size_t nf = hy_cu_attn_shared_floats(a->hd);
    const bool rev = hy_emu_reversed();
    for (int bz = 0; bz < splits; bz++)
        for (int by = 0; by < a->Hkv; by++)
            for (int bx = 0; bx < tiles; bx++) {
                float *sh = hy_emu_shared(nf);
                if (!sh) return no_shared("attention", nf, err);
                attn_block(a, splits, work, bx, by, bz, rev, sh);
                hy_free(sh);
            }
    if (splits > 1) merge_grid(a, splits, work, rev);
    return HY_OK;
}

/* --- a hole's keys and values ------------------------------------------------ */

/* hole_kv_kernel: a thread per key (and value) element, in blocks of
 * HY_CU_ATTN_ELEM_THREADS. */
int hy_emu_hole_kv_write(hy_cu_stream stream, const hy_cu_hole_kv *h, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_hole_kv_check(h, err);
    if (rc != HY_OK || h->nb == 0) return rc;
    const int nthr = HY_CU_ATTN_ELEM_THREADS;
    const size_t total = (size_t)h->nb * h->Hkv * h->hd;
    const bool rev = hy_emu_reversed();
    for (size_t b0 = 0; b0 < total; b0 += (size_t)nthr)
        for (int i = 0; i < nthr; i++) {
            const size_t e = b0 + (size_t)thread_at(i, nthr, rev);
            if (e < total) hy_cu_hole_kv_elem(h, e);
        }
    return HY_OK;
}

/* --- composition of an entry's linear heads ---------------------------------- */

/* compose_kernel's grid (column blocks, heads): per block the load, the
 * projection, the combination. */
int hy_emu_compose_layer(hy_cu_stream stream, const hy_cu_compose *c, hy_err *err)
{
    (void)stream;
    const int rc = hy_cu_compose_check(c, err);
    if (rc != HY_OK || c->heads == 0) return rc;
    const int nthr = HY_CU_COMPOSE_THREADS, blocks = hy_cu_compose_col_blocks(c);
    const size_t nf = hy_cu_compose_shared_floats(c->dk);
    const bool rev = hy_emu_reversed();
    for (int h = 0; h < c->heads; h++)
        for (int bx = 0; bx < blocks; bx++) {
            float *sh = hy_emu_shared(nf);
            if (!sh) return no_shared("compose", nf, err);
            for (int i = 0; i < nthr; i++)
                hy_cu_compose_load(c, bx, h, thread_at(i, nthr, rev), nthr, sh);
            for (int i = 0; i < nthr; i++)
                hy_cu_compose_project(c, bx, h, thread_at(i, nthr, rev), nthr, sh);
            for (int i = 0; i < nthr; i++)
                hy_cu_compose_combine(c, bx, h, thread_at(i, nthr, rev), nthr, sh);
            hy_free(sh);
        }
    return HY_OK;
}
