/*
 * The data plane end to end against a real hypic-cached: a client opens a
 * transport session (shared memory, then TCP), asks Prefill for the running
 * state after [segments..., query], and finds in its own buffer, laid out as
 * the reply says, the state this test computes itself with the executor from
 * the same checkpoint (mode full: every token recomputed, so the two must
 * agree to fp32 rounding). GetEntry through a session gives the bytes the
 * chunked GetEntry gives. And what must fail does, while the daemon keeps
 * serving: return_state without a session, a session that is not the
 * caller's or not there, an offset past the buffer, a session whose client
 * vanished; an RDMA offer on a machine without a device falls back to the
 * next offer and is counted. CUDA IPC: a malformed offer is refused naming
 * its field; an offer the daemon cannot open (no runtime, no device, or a
 * handle that is not the client's) falls back to the next one saying why;
 * and with a GPU, the state lands in the client's device buffer (the daemon
 * and this test being the two processes) and equals the reference.
 */
#include "hy_model.h"
#include "hy_transport.h"
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>

static char g_tmp[128];
static hy_daemon g_d;
static hyc *g_c;

static const char *k_config = "listen: 127.0.0.1:0\n"
                              "http_listen: 127.0.0.1:0\n"
                              "models: [{name: tiny, path: var/models/tiny}]\n"
                              "tiers: {host: {bytes: 64M}}\n"
                              "executor: {threads: 2}\n"
                              "transport: {rdma: auto, max_buffer: 256M}\n"
                              "log: {requests: false}\n";

static uint32_t g_query[5] = {11, 22, 33, 44, 55};

static void request(segs *s, Hypic__V1__PrefillRequest *rq, int mode)
{
    Hypic__V1__PrefillRequest init = HYPIC__V1__PREFILL_REQUEST__INIT;
    *rq = init;
    rq->model = "tiny";
    rq->n_segments = s->n;
    rq->segments = s->sp;
    rq->n_query = 5;
    rq->query = g_query;
    rq->mode = (Hypic__V1__Mode)mode;
    rq->top_k = 3;
    rq->max_new_tokens = 2; /* the state is the one before the continuation */
    /* hits fetched: REUSE_AUTO may recompute one once both costs are measured */
    rq->reuse = HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH;
}

/* The state after the same tokens, computed here from the daemon's
 * checkpoint; NULL when it cannot be (a failure is asserted). */
static hy_state *reference_state(segs *s, hy_model **mout, hy_exec **xout)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/var/models/tiny", g_tmp);
    hy_model *m = NULL;
    hy_exec *x = NULL;
    hy_state *st = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 1024, &x, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &st, &e), 0);
    float *logits = malloc((size_t)hy_model_cfg(m)->vocab * sizeof *logits);
    for (size_t i = 0; i < s->n; i++) {
        int32_t t[600];
        for (size_t j = 0; j < s->tk[i].n_ids; j++) t[j] = (int32_t)s->tk[i].ids[j];
        CU_ASSERT_EQUAL(hy_exec_prefill(x, st, t, s->tk[i].n_ids, logits, &e), 0);
    }
    int32_t q[5];
    for (int j = 0; j < 5; j++) q[j] = (int32_t)g_query[j];
    CU_ASSERT_EQUAL(hy_exec_prefill(x, st, q, 5, logits, &e), 0);
    free(logits);
    *mout = m;
    *xout = x;
    return st;
}

/* Every tensor of the delivered state in buf equals the reference's. */
static void check_state(const Hypic__V1__Delivery *d, const uint8_t *buf, hy_state *ref,
                        const hy_model_config *c)
{
    CU_ASSERT_EQUAL_FATAL(d->n_tensors, (size_t)(2 * c->n_layers));
    CU_ASSERT_EQUAL(d->position, (uint64_t)hy_state_pos(ref));
    hy_state_tensor lay[2 * HY_MAX_LAYERS];
    uint64_t total;
    int n = hy_state_layout(c, hy_state_pos(ref), lay, &total);
    CU_ASSERT_EQUAL(d->bytes, total);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const Hypic__V1__StateTensor *t = d->tensors[i];
        CU_ASSERT_EQUAL(t->layer, lay[i].layer);
        CU_ASSERT_EQUAL((int)t->kind, (int)lay[i].part);
        CU_ASSERT_EQUAL(t->dtype, HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32);
        CU_ASSERT_EQUAL(t->bytes, lay[i].bytes);
        CU_ASSERT_EQUAL(t->offset, d->offset + lay[i].offset);
        CU_ASSERT_EQUAL(t->offset % HY_STATE_ALIGN, d->offset % HY_STATE_ALIGN);
        uint64_t elems = 1;
        for (size_t k = 0; k < t->n_shape; k++) elems *= t->shape[k];
        CU_ASSERT_EQUAL(elems * 4, t->bytes);
        const float *want = hy_state_part_data(ref, &lay[i]);
        if (!want || !t->bytes) continue;
        double r = hy_rel_diff((const float *)(buf + t->offset), want, t->bytes / 4);
        if (r > worst) worst = r;
    }
    if (worst > 1e-4) printf("\n  delivered vs reference: relative difference %.3g\n", worst);
    CU_ASSERT(worst <= 1e-4);
}

/* The session's delivered state, copied out (hyc_session_read: in place for
 * a host buffer, from the GPU for cuda_ipc) and checked against ref. */
static void check_delivered(hyc_session *ss, const Hypic__V1__Delivery *d, hy_state *ref,
                            const hy_model_config *c)
{
    hyc_status st;
    uint8_t *host = calloc(1, d->offset + d->bytes + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(host);
    CU_ASSERT_EQUAL(hyc_session_read(ss, d->offset, host + d->offset, d->bytes, &st), 0);
    check_state(d, host, ref, c);
    free(host);
}

/* Two full-mode states delivered into an open session of `kind` (the first
 * at offset, the second at 0: a second transfer, a new id), each equal to
 * the one computed here; the session is closed. */
static void deliver_into(hyc_session *ss, const char *kind, uint64_t offset)
{
    hyc_status st;
    CU_ASSERT_STRING_EQUAL(hyc_session_kind(ss), kind);
    segs s = {0};
    segs_doc(&s, 0, 300);
    segs_doc(&s, 1, 120);
    Hypic__V1__PrefillRequest rq;
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    Hypic__V1__PrefillResponse *r = NULL;
    int rc = hyc_prefill_state(g_c, ss, offset, &rq, &r, &st);
    if (rc) printf("\n  prefill_state over %s: %s\n", kind, st.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL((int)r->state->transport, (int)hy_tp_kind_parse(kind));
    CU_ASSERT_EQUAL(r->state->session, hyc_session_id(ss));
    CU_ASSERT_EQUAL(r->state->offset, offset);
    CU_ASSERT_EQUAL(r->n_generated, 2);
    hy_model *m;
    hy_exec *x;
    hy_state *ref = reference_state(&s, &m, &x);
    check_delivered(ss, r->state, ref, hy_model_cfg(m));
    printf("\n  %s: %llu bytes delivered in %.3f ms\n", kind, (unsigned long long)r->state->bytes,
           r->state->transfer_ms);
    hyc_free(r);
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    CU_ASSERT_EQUAL(hyc_prefill_state(g_c, ss, 0, &rq, &r, &st), 0);
    if (r) {
        check_delivered(ss, r->state, ref, hy_model_cfg(m));
        hyc_free(r);
    }
    hy_state_free(ref);
    hy_exec_free(x);
    hy_model_close(m);
    hyc_session_close(ss);
}

static void deliver_and_check(const char *kind, uint64_t offset)
{
    hyc_status st;
    hyc_session *ss = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_session_open(g_c, kind, 64u << 20, &ss, &st), 0);
    deliver_into(ss, kind, offset);
}

static void test_shm_state(void)
{
    deliver_and_check("shm", 4096);
}
static void test_tcp_state(void)
{
    deliver_and_check("tcp", 256);
}

/* pic over cached documents: the state arrives; its agreement with full is
 * the model's business (test_pic), here it must be a whole state. */
static void test_pic_state_and_entry(void)
{
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 3, 200);
    segs_doc(&s, 4, 150);
    warm_out w;
    CU_ASSERT_EQUAL_FATAL(warm(g_c, &s, &w, &st), 0);
    hyc_session *ss = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_session_open(g_c, "shm,tcp", 16u << 20, &ss, &st), 0);
    Hypic__V1__PrefillRequest rq;
    request(&s, &rq, HYPIC__V1__MODE__MODE_PIC);
    Hypic__V1__PrefillResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_prefill_state(g_c, ss, 0, &rq, &r, &st), 0);
    CU_ASSERT_EQUAL(r->segments[0]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    CU_ASSERT_EQUAL(r->state->position, 355);
    hyc_free(r);
    /* GetEntry through the session: the bytes the chunked GetEntry gives */
    void *bytes = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(get_entry(g_c, w.keys[0], &bytes, &n, &st), 0);
    Hypic__V1__GetEntryRequest gq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    gq.model = "tiny";
    gq.key = (ProtobufCBinaryData){32, w.keys[0]};
    Hypic__V1__EntryMeta *meta = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_get_entry_into(g_c, ss, 1000, &gq, &meta, &st), 0);
    CU_ASSERT_EQUAL(meta->bytes, n);
    CU_ASSERT(memcmp(hyc_session_buffer(ss) + 1000, bytes, n) == 0);
    hyc_free(meta);
    /* a key that is not cached: NOT_FOUND, a miss */
    uint8_t nokey[32] = {1, 2, 3};
    gq.key = (ProtobufCBinaryData){32, nokey};
    CU_ASSERT_EQUAL(hyc_get_entry_into(g_c, ss, 0, &gq, &meta, &st), HYC_NOT_FOUND);
    free(bytes);
    hyc_session_close(ss);
}

static void test_refusals(void)
{
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 0, 50);
    Hypic__V1__PrefillRequest rq;
    Hypic__V1__PrefillResponse *r = NULL;
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    rq.return_state = true;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "transport_session") != NULL);
    rq.transport_session = 999999;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_NOT_FOUND);
    CU_ASSERT(strstr(st.msg, "999999") != NULL);

    hyc_session *ss = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_session_open(g_c, "tcp", 1u << 20, &ss, &st), 0);
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    CU_ASSERT_EQUAL(hyc_prefill_state(g_c, ss, 1u << 20, &rq, &r, &st), HYC_RESOURCE_EXHAUSTED);
    CU_ASSERT(strstr(st.msg, "does not fit") != NULL);
    /* the session still works after a refused offset */
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    CU_ASSERT_EQUAL(hyc_prefill_state(g_c, ss, 0, &rq, &r, &st), 0);
    hyc_free(r);
    const uint64_t closed_id = hyc_session_id(ss);
    hyc_session_close(ss);
    /* closed: gone */
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    rq.return_state = true;
    rq.transport_session = closed_id;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_NOT_FOUND);

    /* kinds the client cannot name */
    CU_ASSERT_EQUAL(hyc_session_open(g_c, "udp", 1024, &ss, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "udp") != NULL);
    CU_ASSERT_EQUAL(health(g_c, &st), 0); /* and the daemon goes on */
}

/* A client that vanishes without CloseTransport: the transfer to it fails
 * as a failure (UNAVAILABLE), its session ends, and the daemon goes on. */
static void test_client_vanishes(void)
{
    hyc_status st;
    Hypic__V1__OpenTransportRequest oq = HYPIC__V1__OPEN_TRANSPORT_REQUEST__INIT;
    Hypic__V1__TransportOffer of = HYPIC__V1__TRANSPORT_OFFER__INIT, *ofp = &of;
    of.kind = HYPIC__V1__TRANSPORT__TRANSPORT_TCP;
    of.capacity = 32u << 20;
    oq.n_offers = 1;
    oq.offers = &ofp;
    Hypic__V1__OpenTransportResponse *a = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_open_transport(g_c, &oq, &a, &st), 0);
    hy_tp_receiver *rx = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_tp_tcp_receiver_open("127.0.0.1", (int)a->tcp_port, a->session,
                                                  a->secret.data, 32u << 20, &rx, &e),
                          0);
    hy_tp_receiver_free(rx); /* gone, without a word */
    segs s = {0};
    segs_doc(&s, 0, 500); /* a state of some megabytes: the writes must notice */
    Hypic__V1__PrefillRequest rq;
    Hypic__V1__PrefillResponse *r = NULL;
    int got = 0;
    for (int i = 0; i < 3 && got == 0; i++) {
        request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
        rq.return_state = true;
        rq.transport_session = a->session;
        got = hyc_prefill(g_c, &rq, &r, &st);
        hyc_free(r);
        r = NULL;
    }
    CU_ASSERT(got == HYC_UNAVAILABLE || got == HYC_NOT_FOUND);
    hyc_free(a);
    /* still serving, and a new session works */
    hyc_session *ss = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_session_open(g_c, "tcp", 32u << 20, &ss, &st), 0);
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    CU_ASSERT_EQUAL(hyc_prefill_state(g_c, ss, 0, &rq, &r, &st), 0);
    hyc_free(r);
    hyc_session_close(ss);
}

/* No RDMA device here: an RDMA offer is passed over for the next one, said
 * why, and counted in Stats. */
static void test_rdma_fallback(void)
{
    hyc_status st;
    Hypic__V1__StatsRequest sq = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *s0 = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_stats(g_c, &sq, &s0, &st), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s0->transport);
    if (s0->transport->rdma_available) {
        printf("\n  (this machine has an RDMA device: %s; the fallback case does not apply)\n",
               s0->transport->rdma_status);
        hyc_free(s0);
        return;
    }
    Hypic__V1__RdmaPeer rp = HYPIC__V1__RDMA_PEER__INIT;
    rp.qpn = 0x101, rp.psn = 5, rp.mtu = 1024, rp.addr = 0x10000, rp.rkey = 9, rp.bytes = 4096;
    Hypic__V1__TransportOffer of[2] = {HYPIC__V1__TRANSPORT_OFFER__INIT,
                                       HYPIC__V1__TRANSPORT_OFFER__INIT};
    Hypic__V1__TransportOffer *ofp[2] = {&of[0], &of[1]};
    of[0].kind = HYPIC__V1__TRANSPORT__TRANSPORT_RDMA, of[0].capacity = 4096, of[0].rdma = &rp;
    of[1].kind = HYPIC__V1__TRANSPORT__TRANSPORT_TCP, of[1].capacity = 4096;
    Hypic__V1__OpenTransportRequest oq = HYPIC__V1__OPEN_TRANSPORT_REQUEST__INIT;
    oq.n_offers = 2;
    oq.offers = ofp;
    Hypic__V1__OpenTransportResponse *a = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_open_transport(g_c, &oq, &a, &st), 0);
    CU_ASSERT_EQUAL(a->kind, HYPIC__V1__TRANSPORT__TRANSPORT_TCP);
    CU_ASSERT(strstr(a->passed_over, "rdma") != NULL);
    Hypic__V1__CloseTransportRequest cq = HYPIC__V1__CLOSE_TRANSPORT_REQUEST__INIT;
    cq.session = a->session;
    Hypic__V1__CloseTransportResponse *cr = NULL;
    CU_ASSERT_EQUAL(hyc_close_transport(g_c, &cq, &cr, &st), 0);
    hyc_free(cr);
    hyc_free(a);
    oq.n_offers = 1; /* RDMA alone */
    CU_ASSERT_EQUAL(hyc_open_transport(g_c, &oq, &a, &st), HYC_FAILED_PRECONDITION);
    CU_ASSERT(strstr(st.msg, "rdma") != NULL);
    Hypic__V1__StatsResponse *s1 = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_stats(g_c, &sq, &s1, &st), 0);
    CU_ASSERT_EQUAL(s1->transport->fallbacks,
                    s0->transport->fallbacks + 1); /* a refusal is not one */
    CU_ASSERT(s1->transport->n_kinds == HY_TP_KINDS - 1 && s1->transport->kinds[0]->transfers > 0);
    CU_ASSERT(hy_daemon_log_has(&g_d, "rdma unavailable"));
    /* and in /metrics */
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "curl -sf http://%s/metrics | grep -q '^hypic_transport_fallbacks_total %llu$' && "
             "curl -sf http://%s/metrics | grep -q "
             "'hypic_transport_transfers_total{transport=\"shm\"} [1-9]'",
             g_d.http, (unsigned long long)s1->transport->fallbacks, g_d.http);
    CU_ASSERT_EQUAL(system(cmd), 0);
    hyc_free(s0);
    hyc_free(s1);
}

/* OpenTransport with one cuda_ipc offer (handle of hlen bytes, filled with
 * fill) and a tcp one after it: the status, and the response when OK. */
static int open_cuda_offer(size_t hlen, uint8_t fill, const char *bus, bool then_tcp,
                           Hypic__V1__OpenTransportResponse **a, hyc_status *st)
{
    uint8_t handle[80];
    memset(handle, fill, sizeof handle);
    Hypic__V1__CudaIpcPeer cp = HYPIC__V1__CUDA_IPC_PEER__INIT;
    cp.handle = (ProtobufCBinaryData){hlen, handle};
    cp.pci_bus_id = (char *)bus;
    Hypic__V1__TransportOffer of[2] = {HYPIC__V1__TRANSPORT_OFFER__INIT,
                                       HYPIC__V1__TRANSPORT_OFFER__INIT};
    Hypic__V1__TransportOffer *ofp[2] = {&of[0], &of[1]};
    of[0].kind = HYPIC__V1__TRANSPORT__TRANSPORT_CUDA_IPC, of[0].capacity = 4096;
    of[0].cuda_ipc = &cp;
    of[1].kind = HYPIC__V1__TRANSPORT__TRANSPORT_TCP, of[1].capacity = 4096;
    Hypic__V1__OpenTransportRequest oq = HYPIC__V1__OPEN_TRANSPORT_REQUEST__INIT;
    oq.n_offers = then_tcp ? 2 : 1;
    oq.offers = ofp;
    *a = NULL;
    return hyc_open_transport(g_c, &oq, a, st);
}

static void close_session(uint64_t id)
{
    hyc_status st;
    Hypic__V1__CloseTransportRequest cq = HYPIC__V1__CLOSE_TRANSPORT_REQUEST__INIT;
    cq.session = id;
    Hypic__V1__CloseTransportResponse *cr = NULL;
    CU_ASSERT_EQUAL(hyc_close_transport(g_c, &cq, &cr, &st), 0);
    hyc_free(cr);
}

/* Malformed cuda_ipc offers are refused naming the field; a well-formed one
 * whose handle the daemon cannot open (no runtime or device here; on a GPU
 * machine a handle no process exported) falls back to tcp and says why. */
static void test_cuda_ipc_offers(void)
{
    hyc_status st;
    Hypic__V1__OpenTransportResponse *a = NULL;
    CU_ASSERT_EQUAL(open_cuda_offer(10, 7, "0000:3b:00.0", true, &a, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "offers[0].cuda_ipc.handle") != NULL);
    CU_ASSERT_EQUAL(open_cuda_offer(64, 0, "0000:3b:00.0", true, &a, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "all zero") != NULL);
    CU_ASSERT_EQUAL(open_cuda_offer(64, 7, "gpu0", true, &a, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "pci_bus_id") != NULL);
    CU_ASSERT_EQUAL_FATAL(open_cuda_offer(64, 7, "0000:3b:00.0", true, &a, &st), 0);
    CU_ASSERT_EQUAL(a->kind, HYPIC__V1__TRANSPORT__TRANSPORT_TCP);
    CU_ASSERT(strstr(a->passed_over, "cuda_ipc (") != NULL);
    printf("\n  passed over: %s\n", a->passed_over);
    close_session(a->session);
    hyc_free(a);
    /* alone, nothing can be served */
    CU_ASSERT_EQUAL(open_cuda_offer(64, 7, "0000:3b:00.0", false, &a, &st),
                    HYC_FAILED_PRECONDITION);
    CU_ASSERT(strstr(st.msg, "cuda_ipc") != NULL);
    Hypic__V1__StatsRequest sq = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *s1 = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_stats(g_c, &sq, &s1, &st), 0);
    CU_ASSERT(strstr(s1->transport->cuda_ipc_status, "not asked") == NULL);
    printf("  cuda_ipc status: %s\n", s1->transport->cuda_ipc_status);
    hyc_free(s1);
}

/* The C client's cuda_ipc session: asked of hyc_session_open it is refused
 * (its buffer is device memory); hyc_session_open_cuda offers it and, on a
 * machine with a GPU, the state lands in the device buffer and reads back
 * equal to the reference — else the offer is left out, saying why, and the
 * next one serves. */
static void test_cuda_ipc_session(void)
{
    hyc_status st;
    hyc_session *ss = NULL;
    CU_ASSERT_EQUAL(hyc_session_open(g_c, "cuda_ipc,tcp", 1u << 20, &ss, &st),
                    HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "hyc_session_open_cuda") != NULL);
    CU_ASSERT_EQUAL_FATAL(hyc_session_open_cuda(g_c, "cuda_ipc,tcp", -1, NULL, 64u << 20, &ss, &st),
                          0);
    if (!hyc_session_on_device(ss)) {
        printf("\n  cuda_ipc delivery skipped: no CUDA device for this process (%s)\n",
               hyc_session_passed_over(ss));
        CU_ASSERT_STRING_EQUAL(hyc_session_kind(ss), "tcp");
        CU_ASSERT(strstr(hyc_session_passed_over(ss), "cuda_ipc (this client: ") != NULL);
        hyc_session_close(ss);
        return;
    }
    deliver_into(ss, "cuda_ipc", 512);
}

/* transport.rdma: required on a machine without a device: the daemon refuses
 * to start, and says why. */
static void test_rdma_required(void)
{
    hy_tp_rdma *probe = NULL;
    hy_err e = {0};
    if (hy_tp_rdma_open(NULL, 0, -1, &probe, &e) == 0) {
        printf("\n  (this machine has an RDMA device: the refusal does not apply)\n");
        hy_tp_rdma_close(probe);
        return;
    }
    char dir[200];
    snprintf(dir, sizeof dir, "%s/required", g_tmp);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
    hy_daemon d;
    printf("\n  (a daemon that must not start; its log follows)\n");
    CU_ASSERT_NOT_EQUAL(hy_daemon_start(&d, dir,
                                        "listen: 127.0.0.1:0\nhttp_listen: \"\"\n"
                                        "models: [{name: tiny, path: var/models/tiny}]\n"
                                        "tiers: {host: {bytes: 16M}}\n"
                                        "transport: {rdma: required}\n"),
                        0);
    CU_ASSERT(hy_daemon_log_has(&d, "transport.rdma is required: no RDMA device"));
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_state_", g_tmp, sizeof g_tmp)) return 1;
    if (hy_daemon_start(&g_d, g_tmp, k_config)) {
        hy_test_rmtree(g_tmp);
        return 1;
    }
    g_c = connect_as(&g_d, NULL);
    static const hy_test_case cases[] = {
        {"shm: the state after the query, as computed here", test_shm_state},
        {"tcp: the same", test_tcp_state},
        {"pic state, GetEntry through a session", test_pic_state_and_entry},
        {"refusals", test_refusals},
        {"a client that vanishes", test_client_vanishes},
        {"rdma offer without a device: fallback, counted", test_rdma_fallback},
        {"rdma required without a device: no start", test_rdma_required},
        {"cuda_ipc offers: refusals, fallback", test_cuda_ipc_offers},
        {"cuda_ipc session: the state in device memory", test_cuda_ipc_session},
        {NULL, NULL},
    };
    int rc = hy_test_main("state_delivery", cases);
    hyc_close(g_c);
    if (!hy_daemon_stop(&g_d)) {
        fprintf(stderr, "hypic-cached did not stop cleanly on SIGTERM\n");
        rc = 1;
    }
    if (rc) { /* what the daemon said, for the CI log */
        char cmd[400];
        snprintf(cmd, sizeof cmd, "tail -n 60 '%s' >&2", g_d.log);
        if (system(cmd) != 0) fprintf(stderr, "(no daemon log)\n");
    }
    hy_test_rmtree(g_tmp);
    return rc;
}
