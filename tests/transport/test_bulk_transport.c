/*
 * The bulk transports above the verbs (transport/transport*.c): the frames; the
 * hub's choice among offers (RDMA passed over and counted as a fallback when
 * there is no device, shm when it is off, every refusal naming its field);
 * TCP and shared-memory sessions end to end in one process — regions written
 * at their offsets, DONE as the fence, the transfer ids, FAIL reaching the
 * client as a failure — and what must not happen: another tenant using a
 * session, a wrong secret attaching, a write outside the buffer, a session
 * that outlives its client's connection, an unattached session held forever.
 */
#include "hy_transport.h"
#include "test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_sock[108];

static hy_tp_hub *hub_new(hy_tp_rdma_mode rdma, const char *shm, uint32_t attach_ms)
{
    hy_tp_hub_config c = {.tcp_address = "127.0.0.1:0",
                          .shm_path = shm,
                          .rdma = rdma,
                          .max_sessions = 4,
                          .max_buffer = 64u << 20,
                          .attach_timeout_ms = attach_ms};
    hy_tp_hub *h = NULL;
    hy_err e = {0};
    int rc = hy_tp_hub_start(&c, &h, &e);
    if (rc) printf("\n  hub: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return h;
}

static hy_tp_offer offer(hy_tp_kind k, uint64_t cap)
{
    hy_tp_offer o = {.kind = k, .capacity = cap};
    if (k == HY_TP_RDMA)
        o.rdma = (hy_tp_rdma_peer){
            .qpn = 0x11, .psn = 0x22, .mtu = 1024, .addr = 0x1000, .rkey = 7, .bytes = cap};
    return o;
}

/* Opens a session of kind k and attaches a receiver to it. */
static hy_tp_receiver *connect_kind(hy_tp_hub *h, const char *tenant, hy_tp_kind k, uint64_t cap,
                                    uint64_t *id)
{
    hy_tp_offer o = offer(k, cap);
    hy_tp_accept a;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_tp_hub_open(h, tenant, &o, 1, &a, &e), 0);
    CU_ASSERT_EQUAL(a.kind, k);
    hy_tp_receiver *r = NULL;
    int rc = k == HY_TP_TCP ? hy_tp_tcp_receiver_open("127.0.0.1", a.tcp_port, a.session, a.secret,
                                                      cap, &r, &e)
                            : hy_tp_shm_receiver_open(a.shm_path, a.session, a.secret, cap, &r, &e);
    if (rc) printf("\n  attach: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    *id = a.session;
    return r;
}

static void test_frames(void)
{
    uint8_t b[HY_TP_FRAME_BYTES], secret[HY_TP_SECRET_BYTES], back[HY_TP_SECRET_BYTES];
    hy_tp_frame f = {HY_TP_DATA, 7, 1ull << 40, 123456789}, g;
    hy_err e = {0};
    hy_tp_frame_pack(&f, b);
    CU_ASSERT(memcmp(b, "HYTP", 4) == 0); /* the magic reads as text on the wire */
    CU_ASSERT_EQUAL(hy_tp_frame_unpack(b, &g, &e), 0);
    CU_ASSERT(g.type == f.type && g.xfer == 7 && g.offset == 1ull << 40 && g.length == 123456789);
    b[0] ^= 1;
    CU_ASSERT_EQUAL(hy_tp_frame_unpack(b, &g, &e), HY_EFORMAT);
    CU_ASSERT(strstr(e.msg, "magic") != NULL);
    f.type = 9;
    hy_tp_frame_pack(&f, b);
    CU_ASSERT_EQUAL(hy_tp_frame_unpack(b, &g, &e), HY_EFORMAT);
    CU_ASSERT(strstr(e.msg, "type 9") != NULL);
    for (int i = 0; i < HY_TP_SECRET_BYTES; i++) secret[i] = (uint8_t)(i * 37 + 1);
    uint64_t id = 0;
    hy_tp_hello_pack(42, secret, b);
    CU_ASSERT_EQUAL(hy_tp_hello_unpack(b, &id, back, &e), 0);
    CU_ASSERT(id == 42 && memcmp(secret, back, sizeof back) == 0);
    f.type = HY_TP_DONE;
    hy_tp_frame_pack(&f, b);
    CU_ASSERT_EQUAL(hy_tp_hello_unpack(b, &id, back, &e), HY_EFORMAT);
    CU_ASSERT_STRING_EQUAL(hy_tp_kind_name(HY_TP_SHM), "shm");
    CU_ASSERT_EQUAL(hy_tp_kind_parse("rdma"), HY_TP_RDMA);
    CU_ASSERT_EQUAL(hy_tp_kind_parse("udp"), HY_TP_NONE);
}

/* Three regions, DONE, and the bytes where they belong; then a second
 * transfer on the same session. */
static void roundtrip(hy_tp_kind k)
{
    hy_tp_hub *h = hub_new(HY_TP_RDMA_OFF, g_sock, 0);
    uint64_t id, cap = 3u << 20, xfer = 0, xfer2 = 0, off = 9, bytes = 0;
    hy_tp_receiver *r = connect_kind(h, "t1", k, cap, &id);
    uint8_t *src = malloc(cap);
    for (uint64_t i = 0; i < cap; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
    hy_tp_sender *s = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_tp_hub_acquire(h, "t1", id, 1000, &s, &xfer, &e), 0);
    CU_ASSERT_EQUAL(s->kind, k);
    CU_ASSERT_EQUAL(hy_tp_write(s, xfer, 4096, src + 4096, 2u << 20, &e), 0); /* out of order */
    CU_ASSERT_EQUAL(hy_tp_write(s, xfer, 0, src, 4096, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_write(s, xfer, 4096 + (2u << 20), src + 4096 + (2u << 20),
                                cap - 4096 - (2u << 20), &e),
                    0);
    /* outside the buffer: refused before anything moves, the session stays */
    CU_ASSERT_EQUAL(hy_tp_write(s, xfer, cap - 10, src, 11, &e), HY_ERANGE);
    CU_ASSERT(strstr(e.msg, "exceed") != NULL && !s->broken);
    CU_ASSERT_EQUAL(hy_tp_done(s, xfer, 0, cap, &e), 0);
    hy_tp_hub_release(h, id, s, true, cap);
    CU_ASSERT_EQUAL(hy_tp_wait(r, xfer, 5000, &off, &bytes, &e), 0);
    CU_ASSERT(off == 0 && bytes == cap);
    CU_ASSERT(memcmp(r->buf, src, cap) == 0);

    CU_ASSERT_EQUAL_FATAL(hy_tp_hub_acquire(h, "t1", id, 1000, &s, &xfer2, &e), 0);
    CU_ASSERT(xfer2 == xfer + 1);
    memset(src, 0xab, 100);
    CU_ASSERT_EQUAL(hy_tp_write(s, xfer2, 1000, src, 100, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_done(s, xfer2, 1000, 100, &e), 0);
    hy_tp_hub_release(h, id, s, true, 100);
    CU_ASSERT_EQUAL(hy_tp_wait(r, xfer2, 5000, &off, &bytes, &e), 0);
    CU_ASSERT(off == 1000 && bytes == 100 && r->buf[1000] == 0xab && r->buf[1099] == 0xab);
    /* the earlier completion is still known */
    CU_ASSERT_EQUAL(hy_tp_wait(r, xfer, 0, &off, &bytes, &e), 0);

    hy_tp_stats st;
    hy_tp_hub_stats(h, &st);
    CU_ASSERT(st.opened[k] == 1 && st.transfers[k] == 2 && st.bytes[k] == cap + 100);
    CU_ASSERT(st.open_sessions == 1 && st.failures[k] == 0);
    hy_tp_receiver_free(r);
    hy_tp_hub_stop(h);
    free(src);
}

static void test_tcp_roundtrip(void)
{
    roundtrip(HY_TP_TCP);
}
static void test_shm_roundtrip(void)
{
    roundtrip(HY_TP_SHM);
}

/* FAIL reaches the client as a failed transfer; a transfer never signalled
 * times out; the session goes on. */
static void test_fail_and_timeout(void)
{
    hy_tp_hub *h = hub_new(HY_TP_RDMA_OFF, g_sock, 0);
    for (int k = HY_TP_TCP; k <= HY_TP_SHM; k++) {
        uint64_t id, xfer, xfer2;
        hy_tp_receiver *r = connect_kind(h, "t1", (hy_tp_kind)k, 1 << 16, &id);
        hy_tp_sender *s;
        hy_err e = {0};
        CU_ASSERT_EQUAL_FATAL(hy_tp_hub_acquire(h, "t1", id, 1000, &s, &xfer, &e), 0);
        CU_ASSERT_EQUAL(hy_tp_write(s, xfer, 0, "abc", 3, &e), 0);
        hy_tp_fail(s, xfer);
        hy_tp_hub_release(h, id, s, false, 0);
        CU_ASSERT_EQUAL(hy_tp_wait(r, xfer, 5000, NULL, NULL, &e), HY_EIO);
        CU_ASSERT(strstr(e.msg, "failed") != NULL);
        CU_ASSERT_EQUAL_FATAL(hy_tp_hub_acquire(h, "t1", id, 1000, &s, &xfer2, &e), 0);
        hy_tp_hub_release(h, id, s, true, 0);
        CU_ASSERT_EQUAL(hy_tp_wait(r, xfer2, 50, NULL, NULL, &e), HY_ERANGE);
        CU_ASSERT(strstr(e.msg, "not complete after 50 ms") != NULL);
        hy_tp_receiver_free(r);
    }
    hy_tp_stats st;
    hy_tp_hub_stats(h, &st);
    CU_ASSERT(st.failures[HY_TP_TCP] == 1 && st.failures[HY_TP_SHM] == 1);
    hy_tp_hub_stop(h);
}

/* Offers: RDMA without a device is passed over (a fallback, counted, and
 * said why); shm when off; refusals name the offer and the limit. */
static void test_offers(void)
{
    hy_tp_hub *h = hub_new(HY_TP_RDMA_AUTO, "", 0);
    hy_tp_stats st;
    hy_tp_hub_stats(h, &st);
    if (st.rdma_available) {
        printf("\n  (this machine has an RDMA device, %s: the fallback cases do not apply)\n",
               st.rdma_why);
        hy_tp_hub_stop(h);
        return;
    }
    CU_ASSERT(strstr(st.rdma_why, "RDMA") != NULL || strstr(st.rdma_why, "rdma") != NULL);
    hy_tp_offer o[3] = {offer(HY_TP_RDMA, 1 << 20), offer(HY_TP_SHM, 1 << 20),
                        offer(HY_TP_TCP, 1 << 20)};
    hy_tp_accept a;
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", o, 3, &a, &e), 0);
    CU_ASSERT_EQUAL(a.kind, HY_TP_TCP);
    CU_ASSERT(strstr(a.passed_over, "rdma (") != NULL);
    CU_ASSERT(strstr(a.passed_over, "shm (off") != NULL);
    CU_ASSERT(a.tcp_port > 0 && a.session > 0);
    hy_tp_hub_stats(h, &st);
    CU_ASSERT_EQUAL(st.fallbacks, 1);
    CU_ASSERT_EQUAL(st.opened[HY_TP_TCP], 1);
    /* RDMA alone cannot be served here */
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", o, 1, &a, &e), HY_EUNSUPPORTED);
    CU_ASSERT(strstr(e.msg, "no offered transport") != NULL && strstr(e.msg, "rdma") != NULL);
    /* bad offers */
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", o, 0, &a, &e), HY_EINVAL);
    hy_tp_offer twice[2] = {offer(HY_TP_TCP, 10), offer(HY_TP_TCP, 10)};
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", twice, 2, &a, &e), HY_EINVAL);
    CU_ASSERT(strstr(e.msg, "offers[1]") != NULL && strstr(e.msg, "twice") != NULL);
    hy_tp_offer big = offer(HY_TP_TCP, 65u << 20);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &big, 1, &a, &e), HY_ERANGE);
    CU_ASSERT(strstr(e.msg, "max_buffer") != NULL);
    hy_tp_offer zero = offer(HY_TP_TCP, 0);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &zero, 1, &a, &e), HY_EINVAL);
    hy_tp_offer badq = offer(HY_TP_RDMA, 100);
    badq.rdma.psn = 1u << 24;
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &badq, 1, &a, &e), HY_EINVAL);
    CU_ASSERT(strstr(e.msg, "offers[0].rdma") != NULL && strstr(e.msg, "psn") != NULL);
    /* the session limit (4), then room again after a close */
    hy_tp_offer t = offer(HY_TP_TCP, 10);
    uint64_t last = 0;
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &t, 1, &a, &e), 0);
        last = a.session;
    }
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &t, 1, &a, &e), HY_ERANGE);
    CU_ASSERT(strstr(e.msg, "max_sessions") != NULL);
    CU_ASSERT_EQUAL(hy_tp_hub_close(h, "t2", last, &e), HY_ENOTFOUND); /* not t2's */
    CU_ASSERT_EQUAL(hy_tp_hub_close(h, "t1", last, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &t, 1, &a, &e), 0);
    /* other members' sessions count apart from the clients' */
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(hy_tp_hub_open(h, HY_TP_PEER_PREFIX "t1", &t, 1, &a, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, HY_TP_PEER_PREFIX "t2", &t, 1, &a, &e), HY_ERANGE);
    CU_ASSERT(strstr(e.msg, "other members") != NULL);
    CU_ASSERT_EQUAL(hy_tp_hub_close(h, "t1", a.session, &e), HY_ENOTFOUND); /* not the client's */
    hy_tp_hub_stop(h);

    /* a tenant's own cap, below the hub's */
    hy_tp_hub_config tc = {
        .tcp_address = "127.0.0.1:0", .max_sessions = 8, .tenant_sessions = 2, .tenant_bytes = 100};
    CU_ASSERT_EQUAL_FATAL(hy_tp_hub_start(&tc, &h, &e), 0);
    hy_tp_offer t60 = offer(HY_TP_TCP, 60);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &t, 1, &a, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &t60, 1, &a, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &t, 1, &a, &e), HY_ERANGE); /* sessions_per_tenant */
    CU_ASSERT(strstr(e.msg, "sessions_per_tenant") != NULL);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t2", &t60, 1, &a, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t2", &t60, 1, &a, &e), HY_ERANGE); /* tenant_bytes */
    CU_ASSERT(strstr(e.msg, "tenant_bytes") != NULL);
    hy_tp_hub_stop(h);

    /* required without a device: the daemon does not start */
    hy_tp_hub_config c = {.rdma = HY_TP_RDMA_REQUIRED};
    hy_tp_hub *h2 = NULL;
    CU_ASSERT_EQUAL(hy_tp_hub_start(&c, &h2, &e), HY_ENOTFOUND);
    CU_ASSERT(strstr(e.msg, "transport.rdma is required") != NULL);
    CU_ASSERT(h2 == NULL);
}

/* Connections that send no HELLO hold only their own attach thread: with
 * eight of them open and silent, another client attaches at once (the
 * listener read each HELLO itself before, 5 s per silent connection). */
static void test_silent_connections(void)
{
    hy_tp_hub *h = hub_new(HY_TP_RDMA_OFF, NULL, 10000);
    hy_tp_stats st;
    hy_tp_hub_stats(h, &st);
    int silent[8];
    for (int i = 0; i < 8; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)st.tcp_port)};
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        silent[i] = socket(AF_INET, SOCK_STREAM, 0);
        CU_ASSERT_EQUAL(connect(silent[i], (struct sockaddr *)&a, sizeof a), 0);
    }
    usleep(50000);
    const long long t0 = hy_test_now_ms();
    uint64_t id;
    hy_tp_receiver *r = connect_kind(h, "t1", HY_TP_TCP, 4096, &id);
    const long long ms = hy_test_now_ms() - t0;
    printf("\n  attached in %lld ms beside 8 silent connections\n", ms);
    CU_ASSERT(ms < 1000);
    hy_tp_receiver_free(r);
    for (int i = 0; i < 8; i++) close(silent[i]);
    hy_tp_hub_stop(h);
}

/* What must not work: another tenant's session, a wrong secret, an
 * unattached session past its timeout, a session whose client is gone. */
static void test_refusals(void)
{
    hy_tp_hub *h = hub_new(HY_TP_RDMA_OFF, g_sock, 300);
    hy_tp_offer o = offer(HY_TP_TCP, 1 << 20);
    hy_tp_accept a;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_tp_hub_open(h, "t1", &o, 1, &a, &e), 0);
    hy_tp_receiver *r = NULL;
    uint8_t wrong[HY_TP_SECRET_BYTES];
    memcpy(wrong, a.secret, sizeof wrong);
    wrong[3] ^= 0x40;
    CU_ASSERT_EQUAL(
        hy_tp_tcp_receiver_open("127.0.0.1", a.tcp_port, a.session, wrong, 1 << 20, &r, &e),
        HY_EINVAL);
    CU_ASSERT(strstr(e.msg, "refused") != NULL);
    hy_tp_sender *s;
    uint64_t xfer;
    /* never attached: acquire gives up after the attach timeout */
    uint64_t t0 = hy_now_ns();
    CU_ASSERT_EQUAL(hy_tp_hub_acquire(h, "t1", a.session, 1000, &s, &xfer, &e), HY_ERANGE);
    CU_ASSERT(strstr(e.msg, "not attached") != NULL);
    CU_ASSERT(hy_now_ns() - t0 < 2000000000u);
    /* and the next open sweeps it away */
    hy_tp_stats st;
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &o, 1, &a, &e), 0);
    hy_tp_hub_stats(h, &st);
    CU_ASSERT_EQUAL(st.open_sessions, 1);
    CU_ASSERT_EQUAL(
        hy_tp_tcp_receiver_open("127.0.0.1", a.tcp_port, a.session, a.secret, 1 << 20, &r, &e), 0);
    /* a second attach to the same session is refused */
    hy_tp_receiver *r2 = NULL;
    CU_ASSERT_EQUAL(
        hy_tp_tcp_receiver_open("127.0.0.1", a.tcp_port, a.session, a.secret, 1 << 20, &r2, &e),
        HY_EINVAL);
    /* another tenant does not find it */
    CU_ASSERT_EQUAL(hy_tp_hub_acquire(h, "t2", a.session, 100, &s, &xfer, &e), HY_ENOTFOUND);
    /* the client goes: writes fail, the session ends */
    hy_tp_receiver_free(r);
    CU_ASSERT_EQUAL_FATAL(hy_tp_hub_acquire(h, "t1", a.session, 1000, &s, &xfer, &e), 0);
    static uint8_t chunk[256 << 10];
    int rc = 0;
    for (int i = 0; i < 64 && !rc; i++) rc = hy_tp_write(s, xfer, 0, chunk, sizeof chunk, &e);
    CU_ASSERT_EQUAL(rc, HY_EIO);
    CU_ASSERT(s->broken);
    hy_tp_hub_release(h, a.session, s, false, 0);
    CU_ASSERT_EQUAL(hy_tp_hub_acquire(h, "t1", a.session, 100, &s, &xfer, &e), HY_ENOTFOUND);
    hy_tp_hub_stats(h, &st);
    CU_ASSERT_EQUAL(st.open_sessions, 0);
    /* a shm attach with a session of another kind is refused */
    CU_ASSERT_EQUAL(hy_tp_hub_open(h, "t1", &o, 1, &a, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_shm_receiver_open(g_sock, a.session, a.secret, 1 << 20, &r, &e),
                    HY_EINVAL);
    hy_tp_hub_stop(h);
}

int main(void)
{
    snprintf(g_sock, sizeof g_sock, "/tmp/hypic-tp-test-%d.sock", (int)getpid());
    static const hy_test_case cases[] = {
        {"frames", test_frames},
        {"tcp: regions at their offsets, DONE, ids", test_tcp_roundtrip},
        {"shm: regions in place, DONE, ids", test_shm_roundtrip},
        {"FAIL and a timed-out wait", test_fail_and_timeout},
        {"offers: fallback, limits, refusals", test_offers},
        {"tenant, secret, attach timeout, client gone", test_refusals},
        {"silent connections do not hold the attaches", test_silent_connections},
        {NULL, NULL},
    };
    int rc = hy_test_main("bulk_transport", cases);
    unlink(g_sock);
    return rc;
}
