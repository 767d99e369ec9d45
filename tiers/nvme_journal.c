/*
 * The nvme tier's journal: how a put costs one flush instead of two.
 *
 * A put must be durable when it returns: its payload and its catalog record.
 * Writing the payload, fdatasync'ing the extent, then writing the record with
 * a synced RocksDB WAL write costs two device flushes, which dominate puts of
 * a few MiB. Instead each extent file begins with a ring of journal slots
 * (one HY_PAGE each, nv_journal_slots_for()): a put writes its payload, then
 * its record into the next slot of the same file, and one fdatasync makes
 * both durable. The catalog write that follows is left to the OS (RocksDB's
 * WAL, unsynced); every NV_SYNC_EVERY-th catalog write is synced. A removal
 * likewise writes a tombstone into a slot of the removed entry's extent and
 * fdatasyncs it before its unsynced catalog delete and before its bytes may
 * be reused.
 *
 * Every put and removal gets an operation number (seq) when it takes its
 * slot. Catalog records carry the number of the put that wrote them, and
 * every catalog change is written together with the floor: one below the
 * oldest operation still in flight, so that every operation numbered at or
 * below the floor had made its catalog change before that write. RocksDB
 * recovers a prefix of its WAL, so the recovered floor's promise holds for
 * the recovered catalog.
 *
 * A slot may be overwritten only when its operation is done and numbered at
 * or below the floor of the last *synced* catalog write (floor_durable):
 * its effect is then durable in the catalog. When the next slot of a ring is
 * not yet reusable, the put syncs the catalog first (or waits for a pending
 * operation to finish). So after a crash every operation above the recovered
 * floor still has its block in a ring, and recovery (nv_journal_recover)
 * replays them: per key, the highest-numbered of the catalog's record and
 * the blocks above the floor wins — a tombstone removes, a put's record is
 * taken after its payload is read back and its checksums verified (a put
 * cut short by the crash fails that and the older state is kept).
 *
 * Concurrent operations on one key resolve by number, as replay would: a
 * put that lands after a higher-numbered put or removal of its key is
 * superseded (its bytes freed, no catalog write), and a removal takes only
 * an entry numbered below it. Removals not yet covered by floor_durable are
 * remembered (tombs) for that check.
 *
 * An entry whose record does not fit in a slot (payloads of hundreds of MiB:
 * one checksum per MiB) takes a number but no slot, and its catalog write is
 * synced, as before the journal.
 */
#include "nvme_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- numbering, slots, the floor ------------------------------------------------ */

static bool slot_reusable(const hy_nvme *n, const nv_jslot *s)
{
    return !s->pending && s->seq <= n->floor_durable;
}

int nv_journal_begin(hy_nvme *n, uint32_t extent, bool want_slot, nv_op *op, hy_err *err)
{
    memset(op, 0, sizeof *op);
    nv_extent *x = &n->ext[extent];
    while (want_slot && !slot_reusable(n, &x->slots[x->jcur])) {
        if (x->slots[x->jcur].pending) { /* an operation still writing it: wait for it */
            pthread_cond_wait(&n->jcv, &n->mu);
            continue;
        }
        /* Done, but its catalog change may not be durable yet: sync it. */
        pthread_mutex_unlock(&n->mu);
        pthread_mutex_lock(&n->cat_mu);
        int rc = nv_journal_sync(n, err);
        pthread_mutex_unlock(&n->cat_mu);
        pthread_mutex_lock(&n->mu);
        if (rc) return rc;
    }
    op->seq = n->seq_next++;
    op->extent = extent;
    if (want_slot) {
        op->has_slot = true;
        op->slot = x->jcur;
        x->slots[x->jcur] = (nv_jslot){op->seq, true};
        x->jcur = (x->jcur + 1) % n->jslots;
    }
    op->prev = n->inflight_tail, op->next = NULL;
    if (n->inflight_tail)
        n->inflight_tail->next = op;
    else
        n->inflight = op;
    n->inflight_tail = op;
    return HY_OK;
}

uint64_t nv_journal_floor(const hy_nvme *n)
{
    return (n->inflight ? n->inflight->seq : n->seq_next) - 1;
}

bool nv_journal_want_sync(hy_nvme *n, const nv_op *op)
{
    return !op->has_slot || ++n->unsynced >= NV_SYNC_EVERY;
}

/* floor_durable rose: forget the tombs it covers, wake slot waiters. */
static void floor_advanced(hy_nvme *n, uint64_t floor)
{
    if (floor > n->floor_durable) n->floor_durable = floor;
    size_t k = 0;
    for (size_t i = 0; i < n->ntombs; i++)
        if (n->tombs[i].seq > n->floor_durable) n->tombs[k++] = n->tombs[i];
    n->ntombs = k;
    n->journal_syncs++;
    pthread_cond_broadcast(&n->jcv);
}

void nv_journal_end(hy_nvme *n, nv_op *op, bool synced, uint64_t floor)
{
    if (op->prev)
        op->prev->next = op->next;
    else
        n->inflight = op->next;
    if (op->next)
        op->next->prev = op->prev;
    else
        n->inflight_tail = op->prev;
    if (op->has_slot) n->ext[op->extent].slots[op->slot].pending = false;
    if (synced) {
        n->unsynced = 0;
        floor_advanced(n, floor);
    } else {
        pthread_cond_broadcast(&n->jcv);
    }
}

void nv_journal_tomb(hy_nvme *n, const hy_key *key, uint64_t seq)
{
    if (seq <= n->floor_durable) return;
    if (n->ntombs == n->ctombs) {
        size_t c = n->ctombs ? 2 * n->ctombs : 16;
        nv_tomb *g = realloc(n->tombs, c * sizeof *g);
        if (!g) { /* cannot remember it: make it durable instead */
            hy_log(HY_LOG_WARN, "nvme: out of memory remembering a removal; it stays ordered by "
                                "the next synced catalog write");
            return;
        }
        n->tombs = g, n->ctombs = c;
    }
    n->tombs[n->ntombs++] = (nv_tomb){*key, seq};
}

bool nv_journal_tombed_after(const hy_nvme *n, const hy_key *key, uint64_t seq)
{
    for (size_t i = 0; i < n->ntombs; i++)
        if (n->tombs[i].seq > seq && memcmp(n->tombs[i].key.b, key->b, HY_KEY_BYTES) == 0)
            return true;
    return false;
}

void nv_journal_batch_floor(rocksdb_writebatch_t *b, uint64_t floor)
{
    uint8_t f[NV_FLOOR_BYTES];
    nv_floor_encode(floor, f);
    rocksdb_writebatch_put(b, NV_FLOOR_KEY, strlen(NV_FLOOR_KEY), (const char *)f, sizeof f);
}

int nv_journal_sync(hy_nvme *n, hy_err *err)
{
    pthread_mutex_lock(&n->mu);
    const uint64_t floor = nv_journal_floor(n);
    pthread_mutex_unlock(&n->mu);
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    nv_journal_batch_floor(b, floor);
    char *e = NULL;
    rocksdb_write(n->db, n->wsync, b, &e);
    rocksdb_writebatch_destroy(b);
    if (e) {
        int rc = hy_err_set(err, HY_EIO, "syncing the catalog %s/catalog: %s", n->dir, e);
        rocksdb_free(e);
        return rc;
    }
    pthread_mutex_lock(&n->mu);
    n->unsynced = 0;
    floor_advanced(n, floor);
    pthread_mutex_unlock(&n->mu);
    return HY_OK;
}

/* --- slot I/O ------------------------------------------------------------------------ */

typedef struct put_job {
    const nv_op *op;
    nv_record *r;
    const void *data;
    uint8_t *block; /* NULL: no slot */
} put_job;

/* Runs while the payload's first requests are in flight. */
static int put_hook(void *ctx, hy_err *err)
{
    put_job *j = ctx;
    nv_checksum_payload(j->data, j->r->meta.bytes, j->r->sums);
    if (!j->block) return HY_OK;
    int rc = nv_journal_encode(NV_JPUT, j->op->seq, &j->r->meta.key, j->r, j->block);
    assert(rc != HY_ERANGE); /* the caller took a slot only for a record that fits */
    return rc ? hy_err_set(err, rc, "out of memory encoding a journal block") : HY_OK;
}

int nv_journal_put(hy_nvme *n, const nv_op *op, nv_record *r, const nv_seg *pay, hy_err *err)
{
    put_job j = {op, r, pay->buf, NULL};
    if (op->has_slot && !(j.block = aligned_alloc(HY_PAGE, HY_PAGE)))
        return hy_err_set(err, HY_ENOMEM, "out of memory for a journal block");
    const nv_seg segs[2] = {*pay, {j.block, (uint64_t)op->slot * HY_PAGE, HY_PAGE}};
    const nv_hook hook = {put_hook, &j, 1};
    int rc =
        nv_io_transferv(n->io, NV_WRITE, n->ext[op->extent].fd, segs, j.block ? 2 : 1, &hook, err);
    free(j.block);
    return rc;
}

int nv_journal_tombstone(hy_nvme *n, const nv_op *op, const hy_key *key, hy_err *err)
{
    assert(op->has_slot);
    uint8_t *block = aligned_alloc(HY_PAGE, HY_PAGE);
    if (!block) return hy_err_set(err, HY_ENOMEM, "out of memory for a journal block");
    nv_journal_encode(NV_JTOMB, op->seq, key, NULL, block); /* a tombstone always fits */
    int rc = nv_io_transfer(n->io, NV_WRITE, n->ext[op->extent].fd, block,
                            (uint64_t)op->slot * HY_PAGE, HY_PAGE, err);
    free(block);
    if (rc) hy_err_prefix(err, "journal slot %u", op->slot);
    return rc;
}

void nv_journal_wipe(hy_nvme *n, const nv_op *op)
{
    if (!op->has_slot) return;
    uint8_t *block = aligned_alloc(HY_PAGE, HY_PAGE);
    if (!block) return;
    memset(block, 0, HY_PAGE);
    hy_err ignored = {0};
    if (nv_io_transfer(n->io, NV_WRITE, n->ext[op->extent].fd, block, (uint64_t)op->slot * HY_PAGE,
                       HY_PAGE, &ignored) == HY_OK)
        (void)fdatasync(n->ext[op->extent].fd);
    free(block);
}

/* --- recovery ----------------------------------------------------------------------- */

/* A block above the floor, with where it was found. */
typedef struct cand {
    nv_jrec j;
    uint32_t extent, slot;
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    int c = memcmp(x->j.key.b, y->j.key.b, HY_KEY_BYTES);
    if (c) return c;
    return x->j.seq < y->j.seq ? 1 : x->j.seq > y->j.seq ? -1 : 0; /* newest first */
}

/* Reads one extent's ring: sets its slots and cursor, appends the blocks above
 * floor to *cs. */
static int read_ring(hy_nvme *n, uint32_t id, uint8_t *buf, uint64_t floor, cand **cs, size_t *nc,
                     size_t *cc, uint64_t *maxseq, hy_err *err)
{
    nv_extent *x = &n->ext[id];
    char path[4096];
    nv_extent_path(n, id, path, sizeof path);
    if (x->file_bytes < (uint64_t)n->jslots * HY_PAGE) return HY_OK; /* truncated: nothing */
    int rc = nv_io_transfer(n->io, NV_READ, x->fd, buf, 0, (uint64_t)n->jslots * HY_PAGE, err);
    if (rc) {
        hy_err_prefix(err, "reading the journal of %s", path);
        return rc;
    }
    uint64_t best = 0;
    for (uint32_t s = 0; s < n->jslots; s++) {
        nv_jrec j;
        hy_err why = {0};
        rc = nv_journal_decode(buf + (size_t)s * HY_PAGE, &j, &why);
        if (rc == HY_ENOMEM) return hy_err_set(err, HY_ENOMEM, "out of memory reading %s", path);
        if (rc == HY_EFORMAT)
            hy_log(HY_LOG_WARN, "nvme: %s: journal slot %u ignored: %s", path, s, why.msg);
        if (rc) continue;
        x->slots[s].seq = j.seq;
        if (j.seq > best) best = j.seq, x->jcur = (s + 1) % n->jslots;
        if (j.seq > *maxseq) *maxseq = j.seq;
        if (j.seq <= floor) {
            free(j.rec.sums);
            continue;
        }
        if (*nc == *cc) {
            size_t c2 = *cc ? 2 * *cc : 64;
            cand *g = realloc(*cs, c2 * sizeof *g);
            if (!g) {
                free(j.rec.sums);
                return hy_err_set(err, HY_ENOMEM, "out of memory reading %s", path);
            }
            *cs = g, *cc = c2;
        }
        (*cs)[(*nc)++] = (cand){j, id, s};
    }
    return HY_OK;
}

/* Takes a journalled put's location and verifies its payload: "" or why not. */
static const char *try_replay(hy_nvme *n, const nv_record *r, hy_err *err, int *fatal)
{
    const nv_loc *l = &r->loc;
    *fatal = HY_OK;
    if (l->extent >= n->ncap || !n->ext[l->extent].present) return "its extent file is missing";
    if (l->off < (uint64_t)n->jslots * HY_PAGE || l->off + l->stored > n->extent_bytes ||
        l->off + l->stored > n->ext[l->extent].file_bytes)
        return "it lies outside its extent's data";
    if (nv_space_take(&n->ext[l->extent].space, l->off, l->stored))
        return "it overlaps a live entry's bytes";
    void *buf = aligned_alloc(HY_PAGE, l->stored);
    const char *why = "";
    if (!buf) {
        *fatal = hy_err_set(err, HY_ENOMEM, "out of memory verifying a journalled put");
        why = "out of memory";
    } else if (nv_io_transfer(n->io, NV_READ, n->ext[l->extent].fd, buf, l->off, l->stored, err)) {
        why = "its payload cannot be read";
    } else if (nv_verify_payload(buf, r->meta.bytes, r->sums) >= 0) {
        why = "its payload fails its checksums (the put was cut short)";
    }
    free(buf);
    if (why[0]) nv_space_free(&n->ext[l->extent].space, l->off, l->stored);
    return why;
}

static void take_entry(hy_nvme *n, nv_entry *e)
{
    n->used_bytes += e->rec.loc.stored;
    e->persisted_ns = hy_wall_ns();
    nv_index_insert(n, e);
}

int nv_journal_recover(hy_nvme *n, uint64_t floor, hy_err *err)
{
    uint64_t maxseq = floor;
    for (size_t i = 0; i < n->nbuckets; i++)
        for (nv_entry *e = n->buckets[i]; e; e = e->next)
            if (e->rec.seq > maxseq) maxseq = e->rec.seq;
    cand *cs = NULL;
    size_t nc = 0, cc = 0;
    int rc = HY_OK;
    uint8_t *ring = aligned_alloc(HY_PAGE, (size_t)n->jslots * HY_PAGE);
    if (!ring) rc = hy_err_set(err, HY_ENOMEM, "out of memory reading the journals of %s", n->dir);
    for (uint32_t id = 0; rc == HY_OK && id < n->ncap; id++)
        if (n->ext[id].present) rc = read_ring(n, id, ring, floor, &cs, &nc, &cc, &maxseq, err);
    free(ring);
    if (nc) qsort(cs, nc, sizeof *cs, cmp_cand);

    /* Pass 1: a catalog entry older than a block of its key steps aside
     * (index and space) while the blocks are tried. */
    size_t ngroups = 0;
    nv_entry **aside = calloc(nc ? nc : 1, sizeof *aside); /* per group, by first index */
    if (!aside && rc == HY_OK) rc = hy_err_set(err, HY_ENOMEM, "out of memory replaying");
    for (size_t g = 0; rc == HY_OK && g < nc;) {
        size_t end = g;
        while (end < nc && memcmp(cs[end].j.key.b, cs[g].j.key.b, HY_KEY_BYTES) == 0) end++;
        nv_entry *e = nv_index_find(n, &cs[g].j.key);
        if (e && e->rec.seq < cs[g].j.seq) {
            nv_index_remove(n, e);
            n->used_bytes -= e->rec.loc.stored;
            nv_space_free(&n->ext[e->rec.loc.extent].space, e->rec.loc.off, e->rec.loc.stored);
            aside[g] = e;
        }
        ngroups++;
        g = end;
    }

    /* Pass 2: per key, newest block first; then pass 3 puts back the
     * catalog entries none of whose newer blocks held. */
    rocksdb_writebatch_t *b = rocksdb_writebatch_create();
    bool *fallback = calloc(nc ? nc : 1, sizeof *fallback);
    if (!fallback && rc == HY_OK) rc = hy_err_set(err, HY_ENOMEM, "out of memory replaying");
    for (size_t g = 0; rc == HY_OK && g < nc;) {
        size_t end = g;
        while (end < nc && memcmp(cs[end].j.key.b, cs[g].j.key.b, HY_KEY_BYTES) == 0) end++;
        const hy_key *k = &cs[g].j.key;
        char hex[65];
        hy_key_hex(k, hex);
        nv_entry *cat = nv_index_find(n, k); /* present only when newer than every block */
        const uint64_t above = cat ? cat->rec.seq : aside[g] ? aside[g]->rec.seq : 0;
        bool settled = cat != NULL;
        for (size_t i = g; !settled && i < end && cs[i].j.seq > above && rc == HY_OK; i++) {
            cand *c = &cs[i];
            if (c->j.kind == NV_JTOMB) {
                rocksdb_writebatch_delete(b, (const char *)k->b, HY_KEY_BYTES);
                n->journal_replayed++;
                settled = true;
                break;
            }
            const char *why = try_replay(n, &c->j.rec, err, &rc);
            if (rc) break;
            if (why[0]) {
                hy_log(HY_LOG_WARN, "nvme: %s: journalled put %llu of key %s not replayed: %s",
                       n->dir, (unsigned long long)c->j.seq, hex, why);
                n->journal_rejected++;
                continue;
            }
            nv_entry *e = calloc(1, sizeof *e);
            uint8_t *v = NULL;
            size_t len = 0;
            if (!e || nv_record_encode(&c->j.rec, &v, &len)) {
                free(e);
                nv_space_free(&n->ext[c->j.rec.loc.extent].space, c->j.rec.loc.off,
                              c->j.rec.loc.stored);
                rc = hy_err_set(err, HY_ENOMEM, "out of memory replaying");
                break;
            }
            rocksdb_writebatch_put(b, (const char *)k->b, HY_KEY_BYTES, (const char *)v, len);
            free(v);
            e->rec = c->j.rec;
            c->j.rec.sums = NULL; /* moved */
            take_entry(n, e);
            n->journal_replayed++;
            settled = true;
        }
        fallback[g] = !settled && aside[g];
        if (settled && aside[g]) {
            nv_entry_free(aside[g]);
            aside[g] = NULL;
        }
        g = end;
    }
    for (size_t g = 0; g < nc; g++) {
        nv_entry *e = aside[g];
        if (!e) continue;
        aside[g] = NULL;
        if (rc == HY_OK && fallback[g] &&
            nv_space_take(&n->ext[e->rec.loc.extent].space, e->rec.loc.off, e->rec.loc.stored) ==
                HY_OK) {
            take_entry(n, e);
            continue;
        }
        if (rc == HY_OK) {
            char hex[65];
            hy_key_hex(&e->rec.meta.key, hex);
            hy_log(HY_LOG_WARN,
                   "nvme: %s/catalog: dropped the record of key %s: it overlaps "
                   "a replayed entry's bytes",
                   n->dir, hex);
            n->dropped_on_open++;
            rocksdb_writebatch_delete(b, (const char *)e->rec.meta.key.b, HY_KEY_BYTES);
        }
        nv_entry_free(e);
    }
    free(fallback);
    free(aside);
    for (size_t i = 0; i < nc; i++) free(cs[i].j.rec.sums);
    free(cs);

    /* Everything is in the catalog now: one synced write, the floor at the top. */
    if (rc == HY_OK) {
        nv_journal_batch_floor(b, maxseq);
        char *e = NULL;
        rocksdb_write(n->db, n->wsync, b, &e);
        if (e) {
            rc = hy_err_set(err, HY_EIO, "writing the replayed journal to %s/catalog: %s", n->dir,
                            e);
            rocksdb_free(e);
        }
    }
    rocksdb_writebatch_destroy(b);
    if (rc) return rc;
    n->seq_next = maxseq + 1;
    n->floor_durable = maxseq;
    if (n->journal_replayed || n->journal_rejected)
        hy_log(HY_LOG_INFO,
               "nvme: %s: replayed %llu journalled operations above the catalog's floor %llu "
               "(%zu keys; %llu puts cut short and not replayed)",
               n->dir, (unsigned long long)n->journal_replayed, (unsigned long long)floor, ngroups,
               (unsigned long long)n->journal_rejected);
    return HY_OK;
}
