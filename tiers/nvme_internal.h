/*
 * Private to the nvme tier: the tier's state, shared by nvme.c (requests:
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
#ifndef HY_NVME_INTERNAL_H
#define HY_NVME_INTERNAL_H

#include "tiers/nvme.h"

#include <pthread.h>
#include <rocksdb/c.h>
#include <stdbool.h>
#include <stddef.h>

#define NV_RECORD_VERSION 1u
#define NV_FORMAT_VERSION 1u
#define NV_FORMAT_KEY     "hypic-nvme-format" /* never 32 bytes: entry keys are */
#define NV_FORMAT_BYTES   32u
#define NV_IO_PIECE       (2u << 20) /* bytes per io_uring request */

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

/* The store's format record (key NV_FORMAT_KEY): fixes extent_bytes for the
 * life of the directory. */
void nv_format_encode(uint64_t extent_bytes, uint8_t out[NV_FORMAT_BYTES]);
int nv_format_decode(const void *val, size_t len, uint64_t *extent_bytes, hy_err *err);

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

typedef struct nv_extent {
    bool present;
    int fd;              /* O_RDWR | O_DIRECT */
    uint64_t file_bytes; /* size found on open */
    nv_space space;
} nv_extent;

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
    uint64_t live_bytes, used_bytes;
    uint64_t reads, writes, checksum_failures, dropped_on_open;
};

/* extents/extent-NNNNNN.dat of the tier's directory. */
void nv_extent_path(const hy_nvme *n, uint32_t id, char *out, size_t cap);
/* Adds e (its key absent) to the index and its bytes to live_bytes. Under
 * the mutex (or before the tier is shared, on open). */
void nv_index_insert(hy_nvme *n, nv_entry *e);
void nv_entry_free(nv_entry *e);

#endif
