/*
 * The activations of image networks on the CPU, float32, vectorised: Relu,
 * LeakyRelu, Sigmoid, HardSigmoid, HardSwish and Clip. The host reference
 * computes them one element at a time in double precision (exp() of a
 * double per Sigmoid), which dominated EfficientNet's run time; here each is
 * one pass of 16-lane (AVX-512), 8-lane (AVX2) or scalar code chosen from the
 * CPU's features, written once with GCC vector extensions.
 *
 * Sigmoid uses exp(-|x|) from a Cody-Waite reduction and a degree-6
 * polynomial (relative error about 1e-7, measured in the tests), so that
 * 1 / (1 + e) never overflows; the sign picks s or e * s as the reference
 * does. Other dtypes, and Clip bounds of other types, run the host
 * reference.
 *
 * s4d::FusedPointwise runs its host reference with these activations in
 * place of the reference's Sigmoid, Relu and Clip, so that a fused chain
 * gives the unfused layers' bits on this backend too.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "ops/elementwise.h"
#include "ops/pointwise.h"
#include "util/threadpool.h"

typedef struct act_job {
    int op;                 /* s4d_unop */
    float a, b;             /* LeakyRelu alpha; HardSigmoid alpha, beta; Clip min, max */
    const float *x;
    float *y;
} act_job;

/* exp(v) for v <= 0 (lanes below -87.3 give 0), then the activation; one body per vector type. */
#define ACT_BODY(VF, VI, W)                                                                        \
    {                                                                                              \
        const act_job *j = arg;                                                                    \
        const float *x = j->x;                                                                     \
        float *y = j->y;                                                                           \
        int64_t i = b0;                                                                            \
        const VF zero = {0}, one = zero + 1.0f;                                                    \
        const VI sign = (VI){0} + INT32_MIN;                                                       \
        for (; i + W <= e0; i += W) {                                                              \
            VF v, r;                                                                               \
            memcpy(&v, x + i, sizeof v);                                                           \
            switch (j->op) {                                                                       \
            case S4D_UN_RELU: {                                                                    \
                VI m = v > zero;                                                                   \
                r = (VF)((VI)v & m);                                                               \
                r = (VF)((VI)r | ((VI)v & (VI)(v != v))); /* NaN stays NaN */                      \
                break;                                                                             \
            }                                                                                      \
            case S4D_UN_LEAKY_RELU: {                                                              \
                VI m = v < zero;                                                                   \
                VF s = v * j->a;                                                                   \
                r = (VF)(((VI)s & m) | ((VI)v & ~m));                                              \
                break;                                                                             \
            }                                                                                      \
            case S4D_UN_SIGMOID: {                                                                 \
                VI neg = v < zero;                                                                 \
                VF t = (VF)((VI)v | sign); /* -|v| */                                              \
                VI tiny = t < -87.3f;                                                              \
                t = (VF)(((VI)(zero - 87.3f) & tiny) | ((VI)t & ~tiny));                           \
                VF fx = t * 1.44269504088896341f + 12582912.0f;                                    \
                VI n = (VI)fx - (VI)(zero + 12582912.0f);                                          \
                fx = fx - 12582912.0f;                                                             \
                VF rr = t - fx * 0.693359375f;                                                     \
                rr = rr + fx * 2.12194440e-4f;                                                     \
                VF p = zero + 1.9875691500e-4f;                                                    \
                p = p * rr + 1.3981999507e-3f;                                                     \
                p = p * rr + 8.3334519073e-3f;                                                     \
                p = p * rr + 4.1665795894e-2f;                                                     \
                p = p * rr + 1.6666665459e-1f;                                                     \
                p = p * rr + 5.0000001201e-1f;                                                     \
                p = p * rr * rr + rr + 1.0f;                                                       \
                VF ex = (VF)((VI)p + (n << 23));                                                   \
                ex = (VF)((VI)ex & ~tiny);                                                         \
                VF s = one / (one + ex);                                                           \
                VF es = ex * s;                                                                    \
                r = (VF)(((VI)es & neg) | ((VI)s & ~neg));                                         \
                r = (VF)((VI)r | ((VI)v & (VI)(v != v)));                                          \
                break;                                                                             \
            }                                                                                      \
            case S4D_UN_HARD_SIGMOID:                                                              \
            case S4D_UN_HARD_SWISH: {                                                              \
                VF t = j->op == S4D_UN_HARD_SWISH ? v / 6.0f + 0.5f : v * j->a + j->b;             \
                VI lo = t < zero, hi = t > one;                                                    \
                t = (VF)(((VI)t & ~lo) & ~hi);                                                     \
                t = (VF)((VI)t | ((VI)one & hi));                                                  \
                r = j->op == S4D_UN_HARD_SWISH ? v * t : t;                                        \
                break;                                                                             \
            }                                                                                      \
            case S4D_UN_CLIP: {                                                                    \
                VF lo = zero + j->a, hi = zero + j->b;                                             \
                VI ml = v < lo, mh = v > hi;                                                       \
                r = (VF)(((VI)v & ~ml & ~mh) | ((VI)lo & ml) | ((VI)hi & mh));                     \
                break;                                                                             \
            }                                                                                      \
            default:                                                                               \
                r = v;                                                                             \
                break;                                                                             \
            }                                                                                      \
            memcpy(y + i, &r, sizeof r);                                                           \
        }                                                                                          \
        act_scalar(j, i, e0);                                                                      \
    }

static float exp_neg(float t)
{
    /* The vector code's exp for t <= 0, one lane (NaN gives 0; the caller keeps the NaN). */
    if (!(t >= -87.3f))
        return 0.0f;
    float fx = t * 1.44269504088896341f + 12582912.0f;
    int32_t n, magic, bits;
    memcpy(&n, &fx, 4);
    float m = 12582912.0f;
    memcpy(&magic, &m, 4);
    n -= magic;
    fx -= 12582912.0f;
    float r = t - fx * 0.693359375f;
    r = r + fx * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    memcpy(&bits, &p, 4);
    bits += n * (1 << 23);
    memcpy(&p, &bits, 4);
    return p;
}

static void act_scalar(const act_job *j, int64_t b, int64_t e)
{
    const float *x = j->x;
    float *y = j->y;
    for (int64_t i = b; i < e; i++) {
        float v = x[i], r = v;
        switch (j->op) {
        case S4D_UN_RELU: r = v < 0.0f ? 0.0f : v; break;
        case S4D_UN_LEAKY_RELU: r = v < 0.0f ? v * j->a : v; break;
        case S4D_UN_SIGMOID: {
            float ex = exp_neg(v < 0.0f ? v : -v), s = 1.0f / (1.0f + ex);
            r = v != v ? v : v < 0.0f ? ex * s : s;
            break;
        }
        case S4D_UN_HARD_SIGMOID:
        case S4D_UN_HARD_SWISH: {
            float t = j->op == S4D_UN_HARD_SWISH ? v / 6.0f + 0.5f : v * j->a + j->b;
            t = t < 0.0f ? 0.0f : t > 1.0f ? 1.0f : t;
            r = j->op == S4D_UN_HARD_SWISH ? v * t : t;
            break;
        }
        case S4D_UN_CLIP: r = v < j->a ? j->a : v > j->b ? j->b : v; break;
        default: break;
        }
        y[i] = r;
    }
}

typedef float vf16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

__attribute__((target("avx512f"))) static void act_avx512(void *arg, int64_t b0, int64_t e0)
    ACT_BODY(vf16, vi16, 16)

__attribute__((target("avx2,fma"))) static void act_avx2(void *arg, int64_t b0, int64_t e0)
    ACT_BODY(vf8, vi8, 8)

static void act_plain(void *arg, int64_t b0, int64_t e0)
{
    act_scalar(arg, b0, e0);
}

static _Atomic int forced_isa; /* 0: the best; 1 scalar, 2 AVX2, 3 AVX-512 (tests) */

void s4d_cpu_eltwise_force_isa(int isa)
{
    forced_isa = isa;
}

static s4d_parallel_fn act_fn(void)
{
    __builtin_cpu_init();
    int isa = forced_isa;
    int has512 = __builtin_cpu_supports("avx512f");
    int has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (has512 && (isa == 0 || isa == 3))
        return act_avx512;
    if (has2 && (isa == 0 || isa >= 2))
        return act_avx2;
    return act_plain;
}

/* The job for this layer; 0 when the host reference runs it. */
static int act_job_make(const s4d_op_ctx *ctx, act_job *j)
{
    const s4d_unary_params *p = ctx->params;
    if (!p || ctx->inputs[0].dtype != S4D_DTYPE_FLOAT32)
        return 0;
    memset(j, 0, sizeof *j);
    j->op = p->op;
    switch ((s4d_unop)p->op) {
    case S4D_UN_RELU:
    case S4D_UN_SIGMOID:
    case S4D_UN_HARD_SWISH:
        break;
    case S4D_UN_LEAKY_RELU:
    case S4D_UN_HARD_SIGMOID:
        j->a = (float)p->alpha;
        j->b = (float)p->beta;
        break;
    case S4D_UN_CLIP:
        /* Bounds unknown at build are scalars read now; a NaN bound is the reference's business. */
        j->a = (float)p->alpha;
        j->b = (float)p->beta;
        if (p->have_min && !p->min_known)
            j->a = *(const float *)ctx->inputs[1].data;
        if (p->have_max && !p->max_known)
            j->b = *(const float *)ctx->inputs[2].data;
        if (j->a != j->a || j->b != j->b)
            return 0;
        break;
    default:
        return 0;
    }
    j->x = ctx->inputs[0].data;
    j->y = ctx->outputs[0].data;
    return 1;
}

static s4d_status act_run(s4d_op_ctx *ctx)
{
    act_job j;
    if (!act_job_make(ctx, &j))
        return ctx->schema->run(ctx);
    s4d_cpu_split_decide(ctx, s4d_cpu_io_us(ctx));
    s4d_parallel_for(ctx->pool, s4d_tensor_numel(&ctx->inputs[0]), 1 << 14, act_fn(), &j);
    return S4D_OK;
}

static size_t act_workspace(const s4d_op_ctx *ctx)
{
    return ctx->schema->workspace_size ? ctx->schema->workspace_size(ctx) : 0;
}

#define ACT_KERNEL(NAME, ONNX)                                                                     \
    const s4d_kernel s4d_cpu_kernel_##NAME = {                                                     \
        .domain = "", .op_type = ONNX, .since_version = 1,                                         \
        .workspace_size = act_workspace, .run = act_run,                                           \
    };

ACT_KERNEL(relu, "Relu")
ACT_KERNEL(leaky_relu, "LeakyRelu")
ACT_KERNEL(sigmoid, "Sigmoid")
ACT_KERNEL(hard_sigmoid, "HardSigmoid")
ACT_KERNEL(hard_swish, "HardSwish")
ACT_KERNEL(clip, "Clip")

/* The activations of a FusedPointwise program over one block (see ops/pointwise.h). */
static int pw_act(int op, float lo, float hi, const float *x, float *y, int64_t n)
{
    act_job j = {.x = x, .y = y};
    switch ((s4d_pw_op)op) {
    case S4D_PW_SIGMOID: j.op = S4D_UN_SIGMOID; break;
    case S4D_PW_RELU: j.op = S4D_UN_RELU; break;
    case S4D_PW_CLIP:
        /* As act_job_make: a NaN bound is the reference's business. */
        if (lo != lo || hi != hi)
            return 0;
        j.op = S4D_UN_CLIP;
        j.a = lo;
        j.b = hi;
        break;
    case S4D_PW_ADD: case S4D_PW_SUB: case S4D_PW_MUL: case S4D_PW_DIV: case S4D_PW_MIN: case S4D_PW_MAX:
    case S4D_PW_NEG: case S4D_PW_ABS: case S4D_PW_EXP: case S4D_PW_LOG: case S4D_PW_SQRT: case S4D_PW_TANH:
    case S4D_PW_RECIPROCAL: case S4D_PW_ATAN: case S4D_PW_WHERE: case S4D_PW_EQUAL: case S4D_PW_GREATER:
    case S4D_PW_LESS: case S4D_PW_GREATER_EQUAL: case S4D_PW_LESS_EQUAL: case S4D_PW_AND: case S4D_PW_OR:
    case S4D_PW_XOR: case S4D_PW_NOT: case S4D_PW_CAST:
    default:
        return 0;
    }
    act_fn()(&j, 0, n);
    return 1;
}

static s4d_status pw_run(s4d_op_ctx *ctx)
{
    s4d_cpu_split_decide(ctx, s4d_cpu_io_us(ctx));
    return s4d_pointwise_run_with(ctx, pw_act);
}

const s4d_kernel s4d_cpu_kernel_fused_pointwise = {
    .domain = "s4d", .op_type = "FusedPointwise", .since_version = 1, .run = pw_run,
};
