/*
 * Crash safety of the store (tiers/include/hy_tiers.h over tiers/nvme_internal.h, write-through).
 *
 * The crash loop: a writer process puts, replaces and removes entries and is
 * SIGKILLed at a random moment, hundreds of times, always on the same
 * directory. After each kill this process reopens the store (recovery runs
 * on everything the earlier kills left) and checks it against a model built
 * from what the writer reported: every entry the writer saw committed, and
 * did not see removed since, reads back byte-identical; nothing it removed,
 * replaced or never began is visible; the one operation cut short shows its
 * old or its new state, never anything else. The model then takes what was
 * observed and the next writer starts from it. The NVMe tier keeps its
 * unsynced catalog writes in RocksDB's WAL buffer, so a kill loses them as a
 * power cut would: what the writer committed since the last synced catalog
 * write comes back through the journal's replay (nvme_journal.c), counted in
 * the summary.
 *
 * The writer is this program re-executed with --crash-writer (a fork alone
 * would inherit RocksDB's background-thread state without the threads). It
 * reports on a pipe, one write(2) per line (atomic: lines are far below
 * PIPE_BUF), each sent once the call it names has returned:
 *   O              the store is open
 *   B n gen bytes  a put of key n began (payload: the pattern of (n, gen))
 *   C n gen bytes  that put's commit returned success
 *   D n            a removal of key n began;  R n  it returned
 *   V n            a read in the writer found consistent bytes
 *   E/F ...        a wrong byte / a failed call (fails the test)
 * One kill in eight comes at a random time after the exec rather than after
 * "O", so that some land in the middle of recovery.
 *
 * Then injected faults at the store level (test_nvme.c injects them into the
 * tier alone), each ending in a clean error or a dropped entry with the store
 * still serving: a flipped byte in an extent, a truncated extent file, a full
 * NVMe tier, and failed io_uring completions during a demotion and a
 * promotion.
 *
 * Environment: HY_CRASH_SEED (default 1) seeds the delays and the writers;
 * HY_CRASH_ITERS (default 200) sets the number of kills.
 */
#include "test_util.h"
#include "hy_tiers.h"
#include "nvme_internal.h" /* the NVMe tier alone: damaging payloads on purpose */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB          (1ull << 20)
#define NKEYS        16u
#define MIN_BYTES    4096ull
#define MAX_BYTES    (3ull * MiB)
#define BAD_BYTES    (-1000) /* read_back: a wrong byte or a meta that does not match it */
#define WRITER_LIFE  30.0    /* seconds: a writer whose parent vanished stops by itself */
#define EARLY_EVERY  8       /* one kill in EARLY_EVERY is timed from the exec */
#define WAIT_OPEN_MS 60000   /* the longest a writer may take to open the store */

static char g_tmp[64];
static uint64_t g_seed = 1;

/* --- failed io_uring completions at the store level ------------------------------
 *
 * hy_store keeps its hy_nvme private, so hy_nvme_inject_io_error is out of
 * reach without changing a header. Instead this program interposes liburing's
 * io_uring_submit (liburing is a shared library; this definition wins for the
 * calls from the statically linked hy_tiers): while armed, the next queued
 * read or write request gets an invalid file descriptor and the kernel
 * completes it with -EBADF — a real failed completion, as the tier would get
 * it from a failing device. */

static atomic_int g_fail[2]; /* read and write requests still to fail */

static bool take_fail(int dir)
{
    int left = atomic_load(&g_fail[dir]);
    while (left > 0)
        if (atomic_compare_exchange_weak(&g_fail[dir], &left, left - 1)) return true;
    return false;
}

int io_uring_submit(struct io_uring *ring)
{
    static int (*real)(struct io_uring *);
    if (!real) real = (int (*)(struct io_uring *))dlsym(RTLD_NEXT, "io_uring_submit");
    if (!real) abort();
    struct io_uring_sq *sq = &ring->sq;
    for (unsigned i = sq->sqe_head; i != sq->sqe_tail; i++) { /* queued, not yet submitted */
        struct io_uring_sqe *sqe = &sq->sqes[i & sq->ring_mask];
        const int dir = sqe->opcode == IORING_OP_WRITE ? 1 : sqe->opcode == IORING_OP_READ ? 0 : -1;
        if (dir >= 0 && take_fail(dir)) sqe->fd = -1;
    }
    return real(ring);
}

/* --- entries: key n, generation gen, payload the pattern of (n, gen) -------------- */

static hy_key key_of(uint32_t n)
{
    char seed[32];
    int len = snprintf(seed, sizeof seed, "crash-key-%u", n);
    hy_key k;
    hy_sha256(seed, (size_t)len, k.b);
    return k;
}

/* The n whose key this is, or -1. */
static int key_index(const hy_key *k)
{
    for (uint32_t n = 0; n < NKEYS; n++) {
        hy_key kn = key_of(n);
        if (memcmp(kn.b, k->b, HY_KEY_BYTES) == 0) return (int)n;
    }
    return -1;
}

/* The generation travels in meta.tokens (persisted in the NVMe record). */
static hy_meta meta_of(uint32_t n, uint32_t gen, uint64_t bytes)
{
    hy_meta m;
    memset(&m, 0, sizeof m);
    m.key = key_of(n);
    snprintf(m.tenant, sizeof m.tenant, "crash");
    m.model[0] = (uint8_t)n;
    m.tokens = gen;
    m.flops = 1e9 * (n + 1);
    m.bytes = bytes;
    return m;
}

static uint64_t pattern_seed(uint32_t n, uint32_t gen)
{
    return (((uint64_t)gen << 32 | n) * 0x9e3779b97f4a7c15ull) | 1; /* xorshift: never 0 */
}

static uint64_t xorshift(uint64_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}

static void fill(uint8_t *buf, uint32_t n, uint32_t gen, uint64_t bytes)
{
    uint64_t x = pattern_seed(n, gen);
    for (uint64_t i = 0; i < bytes; i += 8) {
        const uint64_t v = xorshift(&x);
        memcpy(buf + i, &v, HY_MIN(8, bytes - i));
    }
}

static bool intact(const uint8_t *buf, uint32_t n, uint32_t gen, uint64_t bytes)
{
    uint64_t x = pattern_seed(n, gen);
    for (uint64_t i = 0; i < bytes; i += 8) {
        const uint64_t v = xorshift(&x);
        if (memcmp(buf + i, &v, HY_MIN(8, bytes - i)) != 0) return false;
    }
    return true;
}

static int put(hy_store *s, uint32_t n, uint32_t gen, uint64_t bytes, hy_tier_id *placed, hy_err *e)
{
    hy_meta m = meta_of(n, gen, bytes);
    hy_put *p;
    void *buf;
    int rc = hy_store_reserve(s, &m, &p, &buf, e);
    if (rc) return rc;
    fill(buf, n, gen, bytes);
    return hy_store_commit(s, p, placed, e);
}

/* What a key holds. */
typedef struct ver {
    bool present;
    uint32_t gen;
    uint64_t bytes;
} ver;

static bool same(ver a, ver b)
{
    return a.present == b.present && (!a.present || (a.gen == b.gen && a.bytes == b.bytes));
}

/* Reads key n through a lease: 0 with *got (present) when its bytes are the
 * pattern its meta names; HY_ENOTFOUND (got absent); BAD_BYTES for a byte or
 * a meta field that disagrees; or acquire's error. */
static int read_back(hy_store *s, uint32_t n, ver *got)
{
    *got = (ver){0};
    hy_key k = key_of(n);
    hy_lease *l = NULL;
    hy_err e = {0};
    int rc = hy_store_acquire(s, &k, &l, &e);
    if (rc) return rc;
    const hy_meta *m = hy_lease_meta(l);
    *got = (ver){true, m->tokens, m->bytes};
    if (m->model[0] != (uint8_t)n || strcmp(m->tenant, "crash") != 0 ||
        !intact(hy_lease_data(l), n, m->tokens, m->bytes))
        rc = BAD_BYTES;
    hy_store_release(s, l);
    return rc;
}

/* 0 when key n reads back as exactly (gen, bytes); else the error, or BAD_BYTES. */
static int expect(hy_store *s, uint32_t n, uint32_t gen, uint64_t bytes)
{
    ver got;
    int rc = read_back(s, n, &got);
    if (rc == 0 && !same(got, (ver){true, gen, bytes})) rc = BAD_BYTES;
    return rc;
}

static uint64_t padded(uint64_t bytes)
{
    return (bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
}

static hy_store_config config(const char *dir, size_t host_mb, uint64_t extent_mb,
                              uint32_t max_extents, bool write_through)
{
    hy_store_config c;
    memset(&c, 0, sizeof c);
    c.host_bytes = host_mb * MiB;
    c.host_policy.evict = HY_EVICT_LRU;
    c.nvme_policy.evict = HY_EVICT_LRU;
    c.nvme_dir = dir;
    c.nvme.extent_bytes = extent_mb * MiB;
    c.nvme.max_extents = max_extents;
    c.nvme.queue_depth = 8;
    c.write_through = write_through;
    return c;
}

/* The crash loop's store: 16 keys of at most 3 MiB never fill 16 extents of
 * 8 MiB, whatever the fragmentation, so no committed entry is ever evicted
 * from NVMe and the model can demand every one of them. */
static hy_store_config crash_config(const char *dir)
{
    return config(dir, 8, 8, 16, true);
}

static hy_store *open_store(const hy_store_config *c)
{
    hy_store *s = NULL;
    hy_err e = {0};
    int rc = hy_store_open(c, &s, &e);
    if (rc) fprintf(stderr, "\n  hy_store_open(%s): %s\n", c->nvme_dir, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return s;
}

static hy_store_stats stats(hy_store *s)
{
    hy_store_stats st;
    hy_store_stats_get(s, &st);
    return st;
}

/* --- the writer (a process of its own) ---------------------------------------------- */

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (len < 0) return;
    if (len >= (int)sizeof line) len = sizeof line - 1, line[len - 1] = '\n';
    if (write(fd, line, (size_t)len) != len) _exit(3); /* the parent is gone */
}

/* Puts (70%: new keys and replacements), removes (15%) and reads (15%) at
 * random until killed. Generations are (iteration + 1) << 16 | op number, so
 * every put in the whole run writes a payload of its own. */
static int writer_main(const char *dir, uint64_t seed, uint32_t iter, int fd)
{
    hy_store_config c = crash_config(dir);
    hy_store *s;
    hy_err e = {0};
    if (hy_store_open(&c, &s, &e)) {
        say(fd, "F open: %s\n", e.msg);
        return 2;
    }
    say(fd, "O\n");
    hy_rng r;
    hy_rng_seed(&r, seed);
    const double end = hy_now_s() + WRITER_LIFE;
    for (uint32_t op = 0; op < 0xffff && hy_now_s() < end; op++) {
        const uint32_t n = (uint32_t)(hy_rng_next(&r) % NKEYS);
        const int what = (int)(hy_rng_next(&r) % 100);
        e = (hy_err){0};
        if (what < 70) {
            const uint32_t gen = (iter + 1) << 16 | op;
            const uint64_t bytes = MIN_BYTES + hy_rng_next(&r) % (MAX_BYTES - MIN_BYTES + 1);
            say(fd, "B %u %u %llu\n", n, gen, (unsigned long long)bytes);
            hy_tier_id placed = HY_TIER_NONE;
            int rc = put(s, n, gen, bytes, &placed, &e);
            if (rc || placed != HY_TIER_HOST) {
                say(fd, "F put %u: %d placed %d: %s\n", n, rc, (int)placed, e.msg);
                return 2;
            }
            say(fd, "C %u %u %llu\n", n, gen, (unsigned long long)bytes);
        } else if (what < 85) {
            hy_key k = key_of(n);
            hy_store_filter f = {.key = &k};
            say(fd, "D %u\n", n);
            if (hy_store_invalidate(s, &f, NULL, &e)) {
                say(fd, "F remove %u: %s\n", n, e.msg);
                return 2;
            }
            say(fd, "R %u\n", n);
        } else {
            ver got;
            int rc = read_back(s, n, &got);
            if (rc == 0)
                say(fd, "V %u\n", n);
            else if (rc != HY_ENOTFOUND)
                say(fd, "E read %u: %d\n", n, rc);
        }
    }
    hy_store_close(s);
    return 0;
}

/* --- the parent: the model and the checks after each kill ---------------------------- */

typedef struct model {
    ver cur[NKEYS]; /* confirmed state */
    int pend;       /* the key of the operation begun but not confirmed, or -1 */
    ver pend_ver;   /* its outcome (absent: a removal) */
    bool opened;    /* this writer said "O" */
} model;

typedef struct tally {
    int iters, early, writer_errors;
    uint64_t puts, removes, reads, verified, recovered, dropped;
    uint64_t replayed, rejected; /* journal operations replayed / puts cut short, on reopens */
    uint64_t cut_new, cut_old;   /* operations cut short: found done / found not done */
    double max_open_s, total_open_s;
} tally;

static void on_line(model *m, tally *t, const char *line)
{
    unsigned n = NKEYS, gen = 0;
    unsigned long long bytes = 0;
    int got = 0;
    switch (line[0]) {
    case 'O':
        m->opened = true;
        return;
    case 'B':
        got = sscanf(line, "B %u %u %llu", &n, &gen, &bytes);
        if (got == 3 && n < NKEYS) {
            CU_ASSERT_EQUAL(m->pend, -1);
            m->pend = (int)n, m->pend_ver = (ver){true, gen, bytes};
            return;
        }
        break;
    case 'C':
        got = sscanf(line, "C %u %u %llu", &n, &gen, &bytes);
        if (got == 3 && n < NKEYS) {
            CU_ASSERT(m->pend == (int)n && m->pend_ver.gen == gen);
            m->cur[n] = (ver){true, gen, bytes}, m->pend = -1, t->puts++;
            return;
        }
        break;
    case 'D':
        if (sscanf(line, "D %u", &n) == 1 && n < NKEYS) {
            CU_ASSERT_EQUAL(m->pend, -1);
            m->pend = (int)n, m->pend_ver = (ver){0};
            return;
        }
        break;
    case 'R':
        if (sscanf(line, "R %u", &n) == 1 && n < NKEYS) {
            CU_ASSERT(m->pend == (int)n && !m->pend_ver.present);
            m->cur[n] = (ver){0}, m->pend = -1, t->removes++;
            return;
        }
        break;
    case 'V':
        t->reads++;
        return;
    }
    fprintf(stderr, "\n  writer: %s\n", line);
    t->writer_errors++;
}

typedef struct linebuf {
    char b[1 << 16];
    size_t n;
} linebuf;

/* Reads the writer's lines until it said "O" (until_open) or the pipe ends
 * or timeout_ms pass. False on a timeout. */
static bool pump(int fd, linebuf *lb, model *m, tally *t, bool until_open, int timeout_ms)
{
    const double end = hy_now_s() + timeout_ms / 1000.0;
    while (!(until_open && m->opened)) {
        const int left = (int)((end - hy_now_s()) * 1000);
        if (left <= 0) return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int pr = poll(&p, 1, left);
        if (pr < 0 && errno == EINTR) continue;
        if (pr <= 0) return false;
        ssize_t got = read(fd, lb->b + lb->n, sizeof lb->b - 1 - lb->n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return true; /* the writer is gone */
        lb->n += (size_t)got;
        char *start = lb->b, *nl;
        while ((nl = memchr(start, '\n', lb->n - (size_t)(start - lb->b)))) {
            *nl = '\0';
            on_line(m, t, start);
            start = nl + 1;
        }
        lb->n -= (size_t)(start - lb->b);
        memmove(lb->b, start, lb->n);
        CU_ASSERT_FATAL(lb->n < sizeof lb->b - 1); /* no line is that long */
    }
    return true;
}

/* Reopens the store after a kill and checks it against the model; the model
 * then takes the observed state. */
static void verify_after_crash(const char *dir, model *m, tally *t, int iter)
{
    hy_store_config c = crash_config(dir);
    const double t0 = hy_now_s();
    hy_store *s = open_store(&c);
    const double open_s = hy_now_s() - t0;
    t->max_open_s = HY_MAX(t->max_open_s, open_s);
    t->total_open_s += open_s;

    /* what recovery loaded: listed, counted, accounted */
    hy_store_stats st = stats(s);
    hy_meta listed[NKEYS + 8];
    size_t nl = 0, total = 0;
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_store_list(s, NULL, 0, listed, NKEYS + 8, &nl, &total, &e), 0);
    CU_ASSERT_EQUAL(total, nl);
    bool visible[NKEYS] = {0};
    uint64_t live = 0, stored = 0;
    for (size_t i = 0; i < nl; i++) {
        const int n = key_index(&listed[i].key);
        CU_ASSERT(n >= 0); /* nothing invented */
        if (n >= 0) visible[n] = true;
        live += listed[i].bytes, stored += padded(listed[i].bytes);
    }
    CU_ASSERT_EQUAL(st.entries, nl);
    CU_ASSERT_EQUAL(st.nvme_entries, nl);
    CU_ASSERT_EQUAL(st.host_entries, 0);
    CU_ASSERT_EQUAL(st.nvme.entries, nl);
    CU_ASSERT_EQUAL(st.nvme.live_bytes, live);
    CU_ASSERT_EQUAL(st.nvme.allocated_bytes, stored);
    CU_ASSERT(st.nvme.allocated_bytes <= st.nvme.extent_bytes_total);
    CU_ASSERT_EQUAL(st.nvme.extent_bytes_total % (8 * MiB), 0);
    CU_ASSERT(st.nvme.extent_bytes_total <= 16 * 8 * MiB);
    CU_ASSERT_EQUAL(st.nvme.checksum_failures, 0);
    CU_ASSERT_EQUAL(st.nvme.dropped_on_open, 0); /* a kill never leaves a bad record */
    t->dropped += st.nvme.dropped_on_open;
    t->replayed += st.nvme.journal_replayed;
    t->rejected += st.nvme.journal_rejected;
    t->recovered += nl;

    /* every key against the model */
    uint64_t present = 0;
    for (uint32_t n = 0; n < NKEYS; n++) {
        ver got;
        const int rc = read_back(s, n, &got);
        CU_ASSERT(rc == 0 || rc == HY_ENOTFOUND);
        CU_ASSERT_EQUAL(got.present, visible[n]);
        const bool cut = m->pend == (int)n;
        const bool ok = same(got, m->cur[n]) || (cut && same(got, m->pend_ver));
        if (rc == BAD_BYTES || !ok)
            fprintf(stderr,
                    "\n  iteration %d, key %u: found %s gen %u %llu bytes (rc %d); expected "
                    "%s gen %u %llu bytes%s\n",
                    iter, n, got.present ? "present" : "absent", got.gen,
                    (unsigned long long)got.bytes, rc, m->cur[n].present ? "present" : "absent",
                    m->cur[n].gen, (unsigned long long)m->cur[n].bytes,
                    cut ? " or the operation cut short" : "");
        CU_ASSERT(ok);
        if (cut && !same(m->cur[n], m->pend_ver)) {
            if (same(got, m->pend_ver))
                t->cut_new++;
            else
                t->cut_old++;
        }
        present += got.present;
        t->verified += rc == 0;
        m->cur[n] = got;
    }
    m->pend = -1;
    CU_ASSERT_EQUAL(present, nl);
    st = stats(s);
    CU_ASSERT_EQUAL(st.checksum_failures, 0);
    CU_ASSERT_EQUAL(st.hits_nvme, present); /* all came from NVMe after the restart */
    CU_ASSERT_EQUAL(st.entries, present);
    hy_store_close(s);
}

/* One writer, killed after a random 2-60 ms (from "O", or from the exec). */
static void crash_once(const char *dir, int iter, hy_rng *r, model *m, tally *t)
{
    const bool early = iter % EARLY_EVERY == EARLY_EVERY - 1;
    const double delay_ms = 2.0 + 58.0 * hy_rng_uniform(r);
    int p[2];
    CU_ASSERT_EQUAL_FATAL(pipe2(p, O_CLOEXEC), 0);
    const pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        char a_seed[32], a_iter[16], a_fd[16];
        snprintf(a_seed, sizeof a_seed, "%llu",
                 (unsigned long long)(g_seed * 1000003u + (uint64_t)iter));
        snprintf(a_iter, sizeof a_iter, "%d", iter);
        snprintf(a_fd, sizeof a_fd, "%d", p[1]);
        fcntl(p[1], F_SETFD, 0); /* the write end survives the exec */
        execl("/proc/self/exe", "test_crash", "--crash-writer", dir, a_seed, a_iter, a_fd,
              (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    static linebuf lb;
    lb.n = 0;
    m->opened = false;
    if (!early) {
        const bool in_time = pump(p[0], &lb, m, t, true, WAIT_OPEN_MS);
        if (!in_time || !m->opened) fprintf(stderr, "\n  writer %d never opened the store\n", iter);
        CU_ASSERT(in_time && m->opened);
    }
    const struct timespec d = {0, (long)(delay_ms * 1e6)};
    nanosleep(&d, NULL);
    kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pump(p[0], &lb, m, t, false, WAIT_OPEN_MS); /* the rest, up to the end of the pipe */
    close(p[0]);
    CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    t->early += early;
    verify_after_crash(dir, m, t, iter);
    t->iters++;
}

static int env_int(const char *name, int dflt)
{
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static void test_crash_loop(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/crash", g_tmp);
    const int iters = env_int("HY_CRASH_ITERS", 200);
    model m = {.pend = -1};
    tally t = {0};
    hy_rng r;
    hy_rng_seed(&r, g_seed);
    const double t0 = hy_now_s();
    printf("\n    seed %llu, %d kills", (unsigned long long)g_seed, iters);
    for (int i = 0; i < iters; i++) {
        crash_once(dir, i, &r, &m, &t);
        if (t.writer_errors) break;
        if ((i + 1) % 50 == 0)
            printf("\n    %d kills: %llu puts and %llu removes confirmed, %llu entries verified "
                   "(%.1f s)",
                   i + 1, (unsigned long long)t.puts, (unsigned long long)t.removes,
                   (unsigned long long)t.verified, hy_now_s() - t0);
        fflush(stdout);
    }
    printf("\n    crash: %d iterations (%d killed from the exec), %llu puts + %llu removes "
           "confirmed, %llu writer reads; %llu entries verified, %llu entries recovered, cut "
           "short: %llu found done / %llu not done; dropped_on_open %llu; journal: %llu "
           "operations replayed, %llu puts cut short; recovery max %.1f ms, mean %.1f ms; %.1f s\n",
           t.iters, t.early, (unsigned long long)t.puts, (unsigned long long)t.removes,
           (unsigned long long)t.reads, (unsigned long long)t.verified,
           (unsigned long long)t.recovered, (unsigned long long)t.cut_new,
           (unsigned long long)t.cut_old, (unsigned long long)t.dropped,
           (unsigned long long)t.replayed, (unsigned long long)t.rejected, t.max_open_s * 1e3,
           t.iters ? t.total_open_s * 1e3 / t.iters : 0.0, hy_now_s() - t0);
    CU_ASSERT_EQUAL(t.writer_errors, 0);
    CU_ASSERT_EQUAL(t.iters, iters);
    /* the kills did land among the writes (loose bounds: a loaded or sanitized run is slower) */
    CU_ASSERT(t.puts >= (uint64_t)iters / 10);
    if (iters >= 50) CU_ASSERT(t.cut_new + t.cut_old > 0);
    /* A kill loses the catalog's unsynced writes (RocksDB keeps them in its
     * WAL buffer): the committed state came back through journal replays. */
    if (iters >= 50) CU_ASSERT(t.replayed > 0);
    CU_ASSERT(t.verified > 0);
}

/* --- faults at the store level -------------------------------------------------------- */

/* Where key n's payload lies, read through the NVMe tier with the store closed. */
static hy_nvme_loc locate(const hy_store_config *c, uint32_t n)
{
    hy_nvme *nv = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_nvme_open(c->nvme_dir, &c->nvme, &nv, &e), 0);
    hy_key k = key_of(n);
    hy_nvme_loc l = {0};
    CU_ASSERT_EQUAL(hy_nvme_locate(nv, &k, &l), 0);
    hy_nvme_close(nv);
    return l;
}

static void extent_path(const char *dir, uint32_t extent, char *out, size_t cap)
{
    snprintf(out, cap, "%s/extents/extent-%06u.dat", dir, extent);
}

static void flip_byte(const char *dir, hy_nvme_loc l, uint64_t at)
{
    char path[256];
    extent_path(dir, l.extent, path, sizeof path);
    int fd = open(path, O_RDWR);
    CU_ASSERT_FATAL(fd >= 0);
    uint8_t b = 0;
    CU_ASSERT_EQUAL(pread(fd, &b, 1, (off_t)(l.offset + at)), 1);
    b ^= 0x20;
    CU_ASSERT_EQUAL(pwrite(fd, &b, 1, (off_t)(l.offset + at)), 1);
    fsync(fd);
    close(fd);
}

static void test_flipped_byte(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/flip", g_tmp);
    const uint64_t B = 3 * MiB / 2;
    hy_store_config c = config(dir, 4, 8, 4, true);
    hy_err e = {0};
    hy_store *s = open_store(&c);
    for (uint32_t n = 1; n <= 4; n++) CU_ASSERT_EQUAL(put(s, n, 1, B, NULL, &e), 0);
    hy_store_close(s);
    hy_nvme_loc l1 = locate(&c, 1), l3 = locate(&c, 3);

    s = open_store(&c);
    CU_ASSERT_EQUAL(expect(s, 3, 1, B), 0); /* 3 now in host too */
    flip_byte(dir, l1, MiB + 5);            /* 1: NVMe only, chunk 1 */
    flip_byte(dir, l3, 7);                  /* 3: its NVMe copy, chunk 0 */
    hy_key k1 = key_of(1);
    hy_lease *l = NULL;
    CU_ASSERT_EQUAL(hy_store_acquire(s, &k1, &l, &e), HY_EFORMAT); /* an error, never bytes */
    CU_ASSERT_PTR_NULL(l);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "chunk 1"));
    CU_ASSERT_EQUAL(expect(s, 1, 1, B), HY_ENOTFOUND); /* and dropped */
    CU_ASSERT_EQUAL(expect(s, 3, 1, B), 0);            /* served from its good host copy */
    CU_ASSERT_EQUAL(expect(s, 2, 1, B), 0);
    CU_ASSERT_EQUAL(expect(s, 4, 1, B), 0);
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.checksum_failures, 1);
    CU_ASSERT_EQUAL(st.nvme.checksum_failures, 1);
    CU_ASSERT_EQUAL(st.entries, 3);
    CU_ASSERT_EQUAL(st.nvme.entries, 3);
    CU_ASSERT_EQUAL(put(s, 5, 1, B, NULL, &e), 0); /* still serving */
    CU_ASSERT_EQUAL(expect(s, 5, 1, B), 0);
    hy_store_close(s);

    /* after a restart 3's damaged NVMe copy is all there is: an error, then a miss */
    s = open_store(&c);
    CU_ASSERT_EQUAL(expect(s, 1, 1, B), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(expect(s, 3, 1, B), HY_EFORMAT);
    CU_ASSERT_EQUAL(expect(s, 3, 1, B), HY_ENOTFOUND);
    for (uint32_t n = 2; n <= 5; n += n == 2 ? 2 : 1) CU_ASSERT_EQUAL(expect(s, n, 1, B), 0);
    CU_ASSERT_EQUAL(stats(s).entries, 3);
    CU_ASSERT_EQUAL(stats(s).nvme.dropped_on_open, 0);
    hy_store_close(s);
}

static void test_truncated_extent(void)
{
    char dir[128], path[256];
    snprintf(dir, sizeof dir, "%s/trunc", g_tmp);
    const uint64_t B = 5 * MiB / 2; /* three to an 8 MiB extent */
    hy_store_config c = config(dir, 8, 8, 4, true);
    hy_err e = {0};
    hy_store *s = open_store(&c);
    for (uint32_t n = 10; n < 16; n++) CU_ASSERT_EQUAL(put(s, n, 1, B, NULL, &e), 0);
    hy_store_close(s);
    hy_nvme_loc l[6];
    for (uint32_t i = 0; i < 6; i++) l[i] = locate(&c, 10 + i);
    /* cut the extent of entry 10 a page into the entry that follows it there */
    const uint32_t ext = l[0].extent;
    uint64_t cut = UINT64_MAX;
    for (int i = 0; i < 6; i++)
        if (l[i].extent == ext && l[i].offset > l[0].offset) cut = HY_MIN(cut, l[i].offset + 4096);
    CU_ASSERT_FATAL(cut != UINT64_MAX);
    extent_path(dir, ext, path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(truncate(path, (off_t)cut), 0);
    bool lost[6];
    int nlost = 0;
    for (int i = 0; i < 6; i++) {
        lost[i] = l[i].extent == ext && l[i].offset + l[i].stored > cut;
        nlost += lost[i];
    }
    CU_ASSERT(nlost >= 1);

    s = open_store(&c);
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.nvme.dropped_on_open, (uint64_t)nlost);
    CU_ASSERT_EQUAL(st.entries, (uint64_t)(6 - nlost));
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(expect(s, 10 + (uint32_t)i, 1, B), lost[i] ? HY_ENOTFOUND : 0);
    for (uint32_t n = 20; n < 22; n++) { /* still serving, into the repaired extent too */
        CU_ASSERT_EQUAL(put(s, n, 1, B, NULL, &e), 0);
        CU_ASSERT_EQUAL(expect(s, n, 1, B), 0);
    }
    hy_store_close(s);
    s = open_store(&c);
    CU_ASSERT_EQUAL(stats(s).nvme.dropped_on_open, 0); /* the bad records are gone for good */
    CU_ASSERT_EQUAL(stats(s).entries, (uint64_t)(8 - nlost));
    for (uint32_t n = 20; n < 22; n++) CU_ASSERT_EQUAL(expect(s, n, 1, B), 0);
    hy_store_close(s);
}

/* hy_tiers.h: "NVMe victims are dropped" — a full NVMe tier under write-through
 * makes room by policy (LRU here) and the commit succeeds; an entry that can
 * never fit an extent fails its commit cleanly. */
static void test_full_disk(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/full", g_tmp);
    hy_store_config c = config(dir, 8, 4, 2, true); /* NVMe: 2 extents of 4 MiB */
    hy_err e = {0};
    hy_store *s = open_store(&c);
    for (uint32_t n = 0; n < 10; n++) {
        hy_tier_id placed = HY_TIER_NONE;
        CU_ASSERT_EQUAL(put(s, n, 1, 2 * MiB, &placed, &e), 0);
        CU_ASSERT_EQUAL(placed, HY_TIER_HOST);
    }
    hy_store_stats st = stats(s);
    CU_ASSERT(st.nvme.allocated_bytes <= 8 * MiB);
    CU_ASSERT(st.nvme.extent_bytes_total <= 8 * MiB);
    CU_ASSERT(st.nvme.entries <= 4);
    CU_ASSERT(st.evictions > 0);
    int visible = 0;
    for (uint32_t n = 0; n < 10; n++) {
        const int rc = expect(s, n, 1, 2 * MiB);
        CU_ASSERT(rc == 0 || rc == HY_ENOTFOUND); /* served intact or dropped by policy */
        visible += rc == 0;
    }
    CU_ASSERT(visible >= 4);
    CU_ASSERT_EQUAL(expect(s, 9, 1, 2 * MiB), 0); /* the newest survives LRU */
    /* larger than an extent: the commit fails, nothing visible, the host block is back */
    const size_t used = stats(s).arena.used;
    hy_meta m = meta_of(50, 1, 5 * MiB);
    hy_put *p;
    void *buf;
    CU_ASSERT_EQUAL_FATAL(hy_store_reserve(s, &m, &p, &buf, &e), 0);
    fill(buf, 50, 1, 5 * MiB);
    hy_tier_id placed = HY_TIER_HOST;
    CU_ASSERT_EQUAL(hy_store_commit(s, p, &placed, &e), HY_ERANGE);
    CU_ASSERT_EQUAL(placed, HY_TIER_NONE);
    CU_ASSERT_EQUAL(expect(s, 50, 1, 5 * MiB), HY_ENOTFOUND);
    CU_ASSERT(stats(s).arena.used <= used);
    CU_ASSERT_EQUAL(put(s, 11, 1, 2 * MiB, NULL, &e), 0); /* still serving */
    CU_ASSERT_EQUAL(expect(s, 11, 1, 2 * MiB), 0);
    const uint64_t on_disk = stats(s).nvme.entries;
    hy_store_close(s);
    /* after a restart: exactly what NVMe held, intact */
    s = open_store(&c);
    CU_ASSERT_EQUAL(stats(s).entries, on_disk);
    int back = 0;
    for (uint32_t n = 0; n < 12; n++) {
        const int rc = expect(s, n, 1, 2 * MiB);
        CU_ASSERT(rc == 0 || rc == HY_ENOTFOUND);
        back += rc == 0;
    }
    CU_ASSERT_EQUAL((uint64_t)back, on_disk);
    hy_store_close(s);
}

/* A host victim's demotion write fails: the entry is dropped (it had no other
 * copy), the NVMe space is back, the store serves the rest and later
 * demotions work. */
static void test_io_error_demotion(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/demote", g_tmp);
    const uint64_t B = 3 * MiB / 2;
    hy_store_config c = config(dir, 4, 8, 2, false);
    hy_err e = {0};
    hy_store *s = open_store(&c);
    CU_ASSERT_EQUAL(put(s, 1, 1, B, NULL, &e), 0);
    CU_ASSERT_EQUAL(put(s, 2, 1, B, NULL, &e), 0);
    atomic_store(&g_fail[1], 1);
    CU_ASSERT_EQUAL(put(s, 3, 1, B, NULL, &e), 0); /* evicts 1: its demotion fails */
    CU_ASSERT_EQUAL(atomic_load(&g_fail[1]), 0);   /* the failure was used */
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.demotions, 0);
    CU_ASSERT_EQUAL(st.nvme.entries, 0);
    CU_ASSERT_EQUAL(st.nvme.allocated_bytes, 0);
    CU_ASSERT_EQUAL(st.entries, 2);
    CU_ASSERT_EQUAL(expect(s, 1, 1, B), HY_ENOTFOUND);
    CU_ASSERT_EQUAL(expect(s, 2, 1, B), 0);
    CU_ASSERT_EQUAL(expect(s, 3, 1, B), 0);
    CU_ASSERT_EQUAL(put(s, 4, 1, B, NULL, &e), 0); /* evicts 2: demoted */
    st = stats(s);
    CU_ASSERT_EQUAL(st.demotions, 1);
    CU_ASSERT_EQUAL(st.nvme.entries, 1);
    CU_ASSERT_EQUAL(expect(s, 2, 1, B), 0); /* promoted back, intact */
    hy_store_close(s);
}

/* An NVMe-only entry's promotion read fails: acquire reports the I/O error
 * and gives no bytes, the entry stays (an I/O error is not corruption), and
 * the next acquire promotes it intact. */
static void test_io_error_promotion(void)
{
    char dir[128];
    snprintf(dir, sizeof dir, "%s/promote", g_tmp);
    const uint64_t B = 3 * MiB / 2;
    hy_store_config c = config(dir, 4, 8, 2, true);
    hy_err e = {0};
    hy_store *s = open_store(&c);
    for (uint32_t n = 1; n <= 3; n++) CU_ASSERT_EQUAL(put(s, n, 1, B, NULL, &e), 0);
    CU_ASSERT_EQUAL(stats(s).host_entries, 2); /* 1 is on NVMe only */
    atomic_store(&g_fail[0], 1);
    hy_key k = key_of(1);
    hy_lease *l = NULL;
    CU_ASSERT_EQUAL(hy_store_acquire(s, &k, &l, &e), HY_EIO);
    CU_ASSERT_PTR_NULL(l);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "read"));
    CU_ASSERT_EQUAL(atomic_load(&g_fail[0]), 0);
    hy_store_stats st = stats(s);
    CU_ASSERT_EQUAL(st.entries, 3);
    CU_ASSERT_EQUAL(st.checksum_failures, 0);
    CU_ASSERT_EQUAL(st.promotions, 0);
    CU_ASSERT_EQUAL(expect(s, 1, 1, B), 0);
    CU_ASSERT_EQUAL(stats(s).promotions, 1);
    CU_ASSERT_EQUAL(expect(s, 2, 1, B), 0);
    CU_ASSERT_EQUAL(expect(s, 3, 1, B), 0);
    hy_store_close(s);
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--crash-writer") == 0)
        return writer_main(argv[2], strtoull(argv[3], NULL, 10), (uint32_t)atoi(argv[4]),
                           atoi(argv[5]));
    const char *seed = getenv("HY_CRASH_SEED");
    if (seed && *seed) g_seed = strtoull(seed, NULL, 10);
    signal(SIGPIPE, SIG_IGN);
    if (hy_test_mkdtemp("hy_test_crash_", g_tmp, sizeof g_tmp)) return 1;
    static const hy_test_case cases[] = {
        {"sigkill_loop_committed_entries_survive", test_crash_loop},
        {"flipped_byte_in_extent_never_served", test_flipped_byte},
        {"truncated_extent_drops_its_entries", test_truncated_extent},
        {"full_nvme_evicts_by_policy_or_fails_cleanly", test_full_disk},
        {"failed_completion_during_demotion", test_io_error_demotion},
        {"failed_completion_during_promotion", test_io_error_promotion},
        {NULL, NULL},
    };
    int rc = hy_test_main("crash", cases);
    hy_test_rmtree(g_tmp);
    return rc;
}
