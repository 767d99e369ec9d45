/*
 * The gRPC client of hypic.v1: one channel, and calls that block until their
 * status arrives. Each call has a completion queue of its own and runs its
 * batches one at a time on it, so calls from different threads on one
 * channel never see each other's events.
 *
 * A call: [send metadata (the bearer token), the request, close] with
 * [receive the server's metadata]; then [receive one message] until the
 * stream ends (a unary method sends one); then [receive the status].
 */
#include "rpc_internal.h"

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hy_rpc_client {
    grpc_channel *ch;
    size_t max_message;
};

int hy_rpc_client_open(const char *target, size_t max_message, hy_rpc_client **out, hy_err *err)
{
    *out = NULL;
    hy_rpc_client *cl = calloc(1, sizeof *cl);
    if (!cl) return hy_err_set(err, HY_ENOMEM, "out of memory");
    hy_rpc_grpc_acquire();
    cl->max_message = max_message ? max_message : HY_RPC_MAX_MESSAGE_DEFAULT;
    grpc_arg args[HY_RPC_ARGS];
    grpc_channel_args cargs = hy_rpc_args(args, cl->max_message, false);
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    cl->ch = grpc_channel_create(target, creds, &cargs);
    grpc_channel_credentials_release(creds);
    if (!cl->ch) {
        free(cl);
        hy_rpc_grpc_release();
        return hy_err_set(err, HY_EINVAL, "cannot make a channel to %s", target);
    }
    *out = cl;
    return HY_OK;
}

void hy_rpc_client_close(hy_rpc_client *cl)
{
    if (!cl) return;
    grpc_channel_destroy(cl->ch);
    free(cl);
    hy_rpc_grpc_release();
}

int hy_rpc_client_call_raw(hy_rpc_client *cl, const char *path, const void *req, size_t n,
                           const char *token, int64_t deadline_ms,
                           int (*on_bytes)(void *ctx, const void *b, size_t n), void *ctx,
                           hy_rpc_status *st, hy_err *err)
{
    st->code = HY_RPC_UNKNOWN;
    st->msg[0] = '\0';
    gpr_timespec deadline = deadline_ms > 0
                                ? gpr_time_add(gpr_now(GPR_CLOCK_REALTIME),
                                               gpr_time_from_millis(deadline_ms, GPR_TIMESPAN))
                                : gpr_inf_future(GPR_CLOCK_REALTIME);
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    grpc_slice method = grpc_slice_from_copied_string(path);
    grpc_call *call = grpc_channel_create_call(cl->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, method,
                                               NULL, deadline, NULL);
    grpc_slice_unref(method);
    int rc = HY_OK, cb_rc = 0;

    char auth[600];
    grpc_metadata md = {0};
    if (token) {
        snprintf(auth, sizeof auth, "Bearer %s", token);
        md.key = grpc_slice_from_static_string("authorization");
        md.value = grpc_slice_from_copied_string(auth);
    }
    grpc_byte_buffer *out = hy_rpc_buffer_from(req, n);
    grpc_metadata_array initial;
    grpc_metadata_array_init(&initial);
    grpc_op ops[4] = {0};
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = token ? 1 : 0;
    ops[0].data.send_initial_metadata.metadata = token ? &md : NULL;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = out;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &initial;
    /* A failed batch here is a call that died (deadline, no server): its
     * status, received below, says why. */
    bool alive = hy_rpc_batch(call, cq, ops, 4, cl) == HY_OK;
    grpc_byte_buffer_destroy(out);

    while (alive) {
        grpc_byte_buffer *bb = NULL;
        grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
        op.data.recv_message.recv_message = &bb;
        if (hy_rpc_batch(call, cq, &op, 1, cl) != HY_OK || !bb) break;
        grpc_slice s = hy_rpc_buffer_slice(bb);
        grpc_byte_buffer_destroy(bb);
        if (on_bytes && !cb_rc)
            cb_rc = on_bytes(ctx, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
        grpc_slice_unref(s);
        if (cb_rc) { /* stop reading: the caller refused a message */
            grpc_call_cancel(call, NULL);
            break;
        }
    }

    grpc_metadata_array trailing;
    grpc_metadata_array_init(&trailing);
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();
    const char *error_string = NULL;
    grpc_op sop = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
    sop.data.recv_status_on_client.trailing_metadata = &trailing;
    sop.data.recv_status_on_client.status = &code;
    sop.data.recv_status_on_client.status_details = &details;
    sop.data.recv_status_on_client.error_string = &error_string;
    if (hy_rpc_batch(call, cq, &sop, 1, cl) != HY_OK) {
        rc = hy_err_set(err, HY_EIO, "%s: no status came back", path);
    } else {
        st->code = (int)code;
        snprintf(st->msg, sizeof st->msg, "%.*s", (int)GRPC_SLICE_LENGTH(details),
                 (const char *)GRPC_SLICE_START_PTR(details));
    }
    if (cb_rc && !rc) rc = hy_err_set(err, cb_rc, "%s: a response was refused", path);
    gpr_free((void *)error_string);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&trailing);
    grpc_metadata_array_destroy(&initial);
    if (token) grpc_slice_unref(md.value);
    grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return rc;
}

typedef struct decode_ctx {
    const ProtobufCMessageDescriptor *d;
    size_t max;
    int (*on_msg)(void *ctx, const ProtobufCMessage *msg);
    void *ctx;
    hy_err *err;
} decode_ctx;

static int decode_one(void *arg, const void *b, size_t n)
{
    decode_ctx *dc = arg;
    ProtobufCMessage *m;
    int rc = hy_rpc_unpack(dc->d, b, n, dc->max, &m, dc->err);
    if (rc) return rc;
    rc = dc->on_msg ? dc->on_msg(dc->ctx, m) : 0;
    protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}

int hy_rpc_client_call(hy_rpc_client *cl, const hy_rpc_method *m, const ProtobufCMessage *req,
                       const char *token, int64_t deadline_ms,
                       int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                       hy_rpc_status *st, hy_err *err)
{
    size_t n = protobuf_c_message_get_packed_size(req);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return hy_err_set(err, HY_ENOMEM, "out of memory");
    protobuf_c_message_pack(req, b);
    hy_err derr = {0};
    decode_ctx dc = {m->response, cl->max_message, on_msg, ctx, &derr};
    int rc =
        hy_rpc_client_call_raw(cl, m->path, b, n, token, deadline_ms, decode_one, &dc, st, err);
    free(b);
    if (rc == HY_EFORMAT && derr.msg[0] && err) *err = derr;
    return rc;
}
