/*
 * The etcd client (cluster/etcd.c) and the membership on it (cluster/membership.c)
 * against a real etcd (tests/etcd_fixture.h; skipped, exit 77, without one).
 *
 * Keys: put, range of a prefix (sorted, and only that prefix), delete.
 * Leases: one not kept alive expires and takes its key; one kept alive
 * survives 3 x its TTL; revoke removes the key at once; a gone lease reads
 * HY_ENOTFOUND. Watch: one Watch call, half-closed right after its create
 * request, delivers PUT, PUT, DELETE in revision order (etcd keeps a
 * half-closed watch stream alive), and one from an old revision replays
 * them. Membership: two members and a watch-only client see the same set;
 * a stopped member is gone for the others within 500 ms, an abandoned one
 * (a crash) after about its TTL; a member whose lease vanished joins again,
 * one whose key was deleted puts it back;
 * after etcd restarts the watchers follow again; a value without an
 * address is skipped. A bad endpoint's error names it; a good endpoint
 * after it is used instead.
 */
#include "etcd_fixture.h"
#include "hy_cluster.h"
#include "test_util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static hy_test_etcd g_etcd;

static hy_etcd *open_client(void)
{
    const char *ep[] = {g_etcd.endpoint};
    hy_etcd *e = NULL;
    hy_err err = {0};
    int rc = hy_etcd_open(ep, 1, 2000, &e, &err);
    if (rc) fprintf(stderr, "hy_etcd_open: %s\n", err.msg);
    CU_ASSERT_FATAL(rc == 0);
    return e;
}

/* Whether key exists (asserting the range itself worked). */
static bool key_exists(hy_etcd *e, const char *key)
{
    hy_etcd_kv *kvs;
    size_t n;
    hy_err err = {0};
    CU_ASSERT_FATAL(hy_etcd_range_prefix(e, key, &kvs, &n, NULL, &err) == 0);
    bool found = false;
    for (size_t i = 0; i < n; i++) found = found || strcmp(kvs[i].key, key) == 0;
    hy_etcd_kvs_free(kvs, n);
    return found;
}

static void test_kv(void)
{
    hy_etcd *e = open_client();
    hy_err err = {0};
    CU_ASSERT(hy_etcd_put(e, "/t/kv/b", "two", 3, 0, &err) == 0);
    CU_ASSERT(hy_etcd_put(e, "/t/kv/a", "one", 3, 0, &err) == 0);
    CU_ASSERT(hy_etcd_put(e, "/t/kv0", "outside", 7, 0, &err) == 0); /* the next prefix */
    CU_ASSERT(hy_etcd_put(e, "/t/kv/e", "", 0, 0, &err) == 0);       /* an empty value */
    hy_etcd_kv *kvs;
    size_t n;
    int64_t rev = 0;
    CU_ASSERT_FATAL(hy_etcd_range_prefix(e, "/t/kv/", &kvs, &n, &rev, &err) == 0);
    CU_ASSERT_FATAL(n == 3);
    CU_ASSERT_STRING_EQUAL(kvs[0].key, "/t/kv/a");
    CU_ASSERT_STRING_EQUAL(kvs[1].key, "/t/kv/b");
    CU_ASSERT_STRING_EQUAL(kvs[2].key, "/t/kv/e");
    CU_ASSERT(kvs[0].value_len == 3 && memcmp(kvs[0].value, "one", 3) == 0);
    CU_ASSERT(kvs[1].value_len == 3 && memcmp(kvs[1].value, "two", 3) == 0);
    CU_ASSERT(kvs[2].value_len == 0);
    CU_ASSERT(kvs[0].mod_revision > kvs[1].mod_revision); /* a was put after b */
    CU_ASSERT(rev >= kvs[2].mod_revision && kvs[0].lease == 0);
    hy_etcd_kvs_free(kvs, n);

    CU_ASSERT(hy_etcd_delete(e, "/t/kv/a", &err) == 0);
    CU_ASSERT(hy_etcd_delete(e, "/t/kv/a", &err) == 0); /* already gone: not an error */
    CU_ASSERT(!key_exists(e, "/t/kv/a"));
    CU_ASSERT(key_exists(e, "/t/kv/b"));
    CU_ASSERT_FATAL(hy_etcd_range_prefix(e, "/t/none/", &kvs, &n, NULL, &err) == 0);
    CU_ASSERT(n == 0 && kvs == NULL);
    CU_ASSERT(hy_etcd_put(e, "", "x", 1, 0, &err) == HY_EINVAL);
    hy_etcd_close(e);
}

static void test_lease_expires(void)
{
    hy_etcd *e = open_client();
    hy_err err = {0};
    int64_t id = 0, ttl = 0;
    CU_ASSERT_FATAL(hy_etcd_lease_grant(e, 1, &id, &ttl, &err) == 0);
    CU_ASSERT(id != 0 && ttl >= 1);
    long long t0 = hy_test_now_ms();
    CU_ASSERT_FATAL(hy_etcd_put(e, "/t/lease/x", "v", 1, id, &err) == 0);
    CU_ASSERT(key_exists(e, "/t/lease/x"));
    long long gone_ms = -1;
    while (hy_test_now_ms() - t0 < 5000) {
        if (!key_exists(e, "/t/lease/x")) {
            gone_ms = hy_test_now_ms() - t0;
            break;
        }
        hy_test_sleep_ms(50);
    }
    printf("\n    lease of %lld s: key gone after %lld ms ", (long long)ttl, gone_ms);
    CU_ASSERT(gone_ms >= 500 && gone_ms < ttl * 1000 + 2000);
    CU_ASSERT(hy_etcd_lease_keepalive(e, id, NULL, &err) == HY_ENOTFOUND);
    CU_ASSERT(hy_etcd_lease_revoke(e, id, &err) == HY_ENOTFOUND);
    CU_ASSERT(hy_etcd_put(e, "/t/lease/y", "v", 1, id, &err) == HY_ENOTFOUND);
    CU_ASSERT(strstr(err.msg, g_etcd.endpoint) != NULL);
    hy_etcd_close(e);
}

static void test_lease_kept_alive(void)
{
    hy_etcd *e = open_client();
    hy_err err = {0};
    int64_t id = 0, ttl = 0;
    CU_ASSERT_FATAL(hy_etcd_lease_grant(e, 1, &id, &ttl, &err) == 0);
    CU_ASSERT_FATAL(hy_etcd_put(e, "/t/alive/x", "v", 1, id, &err) == 0);
    long long t0 = hy_test_now_ms();
    int renewals = 0;
    while (hy_test_now_ms() - t0 < 3 * ttl * 1000) {
        hy_test_sleep_ms(250);
        int64_t left = 0;
        int rc = hy_etcd_lease_keepalive(e, id, &left, &err);
        if (rc) fprintf(stderr, "keepalive: %s\n", err.msg);
        CU_ASSERT(rc == 0 && left >= 1);
        renewals++;
    }
    CU_ASSERT(renewals >= 10);
    CU_ASSERT(key_exists(e, "/t/alive/x"));
    CU_ASSERT(hy_etcd_lease_revoke(e, id, &err) == 0);
    CU_ASSERT(!key_exists(e, "/t/alive/x")); /* at once, no waiting */
    hy_etcd_close(e);
}

/* ---- watch ---- */

typedef struct seen {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    hy_etcd_event_type type[16];
    char key[16][64], value[16][16];
    int64_t rev[16];
    bool broken;
} seen;

static void seen_init(seen *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
}

static void on_events(void *ctx, bool ok, const hy_etcd_event *ev, size_t n, int64_t revision,
                      const char *why)
{
    (void)revision, (void)why;
    seen *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (!ok) s->broken = true;
    for (size_t i = 0; i < n && s->n < 16; i++, s->n++) {
        s->type[s->n] = ev[i].type;
        snprintf(s->key[s->n], sizeof s->key[0], "%s", ev[i].key);
        snprintf(s->value[s->n], sizeof s->value[0], "%.*s", (int)ev[i].value_len,
                 (const char *)ev[i].value);
        s->rev[s->n] = ev[i].mod_revision;
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static bool seen_wait(seen *s, int want, long timeout_ms)
{
    long long until = hy_test_now_ms() + timeout_ms;
    pthread_mutex_lock(&s->mu);
    while (s->n < want && hy_test_now_ms() < until) {
        pthread_mutex_unlock(&s->mu);
        hy_test_sleep_ms(10);
        pthread_mutex_lock(&s->mu);
    }
    bool ok = s->n >= want;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static void check_put_put_delete(seen *s)
{
    CU_ASSERT_FATAL(s->n == 3);
    CU_ASSERT(s->type[0] == HY_ETCD_PUT && strcmp(s->key[0], "/t/w/a") == 0);
    CU_ASSERT_STRING_EQUAL(s->value[0], "1");
    CU_ASSERT(s->type[1] == HY_ETCD_PUT && strcmp(s->key[1], "/t/w/b") == 0);
    CU_ASSERT_STRING_EQUAL(s->value[1], "2");
    CU_ASSERT(s->type[2] == HY_ETCD_DELETE && strcmp(s->key[2], "/t/w/a") == 0);
    CU_ASSERT(s->rev[0] < s->rev[1] && s->rev[1] < s->rev[2]);
}

static void test_watch_order(void)
{
    hy_etcd *e = open_client();
    hy_err err = {0};
    seen s;
    seen_init(&s);
    hy_etcd_watch *w = NULL;
    int rc = hy_etcd_watch_start(e, "/t/w/", 0, on_events, &s, &w, &err);
    if (rc) fprintf(stderr, "watch: %s\n", err.msg);
    CU_ASSERT_FATAL(rc == 0);
    /* The call was half-closed when the watch was created: what follows
     * arrives only if etcd keeps a half-closed watch stream going. Wait a
     * little first, so that is not just a race with etcd seeing the close. */
    hy_test_sleep_ms(300);
    CU_ASSERT(hy_etcd_put(e, "/t/w/a", "1", 1, 0, &err) == 0);
    CU_ASSERT(hy_etcd_put(e, "/t/wx", "outside", 7, 0, &err) == 0);
    CU_ASSERT(hy_etcd_put(e, "/t/w/b", "2", 1, 0, &err) == 0);
    CU_ASSERT(hy_etcd_delete(e, "/t/w/a", &err) == 0);
    CU_ASSERT(seen_wait(&s, 3, 3000));
    hy_test_sleep_ms(100); /* nothing more may come (the key outside the prefix) */
    hy_etcd_watch_stop(w);
    check_put_put_delete(&s);
    CU_ASSERT(!s.broken); /* a stop is not a break */

    /* from the first event's revision: the same three, replayed */
    seen r;
    seen_init(&r);
    CU_ASSERT_FATAL(hy_etcd_watch_start(e, "/t/w/", s.rev[0], on_events, &r, &w, &err) == 0);
    CU_ASSERT(seen_wait(&r, 3, 3000));
    hy_test_sleep_ms(100);
    hy_etcd_watch_stop(w);
    check_put_put_delete(&r);
    hy_etcd_close(e);
}

/* ---- membership ---- */

/* What one on_change callback saw last: the ids, comma-separated. */
typedef struct rec {
    pthread_mutex_t mu;
    char ids[256];
    char hist[4096]; /* every set since rec_mark, each followed by ';' */
    int calls;
    bool bad_address; /* a member whose address is not "addr-<id>" */
} rec;

static void rec_init(rec *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
}

static void on_members(void *ctx, const hy_member *m, size_t n)
{
    rec *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->ids[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(r->ids);
        snprintf(r->ids + l, sizeof r->ids - l, "%s%s", i ? "," : "", m[i].id);
        char want[300];
        snprintf(want, sizeof want, "addr-%s", m[i].id);
        if (strcmp(m[i].address, want) != 0 || !strstr(m[i].info, want)) r->bad_address = true;
        if (i > 0 && strcmp(m[i - 1].id, m[i].id) >= 0) r->bad_address = true; /* unsorted */
    }
    size_t l = strlen(r->hist);
    snprintf(r->hist + l, sizeof r->hist - l, "%s;", r->ids);
    r->calls++;
    pthread_mutex_unlock(&r->mu);
}

/* Forgets the sets seen so far. */
static void rec_mark(rec *r)
{
    pthread_mutex_lock(&r->mu);
    snprintf(r->hist, sizeof r->hist, ";");
    pthread_mutex_unlock(&r->mu);
}

/* Whether r was handed the set ids since rec_mark (however briefly). */
static bool rec_saw(rec *r, const char *ids)
{
    char want[300];
    snprintf(want, sizeof want, ";%s;", ids);
    pthread_mutex_lock(&r->mu);
    bool saw = strstr(r->hist, want) != NULL;
    pthread_mutex_unlock(&r->mu);
    return saw;
}

/* Milliseconds until r's set reads ids (-1: not within timeout_ms). */
static long long rec_wait(rec *r, const char *ids, long timeout_ms)
{
    long long t0 = hy_test_now_ms();
    for (;;) {
        pthread_mutex_lock(&r->mu);
        bool ok = strcmp(r->ids, ids) == 0;
        pthread_mutex_unlock(&r->mu);
        if (ok) return hy_test_now_ms() - t0;
        if (hy_test_now_ms() - t0 > timeout_ms) return -1;
        hy_test_sleep_ms(5);
    }
}

#define PREFIX "/t/members/"

static hy_membership *member(const char *id, int ttl_s, rec *r)
{
    const char *ep[] = {g_etcd.endpoint};
    char info[200];
    const char *nid = id ? id : "";
    snprintf(info, sizeof info, "{\"id\":\"%s\",\"address\":\"addr-%s\"}", nid, nid);
    hy_membership_config c = {.endpoints = ep,
                              .nendpoints = 1,
                              .prefix = PREFIX,
                              .ttl_s = ttl_s,
                              .self_id = id,
                              .self_info = id ? info : NULL,
                              .on_change = on_members,
                              .ctx = r};
    hy_membership *m = NULL;
    hy_err err = {0};
    int rc = hy_membership_start(&c, &m, &err);
    if (rc) fprintf(stderr, "membership %s: %s\n", id ? id : "(watch)", err.msg);
    CU_ASSERT_FATAL(rc == 0);
    return m;
}

static void test_membership_stop_and_abandon(void)
{
    rec ra, rb, rc;
    rec_init(&ra), rec_init(&rb), rec_init(&rc);
    hy_membership *a = member("a", 1, &ra);
    CU_ASSERT(ra.calls == 1 && strcmp(ra.ids, "a") == 0); /* the initial set, before returning */
    hy_membership *b = member("b", 1, &rb);
    CU_ASSERT(strcmp(rb.ids, "a,b") == 0);
    hy_membership *c = member(NULL, 0, &rc); /* a client: watches only */
    CU_ASSERT(strcmp(rc.ids, "a,b") == 0);
    CU_ASSERT(rec_wait(&ra, "a,b", 2000) >= 0);

    /* stop: a revokes its lease, the others see it leave at once */
    long long t0 = hy_test_now_ms();
    hy_membership_stop(a);
    long long tb = rec_wait(&rb, "b", 2000) >= 0 ? hy_test_now_ms() - t0 : -1;
    long long tc = rec_wait(&rc, "b", 2000) >= 0 ? hy_test_now_ms() - t0 : -1;
    printf("\n    stopped member gone after %lld ms (member), %lld ms (watcher) ", tb, tc);
    CU_ASSERT(tb >= 0 && tb < 500 && tc >= 0 && tc < 500);

    /* abandon (a crash): gone when the lease expires, not before */
    rec_init(&ra);
    a = member("a", 1, &ra);
    CU_ASSERT(rec_wait(&rb, "a,b", 2000) >= 0 && rec_wait(&rc, "a,b", 2000) >= 0);
    hy_test_sleep_ms(700); /* at least one renewal went out */
    t0 = hy_test_now_ms();
    hy_membership_abandon(a);
    tb = rec_wait(&rb, "b", 5000);
    tc = rec_wait(&rc, "b", 5000);
    long long total = hy_test_now_ms() - t0;
    printf("\n    abandoned member (TTL 1 s) gone after %lld ms ", total);
    CU_ASSERT(tb >= 300 && total < 1000 + 2000); /* not revoked, yet gone within TTL + 2 s */
    CU_ASSERT(tc >= 0);
    CU_ASSERT(!ra.bad_address && !rb.bad_address && !rc.bad_address);
    hy_membership_stop(b);
    CU_ASSERT(rec_wait(&rc, "", 1000) >= 0);
    hy_membership_stop(c);
}

static void test_membership_lease_lost(void)
{
    rec ra, rb;
    rec_init(&ra), rec_init(&rb);
    hy_membership *a = member("a", 1, &ra);
    hy_membership *b = member("b", 1, &rb);
    hy_etcd *e = open_client();
    hy_etcd_kv *kvs;
    size_t n;
    hy_err err = {0};
    CU_ASSERT_FATAL(hy_etcd_range_prefix(e, PREFIX "a", &kvs, &n, NULL, &err) == 0);
    CU_ASSERT_FATAL(n == 1 && kvs[0].lease != 0);
    /* the lease vanishes under a (as when etcd lost it): a joins again */
    rec_mark(&rb);
    CU_ASSERT(hy_etcd_lease_revoke(e, kvs[0].lease, &err) == 0);
    hy_etcd_kvs_free(kvs, n);
    long long back = -1, t0 = hy_test_now_ms();
    while (back < 0 && hy_test_now_ms() - t0 < 3000) {
        if (rec_saw(&rb, "b") && rec_wait(&rb, "a,b", 0) >= 0) back = hy_test_now_ms() - t0;
        hy_test_sleep_ms(5);
    }
    printf("\n    member back %lld ms after losing its lease ", back);
    CU_ASSERT(back >= 0);
    CU_ASSERT(rec_wait(&ra, "a,b", 1000) >= 0);

    /* a's key deleted while its lease lives on (no renewal would notice):
     * a puts it back when its watch shows the DELETE */
    rec_mark(&rb);
    CU_ASSERT(hy_etcd_delete(e, PREFIX "a", &err) == 0);
    back = -1, t0 = hy_test_now_ms();
    while (back < 0 && hy_test_now_ms() - t0 < 2000) {
        if (rec_saw(&rb, "b") && rec_wait(&rb, "a,b", 0) >= 0) back = hy_test_now_ms() - t0;
        hy_test_sleep_ms(5);
    }
    printf("\n    member back %lld ms after its key was deleted ", back);
    CU_ASSERT(back >= 0);

    /* a value without an address is left out; the set goes on */
    CU_ASSERT(hy_etcd_put(e, PREFIX "bad", "{\"id\":\"bad\"}", 12, 0, &err) == 0);
    CU_ASSERT(hy_etcd_put(e, PREFIX "c", "{\"address\":\"addr-c\"}", 20, 0, &err) == 0);
    CU_ASSERT(rec_wait(&rb, "a,b,c", 2000) >= 0);
    CU_ASSERT(hy_etcd_delete(e, PREFIX "bad", &err) == 0);
    CU_ASSERT(hy_etcd_delete(e, PREFIX "c", &err) == 0);
    CU_ASSERT(rec_wait(&rb, "a,b", 2000) >= 0);
    CU_ASSERT(!ra.bad_address && !rb.bad_address);
    hy_membership_stop(a);
    hy_membership_stop(b);
    hy_etcd_close(e);
}

static void test_membership_etcd_restart(void)
{
    rec ra, rw;
    rec_init(&ra), rec_init(&rw);
    hy_membership *a = member("a", 2, &ra);
    hy_membership *w = member(NULL, 0, &rw);
    CU_ASSERT(strcmp(rw.ids, "a") == 0);
    pthread_mutex_lock(&rw.mu);
    int calls = rw.calls;
    pthread_mutex_unlock(&rw.mu);
    CU_ASSERT_FATAL(hy_test_etcd_restart(&g_etcd, 300) == 0);
    /* the watch broke: the watcher reads the set again (one more call, the
     * same set: the lease survived the restart), within 5 s of etcd
     * answering again (its retries back off to 1.6 s, gRPC's dial to 2 s) */
    long long t0 = hy_test_now_ms();
    bool reread = false;
    while (!reread && hy_test_now_ms() - t0 < 5000) {
        hy_test_sleep_ms(10);
        pthread_mutex_lock(&rw.mu);
        reread = rw.calls > calls && strcmp(rw.ids, "a") == 0;
        pthread_mutex_unlock(&rw.mu);
    }
    printf("\n    after an etcd restart the watcher read the set again in %lld ms ",
           hy_test_now_ms() - t0);
    CU_ASSERT(reread);
    /* a renewed its lease in time: nobody saw it leave */
    pthread_mutex_lock(&rw.mu);
    CU_ASSERT(strstr(rw.hist, ";;") == NULL && rw.hist[0] != ';');
    pthread_mutex_unlock(&rw.mu);
    /* and watches again: a new member is seen */
    rec rd;
    rec_init(&rd);
    hy_membership *d = member("d", 2, &rd);
    long long t = rec_wait(&rw, "a,d", 8000);
    printf("\n    after an etcd restart the watcher saw a new member in %lld ms ", t);
    CU_ASSERT(t >= 0);
    CU_ASSERT(rec_wait(&ra, "a,d", 8000) >= 0);
    hy_membership_stop(d);
    CU_ASSERT(rec_wait(&rw, "a", 2000) >= 0);
    hy_membership_stop(a);
    CU_ASSERT(rec_wait(&rw, "", 2000) >= 0);
    hy_membership_stop(w);
}

static void test_bad_endpoint(void)
{
    const char *bad[] = {"127.0.0.1:1"};
    hy_etcd *e = NULL;
    hy_err err = {0};
    CU_ASSERT_FATAL(hy_etcd_open(bad, 1, 1000, &e, &err) == 0);
    int rc = hy_etcd_put(e, "/t/x", "v", 1, 0, &err);
    printf("\n    %s ", err.msg);
    CU_ASSERT(rc == HY_EIO);
    CU_ASSERT(strstr(err.msg, "127.0.0.1:1") != NULL && strstr(err.msg, "Put") != NULL);
    hy_etcd_close(e);

    /* the bad one first, then the real one: the call goes through */
    const char *both[] = {"127.0.0.1:1", g_etcd.endpoint};
    CU_ASSERT_FATAL(hy_etcd_open(both, 2, 1000, &e, &err) == 0);
    CU_ASSERT(hy_etcd_put(e, "/t/failover", "v", 1, 0, &err) == 0);
    CU_ASSERT(key_exists(e, "/t/failover"));
    hy_etcd_close(e);

    hy_membership_config c = {.endpoints = bad,
                              .nendpoints = 1,
                              .prefix = PREFIX,
                              .ttl_s = 1,
                              .self_id = "z",
                              .self_info = "{\"address\":\"addr-z\"}",
                              .timeout_ms = 1000,
                              .on_change = on_members};
    hy_membership *m = NULL;
    err = (hy_err){0};
    CU_ASSERT(hy_membership_start(&c, &m, &err) == HY_EIO && m == NULL);
    CU_ASSERT(strstr(err.msg, "127.0.0.1:1") != NULL);
    /* a config the membership refuses before any call */
    c.self_info = "{\"id\":\"z\"}";
    CU_ASSERT(hy_membership_start(&c, &m, &err) == HY_EINVAL);
    CU_ASSERT(strstr(err.msg, "address") != NULL);
    c.self_info = "not json";
    CU_ASSERT(hy_membership_start(&c, &m, &err) == HY_EINVAL);
}

/* --- etcd over TLS, as a user of its own ------------------------------------- */

#define TLS_DIR HY_FIXTURES_DIR "/tls"

static char *read_pem(const char *name)
{
    char path[300], *pem = NULL;
    size_t n;
    snprintf(path, sizeof path, "%s/%s", TLS_DIR, name);
    CU_ASSERT_FATAL(hy_read_file(path, 1 << 20, &pem, &n, NULL) == 0);
    return pem;
}

static int open_as(const hy_test_etcd *t, const char *ca_pem, const char *user, const char *pw,
                   hy_etcd **out, hy_err *err)
{
    const char *ep[] = {t->endpoint};
    hy_etcd_options o = {.endpoints = ep,
                         .n = 1,
                         .timeout_ms = 2000,
                         .tls_ca_pem = ca_pem,
                         .user = user,
                         .password = pw};
    return hy_etcd_open_ex(&o, out, err);
}

/* An etcd serving TLS with auth on: the user may read and write /hypic/
 * only. Keys, leases, a watch and the membership work as that user over
 * TLS; a wrong password, no user, a key outside the prefix and a plaintext
 * client are refused with etcd's reason; once etcd has dropped the client's
 * token, the next call asks for a new one by itself. */
static void test_tls_and_user(void)
{
    hy_test_etcd t;
    CU_ASSERT_FATAL(hy_test_etcd_start_tls(&t, TLS_DIR "/server.pem", TLS_DIR "/server.key",
                                           TLS_DIR "/ca.pem") == 0);
    int arc = hy_test_etcd_auth(&t, "hypic", "hypic-password-1", "/hypic/");
    if (arc == 77) {
        printf("\n    SKIPPED: etcdctl not installed (deploy/debian-packages.txt: etcd-client) ");
        hy_test_etcd_stop(&t);
        return;
    }
    CU_ASSERT_FATAL(arc == 0);
    char *ca = read_pem("ca.pem");
    hy_etcd *e = NULL;
    hy_err err = {0};
    CU_ASSERT_FATAL(open_as(&t, ca, "hypic", "hypic-password-1", &e, &err) == 0);
    CU_ASSERT(hy_etcd_put(e, "/hypic/a", "1", 1, 0, &err) == 0);
    hy_etcd_kv *kvs = NULL;
    size_t n = 0;
    CU_ASSERT(hy_etcd_range_prefix(e, "/hypic/", &kvs, &n, NULL, &err) == 0);
    CU_ASSERT(n == 1 && kvs && !strcmp(kvs[0].key, "/hypic/a"));
    hy_etcd_kvs_free(kvs, n);
    int64_t lease = 0, ttl = 0;
    CU_ASSERT(hy_etcd_lease_grant(e, 5, &lease, &ttl, &err) == 0);
    CU_ASSERT(hy_etcd_lease_keepalive(e, lease, &ttl, &err) == 0 && ttl > 0);
    /* outside the user's prefix */
    int rc = hy_etcd_put(e, "/other", "x", 1, 0, &err);
    printf("\n    outside the prefix: %s ", err.msg);
    CU_ASSERT(rc != 0 && strstr(err.msg, "permission denied"));
    /* auth turned off and on again: every token etcd issued is gone (as
     * after its TTL), and the client asks for a new one by itself */
    CU_ASSERT_FATAL(hy_test_etcdctl(&t, "auth disable") == 0);
    CU_ASSERT_FATAL(hy_test_etcdctl(&t, "auth enable") == 0);
    memset(&err, 0, sizeof err);
    rc = hy_etcd_put(e, "/hypic/b", "2", 1, 0, &err);
    if (rc) printf("\n    with its token dropped: %s ", err.msg);
    CU_ASSERT(rc == 0);
    /* the membership as that user, over TLS */
    rec r;
    rec_init(&r);
    const char *ep[] = {t.endpoint};
    hy_membership_config mc = {.endpoints = ep,
                               .nendpoints = 1,
                               .prefix = "/hypic/members/",
                               .ttl_s = 2,
                               .self_id = "m1",
                               .self_info = "{\"id\":\"m1\",\"address\":\"addr-m1\"}",
                               .on_change = on_members,
                               .ctx = &r,
                               .tls_ca_pem = ca,
                               .user = "hypic",
                               .password = "hypic-password-1"};
    hy_membership *m = NULL;
    rc = hy_membership_start(&mc, &m, &err);
    if (rc) printf("\n    membership: %s ", err.msg);
    CU_ASSERT_FATAL(rc == 0);
    CU_ASSERT(strcmp(r.ids, "m1") == 0);
    hy_membership_stop(m);
    hy_etcd_close(e);
    /* refused: a wrong password, no user, plaintext */
    e = NULL;
    CU_ASSERT(open_as(&t, ca, "hypic", "wrong-password", &e, &err) == 0);
    rc = hy_etcd_put(e, "/hypic/c", "3", 1, 0, &err);
    printf("\n    a wrong password: %s ", err.msg);
    CU_ASSERT(rc == HY_EINVAL && strstr(err.msg, "user 'hypic'") &&
              strstr(err.msg, "authentication failed"));
    hy_etcd_close(e);
    CU_ASSERT(open_as(&t, ca, NULL, NULL, &e, &err) == 0);
    rc = hy_etcd_put(e, "/hypic/c", "3", 1, 0, &err);
    printf("\n    no user: %s ", err.msg);
    CU_ASSERT(rc != 0 && strstr(err.msg, "user name is empty"));
    hy_etcd_close(e);
    CU_ASSERT(open_as(&t, NULL, "hypic", "hypic-password-1", &e, &err) == 0);
    rc = hy_etcd_put(e, "/hypic/c", "3", 1, 0, &err);
    printf("\n    plaintext to TLS: %s ", err.msg);
    CU_ASSERT(rc == HY_EIO);
    hy_etcd_close(e);
    /* a certificate without its key */
    const char *one[] = {t.endpoint};
    hy_etcd_options bad = {.endpoints = one, .n = 1, .timeout_ms = 1000, .tls_ca_pem = ca,
                           .tls_cert_pem = ca};
    CU_ASSERT(hy_etcd_open_ex(&bad, &e, &err) == HY_EINVAL);
    hy_free(ca);
    hy_test_etcd_stop(&t);
}

int main(void)
{
    if (hy_test_etcd_start(&g_etcd) != 0) {
        fprintf(stderr, "test_etcd: could not start etcd\n");
        return 1;
    }
    hy_log_set_level(HY_LOG_ERROR); /* the expected warnings (broken watches) stay quiet */
    static const hy_test_case cases[] = {
        {"put, range of a prefix, delete", test_kv},
        {"a lease not kept alive expires with its key", test_lease_expires},
        {"a lease kept alive survives 3 x TTL; revoke is at once", test_lease_kept_alive},
        {"a half-closed watch delivers PUT, PUT, DELETE in order", test_watch_order},
        {"membership: stop leaves at once, abandon after the TTL",
         test_membership_stop_and_abandon},
        {"membership: a lost lease or key comes back; bad values skipped",
         test_membership_lease_lost},
        {"membership: watchers follow again after etcd restarts", test_membership_etcd_restart},
        {"a bad endpoint is named; the next one is used", test_bad_endpoint},
        {"TLS and a user of etcd's own", test_tls_and_user},
        {NULL, NULL},
    };
    int rc = hy_test_main("etcd", cases);
    hy_test_etcd_stop(&g_etcd);
    return rc;
}
