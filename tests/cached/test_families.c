/*
 * Every hybrid family hypic-cached runs, served at once by one daemon (its
 * tiny preset of each: tiny for Qwen3-Next, tiny-olmo for OLMo-Hybrid,
 * tiny-minimax for MiniMax, tiny-kimi for Kimi-Linear, tiny-nemotron for
 * Nemotron-H, tiny-ling for Ling) and
 * held, model by model, to what the executor computes in this process from
 * the same checkpoint:
 *   - Warm builds the cacheable documents and reports the short one
 *     uncacheable; again, they are cached; Lookup finds them;
 *   - Prefill in mode full delivers, over shared memory, the state this test
 *     computes token by token, and the top-5 next tokens with their
 *     probabilities; mode pic over the warmed documents recomputes only the
 *     seams and the query, and its top-5 are those of the executor's own pic
 *     over entries it builds itself;
 *   - GetEntry, PutEntry and Inspect round-trip an entry whose sections are
 *     the family's (per linear layer T, S and the conv tail; per attention
 *     layer K and V, or MLA's latent and shared key); Invalidate by model
 *     empties that model only.
 */
#include "hy_model.h"
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <math.h>

static char g_tmp[128];
static hy_daemon g_d;
static hyc *g_c;

static const char *const k_models[] = {"tiny",      "tiny-olmo",     "tiny-minimax",
                                       "tiny-kimi", "tiny-nemotron", "tiny-ling"};
#define N_MODELS (sizeof k_models / sizeof *k_models)

static const char *k_config = "listen: 127.0.0.1:0\n"
                              "http_listen: 127.0.0.1:0\n"
                              "models: [{name: tiny, path: var/models/tiny},\n"
                              "         {name: tiny-olmo, path: var/models/tiny-olmo},\n"
                              "         {name: tiny-minimax, path: var/models/tiny-minimax},\n"
                              "         {name: tiny-kimi, path: var/models/tiny-kimi},\n"
                              "         {name: tiny-nemotron, path: var/models/tiny-nemotron},\n"
                              "         {name: tiny-ling, path: var/models/tiny-ling}]\n"
                              "tiers: {host: {bytes: 64M}}\n"
                              "executor: {threads: 2}\n"
                              "transport: {max_buffer: 64M}\n"
                              "log: {requests: false}\n";

static uint32_t g_query[6] = {12, 24, 36, 48, 60, 72};

/* The daemon's checkpoint of `name`, opened here. */
typedef struct local {
    hy_model *m;
    hy_exec *x;
    hy_state *st;
    float *logits;
} local;

static void local_open(local *l, const char *name)
{
    char dir[300];
    hy_err e = {0};
    snprintf(dir, sizeof dir, "%s/var/models/%s", g_tmp, name);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&l->m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(l->m, 0, &l->x, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(l->m, &l->st, &e), 0);
    l->logits = malloc((size_t)hy_model_cfg(l->m)->vocab * sizeof(float));
}

static void local_close(local *l)
{
    free(l->logits);
    hy_state_free(l->st);
    hy_exec_free(l->x);
    hy_model_close(l->m);
}

static void segment_ids(const segs *s, size_t i, int32_t *out)
{
    for (size_t j = 0; j < s->tk[i].n_ids; j++) out[j] = (int32_t)s->tk[i].ids[j];
}

static void request(segs *s, Hypic__V1__PrefillRequest *rq, int mode)
{
    Hypic__V1__PrefillRequest init = HYPIC__V1__PREFILL_REQUEST__INIT;
    *rq = init;
    rq->model = (char *)g_svc_model;
    rq->n_segments = s->n;
    rq->segments = s->sp;
    rq->n_query = 6;
    rq->query = g_query;
    rq->mode = (Hypic__V1__Mode)mode;
    rq->top_k = 5;
    rq->max_new_tokens = 1;
    /* hits fetched: REUSE_AUTO may recompute one once both costs are measured */
    rq->reuse = HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH;
}

/* The reply's top-5 against softmax(logits): the same tokens, probabilities
 * within 1e-4. Returns the worst probability difference. */
static double check_top(const Hypic__V1__PrefillResponse *r, const float *logits, int vocab)
{
    float mx = logits[0];
    for (int v = 1; v < vocab; v++) mx = fmaxf(mx, logits[v]);
    double z = 0;
    for (int v = 0; v < vocab; v++) z += exp((double)logits[v] - mx);
    double worst = 0;
    CU_ASSERT_EQUAL_FATAL(r->n_top, 5);
    for (size_t k = 0; k < r->n_top; k++) {
        const uint32_t t = r->top[k]->token;
        CU_ASSERT_FATAL(t < (uint32_t)vocab);
        const double p = exp((double)logits[t] - mx) / z;
        worst = fmax(worst, fabs(p - r->top[k]->prob));
        int above = 0; /* tokens the executor ranks above t */
        for (int v = 0; v < vocab; v++) above += logits[v] > logits[t];
        CU_ASSERT_EQUAL(above, (int)k);
    }
    CU_ASSERT(worst <= 1e-4);
    return worst;
}

/* Warm three documents (the third, of 3 tokens, too short for a body where
 * the model has a conv: K − 1 = 3; cached like the others without one), then
 * again; then Lookup. keys[0..1] receive the first two entries' keys. */
static void warm_and_lookup(const local *l, uint8_t keys[2][32])
{
    const bool conv = hy_model_cfg(l->m)->conv_kernel > 1;
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 0, 300);
    segs_doc(&s, 1, 200);
    segs_doc(&s, 2, 3);
    warm_out w;
    CU_ASSERT_EQUAL_FATAL(warm(g_c, &s, &w, &st), 0);
    CU_ASSERT_EQUAL(w.states[0], HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT);
    CU_ASSERT_EQUAL(w.states[1], HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT);
    CU_ASSERT_EQUAL(w.states[2], conv ? HYPIC__V1__WARM_PROGRESS__STATE__STATE_UNCACHEABLE
                                      : HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT);
    memcpy(keys[0], w.keys[0], 32);
    memcpy(keys[1], w.keys[1], 32);
    CU_ASSERT_EQUAL(warm(g_c, &s, &w, &st), 0);
    CU_ASSERT_EQUAL(w.states[0], HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED);
    Hypic__V1__LookupResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(lookup(g_c, &s, 0, &r, &st), 0);
    CU_ASSERT_EQUAL(r->n_segments, 3);
    CU_ASSERT(r->segments[0]->hit && r->segments[1]->hit && r->segments[2]->hit == !conv);
    CU_ASSERT_EQUAL(memcmp(r->segments[0]->key.data, keys[0], 32), 0);
    hyc_free(r);
}

/* Mode full through a shared-memory session: the state and the top-5. */
static void full_state(local *l)
{
    const hy_model_config *c = hy_model_cfg(l->m);
    hyc_status st;
    hyc_session *ss = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_session_open(g_c, "shm", 32u << 20, &ss, &st), 0);
    segs s = {0};
    segs_doc(&s, 1, 200);
    segs_doc(&s, 0, 300);
    Hypic__V1__PrefillRequest rq;
    request(&s, &rq, HYPIC__V1__MODE__MODE_FULL);
    Hypic__V1__PrefillResponse *r = NULL;
    int rc = hyc_prefill_state(g_c, ss, 0, &rq, &r, &st);
    if (rc) printf("\n  %s: prefill_state: %s", g_svc_model, st.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    hy_err e = {0};
    hy_state_reset(l->st);
    for (size_t i = 0; i < s.n; i++) {
        int32_t t[600];
        segment_ids(&s, i, t);
        CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(l->x, l->st, t, s.tk[i].n_ids, NULL, &e), 0);
    }
    int32_t q[6];
    for (int j = 0; j < 6; j++) q[j] = (int32_t)g_query[j];
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(l->x, l->st, q, 6, l->logits, &e), 0);
    const double ptop = check_top(r, l->logits, c->vocab);
    const Hypic__V1__Delivery *d = r->state;
    CU_ASSERT_EQUAL(d->position, (uint64_t)hy_state_pos(l->st));
    hy_state_tensor lay[2 * HY_MAX_LAYERS];
    uint64_t total;
    const int n = hy_state_layout(c, hy_state_pos(l->st), lay, &total);
    CU_ASSERT_EQUAL_FATAL(d->n_tensors, (size_t)n);
    double worst = 0;
    for (int i = 0; i < n; i++) {
        const float *want = hy_state_part_data(l->st, &lay[i]);
        CU_ASSERT_EQUAL(d->tensors[i]->bytes, lay[i].bytes);
        if (!want || !lay[i].bytes) continue;
        worst =
            fmax(worst, hy_rel_diff((const float *)(hyc_session_buffer(ss) + d->tensors[i]->offset),
                                    want, lay[i].bytes / 4));
    }
    printf("\n    %-10s full: state vs this process %.1e, top-5 probabilities %.1e", g_svc_model,
           worst, ptop);
    CU_ASSERT(worst <= 1e-4);
    hyc_free(r);
    hyc_session_close(ss);
}

/* Mode pic over the warmed documents, against the executor's own pic over
 * entries built here the way Warm builds them (each from the empty state, in
 * the daemon's default representation). */
static void pic_against_local(local *l)
{
    const hy_model_config *c = hy_model_cfg(l->m);
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 1, 200);
    segs_doc(&s, 0, 300);
    Hypic__V1__PrefillRequest rq;
    request(&s, &rq, HYPIC__V1__MODE__MODE_PIC);
    Hypic__V1__PrefillResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_prefill(g_c, &rq, &r, &st), 0);
    CU_ASSERT_EQUAL(r->segments[0]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    CU_ASSERT_EQUAL(r->segments[1]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    CU_ASSERT_EQUAL(r->tokens_computed, 2 * HY_SEAM_DEFAULT + 6);
    hy_err e = {0};
    int32_t ids[2][600];
    hy_segment seg[2];
    hy_entry *ent[2] = {NULL, NULL};
    for (size_t i = 0; i < 2; i++) {
        segment_ids(&s, i, ids[i]);
        hy_state_reset(l->st);
        CU_ASSERT_EQUAL_FATAL(hy_entry_build(l->x, l->st, ids[i], s.tk[i].n_ids, HY_SEAM_DEFAULT,
                                             HY_TEST_DEFAULT_REPR, NULL, &ent[i], &e),
                              0);
        seg[i] = (hy_segment){ids[i], s.tk[i].n_ids, ent[i]};
    }
    int32_t q[6];
    for (int j = 0; j < 6; j++) q[j] = (int32_t)g_query[j];
    hy_request lr = {
        .segs = seg, .nsegs = 2, .query = q, .nq = 6, .mode = HY_MODE_PIC, .W = HY_SEAM_DEFAULT};
    hy_result res = {0};
    CU_ASSERT_EQUAL_FATAL(hy_combine(l->x, l->st, &lr, l->logits, &res, &e), 0);
    printf("\n    %-10s pic: 2 hits, %llu tokens computed; top-5 vs this process's pic %.1e",
           g_svc_model, (unsigned long long)r->tokens_computed, check_top(r, l->logits, c->vocab));
    for (int i = 0; i < 2; i++) hy_entry_free(ent[i]);
    hyc_free(r);
}

/* The entry's sections are the family's; it survives GetEntry and PutEntry. */
static void entry_round_trip(const local *l, const uint8_t *key)
{
    const hy_model_config *c = hy_model_cfg(l->m);
    hyc_status st;
    void *b = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(get_entry(g_c, key, &b, &n, &st), 0);
    Hypic__V1__PutEntryResponse *pr = NULL;
    CU_ASSERT_EQUAL(put_entry(g_c, b, n, &pr, &st), 0);
    if (pr) CU_ASSERT_EQUAL(memcmp(pr->key.data, key, 32), 0);
    hyc_free(pr);
    Hypic__V1__InspectResponse *ir = NULL;
    CU_ASSERT_EQUAL_FATAL(inspect(g_c, key, true, &ir, &st), 0);
    size_t want = 1;                      /* the tokens */
    for (int i = 0; i < c->n_layers; i++) /* T, S, tail; K, V; nothing for an MLP alone */
        want += c->layer_kind[i] == HY_LAYER_LINEAR      ? 3
                : c->layer_kind[i] == HY_LAYER_ATTENTION ? 2
                                                         : 0;
    CU_ASSERT_EQUAL(ir->n_sections, want);
    CU_ASSERT_STRING_EQUAL(ir->meta->model, g_svc_model);
    CU_ASSERT_EQUAL(ir->meta->bytes, n);
    CU_ASSERT(ir->verified);
    printf("\n    %-10s entry of 300 tokens: %zu bytes, %zu sections, verified", g_svc_model, n,
           ir->n_sections);
    hyc_free(ir);
    free(b);
}

static void test_every_family(void)
{
    uint8_t keys[N_MODELS][2][32];
    for (size_t m = 0; m < N_MODELS; m++) {
        g_svc_model = k_models[m];
        local l;
        local_open(&l, k_models[m]);
        warm_and_lookup(&l, keys[m]);
        full_state(&l);
        pic_against_local(&l);
        entry_round_trip(&l, keys[m][0]);
        local_close(&l);
    }
    /* one model's entries are not another's: invalidating the first leaves
     * the others' */
    hyc_status st;
    Hypic__V1__InvalidateRequest rq = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    rq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_MODEL;
    rq.model = (char *)k_models[0];
    Hypic__V1__InvalidateResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_invalidate(g_c, &rq, &r, &st), 0);
    CU_ASSERT(r->removed >= 2);
    hyc_free(r);
    void *b = NULL;
    size_t n = 0;
    g_svc_model = k_models[0];
    CU_ASSERT_EQUAL(get_entry(g_c, keys[0][0], &b, &n, &st), HYC_NOT_FOUND);
    free(b);
    b = NULL;
    for (size_t m = 1; m < N_MODELS; m++) {
        g_svc_model = k_models[m];
        CU_ASSERT_EQUAL(get_entry(g_c, keys[m][0], &b, &n, &st), 0);
        free(b);
        b = NULL;
    }
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_families_", g_tmp, sizeof g_tmp)) return 1;
    if (hy_daemon_start(&g_d, g_tmp, k_config)) {
        hy_test_rmtree(g_tmp);
        return 1;
    }
    g_c = connect_as(&g_d, NULL);
    static const hy_test_case cases[] = {
        {"every family through the service", test_every_family},
        {NULL, NULL},
    };
    int rc = hy_test_main("families", cases);
    hyc_close(g_c);
    if (!hy_daemon_stop(&g_d)) {
        fprintf(stderr, "hypic-cached did not stop cleanly on SIGTERM\n");
        rc = 1;
    }
    hy_test_rmtree(g_tmp);
    return rc;
}
