/*
 * A real etcd for a test (Debian's etcd-server, /usr/bin/etcd): one member
 * on loopback with a fresh data directory and fast Raft timings (heartbeat
 * 50 ms, election 250 ms), so leases of 1 to 2 s behave. Started with
 * hy_test_etcd_start, which returns once etcd answers a Range; stopped
 * (SIGKILL, data directory removed) by hy_test_etcd_stop, and ALWAYS at the
 * latest when the test program ends: at exit, on SIGABRT/SIGSEGV/SIGBUS/
 * SIGFPE/SIGTERM/SIGINT (a failed assert included), and by the kernel if the
 * test is killed outright (PR_SET_PDEATHSIG; the directory then stays in
 * /tmp).
 *
 * Without /usr/bin/etcd, hy_test_etcd_start prints "SKIPPED: ..." and exits
 * 77 (register the ctest with SKIP_RETURN_CODE 77).
 *
 * Header-only; needs hy_rpc (hy_cluster.h) linked. Up to HY_TEST_ETCD_MAX at
 * once (a multi-node test may start several, each its own one-member
 * cluster).
 */
#ifndef HY_TEST_ETCD_FIXTURE_H
#define HY_TEST_ETCD_FIXTURE_H

#include "hy_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef HY_TEST_ETCD_BIN /* a test of the skip path may point it elsewhere */
#define HY_TEST_ETCD_BIN "/usr/bin/etcd"
#endif
#define HY_TEST_ETCD_MAX 8

typedef struct hy_test_etcd {
    char endpoint[64]; /* "127.0.0.1:PORT": pass to hy_etcd_open */
    char dir[128];     /* the data directory (and etcd.log) */
    int client_port, peer_port;
    pid_t pid; /* 0: not running */
} hy_test_etcd;

/* The running ones, for the exit and signal paths (plain data: the signal
 * handler reads it). */
static hy_test_etcd *volatile hy_test_etcd_live[HY_TEST_ETCD_MAX];

/* SIGKILL e's process and reap it, then rm -rf its directory with a forked
 * /bin/rm: async-signal-safe (kill, fork, execve, waitpid, _exit only). */
static inline void hy_test_etcd_kill_safe(hy_test_etcd *e)
{
    if (e->pid > 0) {
        kill(e->pid, SIGKILL);
        waitpid(e->pid, NULL, 0);
        e->pid = 0;
    }
    if (e->dir[0]) {
        pid_t rm = fork();
        if (rm == 0) {
            char *const argv[] = {"/bin/rm", "-rf", e->dir, NULL};
            char *const envp[] = {NULL};
            execve("/bin/rm", argv, envp);
            _exit(127);
        }
        if (rm > 0) waitpid(rm, NULL, 0);
        e->dir[0] = '\0';
    }
}

static inline void hy_test_etcd_kill_all(void)
{
    for (int i = 0; i < HY_TEST_ETCD_MAX; i++) {
        hy_test_etcd *e = hy_test_etcd_live[i];
        if (e) {
            hy_test_etcd_live[i] = NULL;
            hy_test_etcd_kill_safe(e);
        }
    }
}

static inline void hy_test_etcd_on_signal(int sig)
{
    hy_test_etcd_kill_all();
    signal(sig, SIG_DFL); /* then die of it as we would have */
    raise(sig);
}

static inline void hy_test_etcd_install_cleanup(void)
{
    static int installed;
    if (installed) return;
    installed = 1;
    atexit(hy_test_etcd_kill_all);
    const int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = hy_test_etcd_on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* A loopback TCP port free right now (etcd binds it a moment later; a clash
 * shows as etcd failing to start, and start tries other ports). */
static inline int hy_test_etcd_free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(s);
    return port;
}

/* Exits 77 (ctest's skip) when etcd is not installed. */
static inline void hy_test_etcd_require(void)
{
    if (access(HY_TEST_ETCD_BIN, X_OK) != 0) {
        printf("SKIPPED: etcd not installed (deploy/debian-packages.txt: etcd-server)\n");
        fflush(stdout);
        exit(77);
    }
}

/* Forks etcd on e's ports and directory; 0, or -1 when the fork failed. */
static inline int hy_test_etcd_spawn(hy_test_etcd *e)
{
    char client[64], peer[64], cluster[96], data[200], log[200];
    snprintf(client, sizeof client, "http://127.0.0.1:%d", e->client_port);
    snprintf(peer, sizeof peer, "http://127.0.0.1:%d", e->peer_port);
    snprintf(cluster, sizeof cluster, "hytest=%s", peer);
    snprintf(data, sizeof data, "%s/data", e->dir);
    snprintf(log, sizeof log, "%s/etcd.log", e->dir);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* the test killed outright: etcd goes too */
        if (getppid() != parent) _exit(1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(HY_TEST_ETCD_BIN, "etcd", "--name", "hytest", "--data-dir", data,
              "--listen-client-urls", client, "--advertise-client-urls", client,
              "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
              "--initial-cluster", cluster, "--initial-cluster-state", "new",
              "--heartbeat-interval", "50", "--election-timeout", "250", (char *)NULL);
        _exit(127);
    }
    e->pid = pid;
    return 0;
}

/* Waits up to 15 s for etcd to answer a Range; 0 when it did, -1 when it
 * exited or never answered. */
static inline int hy_test_etcd_wait(hy_test_etcd *e)
{
    hy_etcd *c;
    const char *ep[] = {e->endpoint};
    if (hy_etcd_open(ep, 1, 500, &c, NULL)) return -1;
    int rc = -1;
    for (int i = 0; i < 300; i++) {
        if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
            e->pid = 0;
            break;
        }
        hy_etcd_kv *kvs;
        size_t n;
        if (hy_etcd_range_prefix(c, "/hy-test-etcd-probe/", &kvs, &n, NULL, NULL) == 0) {
            hy_etcd_kvs_free(kvs, n);
            rc = 0;
            break;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    hy_etcd_close(c);
    return rc;
}

/* Prints the end of etcd's log (why it did not start). */
static inline void hy_test_etcd_print_log(const hy_test_etcd *e)
{
    char path[200], line[512];
    snprintf(path, sizeof path, "%s/etcd.log", e->dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    long lines = 0;
    while (fgets(line, sizeof line, f)) lines++;
    rewind(f);
    for (long i = 0; fgets(line, sizeof line, f); i++)
        if (i >= lines - 15) fprintf(stderr, "  etcd: %s", line);
    fclose(f);
}

/* Starts an etcd into *e (zeroed or not) and waits until it answers. 0, or -1
 * with the reason on stderr (etcd's log tail included). Exits 77 when etcd
 * is not installed. */
static inline int hy_test_etcd_start(hy_test_etcd *e)
{
    hy_test_etcd_require();
    hy_test_etcd_install_cleanup();
    memset(e, 0, sizeof *e);
    int slot = -1;
    for (int i = 0; i < HY_TEST_ETCD_MAX && slot < 0; i++)
        if (!hy_test_etcd_live[i]) slot = i;
    if (slot < 0) {
        fprintf(stderr, "hy_test_etcd_start: more than %d at once\n", HY_TEST_ETCD_MAX);
        return -1;
    }
    for (int attempt = 0; attempt < 3; attempt++) {
        snprintf(e->dir, sizeof e->dir, "/tmp/hy-etcd-XXXXXX");
        if (!mkdtemp(e->dir)) {
            perror("hy_test_etcd_start: mkdtemp");
            return -1;
        }
        e->client_port = hy_test_etcd_free_port();
        e->peer_port = hy_test_etcd_free_port();
        while (e->peer_port == e->client_port) e->peer_port = hy_test_etcd_free_port();
        snprintf(e->endpoint, sizeof e->endpoint, "127.0.0.1:%d", e->client_port);
        hy_test_etcd_live[slot] = e; /* before the fork: a signal now still cleans up */
        if (hy_test_etcd_spawn(e) == 0 && hy_test_etcd_wait(e) == 0) return 0;
        fprintf(stderr, "hy_test_etcd_start: etcd on %s did not answer (attempt %d)\n", e->endpoint,
                attempt + 1);
        hy_test_etcd_print_log(e);
        hy_test_etcd_live[slot] = NULL;
        hy_test_etcd_kill_safe(e);
    }
    return -1;
}

/* Kills e's etcd (SIGKILL, as a crash), waits down_ms, and starts it again
 * on the same ports and data (its keys and leases survive). 0 once it
 * answers again, -1 otherwise (the log tail on stderr). */
static inline int hy_test_etcd_restart(hy_test_etcd *e, int down_ms)
{
    if (e->pid > 0) {
        kill(e->pid, SIGKILL);
        waitpid(e->pid, NULL, 0);
        e->pid = 0;
    }
    struct timespec ts = {down_ms / 1000, (down_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if (hy_test_etcd_spawn(e) == 0 && hy_test_etcd_wait(e) == 0) return 0;
    fprintf(stderr, "hy_test_etcd_restart: etcd on %s did not answer again\n", e->endpoint);
    hy_test_etcd_print_log(e);
    return -1;
}

/* Stops e's etcd (SIGKILL) and removes its directory. Safe to call twice. */
static inline void hy_test_etcd_stop(hy_test_etcd *e)
{
    for (int i = 0; i < HY_TEST_ETCD_MAX; i++)
        if (hy_test_etcd_live[i] == e) hy_test_etcd_live[i] = NULL;
    hy_test_etcd_kill_safe(e);
}

#endif
