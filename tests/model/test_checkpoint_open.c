/*
 * hy_model_open on generated checkpoints.
 *
 * A generated "tiny" checkpoint is rewritten with every tensor in turn
 * missing, reshaped or retyped, with tensors the configuration leaves unused,
 * with a vision tower and an MTP head (skipped, one log line each), and with
 * configs that disagree with its tensors; each open must fail naming the
 * tensor, and the intact checkpoint must still open after every failure.
 * Sharded, MoE and BF16 checkpoints open to the same model, and
 * tie_word_embeddings ties the head at open as transformers does. Parsing
 * config.json alone is test_config.c.
 */
#include "config_fixture.h"
#include "model_internal.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    /* Ling's multi-token-prediction layer after the last (num_nextn_predict_layers)
     * and model.mtp.*: skipped; without the setting, the layer is an error */
    char ling[128];
    make_dir("var_ling", ling, sizeof ling);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_init("tiny-ling", 3, ling, "F32", &e), HY_OK);
    hy_st_wtensor mtp[] = {small_tensor("model.layers.4.attention.q_proj.weight"),
                           small_tensor("model.layers.4.mlp.gate.weight"),
                           small_tensor("model.mtp.norm.weight")};
    write_variant(dir, (edit){.src = ling, .extra = mtp, .n_extra = 3},
                  "{\"num_nextn_predict_layers\": 1}");
    m = open_logged(dir, &log);
    CU_ASSERT_EQUAL(count_lines(log, "skipping the multi-token-prediction head (3 tensors in the "
                                     "layers after the last and model.mtp.*)"),
                    1);
    hy_free(log);
    hy_model_close(m);
    write_variant(dir, (edit){.src = ling, .extra = mtp, .n_extra = 3},
                  "{\"num_nextn_predict_layers\": 0}");
    open_fails(dir, HY_EFORMAT, "'model.layers.4.", "belongs to layer 4", "num_hidden_layers = 4");
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

/* --- the suite ------------------------------------------------------------- */

int main(void)
{
    if (hy_test_mkdtemp("hy_test_ckpt_", g_dir, sizeof g_dir)) return 1;
    snprintf(g_intact, sizeof g_intact, "%s/tiny", g_dir);
    hy_err e = {0};
    if (hy_model_init("tiny", 1, g_intact, "F32", &e) != HY_OK) {
        fprintf(stderr, "hy_model_init: %s\n", e.msg);
        hy_test_rmtree(g_dir);
        return 1;
    }
    static const hy_test_case cases[] = {
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
        {NULL, NULL},
    };
    return run_suite_and_remove_dir("checkpoint_open", cases);
}
