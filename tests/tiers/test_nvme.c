/*
 * The persistent tier (tiers/nvme_internal.h) on a real directory: payloads come back
 * byte-identical, space is reused, the catalog survives a reopen, damaged
 * bytes or files are detected and dropped (never served), a full tier and
 * injected I/O errors fail cleanly, one directory is opened once, and four
 * threads mixing puts, gets and removes never read a wrong byte.
 */
#include "nvme_fixture.h"
#include "nvme_internal.h" /* the journal's size */

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

/* --- cases ----------------------------------------------------------------------- */

static void test_round_trip(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 64 * MiB, 4);
    const uint64_t sizes[] = {1, 4096, 4097, 3 * MiB + 123, MiB, 16 * MiB};
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(put(n, 100 + i, sizes[i]), 0);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(check(n, 100 + i, sizes[i]), 0);
    hy_nvme_loc l;
    hy_key k1 = key_of(100);
    CU_ASSERT_EQUAL(hy_nvme_locate(n, &k1, &l), 0);
    CU_ASSERT_EQUAL(l.stored, HY_PAGE); /* one byte takes a page */
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.entries, 6);
    uint64_t live = 0, alloc = 0;
    for (int i = 0; i < 6; i++) live += sizes[i], alloc += padded(sizes[i]);
    CU_ASSERT_EQUAL(s.live_bytes, live);
    CU_ASSERT_EQUAL(s.allocated_bytes, alloc);
    CU_ASSERT_EQUAL(s.writes, 6);
    CU_ASSERT_EQUAL(s.reads, 6);

    /* refusals: a short buffer, unaligned memory, an unknown key, an oversize payload */
    hy_err e = {0};
    hy_key big = key_of(105);
    uint8_t *buf = aligned_alloc(HY_PAGE, 16 * MiB);
    CU_ASSERT_EQUAL(hy_nvme_get(n, &big, buf, 8 * MiB, NULL, &e), HY_ERANGE);
    CU_ASSERT(strstr(e.msg, "smaller") != NULL);
    CU_ASSERT_EQUAL(hy_nvme_get(n, &big, buf + 64, 8 * MiB, NULL, &e), HY_EINVAL);
    hy_key none = key_of(999);
    CU_ASSERT_EQUAL(hy_nvme_get(n, &none, buf, 16 * MiB, NULL, &e), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(hy_nvme_remove(n, &none, &e), HY_ENOTFOUND);
    hy_meta m = meta_of(7, 64);
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, buf + 64, &e), HY_EINVAL);
    m.bytes = 0;
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, buf, &e), HY_EINVAL);
    m.bytes = 64 * MiB + 1;
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, buf, &e), HY_ERANGE);
    CU_ASSERT(strstr(e.msg, "extent") != NULL);
    free(buf);
    hy_nvme_close(n);
}

static void test_throughput_16mib(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 64 * MiB, 4);
    const int count = 8;
    const uint64_t bytes = 16 * MiB;
    uint8_t *p = payload(bytes, 1), *buf = aligned_alloc(HY_PAGE, bytes);
    hy_err e = {0};
    double t0 = hy_now_s();
    for (int i = 0; i < count; i++) {
        hy_meta m = meta_of(200 + i, bytes);
        CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, &e), 0);
    }
    double t1 = hy_now_s();
    for (int i = 0; i < count; i++) {
        hy_key k = key_of(200 + i);
        CU_ASSERT_EQUAL(hy_nvme_get(n, &k, buf, bytes, NULL, &e), 0);
        CU_ASSERT(memcmp(buf, p, bytes) == 0);
    }
    double t2 = hy_now_s();
    printf("\n    16 MiB payloads: put %.0f MB/s, get %.0f MB/s (incl. checksums)",
           count * bytes / 1e6 / (t1 - t0), count * bytes / 1e6 / (t2 - t1));
    free(p), free(buf);
    hy_nvme_close(n);
}

static void test_replace(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 16 * MiB, 4);
    CU_ASSERT_EQUAL(put(n, 1, 3 * MiB), 0);
    /* the same key, other bytes and size: put seed 1's key with seed 2's payload */
    hy_meta m = meta_of(1, 5000);
    uint8_t *p = payload(5000, 2), *buf = aligned_alloc(HY_PAGE, 3 * MiB);
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, &e), 0);
    hy_meta got;
    CU_ASSERT_EQUAL(hy_nvme_get(n, &m.key, buf, 3 * MiB, &got, &e), 0);
    CU_ASSERT_EQUAL(got.bytes, 5000);
    CU_ASSERT(memcmp(buf, p, 5000) == 0);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.entries, 1);
    CU_ASSERT_EQUAL(s.live_bytes, 5000);
    CU_ASSERT_EQUAL(s.allocated_bytes, padded(5000)); /* the old bytes were freed */
    free(p), free(buf);
    hy_nvme_close(n);
}

/* The bytes at the head of each extent that its journal takes. */
static uint64_t journal_bytes(uint64_t extent)
{
    return (uint64_t)nv_journal_slots_for(extent) * HY_PAGE;
}

static void test_remove_reuses_space(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 16 * MiB, 4);
    const uint64_t J = journal_bytes(16 * MiB), q = (16 * MiB - J) / 4; /* four fill it */
    CU_ASSERT_EQUAL(q % HY_PAGE, 0);
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(put(n, 10 + i, q), 0);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.extent_bytes_total, 16 * MiB);
    CU_ASSERT_DOUBLE_EQUAL(s.space_amplification, 16.0 * MiB / (4 * q), 1e-9);
    hy_err e = {0};
    hy_key k1 = key_of(11), k2 = key_of(12);
    CU_ASSERT_EQUAL(hy_nvme_remove(n, &k1, &e), 0);
    CU_ASSERT_EQUAL(hy_nvme_remove(n, &k2, &e), 0);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k1, NULL), HY_ENOTFOUND);
    s = stats(n);
    CU_ASSERT_EQUAL(s.entries, 2);
    CU_ASSERT_EQUAL(s.allocated_bytes, 2 * q);
    CU_ASSERT_DOUBLE_EQUAL(s.space_amplification, 16.0 * MiB / (2 * q), 1e-9);
    /* one payload of 2q fits only in the two freed runs merged into one */
    CU_ASSERT_EQUAL(put(n, 20, 2 * q), 0);
    hy_nvme_loc l;
    hy_key k20 = key_of(20);
    CU_ASSERT_EQUAL(hy_nvme_locate(n, &k20, &l), 0);
    CU_ASSERT_EQUAL(l.extent, 0);
    CU_ASSERT_EQUAL(l.offset, J + q);
    s = stats(n);
    CU_ASSERT_EQUAL(s.extent_bytes_total, 16 * MiB);
    CU_ASSERT_DOUBLE_EQUAL(s.space_amplification, 16.0 * MiB / (4 * q), 1e-9);
    CU_ASSERT_EQUAL(check(n, 10, q), 0);
    CU_ASSERT_EQUAL(check(n, 13, q), 0);
    CU_ASSERT_EQUAL(check(n, 20, 2 * q), 0);
    hy_nvme_close(n);
}

static void test_persistence(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 8 * MiB, 8);
    const uint64_t sizes[] = {100, 2 * MiB + 1, 7 * MiB, 4096, MiB};
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(put(n, 30 + i, sizes[i]), 0);
    CU_ASSERT_EQUAL(check(n, 31, sizes[1]), 0);
    CU_ASSERT_EQUAL(check(n, 31, sizes[1]), 0);
    hy_meta before;
    hy_key k31 = key_of(31);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k31, &before), 0);
    CU_ASSERT_EQUAL(before.hits, 2);
    hy_nvme_stats s0 = stats(n);
    hy_nvme_close(n);

    n = open_tier(dir, 32 * MiB, 8); /* another extent size: the directory keeps its own */
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.entries, 5);
    CU_ASSERT_EQUAL(s.dropped_on_open, 0);
    CU_ASSERT_EQUAL(s.live_bytes, s0.live_bytes);
    CU_ASSERT_EQUAL(s.allocated_bytes, s0.allocated_bytes);
    CU_ASSERT_EQUAL(s.extent_bytes_total, s0.extent_bytes_total);
    hy_meta after;
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k31, &after), 0);
    CU_ASSERT_EQUAL(after.hits, 2); /* saved at close */
    CU_ASSERT_EQUAL(after.last_access_ns, before.last_access_ns);
    CU_ASSERT_EQUAL(after.created_ns, before.created_ns);
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(check(n, 30 + i, sizes[i]), 0);
    /* the free space was rebuilt: a put fills a hole rather than a new extent */
    uint64_t total = s.extent_bytes_total;
    CU_ASSERT_EQUAL(put(n, 40, 4096), 0);
    CU_ASSERT_EQUAL(stats(n).extent_bytes_total, total);
    hy_nvme_close(n);
}

static void test_flipped_byte(void)
{
    char dir[128], path[256];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 16 * MiB, 4);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(put(n, 50 + i, 3 * MiB), 0);
    hy_key k = key_of(51);
    hy_nvme_loc l;
    CU_ASSERT_EQUAL_FATAL(hy_nvme_locate(n, &k, &l), 0);
    extent_file(dir, l.extent, path, sizeof path);
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    uint8_t b;
    off_t at = (off_t)(l.offset + 2 * MiB + 77); /* inside the third chunk */
    CU_ASSERT_EQUAL(pread(fd, &b, 1, at), 1);
    b ^= 0x10;
    CU_ASSERT_EQUAL(pwrite(fd, &b, 1, at), 1);
    fsync(fd), close(fd);

    hy_err e = {0};
    uint8_t *buf = aligned_alloc(HY_PAGE, 3 * MiB);
    CU_ASSERT_EQUAL(hy_nvme_get(n, &k, buf, 3 * MiB, NULL, &e), HY_EFORMAT);
    CU_ASSERT(strstr(e.msg, "chunk 2") != NULL);
    CU_ASSERT(strstr(e.msg, "extent-") != NULL);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(hy_nvme_get(n, &k, buf, 3 * MiB, NULL, &e), HY_ENOTFOUND);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.checksum_failures, 1);
    CU_ASSERT_EQUAL(s.entries, 2);
    CU_ASSERT_EQUAL(s.allocated_bytes, 6 * MiB);
    CU_ASSERT_EQUAL(check(n, 50, 3 * MiB), 0);
    CU_ASSERT_EQUAL(check(n, 52, 3 * MiB), 0);
    hy_nvme_close(n);
    n = open_tier(dir, 16 * MiB, 4); /* the record is gone for good */
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(stats(n).entries, 2);
    CU_ASSERT_EQUAL(stats(n).dropped_on_open, 0);
    free(buf);
    hy_nvme_close(n);
}

/* Flips one byte at `at` bytes into key k's payload on disk. */
static void flip_payload_byte(const char *dir, hy_nvme *n, const hy_key *k, uint64_t at)
{
    char path[256];
    hy_nvme_loc l;
    CU_ASSERT_EQUAL_FATAL(hy_nvme_locate(n, k, &l), 0);
    extent_file(dir, l.extent, path, sizeof path);
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    uint8_t b;
    CU_ASSERT_EQUAL(pread(fd, &b, 1, (off_t)(l.offset + at)), 1);
    b ^= 0x01;
    CU_ASSERT_EQUAL(pwrite(fd, &b, 1, (off_t)(l.offset + at)), 1);
    fsync(fd), close(fd);
}

/* Gets verify each chunk while later requests are still in flight: damage in
 * the first chunk (found while most of the entry is still being read) and in
 * the last, partial chunk (found after the final completion) each fail the
 * get naming that chunk, and the transfer leaves nothing in flight: the
 * entries around them read back intact afterwards. The entries span more
 * than NV_READ_AHEAD, so their reads are cut into several windows. */
static void test_first_and_last_chunk(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 64 * MiB, 4);
    const uint64_t bytes = NV_READ_AHEAD + 12 * MiB + 123; /* last chunk: 123 bytes */
    const uint32_t last = nv_chunk_count(bytes) - 1;
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(put(n, 60 + i, bytes), 0);
    hy_key first_k = key_of(60), last_k = key_of(61);
    flip_payload_byte(dir, n, &first_k, 5);
    flip_payload_byte(dir, n, &last_k, (uint64_t)last * HY_NVME_CHUNK + 100);

    hy_err e = {0};
    char want[32];
    uint8_t *buf = aligned_alloc(HY_PAGE, padded(bytes));
    CU_ASSERT_EQUAL(hy_nvme_get(n, &first_k, buf, padded(bytes), NULL, &e), HY_EFORMAT);
    CU_ASSERT(strstr(e.msg, "chunk 0 ") != NULL);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &first_k, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(check(n, 62, bytes), 0);
    CU_ASSERT_EQUAL(hy_nvme_get(n, &last_k, buf, padded(bytes), NULL, &e), HY_EFORMAT);
    snprintf(want, sizeof want, "chunk %u ", last);
    CU_ASSERT(strstr(e.msg, want) != NULL);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &last_k, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(check(n, 62, bytes), 0);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.checksum_failures, 2);
    CU_ASSERT_EQUAL(s.entries, 1);
    free(buf);
    hy_nvme_close(n);
}

/* What a reporting read saw: every prefix it was given, and whether the
 * bytes of each were already in the buffer when it was reported. */
typedef struct prog_log {
    const uint8_t *buf, *ref;
    uint64_t prefixes[256];
    uint32_t n;
    bool stale;       /* a reported prefix's bytes were not all read yet */
    bool ahead;       /* bytes past the read-ahead window were read already */
    uint64_t len;     /* of the read */
    uint64_t fail_at; /* fail once the prefix reaches this; 0: never */
} prog_log;

static int prog_record(void *ctx, uint64_t prefix, hy_err *err)
{
    prog_log *l = ctx;
    if (l->n < 256) l->prefixes[l->n] = prefix;
    l->n++;
    if (memcmp(l->buf, l->ref, prefix) != 0) l->stale = true;
    /* Requests start below prefix + NV_READ_AHEAD and span one piece at most,
     * and none completes between the refill and this report: the buffer past
     * that still holds its fill. */
    for (uint64_t i = prefix + NV_READ_AHEAD + NV_IO_PIECE; i < l->len; i++)
        if (l->buf[i] != 0xee) {
            l->ahead = true;
            break;
        }
    if (l->fail_at && prefix >= l->fail_at) return hy_err_set(err, HY_EFORMAT, "stop here");
    return HY_OK;
}

/* nv_io_read_progress: prefixes grow in whole pages up to the length, each
 * one's bytes already read; no request starts NV_READ_AHEAD or more past the
 * completed prefix, so a long read reports many times; a failing callback
 * ends the read with its code and message and is not called again. */
static void test_read_progress(void)
{
    char dir[128], path[256];
    case_dir(dir, sizeof dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/raw", dir);
    const uint64_t len = 4 * NV_READ_AHEAD + 3 * HY_PAGE;
    uint8_t *ref = payload(len, 77), *buf = aligned_alloc(HY_PAGE, len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(pwrite(fd, ref, len, 0), (ssize_t)len);
    fsync(fd), close(fd);
    fd = open(path, O_RDONLY | O_DIRECT);
    CU_ASSERT_FATAL(fd >= 0);
    nv_io *io = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(nv_io_new(32, &io, &e), 0);

    memset(buf, 0xee, len);
    prog_log l = {.buf = buf, .ref = ref, .len = len};
    const nv_progress p = {prog_record, &l, 0, 0, 0};
    CU_ASSERT_EQUAL(nv_io_read_progress(io, fd, buf, 0, len, &p, &e), 0);
    CU_ASSERT(!l.stale);
    CU_ASSERT(!l.ahead);
    CU_ASSERT(l.n >= len / (NV_READ_AHEAD + NV_IO_PIECE));
    CU_ASSERT(l.n <= 256);
    for (uint32_t i = 0; i < l.n && i < 256; i++) {
        CU_ASSERT(l.prefixes[i] % HY_PAGE == 0);
        CU_ASSERT(i == 0 || l.prefixes[i] > l.prefixes[i - 1]);
    }
    CU_ASSERT_EQUAL(l.prefixes[HY_MIN(l.n, 256u) - 1], len);
    CU_ASSERT_EQUAL(memcmp(buf, ref, len), 0);

    memset(buf, 0xee, len);
    l = (prog_log){.buf = buf, .ref = ref, .len = len, .fail_at = 1};
    CU_ASSERT_EQUAL(nv_io_read_progress(io, fd, buf, 0, len, &p, &e), HY_EFORMAT);
    CU_ASSERT(strstr(e.msg, "stop here") != NULL);
    CU_ASSERT_EQUAL(l.n, 1);
    CU_ASSERT(!l.stale);

    nv_io_free(io);
    close(fd);
    unlink(path);
    free(ref), free(buf);
}

static void test_truncated_extent(void)
{
    char dir[128], path[256];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 8 * MiB, 8);
    /* three 2 MiB payloads share one extent; two 6 MiB ones take one each */
    const uint64_t sizes[] = {2 * MiB, 2 * MiB, 2 * MiB, 6 * MiB, 6 * MiB};
    hy_nvme_loc l[5];
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(put(n, 60 + i, sizes[i]), 0);
        hy_key k = key_of(60 + i);
        CU_ASSERT_EQUAL(hy_nvme_locate(n, &k, &l[i]), 0);
    }
    hy_nvme_close(n);
    CU_ASSERT_EQUAL(l[0].extent, l[1].extent);
    CU_ASSERT_NOT_EQUAL(l[3].extent, l[4].extent);
    CU_ASSERT_NOT_EQUAL(l[1].extent, l[4].extent);
    /* cut the shared extent inside entry 1; delete entry 4's extent */
    uint64_t cut = l[1].offset + 4096;
    extent_file(dir, l[1].extent, path, sizeof path);
    CU_ASSERT_EQUAL(truncate(path, (off_t)cut), 0);
    extent_file(dir, l[4].extent, path, sizeof path);
    CU_ASSERT_EQUAL(unlink(path), 0);
    int lost[5] = {0}, nlost = 0;
    for (int i = 0; i < 5; i++) {
        lost[i] = (l[i].extent == l[1].extent && l[i].offset + l[i].stored > cut) ||
                  l[i].extent == l[4].extent;
        nlost += lost[i];
    }
    CU_ASSERT(nlost >= 2);

    n = open_tier(dir, 8 * MiB, 8);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.dropped_on_open, (uint64_t)nlost);
    CU_ASSERT_EQUAL(s.entries, (uint64_t)(5 - nlost));
    for (int i = 0; i < 5; i++) {
        hy_key k = key_of(60 + i);
        if (lost[i]) {
            CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k, NULL), HY_ENOTFOUND);
        } else {
            CU_ASSERT_EQUAL(check(n, 60 + i, sizes[i]), 0);
        }
    }
    /* the truncated extent was extended again: its freed space takes new puts */
    CU_ASSERT_EQUAL(put(n, 70, 6 * MiB), 0);
    CU_ASSERT_EQUAL(check(n, 70, 6 * MiB), 0);
    hy_nvme_close(n);
    n = open_tier(dir, 8 * MiB, 8);
    CU_ASSERT_EQUAL(stats(n).dropped_on_open, 0); /* the bad records were deleted */
    CU_ASSERT_EQUAL(stats(n).entries, (uint64_t)(6 - nlost));
    hy_nvme_close(n);
}

static void test_bad_record_dropped(void)
{
    char dir[128], cat[160];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 8 * MiB, 2);
    CU_ASSERT_EQUAL(put(n, 80, 5000), 0);
    CU_ASSERT_EQUAL(put(n, 81, 5000), 0);
    hy_nvme_close(n);
    /* damage one record in the catalog itself: a flipped byte, caught by its checksum */
    snprintf(cat, sizeof cat, "%s/catalog", dir);
    rocksdb_options_t *o = rocksdb_options_create();
    char *err = NULL;
    rocksdb_t *db = rocksdb_open(o, cat, &err);
    CU_ASSERT_PTR_NULL_FATAL(err);
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    hy_key k = key_of(81);
    size_t len = 0;
    char *v = rocksdb_get(db, ro, (const char *)k.b, HY_KEY_BYTES, &len, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    v[20] ^= 1;
    rocksdb_put(db, wo, (const char *)k.b, HY_KEY_BYTES, v, len, &err);
    CU_ASSERT_PTR_NULL(err);
    rocksdb_free(v);
    rocksdb_readoptions_destroy(ro), rocksdb_writeoptions_destroy(wo);
    rocksdb_close(db), rocksdb_options_destroy(o);

    n = open_tier(dir, 8 * MiB, 2);
    CU_ASSERT_EQUAL(stats(n).dropped_on_open, 1);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(check(n, 80, 5000), 0);
    hy_nvme_close(n);
}

static void test_full(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 4 * MiB, 2);
    const uint64_t q = (4 * MiB - journal_bytes(4 * MiB)) / 2; /* two fill an extent */
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(put(n, 90 + i, q), 0);
    hy_meta m = meta_of(94, q);
    uint8_t *p = payload(q, 94);
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, &e), HY_ENOMEM);
    CU_ASSERT(strstr(e.msg, "full") != NULL);
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, NULL), HY_ENOMEM); /* the code without a message */
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &m.key, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(stats(n).allocated_bytes, 4 * q);
    hy_key k = key_of(92);
    CU_ASSERT_EQUAL(hy_nvme_remove(n, &k, &e), 0);
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, &e), 0);
    CU_ASSERT_EQUAL(check(n, 94, q), 0);
    CU_ASSERT_EQUAL(stats(n).extent_bytes_total, 8 * MiB);
    free(p);
    hy_nvme_close(n);
}

static void test_injected_write_error(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 32 * MiB, 2);
    CU_ASSERT_EQUAL(put(n, 100, 3 * MiB), 0);
    hy_nvme_stats s0 = stats(n);
    hy_err e = {0};
    /* a new key, 9 MiB: five requests, the second completion fails */
    hy_nvme_inject_io_error(n, 1, 2);
    hy_meta m = meta_of(101, 9 * MiB);
    uint8_t *p = payload(9 * MiB, 101);
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, &e), HY_EIO);
    CU_ASSERT(strstr(e.msg, "write") != NULL && strstr(e.msg, "extent-") != NULL);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &m.key, NULL), HY_ENOTFOUND);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.entries, s0.entries);
    CU_ASSERT_EQUAL(s.allocated_bytes, s0.allocated_bytes);
    CU_ASSERT_EQUAL(s.writes, s0.writes);
    /* a replace that fails leaves the old bytes in place */
    hy_nvme_inject_io_error(n, 1, 1);
    hy_meta r = meta_of(100, 4096);
    CU_ASSERT_EQUAL(hy_nvme_put(n, &r, p, &e), HY_EIO);
    CU_ASSERT_EQUAL(check(n, 100, 3 * MiB), 0);
    /* the tier keeps working */
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, &e), 0);
    CU_ASSERT_EQUAL(check(n, 101, 9 * MiB), 0);
    free(p);
    hy_nvme_close(n);
}

static void test_injected_read_error(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 16 * MiB, 2);
    CU_ASSERT_EQUAL(put(n, 110, 5 * MiB), 0);
    hy_nvme_inject_io_error(n, 0, 1);
    hy_key k = key_of(110);
    uint8_t *buf = aligned_alloc(HY_PAGE, 5 * MiB);
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_nvme_get(n, &k, buf, 5 * MiB, NULL, &e), HY_EIO);
    CU_ASSERT(strstr(e.msg, "read") != NULL && strstr(e.msg, "extent-") != NULL);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k, NULL), 0); /* an I/O error is not corruption */
    CU_ASSERT_EQUAL(stats(n).checksum_failures, 0);
    CU_ASSERT_EQUAL(check(n, 110, 5 * MiB), 0);
    free(buf);
    hy_nvme_close(n);
}

static void test_second_open(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 4 * MiB, 2), *m = NULL;
    hy_err e = {0};
    CU_ASSERT_NOT_EQUAL(hy_nvme_open(dir, NULL, &m, &e), 0);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT(strstr(e.msg, "LOCK") != NULL && strstr(e.msg, "already open") != NULL);
    hy_nvme_close(n);
    n = open_tier(dir, 4 * MiB, 2);
    hy_nvme_close(n);
}

static void test_missing_parents_created(void)
{
    char dir[160], deep[200];
    case_dir(dir, sizeof dir);
    snprintf(deep, sizeof deep, "%s/var/nvme", dir); /* neither var/ nor nvme/ exists */
    hy_nvme *n = open_tier(deep, 4 * MiB, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    hy_nvme_close(n);
    /* a path through a regular file: a clear error naming the directory */
    char file[220], bad[240];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
    snprintf(bad, sizeof bad, "%s/sub", file);
    hy_nvme *m = NULL;
    hy_err e = {0};
    CU_ASSERT_NOT_EQUAL(hy_nvme_open(bad, NULL, &m, &e), 0);
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT(strstr(e.msg, "creating directory") != NULL && strstr(e.msg, bad) != NULL);
}

typedef struct listing {
    hy_key keys[32];
    int n, stop_after;
} listing;

static int collect(void *ctx, const hy_meta *m)
{
    listing *l = ctx;
    l->keys[l->n++] = m->key;
    return l->n == l->stop_after ? 7 : 0;
}

static void test_foreach(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 4 * MiB, 2);
    for (int i = 0; i < 20; i++) CU_ASSERT_EQUAL(put(n, 120 + i, 1000 + i), 0);
    listing l = {.n = 0};
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_nvme_foreach(n, collect, &l, &e), 0);
    CU_ASSERT_EQUAL(l.n, 20);
    for (int i = 1; i < l.n; i++) CU_ASSERT(memcmp(l.keys[i - 1].b, l.keys[i].b, 32) < 0);
    for (int i = 0; i < 20; i++) {
        hy_key k = key_of(120 + i);
        int found = 0;
        for (int j = 0; j < l.n; j++) found += memcmp(k.b, l.keys[j].b, 32) == 0;
        CU_ASSERT_EQUAL(found, 1);
    }
    l = (listing){.stop_after = 3};
    CU_ASSERT_EQUAL(hy_nvme_foreach(n, collect, &l, &e), 7);
    CU_ASSERT_EQUAL(l.n, 3);
    hy_nvme_close(n);
}

/* --- four threads -------------------------------------------------------------------- */

#define NSHARED  6
#define NPRIVATE 6
#define MAXBYTES (5 * MiB)

typedef struct worker {
    hy_nvme *n;
    int id;
    double until;
    atomic_int *bad;
    long ops, gets_ok;
} worker;

/* Key seeds: shared keys 0..NSHARED-1; thread t's private keys after them. */
static uint64_t seed_shared(int i)
{
    return 1000 + (uint64_t)i;
}

static uint64_t seed_private(int t, int i)
{
    return 2000 + (uint64_t)t * 100 + (uint64_t)i;
}

/* The bytes of version v of a key: any reader can check any version it gets
 * (meta.tokens carries v). */
static uint64_t content_seed(uint64_t key_seed, uint32_t v)
{
    return key_seed * 1000003ull + v;
}

/* 1: found and verified; 0: absent as allowed; -1: wrong. want_v: the
 * version expected, -1 absent, -2 any or none. */
static int verify_get(hy_nvme *n, uint64_t key_seed, uint8_t *buf, int64_t want_v)
{
    hy_key k = key_of(key_seed);
    hy_meta m;
    hy_err e = {0};
    int rc = hy_nvme_get(n, &k, buf, MAXBYTES, &m, &e);
    if (rc == HY_ENOTFOUND) return want_v < 0 ? 0 : -1;
    if (rc != 0) {
        fprintf(stderr, "\n  get: %s\n", e.msg);
        return -1;
    }
    if (want_v == -1 || (want_v >= 0 && m.tokens != (uint32_t)want_v)) return -1;
    uint8_t *ref = payload(m.bytes, content_seed(key_seed, m.tokens));
    int same = memcmp(ref, buf, m.bytes) == 0 && memcmp(m.key.b, k.b, 32) == 0;
    free(ref);
    return same ? 1 : -1;
}

static void *work(void *arg)
{
    worker *w = arg;
    hy_rng r;
    hy_rng_seed(&r, 77 + (uint64_t)w->id);
    uint8_t *buf = aligned_alloc(HY_PAGE, MAXBYTES);
    int64_t mine[NPRIVATE]; /* version of each private key, -1: absent */
    for (int i = 0; i < NPRIVATE; i++) mine[i] = -1;
    while (hy_now_s() < w->until) {
        bool shared = hy_rng_next(&r) % 2;
        int i = (int)(hy_rng_next(&r) % NPRIVATE);
        uint64_t ks = shared ? seed_shared(i % NSHARED) : seed_private(w->id, i);
        uint64_t op = hy_rng_next(&r) % 100;
        hy_err e = {0};
        if (op < 45) {
            uint32_t v = (uint32_t)(hy_rng_next(&r) % 1000000);
            uint64_t bytes = 1 + hy_rng_next(&r) % MAXBYTES;
            hy_meta m = {.key = key_of(ks), .bytes = bytes, .tokens = v};
            uint8_t *p = payload(bytes, content_seed(ks, v));
            if (hy_nvme_put(w->n, &m, p, &e) != 0) {
                fprintf(stderr, "\n  put: %s\n", e.msg);
                atomic_fetch_add(w->bad, 1);
            } else if (!shared) {
                mine[i] = v;
            }
            free(p);
        } else if (op < 90) {
            int rc = verify_get(w->n, ks, buf, shared ? -2 : mine[i]);
            if (rc < 0) atomic_fetch_add(w->bad, 1);
            w->gets_ok += rc > 0;
        } else {
            hy_key k = key_of(ks);
            int rc = hy_nvme_remove(w->n, &k, &e);
            if (rc != 0 && !(rc == HY_ENOTFOUND && (shared || mine[i] < 0)))
                atomic_fetch_add(w->bad, 1);
            if (!shared) mine[i] = -1;
        }
        w->ops++;
    }
    free(buf);
    return NULL;
}

static int verify_entry(void *ctx, const hy_meta *m)
{
    hy_nvme *n = ctx;
    uint8_t *buf = aligned_alloc(HY_PAGE, MAXBYTES);
    uint64_t seeds[NSHARED + 4 * NPRIVATE];
    int ns = 0;
    for (int i = 0; i < NSHARED; i++) seeds[ns++] = seed_shared(i);
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < NPRIVATE; i++) seeds[ns++] = seed_private(t, i);
    int rc = -1;
    for (int i = 0; i < ns; i++) {
        hy_key k = key_of(seeds[i]);
        if (memcmp(k.b, m->key.b, 32) == 0) rc = verify_get(n, seeds[i], buf, m->tokens) > 0;
    }
    free(buf);
    return rc == 1 ? 0 : 1;
}

static void test_four_threads(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, 32 * MiB, 16);
    atomic_int bad = 0;
    worker w[4];
    pthread_t th[4];
    double until = hy_now_s() + 3.0;
    for (int t = 0; t < 4; t++) {
        w[t] = (worker){.n = n, .id = t, .until = until, .bad = &bad};
        pthread_create(&th[t], NULL, work, &w[t]);
    }
    long ops = 0, gets = 0;
    for (int t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        ops += w[t].ops, gets += w[t].gets_ok;
    }
    hy_nvme_stats s = stats(n);
    printf("\n    4 threads, 3 s: %ld operations, %ld verified reads, %llu entries, amp %.2f", ops,
           gets, (unsigned long long)s.entries, s.space_amplification);
    CU_ASSERT_EQUAL(atomic_load(&bad), 0);
    CU_ASSERT(gets > 0);
    CU_ASSERT_EQUAL(s.checksum_failures, 0);
    uint64_t entries = s.entries, live = s.live_bytes;
    hy_nvme_close(n);
    /* everything left is intact after a reopen */
    n = open_tier(dir, 32 * MiB, 16);
    s = stats(n);
    CU_ASSERT_EQUAL(s.entries, entries);
    CU_ASSERT_EQUAL(s.live_bytes, live);
    CU_ASSERT_EQUAL(s.dropped_on_open, 0);
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_nvme_foreach(n, verify_entry, n, &e), 0);
    hy_nvme_close(n);
}

/* io_uring instances of this process (its anon_inode:[io_uring] descriptors). */
static int count_rings(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        char target[64];
        const ssize_t k = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
        if (k > 0) target[k] = '\0', n += strcmp(target, "anon_inode:[io_uring]") == 0;
    }
    closedir(d);
    return n;
}

typedef struct reader {
    hy_nvme *n;
    int id, bad;
} reader;

static void *read_loop(void *arg)
{
    reader *r = arg;
    for (int i = 0; i < 20; i++) r->bad += check(r->n, (uint64_t)(r->id % 8), 256 << 10) != 0;
    return NULL;
}

/* The tier's rings are a fixed pool: 48 threads reading at once (more than
 * the pool) all read right, and the process holds no more rings after than
 * before (a pool grown on demand kept one per thread that ever read at once). */
static void test_rings_fixed(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    const int before = count_rings();
    hy_nvme *n = open_tier(dir, 32 * MiB, 4);
    for (uint64_t k = 0; k < 8; k++) CU_ASSERT_EQUAL(put(n, k, 256 << 10), 0);
    const int opened = count_rings();
    enum { T = 48 };
    reader r[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        r[t] = (reader){.n = n, .id = t};
        pthread_create(&th[t], NULL, read_loop, &r[t]);
    }
    int bad = 0;
    for (int t = 0; t < T; t++) pthread_join(th[t], NULL), bad += r[t].bad;
    const int after = count_rings();
    printf("\n    io_uring descriptors: %d before the tier, %d open, %d after %d threads read",
           before, opened, after, T);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(opened >= 0 && opened - before <= NV_IO_RINGS);
    CU_ASSERT_EQUAL(after, opened);
    hy_nvme_close(n);
    CU_ASSERT_EQUAL(count_rings(), before);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_nvme_", g_tmp, sizeof g_tmp)) return 1;
    static const hy_test_case cases[] = {
        {"round trip: 1 B to 16 MiB, byte-identical", test_round_trip},
        {"throughput of 16 MiB payloads", test_throughput_16mib},
        {"replace frees the old bytes", test_replace},
        {"remove frees space that puts reuse", test_remove_reuses_space},
        {"entries and meta survive close and reopen", test_persistence},
        {"a flipped payload byte: EFORMAT, entry dropped", test_flipped_byte},
        {"damaged first or last chunk: EFORMAT naming it", test_first_and_last_chunk},
        {"reads report their completed prefix", test_read_progress},
        {"truncated and missing extents: records dropped on open", test_truncated_extent},
        {"a damaged catalog record is dropped on open", test_bad_record_dropped},
        {"full tier: ENOMEM until something is removed", test_full},
        {"injected write error: nothing visible, tier works", test_injected_write_error},
        {"injected read error: get fails, entry kept", test_injected_read_error},
        {"a second open of one directory is refused", test_second_open},
        {"missing parent directories are created", test_missing_parents_created},
        {"foreach lists every entry in key order", test_foreach},
        {"four threads: every read byte-identical", test_four_threads},
        {"48 threads reading: the rings stay a fixed pool", test_rings_fixed},
        {NULL, NULL},
    };
    int rc = hy_test_main("nvme", cases);
    hy_test_rmtree(g_tmp);
    return rc;
}
