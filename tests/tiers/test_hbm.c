/*
 * The hbm tier (tiers/hbm_internal.h). Without a CUDA device (or in a build without
 * CUDA) the machine cannot run it: the program prints "SKIPPED: <why>",
 * checks only that hy_hbm_open refuses with HY_EUNSUPPORTED and that reason,
 * and ctest reports the test as skipped. With a device: blocks come back
 * page-aligned and disjoint and release coalesces them; host → device → host
 * round trips of 1, 16 and 64 MiB through host-arena buffers are
 * byte-identical and leave neighbouring blocks alone; bad copies are refused;
 * a region larger than the device fails with HY_ENOMEM naming cudaMalloc;
 * device pointers are non-NULL and offset like the blocks.
 */
#include "arena_internal.h"
#include "hbm_internal.h"
#include "test_util.h"

#include <string.h>

#define MiB ((size_t)1 << 20)

static char g_why[256];

static hy_hbm *open_hbm(size_t bytes)
{
    hy_err e = {0};
    hy_hbm *h = NULL;
    int rc = hy_hbm_open(bytes, 0, &h, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return h;
}

static void assert_consistent(const hy_hbm *h)
{
    hy_err e = {0};
    int rc = hy_hbm_check(h, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
}

/* A reproducible byte pattern that differs per seed and per position. */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        p[i] = (uint8_t)(s >> 56);
    }
}

/* --- without a device ------------------------------------------------------ */

static void test_skipped_no_cuda_device(void)
{
    printf("\n    SKIPPED: %s — the hbm tier needs a CUDA device\n", g_why);
    CU_PASS("no CUDA device");
}

/* hy_hbm_open refuses, returns no handle and gives the same reason. */
static void test_open_says_why(void)
{
    hy_err e = {0};
    hy_hbm *h = (hy_hbm *)1;
    CU_ASSERT_EQUAL(hy_hbm_open(64 * MiB, 0, &h, &e), HY_EUNSUPPORTED);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, g_why));
    CU_ASSERT(strstr(e.msg, "built without CUDA") || strstr(e.msg, "no CUDA device: "));
}

/* --- with a device --------------------------------------------------------- */

static void test_alloc_release(void)
{
    hy_hbm *h = open_hbm(64 * MiB);
    size_t a, b, c, off;
    CU_ASSERT_EQUAL(hy_hbm_alloc(h, 0, &off), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_hbm_alloc(h, 64 * MiB + 1, &off), HY_ERANGE);
    CU_ASSERT_EQUAL(hy_hbm_alloc(h, 1, &a), 0);
    CU_ASSERT_EQUAL(hy_hbm_alloc(h, 5000, &b), 0);
    CU_ASSERT_EQUAL(hy_hbm_alloc(h, 3 * MiB, &c), 0);
    CU_ASSERT_EQUAL(a, 0);
    CU_ASSERT_EQUAL(b, HY_PAGE);
    CU_ASSERT_EQUAL(c, 3 * HY_PAGE);
    CU_ASSERT_EQUAL(hy_hbm_block_size(h, b), 2 * HY_PAGE);
    CU_ASSERT_EQUAL(hy_hbm_block_size(h, b + HY_PAGE), 0);
    hy_hbm_stats st;
    hy_hbm_stats_get(h, &st);
    CU_ASSERT_EQUAL(st.device, 0);
    CU_ASSERT_EQUAL(st.capacity, 64 * MiB);
    CU_ASSERT_EQUAL(st.blocks, 3);
    CU_ASSERT_EQUAL(st.used, 3 * HY_PAGE + 3 * MiB);
    assert_consistent(h);
    hy_hbm_release(h, b);
    hy_hbm_release(h, a);
    hy_hbm_release(h, c);
    hy_hbm_stats_get(h, &st);
    CU_ASSERT_EQUAL(st.used, 0);
    CU_ASSERT_EQUAL(st.free_extents, 1);
    CU_ASSERT_EQUAL(st.largest_free, 64 * MiB);
    assert_consistent(h);
    hy_hbm_close(h);
}

/* Blocks of 16 MiB in an 80 MiB region: a hole in the middle fragments the
 * free space, releasing its neighbour merges them, first fit reuses it. */
static void test_fragmentation_and_coalescing(void)
{
    hy_hbm *h = open_hbm(80 * MiB);
    size_t off[4], big;
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(hy_hbm_alloc(h, 16 * MiB, &off[i]), 0);
        CU_ASSERT_EQUAL(off[i], (size_t)i * 16 * MiB);
    }
    hy_hbm_release(h, off[1]);
    hy_hbm_stats st;
    hy_hbm_stats_get(h, &st);
    CU_ASSERT_EQUAL(st.free_extents, 2);
    CU_ASSERT_EQUAL(st.free_bytes, 32 * MiB);
    CU_ASSERT_EQUAL(st.largest_free, 16 * MiB);
    CU_ASSERT_DOUBLE_EQUAL(st.fragmentation, 0.5, 1e-12);
    CU_ASSERT_EQUAL(hy_hbm_alloc(h, 32 * MiB, &big), HY_ENOMEM);
    hy_hbm_release(h, off[2]); /* merges with the hole before it */
    hy_hbm_stats_get(h, &st);
    CU_ASSERT_EQUAL(st.free_extents, 2);
    CU_ASSERT_EQUAL(st.largest_free, 32 * MiB);
    CU_ASSERT_EQUAL(hy_hbm_alloc(h, 32 * MiB, &big), 0);
    CU_ASSERT_EQUAL(big, 16 * MiB); /* first fit: the lowest offset that holds it */
    assert_consistent(h);
    hy_hbm_release(h, big);
    hy_hbm_release(h, off[0]);
    hy_hbm_release(h, off[3]);
    hy_hbm_stats_get(h, &st);
    CU_ASSERT_EQUAL(st.free_extents, 1);
    CU_ASSERT_EQUAL(st.fragmentation, 0.0);
    assert_consistent(h);
    hy_hbm_close(h);
}

/* Host → device → host through host-arena buffers, for each size, with a
 * sentinel block after it that must keep its own bytes. */
static void test_round_trip(void)
{
    static const size_t sizes[] = {1 * MiB, 16 * MiB, 64 * MiB};
    hy_err e = {0};
    hy_arena *host = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_arena_new(160 * MiB, &host, &e), 0);
    hy_hbm *h = open_hbm(160 * MiB);
    size_t src_off, dst_off;
    CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(host, 64 * MiB, &src_off), 0);
    CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(host, 64 * MiB, &dst_off), 0);
    uint8_t *src = hy_arena_ptr(host, src_off), *dst = hy_arena_ptr(host, dst_off);
    uint64_t moved = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const size_t n = sizes[i];
        size_t blk, sentinel;
        CU_ASSERT_EQUAL_FATAL(hy_hbm_alloc(h, n, &blk), 0);
        CU_ASSERT_EQUAL_FATAL(hy_hbm_alloc(h, MiB, &sentinel), 0);
        fill(src, MiB, 1000 + i);
        CU_ASSERT_EQUAL(hy_hbm_write(h, sentinel, src, MiB, &e), 0);
        fill(src, n, i);
        memset(dst, 0xA5, n);
        CU_ASSERT_EQUAL(hy_hbm_write(h, blk, src, n, &e), 0);
        CU_ASSERT_EQUAL(hy_hbm_read(h, blk, dst, n, &e), 0);
        CU_ASSERT(memcmp(src, dst, n) == 0);
        if (e.code) fprintf(stderr, "\n  %s\n", e.msg);
        CU_ASSERT_EQUAL(hy_hbm_read(h, sentinel, dst, MiB, &e), 0);
        fill(src, MiB, 1000 + i);
        CU_ASSERT(memcmp(src, dst, MiB) == 0);
        moved += n + MiB;
        hy_hbm_release(h, sentinel);
        hy_hbm_release(h, blk);
    }
    hy_hbm_stats st;
    hy_hbm_stats_get(h, &st);
    CU_ASSERT_EQUAL(st.writes, 6);
    CU_ASSERT_EQUAL(st.reads, 6);
    CU_ASSERT_EQUAL(st.bytes_written, moved);
    CU_ASSERT_EQUAL(st.bytes_read, moved);
    CU_ASSERT_EQUAL(st.pageable, 12); /* the host arena is not pinned (yet) */
    if (st.write_ns && st.read_ns)
        printf("\n    pageable copies: host→device %.1f GB/s, device→host %.1f GB/s\n",
               (double)st.bytes_written / (double)st.write_ns,
               (double)st.bytes_read / (double)st.read_ns);
    assert_consistent(h);
    hy_hbm_close(h);
    hy_arena_free_all(host);
}

static void test_copy_refuses_bad_ranges(void)
{
    hy_hbm *h = open_hbm(16 * MiB);
    uint8_t buf[2 * HY_PAGE] = {0};
    size_t blk;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_hbm_alloc(h, HY_PAGE, &blk), 0);
    CU_ASSERT_EQUAL(hy_hbm_write(h, blk + HY_PAGE, buf, 1, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not a live block"));
    CU_ASSERT_EQUAL(hy_hbm_read(h, blk, buf, 2 * HY_PAGE, &e), HY_ERANGE);
    CU_ASSERT_EQUAL(hy_hbm_write(h, blk, buf, 0, &e), HY_ERANGE);
    CU_ASSERT_EQUAL(hy_hbm_write(h, blk, NULL, 1, &e), HY_EINVAL);
    hy_hbm_stats st;
    hy_hbm_stats_get(h, &st);
    CU_ASSERT_EQUAL(st.writes + st.reads, 0);
    hy_hbm_release(h, blk);
    hy_hbm_close(h);
}

/* More than any device holds: HY_ENOMEM with cudaMalloc's reason; a bad
 * device index is refused; the failures leave CUDA usable. */
static void test_open_out_of_memory(void)
{
    hy_err e = {0};
    hy_hbm *h = (hy_hbm *)1;
    CU_ASSERT_EQUAL(hy_hbm_open((size_t)1 << 47, 0, &h, &e), HY_ENOMEM);
    CU_ASSERT_PTR_NULL(h);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "cudaMalloc"));
    printf("\n    %s\n", e.msg);
    CU_ASSERT_EQUAL(hy_hbm_open(MiB, 1 << 20, &h, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_hbm_open(0, 0, &h, &e), HY_EINVAL);
    h = open_hbm(MiB);
    hy_hbm_close(h);
}

static void test_device_ptr(void)
{
    hy_hbm *h = open_hbm(16 * MiB);
    size_t a, b;
    CU_ASSERT_EQUAL_FATAL(hy_hbm_alloc(h, MiB, &a), 0);
    CU_ASSERT_EQUAL_FATAL(hy_hbm_alloc(h, MiB, &b), 0);
    uint8_t *pa = hy_hbm_device_ptr(h, a), *pb = hy_hbm_device_ptr(h, b);
    CU_ASSERT_PTR_NOT_NULL(pa);
    CU_ASSERT_PTR_NOT_NULL(pb);
    CU_ASSERT_EQUAL((size_t)(pb - pa), b - a);
    hy_hbm_release(h, a);
    hy_hbm_release(h, b);
    hy_hbm_close(h);
}

int main(void)
{
    if (!hy_hbm_available(g_why, sizeof g_why)) {
        printf("SKIPPED: %s — the hbm tier needs a CUDA device\n", g_why);
        return hy_test_main("hbm (no CUDA device)",
                            (const hy_test_case[]){
                                {"skipped_no_cuda_device", test_skipped_no_cuda_device},
                                {"open_says_why", test_open_says_why},
                                {NULL, NULL},
                            });
    }
    printf("hbm: %s\n", g_why);
    return hy_test_main("hbm",
                        (const hy_test_case[]){
                            {"alloc_release", test_alloc_release},
                            {"fragmentation_and_coalescing", test_fragmentation_and_coalescing},
                            {"round_trip_1_16_64_MiB", test_round_trip},
                            {"copy_refuses_bad_ranges", test_copy_refuses_bad_ranges},
                            {"open_out_of_memory", test_open_out_of_memory},
                            {"device_ptr", test_device_ptr},
                            {NULL, NULL},
                        });
}
