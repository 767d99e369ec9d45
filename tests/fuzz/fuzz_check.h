/*
 * FUZZ_CHECK: an invariant of a fuzz target. A failure prints what broke and
 * aborts, which libFuzzer reports as a crash and saves the input for.
 */
#ifndef HY_FUZZ_CHECK_H
#define HY_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
