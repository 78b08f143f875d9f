/*
 * Engine API tests, one case per process: test_engine CASE MODELS_DIR PLUGIN_LIB.
 * MODELS_DIR comes from make_models.py / make_golden.py. Each case prints
 * what it checked and exits 0 on success.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s4d/engine.h"
#include "s4d/npy.h"
#include "s4d/plugin.h"

#include "check.h"

static const char *g_models;
static const char *g_plugin_lib;

static char *model_path(const char *name)
{
    static _Thread_local char buf[8][4096]; /* threads of case_threads call it at once */
    static _Thread_local int next;
    char *p = buf[next++ % 8];
    snprintf(p, 4096, "%s/%s", g_models, name);
    return p;
}

static void *read_all(const char *path, size_t *size)
{
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *d = malloc((size_t)n + 1);
    if (d && fread(d, 1, (size_t)n, f) != (size_t)n) {
        free(d);
        d = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return d;
}

static s4d_npy load_npy(const char *name)
{
    s4d_npy a;
    s4d_errbuf err;
    if (s4d_npy_load(model_path(name), &a, &err) != S4D_OK) {
        fprintf(stderr, "cannot load %s: %s\n", name, err.msg);
        exit(1);
    }
    return a;
}

/*
 * The device the engines are built for: S4D_TEST_DEVICE=cuda runs every case
 * on the CUDA device (the real one, or with S4D_TEST_BACKEND=guarded the
 * guarded test device), with fallback allowed so that the CPU-only test plugin
 * still runs. Default: the CPU.
 */
static s4d_device g_device = S4D_DEVICE_CPU;

static void device_options(s4d_build_options *o)
{
    o->device = g_device;
    o->allow_fallback = g_device != S4D_DEVICE_CPU;
}

static s4d_engine *build(const char *model, s4d_plugin_registry *reg)
{
    s4d_build_options o;
    s4d_build_options_init(&o);
    device_options(&o);
    o.registry = reg;
    s4d_engine *e = NULL;
    s4d_errbuf err;
    s4d_status st = s4d_engine_build_onnx_file(model_path(model), &o, &e, &err);
    if (st != S4D_OK) {
        fprintf(stderr, "build %s failed: %s\n", model, err.msg);
        exit(1);
    }
    return e;
}

/* Builds and expects failure; returns the status, copies the message. */
static s4d_status build_fail(const char *model, s4d_plugin_registry *reg, char *msg, size_t size)
{
    s4d_build_options o;
    s4d_build_options_init(&o);
    device_options(&o);
    o.registry = reg;
    s4d_engine *e = NULL;
    s4d_errbuf err;
    err.msg[0] = 0;
    s4d_status st = s4d_engine_build_onnx_file(model_path(model), &o, &e, &err);
    CHECK(st != S4D_OK, "building %s should fail", model);
    CHECK(e == NULL, "a failed build must leave *out NULL");
    s4d_engine_destroy(e);
    snprintf(msg, size, "%s", err.msg);
    printf("  %s -> %s: %s\n", model, s4d_status_string(st), err.msg);
    return st;
}

static s4d_plugin_registry *registry_with_lib(void)
{
    s4d_plugin_registry *r = NULL;
    if (s4d_plugin_registry_create(&r) != S4D_OK) {
        fprintf(stderr, "registry create failed\n");
        exit(1);
    }
    if (s4d_plugin_registry_load_library(r, g_plugin_lib) != S4D_OK) {
        fprintf(stderr, "load %s failed: %s\n", g_plugin_lib, s4d_plugin_registry_errmsg(r));
        exit(1);
    }
    return r;
}

static const char *const da_inputs[3] = {"feat_in", "query", "sampling_location"};

/* Loads the DA inputs from make_models.py into in[3] and binds them to c as host memory. */
static void bind_da_inputs(s4d_context *c, s4d_npy *in)
{
    const char *files[3] = {"da_in_feat_in.npy", "da_in_query.npy", "da_in_sampling_location.npy"};
    for (int i = 0; i < 3; i++) {
        in[i] = load_npy(files[i]);
        CHECK(s4d_context_bind(c, da_inputs[i], in[i].dtype, in[i].rank, in[i].dims, in[i].data) ==
                  S4D_OK,
              "%s", s4d_context_errmsg(c));
    }
}

/* Runs with the DA inputs from make_models.py; returns a malloc'd copy of output "out". */
static float *run_da(const s4d_engine *e, size_t *bytes)
{
    s4d_context *c = NULL;
    s4d_errbuf err;
    CHECK(s4d_context_create(e, NULL, &c, &err) == S4D_OK, "%s", err.msg);
    s4d_npy in[3];
    bind_da_inputs(c, in);
    CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
    const void *data = NULL;
    s4d_tensor_info info;
    CHECK(s4d_context_output(c, "out", &data, &info) == S4D_OK, "%s", s4d_context_errmsg(c));
    float *copy = malloc(info.bytes);
    memcpy(copy, data, info.bytes);
    *bytes = info.bytes;
    for (int i = 0; i < 3; i++)
        s4d_npy_free(&in[i]);
    s4d_context_destroy(c);
    return copy;
}

static void compare_golden(const float *got, size_t bytes, const char *golden, double tol)
{
    s4d_npy g = load_npy(golden);
    CHECK(g.bytes == bytes, "golden %s has %zu bytes, output %zu", golden, g.bytes, bytes);
    double max_err = 0;
    for (size_t i = 0; i < bytes / 4 && g.bytes == bytes; i++) {
        double d = fabs((double)got[i] - ((const float *)g.data)[i]);
        max_err = d > max_err ? d : max_err;
    }
    printf("  vs %s: max abs error %.3e\n", golden, max_err);
    CHECK(max_err <= tol, "max error %.3e > %.1e", max_err, tol);
    s4d_npy_free(&g);
}

/* ---- cases ---- */

static void case_mlp(void)
{
    s4d_engine *e = build("mlp.onnx", NULL);
    /* 9 nodes: one dead (dead_add), one folded (fold_add), one Constant became a weight. */
    CHECK(s4d_engine_num_layers(e) == 6, "layers %d", s4d_engine_num_layers(e));
    for (int i = 0; i < s4d_engine_num_layers(e); i++) {
        s4d_layer_info li;
        s4d_engine_layer_info(e, i, &li);
        CHECK(strcmp(li.name, "dead_add") != 0 && strcmp(li.name, "fold_add") != 0,
              "layer %s should be gone", li.name);
    }
    /* Its three activations are live at once (the Reshape's output is a view of the Softmax's,
       no buffer of its own): nothing to reuse here; case views checks the reuse. */
    CHECK(s4d_engine_activation_bytes(e) <= s4d_engine_activation_bytes_unplanned(e),
          "memory plan larger than no reuse: %zu vs %zu", s4d_engine_activation_bytes(e),
          s4d_engine_activation_bytes_unplanned(e));
    printf("  activations %zu bytes planned, %zu unplanned\n", s4d_engine_activation_bytes(e),
           s4d_engine_activation_bytes_unplanned(e));
    s4d_context *c = NULL;
    CHECK(s4d_context_create(e, NULL, &c, NULL) == S4D_OK, "context");
    s4d_npy x = load_npy("mlp_in/x.npy");
    CHECK(s4d_context_bind(c, "x", x.dtype, x.rank, x.dims, x.data) == S4D_OK, "%s",
          s4d_context_errmsg(c));
    CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
    const char *outs[2] = {"y", "z"};
    for (int k = 0; k < 2; k++) {
        const void *d;
        s4d_tensor_info ti;
        CHECK(s4d_context_output(c, outs[k], &d, &ti) == S4D_OK, "output");
        char name[64];
        snprintf(name, sizeof name, "mlp_golden/%s.npy", outs[k]);
        compare_golden(d, ti.bytes, name, 1e-5);
    }
    s4d_npy_free(&x);
    s4d_context_destroy(c);
    s4d_engine_destroy(e);
}

static void case_save_load_bitwise(void)
{
    s4d_plugin_registry *r = registry_with_lib();
    const char *models[2] = {"mlp.onnx", "da.onnx"};
    for (int m = 0; m < 2; m++) {
        s4d_engine *e = build(models[m], r);
        void *blob;
        size_t size;
        CHECK(s4d_engine_serialize(e, &blob, &size) == S4D_OK, "%s", s4d_engine_errmsg(e));
        s4d_load_options lo;
        s4d_load_options_init(&lo);
        lo.registry = r;
        s4d_engine *e2 = NULL;
        s4d_errbuf err;
        CHECK(s4d_engine_load_memory(blob, size, &lo, &e2, &err) == S4D_OK, "%s", err.msg);
        /* Re-serializing a loaded engine gives the same bytes. */
        void *blob2;
        size_t size2;
        CHECK(s4d_engine_serialize(e2, &blob2, &size2) == S4D_OK, "reserialize");
        CHECK(size == size2 && memcmp(blob, blob2, size) == 0, "engine bytes differ after load");
        /* Same inputs -> bitwise the same outputs. */
        s4d_context *c1, *c2;
        s4d_context_create(e, NULL, &c1, NULL);
        s4d_context_create(e2, NULL, &c2, NULL);
        int nin = s4d_engine_num_inputs(e);
        float *data[8] = {NULL};
        for (int k = 0; k < nin && k < 8; k++) {
            s4d_tensor_info in;
            s4d_engine_input_info(e, k, &in);
            data[k] = malloc(in.bytes);
            for (size_t q = 0; q < in.bytes / 4; q++)
                data[k][q] = (float)sin((double)q * 0.37 + k) * 1.1f;
            CHECK(s4d_context_bind(c1, in.name, in.dtype, in.rank, in.dims, data[k]) == S4D_OK,
                  "bind");
            CHECK(s4d_context_bind(c2, in.name, in.dtype, in.rank, in.dims, data[k]) == S4D_OK,
                  "bind");
        }
        CHECK(s4d_context_run(c1, NULL) == S4D_OK, "%s", s4d_context_errmsg(c1));
        CHECK(s4d_context_run(c2, NULL) == S4D_OK, "%s", s4d_context_errmsg(c2));
        for (int i = 0; i < s4d_engine_num_outputs(e); i++) {
            s4d_tensor_info ti;
            s4d_engine_output_info(e, i, &ti);
            const void *o1, *o2;
            s4d_context_output(c1, ti.name, &o1, NULL);
            s4d_context_output(c2, ti.name, &o2, NULL);
            int same = memcmp(o1, o2, ti.bytes) == 0;
            int nonzero = 0;
            for (size_t q = 0; q < ti.bytes / 4; q++)
                nonzero |= ((const float *)o1)[q] != 0.0f;
            CHECK(same, "%s: output %s differs after save/load", models[m], ti.name);
            CHECK(nonzero, "%s: output %s is all zeros", models[m], ti.name);
            printf("  %s: output %s %s after save -> load (%zu bytes engine)\n", models[m],
                   ti.name, same ? "bitwise equal" : "DIFFERENT", size);
        }
        for (int k = 0; k < 8; k++)
            free(data[k]);
        s4d_context_destroy(c1);
        s4d_context_destroy(c2);
        s4d_free(blob);
        s4d_free(blob2);
        s4d_engine_destroy(e2);
        s4d_engine_destroy(e);
    }
    s4d_plugin_registry_destroy(r);
}

static void case_plugin_golden(void)
{
    s4d_plugin_registry *r = registry_with_lib();
    s4d_engine *e = build("da.onnx", r);
    size_t bytes;
    float *out = run_da(e, &bytes);
    compare_golden(out, bytes, "da_golden/out.npy", 1e-5);
    free(out);
    s4d_engine_destroy(e);
    s4d_plugin_registry_destroy(r);
}

/* ---- views ---- */

#define VX 24 /* x is [2, 3, 4] */

/* The views model's outputs from x and w in double precision (make_models.py, views()). */
static void views_reference(const float *x, const float *w, double *s1, double *tn, double *ax,
                            double *mo, double *ee)
{
    for (int r = 0; r < 6; r++) {
        for (int k = 0; k < 4; k++) {
            double a = x[r * 4 + k] > 0 ? x[r * 4 + k] : 0;
            s1[r * 4 + k] = a + 1 / (1 + exp(-a));
            tn[r * 4 + k] = tanh(-a);
            ax[r * 4 + k] = fabs((double)x[r * 4 + k]);
            ee[r * 4 + k] = exp((double)x[r * 4 + k]) + cos(a);
        }
        for (int j = 0; j < 5; j++) {
            double acc = 0;
            for (int k = 0; k < 4; k++)
                acc += (x[r * 4 + k] > 0 ? x[r * 4 + k] : 0) * (double)w[k * 5 + j];
            mo[r * 5 + j] = acc;
        }
    }
}

/* Runs c on x and compares every output with the float64 reference; returns the worst error. */
static double views_check_run(s4d_context *c, const float *x, const float *w)
{
    int64_t dims[3] = {2, 3, 4};
    CHECK(s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 3, dims, (void *)x) == S4D_OK, "%s",
          s4d_context_errmsg(c));
    CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
    double s1[24], tn[24], ax[24], mo[30], xo[24], ee[24];
    views_reference(x, w, s1, tn, ax, mo, ee);
    for (int i = 0; i < VX; i++)
        xo[i] = x[i];
    const char *names[6] = {"s1", "tn", "ax", "mo", "xo", "ee"};
    const double *want[6] = {s1, tn, ax, mo, xo, ee};
    const size_t count[6] = {24, 24, 24, 30, 24, 24};
    double worst = 0;
    for (int k = 0; k < 6; k++) {
        const void *d = NULL;
        s4d_tensor_info ti;
        CHECK(s4d_context_output(c, names[k], &d, &ti) == S4D_OK, "%s", s4d_context_errmsg(c));
        CHECK(d && ti.bytes == count[k] * sizeof(float), "output %s: %zu bytes", names[k],
              ti.bytes);
        if (!d || ti.bytes != count[k] * sizeof(float))
            continue;
        for (size_t i = 0; i < count[k]; i++) {
            double e = fabs(((const float *)d)[i] - want[k][i]) / (1 + fabs(want[k][i]));
            worst = e > worst ? e : worst;
        }
    }
    return worst;
}

static int is_view_op(const char *op)
{
    static const char *const ops[] = {"Reshape", "Unsqueeze", "Squeeze", "Dropout", "Cast",
                                      "Identity", "Flatten"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op, ops[i]) == 0)
            return 1;
    return 0;
}

/* Checks which layers of e run as views; returns how many do. */
static int views_check_layers(const s4d_engine *e)
{
    int views = 0;
    for (int i = 0; i < s4d_engine_num_layers(e); i++) {
        s4d_layer_info li;
        s4d_layer_details ld;
        memset(&ld, 0, sizeof ld);
        ld.struct_size = sizeof ld;
        CHECK(s4d_engine_layer_info(e, i, &li) == S4D_OK &&
                  s4d_engine_layer_details(e, i, &ld) == S4D_OK,
              "layer %d", i);
        /* Layers making a graph output keep a buffer of their own: they copy. */
        int makes_output = strcmp(li.name, "reshape_out") == 0 ||
                           strcmp(li.name, "identity_out") == 0;
        int want = is_view_op(li.op) && !makes_output;
        CHECK(ld.is_view == want, "layer '%s' (%s): is_view %d, expected %d", li.name, li.op,
              ld.is_view, want);
        CHECK(!ld.is_view || !ld.is_copy, "layer '%s' is a view and a copy", li.name);
        views += ld.is_view;
    }
    return views;
}

/*
 * View layers (Reshape, Squeeze, ...) run nothing: their outputs share their inputs'
 * buffers. The outputs must match a float64 reference when a Reshape's output has two
 * readers and its input is read again later, through chains of views, through a view of a
 * graph input rebound between runs, after a save and load, and with profiling (views take
 * no time).
 */
static void case_views(void)
{
    s4d_engine *e = build("views.onnx", NULL);
    s4d_npy wn = load_npy("views_w.npy");
    const float *w = wn.data;
    int views = views_check_layers(e);
    printf("  %d of %d layers are views; activations %zu bytes planned, %zu without reuse\n",
           views, s4d_engine_num_layers(e), s4d_engine_activation_bytes(e),
           s4d_engine_activation_bytes_unplanned(e));
    CHECK(views == 9, "%d views, expected 9", views);
    CHECK(s4d_engine_activation_bytes(e) < s4d_engine_activation_bytes_unplanned(e),
          "memory plan reuses nothing: %zu vs %zu", s4d_engine_activation_bytes(e),
          s4d_engine_activation_bytes_unplanned(e));
    float x1[VX], x2[VX];
    for (int i = 0; i < VX; i++) {
        x1[i] = (float)sin(i * 0.77 + 0.3) * 1.3f;
        x2[i] = (float)cos(i * 0.53 + 0.1) * 0.9f;
    }
    s4d_context *c = NULL;
    s4d_errbuf err;
    CHECK(s4d_context_create(e, NULL, &c, &err) == S4D_OK, "%s", err.msg);
    double e1 = views_check_run(c, x1, w);
    /* Rebinding the input: the view of it must follow the new buffer. */
    double e2 = views_check_run(c, x2, w);
    double e3 = views_check_run(c, x1, w);
    printf("  worst relative error: %.2e, %.2e after rebinding, %.2e back\n", e1, e2, e3);
    CHECK(e1 < 1e-5 && e2 < 1e-5 && e3 < 1e-5, "errors %.2e %.2e %.2e", e1, e2, e3);
    s4d_context_destroy(c);

    /* Profiling: a view takes no time. */
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.profile = 1;
    CHECK(s4d_context_create(e, &co, &c, &err) == S4D_OK, "%s", err.msg);
    double ep = views_check_run(c, x2, w);
    CHECK(ep < 1e-5, "profiled run: error %.2e", ep);
    for (int i = 0; i < s4d_engine_num_layers(e); i++) {
        s4d_layer_details ld;
        memset(&ld, 0, sizeof ld);
        ld.struct_size = sizeof ld;
        s4d_engine_layer_details(e, i, &ld);
        double ms = -1;
        CHECK(s4d_context_layer_time(c, i, &ms) == S4D_OK, "layer time %d", i);
        CHECK(!ld.is_view || ms == 0.0, "view layer %d took %g ms", i, ms);
    }
    s4d_context_destroy(c);

    /* The views survive a save and load, and compute the same bits. */
    void *blob = NULL;
    size_t size = 0;
    CHECK(s4d_engine_serialize(e, &blob, &size) == S4D_OK, "%s", s4d_engine_errmsg(e));
    s4d_engine *e2l = NULL;
    CHECK(s4d_engine_load_memory(blob, size, NULL, &e2l, &err) == S4D_OK, "load: %s", err.msg);
    if (e2l) {
        CHECK(views_check_layers(e2l) == views, "views lost in the file");
        s4d_context *c1 = NULL, *c2 = NULL;
        s4d_context_create(e, NULL, &c1, NULL);
        s4d_context_create(e2l, NULL, &c2, NULL);
        views_check_run(c1, x1, w);
        CHECK(views_check_run(c2, x1, w) < 1e-5, "loaded engine");
        const char *names[6] = {"s1", "tn", "ax", "mo", "xo", "ee"};
        for (int k = 0; k < 6; k++) {
            const void *o1 = NULL, *o2 = NULL;
            s4d_tensor_info ti;
            s4d_context_output(c1, names[k], &o1, &ti);
            s4d_context_output(c2, names[k], &o2, NULL);
            CHECK(o1 && o2 && memcmp(o1, o2, ti.bytes) == 0, "output %s differs after load",
                  names[k]);
        }
        s4d_context_destroy(c1);
        s4d_context_destroy(c2);
    }
    s4d_free(blob);
    s4d_engine_destroy(e2l);
    s4d_npy_free(&wn);
    s4d_engine_destroy(e);
}

static void case_alias(void)
{
    s4d_plugin_registry *r = registry_with_lib();
    s4d_engine *e1 = build("da.onnx", r), *e2 = build("da_alias.onnx", r);
    s4d_layer_info li;
    s4d_engine_layer_info(e2, s4d_engine_num_layers(e2) - 1, &li);
    printf("  alias layer: %s\n", li.op);
    CHECK(li.is_plugin && strstr(li.op, "custom::DeformableAttentionAggrPlugin"), "op %s", li.op);
    size_t b1, b2;
    float *o1 = run_da(e1, &b1), *o2 = run_da(e2, &b2);
    CHECK(b1 == b2 && memcmp(o1, o2, b1) == 0, "alias output differs from the s4d node's");
    compare_golden(o2, b2, "da_golden/out.npy", 1e-5);
    free(o1);
    free(o2);
    s4d_engine_destroy(e1);
    s4d_engine_destroy(e2);
    s4d_plugin_registry_destroy(r);
}

/* A plugin registered through the API: test::Scale, y = alpha * x. */
typedef struct scale_state {
    float alpha;
} scale_state;

static int32_t scale_nout(const s4d_plugin *self) { return 1; }

static s4d_status scale_descs(const s4d_plugin *self, const s4d_plugin_tensor_desc *in, int32_t nin,
                              s4d_plugin_tensor_desc *out, int32_t nout, s4d_errbuf *err)
{
    if (nin != 1) {
        snprintf(err->msg, sizeof err->msg, "Scale takes 1 input, got %d", (int)nin);
        return S4D_ERR_INVALID_ARG;
    }
    out[0].dtype = in[0].dtype;
    out[0].rank = in[0].rank;
    memcpy(out[0].dims, in[0].dims, sizeof out[0].dims);
    return S4D_OK;
}

static s4d_status scale_supports(const s4d_plugin *self, const s4d_plugin_tensor_desc *in,
                                 int32_t nin, const s4d_plugin_tensor_desc *out, int32_t nout,
                                 s4d_errbuf *err)
{
    return in[0].dtype == S4D_DTYPE_FLOAT32 && in[0].device == S4D_DEVICE_CPU ? S4D_OK
                                                                             : S4D_ERR_DTYPE;
}

static size_t scale_ws(const s4d_plugin *self, const s4d_plugin_tensor_desc *in, int32_t nin,
                       const s4d_plugin_tensor_desc *out, int32_t nout)
{
    return 0;
}

static size_t scale_ser_size(const s4d_plugin *self) { return sizeof(float); }

static s4d_status scale_ser(const s4d_plugin *self, void *buf, size_t size, s4d_errbuf *err)
{
    memcpy(buf, &((const scale_state *)self->state)->alpha, sizeof(float));
    return S4D_OK;
}

static s4d_status scale_enqueue(const s4d_plugin *self, const s4d_plugin_tensor *in, int32_t nin,
                                s4d_plugin_tensor *out, int32_t nout,
                                const s4d_plugin_run_info *run, s4d_errbuf *err)
{
    int64_t n = 1;
    for (int i = 0; i < in[0].desc.rank; i++)
        n *= in[0].desc.dims[i];
    float a = ((const scale_state *)self->state)->alpha;
    for (int64_t i = 0; i < n; i++)
        ((float *)out[0].data)[i] = a * ((const float *)in[0].data)[i];
    return S4D_OK;
}

static void scale_destroy(s4d_plugin *self)
{
    free(self->state);
    free(self);
}

static s4d_status scale_make(float alpha, s4d_plugin **out)
{
    s4d_plugin *p = calloc(1, sizeof *p);
    scale_state *s = calloc(1, sizeof *s);
    if (!p || !s) {
        free(p);
        free(s);
        return S4D_ERR_NO_MEMORY;
    }
    s->alpha = alpha;
    p->abi_version = S4D_PLUGIN_ABI_VERSION;
    p->struct_size = sizeof *p;
    p->state = s;
    p->num_outputs = scale_nout;
    p->get_output_descs = scale_descs;
    p->supports = scale_supports;
    p->workspace_size = scale_ws;
    p->serialize_size = scale_ser_size;
    p->serialize = scale_ser;
    p->enqueue = scale_enqueue;
    p->destroy = scale_destroy;
    *out = p;
    return S4D_OK;
}

static s4d_status scale_create(const s4d_plugin_creator *self, const char *node,
                               const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    float alpha = *(const float *)fields->fields[0].data;
    return scale_make(alpha, out);
}

static s4d_status scale_deser(const s4d_plugin_creator *self, const void *data, size_t size,
                              s4d_plugin **out, s4d_errbuf *err)
{
    if (size != sizeof(float)) {
        snprintf(err->msg, sizeof err->msg, "Scale payload of %zu bytes", size);
        return S4D_ERR_PARSE;
    }
    float a;
    memcpy(&a, data, sizeof a);
    return scale_make(a, out);
}

static const float scale_default = 1.0f;
static const s4d_plugin_field_decl scale_fields[1] = {{
    S4D_PLUGIN_ABI_VERSION, sizeof(s4d_plugin_field_decl), "alpha", S4D_PLUGIN_FIELD_FLOAT, 0,
    {S4D_PLUGIN_ABI_VERSION, sizeof(s4d_plugin_field), "alpha", S4D_PLUGIN_FIELD_FLOAT, 1,
     &scale_default}}};
static const s4d_plugin_creator scale_creator = {
    S4D_PLUGIN_ABI_VERSION, sizeof(s4d_plugin_creator), "test", "Scale", "1", 1, scale_fields,
    NULL, scale_create, scale_deser};

static void case_plugin_api(void)
{
    s4d_plugin_registry *r = NULL;
    CHECK(s4d_plugin_registry_create(&r) == S4D_OK, "registry");
    CHECK(s4d_plugin_registry_register(r, &scale_creator) == S4D_OK, "%s",
          s4d_plugin_registry_errmsg(r));
    /* scale.onnx: y = Scale(alpha=2.5)(MatMul(x, w)) in domain "test". */
    s4d_engine *e = build("scale.onnx", r);
    s4d_npy x = load_npy("scale_x.npy"), w = load_npy("scale_w.npy");
    s4d_context *c;
    s4d_context_create(e, NULL, &c, NULL);
    CHECK(s4d_context_bind(c, "x", x.dtype, x.rank, x.dims, x.data) == S4D_OK, "%s",
          s4d_context_errmsg(c));
    CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
    const float *y;
    s4d_tensor_info ti;
    s4d_context_output(c, "y", (const void **)&y, &ti);
    const float *xd = x.data, *wd = w.data;
    int64_t m = x.dims[0], k = x.dims[1], n = w.dims[1];
    double max_err = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double ref = 0;
            for (int64_t q = 0; q < k; q++)
                ref += (double)xd[i * k + q] * wd[q * n + j];
            ref *= 2.5;
            double d = fabs(ref - y[i * n + j]);
            max_err = d > max_err ? d : max_err;
        }
    printf("  API-registered test::Scale: max abs error %.3e vs float64\n", max_err);
    CHECK(max_err < 1e-5, "error %.3e", max_err);
    /* The engine file carries the field; reloading through the same registry runs the same. */
    void *blob;
    size_t size;
    s4d_engine_serialize(e, &blob, &size);
    s4d_load_options lo;
    s4d_load_options_init(&lo);
    lo.registry = r;
    s4d_engine *e2 = NULL;
    s4d_errbuf err;
    CHECK(s4d_engine_load_memory(blob, size, &lo, &e2, &err) == S4D_OK, "%s", err.msg);
    /* Without the creator, loading names the key. */
    s4d_plugin_registry *empty = NULL;
    s4d_plugin_registry_create(&empty);
    lo.registry = empty;
    s4d_engine *e3 = NULL;
    s4d_status st = s4d_engine_load_memory(blob, size, &lo, &e3, &err);
    printf("  load without the creator -> %s: %s\n", s4d_status_string(st), err.msg);
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(err.msg, "Scale") && strstr(err.msg, "test"),
          "status %d: %s", st, err.msg);
    s4d_free(blob);
    s4d_npy_free(&x);
    s4d_npy_free(&w);
    s4d_context_destroy(c);
    s4d_engine_destroy(e);
    s4d_engine_destroy(e2);
    s4d_plugin_registry_destroy(r);
    s4d_plugin_registry_destroy(empty);
}

static void case_bad_onnx(void)
{
    size_t size;
    unsigned char *d = read_all(model_path("mlp.onnx"), &size);
    if (!d) {
        fprintf(stderr, "cannot read mlp.onnx\n");
        exit(1);
    }
    s4d_errbuf err;
    s4d_engine *e = NULL;
    int rejected = 0, tries = 0;
    /* Truncations at many lengths: each must fail cleanly (ASan watches the reads). */
    for (size_t n = 0; n < size; n += 1 + size / 97) {
        tries++;
        s4d_status st = s4d_engine_build_onnx_memory(d, n, NULL, &e, &err);
        rejected += st != S4D_OK;
        CHECK(st != S4D_OK || e, "ok without an engine");
        s4d_engine_destroy(e);
        e = NULL;
    }
    CHECK(rejected == tries, "%d of %d truncated models accepted", tries - rejected, tries);
    s4d_status st = s4d_engine_build_onnx_memory(d, size / 2, NULL, &e, &err);
    printf("  truncated ONNX -> %s: %s\n", s4d_status_string(st), err.msg);
    CHECK(st == S4D_ERR_PARSE, "status %d", st);
    /* Random bytes. */
    unsigned char rnd[4096];
    uint32_t s = 12345;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < sizeof rnd; i++) {
            s = s * 1664525u + 1013904223u;
            rnd[i] = (unsigned char)(s >> 24);
        }
        st = s4d_engine_build_onnx_memory(rnd, sizeof rnd, NULL, &e, &err);
        CHECK(st != S4D_OK && e == NULL, "random bytes accepted");
        if (round == 0)
            printf("  random bytes -> %s: %s\n", s4d_status_string(st), err.msg);
    }
    st = s4d_engine_build_onnx_file(model_path("does_not_exist.onnx"), NULL, &e, &err);
    CHECK(st == S4D_ERR_IO && strstr(err.msg, "does_not_exist.onnx"), "%s", err.msg);
    free(d);
}

static void *engine_blob(size_t *size)
{
    s4d_engine *e = build("mlp.onnx", NULL);
    void *blob;
    CHECK(s4d_engine_serialize(e, &blob, size) == S4D_OK, "serialize");
    s4d_engine_destroy(e);
    return blob;
}

static void case_bad_engine_truncated(void)
{
    size_t size;
    unsigned char *blob = engine_blob(&size);
    s4d_errbuf err;
    for (size_t n = 0; n < size; n++) {
        s4d_engine *e = NULL;
        s4d_status st = s4d_engine_load_memory(blob, n, NULL, &e, &err);
        CHECK(st == S4D_ERR_PARSE && e == NULL, "truncated at %zu: status %d", n, st);
        if (n == size / 2)
            printf("  truncated engine -> %s: %s\n", s4d_status_string(st), err.msg);
    }
    s4d_free(blob);
}

static void case_bad_engine_bitflip(void)
{
    size_t size;
    unsigned char *blob = engine_blob(&size);
    s4d_errbuf err;
    int counts[16] = {0};
    for (size_t pos = 0; pos < size; pos++) {
        blob[pos] ^= (unsigned char)(1u << (pos % 8));
        s4d_engine *e = NULL;
        s4d_status st = s4d_engine_load_memory(blob, size, NULL, &e, &err);
        CHECK(st != S4D_OK && e == NULL, "bit flip at %zu accepted", pos);
        if (pos >= 40) /* the format 2 header is 40 bytes; the checksum covers the rest */
            CHECK(st == S4D_ERR_CHECKSUM, "flip in the body at %zu: status %d", pos, st);
        if (pos == size - 1)
            printf("  bit flip in the weights -> %s: %s\n", s4d_status_string(st), err.msg);
        counts[st & 15]++;
        blob[pos] ^= (unsigned char)(1u << (pos % 8));
    }
    printf("  %zu flips: %d parse, %d version, %d checksum\n", size, counts[S4D_ERR_PARSE],
           counts[S4D_ERR_VERSION], counts[S4D_ERR_CHECKSUM]);
    s4d_engine *e = NULL;
    CHECK(s4d_engine_load_memory(blob, size, NULL, &e, &err) == S4D_OK, "restored blob fails");
    s4d_engine_destroy(e);
    s4d_free(blob);
}

static void case_bad_engine_version(void)
{
    size_t size;
    unsigned char *blob = engine_blob(&size);
    blob[8] = 3; /* format version field (u32 little-endian at offset 8) */
    s4d_errbuf err;
    s4d_engine *e = NULL;
    s4d_status st = s4d_engine_load_memory(blob, size, NULL, &e, &err);
    printf("  other version -> %s: %s\n", s4d_status_string(st), err.msg);
    CHECK(st == S4D_ERR_VERSION && strstr(err.msg, "version 3") && strstr(err.msg, "version 2"),
          "%s", err.msg);
    blob[8] = 1; /* a format 1 file: refused, with the advice to rebuild */
    st = s4d_engine_load_memory(blob, size, NULL, &e, &err);
    printf("  version 1 -> %s: %s\n", s4d_status_string(st), err.msg);
    CHECK(st == S4D_ERR_VERSION && strstr(err.msg, "version 1") && strstr(err.msg, "rebuild"),
          "%s", err.msg);
    memcpy(blob, "NOTANENG", 8);
    st = s4d_engine_load_memory(blob, size, NULL, &e, &err);
    CHECK(st == S4D_ERR_PARSE && strstr(err.msg, "not an s4d engine"), "%s", err.msg);
    s4d_free(blob);
}

static void case_unknown_op(void)
{
    char msg[1024];
    s4d_status st = build_fail("unsupported.onnx", NULL, msg, sizeof msg);
    CHECK(st == S4D_ERR_UNSUPPORTED, "status %d", st);
    const char *want[] = {"FooOp", "'foo1'", "'foo2'", "BarOp", "'acme'", "'bar1'"};
    for (int i = 0; i < 6; i++)
        CHECK(strstr(msg, want[i]) != NULL, "message lacks %s", want[i]);
    st = build_fail("dynamic.onnx", NULL, msg, sizeof msg);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(msg, "'x'") && strstr(msg, "dynamic"), "%s", msg);
}

static void case_plugin_errors(void)
{
    char msg[1024];
    s4d_plugin_registry *empty = NULL;
    s4d_plugin_registry_create(&empty);
    s4d_status st = build_fail("da.onnx", empty, msg, sizeof msg);
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(msg, "'s4d'") && strstr(msg, "'DeformableAggregation'") &&
              strstr(msg, "'1'") && strstr(msg, "registered creators"),
          "missing plugin: %s", msg);
    s4d_plugin_registry *r = registry_with_lib();
    st = build_fail("da_wrong_version.onnx", r, msg, sizeof msg);
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(msg, "'7'") && strstr(msg, "DeformableAggregation"),
          "wrong version: %s", msg);
    st = build_fail("da_unknown_attr.onnx", r, msg, sizeof msg);
    CHECK(st != S4D_OK && strstr(msg, "im2col_step") && strstr(msg, "aggregate"),
          "unknown attribute: %s", msg);
    st = build_fail("da_missing_plugin.onnx", r, msg, sizeof msg);
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(msg, "nowhere"), "namespace: %s", msg);
    s4d_plugin_registry_destroy(r);
    s4d_plugin_registry_destroy(empty);
}

static void case_bind_errors(void)
{
    s4d_engine *e = build("mlp.onnx", NULL);
    s4d_context *c;
    s4d_context_create(e, NULL, &c, NULL);
    s4d_status st = s4d_context_run(c, NULL);
    printf("  run without inputs -> %s: %s\n", s4d_status_string(st), s4d_context_errmsg(c));
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(s4d_context_errmsg(c), "'x'"), "%s",
          s4d_context_errmsg(c));
    float buf[12] = {0};
    int64_t bad_dims[2] = {3, 2}, dims[2] = {2, 3};
    st = s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 2, bad_dims, buf);
    printf("  wrong shape -> %s: %s\n", s4d_status_string(st), s4d_context_errmsg(c));
    CHECK(st == S4D_ERR_SHAPE && strstr(s4d_context_errmsg(c), "[3, 2]") &&
              strstr(s4d_context_errmsg(c), "[2, 3]"),
          "%s", s4d_context_errmsg(c));
    st = s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 1, dims, buf);
    CHECK(st == S4D_ERR_SHAPE, "rank mismatch accepted");
    st = s4d_context_bind(c, "x", S4D_DTYPE_FLOAT64, 2, dims, buf);
    printf("  wrong dtype -> %s: %s\n", s4d_status_string(st), s4d_context_errmsg(c));
    CHECK(st == S4D_ERR_DTYPE && strstr(s4d_context_errmsg(c), "float64") &&
              strstr(s4d_context_errmsg(c), "float32"),
          "%s", s4d_context_errmsg(c));
    st = s4d_context_bind(c, "nope", S4D_DTYPE_FLOAT32, 2, dims, buf);
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(s4d_context_errmsg(c), "'nope'") &&
              strstr(s4d_context_errmsg(c), "'x'"),
          "%s", s4d_context_errmsg(c));
    /* Failed binds leave x unbound. */
    CHECK(s4d_context_run(c, NULL) == S4D_ERR_NOT_FOUND, "run after failed binds");
    CHECK(s4d_context_bind(c, "x", S4D_DTYPE_FLOAT32, 2, dims, buf) == S4D_OK, "good bind");
    CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
    s4d_context_destroy(c);
    /* Options. */
    s4d_build_options bo;
    s4d_build_options_init(&bo);
    bo.fp16 = 1;
    s4d_engine *e2 = NULL;
    s4d_errbuf err;
    st = s4d_engine_build_onnx_file(model_path("mlp.onnx"), &bo, &e2, &err);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(err.msg, "fp16"), "%s", err.msg);
    s4d_build_options_init(&bo);
    bo.device = S4D_DEVICE_CUDA;
    st = s4d_engine_build_onnx_file(model_path("mlp.onnx"), &bo, &e2, &err);
    /* Without a GPU (and the guarded device) CUDA is refused, naming it. */
    if (st != S4D_OK)
        CHECK(st == S4D_ERR_NO_DEVICE && (strstr(err.msg, "cuda") || strstr(err.msg, "CUDA")),
              "%s", err.msg);
    s4d_engine_destroy(e2);
    e2 = NULL;
    s4d_build_options_init(&bo);
    bo.struct_size = 3;
    st = s4d_engine_build_onnx_file(model_path("mlp.onnx"), &bo, &e2, &err);
    CHECK(st == S4D_ERR_INVALID_ARG && strstr(err.msg, "struct_size"), "%s", err.msg);
    s4d_build_options_init(&bo);
    bo.conv_layout = (s4d_conv_layout)7;
    st = s4d_engine_build_onnx_file(model_path("mlp.onnx"), &bo, &e2, &err);
    CHECK(st == S4D_ERR_INVALID_ARG && strstr(err.msg, "conv_layout 7"), "%s", err.msg);
    s4d_engine_destroy(NULL);
    s4d_context_destroy(NULL);
    s4d_engine_destroy(e);
}

/*
 * Input events (s4d_context_set_input_event). Everywhere: names that are no input are
 * refused, naming them. On the CPU an event is refused (runs are done on return). On the
 * guarded device an event is a long long[2] that each wait counts in [0] and stamps in [1]
 * with the kernels and copies run before it: each event is waited for once per run, the
 * layers that do not read the input run before the wait, and the outputs do not change.
 * The ordering on a GPU is tested with torch's streams (tests/python/gpu).
 */
static void case_input_event(void)
{
    s4d_plugin_registry *r = registry_with_lib();
    s4d_engine *e = build("da.onnx", r);
    s4d_context *c = NULL;
    s4d_errbuf err;
    CHECK(s4d_context_create(e, NULL, &c, &err) == S4D_OK, "%s", err.msg);
    long long ev_feat[2] = {0, 0}, ev_loc[2] = {0, 0};
    s4d_status st = s4d_context_set_input_event(c, "nope", ev_feat);
    printf("  unknown name -> %s: %s\n", s4d_status_string(st), s4d_context_errmsg(c));
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(s4d_context_errmsg(c), "'nope'") &&
              strstr(s4d_context_errmsg(c), "'feat_in'"),
          "%s", s4d_context_errmsg(c));
    st = s4d_context_set_input_event(c, "out", ev_feat);
    CHECK(st == S4D_ERR_NOT_FOUND && strstr(s4d_context_errmsg(c), "'out'"), "an output: %s",
          s4d_context_errmsg(c));
    CHECK(s4d_context_set_input_event(c, NULL, ev_feat) == S4D_ERR_INVALID_ARG, "NULL name");
    CHECK(s4d_context_set_input_event(c, "feat_in", NULL) == S4D_OK, "clearing: %s",
          s4d_context_errmsg(c));
    const char *guarded = getenv("S4D_TEST_BACKEND");
    if (g_device == S4D_DEVICE_CPU) {
        st = s4d_context_set_input_event(c, "feat_in", ev_feat);
        printf("  on the CPU -> %s: %s\n", s4d_status_string(st), s4d_context_errmsg(c));
        CHECK(st == S4D_ERR_UNSUPPORTED && strstr(s4d_context_errmsg(c), "cpu"), "%s",
              s4d_context_errmsg(c));
    } else if (guarded && strcmp(guarded, "guarded") == 0) {
        size_t bytes;
        float *expect = run_da(e, &bytes);
        /* Inputs in the context's device buffers (a first host-bound run puts them there),
           so that the layers, not a copy at enqueue, are what reads them. */
        s4d_npy in[3];
        bind_da_inputs(c, in);
        CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
        for (int i = 0; i < 3; i++) {
            void *d = NULL;
            CHECK(s4d_context_device_buffer(c, da_inputs[i], &d) == S4D_OK &&
                      s4d_context_bind_memory(c, da_inputs[i], in[i].dtype, in[i].rank, in[i].dims,
                                              d, S4D_MEMORY_DEVICE) == S4D_OK,
                  "%s", s4d_context_errmsg(c));
        }
        CHECK(s4d_context_set_input_event(c, "feat_in", ev_feat) == S4D_OK, "%s",
              s4d_context_errmsg(c));
        CHECK(s4d_context_set_input_event(c, "sampling_location", ev_loc) == S4D_OK, "%s",
              s4d_context_errmsg(c));
        for (int run = 1; run <= 2; run++) {
            CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
            printf("  run %d: feat_in waited %lld times (after %lld kernels and copies), "
                   "sampling_location %lld times (after %lld)\n",
                   run, ev_feat[0], ev_feat[1], ev_loc[0], ev_loc[1]);
            CHECK(ev_feat[0] == run && ev_loc[0] == run, "each event once per run");
        }
        /* sampling_location is read by the aggregation alone, after the weights' layers,
           which do not read it: they ran before its wait. */
        CHECK(ev_loc[1] - ev_feat[1] >= 3, "layers before the aggregation waited too");
        const void *got = NULL;
        s4d_tensor_info info;
        CHECK(s4d_context_output(c, "out", &got, &info) == S4D_OK && info.bytes == bytes,
              "%s", s4d_context_errmsg(c));
        /* "out" is not bound: the context copied it to its own host buffer. */
        CHECK(got && memcmp(got, expect, bytes) == 0, "outputs changed with input events");
        CHECK(s4d_context_set_input_event(c, "sampling_location", NULL) == S4D_OK, "%s",
              s4d_context_errmsg(c));
        CHECK(s4d_context_run(c, NULL) == S4D_OK, "%s", s4d_context_errmsg(c));
        CHECK(ev_loc[0] == 2 && ev_feat[0] == 3, "a cleared event is not waited for");
        for (int i = 0; i < 3; i++)
            s4d_npy_free(&in[i]);
        free(expect);
    } else {
        printf("  a real GPU: the ordering is tested with torch's streams (tests/python/gpu)\n");
    }
    s4d_context_destroy(c);
    s4d_engine_destroy(e);
    s4d_plugin_registry_destroy(r);
}

typedef struct thread_arg {
    const s4d_engine *e;
    const float *expect;
    size_t bytes;
    int ok;
} thread_arg;

static void *thread_main(void *p)
{
    thread_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 20; i++) {
        size_t bytes;
        float *out = run_da(a->e, &bytes);
        a->ok &= bytes == a->bytes && memcmp(out, a->expect, bytes) == 0;
        free(out);
    }
    return NULL;
}

static void case_threads(void)
{
    s4d_plugin_registry *r = registry_with_lib();
    s4d_engine *e = build("da.onnx", r);
    size_t bytes;
    float *expect = run_da(e, &bytes);
    thread_arg args[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        args[i] = (thread_arg){e, expect, bytes, 0};
        pthread_create(&th[i], NULL, thread_main, &args[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok, "thread %d got different outputs", i);
    }
    printf("  3 threads x 20 runs on one engine: identical outputs\n");
    free(expect);
    s4d_engine_destroy(e);
    s4d_plugin_registry_destroy(r);
}

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"mlp", case_mlp},
    {"save_load_bitwise", case_save_load_bitwise},
    {"plugin_golden", case_plugin_golden},
    {"alias", case_alias},
    {"views", case_views},
    {"plugin_api", case_plugin_api},
    {"bad_onnx", case_bad_onnx},
    {"bad_engine_truncated", case_bad_engine_truncated},
    {"bad_engine_bitflip", case_bad_engine_bitflip},
    {"bad_engine_version", case_bad_engine_version},
    {"unknown_op", case_unknown_op},
    {"plugin_errors", case_plugin_errors},
    {"bind_errors", case_bind_errors},
    {"threads", case_threads},
    {"input_event", case_input_event},
};

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: test_engine CASE MODELS_DIR PLUGIN_LIB\n");
        return 2;
    }
    g_models = argv[2];
    g_plugin_lib = argv[3];
    const char *dev = getenv("S4D_TEST_DEVICE");
    if (dev && strcmp(dev, "cuda") == 0) {
        g_device = S4D_DEVICE_CUDA;
        s4d_build_options o;
        s4d_build_options_init(&o);
        o.device = g_device;
        s4d_engine *e = NULL;
        s4d_errbuf err;
        if (s4d_engine_build_onnx_file(model_path("mlp.onnx"), &o, &e, &err) == S4D_ERR_NO_DEVICE) {
            printf("no CUDA device here: %s\n", err.msg);
            return 77;
        }
        s4d_engine_destroy(e);
    }
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
