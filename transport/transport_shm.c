/*
 * The shared-memory transport, for a client on the daemon's host.
 *
 * The client creates a memfd of its buffer's size, seals it against
 * shrinking and growing (F_SEAL_SHRINK | F_SEAL_GROW), maps it, and passes
 * the descriptor with its HELLO over the daemon's Unix socket (SCM_RIGHTS).
 * The daemon takes only such a memfd, of exactly the session's size: a
 * client that could truncate the file under the daemon's mapping would turn
 * the daemon's next copy into SIGBUS. It maps the pages MAP_SHARED, without
 * MAP_POPULATE (a client's sparse file must not become the daemon's resident
 * memory before anything is written), and write() is one memcpy into them:
 * the bytes land where the client reads them, and the client copies nothing. done() sends a
 * DONE frame on the Unix socket after the copies, which is the client's fence
 * (the frame's send happens after the stores; the client's reader sees it
 * only after the kernel has moved it, and reads the buffer after that).
 */
#include "transport_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct shm_sender {
    hy_tp_sender base;
    uint8_t *map;
    int notify_fd;
} shm_sender;

static int shm_write(hy_tp_sender *s, uint64_t xfer, uint64_t off, const void *src, size_t n,
                     hy_err *err)
{
    (void)xfer;
    (void)err;
    memcpy(((shm_sender *)s)->map + off, src, n);
    return 0;
}

static int shm_done(hy_tp_sender *s, uint64_t xfer, uint64_t off, uint64_t bytes, hy_err *err)
{
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return hy_tp_send_frame(((shm_sender *)s)->notify_fd, HY_TP_DONE, xfer, off, bytes, err);
}

static void shm_fail(hy_tp_sender *s, uint64_t xfer)
{
    hy_tp_send_frame(((shm_sender *)s)->notify_fd, HY_TP_FAIL, xfer, 0, 0, NULL);
}

static void shm_free(hy_tp_sender *s)
{
    shm_sender *m = (shm_sender *)s;
    munmap(m->map, m->base.capacity);
    close(m->notify_fd);
    free(m);
}

static const hy_tp_sender_ops shm_ops = {shm_write, shm_done, shm_fail, shm_free};

int hy_tp_shm_sender_new(int memfd, uint64_t capacity, int notify_fd, hy_tp_sender **out,
                         hy_err *err)
{
    struct stat st;
    struct statfs fs;
    int rc = 0, seals = -1;
    const int need = F_SEAL_SHRINK | F_SEAL_GROW;
    if (fstat(memfd, &st) != 0)
        rc =
            hy_err_set(err, HY_EIO, "shm transport: fstat of the client's fd: %s", strerror(errno));
    else if (!S_ISREG(st.st_mode))
        rc = hy_err_set(err, HY_EINVAL,
                        "shm transport: the client's fd is not a memfd or regular file");
    else if (fstatfs(memfd, &fs) != 0 || fs.f_type != TMPFS_MAGIC)
        /* hugetlbfs can be sealed too, but a write into a huge page the pool
         * cannot give is SIGBUS all the same */
        rc = hy_err_set(err, HY_EINVAL,
                        "shm transport: the client's fd is not a memfd on shared memory (tmpfs)");
    else if ((seals = fcntl(memfd, F_GET_SEALS)) < 0 || (seals & need) != need)
        rc = hy_err_set(err, HY_EINVAL,
                        "shm transport: the client's memfd is not sealed against shrinking and "
                        "growing (memfd_create with MFD_ALLOW_SEALING, then F_ADD_SEALS "
                        "F_SEAL_SHRINK | F_SEAL_GROW)");
    else if ((uint64_t)st.st_size != capacity)
        rc = hy_err_set(err, HY_EINVAL,
                        "shm transport: the client's memfd holds %lld bytes, its offer said "
                        "%llu",
                        (long long)st.st_size, (unsigned long long)capacity);
    void *map = MAP_FAILED;
    if (!rc) {
        map = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        if (map == MAP_FAILED)
            rc = hy_err_set(err, HY_EIO, "shm transport: cannot map the client's %llu bytes: %s",
                            (unsigned long long)capacity, strerror(errno));
    }
    close(memfd);
    if (rc) {
        close(notify_fd);
        return rc;
    }
    shm_sender *m = calloc(1, sizeof *m);
    if (!m) {
        munmap(map, capacity);
        close(notify_fd);
        return hy_err_set(err, HY_ENOMEM, "shm transport: out of memory");
    }
    hy_tp_set_timeouts(notify_fd, 30000, 0);
    m->base = (hy_tp_sender){&shm_ops, HY_TP_SHM, capacity, false, notify_fd};
    m->map = map;
    m->notify_fd = notify_fd;
    *out = &m->base;
    return 0;
}

static void shm_release_buf(hy_tp_stream_rx *rx)
{
    if (rx->base.buf) munmap(rx->base.buf, rx->base.capacity);
}

int hy_tp_shm_receiver_open(const char *path, uint64_t id, const uint8_t secret[HY_TP_SECRET_BYTES],
                            uint64_t capacity, hy_tp_receiver **out, hy_err *err)
{
    char what[200];
    snprintf(what, sizeof what, "shm transport via %s", path);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (capacity == 0) return hy_err_set(err, HY_EINVAL, "%s: a buffer of 0 bytes", what);
    if (strlen(path) >= sizeof a.sun_path)
        return hy_err_set(err, HY_EINVAL, "%s: the socket path is longer than %zu bytes", what,
                          sizeof a.sun_path - 1);
    strcpy(a.sun_path, path);
    int memfd = memfd_create("hypic-state", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0) return hy_err_set(err, HY_EIO, "%s: memfd_create: %s", what, strerror(errno));
    if (ftruncate(memfd, (off_t)capacity) != 0 ||
        fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        int e = errno;
        close(memfd);
        return hy_err_set(err, HY_ENOMEM, "%s: cannot size and seal the memfd at %llu bytes: %s",
                          what, (unsigned long long)capacity, strerror(e));
    }
    void *buf = mmap(NULL, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (buf == MAP_FAILED) {
        int e = errno;
        close(memfd);
        return hy_err_set(err, HY_ENOMEM, "%s: cannot map the memfd: %s", what, strerror(e));
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        close(memfd);
        munmap(buf, capacity);
        return hy_err_set(err, HY_EIO, "%s: connect: %s", what, strerror(e));
    }
    hy_tp_stream_rx *rx = calloc(1, sizeof *rx);
    if (!rx) {
        close(fd);
        close(memfd);
        munmap(buf, capacity);
        return hy_err_set(err, HY_ENOMEM, "%s: out of memory", what);
    }
    hy_tp_ring_init(&rx->ring);
    rx->fd = fd;
    rx->data_allowed = false;
    rx->release_buf = shm_release_buf;
    rx->base = (hy_tp_receiver){&hy_tp_stream_rx_ops, HY_TP_SHM, buf, capacity, id};
    hy_tp_set_timeouts(fd, 10000, 10000);
    int rc = hy_tp_attach(fd, id, secret, memfd, what, err);
    close(memfd); /* the daemon has its own descriptor now; the mapping stays */
    if (!rc) rc = hy_tp_stream_rx_start(rx, err);
    if (rc) {
        hy_tp_stream_rx_ops.free(&rx->base);
        return rc;
    }
    *out = &rx->base;
    return 0;
}
