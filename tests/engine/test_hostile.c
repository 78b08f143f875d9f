/*
 * Hostile inputs, one case per process: test_hostile CASE CASES_DIR SCRATCH_DIR.
 * CASES_DIR comes from make_hostile.py. Each case is a defect once found by
 * fuzzing or by hand; it must end in a clear error or in the reference
 * result, never in a crash, a hang or an unbounded allocation.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "s4d/engine.h"

#include "check.h"

static const char *g_cases;
static const char *g_scratch;

static char *path_in(const char *dir, const char *name)
{
    static char buf[8][4096];
    static int next;
    char *p = buf[next++ % 8];
    snprintf(p, 4096, "%s/%s", dir, name);
    return p;
}

static void case_onnx_attr_tensor_null(void)
{
    const char *models[2] = {"attr_tensor_null_constant.onnx", "attr_tensor_null_node.onnx"};
    const char *nodes[2] = {"'const_no_tensor'", "'cos_no_tensor'"};
    for (int i = 0; i < 2; i++) {
        s4d_engine *e = NULL;
        s4d_errbuf err = {{0}};
        s4d_status st = s4d_engine_build_onnx_file(path_in(g_cases, models[i]), NULL, &e, &err);
        printf("  %s -> %s: %s\n", models[i], s4d_status_string(st), err.msg);
        CHECK(st == S4D_ERR_PARSE && e == NULL, "status %d", st);
        CHECK(strstr(err.msg, nodes[i]) && strstr(err.msg, "'value'") &&
                  strstr(err.msg, "holds no tensor"),
              "message: %s", err.msg);
        s4d_engine_destroy(e);
    }
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"onnx_attr_tensor_null", case_onnx_attr_tensor_null},
};

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_hostile CASE CASES_DIR SCRATCH_DIR\n");
        return 2;
    }
    g_cases = argv[2];
    g_scratch = argv[3];
    mkdir(g_scratch, 0777);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (strcmp(cases[i].name, argv[1]) == 0) {
            printf("case %s\n", argv[1]);
            cases[i].fn();
            printf("%s: %s\n", argv[1], g_failures ? "FAILED" : "passed");
            return g_failures ? 1 : 0;
        }
    }
    fprintf(stderr, "unknown case '%s'\n", argv[1]);
    return 2;
}
