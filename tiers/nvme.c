/*
 * The persistent tier's requests (nvme_internal.h): put, get, remove, lookup, listing
 * and counters, over a RocksDB catalog of records and payload bytes in
 * preallocated extent files. nvme_open.c opens, recovers and closes the tier;
 * nvme_record.c encodes records, nvme_space.c keeps each extent's free space,
 * nvme_io.c moves the bytes (docs/store-format.md: the on-disk side).
 *
 * The in-memory index (a hash table of entries, each with its decoded record)
 * is the live view; the catalog is its durable copy. One mutex (mu) guards
 * the index, the free space and the counters; a second (cat_mu, taken before
 * mu) orders the catalog writes of puts and removes, so the order of catalog
 * writes is the order of index changes while gets and lookups never wait on a
 * WAL fsync. Payload I/O, fdatasync and checksumming run outside both.
 *
 * A put allocates space and takes an operation number and a journal slot
 * (under mu; nvme_journal.c), writes the payload and its journal block and
 * fdatasyncs them once (under neither), writes the record and the floor with
 * an unsynced WAL write (under cat_mu), then swaps the entry into the index
 * (under both). A get pins its entry (readers++) for the read, so a
 * concurrent remove or replace cannot free the bytes under it: a removed
 * entry leaves the index at once but its space goes back to the free runs
 * when the last reader unpins it. Removing makes its tombstone durable before
 * the bytes can be reused, so after a crash no replayed state names bytes
 * another entry has overwritten (the chunk checksums would catch it anyway).
 */
#include "nvme_internal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NV_HIT_PERSIST_NS 1000000000ull

/* --- names for messages ------------------------------------------------------ */

typedef struct hexkey {
    char s[65];
} hexkey;

static hexkey hex(const hy_key *k)
{
    hexkey h;
    hy_key_hex(k, h.s);
    return h;
}

void nv_extent_path(const hy_nvme *n, uint32_t id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/extents/extent-%06u.dat", n->dir, id);
}

/* --- the index ------------------------------------------------------------------ */

/* Keyed with the index's random seed: keys are steerable by clients. */
static uint64_t key_hash(const hy_nvme *n, const hy_key *k)
{
    return hy_xxh3_seeded(k->b, HY_KEY_BYTES, n->seed);
}

static nv_entry **slot_of(hy_nvme *n, const hy_key *k)
{
    nv_entry **p = &n->buckets[key_hash(n, k) & (n->nbuckets - 1)];
    while (*p && memcmp((*p)->rec.meta.key.b, k->b, HY_KEY_BYTES) != 0) p = &(*p)->next;
    return p;
}

nv_entry *nv_index_find(hy_nvme *n, const hy_key *k)
{
    return *slot_of(n, k);
}

/* Inserts e (its key absent). Growing the table is best effort: a full table
 * only makes chains longer. */
void nv_index_insert(hy_nvme *n, nv_entry *e)
{
    if (n->nentries >= n->nbuckets) {
        size_t nb = 2 * n->nbuckets;
        nv_entry **b = calloc(nb, sizeof *b);
        if (b) {
            for (size_t i = 0; i < n->nbuckets; i++)
                for (nv_entry *x = n->buckets[i], *nx; x; x = nx) {
                    nx = x->next;
                    nv_entry **h = &b[key_hash(n, &x->rec.meta.key) & (nb - 1)];
                    x->next = *h, *h = x;
                }
            free(n->buckets);
            n->buckets = b, n->nbuckets = nb;
        }
    }
    nv_entry **p = slot_of(n, &e->rec.meta.key);
    assert(*p == NULL);
    e->next = NULL, *p = e;
    n->nentries++;
    n->live_bytes += e->rec.meta.bytes;
}

void nv_index_remove(hy_nvme *n, nv_entry *e)
{
    nv_entry **p = slot_of(n, &e->rec.meta.key);
    assert(*p == e);
    *p = e->next;
    n->nentries--;
    n->live_bytes -= e->rec.meta.bytes;
}

void nv_entry_free(nv_entry *e)
{
    if (e) free(e->rec.sums);
    free(e);
}

/* --- space ------------------------------------------------------------------------- */

static void space_release(hy_nvme *n, const nv_loc *l)
{
    n->used_bytes -= l->stored;
    if (nv_space_free(&n->ext[l->extent].space, l->off, l->stored))
        hy_log(HY_LOG_WARN,
               "nvme: out of memory returning %llu bytes of extent-%06u.dat to its free space; "
               "they are unused until the tier is reopened",
               (unsigned long long)l->stored, l->extent);
}

/* An entry leaves the index (the caller did that): its bytes are freed now,
 * or by the last reader. */
static void entry_retire(hy_nvme *n, nv_entry *e)
{
    e->dead = true;
    if (e->readers > 0) return;
    if (!e->keep_space) space_release(n, &e->rec.loc);
    nv_entry_free(e);
}

static int fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int nv_extent_init(hy_nvme *n, nv_extent *x)
{
    if (nv_space_init(&x->space, n->extent_bytes)) return HY_ENOMEM;
    x->slots = calloc(n->jslots, sizeof *x->slots);
    if (!x->slots || nv_space_take(&x->space, 0, (uint64_t)n->jslots * HY_PAGE)) {
        free(x->slots);
        x->slots = NULL;
        nv_space_release(&x->space);
        return HY_ENOMEM;
    }
    x->jcur = 0;
    return HY_OK;
}

/* Creates the lowest free extent id, preallocated and synced (file and
 * directory) before any record can name it. Under the mutex. */
static int extent_create(hy_nvme *n, uint32_t *out, hy_err *err)
{
    uint32_t id = 0;
    while (id < n->ncap && n->ext[id].present) id++;
    assert(id < n->ncap); /* ncap >= max_extents > nextents */
    char path[4096], dir[4096];
    nv_extent_path(n, id, path, sizeof path);
    int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) return hy_err_set(err, HY_EIO, "creating %s (O_DIRECT): %s", path, strerror(errno));
    int rc = fallocate(fd, 0, 0, (off_t)n->extent_bytes);
    /* The journal's slots are written once now (zeros: no block), so that a
     * put's slot write overwrites written blocks and its fdatasync need not
     * also commit the filesystem's conversion of unwritten extents. */
    const uint64_t jb = (uint64_t)n->jslots * HY_PAGE;
    void *zeros = rc == 0 ? aligned_alloc(HY_PAGE, jb) : NULL;
    if (zeros) { /* plain pwrite: extent creation is rare */
        memset(zeros, 0, jb);
        if (pwrite(fd, zeros, jb, 0) != (ssize_t)jb)
            hy_log(HY_LOG_WARN, "nvme: zeroing the journal of %s: %s", path, strerror(errno));
        free(zeros);
    }
    if (rc == 0) rc = fsync(fd);
    snprintf(dir, sizeof dir, "%s/extents", n->dir);
    if (rc == 0) rc = fsync_dir(dir);
    if (rc != 0) {
        int e = errno;
        close(fd);
        unlink(path);
        return hy_err_set(err, HY_EIO, "preallocating %llu bytes for %s: %s",
                          (unsigned long long)n->extent_bytes, path, strerror(e));
    }
    nv_extent *x = &n->ext[id];
    if (nv_extent_init(n, x)) {
        close(fd);
        unlink(path);
        return hy_err_set(err, HY_ENOMEM, "out of memory for the free space of %s", path);
    }
    x->present = true, x->fd = fd, x->file_bytes = n->extent_bytes;
    n->nextents++;
    *out = id;
    return HY_OK;
}

/* First fit over the extents in id order, then a new extent. Under the mutex. */
static int space_alloc(hy_nvme *n, uint64_t stored, nv_loc *loc, int *fd, hy_err *err)
{
    uint64_t free_total = 0, largest = 0;
    for (uint32_t id = 0; id < n->ncap; id++) {
        nv_extent *x = &n->ext[id];
        if (!x->present) continue;
        if (nv_space_alloc(&x->space, stored, &loc->off) == HY_OK) {
            loc->extent = id, loc->stored = stored, *fd = x->fd;
            n->used_bytes += stored;
            return HY_OK;
        }
        free_total += x->space.free_bytes;
        largest = HY_MAX(largest, nv_space_largest(&x->space));
    }
    if (n->nextents >= n->max_extents)
        return hy_err_set(err, HY_ENOMEM,
                          "nvme tier %s is full: no extent has %llu contiguous free bytes "
                          "(%u of %u extents of %llu bytes in use; %llu bytes free, largest "
                          "free run %llu): evict and retry",
                          n->dir, (unsigned long long)stored, n->nextents, n->max_extents,
                          (unsigned long long)n->extent_bytes, (unsigned long long)free_total,
                          (unsigned long long)largest);
    uint32_t id = 0;
    int rc = extent_create(n, &id, err);
    if (rc) return rc;
    rc = nv_space_alloc(&n->ext[id].space, stored, &loc->off);
    assert(rc == HY_OK); /* stored <= extent_bytes, checked by put */
    loc->extent = id, loc->stored = stored, *fd = n->ext[id].fd;
    n->used_bytes += stored;
    return HY_OK;
}

bool hy_nvme_has_room(hy_nvme *n, uint64_t bytes)
{
    const uint64_t stored = nv_stored_bytes(bytes);
    pthread_mutex_lock(&n->mu);
    bool room = n->nextents < n->max_extents && stored <= n->extent_bytes;
    for (uint32_t id = 0; id < n->ncap && !room; id++)
        room = n->ext[id].present && nv_space_largest(&n->ext[id].space) >= stored;
    pthread_mutex_unlock(&n->mu);
    return room;
}

/* --- catalog writes ------------------------------------------------------------------ */

/* The lazy rewrite of a record (hit counts): unsynced, no floor. */
static int catalog_put(hy_nvme *n, const nv_record *r, bool sync, hy_err *err)
{
    uint8_t *v;
    size_t len;
    if (nv_record_encode(r, &v, &len))
        return hy_err_set(err, HY_ENOMEM, "out of memory encoding the record of key %s",
                          hex(&r->meta.key).s);
    char *e = NULL;
    rocksdb_put(n->db, sync ? n->wsync : n->wlazy, (const char *)r->meta.key.b, HY_KEY_BYTES,
                (const char *)v, len, &e);
    free(v);
    if (!e) return HY_OK;
    int rc = hy_err_set(err, HY_EIO, "writing the catalog record of key %s in %s/catalog: %s",
                        hex(&r->meta.key).s, n->dir, e);
    rocksdb_free(e);
    return rc;
}

/* A put's record (r) or a removal of key (r NULL), with the floor, in one
 * batch; synced or left to the OS (nvme_journal.c). Under cat_mu. */
static int catalog_change(hy_nvme *n, const hy_key *key, const nv_record *r, uint64_t floor,
                          bool sync, hy_err *err)
{
    uint8_t *v = NULL;
    size_t len = 0;
    if (r && nv_record_encode(r, &v, &len))
        return hy_err_set(err, HY_ENOMEM, "out of memory encoding the record of key %s",
                          hex(key).s);
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    if (r)
        rocksdb_writebatch_put(b, (const char *)key->b, HY_KEY_BYTES, (const char *)v, len);
    else
        rocksdb_writebatch_delete(b, (const char *)key->b, HY_KEY_BYTES);
    nv_journal_batch_floor(b, floor);
    char *e = NULL;
    rocksdb_write(n->db, sync ? n->wsync : n->wlazy, b, &e);
    rocksdb_writebatch_destroy(b);
    free(v);
    if (!e) return HY_OK;
    int rc = hy_err_set(err, HY_EIO, "%s the catalog record of key %s in %s/catalog: %s",
                        r ? "writing" : "deleting", hex(key).s, n->dir, e);
    rocksdb_free(e);
    return rc;
}

/* A synced delete outside the journal (a corrupt entry found by a get). */
static int catalog_delete(hy_nvme *n, const hy_key *k, hy_err *err)
{
    char *e = NULL;
    rocksdb_delete(n->db, n->wsync, (const char *)k->b, HY_KEY_BYTES, &e);
    if (!e) return HY_OK;
    int rc = hy_err_set(err, HY_EIO, "deleting the catalog record of key %s in %s/catalog: %s",
                        hex(k).s, n->dir, e);
    rocksdb_free(e);
    return rc;
}

/* --- put, get, remove ---------------------------------------------------------------- */

int hy_nvme_put(hy_nvme *n, const hy_meta *meta, const void *data, hy_err *err)
{
    if (!n || !meta || !data) return hy_err_set(err, HY_EINVAL, "hy_nvme_put: NULL argument");
    hexkey kh = hex(&meta->key);
    const char *k = kh.s;
    int rc = hy_meta_validate(meta, err);
    if (rc) {
        hy_err_prefix(err, "nvme put of key %s", k);
        return rc;
    }
    if ((uintptr_t)data % HY_PAGE)
        return hy_err_set(err, HY_EINVAL, "nvme put of key %s: data is not %u-byte aligned", k,
                          HY_PAGE);
    uint64_t stored = nv_stored_bytes(meta->bytes);
    if (stored > n->extent_bytes)
        return hy_err_set(err, HY_ERANGE,
                          "nvme put of key %s: %llu bytes exceed one extent (%llu bytes)", k,
                          (unsigned long long)meta->bytes, (unsigned long long)n->extent_bytes);
    nv_entry *e = calloc(1, sizeof *e);
    if (e) e->rec.sums = malloc(8ull * nv_chunk_count(meta->bytes));
    if (!e || !e->rec.sums) {
        nv_entry_free(e);
        return hy_err_set(err, HY_ENOMEM, "nvme put of key %s: out of memory", k);
    }
    e->rec.meta = *meta;
    hy_meta *m = &e->rec.meta;
    if (m->created_ns == 0) m->created_ns = hy_wall_ns();
    if (m->last_access_ns == 0) m->last_access_ns = m->created_ns;
    e->rec.nchunks = nv_chunk_count(m->bytes);

    /* A record too large for a journal slot gets a number but no slot, and a
     * synced catalog write. */
    const bool journal = nv_journal_fits(&e->rec);
    int fd = -1;
    nv_op op;
    pthread_mutex_lock(&n->mu);
    rc = space_alloc(n, stored, &e->rec.loc, &fd, err);
    if (rc == HY_OK && (rc = nv_journal_begin(n, e->rec.loc.extent, journal, &op, err)))
        space_release(n, &e->rec.loc);
    pthread_mutex_unlock(&n->mu);
    if (rc) {
        nv_entry_free(e);
        hy_err_prefix(err, "nvme put of key %s", k);
        return rc;
    }
    e->rec.seq = op.seq;
    char path[4096];
    nv_extent_path(n, e->rec.loc.extent, path, sizeof path);
    /* The payload, then its journal block, in one transfer; the checksums
     * the block carries are computed while the payload is in flight. A block
     * may reach the device before all of its payload: replay verifies the
     * payload (a put cut short between the two is not replayed). */
    const nv_seg pay = {(void *)data, e->rec.loc.off, stored};
    rc = nv_journal_put(n, &op, &e->rec, &pay, err);
    if (rc == HY_OK && fdatasync(fd) != 0)
        rc = hy_err_set(err, HY_EIO, "fdatasync: %s", strerror(errno));
    if (rc) hy_err_prefix(err, "nvme put of key %s: %s", k, path);

    pthread_mutex_lock(&n->cat_mu); /* the catalog write runs outside mu */
    pthread_mutex_lock(&n->mu);
    /* A put or removal of this key numbered above ours got there first: ours
     * is superseded, as a replay would have it. */
    nv_entry *cur = nv_index_find(n, &m->key);
    const bool superseded = rc == HY_OK && ((cur && cur->rec.seq > op.seq) ||
                                            nv_journal_tombed_after(n, &m->key, op.seq));
    const uint64_t floor = nv_journal_floor(n);
    pthread_mutex_unlock(&n->mu);
    bool synced = false;
    if (rc == HY_OK && !superseded) {
        synced = nv_journal_want_sync(n, &op);
        rc = catalog_change(n, &m->key, &e->rec, floor, synced, err);
    }
    if (rc) nv_journal_wipe(n, &op);
    pthread_mutex_lock(&n->mu);
    nv_journal_end(n, &op, synced && rc == HY_OK, floor);
    if (rc || superseded) {
        space_release(n, &e->rec.loc);
        pthread_mutex_unlock(&n->mu);
        pthread_mutex_unlock(&n->cat_mu);
        nv_entry_free(e);
        return rc;
    }
    e->persisted_ns = hy_wall_ns();
    nv_entry *old = nv_index_find(n, &m->key);
    if (old) {
        nv_index_remove(n, old);
        entry_retire(n, old);
    }
    nv_index_insert(n, e);
    n->writes++;
    pthread_mutex_unlock(&n->mu);
    pthread_mutex_unlock(&n->cat_mu);
    return HY_OK;
}

/* A get found the bytes of e corrupt: drop it (unless a put or remove got
 * there first) and unpin it. Under the mutex. */
static void drop_corrupt(hy_nvme *n, nv_entry *e, int64_t chunk, const char *path)
{
    n->checksum_failures++;
    hexkey k = hex(&e->rec.meta.key);
    hy_log(HY_LOG_ERROR,
           "nvme: key %s: chunk %lld of its payload in %s (offset %llu) fails its checksum; "
           "entry dropped",
           k.s, (long long)chunk, path, (unsigned long long)e->rec.loc.off);
    if (!e->dead) {
        hy_err de = {0};
        /* Only when no put or remove is writing the catalog (we hold mu, so
         * try-lock); otherwise the record stays until the next open, where
         * its checksums fail again, and its bytes stay out of use. */
        if (pthread_mutex_trylock(&n->cat_mu) != 0) {
            e->keep_space = true;
        } else {
            if (catalog_delete(n, &e->rec.meta.key, &de)) {
                hy_log(HY_LOG_ERROR, "nvme: %s; its bytes are kept out of use", de.msg);
                e->keep_space = true;
            }
            pthread_mutex_unlock(&n->cat_mu);
        }
        nv_index_remove(n, e);
        e->dead = true;
    }
}

/* A get's verification, chunk by chunk behind the read (nv_io_read_progress):
 * each chunk is hashed as soon as the completed prefix covers it, while the
 * requests after it are still in flight, so the read costs about the device's
 * time plus the hashing of its last wave (NV_READ_AHEAD at most) rather than
 * the device's time plus a second pass over the whole payload. */
typedef struct get_verify {
    const uint8_t *data;
    uint64_t bytes;
    const uint64_t *sums;            /* immutable while the get holds the entry */
    uint32_t nchunks, next;          /* chunks verified: [0, next) */
    int64_t bad;                     /* the failing chunk, or -1 */
    hy_nvme_verified_fn on_verified; /* the caller's, told of the verified prefix */
    void *ctx;
} get_verify;

/* Verifies every chunk wholly inside [0, prefix) not verified yet. HY_EFORMAT
 * at the first mismatch (the get writes the message). */
static int get_verify_upto(void *ctx, uint64_t prefix, hy_err *err)
{
    get_verify *v = ctx;
    const uint64_t landed = HY_MIN(prefix, v->bytes); /* the page padding is not the caller's */
    bool told = false;
    for (; v->next < v->nchunks; v->next++) {
        const uint64_t at = (uint64_t)v->next * HY_NVME_CHUNK;
        const uint64_t len = HY_MIN((uint64_t)HY_NVME_CHUNK, v->bytes - at);
        if (at + len > prefix) break;
        if (hy_xxh3(v->data + at, len) != v->sums[v->next]) {
            v->bad = v->next;
            return hy_err_set(err, HY_EFORMAT, "chunk %u fails its checksum", v->next);
        }
        /* the caller's reader, chunk by chunk: what passed is usable now */
        const int rc = v->on_verified ? v->on_verified(v->ctx, at + len, landed, err) : HY_OK;
        if (rc) {
            v->next++;
            return rc;
        }
        told = true;
    }
    if (!v->on_verified || told) return HY_OK;
    const uint64_t verified = v->next == v->nchunks ? v->bytes : (uint64_t)v->next * HY_NVME_CHUNK;
    return v->on_verified(v->ctx, verified, landed, err);
}

int hy_nvme_get(hy_nvme *n, const hy_key *key, void *dst, size_t cap, hy_meta *meta, hy_err *err)
{
    return hy_nvme_get_progress(n, key, dst, cap, meta, NULL, NULL, err);
}

int hy_nvme_get_progress(hy_nvme *n, const hy_key *key, void *dst, size_t cap, hy_meta *meta,
                         hy_nvme_verified_fn on_verified, void *ctx, hy_err *err)
{
    if (!n || !key || !dst) return hy_err_set(err, HY_EINVAL, "hy_nvme_get: NULL argument");
    hexkey k = hex(key);
    if ((uintptr_t)dst % HY_PAGE)
        return hy_err_set(err, HY_EINVAL, "nvme get of key %s: dst is not %u-byte aligned", k.s,
                          HY_PAGE);
    pthread_mutex_lock(&n->mu);
    nv_entry *e = nv_index_find(n, key);
    if (!e) {
        pthread_mutex_unlock(&n->mu);
        return hy_err_set(err, HY_ENOTFOUND, "key %s is not in the nvme tier %s", k.s, n->dir);
    }
    nv_loc loc = e->rec.loc;
    uint64_t bytes = e->rec.meta.bytes;
    if (cap < loc.stored) {
        pthread_mutex_unlock(&n->mu);
        return hy_err_set(err, HY_ERANGE,
                          "nvme get of key %s: buffer of %zu bytes is smaller than the %llu "
                          "the payload takes with its padding",
                          k.s, cap, (unsigned long long)loc.stored);
    }
    int fd = n->ext[loc.extent].fd;
    e->readers++;
    pthread_mutex_unlock(&n->mu);

    char path[4096];
    nv_extent_path(n, loc.extent, path, sizeof path);
    get_verify v = {dst, bytes, e->rec.sums, e->rec.nchunks, 0, -1, on_verified, ctx};
    /* A reader using the bytes as they land reads in smaller requests with
     * less in flight, its first 64 KiB alone: many such reads side by side
     * (a request's hits) then progress together, and each one's first bytes
     * (an entry's header and tokens) come early. */
    const nv_progress prog = {get_verify_upto, &v, on_verified ? NV_LANDING_PIECE : 0,
                              on_verified ? NV_LANDING_AHEAD : 0,
                              on_verified ? NV_LANDING_FIRST : 0};
    int rc = nv_io_read_progress(n->io, fd, dst, loc.off, loc.stored, &prog, err);
    /* Every byte is verified before success, whatever the transfer reported:
     * after a complete read this finds nothing left to hash. */
    if (rc == HY_OK) rc = get_verify_upto(&v, loc.stored, err);
    const int64_t bad = v.bad;
    if (rc && bad < 0) hy_err_prefix(err, "nvme get of key %s: %s", k.s, path);

    pthread_mutex_lock(&n->mu);
    if (bad >= 0) {
        drop_corrupt(n, e, bad, path);
        rc = hy_err_set(err, HY_EFORMAT,
                        "nvme get of key %s: %s at offset %llu: chunk %lld fails its checksum; "
                        "the entry was dropped",
                        k.s, path, (unsigned long long)loc.off, (long long)bad);
    } else if (rc == HY_OK) {
        hy_meta *m = &e->rec.meta;
        m->hits++;
        m->last_access_ns = hy_wall_ns();
        e->dirty = true;
        /* Hits are persisted lazily (an unsynced write), and only when no put
         * or remove is writing the catalog: an older record must not land
         * after a newer one. */
        if (!e->dead && m->last_access_ns - e->persisted_ns >= NV_HIT_PERSIST_NS &&
            pthread_mutex_trylock(&n->cat_mu) == 0) {
            if (catalog_put(n, &e->rec, false, NULL) == HY_OK)
                e->persisted_ns = m->last_access_ns, e->dirty = false;
            pthread_mutex_unlock(&n->cat_mu);
        }
        if (meta) *meta = *m;
        n->reads++;
    }
    if (--e->readers == 0 && e->dead) entry_retire(n, e);
    pthread_mutex_unlock(&n->mu);
    return rc;
}

int hy_nvme_lookup(hy_nvme *n, const hy_key *key, hy_meta *meta)
{
    if (!n || !key) return HY_EINVAL;
    pthread_mutex_lock(&n->mu);
    nv_entry *e = nv_index_find(n, key);
    if (e && meta) *meta = e->rec.meta;
    pthread_mutex_unlock(&n->mu);
    return e ? HY_OK : HY_ENOTFOUND;
}

int hy_nvme_locate(hy_nvme *n, const hy_key *key, hy_nvme_loc *loc)
{
    if (!n || !key || !loc) return HY_EINVAL;
    pthread_mutex_lock(&n->mu);
    nv_entry *e = nv_index_find(n, key);
    if (e) *loc = (hy_nvme_loc){e->rec.loc.extent, e->rec.loc.off, e->rec.loc.stored};
    pthread_mutex_unlock(&n->mu);
    return e ? HY_OK : HY_ENOTFOUND;
}

int hy_nvme_remove(hy_nvme *n, const hy_key *key, hy_err *err)
{
    if (!n || !key) return hy_err_set(err, HY_EINVAL, "hy_nvme_remove: NULL argument");
    pthread_mutex_lock(&n->mu);
    nv_entry *e = nv_index_find(n, key);
    nv_op op;
    int rc =
        e ? nv_journal_begin(n, e->rec.loc.extent, true, &op, err)
          : hy_err_set(err, HY_ENOTFOUND, "key %s is not in the nvme tier %s", hex(key).s, n->dir);
    pthread_mutex_unlock(&n->mu); /* e may be gone from here on: only op is ours */
    if (rc) return rc;
    /* The tombstone is durable before the catalog delete and before the
     * entry's bytes can be reused. */
    const int fd = n->ext[op.extent].fd;
    rc = nv_journal_tombstone(n, &op, key, err);
    if (rc == HY_OK && fdatasync(fd) != 0)
        rc = hy_err_set(err, HY_EIO, "fdatasync: %s", strerror(errno));
    if (rc) hy_err_prefix(err, "nvme remove of key %s", hex(key).s);

    pthread_mutex_lock(&n->cat_mu);
    pthread_mutex_lock(&n->mu);
    nv_entry *cur = nv_index_find(n, key); /* a newer put may have landed meanwhile */
    const bool take = cur && cur->rec.seq < op.seq;
    const uint64_t floor = nv_journal_floor(n);
    pthread_mutex_unlock(&n->mu);
    bool synced = false;
    if (rc == HY_OK && take) {
        synced = nv_journal_want_sync(n, &op);
        rc = catalog_change(n, key, NULL, floor, synced, err);
    }
    if (rc) nv_journal_wipe(n, &op);
    pthread_mutex_lock(&n->mu);
    nv_journal_end(n, &op, synced && rc == HY_OK, floor);
    if (rc == HY_OK) {
        nv_journal_tomb(n, key, op.seq);
        cur = nv_index_find(n, key);
        if (cur && cur->rec.seq < op.seq) {
            nv_index_remove(n, cur);
            entry_retire(n, cur);
        }
    }
    pthread_mutex_unlock(&n->mu);
    pthread_mutex_unlock(&n->cat_mu);
    return rc;
}

/* --- listing and counters ----------------------------------------------------------- */

static int cmp_meta_key(const void *a, const void *b)
{
    return memcmp(((const hy_meta *)a)->key.b, ((const hy_meta *)b)->key.b, HY_KEY_BYTES);
}

/* Lists a snapshot of the index taken under the mutex, sorted by key (the
 * catalog's bytewise order); fn runs without the mutex, so it may call back
 * into the tier. Returns fn's non-zero value when it stopped the walk. */
int hy_nvme_foreach(hy_nvme *n, int (*fn)(void *ctx, const hy_meta *m), void *ctx, hy_err *err)
{
    if (!n || !fn) return hy_err_set(err, HY_EINVAL, "hy_nvme_foreach: NULL argument");
    pthread_mutex_lock(&n->mu);
    size_t count = 0;
    hy_meta *all = malloc((n->nentries ? n->nentries : 1) * sizeof *all);
    for (size_t i = 0; all && i < n->nbuckets; i++)
        for (nv_entry *e = n->buckets[i]; e; e = e->next) all[count++] = e->rec.meta;
    pthread_mutex_unlock(&n->mu);
    if (!all) return hy_err_set(err, HY_ENOMEM, "out of memory listing the nvme tier %s", n->dir);
    qsort(all, count, sizeof *all, cmp_meta_key);
    int rc = 0;
    for (size_t i = 0; i < count && rc == 0; i++) rc = fn(ctx, &all[i]);
    free(all);
    return rc;
}

void hy_nvme_stats_get(hy_nvme *n, hy_nvme_stats *st)
{
    if (!n || !st) return;
    pthread_mutex_lock(&n->mu);
    *st = (hy_nvme_stats){
        .entries = n->nentries,
        .live_bytes = n->live_bytes,
        .allocated_bytes = n->used_bytes,
        .extent_bytes_total = (uint64_t)n->nextents * n->extent_bytes,
        .reads = n->reads,
        .writes = n->writes,
        .checksum_failures = n->checksum_failures,
        .dropped_on_open = n->dropped_on_open,
        .journal_replayed = n->journal_replayed,
        .journal_rejected = n->journal_rejected,
        .journal_syncs = n->journal_syncs,
    };
    pthread_mutex_unlock(&n->mu);
    st->space_amplification =
        st->live_bytes ? (double)st->extent_bytes_total / (double)st->live_bytes : 1.0;
}

void hy_nvme_inject_io_error(hy_nvme *n, int direction, int count)
{
    if (!n) return;
    nv_io_inject(n->io, direction, count);
}
