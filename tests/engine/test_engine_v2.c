/*
 * What engine core v2 added, through the public API: build-time input specs
 * (--shapes), the plugin ABI 2 lifecycle and ABI 1 compatibility, and the
 * engine file's sections (optional ones skipped, unknown required ones and
 * another target refused).
 *
 *   test_engine_v2 CASE MODELS_DIR LIB_DIRS   (LIB_DIRS: ":"-separated folders holding
 *                                              the example and test plugin libraries)
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s4d/engine.h"

static int g_failures;
static const char *g_models, *g_libs;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            g_failures++;                                                                          \
        }                                                                                          \
    } while (0)

static const char *path_of(const char *dir, const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", dir, name);
    return buf;
}

static uint32_t next_rand(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* ---- --shapes ------------------------------------------------------------------------------ */

static void case_shapes(void)
{
    char p[4096];
    path_of(g_models, "shape_input.onnx", p, sizeof p);
    s4d_engine *e = NULL;
    s4d_errbuf err;
    /* Without specs: one message names the open input and the remedy. */
    s4d_status st = s4d_engine_build_onnx_file(p, NULL, &e, &err);
    printf("  no specs -> %s: %s\n", s4d_status_string(st), err.msg);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(err.msg, "'x'") && strstr(err.msg, "axis 0 'N'") &&
              strstr(err.msg, "--shapes"),
          "%s", err.msg);
    /* The batch axis fixed, the shape input frozen to [3, 2, 4] (AUTO: it has a static shape). */
    s4d_input_spec specs[2];
    memset(specs, 0, sizeof specs);
    specs[0].name = "x";
    specs[0].kind = S4D_INPUT_SPEC_SHAPE;
    specs[0].rank = 2;
    specs[0].dims[0] = 4;
    specs[0].dims[1] = 6;
    specs[1].name = "shape";
    specs[1].rank = 3;
    specs[1].dims[0] = 3;
    specs[1].dims[1] = 2;
    specs[1].dims[2] = 4;
    s4d_build_options bo;
    s4d_build_options_init(&bo);
    bo.input_specs = specs;
    bo.num_input_specs = 2;
    st = s4d_engine_build_onnx_file(p, &bo, &e, &err);
    CHECK(st == S4D_OK, "%s", err.msg);
    if (st != S4D_OK)
        return;
    s4d_tensor_info ti;
    s4d_engine_output_info(e, 0, &ti);
    CHECK(ti.rank == 3 && ti.dims[0] == 3 && ti.dims[1] == 2 && ti.dims[2] == 4,
          "output rank %d", ti.rank);
    /* The Reshape's shape became a constant: no layer reads the input any more. */
    for (int i = 0; i < s4d_engine_num_layers(e); i++) {
        for (int k = 0;; k++) {
            s4d_tensor_info li;
            if (s4d_engine_layer_tensor(e, i, 0, k, &li) != S4D_OK)
                break;
            CHECK(strcmp(li.name, "shape") != 0, "layer %d still reads the shape input", i);
        }
    }
    s4d_context *c = NULL;
    CHECK(s4d_context_create(e, NULL, &c, &err) == S4D_OK, "%s", err.msg);
    float x[24];
    int64_t good[3] = {3, 2, 4}, bad[3] = {2, 3, 4}, xd[2] = {4, 6}, sd[1] = {3};
    for (int i = 0; i < 24; i++)
        x[i] = (float)(i % 7) - 3.0f;
    CHECK(s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 2, xd, x) == S4D_OK, "%s",
          s4d_context_errmsg(c));
    CHECK(s4d_context_bind(c, "shape", S4D_DTYPE_INT64, 1, sd, good) == S4D_OK, "%s",
          s4d_context_errmsg(c));
    CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
    const float *y = NULL;
    s4d_context_output(c, "y", (const void **)&y, NULL);
    for (int i = 0; y && i < 24; i++)
        CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f), "y[%d] = %g", i, y[i]);
    /* Other values than the build's: refused, naming the input. */
    CHECK(s4d_context_bind(c, "shape", S4D_DTYPE_INT64, 1, sd, bad) == S4D_OK, "%s",
          s4d_context_errmsg(c));
    st = s4d_context_run(c, NULL);
    printf("  other shape values at run time -> %s: %s\n", s4d_status_string(st),
           s4d_context_errmsg(c));
    CHECK(st == S4D_ERR_SHAPE && strstr(s4d_context_errmsg(c), "'shape'"), "%s",
          s4d_context_errmsg(c));
    s4d_context_destroy(c);
    s4d_engine_destroy(e);
    /* A spec for an input the model does not have, and a contradicting shape. */
    specs[1].name = "nope";
    st = s4d_engine_build_onnx_file(p, &bo, &e, &err);
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(err.msg, "'nope'") && strstr(err.msg, "'shape'"),
          "%s", err.msg);
    specs[1].name = "shape";
    specs[0].dims[1] = 7;
    st = s4d_engine_build_onnx_file(p, &bo, &e, &err);
    CHECK(st == S4D_ERR_SHAPE && strstr(err.msg, "dim 1"), "%s", err.msg);
}

/* ---- plugin ABI 2 lifecycle and ABI 1 compatibility ------------------------------------------ */

/* Loads lib from the first directory of the ':'-separated g_libs that has it. */
static s4d_plugin_registry *registry_with(const char *lib)
{
    s4d_plugin_registry *r = NULL;
    CHECK(s4d_plugin_registry_create(&r) == S4D_OK, "registry");
    s4d_status st = S4D_ERR_NOT_FOUND;
    for (const char *d = g_libs; d && *d && st != S4D_OK;) {
        const char *e = strchr(d, ':');
        size_t len = e ? (size_t)(e - d) : strlen(d);
        char p[4096];
        snprintf(p, sizeof p, "%.*s/%s", (int)len, d, lib);
        FILE *f = fopen(p, "rb");
        if (f) {
            fclose(f);
            st = s4d_plugin_registry_load_library(r, p);
            CHECK(st == S4D_OK, "%s", s4d_plugin_registry_errmsg(r));
        }
        d = e ? e + 1 : d + len;
    }
    CHECK(st == S4D_OK, "%s not found in %s", lib, g_libs);
    return r;
}

/* The table interpolation Lut computes, in float64 from its own definition. */
static double lut_ref(double x)
{
    const double lo = -3, hi = 3;
    const int n = 64;
    double u = (x - lo) / ((hi - lo) / n);
    u = u > 0 ? (u < n ? u : n) : 0;
    int k = (int)u;
    if (k == n)
        k--;
    double f = u - k;
    return (1 - f) * (double)(float)tanh(lo + (hi - lo) * k / n) +
           f * (double)(float)tanh(lo + (hi - lo) * (k + 1) / n);
}

static int run_lut(const s4d_engine *e, const float *x, float *y)
{
    s4d_context *c = NULL;
    s4d_errbuf err;
    int64_t d[2] = {4, 50};
    int ok = s4d_context_create(e, NULL, &c, &err) == S4D_OK;
    CHECK(ok, "%s", err.msg);
    ok = ok && s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 2, d, (void *)x) == S4D_OK &&
         s4d_context_bind(c, "y", S4D_DTYPE_FLOAT32, 2, d, y) == S4D_OK &&
         s4d_context_run(c, NULL) == S4D_OK;
    CHECK(ok, "%s", c ? s4d_context_errmsg(c) : "no context");
    s4d_context_destroy(c);
    return ok;
}

static void case_plugin_lifecycle(void)
{
    s4d_plugin_registry *r = registry_with("libs4d_example_lut.so");
    char p[4096];
    s4d_build_options bo;
    s4d_build_options_init(&bo);
    bo.registry = r;
    s4d_engine *e = NULL;
    s4d_errbuf err;
    s4d_status st = s4d_engine_build_onnx_file(path_of(g_models, "lut.onnx", p, sizeof p), &bo, &e,
                                               &err);
    CHECK(st == S4D_OK, "%s", err.msg);
    if (st != S4D_OK) {
        s4d_plugin_registry_destroy(r);
        return;
    }
    float x[200], y[200], y2[200];
    uint32_t s = 7;
    for (int i = 0; i < 200; i++)
        x[i] = (float)((int)(next_rand(&s) % 8001) - 4000) / 1000.0f; /* [-4, 4]: past the table */
    /* configure built the table and attach gave the context its state: else enqueue fails. */
    CHECK(run_lut(e, x, y), "run");
    double worst = 0;
    for (int i = 0; i < 200; i++)
        worst = fmax(worst, fabs(y[i] - lut_ref(x[i])));
    printf("  example::Lut (configure, attach): max abs error %.2e vs float64\n", worst);
    CHECK(worst < 1e-6, "error %g", worst);
    /* A second context of the same engine, and the engine saved and loaded again (configure
       runs at load too). */
    CHECK(run_lut(e, x, y2) && memcmp(y, y2, sizeof y) == 0, "second context");
    void *blob = NULL;
    size_t size = 0;
    CHECK(s4d_engine_serialize(e, &blob, &size) == S4D_OK, "%s", s4d_engine_errmsg(e));
    s4d_load_options lo;
    s4d_load_options_init(&lo);
    lo.registry = r;
    s4d_engine *e2 = NULL;
    CHECK(s4d_engine_load_memory(blob, size, &lo, &e2, &err) == S4D_OK, "%s", err.msg);
    memset(y2, 0, sizeof y2);
    CHECK(e2 && run_lut(e2, x, y2) && memcmp(y, y2, sizeof y) == 0, "after load");
    s4d_engine_destroy(e2);
    s4d_free(blob);
    s4d_engine_destroy(e);
    /* Negotiation: float16 is refused position by position, named. */
    st = s4d_engine_build_onnx_file(path_of(g_models, "lut_f16.onnx", p, sizeof p), &bo, &e, &err);
    printf("  float16 input -> %s: %s\n", s4d_status_string(st), err.msg);
    CHECK(st != S4D_OK && strstr(err.msg, "'lut'") && strstr(err.msg, "input 0") &&
              strstr(err.msg, "float16"),
          "%s", err.msg);
    s4d_plugin_registry_destroy(r);
}

static void case_plugin_abi1(void)
{
    s4d_plugin_registry *r = registry_with("libs4d_test_v1_affine.so");
    char p[4096];
    s4d_build_options bo;
    s4d_build_options_init(&bo);
    bo.registry = r;
    s4d_engine *e = NULL;
    s4d_errbuf err;
    s4d_status st = s4d_engine_build_onnx_file(path_of(g_models, "v1affine.onnx", p, sizeof p),
                                               &bo, &e, &err);
    CHECK(st == S4D_OK, "%s", err.msg);
    if (st == S4D_OK) {
        s4d_context *c = NULL;
        CHECK(s4d_context_create(e, NULL, &c, &err) == S4D_OK, "%s", err.msg);
        float x[21], *y;
        int64_t d[2] = {3, 7};
        for (int i = 0; i < 21; i++)
            x[i] = 0.25f * (float)i - 2.0f;
        CHECK(s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 2, d, x) == S4D_OK, "bind");
        CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
        s4d_context_output(c, "y", (const void **)&y, NULL);
        for (int i = 0; y && i < 21; i++)
            CHECK(y[i] == 2.0f * x[i] + 1.0f, "y[%d] = %g", i, y[i]);
        printf("  ABI 1 library (compat::Affine): built and ran with ABI 1 descriptors\n");
        s4d_context_destroy(c);
        s4d_engine_destroy(e);
    }
    s4d_plugin_registry_destroy(r);
}

/* ---- engine file sections ---------------------------------------------------------------------- */

static uint64_t fnv(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Appends a section (id, flags, payload) after the header of a v2 engine, fixing the
   section count, body size and checksum; the new section goes first. */
static uint8_t *with_section(const uint8_t *blob, size_t size, const char id[4], uint32_t flags,
                             size_t *out_size)
{
    /* Section payloads start at 64-byte file offsets: a 48-byte gap, the 16-byte header,
       a 64-byte payload, then the old body (which starts at offset 40 + its own padding,
       re-aligned by moving it by 128 bytes). */
    size_t add = 128;
    uint8_t *b = calloc(1, size + add);
    memcpy(b, blob, 40);
    size_t at = 48;
    memcpy(b + at, id, 4);
    put_le(b + at + 4, flags, 4);
    put_le(b + at + 8, 64, 8);
    memset(b + at + 16, 0xAB, 64);
    memcpy(b + 40 + add, blob + 40, size - 40);
    put_le(b + 32, get_le(blob + 32, 4) + 1, 4);
    put_le(b + 16, size + add - 40, 8);
    put_le(b + 24, fnv(b + 40, size + add - 40), 8);
    *out_size = size + add;
    return b;
}

static void case_format_sections(void)
{
    char p[4096];
    s4d_engine *e = NULL;
    s4d_errbuf err;
    CHECK(s4d_engine_build_onnx_file(path_of(g_models, "mlp.onnx", p, sizeof p), NULL, &e,
                                     &err) == S4D_OK,
          "%s", err.msg);
    uint8_t *blob = NULL;
    size_t size = 0;
    CHECK(s4d_engine_serialize(e, (void **)&blob, &size) == S4D_OK, "serialize");
    s4d_engine_destroy(e);
    if (!blob)
        return;
    /* An optional section this build does not know: skipped. */
    size_t n;
    uint8_t *b = with_section(blob, size, "XTRA", 0, &n);
    s4d_status st = s4d_engine_load_memory(b, n, NULL, &e, &err);
    CHECK(st == S4D_OK, "optional section: %s", err.msg);
    s4d_engine_destroy(e);
    free(b);
    /* A required one: refused, naming it. */
    b = with_section(blob, size, "NEWR", 1, &n);
    st = s4d_engine_load_memory(b, n, NULL, &e, &err);
    printf("  unknown required section -> %s: %s\n", s4d_status_string(st), err.msg);
    CHECK(st == S4D_ERR_VERSION && strstr(err.msg, "NEWR"), "%s", err.msg);
    free(b);
    s4d_free(blob);
}

static void case_target_mismatch(void)
{
    /* An engine for the guarded test device (arch "guarded") loaded where CUDA is the real
       backend, or the other way round: refused with both targets named. */
    const char *t = getenv("S4D_TEST_BACKEND");
    char p[4096];
    s4d_build_options bo;
    s4d_build_options_init(&bo);
    bo.device = S4D_DEVICE_CUDA;
    s4d_engine *e = NULL;
    s4d_errbuf err;
    if (!t) {
        printf("  needs S4D_TEST_BACKEND=guarded for the build side; skipped\n");
        exit(77);
    }
    CHECK(s4d_engine_build_onnx_file(path_of(g_models, "mlp.onnx", p, sizeof p), &bo, &e, &err) ==
              S4D_OK,
          "%s", err.msg);
    void *blob = NULL;
    size_t size = 0;
    CHECK(e && s4d_engine_serialize(e, &blob, &size) == S4D_OK, "serialize");
    s4d_engine_destroy(e);
    if (!blob)
        return;
    unsetenv("S4D_TEST_BACKEND");
    s4d_status st = s4d_engine_load_memory(blob, size, NULL, &e, &err);
    printf("  guarded-device engine loaded for real CUDA -> %s: %s\n", s4d_status_string(st),
           err.msg);
    CHECK(st == S4D_ERR_NO_DEVICE || (st == S4D_ERR_VERSION && strstr(err.msg, "guarded") &&
                                      strstr(err.msg, "rebuild")),
          "%s", err.msg);
    s4d_engine_destroy(e);
    s4d_free(blob);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"shapes", case_shapes},
    {"plugin_lifecycle", case_plugin_lifecycle},
    {"plugin_abi1", case_plugin_abi1},
    {"format_sections", case_format_sections},
    {"target_mismatch", case_target_mismatch},
};

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_engine_v2 CASE MODELS_DIR LIB_DIR\n");
        return 2;
    }
    g_models = argv[2];
    g_libs = argv[3];
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
