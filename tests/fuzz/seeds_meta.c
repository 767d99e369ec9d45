/*
 * fuzz_meta_seeds DIR: writes fuzz_meta's seed corpus: valid values of each
 * record kind the nvme tier decodes, encoded by the tier's own encoders,
 * each prefixed with fuzz_meta's selector byte (checksum repair on). The
 * committed corpus (tests/fuzz/corpus/fuzz_meta) is this program's output;
 * rerun it after a change to docs/store-format.md.
 */
#include "fuzz_util.h"
#include "nvme_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_dir;
static int g_failed;

static void seed(const char *name, int kind, const void *v, size_t len)
{
    unsigned char *b = malloc(len + 1);
    if (!b) {
        g_failed = 1;
        return;
    }
    if (kind == 3) /* fuzz_meta zero-pads a journal block to HY_PAGE */
        while (len > 0 && ((const unsigned char *)v)[len - 1] == 0) len--;
    b[0] = (unsigned char)(kind | 4);
    memcpy(b + 1, v, len);
    g_failed |= fuzz_write_seed(g_dir, name, b, len + 1);
    free(b);
}

/* A record of `bytes` payload bytes with `ntags` tags. */
static void make_record(nv_record *r, uint64_t bytes, uint32_t ntags, uint64_t seq)
{
    memset(r, 0, sizeof *r);
    hy_meta *m = &r->meta;
    memset(m->key.b, 0x5a, sizeof m->key.b);
    snprintf(m->tenant, sizeof m->tenant, "acme");
    for (int i = 0; i < 32; i++) m->model[i] = (uint8_t)(i * 7);
    m->ntags = ntags;
    for (uint32_t i = 0; i < ntags; i++) snprintf(m->tags[i], sizeof m->tags[i], "doc-%u", i);
    m->tokens = 20, m->flops = 3.25e6, m->bytes = bytes;
    m->created_ns = 1700000000000000000ull, m->last_access_ns = m->created_ns + 5;
    m->expires_ns = 0, m->hits = 9;
    r->seq = seq;
    r->loc = (nv_loc){3, 16 * (uint64_t)HY_PAGE, nv_stored_bytes(bytes)};
    r->nchunks = nv_chunk_count(bytes);
    r->sums = calloc(r->nchunks, 8);
    for (uint32_t i = 0; r->sums && i < r->nchunks; i++) r->sums[i] = 0x1234567800000000ull + i;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_meta_seeds DIR\n");
        return 2;
    }
    g_dir = argv[1];
    nv_record r;
    uint8_t *b;
    size_t n;
    /* one chunk, two tags; three chunks, no tags and no tenant */
    make_record(&r, 30000, 2, 41);
    if (!r.sums || nv_record_encode(&r, &b, &n)) return 1;
    seed("record-1chunk", 0, b, n);
    free(b);
    uint8_t *block = malloc(HY_PAGE);
    if (!block || nv_journal_encode(NV_JPUT, 41, &r.meta.key, &r, block)) return 1;
    seed("journal-put", 3, block, HY_PAGE);
    free(r.sums);
    make_record(&r, 3 * (uint64_t)HY_NVME_CHUNK - 5, 0, 42);
    r.meta.tenant[0] = '\0';
    if (!r.sums || nv_record_encode(&r, &b, &n)) return 1;
    seed("record-3chunks", 0, b, n);
    free(b);
    if (nv_journal_encode(NV_JTOMB, 43, &r.meta.key, NULL, block)) return 1;
    seed("journal-tombstone", 3, block, HY_PAGE);
    free(r.sums);
    free(block);

    uint8_t f[NV_FORMAT_BYTES], fl[NV_FLOOR_BYTES];
    nv_format_encode(64ull << 20, nv_journal_slots_for(64ull << 20), f);
    seed("format", 1, f, sizeof f);
    nv_floor_encode(40, fl);
    seed("floor", 2, fl, sizeof fl);
    return g_failed;
}
