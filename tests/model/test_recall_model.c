/*
 * The embedded default model (models/hypic-recall, trained by tools/train):
 * it loads, has the shape its card says, and the executor gives the greedy
 * answers transformers gave on held-out prompts
 * (tests/fixtures/recall/answers.txt, written by tools/train/train.py: a
 * "P" line is a prompt with '|' for newline, the "G" line after it the
 * three token ids transformers generated greedily).
 */
#include "hy_common.h"
#include "hy_model.h"
#include "test_util.h"

#include <string.h>

enum { MAX_PROMPTS = 16, MAX_LEN = 8192, ANSWER = 3 };

typedef struct prompt {
    char text[MAX_LEN];
    int32_t want[ANSWER];
} prompt;

static int read_fixture(prompt *p, int cap)
{
    FILE *f = fopen(HY_FIXTURES_DIR "/recall/answers.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char line[MAX_LEN + 8];
    int n = 0;
    while (n < cap && fgets(line, sizeof line, f)) {
        if (line[0] == 'P' && line[1] == ' ') {
            line[strcspn(line, "\n")] = 0;
            const size_t len = strlen(line + 2);
            CU_ASSERT_FATAL(len < sizeof p[n].text);
            memcpy(p[n].text, line + 2, len + 1);
            for (char *c = p[n].text; *c; c++)
                if (*c == '|') *c = '\n';
        } else if (line[0] == 'G' && line[1] == ' ') {
            int got = sscanf(line + 2, "%d %d %d", &p[n].want[0], &p[n].want[1], &p[n].want[2]);
            CU_ASSERT_EQUAL_FATAL(got, ANSWER);
            n++;
        }
    }
    fclose(f);
    return n;
}

static void test_loads_with_its_shape(void)
{
    hy_model *m;
    hy_err e = {0};
    int rc = hy_model_open(&m, HY_MODELS_DIR "/hypic-recall", &e);
    if (rc) printf("\n    %s", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
    const hy_model_config *c = hy_model_cfg(m);
    CU_ASSERT_EQUAL(c->vocab, 259);
    CU_ASSERT_EQUAL(c->hidden, 128);
    CU_ASSERT_EQUAL(c->n_layers, 8);
    int attn = 0;
    for (int i = 0; i < c->n_layers; i++) attn += c->layer_kind[i] == HY_LAYER_ATTENTION;
    CU_ASSERT_EQUAL(attn, 2); /* linear : full = 3 : 1 */
    printf("\n    %.2f M parameters", (double)hy_config_param_count(c) / 1e6);
    hy_model_close(m);
}

static void test_greedy_answers_equal_transformers(void)
{
    static prompt p[MAX_PROMPTS];
    const int n = read_fixture(p, MAX_PROMPTS);
    CU_ASSERT_FATAL(n >= 4);
    hy_model *m;
    hy_exec *ex;
    hy_state *st;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, HY_MODELS_DIR "/hypic-recall", &e), HY_OK);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 0, &ex, &e), HY_OK);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &st, &e), HY_OK);
    const int V = hy_model_cfg(m)->vocab;
    float *lg = malloc((size_t)V * sizeof *lg);
    static int32_t tok[MAX_LEN];
    int same = 0;
    for (int i = 0; i < n; i++) {
        const size_t nt = hy_tokenize_bytes(p[i].text, tok, MAX_LEN, V);
        hy_state_reset(st);
        int rc = hy_exec_prefill(ex, st, tok, nt, lg, &e);
        int32_t got[ANSWER];
        for (int j = 0; j < ANSWER && !rc; j++) {
            got[j] = hy_argmax(lg, V);
            if (j + 1 < ANSWER) rc = hy_exec_decode(ex, st, got[j], lg, &e);
        }
        CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
        const bool eq = memcmp(got, p[i].want, sizeof got) == 0;
        same += eq;
        printf("\n    prompt %d (%zu tokens): executor \"%c%c%c\", transformers \"%c%c%c\"%s", i, nt,
               got[0] - 3, got[1] - 3, got[2] - 3, p[i].want[0] - 3, p[i].want[1] - 3,
               p[i].want[2] - 3, eq ? "" : "  DIFFERENT");
    }
    CU_ASSERT_EQUAL(same, n);
    free(lg);
    hy_state_free(st);
    hy_exec_free(ex);
    hy_model_close(m);
}

int main(void)
{
    const hy_test_case cases[] = {
        {"loads_with_its_shape", test_loads_with_its_shape},
        {"greedy_answers_equal_transformers", test_greedy_answers_equal_transformers},
        {NULL, NULL},
    };
    return hy_test_main("recall_model", cases);
}
