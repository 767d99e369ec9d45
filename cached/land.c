/*
 * Entries landing while the pass runs (land_internal.h): a request's batch
 * of reads from the NVMe tier (hy_store_acquire_landing) and from owners in
 * the cluster (svc_cluster_stream), each entry opened once its header and
 * tokens are in and its layers handed to the pass as they pass their own
 * checksums (docs/entry-format.md, "Streamed reads"); the readers are
 * threads shared by every request.
 */
#include "land_internal.h"
#include "cluster_internal.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One hit being read: from the NVMe tier (into a lease) or from an owner
 * in the cluster (GetEntry, into buf). Its fields below `mu` change under it. */
typedef struct landing_job {
    hy_key key;
    uint64_t bytes;  /* the entry's, as the store's index (or the owner's Lookup) gave it */
    cost_source src; /* COST_FROM_NVME or COST_FROM_REMOTE */
    hy_svc *svc;     /* remote: whose cluster */
    char member[HY_MEMBER_ID_MAX];
    hy_entry **entry_out;
    hy_lease **lease_out;
    void **buf_out;
    uint8_t *buf; /* remote: the bytes as they come */
    land_batch *L;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hy_entry *e;  /* opened: its header and tokens checked */
    bool settled; /* opened, or known never to be (a miss) */
    bool done;    /* the read is over, the outs set */
    double t_done;
    int failed; /* after it opened: the entry will not be whole */
    hy_err err;
    struct landing_job *next_queued; /* in the readers' queue */
} landing_job;

struct land_batch {
    hy_store *st;
    const hy_model *m;
    uint8_t fp[32];
    char tenant[HY_TENANT_MAX];
    landing_job *jobs;
    size_t n, cap;
    bool going; /* its jobs handed to the readers */
    double t_go;
    pthread_mutex_t mu; /* unsettled */
    pthread_cond_t cv;
    size_t unsettled; /* entries not yet opened (or known to be misses) */
};

/* One more entry opened, or known never to be. */
static void settle(land_batch *L)
{
    pthread_mutex_lock(&L->mu);
    assert(L->unsettled > 0); /* each entry settles once */
    L->unsettled--;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
}

/* An entry just opened asks for no more bytes until every other one has
 * opened too (or 2 ms have passed): their first bytes are then not queued
 * behind its layers, and the pass starts when the last one is in. */
static void wait_for_the_others(land_batch *L)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 2000000;
    if (until.tv_nsec >= 1000000000) until.tv_sec++, until.tv_nsec -= 1000000000;
    pthread_mutex_lock(&L->mu);
    while (L->unsettled > 0)
        if (pthread_cond_timedwait(&L->cv, &L->mu, &until) != 0) break;
    pthread_mutex_unlock(&L->mu);
}

bool land_peek(hy_store *st, const uint8_t fp[32], const char *tenant, const hy_key *k,
               uint64_t *bytes, unsigned *mask)
{
    hy_meta m;
    if (hy_store_peek(st, k, &m, mask) != HY_OK) return false;
    if (strcmp(m.tenant, tenant) != 0 || memcmp(m.model, fp, 32) != 0) return false;
    *bytes = m.bytes;
    return true;
}

int land_new(hy_store *st, const hy_model *m, const uint8_t fp[32], const char *tenant, size_t cap,
             land_batch **out)
{
    land_batch *L = calloc(1, sizeof *L);
    if (L) L->jobs = calloc(cap ? cap : 1, sizeof *L->jobs);
    if (!L || !L->jobs) {
        free(L);
        return HY_ENOMEM;
    }
    L->st = st, L->m = m, L->cap = cap;
    pthread_mutex_init(&L->mu, NULL);
    pthread_cond_init(&L->cv, NULL);
    memcpy(L->fp, fp, 32);
    snprintf(L->tenant, sizeof L->tenant, "%s", tenant);
    *out = L;
    return HY_OK;
}

static landing_job *job_add(land_batch *L, const hy_key *k, uint64_t bytes, cost_source src,
                            hy_entry **entry)
{
    assert(L->n < L->cap);
    landing_job *j = &L->jobs[L->n];
    j->key = *k, j->bytes = bytes, j->src = src, j->entry_out = entry, j->L = L;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    L->n++;
    return j;
}

size_t land_add(land_batch *L, const hy_key *k, uint64_t bytes, hy_entry **entry, hy_lease **lease)
{
    job_add(L, k, bytes, COST_FROM_NVME, entry)->lease_out = lease;
    return L->n - 1;
}

size_t land_add_remote(land_batch *L, hy_svc *s, const char *member, const hy_key *k,
                       uint64_t bytes, hy_entry **entry, void **buf)
{
    landing_job *j = job_add(L, k, bytes, COST_FROM_REMOTE, entry);
    j->svc = s, j->buf_out = buf;
    snprintf(j->member, sizeof j->member, "%s", member);
    return L->n - 1;
}

/* The bytes of j's entry as they arrive: `landed` of them in data, the
 * first `prefix` of those verified by their source (the NVMe tier's chunk
 * checksums; an owner's stream has none of its own). The entry is opened
 * once its header and tokens are in — an owner's must be the entry of its
 * key —, then its layers handed to the pass as they pass their own
 * checksums. A failure is the entry's (its waiters see it), never the
 * read's. */
static void landed_bytes(landing_job *j, const void *data, uint64_t prefix, uint64_t landed)
{
    if (j->failed) return;
    if (!j->e) {
        size_t need;
        hy_entry *e = NULL;
        hy_err oe = {0};
        /* opened on bytes landed, before their chunk's checksum: the header's
         * checksum and the tokens section's check every byte the open reads */
        int rc = hy_entry_view_open(j->L->m, data, j->bytes, (size_t)landed, &need, &e, &oe);
        if (rc == HY_EAGAIN) return;
        if (!rc && j->src == COST_FROM_REMOTE) { /* an owner's bytes: this key's entry? */
            const int32_t *tok;
            uint8_t want[32];
            const int n = hy_entry_tokens(e, &tok);
            hy_entry_key(j->L->tenant, j->L->fp, hy_entry_seam_setting(e), hy_entry_repr_of(e), tok,
                         (size_t)n, want);
            if (memcmp(want, j->key.b, 32) != 0) {
                hy_entry_free(e);
                e = NULL;
                rc = hy_err_set(&oe, HY_EFORMAT, "its tokens are not the key's");
            }
        }
        pthread_mutex_lock(&j->mu);
        if (rc) { /* never opened: a miss */
            j->failed = rc, j->err = oe;
        } else {
            j->e = e;
        }
        j->settled = true;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        settle(j->L);
        if (rc) return;
        wait_for_the_others(j->L);
    }
    hy_err le = {0};
    if (hy_entry_view_landed(j->e, (size_t)prefix, &le)) { /* its waiters have it */
        pthread_mutex_lock(&j->mu);
        j->failed = le.code ? le.code : HY_EFORMAT, j->err = le;
        pthread_mutex_unlock(&j->mu);
    }
}

static int on_landed(void *ctx, const void *data, uint64_t prefix, uint64_t landed, hy_err *err)
{
    (void)err;
    landed_bytes(ctx, data, prefix, landed);
    return HY_OK;
}

/* An owner's chunk: into the buffer, then as landed. A stream that has
 * failed the entry ends here. */
static int on_remote_chunk(void *ctx, uint64_t total, uint64_t at, const void *data, size_t len,
                           hy_err *err)
{
    landing_job *j = ctx;
    if (!j->buf) {
        if (total != j->bytes)
            return hy_err_set(err, HY_EFORMAT, "it sent %llu bytes where its Lookup said %llu",
                              (unsigned long long)total, (unsigned long long)j->bytes);
        void *b = NULL;
        /* an entry is read in place (hy_entry_view): 64-byte aligned */
        if (posix_memalign(&b, 64, (size_t)total) != 0)
            return hy_err_set(err, HY_ENOMEM, "out of memory for %llu bytes",
                              (unsigned long long)total);
        j->buf = b;
    }
    memcpy(j->buf + at, data, len);
    landed_bytes(j, j->buf, at + len, at + len);
    if (j->failed) return hy_err_set(err, j->failed, "%s", j->err.msg);
    return HY_OK;
}

/* An entry that failed its own checks on the way: removed, as a stored
 * entry that fails to decode is (fetch.c). */
static void drop_bad(land_batch *L, const hy_key *k, const char *why)
{
    char hex[65];
    hy_key_hex(k, hex);
    hy_log(HY_LOG_ERROR, "entry %s failed its checks while it was read from NVMe, removing it: %s",
           hex, why);
    hy_store_filter f = {.key = k};
    size_t gone;
    hy_err ignored = {0};
    hy_store_invalidate(L->st, &f, &gone, &ignored);
}

/* After j's read: the entry whole, or its failure told to the pass (and a
 * stored entry that failed its own checks removed); the outs set when it
 * opened; its waiters woken. */
static void job_end(land_batch *L, landing_job *j, int rc, const hy_err *e)
{
    if (!rc && j->e && !j->failed && !hy_entry_whole(j->e))
        rc = hy_err_set((hy_err *)e, HY_EFORMAT, "its bytes ended before its last section");
    pthread_mutex_lock(&j->mu);
    assert(!j->done && "a read ends once");
    if (rc && !j->failed) j->failed = rc, j->err = *e;
    if (j->failed && j->e) /* the pass stops at its next layer */
        hy_entry_view_fail(j->e, j->failed, j->err.msg);
    if (j->src == COST_FROM_NVME && (j->failed == HY_EFORMAT || j->failed == HY_EINVAL))
        drop_bad(L, &j->key, j->err.msg);
    if (j->src == COST_FROM_REMOTE && j->failed)
        hy_log(HY_LOG_WARN, "cluster: the entry from %s failed its checks or its stream%s: %s",
               j->member, j->e ? " after the request had begun to use it" : " (a miss)",
               j->err.msg);
    if (j->src == COST_FROM_REMOTE) {
        if (j->e)
            *j->buf_out = j->buf; /* freed after the entry */
        else
            free(j->buf);
        j->buf = NULL;
    }
    if (j->e) *j->entry_out = j->e;
    if (!j->settled) settle(L);
    /* last: once done, the request may free L and j */
    j->settled = j->done = true;
    j->t_done = hy_now_s();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void read_nvme(land_batch *L, landing_job *j)
{
    hy_store *st = L->st;
    hy_lease *l = NULL;
    hy_err e = {0};
    int rc = hy_store_acquire_landing(st, &j->key, on_landed, j, &l, &e);
    const hy_meta *m = l ? hy_lease_meta(l) : NULL;
    if (!rc && (strcmp(m->tenant, L->tenant) != 0 || memcmp(m->model, L->fp, 32) != 0 ||
                m->bytes != j->bytes))
        rc = hy_err_set(&e, HY_ENOTFOUND, "replaced while it was read");
    if (!rc && !j->e && !j->failed) { /* no bytes landed: a host or hbm copy came whole */
        hy_entry *ent = NULL;
        rc = hy_entry_view(L->m, hy_lease_data(l), m->bytes, &ent, &e);
        pthread_mutex_lock(&j->mu);
        if (rc)
            j->failed = rc, j->err = e;
        else
            j->e = ent;
        pthread_mutex_unlock(&j->mu);
    }
    if (j->e)
        *j->lease_out = l; /* released after the entry is freed */
    else if (l)
        hy_store_release(st, l);
    job_end(L, j, rc, &e);
}

static void read_remote(land_batch *L, landing_job *j)
{
    hy_err e = {0};
    svc_model *sm = svc_model_by_fp(j->svc, L->fp);
    int rc =
        sm ? svc_cluster_stream(j->svc, j->member, sm, L->tenant, &j->key, on_remote_chunk, j, &e)
           : hy_err_set(&e, HY_ENOTFOUND, "its model is not served here");
    job_end(L, j, rc, &e);
}

/* The readers: threads kept for the daemon's life, shared by every
 * request, a job each at a time. One is started when a job is queued and
 * none is idle (up to LAND_THREADS), so a request's reads all start
 * at once without the cost of starting threads each time. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    landing_job *head, *tail;
    int threads, idle; /* idle: waiting, not yet handed a job */
} g_readers = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0};

static void job_run(landing_job *j)
{
    if (j->src == COST_FROM_REMOTE)
        read_remote(j->L, j);
    else
        read_nvme(j->L, j);
}

static void *reader_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&g_readers.mu);
    for (;;) {
        while (!g_readers.head) {
            g_readers.idle++;
            pthread_cond_wait(&g_readers.cv, &g_readers.mu);
            g_readers.idle--;
        }
        landing_job *j = g_readers.head;
        g_readers.head = j->next_queued;
        if (!g_readers.head) g_readers.tail = NULL;
        pthread_mutex_unlock(&g_readers.mu);
        job_run(j);
        pthread_mutex_lock(&g_readers.mu);
    }
    return NULL;
}

int land_go(land_batch *L)
{
    assert(!L->going && "a batch is started once");
    L->t_go = hy_now_s();
    L->unsettled = L->n;
    L->going = true;
    pthread_mutex_lock(&g_readers.mu);
    for (size_t i = 0; i < L->n; i++) {
        landing_job *j = &L->jobs[i];
        j->next_queued = NULL;
        if (g_readers.tail)
            g_readers.tail->next_queued = j;
        else
            g_readers.head = j;
        g_readers.tail = j;
    }
    /* a reader for each job no idle one takes */
    int starting = HY_MIN((int)L->n - g_readers.idle, LAND_THREADS - g_readers.threads);
    for (; starting > 0; starting--) {
        pthread_t t;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&t, &a, reader_main, NULL);
        pthread_attr_destroy(&a);
        if (rc != 0) break;
        g_readers.threads++;
    }
    const bool none = g_readers.threads == 0;
    pthread_cond_broadcast(&g_readers.cv);
    if (none) { /* no reader could start: read them here, one after another */
        g_readers.head = g_readers.tail = NULL;
        pthread_mutex_unlock(&g_readers.mu);
        for (size_t i = 0; i < L->n; i++) job_run(&L->jobs[i]);
        return HY_OK;
    }
    pthread_mutex_unlock(&g_readers.mu);
    return HY_OK;
}

size_t land_count(const land_batch *L)
{
    return L ? L->n : 0;
}

hy_entry *land_opened(land_batch *L, size_t i)
{
    assert(L->going && i < L->n);
    landing_job *j = &L->jobs[i];
    pthread_mutex_lock(&j->mu);
    while (!j->settled) pthread_cond_wait(&j->cv, &j->mu);
    hy_entry *e = j->e;
    pthread_mutex_unlock(&j->mu);
    return e;
}

void land_wait(land_batch *L)
{
    if (!L || !L->going) return;
    for (size_t i = 0; i < L->n; i++) {
        landing_job *j = &L->jobs[i];
        pthread_mutex_lock(&j->mu);
        while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
        pthread_mutex_unlock(&j->mu);
    }
}

bool land_failed(const land_batch *L, size_t *job, hy_err *err)
{
    for (size_t i = 0; L && i < L->n; i++)
        if (L->jobs[i].failed && L->jobs[i].e) {
            *job = i;
            *err = L->jobs[i].err;
            return true;
        }
    return false;
}

const char *land_where(const land_batch *L, size_t i, char *buf, size_t cap)
{
    assert(i < L->n);
    const landing_job *j = &L->jobs[i];
    if (j->src == COST_FROM_REMOTE)
        snprintf(buf, cap, "member %s", j->member);
    else
        snprintf(buf, cap, "the NVMe tier");
    return buf;
}

cost_source land_source(const land_batch *L, size_t i)
{
    assert(i < L->n);
    return L->jobs[i].src;
}

bool land_read(const land_batch *L, cost_source s, uint64_t *bytes, double *seconds)
{
    *bytes = 0;
    double last = 0;
    for (size_t i = 0; L && i < L->n; i++)
        if (L->jobs[i].src == s && L->jobs[i].e) {
            *bytes += L->jobs[i].bytes;
            if (L->jobs[i].t_done > last) last = L->jobs[i].t_done;
        }
    *seconds = *bytes ? last - L->t_go : 0.0;
    return *bytes > 0;
}

void land_free(land_batch *L)
{
    if (!L) return;
    land_wait(L);
    for (size_t i = 0; i < L->n; i++) {
        pthread_mutex_destroy(&L->jobs[i].mu);
        pthread_cond_destroy(&L->jobs[i].cv);
    }
    free(L->jobs);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    free(L);
}
