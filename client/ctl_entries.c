/*
 * hypicctl's commands about what is stored: status (Health + Stats), ls
 * (List, following pages), inspect, evict and invalidate, policy get|set,
 * get and put (an entry's bytes to a file and back, with its metadata as
 * JSON beside it), and watch.
 *
 * Each parses its options, opens the connection, makes its calls and prints
 * either a table for people or, with --json, one JSON object (watch: one per
 * event) built from the responses themselves (ctl_json_msg).
 */
#include "ctl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The arguments of a command that takes one KEY and, maybe, flags. */
typedef struct key_args {
    const char *key;
    bool verify; /* inspect */
} key_args;

static void join_tiers(const Hypic__V1__EntryMeta *m, char *out, size_t cap)
{
    out[0] = '\0';
    size_t len = 0;
    for (size_t i = 0; i < m->n_tiers && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "",
                                ctl_tier_name(m->tiers[i]));
    if (!m->n_tiers) snprintf(out, cap, "-");
}

static void join_strings(char **s, size_t n, char *out, size_t cap)
{
    out[0] = '\0';
    size_t len = 0;
    for (size_t i = 0; i < n && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s", i ? "," : "", s[i]);
    if (!n) snprintf(out, cap, "-");
}

/* ---- status ---- */

static void print_status(const Hypic__V1__HealthResponse *h, const Hypic__V1__StatsResponse *s)
{
    char state[32], models[512], b1[32], b2[32];
    ctl_enum(&hypic__v1__health_response__status__descriptor, h->status, "STATUS_", state,
             sizeof state);
    size_t ml = 0;
    models[0] = '\0';
    for (size_t i = 0; i < h->n_models && ml < sizeof models; i++) {
        ml +=
            (size_t)snprintf(models + ml, sizeof models - ml, "%s%s", i ? ", " : "", h->models[i]);
        if (i < h->n_model_weights && i < h->n_model_weight_bytes && ml < sizeof models) {
            ctl_bytes(h->model_weight_bytes[i], b1, sizeof b1);
            ml += (size_t)snprintf(models + ml, sizeof models - ml, " (%s weights, %s)",
                                   h->model_weights[i], b1);
        }
    }
    if (!h->n_models) snprintf(models, sizeof models, "-");
    printf("status    %s (hypic-cached %s)\n", state, h->version);
    printf("models    %s\n", models);
    printf("entries   %llu   misses %llu   puts %llu (dropped %llu)   expired %llu   "
           "invalidated %llu   checksum failures %llu\n",
           (unsigned long long)s->entries, (unsigned long long)s->misses,
           (unsigned long long)s->puts, (unsigned long long)s->puts_dropped,
           (unsigned long long)s->expired, (unsigned long long)s->invalidated,
           (unsigned long long)s->checksum_failures);
    printf("load      %llu requests in flight, %llu queued\n\n",
           (unsigned long long)s->requests_in_flight, (unsigned long long)s->queue_depth);
    static const char *const hdr[] = {"TIER",      "ENTRIES",    "BYTES",    "CAPACITY",
                                      "USED",      "PER GiB",    "HOLDS",    "HITS",
                                      "EVICTIONS", "PROMOTIONS", "DEMOTIONS"};
    ctl_table *t = ctl_table_new(11, hdr);
    for (size_t i = 0; i < s->n_tiers; i++) {
        const Hypic__V1__TierStats *ts = s->tiers[i];
        char e[24], used[16], hits[24], ev[24], pr[24], de[24], pg[24], holds[24];
        if (!ts->present) continue; /* listed below the table */
        snprintf(e, sizeof e, "%llu", (unsigned long long)ts->entries);
        ctl_bytes(ts->bytes, b1, sizeof b1);
        ctl_bytes(ts->capacity, b2, sizeof b2);
        if (ts->capacity)
            snprintf(used, sizeof used, "%.1f%%", 100.0 * (double)ts->bytes / (double)ts->capacity);
        else
            snprintf(used, sizeof used, "-");
        snprintf(hits, sizeof hits, "%llu", (unsigned long long)ts->hits);
        snprintf(ev, sizeof ev, "%llu", (unsigned long long)ts->evictions);
        snprintf(pr, sizeof pr, "%llu", (unsigned long long)ts->promotions);
        snprintf(de, sizeof de, "%llu", (unsigned long long)ts->demotions);
        /* entries a GiB and the capacity hold at the tier's mean entry size */
        snprintf(pg, sizeof pg, ts->entries_per_gib > 0 ? "%.0f" : "-", ts->entries_per_gib);
        snprintf(holds, sizeof holds, ts->capacity_entries ? "%llu" : "-",
                 (unsigned long long)ts->capacity_entries);
        const char *row[] = {ctl_tier_name(ts->tier), e, b1, b2, used, pg, holds, hits, ev, pr, de};
        ctl_table_row(t, row);
    }
    ctl_table_print(t);
    for (size_t i = 0; i < s->n_tiers; i++)
        if (!s->tiers[i]->present)
            printf("%-4s  absent: %s\n", ctl_tier_name(s->tiers[i]->tier), s->tiers[i]->why_absent);
    if (s->n_reprs) { /* entries built since the start, by representation */
        static const char *const rhdr[] = {"REPRESENTATION", "ENTRIES", "BYTES/ENTRY",
                                           "BYTES/TOKEN",    "T HEADS", "S HEADS"};
        ctl_table *rt = ctl_table_new(6, rhdr);
        for (size_t i = 0; i < s->n_reprs; i++) {
            const Hypic__V1__ReprStats *rs = s->reprs[i];
            const Hypic__V1__Representation *rp = rs->repr;
            char name[64], n[24], be[32], bt[24], th[160], sh[160];
            snprintf(name, sizeof name, "tol %g, S %s, T %s, K/V %s", rp ? rp->tolerance : 0.0,
                     rs->dtype == HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16 ? "bf16" : "f32",
                     rp && rp->t_dtype == HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16 ? "bf16" : "f32",
                     rp && rp->kv_dtype == HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16 ? "bf16"
                                                                                    : "f32");
            snprintf(n, sizeof n, "%llu", (unsigned long long)rs->entries);
            ctl_bytes(rs->entries ? rs->bytes / rs->entries : 0, be, sizeof be);
            snprintf(bt, sizeof bt, "%.0f",
                     rs->body_tokens ? (double)rs->bytes / (double)rs->body_tokens : 0.0);
            for (int part = 0; part < 2; part++) {
                char *o = part ? sh : th;
                size_t at = 0;
                const size_t nf = part ? rs->n_s_heads : rs->n_t_heads;
                o[0] = '\0';
                for (size_t f = 0; f < nf && at < 150; f++) {
                    const Hypic__V1__FormCount *c = part ? rs->s_heads[f] : rs->t_heads[f];
                    at += (size_t)snprintf(o + at, 160 - at, "%s%s %llu", f ? ", " : "", c->form,
                                           (unsigned long long)c->heads);
                }
            }
            const char *row[] = {name, n, be, bt, th, sh};
            ctl_table_row(rt, row);
        }
        printf("\nentries built since the start (docs/entry-format.md#head-forms)\n");
        ctl_table_print(rt);
    }
    if (s->n_shadow) { /* the quality watch (pic.shadow_rate, docs/quality.md#in-service) */
        static const char *const qhdr[] = {"MODEL", "MODE", "COMPARED", "KL MEAN", "KL MAX",
                                           "TOP-1", "OVER", "DROPPED",  "FAILED",  "SECONDS"};
        ctl_table *qt = ctl_table_new(10, qhdr);
        for (size_t i = 0; i < s->n_shadow; i++) {
            const Hypic__V1__ShadowStats *q = s->shadow[i];
            char mode[24] = "-", n[24], km[24], kx[24], t1[24], ov[24], dr[24], fa[24], sec[24];
            if (q->mode != HYPIC__V1__MODE__MODE_UNSPECIFIED)
                ctl_enum(&hypic__v1__mode__descriptor, q->mode, "MODE_", mode, sizeof mode);
            snprintf(n, sizeof n, "%llu", (unsigned long long)q->compared);
            snprintf(km, sizeof km, q->compared ? "%.3g" : "-", q->kl_mean);
            snprintf(kx, sizeof kx, q->compared ? "%.3g" : "-", q->kl_max);
            snprintf(t1, sizeof t1, q->compared ? "%.1f%%" : "-", 100.0 * q->top1_agreement);
            snprintf(ov, sizeof ov, "%llu", (unsigned long long)q->over_threshold);
            snprintf(dr, sizeof dr, "%llu", (unsigned long long)q->dropped);
            snprintf(fa, sizeof fa, "%llu", (unsigned long long)q->failed);
            snprintf(sec, sizeof sec, "%.2f", q->seconds);
            const char *row[] = {q->model, mode, n, km, kx, t1, ov, dr, fa, sec};
            ctl_table_row(qt, row);
        }
        printf("\nrequests reusing entries compared with a full pass (pic.shadow_rate)\n");
        ctl_table_print(qt);
    }
    if (s->n_workers) { /* the scatter workers (docs/scheduler.md) */
        static const char *const whdr[] = {"WORKER", "SOURCE", "STATE", "IN FLIGHT", "LOAD S",
                                           "BUILT",  "FAILED", "TOK/S", "SPEED",     "LAST ERROR"};
        ctl_table *w = ctl_table_new(10, whdr);
        for (size_t i = 0; i < s->n_workers; i++) {
            const Hypic__V1__WorkerStats *ws = s->workers[i];
            char fl[16], load[24], built[24], failed[24], tps[24], speed[24], err[80];
            snprintf(fl, sizeof fl, "%u", ws->in_flight);
            snprintf(load, sizeof load, "%.2f", ws->load_s);
            snprintf(built, sizeof built, "%llu", (unsigned long long)ws->segments_built);
            snprintf(failed, sizeof failed, "%llu", (unsigned long long)ws->segments_failed);
            snprintf(tps, sizeof tps, "%.0f", ws->tokens_per_s);
            snprintf(speed, sizeof speed, "%.2f", ws->speed);
            snprintf(err, sizeof err, "%.79s", ws->last_error[0] ? ws->last_error : "-");
            const char *row[] = {
                ws->address, ws->source, ws->up ? "up" : "down", fl, load, built, failed, tps,
                speed,       err};
            ctl_table_row(w, row);
        }
        printf("\n");
        ctl_table_print(w);
    }
    const Hypic__V1__ClusterStats *cs = s->cluster;
    if (cs) { /* cluster mode (docs/deploy.md#cluster-mode) */
        printf("\ncluster: member %s, %s membership, %u replica(s) per entry; the set changed "
               "%llu time(s), last %.1f s ago\n",
               cs->self, cs->membership, cs->replicas, (unsigned long long)cs->view_changes,
               cs->view_age_s);
        printf("  from owners: %llu hit(s) (%llu through a transport session), %llu miss(es); to "
               "owners: %llu put(s), %llu failed, %llu queued, %llu handed over; %llu call(s) "
               "passed on, %llu peer error(s)\n",
               (unsigned long long)cs->remote_hits, (unsigned long long)cs->remote_via_transport,
               (unsigned long long)cs->remote_misses, (unsigned long long)cs->puts_sent,
               (unsigned long long)cs->puts_failed, (unsigned long long)cs->puts_queued,
               (unsigned long long)cs->handed_over, (unsigned long long)cs->forwarded,
               (unsigned long long)cs->peer_errors);
        static const char *const mhdr[] = {"MEMBER", "ADDRESS", ""};
        ctl_table *m = ctl_table_new(3, mhdr);
        for (size_t i = 0; i < cs->n_members; i++) {
            const char *row[] = {cs->members[i]->id, cs->members[i]->address,
                                 cs->members[i]->self ? "(this one)" : ""};
            ctl_table_row(m, row);
        }
        ctl_table_print(m);
    }
    const Hypic__V1__TransportStats *tp = s->transport;
    if (!tp) return; /* not an admin: the transports are every tenant's */
    printf("\ntransports: tcp data port %u, shm %s, rdma %s; %llu session(s) open, %llu rdma "
           "fallback(s)\n",
           tp->tcp_port, tp->shm_socket[0] ? tp->shm_socket : "off",
           tp->rdma_available ? tp->rdma_status : "unavailable",
           (unsigned long long)tp->open_sessions, (unsigned long long)tp->fallbacks);
    if (!tp->rdma_available) printf("  rdma: %s\n", tp->rdma_status);
    printf("  cuda_ipc: %s\n", tp->cuda_ipc_status[0] ? tp->cuda_ipc_status : "unknown");
    static const char *const khdr[] = {"TRANSPORT", "OPENED", "TRANSFERS", "BYTES", "FAILURES"};
    ctl_table *k = ctl_table_new(5, khdr);
    for (size_t i = 0; i < tp->n_kinds; i++) {
        const Hypic__V1__TransportKindStats *ks = tp->kinds[i];
        char kind[16], op[24], tr[24], fa[24];
        ctl_enum(&hypic__v1__transport__descriptor, ks->kind, "TRANSPORT_", kind, sizeof kind);
        snprintf(op, sizeof op, "%llu", (unsigned long long)ks->opened);
        snprintf(tr, sizeof tr, "%llu", (unsigned long long)ks->transfers);
        ctl_bytes(ks->bytes, b1, sizeof b1);
        snprintf(fa, sizeof fa, "%llu", (unsigned long long)ks->failures);
        const char *row[] = {kind, op, tr, b1, fa};
        ctl_table_row(k, row);
    }
    ctl_table_print(k);
}

int ctl_status(ctl *x, int argc, char **argv)
{
    static const ctl_cmdline cl = {0}; /* the global options only */
    int rc = ctl_parse(x, argc, argv, &cl, NULL);
    hyc *c;
    if (rc || (rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c))) return rc;
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__StatsRequest sr = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__HealthResponse *h = NULL;
    Hypic__V1__StatsResponse *s = NULL;
    hyc_status st;
    if (hyc_health(c, &hr, &h, &st) || hyc_stats(c, &sr, &s, &st)) {
        rc = ctl_fail(&st);
    } else {
        if (x->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToObject(o, "health", ctl_json_msg(&h->base));
            cJSON_AddItemToObject(o, "stats", ctl_json_msg(&s->base));
            ctl_json_print(o);
        } else {
            print_status(h, s);
        }
        if (h->status != HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING)
            rc = ctl_error("the server is not serving");
    }
    hyc_free(h);
    hyc_free(s);
    hyc_close(c);
    return rc;
}

/* ---- ls ---- */

/* One entry as a row of KEY TIERS TOKENS BYTES HITS AGE IDLE PIN TAGS MODEL
 * (a table of 9 columns leaves the model out). */
static void entry_row(ctl_table *t, const Hypic__V1__EntryMeta *m)
{
    char key[65], tiers[64], tok[16], bytes[32], hits[24], age[16], last[16], pin[24], tags[256];
    ctl_hex(&m->key, key, sizeof key);
    join_tiers(m, tiers, sizeof tiers);
    snprintf(tok, sizeof tok, "%u", m->tokens);
    ctl_bytes(m->bytes, bytes, sizeof bytes);
    snprintf(hits, sizeof hits, "%llu", (unsigned long long)m->hits);
    ctl_age(m->created_unix_ns, age, sizeof age);
    ctl_age(m->last_access_unix_ns, last, sizeof last);
    ctl_pin_text(m->pinned_until_unix_ns, pin, sizeof pin);
    join_strings(m->tags, m->n_tags, tags, sizeof tags);
    const char *row[] = {key, tiers, tok, bytes, hits, age, last, pin, tags, m->model};
    ctl_table_row(t, row);
}

typedef struct ls_args {
    Hypic__V1__Tier tier;
    const char *tag;
    Hypic__V1__ListRequest__Sort sort;
    uint64_t limit, page;
    bool desc, all_models;
} ls_args;

static int opt_sort(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    static const struct {
        const char *name;
        Hypic__V1__ListRequest__Sort sort;
    } sorts[] = {{"key", HYPIC__V1__LIST_REQUEST__SORT__SORT_KEY},
                 {"bytes", HYPIC__V1__LIST_REQUEST__SORT__SORT_BYTES},
                 {"hits", HYPIC__V1__LIST_REQUEST__SORT__SORT_HITS},
                 {"age", HYPIC__V1__LIST_REQUEST__SORT__SORT_AGE}};
    for (size_t i = 0; i < sizeof sorts / sizeof sorts[0]; i++)
        if (strcmp(v, sorts[i].name) == 0) {
            ((ls_args *)args)->sort = sorts[i].sort;
            return CTL_OK;
        }
    return ctl_usage(x, "%s: '%s' is not key, bytes, hits or age", o->name, v);
}

static const ctl_opt k_ls_opts[] = {
    CTL_CALL("--tier", ls_args, tier, ctl_opt_tier_any),
    CTL_STR("--tag", ls_args, tag),
    CTL_CALL("--sort", ls_args, sort, opt_sort),
    CTL_U64("--limit", ls_args, limit, 1, UINT32_MAX),
    CTL_U64("--page-size", ls_args, page, 1, UINT32_MAX),
    CTL_FLAG("--desc", ls_args, desc),
    CTL_FLAG("--all-models", ls_args, all_models),
};

int ctl_ls(ctl *x, int argc, char **argv)
{
    static const ctl_cmdline cl = {CTL_OPTS(k_ls_opts)};
    ls_args a = {.limit = UINT64_MAX};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    Hypic__V1__ListRequest rq = HYPIC__V1__LIST_REQUEST__INIT;
    rq.tier = a.tier;
    rq.tag = (char *)a.tag;
    rq.sort = a.sort;
    rq.descending = a.desc;
    const uint64_t limit = a.limit, page = a.page;
    const bool all_models = a.all_models;
    if (!all_models) rq.model = (char *)x->model;
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    if (rc) return rc;
    static const char *const hdr[] = {"KEY", "TIERS", "TOKENS", "BYTES", "HITS",
                                      "AGE", "IDLE",  "PIN",    "TAGS",  "MODEL"};
    ctl_table *t = x->json ? NULL : ctl_table_new(all_models ? 10 : 9, hdr);
    cJSON *o = x->json ? cJSON_CreateObject() : NULL;
    cJSON *arr = o ? cJSON_AddArrayToObject(o, "entries") : NULL;
    uint64_t shown = 0, total = 0;
    char *token = NULL;
    for (;;) {
        uint64_t want = limit - shown;
        rq.page_size = (uint32_t)(page ? HY_MIN(page, want) : (want < 1000 ? want : 0));
        rq.page_token = token ? token : (char *)"";
        Hypic__V1__ListResponse *r = NULL;
        hyc_status st;
        if (hyc_list(c, &rq, &r, &st)) {
            rc = ctl_fail(&st);
            break;
        }
        total = r->total;
        for (size_t k = 0; k < r->n_entries && shown < limit; k++, shown++) {
            if (arr)
                cJSON_AddItemToArray(arr, ctl_json_msg(&r->entries[k]->base));
            else
                entry_row(t, r->entries[k]);
        }
        free(token);
        token = NULL;
        bool more = r->next_page_token[0] && shown < limit && r->n_entries > 0;
        if (more) token = strdup(r->next_page_token);
        hyc_free(r);
        if (!more || !token) break;
    }
    free(token);
    if (rc) {
        cJSON_Delete(o);
        ctl_table_free(t);
    } else if (o) {
        cJSON_AddNumberToObject(o, "total", (double)total);
        cJSON_AddNumberToObject(o, "shown", (double)shown);
        ctl_json_print(o);
    } else {
        ctl_table_print(t);
        printf("%llu of %llu entries\n", (unsigned long long)shown, (unsigned long long)total);
    }
    hyc_close(c);
    return rc;
}

/* ---- inspect ---- */

static void print_meta(const Hypic__V1__EntryMeta *m)
{
    char key[65], fp[65], tiers[64], tags[512], bytes[32], age[16], idle[16], exp[32];
    ctl_hex(&m->key, key, sizeof key);
    ctl_hex(&m->model_fingerprint, fp, sizeof fp);
    join_tiers(m, tiers, sizeof tiers);
    join_strings(m->tags, m->n_tags, tags, sizeof tags);
    ctl_bytes(m->bytes, bytes, sizeof bytes);
    ctl_age(m->created_unix_ns, age, sizeof age);
    ctl_age(m->last_access_unix_ns, idle, sizeof idle);
    if (m->expires_unix_ns)
        snprintf(exp, sizeof exp, "%llu (unix ns)", (unsigned long long)m->expires_unix_ns);
    else
        snprintf(exp, sizeof exp, "never");
    printf("key          %s\n", key);
    printf("model        %s (fingerprint %s)\n", m->model, fp);
    printf("tenant       %s\n", m->tenant[0] ? m->tenant : "-");
    printf("tokens       %u   flops %.3g   bytes %s (%llu)\n", m->tokens, m->flops, bytes,
           (unsigned long long)m->bytes);
    printf("tiers        %s   hits %llu   age %s   idle %s   expires %s\n", tiers,
           (unsigned long long)m->hits, age, idle, exp);
    printf("tags         %s\n", tags);
    if (m->pinned_until_unix_ns == UINT64_MAX)
        printf("pinned       until unpinned\n");
    else if (m->pinned_until_unix_ns) {
        char left[24];
        ctl_pin_text(m->pinned_until_unix_ns, left, sizeof left);
        printf("pinned       until %llu (unix ns; %s)\n",
               (unsigned long long)m->pinned_until_unix_ns, strcmp(left, "-") ? left : "lapsed");
    }
}

int ctl_inspect(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {CTL_FLAG("--verify", key_args, verify)};
    static const ctl_cmdline cl = {CTL_OPTS(opts), .pos = {offsetof(key_args, key)}, .npos = 1};
    key_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    Hypic__V1__InspectRequest rq = HYPIC__V1__INSPECT_REQUEST__INIT;
    rq.verify = a.verify;
    uint8_t key[32];
    if (!a.key) return ctl_usage(x, "which KEY?");
    if (ctl_key(x, a.key, key)) return CTL_USAGE;
    rq.key.data = key;
    rq.key.len = sizeof key;
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    if (rc) return rc;
    Hypic__V1__InspectResponse *r = NULL;
    hyc_status st;
    if (hyc_inspect(c, &rq, &r, &st)) {
        rc = ctl_fail(&st);
        hyc_close(c);
        return rc;
    }
    size_t bad = 0;
    for (size_t i = 0; i < r->n_sections; i++) bad += r->verified && !r->sections[i]->checksum_ok;
    if (x->json) {
        ctl_json_print(ctl_json_msg(&r->base));
    } else {
        if (r->meta) print_meta(r->meta);
        char dtype[16];
        ctl_enum(&hypic__v1__state_dtype__descriptor, r->dtype, "STATE_DTYPE_", dtype,
                 sizeof dtype);
        printf("layout       seam W=%u (w=%u tokens)   body %u tokens   dtype %s   format v%u\n\n",
               r->seam, r->seam_tokens, r->body_tokens, dtype, r->format_version);
        static const char *const hdr[] = {"LAYER", "SECTION", "BYTES", "CHECKSUM"};
        ctl_table *t = ctl_table_new(4, hdr);
        for (size_t i = 0; i < r->n_sections; i++) {
            const Hypic__V1__Section *s = r->sections[i];
            char layer[16], bytes[24];
            if (s->layer < 0)
                snprintf(layer, sizeof layer, "-");
            else
                snprintf(layer, sizeof layer, "%d", s->layer);
            snprintf(bytes, sizeof bytes, "%llu", (unsigned long long)s->bytes);
            const char *row[] = {layer, s->name, bytes,
                                 !r->verified     ? "-"
                                 : s->checksum_ok ? "ok"
                                                  : "FAILED"};
            ctl_table_row(t, row);
        }
        ctl_table_print(t);
        if (r->verified)
            printf("\nverified: %zu of %zu sections ok\n", r->n_sections - bad, r->n_sections);
    }
    if (bad) rc = ctl_error("inspect: %zu sections failed their checksum", bad);
    hyc_free(r);
    hyc_close(c);
    return rc;
}

/* ---- evict, invalidate ---- */

static int invalidate(ctl *x, Hypic__V1__InvalidateRequest *rq)
{
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    if (rc) return rc;
    Hypic__V1__InvalidateResponse *r = NULL;
    hyc_status st;
    if (hyc_invalidate(c, rq, &r, &st)) {
        rc = ctl_fail(&st);
    } else if (x->json) {
        ctl_json_print(ctl_json_msg(&r->base));
    } else {
        printf("removed %llu\n", (unsigned long long)r->removed);
        for (size_t i = 0; i < r->n_unreachable; i++) /* cluster mode */
            printf("member %s did not answer: its entries stay\n", r->unreachable[i]);
    }
    hyc_free(r);
    hyc_close(c);
    return rc;
}

int ctl_evict(ctl *x, int argc, char **argv)
{
    static const ctl_cmdline cl = {.pos = {offsetof(key_args, key)}, .npos = 1};
    key_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    if (!a.key) return ctl_usage(x, "which KEY?");
    uint8_t key[32];
    if (ctl_key(x, a.key, key)) return CTL_USAGE;
    Hypic__V1__InvalidateRequest rq = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    rq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_KEY;
    rq.key.data = key;
    rq.key.len = sizeof key;
    return invalidate(x, &rq);
}

/* What invalidate, pin and unpin act on: exactly one target, each given
 * once (KEY, --tag T, --model M, --tenant, --all). */
typedef struct target_args {
    int targets; /* given so far: first, so that target() finds it */
    const char *key, *tag, *model;
    bool tenant, all;
    uint64_t ttl_ms; /* pin --ttl */
} target_args;

/* A target option: counted, and its value (a flag: true) set. */
static int target(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    (void)x;
    target_args *a = args;
    a->targets++;
    if (v)
        *(const char **)((char *)args + o->off) = v;
    else
        *(bool *)((char *)args + o->off) = true;
    return CTL_OK;
}

static int opt_ttl(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    /* at most a hundred years, as the daemon allows */
    return ctl_duration_ms(x, o->name, v, 100ull * 366 * 86400 * 1000,
                           &((target_args *)args)->ttl_ms);
}

int ctl_invalidate(ctl *x, int argc, char **argv)
{
    /* here --model names what to remove, not only the model requests name */
    static const ctl_opt opts[] = {
        CTL_CALL("--tag", target_args, tag, target),
        CTL_CALL_FLAG("--tenant", target_args, tenant, target),
        CTL_CALL("--model", target_args, model, target),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts)};
    target_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    if (a.targets != 1)
        return ctl_usage(x, "exactly one of --tag T, --model M, --tenant (got %d)", a.targets);
    Hypic__V1__InvalidateRequest rq = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    if (a.tag) {
        rq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_TAG;
        rq.tag = (char *)a.tag;
    } else if (a.tenant) {
        rq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_ALL_OF_TENANT;
        rq.all_of_tenant = true;
    } else {
        rq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_MODEL;
        rq.model = (char *)a.model;
    }
    return invalidate(x, &rq);
}

/* ---- pin, unpin ---- */

/* Reads the command line of pin (with --ttl) or unpin (with --all): KEY
 * and the options into a, whose target is checked (exactly one) and, for a
 * key, read into key. */
static int pin_args(ctl *x, int argc, char **argv, bool unpin, target_args *a, uint8_t key[32])
{
    static const ctl_opt pin_opts[] = {
        CTL_CALL("--tag", target_args, tag, target),
        CTL_CALL("--ttl", target_args, ttl_ms, opt_ttl),
    };
    static const ctl_opt unpin_opts[] = {
        CTL_CALL("--tag", target_args, tag, target),
        CTL_CALL_FLAG("--all", target_args, all, target),
    };
    static const ctl_cmdline pin_cl = {CTL_OPTS(pin_opts), .pos = {offsetof(target_args, key)},
                                       .npos = 1};
    static const ctl_cmdline unpin_cl = {CTL_OPTS(unpin_opts), .pos = {offsetof(target_args, key)},
                                         .npos = 1};
    if (ctl_parse(x, argc, argv, unpin ? &unpin_cl : &pin_cl, a)) return CTL_USAGE;
    if (a->key) {
        if (ctl_key(x, a->key, key)) return CTL_USAGE;
        a->targets++;
    }
    if (a->targets != 1)
        return ctl_usage(x, "exactly one of KEY, --tag T%s (got %d)", unpin ? ", --all" : "",
                         a->targets);
    return CTL_OK;
}

int ctl_pin(ctl *x, int argc, char **argv)
{
    Hypic__V1__PinRequest rq = HYPIC__V1__PIN_REQUEST__INIT;
    uint8_t key[32];
    target_args a = {0};
    int rc = pin_args(x, argc, argv, false, &a, key);
    if (rc) return rc;
    rq.ttl_ms = a.ttl_ms;
    if (a.key) {
        rq.target_case = HYPIC__V1__PIN_REQUEST__TARGET_KEY;
        rq.key = (ProtobufCBinaryData){sizeof key, key};
    } else {
        rq.target_case = HYPIC__V1__PIN_REQUEST__TARGET_TAG;
        rq.tag = (char *)a.tag;
    }
    hyc *c;
    if ((rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c))) return rc;
    Hypic__V1__PinResponse *r = NULL;
    hyc_status st;
    if (hyc_pin(c, &rq, &r, &st)) {
        rc = ctl_fail(&st);
    } else if (x->json) {
        ctl_json_print(ctl_json_msg(&r->base));
    } else {
        char b[32], mine[32], cap[32], until[24];
        ctl_bytes(r->bytes, b, sizeof b);
        ctl_bytes(r->tenant_pinned_bytes, mine, sizeof mine);
        ctl_bytes(r->tenant_pin_cap, cap, sizeof cap);
        ctl_pin_text(r->until_unix_ns, until, sizeof until);
        printf("pinned %llu (%s), %s; your pins here: %s of %s\n", (unsigned long long)r->pinned, b,
               r->until_unix_ns == UINT64_MAX ? "until unpinned" : until, mine, cap);
        for (size_t i = 0; i < r->n_unreachable; i++) /* cluster mode */
            printf("member %s did not answer: its entries are not pinned\n", r->unreachable[i]);
    }
    hyc_free(r);
    hyc_close(c);
    return rc;
}

int ctl_unpin(ctl *x, int argc, char **argv)
{
    Hypic__V1__UnpinRequest rq = HYPIC__V1__UNPIN_REQUEST__INIT;
    uint8_t key[32];
    target_args a = {0};
    int rc = pin_args(x, argc, argv, true, &a, key);
    if (rc) return rc;
    if (a.key) {
        rq.target_case = HYPIC__V1__UNPIN_REQUEST__TARGET_KEY;
        rq.key = (ProtobufCBinaryData){sizeof key, key};
    } else if (a.tag) {
        rq.target_case = HYPIC__V1__UNPIN_REQUEST__TARGET_TAG;
        rq.tag = (char *)a.tag;
    } else {
        rq.target_case = HYPIC__V1__UNPIN_REQUEST__TARGET_ALL_OF_TENANT;
        rq.all_of_tenant = true;
    }
    hyc *c;
    if ((rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c))) return rc;
    Hypic__V1__UnpinResponse *r = NULL;
    hyc_status st;
    if (hyc_unpin(c, &rq, &r, &st)) {
        rc = ctl_fail(&st);
    } else if (x->json) {
        ctl_json_print(ctl_json_msg(&r->base));
    } else {
        char b[32];
        ctl_bytes(r->bytes, b, sizeof b);
        printf("unpinned %llu (%s)\n", (unsigned long long)r->unpinned, b);
        for (size_t i = 0; i < r->n_unreachable; i++) /* cluster mode */
            printf("member %s did not answer: its pins stay\n", r->unreachable[i]);
    }
    hyc_free(r);
    hyc_close(c);
    return rc;
}

/* ---- policy ---- */

static void print_policy(const Hypic__V1__Policy *p)
{
    static const char *const hdr[] = {"TIER", "EVICT", "ADMIT", "MIN_TOKENS"};
    ctl_table *t = ctl_table_new(4, hdr);
    char mt[16];
    snprintf(mt, sizeof mt, "%u", p->min_tokens);
    const char *row[] = {ctl_tier_name(p->tier), p->evict, p->admit, mt};
    ctl_table_row(t, row);
    ctl_table_print(t);
}

typedef struct policy_args {
    const char *verb, *tier, *evict, *admit;
    uint64_t min_tokens;
} policy_args;

int ctl_policy(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_STR("--evict", policy_args, evict),
        CTL_STR("--admit", policy_args, admit),
        CTL_U64("--min-tokens", policy_args, min_tokens, 0, UINT32_MAX),
    };
    static const ctl_cmdline cl = {
        CTL_OPTS(opts), .pos = {offsetof(policy_args, verb), offsetof(policy_args, tier)},
        .npos = 2};
    policy_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    const char *verb = a.verb, *tier = a.tier, *evict = a.evict, *admit = a.admit;
    const uint64_t min_tokens = a.min_tokens;
    if (!verb || (strcmp(verb, "get") != 0 && strcmp(verb, "set") != 0))
        return ctl_usage(x, "get or set?");
    if (!tier) return ctl_usage(x, "which TIER (hbm, host, nvme)?");
    Hypic__V1__Tier t;
    if (ctl_tier(x, "TIER", tier, false, &t)) return CTL_USAGE;
    bool set = verb[0] == 's';
    if (set && (!evict || !admit)) return ctl_usage(x, "set needs --evict and --admit");
    if (!set && (evict || admit || min_tokens))
        return ctl_usage(x, "--evict, --admit and --min-tokens are for set");
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    if (rc) return rc;
    Hypic__V1__Policy *p = NULL;
    hyc_status st;
    if (set) {
        Hypic__V1__Policy want = HYPIC__V1__POLICY__INIT;
        want.tier = t;
        want.evict = (char *)evict;
        want.admit = (char *)admit;
        want.min_tokens = (uint32_t)min_tokens;
        Hypic__V1__SetPolicyRequest rq = HYPIC__V1__SET_POLICY_REQUEST__INIT;
        rq.policy = &want;
        hyc_set_policy(c, &rq, &p, &st);
    } else {
        Hypic__V1__GetPolicyRequest rq = HYPIC__V1__GET_POLICY_REQUEST__INIT;
        rq.tier = t;
        hyc_get_policy(c, &rq, &p, &st);
    }
    if (st.code)
        rc = ctl_fail(&st);
    else if (x->json)
        ctl_json_print(ctl_json_msg(&p->base));
    else
        print_policy(p);
    hyc_free(p);
    hyc_close(c);
    return rc;
}

/* ---- get, put: an entry to a file and back ---- */

/* Writes n bytes to path through path.tmp and a rename, so that a reader
 * never sees half a file. */
static int write_file(const char *path, const void *b, size_t n)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return ctl_error("%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return ctl_error("%s: cannot create: %m", tmp);
    bool ok = fwrite(b, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int rc = ctl_error("%s: cannot write: %m", path);
        remove(tmp);
        return rc;
    }
    return CTL_OK;
}

/* get and build: the bytes into out, the metadata into out.meta.json (what
 * `hypicctl put out` sends back), and a line (or --json) saying so. */
static int save_entry(ctl *x, const char *label, const char *out, const Hypic__V1__EntryMeta *meta,
                      const void *bytes, size_t n, const char *via)
{
    cJSON *mj = ctl_json_msg(&meta->base);
    char *mtext = cJSON_Print(mj);
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s.meta.json", out);
    int rc = write_file(out, bytes, n);
    if (!rc) rc = mtext ? write_file(mpath, mtext, strlen(mtext)) : ctl_error("out of memory");
    if (!rc) {
        if (x->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddItemToObject(o, "meta", mj);
            mj = NULL;
            cJSON_AddStringToObject(o, "file", out);
            cJSON_AddStringToObject(o, "meta_file", mpath);
            cJSON_AddNumberToObject(o, "bytes", (double)n);
            ctl_json_print(o);
        } else {
            char b[32];
            ctl_bytes(n, b, sizeof b);
            printf("%s: %s (%zu bytes, %u tokens) -> %s, %s%s%s\n", label, b, n, meta->tokens, out,
                   mpath, via ? "; delivered over " : "", via ? via : "");
        }
    }
    free(mtext);
    cJSON_Delete(mj);
    return rc;
}

/* get --transport: the entry's size from Inspect, a session that holds it,
 * the bytes delivered into its buffer (*bytes points there; delivered into
 * GPU memory — cuda_ipc — they are read back into a buffer of their own,
 * *copied). */
static int get_through(hyc *c, const char *kinds, Hypic__V1__GetEntryRequest *rq, hyc_session **ss,
                       Hypic__V1__EntryMeta **meta, void **bytes, size_t *n, bool *copied,
                       hyc_status *st)
{
    *copied = false;
    Hypic__V1__InspectRequest iq = HYPIC__V1__INSPECT_REQUEST__INIT;
    iq.key = rq->key;
    Hypic__V1__InspectResponse *ir = NULL;
    if (hyc_inspect(c, &iq, &ir, st)) return st->code;
    uint64_t need = ir->meta ? ir->meta->bytes : 0;
    hyc_free(ir);
    const uint64_t cap = need > 4096 ? need : 4096;
    if (strstr(kinds, "cuda_ipc") ? hyc_session_open_cuda(c, kinds, -1, NULL, cap, ss, st)
                                  : hyc_session_open(c, kinds, cap, ss, st))
        return st->code;
    if (hyc_get_entry_into(c, *ss, 0, rq, meta, st)) return st->code;
    *n = (size_t)(*meta)->bytes;
    if (!hyc_session_on_device(*ss)) {
        *bytes = hyc_session_buffer(*ss);
        return HYC_OK;
    }
    if (!(*bytes = malloc(*n ? *n : 1))) {
        st->code = HYC_INTERNAL;
        snprintf(st->msg, sizeof st->msg, "out of memory for the entry's %zu bytes", *n);
        return st->code;
    }
    *copied = true;
    return hyc_session_read(*ss, 0, *bytes, *n, st);
}

typedef struct get_args {
    const char *key, *out, *transport;
} get_args;

int ctl_get(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_STR_ALIAS("--out", "-o", get_args, out),
        CTL_STR("--transport", get_args, transport),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts), .pos = {offsetof(get_args, key)}, .npos = 1};
    get_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    const char *out = a.out, *transport = a.transport;
    uint8_t key[32];
    if (!a.key) return ctl_usage(x, "which KEY?");
    if (ctl_key(x, a.key, key)) return CTL_USAGE;
    if (!out) return ctl_usage(x, "--out FILE is needed");
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    if (rc) return rc;
    Hypic__V1__GetEntryRequest rq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    rq.model = (char *)x->model;
    rq.key.data = key;
    rq.key.len = sizeof key;
    Hypic__V1__EntryMeta *meta = NULL;
    void *bytes = NULL;
    size_t n = 0;
    hyc_status st;
    hyc_session *ss = NULL;
    bool copied = false;
    if (transport ? get_through(c, transport, &rq, &ss, &meta, &bytes, &n, &copied, &st)
                  : hyc_get_entry(c, &rq, &meta, &bytes, &n, &st)) {
        rc = ctl_fail(&st);
        if (copied) free(bytes);
        hyc_session_close(ss);
        hyc_close(c);
        return rc;
    }
    rc = save_entry(x, a.key, out, meta, bytes, n, ss ? hyc_session_kind(ss) : NULL);
    hyc_free(meta);
    if (!ss || copied) free(bytes); /* else they are the session's buffer */
    hyc_session_close(ss);
    hyc_close(c);
    return rc;
}

/* n bytes of lower-case or upper-case hex into out[n]. */
static bool unhex(const char *s, uint8_t *out, size_t n)
{
    if (!s || strlen(s) != 2 * n) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        if (sscanf(s + 2 * i, "%2x", &v) != 1) return false;
        out[i] = (uint8_t)v;
    }
    return true;
}

/* The metadata `get` wrote (ctl_json_msg of an EntryMeta), back into m; the
 * strings and bytes point into j and key/fp. Only what a put carries: the
 * server sets hits, tiers and times itself. */
static int meta_from_json(const char *path, const cJSON *j, Hypic__V1__EntryMeta *m,
                          uint8_t key[32], uint8_t fp[32], char ***tags)
{
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "key");
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "model_fingerprint");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *tenant = cJSON_GetObjectItemCaseSensitive(j, "tenant");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    const cJSON *flops = cJSON_GetObjectItemCaseSensitive(j, "flops");
    const cJSON *exp = cJSON_GetObjectItemCaseSensitive(j, "expires_unix_ns");
    const cJSON *tg = cJSON_GetObjectItemCaseSensitive(j, "tags");
    if (!unhex(cJSON_GetStringValue(k), key, 32))
        return ctl_error("%s: key: not 64 hex digits", path);
    if (!unhex(cJSON_GetStringValue(f), fp, 32))
        return ctl_error("%s: model_fingerprint: not 64 hex digits", path);
    if (!cJSON_IsString(model)) return ctl_error("%s: model: not a string", path);
    if (!cJSON_IsNumber(tok) || tok->valuedouble < 0 || tok->valuedouble > UINT32_MAX)
        return ctl_error("%s: tokens: not a token count", path);
    m->key.data = key;
    m->key.len = 32;
    m->model_fingerprint.data = fp;
    m->model_fingerprint.len = 32;
    m->model = model->valuestring;
    m->tenant = cJSON_IsString(tenant) ? tenant->valuestring : (char *)"";
    m->tokens = (uint32_t)tok->valuedouble;
    m->flops = cJSON_IsNumber(flops) ? flops->valuedouble : 0;
    m->expires_unix_ns = cJSON_IsNumber(exp) ? (uint64_t)exp->valuedouble : 0;
    int nt = cJSON_IsArray(tg) ? cJSON_GetArraySize(tg) : 0;
    *tags = nt ? calloc((size_t)nt, sizeof **tags) : NULL;
    if (nt && !*tags) return ctl_error("out of memory");
    for (int i = 0; i < nt; i++) {
        const char *s = cJSON_GetStringValue(cJSON_GetArrayItem(tg, i));
        if (!s) return ctl_error("%s: tags[%d]: not a string", path, i);
        (*tags)[i] = (char *)s;
    }
    m->n_tags = (size_t)nt;
    m->tags = *tags;
    return CTL_OK;
}

typedef struct put_args {
    const char *file, *meta;
    ctl_list tags;
    uint64_t chunk;
} put_args;

int ctl_put(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_STR("--meta", put_args, meta),
        CTL_LIST("--tag", put_args, tags, CTL_TAGS_MAX),
        CTL_U64("--chunk", put_args, chunk, 1, (uint64_t)1 << 30),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts), .pos = {offsetof(put_args, file)}, .npos = 1};
    put_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    const char *file = a.file, *metafile = a.meta;
    char **tags = a.tags.v;
    const size_t ntags = a.tags.n;
    const uint64_t chunk = a.chunk;
    if (!file) return ctl_usage(x, "which FILE?");
    char mpath[4096];
    snprintf(mpath, sizeof mpath, "%s.meta.json", file);
    if (!metafile) metafile = mpath;
    char *bytes = NULL, *mtext = NULL;
    size_t n, mn;
    hy_err e = {0};
    if (hy_read_file(file, (size_t)1 << 34, &bytes, &n, &e) ||
        hy_read_file(metafile, (size_t)1 << 20, &mtext, &mn, &e)) {
        hy_free(bytes);
        return ctl_error("%s", e.msg);
    }
    int rc = CTL_OK;
    cJSON *j = cJSON_Parse(mtext);
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    uint8_t key[32], fp[32];
    char **jtags = NULL;
    if (!j)
        rc = ctl_error("%s: not JSON", metafile);
    else
        rc = meta_from_json(metafile, j, &meta, key, fp, &jtags);
    if (!rc && ntags) {
        meta.tags = tags;
        meta.n_tags = ntags;
    }
    hyc *c = NULL;
    if (!rc) rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    if (!rc) {
        Hypic__V1__PutEntryResponse *r = NULL;
        hyc_status st;
        if (hyc_put_entry(c, &meta, bytes, n, (size_t)chunk, &r, &st)) {
            rc = ctl_fail(&st);
        } else if (x->json) {
            ctl_json_print(ctl_json_msg(&r->base));
        } else {
            char k[65];
            ctl_hex(&r->key, k, sizeof k);
            if (r->placed == HYPIC__V1__TIER__TIER_NONE)
                printf("%s: valid, not admitted (the tier's admission policy)\n", k);
            else
                printf("%s: stored in %s\n", k, ctl_tier_name(r->placed));
        }
        hyc_free(r);
    }
    hyc_close(c);
    free(jtags);
    cJSON_Delete(j);
    hy_free(mtext);
    hy_free(bytes);
    return rc;
}

/* ---- watch ---- */

typedef struct watch_ctx {
    bool json;
    uint64_t count, max;
} watch_ctx;

static int on_event(void *arg, const Hypic__V1__WatchEvent *ev)
{
    watch_ctx *w = arg;
    if (ev->kind == HYPIC__V1__WATCH_EVENT__KIND__KIND_HEARTBEAT) return 0; /* liveness only */
    if (w->json) {
        ctl_json_print(ctl_json_msg(&ev->base));
    } else {
        char kind[16], key[65] = "-", bytes[32] = "-", tags[256] = "-";
        ctl_enum(&hypic__v1__watch_event__kind__descriptor, ev->kind, "KIND_", kind, sizeof kind);
        if (ev->meta) {
            ctl_hex(&ev->meta->key, key, sizeof key);
            ctl_bytes(ev->meta->bytes, bytes, sizeof bytes);
            join_strings(ev->meta->tags, ev->meta->n_tags, tags, sizeof tags);
        }
        printf("%-8s %s  %-10s %-6u %-10s %s%s%s\n", kind, key, ev->meta ? ev->meta->model : "-",
               ev->meta ? ev->meta->tokens : 0, bytes, tags, ev->reason[0] ? "  " : "", ev->reason);
        fflush(stdout);
    }
    return ++w->count >= w->max;
}

typedef struct watch_args {
    uint64_t count;
    bool all_models;
} watch_args;

int ctl_watch(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_U64("--count", watch_args, count, 1, UINT64_MAX),
        CTL_FLAG("--all-models", watch_args, all_models),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts)};
    watch_args a = {.count = UINT64_MAX};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    const bool all_models = a.all_models;
    watch_ctx w = {.json = x->json, .max = a.count};
    hyc *c;
    int rc = ctl_connect(x, 0, &c);
    if (rc) return rc;
    Hypic__V1__WatchRequest rq = HYPIC__V1__WATCH_REQUEST__INIT;
    rq.model = all_models ? (char *)"" : (char *)x->model;
    hyc_status st;
    hyc_watch(c, &rq, on_event, &w, &st);
    /* --count reached is the end we asked for; the server ending the stream
     * is a clean end too */
    if (st.code != HYC_OK && !(st.code == HYC_CANCELLED && w.count >= w.max)) rc = ctl_fail(&st);
    hyc_close(c);
    return rc;
}

typedef struct build_args {
    const char *file, *out;
    ctl_list tags;
    ctl_seam seam;
    Hypic__V1__StateDtype dtype;
    bool ids;
} build_args;

int ctl_build(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_STR_ALIAS("--out", "-o", build_args, out),
        CTL_LIST("--tag", build_args, tags, CTL_TAGS_MAX),
        CTL_CALL("--seam", build_args, seam, ctl_opt_seam),
        CTL_CALL("--dtype", build_args, dtype, ctl_opt_dtype),
        CTL_FLAG("--ids", build_args, ids),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts), .pos = {offsetof(build_args, file)}, .npos = 1};
    build_args a = {0};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    const char *file = a.file, *out = a.out;
    const bool ids = a.ids;
    char **tags = a.tags.v;
    const size_t ntags = a.tags.n;
    Hypic__V1__BuildRequest rq = HYPIC__V1__BUILD_REQUEST__INIT;
    if (a.seam.set) {
        rq.seam_opt_case = HYPIC__V1__BUILD_REQUEST__SEAM_OPT_SEAM;
        rq.seam = a.seam.w;
    }
    rq.dtype = a.dtype;
    if (!file) return ctl_usage(x, "which FILE?");
    if (!out) return ctl_usage(x, "--out FILE is needed");
    ctl_ids t = {0};
    hy_err e = {0};
    if (ctl_ids_from_file(file, ids, &t, &e)) return ctl_error("%s", e.msg);
    Hypic__V1__Tokens tk = HYPIC__V1__TOKENS__INIT;
    tk.n_ids = t.n;
    tk.ids = t.ids;
    rq.model = (char *)x->model;
    rq.tokens = &tk;
    rq.n_tags = ntags;
    rq.tags = tags;
    hyc *c;
    int rc = ctl_connect(x, CTL_DEADLINE_DEFAULT_MS, &c);
    if (rc) {
        ctl_ids_free(&t);
        return rc;
    }
    Hypic__V1__EntryMeta *meta = NULL;
    void *bytes = NULL;
    size_t n = 0;
    hyc_status st;
    if (hyc_build(c, &rq, &meta, &bytes, &n, &st))
        rc = ctl_fail(&st);
    else
        rc = save_entry(x, file, out, meta, bytes, n, NULL);
    hyc_free(meta);
    free(bytes);
    hyc_close(c);
    ctl_ids_free(&t);
    return rc;
}
