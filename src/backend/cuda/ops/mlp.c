/*
 * s4d::FusedMLP on CUDA: the glue between the schema's typed params
 * (ops/mlp.h) and the kernel (kernels/mlp.h). See cuda_backend.h for the
 * rules every kernel keeps. supports() takes float32 chains whose layers are
 * at most 256 wide and whose weights, biases and LayerNorm parameters are
 * constants (the kernel may stage them before the kernel ahead of it has
 * finished); the fusion pass asks it for every link and for the whole chain,
 * so a wider layer or a computed bias stays a FusedMatMul. float16 is refused by
 * the schema already: the layer stays float32 in fp16 builds.
 */
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/mlp.h"
#include "ops/mlp.h"

_Static_assert(S4D_CUDA_MLP_MAX_LAYERS == S4D_MLP_MAX_LAYERS, "one layer limit");

/* The kernel's descriptor; the pointers are the context's tensors when it runs (NULL before). */
static void to_desc(const s4d_op_ctx *ctx, const s4d_mlp_params *p, s4d_cuda_mlp_desc *d)
{
    memset(d, 0, sizeof *d);
    d->layers = p->layers;
    d->rows = p->rows;
    d->x_cols = p->x_cols;
    d->begin = p->begin;
    for (int i = 0; i < p->layers; i++) {
        const int at = S4D_MLP_INPUT(i);
        s4d_cuda_mlp_layer *l = &d->layer[i];
        l->k = p->k[i] > S4D_CUDA_MLP_MAX_WIDTH ? -1 : (int)p->k[i];
        l->n = p->n[i] > S4D_CUDA_MLP_MAX_WIDTH ? -1 : (int)p->n[i];
        l->relu = p->relu[i];
        l->eps = p->eps[i];
        l->w = ctx->inputs[at].data;
        l->bias = p->has_bias[i] ? ctx->inputs[at + 1].data : NULL;
        l->scale = p->norm[i] ? ctx->inputs[at + 2].data : NULL;
        l->shift = p->has_shift[i] ? ctx->inputs[at + 3].data : NULL;
    }
}

static s4d_status mlp_supports(s4d_op_ctx *ctx)
{
    const s4d_mlp_params *p = s4d_cuda_params(ctx);
    if (!p)
        return S4D_ERR_INTERNAL;
    if (p->dtype != S4D_DTYPE_FLOAT32)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the kernel runs float32 only (got %s)",
                            s4d_dtype_name(p->dtype));
    /* The kernel may read them before the kernel ahead of it has finished (kernels/mlp.cu). */
    static const char *const part[4] = {"W", "bias", "Scale", "B"};
    for (int i = 0; i < p->layers; i++) {
        const int at = S4D_MLP_INPUT(i);
        const int present[4] = {1, p->has_bias[i], p->norm[i], p->has_shift[i]};
        for (int j = 0; j < 4; j++)
            if (present[j] && !ctx->inputs[at + j].data)
                return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                                    "layer %d's %s (input %d) is not a constant: the kernel takes "
                                    "constant weights, biases and LayerNorm parameters only",
                                    i, part[j], at + j);
    }
    s4d_cuda_mlp_desc d;
    to_desc(ctx, p, &d);
    const char *why = "";
    if (!s4d_cuda_mlp_ok(&d, &why))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%s", why);
    if (!s4d_cuda_mlp_preferred(&d, &why))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%s", why);
    return S4D_OK;
}

static s4d_status mlp_run(s4d_op_ctx *ctx)
{
    const s4d_mlp_params *p = s4d_cuda_params(ctx);
    if (!p)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the fused MLP has no parameters");
    s4d_cuda_mlp_desc d;
    to_desc(ctx, p, &d);
    cudaError_t e = s4d_cuda_mlp(&d, ctx->inputs[0].data, ctx->outputs[0].data, s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "fused MLP kernel");
}

static const s4d_kernel k_fused_mlp = {
    .domain = "s4d", .op_type = "FusedMLP", .since_version = 1, .supports = mlp_supports, .run = mlp_run,
};

const s4d_kernel *const s4d_cuda_kernels_mlp[] = {&k_fused_mlp};
const size_t s4d_cuda_kernels_mlp_count = sizeof s4d_cuda_kernels_mlp / sizeof s4d_cuda_kernels_mlp[0];
