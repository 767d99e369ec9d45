/*
 * fuzz_meta: the nvme tier's record decoders (tiers/nvme_record.c), which
 * read what the tier finds on disk at open: catalog entry records, the format
 * and floor records, and journal blocks.
 *
 * Input: byte 0 picks the decoder (bits 0-1: 0 entry record, 1 format record,
 * 2 floor record, 3 journal block) and whether its checksums are recomputed
 * first (bit 2), as a torn or hostile disk could present them intact; the
 * rest is the value (a journal block: its first HY_PAGE bytes, zero-padded).
 * A refusal must be a documented code; a decoded value must encode back to
 * the same bytes (every one of these encodings is canonical), and nothing
 * leaks.
 */
#include "fuzz_check.h"
#include "nvme_internal.h"

#include <string.h>

#define JOURNAL_HEAD 56u /* journal block bytes before the record (nvme_record.c) */

enum { KIND_RECORD = 0, KIND_FORMAT, KIND_FLOOR, KIND_JOURNAL };
enum { FIX_SUMS = 4 };

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* An entry record's trailing checksum over every byte before it. */
static void fix_record(uint8_t *p, size_t len)
{
    if (len >= 8) put64(p + len - 8, hy_xxh3(p, len - 8));
}

static void record(const uint8_t *v, size_t len)
{
    hy_key key;
    memset(key.b, 0x5a, sizeof key.b);
    nv_record r;
    hy_err err = {0};
    int rc = nv_record_decode(&key, v, len, &r, &err);
    if (rc) {
        FUZZ_CHECK(rc == HY_EFORMAT && err.msg[0], "record refused with %d: \"%s\"", rc, err.msg);
        FUZZ_CHECK(r.sums == NULL, "refused record kept its checksums");
        return;
    }
    FUZZ_CHECK(memcmp(r.meta.key.b, key.b, sizeof key.b) == 0, "record lost its key");
    uint8_t *b;
    size_t n;
    FUZZ_CHECK(nv_record_encode(&r, &b, &n) == 0, "decoded record does not encode");
    FUZZ_CHECK(n == len && memcmp(b, v, n) == 0, "record of %zu bytes re-encodes to %zu others",
               len, n);
    free(b);
    free(r.sums);
}

static void format(const uint8_t *v, size_t len)
{
    uint64_t eb = 0;
    uint32_t js = 0;
    hy_err err = {0};
    int rc = nv_format_decode(v, len, &eb, &js, &err);
    if (rc) {
        FUZZ_CHECK(rc == HY_EFORMAT && err.msg[0], "format refused with %d: \"%s\"", rc, err.msg);
        return;
    }
    uint8_t b[NV_FORMAT_BYTES];
    nv_format_encode(eb, js, b);
    FUZZ_CHECK(len == NV_FORMAT_BYTES && memcmp(b, v, len) == 0, "format record re-encodes "
                                                                 "differently");
}

static void floor_record(const uint8_t *v, size_t len)
{
    uint64_t floor = 0;
    hy_err err = {0};
    int rc = nv_floor_decode(v, len, &floor, &err);
    if (rc) {
        FUZZ_CHECK(rc == HY_EFORMAT && err.msg[0], "floor refused with %d: \"%s\"", rc, err.msg);
        return;
    }
    uint8_t b[NV_FLOOR_BYTES];
    nv_floor_encode(floor, b);
    FUZZ_CHECK(len == NV_FLOOR_BYTES && memcmp(b, v, len) == 0, "floor re-encodes differently");
}

static void journal(uint8_t *block, bool fix)
{
    const uint32_t rlen = get32(block + JOURNAL_HEAD - 4);
    if (fix && rlen <= HY_PAGE - JOURNAL_HEAD - 8) {
        fix_record(block + JOURNAL_HEAD, rlen);
        put64(block + JOURNAL_HEAD + rlen, hy_xxh3(block, JOURNAL_HEAD + rlen));
    }
    nv_jrec j;
    hy_err err = {0};
    int rc = nv_journal_decode(block, &j, &err);
    if (rc) {
        FUZZ_CHECK(rc == HY_ENOTFOUND || (rc == HY_EFORMAT && err.msg[0]),
                   "journal block refused with %d: \"%s\"", rc, err.msg);
        FUZZ_CHECK(j.rec.sums == NULL, "refused journal block kept its checksums");
        return;
    }
    FUZZ_CHECK(j.kind == NV_JPUT || j.kind == NV_JTOMB, "journal block of kind %d", j.kind);
    uint8_t *b = malloc(HY_PAGE);
    FUZZ_CHECK(b != NULL, "out of memory");
    rc = nv_journal_encode(j.kind, j.seq, &j.key, j.kind == NV_JPUT ? &j.rec : NULL, b);
    FUZZ_CHECK(rc == 0, "decoded journal block does not encode (%d)", rc);
    const size_t used = JOURNAL_HEAD + (j.kind == NV_JPUT ? rlen : 0) + 8;
    FUZZ_CHECK(memcmp(b, block, used) == 0, "journal block re-encodes differently");
    free(b);
    free(j.rec.sums);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const int kind = data[0] & 3;
    const bool fix = data[0] & FIX_SUMS;
    size_t len = size - 1;
    if (kind == KIND_JOURNAL) len = HY_PAGE;
    uint8_t *v = calloc(1, len ? len : 1);
    FUZZ_CHECK(v != NULL, "out of memory");
    memcpy(v, data + 1, HY_MIN(len, size - 1));
    switch (kind) {
    case KIND_RECORD:
        if (fix) fix_record(v, len);
        record(v, len);
        break;
    case KIND_FORMAT:
        if (fix && len >= 36) put64(v + 28, hy_xxh3(v, 28));
        format(v, len);
        break;
    case KIND_FLOOR:
        if (fix && len >= 16) put64(v + 8, hy_xxh3(v, 8));
        floor_record(v, len);
        break;
    default:
        journal(v, fix);
    }
    free(v);
    return 0;
}
