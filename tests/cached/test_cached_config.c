/*
 * hypic-cached's configuration (cached/config.c): defaults, a file that sets
 * every key, the committed example files, sizes and counts at and past their
 * limits, every class of error with its message (file, line, key and value
 * named; tokens never), token files, the loopback rule for the listener,
 * tls pairs, the token lookup, the printed configuration parsing back to
 * the same one, and which keys a SIGHUP reload applies.
 */
#include "config_internal.h"
#include "test_util.h"

#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG        "/etc/hypic/cfg.yaml"
#define DEPLOY_DIR HY_FIXTURES_DIR "/../../deploy"
#define DOCS_DIR   HY_FIXTURES_DIR "/../../docs"

static char g_dir[64];            /* a temporary directory for files the configs name */
static hy_cached_config g_a, g_b; /* large: kept off the stack */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(text, f);
    fclose(f);
}

static int parse(const char *text, hy_cached_config *c, hy_err *e)
{
    return hy_cached_config_parse(text, strlen(text), CFG, c, e);
}

static void parse_ok(const char *text, hy_cached_config *c)
{
    hy_err e = {0};
    int rc = parse(text, c, &e);
    if (rc) fprintf(stderr, "\n  %.300s\n  -> %s\n", text, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
}

/* Parsing text fails with code; the message starts with the file's name and
 * holds each fragment (a NULL-terminated list). Returns whether it did. */
static bool fails(const char *text, int code, ...)
{
    hy_cached_config c;
    hy_err e = {0};
    hy_cached_config_default(&c);
    int rc = parse(text, &c, &e);
    bool ok = rc == code && e.code == code && strncmp(e.msg, CFG, strlen(CFG)) == 0;
    va_list ap;
    va_start(ap, code);
    for (const char *f; (f = va_arg(ap, const char *)) != NULL;)
        if (!strstr(e.msg, f)) {
            ok = false;
            fprintf(stderr, "\n  missing '%s'", f);
        }
    va_end(ap);
    if (!ok) fprintf(stderr, "\n  %.300s\n  -> %s '%s'\n", text, hy_strerror(rc), e.msg);
    CU_ASSERT(ok);
    return ok;
}

/* a and b equal, path aside, byte for byte (padding and string tails are
 * zero in both by contract). */
static bool same_config(hy_cached_config *a, hy_cached_config *b)
{
    memcpy(b->path, a->path, sizeof a->path);
    return memcmp(a, b, sizeof *a) == 0;
}

static void test_defaults(void)
{
    hy_cached_config *c = &g_a;
    hy_cached_config_default(c);
    CU_ASSERT_STRING_EQUAL(c->path, "");
    CU_ASSERT_STRING_EQUAL(c->listen, "127.0.0.1:7878");
    CU_ASSERT_STRING_EQUAL(c->http_listen, "127.0.0.1:7879");
    CU_ASSERT_STRING_EQUAL(c->tls_cert, "");
    CU_ASSERT_STRING_EQUAL(c->tls_key, "");
    CU_ASSERT_EQUAL(c->nmodels, 1);
    CU_ASSERT_STRING_EQUAL(c->models[0].name, "recall");
    CU_ASSERT_STRING_EQUAL(c->models[0].dir, "models/hypic-recall");
    CU_ASSERT_EQUAL(c->host_bytes, 1ull << 30);
    CU_ASSERT_EQUAL(c->host_policy.evict, HY_EVICT_GDSF);
    CU_ASSERT_EQUAL(c->host_policy.admit, HY_ADMIT_TINYLFU);
    CU_ASSERT_EQUAL(c->host_policy.min_tokens, 0);
    CU_ASSERT_EQUAL(c->host_policy.capacity, 1ull << 30);
    CU_ASSERT_STRING_EQUAL(c->nvme_dir, "");
    CU_ASSERT_EQUAL(c->nvme_bytes, 16ull << 30);
    CU_ASSERT_EQUAL(c->nvme_extent_bytes, 256ull << 20);
    CU_ASSERT_EQUAL(c->nvme_policy.evict, HY_EVICT_GDSF);
    CU_ASSERT_EQUAL(c->nvme_policy.admit, HY_ADMIT_ALWAYS);
    CU_ASSERT_EQUAL(c->nvme_policy.capacity, 16ull << 30);
    CU_ASSERT_FALSE(c->write_through);
    CU_ASSERT_EQUAL(c->hbm_bytes, 0);
    CU_ASSERT_EQUAL(c->hbm_device, 0);
    CU_ASSERT_EQUAL(c->hbm_policy.evict, HY_EVICT_GDSF);
    CU_ASSERT_EQUAL(c->hbm_policy.admit, HY_ADMIT_TINYLFU);
    CU_ASSERT_EQUAL(c->ttl_s, 0);
    CU_ASSERT_EQUAL(c->seam, HY_SEAM_DEFAULT);
    CU_ASSERT(c->tolerance == 0.03f);
    CU_ASSERT_EQUAL(c->dtype, HY_ENTRY_BF16);
    CU_ASSERT_EQUAL(c->t_dtype, HY_ENTRY_BF16);
    CU_ASSERT_EQUAL(c->kv_dtype, HY_ENTRY_BF16);
    CU_ASSERT_EQUAL(c->top_k, 5);
    CU_ASSERT_EQUAL(c->prefix_cache_bytes, 256ull << 20);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    CU_ASSERT_EQUAL(c->exec_threads, cpus > 256 ? 256 : cpus);
    CU_ASSERT_EQUAL(c->exec_contexts, 1);
    CU_ASSERT_EQUAL(c->max_batch, 1024);
    CU_ASSERT_STRING_EQUAL(c->exec_mla, "auto");
    CU_ASSERT_STRING_EQUAL(c->pic_reuse, "auto");
    CU_ASSERT_EQUAL(c->ntenants, 0);
    CU_ASSERT_EQUAL(c->default_quota, 0);
    CU_ASSERT_EQUAL(c->max_message, 64ull << 20);
    CU_ASSERT_EQUAL(c->max_segments, 256);
    CU_ASSERT_EQUAL(c->max_tokens, 262144);
    CU_ASSERT_EQUAL(c->max_top_k, 100);
    CU_ASSERT_EQUAL(c->max_new_tokens, 256);
    CU_ASSERT_EQUAL(c->in_flight_per_tenant, 64);
    CU_ASSERT_EQUAL(c->queue, 64);
    CU_ASSERT_EQUAL(c->max_lease_ms, 10000);
    CU_ASSERT_EQUAL(c->watchers, 16);
    CU_ASSERT_EQUAL(c->workers, 32);
    CU_ASSERT_EQUAL(c->page_size, 1000);
    CU_ASSERT_EQUAL(c->max_entry_bytes, 1ull << 30);
    CU_ASSERT_EQUAL(c->drain_ms, 10000);
    CU_ASSERT_EQUAL(c->log_level, HY_LOG_INFO);
    CU_ASSERT_TRUE(c->log_requests);

    /* An empty document, a null one and one of comments are the defaults,
     * and the defaults pass validation. */
    const char *empties[] = {"", "~\n", "# nothing here\n\n", "---\n...\n"};
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        parse_ok(empties[i], &g_b);
        CU_ASSERT_STRING_EQUAL(g_b.path, CFG);
        CU_ASSERT_TRUE(same_config(&g_a, &g_b));
    }
    /* Empty sections are their defaults too. */
    parse_ok("tls:\ntiers: {host: {}, nvme: ~}\npic: {}\n", &g_b);
    CU_ASSERT_TRUE(same_config(&g_a, &g_b));
}

/* Every key set to something other than its default. */
static const char *k_full =
    "listen: \"[::1]:9000\"\n"
    "http_listen: \"\"\n"
    "tls: {cert: %s/cert.pem, key: %s/key.pem}\n"
    "models:\n"
    "  - {name: tiny2, path: /m/tiny}\n"
    "  - {name: Qwen3.5-0.8B_x, path: \"/m/q 1: #x\"}\n"
    "tiers:\n"
    "  host: {bytes: 2G, evict: lru, admit: min-tokens, min_tokens: 64}\n"
    "  nvme: {path: /var/nvme, bytes: 4T, extent_bytes: 512MiB, evict: s3fifo,\n"
    "         admit: second-hit, min_tokens: 0, write_through: true}\n"
    "  hbm: {bytes: 8G, device: 3, evict: hybrid, admit: always}\n"
    "  ttl_s: 3600\n"
    "pic: {seam: 0, tolerance: 0.125, dtype: f32, t_dtype: f32, kv_dtype: f32, top_k: 50,\n"
    "      prefix_cache_bytes: 0}\n"
    "executor: {threads: 7, contexts: 3, max_batch: 512}\n"
    "tenants:\n"
    "  default_quota: 10G\n"
    "  list:\n"
    "    - {name: alice, token: \"alice-token-0123456789\", quota: 1G, max_in_flight: 8, admin: "
    "true}\n"
    "    - name: bob.B-2\n"
    "      token_file: %s/bob.token\n"
    "limits: {max_message: 4K, max_segments: 65536, max_tokens: 16777216, max_top_k: 1024,\n"
    "         max_new_tokens: 0, in_flight_per_tenant: 3, queue: 0, max_lease_ms: 1,\n"
    "         watchers: 0, workers: 2, page_size: 100000, max_entry_bytes: 1T,\n"
    "         drain_ms: 600000}\n"
    "log: {level: debug, requests: false}\n";

static char g_full[4096];

static void make_full(void)
{
    char p[128];
    snprintf(p, sizeof p, "%s/cert.pem", g_dir), write_file(p, "CERT\n");
    snprintf(p, sizeof p, "%s/key.pem", g_dir), write_file(p, "KEY\n");
    snprintf(p, sizeof p, "%s/bob.token", g_dir),
        write_file(p, "  bob-token-abcdefghij\t\r\nrest\n");
    snprintf(g_full, sizeof g_full, k_full, g_dir, g_dir, g_dir);
}

static void test_full_file(void)
{
    make_full();
    hy_cached_config *c = &g_a;
    parse_ok(g_full, c);
    char p[128];
    CU_ASSERT_STRING_EQUAL(c->listen, "[::1]:9000");
    CU_ASSERT_STRING_EQUAL(c->http_listen, "");
    snprintf(p, sizeof p, "%s/cert.pem", g_dir);
    CU_ASSERT_STRING_EQUAL(c->tls_cert, p);
    snprintf(p, sizeof p, "%s/key.pem", g_dir);
    CU_ASSERT_STRING_EQUAL(c->tls_key, p);
    CU_ASSERT_EQUAL(c->nmodels, 2); /* the file's list replaces the default one */
    CU_ASSERT_STRING_EQUAL(c->models[0].name, "tiny2");
    CU_ASSERT_STRING_EQUAL(c->models[0].dir, "/m/tiny");
    CU_ASSERT_STRING_EQUAL(c->models[1].name, "Qwen3.5-0.8B_x");
    CU_ASSERT_STRING_EQUAL(c->models[1].dir, "/m/q 1: #x");
    CU_ASSERT_EQUAL(c->host_bytes, 2ull << 30);
    CU_ASSERT_EQUAL(c->host_policy.evict, HY_EVICT_LRU);
    CU_ASSERT_EQUAL(c->host_policy.admit, HY_ADMIT_MIN_TOKENS);
    CU_ASSERT_EQUAL(c->host_policy.min_tokens, 64);
    CU_ASSERT_EQUAL(c->host_policy.capacity, 2ull << 30);
    CU_ASSERT_STRING_EQUAL(c->nvme_dir, "/var/nvme");
    CU_ASSERT_EQUAL(c->nvme_bytes, 4ull << 40);
    CU_ASSERT_EQUAL(c->nvme_extent_bytes, 512ull << 20);
    CU_ASSERT_EQUAL(c->nvme_policy.evict, HY_EVICT_S3FIFO);
    CU_ASSERT_EQUAL(c->nvme_policy.admit, HY_ADMIT_SECOND_HIT);
    CU_ASSERT_EQUAL(c->nvme_policy.capacity, 4ull << 40);
    CU_ASSERT_TRUE(c->write_through);
    CU_ASSERT_EQUAL(c->hbm_bytes, 8ull << 30);
    CU_ASSERT_EQUAL(c->hbm_device, 3);
    CU_ASSERT_EQUAL(c->hbm_policy.evict, HY_EVICT_HYBRID);
    CU_ASSERT_EQUAL(c->hbm_policy.admit, HY_ADMIT_ALWAYS);
    CU_ASSERT_EQUAL(c->hbm_policy.capacity, 8ull << 30);
    CU_ASSERT_EQUAL(c->ttl_s, 3600);
    CU_ASSERT_EQUAL(c->seam, 0);
    CU_ASSERT_EQUAL(c->dtype, HY_ENTRY_F32);
    CU_ASSERT(c->tolerance == 0.125f);
    CU_ASSERT_EQUAL(c->t_dtype, HY_ENTRY_F32);
    CU_ASSERT_EQUAL(c->kv_dtype, HY_ENTRY_F32);
    CU_ASSERT_EQUAL(c->top_k, 50);
    CU_ASSERT_EQUAL(c->prefix_cache_bytes, 0);
    CU_ASSERT_EQUAL(c->exec_threads, 7);
    CU_ASSERT_EQUAL(c->exec_contexts, 3);
    CU_ASSERT_EQUAL(c->max_batch, 512);
    CU_ASSERT_EQUAL(c->default_quota, 10ull << 30);
    CU_ASSERT_EQUAL(c->ntenants, 2);
    CU_ASSERT_STRING_EQUAL(c->tenants[0].name, "alice");
    CU_ASSERT_STRING_EQUAL(c->tenants[0].token, "alice-token-0123456789");
    CU_ASSERT_EQUAL(c->tenants[0].quota_bytes, 1ull << 30);
    CU_ASSERT_EQUAL(c->tenants[0].max_in_flight, 8);
    CU_ASSERT(c->tenants[0].admin);
    CU_ASSERT(!c->tenants[1].admin);
    CU_ASSERT_STRING_EQUAL(c->tenants[1].name, "bob.B-2");
    CU_ASSERT_STRING_EQUAL(c->tenants[1].token, "bob-token-abcdefghij"); /* first line, trimmed */
    CU_ASSERT_EQUAL(c->tenants[1].quota_bytes, 0);
    CU_ASSERT_EQUAL(c->tenants[1].max_in_flight, 0);
    CU_ASSERT_EQUAL(c->max_message, 4096);
    CU_ASSERT_EQUAL(c->max_segments, 65536);
    CU_ASSERT_EQUAL(c->max_tokens, 16777216);
    CU_ASSERT_EQUAL(c->max_top_k, 1024);
    CU_ASSERT_EQUAL(c->max_new_tokens, 0);
    CU_ASSERT_EQUAL(c->in_flight_per_tenant, 3);
    CU_ASSERT_EQUAL(c->queue, 0);
    CU_ASSERT_EQUAL(c->max_lease_ms, 1);
    CU_ASSERT_EQUAL(c->watchers, 0);
    CU_ASSERT_EQUAL(c->workers, 2);
    CU_ASSERT_EQUAL(c->page_size, 100000);
    CU_ASSERT_EQUAL(c->max_entry_bytes, 1ull << 40);
    CU_ASSERT_EQUAL(c->drain_ms, 600000);
    CU_ASSERT_EQUAL(c->log_level, HY_LOG_DEBUG);
    CU_ASSERT_FALSE(c->log_requests);
    /* The bytes after each string's NUL stay zero (the token lookup
     * compares whole arrays). */
    const hy_cfg_tenant *t = &c->tenants[1];
    for (size_t i = strlen(t->token); i < sizeof t->token; i++) CU_ASSERT_EQUAL(t->token[i], 0);
}

/* The example in deploy/ sets every key to its default (threads aside, left
 * to the CPU count); the minimal one names a model and an NVMe tier. */
static void test_example_files(void)
{
    hy_err e = {0};
    hy_cached_config_default(&g_a);
    int rc = hy_cached_config_load(DEPLOY_DIR "/hypic-cached.yaml", &g_b, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_b.path, "deploy/hypic-cached.yaml"));
    CU_ASSERT_TRUE(same_config(&g_a, &g_b));

    /* Every key the printer writes appears in the example. */
    char *example;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(
        hy_read_file(DEPLOY_DIR "/hypic-cached.yaml", 1 << 20, &example, &len, &e), HY_OK);
    char *printed = NULL;
    size_t plen = 0;
    FILE *f = open_memstream(&printed, &plen);
    hy_cached_config_print(&g_a, f);
    fclose(f);
    for (char *line = strtok(printed, "\n"); line; line = strtok(NULL, "\n")) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char key[64];
        const char *k = line + strspn(line, " -");
        snprintf(key, sizeof key, "%.*s:", (int)(colon - k), k);
        if (!strstr(example, key)) fprintf(stderr, "\n  key '%s' not in the example\n", key);
        CU_ASSERT_PTR_NOT_NULL(strstr(example, key));
    }
    free(printed);
    hy_free(example);

    rc = hy_cached_config_load(DEPLOY_DIR "/hypic-cached.minimal.yaml", &g_b, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_EQUAL(g_b.nmodels, 1);
    CU_ASSERT_STRING_EQUAL(g_b.models[0].name, "recall");
    CU_ASSERT_STRING_NOT_EQUAL(g_b.nvme_dir, "");
}

static void test_sizes(void)
{
    static const struct {
        const char *text;
        uint64_t want;
    } ok[] = {
        {"0", 0},
        {"1", 1},
        {"1K", 1024},
        {"1KiB", 1024},
        {"3M", 3ull << 20},
        {"3MiB", 3ull << 20},
        {"2G", 2ull << 30},
        {"2GiB", 2ull << 30},
        {"5T", 5ull << 40},
        {"5TiB", 5ull << 40},
        {"007K", 7ull << 10},
        {"\"16M\"", 16ull << 20},
        {"16777215T", 16777215ull << 40},
        {"18446744073709551615", UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char text[128];
        snprintf(text, sizeof text, "tenants:\n  default_quota: %s\n", ok[i].text);
        parse_ok(text, &g_a);
        CU_ASSERT_EQUAL(g_a.default_quota, ok[i].want);
    }
    const char *bad[] = {"12x", "1.5G", "-1", "1 G", "G", "1k", "1KB", "0x10", "1E", "+1", "1GiBx"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[128], value[64];
        snprintf(text, sizeof text, "tenants:\n  default_quota: %s\n", bad[i]);
        snprintf(value, sizeof value,
                 "'%s' is not a size (an integer with an optional K, M, G or T", bad[i]);
        fails(text, HY_EINVAL, CFG ":2: key 'tenants.default_quota': ", value, NULL);
    }
    const char *over[] = {"16777216T", "18446744073709551616", "99999999999999999999999K",
                          "17179869184G"};
    for (size_t i = 0; i < sizeof over / sizeof over[0]; i++) {
        char text[128], value[64];
        snprintf(text, sizeof text, "tenants: {default_quota: %s}\n", over[i]);
        snprintf(value, sizeof value, "'%s' does not fit in 64 bits", over[i]);
        fails(text, HY_EINVAL, CFG ":1: key 'tenants.default_quota': ", value, NULL);
    }
    /* a size's own limits, written as sizes */
    fails("tiers:\n  host:\n    bytes: 1023K\n", HY_EINVAL,
          CFG ":3: key 'tiers.host.bytes': '1023K' is out of range (1M..16T)", NULL);
    parse_ok("tiers: {host: {bytes: 1M}}", &g_a);
    CU_ASSERT_EQUAL(g_a.host_bytes, 1ull << 20);
    fails("limits: {max_message: 2G}", HY_EINVAL,
          "key 'limits.max_message': '2G' is out of range (4K..1G)", NULL);
}

/* Counts: decimal only, each within its limits (the bounds pass). */
static void test_counts(void)
{
    static const struct {
        const char *section, *key;
        const char *lo, *hi, *below, *above;
    } k[] = {
        {"pic", "seam", "0", "64", NULL, "65"},
        {"pic", "top_k", "1", "100", "0", "101"},
        {"executor", "threads", "1", "256", "0", "257"},
        {"executor", "contexts", "1", "64", "0", "65"},
        {"executor", "max_batch", "1", "65536", "0", "65537"},
        {"executor", "keep_context_tokens", "0", "16777216", NULL, "16777217"},
        {"limits", "workers", "2", "1024", "1", "1025"},
        {"limits", "page_size", "1", "100000", "0", "100001"},
        {"limits", "max_segments", "1", "65536", "0", "65537"},
        {"limits", "max_lease_ms", "1", "3600000", "0", "3600001"},
        {"limits", "watchers", "0", "1023", NULL, "1025"}, /* below limits.workers */
        {"limits", "drain_ms", "0", "600000", NULL, "600001"},
        {"tiers", "ttl_s", "0", "3153600000", NULL, "3153600001"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char text[160], frag[160];
        const char *vals[2] = {k[i].lo, k[i].hi};
        for (int j = 0; j < 2; j++) {
            /* watchers must stay below workers: each Watch holds one */
            const char *with = !strcmp(k[i].key, "workers")    ? ", watchers: 1"
                               : !strcmp(k[i].key, "watchers") ? ", workers: 1024"
                                                               : "";
            snprintf(text, sizeof text, "%s: {%s: %s%s}\n", k[i].section, k[i].key, vals[j], with);
            parse_ok(text, &g_a);
        }
        const char *bad[2] = {k[i].below, k[i].above};
        for (int j = 0; j < 2; j++) {
            if (!bad[j]) continue;
            snprintf(text, sizeof text, "# a comment\n%s: {%s: %s}\n", k[i].section, k[i].key,
                     bad[j]);
            if (!strcmp(k[i].key, "top_k") && j == 1) /* limited by limits.max_top_k */
                snprintf(frag, sizeof frag, CFG ":2: key 'pic.top_k': %s is out of range", bad[j]);
            else
                snprintf(frag, sizeof frag, CFG ":2: key '%s.%s': '%s' is out of range",
                         k[i].section, k[i].key, bad[j]);
            fails(text, HY_EINVAL, frag, NULL);
        }
    }
    fails("executor: {threads: -1}", HY_EINVAL,
          "key 'executor.threads': '-1' is not a count (a decimal integer)", NULL);
    fails("executor: {threads: 2K}", HY_EINVAL, "key 'executor.threads': '2K' is not a count",
          NULL);
    fails("executor: {threads: 99999999999999999999}", HY_EINVAL,
          "'99999999999999999999' does not fit in 64 bits", NULL);
    /* cross-key: watchers below workers; the HTTP port binds numeric addresses only */
    fails("limits: {workers: 8, watchers: 8}", HY_EINVAL,
          "key 'limits.watchers': 8 Watch streams would hold all 8 workers", NULL);
    fails("http_listen: localhost:7879", HY_EINVAL,
          "key 'http_listen': 'localhost:7879': give a numeric address", NULL);
    parse_ok("http_listen: '[::1]:7879'", &g_a);
    /* top_k is checked against the configured max_top_k */
    parse_ok("pic: {top_k: 300}\nlimits: {max_top_k: 300}\n", &g_a);
    CU_ASSERT_EQUAL(g_a.top_k, 300);
    fails("pic: {top_k: 6}\nlimits: {max_top_k: 5}\n", HY_EINVAL,
          CFG ":1: key 'pic.top_k': 6 is out of range (1..limits.max_top_k = 5)", NULL);
    /* a default that the file's limit makes out of range: no line to name */
    fails("limits: {max_top_k: 4}\n", HY_EINVAL, CFG ": key 'pic.top_k': 5 is out of range", NULL);
}

static void test_named_values(void)
{
    parse_ok("log: {level: warn, requests: false}\n", &g_a);
    CU_ASSERT_EQUAL(g_a.log_level, HY_LOG_WARN);
    CU_ASSERT_FALSE(g_a.log_requests);
    fails("log:\n  requests: yes\n", HY_EINVAL,
          CFG ":2: key 'log.requests': 'yes' is not a boolean (true or false)", NULL);
    fails("log: {requests: True}", HY_EINVAL, "'True' is not a boolean", NULL);
    fails("log: {level: verbose}", HY_EINVAL,
          "key 'log.level': 'verbose' is not debug, info, warn or error", NULL);
    fails("pic: {dtype: f16}", HY_EINVAL, "key 'pic.dtype': 'f16' is not f32 or bf16", NULL);
    fails("pic: {tolerance: 1.5}", HY_EINVAL,
          "key 'pic.tolerance': '1.5' is not a number in [0, 1]", NULL);
    fails("pic: {tolerance: x}", HY_EINVAL, "key 'pic.tolerance': 'x' is not a number", NULL);
    fails("pic: {kv_dtype: fp8}", HY_EINVAL, "key 'pic.kv_dtype': 'fp8' is not f32 or bf16", NULL);
    fails("tiers: {nvme: {evict: fifo}}", HY_EINVAL,
          "key 'tiers.nvme.evict': eviction policy 'fifo': unknown", NULL);
    fails("tiers: {hbm: {admit: never}}", HY_EINVAL,
          "key 'tiers.hbm.admit': admission policy 'never': unknown", NULL);
    /* min-tokens takes its count from min_tokens, and only it does */
    parse_ok("tiers: {nvme: {admit: min-tokens, min_tokens: 512}}", &g_a);
    CU_ASSERT_EQUAL(g_a.nvme_policy.admit, HY_ADMIT_MIN_TOKENS);
    CU_ASSERT_EQUAL(g_a.nvme_policy.min_tokens, 512);
    fails("tiers: {host: {admit: min-tokens 5}}", HY_EINVAL,
          "key 'tiers.host.admit': 'min-tokens 5': write 'min-tokens' and the count in min_tokens",
          NULL);
    fails("tiers:\n  hbm: {min_tokens: 5}\n", HY_EINVAL,
          CFG ":2: key 'tiers.hbm.min_tokens': 5 applies only with admit: min-tokens", NULL);
    /* the bulk transports */
    parse_ok("transport: {rdma: required, shm_socket: \"off\", tcp_listen: \"127.0.0.1:9000\"}",
             &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.tp_rdma, "required");
    CU_ASSERT_STRING_EQUAL(g_a.tp_shm_socket, "off");
    fails("transport: {rdma: maybe}", HY_EINVAL,
          "key 'transport.rdma': 'maybe' is not auto, off or required", NULL);
    /* how MLA layers attend */
    parse_ok("executor: {mla: latent}", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.exec_mla, "latent");
    fails("executor: {mla: absorbed}", HY_EINVAL,
          "key 'executor.mla': 'absorbed' is not auto, expanded or latent", NULL);
    /* how weight matrices are kept */
    parse_ok("executor: {weights: f32}", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.exec_weights, "f32");
    parse_ok("executor: {weights: bf16}", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.exec_weights, "bf16");
    parse_ok("executor: {weights: q8}", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.exec_weights, "q8");
    fails("executor: {weights: fp8}", HY_EINVAL,
          "key 'executor.weights': 'fp8' is not auto, f32, bf16 or q8", NULL);
    fails("executor: {weights: auto-and-then-some}", HY_EINVAL, "executor.weights", NULL);
    /* how hits are used: fetched, recomputed, or the cheaper */
    parse_ok("pic: {reuse: recompute}", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.pic_reuse, "recompute");
    fails("pic: {reuse: maybe}", HY_EINVAL,
          "key 'pic.reuse': 'maybe' is not auto, fetch or recompute", NULL);
    fails("transport: {tcp_listen: nowhere}", HY_EINVAL, "key 'transport.tcp_listen'",
          "is not host:port", NULL);
    fails("transport: {max_buffer: 1K}", HY_EINVAL, "transport.max_buffer", NULL);
    /* scatter workers */
    parse_ok("scatter: {workers: [{address: \"10.0.0.7:7878\"}, {address: \"w2:7878\"}],\n"
             "          spawn: 2, dns: \"workers.hypic:7878\", policy: round-robin,\n"
             "          timeout_ms: 500, retries: 0, min_tokens: 0, probe_ms: 50}",
             &g_a);
    CU_ASSERT_EQUAL(g_a.nscatter_workers, 2);
    CU_ASSERT_STRING_EQUAL(g_a.scatter_workers[1].address, "w2:7878");
    CU_ASSERT_EQUAL(g_a.scatter_spawn, 2);
    CU_ASSERT_STRING_EQUAL(g_a.scatter_policy, "round-robin");
    CU_ASSERT_EQUAL(g_a.scatter_timeout_ms, 500);
    CU_ASSERT_EQUAL(g_a.scatter_spawn_threads, 1); /* the default */
    fails("scatter: {policy: fastest}", HY_EINVAL,
          "key 'scatter.policy': 'fastest' is not lpt or round-robin", NULL);
    fails("scatter: {workers: [{address: nowhere}]}", HY_EINVAL, "key 'scatter.workers[0].address'",
          "is not host:port", NULL);
    fails("scatter: {workers: [{}]}", HY_EINVAL, "scatter.workers[0]", "address", NULL);
    fails("scatter: {dns: \"no-port\"}", HY_EINVAL, "key 'scatter.dns'", NULL);
    fails("scatter: {spawn: 65}", HY_EINVAL, "scatter.spawn", NULL);
    fails("scatter: {probe_ms: 10}", HY_EINVAL, "scatter.probe_ms", NULL);
    /* cluster mode */
    parse_ok("cluster: {id: a, replicas: 2, members: [{id: a, address: \"10.0.0.1:7878\"},\n"
             "          {id: b, address: \"h2:7878\"}], peer_timeout_ms: 300,\n"
             "          secret: members-secret-0123456789abcdefghijkl}\n"
             "tenants: {list: [{name: t, token: \"t-0123456789abcdef\", replicas: 3}]}",
             &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.cluster_secret, "members-secret-0123456789abcdefghijkl");
    /* with tenants, members and workers need the secret: never a tenant's token between them */
    fails("cluster: {id: a, members: [{id: a, address: \"h:1\"}]}\n"
          "tenants: {list: [{name: t, token: \"t-0123456789abcdef\"}]}",
          HY_EINVAL, "key 'cluster.secret'", "never with a tenant's token", NULL);
    fails("scatter: {spawn: 1}\ntenants: {list: [{name: t, token: \"t-0123456789abcdef\"}]}",
          HY_EINVAL, "key 'cluster.secret'", "scatter workers", NULL);
    fails("cluster: {secret: short-secret-0123}", HY_EINVAL, "key 'cluster.secret'", "at least 32",
          NULL);
    fails("cluster: {secret: \"t-0123456789abcdef-0123456789abcdef\"}\n"
          "tenants: {list: [{name: t, token: \"t-0123456789abcdef-0123456789abcdef\"}]}",
          HY_EINVAL, "key 'cluster.secret'", "tenants.list[0]'s token", NULL);
    /* etcd over TLS, as a user of its own */
    {
        char t[900];
        const char *fx = HY_FIXTURES_DIR "/tls";
        snprintf(t, sizeof t,
                 "cluster: {etcd: {endpoints: \"h:2379\", tls_ca: %s/ca.pem, user: hypic,\n"
                 "          password: etcd-password-1}}",
                 fx);
        parse_ok(t, &g_b);
        CU_ASSERT_STRING_EQUAL(g_b.cluster_etcd_user, "hypic");
        CU_ASSERT_STRING_EQUAL(g_b.cluster_etcd_password, "etcd-password-1");
        fails("cluster: {etcd: {endpoints: \"h:2379\", user: hypic}}", HY_EINVAL,
              "key 'cluster.etcd.password'", "needs its password", NULL);
        fails("cluster: {etcd: {endpoints: \"h:2379\", password: p-0123456789}}", HY_EINVAL,
              "key 'cluster.etcd.password'", "without cluster.etcd.user", NULL);
        snprintf(t, sizeof t, "cluster: {etcd: {endpoints: \"h:2379\", tls_cert: %s/member.pem}}",
                 fx);
        fails(t, HY_EINVAL, "key 'cluster.etcd.tls_key'", "both tls_cert and tls_key", NULL);
        snprintf(t, sizeof t,
                 "cluster: {etcd: {endpoints: \"h:2379\", tls_cert: %s/member.pem,\n"
                 "          tls_key: %s/member.key}}",
                 fx, fx);
        fails(t, HY_EINVAL, "key 'cluster.etcd.tls_cert'", "set cluster.etcd.tls_ca", NULL);
        snprintf(t, sizeof t, "cluster: {etcd: {tls_ca: %s/ca.pem}}", fx);
        fails(t, HY_EINVAL, "key 'cluster.etcd.tls_ca'", "without cluster.etcd.endpoints", NULL);
        fails("cluster: {etcd: {endpoints: \"h:2379\", tls_ca: /nonexistent.pem}}", HY_EIO,
              "key 'cluster.etcd.tls_ca'", "cannot read", NULL);
    }
    CU_ASSERT_EQUAL(g_a.ncluster_members, 2);
    CU_ASSERT_STRING_EQUAL(g_a.cluster_members[1].address, "h2:7878");
    CU_ASSERT_EQUAL(g_a.cluster_replicas, 2);
    CU_ASSERT_EQUAL(g_a.tenants[0].replicas, 3);
    CU_ASSERT_EQUAL(g_a.cluster_ttl_s, 10); /* the default */
    parse_ok("cluster: {id: n1, etcd: {endpoints: \"e0:2379,10.0.0.9:2379\", ttl_s: 2}}", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.cluster_etcd_prefix, "/hypic/members/");
    /* one file for every pod of a StatefulSet: the id comes from --cluster-id */
    parse_ok("cluster: {etcd: {endpoints: \"e0:2379\"}}", &g_a);
    fails("cluster: {id: \"a b\"}", HY_EINVAL, "key 'cluster.id'", "is not an id", NULL);
    fails("cluster: {id: a, members: [{id: b, address: \"h:1\"}]}", HY_EINVAL,
          "key 'cluster.members'", "'a' is not among the 1 members", NULL);
    fails("cluster: {id: a, members: [{id: a, address: \"h:1\"}, {id: a, address: \"h:2\"}]}",
          HY_EINVAL, "key 'cluster.members[1].id'", "already", NULL);
    fails("cluster: {id: a, members: [{id: a, address: nowhere}]}", HY_EINVAL,
          "key 'cluster.members[0].address'", "is not host:port", NULL);
    fails("cluster: {id: a, members: [{id: a, address: \"h:1\"}], etcd: {endpoints: \"e:1\"}}",
          HY_EINVAL, "key 'cluster.members'", "one of the two", NULL);
    fails("cluster: {id: a, etcd: {endpoints: \"e:1,nope\"}}", HY_EINVAL,
          "cluster.etcd.endpoints (endpoint 2)", "is not host:port", NULL);
    fails("cluster: {id: a, etcd: {endpoints: \"e:1\", prefix: hypic}}", HY_EINVAL,
          "key 'cluster.etcd.prefix'", NULL);
    fails("cluster: {replicas: 17}", HY_EINVAL, "cluster.replicas", NULL);
    fails("tenants: {list: [{name: t, token: \"t-0123456789abcdef\", replicas: 17}]}", HY_EINVAL,
          "tenants.list[0].replicas", NULL);
}

static void test_unknown_keys(void)
{
    static const struct {
        const char *text, *key, *allowed;
    } k[] = {
        {"lisen: x\n", "'lisen'",
         "listen, http_listen, tls, models, tiers, pic, executor, tenants, limits, transport, "
         "scatter, "
         "cluster, log"},
        {"tls: {cart: x}\n", "'tls.cart'", "cert, key, client_ca, require_client_cert"},
        {"tiers: {hots: {}}\n", "'tiers.hots'", "host, nvme, hbm, ttl_s"},
        {"tiers: {host: {size: 1G}}\n", "'tiers.host.size'", "bytes, evict, admit, min_tokens"},
        {"tiers: {nvme: {dir: x}}\n", "'tiers.nvme.dir'",
         "path, bytes, extent_bytes, evict, admit, min_tokens, write_through"},
        {"tiers: {hbm: {gpu: 0}}\n", "'tiers.hbm.gpu'", "bytes, device, evict, admit, min_tokens"},
        {"pic: {W: 8}\n", "'pic.W'",
         "seam, tolerance, dtype, t_dtype, kv_dtype, reuse, top_k, prefix_cache_bytes, "
         "shadow_rate, shadow_kl_warn"},
        {"executor: {omp: 2}\n", "'executor.omp'", "threads, contexts, max_batch, mla"},
        {"tenants: {quota: 1}\n", "'tenants.quota'", "default_quota, list"},
        {"tenants: {list: [{name: a, token: aaaaaaaaaaaaaaaaaaaa, tok: x}]}\n",
         "'tenants.list[0].tok'", "name, token, token_file, quota, max_in_flight, admin"},
        {"models: [{name: a, path: b}, {name: b, dir: c}]\n", "'models[1].dir'", "name, path"},
        {"limits: {max_msg: 1}\n", "'limits.max_msg'",
         "max_message, max_segments, max_tokens, max_top_k, max_new_tokens, "
         "in_flight_per_tenant, queue, max_lease_ms, lease_bytes_per_tenant, "
         "pinned_bytes_per_tenant, watchers, workers, page_size, max_entry_bytes, drain_ms, "
         "idle_ms, watchers_per_tenant"},
        {"log: {lvl: info}\n", "'log.lvl'", "level, requests"},
        {"Listen: x\n", "'Listen'", "listen, http_listen"}, /* keys are lower case */
        {"tiers: {host.bytes: 1G}\n", "'tiers.host.bytes'", "host, nvme, hbm, ttl_s"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char key[96], allowed[400];
        snprintf(key, sizeof key, CFG ":1: unknown key %s", k[i].key);
        snprintf(allowed, sizeof allowed, "(allowed here: %s", k[i].allowed);
        fails(k[i].text, HY_EINVAL, key, allowed, NULL);
    }
    fails("log:\n  level: info\n  colour: true\n", HY_EINVAL, CFG ":3: unknown key 'log.colour'",
          NULL);
}

static void test_node_kinds(void)
{
    fails("tiers:\n  - host\n", HY_EINVAL,
          CFG ":2: key 'tiers': a sequence where a mapping is expected", NULL);
    fails("tls: 5\n", HY_EINVAL, CFG ":1: key 'tls': a value where a mapping is expected", NULL);
    fails("listen: [a, b]\n", HY_EINVAL, "key 'listen': a sequence where a value is expected",
          NULL);
    fails("pic:\n  seam: {a: 1}\n", HY_EINVAL,
          CFG ":2: key 'pic.seam': a mapping where a value is expected", NULL);
    fails("models: {name: a}\n", HY_EINVAL, "key 'models': a mapping where a sequence is expected",
          NULL);
    fails("models:\n  - a\n", HY_EINVAL,
          CFG ":2: key 'models[0]': a value where a mapping is expected", NULL);
    fails("tenants: {list: 3}\n", HY_EINVAL,
          "key 'tenants.list': a value where a sequence is expected", NULL);
    fails("- listen\n", HY_EINVAL, CFG ":1: the document is a sequence; a mapping", NULL);
    fails("hello\n", HY_EINVAL, CFG ":1: the document is a value; a mapping", NULL);
    fails("? [a]\n: 1\n", HY_EINVAL, CFG ":1: a sequence as a key", NULL);
    fails("listen: 127.0.0.1:1\nlog: {}\nlisten: 127.0.0.1:2\n", HY_EINVAL,
          CFG ":3: key 'listen' appears twice (first at line 1)", NULL);
    fails("tiers:\n  host: {bytes: 1G, bytes: 2G}\n", HY_EINVAL,
          CFG ":2: key 'tiers.host.bytes' appears twice", NULL);
}

/* Keys that hold several addresses take them as a YAML sequence too:
 * cluster.etcd.endpoints besides its comma-separated string, scatter.workers
 * items as the address alone besides {address: ...}. Either form gives the
 * same configuration, and an item is named by its index when it is wrong. */
static void test_address_sequences(void)
{
    parse_ok("cluster: {id: n1, etcd: {endpoints: \"e0:2379,10.0.0.9:2379\"}}", &g_a);
    parse_ok("cluster: {id: n1, etcd: {endpoints: [\"e0:2379\", \"10.0.0.9:2379\"]}}", &g_b);
    CU_ASSERT_STRING_EQUAL(g_b.cluster_etcd, "e0:2379,10.0.0.9:2379");
    CU_ASSERT(same_config(&g_a, &g_b));
    /* block style, as docs/deploy.md writes it */
    parse_ok("cluster:\n  id: n1\n  etcd:\n    endpoints:\n      - e0:2379\n"
             "      - 10.0.0.9:2379\n",
             &g_b);
    CU_ASSERT(same_config(&g_a, &g_b));
    parse_ok("cluster: {etcd: {endpoints: [e0:2379]}}", &g_b);
    CU_ASSERT_STRING_EQUAL(g_b.cluster_etcd, "e0:2379");
    parse_ok("cluster: {etcd: {endpoints: []}}", &g_b); /* no etcd, as "" */
    CU_ASSERT_STRING_EQUAL(g_b.cluster_etcd, "");
    fails("cluster: {id: a, etcd: {endpoints: [\"e:1\", nope]}}", HY_EINVAL,
          "cluster.etcd.endpoints (endpoint 2)", "'nope' is not host:port", NULL);
    fails("cluster:\n  etcd:\n    endpoints:\n      - e:1\n      - {host: e}\n", HY_EINVAL,
          CFG ":5: key 'cluster.etcd.endpoints[1]': a mapping where a value is expected", NULL);
    fails("cluster: {etcd: {endpoints: [\"a:1,b:2\"]}}", HY_EINVAL,
          "key 'cluster.etcd.endpoints[0]'", "one address per item", NULL);
    fails("cluster: {etcd: {endpoints: [\"\"]}}", HY_EINVAL, "key 'cluster.etcd.endpoints[0]'",
          "empty", NULL);
    {
        char t[2400];
        size_t n = (size_t)snprintf(t, sizeof t, "cluster: {etcd: {endpoints: [");
        for (int i = 0; i < 80; i++)
            n += (size_t)snprintf(t + n, sizeof t - n, "%s\"etcd-%02d.example:2379\"",
                                  i ? ", " : "", i);
        snprintf(t + n, sizeof t - n, "]}}");
        fails(t, HY_EINVAL, "key 'cluster.etcd.endpoints'", "longer than 1023 bytes", NULL);
    }
    /* scatter.workers: an item's one field, the address, alone */
    parse_ok("scatter: {workers: [{address: \"10.0.0.7:7878\"}, {address: \"w2:7878\"}]}", &g_a);
    parse_ok("scatter: {workers: [\"10.0.0.7:7878\", \"w2:7878\"]}", &g_b);
    CU_ASSERT_EQUAL(g_b.nscatter_workers, 2);
    CU_ASSERT(same_config(&g_a, &g_b));
    parse_ok("scatter: {workers: [\"10.0.0.7:7878\", {address: \"w2:7878\"}]}", &g_b);
    CU_ASSERT(same_config(&g_a, &g_b));
    fails("scatter: {workers: [nowhere]}", HY_EINVAL, "key 'scatter.workers[0].address'",
          "is not host:port", NULL);
    fails("scatter: {workers: [[a]]}", HY_EINVAL,
          "key 'scatter.workers[0]': a sequence where a mapping is expected", NULL);
    /* lists whose items have several fields still need a mapping */
    fails("cluster: {members: [\"h:1\"]}", HY_EINVAL,
          "key 'cluster.members[0]': a value where a mapping is expected", NULL);
}

static void test_syntax_errors(void)
{
    fails("listen: [\n", HY_EINVAL,
          CFG ":2:1: YAML syntax error: did not find expected node content", NULL);
    fails("a: 1\n b: 2\n", HY_EINVAL, CFG ":2:3: YAML syntax error: mapping values are not allowed",
          NULL);
    fails("log:\n  level: \"info\n", HY_EINVAL, CFG ":3:1: YAML syntax error: found unexpected end",
          "(while scanning a quoted scalar at line 2, column 10)", NULL);
    fails("listen: *nowhere\n", HY_EINVAL, CFG ":1:9: YAML syntax error: found undefined alias",
          NULL);
    fails("log: {level: info}\n---\nlog: {level: warn}\n", HY_EINVAL,
          CFG ":3: a second YAML document (the configuration is one document)", NULL);
    fails("log: {level: \xff}\n", HY_EINVAL, CFG ": YAML: invalid leading UTF-8 octet at byte 13",
          NULL);
    /* a NUL inside the text */
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_cached_config_parse("log: {}\0x", 9, CFG, &g_a, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, CFG ": YAML: control characters are not allowed"));
}

static void test_models(void)
{
    fails("models: []\n", HY_EINVAL, CFG ":1: key 'models': 0 items; 1 to 8 are allowed", NULL);
    fails("models:\n", HY_EINVAL, "key 'models': 0 items", NULL);
    char text[1024] = "models:\n";
    for (int i = 0; i < 9; i++)
        snprintf(text + strlen(text), sizeof text - strlen(text), "  - {name: m%d, path: p}\n", i);
    fails(text, HY_EINVAL, "key 'models': 9 items; 1 to 8 are allowed", NULL);
    fails("models:\n  - {name: a, path: x}\n  - name: b\n", HY_EINVAL,
          CFG ":3: key 'models[1]': no 'path' (required)", NULL);
    fails("models:\n  - {path: x}\n", HY_EINVAL, CFG ":2: key 'models[0]': no 'name' (required)",
          NULL);
    fails("models:\n  - {name: a, path: x}\n  - {name: a, path: y}\n", HY_EINVAL,
          CFG ":3: key 'models[1].name': 'a' is already models[0]'s name", NULL);
    fails("models: [{name: \"a b\", path: x}]\n", HY_EINVAL,
          "key 'models[0].name': 'a b' is not a name ([A-Za-z0-9._-], 1 to 63 characters)", NULL);
    fails("models: [{name: \"\", path: x}]\n", HY_EINVAL, "key 'models[0].name': '' is not a name",
          NULL);
    fails("models: [{name: "
          "a234567890123456789012345678901234567890123456789012345678901234, path: x}]\n",
          HY_EINVAL, "key 'models[0].name': 'a2345678901234567890", "is longer than 63 bytes",
          NULL);
    fails("models: [{name: a, path: \"\"}]\n", HY_EINVAL,
          "key 'models[0].path': '' is not a directory", NULL);
    parse_ok("models:\n  - name: null\n    path: ~\n", &g_a); /* strings are verbatim */
    CU_ASSERT_STRING_EQUAL(g_a.models[0].name, "null");
    CU_ASSERT_STRING_EQUAL(g_a.models[0].dir, "~");
}

static void test_tiers(void)
{
    fails("tiers: {nvme: {extent_bytes: 1048577}}\n", HY_EINVAL,
          "key 'tiers.nvme.extent_bytes': 1048577 is not a multiple of 4096", NULL);
    fails("tiers: {nvme: {bytes: 128M}}\n", HY_EINVAL,
          "key 'tiers.nvme.bytes': 128M is not 1 to 1000000 extents of 256M", NULL);
    parse_ok("tiers: {nvme: {bytes: 1000000M, extent_bytes: 1M}}\n", &g_a);
    fails("tiers: {nvme: {bytes: 1000001M, extent_bytes: 1M}}\n", HY_EINVAL,
          "is not 1 to 1000000 extents of 1M", NULL);
    fails("tiers:\n  hbm:\n    bytes: 4K\n", HY_EINVAL,
          CFG ":3: key 'tiers.hbm.bytes': 4K is neither 0 (no hbm tier) nor 1M..16T", NULL);
}

static char g_tok[128];

static void test_token_file(void)
{
    char path[128], text[512];
    snprintf(path, sizeof path, "%s/t.token", g_dir);
    snprintf(text, sizeof text, "tenants:\n  list:\n    - name: t\n      token_file: %s\n", path);
    const struct {
        const char *content, *token;
    } ok[] = {
        {"0123456789abcdefXYZ", "0123456789abcdefXYZ"},
        {"0123456789abcdefXYZ\n", "0123456789abcdefXYZ"},
        {" \t 0123456789abcdef!~ \r\nsecond line\n", "0123456789abcdef!~"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        write_file(path, ok[i].content);
        parse_ok(text, &g_a);
        CU_ASSERT_STRING_EQUAL(g_a.tenants[0].token, ok[i].token);
    }
    write_file(path, "\nsecond-line-is-not-read\n");
    fails(text, HY_EINVAL,
          CFG ":4: key 'tenants.list[0].token_file': the token has 0 characters; at least 16",
          NULL);
    write_file(path, "short-token\n");
    fails(text, HY_EINVAL, "key 'tenants.list[0].token_file': the token has 11 characters", NULL);
    char big[400];
    memset(big, 'a', 300), big[300] = '\0';
    write_file(path, big);
    fails(text, HY_EINVAL, "key 'tenants.list[0].token_file': the first line of", path,
          "is longer than 255 bytes", NULL);
    unlink(path);
    fails(text, HY_EIO,
          CFG ":4: key 'tenants.list[0].token_file': cannot read the token file: ", path, NULL);
    /* a directory is not readable as a token */
    snprintf(text, sizeof text, "tenants: {list: [{name: t, token_file: %s}]}\n", g_dir);
    fails(text, HY_EIO, "key 'tenants.list[0].token_file': cannot read", g_dir, NULL);
    snprintf(g_tok, sizeof g_tok, "%s", path);
}

/* Messages about a token never carry its text. */
static void token_fails(const char *text, const char *secret, const char *frag)
{
    hy_err e = {0};
    CU_ASSERT_EQUAL(parse(text, &g_a, &e), HY_EINVAL);
    if (!strstr(e.msg, frag)) fprintf(stderr, "\n  %s\n  -> %s\n", text, e.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, frag));
    CU_ASSERT_PTR_NULL(strstr(e.msg, secret));
}

static void test_tenants(void)
{
    parse_ok(
        "tenants:\n  list:\n    - {name: a.B_c-9, token: \"!#$%&'()*+,-./0123456789:;<=>?@~\"}\n",
        &g_a);
    CU_ASSERT_EQUAL(g_a.ntenants, 1);
    token_fails("tenants: {list: [{name: x, token: sh0rt-secret}]}", "sh0rt-secret",
                CFG ":1: key 'tenants.list[0].token': the token has 12 characters; at least 16");
    token_fails("tenants: {list: [{name: x, token: \"spaced secret-token-1\"}]}", "secret-token",
                "key 'tenants.list[0].token': the token's character 7 is not printable ASCII");
    token_fails("tenants: {list: [{name: x, token: \"tab\\tsecret-token-1\"}]}", "secret-token",
                "the token's character 4 is not printable ASCII");
    token_fails("tenants: {list: [{name: x, token: \"caf\xc3\xa9-secret-token-1\"}]}",
                "secret-token", "the token's character 4 is not printable ASCII");
    token_fails("tenants:\n  list:\n    - {name: x, token: secret-token-0001}\n"
                "    - {name: y, token: secret-token-0001}\n",
                "secret-token-0001",
                CFG ":4: key 'tenants.list[1].token': the token is tenants.list[0]'s (tenant 'x')");
    char longtok[400];
    memset(longtok, 'k', 300), longtok[300] = '\0';
    char text[600];
    snprintf(text, sizeof text, "tenants: {list: [{name: x, token: %s}]}", longtok);
    token_fails(text, "kkkkkkkkkkkkkkkk",
                "key 'tenants.list[0].token': the token is longer than 255 bytes");
    fails("tenants:\n  list:\n    - name: x\n", HY_EINVAL,
          CFG ":3: key 'tenants.list[0]': no 'token' or 'token_file' (one is required)", NULL);
    char both[256];
    snprintf(both, sizeof both,
             "tenants: {list: [{name: x, token: secret-token-0001, token_file: %s/bob.token}]}",
             g_dir);
    fails(both, HY_EINVAL, "key 'tenants.list[0]': both 'token' and 'token_file' (give one)", NULL);
    fails("tenants: {list: [{token: secret-token-0001}]}", HY_EINVAL,
          "key 'tenants.list[0]': no 'name' (required)", NULL);
    fails("tenants:\n  list:\n    - {name: default, token: secret-token-0001}\n", HY_EINVAL,
          CFG ":3: key 'tenants.list[0].name': 'default' is reserved", NULL);
    fails("tenants: {list: [{name: a, token: secret-token-0001}, {name: a, token: "
          "secret-token-0002}]}",
          HY_EINVAL, "key 'tenants.list[1].name': 'a' is already tenants.list[0]'s name", NULL);
    fails("tenants: {list: [{name: \"a/b\", token: secret-token-0001}]}", HY_EINVAL,
          "key 'tenants.list[0].name': 'a/b' is not a name", NULL);
    fails("tenants: {list: [{name: a, token: secret-token-0001, max_in_flight: 65537}]}", HY_EINVAL,
          "key 'tenants.list[0].max_in_flight': '65537' is out of range (0..65536)", NULL);
    fails("tenants: {list: [{name: a, token: secret-token-0001, quota: lots}]}", HY_EINVAL,
          "key 'tenants.list[0].quota': 'lots' is not a size", NULL);
    /* 64 tenants, not 65 */
    static char many[66 * 64];
    snprintf(many, sizeof many, "tenants:\n  list:\n");
    for (int i = 0; i < 65; i++) {
        snprintf(many + strlen(many), sizeof many - strlen(many),
                 "    - {name: t%d, token: token-of-tenant-%04d}\n", i, i);
        if (i == 63) {
            parse_ok(many, &g_a);
            CU_ASSERT_EQUAL(g_a.ntenants, 64);
            CU_ASSERT_STRING_EQUAL(g_a.tenants[63].token, "token-of-tenant-0063");
        }
    }
    fails(many, HY_EINVAL, "key 'tenants.list': 65 items; 0 to 64 are allowed", NULL);
}

static void test_listen(void)
{
    const char *loopback[] = {"127.0.0.1:7878", "127.1.2.3:0", "localhost:1", "\"[::1]:65535\"",
                              "\"[::ffff:127.0.0.9]:80\""};
    char text[256];
    for (size_t i = 0; i < sizeof loopback / sizeof loopback[0]; i++) {
        snprintf(text, sizeof text, "listen: %s\n", loopback[i]);
        parse_ok(text, &g_a);
    }
    const char *remote[] = {"0.0.0.0:7878",     "10.0.0.1:7878", "\"[::]:7878\"",
                            "example.com:7878", "128.0.0.1:1",   "\"[2001:db8::1]:7878\""};
    for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++) {
        snprintf(text, sizeof text, "log: {}\nlisten: %s\n", remote[i]);
        fails(text, HY_EINVAL, CFG ":2: key 'listen': ", "is not a loopback address",
              "needs tenants with tokens (tenants.list)", NULL);
        snprintf(text, sizeof text,
                 "listen: %s\ntenants: {list: [{name: a, token: secret-token-0001}]}\n", remote[i]);
        parse_ok(text, &g_a);
    }
    const char *malformed[] = {"127.0.0.1",       "\"::1:80\"",   "\":80\"",     "\"127.0.0.1:\"",
                               "127.0.0.1:65536", "127.0.0.1:8x", "300.0.0.1:5", "\"[::1:80\"",
                               "\"unix:/tmp/s\"", "\"\"",         "\"a b:1\""};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        snprintf(text, sizeof text, "listen: %s\n", malformed[i]);
        fails(text, HY_EINVAL, CFG ":1: key 'listen': ", "is not host:port", NULL);
    }
    /* the HTTP port: any address, or "" for none */
    parse_ok("http_listen: 0.0.0.0:9100\n", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.http_listen, "0.0.0.0:9100");
    parse_ok("http_listen:\n", &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.http_listen, "");
    fails("http_listen: nope\n", HY_EINVAL, "key 'http_listen': 'nope' is not host:port", NULL);
}

static void test_tls(void)
{
    make_full();
    char text[512];
    snprintf(text, sizeof text, "tls:\n  cert: %s/cert.pem\n", g_dir);
    fails(text, HY_EINVAL,
          CFG ":2: key 'tls.cert': tls needs both cert and key (tls.key is missing)", NULL);
    snprintf(text, sizeof text, "tls: {key: %s/key.pem}\n", g_dir);
    fails(text, HY_EINVAL, "key 'tls.key': tls needs both cert and key (tls.cert is missing)",
          NULL);
    snprintf(text, sizeof text, "tls:\n  cert: %s/cert.pem\n  key: %s/nokey.pem\n", g_dir, g_dir);
    fails(text, HY_EIO, CFG ":3: key 'tls.key': cannot read ", "/nokey.pem: No such file", NULL);
    snprintf(text, sizeof text, "tls: {cert: %s/cert.pem, key: %s/key.pem}\n", g_dir, g_dir);
    parse_ok(text, &g_a);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_a.tls_key, "/key.pem"));
    CU_ASSERT_STRING_EQUAL(g_a.tls_client_ca, "");
    CU_ASSERT(!g_a.tls_require_client_cert);
    /* mutual TLS: the fixtures' member certificate (serverAuth and clientAuth) */
    const char *fx = HY_FIXTURES_DIR "/tls";
    snprintf(text, sizeof text,
             "tls: {cert: %s/member.pem, key: %s/member.key, client_ca: %s/members-ca.pem,\n"
             "      require_client_cert: true}\n",
             fx, fx, fx);
    parse_ok(text, &g_a);
    CU_ASSERT_PTR_NOT_NULL(strstr(g_a.tls_client_ca, "/members-ca.pem"));
    CU_ASSERT(g_a.tls_require_client_cert);
    snprintf(text, sizeof text, "tls: {client_ca: %s/members-ca.pem}\n", fx);
    fails(text, HY_EINVAL, "key 'tls.client_ca'", "set tls.cert and tls.key", NULL);
    snprintf(text, sizeof text,
             "tls: {cert: %s/member.pem, key: %s/member.key, require_client_cert: true}\n", fx, fx);
    fails(text, HY_EINVAL, "key 'tls.require_client_cert'", "needs tls.client_ca", NULL);
    snprintf(text, sizeof text,
             "tls: {cert: %s/member.pem, key: %s/member.key, client_ca: %s/none.pem}\n", fx, fx,
             fx);
    fails(text, HY_EIO, "key 'tls.client_ca': cannot read ", "none.pem", NULL);
    /* a serverAuth-only certificate cannot be the member's client certificate */
    snprintf(text, sizeof text,
             "tls: {cert: %s/server.pem, key: %s/server.key, client_ca: %s/members-ca.pem}\n", fx,
             fx, fx);
    fails(text, HY_EINVAL, "key 'tls.cert'", "may not authenticate a TLS client", "clientAuth",
          NULL);
}

static void test_tenant_by_token(void)
{
    make_full();
    hy_cached_config *c = &g_a;
    parse_ok(g_full, c);
    CU_ASSERT_PTR_EQUAL(hy_cached_config_tenant_by_token(c, "alice-token-0123456789"),
                        &c->tenants[0]);
    CU_ASSERT_PTR_EQUAL(hy_cached_config_tenant_by_token(c, "bob-token-abcdefghij"),
                        &c->tenants[1]);
    const char *wrong[] = {"alice-token-012345678",   /* a prefix */
                           "alice-token-01234567890", /* longer */
                           "Alice-token-0123456789",  "alice-token-0123456788", "", "alice", "bob"};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++)
        CU_ASSERT_PTR_NULL(hy_cached_config_tenant_by_token(c, wrong[i]));
    CU_ASSERT_PTR_NULL(hy_cached_config_tenant_by_token(c, NULL));
    char huge[1000];
    memset(huge, 'a', sizeof huge - 1), huge[sizeof huge - 1] = '\0';
    CU_ASSERT_PTR_NULL(hy_cached_config_tenant_by_token(c, huge));
    /* a token of the maximum length */
    char tok[HY_CFG_TOKEN_MAX], text[800];
    memset(tok, 'z', HY_CFG_TOKEN_MAX - 1), tok[HY_CFG_TOKEN_MAX - 1] = '\0';
    snprintf(text, sizeof text,
             "tenants: {list: [{name: a, token: x-token-000000001}, {name: z, token: %s}]}", tok);
    parse_ok(text, &g_b);
    CU_ASSERT_PTR_EQUAL(hy_cached_config_tenant_by_token(&g_b, tok), &g_b.tenants[1]);
    tok[HY_CFG_TOKEN_MAX - 2] = 'y';
    CU_ASSERT_PTR_NULL(hy_cached_config_tenant_by_token(&g_b, tok));
    /* no tenants: nothing matches */
    hy_cached_config_default(&g_b);
    CU_ASSERT_PTR_NULL(hy_cached_config_tenant_by_token(&g_b, "alice-token-0123456789"));
}

/* Replaces each "<redacted>" of text, in order, by the tenants' tokens
 * (quoted). */
static char *unredact(const char *text, const hy_cached_config *c)
{
    size_t cap = strlen(text) + (size_t)c->ntenants * (2 * HY_CFG_TOKEN_MAX + 2) + 1, used = 0;
    char *out = malloc(cap);
    int i = 0;
    for (const char *p = text;;) {
        const char *r = strstr(p, "<redacted>");
        size_t n = r ? (size_t)(r - p) : strlen(p);
        memcpy(out + used, p, n), used += n;
        if (!r) break;
        CU_ASSERT_FATAL(i < c->ntenants);
        /* a double-quoted YAML scalar: tokens are printable ASCII */
        out[used++] = '"';
        for (const char *t = c->tenants[i++].token; *t; t++) {
            if (*t == '"' || *t == '\\') out[used++] = '\\';
            out[used++] = *t;
        }
        out[used++] = '"';
        p = r + strlen("<redacted>");
    }
    out[used] = '\0';
    CU_ASSERT_EQUAL(i, c->ntenants);
    return out;
}

static void round_trip(hy_cached_config *c)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hy_cached_config_print(c, f);
    fclose(f);
    for (int i = 0; i < c->ntenants; i++) CU_ASSERT_PTR_NULL(strstr(text, c->tenants[i].token));
    char *back = unredact(text, c);
    hy_err e = {0};
    int rc = hy_cached_config_parse(back, strlen(back), "printed.yaml", &g_b, &e);
    if (rc) fprintf(stderr, "\n%s\n  -> %s\n", back, e.msg);
    CU_ASSERT_EQUAL(rc, HY_OK);
    CU_ASSERT_STRING_EQUAL(g_b.path, "printed.yaml");
    bool same = same_config(c, &g_b);
    if (!same) fprintf(stderr, "\n%s", text);
    CU_ASSERT_TRUE(same);
    free(back);
    free(text);
}

static void test_print_round_trip(void)
{
    hy_cached_config_default(&g_a);
    round_trip(&g_a);
    make_full();
    parse_ok(g_full, &g_a);
    round_trip(&g_a);
    /* values the printer must quote to keep them what they are */
    char text[512];
    snprintf(text, sizeof text,
             "models:\n  - {name: \"true\", path: \"- a: [b] # c\"}\n  - {name: \"123\", path: "
             "\"'q\\\"\"}\n"
             "  - {name: \"null\", path: \"caf\xc3\xa9 \\t/x\"}\n"
             "tiers: {host: {bytes: 1536K}, nvme: {path: \" lead\"}}\n"
             "tenants: {list: [{name: t, token: \"'\\\"#:{}[]&*!|>%%@`,?-\"}]}\n");
    parse_ok(text, &g_a);
    CU_ASSERT_STRING_EQUAL(g_a.models[2].dir, "caf\xc3\xa9 \t/x");
    round_trip(&g_a);
}

/* hypic-cached --print-config-keys: every key once, "name<TAB>default", and
 * each default it shows, written alone in a file, gives the defaults. */
static void test_print_keys(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    hy_cached_config_print_keys(f);
    fclose(f);
    hy_cached_config_default(&g_a);
    int keys = 0, shown = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save), keys++) {
        char *tab = strchr(line, '\t');
        CU_ASSERT_PTR_NOT_NULL_FATAL(tab);
        *tab = '\0';
        const char *key = line, *def = tab + 1;
        CU_ASSERT(*key && *def && !strchr(def, '\t'));
        if (!strcmp(def, "-") || strchr(key, '[')) continue;
        /* "a.b.c" -> "a: {b: {c: DEF}}" */
        char yaml[256];
        size_t n = 0;
        int depth = 0;
        for (const char *p = key;; depth++) {
            size_t w = strcspn(p, ".");
            n += (size_t)snprintf(yaml + n, sizeof yaml - n, "%.*s: %s", (int)w, p,
                                  p[w] ? "{" : def);
            if (!p[w]) break;
            p += w + 1;
        }
        for (; depth > 0; depth--) n += (size_t)snprintf(yaml + n, sizeof yaml - n, "}");
        parse_ok(yaml, &g_b);
        bool same = same_config(&g_a, &g_b);
        if (!same) fprintf(stderr, "\n  %s: not the default configuration\n", yaml);
        CU_ASSERT(same);
        shown++;
    }
    CU_ASSERT(keys > 100 && shown > 80);
    /* the defaults that are computed, or that a file cannot write */
    const char *none[] = {"executor.threads\t-", "models\t-", "models[].name\t-",
                          "cluster.secret_file\t-", "tenants.list\t[]"};
    free(text);
    f = open_memstream(&text, &len);
    hy_cached_config_print_keys(f);
    fclose(f);
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "\n%s\n", none[i]);
        if (!strstr(text, want)) fprintf(stderr, "\n  no line '%s'\n", none[i]);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    }
    free(text);
}

/* Overrides after parsing (the daemon's --listen) are validated as a file's
 * values are. */
static void test_validate(void)
{
    hy_err e = {0};
    make_full();
    parse_ok(g_full, &g_a); /* tenants, tls, a token file */
    CU_ASSERT_EQUAL(hy_cached_config_validate(&g_a, &e), HY_OK);
    snprintf(g_a.listen, sizeof g_a.listen, "0.0.0.0:7000");
    CU_ASSERT_EQUAL(hy_cached_config_validate(&g_a, &e), HY_OK); /* tenants: allowed */
    g_a.ntenants = 0;
    CU_ASSERT_EQUAL(hy_cached_config_validate(&g_a, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, CFG ": key 'listen': '0.0.0.0:7000' is not a loopback"));
    hy_cached_config_default(&g_a);
    CU_ASSERT_EQUAL(hy_cached_config_validate(&g_a, &e), HY_OK);
    snprintf(g_a.http_listen, sizeof g_a.http_listen, "nowhere");
    CU_ASSERT_EQUAL(hy_cached_config_validate(&g_a, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(e.msg, "(command line): key 'http_listen': 'nowhere' is not host:port"));
    /* the capacities follow the tiers' sizes */
    hy_cached_config_default(&g_a);
    g_a.host_bytes = 3ull << 30;
    CU_ASSERT_EQUAL(hy_cached_config_validate(&g_a, &e), HY_OK);
    CU_ASSERT_EQUAL(g_a.host_policy.capacity, 3ull << 30);
}

static void test_load(void)
{
    hy_err e = {0};
    char path[128];
    snprintf(path, sizeof path, "%s/missing.yaml", g_dir);
    CU_ASSERT_EQUAL(hy_cached_config_load(path, &g_a, &e), HY_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, path));
    snprintf(path, sizeof path, "%s/bad.yaml", g_dir);
    write_file(path, "log:\n  level: loud\n");
    CU_ASSERT_EQUAL(hy_cached_config_load(path, &g_a, &e), HY_EINVAL);
    char want[256];
    snprintf(want, sizeof want, "%s:2: key 'log.level': 'loud'", path);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
    /* a failed parse leaves the configuration as it was */
    hy_cached_config_default(&g_a);
    memcpy(&g_b, &g_a, sizeof g_a);
    CU_ASSERT_EQUAL(parse("log: {level: debug}\npic: {seam: 99}\n", &g_a, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(memcmp(&g_a, &g_b, sizeof g_a), 0);
    snprintf(path, sizeof path, "%s/good.yaml", g_dir);
    write_file(path, "log: {level: error}\n");
    CU_ASSERT_EQUAL(hy_cached_config_load(path, &g_a, &e), HY_OK);
    CU_ASSERT_STRING_EQUAL(g_a.path, path);
    CU_ASSERT_EQUAL(g_a.log_level, HY_LOG_ERROR);
}

/* Which keys a SIGHUP reload applies is the option table's column: a file
 * changing only those reports no key needing a restart; one changing others
 * names each of them (a list's count, an item's field, a nested key). */
static void test_reload_keys(void)
{
    CU_ASSERT_EQUAL(hy_cached_config_key_reloads("tenants.list"), 1);
    CU_ASSERT_EQUAL(hy_cached_config_key_reloads("tenants.list[].quota"), 1);
    CU_ASSERT_EQUAL(hy_cached_config_key_reloads("tiers.nvme.admit"), 1);
    CU_ASSERT_EQUAL(hy_cached_config_key_reloads("limits.in_flight_per_tenant"), 1);
    CU_ASSERT_EQUAL(hy_cached_config_key_reloads("listen"), 0);
    CU_ASSERT_EQUAL(hy_cached_config_key_reloads("tenants.list[].replicas"), 0);
    CU_ASSERT_EQUAL(hy_cached_config_key_reloads("no.such.key"), -1);

    static const char base[] = "listen: 127.0.0.1:7878\n"
                               "tenants:\n"
                               "  list:\n"
                               "    - {name: alice, token: alice-token-0123456789}\n";
    char keys[256];
    parse_ok(base, &g_a);
    parse_ok(
        "listen: 127.0.0.1:7878\n"
        "tiers: {host: {evict: lru, admit: second-hit}, nvme: {admit: min-tokens, min_tokens: 3}}\n"
        "limits: {in_flight_per_tenant: 7}\n"
        "tenants:\n"
        "  default_quota: 1G\n"
        "  list:\n"
        "    - {name: alice, token: alice-token-9876543210, quota: 2G, admin: true}\n"
        "    - {name: bob, token: bob-token-0123456789abc, max_in_flight: 2}\n",
        &g_b);
    CU_ASSERT_EQUAL(hy_cached_config_restart_keys(&g_a, &g_b, keys, sizeof keys), 0);
    CU_ASSERT_STRING_EQUAL(keys, "");
    CU_ASSERT_EQUAL(hy_cached_config_restart_keys(&g_a, &g_a, keys, sizeof keys), 0);

    parse_ok("listen: 127.0.0.1:7878\n"
             "pic: {seam: 3}\n"
             "limits: {queue: 5}\n"
             "cluster: {etcd: {ttl_s: 30}}\n"
             "models: [{name: recall, path: models/hypic-recall}, {name: tiny, path: t}]\n"
             "tenants:\n"
             "  list:\n"
             "    - {name: alice, token: alice-token-0123456789, replicas: 2}\n",
             &g_b);
    CU_ASSERT_EQUAL(hy_cached_config_restart_keys(&g_a, &g_b, keys, sizeof keys), 5);
    CU_ASSERT_STRING_EQUAL(keys, "models, pic.seam, tenants.list[].replicas, limits.queue, "
                                 "cluster.etcd.ttl_s");
    /* cut at cap, still counted */
    CU_ASSERT_EQUAL(hy_cached_config_restart_keys(&g_a, &g_b, keys, 12), 5);
    CU_ASSERT_EQUAL(strlen(keys), 11u);
}

/* docs/operations.md's table of keys says in its last column which ones a
 * reload applies ("yes"): it agrees with the option table's column. */
static void test_reload_column_documented(void)
{
    char *text = NULL;
    size_t len;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_read_file(DOCS_DIR "/operations.md", 1 << 22, &text, &len, &e), HY_OK);
    int rows = 0, yes = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "| `", 3) != 0) continue;
        const char *end = strchr(line + 3, '`');
        char key[64];
        if (!end || end - (line + 3) >= (long)sizeof key) continue;
        snprintf(key, sizeof key, "%.*s", (int)(end - (line + 3)), line + 3);
        const int reloads = hy_cached_config_key_reloads(key);
        if (reloads < 0) continue; /* another table's row (flags, metrics) */
        const char *close = strrchr(line, '|'), *open = close;
        while (open > line && *--open != '|') {
        }
        while (open < close && (*++open == ' ')) {
        }
        const bool says_yes = strncmp(open, "yes", 3) == 0;
        if (says_yes != (reloads == 1))
            fprintf(stderr, "\n  %s: operations.md says %s, the table %s", key,
                    says_yes ? "yes" : "no", reloads ? "RELOAD" : "RESTART");
        CU_ASSERT_EQUAL(says_yes, reloads == 1);
        rows++, yes += says_yes;
    }
    CU_ASSERT(rows > 100); /* the table was found */
    CU_ASSERT(yes > 10);
    hy_free(text);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_cfg_", g_dir, sizeof g_dir)) return 1;
    static const hy_test_case cases[] = {
        {"defaults", test_defaults},
        {"a file that sets every key", test_full_file},
        {"the example files in deploy/", test_example_files},
        {"sizes: suffixes, limits, overflow", test_sizes},
        {"counts within their limits", test_counts},
        {"booleans, policies, dtype, log level", test_named_values},
        {"unknown keys at every level", test_unknown_keys},
        {"wrong node kinds, duplicate keys", test_node_kinds},
        {"address lists as YAML sequences", test_address_sequences},
        {"YAML syntax errors", test_syntax_errors},
        {"models", test_models},
        {"tiers", test_tiers},
        {"token_file", test_token_file},
        {"tenants and tokens", test_tenants},
        {"listen: loopback unless tenants", test_listen},
        {"tls", test_tls},
        {"tenant by token", test_tenant_by_token},
        {"print parses back to the same configuration", test_print_round_trip},
        {"every key with its default (--print-config-keys)", test_print_keys},
        {"validate after overrides", test_validate},
        {"load", test_load},
        {"the keys a reload applies, and those it does not", test_reload_keys},
        {"operations.md's reload column is the table's", test_reload_column_documented},
        {NULL, NULL},
    };
    int rc = hy_test_main("cached_config", cases);
    hy_test_rmtree(g_dir);
    return rc;
}
