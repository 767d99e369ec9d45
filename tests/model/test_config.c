/*
 * config.json parsing and hy_model_open against broken checkpoints.
 *
 * The parser is fed JSON texts derived from one minimal Qwen3-Next config by
 * patching keys, and must read them as transformers 5.23 does (defaults of
 * each architecture's config class, layer pattern, rotary dims, which layers
 * are MoE, how a nested vision-language config is read; the expected values
 * here are transformers' own, written out independently of the loader's
 * table) and refuse every bad value with a code and a message naming the
 * file, the key and the limit. Then a generated "tiny" checkpoint is
 * rewritten with every tensor in turn missing, reshaped or retyped, with
 * tensors the configuration leaves unused, with a vision tower and an MTP
 * head (skipped, one log line each), and with configs that disagree with its
 * tensors; each open must fail naming the tensor, and the intact checkpoint
 * must still open after every failure. docs/config-keys.md must hold the
 * loader's table of keys verbatim.
 */
#include "model_internal.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CFG_PATH "/models/x/config.json"

static char g_dir[64]; /* the temporary directory of this run */

/* A minimal Qwen3-Next config: 6 layers, attention every 3rd, dense
 * (num_experts 0; without the key transformers' default of 512 applies). */
static const char *k_base =
    "{\"model_type\": \"qwen3_next\", \"vocab_size\": 100, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 6, \"intermediate_size\": 64, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"head_dim\": 16, \"linear_num_key_heads\": 2,"
    " \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 8, \"linear_value_head_dim\": 8,"
    " \"full_attention_interval\": 3, \"partial_rotary_factor\": 0.25, \"num_experts\": 0}";

/* k_base with the keys of the JSON object `patch` set (a null value sets
 * null) and the key `drop` removed. Free with free(). */
static char *patched(const char *base, const char *patch, const char *drop)
{
    cJSON *root = cJSON_Parse(base);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    if (patch) {
        cJSON *p = cJSON_Parse(patch);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        for (cJSON *e = p->child; e; e = e->next) {
            cJSON *dup = cJSON_Duplicate(e, 1);
            if (cJSON_GetObjectItemCaseSensitive(root, e->string))
                cJSON_ReplaceItemInObjectCaseSensitive(root, e->string, dup);
            else
                cJSON_AddItemToObject(root, e->string, dup);
        }
        cJSON_Delete(p);
    }
    if (drop) cJSON_DeleteItemFromObjectCaseSensitive(root, drop);
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    return text;
}

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

/* Calls fn(arg) with stderr redirected to a file and returns what it wrote
 * (free with hy_free); *rc gets fn's result. */
static char *capture_stderr(int (*fn)(void *), void *arg, int *rc)
{
    char path[128];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CU_ASSERT_FATAL(saved >= 0 && fd >= 0);
    CU_ASSERT_FATAL(dup2(fd, 2) == 2);
    close(fd);
    *rc = fn(arg);
    fflush(stderr);
    CU_ASSERT_FATAL(dup2(saved, 2) == 2);
    close(saved);
    char *text = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_read_file(path, 1u << 20, &text, NULL, &e), HY_OK);
    return text;
}

/* Lines of text containing frag. */
static int count_lines(const char *text, const char *frag)
{
    int n = 0;
    for (const char *l = text; *l;) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)HY_MIN(len, sizeof line - 1), l);
        n += strstr(line, frag) != NULL;
        l += len + (end != NULL);
    }
    return n;
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

/* What transformers derives: layer i is MoE when the model has experts,
 * (i + 1) % step == 0, and i is not in mlp_only_layers. */
static void want_moe(int n_layers, int n_experts, int step, const int *only, int n_only, bool *out)
{
    for (int i = 0; i < n_layers; i++) {
        bool listed = false;
        for (int j = 0; j < n_only; j++) listed |= only[j] == i;
        out[i] = n_experts > 0 && (i + 1) % step == 0 && !listed;
    }
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

/* --- hy_model_open on broken checkpoints -------------------------------------- */

static char g_intact[128]; /* a generated "tiny", never modified */

static void make_dir(const char *name, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/%s", g_dir, name);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0 || errno == EEXIST);
}

/* The intact checkpoint must open after any failure (nothing global broke). */
static void check_intact_opens(void)
{
    hy_model *m = NULL;
    hy_err e = {0};
    int rc = hy_model_open(&m, g_intact, &e);
    if (rc) fprintf(stderr, "\n  intact checkpoint: %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_EQUAL(hy_model_cfg(m)->hidden, 64);
    hy_model_close(m);
}

static void copy_file(const char *from, const char *to)
{
    char *text;
    size_t n;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_read_file(from, 1u << 30, &text, &n, &e), HY_OK);
    FILE *f = fopen(to, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(text, 1, n, f), n);
    CU_ASSERT_EQUAL_FATAL(fclose(f), 0);
    hy_free(text);
}

/* How to rewrite the intact tensors. */
typedef struct edit {
    const char *src;       /* the checkpoint rewritten; NULL: the intact tiny */
    const char *drop;      /* left out */
    const char *transpose; /* dims reversed */
    const char *add_dim;   /* a trailing dimension of 1 appended */
    const char *as_i32;    /* an F32 tensor relabelled I32 */
    const char *rename_from, *rename_to;
    const hy_st_wtensor *extra; /* tensors added */
    size_t n_extra;
    const char *text_patch; /* keys set in config.json's text_config */
} edit;

/* Writes dir/model.safetensors as the source's with `ed` applied, and
 * dir/config.json as the source's (with patch applied at the top level and
 * ed.text_patch in text_config, when given). */
static void write_variant(const char *dir, edit ed, const char *patch)
{
    char p[256];
    hy_st *st = NULL;
    hy_err e = {0};
    const char *src = ed.src ? ed.src : g_intact;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    CU_ASSERT_EQUAL_FATAL(hy_st_open_file(&st, p, &e), HY_OK);
    size_t n = hy_st_count(st), k = 0;
    hy_st_wtensor *ts = calloc(n + ed.n_extra, sizeof *ts);
    for (size_t i = 0; i < n; i++) {
        const hy_st_tensor *t = hy_st_at(st, i);
        if (ed.drop && strcmp(t->name, ed.drop) == 0) continue;
        hy_st_wtensor *w = &ts[k++];
        w->name = ed.rename_from && strcmp(t->name, ed.rename_from) == 0 ? ed.rename_to : t->name;
        w->dtype = t->dtype;
        w->ndim = t->ndim;
        memcpy(w->shape, t->shape, sizeof w->shape);
        w->data = t->data;
        if (ed.transpose && strcmp(t->name, ed.transpose) == 0)
            for (int d = 0; d < t->ndim; d++) w->shape[d] = t->shape[t->ndim - 1 - d];
        if (ed.add_dim && strcmp(t->name, ed.add_dim) == 0) w->shape[w->ndim++] = 1;
        if (ed.as_i32 && strcmp(t->name, ed.as_i32) == 0) {
            CU_ASSERT_EQUAL_FATAL(t->dtype, HY_DT_F32);
            w->dtype = HY_DT_I32;
        }
    }
    CU_ASSERT_EQUAL(k, ed.drop ? n - 1 : n); /* the dropped name exists */
    for (size_t i = 0; i < ed.n_extra; i++) ts[k++] = ed.extra[i];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(hy_st_write(p, ts, k, &e), HY_OK);
    free(ts);
    hy_st_close(st);

    char from[256];
    snprintf(from, sizeof from, "%s/config.json", src);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (!patch && !ed.text_patch) {
        copy_file(from, p);
        return;
    }
    char *text;
    CU_ASSERT_EQUAL_FATAL(hy_read_file(from, 1u << 20, &text, NULL, &e), HY_OK);
    char *out = patched(text, patch, NULL);
    hy_free(text);
    if (ed.text_patch) {
        cJSON *root = cJSON_Parse(out);
        cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        CU_ASSERT_PTR_NOT_NULL_FATAL(tc);
        char *sub = cJSON_PrintUnformatted(tc);
        char *subp = patched(sub, ed.text_patch, NULL);
        cJSON_ReplaceItemInObjectCaseSensitive(root, "text_config", cJSON_Parse(subp));
        free(sub);
        free(subp);
        free(out);
        out = cJSON_Print(root);
        cJSON_Delete(root);
    }
    FILE *f = fopen(p, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs(out, f);
    CU_ASSERT_EQUAL_FATAL(fclose(f), 0);
    free(out);
}

/* Opens dir expecting failure with code and each non-NULL fragment; then the
 * intact checkpoint must still open. Returns whether the expectation held. */
static int open_fails(const char *dir, int code, const char *frag1, const char *frag2,
                      const char *frag3)
{
    hy_model *m = (hy_model *)&m; /* any non-NULL value: a failed open must reset it */
    hy_err e = {0};
    int rc = hy_model_open(&m, dir, &e);
    int ok = rc == code && e.code == code && m == NULL && (!frag1 || strstr(e.msg, frag1)) &&
             (!frag2 || strstr(e.msg, frag2)) && (!frag3 || strstr(e.msg, frag3));
    CU_ASSERT(ok);
    if (!ok)
        fprintf(stderr, "\n  %s: got %s '%s', wanted %s with '%s' '%s' '%s'\n", dir,
                hy_strerror(rc), e.msg, hy_strerror(code), frag1 ? frag1 : "", frag2 ? frag2 : "",
                frag3 ? frag3 : "");
    if (rc == HY_OK) hy_model_close(m);
    check_intact_opens();
    return ok;
}

/* The names of the intact checkpoint's tensors (free the array and names). */
static char **intact_names(size_t *n)
{
    char p[256];
    hy_st *st = NULL;
    hy_err e = {0};
    snprintf(p, sizeof p, "%s/model.safetensors", g_intact);
    CU_ASSERT_EQUAL_FATAL(hy_st_open_file(&st, p, &e), HY_OK);
    *n = hy_st_count(st);
    char **names = calloc(*n, sizeof *names);
    for (size_t i = 0; i < *n; i++) names[i] = strdup(hy_st_at(st, i)->name);
    hy_st_close(st);
    return names;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void test_intact_tiny_opens(void)
{
    check_intact_opens();
    hy_model *m = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, g_intact, &e), HY_OK);
    const hy_model_config *c = hy_model_cfg(m);
    CU_ASSERT_EQUAL(c->vocab, 259);
    CU_ASSERT_EQUAL(c->n_layers, 4);
    CU_ASSERT_EQUAL(c->layer_kind[3], HY_LAYER_ATTENTION);
    CU_ASSERT_TRUE(c->tie_embeddings);
    hy_model_close(m);
}

static void test_missing_tensor(void)
{
    char dir[128];
    make_dir("var_drop", dir, sizeof dir);
    write_variant(dir, (edit){.drop = "model.layers.0.mlp.down_proj.weight"}, NULL);
    open_fails(dir, HY_ENOTFOUND, "tensor 'model.layers.0.mlp.down_proj.weight' is missing", NULL,
               NULL);
    /* every tensor the architecture needs, in turn */
    size_t n;
    char **names = intact_names(&n);
    int fails = 0;
    for (size_t i = 0; i < n; i++) {
        char want[256];
        write_variant(dir, (edit){.drop = names[i]}, NULL);
        snprintf(want, sizeof want, "tensor '%s' is missing", names[i]);
        fails += !open_fails(dir, HY_ENOTFOUND, want, NULL, NULL);
    }
    printf("\n    each of %zu tensors dropped: %d unexpected", n, fails);
    CU_ASSERT(n > 40);
    free_names(names, n);
}

static void test_wrong_shape(void)
{
    char dir[128];
    make_dir("var_shape", dir, sizeof dir);
    write_variant(dir, (edit){.transpose = "model.layers.0.mlp.down_proj.weight"}, NULL);
    open_fails(dir, HY_EFORMAT, "tensor 'model.layers.0.mlp.down_proj.weight'",
               "has shape [128,64]", "config needs [64,128]");
    write_variant(dir, (edit){.add_dim = "model.norm.weight"}, NULL);
    open_fails(dir, HY_EFORMAT, "/model.safetensors: tensor 'model.norm.weight'",
               "has shape [64,1]", "config needs [64]");
    /* every tensor, with a trailing dimension of 1 (same bytes, wrong rank) */
    size_t n;
    char **names = intact_names(&n);
    int fails = 0;
    for (size_t i = 0; i < n; i++) {
        char want[256];
        write_variant(dir, (edit){.add_dim = names[i]}, NULL);
        snprintf(want, sizeof want, "tensor '%s' has shape [", names[i]);
        fails += !open_fails(dir, HY_EFORMAT, want, ",1], config needs [", NULL);
    }
    printf("\n    each of %zu tensors reshaped: %d unexpected", n, fails);
    free_names(names, n);
}

static void test_integer_weight(void)
{
    char dir[128];
    make_dir("var_i32", dir, sizeof dir);
    size_t n;
    char **names = intact_names(&n);
    int fails = 0;
    for (size_t i = 0; i < n; i++) {
        char want[256];
        write_variant(dir, (edit){.as_i32 = names[i]}, NULL);
        snprintf(want, sizeof want, "tensor '%s' has dtype I32", names[i]);
        fails += !open_fails(dir, HY_EUNSUPPORTED, want, "F32, BF16 or F16 expected", NULL);
    }
    printf("\n    each of %zu tensors as I32: %d unexpected", n, fails);
    free_names(names, n);
}

static void test_config_disagrees_with_tensors(void)
{
    static const struct {
        const char *patch;
        int code;
        const char *frag1, *frag2;
    } cases[] = {
        {"{\"hidden_size\": 32}", HY_EFORMAT, "tensor 'model.embed_tokens.weight'",
         "has shape [259,64], config needs [259,32]"},
        {"{\"vocab_size\": 300}", HY_EFORMAT, "tensor 'model.embed_tokens.weight'",
         "config needs [300,64]"},
        {"{\"intermediate_size\": 96}", HY_EFORMAT, "tensor 'model.layers.0.mlp.gate_proj.weight'",
         "has shape [128,64], config needs [96,64]"},
        {"{\"head_dim\": 8}", HY_EFORMAT, "tensor 'model.layers.3.self_attn.q_proj.weight'",
         "config needs [64,64]"},
        {"{\"linear_key_head_dim\": 8}", HY_EFORMAT,
         "tensor 'model.layers.0.linear_attn.in_proj_qkvz.weight'", "has shape ["},
        {"{\"num_hidden_layers\": 5, \"layer_types\": null}", HY_ENOTFOUND,
         "tensor 'model.layers.4.input_layernorm.weight' is missing", NULL},
        {"{\"tie_word_embeddings\": false}", HY_ENOTFOUND, "tensor 'lm_head.weight' is missing",
         NULL},
        {"{\"num_experts\": 2, \"num_experts_per_tok\": 1, \"moe_intermediate_size\": 32}",
         HY_ENOTFOUND, "tensor 'model.layers.0.mlp.gate.weight' is missing", NULL},
    };
    char dir[128];
    make_dir("var_cfg", dir, sizeof dir);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        write_variant(dir, (edit){0}, cases[i].patch);
        if (!open_fails(dir, cases[i].code, cases[i].frag1, cases[i].frag2, NULL))
            fprintf(stderr, "  (config patch %s)\n", cases[i].patch);
    }
    /* a config that is itself invalid is reported with the config's path */
    char path[160];
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_variant(dir, (edit){0}, "{\"num_key_value_heads\": 3}");
    open_fails(dir, HY_EINVAL, path, "not a multiple of num_key_value_heads 3", NULL);
}

static void test_missing_files(void)
{
    char dir[128], path[160], from[160];
    /* no config.json */
    make_dir("var_nocfg", dir, sizeof dir);
    write_variant(dir, (edit){0}, NULL);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CU_ASSERT_EQUAL_FATAL(unlink(path), 0);
    open_fails(dir, HY_ENOTFOUND, path, "cannot open", NULL);
    /* config.json not JSON */
    FILE *f = fopen(path, "w");
    fputs("{\"model_type\": \"qwen3_next\",", f);
    fclose(f);
    open_fails(dir, HY_EFORMAT, path, "not a well-formed JSON object", NULL);
    /* config.json a directory */
    CU_ASSERT_EQUAL_FATAL(unlink(path), 0);
    CU_ASSERT_EQUAL_FATAL(mkdir(path, 0755), 0);
    open_fails(dir, HY_EIO, path, "not a regular file", NULL);
    /* no tensors */
    make_dir("var_nost", dir, sizeof dir);
    snprintf(from, sizeof from, "%s/config.json", g_intact);
    snprintf(path, sizeof path, "%s/config.json", dir);
    copy_file(from, path);
    open_fails(dir, HY_ENOTFOUND, dir, "neither model.safetensors", NULL);
    /* tensors present but the file is cut short */
    char st_from[160], st_to[160];
    snprintf(st_from, sizeof st_from, "%s/model.safetensors", g_intact);
    snprintf(st_to, sizeof st_to, "%s/model.safetensors", dir);
    copy_file(st_from, st_to);
    CU_ASSERT_EQUAL_FATAL(truncate(st_to, 50000), 0);
    open_fails(dir, HY_EFORMAT, st_to, "outside the data buffer", NULL);
    /* no directory at all */
    snprintf(dir, sizeof dir, "%s/no-such-model", g_dir);
    open_fails(dir, HY_ENOTFOUND, dir, NULL, NULL);
}

static void test_sharded_tiny_opens(void)
{
    char dir[128], p[256];
    make_dir("tiny_sharded", dir, sizeof dir);
    hy_st *st = NULL;
    hy_err e = {0};
    snprintf(p, sizeof p, "%s/model.safetensors", g_intact);
    CU_ASSERT_EQUAL_FATAL(hy_st_open_file(&st, p, &e), HY_OK);
    size_t n = hy_st_count(st), k[2] = {0, 0};
    hy_st_wtensor *ts[2] = {calloc(n, sizeof **ts), calloc(n, sizeof **ts)};
    cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
    static const char *shard[2] = {"model-00001-of-00002.safetensors",
                                   "model-00002-of-00002.safetensors"};
    for (size_t i = 0; i < n; i++) {
        const hy_st_tensor *t = hy_st_at(st, i);
        int s = (int)(i % 2);
        ts[s][k[s]++] =
            (hy_st_wtensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        memcpy(ts[s][k[s] - 1].shape, t->shape, sizeof t->shape);
        cJSON_AddStringToObject(wm, t->name, shard[s]);
    }
    for (int s = 0; s < 2; s++) {
        snprintf(p, sizeof p, "%s/%s", dir, shard[s]);
        CU_ASSERT_EQUAL_FATAL(hy_st_write(p, ts[s], k[s], &e), HY_OK);
        free(ts[s]);
    }
    hy_st_close(st);
    char *text = cJSON_Print(idx);
    cJSON_Delete(idx);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    char from[160];
    snprintf(from, sizeof from, "%s/config.json", g_intact);
    snprintf(p, sizeof p, "%s/config.json", dir);
    copy_file(from, p);

    hy_model *a = NULL, *b = NULL;
    int rc = hy_model_open(&a, dir, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&b, g_intact, &e), HY_OK);
    const hy_model_config *c = hy_model_cfg(a);
    CU_ASSERT_EQUAL(memcmp(a->embed, b->embed, (size_t)c->vocab * c->hidden * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(a->layers[3].attn.w_qkv, b->layers[3].attn.w_qkv,
                           (size_t)(2 * c->n_heads + 2 * c->n_kv_heads) * c->head_dim * c->hidden *
                               sizeof(float)),
                    0);
    hy_model_close(a);
    hy_model_close(b);
}

static void test_tiny_moe_opens(void)
{
    char dir[128];
    make_dir("tiny_moe", dir, sizeof dir);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_init("tiny-moe", 7, dir, "F32", &e), HY_OK);
    hy_model *m = NULL;
    int rc = hy_model_open(&m, dir, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    const hy_model_config *c = hy_model_cfg(m);
    CU_ASSERT_EQUAL(c->n_experts, 8);
    CU_ASSERT_EQUAL(c->top_k, 2);
    CU_ASSERT_EQUAL(c->moe_intermediate, 32);
    CU_ASSERT_EQUAL(c->shared_intermediate, 64);
    CU_ASSERT_FALSE(c->tie_embeddings);
    bool want[4];
    const int only[1] = {0};
    want_moe(4, 8, 1, only, 1, want);
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(c->layer_moe[i], want[i]);
    CU_ASSERT_FALSE(c->layer_moe[0]);
    CU_ASSERT_TRUE(c->layer_moe[1]);
    hy_model_close(m);

    /* one expert's weight missing is named */
    char p[256];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    hy_st *st = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_st_open_file(&st, p, &e), HY_OK);
    size_t n = hy_st_count(st), k = 0;
    hy_st_wtensor *ts = calloc(n, sizeof *ts);
    const char *gone = "model.layers.2.mlp.experts.5.up_proj.weight";
    for (size_t i = 0; i < n; i++) {
        const hy_st_tensor *t = hy_st_at(st, i);
        if (strcmp(t->name, gone) == 0) continue;
        ts[k] =
            (hy_st_wtensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        memcpy(ts[k++].shape, t->shape, sizeof t->shape);
    }
    CU_ASSERT_EQUAL_FATAL(k, n - 1);
    char dir2[128], from[160], to[160];
    make_dir("tiny_moe_broken", dir2, sizeof dir2);
    snprintf(to, sizeof to, "%s/model.safetensors", dir2);
    CU_ASSERT_EQUAL_FATAL(hy_st_write(to, ts, k, &e), HY_OK);
    free(ts);
    hy_st_close(st);
    snprintf(from, sizeof from, "%s/config.json", dir);
    snprintf(to, sizeof to, "%s/config.json", dir2);
    copy_file(from, to);
    open_fails(dir2, HY_ENOTFOUND, "tensor 'model.layers.2.mlp.experts.5.up_proj.weight'", NULL,
               NULL);
}

static void test_bf16_tiny_opens(void)
{
    char dir[128], p[256];
    make_dir("tiny_bf16", dir, sizeof dir);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_init("tiny", 1, dir, "BF16", &e), HY_OK);
    /* the file really holds BF16 */
    hy_st *st = NULL;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(hy_st_open_file(&st, p, &e), HY_OK);
    for (size_t i = 0; i < hy_st_count(st); i++)
        CU_ASSERT_EQUAL(hy_st_at(st, i)->dtype, HY_DT_BF16);
    hy_st_close(st);

    hy_model *m16 = NULL, *m32 = NULL;
    int rc = hy_model_open(&m16, dir, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m32, g_intact, &e), HY_OK); /* same preset and seed */
    const hy_model_config *a = hy_model_cfg(m16), *b = hy_model_cfg(m32);
    CU_ASSERT_EQUAL(a->arch, b->arch);
    CU_ASSERT_EQUAL(a->vocab, b->vocab);
    CU_ASSERT_EQUAL(a->hidden, b->hidden);
    CU_ASSERT_EQUAL(a->n_layers, b->n_layers);
    CU_ASSERT_EQUAL(a->n_heads, b->n_heads);
    CU_ASSERT_EQUAL(a->n_kv_heads, b->n_kv_heads);
    CU_ASSERT_EQUAL(a->head_dim, b->head_dim);
    CU_ASSERT_EQUAL(a->rotary_dim, b->rotary_dim);
    CU_ASSERT_EQUAL(a->lin_k_heads, b->lin_k_heads);
    CU_ASSERT_EQUAL(a->lin_v_heads, b->lin_v_heads);
    CU_ASSERT_EQUAL(a->intermediate, b->intermediate);
    CU_ASSERT_EQUAL(a->tie_embeddings, b->tie_embeddings);
    CU_ASSERT_EQUAL(memcmp(a->layer_kind, b->layer_kind, sizeof a->layer_kind), 0);
    /* the widened weights are the fp32 ones rounded to bf16, exactly */
    size_t n = (size_t)a->vocab * a->hidden, bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += m16->embed[i] != hy_bf16_to_f32(hy_f32_to_bf16(m32->embed[i]));
    CU_ASSERT_EQUAL(bad, 0);
    /* and it runs */
    hy_exec *ex = NULL;
    hy_state *s = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m16, 0, &ex, &e), HY_OK);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m16, &s, &e), HY_OK);
    int32_t tok[6] = {3, 10, 99, 4, 258, 7};
    float *logits = malloc((size_t)a->vocab * sizeof(float));
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, s, tok, 6, logits, &e), HY_OK);
    size_t finite = 0;
    for (int i = 0; i < a->vocab; i++) finite += isfinite(logits[i]) != 0;
    CU_ASSERT_EQUAL(finite, (size_t)a->vocab);
    free(logits);
    hy_state_free(s);
    hy_exec_free(ex);
    hy_model_close(m16);
    hy_model_close(m32);
}

/* --- every tensor used, or a part the text executor does not run ------------ */

typedef struct open_job {
    const char *dir;
    hy_model *m;
    hy_err err;
} open_job;

static int run_open(void *arg)
{
    open_job *j = arg;
    return hy_model_open(&j->m, j->dir, &j->err);
}

/* Opens dir (must succeed) with its log captured (free with hy_free). */
static hy_model *open_logged(const char *dir, char **log)
{
    open_job j = {.dir = dir};
    int rc;
    *log = capture_stderr(run_open, &j, &rc);
    if (rc) fprintf(stderr, "\n  %s: %s\n", dir, j.err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    return j.m;
}

/* A small F32 tensor to add to a checkpoint. */
static hy_st_wtensor small_tensor(const char *name)
{
    static const float zeros[4] = {0};
    return (hy_st_wtensor){
        .name = name, .dtype = HY_DT_F32, .ndim = 1, .shape = {4}, .data = zeros};
}

static void golden_dir(const char *name, char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/golden/%s", HY_FIXTURES_DIR, name);
}

static void test_unused_tensor_is_an_error(void)
{
    static const struct {
        const char *added[2];
        const char *frag1, *frag2;
    } cases[] = {
        {{"model.layers.1.mlp.shared_expert.gate_proj.weight"},
         "tensor 'model.layers.1.mlp.shared_expert.gate_proj.weight' is in the checkpoint but "
         "config.json leaves it unused",
         "the layer has a dense MLP"},
        {{"model.layers.2.mlp.gate.weight"}, "'model.layers.2.mlp.gate.weight'", "dense MLP"},
        {{"model.layers.7.input_layernorm.weight"},
         "tensor 'model.layers.7.input_layernorm.weight' belongs to layer 7",
         "num_hidden_layers = 4"},
        {{"model.layers.0.self_attn.q_proj.weight"},
         "'model.layers.0.self_attn.q_proj.weight'",
         "linear-attention layer"},
        {{"model.layers.3.linear_attn.A_log"},
         "'model.layers.3.linear_attn.A_log'",
         "full-attention layer"},
        {{"model.extra.weight", "model.layers.2.mlp.experts.0.up_proj.weight"},
         "tensor 'model.extra.weight'",
         "(and 1 more unused)"},
        {{"visual.blocks.0.norm1.weight"},
         "tensor 'visual.blocks.0.norm1.weight'",
         "no part of the configured model"},
    };
    char dir[128];
    make_dir("var_unused", dir, sizeof dir);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        hy_st_wtensor extra[2] = {small_tensor(cases[i].added[0])};
        size_t n = 1;
        if (cases[i].added[1]) extra[n++] = small_tensor(cases[i].added[1]);
        write_variant(dir, (edit){.extra = extra, .n_extra = n}, NULL);
        open_fails(dir, HY_EFORMAT, "/model.safetensors: ", cases[i].frag1, cases[i].frag2);
    }
    /* a routed layer holds no dense MLP */
    char moe[128];
    make_dir("var_unused_moe", moe, sizeof moe);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_init("tiny-moe", 7, moe, "F32", &e), HY_OK);
    hy_st_wtensor dense = small_tensor("model.layers.1.mlp.up_proj.weight");
    write_variant(dir, (edit){.src = moe, .extra = &dense, .n_extra = 1}, NULL);
    open_fails(dir, HY_EFORMAT, "'model.layers.1.mlp.up_proj.weight'", "routed (MoE)", NULL);
    /* shared-expert tensors with no shared expert configured */
    write_variant(dir, (edit){.src = moe}, "{\"shared_expert_intermediate_size\": 0}");
    open_fails(dir, HY_EFORMAT, "tensor 'model.layers.1.mlp.shared_expert.down_proj.weight'",
               "shared_expert_intermediate_size is 0", "more unused");
    char q35[256];
    golden_dir("qwen35_moe", q35, sizeof q35);
    write_variant(dir, (edit){.src = q35}, "{\"shared_expert_intermediate_size\": 0}");
    open_fails(dir, HY_EFORMAT, "tensor 'model.layers.0.mlp.shared_expert.down_proj.weight'",
               "shared_expert_intermediate_size is 0", NULL);
}

static void test_vision_and_mtp_skipped(void)
{
    char dir[128];
    make_dir("var_skip", dir, sizeof dir);
    hy_st_wtensor extra[] = {small_tensor("model.visual.blocks.0.attn.qkv.weight"),
                             small_tensor("model.visual.merger.linear_fc2.weight"),
                             small_tensor("model.visual.patch_embed.proj.bias"),
                             small_tensor("mtp.fc.weight"),
                             small_tensor("mtp.layers.0.input_layernorm.weight")};
    write_variant(dir, (edit){.extra = extra, .n_extra = 5}, NULL);
    char *log;
    hy_model *m = open_logged(dir, &log);
    CU_ASSERT_EQUAL(count_lines(log, "hypic"), 2); /* one line each, nothing else */
    CU_ASSERT_EQUAL(count_lines(log, "skipping the vision tower (3 tensors model.visual.*): the "
                                     "text executor does not run it"),
                    1);
    CU_ASSERT_EQUAL(count_lines(log, "skipping the multi-token-prediction head (2 tensors mtp.*)"),
                    1);
    if (count_lines(log, "hypic") != 2) fprintf(stderr, "\n  log:\n%s", log);
    hy_free(log);
    hy_model_close(m);
    /* only the vision tower: one line */
    write_variant(dir, (edit){.extra = extra, .n_extra = 1}, NULL);
    m = open_logged(dir, &log);
    CU_ASSERT_EQUAL(count_lines(log, "hypic"), 1);
    CU_ASSERT_EQUAL(count_lines(log, "vision tower (1 tensors"), 1);
    hy_free(log);
    hy_model_close(m);
    /* a real composite checkpoint (transformers' save_pretrained) */
    char gd[256];
    golden_dir("qwen35_nested_tie_top", gd, sizeof gd);
    m = open_logged(gd, &log);
    CU_ASSERT_EQUAL(count_lines(log, "skipping the vision tower (21 tensors"), 1);
    hy_free(log);
    hy_model_close(m);
}

static void test_tie_at_open(void)
{
    char dir[128];
    make_dir("var_tie", dir, sizeof dir);
    hy_model *intact = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&intact, g_intact, &e), HY_OK);
    const hy_model_config *c = hy_model_cfg(intact);
    CU_ASSERT_TRUE_FATAL(c->tie_embeddings);
    const size_t VH = (size_t)c->vocab * c->hidden;
    /* tied, and lm_head.weight present: used, as transformers does (equal
     * values tie; different ones stay apart, with a warning) */
    float *head = malloc(VH * sizeof(float));
    for (size_t i = 0; i < VH; i++) head[i] = intact->embed[i];
    hy_st_wtensor lm = {.name = "lm_head.weight",
                        .dtype = HY_DT_F32,
                        .ndim = 2,
                        .shape = {c->vocab, c->hidden},
                        .data = head};
    write_variant(dir, (edit){.extra = &lm, .n_extra = 1}, NULL);
    char *log;
    hy_model *m = open_logged(dir, &log);
    CU_ASSERT_EQUAL(memcmp(m->lm_head, intact->embed, VH * sizeof(float)), 0);
    CU_ASSERT_EQUAL(count_lines(log, "differs"), 0);
    hy_free(log);
    hy_model_close(m);
    for (size_t i = 0; i < VH; i++) head[i] = 2.0f * intact->embed[i];
    write_variant(dir, (edit){.extra = &lm, .n_extra = 1}, NULL);
    m = open_logged(dir, &log);
    CU_ASSERT_PTR_NOT_EQUAL(m->lm_head, m->embed);
    CU_ASSERT_EQUAL(memcmp(m->lm_head, head, VH * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(m->embed, intact->embed, VH * sizeof(float)), 0);
    CU_ASSERT_EQUAL(count_lines(log, "tie_word_embeddings is true but lm_head.weight differs"), 1);
    hy_free(log);
    hy_model_close(m);
    free(head);
    /* tied, only lm_head.weight: the embedding is taken from it */
    write_variant(dir,
                  (edit){.rename_from = "model.embed_tokens.weight", .rename_to = "lm_head.weight"},
                  NULL);
    m = open_logged(dir, &log);
    CU_ASSERT_PTR_EQUAL(m->lm_head, m->embed);
    CU_ASSERT_EQUAL(memcmp(m->embed, intact->embed, VH * sizeof(float)), 0);
    hy_free(log);
    hy_model_close(m);
    hy_model_close(intact);

    /* composites: the top-level flag decides */
    char tied[256], untied[256];
    golden_dir("qwen35_nested_tie_top", tied, sizeof tied);
    golden_dir("qwen35_moe_nested_untie_top", untied, sizeof untied);
    write_variant(dir, (edit){.src = tied}, "{\"tie_word_embeddings\": false}");
    open_fails(dir, HY_ENOTFOUND, "tensor 'lm_head.weight' is missing", NULL, NULL);
    write_variant(dir, (edit){.src = tied, .text_patch = "{\"tie_word_embeddings\": true}"}, NULL);
    m = open_logged(dir, &log);
    CU_ASSERT_PTR_EQUAL(m->lm_head, m->embed);
    hy_free(log);
    hy_model_close(m);
    write_variant(dir, (edit){.src = untied, .drop = "lm_head.weight"}, NULL);
    open_fails(dir, HY_ENOTFOUND, "tensor 'lm_head.weight' is missing", NULL, NULL);
    write_variant(dir, (edit){.src = untied, .text_patch = "{\"tie_word_embeddings\": false}"},
                  "{\"tie_word_embeddings\": true}");
    m = open_logged(dir, &log);
    CU_ASSERT_TRUE(hy_model_cfg(m)->tie_embeddings);
    CU_ASSERT_PTR_NOT_EQUAL(m->lm_head, m->embed); /* its own head, which differs */
    CU_ASSERT_EQUAL(count_lines(log, "lm_head.weight differs"), 1);
    hy_free(log);
    hy_model_close(m);
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

/* --- the suite ------------------------------------------------------------- */

int main(void)
{
    if (hy_test_mkdtemp("hy_test_cfg_", g_dir, sizeof g_dir)) return 1;
    snprintf(g_intact, sizeof g_intact, "%s/tiny", g_dir);
    hy_err e = {0};
    if (hy_model_init("tiny", 1, g_intact, "F32", &e) != HY_OK) {
        fprintf(stderr, "hy_model_init: %s\n", e.msg);
        hy_test_rmtree(g_dir);
        return 1;
    }
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
        {"intact tiny opens", test_intact_tiny_opens},
        {"open: a tensor missing", test_missing_tensor},
        {"open: a tensor of the wrong shape", test_wrong_shape},
        {"open: an I32 weight", test_integer_weight},
        {"open: config disagrees with the tensors", test_config_disagrees_with_tensors},
        {"open: config.json or tensors missing", test_missing_files},
        {"open: sharded tiny", test_sharded_tiny_opens},
        {"open: tiny-moe", test_tiny_moe_opens},
        {"open: BF16 tiny", test_bf16_tiny_opens},
        {"open: a tensor the configuration leaves unused", test_unused_tensor_is_an_error},
        {"open: vision tower and MTP head skipped, one line each", test_vision_and_mtp_skipped},
        {"open: tie_word_embeddings as transformers ties", test_tie_at_open},
        {"docs/config-keys.md holds the table", test_doc_table_matches},
        {NULL, NULL},
    };
    int rc = hy_test_main("config", cases);
    hy_test_rmtree(g_dir);
    return rc;
}
