/*
 * The CHECK macro of the engine tests: a failed condition is reported with
 * its file, line and text plus a printf-style note, counted in g_failures,
 * and the test goes on.
 */
#ifndef S4D_TESTS_ENGINE_CHECK_H
#define S4D_TESTS_ENGINE_CHECK_H

#include <stdio.h>

static int g_failures;

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fputc('\n', stderr);                                                             \
            g_failures++;                                                                    \
        }                                                                                    \
    } while (0)

#endif
