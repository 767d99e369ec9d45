/*
 * hypicctl's commands about what is computed: lookup (which segments are
 * cached), warm (build and store segments, with progress) and prefill (a
 * request through the combiner: top tokens, outcome per segment, time per
 * phase).
 *
 * Segments come from files: text, tokenised as the embedded models do
 * (bytes + 3, hy_tokenize_bytes), or with --ids whitespace-separated token
 * ids. "--segment A B C" and "--segment A --segment B" both name several.
 */
#include "ctl_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- lookup ---- */

typedef struct lookup_args {
    ctl_list files, keys;
    ctl_seam seam;
    uint64_t lease_ms;
    bool ids;
} lookup_args;

int ctl_lookup(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_GATHER("--segment", lookup_args, files),
        CTL_GATHER("--key", lookup_args, keys),
        CTL_CALL("--seam", lookup_args, seam, ctl_opt_seam),
        CTL_U64("--lease-ms", lookup_args, lease_ms, 0, UINT32_MAX),
        CTL_FLAG("--ids", lookup_args, ids),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts), .hint = "(--segment FILE or --key KEY?)"};
    lookup_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    if (a.seam.set) {
        rq.seam_opt_case = HYPIC__V1__LOOKUP_REQUEST__SEAM_OPT_SEAM;
        rq.seam = a.seam.w;
    }
    const bool ids = a.ids;
    const uint64_t lease = a.lease_ms;
    if (a.files.n && a.keys.n) return ctl_usage(x, "--segment or --key, not both");
    if (!a.files.n && !a.keys.n)
        return ctl_usage(x, "no segments (--segment FILE... or --key KEY...)");
    ctl_segments segs = {0};
    uint8_t(*kb)[32] = NULL;
    hy_err e = {0};
    if (a.files.n) {
        if (ctl_segments_from_files(&segs, a.files.v, a.files.n, ids, &e))
            return ctl_error("%s", e.msg);
    } else {
        kb = calloc(a.keys.n, sizeof *kb);
        if (!kb || ctl_segments_new(&segs, a.keys.n, &e)) {
            free(kb);
            return ctl_error("out of memory");
        }
        for (size_t i = 0; i < a.keys.n; i++) {
            if (ctl_key(x, a.keys.v[i], kb[i])) {
                free(kb);
                ctl_segments_free(&segs);
                return CTL_USAGE;
            }
            segs.seg[i].ref_case = HYPIC__V1__SEGMENT__REF_KEY;
            segs.seg[i].key.data = kb[i];
            segs.seg[i].key.len = 32;
        }
    }
    rq.model = (char *)x->model;
    rq.segments = segs.segs;
    rq.n_segments = segs.n;
    rq.lease_ms = (uint32_t)lease;
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    Hypic__V1__LookupResponse *r = NULL;
    hyc_status st;
    if (rc) {
        /* (the status is printed) */
    } else if (hyc_lookup(c, &rq, &r, &st)) {
        rc = ctl_fail(&st);
    } else if (x->json) {
        ctl_json_print(ctl_json_msg(&r->base));
    } else {
        static const char *const hdr[] = {"#",     "HIT", "TIER",    "TOKENS",
                                          "BYTES", "KEY", "SEGMENT", "MEMBER"};
        bool cluster = false; /* MEMBER: who answered, in cluster mode */
        for (size_t i = 0; i < r->n_segments; i++) cluster |= r->segments[i]->member[0] != '\0';
        ctl_table *t = ctl_table_new(cluster ? 8 : 7, hdr);
        for (size_t i = 0; i < r->n_segments; i++) {
            const Hypic__V1__SegmentStatus *s = r->segments[i];
            char idx[24], tok[16], bytes[32], key[65];
            snprintf(idx, sizeof idx, "%zu", i);
            snprintf(tok, sizeof tok, "%u", s->tokens);
            ctl_bytes(s->bytes, bytes, sizeof bytes);
            ctl_hex(&s->key, key, sizeof key);
            const char *row[] = {idx,
                                 s->hit ? "hit" : "miss",
                                 ctl_tier_name(s->tier),
                                 tok,
                                 bytes,
                                 key,
                                 i < a.files.n ? a.files.v[i] : "-",
                                 s->member[0] ? s->member : "-"};
            ctl_table_row(t, row);
        }
        ctl_table_print(t);
        printf("leading hits: %u segments, %llu tokens", r->leading_hits,
               (unsigned long long)r->leading_tokens);
        if (r->lease_id) printf("   lease %llu", (unsigned long long)r->lease_id);
        printf("\n");
    }
    hyc_free(r);
    hyc_close(c);
    free(kb);
    ctl_segments_free(&segs);
    return rc;
}

/* ---- warm ---- */

typedef struct warm_ctx {
    const ctl *x;
    char *const *files;
    size_t n;
    bool bar; /* a progress bar on stderr (a terminal) instead of lines */
    size_t done, by_state[6];
    uint64_t bytes;
    double ms;
    cJSON *items; /* --json */
    ctl_table *table;
} warm_ctx;

static void warm_bar(const warm_ctx *w)
{
    const int width = 30;
    int fill = w->n ? (int)(width * w->done / w->n) : width;
    char b[32];
    ctl_bytes(w->bytes, b, sizeof b);
    fprintf(stderr, "\r[%.*s%*s] %zu/%zu segments  %s  built %zu  cached %zu  failed %zu ", fill,
            "##############################", width - fill, "", w->done, w->n, b,
            w->by_state[HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT],
            w->by_state[HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED],
            w->by_state[HYPIC__V1__WARM_PROGRESS__STATE__STATE_FAILED]);
    fflush(stderr);
}

static int on_progress(void *arg, const Hypic__V1__WarmProgress *p)
{
    warm_ctx *w = arg;
    const char *file = p->index < w->n ? w->files[p->index] : "?";
    w->done++;
    if ((unsigned)p->state < 6) w->by_state[p->state]++;
    w->bytes += p->bytes;
    w->ms += p->ms;
    if (w->items) {
        cJSON *o = ctl_json_msg(&p->base);
        cJSON_AddStringToObject(o, "file", file);
        cJSON_AddItemToArray(w->items, o);
        return 0;
    }
    char idx[24], state[24], bytes[32], ms[24], key[65];
    snprintf(idx, sizeof idx, "%u", p->index);
    ctl_enum(&hypic__v1__warm_progress__state__descriptor, p->state, "STATE_", state, sizeof state);
    ctl_bytes(p->bytes, bytes, sizeof bytes);
    snprintf(ms, sizeof ms, "%.1f", p->ms);
    ctl_hex(&p->key, key, sizeof key);
    if (w->bar) {
        const char *row[] = {idx, state, ctl_tier_name(p->tier), bytes, ms, key, file, p->error};
        ctl_table_row(w->table, row);
        warm_bar(w);
    } else { /* one line per segment as it is done */
        printf("%-5s %-12s %-5s %-10s %8s ms  %s  %s%s%s\n", idx, state, ctl_tier_name(p->tier),
               bytes, ms, key, file, p->error[0] ? "  " : "", p->error);
        fflush(stdout);
    }
    return 0;
}

typedef struct warm_args {
    ctl_list files, tags;
    ctl_seam seam;
    Hypic__V1__StateDtype dtype;
    bool ids, by_file;
} warm_args;

int ctl_warm(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_LIST("--tag", warm_args, tags, CTL_TAGS_MAX),
        CTL_CALL("--seam", warm_args, seam, ctl_opt_seam),
        CTL_CALL("--dtype", warm_args, dtype, ctl_opt_dtype),
        CTL_FLAG("--ids", warm_args, ids),
        CTL_FLAG("--tag-by-file", warm_args, by_file),
    };
    static const ctl_opt files = CTL_LIST("FILES", warm_args, files, 0);
    static const ctl_cmdline cl = {CTL_OPTS(opts), .rest = &files};
    warm_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    Hypic__V1__WarmRequest rq = HYPIC__V1__WARM_REQUEST__INIT;
    if (a.seam.set) {
        rq.seam_opt_case = HYPIC__V1__WARM_REQUEST__SEAM_OPT_SEAM;
        rq.seam = a.seam.w;
    }
    rq.dtype = a.dtype;
    char **tags = a.tags.v;
    const size_t ntags = a.tags.n;
    const bool ids = a.ids, by_file = a.by_file;
    if (!a.files.n) return ctl_usage(x, "no FILES to warm");
    ctl_segments segs;
    hy_err e = {0};
    if (ctl_segments_from_files(&segs, a.files.v, a.files.n, ids, &e))
        return ctl_error("%s", e.msg);
    /* tags: the common ones, then (--tag-by-file) the file's name */
    char **seg_tags = calloc(a.files.n * (ntags + 1), sizeof *seg_tags);
    if (!seg_tags) {
        ctl_segments_free(&segs);
        return ctl_error("out of memory");
    }
    for (size_t i = 0; i < a.files.n; i++) {
        char **t = seg_tags + i * (ntags + 1);
        memcpy(t, tags, ntags * sizeof *t);
        if (by_file) {
            const char *slash = strrchr(a.files.v[i], '/');
            t[ntags] = slash ? (char *)slash + 1 : a.files.v[i];
        }
        segs.seg[i].tags = t;
        segs.seg[i].n_tags = ntags + by_file;
    }
    rq.model = (char *)x->model;
    rq.segments = segs.segs;
    rq.n_segments = segs.n;
    warm_ctx w = {.x = x, .files = a.files.v, .n = a.files.n, .bar = !x->json && isatty(2)};
    if (x->json) w.items = cJSON_CreateArray();
    if (w.bar) {
        static const char *const hdr[] = {"#",  "STATE", "TIER", "BYTES",
                                          "MS", "KEY",   "FILE", "ERROR"};
        w.table = ctl_table_new(8, hdr);
        warm_bar(&w);
    }
    hyc *c;
    int rc = ctl_connect(x, 0, &c);
    hyc_status st;
    if (!rc && hyc_warm(c, &rq, on_progress, &w, &st)) rc = ctl_fail(&st);
    if (w.bar) fputc('\n', stderr);
    size_t failed = w.by_state[HYPIC__V1__WARM_PROGRESS__STATE__STATE_FAILED];
    if (!rc && x->json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "segments", w.items);
        w.items = NULL;
        cJSON_AddNumberToObject(o, "built", (double)w.by_state[1]);
        cJSON_AddNumberToObject(o, "cached", (double)w.by_state[2]);
        cJSON_AddNumberToObject(o, "uncacheable", (double)w.by_state[3]);
        cJSON_AddNumberToObject(o, "not_admitted", (double)w.by_state[4]);
        cJSON_AddNumberToObject(o, "failed", (double)failed);
        cJSON_AddNumberToObject(o, "bytes", (double)w.bytes);
        cJSON_AddNumberToObject(o, "ms", w.ms);
        ctl_json_print(o);
    } else if (!rc) {
        if (w.table) ctl_table_print(w.table);
        w.table = NULL;
        char b[32];
        ctl_bytes(w.bytes, b, sizeof b);
        printf("%zu segments: %zu built, %zu cached, %zu uncacheable, %zu not admitted, %zu "
               "failed; %s, %.1f ms\n",
               w.done, w.by_state[1], w.by_state[2], w.by_state[3], w.by_state[4], failed, b, w.ms);
    }
    if (!rc && w.done != a.files.n)
        rc = ctl_error("warm: %zu of %zu segments reported", w.done, a.files.n);
    if (!rc && failed) rc = ctl_error("warm: %zu segments failed", failed);
    ctl_table_free(w.table);
    cJSON_Delete(w.items);
    hyc_close(c);
    free(seg_tags);
    ctl_segments_free(&segs);
    return rc;
}

/* ---- prefill ---- */

static void print_prefill(const Hypic__V1__PrefillResponse *r, char *const *files, size_t nfiles)
{
    static const char *const thdr[] = {"RANK", "TOKEN", "TEXT", "LOGIT", "PROB"};
    ctl_table *t = ctl_table_new(5, thdr);
    for (size_t i = 0; i < r->n_top; i++) {
        char rank[24], tok[16], text[16], logit[24], prob[24];
        snprintf(rank, sizeof rank, "%zu", i + 1);
        snprintf(tok, sizeof tok, "%u", r->top[i]->token);
        ctl_token_text(r->top[i]->token, text, sizeof text);
        snprintf(logit, sizeof logit, "%.4f", r->top[i]->logit);
        snprintf(prob, sizeof prob, "%.4f", r->top[i]->prob);
        const char *row[] = {rank, tok, text, logit, prob};
        ctl_table_row(t, row);
    }
    ctl_table_print(t);
    if (r->n_generated) {
        printf("\ngenerated (%zu):", r->n_generated);
        for (size_t i = 0; i < r->n_generated; i++) printf(" %u", r->generated[i]);
        printf("\n  \"");
        for (size_t i = 0; i < r->n_generated; i++) {
            char text[16];
            ctl_token_text(r->generated[i], text, sizeof text);
            fputs(text, stdout);
        }
        printf("\"\n");
    }
    printf("\n");
    bool scattered = false, cluster = false;
    for (size_t i = 0; i < r->n_segments; i++) {
        scattered |= r->segments[i]->built_by[0] != '\0';
        cluster |= r->segments[i]->member[0] != '\0';
    }
    /* BUILT BY: scatter workers; MEMBER: the owner it came from or went to */
    static const char *const shdr[] = {"#",   "OUTCOME", "TIER",     "STORED",
                                       "KEY", "SEGMENT", "BUILT BY", "MEMBER"};
    const char *cols[8];
    size_t nc = 0;
    for (size_t k = 0; k < 8; k++)
        if ((k != 6 || scattered) && (k != 7 || cluster)) cols[nc++] = shdr[k];
    ctl_table *s = ctl_table_new((int)nc, cols);
    for (size_t i = 0; i < r->n_segments; i++) {
        const Hypic__V1__SegmentOutcome *o = r->segments[i];
        char idx[24], kind[24], key[65];
        snprintf(idx, sizeof idx, "%zu", i);
        ctl_enum(&hypic__v1__segment_outcome__kind__descriptor, o->kind, "KIND_", kind,
                 sizeof kind);
        ctl_hex(&o->key, key, sizeof key);
        const char *row[] = {idx,
                             kind,
                             ctl_tier_name(o->tier),
                             o->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS
                                 ? (o->stored ? "yes" : "no")
                                 : "-",
                             key,
                             i < nfiles ? files[i] : "?",
                             o->built_by[0]                                           ? o->built_by
                             : o->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS ? "inline"
                                                                                      : "-",
                             o->member[0] ? o->member : "-"};
        const char *cells[8];
        size_t nk = 0;
        for (size_t k = 0; k < 8; k++)
            if ((k != 6 || scattered) && (k != 7 || cluster)) cells[nk++] = row[k];
        ctl_table_row(s, cells);
    }
    ctl_table_print(s);
    for (size_t i = 0; i < r->n_segments; i++) /* found here: fetched or recomputed, and why */
        if (r->segments[i]->why[0]) printf("  #%zu %s\n", i, r->segments[i]->why);
    printf("\ntokens computed: %llu\n\n", (unsigned long long)r->tokens_computed);
    if (!r->timings) return;
    const Hypic__V1__Timings *tm = r->timings;
    const struct {
        const char *name;
        double ms;
    } phases[] = {{"lookup", tm->lookup_ms},
                  {"fetch hbm", tm->fetch_hbm_ms},
                  {"fetch host", tm->fetch_host_ms},
                  {"fetch nvme", tm->fetch_nvme_ms},
                  {"fetch remote", tm->fetch_remote_ms},
                  {"prefix restore", tm->prefix_restore_ms},
                  {"forward pass", tm->forward_ms},
                  {"  of it composing", tm->compose_ms},
                  {"  of it waiting for nvme layers", tm->landing_wait_ms},
                  {"ttft", tm->ttft_ms},
                  {"decode", tm->decode_ms},
                  {"store", tm->store_ms},
                  {"total", tm->total_ms},
                  {"server (total + front door)", tm->server_ms}};
    static const char *const phdr[] = {"PHASE", "MS"};
    ctl_table *p = ctl_table_new(2, phdr);
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        char ms[32];
        snprintf(ms, sizeof ms, "%.3f", phases[i].ms);
        const char *row[] = {phases[i].name, ms};
        ctl_table_row(p, row);
    }
    ctl_table_print(p);
    if (tm->scattered)
        printf("\nscatter: %u segment(s) built on %u worker(s), %u retried; the combiner waited "
               "%.3f ms for entries in order\n",
               tm->scattered, tm->scatter_workers, tm->scatter_retries, tm->scatter_wait_ms);
}

/* --return-state: where the state went, per kind of tensor. */
static void print_state(const Hypic__V1__Delivery *d, const hyc_session *ss, const char *out)
{
    static const char *const kinds[] = {"?", "conv", "S", "K", "V"};
    uint64_t bytes[5] = {0}, count[5] = {0};
    for (size_t i = 0; i < d->n_tensors; i++) {
        unsigned k = (unsigned)d->tensors[i]->kind < 5 ? (unsigned)d->tensors[i]->kind : 0;
        bytes[k] += d->tensors[i]->bytes;
        count[k]++;
    }
    char b[32];
    ctl_bytes(d->bytes, b, sizeof b);
    printf("\nstate: %s after %llu tokens, %zu tensors, delivered over %s (session %llu, "
           "transfer %llu) in %.3f ms%s%s\n",
           b, (unsigned long long)d->position, d->n_tensors, hyc_session_kind(ss),
           (unsigned long long)d->session, (unsigned long long)d->transfer, d->transfer_ms,
           out ? "; written to " : "", out ? out : "");
    if (hyc_session_passed_over(ss)[0]) printf("  passed over: %s\n", hyc_session_passed_over(ss));
    for (int k = 1; k < 5; k++) {
        if (!count[k]) continue;
        ctl_bytes(bytes[k], b, sizeof b);
        printf("  %-4s %3llu tensors  %s\n", kinds[k], (unsigned long long)count[k], b);
    }
}

/* --state-out: the delivered bytes as they lie in the buffer (the layout is
 * the reply's; --json prints it). */
static int write_state(const char *path, const hyc_session *ss, const Hypic__V1__Delivery *d)
{
    /* a state in GPU memory (cuda_ipc) is read back first */
    uint8_t *host = NULL;
    const uint8_t *src = hyc_session_buffer(ss) + d->offset;
    if (hyc_session_on_device(ss)) {
        hyc_status st;
        if (!(host = malloc(d->bytes ? d->bytes : 1)))
            return ctl_error("--state-out %s: out of memory", path);
        if (hyc_session_read(ss, d->offset, host, d->bytes, &st)) {
            free(host);
            return ctl_fail(&st);
        }
        src = host;
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(host);
        return ctl_error("--state-out %s: %s", path, strerror(errno));
    }
    size_t n = fwrite(src, 1, d->bytes, f);
    free(host);
    if (fclose(f) != 0 || n != d->bytes) return ctl_error("--state-out %s: short write", path);
    return CTL_OK;
}

typedef struct prefill_args {
    ctl_list files;
    const char *query, *text, *transport, *state_out;
    Hypic__V1__Mode mode;
    ctl_seam seam;
    Hypic__V1__PrefillRequest__Reuse reuse;
    uint64_t top_k, max_new, state_buf;
    Hypic__V1__StateDtype dtype;
    bool ids, return_state;
} prefill_args;

static int opt_reuse(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    Hypic__V1__PrefillRequest__Reuse *r = &((prefill_args *)args)->reuse;
    if (!strcmp(v, "auto"))
        *r = HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_AUTO;
    else if (!strcmp(v, "fetch"))
        *r = HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH;
    else if (!strcmp(v, "recompute"))
        *r = HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_RECOMPUTE;
    else
        return ctl_usage(x, "%s: '%s' is not auto, fetch or recompute", o->name, v);
    return CTL_OK;
}

int ctl_prefill(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_GATHER("--segment", prefill_args, files),
        CTL_STR_ENDS("--query", prefill_args, query),
        CTL_STR_ENDS("--text", prefill_args, text),
        CTL_CALL("--mode", prefill_args, mode, ctl_opt_mode),
        CTL_CALL("--seam", prefill_args, seam, ctl_opt_seam),
        CTL_CALL("--reuse", prefill_args, reuse, opt_reuse),
        CTL_U64("--top-k", prefill_args, top_k, 0, UINT32_MAX),
        CTL_U64("--max-new", prefill_args, max_new, 0, UINT32_MAX),
        CTL_CALL("--dtype", prefill_args, dtype, ctl_opt_dtype),
        CTL_FLAG("--ids", prefill_args, ids),
        /* each of these asks for the state too */
        CTL_FLAG("--return-state", prefill_args, return_state),
        CTL_STR("--transport", prefill_args, transport),
        CTL_STR("--state-out", prefill_args, state_out),
        CTL_U64("--state-buffer", prefill_args, state_buf, 4096, 1ull << 40),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts)};
    prefill_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    const char *query_file = a.query, *text = a.text;
    const char *transport = a.transport, *state_out = a.state_out;
    const bool ids = a.ids;
    const bool want_state = a.return_state || transport || state_out || a.state_buf;
    const uint64_t top_k = a.top_k, max_new = a.max_new;
    const uint64_t state_buf = a.state_buf ? a.state_buf : 64u << 20;
    Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
    rq.mode = a.mode;
    if (a.seam.set) {
        rq.seam_opt_case = HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM;
        rq.seam = a.seam.w;
    }
    rq.reuse = a.reuse;
    rq.dtype = a.dtype;
    if (!query_file == !text) return ctl_usage(x, "one of --query FILE or --text STR is needed");
    ctl_segments segs = {0};
    ctl_ids q = {0};
    hy_err e = {0};
    if (ctl_segments_from_files(&segs, a.files.v, a.files.n, ids, &e) ||
        (query_file ? ctl_ids_from_file(query_file, ids, &q, &e)
                    : ctl_ids_from_text(text, &q, &e))) {
        ctl_segments_free(&segs);
        return ctl_error("%s", e.msg);
    }
    if (!q.n) {
        ctl_segments_free(&segs);
        return ctl_usage(x, "the query has no tokens");
    }
    rq.model = (char *)x->model;
    rq.segments = segs.segs;
    rq.n_segments = segs.n;
    rq.query = q.ids;
    rq.n_query = q.n;
    rq.top_k = (uint32_t)top_k;
    rq.max_new_tokens = (uint32_t)max_new;
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_session *ss = NULL;
    hyc_status st;
    if (rc) {
        /* (printed) */
    } else if (want_state &&
               (transport && strstr(transport, "cuda_ipc")
                    ? hyc_session_open_cuda(c, transport, -1, NULL, state_buf, &ss, &st)
                    : hyc_session_open(c, transport, state_buf, &ss, &st))) {
        rc = ctl_fail(&st);
    } else if (want_state ? hyc_prefill_state(c, ss, 0, &rq, &r, &st)
                          : hyc_prefill(c, &rq, &r, &st)) {
        rc = ctl_fail(&st);
    } else {
        if (state_out && (rc = write_state(state_out, ss, r->state))) {
            /* (printed) */
        } else if (x->json) {
            ctl_json_print(ctl_json_msg(&r->base));
        } else {
            print_prefill(r, a.files.v, a.files.n);
            if (ss) print_state(r->state, ss, state_out);
        }
    }
    hyc_free(r);
    hyc_session_close(ss);
    hyc_close(c);
    ctl_ids_free(&q);
    ctl_segments_free(&segs);
    return rc;
}
