/*
 * The daemon's session hub: which transport a client gets, the listeners it
 * attaches through, and the sessions' lifetimes.
 *
 * OpenTransport hands a client a session id and a random 16-byte secret; the
 * session is PENDING until the client attaches: over TCP by connecting to the
 * data port, over shm by passing its memfd on the Unix socket, each with a
 * HELLO carrying the id and the secret. One accept thread per listener
 * hands each connection to a thread of its own (at most ATTACH_MAX at once),
 * which reads the HELLO with a timeout — a silent connection holds only its
 * own thread, never the listener and the attaches behind it —, checks the
 * secret in constant time, builds the sender outside the hub's lock, answers
 * ACK and makes the session READY. RDMA sessions are READY at once: the queue pairs are
 * connected with the details OpenTransport exchanged.
 *
 * A transfer holds its session BUSY from acquire to release, so transfers on
 * one session never interleave. A sender that breaks ends its session; the
 * client sees its connection close and opens another. A session ends with
 * its client's connection too: after the HELLO a client only reads, so a
 * hang-up or any byte on a READY session's socket (polled whenever a session
 * is opened) ends it, and a client that drops its sockets without
 * CloseTransport frees its slots for everyone. Each tenant has a cap on its
 * sessions and on their buffers' bytes together, below the hub's own.
 */
#include "transport_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum { S_PENDING, S_ATTACHING, S_READY, S_BUSY, S_DEAD };

typedef struct session {
    uint64_t id;
    char tenant[128];
    hy_tp_kind kind;
    uint8_t secret[HY_TP_SECRET_BYTES];
    uint64_t capacity;
    int state;
    hy_tp_sender *sender;
    uint64_t next_xfer;
    uint64_t opened_ns;
    struct session *next;
} session;

struct hy_tp_hub {
    hy_tp_hub_config cfg;
    char tcp_address[256], shm_path[108];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    session *sessions;
    uint64_t next_id;
    hy_tp_stats st;
    int tcp_fd, unix_fd;
    pthread_t tcp_thread, unix_thread;
    bool tcp_started, unix_started, stopping;
    int attaching; /* attach threads running, under mu (hub_stop waits for 0) */
    hy_tp_rdma *rdma;
    /* CUDA IPC: the runtime, loaded at the first cuda_ipc offer (cuda_tried) */
    hy_tp_cuda *cuda;
    bool cuda_tried;
};

static session *find(hy_tp_hub *h, uint64_t id)
{
    for (session *s = h->sessions; s; s = s->next)
        if (s->id == id) return s;
    return NULL;
}

/* Unlinks and frees s (the lock is held, s is not BUSY). */
static void drop(hy_tp_hub *h, session *s)
{
    for (session **p = &h->sessions; *p; p = &(*p)->next)
        if (*p == s) {
            *p = s->next;
            break;
        }
    hy_tp_sender_free(s->sender);
    h->st.open_sessions--;
    free(s);
}

/* Whether a READY session's client has hung up (or sent a byte it never
 * should: the connection is no longer one we understand). */
static bool hung_up(const session *s)
{
    if (s->state != S_READY || !s->sender || s->sender->conn_fd < 0) return false;
    struct pollfd p = {.fd = s->sender->conn_fd, .events = POLLIN | POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR));
}

/* Sessions never attached within the timeout, dead, or whose client hung up
 * end (the lock is held). */
static void expire(hy_tp_hub *h)
{
    uint64_t now = hy_now_ns(), limit = (uint64_t)h->cfg.attach_timeout_ms * 1000000u;
    for (session *s = h->sessions, *next; s; s = next) {
        next = s->next;
        if ((s->state == S_PENDING && now - s->opened_ns > limit) || s->state == S_DEAD ||
            hung_up(s))
            drop(h, s);
    }
}

/* The sessions of tenant and their buffers' bytes (the lock is held). */
static void tenant_use(hy_tp_hub *h, const char *tenant, uint32_t *n, uint64_t *bytes)
{
    *n = 0;
    *bytes = 0;
    for (session *s = h->sessions; s; s = s->next)
        if (strcmp(s->tenant, tenant) == 0) {
            (*n)++;
            *bytes += s->capacity;
        }
}

/* ---- attaching ---- */

static void refuse(int fd, uint64_t id, int code)
{
    hy_tp_send_frame(fd, HY_TP_ACK, id, id, (uint64_t)(-(int64_t)code), NULL);
    close(fd);
}

/* Reads a HELLO (and for shm its memfd), finds the pending session and makes
 * it READY, or refuses. Owns fd. */
static void attach(hy_tp_hub *h, int fd, hy_tp_kind kind)
{
    uint8_t b[HY_TP_FRAME_BYTES], secret[HY_TP_SECRET_BYTES];
    int memfd = -1;
    hy_tp_set_timeouts(fd, 5000, 5000);
    struct iovec iov = {b, sizeof b};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
    ssize_t k = recvmsg(fd, &m, MSG_WAITALL | MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *c = k > 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS && memfd < 0)
            memcpy(&memfd, CMSG_DATA(c), sizeof(int));
    uint64_t id = 0;
    hy_err e = {0};
    if (k != (ssize_t)sizeof b || hy_tp_hello_unpack(b, &id, secret, &e)) {
        hy_log(HY_LOG_WARN, "transport %s: a connection that sent no valid HELLO: %s",
               hy_tp_kind_name(kind), k == (ssize_t)sizeof b ? e.msg : "short or no frame");
        if (memfd >= 0) close(memfd);
        refuse(fd, id, HY_EFORMAT);
        return;
    }
    pthread_mutex_lock(&h->mu);
    session *s = find(h, id);
    int diff = 0;
    if (s)
        for (int i = 0; i < HY_TP_SECRET_BYTES; i++) diff |= s->secret[i] ^ secret[i];
    bool ok =
        s && !diff && s->state == S_PENDING && s->kind == kind && (kind != HY_TP_SHM || memfd >= 0);
    if (ok) s->state = S_ATTACHING;
    uint64_t cap = ok ? s->capacity : 0;
    pthread_mutex_unlock(&h->mu);
    if (!ok) {
        hy_log(HY_LOG_WARN, "transport %s: refused an attach to session %llu (%s)",
               hy_tp_kind_name(kind), (unsigned long long)id,
               !s                               ? "no such pending session"
               : diff                           ? "wrong secret"
               : s->kind != kind                ? "the session is of another transport"
               : memfd < 0 && kind == HY_TP_SHM ? "no memfd with the HELLO"
                                                : "already attached");
        if (memfd >= 0) close(memfd);
        refuse(fd, id, diff ? HY_EINVAL : HY_ENOTFOUND);
        return;
    }
    hy_tp_sender *snd = NULL;
    int rc = kind == HY_TP_TCP ? hy_tp_tcp_sender_new(fd, cap, &snd, &e)
                               : hy_tp_shm_sender_new(memfd, cap, fd, &snd, &e);
    if (!rc)
        rc = hy_tp_send_frame(fd, HY_TP_ACK, id, id, 0, &e);
    else {
        /* the sender's constructor closed fd: answer on a fresh dup is not
         * possible, so the client sees its connection close */
    }
    pthread_mutex_lock(&h->mu);
    if (rc) {
        hy_log(HY_LOG_WARN, "transport %s: session %llu failed to attach: %s",
               hy_tp_kind_name(kind), (unsigned long long)id, e.msg);
        hy_tp_sender_free(snd);
        s->state = S_DEAD;
    } else {
        s->sender = snd;
        s->state = S_READY;
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

typedef struct listener_arg {
    hy_tp_hub *h;
    hy_tp_kind kind;
} listener_arg;

/* Each connection's HELLO is read on a thread of its own: a client that
 * connects and sends nothing holds its thread for the HELLO's timeout, not
 * the listener, so everyone else's attach goes on. At most ATTACH_MAX at
 * once; beyond, a connection is closed unread. */
#define ATTACH_MAX 64

typedef struct attach_arg {
    hy_tp_hub *h;
    int fd;
    hy_tp_kind kind;
} attach_arg;

static void *attach_main(void *arg)
{
    attach_arg *a = arg;
    hy_tp_hub *h = a->h;
    attach(h, a->fd, a->kind);
    free(a);
    pthread_mutex_lock(&h->mu);
    h->attaching--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void attach_async(hy_tp_hub *h, int fd, hy_tp_kind kind)
{
    attach_arg *a = malloc(sizeof *a);
    pthread_mutex_lock(&h->mu);
    const bool room = a && h->attaching < ATTACH_MAX;
    if (room) h->attaching++;
    pthread_mutex_unlock(&h->mu);
    pthread_t t;
    if (room) {
        *a = (attach_arg){h, fd, kind};
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        const int e = pthread_create(&t, &at, attach_main, a);
        pthread_attr_destroy(&at);
        if (e == 0) return;
        pthread_mutex_lock(&h->mu);
        h->attaching--;
        pthread_mutex_unlock(&h->mu);
    }
    hy_log(HY_LOG_WARN, "transport %s: %d attaches in progress, the limit: a connection closed",
           hy_tp_kind_name(kind), ATTACH_MAX);
    free(a);
    close(fd);
}

static void *listen_main(void *arg)
{
    listener_arg *a = arg;
    hy_tp_hub *h = a->h;
    int lfd = a->kind == HY_TP_TCP ? h->tcp_fd : h->unix_fd;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
                if (errno == EMFILE || errno == ENFILE)
                    nanosleep(&(struct timespec){0, 10000000}, NULL);
                continue;
            }
            break; /* the listener was shut down */
        }
        if (__atomic_load_n(&h->stopping, __ATOMIC_ACQUIRE)) {
            close(fd);
            break;
        }
        attach_async(h, fd, a->kind);
    }
    free(a);
    return NULL;
}

static int start_listener(hy_tp_hub *h, hy_tp_kind kind, hy_err *err)
{
    listener_arg *a = malloc(sizeof *a);
    if (!a) return hy_err_set(err, HY_ENOMEM, "transport: out of memory");
    a->h = h;
    a->kind = kind;
    pthread_t *t = kind == HY_TP_TCP ? &h->tcp_thread : &h->unix_thread;
    int e = pthread_create(t, NULL, listen_main, a);
    if (e) {
        free(a);
        return hy_err_set(err, HY_ENOMEM, "transport: cannot start a listener: %s", strerror(e));
    }
    if (kind == HY_TP_TCP)
        h->tcp_started = true;
    else
        h->unix_started = true;
    return 0;
}

static int bind_tcp(hy_tp_hub *h, hy_err *err)
{
    char host[256];
    const char *addr = h->tcp_address, *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host)
        return hy_err_set(err, HY_EINVAL, "transport.tcp_listen: \"%s\" is not host:port", addr);
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int g = getaddrinfo(host, colon + 1, &hints, &ai);
    if (g)
        return hy_err_set(err, HY_EINVAL, "transport.tcp_listen: \"%s\": %s", addr,
                          gai_strerror(g));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    int rc = 0;
    if (fd < 0)
        rc = hy_err_set(err, HY_EIO, "transport: socket: %s", strerror(errno));
    else {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0)
            rc = hy_err_set(err, HY_EIO, "transport.tcp_listen: cannot bind %s: %s", addr,
                            strerror(errno));
    }
    freeaddrinfo(ai);
    if (rc) {
        if (fd >= 0) close(fd);
        return rc;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    h->st.tcp_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                    : ((struct sockaddr_in *)&ss)->sin_port);
    h->tcp_fd = fd;
    return 0;
}

static int bind_unix(hy_tp_hub *h, hy_err *err)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(h->shm_path) >= sizeof a.sun_path)
        return hy_err_set(err, HY_EINVAL, "transport.shm_socket: \"%s\" is longer than %zu bytes",
                          h->shm_path, sizeof a.sun_path - 1);
    strcpy(a.sun_path, h->shm_path);
    struct stat st;
    if (lstat(h->shm_path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return hy_err_set(err, HY_EINVAL, "transport.shm_socket: %s exists and is not a socket",
                              h->shm_path);
        unlink(h->shm_path); /* a socket left by an earlier run */
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return hy_err_set(err, HY_EIO, "transport: socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        return hy_err_set(err, HY_EIO, "transport.shm_socket: cannot bind %s: %s", h->shm_path,
                          strerror(e));
    }
    /* any local user may connect: the session's secret is the authentication */
    chmod(h->shm_path, 0666);
    h->unix_fd = fd;
    return 0;
}

int hy_tp_hub_start(const hy_tp_hub_config *cfg, hy_tp_hub **out, hy_err *err)
{
    hy_tp_hub *h = calloc(1, sizeof *h);
    if (!h) return hy_err_set(err, HY_ENOMEM, "transport: out of memory");
    h->cfg = *cfg;
    snprintf(h->tcp_address, sizeof h->tcp_address, "%s",
             cfg->tcp_address && *cfg->tcp_address ? cfg->tcp_address : "127.0.0.1:0");
    snprintf(h->shm_path, sizeof h->shm_path, "%s", cfg->shm_path ? cfg->shm_path : "");
    h->cfg.tcp_address = h->tcp_address;
    h->cfg.shm_path = h->shm_path;
    h->cfg.rdma_device = NULL; /* not kept: used below only */
    if (!h->cfg.max_sessions) h->cfg.max_sessions = 64;
    if (!h->cfg.tenant_sessions || h->cfg.tenant_sessions > h->cfg.max_sessions)
        h->cfg.tenant_sessions = h->cfg.max_sessions;
    if (!h->cfg.max_buffer) h->cfg.max_buffer = 16ull << 30;
    if (!h->cfg.attach_timeout_ms) h->cfg.attach_timeout_ms = 10000;
    h->tcp_fd = h->unix_fd = -1;
    h->next_id = 1;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    int rc = 0;
    if (cfg->rdma != HY_TP_RDMA_OFF) {
        hy_err e = {0};
        if (hy_tp_rdma_open(cfg->rdma_device, cfg->rdma_port, cfg->rdma_gid_index, &h->rdma, &e) ==
            0) {
            h->st.rdma_available = true;
            snprintf(h->st.rdma_why, sizeof h->st.rdma_why, "%s", hy_tp_rdma_device_name(h->rdma));
            hy_log(HY_LOG_INFO, "transport: rdma on %s", h->st.rdma_why);
        } else if (cfg->rdma == HY_TP_RDMA_REQUIRED) {
            rc = hy_err_set(err, HY_ENOTFOUND, "transport.rdma is required: %s", e.msg);
        } else {
            snprintf(h->st.rdma_why, sizeof h->st.rdma_why, "%.250s", e.msg);
            hy_log(HY_LOG_WARN,
                   "transport: rdma unavailable (%s); clients that offer it get "
                   "their next offer (tcp or shm), counted as fallbacks",
                   e.msg);
        }
    } else
        snprintf(h->st.rdma_why, sizeof h->st.rdma_why, "off (transport.rdma: off)");
    snprintf(h->st.cuda_why, sizeof h->st.cuda_why, "not asked yet: no cuda_ipc offer so far");
    if (!rc) rc = bind_tcp(h, err);
    if (!rc && h->shm_path[0]) rc = bind_unix(h, err);
    if (!rc) rc = start_listener(h, HY_TP_TCP, err);
    if (!rc && h->unix_fd >= 0) rc = start_listener(h, HY_TP_SHM, err);
    if (rc) {
        hy_tp_hub_stop(h);
        return rc;
    }
    *out = h;
    return 0;
}

void hy_tp_hub_stop(hy_tp_hub *h)
{
    if (!h) return;
    __atomic_store_n(&h->stopping, true, __ATOMIC_RELEASE);
    if (h->tcp_fd >= 0) shutdown(h->tcp_fd, SHUT_RDWR);
    if (h->unix_fd >= 0) shutdown(h->unix_fd, SHUT_RDWR);
    if (h->tcp_started) pthread_join(h->tcp_thread, NULL);
    if (h->unix_started) pthread_join(h->unix_thread, NULL);
    pthread_mutex_lock(&h->mu); /* attaches in progress end within their HELLO timeout */
    while (h->attaching > 0) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    if (h->tcp_fd >= 0) close(h->tcp_fd);
    if (h->unix_fd >= 0) {
        close(h->unix_fd);
        unlink(h->shm_path);
    }
    pthread_mutex_lock(&h->mu);
    while (h->sessions)
        drop(h, h->sessions); /* the daemon's workers are stopped: nothing is BUSY */
    pthread_mutex_unlock(&h->mu);
    if (h->rdma) hy_tp_rdma_close(h->rdma);
    hy_tp_cuda_close(h->cuda);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
}

/* ---- sessions ---- */

/* HY_ERANGE when one more session of `bytes` for tenant would pass a limit:
 * the hub's sessions, the tenant's sessions or its bytes (the lock is held). */
static bool is_peer(const char *owner)
{
    return strncmp(owner, HY_TP_PEER_PREFIX, strlen(HY_TP_PEER_PREFIX)) == 0;
}

static int over_limits(hy_tp_hub *h, const char *tenant, uint64_t bytes, hy_err *err)
{
    uint32_t mine, kind = 0;
    uint64_t mine_bytes;
    tenant_use(h, tenant, &mine, &mine_bytes);
    const bool peer = is_peer(tenant);
    for (session *s = h->sessions; s; s = s->next) kind += is_peer(s->tenant) == peer;
    if (kind >= h->cfg.max_sessions)
        return hy_err_set(err, HY_ERANGE,
                          "transport sessions: %u of %s open, the limit (transport.max_sessions); "
                          "close one (CloseTransport) first",
                          h->cfg.max_sessions, peer ? "other members" : "clients");
    if (mine >= h->cfg.tenant_sessions)
        return hy_err_set(err, HY_ERANGE,
                          "transport sessions: tenant '%s' has %u open, its limit "
                          "(transport.sessions_per_tenant); close one (CloseTransport) first",
                          tenant, mine);
    if (h->cfg.tenant_bytes && mine_bytes + bytes > h->cfg.tenant_bytes)
        return hy_err_set(err, HY_ERANGE,
                          "transport sessions: tenant '%s' has %llu buffer bytes in sessions; "
                          "%llu more would pass its limit of %llu (transport.tenant_bytes)",
                          tenant, (unsigned long long)mine_bytes, (unsigned long long)bytes,
                          (unsigned long long)h->cfg.tenant_bytes);
    return 0;
}

/* Appends "kind (why); " to the passed-over list. */
static void passed(char *buf, size_t cap, hy_tp_kind k, const char *why)
{
    size_t n = strlen(buf);
    if (n < cap)
        snprintf(buf + n, cap - n, "%s%s (%.160s)", n ? "; " : "", hy_tp_kind_name(k), why);
}

/* The CUDA runtime, loaded at the first cuda_ipc offer (NULL when there is
 * none; st.cuda_why says why, once). */
static hy_tp_cuda *cuda_runtime(hy_tp_hub *h)
{
    pthread_mutex_lock(&h->mu);
    if (!h->cuda_tried) {
        h->cuda_tried = true;
        hy_err e = {0};
        if (hy_tp_cuda_open(&h->cuda, &e) == 0) {
            h->st.cuda_available = true;
            snprintf(h->st.cuda_why, sizeof h->st.cuda_why, "%d CUDA device%s",
                     hy_tp_cuda_devices(h->cuda), hy_tp_cuda_devices(h->cuda) == 1 ? "" : "s");
            hy_log(HY_LOG_INFO, "transport: cuda_ipc on %s", h->st.cuda_why);
        } else {
            snprintf(h->st.cuda_why, sizeof h->st.cuda_why, "%.250s", e.msg);
            hy_log(HY_LOG_WARN,
                   "transport: cuda_ipc unavailable (%s); clients that offer it get their next "
                   "offer",
                   e.msg);
        }
    }
    hy_tp_cuda *c = h->cuda;
    pthread_mutex_unlock(&h->mu);
    return c;
}

int hy_tp_hub_open(hy_tp_hub *h, const char *tenant, const hy_tp_offer *offers, size_t n,
                   hy_tp_accept *acc, hy_err *err)
{
    memset(acc, 0, sizeof *acc);
    if (n == 0)
        return hy_err_set(err, HY_EINVAL, "offers: none (offer tcp, shm, rdma or cuda_ipc)");
    unsigned seen = 0;
    for (size_t i = 0; i < n; i++) {
        const hy_tp_offer *o = &offers[i];
        if (!hy_tp_kind_name(o->kind) || o->kind == HY_TP_NONE)
            return hy_err_set(err, HY_EINVAL,
                              "offers[%zu].kind: %d is not tcp, shm, rdma or cuda_ipc", i,
                              (int)o->kind);
        if (seen & 1u << o->kind)
            return hy_err_set(err, HY_EINVAL, "offers[%zu]: %s is offered twice", i,
                              hy_tp_kind_name(o->kind));
        seen |= 1u << o->kind;
        if (o->capacity == 0) return hy_err_set(err, HY_EINVAL, "offers[%zu].capacity: 0 bytes", i);
        if (o->capacity > h->cfg.max_buffer)
            return hy_err_set(err, HY_ERANGE,
                              "offers[%zu].capacity: %llu bytes exceeds transport.max_buffer "
                              "(%llu)",
                              i, (unsigned long long)o->capacity,
                              (unsigned long long)h->cfg.max_buffer);
        if (o->kind == HY_TP_CUDA_IPC) {
            int rc = hy_tp_cuda_peer_check(&o->cuda, o->capacity, err);
            if (rc) {
                hy_err_prefix(err, "offers[%zu].cuda_ipc", i);
                return rc;
            }
        }
        if (o->kind == HY_TP_RDMA) {
            int rc = hy_tp_rdma_peer_check(&o->rdma, true, err);
            if (rc) {
                hy_err_prefix(err, "offers[%zu].rdma", i);
                return rc;
            }
            if (o->rdma.bytes < o->capacity)
                return hy_err_set(
                    err, HY_EINVAL, "offers[%zu].rdma.bytes: %llu, less than its capacity %llu", i,
                    (unsigned long long)o->rdma.bytes, (unsigned long long)o->capacity);
        }
    }
    /* the largest offer is what the session may take */
    uint64_t most = 0;
    for (size_t i = 0; i < n; i++) most = HY_MAX(most, offers[i].capacity);
    pthread_mutex_lock(&h->mu);
    expire(h);
    int lim = over_limits(h, tenant, most, err);
    pthread_mutex_unlock(&h->mu);
    if (lim) return lim;

    const hy_tp_offer *take = NULL;
    hy_tp_sender *snd = NULL;
    bool rdma_passed = false;
    for (size_t i = 0; i < n && !take; i++) {
        const hy_tp_offer *o = &offers[i];
        hy_err e = {0};
        if (h->cfg.rdma == HY_TP_RDMA_REQUIRED && o->kind != HY_TP_RDMA)
            passed(acc->passed_over, sizeof acc->passed_over, o->kind,
                   "this daemon requires rdma: transport.rdma is required");
        else if (o->kind == HY_TP_RDMA && !h->rdma) {
            passed(acc->passed_over, sizeof acc->passed_over, o->kind, h->st.rdma_why);
            rdma_passed = true;
        } else if (o->kind == HY_TP_RDMA) {
            if (hy_tp_rdma_sender_new(h->rdma, &o->rdma, &acc->rdma, &snd, &e) == 0)
                take = o;
            else {
                passed(acc->passed_over, sizeof acc->passed_over, o->kind, e.msg);
                rdma_passed = true;
            }
        } else if (o->kind == HY_TP_CUDA_IPC) {
            hy_tp_cuda *c = cuda_runtime(h);
            if (!c)
                passed(acc->passed_over, sizeof acc->passed_over, o->kind, h->st.cuda_why);
            else if (hy_tp_cuda_sender_new(c, &o->cuda, o->capacity, &snd, &e) == 0)
                take = o;
            else
                passed(acc->passed_over, sizeof acc->passed_over, o->kind, e.msg);
        } else if (o->kind == HY_TP_SHM && !h->shm_path[0])
            passed(acc->passed_over, sizeof acc->passed_over, o->kind,
                   "off: transport.shm_socket is empty");
        else
            take = o;
    }
    if (!take)
        return hy_err_set(err, HY_EUNSUPPORTED, "no offered transport can be served: %s",
                          acc->passed_over);
    session *s = calloc(1, sizeof *s);
    if (!s) {
        hy_tp_sender_free(snd);
        return hy_err_set(err, HY_ENOMEM, "transport: out of memory");
    }
    snprintf(s->tenant, sizeof s->tenant, "%s", tenant);
    s->kind = take->kind;
    s->capacity = take->capacity;
    s->opened_ns = hy_now_ns();
    if (take->kind != HY_TP_RDMA && take->kind != HY_TP_CUDA_IPC &&
        getrandom(s->secret, sizeof s->secret, 0) != (ssize_t)sizeof s->secret) {
        free(s);
        return hy_err_set(err, HY_EIO, "transport: getrandom: %s", strerror(errno));
    }
    s->sender = snd;
    s->state = snd ? S_READY : S_PENDING;
    pthread_mutex_lock(&h->mu);
    int lim2 = over_limits(h, tenant, s->capacity, err); /* again: others opened meanwhile */
    if (lim2) {
        pthread_mutex_unlock(&h->mu);
        hy_tp_sender_free(snd);
        free(s);
        return lim2;
    }
    s->id = h->next_id++;
    s->next = h->sessions;
    h->sessions = s;
    h->st.open_sessions++;
    h->st.opened[s->kind]++;
    if (rdma_passed) h->st.fallbacks++;
    pthread_mutex_unlock(&h->mu);
    if (rdma_passed)
        hy_log(HY_LOG_INFO, "transport: session %llu of %s falls back to %s: %s",
               (unsigned long long)s->id, tenant, hy_tp_kind_name(s->kind), acc->passed_over);
    acc->kind = s->kind;
    acc->session = s->id;
    memcpy(acc->secret, s->secret, sizeof s->secret);
    acc->tcp_port = h->st.tcp_port;
    snprintf(acc->shm_path, sizeof acc->shm_path, "%s", s->kind == HY_TP_SHM ? h->shm_path : "");
    return 0;
}

static uint64_t deadline(int64_t ms)
{
    return hy_now_ns() + (uint64_t)ms * 1000000u;
}

int hy_tp_hub_acquire(hy_tp_hub *h, const char *tenant, uint64_t id, int64_t wait_ms,
                      hy_tp_sender **out, uint64_t *xfer, hy_err *err)
{
    pthread_mutex_lock(&h->mu);
    session *s = find(h, id);
    if (!s || strcmp(s->tenant, tenant) != 0 || s->state == S_DEAD) {
        pthread_mutex_unlock(&h->mu);
        return hy_err_set(err, HY_ENOTFOUND,
                          "transport_session %llu: no such session (closed, expired, or its "
                          "connection broke): open one with OpenTransport",
                          (unsigned long long)id);
    }
    uint64_t attach_dl = s->opened_ns + (uint64_t)h->cfg.attach_timeout_ms * 1000000u;
    uint64_t busy_dl = deadline(wait_ms < 0 ? 0 : wait_ms);
    int rc = 0;
    while (!rc && s->state != S_READY) {
        uint64_t now = hy_now_ns();
        if (s->state == S_DEAD)
            rc = hy_err_set(err, HY_ENOTFOUND, "transport_session %llu: its attach failed",
                            (unsigned long long)id);
        else if ((s->state == S_PENDING || s->state == S_ATTACHING) && now > attach_dl)
            rc = hy_err_set(err, HY_ERANGE,
                            "transport_session %llu: the client has not attached within %u ms "
                            "(connect to the data port or the shm socket first)",
                            (unsigned long long)id, h->cfg.attach_timeout_ms);
        else if (s->state == S_BUSY && now > busy_dl)
            rc = hy_err_set(err, HY_ERANGE,
                            "transport_session %llu: busy with another transfer for %lld ms",
                            (unsigned long long)id, (long long)wait_ms);
        else {
            uint64_t dl = s->state == S_BUSY ? busy_dl : attach_dl;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t left = dl > now ? dl - now : 0;
            if (left > 100000000u) left = 100000000u; /* re-check at least every 100 ms */
            ts.tv_sec += (time_t)(left / 1000000000u);
            ts.tv_nsec += (long)(left % 1000000000u);
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_cond_timedwait(&h->cv, &h->mu, &ts);
            s = find(h, id); /* it may have been closed meanwhile */
            if (!s)
                rc = hy_err_set(err, HY_ENOTFOUND, "transport_session %llu: closed",
                                (unsigned long long)id);
        }
    }
    if (!rc) {
        s->state = S_BUSY;
        s->next_xfer = s->next_xfer % HY_TP_XFER_MAX + 1;
        *xfer = s->next_xfer;
        *out = s->sender;
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

int hy_tp_hub_capacity(hy_tp_hub *h, const char *tenant, uint64_t id, uint64_t *capacity,
                       hy_err *err)
{
    pthread_mutex_lock(&h->mu);
    session *s = find(h, id);
    bool ok = s && !strcmp(s->tenant, tenant) && s->state != S_DEAD;
    if (ok) *capacity = s->capacity;
    pthread_mutex_unlock(&h->mu);
    if (!ok)
        return hy_err_set(err, HY_ENOTFOUND,
                          "transport_session %llu: no such session (closed, expired, or its "
                          "connection broke): open one with OpenTransport",
                          (unsigned long long)id);
    return 0;
}

void hy_tp_hub_release(hy_tp_hub *h, uint64_t id, hy_tp_sender *snd, bool ok, uint64_t bytes)
{
    pthread_mutex_lock(&h->mu);
    session *s = find(h, id);
    if (s && s->sender == snd && s->state == S_BUSY) {
        h->st.transfers[s->kind]++;
        if (ok)
            h->st.bytes[s->kind] += bytes;
        else
            h->st.failures[s->kind]++;
        s->state = snd->broken ? S_DEAD : S_READY;
        if (s->state == S_DEAD) drop(h, s);
    }
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

int hy_tp_hub_close(hy_tp_hub *h, const char *tenant, uint64_t id, hy_err *err)
{
    pthread_mutex_lock(&h->mu);
    session *s = find(h, id);
    if (!s || strcmp(s->tenant, tenant) != 0) {
        pthread_mutex_unlock(&h->mu);
        return hy_err_set(err, HY_ENOTFOUND, "transport_session %llu: no such session",
                          (unsigned long long)id);
    }
    while (s && (s->state == S_BUSY || s->state == S_ATTACHING)) { /* let it finish */
        pthread_cond_wait(&h->cv, &h->mu);
        s = find(h, id);
    }
    if (s) drop(h, s);
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return 0;
}

void hy_tp_hub_stats(hy_tp_hub *h, hy_tp_stats *st)
{
    pthread_mutex_lock(&h->mu);
    *st = h->st;
    pthread_mutex_unlock(&h->mu);
}
