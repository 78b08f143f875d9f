/*
 * Conv, s4d::FusedConv and ConvTranspose on CUDA through cuDNN (legacy
 * convolution API, NCHW, float32 or float16).
 *
 * float16: tensors, filters, bias and residual are CUDNN_DATA_HALF; the
 * convolution's compute type stays CUDNN_DATA_FLOAT (cuDNN's pseudo-half
 * configuration: products accumulate in float32, the output rounds once), and
 * tensor-core math (CUDNN_TENSOR_OP_MATH) is allowed, as it loses nothing
 * the float16 storage has not lost already. The own epilogue kernel reads
 * float16, adds in float and rounds once.
 *
 * Channels-last (FusedConv layout "NHWC", which the channels-last pass sets
 * for TF32 and float16 builds, src/passes/layout_nhwc.c): X, Y, Z are NHWC
 * tensor descriptors and W a KRSC filter ([M, kh, kw, C/g], as the pass
 * stores it); the own epilogue then indexes the bias along the row. cuDNN's
 * tensor-core kernels are NHWC, so this saves them converting in and out.
 * Asymmetric padding is refused in NHWC (the pre-padding copy is NCHW).
 *
 * Build time (prepare): descriptors, then the algorithm. cuDNN's
 * cudnnFind*AlgorithmEx times every algorithm on scratch buffers; only
 * deterministic ones are kept, and in strict float32 (the default: no --tf32)
 * the convolution runs with CUDNN_FMA_MATH, so no TF32 tensor cores. The best
 * few algorithms are then timed as the engine runs them, captured into a CUDA
 * graph (s4d_dense_time: the legacy API's host cost per call exceeds many
 * of its kernels, so timing calls one by one picked algorithms by that cost
 * and varied from build to build), and a layer with an epilogue (bias,
 * residual Z, ReLU) times two ways of applying it:
 * cudnnConvolutionBiasActivationForward (one
 * cuDNN call; with the identity activation cuDNN only takes the
 * IMPLICIT_PRECOMP_GEMM algorithm) and the plain convolution followed by an
 * own epilogue kernel; the faster wins. --dumpLayerInfo shows each layer's
 * choice and its time (conv_describe). Choices are cached per shape, so the
 * identical blocks of a ResNet are timed once. The choice (mode, algorithm,
 * math type) is the layer's payload in the engine file; loading validates it
 * (the bytes are untrusted) and re-uses it without timing.
 *
 * Two more candidates are timed against cuDNN's best where they fit: a 1x1
 * float32 convolution as one strided batch of cuBLASLt products (CONV_GEMM),
 * and a 3x3 stride-1 one in strict float32 as Winograd F(4x4, 3x3)
 * (CONV_WINO): the filter transformed once at prepare (U, in double, kept on
 * the device with the layer's state), then per run the input transform,
 * 36 cuBLASLt products M = U V and the output transform with the epilogue
 * (kernels/winograd.cu). V and M live in the layer's workspace. Their payload
 * is the convolution's fields followed by the products' cuBLASLt choice.
 *
 * Asymmetric padding: cuDNN pads both sides alike, so the input is first
 * copied into a workspace buffer with the extra padding on the larger side,
 * and cuDNN adds the common part.
 *
 * ConvTranspose is the adjoint of a convolution from Y to X:
 * cudnnConvolutionBackwardData with X as dy and Y as dx. cuDNN derives the
 * output padding from the shapes; padding that is not symmetric up to that
 * output padding is refused.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels/dense.h"
#include "backend/cuda/ops/dense_ops.h"
#include "ops/dense.h"

/*
 * The workspace a layer may ask cuDNN for; all layers of a context share the
 * biggest. Strict float32 Winograd (WINOGRAD_NONFUSED) takes 207 MB on the
 * FPN's 3x3 layer over 6 x 32 x 88 maps of Sparse4Dv3, so the same layer on
 * the 64 x 176 maps needs more than the 256 MB this cap once was, and ran an
 * implicit GEMM at 2.6 ms instead. Up to 1 GiB is allowed now, but never
 * more than an eighth of the device memory free at build.
 */
#define CONV_WS_CAP_MAX ((size_t)1 << 30)
#define CONV_WS_CAP_MIN ((size_t)64 << 20)
/* Scratch the build may allocate to time one layer; above it, cuDNN's heuristics choose. */
#define CONV_SCRATCH_CAP ((size_t)2 << 30)
/* Algorithms timed with each epilogue variant. */
#define CONV_TIME_TOP 6
#define CONV_TIME_REPS 5

#define CONV_MAGIC 0x56434453u /* "SDCV" */

/* CONV_GEMM: a 1x1 convolution as cuBLASLt products (conv_gemm_fits), the bias and residual
   written into Y first; CONV_WINO: a 3x3 one as Winograd F(4x4, 3x3) (wino_fits), its 36
   products on cuBLASLt. Both keep cuDNN's best algorithm beside them (validated, unused). */
enum { CONV_PLAIN = 1, CONV_FUSED = 2, CONV_BWD_DATA = 3, CONV_GEMM = 4, CONV_WINO = 5 };
/* Bytes of the payload before a CONV_GEMM or CONV_WINO choice's product (magic .. reserved). */
#define CONV_PAYLOAD_HEAD 24
/* How a layer's choice was made, for --dumpLayerInfo. */
enum { CONV_HOW_PAYLOAD = 0, CONV_HOW_TIMED = 1, CONV_HOW_HEURISTIC = 2 };

typedef struct conv_choice {
    int32_t mode; /* CONV_* */
    int32_t algo; /* cudnnConvolutionFwdAlgo_t or cudnnConvolutionBwdDataAlgo_t */
    int32_t math; /* cudnnMathType_t */
    int32_t reserved;
} conv_choice;

/* A choice as a layer and the process cache keep it (identical layers reuse it). */
typedef struct conv_cached {
    conv_choice ch;
    int32_t how; /* CONV_HOW_* */
    float ms;    /* CONV_HOW_TIMED: the chosen variant's time at build */
} conv_cached;

typedef struct conv_state {
    int transpose;
    int empty; /* no output element: nothing to run */
    cudnnTensorDescriptor_t x, y, bias;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t act;
    conv_cached pick; /* the choice, how the build came by it, and its time when timed */
    size_t algo_ws;
    /* Asymmetric padding: X copied into [n*c, padded] at off, in the workspace's first bytes. */
    int prepad;
    int64_t img[3], padded[3], off[3];
    size_t prepad_bytes;
    int has_bias, has_z, relu;
    int nhwc;        /* channels-last X, Y, Z and a KRSC filter (2-D only) */
    s4d_dtype dtype; /* of every tensor; the descriptors and the epilogue follow it */
    int64_t n, c, m, out_plane;
    void *zero_bias; /* device zeros [m]: the fused call needs a bias */
    int gemm_fits;   /* conv_gemm_fits: CONV_GEMM may run it */
    s4d_conv_gemm *gemm; /* CONV_GEMM: the products */
    int wino_fits;       /* wino_fits: CONV_WINO may run it */
    s4d_cuda_wino_geom wg;
    float *wino_u;         /* CONV_WINO: the transformed filter U [36][m][c], made at prepare */
    s4d_conv_gemm *wgemm; /* CONV_WINO: M = U V, 36 products */
} conv_state;

/* ---- descriptors ---- */

static int fits_int(int64_t v)
{
    return v >= 0 && v <= INT_MAX;
}

/* Packed NCHW dims and strides of [a, b, sp...] with nd - 2 spatial dims taken from the last slots of sp3. */
static int nchw_desc(cudnnTensorDescriptor_t d, cudnnDataType_t dt, int nd, int64_t a, int64_t b,
                     const int64_t *sp3)
{
    int dims[5], strides[5];
    dims[0] = (int)a;
    dims[1] = (int)b;
    for (int i = 2; i < nd; i++)
        dims[i] = (int)sp3[3 - (nd - 2) + (i - 2)];
    int64_t s = 1;
    for (int i = nd - 1; i >= 0; i--) {
        strides[i] = (int)s;
        s *= dims[i] > 0 ? dims[i] : 1;
    }
    return cudnnSetTensorNdDescriptor(d, dt, nd, dims, strides) == CUDNN_STATUS_SUCCESS;
}

/* numel of [a, b, sp3] fits cuDNN's int indexing. */
static int numel_fits(int64_t a, int64_t b, const int64_t *sp3)
{
    int64_t v = a;
    const int64_t f[4] = {b, sp3[0], sp3[1], sp3[2]};
    for (int i = 0; i < 4; i++) {
        if (!fits_int(f[i]) || (f[i] && v > INT_MAX / f[i]))
            return 0;
        v *= f[i];
    }
    return fits_int(v);
}

/* Frees the Winograd products and transformed filter (none: nothing). */
static void wino_release(conv_state *st)
{
    s4d_conv_gemm_free(st->wgemm);
    st->wgemm = NULL;
    if (st->wino_u)
        cudaFree(st->wino_u);
    st->wino_u = NULL;
}

static void conv_state_free(conv_state *st)
{
    if (!st)
        return;
    if (st->x)
        cudnnDestroyTensorDescriptor(st->x);
    if (st->y)
        cudnnDestroyTensorDescriptor(st->y);
    if (st->bias)
        cudnnDestroyTensorDescriptor(st->bias);
    if (st->w)
        cudnnDestroyFilterDescriptor(st->w);
    if (st->conv)
        cudnnDestroyConvolutionDescriptor(st->conv);
    if (st->act)
        cudnnDestroyActivationDescriptor(st->act);
    if (st->zero_bias)
        cudaFree(st->zero_bias);
    s4d_conv_gemm_free(st->gemm);
    wino_release(st);
    free(st);
}

static void conv_destroy(void *state)
{
    conv_state_free(state);
}

/*
 * The descriptors of a forward convolution over X (padded when prepad) or, for
 * ConvTranspose, of the forward convolution from Y to X whose data gradient
 * it is. g: geometry; xc / yc: channels of the convolution's input and
 * output; wk / wc: filter output channels and input channels per group.
 */
static s4d_status make_descs(s4d_op_ctx *ctx, conv_state *st, const s4d_conv_geom *g, int64_t group,
                             int64_t in_ch, const int64_t *in_sp, int64_t out_ch, const int64_t *out_sp,
                             int64_t wk, int64_t wc, const int64_t *pad)
{
    const int nd = g->nsp == 3 ? 5 : 4;
    const int ns = nd - 2;
    if (cudnnCreateTensorDescriptor(&st->x) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateTensorDescriptor(&st->y) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateTensorDescriptor(&st->bias) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateFilterDescriptor(&st->w) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateConvolutionDescriptor(&st->conv) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateActivationDescriptor(&st->act) != CUDNN_STATUS_SUCCESS)
        return s4d_op_error(ctx, S4D_ERR_CUDA, "cannot create cuDNN descriptors");
    const int64_t one3[3] = {1, 1, 1};
    int wd[5], pads[3], strides[3], dils[3];
    wd[0] = (int)wk;
    wd[1] = (int)wc;
    for (int i = 0; i < ns; i++) {
        int j = 3 - ns + i;
        wd[2 + i] = (int)g->k[j];
        pads[i] = (int)pad[j];
        strides[i] = (int)g->stride[j];
        dils[i] = (int)g->dil[j];
    }
    /* The convolution itself (conv(x) of the fused call) runs through the conv descriptor's math type. */
    /* Data in the layer's dtype; products accumulate in float (the compute type) for every dtype. */
    const cudnnDataType_t dt = (cudnnDataType_t)s4d_cudnn_data_type(st->dtype);
    int io_ok;
    if (st->nhwc) /* 2-D: the spatial sizes in slots 1 and 2 */
        io_ok = cudnnSetTensor4dDescriptor(st->x, CUDNN_TENSOR_NHWC, dt, (int)st->n, (int)in_ch, (int)in_sp[1],
                                           (int)in_sp[2]) == CUDNN_STATUS_SUCCESS &&
                cudnnSetTensor4dDescriptor(st->y, CUDNN_TENSOR_NHWC, dt, (int)st->n, (int)out_ch, (int)out_sp[1],
                                           (int)out_sp[2]) == CUDNN_STATUS_SUCCESS &&
                cudnnSetFilter4dDescriptor(st->w, dt, CUDNN_TENSOR_NHWC, wd[0], wd[1], wd[2], wd[3]) ==
                    CUDNN_STATUS_SUCCESS;
    else
        io_ok = nchw_desc(st->x, dt, nd, st->n, in_ch, in_sp) && nchw_desc(st->y, dt, nd, st->n, out_ch, out_sp) &&
                cudnnSetFilterNdDescriptor(st->w, dt, CUDNN_TENSOR_NCHW, nd, wd) == CUDNN_STATUS_SUCCESS;
    if (!io_ok || !nchw_desc(st->bias, dt, nd, 1, out_ch, one3) ||
        cudnnSetConvolutionNdDescriptor(st->conv, ns, pads, strides, dils, CUDNN_CROSS_CORRELATION,
                                        CUDNN_DATA_FLOAT) != CUDNN_STATUS_SUCCESS ||
        cudnnSetConvolutionGroupCount(st->conv, (int)group) != CUDNN_STATUS_SUCCESS ||
        cudnnSetActivationDescriptor(st->act, st->relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                     CUDNN_PROPAGATE_NAN, 0.0) != CUDNN_STATUS_SUCCESS)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "cuDNN does not take this convolution's shape");
    /* cuDNN's idea of the forward output must be ours (for ConvTranspose: X from Y). */
    int od[5];
    cudnnTensorDescriptor_t from = st->transpose ? st->y : st->x;
    if (cudnnGetConvolutionNdForwardOutputDim(st->conv, from, st->w, nd, od) != CUDNN_STATUS_SUCCESS)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "cuDNN does not take this convolution's shape");
    const int64_t want_c = st->transpose ? in_ch : out_ch;
    const int64_t *want_sp = st->transpose ? in_sp : out_sp;
    int same = od[0] == (int)st->n && od[1] == (int)want_c;
    for (int i = 0; same && i < ns; i++)
        same = od[2 + i] == (int)want_sp[3 - ns + i];
    if (!same)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "cuDNN computes another output shape for this convolution");
    return S4D_OK;
}

/* ---- running ---- */

typedef struct conv_args {
    s4d_op_ctx *ctx;
    cudnnHandle_t h;
    cudaStream_t s;
    const conv_state *st;
    conv_choice ch;
    const void *x, *w, *b, *z;
    void *y, *ws;
    size_t ws_size;
} conv_args;

/* The own epilogue on Y [n * m planes of out_plane], in the layer's dtype. */
static cudaError_t conv_epilogue(const conv_state *st, void *y, const void *b, const void *z, int relu,
                                 cudaStream_t s)
{
    if (st->nhwc)
        return st->dtype == S4D_DTYPE_FLOAT16
                   ? s4d_cuda_conv_epilogue_nhwc_f16(y, b, z, relu, st->n * st->out_plane, st->m, s)
                   : s4d_cuda_conv_epilogue_nhwc_f32(y, b, z, relu, st->n * st->out_plane, st->m, s);
    if (st->dtype == S4D_DTYPE_FLOAT16)
        return s4d_cuda_conv_epilogue_f16(y, b, z, relu, st->n * st->m, st->out_plane, st->m, s);
    return s4d_cuda_conv_epilogue_f32(y, b, z, relu, st->n * st->m, st->out_plane, st->m, s);
}

/* Winograd tiles of the layer: 4 x 4 outputs each, over every image. */
static int64_t wino_tiles(const conv_state *st)
{
    return st->wg.n * st->wg.th * st->wg.tw;
}

/* Bytes of V [36][c][tiles] (rows = c) or M [36][m][tiles] (rows = m), 256-aligned; V then M open the workspace. */
static size_t wino_bytes(const conv_state *st, int64_t rows)
{
    return s4d_dense_align256(sizeof(float) * 36u * (size_t)(rows * wino_tiles(st)));
}

/* CONV_WINO: V from X, M = U V (the products, their workspace after V and M), Y from M with the epilogue. */
static s4d_status wino_launch(const conv_args *a)
{
    const conv_state *st = a->st;
    const size_t vb = wino_bytes(st, st->c), mb = wino_bytes(st, st->m);
    if (!st->wgemm || !st->wino_u || a->ws_size < vb + mb)
        return s4d_op_error(a->ctx, S4D_ERR_INTERNAL, "the Winograd convolution was not prepared");
    float *v = a->ws, *m = (float *)((char *)a->ws + vb);
    s4d_status s = s4d_cuda_check(a->ctx, s4d_cuda_wino_input_f32(a->x, v, &st->wg, a->s),
                                  "the Winograd input transform");
    if (s == S4D_OK)
        s = s4d_conv_gemm_run(a->ctx, st->wgemm, v, st->wino_u, m, (char *)a->ws + vb + mb, a->ws_size - vb - mb,
                              a->s); /* (B, A): M[xi] = U[xi] V[xi] */
    if (s == S4D_OK)
        s = s4d_cuda_check(a->ctx,
                           s4d_cuda_wino_output_f32(m, a->y, st->has_bias ? a->b : NULL, st->has_z ? a->z : NULL,
                                                    st->relu, &st->wg, a->s),
                           "the Winograd output transform");
    return s;
}

static s4d_status conv_launch(void *arg)
{
    const conv_args *a = arg;
    const conv_state *st = a->st;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t cs;
    if (st->transpose) {
        cs = cudnnConvolutionBackwardData(a->h, &one, st->w, a->w, st->x, a->x, st->conv,
                                          (cudnnConvolutionBwdDataAlgo_t)a->ch.algo, a->ws, a->ws_size, &zero,
                                          st->y, a->y);
        if (cs != CUDNN_STATUS_SUCCESS)
            return s4d_cudnn_check(a->ctx, cs, "cudnnConvolutionBackwardData");
        if (st->has_bias)
            return s4d_cuda_check(a->ctx, conv_epilogue(st, a->y, a->b, NULL, 0, a->s),
                                  "the ConvTranspose bias kernel");
        return S4D_OK;
    }
    if (a->ch.mode == CONV_GEMM) {
        if (st->has_bias || st->has_z) {
            cudaError_t e = s4d_cuda_conv_prefill_f32(a->y, st->has_bias ? a->b : NULL, st->has_z ? a->z : NULL,
                                                      st->n * st->m, st->out_plane, st->m, a->s);
            if (e != cudaSuccess)
                return s4d_cuda_check(a->ctx, e, "the convolution's addend kernel");
        }
        return s4d_conv_gemm_run(a->ctx, st->gemm, a->x, a->w, a->y, a->ws, a->ws_size, a->s);
    }
    if (a->ch.mode == CONV_WINO)
        return wino_launch(a);
    if (a->ch.mode == CONV_FUSED) {
        const float alpha2 = st->has_z ? 1.0f : 0.0f;
        cs = cudnnConvolutionBiasActivationForward(
            a->h, &one, st->x, a->x, st->w, a->w, st->conv, (cudnnConvolutionFwdAlgo_t)a->ch.algo, a->ws,
            a->ws_size, &alpha2, st->y, st->has_z ? a->z : a->y, st->bias, st->has_bias ? a->b : st->zero_bias,
            st->act, st->y, a->y);
        return s4d_cudnn_check(a->ctx, cs, "cudnnConvolutionBiasActivationForward");
    }
    cs = cudnnConvolutionForward(a->h, &one, st->x, a->x, st->w, a->w, st->conv,
                                 (cudnnConvolutionFwdAlgo_t)a->ch.algo, a->ws, a->ws_size, &zero, st->y, a->y);
    if (cs != CUDNN_STATUS_SUCCESS)
        return s4d_cudnn_check(a->ctx, cs, "cudnnConvolutionForward");
    if (st->has_bias || st->has_z || st->relu)
        return s4d_cuda_check(a->ctx,
                              conv_epilogue(st, a->y, st->has_bias ? a->b : NULL, st->has_z ? a->z : NULL, st->relu,
                                            a->s),
                              "the convolution epilogue kernel");
    return S4D_OK;
}

static s4d_status conv_run(s4d_op_ctx *ctx)
{
    const conv_state *st = ctx->state;
    if (!st)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the convolution was not prepared");
    if (st->empty)
        return S4D_OK;
    size_t pre = s4d_dense_align256(st->prepad_bytes);
    if (ctx->workspace_size < pre + st->algo_ws)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is below the %zu the convolution needs",
                            ctx->workspace_size, pre + st->algo_ws);
    conv_args a;
    memset(&a, 0, sizeof a);
    a.ctx = ctx;
    a.h = s4d_cuda_ctx(ctx)->cudnn;
    a.s = s4d_cuda_stream(ctx);
    a.st = st;
    a.ch = st->pick.ch;
    a.x = ctx->inputs[0].data;
    a.w = ctx->inputs[1].data;
    a.b = st->has_bias ? ctx->inputs[2].data : NULL;
    a.z = st->has_z ? ctx->inputs[3].data : NULL;
    a.y = ctx->outputs[0].data;
    a.ws = (char *)ctx->workspace + pre;
    a.ws_size = st->algo_ws;
    /* The enqueue may name another stream than the one the handle was made with. */
    s4d_status s = s4d_cudnn_check(ctx, cudnnSetStream(a.h, a.s), "cudnnSetStream");
    if (s != S4D_OK)
        return s;
    if (st->prepad) {
        const cudaError_t e =
            st->dtype == S4D_DTYPE_FLOAT16
                ? s4d_cuda_pad3_16(a.x, ctx->workspace, st->n * st->c, st->img, st->padded, st->off, a.s)
                : s4d_cuda_pad3_f32(a.x, ctx->workspace, st->n * st->c, st->img, st->padded, st->off, a.s);
        s = s4d_cuda_check(ctx, e, "the convolution padding kernel");
        if (s != S4D_OK)
            return s;
        a.x = ctx->workspace;
    }
    return conv_launch(&a);
}

static size_t conv_ws(const s4d_op_ctx *ctx)
{
    const conv_state *st = ctx->state;
    if (!st || st->empty)
        return 0;
    return s4d_dense_align256(st->prepad_bytes) + st->algo_ws;
}

/* ---- choosing ---- */

typedef struct conv_key {
    int32_t tag, device, tf32, transpose, has_bias, has_z, relu, nsp, dtype, nhwc;
    int32_t wino; /* CONV_WINO may run it (it needs constant weights, which the shapes do not say) */
    int32_t reserved;
    int64_t n, c, m, group, k[3], stride[3], dil[3], pad[3], in_sp[3], out_sp[3];
} conv_key;

static int algo_workspace(cudnnHandle_t h, const conv_state *st, int32_t algo, size_t *ws)
{
    cudnnStatus_t cs;
    if (st->transpose)
        cs = cudnnGetConvolutionBackwardDataWorkspaceSize(h, st->w, st->x, st->conv, st->y,
                                                          (cudnnConvolutionBwdDataAlgo_t)algo, ws);
    else
        cs = cudnnGetConvolutionForwardWorkspaceSize(h, st->x, st->w, st->conv, st->y,
                                                     (cudnnConvolutionFwdAlgo_t)algo, ws);
    return cs == CUDNN_STATUS_SUCCESS;
}

/*
 * Whether a math type may run under this engine's precision: strict float32
 * takes FMA alone; tensor cores (tc) are allowed with --tf32 and for float16
 * layers, whose inputs are no finer than the tensor cores' own.
 */
static int math_allowed(int32_t math, int tc)
{
    switch (math) {
    case CUDNN_FMA_MATH: return 1;
    case CUDNN_DEFAULT_MATH:
    case CUDNN_TENSOR_OP_MATH:
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return tc;
    default: return 0;
    }
}

/* A candidate algorithm as cuDNN reports it, whichever direction. */
typedef struct conv_cand {
    int32_t algo, math;
    float time;
    size_t memory;
} conv_cand;

/* Keeps the deterministic, successful, affordable candidates, in cuDNN's order (fastest first). */
static int keep_cand(conv_cand *out, int n, int32_t algo, cudnnStatus_t status, cudnnDeterminism_t det,
                     cudnnMathType_t math, float time, size_t memory, size_t cap, int tc)
{
    if (status != CUDNN_STATUS_SUCCESS || det != CUDNN_DETERMINISTIC || memory > cap)
        return n;
    /* Strict float32: an algorithm that reports tensor-core math is not taken; the rest run under FMA math. */
    if (!tc && math != CUDNN_FMA_MATH && math != CUDNN_DEFAULT_MATH)
        return n;
    out[n].algo = algo;
    out[n].math = tc ? (int32_t)math : (int32_t)CUDNN_FMA_MATH;
    out[n].time = time;
    out[n].memory = memory;
    return n + 1;
}

/*
 * cuDNN's candidates: timed (Find on scratch buffers) when bufs != NULL, else
 * its heuristics. tf32: tensor cores allowed (TF32 or float16).
 */
static int list_cands(cudnnHandle_t h, const conv_state *st, const conv_args *bufs, size_t cap, int tf32,
                      conv_cand *out)
{
    int got = 0, n = 0;
    if (st->transpose) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        cudnnStatus_t cs =
            bufs ? cudnnFindConvolutionBackwardDataAlgorithmEx(h, st->w, bufs->w, st->x, bufs->x, st->conv, st->y,
                                                                bufs->y, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got,
                                                                perf, bufs->ws, bufs->ws_size)
                 : cudnnGetConvolutionBackwardDataAlgorithm_v7(h, st->w, st->x, st->conv, st->y,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, perf);
        if (cs != CUDNN_STATUS_SUCCESS)
            return -1;
        for (int i = 0; i < got; i++)
            n = keep_cand(out, n, (int32_t)perf[i].algo, perf[i].status, perf[i].determinism, perf[i].mathType,
                          perf[i].time, perf[i].memory, cap, tf32);
    } else {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        cudnnStatus_t cs =
            bufs ? cudnnFindConvolutionForwardAlgorithmEx(h, st->x, bufs->x, st->w, bufs->w, st->conv, st->y, bufs->y,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf, bufs->ws,
                                                           bufs->ws_size)
                 : cudnnGetConvolutionForwardAlgorithm_v7(h, st->x, st->w, st->conv, st->y,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, perf);
        if (cs != CUDNN_STATUS_SUCCESS)
            return -1;
        for (int i = 0; i < got; i++)
            n = keep_cand(out, n, (int32_t)perf[i].algo, perf[i].status, perf[i].determinism, perf[i].mathType,
                          perf[i].time, perf[i].memory, cap, tf32);
    }
    return n;
}

static size_t tensor_bytes(s4d_dtype dt, int64_t a, int64_t b, const int64_t *sp3)
{
    return s4d_dtype_size(dt) * (size_t)(a * b * sp3[0] * sp3[1] * sp3[2]);
}

/*
 * Times the layer run as `mode` (CONV_GEMM, CONV_WINO) on t's scratch
 * buffers into *ms (-1: it could not run there, e.g. its workspace of ws_need
 * bytes is more than t has), then takes it when forced or faster than cuDNN's
 * cudnn_ms (-1: none of cuDNN's ran); *taken says which. what: the step, for a
 * sticky CUDA error.
 */
static s4d_status time_and_pick(s4d_op_ctx *ctx, conv_state *st, conv_args *t, int32_t mode, size_t ws_need,
                                int forced, double cudnn_ms, const char *what, int *taken)
{
    double ms = -1.0;
    if (t) {
        cudaStream_t stream = t->s;
        t->ch = st->pick.ch;
        t->ch.mode = mode;
        if (ws_need > t->ws_size || s4d_dense_time(stream, conv_launch, t, CONV_TIME_REPS, &ms) != S4D_OK)
            ms = -1.0;
        cudaError_t se = s4d_dense_sticky_error(stream);
        if (se != cudaSuccess)
            return s4d_cuda_check(ctx, se, what);
        if (ctx->err_size)
            ctx->err[0] = 0;
    }
    *taken = forced || (ms >= 0.0 && (cudnn_ms < 0.0 || ms < cudnn_ms));
    if (*taken) {
        st->pick.ch.mode = mode;
        st->pick.how = ms >= 0.0 ? CONV_HOW_TIMED : st->pick.how;
        st->pick.ms = ms >= 0.0 ? (float)ms : st->pick.ms;
    }
    return S4D_OK;
}

/*
 * A 1x1 convolution that CONV_GEMM can run: cuBLASLt's products against cuDNN.
 * t: the scratch buffers cuDNN was timed on (NULL: nothing could be timed);
 * cudnn_ms: cuDNN's best time there (conv_choose times cuDNN's candidates for
 * every such layer; -1: none of them ran, and timed products win).
 * S4D_CONV_CHOICE=gemm takes the products wherever they fit, =cudnn never
 * (tests).
 */
static s4d_status conv_gemm_choose(s4d_op_ctx *ctx, conv_state *st, conv_args *t, const void *w_const,
                                   double cudnn_ms)
{
    const char *force = getenv("S4D_CONV_CHOICE");
    if (force && strcmp(force, "cudnn") == 0)
        return S4D_OK;
    const int force_gemm = force && strcmp(force, "gemm") == 0;
    if (!t && !force_gemm)
        return S4D_OK; /* untimed: cuDNN's heuristic choice stands */
    s4d_conv_gemm *g = NULL;
    s4d_status s = s4d_conv_gemm_prepare(ctx, st->n, st->c, st->m, st->out_plane, st->has_bias || st->has_z,
                                         st->relu, w_const, NULL, 0, &g);
    if (s != S4D_OK) {
        if (force_gemm)
            return s;
        if (ctx->err_size)
            ctx->err[0] = 0; /* no product for it: cuDNN's choice stands */
        return S4D_OK;
    }
    st->gemm = g;
    int taken = 0;
    s = time_and_pick(ctx, st, t, CONV_GEMM, s4d_conv_gemm_workspace(g), force_gemm, cudnn_ms,
                      "timing the convolution's cuBLASLt products", &taken);
    if (s == S4D_OK && !taken) {
        s4d_conv_gemm_free(g);
        st->gemm = NULL;
    }
    return s;
}

/* Makes the transformed filter U from the constant W and the products (their stored choice, or chosen). */
static s4d_status wino_prepare(s4d_op_ctx *ctx, conv_state *st, const void *w_const, const void *payload,
                               size_t size)
{
    if (!w_const)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the Winograd convolution needs constant weights");
    cudaStream_t stream = s4d_cuda_ctx(ctx)->stream;
    const int64_t tiles = wino_tiles(st);
    if (!st->wino_u) {
        cudaError_t e = cudaMalloc((void **)&st->wino_u, sizeof(float) * 36u * (size_t)(st->m * st->c));
        if (e == cudaSuccess)
            e = s4d_cuda_wino_filter_f32(w_const, st->wino_u, st->m, st->c, stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
            if (st->wino_u)
                cudaFree(st->wino_u);
            st->wino_u = NULL;
            return s4d_cuda_check(ctx, e, "transforming the Winograd convolution's filter");
        }
    }
    if (st->wgemm)
        return S4D_OK;
    return s4d_conv_gemm_prepare_batch(ctx, 36, st->m, tiles, st->c, st->m * st->c, st->c * tiles, 0, 0,
                                       st->wino_u, payload, size, &st->wgemm);
}

static size_t wino_workspace(const conv_state *st)
{
    return wino_bytes(st, st->c) + wino_bytes(st, st->m) + s4d_conv_gemm_workspace(st->wgemm);
}

/*
 * Whether the build times the Winograd candidate: S4D_CONV_WINOGRAD=1 or =0,
 * else CONV_WINO_DEFAULT (on: the v3 float32 backbone, 8.62 -> 6.52 ms on an
 * H100, bench/results/h100-20261206-e/).
 */
#define CONV_WINO_DEFAULT 1
static int wino_timed(void)
{
    const char *v = getenv("S4D_CONV_WINOGRAD");
    if (v && (strcmp(v, "0") == 0 || strcmp(v, "1") == 0))
        return v[0] == '1';
    return CONV_WINO_DEFAULT;
}

/*
 * A 3x3 convolution that CONV_WINO can run, timed against cuDNN's best
 * (cudnn_ms, -1: none ran) as conv_gemm_choose does, when wino_timed().
 * S4D_CONV_CHOICE=winograd takes it wherever it fits, =cudnn and =gemm never.
 */
static s4d_status conv_wino_choose(s4d_op_ctx *ctx, conv_state *st, conv_args *t, const void *w_const,
                                   double cudnn_ms)
{
    const char *force = getenv("S4D_CONV_CHOICE");
    const int force_wino = force && strcmp(force, "winograd") == 0;
    if ((force && !force_wino) || (!force_wino && !wino_timed()))
        return S4D_OK;
    if (!t && !force_wino)
        return S4D_OK; /* untimed: cuDNN's heuristic choice stands */
    s4d_status s = wino_prepare(ctx, st, w_const, NULL, 0);
    if (s != S4D_OK) {
        wino_release(st);
        if (force_wino)
            return s;
        if (ctx->err_size)
            ctx->err[0] = 0; /* no Winograd for it: cuDNN's choice stands */
        return S4D_OK;
    }
    int taken = 0;
    s = time_and_pick(ctx, st, t, CONV_WINO, wino_workspace(st), force_wino, cudnn_ms,
                      "timing the Winograd convolution", &taken);
    if (s == S4D_OK && !taken)
        wino_release(st);
    return s;
}

/*
 * Chooses st->pick.ch: on scratch buffers when they fit (timed), else by cuDNN's
 * heuristics. x/w/b: the layer's constant inputs on the device, or NULL.
 */
static s4d_status conv_choose(s4d_op_ctx *ctx, conv_state *st, const int64_t *in_sp, const int64_t *out_sp,
                              const void *w_const, const void *b_const, size_t w_bytes)
{
    s4d_backend_ctx *bc = s4d_cuda_ctx(ctx);
    cudnnHandle_t h = bc->cudnn;
    cudaStream_t stream = bc->stream;
    const int half = st->dtype == S4D_DTYPE_FLOAT16;
    /* Below: "tf32" stands for "tensor cores allowed", which float16 layers always are. */
    const int tf32 = bc->allow_tf32 || half;
    cudnnSetStream(h, stream);
    /* Find and the heuristics see the math type the run will use. */
    cudnnSetConvolutionMathType(st->conv, half ? CUDNN_TENSOR_OP_MATH : tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);

    /* X (ConvTranspose: its input X too, the dy of the data gradient) and Y. */
    size_t in_bytes = tensor_bytes(st->dtype, st->n, st->c, in_sp);
    size_t out_bytes = tensor_bytes(st->dtype, st->n, st->m, out_sp);
    size_t free_b = s4d_dense_free_bytes();
    size_t cap = free_b / 8 < CONV_WS_CAP_MAX ? free_b / 8 : CONV_WS_CAP_MAX;
    if (cap < CONV_WS_CAP_MIN)
        cap = CONV_WS_CAP_MIN;
    size_t need = in_bytes + out_bytes + (w_const ? 0 : w_bytes) + cap;
    conv_cand cand[16];
    int nc = -1;
    s4d_dense_scratch sc;
    memset(&sc, 0, sizeof sc);
    conv_args a;
    memset(&a, 0, sizeof a);
    a.ctx = ctx;
    a.h = h;
    a.s = stream;
    a.st = st;
    if (need <= CONV_SCRATCH_CAP && need < free_b / 2) {
        a.x = s4d_dense_scratch_alloc(&sc, in_bytes, stream);
        a.y = s4d_dense_scratch_alloc(&sc, out_bytes, stream);
        a.w = w_const ? w_const : s4d_dense_scratch_alloc(&sc, w_bytes, stream);
        a.ws = s4d_dense_scratch_alloc(&sc, cap, stream);
        a.ws_size = cap;
        if (a.x && a.y && a.w && a.ws)
            nc = list_cands(h, st, &a, cap, tf32, cand);
    }
    int timed = nc >= 0;
    if (nc < 0)
        nc = list_cands(h, st, NULL, cap, tf32, cand);
    if (nc <= 0) {
        s4d_dense_scratch_free(&sc, stream);
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "cuDNN has no deterministic %s algorithm for this convolution%s",
                            half ? "float16" : tf32 ? "float32/TF32" : "strict float32 (FMA)",
                            nc < 0 ? " (it rejects the shape)" : "");
    }
    st->pick.ch.mode = st->transpose ? CONV_BWD_DATA : CONV_PLAIN;
    st->pick.ch.algo = cand[0].algo;
    st->pick.ch.math = cand[0].math;
    st->pick.how = timed ? CONV_HOW_TIMED : CONV_HOW_HEURISTIC;
    st->pick.ms = timed ? cand[0].time : 0.0f;
    /* cuDNN's Find ranks algorithms by their own kernels; timing them as the engine runs them (with the
       epilogue, in a graph) decides between its best few, and between the two ways of an epilogue. */
    const int epilogue = !st->transpose && (st->has_bias || st->has_z || st->relu);
    void *bias = NULL;
    if (timed && st->has_bias)
        bias = b_const ? (void *)b_const
                       : s4d_dense_scratch_alloc(&sc, s4d_dtype_size(st->dtype) * (size_t)st->m, stream);
    a.b = bias;
    a.z = st->has_z ? a.y : NULL; /* cuDNN allows z to alias y; the timing is the same */
    double best = -1.0;
    if (timed && (nc > 1 || epilogue || st->gemm_fits || st->wino_fits)) {
        for (int i = 0; i < nc && i < CONV_TIME_TOP; i++) {
            const int first = st->transpose ? CONV_BWD_DATA : CONV_PLAIN;
            const int last = st->transpose ? CONV_BWD_DATA : epilogue ? CONV_FUSED : CONV_PLAIN;
            for (int mode = first; mode <= last; mode++) {
                if (mode == CONV_FUSED && !st->relu && cand[i].algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
                    continue;
                if (st->has_bias && !bias)
                    continue;
                a.ch.mode = mode;
                a.ch.algo = cand[i].algo;
                a.ch.math = cand[i].math;
                if (cudnnSetConvolutionMathType(st->conv, (cudnnMathType_t)cand[i].math) != CUDNN_STATUS_SUCCESS)
                    continue;
                double ms = 0.0;
                if (s4d_dense_time(stream, conv_launch, &a, CONV_TIME_REPS, &ms) != S4D_OK) {
                    cudaError_t se = s4d_dense_sticky_error(stream);
                    if (se == cudaSuccess)
                        continue; /* e.g. the fused call does not take this algorithm */
                    s4d_dense_scratch_free(&sc, stream);
                    char what[96];
                    snprintf(what, sizeof what, "timing cuDNN convolution algorithm %d (mode %d)",
                             (int)cand[i].algo, mode);
                    return s4d_cuda_check(ctx, se, what);
                }
                if (best < 0.0 || ms < best) {
                    best = ms;
                    st->pick.ch = a.ch;
                    st->pick.ms = (float)ms;
                }
            }
        }
        if (ctx->err_size)
            ctx->err[0] = 0; /* a skipped candidate is no error of the layer */
    }
    s4d_status s = S4D_OK;
    /* A layer fits one of the two at most (1x1 or 3x3), so cuDNN's best is what each is timed against. */
    if (st->gemm_fits)
        s = conv_gemm_choose(ctx, st, timed && (!st->has_bias || bias) ? &a : NULL, w_const, best);
    if (s == S4D_OK && st->wino_fits)
        s = conv_wino_choose(ctx, st, timed && (!st->has_bias || bias) ? &a : NULL, w_const, best);
    s4d_dense_scratch_free(&sc, stream);
    return s;
}

/* Validates a stored choice and applies it; S4D_ERR_PARSE when the payload is not one this layer can take. */
static s4d_status conv_apply_payload(s4d_op_ctx *ctx, conv_state *st, const void *payload, size_t size)
{
    s4d_rbuf r = {payload, size, 0, 0, NULL};
    uint32_t magic = 0, version = 0, mode = 0, algo = 0, math = 0, reserved = 0;
    s4d_rbuf_u32(&r, &magic, "magic");
    s4d_rbuf_u32(&r, &version, "version");
    s4d_rbuf_u32(&r, &mode, "mode");
    s4d_rbuf_u32(&r, &algo, "algorithm");
    s4d_rbuf_u32(&r, &math, "math type");
    s4d_rbuf_u32(&r, &reserved, "reserved");
    const int half = st->dtype == S4D_DTYPE_FLOAT16;
    const int tf32 = s4d_cuda_ctx(ctx)->allow_tf32 || half; /* tensor cores allowed */
    const char *why = NULL;
    /* CONV_GEMM, CONV_WINO: the product's choice follows (parsed and validated by lt_prepare). */
    const int gemm = !r.failed && (mode == CONV_GEMM || mode == CONV_WINO);
    if (r.failed || (gemm ? r.pos >= size : r.pos != size))
        why = "it is not the size of a convolution choice";
    else if (magic != CONV_MAGIC || version != S4D_DENSE_PAYLOAD_VERSION)
        why = "it is not a convolution choice of this version";
    else if (st->transpose ? mode != CONV_BWD_DATA
                           : (mode != CONV_PLAIN && mode != CONV_FUSED && mode != CONV_GEMM && mode != CONV_WINO))
        why = "its mode is unknown";
    else if (mode == CONV_GEMM && !st->gemm_fits)
        why = "it runs a 1x1 convolution as products, which this layer is not";
    else if (mode == CONV_WINO && !st->wino_fits)
        why = "it runs Winograd F(4x4, 3x3), which takes a 3x3 float32 NCHW convolution with stride 1, one "
              "group, constant weights and strict float32 (no --tf32)";
    else if (algo >= (uint32_t)(st->transpose ? CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT : CUDNN_CONVOLUTION_FWD_ALGO_COUNT))
        why = "its algorithm is out of range";
    else if (st->transpose && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0)
        why = "its algorithm is not deterministic";
    else if (math > (uint32_t)CUDNN_FMA_MATH || !math_allowed((int32_t)math, tf32))
        why = tf32 ? "its math type is unknown" : "its math type is not strict float32";
    else if (mode == CONV_FUSED && !st->relu && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
        why = "cuDNN fuses the identity activation only with IMPLICIT_PRECOMP_GEMM";
    if (why)
        return s4d_op_error(ctx, S4D_ERR_PARSE, "the stored convolution algorithm is invalid: %s", why);
    st->pick.ch.mode = (int32_t)mode;
    st->pick.ch.algo = (int32_t)algo;
    st->pick.ch.math = (int32_t)math;
    return S4D_OK;
}

static s4d_status conv_save(const void *state, s4d_wbuf *w)
{
    const conv_state *st = state;
    if (st->empty)
        return S4D_OK;
    s4d_wbuf_u32(w, CONV_MAGIC);
    s4d_wbuf_u32(w, S4D_DENSE_PAYLOAD_VERSION);
    s4d_wbuf_u32(w, (uint32_t)st->pick.ch.mode);
    s4d_wbuf_u32(w, (uint32_t)st->pick.ch.algo);
    s4d_wbuf_u32(w, (uint32_t)st->pick.ch.math);
    s4d_wbuf_u32(w, 0);
    if (st->pick.ch.mode == CONV_GEMM)
        return s4d_conv_gemm_save(st->gemm, w);
    return st->pick.ch.mode == CONV_WINO ? s4d_conv_gemm_save(st->wgemm, w) : S4D_OK;
}

/* Cache key of a layer's choice. */
static void conv_key_make(conv_key *k, const conv_state *st, const s4d_conv_geom *g, int64_t group,
                          const int64_t *pad, const int64_t *in_sp, const int64_t *out_sp, int tf32)
{
    memset(k, 0, sizeof *k);
    k->tag = (int32_t)CONV_MAGIC;
    cudaGetDevice(&k->device);
    k->tf32 = tf32;
    k->transpose = st->transpose;
    k->has_bias = st->has_bias;
    k->has_z = st->has_z;
    k->relu = st->relu;
    k->nhwc = st->nhwc;
    k->wino = st->wino_fits;
    k->nsp = g->nsp;
    k->dtype = (int32_t)st->dtype;
    k->n = st->n;
    k->c = st->c;
    k->m = st->m;
    k->group = group;
    for (int i = 0; i < 3; i++) {
        k->k[i] = g->k[i];
        k->stride[i] = g->stride[i];
        k->dil[i] = g->dil[i];
        k->pad[i] = pad[i];
        k->in_sp[i] = in_sp[i];
        k->out_sp[i] = out_sp[i];
    }
}

/* Chooses (or loads) the algorithm, checks it and sizes its workspace. */
static s4d_status conv_finish(s4d_op_ctx *ctx, conv_state *st, const s4d_conv_geom *g, int64_t group,
                              const int64_t *pad, const int64_t *in_sp, const int64_t *out_sp, const void *payload,
                              size_t size, size_t w_bytes)
{
    s4d_backend_ctx *bc = s4d_cuda_ctx(ctx);
    s4d_status s;
    /* The fused call needs a bias; a layer without one gets zeros (allocated before timing, which may try it). */
    if (!st->transpose && !st->has_bias && (st->has_z || st->relu || (payload && size))) {
        const size_t bytes = s4d_dtype_size(st->dtype) * (size_t)st->m;
        cudaError_t e = cudaMalloc(&st->zero_bias, bytes);
        if (e == cudaSuccess)
            e = cudaMemsetAsync(st->zero_bias, 0, bytes, bc->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(bc->stream);
        if (e != cudaSuccess) {
            st->zero_bias = NULL;
            return s4d_cuda_check(ctx, e, "allocating the convolution's zero bias");
        }
    }
    if (payload && size) {
        s = conv_apply_payload(ctx, st, payload, size);
    } else {
        conv_key key;
        conv_key_make(&key, st, g, group, pad, in_sp, out_sp, bc->allow_tf32 || st->dtype == S4D_DTYPE_FLOAT16);
        if (s4d_dense_cache_get(&key, sizeof key, &st->pick, sizeof st->pick)) {
            s = S4D_OK;
        } else {
            const void *wc = ctx->inputs[1].data;
            const void *bcst = st->has_bias ? ctx->inputs[2].data : NULL;
            s = conv_choose(ctx, st, in_sp, out_sp, wc, bcst, w_bytes);
            if (s == S4D_OK)
                s4d_dense_cache_put(&key, sizeof key, &st->pick, sizeof st->pick);
        }
    }
    if (s != S4D_OK)
        return s;
    if (cudnnSetConvolutionMathType(st->conv, (cudnnMathType_t)st->pick.ch.math) != CUDNN_STATUS_SUCCESS ||
        !algo_workspace(bc->cudnn, st, st->pick.ch.algo, &st->algo_ws))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "cuDNN does not run algorithm %d (math type %d) on this convolution%s",
                            (int)st->pick.ch.algo, (int)st->pick.ch.math,
                            payload ? " (stored in the engine: rebuild it)" : "");
    if (st->pick.ch.mode == CONV_GEMM) {
        /* From the engine file or the process cache: the product's own choice (its cache, or the payload). */
        if (!st->gemm) {
            const int stored = payload && size;
            s = s4d_conv_gemm_prepare(ctx, st->n, st->c, st->m, st->out_plane, st->has_bias || st->has_z, st->relu,
                                      ctx->inputs[1].data,
                                      stored ? (const char *)payload + CONV_PAYLOAD_HEAD : NULL,
                                      stored ? size - CONV_PAYLOAD_HEAD : 0, &st->gemm);
            if (s != S4D_OK)
                return s;
        }
        st->algo_ws = s4d_conv_gemm_workspace(st->gemm);
    }
    if (st->pick.ch.mode == CONV_WINO) {
        /* From the engine file or the process cache: U from this layer's weights, the products' choice. */
        if (!st->wgemm) {
            const int stored = payload && size;
            s = wino_prepare(ctx, st, ctx->inputs[1].data, stored ? (const char *)payload + CONV_PAYLOAD_HEAD : NULL,
                             stored ? size - CONV_PAYLOAD_HEAD : 0);
            if (s != S4D_OK)
                return s;
        }
        st->algo_ws = wino_workspace(st);
    }
    if (st->pick.ch.mode != CONV_FUSED && st->zero_bias) {
        cudaFree(st->zero_bias);
        st->zero_bias = NULL;
    }
    return S4D_OK;
}

/* ---- Conv / FusedConv ---- */

/*
 * Whether CONV_GEMM may run the layer: float32 NCHW, one group, every kernel
 * dim 1 with stride 1, dilation 1 and no padding, so that Y[i] = W X[i] per
 * image. TF32 engines take it too (the products then compute in TF32).
 */
static int conv_gemm_fits(const s4d_conv_params *p, const conv_state *st)
{
    if (p->dtype != S4D_DTYPE_FLOAT32 || p->nhwc || p->group != 1 || st->prepad || st->transpose)
        return 0;
    for (int j = 0; j < 3; j++)
        if (p->g.k[j] != 1 || p->g.stride[j] != 1 || p->g.dil[j] != 1 || p->g.pad_b[j] != 0 ||
            p->g.pad_e[j] != 0 || p->g.grid[j] != p->g.img[j])
            return 0;
    return 1;
}

/*
 * Whether CONV_WINO may run the layer: a 2-D float32 NCHW convolution, one
 * group, a 3x3 kernel with stride 1 and dilation 1, symmetric padding (no
 * padded copy), constant weights (U is made from them at prepare), and a
 * strict float32 engine (with --tf32 cuDNN's tensor cores are the faster
 * way, and the transforms' larger values would lose more to TF32).
 */
static int wino_fits(s4d_op_ctx *ctx, const s4d_conv_params *p, const conv_state *st)
{
    const s4d_conv_geom *g = &p->g;
    if (p->dtype != S4D_DTYPE_FLOAT32 || p->nhwc || p->group != 1 || st->prepad || st->transpose ||
        s4d_cuda_ctx(ctx)->allow_tf32 || !ctx->inputs[1].data)
        return 0;
    if (g->k[0] != 1 || g->img[0] != 1 || g->grid[0] != 1)
        return 0;
    for (int j = 1; j < 3; j++)
        if (g->k[j] != 3 || g->stride[j] != 1 || g->dil[j] != 1 || g->pad_b[j] > 2)
            return 0;
    return 1;
}

static s4d_status conv_supports(s4d_op_ctx *ctx)
{
    const s4d_conv_params *p = ctx->params;
    if (!p)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters");
    if (p->dtype != S4D_DTYPE_FLOAT32 && p->dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "dtype %s: the CUDA convolution runs float32 and float16 only",
                            s4d_dtype_name(p->dtype));
    if (p->c < 1 || p->m < 1)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a convolution without input or output channels");
    const s4d_conv_geom *g = &p->g;
    if (p->nhwc && g->nsp != 2)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "channels-last (NHWC) convolutions are 2-D only");
    int64_t padded[3];
    for (int j = 0; j < 3; j++) {
        if (p->nhwc && g->pad_b[j] != g->pad_e[j])
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                                "asymmetric padding in a channels-last (NHWC) convolution (the padding "
                                "copy is NCHW)");
        int64_t extra = g->pad_b[j] > g->pad_e[j] ? g->pad_b[j] - g->pad_e[j] : g->pad_e[j] - g->pad_b[j];
        padded[j] = g->img[j] + extra;
        if (!fits_int(g->k[j]) || !fits_int(g->stride[j]) || !fits_int(g->dil[j]) || !fits_int(g->pad_b[j]) ||
            !fits_int(g->pad_e[j]))
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "kernel_shape, strides, dilations or pads beyond 2^31-1");
    }
    const int64_t kk[3] = {g->k[0], g->k[1], g->k[2]};
    if (!numel_fits(p->n, p->c, padded) || !numel_fits(p->n, p->m, g->grid) || !numel_fits(p->m, p->cg, kk))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "a tensor of more than 2^31-1 elements (cuDNN's legacy API indexes with int)");
    return S4D_OK;
}

static s4d_status conv_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    *state = NULL;
    s4d_status s = conv_supports(ctx);
    if (s != S4D_OK)
        return s;
    const s4d_conv_params *p = ctx->params;
    conv_state *st = calloc(1, sizeof *st);
    if (!st)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    st->dtype = p->dtype;
    st->n = p->n;
    st->c = p->c;
    st->m = p->m;
    st->has_bias = p->has_bias;
    st->has_z = p->has_z;
    st->relu = p->relu;
    st->nhwc = p->nhwc;
    st->out_plane = s4d_host_conv_prod3(p->g.grid);
    if (p->n == 0) {
        st->empty = 1;
        *state = st;
        return S4D_OK;
    }
    int64_t pad[3];
    for (int j = 0; j < 3; j++) {
        const int64_t pb = p->g.pad_b[j], pe = p->g.pad_e[j];
        pad[j] = pb < pe ? pb : pe;
        st->img[j] = p->g.img[j];
        st->off[j] = pb - pad[j];
        st->padded[j] = p->g.img[j] + (pb > pe ? pb - pe : pe - pb);
        if (pb != pe)
            st->prepad = 1;
    }
    if (st->prepad)
        st->prepad_bytes = tensor_bytes(p->dtype, p->n, p->c, st->padded);
    st->gemm_fits = conv_gemm_fits(p, st);
    st->wino_fits = wino_fits(ctx, p, st);
    if (st->wino_fits) {
        s4d_cuda_wino_geom *w = &st->wg;
        w->n = p->n;
        w->c = p->c;
        w->m = p->m;
        w->h = p->g.img[1];
        w->w = p->g.img[2];
        w->ho = p->g.grid[1];
        w->wo = p->g.grid[2];
        w->th = (w->ho + 3) / 4;
        w->tw = (w->wo + 3) / 4;
        w->pad_t = p->g.pad_b[1];
        w->pad_l = p->g.pad_b[2];
    }
    s = make_descs(ctx, st, &p->g, p->group, p->c, st->padded, p->m, p->g.grid, p->m, p->cg, pad);
    if (s == S4D_OK)
        s = conv_finish(ctx, st, &p->g, p->group, pad, st->padded, p->g.grid, payload, size,
                        s4d_dtype_size(p->dtype) * (size_t)(p->m * p->cg * s4d_host_conv_prod3(p->g.k)));
    if (s != S4D_OK) {
        conv_state_free(st);
        return s;
    }
    *state = st;
    return S4D_OK;
}

/* ---- ConvTranspose ---- */

static s4d_status convt_supports(s4d_op_ctx *ctx)
{
    const s4d_convt_params *p = ctx->params;
    if (!p)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters");
    if (p->dtype != S4D_DTYPE_FLOAT32 && p->dtype != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "dtype %s: the CUDA ConvTranspose runs float32 and float16 only",
                            s4d_dtype_name(p->dtype));
    if (p->c < 1 || p->m < 1)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a ConvTranspose without input or output channels");
    const s4d_conv_geom *g = &p->g;
    for (int j = 0; j < 3; j++) {
        if (!fits_int(g->k[j]) || !fits_int(g->stride[j]) || !fits_int(g->dil[j]) || !fits_int(g->pad_b[j]) ||
            !fits_int(g->pad_e[j]))
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                                "pads (from pads, auto_pad or output_shape) that are negative or beyond 2^31-1");
        /* cuDNN pads both sides by pad_b and takes the rest as output padding, which must stay below the stride. */
        const int64_t ext = g->dil[j] * (g->k[j] - 1) + 1;
        const int64_t r = g->img[j] + 2 * g->pad_b[j] - ext - g->stride[j] * (g->grid[j] - 1);
        if (r < 0 || r >= g->stride[j])
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                                "spatial dim %d: pads %lld/%lld with this output size (output_padding / "
                                "output_shape / auto_pad) are not symmetric up to an output padding below the "
                                "stride, which cuDNN needs",
                                j - (3 - g->nsp), (long long)g->pad_b[j], (long long)g->pad_e[j]);
    }
    const int64_t kk[3] = {g->k[0], g->k[1], g->k[2]};
    if (!numel_fits(p->n, p->c, g->grid) || !numel_fits(p->n, p->m, g->img) || !numel_fits(p->c, p->mg, kk))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "a tensor of more than 2^31-1 elements (cuDNN's legacy API indexes with int)");
    return S4D_OK;
}

static s4d_status convt_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    *state = NULL;
    s4d_status s = convt_supports(ctx);
    if (s != S4D_OK)
        return s;
    const s4d_convt_params *p = ctx->params;
    conv_state *st = calloc(1, sizeof *st);
    if (!st)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    st->transpose = 1;
    st->dtype = p->dtype;
    st->n = p->n;
    st->c = p->c;
    st->m = p->m;
    st->has_bias = p->has_bias;
    st->out_plane = s4d_host_conv_prod3(p->g.img);
    if (p->n == 0) {
        st->empty = 1;
        *state = st;
        return S4D_OK;
    }
    /* The forward convolution whose data gradient this is: from Y (m channels) to X (c channels). */
    s = make_descs(ctx, st, &p->g, p->group, p->c, p->g.grid, p->m, p->g.img, p->c, p->mg, p->g.pad_b);
    if (s == S4D_OK)
        s = conv_finish(ctx, st, &p->g, p->group, p->g.pad_b, p->g.grid, p->g.img, payload, size,
                        s4d_dtype_size(p->dtype) * (size_t)(p->c * p->mg * s4d_host_conv_prod3(p->g.k)));
    if (s != S4D_OK) {
        conv_state_free(st);
        return s;
    }
    *state = st;
    return S4D_OK;
}

static const char *fwd_algo_name(int32_t a)
{
    static const char *const names[] = {"implicit_gemm", "implicit_precomp_gemm", "gemm", "direct",
                                        "fft",           "fft_tiling",            "winograd", "winograd_nonfused"};
    return a >= 0 && a < (int32_t)(sizeof names / sizeof names[0]) ? names[a] : "?";
}

static const char *bwd_data_algo_name(int32_t a)
{
    static const char *const names[] = {"algo_0", "algo_1", "fft", "fft_tiling", "winograd", "winograd_nonfused"};
    return a >= 0 && a < (int32_t)(sizeof names / sizeof names[0]) ? names[a] : "?";
}

static const char *math_name(int32_t m)
{
    switch (m) {
    case CUDNN_FMA_MATH: return "fma";
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor cores";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor cores, conversion allowed";
    default: return "?";
    }
}

/* One line for --dumpLayerInfo: cuDNN's algorithm, math, epilogue, workspace and how it was chosen. */
static int conv_describe(const void *state, char *buf, size_t size)
{
    const conv_state *st = state;
    if (!st || st->empty)
        return 0;
    const conv_choice *ch = &st->pick.ch;
    char how[64];
    if (st->pick.how == CONV_HOW_TIMED)
        snprintf(how, sizeof how, "timed %.4f ms at build", (double)st->pick.ms);
    else
        snprintf(how, sizeof how, "%s",
                 st->pick.how == CONV_HOW_HEURISTIC ? "cuDNN heuristics" : "from the engine file");
    if (ch->mode == CONV_GEMM || ch->mode == CONV_WINO) {
        int n = ch->mode == CONV_GEMM
                    ? snprintf(buf, size, "1x1 as products per image%s, ",
                               st->has_bias || st->has_z ? " onto the addend kernel's bias/residual" : "")
                    : snprintf(buf, size, "Winograd F(4x4,3x3): transforms and 36 products, ");
        if (n < 0 || (size_t)n >= size)
            return n;
        int d = s4d_conv_gemm_describe(ch->mode == CONV_GEMM ? st->gemm : st->wgemm, buf + n, size - (size_t)n);
        if (d < 0 || (size_t)(n + d) >= size)
            return n + d;
        return n + d + snprintf(buf + n + d, size - (size_t)(n + d), ", %s", how);
    }
    const char *mode = ch->mode == CONV_FUSED  ? "cudnnConvolutionBiasActivationForward"
                       : ch->mode == CONV_PLAIN ? (st->has_bias || st->has_z || st->relu
                                                          ? "cudnnConvolutionForward + epilogue kernel"
                                                          : "cudnnConvolutionForward")
                                                   : "cudnnConvolutionBackwardData";
    return snprintf(buf, size, "%s%s, algo %s (%d), %s, workspace %zu KiB%s, %s", mode, st->nhwc ? " (NHWC)" : "",
                    st->transpose ? bwd_data_algo_name(ch->algo) : fwd_algo_name(ch->algo), (int)ch->algo,
                    math_name(ch->math), st->algo_ws >> 10, st->prepad ? ", padded copy" : "", how);
}

const s4d_kernel s4d_cuda_k_conv = {
    .domain = "", .op_type = "Conv", .since_version = 1, .supports = conv_supports, .workspace_size = conv_ws,
    .prepare = conv_prepare, .save = conv_save, .destroy = conv_destroy, .run = conv_run, .describe = conv_describe,
};

const s4d_kernel s4d_cuda_k_fused_conv = {
    .domain = "s4d", .op_type = "FusedConv", .since_version = 1, .supports = conv_supports,
    .workspace_size = conv_ws, .prepare = conv_prepare, .save = conv_save, .destroy = conv_destroy,
    .run = conv_run, .describe = conv_describe,
};

const s4d_kernel s4d_cuda_k_conv_transpose = {
    .domain = "", .op_type = "ConvTranspose", .since_version = 1, .supports = convt_supports,
    .workspace_size = conv_ws, .prepare = convt_prepare, .save = conv_save, .destroy = conv_destroy,
    .run = conv_run, .describe = conv_describe,
};
