/*
 * The tier manager with hbm as its top tier (hy_tiers.h, store_hbm.c): an entry
 * placed in hbm at commit; hbm victims demoted to host and host victims to
 * NVMe (or, with an hbm copy left, just released), so an entry travels hbm → host → nvme and reads
 * back byte-identical through host and device leases; device leases that block eviction and outlive
 * invalidation; device acquires that promote host-only and NVMe-only entries; temporary device
 * blocks when the hbm admitter refuses; host leases copied down from hbm; failed hbm copies that
 * only make an entry skip the tier; counters that add up; a multi-threaded stress run (also under
 * `make tsan`); and, without hbm, NVMe puts racing each other, forced step by step through the
 * store's put hook (store_internal.h): a demotion that waited behind its replacement's put, a
 * flush behind a demotion, a reservation that waits for a demotion in flight.
 *
 * Cases named double_* run on every machine against a TEST DOUBLE: host
 * memory standing in for the hbm tier, defined below and handed to the store
 * through the test-only hy_store_open_with_devtier (tiers/devtier_internal.h). The
 * product never emulates hbm; the double only lets the manager's three-tier
 * logic run without a GPU. Cases named real_hbm_* run the same paths against
 * the real hbm tier when hy_hbm_available(), checking device bytes with
 * cudaMemcpy; without a device they print "SKIPPED: no CUDA device".
 */
#include "test_util.h"
#include "store_fixture.h"
#include "devtier_internal.h"
#include "extents_internal.h"
#include "hy_tiers.h"
#include "store_internal.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#if HY_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MB   ((size_t)1 << 20)
#define HBM  (1u << HY_TIER_HBM)
#define HOST (1u << HY_TIER_HOST)
#define NVME (1u << HY_TIER_NVME)

static char g_tmp[64];
static bool g_real;     /* the store's hbm is the real tier: device bytes via cudaMemcpy */
static char g_why[256]; /* hy_hbm_available's answer */
static int g_nvme_dirs; /* a fresh NVMe directory per store */

/* ===== TEST DOUBLE: host memory standing in for the hbm tier ===================
 * Implements devtier_internal.h's table as hbm.c does — the same block allocator
 * (extents_internal.h) behind a mutex, synchronous copies, a device pointer per block —
 * but in malloc'd host memory, so device pointers can be read with memcmp.
 * Faults can be injected: the next fail_writes / fail_reads copies fail with
 * HY_EIO. Test-only; never part of the product. */
typedef struct fake_hbm {
    pthread_mutex_t mu;
    uint8_t *mem;
    size_t capacity;
    hy_extents *ext;
    uint64_t writes, reads, bytes_written, bytes_read;
    int fail_writes, fail_reads;
} fake_hbm;

static int fake_alloc(void *ctx, size_t bytes, size_t *off)
{
    fake_hbm *f = ctx;
    pthread_mutex_lock(&f->mu);
    int rc = hy_extents_alloc(f->ext, bytes, off);
    pthread_mutex_unlock(&f->mu);
    return rc;
}

static void fake_release(void *ctx, size_t off)
{
    fake_hbm *f = ctx;
    pthread_mutex_lock(&f->mu);
    hy_extents_release(f->ext, off);
    pthread_mutex_unlock(&f->mu);
}

static size_t fake_block_size(void *ctx, size_t off)
{
    fake_hbm *f = ctx;
    pthread_mutex_lock(&f->mu);
    size_t n = hy_extents_block_size(f->ext, off);
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* One copy: checks the block and the injected faults under the mutex, moves
 * the bytes outside it (as hbm.c does), counts under it. */
static int fake_copy(fake_hbm *f, bool up, size_t off, void *host, size_t n, hy_err *err)
{
    pthread_mutex_lock(&f->mu);
    size_t size = hy_extents_block_size(f->ext, off);
    int *fail = up ? &f->fail_writes : &f->fail_reads;
    const bool inject = *fail > 0;
    if (inject) (*fail)--;
    pthread_mutex_unlock(&f->mu);
    if (!size) return hy_err_set(err, HY_EINVAL, "test double: %zu is not a live block", off);
    if (n == 0 || n > size) return hy_err_set(err, HY_ERANGE, "test double: %zu bytes", n);
    if (inject) return hy_err_set(err, HY_EIO, "test double: injected copy failure");
    if (up)
        memcpy(f->mem + off, host, n);
    else
        memcpy(host, f->mem + off, n);
    pthread_mutex_lock(&f->mu);
    if (up)
        f->writes++, f->bytes_written += n;
    else
        f->reads++, f->bytes_read += n;
    pthread_mutex_unlock(&f->mu);
    return HY_OK;
}

static int fake_write(void *ctx, size_t off, const void *src, size_t n, hy_err *err)
{
    return fake_copy(ctx, true, off, (void *)src, n, err);
}

static int fake_read(void *ctx, size_t off, void *dst, size_t n, hy_err *err)
{
    return fake_copy(ctx, false, off, dst, n, err);
}

static void *fake_device_ptr(void *ctx, size_t off)
{
    fake_hbm *f = ctx;
    return f->mem + off;
}

static void fake_stats(void *ctx, hy_hbm_stats *st)
{
    fake_hbm *f = ctx;
    hy_extents_stats x;
    pthread_mutex_lock(&f->mu);
    hy_extents_stats_get(f->ext, &x);
    *st = (hy_hbm_stats){
        .device = -1,
        HY_EXTENTS_STATS_INIT(x),
        .writes = f->writes,
        .reads = f->reads,
        .bytes_written = f->bytes_written,
        .bytes_read = f->bytes_read,
    };
    pthread_mutex_unlock(&f->mu);
}

static void fake_close(void *ctx)
{
    fake_hbm *f = ctx;
    pthread_mutex_destroy(&f->mu);
    hy_extents_free(f->ext);
    free(f->mem);
    free(f);
}

static const hy_devtier_ops fake_ops = {
    .name = "TEST DOUBLE (host memory standing in for hbm)",
    .alloc = fake_alloc,
    .release = fake_release,
    .block_size = fake_block_size,
    .write = fake_write,
    .read = fake_read,
    .device_ptr = fake_device_ptr,
    .stats = fake_stats,
    .close = fake_close, /* no pin_host: the double's memory is not a device's */
};

static fake_hbm *fake_new(size_t bytes)
{
    fake_hbm *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    pthread_mutex_init(&f->mu, NULL);
    f->capacity = bytes;
    f->mem = aligned_alloc(HY_PAGE, bytes);
    if (!f->mem || hy_extents_new("hbm test double", bytes, &f->ext)) {
        fake_close(f);
        return NULL;
    }
    return f;
}

/* ===== entries ================================================================== */

static hy_meta meta_of(uint64_t n, size_t bytes)
{
    hy_meta m;
    memset(&m, 0, sizeof m);
    m.key = key_of(n);
    snprintf(m.tenant, sizeof m.tenant, "t");
    m.tokens = 100 + (uint32_t)(n % 400);
    m.flops = 2.0 * m.tokens * 33e6;
    m.bytes = bytes;
    return m;
}

/* Device bytes against the pattern: read with cudaMemcpy from the real tier,
 * directly from the test double's host memory. */
static bool dev_check(const void *dptr, uint64_t n, size_t bytes)
{
    if (!dptr) return false;
    void *host = malloc(bytes);
    bool ok = host != NULL;
#if HY_HAVE_CUDA
    if (ok && g_real) ok = cudaMemcpy(host, dptr, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
#endif
    if (ok && !g_real) memcpy(host, dptr, bytes);
    ok = ok && check(host, n, bytes);
    free(host);
    return ok;
}

static int put(hy_store *s, uint64_t n, size_t bytes, hy_tier_id *placed)
{
    hy_meta m = meta_of(n, bytes);
    hy_put *p;
    void *buf;
    hy_err e = {0};
    int rc = hy_store_reserve(s, &m, &p, &buf, &e);
    if (rc) return rc;
    fill(buf, n, bytes);
    return hy_store_commit(s, p, placed, &e);
}

/* 0 when entry n reads back intact through a host lease (HY_EFORMAT for a
 * wrong byte), else the acquire's error. */
static int get_check(hy_store *s, uint64_t n, size_t bytes)
{
    hy_key k = key_of(n);
    hy_lease *l;
    hy_err e = {0};
    int rc = hy_store_acquire(s, &k, &l, &e);
    if (rc) return rc;
    rc = hy_lease_device_ptr(l) == NULL && check(hy_lease_data(l), n, bytes) ? 0 : HY_EFORMAT;
    hy_store_release(s, l);
    return rc;
}

/* The same through a device lease. */
static int dget_check(hy_store *s, uint64_t n, size_t bytes)
{
    hy_key k = key_of(n);
    hy_lease *l;
    hy_err e = {0};
    int rc = hy_store_acquire_device(s, &k, &l, &e);
    if (rc) return rc;
    rc = hy_lease_data(l) == NULL && dev_check(hy_lease_device_ptr(l), n, bytes) ? 0 : HY_EFORMAT;
    hy_store_release(s, l);
    return rc;
}

/* Which tiers hold entry n (0: none, not in the index). */
static unsigned where(hy_store *s, uint64_t n)
{
    hy_key k = key_of(n);
    unsigned m = 0;
    return hy_store_tiers_of(s, &k, &m) == HY_OK ? m : 0;
}

static hy_store_stats stats(hy_store *s)
{
    hy_store_stats st;
    hy_store_stats_get(s, &st);
    return st;
}

static const hy_policy_config ACCEPT = {.evict = HY_EVICT_LRU, .admit = HY_ADMIT_ALWAYS};
static const hy_policy_config REFUSE = {
    .evict = HY_EVICT_LRU, .admit = HY_ADMIT_MIN_TOKENS, .min_tokens = 1u << 30};

static void set_policy(hy_store *s, hy_tier_id t, const hy_policy_config *p)
{
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_set_policy(s, t, p, &e), 0);
}

/* Host tier of host_mb, NVMe in a fresh directory when `nvme`, every policy
 * LRU + always; the mover never wakes (watermarks 0.99 / 1.0), so stats
 * change only with the test's own calls. */
static hy_store_config config(size_t host_mb, bool nvme)
{
    static char dir[128];
    hy_store_config c;
    memset(&c, 0, sizeof c);
    c.host_bytes = host_mb * MB;
    c.host_policy = c.nvme_policy = c.hbm_policy = ACCEPT;
    c.high_watermark = 1.0, c.low_watermark = 0.99;
    if (nvme) {
        snprintf(dir, sizeof dir, "%s/nvme%d", g_tmp, ++g_nvme_dirs);
        c.nvme_dir = dir;
        c.nvme.extent_bytes = 16 * MB;
        c.nvme.max_extents = 8;
    }
    return c;
}

/* A store over c with an hbm tier of hbm_mb: the test double, or the real
 * tier when g_real. *fake (optional) is the double, for fault injection (the
 * store owns it). */
static hy_store *open3(hy_store_config *c, size_t hbm_mb, fake_hbm **fake)
{
    hy_store *s = NULL;
    hy_err e = {0};
    int rc;
    if (fake) *fake = NULL;
    if (g_real) {
        c->hbm_bytes = hbm_mb * MB;
        rc = hy_store_open(c, &s, &e);
    } else {
        fake_hbm *f = fake_new(hbm_mb * MB);
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        if (fake) *fake = f;
        rc = hy_store_open_with_devtier(c, &fake_ops, f, &s, &e);
    }
    if (rc) fprintf(stderr, "\n  open: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_FATAL(stats(s).hbm_present);
    return s;
}

/* Every counter against what the index says, entry by entry, for keys
 * [0, nkeys); no lease or reservation may be outstanding. */
static void assert_consistent(hy_store *s, uint64_t nkeys)
{
    hy_store_stats st = stats(s);
    uint64_t n = 0, nh = 0, nhost = 0, nn = 0, hbm_bytes = 0;
    for (uint64_t k = 0; k < nkeys; k++) {
        const unsigned m = where(s, k);
        if (!m) continue;
        n++;
        if (m & HBM) {
            nh++;
            hy_key key = key_of(k);
            hy_store_filter f = {.key = &key};
            hy_meta meta;
            size_t got = 0;
            hy_err e = {0};
            CU_ASSERT_EQUAL(hy_store_list(s, &f, 0, &meta, 1, &got, NULL, &e), 0);
            if (got == 1) hbm_bytes += (meta.bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
        }
        nhost += (m & HOST) != 0;
        nn += (m & NVME) != 0;
    }
    CU_ASSERT_EQUAL(st.entries, n);
    CU_ASSERT_EQUAL(st.hbm_entries, nh);
    CU_ASSERT_EQUAL(st.host_entries, nhost);
    CU_ASSERT_EQUAL(st.nvme_entries, nn);
    CU_ASSERT_EQUAL(st.hbm.blocks, nh);      /* no device block besides the copies */
    CU_ASSERT_EQUAL(st.arena.blocks, nhost); /* no host block besides the copies */
    CU_ASSERT_EQUAL(st.hbm.used, hbm_bytes);
    if (st.nvme.entries != nn)
        printf("\n    NVMe tier holds %llu entries, the store counts %llu",
               (unsigned long long)st.nvme.entries, (unsigned long long)nn);
    if (st.nvme.entries || nn) CU_ASSERT_EQUAL(st.nvme.entries, nn);
}

/* ===== cases ====================================================================== */

/* Commit: hbm when its admitter agrees (host too when the host admitter
 * does), host when only host agrees, nothing when nobody does; *placed is
 * the highest tier; device and host leases read the same bytes. */
static void test_commit_lands_in_hbm(void)
{
    hy_store_config c = config(16, false);
    hy_store *s = open3(&c, 8, NULL);
    hy_tier_id where_to;
    CU_ASSERT_EQUAL(put(s, 1, MB, &where_to), 0);
    CU_ASSERT_EQUAL(where_to, HY_TIER_HBM);
    CU_ASSERT_EQUAL(where(s, 1), HBM | HOST);
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.hbm_entries, 1);
    CU_ASSERT_EQUAL(st.host_entries, 1);
    CU_ASSERT_EQUAL(st.hbm_placed, 1);
    CU_ASSERT_EQUAL(st.hbm.used, MB);
    CU_ASSERT_EQUAL(st.hbm.writes, 1);
    CU_ASSERT_EQUAL(dget_check(s, 1, MB), 0);
    CU_ASSERT_EQUAL(get_check(s, 1, MB), 0);
    st = stats(s);
    CU_ASSERT_EQUAL(st.hits_hbm, 1);  /* the device lease */
    CU_ASSERT_EQUAL(st.hits_host, 1); /* the host lease */
    CU_ASSERT_EQUAL(st.hbm.reads, 0); /* neither needed a copy */

    set_policy(s, HY_TIER_HOST, &REFUSE); /* hbm only */
    CU_ASSERT_EQUAL(put(s, 2, MB, &where_to), 0);
    CU_ASSERT_EQUAL(where_to, HY_TIER_HBM);
    CU_ASSERT_EQUAL(where(s, 2), HBM);
    CU_ASSERT_EQUAL(stats(s).arena.used, MB); /* entry 1's host copy alone */
    CU_ASSERT_EQUAL(dget_check(s, 2, MB), 0);

    set_policy(s, HY_TIER_HOST, &ACCEPT);
    set_policy(s, HY_TIER_HBM, &REFUSE); /* host only */
    CU_ASSERT_EQUAL(put(s, 3, MB, &where_to), 0);
    CU_ASSERT_EQUAL(where_to, HY_TIER_HOST);
    CU_ASSERT_EQUAL(where(s, 3), HOST);

    set_policy(s, HY_TIER_HOST, &REFUSE); /* nowhere: dropped, nothing kept */
    st = stats(s);
    CU_ASSERT_EQUAL(put(s, 4, MB, &where_to), 0);
    CU_ASSERT_EQUAL(where_to, HY_TIER_NONE);
    CU_ASSERT_EQUAL(where(s, 4), 0);
    hy_store_stats st2 = stats(s);
    CU_ASSERT_EQUAL(st2.puts_dropped, st.puts_dropped + 1);
    CU_ASSERT_EQUAL(st2.arena.used, st.arena.used);
    CU_ASSERT_EQUAL(st2.hbm.used, st.hbm.used);
    assert_consistent(s, 8);
    hy_store_close(s);
}

/* hbm full → its victims go down to host (bytes intact); host full → host
 * victims go down to NVMe; entry 0 travels hbm → host → nvme and reads back
 * byte-identical through host and device leases, each time from the tier it
 * is in. */
static void test_hbm_host_nvme_travel(void)
{
    hy_store_config c = config(4, true);
    c.host_policy = REFUSE; /* commits stay out of host: only demotions bring entries there */
    c.nvme_policy = REFUSE;
    hy_store *s = open3(&c, 3, NULL);
    hy_tier_id w;
    CU_ASSERT_EQUAL(put(s, 0, MB, &w), 0);
    CU_ASSERT_EQUAL(w, HY_TIER_HBM);
    CU_ASSERT_EQUAL(where(s, 0), HBM);
    set_policy(s, HY_TIER_NVME, &ACCEPT);
    CU_ASSERT_EQUAL(put(s, 1, MB, &w), 0);
    CU_ASSERT_EQUAL(put(s, 2, MB, &w), 0);
    CU_ASSERT_EQUAL(where(s, 1), HBM | NVME); /* host refused: NVMe took the commit */
    CU_ASSERT_EQUAL(where(s, 0), HBM);
    CU_ASSERT_EQUAL(put(s, 3, MB, &w), 0); /* hbm full: 0, the LRU, goes down */
    CU_ASSERT_EQUAL(where(s, 0), HOST);
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.hbm_demotions, 1);
    CU_ASSERT_EQUAL(st.hbm_evictions, 1);
    uint64_t n = 4;
    for (; n < 16 && where(s, 0) == HOST; n++) CU_ASSERT_EQUAL(put(s, n, MB, &w), 0);
    CU_ASSERT_EQUAL(where(s, 0), NVME); /* host full: 0, its LRU, went to NVMe */
    st = stats(s);
    printf("\n    entry 0 reached NVMe after %llu puts: %llu hbm demotions, %llu host demotions",
           (unsigned long long)n, (unsigned long long)st.hbm_demotions,
           (unsigned long long)st.demotions);
    CU_ASSERT(st.hbm_demotions >= 3);
    CU_ASSERT(st.demotions >= 1);

    CU_ASSERT_EQUAL(get_check(s, 0, MB), 0); /* from NVMe; host refuses: a temporary block */
    CU_ASSERT_EQUAL(where(s, 0), NVME);
    CU_ASSERT_EQUAL(stats(s).hits_nvme, st.hits_nvme + 1);
    CU_ASSERT_EQUAL(dget_check(s, 0, MB), 0); /* NVMe → host → hbm, admitted */
    CU_ASSERT_EQUAL(where(s, 0), HBM | NVME);
    hy_store_stats st2 = stats(s);
    CU_ASSERT_EQUAL(st2.hits_nvme, st.hits_nvme + 2);
    CU_ASSERT_EQUAL(st2.hbm_promotions, st.hbm_promotions + 1);
    CU_ASSERT_EQUAL(get_check(s, 0, MB), 0); /* copied down from hbm */
    hy_store_stats st3 = stats(s);
    CU_ASSERT_EQUAL(st3.hits_hbm, st2.hits_hbm + 1);
    CU_ASSERT_EQUAL(st3.hbm_copies_down, st2.hbm_copies_down + 1);
    for (uint64_t k = 0; k < n; k++) {
        CU_ASSERT_EQUAL(get_check(s, k, MB), 0);
        CU_ASSERT_EQUAL(dget_check(s, k, MB), 0);
    }
    assert_consistent(s, n);
    hy_store_close(s);
}

/* Host victims that still have an hbm copy lose only their host copy (no
 * NVMe here to demote to): the entry lives on in hbm and reads back. */
static void test_host_eviction_keeps_hbm_copy(void)
{
    hy_store_config c = config(2, false);
    hy_store *s = open3(&c, 8, NULL);
    CU_ASSERT_EQUAL(put(s, 1, MB, NULL), 0);
    CU_ASSERT_EQUAL(put(s, 2, MB, NULL), 0);
    CU_ASSERT_EQUAL(where(s, 1), HBM | HOST);
    CU_ASSERT_EQUAL(put(s, 3, MB, NULL), 0); /* host full: 1, its LRU, loses its host copy */
    CU_ASSERT_EQUAL(where(s, 1), HBM);
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.entries, 3);
    CU_ASSERT_EQUAL(st.evictions, 1);
    CU_ASSERT_EQUAL(dget_check(s, 1, MB), 0);
    CU_ASSERT_EQUAL(get_check(s, 1, MB), 0); /* copied down, kept: evicts 2's host copy */
    CU_ASSERT_EQUAL(where(s, 2), HBM);
    assert_consistent(s, 4);
    hy_store_close(s);
}

/* A device lease pins the hbm block: ten puts through a two-block hbm tier
 * never evict it; with every hbm block leased a put skips hbm and a device
 * acquire fails cleanly; after the releases both work. */
static void test_device_lease_blocks_eviction(void)
{
    hy_store_config c = config(16, false);
    hy_store *s = open3(&c, 2, NULL);
    CU_ASSERT_EQUAL(put(s, 10, MB, NULL), 0);
    hy_key k10 = key_of(10), k20 = key_of(20), k11 = key_of(11);
    hy_lease *l10, *l20, *l;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k10, &l10, &e), 0);
    void *p10 = hy_lease_device_ptr(l10);
    for (uint64_t n = 11; n <= 20; n++) {
        hy_tier_id w;
        CU_ASSERT_EQUAL(put(s, n, MB, &w), 0);
        CU_ASSERT_EQUAL(w, HY_TIER_HBM);
        CU_ASSERT(where(s, 10) & HBM);
    }
    CU_ASSERT(stats(s).hbm_evictions >= 9);
    CU_ASSERT_PTR_EQUAL(hy_lease_device_ptr(l10), p10);
    CU_ASSERT(dev_check(p10, 10, MB));
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k20, &l20, &e), 0); /* hbm: 10, 20 leased */
    hy_tier_id w;
    CU_ASSERT_EQUAL(put(s, 21, MB, &w), 0);
    CU_ASSERT_EQUAL(w, HY_TIER_HOST); /* no hbm room: the put skips the tier, no error */
    CU_ASSERT_EQUAL(hy_store_acquire_device(s, &k11, &l, &e), HY_ENOMEM);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "leased"));
    CU_ASSERT_EQUAL(stats(s).hbm.used, 2 * MB); /* the failed acquire left nothing behind */
    hy_store_release(s, l10);
    hy_store_release(s, l20);
    CU_ASSERT_EQUAL(dget_check(s, 11, MB), 0);
    CU_ASSERT(where(s, 11) & HBM);
    assert_consistent(s, 32);
    hy_store_close(s);
}

/* Invalidation while device-leased: gone from lookups at once, the device
 * bytes intact until the release, which frees them (and the host copy). A
 * replace while leased likewise leaves the old bytes to the old lease. */
static void test_invalidate_while_device_leased(void)
{
    hy_store_config c = config(16, false);
    hy_store *s = open3(&c, 8, NULL);
    CU_ASSERT_EQUAL(put(s, 5, MB, NULL), 0);
    hy_key k = key_of(5);
    hy_lease *l, *l2;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k, &l, &e), 0);
    hy_store_filter f = {.key = &k};
    size_t removed = 0;
    CU_ASSERT_EQUAL(hy_store_invalidate(s, &f, &removed, &e), 0);
    CU_ASSERT_EQUAL(removed, 1);
    CU_ASSERT_EQUAL(hy_store_acquire(s, &k, &l2, &e), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(hy_store_acquire_device(s, &k, &l2, &e), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(where(s, 5), 0);
    CU_ASSERT(dev_check(hy_lease_device_ptr(l), 5, MB));
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.hbm_entries, 0);
    CU_ASSERT_EQUAL(st.hbm.used, MB); /* still the lease's */
    CU_ASSERT_EQUAL(st.arena.used, MB);
    hy_store_release(s, l);
    st = stats(s);
    CU_ASSERT_EQUAL(st.hbm.used, 0);
    CU_ASSERT_EQUAL(st.arena.used, 0);

    CU_ASSERT_EQUAL(put(s, 6, MB, NULL), 0);
    k = key_of(6);
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k, &l, &e), 0);
    CU_ASSERT_EQUAL(put(s, 6, 2 * MB, NULL), 0); /* replaced while leased */
    CU_ASSERT(dev_check(hy_lease_device_ptr(l), 6, MB));
    CU_ASSERT_EQUAL(dget_check(s, 6, 2 * MB), 0);
    hy_store_release(s, l);
    CU_ASSERT_EQUAL(stats(s).hbm.used, 2 * MB);
    assert_consistent(s, 8);
    hy_store_close(s);
}

/* A device acquire promotes a host-only entry and an NVMe-only one into hbm
 * (the latter through host, checksums verified); the next is an hbm hit. */
static void test_device_acquire_promotes(void)
{
    hy_store_config c = config(8, true);
    c.hbm_policy = REFUSE;
    hy_store *s = open3(&c, 8, NULL);
    hy_tier_id w;
    CU_ASSERT_EQUAL(put(s, 1, MB, &w), 0);
    CU_ASSERT_EQUAL(w, HY_TIER_HOST);
    set_policy(s, HY_TIER_HOST, &REFUSE);
    CU_ASSERT_EQUAL(put(s, 2, MB, &w), 0);
    CU_ASSERT_EQUAL(w, HY_TIER_NVME);
    CU_ASSERT_EQUAL(where(s, 1), HOST);
    CU_ASSERT_EQUAL(where(s, 2), NVME);
    set_policy(s, HY_TIER_HOST, &ACCEPT);
    set_policy(s, HY_TIER_HBM, &ACCEPT);

    CU_ASSERT_EQUAL(dget_check(s, 1, MB), 0);
    CU_ASSERT_EQUAL(where(s, 1), HBM | HOST);
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.hits_host, 1);
    CU_ASSERT_EQUAL(st.hbm_promotions, 1);

    CU_ASSERT_EQUAL(dget_check(s, 2, MB), 0);
    CU_ASSERT_EQUAL(where(s, 2), HBM | HOST | NVME); /* host admitted the promotion too */
    st = stats(s);
    CU_ASSERT_EQUAL(st.hits_nvme, 1);
    CU_ASSERT_EQUAL(st.promotions, 1); /* NVMe → host */
    CU_ASSERT_EQUAL(st.hbm_promotions, 2);
    CU_ASSERT_EQUAL(st.nvme.reads, 1);

    CU_ASSERT_EQUAL(dget_check(s, 2, MB), 0);
    st = stats(s);
    CU_ASSERT_EQUAL(st.hits_hbm, 1);
    CU_ASSERT_EQUAL(st.hbm.writes, 2); /* the hit copied nothing */
    assert_consistent(s, 4);
    hy_store_close(s);
}

/* With the hbm admitter refusing, a device lease gets a temporary device
 * block (and, for an NVMe-only entry, a temporary host block on the way),
 * all freed with the lease; the entry's residency does not change. */
static void test_hbm_refusal_uses_temporary_block(void)
{
    hy_store_config c = config(8, true);
    c.hbm_policy = REFUSE;
    hy_store *s = open3(&c, 8, NULL);
    CU_ASSERT_EQUAL(put(s, 1, MB, NULL), 0);
    hy_key k = key_of(1);
    hy_lease *a, *b;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k, &b, &e), 0);
    CU_ASSERT(dev_check(hy_lease_device_ptr(a), 1, MB));
    CU_ASSERT(dev_check(hy_lease_device_ptr(b), 1, MB));
    CU_ASSERT_PTR_NOT_EQUAL(hy_lease_device_ptr(a), hy_lease_device_ptr(b));
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(where(s, 1), HOST);
    CU_ASSERT_EQUAL(st.hbm_entries, 0);
    CU_ASSERT_EQUAL(st.hbm.used, 2 * MB);
    CU_ASSERT_EQUAL(st.hbm_tmp_leases, 2);
    hy_store_release(s, a);
    CU_ASSERT_EQUAL(stats(s).hbm.used, MB);
    hy_store_release(s, b);
    CU_ASSERT_EQUAL(stats(s).hbm.used, 0);

    set_policy(s, HY_TIER_HOST, &REFUSE);
    CU_ASSERT_EQUAL(put(s, 2, MB, NULL), 0); /* NVMe only */
    k = key_of(2);
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k, &a, &e), 0);
    CU_ASSERT(dev_check(hy_lease_device_ptr(a), 2, MB));
    st = stats(s);
    CU_ASSERT_EQUAL(st.arena.used, MB); /* entry 1 alone: the host staging block went */
    CU_ASSERT_EQUAL(st.hbm.used, MB);
    CU_ASSERT_EQUAL(where(s, 2), NVME);
    hy_store_release(s, a);
    CU_ASSERT_EQUAL(stats(s).hbm.used, 0);
    assert_consistent(s, 4);
    hy_store_close(s);
}

/* A host lease on an entry held only in hbm copies it down: into a
 * temporary block while the host admitter refuses, into a host copy once it
 * agrees. */
static void test_host_lease_copies_down(void)
{
    hy_store_config c = config(8, false);
    c.host_policy = REFUSE;
    hy_store *s = open3(&c, 8, NULL);
    CU_ASSERT_EQUAL(put(s, 1, MB, NULL), 0);
    CU_ASSERT_EQUAL(where(s, 1), HBM);
    hy_key k = key_of(1);
    hy_lease *l;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire(s, &k, &l, &e), 0);
    CU_ASSERT(check(hy_lease_data(l), 1, MB));
    CU_ASSERT_PTR_NULL(hy_lease_device_ptr(l));
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.arena.used, MB); /* the lease's temporary block */
    CU_ASSERT_EQUAL(st.hits_hbm, 1);
    CU_ASSERT_EQUAL(st.hbm_copies_down, 1);
    CU_ASSERT_EQUAL(st.hbm.reads, 1);
    hy_store_release(s, l);
    CU_ASSERT_EQUAL(stats(s).arena.used, 0);
    CU_ASSERT_EQUAL(where(s, 1), HBM);

    set_policy(s, HY_TIER_HOST, &ACCEPT);
    CU_ASSERT_EQUAL(get_check(s, 1, MB), 0);
    CU_ASSERT_EQUAL(where(s, 1), HBM | HOST);
    CU_ASSERT_EQUAL(stats(s).arena.used, MB); /* kept as the host copy */
    CU_ASSERT_EQUAL(get_check(s, 1, MB), 0);
    st = stats(s);
    CU_ASSERT_EQUAL(st.hits_host, 1);
    CU_ASSERT_EQUAL(st.hbm.reads, 2);
    assert_consistent(s, 4);
    hy_store_close(s);
}

/* Failed hbm copies (injected into the double) cost the tier, never the
 * entry: a commit skips hbm, a device acquire fails and leaks nothing, a
 * victim that cannot be copied down stays in hbm. */
static void test_hbm_faults_skip_the_tier(void)
{
    hy_store_config c = config(8, false);
    fake_hbm *f;
    hy_store *s = open3(&c, 1, &f);
    hy_tier_id w;
    f->fail_writes = 1;
    CU_ASSERT_EQUAL(put(s, 1, MB, &w), 0);
    CU_ASSERT_EQUAL(w, HY_TIER_HOST);
    CU_ASSERT_EQUAL(stats(s).hbm.used, 0);
    f->fail_writes = 1;
    CU_ASSERT_EQUAL(dget_check(s, 1, MB), HY_EIO);
    CU_ASSERT_EQUAL(stats(s).hbm.used, 0);
    CU_ASSERT_EQUAL(where(s, 1), HOST);
    CU_ASSERT_EQUAL(dget_check(s, 1, MB), 0); /* the next one works */
    CU_ASSERT_EQUAL(where(s, 1), HBM | HOST);

    set_policy(s, HY_TIER_HOST, &REFUSE);
    CU_ASSERT_EQUAL(put(s, 2, MB, &w), 0); /* evicts 1's hbm copy (host has it) */
    CU_ASSERT_EQUAL(where(s, 2), HBM);
    CU_ASSERT_EQUAL(where(s, 1), HOST);
    f->fail_reads = 1;
    CU_ASSERT_EQUAL(get_check(s, 2, MB), HY_EIO);
    CU_ASSERT_EQUAL(stats(s).arena.used, MB); /* entry 1 alone */
    set_policy(s, HY_TIER_HOST, &ACCEPT);
    f->fail_reads = 1;
    CU_ASSERT_EQUAL(put(s, 3, MB, &w), 0); /* 2 cannot go down: it stays, 3 skips hbm */
    CU_ASSERT_EQUAL(w, HY_TIER_HOST);
    CU_ASSERT_EQUAL(where(s, 2), HBM);
    CU_ASSERT_EQUAL(get_check(s, 2, MB), 0);
    assert_consistent(s, 4);
    hy_store_close(s);
}

/* A few hundred mixed operations with the recommended policies (gdsf +
 * tinylfu in hbm and host): the hit counters add up to the acquires served,
 * the misses to those that were not, and the per-tier counts to what the
 * index says. */
static void test_stats_add_up(void)
{
    hy_store_config c = config(6, true);
    hy_store_config d;
    hy_store_config_default(&d, c.host_bytes, c.nvme_dir);
    c.host_policy = d.host_policy;
    c.hbm_policy = d.hbm_policy;
    hy_store *s = open3(&c, 3, NULL);
    hy_rng r;
    hy_rng_seed(&r, 7);
    uint64_t served = 0, missed = 0, gone = 0;
    for (int i = 0; i < 400; i++) {
        const uint64_t n = hy_rng_next(&r) % 24;
        const size_t bytes = (size_t)(256 * 1024 + (n % 5) * 200 * 1024);
        const int op = (int)(hy_rng_next(&r) % 10);
        int rc = 0;
        if (op < 3) {
            CU_ASSERT_EQUAL(put(s, n, bytes, NULL), 0);
            continue;
        } else if (op < 6) {
            rc = get_check(s, n, bytes);
        } else if (op < 9) {
            rc = dget_check(s, n, bytes);
        } else {
            hy_key k = key_of(n);
            hy_store_filter f = {.key = &k};
            size_t removed;
            hy_err e = {0};
            hy_store_invalidate(s, &f, &removed, &e);
            gone += removed;
            continue;
        }
        CU_ASSERT(rc == 0 || rc == HY_ENOTFOUND);
        served += rc == 0;
        missed += rc == HY_ENOTFOUND;
    }
    hy_store_stats st = stats(s);
    printf("\n    %llu served (%llu hbm, %llu host, %llu nvme), %llu misses; %llu placed in hbm, "
           "%llu promoted, %llu demoted",
           (unsigned long long)served, (unsigned long long)st.hits_hbm,
           (unsigned long long)st.hits_host, (unsigned long long)st.hits_nvme,
           (unsigned long long)missed, (unsigned long long)st.hbm_placed,
           (unsigned long long)st.hbm_promotions, (unsigned long long)st.hbm_demotions);
    CU_ASSERT_EQUAL(st.hits_hbm + st.hits_host + st.hits_nvme, served);
    CU_ASSERT_EQUAL(st.misses, missed);
    CU_ASSERT_EQUAL(st.invalidated, gone);
    CU_ASSERT(st.hits_hbm > 0 && st.hits_host > 0);
    assert_consistent(s, 24);
    hy_store_close(s);
}

/* --- stress: threads putting, leasing (host and device) and invalidating ----------- */

typedef struct stress {
    hy_store *s;
    int seed;
    int bad, ops, device_leases;
} stress;

static size_t stress_bytes(uint64_t n)
{
    return (size_t)(64 * 1024 + (n % 7) * 300 * 1024);
}

static void *stress_run(void *arg)
{
    stress *w = arg;
    hy_rng r;
    hy_rng_seed(&r, (uint64_t)w->seed);
    const double end = hy_now_s() + 2.0;
    while (hy_now_s() < end) {
        const uint64_t n = hy_rng_next(&r) % 40;
        const size_t bytes = stress_bytes(n);
        const int op = (int)(hy_rng_next(&r) % 20);
        hy_key k = key_of(n);
        hy_lease *l;
        hy_err e = {0};
        if (op < 5) {
            put(w->s, n, bytes, NULL);
        } else if (op < 11) {
            if (hy_store_acquire(w->s, &k, &l, &e) == 0) {
                if (!check(hy_lease_data(l), n, bytes)) w->bad++;
                hy_store_release(w->s, l);
            }
        } else if (op < 19) {
            int rc = hy_store_acquire_device(w->s, &k, &l, &e);
            if (rc == 0) {
                w->device_leases++;
                if (!dev_check(hy_lease_device_ptr(l), n, bytes)) w->bad++;
                hy_store_release(w->s, l);
            } else if (rc != HY_ENOTFOUND && rc != HY_ENOMEM) {
                w->bad++; /* ENOMEM: hbm full of other threads' leases, allowed */
            }
        } else {
            hy_store_filter f = {.key = &k};
            hy_store_invalidate(w->s, &f, NULL, &e);
        }
        w->ops++;
    }
    return NULL;
}

static void test_threads_stress(void)
{
    hy_store_config c = config(6, true);
    c.high_watermark = 0.9, c.low_watermark = 0.75; /* the mover runs too */
    /* hbm admits half the keys (tokens = 100 + n % 400, n < 40): the rest get
     * temporary device blocks */
    c.hbm_policy =
        (hy_policy_config){.evict = HY_EVICT_LRU, .admit = HY_ADMIT_MIN_TOKENS, .min_tokens = 120};
    hy_store *s = open3(&c, 3, NULL);
    pthread_t th[4];
    stress w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (stress){.s = s, .seed = i + 1};
        pthread_create(&th[i], NULL, stress_run, &w[i]);
    }
    int bad = 0, ops = 0, dl = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += w[i].bad, ops += w[i].ops, dl += w[i].device_leases;
    }
    hy_store_stats st = stats(s);
    printf("\n    4 threads, %d operations (%d device leases): %d bad; hbm: %llu placed, %llu "
           "promoted, %llu demoted, %llu temporary; host: %llu demotions, %llu promotions",
           ops, dl, bad, (unsigned long long)st.hbm_placed, (unsigned long long)st.hbm_promotions,
           (unsigned long long)st.hbm_demotions, (unsigned long long)st.hbm_tmp_leases,
           (unsigned long long)st.demotions, (unsigned long long)st.promotions);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(ops > 100);
    CU_ASSERT(dl > 10);
    CU_ASSERT(st.hbm_demotions > 0);
    CU_ASSERT(st.hbm_tmp_leases > 0);
    for (int i = 0; i < 200 && stats(s).moves_done < stats(s).moves_queued; i++) usleep(10000);
    assert_consistent(s, 40);
    hy_store_close(s);
}

/* --- NVMe puts of one key that wait for each other ----------------------------------
 * The store writes the puts of one key one at a time, so a put may wait for
 * another; the entry it writes may be replaced, or given its NVMe copy by
 * another thread, meanwhile. These cases force such interleavings with the
 * store's nvme_put_hook (store_internal.h): a gate that holds the first put
 * of one key in flight until the test opens it, and counts that key's puts. */

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hy_key key;
    int puts; /* puts of key that reached the hook */
    bool open;
} gate;

static void gate_hook(void *ctx, const hy_key *key)
{
    gate *g = ctx;
    pthread_mutex_lock(&g->mu);
    if (memcmp(key->b, g->key.b, HY_KEY_BYTES) == 0) {
        const bool first = g->puts++ == 0;
        while (first && !g->open) pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
}

static void gate_install(hy_store *s, gate *g, uint64_t n)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->key = key_of(n);
    s->nvme_put_hook = gate_hook, s->nvme_put_hook_ctx = g;
}

static int gate_puts(gate *g)
{
    pthread_mutex_lock(&g->mu);
    int n = g->puts;
    pthread_mutex_unlock(&g->mu);
    return n;
}

static void gate_open(gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

/* Polls cond(s, arg) for up to 10 s. */
static bool eventually(bool (*cond)(hy_store *, uint64_t), hy_store *s, uint64_t arg)
{
    for (int i = 0; i < 10000; i++) {
        if (cond(s, arg)) return true;
        usleep(1000);
    }
    return false;
}

static bool gate_held(hy_store *s, uint64_t unused)
{
    (void)unused;
    return gate_puts(s->nvme_put_hook_ctx) >= 1;
}

/* The store counts n host evictions. The count rises in the same hold of
 * the store's lock that ends in the demotion's wait for the key's put in
 * flight, so seeing it (under that lock) means the demotion waits. */
static bool evicted(hy_store *s, uint64_t n)
{
    return stats(s).evictions >= n;
}

/* Entry 1 is pinned `want` times: a pin and the wait for the key's put in
 * flight happen in one hold of the store's lock, as above. */
static bool pinned(hy_store *s, uint64_t want)
{
    const hy_key k = key_of(1);
    pthread_mutex_lock(&s->mu);
    const obj *o = st_find_key(s, &k);
    const bool yes = o && o->pins >= (int)want;
    pthread_mutex_unlock(&s->mu);
    return yes;
}

typedef struct job {
    hy_store *s;
    hy_put *p; /* commit_job: the reservation to commit */
    uint64_t n;
    size_t bytes, written;
    int rc;
} job;

static void *commit_job(void *arg)
{
    job *j = arg;
    hy_err e = {0};
    j->rc = hy_store_commit(j->s, j->p, NULL, &e);
    return NULL;
}

static void *put_job(void *arg)
{
    job *j = arg;
    j->rc = put(j->s, j->n, j->bytes, NULL);
    return NULL;
}

static void *flush_job(void *arg)
{
    job *j = arg;
    hy_err e = {0};
    j->rc = hy_store_flush(j->s, &j->written, &e);
    return NULL;
}

/* Entry 1 is being demoted (host → NVMe) while its replacement's write-through
 * put of the same key is in flight: the demotion waits for that put, and by
 * then entry 1 is replaced. Writing its bytes anyway would overwrite the
 * replacement's record, and removing that record afterwards (entry 1 being
 * dead) would leave the store counting an NVMe copy the tier does not hold.
 * The demotion must write nothing; the replacement's bytes survive a
 * restart. */
static void test_replaced_demotion_not_written(void)
{
    hy_store_config c = config(6, true);
    c.write_through = true;
    c.nvme_policy = REFUSE; /* entries 1-4 go to host only */
    hy_store *s;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_open(&c, &s, &e), 0);
    for (uint64_t n = 1; n <= 4; n++) CU_ASSERT_EQUAL_FATAL(put(s, n, MB, NULL), 0);
    set_policy(s, HY_TIER_NVME, &ACCEPT); /* commits write through from here on */
    gate g;
    gate_install(s, &g, 1);

    /* the replacement (2 MiB: another payload) fills the host tier; its put is held */
    hy_meta m = meta_of(1, 2 * MB);
    void *buf;
    job rep = {.s = s}, other = {.s = s, .n = 5, .bytes = MB};
    CU_ASSERT_EQUAL_FATAL(hy_store_reserve(s, &m, &rep.p, &buf, &e), 0);
    fill(buf, 1, 2 * MB);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, commit_job, &rep);
    CU_ASSERT_FATAL(eventually(gate_held, s, 0));
    /* entry 5 needs room: entry 1, the oldest, is demoted and waits for the held put */
    pthread_create(&t2, NULL, put_job, &other);
    CU_ASSERT_FATAL(eventually(evicted, s, 1));
    gate_open(&g);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CU_ASSERT_EQUAL(rep.rc, 0);
    CU_ASSERT_EQUAL(other.rc, 0);
    CU_ASSERT_EQUAL(gate_puts(&g), 1); /* the replaced entry's bytes were never written */
    CU_ASSERT_EQUAL(stats(s).demotions, 0);
    CU_ASSERT_EQUAL(where(s, 1), HOST | NVME);
    CU_ASSERT_EQUAL(get_check(s, 1, 2 * MB), 0);
    assert_consistent(s, 8);
    hy_store_close(s);

    CU_ASSERT_EQUAL_FATAL(hy_store_open(&c, &s, &e), 0); /* NVMe alone serves it now */
    CU_ASSERT_EQUAL(where(s, 1), NVME);
    CU_ASSERT_EQUAL(get_check(s, 1, 2 * MB), 0);
    assert_consistent(s, 8);
    hy_store_close(s);
}

/* hy_store_flush reaches entry 1 while its demotion's put is in flight: it
 * waits for that put, then finds the NVMe copy there, writes nothing more and
 * does not count the copy twice. */
static void test_flush_behind_demotion(void)
{
    hy_store_config c = config(4, true);
    hy_store *s;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_open(&c, &s, &e), 0);
    for (uint64_t n = 1; n <= 4; n++) CU_ASSERT_EQUAL_FATAL(put(s, n, MB, NULL), 0);
    CU_ASSERT_EQUAL(where(s, 1), HOST);
    gate g;
    gate_install(s, &g, 1);
    job other = {.s = s, .n = 5, .bytes = MB}, fl = {.s = s};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, put_job, &other); /* demotes entry 1; its put is held */
    CU_ASSERT_FATAL(eventually(gate_held, s, 0));
    pthread_create(&t2, NULL, flush_job, &fl);
    CU_ASSERT_FATAL(eventually(pinned, s, 2)); /* the demotion's pin and the flush's */
    gate_open(&g);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CU_ASSERT_EQUAL(other.rc, 0);
    CU_ASSERT_EQUAL(fl.rc, 0);
    CU_ASSERT_EQUAL(gate_puts(&g), 1); /* entry 1 written once, by its demotion */
    /* entries 2-5 at most: entry 5 may be committed while the flush walks the index (in an
     * order the index's random seed picks); entry 1 is not the flush's (gate_puts above) */
    CU_ASSERT(fl.written <= 4);
    CU_ASSERT_EQUAL(stats(s).demotions + fl.written, stats(s).nvme_entries);
    CU_ASSERT(where(s, 1) & NVME);
    CU_ASSERT_EQUAL(get_check(s, 1, MB), 0);
    assert_consistent(s, 8);
    hy_store_close(s);
}

static bool demoted(hy_store *s, uint64_t n)
{
    return stats(s).demotions >= n;
}

/* A reservation needing contiguous room finds no host victim left while
 * another thread's demotion is in flight, its block in the way (the victim is
 * out of the evictor while it moves): the reservation waits for that
 * demotion to land instead of failing with "every resident entry is
 * leased". Host (4 MiB): entry 1 at 0, 2 at 1 MiB, 3 (2 MiB) at 2 MiB. */
static void test_reserve_waits_for_demotion(void)
{
    hy_store_config c = config(4, true);
    hy_store *s;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_open(&c, &s, &e), 0);
    CU_ASSERT_EQUAL_FATAL(put(s, 1, MB, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(put(s, 2, MB, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(put(s, 3, 2 * MB, NULL), 0);
    CU_ASSERT_EQUAL(get_check(s, 1, MB), 0); /* LRU order now 2, 3, 1 */
    gate g;
    gate_install(s, &g, 2);
    job small = {.s = s, .n = 5, .bytes = MB}, big = {.s = s, .n = 6, .bytes = 3 * MB};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, put_job, &small); /* evicts 2: its demotion is held */
    CU_ASSERT_FATAL(eventually(gate_held, s, 0));
    /* demotes 3 and 1; the 3 MiB it needs are still split by entry 2's block */
    pthread_create(&t2, NULL, put_job, &big);
    CU_ASSERT_FATAL(eventually(demoted, s, 2));
    gate_open(&g);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CU_ASSERT_EQUAL(small.rc, 0);
    CU_ASSERT_EQUAL(big.rc, 0);
    for (uint64_t n = 1; n <= 3; n++) CU_ASSERT_EQUAL(where(s, n), NVME);
    CU_ASSERT_EQUAL(where(s, 5), HOST);
    CU_ASSERT_EQUAL(where(s, 6), HOST);
    CU_ASSERT_EQUAL(get_check(s, 6, 3 * MB), 0);
    assert_consistent(s, 8);
    hy_store_close(s);
}

/* --- without an hbm tier ------------------------------------------------------------ */

/* Not configured: device leases are refused saying so, the tier's policy
 * cannot be set, the default configuration keeps hbm off. Configured on a
 * machine without a device: the store opens without it and says why. */
static void test_no_hbm_tier(void)
{
    hy_store_config d;
    hy_store_config_default(&d, 8 * MB, NULL);
    CU_ASSERT_EQUAL(d.hbm_bytes, 0);
    CU_ASSERT_EQUAL(d.hbm_policy.evict, d.host_policy.evict);
    CU_ASSERT_EQUAL(d.hbm_policy.admit, d.host_policy.admit);
    hy_store_config c = config(8, false);
    hy_store *s;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_open(&c, &s, &e), 0);
    CU_ASSERT_EQUAL(put(s, 1, MB, NULL), 0);
    hy_key k = key_of(1);
    hy_lease *l;
    CU_ASSERT_EQUAL(hy_store_acquire_device(s, &k, &l, &e), HY_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "no hbm tier"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not configured"));
    CU_ASSERT_EQUAL(hy_store_set_policy(s, HY_TIER_HBM, &ACCEPT, &e), HY_EINVAL);
    hy_store_stats st = stats(s);
    CU_ASSERT(!st.hbm_present);
    CU_ASSERT_EQUAL(st.hbm.capacity, 0);
    CU_ASSERT(!st.arena.pinned);
    hy_store_close(s);

    c.hbm_bytes = 64 * MB;
    CU_ASSERT_EQUAL_FATAL(hy_store_open(&c, &s, &e), 0);
    st = stats(s);
    if (!hy_hbm_available(NULL, 0)) {
        CU_ASSERT(!st.hbm_present);
        CU_ASSERT_PTR_NOT_NULL(strstr(st.hbm_why, g_why));
        CU_ASSERT_EQUAL(put(s, 1, MB, NULL), 0);
        CU_ASSERT_EQUAL(hy_store_acquire_device(s, &k, &l, &e), HY_EUNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, g_why));
        printf("\n    hbm_bytes set, no device: \"%s\"", st.hbm_why);
    } else {
        CU_ASSERT(st.hbm_present);
    }
    hy_store_close(s);
}

/* --- the real hbm tier --------------------------------------------------------------- */

static void test_real_hbm_skipped(void)
{
    printf("\n    SKIPPED: no CUDA device — the real_hbm cases need one (%s)\n", g_why);
    CU_PASS("no CUDA device");
}

/* The store pins its arena for the device and copies run by DMA; a commit
 * lands in hbm and a device lease's pointer holds the bytes (cudaMemcpy). */
static void test_real_hbm_pinned_commit(void)
{
    hy_store_config c = config(64, false);
    hy_store *s = open3(&c, 64, NULL);
    hy_store_stats st = stats(s);
    printf("\n    %s; host arena pinned: %s", st.hbm_why, st.arena.pinned ? "yes" : "NO");
    CU_ASSERT(st.arena.pinned);
    for (uint64_t n = 0; n < 4; n++) {
        hy_tier_id w;
        CU_ASSERT_EQUAL(put(s, n, 4 * MB + n * 4096, &w), 0);
        CU_ASSERT_EQUAL(w, HY_TIER_HBM);
    }
    for (uint64_t n = 0; n < 4; n++) CU_ASSERT_EQUAL(dget_check(s, n, 4 * MB + n * 4096), 0);
    st = stats(s);
    CU_ASSERT_EQUAL(st.hbm.writes, 4);
    CU_ASSERT_EQUAL(st.hbm.pageable, 0); /* every copy from pinned memory */
    if (st.hbm.write_ns)
        printf("\n    host→device %.1f GB/s",
               (double)st.hbm.bytes_written / (double)st.hbm.write_ns);
    hy_store_close(s);
}

/* The real tier through the paths the double covers: hbm → host demotion,
 * promotion back, copy down for a host lease, invalidation while leased. */
static void test_real_hbm_moves(void)
{
    hy_store_config c = config(32, false);
    c.host_policy = REFUSE;
    hy_store *s = open3(&c, 8, NULL);
    for (uint64_t n = 0; n < 4; n++) CU_ASSERT_EQUAL(put(s, n, 3 * MB, NULL), 0);
    CU_ASSERT_EQUAL(where(s, 0), HOST); /* demoted: hbm holds two of 3 MiB */
    CU_ASSERT_EQUAL(where(s, 3), HBM);
    CU_ASSERT(stats(s).hbm_demotions >= 2);
    CU_ASSERT_EQUAL(get_check(s, 0, 3 * MB), 0);
    CU_ASSERT_EQUAL(get_check(s, 3, 3 * MB), 0);  /* copied down */
    CU_ASSERT_EQUAL(dget_check(s, 0, 3 * MB), 0); /* promoted back */
    CU_ASSERT(where(s, 0) & HBM);
    hy_key k = key_of(0);
    hy_lease *l;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_store_acquire_device(s, &k, &l, &e), 0);
    hy_store_filter f = {.key = &k};
    CU_ASSERT_EQUAL(hy_store_invalidate(s, &f, NULL, &e), 0);
    CU_ASSERT(dev_check(hy_lease_device_ptr(l), 0, 3 * MB));
    hy_store_release(s, l);
    assert_consistent(s, 4);
    hy_store_close(s);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_tier_moves_", g_tmp, sizeof g_tmp)) return 1;
    const bool device = hy_hbm_available(g_why, sizeof g_why);
    printf("store with three tiers. double_* cases: a TEST DOUBLE (host memory) stands in for "
           "hbm; the product never emulates it. real_hbm_* cases: %s\n",
           device ? g_why : "SKIPPED: no CUDA device");
    static const hy_test_case dbl[] = {
        {"double_commit_lands_in_hbm", test_commit_lands_in_hbm},
        {"double_hbm_host_nvme_travel", test_hbm_host_nvme_travel},
        {"double_host_eviction_keeps_hbm_copy", test_host_eviction_keeps_hbm_copy},
        {"double_device_lease_blocks_eviction", test_device_lease_blocks_eviction},
        {"double_invalidate_while_device_leased", test_invalidate_while_device_leased},
        {"double_device_acquire_promotes", test_device_acquire_promotes},
        {"double_hbm_refusal_uses_temporary_block", test_hbm_refusal_uses_temporary_block},
        {"double_host_lease_copies_down", test_host_lease_copies_down},
        {"double_hbm_faults_skip_the_tier", test_hbm_faults_skip_the_tier},
        {"double_stats_add_up", test_stats_add_up},
        {"double_threads_stress", test_threads_stress},
        {"replaced_entry_demotion_not_written", test_replaced_demotion_not_written},
        {"flush_behind_demotion_counts_once", test_flush_behind_demotion},
        {"reserve_waits_for_demotion_in_flight", test_reserve_waits_for_demotion},
        {"no_hbm_tier", test_no_hbm_tier},
        {NULL, NULL},
    };
    int rc = hy_test_main("store, three tiers (test double for hbm)", dbl);
    g_real = device;
    static const hy_test_case real[] = {
        {"real_hbm_pinned_commit", test_real_hbm_pinned_commit},
        {"real_hbm_moves", test_real_hbm_moves},
        {"real_hbm_commit_lands_in_hbm", test_commit_lands_in_hbm},
        {"real_hbm_device_acquire_promotes", test_device_acquire_promotes},
        {"real_hbm_threads_stress", test_threads_stress},
        {NULL, NULL},
    };
    static const hy_test_case skipped[] = {
        {"real_hbm_skipped_no_cuda_device", test_real_hbm_skipped},
        {NULL, NULL},
    };
    rc |= hy_test_main(device ? "store, three tiers (real hbm)"
                              : "store, three tiers (no CUDA device)",
                       device ? real : skipped);
    hy_test_rmtree(g_tmp);
    return rc;
}
