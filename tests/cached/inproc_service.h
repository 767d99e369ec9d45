/*
 * The service in the test's own process, as fuzz_service and
 * test_alloc_faults run it: svc_open on a fresh `tiny` model, a small host
 * tier, one executor thread, and segments of token ids to warm and ask
 * about; calls go through hy_rpc_call_local into svc_front_door (the front
 * door, the handlers, the store and the codec, without gRPC).
 */
#ifndef HY_TEST_INPROC_SERVICE_H
#define HY_TEST_INPROC_SERVICE_H

#include "hy_model.h"
#include "hy_rpc.h"
#include "service_internal.h"

#include <stdio.h>
#include <string.h>

/* Generates `tiny` under dir/tiny and opens s on it with cfg (filled here
 * from the defaults; the caller may adjust limits before, see below: cfg's
 * fields other than the model, the host tier, the threads and the log
 * stay as the caller set them when keep is true). */
static inline int hy_inproc_open(hy_svc *s, const char *dir, hy_cached_config *cfg, bool keep,
                                 hy_err *e)
{
    char model[300];
    snprintf(model, sizeof model, "%.280s/tiny", dir);
    int rc = hy_model_init("tiny", 1, model, "F32", e);
    if (rc) return rc;
    if (!keep) hy_cached_config_default(cfg);
    snprintf(cfg->models[0].dir, sizeof cfg->models[0].dir, "%s", model);
    snprintf(cfg->models[0].name, sizeof cfg->models[0].name, "tiny");
    cfg->nmodels = 1;
    cfg->host_bytes = 32u << 20;
    cfg->host_policy.capacity = cfg->host_bytes;
    cfg->exec_threads = 1;
    cfg->log_requests = false;
    if ((rc = svc_open(s, cfg, e))) return rc;
    s->ready = true;
    return HY_OK;
}

/* n segments of 20, 30, 40 … token ids (at most 40 each), tokens and
 * messages in the caller's arrays, sp[i] pointing at sg[i]. */
#define HY_INPROC_SEG_MAX 40
static inline void hy_inproc_segments(int n, uint32_t (*ids)[HY_INPROC_SEG_MAX],
                                      Hypic__V1__Tokens *tk, Hypic__V1__Segment *sg,
                                      Hypic__V1__Segment **sp)
{
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < HY_INPROC_SEG_MAX; i++)
            ids[s][i] = 3 + (uint32_t)((s * 41 + i * 7) % 250);
        Hypic__V1__Tokens ti = HYPIC__V1__TOKENS__INIT;
        tk[s] = ti;
        tk[s].n_ids = (size_t)(20 + 10 * (s % 3));
        tk[s].ids = ids[s];
        Hypic__V1__Segment gi = HYPIC__V1__SEGMENT__INIT;
        sg[s] = gi;
        sg[s].ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
        sg[s].tokens = &tk[s];
        sp[s] = &sg[s];
    }
}

#endif
