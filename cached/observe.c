/*
 * What hypic-cached shows on its HTTP port: the Prometheus exposition of the
 * service's counters and the store's, and readiness (docs/operations.md
 * lists every metric).
 */
#include "cluster_internal.h"
#include "router_internal.h"
#include "service_internal.h"

#include <stddef.h>

#include <stdio.h>
#include <string.h>

/* One family with a sample per tier (hbm, host, nvme). */
static void per_tier(hy_strbuf *b, const char *name, const char *type, const char *help,
                     uint64_t hbm, uint64_t host, uint64_t nvme)
{
    hy_prom_family(b, name, type, help);
    hy_prom_u64(b, name, "tier=\"hbm\"", hbm);
    hy_prom_u64(b, name, "tier=\"host\"", host);
    hy_prom_u64(b, name, "tier=\"nvme\"", nvme);
}

static void counter(hy_strbuf *b, const char *name, const char *help, uint64_t v)
{
    hy_prom_family(b, name, "counter", help);
    hy_prom_u64(b, name, NULL, v);
}

static void gauge(hy_strbuf *b, const char *name, const char *help, double v)
{
    hy_prom_family(b, name, "gauge", help);
    hy_prom_sample(b, name, NULL, v);
}

void svc_metrics_render(void *app, hy_strbuf *b)
{
    hy_svc *s = app;
    char lab[128];
    hy_prom_family(b, "hypic_requests_total", "counter", "RPCs answered, by method and status");
    for (size_t m = 0; m <= hy_rpc_method_count; m++)
        for (int c = 0; c < SVC_CODES; c++) {
            const uint64_t v = atomic_load(&s->met.calls[m][c]);
            if (!v && (c || m == SVC_UNKNOWN_METHOD))
                continue; /* every method's OK line,
                           * other codes once seen */
            snprintf(lab, sizeof lab, "method=\"%s\",code=\"%s\"",
                     m < hy_rpc_method_count ? hy_rpc_methods[m].name : "(unknown)",
                     hy_rpc_code_name(c));
            hy_prom_u64(b, "hypic_requests_total", lab, v);
        }
    hy_prom_family(b, "hypic_request_seconds", "histogram", "RPC wall time, by method");
    for (size_t m = 0; m < hy_rpc_method_count; m++) {
        snprintf(lab, sizeof lab, "method=\"%s\"", hy_rpc_methods[m].name);
        hy_prom_hist(b, "hypic_request_seconds", lab, &s->met.latency[m]);
    }
    hy_prom_family(b, "hypic_ttft_seconds", "histogram",
                   "Prefill time to the first token's logits, by mode");
    for (int i = 0; i < HY_MODE_COUNT; i++) {
        snprintf(lab, sizeof lab, "mode=\"%s\"", hy_mode_name((hy_mode)i));
        hy_prom_hist(b, "hypic_ttft_seconds", lab, &s->met.ttft[i]);
    }
    hy_prom_family(b, "hypic_segments_total", "counter", "Prefill segments, by outcome");
    hy_prom_u64(b, "hypic_segments_total", "outcome=\"hit\"", atomic_load(&s->met.segments_hit));
    hy_prom_u64(b, "hypic_segments_total", "outcome=\"miss\"",
                atomic_load(&s->met.segments_missed));
    hy_prom_u64(b, "hypic_segments_total", "outcome=\"uncacheable\"",
                atomic_load(&s->met.segments_uncacheable));
    counter(b, "hypic_tokens_computed_total", "Tokens sent through the forward pass by Prefill",
            atomic_load(&s->met.tokens_computed));
    counter(b, "hypic_entries_built_total", "Entries built (Warm, and Prefill's misses)",
            atomic_load(&s->met.entries_built));
    counter(b, "hypic_entries_stored_total", "Built entries a tier admitted",
            atomic_load(&s->met.entries_stored));
    gauge(b, "hypic_queue_depth", "Requests waiting for an executor context",
          (double)atomic_load(&s->queued));
    gauge(b, "hypic_requests_in_flight", "Calls inside a handler",
          (double)atomic_load(&s->in_flight));
    svc_lock(&s->hub.mu);
    const int watchers = s->hub.watchers;
    svc_unlock(&s->hub.mu);
    gauge(b, "hypic_watchers", "Open Watch streams", (double)watchers);
    size_t leases = 0;
    uint64_t leased = 0;
    svc_lock(&s->mu);
    for (const svc_lease_set *ls = s->leases; ls; ls = ls->next)
        leases += ls->n, leased += ls->bytes;
    svc_unlock(&s->mu);
    gauge(b, "hypic_leases", "Entries held by Lookup leases (lease_ms) until they expire",
          (double)leases);
    gauge(b, "hypic_leased_bytes", "Bytes of the entries Lookup leases hold", (double)leased);
    if (s->tp) {
        hy_tp_stats ts;
        hy_tp_hub_stats(s->tp, &ts);
        gauge(b, "hypic_transport_sessions", "Open bulk transport sessions",
              (double)ts.open_sessions);
        counter(b, "hypic_transport_fallbacks_total",
                "RDMA offers passed over for another transport (no device, or it failed)",
                ts.fallbacks);
        gauge(b, "hypic_transport_rdma_available", "1 when an RDMA device is in use",
              ts.rdma_available ? 1 : 0);
        static const struct {
            const char *name, *help;
            size_t off;
        } k_fam[] = {
            {"hypic_transport_sessions_opened_total", "Sessions opened, by transport",
             offsetof(hy_tp_stats, opened)},
            {"hypic_transport_transfers_total", "Transfers (states, entries), by transport",
             offsetof(hy_tp_stats, transfers)},
            {"hypic_transport_bytes_total", "Bytes delivered, by transport",
             offsetof(hy_tp_stats, bytes)},
            {"hypic_transport_failures_total", "Transfers that failed, by transport",
             offsetof(hy_tp_stats, failures)},
        };
        for (size_t f = 0; f < sizeof k_fam / sizeof k_fam[0]; f++) {
            hy_prom_family(b, k_fam[f].name, "counter", k_fam[f].help);
            const uint64_t *v = (const uint64_t *)((const char *)&ts + k_fam[f].off);
            for (int k = HY_TP_TCP; k < HY_TP_KINDS; k++) {
                snprintf(lab, sizeof lab, "transport=\"%s\"", hy_tp_kind_name((hy_tp_kind)k));
                hy_prom_u64(b, k_fam[f].name, lab, v[k]);
            }
        }
    }
    if (s->router) { /* the scatter workers, summed */
        Hypic__V1__WorkerStats **ws = NULL;
        size_t nws = 0;
        svc_router_stats(s, &ws, &nws);
        double up = 0, in_flight = 0;
        uint64_t built = 0, failed = 0;
        for (size_t i = 0; i < nws; i++) {
            up += ws[i]->up;
            in_flight += ws[i]->in_flight;
            built += ws[i]->segments_built;
            failed += ws[i]->segments_failed;
        }
        svc_router_stats_free(ws, nws);
        gauge(b, "hypic_scatter_workers", "Scatter workers known", (double)nws);
        gauge(b, "hypic_scatter_workers_up", "Scatter workers answering", up);
        gauge(b, "hypic_scatter_in_flight", "Segments sent to workers and not yet back", in_flight);
        counter(b, "hypic_scatter_built_total", "Entries received from workers and verified",
                built);
        counter(b, "hypic_scatter_failed_total",
                "Worker calls that failed or timed out (their segments retried or built inline)",
                failed);
    }

    svc_shadow_row sh[HY_CFG_MAX_MODELS * HY_MODE_COUNT]; /* the quality watch */
    const size_t nsh = svc_shadow_rows(s, sh, sizeof sh / sizeof sh[0]);
    static const struct {
        const char *name, *type, *help;
    } k_sh[] = {
        {"hypic_shadow_compared_total", "counter",
         "Requests reusing entries computed again in full and compared (pic.shadow_rate)"},
        {"hypic_shadow_kl_sum", "counter", "Sum of KL(full || served), nats, over those compared"},
        {"hypic_shadow_kl_max", "gauge", "Largest KL(full || served) seen, nats"},
        {"hypic_shadow_top1_agree_total", "counter",
         "Compared requests whose served first token was the exact one"},
        {"hypic_shadow_over_threshold_total", "counter",
         "Comparisons with KL past pic.shadow_kl_warn"},
        {"hypic_shadow_dropped_total", "counter",
         "Requests drawn for comparison and dropped (the queue full, given way to a request, or "
         "draining)"},
    };
    for (size_t f = 0; nsh && f < sizeof k_sh / sizeof k_sh[0]; f++) {
        hy_prom_family(b, k_sh[f].name, k_sh[f].type, k_sh[f].help);
        for (size_t i = 0; i < nsh; i++) {
            char esc[2 * HY_CFG_NAME_MAX];
            hy_prom_escape(s->models[sh[i].model].name, esc, sizeof esc);
            char slab[sizeof esc + 48];
            snprintf(slab, sizeof slab, "model=\"%s\",mode=\"%s\"", esc, hy_mode_name(sh[i].mode));
            const double v[] = {(double)sh[i].compared,
                                sh[i].kl_sum,
                                sh[i].kl_max,
                                (double)sh[i].top1_agree,
                                (double)sh[i].over_threshold,
                                (double)sh[i].dropped};
            hy_prom_sample(b, k_sh[f].name, slab, v[f]);
        }
    }

    svc_cluster_metrics(s, b); /* cluster mode only */

    hy_store_stats st;
    hy_store_stats_get(s->store, &st);
    per_tier(b, "hypic_tier_entries", "gauge", "Entries with a copy in the tier", st.hbm_entries,
             st.host_entries, st.nvme_entries);
    per_tier(b, "hypic_tier_bytes", "gauge", "Bytes held in the tier", st.hbm_bytes, st.host_bytes,
             st.nvme.live_bytes);
    per_tier(b, "hypic_tier_capacity_bytes", "gauge", "Capacity of the tier (0: absent)",
             st.hbm_capacity, st.arena.capacity, s->cfg.nvme_dir[0] ? s->cfg.nvme_bytes : 0);
    per_tier(b, "hypic_hits_total", "counter", "Entry reads served, by the tier they came from",
             st.hits_hbm, st.hits_host, st.hits_nvme);
    per_tier(b, "hypic_evictions_total", "counter",
             "Victims of the tier's eviction policy (hbm and host victims are demoted when a "
             "lower tier admits them)",
             st.hbm_evictions, st.evictions - st.nvme_evictions, st.nvme_evictions);
    hy_prom_family(b, "hypic_promotions_total", "counter",
                   "Copies brought up to stay: into hbm (device leases), into host (from NVMe)");
    hy_prom_u64(b, "hypic_promotions_total", "tier=\"hbm\"", st.hbm_promotions);
    hy_prom_u64(b, "hypic_promotions_total", "tier=\"host\"", st.promotions);
    hy_prom_family(b, "hypic_demotions_total", "counter",
                   "Copies moved down: out of hbm (to host), out of host (to NVMe)");
    hy_prom_u64(b, "hypic_demotions_total", "tier=\"hbm\"", st.hbm_demotions);
    hy_prom_u64(b, "hypic_demotions_total", "tier=\"host\"", st.demotions);
    counter(b, "hypic_misses_total", "Entry reads that found nothing", st.misses);
    counter(b, "hypic_admissions_total", "Puts admitted to some tier", st.puts - st.puts_dropped);
    counter(b, "hypic_puts_dropped_total", "Puts no tier admitted", st.puts_dropped);
    counter(b, "hypic_expired_total", "Entries removed at their TTL", st.expired);
    counter(b, "hypic_invalidated_total", "Entries removed by Invalidate", st.invalidated);
    counter(b, "hypic_checksum_failures_total", "Entries whose NVMe bytes failed their checksums",
            st.checksum_failures);
    gauge(b, "hypic_entries", "Entries in the store", (double)st.entries);
    gauge(b, "hypic_uptime_seconds", "Seconds since the daemon started",
          (double)(hy_wall_ns() - s->started_ns) / 1e9);
}

void svc_refused(void *app, const hy_rpc_method *m, hy_rpc_code code, const char *msg)
{
    hy_svc *s = app;
    const size_t idx = m ? (size_t)(m - hy_rpc_methods) : SVC_UNKNOWN_METHOD;
    atomic_fetch_add(&s->met.calls[idx][(int)code < SVC_CODES ? (int)code : HY_RPC_UNKNOWN], 1);
    hy_log(HY_LOG_WARN, "rpc method=%s tenant=- status=%s refused before any handler error=\"%s\"",
           m ? m->name : "(unknown)", hy_rpc_code_name(code) ? hy_rpc_code_name(code) : "?", msg);
}

bool svc_ready(void *app, char *why, size_t cap)
{
    hy_svc *s = app;
    if (s->draining) {
        snprintf(why, cap, "draining: shutting down");
        return false;
    }
    if (!s->ready) {
        snprintf(why, cap, "starting");
        return false;
    }
    return true;
}
