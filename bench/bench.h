/* The benchmarks of hypic-bench, one function each (argv after the name), and
 * what they share. */
#ifndef HY_BENCH_H
#define HY_BENCH_H

#include "hy_model.h"
#include "hy_tiers.h"

int hy_bench_executor(int argc, char **argv);
int hy_bench_pic(int argc, char **argv);
int hy_bench_quality(int argc, char **argv);
int hy_bench_policies(int argc, char **argv);
int hy_bench_tiers(int argc, char **argv);
int hy_bench_service(int argc, char **argv);
int hy_bench_reuse(int argc, char **argv);
int hy_bench_rag(int argc, char **argv);
int hy_bench_transfer(int argc, char **argv);
int hy_bench_scatter(int argc, char **argv);
int hy_bench_cluster(int argc, char **argv);
int hy_bench_million(int argc, char **argv);
int hy_bench_scale(int argc, char **argv);
int hy_bench_soak(int argc, char **argv);

/* Best-of-reps sgemm rate (FLOP/s) on an m×k·k×n product using every core:
 * the machine's limit for GEMM-bound work. */
double hy_bench_sgemm_flops(int m, int n, int k, int reps);
/* Best-of-reps rate (bytes/s) of reading 256 MiB with every core: the
 * machine's memory bandwidth for a read. */
double hy_bench_stream_read_bytes_s(int reps);
/* A field of /proc/PID/status in kB ("VmRSS", "VmHWM", "RssAnon"); -1 when
 * it cannot be read. */
long hy_bench_proc_status_kb(int pid, const char *field);

typedef struct hy_bench_model {
    hy_model *m;
    hy_exec *ex;
    hy_state *st;
    const hy_model_config *c;
    char tmp[64]; /* the generated model's directory, removed on close */
} hy_bench_model;

/* Opens `model`, or generates the `small` preset when it is NULL; prints a
 * line about it. Returns 0, or 1 after printing the error. */
/* What hy_bench_weight_formats measured; [0] bf16 as kept (fp32 arithmetic),
 * [1] bf16 arithmetic (HY_WEIGHTS_BF16; bf16_math says whether this CPU has
 * it), [2] quantised to q8, [3] the same checkpoint widened to fp32. ran is
 * 0 when the checkpoint is not BF16. logits_max_abs_diff[k]: [0..2] against
 * [3]. */
#define HY_BENCH_NFORMATS 4
typedef struct hy_bench_weights {
    int ran, rounds, prefill_tokens, bf16_math;
    double prefill_tok_s[HY_BENCH_NFORMATS], decode_tok_s[HY_BENCH_NFORMATS];
    double matrix_mb[HY_BENCH_NFORMATS], decode_bw_fraction[HY_BENCH_NFORMATS];
    double stream_gb_s, logits_max_abs_diff[HY_BENCH_NFORMATS - 1], logits_max_abs;
} hy_bench_weights;
/* The BF16 checkpoint at model (or `small` generated in BF16 when NULL) in
 * each format, printed as it goes; 0, or 1 after printing why. */
int hy_bench_weight_formats(const char *model, int quick, hy_bench_weights *out);

/* qsort's comparator of doubles, ascending. */
int hy_bench_cmp_double(const void *a, const void *b);
/* The median of v[0..n), sorting v; 0 when empty. */
double hy_bench_median(double *v, size_t n);

int hy_bench_open(hy_bench_model *b, const char *model);
/* hy_bench_open with the model's matrices kept as w says (hy_weights). */
int hy_bench_open_with(hy_bench_model *b, const char *model, hy_weights w);
void hy_bench_close(hy_bench_model *b);

/* Writes `script` to dir/script_name and runs gnuplot on it there (the
 * script names its own output, a PNG); prints what it made, that gnuplot is
 * not installed (the script and its data stay), or how it failed. */
void hy_bench_gnuplot(const char *dir, const char *script_name, const char *script);

/* An entry representation named on the command line: "f32" (exact, every
 * part fp32: version 1's entry), "bf16" (exact shapes, every part bf16), a
 * tolerance "0.01" (compact head forms, bf16 allowed in every part) or
 * "0.01/f32" (compact forms, fp32 only). HY_EINVAL with the reason in why. */
int hy_bench_parse_repr(const char *s, hy_entry_repr *out, char *why, size_t cap);

/* One segment lookup of a trace for the policy simulator. obj: a dense
 * index of the segment (< the trace's nobj); cost: the recompute FLOPs a hit
 * saves; starts_request: the first lookup of a request (the segments of one
 * request are pinned together while it is served). */
typedef struct hy_bench_lookup {
    uint32_t obj, tokens;
    uint64_t bytes;
    double cost;
    bool starts_request;
} hy_bench_lookup;

/* What a replay measured: hits / lookups, bytes of hits / bytes looked up,
 * cost of hits / cost of all lookups. */
typedef struct hy_bench_sim {
    double hit_rate, byte_hit_rate, flops_saved;
} hy_bench_sim;

/* Replays lk[0..n) (n > 0) through one simulated tier of cfg (its policies
 * and capacity, bytes), as `hypic-bench policies` does (docs/policies.md): a
 * lookup hits when resident; a miss is offered to the admitter and, when
 * admitted, evicts until it fits. The segments of the last in_flight
 * requests (at least 1: the one being served) are pinned, as the leases of
 * requests in flight pin them in the store. 0, or 1 after printing why. */
int hy_bench_policy_replay(const hy_bench_lookup *lk, size_t n, uint32_t nobj,
                           const hy_policy_config *cfg, uint32_t in_flight, hy_bench_sim *out);

/* Removes dir and everything under it (no symlinks followed). */
void hy_bench_rmtree(const char *dir);

/* Makes a fresh directory $TMPDIR/hypic-bench-NAME-XXXXXX (/tmp when
 * TMPDIR is unset or empty) into out: 0, or 1 with the reason on stderr. */
int hy_bench_mkdtemp(const char *name, char *out, size_t cap);

#endif
