/*
 * The RDMA transport (libibverbs, reliable-connected queue pairs).
 *
 * The client registers its buffer for remote writes and gives the server
 * (in OpenTransport) its queue pair's number and first PSN, its address on
 * the fabric (LID, GID), and the buffer's address, length and rkey. Each side
 * moves its queue pair INIT → RTR → RTS with the other's details; nothing
 * else is negotiated. The connection carries one-sided traffic only, server
 * to client:
 *
 *   data        RDMA WRITE of the bytes to client addr + off (rkey)
 *   completion  a zero-length RDMA WRITE WITH IMMEDIATE, immediate = the
 *               transfer id (31 bits; bit 31 set: the transfer failed)
 *
 * Server (the sender). The caller's bytes are not registered memory, so each
 * write() copies them into a registered staging area of NSLOTS slots of
 * SLOT_BYTES and posts one signalled RDMA WRITE per slot; while one slot's
 * WRITE is on the wire the next slot is being filled (a slot is reused only
 * after its completion was polled). done() waits for every WRITE of the
 * session to complete, then sends the immediate and waits for that too: when
 * it returns, the responder has acknowledged every byte, so the bytes are in
 * the client's buffer. A completion in error (bad rkey, peer gone after the
 * transport's retries, ~0.5 s) is HY_EIO with the verbs status; a queue that
 * stays silent for CQ_TIMEOUT_MS is HY_EIO too. Either leaves the session
 * broken (hy_tp_write / hy_tp_done keep it so).
 *
 * Client (the receiver). RECV_DEPTH zero-length receive requests stay posted
 * (a WRITE WITH IMMEDIATE consumes one and places no data in it). A thread
 * per receiver sleeps on the completion channel, records each immediate in a
 * ring of the last HY_TP_RING transfers and posts the receive again at once; it
 * must run on its own for the same reason as the TCP reader: the daemon's
 * done() waits for the client's acknowledgement before it sends the gRPC
 * reply the client is waiting for, and receives that nobody re-posts would
 * eventually stall it (receiver-not-ready retries). wait() sleeps on a
 * condition variable until its transfer's record arrives, the queue pair
 * fails (a completion in error: HY_EIO), or its timeout passes. A server that
 * vanishes without a word is not seen here (RDMA tells only the side that
 * sends); the client's gRPC call fails instead, and wait() times out.
 *
 * The immediate carries the transfer id only: an RDMA wait() reports offset
 * 0 and 0 bytes; where the transfer lies is in the gRPC reply.
 *
 * Device memory (on_device): the buffer is a CUDA pointer registered through
 * the nvidia-peermem kernel module (GPUDirect RDMA); only a CUDA build tries.
 */
#include "transport_internal.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define SLOT_BYTES    ((size_t)4 << 20) /* one RDMA WRITE's staging slot */
#define NSLOTS        2u                /* slots in flight per sender */
#define IMM_WRID      NSLOTS            /* wr_id of the completion notice */
#define CQ_TIMEOUT_MS 10000             /* a sender's longest wait for one completion */
#define SPIN_POLLS    200               /* CQ polls before sleeping on the channel */
#define RECV_DEPTH    64                /* receive requests a receiver keeps posted */
#define FAILED_BIT    0x80000000u       /* in an immediate: the transfer failed */

struct hy_tp_rdma {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    uint16_t lid;
    enum ibv_mtu mtu; /* the port's active MTU */
    bool roce;        /* Ethernet link layer: every packet needs a GRH */
    char name[64];
};

/* A verbs call's failure as text: most return an errno value, some -1 with
 * errno set. */
static const char *verr(int e)
{
    return strerror(e < 0 ? errno : e);
}

/* ---- peers ---- */

/* The verbs enum of an MTU in bytes, or 0 when it is not one. */
static enum ibv_mtu mtu_enum(uint32_t bytes)
{
    switch (bytes) {
    case 256:
        return IBV_MTU_256;
    case 512:
        return IBV_MTU_512;
    case 1024:
        return IBV_MTU_1024;
    case 2048:
        return IBV_MTU_2048;
    case 4096:
        return IBV_MTU_4096;
    default:
        return 0;
    }
}

static uint32_t mtu_bytes(enum ibv_mtu m)
{
    return 128u << m; /* IBV_MTU_256 is 1 */
}

static bool gid_is_zero(const uint8_t gid[16])
{
    for (int i = 0; i < 16; i++)
        if (gid[i]) return false;
    return true;
}

int hy_tp_rdma_peer_check(const hy_tp_rdma_peer *p, bool as_client, hy_err *err)
{
    if (!p) return hy_err_set(err, HY_EINVAL, "rdma peer: missing");
    if (p->qpn == 0)
        return hy_err_set(err, HY_EINVAL, "rdma peer: qpn 0 is not a queue pair number");
    if (p->qpn > 0xffffffu)
        return hy_err_set(err, HY_EINVAL, "rdma peer: qpn 0x%x exceeds 24 bits", p->qpn);
    if (p->psn > 0xffffffu)
        return hy_err_set(err, HY_EINVAL, "rdma peer: psn 0x%x exceeds 24 bits", p->psn);
    if (!mtu_enum(p->mtu))
        return hy_err_set(err, HY_EINVAL,
                          "rdma peer: mtu %u is not one of 256, 512, 1024, 2048, 4096", p->mtu);
    if (as_client) {
        if (p->addr == 0)
            return hy_err_set(err, HY_EINVAL,
                              "rdma peer: addr is 0 (the client's buffer address must be set)");
        if (p->rkey == 0)
            return hy_err_set(err, HY_EINVAL,
                              "rdma peer: rkey is 0 (the client's buffer must be registered)");
        if (p->bytes == 0)
            return hy_err_set(err, HY_EINVAL,
                              "rdma peer: bytes is 0 (the client's buffer must have a length)");
        if (p->bytes > UINT64_MAX - p->addr)
            return hy_err_set(err, HY_EINVAL, "rdma peer: addr 0x%llx + bytes %llu exceeds 64 bits",
                              (unsigned long long)p->addr, (unsigned long long)p->bytes);
    } else {
        if (p->addr != 0)
            return hy_err_set(err, HY_EINVAL, "rdma peer: addr 0x%llx must be 0 on the server",
                              (unsigned long long)p->addr);
        if (p->rkey != 0)
            return hy_err_set(err, HY_EINVAL, "rdma peer: rkey 0x%x must be 0 on the server",
                              p->rkey);
        if (p->bytes != 0)
            return hy_err_set(err, HY_EINVAL, "rdma peer: bytes %llu must be 0 on the server",
                              (unsigned long long)p->bytes);
    }
    return 0;
}

/* ---- the device ---- */

/* A GID for the port: gid_index when >= 0; else, on RoCE, a RoCE v2 entry,
 * preferring an IPv4-mapped one (::ffff:a.b.c.d, what routes in most
 * data-centre networks), else index 0. */
static int choose_gid(hy_tp_rdma *d, const struct ibv_port_attr *pa, int want, hy_err *err)
{
    int idx = 0;
    if (want >= 0) {
        if (want >= pa->gid_tbl_len)
            return hy_err_set(err, HY_EINVAL,
                              "rdma: %s port %u: gid index %d is outside its table (%d entries)",
                              d->name, d->port, want, pa->gid_tbl_len);
        idx = want;
    } else if (d->roce) {
        int best = -1, best_score = 0;
        for (int i = 0; i < pa->gid_tbl_len && best_score < 2; i++) {
            struct ibv_gid_entry e;
            if (ibv_query_gid_ex(d->ctx, d->port, (uint32_t)i, &e, 0))
                continue; /* an empty entry, or a kernel without the call */
            if (e.gid_type != IBV_GID_TYPE_ROCE_V2) continue;
            static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            int score = memcmp(e.gid.raw, v4_prefix, sizeof v4_prefix) == 0 ? 2 : 1;
            if (score > best_score) {
                best = i;
                best_score = score;
            }
        }
        idx = best >= 0 ? best : 0;
    }
    int e = ibv_query_gid(d->ctx, d->port, idx, &d->gid);
    if (e)
        return hy_err_set(err, HY_EIO, "rdma: %s port %u: ibv_query_gid(%d): %s", d->name, d->port,
                          idx, verr(e));
    if (d->roce && gid_is_zero(d->gid.raw))
        return hy_err_set(err, HY_ENOTFOUND,
                          "rdma: %s port %u: GID %d is empty (RoCE needs an IP address on the "
                          "port's network interface)",
                          d->name, d->port, idx);
    d->gid_index = idx;
    return 0;
}

/* Opens dev and fills d when its port is active; d->ctx is NULL on failure. */
static int open_one(struct ibv_device *dev, uint8_t port, int gid_index, hy_tp_rdma *d, hy_err *err)
{
    snprintf(d->name, sizeof d->name, "%s", ibv_get_device_name(dev));
    d->port = port;
    d->ctx = ibv_open_device(dev);
    if (!d->ctx)
        return hy_err_set(err, HY_EIO, "rdma: ibv_open_device(%s): %s", d->name, strerror(errno));
    struct ibv_port_attr pa;
    int e = ibv_query_port(d->ctx, port, &pa);
    int rc = 0;
    if (e)
        rc =
            hy_err_set(err, HY_ENOTFOUND, "%s port %u: ibv_query_port: %s", d->name, port, verr(e));
    else if (pa.state != IBV_PORT_ACTIVE)
        rc = hy_err_set(err, HY_ENOTFOUND, "%s port %u is not active (%s)", d->name, port,
                        ibv_port_state_str(pa.state));
    if (!rc) {
        d->lid = pa.lid;
        d->mtu = pa.active_mtu;
        d->roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
        rc = choose_gid(d, &pa, gid_index, err);
    }
    if (!rc) {
        d->pd = ibv_alloc_pd(d->ctx);
        if (!d->pd)
            rc = hy_err_set(err, HY_EIO, "rdma: %s: ibv_alloc_pd: %s", d->name, strerror(errno));
    }
    if (rc) {
        ibv_close_device(d->ctx);
        d->ctx = NULL;
    }
    return rc;
}

int hy_tp_rdma_open(const char *device, int port, int gid_index, hy_tp_rdma **out, hy_err *err)
{
    *out = NULL;
    if (port < 0 || port > 255)
        return hy_err_set(err, HY_EINVAL, "rdma: port %d is not in 0..255", port);
    bool named = device && *device;
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        int e = list ? 0 : errno; /* NULL: why the library found none */
        if (list) ibv_free_device_list(list);
        return hy_err_set(err, HY_ENOTFOUND, "no RDMA device: ibv_get_device_list found 0%s%s%s",
                          e ? " (" : "", e ? strerror(e) : "", e ? ")" : "");
    }
    hy_tp_rdma *d = calloc(1, sizeof *d);
    if (!d) {
        ibv_free_device_list(list);
        return hy_err_set(err, HY_ENOMEM, "rdma: out of memory");
    }
    /* Without a name: the first device whose port is active, and each
     * refusal's reason when there is none. */
    char names[256] = "", why[400] = "";
    int rc = HY_ENOTFOUND;
    bool seen = false;
    for (int i = 0; i < n && rc; i++) {
        const char *name = ibv_get_device_name(list[i]);
        size_t nl = strlen(names);
        snprintf(names + nl, sizeof names - nl, "%s%s", nl ? ", " : "", name);
        if (named && strcmp(name, device) != 0) continue;
        seen = true;
        hy_err e = {0};
        rc = open_one(list[i], port ? (uint8_t)port : 1, gid_index, d, &e);
        if (rc && named) {
            if (err) *err = e;
            break;
        }
        if (rc) {
            size_t wl = strlen(why);
            snprintf(why + wl, sizeof why - wl, "%s%.*s", wl ? "; " : "", (int)(sizeof why - wl),
                     e.msg);
        }
    }
    ibv_free_device_list(list); /* opened contexts stay valid */
    if (rc) {
        free(d);
        if (named && !seen)
            return hy_err_set(err, HY_ENOTFOUND, "no RDMA device named %s (there are: %s)", device,
                              names);
        if (!named) return hy_err_set(err, HY_ENOTFOUND, "no usable RDMA device: %s", why);
        return rc;
    }
    *out = d;
    return 0;
}

void hy_tp_rdma_close(hy_tp_rdma *r)
{
    if (!r) return;
    ibv_dealloc_pd(r->pd);
    ibv_close_device(r->ctx);
    free(r);
}

const char *hy_tp_rdma_device_name(const hy_tp_rdma *r)
{
    return r->name;
}

/* ---- queue pairs and completions ---- */

static uint32_t random_psn(void)
{
    uint32_t v;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) v = (uint32_t)hy_now_ns();
    return v & 0xffffffu;
}

/* An RC queue pair on cq, moved to INIT with the access it grants its peer. */
static int qp_create(hy_tp_rdma *d, struct ibv_cq *cq, uint32_t send_wr, uint32_t recv_wr,
                     int access, struct ibv_qp **out, hy_err *err)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = cq,
        .recv_cq = cq,
        .cap = {.max_send_wr = send_wr,
                .max_recv_wr = recv_wr,
                .max_send_sge = 1,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
    };
    struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);
    if (!qp)
        return hy_err_set(err, HY_EIO, "rdma: %s: ibv_create_qp: %s", d->name, strerror(errno));
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .pkey_index = 0,
                            .port_num = d->port,
                            .qp_access_flags = (unsigned)access};
    int e =
        ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (e) {
        ibv_destroy_qp(qp);
        return hy_err_set(err, HY_EIO, "rdma: %s: queue pair to INIT: %s", d->name, verr(e));
    }
    *out = qp;
    return 0;
}

/* INIT → RTR (the peer's qpn, psn and address) → RTS (our psn). */
static int qp_connect(hy_tp_rdma *d, struct ibv_qp *qp, const hy_tp_rdma_peer *peer, uint32_t psn,
                      hy_err *err)
{
    bool global = d->roce || peer->lid == 0;
    if (global && gid_is_zero(peer->gid))
        return hy_err_set(err, HY_EINVAL, "rdma peer: gid is zero, but %s needs one (%s)", d->name,
                          d->roce ? "RoCE" : "the peer's lid is 0");
    enum ibv_mtu m = mtu_enum(peer->mtu);
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_RTR,
        .path_mtu = m < d->mtu ? m : d->mtu,
        .dest_qp_num = peer->qpn,
        .rq_psn = peer->psn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer = 12, /* 0.64 ms before a sender retries an unready receiver */
        .ah_attr = {.dlid = peer->lid, .sl = 0, .src_path_bits = 0, .port_num = d->port},
    };
    if (global) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
        a.ah_attr.grh.hop_limit = 64; /* RoCE v2 may cross routers */
    }
    int e = ibv_modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (e)
        return hy_err_set(err, HY_EIO, "rdma: %s: queue pair to RTR (peer qpn 0x%x): %s", d->name,
                          peer->qpn, verr(e));
    a = (struct ibv_qp_attr){
        .qp_state = IBV_QPS_RTS,
        .timeout = 14,  /* 4.096 us << 14 = 67 ms per try ... */
        .retry_cnt = 7, /* ... 8 tries: a dead peer fails a WRITE in ~0.5 s */
        .rnr_retry = 7, /* an unready receiver: retry forever (CQ_TIMEOUT_MS bounds it) */
        .sq_psn = psn,
        .max_rd_atomic = 1,
    };
    e = ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (e) return hy_err_set(err, HY_EIO, "rdma: %s: queue pair to RTS: %s", d->name, verr(e));
    return 0;
}

/* What the other side needs to connect to qp. */
static void fill_self(const hy_tp_rdma *d, const struct ibv_qp *qp, uint32_t psn,
                      hy_tp_rdma_peer *self)
{
    memset(self, 0, sizeof *self);
    self->qpn = qp->qp_num;
    self->psn = psn;
    self->lid = d->lid;
    memcpy(self->gid, d->gid.raw, 16);
    self->mtu = mtu_bytes(d->mtu);
}

/* A completion channel and a CQ of depth entries that signals it. */
static int cq_create(hy_tp_rdma *d, int depth, struct ibv_comp_channel **ch, struct ibv_cq **cq,
                     hy_err *err)
{
    *ch = ibv_create_comp_channel(d->ctx);
    if (!*ch)
        return hy_err_set(err, HY_EIO, "rdma: %s: ibv_create_comp_channel: %s", d->name,
                          strerror(errno));
    *cq = ibv_create_cq(d->ctx, depth, NULL, *ch, 0);
    if (!*cq)
        return hy_err_set(err, HY_EIO, "rdma: %s: ibv_create_cq(%d): %s", d->name, depth,
                          strerror(errno));
    return 0;
}

/* Up to max completions of cq, waiting until deadline_ns (hy_now_ns's clock):
 * how many (> 0), 0 at the deadline, HY_EIO when verbs fail. Polls a little
 * first (a completion is often microseconds away), then sleeps on ch: arm,
 * poll again (one may have come before the arming), sleep, take the event. */
static int cq_wait(struct ibv_cq *cq, struct ibv_comp_channel *ch, uint64_t deadline_ns,
                   struct ibv_wc *wc, int max, hy_err *err)
{
    bool armed = false;
    for (unsigned spin = 0;; spin++) {
        int n = ibv_poll_cq(cq, max, wc);
        if (n < 0) return hy_err_set(err, HY_EIO, "rdma: ibv_poll_cq failed (%d)", n);
        if (n > 0) return n;
        if (spin < SPIN_POLLS) continue;
        if (!armed) {
            int e = ibv_req_notify_cq(cq, 0);
            if (e) return hy_err_set(err, HY_EIO, "rdma: ibv_req_notify_cq: %s", verr(e));
            armed = true;
            continue;
        }
        uint64_t now = hy_now_ns();
        if (now >= deadline_ns) return 0;
        uint64_t ms = (deadline_ns - now + 999999) / 1000000;
        struct pollfd p = {.fd = ch->fd, .events = POLLIN};
        int r = poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms);
        if (r < 0 && errno != EINTR)
            return hy_err_set(err, HY_EIO, "rdma: poll on the completion channel: %s",
                              strerror(errno));
        if (r <= 0) continue;
        struct ibv_cq *ev_cq;
        void *ev_ctx;
        if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx))
            return hy_err_set(err, HY_EIO, "rdma: ibv_get_cq_event: %s", strerror(errno));
        ibv_ack_cq_events(ev_cq, 1);
        armed = false;
    }
}

/* ---- the sender ---- */

typedef struct rdma_sender {
    hy_tp_sender base;
    hy_tp_rdma *dev;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *stage;    /* [NSLOTS][SLOT_BYTES], registered as mr */
    bool busy[NSLOTS]; /* the slot's WRITE has not completed yet */
    unsigned next;     /* the slot the next write fills */
    unsigned inflight; /* signalled requests posted and not yet completed */
    uint64_t raddr;    /* the client's buffer */
    uint32_t rkey;
} rdma_sender;

/* Takes the completions that arrive within CQ_TIMEOUT_MS (at least one). */
static int sender_reap(rdma_sender *s, hy_err *err)
{
    struct ibv_wc wc[NSLOTS + 1];
    int n = cq_wait(s->cq, s->ch, hy_now_ns() + (uint64_t)CQ_TIMEOUT_MS * 1000000, wc,
                    (int)(NSLOTS + 1), err);
    if (n < 0) return n;
    if (n == 0)
        return hy_err_set(err, HY_EIO,
                          "rdma: no completion in %d s (the client's queue pair does not answer)",
                          CQ_TIMEOUT_MS / 1000);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        assert(s->inflight > 0 && wc[i].wr_id <= IMM_WRID);
        s->inflight--;
        if (wc[i].wr_id < NSLOTS) s->busy[wc[i].wr_id] = false;
        if (wc[i].status != IBV_WC_SUCCESS && !rc)
            rc = hy_err_set(err, HY_EIO, "rdma: %s to the client failed: %s (vendor error 0x%x)",
                            wc[i].wr_id == IMM_WRID ? "completion notice" : "RDMA WRITE",
                            ibv_wc_status_str(wc[i].status), wc[i].vendor_err);
    }
    return rc;
}

/* Until every posted request has completed. */
static int sender_drain(rdma_sender *s, hy_err *err)
{
    while (s->inflight) {
        int rc = sender_reap(s, err);
        if (rc) return rc;
    }
    return 0;
}

static int sender_post(rdma_sender *s, struct ibv_send_wr *wr, hy_err *err)
{
    struct ibv_send_wr *bad;
    int e = ibv_post_send(s->qp, wr, &bad);
    if (e) return hy_err_set(err, HY_EIO, "rdma: ibv_post_send: %s", verr(e));
    s->inflight++;
    return 0;
}

static int rdma_write(hy_tp_sender *sb, uint64_t xfer, uint64_t off, const void *src, size_t n,
                      hy_err *err)
{
    (void)xfer; /* the data do not say whose they are; the immediate does */
    rdma_sender *s = (rdma_sender *)sb;
    const uint8_t *p = src;
    while (n) {
        unsigned k = s->next;
        while (s->busy[k]) {
            int rc = sender_reap(s, err);
            if (rc) return rc;
        }
        size_t c = n < SLOT_BYTES ? n : SLOT_BYTES;
        uint8_t *slot = s->stage + (size_t)k * SLOT_BYTES;
        memcpy(slot, p, c);
        struct ibv_sge sge = {.addr = (uintptr_t)slot, .length = (uint32_t)c, .lkey = s->mr->lkey};
        struct ibv_send_wr wr = {
            .wr_id = k,
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = IBV_SEND_SIGNALED,
            .wr.rdma = {.remote_addr = s->raddr + off, .rkey = s->rkey},
        };
        int rc = sender_post(s, &wr, err);
        if (rc) return rc;
        s->busy[k] = true;
        s->next = (k + 1) % NSLOTS;
        p += c;
        off += c;
        n -= c;
    }
    return 0;
}

/* Every WRITE so far completed, then the immediate v, and its completion. */
static int sender_notify(rdma_sender *s, uint32_t v, hy_err *err)
{
    int rc = sender_drain(s, err);
    if (rc) return rc;
    struct ibv_send_wr wr = {
        .wr_id = IMM_WRID,
        .sg_list = NULL,
        .num_sge = 0,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(v),
        .wr.rdma = {.remote_addr = s->raddr, .rkey = s->rkey},
    };
    rc = sender_post(s, &wr, err);
    return rc ? rc : sender_drain(s, err);
}

static int rdma_done(hy_tp_sender *sb, uint64_t xfer, uint64_t off, uint64_t bytes, hy_err *err)
{
    (void)off, (void)bytes; /* the immediate has room for the id only */
    if (xfer > HY_TP_XFER_MAX)
        return hy_err_set(err, HY_ERANGE, "rdma: transfer id %llu exceeds 31 bits",
                          (unsigned long long)xfer);
    return sender_notify((rdma_sender *)sb, (uint32_t)xfer, err);
}

static void rdma_fail(hy_tp_sender *sb, uint64_t xfer)
{
    if (sender_notify((rdma_sender *)sb, (uint32_t)(xfer & HY_TP_XFER_MAX) | FAILED_BIT, NULL))
        sb->broken = true; /* the notice did not arrive: nothing more will */
}

/* Frees what was made, in reverse: a half-built sender too. */
static void rdma_sender_free(hy_tp_sender *sb)
{
    rdma_sender *s = (rdma_sender *)sb;
    if (s->qp) ibv_destroy_qp(s->qp);
    if (s->cq) ibv_destroy_cq(s->cq);
    if (s->ch) ibv_destroy_comp_channel(s->ch);
    if (s->mr) ibv_dereg_mr(s->mr);
    free(s->stage);
    free(s);
}

static const hy_tp_sender_ops rdma_sender_ops = {rdma_write, rdma_done, rdma_fail,
                                                 rdma_sender_free};

int hy_tp_rdma_sender_new(hy_tp_rdma *r, const hy_tp_rdma_peer *client, hy_tp_rdma_peer *self,
                          hy_tp_sender **out, hy_err *err)
{
    *out = NULL;
    int rc = hy_tp_rdma_peer_check(client, true, err);
    if (rc) return rc;
    rdma_sender *s = calloc(1, sizeof *s);
    if (!s) return hy_err_set(err, HY_ENOMEM, "rdma: out of memory");
    s->base = (hy_tp_sender){&rdma_sender_ops, HY_TP_RDMA, client->bytes, false, -1};
    s->dev = r;
    s->raddr = client->addr;
    s->rkey = client->rkey;
    s->stage = aligned_alloc(4096, NSLOTS * SLOT_BYTES);
    if (!s->stage) {
        rc = hy_err_set(err, HY_ENOMEM, "rdma: no memory for the %zu-byte staging area",
                        NSLOTS * SLOT_BYTES);
        goto fail;
    }
    s->mr = ibv_reg_mr(r->pd, s->stage, NSLOTS * SLOT_BYTES, IBV_ACCESS_LOCAL_WRITE);
    if (!s->mr) {
        rc = hy_err_set(err, HY_EIO,
                        "rdma: %s: ibv_reg_mr of the %zu-byte staging area: %s (is the "
                        "locked-memory limit, ulimit -l, large enough?)",
                        r->name, NSLOTS * SLOT_BYTES, strerror(errno));
        goto fail;
    }
    uint32_t psn = random_psn();
    if ((rc = cq_create(r, (int)(NSLOTS + 2), &s->ch, &s->cq, err)) ||
        (rc = qp_create(r, s->cq, NSLOTS + 2, 1, 0, &s->qp, err)) ||
        (rc = qp_connect(r, s->qp, client, psn, err)))
        goto fail;
    fill_self(r, s->qp, psn, self);
    *out = &s->base;
    return 0;
fail:
    rdma_sender_free(&s->base);
    return rc;
}

/* ---- the receiver ---- */

typedef struct rdma_receiver {
    hy_tp_receiver base;
    hy_tp_rdma *dev;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint32_t psn;
    int stop_fd;          /* an eventfd: free() wakes the thread with it */
    pthread_t thread;     /* records immediates, re-posts receives */
    bool started, inited; /* the thread runs; the ring exists */
    hy_tp_ring ring;      /* the immediates seen, or the queue pair's failure */
} rdma_receiver;

static int post_recv(rdma_receiver *v, hy_err *err)
{
    struct ibv_recv_wr wr = {.wr_id = 0, .sg_list = NULL, .num_sge = 0}, *bad;
    int e = ibv_post_recv(v->qp, &wr, &bad);
    if (e) return hy_err_set(err, HY_EIO, "rdma: ibv_post_recv: %s", verr(e));
    return 0;
}

static void rx_die(rdma_receiver *v, const char *why)
{
    hy_tp_ring_die(&v->ring, why);
}

/* One completion: an immediate to record (and its receive to post again). */
static int rx_take(rdma_receiver *v, const struct ibv_wc *wc, hy_err *err)
{
    if (wc->status != IBV_WC_SUCCESS)
        return hy_err_set(err, HY_EIO, "rdma: the connection failed: %s (vendor error 0x%x)",
                          ibv_wc_status_str(wc->status), wc->vendor_err);
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM))
        return hy_err_set(err, HY_EIO,
                          "rdma: unexpected completion (opcode %d) on the client's queue pair",
                          (int)wc->opcode);
    uint32_t imm = ntohl(wc->imm_data);
    /* where the bytes lie is in the gRPC reply: the immediate has the id only */
    hy_tp_ring_put(&v->ring, imm & HY_TP_XFER_MAX, 0, 0, (imm & FAILED_BIT) != 0);
    return post_recv(v, err);
}

static void *rx_main(void *arg)
{
    rdma_receiver *v = arg;
    bool armed = false;
    for (;;) {
        struct ibv_wc wc[16];
        hy_err e = {0};
        int n = ibv_poll_cq(v->cq, 16, wc);
        if (n < 0) {
            rx_die(v, "rdma: ibv_poll_cq failed");
            return NULL;
        }
        for (int i = 0; i < n; i++)
            if (rx_take(v, &wc[i], &e)) {
                rx_die(v, e.msg);
                return NULL;
            }
        if (n > 0) continue;
        if (!armed) {
            int x = ibv_req_notify_cq(v->cq, 0);
            if (x) {
                snprintf(e.msg, sizeof e.msg, "rdma: ibv_req_notify_cq: %s", verr(x));
                rx_die(v, e.msg);
                return NULL;
            }
            armed = true;
            continue; /* a completion may have come before the arming */
        }
        struct pollfd p[2] = {{.fd = v->ch->fd, .events = POLLIN},
                              {.fd = v->stop_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            snprintf(e.msg, sizeof e.msg, "rdma: poll: %s", strerror(errno));
            rx_die(v, e.msg);
            return NULL;
        }
        if (p[1].revents) return NULL;
        if (p[0].revents) {
            struct ibv_cq *ev_cq;
            void *ev_ctx;
            if (ibv_get_cq_event(v->ch, &ev_cq, &ev_ctx)) {
                snprintf(e.msg, sizeof e.msg, "rdma: ibv_get_cq_event: %s", strerror(errno));
                rx_die(v, e.msg);
                return NULL;
            }
            ibv_ack_cq_events(ev_cq, 1);
            armed = false;
        }
    }
}

static int rdma_wait(hy_tp_receiver *r, uint64_t xfer, int64_t timeout_ms, uint64_t *off,
                     uint64_t *bytes, hy_err *err)
{
    rdma_receiver *v = (rdma_receiver *)r;
    if (xfer > HY_TP_XFER_MAX)
        return hy_err_set(err, HY_EINVAL, "rdma: transfer id %llu exceeds 31 bits",
                          (unsigned long long)xfer);
    if (!v->started)
        return hy_err_set(
            err, HY_EINVAL,
            "rdma: the receiver is not connected (hy_tp_rdma_receiver_connect first)");
    return hy_tp_ring_wait(&v->ring, HY_TP_RDMA, xfer, timeout_ms, off, bytes, err);
}

/* Stops the thread, then frees what was made, in reverse: a half-built
 * receiver too. The buffer is the caller's. */
static void rdma_receiver_free(hy_tp_receiver *r)
{
    rdma_receiver *v = (rdma_receiver *)r;
    if (v->started) {
        uint64_t one = 1;
        if (write(v->stop_fd, &one, sizeof one) != (ssize_t)sizeof one)
            abort(); /* an eventfd below its limit takes the write */
        pthread_join(v->thread, NULL);
    }
    if (v->qp) ibv_destroy_qp(v->qp);
    if (v->cq) ibv_destroy_cq(v->cq);
    if (v->ch) ibv_destroy_comp_channel(v->ch);
    if (v->mr) ibv_dereg_mr(v->mr);
    if (v->stop_fd >= 0) close(v->stop_fd);
    if (v->inited) {
        hy_tp_ring_destroy(&v->ring);
    }
    free(v);
}

static const hy_tp_receiver_ops rdma_receiver_ops = {rdma_wait, rdma_receiver_free};

/* Registers buf for the server's writes (a CUDA pointer when on_device). */
static int register_buffer(rdma_receiver *v, void *buf, uint64_t capacity, bool on_device,
                           hy_err *err)
{
    hy_tp_rdma *d = v->dev;
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (on_device) {
#ifdef HY_HAVE_CUDA
        v->mr = ibv_reg_mr(d->pd, buf, capacity, access);
        if (!v->mr)
            return hy_err_set(
                err, HY_EIO,
                "rdma: %s: ibv_reg_mr of %llu bytes of GPU memory: %s (GPUDirect RDMA needs the "
                "nvidia-peermem kernel module: modprobe nvidia-peermem)",
                d->name, (unsigned long long)capacity, strerror(errno));
        return 0;
#else
        (void)buf, (void)capacity, (void)access;
        return hy_err_set(err, HY_EUNSUPPORTED,
                          "rdma: device memory needs a CUDA build (this one has none)");
#endif
    }
    v->mr = ibv_reg_mr(d->pd, buf, capacity, access);
    if (!v->mr)
        return hy_err_set(err, HY_EIO,
                          "rdma: %s: ibv_reg_mr of %llu bytes: %s (is the locked-memory limit, "
                          "ulimit -l, large enough?)",
                          d->name, (unsigned long long)capacity, strerror(errno));
    return 0;
}

int hy_tp_rdma_receiver_new(hy_tp_rdma *r, void *buf, uint64_t capacity, bool on_device,
                            hy_tp_rdma_peer *self, hy_tp_receiver **out, hy_err *err)
{
    *out = NULL;
    if (!buf || capacity == 0)
        return hy_err_set(err, HY_EINVAL, "rdma: the receiver needs a buffer (got %s, %llu bytes)",
                          buf ? "one" : "NULL", (unsigned long long)capacity);
    if (capacity > SIZE_MAX)
        return hy_err_set(err, HY_ERANGE, "rdma: %llu bytes exceed this machine's address space",
                          (unsigned long long)capacity);
    rdma_receiver *v = calloc(1, sizeof *v);
    if (!v) return hy_err_set(err, HY_ENOMEM, "rdma: out of memory");
    v->base = (hy_tp_receiver){&rdma_receiver_ops, HY_TP_RDMA, buf, capacity, 0};
    v->dev = r;
    v->stop_fd = -1;
    v->psn = random_psn();
    hy_tp_ring_init(&v->ring);
    v->inited = true;
    int rc = register_buffer(v, buf, capacity, on_device, err);
    if (rc) goto fail;
    v->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (v->stop_fd < 0) {
        rc = hy_err_set(err, HY_EIO, "rdma: eventfd: %s", strerror(errno));
        goto fail;
    }
    if ((rc = cq_create(r, RECV_DEPTH + 1, &v->ch, &v->cq, err)) ||
        (rc = qp_create(r, v->cq, 1, RECV_DEPTH, IBV_ACCESS_REMOTE_WRITE, &v->qp, err)))
        goto fail;
    for (int i = 0; i < RECV_DEPTH; i++)
        if ((rc = post_recv(v, err))) goto fail;
    fill_self(r, v->qp, v->psn, self);
    self->addr = (uintptr_t)buf;
    self->rkey = v->mr->rkey;
    self->bytes = capacity;
    *out = &v->base;
    return 0;
fail:
    rdma_receiver_free(&v->base);
    return rc;
}

int hy_tp_rdma_receiver_connect(hy_tp_receiver *rcv, const hy_tp_rdma_peer *server, hy_err *err)
{
    if (!rcv || rcv->kind != HY_TP_RDMA)
        return hy_err_set(err, HY_EINVAL, "rdma: not an RDMA receiver");
    rdma_receiver *v = (rdma_receiver *)rcv;
    if (v->started) return hy_err_set(err, HY_EINVAL, "rdma: the receiver is already connected");
    int rc = hy_tp_rdma_peer_check(server, false, err);
    if (rc || (rc = qp_connect(v->dev, v->qp, server, v->psn, err))) return rc;
    int e = pthread_create(&v->thread, NULL, rx_main, v);
    if (e)
        return hy_err_set(err, HY_ENOMEM, "rdma: cannot start the completion thread: %s",
                          strerror(e));
    v->started = true;
    return 0;
}
