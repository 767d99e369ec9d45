/*
 * The nvme tier's journal (tiers/nvme_journal.c): a put flushes once, its
 * catalog write is left unsynced, and recovery replays from the extents'
 * journal rings what the catalog lost. The catalog runs with manual WAL
 * flush: unsynced writes wait in RocksDB's buffer inside the process until
 * the next synced one (at most NV_SYNC_EVERY catalog writes later), so a
 * SIGKILL loses them as a power cut would, and test_crash exercises the
 * replay at random moments. These cases make the loss deterministic and aim
 * it. A close ends with a synced write, so the closed catalog holds
 * everything; between a close and the next open they edit it directly — putting
 * back older records, deleting newer ones and lowering the floor, as a
 * catalog that lost its unsynced tail would be — and check that the reopened
 * tier is the one that was closed: puts replayed byte-identical, removals
 * replayed, a put whose payload never became durable not replayed (the older
 * entry kept), a damaged journal block ignored, rings that wrap only over
 * blocks the catalog holds durably, and, for concurrent puts and removals of
 * the same keys, a state rebuilt from the journal alone equal to the live
 * one.
 */
#include "nvme_fixture.h"
#include "nvme_internal.h" /* the floor record and journal blocks */

#include <fcntl.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <unistd.h>

/* --- the catalog, edited directly while the tier is closed ------------------------ */

typedef struct cat {
    rocksdb_t *db;
    rocksdb_options_t *o;
    rocksdb_readoptions_t *ro;
    rocksdb_writeoptions_t *wo;
} cat;

static cat cat_open(const char *dir)
{
    cat c = {.o = rocksdb_options_create()};
    char path[256], *err = NULL;
    snprintf(path, sizeof path, "%s/catalog", dir);
    c.db = rocksdb_open(c.o, path, &err);
    CU_ASSERT_PTR_NULL_FATAL(err);
    c.ro = rocksdb_readoptions_create();
    c.wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(c.wo, 1);
    return c;
}

static void cat_close(cat *c)
{
    rocksdb_readoptions_destroy(c->ro), rocksdb_writeoptions_destroy(c->wo);
    rocksdb_close(c->db), rocksdb_options_destroy(c->o);
}

/* The value of a key (malloc'd, *len) or NULL. */
static char *cat_get(cat *c, const void *k, size_t klen, size_t *len)
{
    char *err = NULL;
    char *v = rocksdb_get(c->db, c->ro, k, klen, len, &err);
    CU_ASSERT_PTR_NULL(err);
    return v;
}

static void cat_put(cat *c, const void *k, size_t klen, const char *v, size_t len)
{
    char *err = NULL;
    rocksdb_put(c->db, c->wo, k, klen, v, len, &err);
    CU_ASSERT_PTR_NULL(err);
}

static void cat_del(cat *c, const void *k, size_t klen)
{
    char *err = NULL;
    rocksdb_delete(c->db, c->wo, k, klen, &err);
    CU_ASSERT_PTR_NULL(err);
}

static uint64_t cat_floor(cat *c)
{
    size_t len = 0;
    char *v = cat_get(c, NV_FLOOR_KEY, strlen(NV_FLOOR_KEY), &len);
    uint64_t f = 0;
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL(nv_floor_decode(v, len, &f, NULL), HY_OK);
    rocksdb_free(v);
    return f;
}

static void cat_set_floor(cat *c, uint64_t f)
{
    uint8_t b[NV_FLOOR_BYTES];
    nv_floor_encode(f, b);
    cat_put(c, NV_FLOOR_KEY, strlen(NV_FLOOR_KEY), (const char *)b, sizeof b);
}

/* A saved record of key `seed` (what an older catalog held). */
typedef struct saved {
    char *v;
    size_t len;
} saved;

static saved cat_save(cat *c, uint64_t seed)
{
    hy_key k = key_of(seed);
    saved s = {0};
    s.v = cat_get(c, k.b, HY_KEY_BYTES, &s.len);
    CU_ASSERT_PTR_NOT_NULL(s.v);
    return s;
}

static void cat_restore(cat *c, uint64_t seed, saved *s)
{
    hy_key k = key_of(seed);
    cat_put(c, k.b, HY_KEY_BYTES, s->v, s->len);
    rocksdb_free(s->v);
    s->v = NULL;
}

static void cat_forget(cat *c, uint64_t seed)
{
    hy_key k = key_of(seed);
    cat_del(c, k.b, HY_KEY_BYTES);
}

/* --- cases ------------------------------------------------------------------------- */

#define EXT (16 * MiB)

/* Phase one of a case: a fresh directory in dir holding entry `seed` of
 * `bytes`, closed; returns the floor the close wrote. */
static uint64_t one_entry_closed(char *dir, size_t cap, uint64_t seed, uint64_t bytes)
{
    case_dir(dir, cap);
    hy_nvme *n = open_tier(dir, EXT, 4);
    CU_ASSERT_EQUAL(put(n, seed, bytes), 0);
    hy_nvme_close(n);
    cat c = cat_open(dir);
    const uint64_t floor = cat_floor(&c);
    cat_close(&c);
    return floor;
}

/* Puts (new keys and a replacement) and a removal whose catalog changes are
 * lost come back from the journal. The replacement's new payload takes the
 * space the removed entry freed, so the stale records put back overlap it. */
static void test_lost_catalog_tail_replayed(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    hy_nvme *n = open_tier(dir, EXT, 4);
    for (uint64_t i = 1; i <= 5; i++) CU_ASSERT_EQUAL(put(n, i, 1 * MiB + 100 * i), 0);
    hy_nvme_close(n);
    cat c = cat_open(dir);
    const uint64_t floor1 = cat_floor(&c);
    saved old1 = cat_save(&c, 1), old3 = cat_save(&c, 3);
    cat_close(&c);
    CU_ASSERT(floor1 >= 5);

    n = open_tier(dir, EXT, 4);
    hy_err e = {0};
    hy_key k3 = key_of(3);
    CU_ASSERT_EQUAL(hy_nvme_remove(n, &k3, &e), 0);
    CU_ASSERT_EQUAL(put(n, 6, 3 * MiB), 0);
    hy_meta m1 = meta_of(1, 1 * MiB + 100); /* key 1 again, other bytes */
    uint8_t *p = payload(m1.bytes, 101);
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m1, p, &e), 0);
    hy_nvme_close(n);

    c = cat_open(dir); /* the catalog as a WAL cut after phase one leaves it */
    cat_restore(&c, 1, &old1);
    cat_restore(&c, 3, &old3);
    cat_forget(&c, 6);
    cat_set_floor(&c, floor1);
    cat_close(&c);

    n = open_tier(dir, EXT, 4);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.journal_replayed, 3);
    CU_ASSERT_EQUAL(s.journal_rejected, 0);
    CU_ASSERT_EQUAL(s.dropped_on_open, 0);
    CU_ASSERT_EQUAL(s.entries, 5);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k3, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(check(n, 2, 1 * MiB + 200), 0);
    CU_ASSERT_EQUAL(check(n, 4, 1 * MiB + 400), 0);
    CU_ASSERT_EQUAL(check(n, 5, 1 * MiB + 500), 0);
    CU_ASSERT_EQUAL(check(n, 6, 3 * MiB), 0);
    uint8_t *buf = aligned_alloc(HY_PAGE, padded(m1.bytes));
    CU_ASSERT_EQUAL(hy_nvme_get(n, &m1.key, buf, padded(m1.bytes), NULL, &e), 0);
    CU_ASSERT_EQUAL(memcmp(buf, p, m1.bytes), 0);
    hy_nvme_close(n);

    /* The replay was written to the catalog: a second open replays nothing. */
    n = open_tier(dir, EXT, 4);
    CU_ASSERT_EQUAL(stats(n).journal_replayed, 0);
    CU_ASSERT_EQUAL(stats(n).entries, 5);
    CU_ASSERT_EQUAL(check(n, 6, 3 * MiB), 0);
    hy_nvme_close(n);
    free(p), free(buf);
}

/* A replacing put whose payload did not reach the device (damaged here after
 * the fact) and whose catalog write was lost: its journal block is found,
 * its payload fails its checksums, and the older entry stays. */
static void test_cut_short_put_keeps_older(void)
{
    char dir[128];
    const uint64_t floor1 = one_entry_closed(dir, sizeof dir, 7, 2 * MiB);
    cat c = cat_open(dir);
    saved old7 = cat_save(&c, 7);
    cat_close(&c);

    hy_nvme *n = open_tier(dir, EXT, 4);
    hy_meta m = meta_of(7, 2 * MiB);
    uint8_t *p = payload(m.bytes, 707);
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_nvme_put(n, &m, p, &e), 0);
    hy_nvme_loc l;
    CU_ASSERT_EQUAL(hy_nvme_locate(n, &m.key, &l), 0);
    hy_nvme_close(n);

    char path[256];
    extent_file(dir, l.extent, path, sizeof path);
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    uint8_t junk[64];
    memset(junk, 0x5a, sizeof junk);
    CU_ASSERT_EQUAL(pwrite(fd, junk, sizeof junk, (off_t)(l.offset + MiB + 17)), 64);
    close(fd);
    c = cat_open(dir);
    cat_restore(&c, 7, &old7);
    cat_set_floor(&c, floor1);
    cat_close(&c);

    n = open_tier(dir, EXT, 4);
    hy_nvme_stats s = stats(n);
    CU_ASSERT_EQUAL(s.journal_rejected, 1);
    CU_ASSERT_EQUAL(s.journal_replayed, 0);
    CU_ASSERT_EQUAL(s.entries, 1);
    CU_ASSERT_EQUAL(check(n, 7, 2 * MiB), 0); /* the first payload, intact */
    hy_nvme_close(n);
    free(p);
}

/* A damaged journal block is not a put: the entry it named stays unknown. */
static void test_damaged_block_ignored(void)
{
    char dir[128];
    const uint64_t floor1 = one_entry_closed(dir, sizeof dir, 8, 1 * MiB);
    hy_nvme *n = open_tier(dir, EXT, 4);
    CU_ASSERT_EQUAL(put(n, 9, 1 * MiB), 0);
    hy_nvme_close(n);

    /* Find key 9's block in extent 0's ring and flip one byte of it. */
    char path[256];
    extent_file(dir, 0, path, sizeof path);
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    const uint32_t slots = nv_journal_slots_for(EXT);
    uint8_t *ring = malloc((size_t)slots * HY_PAGE);
    CU_ASSERT_EQUAL(pread(fd, ring, (size_t)slots * HY_PAGE, 0), (ssize_t)slots * HY_PAGE);
    hy_key k9 = key_of(9);
    int found = -1;
    for (uint32_t i = 0; i < slots; i++) {
        nv_jrec j;
        if (nv_journal_decode(ring + (size_t)i * HY_PAGE, &j, NULL) != HY_OK) continue;
        if (j.kind == NV_JPUT && memcmp(j.key.b, k9.b, HY_KEY_BYTES) == 0) found = (int)i;
        free(j.rec.sums);
    }
    CU_ASSERT_FATAL(found >= 0);
    uint8_t b = ring[(size_t)found * HY_PAGE + 100] ^ 0x01; /* inside its record */
    CU_ASSERT_EQUAL(pwrite(fd, &b, 1, (off_t)found * HY_PAGE + 100), 1);
    close(fd);
    free(ring);
    cat c = cat_open(dir);
    cat_forget(&c, 9);
    cat_set_floor(&c, floor1);
    cat_close(&c);

    n = open_tier(dir, EXT, 4);
    CU_ASSERT_EQUAL(stats(n).journal_replayed, 0);
    CU_ASSERT_EQUAL(hy_nvme_lookup(n, &k9, NULL), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(check(n, 8, 1 * MiB), 0);
    hy_nvme_close(n);
}

/* Many more operations than a ring has slots: rings wrap only over blocks
 * the catalog holds durably (the tier syncs it first), and the state
 * survives a reopen. */
static void test_rings_wrap(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    const uint64_t ext = 1 * MiB; /* the smallest ring: 16 slots */
    hy_nvme *n = open_tier(dir, ext, 8);
    int live[12] = {0}; /* the size in pages of each key's entry, 0 when absent */
    hy_rng r;
    hy_rng_seed(&r, 99);
    hy_err e = {0};
    for (int op = 0; op < 400; op++) {
        const uint64_t k = hy_rng_next(&r) % 12;
        if (live[k] && hy_rng_next(&r) % 3 == 0) {
            hy_key key = key_of(100 + k);
            CU_ASSERT_EQUAL(hy_nvme_remove(n, &key, &e), 0);
            live[k] = 0;
        } else {
            const int pages = 1 + (int)(hy_rng_next(&r) % 24);
            int rc = put(n, 100 + k, (uint64_t)pages * HY_PAGE - 10);
            CU_ASSERT(rc == 0 || rc == HY_ENOMEM);
            if (rc == 0) live[k] = pages;
        }
    }
    hy_nvme_stats s = stats(n);
    CU_ASSERT(s.journal_syncs >= 400 / NV_SYNC_EVERY);
    hy_nvme_close(n);
    n = open_tier(dir, ext, 8);
    CU_ASSERT_EQUAL(stats(n).journal_replayed, 0);
    for (int k = 0; k < 12; k++) {
        hy_key key = key_of(100 + (uint64_t)k);
        if (live[k]) {
            CU_ASSERT_EQUAL(check(n, 100 + (uint64_t)k, (uint64_t)live[k] * HY_PAGE - 10), 0);
        } else {
            CU_ASSERT_EQUAL(hy_nvme_lookup(n, &key, NULL), HY_ENOTFOUND);
        }
    }
    hy_nvme_close(n);
}

/* Threads put and remove the same few keys at once; then the catalog's
 * entries are all deleted and the floor set to 0, so that the reopened tier
 * is rebuilt from the journal alone (no ring wraps: fewer operations than
 * slots). It must equal the live state before the close, key by key: the
 * tier orders concurrent operations on a key by number, as replay does. */
#define RACE_KEYS    6
#define RACE_THREADS 4
#define RACE_OPS     40 /* per thread: 160 operations, under the ring's 256 slots */

typedef struct racer {
    hy_nvme *n;
    int t;
} racer;

static void *race(void *arg)
{
    racer *a = arg;
    hy_rng r;
    hy_rng_seed(&r, 1000 + (uint64_t)a->t);
    for (int i = 0; i < RACE_OPS; i++) {
        const uint64_t k = 200 + hy_rng_next(&r) % RACE_KEYS;
        if (hy_rng_next(&r) % 3 == 0) {
            hy_key key = key_of(k);
            hy_nvme_remove(a->n, &key, NULL);
        } else {
            put(a->n, k, 64 * 1024); /* same bytes for a key: content addressed */
        }
    }
    return NULL;
}

static void test_concurrent_ops_replay_to_live_state(void)
{
    char dir[128];
    case_dir(dir, sizeof dir);
    const uint64_t ext = 64 * MiB; /* 256 slots */
    hy_nvme *n = open_tier(dir, ext, 1);
    pthread_t th[RACE_THREADS];
    racer a[RACE_THREADS];
    for (int t = 0; t < RACE_THREADS; t++) {
        a[t] = (racer){n, t};
        pthread_create(&th[t], NULL, race, &a[t]);
    }
    for (int t = 0; t < RACE_THREADS; t++) pthread_join(th[t], NULL);
    bool was[RACE_KEYS];
    int present = 0;
    for (int k = 0; k < RACE_KEYS; k++) {
        hy_key key = key_of(200 + (uint64_t)k);
        was[k] = hy_nvme_lookup(n, &key, NULL) == HY_OK;
        present += was[k];
    }
    hy_nvme_close(n);

    cat c = cat_open(dir);
    for (int k = 0; k < RACE_KEYS; k++) cat_forget(&c, 200 + (uint64_t)k);
    cat_set_floor(&c, 0);
    cat_close(&c);

    n = open_tier(dir, ext, 1);
    CU_ASSERT_EQUAL(stats(n).entries, (uint64_t)present);
    CU_ASSERT_EQUAL(stats(n).dropped_on_open, 0);
    for (int k = 0; k < RACE_KEYS; k++) {
        hy_key key = key_of(200 + (uint64_t)k);
        if (was[k]) {
            CU_ASSERT_EQUAL(check(n, 200 + (uint64_t)k, 64 * 1024), 0);
        } else {
            CU_ASSERT_EQUAL(hy_nvme_lookup(n, &key, NULL), HY_ENOTFOUND);
        }
    }
    hy_nvme_close(n);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_nvme_journal_", g_tmp, sizeof g_tmp)) return 1;
    static const hy_test_case cases[] = {
        {"lost catalog tail: puts, a replace, a removal replayed", test_lost_catalog_tail_replayed},
        {"a put cut short is not replayed; the older entry stays", test_cut_short_put_keeps_older},
        {"a damaged journal block is ignored", test_damaged_block_ignored},
        {"rings wrap over durable blocks only; state survives", test_rings_wrap},
        {"concurrent puts/removes: journal alone rebuilds the live state",
         test_concurrent_ops_replay_to_live_state},
        {NULL, NULL},
    };
    int rc = hy_test_main("nvme_journal", cases);
    hy_test_rmtree(g_tmp);
    return rc;
}
