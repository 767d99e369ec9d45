/*
 * The TCP transport, and the stream machinery the shared-memory one reuses.
 *
 * Server: each write() is one DATA frame followed by the bytes, sent straight
 * from the caller's memory (no staging copy); done() is a DONE frame. The
 * socket has a send timeout, so a client that stops reading fails the
 * transfer instead of holding a worker forever.
 *
 * Client: a reader thread reads frames as they come and receives each DATA
 * frame's bytes directly into the registered buffer at its offset (checked
 * against the capacity: a frame outside it ends the connection). It must run
 * on its own: the daemon writes a state before it sends the gRPC reply the
 * client is waiting for, and a state is larger than a socket's buffers.
 */
#include "transport_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---- socket helpers ---- */

int hy_tp_send_all(int fd, const void *p, size_t n, const char *what, hy_err *err)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return hy_err_set(err, HY_EIO, "%s: send: %s", what,
                              k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
                                  ? "timed out (the peer stopped reading)"
                                  : strerror(errno));
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

int hy_tp_recv_all(int fd, void *p, size_t n, const char *what, hy_err *err)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t k = recv(fd, b, n, MSG_WAITALL);
        if (k < 0 && errno == EINTR) continue;
        if (k == 0) return hy_err_set(err, HY_EIO, "%s: the connection was closed", what);
        if (k < 0)
            return hy_err_set(err, HY_EIO, "%s: recv: %s", what,
                              errno == EAGAIN || errno == EWOULDBLOCK ? "timed out"
                                                                      : strerror(errno));
        b += k;
        n -= (size_t)k;
    }
    return 0;
}

int hy_tp_send_frame(int fd, uint32_t type, uint64_t xfer, uint64_t off, uint64_t len, hy_err *err)
{
    uint8_t b[HY_TP_FRAME_BYTES];
    hy_tp_frame f = {.type = type, .xfer = xfer, .offset = off, .length = len};
    hy_tp_frame_pack(&f, b);
    return hy_tp_send_all(fd, b, sizeof b, "transport frame", err);
}

void hy_tp_set_timeouts(int fd, int send_ms, int recv_ms)
{
    struct timeval s = {send_ms / 1000, (send_ms % 1000) * 1000};
    struct timeval r = {recv_ms / 1000, (recv_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof s);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r);
}

int hy_tp_attach(int fd, uint64_t id, const uint8_t secret[HY_TP_SECRET_BYTES], int pass_fd,
                 const char *what, hy_err *err)
{
    uint8_t hello[HY_TP_FRAME_BYTES];
    hy_tp_hello_pack(id, secret, hello);
    if (pass_fd < 0) {
        int rc = hy_tp_send_all(fd, hello, sizeof hello, what, err);
        if (rc) return rc;
    } else {
        /* the memfd rides with the HELLO (SCM_RIGHTS) */
        struct iovec iov = {hello, sizeof hello};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct msghdr m = {.msg_iov = &iov,
                           .msg_iovlen = 1,
                           .msg_control = ctl.buf,
                           .msg_controllen = sizeof ctl.buf};
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        ssize_t k;
        do k = sendmsg(fd, &m, MSG_NOSIGNAL);
        while (k < 0 && errno == EINTR);
        if (k != (ssize_t)sizeof hello)
            return hy_err_set(err, HY_EIO, "%s: sendmsg: %s", what,
                              k < 0 ? strerror(errno) : "short write");
    }
    uint8_t ack[HY_TP_FRAME_BYTES];
    hy_tp_frame f;
    int rc = hy_tp_recv_all(fd, ack, sizeof ack, what, err);
    if (!rc) rc = hy_tp_frame_unpack(ack, &f, err);
    if (rc) return rc;
    if (f.type != HY_TP_ACK)
        return hy_err_set(err, HY_EFORMAT, "%s: frame type %u, want ACK (2)", what, f.type);
    if (f.length != 0)
        return hy_err_set(err, HY_EINVAL,
                          "%s: the server refused to attach session %llu (%s): check the id "
                          "and secret OpenTransport returned, and that it has not expired",
                          what, (unsigned long long)id, hy_strerror(-(int)f.length));
    return 0;
}

/* ---- the client's frame reader ---- */

static void rx_die(hy_tp_stream_rx *rx, const char *why)
{
    hy_tp_ring_die(&rx->ring, why);
}

static void *rx_main(void *arg)
{
    hy_tp_stream_rx *rx = arg;
    const char *kind = hy_tp_kind_name(rx->base.kind);
    for (;;) {
        uint8_t b[HY_TP_FRAME_BYTES];
        hy_tp_frame f;
        hy_err e = {0};
        if (hy_tp_recv_all(rx->fd, b, sizeof b, kind, &e) || hy_tp_frame_unpack(b, &f, &e)) {
            rx_die(rx, e.msg);
            return NULL;
        }
        if (f.type == HY_TP_DATA) {
            char why[200];
            if (!rx->data_allowed) {
                snprintf(why, sizeof why, "%s: a DATA frame on a transport without them", kind);
                rx_die(rx, why);
                return NULL;
            }
            if (f.offset > rx->base.capacity || f.length > rx->base.capacity - f.offset) {
                snprintf(why, sizeof why,
                         "%s: DATA frame of %llu bytes at %llu is outside the %llu-byte buffer",
                         kind, (unsigned long long)f.length, (unsigned long long)f.offset,
                         (unsigned long long)rx->base.capacity);
                rx_die(rx, why);
                return NULL;
            }
            if (hy_tp_recv_all(rx->fd, rx->base.buf + f.offset, f.length, kind, &e)) {
                rx_die(rx, e.msg);
                return NULL;
            }
        } else if (f.type == HY_TP_DONE || f.type == HY_TP_FAIL) {
            hy_tp_ring_put(&rx->ring, f.xfer, f.offset, f.length, f.type == HY_TP_FAIL);
        } else {
            char why[120];
            snprintf(why, sizeof why, "%s: unexpected frame type %u", kind, f.type);
            rx_die(rx, why);
            return NULL;
        }
    }
}

static int rx_wait(hy_tp_receiver *r, uint64_t xfer, int64_t timeout_ms, uint64_t *off,
                   uint64_t *bytes, hy_err *err)
{
    return hy_tp_ring_wait(&((hy_tp_stream_rx *)r)->ring, r->kind, xfer, timeout_ms, off, bytes,
                           err);
}

static void rx_free(hy_tp_receiver *r)
{
    hy_tp_stream_rx *rx = (hy_tp_stream_rx *)r;
    if (rx->fd >= 0) shutdown(rx->fd, SHUT_RDWR);
    if (rx->reader_started) pthread_join(rx->reader, NULL);
    if (rx->fd >= 0) close(rx->fd);
    hy_tp_ring_destroy(&rx->ring);
    if (rx->release_buf) rx->release_buf(rx);
    free(rx);
}

const hy_tp_receiver_ops hy_tp_stream_rx_ops = {rx_wait, rx_free};

int hy_tp_stream_rx_start(hy_tp_stream_rx *rx, hy_err *err)
{
    hy_tp_set_timeouts(rx->fd, 30000, 0); /* the reader blocks until the server speaks */
    int e = pthread_create(&rx->reader, NULL, rx_main, rx);
    if (e)
        return hy_err_set(err, HY_ENOMEM, "transport: cannot start the reader thread: %s",
                          strerror(e));
    rx->reader_started = true;
    return 0;
}

/* ---- TCP ---- */

typedef struct tcp_sender {
    hy_tp_sender base;
    int fd;
} tcp_sender;

static int tcp_write(hy_tp_sender *s, uint64_t xfer, uint64_t off, const void *src, size_t n,
                     hy_err *err)
{
    tcp_sender *t = (tcp_sender *)s;
    int rc = hy_tp_send_frame(t->fd, HY_TP_DATA, xfer, off, n, err);
    return rc ? rc : hy_tp_send_all(t->fd, src, n, "tcp transport", err);
}

static int tcp_done(hy_tp_sender *s, uint64_t xfer, uint64_t off, uint64_t bytes, hy_err *err)
{
    return hy_tp_send_frame(((tcp_sender *)s)->fd, HY_TP_DONE, xfer, off, bytes, err);
}

static void tcp_fail(hy_tp_sender *s, uint64_t xfer)
{
    hy_tp_send_frame(((tcp_sender *)s)->fd, HY_TP_FAIL, xfer, 0, 0, NULL);
}

static void tcp_free(hy_tp_sender *s)
{
    close(((tcp_sender *)s)->fd);
    free(s);
}

static const hy_tp_sender_ops tcp_ops = {tcp_write, tcp_done, tcp_fail, tcp_free};

int hy_tp_tcp_sender_new(int fd, uint64_t capacity, hy_tp_sender **out, hy_err *err)
{
    tcp_sender *t = calloc(1, sizeof *t);
    if (!t) {
        close(fd);
        return hy_err_set(err, HY_ENOMEM, "tcp transport: out of memory");
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    hy_tp_set_timeouts(fd, 30000, 0);
    t->base = (hy_tp_sender){&tcp_ops, HY_TP_TCP, capacity, false, fd};
    t->fd = fd;
    *out = &t->base;
    return 0;
}

static void tcp_release_buf(hy_tp_stream_rx *rx)
{
    if (rx->base.buf) munmap(rx->base.buf, rx->base.capacity);
}

int hy_tp_tcp_receiver_open(const char *host, int port, uint64_t id,
                            const uint8_t secret[HY_TP_SECRET_BYTES], uint64_t capacity,
                            hy_tp_receiver **out, hy_err *err)
{
    if (capacity == 0) return hy_err_set(err, HY_EINVAL, "tcp transport: a buffer of 0 bytes");
    char what[300], ports[16];
    snprintf(what, sizeof what, "tcp transport to %s:%d", host, port);
    snprintf(ports, sizeof ports, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, ports, &hints, &ai);
    if (g) return hy_err_set(err, HY_EIO, "%s: %s", what, gai_strerror(g));
    int fd = -1, e = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) return hy_err_set(err, HY_EIO, "%s: connect: %s", what, strerror(e ? e : errno));
    hy_tp_stream_rx *rx = calloc(1, sizeof *rx);
    if (!rx) {
        close(fd);
        return hy_err_set(err, HY_ENOMEM, "%s: out of memory", what);
    }
    hy_tp_ring_init(&rx->ring);
    rx->fd = fd;
    rx->data_allowed = true;
    rx->release_buf = tcp_release_buf;
    rx->base = (hy_tp_receiver){&hy_tp_stream_rx_ops, HY_TP_TCP, NULL, capacity, id};
    void *buf = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        rx_free(&rx->base);
        return hy_err_set(err, HY_ENOMEM, "%s: cannot map a %llu-byte buffer: %s", what,
                          (unsigned long long)capacity, strerror(errno));
    }
    rx->base.buf = buf;
    hy_tp_set_timeouts(fd, 10000, 10000);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = hy_tp_attach(fd, id, secret, -1, what, err);
    if (!rc) rc = hy_tp_stream_rx_start(rx, err);
    if (rc) {
        rx_free(&rx->base);
        return rc;
    }
    *out = &rx->base;
    return 0;
}
