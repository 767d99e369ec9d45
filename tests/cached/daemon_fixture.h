/*
 * A real hypic-cached for the service's tests: started on loopback ports it
 * picks (port 0), with a configuration written into a temporary directory,
 * waited for through its --ready-file, and always stopped — by the test, or
 * by the kernel when the test process dies (PR_SET_PDEATHSIG), so a failing
 * or crashing test never leaves a daemon behind.
 *
 * The path of the daemon comes from the HYPIC_CACHED environment variable
 * (ctest sets it) or HY_CACHED_BIN (the build's).
 */
#ifndef HY_TEST_DAEMON_FIXTURE_H
#define HY_TEST_DAEMON_FIXTURE_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct hy_daemon {
    pid_t pid;
    char dir[256];  /* its working directory: config, ready file, log, var/ */
    char grpc[256]; /* host:port */
    char http[256];
    char log[300];
} hy_daemon;

static inline const char *hy_daemon_bin(void)
{
    const char *b = getenv("HYPIC_CACHED");
#ifdef HY_CACHED_BIN
    if (!b) b = HY_CACHED_BIN;
#endif
    return b;
}

/* Starts the daemon in dir (created by the caller) with the YAML text
 * `config` written to dir/hypic-cached.yaml. Returns 0 when it is serving,
 * -1 (with its log printed) when it exited or did not get ready in time. */
static inline int hy_daemon_start_as(hy_daemon *d, const char *bin, const char *dir,
                                     const char *config);

static inline int hy_daemon_start(hy_daemon *d, const char *dir, const char *config)
{
    return hy_daemon_start_as(d, hy_daemon_bin(), dir, config);
}

/* The same with another program of the same flags (hypic-worker). */
static inline int hy_daemon_start_as(hy_daemon *d, const char *bin, const char *dir,
                                     const char *config)
{
    memset(d, 0, sizeof *d);
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    snprintf(d->log, sizeof d->log, "%s/daemon.log", dir);
    char cfg[300], ready[300];
    snprintf(cfg, sizeof cfg, "%s/hypic-cached.yaml", dir);
    snprintf(ready, sizeof ready, "%s/ready", dir);
    unlink(ready);
    FILE *f = fopen(cfg, "w");
    if (!f) return -1;
    fputs(config, f);
    fclose(f);
    if (!bin) {
        fprintf(stderr, "daemon fixture: set HYPIC_CACHED (HYPIC_WORKER) to the binary\n");
        return -1;
    }
    const pid_t parent = getpid();
    d->pid = fork();
    if (d->pid < 0) return -1;
    if (d->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        if (getppid() != parent) _exit(127);
        if (chdir(dir) != 0) _exit(127);
        FILE *lf = freopen("daemon.log", "a", stderr);
        (void)lf;
        execl(bin, bin, "--config", "hypic-cached.yaml", "--init-models", "--ready-file", "ready",
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 600; i++) { /* 60 s: a model may be generated first */
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            fprintf(stderr, "daemon fixture: %s exited during start; its log:\n", bin);
            char cmd[400];
            snprintf(cmd, sizeof cmd, "cat '%s' >&2", d->log);
            if (system(cmd)) { /* the log is best effort */
            }
            d->pid = 0;
            return -1;
        }
        FILE *r = fopen(ready, "r");
        if (r) {
            char line[256];
            while (fgets(line, sizeof line, r)) {
                line[strcspn(line, "\n")] = '\0';
                if (strncmp(line, "grpc=", 5) == 0)
                    snprintf(d->grpc, sizeof d->grpc, "%.*s", (int)sizeof d->grpc - 1, line + 5);
                if (strncmp(line, "http=", 5) == 0)
                    snprintf(d->http, sizeof d->http, "%.*s", (int)sizeof d->http - 1, line + 5);
            }
            fclose(r);
            if (d->grpc[0]) return 0;
        }
        usleep(100000);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    return -1;
}

/* Sends sig and waits up to timeout_s for the exit; SIGKILL after that.
 * Returns the exit status as waitpid reports it (-1 when it was killed by
 * the fixture or was not running). */
static inline int hy_daemon_stop_with(hy_daemon *d, int sig, double timeout_s)
{
    if (d->pid <= 0) return -1;
    kill(d->pid, sig);
    int st = 0;
    for (int i = 0; i < (int)(timeout_s * 100); i++) {
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
            d->pid = 0;
            return st;
        }
        usleep(10000);
    }
    kill(d->pid, SIGKILL);
    waitpid(d->pid, NULL, 0);
    d->pid = 0;
    return -1;
}

/* Prints the last `lines` lines of the daemon's log to stderr (best effort). */
static inline void hy_daemon_print_log_tail(const hy_daemon *d, int lines)
{
    char cmd[sizeof d->log + 48];
    snprintf(cmd, sizeof cmd, "tail -n %d '%s' >&2", lines, d->log);
    fflush(stdout);
    fflush(stderr);
    if (system(cmd)) { /* the log is best effort */
    }
}

/* A clean stop (SIGTERM, drain): true when it exited 0 in time. When not,
 * says how it ended and prints the end of its log, so that a failure seen
 * once (under a loaded CI machine) can be read afterwards. */
static inline bool hy_daemon_stop(hy_daemon *d)
{
    const int st = hy_daemon_stop_with(d, SIGTERM, 30);
    const bool ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
        if (st == -1)
            fprintf(stderr, "daemon: no exit within 30 s of SIGTERM (killed)\n");
        else if (WIFEXITED(st))
            fprintf(stderr, "daemon: exit status %d after SIGTERM\n", WEXITSTATUS(st));
        else if (WIFSIGNALED(st))
            fprintf(stderr, "daemon: killed by signal %d after SIGTERM\n", WTERMSIG(st));
        fprintf(stderr, "daemon: the end of its log (%s):\n", d->log);
        hy_daemon_print_log_tail(d, 40);
    }
    return ok;
}

/* Whether the daemon's log contains s. */
static inline bool hy_daemon_log_has(const hy_daemon *d, const char *s)
{
    FILE *f = fopen(d->log, "r");
    if (!f) return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, s) != NULL;
    fclose(f);
    return found;
}

#endif
