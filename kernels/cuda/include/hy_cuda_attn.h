/*
 * The device side of an attention layer and of reusing an entry: causal
 * softmax attention over a KV cache (grouped-query), a layer's linear heads
 * composed from an entry's stored forms (S ← T̃·S + S̃), and a hole's keys
 * and values written at their true positions. Each kernel's arithmetic is a
 * body the host compiler builds too (attn_body.h, compose_body.h), so
 * tests/kernels/test_cuda_attn.c checks it against the CPU kernels
 * (hy_attention_heads, hy_rep_apply, write_holes' rotation) on every build.
 *
 * The conventions of hy_cuda.h: pointers are device memory unless said
 * otherwise, strides are in elements, a launcher queues its kernel on
 * `stream` and returns HY_OK, HY_EINVAL for a bad argument, or HY_EIO with
 * the CUDA error. Each launcher hy_cu_X has a twin hy_emu_X over host
 * memory (hy_cuda.h, "the emulation"; emu_attn.c), declared beside it,
 * which refuses what the launcher refuses and returns HY_ENOMEM where it
 * cannot allocate a block's shared memory.
 */
#ifndef HY_CUDA_ATTN_H
#define HY_CUDA_ATTN_H

#include "hy_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- causal attention (attn.cu) ------------------------------------------ */

#define HY_CU_ATTN_MAX_HD 512 /* a block's tiles of one head's rows fit shared memory */

/* One step of an attention layer: n query rows of Hq heads against a KV
 * cache of Hkv heads (Hq a multiple of Hkv; query head h reads KV head
 * h / (Hq / Hkv)). Row i sits at position pos[i], or pos0 + i when pos is
 * NULL, and attends to keys [0, that position]; positions need not be
 * consecutive nor sorted. */
typedef struct hy_cu_attn {
    int n, Hq, Hkv, hd; /* hd ≤ HY_CU_ATTN_MAX_HD */
    int64_t pos0;       /* row i's position when pos is NULL */
    const int64_t *pos; /* [n] positions, or NULL */
    int64_t ctx;        /* the largest position + 1 (host value: sizes the split) */
    const float *q;     /* row i head h: q + i·ldq + h·qhs, [hd], rotated */
    size_t ldq, qhs;    /* qhs ≥ hd (the output gate may sit between heads) */
    const float *K, *V; /* key j of KV head g: K + j·ldk + g·hd, [hd]; rotated */
    size_t ldk, ldv;    /* [ctx][Hkv][hd] caches: Hkv·hd */
    float scale;        /* hd^-1/2 */
    float *o;           /* row i head h: o + i·ldo + h·ohs, [hd] */
    size_t ldo, ohs;
} hy_cu_attn;

/* Floats of work hy_cu_attention uses to split each block's context across
 * several blocks (a decode step's few rows over a long context); 0 when it
 * would not split (or refuses the shape). A size, not a launch: pointers
 * unread. */
size_t hy_cu_attention_work(const hy_cu_attn *a);
/* The same value, for the twin: it splits as the launcher does. */
size_t hy_emu_attention_work(const hy_cu_attn *a);
/* o ← softmax(q·Kᵀ·scale, causal) · V, the softmax in fp32 — the contract of
 * hy_attention_heads for every KV head. work: hy_cu_attention_work(a)
 * floats, or fewer (NULL, 0: no split; the same result up to the order of
 * additions). */
int hy_cu_attention(hy_cu_stream stream, const hy_cu_attn *a, float *work, size_t work_floats,
                    hy_err *err);
int hy_emu_attention(hy_cu_stream stream, const hy_cu_attn *a, float *work, size_t work_floats,
                     hy_err *err);

/* --- composition of an entry's linear heads (compose.cu) ------------------ */

/* The stored forms (hy_entry_form's values, in the same order) and payload
 * dtypes (hy_entry_dtype's). */
enum {
    HY_CU_FORM_ZERO,
    HY_CU_FORM_SCALAR,
    HY_CU_FORM_DIAG,
    HY_CU_FORM_LOWRANK,
    HY_CU_FORM_IPLR,
    HY_CU_FORM_DENSE,
    HY_CU_FORM_COUNT
};
enum { HY_CU_F32 = 0, HY_CU_BF16 = 1 };

/* One head's T or S(body|0) as an entry stores it (model's hy_head_rep):
 * form, payload dtype, rank (LOWRANK, IPLR), γ (SCALAR, IPLR) and the
 * payload on the device: DIAG [dk]; LOWRANK and IPLR U [rows][rank] then
 * Vt [rank][cols]; DENSE [rows][cols] — T's rows = cols = dk, S's dk × dv. */
typedef struct hy_cu_rep {
    int form, dtype, rank;
    float gamma;
    const void *p;
} hy_cu_rep;

/* One linear layer's heads from an entry: t, s [heads] records in device
 * memory (uploaded once with the entry), the running states S + h·hs
 * ([dk][dv] fp32) of the request. */
typedef struct hy_cu_compose {
    int heads, dk, dv;
    int use_T; /* 0: S ← S + S̃ (the naive ablation; t unread) */
    const hy_cu_rep *t, *s;
    float *S;
    size_t hs;
} hy_cu_compose;

/* Largest dk hy_cu_compose_layer takes (a block's column slab of S). */
#define HY_CU_COMPOSE_MAX_DK 1024
/* S ← T̃·S + S̃ for every head, each in its own forms, in one launch — the
 * contract of hy_rep_apply head by head (the products in this kernel, not
 * cuBLAS; the same sums in another order). */
int hy_cu_compose_layer(hy_cu_stream stream, const hy_cu_compose *c, hy_err *err);
int hy_emu_compose_layer(hy_cu_stream stream, const hy_cu_compose *c, hy_err *err);

/* --- a hole's keys and values (attn.cu) ----------------------------------- */

/* A reused entry's nb body tokens written into an attention layer's cache at
 * positions p0 .. p0 + nb − 1: each key's first rd dims rotated (rotate_half,
 * pairs i and i + rd/2) from the canonical (unrotated) key the entry holds
 * to the token's position by the rope table's row, the rest and the values
 * copied — bf16 payloads widened. What write_holes does on the CPU, to the
 * bit. */
typedef struct hy_cu_hole_kv {
    int nb, Hkv, hd, rd; /* rd even, ≤ hd; 0: no rotation */
    int dtype;           /* HY_CU_F32 or HY_CU_BF16: the entry's kv */
    const void *eK, *eV; /* [nb][Hkv][hd] */
    const float *rope;   /* [≥ p0 + nb][rd]: cos [rd/2] then sin [rd/2] per position */
    int64_t p0;
    float *K, *V;    /* the caches from row 0: row p0 + t at K + (p0 + t)·ldk */
    size_t ldk, ldv; /* ≥ Hkv·hd */
} hy_cu_hole_kv;

int hy_cu_hole_kv_write(hy_cu_stream stream, const hy_cu_hole_kv *h, hy_err *err);
int hy_emu_hole_kv_write(hy_cu_stream stream, const hy_cu_hole_kv *h, hy_err *err);

#ifdef __cplusplus
}
#endif

#endif
