/*
 * Cluster membership in etcd. A member owns one key, prefix + id, put with a
 * lease; everyone reads the prefix once and then watches it, keeping the set
 * sorted by id and handing the whole set to on_change after each change.
 *
 * Threads, beside the caller's:
 *  - keepalive (members only): renews the lease every TTL/3, so two renewals
 *    may fail before the key expires. A renewal that finds the lease gone
 *    (etcd restarted without it, the process was paused past the TTL) joins
 *    again: a new lease, the key put again; the watchers see a DELETE then a
 *    PUT, which is what happened. Our own key deleted under us (by hand, or
 *    with the lease) is put back at once, when the watch reports it, rather
 *    than at the next renewal (which would not notice a key deleted while
 *    its lease lives on).
 *  - the watch's own thread (hy_etcd_watch): applies each response's events
 *    to the set and calls on_change, under mu.
 *  - the rewatch thread: sleeps until the watch breaks, then reads the prefix
 *    again (on_change with that set: events may have been missed) and starts
 *    a new watch from the read's revision + 1, retrying with backoff (100 ms
 *    doubling to 5 s) while etcd does not answer.
 *
 * mu guards the set, the lease id and the flags, and is held across
 * on_change so that calls never overlap and each sees the set in order.
 */
#include "hy_cluster.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000

struct hy_membership {
    hy_etcd *e;
    char *prefix, *self_id, *self_key, *self_info;
    size_t plen;
    int ttl_s;
    hy_members_fn on_change;
    void *ctx;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;     /* stop or abandon began */
    bool watch_broken; /* the watch told us it ended */
    bool self_deleted; /* the watch saw our own key deleted (members) */
    int64_t lease;     /* the lease our key is attached to (members) */
    hy_member *set;    /* sorted by id */
    size_t n, cap;

    hy_etcd_watch *watch; /* the rewatch thread's (and start's, before it runs) */
    pthread_t keepalive_thread, rewatch_thread;
    bool has_keepalive, has_rewatch;
};

/* ---- the set ---- */

/* A member from a key and its value: HY_EFORMAT (with why) when the key's id
 * or the value is not what a member's is. */
static int member_parse(const char *prefix, size_t plen, const char *key, const uint8_t *val,
                        size_t len, hy_member *out, hy_err *err)
{
    memset(out, 0, sizeof *out);
    const char *id = key + plen;
    if (strncmp(key, prefix, plen) != 0 || !id[0] || strlen(id) >= sizeof out->id)
        return hy_err_set(err, HY_EFORMAT, "key %s: the id after %s is empty or over %zu bytes",
                          key, prefix, sizeof out->id - 1);
    cJSON *j = cJSON_ParseWithLength((const char *)val, len);
    const cJSON *a = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "address") : NULL;
    int rc = 0;
    if (!j || !cJSON_IsObject(j))
        rc = hy_err_set(err, HY_EFORMAT, "key %s: the value is not a JSON object", key);
    else if (!cJSON_IsString(a) || !a->valuestring[0] ||
             strlen(a->valuestring) >= sizeof out->address)
        rc = hy_err_set(err, HY_EFORMAT, "key %s: \"address\" is not a string of 1 to %zu bytes",
                        key, sizeof out->address - 1);
    if (!rc) {
        snprintf(out->id, sizeof out->id, "%s", id);
        snprintf(out->address, sizeof out->address, "%s", a->valuestring);
        out->info = malloc(len + 1);
        if (!out->info)
            rc = hy_err_set(err, HY_ENOMEM, "key %s: out of memory", key);
        else {
            memcpy(out->info, val, len);
            out->info[len] = '\0';
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* The index of id in the set, or where it would go (*found false). */
static size_t set_find(const hy_membership *m, const char *id, bool *found)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->set[mid].id, id);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static void set_remove(hy_membership *m, const char *id)
{
    bool found;
    size_t i = set_find(m, id, &found);
    if (!found) return;
    assert(i < m->n);
    free(m->set[i].info);
    memmove(&m->set[i], &m->set[i + 1], (m->n - i - 1) * sizeof *m->set);
    m->n--;
}

/* Puts x into the set (replacing the member of that id), taking x.info. */
static int set_upsert(hy_membership *m, hy_member x)
{
    bool found;
    size_t i = set_find(m, x.id, &found);
    if (found) {
        free(m->set[i].info);
        m->set[i] = x;
        return 0;
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 8;
        hy_member *s = realloc(m->set, cap * sizeof *s);
        if (!s) {
            free(x.info);
            return HY_ENOMEM;
        }
        m->set = s;
        m->cap = cap;
    }
    memmove(&m->set[i + 1], &m->set[i], (m->n - i) * sizeof *m->set);
    m->set[i] = x;
    m->n++;
    /* the set stays sorted by id, each id once */
    assert(i == 0 || strcmp(m->set[i - 1].id, x.id) < 0);
    assert(i + 1 == m->n || strcmp(x.id, m->set[i + 1].id) < 0);
    return 0;
}

static void set_clear(hy_membership *m)
{
    for (size_t i = 0; i < m->n; i++) free(m->set[i].info);
    m->n = 0;
}

/* A PUT of key = val: the member joins or changes; a value that is not a
 * member's is logged and the key left out of the set. */
static void apply_put(hy_membership *m, const char *key, const uint8_t *val, size_t len)
{
    hy_member x;
    hy_err err = {0};
    if (member_parse(m->prefix, m->plen, key, val, len, &x, &err)) {
        hy_log(HY_LOG_WARN, "membership %s: skipped: %s", m->prefix, err.msg);
        if (strncmp(key, m->prefix, m->plen) == 0) set_remove(m, key + m->plen);
        return;
    }
    if (set_upsert(m, x))
        hy_log(HY_LOG_ERROR, "membership %s: out of memory adding %s", m->prefix, key);
}

/* The set becomes the range's keys. Under mu. */
static void set_reset(hy_membership *m, const hy_etcd_kv *kvs, size_t n)
{
    set_clear(m);
    for (size_t i = 0; i < n; i++) apply_put(m, kvs[i].key, kvs[i].value, kvs[i].value_len);
}

/* ---- the watch ---- */

/* CLOCK_REALTIME ms from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(int64_t ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

static void on_watch(void *ctx, bool ok, const hy_etcd_event *ev, size_t n, int64_t revision,
                     const char *why)
{
    (void)revision;
    hy_membership *m = ctx;
    pthread_mutex_lock(&m->mu);
    if (m->stopping) {
        pthread_mutex_unlock(&m->mu);
        return;
    }
    if (!ok) {
        hy_log(HY_LOG_WARN, "membership %s: the watch broke (%s); reading the set again", m->prefix,
               why ? why : "no reason");
        m->watch_broken = true;
        pthread_cond_broadcast(&m->cv);
    } else if (n > 0) {
        for (size_t i = 0; i < n; i++) {
            if (ev[i].type == HY_ETCD_PUT)
                apply_put(m, ev[i].key, ev[i].value, ev[i].value_len);
            else if (strncmp(ev[i].key, m->prefix, m->plen) == 0)
                set_remove(m, ev[i].key + m->plen);
            if (ev[i].type == HY_ETCD_DELETE && m->self_key && !strcmp(ev[i].key, m->self_key)) {
                m->self_deleted = true; /* the keepalive thread puts it back */
                pthread_cond_broadcast(&m->cv);
            }
        }
        m->on_change(m->ctx, m->set, m->n);
    }
    pthread_mutex_unlock(&m->mu);
}

/* Waits on cv until ms have passed or the membership is stopping. Under mu;
 * returns whether it is stopping. */
static bool wait_ms(hy_membership *m, int64_t ms)
{
    struct timespec until = deadline_in(ms);
    while (!m->stopping && pthread_cond_timedwait(&m->cv, &m->mu, &until) != ETIMEDOUT) {
    }
    return m->stopping;
}

/* Reads the prefix, hands the set to on_change and starts a watch from the
 * read's revision + 1 into m->watch. */
static int read_and_watch(hy_membership *m, hy_err *err)
{
    hy_etcd_kv *kvs;
    size_t n;
    int64_t rev;
    int rc = hy_etcd_range_prefix(m->e, m->prefix, &kvs, &n, &rev, err);
    if (rc) return rc;
    pthread_mutex_lock(&m->mu);
    set_reset(m, kvs, n);
    bool found;
    if (m->self_id && (set_find(m, m->self_id, &found), !found)) {
        m->self_deleted = true; /* deleted while the watch was down: put it back */
        pthread_cond_broadcast(&m->cv);
    }
    if (!m->stopping) m->on_change(m->ctx, m->set, m->n);
    m->watch_broken = false;
    pthread_mutex_unlock(&m->mu);
    hy_etcd_kvs_free(kvs, n);
    return hy_etcd_watch_start(m->e, m->prefix, rev + 1, on_watch, m, &m->watch, err);
}

static void *rewatch_main(void *arg)
{
    hy_membership *m = arg;
    pthread_mutex_lock(&m->mu);
    for (;;) {
        while (!m->stopping && !m->watch_broken) pthread_cond_wait(&m->cv, &m->mu);
        if (m->stopping) break;
        pthread_mutex_unlock(&m->mu);
        hy_etcd_watch_stop(m->watch); /* its thread has ended: this frees it */
        m->watch = NULL;
        int64_t backoff = BACKOFF_MIN_MS;
        for (;;) {
            hy_err err = {0};
            if (read_and_watch(m, &err) == 0) break;
            hy_log(HY_LOG_WARN,
                   "membership %s: cannot watch again (retrying in %" PRId64 " ms): %s", m->prefix,
                   backoff, err.msg);
            pthread_mutex_lock(&m->mu);
            bool stop = wait_ms(m, backoff);
            pthread_mutex_unlock(&m->mu);
            if (stop) break;
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
        }
        pthread_mutex_lock(&m->mu);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- the lease ---- */

/* A new lease and our key put with it. */
static int join(hy_membership *m, hy_err *err)
{
    int64_t lease;
    int rc = hy_etcd_lease_grant(m->e, m->ttl_s, &lease, NULL, err);
    if (rc) return rc;
    rc = hy_etcd_put(m->e, m->self_key, m->self_info, strlen(m->self_info), lease, err);
    if (rc) {
        hy_etcd_lease_revoke(m->e, lease, NULL);
        return rc;
    }
    pthread_mutex_lock(&m->mu);
    m->lease = lease;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static void *keepalive_main(void *arg)
{
    hy_membership *m = arg;
    int64_t interval_ms = (int64_t)m->ttl_s * 1000 / 3;
    pthread_mutex_lock(&m->mu);
    struct timespec next = deadline_in(interval_ms);
    bool put_next = false; /* a put back failed: the next tick puts instead of renewing */
    while (!m->stopping) {
        bool tick = false;
        if (!m->self_deleted) {
            tick = pthread_cond_timedwait(&m->cv, &m->mu, &next) == ETIMEDOUT;
            if (!tick) continue; /* woken: stopping, our key deleted, or spurious */
        }
        bool reput = m->self_deleted || put_next;
        m->self_deleted = false;
        int64_t lease = m->lease;
        pthread_mutex_unlock(&m->mu);
        hy_err err = {0};
        int rc;
        if (reput) {
            hy_log(HY_LOG_WARN, "membership %s: our key %s was deleted; putting it back", m->prefix,
                   m->self_key);
            rc = hy_etcd_put(m->e, m->self_key, m->self_info, strlen(m->self_info), lease, &err);
        } else {
            rc = hy_etcd_lease_keepalive(m->e, lease, NULL, &err);
        }
        if (rc == HY_ENOTFOUND) {
            hy_log(HY_LOG_WARN, "membership %s: our lease is gone (%s); joining again as %s",
                   m->prefix, err.msg, m->self_id);
            err = (hy_err){0};
            rc = join(m, &err);
        }
        if (rc)
            hy_log(HY_LOG_WARN,
                   "membership %s: keeping %s alive failed (next try in %" PRId64 " ms): %s",
                   m->prefix, m->self_id, interval_ms, err.msg);
        put_next = reput && rc;
        pthread_mutex_lock(&m->mu);
        if (tick) next = deadline_in(interval_ms);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- start and stop ---- */

static void membership_free(hy_membership *m)
{
    hy_etcd_close(m->e);
    set_clear(m);
    free(m->set);
    free(m->prefix);
    free(m->self_id);
    free(m->self_key);
    free(m->self_info);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

/* Stops the threads and the watch; revokes the lease when leave. */
static void membership_end(hy_membership *m, bool leave)
{
    pthread_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    if (m->has_keepalive) pthread_join(m->keepalive_thread, NULL);
    if (m->has_rewatch) pthread_join(m->rewatch_thread, NULL);
    hy_etcd_watch_stop(m->watch);
    m->watch = NULL;
    if (leave && m->lease) {
        hy_err err = {0};
        if (hy_etcd_lease_revoke(m->e, m->lease, &err) && err.code != HY_ENOTFOUND)
            hy_log(HY_LOG_WARN,
                   "membership %s: leaving as %s: %s (the key goes when its lease "
                   "expires)",
                   m->prefix, m->self_id, err.msg);
    }
    membership_free(m);
}

static int check_config(const hy_membership_config *c, hy_err *err)
{
    if (!c->prefix || !c->prefix[0])
        return hy_err_set(err, HY_EINVAL, "membership: prefix is empty");
    if (!c->on_change) return hy_err_set(err, HY_EINVAL, "membership: on_change is NULL");
    if (c->ttl_s < 0) return hy_err_set(err, HY_EINVAL, "membership: ttl_s %d < 0", c->ttl_s);
    if (!c->self_id) return 0;
    if (!c->self_id[0] || strlen(c->self_id) >= sizeof((hy_member *)0)->id ||
        strchr(c->self_id, '/'))
        return hy_err_set(err, HY_EINVAL,
                          "membership: self_id \"%s\" is empty, over %zu bytes or has a '/'",
                          c->self_id, sizeof((hy_member *)0)->id - 1);
    if (!c->self_info) return hy_err_set(err, HY_EINVAL, "membership: self_info is NULL");
    /* the value must be one we would accept from another member */
    hy_member x;
    char key[512];
    snprintf(key, sizeof key, "%s%s", c->prefix, c->self_id);
    int rc = member_parse(c->prefix, strlen(c->prefix), key, (const uint8_t *)c->self_info,
                          strlen(c->self_info), &x, err);
    if (rc) {
        hy_err_prefix(err, "membership: self_info");
        return HY_EINVAL;
    }
    free(x.info);
    return 0;
}

int hy_membership_start(const hy_membership_config *c, hy_membership **out, hy_err *err)
{
    *out = NULL;
    int rc = check_config(c, err);
    if (rc) return rc;
    hy_membership *m = calloc(1, sizeof *m);
    if (!m) return hy_err_set(err, HY_ENOMEM, "membership: out of memory");
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    m->ttl_s = c->ttl_s ? c->ttl_s : 10;
    m->on_change = c->on_change;
    m->ctx = c->ctx;
    m->prefix = strdup(c->prefix);
    m->plen = strlen(c->prefix);
    bool oom = !m->prefix;
    if (c->self_id) {
        m->self_id = strdup(c->self_id);
        m->self_info = strdup(c->self_info);
        m->self_key = malloc(m->plen + strlen(c->self_id) + 1);
        oom = oom || !m->self_id || !m->self_info || !m->self_key;
        if (!oom) sprintf(m->self_key, "%s%s", c->prefix, c->self_id);
    }
    if (oom) {
        membership_free(m);
        return hy_err_set(err, HY_ENOMEM, "membership: out of memory");
    }
    hy_etcd_options eo = {.endpoints = c->endpoints,
                          .n = c->nendpoints,
                          .timeout_ms = c->timeout_ms ? c->timeout_ms : 2000,
                          .tls_ca_pem = c->tls_ca_pem,
                          .tls_cert_pem = c->tls_cert_pem,
                          .tls_key_pem = c->tls_key_pem,
                          .tls_server_name = c->tls_server_name,
                          .user = c->user,
                          .password = c->password};
    rc = hy_etcd_open_ex(&eo, &m->e, err);
    if (!rc && m->self_id) rc = join(m, err);
    if (!rc) rc = read_and_watch(m, err);
    if (!rc && m->self_id) {
        rc = pthread_create(&m->keepalive_thread, NULL, keepalive_main, m) ? HY_EIO : 0;
        m->has_keepalive = !rc;
    }
    if (!rc) {
        rc = pthread_create(&m->rewatch_thread, NULL, rewatch_main, m) ? HY_EIO : 0;
        m->has_rewatch = !rc;
    }
    if (rc == HY_EIO && (!m->has_keepalive || !m->has_rewatch) && err && !err->code)
        hy_err_set(err, HY_EIO, "membership: cannot start a thread");
    if (rc) {
        hy_err_prefix(err, "membership %s", c->prefix);
        membership_end(m, true);
        return rc;
    }
    *out = m;
    return 0;
}

void hy_membership_stop(hy_membership *m)
{
    if (m) membership_end(m, true);
}

void hy_membership_abandon(hy_membership *m)
{
    if (m) membership_end(m, false);
}
