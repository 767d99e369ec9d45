/*
 * hypicctl: the operator's command line for hypic-cached, on
 * libhypic-client. `hypicctl [global options] COMMAND [options]`; global
 * options may also follow the command. This file holds the entry point,
 * the table of commands (--help's list is made from it), their help texts,
 * the connection and the error messages; command lines are read by
 * ctl_args.c, each command's from its own table of options. The commands
 * live in ctl_entries.c (what is stored: status, ls, inspect, evict,
 * invalidate, pin, unpin, policy, get, build, put, watch), ctl_compute.c
 * (what is computed: lookup, warm, prefill) and ctl_bench.c (load).
 */
#include "ctl_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --help: the global options, then the commands (from the table below),
 * then this. */
static const char *const usage_head =
    "usage: hypicctl [global options] COMMAND [options]\n"
    "\n"
    "Talks to hypic-cached, the HYPIC cache-tier service (gRPC, hypic.v1).\n"
    "\n"
    "Global options (also accepted after the command):\n"
    "  --addr HOST:PORT     the daemon's gRPC address (default $HYPIC_ADDR or 127.0.0.1:7878)\n"
    "  --token T            bearer token of your tenant (default $HYPIC_TOKEN)\n"
    "  --tls-ca FILE        TLS, trusting the CA in FILE (PEM); default: plaintext\n"
    "  --tls-server-name N  the name the server's certificate must carry (default: HOST)\n"
    "  --tls-cert FILE      with --tls-key: this client's certificate (PEM), for a daemon\n"
    "                       that asks for one (tls.client_ca: mutual TLS)\n"
    "  --tls-key FILE       the private key of --tls-cert (PEM)\n"
    "  --deadline-ms N      per call (default 60000; warm and watch: none)\n"
    "  --model NAME         the model requests name (default $HYPIC_MODEL, else recall:\n"
    "                       the daemon's embedded default)\n"
    "  --json               one JSON object per command on stdout, for scripts\n"
    "\n"
    "Commands:\n";
static const char *const usage_tail =
    "\n"
    "`hypicctl COMMAND --help` for a command's options.\n"
    "Exit codes: 0 OK, 1 the call failed, 2 usage error, 3 cannot connect (UNAVAILABLE).\n";

/* The commands: a command is a row here (its line in --help, its own
 * --help, the function that runs it). */
typedef struct command {
    const char *name;
    ctl_cmd_fn fn;
    const char *synopsis; /* its line in --help: "inspect KEY" */
    const char *summary;  /* and what it does */
    const char *help;     /* `hypicctl COMMAND --help` */
} command;

static const command commands[] = {
    {"status", ctl_status, "status", "health and cache statistics",
     "usage: hypicctl status\n"
     "Health (serving or not, version, models) and Stats (entries, bytes, hits, evictions,\n"
     "promotions, demotions per tier; misses, puts, requests in flight, queue depth).\n"
     "Exit 1 when the daemon answers but is not serving (starting or draining).\n"},
    {"ls", ctl_ls, "ls", "list entries (filters, sort, pages)",
     "usage: hypicctl ls [--tier hbm|host|nvme] [--tag T] [--sort key|bytes|hits|age] [--desc]\n"
     "                   [--limit N] [--page-size N]\n"
     "Your tenant's entries of --model (all models with --all-models), one row each; pages are\n"
     "followed until --limit entries (default: all).\n"},
    {"inspect", ctl_inspect, "inspect KEY",
     "an entry's metadata and sections (--verify: checksums)",
     "usage: hypicctl inspect KEY [--verify]\n"
     "An entry's metadata, its seam and body, and its sections per layer; --verify reads the\n"
     "bytes and checks every section's checksum (exit 1 when one fails).\n"},
    {"evict", ctl_evict, "evict KEY", "remove one entry",
     "usage: hypicctl evict KEY\n"
     "Removes one entry (Invalidate by key); prints how many were removed.\n"},
    {"invalidate", ctl_invalidate, "invalidate",
     "remove entries by --tag T, --model M, or --tenant (all yours)",
     "usage: hypicctl invalidate --tag T | --model M | --tenant\n"
     "Removes your tenant's entries with tag T, of model M, or all of them (--tenant).\n"},
    {"pin", ctl_pin, "pin KEY | --tag T",
     "keep entries from eviction and expiry (--ttl: for a while)",
     "usage: hypicctl pin (KEY | --tag T) [--ttl DURATION]\n"
     "Pins your tenant's entry KEY, or every entry tagged T: no tier evicts it and its TTL does\n"
     "not expire it until it is unpinned, or for DURATION (e.g. 90s, 30m, 12h, 7d; a soft pin\n"
     "that lapses). Pinned bytes count in your quota; at most limits.pinned_bytes_per_tenant of\n"
     "them (default a quarter of the host tier) may be pinned, and half the host tier in all:\n"
     "beyond, exit 1 (RESOURCE_EXHAUSTED) and nothing is pinned. Prints what was pinned and\n"
     "your pinned bytes against the cap. `ls` and `inspect` show pins.\n"},
    {"unpin", ctl_unpin, "unpin KEY | --tag T", "lift pins (--all: every pin of yours)",
     "usage: hypicctl unpin (KEY | --tag T | --all)\n"
     "Lifts the pins of entry KEY, of the entries tagged T, or all of your tenant's (--all);\n"
     "the entries stay, evictable again.\n"},
    {"policy", ctl_policy, "policy get|set TIER", "a tier's eviction and admission policy",
     "usage: hypicctl policy get TIER\n"
     "       hypicctl policy set TIER --evict lru|lfu|s3fifo|gdsf|hybrid\n"
     "                               --admit always|second-hit|tinylfu|min-tokens [--min-tokens "
     "N]\n"
     "A tier's (hbm, host, nvme) eviction and admission policy, read or changed at runtime.\n"},
    {"get", ctl_get, "get KEY --out FILE", "fetch an entry's bytes (and FILE.meta.json)",
     "usage: hypicctl get KEY --out FILE [--transport shm,tcp,rdma,cuda_ipc]\n"
     "Fetches an entry (GetEntry): its serialised bytes into FILE, its metadata into\n"
     "FILE.meta.json (what `hypicctl put FILE` sends back). --transport: the bytes come through\n"
     "a transport session (the first of the kinds the server can serve) instead of in chunks.\n"},
    {"build", ctl_build, "build FILE --out OUT",
     "build a segment's entry on the server without storing it",
     "usage: hypicctl build FILE --out OUT [--tag T]... [--ids] [--seam W] [--dtype f32|bf16]\n"
     "Builds FILE's tokens as one segment's entry on the server (Build: a scatter worker, or\n"
     "any daemon) without storing it: the bytes into OUT, the metadata into OUT.meta.json\n"
     "(`hypicctl put OUT` stores them, on this server or another).\n"},
    {"put", ctl_put, "put FILE", "store an entry fetched with get (or built with build)",
     "usage: hypicctl put FILE [--meta FILE.meta.json] [--tag T]... [--chunk BYTES]\n"
     "Stores a serialised entry (PutEntry) with the metadata `get` wrote; the server validates\n"
     "it whole before committing. --tag replaces the tags; --chunk: bytes per message (1 MiB).\n"},
    {"watch", ctl_watch, "watch", "stream stored / removed events",
     "usage: hypicctl watch [--all-models] [--count N]\n"
     "Prints stored / removed events of your tenant's entries (of --model, or every model) as\n"
     "they happen, until interrupted or N events; with --json one object per event and line.\n"},
    {"lookup", ctl_lookup, "lookup", "which segments are cached",
     "usage: hypicctl lookup (--segment FILE... | --key KEY...) [--ids] [--seam W]\n"
     "                       [--lease-ms N]\n"
     "Which segments are cached (tier, bytes, tokens) and how many leading ones hit. FILE: text,\n"
     "tokenised as bytes + 3; with --ids, whitespace-separated token ids.\n"},
    {"warm", ctl_warm, "warm FILES...", "build and store each file as a segment",
     "usage: hypicctl warm [--tag T]... [--tag-by-file] [--ids] [--seam W] [--dtype f32|bf16]\n"
     "                     FILES...\n"
     "Builds each file's tokens as one segment (from the empty state) and stores it: a progress\n"
     "bar on stderr when it is a terminal, one line per segment otherwise. --tag-by-file also\n"
     "tags each segment with its file's name. Exit 1 when a segment failed.\n"},
    {"prefill", ctl_prefill, "prefill", "prefill segments + a query with cache reuse",
     "usage: hypicctl prefill --segment FILE... (--query FILE | --text STR)\n"
     "                        [--mode full|prefix|pic|noseam|naive] [--seam W] [--top-k K]\n"
     "                        [--max-new N] [--ids] [--dtype f32|bf16]\n"
     "                        [--reuse auto|fetch|recompute]\n"
     "                        [--return-state] [--transport shm,tcp,rdma,cuda_ipc]\n"
     "                        [--state-buffer BYTES]\n"
     "                        [--state-out FILE]\n"
     "Prefills [segments..., query] reusing cached segments: the first token's top candidates\n"
     "with probabilities, the greedy continuation, each segment's outcome (hit, miss,\n"
     "uncacheable, prefix) and the time of each phase. A segment whose entry is stored is\n"
     "fetched, or recomputed when that is estimated to cost less (--reuse, default the\n"
     "daemon's pic.reuse): a line per such segment says which and why. --return-state also has the "
     "running\n"
     "state after the query delivered into this process's buffer (--state-buffer, default\n"
     "64 MiB) over the first transport of --transport the server can serve (default\n"
     "rdma,shm,tcp; rdma when this machine has a device, shm when the server is on this host);\n"
     "it prints the transport, the size and the time; --state-out writes the bytes to FILE\n"
     "(their layout: --json, field state.tensors; docs/transports.md). cuda_ipc, named in\n"
     "--transport, delivers into a buffer on this process's current GPU (the daemon on this\n"
     "node copies into it); --state-out then reads it back.\n"},
    {"bench", ctl_bench, "bench", "load: closed loop (--clients) or open loop (--rate)",
     "usage: hypicctl bench [--method lookup|prefill] [--clients N] [--rate R] [--duration S]\n"
     "                      (--segment FILE... | --random N --tokens L) [--seed S]\n"
     "                      [--query FILE | --text STR] [--mode M] [--no-warm] [--ids]\n"
     "                      [--per-request K]\n"
     "Load. Closed loop: N clients (default 16), each sending its next request when the last\n"
     "is answered. Open loop (--rate): R requests/s on a fixed schedule whatever the answers,\n"
     "on up to N clients (default 64); latency counts from each request's scheduled time.\n"
     "The segments are warmed first (unless --no-warm), so the calls measured hit.\n"
     "Prints QPS, p50/p90/p99/max latency (ms) and errors by status.\n"},
};

#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage(FILE *f)
{
    fputs(usage_head, f);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-20s %s\n", commands[i].synopsis, commands[i].summary);
    fputs(usage_tail, f);
}

static bool is_help(const char *arg)
{
    return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
}

int ctl_usage(const ctl *x, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (x->cmd) {
        fprintf(stderr, "hypicctl %s: %s\n(hypicctl %s --help for its options)\n", x->cmd, msg,
                x->cmd);
    } else {
        fprintf(stderr, "hypicctl: %s\n(hypicctl --help for the commands)\n", msg);
    }
    return CTL_USAGE;
}

int ctl_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("hypicctl: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CTL_FAILED;
}

int ctl_fail(const hyc_status *st)
{
    fprintf(stderr, "hypicctl: %s: %s\n", hyc_code_name(st->code), st->msg);
    return st->code == HYC_UNAVAILABLE ? CTL_UNAVAILABLE : CTL_FAILED;
}

static int connect_as(const ctl *x, int64_t deadline_ms, bool wait_for_ready, hyc **out)
{
    hyc_options o = {.wait_for_ready = wait_for_ready,
                     .target = x->addr,
                     .token = x->token,
                     .deadline_ms = x->deadline_ms >= 0 ? x->deadline_ms : deadline_ms,
                     .tls_ca_file = x->tls_ca,
                     .tls_server_name = x->tls_name,
                     .tls_cert_file = x->tls_cert,
                     .tls_key_file = x->tls_key};
    hyc_status st;
    if (hyc_open(&o, out, &st) == HYC_OK) return CTL_OK;
    int rc = ctl_fail(&st);
    /* what hyc_open refuses is what the options said (--addr, --tls-*) */
    return st.code == HYC_INVALID_ARGUMENT ? CTL_USAGE : rc;
}

int ctl_connect(const ctl *x, int64_t deadline_ms, hyc **out)
{
    return connect_as(x, deadline_ms, false, out);
}

int ctl_connect_waiting(const ctl *x, int64_t deadline_ms, hyc **out)
{
    return connect_as(x, deadline_ms, true, out);
}

int main(int argc, char **argv)
{
    ctl x = {.addr = getenv("HYPIC_ADDR"),
             .token = getenv("HYPIC_TOKEN"),
             .deadline_ms = -1,
             .model = getenv("HYPIC_MODEL")};
    if (!x.addr || !x.addr[0]) x.addr = "127.0.0.1:7878";
    if (!x.model || !x.model[0]) x.model = "recall";
    if (x.token && !x.token[0]) x.token = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (is_help(argv[i])) {
            usage(stdout);
            return CTL_OK;
        }
        if (strcmp(argv[i], "--list-commands") == 0) { /* for scripts and docs' checks */
            for (size_t k = 0; k < NCOMMANDS; k++) puts(commands[k].name);
            return CTL_OK;
        }
        if (ctl_global_option(&x, argc, argv, &i)) return CTL_USAGE;
    }
    if (i >= argc) {
        usage(stderr);
        return CTL_USAGE;
    }
    const command *c = find_command(argv[i]);
    if (!c) return ctl_usage(&x, "unknown command '%s'", argv[i]);
    x.cmd = c->name;
    for (int j = i + 1; j < argc; j++) {
        if (strcmp(argv[j], "--") == 0) break;
        if (is_help(argv[j])) {
            fputs(c->help, stdout);
            return CTL_OK;
        }
    }
    return c->fn(&x, argc - i, argv + i);
}
