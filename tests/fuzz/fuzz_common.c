/* Helpers of the fuzz targets: see fuzz_common.h. */
#include "fuzz_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The deformable aggregation plugin's entry point, linked into the target from plugins/. */
s4d_status s4d_plugin_library_init(const s4d_host_api *host, uint32_t *library_abi_version,
                                   s4d_errbuf *err);

void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz: contract broken: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

static s4d_status register_creator(void *host, const s4d_plugin_creator *creator)
{
    return s4d_plugin_registry_register(host, creator);
}

s4d_plugin_registry *fuzz_registry(void)
{
    static s4d_plugin_registry *reg;
    if (reg)
        return reg;
    if (s4d_plugin_registry_create(&reg) != S4D_OK)
        fuzz_fail("cannot create a plugin registry");
    s4d_host_api api;
    memset(&api, 0, sizeof api);
    api.abi_version = S4D_PLUGIN_ABI_VERSION;
    api.struct_size = sizeof api;
    api.host = reg;
    api.register_creator = register_creator;
    uint32_t abi = 0;
    s4d_errbuf err = {{0}};
    if (s4d_plugin_library_init(&api, &abi, &err) != S4D_OK)
        fuzz_fail("registering the plugin creators: %s", err.msg);
    return reg;
}

static void fill(s4d_dtype dt, void *data, size_t n)
{
    /* A fixed cycle of values with negatives, zeros and fractions: enough to reach the
       branches of the ops without making the outcome depend on anything but the input file. */
    static const float fv[8] = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f, 1.0f, -2.0f, 0.125f};
    for (size_t i = 0; i < n; i++) {
        float f = fv[i % 8];
        int64_t k = (int64_t)(i % 4);
        switch (dt) {
        case S4D_DTYPE_FLOAT32: ((float *)data)[i] = f; break;
        case S4D_DTYPE_FLOAT64: ((double *)data)[i] = f; break;
        case S4D_DTYPE_FLOAT16:
        case S4D_DTYPE_BFLOAT16: ((uint16_t *)data)[i] = (uint16_t)(0x3800 + (i % 4) * 0x400); break;
        case S4D_DTYPE_INT64: ((int64_t *)data)[i] = k; break;
        case S4D_DTYPE_UINT64: ((uint64_t *)data)[i] = (uint64_t)k; break;
        case S4D_DTYPE_INT32: ((int32_t *)data)[i] = (int32_t)k; break;
        case S4D_DTYPE_UINT32: ((uint32_t *)data)[i] = (uint32_t)k; break;
        case S4D_DTYPE_INT16: ((int16_t *)data)[i] = (int16_t)k; break;
        case S4D_DTYPE_UINT16: ((uint16_t *)data)[i] = (uint16_t)k; break;
        case S4D_DTYPE_INT8: ((int8_t *)data)[i] = (int8_t)k; break;
        case S4D_DTYPE_UINT8: ((uint8_t *)data)[i] = (uint8_t)k; break;
        case S4D_DTYPE_BOOL: ((uint8_t *)data)[i] = (uint8_t)(i & 1); break;
        case S4D_DTYPE_STRING:
        case S4D_DTYPE_UNDEFINED: break;
        }
    }
}

/* Adds b to *a unless the sum passes the budget; returns 0 when it does. */
static int add_budget(size_t *a, size_t b)
{
    if (b > FUZZ_RUN_BUDGET_BYTES || *a > FUZZ_RUN_BUDGET_BYTES - b)
        return 0;
    *a += b;
    return 1;
}

void fuzz_run_engine(const s4d_engine *e)
{
    int nin = s4d_engine_num_inputs(e), nout = s4d_engine_num_outputs(e);
    int nl = s4d_engine_num_layers(e);
    if (nin < 0 || nout < 1 || nl < 0)
        fuzz_fail("engine with %d inputs, %d outputs, %d layers", nin, nout, nl);
    size_t total = 0, workspace = 0;
    int ok = add_budget(&total, s4d_engine_activation_bytes(e)) &&
             add_budget(&total, s4d_engine_weight_bytes(e));
    for (int i = 0; ok && i < nl; i++) {
        s4d_layer_info li;
        if (s4d_engine_layer_info(e, i, &li) != S4D_OK)
            fuzz_fail("layer %d of %d has no info", i, nl);
        if (li.workspace_bytes > workspace)
            workspace = li.workspace_bytes;
    }
    ok = ok && add_budget(&total, workspace);
    for (int i = 0; ok && i < nin + nout; i++) {
        s4d_tensor_info ti;
        s4d_status st = i < nin ? s4d_engine_input_info(e, i, &ti)
                                : s4d_engine_output_info(e, i - nin, &ti);
        if (st != S4D_OK || !ti.name)
            fuzz_fail("%s %d has no info", i < nin ? "input" : "output", i);
        ok = add_budget(&total, ti.bytes);
    }
    if (!ok)
        return;

    s4d_context_options co;
    s4d_context_options_init(&co);
    co.num_threads = 1;
    s4d_context *ctx = NULL;
    s4d_errbuf err = {{0}};
    if (s4d_context_create(e, &co, &ctx, &err) != S4D_OK) {
        if (ctx)
            fuzz_fail("a failed context_create left *out set");
        return;
    }
    void **bufs = calloc((size_t)nin + 1, sizeof *bufs);
    if (!bufs)
        fuzz_fail("out of memory");
    int bound = 1;
    for (int i = 0; i < nin && bound; i++) {
        s4d_tensor_info ti;
        s4d_engine_input_info(e, i, &ti);
        size_t esz = s4d_dtype_size(ti.dtype);
        bufs[i] = malloc(ti.bytes ? ti.bytes : 1);
        if (!bufs[i])
            fuzz_fail("out of memory for %zu input bytes", ti.bytes);
        if (esz)
            fill(ti.dtype, bufs[i], ti.bytes / esz);
        bound = s4d_context_bind(ctx, ti.name, ti.dtype, ti.rank, ti.dims, bufs[i]) == S4D_OK;
    }
    if (bound && s4d_context_run(ctx, NULL) == S4D_OK) {
        for (int i = 0; i < nout; i++) {
            s4d_tensor_info ti;
            s4d_engine_output_info(e, i, &ti);
            const void *data = NULL;
            s4d_tensor_info got;
            if (s4d_context_output(ctx, ti.name, &data, &got) != S4D_OK)
                fuzz_fail("output '%s' missing after a successful run", ti.name);
            if (got.bytes != ti.bytes || (ti.bytes && !data))
                fuzz_fail("output '%s': %zu bytes at %p, the engine says %zu", ti.name,
                          got.bytes, data, ti.bytes);
            /* Touch every byte, so that ASan sees a buffer shorter than promised. */
            volatile uint8_t sink = 0;
            for (size_t b = 0; b < ti.bytes; b++)
                sink ^= ((const uint8_t *)data)[b];
            (void)sink;
        }
    }
    for (int i = 0; i < nin; i++)
        free(bufs[i]);
    free(bufs);
    s4d_context_destroy(ctx);
}

static void same_tensor(const char *what, int i, const s4d_tensor_info *a, const s4d_tensor_info *b)
{
    int same = strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->rank == b->rank &&
               a->bytes == b->bytes;
    for (int d = 0; same && d < a->rank && d < S4D_MAX_DIMS; d++)
        same = a->dims[d] == b->dims[d];
    if (!same)
        fuzz_fail("%s %d ('%s') changed in a save/load round trip", what, i, a->name);
}

void fuzz_roundtrip_engine(s4d_engine *e)
{
    void *blob = NULL;
    size_t size = 0;
    if (s4d_engine_serialize(e, &blob, &size) != S4D_OK)
        return; /* a plugin may refuse to serialize; the status says so */
    s4d_load_options lo;
    s4d_load_options_init(&lo);
    lo.registry = fuzz_registry();
    s4d_engine *e2 = NULL;
    s4d_errbuf err = {{0}};
    if (s4d_engine_load_memory(blob, size, &lo, &e2, &err) != S4D_OK)
        fuzz_fail("an engine the library serialized does not load: %s", err.msg);
    if (s4d_engine_num_inputs(e2) != s4d_engine_num_inputs(e) ||
        s4d_engine_num_outputs(e2) != s4d_engine_num_outputs(e) ||
        s4d_engine_num_layers(e2) != s4d_engine_num_layers(e))
        fuzz_fail("input, output or layer count changed in a save/load round trip");
    for (int i = 0; i < s4d_engine_num_inputs(e); i++) {
        s4d_tensor_info a, b;
        s4d_engine_input_info(e, i, &a);
        s4d_engine_input_info(e2, i, &b);
        same_tensor("input", i, &a, &b);
    }
    for (int i = 0; i < s4d_engine_num_outputs(e); i++) {
        s4d_tensor_info a, b;
        s4d_engine_output_info(e, i, &a);
        s4d_engine_output_info(e2, i, &b);
        same_tensor("output", i, &a, &b);
    }
    /* Serialization is deterministic: the reloaded engine writes the same bytes. */
    void *blob2 = NULL;
    size_t size2 = 0;
    if (s4d_engine_serialize(e2, &blob2, &size2) != S4D_OK)
        fuzz_fail("a reloaded engine does not serialize: %s", s4d_engine_errmsg(e2));
    if (size2 != size || memcmp(blob, blob2, size) != 0)
        fuzz_fail("a reloaded engine serializes to other bytes (%zu vs %zu)", size2, size);
    s4d_free(blob2);
    s4d_free(blob);
    s4d_engine_destroy(e2);
}
