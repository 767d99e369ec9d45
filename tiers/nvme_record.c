/*
 * The nvme tier's catalog values, encoded by hand (little-endian, fixed field
 * order, a trailing XXH3-64) rather than by struct copy, so that the format
 * is independent of the compiler's padding and byte order and a reader can
 * check every field before trusting it. docs/store-format.md is the
 * reference; this file and that page change together.
 *
 * Entry record, version 2 (all integers little-endian):
 *
 *   "HYNR" magic, u32 version, u32 extent id, u32 chunk bytes,
 *   u64 offset, u64 stored bytes, u64 payload bytes,
 *   u64 created_ns, u64 last_access_ns, u64 expires_ns, u64 hits,
 *   f64 flops, u32 tokens, model[32], u64 operation number,
 *   u8 tenant length + tenant bytes, u8 tag count + (u8 length + bytes) each,
 *   u32 chunk count + u64 XXH3-64 per chunk,
 *   u64 XXH3-64 of every byte before it.
 *
 * Format record: "HYNF", u32 version, u64 extent bytes, u32 page bytes,
 * u32 chunk bytes, u32 journal slots, u64 XXH3-64 of the preceding 28 bytes.
 * Floor record: u64 floor, u64 XXH3-64 of it.
 * Journal block (one HY_PAGE slot): "HYNJ", u32 version, u64 operation
 * number, u32 kind (1 put, 2 tombstone), key[32], u32 record length, the
 * entry record (puts; none for tombstones), u64 XXH3-64 of every byte before
 * it, zeros to the end of the page.
 */
#include "nvme_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define NV_RECORD_MAGIC "HYNR"
#define NV_FORMAT_MAGIC "HYNF"
#define NV_RECORD_FIXED 124u /* bytes before the tenant */
#define NV_JOURNAL_HEAD 56u  /* journal block bytes before the record */

void nv_checksum_payload(const void *data, uint64_t bytes, uint64_t *sums)
{
    const uint8_t *p = data;
    for (uint32_t i = 0; i < nv_chunk_count(bytes); i++) {
        uint64_t at = (uint64_t)i * HY_NVME_CHUNK;
        sums[i] = hy_xxh3(p + at, HY_MIN((uint64_t)HY_NVME_CHUNK, bytes - at));
    }
}

int64_t nv_verify_payload(const void *data, uint64_t bytes, const uint64_t *sums)
{
    const uint8_t *p = data;
    for (uint32_t i = 0; i < nv_chunk_count(bytes); i++) {
        uint64_t at = (uint64_t)i * HY_NVME_CHUNK;
        if (hy_xxh3(p + at, HY_MIN((uint64_t)HY_NVME_CHUNK, bytes - at)) != sums[i]) return i;
    }
    return -1;
}

/* --- little-endian writer and checked reader ----------------------------- */

static uint8_t *put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_str(uint8_t *p, const char *s)
{
    size_t n = strlen(s);
    *p++ = (uint8_t)n;
    memcpy(p, s, n);
    return p + n;
}

/* A cursor over an untrusted value: every take checks the remaining bytes
 * and sets `bad` instead of reading past the end. */
typedef struct rd {
    const uint8_t *p;
    size_t left;
    bool bad;
} rd;

static const uint8_t *take(rd *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *q = r->p;
    r->p += n, r->left -= n;
    return q;
}

static uint64_t get_le(rd *r, int n)
{
    const uint8_t *q = take(r, (size_t)n);
    uint64_t v = 0;
    for (int i = 0; q && i < n; i++) v |= (uint64_t)q[i] << (8 * i);
    return v;
}

/* A length-prefixed string into out[cap]: HY_EFORMAT when it would not fit
 * with its NUL, is empty where not allowed, or holds a NUL. */
static int get_str(rd *r, char *out, size_t cap, bool allow_empty)
{
    size_t n = (size_t)get_le(r, 1);
    const uint8_t *q = take(r, n);
    if (!q || n >= cap || (!allow_empty && n == 0) || memchr(q, '\0', n)) return HY_EFORMAT;
    memcpy(out, q, n);
    out[n] = '\0';
    return HY_OK;
}

/* --- entry records -------------------------------------------------------- */

static size_t record_size(const nv_record *r)
{
    const hy_meta *m = &r->meta;
    size_t n = NV_RECORD_FIXED + 1 + strlen(m->tenant) + 1 + 4 + 8 * (size_t)r->nchunks + 8;
    for (uint32_t i = 0; i < m->ntags; i++) n += 1 + strlen(m->tags[i]);
    return n;
}

bool nv_journal_fits(const nv_record *r)
{
    return NV_JOURNAL_HEAD + record_size(r) + 8 <= HY_PAGE;
}

int nv_record_encode(const nv_record *r, uint8_t **out, size_t *len)
{
    const hy_meta *m = &r->meta;
    size_t n = record_size(r);
    uint8_t *b = malloc(n), *p = b;
    if (!b) return HY_ENOMEM;
    memcpy(p, NV_RECORD_MAGIC, 4), p += 4;
    p = put_u32(p, NV_RECORD_VERSION);
    p = put_u32(p, r->loc.extent);
    p = put_u32(p, HY_NVME_CHUNK);
    p = put_u64(p, r->loc.off);
    p = put_u64(p, r->loc.stored);
    p = put_u64(p, m->bytes);
    p = put_u64(p, m->created_ns);
    p = put_u64(p, m->last_access_ns);
    p = put_u64(p, m->expires_ns);
    p = put_u64(p, m->hits);
    uint64_t flops;
    memcpy(&flops, &m->flops, 8);
    p = put_u64(p, flops);
    p = put_u32(p, m->tokens);
    memcpy(p, m->model, 32), p += 32;
    p = put_u64(p, r->seq);
    assert((size_t)(p - b) == NV_RECORD_FIXED);
    p = put_str(p, m->tenant);
    *p++ = (uint8_t)m->ntags;
    for (uint32_t i = 0; i < m->ntags; i++) p = put_str(p, m->tags[i]);
    p = put_u32(p, r->nchunks);
    for (uint32_t i = 0; i < r->nchunks; i++) p = put_u64(p, r->sums[i]);
    p = put_u64(p, hy_xxh3(b, (size_t)(p - b)));
    *out = b;
    *len = (size_t)(p - b);
    return HY_OK;
}

int nv_record_decode(const hy_key *key, const void *val, size_t len, nv_record *r, hy_err *err)
{
    memset(r, 0, sizeof *r);
    rd c = {val, len, false};
    if (len < NV_RECORD_FIXED + 8)
        return hy_err_set(err, HY_EFORMAT, "record of %zu bytes is shorter than the fixed %u", len,
                          NV_RECORD_FIXED + 8);
    if (hy_xxh3(val, len - 8) != get_le(&(rd){(const uint8_t *)val + len - 8, 8, false}, 8))
        return hy_err_set(err, HY_EFORMAT, "record checksum mismatch");
    c.left = len - 8;
    const uint8_t *magic = take(&c, 4);
    if (memcmp(magic, NV_RECORD_MAGIC, 4) != 0)
        return hy_err_set(err, HY_EFORMAT, "record magic is not " NV_RECORD_MAGIC);
    uint32_t version = (uint32_t)get_le(&c, 4);
    if (version != NV_RECORD_VERSION)
        return hy_err_set(err, HY_EFORMAT, "record version %u; this build reads %u", version,
                          NV_RECORD_VERSION);
    hy_meta *m = &r->meta;
    m->key = *key;
    r->loc.extent = (uint32_t)get_le(&c, 4);
    uint32_t chunk = (uint32_t)get_le(&c, 4);
    r->loc.off = get_le(&c, 8);
    r->loc.stored = get_le(&c, 8);
    m->bytes = get_le(&c, 8);
    m->created_ns = get_le(&c, 8);
    m->last_access_ns = get_le(&c, 8);
    m->expires_ns = get_le(&c, 8);
    m->hits = get_le(&c, 8);
    uint64_t flops = get_le(&c, 8);
    memcpy(&m->flops, &flops, 8);
    m->tokens = (uint32_t)get_le(&c, 4);
    memcpy(m->model, take(&c, 32), 32);
    r->seq = get_le(&c, 8);
    if (chunk != HY_NVME_CHUNK)
        return hy_err_set(err, HY_EFORMAT, "record chunk bytes %u; this build uses %u", chunk,
                          HY_NVME_CHUNK);
    if (m->bytes == 0 || r->loc.stored != nv_stored_bytes(m->bytes) || r->loc.off % HY_PAGE)
        return hy_err_set(err, HY_EFORMAT,
                          "record sizes inconsistent: payload %llu, stored %llu, offset %llu",
                          (unsigned long long)m->bytes, (unsigned long long)r->loc.stored,
                          (unsigned long long)r->loc.off);
    if (get_str(&c, m->tenant, HY_TENANT_MAX, true))
        return hy_err_set(err, HY_EFORMAT, "record tenant malformed or over %d bytes",
                          HY_TENANT_MAX - 1);
    m->ntags = (uint32_t)get_le(&c, 1);
    if (m->ntags > HY_MAX_TAGS)
        return hy_err_set(err, HY_EFORMAT, "record has %u tags, over %d", m->ntags, HY_MAX_TAGS);
    for (uint32_t i = 0; i < m->ntags; i++)
        if (get_str(&c, m->tags[i], HY_TAG_MAX, false))
            return hy_err_set(err, HY_EFORMAT, "record tag %u malformed", i);
    r->nchunks = (uint32_t)get_le(&c, 4);
    if (c.bad || r->nchunks != nv_chunk_count(m->bytes) || c.left != 8ull * r->nchunks)
        return hy_err_set(err, HY_EFORMAT,
                          "record length %zu does not match its %u chunk checksums for %llu bytes",
                          len, r->nchunks, (unsigned long long)m->bytes);
    r->sums = malloc(8ull * r->nchunks);
    if (!r->sums) return hy_err_set(err, HY_ENOMEM, "out of memory decoding a record");
    for (uint32_t i = 0; i < r->nchunks; i++) r->sums[i] = get_le(&c, 8);
    return HY_OK;
}

/* --- the format and floor records ------------------------------------------- */

void nv_format_encode(uint64_t extent_bytes, uint32_t jslots, uint8_t out[NV_FORMAT_BYTES])
{
    uint8_t *p = out;
    memcpy(p, NV_FORMAT_MAGIC, 4), p += 4;
    p = put_u32(p, NV_FORMAT_VERSION);
    p = put_u64(p, extent_bytes);
    p = put_u32(p, HY_PAGE);
    p = put_u32(p, HY_NVME_CHUNK);
    p = put_u32(p, jslots);
    put_u64(p, hy_xxh3(out, 28));
}

int nv_format_decode(const void *val, size_t len, uint64_t *extent_bytes, uint32_t *jslots,
                     hy_err *err)
{
    rd c = {val, len, false};
    if (len < 8)
        return hy_err_set(err, HY_EFORMAT, "format record is %zu bytes, not %u", len,
                          NV_FORMAT_BYTES);
    const uint8_t *magic = take(&c, 4);
    uint32_t version = (uint32_t)get_le(&c, 4);
    if (memcmp(magic, NV_FORMAT_MAGIC, 4) != 0)
        return hy_err_set(err, HY_EFORMAT, "format record magic is not " NV_FORMAT_MAGIC);
    if (version != NV_FORMAT_VERSION)
        return hy_err_set(err, HY_EFORMAT,
                          "store format version %u; this build reads %u (no migration: move the "
                          "directory away and let the tier start empty)",
                          version, NV_FORMAT_VERSION);
    if (len != NV_FORMAT_BYTES)
        return hy_err_set(err, HY_EFORMAT, "format record is %zu bytes, not %u", len,
                          NV_FORMAT_BYTES);
    uint64_t eb = get_le(&c, 8);
    uint32_t page = (uint32_t)get_le(&c, 4), chunk = (uint32_t)get_le(&c, 4);
    uint32_t js = (uint32_t)get_le(&c, 4);
    uint64_t sum = get_le(&c, 8);
    if (sum != hy_xxh3(val, 28))
        return hy_err_set(err, HY_EFORMAT, "format record checksum mismatch");
    if (page != HY_PAGE || chunk != HY_NVME_CHUNK || eb == 0 || eb % HY_PAGE || js == 0 ||
        (uint64_t)js * HY_PAGE >= eb)
        return hy_err_set(err, HY_EFORMAT,
                          "format record: page %u, chunk %u, extent %llu bytes, %u journal "
                          "slots; this build needs page %u, chunk %u, extents a multiple of the "
                          "page and larger than their journal",
                          page, chunk, (unsigned long long)eb, js, HY_PAGE, HY_NVME_CHUNK);
    *extent_bytes = eb;
    *jslots = js;
    return HY_OK;
}

void nv_floor_encode(uint64_t floor, uint8_t out[NV_FLOOR_BYTES])
{
    uint8_t *p = put_u64(out, floor);
    put_u64(p, hy_xxh3(out, 8));
}

int nv_floor_decode(const void *val, size_t len, uint64_t *floor, hy_err *err)
{
    if (len != NV_FLOOR_BYTES ||
        hy_xxh3(val, 8) != get_le(&(rd){(const uint8_t *)val + 8, 8, false}, 8))
        return hy_err_set(err, HY_EFORMAT, "floor record malformed (%zu bytes)", len);
    *floor = get_le(&(rd){val, 8, false}, 8);
    return HY_OK;
}

/* --- journal blocks -------------------------------------------------------------- */

int nv_journal_encode(int kind, uint64_t seq, const hy_key *key, const nv_record *r, uint8_t *block)
{
    uint8_t *rec = NULL;
    size_t rlen = 0;
    if (r && nv_record_encode(r, &rec, &rlen)) return HY_ENOMEM;
    if (NV_JOURNAL_HEAD + rlen + 8 > HY_PAGE) {
        free(rec);
        return HY_ERANGE;
    }
    memset(block, 0, HY_PAGE);
    uint8_t *p = block;
    memcpy(p, NV_JOURNAL_MAGIC, 4), p += 4;
    p = put_u32(p, NV_JOURNAL_VER);
    p = put_u64(p, seq);
    p = put_u32(p, (uint32_t)kind);
    memcpy(p, key->b, HY_KEY_BYTES), p += HY_KEY_BYTES;
    p = put_u32(p, (uint32_t)rlen);
    assert((size_t)(p - block) == NV_JOURNAL_HEAD);
    if (rlen) memcpy(p, rec, rlen), p += rlen;
    put_u64(p, hy_xxh3(block, (size_t)(p - block)));
    free(rec);
    return HY_OK;
}

int nv_journal_decode(const uint8_t *block, nv_jrec *out, hy_err *err)
{
    memset(out, 0, sizeof *out);
    rd c = {block, HY_PAGE, false};
    const uint8_t *magic = take(&c, 4);
    uint32_t version = (uint32_t)get_le(&c, 4);
    uint64_t seq = get_le(&c, 8);
    uint32_t kind = (uint32_t)get_le(&c, 4);
    const uint8_t *key = take(&c, HY_KEY_BYTES);
    uint32_t rlen = (uint32_t)get_le(&c, 4);
    if (memcmp(magic, NV_JOURNAL_MAGIC, 4) != 0 || version != NV_JOURNAL_VER ||
        rlen > HY_PAGE - NV_JOURNAL_HEAD - 8 ||
        hy_xxh3(block, NV_JOURNAL_HEAD + rlen) !=
            get_le(&(rd){block + NV_JOURNAL_HEAD + rlen, 8, false}, 8))
        return HY_ENOTFOUND;
    out->seq = seq;
    memcpy(out->key.b, key, HY_KEY_BYTES);
    if (kind == NV_JTOMB && rlen == 0) {
        out->kind = NV_JTOMB;
        return HY_OK;
    }
    if (kind != NV_JPUT || seq == 0)
        return hy_err_set(err, HY_EFORMAT, "journal block of kind %u, %u record bytes, number %llu",
                          kind, rlen, (unsigned long long)seq);
    out->kind = NV_JPUT;
    int rc = nv_record_decode(&out->key, block + NV_JOURNAL_HEAD, rlen, &out->rec, err);
    if (rc == HY_OK && out->rec.seq != seq)
        rc = hy_err_set(err, HY_EFORMAT, "journal block number %llu holds a record numbered %llu",
                        (unsigned long long)seq, (unsigned long long)out->rec.seq);
    if (rc) {
        free(out->rec.sums);
        out->rec.sums = NULL;
    }
    return rc;
}
