/*
 * hypic-bench transfer: the bulk transports (transport/transport*.c) against the
 * copies they cannot beat, each ratio measured in the same run.
 *
 *   shm     a session of the daemon's hub over its Unix socket, as a client on
 *           the same host gets it: hy_tp_write (one memcpy into the client's
 *           memfd, mapped shared and populated), DONE, and the client's wait
 *           for it. The limit: memcpy of the same bytes between two buffers
 *           already faulted in (memory bandwidth).
 *   tcp     a session over the hub's data port on loopback: a DATA frame and
 *           the bytes sent from the source buffer, received by the client's
 *           reader thread straight into its buffer, DONE, the wait. The limit:
 *           a raw socket copy of the same bytes over a loopback TCP connection
 *           (send() of the whole buffer, recv(MSG_WAITALL) into the
 *           destination), which is what the kernel can move.
 *   rdma    with a device: the same through an RC queue pair; otherwise
 *           "rdma_available": false and the reason.
 *
 * Sizes 1, 16 and 64 MiB; each figure is the best of --reps timed passes
 * (default 7; --quick 3) after an untimed one, the transport and its limit
 * alternating pass by pass. Everything runs in this process (server side and
 * client side in their own threads, as they run in the daemon and a client).
 */
#include "bench.h"
#include "hy_common.h"
#include "hy_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#define NSIZES 3
static const uint64_t k_sizes[NSIZES] = {1u << 20, 16u << 20, 64u << 20};

static void *map_buf(uint64_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    memset(p, 1, n); /* faulted in, as a reused buffer is */
    return p;
}

/* ---- the raw socket copy ---- */

typedef struct raw_pair {
    int tx, rx;
    uint8_t *dst;
    uint64_t n;
    pthread_t th;
    int go, stop; /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double done_at;
} raw_pair;

static void *raw_reader(void *arg)
{
    raw_pair *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->go && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        int stop = p->stop;
        p->go = 0;
        pthread_mutex_unlock(&p->mu);
        if (stop) return NULL;
        uint64_t got = 0;
        while (got < p->n) {
            ssize_t k = recv(p->rx, p->dst + got, p->n - got, MSG_WAITALL);
            if (k <= 0) return NULL;
            got += (uint64_t)k;
        }
        pthread_mutex_lock(&p->mu);
        p->done_at = hy_now_s();
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static int raw_open(raw_pair *p, uint64_t max)
{
    memset(p, 0, sizeof *p);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) ||
        getsockname(l, (struct sockaddr *)&a, &al))
        return -1;
    p->tx = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(p->tx, (struct sockaddr *)&a, sizeof a)) return -1;
    p->rx = accept(l, NULL, NULL);
    close(l);
    setsockopt(p->tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    p->dst = map_buf(max);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    return p->rx >= 0 && p->dst && !pthread_create(&p->th, NULL, raw_reader, p) ? 0 : -1;
}

/* Seconds to move n bytes from src through the socket into dst. */
static double raw_copy(raw_pair *p, const uint8_t *src, uint64_t n)
{
    pthread_mutex_lock(&p->mu);
    p->n = n;
    p->done_at = 0;
    p->go = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    const double t0 = hy_now_s();
    for (uint64_t off = 0; off < n;) {
        ssize_t k = send(p->tx, src + off, n - off, MSG_NOSIGNAL);
        if (k <= 0) return -1;
        off += (uint64_t)k;
    }
    pthread_mutex_lock(&p->mu);
    while (p->done_at == 0) pthread_cond_wait(&p->cv, &p->mu);
    double t1 = p->done_at;
    pthread_mutex_unlock(&p->mu);
    return t1 - t0;
}

static void raw_close(raw_pair *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    shutdown(p->rx, SHUT_RDWR);
    pthread_join(p->th, NULL);
    close(p->tx);
    close(p->rx);
    munmap(p->dst, k_sizes[NSIZES - 1]);
}

/* ---- a transport session ---- */

typedef struct session {
    hy_tp_hub *hub;
    hy_tp_receiver *rx;
    uint64_t id;
} session;

static int session_open(session *s, hy_tp_hub *h, hy_tp_kind k, uint64_t cap, hy_err *e)
{
    hy_tp_offer o = {.kind = k, .capacity = cap};
    hy_tp_accept a;
    s->hub = h;
    int rc = hy_tp_hub_open(h, "bench", &o, 1, &a, e);
    if (rc) return rc;
    s->id = a.session;
    rc = k == HY_TP_TCP
             ? hy_tp_tcp_receiver_open("127.0.0.1", a.tcp_port, a.session, a.secret, cap, &s->rx, e)
             : hy_tp_shm_receiver_open(a.shm_path, a.session, a.secret, cap, &s->rx, e);
    if (!rc) memset(s->rx->buf, 1, cap); /* the client's buffer, faulted in */
    return rc;
}

/* Seconds for one transfer of n bytes: write, DONE, the client's wait. */
static double session_copy(session *s, const uint8_t *src, uint64_t n)
{
    hy_tp_sender *snd;
    uint64_t xfer;
    hy_err e = {0};
    const double t0 = hy_now_s();
    if (hy_tp_hub_acquire(s->hub, "bench", s->id, 1000, &snd, &xfer, &e)) goto fail;
    int rc = hy_tp_write(snd, xfer, 0, src, n, &e);
    if (!rc) rc = hy_tp_done(snd, xfer, 0, n, &e);
    hy_tp_hub_release(s->hub, s->id, snd, rc == 0, n);
    if (rc || hy_tp_wait(s->rx, xfer, 10000, NULL, NULL, &e)) goto fail;
    return hy_now_s() - t0;
fail:
    fprintf(stderr, "transfer: %s\n", e.msg);
    return -1;
}

static double gbs(uint64_t n, double s)
{
    return s > 0 ? (double)n / s / 1e9 : 0;
}

int hy_bench_transfer(int argc, char **argv)
{
    int reps = 7;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            reps = 3;
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: hypic-bench transfer [--quick] [--reps N]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    const uint64_t max = k_sizes[NSIZES - 1];
    char sock[108];
    snprintf(sock, sizeof sock, "/tmp/hypic-bench-transfer-%d.sock", (int)getpid());
    hy_tp_hub_config hc = {.tcp_address = "127.0.0.1:0", .shm_path = sock, .rdma = HY_TP_RDMA_AUTO};
    hy_tp_hub *hub = NULL;
    hy_err e = {0};
    if (hy_tp_hub_start(&hc, &hub, &e)) {
        fprintf(stderr, "hypic-bench transfer: %s\n", e.msg);
        return 1;
    }
    hy_tp_stats hs;
    hy_tp_hub_stats(hub, &hs);
    uint8_t *src = map_buf(max), *dst = map_buf(max);
    for (uint64_t i = 0; i < max; i += 8) {
        uint64_t v = i * 0x9e3779b97f4a7c15ull;
        memcpy(src + i, &v, 8);
    }
    session shm = {0}, tcp = {0};
    raw_pair raw;
    if (!src || !dst || session_open(&shm, hub, HY_TP_SHM, max, &e) ||
        session_open(&tcp, hub, HY_TP_TCP, max, &e) || raw_open(&raw, max)) {
        fprintf(stderr, "hypic-bench transfer: setting up: %s\n", e.msg[0] ? e.msg : "sockets");
        hy_tp_hub_stop(hub);
        return 1;
    }
    printf("hypic-bench transfer: %d timed passes per figure (best), after one untimed\n", reps);
    printf("%8s %12s %12s %8s %14s %12s %8s\n", "size", "memcpy GB/s", "shm GB/s", "shm/mc",
           "raw sock GB/s", "tcp GB/s", "tcp/raw");
    double r_mc[NSIZES], r_shm[NSIZES], r_raw[NSIZES], r_tcp[NSIZES];
    bool ok = true;
    for (int z = 0; z < NSIZES; z++) {
        const uint64_t n = k_sizes[z];
        double b_mc = 1e9, b_shm = 1e9, b_raw = 1e9, b_tcp = 1e9;
        for (int rep = 0; rep <= reps; rep++) {
            double t0 = hy_now_s();
            memcpy(dst, src, n);
            double t_mc = hy_now_s() - t0;
            double t_shm = session_copy(&shm, src, n);
            double t_raw = raw_copy(&raw, src, n);
            double t_tcp = session_copy(&tcp, src, n);
            if (t_shm < 0 || t_raw < 0 || t_tcp < 0) ok = false;
            if (rep == 0) continue; /* untimed */
            b_mc = HY_MIN(b_mc, t_mc), b_shm = HY_MIN(b_shm, t_shm);
            b_raw = HY_MIN(b_raw, t_raw), b_tcp = HY_MIN(b_tcp, t_tcp);
        }
        if (memcmp(shm.rx->buf, src, n) || memcmp(tcp.rx->buf, src, n)) {
            fprintf(stderr, "hypic-bench transfer: the delivered bytes differ from the source\n");
            ok = false;
        }
        r_mc[z] = gbs(n, b_mc), r_shm[z] = gbs(n, b_shm);
        r_raw[z] = gbs(n, b_raw), r_tcp[z] = gbs(n, b_tcp);
        printf("%6lluMi %12.2f %12.2f %8.2f %14.2f %12.2f %8.2f\n", (unsigned long long)(n >> 20),
               r_mc[z], r_shm[z], r_shm[z] / r_mc[z], r_raw[z], r_tcp[z], r_tcp[z] / r_raw[z]);
    }
    printf("limits: memcpy between faulted-in buffers (memory bandwidth) for shm; a raw loopback "
           "TCP copy (the kernel's) for tcp\n");
    printf("rdma: %s\n", hs.rdma_why);
    for (char *q = hs.rdma_why; *q; q++) /* into the JSON string as it is */
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '\'';
    if (hs.rdma_available)
        printf("  (a device exists, but this benchmark has no RDMA client path yet: not timed)\n");
    printf("{\"bench\":\"transfer\",\"reps\":%d,\"sizes_mib\":[1,16,64],\"memcpy_gbs\":[%.3f,%.3f,"
           "%.3f],\"shm_gbs\":[%.3f,%.3f,%.3f],\"raw_socket_gbs\":[%.3f,%.3f,%.3f],\"tcp_gbs\":[%."
           "3f,%.3f,%.3f],\"shm_over_memcpy_64m\":%.3f,\"tcp_over_raw_socket_64m\":%.3f,"
           "\"rdma_available\":%s,\"rdma_why\":\"%s\",\"ok\":%s}\n",
           reps, r_mc[0], r_mc[1], r_mc[2], r_shm[0], r_shm[1], r_shm[2], r_raw[0], r_raw[1],
           r_raw[2], r_tcp[0], r_tcp[1], r_tcp[2], r_shm[2] / r_mc[2], r_tcp[2] / r_raw[2],
           hs.rdma_available ? "true" : "false", hs.rdma_why, ok ? "true" : "false");
    hy_tp_receiver_free(shm.rx);
    hy_tp_receiver_free(tcp.rx);
    raw_close(&raw);
    hy_tp_hub_stop(hub);
    munmap(src, max);
    munmap(dst, max);
    return ok ? 0 : 1;
}
