/*
 * The persistent tier: a RocksDB catalog (Debian's librocksdb-dev, C API)
 * and payload bytes in large preallocated extent files written and read with
 * io_uring (liburing) and O_DIRECT, straight from and into page-aligned host
 * buffers.
 *
 * Layout of DIR: catalog/ (RocksDB), extents/extent-NNNNNN.dat (each
 * extent_bytes, preallocated with fallocate), LOCK (flock, one process).
 * Catalog value per key: extent id, offset, stored length (padded to
 * HY_PAGE), payload length, one XXH3-64 per HY_NVME_CHUNK of payload, and the
 * hy_meta (model, tenant, tags, tokens, flops, created, last access, hits,
 * expiry). Format in docs/store-format.md.
 *
 * Durability (nvme_journal.c): each extent file begins with a ring of
 * journal slots. A put writes its payload and its record (into the next slot
 * of the same file), fdatasyncs the extent once, then writes the catalog
 * record with an unsynced WAL write (every 64th is synced). A removal writes
 * a tombstone into a slot and fdatasyncs it before its catalog delete and
 * before its bytes can be reused. Slots are overwritten only once the
 * catalog holds their effect durably. On open, the catalog is scanned, the
 * journals are read and every operation above the catalog's floor is
 * replayed (newest per key wins; a replayed put's payload is verified first),
 * and the extents' free space is rebuilt from the live records; a record
 * whose extent is missing or too short is dropped and logged. Every read
 * verifies the chunk checksums; a mismatch drops the entry (record deleted,
 * space freed), logs it, and returns HY_EFORMAT — never the bytes. Free space
 * inside extents is reused (first fit, coalescing); space amplification =
 * extent bytes allocated / live payload bytes.
 *
 * Thread safety: every call may come from any thread; the tier serialises
 * catalog updates and allocation internally; transfers take an io_uring
 * from a pool (one user per ring at a time, nvme_io.c).
 */
#ifndef HY_NVME_INTERNAL_H
#define HY_NVME_INTERNAL_H

#include "hy_tiers.h"

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- The tier's interface to the store ---- */

typedef struct hy_nvme hy_nvme;

/* Opens or creates the tier in dir, recovering the catalog and extents. */
int hy_nvme_open(const char *dir, const hy_nvme_config *cfg, hy_nvme **out, hy_err *err);
void hy_nvme_close(hy_nvme *n);

/* Stores a payload durably. data: HY_PAGE-aligned, readable for meta->bytes
 * rounded up to HY_PAGE (the tail padding is written too). Replaces an
 * existing entry of the same key. HY_ENOMEM (with a message) when no extent
 * has room and max_extents are in use: the caller evicts and retries. */
int hy_nvme_put(hy_nvme *n, const hy_meta *meta, const void *data, hy_err *err);
/* Reads a payload into dst (HY_PAGE-aligned, cap >= meta.bytes rounded up to
 * HY_PAGE) after verifying every chunk checksum; fills *meta when not NULL
 * and counts a hit (last access, hits — persisted lazily, at most once a
 * second per entry). HY_ENOTFOUND, or HY_EFORMAT after dropping a corrupt
 * entry. */
int hy_nvme_get(hy_nvme *n, const hy_key *key, void *dst, size_t cap, hy_meta *meta, hy_err *err);
/* The same, telling on_verified (when not NULL), while the rest is still
 * being read, each time the prefix of dst that has landed grows: `verified`
 * bytes of it passed their chunks' checksums (a reader may use them at
 * once), `landed` bytes are there (the rest of the chunk: usable only by a
 * reader that checks them by other means). Both grow, verified ≤ landed. A
 * non-zero return from it ends the get with that code (its message in err). */
typedef int (*hy_nvme_verified_fn)(void *ctx, uint64_t verified, uint64_t landed, hy_err *err);
int hy_nvme_get_progress(hy_nvme *n, const hy_key *key, void *dst, size_t cap, hy_meta *meta,
                         hy_nvme_verified_fn on_verified, void *ctx, hy_err *err);
/* The catalog record alone. */
int hy_nvme_lookup(hy_nvme *n, const hy_key *key, hy_meta *meta);
int hy_nvme_remove(hy_nvme *n, const hy_key *key, hy_err *err);
/* Calls fn for every entry (catalog order) until it returns non-zero. */
/* (fn sees a snapshot and may call into the tier; the return is fn's non-zero
 * value, or 0 when every entry was listed, or HY_ENOMEM.) */
int hy_nvme_foreach(hy_nvme *n, int (*fn)(void *ctx, const hy_meta *m), void *ctx, hy_err *err);
void hy_nvme_stats_get(hy_nvme *n, hy_nvme_stats *st);
/* Whether a put of an entry of `bytes` would find space now (a free run in
 * an extent, or room for a new extent) without evicting. */
bool hy_nvme_has_room(hy_nvme *n, uint64_t bytes);

/* Where an entry's payload lies: extents/extent-NNNNNN.dat (NNNNNN = extent,
 * six digits), bytes [offset, offset + stored). For tools and tests (e.g. to
 * damage a payload on purpose). 0 or HY_ENOTFOUND. */
typedef struct hy_nvme_loc {
    uint32_t extent;
    uint64_t offset, stored;
} hy_nvme_loc;
int hy_nvme_locate(hy_nvme *n, const hy_key *key, hy_nvme_loc *loc);

/* Fault injection for tests: the next `count` io_uring completions of the
 * given direction (0 read, 1 write) report -EIO. */
void hy_nvme_inject_io_error(hy_nvme *n, int direction, int count);

/* ---- Private to the nvme*.c files ---- */

/*
 * The implementation's parts: the tier's state, shared by nvme.c (requests:
 * put, get, remove, listing) and nvme_open.c (open, recovery, close), and the
 * three parts they build on:
 *
 *   nvme_record.c  the catalog's value encodings (entry records and the
 *                  store's format record) and the payload chunk checksums;
 *   nvme_space.c   one extent's free space: sorted free runs, first fit,
 *                  coalescing on free;
 *   nvme_io.c      payload transfers through io_uring: a pool of rings, a
 *                  transfer split into pieces with several in flight, and
 *                  the fault injection used by the tests.
 *
 * The on-disk formats are documented in docs/store-format.md; a change to
 * them changes NV_RECORD_VERSION or NV_FORMAT_VERSION.
 */
#define NV_RECORD_VERSION 2u
#define NV_FORMAT_VERSION 2u
#define NV_FORMAT_KEY     "hypic-nvme-format" /* never 32 bytes: entry keys are */
#define NV_FORMAT_BYTES   36u
#define NV_FLOOR_KEY      "hypic-nvme-floor" /* the catalog's replay floor (journal) */
#define NV_FLOOR_BYTES    16u
#define NV_IO_PIECE       (2u << 20) /* bytes per io_uring request */
#define NV_IO_RINGS       32         /* io_uring instances per tier: transfers at once */
#define NV_READ_AHEAD     (8u << 20) /* a verified read's bytes in flight past its completed prefix */
#define NV_LANDING_PIECE  (256u << 10) /* hy_nvme_get_progress with a reader: bytes per request */
#define NV_LANDING_AHEAD  (1u << 20)   /* and its bytes in flight past the prefix */
#define NV_LANDING_FIRST  (64u << 10)  /* and its first request, alone until it lands */
#define NV_JOURNAL_MAGIC  "HYNJ"
#define NV_JOURNAL_VER    1u
#define NV_SYNC_EVERY     64u /* catalog writes between two synced ones (replay bound) */

/* Journal slots at the head of each extent (one HY_PAGE each): enough that a
 * ring wraps rarely between two synced catalog writes, at most 1 MiB. */
static inline uint32_t nv_journal_slots_for(uint64_t extent_bytes)
{
    uint64_t j = extent_bytes / (64u * HY_PAGE);
    return (uint32_t)(j < 16 ? 16 : j > 256 ? 256 : j);
}

/* Bytes a payload of `bytes` takes in an extent: rounded up to HY_PAGE. */
static inline uint64_t nv_stored_bytes(uint64_t bytes)
{
    return (bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
}

/* Number of HY_NVME_CHUNK checksums a payload of `bytes` carries. */
static inline uint32_t nv_chunk_count(uint64_t bytes)
{
    return (uint32_t)((bytes + HY_NVME_CHUNK - 1) / HY_NVME_CHUNK);
}

/* --- catalog records (nvme_record.c) ------------------------------------ */

/* Where an entry's payload lies. */
typedef struct nv_loc {
    uint32_t extent; /* extents/extent-NNNNNN.dat */
    uint64_t off;    /* bytes, a multiple of HY_PAGE */
    uint64_t stored; /* nv_stored_bytes(meta.bytes) */
} nv_loc;

/* One catalog entry, decoded. meta.key is the catalog key. */
typedef struct nv_record {
    hy_meta meta;
    uint64_t seq; /* the put's operation number (nvme_journal.c): newest wins on replay */
    nv_loc loc;
    uint32_t nchunks; /* nv_chunk_count(meta.bytes) */
    uint64_t *sums;   /* [nchunks] XXH3-64 of each chunk; malloc'd, owned */
} nv_record;

/* sums[i] = XXH3-64 of payload bytes [i·CHUNK, min((i+1)·CHUNK, bytes)). */
void nv_checksum_payload(const void *data, uint64_t bytes, uint64_t *sums);
/* The index of the first chunk whose checksum differs, or -1 when all match. */
int64_t nv_verify_payload(const void *data, uint64_t bytes, const uint64_t *sums);

/* Encodes r into a malloc'd buffer (*out, *len). HY_ENOMEM only. */
int nv_record_encode(const nv_record *r, uint8_t **out, size_t *len);
/* Decodes a catalog value stored under key into r (r->sums malloc'd; free
 * it). HY_EFORMAT, naming the field, for anything that is not a well-formed
 * version-1 record; HY_ENOMEM. Checks the record on its own, not against the
 * extents (nvme.c does that). */
int nv_record_decode(const hy_key *key, const void *val, size_t len, nv_record *r, hy_err *err);

/* The store's format record (key NV_FORMAT_KEY): fixes extent_bytes and the
 * journal slots per extent for the life of the directory. */
void nv_format_encode(uint64_t extent_bytes, uint32_t jslots, uint8_t out[NV_FORMAT_BYTES]);
int nv_format_decode(const void *val, size_t len, uint64_t *extent_bytes, uint32_t *jslots,
                     hy_err *err);

/* The floor record (key NV_FLOOR_KEY): every operation numbered <= floor is
 * reflected in the catalog (nvme_journal.c). */
void nv_floor_encode(uint64_t floor, uint8_t out[NV_FLOOR_BYTES]);
int nv_floor_decode(const void *val, size_t len, uint64_t *floor, hy_err *err);

/* One journal slot (HY_PAGE bytes at slot × HY_PAGE of an extent): a put's
 * record or a removal's tombstone, with the operation's number. */
enum { NV_JPUT = 1, NV_JTOMB = 2 };
typedef struct nv_jrec {
    int kind; /* NV_JPUT or NV_JTOMB */
    uint64_t seq;
    hy_key key;
    nv_record rec; /* NV_JPUT: decoded (rec.sums malloc'd); else zeros */
} nv_jrec;
/* Fills block (HY_PAGE bytes); r is NULL for a tombstone. HY_ERANGE when the
 * record does not fit in a slot (huge payloads: many chunk checksums),
 * HY_ENOMEM. */
int nv_journal_encode(int kind, uint64_t seq, const hy_key *key, const nv_record *r,
                      uint8_t *block);
/* Whether r's journal block fits in one slot. */
bool nv_journal_fits(const nv_record *r);
/* HY_ENOTFOUND for a slot that holds no valid block (never written, zeroed,
 * torn or foreign bytes); HY_EFORMAT when the block is intact but its record
 * is not (message says why); HY_ENOMEM. */
int nv_journal_decode(const uint8_t *block, nv_jrec *out, hy_err *err);

/* --- free space of one extent (nvme_space.c) ---------------------------- */

typedef struct nv_run {
    uint64_t off, len;
} nv_run;

/* Free runs sorted by offset, never adjacent (coalesced), never empty. */
typedef struct nv_space {
    nv_run *runs;
    size_t n, cap;
    uint64_t size;       /* the extent's bytes */
    uint64_t free_bytes; /* sum of the runs */
} nv_space;

/* An extent of `size` bytes, all free. HY_ENOMEM. */
int nv_space_init(nv_space *s, uint64_t size);
void nv_space_release(nv_space *s);
/* First fit: the lowest offset with len free bytes. HY_ENOMEM when no run is
 * long enough (the space is unchanged). */
int nv_space_alloc(nv_space *s, uint64_t len, uint64_t *off);
/* Marks [off, off+len) used; HY_EINVAL when any of it is not free (two
 * records overlap) or lies outside the extent. Used when rebuilding from the
 * catalog. */
int nv_space_take(nv_space *s, uint64_t off, uint64_t len);
/* Returns [off, off+len) (wholly used) to the free runs, merging neighbours.
 * HY_ENOMEM when the run table could not grow: the bytes stay lost until the
 * next open rebuilds the space. */
int nv_space_free(nv_space *s, uint64_t off, uint64_t len);
/* The longest free run, bytes. */
uint64_t nv_space_largest(const nv_space *s);

/* --- io_uring transfers (nvme_io.c) ------------------------------------- */

typedef struct nv_io nv_io;
enum { NV_READ = 0, NV_WRITE = 1 };

/* Checks that io_uring works here (one ring is set up and kept). */
int nv_io_new(uint32_t queue_depth, nv_io **out, hy_err *err);
void nv_io_free(nv_io *io);
/* Reads or writes len bytes at file offset off of fd (O_DIRECT: buf, off and
 * len multiples of HY_PAGE) in pieces of NV_IO_PIECE, up to queue_depth in
 * flight. Returns only once no request is in flight. HY_EIO with "read at
 * offset X: <reason>" (the caller names the file). */
int nv_io_transfer(nv_io *io, int dir, int fd, void *buf, uint64_t off, uint64_t len, hy_err *err);
/* Several ranges of one file in one transfer (their requests in flight
 * together, in no particular order of completion): each as nv_io_transfer's.
 * With a hook, fn runs once, on the caller's thread, as soon as the first
 * requests are submitted — work that overlaps the I/O — and segments from
 * index `hold` on are started only after it returned (fn may fill them).
 * A failing fn (its HY_* code and message) ends the transfer once the
 * requests in flight complete. */
typedef struct nv_seg {
    void *buf;
    uint64_t off, len;
} nv_seg;
typedef struct nv_hook {
    int (*fn)(void *ctx, hy_err *err);
    void *ctx;
    uint32_t hold;
} nv_hook;
int nv_io_transferv(nv_io *io, int dir, int fd, const nv_seg *segs, uint32_t nsegs,
                    const nv_hook *hook, hy_err *err);
/* A read of len bytes as nv_io_transfer's that reports its progress: fn runs
 * on the caller's thread, while later requests are still in flight, each time
 * the completed prefix of the buffer grows, with its length (bytes from buf;
 * a multiple of HY_PAGE, growing, the last call with len). Every byte of the
 * prefix is in buf when fn runs. At most NV_READ_AHEAD bytes (or `ahead`) past
 * the completed prefix are in flight (nvme_io.c says why). A failing fn (its HY_* code and message)
 * ends the transfer once the requests in flight complete; no later call. An
 * I/O error ends it too, with the prefix reported so far. */
typedef struct nv_progress {
    int (*fn)(void *ctx, uint64_t prefix, hy_err *err);
    void *ctx;
    /* requests' bytes and bytes in flight past the prefix, multiples of
     * HY_PAGE; 0: NV_IO_PIECE and NV_READ_AHEAD */
    uint64_t piece, ahead;
    /* bytes in flight until the first report (0: ahead): a reader's first
     * bytes come before the rest is asked for */
    uint64_t first;
} nv_progress;
int nv_io_read_progress(nv_io *io, int fd, void *buf, uint64_t off, uint64_t len,
                        const nv_progress *prog, hy_err *err);
/* The next `count` completions of direction dir report -EIO. */
void nv_io_inject(nv_io *io, int dir, int count);

/* --- the tier's state (nvme.c: requests; nvme_open.c: open, recovery, close) */

typedef struct nv_entry {
    nv_record rec;
    uint32_t readers;      /* gets reading its bytes now */
    bool dead;             /* out of the index; freed when readers reaches 0 */
    bool keep_space;       /* dead, but its record could not be deleted: never reuse */
    bool dirty;            /* hits or last access newer than the catalog's */
    uint64_t persisted_ns; /* wall clock of its last catalog write */
    struct nv_entry *next; /* hash chain */
} nv_entry;

/* A journal slot's state in memory: the number of the operation whose block
 * it holds (0: none) and whether that operation is still in flight. A slot
 * may be overwritten only when its operation is done and numbered at or
 * below the durable floor: its effect is then safely in the catalog. */
typedef struct nv_jslot {
    uint64_t seq;
    bool pending;
} nv_jslot;

typedef struct nv_extent {
    bool present;
    int fd;              /* O_RDWR | O_DIRECT */
    uint64_t file_bytes; /* size found on open */
    nv_space space;
    nv_jslot *slots; /* [jslots] */
    uint32_t jcur;   /* the next slot to write, in ring order */
} nv_extent;

/* One put or remove in flight, on its caller's stack: numbered, holding a
 * journal slot (or none when its record is too large for one), linked in
 * the tier's in-flight list (ascending numbers) until its catalog write. */
typedef struct nv_op {
    uint64_t seq;
    uint32_t extent, slot;
    bool has_slot;
    struct nv_op *prev, *next;
} nv_op;

/* A removal not yet covered by the durable floor: a put numbered below it
 * that lands later is superseded (nvme_journal.c). */
typedef struct nv_tomb {
    hy_key key;
    uint64_t seq;
} nv_tomb;

struct hy_nvme {
    char *dir;
    int lock_fd;
    rocksdb_t *db;
    rocksdb_options_t *opts;
    rocksdb_writeoptions_t *wsync, *wlazy; /* synced WAL; WAL left to the OS (hit counts) */
    nv_io *io;
    uint64_t extent_bytes;
    uint32_t max_extents;

    /* Orders the synced catalog writes of puts and removes, which run outside
     * mu so that gets and lookups never wait on a WAL fsync. Lock order:
     * cat_mu before mu; code holding mu only ever try-locks cat_mu. */
    pthread_mutex_t cat_mu;
    pthread_mutex_t mu; /* everything below */
    nv_extent *ext;     /* [ncap], indexed by extent id; never reallocated */
    uint32_t ncap, nextents;
    nv_entry **buckets; /* [nbuckets], a power of two */
    size_t nbuckets, nentries;
    uint64_t seed; /* of the buckets' hash: random per open (see the store's key_hash) */
    uint64_t live_bytes, used_bytes;
    uint64_t reads, writes, checksum_failures, dropped_on_open;

    /* The journal (nvme_journal.c); all under mu except where said. */
    uint32_t jslots;        /* slots per extent */
    pthread_cond_t jcv;     /* an operation finished: a pending slot freed */
    uint64_t seq_next;      /* the next operation number */
    uint64_t floor_durable; /* the floor carried by the last synced catalog write */
    nv_op *inflight, *inflight_tail;
    nv_tomb *tombs;
    size_t ntombs, ctombs;
    uint32_t unsynced; /* catalog writes since the last synced one (under cat_mu) */
    uint64_t journal_replayed, journal_rejected, journal_syncs;
};

/* --- the journal (nvme_journal.c) ---------------------------------------- */

/* Numbers an operation on extent `extent` and takes that extent's next
 * journal slot (want_slot false: a number only). Called with mu held; may
 * drop and retake it (to wait for a pending slot, or to sync the catalog
 * under cat_mu so that the slot's old block may go) — so the caller must
 * not hold cat_mu and must revalidate what it read under mu before. */
int nv_journal_begin(hy_nvme *n, uint32_t extent, bool want_slot, nv_op *op, hy_err *err);
/* Writes a put's payload (pay) and its journal block into op's slot in one
 * transfer, computing the payload's chunk checksums into r->sums while the
 * payload's first requests are in flight; the block (which carries them)
 * follows. Without a slot (op->has_slot false) the payload alone, checksums
 * overlapped likewise. No lock held; the caller fdatasyncs afterwards. */
int nv_journal_put(hy_nvme *n, const nv_op *op, nv_record *r, const nv_seg *pay, hy_err *err);
/* Writes op's tombstone of key into its slot. No lock held; the caller
 * fdatasyncs afterwards. */
int nv_journal_tombstone(hy_nvme *n, const nv_op *op, const hy_key *key, hy_err *err);
/* Best effort after a failed operation: zeroes op's slot so that a replay
 * never revives it. No lock held. */
void nv_journal_wipe(hy_nvme *n, const nv_op *op);
/* The floor to write with a catalog change now: one below the oldest
 * operation in flight (op itself included). Under mu. */
uint64_t nv_journal_floor(const hy_nvme *n);
/* Whether this catalog write should be synced (every NV_SYNC_EVERY, or when
 * op has no slot); counts it. Under cat_mu. */
bool nv_journal_want_sync(hy_nvme *n, const nv_op *op);
/* op's catalog write is done (synced: it carried `floor`): op leaves the
 * in-flight list and its slot is no longer pending. Under mu (and cat_mu). */
void nv_journal_end(hy_nvme *n, nv_op *op, bool synced, uint64_t floor);
/* A removal numbered seq of key is done: remembered until the floor passes. */
void nv_journal_tomb(hy_nvme *n, const hy_key *key, uint64_t seq);
/* Whether a removal numbered above seq of key is remembered. Under mu. */
bool nv_journal_tombed_after(const hy_nvme *n, const hy_key *key, uint64_t seq);
/* A synced catalog write of the floor alone. Under cat_mu, not mu. */
int nv_journal_sync(hy_nvme *n, hy_err *err);
/* Adds the floor record to a catalog batch. */
void nv_journal_batch_floor(rocksdb_writebatch_t *b, uint64_t floor);
/* Recovery: reads every extent's journal and replays the operations above
 * the catalog's floor onto the loaded index (newest number wins per key; a
 * replayed put's payload is read and verified first, and an older state is
 * kept when it fails), then writes the result and a new floor in one synced
 * batch. Sets seq_next, floor_durable and the rings' cursors. On open only. */
int nv_journal_recover(hy_nvme *n, uint64_t floor, hy_err *err);

/* An extent's memory: free space with the journal's slots taken, the slots'
 * states. HY_ENOMEM. */
int nv_extent_init(hy_nvme *n, nv_extent *x);
/* extents/extent-NNNNNN.dat of the tier's directory. */
void nv_extent_path(const hy_nvme *n, uint32_t id, char *out, size_t cap);
/* Adds e (its key absent) to the index and its bytes to live_bytes. Under
 * the mutex (or before the tier is shared, on open). */
void nv_index_insert(hy_nvme *n, nv_entry *e);
nv_entry *nv_index_find(hy_nvme *n, const hy_key *k);
/* Takes e out of the index (its bytes stay allocated: the caller decides). */
void nv_index_remove(hy_nvme *n, nv_entry *e);
void nv_entry_free(nv_entry *e);

#endif
