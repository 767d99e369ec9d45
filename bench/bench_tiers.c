/*
 * hypic-bench tiers: the store's data paths against the limits they approach,
 * each ratio measured in the same run.
 *
 *   host    put (reserve, memcpy from a source buffer into the reservation,
 *           commit; no payload hash: checksums are computed when an entry
 *           goes to NVMe) and get
 *           (acquire, memcpy out of the lease, release) of 1, 16 and 64 MiB
 *           entries through hy_store (host tier only), against plain memcpy
 *           of the same sizes in the same access pattern (one source and two
 *           alternating destinations for puts, as the arena's first fit
 *           alternates between two blocks when an entry is replaced; one
 *           source and one destination for gets), between huge-page buffers
 *           as the arena's. The limit is memory bandwidth. XXH3 alone and
 *           memcpy followed by XXH3 of the copy (what a put would cost if
 *           commit hashed the payload) are timed too, for reference.
 *   nvme    hy_nvme_put and hy_nvme_get of the same sizes against raw
 *           O_DIRECT io_uring writes and reads of the same sizes to a
 *           preallocated file in the same directory: the same request size
 *           (2 MiB, NV_IO_PIECE in tiers/nvme_io.c), the same queue depth
 *           (32, the tier's default, passed explicitly) and, after every
 *           write, an fdatasync as the tier does. The limit is the device.
 *           What the tier adds: chunk checksums (XXH3 while a write's first
 *           requests are in flight; on a read, each chunk once its bytes have
 *           arrived, while later requests are in flight, with at most
 *           NV_READ_AHEAD past the completed prefix in flight, where raw keeps
 *           the whole entry in flight), a 4 KiB journal block in the same
 *           transfer and flush as the payload, and an unsynced catalog write
 *           (every 64th synced).
 *   catalog hy_nvme_lookup of random existing keys (an index in memory) and
 *           hy_store_acquire/release hits on host-resident entries, per
 *           second.
 *   hbm     with a CUDA device: the hbm tier's copies against cudaMemcpy on
 *           the same pinned buffer (bench_tiers_hbm.c; the link's limit).
 *
 * Each figure is the best of three timed passes after an untimed one (five
 * on the device); the tier and its raw counterpart alternate pass by pass.
 * Entries and the raw file live in a temporary directory under --dir
 * (default /tmp), removed at the end. Options: --dir DIR, --quick (smaller
 * passes; about 20 s instead of 50 on 2 cores), --smoke (the fewest
 * operations that still run every path: 4 entries of each size per pass and
 * 64 catalog entries, a few seconds; the figures are too noisy to read: it
 * is for checking that the benchmark still works).
 */
#include "bench.h"
#include "bench_tiers.h"
#include "hy_common.h"
#include "hy_tiers.h"
#include "nvme_internal.h" /* the NVMe tier alone, against raw I/O */

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MIB     (1ull << 20)
#define REPS    3          /* timed passes in memory */
#define IO_REPS 5          /* timed passes on the device, which varies more */
#define PIECE   (2u << 20) /* NV_IO_PIECE in tiers/nvme_io.c */
#define QDEPTH  32u        /* hy_nvme_config.queue_depth, the tier's default */
#define NSIZES  3
#define NLOOKUP 200000

static const uint64_t k_sizes[NSIZES] = {1 * MIB, 16 * MIB, 64 * MIB};
static const char *k_names[NSIZES] = {"1m", "16m", "64m"};

/* --- helpers ------------------------------------------------------------------ */

/* A 2 MiB-aligned buffer with transparent huge pages requested, touched so no
 * page fault lands in a timed loop (the arena does the same). */
static void *big_alloc(uint64_t bytes)
{
    const size_t len = (size_t)((bytes + 2 * MIB - 1) / (2 * MIB) * (2 * MIB));
    void *p = aligned_alloc(2 * MIB, len);
    if (!p) return NULL;
    madvise(p, len, MADV_HUGEPAGE);
    memset(p, 0x5a, len);
    return p;
}

static void fill_random(void *p, uint64_t bytes, hy_rng *r)
{
    uint64_t *w = p;
    for (uint64_t i = 0; i < bytes / 8; i++) w[i] = hy_rng_next(r);
}

static hy_key random_key(hy_rng *r)
{
    hy_key k;
    for (int i = 0; i < HY_KEY_BYTES; i += 8) {
        uint64_t v = hy_rng_next(r);
        memcpy(k.b + i, &v, 8);
    }
    return k;
}

static hy_meta make_meta(const hy_key *k, uint64_t bytes)
{
    hy_meta m;
    memset(&m, 0, sizeof m);
    m.key = *k;
    snprintf(m.tenant, sizeof m.tenant, "bench");
    m.bytes = bytes;
    m.tokens = 1024;
    return m;
}

static double gbs(uint64_t bytes, double s)
{
    return s > 0 ? (double)bytes / s / 1e9 : 0;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static int fail(const hy_err *e)
{
    fprintf(stderr, "hypic-bench tiers: %s\n", e->msg);
    return 1;
}

/* --- host tier ------------------------------------------------------------------ */

typedef struct host_result {
    double memcpy_put, memcpy_get; /* GB/s, the put's and the get's access pattern */
    double put, get, xxh3;         /* GB/s */
    double copy_hash;              /* GB/s of memcpy then XXH3 of the copy: a put's floor */
} host_result;

/* One size: n operations per pass, best of REPS passes after a warm-up. */
static int host_measure(hy_store *s, uint64_t S, uint64_t per_pass, void *src, void *dst2[2],
                        void *out, hy_rng *r, host_result *res, hy_err *e)
{
    const uint64_t n = HY_MAX(per_pass / S, 4);
    const hy_key key = random_key(r);
    const hy_meta m = make_meta(&key, S);
    double best[6] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
    volatile uint64_t sink = 0;
    for (int rep = 0; rep <= REPS; rep++) {
        double t[6];
        double t0 = hy_now_s();
        for (uint64_t i = 0; i < n; i++) memcpy(dst2[i & 1], src, S);
        t[0] = hy_now_s() - t0;

        t0 = hy_now_s();
        for (uint64_t i = 0; i < n; i++) memcpy(out, src, S);
        t[1] = hy_now_s() - t0;

        t0 = hy_now_s();
        for (uint64_t i = 0; i < n; i++) {
            hy_put *p;
            void *buf;
            int rc = hy_store_reserve(s, &m, &p, &buf, e);
            if (rc) return rc;
            memcpy(buf, src, S);
            hy_tier_id where;
            if ((rc = hy_store_commit(s, p, &where, e))) return rc;
            if (where != HY_TIER_HOST)
                return hy_err_set(e, HY_EINVAL, "a %llu-byte put was not placed in host",
                                  (unsigned long long)S);
        }
        t[2] = hy_now_s() - t0;

        t0 = hy_now_s();
        for (uint64_t i = 0; i < n; i++) {
            hy_lease *l;
            int rc = hy_store_acquire(s, &key, &l, e);
            if (rc) return rc;
            memcpy(out, hy_lease_data(l), S);
            hy_store_release(s, l);
        }
        t[3] = hy_now_s() - t0;

        t0 = hy_now_s();
        for (uint64_t i = 0; i < n; i++) sink += hy_xxh3(src, S);
        t[4] = hy_now_s() - t0;

        t0 = hy_now_s();
        for (uint64_t i = 0; i < n; i++) {
            memcpy(dst2[i & 1], src, S);
            sink += hy_xxh3(dst2[i & 1], S);
        }
        t[5] = hy_now_s() - t0;
        for (int j = 0; rep > 0 && j < 6; j++) best[j] = HY_MIN(best[j], t[j]);
    }
    (void)sink;
    const uint64_t bytes = n * S;
    *res = (host_result){gbs(bytes, best[0]), gbs(bytes, best[1]), gbs(bytes, best[2]),
                         gbs(bytes, best[3]), gbs(bytes, best[4]), gbs(bytes, best[5])};
    hy_store_filter f = {.key = &key};
    return hy_store_invalidate(s, &f, NULL, e);
}

/* --- raw O_DIRECT io_uring ----------------------------------------------------- */

/* Moves len bytes between buf and fd at off in PIECE requests, up to QDEPTH in
 * flight (as nv_io_transfer does). A short or failed request is an error. */
static int raw_transfer(struct io_uring *ring, int write, int fd, uint8_t *buf, uint64_t off,
                        uint64_t len, hy_err *e)
{
    uint64_t next = 0;
    unsigned inflight = 0;
    int bad = 0;
    while (next < len || inflight > 0) {
        while (next < len && inflight < QDEPTH) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            const unsigned n = (unsigned)HY_MIN(len - next, (uint64_t)PIECE);
            if (write)
                io_uring_prep_write(sqe, fd, buf + next, n, off + next);
            else
                io_uring_prep_read(sqe, fd, buf + next, n, off + next);
            io_uring_sqe_set_data64(sqe, n);
            next += n, inflight++;
        }
        int rc = io_uring_submit_and_wait(ring, 1);
        if (rc < 0 && rc != -EINTR) return hy_err_set(e, HY_EIO, "io_uring: %s", strerror(-rc));
        struct io_uring_cqe *cqe;
        while (io_uring_peek_cqe(ring, &cqe) == 0) {
            if (cqe->res < 0 || (uint64_t)cqe->res != io_uring_cqe_get_data64(cqe))
                bad = cqe->res < 0 ? cqe->res : -EIO;
            io_uring_cqe_seen(ring, cqe);
            inflight--;
        }
    }
    if (bad) return hy_err_set(e, HY_EIO, "raw %s: %s", write ? "write" : "read", strerror(-bad));
    if (write && fdatasync(fd) != 0) return hy_err_set(e, HY_EIO, "fdatasync: %s", strerror(errno));
    return HY_OK;
}

/* --- nvme tier ------------------------------------------------------------------- */

typedef struct nvme_result {
    double write, read, raw_write, raw_read;               /* GB/s */
    double put_ms, get_ms, raw_put_ms, raw_get_ms, sum_ms; /* per entry; sum: XXH3 of S */
} nvme_result;

/* One size: n entries per pass, written twice untimed (the second pass
 * replaces every entry, so extent creation and first writes to fallocated
 * space stay out of the timed passes; the raw file likewise is written once
 * first), then IO_REPS timed write and read passes alternating tier and raw. */
static int nvme_measure(hy_nvme *nv, int raw_fd, struct io_uring *ring, uint64_t S,
                        uint64_t per_pass, uint8_t *src, uint8_t *dst, hy_rng *r, nvme_result *res,
                        hy_err *e)
{
    const uint64_t n = HY_MAX(per_pass / S, 4);
    hy_key *keys = malloc(n * sizeof *keys);
    if (!keys) return hy_err_set(e, HY_ENOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++) keys[i] = random_key(r);
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    int rc = HY_OK;
    for (uint64_t i = 0; i < n && !rc; i++) rc = raw_transfer(ring, 1, raw_fd, src, i * S, S, e);
    for (int rep = -1; rep <= IO_REPS && !rc; rep++) {
        for (int k = 0; k < 2 && !rc; k++) {
            const bool raw = (k + rep) & 1; /* alternate which goes first */
            if (rep < 1 && raw) continue;   /* the raw file had its warm-up above */
            double t0 = hy_now_s();
            for (uint64_t i = 0; i < n && !rc; i++) {
                memcpy(src, &i, sizeof i); /* distinct payloads */
                if (raw) {
                    rc = raw_transfer(ring, 1, raw_fd, src, i * S, S, e);
                } else {
                    hy_meta m = make_meta(&keys[i], S);
                    rc = hy_nvme_put(nv, &m, src, e);
                }
            }
            if (rep > 0) best[raw ? 2 : 0] = HY_MIN(best[raw ? 2 : 0], hy_now_s() - t0);
        }
        for (int k = 0; k < 2 && !rc && rep > 0; k++) {
            const bool raw = (k + rep) & 1;
            double t0 = hy_now_s();
            for (uint64_t i = 0; i < n && !rc; i++)
                rc = raw ? raw_transfer(ring, 0, raw_fd, dst, i * S, S, e)
                         : hy_nvme_get(nv, &keys[i], dst, S, NULL, e);
            best[raw ? 3 : 1] = HY_MIN(best[raw ? 3 : 1], hy_now_s() - t0);
        }
    }
    double sum = 1e30;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < REPS && !rc; rep++) {
        double t0 = hy_now_s();
        for (uint64_t at = 0; at < S; at += MIB) sink += hy_xxh3(src + at, MIB);
        sum = HY_MIN(sum, hy_now_s() - t0);
    }
    (void)sink;
    for (uint64_t i = 0; i < n && !rc; i++) rc = hy_nvme_remove(nv, &keys[i], e);
    free(keys);
    if (rc) return rc;
    const uint64_t bytes = n * S;
    *res = (nvme_result){
        gbs(bytes, best[0]),       gbs(bytes, best[1]),       gbs(bytes, best[2]),
        gbs(bytes, best[3]),       best[0] / (double)n * 1e3, best[1] / (double)n * 1e3,
        best[2] / (double)n * 1e3, best[3] / (double)n * 1e3, sum * 1e3};
    return HY_OK;
}

/* --- index lookups (hy_nvme_lookup: the tier's in-memory index, no RocksDB read) ------- */

typedef struct lookup_result {
    double nvme_per_s, store_per_s, small_puts_per_s;
} lookup_result;

/* nentries 4 KiB entries in the nvme tier and in the host store; NLOOKUP
 * random hits on each, best of REPS. */
static int lookup_measure(hy_nvme *nv, hy_store *s, uint32_t nentries, uint8_t *page, hy_rng *r,
                          lookup_result *res, hy_err *e)
{
    hy_key *keys = malloc((size_t)nentries * sizeof *keys);
    uint32_t *order = malloc(NLOOKUP * sizeof *order);
    if (!keys || !order) {
        free(keys), free(order);
        return hy_err_set(e, HY_ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < nentries; i++) keys[i] = random_key(r);
    for (uint32_t i = 0; i < NLOOKUP; i++) order[i] = (uint32_t)(hy_rng_next(r) % nentries);
    int rc = HY_OK;
    double t0 = hy_now_s();
    for (uint32_t i = 0; i < nentries && !rc; i++) {
        hy_meta m = make_meta(&keys[i], HY_PAGE);
        rc = hy_nvme_put(nv, &m, page, e);
    }
    res->small_puts_per_s = nentries / (hy_now_s() - t0);
    for (uint32_t i = 0; i < nentries && !rc; i++) {
        hy_meta m = make_meta(&keys[i], HY_PAGE);
        hy_put *p;
        void *buf;
        if ((rc = hy_store_reserve(s, &m, &p, &buf, e))) break;
        memcpy(buf, page, HY_PAGE);
        rc = hy_store_commit(s, p, NULL, e);
    }
    double bn = 1e30, bs = 1e30;
    for (int rep = 0; rep <= REPS && !rc; rep++) {
        hy_meta m;
        t0 = hy_now_s();
        for (uint32_t i = 0; i < NLOOKUP && !rc; i++) rc = hy_nvme_lookup(nv, &keys[order[i]], &m);
        if (rc) rc = hy_err_set(e, rc, "hy_nvme_lookup of an existing key failed");
        if (rep > 0) bn = HY_MIN(bn, hy_now_s() - t0);
        t0 = hy_now_s();
        for (uint32_t i = 0; i < NLOOKUP && !rc; i++) {
            hy_lease *l;
            if ((rc = hy_store_acquire(s, &keys[order[i]], &l, e))) break;
            hy_store_release(s, l);
        }
        if (rep > 0) bs = HY_MIN(bs, hy_now_s() - t0);
    }
    hy_store_filter all = {0};
    if (!rc) rc = hy_store_invalidate(s, &all, NULL, e);
    free(keys), free(order);
    res->nvme_per_s = NLOOKUP / bn;
    res->store_per_s = NLOOKUP / bs;
    return rc;
}

/* --- the benchmark ---------------------------------------------------------------- */

typedef struct bufs {
    uint8_t *src, *dst2[2], *out;
} bufs;

static int run_host(bufs *b, uint64_t per_pass, hy_rng *r, host_result hr[NSIZES], hy_err *e)
{
    hy_store_config cfg = {.host_bytes = 4 * k_sizes[NSIZES - 1] + 64 * MIB};
    hy_store *s = NULL;
    int rc = hy_store_open(&cfg, &s, e);
    for (int i = 0; i < NSIZES && !rc; i++) {
        rc = host_measure(s, k_sizes[i], per_pass, b->src, (void **)b->dst2, b->out, r, &hr[i], e);
        if (!rc)
            printf("host %4llu MiB: memcpy %5.1f / %5.1f GB/s (put / get pattern), put %5.1f "
                   "(%.2f), get %5.1f (%.2f)\n"
                   "               XXH3 alone %5.1f GB/s; memcpy then XXH3 of the copy %5.1f "
                   "GB/s: put / that = %.2f\n",
                   (unsigned long long)(k_sizes[i] / MIB), hr[i].memcpy_put, hr[i].memcpy_get,
                   hr[i].put, hr[i].put / hr[i].memcpy_put, hr[i].get, hr[i].get / hr[i].memcpy_get,
                   hr[i].xxh3, hr[i].copy_hash, hr[i].put / hr[i].copy_hash);
        fflush(stdout);
    }
    hy_store_close(s);
    return rc;
}

static int run_nvme(const char *dir, bufs *b, uint64_t per_pass, uint32_t nlookup, hy_rng *r,
                    nvme_result nr[NSIZES], lookup_result *lr, hy_err *e)
{
    char tier[4200], raw[4200];
    snprintf(tier, sizeof tier, "%s/tier", dir);
    snprintf(raw, sizeof raw, "%s/raw.dat", dir);
    uint64_t raw_bytes = 0; /* the largest pass: n entries of one size, as nvme_measure */
    for (int i = 0; i < NSIZES; i++)
        raw_bytes = HY_MAX(raw_bytes, HY_MAX(per_pass / k_sizes[i], 4) * k_sizes[i]);
    hy_nvme_config nc = {.extent_bytes = 256 * MIB, .max_extents = 64, .queue_depth = QDEPTH};
    hy_nvme *nv = NULL;
    struct io_uring ring;
    int fd = -1, ring_ok = 0, rc = hy_nvme_open(tier, &nc, &nv, e);
    if (!rc) {
        fd = open(raw, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
        if (fd < 0 || fallocate(fd, 0, 0, (off_t)raw_bytes) != 0 || fsync(fd) != 0)
            rc = hy_err_set(e, HY_EIO, "preallocating %s (O_DIRECT): %s", raw, strerror(errno));
    }
    if (!rc) {
        int q = io_uring_queue_init(QDEPTH, &ring, 0);
        ring_ok = q == 0;
        if (q) rc = hy_err_set(e, HY_EIO, "io_uring_queue_init: %s", strerror(-q));
    }
    for (int i = 0; i < NSIZES && !rc; i++) {
        rc = nvme_measure(nv, fd, &ring, k_sizes[i], per_pass, b->src, b->out, r, &nr[i], e);
        if (!rc)
            printf("nvme %4llu MiB: write %5.2f GB/s vs raw %5.2f (%.2f), read %5.2f vs raw "
                   "%5.2f (%.2f)\n"
                   "               per entry, ms: put %.2f = raw %.2f + XXH3 %.2f + rest %.2f; "
                   "get %.2f = raw %.2f + XXH3 %.2f + rest %.2f\n",
                   (unsigned long long)(k_sizes[i] / MIB), nr[i].write, nr[i].raw_write,
                   nr[i].write / nr[i].raw_write, nr[i].read, nr[i].raw_read,
                   nr[i].read / nr[i].raw_read, nr[i].put_ms, nr[i].raw_put_ms, nr[i].sum_ms,
                   nr[i].put_ms - nr[i].raw_put_ms - nr[i].sum_ms, nr[i].get_ms, nr[i].raw_get_ms,
                   nr[i].sum_ms, nr[i].get_ms - nr[i].raw_get_ms - nr[i].sum_ms);
        fflush(stdout);
    }
    if (!rc) {
        hy_store_config sc = {.host_bytes = 256 * MIB};
        hy_store *s = NULL;
        rc = hy_store_open(&sc, &s, e);
        if (!rc) rc = lookup_measure(nv, s, nlookup, b->src, r, lr, e);
        hy_store_close(s);
        if (!rc)
            printf("catalog: hy_nvme_lookup %.2f M/s, hy_store_acquire+release (host hits) %.2f "
                   "M/s over %u entries of 4 KiB (filled by 4 KiB nvme puts at %.0f /s)\n",
                   lr->nvme_per_s / 1e6, lr->store_per_s / 1e6, nlookup, lr->small_puts_per_s);
    }
    if (ring_ok) io_uring_queue_exit(&ring);
    if (fd >= 0) close(fd);
    hy_nvme_close(nv);
    return rc;
}

int hy_bench_tiers(int argc, char **argv)
{
    const char *parent = "/tmp";
    int quick = 0, smoke = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc)
            parent = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--smoke") == 0)
            quick = smoke = 1;
        else {
            fprintf(stderr, "usage: hypic-bench tiers [--dir DIR] [--quick | --smoke]\n");
            return 2;
        }
    }
    /* A pass moves at least 4 entries of each size (host_measure,
     * nvme_measure), so a pass of 0 bytes is the smallest. */
    const uint64_t host_pass = smoke ? 0 : quick ? 256 * MIB : 1024 * MIB;
    const uint64_t nvme_pass = smoke ? 0 : quick ? 128 * MIB : 512 * MIB;
    const uint32_t nlookup = smoke ? 64 : quick ? 2000 : 10000;
    /* The disk the run takes at most: the raw file (the largest pass), the
     * tier's entries of one size plus one replacement, and an extent for the
     * small entries. */
    uint64_t largest = 0;
    for (int i = 0; i < NSIZES; i++)
        largest = HY_MAX(largest, HY_MAX(nvme_pass / k_sizes[i], 4) * k_sizes[i]);
    const uint64_t need = 3 * largest + 256 * MIB;
    struct statvfs vfs;
    if (statvfs(parent, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        fprintf(stderr, "hypic-bench tiers: %s has less than the %llu MiB free this run needs\n",
                parent, (unsigned long long)(need / MIB));
        return 1;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/hypic-bench-tiers-XXXXXX", parent);
    if (!mkdtemp(dir)) {
        fprintf(stderr, "hypic-bench tiers: mkdtemp in %s: %s\n", parent, strerror(errno));
        return 1;
    }
    const uint64_t S = k_sizes[NSIZES - 1];
    bufs b = {big_alloc(S), {big_alloc(S), big_alloc(S)}, big_alloc(S)};
    hy_rng r;
    hy_rng_seed(&r, 7);
    hy_err e = {0};
    int rc = b.src && b.dst2[0] && b.dst2[1] && b.out ? 0 : hy_err_set(&e, HY_ENOMEM, "buffers");
    if (!rc) fill_random(b.src, S, &r);
    printf("tiers: host passes of %llu MiB, nvme passes of %llu MiB in %s, best of %d (%d on the "
           "device)%s\n",
           (unsigned long long)(host_pass / MIB), (unsigned long long)(nvme_pass / MIB), dir, REPS,
           IO_REPS,
           smoke   ? " (smoke: too few operations for the figures to mean much)"
           : quick ? " (quick)"
                   : "");
    printf("limits: memcpy between huge-page buffers (memory bandwidth); raw O_DIRECT io_uring "
           "to a preallocated file, %u MiB requests, depth %u, fdatasync per write (the "
           "device)\n\n",
           PIECE / (unsigned)MIB, QDEPTH);
    fflush(stdout);
    host_result hr[NSIZES] = {0};
    nvme_result nr[NSIZES] = {0};
    lookup_result lr = {0};
    double t0 = hy_now_s();
    if (!rc) rc = run_host(&b, host_pass, &r, hr, &e);
    if (!rc) printf("\n");
    if (!rc) rc = run_nvme(dir, &b, nvme_pass, nlookup, &r, nr, &lr, &e);
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(b.src), free(b.dst2[0]), free(b.dst2[1]), free(b.out);
    hbm_result hb = {0};
    if (!rc) rc = bench_tiers_hbm(k_sizes, NSIZES, quick, &hb, &e);
    if (rc) return fail(&e);
    printf("\n");
    if (!hb.present) printf("hbm: not measured: %s\n", hb.why);
    for (int i = 0; hb.present && i < NSIZES; i++)
        printf("hbm  %4llu MiB: write %6.2f GB/s vs cudaMemcpy %6.2f (%.2f), read %6.2f vs %6.2f "
               "(%.2f)%s\n",
               (unsigned long long)(k_sizes[i] / MIB), hb.write[i], hb.raw_h2d[i],
               hb.write[i] / hb.raw_h2d[i], hb.read[i], hb.raw_d2h[i], hb.read[i] / hb.raw_d2h[i],
               i == 0 ? " (pinned host buffer; the limit is the host-device link)" : "");
    if (hb.present && hb.pageable)
        printf("hbm: %llu copies found the host buffer pageable (pinning failed)\n",
               (unsigned long long)hb.pageable);

    printf("\ntargets: host >= 0.8 of memcpy, nvme >= 0.8 of raw (ratios in parentheses); "
           "%.0f s\n",
           hy_now_s() - t0);
    printf("{\"bench\":\"tiers\"");
    for (int i = 0; i < NSIZES; i++) {
        const char *k = k_names[i];
        printf(",\"host_get_over_memcpy_%s\":%.3f,\"host_put_over_memcpy_%s\":%.3f,"
               "\"nvme_read_over_raw_%s\":%.3f,\"nvme_write_over_raw_%s\":%.3f,"
               "\"memcpy_gbs_%s\":%.2f,\"memcpy_put_pattern_gbs_%s\":%.2f,"
               "\"host_get_gbs_%s\":%.2f,\"host_put_gbs_%s\":%.2f,\"xxh3_gbs_%s\":%.2f,\"copy_then_"
               "xxh3_gbs_%s\":%.2f,"
               "\"nvme_read_gbs_%s\":%.3f,\"raw_read_gbs_%s\":%.3f,"
               "\"nvme_write_gbs_%s\":%.3f,\"raw_write_gbs_%s\":%.3f",
               k, hr[i].get / hr[i].memcpy_get, k, hr[i].put / hr[i].memcpy_put, k,
               nr[i].read / nr[i].raw_read, k, nr[i].write / nr[i].raw_write, k, hr[i].memcpy_get,
               k, hr[i].memcpy_put, k, hr[i].get, k, hr[i].put, k, hr[i].xxh3, k, hr[i].copy_hash,
               k, nr[i].read, k, nr[i].raw_read, k, nr[i].write, k, nr[i].raw_write);
    }
    printf(",\"hbm_available\":%s", hb.present ? "true" : "false");
    for (int i = 0; hb.present && i < NSIZES; i++)
        printf(",\"hbm_write_over_memcpy_%s\":%.3f,\"hbm_read_over_memcpy_%s\":%.3f,"
               "\"hbm_write_gbs_%s\":%.2f,\"hbm_read_gbs_%s\":%.2f,\"cuda_h2d_gbs_%s\":%.2f,"
               "\"cuda_d2h_gbs_%s\":%.2f",
               k_names[i], hb.write[i] / hb.raw_h2d[i], k_names[i], hb.read[i] / hb.raw_d2h[i],
               k_names[i], hb.write[i], k_names[i], hb.read[i], k_names[i], hb.raw_h2d[i],
               k_names[i], hb.raw_d2h[i]);
    printf(",\"catalog_lookups_per_s\":%.0f,\"store_acquire_release_per_s\":%.0f,"
           "\"nvme_small_puts_per_s\":%.0f,\"catalog_entries\":%u,\"quick\":%s,\"smoke\":%s}\n",
           lr.nvme_per_s, lr.store_per_s, lr.small_puts_per_s, nlookup, quick ? "true" : "false",
           smoke ? "true" : "false");
    return 0;
}
