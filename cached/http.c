/*
 * The HTTP port (/metrics, /healthz, /readyz) on libmicrohttpd.
 *
 * The listening socket is made here, not by libmicrohttpd: bind()'s errno is
 * then ours to report ("Address already in use" names the address), the port
 * picked for ":0" is read with getsockname, and SO_REUSEADDR lets a restarted
 * daemon bind while old connections sit in TIME_WAIT. libmicrohttpd takes the
 * socket over (MHD_OPTION_LISTEN_SOCKET) and closes it in MHD_stop_daemon.
 *
 * Threads: libmicrohttpd's internal polling with a pool of HY_HTTP_THREADS.
 * Sockets are non-blocking and polled, so a client that sends slowly or
 * never holds a connection slot, not a thread; the connection limit and the
 * inactivity timeout bound how many slots such clients can hold and for how
 * long. The handlers run on those threads, so a scrape renders in parallel
 * with the service and never waits on it.
 *
 * A request is answered once it has been read in full (libmicrohttpd calls
 * the handler first with the headers, then with any body, then once more with
 * nothing): a GET with a body has that body read and ignored. A method other
 * than GET or HEAD is answered at once, and libmicrohttpd then closes the
 * connection instead of reading a body nobody wants.
 */
#include "http_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TEXT_PLAIN   "text/plain; charset=utf-8"
#define PROM_TEXT    "text/plain; version=0.0.4; charset=utf-8"
#define WHY_MAX      256
#define LISTEN_QUEUE 64

struct hy_http {
    struct MHD_Daemon *daemon;
    hy_http_handlers h;
    int port;
    char address[128]; /* as given, for log lines */
};

/* ---- the address ---------------------------------------------------------- */

/* "a.b.c.d:port" or "[v6]:port" into sa; HY_EINVAL naming the address and
 * what is allowed otherwise. */
static int parse_address(const char *address, struct sockaddr_storage *sa, socklen_t *len,
                         hy_err *err)
{
    static const char *form = "expected host:port with a numeric IPv4 host or an IPv6 host in "
                              "brackets, e.g. 127.0.0.1:7879 or [::1]:7879";
    if (!address || !*address) return hy_err_set(err, HY_EINVAL, "http: empty address; %s", form);
    const char *colon;
    char host[64];
    size_t hlen;
    bool v6 = address[0] == '[';
    if (v6) {
        const char *close = strchr(address, ']');
        if (!close || close[1] != ':')
            return hy_err_set(err, HY_EINVAL, "http: address \"%s\": %s", address, form);
        colon = close + 1;
        hlen = (size_t)(close - address - 1);
        if (hlen >= sizeof host)
            return hy_err_set(err, HY_EINVAL, "http: address \"%s\": host too long", address);
        memcpy(host, address + 1, hlen);
    } else {
        colon = strrchr(address, ':');
        if (!colon || memchr(address, ':', (size_t)(colon - address)))
            return hy_err_set(err, HY_EINVAL, "http: address \"%s\": %s", address, form);
        hlen = (size_t)(colon - address);
        if (hlen >= sizeof host)
            return hy_err_set(err, HY_EINVAL, "http: address \"%s\": host too long", address);
        memcpy(host, address, hlen);
    }
    host[hlen] = '\0';

    const char *p = colon + 1;
    long port = 0;
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 5 || p[digits] != '\0' || (port = strtol(p, NULL, 10)) > 65535)
        return hy_err_set(err, HY_EINVAL, "http: address \"%s\": port \"%s\" is not 0..65535",
                          address, p);

    memset(sa, 0, sizeof *sa);
    if (v6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1)
            return hy_err_set(err, HY_EINVAL, "http: address \"%s\": \"%s\" is not an IPv6 address",
                              address, host);
        *len = sizeof *s6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
            return hy_err_set(err, HY_EINVAL,
                              "http: address \"%s\": \"%s\" is not a numeric IPv4 "
                              "address (%s)",
                              address, host, form);
        *len = sizeof *s4;
    }
    return 0;
}

/* A bound, listening, non-blocking socket on sa, and the port it got. */
static int listen_on(const char *address, const struct sockaddr_storage *sa, socklen_t len,
                     int *fd_out, int *port_out, hy_err *err)
{
    int fd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return hy_err_set(err, HY_EIO, "http: socket for %s: %s", address, strerror(errno));
    int one = 1;
    /* REUSEADDR never lets two listeners share a port on Linux; it only
     * ignores connections of a previous process left in TIME_WAIT. */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (sa->ss_family == AF_INET6 &&
         setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0)) {
        int e = errno;
        close(fd);
        return hy_err_set(err, HY_EIO, "http: socket options for %s: %s", address, strerror(e));
    }
    if (bind(fd, (const struct sockaddr *)sa, len) != 0 || listen(fd, LISTEN_QUEUE) != 0) {
        int e = errno;
        close(fd);
        return hy_err_set(err, HY_EIO, "http: cannot listen on %s: %s", address, strerror(e));
    }
    struct sockaddr_storage got;
    socklen_t glen = sizeof got;
    if (getsockname(fd, (struct sockaddr *)&got, &glen) != 0) {
        int e = errno;
        close(fd);
        return hy_err_set(err, HY_EIO, "http: getsockname for %s: %s", address, strerror(e));
    }
    *port_out = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                                : ((struct sockaddr_in *)&got)->sin_port);
    *fd_out = fd;
    return 0;
}

/* ---- requests ------------------------------------------------------------- */

/* Queues a response with body[0..len) (copied, or taken over and freed when
 * owned) and the given content type. */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *type,
                             char *body, size_t len, bool owned)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_MUST_COPY);
    if (!r) {
        if (owned) free(body);
        return MHD_NO; /* out of memory: libmicrohttpd closes the connection */
    }
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (ok == MHD_YES && status == MHD_HTTP_METHOD_NOT_ALLOWED)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (ok == MHD_YES && status != MHD_HTTP_OK)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (ok == MHD_YES) ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result reply_text(struct MHD_Connection *c, unsigned status, const char *text)
{
    return reply(c, status, TEXT_PLAIN, (char *)text, strlen(text), false);
}

static enum MHD_Result serve_metrics(hy_http *s, struct MHD_Connection *c)
{
    hy_strbuf b = {0};
    if (s->h.metrics) s->h.metrics(s->h.app, &b);
    if (b.failed) {
        hy_sb_free(&b);
        hy_log(HY_LOG_ERROR, "http %s: /metrics: out of memory rendering the exposition",
               s->address);
        return reply_text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    }
    if (!b.p) return reply(c, MHD_HTTP_OK, PROM_TEXT, "", 0, false);
    return reply(c, MHD_HTTP_OK, PROM_TEXT, b.p, b.n, true);
}

static enum MHD_Result serve_ready(hy_http *s, struct MHD_Connection *c)
{
    char why[WHY_MAX] = "";
    if (!s->h.ready || s->h.ready(s->h.app, why, sizeof why))
        return reply_text(c, MHD_HTTP_OK, "ready\n");
    why[sizeof why - 1] = '\0';
    char body[WHY_MAX + 2];
    snprintf(body, sizeof body, "%s\n", why[0] ? why : "not ready");
    return reply_text(c, MHD_HTTP_SERVICE_UNAVAILABLE, body);
}

/* libmicrohttpd's access handler (see the top of the file for the calls). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **state)
{
    (void)version, (void)upload;
    hy_http *s = cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return reply_text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
    if (!*state) { /* headers only so far */
        *state = s;
        return MHD_YES;
    }
    if (*upload_size) { /* a body on a GET: read, ignored */
        *upload_size = 0;
        return MHD_YES;
    }
    if (!strcmp(url, "/metrics")) return serve_metrics(s, c);
    if (!strcmp(url, "/healthz")) return reply_text(c, MHD_HTTP_OK, "ok\n");
    if (!strcmp(url, "/readyz")) return serve_ready(s, c);
    return reply_text(c, MHD_HTTP_NOT_FOUND, "not found\n");
}

/* libmicrohttpd's own messages (a refused connection at the limit, a
 * timed-out client...) go to the daemon's log. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    const char *address = cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
    hy_log(HY_LOG_WARN, "http %s: %s", address, msg);
}

/* ---- lifetime ------------------------------------------------------------- */

int hy_http_start(const char *address, const hy_http_handlers *h, hy_http **out, hy_err *err)
{
    *out = NULL;
    struct sockaddr_storage sa;
    socklen_t salen = 0;
    int rc = parse_address(address, &sa, &salen, err);
    if (rc) return rc;
    hy_http *s = calloc(1, sizeof *s);
    if (!s) return hy_err_set(err, HY_ENOMEM, "http: out of memory starting on %s", address);
    if (h) s->h = *h;
    snprintf(s->address, sizeof s->address, "%s", address);

    int fd = -1;
    rc = listen_on(address, &sa, salen, &fd, &s->port, err);
    if (rc) {
        free(s);
        return rc;
    }
    /* A descriptor of our own on the same socket, for a failed start (below). */
    int keep = dup(fd);
    if (keep < 0) {
        int e = errno;
        close(fd);
        free(s);
        return hy_err_set(err, HY_EIO, "http: dup for %s: %s", address, strerror(e));
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
    /* libmicrohttpd checks (in its debug builds) that this matches the socket */
    if (sa.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
    /* The logger goes first so that start-up messages reach it too. */
    s->daemon =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER,
                         on_mhd_log, s->address, MHD_OPTION_LISTEN_SOCKET, fd,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)HY_HTTP_MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HY_HTTP_TIMEOUT_S,
                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HY_HTTP_THREADS, MHD_OPTION_END);
    if (!s->daemon) {
        /* Whether libmicrohttpd closed fd depends on where it failed, and
         * closing it again could hit a descriptor another thread has opened
         * since. Through `keep` the socket stops listening either way: at
         * worst fd stays open on a dead socket. */
        shutdown(keep, SHUT_RDWR);
        close(keep);
        free(s);
        return hy_err_set(err, HY_EIO,
                          "http: libmicrohttpd could not start on %s (threads or memory; "
                          "its log line says which)",
                          address);
    }
    close(keep);
    hy_log(HY_LOG_INFO, "http: /metrics /healthz /readyz on %s (port %d)", address, s->port);
    *out = s;
    return 0;
}

int hy_http_port(const hy_http *s)
{
    return s->port;
}

void hy_http_stop(hy_http *s)
{
    if (!s) return;
    MHD_stop_daemon(s->daemon);
    free(s);
}
