/*
 * The executor against transformers' pure-PyTorch Qwen3-Next / Qwen3.5 path.
 * Fixtures (tests/fixtures/golden/<model>/, made by tools/golden/) hold tiny
 * random checkpoints and, for prefills of 1, 63, 64, 65 and 300 tokens, the
 * last logits, every linear layer's final delta-rule state and conv state; and
 * a 64-token prefill followed by 20 decode steps. Each is checked with the
 * chunked and the recurrent delta rule, and with prefills split in steps.
 * Limits: logits max abs error 1e-4, states 1e-4 relative.
 *
 * Four fixtures pin how config.json is read (docs/config-keys.md): a Qwen3.5
 * MoE config saying norm_topk_prob false (its router renormalises anyway),
 * one without shared_expert_intermediate_size (512 by default), and two
 * nested vision-language checkpoints whose top-level tie_word_embeddings
 * disagrees with text_config's (the top level decides). Besides the checks
 * above, each must open with the reading transformers makes, and the other
 * reading must move the logits far beyond the tolerance, so the fixture
 * really tells the two apart.
 */
#include "model_internal.h"
#include "test_util.h"

#include <string.h>

static const char *k_models[] = {"qwen3next_moe",
                                 "qwen3next_dense",
                                 "qwen35_dense",
                                 "qwen35_moe",
                                 "qwen35_moe_norm_topk_false",
                                 "qwen35_moe_shared_default",
                                 "qwen35_nested_tie_top",
                                 "qwen35_moe_nested_untie_top",
                                 "olmo_hybrid",
                                 "olmo_hybrid_defaults",
                                 "olmo_hybrid_nope",
                                 "minimax",
                                 "minimax_defaults",
                                 "kimi_linear",
                                 "kimi_linear_qlora",
                                 "nemotron_h",
                                 "nemotron_h_legacy",
                                 "nemotron_h_dtclamp",
                                 "ling",
                                 "ling_b"};
static const int k_lengths[] = {1, 63, 64, 65, 300};

typedef struct golden {
    hy_model *m;
    hy_st *g;
} golden;

static int open_golden(const char *name, golden *out)
{
    char dir[512], path[600];
    hy_err e = {0};
    snprintf(dir, sizeof dir, "%s/golden/%s", HY_FIXTURES_DIR, name);
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    if (hy_model_open(&out->m, dir, &e) || hy_st_open_file(&out->g, path, &e)) {
        fprintf(stderr, "\n  %s: %s\n", name, e.msg);
        return -1;
    }
    return 0;
}

static void close_golden(golden *g)
{
    hy_model_close(g->m);
    hy_st_close(g->g);
}

/* Reads a golden tensor as floats (tokens as int32). */
static const hy_st_tensor *gt(golden *g, const char *fmt, int a, int b)
{
    char name[128];
    snprintf(name, sizeof name, fmt, a, b);
    const hy_st_tensor *t = hy_st_find(g->g, name);
    if (!t) fprintf(stderr, "\n  golden tensor '%s' missing\n", name);
    return t;
}

/* Compares every linear layer's S and conv state against the fixture. */
static double check_states(golden *g, hy_state *st, const char *sfmt, const char *cfmt, int n,
                           double *conv_err)
{
    const hy_model_config *c = hy_model_cfg(g->m);
    const int C = hy_config_conv_dim(c), K1 = c->conv_kernel - 1;
    double worst = 0, cworst = 0;
    float *conv_t = malloc((size_t)C * K1 * sizeof(float));
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        const hy_st_tensor *ts = gt(g, sfmt, n, i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ts);
        CU_ASSERT_EQUAL_FATAL((size_t)ts->numel, (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv);
        worst = fmax(worst, hy_rel_diff(hy_state_S(st, i), ts->data, (size_t)ts->numel));
        if (cfmt && K1 > 0) { /* lightning layers have no conv */
            const hy_st_tensor *tc = gt(g, cfmt, n, i);
            CU_ASSERT_PTR_NOT_NULL_FATAL(tc);
            CU_ASSERT_EQUAL_FATAL((size_t)tc->numel, (size_t)C * K1);
            const float *ours = hy_state_conv(st, i); /* [K-1][C] */
            for (int ch = 0; ch < C; ch++)
                for (int j = 0; j < K1; j++) conv_t[ch * K1 + j] = ours[j * C + ch];
            cworst = fmax(cworst, hy_rel_diff(conv_t, tc->data, (size_t)C * K1));
        }
    }
    free(conv_t);
    if (conv_err) *conv_err = cworst;
    return worst;
}

/* Prefill checks for one model under one executor configuration. */
static void run_prefills(const char *name, hy_gdn_mode mode, int max_batch)
{
    golden g = {0};
    CU_ASSERT_EQUAL_FATAL(open_golden(name, &g), 0);
    const hy_model_config *c = hy_model_cfg(g.m);
    hy_err e = {0};
    hy_exec *ex = NULL;
    hy_state *st = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g.m, max_batch, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g.m, &st, &e), 0);
    hy_exec_set_gdn_mode(ex, mode);
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    for (size_t li = 0; li < sizeof k_lengths / sizeof *k_lengths; li++) {
        const int n = k_lengths[li];
        const hy_st_tensor *tt = gt(&g, "prefill.%d.tokens", n, 0);
        const hy_st_tensor *tl = gt(&g, "prefill.%d.logits", n, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(tt);
        CU_ASSERT_PTR_NOT_NULL_FATAL(tl);
        CU_ASSERT_EQUAL_FATAL(tt->numel, n);
        hy_state_reset(st);
        int rc = hy_exec_prefill(ex, st, tt->data, (size_t)n, logits, &e);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        double lerr = hy_max_abs_diff(logits, tl->data, (size_t)c->vocab), cerr = 0;
        double serr = check_states(&g, st, "prefill.%d.state.%d", "prefill.%d.conv.%d", n, &cerr);
        printf("\n    %-16s %-9s batch %-4d n=%-3d logits %.2e  S %.2e  conv %.2e", name,
               mode == HY_GDN_CHUNKED ? "chunked" : "recurrent", max_batch, n, lerr, serr, cerr);
        CU_ASSERT(lerr <= 1e-4);
        CU_ASSERT(serr <= 1e-4);
        CU_ASSERT(cerr <= 1e-4);
    }
    free(logits);
    hy_state_free(st);
    hy_exec_free(ex);
    close_golden(&g);
}

static void run_decode(const char *name)
{
    golden g = {0};
    CU_ASSERT_EQUAL_FATAL(open_golden(name, &g), 0);
    const hy_model_config *c = hy_model_cfg(g.m);
    hy_err e = {0};
    hy_exec *ex = NULL;
    hy_state *st = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g.m, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g.m, &st, &e), 0);
    const hy_st_tensor *tt = gt(&g, "decode.tokens", 0, 0), *tl = gt(&g, "decode.logits", 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tt);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tl);
    CU_ASSERT_EQUAL_FATAL(tt->numel, 84);
    CU_ASSERT_EQUAL_FATAL(tl->numel, 21 * (int64_t)c->vocab);
    const int32_t *tok = tt->data;
    const float *ref = tl->data;
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, st, tok, 64, logits, &e), 0);
    double worst = hy_max_abs_diff(logits, ref, (size_t)c->vocab);
    for (int s = 1; s <= 20; s++) {
        CU_ASSERT_EQUAL_FATAL(hy_exec_decode(ex, st, tok[63 + s], logits, &e), 0);
        worst = fmax(worst, hy_max_abs_diff(logits, ref + (size_t)s * c->vocab, (size_t)c->vocab));
    }
    CU_ASSERT_EQUAL(hy_state_pos(st), 84);
    double serr = check_states(&g, st, "decode.state.%.0d%d", NULL, 0, NULL);
    printf("\n    %-16s prefill 64 + 20 decode steps: logits %.2e  S %.2e", name, worst, serr);
    CU_ASSERT(worst <= 1e-4);
    CU_ASSERT(serr <= 1e-4);
    free(logits);
    hy_state_free(st);
    hy_exec_free(ex);
    close_golden(&g);
}

#define MODEL_TESTS(i)                                                                             \
    static void t_chunked_##i(void)                                                                \
    {                                                                                              \
        run_prefills(k_models[i], HY_GDN_CHUNKED, 0);                                              \
    }                                                                                              \
    static void t_recurrent_##i(void)                                                              \
    {                                                                                              \
        run_prefills(k_models[i], HY_GDN_RECURRENT, 0);                                            \
    }                                                                                              \
    static void t_split_##i(void)                                                                  \
    {                                                                                              \
        run_prefills(k_models[i], HY_GDN_CHUNKED, 50);                                             \
    }                                                                                              \
    static void t_decode_##i(void)                                                                 \
    {                                                                                              \
        run_decode(k_models[i]);                                                                   \
    }
MODEL_TESTS(0)
MODEL_TESTS(1)
MODEL_TESTS(2)
MODEL_TESTS(3)
MODEL_TESTS(4)
MODEL_TESTS(5)
MODEL_TESTS(6)
MODEL_TESTS(7)
MODEL_TESTS(8)
MODEL_TESTS(9)
MODEL_TESTS(10)
MODEL_TESTS(11)
MODEL_TESTS(12)
MODEL_TESTS(13)
MODEL_TESTS(14)
MODEL_TESTS(15)
MODEL_TESTS(16)
MODEL_TESTS(17)
MODEL_TESTS(18)
MODEL_TESTS(19)

/* Last logits of the fixture's 64-token prefill under m as it is now; returns
 * the max abs error against transformers. */
static double prefill64_error(golden *g)
{
    const hy_model_config *c = hy_model_cfg(g->m);
    hy_err e = {0};
    hy_exec *ex = NULL;
    hy_state *st = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g->m, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g->m, &st, &e), 0);
    const hy_st_tensor *tt = gt(g, "prefill.%d.tokens", 64, 0),
                       *tl = gt(g, "prefill.%d.logits", 64, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tt);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tl);
    float *logits = malloc((size_t)c->vocab * sizeof(float));
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, st, tt->data, 64, logits, &e), 0);
    double err = hy_max_abs_diff(logits, tl->data, (size_t)c->vocab);
    free(logits);
    hy_state_free(st);
    hy_exec_free(ex);
    return err;
}

/* Checks the reading transformers makes (already asserted by the model's
 * cases) and that `wrong`, the other reading applied to the loaded model,
 * misses transformers' logits by far more than the tolerance. */
static void reading_matters(int i, const char *what, void (*wrong)(hy_model *))
{
    golden g = {0};
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[i], &g), 0);
    double right = prefill64_error(&g);
    wrong(g.m);
    double other = prefill64_error(&g);
    printf("\n    %-28s %s: logits error %.2e; read the other way %.2e", k_models[i], what, right,
           other);
    CU_ASSERT(right <= 1e-4);
    CU_ASSERT(other > 1e-2);
    close_golden(&g);
}

static void no_renormalising(hy_model *m)
{
    m->cfg.norm_topk = false;
}

static void no_shared_expert(hy_model *m)
{
    for (int i = 0; i < m->cfg.n_layers; i++) m->layers[i].shared.inter = 0;
}

static void head_tied(hy_model *m)
{
    m->lm_head = m->embed;
}

static void t_norm_topk_ignored(void)
{
    golden g = {0};
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[4], &g), 0);
    CU_ASSERT_TRUE(hy_model_cfg(g.m)->norm_topk); /* config.json says false */
    close_golden(&g);
    reading_matters(4, "norm_topk_prob false ignored", no_renormalising);
}

static void t_shared_default(void)
{
    golden g = {0};
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[5], &g), 0);
    CU_ASSERT_EQUAL(hy_model_cfg(g.m)->shared_intermediate, 512); /* key absent */
    close_golden(&g);
    reading_matters(5, "shared expert width 512 by default", no_shared_expert);
}

static void t_tied_by_top_level(void)
{
    golden g = {0};
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[6], &g), 0); /* no lm_head.weight in the file */
    CU_ASSERT_TRUE(hy_model_cfg(g.m)->tie_embeddings);
    CU_ASSERT_PTR_EQUAL(g.m->lm_head, g.m->embed);
    CU_ASSERT_PTR_NULL(hy_st_find(g.g, "lm_head.weight"));
    close_golden(&g);
    double err;
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[6], &g), 0);
    err = prefill64_error(&g);
    printf("\n    %-28s tied by the top-level flag: logits error %.2e", k_models[6], err);
    CU_ASSERT(err <= 1e-4);
    close_golden(&g);
}

static void t_untied_by_top_level(void)
{
    golden g = {0};
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[7], &g), 0);
    CU_ASSERT_FALSE(hy_model_cfg(g.m)->tie_embeddings); /* text_config says true */
    CU_ASSERT_PTR_NOT_EQUAL(g.m->lm_head, g.m->embed);
    close_golden(&g);
    reading_matters(7, "untied by the top-level flag", head_tied);
}

/* OLMo-Hybrid's readings: beta = 2·sigmoid(b) exactly when
 * linear_allow_neg_eigval (true in olmo_hybrid, false in
 * olmo_hybrid_defaults), and attention layers that normalise their outputs. */
static void beta_flipped(hy_model *m)
{
    m->cfg.lin_beta_scale = m->cfg.lin_beta_scale == 2.0f ? 1.0f : 2.0f;
}

static void pre_normed(hy_model *m)
{
    for (int i = 0; i < m->cfg.n_layers; i++) m->cfg.layer_post_norm[i] = false;
}

static void t_olmo_neg_eigval(void)
{
    golden g;
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[8], &g), 0);
    CU_ASSERT_EQUAL(hy_model_cfg(g.m)->lin_beta_scale, 2.0f);
    close_golden(&g);
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[9], &g), 0);
    CU_ASSERT_EQUAL(hy_model_cfg(g.m)->lin_beta_scale, 1.0f);
    close_golden(&g);
    reading_matters(8, "beta up to 2", beta_flipped);
    reading_matters(9, "beta up to 1", beta_flipped);
}

static void t_olmo_post_norm(void)
{
    golden g;
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[8], &g), 0);
    const hy_model_config *c = hy_model_cfg(g.m);
    for (int i = 0; i < c->n_layers; i++)
        CU_ASSERT_EQUAL(c->layer_post_norm[i], c->layer_kind[i] == HY_LAYER_ATTENTION);
    close_golden(&g);
    reading_matters(8, "post-normalised attention layers", pre_normed);
}

/* MiniMax's residuals: x = alpha·norm(x) + beta·f(norm(x)), with the
 * fixture's six factors distinct; read as a plain residual, or with one
 * layer kind's factors for the other, the logits move far. */
static void plain_residual(hy_model *m)
{
    m->cfg.scaled_residual = false;
}

static void factors_swapped(hy_model *m)
{
    const float a = m->cfg.lin_alpha, b = m->cfg.lin_beta;
    m->cfg.lin_alpha = m->cfg.attn_alpha, m->cfg.lin_beta = m->cfg.attn_beta;
    m->cfg.attn_alpha = a, m->cfg.attn_beta = b;
}

static void t_minimax_residuals(void)
{
    golden g;
    CU_ASSERT_EQUAL_FATAL(open_golden(k_models[11], &g), 0);
    const hy_model_config *c = hy_model_cfg(g.m);
    CU_ASSERT(c->scaled_residual && c->attn_alpha == 1.7f && c->attn_beta == 0.9f);
    CU_ASSERT(c->lin_alpha == 1.3f && c->lin_beta == 1.1f);
    CU_ASSERT(c->mlp_alpha == 1.5f && c->mlp_beta == 0.8f);
    close_golden(&g);
    reading_matters(11, "residual alpha, beta", plain_residual);
    reading_matters(11, "factors by layer kind", factors_swapped);
}

/* The MLA fixtures (Kimi-Linear, Ling) in each way an MLA layer can attend
 * (hy_mla_mode): every prefill length and the 20 decode steps, forced
 * expanded, forced into the latent space, and in a mix — a prefill in the
 * latent space continued by expanded decode steps, which first expand what
 * it left. */
static void t_mla_both_ways(void)
{
    static const hy_mla_mode modes[3] = {HY_MLA_EXPANDED, HY_MLA_ABSORBED, HY_MLA_AUTO};
    static const char *const names[3] = {"expanded", "latent", "latent, then expanded"};
    int fixtures = 0;
    for (size_t mi = 0; mi < sizeof k_models / sizeof *k_models; mi++) {
        golden g = {0};
        CU_ASSERT_EQUAL_FATAL(open_golden(k_models[mi], &g), 0);
        const hy_model_config *c = hy_model_cfg(g.m);
        if (!c->mla) {
            close_golden(&g);
            continue;
        }
        fixtures++;
        hy_err e = {0};
        hy_exec *ex = NULL;
        hy_state *st = NULL;
        CU_ASSERT_EQUAL_FATAL(hy_exec_new(g.m, 0, &ex, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_state_new(g.m, &st, &e), 0);
        float *logits = malloc((size_t)c->vocab * sizeof(float));
        for (int m = 0; m < 3; m++) {
            double worst = 0;
            hy_exec_set_mla_mode(ex, modes[m == 2 ? 1 : m]);
            for (size_t li = 0; li < sizeof k_lengths / sizeof *k_lengths; li++) {
                const int n = k_lengths[li];
                const hy_st_tensor *tt = gt(&g, "prefill.%d.tokens", n, 0),
                                   *tl = gt(&g, "prefill.%d.logits", n, 0);
                hy_state_reset(st);
                CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, st, tt->data, (size_t)n, logits, &e), 0);
                CU_ASSERT_EQUAL(hy_exec_mla_mode_used(ex), modes[m == 2 ? 1 : m]);
                worst = fmax(worst, hy_max_abs_diff(logits, tl->data, (size_t)c->vocab));
            }
            const hy_st_tensor *tt = gt(&g, "decode.tokens", 0, 0),
                               *tl = gt(&g, "decode.logits", 0, 0);
            const int32_t *tok = tt->data;
            hy_state_reset(st);
            CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(ex, st, tok, 64, logits, &e), 0);
            worst = fmax(worst, hy_max_abs_diff(logits, tl->data, (size_t)c->vocab));
            if (m == 2) hy_exec_set_mla_mode(ex, HY_MLA_EXPANDED);
            for (int s = 1; s <= 20; s++) {
                CU_ASSERT_EQUAL_FATAL(hy_exec_decode(ex, st, tok[63 + s], logits, &e), 0);
                worst = fmax(worst,
                             hy_max_abs_diff(logits, (const float *)tl->data + (size_t)s * c->vocab,
                                             (size_t)c->vocab));
            }
            printf("\n    %-16s MLA %-22s every prefill and 20 decode steps: logits %.2e",
                   k_models[mi], names[m], worst);
            CU_ASSERT(worst <= 1e-4);
        }
        free(logits);
        hy_state_free(st);
        hy_exec_free(ex);
        close_golden(&g);
    }
    CU_ASSERT(fixtures >= 4); /* kimi_linear, kimi_linear_qlora, ling, ling_b */
}

#define MODEL_CASES(i)                                                                             \
    {"prefill_chunked", t_chunked_##i}, {"prefill_recurrent", t_recurrent_##i},                    \
        {"prefill_in_steps_of_50", t_split_##i},                                                   \
    {                                                                                              \
        "prefill_then_decode", t_decode_##i                                                        \
    }

int main(void)
{
    static const hy_test_case cases[] = {
        MODEL_CASES(0),
        MODEL_CASES(1),
        MODEL_CASES(2),
        MODEL_CASES(3),
        MODEL_CASES(4),
        MODEL_CASES(5),
        MODEL_CASES(6),
        MODEL_CASES(7),
        MODEL_CASES(8),
        MODEL_CASES(9),
        MODEL_CASES(10),
        MODEL_CASES(11),
        MODEL_CASES(12),
        MODEL_CASES(13),
        MODEL_CASES(14),
        MODEL_CASES(15),
        MODEL_CASES(16),
        MODEL_CASES(17),
        MODEL_CASES(18),
        MODEL_CASES(19),
        {"qwen3_5_moe: norm_topk_prob false is ignored", t_norm_topk_ignored},
        {"qwen3_5_moe: shared expert width defaults to 512", t_shared_default},
        {"nested: tied by the top-level flag", t_tied_by_top_level},
        {"nested: untied by the top-level flag", t_untied_by_top_level},
        {"olmo_hybrid: beta up to 2 with linear_allow_neg_eigval", t_olmo_neg_eigval},
        {"olmo_hybrid: attention layers normalise their outputs", t_olmo_post_norm},
        {"minimax: the residuals' alpha and beta", t_minimax_residuals},
        {"MLA expanded, in the latent space, and the one after the other", t_mla_both_ways},
        {NULL, NULL}};
    return hy_test_main("golden_vs_transformers", cases);
}
