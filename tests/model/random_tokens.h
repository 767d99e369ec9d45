/*
 * Random token ids for the model tests: n ids in [0, vocab) from a seed
 * (the same seed, the same ids), malloc'd with 4 bytes to spare.
 */
#ifndef HY_TEST_RANDOM_TOKENS_H
#define HY_TEST_RANDOM_TOKENS_H

#include "hy_common.h"

#include <stdint.h>
#include <stdlib.h>

static inline int32_t *tokens(int n, int vocab, uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    int32_t *t = malloc((size_t)n * sizeof *t + 4);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(hy_rng_next(&r) % (uint64_t)vocab);
    return t;
}

#endif
