/*
 * What every bulk transport shares: the kinds' names, the 32-byte frames of
 * the TCP and shm wire (hy_transport.h draws them), and the calls through a
 * sender's or receiver's operations, which keep a broken session broken.
 */
#include "transport_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const kind_names[] = {"none", "tcp", "shm", "rdma", "cuda_ipc"};
_Static_assert(sizeof kind_names / sizeof kind_names[0] == HY_TP_KINDS, "a name per kind");

const char *hy_tp_kind_name(hy_tp_kind k)
{
    if ((unsigned)k >= sizeof kind_names / sizeof kind_names[0]) return NULL;
    return kind_names[k];
}

hy_tp_kind hy_tp_kind_parse(const char *s)
{
    for (unsigned k = 1; s && k < sizeof kind_names / sizeof kind_names[0]; k++)
        if (strcmp(s, kind_names[k]) == 0) return (hy_tp_kind)k;
    return HY_TP_NONE;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

void hy_tp_frame_pack(const hy_tp_frame *f, uint8_t out[HY_TP_FRAME_BYTES])
{
    put32(out, HY_TP_MAGIC);
    put32(out + 4, f->type);
    put64(out + 8, f->xfer);
    put64(out + 16, f->offset);
    put64(out + 24, f->length);
}

int hy_tp_frame_unpack(const uint8_t in[HY_TP_FRAME_BYTES], hy_tp_frame *f, hy_err *err)
{
    uint32_t magic = get32(in);
    if (magic != HY_TP_MAGIC)
        return hy_err_set(err, HY_EFORMAT, "transport frame: magic 0x%08x, want 0x%08x (HYTP)",
                          magic, HY_TP_MAGIC);
    f->type = get32(in + 4);
    if (f->type < HY_TP_HELLO || f->type > HY_TP_FAIL)
        return hy_err_set(err, HY_EFORMAT, "transport frame: type %u is not one of 1..5", f->type);
    f->xfer = get64(in + 8);
    f->offset = get64(in + 16);
    f->length = get64(in + 24);
    return 0;
}

void hy_tp_hello_pack(uint64_t id, const uint8_t secret[HY_TP_SECRET_BYTES],
                      uint8_t out[HY_TP_FRAME_BYTES])
{
    put32(out, HY_TP_MAGIC);
    put32(out + 4, HY_TP_HELLO);
    put64(out + 8, id);
    memcpy(out + 16, secret, HY_TP_SECRET_BYTES);
}

int hy_tp_hello_unpack(const uint8_t in[HY_TP_FRAME_BYTES], uint64_t *id,
                       uint8_t secret[HY_TP_SECRET_BYTES], hy_err *err)
{
    hy_tp_frame f;
    int rc = hy_tp_frame_unpack(in, &f, err);
    if (rc) return rc;
    if (f.type != HY_TP_HELLO)
        return hy_err_set(err, HY_EFORMAT, "transport attach: frame type %u, want HELLO (1)",
                          f.type);
    *id = f.xfer;
    memcpy(secret, in + 16, HY_TP_SECRET_BYTES);
    return 0;
}

int hy_tp_write(hy_tp_sender *s, uint64_t xfer, uint64_t off, const void *src, size_t n,
                hy_err *err)
{
    if (s->broken)
        return hy_err_set(err, HY_EIO,
                          "%s transport: the session is broken (an earlier "
                          "transfer failed)",
                          hy_tp_kind_name(s->kind));
    if (off > s->capacity || n > s->capacity - off)
        return hy_err_set(err, HY_ERANGE,
                          "%s transport: %zu bytes at offset %llu exceed the client's buffer "
                          "(%llu bytes)",
                          hy_tp_kind_name(s->kind), n, (unsigned long long)off,
                          (unsigned long long)s->capacity);
    int rc = s->ops->write(s, xfer, off, src, n, err);
    if (rc == HY_EIO) s->broken = true;
    return rc;
}

int hy_tp_done(hy_tp_sender *s, uint64_t xfer, uint64_t off, uint64_t bytes, hy_err *err)
{
    if (s->broken)
        return hy_err_set(err, HY_EIO, "%s transport: the session is broken",
                          hy_tp_kind_name(s->kind));
    int rc = s->ops->done(s, xfer, off, bytes, err);
    if (rc) s->broken = true;
    return rc;
}

void hy_tp_fail(hy_tp_sender *s, uint64_t xfer)
{
    if (!s->broken) s->ops->fail(s, xfer);
}

void hy_tp_sender_free(hy_tp_sender *s)
{
    if (s) s->ops->free(s);
}

int hy_tp_wait(hy_tp_receiver *r, uint64_t xfer, int64_t timeout_ms, uint64_t *off, uint64_t *bytes,
               hy_err *err)
{
    return r->ops->wait(r, xfer, timeout_ms, off, bytes, err);
}

void hy_tp_receiver_free(hy_tp_receiver *r)
{
    if (r) r->ops->free(r);
}

/* ---- the completion ring every receiver keeps ---- */

void hy_tp_ring_init(hy_tp_ring *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &a);
    pthread_condattr_destroy(&a);
}

void hy_tp_ring_destroy(hy_tp_ring *g)
{
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
}

void hy_tp_ring_put(hy_tp_ring *g, uint64_t xfer, uint64_t off, uint64_t bytes, bool failed)
{
    pthread_mutex_lock(&g->mu);
    g->done[g->ndone++ % HY_TP_RING] = (struct hy_tp_done_rec){xfer, off, bytes, failed};
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void hy_tp_ring_die(hy_tp_ring *g, const char *why)
{
    pthread_mutex_lock(&g->mu);
    if (!g->dead) {
        g->dead = true;
        snprintf(g->why, sizeof g->why, "%.500s", why);
    }
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int hy_tp_ring_wait(hy_tp_ring *g, hy_tp_kind kind, uint64_t xfer, int64_t timeout_ms,
                    uint64_t *off, uint64_t *bytes, hy_err *err)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    if (timeout_ms >= 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (timeout_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
    }
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        uint64_t n = g->ndone < HY_TP_RING ? g->ndone : HY_TP_RING;
        const struct hy_tp_done_rec *hit = NULL;
        for (uint64_t i = 0; i < n && !hit; i++) {
            const struct hy_tp_done_rec *d = &g->done[(g->ndone - 1 - i) % HY_TP_RING];
            if (d->xfer == xfer) hit = d;
        }
        if (hit) {
            if (hit->failed)
                rc = hy_err_set(err, HY_EIO, "%s transport: transfer %llu failed on the server",
                                hy_tp_kind_name(kind), (unsigned long long)xfer);
            else {
                if (off) *off = hit->off;
                if (bytes) *bytes = hit->bytes;
            }
            break;
        }
        if (g->dead) {
            rc = hy_err_set(err, HY_EIO, "transfer %llu: %s", (unsigned long long)xfer, g->why);
            break;
        }
        int w = timeout_ms >= 0 ? pthread_cond_timedwait(&g->cv, &g->mu, &dl)
                                : pthread_cond_wait(&g->cv, &g->mu);
        if (w == ETIMEDOUT) {
            rc =
                hy_err_set(err, HY_ERANGE, "%s transport: transfer %llu not complete after %lld ms",
                           hy_tp_kind_name(kind), (unsigned long long)xfer, (long long)timeout_ms);
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}
