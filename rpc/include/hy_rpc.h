/*
 * rpc: the hypic.v1 API shared by the daemon and its clients. The messages
 * are protoc-c's, generated from rpc/hypic.proto at build time
 * (Hypic__V1__LookupRequest, hypic__v1__lookup_request__pack/unpack, ...);
 * this header adds what protoc-c does not say: each method's gRPC path and
 * whether its request or its response is a stream, and bounded decoding of
 * bytes from the network.
 *
 * Uses common only: the model and the store are the daemon's business, and a
 * client links this library without either (docs/architecture.md#layering).
 */
#ifndef HY_RPC_H
#define HY_RPC_H

#include "hy_common.h"
#include "hypic.pb-c.h"

#include <stdbool.h>
#include <stddef.h>

/* How a method's messages flow (proto `stream` keywords). */
typedef enum hy_rpc_shape {
    HY_RPC_UNARY = 0,     /* one request, one response */
    HY_RPC_SERVER_STREAM, /* one request, a stream of responses (Warm, GetEntry, Watch) */
    HY_RPC_CLIENT_STREAM, /* a stream of requests, one response (PutEntry) */
} hy_rpc_shape;

typedef struct hy_rpc_method {
    const char *name; /* "Lookup" */
    const char *path; /* "/hypic.v1.Cache/Lookup": gRPC's :path */
    hy_rpc_shape shape;
    const ProtobufCMessageDescriptor *request, *response;
} hy_rpc_method;

/* The service's methods, in hypic.proto's order (the same order as
 * hypic__v1__cache__descriptor.methods). */
extern const hy_rpc_method hy_rpc_methods[];
extern const size_t hy_rpc_method_count;

/* The method whose gRPC path is path[0..len), or NULL. */
const hy_rpc_method *hy_rpc_method_find(const char *path, size_t len);
/* The method called name ("GetEntry"), or NULL. */
const hy_rpc_method *hy_rpc_method_named(const char *name);

/* Decodes len bytes as a message of descriptor d, as bytes from the
 * network must be: HY_ERANGE when len exceeds max (the message is not read)
 * or decoding would allocate more than hy_rpc_decode_budget(len);
 * HY_EFORMAT when a string field (at any depth) holds a NUL byte, the error
 * naming the field's path ("segments[2].tags[0]"), or when the bytes are not
 * such a message (protobuf-c's unpack refuses them); the error names the
 * message type. *out is freed with protobuf_c_message_free_unpacked(*out,
 * NULL). */
int hy_rpc_unpack(const ProtobufCMessageDescriptor *d, const void *buf, size_t len, size_t max,
                  ProtobufCMessage **out, hy_err *err);
/* The string check of hy_rpc_unpack alone: HY_EFORMAT naming the first
 * string field whose bytes hold a NUL; bytes that are not a message are not
 * its business (0). */
int hy_rpc_check_strings(const ProtobufCMessageDescriptor *d, const void *buf, size_t len,
                         hy_err *err);
/* What decoding len bytes may allocate: HY_RPC_DECODE_FACTOR x len +
 * HY_RPC_DECODE_FLOOR. Every hypic.v1 message a client sends in earnest
 * decodes within 4x its bytes plus a little (token ids of one byte are the most: 4 bytes
 * each decoded); messages of empty sub-messages are what the budget stops. */
#define HY_RPC_DECODE_FACTOR 8
#define HY_RPC_DECODE_FLOOR  (1 << 20)
size_t hy_rpc_decode_budget(size_t len);

/* ---- Status codes: gRPC's, by number (the same on every wire) ---- */

typedef enum hy_rpc_code {
    HY_RPC_OK = 0,
    HY_RPC_CANCELLED = 1,
    HY_RPC_UNKNOWN = 2,
    HY_RPC_INVALID_ARGUMENT = 3,
    HY_RPC_DEADLINE_EXCEEDED = 4,
    HY_RPC_NOT_FOUND = 5,
    HY_RPC_PERMISSION_DENIED = 7,
    HY_RPC_RESOURCE_EXHAUSTED = 8,
    HY_RPC_FAILED_PRECONDITION = 9,
    HY_RPC_UNIMPLEMENTED = 12,
    HY_RPC_INTERNAL = 13,
    HY_RPC_UNAVAILABLE = 14,
    HY_RPC_DATA_LOSS = 15,
    HY_RPC_UNAUTHENTICATED = 16,
} hy_rpc_code;

/* The status's name as gRPC spells it ("NOT_FOUND"), or NULL for a number
 * gRPC does not define. */
const char *hy_rpc_code_name(int code);

/* A call's outcome as the peer sent it. */
typedef struct hy_rpc_status {
    int code; /* hy_rpc_code */
    char msg[512];
} hy_rpc_status;

/* ---- An entry's chunks (rpc/chunks.c) ----
 *
 * The EntryChunk stream of GetEntry, Build (and PutEntry, on the daemon's
 * side) put back together: the first chunk carries the metadata (its bytes
 * at most max, when max is not 0); each piece goes at its offset, or right
 * after the previous piece; pieces may not overlap or pass meta.bytes. Zero
 * the struct, set max, add every chunk; the entry is whole when
 * hy_chunks_complete. On an error `why` says what broke. */
typedef struct hy_chunks {
    uint64_t max;  /* the caller's limit on meta.bytes; 0: none */
    uint8_t *buf;  /* the bytes so far (zero where nothing came yet) */
    uint64_t want; /* meta.bytes */
    uint64_t got, next, cap;
    bool started;
    struct {
        uint64_t lo, hi;
    } * spans; /* received, sorted, merged */
    size_t nspans, spans_cap;
    char why[200];
} hy_chunks;
/* HY_EFORMAT (a chunk that breaks the rules), HY_ENOMEM. */
int hy_chunks_add(hy_chunks *a, const Hypic__V1__EntryChunk *ch);
bool hy_chunks_complete(const hy_chunks *a);
/* The bytes, now the caller's (a 1-byte buffer for an empty entry; NULL when
 * out of memory), *n their count; a is freed. */
void *hy_chunks_take(hy_chunks *a, size_t *n);
void hy_chunks_free(hy_chunks *a);

/* ---- Server (gRPC core, HTTP/2) ----
 *
 * `workers` threads each take one call at a time from gRPC and run its
 * handler to the end, so at most `workers` calls are served at once and the
 * rest wait in gRPC's queue; each method named in `dedicated` has a worker
 * of its own besides, which takes only that method's calls (a Health that
 * never waits behind the others). An unknown method is answered
 * UNIMPLEMENTED without a handler.
 *
 * The request of a unary or server-streaming call is received either by
 * the server before the handler runs (bounded by max_message, which gRPC
 * also enforces on the wire; bytes that are not the method's request type
 * are answered INVALID_ARGUMENT without a handler), or, with
 * handler_receives, by the handler itself through hy_rpc_call_request, so it
 * can authenticate the call from its metadata first and never read the body
 * of a call it refuses. */
typedef struct hy_rpc_server hy_rpc_server;
typedef struct hy_rpc_call hy_rpc_call;

/* Serves one call. req: its decoded request, or NULL for a client-streaming
 * method (read them with hy_rpc_call_recv) and on a server whose handlers
 * receive (hy_rpc_call_request); owned by the server. The handler ends the
 * call with hy_rpc_call_finish (if it returns without, the call is finished
 * INTERNAL). */
typedef void (*hy_rpc_handler)(void *app, hy_rpc_call *call, const ProtobufCMessage *req);

/* Told of every call the server answers itself, before any handler: an
 * unknown method (m NULL) or one without a handler (UNIMPLEMENTED), a request
 * that is missing, does not decode (INVALID_ARGUMENT) or is over max_message
 * (RESOURCE_EXHAUSTED). For the owner's logs and counters; runs on a worker. */
typedef void (*hy_rpc_refused_fn)(void *app, const hy_rpc_method *m, hy_rpc_code code,
                                  const char *msg);

typedef struct hy_rpc_server_config {
    const char *address; /* e.g. "127.0.0.1:0" (port 0: any free port) */
    int workers;         /* calls served at once; 0: 4 */
    size_t max_message;  /* bytes per message each way; 0: 4 MiB */
    /* The longest any one receive or send of a call may wait for the client
     * (a request that does not come, a stream the client does not read):
     * past it the call ends DEADLINE_EXCEEDED and its worker is free. 0: no
     * limit. */
    int64_t idle_ms;
    bool handler_receives; /* handlers take their request (hy_rpc_call_request) */
    /* Names of methods ("Health") each served by a worker of its own
     * besides `workers`; NULL-terminated, or NULL: none. */
    const char *const *dedicated;
    /* TLS: the server's certificate chain and private key, PEM text (not
     * paths); both NULL: plaintext. */
    const char *tls_cert_pem, *tls_key_pem;
    /* Mutual TLS: PEM text of the authorities client certificates must
     * chain to. A client that presents one that does not verify is refused
     * at the handshake; one that presents none is served (its calls are
     * not hy_rpc_call_peer_certified) unless tls_require_client_cert.
     * NULL: no client certificate is asked for. */
    const char *tls_client_ca_pem;
    bool tls_require_client_cert;
    hy_rpc_refused_fn on_refused; /* optional */
} hy_rpc_server_config;

/* Binds, starts the workers and returns. handlers: hy_rpc_method_count
 * entries in hy_rpc_methods' order; a NULL entry answers UNIMPLEMENTED.
 * HY_EIO naming the address when it cannot be bound. */
int hy_rpc_server_start(const hy_rpc_server_config *cfg, const hy_rpc_handler *handlers, void *app,
                        hy_rpc_server **out, hy_err *err);
/* The port bound (the one chosen, for port 0). */
int hy_rpc_server_port(const hy_rpc_server *s);
/* Stops accepting calls, cancels those in flight, waits for the workers and
 * frees everything. NULL is a no-op. */
void hy_rpc_server_stop(hy_rpc_server *s);

const hy_rpc_method *hy_rpc_call_method(const hy_rpc_call *c);
/* Request metadata `key` (lower case), copied NUL-terminated into buf (cap
 * bytes, truncated if longer); NULL when the client sent none. */
const char *hy_rpc_call_metadata(const hy_rpc_call *c, const char *key, char *buf, size_t cap);
/* Request metadata `key` exactly as it came (NULs and all): *v (valid for
 * the call) and *n its length; false when the client sent none. */
bool hy_rpc_call_metadata_raw(const hy_rpc_call *c, const char *key, const void **v, size_t *n);
/* The request of a unary or server-streaming call, received and decoded
 * (hy_rpc_unpack) within max bytes (0: the server's max_message; a larger
 * max is the server's): owned by the call, the same pointer on every call.
 * HY_ENOTFOUND when the client sent none, HY_ERANGE over a limit, HY_EFORMAT
 * for bytes that are not the request (or a string holding a NUL), HY_EIO when
 * the client is gone or made no progress (hy_rpc_recv_code gives the status
 * to answer). On a server that receives first, and on a local call, the
 * request already received. */
int hy_rpc_call_request(hy_rpc_call *c, size_t max, const ProtobufCMessage **req, hy_err *err);
/* The status to end a call with when receiving its request failed with rc. */
hy_rpc_code hy_rpc_recv_code(const hy_rpc_call *c, int rc);
/* Whether a receive or send of the call waited the server's idle_ms and the
 * call was ended DEADLINE_EXCEEDED. */
bool hy_rpc_call_idled(const hy_rpc_call *c);
/* Whether the call came over a connection whose client presented a
 * certificate that verified against the server's tls_client_ca_pem (false
 * on plaintext, without one, and for a local call). */
bool hy_rpc_call_peer_certified(const hy_rpc_call *c);
/* Milliseconds left before the client's deadline (INT64_MAX: none). */
int64_t hy_rpc_call_ms_left(const hy_rpc_call *c);
/* Sends one response message: the response of a unary or client-streaming
 * method, or the next of a server stream (HY_EIO when the client is gone).
 * The one response of a unary or client-streaming method is held and leaves
 * with the status, in hy_rpc_call_finish's batch (one round trip less per
 * call); a second one is HY_EINVAL. */
int hy_rpc_call_send(hy_rpc_call *c, const ProtobufCMessage *msg, hy_err *err);
/* The next request of a client-streaming method: HY_ENOTFOUND after the
 * last, HY_EFORMAT for bytes that are not a request, HY_EIO when the client
 * is gone. Free *msg with protobuf_c_message_free_unpacked. */
int hy_rpc_call_recv(hy_rpc_call *c, ProtobufCMessage **msg, hy_err *err);
/* Ends the call with a status (msg may be NULL); once per call. Returns
 * once gRPC is done with the call (its close has come back). */
int hy_rpc_call_finish(hy_rpc_call *c, hy_rpc_code code, const char *msg);
/* Whether the call is over for its client: it cancelled the call
 * (hy_rpc_cancel_fire, an on_msg that refused a response), went away
 * (connection closed, process killed), its deadline has passed, or the
 * server is stopping. Never blocks, so a handler waiting for other work can
 * poll it every few ms and give up early; call it only from the handler's
 * own thread. A call that was not cancelled stays false through its sends.
 * On a local call (hy_rpc_call_local): true once on_msg has refused a
 * message, false before. */
bool hy_rpc_call_cancelled(hy_rpc_call *c);

/* One call of method m served inside this process: handler h runs on a call
 * that is not a gRPC call, in the caller's thread, and nothing goes through
 * the network. What a call over gRPC pays besides the network it pays too:
 * req is packed and decoded again as the method's request type before h
 * runs (the copy h gets is freed after it), and each message h sends is
 * packed, decoded as the response type and passed to on_msg (which must not
 * keep it; NULL: responses are dropped). On this call hy_rpc_call_metadata
 * answers `authorization` (the whole value, e.g. "Bearer <token>"; NULL: none)
 * for "authorization" and NULL for any other key, hy_rpc_call_ms_left
 * INT64_MAX (no deadline), hy_rpc_call_recv HY_EINVAL (there is no request
 * stream), and hy_rpc_call_finish records the status into *st. A
 * client-streaming method (hy_rpc_call_local_stream below), or a NULL h, is
 * UNIMPLEMENTED without running h; a
 * handler that returns without a status is INTERNAL. An on_msg that returns
 * non-zero is a caller gone: that send and every later one fail HY_EIO,
 * and hy_rpc_call_cancelled turns true.
 * Returns 0 when the call completed, whatever its status (*st says which),
 * on_msg's non-zero value when it refused a message, HY_EFORMAT when a
 * response did not decode as the method's response type. */
int hy_rpc_call_local(const hy_rpc_method *m, const ProtobufCMessage *req, hy_rpc_handler h,
                      void *app, int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                      const char *authorization, hy_rpc_status *st);
/* The same for a client-streaming method: h's hy_rpc_call_recv answers
 * reqs[0..nreqs) in turn (each packed and decoded again; the caller frees
 * what it receives, as over gRPC), then the end of the stream. Any other
 * method is UNIMPLEMENTED without running h. */
int hy_rpc_call_local_stream(const hy_rpc_method *m, const ProtobufCMessage *const *reqs,
                             size_t nreqs, hy_rpc_handler h, void *app,
                             int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                             const char *authorization, hy_rpc_status *st);

/* ---- Client ---- */

typedef struct hy_rpc_client hy_rpc_client;

typedef struct hy_rpc_client_options {
    const char *target; /* "host:port" */
    size_t max_message; /* bytes per message each way; 0: 4 MiB */
    /* PEM text of the certificate authorities the server's certificate must
     * chain to: the channel is TLS (gRPC core's SSL credentials). NULL: a
     * plaintext channel. */
    const char *tls_root_pem;
    /* The name the server's certificate must carry instead of target's host
     * (gRPC's ssl_target_name_override); NULL: target's host. TLS only. */
    const char *tls_server_name;
    /* Mutual TLS: this client's certificate chain and private key, PEM
     * text, presented when the server asks for one; both or neither. TLS
     * only. */
    const char *tls_cert_pem, *tls_key_pem;
    /* Calls wait (within their deadline) for the channel to connect instead
     * of failing UNAVAILABLE at once while a connection attempt has failed
     * and gRPC waits to dial again (gRPC's wait_for_ready). */
    bool wait_for_ready;
    /* A TCP connection of this client's own. Without it gRPC shares one
     * among the channels of a process to the same target and arguments, so
     * that many clients of one process are one HTTP/2 connection, read by one
     * server thread at a time. A client with a connection of its own also
     * replaces a channel whose connection failed with a fresh one at the
     * next call, so that call dials at once and fails only if its own
     * attempt does (gRPC would fail every call at once with the old error
     * until its backoff ran out). */
    bool own_connection;
    /* The metadata key a call's token is sent under, its value the token as
     * it is (etcd's "token"); NULL: "authorization: Bearer <token>". At
     * most 31 characters. */
    const char *token_key;
    /* How long one connection attempt (TCP, TLS, the HTTP/2 handshake) may
     * take before it counts as failed; 0: HY_RPC_CONNECT_TIMEOUT_MS. */
    int connect_timeout_ms;
} hy_rpc_client_options;

#define HY_RPC_CONNECT_TIMEOUT_MS 5000
/* A unary or server-streaming call of an own_connection client whose dial
 * failed is made again on a fresh channel for up to this long (within its
 * deadline) before it reports UNAVAILABLE. */
#define HY_RPC_DIAL_RETRY_MS 1000

/* A channel to o->target; nothing is sent until the first call, so a server
 * that is not there, or a certificate that does not verify, shows as
 * UNAVAILABLE on the first call, not here (so does PEM text gRPC cannot
 * load: check it before). HY_EINVAL when gRPC refuses the target or the
 * credentials. The options are copied: they need not outlive the call. */
int hy_rpc_client_open_ex(const hy_rpc_client_options *o, hy_rpc_client **out, hy_err *err);
/* hy_rpc_client_open_ex on a plaintext channel. */
int hy_rpc_client_open(const char *target, size_t max_message, hy_rpc_client **out, hy_err *err);
/* Closes the channel; calls in flight on it must have returned. NULL is a
 * no-op. */
void hy_rpc_client_close(hy_rpc_client *cl);

/* One call of method m with request req, sent with "authorization: Bearer
 * <token>" (or under the client's token_key) when token is not NULL, within
 * deadline_ms (0: none). Each
 * response is decoded and passed to on_msg (which must not keep it); a unary
 * method has one. An on_msg that returns non-zero cancels the call (the
 * server sees the client go) and that value is returned. Returns 0 when the
 * call completed, whatever its status (*st says which), HY_EFORMAT when a
 * response could not be decoded, HY_EIO when no call could be made. Calls
 * from several threads at once on one client are safe. */
int hy_rpc_client_call(hy_rpc_client *cl, const hy_rpc_method *m, const ProtobufCMessage *req,
                       const char *token, int64_t deadline_ms,
                       int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                       hy_rpc_status *st, hy_err *err);
/* The same with the request's bytes given as they are (for tests of what
 * the server does with bytes that are not a valid request) and each response
 * handed over undecoded. */
int hy_rpc_client_call_raw(hy_rpc_client *cl, const char *path, const void *req, size_t n,
                           const char *token, int64_t deadline_ms,
                           int (*on_bytes)(void *ctx, const void *b, size_t n), void *ctx,
                           hy_rpc_status *st, hy_err *err);

/* A cancellation handle: fire it from any thread and the call running under
 * it ends at once with status CANCELLED on the client, its message saying
 * the caller cancelled it (the server sees its call cancelled:
 * hy_rpc_call_cancelled); calls started under it after it fired end
 * CANCELLED without reaching the server. A handle never un-fires. One call
 * at a time may run under a handle. */
typedef struct hy_rpc_cancel hy_rpc_cancel;
/* A handle not fired. HY_ENOMEM when out of memory. */
int hy_rpc_cancel_new(hy_rpc_cancel **out, hy_err *err);
/* Frees the handle; no call may be running under it. NULL is a no-op. */
void hy_rpc_cancel_free(hy_rpc_cancel *c);
/* Fires the handle: thread-safe, idempotent. */
void hy_rpc_cancel_fire(hy_rpc_cancel *c);
/* Whether the handle has fired (thread-safe). */
bool hy_rpc_cancel_fired(const hy_rpc_cancel *c);

/* hy_rpc_client_call under a cancellation handle (NULL: none). A call the
 * handle cancelled returns 0 with st->code HY_RPC_CANCELLED, as any call
 * that completed with a status (the responses before the cancel were passed
 * to on_msg). */
int hy_rpc_client_call_ex(hy_rpc_client *cl, const hy_rpc_method *m, const ProtobufCMessage *req,
                          const char *token, int64_t deadline_ms, hy_rpc_cancel *cancel,
                          int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                          hy_rpc_status *st, hy_err *err);

/* Produces a client stream's next request: 0 with *msg set to the next
 * message, or to NULL after the last one (the stream then ends cleanly); a
 * non-zero HY_E* code abandons the stream. *msg must stay valid until next
 * is called again or the call returns; it is packed before then. */
typedef int (*hy_rpc_next_fn)(void *ctx, const ProtobufCMessage **msg, hy_err *err);

/* A client-streaming call of method m (PutEntry): each message next yields
 * is sent as one request of the stream, then the stream is closed and the
 * responses (one for PutEntry) are decoded and passed to on_msg as in
 * hy_rpc_client_call. When next fails the call is cancelled, so the server
 * sees a stream cut short and never a clean end, and next's code is
 * returned with its message. When the server ends the call early (e.g. it
 * refused the first message) the rest of the stream is not produced and *st
 * carries the server's status. Otherwise as hy_rpc_client_call. */
int hy_rpc_client_call_stream(hy_rpc_client *cl, const hy_rpc_method *m, const char *token,
                              int64_t deadline_ms, hy_rpc_next_fn next, void *next_ctx,
                              int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                              hy_rpc_status *st, hy_err *err);

#endif
