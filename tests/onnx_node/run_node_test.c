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

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: run_node_test TEST_DIR [rtol atol]\n");
        return 2;
    }
    const char *dir = argv[1];
    double rtol = argc == 4 ? atof(argv[2]) : 1e-3;
    double atol = argc == 4 ? atof(argv[3]) : 1e-5;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    s4d_engine *e = NULL;
    s4d_errbuf err;
    if (s4d_engine_build_onnx_file(path, NULL, &e, &err) != S4D_OK) {
        fprintf(stderr, "FAIL: build: %s\n", err.msg);
        return 1;
    }
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.num_threads = 2;
    s4d_context *ctx = NULL;
    if (s4d_context_create(e, &co, &ctx, &err) != S4D_OK) {
        fprintf(stderr, "FAIL: context: %s\n", err.msg);
        s4d_engine_destroy(e);
        return 1;
    }
    int rc = 0, sets = 0;
    for (int s = 0; s < 100; s++) {
        snprintf(path, 4096, "%s/test_data_set_%d", dir, s);
        if (!exists(path))
            break;
        sets++;
        rc |= run_set(e, ctx, path, rtol, atol);
    }
    s4d_context_destroy(ctx);
    s4d_engine_destroy(e);
    if (!sets) {
        fprintf(stderr, "FAIL: %s has no test_data_set_0\n", dir);
        return 1;
    }
    if (!rc)
        printf("PASS: %s (%d data set%s)\n", dir, sets, sets == 1 ? "" : "s");
    return rc;
}
