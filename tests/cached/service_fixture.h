/*
 * What the service's tests share beyond the daemon fixture: documents as
 * token lists, request builders over protoc-c's messages, and calls through
 * libhypic-client that return the status code.
 */
#ifndef HY_TEST_SERVICE_FIXTURE_H
#define HY_TEST_SERVICE_FIXTURE_H

#include "daemon_fixture.h"
#include "hypic_client.h"

#include <stdint.h>

/* How the daemon stores entries by default (pic.tolerance, pic.dtype,
 * pic.t_dtype, pic.kv_dtype; test_cached_config checks the defaults): what a
 * test building entries in-process to compare with the daemon's builds. */
#define HY_TEST_DEFAULT_REPR ((hy_entry_repr){HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.03f})

/* The model the request builders below name; a test serving several sets it
 * before each call. */
static const char *g_svc_model = "tiny";

/* Document d: n token ids in 3..258 (the tiny model's byte vocabulary). */
static inline void doc_tokens(int d, size_t n, uint32_t *out)
{
    uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(d + 1);
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[i] = 3 + (uint32_t)(x % 256);
    }
}

/* A request's segments: storage for up to 32, each tokens or a key. */
typedef struct segs {
    uint32_t ids[32][600];
    Hypic__V1__Tokens tk[32];
    Hypic__V1__Segment sg[32];
    Hypic__V1__Segment *sp[32];
    char *tags[32][1];
    char tagbuf[32][32];
    size_t n;
} segs;

/* Appends document d of n tokens, tagged "doc-<d>". */
static inline void segs_doc(segs *s, int d, size_t n)
{
    const size_t i = s->n++;
    doc_tokens(d, n, s->ids[i]);
    Hypic__V1__Tokens tinit = HYPIC__V1__TOKENS__INIT;
    s->tk[i] = tinit;
    s->tk[i].n_ids = n;
    s->tk[i].ids = s->ids[i];
    Hypic__V1__Segment ginit = HYPIC__V1__SEGMENT__INIT;
    s->sg[i] = ginit;
    s->sg[i].ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
    s->sg[i].tokens = &s->tk[i];
    snprintf(s->tagbuf[i], sizeof s->tagbuf[i], "doc-%d", d);
    s->tags[i][0] = s->tagbuf[i];
    s->sg[i].n_tags = 1;
    s->sg[i].tags = s->tags[i];
    s->sp[i] = &s->sg[i];
}

/* Appends a segment given by its 32-byte key (kept by the caller). */
static inline void segs_key(segs *s, const uint8_t *key)
{
    const size_t i = s->n++;
    Hypic__V1__Segment ginit = HYPIC__V1__SEGMENT__INIT;
    s->sg[i] = ginit;
    s->sg[i].ref_case = HYPIC__V1__SEGMENT__REF_KEY;
    s->sg[i].key = (ProtobufCBinaryData){32, (uint8_t *)key};
    s->sp[i] = &s->sg[i];
}

static inline hyc *connect_as(const hy_daemon *d, const char *token)
{
    hyc_options o = {.target = d->grpc, .token = token, .deadline_ms = 60000};
    hyc *c = NULL;
    hyc_status st;
    if (hyc_open(&o, &c, &st)) fprintf(stderr, "hyc_open: %s\n", st.msg);
    return c;
}

/* Warm; returns the status code and fills states[i] (WarmProgress.State)
 * and keys (32 bytes each) when not NULL. */
typedef struct warm_out {
    int states[32];
    uint8_t keys[32][32];
    int n;
} warm_out;

static inline int on_warm_(void *ctx, const Hypic__V1__WarmProgress *p)
{
    warm_out *w = ctx;
    if (p->index < 32) {
        w->states[p->index] = p->state;
        if (p->key.len == 32) memcpy(w->keys[p->index], p->key.data, 32);
    }
    w->n++;
    return 0;
}

static inline int warm(hyc *c, segs *s, warm_out *w, hyc_status *st)
{
    Hypic__V1__WarmRequest rq = HYPIC__V1__WARM_REQUEST__INIT;
    rq.model = (char *)g_svc_model;
    rq.n_segments = s->n;
    rq.segments = s->sp;
    memset(w, 0, sizeof *w);
    return hyc_warm(c, &rq, on_warm_, w, st);
}

/* A Prefill of s and an 8-token query in mode, hits used by `reuse`
 * (PrefillRequest.Reuse; 0: the daemon's pic.reuse). */
static inline int prefill_reuse(hyc *c, segs *s, int mode, int reuse,
                                Hypic__V1__PrefillResponse **out, hyc_status *st)
{
    static uint32_t query[8] = {10, 20, 30, 40, 50, 60, 70, 80};
    Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
    rq.model = (char *)g_svc_model;
    rq.n_segments = s->n;
    rq.segments = s->sp;
    rq.n_query = 8;
    rq.query = query;
    rq.mode = (Hypic__V1__Mode)mode;
    rq.top_k = 5;
    rq.max_new_tokens = 4;
    rq.reuse = (Hypic__V1__PrefillRequest__Reuse)reuse;
    return hyc_prefill(c, &rq, out, st);
}

/* The same with every hit fetched: what a test that counts hits expects. The
 * daemon's default (pic.reuse auto) may recompute a stored segment inline
 * once it has measured that computing this tiny model's tokens costs less
 * than fetching — a miss where the test wants a hit, depending on the
 * machine's load (tests that mean auto ask for it with prefill_reuse). */
static inline int prefill(hyc *c, segs *s, int mode, Hypic__V1__PrefillResponse **out,
                          hyc_status *st)
{
    return prefill_reuse(c, s, mode, HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, out, st);
}

static inline int lookup(hyc *c, segs *s, uint32_t lease_ms, Hypic__V1__LookupResponse **out,
                         hyc_status *st)
{
    Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    rq.model = (char *)g_svc_model;
    rq.n_segments = s->n;
    rq.segments = s->sp;
    rq.lease_ms = lease_ms;
    return hyc_lookup(c, &rq, out, st);
}

static inline int get_entry(hyc *c, const uint8_t *key, void **bytes, size_t *n, hyc_status *st)
{
    Hypic__V1__GetEntryRequest rq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    rq.model = (char *)g_svc_model;
    rq.key = (ProtobufCBinaryData){32, (uint8_t *)key};
    Hypic__V1__EntryMeta *m = NULL;
    int rc = hyc_get_entry(c, &rq, &m, bytes, n, st);
    hyc_free(m);
    return rc;
}

static inline int put_entry(hyc *c, const void *bytes, size_t n, Hypic__V1__PutEntryResponse **out,
                            hyc_status *st)
{
    Hypic__V1__EntryMeta m = HYPIC__V1__ENTRY_META__INIT;
    m.model = (char *)g_svc_model;
    m.bytes = n;
    return hyc_put_entry(c, &m, bytes, n, 4096, out, st);
}

static inline int list_total(hyc *c, uint64_t *total, hyc_status *st)
{
    Hypic__V1__ListRequest rq = HYPIC__V1__LIST_REQUEST__INIT;
    Hypic__V1__ListResponse *r = NULL;
    int rc = hyc_list(c, &rq, &r, st);
    *total = r ? r->total : 0;
    hyc_free(r);
    return rc;
}

static inline int invalidate_key(hyc *c, const uint8_t *key, uint64_t *removed, hyc_status *st)
{
    Hypic__V1__InvalidateRequest rq = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    rq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_KEY;
    rq.key = (ProtobufCBinaryData){32, (uint8_t *)key};
    Hypic__V1__InvalidateResponse *r = NULL;
    int rc = hyc_invalidate(c, &rq, &r, st);
    *removed = r ? r->removed : 0;
    hyc_free(r);
    return rc;
}

static inline int inspect(hyc *c, const uint8_t *key, bool verify, Hypic__V1__InspectResponse **out,
                          hyc_status *st)
{
    Hypic__V1__InspectRequest rq = HYPIC__V1__INSPECT_REQUEST__INIT;
    rq.key = (ProtobufCBinaryData){32, (uint8_t *)key};
    rq.verify = verify;
    return hyc_inspect(c, &rq, out, st);
}

static inline int health(hyc *c, hyc_status *st)
{
    Hypic__V1__HealthRequest rq = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *r = NULL;
    int rc = hyc_health(c, &rq, &r, st);
    if (!rc && r->status != HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING) rc = -1;
    hyc_free(r);
    return rc;
}

/* Flips one byte of a section of entry bytes[0..n) (as GetEntry returned
 * it) lying past its first `past` bytes, in the NVMe extent file of a
 * stopped daemon whose tier is <dir>/var/nvme: the stored copy then fails
 * its checksums only after its first chunks have passed. 0, or -1 (no such
 * section, no such file, the entry not found in it). */
static inline int nvme_flip_past(const char *dir, const void *bytes, size_t n, uint64_t past)
{
    const unsigned char *h = bytes;
    const uint32_t nsec = (uint32_t)h[16] | (uint32_t)h[17] << 8;
    uint64_t pos = 0;
    for (uint32_t i = 0; i < nsec && !pos; i++) {
        const unsigned char *t = h + 104 + 32 * i;
        uint64_t off = 0, len = 0;
        for (int b = 7; b >= 0; b--) off = off << 8 | t[8 + b], len = len << 8 | t[16 + b];
        if (off + len > past) pos = off > past ? off + len / 2 : past;
    }
    if (pos == 0 || pos >= n) return -1;
    char ext[512];
    snprintf(ext, sizeof ext, "%s/var/nvme/extents/extent-000000.dat", dir);
    FILE *f = fopen(ext, "r+b");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    const long fsz = ftell(f);
    unsigned char *all = fsz > 0 ? malloc((size_t)fsz) : NULL;
    long at = -1;
    fseek(f, 0, SEEK_SET);
    if (all && fread(all, 1, (size_t)fsz, f) == (size_t)fsz)
        for (long i = 0; i + 4096 <= fsz && at < 0; i += 4096)
            if (memcmp(all + i, bytes, 4096) == 0) at = i;
    if (at >= 0) {
        fseek(f, at + (long)pos, SEEK_SET);
        fputc(all[at + (long)pos] ^ 0x5a, f);
    }
    fclose(f);
    free(all);
    return at >= 0 ? 0 : -1;
}

#endif
