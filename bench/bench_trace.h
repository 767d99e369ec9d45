/*
 * The RAG trace of the daemon benchmarks (`rag`, `soak`): requests of k
 * distinct documents drawn by Zipf popularity with log-normal lengths and a
 * short query, Poisson arrivals; the token ids of a document; the Prefill
 * message of a request; every distinct document built with Warm. The
 * generator and the token streams are described in docs/rag.md ("The
 * generated trace"): the same seed gives the same trace and the same ids in
 * every benchmark.
 */
#ifndef HY_BENCH_TRACE_H
#define HY_BENCH_TRACE_H

#include "hypic_client.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { HY_RAG_VOCAB_FIRST = 3, HY_RAG_MAX_K = 64 };

/* *sg as a Segment given by its tokens, ids[0..n), held by *tk (the three
 * the caller's, to outlive the messages that point at them). */
void hy_bench_token_segment(Hypic__V1__Tokens *tk, Hypic__V1__Segment *sg, uint32_t *ids, size_t n);

/* A cluster member's Stats (`cluster`, `million`): its entries and, from its
 * cluster section, the members in its view, the puts queued for their
 * owners, the entries handed over. */
typedef struct hy_bench_member {
    uint64_t entries, queued, handed;
    int members;
} hy_bench_member;

/* The Stats of the daemon at target (deadline 5 s); false when it does not
 * answer or is not a cluster member. */
bool hy_bench_member_stats(const char *target, hy_bench_member *out);

typedef struct hy_rag_request {
    double arrival; /* seconds, at the trace's own rate */
    int nq, k;      /* query tokens, documents */
    uint32_t doc[HY_RAG_MAX_K];
    int len[HY_RAG_MAX_K];
} hy_rag_request;

typedef struct hy_rag_trace {
    hy_rag_request *r;
    size_t n, cap;
    double rate; /* requests/s the arrivals were written at */
} hy_rag_trace;

/* The generator's parameters (docs/rag.md: --docs, --zipf, ...). */
typedef struct hy_rag_gen {
    int docs, k, query, lmin, lmax;
    double zipf, median, sigma;
    int seed_int; /* --seed */
    uint64_t seed;
} hy_rag_gen;

/* Appends a copy of *r: HY_OK or HY_ENOMEM. */
int hy_rag_trace_add(hy_rag_trace *t, const hy_rag_request *r);

/* Appends n requests at 1 request/s (Poisson), documents by Zipf rank (doc 0
 * the most popular), k distinct per request in the order drawn. Needs
 * g->k <= g->docs and g->lmin <= g->lmax. HY_OK or HY_ENOMEM. */
int hy_rag_trace_generate(hy_rag_trace *t, const hy_rag_gen *g, size_t n);

/* Document d's first len tokens, into out[len], in [HY_RAG_VOCAB_FIRST, vocab). */
void hy_rag_doc_tokens(uint32_t d, int len, int vocab, uint32_t *out);

/* A request's Prefill message (mode unset: the caller's), its segments as
 * token ids; request `index`'s query ids are seeded by index. Owns ids
 * (free it when done); points into itself, so it must not be moved. */
typedef struct hy_rag_wire {
    Hypic__V1__Tokens tok[HY_RAG_MAX_K];
    Hypic__V1__Segment seg[HY_RAG_MAX_K], *ps[HY_RAG_MAX_K];
    uint32_t *ids; /* every document's tokens, then the query's */
    Hypic__V1__PrefillRequest rq;
} hy_rag_wire;

int hy_rag_wire_make(hy_rag_wire *w, const hy_rag_request *r, size_t index, int vocab,
                     const char *model);

/* A distinct segment of a trace: a document at one length (the same id at
 * another length is another segment, its prefix). */
typedef struct hy_rag_doc {
    uint32_t doc;
    int len;
} hy_rag_doc;

/* The trace's distinct (doc, len) pairs in order of first use, into *out
 * (malloc'd, [*n]). HY_OK or HY_ENOMEM. */
int hy_rag_docs(const hy_rag_trace *t, hy_rag_doc **out, size_t *n);

/* The segments of up to HY_RAG_BATCH distinct documents as token ids, for a
 * Warm or a Lookup: ps[0..n) point into the batch itself (do not move it). */
enum { HY_RAG_BATCH = 128 };
typedef struct hy_rag_batch {
    Hypic__V1__Tokens tok[HY_RAG_BATCH];
    Hypic__V1__Segment seg[HY_RAG_BATCH], *ps[HY_RAG_BATCH];
    uint32_t *ids[HY_RAG_BATCH];
    size_t n;
} hy_rag_batch;

/* Fills b with d[0..n), n <= HY_RAG_BATCH. HY_OK, or HY_ENOMEM with nothing
 * held. hy_rag_batch_free frees the ids (of a filled batch). */
int hy_rag_batch_make(hy_rag_batch *b, const hy_rag_doc *d, size_t n, int vocab);
void hy_rag_batch_free(hy_rag_batch *b);

/* Builds the entry of each of d[0..nd) with Warm on `target`, in batches.
 * 0, or 1 after printing why, prefixed by who ("hypic-bench rag"). */
int hy_rag_warm(const hy_rag_doc *d, size_t nd, int vocab, const char *model, const char *target,
                const char *who);

#endif
