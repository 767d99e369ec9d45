/*
 * The serialised entry (docs/entry-format.md). Little-endian; a fixed header,
 * a section table, then the sections, each 64-byte aligned, so a reader can
 * validate the header and the table before touching a payload byte and check
 * every section against its XXH3-64 before trusting it.
 *
 *   0   magic "HYPICENT"              48  model fingerprint (32 bytes)
 *   8   u32 version (2; 1 is read)    80  u64 XXH3 of header + table, taken
 *   12  u32 header bytes                  with this field zero
 *   16  u32 section count             88  u64 total bytes
 *   20  u8 S, T, K/V dtypes, u8 zero  96  u64 zero
 *       (version 1: u32 S dtype)      104 section table, count × 32 bytes:
 *   24  u32 W      28  u32 w                u32 kind, u32 layer, u64 offset,
 *   32  u32 n      36  u32 body tokens      u64 length, u64 XXH3
 *   40  u32 layers 44  f32 tolerance (version 1: zero)
 *
 * Sections in order: TOKENS (n × u32), then per layer either T, S, TAIL
 * (linear) or K, V (attention). Version 2's T and S sections are a table of
 * head records and the heads' payloads (entry_repr.c); version 1's are
 * [Hv] dense heads, T fp32 and S in its dtype, and K, V are fp32.
 */
#include "hy_kernels.h"
#include "model_internal.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
    size_t off;               /* its offset in the serialised entry (decoding) */
    const hy_head_rep *heads; /* T, S: written from the head records, not data */
    int nheads;
} section;

/* Version 1's section sizes: [Hv] dense heads, T in its family's shape
 * (fp32), S in dt, K/V fp32. */
static hy_entry_layer_bytes v1_sizes(const hy_model_config *c, hy_entry_dtype dt)
{
    return (hy_entry_layer_bytes){
        .t = (size_t)c->lin_v_heads * hy_la_t_size(hy_lin_family(c), c->lin_dk) * 4,
        .s = (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv * (dt == HY_ENTRY_BF16 ? 2 : 4),
        .tail = (size_t)(c->conv_kernel - 1) * (size_t)hy_config_conv_dim(c) * 4,
        .k_per_token = (size_t)hy_config_kv_k(c) * 4,
        .v_per_token = (size_t)hy_config_kv_v(c) * 4};
}

static size_t pad16(size_t x);

/* An exact entry's (hy_entry_exact(dt)): version 1's with each linear head
 * behind its 16-byte record, at a multiple of 16 bytes (a scalar T is its
 * record alone). */
hy_entry_layer_bytes hy_entry_layer_sizes(const hy_model_config *c, hy_entry_dtype dt)
{
    hy_entry_layer_bytes b = v1_sizes(c, dt);
    const size_t H = (size_t)c->lin_v_heads, tab = pad16(H * 16);
    const size_t th = hy_la_t_size(hy_lin_family(c), c->lin_dk);
    b.t = tab + (th == 1 ? 0 : H * pad16(th * 4));
    b.s = tab + H * pad16(b.s / (H ? H : 1));
    return b;
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

static size_t elem(hy_entry_dtype dt)
{
    return dt == HY_ENTRY_BF16 ? 2 : 4;
}

static size_t pad16(size_t x)
{
    return (x + 15) & ~(size_t)15;
}

bool hy_entry_size_known(const hy_entry *e)
{
    return e->repr.tol == 0.0f;
}

/* Bytes of linear layer li's T (is_t) or S section in version 2: from its
 * head records once the layer is stored; before that (a build under way),
 * what an exact entry's layer will take — dense heads in the part's dtype. */
static size_t part_bytes(const hy_entry *e, int li, bool is_t)
{
    const hy_model_config *c = &e->cfg;
    const int H = c->lin_v_heads;
    if ((is_t ? e->T : e->S)[li])
        return hy_rep_section_bytes((is_t ? e->th : e->sh) + (size_t)li * H, H);
    size_t head;
    if (is_t) {
        const hy_la_tkind k = hy_lin_tkind(c);
        head = k == HY_LA_T_SCALAR ? 0
               : k == HY_LA_T_DIAG ? (size_t)c->lin_dk * elem(e->repr.t)
                                   : (size_t)c->lin_dk * c->lin_dk * elem(e->repr.t);
    } else {
        head = (size_t)c->lin_dk * c->lin_dv * elem(e->repr.s);
    }
    return pad16((size_t)H * 16) + (size_t)H * pad16(head);
}

/* The sections of entry e (its shapes from e->cfg), in file order; out has
 * room for MAX_SECTIONS. */
static size_t list_sections(const hy_entry *e, section *out)
{
    const hy_model_config *c = &e->cfg;
    assert(c->n_layers == e->n_layers && c->n_layers <= HY_MAX_LAYERS);
    const hy_entry_layer_bytes b = v1_sizes(c, HY_ENTRY_F32);
    const size_t kv = elem(e->repr.kv), H = (size_t)c->lin_v_heads;
    size_t k = 0;
    out[k++] =
        (section){SEC_TOKENS, 0, e->tokens, (void **)&e->tokens, (size_t)e->n * 4, 0, NULL, 0};
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            out[k++] =
                (section){SEC_T, (uint32_t)i,           e->T[i], &e->T[i], part_bytes(e, i, true),
                          0,     e->th + (size_t)i * H, (int)H};
            out[k++] =
                (section){SEC_S, (uint32_t)i,           e->S[i], &e->S[i], part_bytes(e, i, false),
                          0,     e->sh + (size_t)i * H, (int)H};
            out[k++] = (section){SEC_TAIL, (uint32_t)i, e->tail[i], (void **)&e->tail[i],
                                 b.tail,   0,           NULL,       0};
        } else if (c->layer_kind[i] == HY_LAYER_ATTENTION) {
            const size_t kb = (size_t)e->nb * b.k_per_token / 4 * kv;
            const size_t vb = (size_t)e->nb * b.v_per_token / 4 * kv;
            out[k++] = (section){SEC_K, (uint32_t)i, e->K[i], &e->K[i], kb, 0, NULL, 0};
            out[k++] = (section){SEC_V, (uint32_t)i, e->V[i], &e->V[i], vb, 0, NULL, 0};
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
        if (secs[i].heads)
            hy_rep_section_write(secs[i].heads, secs[i].nheads, p + secs[i].off);
        else
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
    if (layer < 0 || layer >= e->n_layers || e->dev) return HY_EINVAL;
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
    if (e->dev) return HY_EINVAL;
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
    p[20] = (unsigned char)e->repr.s, p[21] = (unsigned char)e->repr.t;
    p[22] = (unsigned char)e->repr.kv;
    uint32_t tol;
    memcpy(&tol, &e->repr.tol, 4);
    put32(p + 44, tol);
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
    if (e->dev)
        return hy_err_set(err, HY_EINVAL,
                          "entry: its sections lie in device memory (device %d), not serialised "
                          "from there",
                          e->dev_index);
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

/* The header's representation: version 2's three dtypes and tolerance, or
 * version 1's S dtype (the rest exact). */
static int read_repr(const unsigned char *p, uint32_t ver, hy_entry_repr *r, hy_err *err)
{
    if (ver == 1) {
        const uint32_t dt = get32(p + 20);
        if (dt > HY_ENTRY_BF16) return hy_err_set(err, HY_EFORMAT, "entry: unknown S dtype %u", dt);
        if (get32(p + 44) != 0)
            return hy_err_set(err, HY_EFORMAT, "entry: reserved header fields are not zero");
        *r = hy_entry_exact((hy_entry_dtype)dt);
        return HY_OK;
    }
    if (p[20] > HY_ENTRY_BF16 || p[21] > HY_ENTRY_BF16 || p[22] > HY_ENTRY_BF16 || p[23] != 0)
        return hy_err_set(err, HY_EFORMAT, "entry: unknown dtypes %u/%u/%u/%u (S, T, K/V, zero)",
                          p[20], p[21], p[22], p[23]);
    const uint32_t tb = get32(p + 44);
    float tol;
    memcpy(&tol, &tb, 4);
    *r = (hy_entry_repr){(hy_entry_dtype)p[20], (hy_entry_dtype)p[21], (hy_entry_dtype)p[22], tol};
    if (!(tol >= 0.0f && tol <= 1.0f))
        return hy_err_set(err, HY_EFORMAT, "entry: tolerance %g is outside [0, 1]", (double)tol);
    return HY_OK;
}

/* A version-1 linear section's head records: every head dense in its
 * family's shape (T fp32), pointing into sec. */
static void v1_heads(const hy_model_config *c, bool is_t, hy_entry_dtype sdt, const void *sec,
                     hy_head_rep *out)
{
    const hy_la_tkind kind = hy_lin_tkind(c);
    const size_t th = hy_la_t_size(hy_lin_family(c), c->lin_dk);
    const size_t hs = is_t ? th * 4 : (size_t)c->lin_dk * c->lin_dv * elem(sdt);
    for (int h = 0; h < c->lin_v_heads; h++) {
        const unsigned char *q = (const unsigned char *)sec + (size_t)h * hs;
        if (!is_t) /* bf16 rounds each value by at most 2⁻⁹ of itself: its bound */
            out[h] = (hy_head_rep){.form = HY_FORM_DENSE,
                                   .dtype = (uint8_t)sdt,
                                   .bound = sdt == HY_ENTRY_BF16 ? 0x1p-9f : 0.0f,
                                   .bytes = (uint32_t)hs,
                                   .p = q};
        else if (kind == HY_LA_T_SCALAR) {
            float g;
            memcpy(&g, q, 4);
            out[h] = (hy_head_rep){.form = HY_FORM_SCALAR, .gamma = g};
        } else
            out[h] = (hy_head_rep){.form = kind == HY_LA_T_DIAG ? HY_FORM_DIAG : HY_FORM_DENSE,
                                   .dtype = HY_ENTRY_F32,
                                   .bytes = (uint32_t)hs,
                                   .p = q};
    }
}

/* The largest a version-2 T or S section can be for this model: the table
 * and every head at full rank in fp32 or dense, whichever is larger. */
static size_t part_max(const hy_model_config *c, bool is_t)
{
    const int dk = c->lin_dk, cols = is_t ? dk : c->lin_dv, k = dk < cols ? dk : cols;
    const size_t head = HY_MAX((size_t)k * ((size_t)dk + cols), (size_t)dk * cols) * 4;
    return pad16((size_t)c->lin_v_heads * 16) + (size_t)c->lin_v_heads * pad16(head);
}

/* Validates buf as an entry of model m and decodes it: into sections of its
 * own (copies), or, for a view, pointing into buf itself. */
/* An entry being decoded: its section table read and checked, sections
 * installed in order from `next`. A streamed view keeps it (e->arr) while its
 * bytes land; the lock orders the installer's writes before the executor's
 * reads of a layer it was told is ready. */
struct hy_entry_arrival {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const unsigned char *p; /* the buffer */
    size_t len;
    uint32_t ver;
    section *secs;  /* [want] */
    uint64_t *sums; /* [want] stated */
    size_t want, next;
    int ready; /* layers whose sections are all installed */
    int rc;    /* a failure: the entry will never be whole */
    char msg[sizeof(((hy_err *)0)->msg)];
};

void hy_entry_arrival_free(hy_entry_arrival *a)
{
    if (!a) return;
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a->secs), free(a->sums), free(a);
}

/* The header and the section table, every check on them, the entry
 * allocated (its sections not yet installed) and *arr the table. avail:
 * bytes of buf present (len when whole); fewer than the header's: HY_EAGAIN
 * with *need the bytes it takes. */
static int open_entry(const hy_model *m, const void *buf, size_t len, size_t avail, bool view,
                      hy_entry **out, hy_entry_arrival **arr, size_t *need, hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    const unsigned char *p = buf;
    *out = NULL, *arr = NULL;
    if (len < HDR_FIXED)
        return hy_err_set(err, HY_EFORMAT, "entry: %zu bytes is shorter than its %u-byte header",
                          len, HDR_FIXED);
    if (avail < HDR_FIXED) {
        *need = HDR_FIXED;
        return HY_EAGAIN;
    }
    if (memcmp(p, k_magic, 8) != 0) return hy_err_set(err, HY_EFORMAT, "entry: bad magic");
    const uint32_t ver = get32(p + 8), hdr = get32(p + 12), ns = get32(p + 16);
    if (ver != 1 && ver != HY_ENTRY_VERSION)
        return hy_err_set(err, HY_EUNSUPPORTED,
                          "entry: format version %u, this build reads 1 and %d", ver,
                          HY_ENTRY_VERSION);
    if (ns == 0 || ns > MAX_SECTIONS || hdr != HDR_FIXED + ns * SEC_BYTES || hdr > len)
        return hy_err_set(err, HY_EFORMAT,
                          "entry: header of %u bytes with %u sections does not fit %zu bytes", hdr,
                          ns, len);
    if (get64(p + 88) != len)
        return hy_err_set(err, HY_EFORMAT, "entry: header says %llu bytes, got %zu (truncated?)",
                          (unsigned long long)get64(p + 88), len);
    if (avail < hdr) {
        *need = hdr;
        return HY_EAGAIN;
    }
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
    hy_entry_repr repr;
    int rc = read_repr(p, ver, &repr, err);
    if (rc) return rc;
    const uint32_t W = get32(p + 24), w = get32(p + 28), n = get32(p + 32);
    const uint32_t nb = get32(p + 36), nl = get32(p + 40);
    if (get64(p + 96) != 0) /* one byte string per entry */
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
            grows +=
                (uint64_t)nb * (uint64_t)(hy_config_kv_k(c) + hy_config_kv_v(c)) * elem(repr.kv);
    if (grows > len)
        return hy_err_set(err, HY_EFORMAT,
                          "entry: %u tokens (body %u) need more than its %zu bytes", n, nb, len);
    hy_entry *e;
    rc = hy_entry_alloc(m, (int)W, (int)w, (int)n, repr, view, &e, err);
    if (rc) return rc;
    e->version = (int)ver;
    hy_entry_arrival *a = calloc(1, sizeof *a);
    if (a) {
        a->secs = malloc(MAX_SECTIONS * sizeof *a->secs);
        a->sums = calloc(MAX_SECTIONS, sizeof *a->sums);
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
    }
    if (!a || !a->secs || !a->sums) {
        hy_entry_arrival_free(a);
        hy_entry_free(e);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    a->p = p, a->len = len, a->ver = ver;
    section *secs = a->secs;
    const size_t want = list_sections(e, secs);
    a->want = want;
    if (want != ns)
        rc = hy_err_set(err, HY_EFORMAT, "entry: %u sections, this model's entries have %zu", ns,
                        want);
    /* The layout, section by section, before any payload byte is read. */
    size_t prev_end = hdr;
    const hy_entry_layer_bytes v1b = v1_sizes(c, repr.s);
    for (size_t i = 0; i < want && !rc; i++) {
        const unsigned char *t = p + HDR_FIXED + i * SEC_BYTES;
        const uint32_t kind = get32(t), layer = get32(t + 4);
        const uint64_t off = get64(t + 8), bytes = get64(t + 16);
        const char *kn = secs[i].kind < 7 ? k_kind[secs[i].kind] : "?";
        const bool part = secs[i].kind == SEC_T || secs[i].kind == SEC_S;
        /* v1: every size follows from the model; v2: a T or S section's from
         * its head table (checked when parsed), up to the model's largest */
        const size_t most = !part      ? secs[i].bytes
                            : ver == 1 ? (secs[i].kind == SEC_T ? v1b.t : v1b.s)
                                       : part_max(c, secs[i].kind == SEC_T);
        if (kind != secs[i].kind || layer != secs[i].layer)
            rc = hy_err_set(err, HY_EFORMAT,
                            "entry: section %zu is kind %u layer %u, expected %s of layer %u", i,
                            kind, layer, kn, secs[i].layer);
        else if (ver == 2 && part ? bytes > most : bytes != most)
            rc = hy_err_set(err, HY_EFORMAT,
                            "entry: section %s of layer %u has %llu bytes, the model needs %s%zu",
                            kn, layer, (unsigned long long)bytes,
                            ver == 2 && part ? "at most " : "", most);
        else if (off % ALIGN || off < prev_end || off > len || bytes > len - off)
            rc = hy_err_set(err, HY_EFORMAT,
                            "entry: section %s of layer %u at [%llu, +%llu) is misplaced in %zu "
                            "bytes",
                            kn, layer, (unsigned long long)off, (unsigned long long)bytes, len);
        else {
            secs[i].off = (size_t)off;
            secs[i].bytes = (size_t)bytes;
            a->sums[i] = get64(t + 24);
            prev_end = off + bytes;
        }
    }
    if (rc) {
        hy_entry_arrival_free(a);
        hy_entry_free(e);
        return rc;
    }
    *out = e, *arr = a;
    return HY_OK;
}

/* Installs section i of a (its bytes present): its checksum against the
 * table's unless found (the sum computed already), then its pointer (a
 * view) or copy, and a T or S section's head table parsed. */
static int install(hy_entry *e, hy_entry_arrival *a, size_t i, const uint64_t *found, hy_err *err)
{
    const hy_model_config *c = &e->cfg;
    section *sc = &a->secs[i];
    const bool part = sc->kind == SEC_T || sc->kind == SEC_S;
    const void *src = a->p + sc->off;
    const uint64_t sum = found ? *found : hy_xxh3(src, sc->bytes);
    if (sum != a->sums[i])
        return hy_err_set(err, HY_EFORMAT, "entry: section %s of layer %u fails its checksum",
                          sc->kind < 7 ? k_kind[sc->kind] : "?", sc->layer);
    if (e->view) { /* the executor only reads an entry's sections: buf stays unchanged */
        *sc->slot = (void *)src;
    } else if (part) { /* T and S storage is per layer, as the section */
        void *cp = hy_alloc(HY_MAX(sc->bytes, 1));
        if (!cp) return hy_err_set(err, HY_ENOMEM, "out of memory");
        memcpy(cp, src, sc->bytes);
        *sc->slot = cp;
        src = cp;
    } else {
        memcpy(sc->data, src, sc->bytes);
    }
    int rc = HY_OK;
    if (part) {
        const bool is_t = sc->kind == SEC_T;
        const int H = c->lin_v_heads;
        hy_head_rep *heads = (is_t ? e->th : e->sh) + (size_t)sc->layer * H;
        if (a->ver == 1)
            v1_heads(c, is_t, e->repr.s, src, heads);
        else
            rc = hy_rep_section_parse(src, sc->bytes, H, is_t, hy_lin_tkind(c), c->lin_dk,
                                      c->lin_dv, heads, err);
        if (rc) hy_err_prefix(err, "entry: layer %u", sc->layer);
    } else if (sc->kind == SEC_TOKENS) {
        for (int t = 0; t < e->n && !rc; t++)
            if (e->tokens[t] < 0 || e->tokens[t] >= c->vocab)
                rc =
                    hy_err_set(err, HY_EFORMAT, "entry: token %d has id %d, outside the vocabulary",
                               t, (int)e->tokens[t]);
    }
    return rc;
}

static int decode(const hy_model *m, const void *buf, size_t len, bool view, hy_entry **out,
                  hy_err *err)
{
    hy_entry *e;
    hy_entry_arrival *a;
    size_t need;
    int rc = open_entry(m, buf, len, len, view, &e, &a, &need, err);
    if (rc) return rc;
    /* every section's checksum, spread over the OpenMP threads (a request's
     * hits are tens of MiB, read once, from memory the caches do not hold:
     * one core's streaming rate is the fetch's limit otherwise); then, in
     * order, the first section that fails, or the pointers or copies */
    const size_t want = a->want;
    uint64_t *found = malloc((want ? want : 1) * sizeof *found);
    if (!found) rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    if (!rc) {
        const long nsec = (long)want;
        const section *secs = a->secs;
        const unsigned char *p = a->p;
#pragma omp parallel for schedule(dynamic, 1) if (len >= ((size_t)1 << 20))
        for (long i = 0; i < nsec; i++) found[i] = hy_xxh3(p + secs[i].off, secs[i].bytes);
    }
    for (size_t i = 0; i < want && !rc; i++) rc = install(e, a, i, &found[i], err);
    free(found);
    hy_entry_arrival_free(a);
    if (rc) {
        hy_entry_free(e);
        return rc;
    }
    *out = e;
    return HY_OK;
}

/* --- a view whose bytes are still landing ------------------------------------ */

int hy_entry_view_open(const hy_model *m, const void *buf, size_t len, size_t avail, size_t *need,
                       hy_entry **out, hy_err *err)
{
    *out = NULL;
    *need = 0;
    if ((uintptr_t)buf % ALIGN)
        return hy_err_set(err, HY_EINVAL, "entry view: buffer at %p is not %u-byte aligned", buf,
                          ALIGN);
    hy_entry *e;
    hy_entry_arrival *a;
    int rc = open_entry(m, buf, len, avail, true, &e, &a, need, err);
    if (rc) return rc;
    /* its tokens before the pass: they are checked against the request's */
    const size_t tok_end = a->secs[0].off + a->secs[0].bytes;
    if (avail < tok_end) {
        *need = tok_end;
        hy_entry_arrival_free(a);
        hy_entry_free(e);
        return HY_EAGAIN;
    }
    if ((rc = install(e, a, 0, NULL, err))) {
        hy_entry_arrival_free(a);
        hy_entry_free(e);
        return rc;
    }
    a->next = 1;
    e->arr = a;
    *out = e;
    return HY_OK;
}

void hy_entry_layer_span(const hy_entry *e, int layer, size_t *lo, size_t *hi)
{
    const hy_entry_arrival *a = e->arr;
    *lo = *hi = 0;
    for (size_t i = 1; a && i < a->want; i++) {
        if ((int)a->secs[i].layer != layer) continue;
        if (*hi == 0) *lo = a->secs[i].off;
        *hi = a->secs[i].off + a->secs[i].bytes;
    }
}

/* Wakes the executor with the layers ready, or the failure. */
static void publish(hy_entry_arrival *a, int ready, int rc, const char *msg)
{
    pthread_mutex_lock(&a->mu);
    if (ready > a->ready) a->ready = ready;
    if (rc && !a->rc) {
        a->rc = rc;
        snprintf(a->msg, sizeof a->msg, "%s", msg);
    }
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

int hy_entry_view_landed(hy_entry *e, size_t upto, hy_err *err)
{
    hy_entry_arrival *a = e->arr;
    if (!a) return HY_OK;
    int rc = HY_OK, ready = -1;
    while (a->next < a->want && !rc) {
        const section *sc = &a->secs[a->next];
        if (sc->off + sc->bytes > upto) break;
        if ((rc = install(e, a, a->next, NULL, err))) break;
        a->next++;
        /* a layer is ready when its last section is in */
        if (a->next == a->want || a->secs[a->next].layer != sc->layer) ready = (int)sc->layer + 1;
    }
    if (a->next == a->want) ready = e->n_layers;
    if (rc || ready >= 0) publish(a, ready, rc, rc ? err->msg : "");
    return rc;
}

void hy_entry_view_fail(hy_entry *e, int code, const char *msg)
{
    if (e->arr) publish(e->arr, -1, code ? code : HY_EIO, msg);
}

bool hy_entry_whole(const hy_entry *e)
{
    hy_entry_arrival *a = e->arr;
    if (!a) return true;
    pthread_mutex_lock(&a->mu);
    const bool whole = a->ready >= e->n_layers && !a->rc;
    pthread_mutex_unlock(&a->mu);
    return whole;
}

int hy_entry_layer_wait(const hy_entry *e, int layer, hy_err *err)
{
    hy_entry_arrival *a = e->arr;
    if (!a) return HY_OK;
    pthread_mutex_lock(&a->mu);
    while (a->ready <= layer && !a->rc) pthread_cond_wait(&a->cv, &a->mu);
    const int rc = a->ready > layer ? HY_OK : a->rc;
    if (rc) hy_err_set(err, rc, "%s", a->msg);
    pthread_mutex_unlock(&a->mu);
    return rc;
}

int hy_entry_deserialize(const hy_model *m, const void *buf, size_t len, hy_entry **out,
                         hy_err *err)
{
    return decode(m, buf, len, false, out, err);
}

/* --- a view of an entry in a device's memory -------------------------------- */

/* Bytes [off, off + n) of the device entry into the shadow at the same
 * offset (bounds checked by the caller). */
static int shadow_read(unsigned char *sh, const unsigned char *dev, size_t off, size_t n,
                       hy_entry_read_fn read, void *ctx, hy_err *err)
{
    if (n == 0) return HY_OK;
    int rc = read(ctx, sh + off, dev + off, n, err);
    if (rc) hy_err_prefix(err, "entry on the device: reading bytes [%zu, +%zu)", off, n);
    return rc;
}

int hy_entry_view_device(const hy_model *m, int device, const void *dev, size_t len,
                         hy_entry_read_fn read, void *ctx, hy_entry **out, hy_err *err)
{
    *out = NULL;
    const unsigned char *d = dev;
    if (!d || (uintptr_t)d % ALIGN)
        return hy_err_set(err, HY_EINVAL, "entry view: device buffer at %p is not %u-byte aligned",
                          dev, ALIGN);
    if (len < HDR_FIXED)
        return hy_err_set(err, HY_EFORMAT, "entry: %zu bytes is shorter than its %u-byte header",
                          len, HDR_FIXED);
    /* the shadow: zero pages mapped as they are touched, and only the bytes
     * that describe the entry are */
    unsigned char *sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return hy_err_set(err, HY_ENOMEM, "out of address space for a %zu-byte entry's shadow",
                          len);
    hy_entry *e = NULL;
    hy_entry_arrival *a = NULL;
    size_t need = 0;
    int rc = shadow_read(sh, d, 0, HDR_FIXED, read, ctx, err);
    if (!rc) rc = open_entry(m, sh, len, HDR_FIXED, true, &e, &a, &need, err);
    if (rc == HY_EAGAIN) { /* the section table */
        rc = shadow_read(sh, d, HDR_FIXED, need - HDR_FIXED, read, ctx, err);
        if (!rc) rc = open_entry(m, sh, len, need, true, &e, &a, &need, err);
    }
    const int H = m->cfg.lin_v_heads;
    for (size_t i = 0; !rc && i < a->want; i++) {
        const section *sc = &a->secs[i];
        const bool part = sc->kind == SEC_T || sc->kind == SEC_S;
        if (sc->kind == SEC_TOKENS) { /* read, and held to its checksum */
            rc = shadow_read(sh, d, sc->off, sc->bytes, read, ctx, err);
            if (!rc) rc = install(e, a, i, NULL, err);
            continue;
        }
        /* a payload stays where it lies: its sum is taken as stated; a
         * version-2 T or S section's head table comes down to be parsed */
        if (part && a->ver != 1)
            rc = shadow_read(sh, d, sc->off, HY_MIN(sc->bytes, hy_rep_table_bytes(H)), read, ctx,
                             err);
        if (!rc) rc = install(e, a, i, &a->sums[i], err);
    }
    hy_entry_arrival_free(a);
    if (rc) {
        hy_entry_free(e);
        munmap(sh, len);
        return rc;
    }
    e->shadow = sh, e->shadow_len = len, e->dev = d, e->dev_index = device;
    *out = e;
    return HY_OK;
}

int hy_entry_device(const hy_entry *e)
{
    return e->dev ? e->dev_index : HY_ENTRY_ON_HOST;
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
