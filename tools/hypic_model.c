/*
 * hypic-model: make, describe and run checkpoints.
 *
 *   hypic-model init --preset NAME --seed N --out DIR [--dtype F32|BF16]
 *   hypic-model presets
 *   hypic-model info DIR
 *   hypic-model entry-size CONFIG [--tokens N]
 *   hypic-model run DIR (--tokens FILE | --text STR) [--top K] [--recurrent] [--batch N]
 *                   [--weights auto|f32|bf16|q8]
 *
 * `presets` prints the names `init --preset` (and hypic-cached's
 * --init-models) take, one a line.
 *
 * `entry-size` reads only a config.json (CONFIG is the file or its folder)
 * and prints what a cached segment of N tokens (512 by default) holds for
 * that model: per linear layer T, S and the conv tail, per attention layer K
 * and V per body token, and the total with S in fp32 and in bf16. It is how
 * docs/models.md sizes the entries of the published full-size checkpoints.
 *
 * `run` prefills the prompt from the empty state and prints the top-k next
 * tokens with their probabilities and the prefill time. --tokens reads
 * whitespace-separated token ids; --text uses the embedded models' byte
 * tokenizer (byte + 3). --weights f32 widens a BF16 checkpoint's matrices to
 * fp32 rather than keeping them in bf16; bf16 multiplies in bf16 where the
 * CPU can; q8 quantises any checkpoint's matrices to 8 bits (hy_weights).
 */
#include "hy_model.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage:\n"
                    "  hypic-model init --preset NAME --seed N --out DIR [--dtype F32|BF16]\n"
                    "  hypic-model presets\n"
                    "  hypic-model info DIR\n"
                    "  hypic-model entry-size CONFIG [--tokens N]\n"
                    "  hypic-model run DIR (--tokens FILE | --text STR) [--top K] [--recurrent] "
                    "[--batch N] [--weights auto|f32|bf16|q8]\n"
                    "presets:");
    for (int i = 0; hy_presets[i]; i++) fprintf(stderr, " %s", hy_presets[i]);
    fputc('\n', stderr);
    return 2;
}

static int fail(const hy_err *e)
{
    fprintf(stderr, "hypic-model: %s (%s)\n", e->msg, hy_strerror(e->code));
    return 1;
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int cmd_init(int argc, char **argv)
{
    const char *preset = NULL, *out = NULL, *dtype = "F32";
    long seed = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--preset") == 0 && i + 1 < argc)
            preset = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc)
            dtype = argv[++i];
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            if (parse_long(argv[++i], 0, 0x7fffffffffffffffL, &seed)) {
                fprintf(stderr, "hypic-model: --seed '%s' is not a non-negative integer\n",
                        argv[i]);
                return 2;
            }
        } else
            return usage();
    }
    if (!preset || !out) return usage();
    hy_err e = {0};
    if (hy_model_init(preset, (uint64_t)seed, out, dtype, &e)) return fail(&e);
    printf("wrote preset '%s' (seed %ld, %s) to %s\n", preset, seed, dtype, out);
    return 0;
}

static int cmd_presets(int argc, char **argv)
{
    (void)argv;
    if (argc != 0) return usage();
    for (int i = 0; hy_presets[i]; i++) printf("%s\n", hy_presets[i]);
    return 0;
}

static void human_bytes(double b, char *buf, size_t n)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    snprintf(buf, n, "%.1f %s", b, u[i]);
}

static int cmd_info(int argc, char **argv)
{
    if (argc != 1) return usage();
    hy_err e = {0};
    hy_model *m;
    if (hy_model_open(&m, argv[0], &e)) return fail(&e);
    const hy_model_config *c = hy_model_cfg(m);
    int nlin = 0, natt = 0, nmoe = 0, nmlp = 0;
    for (int i = 0; i < c->n_layers; i++) {
        nlin += c->layer_kind[i] == HY_LAYER_LINEAR;
        natt += c->layer_kind[i] == HY_LAYER_ATTENTION;
        nmlp += c->layer_kind[i] == HY_LAYER_MLP;
        nmoe += c->layer_moe[i];
    }
    char b1[32], b2[32];
    size_t params = hy_config_param_count(c);
    printf("model        %s\n", argv[0]);
    printf("architecture %s (model_type %s)\n", c->arch_name, c->model_type);
    printf("parameters   %zu (%.2f M)\n", params, (double)params / 1e6);
    printf("weights      matrices in %s: %.1f MB\n", hy_model_weights_name(m),
           (double)hy_model_matrix_bytes(m) / 1e6);
    if (nmlp)
        printf("vocab %d, hidden %d, layers %d (%d linear, %d attention, %d MLP alone of which %d "
               "MoE), %s embeddings\n",
               c->vocab, c->hidden, c->n_layers, nlin, natt, nmlp, nmoe,
               c->tie_embeddings ? "tied" : "untied");
    else
        printf("vocab %d, hidden %d, layers %d (%d linear, %d attention, %d MoE), %s embeddings\n",
               c->vocab, c->hidden, c->n_layers, nlin, natt, nmoe,
               c->tie_embeddings ? "tied" : "untied");
    if (c->mla)
        printf("attention    MLA, %d heads: latent %d + shared key %d cached per token, expanded "
               "to keys %d + %d and values %d per head%s\n",
               c->n_heads, c->kv_lora, c->qk_rope, c->qk_nope, c->qk_rope, c->v_head,
               c->rotary_dim ? "" : ", no positional encoding");
    else if (c->rotary_dim == 0)
        printf("attention    %d q heads, %d kv heads, head_dim %d, no positional encoding\n",
               c->n_heads, c->n_kv_heads, c->head_dim);
    else
        printf("attention    %d q heads, %d kv heads, head_dim %d, rotary dims %d, theta %g\n",
               c->n_heads, c->n_kv_heads, c->head_dim, c->rotary_dim, c->rope_theta);
    if (c->lin_kind == HY_LIN_KDA)
        printf("linear (KDA) %d heads x %d, a decay per key channel, conv kernel %d\n",
               c->lin_v_heads, c->lin_dk, c->conv_kernel);
    else if (c->lin_kind == HY_LIN_LIGHTNING)
        printf("linear (lightning) %d heads x %d, a constant decay per head, no conv\n",
               c->lin_v_heads, c->lin_dk);
    else if (c->lin_kind == HY_LIN_MAMBA2)
        printf("linear (Mamba2) %d heads x %d channels, state %d, %d groups of B and C, a decay "
               "per head and token, conv kernel %d, dt >= %g in prompts\n",
               c->lin_v_heads, c->lin_dv, c->lin_dk, c->lin_k_heads, c->conv_kernel, c->dt_min);
    else
        printf("linear (GDN) %d key heads x %d, %d value heads x %d, conv kernel %d\n",
               c->lin_k_heads, c->lin_dk, c->lin_v_heads, c->lin_dv, c->conv_kernel);
    if (c->n_experts)
        printf("MoE          %d experts, top-%d, expert width %d%s, shared %d, renormalised %s\n",
               c->n_experts, c->top_k, c->moe_intermediate,
               c->mlp_act == HY_MLP_RELU2 ? " (relu²)" : "", c->shared_intermediate,
               c->norm_topk ? "yes" : "no");
    if (c->moe_latent) printf("             experts in a latent of %d\n", c->moe_latent);
    size_t lin_state = hy_config_linear_state_floats(c) * 4;
    /* K and V rows, and MLA's expansion of them */
    size_t kv_tok = ((size_t)hy_config_kv_k(c) + (size_t)hy_config_kv_v(c)) * 4 +
                    (c->mla ? (size_t)c->n_heads * (c->qk_nope + c->qk_rope + c->v_head) * 4 : 0);
    human_bytes((double)lin_state, b1, sizeof b1);
    human_bytes((double)kv_tok, b2, sizeof b2);
    printf("\nlayer  kind       mlp    state (fp32)\n");
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR)
            printf("%5d  linear     %-5s  S %dx%dx%d + conv %dx%d = %s\n", i,
                   c->layer_no_mlp[i] ? "-"
                   : c->layer_moe[i]  ? "moe"
                                      : "dense",
                   c->lin_v_heads, c->lin_dk, c->lin_dv, c->conv_kernel - 1, hy_config_conv_dim(c),
                   b1);
        else if (c->layer_kind[i] == HY_LAYER_MLP)
            printf("%5d  (none)     %-5s  no state\n", i, c->layer_moe[i] ? "moe" : "dense");
        else if (c->layer_no_mlp[i])
            printf("%5d  attention  -      K+V %s per token\n", i, b2);
        else
            printf("%5d  attention  %-5s  K+V %s per token\n", i, c->layer_moe[i] ? "moe" : "dense",
                   b2);
    }
    human_bytes((double)lin_state * nlin, b1, sizeof b1);
    human_bytes((double)kv_tok * natt, b2, sizeof b2);
    printf("total        %s constant + %s per token\n", b1, b2);
    hy_model_close(m);
    return 0;
}

static int cmd_entry_size(int argc, char **argv)
{
    if (argc != 1 && !(argc == 3 && strcmp(argv[1], "--tokens") == 0)) return usage();
    char *end = NULL;
    const long n = argc == 3 ? strtol(argv[2], &end, 10) : 512;
    if (argc == 3 && (*end || n < 2 || n > (1L << 24))) {
        fprintf(stderr, "hypic-model: --tokens %s: an integer in [2, 16777216]\n", argv[2]);
        return 2;
    }
    hy_err e = {0};
    hy_model_config c;
    const size_t len = strlen(argv[0]);
    int rc = len >= 5 && strcmp(argv[0] + len - 5, ".json") == 0 ? 0 : 1;
    if (rc == 0) {
        char *text = NULL;
        if (hy_read_file(argv[0], 16u << 20, &text, NULL, &e)) return fail(&e);
        rc = hy_config_parse(text, argv[0], &c, &e);
        hy_free(text);
    } else {
        rc = hy_config_load(argv[0], &c, &e);
    }
    if (rc) return fail(&e);
    int w = 0;
    if (hy_entry_seam(&c, (size_t)n, HY_SEAM_DEFAULT, &w, &e)) return fail(&e);
    const long nb = n - w;
    size_t k32, k16, tok;
    hy_entry_bytes_for(&c, HY_ENTRY_F32, &k32, &tok);
    hy_entry_bytes_for(&c, HY_ENTRY_BF16, &k16, &tok);
    int nlin = 0, natt = 0, nmlp = 0;
    for (int i = 0; i < c.n_layers; i++) {
        nlin += c.layer_kind[i] == HY_LAYER_LINEAR;
        natt += c.layer_kind[i] == HY_LAYER_ATTENTION;
        nmlp += c.layer_kind[i] == HY_LAYER_MLP;
    }
    const bool scalar_t = c.lin_kind == HY_LIN_LIGHTNING || c.lin_kind == HY_LIN_MAMBA2;
    const hy_entry_layer_bytes lb = hy_entry_layer_sizes(&c, HY_ENTRY_F32);
    const double T = (double)lb.t, S = (double)lb.s, tail = (double)lb.tail;
    const double kv = (double)(lb.k_per_token + lb.v_per_token);
    char b[6][32];
    human_bytes(T, b[0], sizeof b[0]);
    human_bytes(S, b[1], sizeof b[1]);
    human_bytes(tail, b[2], sizeof b[2]);
    human_bytes(kv, b[3], sizeof b[3]);
    printf("config       %s (model_type %s)\n", argv[0], c.model_type);
    if (nmlp)
        printf("layers       %d linear, %d attention, %d an MLP alone (nothing cached)\n", nlin,
               natt, nmlp);
    else
        printf("layers       %d linear, %d attention\n", nlin, natt);
    if (scalar_t && c.conv_kernel == 1)
        printf("linear layer T %d x 1 = %s, S(body|0) %d x %d x %d = %s (fp32), no conv tail\n",
               c.lin_v_heads, b[0], c.lin_v_heads, c.lin_dk, c.lin_dv, b[1]);
    else if (scalar_t)
        printf("linear layer T %d x 1 = %s, S(body|0) %d x %d x %d = %s (fp32), conv tail "
               "%d x %d = %s\n",
               c.lin_v_heads, b[0], c.lin_v_heads, c.lin_dk, c.lin_dv, b[1], c.conv_kernel - 1,
               hy_config_conv_dim(&c), b[2]);
    else
        printf("linear layer T %d x %d x %d = %s, S(body|0) %d x %d x %d = %s (fp32), conv tail "
               "%d x %d = %s\n",
               c.lin_v_heads, c.lin_dk, c.lin_dk, b[0], c.lin_v_heads, c.lin_dk, c.lin_dv, b[1],
               c.conv_kernel - 1, hy_config_conv_dim(&c), b[2]);
    if (c.mla)
        printf("attention    MLA latent %d + shared key %d = %s per body token\n", c.kv_lora,
               c.qk_rope, b[3]);
    else
        printf("attention    K + V %d x %d x 2 = %s per body token\n", c.n_kv_heads, c.head_dim,
               b[3]);
    human_bytes((double)k32, b[0], sizeof b[0]);
    human_bytes((double)k16, b[1], sizeof b[1]);
    human_bytes((double)tok, b[2], sizeof b[2]);
    human_bytes((double)k32 + (double)tok * nb, b[3], sizeof b[3]);
    human_bytes((double)k16 + (double)tok * nb, b[4], sizeof b[4]);
    printf("per entry    %s constant (S bf16: %s) + %s per body token\n", b[0], b[1], b[2]);
    printf("a %ld-token segment (seam %d, %ld body tokens): %s (S bf16: %s), %.0f bytes per body "
           "token\n",
           n, w, nb, b[3], b[4], ((double)k32 + (double)tok * nb) / (double)nb);
    printf("(exact entries; with a tolerance (pic.tolerance) each linear head takes a smaller "
           "form chosen from its states: hypic-bench quality --reprs measures them)\n");
    return 0;
}

static int read_tokens(const char *path, int32_t **out, size_t *n, hy_err *e)
{
    char *text;
    int rc = hy_read_file(path, 256u << 20, &text, NULL, e);
    if (rc) return rc;
    size_t cap = 1024, k = 0;
    int32_t *t = malloc(cap * sizeof *t);
    char *p = text;
    while (t) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > 0x7fffffff) {
            rc = hy_err_set(e, HY_EINVAL, "%s: token %zu is not a non-negative integer", path, k);
            break;
        }
        if (k == cap) {
            int32_t *nt = realloc(t, (cap *= 2) * sizeof *t);
            if (!nt) break;
            t = nt;
        }
        t[k++] = (int32_t)v;
        p = end;
    }
    hy_free(text);
    if (!t && !rc) rc = hy_err_set(e, HY_ENOMEM, "out of memory");
    if (!rc && k == 0) rc = hy_err_set(e, HY_EINVAL, "%s: no tokens", path);
    if (rc) {
        free(t);
        return rc;
    }
    *out = t;
    *n = k;
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    if (argc < 1) return usage();
    const char *dir = argv[0], *tokfile = NULL, *text = NULL;
    long top = 5, batch = 0;
    int recurrent = 0;
    hy_weights weights = HY_WEIGHTS_AUTO;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
            tokfile = argv[++i];
        else if (strcmp(argv[i], "--text") == 0 && i + 1 < argc)
            text = argv[++i];
        else if (strcmp(argv[i], "--top") == 0 && i + 1 < argc) {
            if (parse_long(argv[++i], 1, 1000, &top)) return usage();
        } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            if (parse_long(argv[++i], 1, 1 << 20, &batch)) return usage();
        } else if (strcmp(argv[i], "--recurrent") == 0)
            recurrent = 1;
        else if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc) {
            if (hy_weights_parse(argv[++i], &weights)) return usage();
        } else
            return usage();
    }
    if (!tokfile == !text) return usage();
    hy_err e = {0};
    hy_model *m = NULL;
    hy_state *st = NULL;
    hy_exec *ex = NULL;
    int32_t *tokens = NULL;
    float *logits = NULL;
    size_t n = 0;
    int rc = hy_model_open_with(&m, dir, weights, &e);
    const hy_model_config *c = rc ? NULL : hy_model_cfg(m);
    if (!rc && tokfile) rc = read_tokens(tokfile, &tokens, &n, &e);
    if (!rc && text) {
        size_t len = strlen(text);
        tokens = malloc((len + 1) * sizeof *tokens);
        n = tokens ? hy_tokenize_bytes(text, tokens, len, c->vocab) : 0;
        if (!tokens)
            rc = hy_err_set(&e, HY_ENOMEM, "out of memory");
        else if (n == 0)
            rc = hy_err_set(&e, HY_EINVAL, "--text is empty");
    }
    if (!rc) rc = hy_state_new(m, &st, &e);
    if (!rc) rc = hy_exec_new(m, (int)batch, &ex, &e);
    if (!rc && !(logits = malloc((size_t)c->vocab * sizeof *logits)))
        rc = hy_err_set(&e, HY_ENOMEM, "out of memory");
    double t0 = 0, t1 = 0;
    if (!rc) {
        if (recurrent) hy_exec_set_gdn_mode(ex, HY_GDN_RECURRENT);
        t0 = hy_now_s();
        rc = hy_exec_prefill(ex, st, tokens, n, logits, &e);
        t1 = hy_now_s();
    }
    if (!rc) {
        float mx = logits[0];
        for (int i = 1; i < c->vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
        double z = 0;
        for (int i = 0; i < c->vocab; i++) z += exp((double)(logits[i] - mx));
        printf("prefilled %zu tokens in %.3f ms (%.0f tokens/s, %s delta rule)\n", n,
               (t1 - t0) * 1e3, (double)n / (t1 - t0), recurrent ? "recurrent" : "chunked");
        printf("rank  token   logit      prob\n");
        for (long k = 0; k < top && k < c->vocab; k++) {
            int best = -1;
            for (int i = 0; i < c->vocab; i++)
                if (!isnan(logits[i]) && (best < 0 || logits[i] > logits[best])) best = i;
            if (best < 0) break;
            double pr = exp((double)(logits[best] - mx)) / z;
            char shown[8] = "";
            if (best >= 3 + 32 && best < 3 + 127) snprintf(shown, sizeof shown, "'%c'", best - 3);
            printf("%4ld  %5d  %8.4f  %.6f %s\n", k + 1, best, logits[best], pr, shown);
            logits[best] = NAN;
        }
    }
    free(logits);
    free(tokens);
    hy_exec_free(ex);
    hy_state_free(st);
    hy_model_close(m);
    return rc ? fail(&e) : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) return usage();
    if (strcmp(argv[1], "init") == 0) return cmd_init(argc - 2, argv + 2);
    if (strcmp(argv[1], "presets") == 0) return cmd_presets(argc - 2, argv + 2);
    if (strcmp(argv[1], "info") == 0) return cmd_info(argc - 2, argv + 2);
    if (strcmp(argv[1], "entry-size") == 0) return cmd_entry_size(argc - 2, argv + 2);
    if (strcmp(argv[1], "run") == 0) return cmd_run(argc - 2, argv + 2);
    return usage();
}
