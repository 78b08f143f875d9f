/*
 * s4d::FusedAttention on CUDA: the glue between the schema's typed params
 * (ops/attention.h) and the flash-attention style kernel
 * (kernels/attention.h). See cuda_backend.h for the rules every kernel keeps
 * (the context's stream, no allocation, no synchronisation at run time).
 *
 * supports() refuses head sizes above 128 (D of Q and KT, Dv of V): the
 * kernels keep a 64-query tile of Q and 64-key tiles of K and V in shared
 * memory and the output rows in registers; the fusion pass then leaves the
 * chain unfused, where cuBLAS and the softmax kernel run it. float16 runs on
 * tensor cores; float32 does too (TF32) when the engine allows TF32, and is
 * strict FFMA otherwise. The choice is part of the descriptor made at
 * prepare, and the workspace (key-split partials) follows it.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels/attention.h"
#include "ops/attention.h"

_Static_assert(S4D_CUDA_ATTN_MAX_RANK == S4D_MAX_RANK, "one rank limit");

static void to_desc(const s4d_op_ctx *ctx, const s4d_attention_params *p, s4d_cuda_attn_desc *g)
{
    const s4d_backend_ctx *bc = s4d_cuda_ctx(ctx);
    memset(g, 0, sizeof *g);
    g->nq = p->nq;
    g->nk = p->nk;
    g->d = p->d;
    g->dv = p->dv;
    g->batch_rank = p->batch_rank;
    for (int i = 0; i < S4D_MAX_RANK; i++) {
        g->batch[i] = p->batch[i];
        g->q_stride[i] = p->q_stride[i];
        g->k_stride[i] = p->k_stride[i];
        g->v_stride[i] = p->v_stride[i];
        g->m_stride[i] = p->m_stride[i];
    }
    g->m_qstride = p->m_qstride;
    g->m_kstride = p->m_kstride;
    g->nbatch = p->nbatch;
    g->has_mask = p->has_mask;
    g->fill_where_true = p->fill_where_true;
    g->mask_fill = p->mask_fill;
    g->has_q_scale = p->has_q_scale;
    g->q_scale = p->q_scale;
    g->swap_out = p->swap_out;
    /* float32 on TF32 tensor cores only where the engine allows it; strict float32 keeps FFMA */
    g->tf32 = p->dtype == S4D_DTYPE_FLOAT32 && bc && bc->allow_tf32;
}

/* The kernel's descriptor of the node; NULL (error in ctx) without typed params. */
static const s4d_attention_params *desc_of(s4d_op_ctx *ctx, s4d_cuda_attn_desc *g)
{
    const s4d_attention_params *p = s4d_cuda_params(ctx);
    if (p)
        to_desc(ctx, p, g);
    return p;
}

static s4d_status attn_supports(s4d_op_ctx *ctx)
{
    s4d_cuda_attn_desc g;
    const s4d_attention_params *p = desc_of(ctx, &g);
    if (!p)
        return S4D_ERR_INTERNAL;
    const char *why = "";
    if (!s4d_cuda_attention_ok(p->dtype, &g, &why))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "%s (got %s, D %lld, Dv %lld)", why,
                            s4d_dtype_name(p->dtype), (long long)p->d, (long long)p->dv);
    return S4D_OK;
}

static size_t attn_workspace(const s4d_op_ctx *ctx)
{
    const s4d_attention_params *p = ctx->params;
    if (!p)
        return 0;
    s4d_cuda_attn_desc g;
    to_desc(ctx, p, &g);
    return s4d_cuda_attention_workspace(p->dtype, &g);
}

/* The descriptor is made once here and kept as the layer's state for run(). */
static s4d_status attn_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    (void)payload;
    (void)size;
    *state = NULL;
    s4d_cuda_attn_desc *g = malloc(sizeof *g);
    if (!g)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    const s4d_attention_params *p = desc_of(ctx, g);
    s4d_status st = !p ? S4D_ERR_INTERNAL
                       : s4d_cuda_check(ctx, s4d_cuda_attention_prepare(p->dtype, g),
                                        "setting the fused attention kernel's shared memory size");
    if (st != S4D_OK) {
        free(g);
        return st;
    }
    *state = g;
    return S4D_OK;
}

static void attn_destroy(void *state)
{
    free(state);
}

static s4d_status attn_run(s4d_op_ctx *ctx)
{
    const s4d_attention_params *p = s4d_cuda_params(ctx);
    const s4d_cuda_attn_desc *g = ctx->state;
    if (!p || !g)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the fused attention was not prepared");
    cudaError_t e = s4d_cuda_attention(p->dtype, g, ctx->inputs[0].data, ctx->inputs[1].data,
                                       ctx->inputs[2].data, p->has_mask ? ctx->inputs[3].data : NULL,
                                       ctx->outputs[0].data, ctx->workspace, ctx->workspace_size,
                                       s4d_cuda_stream(ctx));
    return s4d_cuda_check(ctx, e, "fused attention kernel");
}

static const s4d_kernel k_fused_attention = {
    .domain = "s4d", .op_type = "FusedAttention", .since_version = 1, .supports = attn_supports,
    .workspace_size = attn_workspace, .prepare = attn_prepare, .destroy = attn_destroy,
    .run = attn_run,
};

const s4d_kernel *const s4d_cuda_kernels_attention[] = {&k_fused_attention};
const size_t s4d_cuda_kernels_attention_count =
    sizeof s4d_cuda_kernels_attention / sizeof s4d_cuda_kernels_attention[0];
