/*
 * A plugin library as a plugin ABI 1 host's header described it, to check
 * that this host still loads and runs ABI 1 libraries: the tensor
 * descriptors of ABI 1 had no format, strides or device ordinal (so arrays of
 * them are laid out differently), and instances ended at destroy().
 * compat::Affine v1: y = 2 x + 1 on float32, CPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s4d/plugin.h"

#define V1 1u

typedef struct desc_v1 {
    uint32_t abi_version, struct_size;
    s4d_dtype dtype;
    s4d_device device;
    int32_t rank;
    int64_t dims[8];
} desc_v1;

typedef struct tensor_v1 {
    uint32_t abi_version, struct_size;
    desc_v1 desc;
    void *data;
} tensor_v1;

typedef struct plugin_v1 plugin_v1;
struct plugin_v1 {
    uint32_t abi_version, struct_size;
    void *state;
    int32_t (*num_outputs)(const plugin_v1 *self);
    s4d_status (*get_output_descs)(const plugin_v1 *self, const desc_v1 *in, int32_t nin,
                                   desc_v1 *out, int32_t nout, s4d_errbuf *err);
    s4d_status (*supports)(const plugin_v1 *self, const desc_v1 *in, int32_t nin,
                           const desc_v1 *out, int32_t nout, s4d_errbuf *err);
    size_t (*workspace_size)(const plugin_v1 *self, const desc_v1 *in, int32_t nin,
                             const desc_v1 *out, int32_t nout);
    size_t (*serialize_size)(const plugin_v1 *self);
    s4d_status (*serialize)(const plugin_v1 *self, void *buf, size_t size, s4d_errbuf *err);
    s4d_status (*enqueue)(const plugin_v1 *self, const tensor_v1 *in, int32_t nin,
                          tensor_v1 *out, int32_t nout, const s4d_plugin_run_info *run,
                          s4d_errbuf *err);
    void (*destroy)(plugin_v1 *self);
};

static void set_err(s4d_errbuf *err, const char *msg)
{
    if (err)
        snprintf(err->msg, sizeof(err->msg), "%s", msg);
}

static int32_t aff_num_outputs(const plugin_v1 *self) { return 1; }

static s4d_status aff_descs(const plugin_v1 *self, const desc_v1 *in, int32_t nin, desc_v1 *out,
                            int32_t nout, s4d_errbuf *err)
{
    if (in[0].struct_size != sizeof(desc_v1)) {
        set_err(err, "the host handed an ABI 1 plugin descriptors of another layout");
        return S4D_ERR_INVALID_ARG;
    }
    out[0].dtype = in[0].dtype;
    out[0].rank = in[0].rank;
    memcpy(out[0].dims, in[0].dims, sizeof(out[0].dims));
    return S4D_OK;
}

static s4d_status aff_supports(const plugin_v1 *self, const desc_v1 *in, int32_t nin,
                               const desc_v1 *out, int32_t nout, s4d_errbuf *err)
{
    if (in[0].dtype != S4D_DTYPE_FLOAT32 || in[0].device != S4D_DEVICE_CPU) {
        set_err(err, "Affine takes float32 on the cpu");
        return S4D_ERR_UNSUPPORTED;
    }
    return S4D_OK;
}

static size_t aff_ws(const plugin_v1 *self, const desc_v1 *in, int32_t nin, const desc_v1 *out,
                     int32_t nout)
{
    return 0;
}

static size_t aff_ser_size(const plugin_v1 *self) { return 4; }

static s4d_status aff_ser(const plugin_v1 *self, void *buf, size_t size, s4d_errbuf *err)
{
    memcpy(buf, "AFF1", 4);
    return S4D_OK;
}

static s4d_status aff_enqueue(const plugin_v1 *self, const tensor_v1 *in, int32_t nin,
                              tensor_v1 *out, int32_t nout, const s4d_plugin_run_info *run,
                              s4d_errbuf *err)
{
    if (in[0].struct_size != sizeof(tensor_v1) || !in[0].data || !out[0].data) {
        set_err(err, "the host handed an ABI 1 plugin tensors of another layout");
        return S4D_ERR_INVALID_ARG;
    }
    int64_t n = 1;
    for (int32_t i = 0; i < in[0].desc.rank; i++)
        n *= in[0].desc.dims[i];
    const float *x = in[0].data;
    float *y = out[0].data;
    for (int64_t i = 0; i < n; i++)
        y[i] = 2.0f * x[i] + 1.0f;
    return S4D_OK;
}

static void aff_destroy(plugin_v1 *self)
{
    free(self);
}

static s4d_status aff_new(s4d_plugin **out, s4d_errbuf *err)
{
    plugin_v1 *p = calloc(1, sizeof(*p));
    if (!p) {
        set_err(err, "out of memory");
        return S4D_ERR_NO_MEMORY;
    }
    p->abi_version = V1;
    p->struct_size = sizeof(*p);
    p->num_outputs = aff_num_outputs;
    p->get_output_descs = aff_descs;
    p->supports = aff_supports;
    p->workspace_size = aff_ws;
    p->serialize_size = aff_ser_size;
    p->serialize = aff_ser;
    p->enqueue = aff_enqueue;
    p->destroy = aff_destroy;
    *out = (s4d_plugin *)p;
    return S4D_OK;
}

static s4d_status aff_create(const s4d_plugin_creator *self, const char *node_name,
                             const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    return aff_new(out, err);
}

static s4d_status aff_deserialize(const s4d_plugin_creator *self, const void *data, size_t size,
                                  s4d_plugin **out, s4d_errbuf *err)
{
    if (size != 4 || memcmp(data, "AFF1", 4) != 0) {
        set_err(err, "not an Affine payload");
        return S4D_ERR_PARSE;
    }
    return aff_new(out, err);
}

static const s4d_plugin_creator k_creator = {
    .abi_version = V1,
    .struct_size = sizeof(s4d_plugin_creator),
    .plugin_namespace = "compat",
    .name = "Affine",
    .version = "1",
    .create = aff_create,
    .deserialize = aff_deserialize,
};

__attribute__((visibility("default"))) s4d_status
s4d_plugin_library_init(const s4d_host_api *host, uint32_t *library_abi_version, s4d_errbuf *err)
{
    *library_abi_version = V1;
    return host->register_creator(host->host, &k_creator);
}
