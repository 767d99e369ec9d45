/*
 * Opening, recovering and closing the nvme tier (nvme_internal.h). Open takes the
 * directory's LOCK (flock: one open per directory, across and within
 * processes), opens the RocksDB catalog and its format record (which fixes
 * the extent size for the directory's life), opens every extent file, then
 * loads every record into the index and rebuilds each extent's free space
 * from the records' locations. A record that is malformed, names a missing
 * extent, reaches past its extent or its (truncated) file, or overlaps an
 * earlier record is deleted from the catalog, logged and counted
 * (dropped_on_open); the others are trusted as far as their location goes and
 * their payload bytes are still checked on every read. An extent found short
 * is extended back to the extent size. Close saves the hit counts not yet
 * persisted and releases everything, the LOCK last.
 */
#include "nvme_internal.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define NV_DEFAULT_EXTENT  (256ull << 20)
#define NV_DEFAULT_EXTENTS 64u
#define NV_DEFAULT_DEPTH   32u
#define NV_MAX_EXTENT_ID   999999u /* six digits in the file name */

static int lock_dir(hy_nvme *n, hy_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/LOCK", n->dir);
    n->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (n->lock_fd < 0) return hy_err_set(err, HY_EIO, "opening %s: %s", path, strerror(errno));
    if (flock(n->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[32] = "";
        ssize_t got = pread(n->lock_fd, holder, sizeof holder - 1, 0);
        holder[got > 0 ? got : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        close(n->lock_fd);
        n->lock_fd = -1;
        if (e == EWOULDBLOCK)
            return hy_err_set(err, HY_EIO,
                              "%s is locked: the nvme tier in %s is already open (process %s); "
                              "one process, one open at a time",
                              path, n->dir, holder[0] ? holder : "unknown");
        return hy_err_set(err, HY_EIO, "flock(%s): %s", path, strerror(e));
    }
    if (ftruncate(n->lock_fd, 0) == 0) {
        char pid[32];
        int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
        if (pwrite(n->lock_fd, pid, (size_t)len, 0) != len) { /* diagnostics only */
        }
    }
    return HY_OK;
}

/* Reads the floor record; 0 when there is none (a new or an empty catalog). */
static int read_floor(hy_nvme *n, uint64_t *floor, hy_err *err)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    size_t len = 0;
    char *e = NULL;
    char *v = rocksdb_get(n->db, ro, NV_FLOOR_KEY, strlen(NV_FLOOR_KEY), &len, &e);
    rocksdb_readoptions_destroy(ro);
    *floor = 0;
    int rc = HY_OK;
    if (e) {
        rc = hy_err_set(err, HY_EIO, "reading %s from %s/catalog: %s", NV_FLOOR_KEY, n->dir, e);
        rocksdb_free(e);
    } else if (v && (rc = nv_floor_decode(v, len, floor, err))) {
        hy_err_prefix(err, "%s/catalog", n->dir);
    }
    rocksdb_free(v);
    return rc;
}

static int open_catalog(hy_nvme *n, uint64_t want_extent_bytes, hy_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/catalog", n->dir);
    n->opts = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(n->opts, 1);
    rocksdb_options_set_info_log_level(n->opts, 2); /* warnings and worse */
    rocksdb_options_set_keep_log_file_num(n->opts, 2);
    rocksdb_options_set_write_buffer_size(n->opts, 8u << 20);
    /* Unsynced catalog writes stay in RocksDB's WAL buffer until the next
     * synced one (at most NV_SYNC_EVERY later): the journal makes them
     * redundant (nvme_journal.c), and a process crash then loses them as a
     * power cut would — so the crash tests exercise the journal's replay. */
    rocksdb_options_set_manual_wal_flush(n->opts, 1);
    n->wsync = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(n->wsync, 1);
    n->wlazy = rocksdb_writeoptions_create();
    char *e = NULL;
    n->db = rocksdb_open(n->opts, path, &e);
    if (e) {
        int rc = hy_err_set(err, HY_EIO, "opening the catalog %s: %s", path, e);
        rocksdb_free(e);
        n->db = NULL;
        return rc;
    }
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    size_t len = 0;
    char *v = rocksdb_get(n->db, ro, NV_FORMAT_KEY, strlen(NV_FORMAT_KEY), &len, &e);
    rocksdb_readoptions_destroy(ro);
    if (e) {
        int rc = hy_err_set(err, HY_EIO, "reading %s from %s: %s", NV_FORMAT_KEY, path, e);
        rocksdb_free(e);
        return rc;
    }
    if (v) {
        int rc = nv_format_decode(v, len, &n->extent_bytes, &n->jslots, err);
        rocksdb_free(v);
        if (rc) {
            hy_err_prefix(err, "%s, key %s", path, NV_FORMAT_KEY);
            return rc;
        }
        if (n->extent_bytes != want_extent_bytes)
            hy_log(HY_LOG_INFO,
                   "nvme: %s keeps the extent size it was created with, %llu bytes (asked: %llu)",
                   n->dir, (unsigned long long)n->extent_bytes,
                   (unsigned long long)want_extent_bytes);
        return HY_OK;
    }
    uint8_t f[NV_FORMAT_BYTES];
    n->extent_bytes = want_extent_bytes;
    n->jslots = nv_journal_slots_for(want_extent_bytes);
    nv_format_encode(n->extent_bytes, n->jslots, f);
    rocksdb_put(n->db, n->wsync, NV_FORMAT_KEY, strlen(NV_FORMAT_KEY), (const char *)f, sizeof f,
                &e);
    if (e) {
        int rc = hy_err_set(err, HY_EIO, "writing %s to %s: %s", NV_FORMAT_KEY, path, e);
        rocksdb_free(e);
        return rc;
    }
    return HY_OK;
}

/* Opens every extents/extent-NNNNNN.dat; sizes the extent table to hold the
 * highest id found and max_extents. */
static int open_extents(hy_nvme *n, hy_err *err)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/extents", n->dir);
    DIR *d = opendir(dir);
    if (!d) return hy_err_set(err, HY_EIO, "opening %s: %s", dir, strerror(errno));
    uint32_t *ids = NULL, nids = 0, cap = 0, top = 0;
    for (struct dirent *de; (de = readdir(d));) {
        unsigned id;
        int end = 0;
        if (sscanf(de->d_name, "extent-%6u.dat%n", &id, &end) != 1 || end == 0 ||
            de->d_name[end] != '\0' || strlen(de->d_name) != 17)
            continue;
        if (nids == cap) {
            uint32_t *g = realloc(ids, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) {
                free(ids), closedir(d);
                return hy_err_set(err, HY_ENOMEM, "out of memory listing %s", dir);
            }
            ids = g;
        }
        ids[nids++] = id;
        top = HY_MAX(top, id + 1);
    }
    closedir(d);
    n->ncap = HY_MAX(top, n->max_extents);
    n->ext = calloc(n->ncap, sizeof *n->ext);
    if (!n->ext) {
        free(ids);
        return hy_err_set(err, HY_ENOMEM, "out of memory for %u extents", n->ncap);
    }
    for (uint32_t i = 0; i < n->ncap; i++) n->ext[i].fd = -1;
    int rc = HY_OK;
    for (uint32_t i = 0; i < nids && rc == HY_OK; i++) {
        char path[4096];
        nv_extent_path(n, ids[i], path, sizeof path);
        nv_extent *x = &n->ext[ids[i]];
        struct stat st;
        x->fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
        if (x->fd < 0 || fstat(x->fd, &st) != 0) {
            rc = hy_err_set(err, HY_EIO, "opening %s (O_DIRECT): %s", path, strerror(errno));
        } else if (nv_extent_init(n, x)) {
            rc = hy_err_set(err, HY_ENOMEM, "out of memory for the free space of %s", path);
        } else {
            x->present = true, x->file_bytes = (uint64_t)st.st_size;
            n->nextents++;
        }
    }
    free(ids);
    return rc;
}

/* Checks a decoded record against the extents and takes its space: "" when it
 * is usable, else why not. */
static const char *admit_record(hy_nvme *n, const nv_record *r)
{
    const nv_loc *l = &r->loc;
    if (l->extent >= n->ncap || !n->ext[l->extent].present) return "its extent file is missing";
    if (l->off + l->stored > n->extent_bytes) return "it lies past the end of its extent";
    if (l->off + l->stored > n->ext[l->extent].file_bytes)
        return "its extent file is shorter than the record (truncated)";
    if (nv_space_take(&n->ext[l->extent].space, l->off, l->stored))
        return "it overlaps another record's bytes";
    return "";
}

static void drop_on_open(hy_nvme *n, const char *key, size_t klen, const char *why)
{
    char name[65] = "?";
    if (klen == HY_KEY_BYTES) hy_hex((const uint8_t *)key, HY_KEY_BYTES, name);
    hy_log(HY_LOG_WARN, "nvme: %s/catalog: dropped the record of key %s: %s", n->dir, name, why);
    n->dropped_on_open++;
    char *e = NULL;
    rocksdb_delete(n->db, n->wsync, key, klen, &e);
    if (e) {
        hy_log(HY_LOG_WARN, "nvme: %s/catalog: could not delete the record of key %s: %s", n->dir,
               name, e);
        rocksdb_free(e);
    }
}

/* Loads every record into the index, dropping those that are malformed or
 * do not fit the extents, and rebuilds each extent's free space. */
static int load_catalog(hy_nvme *n, hy_err *err)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator(n->db, ro);
    int rc = HY_OK;
    for (rocksdb_iter_seek_to_first(it); rc == HY_OK && rocksdb_iter_valid(it);
         rocksdb_iter_next(it)) {
        size_t klen, vlen;
        const char *k = rocksdb_iter_key(it, &klen), *v = rocksdb_iter_value(it, &vlen);
        if (klen != HY_KEY_BYTES) {
            const bool known = (klen == strlen(NV_FORMAT_KEY) && !memcmp(k, NV_FORMAT_KEY, klen)) ||
                               (klen == strlen(NV_FLOOR_KEY) && !memcmp(k, NV_FLOOR_KEY, klen));
            if (!known)
                hy_log(HY_LOG_WARN, "nvme: %s/catalog: ignoring a key of %zu bytes", n->dir, klen);
            continue;
        }
        nv_entry *e = calloc(1, sizeof *e);
        if (!e) {
            rc = hy_err_set(err, HY_ENOMEM, "out of memory loading %s/catalog", n->dir);
            break;
        }
        hy_key key;
        memcpy(key.b, k, HY_KEY_BYTES);
        hy_err why = {0};
        if (nv_record_decode(&key, v, vlen, &e->rec, &why) == HY_ENOMEM) {
            nv_entry_free(e);
            rc = hy_err_set(err, HY_ENOMEM, "out of memory loading %s/catalog", n->dir);
            break;
        }
        const char *bad = why.code ? why.msg : admit_record(n, &e->rec);
        if (bad[0]) {
            drop_on_open(n, k, klen, bad);
            nv_entry_free(e);
            continue;
        }
        e->persisted_ns = hy_wall_ns();
        n->used_bytes += e->rec.loc.stored;
        nv_index_insert(n, e);
    }
    char *ie = NULL;
    rocksdb_iter_get_error(it, &ie);
    if (ie && rc == HY_OK) rc = hy_err_set(err, HY_EIO, "reading %s/catalog: %s", n->dir, ie);
    rocksdb_free(ie);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return rc;
}

/* An extent file found shorter than extent_bytes is extended again; if that
 * fails, its missing tail is kept out of the free space. */
static void repair_short_extents(hy_nvme *n)
{
    for (uint32_t id = 0; id < n->ncap; id++) {
        nv_extent *x = &n->ext[id];
        if (!x->present || x->file_bytes >= n->extent_bytes) continue;
        char path[4096];
        nv_extent_path(n, id, path, sizeof path);
        if (fallocate(x->fd, 0, 0, (off_t)n->extent_bytes) == 0 && fsync(x->fd) == 0) {
            hy_log(HY_LOG_WARN, "nvme: %s was %llu bytes; extended to %llu", path,
                   (unsigned long long)x->file_bytes, (unsigned long long)n->extent_bytes);
            x->file_bytes = n->extent_bytes;
            continue;
        }
        uint64_t keep = x->file_bytes / HY_PAGE * HY_PAGE;
        hy_log(HY_LOG_WARN, "nvme: %s is %llu bytes and could not be extended (%s); using %llu",
               path, (unsigned long long)x->file_bytes, strerror(errno), (unsigned long long)keep);
        if (nv_space_take(&x->space, keep, n->extent_bytes - keep) == HY_OK)
            n->used_bytes += n->extent_bytes - keep;
    }
}

static int check_config(const hy_nvme_config *c, hy_nvme_config *out, hy_err *err)
{
    *out = c ? *c : (hy_nvme_config){0};
    if (out->extent_bytes == 0) out->extent_bytes = NV_DEFAULT_EXTENT;
    if (out->max_extents == 0) out->max_extents = NV_DEFAULT_EXTENTS;
    if (out->queue_depth == 0) out->queue_depth = NV_DEFAULT_DEPTH;
    const uint64_t journal = (uint64_t)nv_journal_slots_for(out->extent_bytes) * HY_PAGE;
    if (out->extent_bytes % HY_PAGE || out->extent_bytes > (1ull << 40) ||
        out->extent_bytes < 2 * journal)
        return hy_err_set(err, HY_ERANGE,
                          "nvme config: extent_bytes = %llu is not a multiple of %u from %llu "
                          "(twice its journal) up to 1 TiB",
                          (unsigned long long)out->extent_bytes, HY_PAGE,
                          (unsigned long long)(2 * journal));
    if (out->max_extents > NV_MAX_EXTENT_ID + 1)
        return hy_err_set(err, HY_ERANGE, "nvme config: max_extents = %u exceeds %u",
                          out->max_extents, NV_MAX_EXTENT_ID + 1);
    if (out->queue_depth > 4096)
        return hy_err_set(err, HY_ERANGE, "nvme config: queue_depth = %u exceeds 4096",
                          out->queue_depth);
    return HY_OK;
}

/* mkdir -p: the tier's directory and any missing parents (var/nvme on a fresh
 * clone, where var/ does not exist yet). */
static int make_dir(const char *path, hy_err *err)
{
    char buf[4096];
    const size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return hy_err_set(err, HY_EINVAL, "directory path of %zu bytes: 1..%zu", n, sizeof buf - 1);
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0') continue;
        const char c = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
            const int e = errno;
            return hy_err_set(err, HY_EIO, "creating directory %s: %s", buf, strerror(e));
        }
        buf[i] = c;
    }
    return HY_OK;
}

int hy_nvme_open(const char *dir, const hy_nvme_config *cfg, hy_nvme **out, hy_err *err)
{
    if (!dir || !out) return hy_err_set(err, HY_EINVAL, "hy_nvme_open: dir and out are required");
    *out = NULL;
    hy_nvme_config c;
    int rc = check_config(cfg, &c, err);
    if (rc) return rc;
    hy_nvme *n = calloc(1, sizeof *n);
    if (!n || !(n->dir = strdup(dir))) {
        free(n);
        return hy_err_set(err, HY_ENOMEM, "out of memory opening %s", dir);
    }
    pthread_mutex_init(&n->mu, NULL);
    pthread_mutex_init(&n->cat_mu, NULL);
    pthread_cond_init(&n->jcv, NULL);
    n->lock_fd = -1;
    n->max_extents = c.max_extents;
    n->nbuckets = 64;
    if (getrandom(&n->seed, sizeof n->seed, 0) != (ssize_t)sizeof n->seed)
        n->seed = hy_now_ns() ^ (uint64_t)(uintptr_t)n;
    n->buckets = calloc(n->nbuckets, sizeof *n->buckets);
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/extents", dir);
    if (!n->buckets) rc = hy_err_set(err, HY_ENOMEM, "out of memory opening %s", dir);
    if (!rc) rc = make_dir(dir, err);
    if (!rc) rc = make_dir(sub, err);
    if (!rc) rc = lock_dir(n, err);
    if (!rc) rc = open_catalog(n, c.extent_bytes, err);
    if (!rc) rc = open_extents(n, err);
    if (!rc) rc = nv_io_new(c.queue_depth, &n->io, err);
    uint64_t floor = 0;
    if (!rc) rc = read_floor(n, &floor, err);
    if (!rc) rc = load_catalog(n, err);
    if (!rc) repair_short_extents(n);
    if (!rc) rc = nv_journal_recover(n, floor, err);
    if (rc) {
        hy_nvme_close(n);
        return rc;
    }
    if (n->dropped_on_open)
        hy_log(HY_LOG_WARN, "nvme: %s: %llu records dropped on open, %zu entries kept", dir,
               (unsigned long long)n->dropped_on_open, n->nentries);
    *out = n;
    return HY_OK;
}

/* Writes the hit counts not yet persisted and the floor (nothing is in
 * flight: every operation is in the catalog), in one synced batch. */
static void persist_dirty(hy_nvme *n)
{
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    nv_journal_batch_floor(b, n->seq_next - 1);
    size_t count = 0;
    for (size_t i = 0; i < n->nbuckets; i++)
        for (nv_entry *e = n->buckets[i]; e; e = e->next) {
            uint8_t *v;
            size_t len;
            if (!e->dirty || nv_record_encode(&e->rec, &v, &len)) continue;
            rocksdb_writebatch_put(b, (const char *)e->rec.meta.key.b, HY_KEY_BYTES,
                                   (const char *)v, len);
            free(v);
            count++;
        }
    char *err = NULL;
    rocksdb_write(n->db, n->wsync, b, &err);
    if (err) {
        hy_log(HY_LOG_WARN, "nvme: %s/catalog: hit counts of %zu entries not saved: %s", n->dir,
               count, err);
        rocksdb_free(err);
    }
    rocksdb_writebatch_destroy(b);
}

void hy_nvme_close(hy_nvme *n)
{
    if (!n) return;
    if (n->db && n->buckets && n->seq_next) persist_dirty(n); /* seq_next: recovered */
    for (size_t i = 0; n->buckets && i < n->nbuckets; i++)
        for (nv_entry *e = n->buckets[i], *nx; e; e = nx) {
            nx = e->next;
            assert(e->readers == 0); /* no call may be running during close */
            nv_entry_free(e);
        }
    free(n->buckets);
    if (n->db) rocksdb_close(n->db);
    if (n->opts) rocksdb_options_destroy(n->opts);
    if (n->wsync) rocksdb_writeoptions_destroy(n->wsync);
    if (n->wlazy) rocksdb_writeoptions_destroy(n->wlazy);
    nv_io_free(n->io);
    for (uint32_t i = 0; n->ext && i < n->ncap; i++) {
        if (n->ext[i].fd >= 0) close(n->ext[i].fd);
        nv_space_release(&n->ext[i].space);
        free(n->ext[i].slots);
    }
    free(n->ext);
    free(n->tombs);
    if (n->lock_fd >= 0) close(n->lock_fd); /* releases the flock */
    pthread_mutex_destroy(&n->mu);
    pthread_mutex_destroy(&n->cat_mu);
    pthread_cond_destroy(&n->jcv);
    free(n->dir);
    free(n);
}
