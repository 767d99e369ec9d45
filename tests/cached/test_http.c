/*
 * The daemon's HTTP port and metrics (cached/http.c, cached/metrics.c): a
 * real server on a loopback port, fetched with the small HTTP/1.1 client
 * below (status lines, headers and bodies of every path, 404, 405, /readyz
 * flipping, the exposition byte for byte, a stalled client, the connection
 * limit); the histogram's arithmetic, alone and under concurrent observers;
 * label escaping; and the errors of hy_http_start.
 */
#include "http_internal.h"
#include "metrics_internal.h"
#include "test_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a minimal HTTP/1.1 client -------------------------------------------- */

typedef struct resp {
    int status;           /* from the status line; -1 when none arrived */
    char raw[1 << 16];    /* the whole message as received */
    size_t len, head_len; /* bytes in raw; bytes of the head, blank line included */
    const char *body;     /* raw + head_len */
    size_t body_len;
} resp;

/* A connected TCP socket to host (numeric, v4 or v6) and port; -1 on failure. */
static int dial(const char *host, int port)
{
    struct sockaddr_storage sa = {0};
    socklen_t len;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&sa;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&sa;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        len = sizeof *s4;
    } else if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        len = sizeof *s6;
    } else {
        return -1;
    }
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd, (struct sockaddr *)&sa, len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        s += w, n -= (size_t)w;
    }
    return true;
}

/* The value of header `name` in r's head (case-insensitive name), copied
 * into out; false when absent. */
static bool header(const resp *r, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *line = strstr(r->raw, "\r\n"); line && line < r->raw + r->head_len;
         line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
            const char *v = h + nl + 1;
            while (*v == ' ') v++;
            const char *end = strstr(v, "\r\n");
            size_t n = (size_t)(end - v);
            if (n >= cap) n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return true;
        }
    }
    return false;
}

/* Reads one response from fd: the head, then Content-Length bytes of body
 * (none after a HEAD), or everything up to EOF when there is no length. */
static void read_response(int fd, bool head_only, resp *r)
{
    r->status = -1;
    r->len = r->head_len = r->body_len = 0;
    r->raw[0] = '\0';
    r->body = r->raw;
    size_t want = SIZE_MAX;
    for (;;) {
        if (r->head_len == 0) {
            char *end = strstr(r->raw, "\r\n\r\n");
            if (end) {
                r->head_len = (size_t)(end + 4 - r->raw);
                sscanf(r->raw, "HTTP/1.1 %d", &r->status);
                char cl[32];
                if (head_only)
                    want = r->head_len;
                else if (header(r, "Content-Length", cl, sizeof cl))
                    want = r->head_len + strtoull(cl, NULL, 10);
            }
        }
        if (r->len >= want || r->len + 1 >= sizeof r->raw) break;
        ssize_t got = recv(fd, r->raw + r->len, sizeof r->raw - 1 - r->len, 0);
        if (got <= 0) break;
        r->len += (size_t)got;
        r->raw[r->len] = '\0';
    }
    if (r->head_len) {
        r->body = r->raw + r->head_len;
        r->body_len = r->len - r->head_len;
    }
}

/* One request on a fresh connection ("Connection: close"); extra is added
 * after the headers' end (a body), with its own headers in `headers`. */
static void fetch_full(const char *host, int port, const char *method, const char *path,
                       const char *headers, const char *body, resp *r)
{
    r->status = -1;
    r->len = r->head_len = r->body_len = 0;
    r->raw[0] = '\0';
    r->body = r->raw;
    int fd = dial(host, port);
    CU_ASSERT_FATAL(fd >= 0);
    char req[1024];
    snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n%s\r\n%s", method,
             path, host, headers ? headers : "", body ? body : "");
    CU_ASSERT_FATAL(send_all(fd, req));
    read_response(fd, !strcmp(method, "HEAD"), r);
    close(fd);
}

static void fetch(int port, const char *method, const char *path, resp *r)
{
    fetch_full("127.0.0.1", port, method, path, NULL, NULL, r);
}

static void assert_header(const resp *r, const char *name, const char *want)
{
    char v[256] = "";
    CU_ASSERT(header(r, name, v, sizeof v));
    CU_ASSERT_STRING_EQUAL(v, want);
}

static void assert_body(const resp *r, const char *want)
{
    CU_ASSERT_EQUAL(r->body_len, strlen(want));
    CU_ASSERT(r->body_len == strlen(want) && memcmp(r->body, want, r->body_len) == 0);
}

/* ---- the application behind the server ------------------------------------ */

typedef struct app {
    atomic_bool ready;
    char why[64]; /* set before ready turns false; read by the server thread */
    bool fail;    /* the metrics callback reports an allocation failure */
    hy_hist ttft;
} app;

static const double fixture_bounds[] = {0.001, 0.5, 2};

/* A fixed exposition covering every kind of sample, and its expected text. */
static void render_fixture(hy_strbuf *b, const hy_hist *ttft)
{
    hy_prom_family(b, "hypic_hits_total", "counter", "Lookups that found their entry, by tier.");
    hy_prom_u64(b, "hypic_hits_total", "tier=\"host\"", UINT64_MAX);
    hy_prom_u64(b, "hypic_hits_total", "tier=\"nvme\"", 3);
    hy_prom_family(b, "hypic_queue_depth", "gauge",
                   "Requests waiting for an executor.\nA \\ and a \"quote\".");
    hy_prom_sample(b, "hypic_queue_depth", NULL, 0.1);
    hy_prom_family(b, "hypic_odd", "gauge", "Values that need care.");
    hy_prom_sample(b, "hypic_odd", "kind=\"nan\"", NAN);
    hy_prom_sample(b, "hypic_odd", "kind=\"inf\"", INFINITY);
    hy_prom_sample(b, "hypic_odd", "kind=\"-inf\"", -INFINITY);
    hy_prom_sample(b, "hypic_odd", "kind=\"big\"", 1e21);
    hy_prom_sample(b, "hypic_odd", "kind=\"third\"", 1.0 / 3);
    hy_prom_sample(b, "hypic_odd", "kind=\"neg\"", -2.5);
    hy_prom_family(b, "hypic_ttft_seconds", "histogram", "Time to first token.");
    hy_prom_hist(b, "hypic_ttft_seconds", "mode=\"pic\"", ttft);
}

static const char fixture_text[] =
    "# HELP hypic_hits_total Lookups that found their entry, by tier.\n"
    "# TYPE hypic_hits_total counter\n"
    "hypic_hits_total{tier=\"host\"} 18446744073709551615\n"
    "hypic_hits_total{tier=\"nvme\"} 3\n"
    "# HELP hypic_queue_depth Requests waiting for an executor.\\nA \\\\ and a \"quote\".\n"
    "# TYPE hypic_queue_depth gauge\n"
    "hypic_queue_depth 0.1\n"
    "# HELP hypic_odd Values that need care.\n"
    "# TYPE hypic_odd gauge\n"
    "hypic_odd{kind=\"nan\"} NaN\n"
    "hypic_odd{kind=\"inf\"} +Inf\n"
    "hypic_odd{kind=\"-inf\"} -Inf\n"
    "hypic_odd{kind=\"big\"} 1e+21\n"
    "hypic_odd{kind=\"third\"} 0.3333333333333333\n"
    "hypic_odd{kind=\"neg\"} -2.5\n"
    "# HELP hypic_ttft_seconds Time to first token.\n"
    "# TYPE hypic_ttft_seconds histogram\n"
    "hypic_ttft_seconds_bucket{mode=\"pic\",le=\"0.001\"} 1\n"
    "hypic_ttft_seconds_bucket{mode=\"pic\",le=\"0.5\"} 3\n"
    "hypic_ttft_seconds_bucket{mode=\"pic\",le=\"2\"} 3\n"
    "hypic_ttft_seconds_bucket{mode=\"pic\",le=\"+Inf\"} 4\n"
    "hypic_ttft_seconds_sum{mode=\"pic\"} 3.7505\n"
    "hypic_ttft_seconds_count{mode=\"pic\"} 4\n";

static void app_init(app *a)
{
    memset(a, 0, sizeof *a);
    atomic_init(&a->ready, true);
    hy_hist_init(&a->ttft, fixture_bounds, 3);
    /* one at or below 0.001, two in (0.001, 0.5] (0.5 itself: le is inclusive), one above 2 */
    const double v[] = {0.0005, 0.25, 0.5, 3};
    for (int i = 0; i < 4; i++) hy_hist_observe(&a->ttft, v[i]);
}

static void app_metrics(void *p, hy_strbuf *out)
{
    app *a = p;
    render_fixture(out, &a->ttft);
    if (a->fail) out->failed = true;
}

static bool app_ready(void *p, char *why, size_t cap)
{
    app *a = p;
    if (atomic_load(&a->ready)) return true;
    snprintf(why, cap, "%s", a->why);
    return false;
}

static hy_http *start_app(app *a)
{
    hy_http_handlers h = {.app = a, .metrics = app_metrics, .ready = app_ready};
    hy_http *s = NULL;
    hy_err err = {0};
    int rc = hy_http_start("127.0.0.1:0", &h, &s, &err);
    if (rc) fprintf(stderr, "hy_http_start: %s\n", err.msg);
    CU_ASSERT_FATAL(rc == 0 && s);
    CU_ASSERT_FATAL(hy_http_port(s) > 0);
    return s;
}

/* ---- the endpoints -------------------------------------------------------- */

static void test_paths(void)
{
    static app a;
    app_init(&a);
    hy_http *s = start_app(&a);
    int port = hy_http_port(s);
    static resp r, r2;

    fetch(port, "GET", "/healthz", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    assert_body(&r, "ok\n");
    assert_header(&r, "Content-Type", "text/plain; charset=utf-8");

    fetch(port, "GET", "/nope", &r);
    CU_ASSERT_EQUAL(r.status, 404);
    assert_body(&r, "not found\n");
    fetch(port, "GET", "/", &r);
    CU_ASSERT_EQUAL(r.status, 404);
    fetch(port, "GET", "/metrics/", &r); /* exact paths only */
    CU_ASSERT_EQUAL(r.status, 404);

    fetch(port, "POST", "/metrics", &r);
    CU_ASSERT_EQUAL(r.status, 405);
    assert_header(&r, "Allow", "GET, HEAD");
    assert_body(&r, "method not allowed\n");
    fetch(port, "DELETE", "/healthz", &r);
    CU_ASSERT_EQUAL(r.status, 405);
    fetch(port, "PUT", "/nope", &r); /* the method is refused before the path is looked at */
    CU_ASSERT_EQUAL(r.status, 405);

    /* HEAD: GET's status and headers, no body */
    fetch(port, "GET", "/metrics", &r);
    fetch(port, "HEAD", "/metrics", &r2);
    CU_ASSERT_EQUAL(r2.status, 200);
    CU_ASSERT_EQUAL(r2.body_len, 0);
    char len_get[32] = "", len_head[32] = "";
    CU_ASSERT(header(&r, "Content-Length", len_get, sizeof len_get));
    CU_ASSERT(header(&r2, "Content-Length", len_head, sizeof len_head));
    CU_ASSERT_STRING_EQUAL(len_get, len_head);
    CU_ASSERT_EQUAL(strtoull(len_get, NULL, 10), strlen(fixture_text));

    /* a query string is not part of the path; a body on a GET is read and ignored */
    fetch(port, "GET", "/healthz?verbose=1", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    fetch_full("127.0.0.1", port, "GET", "/healthz", "Content-Length: 5\r\n", "hello", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    assert_body(&r, "ok\n");

    /* several requests on one keep-alive connection */
    int fd = dial("127.0.0.1", port);
    CU_ASSERT_FATAL(fd >= 0);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT(send_all(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
        read_response(fd, false, &r);
        CU_ASSERT_EQUAL(r.status, 200);
        assert_body(&r, "ok\n");
    }
    close(fd);
    hy_http_stop(s);
    hy_http_stop(NULL);

    /* stopped: nothing listens there any more */
    CU_ASSERT_EQUAL(dial("127.0.0.1", port), -1);
}

static void test_readyz_flips(void)
{
    static app a;
    app_init(&a);
    snprintf(a.why, sizeof a.why, "starting: loading model tiny");
    atomic_store(&a.ready, false);
    hy_http *s = start_app(&a);
    int port = hy_http_port(s);
    static resp r;

    fetch(port, "GET", "/readyz", &r);
    CU_ASSERT_EQUAL(r.status, 503);
    assert_body(&r, "starting: loading model tiny\n");
    fetch(port, "GET", "/healthz", &r); /* alive while not ready */
    CU_ASSERT_EQUAL(r.status, 200);

    atomic_store(&a.ready, true);
    fetch(port, "GET", "/readyz", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    assert_body(&r, "ready\n");

    snprintf(a.why, sizeof a.why, "draining");
    atomic_store(&a.ready, false);
    fetch(port, "GET", "/readyz", &r);
    CU_ASSERT_EQUAL(r.status, 503);
    assert_body(&r, "draining\n");

    a.why[0] = '\0'; /* no reason given */
    fetch(port, "GET", "/readyz", &r);
    CU_ASSERT_EQUAL(r.status, 503);
    assert_body(&r, "not ready\n");
    hy_http_stop(s);

    /* without handlers: always ready, an empty exposition */
    hy_http *bare = NULL;
    hy_err err = {0};
    CU_ASSERT_FATAL(hy_http_start("127.0.0.1:0", NULL, &bare, &err) == 0);
    fetch(hy_http_port(bare), "GET", "/readyz", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    fetch(hy_http_port(bare), "GET", "/metrics", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    CU_ASSERT_EQUAL(r.body_len, 0);
    hy_http_stop(bare);
}

static void test_metrics_exact(void)
{
    static app a;
    app_init(&a);

    hy_strbuf b = {0};
    render_fixture(&b, &a.ttft);
    CU_ASSERT_FALSE(b.failed);
    CU_ASSERT_FATAL(b.p != NULL);
    CU_ASSERT_STRING_EQUAL(b.p, fixture_text);
    if (strcmp(b.p, fixture_text)) fprintf(stderr, "rendered:\n%s", b.p);
    CU_ASSERT_EQUAL(b.n, strlen(fixture_text));
    hy_sb_free(&b);

    hy_http *s = start_app(&a);
    static resp r;
    fetch(hy_http_port(s), "GET", "/metrics", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    assert_header(&r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    assert_body(&r, fixture_text);

    /* a rendering that ran out of memory is an error, not a partial page */
    a.fail = true;
    fetch(hy_http_port(s), "GET", "/metrics", &r);
    CU_ASSERT_EQUAL(r.status, 500);
    hy_http_stop(s);

    /* no labels: the histogram's own le is the only one */
    hy_hist h;
    hy_hist_init(&h, (const double[]){1}, 1);
    hy_hist_observe(&h, 0.25);
    hy_prom_hist(&b, "x_seconds", NULL, &h);
    CU_ASSERT_STRING_EQUAL(b.p, "x_seconds_bucket{le=\"1\"} 1\n"
                                "x_seconds_bucket{le=\"+Inf\"} 1\n"
                                "x_seconds_sum 0.25\n"
                                "x_seconds_count 1\n");
    hy_sb_free(&b);
}

/* ---- histograms ----------------------------------------------------------- */

static void test_hist_buckets(void)
{
    hy_hist h;
    hy_hist_init(&h, (const double[]){1, 2, 5}, 3);
    CU_ASSERT_EQUAL(hy_hist_count(&h), 0);
    /* le is inclusive (1 is in le="1"); negative counts as 0; NaN is not counted */
    const double v[] = {0.5, 1, 1.5, 3, 10, -2, NAN};
    for (int i = 0; i < 7; i++) hy_hist_observe(&h, v[i]);
    CU_ASSERT_EQUAL(hy_hist_count(&h), 6);
    hy_strbuf b = {0};
    hy_prom_hist(&b, "t", "k=\"v\"", &h);
    CU_ASSERT_STRING_EQUAL(b.p, "t_bucket{k=\"v\",le=\"1\"} 3\n"
                                "t_bucket{k=\"v\",le=\"2\"} 4\n"
                                "t_bucket{k=\"v\",le=\"5\"} 5\n"
                                "t_bucket{k=\"v\",le=\"+Inf\"} 6\n"
                                "t_sum{k=\"v\"} 16\n"
                                "t_count{k=\"v\"} 6\n");
    hy_sb_free(&b);

    /* the sum keeps nanosecond resolution exactly */
    hy_hist_init(&h, hy_hist_latency_bounds, hy_hist_latency_nb);
    hy_hist_observe(&h, 0.000000001);
    hy_hist_observe(&h, 0.000123456);
    CU_ASSERT_EQUAL(atomic_load(&h.sum_nano), 123457);
    hy_prom_hist(&b, "u", NULL, &h);
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "\nu_sum 0.000123457\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "u_bucket{le=\"0.0001\"} 1\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "u_bucket{le=\"0.00025\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "u_bucket{le=\"60\"} 2\n"));
    hy_sb_free(&b);

    /* the latency bounds: 100 µs .. 60 s, ascending */
    CU_ASSERT(hy_hist_latency_nb <= HY_HIST_MAX_BOUNDS);
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_latency_bounds[0], 1e-4, 0);
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_latency_bounds[hy_hist_latency_nb - 1], 60, 0);
}

static void test_hist_quantile(void)
{
    hy_hist h;
    double bounds[10];
    for (int i = 0; i < 10; i++) bounds[i] = (i + 1) / 10.0;
    hy_hist_init(&h, bounds, 10);
    CU_ASSERT(isnan(hy_hist_quantile(&h, 0.5))); /* nothing observed */

    /* uniform on (0, 1): 100 per bucket, the quantile is q itself */
    for (int i = 0; i < 1000; i++) hy_hist_observe(&h, (i + 0.5) / 1000);
    const double qs[] = {0.01, 0.25, 0.5, 0.9, 0.99, 1};
    for (int i = 0; i < 6; i++) CU_ASSERT_DOUBLE_EQUAL(hy_hist_quantile(&h, qs[i]), qs[i], 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_quantile(&h, 0), 0, 0);
    CU_ASSERT(isnan(hy_hist_quantile(&h, -0.1)));
    CU_ASSERT(isnan(hy_hist_quantile(&h, 1.1)));
    CU_ASSERT(isnan(hy_hist_quantile(&h, NAN)));

    /* a rank in the +Inf bucket answers the last finite bound */
    for (int i = 0; i < 9000; i++) hy_hist_observe(&h, 7);
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_quantile(&h, 0.99), 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_quantile(&h, 0.05), 0.5, 1e-12);

    /* everything in one latency bucket (2.5 ms, 5 ms]: interpolated linearly */
    hy_hist_init(&h, hy_hist_latency_bounds, hy_hist_latency_nb);
    for (int i = 0; i < 1000; i++) hy_hist_observe(&h, 0.003);
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_quantile(&h, 0.5), 0.00375, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_quantile(&h, 0.1), 0.00275, 1e-15);
    /* q = 0: the lower edge of the first bucket that holds anything */
    CU_ASSERT_DOUBLE_EQUAL(hy_hist_quantile(&h, 0), 0.0025, 1e-15);
}

#define OBS_THREADS    4
#define OBS_PER_THREAD 250000

typedef struct observer {
    hy_hist *h;
    pthread_barrier_t *start;
} observer;

static const double obs_values[4] = {0.0001, 0.003, 0.7, 100}; /* 0.0001: exactly on a bound */

static void *observe_many(void *p)
{
    observer *o = p;
    pthread_barrier_wait(o->start);
    for (int i = 0; i < OBS_PER_THREAD; i++) hy_hist_observe(o->h, obs_values[i % 4]);
    return NULL;
}

static void test_hist_concurrent(void)
{
    static hy_hist h;
    hy_hist_init(&h, hy_hist_latency_bounds, hy_hist_latency_nb);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, OBS_THREADS);
    pthread_t t[OBS_THREADS];
    observer o = {&h, &start};
    for (int i = 0; i < OBS_THREADS; i++)
        CU_ASSERT_FATAL(!pthread_create(&t[i], NULL, observe_many, &o));
    for (int i = 0; i < OBS_THREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);

    const uint64_t each = (uint64_t)OBS_THREADS * OBS_PER_THREAD / 4;
    CU_ASSERT_EQUAL(hy_hist_count(&h), 4 * each);
    /* nanoseconds: 100000 + 3000000 + 700000000 + 100000000000 per round */
    CU_ASSERT_EQUAL(atomic_load(&h.sum_nano), each * UINT64_C(100703100000));
    CU_ASSERT_EQUAL(atomic_load(&h.counts[0]), each);                  /* le 0.0001 */
    CU_ASSERT_EQUAL(atomic_load(&h.counts[5]), each);                  /* (0.0025, 0.005] */
    CU_ASSERT_EQUAL(atomic_load(&h.counts[12]), each);                 /* (0.5, 1] */
    CU_ASSERT_EQUAL(atomic_load(&h.counts[hy_hist_latency_nb]), each); /* +Inf */
    hy_strbuf b = {0};
    hy_prom_hist(&b, "c", NULL, &h);
    /* 250000 rounds of 100.7031 s: 25175775 s exactly */
    CU_ASSERT_PTR_NOT_NULL(strstr(b.p, "c_bucket{le=\"+Inf\"} 1000000\n"
                                       "c_sum 25175775\n"
                                       "c_count 1000000\n"));
    hy_sb_free(&b);
}

/* ---- text ------------------------------------------------------------------ */

static void test_escape(void)
{
    char out[64];
    hy_prom_escape("a\"b\\c\nd", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "a\\\"b\\\\c\\nd");
    hy_prom_escape("plain", out, sizeof out);
    CU_ASSERT_STRING_EQUAL(out, "plain");

    /* cut short: never half an escape, never half a UTF-8 character */
    hy_prom_escape("ab\"", out, 4);
    CU_ASSERT_STRING_EQUAL(out, "ab");
    hy_prom_escape("ab\"", out, 5);
    CU_ASSERT_STRING_EQUAL(out, "ab\\\"");
    hy_prom_escape("a\xc3\xa9", out, 3); /* "aé": é is two bytes */
    CU_ASSERT_STRING_EQUAL(out, "a");
    hy_prom_escape("a\xc3\xa9", out, 4);
    CU_ASSERT_STRING_EQUAL(out, "a\xc3\xa9");
    hy_prom_escape("\xe2\x82\xac!", out, 3); /* the euro sign is three */
    CU_ASSERT_STRING_EQUAL(out, "");
    hy_prom_escape("xyz", out, 1);
    CU_ASSERT_STRING_EQUAL(out, "");
    out[0] = 'Q';
    hy_prom_escape("xyz", out, 0);
    CU_ASSERT_EQUAL(out[0], 'Q');

    /* an escaped value as a label renders as the format wants */
    char lab[128], v[64];
    hy_prom_escape("doc \"7\"\\x", v, sizeof v);
    snprintf(lab, sizeof lab, "tag=\"%s\"", v);
    hy_strbuf b = {0};
    hy_prom_u64(&b, "n", lab, 1);
    CU_ASSERT_STRING_EQUAL(b.p, "n{tag=\"doc \\\"7\\\"\\\\x\"} 1\n");
    hy_sb_free(&b);
}

static void test_strbuf(void)
{
    hy_strbuf b = {0};
    for (int i = 0; i < 10000; i++) hy_sb_printf(&b, "line %05d\n", i);
    CU_ASSERT_FALSE(b.failed);
    CU_ASSERT_EQUAL(b.n, 10000 * 11);
    CU_ASSERT_EQUAL(strlen(b.p), b.n);
    CU_ASSERT(memcmp(b.p + 9999 * 11, "line 09999\n", 11) == 0);

    static char big[100000];
    memset(big, 'z', sizeof big - 1);
    hy_sb_printf(&b, "%s", big);
    CU_ASSERT_EQUAL(b.n, 10000 * 11 + sizeof big - 1);
    CU_ASSERT_EQUAL(b.p[b.n - 1], 'z');
    CU_ASSERT_EQUAL(b.p[b.n], '\0');

    /* after a failure, appends are ignored and the text stays as it was */
    size_t n = b.n;
    b.failed = true;
    hy_sb_printf(&b, "more");
    CU_ASSERT_EQUAL(b.n, n);
    CU_ASSERT_EQUAL(b.p[n], '\0');
    hy_sb_free(&b);
    CU_ASSERT_PTR_NULL(b.p);
    CU_ASSERT_EQUAL(b.n, 0);
    CU_ASSERT_FALSE(b.failed);

    hy_sb_printf(&b, "%s", ""); /* an empty append still leaves a string */
    CU_ASSERT_PTR_NOT_NULL_FATAL(b.p);
    CU_ASSERT_STRING_EQUAL(b.p, "");
    hy_sb_free(&b);
}

/* ---- start errors ---------------------------------------------------------- */

static void test_port_in_use(void)
{
    static app a;
    app_init(&a);
    hy_http *s = start_app(&a);
    int port = hy_http_port(s);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);

    hy_http *s2 = (hy_http *)&a; /* must be reset to NULL */
    hy_err err = {0};
    CU_ASSERT_EQUAL(hy_http_start(addr, NULL, &s2, &err), HY_EIO);
    CU_ASSERT_PTR_NULL(s2);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, addr));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "in use"));
    static resp r; /* the first server is unharmed */
    fetch(port, "GET", "/healthz", &r);
    CU_ASSERT_EQUAL(r.status, 200);
    hy_http_stop(s);

    /* a port held by some other listener */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CU_ASSERT_FATAL(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0);
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    CU_ASSERT_EQUAL(hy_http_start(addr, NULL, &s2, &err), HY_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, addr));
    close(fd);

    /* an address this machine does not have */
    CU_ASSERT_EQUAL(hy_http_start("192.0.2.1:0", NULL, &s2, &err), HY_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "192.0.2.1:0"));
}

static void test_bad_addresses(void)
{
    const char *bad[] = {"",
                         "127.0.0.1",
                         "localhost:7879",
                         "127.0.0.1:65536",
                         "127.0.0.1:-1",
                         "127.0.0.1:",
                         "127.0.0.1:80x",
                         "::1:7879",
                         "[::1]7879",
                         "[::1",
                         "[nothex]:7879",
                         "127.0.0.256:80",
                         ":7879",
                         "127.0.0.1:123456",
                         "[127.0.0.1]:7879",
                         NULL};
    for (int i = 0; bad[i]; i++) {
        hy_http *s = NULL;
        hy_err err = {0};
        int rc = hy_http_start(bad[i], NULL, &s, &err);
        CU_ASSERT_EQUAL(rc, HY_EINVAL);
        CU_ASSERT_PTR_NULL(s);
        if (bad[i][0]) CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i]));
        if (rc != HY_EINVAL) fprintf(stderr, "address \"%s\": rc %d\n", bad[i], rc);
        if (rc == 0) hy_http_stop(s);
    }
    hy_err err = {0};
    hy_http *s = NULL;
    CU_ASSERT_EQUAL(hy_http_start(NULL, NULL, &s, &err), HY_EINVAL);
}

static void test_ipv6(void)
{
    /* Only where the machine has an IPv6 loopback (some containers do not). */
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_addr = in6addr_loopback};
    bool have = probe >= 0 && bind(probe, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (probe >= 0) close(probe);
    if (!have) {
        printf("SKIPPED: no IPv6 loopback (%s)\n", strerror(errno));
        return;
    }
    hy_http *s = NULL;
    hy_err err = {0};
    CU_ASSERT_FATAL(hy_http_start("[::1]:0", NULL, &s, &err) == 0);
    static resp r;
    fetch_full("::1", hy_http_port(s), "GET", "/healthz", NULL, NULL, &r);
    CU_ASSERT_EQUAL(r.status, 200);
    assert_body(&r, "ok\n");
    hy_http_stop(s);

    /* IPv6-only, also for the unspecified address: "[::]" does not take
     * IPv4 connections (dual stack would), so 127.0.0.1 on its port is refused */
    CU_ASSERT_FATAL(hy_http_start("[::]:0", NULL, &s, &err) == 0);
    int fd = dial("127.0.0.1", hy_http_port(s));
    CU_ASSERT_EQUAL(fd, -1);
    if (fd >= 0) close(fd);
    fetch_full("::1", hy_http_port(s), "GET", "/healthz", NULL, NULL, &r);
    CU_ASSERT_EQUAL(r.status, 200);
    hy_http_stop(s);
}

/* ---- slow and many clients -------------------------------------------------- */

/* Whether fd was closed by the peer within ms milliseconds. */
static bool closed_within(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, ms) <= 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void test_slow_client(void)
{
    static app a;
    app_init(&a);
    hy_http *s = start_app(&a);
    int port = hy_http_port(s);

    /* a request started and never finished */
    int stalled = dial("127.0.0.1", port);
    CU_ASSERT_FATAL(stalled >= 0);
    CU_ASSERT(send_all(stalled, "GET /hea"));
    double t0 = hy_now_s();

    /* others are served meanwhile, at once */
    static resp r;
    for (int i = 0; i < 4; i++) {
        double t = hy_now_s();
        fetch(port, "GET", "/healthz", &r);
        CU_ASSERT_EQUAL(r.status, 200);
        CU_ASSERT(hy_now_s() - t < 1.0);
    }

    /* and the stalled connection is closed after the inactivity timeout */
    CU_ASSERT(closed_within(stalled, (HY_HTTP_TIMEOUT_S + 3) * 1000));
    double waited = hy_now_s() - t0;
    printf("stalled connection closed after %.2f s (timeout %d s)\n", waited, HY_HTTP_TIMEOUT_S);
    CU_ASSERT(waited >= HY_HTTP_TIMEOUT_S - 1);
    close(stalled);
    hy_http_stop(s);
}

static void test_connection_limit(void)
{
    static app a;
    app_init(&a);
    hy_http *s = start_app(&a);
    int port = hy_http_port(s);

    /* More keep-alive clients than the limit, each with one request sent:
     * at most the limit are ever answered while they all stay open. */
    enum { N = HY_HTTP_MAX_CONNECTIONS + 16 };
    int fds[N];
    for (int i = 0; i < N; i++) {
        fds[i] = dial("127.0.0.1", port);
        CU_ASSERT_FATAL(fds[i] >= 0);
        CU_ASSERT(send_all(fds[i], "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
    }
    int answered = 0;
    static resp r;
    double deadline = hy_now_s() + 2;
    bool done[N] = {0};
    while (hy_now_s() < deadline) {
        for (int i = 0; i < N; i++) {
            if (done[i]) continue;
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            if (poll(&p, 1, 0) <= 0) continue;
            done[i] = true;
            read_response(fds[i], false, &r);
            if (r.status == 200) answered++;
        }
        usleep(10000);
    }
    printf("%d of %d connections answered (limit %d)\n", answered, N, HY_HTTP_MAX_CONNECTIONS);
    CU_ASSERT(answered >= 1);
    CU_ASSERT(answered <= HY_HTTP_MAX_CONNECTIONS);
    for (int i = 0; i < N; i++) close(fds[i]);

    /* once they are gone, the server serves again */
    r.status = -1;
    for (int tries = 0; tries < 50 && r.status != 200; tries++) {
        fetch(port, "GET", "/healthz", &r);
        if (r.status != 200) usleep(100000);
    }
    CU_ASSERT_EQUAL(r.status, 200);
    hy_http_stop(s);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"paths: status, headers and bodies", test_paths},
        {"readyz flips between 503 and 200", test_readyz_flips},
        {"metrics body exactly as rendered", test_metrics_exact},
        {"histogram buckets, sum and count", test_hist_buckets},
        {"histogram quantiles", test_hist_quantile},
        {"concurrent observations add up exactly", test_hist_concurrent},
        {"label escaping", test_escape},
        {"text buffer", test_strbuf},
        {"port in use is HY_EIO", test_port_in_use},
        {"malformed addresses are HY_EINVAL", test_bad_addresses},
        {"IPv6 loopback", test_ipv6},
        {"a stalled client neither blocks others nor stays", test_slow_client},
        {"connections are bounded", test_connection_limit},
        {NULL, NULL},
    };
    return hy_test_main("http", cases);
}
