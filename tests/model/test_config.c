/*
 * config.json parsing: hy_config_parse, hy_config_load and the loader's
 * table of keys.
 *
 * The parser is fed JSON texts derived from one minimal Qwen3-Next config by
 * patching keys, and must read them as transformers 5.23 does (defaults of
 * each architecture's config class, layer pattern, rotary dims, which layers
 * are MoE, how a nested vision-language config is read; the expected values
 * here are transformers' own, written out independently of the loader's
 * table) and refuse every bad value with a code and a message naming the
 * file, the key and the limit. docs/config-keys.md must hold the loader's
 * table of keys verbatim. Opening whole checkpoints is test_checkpoint_open.c.
 */
#include "config_fixture.h"
#include "model_internal.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>

#define CFG_PATH "/models/x/config.json"

/* A minimal Qwen3-Next config: 6 layers, attention every 3rd, dense
 * (num_experts 0; without the key transformers' default of 512 applies). */
static const char *k_base =
    "{\"model_type\": \"qwen3_next\", \"vocab_size\": 100, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 6, \"intermediate_size\": 64, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"head_dim\": 16, \"linear_num_key_heads\": 2,"
    " \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 8, \"linear_value_head_dim\": 8,"
    " \"full_attention_interval\": 3, \"partial_rotary_factor\": 0.25, \"num_experts\": 0}";

static int parse(const char *patch, const char *drop, hy_model_config *cfg, hy_err *e)
{
    char *text = patched(k_base, patch, drop);
    int rc = hy_config_parse(text, CFG_PATH, cfg, e);
    free(text);
    return rc;
}

static void parse_ok_without(const char *patch, const char *drop, hy_model_config *cfg)
{
    hy_err e = {0};
    int rc = parse(patch, drop, cfg, &e);
    if (rc)
        fprintf(stderr, "\n  patch %s without %s: %s\n", patch ? patch : "(none)",
                drop ? drop : "(none)", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
}

static void parse_ok(const char *patch, hy_model_config *cfg)
{
    parse_ok_without(patch, NULL, cfg);
}

static void parse_ok_text(const char *text, hy_model_config *cfg)
{
    hy_err e = {0};
    int rc = hy_config_parse(text, CFG_PATH, cfg, &e);
    if (rc) fprintf(stderr, "\n  %.300s: %s\n", text, e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
}

/* Parses text expecting failure with code; the message must name the path
 * and contain each non-NULL fragment. */
static void text_fails(const char *text, int code, const char *frag1, const char *frag2)
{
    hy_model_config cfg;
    hy_err e = {0};
    int rc = hy_config_parse(text, CFG_PATH, &cfg, &e);
    CU_ASSERT_EQUAL(rc, code);
    CU_ASSERT_EQUAL(e.code, code);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, CFG_PATH));
    if (frag1) CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, frag1));
    if (frag2) CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, frag2));
    if (rc != code || !strstr(e.msg, CFG_PATH) || (frag1 && !strstr(e.msg, frag1)) ||
        (frag2 && !strstr(e.msg, frag2)))
        fprintf(stderr, "\n  %.200s\n  got %s '%s', wanted %s with '%s' '%s'\n", text,
                hy_strerror(rc), e.msg, hy_strerror(code), frag1 ? frag1 : "", frag2 ? frag2 : "");
}

static void patch_fails(const char *patch, const char *drop, int code, const char *frag1,
                        const char *frag2)
{
    char *text = patched(k_base, patch, drop);
    text_fails(text, code, frag1, frag2);
    free(text);
}

typedef struct parse_job {
    const char *text;
    hy_model_config cfg;
    hy_err err;
} parse_job;

static int run_parse(void *arg)
{
    parse_job *j = arg;
    return hy_config_parse(j->text, CFG_PATH, &j->cfg, &j->err);
}

/* Parses text (must succeed) and returns its log (free with hy_free). */
static char *parse_logged(const char *text, hy_model_config *cfg)
{
    parse_job j = {.text = text};
    int rc;
    char *log = capture_stderr(run_parse, &j, &rc);
    if (rc) fprintf(stderr, "\n  %.300s: %s\n", text, j.err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    *cfg = j.cfg;
    return log;
}

/* --- valid configs ------------------------------------------------------- */

static void test_minimal_qwen3_next(void)
{
    hy_model_config c;
    parse_ok(NULL, &c);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_QWEN3_NEXT);
    CU_ASSERT_STRING_EQUAL(c.model_type, "qwen3_next");
    CU_ASSERT_STRING_EQUAL(c.arch_name, "(none)");
    CU_ASSERT_EQUAL(c.vocab, 100);
    CU_ASSERT_EQUAL(c.hidden, 32);
    CU_ASSERT_EQUAL(c.n_layers, 6);
    CU_ASSERT_EQUAL(c.intermediate, 64);
    CU_ASSERT_EQUAL(c.n_heads, 4);
    CU_ASSERT_EQUAL(c.n_kv_heads, 2);
    CU_ASSERT_EQUAL(c.head_dim, 16);
    CU_ASSERT_EQUAL(c.lin_k_heads, 2);
    CU_ASSERT_EQUAL(c.lin_v_heads, 4);
    CU_ASSERT_EQUAL(c.lin_dk, 8);
    CU_ASSERT_EQUAL(c.lin_dv, 8);
    /* defaults of Qwen3NextConfig */
    CU_ASSERT_EQUAL(c.conv_kernel, 4);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 10000.0, 0);
    CU_ASSERT(c.rms_eps == 1e-6f);
    CU_ASSERT_FALSE(c.tie_embeddings);
    CU_ASSERT_EQUAL(c.n_experts, 0);
    /* interval 3 over 6 layers: attention at 2 and 5 */
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_EQUAL(c.layer_kind[i], i == 2 || i == 5 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR);
        CU_ASSERT_FALSE(c.layer_moe[i]);
    }
    CU_ASSERT_EQUAL(c.rotary_dim, 4); /* 16 x 0.25 */
    CU_ASSERT_EQUAL(hy_config_conv_dim(&c), 2 * 2 * 8 + 4 * 8);
}

static void test_layer_pattern_from_interval(void)
{
    hy_model_config c;
    /* the default interval is 4 */
    parse_ok_without("{\"num_hidden_layers\": 8}", "full_attention_interval", &c);
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(c.layer_kind[i], i == 3 || i == 7 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR);
    parse_ok("{\"num_hidden_layers\": 5, \"full_attention_interval\": 1}", &c);
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(c.layer_kind[i], HY_LAYER_ATTENTION);
    parse_ok("{\"num_hidden_layers\": 5, \"full_attention_interval\": 7}", &c);
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(c.layer_kind[i], HY_LAYER_LINEAR);
    patch_fails("{\"full_attention_interval\": 0}", NULL, HY_ERANGE,
                "'full_attention_interval' = 0 is outside [1, 256]", NULL);
}

static void test_rotary_dim(void)
{
    hy_model_config c;
    /* top level */
    parse_ok("{\"partial_rotary_factor\": 0.5, \"rope_theta\": 1000000}", &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 8);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 1e6, 0);
    /* absent: 0.25 */
    parse_ok_without("{\"head_dim\": 64}", "partial_rotary_factor", &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 16);
    /* rope_parameters (transformers 5) wins over the top level */
    parse_ok("{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000,"
             " \"partial_rotary_factor\": 1.0}}",
             &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 16);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 1e7, 0);
    /* rope_scaling with the default type and the old "type" key */
    parse_ok("{\"rope_scaling\": {\"type\": \"default\", \"partial_rotary_factor\": 0.5}}", &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 8);
    parse_ok("{\"rope_scaling\": null, \"rope_parameters\": null}", &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 4);
    /* fewer than 2 or an odd number of rotary dims */
    patch_fails("{\"partial_rotary_factor\": 0.0625}", NULL, HY_EINVAL, "gives 1 rotary dims",
                "even number >= 2");
    patch_fails("{\"head_dim\": 12, \"partial_rotary_factor\": 0.25}", NULL, HY_EINVAL,
                "head_dim 12 x partial_rotary_factor 0.25 gives 3 rotary dims", NULL);
    patch_fails("{\"rope_parameters\": {\"partial_rotary_factor\": 1.5}}", NULL, HY_ERANGE,
                "'partial_rotary_factor' = 1.5 is outside [0, 1]", NULL);
    patch_fails("{\"rope_theta\": 0.5}", NULL, HY_ERANGE, "'rope_theta' = 0.5 is outside", NULL);
    patch_fails("{\"rope_parameters\": \"default\"}", NULL, HY_EINVAL,
                "'rope_parameters' must be an object", NULL);
}

static void test_explicit_layer_types(void)
{
    hy_model_config c;
    /* layer_types overrides full_attention_interval */
    parse_ok("{\"layer_types\": [\"full_attention\", \"linear_attention\", \"linear_attention\","
             " \"full_attention\", \"full_attention\", \"linear_attention\"]}",
             &c);
    static const hy_layer_kind want[] = {HY_LAYER_ATTENTION, HY_LAYER_LINEAR,    HY_LAYER_LINEAR,
                                         HY_LAYER_ATTENTION, HY_LAYER_ATTENTION, HY_LAYER_LINEAR};
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(c.layer_kind[i], want[i]);
    parse_ok("{\"layer_types\": null}", &c); /* null: the interval rule */
    CU_ASSERT_EQUAL(c.layer_kind[2], HY_LAYER_ATTENTION);
    CU_ASSERT_EQUAL(c.layer_kind[0], HY_LAYER_LINEAR);
}

static void test_qwen3_5_text_config(void)
{
    const char *text =
        "{\"architectures\": [\"Qwen3_5ForConditionalGeneration\"], \"model_type\": \"qwen3_5\","
        " \"tie_word_embeddings\": true, \"hidden_size\": 9999,"
        " \"vision_config\": {\"hidden_size\": 1152, \"depth\": 2},"
        " \"text_config\": {\"model_type\": \"qwen3_5_text\", \"vocab_size\": 248320,"
        " \"hidden_size\": 64, \"num_hidden_layers\": 4, \"intermediate_size\": 128,"
        " \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"head_dim\": 32,"
        " \"linear_num_key_heads\": 4, \"linear_num_value_heads\": 8,"
        " \"linear_key_head_dim\": 16, \"linear_value_head_dim\": 16,"
        " \"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\","
        " \"full_attention\"], \"hidden_act\": \"silu\", \"rms_norm_eps\": 1e-6,"
        " \"num_experts\": 8,"
        " \"rope_parameters\": {\"rope_type\": \"default\", \"mrope_section\": [11, 11, 10],"
        " \"mrope_interleaved\": true, \"rope_theta\": 10000000, \"partial_rotary_factor\": "
        "0.25}}}";
    hy_model_config c;
    hy_err e = {0};
    int rc = hy_config_parse(text, CFG_PATH, &c, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_QWEN3_5);
    CU_ASSERT_STRING_EQUAL(c.arch_name, "Qwen3_5ForConditionalGeneration");
    CU_ASSERT_STRING_EQUAL(c.model_type, "qwen3_5_text");
    CU_ASSERT_EQUAL(c.hidden, 64); /* text_config, not the top level */
    CU_ASSERT_EQUAL(c.vocab, 248320);
    CU_ASSERT_EQUAL(c.n_layers, 4);
    CU_ASSERT_TRUE(c.tie_embeddings); /* from the top level */
    CU_ASSERT_EQUAL(c.rotary_dim, 8);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 1e7, 0);
    CU_ASSERT_EQUAL(c.n_experts, 0); /* qwen3_5 is dense whatever num_experts says */
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(c.layer_kind[i], i == 3 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR);
        CU_ASSERT_FALSE(c.layer_moe[i]);
    }

    /* a key text_config lacks takes Qwen3_5TextConfig's default, never the
     * top level's value */
    char *cut = patched(text, NULL, NULL);
    cJSON *root = cJSON_Parse(cut);
    cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "text_config"),
                                            "hidden_size");
    free(cut);
    cut = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    CU_ASSERT_EQUAL_FATAL(hy_config_parse(cut, CFG_PATH, &c, &e), HY_OK);
    CU_ASSERT_EQUAL(c.hidden, 4096);
    free(cut);

    /* the MoE variant: every layer routed, intermediate_size optional */
    const char *moe =
        "{\"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"], \"model_type\": "
        "\"qwen3_5_moe\", \"text_config\": {\"model_type\": \"qwen3_5_moe_text\", \"vocab_size\": "
        "300,"
        " \"hidden_size\": 64, \"num_hidden_layers\": 4, \"num_attention_heads\": 8,"
        " \"num_key_value_heads\": 2, \"head_dim\": 32, \"linear_num_key_heads\": 4,"
        " \"linear_num_value_heads\": 8, \"linear_key_head_dim\": 16,"
        " \"linear_value_head_dim\": 16, \"num_experts\": 8, \"num_experts_per_tok\": 2,"
        " \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 64,"
        " \"decoder_sparse_step\": 2}}";
    rc = hy_config_parse(moe, CFG_PATH, &c, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_QWEN3_5_MOE);
    CU_ASSERT_EQUAL(c.n_experts, 8);
    CU_ASSERT_EQUAL(c.top_k, 2);
    CU_ASSERT_EQUAL(c.moe_intermediate, 32);
    CU_ASSERT_EQUAL(c.shared_intermediate, 64);
    CU_ASSERT_TRUE(c.norm_topk);
    CU_ASSERT_FALSE(c.tie_embeddings);
    for (int i = 0; i < 4; i++) CU_ASSERT_TRUE(c.layer_moe[i]); /* no sparse step here */
}

static void test_moe_layers_as_transformers(void)
{
    static const struct {
        int step;
        const char *only;
        int n_only, only_v[3];
    } cases[] = {
        {2, "[0]", 1, {0}},       {2, "[3]", 1, {3}},
        {1, "[0]", 1, {0}},       {1, "[]", 0, {0}},
        {3, "[2, 4]", 2, {2, 4}}, {1, "null", 0, {0}},
        {7, "[]", 0, {0}},        {1, "[0, 1, 2]", 3, {0, 1, 2}},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char patch[256];
        snprintf(patch, sizeof patch,
                 "{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16,"
                 " \"decoder_sparse_step\": %d, \"mlp_only_layers\": %s}",
                 cases[k].step, cases[k].only);
        hy_model_config c;
        parse_ok(patch, &c);
        bool want[6];
        want_moe(6, 4, cases[k].step, cases[k].only_v, cases[k].n_only, want);
        for (int i = 0; i < 6; i++) {
            if (c.layer_moe[i] != want[i])
                fprintf(stderr, "\n  %s: layer %d moe %d, transformers %d\n", patch, i,
                        c.layer_moe[i], want[i]);
            CU_ASSERT_EQUAL(c.layer_moe[i], want[i]);
        }
        CU_ASSERT_EQUAL(c.n_experts, 4);
        CU_ASSERT_EQUAL(c.top_k, 2);
        CU_ASSERT_EQUAL(c.shared_intermediate, 512); /* Qwen3NextConfig's default */
    }
    /* the brief's example spelled out: step 2, mlp_only [0] -> layers 1, 3, 5 */
    hy_model_config c;
    parse_ok("{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16,"
             " \"decoder_sparse_step\": 2, \"mlp_only_layers\": [0]}",
             &c);
    static const bool w[6] = {false, true, false, true, false, true};
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(c.layer_moe[i], w[i]);
    /* num_experts 0 means dense everywhere, whatever else says */
    parse_ok("{\"num_experts\": 0, \"mlp_only_layers\": [99], \"decoder_sparse_step\": 1}", &c);
    for (int i = 0; i < 6; i++) CU_ASSERT_FALSE(c.layer_moe[i]);
}

/* A small text model of each Qwen3.5 kind, as a JSON object's members. */
#define TEXT35                                                                                     \
    "\"vocab_size\": 100, \"hidden_size\": 32, \"num_hidden_layers\": 4,"                          \
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"                   \
    " \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 8,"     \
    " \"linear_value_head_dim\": 8"
#define MOE35                                                                                      \
    TEXT35 ", \"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16"

/* The four readings where a loader can part from transformers. */
static void test_four_readings(void)
{
    hy_model_config c;
    char *log;
    /* (1) Qwen3_5MoeTopKRouter renormalises whatever config.json says; the key
     * is not a setting of Qwen3_5MoeTextConfig (one log line says it is
     * ignored). Qwen3-Next honours it. */
    log = parse_logged(
        "{\"model_type\": \"qwen3_5_moe_text\", " MOE35 ", \"norm_topk_prob\": false}", &c);
    CU_ASSERT_TRUE(c.norm_topk);
    CU_ASSERT_EQUAL(count_lines(log, "ignoring norm_topk_prob: not a setting of qwen3_5_moe_text"),
                    1);
    hy_free(log);
    log = parse_logged("{\"model_type\": \"qwen3_5_moe\", \"text_config\": {" MOE35
                       ", \"norm_topk_prob\": false}}",
                       &c);
    CU_ASSERT_TRUE(c.norm_topk);
    hy_free(log);
    parse_ok("{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"norm_topk_prob\": false}", &c);
    CU_ASSERT_FALSE(c.norm_topk);
    /* (2) shared_expert_intermediate_size absent: the class default, 512 */
    log = parse_logged("{\"model_type\": \"qwen3_5_moe_text\", " MOE35 "}", &c);
    CU_ASSERT_EQUAL(c.shared_intermediate, 512);
    CU_ASSERT_EQUAL(log[0], '\0'); /* nothing ignored, nothing logged */
    hy_free(log);
    parse_ok(
        "{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"shared_expert_intermediate_size\": "
        "0}",
        &c);
    CU_ASSERT_EQUAL(c.shared_intermediate, 0);
    /* (3) nested: the top-level flag ties, text_config's is not read */
    log = parse_logged("{\"model_type\": \"qwen3_5\", \"tie_word_embeddings\": true,"
                       " \"text_config\": {" TEXT35 ", \"tie_word_embeddings\": false}}",
                       &c);
    CU_ASSERT_TRUE(c.tie_embeddings);
    CU_ASSERT_EQUAL(count_lines(log, "text_config.tie_word_embeddings is false but the top-level "
                                     "flag (true) decides"),
                    1);
    hy_free(log);
    /* (4) and the other way round; absent at the top level it is false */
    parse_ok_text("{\"model_type\": \"qwen3_5_moe\", \"tie_word_embeddings\": false,"
                  " \"text_config\": {" MOE35 ", \"tie_word_embeddings\": true}}",
                  &c);
    CU_ASSERT_FALSE(c.tie_embeddings);
    parse_ok_text("{\"model_type\": \"qwen3_5\", \"text_config\": {" TEXT35
                  ", \"tie_word_embeddings\": true}}",
                  &c);
    CU_ASSERT_FALSE(c.tie_embeddings);
    /* a flat config has one level: its own flag */
    parse_ok_text("{\"model_type\": \"qwen3_5_text\", \"tie_word_embeddings\": true, " TEXT35 "}",
                  &c);
    CU_ASSERT_TRUE(c.tie_embeddings);
}

/* How a composite config is read besides the tie flag. */
static void test_composite_reading(void)
{
    hy_model_config c;
    /* the text class follows the composite's model_type, not text_config's */
    parse_ok_text("{\"model_type\": \"qwen3_5\", \"text_config\": {\"model_type\": "
                  "\"qwen3_5_moe_text\", " MOE35 ", \"intermediate_size\": 64}}",
                  &c);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_QWEN3_5);
    CU_ASSERT_STRING_EQUAL(c.model_type, "qwen3_5_text");
    CU_ASSERT_EQUAL(c.n_experts, 0);
    CU_ASSERT_EQUAL(c.intermediate, 64);
    /* a flat config ignores a text_config key (it is no field of the class) */
    char *log = parse_logged("{\"model_type\": \"qwen3_next\", " TEXT35
                             ", \"intermediate_size\": 64, \"num_experts\": 0,"
                             " \"text_config\": {\"hidden_size\": 8}}",
                             &c);
    CU_ASSERT_EQUAL(c.hidden, 32);
    CU_ASSERT_EQUAL(count_lines(log, "ignoring text_config"), 1);
    hy_free(log);
    log = parse_logged("{\"model_type\": \"qwen3_5_text\", " TEXT35
                       ", \"text_config\": {\"hidden_size\": 8}}",
                       &c);
    CU_ASSERT_EQUAL(c.hidden, 32);
    CU_ASSERT_EQUAL(count_lines(log, "ignoring text_config: not a setting of qwen3_5_text"), 1);
    hy_free(log);
    text_fails("{\"model_type\": \"qwen3_5\", \"text_config\": [1]}", HY_EINVAL,
               "'text_config' must be an object", NULL);
    /* text keys at a composite's top level are not read, and say so once */
    log = parse_logged("{\"model_type\": \"qwen3_5\", \"hidden_size\": 8, \"vocab_size\": 7,"
                       " \"text_config\": {" TEXT35 ", \"intermediate_size\": 64}}",
                       &c);
    CU_ASSERT_EQUAL(c.hidden, 32);
    CU_ASSERT_EQUAL(c.vocab, 100);
    CU_ASSERT_EQUAL(count_lines(log, "ignoring top-level vocab_size, hidden_size"), 1);
    hy_free(log);
}

/* convert_rope_params_to_dict: a non-empty rope_scaling replaces
 * rope_parameters entirely (its missing keys come from the top level). */
static void test_rope_scaling_replaces(void)
{
    hy_model_config c;
    parse_ok("{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 5.0,"
             " \"partial_rotary_factor\": 0.5}, \"rope_scaling\": {\"type\": \"default\","
             " \"rope_theta\": 7.0}}",
             &c);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 7.0, 0);
    CU_ASSERT_EQUAL(c.rotary_dim, 4); /* 0.25 (top-level default), not 0.5 */
    parse_ok("{\"rope_parameters\": {\"rope_theta\": 5.0}, \"rope_scaling\": {}}", &c);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 5.0, 0); /* an empty rope_scaling is no object */
    parse_ok("{\"rope_theta\": 99.0, \"rope_parameters\": {}}", &c);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 99.0, 0);
}

/* --- refusals ---------------------------------------------------------------- */

static void test_not_json(void)
{
    text_fails("{\"model_type\": ", HY_EFORMAT, "not a well-formed JSON object", NULL);
    text_fails("[]", HY_EFORMAT, "not a well-formed JSON object", NULL);
    text_fails("", HY_EFORMAT, "not a well-formed JSON object", NULL);
    text_fails("\"qwen3_next\"", HY_EFORMAT, "not a well-formed JSON object", NULL);
}

/* transformers 5.23's defaults, per config class (configuration_qwen3_next.py,
 * configuration_qwen3_5.py, configuration_qwen3_5_moe.py; rope_theta from
 * RotaryEmbeddingConfigMixin.default_theta, partial_rotary_factor set in each
 * class's __post_init__). */
static const struct {
    const char *model_type;
    hy_arch arch;
    int vocab, hidden, layers, inter, heads, kv, head_dim, lk, lv, dk, dv, conv, experts, top_k,
        moe_inter, shared;
    bool norm_topk;
} k_defaults[] = {
    {"qwen3_next", HY_ARCH_QWEN3_NEXT, 151936, 2048, 48, 5632, 16, 2, 256, 16, 32, 128, 128, 4, 512,
     10, 512, 512, true},
    {"qwen3_5_text", HY_ARCH_QWEN3_5, 248320, 4096, 32, 12288, 16, 4, 256, 16, 32, 128, 128, 4, 0,
     0, 0, 0, false},
    {"qwen3_5_moe_text", HY_ARCH_QWEN3_5_MOE, 248320, 2048, 40, 0, 16, 2, 256, 16, 32, 128, 128, 4,
     256, 8, 512, 512, true},
};

static void check_defaults(const hy_model_config *c, size_t d)
{
    CU_ASSERT_EQUAL(c->arch, k_defaults[d].arch);
    CU_ASSERT_EQUAL(c->vocab, k_defaults[d].vocab);
    CU_ASSERT_EQUAL(c->hidden, k_defaults[d].hidden);
    CU_ASSERT_EQUAL(c->n_layers, k_defaults[d].layers);
    CU_ASSERT_EQUAL(c->intermediate, k_defaults[d].inter);
    CU_ASSERT_EQUAL(c->n_heads, k_defaults[d].heads);
    CU_ASSERT_EQUAL(c->n_kv_heads, k_defaults[d].kv);
    CU_ASSERT_EQUAL(c->head_dim, k_defaults[d].head_dim);
    CU_ASSERT_EQUAL(c->lin_k_heads, k_defaults[d].lk);
    CU_ASSERT_EQUAL(c->lin_v_heads, k_defaults[d].lv);
    CU_ASSERT_EQUAL(c->lin_dk, k_defaults[d].dk);
    CU_ASSERT_EQUAL(c->lin_dv, k_defaults[d].dv);
    CU_ASSERT_EQUAL(c->conv_kernel, k_defaults[d].conv);
    CU_ASSERT_EQUAL(c->n_experts, k_defaults[d].experts);
    if (k_defaults[d].experts) {
        CU_ASSERT_EQUAL(c->top_k, k_defaults[d].top_k);
        CU_ASSERT_EQUAL(c->moe_intermediate, k_defaults[d].moe_inter);
        CU_ASSERT_EQUAL(c->shared_intermediate, k_defaults[d].shared);
        CU_ASSERT_EQUAL(c->norm_topk, k_defaults[d].norm_topk);
    }
    CU_ASSERT(c->rms_eps == 1e-6f);
    CU_ASSERT_DOUBLE_EQUAL(c->rope_theta, 10000.0, 0);
    CU_ASSERT_EQUAL(c->rotary_dim, 64); /* 256 x 0.25 */
    CU_ASSERT_FALSE(c->tie_embeddings);
    for (int i = 0; i < c->n_layers; i++) {
        CU_ASSERT_EQUAL(c->layer_kind[i], (i + 1) % 4 ? HY_LAYER_LINEAR : HY_LAYER_ATTENTION);
        CU_ASSERT_EQUAL(c->layer_moe[i], k_defaults[d].experts > 0);
    }
}

static void test_transformers_defaults(void)
{
    /* a config naming only its model_type is the class's default model */
    for (size_t d = 0; d < sizeof k_defaults / sizeof *k_defaults; d++) {
        char text[96];
        hy_model_config c;
        hy_err e = {0};
        snprintf(text, sizeof text, "{\"model_type\": \"%s\"}", k_defaults[d].model_type);
        int rc = hy_config_parse(text, CFG_PATH, &c, &e);
        if (rc) fprintf(stderr, "\n  %s: %s\n", text, e.msg);
        CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
        CU_ASSERT_STRING_EQUAL(c.model_type, k_defaults[d].model_type);
        check_defaults(&c, d);
    }
    /* so is a composite without text_config: transformers builds the text
     * config from its defaults, and text keys at the top level are not read */
    static const char *const composite[] = {
        "{\"model_type\": \"qwen3_5\", \"hidden_size\": 64, \"vocab_size\": 100}",
        "{\"model_type\": \"qwen3_5_moe\", \"text_config\": null, \"num_experts\": 4}"};
    for (int k = 0; k < 2; k++) {
        hy_model_config c;
        hy_err e = {0};
        CU_ASSERT_EQUAL_FATAL(hy_config_parse(composite[k], CFG_PATH, &c, &e), HY_OK);
        check_defaults(&c, (size_t)(k + 1));
        CU_ASSERT_STRING_EQUAL(c.model_type, k_defaults[k + 1].model_type);
    }
    /* one key at a time, from the minimal Qwen3-Next config */
    static const struct {
        const char *key;
        size_t field;
        int want;
    } one[] = {
        {"vocab_size", offsetof(hy_model_config, vocab), 151936},
        {"hidden_size", offsetof(hy_model_config, hidden), 2048},
        {"intermediate_size", offsetof(hy_model_config, intermediate), 5632},
        {"num_attention_heads", offsetof(hy_model_config, n_heads), 16},
        {"linear_num_value_heads", offsetof(hy_model_config, lin_v_heads), 32},
        {"linear_key_head_dim", offsetof(hy_model_config, lin_dk), 128},
        {"linear_value_head_dim", offsetof(hy_model_config, lin_dv), 128},
        {"head_dim", offsetof(hy_model_config, head_dim), 256},
    };
    for (size_t i = 0; i < sizeof one / sizeof *one; i++) {
        char *text = patched(k_base, NULL, one[i].key);
        hy_model_config c;
        hy_err e = {0};
        int rc = hy_config_parse(text, CFG_PATH, &c, &e);
        if (rc) fprintf(stderr, "\n  without %s: %s\n", one[i].key, e.msg);
        CU_ASSERT_EQUAL(rc, HY_OK);
        CU_ASSERT_EQUAL(*(const int *)((const char *)&c + one[i].field), one[i].want);
        free(text);
    }
    /* a default that breaks a relation is refused like a written value:
     * 16 key heads do not divide 4 value heads */
    patch_fails(NULL, "linear_num_key_heads", HY_EINVAL,
                "linear_num_value_heads 4 is not a multiple of linear_num_key_heads 16", NULL);
    patch_fails(NULL, "model_type", HY_EINVAL, "'model_type' is missing", NULL);
    /* qwen3_next without num_experts is Qwen3NextConfig's default: 512 routed
     * experts, top-10, on every layer (the checkpoint must then hold them) */
    {
        char *text = patched(k_base, NULL, "num_experts");
        hy_model_config c0;
        hy_err e0 = {0};
        CU_ASSERT_EQUAL(hy_config_parse(text, CFG_PATH, &c0, &e0), HY_OK);
        CU_ASSERT_EQUAL(c0.n_experts, 512);
        CU_ASSERT_EQUAL(c0.top_k, 10);
        CU_ASSERT(c0.layer_moe[0] && c0.layer_moe[5]);
        free(text);
    }
    /* intermediate_size 0 is allowed only where no layer is dense */
    patch_fails("{\"intermediate_size\": 0}", NULL, HY_EINVAL,
                "layer 0 has a dense MLP but 'intermediate_size' is 0", NULL);
    patch_fails("{\"intermediate_size\": 0, \"num_experts\": 4, \"num_experts_per_tok\": 2,"
                " \"moe_intermediate_size\": 16, \"decoder_sparse_step\": 2}",
                NULL, HY_EINVAL, "layer 0 has a dense MLP", NULL);
    hy_model_config c;
    parse_ok("{\"intermediate_size\": 0, \"num_experts\": 4, \"num_experts_per_tok\": 2,"
             " \"moe_intermediate_size\": 16}",
             &c); /* every layer routed */
    /* qwen3_5_moe_text routes every layer: transformers ignores mlp_only_layers
     * there, and its class has no intermediate_size */
    const char *moe = "{\"model_type\": \"qwen3_5_moe_text\", \"vocab_size\": 100,"
                      " \"hidden_size\": 32, \"num_hidden_layers\": 4,"
                      " \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                      " \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4,"
                      " \"linear_key_head_dim\": 8, \"linear_value_head_dim\": 8,"
                      " \"head_dim\": 16, \"num_experts\": 4, \"num_experts_per_tok\": 2,"
                      " \"moe_intermediate_size\": 16, \"mlp_only_layers\": [2],"
                      " \"intermediate_size\": 0}";
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_config_parse(moe, CFG_PATH, &c, &e), HY_OK);
    for (int i = 0; i < 4; i++) CU_ASSERT(c.layer_moe[i]);
    CU_ASSERT_EQUAL(c.intermediate, 0);
    /* without num_experts_per_tok its default (8) exceeds the 4 experts */
    char *cut = strdup(moe);
    char *at = strstr(cut, " \"num_experts_per_tok\": 2,");
    memmove(at, at + strlen(" \"num_experts_per_tok\": 2,"),
            strlen(at + strlen(" \"num_experts_per_tok\": 2,")) + 1);
    text_fails(cut, HY_ERANGE,
               "'num_experts_per_tok' = 8 (transformers' default) is outside [1, 4]", NULL);
    free(cut);
    /* qwen3_next: top-10 by default, more than 4 experts; widths 512 */
    patch_fails("{\"num_experts\": 4, \"moe_intermediate_size\": 16}", NULL, HY_ERANGE,
                "'num_experts_per_tok' = 10 (transformers' default) is outside [1, 4]", NULL);
    parse_ok("{\"num_experts\": 4, \"num_experts_per_tok\": 2}", &c);
    CU_ASSERT_EQUAL(c.moe_intermediate, 512);
    CU_ASSERT_EQUAL(c.shared_intermediate, 512);
    /* 0 experts: the routing keys keep their defaults but nothing is routed */
    parse_ok("{\"num_experts\": 0}", &c);
    CU_ASSERT_EQUAL(c.n_experts, 0);
    for (int i = 0; i < 6; i++) CU_ASSERT_FALSE(c.layer_moe[i]);
}

/* null is refused where transformers' strict validation refuses it, and means
 * absent for the Optional fields */
static void test_null(void)
{
    static const char *const refused[] = {
        "vocab_size",        "hidden_size",          "num_hidden_layers",
        "intermediate_size", "num_attention_heads",  "num_key_value_heads",
        "head_dim",          "linear_num_key_heads", "linear_conv_kernel_dim",
        "num_experts",       "rope_theta",           "partial_rotary_factor",
        "rms_norm_eps",      "tie_word_embeddings",  "norm_topk_prob",
        "attention_bias",    "decoder_sparse_step",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char patch[96], want[96];
        snprintf(patch, sizeof patch, "{\"%s\": null}", refused[i]);
        snprintf(want, sizeof want, "'%s' must be", refused[i]);
        patch_fails(patch, NULL, HY_EINVAL, want, "not null");
    }
    patch_fails("{\"layer_types\": null, \"full_attention_interval\": null}", NULL, HY_EINVAL,
                "'full_attention_interval' must be an integer, not null", NULL);
    patch_fails("{\"rope_parameters\": {\"rope_theta\": null}}", NULL, HY_EINVAL,
                "'rope_theta' must be a number, not null", NULL);
    hy_model_config c;
    parse_ok("{\"layer_types\": null, \"rope_parameters\": null, \"rope_scaling\": null}", &c);
    CU_ASSERT_EQUAL(c.layer_kind[2], HY_LAYER_ATTENTION);
    CU_ASSERT_EQUAL(c.rotary_dim, 4);
    parse_ok("{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"mlp_only_layers\": null}", &c);
    for (int i = 0; i < 6; i++) CU_ASSERT_TRUE(c.layer_moe[i]);
}

static void test_wrong_types(void)
{
    patch_fails("{\"hidden_size\": \"32\"}", NULL, HY_EINVAL, "'hidden_size' must be an integer",
                NULL);
    patch_fails("{\"hidden_size\": 32.5}", NULL, HY_EINVAL, "'hidden_size' must be an integer",
                NULL);
    patch_fails("{\"num_hidden_layers\": [6]}", NULL, HY_EINVAL,
                "'num_hidden_layers' must be an integer", NULL);
    patch_fails("{\"vocab_size\": true}", NULL, HY_EINVAL, "'vocab_size' must be an integer", NULL);
    patch_fails("{\"tie_word_embeddings\": 1}", NULL, HY_EINVAL,
                "'tie_word_embeddings' must be true or false", NULL);
    patch_fails("{\"rms_norm_eps\": \"1e-6\"}", NULL, HY_EINVAL, "'rms_norm_eps' must be a number",
                NULL);
    patch_fails("{\"rope_theta\": \"1e6\"}", NULL, HY_EINVAL, "'rope_theta' must be a number",
                NULL);
    patch_fails("{\"layer_types\": \"linear_attention\"}", NULL, HY_EINVAL,
                "'layer_types' must be an array of num_hidden_layers (6) strings", NULL);
    patch_fails("{\"model_type\": 3}", NULL, HY_EINVAL, "'model_type' is missing", NULL);
    patch_fails("{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16,"
                " \"mlp_only_layers\": 0}",
                NULL, HY_EINVAL, "'mlp_only_layers' must be an array", NULL);
    patch_fails("{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16,"
                " \"norm_topk_prob\": \"yes\"}",
                NULL, HY_EINVAL, "'norm_topk_prob' must be true or false", NULL);
}

static void test_out_of_range(void)
{
    static const struct {
        const char *patch, *frag;
    } bad[] = {
        {"{\"hidden_size\": 0}", "'hidden_size' = 0 is outside [1, 65536]"},
        {"{\"hidden_size\": 65537}", "'hidden_size' = 65537 is outside [1, 65536]"},
        {"{\"hidden_size\": -32}", "'hidden_size' = -32 is outside [1, 65536]"},
        {"{\"hidden_size\": 1e300}", "'hidden_size' = 1"},
        {"{\"vocab_size\": 16777217}", "'vocab_size' = 16777217 is outside [1, 16777216]"},
        {"{\"num_hidden_layers\": 257}", "'num_hidden_layers' = 257 is outside [1, 256]"},
        {"{\"num_hidden_layers\": 0}", "'num_hidden_layers' = 0 is outside [1, 256]"},
        {"{\"num_attention_heads\": 1025}", "'num_attention_heads' = 1025 is outside [1, 1024]"},
        {"{\"head_dim\": 1}", "'head_dim' = 1 is outside [2, 4096]"},
        {"{\"linear_conv_kernel_dim\": 17}", "'linear_conv_kernel_dim' = 17 is outside [1, 16]"},
        {"{\"intermediate_size\": -1}", "'intermediate_size' = -1 is outside [0, 1048576]"},
        {"{\"rms_norm_eps\": 2}", "'rms_norm_eps' = 2 is outside [0, 1]"},
        {"{\"rms_norm_eps\": -1e-6}", "'rms_norm_eps' = -1e-06 is outside [0, 1]"},
        {"{\"num_experts\": 4097}", "'num_experts' = 4097 is outside [0, 4096]"},
        {"{\"num_experts\": 4, \"num_experts_per_tok\": 5, \"moe_intermediate_size\": 16}",
         "'num_experts_per_tok' = 5 is outside [1, 4]"},
        {"{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16,"
         " \"decoder_sparse_step\": 0}",
         "'decoder_sparse_step' = 0 is outside [1, 256]"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        patch_fails(bad[i].patch, NULL, HY_ERANGE, bad[i].frag, NULL);
}

static void test_unsupported(void)
{
    patch_fails("{\"model_type\": \"llama\"}", NULL, HY_EUNSUPPORTED,
                "model_type 'llama' is not supported", NULL);
    patch_fails("{\"model_type\": \"Qwen3_Next\"}", NULL, HY_EUNSUPPORTED,
                "model_type 'Qwen3_Next'", NULL);
    patch_fails("{\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4}}", NULL,
                HY_EUNSUPPORTED, "rope_parameters.rope_type 'yarn' is not supported", NULL);
    patch_fails("{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4}}", NULL, HY_EUNSUPPORTED,
                "rope_scaling.rope_type 'yarn'", NULL);
    patch_fails("{\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2}}", NULL,
                HY_EUNSUPPORTED, "'linear' is not supported", NULL);
    patch_fails("{\"rope_parameters\": {\"rope_type\": 3}}", NULL, HY_EUNSUPPORTED,
                "rope_parameters.rope_type", NULL);
    patch_fails("{\"hidden_act\": \"gelu\"}", NULL, HY_EUNSUPPORTED, "hidden_act must be 'silu'",
                NULL);
    patch_fails("{\"attention_bias\": true}", NULL, HY_EUNSUPPORTED,
                "attention_bias true is not supported", NULL);
}

static void test_head_counts(void)
{
    patch_fails("{\"num_attention_heads\": 6, \"num_key_value_heads\": 4}", NULL, HY_EINVAL,
                "num_attention_heads 6 is not a multiple of num_key_value_heads 4", NULL);
    patch_fails("{\"num_attention_heads\": 2, \"num_key_value_heads\": 4}", NULL, HY_EINVAL,
                "num_attention_heads 2 is not a multiple of num_key_value_heads 4", NULL);
    patch_fails("{\"linear_num_value_heads\": 3}", NULL, HY_EINVAL,
                "linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2", NULL);
    hy_model_config c;
    parse_ok("{\"num_attention_heads\": 8, \"num_key_value_heads\": 8}", &c);
    CU_ASSERT_EQUAL(c.n_kv_heads, 8);
}

static void test_bad_layer_types(void)
{
    patch_fails("{\"layer_types\": [\"linear_attention\", \"linear_attention\","
                " \"full_attention\", \"linear_attention\", \"linear_attention\"]}",
                NULL, HY_EINVAL, "'layer_types' must be an array of num_hidden_layers (6)", NULL);
    patch_fails("{\"layer_types\": [\"linear_attention\", \"linear_attention\","
                " \"full_attention\", \"linear_attention\", \"linear_attention\","
                " \"full_attention\", \"full_attention\"]}",
                NULL, HY_EINVAL, "num_hidden_layers (6)", NULL);
    patch_fails("{\"layer_types\": [\"linear_attention\", \"sliding_attention\","
                " \"full_attention\", \"linear_attention\", \"linear_attention\","
                " \"full_attention\"]}",
                NULL, HY_EINVAL, "layer_types[1] must be 'linear_attention' or 'full_attention'",
                NULL);
    patch_fails("{\"layer_types\": [\"linear_attention\", \"linear_attention\","
                " \"full_attention\", \"linear_attention\", \"linear_attention\", 1]}",
                NULL, HY_EINVAL, "layer_types[5]", NULL);
    patch_fails("{\"layer_types\": []}", NULL, HY_EINVAL, "num_hidden_layers (6)", NULL);
}

static void test_mlp_only_layers_values(void)
{
    static const char *const bad[] = {"[1.5]", "[\"0\"]", "[0, true]", "[[1]]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char patch[256];
        snprintf(patch, sizeof patch,
                 "{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16,"
                 " \"mlp_only_layers\": %s}",
                 bad[i]);
        patch_fails(patch, NULL, HY_EINVAL, "mlp_only_layers[", "must be an integer");
    }
    /* transformers tests `layer_idx not in mlp_only_layers`: an integer that is
     * no layer index matches nothing */
    hy_model_config c;
    parse_ok("{\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 16,"
             " \"mlp_only_layers\": [6, -1, 100, 2]}",
             &c);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(c.layer_moe[i], i != 2);
}

static void test_config_load_paths(void)
{
    char dir[128], path[160];
    snprintf(dir, sizeof dir, "%s/cfgload", g_dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    hy_model_config c;
    hy_err e = {0};
    snprintf(path, sizeof path, "%s/config.json", dir);
    CU_ASSERT_EQUAL(hy_config_load(dir, &c, &e), HY_ENOTFOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, path));
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(k_base, f);
    fclose(f);
    e = (hy_err){0};
    CU_ASSERT_EQUAL(hy_config_load(dir, &c, &e), HY_OK);
    CU_ASSERT_EQUAL(c.hidden, 32);
    f = fopen(path, "w");
    fputs("{\"model_type\": \"qwen3_next\", \"hidden_size\": \"wide\"}", f);
    fclose(f);
    e = (hy_err){0};
    CU_ASSERT_EQUAL(hy_config_load(dir, &c, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, path)); /* the real path, in the message */
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "'hidden_size'"));
}

/* docs/config-keys.md holds the loader's table of keys verbatim (between its
 * markers), so the documentation cannot drift from the code. */
static void test_doc_table_matches(void)
{
    char *want = malloc(1 << 16), path[512], *doc = NULL;
    int n = hy_config_keys_markdown(want, 1 << 16);
    CU_ASSERT_FATAL(n > 0);
    CU_ASSERT(hy_config_keys_markdown(want, (size_t)n) == HY_ERANGE); /* no room for the NUL */
    CU_ASSERT_EQUAL(hy_config_keys_markdown(want, 1 << 16), n);
    snprintf(path, sizeof path, "%s/../../docs/config-keys.md", HY_FIXTURES_DIR);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_read_file(path, 1u << 20, &doc, NULL, &e), HY_OK);
    static const char begin[] = "<!-- BEGIN keys table: generated from model/config.c -->\n",
                      end[] = "<!-- END keys table -->";
    char *b = strstr(doc, begin), *t = b ? b + strlen(begin) : NULL, *x = t ? strstr(t, end) : NULL;
    CU_ASSERT_PTR_NOT_NULL(x);
    bool same = x && (size_t)(x - t) == (size_t)n && memcmp(t, want, (size_t)n) == 0;
    CU_ASSERT(same);
    if (!same) {
        FILE *f = fopen("config-keys.table.md", "w");
        if (f) {
            fputs(want, f);
            fclose(f);
        }
        fprintf(stderr,
                "\n  %s: the table between the markers differs from model/config.c's; the "
                "expected table is in ./config-keys.table.md\n",
                path);
    }
    hy_free(doc);
    free(want);
}

/* --- OLMo-Hybrid ----------------------------------------------------------- */

/* OlmoHybridConfig's defaults (configuration_olmo_hybrid.py) and what its
 * __post_init__ derives: the linear heads and the KV heads from the query
 * heads, the key width int(0.75 × hidden / heads) and twice that for values,
 * head_dim (read by getattr, not a field) hidden / heads, every fourth layer
 * attending; the modeling file's fixed choices beside them. */
static void test_olmo_defaults(void)
{
    hy_model_config c;
    parse_ok_text("{\"model_type\": \"olmo_hybrid\"}", &c);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_OLMO_HYBRID);
    CU_ASSERT_STRING_EQUAL(c.model_type, "olmo_hybrid");
    CU_ASSERT_EQUAL(c.vocab, 100352);
    CU_ASSERT_EQUAL(c.hidden, 3840);
    CU_ASSERT_EQUAL(c.n_layers, 32);
    CU_ASSERT_EQUAL(c.intermediate, 11008);
    CU_ASSERT_EQUAL(c.n_heads, 30);
    CU_ASSERT_EQUAL(c.n_kv_heads, 30);
    CU_ASSERT_EQUAL(c.head_dim, 128);
    CU_ASSERT_EQUAL(c.lin_k_heads, 30);
    CU_ASSERT_EQUAL(c.lin_v_heads, 30);
    CU_ASSERT_EQUAL(c.lin_dk, 96);
    CU_ASSERT_EQUAL(c.lin_dv, 192);
    CU_ASSERT_EQUAL(c.conv_kernel, 4);
    CU_ASSERT_EQUAL(c.n_experts, 0);
    CU_ASSERT(c.rms_eps == 1e-6f);
    CU_ASSERT(c.lin_norm_eps == 1e-5f);
    CU_ASSERT(c.lin_beta_scale == 2.0f);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 10000.0, 0);
    CU_ASSERT_EQUAL(c.rotary_dim, 128); /* the whole head */
    CU_ASSERT_FALSE(c.tie_embeddings);
    CU_ASSERT_FALSE(c.attn_gate);
    CU_ASSERT(c.qk_norm_flat);
    for (int i = 0; i < c.n_layers; i++) {
        CU_ASSERT_EQUAL(c.layer_kind[i], i % 4 == 3 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR);
        CU_ASSERT_EQUAL(c.layer_post_norm[i], i % 4 == 3);
        CU_ASSERT_FALSE(c.layer_moe[i]);
    }
    /* null is the Optional fields' "derive it" */
    parse_ok_text("{\"model_type\": \"olmo_hybrid\", \"hidden_size\": 50, \"num_attention_heads\": "
                  "4, \"linear_num_key_heads\": null, \"linear_key_head_dim\": null, "
                  "\"num_key_value_heads\": null, \"linear_allow_neg_eigval\": false}",
                  &c);
    CU_ASSERT_EQUAL(c.lin_k_heads, 4);
    CU_ASSERT_EQUAL(c.lin_dk, 9); /* int(9.375) */
    CU_ASSERT_EQUAL(c.lin_dv, 18);
    CU_ASSERT_EQUAL(c.n_kv_heads, 4);
    CU_ASSERT_EQUAL(c.head_dim, 12); /* 50 // 4 */
    CU_ASSERT(c.lin_beta_scale == 1.0f);
    /* given values win; three layers: none is i % 4 == 3, so the last attends */
    parse_ok_text("{\"model_type\": \"olmo_hybrid\", \"num_hidden_layers\": 3, \"head_dim\": 64, "
                  "\"linear_key_head_dim\": 32, \"num_key_value_heads\": 5}",
                  &c);
    CU_ASSERT_EQUAL(c.head_dim, 64);
    CU_ASSERT_EQUAL(c.lin_dk, 32);
    CU_ASSERT_EQUAL(c.lin_dv, 64);
    CU_ASSERT_EQUAL(c.n_kv_heads, 5);
    CU_ASSERT_EQUAL(c.layer_kind[0], HY_LAYER_LINEAR);
    CU_ASSERT_EQUAL(c.layer_kind[1], HY_LAYER_LINEAR);
    CU_ASSERT_EQUAL(c.layer_kind[2], HY_LAYER_ATTENTION);
    /* transformers' head_dim is never null (the attention would have no width) */
    text_fails("{\"model_type\": \"olmo_hybrid\", \"head_dim\": null}", HY_EINVAL, "'head_dim'",
               "not null");
    /* a derived width out of range is named with its rule */
    text_fails("{\"model_type\": \"olmo_hybrid\", \"hidden_size\": 2, \"num_attention_heads\": 4}",
               HY_ERANGE, "'linear_key_head_dim' is not given", "0.75");
    /* validate_architecture: both kinds of layer */
    text_fails("{\"model_type\": \"olmo_hybrid\", \"num_hidden_layers\": 2, \"layer_types\": "
               "[\"linear_attention\", \"linear_attention\"]}",
               HY_EINVAL, "at least one linear_attention and one full_attention", NULL);
    text_fails("{\"model_type\": \"olmo_hybrid\", \"num_hidden_layers\": 1, \"layer_types\": "
               "[\"full_attention\"]}",
               HY_EINVAL, "at least one linear_attention", NULL);
}

/* OLMo-Hybrid's RoPE: the whole head rotates (partial_rotary_factor is not
 * read), and a null base anywhere it is read means no positional encoding. */
static void test_olmo_rope(void)
{
    hy_model_config c;
    parse_ok_text("{\"model_type\": \"olmo_hybrid\", \"rope_parameters\": {\"rope_type\": "
                  "\"default\", \"rope_theta\": 500000.0, \"partial_rotary_factor\": 0.5}}",
                  &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 128);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 500000.0, 0);
    parse_ok_text("{\"model_type\": \"olmo_hybrid\", \"rope_parameters\": {\"rope_type\": "
                  "\"default\", \"rope_theta\": null}}",
                  &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 0);
    parse_ok_text("{\"model_type\": \"olmo_hybrid\", \"rope_theta\": null}", &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 0);
    parse_ok_text("{\"model_type\": \"olmo_hybrid\", \"rope_theta\": null, \"rope_parameters\": "
                  "{\"rope_theta\": 20000.0}}",
                  &c);
    CU_ASSERT_EQUAL(c.rotary_dim, 128);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 20000.0, 0);
    /* Qwen's bases are never null */
    text_fails("{\"model_type\": \"qwen3_next\", \"rope_theta\": null}", HY_EINVAL, "'rope_theta'",
               "not null");
    text_fails("{\"model_type\": \"qwen3_next\", \"rope_parameters\": {\"rope_theta\": null}}",
               HY_EINVAL, "'rope_theta'", "not null");
    /* an odd head cannot rotate whole */
    text_fails("{\"model_type\": \"olmo_hybrid\", \"head_dim\": 7}", HY_EINVAL, "rotary dims",
               NULL);
}

/* --- MiniMax --------------------------------------------------------------- */

/* MiniMaxConfig's defaults (configuration_minimax.py) and its fixed choices:
 * layers alternate from full attention, lightning layers run the attention
 * heads with head_dim keys and values and no conv, every layer routes, the
 * residual factors are 1. */
static void test_minimax_defaults(void)
{
    hy_model_config c;
    parse_ok_text("{\"model_type\": \"minimax\"}", &c);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_MINIMAX);
    CU_ASSERT_EQUAL(c.vocab, 32000);
    CU_ASSERT_EQUAL(c.hidden, 4096);
    CU_ASSERT_EQUAL(c.n_layers, 32);
    CU_ASSERT_EQUAL(c.n_heads, 32);
    CU_ASSERT_EQUAL(c.n_kv_heads, 8);
    CU_ASSERT_EQUAL(c.head_dim, 128); /* null: 4096 / 32 */
    CU_ASSERT_EQUAL(c.lin_kind, HY_LIN_LIGHTNING);
    CU_ASSERT_EQUAL(c.lin_k_heads, 32);
    CU_ASSERT_EQUAL(c.lin_v_heads, 32);
    CU_ASSERT_EQUAL(c.lin_dk, 128);
    CU_ASSERT_EQUAL(c.lin_dv, 128);
    CU_ASSERT_EQUAL(c.conv_kernel, 1);
    CU_ASSERT_EQUAL(c.n_experts, 8);
    CU_ASSERT_EQUAL(c.top_k, 2);
    CU_ASSERT_EQUAL(c.moe_intermediate, 14336);
    CU_ASSERT_EQUAL(c.shared_intermediate, 0);
    CU_ASSERT(c.norm_topk);
    CU_ASSERT(c.rms_eps == 1e-5f);
    CU_ASSERT(c.lin_norm_eps == 1e-6f);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 1e6, 0);
    CU_ASSERT_EQUAL(c.rotary_dim, 128);
    CU_ASSERT_FALSE(c.attn_gate);
    CU_ASSERT_FALSE(c.qk_norm);
    CU_ASSERT(c.scaled_residual);
    CU_ASSERT(c.attn_alpha == 1 && c.attn_beta == 1 && c.lin_alpha == 1 && c.lin_beta == 1);
    CU_ASSERT(c.mlp_alpha == 1 && c.mlp_beta == 1);
    CU_ASSERT_FALSE(c.tie_embeddings);
    for (int i = 0; i < c.n_layers; i++) {
        CU_ASSERT_EQUAL(c.layer_kind[i], i % 2 ? HY_LAYER_LINEAR : HY_LAYER_ATTENTION);
        CU_ASSERT(c.layer_moe[i]);
        CU_ASSERT_FALSE(c.layer_post_norm[i]);
    }
    /* num_experts is num_local_experts' alias; the factors are read; partial
     * rotary is not (the whole head rotates) */
    parse_ok_text("{\"model_type\": \"minimax\", \"num_experts\": 16, \"head_dim\": 64, "
                  "\"linear_attn_alpha_factor\": 3.5565588200778455, \"mlp_beta_factor\": 0.5, "
                  "\"rope_parameters\": {\"rope_theta\": 1e7, \"partial_rotary_factor\": 0.5}}",
                  &c);
    CU_ASSERT_EQUAL(c.n_experts, 16);
    CU_ASSERT_EQUAL(c.lin_dk, 64);
    CU_ASSERT_EQUAL(c.rotary_dim, 64);
    CU_ASSERT(c.lin_alpha == 3.5565588200778455f && c.mlp_beta == 0.5f);
    CU_ASSERT_DOUBLE_EQUAL(c.rope_theta, 1e7, 0);
    parse_ok_text("{\"model_type\": \"minimax\", \"num_experts\": 16, \"num_local_experts\": 4}",
                  &c);
    CU_ASSERT_EQUAL(c.n_experts, 4);
    /* what the executor cannot run, or transformers refuses */
    text_fails("{\"model_type\": \"minimax\", \"sliding_window\": 4096}", HY_EUNSUPPORTED,
               "sliding_window", NULL);
    text_fails("{\"model_type\": \"minimax\", \"num_key_value_heads\": null}", HY_EINVAL,
               "'num_key_value_heads'", "not null");
    text_fails(
        "{\"model_type\": \"minimax\", \"num_local_experts\": 2, \"num_experts_per_tok\": 3}",
        HY_ERANGE, "num_experts_per_tok", NULL);
}

/* KimiLinearConfig's defaults (configuration_kimi_linear.py), its layer lists,
 * its key names with their aliases, and what it or the executor refuses. */
static void test_kimi_defaults(void)
{
    hy_model_config c;
    parse_ok_text("{\"model_type\": \"kimi_linear\"}", &c);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_KIMI_LINEAR);
    CU_ASSERT_EQUAL(c.vocab, 163840);
    CU_ASSERT_EQUAL(c.hidden, 2304);
    CU_ASSERT_EQUAL(c.n_layers, 27);
    CU_ASSERT_EQUAL(c.lin_kind, HY_LIN_KDA);
    CU_ASSERT(c.lin_k_heads == 32 && c.lin_v_heads == 32 && c.lin_dk == 128 && c.lin_dv == 128);
    CU_ASSERT_EQUAL(c.conv_kernel, 4);
    CU_ASSERT(c.mla && c.n_heads == 32 && c.n_kv_heads == 32 && c.q_lora == 0);
    CU_ASSERT(c.kv_lora == 512 && c.qk_nope == 128 && c.qk_rope == 64 && c.v_head == 128);
    CU_ASSERT_EQUAL(c.rotary_dim, 0);
    CU_ASSERT(c.n_experts == 256 && c.top_k == 8 && c.moe_intermediate == 1024);
    CU_ASSERT_EQUAL(c.shared_intermediate, 1024);
    CU_ASSERT(c.router == HY_ROUTER_SIGMOID_GROUPED && c.n_group == 1 && c.topk_group == 1);
    CU_ASSERT(c.routed_scale == 2.446f && c.norm_topk && !c.shared_gated && !c.norm_offset);
    CU_ASSERT_EQUAL(c.intermediate, 9216);
    CU_ASSERT(c.rms_eps == 1e-5f);
    for (int i = 0; i < c.n_layers; i++) { /* the class's own pattern, not the release's */
        CU_ASSERT_EQUAL(c.layer_kind[i],
                        i > 0 && i % 4 == 0 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR);
        CU_ASSERT_EQUAL(c.layer_moe[i], i >= 1);
    }
    /* the release: 1-indexed lists, its head shapes in linear_attn_config; the
     * aliases read where Kimi's own name is absent, Kimi's winning otherwise */
    parse_ok_text(
        "{\"model_type\": \"kimi_linear\", \"num_hidden_layers\": 5, "
        "\"linear_attn_config\": {\"kda_layers\": [1, 3, 4], \"full_attn_layers\": [2, 5], "
        "\"head_dim\": 64, \"num_heads\": 8, \"short_conv_kernel_size\": 3}, "
        "\"linear_head_dim\": 16, \"first_k_dense_replace\": 2, \"num_experts\": 16, "
        "\"num_experts_per_tok\": 3, \"n_shared_experts\": 2, \"n_group\": 4, "
        "\"num_expert_group\": 2, \"topk_group\": 2, \"norm_topk_prob\": false, "
        "\"q_lora_rank\": 48, \"tie_word_embeddings\": true}",
        &c);
    static const hy_layer_kind want[5] = {HY_LAYER_LINEAR, HY_LAYER_ATTENTION, HY_LAYER_LINEAR,
                                          HY_LAYER_LINEAR, HY_LAYER_ATTENTION};
    for (int i = 0; i < 5; i++) {
        CU_ASSERT_EQUAL(c.layer_kind[i], want[i]);
        CU_ASSERT_EQUAL(c.layer_moe[i], i >= 2);
    }
    CU_ASSERT(c.lin_dk == 64 && c.lin_dv == 64 && c.lin_v_heads == 8 && c.conv_kernel == 3);
    CU_ASSERT(c.top_k == 3 && c.shared_intermediate == 2048 && !c.norm_topk);
    CU_ASSERT(c.n_group == 2 && c.topk_group == 2 && c.q_lora == 48);
    CU_ASSERT_FALSE(c.tie_embeddings); /* no effect: the LM head is the model's own */
    parse_ok_text("{\"model_type\": \"kimi_linear\", \"num_hidden_layers\": 3, "
                  "\"mlp_layer_types\": [\"sparse\", \"dense\", \"sparse\"]}",
                  &c);
    CU_ASSERT(c.layer_moe[0] && !c.layer_moe[1] && c.layer_moe[2]);
    text_fails("{\"model_type\": \"kimi_linear\", \"num_hidden_layers\": 3, "
               "\"linear_attn_config\": {\"kda_layers\": [1], \"full_attn_layers\": [3]}}",
               HY_EINVAL, "layer 1 (number 2)", "kda_layers");
    text_fails("{\"model_type\": \"kimi_linear\", \"num_hidden_layers\": 3, "
               "\"linear_attn_config\": {\"kda_layers\": [0, 1], \"full_attn_layers\": [3]}}",
               HY_EINVAL, "kda_layers[0]", "counts from 1");
    text_fails("{\"model_type\": \"kimi_linear\", \"linear_attn_config\": {\"num_heads\": 0}}",
               HY_EINVAL, "linear_attn_config.num_heads", NULL);
    text_fails("{\"model_type\": \"kimi_linear\", \"num_key_value_heads\": 8}", HY_EINVAL,
               "num_key_value_heads 8", "kv_b_proj");
    text_fails("{\"model_type\": \"kimi_linear\", \"num_expert_group\": 3}", HY_EINVAL,
               "num_expert_group 3", NULL);
    text_fails("{\"model_type\": \"kimi_linear\", \"num_expert_group\": 8, \"topk_group\": 1, "
               "\"num_experts_per_token\": 40}",
               HY_ERANGE, "num_experts_per_token 40", "32 experts");
    text_fails("{\"model_type\": \"kimi_linear\", \"mlp_layer_types\": [\"dense\"]}", HY_EINVAL,
               "mlp_layer_types", NULL);
    text_fails("{\"model_type\": \"kimi_linear\", \"attention_bias\": true}", HY_EUNSUPPORTED,
               "attention_bias", NULL);
}

/* NemotronHConfig's defaults (configuration_nemotron_h.py), its block
 * pattern in either spelling, the mamba_* names that win over the new ones,
 * the keys it defines but never reads, and what it or the executor refuses. */
static void test_nemotron_defaults(void)
{
    hy_model_config c;
    parse_ok_text("{\"model_type\": \"nemotron_h\"}", &c);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_NEMOTRON_H);
    CU_ASSERT(c.vocab == 131072 && c.hidden == 4096 && c.n_layers == 4);
    static const hy_layer_kind dk[4] = {HY_LAYER_LINEAR, HY_LAYER_MLP, HY_LAYER_ATTENTION,
                                        HY_LAYER_MLP}; /* M E * - */
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(c.layer_kind[i], dk[i]);
        CU_ASSERT_EQUAL(c.layer_moe[i], i == 1);
        CU_ASSERT_EQUAL(c.layer_no_mlp[i], i == 0 || i == 2);
    }
    CU_ASSERT_EQUAL(c.lin_kind, HY_LIN_MAMBA2);
    CU_ASSERT(c.lin_v_heads == 128 && c.lin_dv == 64 && c.lin_dk == 128 && c.lin_k_heads == 8);
    CU_ASSERT_EQUAL(hy_config_conv_dim(&c), 128 * 64 + 2 * 8 * 128);
    CU_ASSERT(c.conv_kernel == 4 && c.dt_min == 0.001f && c.lin_conv_bias && !c.lin_proj_bias);
    CU_ASSERT(c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128 && c.rotary_dim == 0);
    CU_ASSERT(!c.attn_gate && !c.qk_norm && !c.mla);
    CU_ASSERT(c.intermediate == 21504 && c.mlp_act == HY_MLP_RELU2 && !c.mlp_bias);
    CU_ASSERT(c.n_experts == 8 && c.top_k == 2 && c.moe_intermediate == 7688);
    CU_ASSERT(c.shared_intermediate == 7688 && !c.shared_gated && c.moe_latent == 0);
    CU_ASSERT(c.router == HY_ROUTER_SIGMOID_GROUPED && c.n_group == 1 && c.topk_group == 1);
    CU_ASSERT(c.routed_scale == 1.0f && c.norm_topk && !c.norm_offset && !c.tie_embeddings);
    CU_ASSERT(c.rms_eps == 1e-5f && c.lin_norm_eps == 1e-5f);
    /* as released: the pattern string beside a num_hidden_layers that nothing
     * reads, the mamba_* names winning over the new ones, layer_norm_epsilon
     * (not rms_norm_eps, also in released files), bare Infinity */
    char *log = parse_logged(
        "{\"model_type\": \"nemotron_h\", \"hybrid_override_pattern\": \"*M-EM\", "
        "\"num_hidden_layers\": 52, \"n_groups\": 4, \"mamba_n_groups\": 2, "
        "\"mamba_num_heads\": 8, \"conv_kernel\": 4, \"mamba_d_conv\": 3, "
        "\"time_step_min\": 0.01, \"mamba_dt_min\": 0.002, \"mamba_conv_bias\": false, "
        "\"mamba_chunk_size\": 8, \"layer_norm_epsilon\": 1e-6, \"rms_norm_eps\": 0.5, "
        "\"time_step_limit\": [0.0, Infinity], \"moe_latent_size\": 24, "
        "\"num_local_experts\": 6, \"n_group\": 3, \"num_experts_per_tok\": 2, "
        "\"use_bias\": true, \"mlp_bias\": true, \"tie_word_embeddings\": true, "
        "\"attention_bias\": true, \"sliding_window\": 64}",
        &c);
    CU_ASSERT_EQUAL(c.n_layers, 5);
    static const hy_layer_kind rk[5] = {HY_LAYER_ATTENTION, HY_LAYER_LINEAR, HY_LAYER_MLP,
                                        HY_LAYER_MLP, HY_LAYER_LINEAR};
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(c.layer_kind[i], rk[i]);
    CU_ASSERT(c.layer_moe[3] && !c.layer_moe[2] && c.layer_no_mlp[0] && !c.layer_no_mlp[2]);
    CU_ASSERT(c.lin_k_heads == 2 && c.conv_kernel == 3 && c.dt_min == 0.002f);
    CU_ASSERT(!c.lin_conv_bias && c.lin_proj_bias && c.mlp_bias && c.moe_latent == 24);
    CU_ASSERT(c.n_experts == 6 && c.n_group == 3 && !c.tie_embeddings);
    CU_ASSERT(c.rms_eps == 1e-6f && c.lin_norm_eps == 1e-6f);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "not reading num_hidden_layers, attention_bias, "
                                       "sliding_window: nemotron_h defines them"));
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "ignoring rms_norm_eps: not a setting of nemotron_h"));
    hy_free(log);
    /* layers_block_type (or its alias layer_types) wins over the pattern, and
     * transformers' older names mamba / attention still read */
    parse_ok_text("{\"model_type\": \"nemotron_h\", \"hybrid_override_pattern\": \"EEEEE\", "
                  "\"layer_types\": [\"mamba\", \"attention\", \"mlp\"]}",
                  &c);
    CU_ASSERT(c.n_layers == 3 && c.layer_kind[0] == HY_LAYER_LINEAR &&
              c.layer_kind[1] == HY_LAYER_ATTENTION && c.layer_kind[2] == HY_LAYER_MLP);
    text_fails("{\"model_type\": \"nemotron_h\", \"hybrid_override_pattern\": \"M*X\"}", HY_EINVAL,
               "hybrid_override_pattern[2] is 'X'", NULL);
    text_fails("{\"model_type\": \"nemotron_h\", \"hybrid_override_pattern\": \"\"}", HY_EINVAL,
               "hybrid_override_pattern", "1 to 256");
    text_fails("{\"model_type\": \"nemotron_h\", \"layers_block_type\": [\"mamba\", \"gdn\"]}",
               HY_EINVAL, "layers_block_type[1]", NULL);
    text_fails("{\"model_type\": \"nemotron_h\", \"layers_block_type\": \"M*\"}", HY_EINVAL,
               "'layers_block_type' must be a list", NULL);
    text_fails("{\"model_type\": \"nemotron_h\", \"mamba_num_heads\": 12}", HY_EINVAL,
               "mamba_num_heads 12 is not a multiple of n_groups 8", NULL);
    text_fails("{\"model_type\": \"nemotron_h\", \"n_group\": 3}", HY_EINVAL, "n_group 3",
               "n_routed_experts 8");
    text_fails("{\"model_type\": \"nemotron_h\", \"mlp_hidden_act\": \"gelu\"}", HY_EUNSUPPORTED,
               "mlp_hidden_act must be 'relu2'", NULL);
    text_fails("{\"model_type\": \"nemotron_h\", \"mamba_hidden_act\": \"relu\"}", HY_EUNSUPPORTED,
               "mamba_hidden_act must be 'silu'", NULL);
    text_fails("{\"model_type\": \"nemotron_h\", \"time_step_min\": -1}", HY_ERANGE,
               "time_step_min", NULL);
    text_fails("{\"model_type\": \"nemotron_h\", \"mamba_d_conv\": 1}", HY_ERANGE, "mamba_d_conv",
               NULL);
}

/* BailingHybridConfig's defaults (configuration_bailing_hybrid.py): its
 * layer groups, the KDA width from linear_head_dim or else head_dim (which
 * the class then rewrites), the attribute_map names, what it ignores and
 * what it or the executor refuses. */
static void test_ling_defaults(void)
{
    hy_model_config c;
    parse_ok_text("{\"model_type\": \"bailing_hybrid\"}", &c);
    CU_ASSERT_EQUAL(c.arch, HY_ARCH_BAILING_HYBRID);
    CU_ASSERT(c.vocab == 157184 && c.hidden == 2560 && c.n_layers == 42);
    for (int i = 0; i < 42; i++) {
        CU_ASSERT_EQUAL(c.layer_kind[i], (i + 1) % 6 ? HY_LAYER_LINEAR : HY_LAYER_ATTENTION);
        CU_ASSERT_EQUAL(c.layer_moe[i], i >= 2);
    }
    CU_ASSERT(c.lin_kind == HY_LIN_KDA && c.kda_full_gates && c.kda_safe_gate);
    CU_ASSERT(c.kda_lower_bound == -5.0f && c.conv_kernel == 4);
    CU_ASSERT(c.lin_v_heads == 32 && c.lin_k_heads == 32 && c.lin_dk == 128 && c.lin_dv == 128);
    CU_ASSERT(c.mla && c.q_lora == 0 && c.kv_lora == 512 && c.qk_nope == 128 && c.qk_rope == 64);
    CU_ASSERT(c.v_head == 128 && c.mla_head_gate && !c.mla_bias && c.rotary_dim == 64);
    CU_ASSERT(c.rope_theta == 6e6 && c.n_heads == 32 && c.n_kv_heads == 32);
    CU_ASSERT(c.n_experts == 512 && c.top_k == 8 && c.moe_intermediate == 768);
    CU_ASSERT(c.shared_intermediate == 768 && !c.shared_gated && c.intermediate == 6144);
    CU_ASSERT(c.router == HY_ROUTER_SIGMOID_GROUPED && c.n_group == 8 && c.topk_group == 4);
    CU_ASSERT(c.routed_scale == 2.5f && c.norm_topk && !c.norm_offset && c.rms_eps == 1e-6f);
    CU_ASSERT_EQUAL(c.mtp_layers, 1);
    /* as released: head_dim is the KDA width, the aliases, the keys it
     * ignores (q_lora_rank, partial_rotary_factor) */
    char *log = parse_logged(
        "{\"model_type\": \"bailing_hybrid\", \"num_hidden_layers\": 5, \"layer_group_size\": 3, "
        "\"head_dim\": 64, \"num_attention_heads\": 8, \"num_key_value_heads\": 8, "
        "\"short_conv_kernel_size\": 3, \"first_k_dense_replace\": 1, \"num_experts\": 16, "
        "\"num_experts_per_tok\": 2, \"num_experts_per_token\": 3, \"n_group\": 4, "
        "\"topk_group\": 2, \"norm_topk_prob\": false, \"num_shared_experts\": 2, "
        "\"moe_intermediate_size\": 32, \"q_lora_rank\": 16, \"partial_rotary_factor\": 0.5, "
        "\"qk_rope_head_dim\": 16, \"attention_bias\": true, \"kda_safe_gate\": false, "
        "\"num_mtp_layers\": 2, \"tie_word_embeddings\": true}",
        &c);
    static const hy_layer_kind want[5] = {HY_LAYER_LINEAR, HY_LAYER_LINEAR, HY_LAYER_ATTENTION,
                                          HY_LAYER_LINEAR, HY_LAYER_LINEAR};
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(c.layer_kind[i], want[i]);
    CU_ASSERT(c.lin_dk == 64 && c.lin_v_heads == 8 && c.conv_kernel == 3);
    CU_ASSERT(c.head_dim == 128 + 16 && c.rotary_dim == 16 && c.q_lora == 0);
    CU_ASSERT(c.top_k == 3 && c.n_group == 4 && !c.norm_topk && c.shared_intermediate == 64);
    CU_ASSERT(c.mla_bias && !c.kda_safe_gate && c.mtp_layers == 2 && !c.tie_embeddings);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "partial_rotary_factor, q_lora_rank: not a setting"));
    hy_free(log);
    /* a saved config: linear_head_dim and its kin win over head_dim */
    parse_ok_text("{\"model_type\": \"bailing_hybrid\", \"num_hidden_layers\": 4, "
                  "\"head_dim\": 8, \"linear_head_dim\": 24, \"linear_num_heads\": 4, "
                  "\"num_attention_heads\": 4, \"num_key_value_heads\": 4, "
                  "\"linear_conv_kernel_dim\": 2, \"layer_types\": [\"linear_attention\", "
                  "\"full_attention\", \"linear_attention\", \"full_attention\"]}",
                  &c);
    CU_ASSERT(c.lin_dk == 24 && c.lin_v_heads == 4 && c.conv_kernel == 2);
    CU_ASSERT(c.layer_kind[1] == HY_LAYER_ATTENTION && c.layer_kind[2] == HY_LAYER_LINEAR);
    text_fails("{\"model_type\": \"bailing_hybrid\", \"num_key_value_heads\": 8}", HY_EINVAL,
               "num_key_value_heads 8", "kv_b_proj");
    text_fails("{\"model_type\": \"bailing_hybrid\", \"num_expert_group\": 3}", HY_EINVAL,
               "num_expert_group 3", NULL);
    text_fails("{\"model_type\": \"bailing_hybrid\", \"layer_group_size\": 0}", HY_ERANGE,
               "layer_group_size", NULL);
    text_fails("{\"model_type\": \"bailing_hybrid\", \"kda_lower_bound\": 1.5}", HY_ERANGE,
               "kda_lower_bound", NULL);
    text_fails("{\"model_type\": \"bailing_hybrid\", \"rope_parameters\": {\"rope_type\": "
               "\"yarn\", \"factor\": 4}}",
               HY_EUNSUPPORTED, "rope_type 'yarn'", NULL);
    /* attention_bias is Ling's alone */
    text_fails("{\"model_type\": \"kimi_linear\", \"attention_bias\": true}", HY_EUNSUPPORTED,
               "attention_bias true is not supported", NULL);
}

/* Python's json writes non-finite floats bare (Infinity, -Infinity, NaN), as
 * released configs carry them (Nemotron-H's time_step_limit): a key the
 * loader does not read may hold them; one it reads refuses them by its own
 * rule; inside strings they are text. */
static void test_nonfinite_literals(void)
{
    hy_model_config c;
    parse_ok_text("{\"model_type\": \"qwen3_next\", \"time_step_limit\": [0.0, Infinity], "
                  "\"x\": -Infinity, \"y\": NaN, \"architectures\": [\"NaN Infinity\"]}",
                  &c);
    CU_ASSERT_EQUAL(c.hidden, 2048);
    CU_ASSERT_STRING_EQUAL(c.arch_name, "NaN Infinity");
    text_fails("{\"model_type\": \"qwen3_next\", \"rms_norm_eps\": Infinity}", HY_ERANGE,
               "'rms_norm_eps' = inf is outside", NULL);
    text_fails("{\"model_type\": \"qwen3_next\", \"rope_theta\": -Infinity}", HY_ERANGE,
               "'rope_theta'", NULL);
    text_fails("{\"model_type\": \"qwen3_next\", \"hidden_size\": NaN}", HY_EINVAL,
               "'hidden_size' must be an integer", NULL);
    text_fails("{\"model_type\": \"qwen3_next\", \"a\": Infinit}", HY_EFORMAT,
               "not a well-formed JSON object", NULL);
}

/* --- the suite ------------------------------------------------------------- */

int main(void)
{
    if (hy_test_mkdtemp("hy_test_cfg_", g_dir, sizeof g_dir)) return 1;
    static const hy_test_case cases[] = {
        {"minimal qwen3_next", test_minimal_qwen3_next},
        {"layer pattern from full_attention_interval", test_layer_pattern_from_interval},
        {"rotary_dim from top level and rope_parameters", test_rotary_dim},
        {"explicit layer_types", test_explicit_layer_types},
        {"qwen3_5 text_config (dense and MoE)", test_qwen3_5_text_config},
        {"MoE layers as transformers derives them", test_moe_layers_as_transformers},
        {"the four readings (norm_topk_prob, shared expert, tie x2)", test_four_readings},
        {"composite configs", test_composite_reading},
        {"rope_scaling replaces rope_parameters", test_rope_scaling_replaces},
        {"not JSON", test_not_json},
        {"absent keys take transformers' defaults", test_transformers_defaults},
        {"null refused except for Optional fields", test_null},
        {"wrong types", test_wrong_types},
        {"out-of-range values name the limit", test_out_of_range},
        {"unsupported model_type, rope_type, act, bias", test_unsupported},
        {"head counts not multiples", test_head_counts},
        {"layer_types wrong length or unknown", test_bad_layer_types},
        {"mlp_only_layers: integers, any value", test_mlp_only_layers_values},
        {"hy_config_load paths", test_config_load_paths},
        {"docs/config-keys.md holds the table", test_doc_table_matches},
        {"olmo_hybrid: transformers' defaults and derivations", test_olmo_defaults},
        {"olmo_hybrid: RoPE whole or none", test_olmo_rope},
        {"minimax: transformers' defaults, alias and factors", test_minimax_defaults},
        {"kimi_linear: defaults, layer lists, aliases, refusals", test_kimi_defaults},
        {"nemotron_h: defaults, block patterns, aliases, refusals", test_nemotron_defaults},
        {"bailing_hybrid: defaults, layer groups, head widths, aliases, refusals",
         test_ling_defaults},
        {"bare Infinity, -Infinity and NaN as Python writes them", test_nonfinite_literals},
        {NULL, NULL},
    };
    return run_suite_and_remove_dir("config", cases);
}
