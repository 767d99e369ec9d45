/*
 * Where entries come from and where they go. A request's entries come from
 * a local tier (a lease, viewed in place), or — for an entry only the NVMe
 * tier or another member holds — are read while the request's pass runs,
 * which composes each layer as soon as its sections have landed and passed
 * their checksums (docs/entry-format.md, "Streamed reads"). An entry built
 * or put is stored where it belongs: here, or with its owners in the
 * cluster. And per hit, whether fetching it is worth it.
 */
#include "cluster_internal.h"
#include "handlers_internal.h"
#include "place.h"
#include "hy_scheduler.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Leases the entry under key (visible to the caller, of model sm) and
 * verifies it: g->entry is a view into the leased bytes (no copy), and
 * g->lease must be released after it is freed (h_seg_drop). HY_ENOTFOUND on
 * a miss; a stored entry that fails its checks (a wrong byte is worse than a
 * miss) is removed and reported as a miss. */
static int fetch_local(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err)
{
    hy_lease *l;
    int rc = hy_store_acquire(r->s->store, k, &l, err);
    if (rc == HY_EFORMAT) return HY_ENOTFOUND; /* its NVMe copy failed its checksums: dropped */
    if (rc) return rc;
    const hy_meta *m = hy_lease_meta(l);
    if (strcmp(m->tenant, r->who.tenant) != 0 || memcmp(m->model, sm->fp, 32) != 0) {
        hy_store_release(r->s->store, l);
        return HY_ENOTFOUND;
    }
    g->from = hy_lease_tier(l);
    *bytes = m->bytes;
    rc = hy_entry_view(sm->m, hy_lease_data(l), m->bytes, &g->entry, err);
    if (rc == HY_OK) {
        g->lease = l;
        return HY_OK;
    }
    hy_store_release(r->s->store, l);
    if (rc == HY_EFORMAT || rc == HY_EINVAL) {
        char hex[65];
        hy_key_hex(k, hex);
        hy_log(HY_LOG_ERROR, "entry %s failed to decode, removing it: %s", hex, err->msg);
        hy_store_filter f = {.key = k};
        size_t gone;
        hy_err ignored = {0};
        hy_store_invalidate(r->s->store, &f, &gone, &ignored);
        return HY_ENOTFOUND;
    }
    return rc;
}

/* From an owner (cluster mode): the bytes must decode and be the entry of
 * key k for this tenant (an owner's wrong byte is a miss too). */
static int fetch_remote(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes)
{
    svc_view *v = svc_view_get(r->s);
    if (!v) return HY_ENOTFOUND;
    void *buf = NULL;
    size_t len = 0;
    hy_err e = {0};
    int rc = svc_cluster_fetch(r->s, v, sm, r->who.tenant, k, &buf, &len, g->member, &e);
    svc_view_put(v);
    if (rc) return HY_ENOTFOUND;
    hy_entry *ent = NULL;
    uint8_t want[32];
    const int32_t *tok;
    if (hy_entry_view(sm->m, buf, len, &ent, &e) == HY_OK) {
        const int n = hy_entry_tokens(ent, &tok);
        hy_entry_key(r->who.tenant, sm->fp, hy_entry_seam_setting(ent), hy_entry_repr_of(ent), tok,
                     (size_t)n, want);
        if (memcmp(want, k->b, 32) == 0) {
            g->entry = ent;
            g->rbuf = buf;
            g->from = HY_TIER_NONE;
            *bytes = len;
            return HY_OK;
        }
        snprintf(e.msg, sizeof e.msg, "its tokens are not the key's");
    }
    hy_log(HY_LOG_WARN, "cluster: an entry from %s failed its checks, taken as a miss: %s",
           g->member, e.msg);
    hy_entry_free(ent);
    free(buf);
    g->member[0] = '\0';
    return HY_ENOTFOUND;
}

int h_fetch_here(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err)
{
    g->entry = NULL;
    g->lease = NULL;
    g->rbuf = NULL;
    g->member[0] = '\0';
    return fetch_local(r, sm, k, g, bytes, err);
}

int h_fetch_entry(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err)
{
    int rc = h_fetch_here(r, sm, k, g, bytes, err);
    if (rc == HY_ENOTFOUND && r->s->cluster) rc = fetch_remote(r, sm, k, g, bytes);
    return rc;
}

/* --- entries landing from NVMe while the pass runs ------------------------------- */

/* One hit being read: from the NVMe tier (into a lease) or from an owner
 * in the cluster (GetEntry, into buf). Its fields below `mu` change under it. */
typedef struct landing_job {
    hy_key key;
    uint64_t bytes; /* the entry's, as the store's index (or the owner's Lookup) gave it */
    pl_source src;  /* PL_FROM_NVME or PL_FROM_REMOTE */
    hy_svc *svc;    /* remote: whose cluster */
    char member[HY_MEMBER_ID_MAX];
    hy_entry **entry_out;
    hy_lease **lease_out;
    void **buf_out;
    uint8_t *buf; /* remote: the bytes as they come */
    pl_landing *L;
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

struct pl_landing {
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
static void settle(pl_landing *L)
{
    pthread_mutex_lock(&L->mu);
    L->unsettled--;
    pthread_cond_broadcast(&L->cv);
    pthread_mutex_unlock(&L->mu);
}

/* An entry just opened asks for no more bytes until every other one has
 * opened too (or 2 ms have passed): their first bytes are then not queued
 * behind its layers, and the pass starts when the last one is in. */
static void wait_for_the_others(pl_landing *L)
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

bool pl_peek(hy_store *st, const uint8_t fp[32], const char *tenant, const hy_key *k,
             uint64_t *bytes, unsigned *mask)
{
    hy_meta m;
    if (hy_store_peek(st, k, &m, mask) != HY_OK) return false;
    if (strcmp(m.tenant, tenant) != 0 || memcmp(m.model, fp, 32) != 0) return false;
    *bytes = m.bytes;
    return true;
}

int pl_landing_new(hy_store *st, const hy_model *m, const uint8_t fp[32], const char *tenant,
                   size_t cap, pl_landing **out)
{
    pl_landing *L = calloc(1, sizeof *L);
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

static landing_job *job_add(pl_landing *L, const hy_key *k, uint64_t bytes, pl_source src,
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

size_t pl_landing_add(pl_landing *L, const hy_key *k, uint64_t bytes, hy_entry **entry,
                      hy_lease **lease)
{
    job_add(L, k, bytes, PL_FROM_NVME, entry)->lease_out = lease;
    return L->n - 1;
}

size_t pl_landing_add_remote(pl_landing *L, hy_svc *s, const char *member, const hy_key *k,
                             uint64_t bytes, hy_entry **entry, void **buf)
{
    landing_job *j = job_add(L, k, bytes, PL_FROM_REMOTE, entry);
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
        if (!rc && j->src == PL_FROM_REMOTE) { /* an owner's bytes: this key's entry? */
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
 * entry that fails to decode is (fetch_local). */
static void drop_bad(pl_landing *L, const hy_key *k, const char *why)
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
static void land_end(pl_landing *L, landing_job *j, int rc, const hy_err *e)
{
    if (!rc && j->e && !j->failed && !hy_entry_whole(j->e))
        rc = hy_err_set((hy_err *)e, HY_EFORMAT, "its bytes ended before its last section");
    pthread_mutex_lock(&j->mu);
    if (rc && !j->failed) j->failed = rc, j->err = *e;
    if (j->failed && j->e) /* the pass stops at its next layer */
        hy_entry_view_fail(j->e, j->failed, j->err.msg);
    if (j->src == PL_FROM_NVME && (j->failed == HY_EFORMAT || j->failed == HY_EINVAL))
        drop_bad(L, &j->key, j->err.msg);
    if (j->src == PL_FROM_REMOTE && j->failed)
        hy_log(HY_LOG_WARN, "cluster: the entry from %s failed its checks or its stream%s: %s",
               j->member, j->e ? " after the request had begun to use it" : " (a miss)",
               j->err.msg);
    if (j->src == PL_FROM_REMOTE) {
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

static void land_one(pl_landing *L, landing_job *j)
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
    land_end(L, j, rc, &e);
}

static void land_remote(pl_landing *L, landing_job *j)
{
    hy_err e = {0};
    svc_model *sm = svc_model_by_fp(j->svc, L->fp);
    int rc =
        sm ? svc_cluster_stream(j->svc, j->member, sm, L->tenant, &j->key, on_remote_chunk, j, &e)
           : hy_err_set(&e, HY_ENOTFOUND, "its model is not served here");
    land_end(L, j, rc, &e);
}

/* The readers: threads kept for the daemon's life, shared by every
 * request, a job each at a time. One is started when a job is queued and
 * none is idle (up to PL_LANDING_THREADS), so a request's reads all start
 * at once without the cost of starting threads each time. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    landing_job *head, *tail;
    int threads, idle; /* idle: waiting, not yet handed a job */
} g_readers = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, 0};

static void land_job(landing_job *j)
{
    if (j->src == PL_FROM_REMOTE)
        land_remote(j->L, j);
    else
        land_one(j->L, j);
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
        land_job(j);
        pthread_mutex_lock(&g_readers.mu);
    }
    return NULL;
}

int pl_landing_go(pl_landing *L)
{
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
    int starting = HY_MIN((int)L->n - g_readers.idle, PL_LANDING_THREADS - g_readers.threads);
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
        for (size_t i = 0; i < L->n; i++) land_job(&L->jobs[i]);
        return HY_OK;
    }
    pthread_mutex_unlock(&g_readers.mu);
    return HY_OK;
}

size_t pl_landing_count(const pl_landing *L)
{
    return L ? L->n : 0;
}

hy_entry *pl_landing_opened(pl_landing *L, size_t i)
{
    landing_job *j = &L->jobs[i];
    pthread_mutex_lock(&j->mu);
    while (!j->settled) pthread_cond_wait(&j->cv, &j->mu);
    hy_entry *e = j->e;
    pthread_mutex_unlock(&j->mu);
    return e;
}

void pl_landing_end(pl_landing *L)
{
    if (!L || !L->going) return;
    for (size_t i = 0; i < L->n; i++) {
        landing_job *j = &L->jobs[i];
        pthread_mutex_lock(&j->mu);
        while (!j->done) pthread_cond_wait(&j->cv, &j->mu);
        pthread_mutex_unlock(&j->mu);
    }
}

bool pl_landing_failed(const pl_landing *L, size_t *job, hy_err *err)
{
    for (size_t i = 0; L && i < L->n; i++)
        if (L->jobs[i].failed && L->jobs[i].e) {
            *job = i;
            *err = L->jobs[i].err;
            return true;
        }
    return false;
}

const char *pl_landing_where(const pl_landing *L, size_t i, char *buf, size_t cap)
{
    const landing_job *j = &L->jobs[i];
    if (j->src == PL_FROM_REMOTE)
        snprintf(buf, cap, "member %s", j->member);
    else
        snprintf(buf, cap, "the NVMe tier");
    return buf;
}

pl_source pl_landing_source(const pl_landing *L, size_t i)
{
    return L->jobs[i].src;
}

bool pl_landing_read(const pl_landing *L, pl_source s, uint64_t *bytes, double *seconds)
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

void pl_landing_free(pl_landing *L)
{
    if (!L) return;
    pl_landing_end(L);
    for (size_t i = 0; i < L->n; i++) {
        pthread_mutex_destroy(&L->jobs[i].mu);
        pthread_cond_destroy(&L->jobs[i].cv);
    }
    free(L->jobs);
    pthread_mutex_destroy(&L->mu);
    pthread_cond_destroy(&L->cv);
    free(L);
}

/* --- storing entries where they belong ----------------------------------------------- */

void pl_meta_of(const svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
                size_t bytes, char *const *tags, size_t ntags, hy_meta *m)
{
    memset(m, 0, sizeof *m);
    m->key = *key;
    snprintf(m->tenant, sizeof m->tenant, "%s", tenant);
    memcpy(m->model, sm->fp, 32);
    for (size_t i = 0; i < ntags && i < HY_MAX_TAGS; i++)
        snprintf(m->tags[m->ntags++], HY_TAG_MAX, "%s", tags[i]);
    const int32_t *tok;
    m->tokens = (uint32_t)hy_entry_tokens(e, &tok);
    /* the prefill a hit saves: the body's tokens after an empty prefix */
    m->flops = hy_config_prefill_flops(sm->c, 0, hy_entry_body_tokens(e));
    m->bytes = bytes;
}

int pl_store(hy_svc *s, svc_model *sm, const hy_meta *m, const void *buf, bool wait_owner,
             bool here_only, hy_tier_id *placed, char *member, hy_err *err)
{
    *placed = HY_TIER_NONE;
    member[0] = '\0';
    bool here = true;
    svc_view *v = here_only ? NULL : svc_view_get(s);
    if (v) { /* cluster mode: with its owners */
        svc_peer *own[HY_OWNERS_MAX];
        bool self;
        const size_t n = svc_view_owners(s, v, m->tenant, &m->key, own, &self);
        if (n) snprintf(member, HY_MEMBER_ID_MAX, "%s", self ? s->cfg.cluster_id : own[0]->id);
        svc_view_put(v);
        here = self;
        if (n > (self ? 1u : 0u)) {
            char *tags[HY_MAX_TAGS];
            for (uint32_t t = 0; t < m->ntags; t++) tags[t] = (char *)m->tags[t];
            char took[HY_MEMBER_ID_MAX];
            hy_err pe = {0};
            const bool now = wait_owner && !self; /* one owner must take it now */
            if (wait_owner) svc_cluster_count_forward(s);
            const int rc = svc_cluster_put(s, sm->name, m->tenant, &m->key, tags, m->ntags, buf,
                                           (size_t)m->bytes, now, took, &pe);
            if (rc && now) {
                if (err) *err = pe;
                return rc;
            }
            if (rc) hy_log(HY_LOG_WARN, "cluster: %s", pe.msg);
            if (now) snprintf(member, HY_MEMBER_ID_MAX, "%s", took);
        }
    }
    if (!here) return HY_OK;
    hy_put *p;
    void *dst;
    int rc = hy_store_reserve(s->store, m, &p, &dst, err);
    if (rc) return rc;
    memcpy(dst, buf, (size_t)m->bytes);
    return hy_store_commit(s->store, p, placed, err);
}

int pl_store_built(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key,
                   const hy_entry *e, const void *buf, size_t len, char *const *tags, size_t ntags,
                   hy_tier_id *placed, char *member, hy_err *err)
{
    hy_meta m;
    pl_meta_of(sm, tenant, key, e, len, tags, ntags, &m);
    char who[HY_MEMBER_ID_MAX];
    const int rc = pl_store(s, sm, &m, buf, false, false, placed, who, err);
    if (member) snprintf(member, HY_MEMBER_ID_MAX, "%s", who);
    if (rc) return rc;
    atomic_fetch_add(&s->met.entries_built, 1);
    svc_reprs_count(&s->reprs, e, len);
    if (*placed != HY_TIER_NONE) atomic_fetch_add(&s->met.entries_stored, 1);
    return HY_OK;
}

int pl_store_entry(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key,
                   const hy_entry *e, char *const *tags, size_t ntags, hy_tier_id *placed,
                   uint64_t *bytes, char *member, hy_err *err)
{
    *placed = HY_TIER_NONE;
    void *buf;
    size_t len;
    int rc = hy_entry_serialize(e, &buf, &len, err);
    if (rc) return rc;
    rc = pl_store_built(s, sm, tenant, key, e, buf, len, tags, ntags, placed, member, err);
    free(buf);
    if (bytes) *bytes = len;
    return rc;
}

/* --- fetch or recompute ------------------------------------------------------------ */

struct pl_fit {
    uint64_t n[PL_SAMPLES];
    double s[PL_SAMPLES];
    size_t count, next;
    hy_cost_model model;
    bool fitted;
};

struct pl_costs {
    pthread_mutex_t mu;
    pl_fit fetch[PL_FROM_COUNT];
    pl_fit compute;
};

const char *pl_source_name(pl_source s)
{
    static const char *const names[] = {"host", "nvme", "remote"};
    return (unsigned)s < PL_FROM_COUNT ? names[s] : "?";
}

int pl_costs_new(pl_costs **out)
{
    pl_costs *c = calloc(1, sizeof *c);
    if (!c) return HY_ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return HY_OK;
}

void pl_costs_free(pl_costs *c)
{
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Adds a sample and refits (under mu). */
static void observe(pl_fit *f, uint64_t n, double s)
{
    if (n == 0 || !(s > 0)) return;
    f->n[f->next] = n, f->s[f->next] = s;
    f->next = (f->next + 1) % PL_SAMPLES;
    if (f->count < PL_SAMPLES) f->count++;
    hy_err ignored = {0};
    if (f->count >= PL_MIN_SAMPLES)
        f->fitted = hy_cost_fit(f->n, f->s, f->count, &f->model, &ignored) == HY_OK;
}

void pl_costs_fetched(pl_costs *c, pl_source s, uint64_t bytes, double seconds)
{
    if (!c || (unsigned)s >= PL_FROM_COUNT) return;
    pthread_mutex_lock(&c->mu);
    observe(&c->fetch[s], bytes, seconds);
    pthread_mutex_unlock(&c->mu);
}

void pl_costs_computed(pl_costs *c, uint64_t tokens, double seconds)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    observe(&c->compute, tokens, seconds);
    pthread_mutex_unlock(&c->mu);
}

bool pl_costs_fetch_s(pl_costs *c, pl_source s, uint64_t bytes, double *out)
{
    if (!c || (unsigned)s >= PL_FROM_COUNT) return false;
    pthread_mutex_lock(&c->mu);
    const bool ok = c->fetch[s].fitted;
    if (ok) *out = hy_cost_prefill(&c->fetch[s].model, bytes);
    pthread_mutex_unlock(&c->mu);
    return ok;
}

bool pl_costs_compute_s(pl_costs *c, uint64_t tokens, double *out)
{
    if (!c) return false;
    pthread_mutex_lock(&c->mu);
    const bool ok = c->compute.fitted;
    if (ok) {
        hy_cost_model m = c->compute.model;
        m.fixed_s = 0; /* a pass's own cost, paid whatever it computes */
        *out = hy_cost_prefill(&m, tokens);
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

bool pl_recompute(pl_costs *c, pl_policy pol, pl_source s, uint64_t bytes, uint64_t tokens,
                  double *fetch_s, double *compute_s, char *why, size_t cap)
{
    *fetch_s = *compute_s = 0;
    const bool fk = pl_costs_fetch_s(c, s, bytes, fetch_s);
    const bool ck = pl_costs_compute_s(c, tokens, compute_s);
    char size[32];
    if (bytes >= 1u << 20)
        snprintf(size, sizeof size, "%.1f MiB", (double)bytes / (1 << 20));
    else
        snprintf(size, sizeof size, "%.0f KiB", (double)bytes / 1024);
    if (pol == PL_FETCH) {
        snprintf(why, cap, "fetched from %s (%s): the request asked to fetch", pl_source_name(s),
                 size);
        return false;
    }
    if (pol == PL_RECOMPUTE) {
        snprintf(why, cap, "recomputed (%llu tokens): the request asked to recompute",
                 (unsigned long long)tokens);
        return true;
    }
    if (!fk || !ck) {
        snprintf(why, cap, "fetched from %s (%s): %s not measured yet", pl_source_name(s), size,
                 !fk ? "fetching from there" : "computing");
        return false;
    }
    const bool re = *compute_s < *fetch_s;
    snprintf(why, cap, "%s: computing %llu tokens %.2f ms %s fetching %s from %s %.2f ms",
             re ? "recomputed" : "fetched", (unsigned long long)tokens, *compute_s * 1e3,
             re ? "<" : ">=", size, pl_source_name(s), *fetch_s * 1e3);
    return re;
}
