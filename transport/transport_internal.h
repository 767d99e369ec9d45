/*
 * What the TCP and shared-memory transports share behind hy_transport.h:
 * whole-buffer socket I/O, and the client's frame reader (a thread that reads
 * the server's frames, places TCP's DATA into the buffer, and records
 * DONE/FAIL for hy_tp_wait).
 */
#ifndef HY_TRANSPORT_INTERNAL_H
#define HY_TRANSPORT_INTERNAL_H

#include "hy_transport.h"

#include <pthread.h>

/* send()/recv() until n bytes moved (MSG_NOSIGNAL: a closed peer is HY_EIO,
 * never SIGPIPE). what names the transfer in the error. */
int hy_tp_send_all(int fd, const void *p, size_t n, const char *what, hy_err *err);
int hy_tp_recv_all(int fd, void *p, size_t n, const char *what, hy_err *err);
int hy_tp_send_frame(int fd, uint32_t type, uint64_t xfer, uint64_t off, uint64_t len, hy_err *err);
/* Send and receive timeouts on a socket (0: none). */
void hy_tp_set_timeouts(int fd, int send_ms, int recv_ms);

/* What every receiver keeps for hy_tp_wait: the last completions its
 * reader thread saw, and whether the connection died (and why). */
#define HY_TP_RING 64
typedef struct hy_tp_ring {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* on CLOCK_MONOTONIC: a completion arrived, or death */
    bool dead;
    char why[512];
    struct hy_tp_done_rec {
        uint64_t xfer, off, bytes;
        bool failed;
    } done[HY_TP_RING];
    uint64_t ndone;
} hy_tp_ring;
void hy_tp_ring_init(hy_tp_ring *g);
void hy_tp_ring_destroy(hy_tp_ring *g);
void hy_tp_ring_put(hy_tp_ring *g, uint64_t xfer, uint64_t off, uint64_t bytes, bool failed);
/* The first death is kept: later ones do not overwrite its reason. */
void hy_tp_ring_die(hy_tp_ring *g, const char *why);
/* hy_tp_receiver_ops.wait over the ring (kind names the transport in errors). */
int hy_tp_ring_wait(hy_tp_ring *g, hy_tp_kind kind, uint64_t xfer, int64_t timeout_ms,
                    uint64_t *off, uint64_t *bytes, hy_err *err);

/* The client's side over a stream socket, for TCP and shm. */
typedef struct hy_tp_stream_rx {
    hy_tp_receiver base;
    int fd;
    bool data_allowed; /* TCP: DATA frames carry bytes; shm: a DATA frame is an error */
    pthread_t reader;
    bool reader_started;
    hy_tp_ring ring;
    void (*release_buf)(struct hy_tp_stream_rx *rx); /* frees base.buf */
} hy_tp_stream_rx;

/* Starts the reader on an attached connection (rx fully set up but for the
 * thread and the ring); on failure nothing is started and the caller frees. */
int hy_tp_stream_rx_start(hy_tp_stream_rx *rx, hy_err *err);
extern const hy_tp_receiver_ops hy_tp_stream_rx_ops;

/* The attach handshake's client half: HELLO (with its ancillary fd when
 * pass_fd >= 0) then the ACK; the server's refusal as HY_EINVAL. */
int hy_tp_attach(int fd, uint64_t id, const uint8_t secret[HY_TP_SECRET_BYTES], int pass_fd,
                 const char *what, hy_err *err);

#endif
