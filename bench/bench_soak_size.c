/*
 * hypic-bench soak's sizing and prediction (bench_soak.c runs the load):
 * the probe daemon that measures what the store keeps of each distinct
 * segment of the trace, the tiers sized from it, and the policy simulator's
 * hit rates for the requests the run sent, in their order.
 */
#include "bench.h"
#include "bench_soak.h"
#include "hy_common.h"

#include "../tests/cached/daemon_fixture.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* seg_info pointers by key. */
static int key_cmp(const void *a, const void *b)
{
    return memcmp((*(seg_info *const *)a)->key, (*(seg_info *const *)b)->key, 32);
}

/* Lookup of every segment of d[0..nd) in batches: its key, bytes and tokens. */
static int probe_lookup(hyc *c, const char *model, const hy_rag_doc *d, size_t nd, int vocab,
                        seg_info *info)
{
    hy_rag_batch *b = malloc(sizeof *b);
    int rc = b ? 0 : 1;
    for (size_t a = 0; a < nd && !rc; a += HY_RAG_BATCH) {
        const size_t nb = HY_MIN((size_t)HY_RAG_BATCH, nd - a);
        if (hy_rag_batch_make(b, d + a, nb, vocab)) {
            rc = 1;
            break;
        }
        Hypic__V1__LookupRequest q = HYPIC__V1__LOOKUP_REQUEST__INIT;
        q.model = (char *)model;
        q.n_segments = nb;
        q.segments = b->ps;
        Hypic__V1__LookupResponse *r = NULL;
        hyc_status st = {0};
        if (hyc_lookup(c, &q, &r, &st) || r->n_segments != nb) {
            fprintf(stderr, "hypic-bench soak: probe: Lookup: %s\n",
                    st.code ? st.msg : "answered another number of segments");
            rc = 1;
        }
        for (size_t k = 0; k < nb && !rc; k++) {
            const Hypic__V1__SegmentStatus *g = r->segments[k];
            seg_info *x = &info[a + k];
            if (g->key.len == 32) memcpy(x->key, g->key.data, 32);
            x->bytes = g->hit ? g->bytes : 0;
            x->tokens = g->hit ? g->tokens : (uint32_t)d[a + k].len;
        }
        hyc_free(r);
        hy_rag_batch_free(b);
    }
    if (!b) fprintf(stderr, "hypic-bench soak: probe: out of memory\n");
    free(b);
    return rc;
}

/* List of every entry: each stored segment's recompute cost, by key. */
static int probe_flops(hyc *c, seg_info *info, size_t nd)
{
    seg_info **by_key = malloc((nd ? nd : 1) * sizeof *by_key);
    if (!by_key) return 1;
    for (size_t i = 0; i < nd; i++) by_key[i] = &info[i];
    qsort(by_key, nd, sizeof *by_key, key_cmp);
    char token[256] = "";
    int rc = 0;
    do {
        Hypic__V1__ListRequest q = HYPIC__V1__LIST_REQUEST__INIT;
        q.page_size = 1000;
        q.page_token = token;
        Hypic__V1__ListResponse *r = NULL;
        hyc_status st;
        if (hyc_list(c, &q, &r, &st)) {
            fprintf(stderr, "hypic-bench soak: probe: List: %s\n", st.msg);
            rc = 1;
            break;
        }
        for (size_t e = 0; e < r->n_entries; e++) {
            const Hypic__V1__EntryMeta *m = r->entries[e];
            seg_info want, *pw = &want, **hit = NULL;
            if (m->key.len == 32) {
                memcpy(want.key, m->key.data, 32);
                hit = bsearch(&pw, by_key, nd, sizeof *by_key, key_cmp);
            }
            if (hit) (*hit)->flops = m->flops;
        }
        snprintf(token, sizeof token, "%s", r->next_page_token);
        hyc_free(r);
    } while (token[0]);
    free(by_key);
    return rc;
}

int soak_probe(const char *tmp, const char *preset, const char *model_dir, int vocab,
               const hy_rag_doc *d, size_t nd, seg_info *info)
{
    char dir[256], yaml[1024];
    snprintf(dir, sizeof dir, "%s/probe", tmp);
    snprintf(yaml, sizeof yaml,
             "listen: 127.0.0.1:0\nhttp_listen: \"\"\n"
             "models:\n  - {name: %s, path: \"%s\"}\n"
             "tiers:\n  host: {bytes: 64M, evict: lru, admit: always}\n"
             "  nvme: {path: var/nvme, bytes: 64G, extent_bytes: 64M, write_through: true}\n"
             "transport:\n  shm_socket: \"off\"\n"
             "log:\n  requests: false\n",
             preset, model_dir);
    hy_daemon p = {0};
    hyc *c = NULL;
    hyc_options o = {.target = NULL, .deadline_ms = 600000};
    hyc_status st;
    int rc = 1;
    if (mkdir(dir, 0700) != 0 || hy_daemon_start(&p, dir, yaml) != 0) {
        fprintf(stderr, "hypic-bench soak: the probe daemon did not start in %s (%s)\n", dir,
                hy_daemon_bin() ? hy_daemon_bin() : "no binary known: --daemon PATH");
        goto out;
    }
    const double t0 = hy_now_s();
    if (hy_rag_warm(d, nd, vocab, preset, p.grpc, "hypic-bench soak: probe")) goto out;
    o.target = p.grpc;
    if (hyc_open(&o, &c, &st)) {
        fprintf(stderr, "hypic-bench soak: probe: connecting: %s\n", st.msg);
        goto out;
    }
    if (probe_lookup(c, preset, d, nd, vocab, info) || probe_flops(c, info, nd)) goto out;
    printf("probe: %zu segments built with Warm and read back in %.1f s\n", nd, hy_now_s() - t0);
    rc = 0;
out:
    hyc_close(c);
    if (p.pid > 0 && !hy_daemon_stop(&p)) rc = 1;
    hy_bench_rmtree(dir);
    return rc;
}

/* --- the tiers' sizes ------------------------------------------------------------------ */

int soak_size(const seg_info *info, size_t nd, double host_frac, const char *evict,
              const char *admit, soak_setup *u)
{
    hy_err e = {0};
    memset(u, 0, sizeof *u);
    for (size_t i = 0; i < nd; i++) {
        if (!info[i].bytes) {
            u->uncacheable++;
            continue;
        }
        u->stored++;
        u->working_set += (info[i].bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
    }
    if (!u->stored) {
        fprintf(stderr, "hypic-bench soak: the store kept none of the trace's %zu segments\n", nd);
        return 1;
    }
    const uint64_t mib = 1u << 20, ext = 16 * mib;
    u->host_bytes = HY_MAX(1, (uint64_t)ceil(host_frac * (double)u->working_set / mib)) * mib;
    u->nvme_bytes = (2 * u->working_set + 64 * mib + ext - 1) / ext * ext;
    if (hy_policy_parse(evict, admit, &u->host, &e) ||
        hy_policy_parse("gdsf", "always", &u->nvme, &e)) {
        fprintf(stderr, "hypic-bench soak: --evict/--admit: %s\n", e.msg);
        return 1;
    }
    u->host.capacity = u->host_bytes;
    u->nvme.capacity = u->nvme_bytes;
    return 0;
}

/* --- the prediction -------------------------------------------------------------------- */

/* The (doc, len) pairs by value, to find a segment's index among the distinct ones. */
typedef struct doc_ix {
    hy_rag_doc d;
    uint32_t ix;
} doc_ix;

static int doc_ix_cmp(const void *a, const void *b)
{
    const hy_rag_doc *x = &((const doc_ix *)a)->d, *y = &((const doc_ix *)b)->d;
    if (x->doc != y->doc) return x->doc < y->doc ? -1 : 1;
    return (x->len > y->len) - (x->len < y->len);
}

/* A lookup's bytes are the entry's in host pages, what it takes of the host
 * tier's arena; its object the segment's index among the distinct ones. */
int soak_lookups(const hy_rag_trace *t, const hy_rag_doc *d, size_t nd, const seg_info *info,
                 size_t n, size_t split, hy_bench_lookup **out, size_t *nl, size_t *n_pre)
{
    doc_ix *sorted = malloc((nd ? nd : 1) * sizeof *sorted);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)t->r[i % t->n].k;
    hy_bench_lookup *l = malloc((k ? k : 1) * sizeof *l);
    if (!sorted || !l) {
        free(sorted), free(l);
        return HY_ENOMEM;
    }
    for (size_t i = 0; i < nd; i++) sorted[i] = (doc_ix){d[i], (uint32_t)i};
    qsort(sorted, nd, sizeof *sorted, doc_ix_cmp);
    k = 0;
    *n_pre = 0;
    for (size_t i = 0; i < n; i++) {
        const hy_rag_request *r = &t->r[i % t->n];
        bool first = true;
        if (i == split) *n_pre = k;
        for (int j = 0; j < r->k; j++) {
            const doc_ix want = {{r->doc[j], r->len[j]}, 0};
            const doc_ix *x = bsearch(&want, sorted, nd, sizeof *sorted, doc_ix_cmp);
            assert(x); /* every segment of the trace is among its distinct ones */
            const seg_info *s = &info[x->ix];
            if (!s->bytes) continue;
            l[k++] = (hy_bench_lookup){.obj = x->ix,
                                       .tokens = s->tokens,
                                       .bytes = (s->bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE,
                                       .cost = s->flops,
                                       .starts_request = first};
            first = false;
        }
    }
    if (split >= n) *n_pre = k;
    free(sorted);
    *out = l;
    *nl = k;
    return HY_OK;
}

/* From one replay of all and one of the first n_pre: the replay is
 * deterministic, so the second is the first's prefix. */
double soak_predict(const hy_bench_lookup *l, size_t n, size_t n_pre, uint32_t nobj,
                    const hy_policy_config *cfg, uint32_t in_flight)
{
    hy_bench_sim all, pre = {0};
    if (n <= n_pre || hy_bench_policy_replay(l, n, nobj, cfg, in_flight, &all) ||
        (n_pre && hy_bench_policy_replay(l, n_pre, nobj, cfg, in_flight, &pre)))
        return NAN;
    return (all.hit_rate * (double)n - pre.hit_rate * (double)n_pre) / (double)(n - n_pre);
}
