/*
 * Gemm on the CPU when A has one row (a classifier's last layer at batch 1):
 * a matrix-vector product (OpenBLAS sgemv) instead of sgemm, which copies the
 * whole weight matrix into its packed panels on every call. Other shapes and
 * dtypes run the host reference.
 *
 * The product reads every weight once and is bound by memory, so on a pool
 * the outputs are split into one part per thread (a single-threaded sgemv
 * each, on its rows of the weights; OpenBLAS never runs threads of its own,
 * ops/dense_util.h): two cores read about twice the bytes.
 * Parts start at multiples of 64 outputs, so each output goes through the
 * same path of the sgemv kernels as in one call, whatever the split. Only
 * with B transposed ([N][K], torch's Linear): each output is then a dot
 * product of one row; with B as [K][N] OpenBLAS blocks the reduction by the
 * part's width, and a split changed the last bits (tests/engine/gemv_split.py).
 */
#include "backend/cpu/cpu_kernels.h"
#include "ops/dense.h"
#include "ops/dense_util.h"
#include "util/threadpool.h"

#define GEMV_ALIGN 64 /* outputs: where parts may start */

typedef struct gemv_job {
    const s4d_gemm_params *p;
    const float *a, *b;
    float *y;
    int64_t part;
} gemv_job;

/* B is [N][K]: parts of `part` rows (outputs) each. */
static void gemv_parts(void *arg, int64_t c0, int64_t c1)
{
    const gemv_job *j = arg;
    const s4d_gemm_params *p = j->p;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t n0 = c * j->part, n1 = n0 + j->part < p->n ? n0 + j->part : p->n;
        s4d_host_sgemv(0, n1 - n0, p->k, p->alpha, j->b + n0 * p->k, p->k, j->a, 0.0f, j->y + n0);
    }
}

static s4d_status gemm_run(s4d_op_ctx *ctx)
{
    const s4d_gemm_params *p = ctx->params;
    if (!p || p->dtype != S4D_DTYPE_FLOAT32 || p->m != 1 || p->n > S4D_HOST_BLAS_MAX_DIM ||
        p->k > S4D_HOST_BLAS_MAX_DIM)
        return ctx->schema->run(ctx);
    /* One row of A is contiguous whether or not it is transposed. The weights stream from
     * memory at about 30 bytes per ns on one thread. */
    s4d_cpu_split_decide(ctx, 4.0 * (double)p->n * (double)p->k / 30000.0);
    const float *a = ctx->inputs[0].data, *b = ctx->inputs[1].data;
    float *y = ctx->outputs[0].data;
    const int threads = s4d_threadpool_size(ctx->pool);
    if (p->tb && threads > 1 && p->n > GEMV_ALIGN) {
        const int64_t per = (p->n + threads - 1) / threads;
        gemv_job j = {p, a, b, y, (per + GEMV_ALIGN - 1) / GEMV_ALIGN * GEMV_ALIGN};
        s4d_parallel_for(ctx->pool, (p->n + j.part - 1) / j.part, 1, gemv_parts, &j);
    } else if (p->tb) {
        s4d_host_sgemv(0, p->n, p->k, p->alpha, b, p->k, a, 0.0f, y);
    } else {
        s4d_host_sgemv(1, p->k, p->n, p->alpha, b, p->n, a, 0.0f, y);
    }
    if (p->has_c && p->beta != 0.0f) {
        const float *c = ctx->inputs[2].data;
        for (int64_t i = 0; i < p->n; i++)
            y[i] += p->beta * c[i * p->c_cs];
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
