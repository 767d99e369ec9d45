/*
 * The daemon's configuration (hypic-cached's YAML file): what it serves, how
 * it stores, who may call it and within which limits. Parsed with libyaml and
 * validated as a whole before anything starts; every error names the file,
 * the line, the key (dotted path, e.g. "tiers.host.bytes"; list items as
 * "tenants.list[1].token"), the value and what is allowed. Unknown keys are
 * errors that list the keys allowed there. docs/operations.md lists every key
 * with its default; deploy/hypic-cached.yaml is the same list as a file.
 *
 * Values: sizes are integers with an optional K, M, G or T suffix (or KiB,
 * MiB, GiB, TiB; powers of 1024); counts are decimal integers; booleans are
 * true or false; strings are taken verbatim (an empty value is ""). Relative
 * paths are relative to the daemon's working directory. A token's text never
 * appears in a message or in hy_cached_config_print's output.
 *
 * The limits of each value are in the comments below ("1M..16T": an
 * inclusive range).
 */
#ifndef HY_CACHED_CONFIG_INTERNAL_H
#define HY_CACHED_CONFIG_INTERNAL_H

#include "hy_common.h"
#include "hy_model.h"
#include "hy_tiers.h"

#include <limits.h>
#include <stdio.h>
#include <stdbool.h>

#define HY_CFG_MAX_MODELS   8
#define HY_CFG_MAX_TENANTS  64
#define HY_CFG_NAME_MAX     64  /* model names, including the NUL */
#define HY_CFG_TOKEN_MAX    256 /* bearer tokens, including the NUL */
#define HY_CFG_TOKEN_MIN    16  /* characters a bearer token has at least */
#define HY_CFG_SECRET_MIN   32  /* characters cluster.secret has at least */
#define HY_CFG_ADDR_MAX     256
#define HY_CFG_MAX_WORKERS  64 /* scatter workers listed, spawned, or found by DNS */
#define HY_CFG_MAX_MEMBERS  64 /* cluster.members listed */
#define HY_CFG_MAX_REPLICAS 16 /* cluster.replicas, tenants.list[].replicas */

/* models: 1..HY_CFG_MAX_MODELS items, each with both keys. */
typedef struct hy_cfg_model {
    char name[HY_CFG_NAME_MAX]; /* what requests say in `model`: [A-Za-z0-9._-]{1,63}, unique */
    char dir[PATH_MAX];         /* `path`: the checkpoint directory (non-empty; the daemon
                                 * checks that it exists) */
} hy_cfg_model;

/* tenants.list: 0..HY_CFG_MAX_TENANTS items. */
typedef struct hy_cfg_tenant {
    char name[HY_TENANT_MAX]; /* [A-Za-z0-9._-]{1,63}, unique, never "default" (the tenant of
                               * a daemon without tokens) */
    /* Inline `token`, or the first line of `token_file` with surrounding
     * blanks trimmed (exactly one of the two): HY_CFG_TOKEN_MIN..255
     * printable ASCII characters without spaces, unique. NUL-padded to the
     * end of the array (hy_cached_config_tenant_by_token compares it whole). */
    char token[HY_CFG_TOKEN_MAX];
    uint64_t quota_bytes;   /* `quota`, any size; 0: the default quota (tenants.default_quota) */
    uint32_t max_in_flight; /* 0..65536; 0: limits.in_flight_per_tenant */
    bool admin;             /* `admin: true`: may set policies and sees the whole store's Stats */
    uint32_t replicas;      /* owners of each of its entries, 0..16; 0: cluster.replicas */
} hy_cfg_tenant;

/* cluster.members: 0..HY_CFG_MAX_MEMBERS items, both keys each. */
typedef struct hy_cfg_member {
    char id[HY_CFG_NAME_MAX];      /* [A-Za-z0-9._-]{1,63}, unique */
    char address[HY_CFG_ADDR_MAX]; /* its gRPC host:port */
} hy_cfg_member;

/* scatter.workers: 0..HY_CFG_MAX_WORKERS items. */
typedef struct hy_cfg_worker {
    char address[HY_CFG_ADDR_MAX]; /* a hypic-worker's gRPC host:port (required) */
} hy_cfg_worker;

typedef struct hy_cached_config {
    char path[PATH_MAX]; /* the file it came from ("" for defaults) */
    /* host:port (an IPv6 address in brackets; port 0..65535, 0: any free
     * port). A listen address that is not loopback (127.0.0.0/8, [::1],
     * localhost) is refused unless tenants.list has a tenant. */
    char listen[HY_CFG_ADDR_MAX];      /* gRPC, default "127.0.0.1:7878" */
    char http_listen[HY_CFG_ADDR_MAX]; /* /metrics /healthz /readyz, default "127.0.0.1:7879"; ""
                                        * off. Any address: it serves counters, never entries or
                                        * tokens */
    char tls_cert[PATH_MAX];           /* tls.cert, tls.key: PEM files; both or neither, */
    char tls_key[PATH_MAX];            /* readable at validation; default "" (no TLS) */
    char tls_client_ca[PATH_MAX];      /* tls.client_ca: PEM of the authority client
                                        * certificates chain to (mutual TLS); "" none. With it
                                        * a member's calls must come with one, and this member
                                        * presents tls.cert as its own (clientAuth) */
    bool tls_require_client_cert;      /* tls.require_client_cert: every connection presents
                                        * one (tenants' too); default false */

    hy_cfg_model models[HY_CFG_MAX_MODELS];
    int nmodels; /* >= 1 */

    /* tiers. Each policy's capacity is its tier's bytes. min_tokens (any
     * count) is for admit: min-tokens only and must be 0 with another
     * admission policy. */
    uint64_t host_bytes;          /* tiers.host.bytes 1M..16T, default 1G */
    hy_policy_config host_policy; /* tiers.host.evict (gdsf) / .admit (tinylfu) / .min_tokens (0) */
    char nvme_dir[PATH_MAX];      /* tiers.nvme.path; "" (default): no NVMe tier */
    uint64_t nvme_bytes;          /* tiers.nvme.bytes 1M..1P, default 16G: whole extents, at
                                   * least one and at most 1000000 */
    uint64_t nvme_extent_bytes;   /* tiers.nvme.extent_bytes 1M..1T in 4K steps, default 256M */
    hy_policy_config nvme_policy; /* tiers.nvme.evict (gdsf) / .admit (always) / .min_tokens (0) */
    bool write_through;           /* tiers.nvme.write_through, default false */
    uint64_t hbm_bytes;           /* tiers.hbm.bytes 0 or 1M..16T; 0 (default): no hbm tier */
    int hbm_device;               /* tiers.hbm.device 0..255, default 0 */
    hy_policy_config hbm_policy;  /* tiers.hbm.evict (gdsf) / .admit (tinylfu) / .min_tokens (0) */
    uint64_t ttl_s;               /* tiers.ttl_s 0..3153600000 (100 years): default TTL of
                                   * entries, 0 (default): none */

    /* pic: defaults of requests */
    int seam;                    /* pic.seam (W), default HY_SEAM_DEFAULT, 0..64 */
    float tolerance;             /* pic.tolerance 0..1, default 0.03: entries' head forms
                                  * (hy_entry_repr) */
    hy_entry_dtype dtype;        /* pic.dtype "f32" | "bf16", default bf16: S(body|0) */
    hy_entry_dtype t_dtype;      /* pic.t_dtype, default bf16: T's heads may be bf16 */
    hy_entry_dtype kv_dtype;     /* pic.kv_dtype, default bf16: attention K/V in entries */
    uint32_t top_k;              /* pic.top_k 1..limits.max_top_k, default 5 */
    uint64_t prefix_cache_bytes; /* pic.prefix_cache_bytes 0..1T (mode prefix checkpoints, per
                                  * tenant and model), default 256M */
    float shadow_rate;           /* pic.shadow_rate 0..1, default 0: the fraction of requests
                                  * reusing entries recomputed in full off their path and
                                  * compared (shadow.c) */
    float shadow_kl_warn;        /* pic.shadow_kl_warn 0..1, default 0.01: a comparison's KL
                                  * (nats) past it is logged */

    /* executor */
    int exec_threads;     /* executor.threads 1..256: OpenMP threads per forward pass, default: the
                           * online CPUs (at most 256) */
    int exec_contexts;    /* executor.contexts 1..64: forward passes at once per model, default 1 */
    char exec_mla[16];    /* executor.mla auto|expanded|latent, default auto */
    char exec_weights[8]; /* executor.weights auto|f32|bf16|q8, default auto: a BF16 checkpoint's
                           * matrices kept in bf16 (hy_weights) */
    char exec_device[16]; /* executor.device cpu|cuda|cuda:N|emulated, default cpu: where the
                           * forward passes run (hy_exec_set_device) */
    char pic_reuse[16];   /* pic.reuse auto|fetch|recompute, default auto: how a hit is
                           * used — fetched, or recomputed when that costs less (auto) */
    int max_batch;        /* executor.max_batch 1..65536: tokens per forward step, default 1024 */
    uint64_t keep_context_tokens; /* executor.keep_context_tokens 0..16777216, default 32768:
                                   * positions of attention K/V a context keeps between
                                   * requests; a longer request's are given back after it */

    /* tenants */
    hy_cfg_tenant tenants[HY_CFG_MAX_TENANTS];
    int ntenants;           /* 0: no tokens; every request is tenant "default" */
    uint64_t default_quota; /* tenants.default_quota bytes, any size, 0 (default): unlimited */

    /* limits */
    uint64_t max_message;             /* limits.max_message 4K..1G bytes, default 64M (entries
                                       * stream in chunks) */
    uint32_t max_segments;            /* limits.max_segments 1..65536 per request, default 256 */
    uint64_t max_tokens;              /* limits.max_tokens 1..16777216 per request (segments +
                                       * query), default 262144 */
    uint32_t max_top_k;               /* limits.max_top_k 1..1024, default 100 */
    uint32_t max_new_tokens;          /* limits.max_new_tokens 0..65536, default 256 */
    uint32_t in_flight_per_tenant;    /* limits.in_flight_per_tenant 1..65536, default 64 */
    uint32_t queue;                   /* limits.queue 0..65536: requests waiting for an executor,
                                       * default 64 (0: none wait) */
    uint32_t max_lease_ms;            /* limits.max_lease_ms 1..3600000, default 10000 */
    uint64_t pinned_bytes_per_tenant; /* limits.pinned_bytes_per_tenant: bytes of one tenant's
                                       * entries Pin may hold (0: a quarter of the host tier) */
    uint64_t lease_bytes_per_tenant;  /* limits.lease_bytes_per_tenant: bytes one tenant's
                                       * Lookup leases may hold; 0 (default): a quarter of
                                       * tiers.host.bytes */
    uint32_t watchers;                /* limits.watchers 0..1024: Watch streams at once, default 16
                                       * (0: Watch is refused) */
    uint32_t workers;                 /* limits.workers 2..1024: calls served at once, default 32 */
    uint32_t page_size;       /* limits.page_size 1..100000: List's maximum page, default 1000 */
    uint64_t max_entry_bytes; /* limits.max_entry_bytes 4K..1T a PutEntry may send, default 1G */
    uint32_t drain_ms;        /* limits.drain_ms 0..600000: SIGTERM's wait for in-flight
                               * calls, default 10000 */
    uint32_t idle_ms;         /* limits.idle_ms 0..3600000: the longest one receive or send
                               * of a call waits for its client, default 15000 (0: none) */
    uint32_t watchers_per_tenant; /* limits.watchers_per_tenant 1..1024: one tenant's Watch
                                   * streams, default 4 */

    /* bulk transports (docs/transports.md) */
    char tp_tcp_listen[HY_CFG_ADDR_MAX]; /* transport.tcp_listen: the data port, host:port;
                                          * "" (default): listen's host, any free port */
    char tp_shm_socket[108];         /* transport.shm_socket: the Unix socket shm clients attach on;
                                      * "" (default): $TMPDIR (or /tmp)/hypic-cached-<grpc port>.sock;
                                      * "off": no shm */
    char tp_rdma[16];                /* transport.rdma auto|off|required, default auto */
    char tp_rdma_device[64];         /* transport.rdma_device: "" (default) the first active one */
    uint32_t tp_max_sessions;        /* transport.max_sessions 1..65536 open at once, default 64 */
    uint64_t tp_max_buffer;          /* transport.max_buffer 4K..16T per session, default 16G */
    uint32_t tp_sessions_per_tenant; /* transport.sessions_per_tenant 1..65536, default 16 */
    uint64_t tp_tenant_bytes;        /* transport.tenant_bytes 4K..64T: one tenant's sessions'
                                      * buffers together, default 32G */

    /* scatter workers (docs/scheduler.md): cold segments of a request are
     * built on workers while the combiner composes in request order. No
     * worker listed, spawned or found: every miss is built inline. */
    hy_cfg_worker scatter_workers[HY_CFG_MAX_WORKERS]; /* scatter.workers[].address */
    int nscatter_workers;
    uint32_t scatter_spawn;            /* scatter.spawn 0..64: local hypic-worker processes the
                                        * daemon starts (on loopback, port 0) and restarts, default 0 */
    int scatter_spawn_threads;         /* scatter.spawn_threads 1..256: executor threads each,
                                        * default 1 */
    char scatter_worker_bin[PATH_MAX]; /* scatter.worker_bin: the program spawned; "" (default):
                                        * hypic-worker beside the daemon's own executable */
    char scatter_dns[HY_CFG_ADDR_MAX]; /* scatter.dns name:port: every address the name resolves
                                        * to is a worker (a headless Service); "" (default) none */
    char scatter_policy[16];           /* scatter.policy lpt | round-robin, default lpt */
    uint32_t scatter_timeout_ms;       /* scatter.timeout_ms 1..3600000: one segment's Build on a
                                        * worker, default 60000 */
    uint32_t scatter_retries;          /* scatter.retries 0..16: other workers tried, default 2 */
    uint32_t scatter_min_tokens;       /* scatter.min_tokens 0..16777216: shorter misses are built
                                        * inline, default 256 */
    uint32_t scatter_probe_ms;         /* scatter.probe_ms 50..600000: Health probes, DNS and
                                        * spawned processes checked this often, default 1000 */

    /* cluster mode (docs/deploy.md#cluster-mode): entries sharded over the
     * members by rendezvous hashing of their keys (hy_cluster.h). */
    char cluster_id[HY_CFG_NAME_MAX];        /* cluster.id: this member's id; "": one node */
    char cluster_secret[HY_CFG_TOKEN_MAX];   /* cluster.secret (or _file): what members and
                                              * scatter workers authenticate each other with;
                                              * needed with tenants */
    char cluster_tls_ca[PATH_MAX];           /* cluster.tls_ca: PEM the peers' and workers'
                                              * certificates chain to; "": tls.cert's own */
    char cluster_tls_server_name[256];       /* cluster.tls_server_name: the name their
                                              * certificates carry; "": the address's host */
    char cluster_advertise[HY_CFG_ADDR_MAX]; /* cluster.advertise: the gRPC host:port peers and
                                              * clients reach it at; "": listen (its bound port) */
    uint32_t cluster_replicas;               /* cluster.replicas 1..16, default 1 */
    hy_cfg_member cluster_members[HY_CFG_MAX_MEMBERS]; /* cluster.members: a static set */
    int ncluster_members;
    char cluster_etcd[1024];                       /* cluster.etcd.endpoints: "host:port,..."; "":
                                                    * no etcd (the static set) */
    char cluster_etcd_prefix[HY_CFG_NAME_MAX * 2]; /* cluster.etcd.prefix, default
                                                    * "/hypic/members/" */
    uint32_t cluster_ttl_s;                        /* cluster.etcd.ttl_s 1..3600: the lease, default
                                                    * 10 */
    char cluster_etcd_tls_ca[PATH_MAX];   /* cluster.etcd.tls_ca: the CA PEM etcd's certificates
                                           * chain to: https endpoints; "": plaintext */
    char cluster_etcd_tls_cert[PATH_MAX]; /* cluster.etcd.tls_cert, tls_key: a client certificate
                                           * for etcd (--client-cert-auth); both or neither */
    char cluster_etcd_tls_key[PATH_MAX];
    char cluster_etcd_tls_server_name[256];       /* the name etcd's certificate carries; "": the
                                                   * endpoint's host */
    char cluster_etcd_user[HY_CFG_NAME_MAX];      /* cluster.etcd.user: etcd's auth; "": none */
    char cluster_etcd_password[HY_CFG_TOKEN_MAX]; /* cluster.etcd.password (or _file) */
    uint64_t cluster_transport_bytes; /* cluster.transport_bytes 0..16G, default 64M: the
                                       * buffer of a transport session to a member
                                       * (entries fetched into it); 0: gRPC streams */
    uint32_t cluster_peer_timeout_ms; /* cluster.peer_timeout_ms 1..600000, default 2000:
                                       * one call to a peer */

    /* logging */
    int log_level;     /* log.level debug|info|warn|error (HY_LOG_*), default info */
    bool log_requests; /* log.requests: one line per request, default true */
} hy_cached_config;

/* The defaults above, with one model "recall" at "models/hypic-recall" (the
 * trained model committed in the repository, relative to the working
 * directory), no NVMe tier, no tenants. Zeroes the
 * whole struct first (padding and the bytes after each string's NUL too). */
void hy_cached_config_default(hy_cached_config *c);
/* Parses a YAML document (text[0..len); path is used in messages and kept in
 * c->path) over the defaults, then validates the whole. A list given in the
 * file (models, tenants.list) replaces the default one. Unknown keys are
 * errors. HY_EINVAL for a bad file, HY_EIO for an unreadable tls file or
 * token_file (naming its path), HY_ENOMEM; c is untouched on error. An empty
 * document gives the defaults. */
int hy_cached_config_parse(const char *text, size_t len, const char *path, hy_cached_config *c,
                           hy_err *err);
/* Reads (HY_EIO naming the path when it cannot; at most 1 MiB) and parses the file. */
int hy_cached_config_load(const char *path, hy_cached_config *c, hy_err *err);
/* Whether addr ("host:port") names a loopback host (127.0.0.0/8, [::1],
 * localhost). */
bool hy_cached_config_is_loopback(const char *addr);
/* Validates a configuration changed after parsing (command-line overrides of
 * its strings) as hy_cached_config_parse validates the whole of a file:
 * addresses, the loopback rule, tls, names, tokens, the keys that depend on
 * one another; sets the policies' capacities. Messages name c->path (or
 * "(command line)") and the key, without a line. Numbers are checked against
 * their own limits only as a file is read: set them within those. */
int hy_cached_config_validate(hy_cached_config *c, hy_err *err);
/* The tenant whose token is `token` (constant-time comparison over every
 * tenant's token), or NULL. */
const hy_cfg_tenant *hy_cached_config_tenant_by_token(const hy_cached_config *c, const char *token);
/* Writes the effective configuration as YAML (for --check-config --print):
 * every key, tokens as "<redacted>" (token_file as the token it read), so
 * that it parses back to the same configuration once the tokens are put
 * back. */
void hy_cached_config_print(const hy_cached_config *c, FILE *out);
/* Writes every key of the table, one a line: its dotted name (list items'
 * fields as "models[].name"), a tab and its default as the file would write
 * it — "" for an empty string, [] for a list empty by default, - when the
 * default is computed at start (executor.threads, the embedded model) or the
 * key has none (a list item's required field, a token_file). Each default
 * shown, written in a file, gives the default configuration. For hypic-cached
 * --print-config-keys: the docs' key tables are checked against it. */
void hy_cached_config_print_keys(FILE *out);
/* The keys whose values differ between a (the running configuration) and b
 * (a file reloaded on SIGHUP) among those the option table marks as taking
 * effect at the next start only — every key but the tenants, the quotas,
 * limits.in_flight_per_tenant and the tiers' evict, admit and min_tokens —,
 * comma-separated into out (cut at cap); how many. A list's items are
 * compared index by index. */
int hy_cached_config_restart_keys(const hy_cached_config *a, const hy_cached_config *b, char *out,
                                  size_t cap);
/* Whether SIGHUP applies a change of key ("tenants.list[].quota"): 1, 0 when
 * it takes effect at the next start, -1 for no such key. */
int hy_cached_config_key_reloads(const char *key);
/* What a start would fail on that the text does not show (config_check.c),
 * looked at from the working directory: each model's directory, its
 * config.json (parsed) and weights readable; tiers.nvme.path a writable
 * directory (or one that can be made) that no other process holds. The
 * message names the file and the key; a relative path that does not resolve
 * says where it was looked for and what to do. */
int hy_cached_config_check_files(const hy_cached_config *c, hy_err *err);

#endif
