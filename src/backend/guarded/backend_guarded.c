/*
 * The guarded test backend: a device whose memory is host memory kept behind
 * PROT_NONE pages, readable only inside this backend's own copy, memset and
 * kernel calls. Any code above the backend interface that touches device
 * memory directly (the runtime reading a weight, the builder writing an
 * arena) faults at once, so running the engine tests on it proves that the
 * runtime moves device bytes only through the backend - what a GPU backend
 * needs - on a machine without a GPU.
 *
 * It takes the CUDA slot of the registry when S4D_TEST_BACKEND=guarded (see
 * backend.h), runs the CPU kernels underneath, and tells plugins they run on
 * the CPU. S4D_GUARDED_DECLINE=Op1,Op2 makes it refuse those op types, to
 * test placement fallback.
 *
 * Events a caller gives an input (s4d_context_set_input_event): the device
 * runs everything on return, so there is nothing to wait for; the event is
 * taken as a caller's `long long[2]` instead, and each wait adds 1 to [0] and
 * stores in [1] how many kernels and copies this backend had run in the
 * process before it, so tests can see how often and where a run waited.
 *
 * float16: a layer with float16 tensors runs by widening its float16 inputs
 * (constants included) to float32 in its workspace, running the CPU kernel on
 * the float32 copies and rounding each float16 output to nearest even: float16
 * storage with float32 arithmetic, which is what the CUDA float16 kernels do
 * (float32 accumulation). It reproduces the rounding of every stored tensor,
 * not a GPU's accumulation order. Cast runs natively (the CPU Cast converts
 * float16). S4D_GUARDED_NO_FP16=Op1,Op2 makes it refuse float16 for those op
 * types, to test layers whose kernel has no float16 path.
 */
#define _DEFAULT_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"
#include "ops/broadcast.h"
#include "util/util.h"

typedef struct region {
    char *base;
    size_t size; /* mapped bytes, whole pages */
} region;

/* Every live allocation, and how many calls currently hold them open. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static region *g_regions;
static size_t g_count, g_cap;
static int g_open;

static void protect_all(int prot)
{
    for (size_t i = 0; i < g_count; i++)
        mprotect(g_regions[i].base, g_regions[i].size, prot);
}

/* Opens every allocation for the duration of one backend call (nesting counted,
   so concurrent contexts on several threads stay open while any is inside). */
static void guard_open(void)
{
    pthread_mutex_lock(&g_lock);
    if (g_open++ == 0)
        protect_all(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&g_lock);
}

static void guard_close(void)
{
    pthread_mutex_lock(&g_lock);
    if (--g_open == 0)
        protect_all(PROT_NONE);
    pthread_mutex_unlock(&g_lock);
}

static s4d_status g_probe(char *err, size_t errsz)
{
    (void)err;
    (void)errsz;
    return S4D_OK;
}

static s4d_status g_target_info(s4d_target_info *info)
{
    memset(info, 0, sizeof *info);
    strcpy(info->name, "guarded test device");
    strcpy(info->arch, "guarded");
    return S4D_OK;
}

/* Whether the comma-separated list in environment variable var names op_type. */
static int listed(const char *var, const char *op_type)
{
    const char *list = getenv(var);
    if (!list || !op_type)
        return 0;
    size_t n = strlen(op_type);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, op_type, n) == 0)
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

static const s4d_kernel *inner_kernel(const s4d_op_ctx *ctx)
{
    const s4d_op_schema *s = ctx->schema;
    return s4d_backend_cpu()->find_kernel(s->domain, s->op_type, s->since_version);
}

/* ---- float16 emulation ---- */

#define EMU_MAX_TENSORS 64
#define EMU_ALIGN 64

/* A float32 view of a layer whose float16 tensors the CPU kernel cannot take. */
typedef struct emu {
    s4d_op_ctx ctx;
    s4d_tensor in[EMU_MAX_TENSORS];
    s4d_tensor out[EMU_MAX_TENSORS];
    void *owned[EMU_MAX_TENSORS + 1]; /* build time: widened constants (malloc'd) */
} emu;

static int has_half(const s4d_op_ctx *ctx)
{
    for (int i = 0; i < ctx->num_inputs; i++)
        if (ctx->inputs[i].rank >= 0 && ctx->inputs[i].dtype == S4D_DTYPE_FLOAT16)
            return 1;
    for (int i = 0; i < ctx->num_outputs; i++)
        if (ctx->outputs[i].rank >= 0 && ctx->outputs[i].dtype == S4D_DTYPE_FLOAT16)
            return 1;
    return 0;
}

/* Cast converts float16 itself; everything else with float16 tensors is widened. */
static int emulated(const s4d_op_ctx *ctx)
{
    return has_half(ctx) && strcmp(ctx->op_type, "Cast") != 0 &&
           strcmp(ctx->op_type, "CastLike") != 0;
}

static size_t numel(const s4d_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

static size_t up(size_t n)
{
    return (n + EMU_ALIGN - 1) / EMU_ALIGN * EMU_ALIGN;
}

static void widen(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = s4d_half_to_float(src[i]);
}

/* Bytes the emulation adds in front of the inner kernel's workspace. */
static size_t emu_bytes(const s4d_op_ctx *ctx)
{
    size_t b = up(ctx->schema->params_size);
    for (int i = 0; i < ctx->num_inputs; i++)
        if (ctx->inputs[i].rank >= 0 && ctx->inputs[i].dtype == S4D_DTYPE_FLOAT16)
            b += up(numel(&ctx->inputs[i]) * sizeof(float));
    for (int i = 0; i < ctx->num_outputs; i++)
        if (ctx->outputs[i].rank >= 0 && ctx->outputs[i].dtype == S4D_DTYPE_FLOAT16)
            b += up(numel(&ctx->outputs[i]) * sizeof(float));
    return b;
}

/*
 * Makes the float32 view and infers it again, so that params describe float32
 * tensors. scratch: the workspace at run time (widened inputs, float32
 * outputs, params); NULL at build time (constants widened into malloc'd copies,
 * outputs without data, params malloc'd). On success the caller runs
 * e->ctx and, at build time, calls emu_free.
 */
static s4d_status emu_make(const s4d_op_ctx *ctx, uint8_t *scratch, emu *e)
{
    memset(e, 0, sizeof *e);
    if (ctx->num_inputs > EMU_MAX_TENSORS || ctx->num_outputs > EMU_MAX_TENSORS)
        return S4D_ERR_UNSUPPORTED;
    e->ctx = *ctx;
    e->ctx.inputs = e->in;
    e->ctx.outputs = e->out;
    size_t at = 0;
    size_t psize = ctx->schema->params_size;
    if (psize) {
        if (scratch) {
            e->ctx.params = scratch;
        } else {
            e->owned[0] = calloc(1, psize);
            if (!e->owned[0])
                return S4D_ERR_NO_MEMORY;
            e->ctx.params = e->owned[0];
        }
        memset(e->ctx.params, 0, psize);
    }
    at += up(psize);
    for (int i = 0; i < ctx->num_inputs; i++) {
        e->in[i] = ctx->inputs[i];
        if (e->in[i].rank < 0 || e->in[i].dtype != S4D_DTYPE_FLOAT16)
            continue;
        e->in[i].dtype = S4D_DTYPE_FLOAT32;
        size_t n = numel(&e->in[i]);
        e->in[i].data = NULL;
        if (ctx->inputs[i].data) {
            float *w = scratch ? (float *)(scratch + at) : malloc(n * sizeof(float) + 1);
            if (!w)
                return S4D_ERR_NO_MEMORY;
            if (!scratch)
                e->owned[1 + i] = w;
            widen(w, ctx->inputs[i].data, n);
            e->in[i].data = w;
        }
        if (scratch)
            at += up(n * sizeof(float));
    }
    for (int i = 0; i < ctx->num_outputs; i++) {
        memset(&e->out[i], 0, sizeof e->out[i]);
        e->out[i].rank = -1;
    }
    s4d_status st = s4d_op_infer(&e->ctx);
    if (st != S4D_OK)
        return st;
    for (int i = 0; i < ctx->num_outputs; i++) {
        const s4d_tensor *o = &ctx->outputs[i];
        if (o->rank < 0)
            continue;
        s4d_dtype want = o->dtype == S4D_DTYPE_FLOAT16 ? S4D_DTYPE_FLOAT32 : o->dtype;
        if (e->out[i].dtype != want || e->out[i].rank != o->rank)
            return s4d_op_error(&e->ctx, S4D_ERR_UNSUPPORTED,
                                "float16 emulation: output %d is %s when widened", i,
                                s4d_dtype_name(e->out[i].dtype));
        e->out[i].data = o->data;
        if (o->dtype == S4D_DTYPE_FLOAT16) {
            e->out[i].data = scratch ? scratch + at : NULL;
            if (scratch)
                at += up(numel(o) * sizeof(float));
        }
    }
    if (scratch) {
        e->ctx.workspace = scratch + at;
        e->ctx.workspace_size = ctx->workspace_size > at ? ctx->workspace_size - at : 0;
    }
    return S4D_OK;
}

static void emu_free(emu *e)
{
    for (int i = 0; i <= EMU_MAX_TENSORS; i++)
        free(e->owned[i]);
}

static s4d_status g_supports(s4d_op_ctx *ctx)
{
    if (listed("S4D_GUARDED_DECLINE", ctx->op_type))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "the guarded test device declines it (S4D_GUARDED_DECLINE)");
    const s4d_kernel *k = inner_kernel(ctx);
    if (!emulated(ctx))
        return k && k->supports ? k->supports(ctx) : S4D_OK;
    if (listed("S4D_GUARDED_NO_FP16", ctx->op_type))
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "the guarded test device has no float16 path for it "
                            "(S4D_GUARDED_NO_FP16)");
    emu e;
    s4d_status st = emu_make(ctx, NULL, &e);
    if (st == S4D_OK && k && k->supports)
        st = k->supports(&e.ctx);
    if (st != S4D_OK && !ctx->err[0])
        s4d_op_error(ctx, st, "float16 emulation: the CPU kernel does not take it widened: %s",
                     e.ctx.err && e.ctx.err[0] ? e.ctx.err : s4d_status_string(st));
    emu_free(&e);
    return st;
}

static size_t g_workspace(const s4d_op_ctx *ctx)
{
    const s4d_kernel *k = inner_kernel(ctx);
    if (!emulated(ctx))
        return k && k->workspace_size ? k->workspace_size(ctx) : 0;
    emu e;
    size_t ws = 0;
    if (emu_make(ctx, NULL, &e) == S4D_OK)
        ws = k && k->workspace_size ? k->workspace_size(&e.ctx) : 0;
    emu_free(&e);
    return emu_bytes(ctx) + ws;
}

/* Kernels and copies run so far, for the event waits' record (see the top). */
static long long g_work;

static s4d_status g_run(s4d_op_ctx *ctx)
{
    __atomic_add_fetch(&g_work, 1, __ATOMIC_RELAXED);
    const s4d_kernel *k = inner_kernel(ctx);
    guard_open();
    s4d_status st;
    if (!emulated(ctx)) {
        st = k->run(ctx);
    } else {
        emu e;
        st = emu_make(ctx, ctx->workspace, &e);
        if (st == S4D_OK)
            st = k->run(&e.ctx);
        for (int i = 0; st == S4D_OK && i < ctx->num_outputs; i++) {
            const s4d_tensor *o = &ctx->outputs[i];
            if (o->rank < 0 || o->dtype != S4D_DTYPE_FLOAT16)
                continue;
            const float *src = e.out[i].data;
            uint16_t *dst = o->data;
            size_t n = numel(o);
            for (size_t j = 0; j < n; j++)
                dst[j] = s4d_float_to_half(src[j]);
        }
    }
    guard_close();
    return st;
}

static const s4d_kernel guarded_kernel = {
    .domain = "*", .op_type = "*", .since_version = 1,
    .supports = g_supports, .workspace_size = g_workspace, .run = g_run,
};

static const s4d_kernel *g_find_kernel(const char *domain, const char *op_type, int opset)
{
    return s4d_backend_cpu()->find_kernel(domain, op_type, opset) ? &guarded_kernel : NULL;
}

static s4d_status g_plugin_run(s4d_op_ctx *ctx)
{
    __atomic_add_fetch(&g_work, 1, __ATOMIC_RELAXED);
    guard_open();
    s4d_status st = s4d_backend_cpu()->plugin_kernel->run(ctx);
    guard_close();
    return st;
}

static const s4d_kernel guarded_plugin_kernel = {
    .domain = "*", .op_type = "plugin", .since_version = 1, .run = g_plugin_run,
};

static s4d_status g_alloc(size_t bytes, void **out, char *err, size_t errsz)
{
    *out = NULL;
    long page = sysconf(_SC_PAGESIZE);
    size_t ps = page > 0 ? (size_t)page : 4096;
    size_t size = bytes ? (bytes + ps - 1) / ps * ps : ps;
    pthread_mutex_lock(&g_lock);
    if (g_count == g_cap) {
        size_t cap = g_cap ? g_cap * 2 : 64;
        region *r = realloc(g_regions, cap * sizeof *r);
        if (!r) {
            pthread_mutex_unlock(&g_lock);
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        }
        g_regions = r;
        g_cap = cap;
    }
    void *p = mmap(NULL, size, g_open ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        pthread_mutex_unlock(&g_lock);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY,
                           "guarded device: cannot map %zu bytes", bytes);
    }
    g_regions[g_count].base = p;
    g_regions[g_count].size = size;
    g_count++;
    pthread_mutex_unlock(&g_lock);
    *out = p;
    return S4D_OK;
}

static void g_free(void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_count; i++) {
        if (g_regions[i].base == p) {
            munmap(p, g_regions[i].size);
            g_regions[i] = g_regions[--g_count];
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
}

static s4d_status g_check_pointer(const void *p, size_t bytes, char *err, size_t errsz)
{
    const char *c = p;
    int ok = 0;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_count && !ok; i++)
        ok = c >= g_regions[i].base && bytes <= g_regions[i].size &&
             (size_t)(c - g_regions[i].base) <= g_regions[i].size - bytes;
    pthread_mutex_unlock(&g_lock);
    if (!ok)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                           "%p is not memory of the guarded test device", p);
    return S4D_OK;
}

/* The context is a CPU context: the kernels underneath are the CPU's. */
static s4d_status g_context_create(const s4d_backend_ctx_options *o, s4d_backend_ctx **out,
                                   char *err, size_t errsz)
{
    return s4d_backend_cpu()->context_create(o, out, err, errsz);
}

static void g_context_destroy(s4d_backend_ctx *c)
{
    s4d_backend_cpu()->context_destroy(c);
}

static void *g_context_stream(s4d_backend_ctx *c)
{
    (void)c;
    return NULL;
}

static struct s4d_threadpool *g_context_pool(s4d_backend_ctx *c)
{
    return s4d_backend_cpu()->context_pool(c);
}

static s4d_status g_copy(s4d_backend_ctx *c, void *dst, const void *src, size_t bytes,
                         s4d_copy_kind kind, void *stream, char *err, size_t errsz)
{
    (void)c, (void)kind, (void)stream, (void)err, (void)errsz;
    __atomic_add_fetch(&g_work, 1, __ATOMIC_RELAXED);
    guard_open();
    if (bytes && dst != src)
        memmove(dst, src, bytes);
    guard_close();
    return S4D_OK;
}

static s4d_status g_memset(s4d_backend_ctx *c, void *dst, int value, size_t bytes, void *stream,
                           char *err, size_t errsz)
{
    (void)c, (void)stream, (void)err, (void)errsz;
    guard_open();
    if (bytes)
        memset(dst, value, bytes);
    guard_close();
    return S4D_OK;
}

static s4d_status g_synchronize(s4d_backend_ctx *c, void *stream, char *err, size_t errsz)
{
    (void)c, (void)stream, (void)err, (void)errsz;
    return S4D_OK;
}

static s4d_status g_event_create(void **event)
{
    const s4d_backend *cpu = s4d_backend_cpu();
    return cpu->event_create(event);
}

static void g_event_destroy(void *event)
{
    s4d_backend_cpu()->event_destroy(event);
}

static s4d_status g_event_record(void *event, void *stream)
{
    return s4d_backend_cpu()->event_record(event, stream);
}

static s4d_status g_event_elapsed(void *a, void *b, double *ms)
{
    return s4d_backend_cpu()->event_elapsed(a, b, ms);
}

static s4d_status g_stream_wait_external(void *stream, void *event, char *err, size_t errsz)
{
    (void)stream, (void)err, (void)errsz;
    long long *rec = event;
    rec[0]++;
    rec[1] = __atomic_load_n(&g_work, __ATOMIC_RELAXED);
    return S4D_OK;
}

static const s4d_backend guarded_backend = {
    .version = S4D_BACKEND_VERSION,
    .device = S4D_DEVICE_CUDA,
    .name = "guarded",
    .host_memory = 0,
    .plugin_device = S4D_DEVICE_CPU,
    .probe = g_probe,
    .target_info = g_target_info,
    .find_kernel = g_find_kernel,
    .plugin_kernel = &guarded_plugin_kernel,
    .alloc = g_alloc,
    .free = g_free,
    .check_pointer = g_check_pointer,
    .context_create = g_context_create,
    .context_destroy = g_context_destroy,
    .context_stream = g_context_stream,
    .context_pool = g_context_pool,
    .copy = g_copy,
    .memset = g_memset,
    .synchronize = g_synchronize,
    .event_create = g_event_create,
    .event_destroy = g_event_destroy,
    .event_record = g_event_record,
    .event_elapsed = g_event_elapsed,
    .stream_wait_external = g_stream_wait_external,
};

const s4d_backend *s4d_backend_guarded(void)
{
    return &guarded_backend;
}
