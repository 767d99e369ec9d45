/*
 * fuzz_entry: the entry deserialiser (hy_entry_deserialize), which the daemon
 * runs on every entry a client uploads (PutEntry) and every entry it reads
 * back from a tier, against the "tiny" model generated at start-up.
 *
 * Input: byte 0 is a set of repairs, the rest the entry's bytes. The format
 * guards everything with checksums, which random mutations almost never
 * keep intact; a client building a hostile entry computes them, so the
 * target can too; and so that one mutation can change an entry's length,
 * the seam and body sizes can follow from W and n. After the repairs
 * selected (in this order):
 *   bit 4  the seam width and body tokens are set from W and n as the
 *          seam rule gives them (w = min(W, n - 1), body n - w);
 *   bit 0  the model's fingerprint is written into the header;
 *   bit 1  the total-size field is set to the input's length;
 *   bit 2  every section checksum whose section lies inside the input is
 *          recomputed;
 *   bit 3  the header checksum is recomputed;
 * the bytes go to the deserialiser. A refusal must be one of its documented
 * codes with a message; an accepted entry must re-serialise to the same
 * header fields, section table (but offsets) and section bytes, that
 * re-serialisation must itself decode and re-serialise identically, and
 * everything is freed (LeakSanitizer). The same bytes are also viewed as
 * if they lay in a device's memory (hy_entry_view_device, which reads only
 * what describes the entry): every read inside the entry's bytes, a
 * refusal with a documented code, and nothing the deserialiser accepts
 * refused.
 *
 * The committed seeds (corpus/fuzz_entry, written by fuzz_entry_seeds) are
 * real entries of the same model with every repair bit set.
 */
#include "entry_layout.h"
#include "fuzz_check.h"
#include "fuzz_util.h"
#include "hy_model.h"

#include <stdint.h>
#include <string.h>

enum { FIX_FP = 1, FIX_TOTAL = 2, FIX_SECTIONS = 4, FIX_HEADER = 8, FIX_SEAM = 16 };

static hy_model *g_model;
static uint8_t g_fp[32];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    if (fuzz_tiny_open(&g_model)) exit(1);
    hy_model_fingerprint(g_model, g_fp);
    return 0;
}

static void repair(uint8_t *p, size_t len, unsigned fix)
{
    if ((fix & FIX_SEAM) && len >= ENT_OFF_NB + 4) {
        const uint32_t W = ent_get32(p + ENT_OFF_W), n = ent_get32(p + ENT_OFF_N);
        const uint32_t w = n == 0 ? 0 : W < n - 1 ? W : n - 1;
        ent_put32(p + ENT_OFF_SEAM, w);
        ent_put32(p + ENT_OFF_NB, n - w);
    }
    if ((fix & FIX_FP) && len >= ENT_OFF_FP + 32) memcpy(p + ENT_OFF_FP, g_fp, 32);
    if ((fix & FIX_TOTAL) && len >= ENT_OFF_TOTAL + 8) ent_put64(p + ENT_OFF_TOTAL, len);
    if ((fix & FIX_SECTIONS) && len >= ENT_HDR_FIXED) {
        const uint32_t ns = ent_get32(p + ENT_OFF_NSEC);
        for (uint64_t i = 0; i < ns && ENT_HDR_FIXED + (i + 1) * ENT_SEC_BYTES <= len; i++) {
            uint8_t *t = p + ENT_HDR_FIXED + i * ENT_SEC_BYTES;
            const uint64_t off = ent_get64(t + 8), bytes = ent_get64(t + 16);
            if (off <= len && bytes <= len - off) ent_put64(t + 24, hy_xxh3(p + off, bytes));
        }
    }
    if ((fix & FIX_HEADER) && len >= ENT_HDR_FIXED) {
        const uint32_t hdr = ent_get32(p + ENT_OFF_HDR);
        if (hdr >= ENT_OFF_HSUM + 8 && hdr <= len) {
            ent_put64(p + ENT_OFF_HSUM, 0);
            ent_put64(p + ENT_OFF_HSUM, hy_xxh3(p, hdr));
        }
    }
}

/* An accepted entry e of bytes p[0..len) against its serialisation q: the
 * same header fields, table entries (but offsets) and section bytes; the
 * layout (offsets, padding, total size) is the writer's. A version-1 entry
 * is written as version 2: only its sizes and tokens are compared (the
 * round trip of version 2 is checked after). */
static void check_same(const hy_entry *e, const uint8_t *p, size_t len, const uint8_t *q,
                       size_t qlen)
{
    FUZZ_CHECK(qlen >= ENT_HDR_FIXED, "serialised to %zu bytes", qlen);
    if (ent_get32(p + 8) == 1) {
        FUZZ_CHECK(ent_get32(q + 8) == HY_ENTRY_VERSION && memcmp(p + 24, q + 24, 20) == 0 &&
                       memcmp(p + ENT_OFF_FP, q + ENT_OFF_FP, 32) == 0,
                   "a version-1 entry's sizes differ once written as version 2");
        return;
    }
    FUZZ_CHECK(memcmp(p + 44, q + 44, 4) == 0, "the tolerance differs after a round trip");
    /* bytes 0..44: magic, version, header bytes, sections, dtype, W, w, n,
     * body, layers */
    FUZZ_CHECK(memcmp(p, q, 44) == 0 && memcmp(p + ENT_OFF_FP, q + ENT_OFF_FP, 32) == 0,
               "header fields differ after a round trip");
    const uint32_t ns = ent_get32(p + ENT_OFF_NSEC);
    FUZZ_CHECK(ent_get32(q + ENT_OFF_NSEC) == ns, "section count differs");
    size_t total = 0;
    for (uint32_t i = 0; i < ns; i++) {
        const uint8_t *a = p + ENT_HDR_FIXED + (size_t)i * ENT_SEC_BYTES;
        const uint8_t *b = q + ENT_HDR_FIXED + (size_t)i * ENT_SEC_BYTES;
        FUZZ_CHECK(memcmp(a, b, 8) == 0 && memcmp(a + 16, b + 16, 16) == 0,
                   "section %u: kind, layer, length or checksum differ", i);
        const uint64_t ao = ent_get64(a + 8), bo = ent_get64(b + 8), n = ent_get64(a + 16);
        FUZZ_CHECK(ao <= len && n <= len - ao && bo <= qlen && n <= qlen - bo,
                   "section %u outside its buffer", i);
        FUZZ_CHECK(memcmp(p + ao, q + bo, n) == 0, "section %u: bytes differ", i);
        total += n;
    }
    FUZZ_CHECK(hy_entry_payload_bytes(e) == total, "payload of %zu bytes in sections of %zu",
               hy_entry_payload_bytes(e), total);
}

/* The device view's reads (hy_entry_view_device): from a copy standing for
 * device memory, each held inside the entry's bytes. */
typedef struct dev_buf {
    const uint8_t *p;
    size_t len;
} dev_buf;

static int dev_read(void *ctx, void *dst, const void *src, size_t n, hy_err *err)
{
    const dev_buf *d = ctx;
    const uint8_t *s = src;
    (void)err;
    FUZZ_CHECK(s >= d->p && (size_t)(s - d->p) <= d->len && n <= d->len - (size_t)(s - d->p),
               "the device view read [%td, +%zu) of a %zu-byte entry", s - d->p, n, d->len);
    memcpy(dst, src, n);
    return HY_OK;
}

/* The same bytes viewed where they lie: a refusal is a documented code with
 * a message; what the deserialiser accepts (a superset of its checks) the
 * view accepts, with the same tokens. */
static void check_device_view(const uint8_t *p, size_t len, const hy_entry *host)
{
    uint8_t *d = aligned_alloc(64, (len + 63) & ~(size_t)63);
    FUZZ_CHECK(d != NULL, "out of memory");
    memcpy(d, p, len);
    dev_buf b = {d, len};
    hy_entry *e = NULL;
    hy_err err = {0};
    const int rc = hy_entry_view_device(g_model, -1, d, len, dev_read, &b, &e, &err);
    if (rc) {
        FUZZ_CHECK(
            e == NULL && err.msg[0] &&
                (rc == HY_EFORMAT || rc == HY_EINVAL || rc == HY_EUNSUPPORTED || rc == HY_ENOMEM),
            "the device view refused with %d (%s): \"%s\"", rc, hy_strerror(rc), err.msg);
        FUZZ_CHECK(host == NULL, "the device view refused what the deserialiser accepted: %s",
                   err.msg);
    } else if (host) {
        const int32_t *a, *t;
        const int n = hy_entry_tokens(e, &a);
        FUZZ_CHECK(n == hy_entry_tokens(host, &t) && memcmp(a, t, (size_t)n * sizeof *a) == 0,
                   "the device view's tokens differ from the deserialiser's");
    }
    hy_entry_free(e);
    free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const size_t len = size - 1;
    uint8_t *p = malloc(len ? len : 1);
    FUZZ_CHECK(p != NULL, "out of memory");
    memcpy(p, data + 1, len);
    repair(p, len, data[0]);

    hy_entry *e = NULL;
    hy_err err = {0};
    int rc = hy_entry_deserialize(g_model, p, len, &e, &err);
    check_device_view(p, len, rc ? NULL : e);
    if (rc) {
        FUZZ_CHECK(e == NULL, "refused (%s) but returned an entry", hy_strerror(rc));
        FUZZ_CHECK(
            (rc == HY_EFORMAT || rc == HY_EINVAL || rc == HY_EUNSUPPORTED || rc == HY_ENOMEM) &&
                err.msg[0],
            "refused with %d (%s): \"%s\"", rc, hy_strerror(rc), err.msg);
        free(p);
        return 0;
    }
    const int32_t *toks;
    FUZZ_CHECK((uint32_t)hy_entry_tokens(e, &toks) == ent_get32(p + ENT_OFF_N),
               "entry has %d tokens, its header %u", hy_entry_tokens(e, &toks),
               ent_get32(p + ENT_OFF_N));
    FUZZ_CHECK(hy_entry_seam_width(e) + hy_entry_body_tokens(e) == hy_entry_tokens(e, &toks),
               "seam %d + body %d != %d tokens", hy_entry_seam_width(e), hy_entry_body_tokens(e),
               hy_entry_tokens(e, &toks));

    void *q = NULL, *q2 = NULL;
    size_t qlen = 0, q2len = 0;
    rc = hy_entry_serialize(e, &q, &qlen, &err);
    FUZZ_CHECK(rc == 0, "an accepted entry does not serialise: %s", err.msg);
    check_same(e, p, len, q, qlen);
    hy_entry *e2 = NULL;
    rc = hy_entry_deserialize(g_model, q, qlen, &e2, &err);
    FUZZ_CHECK(rc == 0, "its own serialisation is refused: %s", err.msg);
    rc = hy_entry_serialize(e2, &q2, &q2len, &err);
    FUZZ_CHECK(rc == 0 && q2len == qlen && memcmp(q, q2, qlen) == 0,
               "serialise(deserialise(serialise(e))) differs from serialise(e)");
    hy_entry_free(e2);
    hy_entry_free(e);
    free(q);
    free(q2);
    free(p);
    return 0;
}
