/*
 * Hostile inputs, one case per process: test_hostile CASE CASES_DIR SCRATCH_DIR.
 * CASES_DIR comes from make_hostile.py. Each case is a defect once found by
 * fuzzing or by hand; it must end in a clear error or in the reference
 * result, never in a crash, a hang or an unbounded allocation.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "s4d/engine.h"
#include "s4d/npy.h"

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

/* Each reader refuses the path with S4D_ERR_IO and a message holding `want`. */
static void expect_refused(const char *path, const char *want)
{
    s4d_errbuf err = {{0}};
    s4d_engine *e = NULL;
    s4d_status st = s4d_engine_build_onnx_file(path, NULL, &e, &err);
    printf("  build %s -> %s: %s\n", path, s4d_status_string(st), err.msg);
    CHECK(st == S4D_ERR_IO && e == NULL && strstr(err.msg, path) && strstr(err.msg, want),
          "build: %d %s", st, err.msg);
    s4d_engine_destroy(e);
    e = NULL;
    st = s4d_engine_load_file(path, NULL, &e, &err);
    CHECK(st == S4D_ERR_IO && e == NULL && strstr(err.msg, path) && strstr(err.msg, want),
          "load: %d %s", st, err.msg);
    s4d_engine_destroy(e);
    s4d_npy a;
    st = s4d_npy_load(path, &a, &err);
    CHECK(st == S4D_ERR_IO && a.data == NULL && strstr(err.msg, path) && strstr(err.msg, want),
          "npy: %d %s", st, err.msg);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "a reader blocked on a FIFO or a device (no answer within 20 s)\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        _exit(3);
    _exit(1);
}

static void case_read_limits(void)
{
    /* A reader that waits on a pipe or reads /dev/zero until memory runs out fails here. */
    signal(SIGALRM, on_alarm);
    alarm(20);
    unsetenv("S4D_MAX_FILE_BYTES");
    expect_refused("/dev/zero", "not a regular file (a character device)");
    expect_refused(g_scratch, "not a regular file (a directory)");
    char *fifo = path_in(g_scratch, "fifo");
    unlink(fifo);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    expect_refused(fifo, "not a regular file (a pipe)");
    unlink(fifo);

    /* The size limit and its environment variable. */
    char *big = path_in(g_scratch, "3000_bytes.npy");
    FILE *f = fopen(big, "wb");
    for (int i = 0; f && i < 3000; i++)
        fputc(i * 7, f);
    CHECK(f && fclose(f) == 0, "cannot write %s", big);
    setenv("S4D_MAX_FILE_BYTES", "2999", 1);
    expect_refused(big, "3000 bytes, more than the limit of 2999");
    setenv("S4D_MAX_FILE_BYTES", "2K", 1);
    expect_refused(big, "S4D_MAX_FILE_BYTES");
    const char *malformed[] = {"abc", "0", "-5", "12Q", "99999999999999999999999", "1G5",
                               "20000000000000G"};
    for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++) {
        setenv("S4D_MAX_FILE_BYTES", malformed[i], 1);
        s4d_npy a;
        s4d_errbuf err = {{0}};
        s4d_status st = s4d_npy_load(big, &a, &err);
        if (i == 0)
            printf("  S4D_MAX_FILE_BYTES=%s -> %s: %s\n", malformed[i], s4d_status_string(st),
                   err.msg);
        CHECK(st == S4D_ERR_INVALID_ARG && strstr(err.msg, "S4D_MAX_FILE_BYTES") &&
                  strstr(err.msg, malformed[i]),
              "%s: %d %s", malformed[i], st, err.msg);
    }
    /* At or above the file's size the bytes are read and reach the parser. */
    const char *enough[] = {"3000", "3k", "1M", "1g"};
    for (size_t i = 0; i < sizeof enough / sizeof enough[0]; i++) {
        setenv("S4D_MAX_FILE_BYTES", enough[i], 1);
        s4d_npy a;
        s4d_errbuf err = {{0}};
        s4d_status st = s4d_npy_load(big, &a, &err);
        CHECK(st == S4D_ERR_PARSE && strstr(err.msg, "magic"), "%s: %d %s", enough[i], st,
              err.msg);
    }
    unsetenv("S4D_MAX_FILE_BYTES");
    s4d_npy a;
    s4d_errbuf err = {{0}};
    CHECK(s4d_npy_load(big, &a, &err) == S4D_ERR_PARSE, "default limit: %s", err.msg);
    alarm(0);
}

static s4d_npy load_npy(const char *name)
{
    s4d_npy a;
    s4d_errbuf err = {{0}};
    if (s4d_npy_load(path_in(g_cases, name), &a, &err) != S4D_OK) {
        fprintf(stderr, "cannot load %s: %s\n", name, err.msg);
        exit(1);
    }
    return a;
}

/* Grid values of inf, NaN and 1e30 once became int64 casts out of range (undefined). */
static void case_grid_sample_nonfinite(void)
{
    const char *names[] = {"gs_bilinear_zeros_0",      "gs_nearest_zeros_0",
                           "gs_bilinear_border_1",     "gs_bilinear_reflection_0",
                           "gs_bilinear_reflection_1", "gs_nearest_reflection_0"};
    s4d_npy x = load_npy("gs_x.npy"), grid = load_npy("gs_grid.npy");
    for (size_t m = 0; m < sizeof names / sizeof names[0]; m++) {
        char file[256];
        snprintf(file, sizeof file, "%s.onnx", names[m]);
        s4d_engine *e = NULL;
        s4d_context *ctx = NULL;
        s4d_errbuf err = {{0}};
        if (s4d_engine_build_onnx_file(path_in(g_cases, file), NULL, &e, &err) != S4D_OK ||
            s4d_context_create(e, NULL, &ctx, &err) != S4D_OK) {
            CHECK(0, "%s: %s", file, err.msg);
            s4d_engine_destroy(e);
            continue;
        }
        CHECK(s4d_context_bind(ctx, "x", x.dtype, x.rank, x.dims, x.data) == S4D_OK, "bind x");
        CHECK(s4d_context_bind(ctx, "grid", grid.dtype, grid.rank, grid.dims, grid.data) ==
                  S4D_OK,
              "bind grid");
        CHECK(s4d_context_run(ctx, NULL) == S4D_OK, "%s: %s", file, s4d_context_errmsg(ctx));
        const void *out = NULL;
        s4d_tensor_info ti;
        memset(&ti, 0, sizeof ti);
        s4d_context_output(ctx, "y", &out, &ti);
        size_t bytes = ti.bytes;
        snprintf(file, sizeof file, "%s_ref.npy", names[m]);
        s4d_npy ref = load_npy(file);
        CHECK(out && bytes == ref.bytes / 2, "%s: %zu output bytes", names[m], bytes);
        int bad = 0, nans = 0, zeros = 0;
        for (size_t i = 0; out && i < bytes / 4; i++) {
            double got = ((const float *)out)[i], want = ((const double *)ref.data)[i];
            nans += isnan(want);
            zeros += want == 0;
            if (isnan(want) ? !isnan(got) : !(fabs(got - want) <= 1e-5 + 1e-5 * fabs(want))) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s [%zu]: got %.9g, want %.9g\n", names[m], i, got, want);
            }
        }
        printf("  %s: %zu values (%d NaN, %d zero in the reference), %d off\n", names[m],
               bytes / 4, nans, zeros, bad);
        CHECK(bad == 0, "%s: %d values differ from the reference", names[m], bad);
        s4d_npy_free(&ref);
        s4d_context_destroy(ctx);
        s4d_engine_destroy(e);
    }
    s4d_npy_free(&x);
    s4d_npy_free(&grid);
}

/* Builds path and expects a refusal whose message holds every non-NULL want[]. */
static void expect_build_refused(const char *file, const char *const *want, int nwant)
{
    s4d_engine *e = NULL;
    s4d_errbuf err = {{0}};
    s4d_status st = s4d_engine_build_onnx_file(path_in(g_cases, file), NULL, &e, &err);
    printf("  %s -> %s: %s\n", file, s4d_status_string(st), err.msg);
    CHECK(st != S4D_OK && e == NULL, "%s built", file);
    for (int i = 0; i < nwant; i++)
        CHECK(want[i] == NULL || strstr(err.msg, want[i]), "%s: '%s' missing from: %s", file, want[i],
              err.msg);
    s4d_engine_destroy(e);
}

/* A deterministic non-zero fill in [-1, 1). */
static void fill_random(float *v, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float)((x >> 8) & 0xffff) / 32768.0f - 1.0f + 1.0f / 65536.0f;
    }
}

/* Attributes an op does not have, of the wrong type, twice, out of range or from another opset
   were once read as their defaults; every op now declares its attributes (src/ops schemas). */
static void case_attribute_specs(void)
{
    static const struct {
        const char *file, *want[3];
    } refused[] = {
        {"attr_unknown.onnx", {"'relu' (Relu)", "unknown attribute 'alpha'", "takes no attributes"}},
        {"attr_renamed.onnx", {"'softmax' (Softmax)", "unknown attribute 'aixs'", "takes axis"}},
        {"attr_wrong_type.onnx", {"'softmax'", "attribute 'axis' is a float, expected an int", NULL}},
        {"attr_twice.onnx", {"'leaky' (LeakyRelu)", "attribute 'alpha' is given twice", NULL}},
        {"attr_keepdims_range.onnx", {"'rmax'", "'keepdims' = 1325400065 must be 0 or 1", NULL}},
        {"attr_outdated.onnx", {"'rmean'", "'axes' does not exist at opset 18", "opsets 1 to 17"}},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        expect_build_refused(refused[i].file, refused[i].want, 3);

    /* The same attributes where the op has them: built, and the mean is right. */
    s4d_engine *e = NULL;
    s4d_context *ctx = NULL;
    s4d_errbuf err = {{0}};
    if (s4d_engine_build_onnx_file(path_in(g_cases, "attr_valid.onnx"), NULL, &e, &err) != S4D_OK ||
        s4d_context_create(e, NULL, &ctx, &err) != S4D_OK) {
        CHECK(0, "attr_valid.onnx: %s", err.msg);
        s4d_engine_destroy(e);
        return;
    }
    float x[6];
    fill_random(x, 6, 11);
    int64_t dims[2] = {2, 3};
    CHECK(s4d_context_bind(ctx, "x", S4D_DTYPE_FLOAT32, 2, dims, x) == S4D_OK, "bind");
    CHECK(s4d_context_run(ctx, NULL) == S4D_OK, "run: %s", s4d_context_errmsg(ctx));
    const void *out = NULL;
    s4d_tensor_info ti;
    memset(&ti, 0, sizeof ti);
    CHECK(s4d_context_output(ctx, "y", &out, &ti) == S4D_OK && out && ti.bytes == 8, "output");
    for (int r = 0; out && r < 2; r++) {
        double want = ((double)x[3 * r] + x[3 * r + 1] + x[3 * r + 2]) / 3.0;
        double got = ((const float *)out)[r];
        CHECK(fabs(got - want) <= 1e-6, "row %d: mean %.9g, want %.9g", r, got, want);
    }
    s4d_context_destroy(ctx);
    s4d_engine_destroy(e);
}

/* Shape arithmetic past int64 (signed overflow once) and float sizes past it (a cast once). */
static void case_shape_overflow(void)
{
    static const struct {
        const char *file, *want[3];
    } refused[] = {
        {"reshape_product_overflow.onnx", {"'reshape' (Reshape)", "more than 2^63 elements", NULL}},
        {"resize_scale_inf.onnx", {"'resize' (Resize)", "scales[2] = inf", NULL}},
        {"resize_scale_1e30.onnx", {"'resize' (Resize)", "scales[2] = 1e+30", NULL}},
        {"conv_extent_overflow.onnx", {"'conv' (Conv)", "dilated kernel overflows 64 bits", NULL}},
        {"maxpool_extent_overflow.onnx", {"'pool' (MaxPool)", "dilated window overflows 64 bits", NULL}},
        {"conv_pads_huge.onnx", {"'conv' (Conv)", "pads[0] = 4611686018427387904 is above 2^50", NULL}},
        {"range_length_overflow.onnx", {"'range' (Range)", "give a length past int64", NULL}},
        {"unused_input_dims_near_2_62.onnx", {"tensor 'unused' has shape [4611686018427387904]", NULL, NULL}},
        {"input_dims_near_2_62.onnx", {"'relu' (Relu)", "input 0 has shape [0, 4611686018427387904]", NULL}},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        expect_build_refused(refused[i].file, refused[i].want, 3);
}

static s4d_engine *load_regress(const char *name, const s4d_load_options *lo, s4d_status *st,
                                s4d_errbuf *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/engine/regress-%s.s4de", S4D_FUZZ_CORPUS, name);
    s4d_engine *e = NULL;
    *st = s4d_engine_load_file(path, lo, &e, err);
    printf("  %s -> %s: %s\n", name, s4d_status_string(*st), *st == S4D_OK ? "" : err->msg);
    return e;
}

/*
 * The engine files of tests/fuzz/corpus/engine/regress-* (make_engine_regressions.py): each
 * once loaded and then wrote out of bounds, divided by zero or ran with other semantics; each
 * is now refused with a message naming what is wrong.
 */
static void case_engine_regressions(void)
{
    static const struct {
        const char *name;
        s4d_status status;
        const char *want[2];
    } refused[] = {
        {"duplicate-tensor-names", S4D_ERR_PARSE, {"two tensors are named 'x'", NULL}},
        {"const-output-flag-2", S4D_ERR_PARSE, {"tensor 'y'", "flags its placement cannot have"}},
        {"no-outputs-huge-arena", S4D_ERR_PARSE, {"the engine has no outputs", NULL}},
        {"no-outputs", S4D_ERR_PARSE, {"the engine has no outputs", NULL}},
        {"unary-without-outputs", S4D_ERR_PARSE, {"layer 'extra_neg' (Neg)", "has no outputs"}},
        {"binary-without-outputs", S4D_ERR_PARSE, {"layer 'extra_or' (Or)", "has no outputs"}},
        {"variadic-without-outputs", S4D_ERR_PARSE, {"layer 'extra_min' (Min)", "has no outputs"}},
        {"slice-output-disagrees", S4D_ERR_PARSE,
         {"layer 'Slice_6' (Slice)", "stored as float32[3, 0, 2], but its inputs and attributes give "
                                     "float32[3, 1, 2]"}},
        {"input-dims-changed", S4D_ERR_PARSE,
         {"layer 'matmul' (MatMul): output 0 ('h')", "give float32[200, 4]"}},
        {"reshape-output-disagrees", S4D_ERR_PARSE,
         {"layer 'reshape' (Reshape): output 0 ('r')", "stored as float32[4, 4]"}},
        {"bias-dims-changed", S4D_ERR_PARSE, {"layer 'add' (Add)", "cannot be broadcast"}},
        {"gather-huge-dims", S4D_ERR_PARSE, {"tensor 'data' has shape [0, 4611686018427387904,", NULL}},
        {"conv-huge-dims", S4D_ERR_PARSE, {"tensor 'x' has shape [0, 1, 9223372036854775806, 5]", NULL}},
        {"misaligned-int64-weight", S4D_ERR_PARSE, {"tensor 'shape'", "64-byte boundary"}},
        {"misaligned-float-tensor", S4D_ERR_PARSE, {"tensor 'h2'", "64-byte boundary"}},
        {"overlapping-live-tensors", S4D_ERR_PARSE, {"tensors 'h' and 'h2' share arena bytes", NULL}},
        {"renamed-attribute", S4D_ERR_PARSE, {"layer 'softmax' (Softmax)", "unknown attribute 'axes'"}},
        {"keepdims-out-of-range", S4D_ERR_PARSE, {"layer 'ReduceMean_8'", "'keepdims' = 1325400065"}},
        {"attribute-wrong-type", S4D_ERR_PARSE, {"layer 'transpose'", "'perm' is an int, expected a list"}},
        {"arena-tensor-unwritten", S4D_ERR_PARSE, {"layer 'matmul' reads tensor 2 before", NULL}},
        {"precision-disagrees", S4D_ERR_PARSE, {"layer 'softmax' claims a precision", NULL}},
        {"arena-over-cap", S4D_ERR_UNSUPPORTED, {"above the limit of 17179869184", "S4D_MAX_CONTEXT_BYTES"}},
        {"view-size-disagrees", S4D_ERR_PARSE, {"view tensor 'r' views a tensor of another size", NULL}},
        {"view-of-missing-tensor", S4D_ERR_PARSE, {"view tensor 'r' views tensor 1000", "not another tensor"}},
        {"view-of-itself", S4D_ERR_PARSE, {"view tensor 'r' views tensor", "not another tensor"}},
        {"view-not-of-its-input", S4D_ERR_PARSE,
         {"view tensor 'r' is not the one output of an op layer that reads the tensor it views", NULL}},
        {"view-of-weight", S4D_ERR_PARSE, {"view tensor 'r' views a tensor of another size, dtype, device or placement", NULL}},
        {"view-cycle", S4D_ERR_PARSE, {"layer 'softmax' reads tensor", "before any layer writes it"}},
        {"view-of-add", S4D_ERR_PARSE,
         {"layer 'add' (Add): its output 'h2' is stored as a view", "does not leave the bytes unchanged"}},
        {"view-outlived", S4D_ERR_PARSE, {"tensors 'e' and 't' share arena bytes while both are live", NULL}},
    };
    unsetenv("S4D_MAX_CONTEXT_BYTES");
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        s4d_status st;
        s4d_errbuf err = {{0}};
        s4d_engine *e = load_regress(refused[i].name, NULL, &st, &err);
        CHECK(st == refused[i].status && e == NULL, "%s: status %s", refused[i].name, s4d_status_string(st));
        for (int k = 0; k < 2; k++)
            CHECK(!refused[i].want[k] || strstr(err.msg, refused[i].want[k]), "%s: '%s' missing from: %s",
                  refused[i].name, refused[i].want[k], err.msg);
        s4d_engine_destroy(e);
    }
}

/* Runs engine e on x (the mlp engine's one input); returns its outputs y and z, concatenated. */
static void run_mlp(s4d_engine *e, const float *x, float *yz)
{
    s4d_context *c = NULL;
    s4d_errbuf err = {{0}};
    CHECK(s4d_context_create(e, NULL, &c, &err) == S4D_OK, "context: %s", err.msg);
    if (!c)
        return;
    int64_t xd[2] = {2, 3};
    CHECK(s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 2, xd, (void *)x) == S4D_OK, "%s",
          s4d_context_errmsg(c));
    CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
    const char *names[2] = {"y", "z"};
    for (int k = 0; k < 2; k++) {
        const void *d = NULL;
        s4d_tensor_info ti;
        CHECK(s4d_context_output(c, names[k], &d, &ti) == S4D_OK && ti.bytes == 32, "output %s",
              names[k]);
        if (d)
            memcpy(yz + 8 * k, d, 32);
    }
    s4d_context_destroy(c);
}

/*
 * An engine written before views (its Reshape's output has a buffer of its own, which the
 * Reshape's kernel fills) still loads, and computes the same bits as the same engine with
 * the output a view: the two paths are each other's reference (engine.mlp compares the
 * model with a float64 golden).
 */
static void case_engine_without_views(void)
{
    s4d_status st;
    s4d_errbuf err = {{0}};
    s4d_engine *old = load_regress("reshape-without-view", NULL, &st, &err);
    CHECK(st == S4D_OK && old, "engine without views: %s", err.msg);
    char path[4096];
    snprintf(path, sizeof path, "%s/engine/seed-engine_mlp.s4de", S4D_FUZZ_CORPUS);
    s4d_engine *now = NULL;
    CHECK(s4d_engine_load_file(path, NULL, &now, &err) == S4D_OK, "seed: %s", err.msg);
    if (!old || !now) {
        s4d_engine_destroy(old);
        s4d_engine_destroy(now);
        return;
    }
    int views[2] = {0, 0};
    s4d_engine *both[2] = {old, now};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < s4d_engine_num_layers(both[k]); i++) {
            s4d_layer_details ld;
            memset(&ld, 0, sizeof ld);
            ld.struct_size = sizeof ld;
            s4d_engine_layer_details(both[k], i, &ld);
            views[k] += ld.is_view;
        }
    }
    printf("  views: %d without, %d with; activations %zu and %zu bytes\n", views[0], views[1],
           s4d_engine_activation_bytes(old), s4d_engine_activation_bytes(now));
    CHECK(views[0] == 0 && views[1] == 1, "views %d %d", views[0], views[1]);
    float x[6], a[16], b[16];
    fill_random(x, 6, 11);
    run_mlp(old, x, a);
    run_mlp(now, x, b);
    CHECK(memcmp(a, b, sizeof a) == 0, "outputs differ with and without the view");
    int nonzero = 0;
    for (int i = 0; i < 16; i++)
        nonzero += b[i] != 0.0f;
    CHECK(nonzero == 16, "%d of 16 outputs are non-zero", nonzero);
    s4d_engine_destroy(old);
    s4d_engine_destroy(now);
}

/* The context memory cap: 16 GiB by default, raised by the option or the environment. */
static void case_context_cap(void)
{
    s4d_status st;
    s4d_errbuf err = {{0}};
    s4d_load_options lo;
    s4d_load_options_init(&lo);
    unsetenv("S4D_MAX_CONTEXT_BYTES");
    /* Activations of 4 x 6 GiB, outputs of 2 x 6 GiB on the host. */
    lo.max_context_bytes = (uint64_t)35 << 30;
    s4d_engine *e = load_regress("arena-over-cap", &lo, &st, &err);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(err.msg, "inputs and outputs 12884901888"),
          "outputs not counted: %s", err.msg);
    s4d_engine_destroy(e);
    lo.max_context_bytes = (uint64_t)37 << 30;
    e = load_regress("arena-over-cap", &lo, &st, &err);
    CHECK(st == S4D_OK && e && s4d_engine_activation_bytes(e) == (size_t)24 << 30, "raised option: %s", err.msg);
    s4d_engine_destroy(e); /* never run: it would take 36 GiB */
    setenv("S4D_MAX_CONTEXT_BYTES", "39728447488", 1);
    e = load_regress("arena-over-cap", NULL, &st, &err);
    CHECK(st == S4D_OK && e, "raised environment: %s", err.msg);
    s4d_engine_destroy(e);
    unsetenv("S4D_MAX_CONTEXT_BYTES");
}

/* A workspace of 2^50 bytes in the file is ignored: the kernels say what they need, and the
   engine runs a padded 3x3 convolution as a float64 reference does. */
static void case_workspace_from_kernels(void)
{
    s4d_status st;
    s4d_errbuf err = {{0}};
    s4d_engine *e = load_regress("workspace-size-unbounded", NULL, &st, &err);
    CHECK(st == S4D_OK && e, "load: %s", err.msg);
    if (!e)
        return;
    s4d_layer_info li;
    CHECK(s4d_engine_layer_info(e, 0, &li) == S4D_OK && li.workspace_bytes < ((size_t)1 << 20),
          "workspace %zu bytes, from the file", li.workspace_bytes);
    s4d_context *ctx = NULL;
    CHECK(s4d_context_create(e, NULL, &ctx, &err) == S4D_OK, "context: %s", err.msg);
    float x[25], w[9];
    fill_random(x, 25, 3);
    fill_random(w, 9, 5);
    int64_t xd[4] = {1, 1, 5, 5}, wd[4] = {1, 1, 3, 3};
    CHECK(ctx && s4d_context_bind(ctx, "x", S4D_DTYPE_FLOAT32, 4, xd, x) == S4D_OK &&
              s4d_context_bind(ctx, "W", S4D_DTYPE_FLOAT32, 4, wd, w) == S4D_OK &&
              s4d_context_run(ctx, NULL) == S4D_OK,
          "run: %s", ctx ? s4d_context_errmsg(ctx) : "no context");
    const void *out = NULL;
    s4d_tensor_info ti;
    memset(&ti, 0, sizeof ti);
    if (ctx)
        s4d_context_output(ctx, "y", &out, &ti);
    CHECK(out && ti.bytes == sizeof x, "output");
    int bad = 0;
    for (int i = 0; out && i < 5; i++) {
        for (int j = 0; j < 5; j++) {
            double want = 0;
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++)
                    if (i + a - 1 >= 0 && i + a - 1 < 5 && j + b - 1 >= 0 && j + b - 1 < 5)
                        want += (double)w[3 * a + b] * x[5 * (i + a - 1) + j + b - 1];
            double got = ((const float *)out)[5 * i + j];
            bad += !(fabs(got - want) <= 1e-5);
        }
    }
    printf("  workspace %zu bytes; %d of 25 outputs off the reference\n", li.workspace_bytes, bad);
    CHECK(bad == 0, "%d outputs differ from the reference", bad);
    s4d_context_destroy(ctx);
    s4d_engine_destroy(e);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"onnx_attr_tensor_null", case_onnx_attr_tensor_null},
    {"read_limits", case_read_limits},
    {"grid_sample_nonfinite", case_grid_sample_nonfinite},
    {"attribute_specs", case_attribute_specs},
    {"shape_overflow", case_shape_overflow},
    {"engine_regressions", case_engine_regressions},
    {"context_cap", case_context_cap},
    {"engine_without_views", case_engine_without_views},
    {"workspace_from_kernels", case_workspace_from_kernels},
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
