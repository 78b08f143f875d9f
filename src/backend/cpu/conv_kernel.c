/*
 * Conv and s4d::FusedConv on the CPU through the convolution library
 * (conv/cpuconv.h): implicit GEMM, Winograd F(2x2) / F(4x4) for 3x3 stride 1,
 * depthwise, with bias, residual and ReLU applied while the output is in
 * cache.
 *
 * prepare() (once per engine, at build and at load) plans the convolution
 * and packs the constant weights. The payload the engine file keeps is the
 * algorithm the build chose, so that an engine loads with the algorithm it
 * was validated with even if a later version would choose otherwise; the
 * packed weights are made again at load (a few milliseconds per layer, see
 * docs/cpu-backend.md) rather than stored: stored, they would add 1x to 4x
 * the weights to every engine file.
 *
 * The library's blocking and workspace follow the number of threads, which
 * is a per-context choice; prepare makes one plan per power-of-two width up
 * to the machine's cores (and the core count itself), all sharing one set of
 * packed weights, and the layer's workspace is the largest of them. run()
 * takes the plan of the widest width that fits the context's pool.
 *
 * Whatever the library does not cover (3-D convolutions, weights that are
 * not constants, sizes past its limits) runs the schema's host reference:
 * prepare leaves no state and run() and the workspace query defer to it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/conv/cpuconv.h"
#include "backend/cpu/cpu_kernels.h"
#include "ops/dense.h"
#include "ops/extra.h"
#include "util/threadpool.h"

#define CONV_PAYLOAD_MAGIC 0x56433453u /* "S4CV" */
#define CONV_PAYLOAD_VERSION 1u
#define CONV_MAX_PLANS 16

typedef struct conv_state {
    int nplans;
    int width[CONV_MAX_PLANS];  /* ascending; width[0] == 1 */
    s4d_cpuconv_plan *plan[CONV_MAX_PLANS];
    void *packed;
    size_t packed_bytes;
    size_t ws_bytes;            /* the largest plan's */
    s4d_cpuconv_algo algo;
    double arith_us; /* estimated single-thread time of the arithmetic */
} conv_state;

int s4d_cpu_plan_threads(void)
{
    const char *env = getenv("S4D_CPU_PLAN_THREADS");
    if (env && env[0]) {
        long v = strtol(env, NULL, 10);
        if (v >= 1 && v <= 1024)
            return (int)v;
    }
    long k = sysconf(_SC_NPROCESSORS_ONLN);
    return k > 0 ? (int)(k > 1024 ? 1024 : k) : 1;
}

int s4d_cpu_plan_widths(int *widths, int max)
{
    const int cores = s4d_cpu_plan_threads();
    int n = 0;
    for (int w = 1; n < max; w *= 2) {
        widths[n++] = w < cores ? w : cores;
        if (w >= cores)
            break;
    }
    return n;
}

int s4d_cpu_pick_width(const int *widths, int n, const s4d_threadpool *pool)
{
    const int threads = s4d_threadpool_size(pool);
    int k = 0;
    while (k + 1 < n && widths[k + 1] <= threads)
        k++;
    return k;
}

void s4d_cpu_lib_parallel_for(void *pool, int64_t n, void (*fn)(void *, int64_t, int64_t), void *arg)
{
    s4d_parallel_for(pool, n, 1, fn, arg);
}

int s4d_cpu_overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const char *p = a, *q = b;
    return a && b && p < q + bn && q < p + an;
}

int s4d_cpu_lib_act(int act, float a, float b, int *lib_act, float *lo, float *hi, float *alpha, float *beta)
{
    static const s4d_cpuconv_act map[] = {
        [S4D_CONV_ACT_NONE] = S4D_CPUCONV_ACT_NONE,
        [S4D_CONV_ACT_RELU] = S4D_CPUCONV_ACT_RELU,
        [S4D_CONV_ACT_CLIP] = S4D_CPUCONV_ACT_CLIP,
        [S4D_CONV_ACT_LEAKY_RELU] = S4D_CPUCONV_ACT_LEAKY_RELU,
        [S4D_CONV_ACT_SIGMOID] = S4D_CPUCONV_ACT_SIGMOID,
        [S4D_CONV_ACT_SILU] = S4D_CPUCONV_ACT_SILU,
        [S4D_CONV_ACT_HARD_SIGMOID] = S4D_CPUCONV_ACT_HARD_SIGMOID,
        [S4D_CONV_ACT_HARD_SWISH] = S4D_CPUCONV_ACT_HARD_SWISH,
    };
    if (act < 0 || act > S4D_CONV_ACT_HARD_SWISH)
        return 0;
    *lib_act = (int)map[act];
    if (act == S4D_CONV_ACT_CLIP) {
        *lo = a;
        *hi = b;
    } else {
        *alpha = a;
        *beta = b;
    }
    return 1;
}

static void conv_state_free(conv_state *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nplans; i++)
        s4d_cpuconv_plan_destroy(s->plan[i]);
    s4d_aligned_free(s->packed);
    free(s);
}

static void conv_destroy(void *state)
{
    conv_state_free(state);
}

/* The library's parameters for this layer; 0 when it is not a case for the library. */
static int conv_lib_params(const s4d_op_ctx *ctx, s4d_cpuconv_params *cp)
{
    const s4d_conv_params *p = ctx->params;
    /* Channels-last (a test layout on the CPU) runs the host reference. */
    if (!p || p->dtype != S4D_DTYPE_FLOAT32 || p->g.nsp < 1 || p->g.nsp > 2 || p->nhwc)
        return 0;
    const s4d_conv_geom *g = &p->g;
    memset(cp, 0, sizeof *cp);
    cp->struct_size = sizeof *cp;
    cp->n = p->n;
    cp->c = p->c;
    cp->m = p->m;
    /* Spatial slots are right-aligned in three: a 1-D convolution is a 2-D one of height 1. */
    cp->h = g->img[1];
    cp->w = g->img[2];
    cp->kh = g->k[1];
    cp->kw = g->k[2];
    cp->stride_h = g->stride[1];
    cp->stride_w = g->stride[2];
    cp->dil_h = g->dil[1];
    cp->dil_w = g->dil[2];
    cp->pad_top = g->pad_b[1];
    cp->pad_left = g->pad_b[2];
    cp->pad_bottom = g->pad_e[1];
    cp->pad_right = g->pad_e[2];
    cp->group = p->group;
    cp->has_bias = p->has_bias;
    cp->has_residual = p->has_z;
    cp->act = p->relu ? S4D_CPUCONV_ACT_RELU : S4D_CPUCONV_ACT_NONE;
    if (strcmp(ctx->schema->op_type, "FusedConvAct") == 0) {
        /* Its params continue FusedConv's with the activation. */
        const s4d_conv_act_params *a = ctx->params;
        int act;
        if (!s4d_cpu_lib_act(a->act, a->alpha, a->beta, &act, &cp->act_min, &cp->act_max, &cp->act_alpha,
                             &cp->act_beta))
            return 0;
        cp->act = (s4d_cpuconv_act)act;
    }
    return 1;
}

/* Plans for widths 1, 2, 4, ... and the core count, all with one algorithm. */
static s4d_status conv_make_plans(conv_state *s, s4d_cpuconv_params cp, s4d_cpuconv_algo algo,
                                  s4d_errbuf *err)
{
    int widths[CONV_MAX_PLANS];
    const int n = s4d_cpu_plan_widths(widths, CONV_MAX_PLANS);
    for (int i = 0; i < n; i++) {
        const int width = widths[i];
        cp.num_threads = width;
        cp.algo = algo;
        s4d_status st = s4d_cpuconv_plan_create(&cp, &s->plan[s->nplans], err);
        if (st != S4D_OK)
            return st;
        s4d_cpuconv_info info;
        s4d_cpuconv_plan_info(s->plan[s->nplans], &info);
        s->width[s->nplans++] = width;
        if (info.workspace_bytes > s->ws_bytes)
            s->ws_bytes = info.workspace_bytes;
        if (s->nplans == 1) {
            /* The first plan settles the algorithm (AUTO at build) and the packed size. */
            algo = info.algo;
            s->algo = info.algo;
            s->packed_bytes = info.packed_bytes;
        }
    }
    return S4D_OK;
}

/* The algorithm a build stored, checked: the payload is bytes from a file. */
static s4d_status conv_read_payload(s4d_op_ctx *ctx, const void *payload, size_t size,
                                    s4d_cpuconv_algo *algo)
{
    s4d_rbuf r = {payload, size, 0, 0, NULL};
    uint32_t magic = 0, version = 0, a = 0;
    s4d_rbuf_u32(&r, &magic, "magic");
    s4d_rbuf_u32(&r, &version, "version");
    s4d_rbuf_u32(&r, &a, "algorithm");
    if (r.failed || r.pos != size)
        return s4d_op_error(ctx, S4D_ERR_PARSE,
                            "convolution payload of %zu bytes, expected 12 (magic, version, "
                            "algorithm)",
                            size);
    if (magic != CONV_PAYLOAD_MAGIC || version != CONV_PAYLOAD_VERSION)
        return s4d_op_error(ctx, S4D_ERR_PARSE,
                            "convolution payload has magic 0x%08x version %u, expected 0x%08x "
                            "version %u",
                            magic, version, CONV_PAYLOAD_MAGIC, CONV_PAYLOAD_VERSION);
    if (a < S4D_CPUCONV_ALGO_GEMM || a > S4D_CPUCONV_ALGO_DEPTHWISE)
        return s4d_op_error(ctx, S4D_ERR_PARSE, "convolution payload names algorithm %u, not 1..4",
                            a);
    *algo = (s4d_cpuconv_algo)a;
    return S4D_OK;
}

static s4d_status conv_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    *state = NULL;
    s4d_cpuconv_params cp;
    const s4d_tensor *w = &ctx->inputs[1];
    int eligible = conv_lib_params(ctx, &cp) && w->data != NULL;
    s4d_cpuconv_algo algo = S4D_CPUCONV_ALGO_AUTO;
    if (payload && size) {
        s4d_status st = conv_read_payload(ctx, payload, size, &algo);
        if (st != S4D_OK)
            return st;
        if (!eligible)
            return s4d_op_error(ctx, S4D_ERR_PARSE,
                                "the engine file has a convolution plan for a layer the library "
                                "does not run");
    } else if (payload || size || !eligible) {
        /* Loading a layer that was built for the host reference, or not a case for the library. */
        return S4D_OK;
    }
    conv_state *s = calloc(1, sizeof *s);
    if (!s)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_errbuf err;
    err.msg[0] = 0;
    s4d_status st = conv_make_plans(s, cp, algo, &err);
    if (st == S4D_OK) {
        const double ho = (double)((cp.h + cp.pad_top + cp.pad_bottom - cp.dil_h * (cp.kh - 1) - 1) / cp.stride_h + 1);
        const double wo = (double)((cp.w + cp.pad_left + cp.pad_right - cp.dil_w * (cp.kw - 1) - 1) / cp.stride_w + 1);
        const double macs = (double)cp.n * (double)cp.m * (double)(cp.c / cp.group) * (double)(cp.kh * cp.kw) * ho * wo;
        /* Multiply-adds per us on one thread, from the per-layer profiles: 50 to 90
           thousand for the GEMM and Winograd layers, 4 to 15 thousand depthwise. */
        s->arith_us = macs / (s->algo == S4D_CPUCONV_ALGO_DEPTHWISE ? 8000.0 : 60000.0);
    }
    if (st != S4D_OK) {
        conv_state_free(s);
        if (algo != S4D_CPUCONV_ALGO_AUTO)
            return s4d_op_error(ctx, S4D_ERR_PARSE,
                                "the stored convolution algorithm %s does not run this layer: %s",
                                s4d_cpuconv_algo_name(algo), err.msg);
        /* Past the library's limits: the host reference runs it. */
        return S4D_OK;
    }
    s->packed = s4d_aligned_alloc(s->packed_bytes);
    if (!s->packed) {
        size_t bytes = s->packed_bytes;
        conv_state_free(s);
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory packing %zu bytes of weights",
                            bytes);
    }
    st = s4d_cpuconv_pack_weights(s->plan[0], w->data, s->packed, s->packed_bytes, &err);
    if (st != S4D_OK) {
        conv_state_free(s);
        return s4d_op_error(ctx, st, "packing the weights: %s", err.msg);
    }
    *state = s;
    return S4D_OK;
}

static s4d_status conv_save(const void *state, s4d_wbuf *w)
{
    const conv_state *s = state;
    s4d_wbuf_u32(w, CONV_PAYLOAD_MAGIC);
    s4d_wbuf_u32(w, CONV_PAYLOAD_VERSION);
    s4d_wbuf_u32(w, (uint32_t)s->algo);
    return S4D_OK;
}

static size_t conv_workspace(const s4d_op_ctx *ctx)
{
    const conv_state *s = ctx->state;
    if (s)
        return s->ws_bytes;
    return ctx->schema->workspace_size ? ctx->schema->workspace_size(ctx) : 0;
}

/* The widest plan's: the one a context with every core runs. */
static int conv_describe(const void *state, char *buf, size_t size)
{
    const conv_state *s = state;
    return s && s->nplans ? s4d_cpuconv_plan_describe(s->plan[s->nplans - 1], buf, size) : 0;
}

static s4d_status conv_run(s4d_op_ctx *ctx)
{
    const conv_state *s = ctx->state;
    if (!s)
        return ctx->schema->run(ctx);
    const s4d_conv_params *p = ctx->params;
    s4d_cpu_split_decide(ctx, s->arith_us + s4d_cpu_io_us(ctx));
    const int k = s4d_cpu_pick_width(s->width, s->nplans, ctx->pool);
    const float *x = ctx->inputs[0].data;
    const float *bias = p->has_bias ? ctx->inputs[2].data : NULL;
    const float *res = p->has_z ? ctx->inputs[3].data : NULL;
    float *y = ctx->outputs[0].data;
    size_t ybytes = sizeof(float) * (size_t)s4d_tensor_numel(&ctx->outputs[0]);
    if (s4d_cpu_overlaps(y, ybytes, x, sizeof(float) * (size_t)s4d_tensor_numel(&ctx->inputs[0])) ||
        (res && s4d_cpu_overlaps(y, ybytes, res, ybytes)))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL,
                            "the output shares memory with an input; the convolution needs them "
                            "apart");
    s4d_errbuf err;
    err.msg[0] = 0;
    s4d_status st = s4d_cpuconv_run(s->plan[k], s->packed, x, bias, res, y, ctx->workspace,
                                    ctx->workspace_size, s4d_cpu_lib_parallel_for, ctx->pool, &err);
    if (st != S4D_OK)
        return s4d_op_error(ctx, st, "convolution library: %s", err.msg);
    return S4D_OK;
}

const s4d_kernel s4d_cpu_kernel_conv = {
    .domain = "", .op_type = "Conv", .since_version = 1,
    .workspace_size = conv_workspace, .prepare = conv_prepare, .save = conv_save,
    .destroy = conv_destroy, .run = conv_run, .describe = conv_describe,
};

const s4d_kernel s4d_cpu_kernel_fused_conv_act = {
    .domain = "s4d", .op_type = "FusedConvAct", .since_version = 1,
    .workspace_size = conv_workspace, .prepare = conv_prepare, .save = conv_save,
    .destroy = conv_destroy, .run = conv_run, .describe = conv_describe,
};

const s4d_kernel s4d_cpu_kernel_fused_conv = {
    .domain = "s4d", .op_type = "FusedConv", .since_version = 1,
    .workspace_size = conv_workspace, .prepare = conv_prepare, .save = conv_save,
    .destroy = conv_destroy, .run = conv_run, .describe = conv_describe,
};
