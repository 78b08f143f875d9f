/*
 * Runs one ONNX backend node test (a directory of Debian's libonnx-testdata:
 * model.onnx and test_data_set_N/{input,output}_K.pb) through the public
 * engine API and compares every output: floats within rtol/atol, integers
 * and bools exactly.
 *
 * usage: run_node_test TEST_DIR [rtol atol]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "compare.h"
#include "onnx/onnx_import.h"
#include "s4d/engine.h"
#include "util/util.h"

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static int load_pb(const char *path, s4d_tensor *t, char **name)
{
    uint8_t *data;
    size_t size;
    char err[512];
    if (s4d_read_file(path, &data, &size, err, sizeof err) != S4D_OK) {
        fprintf(stderr, "FAIL: %s\n", err);
        return -1;
    }
    s4d_status st = s4d_onnx_read_tensor(data, size, t, name, err, sizeof err);
    free(data);
    if (st != S4D_OK) {
        fprintf(stderr, "FAIL: %s: %s\n", path, err);
        return -1;
    }
    return 0;
}

/*
 * With S4D_NODE_DIGEST=FILE, appends "SET output_K FNV1A64" per output, so
 * that two builds of the engine can be compared bit for bit
 * (scripts/record_outputs.sh).
 */
static void record_digest(const char *set, int k, const void *data, size_t bytes)
{
    const char *path = getenv("S4D_NODE_DIGEST");
    if (!path || !path[0])
        return;
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    fprintf(f, "%s output_%d %016llx\n", set, k,
            (unsigned long long)s4d_fnv1a64(data, bytes, 0));
    fclose(f);
}

/* The engine input/output index a test tensor belongs to: by name, else by position. */
static int io_index(const s4d_engine *e, int is_output, const char *name, int position)
{
    int n = is_output ? s4d_engine_num_outputs(e) : s4d_engine_num_inputs(e);
    for (int i = 0; name && name[0] && i < n; i++) {
        s4d_tensor_info ti;
        if (is_output)
            s4d_engine_output_info(e, i, &ti);
        else
            s4d_engine_input_info(e, i, &ti);
        if (strcmp(ti.name, name) == 0)
            return i;
    }
    return position < n ? position : -1;
}

static int run_set(s4d_engine *e, s4d_context *ctx, const char *set, double rtol, double atol)
{
    char path[4096 + 64];
    int rc = 0;
    s4d_tensor inputs[64];
    int num_in = 0;
    memset(inputs, 0, sizeof inputs);
    for (int k = 0; k < 64; k++) {
        snprintf(path, sizeof path, "%s/input_%d.pb", set, k);
        if (!exists(path))
            break;
        char *name = NULL;
        if (load_pb(path, &inputs[k], &name) != 0) {
            rc = 1;
            break;
        }
        num_in = k + 1;
        int idx = io_index(e, 0, name, k);
        if (idx < 0) {
            fprintf(stderr, "FAIL: %s: no engine input for '%s'\n", path, name ? name : "");
            free(name);
            rc = 1;
            break;
        }
        s4d_tensor_info ti;
        s4d_engine_input_info(e, idx, &ti);
        free(name);
        if (s4d_context_bind(ctx, ti.name, inputs[k].dtype, inputs[k].rank, inputs[k].dims,
                             inputs[k].data) != S4D_OK) {
            fprintf(stderr, "FAIL: %s: %s\n", path, s4d_context_errmsg(ctx));
            rc = 1;
            break;
        }
    }
    if (!rc && s4d_context_run(ctx, NULL) != S4D_OK) {
        fprintf(stderr, "FAIL: %s: run: %s\n", set, s4d_context_errmsg(ctx));
        rc = 1;
    }
    for (int k = 0; !rc && k < 64; k++) {
        snprintf(path, sizeof path, "%s/output_%d.pb", set, k);
        if (!exists(path))
            break;
        s4d_tensor want;
        char *name = NULL;
        if (load_pb(path, &want, &name) != 0) {
            rc = 1;
            break;
        }
        int idx = io_index(e, 1, name, k);
        free(name);
        s4d_tensor_info ti;
        const void *got = NULL;
        if (idx < 0 || s4d_engine_output_info(e, idx, &ti) != S4D_OK ||
            s4d_context_output(ctx, ti.name, &got, NULL) != S4D_OK) {
            fprintf(stderr, "FAIL: %s: no matching engine output\n", path);
            free(want.data);
            rc = 1;
            break;
        }
        int same = want.dtype == ti.dtype && want.rank == ti.rank;
        for (int d = 0; same && d < ti.rank; d++)
            same = want.dims[d] == ti.dims[d];
        if (!same) {
            char a[128], b[128];
            fprintf(stderr, "FAIL: output '%s': engine %s%s, expected %s%s\n", ti.name,
                    s4d_dtype_name(ti.dtype), s4d_dims_str(ti.rank, ti.dims, a, sizeof a),
                    s4d_dtype_name(want.dtype), s4d_dims_str(want.rank, want.dims, b, sizeof b));
            free(want.data);
            rc = 1;
            break;
        }
        cmp_result r;
        int64_t n = s4d_dims_numel(ti.rank, ti.dims);
        record_digest(set, k, got, (size_t)n * s4d_dtype_size(ti.dtype));
        if (compare_arrays(ti.dtype, got, want.data, n, rtol, atol, &r) != 0 || r.bad) {
            fprintf(stderr,
                    "FAIL: output '%s': %lld of %lld elements differ (max_abs %.3e; first at %lld: "
                    "got %.9g want %.9g)\n",
                    ti.name, (long long)r.bad, (long long)n, r.max_abs, (long long)r.first_bad,
                    r.first_bad >= 0 ? elem_to_double(ti.dtype, got, r.first_bad) : 0.0,
                    r.first_bad >= 0 ? elem_to_double(ti.dtype, want.data, r.first_bad) : 0.0);
            rc = 1;
        }
        free(want.data);
    }
    for (int k = 0; k < num_in; k++)
        free(inputs[k].data);
    return rc;
}

/* How a test runs: device, fallback, tolerances. */
typedef struct run_opts {
    s4d_device device;
    int fallback;
    double rtol, atol;
} run_opts;

/*
 * An input carries a shape (a Reshape shape, Slice starts, Resize scales,
 * OneHot depth, Range bounds...) when it is an integer tensor of rank <= 1,
 * or a short float vector or scalar; the
 * engine builds static shapes, so such inputs are fixed at build time to the
 * data set's values (s4d_input_spec VALUES, what s4dexec --shapes does).
 */
static int shape_like(const s4d_tensor *t)
{
    int64_t n = s4d_dims_numel(t->rank, t->dims);
    if (t->rank > 1 || n > 16)
        return 0;
    return t->dtype == S4D_DTYPE_INT64 || t->dtype == S4D_DTYPE_INT32 ||
           t->dtype == S4D_DTYPE_FLOAT32;
}

/* Builds the model, freezing shape-like inputs of set 0 when a plain build fails. */
static s4d_status build_model(const char *dir, const run_opts *o, s4d_engine **e, int *frozen,
                              char *msg, size_t msgsz)
{
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    s4d_build_options bo;
    s4d_build_options_init(&bo);
    bo.device = o->device;
    bo.allow_fallback = o->fallback;
    s4d_errbuf err;
    *frozen = 0;
    s4d_status st = s4d_engine_build_onnx_file(path, &bo, e, &err);
    if (st == S4D_OK)
        return st;
    snprintf(msg, msgsz, "%s", err.msg);
    /* Retry with the shape-carrying inputs of data set 0 given at build. */
    s4d_input_spec specs[16];
    double *vals[16];
    char *names[16];
    int n = 0;
    for (int k = 0; k < 16; k++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/input_%d.pb", dir, k);
        if (!exists(path))
            break;
        s4d_tensor t;
        char *name = NULL;
        if (load_pb(path, &t, &name) != 0)
            break;
        if (shape_like(&t) && name && name[0]) {
            int64_t cnt = s4d_dims_numel(t.rank, t.dims);
            vals[n] = malloc(sizeof(double) * (size_t)(cnt + 1));
            for (int64_t i = 0; i < cnt; i++)
                vals[n][i] = t.dtype == S4D_DTYPE_INT64   ? (double)((int64_t *)t.data)[i]
                             : t.dtype == S4D_DTYPE_INT32 ? (double)((int32_t *)t.data)[i]
                                                          : (double)((float *)t.data)[i];
            memset(&specs[n], 0, sizeof specs[n]);
            specs[n].name = names[n] = name;
            specs[n].kind = S4D_INPUT_SPEC_VALUES;
            specs[n].rank = (int)cnt;
            specs[n].values = vals[n];
            n++;
        } else {
            free(name);
        }
        free(t.data);
    }
    if (n > 0) {
        bo.input_specs = specs;
        bo.num_input_specs = n;
        snprintf(path, sizeof path, "%s/model.onnx", dir);
        if (s4d_engine_build_onnx_file(path, &bo, e, &err) == S4D_OK) {
            st = S4D_OK;
            *frozen = n;
        }
    }
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(vals[i]);
    }
    return st;
}

/* Runs one node test; 0 pass, 1 fail. *cpu_layers: layers that fell back to the CPU. */
static int run_test(const char *dir, const run_opts *o, int *cpu_layers, int quiet)
{
    s4d_engine *e = NULL;
    char msg[1024];
    int frozen = 0;
    *cpu_layers = 0;
    if (build_model(dir, o, &e, &frozen, msg, sizeof msg) != S4D_OK) {
        fprintf(stderr, "FAIL: build: %s\n", msg);
        return 1;
    }
    for (int i = 0; i < s4d_engine_num_layers(e); i++) {
        s4d_layer_info li;
        if (s4d_engine_layer_info(e, i, &li) == S4D_OK && li.device != o->device)
            (*cpu_layers)++;
    }
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.num_threads = 2;
    s4d_context *ctx = NULL;
    s4d_errbuf err;
    if (s4d_context_create(e, &co, &ctx, &err) != S4D_OK) {
        fprintf(stderr, "FAIL: context: %s\n", err.msg);
        s4d_engine_destroy(e);
        return 1;
    }
    int rc = 0, sets = 0;
    char path[4096];
    for (int s = 0; s < 100; s++) {
        snprintf(path, sizeof path, "%s/test_data_set_%d", dir, s);
        if (!exists(path))
            break;
        sets++;
        rc |= run_set(e, ctx, path, o->rtol, o->atol);
    }
    s4d_context_destroy(ctx);
    s4d_engine_destroy(e);
    if (!sets) {
        fprintf(stderr, "FAIL: %s has no test_data_set_0\n", dir);
        return 1;
    }
    if (!rc && !quiet)
        printf("PASS: %s (%d data set%s%s)\n", dir, sets, sets == 1 ? "" : "s",
               frozen ? ", shape inputs fixed at build" : "");
    return rc;
}

/* Every test named in the list files, in one process (one CUDA initialisation). */
static int run_batch(const char *data, char **lists, int nlists, const run_opts *o)
{
    int pass = 0, pass_fb = 0, fail = 0;
    for (int l = 0; l < nlists; l++) {
        FILE *f = fopen(lists[l], "r");
        if (!f) {
            fprintf(stderr, "FAIL: cannot open %s\n", lists[l]);
            return 1;
        }
        char line[512];
        while (fgets(line, sizeof line, f)) {
            char *h = strchr(line, '#');
            if (h)
                *h = 0;
            char name[512];
            if (sscanf(line, "%511s", name) != 1)
                continue;
            char dir[4096];
            snprintf(dir, sizeof dir, "%s/%s", data, name);
            int cpu_layers = 0;
            if (run_test(dir, o, &cpu_layers, 1) != 0) {
                fprintf(stderr, "FAIL: %s\n", name);
                fail++;
            } else if (cpu_layers) {
                printf("pass with %d layer%s on the CPU: %s\n", cpu_layers,
                       cpu_layers == 1 ? "" : "s", name);
                pass_fb++;
            } else {
                pass++;
            }
        }
        fclose(f);
    }
    printf("node tests on %s: %d pass entirely on it, %d pass with CPU fallback layers, %d fail\n",
           o->device == S4D_DEVICE_CUDA ? "cuda" : "cpu", pass, pass_fb, fail);
    return fail ? 1 : 0;
}

int main(int argc, char **argv)
{
    run_opts o = {S4D_DEVICE_CPU, 0, 1e-3, 1e-5};
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--device=cuda") == 0)
            o.device = S4D_DEVICE_CUDA;
        else if (strcmp(argv[i], "--fallback") == 0)
            o.fallback = 1;
        else if (strcmp(argv[i], "--batch") == 0)
            break;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (i < argc && strcmp(argv[i], "--batch") == 0) {
        if (argc - i < 3) {
            fprintf(stderr, "usage: run_node_test [--device=cuda] [--fallback] --batch DATA LIST...\n");
            return 2;
        }
        if (o.device == S4D_DEVICE_CUDA) {
            /* Skip (77) where there is no GPU, so CTest says so. */
            s4d_build_options bo;
            s4d_build_options_init(&bo);
            bo.device = o.device;
            s4d_engine *e = NULL;
            s4d_errbuf err;
            char path[4096];
            snprintf(path, sizeof path, "%s/test_abs/model.onnx", argv[i + 1]);
            if (s4d_engine_build_onnx_file(path, &bo, &e, &err) == S4D_ERR_NO_DEVICE) {
                printf("no CUDA device: %s\n", err.msg);
                return 77;
            }
            s4d_engine_destroy(e);
        }
        return run_batch(argv[i + 1], argv + i + 2, argc - i - 2, &o);
    }
    if (argc - i != 1 && argc - i != 3) {
        fprintf(stderr, "usage: run_node_test [--device=cuda] [--fallback] TEST_DIR [rtol atol]\n");
        return 2;
    }
    if (argc - i == 3) {
        o.rtol = atof(argv[i + 1]);
        o.atol = atof(argv[i + 2]);
    }
    int cpu_layers;
    return run_test(argv[i], &o, &cpu_layers, 0);
}
