/*
 * The gRPC server of hypic.v1 over gRPC core's C API.
 *
 * Calls are served in slots, one per shared worker thread: each slot has a
 * completion queue its call is bound to, and gRPC is asked for each slot's
 * next call (grpc_server_request_call) with the hand-over coming on one
 * queue all shared workers wait on. Whichever worker takes a slot's call off
 * it serves the call: decodes the first request, runs the method's handler,
 * which sends responses and finishes the call through hy_rpc_call_*, each
 * step one batch waited for on the slot's queue; then asks for the slot's
 * next call. (The thread that read a call off its connection is then
 * usually the one that serves it; with a queue per worker, every call woke
 * another thread.) A dedicated worker (one method's) has a slot and a queue
 * of its own for both.
 *
 * Cancellation: the worker also starts RECV_CLOSE_ON_SERVER on its own (a
 * tag of its own, close_tag) — before a streaming method's handler runs, and
 * for a unary one when its handler first asks hy_rpc_call_cancelled (a
 * unary call that never asks sends it with its status, in one batch: one
 * wake-up of the worker less per call). Until the status is sent it can
 * only complete when the call is over without it: the client cancelled, its
 * deadline passed, its connection went, or the server is stopping. So a slot has at most two
 * operations outstanding, that one and the batch it waits for; every wait tells the two apart by
 * tag and records the close if it comes first, and hy_rpc_call_cancelled polls the queue without
 * blocking for it. The call is not released (nor the queue reused for the next call) until the
 * close has come back.
 *
 * Stopping: grpc_server_shutdown_and_notify stops new calls and
 * grpc_server_cancel_all_calls cancels those in flight (their batches fail,
 * handlers see HY_EIO); every worker's pending request then completes
 * unsuccessfully: a dedicated worker then exits, and the shared worker that
 * sees the last slot's request fail shuts the shared queue, which ends the
 * others; the shutdown notification arrives on a queue of its own; then the
 * server and the queues are destroyed.
 *
 * A call is of one of two kinds. A gRPC call is the above. A local call
 * (hy_rpc_call_local) runs a handler inside the caller's process on the same
 * hy_rpc_call_* surface, without gRPC: its request and each response are
 * packed and decoded again, as they would be on the wire, and the responses
 * go to the caller's callback; so a handler's cost can be measured with and
 * without the network around it.
 */
#include "rpc_internal.h"

#include <assert.h>
#include <errno.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum call_kind {
    CALL_GRPC = 0, /* from a client over gRPC (serve) */
    CALL_LOCAL,    /* in this process (hy_rpc_call_local) */
} call_kind;

/* What a local call has instead of gRPC's call: where responses go and
 * where the status is recorded. */
typedef struct local_end {
    int (*on_msg)(void *ctx, const ProtobufCMessage *msg);
    void *ctx;
    const char *authorization; /* the "authorization" metadata, or NULL */
    hy_rpc_status *st;
    int rc; /* 0, on_msg's non-zero return, or HY_EFORMAT for a response that did not decode */
    /* a client-streaming method's requests (hy_rpc_call_local_stream), handed
     * to hy_rpc_call_recv in turn */
    const ProtobufCMessage *const *reqs;
    size_t nreqs, next;
} local_end;

struct hy_rpc_call {
    call_kind kind;
    const hy_rpc_method *method;
    bool sent_initial, finished;
    /* CALL_GRPC */
    grpc_call *call;
    grpc_completion_queue *cq;
    grpc_metadata_array *md;
    grpc_byte_buffer *pending; /* the one response of a unary or client-streaming
                                * method, sent with the status (one batch) */
    gpr_timespec deadline;
    size_t max_message;
    int64_t idle_ms;       /* the longest one receive or send may wait; 0: no limit */
    bool idled;            /* a batch waited idle_ms: the call was ended DEADLINE_EXCEEDED */
    ProtobufCMessage *req; /* the first request, once received (owned by the call) */
    bool req_taken;        /* hy_rpc_call_request has run */
    bool recv_ended;       /* a client stream's end came (hy_rpc_call_recv) */
    /* RECV_CLOSE_ON_SERVER, started before the handler (tag &close_tag):
     * close_seen once it completed, cancelled as gRPC filled it in */
    bool close_started, close_seen;
    int cancelled;
    char close_tag;
    /* CALL_LOCAL */
    local_end *local;
};

/* One call's place: the queue its batches complete on, and what gRPC
 * fills in when it hands the call over. Used by one thread at a time. */
typedef struct slot {
    grpc_completion_queue *cq;
    grpc_call *call;
    grpc_call_details d;
    grpc_metadata_array md;
    gpr_timespec deadline; /* a registered method's (d has none) */
} slot;

typedef struct worker {
    hy_rpc_server *s;
    pthread_t thread;
    bool started;
    /* a worker of its own for one method (hy_rpc_server_config.dedicated):
     * it takes only that method's calls, on its own slot and queue; the
     * shared workers take any other call, in any of their slots */
    const hy_rpc_method *only;
    void *registered; /* gRPC's handle of that method */
    slot own;
} worker;

struct hy_rpc_server {
    grpc_server *server;
    grpc_completion_queue *notify_cq; /* the shutdown notification only */
    /* where the shared workers' slots are handed their calls; shut down by
     * the worker that sees the last slot fail (the server stopping) */
    grpc_completion_queue *call_cq;
    int nshared;
    _Atomic int slots_done;
    const hy_rpc_handler *handlers;
    void *app;
    hy_rpc_refused_fn on_refused;
    size_t max_message;
    int64_t idle_ms;
    bool handler_receives;
    int port, nworkers;
    worker *workers;
};

bool hy_rpc_call_peer_certified(const hy_rpc_call *c)
{
    if (c->kind != CALL_GRPC || !c->call) return false;
    /* gRPC names a TLS peer by its certificate (subject names) only when it
     * presented one, which the handshake then verified: a server that asks
     * for client certificates refuses one that does not chain to its CA. */
    grpc_auth_context *ac = grpc_call_auth_context(c->call);
    if (!ac) return false;
    const bool ok = grpc_auth_context_peer_is_authenticated(ac) != 0;
    grpc_auth_context_release(ac);
    return ok;
}

const hy_rpc_method *hy_rpc_call_method(const hy_rpc_call *c)
{
    return c->method;
}

/* Copies v[0..n) NUL-terminated into buf (cap bytes, truncated if longer). */
static const char *copy_value(const char *v, size_t n, char *buf, size_t cap)
{
    if (!cap) return NULL;
    if (n >= cap) n = cap - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return buf;
}

const char *hy_rpc_call_metadata(const hy_rpc_call *c, const char *key, char *buf, size_t cap)
{
    const void *v;
    size_t n;
    return hy_rpc_call_metadata_raw(c, key, &v, &n) ? copy_value(v, n, buf, cap) : NULL;
}

bool hy_rpc_call_metadata_raw(const hy_rpc_call *c, const char *key, const void **v, size_t *n)
{
    if (c->kind == CALL_LOCAL) {
        const char *a = c->local->authorization;
        if (!a || strcmp(key, "authorization") != 0) return false;
        *v = a;
        *n = strlen(a);
        return true;
    }
    for (size_t i = 0; i < c->md->count; i++) {
        const grpc_metadata *m = &c->md->metadata[i];
        if (grpc_slice_str_cmp(m->key, key) != 0) continue;
        *v = GRPC_SLICE_START_PTR(m->value);
        *n = GRPC_SLICE_LENGTH(m->value);
        return true;
    }
    return false;
}

bool hy_rpc_call_idled(const hy_rpc_call *c)
{
    return c->idled;
}

int64_t hy_rpc_call_ms_left(const hy_rpc_call *c)
{
    if (c->kind == CALL_LOCAL) return INT64_MAX; /* a local call has no deadline */
    if (gpr_time_cmp(c->deadline, gpr_inf_future(c->deadline.clock_type)) == 0) return INT64_MAX;
    gpr_timespec now = gpr_now(GPR_CLOCK_MONOTONIC);
    gpr_timespec dl = gpr_convert_clock_type(c->deadline, GPR_CLOCK_MONOTONIC);
    gpr_timespec left = gpr_time_sub(dl, now);
    return left.tv_sec * 1000 + left.tv_nsec / 1000000;
}

/* Runs a batch on the call's queue, recording the close if it comes back
 * first (see the top of the file). */
static int call_batch(hy_rpc_call *c, const grpc_op *ops, size_t n)
{
    bool idled = false;
    int rc = hy_rpc_batch_within(c->call, c->cq, ops, n, c, &c->close_tag, &c->close_seen,
                                 c->idled ? 0 : c->idle_ms, &idled);
    if (idled) c->idled = true;
    return rc;
}

/* Starts RECV_CLOSE_ON_SERVER on its own, so a handler can learn the call
 * was cancelled while it works (hy_rpc_call_cancelled). */
static void start_close(hy_rpc_call *c)
{
    grpc_op op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
    op.data.recv_close_on_server.cancelled = &c->cancelled;
    c->close_started = grpc_call_start_batch(c->call, &op, 1, &c->close_tag, NULL) == GRPC_CALL_OK;
}

/* Waits for the close started by start_close (the status has been sent or
 * the call cancelled, so it comes), after which gRPC no longer writes into
 * c and the slot's queue has nothing outstanding. */
static void wait_close(hy_rpc_call *c)
{
    while (c->close_started && !c->close_seen) {
        grpc_event ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        assert(ev.type == GRPC_OP_COMPLETE && ev.tag == &c->close_tag);
        c->close_seen = ev.type == GRPC_OP_COMPLETE;
    }
}

bool hy_rpc_call_cancelled(hy_rpc_call *c)
{
    if (c->kind == CALL_LOCAL) return c->local->rc != 0;
    if (!c->close_started && !c->finished) start_close(c); /* a unary call's first ask */
    if (c->close_started && !c->close_seen) {
        /* a zero deadline: one non-blocking look (it also lets gRPC read the
         * socket, which is how a reset stream or a closed connection shows) */
        grpc_event ev = grpc_completion_queue_next(c->cq, gpr_time_0(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_OP_COMPLETE) {
            assert(ev.tag == &c->close_tag); /* the handler's thread has no batch outstanding */
            c->close_seen = true;
        }
    }
    /* A close before our status is a call over without it, whatever flag
     * gRPC set; after the status, the flag says whether the call ended
     * cancelled all the same. */
    if (c->close_seen && (c->cancelled || !c->finished)) return true;
    /* gRPC cancels a call whose deadline passed, on a timer; say so at once */
    return hy_rpc_call_ms_left(c) < 0;
}

/* msg packed and decoded again as type, as it would cross the wire: 0 and
 * *out, or HY_ENOMEM / the decoder's error. */
static int repack(const ProtobufCMessageDescriptor *type, const ProtobufCMessage *msg,
                  ProtobufCMessage **out, hy_err *err)
{
    const size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return hy_err_set(err, HY_ENOMEM, "out of memory");
    protobuf_c_message_pack(msg, b);
    int rc = hy_rpc_unpack(type, b, n, SIZE_MAX, out, err);
    free(b);
    return rc;
}

/* A local call's send: the message packed, decoded again as the method's
 * response type and handed to on_msg, as a client would receive it. Once
 * on_msg has refused a message the caller is gone: this and every later
 * send fail HY_EIO, as they do when a gRPC client goes. */
static int local_send(hy_rpc_call *c, const ProtobufCMessage *msg, hy_err *err)
{
    local_end *l = c->local;
    if (l->rc) return hy_err_set(err, HY_EIO, "%s: the caller is gone", c->method->name);
    ProtobufCMessage *back;
    hy_err e = {0};
    int rc = repack(c->method->response, msg, &back, &e);
    if (rc == HY_ENOMEM) return hy_err_set(err, HY_ENOMEM, "out of memory");
    if (rc) { /* what a client would make of it: it cannot decode the response */
        l->rc = rc;
        return hy_err_set(err, HY_EIO, "%s: the caller could not decode the response: %s",
                          c->method->name, e.msg);
    }
    l->rc = l->on_msg ? l->on_msg(l->ctx, back) : 0;
    protobuf_c_message_free_unpacked(back, NULL);
    c->sent_initial = true;
    if (l->rc) return hy_err_set(err, HY_EIO, "%s: the caller is gone", c->method->name);
    return HY_OK;
}

int hy_rpc_call_send(hy_rpc_call *c, const ProtobufCMessage *msg, hy_err *err)
{
    if (c->finished) return hy_err_set(err, HY_EINVAL, "%s: send after finish", c->method->name);
    if (c->kind == CALL_LOCAL) return local_send(c, msg, err);
    grpc_byte_buffer *bb = hy_rpc_buffer_pack(msg);
    if (!bb) return hy_err_set(err, HY_ENOMEM, "out of memory");
    if (c->method->shape != HY_RPC_SERVER_STREAM) {
        /* One response: it leaves with the status, in hy_rpc_call_finish's
         * batch, which saves the worker a round trip through its queue per
         * call (a wake-up, measured a few µs of CPU). */
        if (c->pending) {
            grpc_byte_buffer_destroy(bb);
            return hy_err_set(err, HY_EINVAL, "%s: a second response on a method that has one",
                              c->method->name);
        }
        c->pending = bb;
        return HY_OK;
    }
    grpc_op ops[2] = {0};
    size_t n = 0;
    if (!c->sent_initial) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_SEND_MESSAGE;
    ops[n++].data.send_message.send_message = bb;
    int rc = call_batch(c, ops, n);
    grpc_byte_buffer_destroy(bb);
    c->sent_initial = true;
    if (rc) return hy_err_set(err, HY_EIO, "%s: the client is gone", c->method->name);
    return HY_OK;
}

/* A local call's receive: the next of its requests, HY_ENOTFOUND after the
 * last; a call made by hy_rpc_call_local has no request stream. */
static int local_recv(hy_rpc_call *c, ProtobufCMessage **msg, hy_err *err)
{
    local_end *l = c->local;
    if (!l->reqs)
        return hy_err_set(err, HY_EINVAL, "%s: this in-process call has no request stream",
                          c->method->name);
    if (l->next == l->nreqs) return HY_ENOTFOUND;
    return repack(c->method->request, l->reqs[l->next++], msg, err);
}

/* The next request message's bytes: 0 and *bb (NULL at the end of the
 * stream), or HY_EIO. */
static int recv_buffer(hy_rpc_call *c, grpc_byte_buffer **bb)
{
    *bb = NULL;
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
    op.data.recv_message.recv_message = bb;
    return call_batch(c, &op, 1);
}

/* Decodes a request's bytes as the method's request type. */
static int decode(hy_rpc_call *c, grpc_byte_buffer *bb, ProtobufCMessage **msg, hy_err *err)
{
    grpc_slice s = hy_rpc_buffer_slice(bb);
    int rc = hy_rpc_unpack(c->method->request, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s),
                           c->max_message, msg, err);
    grpc_slice_unref(s);
    return rc;
}

int hy_rpc_call_recv(hy_rpc_call *c, ProtobufCMessage **msg, hy_err *err)
{
    *msg = NULL;
    if (c->kind == CALL_LOCAL) return local_recv(c, msg, err);
    grpc_byte_buffer *bb;
    if (recv_buffer(c, &bb))
        return hy_err_set(err, HY_EIO, "%s: the client is gone", c->method->name);
    if (!bb) { /* the end of the stream, or a client that cancelled it */
        if (grpc_call_failed_before_recv_message(c->call))
            return hy_err_set(err, HY_EIO, "%s: the client is gone", c->method->name);
        c->recv_ended = true;
        return HY_ENOTFOUND;
    }
    int rc = decode(c, bb, msg, err);
    grpc_byte_buffer_destroy(bb);
    return rc;
}

/* Receives and decodes the one request of a unary or server-streaming call
 * within max bytes (the server's limit when 0). */
static int recv_first(hy_rpc_call *c, size_t max, hy_err *err)
{
    const size_t keep = c->max_message;
    if (max && max < c->max_message) c->max_message = max;
    int rc = hy_rpc_call_recv(c, &c->req, err);
    c->max_message = keep;
    if (rc == HY_ENOTFOUND)
        rc = hy_err_set(err, HY_ENOTFOUND, "the call carried no request message");
    return rc;
}

int hy_rpc_call_request(hy_rpc_call *c, size_t max, const ProtobufCMessage **req, hy_err *err)
{
    *req = NULL;
    if (c->method->shape == HY_RPC_CLIENT_STREAM)
        return hy_err_set(err, HY_EINVAL, "%s: a client stream has no one request (recv them)",
                          c->method->name);
    if (c->req_taken) {
        if (!c->req)
            return hy_err_set(err, HY_EINVAL, "%s: the request was refused", c->method->name);
        *req = c->req;
        return HY_OK;
    }
    c->req_taken = true;
    int rc = recv_first(c, max, err);
    *req = c->req;
    return rc;
}

/* The rest of a client stream refused before its end, read and dropped
 * (never decoded), up to max_message bytes and DRAIN_MS in all. A status
 * sent while the client still sends resets the stream (RST_STREAM), and
 * gRPC core's client (1.51) can then miss the status until its own
 * deadline: 16 concurrent PutEntry refused at a quota kept some clients
 * waiting 60 s in half the runs. Once the client has half-closed, the
 * status goes as on any call. A client that sends more than that, or not
 * in time, is cancelled with the status (the reset, as before); so is one
 * that never authenticated, which is not read at all. True when the call
 * was cancelled here. */
enum { DRAIN_MS = 250 };

static bool drain(hy_rpc_call *c, hy_rpc_code code, const char *msg)
{
    const gpr_timespec until =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(DRAIN_MS, GPR_TIMESPAN));
    for (size_t got = 0; code != HY_RPC_UNAUTHENTICATED && got <= c->max_message;) {
        grpc_byte_buffer *bb = NULL;
        grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
        op.data.recv_message.recv_message = &bb;
        if (grpc_call_start_batch(c->call, &op, 1, &bb, NULL) != GRPC_CALL_OK) return false;
        bool late = false;
        grpc_event ev;
        for (;;) {
            ev = grpc_completion_queue_next(
                c->cq, late ? gpr_inf_future(GPR_CLOCK_MONOTONIC) : until, NULL);
            if (ev.type == GRPC_QUEUE_TIMEOUT) { /* too slow: the reset ends the receive */
                grpc_call_cancel_with_status(c->call, (grpc_status_code)code, msg, NULL);
                late = true;
            } else if (ev.type == GRPC_OP_COMPLETE && ev.tag == &c->close_tag) {
                c->close_seen = true;
            } else {
                break;
            }
        }
        const bool ok = ev.type == GRPC_OP_COMPLETE && ev.success && bb;
        if (bb) got += grpc_byte_buffer_length(bb), grpc_byte_buffer_destroy(bb);
        if (late) return true;
        if (!ok) return false; /* the end of the stream (or the call is over) */
    }
    grpc_call_cancel_with_status(c->call, (grpc_status_code)code, msg, NULL);
    return true;
}

int hy_rpc_call_finish(hy_rpc_call *c, hy_rpc_code code, const char *msg)
{
    if (c->finished) return HY_EINVAL;
    c->finished = true;
    if (c->kind == CALL_LOCAL) {
        hy_rpc_status *st = c->local->st;
        st->code = (int)code;
        snprintf(st->msg, sizeof st->msg, "%s", msg ? msg : "");
        return HY_OK;
    }
    if (code != HY_RPC_OK && c->method->shape == HY_RPC_CLIENT_STREAM && !c->recv_ended &&
        c->close_started && drain(c, code, msg ? msg : "")) {
        if (c->pending) grpc_byte_buffer_destroy(c->pending);
        c->pending = NULL;
        wait_close(c);
        return HY_OK;
    }
    grpc_slice details = grpc_slice_from_copied_string(msg ? msg : "");
    grpc_op ops[4] = {0};
    size_t n = 0;
    if (!c->sent_initial) ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (c->pending) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = c->pending;
    }
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)code;
    ops[n++].data.send_status_from_server.status_details = &details;
    if (!c->close_started) { /* a unary call, or one refused: close with the status */
        ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
        ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
    }
    int rc = call_batch(c, ops, n);
    grpc_slice_unref(details);
    if (c->pending) grpc_byte_buffer_destroy(c->pending);
    c->pending = NULL;
    /* The status batch failed (or never started): make sure the call ends,
     * so the close comes back and the wait below is bounded. */
    if (rc && c->close_started && !c->close_seen) grpc_call_cancel(c->call, NULL);
    wait_close(c);
    return rc;
}

/* Ends a call the server answers itself, before any handler, and tells the
 * owner (known: the method is one of hy_rpc_methods). */
static void refuse(hy_rpc_server *s, hy_rpc_call *c, bool known, hy_rpc_code code, const char *msg)
{
    hy_rpc_call_finish(c, code, msg);
    if (s->on_refused) s->on_refused(s->app, known ? c->method : NULL, code, msg);
}

/* A status for a receive that failed: over a limit RESOURCE_EXHAUSTED, not a
 * request INVALID_ARGUMENT, no progress DEADLINE_EXCEEDED, a client gone
 * UNAVAILABLE. */
hy_rpc_code hy_rpc_recv_code(const hy_rpc_call *c, int rc)
{
    return c->idled                                 ? HY_RPC_DEADLINE_EXCEEDED
           : rc == HY_ERANGE || rc == HY_ENOMEM     ? HY_RPC_RESOURCE_EXHAUSTED
           : rc == HY_EFORMAT || rc == HY_ENOTFOUND ? HY_RPC_INVALID_ARGUMENT
                                                    : HY_RPC_UNAVAILABLE;
}

/* One call, from its first request to its status. */
static void serve(hy_rpc_server *s, grpc_completion_queue *cq, grpc_call *call,
                  const hy_rpc_method *m, gpr_timespec deadline, grpc_metadata_array *md)
{
    hy_rpc_call c = {.kind = CALL_GRPC,
                     .method = m,
                     .call = call,
                     .cq = cq,
                     .md = md,
                     .deadline = deadline,
                     .max_message = s->max_message,
                     .idle_ms = s->idle_ms};
    if (!s->handler_receives && c.method->shape != HY_RPC_CLIENT_STREAM) {
        hy_err e = {0};
        c.req_taken = true;
        int rc = recv_first(&c, 0, &e);
        if (rc) {
            refuse(s, &c, true, hy_rpc_recv_code(&c, rc), e.msg);
            return;
        }
    }
    if (c.method->shape != HY_RPC_UNARY) start_close(&c); /* unary: when first asked */
    s->handlers[c.method - hy_rpc_methods](s->app, &c, s->handler_receives ? NULL : c.req);
    if (!c.finished) hy_rpc_call_finish(&c, HY_RPC_INTERNAL, "the handler ended without a status");
    wait_close(&c); /* (done by the finish; the call must be drained before it is unref'd) */
    if (c.req) protobuf_c_message_free_unpacked(c.req, NULL);
}

/* A call to a method this server has no handler for (or none at all). */
static void serve_unknown(hy_rpc_server *s, grpc_completion_queue *cq, grpc_call *call,
                          const grpc_call_details *d, const hy_rpc_method *m,
                          grpc_metadata_array *md)
{
    static const hy_rpc_method unknown = {"(unknown)", "", HY_RPC_UNARY, NULL, NULL};
    hy_rpc_call c = {.kind = CALL_GRPC,
                     .method = m ? m : &unknown,
                     .call = call,
                     .cq = cq,
                     .md = md,
                     .deadline = d->deadline,
                     .idle_ms = s->idle_ms};
    char msg[300];
    snprintf(msg, sizeof msg, "no method %.*s in this server", (int)GRPC_SLICE_LENGTH(d->method),
             (const char *)GRPC_SLICE_START_PTR(d->method));
    refuse(s, &c, m != NULL, HY_RPC_UNIMPLEMENTED, msg);
}

int hy_rpc_call_local(const hy_rpc_method *m, const ProtobufCMessage *req, hy_rpc_handler h,
                      void *app, int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                      const char *authorization, hy_rpc_status *st)
{
    local_end l = {.on_msg = on_msg, .ctx = ctx, .authorization = authorization, .st = st};
    hy_rpc_call c = {.kind = CALL_LOCAL, .method = m, .local = &l};
    memset(st, 0, sizeof *st);
    if (!h || m->shape == HY_RPC_CLIENT_STREAM) {
        hy_rpc_call_finish(&c, HY_RPC_UNIMPLEMENTED,
                           h ? "a client-streaming method is called in-process with "
                               "hy_rpc_call_local_stream"
                             : "no handler for this method");
        return HY_OK;
    }
    /* The request as the server would hand it over: packed, decoded again
     * as the method's request type (bytes that are not one are
     * INVALID_ARGUMENT, before the handler, as on the wire). */
    ProtobufCMessage *in = NULL;
    hy_err e = {0};
    int rc = repack(m->request, req, &in, &e);
    if (rc) {
        hy_rpc_call_finish(
            &c, rc == HY_ENOMEM ? HY_RPC_RESOURCE_EXHAUSTED : HY_RPC_INVALID_ARGUMENT, e.msg);
        return HY_OK;
    }
    c.req = in; /* what hy_rpc_call_request answers */
    c.req_taken = true;
    h(app, &c, in);
    if (!c.finished) hy_rpc_call_finish(&c, HY_RPC_INTERNAL, "the handler ended without a status");
    protobuf_c_message_free_unpacked(in, NULL);
    return l.rc;
}

int hy_rpc_call_local_stream(const hy_rpc_method *m, const ProtobufCMessage *const *reqs,
                             size_t nreqs, hy_rpc_handler h, void *app,
                             int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                             const char *authorization, hy_rpc_status *st)
{
    static const ProtobufCMessage *const none[1];
    local_end l = {.on_msg = on_msg,
                   .ctx = ctx,
                   .authorization = authorization,
                   .st = st,
                   .reqs = nreqs ? reqs : none,
                   .nreqs = nreqs};
    hy_rpc_call c = {.kind = CALL_LOCAL, .method = m, .local = &l, .req_taken = true};
    memset(st, 0, sizeof *st);
    if (!h || m->shape != HY_RPC_CLIENT_STREAM) {
        hy_rpc_call_finish(&c, HY_RPC_UNIMPLEMENTED,
                           h ? "hy_rpc_call_local_stream is for client-streaming methods"
                             : "no handler for this method");
        return HY_OK;
    }
    h(app, &c, NULL);
    if (!c.finished) hy_rpc_call_finish(&c, HY_RPC_INTERNAL, "the handler ended without a status");
    return l.rc;
}

/* The call a slot was handed, served: found by its path (a dedicated
 * worker's is its method), then the slot is reset for the next. */
static void slot_serve(hy_rpc_server *s, slot *sl, const hy_rpc_method *only)
{
    const hy_rpc_method *m =
        only ? only
             : hy_rpc_method_find((const char *)GRPC_SLICE_START_PTR(sl->d.method),
                                  GRPC_SLICE_LENGTH(sl->d.method));
    const gpr_timespec deadline = only ? sl->deadline : sl->d.deadline;
    if (m && s->handlers[m - hy_rpc_methods])
        serve(s, sl->cq, sl->call, m, deadline, &sl->md);
    else
        serve_unknown(s, sl->cq, sl->call, &sl->d, m, &sl->md);
}

static void slot_reset(slot *sl)
{
    if (sl->call) grpc_call_unref(sl->call);
    sl->call = NULL;
    grpc_call_details_destroy(&sl->d);
    grpc_metadata_array_destroy(&sl->md);
}

/* Asks gRPC for the slot's next call: its completion comes on notify (the
 * shared workers' queue, or a dedicated worker's own), the call is bound to
 * the slot's queue. False once the server is shutting down. */
static bool slot_request(hy_rpc_server *s, slot *sl, grpc_completion_queue *notify,
                         void *registered)
{
    sl->call = NULL;
    sl->deadline = gpr_inf_future(GPR_CLOCK_REALTIME);
    grpc_call_details_init(&sl->d);
    grpc_metadata_array_init(&sl->md);
    const grpc_call_error ce =
        registered
            ? grpc_server_request_registered_call(s->server, registered, &sl->call, &sl->deadline,
                                                  &sl->md, NULL, sl->cq, notify, sl)
            : grpc_server_request_call(s->server, &sl->call, &sl->d, &sl->md, sl->cq, notify, sl);
    if (ce != GRPC_CALL_OK) {
        slot_reset(sl);
        return false;
    }
    return true;
}

/* A dedicated worker: one slot, its requests on the slot's own queue. */
static void *dedicated_main(void *arg)
{
    worker *w = arg;
    hy_rpc_server *s = w->s;
    slot *sl = &w->own;
    for (;;) {
        if (!slot_request(s, sl, sl->cq, w->registered)) return NULL;
        grpc_event ev =
            grpc_completion_queue_next(sl->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        const bool ok = ev.type == GRPC_OP_COMPLETE && ev.success;
        if (ok) slot_serve(s, sl, w->only);
        slot_reset(sl);
        if (!ok) return NULL; /* the server is shutting down */
    }
}

/* A shared slot asks for no more calls (the server is stopping): after the
 * last, nothing more can come on the shared queue, which is shut. */
static void slot_done(hy_rpc_server *s)
{
    if (atomic_fetch_add(&s->slots_done, 1) + 1 == s->nshared)
        grpc_completion_queue_shutdown(s->call_cq);
}

/* A shared worker: whichever slot's call comes first on the shared queue.
 * The thread that read the call off the connection is usually the one
 * waiting on that queue, so it serves the call itself, where a queue per
 * worker had it wake another thread for every call (a context switch each
 * way). The slot is this thread's until its next call is asked for. */
static void *shared_main(void *arg)
{
    worker *w = arg;
    hy_rpc_server *s = w->s;
    for (;;) {
        grpc_event ev =
            grpc_completion_queue_next(s->call_cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN) return NULL;
        if (ev.type != GRPC_OP_COMPLETE) continue;
        slot *sl = ev.tag;
        if (ev.success) slot_serve(s, sl, NULL);
        slot_reset(sl);
        if (!ev.success || !slot_request(s, sl, s->call_cq, NULL)) slot_done(s);
    }
}

int hy_rpc_server_port(const hy_rpc_server *s)
{
    return s->port;
}

static void drain_destroy(grpc_completion_queue *cq)
{
    if (!cq) return;
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

void hy_rpc_server_stop(hy_rpc_server *s)
{
    if (!s) return;
    if (s->server) {
        static int notify_tag;
        grpc_server_shutdown_and_notify(s->server, s->notify_cq, &notify_tag);
        grpc_server_cancel_all_calls(s->server);
        /* every worker ends: a dedicated one when its request fails, the
         * shared ones when the last slot's has (which shuts their queue) */
        for (int i = 0; i < s->nworkers; i++)
            if (s->workers[i].started) pthread_join(s->workers[i].thread, NULL);
        grpc_completion_queue_next(s->notify_cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        grpc_server_destroy(s->server);
    }
    for (int i = 0; i < s->nworkers; i++) drain_destroy(s->workers[i].own.cq);
    drain_destroy(s->call_cq);
    drain_destroy(s->notify_cq);
    free(s->workers);
    free(s);
    hy_rpc_grpc_release();
}

/* Whether address ("HOST:PORT", "[V6]:PORT", ":PORT") can be bound, tried
 * here with the socket options gRPC uses (SO_REUSEADDR, no SO_REUSEPORT, an
 * IPv6 socket dual-stack) before gRPC is given it: gRPC core answers an
 * address it cannot bind with its own error lines on stderr ("E1207 ...
 * chttp2_server.cc ... No address added ...") before its caller can say
 * anything, so a port in use is found here and reported once, in the
 * caller's words. Like gRPC, one bound address of those a name resolves to
 * is enough. Returns 0, or the errno of the first address when none could
 * be bound. Port 0, and what this does not parse or resolve, are left to
 * gRPC (0). */
static int probe_bind(const char *address)
{
    const char *colon = strrchr(address, ':');
    if (!colon || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
        atoi(colon + 1) == 0)
        return 0;
    char host[256];
    const char *h = address;
    size_t hl = (size_t)(colon - address);
    const bool bracketed = hl >= 2 && h[0] == '[' && h[hl - 1] == ']';
    if (bracketed) h++, hl -= 2;
    if (hl >= sizeof host || (!bracketed && memchr(h, ':', hl))) return 0; /* "ipv4:...", ... */
    memcpy(host, h, hl);
    host[hl] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    if (getaddrinfo(hl ? host : NULL, colon + 1, &hints, &ai) != 0) return 0;
    int first = 0;
    bool bound = false;
    for (const struct addrinfo *a = ai; a && !bound; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue; /* a family this host lacks: gRPC skips it too */
        const int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (a->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0)
            bound = true;
        else if (!first)
            first = errno;
        close(fd);
    }
    freeaddrinfo(ai);
    return bound ? 0 : first;
}

int hy_rpc_server_start(const hy_rpc_server_config *cfg, const hy_rpc_handler *handlers, void *app,
                        hy_rpc_server **out, hy_err *err)
{
    *out = NULL;
    const int taken = probe_bind(cfg->address);
    if (taken)
        return hy_err_set(err, HY_EIO, "cannot listen on %s: %s", cfg->address, strerror(taken));
    hy_rpc_server *s = calloc(1, sizeof *s);
    if (!s) return hy_err_set(err, HY_ENOMEM, "out of memory");
    hy_rpc_grpc_acquire();
    s->handlers = handlers;
    s->app = app;
    s->on_refused = cfg->on_refused;
    s->max_message = cfg->max_message ? cfg->max_message : HY_RPC_MAX_MESSAGE_DEFAULT;
    s->idle_ms = cfg->idle_ms;
    s->handler_receives = cfg->handler_receives;
    size_t ndedicated = 0;
    while (cfg->dedicated && cfg->dedicated[ndedicated]) ndedicated++;
    s->nworkers = (cfg->workers > 0 ? cfg->workers : 4) + (int)ndedicated;
    s->workers = calloc((size_t)s->nworkers, sizeof *s->workers);
    if (!s->workers) {
        hy_rpc_server_stop(s);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    /* No SO_REUSEPORT (gRPC's default on Linux): a second server on a port in
     * use must fail, not share the port with the first. */
    grpc_arg args[HY_RPC_ARGS];
    grpc_channel_args cargs = hy_rpc_args(args, s->max_message, false);
    s->server = grpc_server_create(&cargs, NULL);
    s->notify_cq = grpc_completion_queue_create_for_next(NULL);
    s->call_cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->server, s->call_cq, NULL);
    s->nshared = s->nworkers - (int)ndedicated;
    for (int i = 0; i < s->nworkers; i++) {
        s->workers[i].s = s;
        s->workers[i].own.cq = grpc_completion_queue_create_for_next(NULL);
        /* a dedicated worker's calls are handed over on its own queue */
        if (i >= s->nshared)
            grpc_server_register_completion_queue(s->server, s->workers[i].own.cq, NULL);
    }
    /* The dedicated methods' workers come last. A registered method's calls
     * go only to the workers that ask for it by its handle, so the shared
     * workers never see them and they never wait behind the shared ones. */
    for (size_t k = 0; k < ndedicated; k++) {
        worker *w = &s->workers[s->nworkers - (int)ndedicated + (int)k];
        w->only = hy_rpc_method_named(cfg->dedicated[k]);
        if (!w->only || !handlers[w->only - hy_rpc_methods]) {
            const char *name = cfg->dedicated[k];
            grpc_server_destroy(s->server);
            s->server = NULL;
            hy_rpc_server_stop(s);
            return hy_err_set(err, HY_EINVAL, "dedicated worker: '%s' is not a method served here",
                              name);
        }
        w->registered =
            grpc_server_register_method(s->server, w->only->path, NULL, GRPC_SRM_PAYLOAD_NONE, 0);
    }
    grpc_server_register_completion_queue(s->server, s->notify_cq, NULL);
    grpc_server_credentials *creds;
    if (cfg->tls_cert_pem && cfg->tls_key_pem) {
        grpc_ssl_pem_key_cert_pair pair = {cfg->tls_key_pem, cfg->tls_cert_pem};
        const grpc_ssl_client_certificate_request_type ask =
            !cfg->tls_client_ca_pem ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : cfg->tls_require_client_cert
                ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
        creds = grpc_ssl_server_credentials_create_ex(cfg->tls_client_ca_pem, &pair, 1, ask, NULL);
    } else {
        creds = grpc_insecure_server_credentials_create();
    }
    s->port = grpc_server_add_http2_port(s->server, cfg->address, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0) {
        grpc_server_destroy(s->server);
        s->server = NULL;
        hy_rpc_server_stop(s);
        return hy_err_set(err, HY_EIO, "cannot listen on %s (in use, or not an address)",
                          cfg->address);
    }
    grpc_server_start(s->server);
    for (int i = 0; i < s->nshared; i++)
        if (!slot_request(s, &s->workers[i].own, s->call_cq, NULL)) slot_done(s);
    for (int i = 0; i < s->nworkers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL,
                           i < s->nshared ? shared_main : dedicated_main, &s->workers[i])) {
            hy_rpc_server_stop(s);
            return hy_err_set(err, HY_ENOMEM, "cannot start a server thread");
        }
        s->workers[i].started = true;
    }
    *out = s;
    return HY_OK;
}
