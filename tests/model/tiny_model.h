/*
 * The `tiny` model (seed 1, F32) a model test runs on, made in a fresh
 * temporary folder, and the test's main around it.
 */
#ifndef HY_TEST_TINY_MODEL_H
#define HY_TEST_TINY_MODEL_H

#include "hy_model.h"
#include "test_util.h"

#include <stdio.h>

/* Makes the folder (its name from prefix, into tmp) and the model in it:
 * 0, or 1 with the reason on stderr. */
static inline int tiny_model_open(const char *prefix, char *tmp, size_t cap, hy_model **m)
{
    if (hy_test_mkdtemp(prefix, tmp, cap)) return 1;
    char dir[256];
    hy_err e = {0};
    snprintf(dir, sizeof dir, "%s/tiny", tmp);
    if (hy_model_init("tiny", 1, dir, "F32", &e) || hy_model_open(m, dir, &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    return 0;
}

/* Runs the suite's cases, then closes the model and removes the folder;
 * the failures' count. */
static inline int tiny_model_main(const char *suite, const hy_test_case *cases, hy_model *m,
                                  const char *tmp)
{
    const int failed = hy_test_main(suite, cases);
    hy_model_close(m);
    hy_test_rmtree(tmp);
    return failed;
}

#endif
