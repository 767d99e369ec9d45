/*
 * Causal softmax attention of one query head against its KV head, in blocks
 * of HY_ATTN_BLOCK queries: scores = q Kᵀ·scale as one GEMM per block, a
 * masked fp32 softmax per row left unnormalised, then o = P V as a second
 * GEMM and each output row divided by its row's sum. The KV cache
 * holds every earlier position, so a block whose last row is at position p1
 * reads keys [0, p1]; keys after a row's own position get probability 0. The
 * rows of a block need not be at consecutive positions (hy_attention_at): a
 * request's seams and query, separated by composed holes, share blocks, so
 * the cache is streamed once per 64 of them rather than once per run.
 *
 * The query heads that read one KV head (grouped-query attention) can go
 * together (hy_attention_heads): each block's rows of every head of the
 * group stacked, row by row, into one operand, so that each product packs
 * the keys or values once for all of them and runs G times the rows (64-row
 * products run at ~0.85 of 256-row ones on this machine's OpenBLAS).
 */
#include "hy_kernels.h"

#include <string.h>

/* One block of B ≤ HY_ATTN_BLOCK query rows, row i at position pos[i] (non-
 * decreasing), against keys [0, pos[B−1]]. The keys every row sees,
 * [0, pos[0]], are one product over all B rows; the rest go by tiles of
 * HY_ATTN_TILE keys, each over the rows that reach into it — the rows of
 * a block are a suffix for every tile, since positions do not decrease. A
 * block whose rows are spread over the context (the seams of a request,
 * each at its own segment's start) thus computes about the causal area
 * rather than B × the last row's context; a block of consecutive rows spans
 * at most B − 1 keys past its first row and stays one product. */
/* The keys' second part (hy_attention_at2), or none (q2 NULL). */
typedef struct part2 {
    int dk;
    const float *q, *K;
    size_t ldq, ldk;
} part2;

static void block(int B, int dk, int dv, const int64_t *pos, const float *q, size_t ldq,
                  const float *K, size_t ldk, const part2 *p2, const float *V, size_t ldv,
                  float scale, float *o, size_t ldo, float *scores)
{
    const int ctx = (int)pos[B - 1] + 1; /* keys visible to the block's last row */
    const int shared = ctx - (int)pos[0] - 1 <= HY_ATTN_TILE ? ctx : (int)pos[0] + 1;
    int s = 0; /* the first row that reaches the tile */
    for (int c0 = 0; c0 < ctx; c0 = c0 ? c0 + HY_ATTN_TILE : shared) {
        const int w = c0 ? HY_MIN_INT(HY_ATTN_TILE, ctx - c0) : shared;
        while (pos[s] < c0) s++;
        hy_gemm(0, 1, B - s, w, dk, scale, q + (size_t)s * ldq, ldq, K + (size_t)c0 * ldk, ldk,
                0.0f, scores + (size_t)s * ctx + c0, (size_t)ctx);
        if (p2->q)
            hy_gemm(0, 1, B - s, w, p2->dk, scale, p2->q + (size_t)s * p2->ldq, p2->ldq,
                    p2->K + (size_t)c0 * p2->ldk, p2->ldk, 1.0f, scores + (size_t)s * ctx + c0,
                    (size_t)ctx);
    }
    float inv[B]; /* each row's 1 / Σ exp, applied to its output row */
    for (int i = 0; i < B; i++) {
        float *row = scores + (size_t)i * ctx;
        const int valid = (int)pos[i] + 1;
        float mx = row[0];
#pragma omp simd reduction(max : mx)
        for (int j = 1; j < valid; j++) mx = row[j] > mx ? row[j] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j < valid; j++) {
            row[j] = hy_expf(row[j] - mx);
            sum += row[j];
        }
        inv[i] = 1.0f / sum;
        /* zero the computed scores past the row's position, to the end of
         * its tile: the tile's product with V reads them */
        const int end = valid <= shared
                            ? shared
                            : HY_MIN_INT(ctx, shared + (valid - shared + HY_ATTN_TILE - 1) /
                                                           HY_ATTN_TILE * HY_ATTN_TILE);
        if (valid < end) memset(row + valid, 0, (size_t)(end - valid) * sizeof *row);
    }
    s = 0;
    for (int c0 = 0; c0 < ctx; c0 = c0 ? c0 + HY_ATTN_TILE : shared) {
        const int w = c0 ? HY_MIN_INT(HY_ATTN_TILE, ctx - c0) : shared;
        while (pos[s] < c0) s++;
        hy_gemm(0, 0, B - s, dv, w, 1.0f, scores + (size_t)s * ctx + c0, (size_t)ctx,
                V + (size_t)c0 * ldv, ldv, c0 ? 1.0f : 0.0f, o + (size_t)s * ldo, ldo);
    }
    /* normalised here, dv values a row rather than its ctx probabilities */
    for (int i = 0; i < B; i++) {
        float *orow = o + (size_t)i * ldo;
#pragma omp simd
        for (int j = 0; j < dv; j++) orow[j] *= inv[i];
    }
}

void hy_attention(int n, int hd, int64_t pos0, const float *q, size_t ldq, const float *K,
                  size_t ldk, const float *V, size_t ldv, float scale, float *o, size_t ldo,
                  float *scores)
{
    int64_t pos[HY_ATTN_BLOCK];
    const part2 none = {0};
    for (int b0 = 0; b0 < n; b0 += HY_ATTN_BLOCK) {
        const int B = HY_MIN_INT(HY_ATTN_BLOCK, n - b0);
        for (int i = 0; i < B; i++) pos[i] = pos0 + b0 + i;
        block(B, hd, hd, pos, q + (size_t)b0 * ldq, ldq, K, ldk, &none, V, ldv, scale,
              o + (size_t)b0 * ldo, ldo, scores);
    }
}

void hy_attention_at(int n, int dk, int dv, const int64_t *pos, const float *q, size_t ldq,
                     const float *K, size_t ldk, const float *V, size_t ldv, float scale, float *o,
                     size_t ldo, float *scores)
{
    hy_attention_at2(n, dk, 0, dv, pos, q, ldq, K, ldk, NULL, 0, NULL, 0, V, ldv, scale, o, ldo,
                     scores);
}

void hy_attention_at2(int n, int dk1, int dk2, int dv, const int64_t *pos, const float *q1,
                      size_t ldq1, const float *K1, size_t ldk1, const float *q2, size_t ldq2,
                      const float *K2, size_t ldk2, const float *V, size_t ldv, float scale,
                      float *o, size_t ldo, float *scores)
{
    for (int b0 = 0; b0 < n; b0 += HY_ATTN_BLOCK) {
        const part2 p2 = {dk2, q2 ? q2 + (size_t)b0 * ldq2 : NULL, K2, ldq2, ldk2};
        block(HY_MIN_INT(HY_ATTN_BLOCK, n - b0), dk1, dv, pos + b0, q1 + (size_t)b0 * ldq1, ldq1,
              K1, ldk1, &p2, V, ldv, scale, o + (size_t)b0 * ldo, ldo, scores);
    }
}

size_t hy_attention_heads_scratch(int G, int dk, int dv, int64_t ctx)
{
    return (size_t)G * HY_ATTN_BLOCK * ((size_t)dk + (size_t)dv + (size_t)ctx);
}

void hy_attention_heads(int n, int G, int dk, int dv, const int64_t *pos, const float *q,
                        size_t ldq, size_t qhs, const float *K, size_t ldk, const float *V,
                        size_t ldv, float scale, float *o, size_t ldo, size_t ohs, float *work)
{
    const part2 none = {0};
    for (int b0 = 0; b0 < n; b0 += HY_ATTN_BLOCK) {
        const int B = HY_MIN_INT(HY_ATTN_BLOCK, n - b0), R = G * B;
        float *qb = work, *obuf = qb + (size_t)R * dk, *scores = obuf + (size_t)R * dv;
        /* scores: R × (pos[b0 + B − 1] + 1) floats, within the scratch */
        int64_t ps[R];
        /* stacked row i·G + h: row b0 + i of head h (positions stay
         * non-decreasing, so each tile's rows are still a suffix) */
        for (int i = 0; i < B; i++)
            for (int h = 0; h < G; h++) {
                memcpy(qb + (size_t)(i * G + h) * dk, q + (size_t)(b0 + i) * ldq + (size_t)h * qhs,
                       (size_t)dk * sizeof *qb);
                ps[i * G + h] = pos[b0 + i];
            }
        block(R, dk, dv, ps, qb, (size_t)dk, K, ldk, &none, V, ldv, scale, obuf, (size_t)dv,
              scores);
        for (int i = 0; i < B; i++)
            for (int h = 0; h < G; h++)
                memcpy(o + (size_t)(b0 + i) * ldo + (size_t)h * ohs,
                       obuf + (size_t)(i * G + h) * dv, (size_t)dv * sizeof *obuf);
    }
}
