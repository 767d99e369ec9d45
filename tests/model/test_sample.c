/*
 * Reading logits (model/sample.c): hy_top_k against a full sort — the same
 * tokens in the same order (ties: the lower id first), probabilities a
 * softmax over the whole vocabulary — for k from 1 to the vocabulary, with
 * ties and -inf among the logits.
 */
#include "hy_model.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>

static const float *g_logits;

static int by_logit(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_logits[x] != g_logits[y]) return g_logits[x] < g_logits[y] ? 1 : -1;
    return (x > y) - (x < y);
}

static void test_top_k_is_a_sort(void)
{
    enum { V = 300 };
    float logits[V];
    hy_rng r;
    hy_rng_seed(&r, 3);
    for (int v = 0; v < V; v++) logits[v] = (float)(int)(hy_rng_uniform(&r) * 40) / 4.0f; /* ties */
    logits[17] = -INFINITY;
    int order[V];
    for (int v = 0; v < V; v++) order[v] = v;
    g_logits = logits;
    qsort(order, V, sizeof *order, by_logit);
    double z = 0;
    for (int v = 0; v < V; v++) z += exp((double)logits[v] - logits[order[0]]);
    hy_token_prob *top = malloc(V * sizeof *top);
    const int ks[] = {1, 2, 5, 64, V - 1, V};
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        hy_top_k(logits, V, ks[i], top);
        int same = 1;
        double worst = 0;
        for (int j = 0; j < ks[i]; j++) {
            same &= top[j].token == order[j] && top[j].logit == logits[order[j]];
            const double p = exp((double)logits[order[j]] - logits[order[0]]) / z;
            worst = fmax(worst, fabs(p - top[j].prob));
        }
        CU_ASSERT(same);
        CU_ASSERT(worst < 1e-7);
    }
    free(top);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"top k: a sort's first k, softmax probabilities", test_top_k_is_a_sort},
        {NULL, NULL},
    };
    return hy_test_main("sample", cases);
}
