/*
 * hypic-cached's state and the gates every call goes through
 * (service_internal.h): models and executor contexts, the store, tenants,
 * leases, the Watch hub and the metrics.
 */
#include "cluster_internal.h"
#include "router_internal.h"
#include "service_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- locks --------------------------------------------------------------------- */

/* The service's locks this thread holds (service_internal.h: one at most). */
static _Thread_local int t_locks_held;

void svc_lock(pthread_mutex_t *mu)
{
    assert(t_locks_held == 0 && "two of the service's locks at once");
    pthread_mutex_lock(mu);
    t_locks_held++;
}

void svc_unlock(pthread_mutex_t *mu)
{
    assert(t_locks_held == 1);
    t_locks_held--;
    pthread_mutex_unlock(mu);
}

/* --- tenants ------------------------------------------------------------------- */

static int tenants_from(const hy_cached_config *cfg, svc_tenant **out, int *n, bool *open,
                        hy_err *err)
{
    const int nt = cfg->ntenants ? cfg->ntenants : 1;
    svc_tenant *t = calloc((size_t)nt, sizeof *t);
    if (!t) return hy_err_set(err, HY_ENOMEM, "out of memory");
    *open = cfg->ntenants == 0;
    if (*open) {
        snprintf(t[0].name, sizeof t[0].name, "default");
        t[0].admin = true;
        t[0].max_in_flight = cfg->in_flight_per_tenant;
    }
    for (int i = 0; i < cfg->ntenants; i++) {
        const hy_cfg_tenant *c = &cfg->tenants[i];
        snprintf(t[i].name, sizeof t[i].name, "%s", c->name);
        snprintf(t[i].token, sizeof t[i].token, "%s", c->token);
        t[i].admin = c->admin;
        t[i].max_in_flight = c->max_in_flight ? c->max_in_flight : cfg->in_flight_per_tenant;
    }
    /* One tenant never holds every worker: its calls in flight stay below
     * limits.workers, so another tenant's call still finds one. */
    for (int i = 0; i < nt; i++)
        if (t[i].max_in_flight >= cfg->workers) t[i].max_in_flight = cfg->workers - 1;
    *out = t;
    *n = nt;
    return HY_OK;
}

static int apply_quotas(hy_svc *s, const hy_cached_config *cfg, hy_err *err)
{
    for (int i = 0; i < cfg->ntenants; i++) {
        const hy_cfg_tenant *c = &cfg->tenants[i];
        const uint64_t q = c->quota_bytes ? c->quota_bytes : cfg->default_quota;
        int rc = hy_store_set_quota(s->store, c->name, q, err);
        if (rc) return rc;
    }
    if (!cfg->ntenants) return hy_store_set_quota(s->store, "default", cfg->default_quota, err);
    return HY_OK;
}

static svc_tenant *tenant_named(hy_svc *s, const char *name)
{
    for (int i = 0; i < s->ntenants; i++)
        if (strcmp(s->tenants[i].name, name) == 0) return &s->tenants[i];
    return NULL;
}

/* Constant-time comparison of the n bytes at a with the configured token b:
 * how many bytes differ is not timed. */
static bool token_eq(const uint8_t *a, size_t na, const char *b)
{
    const size_t nb = strlen(b);
    unsigned char d = (unsigned char)(na != nb);
    for (size_t i = 0; i < HY_CFG_TOKEN_MAX; i++) {
        const unsigned char x = i < na ? a[i] : 0;
        const unsigned char y = i < nb ? (unsigned char)b[i] : 0;
        d |= x ^ y;
    }
    return d == 0;
}

/* The member credential for tenant: "member:<tenant>:<hex>", where hex is
 * HMAC-SHA-256 under cluster.secret of a fixed label and the tenant. A
 * member or scatter worker sends it as its bearer token for calls it makes
 * on a tenant's behalf; it is no tenant's token (a tenant's never leaves the
 * member it was sent to), it names its tenant, and it can only be made by
 * whoever holds the secret. ':' is in no tenant name. */
static void member_mac(const char *secret, const char *tenant, char hex[65])
{
    char msg[HY_TENANT_MAX + 32];
    const int n = snprintf(msg, sizeof msg, "hypic member v1:%s", tenant);
    uint8_t mac[32];
    hy_hmac_sha256(secret, strlen(secret), msg, (size_t)n, mac);
    hy_hex(mac, 32, hex);
}

const char *svc_member_token(const hy_svc *s, const char *tenant, char *buf, size_t cap)
{
    if (s->open_access) return NULL; /* no tokens: nothing to present */
    char hex[65];
    member_mac(s->cfg.cluster_secret, tenant, hex);
    snprintf(buf, cap, "member:%s:%s", tenant, hex);
    return buf;
}

/* Whether token[0..n) is a member credential; *tenant (HY_TENANT_MAX) then
 * names its tenant. Compared in constant time once the form is known. */
static bool member_token(const hy_svc *s, const uint8_t *t, size_t n, char *tenant)
{
    if (!s->cfg.cluster_secret[0] || n < 7 + 1 + 1 + 64 || memcmp(t, "member:", 7) != 0)
        return false;
    const size_t tn = n - 7 - 1 - 64;
    if (tn == 0 || tn >= HY_TENANT_MAX || t[7 + tn] != ':') return false;
    memcpy(tenant, t + 7, tn);
    tenant[tn] = '\0';
    char want[65];
    member_mac(s->cfg.cluster_secret, tenant, want);
    unsigned char d = 0;
    for (size_t i = 0; i < 64; i++) d |= (unsigned char)(want[i] ^ t[7 + tn + 1 + i]);
    return d == 0;
}

/* The token of an authorization value as it came: "Bearer " and then
 * printable ASCII only (HTTP/2 calls a NUL or another control byte in a
 * field value malformed; a token is compared over exactly these bytes).
 * NULL, with why, when the value is not of that form. */
static const uint8_t *bearer_token(const uint8_t *v, size_t n, size_t *len, const char **why)
{
    for (size_t i = 0; i < n; i++)
        if (v[i] < 0x20 || v[i] > 0x7e) {
            *why = "the authorization value holds a control or non-ASCII byte";
            return NULL;
        }
    if (n < 7 || memcmp(v, "Bearer ", 7) != 0) {
        *why = "the authorization header is not 'Bearer <token>'";
        return NULL;
    }
    /* A token longer than any configured one goes on to the comparison like
     * any other wrong token (token_eq compares the full configured length
     * whatever the length that came): its refusal tells nothing of the
     * bound. */
    *len = n - 7;
    return v + 7;
}

hy_rpc_code svc_enter(hy_svc *s, hy_rpc_call *call, svc_caller *who, char *msg, size_t cap)
{
    const void *v = NULL;
    size_t n = 0, tn = 0;
    const bool has = hy_rpc_call_metadata_raw(call, "authorization", &v, &n);
    const char *why = "no bearer token (metadata 'authorization: Bearer <token>')";
    const uint8_t *token = has ? bearer_token(v, n, &tn, &why) : NULL;
    /* with tls.client_ca, a member proves itself twice: the credential, and
     * a client certificate of the members' authority on the connection */
    const bool mtls = s->cfg.tls_client_ca[0] != '\0';
    const bool certified = mtls && hy_rpc_call_peer_certified(call);
    svc_lock(&s->mu);
    svc_tenant *t = NULL;
    char as[HY_TENANT_MAX];
    bool member = false;
    if (s->open_access) {
        t = &s->tenants[0];
    } else if (token && (member = member_token(s, token, tn, as))) {
        t = tenant_named(s, as); /* a member on this tenant's behalf */
        if (mtls && !certified) {
            svc_unlock(&s->mu);
            snprintf(msg, cap,
                     "a member credential needs mutual TLS: this connection presented no client "
                     "certificate of tls.client_ca's authority");
            return HY_RPC_UNAUTHENTICATED;
        }
    } else if (!token) {
        svc_unlock(&s->mu);
        snprintf(msg, cap, "%s", why);
        return HY_RPC_UNAUTHENTICATED;
    } else {
        for (int i = 0; i < s->ntenants; i++) /* every tenant: no early exit */
            if (token_eq(token, tn, s->tenants[i].token) && !t) t = &s->tenants[i];
    }
    if (!t) {
        svc_unlock(&s->mu);
        snprintf(msg, cap, "the bearer token is not one of this server's");
        return HY_RPC_UNAUTHENTICATED;
    }
    if (t->max_in_flight && t->in_flight >= t->max_in_flight) {
        svc_unlock(&s->mu);
        snprintf(msg, cap, "tenant '%s' has %u requests in flight, its limit", t->name,
                 t->max_in_flight);
        return HY_RPC_RESOURCE_EXHAUSTED;
    }
    t->in_flight++;
    snprintf(who->tenant, sizeof who->tenant, "%s", t->name);
    who->admin = t->admin && !member; /* a member acts for a tenant, never as an admin */
    who->member = member || s->open_access;
    svc_unlock(&s->mu);
    return HY_RPC_OK;
}

void svc_leave(hy_svc *s, const svc_caller *who)
{
    svc_lock(&s->mu);
    svc_tenant *t = tenant_named(s, who->tenant);
    if (t && t->in_flight) t->in_flight--;
    svc_unlock(&s->mu);
}

bool svc_watch_enter(hy_svc *s, const svc_caller *who)
{
    svc_lock(&s->mu);
    svc_tenant *t = tenant_named(s, who->tenant);
    const bool ok = t && t->watchers < s->cfg.watchers_per_tenant;
    if (ok) t->watchers++;
    svc_unlock(&s->mu);
    return ok;
}

void svc_watch_leave(hy_svc *s, const svc_caller *who)
{
    svc_lock(&s->mu);
    svc_tenant *t = tenant_named(s, who->tenant);
    if (t && t->watchers) t->watchers--;
    svc_unlock(&s->mu);
}

int svc_peer_open(hy_svc *s, const char *address, hy_rpc_client **out, hy_err *err)
{
    hy_rpc_client_options o = {.target = address,
                               .max_message = s->cfg.max_message,
                               .tls_root_pem = s->peer_ca_pem,
                               .tls_server_name = s->cfg.cluster_tls_server_name[0]
                                                      ? s->cfg.cluster_tls_server_name
                                                      : NULL,
                               .tls_cert_pem = s->peer_cert_pem,
                               .tls_key_pem = s->peer_key_pem};
    return hy_rpc_client_open_ex(&o, out, err);
}

/* --- models and executors -------------------------------------------------------- */

svc_model *svc_model_find(hy_svc *s, const char *name)
{
    for (int i = 0; i < s->nmodels; i++)
        if (strcmp(s->models[i].name, name) == 0) return &s->models[i];
    return NULL;
}

svc_model *svc_model_by_fp(hy_svc *s, const uint8_t fp[32])
{
    for (int i = 0; i < s->nmodels; i++)
        if (memcmp(s->models[i].fp, fp, 32) == 0) return &s->models[i];
    return NULL;
}

static int model_open(svc_model *sm, const hy_cfg_model *cm, const hy_cached_config *cfg,
                      hy_err *err)
{
    snprintf(sm->name, sizeof sm->name, "%s", cm->name);
    pthread_mutex_init(&sm->mu, NULL);
    hy_weights wfmt = HY_WEIGHTS_AUTO;
    hy_weights_parse(cfg->exec_weights, &wfmt); /* checked with the config */
    int rc = hy_model_open_with(&sm->m, cm->dir, wfmt, err);
    if (rc) {
        hy_err_prefix(err, "model '%s' (%s)", cm->name, cm->dir);
        return rc;
    }
    sm->c = hy_model_cfg(sm->m);
    sm->wbytes = hy_model_matrix_bytes(sm->m);
    hy_model_fingerprint(sm->m, sm->fp);
    if (cost_new(&sm->costs)) return hy_err_set(err, HY_ENOMEM, "out of memory");
    sm->ctx = calloc((size_t)cfg->exec_contexts, sizeof *sm->ctx);
    if (!sm->ctx) return hy_err_set(err, HY_ENOMEM, "out of memory");
    for (int i = 0; i < cfg->exec_contexts; i++) {
        if ((rc = hy_exec_new(sm->m, cfg->max_batch, &sm->ctx[i].ex, err)) ||
            (rc = hy_state_new(sm->m, &sm->ctx[i].st, err)))
            return rc;
        /* where it computes: the CPU, or a device (a model the device does
         * not run, or a device that is not there, stops the start) */
        hy_exec_device dkind = HY_EXEC_CPU;
        int dnum = 0;
        hy_exec_device_parse(cfg->exec_device, &dkind, &dnum); /* checked with the config */
        if (dkind != HY_EXEC_CPU && (rc = hy_exec_set_device(sm->ctx[i].ex, dkind, dnum, err))) {
            hy_err_prefix(err, "executor.device %s, model '%s'", cfg->exec_device, cm->name);
            return rc;
        }
        if (dkind != HY_EXEC_CPU && i == 0)
            hy_log(HY_LOG_INFO, "model '%s': forward passes on %s", cm->name,
                   hy_exec_device_name(sm->ctx[i].ex));
        /* how MLA layers attend (Kimi-Linear, Ling; nothing for the others) */
        hy_exec_set_mla_mode(sm->ctx[i].ex, strcmp(cfg->exec_mla, "expanded") == 0 ? HY_MLA_EXPANDED
                                            : strcmp(cfg->exec_mla, "latent") == 0 ? HY_MLA_ABSORBED
                                                                                   : HY_MLA_AUTO);
        sm->nctx++;
    }
    return HY_OK;
}

static void model_close(svc_model *sm)
{
    for (int i = 0; i < sm->nctx; i++) {
        hy_exec_free(sm->ctx[i].ex);
        hy_state_free(sm->ctx[i].st);
    }
    free(sm->ctx);
    cost_free(sm->costs);
    for (svc_prefix *p = sm->prefixes, *nx; p; p = nx) {
        nx = p->next;
        hy_prefix_cache_free(p->pc);
        pthread_mutex_destroy(&p->mu);
        free(p);
    }
    hy_model_close(sm->m);
    pthread_mutex_destroy(&sm->mu);
}

/* Contexts go to waiting requests in arrival order: a freed context is handed
 * to the head of the queue (svc_exec_give), and a new request only takes a
 * free context when nobody is waiting. */
/* The executor's check before each step of a pass (hy_exec_set_cancel): the
 * call it serves cancelled, gone or past its deadline. */
static bool call_gone(void *ctx)
{
    return hy_rpc_call_cancelled(ctx);
}

hy_rpc_code svc_exec_take(hy_svc *s, svc_model *sm, hy_rpc_call *call, svc_exec **out, char *msg,
                          size_t cap)
{
    *out = NULL;
    const int64_t left = hy_rpc_call_ms_left(call);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (left != INT64_MAX) {
        const int64_t ns = (int64_t)until.tv_nsec + (left % 1000) * 1000000;
        until.tv_sec += (time_t)(left / 1000) + (time_t)(ns / 1000000000);
        until.tv_nsec = (long)(ns % 1000000000);
    }
    hy_rpc_code code = HY_RPC_OK;
    svc_lock(&sm->mu);
    if (s->draining) {
        svc_unlock(&sm->mu);
        snprintf(msg, cap, "the server is shutting down");
        return HY_RPC_UNAVAILABLE;
    }
    if (!sm->head)
        for (int i = 0; i < sm->nctx && !*out; i++)
            if (!sm->ctx[i].busy) *out = &sm->ctx[i];
    if (*out) {
        (*out)->busy = true;
        svc_unlock(&sm->mu);
        hy_exec_set_cancel((*out)->ex, call_gone, call);
        return HY_RPC_OK;
    }
    if ((uint32_t)atomic_load(&s->queued) >= s->cfg.queue) {
        svc_unlock(&sm->mu);
        snprintf(msg, cap,
                 "%d requests are waiting for model '%s' (limits.queue = %u); retry later",
                 atomic_load(&s->queued), sm->name, s->cfg.queue);
        return HY_RPC_RESOURCE_EXHAUSTED;
    }
    svc_waiter w = {.granted = NULL, .next = NULL};
    pthread_cond_init(&w.cv, NULL);
    assert(!sm->head == !sm->tail); /* the queue is empty at both ends or at neither */
    if (sm->tail)
        sm->tail->next = &w;
    else
        sm->head = &w;
    sm->tail = &w;
    atomic_fetch_add(&s->queued, 1);
    while (!w.granted && !s->draining) {
        int rc = left == INT64_MAX ? pthread_cond_wait(&w.cv, &sm->mu)
                                   : pthread_cond_timedwait(&w.cv, &sm->mu, &until);
        if (rc && !w.granted) {
            code = HY_RPC_DEADLINE_EXCEEDED;
            snprintf(msg, cap, "the deadline passed while waiting for an executor of model '%s'",
                     sm->name);
            break;
        }
    }
    if (!w.granted) { /* leaving the queue: the deadline, or draining */
        svc_waiter **p = &sm->head, *prev = NULL;
        while (*p != &w) prev = *p, p = &(*p)->next;
        *p = w.next;
        if (sm->tail == &w) sm->tail = prev;
        if (!code) {
            code = HY_RPC_UNAVAILABLE;
            snprintf(msg, cap, "the server is shutting down");
        }
    }
    atomic_fetch_sub(&s->queued, 1);
    assert(!w.granted || w.granted->busy); /* handed over still busy (svc_exec_give) */
    *out = w.granted;
    svc_unlock(&sm->mu);
    pthread_cond_destroy(&w.cv);
    if (*out) hy_exec_set_cancel((*out)->ex, call_gone, call);
    return *out ? HY_RPC_OK : code;
}

svc_exec *svc_exec_take_idle(svc_model *sm)
{
    svc_exec *x = NULL;
    svc_lock(&sm->mu);
    bool idle = !sm->head;
    for (int i = 0; idle && i < sm->nctx; i++) idle = !sm->ctx[i].busy;
    if (idle && sm->nctx > 0) {
        x = &sm->ctx[0];
        x->busy = true;
    }
    svc_unlock(&sm->mu);
    return x;
}

void svc_exec_give(hy_svc *s, svc_model *sm, svc_exec *x)
{
    /* a long context's K/V is not kept for the next request (its state is
     * reset before use anyway): the memory one long request took goes back */
    hy_exec_set_cancel(x->ex, NULL, NULL); /* the call it served is over */
    const int64_t keep = (int64_t)s->cfg.keep_context_tokens;
    if (hy_state_capacity(x->st) > keep) {
        hy_state_reset(x->st);
        hy_state_trim(x->st, keep);
    }
    hy_exec_trim(x->ex, keep); /* the scratch and RoPE table sized for it */
    svc_lock(&sm->mu);
    assert(x->busy && "a context given back was taken");
    svc_waiter *w = sm->head;
    if (w) { /* handed over, still busy: the head of the queue runs next */
        sm->head = w->next;
        if (!sm->head) sm->tail = NULL;
        w->granted = x;
        pthread_cond_signal(&w->cv);
    } else {
        x->busy = false;
    }
    svc_unlock(&sm->mu);
}

/* Wakes every waiter of sm (draining: they leave the queue UNAVAILABLE). */
void svc_exec_wake_all(svc_model *sm)
{
    svc_lock(&sm->mu);
    for (svc_waiter *w = sm->head; w; w = w->next) pthread_cond_signal(&w->cv);
    svc_unlock(&sm->mu);
}

int svc_prefix_get(hy_svc *s, svc_model *sm, const char *tenant, svc_prefix **out, hy_err *err)
{
    svc_lock(&sm->mu);
    svc_prefix *p = sm->prefixes;
    while (p && strcmp(p->tenant, tenant) != 0) p = p->next;
    int rc = HY_OK;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (!p) {
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
        } else if ((rc = hy_prefix_cache_new(s->cfg.prefix_cache_bytes, &p->pc, err))) {
            free(p);
            p = NULL;
        } else {
            snprintf(p->tenant, sizeof p->tenant, "%s", tenant);
            pthread_mutex_init(&p->mu, NULL);
            p->next = sm->prefixes;
            sm->prefixes = p;
        }
    }
    svc_unlock(&sm->mu);
    if (p) pthread_mutex_lock(&p->mu);
    *out = p;
    return rc;
}

void svc_prefix_put(svc_prefix *p)
{
    if (p) pthread_mutex_unlock(&p->mu);
}

/* --- storing entries -------------------------------------------------------------- */

void svc_reprs_count(svc_reprs *r, const hy_entry *e, size_t bytes)
{
    const hy_entry_repr rp = hy_entry_repr_of(e);
    hy_entry_census k;
    hy_entry_census_of(e, &k);
    pthread_mutex_lock(&r->mu);
    int i = 0;
    while (i < r->n && !hy_entry_repr_eq(r->row[i].repr, rp)) i++;
    if (i == r->n) {
        if (r->n < SVC_REPRS)
            r->row[r->n++].repr = rp;
        else
            i = SVC_REPRS - 1; /* the last row takes the rest */
    }
    assert(i >= 0 && i < SVC_REPRS);
    svc_repr_row *w = &r->row[i];
    w->entries++, w->bytes += bytes, w->body_tokens += (uint64_t)hy_entry_body_tokens(e);
    for (int f = 0; f < HY_FORM_COUNT; f++)
        w->t_heads[f] += (uint64_t)k.t_heads[f], w->s_heads[f] += (uint64_t)k.s_heads[f];
    pthread_mutex_unlock(&r->mu);
}

/* --- leases ---------------------------------------------------------------------- */

uint64_t svc_pin_cap(const hy_svc *s)
{
    return s->cfg.pinned_bytes_per_tenant ? s->cfg.pinned_bytes_per_tenant : s->cfg.host_bytes / 4;
}

uint64_t svc_lease_cap(const hy_svc *s)
{
    return s->cfg.lease_bytes_per_tenant ? s->cfg.lease_bytes_per_tenant : s->cfg.host_bytes / 4;
}

uint64_t svc_lease_add(hy_svc *s, const char *tenant, hy_lease **leases, size_t n, uint32_t ms,
                       char *why, size_t cap)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) bytes += hy_lease_meta(leases[i])->bytes;
    svc_lease_set *ls = calloc(1, sizeof *ls);
    svc_lock(&s->mu);
    svc_tenant *t = tenant_named(s, tenant);
    const uint64_t held = t ? t->leased : 0, limit = svc_lease_cap(s);
    const bool over = !t || held + bytes > limit;
    if (ls && !over) {
        ls->leases = leases;
        ls->n = n;
        ls->bytes = bytes;
        snprintf(ls->tenant, sizeof ls->tenant, "%s", tenant);
        ls->expires_ns = hy_now_ns() + (uint64_t)ms * 1000000ull;
        ls->id = ++s->next_lease;
        ls->next = s->leases;
        s->leases = ls;
        t->leased += bytes;
    }
    svc_unlock(&s->mu);
    if (!ls || over) {
        if (!ls)
            snprintf(why, cap, "out of memory");
        else
            snprintf(why, cap,
                     "tenant '%s' holds leases on %llu bytes; %llu more would pass its limit of "
                     "%llu (limits.lease_bytes_per_tenant)",
                     tenant, (unsigned long long)held, (unsigned long long)bytes,
                     (unsigned long long)limit);
        for (size_t i = 0; i < n; i++) hy_store_release(s->store, leases[i]);
        free(leases);
        free(ls);
        return 0;
    }
    return ls->id;
}

void svc_lease_reap(hy_svc *s, bool all)
{
    const uint64_t now = hy_now_ns();
    svc_lease_set *done = NULL;
    svc_lock(&s->mu);
    for (svc_lease_set **p = &s->leases; *p;) {
        if (all || (*p)->expires_ns <= now) {
            svc_lease_set *x = *p;
            *p = x->next;
            x->next = done;
            done = x;
            svc_tenant *t = tenant_named(s, x->tenant);
            if (t) t->leased -= HY_MIN(t->leased, x->bytes);
        } else {
            p = &(*p)->next;
        }
    }
    svc_unlock(&s->mu);
    while (done) { /* released outside svc.mu: the store takes its own lock */
        svc_lease_set *x = done;
        done = x->next;
        for (size_t i = 0; i < x->n; i++) hy_store_release(s->store, x->leases[i]);
        free(x->leases);
        free(x);
    }
}

/* --- the Watch hub ------------------------------------------------------------------- */

void svc_hub_event(void *ctx, hy_store_event ev, const hy_meta *m, const char *reason)
{
    hy_svc *s = ctx;
    svc_hub *h = &s->hub;
    svc_lock(&h->mu);
    if (h->watchers > 0) { /* nobody listening: nothing to keep */
        svc_event *e = &h->ring[h->next % SVC_HUB_RING];
        e->seq = h->next++;
        e->kind = ev;
        e->meta = *m;
        snprintf(e->reason, sizeof e->reason, "%s", reason);
        pthread_cond_broadcast(&h->cv);
    }
    svc_unlock(&h->mu);
}

/* --- open, reload, close -------------------------------------------------------------- */

int svc_open(hy_svc *s, const hy_cached_config *cfg, hy_err *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->started_ns = hy_wall_ns();
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->reprs.mu, NULL);
    pthread_mutex_init(&s->hub.mu, NULL);
    pthread_cond_init(&s->hub.cv, NULL);
    s->hub.ring = calloc(SVC_HUB_RING, sizeof *s->hub.ring);
    s->models = calloc((size_t)cfg->nmodels, sizeof *s->models);
    if (!s->hub.ring || !s->models) return hy_err_set(err, HY_ENOMEM, "out of memory");
    if (cfg->tls_cert[0]) { /* what peers' and workers' certificates must chain to */
        const char *ca = cfg->cluster_tls_ca[0] ? cfg->cluster_tls_ca : cfg->tls_cert;
        size_t len;
        int rc = hy_read_file(ca, 1 << 20, &s->peer_ca_pem, &len, err);
        if (rc) {
            hy_err_prefix(err, "%s", cfg->cluster_tls_ca[0] ? "cluster.tls_ca" : "tls.cert");
            return rc;
        }
    }
    if (cfg->tls_client_ca[0]) { /* mutual TLS: tls.cert is also this member's client side */
        size_t len;
        int rc = hy_read_file(cfg->tls_cert, 1 << 20, &s->peer_cert_pem, &len, err);
        if (!rc) rc = hy_read_file(cfg->tls_key, 1 << 20, &s->peer_key_pem, &len, err);
        if (rc) {
            hy_err_prefix(err, "tls");
            return rc;
        }
    }
    for (int i = 0; i < HY_MODE_COUNT; i++)
        hy_hist_init(&s->met.ttft[i], hy_hist_latency_bounds, hy_hist_latency_nb);
    int drc = svc_doors_check(err);
    if (drc) return drc;
    for (int i = 0; i <= SVC_METHODS; i++)
        hy_hist_init(&s->met.latency[i], hy_hist_latency_bounds, hy_hist_latency_nb);
    int rc = tenants_from(cfg, &s->tenants, &s->ntenants, &s->open_access, err);
    if (rc) return rc;
    for (int i = 0; i < cfg->nmodels; i++) {
        s->nmodels++;
        if ((rc = model_open(&s->models[i], &cfg->models[i], cfg, err))) return rc;
        hy_log(HY_LOG_INFO,
               "model '%s' from %s: %d layers, vocab %d, weight matrices in %s (%.1f MB%s), %d "
               "executor context(s)",
               cfg->models[i].name, cfg->models[i].dir, s->models[i].c->n_layers,
               s->models[i].c->vocab, hy_model_weights_name(s->models[i].m),
               (double)s->models[i].wbytes / 1e6,
               hy_model_bf16_math(s->models[i].m) ? ", bf16 arithmetic" : "", s->models[i].nctx);
    }
    hy_store_config sc;
    hy_store_config_default(&sc, cfg->host_bytes, cfg->nvme_dir[0] ? cfg->nvme_dir : NULL);
    sc.host_policy = cfg->host_policy;
    sc.nvme_policy = cfg->nvme_policy;
    sc.hbm_policy = cfg->hbm_policy;
    sc.hbm_bytes = cfg->hbm_bytes;
    sc.hbm_device = cfg->hbm_device;
    sc.write_through = cfg->write_through;
    sc.default_ttl_ns = cfg->ttl_s * 1000000000ull;
    sc.tenant_quota = cfg->default_quota;
    if (cfg->nvme_dir[0]) {
        sc.nvme.extent_bytes = cfg->nvme_extent_bytes;
        sc.nvme.max_extents = (uint32_t)(cfg->nvme_bytes / cfg->nvme_extent_bytes);
        if (sc.nvme.max_extents == 0) sc.nvme.max_extents = 1;
    }
    sc.on_event = svc_hub_event;
    sc.event_ctx = s;
    if ((rc = hy_store_open(&sc, &s->store, err))) {
        hy_err_prefix(err, "store");
        return rc;
    }
    hy_store_stats st;
    hy_store_stats_get(s->store, &st);
    hy_log(HY_LOG_INFO, "store: host %llu MiB (%s/%s)%s%s, %llu entries on open",
           (unsigned long long)(cfg->host_bytes >> 20), hy_evict_name(cfg->host_policy.evict),
           hy_admit_name(cfg->host_policy.admit), cfg->nvme_dir[0] ? ", NVMe at " : "",
           cfg->nvme_dir, (unsigned long long)st.entries);
    /* models whose passes run on the hbm tier's device compose the entries
     * it holds where they lie */
    hy_exec_device dkind = HY_EXEC_CPU;
    int dnum = 0;
    hy_exec_device_parse(cfg->exec_device, &dkind, &dnum);
    for (int i = 0; dkind == HY_EXEC_CUDA && st.hbm_present && i < s->nmodels; i++) {
        svc_model *sm = &s->models[i];
        if (dnum != st.hbm.device) {
            hy_log(HY_LOG_WARN,
                   "model '%s': its passes run on cuda:%d, the hbm tier is on cuda:%d: its "
                   "entries there come down to the host to be composed",
                   sm->name, dnum, st.hbm.device);
            continue;
        }
        sm->on_hbm = sm->ctx[0].ex;
        hy_log(HY_LOG_INFO, "model '%s': entries in the hbm tier composed where they lie (cuda:%d)",
               sm->name, dnum);
    }
    if ((rc = apply_quotas(s, cfg, err))) return rc;
    return svc_shadow_start(s, err);
}

int svc_reload(hy_svc *s, const hy_cached_config *cfg, hy_err *err)
{
    svc_tenant *t;
    int n;
    bool open;
    int rc = tenants_from(cfg, &t, &n, &open, err);
    if (rc) return rc;
    if (open != s->open_access) {
        free(t);
        return hy_err_set(err, HY_EINVAL,
                          "%s: tenants cannot be added to or removed from a server %s tokens "
                          "by a reload (restart it)",
                          cfg->path, s->open_access ? "started without" : "started with");
    }
    static const hy_tier_id tiers[3] = {HY_TIER_HOST, HY_TIER_NVME, HY_TIER_HBM};
    const hy_policy_config *pol[3] = {&cfg->host_policy, &cfg->nvme_policy, &cfg->hbm_policy};
    for (int i = 0; i < 3; i++) {
        hy_policy_config cur;
        hy_err ignored = {0};
        if (hy_store_get_policy(s->store, tiers[i], &cur, &ignored)) continue; /* no such tier */
        if (cur.evict == pol[i]->evict && cur.admit == pol[i]->admit &&
            cur.min_tokens == pol[i]->min_tokens)
            continue;
        if ((rc = hy_store_set_policy(s->store, tiers[i], pol[i], err))) {
            free(t);
            return rc;
        }
    }
    if ((rc = apply_quotas(s, cfg, err))) {
        free(t);
        return rc;
    }
    svc_lock(&s->mu);
    for (int i = 0; i < n; i++) /* calls in flight keep counting against their tenant */
        for (int j = 0; j < s->ntenants; j++)
            if (strcmp(t[i].name, s->tenants[j].name) == 0)
                t[i].in_flight = s->tenants[j].in_flight, t[i].watchers = s->tenants[j].watchers;
    free(s->tenants);
    s->tenants = t;
    s->ntenants = n;
    s->cfg.in_flight_per_tenant = cfg->in_flight_per_tenant;
    svc_unlock(&s->mu);
    /* everything else needs a restart: say so when it changed */
    char keys[512];
    if (hy_cached_config_restart_keys(&s->cfg, cfg, keys, sizeof keys))
        hy_log(HY_LOG_WARN,
               "reload: %s changes keys other than tenants and the tiers' policies; "
               "those take effect at the next restart: %s",
               cfg->path, keys);
    return HY_OK;
}

int svc_transport_start(hy_svc *s, int grpc_port, hy_err *err)
{
    const hy_cached_config *c = &s->cfg;
    char tcp[HY_CFG_ADDR_MAX];
    if (c->tp_tcp_listen[0]) {
        snprintf(tcp, sizeof tcp, "%s", c->tp_tcp_listen);
    } else { /* listen's host, any free port */
        const char *colon = strrchr(c->listen, ':');
        int hl = colon ? (int)(colon - c->listen) : (int)strlen(c->listen);
        snprintf(tcp, sizeof tcp, "%.*s:0", hl, c->listen);
    }
    if (!strcmp(c->tp_shm_socket, "off")) {
        s->tp_shm_path[0] = 0;
    } else if (c->tp_shm_socket[0]) {
        snprintf(s->tp_shm_path, sizeof s->tp_shm_path, "%s", c->tp_shm_socket);
    } else {
        const char *tmp = getenv("TMPDIR");
        int n = snprintf(s->tp_shm_path, sizeof s->tp_shm_path, "%s/hypic-cached-%d.sock",
                         tmp && tmp[0] ? tmp : "/tmp", grpc_port);
        if (n < 0 || (size_t)n >= sizeof s->tp_shm_path)
            return hy_err_set(err, HY_EINVAL,
                              "transport.shm_socket: the default under $TMPDIR is longer than "
                              "%zu bytes: set transport.shm_socket",
                              sizeof s->tp_shm_path - 1);
    }
    hy_tp_hub_config hc = {.tcp_address = tcp,
                           .shm_path = s->tp_shm_path,
                           .rdma = !strcmp(c->tp_rdma, "off")        ? HY_TP_RDMA_OFF
                                   : !strcmp(c->tp_rdma, "required") ? HY_TP_RDMA_REQUIRED
                                                                     : HY_TP_RDMA_AUTO,
                           .rdma_device = c->tp_rdma_device[0] ? c->tp_rdma_device : NULL,
                           .rdma_gid_index = -1,
                           .max_sessions = c->tp_max_sessions,
                           .max_buffer = c->tp_max_buffer,
                           .tenant_sessions = c->tp_sessions_per_tenant,
                           .tenant_bytes = c->tp_tenant_bytes};
    int rc = hy_tp_hub_start(&hc, &s->tp, err);
    if (rc) return rc;
    hy_tp_stats st;
    hy_tp_hub_stats(s->tp, &st);
    char host[HY_CFG_ADDR_MAX];
    snprintf(host, sizeof host, "%s", tcp);
    char *colon = strrchr(host, ':');
    if (colon) *colon = 0;
    hy_log(HY_LOG_INFO, "transports: tcp on %s:%d, shm %s%s, rdma %s", host, st.tcp_port,
           s->tp_shm_path[0] ? "on " : "off", s->tp_shm_path, st.rdma_why);
    return 0;
}

void svc_transport_stop(hy_svc *s)
{
    hy_tp_hub_stop(s->tp);
    s->tp = NULL;
}

int svc_flush(hy_svc *s)
{
    int rc = HY_OK;
    svc_lease_reap(s, true);
    if (s->store && !s->flushed) {
        size_t written = 0;
        hy_err e = {0};
        if ((rc = hy_store_flush(s->store, &written, &e)))
            hy_log(HY_LOG_ERROR, "flushing write-back entries to NVMe failed (%zu written): %s",
                   written, e.msg);
        else if (written)
            hy_log(HY_LOG_INFO, "flushed %zu write-back entries to NVMe", written);
    }
    s->flushed = true;
    return rc;
}

int svc_close(hy_svc *s)
{
    /* what main started (transports, router, cluster) it has stopped */
    assert(!s->tp && !s->router && !s->cluster);
    svc_shadow_stop(s); /* before the models it runs */
    const int rc = svc_flush(s);
    if (s->store) hy_store_close(s->store);
    for (int i = 0; i < s->nmodels; i++) model_close(&s->models[i]);
    free(s->models);
    free(s->tenants);
    hy_free(s->peer_ca_pem);
    hy_free(s->peer_cert_pem);
    hy_free(s->peer_key_pem);
    free(s->hub.ring);
    pthread_mutex_destroy(&s->hub.mu);
    pthread_cond_destroy(&s->hub.cv);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->reprs.mu);
    return rc;
}
