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
    /* hy_test_etcd_start_tls: etcd's certificate and key files and the CA
     * file its clients trust ("": plaintext); hy_test_etcd_auth: the user
     * the fixture's own probes call as ("": none) */
    char cert[320], key[320], ca[320];
    char user[64], password[64];
    char probe[128]; /* the prefix the probes range ("": /hy-test-etcd-probe/) */
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
    snprintf(client, sizeof client, "%s://127.0.0.1:%d", e->cert[0] ? "https" : "http",
             e->client_port);
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
        if (e->cert[0])
            execl(HY_TEST_ETCD_BIN, "etcd", "--name", "hytest", "--data-dir", data,
                  "--listen-client-urls", client, "--advertise-client-urls", client,
                  "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                  "--initial-cluster", cluster, "--initial-cluster-state", "new",
                  "--heartbeat-interval", "50", "--election-timeout", "250", "--cert-file",
                  e->cert, "--key-file", e->key, (char *)NULL);
        else
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
/* A client of e as the fixture calls it (its TLS and user); NULL on failure. */
static inline hy_etcd *hy_test_etcd_client(const hy_test_etcd *e, int64_t timeout_ms)
{
    const char *ep[] = {e->endpoint};
    char ca[8192] = "";
    if (e->ca[0]) {
        FILE *f = fopen(e->ca, "r");
        if (!f) return NULL;
        size_t n = fread(ca, 1, sizeof ca - 1, f);
        fclose(f);
        ca[n] = '\0';
    }
    hy_etcd_options o = {.endpoints = ep,
                         .n = 1,
                         .timeout_ms = timeout_ms,
                         .tls_ca_pem = e->ca[0] ? ca : NULL,
                         .user = e->user[0] ? e->user : NULL,
                         .password = e->user[0] ? e->password : NULL};
    hy_etcd *c = NULL;
    return hy_etcd_open_ex(&o, &c, NULL) ? NULL : c;
}

/* Whether something accepts TCP connections on 127.0.0.1:port now. */
static inline int hy_test_etcd_listening(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return 0;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    const int ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    close(s);
    return ok;
}

static inline int hy_test_etcd_wait(hy_test_etcd *e)
{
    /* its port first: a gRPC channel whose first connect was refused waits
     * out a backoff before it dials again (over TLS it missed the whole 15 s
     * once) */
    for (int i = 0; i < 300 && !hy_test_etcd_listening(e->client_port); i++) {
        if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
            e->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    hy_etcd *c = hy_test_etcd_client(e, 500);
    if (!c) return -1;
    int rc = -1;
    for (int i = 0; i < 300; i++) {
        if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
            e->pid = 0;
            break;
        }
        hy_etcd_kv *kvs;
        size_t n;
        if (hy_etcd_range_prefix(c, e->probe[0] ? e->probe : "/hy-test-etcd-probe/", &kvs, &n,
                                 NULL, NULL) == 0) {
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
static inline int hy_test_etcd_start_as(hy_test_etcd *e, const char *cert, const char *key,
                                        const char *ca);

static inline int hy_test_etcd_start(hy_test_etcd *e)
{
    return hy_test_etcd_start_as(e, NULL, NULL, NULL);
}

/* hy_test_etcd_start serving TLS with the PEM files cert and key, its
 * clients trusting ca (the fixture's probes included). */
static inline int hy_test_etcd_start_tls(hy_test_etcd *e, const char *cert, const char *key,
                                         const char *ca)
{
    return hy_test_etcd_start_as(e, cert, key, ca);
}

static inline int hy_test_etcd_start_as(hy_test_etcd *e, const char *cert, const char *key,
                                        const char *ca)
{
    hy_test_etcd_require();
    hy_test_etcd_install_cleanup();
    memset(e, 0, sizeof *e);
    if (cert) {
        snprintf(e->cert, sizeof e->cert, "%s", cert);
        snprintf(e->key, sizeof e->key, "%s", key);
        snprintf(e->ca, sizeof e->ca, "%s", ca);
    }
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
 * answers etcdctl again (within 15 s), -1 otherwise (the log tail on stderr). */
static inline int hy_test_etcd_restart(hy_test_etcd *e, int down_ms)
{
    if (e->pid > 0) {
        kill(e->pid, SIGKILL);
        waitpid(e->pid, NULL, 0);
        e->pid = 0;
    }
    struct timespec ts = {down_ms / 1000, (down_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    /* Asked from another process (etcdctl), never over a channel of ours: a
     * probe from this process would share the gRPC connection of the code
     * under test and dial it again for it, hiding how long that code takes
     * to come back by itself. */
    if (hy_test_etcd_spawn(e) == 0) {
        char cmd[1600];
        snprintf(cmd, sizeof cmd,
                 "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=%s://%s %s%s "
                 "--dial-timeout=1s endpoint health >%s/etcdctl.log 2>&1",
                 e->cert[0] ? "https" : "http", e->endpoint, e->ca[0] ? "--cacert=" : "", e->ca,
                 e->dir);
        for (int i = 0; i < 150; i++) {
            if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
                e->pid = 0;
                break;
            }
            if (system(cmd) == 0) return 0;
            struct timespec step = {0, 100 * 1000000L};
            nanosleep(&step, NULL);
        }
    }
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

/* Runs `etcdctl <args>` against e (its TLS; as root once auth is on); 0 when
 * it succeeded, its output on stderr otherwise. */
static inline int hy_test_etcdctl(const hy_test_etcd *e, const char *args)
{
    char cmd[1600];
    snprintf(cmd, sizeof cmd,
             "ETCDCTL_API=3 /usr/bin/etcdctl --endpoints=%s://%s %s%s %s %s >%s/etcdctl.log 2>&1",
             e->cert[0] ? "https" : "http", e->endpoint, e->ca[0] ? "--cacert=" : "", e->ca,
             e->user[0] ? "--user=root:root-password-0" : "", args, e->dir);
    if (system(cmd) == 0) return 0;
    fprintf(stderr, "etcdctl %s failed:\n", args);
    snprintf(cmd, sizeof cmd, "cat %s/etcdctl.log >&2", e->dir);
    if (system(cmd)) {}
    return -1;
}

/* Turns on etcd's auth with etcdctl (Debian's etcd-client): a root user
 * (password root-password-0), and `user` (password pw) with a role that may read and write the keys under
 * prefix only; the fixture's probes call as `user` from then on. 0, 77 when
 * etcdctl is not installed (the caller says SKIPPED), -1 on failure (the
 * command's output on stderr). */
static inline int hy_test_etcd_auth(hy_test_etcd *e, const char *user, const char *pw,
                                    const char *prefix)
{
    if (access("/usr/bin/etcdctl", X_OK) != 0) return 77;
    char perm[300], add[300], grant[300];
    snprintf(perm, sizeof perm, "role grant-permission member --prefix=true readwrite %s", prefix);
    snprintf(add, sizeof add, "user add %s --new-user-password=%s", user, pw);
    snprintf(grant, sizeof grant, "user grant-role %s member", user);
    const char *steps[] = {"user add root --new-user-password=root-password-0",
                           "role add root",
                           "user grant-role root root",
                           "role add member",
                           perm,
                           add,
                           grant,
                           "auth enable"};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        if (hy_test_etcdctl(e, steps[i])) return -1;
    snprintf(e->user, sizeof e->user, "%s", user);
    snprintf(e->password, sizeof e->password, "%s", pw);
    snprintf(e->probe, sizeof e->probe, "%s", prefix);
    return 0;
}

#endif
