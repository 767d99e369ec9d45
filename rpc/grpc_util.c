/*
 * The gRPC core plumbing the server and the client share: byte buffers and
 * one-batch-at-a-time completion. Every wait here is on a queue with one
 * batch outstanding, and at most one other operation beside it (a server
 * call's RECV_CLOSE_ON_SERVER, started before its handler runs), so an event
 * that comes back is one of those two and is told apart by its tag.
 */
#include "rpc_internal.h"

#include <assert.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

grpc_byte_buffer *hy_rpc_buffer_from(const void *b, size_t n)
{
    grpc_slice s = grpc_slice_from_copied_buffer(b, n);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

grpc_slice hy_rpc_buffer_slice(grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb)) return grpc_empty_slice();
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    return s;
}

grpc_byte_buffer *hy_rpc_buffer_pack(const ProtobufCMessage *msg)
{
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return NULL;
    protobuf_c_message_pack(msg, b);
    grpc_byte_buffer *bb = hy_rpc_buffer_from(b, n);
    free(b);
    return bb;
}

int hy_rpc_batch(grpc_call *call, grpc_completion_queue *cq, const grpc_op *ops, size_t n,
                 void *tag)
{
    return hy_rpc_batch_beside(call, cq, ops, n, tag, NULL, NULL);
}

int hy_rpc_batch_beside(grpc_call *call, grpc_completion_queue *cq, const grpc_op *ops, size_t n,
                        void *tag, void *other, bool *other_done)
{
    return hy_rpc_batch_within(call, cq, ops, n, tag, other, other_done, 0, NULL);
}

int hy_rpc_batch_within(grpc_call *call, grpc_completion_queue *cq, const grpc_op *ops, size_t n,
                        void *tag, void *other, bool *other_done, int64_t idle_ms, bool *idled)
{
    if (grpc_call_start_batch(call, ops, n, tag, NULL) != GRPC_CALL_OK) return HY_EIO;
    gpr_timespec until = idle_ms > 0 ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                                    gpr_time_from_millis(idle_ms, GPR_TIMESPAN))
                                     : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, until, NULL);
        if (ev.type == GRPC_QUEUE_TIMEOUT) {
            /* No progress for idle_ms (a client that does not read, or does
             * not send): the call ends here, which completes the batch
             * (unsuccessfully) soon after; waited for with no limit. */
            char why[96];
            snprintf(why, sizeof why, "no progress for %lld ms (limits.idle_ms)",
                     (long long)idle_ms);
            grpc_call_cancel_with_status(call, GRPC_STATUS_DEADLINE_EXCEEDED, why, NULL);
            if (idled) *idled = true;
            until = gpr_inf_future(GPR_CLOCK_MONOTONIC);
            continue;
        }
        /* With an infinite deadline and a queue nobody shuts down while it
         * has work outstanding, only completions come back. */
        if (ev.type != GRPC_OP_COMPLETE) return HY_EIO;
        if (ev.tag == tag) return ev.success ? HY_OK : HY_EIO;
        assert(other && ev.tag == other); /* nothing else may be outstanding on cq */
        (void)other;                      /* read by the assertion only */
        if (other_done) *other_done = true;
    }
}

grpc_channel_args hy_rpc_args(grpc_arg args[HY_RPC_ARGS], size_t max_message, bool reuse_port)
{
    const int max = max_message > INT32_MAX ? INT32_MAX : (int)max_message;
    args[0] = (grpc_arg){
        .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, .value.integer = max};
    args[1] = (grpc_arg){
        .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, .value.integer = max};
    args[2] = (grpc_arg){
        .type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ALLOW_REUSEPORT, .value.integer = reuse_port};
    return (grpc_channel_args){.num_args = HY_RPC_ARGS, .args = args};
}

/* gRPC moves a connection forward (its TCP connect, the HTTP/2 handshake)
 * only while some thread polls: one waiting on a call, or a server's worker.
 * A fail-fast call to a channel that is dialling again ends at once, so in a
 * process whose calls all fail fast meanwhile (the membership's retries in
 * a client, a test) only gRPC's backup poller moves it on, every 5 s by
 * default: with the three polls a dial takes, etcd back after a restart was
 * reached 5-15 s later in 4 of 6 runs of tests/cluster/test_etcd, past a
 * 2 s lease. Every 100 ms instead, unless the environment sets it; read
 * once, by the first grpc_init of the process. */
static void backup_poll_once(void)
{
    setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", 0);
}

void hy_rpc_grpc_acquire(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, backup_poll_once);
    grpc_init(); /* reference-counted by gRPC itself */
}

void hy_rpc_grpc_release(void)
{
    grpc_shutdown();
}
