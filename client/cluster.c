/*
 * libhypic-client in cluster mode (hypic_client.h, hyc_cluster_*): the set
 * of members — a static list, or etcd's followed by a watch (hy_membership,
 * watch only) — and the owners of each key by the members' own rule
 * (hy_cluster.h), so that calls about a key go straight to its owners.
 *
 * A member's connection is opened when it first appears and kept until
 * close (a member that leaves and comes back at the same address reuses
 * it), so a connection handed out stays valid while the set changes.
 */
#include "hypic_client.h"

#include "client_internal.h"
#include "hy_cluster.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CL_MAX 256 /* members at once */

typedef struct cl_conn {
    char id[HY_MEMBER_ID_MAX], addr[256];
    hyc *c;
    struct cl_conn *next;
} cl_conn;

struct hyc_cluster {
    hyc_options o;
    char *token, *ca, *server_name; /* o's strings, copied */
    uint32_t replicas;
    pthread_mutex_t mu;
    cl_conn *conns;        /* every connection opened, under mu */
    cl_conn *live[CL_MAX]; /* the set, sorted by id, under mu */
    size_t n;
    unsigned next; /* round-robin */
    hy_membership *ms;
};

/* The set becomes ids[i] at addrs[i]. */
static void set_members(hyc_cluster *c, const char *const *ids, const char *const *addrs, size_t n)
{
    pthread_mutex_lock(&c->mu);
    c->n = 0;
    for (size_t i = 0; i < n && c->n < CL_MAX; i++) {
        cl_conn *k = c->conns;
        while (k && (strcmp(k->id, ids[i]) || strcmp(k->addr, addrs[i]))) k = k->next;
        if (!k && (k = calloc(1, sizeof *k))) {
            snprintf(k->id, sizeof k->id, "%s", ids[i]);
            snprintf(k->addr, sizeof k->addr, "%s", addrs[i]);
            hyc_options o = c->o;
            o.target = k->addr;
            hyc_status st;
            if (hyc_open(&o, &k->c, &st)) { /* options the first member took: out of memory */
                free(k);
                continue;
            }
            k->next = c->conns;
            c->conns = k;
        }
        if (k) c->live[c->n++] = k;
    }
    /* by id: the order members and owners are named in */
    for (size_t i = 1; i < c->n; i++)
        for (size_t j = i; j > 0 && strcmp(c->live[j - 1]->id, c->live[j]->id) > 0; j--) {
            cl_conn *t = c->live[j];
            c->live[j] = c->live[j - 1];
            c->live[j - 1] = t;
        }
    pthread_mutex_unlock(&c->mu);
}

static void on_members(void *ctx, const hy_member *m, size_t n)
{
    const char *ids[CL_MAX], *addrs[CL_MAX];
    size_t k = 0;
    for (size_t i = 0; i < n && k < CL_MAX; i++, k++) ids[k] = m[i].id, addrs[k] = m[i].address;
    set_members(ctx, ids, addrs, k);
}

static char *dup_or_null(const char *s, bool *oom)
{
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = true;
    return d;
}

/* The PEM texts of the etcd TLS files that are set (pem[0] the CA, [1] the
 * certificate, [2] the key); non-zero with st set, naming the file, when
 * one cannot be read or the set makes no sense. */
static int etcd_pems(const hyc_cluster_options *o, char *pem[3], hyc_status *st)
{
    if (!o->etcd_tls_cert_file != !o->etcd_tls_key_file)
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: etcd_tls_cert_file and etcd_tls_key_file go together");
    if ((o->etcd_tls_cert_file || o->etcd_tls_server_name) && !o->etcd_tls_ca_file)
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: etcd's TLS certificate or server name needs etcd_tls_ca_file");
    if (o->etcd_password && !o->etcd_user)
        return status_set(st, HYC_INVALID_ARGUMENT, "client: etcd_password without etcd_user");
    return read_tls("etcd ", o->etcd_tls_ca_file, o->etcd_tls_cert_file, o->etcd_tls_key_file, pem,
                    st);
}

int hyc_cluster_open(const hyc_cluster_options *o, hyc_cluster **out, hyc_status *st)
{
    *out = NULL;
    if (!o || (!(o->members && o->members[0]) && !(o->etcd && o->etcd[0])))
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: a cluster needs its members (id=host:port,...) or etcd's "
                          "endpoints");
    hyc_cluster *c = calloc(1, sizeof *c);
    if (!c) return status_set(st, HYC_INTERNAL, "client: out of memory");
    bool oom = false;
    c->o = o->client;
    c->o.token = c->token = dup_or_null(o->client.token, &oom);
    c->o.tls_ca_file = c->ca = dup_or_null(o->client.tls_ca_file, &oom);
    c->o.tls_server_name = c->server_name = dup_or_null(o->client.tls_server_name, &oom);
    c->replicas = o->replicas ? o->replicas : 1;
    pthread_mutex_init(&c->mu, NULL);
    if (oom) {
        hyc_cluster_close(c);
        return status_set(st, HYC_INTERNAL, "client: out of memory");
    }
    if (o->members && o->members[0]) {
        char *list = strdup(o->members);
        const char *ids[CL_MAX], *addrs[CL_MAX];
        size_t n = 0;
        int rc = list ? HYC_OK : status_set(st, HYC_INTERNAL, "client: out of memory");
        for (char *save = NULL, *t = list ? strtok_r(list, ",", &save) : NULL; t && !rc;
             t = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(t, '=');
            if (!eq || eq == t || !eq[1] || eq - t >= HY_MEMBER_ID_MAX || n == CL_MAX)
                rc = status_set(st, HYC_INVALID_ARGUMENT,
                                "client: members: '%.100s' is not id=host:port (item %zu)", t,
                                n + 1);
            else
                *eq = '\0', ids[n] = t, addrs[n++] = eq + 1;
        }
        if (!rc) set_members(c, ids, addrs, n);
        free(list);
        if (rc) {
            hyc_cluster_close(c);
            return rc;
        }
    } else {
        char *pem[3] = {NULL, NULL, NULL};
        if (etcd_pems(o, pem, st)) {
            hyc_cluster_close(c);
            return st->code;
        }
        char *list = strdup(o->etcd);
        const char *eps[32];
        size_t n = 0;
        for (char *save = NULL, *t = list ? strtok_r(list, ",", &save) : NULL; t && n < 32;
             t = strtok_r(NULL, ",", &save))
            eps[n++] = t;
        hy_membership_config mc = {.endpoints = eps,
                                   .nendpoints = n,
                                   .prefix = o->prefix ? o->prefix : "/hypic/members/",
                                   .on_change = on_members,
                                   .ctx = c,
                                   .tls_ca_pem = pem[0],
                                   .tls_cert_pem = pem[1],
                                   .tls_key_pem = pem[2],
                                   .tls_server_name = o->etcd_tls_server_name,
                                   .user = o->etcd_user,
                                   .password = o->etcd_password};
        hy_err e = {0};
        int rc = list ? hy_membership_start(&mc, &c->ms, &e) : HY_ENOMEM;
        free(list);
        for (int i = 0; i < 3; i++) hy_free(pem[i]);
        if (rc) {
            hyc_cluster_close(c);
            return status_set(st,
                              rc == HY_ENOMEM   ? HYC_INTERNAL
                              : rc == HY_EINVAL ? HYC_INVALID_ARGUMENT
                                                : HYC_UNAVAILABLE,
                              "client: etcd (%s): %s", o->etcd, e.msg);
        }
    }
    *out = c;
    return status_ok(st);
}

void hyc_cluster_close(hyc_cluster *c)
{
    if (!c) return;
    hy_membership_stop(c->ms); /* watch only: nothing to revoke */
    while (c->conns) {
        cl_conn *k = c->conns;
        c->conns = k->next;
        hyc_close(k->c);
        free(k);
    }
    pthread_mutex_destroy(&c->mu);
    free(c->token);
    free(c->ca);
    free(c->server_name);
    free(c);
}

size_t hyc_cluster_members(hyc_cluster *c, char (*ids)[64], char (*addrs)[256], size_t cap)
{
    pthread_mutex_lock(&c->mu);
    const size_t n = c->n;
    for (size_t i = 0; i < n && i < cap; i++) {
        if (ids) snprintf(ids[i], 64, "%s", c->live[i]->id);
        if (addrs) snprintf(addrs[i], 256, "%s", c->live[i]->addr);
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* key's owners' connections, best first (under no lock: connections live
 * until close). */
static size_t owners_of(hyc_cluster *c, const uint8_t key[32], cl_conn **out)
{
    const char *ids[CL_MAX];
    size_t idx[HY_OWNERS_MAX];
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++) ids[i] = c->live[i]->id;
    const size_t n = hy_rendezvous_owners(key, ids, c->n, c->replicas, idx);
    for (size_t i = 0; i < n; i++) out[i] = c->live[idx[i]];
    pthread_mutex_unlock(&c->mu);
    return n;
}

size_t hyc_cluster_owners(hyc_cluster *c, const uint8_t key[32], char (*ids)[64], size_t cap)
{
    cl_conn *own[HY_OWNERS_MAX];
    const size_t n = owners_of(c, key, own);
    for (size_t i = 0; i < n && i < cap; i++) snprintf(ids[i], 64, "%s", own[i]->id);
    return n;
}

hyc *hyc_cluster_member(hyc_cluster *c, const char *id)
{
    hyc *h = NULL;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n && !h; i++)
        if (!strcmp(c->live[i]->id, id)) h = c->live[i]->c;
    pthread_mutex_unlock(&c->mu);
    return h;
}

static bool is_key(ProtobufCBinaryData k)
{
    return k.len == 32;
}

int hyc_cluster_get_entry(hyc_cluster *c, const Hypic__V1__GetEntryRequest *rq,
                          Hypic__V1__EntryMeta **meta, void **bytes, size_t *n, hyc_status *st)
{
    *meta = NULL;
    *bytes = NULL;
    *n = 0;
    if (!rq || !is_key(rq->key))
        return status_set(st, HYC_INVALID_ARGUMENT, "client: GetEntry needs a 32-byte key");
    cl_conn *own[HY_OWNERS_MAX];
    const size_t no = owners_of(c, rq->key.data, own);
    char tried[400] = "";
    size_t at = 0;
    for (size_t i = 0; i < no; i++) {
        if (!hyc_get_entry(own[i]->c, rq, meta, bytes, n, st)) return HYC_OK;
        if (at < sizeof tried)
            at += (size_t)snprintf(tried + at, sizeof tried - at, "%s%s: %s", at ? "; " : "",
                                   own[i]->id, hyc_code_name(st->code));
    }
    return status_set(st, HYC_NOT_FOUND, "key is not cached on its owners (%s)",
                      no ? tried : "no member is live");
}

int hyc_cluster_put_entry(hyc_cluster *c, const Hypic__V1__EntryMeta *meta, const void *bytes,
                          size_t n, Hypic__V1__PutEntryResponse **out, hyc_status *st)
{
    *out = NULL;
    if (!meta || !is_key(meta->key))
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: PutEntry in a cluster needs meta.key (its owners come from it)");
    cl_conn *own[HY_OWNERS_MAX];
    const size_t no = owners_of(c, meta->key.data, own);
    char tried[400] = "";
    size_t at = 0;
    for (size_t i = 0; i < no; i++) {
        if (!hyc_put_entry(own[i]->c, meta, bytes, n, 0, out, st)) return HYC_OK;
        if (st->code != HYC_UNAVAILABLE && st->code != HYC_DEADLINE_EXCEEDED)
            return st->code; /* the entry itself was refused: another owner would too */
        if (at < sizeof tried)
            at += (size_t)snprintf(tried + at, sizeof tried - at, "%s%s: %s", at ? "; " : "",
                                   own[i]->id, st->msg);
    }
    return status_set(st, HYC_UNAVAILABLE, "no owner took the entry (%s)",
                      no ? tried : "no member is live");
}

/* The next member in turn (NULL when none is live). */
static cl_conn *next_member(hyc_cluster *c)
{
    pthread_mutex_lock(&c->mu);
    cl_conn *k = c->n ? c->live[c->next++ % c->n] : NULL;
    pthread_mutex_unlock(&c->mu);
    return k;
}

int hyc_cluster_prefill(hyc_cluster *c, const Hypic__V1__PrefillRequest *rq,
                        Hypic__V1__PrefillResponse **out, hyc_status *st)
{
    *out = NULL;
    size_t tries = hyc_cluster_members(c, NULL, NULL, 0);
    if (!tries) return status_set(st, HYC_UNAVAILABLE, "client: no member is live");
    int rc = HYC_UNAVAILABLE;
    for (size_t i = 0; i < tries; i++) {
        cl_conn *k = next_member(c);
        if (!k) break;
        rc = hyc_prefill(k->c, rq, out, st);
        if (rc != HYC_UNAVAILABLE) return rc;
    }
    return rc;
}

int hyc_cluster_lookup(hyc_cluster *c, const Hypic__V1__LookupRequest *rq,
                       Hypic__V1__LookupResponse **out, hyc_status *st)
{
    *out = NULL;
    if (!rq) return status_set(st, HYC_INVALID_ARGUMENT, "client: no request");
    const size_t n = rq->n_segments;
    cl_conn **first = calloc(n ? n : 1, sizeof *first); /* where each segment is asked */
    Hypic__V1__SegmentStatus **res = calloc(n ? n : 1, sizeof *res);
    Hypic__V1__Segment **sub = calloc(n ? n : 1, sizeof *sub);
    size_t *idx = calloc(n ? n : 1, sizeof *idx);
    Hypic__V1__LookupResponse **got = calloc(n ? n : 1, sizeof *got);
    size_t ngot = 0;
    int rc = HYC_OK;
    if (!first || !res || !sub || !idx || !got) {
        rc = status_set(st, HYC_INTERNAL, "client: out of memory");
        goto out;
    }
    cl_conn *any = next_member(c);
    if (!any) {
        rc = status_set(st, HYC_UNAVAILABLE, "client: no member is live");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const Hypic__V1__Segment *g = rq->segments[i];
        cl_conn *own[HY_OWNERS_MAX];
        first[i] = g->ref_case == HYPIC__V1__SEGMENT__REF_KEY && is_key(g->key) &&
                           owners_of(c, g->key.data, own)
                       ? own[0]
                       : any;
    }
    for (size_t i = 0; i < n; i++) { /* one call per member, its segments together */
        if (!first[i]) continue;
        cl_conn *k = first[i];
        size_t m = 0;
        for (size_t j = i; j < n; j++)
            if (first[j] == k) idx[m] = j, sub[m++] = rq->segments[j], first[j] = NULL;
        Hypic__V1__LookupRequest q = *rq;
        q.n_segments = m;
        q.segments = sub;
        Hypic__V1__LookupResponse *r = NULL;
        hyc_status s2;
        if (hyc_lookup(k->c, &q, &r, &s2)) {
            if (s2.code != HYC_UNAVAILABLE && s2.code != HYC_DEADLINE_EXCEEDED) {
                *st = s2; /* the request itself is wrong */
                rc = s2.code;
                goto out;
            }
            continue; /* a member gone: its segments are misses */
        }
        got[ngot++] = r;
        for (size_t j = 0; j < m && j < r->n_segments; j++) res[idx[j]] = r->segments[j];
    }
    /* merged in request order; packed and decoded again, so that hyc_free frees it */
    Hypic__V1__SegmentStatus *miss = calloc(n ? n : 1, sizeof *miss);
    if (!miss) {
        rc = status_set(st, HYC_INTERNAL, "client: out of memory");
        goto out;
    }
    Hypic__V1__LookupResponse m = HYPIC__V1__LOOKUP_RESPONSE__INIT;
    bool leading = true;
    for (size_t i = 0; i < n; i++) {
        if (!res[i]) {
            Hypic__V1__SegmentStatus init = HYPIC__V1__SEGMENT_STATUS__INIT;
            miss[i] = init;
            const Hypic__V1__Segment *g = rq->segments[i];
            if (g->ref_case == HYPIC__V1__SEGMENT__REF_KEY) miss[i].key = g->key;
            res[i] = &miss[i];
        }
        leading &= res[i]->hit;
        if (leading) m.leading_hits++, m.leading_tokens += res[i]->tokens;
    }
    m.n_segments = n;
    m.segments = res;
    const size_t len = protobuf_c_message_get_packed_size(&m.base);
    uint8_t *buf = malloc(len ? len : 1);
    if (buf) {
        protobuf_c_message_pack(&m.base, buf);
        *out = hypic__v1__lookup_response__unpack(NULL, len, buf);
    }
    free(buf);
    free(miss);
    rc = *out ? status_ok(st) : status_set(st, HYC_INTERNAL, "client: out of memory");
out:
    for (size_t i = 0; i < ngot; i++) hyc_free(got[i]);
    free(first);
    free(res);
    free(sub);
    free(idx);
    free(got);
    return rc;
}
