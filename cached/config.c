/*
 * hypic-cached's configuration file (config_internal.h): one table, k_opts,
 * holds every key — its dotted name, its type, where it lands in
 * hy_cached_config, its limits and its default as YAML text — and everything
 * else is driven by it: the defaults are the table's texts run through the
 * same setters as a file's values, the walker over libyaml's document tree
 * finds each key there (or reports it unknown, listing the keys the table
 * allows at that place), and the printer writes the table back out. Sections
 * ("tiers.host") are not entries: they are the prefixes of entries' names.
 * List items (models, tenants.list) have their fields under "<list>[].";
 * an item with one field (scatter.workers) may be that field's value alone.
 * A key of addresses (cluster.etcd.endpoints) is one comma-separated string
 * or a YAML sequence of them, joined with commas.
 *
 * A value is checked where it is read, against its own limits, with the line
 * it came from; what involves several keys (top_k against max_top_k, tokens
 * unique, a non-loopback listener needing tenants, tls in pairs) is checked
 * once the whole file has been read, naming the line of the key involved
 * when the file gave it (hy_cached_config_validate runs the same checks on a
 * configuration changed in memory). Tokens never appear in messages.
 */
#include "config_internal.h"

#include <ctype.h>
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#define KIB (1ull << 10)
#define MIB (1ull << 20)
#define GIB (1ull << 30)
#define TIB (1ull << 40)
#define PIB (1ull << 50)

#define CFG_FILE_MAX       (1u << 20)    /* bytes of a configuration file */
#define CFG_TOKEN_FILE_MAX (64u << 10)   /* bytes of a token_file */
#define CFG_MAX_EXTENTS    1000000u      /* six-digit extent file ids (docs/store-format.md) */
#define CFG_TTL_MAX        3153600000ull /* 100 years, in seconds */
#define CFG_KEY_MAX        64            /* a dotted key path, with its NUL */

#define STR_(x) #x
#define STR(x)  STR_(x)

typedef enum opt_kind {
    OPT_STR,        /* char[cap], verbatim */
    OPT_ADDRS,      /* char[cap]: addresses joined by commas, given so or as a YAML sequence */
    OPT_TOKEN,      /* char[cap], verbatim; never echoed or printed */
    OPT_TOKEN_FILE, /* the first line of the named file into the OPT_TOKEN at off */
    OPT_SIZE,       /* uint64_t bytes, with an optional K/M/G/T suffix */
    OPT_U64,        /* uint64_t count */
    OPT_U32,        /* uint32_t count */
    OPT_INT,        /* int count */
    OPT_BOOL,       /* bool */
    OPT_EVICT,      /* the evict of the hy_policy_config at off */
    OPT_ADMIT,      /* the admit of the hy_policy_config at off */
    OPT_DTYPE,      /* hy_entry_dtype */
    OPT_TOL,        /* float in [0, 1], a decimal number */
    OPT_LEVEL,      /* int, HY_LOG_* */
    OPT_LIST,       /* a sequence of mappings: items of cap bytes at off, their count (int) at
                     * count; min..max items; the fields are the entries "<name>[].<field>" */
} opt_kind;

enum { NEED_ANY = 0, NEED_ALWAYS = 1, NEED_ONE_OF = 2 };

/* When a changed value takes effect: at the next start, or at a SIGHUP
 * reload too (svc_reload applies it; hy_cached_config_restart_keys names
 * the other keys a reloaded file changes). */
enum { RESTART = 0, RELOAD = 1 };

typedef struct opt {
    const char *name; /* dotted path; list item fields as "models[].name" */
    opt_kind kind;
    size_t off;        /* in hy_cached_config, or in the list item */
    size_t cap;        /* strings: bytes with the NUL; lists: bytes per item */
    uint64_t min, max; /* numbers: inclusive limits; lists: items */
    const char *def;   /* the default, as it would be written in the file; NULL: none */
    size_t count;      /* lists: offset of the item count */
    int need;          /* list item fields: NEED_ALWAYS, or NEED_ONE_OF (exactly one of those) */
    int reload;        /* RESTART or RELOAD */
} opt;

/* Entries of the table: strings, numbers within [lo, hi], named values
 * (booleans, policies, dtype, log level), lists and their items' fields;
 * each ends with when a change takes effect (r: RESTART or RELOAD). */
/* clang-format off */
#define M_(m)  offsetof(hy_cached_config, m)
#define MS_(m) sizeof(((hy_cached_config *)0)->m)
#define STRING(name, m, def, r)               {name, OPT_STR, M_(m), MS_(m), 0, 0, def, 0, NEED_ANY, r}
#define ADDRS(name, m, def, r)               {name, OPT_ADDRS, M_(m), MS_(m), 0, 0, def, 0, NEED_ANY, r}
#define NUMBER(name, kind, m, lo, hi, def, r) {name, kind, M_(m), 0, lo, hi, def, 0, NEED_ANY, r}
#define NAMED(name, kind, m, def, r)          {name, kind, M_(m), 0, 0, 0, def, 0, NEED_ANY, r}
#define TOKEN(name, kind, m, r)               {name, kind, M_(m), MS_(m), 0, 0, NULL, 0, NEED_ANY, r}
#define LIST(name, m, T, lo, hi, n, r) \
    {name, OPT_LIST, M_(m), sizeof(T), lo, hi, NULL, M_(n), NEED_ANY, r}
#define ITEM_STRING(name, kind, T, m, need, r) \
    {name, kind, offsetof(T, m), sizeof(((T *)0)->m), 0, 0, NULL, 0, need, r}
#define ITEM_NUMBER(name, kind, T, m, lo, hi, def, r) \
    {name, kind, offsetof(T, m), 0, lo, hi, def, 0, NEED_ANY, r}
#define POLICY(tier, evict, admit, r)                                              \
    NAMED("tiers." #tier ".evict", OPT_EVICT, tier##_policy, evict, r),            \
    NAMED("tiers." #tier ".admit", OPT_ADMIT, tier##_policy, admit, r),            \
    NUMBER("tiers." #tier ".min_tokens", OPT_U32, tier##_policy.min_tokens, 0, UINT32_MAX, "0", r)
/* clang-format on */

/* Every key, in the order of the file (the printer keeps it; a section's keys
 * stay together). docs/operations.md and deploy/hypic-cached.yaml follow it. */
static const opt k_opts[] = {
    STRING("listen", listen, "127.0.0.1:7878", RESTART),
    STRING("http_listen", http_listen, "127.0.0.1:7879", RESTART),
    STRING("tls.cert", tls_cert, "", RESTART),
    STRING("tls.key", tls_key, "", RESTART),
    STRING("tls.client_ca", tls_client_ca, "", RESTART),
    NAMED("tls.require_client_cert", OPT_BOOL, tls_require_client_cert, "false", RESTART),
    LIST("models", models, hy_cfg_model, 1, HY_CFG_MAX_MODELS, nmodels, RESTART),
    ITEM_STRING("models[].name", OPT_STR, hy_cfg_model, name, NEED_ALWAYS, RESTART),
    ITEM_STRING("models[].path", OPT_STR, hy_cfg_model, dir, NEED_ALWAYS, RESTART),
    NUMBER("tiers.host.bytes", OPT_SIZE, host_bytes, MIB, 16 * TIB, "1G", RESTART),
    POLICY(host, "gdsf", "tinylfu", RELOAD),
    STRING("tiers.nvme.path", nvme_dir, "", RESTART),
    NUMBER("tiers.nvme.bytes", OPT_SIZE, nvme_bytes, MIB, PIB, "16G", RESTART),
    NUMBER("tiers.nvme.extent_bytes", OPT_SIZE, nvme_extent_bytes, MIB, TIB, "256M", RESTART),
    POLICY(nvme, "gdsf", "always", RELOAD),
    NAMED("tiers.nvme.write_through", OPT_BOOL, write_through, "false", RESTART),
    NUMBER("tiers.hbm.bytes", OPT_SIZE, hbm_bytes, 0, 16 * TIB, "0", RESTART),
    NUMBER("tiers.hbm.device", OPT_INT, hbm_device, 0, 255, "0", RESTART),
    POLICY(hbm, "gdsf", "tinylfu", RELOAD),
    NUMBER("tiers.ttl_s", OPT_U64, ttl_s, 0, CFG_TTL_MAX, "0", RESTART),
    NUMBER("pic.seam", OPT_INT, seam, 0, 64, STR(HY_SEAM_DEFAULT), RESTART),
    NAMED("pic.tolerance", OPT_TOL, tolerance, "0.03", RESTART),
    NAMED("pic.dtype", OPT_DTYPE, dtype, "bf16", RESTART),
    NAMED("pic.t_dtype", OPT_DTYPE, t_dtype, "bf16", RESTART),
    NAMED("pic.kv_dtype", OPT_DTYPE, kv_dtype, "bf16", RESTART),
    STRING("pic.reuse", pic_reuse, "auto", RESTART),
    NUMBER("pic.top_k", OPT_U32, top_k, 1, 1024, "5", RESTART),
    NUMBER("pic.prefix_cache_bytes", OPT_SIZE, prefix_cache_bytes, 0, TIB, "256M", RESTART),
    NAMED("pic.shadow_rate", OPT_TOL, shadow_rate, "0", RESTART),
    NAMED("pic.shadow_kl_warn", OPT_TOL, shadow_kl_warn, "0.01", RESTART),
    NUMBER("executor.threads", OPT_INT, exec_threads, 1, 256, NULL, RESTART), /* the online CPUs */
    NUMBER("executor.contexts", OPT_INT, exec_contexts, 1, 64, "1", RESTART),
    NUMBER("executor.max_batch", OPT_INT, max_batch, 1, 65536, "1024", RESTART),
    STRING("executor.mla", exec_mla, "auto", RESTART),
    STRING("executor.weights", exec_weights, "auto", RESTART),
    STRING("executor.device", exec_device, "cpu", RESTART),
    NUMBER("executor.keep_context_tokens", OPT_U64, keep_context_tokens, 0, 16777216, "32768",
           RESTART),
    NUMBER("tenants.default_quota", OPT_SIZE, default_quota, 0, UINT64_MAX, "0", RELOAD),
    LIST("tenants.list", tenants, hy_cfg_tenant, 0, HY_CFG_MAX_TENANTS, ntenants, RELOAD),
    ITEM_STRING("tenants.list[].name", OPT_STR, hy_cfg_tenant, name, NEED_ALWAYS, RELOAD),
    ITEM_STRING("tenants.list[].token", OPT_TOKEN, hy_cfg_tenant, token, NEED_ONE_OF, RELOAD),
    ITEM_STRING("tenants.list[].token_file", OPT_TOKEN_FILE, hy_cfg_tenant, token, NEED_ONE_OF,
                RELOAD),
    ITEM_NUMBER("tenants.list[].quota", OPT_SIZE, hy_cfg_tenant, quota_bytes, 0, UINT64_MAX, "0",
                RELOAD),
    ITEM_NUMBER("tenants.list[].max_in_flight", OPT_U32, hy_cfg_tenant, max_in_flight, 0, 65536,
                "0", RELOAD),
    ITEM_NUMBER("tenants.list[].admin", OPT_BOOL, hy_cfg_tenant, admin, 0, 0, "false", RELOAD),
    ITEM_NUMBER("tenants.list[].replicas", OPT_U32, hy_cfg_tenant, replicas, 0, HY_CFG_MAX_REPLICAS,
                "0", RESTART),
    NUMBER("limits.max_message", OPT_SIZE, max_message, 4 * KIB, GIB, "64M", RESTART),
    NUMBER("limits.max_segments", OPT_U32, max_segments, 1, 65536, "256", RESTART),
    NUMBER("limits.max_tokens", OPT_U64, max_tokens, 1, 16777216, "262144", RESTART),
    NUMBER("limits.max_top_k", OPT_U32, max_top_k, 1, 1024, "100", RESTART),
    NUMBER("limits.max_new_tokens", OPT_U32, max_new_tokens, 0, 65536, "256", RESTART),
    NUMBER("limits.in_flight_per_tenant", OPT_U32, in_flight_per_tenant, 1, 65536, "64", RELOAD),
    NUMBER("limits.queue", OPT_U32, queue, 0, 65536, "64", RESTART),
    NUMBER("limits.max_lease_ms", OPT_U32, max_lease_ms, 1, 3600000, "10000", RESTART),
    NUMBER("limits.lease_bytes_per_tenant", OPT_SIZE, lease_bytes_per_tenant, 0, UINT64_MAX, "0",
           RESTART),
    NUMBER("limits.pinned_bytes_per_tenant", OPT_SIZE, pinned_bytes_per_tenant, 0, UINT64_MAX, "0",
           RESTART),
    NUMBER("limits.watchers", OPT_U32, watchers, 0, 1024, "16", RESTART),
    NUMBER("limits.workers", OPT_U32, workers, 2, 1024, "32", RESTART),
    NUMBER("limits.page_size", OPT_U32, page_size, 1, 100000, "1000", RESTART),
    NUMBER("limits.max_entry_bytes", OPT_SIZE, max_entry_bytes, 4 * KIB, TIB, "1G", RESTART),
    NUMBER("limits.drain_ms", OPT_U32, drain_ms, 0, 600000, "10000", RESTART),
    NUMBER("limits.idle_ms", OPT_U32, idle_ms, 0, 3600000, "15000", RESTART),
    NUMBER("limits.watchers_per_tenant", OPT_U32, watchers_per_tenant, 1, 1024, "4", RESTART),
    STRING("transport.tcp_listen", tp_tcp_listen, "", RESTART),
    STRING("transport.shm_socket", tp_shm_socket, "", RESTART),
    STRING("transport.rdma", tp_rdma, "auto", RESTART),
    STRING("transport.rdma_device", tp_rdma_device, "", RESTART),
    NUMBER("transport.max_sessions", OPT_U32, tp_max_sessions, 1, 65536, "64", RESTART),
    NUMBER("transport.max_buffer", OPT_SIZE, tp_max_buffer, 4 * KIB, 16 * TIB, "16G", RESTART),
    NUMBER("transport.sessions_per_tenant", OPT_U32, tp_sessions_per_tenant, 1, 65536, "16",
           RESTART),
    NUMBER("transport.tenant_bytes", OPT_SIZE, tp_tenant_bytes, 4 * KIB, 64 * TIB, "32G", RESTART),
    LIST("scatter.workers", scatter_workers, hy_cfg_worker, 0, HY_CFG_MAX_WORKERS, nscatter_workers,
         RESTART),
    ITEM_STRING("scatter.workers[].address", OPT_STR, hy_cfg_worker, address, NEED_ALWAYS, RESTART),
    NUMBER("scatter.spawn", OPT_U32, scatter_spawn, 0, HY_CFG_MAX_WORKERS, "0", RESTART),
    NUMBER("scatter.spawn_threads", OPT_INT, scatter_spawn_threads, 1, 256, "1", RESTART),
    STRING("scatter.worker_bin", scatter_worker_bin, "", RESTART),
    STRING("scatter.dns", scatter_dns, "", RESTART),
    STRING("scatter.policy", scatter_policy, "lpt", RESTART),
    NUMBER("scatter.timeout_ms", OPT_U32, scatter_timeout_ms, 1, 3600000, "60000", RESTART),
    NUMBER("scatter.retries", OPT_U32, scatter_retries, 0, 16, "2", RESTART),
    NUMBER("scatter.min_tokens", OPT_U32, scatter_min_tokens, 0, 16777216, "256", RESTART),
    NUMBER("scatter.probe_ms", OPT_U32, scatter_probe_ms, 50, 600000, "1000", RESTART),
    STRING("cluster.id", cluster_id, "", RESTART),
    STRING("cluster.advertise", cluster_advertise, "", RESTART),
    NUMBER("cluster.replicas", OPT_U32, cluster_replicas, 1, HY_CFG_MAX_REPLICAS, "1", RESTART),
    LIST("cluster.members", cluster_members, hy_cfg_member, 0, HY_CFG_MAX_MEMBERS, ncluster_members,
         RESTART),
    ITEM_STRING("cluster.members[].id", OPT_STR, hy_cfg_member, id, NEED_ALWAYS, RESTART),
    ITEM_STRING("cluster.members[].address", OPT_STR, hy_cfg_member, address, NEED_ALWAYS, RESTART),
    ADDRS("cluster.etcd.endpoints", cluster_etcd, "", RESTART),
    STRING("cluster.etcd.prefix", cluster_etcd_prefix, "/hypic/members/", RESTART),
    NUMBER("cluster.etcd.ttl_s", OPT_U32, cluster_ttl_s, 1, 3600, "10", RESTART),
    STRING("cluster.etcd.tls_ca", cluster_etcd_tls_ca, "", RESTART),
    STRING("cluster.etcd.tls_cert", cluster_etcd_tls_cert, "", RESTART),
    STRING("cluster.etcd.tls_key", cluster_etcd_tls_key, "", RESTART),
    STRING("cluster.etcd.tls_server_name", cluster_etcd_tls_server_name, "", RESTART),
    STRING("cluster.etcd.user", cluster_etcd_user, "", RESTART),
    TOKEN("cluster.etcd.password", OPT_TOKEN, cluster_etcd_password, RESTART),
    TOKEN("cluster.etcd.password_file", OPT_TOKEN_FILE, cluster_etcd_password, RESTART),
    NUMBER("cluster.peer_timeout_ms", OPT_U32, cluster_peer_timeout_ms, 1, 600000, "2000", RESTART),
    NUMBER("cluster.transport_bytes", OPT_SIZE, cluster_transport_bytes, 0, 16 * GIB, "64M",
           RESTART),
    TOKEN("cluster.secret", OPT_TOKEN, cluster_secret, RESTART),
    TOKEN("cluster.secret_file", OPT_TOKEN_FILE, cluster_secret, RESTART),
    STRING("cluster.tls_ca", cluster_tls_ca, "", RESTART),
    STRING("cluster.tls_server_name", cluster_tls_server_name, "", RESTART),
    NAMED("log.level", OPT_LEVEL, log_level, "info", RESTART),
    NAMED("log.requests", OPT_BOOL, log_requests, "true", RESTART),
};
#define NOPTS (sizeof k_opts / sizeof k_opts[0])

static const char *const k_levels[] = {[HY_LOG_DEBUG] = "debug",
                                       [HY_LOG_INFO] = "info",
                                       [HY_LOG_WARN] = "warn",
                                       [HY_LOG_ERROR] = "error"};
static const char *const k_dtypes[] = {[HY_ENTRY_F32] = "f32", [HY_ENTRY_BF16] = "bf16"};

/* ---- values: text → field, each against its own limits ---- */

/* Leading decimal digits (no sign, no blanks): 0, or HY_EINVAL when there
 * are none, HY_ERANGE when they do not fit in 64 bits; *end past them. */
static int parse_digits(const char *s, uint64_t *out, const char **end)
{
    uint64_t v = 0;
    bool over = false;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        over = over || v > (UINT64_MAX - d) / 10;
        v = v * 10 + d;
    }
    *out = v, *end = p;
    return p == s ? HY_EINVAL : over ? HY_ERANGE : 0;
}

static int parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        int shift;
    } k_suffixes[] = {{"", 0},     {"K", 10},   {"M", 20},   {"G", 30},  {"T", 40},
                      {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
    uint64_t v;
    const char *end;
    int rc = parse_digits(s, &v, &end);
    if (rc == HY_EINVAL) return rc;
    for (size_t i = 0; i < sizeof k_suffixes / sizeof k_suffixes[0]; i++) {
        if (strcmp(end, k_suffixes[i].suffix) != 0) continue;
        if (rc || (k_suffixes[i].shift && v > UINT64_MAX >> k_suffixes[i].shift)) return HY_ERANGE;
        *out = v << k_suffixes[i].shift;
        return 0;
    }
    return HY_EINVAL;
}

/* A size as the file would say it: the largest suffix that divides it. */
static void format_size(uint64_t v, char *out, size_t cap)
{
    static const char k_units[] = "TGMK";
    for (int i = 0; i < 4 && v; i++) {
        int shift = 40 - 10 * i;
        if (v % (1ull << shift) == 0) {
            snprintf(out, cap, "%llu%c", (unsigned long long)(v >> shift), k_units[i]);
            return;
        }
    }
    snprintf(out, cap, "%llu", (unsigned long long)v);
}

static void format_number(const opt *o, uint64_t v, char *out, size_t cap)
{
    if (o->kind == OPT_SIZE)
        format_size(v, out, cap);
    else
        snprintf(out, cap, "%llu", (unsigned long long)v);
}

static int lookup_name(const char *v, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(v, names[i]) == 0) return i;
    return -1;
}

/* The first line of a token file, blanks around it trimmed, into
 * dst[0..cap) (NUL-padded). */
static int read_token_file(const char *path, char *dst, size_t cap, char *why, size_t whycap)
{
    char *text;
    size_t len;
    hy_err e = {0};
    int rc = hy_read_file(path, CFG_TOKEN_FILE_MAX, &text, &len, &e);
    if (rc) {
        snprintf(why, whycap, "cannot read the token file: %.300s", e.msg);
        return rc == HY_ENOMEM ? HY_ENOMEM : HY_EIO;
    }
    size_t a = 0, b = strcspn(text, "\n");
    while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) a++;
    while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) b--;
    rc = 0;
    if (b - a >= cap)
        rc = HY_EINVAL,
        snprintf(why, whycap, "the first line of %s is longer than %zu bytes", path, cap - 1);
    else if (memchr(text + a, '\0', b - a))
        rc = HY_EINVAL, snprintf(why, whycap, "the first line of %s holds a NUL byte", path);
    else
        memset(dst, 0, cap), memcpy(dst, text + a, b - a);
    hy_free(text);
    return rc;
}

/* Sets the field of o in base from the scalar v[0..len). 0, or a code with
 * why[] saying what is wrong with the value (the caller names file, line and
 * key). */
static int set_value(const opt *o, void *base, const char *v, size_t len, char *why, size_t whycap)
{
    char *field = (char *)base + o->off;
    if (memchr(v, '\0', len)) return snprintf(why, whycap, "the value holds a NUL byte"), HY_EINVAL;
    hy_err e = {0};
    switch (o->kind) {
    case OPT_STR:
    case OPT_ADDRS:
    case OPT_TOKEN:
        if (len >= o->cap) {
            if (o->kind == OPT_TOKEN)
                snprintf(why, whycap, "the token is longer than %zu bytes", o->cap - 1);
            else
                snprintf(why, whycap, "'%.60s...' is longer than %zu bytes", v, o->cap - 1);
            return HY_EINVAL;
        }
        memset(field, 0, o->cap), memcpy(field, v, len);
        return 0;
    case OPT_TOKEN_FILE:
        return read_token_file(v, field, o->cap, why, whycap);
    case OPT_SIZE:
    case OPT_U64:
    case OPT_U32:
    case OPT_INT: {
        uint64_t n;
        const char *end = "";
        int rc = o->kind == OPT_SIZE ? parse_size(v, &n) : parse_digits(v, &n, &end);
        if (rc == 0 && *end) rc = HY_EINVAL;
        if (rc == HY_EINVAL) {
            if (o->kind == OPT_SIZE)
                snprintf(why, whycap,
                         "'%.60s' is not a size (an integer with an optional K, M, G or T suffix)",
                         v);
            else
                snprintf(why, whycap, "'%.60s' is not a count (a decimal integer)", v);
            return HY_EINVAL;
        }
        if (rc == HY_ERANGE) {
            snprintf(why, whycap, "'%.60s' does not fit in 64 bits", v);
            return HY_EINVAL;
        }
        if (n < o->min || n > o->max) {
            char lo[32], hi[32];
            format_number(o, o->min, lo, sizeof lo), format_number(o, o->max, hi, sizeof hi);
            snprintf(why, whycap, "'%.60s' is out of range (%s..%s)", v, lo, hi);
            return HY_EINVAL;
        }
        if (o->kind == OPT_U32)
            *(uint32_t *)field = (uint32_t)n;
        else if (o->kind == OPT_INT)
            *(int *)field = (int)n;
        else
            *(uint64_t *)field = n;
        return 0;
    }
    case OPT_BOOL:
        if (strcmp(v, "true") && strcmp(v, "false"))
            return snprintf(why, whycap, "'%.60s' is not a boolean (true or false)", v), HY_EINVAL;
        *(bool *)field = strcmp(v, "true") == 0;
        return 0;
    case OPT_EVICT: {
        hy_policy_config p;
        if (hy_policy_parse(v, "always", &p, &e))
            return snprintf(why, whycap, "%.300s", e.msg), e.code;
        ((hy_policy_config *)field)->evict = p.evict;
        return 0;
    }
    case OPT_ADMIT: {
        /* min-tokens takes its count from the tier's own min_tokens key, so
         * hy_policy_parse's "min-tokens N" spelling is not accepted here. */
        hy_policy_config p = {.admit = HY_ADMIT_MIN_TOKENS};
        if (strncmp(v, "min-tokens", 10) == 0 && v[10]) {
            snprintf(why, whycap, "'%.60s': write 'min-tokens' and the count in min_tokens", v);
            return HY_EINVAL;
        }
        if (strcmp(v, "min-tokens") && hy_policy_parse("lru", v, &p, &e))
            return snprintf(why, whycap, "%.300s", e.msg), e.code;
        ((hy_policy_config *)field)->admit = p.admit;
        return 0;
    }
    case OPT_DTYPE: {
        int i = lookup_name(v, k_dtypes, 2);
        if (i < 0) return snprintf(why, whycap, "'%.60s' is not f32 or bf16", v), HY_EINVAL;
        *(hy_entry_dtype *)field = (hy_entry_dtype)i;
        return 0;
    }
    case OPT_TOL: {
        char *end = NULL;
        errno = 0;
        const double d = strtod(v, &end);
        if (end == v || *end || errno || !(d >= 0.0 && d <= 1.0))
            return snprintf(why, whycap, "'%.60s' is not a number in [0, 1]", v), HY_EINVAL;
        *(float *)field = (float)d;
        return 0;
    }
    case OPT_LEVEL: {
        int i = lookup_name(v, k_levels, 4);
        if (i < 0)
            return snprintf(why, whycap, "'%.60s' is not debug, info, warn or error", v), HY_EINVAL;
        *(int *)field = i;
        return 0;
    }
    case OPT_LIST:
        break;
    }
    assert(!"a list is not a scalar");
    return HY_EINVAL;
}

/* The item defaults of a list (fields "<list>[]." with a default). */
static void default_item(const opt *list, void *item)
{
    size_t n = strlen(list->name);
    memset(item, 0, list->cap);
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *o = &k_opts[i];
        if (strncmp(o->name, list->name, n) || strncmp(o->name + n, "[].", 3) || !o->def) continue;
        char why[256];
        int rc = set_value(o, item, o->def, strlen(o->def), why, sizeof why);
        assert(rc == 0 && "a list field's default is valid");
        (void)rc;
    }
}

void hy_cached_config_default(hy_cached_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *o = &k_opts[i];
        if (!o->def || strchr(o->name, '[')) continue;
        char why[256];
        int rc = set_value(o, c, o->def, strlen(o->def), why, sizeof why);
        assert(rc == 0 && "every default is within its limits");
        (void)rc;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    c->exec_threads = cpus < 1 ? 1 : cpus > 256 ? 256 : (int)cpus;
    c->nmodels = 1;
    /* the embedded default: the trained model committed under models/ */
    snprintf(c->models[0].name, sizeof c->models[0].name, "recall");
    snprintf(c->models[0].dir, sizeof c->models[0].dir, "models/hypic-recall");
    c->host_policy.capacity = c->host_bytes;
    c->nvme_policy.capacity = c->nvme_bytes;
    c->hbm_policy.capacity = c->hbm_bytes;
}

/* ---- the walk over the document ---- */

/* A key the file gave, with its line: messages about it after the walk name
 * the line, and list items' "one of" rules look here. At most every entry of
 * every list item, plus the rest of the table, plus the items themselves. */
#define CFG_SEEN_MAX (NOPTS + HY_CFG_MAX_TENANTS * 6 + HY_CFG_MAX_MODELS * 3 + 16)

typedef struct cfg_ctx {
    const char *file;
    yaml_document_t *doc;
    hy_err *err;
    int nseen;
    struct {
        char key[CFG_KEY_MAX];
        int line;
    } seen[CFG_SEEN_MAX];
} cfg_ctx;

static int seen_line(const cfg_ctx *x, const char *key)
{
    for (int i = 0; i < x->nseen; i++)
        if (strcmp(x->seen[i].key, key) == 0) return x->seen[i].line;
    return 0;
}

static void see(cfg_ctx *x, const char *key, int line)
{
    if (x->nseen < (int)CFG_SEEN_MAX) {
        snprintf(x->seen[x->nseen].key, CFG_KEY_MAX, "%s", key);
        x->seen[x->nseen++].line = line;
    }
}

/* "FILE:LINE: key 'KEY': MESSAGE"; the line is left out when 0, the key when
 * NULL. Returns code. */
static int fail(cfg_ctx *x, int code, int line, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(cfg_ctx *x, int code, int line, const char *key, const char *fmt, ...)
{
    char where[64] = "", msg[400];
    if (line > 0) snprintf(where, sizeof where, ":%d", line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (key) return hy_err_set(x->err, code, "%s%s: key '%s': %s", x->file, where, key, msg);
    return hy_err_set(x->err, code, "%s%s: %s", x->file, where, msg);
}

/* fail() at the line the file gave key on (none for a default). */
static int fail_key(cfg_ctx *x, int code, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_key(cfg_ctx *x, int code, const char *key, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fail(x, code, seen_line(x, key), key, "%s", msg);
}

static int line_of(const yaml_node_t *n)
{
    return (int)n->start_mark.line + 1;
}

static const char *kind_name(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE    ? "a mapping"
           : n->type == YAML_SEQUENCE_NODE ? "a sequence"
                                           : "a value";
}

static bool is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = (const char *)n->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

static const opt *find_opt(const char *name)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strcmp(k_opts[i].name, name) == 0) return &k_opts[i];
    return NULL;
}

/* The entry named name[0..n). */
static const opt *find_opt_n(const char *name, size_t n)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (strncmp(k_opts[i].name, name, n) == 0 && k_opts[i].name[n] == '\0') return &k_opts[i];
    return NULL;
}

/* Whether some entry lies under the section `name` ("tiers.host"). */
static bool is_section(const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < NOPTS; i++)
        if (strncmp(k_opts[i].name, name, n) == 0 && k_opts[i].name[n] == '.') return true;
    return false;
}

/* The names allowed directly under the section `prefix` ("" for the top),
 * comma-separated, in the table's order. */
static void allowed_here(const char *prefix, char *out, size_t cap)
{
    size_t n = strlen(prefix), used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < NOPTS; i++) {
        const char *s = k_opts[i].name;
        if (n && (strncmp(s, prefix, n) || s[n] != '.')) continue;
        s += n ? n + 1 : 0;
        size_t len = strcspn(s, ".[");
        char word[CFG_KEY_MAX];
        snprintf(word, sizeof word, "%.*s", (int)len, s);
        /* skip a name already listed (a section's second key) */
        bool dup = false;
        for (const char *p = out; (p = strstr(p, word)) != NULL; p += len)
            if ((p == out || p[-1] == ' ') && (p[len] == ',' || p[len] == '\0')) dup = true;
        if (dup) continue;
        int w = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", word);
        if (w < 0 || (size_t)w >= cap - used) break;
        used += (size_t)w;
    }
}

static int walk_mapping(cfg_ctx *x, yaml_node_t *map, const char *section, const char *path,
                        void *base);

/* The fields an item at ipath must give (those of section with a need):
 * every NEED_ALWAYS one and exactly one of the NEED_ONE_OF ones. */
static int check_needed(cfg_ctx *x, const char *section, const char *ipath, int line)
{
    size_t sn = strlen(section);
    int ones = 0, given = 0;
    char one_of[2][CFG_KEY_MAX] = {"", ""};
    for (size_t k = 0; k < NOPTS; k++) {
        const opt *f = &k_opts[k];
        if (!f->need || strncmp(f->name, section, sn) || f->name[sn] != '.') continue;
        const char *field = f->name + sn + 1;
        char fpath[CFG_KEY_MAX];
        snprintf(fpath, sizeof fpath, "%.48s.%.14s", ipath, field);
        bool seen = seen_line(x, fpath) != 0;
        if (f->need == NEED_ALWAYS && !seen)
            return fail(x, HY_EINVAL, line, ipath, "no '%s' (required)", field);
        if (f->need == NEED_ONE_OF) {
            assert(ones < 2 && "one pair of alternatives per item");
            snprintf(one_of[ones++], CFG_KEY_MAX, "%s", field);
            given += seen;
        }
    }
    if (ones && given != 1)
        return fail(x, HY_EINVAL, line, ipath,
                    given ? "both '%s' and '%s' (give one)" : "no '%s' or '%s' (one is required)",
                    one_of[0], one_of[1]);
    return 0;
}

/* The one field of a list's items when they have exactly one
 * (scatter.workers[].address), or NULL: an item may then be its value alone. */
static const opt *sole_field(const char *section)
{
    size_t sn = strlen(section);
    const opt *f = NULL;
    for (size_t k = 0; k < NOPTS; k++) {
        if (strncmp(k_opts[k].name, section, sn) || k_opts[k].name[sn] != '.') continue;
        if (f) return NULL;
        f = &k_opts[k];
    }
    return f;
}

/* A list's items: each a mapping of the fields "<list>[].<field>", or the
 * value of the items' one field alone. */
static int walk_list(cfg_ctx *x, const opt *o, yaml_node_t *seq, const char *path, void *base)
{
    int *count = (int *)((char *)base + o->count);
    char *items = (char *)base + o->off;
    *count = 0; /* the file's list replaces the default one */
    if (seq->type != YAML_SEQUENCE_NODE && !is_null(seq))
        return fail(x, HY_EINVAL, line_of(seq), path, "%s where a sequence is expected",
                    kind_name(seq));
    int n = seq->type == YAML_SEQUENCE_NODE
                ? (int)(seq->data.sequence.items.top - seq->data.sequence.items.start)
                : 0;
    if (n < (int)o->min || n > (int)o->max)
        return fail(x, HY_EINVAL, line_of(seq), path, "%d items; %llu to %llu are allowed", n,
                    (unsigned long long)o->min, (unsigned long long)o->max);
    char section[CFG_KEY_MAX];
    snprintf(section, sizeof section, "%s[]", o->name);
    const opt *one = sole_field(section);
    for (int i = 0; i < n; i++) {
        yaml_node_t *item = yaml_document_get_node(x->doc, seq->data.sequence.items.start[i]);
        char ipath[CFG_KEY_MAX];
        snprintf(ipath, sizeof ipath, "%.40s[%d]", path, i);
        see(x, ipath, line_of(item));
        void *it = items + (size_t)i * o->cap;
        default_item(o, it);
        int rc;
        if (one && item->type == YAML_SCALAR_NODE) {
            char fpath[CFG_KEY_MAX], why[400];
            snprintf(fpath, sizeof fpath, "%.48s.%.14s", ipath, one->name + strlen(section) + 1);
            see(x, fpath, line_of(item));
            rc = set_value(one, it, (const char *)item->data.scalar.value, item->data.scalar.length,
                           why, sizeof why);
            if (rc) rc = fail(x, rc, line_of(item), fpath, "%s", why);
        } else if (item->type != YAML_MAPPING_NODE) {
            return fail(x, HY_EINVAL, line_of(item), ipath, "%s where a mapping is expected",
                        kind_name(item));
        } else {
            rc = walk_mapping(x, item, section, ipath, it);
            if (!rc) rc = check_needed(x, section, ipath, line_of(item));
        }
        if (rc) return rc;
        *count = i + 1;
    }
    return 0;
}

/* An OPT_ADDRS key given as a sequence: each item one address (a value, not
 * empty, without a comma), joined with commas as the string form holds them. */
static int walk_addrs(cfg_ctx *x, const opt *o, yaml_node_t *seq, const char *path, void *base)
{
    char *field = (char *)base + o->off;
    size_t used = 0;
    memset(field, 0, o->cap);
    for (yaml_node_item_t *p = seq->data.sequence.items.start; p < seq->data.sequence.items.top;
         p++) {
        yaml_node_t *item = yaml_document_get_node(x->doc, *p);
        char ipath[CFG_KEY_MAX];
        snprintf(ipath, sizeof ipath, "%.40s[%d]", path, (int)(p - seq->data.sequence.items.start));
        if (item->type != YAML_SCALAR_NODE)
            return fail(x, HY_EINVAL, line_of(item), ipath, "%s where a value is expected",
                        kind_name(item));
        const char *v = (const char *)item->data.scalar.value;
        const size_t len = item->data.scalar.length;
        if (len == 0)
            return fail(x, HY_EINVAL, line_of(item), ipath, "an empty item (an address is needed)");
        if (memchr(v, '\0', len))
            return fail(x, HY_EINVAL, line_of(item), ipath, "the value holds a NUL byte");
        if (memchr(v, ',', len))
            return fail(x, HY_EINVAL, line_of(item), ipath,
                        "'%.60s': one address per item (a sequence or one comma-separated "
                        "string, not both)",
                        v);
        if (used + (used > 0) + len >= o->cap)
            return fail(x, HY_EINVAL, line_of(seq), path,
                        "the addresses are longer than %zu bytes together", o->cap - 1);
        if (used) field[used++] = ',';
        memcpy(field + used, v, len), used += len;
    }
    return 0;
}

/* The pairs of a mapping at `path` in the file, which is the table's section
 * `section` ("" at the top; "models[]" for a list item), over base. */
static int walk_mapping(cfg_ctx *x, yaml_node_t *map, const char *section, const char *path,
                        void *base)
{
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yaml_document_get_node(x->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(x->doc, p->value);
        if (k->type != YAML_SCALAR_NODE)
            return fail(x, HY_EINVAL, line_of(k), *path ? path : NULL,
                        "%s as a key (keys are names)", kind_name(k));
        const char *key = (const char *)k->data.scalar.value;
        for (yaml_node_pair_t *q = map->data.mapping.pairs.start; q < p; q++) {
            yaml_node_t *k2 = yaml_document_get_node(x->doc, q->key);
            if (k2->type == YAML_SCALAR_NODE && !strcmp((const char *)k2->data.scalar.value, key))
                return fail(x, HY_EINVAL, line_of(k), NULL,
                            "key '%s%s%s' appears twice (first at line %d)", path, *path ? "." : "",
                            key, line_of(k2));
        }
        char name[CFG_KEY_MAX], kpath[CFG_KEY_MAX];
        bool plain =
            strspn(key, "abcdefghijklmnopqrstuvwxyz0123456789_") == strlen(key) && strlen(key) < 32;
        snprintf(name, sizeof name, "%s%s%s", section, *section ? "." : "", plain ? key : "");
        snprintf(kpath, sizeof kpath, "%s%s%.31s", path, *path ? "." : "", key);
        const opt *o = plain ? find_opt(name) : NULL;
        if (!o && !(plain && is_section(name))) {
            char allowed[320];
            allowed_here(section, allowed, sizeof allowed);
            return fail(x, HY_EINVAL, line_of(k), NULL,
                        "unknown key '%s%s%.60s' (allowed here: %s)", path, *path ? "." : "", key,
                        allowed);
        }
        see(x, kpath, line_of(k));
        int rc;
        if (!o) { /* a section */
            if (is_null(v)) continue;
            if (v->type != YAML_MAPPING_NODE)
                return fail(x, HY_EINVAL, line_of(v), kpath, "%s where a mapping is expected",
                            kind_name(v));
            rc = walk_mapping(x, v, name, kpath, base);
        } else if (o->kind == OPT_LIST) {
            rc = walk_list(x, o, v, kpath, base);
        } else if (o->kind == OPT_ADDRS && v->type == YAML_SEQUENCE_NODE) {
            rc = walk_addrs(x, o, v, kpath, base);
        } else {
            if (v->type != YAML_SCALAR_NODE)
                return fail(x, HY_EINVAL, line_of(v), kpath, "%s where a value is expected",
                            kind_name(v));
            char why[400];
            rc = set_value(o, base, (const char *)v->data.scalar.value, v->data.scalar.length, why,
                           sizeof why);
            if (rc) rc = fail(x, rc, line_of(v), kpath, "%s", why);
        }
        if (rc) return rc;
    }
    return 0;
}

/* ---- the whole, once read ---- */

static bool valid_name(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 63 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* host:port with a bracketed IPv6 address, an IPv4 address or a host name;
 * *loopback says whether it is 127.0.0.0/8, ::1 (or ::ffff:127.x) or
 * localhost. */
static bool parse_addr(const char *a, bool *loopback)
{
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a || !colon[1] || strlen(colon + 1) > 5 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1) || atoi(colon + 1) > 65535)
        return false;
    char host[HY_CFG_ADDR_MAX];
    snprintf(host, sizeof host, "%.*s", (int)(colon - a), a);
    size_t n = strlen(host);
    if (host[0] == '[') {
        struct in6_addr a6;
        if (n < 3 || host[n - 1] != ']') return false;
        host[n - 1] = '\0';
        if (inet_pton(AF_INET6, host + 1, &a6) != 1) return false;
        *loopback =
            IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
        return true;
    }
    if (strspn(host, "0123456789.") == n) {
        struct in_addr a4;
        if (inet_pton(AF_INET, host, &a4) != 1) return false;
        *loopback = ((const uint8_t *)&a4.s_addr)[0] == 127;
        return true;
    }
    if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != n)
        return false;
    *loopback = strcmp(host, "localhost") == 0;
    return true;
}

static int check_addr(cfg_ctx *x, const char *key, const char *a, bool *loopback)
{
    if (parse_addr(a, loopback)) return 0;
    return fail_key(x, HY_EINVAL, key,
                    "'%.100s' is not host:port (a host name, an IPv4 address or an IPv6 address "
                    "in brackets, and a port 0..65535)",
                    a);
}

static int check_tls(cfg_ctx *x, const hy_cached_config *c)
{
    if (!c->tls_cert[0] != !c->tls_key[0])
        return fail_key(x, HY_EINVAL, c->tls_cert[0] ? "tls.cert" : "tls.key",
                        "tls needs both cert and key (%s is missing)",
                        c->tls_cert[0] ? "tls.key" : "tls.cert");
    const char *files[3] = {c->tls_cert, c->tls_key, c->tls_client_ca},
               *keys[3] = {"tls.cert", "tls.key", "tls.client_ca"};
    for (int i = 0; i < 3 && c->tls_cert[0]; i++) {
        if (!files[i][0]) continue;
        FILE *f = fopen(files[i], "r");
        if (!f)
            return fail_key(x, HY_EIO, keys[i], "cannot read %s: %s", files[i], strerror(errno));
        fclose(f);
    }
    if (c->tls_client_ca[0] && !c->tls_cert[0])
        return fail_key(x, HY_EINVAL, "tls.client_ca",
                        "client certificates are asked for over TLS: set tls.cert and tls.key");
    if (c->tls_require_client_cert && !c->tls_client_ca[0])
        return fail_key(x, HY_EINVAL, "tls.require_client_cert",
                        "needs tls.client_ca (the authority the certificates must chain to)");
    if (c->tls_client_ca[0]) { /* this member presents tls.cert to its peers and workers */
        char why[200];
        if (!hy_cert_client_ok(c->tls_cert, why, sizeof why))
            return fail_key(x, HY_EINVAL, "tls.cert",
                            "%s: with tls.client_ca this certificate is also the member's client "
                            "certificate, and it %s (extendedKeyUsage needs clientAuth too)",
                            c->tls_cert, why);
    }
    return 0;
}

static int check_models(cfg_ctx *x, const hy_cached_config *c)
{
    for (int i = 0; i < c->nmodels; i++) {
        char key[CFG_KEY_MAX];
        snprintf(key, sizeof key, "models[%d].name", i);
        if (!valid_name(c->models[i].name))
            return fail_key(x, HY_EINVAL, key,
                            "'%s' is not a name ([A-Za-z0-9._-], 1 to 63 characters)",
                            c->models[i].name);
        for (int j = 0; j < i; j++)
            if (!strcmp(c->models[i].name, c->models[j].name))
                return fail_key(x, HY_EINVAL, key, "'%s' is already models[%d]'s name",
                                c->models[i].name, j);
        snprintf(key, sizeof key, "models[%d].path", i);
        if (!c->models[i].dir[0]) return fail_key(x, HY_EINVAL, key, "'' is not a directory");
    }
    return 0;
}

static int check_tiers(cfg_ctx *x, const hy_cached_config *c)
{
    const struct {
        const char *key;
        const hy_policy_config *p;
    } tiers[3] = {{"tiers.host.min_tokens", &c->host_policy},
                  {"tiers.nvme.min_tokens", &c->nvme_policy},
                  {"tiers.hbm.min_tokens", &c->hbm_policy}};
    for (int i = 0; i < 3; i++)
        if (tiers[i].p->min_tokens && tiers[i].p->admit != HY_ADMIT_MIN_TOKENS)
            return fail_key(x, HY_EINVAL, tiers[i].key,
                            "%u applies only with admit: min-tokens (admit is %s)",
                            tiers[i].p->min_tokens, hy_admit_name(tiers[i].p->admit));
    char v[32], lim[32];
    format_size(c->nvme_extent_bytes, v, sizeof v);
    if (c->nvme_extent_bytes % HY_PAGE)
        return fail_key(x, HY_EINVAL, "tiers.nvme.extent_bytes", "%s is not a multiple of %u", v,
                        HY_PAGE);
    format_size(c->nvme_bytes, v, sizeof v);
    format_size(c->nvme_extent_bytes, lim, sizeof lim);
    if (c->nvme_bytes < c->nvme_extent_bytes ||
        c->nvme_bytes / c->nvme_extent_bytes > CFG_MAX_EXTENTS)
        return fail_key(x, HY_EINVAL, "tiers.nvme.bytes",
                        "%s is not 1 to %u extents of %s (tiers.nvme.extent_bytes)", v,
                        CFG_MAX_EXTENTS, lim);
    if (c->hbm_bytes && c->hbm_bytes < MIB) {
        format_size(c->hbm_bytes, v, sizeof v);
        return fail_key(x, HY_EINVAL, "tiers.hbm.bytes",
                        "%s is neither 0 (no hbm tier) nor 1M..16T", v);
    }
    return 0;
}

/* Checked on what it read, without echoing it. */
static int check_token(cfg_ctx *x, const hy_cached_config *c, int i)
{
    char key[CFG_KEY_MAX], fkey[CFG_KEY_MAX];
    snprintf(key, sizeof key, "tenants.list[%d].token", i);
    snprintf(fkey, sizeof fkey, "tenants.list[%d].token_file", i);
    /* (that the file gave exactly one of the two was checked as it was read) */
    const char *which = seen_line(x, fkey) ? fkey : key, *t = c->tenants[i].token;
    size_t n = strlen(t);
    if (n < HY_CFG_TOKEN_MIN)
        return fail_key(x, HY_EINVAL, which, "the token has %zu characters; at least %d are needed",
                        n, HY_CFG_TOKEN_MIN);
    for (size_t j = 0; j < n; j++)
        if (t[j] <= ' ' || t[j] > '~')
            return fail_key(x, HY_EINVAL, which,
                            "the token's character %zu is not printable ASCII (spaces excluded)",
                            j + 1);
    for (int j = 0; j < i; j++)
        if (!strcmp(t, c->tenants[j].token))
            return fail_key(x, HY_EINVAL, which, "the token is tenants.list[%d]'s (tenant '%s')", j,
                            c->tenants[j].name);
    return 0;
}

static int check_tenants(cfg_ctx *x, const hy_cached_config *c)
{
    for (int i = 0; i < c->ntenants; i++) {
        char key[CFG_KEY_MAX];
        snprintf(key, sizeof key, "tenants.list[%d].name", i);
        const char *name = c->tenants[i].name;
        if (!valid_name(name))
            return fail_key(x, HY_EINVAL, key,
                            "'%s' is not a name ([A-Za-z0-9._-], 1 to 63 characters)", name);
        if (!strcmp(name, "default"))
            return fail_key(x, HY_EINVAL, key,
                            "'default' is reserved (the tenant of every request when no tokens "
                            "are configured)");
        for (int j = 0; j < i; j++)
            if (!strcmp(name, c->tenants[j].name))
                return fail_key(x, HY_EINVAL, key, "'%s' is already tenants.list[%d]'s name", name,
                                j);
        int rc = check_token(x, c, i);
        if (rc) return rc;
    }
    return 0;
}

/* cluster.*: a member id where one is needed, the static set or etcd (not
 * both), addresses of the right form. */
static int check_cluster(cfg_ctx *x, const hy_cached_config *c)
{
    const bool members = c->ncluster_members || c->cluster_etcd[0];
    const bool workers = c->nscatter_workers || c->scatter_spawn || c->scatter_dns[0];
    if (seen_line(x, "cluster.secret") && seen_line(x, "cluster.secret_file"))
        return fail_key(x, HY_EINVAL, "cluster.secret_file",
                        "give cluster.secret or "
                        "cluster.secret_file, not both");
    const char *skey =
        seen_line(x, "cluster.secret_file") ? "cluster.secret_file" : "cluster.secret";
    const size_t sn = strlen(c->cluster_secret);
    if (sn && sn < HY_CFG_SECRET_MIN)
        return fail_key(x, HY_EINVAL, skey, "the secret has %zu characters; at least %d are needed",
                        sn, HY_CFG_SECRET_MIN);
    for (size_t j = 0; j < sn; j++)
        if (c->cluster_secret[j] <= ' ' || c->cluster_secret[j] > '~')
            return fail_key(x, HY_EINVAL, skey,
                            "the secret's character %zu is not printable ASCII (spaces excluded)",
                            j + 1);
    for (int i = 0; sn && i < c->ntenants; i++)
        if (!strcmp(c->cluster_secret, c->tenants[i].token))
            return fail_key(x, HY_EINVAL, skey, "the secret is tenants.list[%d]'s token", i);
    /* with tokens, members and workers call each other as members, never as a tenant */
    if (!sn && c->ntenants && (members || workers))
        return fail_key(x, HY_EINVAL, "cluster.secret",
                        "needed with tenants and %s: members and scatter workers call each other "
                        "with a credential of their own (at least %d printable characters, the "
                        "same on every member and worker), never with a tenant's token",
                        members ? "cluster members" : "scatter workers", HY_CFG_SECRET_MIN);
    if (c->cluster_tls_ca[0] && access(c->cluster_tls_ca, R_OK) != 0)
        return fail_key(x, HY_EINVAL, "cluster.tls_ca", "cannot read %s: %s", c->cluster_tls_ca,
                        strerror(errno));
    const char *id = c->cluster_id;
    if (id[0] && !valid_name(id))
        return fail_key(x, HY_EINVAL, "cluster.id",
                        "'%s' is not an id ([A-Za-z0-9._-], 1 to 63 characters)", id);
    /* (an empty id with members or etcd set is checked at the start: a
     * StatefulSet's pods share one file and each passes --cluster-id) */
    if (c->ncluster_members && c->cluster_etcd[0])
        return fail_key(x, HY_EINVAL, "cluster.members",
                        "%d members listed and cluster.etcd.endpoints set: the set comes from one "
                        "of the two",
                        c->ncluster_members);
    bool lo;
    if (c->cluster_advertise[0]) {
        int rc = check_addr(x, "cluster.advertise", c->cluster_advertise, &lo);
        if (rc) return rc;
    }
    bool self_listed = false;
    for (int i = 0; i < c->ncluster_members; i++) {
        char key[64];
        const hy_cfg_member *m = &c->cluster_members[i];
        snprintf(key, sizeof key, "cluster.members[%d].id", i);
        if (!valid_name(m->id))
            return fail_key(x, HY_EINVAL, key,
                            "'%s' is not an id ([A-Za-z0-9._-], 1 to 63 characters)", m->id);
        for (int j = 0; j < i; j++)
            if (!strcmp(m->id, c->cluster_members[j].id))
                return fail_key(x, HY_EINVAL, key, "'%s' is already cluster.members[%d]'s id",
                                m->id, j);
        snprintf(key, sizeof key, "cluster.members[%d].address", i);
        int rc = check_addr(x, key, m->address, &lo);
        if (rc) return rc;
        self_listed |= !strcmp(m->id, id);
    }
    if (id[0] && c->ncluster_members && !self_listed)
        return fail_key(x, HY_EINVAL, "cluster.members",
                        "cluster.id '%s' is not among the %d members listed", id,
                        c->ncluster_members);
    char ep[sizeof c->cluster_etcd];
    snprintf(ep, sizeof ep, "%s", c->cluster_etcd);
    int k = 0;
    for (char *save = NULL, *t = strtok_r(ep, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char key[64];
        snprintf(key, sizeof key, "cluster.etcd.endpoints (endpoint %d)", ++k);
        int rc = check_addr(x, key, t, &lo);
        if (rc) return rc;
    }
    if (c->cluster_etcd[0] && c->cluster_etcd_prefix[0] != '/')
        return fail_key(x, HY_EINVAL, "cluster.etcd.prefix", "'%s' does not start with '/'",
                        c->cluster_etcd_prefix);
    /* etcd over TLS and as a user of its own */
    const char *files[3] = {c->cluster_etcd_tls_ca, c->cluster_etcd_tls_cert,
                            c->cluster_etcd_tls_key};
    static const char *const fkeys[3] = {"cluster.etcd.tls_ca", "cluster.etcd.tls_cert",
                                         "cluster.etcd.tls_key"};
    for (int i = 0; i < 3; i++) {
        if (!files[i][0]) continue;
        if (!c->cluster_etcd[0])
            return fail_key(x, HY_EINVAL, fkeys[i], "set without cluster.etcd.endpoints");
        if (access(files[i], R_OK) != 0)
            return fail_key(x, HY_EIO, fkeys[i], "cannot read %s: %s", files[i], strerror(errno));
    }
    if (!c->cluster_etcd_tls_cert[0] != !c->cluster_etcd_tls_key[0])
        return fail_key(x, HY_EINVAL,
                        c->cluster_etcd_tls_cert[0] ? "cluster.etcd.tls_key"
                                                    : "cluster.etcd.tls_cert",
                        "a client certificate for etcd needs both tls_cert and tls_key");
    if (c->cluster_etcd_tls_cert[0] && !c->cluster_etcd_tls_ca[0])
        return fail_key(x, HY_EINVAL, "cluster.etcd.tls_cert",
                        "a client certificate needs TLS: set cluster.etcd.tls_ca");
    if (c->cluster_etcd_tls_server_name[0] && !c->cluster_etcd_tls_ca[0])
        return fail_key(x, HY_EINVAL, "cluster.etcd.tls_server_name",
                        "set without cluster.etcd.tls_ca (TLS)");
    if (c->cluster_etcd_user[0] && !c->cluster_etcd[0])
        return fail_key(x, HY_EINVAL, "cluster.etcd.user", "set without cluster.etcd.endpoints");
    if (c->cluster_etcd_password[0] && !c->cluster_etcd_user[0])
        return fail_key(x, HY_EINVAL, "cluster.etcd.password",
                        "a password without cluster.etcd.user");
    if (c->cluster_etcd_user[0] && !c->cluster_etcd_password[0])
        return fail_key(x, HY_EINVAL, "cluster.etcd.password",
                        "cluster.etcd.user '%s' needs its password (password or password_file)",
                        c->cluster_etcd_user);
    return 0;
}

/* What involves more than one key, or a string's form. */
static int check_whole(cfg_ctx *x, hy_cached_config *c)
{
    bool lo = true, http_lo = true;
    int rc = check_addr(x, "listen", c->listen, &lo);
    if (!rc && c->http_listen[0]) rc = check_addr(x, "http_listen", c->http_listen, &http_lo);
    /* the HTTP server binds numeric addresses only (no name resolution there) */
    if (!rc && c->http_listen[0] && !isdigit((unsigned char)c->http_listen[0]) &&
        c->http_listen[0] != '[')
        rc = fail_key(x, HY_EINVAL, "http_listen",
                      "'%.100s': give a numeric address (e.g. 127.0.0.1:7879 or [::1]:7879)",
                      c->http_listen);
    if (!rc && c->watchers >= c->workers)
        rc = fail_key(x, HY_EINVAL, "limits.watchers",
                      "%u Watch streams would hold all %u workers (limits.workers): keep it below",
                      c->watchers, c->workers);
    if (!rc && c->tp_tcp_listen[0]) {
        bool tlo;
        rc = check_addr(x, "transport.tcp_listen", c->tp_tcp_listen, &tlo);
    }
    for (int i = 0; !rc && i < c->nscatter_workers; i++) {
        char key[64];
        bool wlo;
        snprintf(key, sizeof key, "scatter.workers[%d].address", i);
        rc = check_addr(x, key, c->scatter_workers[i].address, &wlo);
    }
    if (!rc && c->scatter_dns[0]) {
        bool dlo;
        rc = check_addr(x, "scatter.dns", c->scatter_dns, &dlo);
    }
    if (!rc && c->nscatter_workers + (int)c->scatter_spawn > HY_CFG_MAX_WORKERS)
        rc = fail_key(x, HY_EINVAL, "scatter.spawn",
                      "%u spawned and %d listed workers are over the limit of %d", c->scatter_spawn,
                      c->nscatter_workers, HY_CFG_MAX_WORKERS);
    if (!rc && strcmp(c->scatter_policy, "lpt") && strcmp(c->scatter_policy, "round-robin"))
        rc = fail_key(x, HY_EINVAL, "scatter.policy", "'%s' is not lpt or round-robin",
                      c->scatter_policy);
    if (!rc && strcmp(c->pic_reuse, "auto") && strcmp(c->pic_reuse, "fetch") &&
        strcmp(c->pic_reuse, "recompute"))
        rc = fail_key(x, HY_EINVAL, "pic.reuse", "'%s' is not auto, fetch or recompute",
                      c->pic_reuse);
    if (!rc && strcmp(c->exec_mla, "auto") && strcmp(c->exec_mla, "expanded") &&
        strcmp(c->exec_mla, "latent"))
        rc = fail_key(x, HY_EINVAL, "executor.mla", "'%s' is not auto, expanded or latent",
                      c->exec_mla);
    hy_weights wfmt;
    if (!rc && hy_weights_parse(c->exec_weights, &wfmt))
        rc = fail_key(x, HY_EINVAL, "executor.weights", "'%s' is not auto, f32, bf16 or q8",
                      c->exec_weights);
    hy_exec_device dkind;
    int dnum;
    if (!rc && hy_exec_device_parse(c->exec_device, &dkind, &dnum))
        rc = fail_key(x, HY_EINVAL, "executor.device",
                      "'%s' is not cpu, cuda, cuda:N (a device ordinal) or emulated",
                      c->exec_device);
    if (!rc && strcmp(c->tp_rdma, "auto") && strcmp(c->tp_rdma, "off") &&
        strcmp(c->tp_rdma, "required"))
        rc = fail_key(x, HY_EINVAL, "transport.rdma", "'%s' is not auto, off or required",
                      c->tp_rdma);
    if (!rc) rc = check_cluster(x, c);
    if (!rc) rc = check_tls(x, c);
    if (!rc) rc = check_models(x, c);
    if (!rc) rc = check_tiers(x, c);
    if (!rc && c->top_k > c->max_top_k)
        rc = fail_key(x, HY_EINVAL, "pic.top_k", "%u is out of range (1..limits.max_top_k = %u)",
                      c->top_k, c->max_top_k);
    if (!rc) rc = check_tenants(x, c);
    if (!rc && !lo && c->ntenants == 0)
        rc = fail_key(x, HY_EINVAL, "listen",
                      "'%s' is not a loopback address (127.0.0.0/8, [::1], localhost): listening "
                      "there needs tenants with tokens (tenants.list)",
                      c->listen);
    if (rc) return rc;
    c->host_policy.capacity = c->host_bytes;
    c->nvme_policy.capacity = c->nvme_bytes;
    c->hbm_policy.capacity = c->hbm_bytes;
    return 0;
}

static int syntax_error(cfg_ctx *x, const yaml_parser_t *p)
{
    if (p->error == YAML_MEMORY_ERROR)
        return hy_err_set(x->err, HY_ENOMEM, "%s: out of memory", x->file);
    if (p->error == YAML_READER_ERROR)
        return hy_err_set(x->err, HY_EINVAL, "%s: YAML: %s at byte %zu", x->file,
                          p->problem ? p->problem : "unreadable", p->problem_offset);
    char ctx[128] = "";
    if (p->context)
        snprintf(ctx, sizeof ctx, " (%s at line %zu, column %zu)", p->context,
                 p->context_mark.line + 1, p->context_mark.column + 1);
    return hy_err_set(x->err, HY_EINVAL, "%s:%zu:%zu: YAML syntax error: %s%s", x->file,
                      p->problem_mark.line + 1, p->problem_mark.column + 1,
                      p->problem ? p->problem : "malformed", ctx);
}

/* Loads the one document of text into doc (root NULL when empty). */
static int load_document(cfg_ctx *x, const char *text, size_t len, yaml_document_t *doc)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return hy_err_set(x->err, HY_ENOMEM, "%s: out of memory", x->file);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int rc = 0;
    if (!yaml_parser_load(&p, doc)) {
        rc = syntax_error(x, &p);
    } else if (yaml_document_get_root_node(doc)) {
        yaml_document_t next;
        if (!yaml_parser_load(&p, &next)) {
            rc = syntax_error(x, &p);
        } else {
            yaml_node_t *root = yaml_document_get_root_node(&next);
            if (root)
                rc = fail(x, HY_EINVAL, line_of(root), NULL,
                          "a second YAML document (the configuration is one document)");
            yaml_document_delete(&next);
        }
        if (rc) yaml_document_delete(doc);
    }
    yaml_parser_delete(&p);
    return rc;
}

int hy_cached_config_parse(const char *text, size_t len, const char *path, hy_cached_config *c,
                           hy_err *err)
{
    cfg_ctx *x = calloc(1, sizeof *x);
    hy_cached_config *tmp = malloc(sizeof *tmp);
    if (!x || !tmp) {
        free(x), free(tmp);
        return hy_err_set(err, HY_ENOMEM, "%s: out of memory", path && *path ? path : "(config)");
    }
    x->file = path && *path ? path : "(config)";
    x->err = err;
    hy_cached_config_default(tmp);
    snprintf(tmp->path, sizeof tmp->path, "%s", path ? path : "");
    yaml_document_t doc;
    x->doc = &doc;
    int rc = load_document(x, text, len, &doc);
    if (rc == 0) {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root && root->type == YAML_MAPPING_NODE)
            rc = walk_mapping(x, root, "", "", tmp);
        else if (root && !is_null(root))
            rc = fail(x, HY_EINVAL, line_of(root), NULL,
                      "the document is %s; a mapping of keys is expected", kind_name(root));
        yaml_document_delete(&doc);
    }
    if (rc == 0) rc = check_whole(x, tmp);
    if (rc == 0) memcpy(c, tmp, sizeof *c);
    free(tmp);
    free(x);
    return rc;
}

int hy_cached_config_load(const char *path, hy_cached_config *c, hy_err *err)
{
    char *text;
    size_t len;
    hy_err e = {0};
    int rc = hy_read_file(path, CFG_FILE_MAX, &text, &len, &e);
    if (rc) return hy_err_set(err, rc == HY_ENOMEM ? rc : HY_EIO, "%s", e.msg);
    rc = hy_cached_config_parse(text, len, path, c, err);
    hy_free(text);
    return rc;
}

int hy_cached_config_validate(hy_cached_config *c, hy_err *err)
{
    cfg_ctx *x = calloc(1, sizeof *x);
    if (!x) return hy_err_set(err, HY_ENOMEM, "out of memory");
    x->file = c->path[0] ? c->path : "(command line)";
    x->err = err;
    int rc = check_whole(x, c);
    free(x);
    return rc;
}

const hy_cfg_tenant *hy_cached_config_tenant_by_token(const hy_cached_config *c, const char *token)
{
    if (!token) return NULL;
    /* Both sides NUL-padded to HY_CFG_TOKEN_MAX and compared whole, for
     * every tenant: the time depends on neither where the first difference
     * lies nor which tenant matched. */
    char want[HY_CFG_TOKEN_MAX] = {0};
    size_t n = strnlen(token, HY_CFG_TOKEN_MAX);
    unsigned usable = n > 0 && n < HY_CFG_TOKEN_MAX;
    if (usable) memcpy(want, token, n);
    const hy_cfg_tenant *found = NULL;
    for (int i = 0; i < c->ntenants; i++) {
        unsigned d = 0;
        for (size_t j = 0; j < HY_CFG_TOKEN_MAX; j++)
            d |= (unsigned char)(c->tenants[i].token[j] ^ want[j]);
        __asm__ volatile("" : "+r"(d)); /* keep the loop whole: no early exit */
        uintptr_t match = (uintptr_t)0 - (uintptr_t)((d == 0) & usable);
        found = (const hy_cfg_tenant *)(((uintptr_t)&c->tenants[i] & match) |
                                        ((uintptr_t)found & ~match));
    }
    return found;
}

/* ---- printing: the table back out, through libyaml's emitter ---- */

static void emit_scalar(yaml_emitter_t *em, const char *v)
{
    yaml_event_t ev;
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)v, (int)strlen(v), 1, 1,
                                 *v ? YAML_ANY_SCALAR_STYLE : YAML_SINGLE_QUOTED_SCALAR_STYLE);
    yaml_emitter_emit(em, &ev);
}

static void emit_mapping(yaml_emitter_t *em, bool start)
{
    yaml_event_t ev;
    if (start)
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
    else
        yaml_mapping_end_event_initialize(&ev);
    yaml_emitter_emit(em, &ev);
}

/* The field of o in base as the file would say it. */
static void format_value(const opt *o, const void *base, char *out, size_t cap)
{
    const char *field = (const char *)base + o->off;
    switch (o->kind) {
    case OPT_STR:
    case OPT_ADDRS:
        snprintf(out, cap, "%s", field);
        break;
    case OPT_TOKEN:
        snprintf(out, cap, "%s", field[0] ? "<redacted>" : ""); /* set or not, never what */
        break;
    case OPT_SIZE:
    case OPT_U64:
        format_number(o, *(const uint64_t *)field, out, cap);
        break;
    case OPT_U32:
        snprintf(out, cap, "%u", *(const uint32_t *)field);
        break;
    case OPT_INT:
        snprintf(out, cap, "%d", *(const int *)field);
        break;
    case OPT_BOOL:
        snprintf(out, cap, "%s", *(const bool *)field ? "true" : "false");
        break;
    case OPT_EVICT:
        snprintf(out, cap, "%s", hy_evict_name(((const hy_policy_config *)field)->evict));
        break;
    case OPT_ADMIT:
        snprintf(out, cap, "%s", hy_admit_name(((const hy_policy_config *)field)->admit));
        break;
    case OPT_DTYPE:
        snprintf(out, cap, "%s", k_dtypes[*(const hy_entry_dtype *)field]);
        break;
    case OPT_TOL:
        snprintf(out, cap, "%g", (double)*(const float *)field);
        break;
    case OPT_LEVEL:
        snprintf(out, cap, "%s", k_levels[*(const int *)field]);
        break;
    case OPT_TOKEN_FILE:
    case OPT_LIST:
        assert(!"not a scalar");
        out[0] = '\0';
        break;
    }
}

static void emit_list(yaml_emitter_t *em, const opt *o, const hy_cached_config *c)
{
    yaml_event_t ev;
    char section[CFG_KEY_MAX];
    size_t sn = (size_t)snprintf(section, sizeof section, "%s[].", o->name);
    int n = *(const int *)((const char *)c + o->count);
    yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
    yaml_emitter_emit(em, &ev);
    for (int i = 0; i < n; i++) {
        const char *item = (const char *)c + o->off + (size_t)i * o->cap;
        emit_mapping(em, true);
        for (size_t k = 0; k < NOPTS; k++) {
            const opt *f = &k_opts[k];
            if (strncmp(f->name, section, sn) || f->kind == OPT_TOKEN_FILE) continue;
            char v[PATH_MAX];
            format_value(f, item, v, sizeof v);
            emit_scalar(em, f->name + sn), emit_scalar(em, v);
        }
        emit_mapping(em, false);
    }
    yaml_sequence_end_event_initialize(&ev);
    yaml_emitter_emit(em, &ev);
}

/* Closes the open sections of *open (a dotted prefix, "" at the top) until it
 * is a section of name, then opens name's own sections. */
static void enter_section(yaml_emitter_t *em, char *open, const char *name)
{
    size_t want = (size_t)(strrchr(name, '.') ? strrchr(name, '.') - name : 0);
    for (;;) {
        size_t n = strlen(open);
        if (n <= want && !strncmp(open, name, n) && (n == 0 || name[n] == '.')) break;
        emit_mapping(em, false);
        char *dot = strrchr(open, '.');
        *(dot ? dot : open) = '\0';
    }
    while (strlen(open) < want) {
        size_t n = strlen(open);
        const char *part = name + n + (n ? 1 : 0);
        size_t plen = strcspn(part, ".");
        char word[CFG_KEY_MAX];
        snprintf(word, sizeof word, "%.*s", (int)plen, part);
        emit_scalar(em, word), emit_mapping(em, true);
        snprintf(open + n, CFG_KEY_MAX - n, "%s%s", n ? "." : "", word);
    }
}

void hy_cached_config_print(const hy_cached_config *c, FILE *out)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    if (!yaml_emitter_initialize(&em)) return;
    yaml_emitter_set_output_file(&em, out);
    yaml_emitter_set_unicode(&em, 1);
    yaml_emitter_set_width(&em, -1); /* no folding of long values */
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    yaml_emitter_emit(&em, &ev);
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    yaml_emitter_emit(&em, &ev);
    emit_mapping(&em, true);
    char open[CFG_KEY_MAX] = "";
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *o = &k_opts[i];
        if (strchr(o->name, '[')) continue;      /* a list item's field */
        if (o->kind == OPT_TOKEN_FILE) continue; /* printed as its token, redacted */
        enter_section(&em, open, o->name);
        const char *dot = strrchr(o->name, '.');
        emit_scalar(&em, dot ? dot + 1 : o->name);
        if (o->kind == OPT_LIST) {
            emit_list(&em, o, c);
        } else {
            char v[PATH_MAX];
            format_value(o, c, v, sizeof v);
            emit_scalar(&em, v);
        }
    }
    enter_section(&em, open, "end");
    emit_mapping(&em, false);
    yaml_document_end_event_initialize(&ev, 1);
    yaml_emitter_emit(&em, &ev);
    yaml_stream_end_event_initialize(&ev);
    yaml_emitter_emit(&em, &ev);
    yaml_emitter_flush(&em);
    yaml_emitter_delete(&em);
}

void hy_cached_config_print_keys(FILE *out)
{
    hy_cached_config *c = malloc(sizeof *c);
    if (!c) return;
    hy_cached_config_default(c);
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *o = &k_opts[i];
        const char *def = o->def;
        if (o->kind == OPT_LIST) /* empty by default, or the embedded model (models) */
            def = *(const int *)((const char *)c + o->count) == 0 ? "[]" : NULL;
        else if (!def && !strchr(o->name, '[') && o->kind == OPT_TOKEN)
            def = ""; /* a secret not set (its _file form has no default: a file is read) */
        fprintf(out, "%s\t%s\n", o->name, !def ? "-" : *def ? def : "\"\"");
    }
    free(c);
}

/* ---- what a reload changes ---- */

/* Whether the value of o (a scalar) differs between the bases a and b. */
static bool value_differs(const opt *o, const char *a, const char *b)
{
    a += o->off, b += o->off;
    switch (o->kind) {
    case OPT_STR:
    case OPT_ADDRS:
    case OPT_TOKEN:
        return strncmp(a, b, o->cap) != 0;
    case OPT_TOKEN_FILE: /* its token is the OPT_TOKEN at the same place */
    case OPT_LIST:
        return false;
    case OPT_SIZE:
    case OPT_U64:
        return *(const uint64_t *)a != *(const uint64_t *)b;
    case OPT_U32:
        return *(const uint32_t *)a != *(const uint32_t *)b;
    case OPT_INT:
    case OPT_LEVEL:
        return *(const int *)a != *(const int *)b;
    case OPT_BOOL:
        return *(const bool *)a != *(const bool *)b;
    case OPT_EVICT:
        return ((const hy_policy_config *)a)->evict != ((const hy_policy_config *)b)->evict;
    case OPT_ADMIT:
        return ((const hy_policy_config *)a)->admit != ((const hy_policy_config *)b)->admit;
    case OPT_DTYPE:
        return *(const hy_entry_dtype *)a != *(const hy_entry_dtype *)b;
    case OPT_TOL:
        return memcmp(a, b, sizeof(float)) != 0;
    }
    return true;
}

/* Whether a RESTART field of list o differs between a's and b's items at
 * the same index (a list's own count is its RESTART value). */
static bool list_differs(const opt *o, const char *a, const char *b, const opt *field)
{
    const int na = *(const int *)(a + o->count), nb = *(const int *)(b + o->count);
    for (int i = 0; i < na && i < nb; i++)
        if (value_differs(field, a + o->off + (size_t)i * o->cap, b + o->off + (size_t)i * o->cap))
            return true;
    return false;
}

int hy_cached_config_restart_keys(const hy_cached_config *a, const hy_cached_config *b, char *out,
                                  size_t cap)
{
    int n = 0;
    size_t used = 0;
    if (cap) out[0] = '\0';
    for (size_t i = 0; i < NOPTS; i++) {
        const opt *o = &k_opts[i];
        if (o->reload == RELOAD) continue;
        bool differs;
        const char *open = strchr(o->name, '[');
        if (open) { /* a list item's field: compared item by item */
            const opt *list = find_opt_n(o->name, (size_t)(open - o->name));
            assert(list && list->kind == OPT_LIST);
            differs = list_differs(list, (const char *)a, (const char *)b, o);
        } else if (o->kind == OPT_LIST) {
            differs = *(const int *)((const char *)a + o->count) !=
                      *(const int *)((const char *)b + o->count);
        } else {
            differs = value_differs(o, (const char *)a, (const char *)b);
        }
        if (!differs) continue;
        n++;
        if (used < cap) {
            const int w = snprintf(out + used, cap - used, "%s%s", used ? ", " : "", o->name);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    return n;
}

int hy_cached_config_key_reloads(const char *key)
{
    const opt *o = find_opt(key);
    return o ? o->reload == RELOAD : -1;
}

bool hy_cached_config_is_loopback(const char *addr)
{
    bool lo = false;
    return parse_addr(addr, &lo) && lo;
}
