/*
 * Bulk transports: how a running state or an entry's bytes reach a client's
 * own buffer without going through gRPC messages (docs/transports.md).
 *
 * One interface, three implementations, negotiated per client:
 *
 *   client                                   hypic-cached
 *   ------                                   ------------
 *   registers a buffer (capacity bytes)
 *   OpenTransport(offers, best first) ──────▶ hub: the first offer it can serve
 *                                  ◀──────── session id, secret, how to attach
 *   attaches (TCP: connects to the data port; shm: passes the memfd over the
 *   Unix socket; RDMA: its queue pair goes to RTS with the server's details)
 *   Prefill(return_state, session, offset) ─▶ sender: write regions, done(xfer)
 *                                  ◀──────── the reply: layout, transfer id
 *   receiver: wait(xfer) — every byte of the transfer is in the buffer
 *
 * The gRPC reply is the authority: a transfer is whole only when the reply
 * says it was delivered and wait() returned 0 for its id. A failed transfer
 * is reported as failed on both paths (the call's status, and FAIL on the
 * transport), never as a short success.
 *
 * Attach handshake (TCP and shm): the client sends one 32-byte HELLO frame
 * (session id and the 16-byte secret OpenTransport returned) and reads one
 * 32-byte ACK frame (`length` 0: attached; otherwise an hy_err code, and the
 * connection is closed). Everything after is frames from server to client:
 *
 *   offset 0  u32 magic  "HYTP" (0x50545948 little-endian)
 *          4  u32 type   hy_tp_frame_type
 *          8  u64 xfer   the transfer id (HELLO: the session id)
 *         16  u64 offset into the client's buffer (HELLO/ACK: see below)
 *         24  u64 length bytes that follow (DATA), the transfer's bytes (DONE)
 *
 * All fields little-endian. HELLO carries the secret in offset and length
 * (16 bytes); ACK's offset is the session id and its length the status. On
 * TCP each DATA frame is followed by `length` bytes for buffer[offset..); on
 * shm there are no DATA frames (the server writes the shared mapping in
 * place) and DONE tells the client the writes are complete. RDMA uses no
 * frames: the data are one-sided RDMA WRITEs and completion is a zero-length
 * RDMA WRITE WITH IMMEDIATE whose immediate is the transfer id (bit 31 set:
 * the transfer failed).
 */
#ifndef HY_TRANSPORT_H
#define HY_TRANSPORT_H

#include "hy_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum hy_tp_kind {
    HY_TP_NONE = 0,
    HY_TP_TCP = 1,      /* a TCP connection to the daemon's data port: default and fallback */
    HY_TP_SHM = 2,      /* a memfd the client passes over a Unix socket: same host, in place */
    HY_TP_RDMA = 3,     /* libibverbs RC queue pair, one-sided RDMA WRITE (with immediate) */
    HY_TP_CUDA_IPC = 4, /* a worker's GPU buffer on this node, opened by its IPC handle */
} hy_tp_kind;
#define HY_TP_KINDS 5 /* hy_tp_kind values, HY_TP_NONE included */

/* "tcp", "shm", "rdma", "cuda_ipc" ("none" for HY_TP_NONE, NULL for anything else). */
const char *hy_tp_kind_name(hy_tp_kind k);
/* The kind named s (as hy_tp_kind_name spells it), or HY_TP_NONE. */
hy_tp_kind hy_tp_kind_parse(const char *s);

/* ---- frames (TCP and shm) ---- */

#define HY_TP_MAGIC        0x50545948u /* "HYTP" */
#define HY_TP_FRAME_BYTES  32
#define HY_TP_SECRET_BYTES 16
/* A transfer id has 31 bits: bit 31 of an RDMA immediate marks failure. */
#define HY_TP_XFER_MAX 0x7fffffffu

typedef enum hy_tp_frame_type {
    HY_TP_HELLO = 1, /* client → server: attach to session `xfer` with the secret */
    HY_TP_ACK = 2,   /* server → client: the attach's outcome */
    HY_TP_DATA = 3,  /* `length` bytes for buffer[offset..) follow (TCP) */
    HY_TP_DONE = 4,  /* transfer `xfer` is complete: `length` bytes at `offset` */
    HY_TP_FAIL = 5,  /* transfer `xfer` failed: discard what it wrote */
} hy_tp_frame_type;

typedef struct hy_tp_frame {
    uint32_t type; /* hy_tp_frame_type */
    uint64_t xfer, offset, length;
} hy_tp_frame;

/* Encodes f into out (HY_TP_FRAME_BYTES bytes). */
void hy_tp_frame_pack(const hy_tp_frame *f, uint8_t out[HY_TP_FRAME_BYTES]);
/* Decodes 32 bytes: HY_EFORMAT when the magic is wrong or the type unknown. */
int hy_tp_frame_unpack(const uint8_t in[HY_TP_FRAME_BYTES], hy_tp_frame *f, hy_err *err);
/* A HELLO for session `id` carrying `secret`. */
void hy_tp_hello_pack(uint64_t id, const uint8_t secret[HY_TP_SECRET_BYTES],
                      uint8_t out[HY_TP_FRAME_BYTES]);
/* The session id and secret of a HELLO frame (HY_EFORMAT if it is not one). */
int hy_tp_hello_unpack(const uint8_t in[HY_TP_FRAME_BYTES], uint64_t *id,
                       uint8_t secret[HY_TP_SECRET_BYTES], hy_err *err);

/* ---- the sender: the server's side of one client's session ---- */

typedef struct hy_tp_sender hy_tp_sender;
typedef struct hy_tp_sender_ops {
    /* Copies src[0..n) into the peer's buffer at offset off (the caller has
     * checked off + n <= capacity). The bytes may not be visible to the peer
     * until done() returns. HY_EIO when the peer is gone (the session is then
     * broken: every later call fails). */
    int (*write)(hy_tp_sender *s, uint64_t xfer, uint64_t off, const void *src, size_t n,
                 hy_err *err);
    /* Every write of xfer so far is in the peer's buffer; the peer is told
     * that `bytes` bytes at `off` are complete. */
    int (*done)(hy_tp_sender *s, uint64_t xfer, uint64_t off, uint64_t bytes, hy_err *err);
    /* Best effort: tells the peer xfer failed. */
    void (*fail)(hy_tp_sender *s, uint64_t xfer);
    void (*free)(hy_tp_sender *s);
} hy_tp_sender_ops;

struct hy_tp_sender {
    const hy_tp_sender_ops *ops;
    hy_tp_kind kind;
    uint64_t capacity; /* the peer's registered buffer, bytes */
    bool broken;       /* a write or done failed: the session is unusable */
    /* The connection the session lives on (TCP's data socket, shm's Unix
     * socket), which the client only reads after its HELLO: the hub takes a
     * hang-up or any byte on it for the client gone. -1: none (RDMA). */
    int conn_fd;
};

/* Calls through the ops, keeping `broken` (a broken sender refuses with HY_EIO). */
int hy_tp_write(hy_tp_sender *s, uint64_t xfer, uint64_t off, const void *src, size_t n,
                hy_err *err);
int hy_tp_done(hy_tp_sender *s, uint64_t xfer, uint64_t off, uint64_t bytes, hy_err *err);
void hy_tp_fail(hy_tp_sender *s, uint64_t xfer);
void hy_tp_sender_free(hy_tp_sender *s); /* NULL: no-op */

/* ---- the receiver: the client's side ---- */

typedef struct hy_tp_receiver hy_tp_receiver;
typedef struct hy_tp_receiver_ops {
    /* Blocks until transfer xfer is complete (0; *off and *bytes say where
     * it lies), failed (HY_EIO "transfer N failed"), the connection drops
     * (HY_EIO), or timeout_ms passes (HY_ERANGE; < 0: no limit). Completions
     * of other transfers that arrive meanwhile are remembered (the last 64).
     * RDMA: the immediate carries the id only, so *off and *bytes are 0 (the
     * gRPC reply says where the bytes are). */
    int (*wait)(hy_tp_receiver *r, uint64_t xfer, int64_t timeout_ms, uint64_t *off,
                uint64_t *bytes, hy_err *err);
    void (*free)(hy_tp_receiver *r);
} hy_tp_receiver_ops;

struct hy_tp_receiver {
    const hy_tp_receiver_ops *ops;
    hy_tp_kind kind;
    uint8_t *buf;      /* the registered buffer the server writes into */
    uint64_t capacity; /* its bytes */
    uint64_t session;  /* the id OpenTransport gave */
};

int hy_tp_wait(hy_tp_receiver *r, uint64_t xfer, int64_t timeout_ms, uint64_t *off, uint64_t *bytes,
               hy_err *err);
void hy_tp_receiver_free(hy_tp_receiver *r); /* NULL: no-op; closes the connection */

/* ---- TCP ---- */

/* Server: a sender over an attached, connected socket fd (ownership passes). */
int hy_tp_tcp_sender_new(int fd, uint64_t capacity, hy_tp_sender **out, hy_err *err);
/* Client: allocates a capacity-byte buffer, connects to host:port, attaches
 * to session `id` with `secret`, and starts a thread that places DATA frames
 * into the buffer as they arrive (so the server never blocks on a client that
 * is waiting for its gRPC reply). HY_EIO naming the address when it cannot
 * connect; the server's refusal (its ACK status) as HY_EINVAL. */
int hy_tp_tcp_receiver_open(const char *host, int port, uint64_t id,
                            const uint8_t secret[HY_TP_SECRET_BYTES], uint64_t capacity,
                            hy_tp_receiver **out, hy_err *err);

/* ---- shared memory ---- */

/* Server: a sender writing into fd, a memfd (or any mappable file) of at least
 * capacity bytes the client passed; mapped shared here, fd is closed.
 * notify_fd: the Unix socket DONE/FAIL frames go over (ownership passes). */
int hy_tp_shm_sender_new(int memfd, uint64_t capacity, int notify_fd, hy_tp_sender **out,
                         hy_err *err);
/* Client: creates a memfd of capacity bytes, maps it (r->buf: the state is
 * read there in place, no copy), connects to the Unix socket `path`, and
 * attaches to session `id` passing the memfd (SCM_RIGHTS). */
int hy_tp_shm_receiver_open(const char *path, uint64_t id, const uint8_t secret[HY_TP_SECRET_BYTES],
                            uint64_t capacity, hy_tp_receiver **out, hy_err *err);

/* ---- RDMA (libibverbs; always built, needs a device at run time) ---- */

/* What one side tells the other in OpenTransport. */
typedef struct hy_tp_rdma_peer {
    uint32_t qpn;    /* queue pair number (24 bits) */
    uint32_t psn;    /* initial packet sequence number (24 bits) */
    uint16_t lid;    /* InfiniBand local id (0 on RoCE) */
    uint8_t gid[16]; /* RoCE / global routing */
    uint32_t mtu;    /* path MTU bytes: 256, 512, 1024, 2048 or 4096 */
    uint64_t addr;   /* client: its registered buffer's address (server: 0) */
    uint32_t rkey;   /* client: the buffer's remote key (server: 0) */
    uint64_t bytes;  /* client: the buffer's length (server: 0) */
} hy_tp_rdma_peer;

/* Checks a peer's fields before any verbs call (as_client: the side that
 * offers a buffer, so addr, rkey and bytes must be set). HY_EINVAL naming the
 * field and its limit. */
int hy_tp_rdma_peer_check(const hy_tp_rdma_peer *p, bool as_client, hy_err *err);

typedef struct hy_tp_rdma hy_tp_rdma; /* an opened device: context, protection domain */

/* Opens `device` (NULL or "": the first with an active port) on `port`
 * (0: 1), using GID index gid_index (< 0: pick a RoCE v2 IPv4-mapped one, else 0).
 * HY_ENOTFOUND with the reason when there is none ("no RDMA device:
 * ibv_get_device_list found 0", "mlx5_0 port 1 is not active"). */
int hy_tp_rdma_open(const char *device, int port, int gid_index, hy_tp_rdma **out, hy_err *err);
void hy_tp_rdma_close(hy_tp_rdma *r); /* after every sender/receiver on it is freed */
const char *hy_tp_rdma_device_name(const hy_tp_rdma *r);

/* Server: a queue pair connected to the client's (RTR then RTS with the
 * client's details); *self: what the client needs to connect back. */
int hy_tp_rdma_sender_new(hy_tp_rdma *r, const hy_tp_rdma_peer *client, hy_tp_rdma_peer *self,
                          hy_tp_sender **out, hy_err *err);
/* Client: registers buf (capacity bytes; device memory when on_device, which
 * needs CUDA and the peer-memory module) and creates a queue pair; *self
 * goes into the offer. The receiver is usable after _connect. */
int hy_tp_rdma_receiver_new(hy_tp_rdma *r, void *buf, uint64_t capacity, bool on_device,
                            hy_tp_rdma_peer *self, hy_tp_receiver **out, hy_err *err);
int hy_tp_rdma_receiver_connect(hy_tp_receiver *rcv, const hy_tp_rdma_peer *server, hy_err *err);

/* ---- CUDA IPC (same node; the CUDA runtime loaded at run time) ---- */

#define HY_TP_CUDA_HANDLE_BYTES 64 /* a cudaIpcMemHandle_t */

/* What a worker offers: its buffer's IPC handle, the GPU it lives on and
 * where in the handle's allocation the buffer starts. */
typedef struct hy_tp_cuda_peer {
    uint8_t handle[HY_TP_CUDA_HANDLE_BYTES];
    char pci_bus_id[32]; /* "0000:3b:00.0", as cudaDeviceGetPCIBusId spells it */
    uint64_t offset;     /* the buffer's bytes from the allocation's start */
} hy_tp_cuda_peer;

/* Checks an offer's fields before any CUDA call: HY_EINVAL naming the field. */
int hy_tp_cuda_peer_check(const hy_tp_cuda_peer *p, uint64_t capacity, hy_err *err);

typedef struct hy_tp_cuda hy_tp_cuda; /* the loaded runtime and its devices */
/* Loads the CUDA runtime and counts the devices. HY_ENOTFOUND saying why
 * ("no CUDA runtime: …", "no CUDA device: cudaGetDeviceCount: …"). */
int hy_tp_cuda_open(hy_tp_cuda **out, hy_err *err);
void hy_tp_cuda_close(hy_tp_cuda *c); /* after every sender/receiver on it is freed */
int hy_tp_cuda_devices(const hy_tp_cuda *c);

/* Server: opens the peer's handle on the GPU with its bus id; write() copies
 * into that memory, done() waits for the device. HY_ENOTFOUND: no such GPU
 * here; HY_EINVAL: the handle does not open. */
int hy_tp_cuda_sender_new(hy_tp_cuda *c, const hy_tp_cuda_peer *peer, uint64_t capacity,
                          hy_tp_sender **out, hy_err *err);
/* Client: exports buf (device memory, capacity bytes, on `device`; buf NULL:
 * allocated here, freed with the receiver; device < 0: the current one);
 * *self goes into the offer. r->buf is the device pointer. */
int hy_tp_cuda_receiver_new(hy_tp_cuda *c, int device, void *buf, uint64_t capacity,
                            hy_tp_cuda_peer *self, hy_tp_receiver **out, hy_err *err);
/* Copies n bytes at off of a cuda_ipc receiver's device buffer into host dst. */
int hy_tp_cuda_receiver_read(hy_tp_receiver *r, uint64_t off, void *dst, size_t n, hy_err *err);

/* ---- the daemon's session hub ----
 *
 * Sessions, the listeners clients attach through, and the choice among a
 * client's offers. A session belongs to the tenant that opened it (another
 * tenant never finds it), serves one transfer at a time, and ends when its
 * client closes it, its connection breaks (a failed write), or it is not
 * attached within attach_timeout_ms of being opened. */

typedef enum hy_tp_rdma_mode {
    HY_TP_RDMA_AUTO = 0, /* use a device when there is one, else pass RDMA offers over */
    HY_TP_RDMA_OFF,      /* never: RDMA offers are passed over */
    HY_TP_RDMA_REQUIRED, /* a device must exist (else start fails) and every session is RDMA */
} hy_tp_rdma_mode;

typedef struct hy_tp_hub_config {
    const char *tcp_address; /* data port, "host:port" (port 0: any free); NULL: "127.0.0.1:0" */
    const char *shm_path;    /* the Unix socket for shm; NULL or "": no shm */
    hy_tp_rdma_mode rdma;
    const char *rdma_device; /* NULL: the first with an active port */
    int rdma_port, rdma_gid_index;
    uint32_t max_sessions;      /* open at once; 0: 64 */
    uint64_t max_buffer;        /* bytes per session's buffer; 0: 16 GiB */
    uint32_t tenant_sessions;   /* one tenant's sessions open at once; 0: max_sessions */
    uint64_t tenant_bytes;      /* one tenant's sessions' buffers together; 0: no limit */
    uint32_t attach_timeout_ms; /* 0: 10000 */
} hy_tp_hub_config;

typedef struct hy_tp_offer {
    hy_tp_kind kind;
    uint64_t capacity;    /* the client's buffer, bytes */
    hy_tp_rdma_peer rdma; /* HY_TP_RDMA: the client's queue pair and buffer */
    hy_tp_cuda_peer cuda; /* HY_TP_CUDA_IPC: the worker's GPU buffer */
} hy_tp_offer;

typedef struct hy_tp_accept {
    hy_tp_kind kind; /* the offer taken */
    uint64_t session;
    uint8_t secret[HY_TP_SECRET_BYTES]; /* TCP and shm: the HELLO's */
    int tcp_port;                       /* TCP: the data port */
    char shm_path[108];                 /* shm: the Unix socket */
    hy_tp_rdma_peer rdma;               /* RDMA: the server's queue pair */
    char passed_over[384]; /* why earlier offers were not taken ("" when the first was) */
} hy_tp_accept;

typedef struct hy_tp_stats {
    uint64_t open_sessions;
    uint64_t opened[HY_TP_KINDS], transfers[HY_TP_KINDS], bytes[HY_TP_KINDS],
        failures[HY_TP_KINDS]; /* by hy_tp_kind */
    uint64_t fallbacks;        /* RDMA offers passed over for another transport */
    bool rdma_available;
    char rdma_why[256]; /* the device's name, or why there is none */
    /* CUDA IPC: known once an offer asked (the runtime loads then) */
    bool cuda_available;
    char cuda_why[256]; /* the devices seen, why there are none, or "not asked yet" */
    int tcp_port;
} hy_tp_stats;

typedef struct hy_tp_hub hy_tp_hub;

/* Binds the data port and the Unix socket (an old socket file at shm_path
 * is replaced) and looks for an RDMA device. HY_EIO naming the address or
 * path that cannot be bound; with HY_TP_RDMA_REQUIRED and no device,
 * HY_ENOTFOUND saying why. */
int hy_tp_hub_start(const hy_tp_hub_config *cfg, hy_tp_hub **out, hy_err *err);
/* Closes the listeners, breaks every session, frees everything. NULL: no-op. */
void hy_tp_hub_stop(hy_tp_hub *h);

/* An owner named HY_TP_PEER_PREFIX "<tenant>" is another member fetching on
 * a tenant's behalf: its sessions count apart from clients' — their own
 * max_sessions, and per owner the same caps as a tenant's. */
#define HY_TP_PEER_PREFIX "member/"

/* Takes the first of offers[0..n) this daemon can serve (`tenant`: the
 * session's owner; the calls below name it the same way). HY_EINVAL: no
 * offer, a kind twice or unknown, a capacity of 0, a bad RDMA peer;
 * HY_ERANGE: capacity over max_buffer, max_sessions open, or the tenant's
 * tenant_sessions or tenant_bytes taken; HY_EUNSUPPORTED: none can be served
 * (the message says why for each). Sessions whose client hung up, or never
 * attached in time, are ended first and count for nobody. */
int hy_tp_hub_open(hy_tp_hub *h, const char *tenant, const hy_tp_offer *offers, size_t n,
                   hy_tp_accept *acc, hy_err *err);
/* Session `id`'s sender for one transfer, held until _release: waits for a
 * session still attaching (up to attach_timeout_ms) and for one busy with
 * another transfer (up to wait_ms). *xfer: the new transfer's id.
 * HY_ENOTFOUND: no such session of this tenant (closed, expired, broken);
 * HY_ERANGE: still busy or unattached after the wait. */
int hy_tp_hub_acquire(hy_tp_hub *h, const char *tenant, uint64_t id, int64_t wait_ms,
                      hy_tp_sender **s, uint64_t *xfer, hy_err *err);
/* The buffer bytes of this tenant's session id (HY_ENOTFOUND: none such). */
int hy_tp_hub_capacity(hy_tp_hub *h, const char *tenant, uint64_t id, uint64_t *capacity,
                       hy_err *err);
/* Ends the transfer: ok with its bytes counted, or failed. A sender left
 * broken ends its session. */
void hy_tp_hub_release(hy_tp_hub *h, uint64_t id, hy_tp_sender *s, bool ok, uint64_t bytes);
/* Ends session id (HY_ENOTFOUND when this tenant has none such). */
int hy_tp_hub_close(hy_tp_hub *h, const char *tenant, uint64_t id, hy_err *err);
void hy_tp_hub_stats(hy_tp_hub *h, hy_tp_stats *st);

#endif
