/*
 * The router and its scatter workers (router_internal.h, docs/scheduler.md).
 */
#include "router_internal.h"
#include "put_internal.h"

#include "hy_scheduler.h"

#include <assert.h>
#include <arpa/inet.h>
#include <errno.h>
#include <libgen.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SAMPLES        64   /* recent (tokens, seconds) builds the cost model is fitted to */
#define SPAWN_WAIT_S   60.0 /* svc_router_start's wait for spawned workers */
#define PROBE_DEADLINE 2000 /* ms a Health probe may take */
#define AWAIT_TICK_MS  10   /* how often a waiting combiner looks at its call */

typedef enum w_source { W_CONFIG = 0, W_SPAWN, W_DNS } w_source;
static const char *const k_sources[] = {"config", "spawn", "dns"};

typedef struct svc_worker {
    char addr[HY_CFG_ADDR_MAX];
    w_source source;
    hy_rpc_client *cl; /* made once; gRPC reconnects by itself */
    bool up;
    bool gone;        /* DNS no longer names it: given nothing new */
    pid_t pid;        /* W_SPAWN: its process, 0 while none runs */
    double spawned_s; /* W_SPAWN: when it was last started */
    uint32_t in_flight;
    double load_s;
    uint64_t built, failed, restarts;
    double tok_s, speed; /* EWMAs */
    char last_error[200];
} svc_worker;

struct svc_router {
    hy_svc *s;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the probe thread's sleep, cut short by stop */
    svc_worker w[HY_CFG_MAX_WORKERS];
    int n;
    bool stop;
    pthread_t probe;
    bool probing;
    hy_cost_model cost;
    uint64_t sample_n[SAMPLES];
    double sample_s[SAMPLES];
    size_t nsamples, next_sample;
    hy_plan_policy policy;
    char bin[PATH_MAX];
    const hy_rpc_method *build, *health;
};

/* --- workers ---------------------------------------------------------------------- */

static int worker_add(svc_router *rt, const char *addr, w_source src, hy_err *err)
{
    if (rt->n >= HY_CFG_MAX_WORKERS)
        return hy_err_set(err, HY_ERANGE, "more than %d scatter workers (at %s)",
                          HY_CFG_MAX_WORKERS, addr);
    svc_worker *w = &rt->w[rt->n];
    memset(w, 0, sizeof *w);
    snprintf(w->addr, sizeof w->addr, "%.255s", addr);
    w->source = src;
    w->speed = 1;
    int rc = svc_peer_open(rt->s, addr, &w->cl, err);
    if (rc) return rc;
    rt->n++;
    return HY_OK;
}

/* A loopback port free now (bound and released): a spawned worker keeps it
 * across restarts, so its address never changes. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Starts spawned worker w: hypic-worker with the daemon's configuration file,
 * on its loopback port, without HTTP, with scatter.spawn_threads threads.
 * It dies with the daemon (PR_SET_PDEATHSIG). */
static void worker_spawn(svc_router *rt, svc_worker *w)
{
    const hy_cached_config *c = &rt->s->cfg;
    char threads[16];
    snprintf(threads, sizeof threads, "%d", c->scatter_spawn_threads);
    const char *argv[12];
    int k = 0;
    argv[k++] = rt->bin;
    argv[k++] = "--listen";
    argv[k++] = w->addr;
    argv[k++] = "--http-listen";
    argv[k++] = "";
    argv[k++] = "--threads";
    argv[k++] = threads;
    if (c->path[0]) {
        argv[k++] = "--config";
        argv[k++] = c->path;
    }
    argv[k] = NULL;
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127); /* the daemon died before prctl */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL); /* the daemon's blocked signals */
        execv(rt->bin, (char *const *)argv);
        fprintf(stderr, "hypic-cached: cannot run the scatter worker %s: %s\n", rt->bin,
                strerror(errno));
        _exit(127);
    }
    w->spawned_s = hy_now_s();
    if (pid < 0) {
        snprintf(w->last_error, sizeof w->last_error, "fork: %s", strerror(errno));
        return;
    }
    w->pid = pid;
    hy_log(HY_LOG_INFO, "scatter: started worker %s (pid %d)", w->addr, (int)pid);
}

/* Every address name:port resolves to (IPv4 and IPv6), as host:port. */
static int dns_resolve(const char *hostport, char out[][HY_CFG_ADDR_MAX], int cap)
{
    char host[HY_CFG_ADDR_MAX];
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (!colon) return 0;
    *colon = '\0';
    const char *port = colon + 1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0) return 0;
    int n = 0;
    for (struct addrinfo *a = res; a && n < cap; a = a->ai_next) {
        char ip[INET6_ADDRSTRLEN];
        const void *src = a->ai_family == AF_INET
                              ? (const void *)&((struct sockaddr_in *)a->ai_addr)->sin_addr
                              : (const void *)&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr;
        if (!inet_ntop(a->ai_family, src, ip, sizeof ip)) continue;
        char one[HY_CFG_ADDR_MAX];
        snprintf(one, sizeof one, a->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s", ip, port);
        bool dup = false;
        for (int i = 0; i < n; i++) dup |= strcmp(out[i], one) == 0;
        if (!dup) snprintf(out[n++], HY_CFG_ADDR_MAX, "%s", one);
    }
    freeaddrinfo(res);
    return n;
}

/* The DNS name again: new addresses become workers, those no longer named are
 * marked gone (kept in the table: a job may be using them). Under rt->mu. */
static void dns_refresh(svc_router *rt)
{
    char addrs[HY_CFG_MAX_WORKERS][HY_CFG_ADDR_MAX];
    pthread_mutex_unlock(&rt->mu); /* the resolver may take a while */
    const int k = dns_resolve(rt->s->cfg.scatter_dns, addrs, HY_CFG_MAX_WORKERS);
    pthread_mutex_lock(&rt->mu);
    for (int i = 0; i < rt->n; i++) {
        svc_worker *w = &rt->w[i];
        if (w->source != W_DNS) continue;
        bool named = false;
        for (int j = 0; j < k; j++) named |= strcmp(addrs[j], w->addr) == 0;
        if (w->gone != !named)
            hy_log(HY_LOG_INFO, "scatter: worker %s %s DNS name %s", w->addr,
                   named ? "is back under the" : "is no longer under the", rt->s->cfg.scatter_dns);
        w->gone = !named;
    }
    for (int j = 0; j < k; j++) {
        bool known = false;
        for (int i = 0; i < rt->n; i++) known |= strcmp(rt->w[i].addr, addrs[j]) == 0;
        hy_err e = {0};
        if (!known && worker_add(rt, addrs[j], W_DNS, &e) == HY_OK)
            hy_log(HY_LOG_INFO, "scatter: worker %s found under %s", addrs[j],
                   rt->s->cfg.scatter_dns);
    }
}

/* One Health call: whether the worker serves. */
static bool health_ok(svc_router *rt, hy_rpc_client *cl, char *why, size_t cap)
{
    Hypic__V1__HealthRequest q = HYPIC__V1__HEALTH_REQUEST__INIT;
    hy_rpc_status st;
    hy_err e = {0};
    int serving = 0;
    int rc = hy_rpc_client_call(cl, rt->health, &q.base, NULL, PROBE_DEADLINE, NULL, NULL, &st, &e);
    if (rc)
        snprintf(why, cap, "%.190s", e.msg);
    else if (st.code != HY_RPC_OK)
        snprintf(why, cap, "Health: %s: %.150s", hy_rpc_code_name(st.code), st.msg);
    else
        serving = 1;
    return serving;
}

/* Spawned workers that died are started again (at most once per probe
 * period); every worker's Health is asked. */
static void probe_once(svc_router *rt)
{
    pthread_mutex_lock(&rt->mu);
    for (int i = 0; i < rt->n; i++) {
        svc_worker *w = &rt->w[i];
        if (w->source != W_SPAWN) continue;
        int status;
        if (w->pid > 0 && waitpid(w->pid, &status, WNOHANG) == w->pid) {
            hy_log(HY_LOG_WARN, "scatter: worker %s (pid %d) %s %d; starting it again", w->addr,
                   (int)w->pid, WIFSIGNALED(status) ? "was killed by signal" : "exited with",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            snprintf(w->last_error, sizeof w->last_error, "process %d ended", (int)w->pid);
            w->pid = 0;
            w->up = false;
        }
        if (w->pid == 0 && !rt->stop) {
            worker_spawn(rt, w);
            w->restarts++;
        }
    }
    if (rt->s->cfg.scatter_dns[0]) dns_refresh(rt);
    const int n = rt->n;
    pthread_mutex_unlock(&rt->mu);
    for (int i = 0; i < n; i++) {
        char why[200] = "";
        const bool ok = health_ok(rt, rt->w[i].cl, why, sizeof why);
        pthread_mutex_lock(&rt->mu);
        svc_worker *w = &rt->w[i];
        if (ok != w->up)
            hy_log(ok ? HY_LOG_INFO : HY_LOG_WARN, "scatter: worker %s is %s%s%s", w->addr,
                   ok ? "up" : "down", ok ? "" : ": ", ok ? "" : why);
        w->up = ok;
        if (!ok) snprintf(w->last_error, sizeof w->last_error, "%.199s", why);
        pthread_mutex_unlock(&rt->mu);
    }
}

static void *probe_main(void *arg)
{
    svc_router *rt = arg;
    pthread_mutex_lock(&rt->mu);
    while (!rt->stop) {
        pthread_mutex_unlock(&rt->mu);
        probe_once(rt);
        pthread_mutex_lock(&rt->mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        const uint64_t ns = (uint64_t)until.tv_nsec + rt->s->cfg.scatter_probe_ms * 1000000ull;
        until.tv_sec += (time_t)(ns / 1000000000ull);
        until.tv_nsec = (long)(ns % 1000000000ull);
        if (!rt->stop) pthread_cond_timedwait(&rt->cv, &rt->mu, &until);
    }
    pthread_mutex_unlock(&rt->mu);
    return NULL;
}

int svc_router_start(hy_svc *s, hy_err *err)
{
    const hy_cached_config *c = &s->cfg;
    s->router = NULL;
    if (!c->nscatter_workers && !c->scatter_spawn && !c->scatter_dns[0]) return HY_OK;
    svc_router *rt = calloc(1, sizeof *rt);
    if (!rt) return hy_err_set(err, HY_ENOMEM, "out of memory");
    rt->s = s;
    pthread_mutex_init(&rt->mu, NULL);
    pthread_cond_init(&rt->cv, NULL);
    rt->policy = strcmp(c->scatter_policy, "round-robin") == 0 ? HY_PLAN_RR : HY_PLAN_LPT;
    rt->cost = (hy_cost_model){.per_token_s = 1e-4}; /* until builds are measured: by tokens */
    rt->build = hy_rpc_method_named("Build");
    rt->health = hy_rpc_method_named("Health");
    s->router = rt;
    int rc = HY_OK;
    for (int i = 0; i < c->nscatter_workers && !rc; i++)
        rc = worker_add(rt, c->scatter_workers[i].address, W_CONFIG, err);
    if (c->scatter_spawn) {
        if (c->scatter_worker_bin[0]) {
            snprintf(rt->bin, sizeof rt->bin, "%s", c->scatter_worker_bin);
        } else {
            char self[PATH_MAX];
            ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
            if (k <= 0) return hy_err_set(err, HY_EIO, "scatter.spawn: cannot find this program");
            self[k] = '\0';
            snprintf(rt->bin, sizeof rt->bin, "%s/hypic-worker", dirname(self));
        }
        if (access(rt->bin, X_OK) != 0)
            rc = hy_err_set(err, HY_EINVAL,
                            "scatter.worker_bin: %s is not an executable program (scatter.spawn "
                            "starts it)",
                            rt->bin);
    }
    for (uint32_t i = 0; i < c->scatter_spawn && !rc; i++) {
        int port = free_port();
        if (port < 0) return hy_err_set(err, HY_EIO, "scatter.spawn: no free loopback port");
        char addr[64];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
        if ((rc = worker_add(rt, addr, W_SPAWN, err))) break;
        worker_spawn(rt, &rt->w[rt->n - 1]);
    }
    if (rc) return rc;
    if (c->scatter_dns[0]) {
        pthread_mutex_lock(&rt->mu);
        dns_refresh(rt);
        pthread_mutex_unlock(&rt->mu);
        if (rt->n == 0)
            hy_log(HY_LOG_WARN, "scatter.dns: %s names no address yet; asked again every %u ms",
                   c->scatter_dns, c->scatter_probe_ms);
    }
    /* spawned workers load their models: wait for them, so the daemon is
     * ready with its workers */
    const double until = hy_now_s() + SPAWN_WAIT_S;
    for (;;) {
        probe_once(rt);
        int spawned = 0, up = 0;
        for (int i = 0; i < rt->n; i++) {
            spawned += rt->w[i].source == W_SPAWN;
            up += rt->w[i].source == W_SPAWN && rt->w[i].up;
        }
        if (up == spawned) break;
        if (hy_now_s() > until) {
            hy_log(HY_LOG_WARN, "scatter: %d of %d spawned workers answer after %.0f s", up,
                   spawned, SPAWN_WAIT_S);
            break;
        }
        usleep(50000);
    }
    if (pthread_create(&rt->probe, NULL, probe_main, rt))
        return hy_err_set(err, HY_ENOMEM, "cannot start the scatter probe thread");
    rt->probing = true;
    int up = 0;
    for (int i = 0; i < rt->n; i++) up += rt->w[i].up;
    hy_log(HY_LOG_INFO, "scatter: %d worker(s), %d up, policy %s, misses of %u tokens or more",
           rt->n, up, hy_plan_policy_name(rt->policy), c->scatter_min_tokens);
    return HY_OK;
}

void svc_router_stop(hy_svc *s)
{
    svc_router *rt = s->router;
    if (!rt) return;
    pthread_mutex_lock(&rt->mu);
    rt->stop = true;
    pthread_cond_broadcast(&rt->cv);
    pthread_mutex_unlock(&rt->mu);
    if (rt->probing) pthread_join(rt->probe, NULL);
    for (int i = 0; i < rt->n; i++) {
        svc_worker *w = &rt->w[i];
        if (w->pid > 0) {
            kill(w->pid, SIGTERM);
            for (int t = 0; t < 100 && waitpid(w->pid, NULL, WNOHANG) == 0; t++) usleep(50000);
            if (waitpid(w->pid, NULL, WNOHANG) == 0) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, NULL, 0);
            }
        }
        hy_rpc_client_close(w->cl);
    }
    pthread_cond_destroy(&rt->cv);
    pthread_mutex_destroy(&rt->mu);
    free(rt);
    s->router = NULL;
}

void svc_router_stats(hy_svc *s, Hypic__V1__WorkerStats ***out, size_t *n)
{
    *out = NULL;
    *n = 0;
    svc_router *rt = s->router;
    if (!rt) return;
    pthread_mutex_lock(&rt->mu);
    Hypic__V1__WorkerStats **v = calloc((size_t)rt->n + 1, sizeof *v);
    for (int i = 0; v && i < rt->n; i++) {
        const svc_worker *w = &rt->w[i];
        Hypic__V1__WorkerStats *p = malloc(sizeof *p);
        if (!p) break;
        hypic__v1__worker_stats__init(p);
        p->address = strdup(w->addr);
        p->source = (char *)k_sources[w->source];
        p->up = w->up && !w->gone;
        p->in_flight = w->in_flight;
        p->load_s = w->load_s;
        p->segments_built = w->built;
        p->segments_failed = w->failed;
        p->tokens_per_s = w->tok_s;
        p->speed = w->speed;
        p->last_error = strdup(w->last_error);
        p->pid = (int32_t)w->pid;
        v[(*n)++] = p;
    }
    pthread_mutex_unlock(&rt->mu);
    *out = v;
}

void svc_router_stats_free(Hypic__V1__WorkerStats **w, size_t n)
{
    for (size_t i = 0; w && i < n; i++) {
        free(w[i]->address);
        free(w[i]->last_error);
        free(w[i]);
    }
    free(w);
}

/* A build measured: the cost model refitted, the worker's speed and
 * throughput updated. Under rt->mu. */
static void measured(svc_router *rt, svc_worker *w, uint64_t n, double secs)
{
    rt->sample_n[rt->next_sample] = n;
    rt->sample_s[rt->next_sample] = secs / (w->speed > 0 ? w->speed : 1);
    rt->next_sample = (rt->next_sample + 1) % SAMPLES;
    if (rt->nsamples < SAMPLES) rt->nsamples++;
    hy_cost_model fit;
    hy_err e = {0};
    if (rt->nsamples >= 4 && hy_cost_fit(rt->sample_n, rt->sample_s, rt->nsamples, &fit, &e) == 0)
        rt->cost = fit;
    const double pred = hy_cost_prefill(&rt->cost, n);
    const double tps = (double)n / secs;
    w->tok_s = w->tok_s > 0 ? 0.7 * w->tok_s + 0.3 * tps : tps;
    if (pred > 0) w->speed = 0.7 * w->speed + 0.3 * (pred / secs);
}

/* --- jobs ------------------------------------------------------------------------- */

typedef enum sc_state { SC_PENDING = 0, SC_RUNNING, SC_READY, SC_FAILED } sc_state;

typedef struct sc_seg {
    const int32_t *tok;
    size_t n;
    hy_key key;
    char **tags;
    size_t ntags;
    sc_state state;
    int owner;      /* the runner the plan gave it to */
    int tries;      /* calls made */
    uint64_t tried; /* bit r: runner r tried it */
    double predicted_s;
    hy_entry *entry; /* SC_READY */
    bool stored;
    hy_tier_id tier;
    int by; /* the worker (index in the router) whose entry it is */
} sc_seg;

typedef struct sc_runner {
    struct sc_job *job;
    int slot;   /* its index in the job */
    int worker; /* its index in the router */
    hy_rpc_cancel *cancel;
    pthread_t thread;
    bool started, alive, broken; /* broken: its worker failed a call; it takes no more */
} sc_runner;

struct sc_job {
    hy_svc *s;
    svc_model *sm;
    char tenant[HY_TENANT_MAX];
    char token[HY_CFG_TOKEN_MAX];
    bool has_token;
    int W;
    hy_entry_repr rp; /* of the entries the workers build */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sc_seg *u; /* the distinct segments shipped */
    size_t nu;
    int *slot_of; /* [n] request segment -> u index, or -1 */
    size_t n;
    sc_runner *r;
    int nr, alive;
    bool cancelled;
    uint32_t retries;
    double t0_s, last_s; /* the dispatch; the last entry received, after it */
};

/* Whether some runner still alive, other than those that tried it, could
 * take segment g. Under j->mu. */
static bool takeable_by_someone(const sc_job *j, const sc_seg *g)
{
    for (int k = 0; k < j->nr; k++)
        if (j->r[k].alive && !j->r[k].broken && !(g->tried & (1ull << k))) return true;
    return false;
}

/* Segments nobody alive can build any more fail: the combiner builds them.
 * Under j->mu. */
static void fail_orphans(sc_job *j)
{
    for (size_t g = 0; g < j->nu; g++)
        if (j->u[g].state == SC_PENDING && !takeable_by_someone(j, &j->u[g]))
            j->u[g].state = SC_FAILED;
}

/* The next segment runner t should build: its own in plan order, then one a
 * failed call left for another worker, or one whose runner's worker failed.
 * -1: none. Under j->mu. */
static int next_for(const sc_job *j, const sc_runner *t)
{
    for (size_t g = 0; g < j->nu; g++)
        if (j->u[g].state == SC_PENDING && j->u[g].owner == t->slot && j->u[g].tries == 0)
            return (int)g;
    for (size_t g = 0; g < j->nu; g++) {
        const sc_seg *u = &j->u[g];
        const sc_runner *o = &j->r[u->owner];
        if (u->state == SC_PENDING && (u->tries > 0 || !o->alive || o->broken) &&
            !(u->tried & (1ull << t->slot)))
            return (int)g;
    }
    return -1;
}

static bool any_running(const sc_job *j)
{
    for (size_t g = 0; g < j->nu; g++)
        if (j->u[g].state == SC_RUNNING) return true;
    return false;
}

/* A Build's response stream gathered (hy_chunks: the layers as they come,
 * the header last). */
static int on_chunk(void *ctx, const ProtobufCMessage *msg)
{
    return hy_chunks_add(ctx, (const Hypic__V1__EntryChunk *)msg);
}

/* Builds segment g on runner t's worker: the call, the checks, the store.
 * 0 with g's entry set, or non-zero with why; *fatal when the worker itself
 * failed (unreachable, timed out) rather than the segment. */
static int build_on(sc_job *j, sc_runner *t, sc_seg *g, hy_rpc_client *cl, hy_tier_id *tier,
                    bool *stored, char *why, size_t cap, bool *fatal)
{
    hy_svc *s = j->s;
    *fatal = false;
    uint32_t *ids = malloc(g->n * sizeof *ids);
    if (!ids) return snprintf(why, cap, "out of memory"), HY_ENOMEM;
    for (size_t i = 0; i < g->n; i++) ids[i] = (uint32_t)g->tok[i];
    Hypic__V1__Tokens tk = HYPIC__V1__TOKENS__INIT;
    tk.n_ids = g->n;
    tk.ids = ids;
    Hypic__V1__BuildRequest q = HYPIC__V1__BUILD_REQUEST__INIT;
    q.model = j->sm->name;
    q.tokens = &tk;
    q.seam_opt_case = HYPIC__V1__BUILD_REQUEST__SEAM_OPT_SEAM;
    q.seam = (uint32_t)j->W;
    q.dtype = j->rp.s == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                       : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
    Hypic__V1__Representation rp = HYPIC__V1__REPRESENTATION__INIT;
    rp.tolerance = j->rp.tol; /* the worker builds what the key names */
    rp.t_dtype = j->rp.t == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                          : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
    rp.kv_dtype = j->rp.kv == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                            : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
    q.repr = &rp;
    q.tenant = j->tenant;
    q.n_tags = g->ntags;
    q.tags = g->tags;
    hy_chunks ga = {.max = s->cfg.max_entry_bytes};
    hy_rpc_status st = {0};
    hy_err e = {0};
    int rc = hy_rpc_client_call_ex(cl, j->s->router->build, &q.base, j->has_token ? j->token : NULL,
                                   s->cfg.scatter_timeout_ms, t->cancel, on_chunk, &ga, &st, &e);
    free(ids);
    if (rc) {
        snprintf(why, cap, "%.250s", ga.why[0] ? ga.why : e.msg);
        *fatal = !ga.why[0];
    } else if (st.code != HY_RPC_OK) {
        snprintf(why, cap, "Build: %s: %.200s", hy_rpc_code_name(st.code), st.msg);
        /* the worker's own trouble, not the segment's: another may do better */
        *fatal = st.code == HY_RPC_UNAVAILABLE || st.code == HY_RPC_DEADLINE_EXCEEDED ||
                 st.code == HY_RPC_CANCELLED || st.code == HY_RPC_UNKNOWN ||
                 st.code == HY_RPC_INTERNAL;
        rc = HY_EIO;
    } else if (!hy_chunks_complete(&ga)) {
        snprintf(why, cap, "the stream ended after %llu of %llu bytes", (unsigned long long)ga.got,
                 (unsigned long long)ga.want);
        *fatal = true;
        rc = HY_EIO;
    }
    hy_entry *ent = NULL;
    if (!rc && (rc = hy_entry_deserialize(j->sm->m, ga.buf, (size_t)ga.got, &ent, &e)))
        snprintf(why, cap, "%s: %.200s",
                 rc == HY_ENOMEM ? "no memory to validate its entry"
                                 : "its entry failed validation",
                 e.msg);
    if (!rc) {
        hy_key k;
        const int32_t *tok;
        const size_t n = (size_t)hy_entry_tokens(ent, &tok);
        hy_entry_key(j->tenant, j->sm->fp, hy_entry_seam_setting(ent), hy_entry_repr_of(ent), tok,
                     n, k.b);
        if (memcmp(k.b, g->key.b, HY_KEY_BYTES) != 0 || n != g->n ||
            memcmp(tok, g->tok, n * sizeof *tok) != 0) {
            snprintf(why, cap, "it sent the entry of another segment (or another seam/dtype)");
            rc = HY_EFORMAT;
        }
    }
    if (!rc) {
        hy_err se = {0};
        if (put_built(s, j->sm, j->tenant, &g->key, ent, ga.buf, (size_t)ga.got, g->tags, g->ntags,
                      tier, NULL, &se))
            hy_log(HY_LOG_WARN, "scatter: storing the entry of a worker: %s", se.msg);
        *stored = *tier != HY_TIER_NONE;
        g->entry = ent;
        ent = NULL;
    }
    hy_entry_free(ent);
    hy_chunks_free(&ga);
    return rc;
}

static void *runner_main(void *arg)
{
    sc_runner *t = arg;
    sc_job *j = t->job;
    svc_router *rt = j->s->router;
    hy_rpc_client *cl = rt->w[t->worker].cl; /* never freed while the router runs */
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->cancelled || t->broken) break;
        const int gi = next_for(j, t);
        if (gi < 0) {
            if (!any_running(j)) break; /* nothing left that could come back to us */
            pthread_cond_wait(&j->cv, &j->mu);
            continue;
        }
        sc_seg *g = &j->u[gi];
        assert((size_t)gi < j->nu && g->state == SC_PENDING); /* next_for gives pending ones */
        g->state = SC_RUNNING;
        g->tries++;
        g->tried |= 1ull << t->slot;
        pthread_mutex_unlock(&j->mu);

        pthread_mutex_lock(&rt->mu);
        rt->w[t->worker].in_flight++;
        rt->w[t->worker].load_s += g->predicted_s;
        pthread_mutex_unlock(&rt->mu);
        char why[300] = "";
        bool fatal = false, stored = false;
        hy_tier_id tier = HY_TIER_NONE;
        const double t0 = hy_now_s();
        int rc = build_on(j, t, g, cl, &tier, &stored, why, sizeof why, &fatal);
        const double dt = hy_now_s() - t0;
        const bool cancelled = hy_rpc_cancel_fired(t->cancel);
        pthread_mutex_lock(&rt->mu);
        svc_worker *w = &rt->w[t->worker];
        assert(w->in_flight > 0); /* this call's, counted before it */
        w->in_flight--;
        w->load_s -= g->predicted_s;
        if (w->load_s < 1e-9) w->load_s = 0;
        if (!rc) {
            w->built++;
            w->last_error[0] = '\0';
            measured(rt, w, g->n, dt);
        } else if (!cancelled) {
            w->failed++;
            snprintf(w->last_error, sizeof w->last_error, "%.199s", why);
            if (fatal) w->up = false; /* until a probe finds it again */
        }
        pthread_mutex_unlock(&rt->mu);
        if (rc && !cancelled)
            hy_log(HY_LOG_WARN, "scatter: worker %s, segment of %zu tokens (try %d): %s%s",
                   rt->w[t->worker].addr, g->n, g->tries, why,
                   fatal ? "; the worker is down until it answers a probe" : "");

        pthread_mutex_lock(&j->mu);
        assert(g->state == SC_RUNNING); /* only its runner moves it on */
        if (!rc) {
            j->last_s = hy_now_s() - j->t0_s;
            g->state = SC_READY;
            g->stored = stored;
            g->tier = tier;
            g->by = t->worker;
        } else {
            if (fatal) t->broken = true;
            g->state = (int)j->retries >= g->tries && !cancelled ? SC_PENDING : SC_FAILED;
            if (g->state == SC_PENDING && !takeable_by_someone(j, g)) g->state = SC_FAILED;
        }
        pthread_cond_broadcast(&j->cv);
    }
    assert(t->alive && j->alive > 0);
    t->alive = false;
    j->alive--;
    fail_orphans(j);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

int sc_job_start(hy_svc *s, svc_model *sm, const char *tenant, int W, hy_entry_repr rp,
                 const sc_seg_in *segs, size_t n, sc_job **out, hy_err *err)
{
    *out = NULL;
    svc_router *rt = s->router;
    if (!rt) return HY_OK;
    size_t nship = 0;
    for (size_t i = 0; i < n; i++) nship += segs[i].ship;
    if (!nship) return HY_OK;
    /* the workers that can take work now, with what they already have */
    hy_worker_view views[HY_CFG_MAX_WORKERS];
    int index[HY_CFG_MAX_WORKERS];
    size_t m = 0;
    hy_cost_model cost;
    pthread_mutex_lock(&rt->mu);
    for (int i = 0; i < rt->n; i++) {
        const svc_worker *w = &rt->w[i];
        if (!w->up || w->gone) continue;
        views[m] = (hy_worker_view){
            .speed = w->speed > 0.05 ? w->speed : 0.05, .ready_s = w->load_s, .up = true};
        index[m++] = i;
    }
    cost = rt->cost;
    const hy_plan_policy pol = rt->policy;
    pthread_mutex_unlock(&rt->mu);
    if (m == 0) return HY_OK;

    sc_job *j = calloc(1, sizeof *j);
    if (!j) return hy_err_set(err, HY_ENOMEM, "out of memory");
    j->s = s;
    j->sm = sm;
    snprintf(j->tenant, sizeof j->tenant, "%s", tenant);
    j->W = W;
    j->rp = rp;
    j->n = n;
    j->retries = s->cfg.scatter_retries;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->u = calloc(nship, sizeof *j->u);
    j->slot_of = malloc(n * sizeof *j->slot_of);
    j->r = calloc(m, sizeof *j->r);
    uint64_t *tokens = calloc(nship, sizeof *tokens);
    hy_plan p = {.worker = calloc(nship, sizeof(int)),
                 .order = calloc(nship, sizeof(uint32_t)),
                 .start_s = calloc(nship, sizeof(double)),
                 .end_s = calloc(nship, sizeof(double))};
    int rc = j->u && j->slot_of && j->r && tokens && p.worker && p.order && p.start_s && p.end_s
                 ? HY_OK
                 : hy_err_set(err, HY_ENOMEM, "out of memory");
    /* the distinct segments, in request order (a repeated one built once) */
    for (size_t i = 0; !rc && i < n; i++) {
        j->slot_of[i] = -1;
        if (!segs[i].ship) continue;
        for (size_t g = 0; g < j->nu; g++)
            if (memcmp(j->u[g].key.b, segs[i].key.b, HY_KEY_BYTES) == 0) j->slot_of[i] = (int)g;
        if (j->slot_of[i] >= 0) continue;
        sc_seg *g = &j->u[j->nu];
        *g = (sc_seg){.tok = segs[i].tok,
                      .n = segs[i].n,
                      .key = segs[i].key,
                      .tags = segs[i].tags,
                      .ntags = segs[i].ntags,
                      .by = -1};
        tokens[j->nu] = segs[i].n;
        j->slot_of[i] = (int)j->nu++;
    }
    if (!rc) rc = hy_plan_make(pol, tokens, j->nu, &cost, views, m, &p, err);
    if (!rc) {
        /* a runner per worker the plan uses */
        int runner_of[HY_CFG_MAX_WORKERS];
        for (size_t k = 0; k < m; k++) runner_of[k] = -1;
        for (size_t g = 0; g < j->nu; g++) {
            const int k = p.worker[g];
            if (runner_of[k] < 0) {
                runner_of[k] = j->nr;
                j->r[j->nr] = (sc_runner){.job = j, .slot = j->nr, .worker = index[k]};
                j->nr++;
            }
            j->u[g].owner = runner_of[k];
            j->u[g].predicted_s = hy_cost_prefill(&cost, j->u[g].n) / views[k].speed;
        }
        /* the worker is called as a member on the tenant's behalf, never with
         * the tenant's own token */
        j->has_token = svc_member_token(s, tenant, j->token, sizeof j->token) != NULL;
    }
    for (int k = 0; !rc && k < j->nr; k++) rc = hy_rpc_cancel_new(&j->r[k].cancel, err);
    free(tokens);
    free(p.worker), free(p.order), free(p.start_s), free(p.end_s);
    pthread_mutex_lock(&j->mu);
    j->t0_s = hy_now_s();
    for (int k = 0; !rc && k < j->nr; k++) {
        j->r[k].alive = true;
        j->alive++;
        if (pthread_create(&j->r[k].thread, NULL, runner_main, &j->r[k])) {
            j->r[k].alive = false;
            j->alive--;
            continue; /* its segments go to the others, or inline */
        }
        j->r[k].started = true;
    }
    fail_orphans(j);
    pthread_mutex_unlock(&j->mu);
    if (rc) {
        sc_job_end(j, NULL, NULL);
        return rc;
    }
    *out = j;
    return HY_OK;
}

static void job_cancel(sc_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->cancelled = true;
    for (int k = 0; k < j->nr; k++)
        if (j->r[k].cancel) hy_rpc_cancel_fire(j->r[k].cancel);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

int sc_await(void *ctx, size_t i, bool wait, const hy_entry **entry, hy_err *err)
{
    sc_await_ctx *a = ctx;
    sc_job *j = a->job;
    *entry = a->hits[i].entry;
    if (*entry || j->slot_of[i] < 0) return HY_OK;
    const sc_seg *g = &j->u[j->slot_of[i]];
    int rc = HY_OK;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (g->state == SC_READY) {
            *entry = g->entry;
            break;
        }
        if (g->state == SC_FAILED) break; /* built inline */
        if (!wait) {
            rc = HY_EAGAIN;
            break;
        }
        if (a->call && (hy_rpc_call_cancelled(a->call) || hy_rpc_call_ms_left(a->call) <= 0)) {
            const bool late = hy_rpc_call_ms_left(a->call) <= 0;
            pthread_mutex_unlock(&j->mu);
            job_cancel(j);
            return hy_err_set(err, HY_ECANCELED,
                              late ? "the deadline passed while segment %zu was being built"
                                   : "the caller cancelled while segment %zu was being built",
                              i);
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        const long ns = until.tv_nsec + AWAIT_TICK_MS * 1000000L;
        until.tv_sec += ns / 1000000000L;
        until.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&j->cv, &j->mu, &until);
    }
    pthread_mutex_unlock(&j->mu);
    return rc;
}

void sc_job_end(sc_job *j, sc_outcome *out, sc_summary *sum)
{
    if (!j) return;
    job_cancel(j);
    for (int k = 0; k < j->nr; k++)
        if (j->r[k].started) pthread_join(j->r[k].thread, NULL);
    svc_router *rt = j->s->router;
    uint64_t used = 0;
    uint32_t tries = 0;
    for (size_t g = 0; g < j->nu; g++) {
        if (j->u[g].by >= 0) used |= 1ull << (j->u[g].by % 64);
        tries += j->u[g].tries > 1 ? (uint32_t)j->u[g].tries - 1 : 0;
    }
    for (size_t i = 0; out && j->slot_of && i < j->n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        if (j->slot_of[i] < 0) continue;
        const sc_seg *g = &j->u[j->slot_of[i]];
        out[i].shipped = true;
        out[i].built = g->state == SC_READY;
        out[i].stored = g->stored;
        out[i].tier = g->tier;
        if (g->by >= 0) snprintf(out[i].by, sizeof out[i].by, "%s", rt->w[g->by].addr);
    }
    if (sum)
        *sum = (sc_summary){.scattered = (uint32_t)j->nu,
                            .workers = (uint32_t)__builtin_popcountll(used),
                            .retries = tries,
                            .makespan_s = j->last_s};
    for (size_t g = 0; j->u && g < j->nu; g++) hy_entry_free(j->u[g].entry);
    for (int k = 0; j->r && k < j->nr; k++) hy_rpc_cancel_free(j->r[k].cancel);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j->u);
    free(j->slot_of);
    free(j->r);
    free(j);
}
