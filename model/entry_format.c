/*
 * The serialised entry (docs/entry-format.md). Little-endian; a fixed header,
 * a section table, then the sections, each 64-byte aligned, so a reader can
 * validate the header and the table before touching a payload byte and check
 * every section against its XXH3-64 before trusting it.
 *
 *   0   magic "HYPICENT"              48  model fingerprint (32 bytes)
 *   8   u32 version                   80  u64 XXH3 of header + table, taken
 *   12  u32 header bytes                  with this field zero
 *   16  u32 section count             88  u64 total bytes
 *   20  u32 S dtype (0 F32, 1 BF16)   96  u64 zero
 *   24  u32 W      28  u32 w          104 section table, count × 32 bytes:
 *   32  u32 n      36  u32 body tokens      u32 kind, u32 layer, u64 offset,
 *   40  u32 layers 44  u32 zero             u64 length, u64 XXH3
 *
 * Sections in order: TOKENS (n × u32), then per layer either T, S, TAIL
 * (linear) or K, V (attention).
 */
#include "hy_kernels.h"
#include "model_internal.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Payloads are copied (or, in a view, used) as the host's floats and ints. */
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "entries are little-endian");

enum { SEC_TOKENS = 1, SEC_T = 2, SEC_S = 3, SEC_TAIL = 4, SEC_K = 5, SEC_V = 6 };
#define HDR_FIXED    104u
#define SEC_BYTES    32u
#define ALIGN        64u
#define MAX_SECTIONS (1 + 3 * HY_MAX_LAYERS)

static const char k_magic[8] = {'H', 'Y', 'P', 'I', 'C', 'E', 'N', 'T'};
static const char *k_kind[] = {"?", "TOKENS", "T", "S", "TAIL", "K", "V"};

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

typedef struct section {
    uint32_t kind, layer;
    void *data;  /* the entry's buffer for it (NULL in a view before decoding) */
    void **slot; /* where the entry keeps that pointer */
    size_t bytes;
    size_t off; /* its offset in the serialised entry (decoding) */
} section;

/* The sections of entry e (its shapes from e->cfg), in file order; out has
 * room for MAX_SECTIONS. The sizes are those hy_entry_alloc gives the
 * sections (T per head as the Gated DeltaNet family's, a dense dk×dk), so a
 * section read whole into its buffer fits it. */
hy_entry_layer_bytes hy_entry_layer_sizes(const hy_model_config *c, hy_entry_dtype dt)
{
    return (hy_entry_layer_bytes){
        .t = (size_t)c->lin_v_heads * hy_la_t_size(hy_lin_family(c), c->lin_dk) * 4,
        .s = (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv * (dt == HY_ENTRY_BF16 ? 2 : 4),
        .tail = (size_t)(c->conv_kernel - 1) * (size_t)hy_config_conv_dim(c) * 4,
        .k_per_token = (size_t)hy_config_kv_k(c) * 4,
        .v_per_token = (size_t)hy_config_kv_v(c) * 4};
}

void hy_entry_bytes_for(const hy_model_config *c, hy_entry_dtype dt, size_t *constant,
                        size_t *per_body_token)
{
    const hy_entry_layer_bytes b = hy_entry_layer_sizes(c, dt);
    size_t k = 0, t = 0;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR)
            k += b.t + b.s + b.tail;
        else if (c->layer_kind[i] == HY_LAYER_ATTENTION)
            t += b.k_per_token + b.v_per_token;
    }
    *constant = k;
    *per_body_token = t;
}

static size_t list_sections(const hy_entry *e, section *out)
{
    const hy_model_config *c = &e->cfg;
    assert(c->n_layers == e->n_layers && c->n_layers <= HY_MAX_LAYERS);
    assert(e->dtype == HY_ENTRY_F32 || e->dtype == HY_ENTRY_BF16);
    const hy_entry_layer_bytes b = hy_entry_layer_sizes(c, e->dtype);
    size_t k = 0;
    out[k++] = (section){SEC_TOKENS, 0, e->tokens, (void **)&e->tokens, (size_t)e->n * 4, 0};
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            out[k++] = (section){SEC_T, (uint32_t)i, e->T[i], (void **)&e->T[i], b.t, 0};
            out[k++] = (section){SEC_S, (uint32_t)i, e->S[i], &e->S[i], b.s, 0};
            out[k++] =
                (section){SEC_TAIL, (uint32_t)i, e->tail[i], (void **)&e->tail[i], b.tail, 0};
        } else if (c->layer_kind[i] == HY_LAYER_ATTENTION) {
            const size_t kb = (size_t)e->nb * b.k_per_token, vb = (size_t)e->nb * b.v_per_token;
            out[k++] = (section){SEC_K, (uint32_t)i, e->K[i], (void **)&e->K[i], kb, 0};
            out[k++] = (section){SEC_V, (uint32_t)i, e->V[i], (void **)&e->V[i], vb, 0};
        }
    }
    assert(k <= MAX_SECTIONS);
    return k;
}

static size_t align_up(size_t x)
{
    return (x + ALIGN - 1) & ~(size_t)(ALIGN - 1);
}

size_t hy_entry_payload_bytes(const hy_entry *e)
{
    section *s = malloc(MAX_SECTIONS * sizeof *s);
    if (!s) return 0;
    size_t n = list_sections(e, s), b = 0;
    for (size_t i = 0; i < n; i++) b += s[i].bytes;
    free(s);
    return b;
}

size_t hy_entry_sections(const hy_entry *e, hy_entry_section *out, size_t cap)
{
    section *s = malloc(MAX_SECTIONS * sizeof *s);
    if (!s) return 0;
    const size_t n = list_sections(e, s);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = (hy_entry_section){k_kind[s[i].kind],
                                    s[i].kind == SEC_TOKENS ? -1 : (int)s[i].layer, s[i].bytes};
    free(s);
    return n;
}

/* The header bytes, the sections' offsets and the total of e's serialised
 * form; secs has room for MAX_SECTIONS. Returns the section count. */
static size_t layout(const hy_entry *e, section *secs, size_t *hdr, size_t *total)
{
    const size_t ns = list_sections(e, secs);
    *hdr = HDR_FIXED + ns * SEC_BYTES;
    size_t off = align_up(*hdr);
    for (size_t i = 0; i < ns; i++) {
        secs[i].off = off;
        off = align_up(off + secs[i].bytes);
    }
    *total = off;
    return ns;
}

size_t hy_entry_serialized_bytes(const hy_entry *e)
{
    section *secs = malloc(MAX_SECTIONS * sizeof *secs);
    if (!secs) return 0;
    size_t hdr, total;
    layout(e, secs, &hdr, &total);
    free(secs);
    return total;
}

/* Copies the sections of secs[0..ns) (laid out) for which `want` holds into
 * p at their offsets; [*lo, *hi) the span they cover (empty when none). */
static void write_sections(const section *secs, size_t ns, unsigned char *p,
                           bool (*want)(const section *, int), int arg, size_t *lo, size_t *hi)
{
    *lo = SIZE_MAX, *hi = 0;
    for (size_t i = 0; i < ns; i++) {
        if (!want(&secs[i], arg)) continue;
        memcpy(p + secs[i].off, secs[i].data, secs[i].bytes);
        if (secs[i].off < *lo) *lo = secs[i].off;
        if (align_up(secs[i].off + secs[i].bytes) > *hi)
            *hi = align_up(secs[i].off + secs[i].bytes);
    }
    if (*hi < *lo) *lo = *hi = 0;
}

static bool of_layer(const section *s, int layer)
{
    return s->kind != SEC_TOKENS && (int)s->layer == layer;
}

static bool is_tokens(const section *s, int unused)
{
    (void)unused;
    return s->kind == SEC_TOKENS;
}

int hy_entry_serialize_layer(const hy_entry *e, void *buf, int layer, size_t *lo, size_t *hi)
{
    if (layer < 0 || layer >= e->n_layers) return HY_EINVAL;
    section *secs = malloc(MAX_SECTIONS * sizeof *secs);
    if (!secs) return HY_ENOMEM;
    size_t hdr, total;
    const size_t ns = layout(e, secs, &hdr, &total);
    write_sections(secs, ns, buf, of_layer, layer, lo, hi);
    free(secs);
    return HY_OK;
}

int hy_entry_serialize_finish(const hy_entry *e, void *buf, size_t *hi)
{
    unsigned char *p = buf;
    section *secs = malloc(MAX_SECTIONS * sizeof *secs);
    if (!secs) return HY_ENOMEM;
    size_t hdr, total, lo;
    const size_t ns = layout(e, secs, &hdr, &total);
    write_sections(secs, ns, p, is_tokens, 0, &lo, hi);
    memset(p, 0, align_up(hdr));
    memcpy(p, k_magic, 8);
    put32(p + 8, HY_ENTRY_VERSION);
    put32(p + 12, (uint32_t)hdr);
    put32(p + 16, (uint32_t)ns);
    put32(p + 20, (uint32_t)e->dtype);
    put32(p + 24, (uint32_t)e->W);
    put32(p + 28, (uint32_t)e->w);
    put32(p + 32, (uint32_t)e->n);
    put32(p + 36, (uint32_t)e->nb);
    put32(p + 40, (uint32_t)e->n_layers);
    memcpy(p + 48, e->model_fp, 32);
    put64(p + 88, total);
    for (size_t i = 0; i < ns; i++) {
        unsigned char *t = p + HDR_FIXED + i * SEC_BYTES;
        put32(t, secs[i].kind);
        put32(t + 4, secs[i].layer);
        put64(t + 8, secs[i].off);
        put64(t + 16, secs[i].bytes);
        put64(t + 24, hy_xxh3(p + secs[i].off, secs[i].bytes));
    }
    put64(p + 80, hy_xxh3(p, hdr));
    free(secs);
    return HY_OK;
}

int hy_entry_serialize(const hy_entry *e, void **buf, size_t *len, hy_err *err)
{
    *buf = NULL;
    const size_t total = hy_entry_serialized_bytes(e);
    unsigned char *p = total ? calloc(1, total) : NULL;
    if (!p) return hy_err_set(err, HY_ENOMEM, "out of memory for a %zu-byte entry", total);
    size_t lo, hi;
    int rc = HY_OK;
    for (int l = 0; l < e->n_layers && !rc; l++) rc = hy_entry_serialize_layer(e, p, l, &lo, &hi);
    if (!rc) rc = hy_entry_serialize_finish(e, p, &hi);
    if (rc) {
        free(p);
        return hy_err_set(err, rc, "out of memory serialising an entry");
    }
    *buf = p;
    *len = total;
    return HY_OK;
}

/* Validates buf as an entry of model m and decodes it: into sections of its
 * own (copies), or, for a view, pointing into buf itself. */
static int decode(const hy_model *m, const void *buf, size_t len, bool view, hy_entry **out,
                  hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    const unsigned char *p = buf;
    *out = NULL;
    if (len < HDR_FIXED)
        return hy_err_set(err, HY_EFORMAT, "entry: %zu bytes is shorter than its %u-byte header",
                          len, HDR_FIXED);
    if (memcmp(p, k_magic, 8) != 0) return hy_err_set(err, HY_EFORMAT, "entry: bad magic");
    const uint32_t ver = get32(p + 8), hdr = get32(p + 12), ns = get32(p + 16);
    if (ver != HY_ENTRY_VERSION)
        return hy_err_set(err, HY_EUNSUPPORTED, "entry: format version %u, this build reads %d",
                          ver, HY_ENTRY_VERSION);
    if (ns == 0 || ns > MAX_SECTIONS || hdr != HDR_FIXED + ns * SEC_BYTES || hdr > len)
        return hy_err_set(err, HY_EFORMAT,
                          "entry: header of %u bytes with %u sections does not fit %zu bytes", hdr,
                          ns, len);
    if (get64(p + 88) != len)
        return hy_err_set(err, HY_EFORMAT, "entry: header says %llu bytes, got %zu (truncated?)",
                          (unsigned long long)get64(p + 88), len);
    unsigned char *h = malloc(hdr);
    if (!h) return hy_err_set(err, HY_ENOMEM, "out of memory");
    memcpy(h, p, hdr);
    put64(h + 80, 0);
    const uint64_t hsum = hy_xxh3(h, hdr);
    free(h);
    if (hsum != get64(p + 80))
        return hy_err_set(err, HY_EFORMAT, "entry: header checksum mismatch (corrupt header)");
    if (memcmp(p + 48, m->fingerprint, 32) != 0)
        return hy_err_set(err, HY_EINVAL,
                          "entry: built for another model (fingerprint differs from this one's)");
    const uint32_t dt = get32(p + 20), W = get32(p + 24), w = get32(p + 28), n = get32(p + 32);
    const uint32_t nb = get32(p + 36), nl = get32(p + 40);
    if (dt > HY_ENTRY_BF16) return hy_err_set(err, HY_EFORMAT, "entry: unknown S dtype %u", dt);
    if (get32(p + 44) != 0 || get64(p + 96) != 0) /* one byte string per entry */
        return hy_err_set(err, HY_EFORMAT, "entry: reserved header fields are not zero");
    if (nl != (uint32_t)c->n_layers)
        return hy_err_set(err, HY_EFORMAT, "entry: %u layers, the model has %d", nl, c->n_layers);
    int want_w;
    if (W > 1u << 20 || n == 0 || n > 1u << 30 || hy_entry_seam(c, n, (int)W, &want_w, err) ||
        (uint32_t)want_w != w || nb != n - w)
        return hy_err_set(err, HY_EFORMAT,
                          "entry: inconsistent sizes (W %u, seam %u, n %u, body %u)", W, w, n, nb);

    /* What grows with the segment (its tokens, the body's K and V) must fit
     * in the bytes given before anything is allocated for it. */
    uint64_t grows = 4ull * n;
    for (int i = 0; i < c->n_layers; i++)
        if (c->layer_kind[i] == HY_LAYER_ATTENTION)
            grows += (uint64_t)nb * (uint64_t)(hy_config_kv_k(c) + hy_config_kv_v(c)) * 4;
    if (grows > len)
        return hy_err_set(err, HY_EFORMAT,
                          "entry: %u tokens (body %u) need more than its %zu bytes", n, nb, len);
    hy_entry *e;
    int rc = hy_entry_alloc(m, (int)W, (int)w, (int)n, (hy_entry_dtype)dt, view, &e, err);
    if (rc) return rc;
    section *secs = malloc(MAX_SECTIONS * sizeof *secs);
    if (!secs) {
        hy_entry_free(e);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    const size_t want = list_sections(e, secs);
    if (want != ns)
        rc = hy_err_set(err, HY_EFORMAT, "entry: %u sections, this model's entries have %zu", ns,
                        want);
    /* The layout first, section by section; then every section's checksum,
     * the sections spread over the OpenMP threads (a request's hits are tens
     * of MiB, read once, from memory the caches do not hold: one core's
     * streaming rate is the fetch's limit otherwise); then, in order, the
     * first section that fails, or the pointers or copies. */
    size_t prev_end = hdr;
    uint64_t *sums = calloc(want ? want : 1, 2 * sizeof *sums); /* [want] stated, [want] found */
    if (!sums && !rc) rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    for (size_t i = 0; i < want && !rc; i++) {
        const unsigned char *t = p + HDR_FIXED + i * SEC_BYTES;
        const uint32_t kind = get32(t), layer = get32(t + 4);
        const uint64_t off = get64(t + 8), bytes = get64(t + 16);
        const char *kn = secs[i].kind < 7 ? k_kind[secs[i].kind] : "?";
        if (kind != secs[i].kind || layer != secs[i].layer)
            rc = hy_err_set(err, HY_EFORMAT,
                            "entry: section %zu is kind %u layer %u, expected %s of layer %u", i,
                            kind, layer, kn, secs[i].layer);
        else if (bytes != secs[i].bytes)
            rc = hy_err_set(err, HY_EFORMAT,
                            "entry: section %s of layer %u has %llu bytes, the model needs %zu", kn,
                            layer, (unsigned long long)bytes, secs[i].bytes);
        else if (off % ALIGN || off < prev_end || off > len || bytes > len - off)
            rc = hy_err_set(err, HY_EFORMAT,
                            "entry: section %s of layer %u at [%llu, +%llu) is misplaced in %zu "
                            "bytes",
                            kn, layer, (unsigned long long)off, (unsigned long long)bytes, len);
        else {
            secs[i].off = (size_t)off;
            sums[i] = get64(t + 24);
            prev_end = off + bytes;
        }
    }
    if (!rc) {
        const long nsec = (long)want;
#pragma omp parallel for schedule(dynamic, 1) if (len >= ((size_t)1 << 20))
        for (long i = 0; i < nsec; i++)
            sums[want + (size_t)i] = hy_xxh3(p + secs[i].off, secs[i].bytes);
    }
    for (size_t i = 0; i < want && !rc; i++) {
        if (sums[want + i] != sums[i])
            rc = hy_err_set(err, HY_EFORMAT, "entry: section %s of layer %u fails its checksum",
                            secs[i].kind < 7 ? k_kind[secs[i].kind] : "?", secs[i].layer);
        else if (view) /* the executor only reads an entry's sections: buf stays unchanged */
            *secs[i].slot = (void *)(p + secs[i].off);
        else
            memcpy(secs[i].data, p + secs[i].off, secs[i].bytes);
    }
    free(sums);
    for (int i = 0; i < e->n && !rc; i++)
        if (e->tokens[i] < 0 || e->tokens[i] >= c->vocab)
            rc = hy_err_set(err, HY_EFORMAT, "entry: token %d has id %d, outside the vocabulary", i,
                            (int)e->tokens[i]);
    free(secs);
    if (rc) {
        hy_entry_free(e);
        return rc;
    }
    *out = e;
    return HY_OK;
}

int hy_entry_deserialize(const hy_model *m, const void *buf, size_t len, hy_entry **out,
                         hy_err *err)
{
    return decode(m, buf, len, false, out, err);
}

int hy_entry_view(const hy_model *m, const void *buf, size_t len, hy_entry **out, hy_err *err)
{
    *out = NULL;
    /* sections sit at multiples of 64 from buf, their floats used in place */
    if ((uintptr_t)buf % ALIGN)
        return hy_err_set(err, HY_EINVAL, "entry view: buffer at %p is not %u-byte aligned", buf,
                          ALIGN);
    return decode(m, buf, len, true, out, err);
}
