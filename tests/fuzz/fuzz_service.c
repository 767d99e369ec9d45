/*
 * fuzz_service: every request that decodes, through the daemon's own
 * handlers — the validation and every path behind it — in-process
 * (hy_rpc_call_local into svc_front_door), against a service on the tiny model
 * with a host tier holding a few warmed entries.
 *
 * Input: as fuzz_request's (byte 0 picks the method; the rest is the
 * request's encoding), so the two share seeds. Not run: PutEntry (a client
 * stream, which a local call does not carry) and Watch (it waits for events
 * until its deadline, and a local call has none).
 *
 * Invariants: the handler ends every call with a status that is a gRPC code
 * the API documents, never INTERNAL or UNKNOWN (an input that reaches an
 * unmapped error is a bug: every refusal names its field); the service still
 * answers Health after each input; everything is freed.
 */
#include "fuzz_check.h"
#include "fuzz_util.h"
#include "hy_rpc.h"
#include "service_internal.h"
#include "../cached/inproc_service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static hy_svc g_svc;
static bool g_ready;

static void setup(void)
{
    static char dir[] = "/tmp/hy_fuzz_service_XXXXXX";
    FUZZ_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    hy_err e = {0};
    static hy_cached_config cfg;
    hy_cached_config_default(&cfg);
    cfg.max_tokens = 512; /* each input runs the model at most this far */
    cfg.max_new_tokens = 4;
    cfg.max_segments = 8;
    hy_log_set_level(HY_LOG_ERROR);
    FUZZ_CHECK(hy_inproc_open(&g_svc, dir, &cfg, true, &e) == 0, "svc_open: %s", e.msg);
    /* a few entries, so that keys and segments can hit */
    static uint32_t ids[3][HY_INPROC_SEG_MAX];
    static Hypic__V1__Tokens tk[3];
    static Hypic__V1__Segment sg[3], *sp[3];
    hy_inproc_segments(3, ids, tk, sg, sp);
    Hypic__V1__WarmRequest w = HYPIC__V1__WARM_REQUEST__INIT;
    w.model = "tiny";
    w.n_segments = 3;
    w.segments = sp;
    hy_rpc_status st;
    FUZZ_CHECK(hy_rpc_call_local(&hy_rpc_methods[1], &w.base, svc_front_door, &g_svc, NULL, NULL,
                                 NULL, &st) == 0 &&
                   st.code == HY_RPC_OK,
               "warm: %s", st.msg);
    g_ready = true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_ready) setup();
    if (size < 1) return 0;
    const size_t idx = data[0] % hy_rpc_method_count;
    const hy_rpc_method *m = &hy_rpc_methods[idx];
    if (m->shape == HY_RPC_CLIENT_STREAM || strcmp(m->name, "Watch") == 0) return 0;
    ProtobufCMessage *req = NULL;
    hy_err e = {0};
    if (hy_rpc_unpack(m->request, data + 1, size - 1, 4u << 20, &req, &e) != 0) return 0;
    hy_rpc_status st = {0};
    const int rc = hy_rpc_call_local(m, req, svc_front_door, &g_svc, NULL, NULL, NULL, &st);
    protobuf_c_message_free_unpacked(req, NULL);
    FUZZ_CHECK(rc == 0, "%s: the local call failed (%d)", m->name, rc);
    FUZZ_CHECK(st.code >= 0 && st.code <= 16, "%s: status %d is not a gRPC code", m->name, st.code);
    FUZZ_CHECK(st.code != HY_RPC_INTERNAL && st.code != HY_RPC_UNKNOWN, "%s: %d: %s", m->name,
               st.code, st.msg);
    Hypic__V1__HealthRequest h = HYPIC__V1__HEALTH_REQUEST__INIT;
    FUZZ_CHECK(hy_rpc_call_local(&hy_rpc_methods[12], &h.base, svc_front_door, &g_svc, NULL, NULL,
                                 NULL, &st) == 0 &&
                   st.code == HY_RPC_OK,
               "Health after %s: %s", m->name, st.msg);
    return 0;
}
