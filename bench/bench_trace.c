/*
 * The RAG trace shared by `hypic-bench rag` and `hypic-bench soak`
 * (bench_trace.h): the generator, the documents' token ids, a request's
 * Prefill message and the Warm of every distinct document. The presets have
 * random weights, so only lengths and reuse matter: a document's ids are a
 * random stream seeded by its id, a query's by its request's index.
 */
#include "bench_trace.h"
#include "hy_common.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

int hy_rag_trace_add(hy_rag_trace *t, const hy_rag_request *r)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 256;
        hy_rag_request *nr = realloc(t->r, cap * sizeof *nr);
        if (!nr) return HY_ENOMEM;
        t->r = nr;
        t->cap = cap;
    }
    t->r[t->n++] = *r;
    return HY_OK;
}

/* Document d's length: log-normal around the median, clamped, seeded by d. */
static int doc_len(const hy_rag_gen *g, uint32_t d)
{
    hy_rng r;
    hy_rng_seed(&r, 0x6c656e00ull ^ ((uint64_t)d * 0x9e3779b97f4a7c15ull));
    const double l = g->median * exp(g->sigma * hy_rng_normal(&r));
    return (int)HY_MIN(HY_MAX(lround(l), g->lmin), g->lmax);
}

int hy_rag_trace_generate(hy_rag_trace *t, const hy_rag_gen *g, size_t n)
{
    double *cdf = malloc((size_t)g->docs * sizeof *cdf);
    if (!cdf) return HY_ENOMEM;
    double z = 0;
    for (int d = 0; d < g->docs; d++) cdf[d] = z += pow(d + 1.0, -g->zipf);
    hy_rng rng;
    hy_rng_seed(&rng, g->seed);
    double at = 0;
    t->rate = 1;
    for (size_t i = 0; i < n; i++) {
        hy_rag_request r = {.nq = g->query, .k = g->k};
        at += -log(1 - hy_rng_uniform(&rng));
        r.arrival = at;
        for (int j = 0; j < g->k; j++) {
            uint32_t d;
            bool dup;
            do { /* rejection: k <= docs, checked by the caller */
                const double u = hy_rng_uniform(&rng) * z;
                int lo = 0, hi = g->docs - 1;
                while (lo < hi) {
                    const int mid = (lo + hi) / 2;
                    if (cdf[mid] > u)
                        hi = mid;
                    else
                        lo = mid + 1;
                }
                d = (uint32_t)lo;
                dup = false;
                for (int q = 0; q < j; q++) dup |= r.doc[q] == d;
            } while (dup);
            r.doc[j] = d;
            r.len[j] = doc_len(g, d);
        }
        if (hy_rag_trace_add(t, &r)) {
            free(cdf);
            return HY_ENOMEM;
        }
    }
    free(cdf);
    return HY_OK;
}

void hy_rag_doc_tokens(uint32_t d, int len, int vocab, uint32_t *out)
{
    hy_rng r;
    hy_rng_seed(&r, 0x646f6300ull + d);
    for (int i = 0; i < len; i++)
        out[i] = HY_RAG_VOCAB_FIRST +
                 (uint32_t)(hy_rng_next(&r) % (uint64_t)(vocab - HY_RAG_VOCAB_FIRST));
}

int hy_rag_wire_make(hy_rag_wire *w, const hy_rag_request *r, size_t index, int vocab,
                     const char *model)
{
    size_t total = (size_t)r->nq;
    for (int j = 0; j < r->k; j++) total += (size_t)r->len[j];
    if (!(w->ids = malloc(total * sizeof *w->ids))) return HY_ENOMEM;
    uint32_t *p = w->ids;
    for (int j = 0; j < r->k; j++) {
        hy_rag_doc_tokens(r->doc[j], r->len[j], vocab, p);
        hy_bench_token_segment(&w->tok[j], &w->seg[j], p, (size_t)r->len[j]);
        w->ps[j] = &w->seg[j];
        p += r->len[j];
    }
    hy_rng q;
    hy_rng_seed(&q, 0x71000000ull + index);
    for (int i = 0; i < r->nq; i++)
        p[i] = HY_RAG_VOCAB_FIRST +
               (uint32_t)(hy_rng_next(&q) % (uint64_t)(vocab - HY_RAG_VOCAB_FIRST));
    hypic__v1__prefill_request__init(&w->rq);
    w->rq.model = (char *)model;
    w->rq.n_segments = (size_t)r->k;
    w->rq.segments = w->ps;
    w->rq.n_query = (size_t)r->nq;
    w->rq.query = p;
    return HY_OK;
}

int hy_rag_docs(const hy_rag_trace *t, hy_rag_doc **out, size_t *n)
{
    size_t nd = 0, cap = 0;
    hy_rag_doc *d = NULL;
    for (size_t i = 0; i < t->n; i++)
        for (int j = 0; j < t->r[i].k; j++) {
            bool seen = false;
            for (size_t a = 0; a < nd && !seen; a++)
                seen = d[a].doc == t->r[i].doc[j] && d[a].len == t->r[i].len[j];
            if (seen) continue;
            if (nd == cap) {
                cap = cap ? 2 * cap : 256;
                hy_rag_doc *nd2 = realloc(d, cap * sizeof *d);
                if (!nd2) {
                    free(d);
                    return HY_ENOMEM;
                }
                d = nd2;
            }
            d[nd++] = (hy_rag_doc){t->r[i].doc[j], t->r[i].len[j]};
        }
    *out = d;
    *n = nd;
    return HY_OK;
}

int hy_rag_batch_make(hy_rag_batch *b, const hy_rag_doc *d, size_t n, int vocab)
{
    b->n = 0;
    for (size_t i = 0; i < n; i++) {
        if (!(b->ids[i] = malloc((size_t)d[i].len * sizeof *b->ids[i]))) {
            hy_rag_batch_free(b);
            return HY_ENOMEM;
        }
        b->n++;
        hy_rag_doc_tokens(d[i].doc, d[i].len, vocab, b->ids[i]);
        hy_bench_token_segment(&b->tok[i], &b->seg[i], b->ids[i], (size_t)d[i].len);
        b->ps[i] = &b->seg[i];
    }
    return HY_OK;
}

void hy_rag_batch_free(hy_rag_batch *b)
{
    for (size_t i = 0; i < b->n; i++) free(b->ids[i]);
    b->n = 0;
}

int hy_rag_warm(const hy_rag_doc *d, size_t nd, int vocab, const char *model, const char *target,
                const char *who)
{
    enum { WARM_BATCH = 16 };
    hyc_options o = {.target = target, .deadline_ms = 3600000};
    hyc *c = NULL;
    hyc_status st;
    int rc = 0;
    if (hyc_open(&o, &c, &st)) {
        fprintf(stderr, "%s: Warm: %s\n", who, st.msg);
        rc = 1;
    }
    hy_rag_batch *b = malloc(sizeof *b);
    if (!b) rc = 1;
    for (size_t a = 0; a < nd && !rc; a += WARM_BATCH) {
        if (hy_rag_batch_make(b, d + a, HY_MIN((size_t)WARM_BATCH, nd - a), vocab)) {
            rc = 1;
            break;
        }
        Hypic__V1__WarmRequest w = HYPIC__V1__WARM_REQUEST__INIT;
        w.model = (char *)model;
        w.n_segments = b->n;
        w.segments = b->ps;
        if (hyc_warm(c, &w, NULL, NULL, &st)) {
            fprintf(stderr, "%s: Warm: %s\n", who, st.msg);
            rc = 1;
        }
        hy_rag_batch_free(b);
    }
    free(b);
    hyc_close(c);
    return rc;
}

void hy_bench_token_segment(Hypic__V1__Tokens *tk, Hypic__V1__Segment *sg, uint32_t *ids, size_t n)
{
    hypic__v1__tokens__init(tk);
    tk->n_ids = n;
    tk->ids = ids;
    hypic__v1__segment__init(sg);
    sg->ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
    sg->tokens = tk;
}

bool hy_bench_member_stats(const char *target, hy_bench_member *out)
{
    hyc_options o = {.target = target, .deadline_ms = 5000};
    hyc *h;
    hyc_status st;
    if (hyc_open(&o, &h, &st)) return false;
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *r = NULL;
    const bool ok = !hyc_stats(h, &q, &r, &st) && r->cluster;
    if (ok)
        *out = (hy_bench_member){.entries = r->entries,
                                 .members = (int)r->cluster->n_members,
                                 .queued = r->cluster->puts_queued,
                                 .handed = r->cluster->handed_over};
    hyc_free(r);
    hyc_close(h);
    return ok;
}
