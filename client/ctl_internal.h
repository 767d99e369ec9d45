/*
 * Private to hypicctl: the state every command shares (how to reach the
 * server, output format), the command-line tables and their parser with the
 * exit-code convention,
 * output helpers (tables for people, one JSON object for scripts, protobuf
 * messages as JSON), and reading segments from files.
 *
 * Exit codes: 0 the command did what it was asked; 1 the call failed (the
 * server's status, printed "hypicctl: NOT_FOUND: <msg>"); 2 usage error; 3
 * the server cannot be reached (UNAVAILABLE).
 */
#ifndef HY_CTL_INTERNAL_H
#define HY_CTL_INTERNAL_H

#include "hy_common.h"
#include "hypic_client.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { CTL_OK = 0, CTL_FAILED = 1, CTL_USAGE = 2, CTL_UNAVAILABLE = 3 };

/* Default deadline of a call when --deadline-ms is not given; the long
 * streams (warm, watch) have none. */
#define CTL_DEADLINE_DEFAULT_MS 60000
/* --tag options of one command at most. */
#define CTL_TAGS_MAX 64

typedef struct ctl {
    const char *addr;     /* --addr, $HYPIC_ADDR, 127.0.0.1:7878 */
    const char *token;    /* --token, $HYPIC_TOKEN, or NULL */
    const char *tls_ca;   /* --tls-ca FILE, or NULL */
    const char *tls_name; /* --tls-server-name, or NULL */
    const char *tls_cert; /* --tls-cert FILE, or NULL */
    const char *tls_key;  /* --tls-key FILE, or NULL */
    int64_t deadline_ms;  /* --deadline-ms; -1: the command's default */
    const char *model;    /* --model, default "tiny" */
    bool json;            /* --json */
    const char *cmd;      /* the command's name, for messages */
} ctl;

/* A command: argv[0] is its name (argc >= 1). Returns the exit code. */
typedef int (*ctl_cmd_fn)(ctl *x, int argc, char **argv);

int ctl_status(ctl *x, int argc, char **argv);
int ctl_ls(ctl *x, int argc, char **argv);
int ctl_inspect(ctl *x, int argc, char **argv);
int ctl_evict(ctl *x, int argc, char **argv);
int ctl_invalidate(ctl *x, int argc, char **argv);
int ctl_pin(ctl *x, int argc, char **argv);
int ctl_unpin(ctl *x, int argc, char **argv);
int ctl_policy(ctl *x, int argc, char **argv);
int ctl_get(ctl *x, int argc, char **argv);
int ctl_build(ctl *x, int argc, char **argv);

int ctl_put(ctl *x, int argc, char **argv);
int ctl_watch(ctl *x, int argc, char **argv);
int ctl_lookup(ctl *x, int argc, char **argv);
int ctl_warm(ctl *x, int argc, char **argv);
int ctl_prefill(ctl *x, int argc, char **argv);
int ctl_bench(ctl *x, int argc, char **argv);

/* ---- errors (hypicctl.c) ---- */

/* Prints "hypicctl CMD: <msg>" and a pointer to --help on stderr; returns
 * CTL_USAGE. */
int ctl_usage(const ctl *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- command lines (ctl_args.c) ---- */

typedef struct ctl_opt ctl_opt;
/* Reads option o's value v (NULL for a flag) into args, the command's
 * arguments: CTL_OK, or CTL_USAGE after a message naming the option. */
typedef int (*ctl_opt_fn)(ctl *x, const ctl_opt *o, void *args, const char *v);

typedef enum ctl_opt_kind {
    CTL_OPT_FLAG,      /* no value: the bool at off becomes true */
    CTL_OPT_STR,       /* the value as given, into the const char * at off */
    CTL_OPT_U64,       /* an integer in [min, max] into the uint64_t at off */
    CTL_OPT_DOUBLE,    /* a number in [lo, hi] into the double at off */
    CTL_OPT_LIST,      /* appended to the ctl_list at off: max values at most (0: CTL_LIST_MAX) */
    CTL_OPT_CALL,      /* fn reads the value */
    CTL_OPT_CALL_FLAG, /* no value: fn is called */
} ctl_opt_kind;

/* One option of a command: a row of its table. */
struct ctl_opt {
    const char *name;  /* "--out" */
    const char *alias; /* another spelling ("-o"), or NULL */
    ctl_opt_kind kind;
    size_t off;        /* the field of the command's arguments it sets */
    uint64_t min, max; /* CTL_OPT_U64: the range; CTL_OPT_LIST: values at most */
    double lo, hi;     /* CTL_OPT_DOUBLE: the range */
    ctl_opt_fn fn;     /* CTL_OPT_CALL, CTL_OPT_CALL_FLAG */
    bool gathers;      /* CTL_OPT_LIST: the positional arguments after it are its values too
                        * ("--segment A B C") */
    bool ends_list;    /* positional arguments after it no longer go to such a list */
};

/* Rows: option n sets field f of the command's arguments, a T. A list whose
 * option gathers the positional arguments after it (CTL_GATHER); a string
 * after which they are gathered no more (CTL_STR_ENDS); a string with a
 * second spelling a (CTL_STR_ALIAS). */
/* clang-format off */
#define CTL_FLAG(n, T, f)             {.name = n, .kind = CTL_OPT_FLAG, .off = offsetof(T, f)}
#define CTL_STR(n, T, f)              {.name = n, .kind = CTL_OPT_STR, .off = offsetof(T, f)}
#define CTL_U64(n, T, f, lo_, hi_)    {.name = n, .kind = CTL_OPT_U64, .off = offsetof(T, f), \
                                       .min = lo_, .max = hi_}
#define CTL_DOUBLE(n, T, f, lo_, hi_) {.name = n, .kind = CTL_OPT_DOUBLE, .off = offsetof(T, f), \
                                       .lo = lo_, .hi = hi_}
#define CTL_LIST(n, T, f, most)       {.name = n, .kind = CTL_OPT_LIST, .off = offsetof(T, f), \
                                       .max = most}
#define CTL_CALL(n, T, f, fn_)        {.name = n, .kind = CTL_OPT_CALL, .off = offsetof(T, f), \
                                       .fn = fn_}
#define CTL_CALL_FLAG(n, T, f, fn_)   {.name = n, .kind = CTL_OPT_CALL_FLAG, .off = offsetof(T, f), \
                                       .fn = fn_}
#define CTL_GATHER(n, T, f)           {.name = n, .kind = CTL_OPT_LIST, .off = offsetof(T, f), \
                                       .gathers = true}
#define CTL_STR_ENDS(n, T, f)         {.name = n, .kind = CTL_OPT_STR, .off = offsetof(T, f), \
                                       .ends_list = true}
#define CTL_STR_ALIAS(n, a, T, f)     {.name = n, .alias = a, .kind = CTL_OPT_STR, \
                                       .off = offsetof(T, f)}
/* clang-format on */

/* The values of a list option (or of the positional arguments beyond the
 * named ones). */
#define CTL_LIST_MAX 4096
typedef struct ctl_list {
    char *v[CTL_LIST_MAX];
    size_t n;
} ctl_list;

/* --seam W, when given. */
typedef struct ctl_seam {
    bool set;
    uint32_t w;
} ctl_seam;

/* A command's command line: its options, and where positional arguments go
 * — the const char * fields at pos[0..npos) in order, then the list of the
 * last option that gathers them, else the list rest (NULL: an error, with
 * hint appended to its message). */
typedef struct ctl_cmdline {
    const ctl_opt *opts;
    size_t nopts;
    size_t pos[2];
    int npos;
    const ctl_opt *rest;
    const char *hint;
} ctl_cmdline;
#define CTL_OPTS(table) .opts = table, .nopts = sizeof table / sizeof table[0]

/* Reads argv[1..argc) (argv[0]: the command) into args by the table cl,
 * the global options as well wherever they come. CTL_OK, or CTL_USAGE after
 * a message (an unknown option, a missing value, a value out of range, an
 * argument too many). */
int ctl_parse(ctl *x, int argc, char **argv, const ctl_cmdline *cl, void *args);
/* argv[*i] as a global option (--addr, --json...): CTL_OK with *i past its
 * value, CTL_USAGE after a message (not one, or a bad value). */
int ctl_global_option(ctl *x, int argc, char **argv, int *i);

/* Readers of option values for the tables: a tier or "any" (a
 * Hypic__V1__Tier), a mode (Hypic__V1__Mode), f32|bf16 (a
 * Hypic__V1__StateDtype), a seam width (a ctl_seam). */
int ctl_opt_tier_any(ctl *x, const ctl_opt *o, void *args, const char *v);
int ctl_opt_mode(ctl *x, const ctl_opt *o, void *args, const char *v);
int ctl_opt_dtype(ctl *x, const ctl_opt *o, void *args, const char *v);
int ctl_opt_seam(ctl *x, const ctl_opt *o, void *args, const char *v);

/* An unsigned integer option value within [min, max]; CTL_USAGE (after a
 * message naming the option, the value and the range) otherwise. */
int ctl_u64(const ctl *x, const char *name, const char *v, uint64_t min, uint64_t max,
            uint64_t *out);
/* A number (e.g. seconds, a rate) within [min, max]. */
int ctl_double(const ctl *x, const char *name, const char *v, double min, double max, double *out);
/* A duration (a number and ms, s, m, h or d; seconds without a unit) of at
 * least 1 ms and at most max_ms, in milliseconds. */
int ctl_duration_ms(const ctl *x, const char *name, const char *v, uint64_t max_ms, uint64_t *out);
/* A tier by name (hbm, host, nvme; "any" for TIER_NONE when any_ok). */
int ctl_tier(const ctl *x, const char *name, const char *v, bool any_ok, Hypic__V1__Tier *out);
/* A mode of Prefill by name (full, prefix, pic, noseam, naive: hypic.proto's
 * Mode values, named as ctl_enum names them). */
int ctl_mode(const ctl *x, const char *name, const char *v, Hypic__V1__Mode *out);
/* A key: 64 hex digits into out[32]. */
int ctl_key(const ctl *x, const char *v, uint8_t out[32]);

/* ---- connections and failed calls (hypicctl.c) ---- */

/* Opens the connection with deadline_ms when --deadline-ms was not given.
 * CTL_OK, or the exit code after printing why (CTL_USAGE for options
 * hyc_open refuses, e.g. a --tls-ca file without a certificate). */
int ctl_connect(const ctl *x, int64_t deadline_ms, hyc **out);
/* The same, with calls that wait for the connection (within their deadline)
 * instead of failing while it is down: the bench's clients. */
int ctl_connect_waiting(const ctl *x, int64_t deadline_ms, hyc **out);
/* Prints "hypicctl: <CODE>: <msg>" on stderr; returns CTL_UNAVAILABLE for
 * UNAVAILABLE, CTL_FAILED otherwise. */
int ctl_fail(const hyc_status *st);
/* Prints "hypicctl: <msg>" on stderr; returns CTL_FAILED. */
int ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- segments and token ids (ctl_output.c) ---- */

/* Token ids read from a file: text, tokenised bytes + 3 (hy_tokenize_bytes)
 * or, with ids, whitespace-separated decimal ids. */
typedef struct ctl_ids {
    uint32_t *ids;
    size_t n;
} ctl_ids;

int ctl_ids_from_file(const char *path, bool ids, ctl_ids *out, hy_err *err);
int ctl_ids_from_text(const char *text, ctl_ids *out, hy_err *err);
void ctl_ids_free(ctl_ids *t);

/* Segments for a request: each by its tokens, tags none (the caller adds
 * them). segs[i] points at seg[i]; the tokens are owned here. */
typedef struct ctl_segments {
    size_t n;
    Hypic__V1__Segment **segs;
    Hypic__V1__Segment *seg;
    Hypic__V1__Tokens *tok;
    ctl_ids *ids;
} ctl_segments;

/* n segments with no reference yet (the caller sets a key or tokens). */
int ctl_segments_new(ctl_segments *s, size_t n, hy_err *err);
/* One segment per file (ctl_ids_from_file); the error names the file. */
int ctl_segments_from_files(ctl_segments *s, char *const *files, size_t n, bool ids, hy_err *err);
/* n segments of len token ids drawn uniformly from the byte tokens [3, 259)
 * (valid for every embedded model), reproducible from seed. */
int ctl_segments_random(ctl_segments *s, size_t n, size_t len, uint64_t seed, hy_err *err);
void ctl_segments_free(ctl_segments *s);

/* ---- output (ctl_output.c) ---- */

/* A protobuf-c message as JSON: fields by their proto names, enums by their
 * value names ("TIER_HOST"), bytes as lower-case hex, every field (defaults
 * included) except unset oneof members and absent sub-messages. */
cJSON *ctl_json_msg(const ProtobufCMessage *m);
/* Prints o (unformatted, one line) on stdout and frees it. */
void ctl_json_print(cJSON *o);

/* A table for people: columns aligned to their widest cell. */
typedef struct ctl_table ctl_table;
ctl_table *ctl_table_new(int ncols, const char *const *headers);
void ctl_table_row(ctl_table *t, const char *const *cells);
/* Prints and frees. */
void ctl_table_print(ctl_table *t);
/* Frees without printing; NULL is a no-op. */
void ctl_table_free(ctl_table *t);

/* "1.5 MiB", "812 B" */
void ctl_bytes(uint64_t b, char *out, size_t cap);
/* "3s", "5m", "2h", "4d" since a unix-ns time (now: wall clock); "-" for 0. */
void ctl_age(uint64_t unix_ns, char *out, size_t cap);
/* A pin as `ls` shows it: pinned (until unpinned), "17m left", or - (none or lapsed). */
void ctl_pin_text(uint64_t until_unix_ns, char *out, size_t cap);
/* Tier's short name: "hbm", "host", "nvme", "-". */
const char *ctl_tier_name(int tier);
/* Lower-case hex of a key (65 bytes with the NUL), or "-" when empty. */
void ctl_hex(const ProtobufCBinaryData *b, char *out, size_t cap);
/* Value v of enum d by its name without prefix, in lower case:
 * (WarmProgress.State, 1, "STATE_") -> "built"; "?<v>" for a value d lacks. */
void ctl_enum(const ProtobufCEnumDescriptor *d, int v, const char *prefix, char *out, size_t cap);
/* A token id as a printable string for the embedded byte tokenizer (id - 3
 * as a byte; escapes for control bytes; "<id>" outside it). */
void ctl_token_text(uint32_t id, char *out, size_t cap);

#endif
