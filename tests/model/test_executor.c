/*
 * Executor behaviour on generated checkpoints (tiny and tiny-moe): a prefill
 * split into pieces and single-token decodes equals one prefill; a copied
 * state continues exactly like the original; bad input is refused without
 * touching the state; generated checkpoints are deterministic per seed; an
 * executor keeps working when the caller raises the OpenMP thread count
 * after creating it; the per-operation profile adds up to the calls' wall
 * time and matches the config's GEMM FLOPs.
 */
#include "model_internal.h"
#include "test_util.h"

#include <omp.h>
#include <string.h>
#include <unistd.h>

static char g_tmp[64];

static void make_model(const char *preset, uint64_t seed, const char *name, char *dir, size_t n)
{
    hy_err e = {0};
    snprintf(dir, n, "%s/%s", g_tmp, name);
    int rc = hy_model_init(preset, seed, dir, "F32", &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static int32_t *random_tokens(int n, int vocab, uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(hy_rng_next(&r) % (uint64_t)vocab);
    return t;
}

static double state_diff(hy_state *a, hy_state *b, const hy_model_config *c)
{
    double worst = 0;
    for (int i = 0; i < c->n_layers; i++)
        if (c->layer_kind[i] == HY_LAYER_LINEAR)
            worst = fmax(worst, hy_rel_diff(hy_state_S(a, i), hy_state_S(b, i),
                                            (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv));
    return worst;
}

/* A generated model with an executor, two states and two logits buffers. */
typedef struct pair {
    hy_model *m;
    hy_exec *ex;
    hy_state *a, *b;
    float *la, *lb;
} pair;

static const hy_model_config *open_pair(pair *p, const char *preset, uint64_t seed,
                                        const char *name)
{
    char dir[128];
    hy_err e = {0};
    make_model(preset, seed, name, dir, sizeof dir);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&p->m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(p->m, 0, &p->ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(p->m, &p->a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(p->m, &p->b, &e), 0);
    const hy_model_config *c = hy_model_cfg(p->m);
    p->la = malloc((size_t)c->vocab * 4);
    p->lb = malloc((size_t)c->vocab * 4);
    return c;
}

static void close_pair(pair *p)
{
    free(p->la), free(p->lb);
    hy_state_free(p->a), hy_state_free(p->b);
    hy_exec_free(p->ex);
    hy_model_close(p->m);
}

static void split_equals_whole(const char *preset)
{
    pair p;
    const hy_model_config *c = open_pair(&p, preset, 3, preset);
    hy_exec *ex = p.ex;
    hy_state *a = p.a, *b = p.b;
    float *la = p.la, *lb = p.lb;
    hy_err e = {0};
    const int n = 200;
    int32_t *tok = random_tokens(n, c->vocab, 11);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, a, tok, n, la, &e), 0);
    const int cuts[] = {0, 1, 64, 65, 66, 135, 200};
    for (int i = 0; i + 1 < 7; i++) {
        const int len = cuts[i + 1] - cuts[i];
        int rc = len == 1 ? hy_exec_decode(ex, b, tok[cuts[i]], lb, &e)
                          : hy_exec_prefill(ex, b, tok + cuts[i], (size_t)len, lb, &e);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
    }
    double le = hy_max_abs_diff(lb, la, (size_t)c->vocab), se = state_diff(a, b, c);
    printf("\n    %s: pieces vs whole: logits %.1e, S %.1e", preset, le, se);
    CU_ASSERT(le <= 1e-4);
    CU_ASSERT(se <= 1e-5);
    CU_ASSERT_EQUAL(hy_state_pos(a), n);
    CU_ASSERT_EQUAL(hy_state_pos(b), n);
    free(tok);
    close_pair(&p);
}

static void test_split_tiny(void)
{
    split_equals_whole("tiny");
}

static void test_split_moe(void)
{
    split_equals_whole("tiny-moe");
}

static void test_copy_continues_identically(void)
{
    pair p;
    const hy_model_config *c = open_pair(&p, "tiny", 4, "copy");
    hy_exec *ex = p.ex;
    hy_state *a = p.a, *b = p.b;
    float *la = p.la, *lb = p.lb;
    hy_err e = {0};
    int32_t *tok = random_tokens(400, c->vocab, 5);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, a, tok, 300, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_copy(b, a, &e), 0);
    CU_ASSERT_EQUAL(hy_state_pos(b), 300);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, a, tok + 300, 100, la, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, b, tok + 300, 100, lb, &e), 0);
    CU_ASSERT(memcmp(la, lb, (size_t)c->vocab * 4) == 0);
    /* reset returns to the empty prefix */
    hy_state_reset(b);
    CU_ASSERT_EQUAL(hy_state_pos(b), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, b, tok, 300, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, b, tok + 300, 100, lb, &e), 0);
    CU_ASSERT(memcmp(la, lb, (size_t)c->vocab * 4) == 0);
    free(tok);
    close_pair(&p);
}

/* A state that served a long context gives its K/V back to `keep` rows
 * (never below its position), an executor its scratch and RoPE table, and
 * both still compute the same (MLA layers' per-head expansion too:
 * tiny-kimi). */
static void trim_continues(const char *preset)
{
    pair p;
    char name[32];
    snprintf(name, sizeof name, "trim-%s", preset);
    const hy_model_config *c = open_pair(&p, preset, 4, name);
    hy_err e = {0};
    int32_t *tok = random_tokens(1200, c->vocab, 9);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.a, tok, 1100, p.la, &e), 0);
    CU_ASSERT(hy_state_capacity(p.a) >= 1100);
    hy_state_trim(p.a, 64); /* not below its 1100 positions */
    CU_ASSERT(hy_state_capacity(p.a) >= 1100);
    hy_state_reset(p.a);
    hy_state_trim(p.a, 64);
    CU_ASSERT_EQUAL(hy_state_capacity(p.a), 64);
    hy_state_trim(p.a, 0);
    CU_ASSERT_EQUAL(hy_state_capacity(p.a), 0);
    hy_exec_trim(p.ex, 0); /* its scratch and RoPE table too */
    /* grown again from nothing: the same logits as a state never trimmed */
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.a, tok, 1000, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.a, tok + 1000, 200, p.la, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.b, tok, 1000, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.b, tok + 1000, 200, p.lb, &e), 0);
    CU_ASSERT(memcmp(p.la, p.lb, (size_t)c->vocab * 4) == 0);
    /* trimmed to a size between, with its rows kept: continues the same */
    hy_state_reset(p.a);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.a, tok, 300, NULL, &e), 0);
    hy_state_trim(p.a, 0); /* keeps its 300 positions */
    CU_ASSERT_EQUAL(hy_state_capacity(p.a), 300);
    hy_exec_trim(p.ex, 100); /* RoPE's table cut below the state's positions */
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.a, tok + 300, 900, p.la, &e), 0);
    hy_state_reset(p.b);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.b, tok, 300, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.b, tok + 300, 900, p.lb, &e), 0);
    CU_ASSERT(memcmp(p.la, p.lb, (size_t)c->vocab * 4) == 0);
    free(tok);
    close_pair(&p);
}

static void test_trim_tiny(void)
{
    trim_continues("tiny");
}

static void test_trim_kimi(void)
{
    trim_continues("tiny-kimi");
}

static void test_bad_input_leaves_state(void)
{
    char dir[128], dir2[128];
    make_model("tiny", 5, "bad", dir, sizeof dir);
    make_model("tiny", 6, "other", dir2, sizeof dir2);
    hy_err e = {0};
    hy_model *m, *m2;
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m2, dir2, &e), 0);
    const hy_model_config *c = hy_model_cfg(m);
    hy_exec *ex;
    hy_state *a, *other;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &a, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m2, &other, &e), 0);
    int32_t tok[5] = {3, 4, 5, 6, 7};
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, a, tok, 5, NULL, &e), 0);
    const int lin = 0;
    size_t SS = (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv;
    float *before = malloc(SS * 4);
    memcpy(before, hy_state_S(a, lin), SS * 4);

    int32_t bad[3] = {3, c->vocab, 4};
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, a, bad, 3, NULL, &e), HY_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "token 1"));
    bad[1] = -1;
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, a, bad, 3, NULL, &e), HY_ERANGE);
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, a, tok, 0, NULL, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, other, tok, 5, NULL, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_state_copy(a, other, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_state_pos(a), 5);
    CU_ASSERT(memcmp(before, hy_state_S(a, lin), SS * 4) == 0);
    hy_exec *ex2 = NULL;
    CU_ASSERT_EQUAL(hy_exec_new(m, -1, &ex2, &e), HY_ERANGE);
    CU_ASSERT_PTR_NULL(ex2);
    free(before);
    hy_state_free(a), hy_state_free(other);
    hy_exec_free(ex);
    hy_model_close(m), hy_model_close(m2);
}

/* The executor's per-thread scratch (attention scores, delta-rule chunks)
 * has one slot per OpenMP thread; a caller that raises the thread count after
 * hy_exec_new must get more slots, not threads writing past the last one
 * (which AddressSanitizer reports as a heap overflow). */
static void test_more_threads_than_at_creation(void)
{
    pair p;
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    const hy_model_config *c = open_pair(&p, "tiny", 7, "threads");
    hy_err e = {0};
    const int n = 700; /* several attention blocks and delta-rule chunks */
    int32_t *tok = random_tokens(n, c->vocab, 12);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.a, tok, n, p.la, &e), 0);
    omp_set_num_threads(4);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(p.ex, p.b, tok, n, p.lb, &e), 0);
    omp_set_num_threads(before);
    double le = hy_max_abs_diff(p.lb, p.la, (size_t)c->vocab);
    printf("\n    1 thread vs 4 threads on an executor made with 1: logits %.1e", le);
    CU_ASSERT(le <= 1e-4);
    free(tok);
    close_pair(&p);
}

/* GEMM FLOPs of prefilling n tokens in steps of B, derived from the config
 * alone: each projection 2·rows·in·out, the routed experts 6·H·I per routed
 * row (n·top_k rows in all, however the router splits them), the lm_head on
 * the last token. */
static double expected_gemm_flops(const hy_model_config *c, int n)
{
    const double H = c->hidden, nn = n;
    const double Kd = (double)c->lin_k_heads * c->lin_dk, Vd = (double)c->lin_v_heads * c->lin_dv;
    const double Qd = (double)c->n_heads * c->head_dim, KV = (double)c->n_kv_heads * c->head_dim;
    double f = 2.0 * H * c->vocab;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR)
            f += 2 * nn * H * (2 * Kd + 2 * Vd + 2 * c->lin_v_heads) + 2 * nn * Vd * H;
        else
            f += 2 * nn * H * (2 * Qd + 2 * KV) + 2 * nn * Qd * H;
        if (c->layer_moe[i])
            f += 2 * nn * H * c->n_experts + 6 * nn * c->top_k * H * c->moe_intermediate +
                 6 * nn * H * c->shared_intermediate;
        else
            f += 6 * nn * H * c->intermediate;
    }
    return f;
}

/* hy_exec_profile: off by default; on, the kinds add up to the calls' wall
 * time, each kind of op is counted once per layer and step, the GEMM FLOPs
 * match the config, the results are bit-identical to an unprofiled run, and
 * a second executor's calls leave the profile alone. */
static void profile_adds_up(const char *preset)
{
    pair p;
    const hy_model_config *c = open_pair(&p, preset, 8, preset);
    hy_err e = {0};
    hy_exec *ex;
    const int n = 300, B = 128, steps = (n + B - 1) / B; /* steps of 128, 128, 44 */
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(p.m, B, &ex, &e), 0);
    int32_t *tok = random_tokens(n, c->vocab, 13);
    hy_exec_prof pr;

    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, p.a, tok, n, p.la, &e), 0);
    hy_exec_profile(ex, &pr);
    CU_ASSERT_EQUAL(pr.tokens, 0);
    CU_ASSERT_EQUAL(pr.total_s, 0.0);

    hy_state_reset(p.a);
    hy_exec_set_profiling(ex, true);
    const double t0 = hy_now_s();
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, p.a, tok, n, p.lb, &e), 0);
    const double wall = hy_now_s() - t0;
    hy_exec_profile(ex, &pr);
    CU_ASSERT(memcmp(p.la, p.lb, (size_t)c->vocab * 4) == 0); /* timing changes no result */

    double sum = 0;
    for (int k = 0; k < HY_EXEC_OP_COUNT; k++) {
        CU_ASSERT(pr.seconds[k] >= 0);
        sum += pr.seconds[k];
    }
    int lin = 0, att = 0, moe = 0;
    for (int i = 0; i < c->n_layers; i++) {
        lin += c->layer_kind[i] == HY_LAYER_LINEAR;
        att += c->layer_kind[i] == HY_LAYER_ATTENTION;
        moe += c->layer_moe[i];
    }
    const double want = expected_gemm_flops(c, n);
    printf("\n    %s: kinds sum %.3f ms, total %.3f ms, caller's wall %.3f ms; GEMM %.0f FLOP "
           "(config: %.0f)",
           preset, sum * 1e3, pr.total_s * 1e3, wall * 1e3, pr.gemm_flops, want);
    CU_ASSERT(fabs(sum - pr.total_s) <= 1e-9 * fmax(1.0, pr.total_s));
    CU_ASSERT(pr.total_s > 0 && pr.total_s <= wall);
    CU_ASSERT(pr.total_s >= 0.5 * wall); /* only a call and a return lie outside */
    CU_ASSERT_EQUAL(pr.tokens, n);
    CU_ASSERT_EQUAL(pr.calls[HY_EXEC_OP_OTHER], 1);
    CU_ASSERT_EQUAL(pr.gemm_flops, want); /* integers below 2^53: exact */
    CU_ASSERT_EQUAL(pr.calls[HY_EXEC_OP_DELTA_RULE], (int64_t)lin * steps);
    CU_ASSERT_EQUAL(pr.calls[HY_EXEC_OP_CONV], (int64_t)lin * steps);
    CU_ASSERT_EQUAL(pr.calls[HY_EXEC_OP_ATTENTION], (int64_t)att * steps);
    CU_ASSERT_EQUAL(pr.calls[HY_EXEC_OP_MOE_ROUTING] > 0, moe > 0);
    if (!moe) /* two projections per mixer and per MLP, and the lm_head */
        CU_ASSERT_EQUAL(pr.calls[HY_EXEC_OP_GEMM], (int64_t)4 * c->n_layers * steps + 1);

    /* another executor on the same model, profiling or not, is separate */
    hy_exec *other;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(p.m, B, &other, &e), 0);
    hy_exec_set_profiling(other, true);
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(other, p.b, tok, n, NULL, &e), 0);
    hy_exec_prof again;
    hy_exec_profile(ex, &again);
    CU_ASSERT(memcmp(&again, &pr, sizeof pr) == 0);
    hy_exec_free(other);

    /* a refused call adds nothing; reset clears; off stops counting */
    int32_t bad = -1;
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, p.a, &bad, 1, NULL, &e), HY_ERANGE);
    hy_exec_profile(ex, &again);
    CU_ASSERT(memcmp(&again, &pr, sizeof pr) == 0);
    hy_exec_profile_reset(ex);
    hy_exec_set_profiling(ex, false);
    CU_ASSERT_EQUAL_FATAL(hy_exec_decode(ex, p.a, tok[0], NULL, &e), 0);
    hy_exec_profile(ex, &again);
    CU_ASSERT_EQUAL(again.tokens, 0);
    CU_ASSERT_EQUAL(again.gemm_flops, 0.0);
    CU_ASSERT_STRING_EQUAL(hy_exec_op_name(HY_EXEC_OP_DELTA_RULE), "delta_rule");
    CU_ASSERT_STRING_EQUAL(hy_exec_op_name(HY_EXEC_OP_COUNT), "?");
    free(tok);
    hy_exec_free(ex);
    close_pair(&p);
}

static void test_profile_tiny(void)
{
    profile_adds_up("tiny");
}

static void test_profile_moe(void)
{
    profile_adds_up("tiny-moe");
}

static int file_equal(const char *a, const char *b)
{
    char *x, *y;
    size_t nx, ny;
    if (hy_read_file(a, 1u << 30, &x, &nx, NULL) || hy_read_file(b, 1u << 30, &y, &ny, NULL))
        return -1;
    int eq = nx == ny && memcmp(x, y, nx) == 0;
    hy_free(x), hy_free(y);
    return eq;
}

static void test_init_deterministic(void)
{
    char d1[128], d2[128], d3[128], p1[160], p2[160], p3[160];
    make_model("tiny-moe", 9, "s9a", d1, sizeof d1);
    make_model("tiny-moe", 9, "s9b", d2, sizeof d2);
    make_model("tiny-moe", 10, "s10", d3, sizeof d3);
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    snprintf(p2, sizeof p2, "%s/model.safetensors", d2);
    snprintf(p3, sizeof p3, "%s/model.safetensors", d3);
    CU_ASSERT_EQUAL(file_equal(p1, p2), 1);
    CU_ASSERT_EQUAL(file_equal(p1, p3), 0);
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_model_init("huge", 1, d1, "F32", &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "huge"));
    CU_ASSERT_EQUAL(hy_model_init("tiny", 1, d1, "F8", &e), HY_EINVAL);
    /* the tiny preset stays small enough for tests and the default run */
    char *buf;
    size_t n;
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    CU_ASSERT_EQUAL_FATAL(hy_read_file(p1, 1u << 30, &buf, &n, &e), 0);
    hy_free(buf);
    make_model("tiny", 1, "size", d1, sizeof d1);
    snprintf(p1, sizeof p1, "%s/model.safetensors", d1);
    CU_ASSERT_EQUAL_FATAL(hy_read_file(p1, 1u << 30, &buf, &n, &e), 0);
    hy_free(buf);
    CU_ASSERT(n < 2u << 20);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_exec_", g_tmp, sizeof g_tmp)) return 1;
    static const hy_test_case cases[] = {
        {"pieces_and_decodes_equal_one_prefill", test_split_tiny},
        {"pieces_equal_one_prefill_moe", test_split_moe},
        {"copied_state_continues_identically", test_copy_continues_identically},
        {"trimmed_state_gives_back_and_continues", test_trim_tiny},
        {"trimmed_state_gives_back_and_continues_mla", test_trim_kimi},
        {"bad_input_leaves_state_untouched", test_bad_input_leaves_state},
        {"more_threads_than_at_creation", test_more_threads_than_at_creation},
        {"profile_adds_up", test_profile_tiny},
        {"profile_adds_up_moe", test_profile_moe},
        {"generated_checkpoints_deterministic", test_init_deterministic},
        {NULL, NULL},
    };
    int rc = hy_test_main("executor", cases);
    hy_test_rmtree(g_tmp);
    return rc;
}
