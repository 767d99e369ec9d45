/*
 * The data plane's methods: OpenTransport and CloseTransport over the rpc
 * layer's session hub (transport/transport_hub.c), and the delivery of a running
 * state (Prefill's return_state) or an entry's bytes (GetEntry with a
 * transport session) into a client's registered buffer.
 *
 * A delivery holds its session for one transfer: it writes every region,
 * then DONE; any failure sends FAIL (best effort) and fails the call with
 * UNAVAILABLE, so a client never takes a partial state for a whole one. The
 * daemon keeps serving: a broken session is dropped by the hub, and the
 * next OpenTransport makes another.
 */
#include "handlers_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Hypic__V1__Transport pb_kind(hy_tp_kind k)
{
    return (Hypic__V1__Transport)k; /* the enums share their numbers */
}

/* Whose a session is, for the hub: the tenant's own, or a member's on the
 * tenant's behalf ("member/<tenant>": '/' is in no tenant name), counted
 * apart, so that neither a tenant's sessions nor other members' fetches take
 * the other's slots. */
static const char *owner_of(rq *r, char *buf, size_t cap)
{
    if (!r->who.member || r->s->open_access) return r->who.tenant;
    snprintf(buf, cap, "%s%s", HY_TP_PEER_PREFIX, r->who.tenant);
    return buf;
}

static hy_rpc_code need_hub(rq *r)
{
    if (!r->s->tp)
        return h_fail(r, HY_RPC_UNAVAILABLE,
                      "this server has no bulk transports started (an in-process service)");
    return HY_RPC_OK;
}

/* The hub's errors as statuses: a session that is not there is NOT_FOUND, one
 * not attached yet or busy is UNAVAILABLE (try again), a limit
 * RESOURCE_EXHAUSTED. */
static hy_rpc_code tp_fail(rq *r, int rc, const hy_err *e)
{
    hy_rpc_code code = rc == HY_ENOTFOUND      ? HY_RPC_NOT_FOUND
                       : rc == HY_EINVAL       ? HY_RPC_INVALID_ARGUMENT
                       : rc == HY_EUNSUPPORTED ? HY_RPC_FAILED_PRECONDITION
                       : rc == HY_ERANGE       ? HY_RPC_RESOURCE_EXHAUSTED
                                               : HY_RPC_UNAVAILABLE;
    return h_fail(r, code, "%s", e->msg);
}

static void peer_from_pb(const Hypic__V1__RdmaPeer *p, hy_tp_rdma_peer *o)
{
    memset(o, 0, sizeof *o);
    if (!p) return;
    o->qpn = p->qpn, o->psn = p->psn, o->lid = (uint16_t)p->lid, o->mtu = p->mtu;
    o->addr = p->addr, o->rkey = p->rkey, o->bytes = p->bytes;
    if (p->gid.len) memcpy(o->gid, p->gid.data, HY_MIN(p->gid.len, sizeof o->gid));
}

hy_rpc_code do_open_transport(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__OpenTransportRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = h_check_tenant(r, q->tenant)) || (c = need_hub(r))) return c;
    if (q->n_offers > 8)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'offers': %zu, over the limit of 8",
                      q->n_offers);
    hy_tp_offer offers[8];
    for (size_t i = 0; i < q->n_offers; i++) {
        const Hypic__V1__TransportOffer *o = q->offers[i];
        if (o->kind == HYPIC__V1__TRANSPORT__TRANSPORT_RDMA && o->rdma && o->rdma->gid.len &&
            o->rdma->gid.len != 16)
            return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                          "field 'offers[%zu].rdma.gid': %zu bytes, "
                          "want 16",
                          i, o->rdma->gid.len);
        offers[i] = (hy_tp_offer){.kind = (hy_tp_kind)o->kind, .capacity = o->capacity};
        if (o->kind == HYPIC__V1__TRANSPORT__TRANSPORT_RDMA) peer_from_pb(o->rdma, &offers[i].rdma);
        if (o->kind == HYPIC__V1__TRANSPORT__TRANSPORT_CUDA_IPC) {
            const Hypic__V1__CudaIpcPeer *p = o->cuda_ipc;
            if (!p || p->handle.len != HY_TP_CUDA_HANDLE_BYTES)
                return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                              "field 'offers[%zu].cuda_ipc.handle': %zu bytes, want %d", i,
                              p ? p->handle.len : 0, HY_TP_CUDA_HANDLE_BYTES);
            if (strlen(p->pci_bus_id) >= sizeof offers[i].cuda.pci_bus_id)
                return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                              "field 'offers[%zu].cuda_ipc.pci_bus_id': %zu characters, over %zu",
                              i, strlen(p->pci_bus_id), sizeof offers[i].cuda.pci_bus_id - 1);
            memcpy(offers[i].cuda.handle, p->handle.data, HY_TP_CUDA_HANDLE_BYTES);
            snprintf(offers[i].cuda.pci_bus_id, sizeof offers[i].cuda.pci_bus_id, "%s",
                     p->pci_bus_id);
            offers[i].cuda.offset = p->offset;
        }
    }
    hy_tp_accept a;
    hy_err e = {0};
    char own[HY_TENANT_MAX + 8];
    int rc = hy_tp_hub_open(r->s->tp, owner_of(r, own, sizeof own), offers, q->n_offers, &a, &e);
    if (rc) return tp_fail(r, rc, &e);
    Hypic__V1__OpenTransportResponse resp = HYPIC__V1__OPEN_TRANSPORT_RESPONSE__INIT;
    Hypic__V1__RdmaPeer rp = HYPIC__V1__RDMA_PEER__INIT;
    resp.kind = pb_kind(a.kind);
    resp.session = a.session;
    if (a.kind != HY_TP_RDMA && a.kind != HY_TP_CUDA_IPC)
        resp.secret = (ProtobufCBinaryData){sizeof a.secret, a.secret};
    resp.tcp_port = a.kind == HY_TP_TCP ? (uint32_t)a.tcp_port : 0;
    resp.shm_socket = a.shm_path;
    resp.passed_over = a.passed_over;
    if (a.kind == HY_TP_RDMA) {
        rp.qpn = a.rdma.qpn, rp.psn = a.rdma.psn, rp.lid = a.rdma.lid, rp.mtu = a.rdma.mtu;
        rp.gid = (ProtobufCBinaryData){sizeof a.rdma.gid, a.rdma.gid};
        resp.rdma = &rp;
    }
    return h_send(r, &resp.base);
}

hy_rpc_code do_close_transport(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__CloseTransportRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = h_check_tenant(r, q->tenant)) || (c = need_hub(r))) return c;
    hy_err e = {0};
    char own[HY_TENANT_MAX + 8];
    int rc = hy_tp_hub_close(r->s->tp, owner_of(r, own, sizeof own), q->session, &e);
    if (rc) return tp_fail(r, rc, &e);
    Hypic__V1__CloseTransportResponse resp = HYPIC__V1__CLOSE_TRANSPORT_RESPONSE__INIT;
    return h_send(r, &resp.base);
}

/* One transfer on session `id`: regions (src, bytes, at offset + off) then
 * DONE. On failure: FAIL, and the call's status says what broke. */
typedef struct region {
    const void *src;
    uint64_t off, bytes;
} region;

static hy_rpc_code transfer(rq *r, uint64_t id, uint64_t offset, const region *rg, size_t n,
                            uint64_t total, const char *what, Hypic__V1__Delivery *d)
{
    hy_rpc_code c;
    if ((c = need_hub(r))) return c;
    hy_tp_sender *snd;
    uint64_t xfer;
    hy_err e = {0};
    const double t0 = hy_now_s();
    char own[HY_TENANT_MAX + 8];
    int rc = hy_tp_hub_acquire(r->s->tp, owner_of(r, own, sizeof own), id, 5000, &snd, &xfer, &e);
    if (rc) return tp_fail(r, rc, &e);
    const uint64_t cap = snd->capacity;
    if (offset > cap || total > cap - offset) {
        hy_tp_hub_release(r->s->tp, id, snd, false, 0);
        return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                      "%s: %llu bytes at offset %llu do not fit transport session %llu's buffer "
                      "(%llu bytes)",
                      what, (unsigned long long)total, (unsigned long long)offset,
                      (unsigned long long)id, (unsigned long long)cap);
    }
    for (size_t i = 0; i < n && !rc; i++)
        if (rg[i].bytes)
            rc = hy_tp_write(snd, xfer, offset + rg[i].off, rg[i].src, rg[i].bytes, &e);
    if (!rc) rc = hy_tp_done(snd, xfer, offset, total, &e);
    if (rc) hy_tp_fail(snd, xfer);
    const hy_tp_kind kind = snd->kind;
    hy_tp_hub_release(r->s->tp, id, snd, rc == 0, total); /* frees a broken sender */
    snd = NULL;
    if (rc)
        return h_fail(r, HY_RPC_UNAVAILABLE,
                      "%s: the transfer over %s failed, nothing was delivered: %s (open a new "
                      "transport session)",
                      what, hy_tp_kind_name(kind), e.msg);
    d->transport = pb_kind(kind);
    d->session = id;
    d->transfer = xfer;
    d->offset = offset;
    d->bytes = total;
    d->transfer_ms = (hy_now_s() - t0) * 1e3;
    return HY_RPC_OK;
}

hy_rpc_code h_state_fits(rq *r, svc_model *sm, uint64_t id, uint64_t offset, int64_t tokens)
{
    hy_rpc_code c;
    if ((c = need_hub(r))) return c;
    uint64_t cap, total;
    hy_err e = {0};
    char own[HY_TENANT_MAX + 8];
    int rc = hy_tp_hub_capacity(r->s->tp, owner_of(r, own, sizeof own), id, &cap, &e);
    if (rc) return tp_fail(r, rc, &e);
    hy_state_tensor *lay = calloc((size_t)(2 * sm->c->n_layers), sizeof *lay);
    if (!lay) return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    hy_state_layout(sm->c, tokens, lay, &total);
    free(lay);
    if (offset > cap || total > cap - offset)
        return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                      "return_state: the state after %lld tokens is %llu bytes; at offset %llu "
                      "it does not fit transport session %llu's buffer (%llu bytes)",
                      (long long)tokens, (unsigned long long)total, (unsigned long long)offset,
                      (unsigned long long)id, (unsigned long long)cap);
    return HY_RPC_OK;
}

hy_rpc_code h_deliver_state(rq *r, svc_model *sm, hy_state *st, uint64_t id, uint64_t offset,
                            h_delivery *out)
{
    Hypic__V1__Delivery init = HYPIC__V1__DELIVERY__INIT;
    out->d = init;
    const int nt = 2 * sm->c->n_layers;
    hy_state_tensor *lay = calloc((size_t)nt, sizeof *lay);
    region *rg = calloc((size_t)nt, sizeof *rg);
    out->t = calloc((size_t)nt, sizeof *out->t);
    out->tp = calloc((size_t)nt, sizeof *out->tp);
    out->shape = calloc((size_t)nt * 3, sizeof *out->shape);
    hy_rpc_code c = HY_RPC_OK;
    if (!lay || !rg || !out->t || !out->tp || !out->shape) {
        c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto done;
    }
    uint64_t total;
    const int64_t pos = hy_state_pos(st);
    int n = hy_state_layout(sm->c, pos, lay, &total);
    for (int i = 0; i < n; i++) {
        rg[i] = (region){hy_state_part_data(st, &lay[i]), lay[i].offset, lay[i].bytes};
        Hypic__V1__StateTensor ti = HYPIC__V1__STATE_TENSOR__INIT;
        out->t[i] = ti;
        out->tp[i] = &out->t[i];
        out->t[i].layer = lay[i].layer;
        out->t[i].kind = (Hypic__V1__StateTensor__Kind)lay[i].part; /* the same numbers */
        out->t[i].dtype = HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
        for (int k = 0; k < lay[i].ndim; k++) out->shape[3 * i + k] = lay[i].shape[k];
        out->t[i].n_shape = (size_t)lay[i].ndim;
        out->t[i].shape = &out->shape[3 * i];
        out->t[i].offset = offset + lay[i].offset;
        out->t[i].bytes = lay[i].bytes;
    }
    c = transfer(r, id, offset, rg, (size_t)n, total, "return_state", &out->d);
    if (!c) {
        out->d.position = (uint64_t)pos;
        out->d.layers = (uint32_t)sm->c->n_layers; /* MLP-only layers have no tensors */
        out->d.n_tensors = (size_t)n;
        out->d.tensors = out->tp;
    }
done:
    free(lay);
    free(rg);
    return c;
}

void h_delivery_free(h_delivery *d)
{
    free(d->t);
    free(d->tp);
    free(d->shape);
    d->t = NULL, d->tp = NULL, d->shape = NULL;
}

hy_rpc_code h_deliver_bytes(rq *r, uint64_t id, uint64_t offset, const void *p, uint64_t n,
                            Hypic__V1__Delivery *d)
{
    Hypic__V1__Delivery init = HYPIC__V1__DELIVERY__INIT;
    *d = init;
    region rg = {p, 0, n};
    return transfer(r, id, offset, &rg, 1, n, "GetEntry", d);
}

void h_transport_stats(hy_svc *s, h_tp_stats *o)
{
    Hypic__V1__TransportStats init = HYPIC__V1__TRANSPORT_STATS__INIT;
    o->pb = init;
    if (!s->tp) return;
    hy_tp_hub_stats(s->tp, &o->st);
    o->pb.open_sessions = o->st.open_sessions;
    o->pb.fallbacks = o->st.fallbacks;
    o->pb.rdma_available = o->st.rdma_available;
    o->pb.rdma_status = o->st.rdma_why;
    o->pb.tcp_port = (uint32_t)o->st.tcp_port;
    o->pb.shm_socket = s->tp_shm_path;
    o->pb.cuda_ipc_available = o->st.cuda_available;
    o->pb.cuda_ipc_status = o->st.cuda_why;
    for (int k = HY_TP_TCP; k < HY_TP_KINDS; k++) {
        Hypic__V1__TransportKindStats ki = HYPIC__V1__TRANSPORT_KIND_STATS__INIT;
        o->kinds[k - 1] = ki;
        o->kinds[k - 1].kind = pb_kind((hy_tp_kind)k);
        o->kinds[k - 1].opened = o->st.opened[k];
        o->kinds[k - 1].transfers = o->st.transfers[k];
        o->kinds[k - 1].bytes = o->st.bytes[k];
        o->kinds[k - 1].failures = o->st.failures[k];
        o->kp[k - 1] = &o->kinds[k - 1];
    }
    o->pb.n_kinds = HY_TP_KINDS - 1;
    o->pb.kinds = o->kp;
}
