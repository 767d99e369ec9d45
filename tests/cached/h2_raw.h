/*
 * A raw HTTP/2 client for the hostile tests (nghttp2): it sends what a gRPC
 * client library refuses to — a header value holding a NUL, a call's
 * headers with no message ever after — and reads each stream's grpc-status.
 * One connection, blocking socket, pumped by the test (h2_pump).
 */
#ifndef HY_TEST_H2_RAW_H
#define HY_TEST_H2_RAW_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define H2_STREAMS 128

typedef struct h2_stream {
    int32_t id;
    int grpc_status; /* -1 until the trailers (or headers) carry one */
    char grpc_message[256];
    bool closed;
    uint32_t rst; /* the stream's error code when it was reset */
    /* the request's body: a gRPC frame, sent as the window allows; hold:
     * never any body nor the end of the stream */
    uint8_t *body;
    size_t body_n, body_off;
    bool hold;
} h2_stream;

typedef struct h2_conn {
    int fd;
    nghttp2_session *s;
    h2_stream st[H2_STREAMS];
    int n;
    int timeout_ms; /* when > 0, the calls started after carry it as grpc-timeout: the
                     * server's deadline, with no timer of the client's own */
} h2_conn;

static inline h2_stream *h2_find(h2_conn *c, int32_t id)
{
    for (int i = 0; i < c->n; i++)
        if (c->st[i].id == id) return &c->st[i];
    return NULL;
}

static inline ssize_t h2_send_cb(nghttp2_session *s, const uint8_t *data, size_t len, int flags,
                                 void *u)
{
    (void)s, (void)flags;
    h2_conn *c = u;
    ssize_t k = send(c->fd, data, len, MSG_NOSIGNAL);
    if (k < 0) return errno == EAGAIN ? NGHTTP2_ERR_WOULDBLOCK : NGHTTP2_ERR_CALLBACK_FAILURE;
    return k;
}

static inline int h2_header_cb(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                               size_t nl, const uint8_t *value, size_t vl, uint8_t flags, void *u)
{
    (void)s, (void)flags;
    h2_stream *st = h2_find(u, f->hd.stream_id);
    if (!st) return 0;
    if (nl == 11 && !memcmp(name, "grpc-status", 11)) st->grpc_status = atoi((const char *)value);
    if (nl == 12 && !memcmp(name, "grpc-message", 12))
        snprintf(st->grpc_message, sizeof st->grpc_message, "%.*s", (int)vl, (const char *)value);
    return 0;
}

static inline int h2_close_cb(nghttp2_session *s, int32_t id, uint32_t err, void *u)
{
    (void)s;
    h2_stream *st = h2_find(u, id);
    if (st) {
        st->closed = true;
        st->rst = err;
    }
    return 0;
}

static inline int h2_data_cb(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d,
                             size_t n, void *u)
{
    (void)flags, (void)d, (void)u;
    nghttp2_session_consume(s, id, n); /* responses are not read, only statuses */
    return 0;
}

static inline ssize_t h2_body_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
                                 uint32_t *flags, nghttp2_data_source *src, void *u)
{
    (void)s, (void)id, (void)u;
    h2_stream *st = src->ptr;
    if (st->hold) return NGHTTP2_ERR_DEFERRED;
    size_t k = st->body_n - st->body_off;
    if (k > len) k = len;
    memcpy(buf, st->body + st->body_off, k);
    st->body_off += k;
    if (st->body_off == st->body_n) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)k;
}

/* A connection to "127.0.0.1:port" with the client's preface and SETTINGS. */
static inline int h2_open(h2_conn *c, const char *target)
{
    memset(c, 0, sizeof *c);
    const char *colon = strrchr(target, ':');
    if (!colon) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    char host[64];
    snprintf(host, sizeof host, "%.*s", (int)(colon - target), target);
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return -1;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(c->fd);
        return -1;
    }
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_send_callback(cb, h2_send_cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, h2_header_cb);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, h2_close_cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_data_cb);
    nghttp2_option *opt;
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 0);
    int rc = nghttp2_session_client_new2(&c->s, cb, c, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cb);
    if (rc) return -1;
    nghttp2_submit_settings(c->s, NGHTTP2_FLAG_NONE, NULL, 0);
    return nghttp2_session_send(c->s) ? -1 : 0;
}

/* Starts a gRPC call of path with the authorization value auth[0..auth_n)
 * (NULL: none) sent as it is, and msg[0..n) as its one message — or, with
 * hold, nothing after the headers. Returns the stream (NULL on failure). */
static inline h2_stream *h2_call(h2_conn *c, const char *path, const void *auth, size_t auth_n,
                                 const void *msg, size_t n, bool hold)
{
    if (c->n == H2_STREAMS) return NULL;
    h2_stream *st = &c->st[c->n];
    memset(st, 0, sizeof *st);
    st->grpc_status = -1;
    st->hold = hold;
    st->body_n = 5 + n;
    st->body = malloc(st->body_n);
    st->body[0] = 0;
    st->body[1] = (uint8_t)(n >> 24), st->body[2] = (uint8_t)(n >> 16);
    st->body[3] = (uint8_t)(n >> 8), st->body[4] = (uint8_t)n;
    if (n) memcpy(st->body + 5, msg, n);
    char timeout[24];
    snprintf(timeout, sizeof timeout, "%dm", c->timeout_ms);
#define NV(K, V, VN) {(uint8_t *)(K), (uint8_t *)(V), sizeof(K) - 1, (VN), NGHTTP2_NV_FLAG_NONE}
    nghttp2_nv nv[] = {
        NV(":method", "POST", 4),
        NV(":scheme", "http", 4),
        NV(":path", path, strlen(path)),
        NV(":authority", "localhost", 9),
        NV("content-type", "application/grpc", 16),
        NV("te", "trailers", 8),
        NV("grpc-timeout", timeout, strlen(timeout)),
        NV("authorization", auth ? auth : "", auth_n),
    };
#undef NV
    /* grpc-timeout only when asked: dropped from the list by moving
     * authorization into its place */
    size_t nnv = 6;
    if (c->timeout_ms > 0) nnv++;
    else nv[6] = nv[7];
    if (auth) nnv++;
    nghttp2_data_provider dp = {.source.ptr = st, .read_callback = h2_body_cb};
    int32_t id = nghttp2_submit_request(c->s, NULL, nv, nnv, &dp, NULL);
    if (id < 0) {
        free(st->body);
        return NULL;
    }
    st->id = id;
    c->n++;
    nghttp2_session_send(c->s);
    return st;
}

/* Sends and receives for up to ms, or until `until` (when not NULL) has
 * closed. 0, or -1 when the connection broke. */
static inline int h2_pump(h2_conn *c, int ms, const h2_stream *until)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (nghttp2_session_send(c->s)) return -1;
        if (until && until->closed) return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        const long left = ms - ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0) return 0;
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, (int)(left < 50 ? left : 50)) <= 0) continue;
        uint8_t buf[65536];
        ssize_t k = recv(c->fd, buf, sizeof buf, 0);
        if (k <= 0) return -1;
        if (nghttp2_session_mem_recv(c->s, buf, (size_t)k) < 0) return -1;
    }
}

static inline void h2_close(h2_conn *c)
{
    if (c->s) nghttp2_session_del(c->s);
    if (c->fd > 0) close(c->fd);
    for (int i = 0; i < c->n; i++) free(c->st[i].body);
    memset(c, 0, sizeof *c);
}

#endif
