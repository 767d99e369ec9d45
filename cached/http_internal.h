/*
 * The daemon's HTTP port: Prometheus /metrics, /healthz and /readyz, served
 * by libmicrohttpd on an address of their own (http_listen), apart from the
 * gRPC API so that a scraper or a load balancer's probe never queues behind
 * API calls and never needs a bearer token.
 *
 * The server answers from the daemon's state through two callbacks and holds
 * none of it: what /metrics says is whatever `metrics` appends.
 */
#ifndef HY_CACHED_HTTP_INTERNAL_H
#define HY_CACHED_HTTP_INTERNAL_H

#include "hy_common.h"
#include "metrics_internal.h"

#include <stdbool.h>
#include <stddef.h>

/* Connections open at once (beyond it the server stops accepting until one
 * closes), and the seconds a connection may stay silent (a request started
 * but not finished, or an idle keep-alive) before the server closes it: a
 * slow or stalled client holds one connection for a few seconds, never a
 * thread. HY_HTTP_THREADS threads poll every connection. */
#define HY_HTTP_MAX_CONNECTIONS 64
#define HY_HTTP_TIMEOUT_S       5
#define HY_HTTP_THREADS         2

typedef struct hy_http hy_http;

/* The callbacks run on the server's threads, up to HY_HTTP_THREADS at once,
 * so they must be safe to call concurrently with each other and with the
 * rest of the daemon. app and the functions must outlive the server. */
typedef struct hy_http_handlers {
    void *app;
    /* Appends the exposition to out (hy_prom_*). An out whose `failed` is set
     * afterwards is answered 500. NULL: /metrics is empty. */
    void (*metrics)(void *app, hy_strbuf *out);
    /* /readyz: false + why (NUL-terminated, at most cap bytes) while starting
     * or draining; true when calls are being accepted. NULL: always ready. */
    bool (*ready)(void *app, char *why, size_t cap);
} hy_http_handlers;

/* Serves GET /metrics (text/plain; version=0.0.4), /healthz (200 "ok" while
 * the process runs), /readyz (200 "ready" or 503 with the why); anything
 * else 404, methods other than GET/HEAD 405 (with Allow: GET, HEAD). Bodies
 * end with a newline. HEAD answers the same headers without the body.
 *
 * address is "host:port" with a numeric host: IPv4 ("127.0.0.1:7879",
 * "0.0.0.0:7879") or IPv6 in brackets ("[::1]:7879"; an IPv6 socket is
 * IPv6-only); port 0 asks for any free port (hy_http_port says which).
 * HY_EINVAL for an address not of that form, HY_EIO naming the address and
 * the system's reason when it cannot be bound (in use, not local, not
 * permitted), HY_ENOMEM. The handlers are copied.
 *
 * Its own threads (libmicrohttpd's internal polling, HY_HTTP_THREADS of
 * them, HY_HTTP_MAX_CONNECTIONS connections and HY_HTTP_TIMEOUT_S of
 * silence at most) so a slow client cannot pin it. */
int hy_http_start(const char *address, const hy_http_handlers *h, hy_http **out, hy_err *err);
/* The port it listens on (the one picked when the address said 0). */
int hy_http_port(const hy_http *s);
/* Stops accepting, closes every connection after waiting for the callbacks
 * running, and frees s. NULL: no-op. */
void hy_http_stop(hy_http *s);

#endif
