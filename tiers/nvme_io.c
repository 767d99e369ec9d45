/*
 * Payload transfers through io_uring. A transfer (one put's or one get's
 * bytes) is cut into NV_IO_PIECE requests and keeps up to queue_depth of them
 * in flight, so a multi-MB payload keeps the device busy without one huge
 * request the kernel would split anyway.
 *
 * Rings: a pool of NV_IO_RINGS, made when the tier opens. A transfer takes
 * an idle ring (waiting for one when every ring is busy) and gives it back
 * when it ends, so each ring has one user at a time without a lock around
 * the I/O itself. The pool is fixed so that the process's descriptors do not
 * follow the most threads that ever transferred at once (the daemon lands
 * entries with up to 128 threads: a pool grown on demand ended a 30-minute
 * hypic-bench soak with six rings more than after its warm-up); NV_IO_RINGS
 * transfers of up to queue_depth requests each keep a device busy.
 *
 * A transfer returns only once every request it submitted has completed,
 * errors included: the caller's buffer is never left under the kernel.
 *
 * Progress: a transfer can report, while requests are still in flight, how
 * long the prefix of its bytes is whose requests have all completed (pieces
 * complete in any order; the prefix grows when the piece after it is done).
 * A get verifies its chunks there, so hashing runs while later pieces are
 * still being read. The report is made after the freed requests have been
 * refilled and submitted, so the device stays busy while the caller works.
 * Such a read keeps at most NV_READ_AHEAD bytes in flight past its completed
 * prefix rather than queue_depth pieces: a device that shares its bandwidth
 * among the requests it holds (the virtio disks measured here complete a
 * whole 64 MiB read's 32 requests within 0.5 ms of each other) would
 * otherwise complete everything at once and leave all the hashing after the
 * read; in waves of 8 MiB only the last wave's hashing follows the last
 * completion, and 8 MiB in flight (four 2 MiB requests, split further by the
 * kernel) still keeps the device as busy as the whole entry did (hypic-bench
 * tiers: read within a few percent of raw at queue depth 32).
 */
#include "nvme_internal.h"

#include <assert.h>
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct nv_ring {
    struct io_uring ring;
    struct nv_ring *next;
} nv_ring;

struct nv_io {
    pthread_mutex_t mu; /* guards idle */
    pthread_cond_t cv;  /* a ring went back */
    nv_ring *idle;
    uint32_t depth;
    atomic_int inject[2]; /* completions still to fail, per direction */
};

static int ring_new(nv_io *io, nv_ring **out, hy_err *err)
{
    nv_ring *r = calloc(1, sizeof *r);
    if (!r) return hy_err_set(err, HY_ENOMEM, "out of memory for an io_uring");
    int rc = io_uring_queue_init(io->depth, &r->ring, 0);
    if (rc < 0) {
        free(r);
        return hy_err_set(err, HY_EIO, "io_uring_queue_init(%u entries) failed: %s", io->depth,
                          strerror(-rc));
    }
    *out = r;
    return HY_OK;
}

static void ring_put(nv_io *io, nv_ring *r)
{
    pthread_mutex_lock(&io->mu);
    r->next = io->idle;
    io->idle = r;
    pthread_cond_signal(&io->cv);
    pthread_mutex_unlock(&io->mu);
}

static void ring_get(nv_io *io, nv_ring **out)
{
    pthread_mutex_lock(&io->mu);
    while (!io->idle) pthread_cond_wait(&io->cv, &io->mu);
    *out = io->idle;
    io->idle = io->idle->next;
    pthread_mutex_unlock(&io->mu);
}

int nv_io_new(uint32_t queue_depth, nv_io **out, hy_err *err)
{
    nv_io *io = calloc(1, sizeof *io);
    if (!io) return hy_err_set(err, HY_ENOMEM, "out of memory for the io_uring pool");
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->cv, NULL);
    io->depth = queue_depth;
    for (int i = 0; i < NV_IO_RINGS; i++) {
        nv_ring *r = NULL;
        int rc = ring_new(io, &r, err);
        if (rc) {
            nv_io_free(io);
            return rc;
        }
        ring_put(io, r);
    }
    *out = io;
    return HY_OK;
}

void nv_io_free(nv_io *io)
{
    if (!io) return;
    while (io->idle) {
        nv_ring *r = io->idle;
        io->idle = r->next;
        io_uring_queue_exit(&r->ring);
        free(r);
    }
    pthread_mutex_destroy(&io->mu);
    pthread_cond_destroy(&io->cv);
    free(io);
}

void nv_io_inject(nv_io *io, int dir, int count)
{
    atomic_store(&io->inject[dir ? 1 : 0], count > 0 ? count : 0);
}

/* Whether this completion should fail: takes one injected error if any. */
static bool take_injected(nv_io *io, int dir)
{
    int left = atomic_load(&io->inject[dir]);
    while (left > 0)
        if (atomic_compare_exchange_weak(&io->inject[dir], &left, left - 1)) return true;
    return false;
}

/* One request: the bytes of its piece not yet transferred, and the piece's
 * number in the transfer (pieces are numbered in the order they are cut). */
typedef struct slot {
    uint8_t *buf;
    uint64_t off, left;
    uint32_t piece;
} slot;

/* Which pieces have completed, for a transfer that reports progress: end[p]
 * is where piece p ends, counted in the bytes of the whole transfer (its
 * segments one after another); the prefix is the pieces before `first`. */
typedef struct pieces {
    uint64_t *end;
    uint8_t *done;
    uint32_t first; /* the first piece not completed */
} pieces;

static uint64_t pieces_prefix(pieces *p, uint32_t cut)
{
    while (p->first < cut && p->done[p->first]) p->first++;
    return p->first ? p->end[p->first - 1] : 0;
}

static void prep(struct io_uring *ring, int dir, int fd, const slot *s, uint64_t id)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    assert(sqe); /* at most queue_depth requests exist, and the ring has that many entries */
    unsigned n = (unsigned)HY_MIN(s->left, (uint64_t)NV_IO_PIECE);
    if (dir == NV_WRITE)
        io_uring_prep_write(sqe, fd, s->buf, n, s->off);
    else
        io_uring_prep_read(sqe, fd, s->buf, n, s->off);
    io_uring_sqe_set_data64(sqe, id);
}

/* Waits for a completion. A failure other than an interruption leaves
 * requests the kernel may still complete into the caller's buffer, which no
 * error return could make safe: that is a broken invariant, not an error. */
static struct io_uring_cqe *wait_one(struct io_uring *ring)
{
    for (;;) {
        struct io_uring_cqe *cqe;
        int w = io_uring_wait_cqe(ring, &cqe);
        if (w == 0) return cqe;
        if (w != -EINTR && w != -EAGAIN && w != -ETIME) {
            hy_log(HY_LOG_ERROR, "nvme: io_uring_wait_cqe failed with requests in flight: %s",
                   strerror(-w));
            abort();
        }
    }
}

static int transfer(nv_io *io, int dir, int fd, const nv_seg *segs, uint32_t nsegs,
                    const nv_hook *hook, const nv_progress *prog, hy_err *err)
{
    for (uint32_t i = 0; i < nsegs; i++)
        assert(segs[i].off % HY_PAGE == 0 && segs[i].len % HY_PAGE == 0 &&
               (uintptr_t)segs[i].buf % HY_PAGE == 0);
    dir = dir == NV_WRITE ? NV_WRITE : NV_READ;
    nv_ring *r = NULL;
    ring_get(io, &r);
    slot *slots = calloc(io->depth, sizeof *slots);
    uint32_t *idle = calloc(io->depth, sizeof *idle); /* a stack of free slot ids */
    if (!slots || !idle) {
        free(slots), free(idle), ring_put(io, r);
        return hy_err_set(err, HY_ENOMEM, "out of memory for an io_uring transfer");
    }
    pieces pc = {0};
    uint64_t np_cap = 0; /* pieces pc has room for (a reporting read) */
    const uint64_t piece = prog && prog->piece ? prog->piece : NV_IO_PIECE;
    const uint64_t ahead = prog && prog->ahead ? prog->ahead : NV_READ_AHEAD;
    assert(piece % HY_PAGE == 0 && piece <= NV_IO_PIECE);
    if (prog) {
        uint64_t np = 0;
        for (uint32_t i = 0; i < nsegs; i++) np += (segs[i].len + piece - 1) / piece;
        np += 1; /* a first piece shorter than the rest */
        np_cap = np;
        pc.end = malloc((np ? np : 1) * sizeof *pc.end);
        pc.done = calloc(np ? np : 1, 1);
        if (!pc.end || !pc.done || np > UINT32_MAX) {
            free(pc.end), free(pc.done), free(slots), free(idle), ring_put(io, r);
            return hy_err_set(err, HY_ENOMEM, "out of memory for an io_uring transfer");
        }
    }
    uint32_t nidle = 0;
    for (uint32_t i = io->depth; i-- > 0;) idle[nidle++] = i;
    uint32_t seg = 0;              /* the segment being cut into requests */
    uint64_t next = 0;             /* its first byte not yet given to a request */
    uint32_t pending = 0, ios = 0; /* prepared but not submitted; submitted, not completed */
    int fail = 0;                  /* the first error, -errno; -ENODATA: end of file */
    uint64_t fail_off = 0;
    bool broken = false; /* a submit failed: the ring is discarded afterwards */
    bool hooked = hook == NULL;
    int hook_rc = HY_OK;
    uint64_t base = 0;     /* bytes of the segments before seg */
    uint32_t cut = 0;      /* pieces cut so far */
    uint64_t reported = 0; /* the prefix last given to prog */
    for (;;) {
        const uint32_t ready = hooked ? nsegs : HY_MIN(hook->hold, nsegs);
        while (seg < nsegs && next == segs[seg].len) base += segs[seg++].len, next = 0;
        /* A reporting read keeps at most NV_READ_AHEAD bytes in flight past
         * its completed prefix (see the header). */
        /* One with a first size holds only that much until its first
         * report (a reader's first bytes, ahead of everything else). */
        const uint64_t limit = !prog                          ? UINT64_MAX
                               : reported == 0 && prog->first ? prog->first
                                                              : pieces_prefix(&pc, cut) + ahead;
        while (fail == 0 && seg < ready && nidle > 0 && base + next < limit &&
               (np_cap == 0 || cut < np_cap)) {
            const nv_seg *g = &segs[seg];
            uint32_t id = idle[--nidle];
            uint64_t take = HY_MIN(g->len - next, piece);
            if (prog && limit - (base + next) < take) /* whole pages: g->len is */
                take = (limit - (base + next) + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
            slots[id] = (slot){(uint8_t *)g->buf + next, g->off + next, take, cut};
            prep(&r->ring, dir, fd, &slots[id], id);
            next += slots[id].left, pending++;
            if (prog) pc.end[cut] = base + next;
            cut++;
            while (seg < nsegs && next == segs[seg].len) base += segs[seg++].len, next = 0;
        }
        if (pending > 0 && !broken) {
            int s = io_uring_submit(&r->ring);
            if (s <= 0) {
                if (fail == 0)
                    fail = s < 0 ? s : -EAGAIN,
                    fail_off = seg < nsegs ? segs[seg].off + next : segs[nsegs - 1].off;
                broken = true;
            } else {
                pending -= (uint32_t)s, ios += (uint32_t)s;
            }
        }
        if (!hooked) { /* the first requests are in flight: the caller's work now */
            hooked = true;
            hook_rc = hook->fn(hook->ctx, err);
            if (hook_rc && fail == 0) fail = -ECANCELED;
            continue;
        }
        if (prog && fail == 0) {
            const uint64_t prefix = pieces_prefix(&pc, cut);
            if (prefix > reported) { /* the refilled requests are in flight: verify behind them */
                reported = prefix;
                hook_rc = prog->fn(prog->ctx, prefix, err);
                if (hook_rc) fail = -ECANCELED;
                continue; /* completions that arrived meanwhile free requests to refill */
            }
        }
        if (ios == 0) break; /* all done, or failed with nothing in flight */
        struct io_uring_cqe *cqe = wait_one(&r->ring);
        do {
            uint32_t id = (uint32_t)io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(&r->ring, cqe);
            ios--;
            slot *s = &slots[id];
            if (res >= 0 && take_injected(io, dir)) res = -EIO;
            if (res <= 0) {
                if (fail == 0) fail = res < 0 ? res : -ENODATA, fail_off = s->off;
                idle[nidle++] = id;
                continue;
            }
            s->buf += res, s->off += (uint64_t)res, s->left -= (uint64_t)res;
            if (s->left > 0 && fail == 0 && !broken) { /* short: the rest of the piece */
                prep(&r->ring, dir, fd, s, id);
                pending++;
            } else {
                if (s->left == 0 && prog) pc.done[s->piece] = 1;
                idle[nidle++] = id;
            }
        } while (io_uring_peek_cqe(&r->ring, &cqe) == 0);
    }
    free(slots), free(idle), free(pc.end), free(pc.done);
    if (broken) { /* unsubmitted requests stay in its queue: never reuse it */
        io_uring_queue_exit(&r->ring);
        free(r);
    } else {
        ring_put(io, r);
    }
    if (fail == 0) return HY_OK;
    if (hook_rc) return hook_rc; /* the hook's or prog's message stands */
    return hy_err_set(err, HY_EIO, "%s at offset %llu failed: %s",
                      dir == NV_WRITE ? "write" : "read", (unsigned long long)fail_off,
                      fail == -ENODATA ? "unexpected end of file" : strerror(-fail));
}

int nv_io_transfer(nv_io *io, int dir, int fd, void *buf, uint64_t off, uint64_t len, hy_err *err)
{
    const nv_seg seg = {buf, off, len};
    return transfer(io, dir, fd, &seg, 1, NULL, NULL, err);
}

int nv_io_transferv(nv_io *io, int dir, int fd, const nv_seg *segs, uint32_t nsegs,
                    const nv_hook *hook, hy_err *err)
{
    return transfer(io, dir, fd, segs, nsegs, hook, NULL, err);
}

int nv_io_read_progress(nv_io *io, int fd, void *buf, uint64_t off, uint64_t len,
                        const nv_progress *prog, hy_err *err)
{
    const nv_seg seg = {buf, off, len};
    return transfer(io, NV_READ, fd, &seg, 1, NULL, prog, err);
}
