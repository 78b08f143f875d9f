/*
 * The second worked example of docs/plugins.md: the ABI 2 lifecycle.
 * example::Lut v1 computes y = tanh(x) by linear interpolation in a table of
 * `size` + 1 samples over [lo, hi] (clamped outside), on float32 tensors on
 * the CPU. It shows where each kind of work belongs:
 *   supports_format  answers position by position (float32, linear, CPU);
 *   configure        builds the table once the engine is final (build and load);
 *   attach/detach    give each execution context its own mutable state;
 *   enqueue          allocates nothing and touches only its context's state.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s4d/plugin.h"

typedef struct lut_state {
    float lo, hi;
    int64_t size;
    float *table; /* size + 1 samples; made by configure */
} lut_state;

/* What each execution context owns. */
typedef struct lut_context {
    uint64_t runs; /* enqueues on this context: mutable, so per context */
} lut_context;

#define LUT_PAYLOAD_SIZE 20 /* "LUT1", lo, hi, size (i64), little-endian */

static void set_err(s4d_errbuf *err, const char *msg)
{
    if (err)
        snprintf(err->msg, sizeof(err->msg), "%s", msg);
}

static int32_t lut_num_outputs(const s4d_plugin *self) { return 1; }

static s4d_status lut_get_output_descs(const s4d_plugin *self, const s4d_plugin_tensor_desc *in,
                                       int32_t nin, s4d_plugin_tensor_desc *out, int32_t nout,
                                       s4d_errbuf *err)
{
    if (nin != 1 || nout != 1) {
        set_err(err, "Lut takes 1 input (x) and gives 1 output");
        return S4D_ERR_INVALID_ARG;
    }
    /* The output follows the input; which dtypes run is negotiated separately. */
    out[0].dtype = in[0].dtype;
    out[0].rank = in[0].rank;
    memcpy(out[0].dims, in[0].dims, sizeof(out[0].dims));
    return S4D_OK;
}

/* ABI 1 hosts ask this once for the whole combination; ABI 2 hosts use supports_format. */
static s4d_status lut_supports(const s4d_plugin *self, const s4d_plugin_tensor_desc *in,
                               int32_t nin, const s4d_plugin_tensor_desc *out, int32_t nout,
                               s4d_errbuf *err)
{
    if (in[0].dtype != S4D_DTYPE_FLOAT32 || out[0].dtype != S4D_DTYPE_FLOAT32 ||
        in[0].device != S4D_DEVICE_CPU) {
        set_err(err, "Lut takes float32 on the cpu only");
        return S4D_ERR_UNSUPPORTED;
    }
    return S4D_OK;
}

static s4d_status lut_supports_format(const s4d_plugin *self, int32_t pos,
                                      const s4d_plugin_tensor_desc *descs, int32_t nin,
                                      int32_t nout)
{
    const s4d_plugin_tensor_desc *d = &descs[pos];
    if (d->dtype != S4D_DTYPE_FLOAT32 || d->format != S4D_FORMAT_LINEAR ||
        d->device != S4D_DEVICE_CPU)
        return S4D_ERR_UNSUPPORTED;
    /* The output must match the input chosen before it. */
    if (pos == 1 && descs[0].dtype != d->dtype)
        return S4D_ERR_UNSUPPORTED;
    return S4D_OK;
}

static size_t lut_workspace_size(const s4d_plugin *self, const s4d_plugin_tensor_desc *in,
                                 int32_t nin, const s4d_plugin_tensor_desc *out, int32_t nout)
{
    return 0;
}

static size_t lut_serialize_size(const s4d_plugin *self) { return LUT_PAYLOAD_SIZE; }

static s4d_status lut_serialize(const s4d_plugin *self, void *buf, size_t size, s4d_errbuf *err)
{
    if (size != LUT_PAYLOAD_SIZE) {
        set_err(err, "serialize: wrong buffer size");
        return S4D_ERR_INVALID_ARG;
    }
    const lut_state *s = self->state;
    unsigned char *p = buf;
    uint32_t u;
    memcpy(p, "LUT1", 4);
    memcpy(&u, &s->lo, 4);
    for (int i = 0; i < 4; i++)
        p[4 + i] = (unsigned char)(u >> (8 * i));
    memcpy(&u, &s->hi, 4);
    for (int i = 0; i < 4; i++)
        p[8 + i] = (unsigned char)(u >> (8 * i));
    for (int i = 0; i < 8; i++)
        p[12 + i] = (unsigned char)((uint64_t)s->size >> (8 * i));
    return S4D_OK;
}

/* One-time work once the engine is final: the table. Called at build and at load. */
static s4d_status lut_configure(s4d_plugin *self, const s4d_plugin_tensor_desc *in, int32_t nin,
                                const s4d_plugin_tensor_desc *out, int32_t nout,
                                const s4d_plugin_config_info *info, s4d_errbuf *err)
{
    lut_state *s = self->state;
    if (info->device != S4D_DEVICE_CPU) {
        set_err(err, "Lut is configured for the cpu only");
        return S4D_ERR_UNSUPPORTED;
    }
    float *t = malloc(sizeof(float) * (size_t)(s->size + 1));
    if (!t) {
        set_err(err, "out of memory for the table");
        return S4D_ERR_NO_MEMORY;
    }
    for (int64_t i = 0; i <= s->size; i++)
        t[i] = (float)tanh(s->lo + (double)(s->hi - s->lo) * (double)i / (double)s->size);
    free(s->table);
    s->table = t;
    return S4D_OK;
}

static s4d_status lut_attach(const s4d_plugin *self, const s4d_plugin_config_info *info,
                             void **context_state, s4d_errbuf *err)
{
    lut_context *c = calloc(1, sizeof(*c));
    if (!c) {
        set_err(err, "out of memory");
        return S4D_ERR_NO_MEMORY;
    }
    *context_state = c;
    return S4D_OK;
}

static void lut_detach(const s4d_plugin *self, void *context_state)
{
    free(context_state);
}

static s4d_status lut_enqueue(const s4d_plugin *self, const s4d_plugin_tensor *in, int32_t nin,
                              s4d_plugin_tensor *out, int32_t nout,
                              const s4d_plugin_run_info *run, s4d_errbuf *err)
{
    const lut_state *s = self->state;
    if (!s->table) {
        set_err(err, "enqueue before configure");
        return S4D_ERR_PLUGIN;
    }
    if (run->struct_size < sizeof(*run) || !run->context_state) {
        set_err(err, "enqueue on a context this instance was not attached to");
        return S4D_ERR_PLUGIN;
    }
    lut_context *c = run->context_state;
    c->runs++;
    int64_t n = 1;
    for (int32_t i = 0; i < in[0].desc.rank; i++)
        n *= in[0].desc.dims[i];
    const float *x = in[0].data;
    float *y = out[0].data;
    const double step = (double)(s->hi - s->lo) / (double)s->size;
    for (int64_t i = 0; i < n; i++) {
        double u = (x[i] - s->lo) / step;
        if (!(u > 0)) /* NaN too: the table's first value */
            u = 0;
        if (u > (double)s->size)
            u = (double)s->size;
        int64_t k = (int64_t)u;
        if (k == s->size)
            k--;
        double f = u - (double)k;
        y[i] = (float)((1.0 - f) * s->table[k] + f * s->table[k + 1]);
    }
    return S4D_OK;
}

static void lut_destroy(s4d_plugin *self)
{
    lut_state *s = self->state;
    free(s->table);
    free(s);
    free(self);
}

static s4d_status lut_new(float lo, float hi, int64_t size, s4d_plugin **out, s4d_errbuf *err)
{
    if (!(hi > lo) || size < 1 || size > (1 << 20)) {
        set_err(err, "Lut needs lo < hi and 1 <= size <= 2^20");
        return S4D_ERR_INVALID_ARG;
    }
    s4d_plugin *p = calloc(1, sizeof(*p));
    lut_state *s = calloc(1, sizeof(*s));
    if (!p || !s) {
        free(p);
        free(s);
        set_err(err, "out of memory");
        return S4D_ERR_NO_MEMORY;
    }
    s->lo = lo;
    s->hi = hi;
    s->size = size;
    p->abi_version = S4D_PLUGIN_ABI_VERSION;
    p->struct_size = sizeof(*p);
    p->state = s;
    p->num_outputs = lut_num_outputs;
    p->get_output_descs = lut_get_output_descs;
    p->supports = lut_supports;
    p->workspace_size = lut_workspace_size;
    p->serialize_size = lut_serialize_size;
    p->serialize = lut_serialize;
    p->enqueue = lut_enqueue;
    p->destroy = lut_destroy;
    p->supports_format = lut_supports_format;
    p->configure = lut_configure;
    p->attach = lut_attach;
    p->detach = lut_detach;
    *out = p;
    return S4D_OK;
}

static s4d_status lut_create(const s4d_plugin_creator *self, const char *node_name,
                             const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    float lo = *(const float *)fields->fields[0].data;
    float hi = *(const float *)fields->fields[1].data;
    int64_t size = *(const int64_t *)fields->fields[2].data;
    return lut_new(lo, hi, size, out, err);
}

static s4d_status lut_deserialize(const s4d_plugin_creator *self, const void *data, size_t size,
                                  s4d_plugin **out, s4d_errbuf *err)
{
    if (size != LUT_PAYLOAD_SIZE || memcmp(data, "LUT1", 4) != 0) {
        set_err(err, "not a Lut v1 payload");
        return S4D_ERR_PARSE;
    }
    const unsigned char *p = data;
    uint32_t a = 0, b = 0;
    uint64_t n = 0;
    for (int i = 0; i < 4; i++) {
        a |= (uint32_t)p[4 + i] << (8 * i);
        b |= (uint32_t)p[8 + i] << (8 * i);
    }
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)p[12 + i] << (8 * i);
    float lo, hi;
    memcpy(&lo, &a, 4);
    memcpy(&hi, &b, 4);
    return lut_new(lo, hi, (int64_t)n, out, err);
}

static const int64_t k_size_default = 256;

static const s4d_plugin_field_decl k_fields[] = {
    {S4D_PLUGIN_ABI_VERSION, sizeof(s4d_plugin_field_decl), "lo", S4D_PLUGIN_FIELD_FLOAT, 1, {0}},
    {S4D_PLUGIN_ABI_VERSION, sizeof(s4d_plugin_field_decl), "hi", S4D_PLUGIN_FIELD_FLOAT, 1, {0}},
    {S4D_PLUGIN_ABI_VERSION, sizeof(s4d_plugin_field_decl), "size", S4D_PLUGIN_FIELD_INT, 0,
     {.count = 1, .data = &k_size_default}},
};

static const s4d_plugin_creator k_creator = {
    .abi_version = S4D_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(s4d_plugin_creator),
    .plugin_namespace = "example",
    .name = "Lut",
    .version = "1",
    .num_fields = 3,
    .fields = k_fields,
    .create = lut_create,
    .deserialize = lut_deserialize,
};

__attribute__((visibility("default"))) s4d_status
s4d_plugin_library_init(const s4d_host_api *host, uint32_t *library_abi_version, s4d_errbuf *err)
{
    *library_abi_version = S4D_PLUGIN_ABI_VERSION;
    if (host->abi_version < 2) {
        set_err(err, "example::Lut needs a host of plugin ABI 2 or later");
        return S4D_ERR_VERSION;
    }
    return host->register_creator(host->host, &k_creator);
}
