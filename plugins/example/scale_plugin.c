/*
 * The worked example of docs/plugins.md: a complete plugin library with one
 * creator, example::Scale v1, computing y = alpha * x + beta elementwise on
 * float32 tensors on the CPU. Build it as a shared module against
 * include/s4d/plugin.h and include/s4d/types.h only; it needs no libs4d.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s4d/plugin.h"

/* ---- instance state and payload ------------------------------------------- */

typedef struct scale_state {
    float alpha;
    float beta;
} scale_state;

/* Payload: "SCL1", then alpha and beta as little-endian IEEE floats. */
#define SCALE_PAYLOAD_SIZE 12

static void set_err(s4d_errbuf *err, const char *msg)
{
    if (err)
        snprintf(err->msg, sizeof(err->msg), "%s", msg);
}

static void put_f32(unsigned char *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

static float get_f32(const unsigned char *p)
{
    uint32_t u = 0;
    for (int i = 0; i < 4; i++)
        u |= (uint32_t)p[i] << (8 * i);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- build phase ------------------------------------------------------------- */

static int32_t scale_num_outputs(const s4d_plugin *self) { return 1; }

static s4d_status scale_get_output_descs(const s4d_plugin *self,
                                         const s4d_plugin_tensor_desc *inputs, int32_t num_inputs,
                                         s4d_plugin_tensor_desc *outputs, int32_t num_outputs,
                                         s4d_errbuf *err)
{
    if (num_inputs != 1 || num_outputs != 1) {
        set_err(err, "Scale takes 1 input (x) and gives 1 output");
        return S4D_ERR_INVALID_ARG;
    }
    if (inputs[0].dtype != S4D_DTYPE_FLOAT32) {
        set_err(err, "input 0 (x): expected float32");
        return S4D_ERR_DTYPE;
    }
    /* Same shape and dtype as x; the host preset the output's device. */
    outputs[0].dtype = inputs[0].dtype;
    outputs[0].rank = inputs[0].rank;
    memcpy(outputs[0].dims, inputs[0].dims, sizeof(outputs[0].dims));
    return S4D_OK;
}

static s4d_status scale_supports(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                                 int32_t num_inputs, const s4d_plugin_tensor_desc *outputs,
                                 int32_t num_outputs, s4d_errbuf *err)
{
    if (inputs[0].device != S4D_DEVICE_CPU || outputs[0].device != S4D_DEVICE_CPU) {
        set_err(err, "Scale runs on the cpu only");
        return S4D_ERR_UNSUPPORTED;
    }
    if (inputs[0].dtype != S4D_DTYPE_FLOAT32 || outputs[0].dtype != S4D_DTYPE_FLOAT32) {
        set_err(err, "Scale takes and gives float32 only");
        return S4D_ERR_DTYPE;
    }
    return S4D_OK;
}

static size_t scale_workspace_size(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                                   int32_t num_inputs, const s4d_plugin_tensor_desc *outputs,
                                   int32_t num_outputs)
{
    return 0;
}

static size_t scale_serialize_size(const s4d_plugin *self) { return SCALE_PAYLOAD_SIZE; }

static s4d_status scale_serialize(const s4d_plugin *self, void *buf, size_t size, s4d_errbuf *err)
{
    if (size != SCALE_PAYLOAD_SIZE) {
        set_err(err, "serialize: wrong buffer size");
        return S4D_ERR_INVALID_ARG;
    }
    const scale_state *s = self->state;
    unsigned char *p = buf;
    memcpy(p, "SCL1", 4);
    put_f32(p + 4, s->alpha);
    put_f32(p + 8, s->beta);
    return S4D_OK;
}

/* ---- run phase ----------------------------------------------------------------- */

static s4d_status scale_enqueue(const s4d_plugin *self, const s4d_plugin_tensor *inputs,
                                int32_t num_inputs, s4d_plugin_tensor *outputs,
                                int32_t num_outputs, const s4d_plugin_run_info *run,
                                s4d_errbuf *err)
{
    /* Only cheap checks here: shapes were settled at build time. */
    if (num_inputs != 1 || num_outputs != 1 || !inputs[0].data || !outputs[0].data) {
        set_err(err, "enqueue: missing tensor data");
        return S4D_ERR_INVALID_ARG;
    }
    const scale_state *s = self->state;
    int64_t n = 1;
    for (int32_t i = 0; i < inputs[0].desc.rank; i++)
        n *= inputs[0].desc.dims[i];
    const float *x = inputs[0].data;
    float *y = outputs[0].data;
    for (int64_t i = 0; i < n; i++)
        y[i] = s->alpha * x[i] + s->beta;
    return S4D_OK;
}

static void scale_destroy(s4d_plugin *self)
{
    free(self->state);
    free(self);
}

static s4d_status scale_new(float alpha, float beta, s4d_plugin **out, s4d_errbuf *err)
{
    s4d_plugin *p = calloc(1, sizeof(*p));
    scale_state *s = calloc(1, sizeof(*s));
    if (!p || !s) {
        free(p);
        free(s);
        set_err(err, "out of memory");
        return S4D_ERR_NO_MEMORY;
    }
    s->alpha = alpha;
    s->beta = beta;
    p->abi_version = S4D_PLUGIN_ABI_VERSION;
    p->struct_size = sizeof(*p);
    p->state = s;
    p->num_outputs = scale_num_outputs;
    p->get_output_descs = scale_get_output_descs;
    p->supports = scale_supports;
    p->workspace_size = scale_workspace_size;
    p->serialize_size = scale_serialize_size;
    p->serialize = scale_serialize;
    p->enqueue = scale_enqueue;
    p->destroy = scale_destroy;
    *out = p;
    return S4D_OK;
}

/* ---- the creator ------------------------------------------------------------------ */

static s4d_status scale_create(const s4d_plugin_creator *self, const char *node_name,
                               const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    /* The host checked names and types and filled defaults, in declaration order. */
    float alpha = *(const float *)fields->fields[0].data;
    float beta = *(const float *)fields->fields[1].data;
    return scale_new(alpha, beta, out, err);
}

static s4d_status scale_deserialize(const s4d_plugin_creator *self, const void *data,
                                    size_t size, s4d_plugin **out, s4d_errbuf *err)
{
    /* Payloads come from files: check everything. */
    if (size != SCALE_PAYLOAD_SIZE || memcmp(data, "SCL1", 4) != 0) {
        set_err(err, "not a Scale v1 payload");
        return S4D_ERR_PARSE;
    }
    const unsigned char *p = data;
    return scale_new(get_f32(p + 4), get_f32(p + 8), out, err);
}

static const float k_beta_default = 0.0f;

static const s4d_plugin_field_decl k_fields[] = {
    {.abi_version = S4D_PLUGIN_ABI_VERSION,
     .struct_size = sizeof(s4d_plugin_field_decl),
     .name = "alpha",
     .type = S4D_PLUGIN_FIELD_FLOAT,
     .required = 1},
    {.abi_version = S4D_PLUGIN_ABI_VERSION,
     .struct_size = sizeof(s4d_plugin_field_decl),
     .name = "beta",
     .type = S4D_PLUGIN_FIELD_FLOAT,
     .required = 0,
     .default_value = {.count = 1, .data = &k_beta_default}},
};

static const s4d_plugin_creator k_creator = {
    .abi_version = S4D_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(s4d_plugin_creator),
    .plugin_namespace = "example",
    .name = "Scale",
    .version = "1",
    .num_fields = 2,
    .fields = k_fields,
    .create = scale_create,
    .deserialize = scale_deserialize,
};

__attribute__((visibility("default"))) s4d_status
s4d_plugin_library_init(const s4d_host_api *host, uint32_t *library_abi_version, s4d_errbuf *err)
{
    *library_abi_version = S4D_PLUGIN_ABI_VERSION; /* first, whatever happens next */
    if (host->abi_version != S4D_PLUGIN_ABI_VERSION) {
        set_err(err, "example plugin speaks plugin ABI 1 only");
        return S4D_ERR_VERSION;
    }
    return host->register_creator(host->host, &k_creator);
}
