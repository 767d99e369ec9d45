/*
 * llama-logits: the next-token logits llama.cpp computes after a prompt of
 * token ids, for the anchor's agreement check (tools/anchor/llamacpp.sh).
 *
 *   llama-logits MODEL.gguf TOKENS [THREADS]
 *
 * TOKENS holds whitespace-separated token ids (the format `hypic-model run
 * --tokens` reads). The prompt is decoded as one batch from an empty context,
 * no BOS added, logits kept for the last position only; every logit of the
 * vocabulary is printed, one "id logit" line each. Built by the anchor against
 * the libllama it builds; not part of the project's build.
 */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>

static void quiet(enum ggml_log_level level, const char *text, void *user)
{
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: llama-logits MODEL.gguf TOKENS [THREADS]\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        return 1;
    }
    int cap = 1024, n = 0;
    llama_token *tok = malloc(cap * sizeof *tok);
    long v;
    while (tok && fscanf(f, "%ld", &v) == 1) {
        if (n == cap) tok = realloc(tok, (cap *= 2) * sizeof *tok);
        if (tok) tok[n++] = (llama_token)v;
    }
    fclose(f);
    if (!tok || n == 0) {
        fprintf(stderr, "llama-logits: %s: no tokens\n", argv[2]);
        return 1;
    }

    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llama-logits: %s: cannot load\n", argv[1]);
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= n_vocab) {
            fprintf(stderr, "llama-logits: token %d (%d) is outside the vocabulary (%d)\n", i,
                    tok[i], n_vocab);
            return 1;
        }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n + 16;
    cp.n_batch = (uint32_t)n;
    cp.n_seq_max = 1;
    if (argc == 4) cp.n_threads = cp.n_threads_batch = atoi(argv[3]);
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama-logits: cannot create a context of %d tokens\n", n);
        return 1;
    }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = tok[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == n - 1;
    }
    b.n_tokens = n;
    int rc = llama_decode(ctx, b);
    if (rc) {
        fprintf(stderr, "llama-logits: llama_decode returned %d\n", rc);
        return 1;
    }
    const float *lg = llama_get_logits_ith(ctx, n - 1);
    for (int i = 0; i < n_vocab; i++) printf("%d %.9g\n", i, lg[i]);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(tok);
    return 0;
}
