/*
 * hypic-bench: benchmarks as programs. Each prints a readable summary and, as
 * its last line, one JSON object. Comparisons are ratios measured in the same
 * run, next to the physical limit they approach.
 *
 *   hypic-bench executor [--model DIR] [--quick]
 *   hypic-bench pic [--model DIR] [--requests N] [--seed N]
 *   hypic-bench quality [--model DIR] [--heldout FILE] [--requests N] [--out DIR]
 *   hypic-bench policies [--trace FILE | --zipf ...] [--params P] [--min-tokens N]
 *   hypic-bench tiers [--dir DIR] [--quick | --smoke]
 *   hypic-bench service [--quick] [--duration S] [--segments N] [--daemon PATH]
 *   hypic-bench rag [--quick] [--trace FILE | --docs N --zipf S ...] [--rates R,...] [--slo-ms MS]
 *   hypic-bench transfer [--quick] [--reps N]
 *   hypic-bench scatter [--quick] [--tokens N] [--seed N]
 *   hypic-bench cluster [--model DIR] [--quick]
 *   hypic-bench million [--max N] [--quick] [--out DIR] [--daemon PATH]
 *   hypic-bench soak [--quick] [--minutes M] [--clients N] [--docs N ...] [--daemon PATH]
 */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *what;
} k_benches[] = {
    {"executor", hy_bench_executor, "prefill throughput of the CPU executor vs the sgemm limit"},
    {"pic", hy_bench_pic,
     "TTFT and quality of full / prefix / pic / noseam / naive on RAG requests"},
    {"quality", hy_bench_quality,
     "exact-match answers of every mode, seam and storage on the trained model's held-out "
     "requests"},
    {"policies", hy_bench_policies,
     "hit rate and FLOPs saved of every eviction x admission policy on a trace"},
    {"tiers", hy_bench_tiers,
     "host and NVMe tier throughput vs memcpy and raw O_DIRECT io_uring; NVMe index lookups/s, "
     "host hits/s"},
    {"service", hy_bench_service,
     "Lookup and Prefill through hypic-cached over loopback vs the same handlers in-process"},
    {"reuse", hy_bench_reuse,
     "fetch or recompute per hit: always fetch, always recompute and the daemon's choice on "
     "short and long documents in host memory and on NVMe"},
    {"rag", hy_bench_rag,
     "sustainable QPS under a p99 TTFT SLO of full / prefix / pic on an open-loop RAG trace"},
    {"transfer", hy_bench_transfer,
     "bulk transports (shm, tcp, rdma) vs memcpy and a raw socket copy of the same bytes"},
    {"scatter", hy_bench_scatter,
     "a cold request on 1 and 2 scatter workers, LPT vs round-robin, the simulator to 16"},
    {"cluster", hy_bench_cluster,
     "cluster on etcd: QPS on 1-3 members, keys moved on join and leave, a kill's convergence"},
    {"scale", hy_bench_scale,
     "TTFT, memory, tokens computed and bytes fetched of every mode at 8..128 segments (~100k "
     "tokens)"},
    {"million", hy_bench_million,
     "10^3..10^6 small entries on host and NVMe: index bytes per entry, Lookup p50/p99, List "
     "paging, eviction rate, open after a clean stop and after SIGKILL, each against its growth"},
    {"soak", hy_bench_soak,
     "the rag trace for 30 minutes against a daemon evicting to NVMe, 16 clients: memory, fds, "
     "sessions and errors flat, hit rate per tier against the policy simulator"},
};

int main(int argc, char **argv)
{
    if (argc >= 2)
        for (size_t i = 0; i < sizeof k_benches / sizeof *k_benches; i++)
            if (strcmp(argv[1], k_benches[i].name) == 0) return k_benches[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "usage: hypic-bench NAME [options]\n");
    for (size_t i = 0; i < sizeof k_benches / sizeof *k_benches; i++)
        fprintf(stderr, "  %-10s %s\n", k_benches[i].name, k_benches[i].what);
    return 2;
}
