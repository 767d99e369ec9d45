/*
 * The host arena (tiers/arena_internal.h): MB-sized blocks come back page-aligned and
 * disjoint; released neighbours merge back into one extent; fragmentation is
 * reported and HY_ENOMEM returned when free bytes are split too finely;
 * bad arguments are refused without touching the arena; releasing a block
 * that is not live aborts; a long random alloc/release sequence agrees with
 * a page map of the arena (same first-fit offsets, same free-space shape);
 * block contents survive everything done around them.
 */
#include "arena_internal.h"
#include "test_util.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static hy_arena *new_arena(size_t bytes)
{
    hy_err e = {0};
    hy_arena *a = NULL;
    int rc = hy_arena_new(bytes, &a, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return a;
}

static void assert_consistent(const hy_arena *a)
{
    hy_err e = {0};
    int rc = hy_arena_check(a, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL(rc, 0);
}

/* Everything is free again: one extent covering the whole arena. */
static void assert_all_free(const hy_arena *a)
{
    hy_arena_stats st;
    hy_arena_stats_get(a, &st);
    CU_ASSERT_EQUAL(st.used, 0);
    CU_ASSERT_EQUAL(st.blocks, 0);
    CU_ASSERT_EQUAL(st.free_bytes, st.capacity);
    CU_ASSERT_EQUAL(st.largest_free, st.capacity);
    CU_ASSERT_EQUAL(st.free_extents, 1);
    CU_ASSERT_EQUAL(st.fragmentation, 0.0);
    assert_consistent(a);
}

static void test_new_refuses_bad_sizes(void)
{
    hy_err e = {0};
    hy_arena *a = (hy_arena *)1;
    CU_ASSERT_EQUAL(hy_arena_new(0, &a, &e), HY_EINVAL);
    CU_ASSERT_PTR_NULL(a);
    CU_ASSERT(hy_arena_new(SIZE_MAX, &a, &e) < 0);
    CU_ASSERT_PTR_NULL(a);
    a = new_arena(5000); /* rounds up to two pages */
    hy_arena_stats st;
    hy_arena_stats_get(a, &st);
    CU_ASSERT_EQUAL(st.capacity, 2 * HY_PAGE);
    printf("\n    mlock %s, MADV_HUGEPAGE %s", st.locked ? "yes" : "no",
           st.huge_pages ? "yes" : "no");
    hy_arena_free_all(a);
    hy_arena_free_all(NULL);
}

static void test_alloc_refuses_bad_sizes(void)
{
    hy_arena *a = new_arena(8 * MiB);
    size_t off = 12345;
    CU_ASSERT_EQUAL(hy_arena_alloc(a, 0, &off), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_arena_alloc(a, 8 * MiB + 1, &off), HY_ERANGE);
    CU_ASSERT_EQUAL(hy_arena_alloc(a, SIZE_MAX, &off), HY_ERANGE);
    CU_ASSERT_EQUAL(off, 12345);
    assert_all_free(a);
    CU_ASSERT_EQUAL(hy_arena_alloc(a, 8 * MiB, &off), 0); /* exactly the capacity fits */
    CU_ASSERT_EQUAL(off, 0);
    CU_ASSERT_EQUAL(hy_arena_alloc(a, 1, &off), HY_ENOMEM);
    hy_arena_release(a, 0);
    assert_all_free(a);
    hy_arena_free_all(a);
}

static void test_mb_blocks_aligned_and_disjoint(void)
{
    enum { N = 24 };
    hy_arena *a = new_arena(64 * MiB);
    const size_t sizes[4] = {MiB, MiB + 1, 2 * MiB - 1, 3 * MiB / 2 + 17};
    size_t off[N];
    for (int i = 0; i < N; i++) {
        CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, sizes[i % 4], &off[i]), 0);
        size_t bs = hy_arena_block_size(a, off[i]);
        CU_ASSERT_EQUAL(off[i] % HY_PAGE, 0);
        CU_ASSERT_EQUAL((uintptr_t)hy_arena_ptr(a, off[i]) % HY_PAGE, 0);
        CU_ASSERT_EQUAL(bs, (sizes[i % 4] + HY_PAGE - 1) / HY_PAGE * HY_PAGE);
        CU_ASSERT(off[i] + bs <= 64 * MiB);
        for (int j = 0; j < i; j++) /* disjoint from every earlier block */
            CU_ASSERT(off[i] >= off[j] + hy_arena_block_size(a, off[j]) || off[j] >= off[i] + bs);
    }
    hy_arena_stats st;
    hy_arena_stats_get(a, &st);
    CU_ASSERT_EQUAL(st.blocks, N);
    CU_ASSERT_EQUAL(st.used + st.free_bytes, st.capacity);
    CU_ASSERT_EQUAL(hy_arena_block_size(a, off[0] + HY_PAGE), 0); /* inside a block */
    CU_ASSERT_EQUAL(hy_arena_block_size(a, 1), 0);
    assert_consistent(a);
    for (int i = 0; i < N; i++) hy_arena_release(a, off[i]);
    assert_all_free(a);
    hy_arena_free_all(a);
}

/* Releasing in every order of four adjacent blocks ends in one extent. */
static void test_neighbours_coalesce(void)
{
    hy_arena *a = new_arena(4 * MiB);
    const int orders[][4] = {{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 2, 0, 3}, {2, 1, 3, 0},
                             {0, 2, 1, 3}, {1, 3, 2, 0}, {3, 0, 2, 1}};
    for (size_t k = 0; k < sizeof orders / sizeof orders[0]; k++) {
        size_t off[4];
        for (int i = 0; i < 4; i++) {
            CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, MiB, &off[i]), 0);
            CU_ASSERT_EQUAL(off[i], (size_t)i * MiB); /* first fit packs from 0 */
        }
        for (int i = 0; i < 4; i++) {
            hy_arena_release(a, off[orders[k][i]]);
            assert_consistent(a);
        }
        assert_all_free(a);
    }
    hy_arena_free_all(a);
}

static void test_fragmentation_reported(void)
{
    hy_arena *a = new_arena(4 * MiB);
    size_t off[4];
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, MiB, &off[i]), 0);
    hy_arena_stats st;
    hy_arena_stats_get(a, &st);
    CU_ASSERT_EQUAL(st.free_bytes, 0);
    CU_ASSERT_EQUAL(st.fragmentation, 0.0); /* nothing free: 0, not NaN */
    hy_arena_release(a, off[0]);
    hy_arena_release(a, off[2]);
    hy_arena_stats_get(a, &st);
    CU_ASSERT_EQUAL(st.free_extents, 2);
    CU_ASSERT_EQUAL(st.free_bytes, 2 * MiB);
    CU_ASSERT_EQUAL(st.largest_free, MiB);
    CU_ASSERT_DOUBLE_EQUAL(st.fragmentation, 0.5, 1e-12);
    hy_arena_free_all(a);
}

/* 2 MiB free in two 1 MiB holes cannot hold 2 MiB; freeing the block between
 * them merges the three into one extent that can. */
static void test_enomem_when_fragmented(void)
{
    hy_arena *a = new_arena(4 * MiB);
    size_t off[4], big;
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, MiB, &off[i]), 0);
    hy_arena_release(a, off[0]);
    hy_arena_release(a, off[2]);
    CU_ASSERT_EQUAL(hy_arena_alloc(a, 2 * MiB, &big), HY_ENOMEM);
    CU_ASSERT_EQUAL(hy_arena_alloc(a, MiB + 1, &big), HY_ENOMEM);
    hy_arena_stats st;
    hy_arena_stats_get(a, &st);
    CU_ASSERT_EQUAL(st.blocks, 2); /* the refusals changed nothing */
    CU_ASSERT_EQUAL(st.free_extents, 2);
    hy_arena_release(a, off[1]);
    hy_arena_stats_get(a, &st);
    CU_ASSERT_EQUAL(st.free_extents, 1);
    CU_ASSERT_EQUAL(st.largest_free, 3 * MiB);
    CU_ASSERT_EQUAL(hy_arena_alloc(a, 2 * MiB, &big), 0);
    CU_ASSERT_EQUAL(big, 0);
    hy_arena_release(a, big);
    hy_arena_release(a, off[3]);
    assert_all_free(a);
    hy_arena_free_all(a);
}

/* Runs release(off) in a child; true when the child died of SIGABRT. */
static bool release_aborts(hy_arena *a, size_t off)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        hy_arena_release(a, off);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void test_release_of_non_block_aborts(void)
{
    hy_arena *a = new_arena(8 * MiB);
    size_t x, y;
    CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, MiB, &x), 0);
    CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, MiB, &y), 0);
    hy_arena_release(a, x);
    CU_ASSERT(release_aborts(a, x));           /* double release */
    CU_ASSERT(release_aborts(a, 4 * MiB));     /* never allocated */
    CU_ASSERT(release_aborts(a, y + HY_PAGE)); /* inside a live block */
    CU_ASSERT(release_aborts(a, y + 1));       /* not page-aligned */
    CU_ASSERT(release_aborts(a, 8 * MiB));     /* past the end */
    hy_arena_release(a, y);
    assert_all_free(a);
    hy_arena_free_all(a);
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = hy_rng_next(&r);
        memcpy(p + i, &v, HY_MIN((size_t)8, n - i));
    }
}

static bool holds(const uint8_t *p, size_t n, uint64_t seed)
{
    uint8_t *want = malloc(n);
    fill(want, n, seed);
    bool same = memcmp(p, want, n) == 0;
    free(want);
    return same;
}

static void test_data_survives(void)
{
    enum { N = 24 };
    hy_arena *a = new_arena(48 * MiB);
    hy_rng r;
    hy_rng_seed(&r, 5);
    size_t off[2 * N], len[2 * N];
    bool live[2 * N] = {0};
    for (int i = 0; i < N; i++) {
        len[i] = MiB / 8 + hy_rng_next(&r) % (2 * MiB);
        CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, len[i], &off[i]), 0);
        fill(hy_arena_ptr(a, off[i]), len[i], 1000 + i);
        live[i] = true;
    }
    for (int i = 1; i < N; i += 2) hy_arena_release(a, off[i]), live[i] = false;
    for (int i = N; i < 2 * N; i++) { /* new blocks land in the holes and the tail */
        len[i] = 1 + hy_rng_next(&r) % MiB;
        if (hy_arena_alloc(a, len[i], &off[i])) continue;
        fill(hy_arena_ptr(a, off[i]), len[i], 1000 + i);
        live[i] = true;
    }
    for (int i = 0; i < 2 * N; i += 3)
        if (live[i]) hy_arena_release(a, off[i]), live[i] = false;
    int checked = 0;
    for (int i = 0; i < 2 * N; i++) {
        if (!live[i]) continue;
        CU_ASSERT(holds(hy_arena_ptr(a, off[i]), len[i], 1000 + i));
        hy_arena_release(a, off[i]);
        checked++;
    }
    CU_ASSERT(checked >= N / 2);
    assert_all_free(a);
    hy_arena_free_all(a);
}

/* --- the random sequence against a page map -------------------------------- */

typedef struct ref_block {
    size_t off, len; /* len rounded to pages */
    uint64_t stamp;
} ref_block;

/* Free runs of the page map: their count, the longest, and the first at
 * least `need` pages long (SIZE_MAX when none). */
static void scan_free(const uint8_t *map, size_t pages, size_t need, size_t *runs, size_t *longest,
                      size_t *first)
{
    *runs = *longest = 0, *first = SIZE_MAX;
    for (size_t p = 0; p < pages;) {
        if (map[p]) {
            p++;
            continue;
        }
        size_t q = p;
        while (q < pages && !map[q]) q++;
        (*runs)++;
        *longest = HY_MAX(*longest, q - p);
        if (*first == SIZE_MAX && q - p >= need) *first = p;
        p = q;
    }
}

static void stamp_block(hy_arena *a, const ref_block *b)
{
    uint8_t *p = hy_arena_ptr(a, b->off);
    memcpy(p, &b->stamp, 8);
    memcpy(p + b->len - 8, &b->stamp, 8);
}

static bool stamp_intact(hy_arena *a, const ref_block *b)
{
    uint8_t *p = hy_arena_ptr(a, b->off);
    uint64_t head, tail;
    memcpy(&head, p, 8);
    memcpy(&tail, p + b->len - 8, 8);
    return head == b->stamp && tail == b->stamp;
}

static void test_random_matches_page_map(void)
{
    const size_t cap = 32 * MiB, pages = cap / HY_PAGE;
    const int steps = 200000;
    hy_arena *a = new_arena(cap);
    uint8_t *map = calloc(pages, 1);
    ref_block *live = malloc(pages * sizeof *live);
    size_t nlive = 0, used_pages = 0;
    long allocs = 0, refused = 0, bad = 0;
    double worst_frag = 0;
    hy_rng r;
    hy_rng_seed(&r, 42);
    for (int step = 0; step < steps && !bad; step++) {
        size_t runs, longest, first;
        if (nlive == 0 || hy_rng_uniform(&r) < 0.55) {
            /* 1 byte .. 2 MiB; a tenth under 16 KiB */
            size_t bytes = 1 + hy_rng_next(&r) % (hy_rng_uniform(&r) < 0.1 ? 4 * HY_PAGE : 2 * MiB);
            size_t need = (bytes + HY_PAGE - 1) / HY_PAGE, off;
            scan_free(map, pages, need, &runs, &longest, &first);
            int rc = hy_arena_alloc(a, bytes, &off);
            if (rc == HY_ENOMEM) {
                bad += first != SIZE_MAX; /* a large enough run existed */
                refused++;
            } else if (rc != 0 || off != first * HY_PAGE ||
                       hy_arena_block_size(a, off) != need * HY_PAGE) {
                bad++; /* not first fit, or the wrong size */
            } else {
                for (size_t p = first; p < first + need; p++) bad += map[p]++ != 0;
                live[nlive] = (ref_block){off, need * HY_PAGE, hy_rng_next(&r)};
                stamp_block(a, &live[nlive++]);
                used_pages += need;
                allocs++;
            }
        } else {
            size_t i = hy_rng_next(&r) % nlive;
            ref_block b = live[i];
            live[i] = live[--nlive];
            bad += !stamp_intact(a, &b);
            for (size_t p = b.off / HY_PAGE; p < (b.off + b.len) / HY_PAGE; p++) map[p] = 0;
            used_pages -= b.len / HY_PAGE;
            hy_arena_release(a, b.off);
        }
        hy_arena_stats st;
        hy_arena_stats_get(a, &st);
        scan_free(map, pages, 1, &runs, &longest, &first);
        bad += st.used + st.free_bytes != cap || st.used != used_pages * HY_PAGE ||
               st.blocks != nlive || st.free_extents != runs ||
               st.largest_free != longest * HY_PAGE;
        worst_frag = HY_MAX(worst_frag, st.fragmentation);
        if (step % 1000 == 0) bad += hy_arena_check(a, NULL) != 0;
        if (bad) printf("\n    first disagreement at step %d", step);
    }
    printf("\n    %ld allocations, %ld refused (ENOMEM), worst fragmentation %.2f", allocs, refused,
           worst_frag);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(refused > 1000); /* the sequence did reach a full, fragmented arena */
    CU_ASSERT(worst_frag > 0.5);
    for (size_t i = 0; i < nlive; i++) {
        CU_ASSERT(stamp_intact(a, &live[i]));
        hy_arena_release(a, live[i].off);
    }
    assert_all_free(a);
    free(map), free(live);
    hy_arena_free_all(a);
}

/* Alloc + release at a steady 10k live blocks: the bookkeeping stays
 * consistent; the time per pair is printed (metadata only, small blocks). */
static void test_steady_state_10k_live(void)
{
    enum { LIVE = 10000, ROUNDS = 200000 };
    hy_arena *a = new_arena((size_t)LIVE * 12 * HY_PAGE);
    size_t *off = malloc(LIVE * sizeof *off);
    hy_rng r;
    hy_rng_seed(&r, 9);
    for (int i = 0; i < LIVE; i++)
        CU_ASSERT_EQUAL_FATAL(hy_arena_alloc(a, (1 + hy_rng_next(&r) % 16) * HY_PAGE, &off[i]), 0);
    int failed = 0;
    uint64_t t0 = hy_now_ns();
    for (int k = 0; k < ROUNDS; k++) {
        size_t i = hy_rng_next(&r) % LIVE;
        if (off[i] != SIZE_MAX) hy_arena_release(a, off[i]);
        if (hy_arena_alloc(a, (1 + hy_rng_next(&r) % 16) * HY_PAGE, &off[i]))
            off[i] = SIZE_MAX, failed++;
    }
    double ns = (double)(hy_now_ns() - t0) / ROUNDS;
    hy_arena_stats st;
    hy_arena_stats_get(a, &st);
    printf("\n    %.0f ns per release + alloc at %zu live blocks, %zu free extents", ns, st.blocks,
           st.free_extents);
    CU_ASSERT(failed < ROUNDS / 100);
    size_t live = 0;
    for (int i = 0; i < LIVE; i++) live += off[i] != SIZE_MAX;
    CU_ASSERT_EQUAL(st.blocks, live);
    assert_consistent(a);
    free(off);
    hy_arena_free_all(a);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"new refuses bad sizes", test_new_refuses_bad_sizes},
        {"alloc refuses bad sizes", test_alloc_refuses_bad_sizes},
        {"MB blocks are page-aligned and disjoint", test_mb_blocks_aligned_and_disjoint},
        {"released neighbours coalesce", test_neighbours_coalesce},
        {"fragmentation is reported", test_fragmentation_reported},
        {"ENOMEM when fragmented, success after a neighbour frees", test_enomem_when_fragmented},
        {"releasing a non-block aborts", test_release_of_non_block_aborts},
        {"block data survives other allocations", test_data_survives},
        {"200k random steps match a page map", test_random_matches_page_map},
        {"steady state at 10k live blocks", test_steady_state_10k_live},
        {NULL, NULL},
    };
    return hy_test_main("arena", cases);
}
