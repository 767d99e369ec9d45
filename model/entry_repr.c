/*
 * How an entry stores each linear head's T and S(body|0), chosen when the
 * entry is built (docs/entry-format.md, "Head forms").
 *
 * A segment's T is a product of nb contractions. A head whose decay forgets
 * within the segment ends with T ≈ 0; a delta-rule head keeps
 * T = γ·Π(I − β k kᵀ), which is γ·I plus a correction of rank at most nb
 * (the WY form) and, when the body's keys crowd into a few directions, of
 * low numerical rank whatever nb is; S(body|0) is a sum of nb outer products
 * whose recent terms dominate in a forgetting head. So each head takes the
 * smallest of: zero, γ·I, the family's own diagonal, U·Vt, γ·I + U·Vt,
 * dense — in bf16 where the part allows it — whose error stays within the
 * tolerance:
 *   T: ‖T̃ − T‖₂ ≤ tol, the most T̃ can move a unit-norm state. The bound
 *      stated is ‖T̃ − T‖_F (≥ the spectral norm), computed on the stored
 *      factors after rounding — not the truncation estimate — or the exact
 *      spectral norm for a scalar or diagonal T;
 *   S: ‖S̃ − S‖_F ≤ tol·‖S‖_F, likewise measured on what is stored.
 * The ranks come from one SVD per head and candidate (LAPACK's sgesdd): the
 * smallest r whose discarded energy is within the tolerance, raised until the
 * rounded factors meet it too.
 *
 * The stored form of a layer's T or S (a version-2 section) is a table of
 * 16-byte head records — u8 form, u8 dtype, u16 rank, f32 γ, f32 bound, u32
 * payload bytes — followed by each head's payload at a multiple of 16 bytes.
 */
#include "hy_kernels.h"
#include "model_internal.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define REC_BYTES 16u
#define PAY_ALIGN 16u

static const char *const k_forms[HY_FORM_COUNT] = {"zero",    "scalar", "diag",
                                                   "lowrank", "iplr",   "dense"};

const char *hy_entry_form_name(hy_entry_form f)
{
    return (unsigned)f < HY_FORM_COUNT ? k_forms[f] : "?";
}

static size_t elem(int dtype)
{
    return dtype == HY_ENTRY_BF16 ? 2 : 4;
}

static size_t pad16(size_t x)
{
    return (x + PAY_ALIGN - 1) & ~(size_t)(PAY_ALIGN - 1);
}

size_t hy_rep_payload_bytes(int form, int dtype, int rank, int rows, int cols)
{
    size_t n = 0;
    switch (form) {
    case HY_FORM_DIAG:
        n = (size_t)rows;
        break;
    case HY_FORM_LOWRANK:
    case HY_FORM_IPLR:
        n = (size_t)rank * ((size_t)rows + (size_t)cols);
        break;
    case HY_FORM_DENSE:
        n = (size_t)rows * (size_t)cols;
        break;
    default:
        n = 0;
    }
    return n * elem(dtype);
}

/* --- payload values ---------------------------------------------------------- */

/* dst[i] ← the stored value of src[i] in dtype (bf16 rounded to nearest even). */
static void store(int dtype, const float *src, size_t n, void *dst)
{
    if (dtype == HY_ENTRY_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *o = dst;
    for (size_t i = 0; i < n; i++) o[i] = hy_f32_to_bf16(src[i]);
}

/* The payload's values as fp32: the payload itself when it is fp32, else
 * widened into buf. */
static const float *load(int dtype, const void *src, size_t n, float *buf)
{
    if (dtype == HY_ENTRY_F32) return src;
    const uint16_t *b = src;
    for (size_t i = 0; i < n; i++) buf[i] = hy_bf16_to_f32(b[i]);
    return buf;
}

/* Rounds x in place to what dtype stores. */
static void round_to(int dtype, float *x, size_t n)
{
    if (dtype == HY_ENTRY_BF16)
        for (size_t i = 0; i < n; i++) x[i] = hy_bf16_to_f32(hy_f32_to_bf16(x[i]));
}

static double frob(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

/* ‖γ·I + U·Vt − X‖_F for X [rows][cols] (the identity only where rows and
 * cols meet); U·Vt through work ([rows][cols]). */
static double lr_error(int rows, int cols, int r, float gamma, const float *U, const float *Vt,
                       const float *X, float *work)
{
    const size_t n = (size_t)rows * cols;
    if (r > 0)
        hy_gemm(0, 0, rows, cols, r, 1.0f, U, (size_t)r, Vt, (size_t)cols, 0.0f, work,
                (size_t)cols);
    else
        memset(work, 0, n * sizeof *work);
    double s = 0.0;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const size_t at = (size_t)i * cols + j;
            const double d = (double)work[at] + (i == j ? gamma : 0.0f) - X[at];
            s += d * d;
        }
    return sqrt(s);
}

/* --- choosing a form ----------------------------------------------------------- */

/* The best form found so far: its record and payload values (fp32, already
 * rounded to its dtype), owned. */
typedef struct cand {
    hy_head_rep h;
    float *vals;
    size_t nvals;
} cand;

static size_t cand_bytes(const cand *c)
{
    return c->h.bytes;
}

/* Takes (form, dtype, rank, γ, bound, values) as the best when it is
 * smaller than the best so far; vals is consumed either way. */
static void offer(cand *best, int form, int dtype, int rank, float gamma, double bound, float *vals,
                  size_t nvals, int rows, int cols)
{
    const size_t b = hy_rep_payload_bytes(form, dtype, rank, rows, cols);
    if (best->h.form != HY_FORM_COUNT && b >= cand_bytes(best)) {
        free(vals);
        return;
    }
    free(best->vals);
    best->h = (hy_head_rep){.form = (uint8_t)form,
                            .dtype = (uint8_t)dtype,
                            .rank = (uint16_t)rank,
                            .gamma = gamma,
                            .bound = (float)bound,
                            .bytes = (uint32_t)b};
    best->vals = vals;
    best->nvals = nvals;
}

/* Offers the low-rank forms γ·I + U·Vt of X [rows][cols] (γ = 0: U·Vt) within
 * tolerance `lim` (absolute, Frobenius), each dtype allowed, at the smallest
 * rank that meets it — while that is smaller than the best so far. HY_ENOMEM;
 * an SVD that fails to converge offers nothing. */
static int offer_lowrank(cand *best, int rows, int cols, const float *X, float gamma, double lim,
                         bool bf16, int form)
{
    const int k = rows < cols ? rows : cols;
    const size_t n = (size_t)rows * cols;
    float *A = malloc(n * sizeof *A), *sv = malloc((size_t)k * sizeof *sv);
    float *U = malloc((size_t)rows * k * sizeof *U), *Vt = malloc((size_t)k * cols * sizeof *Vt);
    float *work = malloc(n * sizeof *work);
    double *tail = malloc(((size_t)k + 1) * sizeof *tail);
    int rc = (!A || !sv || !U || !Vt || !work || !tail) ? HY_ENOMEM : HY_OK;
    if (!rc) {
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++) {
                const size_t at = (size_t)i * cols + j;
                A[at] = X[at] - (i == j ? gamma : 0.0f);
            }
        if (hy_svd(rows, cols, A, sv, U, Vt) != HY_OK) goto done; /* dense stays */
        tail[k] = 0.0;
        for (int r = k - 1; r >= 0; r--) tail[r] = tail[r + 1] + (double)sv[r] * sv[r];
        int r = 0;
        while (r < k && sqrt(tail[r]) > lim) r++;
        for (; r <= k; r++) {
            /* the smallest dtype first; f32 at the same rank when bf16 misses */
            int done = 0;
            for (int d = bf16 ? HY_ENTRY_BF16 : HY_ENTRY_F32; d >= HY_ENTRY_F32 && !done; d--) {
                const size_t b = hy_rep_payload_bytes(form, d, r, rows, cols);
                if (best->h.form != HY_FORM_COUNT && b >= cand_bytes(best)) continue;
                const size_t nv = (size_t)r * (rows + cols);
                float *v = malloc((nv ? nv : 1) * sizeof *v);
                if (!v) {
                    rc = HY_ENOMEM;
                    goto done;
                }
                float *u = v, *vt = v + (size_t)rows * r;
                for (int i = 0; i < rows; i++)
                    for (int j = 0; j < r; j++) u[(size_t)i * r + j] = U[(size_t)i * k + j] * sv[j];
                memcpy(vt, Vt, (size_t)r * cols * sizeof *vt);
                round_to(d, v, nv);
                const double err = lr_error(rows, cols, r, gamma, u, vt, X, work);
                if (err <= lim) {
                    offer(best, form, d, r, gamma, err, v, nv, rows, cols);
                    done = 1;
                } else {
                    free(v);
                }
            }
            if (done) break;
            /* a larger rank only pays while it is smaller than the best */
            if (best->h.form != HY_FORM_COUNT &&
                hy_rep_payload_bytes(form, HY_ENTRY_BF16, r + 1, rows, cols) >= cand_bytes(best))
                break;
        }
    }
done:
    free(A), free(sv), free(U), free(Vt), free(work), free(tail);
    return rc;
}

/* Offers X dense in dtype d when its rounding error is within lim (absolute,
 * Frobenius), or always (force). */
static int offer_dense(cand *best, int rows, int cols, const float *X, int d, double lim,
                       bool force)
{
    const size_t n = (size_t)rows * cols;
    float *v = malloc(n * sizeof *v);
    if (!v) return HY_ENOMEM;
    memcpy(v, X, n * sizeof *v);
    round_to(d, v, n);
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += ((double)v[i] - X[i]) * ((double)v[i] - X[i]);
    if (force || sqrt(s) <= lim)
        offer(best, HY_FORM_DENSE, d, 0, 0.0f, sqrt(s), v, n, rows, cols);
    else
        free(v);
    return HY_OK;
}

/* The chosen candidate as the head's record with a malloc'd payload. */
static int finish(cand *best, hy_head_rep *out)
{
    *out = best->h;
    out->p = NULL;
    if (best->h.bytes) {
        void *p = malloc(best->h.bytes);
        if (!p) {
            free(best->vals);
            return HY_ENOMEM;
        }
        store(best->h.dtype, best->vals, best->nvals, p);
        out->p = p;
    }
    free(best->vals);
    return HY_OK;
}

int hy_rep_encode_t(hy_la_tkind kind, int dk, const float *T, double loggamma,
                    const hy_entry_repr *repr, hy_head_rep *out)
{
    const double tol = repr->tol;
    const bool bf16 = repr->t == HY_ENTRY_BF16;
    cand best = {.h = {.form = HY_FORM_COUNT}};
    if (kind == HY_LA_T_SCALAR) { /* T = t·I: its spectral norm is |t| */
        if (tol > 0 && fabsf(T[0]) <= tol) {
            *out = (hy_head_rep){.form = HY_FORM_ZERO, .bound = fabsf(T[0])};
            return HY_OK;
        }
        *out = (hy_head_rep){.form = HY_FORM_SCALAR, .dtype = HY_ENTRY_F32, .gamma = T[0]};
        return HY_OK;
    }
    if (kind == HY_LA_T_DIAG) { /* spectral norm: the largest |entry| */
        float mx = 0.0f, err = 0.0f;
        for (int i = 0; i < dk; i++) mx = fmaxf(mx, fabsf(T[i]));
        if (tol > 0 && mx <= tol) {
            *out = (hy_head_rep){.form = HY_FORM_ZERO, .bound = mx};
            return HY_OK;
        }
        int d = HY_ENTRY_F32;
        if (bf16) {
            for (int i = 0; i < dk; i++)
                err = fmaxf(err, fabsf(hy_bf16_to_f32(hy_f32_to_bf16(T[i])) - T[i]));
            if (tol == 0 || err <= tol) d = HY_ENTRY_BF16;
        }
        float *v = malloc((size_t)dk * sizeof *v);
        if (!v) return HY_ENOMEM;
        memcpy(v, T, (size_t)dk * sizeof *v);
        round_to(d, v, (size_t)dk);
        offer(&best, HY_FORM_DIAG, d, 0, 0.0f, d == HY_ENTRY_BF16 ? err : 0.0f, v, (size_t)dk, dk,
              dk);
        return finish(&best, out);
    }
    const size_t n = (size_t)dk * dk;
    int rc;
    if (tol == 0) /* exact: dense in the part's dtype */
        rc = offer_dense(&best, dk, dk, T, repr->t, 0, true);
    else {
        const double nrm = frob(T, n);
        if (nrm <= tol) {
            *out = (hy_head_rep){.form = HY_FORM_ZERO, .bound = (float)nrm};
            return HY_OK;
        }
        rc = offer_dense(&best, dk, dk, T, HY_ENTRY_F32, 0, true);
        if (!rc && bf16) rc = offer_dense(&best, dk, dk, T, HY_ENTRY_BF16, tol, false);
        if (!rc) rc = offer_lowrank(&best, dk, dk, T, 0.0f, tol, bf16, HY_FORM_LOWRANK);
        const float g = isfinite(loggamma) ? (float)exp(loggamma) : 0.0f;
        /* γ·I alone (rank 0), else γ·I + U·Vt: the WY form's shape */
        if (!rc && g > 0.0f) rc = offer_lowrank(&best, dk, dk, T, g, tol, bf16, HY_FORM_IPLR);
    }
    if (rc) {
        free(best.vals);
        return rc;
    }
    if (best.h.rank == 0 && best.h.form == HY_FORM_IPLR) best.h.form = HY_FORM_SCALAR;
    if (best.h.rank == 0 && best.h.form == HY_FORM_LOWRANK) best.h.form = HY_FORM_ZERO;
    return finish(&best, out);
}

int hy_rep_encode_s(int dk, int dv, const float *S, const hy_entry_repr *repr, hy_head_rep *out)
{
    const size_t n = (size_t)dk * dv;
    const double nrm = frob(S, n);
    cand best = {.h = {.form = HY_FORM_COUNT}};
    int rc;
    if (repr->tol == 0) {
        rc = offer_dense(&best, dk, dv, S, repr->s, 0, true);
    } else if (nrm == 0.0) {
        *out = (hy_head_rep){.form = HY_FORM_ZERO};
        return HY_OK;
    } else {
        const double lim = repr->tol * nrm;
        const bool bf16 = repr->s == HY_ENTRY_BF16;
        rc = offer_dense(&best, dk, dv, S, HY_ENTRY_F32, 0, true);
        if (!rc && bf16) rc = offer_dense(&best, dk, dv, S, HY_ENTRY_BF16, lim, false);
        if (!rc) rc = offer_lowrank(&best, dk, dv, S, 0.0f, lim, bf16, HY_FORM_LOWRANK);
    }
    if (rc) {
        free(best.vals);
        return rc;
    }
    if (best.h.rank == 0 && best.h.form == HY_FORM_LOWRANK) best.h.form = HY_FORM_ZERO;
    /* S's bound is relative */
    best.h.bound = nrm > 0 ? (float)(best.h.bound / nrm) : 0.0f;
    return finish(&best, out);
}

/* --- applying ------------------------------------------------------------------ */

size_t hy_rep_apply_scratch(hy_la_tkind kind, int dk, int dv)
{
    const size_t k = (size_t)(dk < dv ? dk : dv);
    /* the kernel's part, T widened (dense, or the two factors at full rank),
     * S widened likewise, Vt·S */
    return hy_la_compose_scratch(kind, dk, dv) + 2 * (size_t)dk * dk +
           HY_MAX((size_t)dk * dv, k * ((size_t)dk + dv)) + (size_t)dk * dv;
}

void hy_rep_apply(hy_la_tkind kind, int dk, int dv, const hy_head_rep *t, const hy_head_rep *s,
                  bool use_T, float *S, float *work)
{
    const size_t ss = (size_t)dk * dv, k = (size_t)(dk < dv ? dk : dv);
    float *wk = work, *tb = wk + hy_la_compose_scratch(kind, dk, dv);
    float *sb = tb + 2 * (size_t)dk * dk, *wv = sb + HY_MAX(ss, k * ((size_t)dk + dv));
    /* S(body|0) as fp32 when it is dense: added by the same GEMM as T·S */
    const float *sd = NULL;
    if (s->form == HY_FORM_DENSE) sd = load(s->dtype, s->p, ss, sb);
    if (!use_T) { /* naive: T taken as I */
        if (sd)
            for (size_t i = 0; i < ss; i++) S[i] += sd[i];
    } else {
        switch (t->form) {
        case HY_FORM_ZERO:
            memset(S, 0, ss * sizeof *S);
            break;
        case HY_FORM_SCALAR: {
            const float g = t->gamma;
            hy_la_apply(HY_LA_T_SCALAR, dk, dv, &g, sd ? sd : NULL, S, wk);
            sd = NULL;
            break;
        }
        case HY_FORM_DIAG: {
            const float *d = load(t->dtype, t->p, (size_t)dk, tb);
            if (sd) {
                hy_la_apply(HY_LA_T_DIAG, dk, dv, d, sd, S, wk);
                sd = NULL;
            } else {
                for (int i = 0; i < dk; i++)
                    for (int j = 0; j < dv; j++) S[(size_t)i * dv + j] *= d[i];
            }
            break;
        }
        case HY_FORM_LOWRANK:
        case HY_FORM_IPLR: {
            const size_t r = t->rank;
            const float *f = load(t->dtype, t->p, r * 2 * (size_t)dk, tb);
            hy_la_apply_lowrank(dk, dv, (int)r, t->form == HY_FORM_IPLR ? t->gamma : 0.0f, f,
                                f + (size_t)dk * r, sd, S, wv);
            sd = NULL;
            break;
        }
        default: { /* dense: the family's kernel, one GEMM with S(body|0) when dense too */
            assert(t->form == HY_FORM_DENSE && kind == HY_LA_T_DENSE);
            const float *T = load(t->dtype, t->p, (size_t)dk * dk, tb);
            if (sd) {
                hy_la_apply(kind, dk, dv, T, sd, S, wk);
                sd = NULL;
            } else {
                hy_la_apply(kind, dk, dv, T, NULL, S, wk);
            }
        }
        }
        if (sd)
            for (size_t i = 0; i < ss; i++) S[i] += sd[i];
    }
    if (s->form == HY_FORM_LOWRANK) {
        const size_t r = s->rank;
        const float *f = load(s->dtype, s->p, r * ((size_t)dk + dv), sb);
        hy_gemm(0, 0, dk, dv, (int)r, 1.0f, f, r, f + (size_t)dk * r, (size_t)dv, 1.0f, S,
                (size_t)dv);
    }
}

/* --- the stored section ---------------------------------------------------------- */

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t u32_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

size_t hy_rep_table_bytes(int heads)
{
    return pad16((size_t)heads * REC_BYTES);
}

size_t hy_rep_section_bytes(const hy_head_rep *h, int heads)
{
    size_t b = pad16((size_t)heads * REC_BYTES);
    for (int i = 0; i < heads; i++) b += pad16(h[i].bytes);
    return b;
}

void hy_rep_section_write(const hy_head_rep *h, int heads, void *dst)
{
    unsigned char *p = dst;
    size_t off = pad16((size_t)heads * REC_BYTES);
    memset(p, 0, off);
    for (int i = 0; i < heads; i++) {
        unsigned char *r = p + (size_t)i * REC_BYTES;
        r[0] = h[i].form, r[1] = h[i].dtype;
        put16(r + 2, h[i].rank);
        put32(r + 4, u32_of(h[i].gamma));
        put32(r + 8, u32_of(h[i].bound));
        put32(r + 12, h[i].bytes);
        if (h[i].bytes) memcpy(p + off, h[i].p, h[i].bytes);
        memset(p + off + h[i].bytes, 0, pad16(h[i].bytes) - h[i].bytes);
        off += pad16(h[i].bytes);
    }
}

/* Whether a head of this part and family may take form f. */
static bool form_allowed(int f, bool is_t, hy_la_tkind kind)
{
    if (!is_t) return f == HY_FORM_ZERO || f == HY_FORM_LOWRANK || f == HY_FORM_DENSE;
    switch (kind) {
    case HY_LA_T_SCALAR:
        return f == HY_FORM_ZERO || f == HY_FORM_SCALAR;
    case HY_LA_T_DIAG:
        return f == HY_FORM_ZERO || f == HY_FORM_SCALAR || f == HY_FORM_DIAG;
    default:
        return f != HY_FORM_DIAG && f < HY_FORM_COUNT;
    }
}

int hy_rep_section_parse(const void *sec, size_t len, int heads, bool is_t, hy_la_tkind kind,
                         int dk, int dv, hy_head_rep *out, hy_err *err)
{
    const unsigned char *p = sec;
    const char *part = is_t ? "T" : "S";
    const int rows = dk, cols = is_t ? dk : dv, kmax = rows < cols ? rows : cols;
    size_t off = pad16((size_t)heads * REC_BYTES);
    if (len < off)
        return hy_err_set(err, HY_EFORMAT,
                          "%s section of %zu bytes is shorter than its %d heads' table", part, len,
                          heads);
    for (int i = 0; i < heads; i++) {
        const unsigned char *r = p + (size_t)i * REC_BYTES;
        const int form = r[0], dt = r[1], rank = r[2] | r[3] << 8;
        const float gamma = f32_of(get32(r + 4)), bound = f32_of(get32(r + 8));
        const uint32_t bytes = get32(r + 12);
        if (!form_allowed(form, is_t, kind))
            return hy_err_set(err, HY_EFORMAT, "%s head %d: form %d is not one this part takes",
                              part, i, form);
        if (dt != HY_ENTRY_F32 && dt != HY_ENTRY_BF16)
            return hy_err_set(err, HY_EFORMAT, "%s head %d: unknown dtype %d", part, i, dt);
        const bool ranked = form == HY_FORM_LOWRANK || form == HY_FORM_IPLR;
        if (ranked ? rank < 1 || rank > kmax : rank != 0)
            return hy_err_set(err, HY_EFORMAT, "%s head %d: rank %d for form %s (at most %d)", part,
                              i, rank, hy_entry_form_name(form), kmax);
        if (!isfinite(gamma) || !isfinite(bound) || bound < 0)
            return hy_err_set(err, HY_EFORMAT, "%s head %d: γ %g or bound %g is not finite", part,
                              i, (double)gamma, (double)bound);
        if (bytes != hy_rep_payload_bytes(form, dt, rank, rows, cols))
            return hy_err_set(err, HY_EFORMAT,
                              "%s head %d: %u payload bytes, form %s of rank %d needs %zu", part, i,
                              bytes, hy_entry_form_name(form), rank,
                              hy_rep_payload_bytes(form, dt, rank, rows, cols));
        if (pad16(bytes) > len - off)
            return hy_err_set(err, HY_EFORMAT, "%s head %d: payload past the section's %zu bytes",
                              part, i, len);
        for (size_t j = off + bytes; j < off + pad16(bytes); j++)
            if (p[j])
                return hy_err_set(err, HY_EFORMAT, "%s head %d: payload padding is not zero", part,
                                  i);
        out[i] = (hy_head_rep){.form = (uint8_t)form,
                               .dtype = (uint8_t)dt,
                               .rank = (uint16_t)rank,
                               .gamma = gamma,
                               .bound = bound,
                               .bytes = bytes,
                               .p = bytes ? p + off : NULL};
        off += pad16(bytes);
    }
    if (off != len)
        return hy_err_set(err, HY_EFORMAT, "%s section has %zu bytes, its heads fill %zu", part,
                          len, off);
    return HY_OK;
}
