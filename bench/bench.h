/* The benchmarks of hypic-bench, one function each (argv after the name). */
#ifndef HY_BENCH_H
#define HY_BENCH_H

int hy_bench_executor(int argc, char **argv);

/* Best-of-reps sgemm rate (FLOP/s) on an m×k·k×n product using every core:
 * the machine's limit for GEMM-bound work. */
double hy_bench_sgemm_flops(int m, int n, int k, int reps);

#endif
