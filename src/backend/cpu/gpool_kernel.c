/*
 * GlobalAveragePool on the CPU, float32: the squeeze of every SE block
 * (EfficientNet, MobileNetV3) and the head of every classifier. The host
 * reference adds one element at a time into a double, a dependency chain of
 * a few cycles per element; here 64 float lanes (4 vectors of 16, or 8 of 8)
 * take a plane, and their partial sums (each over plane / 64 elements) are
 * added in double. The result is within a few float roundings of the double
 * sum.
 */
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "ops/dense.h"
#include "util/threadpool.h"

typedef struct gavg_job {
    const float *x;
    float *y;
    int64_t plane;
} gavg_job;

typedef float vf16 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));

/* One plane's mean: LANES floats per vector, 4 vectors per step; one body per vector type. */
#define GAVG_BODY(VF, LANES)                                                                       \
    {                                                                                              \
        const gavg_job *j = arg;                                                                   \
        for (int64_t p = b; p < e; p++) {                                                          \
            const float *x = j->x + p * j->plane;                                                  \
            VF s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};                                             \
            int64_t i = 0;                                                                         \
            for (; i + 4 * LANES <= j->plane; i += 4 * LANES) {                                    \
                VF v0, v1, v2, v3;                                                                 \
                memcpy(&v0, x + i, sizeof v0);                                                     \
                memcpy(&v1, x + i + LANES, sizeof v1);                                             \
                memcpy(&v2, x + i + 2 * LANES, sizeof v2);                                         \
                memcpy(&v3, x + i + 3 * LANES, sizeof v3);                                         \
                s0 += v0, s1 += v1, s2 += v2, s3 += v3;                                            \
            }                                                                                      \
            double sum = 0.0;                                                                      \
            for (int l = 0; l < LANES; l++)                                                        \
                sum += (double)s0[l] + (double)s1[l] + (double)s2[l] + (double)s3[l];              \
            for (; i < j->plane; i++)                                                              \
                sum += x[i];                                                                       \
            j->y[p] = j->plane ? (float)(sum / (double)j->plane) : 0.0f;                           \
        }                                                                                          \
    }

__attribute__((target("avx512f"))) static void gavg_avx512(void *arg, int64_t b, int64_t e)
    GAVG_BODY(vf16, 16)

__attribute__((target("avx2"))) static void gavg_avx2(void *arg, int64_t b, int64_t e)
    GAVG_BODY(vf8, 8)

static void gavg_plain(void *arg, int64_t b, int64_t e)
{
    const gavg_job *j = arg;
    for (int64_t p = b; p < e; p++) {
        const float *x = j->x + p * j->plane;
        double sum = 0.0;
        for (int64_t i = 0; i < j->plane; i++)
            sum += x[i];
        j->y[p] = j->plane ? (float)(sum / (double)j->plane) : 0.0f;
    }
}

static s4d_status gavg_run(s4d_op_ctx *ctx)
{
    const s4d_gpool_params *p = ctx->params;
    if (!p || ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32)
        return ctx->schema->run(ctx);
    gavg_job j = {ctx->inputs[0].data, ctx->outputs[0].data, p->plane};
    s4d_cpu_split_decide(ctx, s4d_cpu_io_us(ctx));
    __builtin_cpu_init();
    s4d_parallel_fn fn = __builtin_cpu_supports("avx512f") ? gavg_avx512
                         : __builtin_cpu_supports("avx2") ? gavg_avx2
                                                          : gavg_plain;
    s4d_parallel_for(ctx->pool, p->planes, 1 + 32768 / (p->plane + 1), fn, &j);
    return S4D_OK;
}

static size_t gavg_workspace(const s4d_op_ctx *ctx)
{
    return ctx->schema->workspace_size ? ctx->schema->workspace_size(ctx) : 0;
}

const s4d_kernel s4d_cpu_kernel_global_avgpool = {
    .domain = "", .op_type = "GlobalAveragePool", .since_version = 1,
    .workspace_size = gavg_workspace, .run = gavg_run,
};
