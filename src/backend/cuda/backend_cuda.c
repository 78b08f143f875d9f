/*
 * The CUDA backend: device memory, a stream and cuBLAS/cuBLASLt/cuDNN
 * handles per context, asynchronous copies, events, CUDA graphs, and the
 * kernel lookup over the family tables. See cuda_backend.h.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "registry/plugin_bridge.h"
#include "util/util.h"

s4d_status s4d_cuda_fmt(cudaError_t e, const char *what, char *err, size_t errsz)
{
    if (e == cudaSuccess)
        return S4D_OK;
    s4d_status st = e == cudaErrorMemoryAllocation ? S4D_ERR_NO_MEMORY
                    : e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                        ? S4D_ERR_NO_DEVICE
                        : S4D_ERR_CUDA;
    return s4d_fmt_err(err, errsz, st, "%s: %s (%s)", what, cudaGetErrorString(e),
                       cudaGetErrorName(e));
}

s4d_status s4d_cuda_check(s4d_op_ctx *ctx, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return S4D_OK;
    char msg[512];
    s4d_status st = s4d_cuda_fmt(e, what, msg, sizeof msg);
    return s4d_op_error(ctx, st, "%s", msg);
}

s4d_status s4d_cublas_check(s4d_op_ctx *ctx, cublasStatus_t e, const char *what)
{
    if (e == CUBLAS_STATUS_SUCCESS)
        return S4D_OK;
    return s4d_op_error(ctx, e == CUBLAS_STATUS_ALLOC_FAILED ? S4D_ERR_NO_MEMORY : S4D_ERR_CUDA,
                        "%s: cuBLAS status %d (%s)", what, (int)e, cublasGetStatusString(e));
}

s4d_status s4d_cudnn_check(s4d_op_ctx *ctx, cudnnStatus_t e, const char *what)
{
    if (e == CUDNN_STATUS_SUCCESS)
        return S4D_OK;
    return s4d_op_error(ctx, S4D_ERR_CUDA, "%s: cuDNN status %d (%s)", what, (int)e,
                        cudnnGetErrorString(e));
}

s4d_status s4d_cuda_launched(s4d_op_ctx *ctx, const char *kernel)
{
    return s4d_cuda_check(ctx, cudaGetLastError(), kernel);
}

const void *s4d_cuda_params(s4d_op_ctx *ctx)
{
    if (!ctx->params)
        s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters (its schema's infer did not run)");
    return ctx->params;
}

int s4d_cuda_data_type(s4d_dtype dt)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return CUDA_R_32F;
    case S4D_DTYPE_FLOAT16: return CUDA_R_16F;
    case S4D_DTYPE_BFLOAT16: return CUDA_R_16BF;
    case S4D_DTYPE_FLOAT64: return CUDA_R_64F;
    case S4D_DTYPE_INT8: return CUDA_R_8I;
    case S4D_DTYPE_UINT8: return CUDA_R_8U;
    case S4D_DTYPE_INT32: return CUDA_R_32I;
    default: return -1;
    }
}

int s4d_cudnn_data_type(s4d_dtype dt)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return CUDNN_DATA_FLOAT;
    case S4D_DTYPE_FLOAT16: return CUDNN_DATA_HALF;
    case S4D_DTYPE_BFLOAT16: return CUDNN_DATA_BFLOAT16;
    case S4D_DTYPE_FLOAT64: return CUDNN_DATA_DOUBLE;
    case S4D_DTYPE_INT8: return CUDNN_DATA_INT8;
    case S4D_DTYPE_INT32: return CUDNN_DATA_INT32;
    default: return -1;
    }
}

/* ---- device ---- */

static s4d_status cuda_probe(char *err, size_t errsz)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_DEVICE, "no usable CUDA device: %s (%s)",
                           cudaGetErrorString(e), cudaGetErrorName(e));
    if (n < 1)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_DEVICE, "no CUDA device found");
    return S4D_OK;
}

static s4d_status cuda_target_info(s4d_target_info *info)
{
    memset(info, 0, sizeof *info);
    int dev = 0;
    cudaGetDevice(&dev);
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return S4D_ERR_NO_DEVICE;
    snprintf(info->name, sizeof info->name, "%.63s", prop.name);
    snprintf(info->arch, sizeof info->arch, "sm_%d%d", prop.major, prop.minor);
    int cublas_version = 0;
    cublasHandle_t h;
    if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
        cublasGetVersion(h, &cublas_version);
        cublasDestroy(h);
    }
    snprintf(info->libraries, sizeof info->libraries, "cudnn %zu, cublas %d",
             (size_t)cudnnGetVersion(), cublas_version);
    return S4D_OK;
}

/* ---- kernels ---- */

static const s4d_kernel *find_in(const s4d_kernel *const *table, size_t count, const char *domain,
                                 const char *op_type, int opset, const s4d_kernel *best)
{
    for (size_t i = 0; i < count; i++) {
        const s4d_kernel *k = table[i];
        if (strcmp(k->domain, domain) != 0 || strcmp(k->op_type, op_type) != 0 ||
            k->since_version > opset)
            continue;
        if (!best || k->since_version > best->since_version)
            best = k;
    }
    return best;
}

static const s4d_kernel *cuda_find_kernel(const char *domain, const char *op_type, int opset)
{
    if (!domain || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    const s4d_kernel *k = NULL;
    k = find_in(s4d_cuda_kernels_elementwise, s4d_cuda_kernels_elementwise_count, domain, op_type,
                opset, k);
    k = find_in(s4d_cuda_kernels_reduce, s4d_cuda_kernels_reduce_count, domain, op_type, opset, k);
    k = find_in(s4d_cuda_kernels_movement, s4d_cuda_kernels_movement_count, domain, op_type, opset,
                k);
    k = find_in(s4d_cuda_kernels_dense, s4d_cuda_kernels_dense_count, domain, op_type, opset, k);
    k = find_in(s4d_cuda_kernels_attention, s4d_cuda_kernels_attention_count, domain, op_type, opset,
                k);
    k = find_in(s4d_cuda_kernels_mlp, s4d_cuda_kernels_mlp_count, domain, op_type, opset, k);
    return k;
}

static s4d_status cuda_plugin_run(s4d_op_ctx *ctx)
{
    s4d_backend_ctx *c = s4d_cuda_ctx(ctx);
    s4d_bridge_run run = {
        .device = S4D_DEVICE_CUDA,
        .stream = ctx->stream,
        .workspace = ctx->workspace,
        .workspace_size = ctx->workspace_size,
        .num_threads = 0,
        .pool = NULL,
        .context_state = ctx->plugin_ctx,
    };
    (void)c;
    return s4d_bridge_enqueue(ctx->plugin, ctx->inputs, ctx->num_inputs, ctx->outputs,
                              ctx->num_outputs, &run, ctx->err, ctx->err_size);
}

static const s4d_kernel cuda_plugin_kernel = {
    .domain = "*", .op_type = "plugin", .since_version = 1, .run = cuda_plugin_run,
};

/* ---- memory ---- */

static s4d_status cuda_alloc(size_t bytes, void **out, char *err, size_t errsz)
{
    *out = NULL;
    /* cudaMalloc aligns to at least 256 bytes; a zero-byte buffer still gets an address. */
    cudaError_t e = cudaMalloc(out, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        *out = NULL;
        cudaGetLastError();
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY,
                           "out of device memory allocating %zu bytes: %s", bytes,
                           cudaGetErrorString(e));
    }
    /* Zero-filled, like every backend's buffers. cudaMemset runs on the legacy default
       stream, which the contexts' non-blocking streams do not wait for: finish it here,
       at setup, or it could land after the first copy into the buffer. */
    e = cudaMemset(*out, 0, bytes ? bytes : 256);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(cudaStreamLegacy);
    if (e != cudaSuccess) {
        cudaFree(*out);
        *out = NULL;
        return s4d_cuda_fmt(e, "cudaMemset", err, errsz);
    }
    return S4D_OK;
}

static void cuda_free(void *p)
{
    if (p)
        cudaFree(p);
}

static s4d_status cuda_check_pointer(const void *p, size_t bytes, char *err, size_t errsz)
{
    (void)bytes;
    if (!p)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "NULL pointer");
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "%p is not CUDA memory (%s)", p,
                           cudaGetErrorString(e));
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                           "%p is %s memory, not device memory", p,
                           a.type == cudaMemoryTypeHost ? "pinned host" : "host");
    int dev = 0;
    cudaGetDevice(&dev);
    if (a.device != dev)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                           "%p lives on CUDA device %d, the engine on device %d", p, a.device, dev);
    return S4D_OK;
}

/* ---- contexts ---- */

static void cuda_context_destroy(s4d_backend_ctx *c)
{
    if (!c)
        return;
    if (c->cudnn)
        cudnnDestroy(c->cudnn);
    if (c->lt)
        cublasLtDestroy(c->lt);
    if (c->cublas)
        cublasDestroy(c->cublas);
    if (c->stream && c->own_stream)
        cudaStreamDestroy(c->stream);
    free(c);
}

static s4d_status cuda_context_create(const s4d_backend_ctx_options *o, s4d_backend_ctx **out,
                                      char *err, size_t errsz)
{
    *out = NULL;
    s4d_backend_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory creating a CUDA context");
    cudaGetDevice(&c->device);
    c->allow_tf32 = o->allow_tf32;
    s4d_status st = S4D_OK;
    if (o->stream) {
        c->stream = (cudaStream_t)o->stream;
    } else {
        cudaError_t e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            st = s4d_cuda_fmt(e, "creating the context's stream", err, errsz);
            goto fail;
        }
        c->own_stream = 1;
    }
    if (cublasCreate(&c->cublas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(c->cublas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_CUDA, "cannot create a cuBLAS handle");
        goto fail;
    }
    /* Strict float32 unless the engine allows TF32 (docs/cuda-backend.md says why). */
    cublasSetMathMode(c->cublas, c->allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                               : CUBLAS_PEDANTIC_MATH);
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_CUDA, "cannot create a cuBLASLt handle");
        goto fail;
    }
    cudnnStatus_t ds = cudnnCreate(&c->cudnn);
    if (ds != CUDNN_STATUS_SUCCESS || cudnnSetStream(c->cudnn, c->stream) != CUDNN_STATUS_SUCCESS) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_CUDA, "cannot create a cuDNN handle: %s",
                         cudnnGetErrorString(ds));
        goto fail;
    }
    *out = c;
    return S4D_OK;
fail:
    cuda_context_destroy(c);
    return st;
}

static void *cuda_context_stream(s4d_backend_ctx *c)
{
    return c ? (void *)c->stream : NULL;
}

static struct s4d_threadpool *cuda_context_pool(s4d_backend_ctx *c)
{
    (void)c;
    return NULL;
}

static s4d_status cuda_copy(s4d_backend_ctx *c, void *dst, const void *src, size_t bytes,
                            s4d_copy_kind kind, void *stream, char *err, size_t errsz)
{
    if (!bytes)
        return S4D_OK;
    cudaStream_t s = stream ? (cudaStream_t)stream : c->stream;
    enum cudaMemcpyKind k = kind == S4D_COPY_HOST_TO_DEVICE   ? cudaMemcpyHostToDevice
                            : kind == S4D_COPY_DEVICE_TO_HOST ? cudaMemcpyDeviceToHost
                                                              : cudaMemcpyDeviceToDevice;
    return s4d_cuda_fmt(cudaMemcpyAsync(dst, src, bytes, k, s), "cudaMemcpyAsync", err, errsz);
}

static s4d_status cuda_memset(s4d_backend_ctx *c, void *dst, int value, size_t bytes,
                              void *stream, char *err, size_t errsz)
{
    if (!bytes)
        return S4D_OK;
    cudaStream_t s = stream ? (cudaStream_t)stream : c->stream;
    return s4d_cuda_fmt(cudaMemsetAsync(dst, value, bytes, s), "cudaMemsetAsync", err, errsz);
}

static s4d_status cuda_synchronize(s4d_backend_ctx *c, void *stream, char *err, size_t errsz)
{
    cudaStream_t s = stream ? (cudaStream_t)stream : c->stream;
    return s4d_cuda_fmt(cudaStreamSynchronize(s), "the stream failed", err, errsz);
}

/* ---- events ---- */

static s4d_status cuda_event_create(void **event)
{
    cudaEvent_t e;
    if (cudaEventCreate(&e) != cudaSuccess)
        return S4D_ERR_CUDA;
    *event = e;
    return S4D_OK;
}

static void cuda_event_destroy(void *event)
{
    if (event)
        cudaEventDestroy((cudaEvent_t)event);
}

static s4d_status cuda_event_record(void *event, void *stream)
{
    return cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream) == cudaSuccess ? S4D_OK
                                                                                    : S4D_ERR_CUDA;
}

static s4d_status cuda_event_elapsed(void *a, void *b, double *ms)
{
    float f = 0;
    if (cudaEventElapsedTime(&f, (cudaEvent_t)a, (cudaEvent_t)b) != cudaSuccess)
        return S4D_ERR_CUDA;
    *ms = f;
    return S4D_OK;
}

/* ---- graphs ---- */

static s4d_status cuda_graph_begin(void *stream, char *err, size_t errsz)
{
    /* Thread-local: other threads may use CUDA (their own contexts) while this one captures. */
    return s4d_cuda_fmt(cudaStreamBeginCapture((cudaStream_t)stream,
                                               cudaStreamCaptureModeThreadLocal),
                        "cudaStreamBeginCapture", err, errsz);
}

static s4d_status cuda_graph_end(void *stream, void **graph, char *err, size_t errsz)
{
    *graph = NULL;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (e != cudaSuccess)
        return s4d_cuda_fmt(e, "cudaStreamEndCapture", err, errsz);
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess)
        return s4d_cuda_fmt(e, "cudaGraphInstantiate", err, errsz);
    *graph = x;
    return S4D_OK;
}

static s4d_status cuda_graph_launch(void *graph, void *stream, char *err, size_t errsz)
{
    return s4d_cuda_fmt(cudaGraphLaunch((cudaGraphExec_t)graph, (cudaStream_t)stream),
                        "cudaGraphLaunch", err, errsz);
}

static void cuda_graph_destroy(void *graph)
{
    if (graph)
        cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

/* ---- more streams ---- */

static s4d_status cuda_stream_create(s4d_backend_ctx *c, void **stream, char *err, size_t errsz)
{
    *stream = NULL;
    cudaError_t e = cudaSetDevice(c->device);
    cudaStream_t s = NULL;
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return s4d_cuda_fmt(e, "cudaStreamCreateWithFlags", err, errsz);
    *stream = s;
    return S4D_OK;
}

static void cuda_stream_destroy(void *stream)
{
    if (stream)
        cudaStreamDestroy((cudaStream_t)stream);
}

static s4d_status cuda_order_event_create(void **event)
{
    cudaEvent_t e;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
        return S4D_ERR_CUDA;
    *event = e;
    return S4D_OK;
}

static s4d_status cuda_stream_wait(void *stream, void *event)
{
    return cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0) == cudaSuccess
               ? S4D_OK
               : S4D_ERR_CUDA;
}

/* A caller's event: while stream is captured, the wait becomes an event-wait node of the
   graph (cudaEventWaitExternal) instead of a dependency inside the capture. */
static s4d_status cuda_stream_wait_external(void *stream, void *event, char *err, size_t errsz)
{
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &cs);
    if (e != cudaSuccess)
        return s4d_cuda_fmt(e, "cudaStreamIsCapturing", err, errsz);
    unsigned flags = cs == cudaStreamCaptureStatusActive ? cudaEventWaitExternal : cudaEventWaitDefault;
    return s4d_cuda_fmt(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, flags),
                        "cudaStreamWaitEvent", err, errsz);
}

/* The legacy default stream (NULL or cudaStreamLegacy) synchronises with every blocking
   stream and cannot be captured. */
static int cuda_stream_capturable(void *stream)
{
    return stream != NULL && (cudaStream_t)stream != cudaStreamLegacy;
}

static const s4d_backend cuda_backend = {
    .version = S4D_BACKEND_VERSION,
    .device = S4D_DEVICE_CUDA,
    .name = "cuda",
    .host_memory = 0,
    .plugin_device = S4D_DEVICE_CUDA,
    .probe = cuda_probe,
    .target_info = cuda_target_info,
    .find_kernel = cuda_find_kernel,
    .plugin_kernel = &cuda_plugin_kernel,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .check_pointer = cuda_check_pointer,
    .context_create = cuda_context_create,
    .context_destroy = cuda_context_destroy,
    .context_stream = cuda_context_stream,
    .context_pool = cuda_context_pool,
    .copy = cuda_copy,
    .memset = cuda_memset,
    .synchronize = cuda_synchronize,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .event_record = cuda_event_record,
    .event_elapsed = cuda_event_elapsed,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_destroy = cuda_graph_destroy,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .order_event_create = cuda_order_event_create,
    .stream_wait = cuda_stream_wait,
    .stream_capturable = cuda_stream_capturable,
    .stream_wait_external = cuda_stream_wait_external,
};

const s4d_backend *s4d_backend_cuda(void)
{
    return &cuda_backend;
}
