/*
 * The deformable aggregation plugin: s4d's plugin ABI over the op library
 * (include/s4d/deformable_aggregation.h). Two creators share one
 * implementation:
 *   s4d::DeformableAggregation v1          the node s4d's own exporter writes
 *   custom::DeformableAttentionAggrPlugin v1  the node of the widely used
 *                                          third-party TensorRT export; same
 *                                          five inputs, no attributes
 * Inputs: features [bs,F,C], spatial_shape [N,L,2], scale_start_index [N,L],
 * sampling_location [bs,A,P,N,2], weights [bs,A,P,N,L,G]; output [bs,A,C].
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "s4d/deformable_aggregation.h"
#include "s4d/plugin.h"

#define DA_NUM_INPUTS 5
#define DA_PAYLOAD_MAGIC "S4DA"
#define DA_PAYLOAD_VERSION 1u
/* magic, payload version, variant, deterministic */
#define DA_PAYLOAD_SIZE (4 + 4 + 4 + 8)

enum { IN_FEATURES, IN_SPATIAL_SHAPE, IN_START_INDEX, IN_LOCATION, IN_WEIGHTS };

static const char *const k_input_names[DA_NUM_INPUTS] = {
    "features", "spatial_shape", "scale_start_index", "sampling_location", "weights"};

typedef enum da_variant {
    DA_VARIANT_S4D = 0,  /* s4d::DeformableAggregation */
    DA_VARIANT_ALIAS = 1 /* custom::DeformableAttentionAggrPlugin */
} da_variant;

typedef struct da_state {
    da_variant variant;
    int64_t deterministic; /* CUDA: 1 picks the run-to-run bitwise identical kernel */
} da_state;

static void set_err(s4d_errbuf *err, const char *f, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void set_err(s4d_errbuf *err, const char *f, ...)
{
    if (!err)
        return;
    va_list ap;
    va_start(ap, f);
    vsnprintf(err->msg, sizeof(err->msg), f, ap);
    va_end(ap);
}

static const char *variant_op(da_variant v)
{
    switch (v) {
    case DA_VARIANT_S4D: return "DeformableAggregation";
    case DA_VARIANT_ALIAS: return "DeformableAttentionAggrPlugin";
    }
    return "?";
}

static const char *device_name(s4d_device d)
{
    switch (d) {
    case S4D_DEVICE_CPU: return "cpu";
    case S4D_DEVICE_CUDA: return "cuda";
    }
    return "unknown device";
}

static const da_state *state_of(const s4d_plugin *self) { return (const da_state *)self->state; }

/* ---- shape checks ----------------------------------------------------------- */

static int desc_ok(const s4d_plugin_tensor_desc *d)
{
    return d->struct_size >= sizeof(s4d_plugin_tensor_desc) && d->rank >= 0 &&
           d->rank <= S4D_PLUGIN_MAX_RANK;
}

static s4d_status want_rank(const s4d_plugin_tensor_desc *in, int idx, int rank, const char *layout,
                            s4d_errbuf *err)
{
    if (in[idx].rank != rank) {
        set_err(err, "input %d (%s): expected rank %d %s, got rank %d", idx, k_input_names[idx],
                rank, layout, (int)in[idx].rank);
        return S4D_ERR_SHAPE;
    }
    for (int k = 0; k < rank; k++) {
        if (in[idx].dims[k] < 0) {
            set_err(err, "input %d (%s): dim %d is negative (%lld)", idx, k_input_names[idx], k,
                    (long long)in[idx].dims[k]);
            return S4D_ERR_SHAPE;
        }
    }
    return S4D_OK;
}

static s4d_status want_dim(const s4d_plugin_tensor_desc *in, int idx, int dim, int64_t expect,
                           const char *what, s4d_errbuf *err)
{
    if (in[idx].dims[dim] != expect) {
        set_err(err, "input %d (%s): dim %d must equal %s = %lld, got %lld", idx,
                k_input_names[idx], dim, what, (long long)expect, (long long)in[idx].dims[dim]);
        return S4D_ERR_SHAPE;
    }
    return S4D_OK;
}

/* Checks every shape against the others and fills the op's sizes. */
static s4d_status infer_sizes(const s4d_plugin_tensor_desc *in, int32_t num_inputs,
                              s4d_da_sizes *sz, s4d_errbuf *err)
{
    if (num_inputs != DA_NUM_INPUTS || !in) {
        set_err(err, "expected %d inputs (features, spatial_shape, scale_start_index, "
                     "sampling_location, weights), got %d",
                DA_NUM_INPUTS, (int)num_inputs);
        return S4D_ERR_INVALID_ARG;
    }
    for (int i = 0; i < DA_NUM_INPUTS; i++) {
        if (!desc_ok(&in[i])) {
            set_err(err, "input %d (%s): malformed descriptor (struct_size %u, rank %d)", i,
                    k_input_names[i], (unsigned)in[i].struct_size, (int)in[i].rank);
            return S4D_ERR_INVALID_ARG;
        }
    }
    s4d_status st;
    if ((st = want_rank(in, IN_FEATURES, 3, "[bs, F, C]", err)) != S4D_OK ||
        (st = want_rank(in, IN_SPATIAL_SHAPE, 3, "[N, L, 2]", err)) != S4D_OK ||
        (st = want_rank(in, IN_START_INDEX, 2, "[N, L]", err)) != S4D_OK ||
        (st = want_rank(in, IN_LOCATION, 5, "[bs, A, P, N, 2]", err)) != S4D_OK ||
        (st = want_rank(in, IN_WEIGHTS, 6, "[bs, A, P, N, L, G]", err)) != S4D_OK)
        return st;
    memset(sz, 0, sizeof(*sz));
    sz->struct_size = sizeof(*sz);
    sz->batch = in[IN_FEATURES].dims[0];
    sz->num_rows = in[IN_FEATURES].dims[1];
    sz->channels = in[IN_FEATURES].dims[2];
    sz->num_cams = in[IN_SPATIAL_SHAPE].dims[0];
    sz->num_levels = in[IN_SPATIAL_SHAPE].dims[1];
    sz->num_anchors = in[IN_LOCATION].dims[1];
    sz->num_points = in[IN_LOCATION].dims[2];
    sz->num_groups = in[IN_WEIGHTS].dims[5];
    if ((st = want_dim(in, IN_SPATIAL_SHAPE, 2, 2, "2 (H, W)", err)) != S4D_OK ||
        (st = want_dim(in, IN_START_INDEX, 0, sz->num_cams, "N from spatial_shape", err)) != S4D_OK ||
        (st = want_dim(in, IN_START_INDEX, 1, sz->num_levels, "L from spatial_shape", err)) != S4D_OK ||
        (st = want_dim(in, IN_LOCATION, 0, sz->batch, "bs from features", err)) != S4D_OK ||
        (st = want_dim(in, IN_LOCATION, 3, sz->num_cams, "N from spatial_shape", err)) != S4D_OK ||
        (st = want_dim(in, IN_LOCATION, 4, 2, "2 (x, y)", err)) != S4D_OK ||
        (st = want_dim(in, IN_WEIGHTS, 0, sz->batch, "bs from features", err)) != S4D_OK ||
        (st = want_dim(in, IN_WEIGHTS, 1, sz->num_anchors, "A from sampling_location", err)) != S4D_OK ||
        (st = want_dim(in, IN_WEIGHTS, 2, sz->num_points, "P from sampling_location", err)) != S4D_OK ||
        (st = want_dim(in, IN_WEIGHTS, 3, sz->num_cams, "N from spatial_shape", err)) != S4D_OK ||
        (st = want_dim(in, IN_WEIGHTS, 4, sz->num_levels, "L from spatial_shape", err)) != S4D_OK)
        return st;
    if (sz->num_groups < 1 || sz->channels % sz->num_groups != 0) {
        set_err(err, "input 4 (weights): groups G = %lld must divide the channels C = %lld of "
                     "input 0 (features)",
                (long long)sz->num_groups, (long long)sz->channels);
        return S4D_ERR_SHAPE;
    }
    return S4D_OK;
}

static s4d_status check_dtypes(const s4d_plugin_tensor_desc *in, s4d_errbuf *err)
{
    static const struct {
        int idx;
        int allow_half;
    } rules[DA_NUM_INPUTS] = {
        {IN_FEATURES, 1}, {IN_SPATIAL_SHAPE, 0}, {IN_START_INDEX, 0}, {IN_LOCATION, 0}, {IN_WEIGHTS, 1}};
    for (int k = 0; k < DA_NUM_INPUTS; k++) {
        int i = rules[k].idx;
        s4d_dtype d = in[i].dtype;
        int index_input = i == IN_SPATIAL_SHAPE || i == IN_START_INDEX;
        /* int64 indices (what a framework edge often produces) are narrowed on the CPU. */
        int ok = index_input ? (d == S4D_DTYPE_INT32 || d == S4D_DTYPE_INT64)
                             : (d == S4D_DTYPE_FLOAT32 || (rules[k].allow_half && d == S4D_DTYPE_FLOAT16));
        if (!ok) {
            const char *want = index_input ? "int32 or int64"
                               : rules[k].allow_half ? "float32 or float16"
                                                     : "float32";
            set_err(err, "input %d (%s): dtype %s is not supported; expected %s", i,
                    k_input_names[i], s4d_dtype_name(d), want);
            return S4D_ERR_DTYPE;
        }
    }
    return S4D_OK;
}

/* CPU scratch for int32 copies of int64 index inputs (0 when both are int32). */
static size_t narrow_bytes(const s4d_plugin_tensor_desc *in, const s4d_da_sizes *sz)
{
    if (in[IN_SPATIAL_SHAPE].dtype != S4D_DTYPE_INT64 && in[IN_START_INDEX].dtype != S4D_DTYPE_INT64)
        return 0;
    return (size_t)(sz->num_cams * sz->num_levels * 3) * sizeof(int32_t);
}

/* Copies an int64 index tensor into int32 scratch, refusing values int32 cannot hold. */
static s4d_status narrow(const int64_t *src, int64_t n, int32_t *dst, int idx, s4d_errbuf *err)
{
    for (int64_t i = 0; i < n; i++) {
        if (src[i] < INT32_MIN || src[i] > INT32_MAX) {
            set_err(err, "input %d (%s): element %lld = %lld does not fit int32", idx,
                    k_input_names[idx], (long long)i, (long long)src[i]);
            return S4D_ERR_SHAPE;
        }
        dst[i] = (int32_t)src[i];
    }
    return S4D_OK;
}

/* ---- build-phase callbacks ---------------------------------------------------- */

static int32_t da_num_outputs(const s4d_plugin *self) { return 1; }

static s4d_status da_get_output_descs(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                                      int32_t num_inputs, s4d_plugin_tensor_desc *outputs,
                                      int32_t num_outputs, s4d_errbuf *err)
{
    s4d_da_sizes sz;
    s4d_status st = infer_sizes(inputs, num_inputs, &sz, err);
    if (st != S4D_OK)
        return st;
    if ((st = check_dtypes(inputs, err)) != S4D_OK)
        return st;
    if (num_outputs != 1 || !outputs) {
        set_err(err, "expected 1 output, got %d", (int)num_outputs);
        return S4D_ERR_INVALID_ARG;
    }
    s4d_plugin_tensor_desc *o = &outputs[0];
    o->dtype = inputs[IN_FEATURES].dtype;
    o->rank = 3;
    memset(o->dims, 0, sizeof(o->dims));
    o->dims[0] = sz.batch;
    o->dims[1] = sz.num_anchors;
    o->dims[2] = sz.channels;
    return S4D_OK;
}

static s4d_status da_supports(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                              int32_t num_inputs, const s4d_plugin_tensor_desc *outputs,
                              int32_t num_outputs, s4d_errbuf *err)
{
    s4d_da_sizes sz;
    s4d_status st = infer_sizes(inputs, num_inputs, &sz, err);
    if (st != S4D_OK)
        return st;
    if ((st = check_dtypes(inputs, err)) != S4D_OK)
        return st;
    if (num_outputs != 1 || !outputs || !desc_ok(&outputs[0])) {
        set_err(err, "expected 1 output descriptor, got %d", (int)num_outputs);
        return S4D_ERR_INVALID_ARG;
    }
    s4d_dtype od = outputs[0].dtype;
    if (od != S4D_DTYPE_FLOAT32 && od != S4D_DTYPE_FLOAT16) {
        set_err(err, "output 0: dtype %s is not supported; expected float32 or float16",
                s4d_dtype_name(od));
        return S4D_ERR_DTYPE;
    }
    s4d_device dev = outputs[0].device;
    for (int i = 0; i < DA_NUM_INPUTS; i++) {
        if (inputs[i].device != dev) {
            set_err(err, "input %d (%s) is on %s but the output is on %s; all tensors must share "
                         "one device",
                    i, k_input_names[i], device_name(inputs[i].device), device_name(dev));
            return S4D_ERR_UNSUPPORTED;
        }
    }
    switch (dev) {
    case S4D_DEVICE_CPU: return S4D_OK;
    case S4D_DEVICE_CUDA:
#if defined(S4D_HAVE_CUDA)
        for (int i = IN_SPATIAL_SHAPE; i <= IN_START_INDEX; i++) {
            if (inputs[i].dtype != S4D_DTYPE_INT32) {
                set_err(err, "input %d (%s): int64 indices run on the cpu only; cast them to "
                             "int32 in the graph for cuda",
                        i, k_input_names[i]);
                return S4D_ERR_DTYPE;
            }
        }
        return S4D_OK;
#else
        set_err(err, "this libs4d_plugins.so was built without CUDA; rebuild with CUDA or run on cpu");
        return S4D_ERR_UNSUPPORTED;
#endif
    }
    set_err(err, "unknown device %d", (int)dev);
    return S4D_ERR_UNSUPPORTED;
}

/*
 * ABI 2 negotiation, position by position (inputs, then the output): the
 * same rules as da_supports. features, weights and the output take float16
 * as well as float32 on both devices (the op accumulates in float32
 * whatever the storage); sampling_location stays float32 (locations in
 * float16 would move samples by up to 1/2048 of the image); the output
 * takes the dtype of features, as get_output_descs infers it. Everything is
 * dense (linear) and on one device. The shapes are checked by
 * get_output_descs before any of this.
 */
static s4d_status da_supports_format(const s4d_plugin *self, int32_t pos, const s4d_plugin_tensor_desc *descs,
                                     int32_t num_inputs, int32_t num_outputs)
{
    (void)self;
    if (!descs || num_inputs != DA_NUM_INPUTS || num_outputs != 1 || pos < 0 || pos > DA_NUM_INPUTS)
        return S4D_ERR_INVALID_ARG;
    const s4d_plugin_tensor_desc *d = &descs[pos];
    if (d->format != S4D_FORMAT_LINEAR || d->device != descs[0].device)
        return S4D_ERR_UNSUPPORTED;
    if (d->device != S4D_DEVICE_CPU) {
#if defined(S4D_HAVE_CUDA)
        if (d->device != S4D_DEVICE_CUDA)
            return S4D_ERR_UNSUPPORTED;
#else
        return S4D_ERR_UNSUPPORTED;
#endif
    }
    const int half_ok = d->dtype == S4D_DTYPE_FLOAT32 || d->dtype == S4D_DTYPE_FLOAT16;
    switch (pos) {
    case IN_FEATURES:
    case IN_WEIGHTS: return half_ok ? S4D_OK : S4D_ERR_DTYPE;
    case IN_LOCATION: return d->dtype == S4D_DTYPE_FLOAT32 ? S4D_OK : S4D_ERR_DTYPE;
    case IN_SPATIAL_SHAPE:
    case IN_START_INDEX:
        /* int64 indices are narrowed into the workspace on the CPU only. */
        if (d->dtype == S4D_DTYPE_INT32 || (d->dtype == S4D_DTYPE_INT64 && d->device == S4D_DEVICE_CPU))
            return S4D_OK;
        return S4D_ERR_DTYPE;
    default: /* the output */
        return half_ok && d->dtype == descs[IN_FEATURES].dtype ? S4D_OK : S4D_ERR_DTYPE;
    }
}

static s4d_da_algo algo_of(const da_state *s)
{
    return s->deterministic ? S4D_DA_ALGO_DETERMINISTIC : S4D_DA_ALGO_FAST;
}

static size_t da_workspace_size(const s4d_plugin *self, const s4d_plugin_tensor_desc *inputs,
                                int32_t num_inputs, const s4d_plugin_tensor_desc *outputs,
                                int32_t num_outputs)
{
    s4d_da_sizes sz;
    if (infer_sizes(inputs, num_inputs, &sz, NULL) != S4D_OK || num_outputs != 1 || !outputs)
        return 0;
    switch (outputs[0].device) {
    /* int32 copies of int64 index inputs, then the pooled forward's scratch. */
    case S4D_DEVICE_CPU:
        return ((narrow_bytes(inputs, &sz) + 63) & ~(size_t)63) +
               s4d_da_forward_cpu_workspace_size(&sz);
    case S4D_DEVICE_CUDA: return s4d_da_forward_workspace_size(&sz, algo_of(state_of(self)));
    }
    return 0;
}

/* ---- payload ------------------------------------------------------------------ */

/* Little-endian on disk whatever the host, so engine files travel. */
static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static void put_i64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

static int64_t get_i64(const unsigned char *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u |= (uint64_t)p[i] << (8 * i);
    return (int64_t)u;
}

static size_t da_serialize_size(const s4d_plugin *self) { return DA_PAYLOAD_SIZE; }

static s4d_status da_serialize(const s4d_plugin *self, void *buf, size_t size, s4d_errbuf *err)
{
    if (!buf || size != DA_PAYLOAD_SIZE) {
        set_err(err, "serialize: buffer of %zu bytes, expected %d", size, DA_PAYLOAD_SIZE);
        return S4D_ERR_INVALID_ARG;
    }
    const da_state *s = state_of(self);
    unsigned char *p = buf;
    memcpy(p, DA_PAYLOAD_MAGIC, 4);
    put_u32(p + 4, DA_PAYLOAD_VERSION);
    put_u32(p + 8, (uint32_t)s->variant);
    put_i64(p + 12, s->deterministic);
    return S4D_OK;
}

/* ---- run phase ------------------------------------------------------------------ */

static s4d_status da_enqueue(const s4d_plugin *self, const s4d_plugin_tensor *inputs,
                             int32_t num_inputs, s4d_plugin_tensor *outputs, int32_t num_outputs,
                             const s4d_plugin_run_info *run, s4d_errbuf *err)
{
    if (!inputs || !outputs || !run || num_inputs != DA_NUM_INPUTS || num_outputs != 1) {
        set_err(err, "enqueue: expected %d inputs and 1 output, got %d and %d", DA_NUM_INPUTS,
                (int)num_inputs, (int)num_outputs);
        return S4D_ERR_INVALID_ARG;
    }
    s4d_plugin_tensor_desc descs[DA_NUM_INPUTS];
    for (int i = 0; i < DA_NUM_INPUTS; i++) {
        descs[i] = inputs[i].desc;
        if (!inputs[i].data) {
            set_err(err, "enqueue: input %d (%s) has no data", i, k_input_names[i]);
            return S4D_ERR_INVALID_ARG;
        }
        if (inputs[i].desc.device != run->device) {
            set_err(err, "enqueue: input %d (%s) is on %s, the node runs on %s", i,
                    k_input_names[i], device_name(inputs[i].desc.device), device_name(run->device));
            return S4D_ERR_INVALID_ARG;
        }
    }
    s4d_da_sizes sz;
    s4d_status st = infer_sizes(descs, DA_NUM_INPUTS, &sz, err);
    if (st != S4D_OK || (st = check_dtypes(descs, err)) != S4D_OK)
        return st;
    const s4d_plugin_tensor *out = &outputs[0];
    if (!out->data || out->desc.device != run->device || out->desc.rank != 3 ||
        out->desc.dims[0] != sz.batch || out->desc.dims[1] != sz.num_anchors ||
        out->desc.dims[2] != sz.channels) {
        set_err(err, "enqueue: output 0 must be [%lld, %lld, %lld] on %s with data",
                (long long)sz.batch, (long long)sz.num_anchors, (long long)sz.channels,
                device_name(run->device));
        return S4D_ERR_SHAPE;
    }
    s4d_da_forward_args a;
    memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    a.sizes = sz;
    a.features_dtype = inputs[IN_FEATURES].desc.dtype;
    a.weights_dtype = inputs[IN_WEIGHTS].desc.dtype;
    a.output_dtype = out->desc.dtype;
    a.features = inputs[IN_FEATURES].data;
    a.spatial_shape = inputs[IN_SPATIAL_SHAPE].data;
    a.scale_start_index = inputs[IN_START_INDEX].data;
    a.sampling_location = inputs[IN_LOCATION].data;
    a.weights = inputs[IN_WEIGHTS].data;
    a.output = out->data;
    /* The op library checks dtypes and (on the CPU) index contents itself. */
    switch (run->device) {
    case S4D_DEVICE_CPU: {
        size_t need = narrow_bytes(descs, &sz);
        size_t head = (need + 63) & ~(size_t)63;
        /* ABI 2 hosts hand in their thread pool: the forward then runs on it, in the
           workspace, without creating threads or allocating. */
        int pooled = run->struct_size >= offsetof(s4d_plugin_run_info, parallel_for) +
                                             sizeof(run->parallel_for) &&
                     run->parallel_for;
        size_t total = pooled ? head + s4d_da_forward_cpu_workspace_size(&sz) : need;
        if (total > 0 && (run->workspace_size < total || !run->workspace)) {
            set_err(err, "enqueue: workspace of %zu bytes, need %zu", run->workspace_size, total);
            return S4D_ERR_INVALID_ARG;
        }
        if (need > 0) {
            int64_t nl = sz.num_cams * sz.num_levels;
            int32_t *shape32 = run->workspace, *start32 = shape32 + 2 * nl;
            if (descs[IN_SPATIAL_SHAPE].dtype == S4D_DTYPE_INT64) {
                if ((st = narrow(inputs[IN_SPATIAL_SHAPE].data, 2 * nl, shape32, IN_SPATIAL_SHAPE,
                                 err)) != S4D_OK)
                    return st;
                a.spatial_shape = shape32;
            }
            if (descs[IN_START_INDEX].dtype == S4D_DTYPE_INT64) {
                if ((st = narrow(inputs[IN_START_INDEX].data, nl, start32, IN_START_INDEX, err)) !=
                    S4D_OK)
                    return st;
                a.scale_start_index = start32;
            }
        }
        if (pooled) {
            s4d_da_cpu_exec x = {sizeof x, run->parallel_for, run->thread_pool,
                                 (char *)run->workspace + head, run->workspace_size - head};
            return s4d_da_forward_cpu_exec(&a, &x, err);
        }
        return s4d_da_forward_cpu(&a, run->num_threads, err);
    }
    case S4D_DEVICE_CUDA: {
        if (descs[IN_SPATIAL_SHAPE].dtype != S4D_DTYPE_INT32 ||
            descs[IN_START_INDEX].dtype != S4D_DTYPE_INT32) {
            set_err(err, "enqueue: cuda takes int32 spatial_shape and scale_start_index only");
            return S4D_ERR_DTYPE;
        }
        s4d_da_algo algo = algo_of(state_of(self));
        size_t need = s4d_da_forward_workspace_size(&sz, algo);
        if (run->workspace_size < need || (need > 0 && !run->workspace)) {
            set_err(err, "enqueue: workspace of %zu bytes, need %zu", run->workspace_size, need);
            return S4D_ERR_INVALID_ARG;
        }
        return s4d_da_forward_cuda(&a, algo, run->workspace, run->stream, err);
    }
    }
    set_err(err, "enqueue: unknown device %d", (int)run->device);
    return S4D_ERR_UNSUPPORTED;
}

static void da_destroy(s4d_plugin *self)
{
    if (!self)
        return;
    free(self->state);
    free(self);
}

static s4d_status new_instance(da_variant variant, int64_t deterministic, s4d_plugin **out,
                               s4d_errbuf *err)
{
    s4d_plugin *p = calloc(1, sizeof(*p));
    da_state *s = calloc(1, sizeof(*s));
    if (!p || !s) {
        free(p);
        free(s);
        set_err(err, "out of memory");
        return S4D_ERR_NO_MEMORY;
    }
    s->variant = variant;
    s->deterministic = deterministic;
    p->abi_version = S4D_PLUGIN_ABI_VERSION;
    p->struct_size = (uint32_t)sizeof(*p);
    p->state = s;
    p->num_outputs = da_num_outputs;
    p->get_output_descs = da_get_output_descs;
    p->supports = da_supports;
    p->supports_format = da_supports_format;
    p->workspace_size = da_workspace_size;
    p->serialize_size = da_serialize_size;
    p->serialize = da_serialize;
    p->enqueue = da_enqueue;
    p->destroy = da_destroy;
    *out = p;
    return S4D_OK;
}

/* ---- creators --------------------------------------------------------------------- */

static da_variant creator_variant(const s4d_plugin_creator *self)
{
    return self->user ? *(const da_variant *)self->user : DA_VARIANT_S4D;
}

static s4d_status da_create(const s4d_plugin_creator *self, const char *node_name,
                            const s4d_plugin_fields *fields, s4d_plugin **out, s4d_errbuf *err)
{
    if (!out || !fields) {
        set_err(err, "create: NULL argument");
        return S4D_ERR_INVALID_ARG;
    }
    int64_t deterministic = 0;
    for (int32_t i = 0; i < fields->count; i++) {
        const s4d_plugin_field *f = &fields->fields[i];
        if (strcmp(f->name, "deterministic") == 0 && f->type == S4D_PLUGIN_FIELD_INT && f->count == 1) {
            deterministic = *(const int64_t *)f->data;
            if (deterministic != 0 && deterministic != 1) {
                set_err(err, "attribute 'deterministic' must be 0 or 1, got %lld",
                        (long long)deterministic);
                return S4D_ERR_INVALID_ARG;
            }
        }
    }
    return new_instance(creator_variant(self), deterministic, out, err);
}

static s4d_status da_deserialize(const s4d_plugin_creator *self, const void *data, size_t size,
                                 s4d_plugin **out, s4d_errbuf *err)
{
    if (!out || (!data && size > 0)) {
        set_err(err, "deserialize: NULL argument");
        return S4D_ERR_INVALID_ARG;
    }
    if (size != DA_PAYLOAD_SIZE) {
        set_err(err, "payload is %zu bytes, expected %d", size, DA_PAYLOAD_SIZE);
        return S4D_ERR_PARSE;
    }
    const unsigned char *p = data;
    if (memcmp(p, DA_PAYLOAD_MAGIC, 4) != 0) {
        set_err(err, "payload does not start with '%s'", DA_PAYLOAD_MAGIC);
        return S4D_ERR_PARSE;
    }
    uint32_t version = get_u32(p + 4);
    if (version != DA_PAYLOAD_VERSION) {
        set_err(err, "payload version %u, this plugin reads version %u", (unsigned)version,
                (unsigned)DA_PAYLOAD_VERSION);
        return S4D_ERR_VERSION;
    }
    uint32_t variant = get_u32(p + 8);
    da_variant mine = creator_variant(self);
    if (variant != (uint32_t)mine) {
        set_err(err, "payload was written by variant %u, this creator (%s) is variant %u",
                (unsigned)variant, variant_op(mine), (unsigned)mine);
        return S4D_ERR_PARSE;
    }
    int64_t deterministic = get_i64(p + 12);
    if (deterministic != 0 && deterministic != 1) {
        set_err(err, "payload field deterministic = %lld, expected 0 or 1", (long long)deterministic);
        return S4D_ERR_PARSE;
    }
    return new_instance(mine, deterministic, out, err);
}

static const int64_t k_zero = 0;

static const s4d_plugin_field_decl k_s4d_fields[] = {
    {.abi_version = S4D_PLUGIN_ABI_VERSION,
     .struct_size = sizeof(s4d_plugin_field_decl),
     .name = "deterministic",
     .type = S4D_PLUGIN_FIELD_INT,
     .required = 0,
     .default_value = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                       .struct_size = sizeof(s4d_plugin_field),
                       .name = "deterministic",
                       .type = S4D_PLUGIN_FIELD_INT,
                       .count = 1,
                       .data = &k_zero}},
};

static const da_variant k_variant_s4d = DA_VARIANT_S4D;
static const da_variant k_variant_alias = DA_VARIANT_ALIAS;

static const s4d_plugin_creator k_creators[] = {
    {.abi_version = S4D_PLUGIN_ABI_VERSION,
     .struct_size = sizeof(s4d_plugin_creator),
     .plugin_namespace = "s4d",
     .name = "DeformableAggregation",
     .version = "1",
     .num_fields = (int32_t)(sizeof(k_s4d_fields) / sizeof(k_s4d_fields[0])),
     .fields = k_s4d_fields,
     .user = (void *)&k_variant_s4d,
     .create = da_create,
     .deserialize = da_deserialize},
    {.abi_version = S4D_PLUGIN_ABI_VERSION,
     .struct_size = sizeof(s4d_plugin_creator),
     .plugin_namespace = "custom",
     .name = "DeformableAttentionAggrPlugin",
     .version = "1",
     .num_fields = 0,
     .fields = NULL,
     .user = (void *)&k_variant_alias,
     .create = da_create,
     .deserialize = da_deserialize},
};

/* The library's one exported symbol. */
__attribute__((visibility("default"))) s4d_status
s4d_plugin_library_init(const s4d_host_api *host, uint32_t *library_abi_version, s4d_errbuf *err)
{
    if (library_abi_version)
        *library_abi_version = S4D_PLUGIN_ABI_VERSION;
    if (!host) {
        set_err(err, "libs4d_plugins: host API table is NULL");
        return S4D_ERR_INVALID_ARG;
    }
    if (host->abi_version != S4D_PLUGIN_ABI_VERSION ||
        host->struct_size < offsetof(s4d_host_api, register_creator) + sizeof(host->register_creator) ||
        !host->register_creator) {
        set_err(err, "libs4d_plugins speaks plugin ABI %u, the host offers ABI %u",
                (unsigned)S4D_PLUGIN_ABI_VERSION, (unsigned)host->abi_version);
        return S4D_ERR_VERSION;
    }
    for (size_t i = 0; i < sizeof(k_creators) / sizeof(k_creators[0]); i++) {
        s4d_status st = host->register_creator(host->host, &k_creators[i]);
        if (st != S4D_OK) {
            set_err(err, "libs4d_plugins: registering %s::%s v%s failed (%s)",
                    k_creators[i].plugin_namespace, k_creators[i].name, k_creators[i].version,
                    s4d_status_string(st));
            return st;
        }
    }
    return S4D_OK;
}
