/*
 * The router: hypic-cached's scatter workers and the requests it spreads over
 * them (docs/scheduler.md). A Prefill in the pic family whose misses are long
 * enough (scatter.min_tokens) sends them to the workers that are up — one
 * Build per distinct segment, assigned by the planner (LPT or round-robin,
 * scheduler/) with the cost model fitted to the builds measured so far — and
 * composes with hy_combine_stream as their entries arrive, in request order.
 * Each entry is received whole, validated (hy_entry_deserialize: sizes,
 * checksums, fingerprint), checked to be the segment asked for, and stored
 * before the combiner sees it (two-phase: reserved and committed only then);
 * a call that fails or times out is retried on another worker, and a segment
 * no worker could build is built inline by the combiner.
 *
 * Workers come from the configuration (scatter.workers), from processes the
 * daemon starts itself (scatter.spawn; restarted when they die) and from a
 * DNS name (scatter.dns, resolved again at every probe). A probe thread asks
 * each worker's Health every scatter.probe_ms: a worker that answers is up,
 * one that fails a call or a probe is down until it answers again.
 *
 * Locking: the router's mu guards the worker table and the cost samples; a
 * job's mu its segments. Never both at once.
 */
#ifndef HY_CACHED_ROUTER_INTERNAL_H
#define HY_CACHED_ROUTER_INTERNAL_H

#include "hypic.pb-c.h"
#include "service_internal.h"

typedef struct svc_router svc_router;

/* Starts the router when scatter workers are configured (s->router stays
 * NULL otherwise): spawns the local workers, resolves the DNS name, starts
 * the probe thread, and waits (up to 60 s) for the spawned workers to answer. */
int svc_router_start(hy_svc *s, hy_err *err);
/* Stops the probe thread and the spawned workers; no job may be running. */
void svc_router_stop(hy_svc *s);

/* The workers as Stats reports them: *out an array of *n messages (free
 * with svc_router_stats_free). */
void svc_router_stats(hy_svc *s, Hypic__V1__WorkerStats ***out, size_t *n);
void svc_router_stats_free(Hypic__V1__WorkerStats **w, size_t n);

/* One segment of a request as the router sees it. */
typedef struct sc_seg_in {
    const int32_t *tok;
    size_t n;
    hy_key key;
    char **tags;
    size_t ntags;
    bool ship; /* a miss to build on a worker */
} sc_seg_in;

typedef struct sc_job sc_job;

/* Sends the request's segments marked ship (duplicates once) to the workers
 * that are up. *out NULL (and 0) when none is up or nothing is to ship: the
 * request then runs inline. */
int sc_job_start(hy_svc *s, svc_model *sm, const char *tenant, int W, hy_entry_repr rp,
                 const sc_seg_in *segs, size_t n, sc_job **out, hy_err *err);

/* hy_segment_await_fn over a job: segment i's entry once a worker's has
 * arrived, NULL for a segment not shipped or one no worker could build. While
 * it waits it watches the Prefill call: a client that cancelled or went away,
 * or a deadline that passed, cancels the job (HY_ECANCELED). */
typedef struct sc_await_ctx {
    sc_job *job;
    hy_rpc_call *call;
    const hy_segment *hits; /* [n] the request's hits (entry not NULL) */
} sc_await_ctx;
int sc_await(void *ctx, size_t i, bool wait, const hy_entry **entry, hy_err *err);

/* What became of request segment i once the job is over. */
typedef struct sc_outcome {
    bool shipped;             /* sent to a worker */
    bool built;               /* a worker's entry was used */
    bool stored;              /* and admitted by the store */
    hy_tier_id tier;          /* where it was placed */
    char by[HY_CFG_ADDR_MAX]; /* the worker that built it */
} sc_outcome;

/* Cancels what is still running, waits for the job's threads, fills out[i]
 * for each request segment and the summary (each may be NULL), and frees the
 * job. NULL is a no-op. */
typedef struct sc_summary {
    uint32_t scattered; /* distinct segments sent */
    uint32_t workers;   /* workers whose entries were used */
    uint32_t retries;   /* calls beyond each segment's first */
    double makespan_s;  /* from the dispatch to the last entry received */
} sc_summary;
void sc_job_end(sc_job *j, sc_outcome *out, sc_summary *sum);

#endif
