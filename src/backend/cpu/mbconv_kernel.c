/*
 * s4d::FusedMBConv on the CPU through the convolution library's inverted
 * residual block (conv/mbconv.h): on AVX-512 one pass over the image that
 * keeps the expanded rows in cache, elsewhere the three library
 * convolutions; both give the bits of the unfused layers.
 *
 * As for the convolutions (conv_kernel.c), prepare() makes one plan per
 * power-of-two width up to the machine's cores and packs the constant
 * weights once for all of them; run() takes the plan of the widest width
 * that fits the context's pool. The payload holds only a magic and a
 * version: the library chooses between the fused pass and the three layers
 * from the CPU it loads on, and either gives the same results.
 *
 * Weights that are not constants, or shapes past the library's limits, run
 * the schema's host reference: prepare leaves no state.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/conv/mbconv.h"
#include "backend/cpu/cpu_kernels.h"
#include "ops/extra.h"
#include "util/threadpool.h"

#define MBC_PAYLOAD_MAGIC 0x424d3453u /* "S4MB" */
#define MBC_PAYLOAD_VERSION 1u
#define MBC_MAX_PLANS 16

typedef struct mbc_state {
    int nplans;
    int width[MBC_MAX_PLANS]; /* ascending; width[0] == 1 */
    s4d_mbconv_plan *plan[MBC_MAX_PLANS];
    void *packed;
    size_t packed_bytes;
    size_t ws_bytes;          /* the largest plan's */
    double arith_us;          /* estimated single-thread time of the arithmetic */
} mbc_state;

static void mbc_state_free(mbc_state *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nplans; i++)
        s4d_mbconv_plan_destroy(s->plan[i]);
    s4d_aligned_free(s->packed);
    free(s);
}

static void mbc_destroy(void *state)
{
    mbc_state_free(state);
}

/* The library's form of one of the op's activations; 0 for a value outside s4d_conv_act. */
static int lib_act(int act, float alpha, float beta, s4d_mbconv_act *out)
{
    memset(out, 0, sizeof *out);
    int a;
    if (!s4d_cpu_lib_act(act, alpha, beta, &a, &out->act_min, &out->act_max, &out->act_alpha, &out->act_beta))
        return 0;
    out->act = (s4d_cpuconv_act)a;
    return 1;
}

/* The library's parameters for this layer; 0 when it is not a case for the library. */
static int mbc_lib_params(const s4d_op_ctx *ctx, s4d_mbconv_params *mp)
{
    const s4d_fused_mbconv_params *p = ctx->params;
    memset(mp, 0, sizeof *mp);
    if (!p)
        return 0;
    mp->struct_size = sizeof *mp;
    mp->n = p->n;
    mp->c = p->c;
    mp->h = p->h;
    mp->w = p->w;
    mp->has_expand = p->has_expand;
    mp->mid = p->mid;
    mp->m = p->m;
    mp->k = p->k;
    mp->stride = p->stride;
    mp->pad_top = p->pad_top;
    mp->pad_left = p->pad_left;
    mp->pad_bottom = p->pad_bottom;
    mp->pad_right = p->pad_right;
    mp->has_b1 = p->has_b1;
    mp->has_b2 = p->has_b2;
    mp->has_b3 = p->has_b3;
    mp->has_residual = p->has_z;
    mp->isa = S4D_CPUCONV_ISA_AUTO;
    return lib_act(p->act[0], p->alpha[0], p->beta[0], &mp->act1) &&
           lib_act(p->act[1], p->alpha[1], p->beta[1], &mp->act2) &&
           lib_act(p->act[2], p->alpha[2], p->beta[2], &mp->act3);
}

/* Plans for widths 1, 2, 4, ... and the core count. */
static s4d_status mbc_make_plans(mbc_state *s, s4d_mbconv_params mp, s4d_errbuf *err)
{
    int widths[MBC_MAX_PLANS];
    const int n = s4d_cpu_plan_widths(widths, MBC_MAX_PLANS);
    for (int i = 0; i < n; i++) {
        const int width = widths[i];
        mp.num_threads = width;
        s4d_status st = s4d_mbconv_plan_create(&mp, &s->plan[s->nplans], err);
        if (st != S4D_OK)
            return st;
        s4d_mbconv_info info;
        s4d_mbconv_plan_info(s->plan[s->nplans], &info);
        s->width[s->nplans++] = width;
        if (info.workspace_bytes > s->ws_bytes)
            s->ws_bytes = info.workspace_bytes;
        if (s->nplans == 1) {
            s->packed_bytes = info.packed_bytes;
            /* Multiply-adds per us on one thread, as the GEMM convolutions (conv_kernel.c). */
            s->arith_us = info.macs / 60000.0;
        } else if (info.packed_bytes != s->packed_bytes) {
            /* One packing serves every width. */
            snprintf(err->msg, sizeof err->msg, "the plan for %d threads packs %zu bytes, for 1 %zu",
                     width, info.packed_bytes, s->packed_bytes);
            return S4D_ERR_INTERNAL;
        }
    }
    return S4D_OK;
}

/* The payload is bytes from a file: exactly a magic and a version. */
static s4d_status mbc_read_payload(s4d_op_ctx *ctx, const void *payload, size_t size)
{
    s4d_rbuf r = {payload, size, 0, 0, NULL};
    uint32_t magic = 0, version = 0;
    s4d_rbuf_u32(&r, &magic, "magic");
    s4d_rbuf_u32(&r, &version, "version");
    if (r.failed || r.pos != size)
        return s4d_op_error(ctx, S4D_ERR_PARSE,
                            "inverted residual block payload of %zu bytes, expected 8 (magic, version)",
                            size);
    if (magic != MBC_PAYLOAD_MAGIC || version != MBC_PAYLOAD_VERSION)
        return s4d_op_error(ctx, S4D_ERR_PARSE,
                            "inverted residual block payload has magic 0x%08x version %u, expected "
                            "0x%08x version %u",
                            magic, version, MBC_PAYLOAD_MAGIC, MBC_PAYLOAD_VERSION);
    return S4D_OK;
}

static s4d_status mbc_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    *state = NULL;
    const s4d_fused_mbconv_params *p = ctx->params;
    s4d_mbconv_params mp;
    const s4d_tensor *in = ctx->inputs;
    int eligible = mbc_lib_params(ctx, &mp) && ctx->num_inputs > S4D_MBCONV_W3 &&
                   (!p->has_expand || in[S4D_MBCONV_W1].data) && in[S4D_MBCONV_W2].data &&
                   in[S4D_MBCONV_W3].data;
    if (payload && size) {
        s4d_status st = mbc_read_payload(ctx, payload, size);
        if (st != S4D_OK)
            return st;
        if (!eligible)
            return s4d_op_error(ctx, S4D_ERR_PARSE,
                                "the engine file has an inverted residual block plan for a layer "
                                "the library does not run");
    } else if (payload || size || !eligible) {
        /* Built for the host reference, or not a case for the library. */
        return S4D_OK;
    }
    mbc_state *s = calloc(1, sizeof *s);
    if (!s)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_errbuf err;
    err.msg[0] = 0;
    s4d_status st = mbc_make_plans(s, mp, &err);
    if (st != S4D_OK) {
        mbc_state_free(s);
        if (payload)
            return s4d_op_error(ctx, S4D_ERR_PARSE,
                                "the stored inverted residual block does not plan for this layer: %s",
                                err.msg[0] ? err.msg : s4d_status_string(st));
        /* Past the library's limits: the host reference runs it. */
        return S4D_OK;
    }
    s->packed = s4d_aligned_alloc(s->packed_bytes);
    if (!s->packed) {
        size_t bytes = s->packed_bytes;
        mbc_state_free(s);
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory packing %zu bytes of weights", bytes);
    }
    st = s4d_mbconv_pack_weights(s->plan[0], p->has_expand ? in[S4D_MBCONV_W1].data : NULL,
                                 in[S4D_MBCONV_W2].data, in[S4D_MBCONV_W3].data, s->packed,
                                 s->packed_bytes, &err);
    if (st != S4D_OK) {
        mbc_state_free(s);
        return s4d_op_error(ctx, st, "packing the weights: %s", err.msg);
    }
    *state = s;
    return S4D_OK;
}

static s4d_status mbc_save(const void *state, s4d_wbuf *w)
{
    (void)state;
    s4d_wbuf_u32(w, MBC_PAYLOAD_MAGIC);
    s4d_wbuf_u32(w, MBC_PAYLOAD_VERSION);
    return S4D_OK;
}

static size_t mbc_workspace(const s4d_op_ctx *ctx)
{
    const mbc_state *s = ctx->state;
    if (s)
        return s->ws_bytes;
    return ctx->schema->workspace_size ? ctx->schema->workspace_size(ctx) : 0;
}

/* The widest plan's: the one a context with every core runs. */
static int mbc_describe(const void *state, char *buf, size_t size)
{
    const mbc_state *s = state;
    return s && s->nplans ? s4d_mbconv_plan_describe(s->plan[s->nplans - 1], buf, size) : 0;
}

static s4d_status mbc_run(s4d_op_ctx *ctx)
{
    const mbc_state *s = ctx->state;
    if (!s)
        return ctx->schema->run(ctx);
    const s4d_fused_mbconv_params *p = ctx->params;
    const s4d_tensor *in = ctx->inputs;
    s4d_cpu_split_decide(ctx, s->arith_us + s4d_cpu_io_us(ctx));
    const int k = s4d_cpu_pick_width(s->width, s->nplans, ctx->pool);
    const float *x = in[S4D_MBCONV_X].data;
    const float *z = p->has_z ? in[S4D_MBCONV_Z].data : NULL;
    float *y = ctx->outputs[0].data;
    size_t ybytes = sizeof(float) * (size_t)s4d_tensor_numel(&ctx->outputs[0]);
    if (s4d_cpu_overlaps(y, ybytes, x, sizeof(float) * (size_t)s4d_tensor_numel(&in[S4D_MBCONV_X])) ||
        (z && s4d_cpu_overlaps(y, ybytes, z, ybytes)))
        return s4d_op_error(ctx, S4D_ERR_INTERNAL,
                            "the output shares memory with an input; the block needs them apart");
    s4d_errbuf err;
    err.msg[0] = 0;
    s4d_status st = s4d_mbconv_run(s->plan[k], s->packed, x, p->has_b1 ? in[S4D_MBCONV_B1].data : NULL,
                                   p->has_b2 ? in[S4D_MBCONV_B2].data : NULL,
                                   p->has_b3 ? in[S4D_MBCONV_B3].data : NULL, z, y, ctx->workspace,
                                   ctx->workspace_size, s4d_cpu_lib_parallel_for, ctx->pool, &err);
    if (st != S4D_OK)
        return s4d_op_error(ctx, st, "inverted residual block: %s", err.msg);
    return S4D_OK;
}

const s4d_kernel s4d_cpu_kernel_fused_mbconv = {
    .domain = "s4d", .op_type = "FusedMBConv", .since_version = 1,
    .workspace_size = mbc_workspace, .prepare = mbc_prepare, .save = mbc_save,
    .destroy = mbc_destroy, .run = mbc_run, .describe = mbc_describe,
};
