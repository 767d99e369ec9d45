/*
 * The hbm tier (hbm_internal.h): one cudaMalloc'd region, the shared block allocator
 * (extents.c) over its offsets, and one stream for copies.
 *
 * The CUDA runtime's C API (cuda_runtime_api.h) is enough here: no kernels,
 * so no .cu files and no nvcc in the build. Without HY_HAVE_CUDA the file
 * still compiles: hy_hbm_available() says "built without CUDA", open
 * refuses, and since no handle can then exist the remaining entry points are
 * never reached with one (write and read still answer HY_EUNSUPPORTED rather
 * than pretend).
 *
 * Every call that touches CUDA first selects the tier's device: the current
 * device is per host thread, and the store may call from any of its callers'
 * threads.
 *
 * Locking: `mu` guards the allocator (ext) and the counters. A copy takes it
 * to check its block and again to count, never across the transfer, so
 * transfers of different blocks from different threads run concurrently
 * (they queue on the one stream; each caller waits on the stream, which may
 * include a neighbour's copy queued before its own).
 */
#include "hbm_internal.h"
#include "extents_internal.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#if HY_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define WITHOUT_CUDA "built without CUDA (configure with -DHY_WITH_CUDA=ON where the toolkit is)"

struct hy_hbm {
    int device;
    void *base; /* device memory: never dereferenced on the host */
    size_t capacity;
#if HY_HAVE_CUDA
    cudaStream_t stream;
#endif
    pthread_mutex_t mu; /* guards ext and the counters (top of the file) */
    hy_extents *ext;    /* which blocks of [0, capacity) are live */
    uint64_t writes, reads, bytes_written, bytes_read, write_ns, read_ns, pageable;
};

/* The mutex of a tier the caller only reads (stats, lookups): locking is not
 * a change of the tier's state. */
static pthread_mutex_t *mu_of(const hy_hbm *h)
{
    return (pthread_mutex_t *)&h->mu;
}

/* --- what works the same with or without CUDA ------------------------------ */

static void hbm_free(hy_hbm *h)
{
    pthread_mutex_destroy(&h->mu);
    hy_extents_free(h->ext);
    free(h);
}

int hy_hbm_alloc(hy_hbm *h, size_t bytes, size_t *off)
{
    assert(h && off);
    pthread_mutex_lock(&h->mu);
    int rc = hy_extents_alloc(h->ext, bytes, off);
    pthread_mutex_unlock(&h->mu);
    return rc;
}

void hy_hbm_release(hy_hbm *h, size_t off)
{
    assert(h);
    pthread_mutex_lock(&h->mu);
    hy_extents_release(h->ext, off);
    pthread_mutex_unlock(&h->mu);
}

size_t hy_hbm_block_size(const hy_hbm *h, size_t off)
{
    pthread_mutex_lock(mu_of(h));
    size_t n = hy_extents_block_size(h->ext, off);
    pthread_mutex_unlock(mu_of(h));
    return n;
}

void *hy_hbm_device_ptr(hy_hbm *h, size_t off)
{
    assert(h && off < h->capacity && off % HY_PAGE == 0);
    return (uint8_t *)h->base + off;
}

void hy_hbm_stats_get(const hy_hbm *h, hy_hbm_stats *st)
{
    hy_extents_stats x;
    pthread_mutex_lock(mu_of(h));
    hy_extents_stats_get(h->ext, &x);
    *st = (hy_hbm_stats){
        .device = h->device,
        HY_EXTENTS_STATS_INIT(x),
        .writes = h->writes,
        .reads = h->reads,
        .bytes_written = h->bytes_written,
        .bytes_read = h->bytes_read,
        .write_ns = h->write_ns,
        .read_ns = h->read_ns,
        .pageable = h->pageable,
    };
    pthread_mutex_unlock(mu_of(h));
}

int hy_hbm_check(const hy_hbm *h, hy_err *err)
{
    pthread_mutex_lock(mu_of(h));
    int rc = hy_extents_check(h->ext, err);
    pthread_mutex_unlock(mu_of(h));
    return rc;
}

/* The arguments of a copy: a live block that holds n bytes, a host buffer. */
static int check_copy(const hy_hbm *h, size_t off, const void *host, size_t n, hy_err *err)
{
    assert(h);
    if (!host) return hy_err_set(err, HY_EINVAL, "hbm: host buffer is NULL");
    size_t size = hy_hbm_block_size(h, off);
    if (!size) return hy_err_set(err, HY_EINVAL, "hbm: offset %zu is not a live block", off);
    if (n == 0 || n > size)
        return hy_err_set(err, HY_ERANGE, "hbm: %zu bytes for the block at %zu (%zu bytes)", n, off,
                          size);
    return HY_OK;
}

#if HY_HAVE_CUDA

/* --- with CUDA -------------------------------------------------------------- */

bool hy_hbm_available(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        if (why && n)
            snprintf(why, n, "no CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        (void)cudaGetLastError(); /* not sticky: clear it for later calls */
        return false;
    }
    if (count <= 0) {
        if (why && n) snprintf(why, n, "no CUDA device: cudaGetDeviceCount reports 0 devices");
        return false;
    }
    if (why && n) snprintf(why, n, "%d CUDA device%s", count, count == 1 ? "" : "s");
    return true;
}

/* A handle with its allocator and mutex, or NULL when out of host memory. */
static hy_hbm *hbm_new(size_t capacity)
{
    hy_hbm *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    if (hy_extents_new("hbm", capacity, &h->ext)) {
        free(h);
        return NULL;
    }
    pthread_mutex_init(&h->mu, NULL);
    h->capacity = capacity;
    return h;
}

/* A CUDA failure as HY_EIO (or code), naming the call. */
static int cuda_fail(hy_err *err, int code, const char *call, cudaError_t e)
{
    return hy_err_set(err, code, "hbm: %s: %s (%s)", call, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

int hy_hbm_open(size_t bytes, int device, hy_hbm **out, hy_err *err)
{
    *out = NULL;
    char why[256];
    if (!hy_hbm_available(why, sizeof why))
        return hy_err_set(err, HY_EUNSUPPORTED, "hbm: unavailable: %s", why);
    int count = 0;
    cudaGetDeviceCount(&count);
    if (device < 0 || device >= count)
        return hy_err_set(err, HY_EINVAL, "hbm: device %d does not exist (%d CUDA device%s)",
                          device, count, count == 1 ? "" : "s");
    if (bytes == 0) return hy_err_set(err, HY_EINVAL, "hbm: capacity is 0 bytes");
    if (bytes > ((size_t)1 << 48))
        return hy_err_set(err, HY_ERANGE, "hbm: capacity %zu exceeds 2^48 bytes", bytes);
    bytes = (bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;

    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return cuda_fail(err, HY_EIO, "cudaSetDevice", e);
    hy_hbm *h = hbm_new(bytes);
    if (!h) return hy_err_set(err, HY_ENOMEM, "hbm: out of host memory");
    h->device = device;
    e = cudaMalloc(&h->base, bytes);
    if (e != cudaSuccess) {
        size_t dfree = 0, dtotal = 0;
        (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
        cudaMemGetInfo(&dfree, &dtotal);
        h->base = NULL;
        hy_hbm_close(h);
        return hy_err_set(err, e == cudaErrorMemoryAllocation ? HY_ENOMEM : HY_EIO,
                          "hbm: cudaMalloc of %zu bytes on device %d: %s (device has %zu of %zu "
                          "bytes free)",
                          bytes, device, cudaGetErrorString(e), dfree, dtotal);
    }
    e = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        h->stream = NULL;
        hy_hbm_close(h);
        return cuda_fail(err, HY_EIO, "cudaStreamCreateWithFlags", e);
    }
    *out = h;
    return HY_OK;
}

void hy_hbm_close(hy_hbm *h)
{
    if (!h) return;
    if (h->base || h->stream) {
        /* Both are attempted whatever fails: nothing can be retried later. */
        cudaError_t e = cudaSetDevice(h->device), e2 = cudaSuccess, e3 = cudaSuccess;
        if (h->stream) e2 = cudaStreamDestroy(h->stream);
        if (h->base) e3 = cudaFree(h->base);
        e = e != cudaSuccess ? e : e2 != cudaSuccess ? e2 : e3;
        if (e != cudaSuccess)
            hy_log(HY_LOG_WARN, "hbm: freeing device %d's stream and memory: %s", h->device,
                   cudaGetErrorString(e));
    }
    hbm_free(h);
}

/* Whether host memory is pinned (page-locked and known to CUDA). */
static bool host_pinned(const void *p)
{
    struct cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return at.type == cudaMemoryTypeHost;
}

/* One copy on the tier's stream, waited for. */
static int copy(hy_hbm *h, void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                const void *host, hy_err *err)
{
    const char *what = kind == cudaMemcpyHostToDevice ? "host→device" : "device→host";
    uint64_t t0 = hy_now_ns();
    cudaError_t e = cudaSetDevice(h->device);
    if (e != cudaSuccess) return cuda_fail(err, HY_EIO, "cudaSetDevice", e);
    const bool pinned = host_pinned(host);
    e = cudaMemcpyAsync(dst, src, n, kind, h->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(h->stream);
    if (e != cudaSuccess)
        return hy_err_set(err, HY_EIO, "hbm: %s copy of %zu bytes: %s (%s)", what, n,
                          cudaGetErrorString(e), cudaGetErrorName(e));
    uint64_t dt = hy_now_ns() - t0;
    pthread_mutex_lock(&h->mu);
    if (!pinned) h->pageable++;
    if (kind == cudaMemcpyHostToDevice)
        h->writes++, h->bytes_written += n, h->write_ns += dt;
    else
        h->reads++, h->bytes_read += n, h->read_ns += dt;
    pthread_mutex_unlock(&h->mu);
    return HY_OK;
}

int hy_hbm_write(hy_hbm *h, size_t off, const void *host_src, size_t n, hy_err *err)
{
    int rc = check_copy(h, off, host_src, n, err);
    if (rc) return rc;
    return copy(h, (uint8_t *)h->base + off, host_src, n, cudaMemcpyHostToDevice, host_src, err);
}

int hy_hbm_read(hy_hbm *h, size_t off, void *host_dst, size_t n, hy_err *err)
{
    int rc = check_copy(h, off, host_dst, n, err);
    if (rc) return rc;
    return copy(h, host_dst, (uint8_t *)h->base + off, n, cudaMemcpyDeviceToHost, host_dst, err);
}

int hy_hbm_pin_host(hy_hbm *h, void *p, size_t n, hy_err *err)
{
    assert(h);
    if (!p || n == 0)
        return hy_err_set(err, HY_EINVAL, "hbm: nothing to pin (%p, %zu bytes)", p, n);
    cudaError_t e = cudaSetDevice(h->device);
    if (e == cudaSuccess) e = cudaHostRegister(p, n, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* a refused registration is not sticky */
        return hy_err_set(err, HY_EIO, "hbm: cudaHostRegister of %zu bytes: %s (%s)", n,
                          cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return HY_OK;
}

void hy_hbm_unpin_host(hy_hbm *h, void *p)
{
    if (!h || !p) return;
    cudaError_t e = cudaSetDevice(h->device);
    if (e == cudaSuccess) e = cudaHostUnregister(p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        hy_log(HY_LOG_WARN, "hbm: cudaHostUnregister: %s", cudaGetErrorString(e));
    }
}

#else /* !HY_HAVE_CUDA */

/* --- without CUDA: refuse, never emulate ------------------------------------ */

bool hy_hbm_available(char *why, size_t n)
{
    if (why && n) snprintf(why, n, "%s", WITHOUT_CUDA);
    return false;
}

int hy_hbm_open(size_t bytes, int device, hy_hbm **out, hy_err *err)
{
    (void)bytes, (void)device;
    *out = NULL;
    return hy_err_set(err, HY_EUNSUPPORTED, "hbm: unavailable: %s", WITHOUT_CUDA);
}

void hy_hbm_close(hy_hbm *h)
{
    if (h) hbm_free(h);
}

int hy_hbm_write(hy_hbm *h, size_t off, const void *host_src, size_t n, hy_err *err)
{
    int rc = check_copy(h, off, host_src, n, err);
    return rc ? rc : hy_err_set(err, HY_EUNSUPPORTED, "hbm: %s", WITHOUT_CUDA);
}

int hy_hbm_read(hy_hbm *h, size_t off, void *host_dst, size_t n, hy_err *err)
{
    int rc = check_copy(h, off, host_dst, n, err);
    return rc ? rc : hy_err_set(err, HY_EUNSUPPORTED, "hbm: %s", WITHOUT_CUDA);
}

int hy_hbm_pin_host(hy_hbm *h, void *p, size_t n, hy_err *err)
{
    (void)h, (void)p, (void)n;
    return hy_err_set(err, HY_EUNSUPPORTED, "hbm: %s", WITHOUT_CUDA);
}

void hy_hbm_unpin_host(hy_hbm *h, void *p)
{
    (void)h, (void)p;
}

#endif
