/*
 * Gemm on the CPU when A has one row (a classifier's last layer at batch 1):
 * a matrix-vector product (OpenBLAS sgemv) instead of sgemm, which copies the
 * whole weight matrix into its packed panels on every call. Other shapes and
 * dtypes run the host reference.
 */
#include "backend/cpu/cpu_kernels.h"
#include "ops/dense.h"
#include "ops/dense_util.h"

static s4d_status gemm_run(s4d_op_ctx *ctx)
{
    const s4d_gemm_params *p = ctx->params;
    if (!p || p->dtype != S4D_DTYPE_FLOAT32 || p->m != 1 || p->n > S4D_HOST_BLAS_MAX_DIM ||
        p->k > S4D_HOST_BLAS_MAX_DIM)
        return ctx->schema->run(ctx);
    const float *a = ctx->inputs[0].data, *b = ctx->inputs[1].data;
    float *y = ctx->outputs[0].data;
    /* One row of A is contiguous whether or not it is transposed. */
    if (p->tb)
        s4d_host_sgemv(0, p->n, p->k, p->alpha, b, p->k, a, 0.0f, y);
    else
        s4d_host_sgemv(1, p->k, p->n, p->alpha, b, p->n, a, 0.0f, y);
    if (p->has_c && p->beta != 0.0f) {
        const float *c = ctx->inputs[2].data;
        for (int64_t j = 0; j < p->n; j++)
            y[j] += p->beta * c[j * p->c_cs];
    }
    return S4D_OK;
}

static size_t gemm_workspace(const s4d_op_ctx *ctx)
{
    return ctx->schema->workspace_size ? ctx->schema->workspace_size(ctx) : 0;
}

const s4d_kernel s4d_cpu_kernel_gemm = {
    .domain = "", .op_type = "Gemm", .since_version = 7,
    .workspace_size = gemm_workspace, .run = gemm_run,
};
