/*
 * The CPU backend: host memory, a thread pool per context, kernels of its own
 * for convolutions and max pooling (cpu_kernels.h), the schema's host
 * implementation (src/ops/) for every other op, and plugin layers through the
 * bridge. See backend/backend.h.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "registry/plugin_bridge.h"
#include "util/threadpool.h"
#include "util/util.h"

struct s4d_backend_ctx {
    s4d_threadpool *pool; /* NULL: one thread */
    int num_threads;
};

static s4d_status cpu_probe(char *err, size_t errsz)
{
    (void)err;
    (void)errsz;
    return S4D_OK;
}

static s4d_status cpu_target_info(s4d_target_info *info)
{
    memset(info, 0, sizeof *info);
    strcpy(info->name, "cpu");
    return S4D_OK;
}

double s4d_cpu_io_us(const s4d_op_ctx *ctx)
{
    double bytes = 0.0;
    for (int i = 0; i < ctx->num_inputs; i++)
        if (ctx->inputs[i].data && ctx->inputs[i].rank >= 0)
            bytes += (double)s4d_tensor_numel(&ctx->inputs[i]) * (double)s4d_dtype_size(ctx->inputs[i].dtype);
    for (int i = 0; i < ctx->num_outputs; i++)
        if (ctx->outputs[i].rank >= 0)
            bytes += (double)s4d_tensor_numel(&ctx->outputs[i]) * (double)s4d_dtype_size(ctx->outputs[i].dtype);
    return bytes / 20000.0;
}

void s4d_cpu_split_decide(s4d_op_ctx *ctx, double est_us)
{
    if (est_us < S4D_CPU_SPLIT_MIN_US)
        ctx->pool = NULL;
}

/* Ops whose time follows their arithmetic rather than the bytes they touch:
   the size of their tensors says nothing about whether a split pays. */
static int compute_bound(const char *op_type)
{
    static const char *const ops[] = {
        "MatMul", "Gemm", "Einsum", "Conv", "ConvTranspose", "FusedConv", "FusedConvAct", "Attention",
        "LSTM", "GRU", "RNN", "GridSample", "Resize", "Upsample", "TopK", "NonMaxSuppression", "RoiAlign",
        "LRN", "MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul", "DeformConv", "MaxRoiPool",
        "Col2Im", "STFT", "DFT", "FusedMBConv",
    };
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        if (strcmp(op_type, ops[i]) == 0)
            return 1;
    return 0;
}

/* Host implementations run as they are: the schema's reference is the CPU kernel. */
static size_t host_workspace(const s4d_op_ctx *ctx)
{
    return ctx->schema->workspace_size ? ctx->schema->workspace_size(ctx) : 0;
}

static s4d_status host_run(s4d_op_ctx *ctx)
{
    if (ctx->pool && !compute_bound(ctx->schema->op_type))
        s4d_cpu_split_decide(ctx, s4d_cpu_io_us(ctx));
    return ctx->schema->run(ctx);
}

static const s4d_kernel cpu_host_kernel = {
    .domain = "*", .op_type = "*", .since_version = 1,
    .workspace_size = host_workspace, .run = host_run,
};

static const s4d_kernel *cpu_find_kernel(const char *domain, const char *op_type, int opset)
{
    const s4d_op_schema *s = s4d_op_find_schema(domain, op_type, opset);
    if (!s || !s->run)
        return NULL;
    const s4d_kernel *own = s4d_cpu_find_own_kernel(domain, op_type, opset);
    return own ? own : &cpu_host_kernel;
}

static s4d_status cpu_plugin_run(s4d_op_ctx *ctx)
{
    s4d_backend_ctx *c = ctx->backend_ctx;
    s4d_bridge_run run = {
        .device = S4D_DEVICE_CPU,
        .stream = NULL,
        .workspace = ctx->workspace,
        .workspace_size = ctx->workspace_size,
        .num_threads = c ? c->num_threads : 1,
        .pool = ctx->pool,
        .context_state = ctx->plugin_ctx,
    };
    return s4d_bridge_enqueue(ctx->plugin, ctx->inputs, ctx->num_inputs, ctx->outputs,
                              ctx->num_outputs, &run, ctx->err, ctx->err_size);
}

static const s4d_kernel cpu_plugin_kernel = {
    .domain = "*", .op_type = "plugin", .since_version = 1, .run = cpu_plugin_run,
};

static s4d_status cpu_alloc(size_t bytes, void **out, char *err, size_t errsz)
{
    *out = s4d_aligned_alloc(bytes);
    if (!*out)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of host memory allocating %zu bytes",
                           bytes);
    return S4D_OK;
}

static s4d_status cpu_check_pointer(const void *p, size_t bytes, char *err, size_t errsz)
{
    (void)bytes;
    if (!p)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "NULL pointer");
    return S4D_OK;
}

static s4d_status cpu_context_create(const s4d_backend_ctx_options *o, s4d_backend_ctx **out,
                                     char *err, size_t errsz)
{
    *out = NULL;
    s4d_backend_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory creating a CPU context");
    int n = o->num_threads;
    if (n <= 0) {
        long k = sysconf(_SC_NPROCESSORS_ONLN);
        n = k > 0 ? (int)k : 1;
    }
    c->num_threads = n;
    /* OpenBLAS's thread count is process-wide: the most recent context sets it
       to its own width, so one context per process gets exactly its budget. */
    if (n > 1) {
        s4d_status st = s4d_threadpool_create(n, &c->pool);
        if (st != S4D_OK) {
            free(c);
            return s4d_fmt_err(err, errsz, st, "cannot start %d worker threads", n - 1);
        }
        if (s4d_threadpool_size(c->pool) <= 1) {
            /* One core: running inline avoids the pool's hand-off cost. */
            s4d_threadpool_destroy(c->pool);
            c->pool = NULL;
        }
    }
    *out = c;
    return S4D_OK;
}

static void cpu_context_destroy(s4d_backend_ctx *c)
{
    if (!c)
        return;
    s4d_threadpool_destroy(c->pool);
    free(c);
}

static void *cpu_context_stream(s4d_backend_ctx *c)
{
    (void)c;
    return NULL;
}

static struct s4d_threadpool *cpu_context_pool(s4d_backend_ctx *c)
{
    return c ? c->pool : NULL;
}

static s4d_status cpu_copy(s4d_backend_ctx *c, void *dst, const void *src, size_t bytes,
                           s4d_copy_kind kind, void *stream, char *err, size_t errsz)
{
    (void)c, (void)kind, (void)stream, (void)err, (void)errsz;
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    return S4D_OK;
}

static s4d_status cpu_memset(s4d_backend_ctx *c, void *dst, int value, size_t bytes, void *stream,
                             char *err, size_t errsz)
{
    (void)c, (void)stream, (void)err, (void)errsz;
    if (bytes)
        memset(dst, value, bytes);
    return S4D_OK;
}

static s4d_status cpu_synchronize(s4d_backend_ctx *c, void *stream, char *err, size_t errsz)
{
    (void)c, (void)stream, (void)err, (void)errsz;
    return S4D_OK;
}

/* CPU work is done when the call returns, so an event is the host clock then.
   S4D_PROFILE_CLOCK=cpu makes it the process's CPU time instead (every thread's): on a
   shared machine that leaves out the time other processes hold the cores. */
static int profile_cpu_clock(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *env = getenv("S4D_PROFILE_CLOCK");
        mode = env && strcmp(env, "cpu") == 0;
    }
    return mode;
}

static double cpu_clock_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static s4d_status host_event_create(void **event)
{
    *event = calloc(1, sizeof(double));
    return *event ? S4D_OK : S4D_ERR_NO_MEMORY;
}

static void host_event_destroy(void *event)
{
    free(event);
}

static s4d_status host_event_record(void *event, void *stream)
{
    (void)stream;
    *(double *)event = profile_cpu_clock() ? cpu_clock_ms() : s4d_now_ms();
    return S4D_OK;
}

static s4d_status host_event_elapsed(void *a, void *b, double *ms)
{
    *ms = *(double *)b - *(double *)a;
    return S4D_OK;
}

static const s4d_backend cpu_backend = {
    .version = S4D_BACKEND_VERSION,
    .device = S4D_DEVICE_CPU,
    .name = "cpu",
    .host_memory = 1,
    .plugin_device = S4D_DEVICE_CPU,
    .probe = cpu_probe,
    .target_info = cpu_target_info,
    .find_kernel = cpu_find_kernel,
    .plugin_kernel = &cpu_plugin_kernel,
    .alloc = cpu_alloc,
    .free = s4d_aligned_free,
    .check_pointer = cpu_check_pointer,
    .context_create = cpu_context_create,
    .context_destroy = cpu_context_destroy,
    .context_stream = cpu_context_stream,
    .context_pool = cpu_context_pool,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .synchronize = cpu_synchronize,
    .event_create = host_event_create,
    .event_destroy = host_event_destroy,
    .event_record = host_event_record,
    .event_elapsed = host_event_elapsed,
};

const s4d_backend *s4d_backend_cpu(void)
{
    return &cpu_backend;
}
