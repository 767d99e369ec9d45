/*
 * hypic-cached: the HYPIC cache-tier daemon (docs/operations.md).
 *
 *   hypic-cached [--config FILE] [--init-models] [--ready-file FILE]
 *                [--listen ADDR] [--http-listen ADDR] [--threads N] [--nvme-dir DIR]
 *   hypic-cached --check-config FILE [--print]
 *
 * Start: the configuration is read and validated as a whole, then what it
 * names is looked at on disk (hy_cached_config_check_files: the models'
 * files, the NVMe directory free; --check-config stops there), models opened
 * (--init-models generates a missing one whose name is a built-in preset),
 * the store opened (the NVMe tier replays its journal), then the gRPC and
 * HTTP listeners start, the scatter workers are started or found (the router,
 * router_internal.h) and --ready-file is written with the addresses bound.
 * Signals, acted on by the main thread (blocked in the threads it starts,
 * recorded by a handler when one reaches a library's own thread): SIGHUP
 * reloads tenants and policies; SIGTERM or SIGINT drains — new calls are
 * refused UNAVAILABLE, calls in flight finish up to limits.drain_ms, then the
 * rest are cancelled, write-back entries are flushed to NVMe and RocksDB is
 * closed; a second SIGTERM meanwhile changes nothing.
 *
 * Built a second time as hypic-worker (HY_CACHED_WORKER): a scatter worker
 * (docs/scheduler.md) with the same configuration file and flags, serving
 * only Build (a segment in, its entry streamed out), Health and Stats — the
 * other methods answer UNIMPLEMENTED — with no transports and a store it
 * never fills (the host tier at its minimum, no NVMe tier).
 */
#include "http_internal.h"
#include "cluster_internal.h"
#include "router_internal.h"
#include "service_internal.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Signals that reached a thread other than main's: some libraries' threads
 * (gRPC's, RocksDB's, OpenMP's) set their own signal masks, so blocking the
 * signals in main before they start is not enough. The handler only records
 * them; main acts on them at its next tick. A second SIGTERM during the
 * drain is recorded and ignored, never the default (death). */
static volatile sig_atomic_t g_term, g_hup;

#ifdef HY_CACHED_WORKER
#define PROG "hypic-worker"
#else
#define PROG "hypic-cached"
#endif

/* The heap against fragmentation. glibc serves a block of 128 KiB or more
 * with its own mapping, returned at free — until the first such free, after
 * which it raises that threshold to the block's size (up to 32 MiB) and
 * carves large blocks from its arenas too. With dozens of threads
 * allocating there (gRPC's, the workers', RocksDB's memtable blocks of 1 MiB
 * filled and dropped in turn), the holes large blocks leave fill with small
 * ones that live on, and the resident set crept up ~0.6 MiB a minute under
 * hypic-bench soak while the live heap stayed flat (heaptrack: 21.8 MiB live
 * at minute 6, 19.8 at minute 11). A fixed threshold (MMAP_THRESHOLD) keeps
 * large blocks out of the arenas for good: in the same soak the resident set
 * held flat, some 10 MiB lower (docs/scale.md). malloc_trim, every
 * TRIM_EVERY_S, gives back the arenas' free pages besides. */
#define MMAP_THRESHOLD (256 << 10)
#define TRIM_EVERY_S   30
static void trim_heap(void)
{
#ifdef __GLIBC__
    static time_t last;
    const time_t now = time(NULL);
    if (now - last < TRIM_EVERY_S) return;
    last = now;
    const double t0 = hy_now_s();
    const int released = malloc_trim(0);
    hy_log(HY_LOG_DEBUG, "malloc_trim: %s in %.2f ms",
           released ? "pages released" : "nothing to release", 1e3 * (hy_now_s() - t0));
#endif
}

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        g_hup = 1;
    else
        g_term = 1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " [--config FILE] [--init-models] [--ready-file FILE]\n"
               "                    [--listen HOST:PORT] [--http-listen HOST:PORT] [--threads N]\n"
               "                    [--nvme-dir DIR] [--cluster-id ID] [--advertise HOST:PORT]\n"
               "       " PROG " --check-config FILE [--print]\n"
               "       " PROG " --print-config-keys   (every key and its default)\n"
#ifdef HY_CACHED_WORKER
               "A scatter worker: serves Build, Health and Stats of hypic.v1 (gRPC) and\n"
               "/metrics, /healthz, /readyz (HTTP).\n"
#else
               "Serves hypic.v1 (gRPC) and /metrics, /healthz, /readyz (HTTP).\n"
#endif
               "Without --config: the defaults (docs/operations.md), model 'recall' in\n"
               "models/hypic-recall, no NVMe tier, no tokens, 127.0.0.1 only. Relative\n"
               "paths, in the file or not, are resolved against the working directory.\n"
               "--check-config also looks at what the file names on disk (the models'\n"
               "files, the NVMe directory) as a start would, without starting.\n");
}

/* Generates a missing model whose name is a preset (the embedded default). */
static int init_models(const hy_cached_config *cfg, hy_err *err)
{
    for (int i = 0; i < cfg->nmodels; i++) {
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/config.json", cfg->models[i].dir);
        struct stat sb;
        if (stat(path, &sb) == 0) continue;
        bool preset = false;
        for (int p = 0; hy_presets[p]; p++)
            preset |= strcmp(hy_presets[p], cfg->models[i].name) == 0;
        if (!preset)
            return hy_err_set(err, HY_ENOTFOUND,
                              "model '%s': %s is missing and '%s' is not a built-in preset",
                              cfg->models[i].name, path, cfg->models[i].name);
        hy_log(HY_LOG_INFO, "generating model '%s' (preset, seed 1) in %s", cfg->models[i].name,
               cfg->models[i].dir);
        int rc = hy_model_init(cfg->models[i].name, 1, cfg->models[i].dir, "F32", err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* The host part of "host:port" with the port replaced. */
static void with_port(const char *addr, int port, char *out, size_t cap)
{
    const char *c = strrchr(addr, ':');
    const int hl = c ? (int)(c - addr) : (int)strlen(addr);
    snprintf(out, cap, "%.*s:%d", hl, addr, port);
}

static int write_ready(const char *path, const char *grpc, const char *http)
{
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return HY_EIO;
    fprintf(f, "grpc=%s\nhttp=%s\npid=%d\n", grpc, http, (int)getpid());
    if (fclose(f) != 0 || rename(tmp, path) != 0) return HY_EIO;
    return HY_OK;
}

/* What main started stopped, in the reverse order, then the service
 * closed: the transports (the rpc server is stopped: no transfer runs), the
 * router (no request runs: no job either), the write-back flush — what only
 * this member holds reaches its own disk before any time goes to peers,
 * which may not answer — then the cluster (what is queued for other owners
 * gets about 2 s, then the membership is left). Non-zero when the flush
 * failed. Each stop is a no-op for what did not start. */
static int stop_service(hy_svc *svc)
{
    svc_transport_stop(svc);
    svc_router_stop(svc);
    const int rc = svc_flush(svc);
    svc_cluster_stop(svc);
    svc_close(svc);
    return rc;
}

int main(int argc, char **argv)
{
    /* The executor's OpenMP threads wait passively between parallel regions
     * unless told otherwise: spinning takes the cores the gRPC workers and
     * other requests need (measured: Prefill p50 6.3 ms passive, 7.6-9.0 ms
     * spinning, on 2 cores under load). Read when OpenMP starts, below. */
    setenv("OMP_WAIT_POLICY", "passive", 0);
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD); /* see trim_heap */
#endif
    const char *config = NULL, *check = NULL, *ready_file = NULL, *listen = NULL, *http = NULL,
               *threads = NULL, *cluster_id = NULL, *advertise = NULL, *nvme_dir = NULL;
    bool print = false, init = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--print-config-keys") == 0) {
            hy_cached_config_print_keys(stdout);
            return 0;
        } else if (strcmp(a, "--print") == 0) {
            print = true;
        } else if (strcmp(a, "--init-models") == 0) {
            init = true;
        } else if (i + 1 < argc && strcmp(a, "--config") == 0) {
            config = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--check-config") == 0) {
            check = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--ready-file") == 0) {
            ready_file = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--listen") == 0) {
            listen = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--http-listen") == 0) {
            http = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--nvme-dir") == 0) {
            nvme_dir = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--threads") == 0) {
            threads = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--cluster-id") == 0) {
            cluster_id = argv[++i];
        } else if (i + 1 < argc && strcmp(a, "--advertise") == 0) {
            advertise = argv[++i];
        } else {
            fprintf(stderr, PROG ": unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    static hy_cached_config cfg; /* large: not on the stack */
    hy_err e = {0};
    if (check) {
        if (hy_cached_config_load(check, &cfg, &e) || hy_cached_config_check_files(&cfg, &e)) {
            fprintf(stderr, PROG ": %s\n", e.msg);
            return 1;
        }
        printf("%s: valid (%d model(s), %d tenant(s), listen %s)\n", check, cfg.nmodels,
               cfg.ntenants, cfg.listen);
        if (print) hy_cached_config_print(&cfg, stdout);
        return 0;
    }
    if (config) {
        if (hy_cached_config_load(config, &cfg, &e)) {
            fprintf(stderr, PROG ": %s\n", e.msg);
            return 1;
        }
    } else {
        hy_cached_config_default(&cfg);
    }
    /* command-line overrides, validated again with everything else */
    if (listen || http || cluster_id || advertise || nvme_dir) {
        if (listen) snprintf(cfg.listen, sizeof cfg.listen, "%s", listen);
        if (http) snprintf(cfg.http_listen, sizeof cfg.http_listen, "%s", http);
        /* tiers.nvme.path (a second `make run` beside the first: NVME_DIR) */
        if (nvme_dir) snprintf(cfg.nvme_dir, sizeof cfg.nvme_dir, "%s", nvme_dir);
        /* a StatefulSet's pods share one configuration: each its own id */
        if (cluster_id) snprintf(cfg.cluster_id, sizeof cfg.cluster_id, "%s", cluster_id);
        if (advertise)
            snprintf(cfg.cluster_advertise, sizeof cfg.cluster_advertise, "%s", advertise);
        if (hy_cached_config_validate(&cfg, &e)) {
            fprintf(stderr, PROG ": %s\n", e.msg);
            return 1;
        }
    }
    if (threads) { /* executor.threads from the command line (spawned scatter workers) */
        char *end;
        long t = strtol(threads, &end, 10);
        if (*end || t < 1 || t > 256) {
            fprintf(stderr, PROG ": --threads: '%s' is not 1..256\n", threads);
            return 2;
        }
        cfg.exec_threads = (int)t;
    }
    hy_log_set_level(cfg.log_level);
#ifdef HY_CACHED_WORKER
    if (cfg.ntenants && !cfg.cluster_secret[0]) {
        fprintf(stderr, PROG ": cluster.secret: needed with tenants: the daemon calls a "
                             "worker as a member, never with a tenant's token\n");
        return 1;
    }
    char log_name[64]; /* a spawned worker shares the daemon's stderr: say whose line it is */
    snprintf(log_name, sizeof log_name, "hypic-worker %.40s", cfg.listen);
    hy_log_set_name(log_name);
    cfg.host_bytes = cfg.host_policy.capacity = 1u << 20; /* a worker stores nothing */
    cfg.nvme_dir[0] = '\0';
    cfg.hbm_bytes = cfg.hbm_policy.capacity = 0;
#endif
    if ((init && init_models(&cfg, &e)) || hy_cached_config_check_files(&cfg, &e)) {
        fprintf(stderr, PROG ": %s\n", e.msg);
        return 1;
    }

    /* Signals go to the main thread only: every thread started from here
     * on inherits this mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    static hy_svc svc;
    if (svc_open(&svc, &cfg, &e)) {
        fprintf(stderr, PROG ": %s\n", e.msg);
        stop_service(&svc);
        return 1;
    }
    char *cert = NULL, *key = NULL, *client_ca = NULL;
    size_t len;
    if (cfg.tls_cert[0] && (hy_read_file(cfg.tls_cert, 1 << 20, &cert, &len, &e) ||
                            hy_read_file(cfg.tls_key, 1 << 20, &key, &len, &e) ||
                            (cfg.tls_client_ca[0] &&
                             hy_read_file(cfg.tls_client_ca, 1 << 20, &client_ca, &len, &e)))) {
        fprintf(stderr, PROG ": tls: %s\n", e.msg);
        hy_free(cert);
        hy_free(key);
        stop_service(&svc);
        return 1;
    }
    const char *dedicated[SVC_METHODS + 1]; /* probes never wait */
    svc_dedicated_methods(dedicated);
    hy_rpc_server_config rc = {.address = cfg.listen,
                               .workers = (int)cfg.workers,
                               .max_message = cfg.max_message,
                               .idle_ms = cfg.idle_ms,
                               .handler_receives = true,
                               .dedicated = dedicated,
                               .tls_cert_pem = cert,
                               .tls_key_pem = key,
                               .tls_client_ca_pem = client_ca,
                               .tls_require_client_cert = cfg.tls_require_client_cert,
                               .on_refused = svc_refused};
    hy_rpc_server *rpc = NULL;
    hy_http *web = NULL;
    char grpc_addr[HY_CFG_ADDR_MAX + 8], http_addr[HY_CFG_ADDR_MAX + 8] = "";
    hy_http_handlers hh = {.app = &svc, .metrics = svc_metrics_render, .ready = svc_ready};
    hy_rpc_handler handlers[SVC_METHODS];
#ifdef HY_CACHED_WORKER
    svc_handlers(handlers, true);
    const bool router = false;
    const bool transports = false;
#else
    svc_handlers(handlers, false);
    const bool transports = true;
    const bool router = true;
#endif
    const char *moved_by = NULL; /* the flag that moves a listener whose address is taken */
    int failed = hy_rpc_server_start(&rc, handlers, &svc, &rpc, &e);
    if (failed == HY_EIO) moved_by = "--listen";
    if (!failed && transports) failed = svc_transport_start(&svc, hy_rpc_server_port(rpc), &e);
    if (!failed && cfg.http_listen[0] &&
        (failed = hy_http_start(cfg.http_listen, &hh, &web, &e)) == HY_EIO)
        moved_by = "--http-listen";
    if (!failed && router) failed = svc_router_start(&svc, &e);
    if (failed) {
        fprintf(stderr, PROG ": %s\n", e.msg);
        if (moved_by)
            fprintf(stderr, PROG ": another address: %s HOST:PORT (port 0 picks a free one)%s\n",
                    moved_by, router ? "; make run takes PORT=N and HTTP_PORT=N" : "");
        hy_rpc_server_stop(rpc); /* NULL when it did not start */
        hy_free(cert);
        hy_free(key);
        hy_free(client_ca);
        stop_service(&svc);
        return 1;
    }
    with_port(cfg.listen, hy_rpc_server_port(rpc), grpc_addr, sizeof grpc_addr);
    if (web) with_port(cfg.http_listen, hy_http_port(web), http_addr, sizeof http_addr);
    if (router && svc_cluster_start(&svc, grpc_addr, &e)) { /* serving: peers may call at once */
        fprintf(stderr, PROG ": %s\n", e.msg);
        hy_rpc_server_stop(rpc);
        hy_http_stop(web);
        hy_free(cert);
        hy_free(key);
        hy_free(client_ca);
        stop_service(&svc);
        return 1;
    }
    if (!cert && !svc.open_access && !hy_cached_config_is_loopback(cfg.listen))
        hy_log(HY_LOG_WARN,
               "listening on %s without TLS: bearer tokens cross the network in "
               "clear text (set tls.cert and tls.key)",
               cfg.listen);
    svc.ready = true;
    hy_log(HY_LOG_INFO, PROG " %s serving hypic.v1 on %s%s (%s), metrics on %s; pid %d",
           HY_CACHED_VERSION, grpc_addr, cert ? " with TLS" : "",
           svc.open_access ? "no tokens: every caller is tenant 'default'" : "bearer tokens",
           http_addr[0] ? http_addr : "(off)", (int)getpid());
    if (ready_file && write_ready(ready_file, grpc_addr, http_addr))
        hy_log(HY_LOG_ERROR, "cannot write the ready file %s: %s", ready_file, strerror(errno));

    for (;;) {
        struct timespec tick = {0, 200 * 1000000};
        int sig = sigtimedwait(&sigs, NULL, &tick);
        svc_lease_reap(&svc, false);
        trim_heap();
        if (g_term) sig = SIGTERM, g_term = 0;
        if (g_hup && sig != SIGTERM) sig = SIGHUP, g_hup = 0;
        if (sig == SIGHUP) {
            static hy_cached_config next;
            hy_err re = {0};
            if (!cfg.path[0])
                hy_log(HY_LOG_WARN, "SIGHUP: started without --config, nothing to reload");
            else if (hy_cached_config_load(cfg.path, &next, &re) || svc_reload(&svc, &next, &re))
                hy_log(HY_LOG_ERROR, "SIGHUP: reload refused, the running configuration stays: %s",
                       re.msg);
            else
                hy_log(HY_LOG_INFO, "SIGHUP: tenants and policies reloaded from %s", cfg.path);
        } else if (sig == SIGTERM || sig == SIGINT) {
            break;
        }
    }

    /* Drain: refuse new calls, let those in flight finish, then stop. */
    hy_log(HY_LOG_INFO, "draining: %d call(s) in flight, waiting up to %u ms",
           atomic_load(&svc.in_flight), cfg.drain_ms);
    svc.draining = true;
    svc_cluster_leave(&svc); /* peers and clients stop sending here */
    pthread_mutex_lock(&svc.hub.mu);
    pthread_cond_broadcast(&svc.hub.cv);
    pthread_mutex_unlock(&svc.hub.mu);
    for (int i = 0; i < svc.nmodels; i++) svc_exec_wake_all(&svc.models[i]);
    const double until = hy_now_s() + cfg.drain_ms / 1e3;
    while (atomic_load(&svc.in_flight) > 0 && hy_now_s() < until) usleep(10000);
    if (atomic_load(&svc.in_flight) > 0)
        hy_log(HY_LOG_WARN, "drain: %d call(s) still running after %u ms: cancelling them",
               atomic_load(&svc.in_flight), cfg.drain_ms);
    hy_rpc_server_stop(rpc);
    hy_http_stop(web);
    const int frc = stop_service(&svc);
    hy_free(cert);
    hy_free(key);
    hy_free(client_ca);
    if (frc) {
        hy_log(HY_LOG_ERROR, "stopped, but write-back entries were lost (see above)");
        return 1;
    }
    hy_log(HY_LOG_INFO, "stopped cleanly");
    return 0;
}
