/*
 * The CUDA IPC transport: the state or entry written straight into a
 * worker's GPU memory on the daemon's node.
 *
 * The worker exports a device buffer with cudaIpcGetMemHandle and offers the
 * 64-byte handle, the buffer's PCI bus id (which GPU it lives on: device
 * ordinals differ between processes that see different CUDA_VISIBLE_DEVICES)
 * and the buffer's offset within the allocation the handle names (a pointer
 * inside a caching allocator's block shares its block's handle). The daemon
 * finds the same GPU by its bus id, opens the handle (cudaIpcOpenMemHandle)
 * and write() is one host-to-device copy into the worker's buffer; done()
 * waits for the device, so when the reply leaves, every byte is in the
 * worker's memory. The reply is the completion: no frame, no attach step
 * (the session is ready when OpenTransport answers), and the worker's wait()
 * has nothing to wait for.
 *
 * The CUDA runtime is loaded when first needed (dlopen), not linked: the
 * client library and the daemon run on machines without CUDA, where an
 * offer of cuda_ipc is passed over saying why, and a daemon that never sees
 * such an offer never initialises CUDA.
 */
#include "transport_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The runtime's types as its ABI has them (cuda_runtime_api.h is not
 * needed to build this file). */
typedef struct {
    char reserved[HY_TP_CUDA_HANDLE_BYTES];
} ipc_handle;
enum { MEMCPY_H2D = 1, MEMCPY_D2H = 2, IPC_LAZY_PEER_ACCESS = 1 };

struct hy_tp_cuda {
    void *rt, *drv; /* libcudart, libcuda */
    int devices;
    int (*get_device_count)(int *);
    int (*device_by_bus_id)(int *, const char *);
    int (*bus_id_of)(char *, int, int);
    int (*set_device)(int);
    int (*get_device)(int *);
    int (*ipc_open)(void **, ipc_handle, unsigned);
    int (*ipc_close)(void *);
    int (*ipc_get)(ipc_handle *, void *);
    int (*memcpy_)(void *, const void *, size_t, int);
    int (*synchronize)(void);
    int (*malloc_)(void **, size_t);
    int (*free_)(void *);
    const char *(*error_string)(int);
    /* the driver's cuMemGetAddressRange_v2: the allocation a pointer lies in */
    int (*address_range)(unsigned long long *, size_t *, unsigned long long);
};

static const char *cuda_error(const hy_tp_cuda *c, int e)
{
    const char *s = c->error_string ? c->error_string(e) : NULL;
    return s ? s : "unknown CUDA error";
}

/* The first of the runtime's sonames that loads (a process that already
 * holds one, as PyTorch does, gets that one back). */
static void *load_runtime(char *why, size_t cap)
{
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h) return h;
    }
    const char *e = dlerror();
    snprintf(why, cap, "no CUDA runtime: dlopen libcudart.so.13, .12 and libcudart.so failed (%s)",
             e ? e : "not found");
    return NULL;
}

#define SYM(field, name)                                                                           \
    do {                                                                                           \
        *(void **)&c->field = dlsym(c->rt, name);                                                  \
        if (!c->field) {                                                                           \
            rc = hy_err_set(err, HY_ENOTFOUND, "the CUDA runtime has no %s", name);                \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

int hy_tp_cuda_open(hy_tp_cuda **out, hy_err *err)
{
    *out = NULL;
    hy_tp_cuda *c = calloc(1, sizeof *c);
    if (!c) return hy_err_set(err, HY_ENOMEM, "cuda_ipc transport: out of memory");
    char why[300];
    int rc = 0;
    if (!(c->rt = load_runtime(why, sizeof why))) {
        free(c);
        return hy_err_set(err, HY_ENOTFOUND, "%s", why);
    }
    SYM(error_string, "cudaGetErrorString");
    SYM(get_device_count, "cudaGetDeviceCount");
    SYM(device_by_bus_id, "cudaDeviceGetByPCIBusId");
    SYM(bus_id_of, "cudaDeviceGetPCIBusId");
    SYM(set_device, "cudaSetDevice");
    SYM(get_device, "cudaGetDevice");
    SYM(ipc_open, "cudaIpcOpenMemHandle");
    SYM(ipc_close, "cudaIpcCloseMemHandle");
    SYM(ipc_get, "cudaIpcGetMemHandle");
    SYM(memcpy_, "cudaMemcpy");
    SYM(synchronize, "cudaDeviceSynchronize");
    SYM(malloc_, "cudaMalloc");
    SYM(free_, "cudaFree");
    int e = c->get_device_count(&c->devices);
    if (e != 0 || c->devices <= 0) {
        rc = hy_err_set(err, HY_ENOTFOUND, "no CUDA device: cudaGetDeviceCount: %s",
                        e ? cuda_error(c, e) : "0 devices");
        goto fail;
    }
    /* the driver, for the allocation a client's pointer lies in (optional:
     * without it a client's own pointer must be an allocation's start) */
    if ((c->drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)))
        *(void **)&c->address_range = dlsym(c->drv, "cuMemGetAddressRange_v2");
    *out = c;
    return 0;
fail:
    dlclose(c->rt);
    free(c);
    return rc;
}
#undef SYM

void hy_tp_cuda_close(hy_tp_cuda *c)
{
    if (!c) return;
    if (c->drv) dlclose(c->drv);
    /* the runtime stays loaded: CUDA does not support unloading it */
    free(c);
}

int hy_tp_cuda_devices(const hy_tp_cuda *c)
{
    return c->devices;
}

/* A PCI bus id as the runtime spells it: domain:bus:device.function in hex
 * ("0000:3b:00.0"), NUL-terminated within its field. */
static bool bus_id_ok(const char *s, size_t cap)
{
    const size_t n = strnlen(s, cap);
    if (n == 0 || n == cap || n > 16) return false;
    int colons = 0, dots = 0;
    for (size_t i = 0; i < n; i++) {
        const char ch = s[i];
        if (ch == ':')
            colons++;
        else if (ch == '.')
            dots++;
        else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
                   (ch >= 'A' && ch <= 'F')))
            return false;
    }
    return colons >= 1 && colons <= 2 && dots == 1;
}

int hy_tp_cuda_peer_check(const hy_tp_cuda_peer *p, uint64_t capacity, hy_err *err)
{
    bool any = false;
    for (size_t i = 0; i < sizeof p->handle; i++) any |= p->handle[i] != 0;
    if (!any)
        return hy_err_set(err, HY_EINVAL, "handle: all zero (cudaIpcGetMemHandle's %d bytes)",
                          HY_TP_CUDA_HANDLE_BYTES);
    if (!bus_id_ok(p->pci_bus_id, sizeof p->pci_bus_id))
        return hy_err_set(err, HY_EINVAL,
                          "pci_bus_id: '%.32s' is not a PCI bus id (domain:bus:device.function, "
                          "as cudaDeviceGetPCIBusId gives it)",
                          p->pci_bus_id);
    if (p->offset > UINT64_MAX - capacity)
        return hy_err_set(err, HY_EINVAL, "offset: %llu plus the capacity passes 2^64",
                          (unsigned long long)p->offset);
    return 0;
}

/* --- the daemon's side ----------------------------------------------------- */

typedef struct cuda_sender {
    hy_tp_sender base;
    hy_tp_cuda *c;
    int device;
    void *base_ptr; /* the opened allocation */
    uint8_t *buf;   /* the client's buffer within it */
} cuda_sender;

static int cuda_write(hy_tp_sender *s, uint64_t xfer, uint64_t off, const void *src, size_t n,
                      hy_err *err)
{
    (void)xfer;
    cuda_sender *m = (cuda_sender *)s;
    int e = m->c->set_device(m->device);
    if (e == 0) e = m->c->memcpy_(m->buf + off, src, n, MEMCPY_H2D);
    if (e)
        return hy_err_set(err, HY_EIO, "cuda_ipc transport: copying %zu bytes to device %d: %s", n,
                          m->device, cuda_error(m->c, e));
    return 0;
}

static int cuda_done(hy_tp_sender *s, uint64_t xfer, uint64_t off, uint64_t bytes, hy_err *err)
{
    (void)xfer, (void)off, (void)bytes;
    cuda_sender *m = (cuda_sender *)s;
    /* a copy from pageable memory may return before its DMA has landed */
    int e = m->c->set_device(m->device);
    if (e == 0) e = m->c->synchronize();
    if (e)
        return hy_err_set(err, HY_EIO, "cuda_ipc transport: device %d: %s", m->device,
                          cuda_error(m->c, e));
    return 0;
}

static void cuda_fail(hy_tp_sender *s, uint64_t xfer)
{
    (void)s, (void)xfer; /* the call's status says it: there is no channel of its own */
}

static void cuda_free(hy_tp_sender *s)
{
    cuda_sender *m = (cuda_sender *)s;
    if (m->c->set_device(m->device) == 0) m->c->ipc_close(m->base_ptr);
    free(m);
}

static const hy_tp_sender_ops cuda_ops = {cuda_write, cuda_done, cuda_fail, cuda_free};

int hy_tp_cuda_sender_new(hy_tp_cuda *c, const hy_tp_cuda_peer *peer, uint64_t capacity,
                          hy_tp_sender **out, hy_err *err)
{
    *out = NULL;
    int rc = hy_tp_cuda_peer_check(peer, capacity, err);
    if (rc) return rc;
    int dev = -1, e = c->device_by_bus_id(&dev, peer->pci_bus_id);
    if (e)
        return hy_err_set(err, HY_ENOTFOUND,
                          "no GPU at PCI bus id %s on this node (cudaDeviceGetByPCIBusId: %s; "
                          "the daemon sees %d device%s)",
                          peer->pci_bus_id, cuda_error(c, e), c->devices,
                          c->devices == 1 ? "" : "s");
    ipc_handle h;
    memcpy(h.reserved, peer->handle, sizeof h.reserved);
    void *base = NULL;
    if ((e = c->set_device(dev)) == 0) e = c->ipc_open(&base, h, IPC_LAZY_PEER_ACCESS);
    if (e)
        return hy_err_set(err, HY_EINVAL,
                          "cannot open the client's memory handle on device %d (%s): "
                          "cudaIpcOpenMemHandle: %s",
                          dev, peer->pci_bus_id, cuda_error(c, e));
    cuda_sender *m = calloc(1, sizeof *m);
    if (!m) {
        c->ipc_close(base);
        return hy_err_set(err, HY_ENOMEM, "cuda_ipc transport: out of memory");
    }
    m->base = (hy_tp_sender){&cuda_ops, HY_TP_CUDA_IPC, capacity, false, -1};
    m->c = c;
    m->device = dev;
    m->base_ptr = base;
    m->buf = (uint8_t *)base + peer->offset;
    *out = &m->base;
    return 0;
}

/* --- the worker's side ------------------------------------------------------ */

typedef struct cuda_receiver {
    hy_tp_receiver base;
    hy_tp_cuda *c;
    int device;
    bool owned; /* the buffer was allocated here */
} cuda_receiver;

static int cuda_wait(hy_tp_receiver *r, uint64_t xfer, int64_t timeout_ms, uint64_t *off,
                     uint64_t *bytes, hy_err *err)
{
    /* the daemon waited for its copies before replying: the reply is the completion */
    (void)r, (void)xfer, (void)timeout_ms, (void)err;
    *off = 0;
    *bytes = 0;
    return 0;
}

static void cuda_rfree(hy_tp_receiver *r)
{
    cuda_receiver *m = (cuda_receiver *)r;
    if (m->owned && m->c->set_device(m->device) == 0) m->c->free_(m->base.buf);
    free(m);
}

static const hy_tp_receiver_ops cuda_rops = {cuda_wait, cuda_rfree};

int hy_tp_cuda_receiver_new(hy_tp_cuda *c, int device, void *buf, uint64_t capacity,
                            hy_tp_cuda_peer *self, hy_tp_receiver **out, hy_err *err)
{
    *out = NULL;
    memset(self, 0, sizeof *self);
    if (capacity == 0) return hy_err_set(err, HY_EINVAL, "cuda_ipc transport: capacity 0");
    int e = 0;
    if (device < 0) e = c->get_device(&device);
    if (e == 0 && device >= c->devices)
        return hy_err_set(err, HY_EINVAL, "cuda_ipc transport: device %d, this process sees %d",
                          device, c->devices);
    if (e == 0) e = c->set_device(device);
    bool owned = false;
    if (e == 0 && !buf) {
        e = c->malloc_(&buf, capacity);
        owned = e == 0;
    }
    /* the allocation the buffer lies in: the handle names that, the offset
     * finds the buffer in it */
    unsigned long long base = (unsigned long long)(uintptr_t)buf;
    size_t size = capacity;
    if (e == 0 && !owned && c->address_range &&
        c->address_range(&base, &size, (unsigned long long)(uintptr_t)buf) != 0)
        base = (unsigned long long)(uintptr_t)buf, size = capacity;
    ipc_handle h;
    if (e == 0) e = c->ipc_get(&h, (void *)(uintptr_t)base);
    if (e == 0) e = c->bus_id_of(self->pci_bus_id, (int)sizeof self->pci_bus_id, device);
    if (e) {
        if (owned) c->free_(buf);
        return hy_err_set(err, HY_EIO, "cuda_ipc transport: exporting %llu bytes on device %d: %s",
                          (unsigned long long)capacity, device, cuda_error(c, e));
    }
    self->offset = (uint64_t)((unsigned long long)(uintptr_t)buf - base);
    if (self->offset + capacity > size) {
        if (owned) c->free_(buf);
        return hy_err_set(err, HY_EINVAL,
                          "cuda_ipc transport: the buffer's %llu bytes pass the end of its "
                          "allocation (%zu bytes, the buffer at %llu)",
                          (unsigned long long)capacity, size, (unsigned long long)self->offset);
    }
    memcpy(self->handle, h.reserved, sizeof self->handle);
    cuda_receiver *m = calloc(1, sizeof *m);
    if (!m) {
        if (owned) c->free_(buf);
        return hy_err_set(err, HY_ENOMEM, "cuda_ipc transport: out of memory");
    }
    m->base = (hy_tp_receiver){&cuda_rops, HY_TP_CUDA_IPC, buf, capacity, 0};
    m->c = c;
    m->device = device;
    m->owned = owned;
    *out = &m->base;
    return 0;
}

int hy_tp_cuda_receiver_read(hy_tp_receiver *r, uint64_t off, void *dst, size_t n, hy_err *err)
{
    if (r->kind != HY_TP_CUDA_IPC)
        return hy_err_set(err, HY_EINVAL, "%s receiver: not a cuda_ipc one",
                          hy_tp_kind_name(r->kind));
    if (off > r->capacity || n > r->capacity - off)
        return hy_err_set(err, HY_ERANGE, "cuda_ipc: %zu bytes at %llu pass the buffer's %llu", n,
                          (unsigned long long)off, (unsigned long long)r->capacity);
    cuda_receiver *m = (cuda_receiver *)r;
    int e = m->c->set_device(m->device);
    if (e == 0) e = m->c->memcpy_(dst, r->buf + off, n, MEMCPY_D2H);
    if (e)
        return hy_err_set(err, HY_EIO, "cuda_ipc: reading %zu bytes from device %d: %s", n,
                          m->device, cuda_error(m->c, e));
    return 0;
}
