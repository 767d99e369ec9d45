/*
 * Private to rpc/: what the gRPC server and client share — byte buffers to
 * and from contiguous bytes, and running one batch of operations to its
 * completion on a completion queue that has nothing else outstanding (or,
 * on the server, one known operation beside it).
 */
#ifndef HY_RPC_INTERNAL_H
#define HY_RPC_INTERNAL_H

#include "hy_rpc.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <stdbool.h>

/* A byte buffer holding a copy of b[0..n). */
grpc_byte_buffer *hy_rpc_buffer_from(const void *b, size_t n);
/* A buffer's bytes as one slice (unref it). */
grpc_slice hy_rpc_buffer_slice(grpc_byte_buffer *bb);
/* A message packed into a new byte buffer; NULL when out of memory. */
grpc_byte_buffer *hy_rpc_buffer_pack(const ProtobufCMessage *msg);
/* Starts ops on call with tag and waits for it on cq (which must have
 * nothing else outstanding). 0 when the batch succeeded, HY_EIO otherwise. */
int hy_rpc_batch(grpc_call *call, grpc_completion_queue *cq, const grpc_op *ops, size_t n,
                 void *tag);
/* hy_rpc_batch on a queue where one other operation, tagged other, may be
 * outstanding beside the batch (a server call's RECV_CLOSE_ON_SERVER): if
 * its completion arrives while the batch is waited for, *other_done is set
 * and the wait goes on for tag. */
int hy_rpc_batch_beside(grpc_call *call, grpc_completion_queue *cq, const grpc_op *ops, size_t n,
                        void *tag, void *other, bool *other_done);
/* hy_rpc_batch_beside waiting at most idle_ms (> 0) for the batch: past that
 * the call is cancelled with DEADLINE_EXCEEDED (*idled set), and the batch,
 * which then fails, is waited for to its end. idle_ms 0: no limit. */
int hy_rpc_batch_within(grpc_call *call, grpc_completion_queue *cq, const grpc_op *ops, size_t n,
                        void *tag, void *other, bool *other_done, int64_t idle_ms, bool *idled);
/* Bytes per message each way when the caller says 0. */
#define HY_RPC_MAX_MESSAGE_DEFAULT (4u << 20)

/* The channel arguments both ends set: max_message as gRPC's receive and
 * send limits (clamped to INT32_MAX), and whether a server may share its
 * port (SO_REUSEPORT). args must hold HY_RPC_ARGS entries. */
#define HY_RPC_ARGS 3
grpc_channel_args hy_rpc_args(grpc_arg args[HY_RPC_ARGS], size_t max_message, bool reuse_port);
/* gRPC initialised once per user (server or client); balanced by _release. */
void hy_rpc_grpc_acquire(void);
void hy_rpc_grpc_release(void);

#endif
