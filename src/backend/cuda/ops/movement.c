/*
 * CUDA kernels of the movement family (see cuda_backend.h): Reshape,
 * Flatten, Squeeze, Unsqueeze, Identity, Transpose, Concat, Split, Slice,
 * Gather, GatherElements, GatherND, ScatterND, ScatterElements, Expand, Tile,
 * Shape, Size, ConstantOfShape, Range, Resize, GridSample.
 *
 * Each run() turns the schema's params (src/ops/movement.h) and the static
 * shapes into one launcher call of kernels/movement.cu on the context's
 * stream. Data moves by element size, so every dtype the schemas take runs.
 * What a kernel cannot do the way the host does it, supports() refuses with
 * the reason (the placement pass reports it or falls back to the CPU).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/movement.h"
#include "ops/movement.h"

/* ---- helpers ------------------------------------------------------------------------- */

static size_t tensor_bytes(const s4d_tensor *t)
{
    return (size_t)s4d_tensor_numel(t) * s4d_dtype_size(t->dtype);
}

/* Row-major element strides of t. */
static void strides_of(const s4d_tensor *t, int64_t *st)
{
    int64_t s = 1;
    for (int d = t->rank - 1; d >= 0; d--) {
        st[d] = s;
        s *= t->dims[d];
    }
}

static int64_t prod(const int64_t *dims, int from, int to)
{
    int64_t p = 1;
    for (int d = from; d < to; d++)
        p *= dims[d];
    return p;
}

/* The kernels move elements of 1, 2, 4 or 8 bytes. */
static s4d_status word_dtype(s4d_op_ctx *ctx, int input)
{
    s4d_dtype dt = ctx->inputs[input].dtype;
    size_t es = s4d_dtype_size(dt);
    if (es == 1 || es == 2 || es == 4 || es == 8)
        return S4D_OK;
    return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the CUDA kernel does not move dtype %s",
                        s4d_dtype_name(dt));
}

static s4d_status supports_data(s4d_op_ctx *ctx)
{
    return word_dtype(ctx, 0);
}

static s4d_status d2d(s4d_op_ctx *ctx, void *dst, const void *src, size_t bytes, const char *what)
{
    if (!bytes || dst == src)
        return S4D_OK;
    return s4d_cuda_check(ctx,
                          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                          s4d_cuda_stream(ctx)),
                          what);
}

#define KERNEL(name, op, since, ...)                                                             \
    static const s4d_kernel name = {.domain = "", .op_type = op, .since_version = since,       \
                                    __VA_ARGS__}

/* ---- Reshape, Flatten, Squeeze, Unsqueeze, Identity: the bytes as they are ---------------------- */

static s4d_status run_copy(s4d_op_ctx *ctx)
{
    return d2d(ctx, ctx->outputs[0].data, ctx->inputs[0].data, tensor_bytes(&ctx->inputs[0]),
               "copying the tensor");
}

KERNEL(k_reshape, "Reshape", 5, .run = run_copy);
KERNEL(k_flatten, "Flatten", 1, .run = run_copy);
KERNEL(k_squeeze, "Squeeze", 1, .run = run_copy);
KERNEL(k_unsqueeze, "Unsqueeze", 1, .run = run_copy);
KERNEL(k_identity, "Identity", 1, .run = run_copy);

/* ---- Transpose ----------------------------------------------------------------------------------- */

static s4d_status run_transpose(s4d_op_ctx *ctx)
{
    const s4d_transpose_params *p = ctx->params;
    const s4d_tensor *in = &ctx->inputs[0];
    size_t es = s4d_dtype_size(in->dtype);
    if (s4d_tensor_numel(in) == 0)
        return S4D_OK;
    if (p->crank == 1)
        return d2d(ctx, ctx->outputs[0].data, in->data, tensor_bytes(in), "Transpose copy");
    return s4d_cuda_check(ctx,
                          s4d_cuda_transpose(ctx->outputs[0].data, in->data, (int64_t)es,
                                             p->crank, p->odims, p->ist, s4d_cuda_stream(ctx)),
                          "Transpose kernel");
}

KERNEL(k_transpose, "Transpose", 1, .supports = supports_data, .run = run_transpose);

/* ---- Concat and Split: one 2-D block per input (output), a few launches per node ----------------- */

#define PARTS 64

static s4d_status run_concat(s4d_op_ctx *ctx)
{
    const s4d_tensor *out = &ctx->outputs[0];
    int axis = ((const s4d_axis_params *)ctx->params)->axis;
    int64_t es = (int64_t)s4d_dtype_size(out->dtype);
    int64_t outer = prod(out->dims, 0, axis), out_row = prod(out->dims, axis, out->rank) * es;
    if (outer == 0 || out_row == 0)
        return S4D_OK;
    s4d_cuda_copy2d parts[PARTS];
    int64_t off = 0;
    int n = 0;
    for (int i = 0; i < ctx->num_inputs; i++) {
        const s4d_tensor *t = &ctx->inputs[i];
        int64_t row = prod(t->dims, axis, t->rank) * es;
        if (row > 0)
            parts[n++] = (s4d_cuda_copy2d){(char *)out->data + off, t->data, outer, row, out_row,
                                           row};
        off += row;
        if (n == PARTS || (i == ctx->num_inputs - 1 && n > 0)) {
            s4d_status st = s4d_cuda_check(
                ctx, s4d_cuda_copy2d_batched(parts, n, s4d_cuda_stream(ctx)), "Concat kernel");
            if (st != S4D_OK)
                return st;
            n = 0;
        }
    }
    return S4D_OK;
}

KERNEL(k_concat, "Concat", 4, .supports = supports_data, .run = run_concat);

static s4d_status run_split(s4d_op_ctx *ctx)
{
    const s4d_tensor *in = &ctx->inputs[0];
    int axis = ((const s4d_axis_params *)ctx->params)->axis;
    int64_t es = (int64_t)s4d_dtype_size(in->dtype);
    int64_t outer = prod(in->dims, 0, axis), in_row = prod(in->dims, axis, in->rank) * es;
    if (outer == 0 || in_row == 0)
        return S4D_OK;
    s4d_cuda_copy2d parts[PARTS];
    int64_t off = 0;
    int n = 0;
    for (int i = 0; i < ctx->num_outputs; i++) {
        const s4d_tensor *t = &ctx->outputs[i];
        int64_t row = prod(t->dims, axis, t->rank) * es;
        if (row > 0)
            parts[n++] = (s4d_cuda_copy2d){t->data, (const char *)in->data + off, outer, row, row,
                                           in_row};
        off += row;
        if (n == PARTS || (i == ctx->num_outputs - 1 && n > 0)) {
            s4d_status st = s4d_cuda_check(
                ctx, s4d_cuda_copy2d_batched(parts, n, s4d_cuda_stream(ctx)), "Split kernel");
            if (st != S4D_OK)
                return st;
            n = 0;
        }
    }
    return S4D_OK;
}

KERNEL(k_split, "Split", 2, .supports = supports_data, .run = run_split);

/* ---- Slice ------------------------------------------------------------------------------------------ */

static s4d_status run_slice(s4d_op_ctx *ctx)
{
    const s4d_slice_params *p = ctx->params;
    const s4d_tensor *in = &ctx->inputs[0];
    s4d_tensor *out = &ctx->outputs[0];
    if (s4d_tensor_numel(out) == 0)
        return S4D_OK;
    int64_t es = (int64_t)s4d_dtype_size(in->dtype), ist[S4D_MAX_RANK], sst[S4D_MAX_RANK],
            dst[S4D_MAX_RANK], start = 0;
    strides_of(in, ist);
    strides_of(out, dst);
    for (int d = 0; d < p->rank; d++) {
        start += p->start[d] * ist[d];
        sst[d] = p->step[d] * ist[d];
    }
    return s4d_cuda_check(ctx,
                          s4d_cuda_copy_strided(out->data, (const char *)in->data + start * es, es,
                                                p->rank, p->count, dst, sst,
                                                s4d_cuda_stream(ctx)),
                          "Slice kernel");
}

KERNEL(k_slice, "Slice", 1, .supports = supports_data, .run = run_slice);

/* ---- Expand and Tile ----------------------------------------------------------------------------------- */

static s4d_status run_expand(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_tensor *out = &ctx->outputs[0];
    if (s4d_tensor_numel(out) == 0)
        return S4D_OK;
    int64_t xst[S4D_MAX_RANK], dst[S4D_MAX_RANK], sst[S4D_MAX_RANK];
    strides_of(x, xst);
    strides_of(out, dst);
    for (int d = 0; d < out->rank; d++) {
        int xd = d - (out->rank - x->rank);
        /* Broadcast dims (absent or of size 1 in x) read the same element again. */
        sst[d] = xd < 0 || (x->dims[xd] == 1 && out->dims[d] != 1) ? 0 : xst[xd];
    }
    return s4d_cuda_check(ctx,
                          s4d_cuda_copy_strided(out->data, x->data,
                                                (int64_t)s4d_dtype_size(x->dtype), out->rank,
                                                out->dims, dst, sst, s4d_cuda_stream(ctx)),
                          "Expand kernel");
}

KERNEL(k_expand, "Expand", 8, .supports = supports_data, .run = run_expand);

static s4d_status run_tile(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0];
    s4d_tensor *out = &ctx->outputs[0];
    if (s4d_tensor_numel(out) == 0)
        return S4D_OK;
    /* Output dim d = (repeat r, element i) of x's dim d: two dims, the first read with stride 0. */
    int64_t xst[S4D_MAX_RANK] = {0}, ost[S4D_MAX_RANK] = {0}; /* gcc 13 misreads strides_of */
    int64_t dims[2 * S4D_MAX_RANK], dst[2 * S4D_MAX_RANK], sst[2 * S4D_MAX_RANK];
    strides_of(x, xst);
    strides_of(out, ost);
    for (int d = 0; d < x->rank; d++) {
        dims[2 * d] = out->dims[d] / x->dims[d];
        dims[2 * d + 1] = x->dims[d];
        dst[2 * d] = x->dims[d] * ost[d];
        dst[2 * d + 1] = ost[d];
        sst[2 * d] = 0;
        sst[2 * d + 1] = xst[d];
    }
    return s4d_cuda_check(ctx,
                          s4d_cuda_copy_strided(out->data, x->data,
                                                (int64_t)s4d_dtype_size(x->dtype), 2 * x->rank,
                                                dims, dst, sst, s4d_cuda_stream(ctx)),
                          "Tile kernel");
}

KERNEL(k_tile, "Tile", 6, .supports = supports_data, .run = run_tile);

/* ---- Gather, GatherElements, GatherND --------------------------------------------------------------- */

static s4d_status run_gather(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int axis = ((const s4d_gather_params *)ctx->params)->axis;
    return s4d_cuda_check(
        ctx,
        s4d_cuda_gather(ctx->outputs[0].data, x->data, idx->data, idx->dtype == S4D_DTYPE_INT64,
                        (int64_t)s4d_dtype_size(x->dtype), prod(x->dims, 0, axis), x->dims[axis],
                        s4d_tensor_numel(idx), prod(x->dims, axis + 1, x->rank),
                        s4d_cuda_stream(ctx)),
        "Gather kernel");
}

KERNEL(k_gather, "Gather", 1, .supports = supports_data, .run = run_gather);

static s4d_status run_gather_elements(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int axis = ((const s4d_gather_params *)ctx->params)->axis;
    int64_t xst[S4D_MAX_RANK];
    strides_of(x, xst);
    return s4d_cuda_check(ctx,
                          s4d_cuda_gather_elements(ctx->outputs[0].data, x->data, idx->data,
                                                   idx->dtype == S4D_DTYPE_INT64,
                                                   (int64_t)s4d_dtype_size(x->dtype), idx->rank,
                                                   idx->dims, xst, axis, x->dims[axis],
                                                   s4d_cuda_stream(ctx)),
                          "GatherElements kernel");
}

KERNEL(k_gather_elements, "GatherElements", 11, .supports = supports_data,
       .run = run_gather_elements);

static s4d_status run_gather_nd(s4d_op_ctx *ctx)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    int b = ((const s4d_gather_params *)ctx->params)->batch_dims;
    int k = (int)idx->dims[idx->rank - 1];
    int64_t xst[S4D_MAX_RANK];
    strides_of(x, xst);
    int64_t nb = prod(x->dims, 0, b), per_batch = prod(idx->dims, b, idx->rank - 1);
    int64_t batch_elems = b > 0 ? xst[b - 1] : s4d_tensor_numel(x);
    return s4d_cuda_check(
        ctx,
        s4d_cuda_gather_nd(ctx->outputs[0].data, x->data, idx->data,
                           (int64_t)s4d_dtype_size(x->dtype), nb * per_batch, per_batch, k,
                           x->dims + b, xst + b, batch_elems, prod(x->dims, b + k, x->rank),
                           s4d_cuda_stream(ctx)),
        "GatherND kernel");
}

KERNEL(k_gather_nd, "GatherND", 11, .supports = supports_data, .run = run_gather_nd);

/* ---- ScatterND, ScatterElements ---------------------------------------------------------------------- */

/* The element type a reduction combines in; RAW (by size) when there is none. */
static s4d_cuda_scalar scalar_of(s4d_dtype dt, s4d_scatter_reduction red)
{
    if (red == S4D_SCATTER_NONE)
        return S4D_CUDA_RAW;
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return S4D_CUDA_F32;
    case S4D_DTYPE_FLOAT64: return S4D_CUDA_F64;
    case S4D_DTYPE_FLOAT16: return S4D_CUDA_F16;
    case S4D_DTYPE_BFLOAT16: return S4D_CUDA_BF16;
    case S4D_DTYPE_INT8: return S4D_CUDA_I8;
    case S4D_DTYPE_UINT8: return S4D_CUDA_U8;
    case S4D_DTYPE_INT16: return S4D_CUDA_I16;
    case S4D_DTYPE_UINT16: return S4D_CUDA_U16;
    case S4D_DTYPE_INT32: return S4D_CUDA_I32;
    case S4D_DTYPE_UINT32: return S4D_CUDA_U32;
    case S4D_DTYPE_INT64: return S4D_CUDA_I64;
    case S4D_DTYPE_UINT64: return S4D_CUDA_U64;
    case S4D_DTYPE_UNDEFINED: case S4D_DTYPE_STRING: case S4D_DTYPE_BOOL:
        break;
    }
    return S4D_CUDA_RAW;
}

static s4d_status run_scatter_elements(s4d_op_ctx *ctx)
{
    const s4d_scatter_params *p = ctx->params;
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1], *up = &ctx->inputs[2];
    return s4d_cuda_check(
        ctx,
        s4d_cuda_scatter_elements(ctx->outputs[0].data, x->data, idx->data,
                                  idx->dtype == S4D_DTYPE_INT64, up->data,
                                  scalar_of(x->dtype, p->reduction),
                                  (int64_t)s4d_dtype_size(x->dtype), (int)p->reduction, x->rank,
                                  x->dims, idx->dims, p->axis, s4d_cuda_stream(ctx)),
        "ScatterElements kernel");
}

KERNEL(k_scatter_elements, "ScatterElements", 11, .supports = supports_data,
       .run = run_scatter_elements);

/* ScatterND's geometry: k, the slice length, slots and updates. */
typedef struct nd_geom {
    int k;
    int64_t slice, nslots, nupd;
    int64_t dims[S4D_MAX_RANK], st[S4D_MAX_RANK]; /* st in slots */
} nd_geom;

static void nd_geom_of(const s4d_op_ctx *ctx, nd_geom *g)
{
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1];
    memset(g, 0, sizeof *g);
    g->k = (int)idx->dims[idx->rank - 1];
    g->slice = prod(x->dims, g->k, x->rank);
    g->nslots = prod(x->dims, 0, g->k);
    g->nupd = s4d_tensor_numel(idx) / g->k;
    int64_t s = 1;
    for (int c = g->k - 1; c >= 0; c--) {
        g->dims[c] = x->dims[c];
        g->st[c] = s;
        s *= x->dims[c];
    }
}

static s4d_status supports_scatter_nd(s4d_op_ctx *ctx)
{
    s4d_status st = word_dtype(ctx, 0);
    if (st != S4D_OK)
        return st;
    const s4d_scatter_params *p = ctx->params;
    nd_geom g;
    nd_geom_of(ctx, &g);
    if (g.nupd >= ((int64_t)1 << 31))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "the CUDA kernel takes fewer than 2^31 updates, not %lld",
                            (long long)g.nupd);
    /* A reduction scans every update for every slot, to apply them in order. */
    if (p && p->reduction != S4D_SCATTER_NONE &&
        (double)g.nslots * (double)g.nupd > 4294967296.0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "the CUDA kernel applies a reduction by scanning all %lld updates "
                            "for each of %lld slots, too many",
                            (long long)g.nupd, (long long)g.nslots);
    return S4D_OK;
}

static size_t workspace_scatter_nd(const s4d_op_ctx *ctx)
{
    nd_geom g;
    nd_geom_of(ctx, &g);
    return s4d_cuda_scatter_nd_workspace(g.nslots, g.nupd);
}

static s4d_status run_scatter_nd(s4d_op_ctx *ctx)
{
    const s4d_scatter_params *p = ctx->params;
    const s4d_tensor *x = &ctx->inputs[0], *idx = &ctx->inputs[1], *up = &ctx->inputs[2];
    nd_geom g;
    nd_geom_of(ctx, &g);
    return s4d_cuda_check(
        ctx,
        s4d_cuda_scatter_nd(ctx->outputs[0].data, x->data, idx->data, up->data,
                            scalar_of(x->dtype, p->reduction), (int64_t)s4d_dtype_size(x->dtype),
                            (int)p->reduction, g.nslots, g.slice, g.nupd, g.k, g.dims, g.st,
                            ctx->workspace, s4d_cuda_stream(ctx)),
        "ScatterND kernel");
}

KERNEL(k_scatter_nd, "ScatterND", 11, .supports = supports_scatter_nd,
       .workspace_size = workspace_scatter_nd, .run = run_scatter_nd);

/* ---- Shape, Size, Range: outputs known at build, uploaded once; ConstantOfShape: a fill ---------- */

typedef struct const_state {
    void *dev;
    size_t bytes;
} const_state;

static void destroy_const(void *state)
{
    const_state *s = state;
    if (!s)
        return;
    if (s->dev)
        cudaFree(s->dev);
    free(s);
}

/* Runs the host reference into host memory (it reads only shapes and params) and uploads it. */
static s4d_status prepare_const(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    (void)payload;
    (void)size;
    *state = NULL;
    const_state *s = calloc(1, sizeof *s);
    if (!s)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    s->bytes = tensor_bytes(&ctx->outputs[0]);
    s4d_status st = S4D_OK;
    void *host = NULL;
    if (s->bytes) {
        s4d_tensor ins[3], out = ctx->outputs[0];
        int n = ctx->num_inputs < 3 ? ctx->num_inputs : 3;
        for (int i = 0; i < n; i++) {
            ins[i] = ctx->inputs[i];
            ins[i].data = NULL; /* device memory: the reference must not read it */
        }
        host = malloc(s->bytes);
        if (!host) {
            st = s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory (%zu bytes)", s->bytes);
            goto done;
        }
        out.data = host;
        s4d_op_ctx hc = *ctx;
        hc.inputs = ins;
        hc.num_inputs = n;
        hc.outputs = &out;
        hc.num_outputs = 1;
        hc.pool = NULL;
        hc.stream = NULL;
        if ((st = ctx->schema->run(&hc)) != S4D_OK)
            goto done;
        if ((st = s4d_cuda_check(ctx, cudaMalloc(&s->dev, s->bytes), "allocating the output"))
                != S4D_OK ||
            (st = s4d_cuda_check(ctx,
                                 cudaMemcpyAsync(s->dev, host, s->bytes, cudaMemcpyHostToDevice,
                                                 s4d_cuda_stream(ctx)),
                                 "uploading the output")) != S4D_OK ||
            (st = s4d_cuda_check(ctx, cudaStreamSynchronize(s4d_cuda_stream(ctx)),
                                 "uploading the output")) != S4D_OK)
            goto done;
    }
done:
    free(host);
    if (st != S4D_OK) {
        destroy_const(s);
        return st;
    }
    *state = s;
    return S4D_OK;
}

static s4d_status run_const(s4d_op_ctx *ctx)
{
    const const_state *s = ctx->state;
    return d2d(ctx, ctx->outputs[0].data, s->dev, s->bytes, "copying the constant output");
}

KERNEL(k_shape, "Shape", 1, .prepare = prepare_const, .destroy = destroy_const, .run = run_const);
KERNEL(k_size, "Size", 1, .prepare = prepare_const, .destroy = destroy_const, .run = run_const);
KERNEL(k_range, "Range", 11, .prepare = prepare_const, .destroy = destroy_const, .run = run_const);

static s4d_status run_constant_of_shape(s4d_op_ctx *ctx)
{
    const s4d_constant_of_shape_params *p = ctx->params;
    s4d_tensor *out = &ctx->outputs[0];
    return s4d_cuda_check(ctx,
                          s4d_cuda_fill(out->data, (int64_t)s4d_dtype_size(out->dtype), p->value,
                                        s4d_tensor_numel(out), s4d_cuda_stream(ctx)),
                          "ConstantOfShape kernel");
}

static s4d_status supports_constant_of_shape(s4d_op_ctx *ctx)
{
    const s4d_constant_of_shape_params *p = ctx->params;
    size_t es = p ? s4d_dtype_size(p->dtype) : 0;
    if (es == 1 || es == 2 || es == 4 || es == 8)
        return S4D_OK;
    return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the CUDA kernel does not fill dtype %s",
                        s4d_dtype_name(p ? p->dtype : S4D_DTYPE_UNDEFINED));
}

KERNEL(k_constant_of_shape, "ConstantOfShape", 9, .supports = supports_constant_of_shape,
       .run = run_constant_of_shape);

/* ---- Resize -------------------------------------------------------------------------------------------- */

typedef struct resize_state {
    int identity;        /* no axis resampled: a copy */
    s4d_cuda_resize r;   /* device tables in dev */
    void *dev;
} resize_state;

static void destroy_resize(void *state)
{
    resize_state *s = state;
    if (!s)
        return;
    if (s->dev)
        cudaFree(s->dev);
    free(s);
}

static int first_active(const s4d_resize_params *p)
{
    for (int a = 0; a < p->rank; a++)
        if (s4d_resize_axis_active(p, a))
            return a;
    return -1;
}

static s4d_status supports_resize(s4d_op_ctx *ctx)
{
    const s4d_resize_params *p = ctx->params;
    if (!p)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "Resize without its params");
    const s4d_dtype dt = ctx->inputs[0].dtype;
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the CUDA Resize takes float32 or float16 X, not %s",
                            s4d_dtype_name(dt));
    if (!p->linear)
        return S4D_OK;
    int n = 0;
    for (int a = 0; a < p->rank; a++)
        n += s4d_resize_axis_active(p, a);
    if (n > S4D_CUDA_RESIZE_MAX_LINEAR)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "the CUDA kernel blends at most %d axes in linear mode, this node %d",
                            S4D_CUDA_RESIZE_MAX_LINEAR, n);
    return S4D_OK;
}

/* Per table axis, per output index: the source offsets of both taps and the blend weight. */
static s4d_status prepare_resize(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    (void)payload;
    (void)size;
    *state = NULL;
    const s4d_resize_params *p = ctx->params;
    resize_state *s = calloc(1, sizeof *s);
    if (!s)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    int a0 = first_active(p);
    if (a0 < 0) {
        s->identity = 1;
        *state = s;
        return S4D_OK;
    }
    s4d_cuda_resize *r = &s->r;
    int64_t ist[S4D_MAX_RANK], st = 1, len = 0;
    for (int a = p->rank - 1; a >= 0; a--) {
        ist[a] = st;
        st *= p->in[a];
    }
    r->naxes = p->rank - a0;
    r->outer = prod(p->out, 0, a0);
    r->in_block = prod(p->in, a0, p->rank);
    r->linear = p->linear;
    for (int j = 0; j < r->naxes; j++) {
        int a = a0 + j;
        r->out_dims[j] = p->out[a];
        r->base[j] = len;
        len += p->out[a];
        if (p->linear && s4d_resize_axis_active(p, a)) {
            r->lin_axis[r->nlin] = j;
            /* The host blends even where w == 0 when nothing follows the axis (resize.c). */
            r->always_blend[r->nlin] = prod(p->in, a + 1, p->rank) == 1;
            r->nlin++;
        }
    }
    size_t bytes = (size_t)len * (2 * sizeof(int64_t) + sizeof(float));
    int64_t *i0 = malloc((size_t)len * sizeof(int64_t)), *i1 = malloc((size_t)len * sizeof(int64_t));
    float *w = malloc((size_t)len * sizeof(float));
    char *host = malloc(bytes ? bytes : 1);
    s4d_status stt = S4D_OK;
    if (!i0 || !i1 || !w || !host) {
        stt = s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    int64_t *h0 = (int64_t *)host, *h1 = h0 + len;
    float *hw = (float *)(h1 + len);
    for (int j = 0; j < r->naxes; j++) {
        int a = a0 + j;
        int64_t *t0 = i0 + r->base[j], *t1 = i1 + r->base[j];
        float *tw = w + r->base[j];
        if (s4d_resize_axis_active(p, a)) {
            s4d_resize_taps(p, a, t0, t1, tw);
        } else {
            for (int64_t o = 0; o < p->out[a]; o++) {
                t0[o] = t1[o] = o;
                tw[o] = 0.0f;
            }
        }
        for (int64_t o = 0; o < p->out[a]; o++) {
            h0[r->base[j] + o] = t0[o] * ist[a];
            h1[r->base[j] + o] = t1[o] * ist[a];
            hw[r->base[j] + o] = tw[o];
        }
    }
    if ((stt = s4d_cuda_check(ctx, cudaMalloc(&s->dev, bytes ? bytes : 1), "allocating the tables"))
            != S4D_OK ||
        (stt = s4d_cuda_check(ctx,
                              cudaMemcpyAsync(s->dev, host, bytes, cudaMemcpyHostToDevice,
                                              s4d_cuda_stream(ctx)),
                              "uploading the tables")) != S4D_OK ||
        (stt = s4d_cuda_check(ctx, cudaStreamSynchronize(s4d_cuda_stream(ctx)),
                              "uploading the tables")) != S4D_OK)
        goto done;
    r->off0 = (const int64_t *)s->dev;
    r->off1 = r->off0 + len;
    r->w = (const float *)(r->off1 + len);
done:
    free(i0);
    free(i1);
    free(w);
    free(host);
    if (stt != S4D_OK) {
        destroy_resize(s);
        return stt;
    }
    *state = s;
    return S4D_OK;
}

static s4d_status run_resize(s4d_op_ctx *ctx)
{
    const resize_state *s = ctx->state;
    s4d_tensor *out = &ctx->outputs[0];
    if (s->identity)
        return d2d(ctx, out->data, ctx->inputs[0].data, tensor_bytes(out), "Resize copy");
    const cudaError_t e = out->dtype == S4D_DTYPE_FLOAT16
                              ? s4d_cuda_resize_f16(out->data, ctx->inputs[0].data, &s->r, s4d_cuda_stream(ctx))
                              : s4d_cuda_resize_f32(out->data, ctx->inputs[0].data, &s->r, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "Resize kernel");
}

KERNEL(k_resize, "Resize", 10, .supports = supports_resize, .prepare = prepare_resize,
       .destroy = destroy_resize, .run = run_resize);

/* ---- GridSample ------------------------------------------------------------------------------------------- */

static s4d_status run_grid_sample(s4d_op_ctx *ctx)
{
    const s4d_grid_sample_params *p = ctx->params;
    return s4d_cuda_check(ctx,
                          s4d_cuda_grid_sample_f32(ctx->outputs[0].data, ctx->inputs[0].data,
                                                   ctx->inputs[1].data, p->n, p->c, p->h, p->w,
                                                   p->ho, p->wo, p->linear, (int)p->pad, p->align,
                                                   s4d_cuda_stream(ctx)),
                          "GridSample kernel");
}

KERNEL(k_grid_sample, "GridSample", 16, .run = run_grid_sample);

/* ---- the table ------------------------------------------------------------------------------------------------ */

const s4d_kernel *const s4d_cuda_kernels_movement[] = {
    &k_concat,     &k_constant_of_shape, &k_expand,          &k_flatten,
    &k_gather,     &k_gather_elements,   &k_gather_nd,       &k_grid_sample,
    &k_identity,   &k_range,             &k_reshape,         &k_resize,
    &k_scatter_elements, &k_scatter_nd,  &k_shape,           &k_size,
    &k_slice,      &k_split,             &k_squeeze,         &k_tile,
    &k_transpose,  &k_unsqueeze,
};
const size_t s4d_cuda_kernels_movement_count =
    sizeof(s4d_cuda_kernels_movement) / sizeof(s4d_cuda_kernels_movement[0]);
