/* Tiny check macros shared by the plugin tests: count failures, never abort. */
#ifndef S4D_TESTS_PLUGIN_TEST_H
#define S4D_TESTS_PLUGIN_TEST_H

#include <stdio.h>
#include <string.h>

static int g_failures;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
            g_failures++;                                                              \
        }                                                                              \
    } while (0)

#define CHECK_STATUS(expr, want)                                                       \
    do {                                                                               \
        s4d_status st_ = (expr);                                                       \
        if (st_ != (want)) {                                                           \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, \
                    #expr, s4d_status_string(st_), s4d_status_string(want));           \
            g_failures++;                                                              \
        }                                                                              \
    } while (0)

/* Every substring in the NULL-terminated list must occur in msg. */
#define CHECK_MSG(msg, ...)                                                            \
    do {                                                                               \
        const char *subs_[] = {__VA_ARGS__, NULL};                                     \
        for (int k_ = 0; subs_[k_]; k_++) {                                            \
            if (!strstr((msg), subs_[k_])) {                                           \
                fprintf(stderr, "%s:%d: message lacks \"%s\": %s\n", __FILE__, __LINE__, \
                        subs_[k_], (msg));                                             \
                g_failures++;                                                          \
            }                                                                          \
        }                                                                              \
    } while (0)

#define TEST_DONE(name)                                                                \
    do {                                                                               \
        if (g_failures) {                                                              \
            fprintf(stderr, "%s: %d check(s) failed\n", name, g_failures);             \
            return 1;                                                                  \
        }                                                                              \
        printf("%s: all checks passed\n", name);                                       \
        return 0;                                                                      \
    } while (0)

#endif
