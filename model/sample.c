/*
 * Reading a forward pass's logits: the top candidates with their
 * probabilities, and a greedy continuation. What a service answers with, kept
 * beside the model so that a handler does not sort a vocabulary.
 */
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>

/* Whether a ranks below b: a smaller logit, or an equal one with a larger id. */
static int below(const hy_token_prob *a, const hy_token_prob *b)
{
    return a->logit < b->logit || (a->logit == b->logit && a->token > b->token);
}

/* Restores the min-heap (the least likely at the root) below slot i. */
static void sift_down(hy_token_prob *h, int n, int i)
{
    for (;;) {
        int m = i;
        const int l = 2 * i + 1, r = l + 1;
        if (l < n && below(&h[l], &h[m])) m = l;
        if (r < n && below(&h[r], &h[m])) m = r;
        if (m == i) return;
        const hy_token_prob t = h[i];
        h[i] = h[m], h[m] = t;
        i = m;
    }
}

void hy_top_k(const float *logits, int vocab, int k, hy_token_prob *out)
{
    if (k <= 0 || vocab <= 0) return;
    if (k > vocab) k = vocab;
    /* a min-heap of the k best so far: one pass over the vocabulary */
    int n = 0;
    for (int v = 0; v < vocab; v++) {
        const hy_token_prob c = {v, logits[v], 0.0f};
        if (n < k) {
            out[n++] = c;
            for (int i = n / 2 - 1; n == k && i >= 0; i--) sift_down(out, n, i);
        } else if (below(&out[0], &c)) {
            out[0] = c;
            sift_down(out, n, 0);
        }
    }
    if (n < k) /* fewer than k seen: never, since k <= vocab; heapify anyway */
        for (int i = n / 2 - 1; i >= 0; i--) sift_down(out, n, i);
    /* sorted, most likely first: pop the least likely to the back */
    for (int end = n - 1; end > 0; end--) {
        const hy_token_prob t = out[0];
        out[0] = out[end], out[end] = t;
        sift_down(out, end, 0);
    }
    /* probabilities: softmax over the whole vocabulary, in double */
    const float mx = out[0].logit;
    double z = 0;
    for (int v = 0; v < vocab; v++) z += exp((double)(logits[v] - mx));
    for (int i = 0; i < n; i++) out[i].prob = (float)(exp((double)(out[i].logit - mx)) / z);
}

int hy_exec_greedy(hy_exec *ex, hy_state *st, float *logits, size_t n, int32_t *out, size_t *got,
                   hy_err *err)
{
    const int V = st->m->cfg.vocab;
    *got = 0;
    if (n == 0) return HY_OK;
    out[(*got)++] = hy_argmax(logits, V);
    while (*got < n) {
        const int rc = hy_exec_decode(ex, st, out[*got - 1], logits, err);
        if (rc) return rc;
        out[(*got)++] = hy_argmax(logits, V);
    }
    return HY_OK;
}
