/*
 * What hypic-bench soak's two files share: the run (bench_soak.c) and its
 * sizing and prediction (bench_soak_size.c).
 */
#ifndef HY_BENCH_SOAK_H
#define HY_BENCH_SOAK_H

#include "bench.h"
#include "bench_trace.h"

#include <stddef.h>
#include <stdint.h>

/* A distinct segment of the trace as the daemon stores it. */
typedef struct seg_info {
    uint8_t key[32];
    uint64_t bytes; /* payload; 0: not stored (too short to cache) */
    uint32_t tokens;
    double flops; /* the recompute cost a hit saves (the entry's meta) */
} seg_info;

/* The tiers of the daemon under test, sized from the probe. */
typedef struct soak_setup {
    uint64_t working_set; /* Σ over stored segments of their bytes in host pages */
    uint64_t host_bytes, nvme_bytes;
    size_t stored, uncacheable;  /* distinct segments the store keeps, and those too short */
    hy_policy_config host, nvme; /* their policies, capacity the tier's bytes */
} soak_setup;

/* Builds every segment of d[0..nd) with Warm on a probe daemon of its own
 * under tmp (a host tier admitting all, NVMe written through behind it, so
 * nothing is lost) and fills info[0..nd) with what the store keeps of each
 * (Lookup: key, bytes, tokens; List: cost). The probe's files are removed.
 * 0, or 1 after saying why. */
int soak_probe(const char *tmp, const char *preset, const char *model_dir, int vocab,
               const hy_rag_doc *d, size_t nd, seg_info *info);

/* The host tier host_frac of the working set (whole MiB, at least 1) with
 * evict/admit, NVMe gdsf/always with room for the working set twice over.
 * 0, or 1 after saying why. */
int soak_size(const seg_info *info, size_t nd, double host_frac, const char *evict,
              const char *admit, soak_setup *u);

/* The segment lookups of requests [0, n) in the order sent (request i is
 * trace[i % t->n]), uncacheable segments left out, into *out (malloc'd,
 * [*nl]); *n_pre: how many belong to requests before `split`. HY_OK or
 * HY_ENOMEM. */
int soak_lookups(const hy_rag_trace *t, const hy_rag_doc *d, size_t nd, const seg_info *info,
                 size_t n, size_t split, hy_bench_lookup **out, size_t *nl, size_t *n_pre);

/* The hit rate of the lookups after the first n_pre, replayed through a tier
 * of cfg with in_flight requests pinned; NAN after saying why. */
double soak_predict(const hy_bench_lookup *l, size_t n, size_t n_pre, uint32_t nobj,
                    const hy_policy_config *cfg, uint32_t in_flight);

#endif
