/*
 * Transport sessions on the client's side (hypic_client.h, "bulk
 * transports"): the offer, the attach, and the calls that deliver into the
 * session's buffer.
 *
 * An RDMA offer needs this machine's queue pair and registered buffer before
 * OpenTransport is sent, so they are made first (when there is a device) and
 * dropped again if the server takes another offer; so is a CUDA IPC offer's
 * exported GPU buffer. TCP and shm buffers are made by their receivers when
 * the session attaches.
 */
#include "client_internal.h"
#include "hy_transport.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct hyc_session {
    hyc *c;
    uint64_t id;
    hy_tp_kind kind;
    hy_tp_receiver *rx;
    hy_tp_rdma *rdma; /* RDMA: the device, and the buffer it registered */
    void *rdma_buf;
    hy_tp_cuda *cuda;        /* CUDA IPC: the runtime, and the exported buffer's receiver */
    hy_tp_receiver *cuda_rx; /* (until the server takes the offer: then rx) */
    uint64_t capacity;
    char passed_over[384];
};

int hyc_open_transport(hyc *c, const Hypic__V1__OpenTransportRequest *rq,
                       Hypic__V1__OpenTransportResponse **out, hyc_status *st)
{
    return unary(c, "OpenTransport", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_close_transport(hyc *c, const Hypic__V1__CloseTransportRequest *rq,
                        Hypic__V1__CloseTransportResponse **out, hyc_status *st)
{
    return unary(c, "CloseTransport", rq ? &rq->base : NULL, (void **)out, st);
}

/* Parses "shm,tcp" into kinds[] (best first); 0 or INVALID_ARGUMENT. */
static int parse_kinds(const char *list, hy_tp_kind *kinds, int *n, hyc_status *st)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s", list ? list : "rdma,shm,tcp");
    *n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        hy_tp_kind k = hy_tp_kind_parse(t);
        if (k == HY_TP_NONE)
            return status_set(st, HYC_INVALID_ARGUMENT,
                              "client: transport '%s' is not tcp, shm, rdma or cuda_ipc", t);
        for (int i = 0; i < *n; i++)
            if (kinds[i] == k)
                return status_set(st, HYC_INVALID_ARGUMENT, "client: transport %s given twice", t);
        kinds[(*n)++] = k;
    }
    if (*n == 0) return status_set(st, HYC_INVALID_ARGUMENT, "client: no transport to offer");
    return HYC_OK;
}

static void session_free(hyc_session *s)
{
    hy_tp_receiver_free(s->rx);
    hy_tp_receiver_free(s->cuda_rx);
    hy_tp_cuda_close(s->cuda);
    if (s->rdma_buf) munmap(s->rdma_buf, s->capacity);
    if (s->rdma) hy_tp_rdma_close(s->rdma);
    free(s);
}

/* The RDMA half of an offer: a device, a registered buffer, a queue pair.
 * false (and nothing kept) when this machine cannot. */
static bool rdma_prepare(hyc_session *s, Hypic__V1__RdmaPeer *pb, hy_tp_rdma_peer *self)
{
    hy_err e = {0};
    if (hy_tp_rdma_open(NULL, 0, -1, &s->rdma, &e)) {
        snprintf(s->passed_over, sizeof s->passed_over, "rdma (this client: %.300s)", e.msg);
        return false;
    }
    s->rdma_buf =
        mmap(NULL, s->capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->rdma_buf == MAP_FAILED ||
        hy_tp_rdma_receiver_new(s->rdma, s->rdma_buf, s->capacity, false, self, &s->rx, &e)) {
        if (s->rdma_buf == MAP_FAILED) s->rdma_buf = NULL;
        snprintf(s->passed_over, sizeof s->passed_over, "rdma (this client: %.300s)",
                 e.msg[0] ? e.msg : "cannot map the buffer");
        return false;
    }
    pb->qpn = self->qpn, pb->psn = self->psn, pb->lid = self->lid, pb->mtu = self->mtu;
    pb->gid = (ProtobufCBinaryData){sizeof self->gid, self->gid};
    pb->addr = self->addr, pb->rkey = self->rkey, pb->bytes = self->bytes;
    return true;
}

/* The CUDA IPC half of an offer: the runtime, the buffer exported (the
 * caller's, or allocated on `device`). false (nothing kept) when this
 * process cannot. */
static bool cuda_prepare(hyc_session *s, int device, void *buf, Hypic__V1__CudaIpcPeer *pb,
                         hy_tp_cuda_peer *self)
{
    hy_err e = {0};
    if (hy_tp_cuda_open(&s->cuda, &e) ||
        hy_tp_cuda_receiver_new(s->cuda, device, buf, s->capacity, self, &s->cuda_rx, &e)) {
        size_t pl = strlen(s->passed_over);
        snprintf(s->passed_over + pl, sizeof s->passed_over - pl,
                 "%scuda_ipc (this client: %.300s)", pl ? "; " : "", e.msg);
        hy_tp_cuda_close(s->cuda);
        s->cuda = NULL;
        return false;
    }
    pb->handle = (ProtobufCBinaryData){sizeof self->handle, self->handle};
    pb->pci_bus_id = self->pci_bus_id;
    pb->offset = self->offset;
    return true;
}

/* Whether a target host is this one: loopback names and addresses, or this
 * machine's own name. */
static bool local_host(const char *h)
{
    char me[256] = "";
    gethostname(me, sizeof me - 1);
    return !strcmp(h, "localhost") || !strncmp(h, "127.", 4) || !strcmp(h, "::1") ||
           (me[0] && !strcmp(h, me));
}

static int session_open(hyc *c, const char *kinds_list, uint64_t capacity, int cuda_device,
                        void *cuda_buf, hyc_session **out, hyc_status *st)
{
    *out = NULL;
    hy_tp_kind kinds[HY_TP_KINDS - 1];
    int nk;
    if (parse_kinds(kinds_list, kinds, &nk, st)) return st->code;
    if (capacity == 0)
        return status_set(st, HYC_INVALID_ARGUMENT, "client: a session buffer of 0 bytes");
    hyc_session *s = calloc(1, sizeof *s);
    if (!s) return status_set(st, HYC_INTERNAL, "client: out of memory");
    s->c = c;
    s->capacity = capacity;
    Hypic__V1__TransportOffer of[HY_TP_KINDS - 1], *ofp[HY_TP_KINDS - 1];
    Hypic__V1__RdmaPeer rp = HYPIC__V1__RDMA_PEER__INIT;
    Hypic__V1__CudaIpcPeer cp = HYPIC__V1__CUDA_IPC_PEER__INIT;
    hy_tp_rdma_peer self;
    hy_tp_cuda_peer cself;
    size_t n = 0;
    for (int i = 0; i < nk; i++) {
        if (kinds[i] == HY_TP_RDMA && !rdma_prepare(s, &rp, &self)) continue;
        if (kinds[i] == HY_TP_CUDA_IPC && !cuda_prepare(s, cuda_device, cuda_buf, &cp, &cself))
            continue;
        if (kinds[i] == HY_TP_SHM && !local_host(c->host)) {
            size_t pl = strlen(s->passed_over);
            snprintf(s->passed_over + pl, sizeof s->passed_over - pl,
                     "%sshm (the server, %.200s, is not on this host)", pl ? "; " : "", c->host);
            continue;
        }
        Hypic__V1__TransportOffer init = HYPIC__V1__TRANSPORT_OFFER__INIT;
        of[n] = init;
        of[n].kind = (Hypic__V1__Transport)kinds[i];
        of[n].capacity = capacity;
        if (kinds[i] == HY_TP_RDMA) of[n].rdma = &rp;
        if (kinds[i] == HY_TP_CUDA_IPC) of[n].cuda_ipc = &cp;
        ofp[n] = &of[n];
        n++;
    }
    if (n == 0) {
        status_set(st, HYC_FAILED_PRECONDITION, "client: nothing to offer: %s", s->passed_over);
        session_free(s);
        return st->code;
    }
    Hypic__V1__OpenTransportRequest rq = HYPIC__V1__OPEN_TRANSPORT_REQUEST__INIT;
    rq.n_offers = n;
    rq.offers = ofp;
    Hypic__V1__OpenTransportResponse *a = NULL;
    if (hyc_open_transport(c, &rq, &a, st)) {
        session_free(s);
        return st->code;
    }
    s->id = a->session;
    s->kind = (hy_tp_kind)a->kind;
    size_t pl = strlen(s->passed_over);
    if (a->passed_over[0])
        snprintf(s->passed_over + pl, sizeof s->passed_over - pl, "%s%.300s", pl ? "; " : "",
                 a->passed_over);
    hy_err e = {0};
    int rc = 0;
    if (s->kind != HY_TP_RDMA && s->rx) { /* the RDMA half was not taken */
        hy_tp_receiver_free(s->rx);
        s->rx = NULL;
    }
    if (s->kind == HY_TP_CUDA_IPC && s->cuda_rx) { /* nothing to attach: the reply completes */
        s->rx = s->cuda_rx;
        s->cuda_rx = NULL;
    } else { /* the CUDA IPC half was not taken */
        hy_tp_receiver_free(s->cuda_rx);
        s->cuda_rx = NULL;
    }
    if (s->kind == HY_TP_CUDA_IPC) {
        if (!s->rx)
            rc = hy_err_set(&e, HY_EFORMAT, "the server took cuda_ipc, which was not offered");
    } else if (s->kind == HY_TP_TCP) {
        rc = hy_tp_tcp_receiver_open(c->host, (int)a->tcp_port, a->session, a->secret.data,
                                     capacity, &s->rx, &e);
    } else if (s->kind == HY_TP_SHM) {
        rc = hy_tp_shm_receiver_open(a->shm_socket, a->session, a->secret.data, capacity, &s->rx,
                                     &e);
    } else if (s->kind == HY_TP_RDMA && a->rdma) {
        hy_tp_rdma_peer sp = {.qpn = a->rdma->qpn,
                              .psn = a->rdma->psn,
                              .lid = (uint16_t)a->rdma->lid,
                              .mtu = a->rdma->mtu};
        memcpy(sp.gid, a->rdma->gid.data, a->rdma->gid.len < 16 ? a->rdma->gid.len : 16);
        rc = hy_tp_rdma_receiver_connect(s->rx, &sp, &e);
    } else {
        rc = hy_err_set(&e, HY_EFORMAT, "the server took transport %d, which was not offered",
                        (int)a->kind);
    }
    bool secret_ok =
        s->kind == HY_TP_RDMA || s->kind == HY_TP_CUDA_IPC || a->secret.len == HY_TP_SECRET_BYTES;
    hyc_free(a);
    if (rc || !secret_ok) {
        status_set(st, HYC_UNAVAILABLE, "client: attaching transport session %llu (%s): %s",
                   (unsigned long long)s->id, hy_tp_kind_name(s->kind),
                   secret_ok ? e.msg : "the server sent no 16-byte secret");
        hyc_session_close(s);
        return st->code;
    }
    *out = s;
    return status_ok(st);
}

int hyc_session_open(hyc *c, const char *kinds_list, uint64_t capacity, hyc_session **out,
                     hyc_status *st)
{
    if (kinds_list && strstr(kinds_list, "cuda_ipc"))
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: cuda_ipc delivers into GPU memory: open it with "
                          "hyc_session_open_cuda");
    return session_open(c, kinds_list, capacity, -1, NULL, out, st);
}

int hyc_session_open_cuda(hyc *c, const char *kinds_list, int device, void *buf, uint64_t capacity,
                          hyc_session **out, hyc_status *st)
{
    return session_open(c, kinds_list ? kinds_list : "cuda_ipc,shm,tcp", capacity, device, buf, out,
                        st);
}

bool hyc_session_on_device(const hyc_session *s)
{
    return s->kind == HY_TP_CUDA_IPC;
}

int hyc_session_read(const hyc_session *s, uint64_t off, void *dst, size_t n, hyc_status *st)
{
    if (off > s->capacity || n > s->capacity - off)
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: %zu bytes at %llu pass the session's buffer of %llu", n,
                          (unsigned long long)off, (unsigned long long)s->capacity);
    if (s->kind != HY_TP_CUDA_IPC) {
        memcpy(dst, s->rx->buf + off, n);
        return status_ok(st);
    }
    hy_err e = {0};
    if (hy_tp_cuda_receiver_read(s->rx, off, dst, n, &e))
        return status_set(st, HYC_INTERNAL, "client: %s", e.msg);
    return status_ok(st);
}

void hyc_session_close(hyc_session *s)
{
    if (!s) return;
    if (s->id) {
        Hypic__V1__CloseTransportRequest rq = HYPIC__V1__CLOSE_TRANSPORT_REQUEST__INIT;
        Hypic__V1__CloseTransportResponse *r = NULL;
        hyc_status st;
        rq.session = s->id;
        hyc_close_transport(s->c, &rq, &r, &st); /* best effort: the server also drops it when
                                                    its connection closes */
        hyc_free(r);
    }
    session_free(s);
}

uint64_t hyc_session_id(const hyc_session *s)
{
    return s->id;
}

const char *hyc_session_kind(const hyc_session *s)
{
    return hy_tp_kind_name(s->kind);
}

const char *hyc_session_passed_over(const hyc_session *s)
{
    return s->passed_over;
}

uint8_t *hyc_session_buffer(const hyc_session *s)
{
    return s->rx ? s->rx->buf : NULL;
}

uint64_t hyc_session_capacity(const hyc_session *s)
{
    return s->capacity;
}

/* After a reply that says transfer xfer went: its completion on the
 * transport, which is what makes the bytes the client's. */
static int await(hyc *c, hyc_session *s, uint64_t xfer, hyc_status *st)
{
    hy_err e = {0};
    int64_t ms = c->deadline_ms > 0 ? c->deadline_ms : 10000;
    if (hy_tp_wait(s->rx, xfer, ms, NULL, NULL, &e))
        return status_set(st, HYC_UNAVAILABLE, "client: transfer %llu on session %llu: %s",
                          (unsigned long long)xfer, (unsigned long long)s->id, e.msg);
    return HYC_OK;
}

int hyc_prefill_state(hyc *c, hyc_session *s, uint64_t offset, Hypic__V1__PrefillRequest *rq,
                      Hypic__V1__PrefillResponse **out, hyc_status *st)
{
    *out = NULL;
    if (!rq || !s)
        return status_set(st, HYC_INVALID_ARGUMENT, "client: Prefill: no request or session");
    rq->return_state = true;
    rq->transport_session = s->id;
    rq->state_offset = offset;
    if (hyc_prefill(c, rq, out, st)) return st->code;
    if (!(*out)->state) {
        hyc_free(*out);
        *out = NULL;
        return status_set(st, HYC_INTERNAL, "client: Prefill: the reply has no state delivery");
    }
    if (await(c, s, (*out)->state->transfer, st)) {
        hyc_free(*out);
        *out = NULL;
    }
    return st->code;
}

typedef struct into_ctx {
    Hypic__V1__EntryMeta *meta;
    uint64_t xfer;
    bool have;
} into_ctx;

static int on_into(void *ctx, const ProtobufCMessage *msg)
{
    into_ctx *g = ctx;
    const Hypic__V1__EntryChunk *ch = (const void *)msg;
    if (g->have || !ch->meta || !ch->delivery) return HY_EFORMAT;
    /* keep the metadata: the transport frees what it decoded after this call */
    size_t n = protobuf_c_message_get_packed_size(&ch->meta->base);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return HY_ENOMEM;
    protobuf_c_message_pack(&ch->meta->base, b);
    g->meta = hypic__v1__entry_meta__unpack(NULL, n, b);
    free(b);
    g->xfer = ch->delivery->transfer;
    g->have = g->meta != NULL;
    return g->have ? 0 : HY_ENOMEM;
}

int hyc_get_entry_into(hyc *c, hyc_session *s, uint64_t offset, Hypic__V1__GetEntryRequest *rq,
                       Hypic__V1__EntryMeta **meta, hyc_status *st)
{
    *meta = NULL;
    if (!rq || !s)
        return status_set(st, HYC_INVALID_ARGUMENT, "client: GetEntry: no request or session");
    rq->transport_session = s->id;
    rq->offset = offset;
    into_ctx g = {0};
    hy_rpc_status rs;
    hy_err e = {0};
    int rc = hy_rpc_client_call(c->rpc, method("GetEntry"), &rq->base, c->token, c->deadline_ms,
                                on_into, &g, &rs, &e);
    if (call_status(rc, &rs, &e, st) == HYC_OK && !g.have)
        status_set(st, HYC_INTERNAL, "client: GetEntry: no reply with meta and delivery");
    if (st->code == HYC_OK) await(c, s, g.xfer, st);
    if (st->code != HYC_OK) {
        hyc_free(g.meta);
        return st->code;
    }
    *meta = g.meta;
    return HYC_OK;
}
