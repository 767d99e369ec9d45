/*
 * The RDMA transport (transport/transport_rdma.c). Everywhere: the peer check
 * accepts well-formed peers of both sides and refuses each bad field with a
 * message naming it and its limit; opening a device that is not there is
 * HY_ENOTFOUND saying why, a port out of range HY_EINVAL. Without an RDMA
 * device the program prints "SKIPPED: no RDMA device (<why>)", checks that
 * hy_tp_rdma_open refuses with HY_ENOTFOUND and that reason, and ctest
 * reports the test as skipped. With one (soft-RoCE is enough: `rdma link add
 * rxe0 type rxe netdev eth0`), a receiver and a sender in this process over
 * the same device: three regions, one larger than the sender's whole staging
 * area, land byte for byte and nothing else is touched; a second transfer on
 * the session works and the first stays remembered; a failed transfer is
 * HY_EIO on wait; waiting for a transfer never sent times out with HY_ERANGE;
 * ids beyond 31 bits are refused; a wrong rkey makes the sender's write or
 * done HY_EIO and leaves the session broken.
 */
#include "hy_transport.h"
#include "test_util.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static char g_why[512];
static hy_tp_rdma *g_dev;

/* ---- the peer check (no device needed) ---- */

static hy_tp_rdma_peer good_client(void)
{
    hy_tp_rdma_peer p = {.qpn = 0x123,
                         .psn = 0xabcdef,
                         .lid = 0,
                         .mtu = 1024,
                         .addr = 0x7f0000001000ull,
                         .rkey = 0x4242,
                         .bytes = 64 * MiB};
    p.gid[10] = p.gid[11] = 0xff;
    p.gid[12] = 10, p.gid[15] = 1;
    return p;
}

static hy_tp_rdma_peer good_server(void)
{
    hy_tp_rdma_peer p = good_client();
    p.addr = 0, p.rkey = 0, p.bytes = 0;
    return p;
}

static void test_peer_accepts_good(void)
{
    hy_err e = {0};
    hy_tp_rdma_peer c = good_client(), s = good_server();
    CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&c, true, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&s, false, &e), 0);
    const uint32_t mtus[] = {256, 512, 1024, 2048, 4096};
    for (int i = 0; i < 5; i++) {
        c.mtu = mtus[i];
        CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&c, true, &e), 0);
    }
    c = good_client();
    c.qpn = 0xffffff, c.psn = 0xffffff; /* the 24-bit limits */
    CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&c, true, &e), 0);
    c.psn = 0;
    CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&c, true, &e), 0);
}

/* One field of a peer set to a bad value, and what the check must say. */
typedef enum field { QPN, PSN, MTU, ADDR, RKEY, BYTES } field;
typedef struct bad_peer {
    bool as_client;
    field f;
    uint64_t v;
    const char *says;
} bad_peer;

static void set_field(hy_tp_rdma_peer *p, field f, uint64_t v)
{
    switch (f) {
    case QPN:
        p->qpn = (uint32_t)v;
        break;
    case PSN:
        p->psn = (uint32_t)v;
        break;
    case MTU:
        p->mtu = (uint32_t)v;
        break;
    case ADDR:
        p->addr = v;
        break;
    case RKEY:
        p->rkey = (uint32_t)v;
        break;
    case BYTES:
        p->bytes = v;
        break;
    }
}

static void test_peer_refuses_each_field(void)
{
    const bad_peer cases[] = {
        {true, QPN, 0, "rdma peer: qpn 0 is not a queue pair number"},
        {true, QPN, 0x1000000, "rdma peer: qpn 0x1000000 exceeds 24 bits"},
        {false, QPN, 0x1000000, "rdma peer: qpn 0x1000000 exceeds 24 bits"},
        {true, PSN, 0x1000000, "rdma peer: psn 0x1000000 exceeds 24 bits"},
        {false, PSN, 0xffffffff, "rdma peer: psn 0xffffffff exceeds 24 bits"},
        {true, MTU, 0, "rdma peer: mtu 0 is not one of 256, 512, 1024, 2048, 4096"},
        {true, MTU, 1500, "rdma peer: mtu 1500 is not one of"},
        {false, MTU, 8192, "rdma peer: mtu 8192 is not one of"},
        {true, ADDR, 0, "rdma peer: addr is 0"},
        {true, RKEY, 0, "rdma peer: rkey is 0"},
        {true, BYTES, 0, "rdma peer: bytes is 0"},
        {true, ADDR, UINT64_MAX - 10, "exceeds 64 bits"},
        {false, ADDR, 0x1000, "rdma peer: addr 0x1000 must be 0 on the server"},
        {false, RKEY, 7, "rdma peer: rkey 0x7 must be 0 on the server"},
        {false, BYTES, 1, "rdma peer: bytes 1 must be 0 on the server"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hy_tp_rdma_peer p = cases[i].as_client ? good_client() : good_server();
        set_field(&p, cases[i].f, cases[i].v);
        hy_err e = {0};
        CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&p, cases[i].as_client, &e), HY_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, cases[i].says));
        if (!strstr(e.msg, cases[i].says))
            printf("\n    case %zu: \"%s\", want \"%s\"\n", i, e.msg, cases[i].says);
    }
    /* A client's peer is not a server's, and the other way round. */
    hy_err e = {0};
    hy_tp_rdma_peer c = good_client(), s = good_server();
    CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&c, false, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(&s, true, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_tp_rdma_peer_check(NULL, true, &e), HY_EINVAL);
}

/* ---- opening (any machine) ---- */

static void test_open_unknown_device(void)
{
    hy_err e = {0};
    hy_tp_rdma *d = (hy_tp_rdma *)1;
    CU_ASSERT_EQUAL(hy_tp_rdma_open("no_such_hca9", 1, -1, &d, &e), HY_ENOTFOUND);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "no RDMA device"));
    e = (hy_err){0};
    CU_ASSERT_EQUAL(hy_tp_rdma_open(NULL, 256, -1, &d, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "port 256"));
}

/* Without a device: the same refusal as main() saw, and no handle. */
static void test_open_says_why(void)
{
    hy_err e = {0};
    hy_tp_rdma *d = (hy_tp_rdma *)1;
    CU_ASSERT_EQUAL(hy_tp_rdma_open(NULL, 0, -1, &d, &e), HY_ENOTFOUND);
    CU_ASSERT_PTR_NULL(d);
    CU_ASSERT_STRING_EQUAL(e.msg, g_why);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "RDMA device"));
}

static void test_skipped_no_rdma_device(void)
{
    CU_PASS("no RDMA device");
}

/* ---- loopback (a device) ---- */

typedef struct pair {
    uint8_t *buf;
    size_t cap;
    hy_tp_receiver *r;
    hy_tp_sender *s;
} pair;

/* A receiver over a zeroed buffer and a sender connected to it; rkey_xor
 * spoils the key the sender is given. */
static int pair_open(pair *p, size_t cap, uint32_t rkey_xor)
{
    memset(p, 0, sizeof *p);
    p->cap = cap;
    p->buf = aligned_alloc(4096, cap);
    if (!p->buf) return -1;
    memset(p->buf, 0, cap);
    hy_err e = {0};
    hy_tp_rdma_peer cself, sself;
    int rc = hy_tp_rdma_receiver_new(g_dev, p->buf, cap, false, &cself, &p->r, &e);
    if (!rc) {
        CU_ASSERT_EQUAL(cself.addr, (uintptr_t)p->buf);
        CU_ASSERT_EQUAL(cself.bytes, cap);
        cself.rkey ^= rkey_xor;
        rc = hy_tp_rdma_sender_new(g_dev, &cself, &sself, &p->s, &e);
    }
    if (!rc) {
        CU_ASSERT_EQUAL(p->s->capacity, cap);
        CU_ASSERT_EQUAL(sself.addr, 0);
        rc = hy_tp_rdma_receiver_connect(p->r, &sself, &e);
    }
    if (rc) printf("\n    loopback pair: %s\n", e.msg);
    return rc;
}

static void pair_close(pair *p)
{
    hy_tp_sender_free(p->s);
    hy_tp_receiver_free(p->r);
    free(p->buf);
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((i * 2654435761u + seed) >> 13);
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

static void test_loopback_regions(void)
{
    pair p;
    if (pair_open(&p, 16 * MiB, 0)) {
        CU_FAIL("no loopback pair");
        pair_close(&p);
        return;
    }
    /* offsets, lengths: a small one, 1 MiB, and one beyond 2 x 4 MiB of staging */
    const size_t off[3] = {100, 4096, 3 * MiB}, len[3] = {77, MiB, 9 * MiB + 123};
    uint8_t *src[3];
    hy_err e = {0};
    for (int i = 0; i < 3; i++) {
        src[i] = malloc(len[i]);
        fill(src[i], len[i], (uint32_t)i + 1);
        CU_ASSERT_EQUAL(hy_tp_write(p.s, 7, off[i], src[i], len[i], &e), 0);
    }
    CU_ASSERT_EQUAL(hy_tp_done(p.s, 7, 0, 3 * MiB + len[2], &e), 0);
    uint64_t o = 1, b = 1;
    CU_ASSERT_EQUAL(hy_tp_wait(p.r, 7, 5000, &o, &b, &e), 0);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(memcmp(p.buf + off[i], src[i], len[i]), 0);
    CU_ASSERT(all_zero(p.buf, off[0]));
    CU_ASSERT(all_zero(p.buf + off[0] + len[0], off[1] - off[0] - len[0]));
    CU_ASSERT(all_zero(p.buf + off[1] + len[1], off[2] - off[1] - len[1]));
    CU_ASSERT(all_zero(p.buf + off[2] + len[2], p.cap - off[2] - len[2]));
    /* a second transfer on the session; the first is still remembered */
    CU_ASSERT_EQUAL(hy_tp_write(p.s, 8, 0, src[2], 5000, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_done(p.s, 8, 0, 5000, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_wait(p.r, 8, 5000, NULL, NULL, &e), 0);
    CU_ASSERT_EQUAL(memcmp(p.buf, src[2], 5000), 0);
    CU_ASSERT_EQUAL(hy_tp_wait(p.r, 7, 0, NULL, NULL, &e), 0);
    CU_ASSERT_FALSE(p.s->broken);
    for (int i = 0; i < 3; i++) free(src[i]);
    pair_close(&p);
}

static void test_loopback_fail_and_timeout(void)
{
    pair p;
    if (pair_open(&p, MiB, 0)) {
        CU_FAIL("no loopback pair");
        pair_close(&p);
        return;
    }
    hy_err e = {0};
    uint8_t x[4096];
    fill(x, sizeof x, 9);
    CU_ASSERT_EQUAL(hy_tp_write(p.s, 9, 0, x, sizeof x, &e), 0);
    hy_tp_fail(p.s, 9);
    CU_ASSERT_FALSE(p.s->broken);
    CU_ASSERT_EQUAL(hy_tp_wait(p.r, 9, 5000, NULL, NULL, &e), HY_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "transfer 9 failed"));
    /* never sent: the wait runs out */
    e = (hy_err){0};
    CU_ASSERT_EQUAL(hy_tp_wait(p.r, 1234, 50, NULL, NULL, &e), HY_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "1234"));
    /* ids beyond 31 bits: refused on both sides, and the session goes on */
    CU_ASSERT_EQUAL(hy_tp_wait(p.r, 1ull << 31, 0, NULL, NULL, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(p.s->ops->done(p.s, 1ull << 31, 0, 0, &e), HY_ERANGE);
    CU_ASSERT_EQUAL(hy_tp_done(p.s, 10, 0, 0, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_wait(p.r, 10, 5000, NULL, NULL, &e), 0);
    pair_close(&p);
}

static void test_loopback_bad_rkey_breaks(void)
{
    pair p;
    if (pair_open(&p, MiB, 0x5a5a5a5a)) {
        CU_FAIL("no loopback pair");
        pair_close(&p);
        return;
    }
    hy_err e = {0};
    uint8_t x[4096];
    fill(x, sizeof x, 3);
    int rc = hy_tp_write(p.s, 11, 0, x, sizeof x, &e);
    if (rc == 0) rc = hy_tp_done(p.s, 11, 0, sizeof x, &e);
    CU_ASSERT_EQUAL(rc, HY_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "rdma"));
    CU_ASSERT(p.s->broken);
    CU_ASSERT_EQUAL(hy_tp_write(p.s, 12, 0, x, 16, &e), HY_EIO);
    /* the client never sees transfer 11 complete */
    CU_ASSERT_NOT_EQUAL(hy_tp_wait(p.r, 11, 200, NULL, NULL, &e), 0);
    CU_ASSERT(all_zero(p.buf, sizeof x));
    pair_close(&p);
}

static void test_arguments_refused(void)
{
    hy_err e = {0};
    hy_tp_rdma_peer self, bad = good_client();
    bad.rkey = 0;
    hy_tp_sender *s = (hy_tp_sender *)1;
    CU_ASSERT_EQUAL(hy_tp_rdma_sender_new(g_dev, &bad, &self, &s, &e), HY_EINVAL);
    CU_ASSERT_PTR_NULL(s);
    hy_tp_receiver *r = (hy_tp_receiver *)1;
    CU_ASSERT_EQUAL(hy_tp_rdma_receiver_new(g_dev, NULL, 4096, false, &self, &r, &e), HY_EINVAL);
    CU_ASSERT_PTR_NULL(r);
    /* a receiver used before it is connected */
    uint8_t buf[4096];
    CU_ASSERT_EQUAL(hy_tp_rdma_receiver_new(g_dev, buf, sizeof buf, false, &self, &r, &e), 0);
    CU_ASSERT_EQUAL(hy_tp_wait(r, 1, 0, NULL, NULL, &e), HY_EINVAL);
    hy_tp_rdma_peer srv = good_server();
    srv.mtu = 100;
    CU_ASSERT_EQUAL(hy_tp_rdma_receiver_connect(r, &srv, &e), HY_EINVAL);
    hy_tp_receiver_free(r);
}

int main(void)
{
    hy_err e = {0};
    if (hy_tp_rdma_open(NULL, 0, -1, &g_dev, &e)) {
        snprintf(g_why, sizeof g_why, "%s", e.msg);
        printf("SKIPPED: no RDMA device (%s)\n", g_why);
        return hy_test_main("transport_rdma (no RDMA device)",
                            (const hy_test_case[]){
                                {"skipped_no_rdma_device", test_skipped_no_rdma_device},
                                {"peer_accepts_good", test_peer_accepts_good},
                                {"peer_refuses_each_field", test_peer_refuses_each_field},
                                {"open_unknown_device", test_open_unknown_device},
                                {"open_says_why", test_open_says_why},
                                {NULL, NULL},
                            });
    }
    printf("transport_rdma: device %s\n", hy_tp_rdma_device_name(g_dev));
    int rc = hy_test_main("transport_rdma",
                          (const hy_test_case[]){
                              {"peer_accepts_good", test_peer_accepts_good},
                              {"peer_refuses_each_field", test_peer_refuses_each_field},
                              {"open_unknown_device", test_open_unknown_device},
                              {"arguments_refused", test_arguments_refused},
                              {"loopback_regions", test_loopback_regions},
                              {"loopback_fail_and_timeout", test_loopback_fail_and_timeout},
                              {"loopback_bad_rkey_breaks", test_loopback_bad_rkey_breaks},
                              {NULL, NULL},
                          });
    hy_tp_rdma_close(g_dev);
    return rc;
}
