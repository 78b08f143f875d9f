/*
 * Execution contexts (include/s4d/engine.h): per-device arenas and
 * workspaces, bindings of host or device memory, enqueue on a stream, graph
 * capture and replay, per-layer profiling. Device memory is touched only
 * through the backend (copy, memset, kernels).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "registry/plugin_bridge.h"
#include "runtime/runtime.h"
#include "runtime/schedule.h"
#include "util/util.h"

#define ERRBUF(e) ((e) ? (e)->msg : NULL), ((e) ? sizeof((e)->msg) : 0)

typedef struct ctx_dev {
    const s4d_backend *be;
    s4d_backend_ctx *bctx;
    void *arena;
    void *workspace;
} ctx_dev;

/* A layer tensor slot that refers to a graph input or output. */
typedef struct io_slot {
    int slot; /* index into lt */
    int io;   /* 0 .. num_inputs + num_outputs - 1 */
} io_slot;

struct s4d_context {
    const s4d_engine *engine;
    ctx_dev dev[S4D_NUM_DEVICES];
    int num_io;            /* inputs then outputs */
    int *io_tensor;        /* per io: the tensor index */
    void **bound;          /* per io: caller memory, or NULL */
    s4d_memory *bound_mem; /* per io: its kind */
    void **staging;        /* per io: the context's device buffer (non-host engines) */
    void **own_host;       /* per io (outputs): the context's host buffer */
    void **view;           /* per io: what the layers read or write this run */
    void **in_event;       /* per io (inputs): the caller's event its readers wait for, or NULL */
    void **graph_events;   /* per io: the events the graph was captured with */
    unsigned char *waited; /* per stream and input: waited for its event this run */
    s4d_tensor *lt;        /* per layer: inputs then outputs, data resolved */
    int *lt_off;
    int *lt_io;            /* per layer tensor: the io whose buffer it is (views too), or -1 */
    io_slot *slots;
    int num_slots;
    void **plugin_ctx;     /* per layer: what attach() gave */
    void **ev;             /* per layer: start and end events (2 each) when profiling */
    double *times;
    int profile;
    int use_graph;
    int sync_layers; /* S4D_SYNC_LAYERS=1: wait for each layer and name the one whose kernel failed */
    void *graph;
    void **graph_views;    /* per io: the pointers the graph was captured with */
    void *stream;          /* the main device's stream */
    void *last_stream;     /* the stream of the last enqueue */
    /* A graph's layers spread over streams (schedule.h): the schedule of the graph captured
       last, stream 0 being the enqueue's; each extra stream has its own workspace. */
    int graph_streams;
    s4d_schedule sched;
    void *xstream[S4D_SCHED_MAX_STREAMS];
    void *xworkspace[S4D_SCHED_MAX_STREAMS];
    void **order_ev;       /* per layer: recorded after it when another stream waits for it */
    void *fork_ev;
    void *join_ev[S4D_SCHED_MAX_STREAMS];
    void *cap_stream;      /* captures the graph when the enqueue's stream cannot be captured */
    s4d_layer_hook hook;   /* called after each layer (the accuracy guard), or NULL */
    void *hook_user;
    char errmsg[2048];
};

static s4d_status cerr(s4d_context *c, s4d_status st, const char *fmt, ...) S4D_PRINTF(3, 4);

static s4d_status cerr(s4d_context *c, s4d_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    return st;
}

static const s4d_plan *plan_of(const s4d_context *c)
{
    return c->engine->plan;
}

static ctx_dev *main_dev(s4d_context *c)
{
    return &c->dev[plan_of(c)->device];
}

void s4d_context_destroy(s4d_context *c)
{
    if (!c)
        return;
    const s4d_plan *p = plan_of(c);
    if (c->plugin_ctx)
        for (int i = 0; i < p->num_layers; i++)
            if (p->layers[i].kind == S4D_LAYER_PLUGIN)
                s4d_bridge_detach(p->layers[i].plugin, c->plugin_ctx[i]);
    ctx_dev *md = main_dev(c);
    if (c->graph && md->be && md->be->graph_destroy)
        md->be->graph_destroy(c->graph);
    if (c->order_ev)
        for (int i = 0; i < p->num_layers; i++)
            if (c->order_ev[i])
                md->be->event_destroy(c->order_ev[i]);
    free(c->order_ev);
    if (c->fork_ev)
        md->be->event_destroy(c->fork_ev);
    for (int s = 0; s < S4D_SCHED_MAX_STREAMS; s++) {
        if (c->join_ev[s])
            md->be->event_destroy(c->join_ev[s]);
        if (c->xworkspace[s])
            md->be->free(c->xworkspace[s]);
        if (c->xstream[s])
            md->be->stream_destroy(c->xstream[s]);
    }
    if (c->cap_stream)
        md->be->stream_destroy(c->cap_stream);
    s4d_schedule_free(&c->sched);
    if (c->ev)
        for (int i = 0; i < 2 * p->num_layers; i++)
            if (c->ev[i])
                c->dev[p->layers[i / 2].device].be->event_destroy(c->ev[i]);
    for (int i = 0; i < c->num_io; i++) {
        if (c->staging && c->staging[i])
            md->be->free(c->staging[i]);
        if (c->own_host && c->own_host[i])
            s4d_aligned_free(c->own_host[i]);
    }
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        ctx_dev *dv = &c->dev[d];
        if (!dv->be)
            continue;
        dv->be->free(dv->arena);
        dv->be->free(dv->workspace);
        if (dv->bctx)
            dv->be->context_destroy(dv->bctx);
    }
    free(c->io_tensor);
    free(c->bound);
    free(c->bound_mem);
    free(c->staging);
    free(c->own_host);
    free(c->view);
    free(c->lt);
    free(c->lt_off);
    free(c->slots);
    free(c->plugin_ctx);
    free(c->ev);
    free(c->times);
    free(c->graph_views);
    free(c->in_event);
    free(c->graph_events);
    free(c->waited);
    free(c->lt_io);
    free(c);
}

static s4d_status context_setup(s4d_context *c, const s4d_context_options *o, char *err,
                                size_t errsz)
{
    const s4d_engine *e = c->engine;
    const s4d_plan *p = e->plan;
    s4d_status st;
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        if (!e->dev[d].be)
            continue;
        ctx_dev *dv = &c->dev[d];
        dv->be = e->dev[d].be;
        s4d_backend_ctx_options bo;
        memset(&bo, 0, sizeof bo);
        bo.num_threads = o->num_threads;
        bo.stream = d == (int)p->device ? o->stream : NULL;
        bo.allow_tf32 = p->tf32;
        if ((st = dv->be->context_create(&bo, &dv->bctx, err, errsz)) != S4D_OK)
            return st;
        if ((st = dv->be->alloc((size_t)p->arena_size[d], &dv->arena, err, errsz)) != S4D_OK ||
            (st = dv->be->alloc((size_t)p->workspace_size[d], &dv->workspace, err, errsz)) != S4D_OK)
            return st;
    }
    ctx_dev *md = &c->dev[p->device];
    c->stream = md->be->context_stream(md->bctx);
    c->last_stream = c->stream;
    c->num_io = p->num_inputs + p->num_outputs;
    size_t nio = (size_t)c->num_io + 1;
    c->io_tensor = calloc(nio, sizeof(int));
    c->bound = calloc(nio, sizeof(void *));
    c->bound_mem = calloc(nio, sizeof(s4d_memory));
    c->staging = calloc(nio, sizeof(void *));
    c->own_host = calloc(nio, sizeof(void *));
    c->view = calloc(nio, sizeof(void *));
    c->graph_views = calloc(nio, sizeof(void *));
    c->in_event = calloc(nio, sizeof(void *));
    c->graph_events = calloc(nio, sizeof(void *));
    c->waited = calloc(nio * S4D_SCHED_MAX_STREAMS, 1);
    c->plugin_ctx = calloc((size_t)p->num_layers + 1, sizeof(void *));
    c->times = calloc((size_t)p->num_layers + 1, sizeof(double));
    c->lt_off = calloc((size_t)p->num_layers + 1, sizeof(int));
    if (!c->io_tensor || !c->bound || !c->bound_mem || !c->staging || !c->own_host || !c->view ||
        !c->graph_views || !c->in_event || !c->graph_events || !c->waited || !c->plugin_ctx ||
        !c->times || !c->lt_off)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of host memory creating a context");
    for (int i = 0; i < c->num_io; i++) {
        int ti = i < p->num_inputs ? p->inputs[i] : p->outputs[i - p->num_inputs];
        const s4d_plan_tensor *t = &p->tensors[ti];
        c->io_tensor[i] = ti;
        if (!md->be->host_memory &&
            (st = md->be->alloc((size_t)t->bytes, &c->staging[i], err, errsz)) != S4D_OK)
            return st;
        if (i >= p->num_inputs && !(c->own_host[i] = s4d_aligned_alloc((size_t)t->bytes)))
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY,
                               "out of host memory for output '%s' (%llu bytes)", t->name,
                               (unsigned long long)t->bytes);
    }
    /* Layer tensors with their data resolved; graph inputs and outputs are patched per run. */
    int total = 0, slots = 0;
    for (int i = 0; i < p->num_layers; i++) {
        c->lt_off[i] = total;
        total += p->layers[i].num_inputs + p->layers[i].num_outputs;
    }
    c->lt = calloc((size_t)total + 1, sizeof(s4d_tensor));
    c->slots = calloc((size_t)total + 1, sizeof(io_slot));
    c->lt_io = malloc(((size_t)total + 1) * sizeof(int));
    int *root = malloc(((size_t)p->num_tensors + 1) * sizeof(int));
    if (!c->lt || !c->slots || !c->lt_io || !root) {
        free(root);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of host memory creating a context");
    }
    /* A view reads and is read through its root's buffer, wherever that lives this run;
       the loader made sure every chain of views ends. */
    s4d_plan_view_roots(p, root);
    for (int k = 0; k < total; k++)
        c->lt_io[k] = -1;
    for (int i = 0; i < p->num_layers; i++) {
        const s4d_plan_layer *l = &p->layers[i];
        s4d_tensor *in = c->lt + c->lt_off[i], *out = in + l->num_inputs;
        s4d_engine_layer_tensors(e, l, 0, in, out);
        for (int k = 0; k < l->num_inputs + l->num_outputs; k++) {
            int ti = k < l->num_inputs ? l->inputs[k] : l->outputs[k - l->num_inputs];
            if (ti < 0)
                continue;
            const s4d_plan_tensor *t = &p->tensors[root[ti]];
            s4d_tensor *v = &in[k];
            switch (t->place) {
            case S4D_PLACE_ARENA: v->data = (uint8_t *)c->dev[t->device].arena + t->offset; break;
            case S4D_PLACE_WEIGHT: break; /* set from the layer device's weights already */
            case S4D_PLACE_INPUT:
            case S4D_PLACE_OUTPUT:
                c->slots[slots].slot = c->lt_off[i] + k;
                c->slots[slots].io = t->place == S4D_PLACE_INPUT
                                         ? t->io_index
                                         : p->num_inputs + t->io_index;
                c->lt_io[c->lt_off[i] + k] = c->slots[slots].io;
                slots++;
                v->data = NULL;
                break;
            case S4D_PLACE_VIEW: break; /* not a root */
            }
        }
    }
    c->num_slots = slots;
    free(root);
    for (int i = 0; i < p->num_layers; i++) {
        const s4d_plan_layer *l = &p->layers[i];
        if (l->kind != S4D_LAYER_PLUGIN)
            continue;
        ctx_dev *dv = &c->dev[l->device];
        st = s4d_bridge_attach(l->plugin, l->name, dv->be->plugin_device,
                               dv->be->context_stream(dv->bctx), &c->plugin_ctx[i], err, errsz);
        if (st != S4D_OK)
            return st;
    }
    if (c->profile) {
        c->ev = calloc(2 * (size_t)p->num_layers + 1, sizeof(void *));
        if (!c->ev)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of host memory");
        for (int i = 0; i < 2 * p->num_layers; i++)
            if ((st = c->dev[p->layers[i / 2].device].be->event_create(&c->ev[i])) != S4D_OK)
                return s4d_fmt_err(err, errsz, st, "cannot create profiling events");
    }
    return S4D_OK;
}

s4d_status s4d_context_create(const s4d_engine *e, const s4d_context_options *opts,
                              s4d_context **out, s4d_errbuf *err)
{
    if (!out)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!e)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "engine is NULL");
    s4d_context_options o;
    s4d_context_options_init(&o);
    if (opts) {
        size_t have = opts->struct_size;
        if (have < sizeof(size_t) || have > 4096)
            return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG,
                               "s4d_context_options.struct_size is %zu; call "
                               "s4d_context_options_init() first",
                               have);
        memcpy(&o, opts, have < sizeof o ? have : sizeof o);
        o.struct_size = sizeof o;
    }
    s4d_context *c = calloc(1, sizeof *c);
    if (!c)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY, "out of memory creating a context");
    c->engine = e;
    c->profile = o.profile != 0;
    c->use_graph = o.use_graph != 0;
    const char *sync_env = getenv("S4D_SYNC_LAYERS");
    c->sync_layers = sync_env && sync_env[0] && strcmp(sync_env, "0") != 0;
    c->graph_streams = o.graph_streams;
    const char *gs_env = getenv("S4D_GRAPH_STREAMS");
    if (c->graph_streams <= 0)
        c->graph_streams = gs_env && gs_env[0] ? atoi(gs_env) : 4;
    if (c->graph_streams < 1)
        c->graph_streams = 1;
    if (c->graph_streams > S4D_SCHED_MAX_STREAMS)
        c->graph_streams = S4D_SCHED_MAX_STREAMS;
    char msg[1024];
    msg[0] = 0;
    s4d_status st = context_setup(c, &o, msg, sizeof msg);
    if (st != S4D_OK) {
        s4d_fmt_err(ERRBUF(err), st, "creating a context: %s", msg);
        s4d_context_destroy(c);
        return st;
    }
    *out = c;
    return S4D_OK;
}

const char *s4d_context_errmsg(const s4d_context *c)
{
    return c ? c->errmsg : "context is NULL";
}

/* The io index of a graph input or output name, or -1. */
static int find_io(const s4d_context *c, const char *name)
{
    const s4d_plan *p = plan_of(c);
    for (int i = 0; i < c->num_io; i++)
        if (strcmp(p->tensors[c->io_tensor[i]].name, name) == 0)
            return i;
    return -1;
}

static void list_io(const s4d_context *c, char *buf, size_t size)
{
    const s4d_plan *p = plan_of(c);
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < c->num_io && used + 1 < size; i++) {
        int k = snprintf(buf + used, size - used, "%s'%s' (%s)", used ? ", " : "",
                         p->tensors[c->io_tensor[i]].name, i < p->num_inputs ? "input" : "output");
        if (k < 0)
            break;
        used += (size_t)k < size - used ? (size_t)k : size - used - 1;
    }
}

s4d_status s4d_context_bind_memory(s4d_context *c, const char *name, s4d_dtype dtype, int rank,
                                   const int64_t *dims, void *data, s4d_memory memory)
{
    if (!c)
        return S4D_ERR_INVALID_ARG;
    if (!name)
        return cerr(c, S4D_ERR_INVALID_ARG, "bind: name is NULL");
    if (memory != S4D_MEMORY_HOST && memory != S4D_MEMORY_DEVICE)
        return cerr(c, S4D_ERR_INVALID_ARG, "bind '%s': unknown memory kind %d", name, (int)memory);
    const s4d_plan *p = plan_of(c);
    int io = find_io(c, name);
    if (io < 0) {
        char names[1024];
        list_io(c, names, sizeof names);
        return cerr(c, S4D_ERR_NOT_FOUND, "bind: no input or output named '%s'; the engine has %s",
                    name, names);
    }
    const s4d_plan_tensor *t = &p->tensors[c->io_tensor[io]];
    if (!data) {
        c->bound[io] = NULL;
        return S4D_OK;
    }
    if (dtype != t->dtype)
        return cerr(c, S4D_ERR_DTYPE, "bind '%s': dtype %s, the engine expects %s", name,
                    s4d_dtype_name(dtype), s4d_dtype_name(t->dtype));
    int same = rank == t->rank && (rank == 0 || dims);
    for (int i = 0; same && i < rank; i++)
        same = dims[i] == t->dims[i];
    if (!same) {
        char want[256], got[256];
        s4d_dims_str(t->rank, t->dims, want, sizeof want);
        if (dims && rank >= 0 && rank <= S4D_MAX_DIMS)
            s4d_dims_str(rank, dims, got, sizeof got);
        else
            snprintf(got, sizeof got, "rank %d", rank);
        return cerr(c, S4D_ERR_SHAPE, "bind '%s': shape %s, the engine expects %s (static shapes)",
                    name, got, want);
    }
    ctx_dev *md = main_dev(c);
    if (memory == S4D_MEMORY_DEVICE && !md->be->host_memory) {
        char msg[512];
        if (md->be->check_pointer(data, (size_t)t->bytes, msg, sizeof msg) != S4D_OK)
            return cerr(c, S4D_ERR_INVALID_ARG,
                        "bind '%s': bound as %s device memory, but %s (bind host memory as "
                        "S4D_MEMORY_HOST)",
                        name, s4d_device_name(p->device), msg);
    }
    if (memory == S4D_MEMORY_HOST && !md->be->host_memory) {
        char msg[512];
        if (md->be->check_pointer(data, 1, msg, sizeof msg) == S4D_OK)
            return cerr(c, S4D_ERR_INVALID_ARG,
                        "bind '%s': bound as host memory, but it is %s device memory (bind it "
                        "as S4D_MEMORY_DEVICE)",
                        name, s4d_device_name(p->device));
    }
    c->bound[io] = data;
    c->bound_mem[io] = memory;
    return S4D_OK;
}

s4d_status s4d_context_set_input_event(s4d_context *c, const char *name, void *event)
{
    if (!c)
        return S4D_ERR_INVALID_ARG;
    if (!name)
        return cerr(c, S4D_ERR_INVALID_ARG, "set_input_event: name is NULL");
    const s4d_plan *p = plan_of(c);
    int io = find_io(c, name);
    if (io < 0 || io >= p->num_inputs) {
        char names[1024];
        list_io(c, names, sizeof names);
        return cerr(c, S4D_ERR_NOT_FOUND, "set_input_event: no input named '%s'; the engine has %s",
                    name, names);
    }
    const s4d_backend *be = main_dev(c)->be;
    if (event && !be->stream_wait_external)
        return cerr(c, S4D_ERR_UNSUPPORTED,
                    "set_input_event '%s': the engine runs on %s, whose runs are done on return "
                    "and wait for no event (input events are for device engines)",
                    name, s4d_device_name(p->device));
    c->in_event[io] = event;
    return S4D_OK;
}

s4d_status s4d_context_bind(s4d_context *c, const char *name, s4d_dtype dtype, int rank,
                            const int64_t *dims, void *data)
{
    return s4d_context_bind_memory(c, name, dtype, rank, dims, data, S4D_MEMORY_HOST);
}

/* What the layers see for io i this run. */
static void *io_view(s4d_context *c, int i)
{
    const s4d_plan *p = plan_of(c);
    ctx_dev *md = main_dev(c);
    if (md->be->host_memory)
        return c->bound[i] ? c->bound[i] : c->own_host[i];
    if (c->bound[i] && c->bound_mem[i] == S4D_MEMORY_DEVICE)
        return c->bound[i];
    (void)p;
    return c->staging[i];
}

/*
 * Before layer i runs on `stream` (stream s of the run's schedule): a wait for the caller's
 * event of each device-bound input it reads (directly or through a view) that this stream
 * has not waited for yet this run. Layers that read no such input start without waiting.
 */
static s4d_status wait_input_events(s4d_context *c, int i, int s, void *stream)
{
    const s4d_plan *p = plan_of(c);
    const s4d_plan_layer *l = &p->layers[i];
    const s4d_backend *be = main_dev(c)->be;
    for (int k = 0; k < l->num_inputs; k++) {
        int io = c->lt_io[c->lt_off[i] + k];
        if (io < 0 || io >= p->num_inputs || !c->in_event[io] ||
            c->bound_mem[io] != S4D_MEMORY_DEVICE)
            continue;
        unsigned char *w = &c->waited[(size_t)s * (size_t)c->num_io + (size_t)io];
        if (*w)
            continue;
        char msg[512];
        msg[0] = 0;
        s4d_status st = be->stream_wait_external(stream, c->in_event[io], msg, sizeof msg);
        if (st != S4D_OK)
            return cerr(c, st, "run: layer '%s' waiting for the event of input '%s': %s", l->name,
                        p->tensors[c->io_tensor[io]].name, msg);
        *w = 1;
    }
    return S4D_OK;
}

/* Starts a run's waits afresh; whether any input has an event to wait for (when none has,
   the layers skip the lookup). */
static int reset_input_waits(s4d_context *c)
{
    memset(c->waited, 0, (size_t)c->num_io * S4D_SCHED_MAX_STREAMS);
    for (int i = 0; i < plan_of(c)->num_inputs; i++)
        if (c->in_event[i] && c->bound_mem[i] == S4D_MEMORY_DEVICE)
            return 1;
    return 0;
}

/* Runs layer i (or copies, for a copy layer) on its device. */
static s4d_status run_layer(s4d_context *c, int i, void *stream, void *workspace)
{
    const s4d_plan *p = plan_of(c);
    const s4d_plan_layer *l = &p->layers[i];
    ctx_dev *dv = &c->dev[l->device];
    s4d_tensor *in = c->lt + c->lt_off[i], *out = in + l->num_inputs;
    char msg[1024];
    msg[0] = 0;
    s4d_status st;
    if (l->kind == S4D_LAYER_COPY) {
        const s4d_plan_tensor *src = &p->tensors[l->inputs[0]];
        s4d_copy_kind kind = src->device == S4D_DEVICE_CPU ? S4D_COPY_HOST_TO_DEVICE
                             : p->tensors[l->outputs[0]].device == S4D_DEVICE_CPU
                                 ? S4D_COPY_DEVICE_TO_HOST
                                 : S4D_COPY_DEVICE_TO_DEVICE;
        st = dv->be->copy(dv->bctx, out[0].data, in[0].data, (size_t)src->bytes, kind, stream, msg,
                          sizeof msg);
        /* A host layer may read it next: the copy must have landed. */
        if (st == S4D_OK && kind == S4D_COPY_DEVICE_TO_HOST)
            st = dv->be->synchronize(dv->bctx, stream, msg, sizeof msg);
    } else {
        s4d_op_ctx ctx;
        s4d_plan_layer_ctx(l, in, out, msg, sizeof msg, &ctx);
        ctx.pool = dv->be->context_pool(dv->bctx);
        ctx.workspace = workspace ? workspace : dv->workspace;
        ctx.workspace_size = (size_t)l->workspace;
        ctx.state = l->kernel_state;
        ctx.stream = l->device == p->device ? stream : dv->be->context_stream(dv->bctx);
        ctx.backend_ctx = dv->bctx;
        ctx.plugin = l->plugin;
        ctx.plugin_ctx = c->plugin_ctx[i];
        st = l->kernel->run(&ctx);
    }
    if (st != S4D_OK)
        return cerr(c, st, "run: layer '%s' (%s) failed: %s", l->name, l->op_type,
                    msg[0] ? msg : s4d_status_string(st));
    return S4D_OK;
}

static s4d_status run_layers(s4d_context *c, void *stream)
{
    const s4d_plan *p = plan_of(c);
    const int events = reset_input_waits(c);
    for (int i = 0; i < p->num_layers; i++) {
        const s4d_plan_layer *l = &p->layers[i];
        const s4d_backend *be = c->dev[l->device].be;
        s4d_status st;
        /* A view's output already holds its input's bytes, a Concat in place its inputs'
           (s4d_plan_concat_in_place): no kernel, no graph node, no time; the hook still
           sees the output. */
        int skip = c->engine->runs_nothing[i];
        if (events && !skip && (st = wait_input_events(c, i, 0, stream)) != S4D_OK)
            return st;
        if (c->profile && !skip)
            be->event_record(c->ev[2 * i], stream);
        if (!skip && (st = run_layer(c, i, stream, NULL)) != S4D_OK)
            return st;
        if (c->sync_layers && !skip) {
            /* An asynchronous fault surfaces at the next call that waits: wait here, so the
               error names the layer whose kernels caused it. */
            char msg[512];
            msg[0] = 0;
            st = be->synchronize(c->dev[l->device].bctx, stream, msg, sizeof msg);
            if (st != S4D_OK)
                return cerr(c, st, "run: layer '%s' (%s) failed on the device (S4D_SYNC_LAYERS): %s",
                            l->name, l->op_type, msg[0] ? msg : s4d_status_string(st));
        }
        if (c->hook && (st = c->hook(c, i, c->hook_user)) != S4D_OK)
            return st;
        if (c->profile && !skip)
            be->event_record(c->ev[2 * i + 1], stream);
    }
    return S4D_OK;
}

/* Whether this run can replay (or capture) a graph of the layers. */
static int graph_eligible(const s4d_context *c)
{
    const s4d_plan *p = plan_of(c);
    const s4d_backend *be = c->dev[p->device].be;
    if (!c->use_graph || c->profile || c->hook || c->sync_layers || !be->graph_begin)
        return 0;
    for (int i = 0; i < p->num_layers; i++)
        if (p->layers[i].device != p->device)
            return 0;
    return 1;
}

/*
 * The schedule of the layers over up to c->graph_streams streams, from the bytes each
 * layer reads and writes this run, with the streams, workspaces and events it needs.
 * Returns the number of streams to capture on (1: the enqueue's stream alone).
 */
static s4d_status make_schedule(s4d_context *c, int *num_streams)
{
    const s4d_plan *p = plan_of(c);
    ctx_dev *md = main_dev(c);
    const s4d_backend *be = md->be;
    *num_streams = 1;
    s4d_schedule_free(&c->sched);
    if (c->graph_streams < 2 || p->num_layers < 2 || !be->stream_create || !be->stream_wait ||
        !be->order_event_create)
        return S4D_OK;
    int total = c->lt_off[p->num_layers - 1] + p->layers[p->num_layers - 1].num_inputs +
                p->layers[p->num_layers - 1].num_outputs;
    s4d_sched_layer *sl = calloc((size_t)p->num_layers + 1, sizeof *sl);
    s4d_sched_range *rg = calloc((size_t)total + 1, sizeof *rg);
    if (!sl || !rg) {
        free(sl);
        free(rg);
        return cerr(c, S4D_ERR_NO_MEMORY, "run: out of host memory scheduling the graph");
    }
    for (int i = 0; i < p->num_layers; i++) {
        const s4d_plan_layer *l = &p->layers[i];
        s4d_sched_range *r = rg + c->lt_off[i];
        const s4d_tensor *t = c->lt + c->lt_off[i];
        for (int k = 0; k < l->num_inputs + l->num_outputs; k++) {
            int ti = k < l->num_inputs ? l->inputs[k] : l->outputs[k - l->num_inputs];
            if (ti < 0 || !t[k].data)
                continue;
            r[k].lo = (uintptr_t)t[k].data;
            r[k].hi = r[k].lo + (uintptr_t)p->tensors[ti].bytes;
        }
        sl[i].skip = c->engine->runs_nothing[i];
        sl[i].num_reads = l->num_inputs;
        sl[i].reads = r;
        sl[i].num_writes = l->num_outputs;
        sl[i].writes = r + l->num_inputs;
    }
    char msg[512];
    s4d_status st = s4d_schedule_make(sl, p->num_layers, c->graph_streams, &c->sched, msg, sizeof msg);
    /* Cheap next to a capture, and a wrong schedule would be a silent race: check it. */
    if (st == S4D_OK)
        st = s4d_schedule_verify(sl, p->num_layers, &c->sched, msg, sizeof msg);
    free(sl);
    free(rg);
    if (st != S4D_OK)
        return cerr(c, st, "run: scheduling the graph's layers: %s", msg);
    const int ns = c->sched.num_streams;
    if (!c->order_ev && !(c->order_ev = calloc((size_t)p->num_layers + 1, sizeof(void *))))
        return cerr(c, S4D_ERR_NO_MEMORY, "run: out of host memory scheduling the graph");
    for (int i = 0; st == S4D_OK && i < p->num_layers; i++)
        if (c->sched.record[i] && !c->order_ev[i])
            st = be->order_event_create(&c->order_ev[i]);
    if (st == S4D_OK && ns > 1 && !c->fork_ev)
        st = be->order_event_create(&c->fork_ev);
    for (int s = 1; st == S4D_OK && s < ns; s++) {
        if (!c->join_ev[s])
            st = be->order_event_create(&c->join_ev[s]);
        if (st == S4D_OK && !c->xstream[s])
            st = be->stream_create(md->bctx, &c->xstream[s], msg, sizeof msg);
        if (st == S4D_OK && !c->xworkspace[s] && p->workspace_size[p->device])
            st = be->alloc((size_t)p->workspace_size[p->device], &c->xworkspace[s], msg, sizeof msg);
    }
    if (st != S4D_OK)
        return cerr(c, st, "run: the graph's streams: %s", msg[0] ? msg : s4d_status_string(st));
    *num_streams = ns;
    return S4D_OK;
}

/* The layers on the schedule's streams (stream 0: the enqueue's), forked from and joined
   back into `stream`; the join happens even when a layer fails, so the capture can end. */
static s4d_status run_scheduled(s4d_context *c, void *stream)
{
    const s4d_plan *p = plan_of(c);
    const s4d_backend *be = main_dev(c)->be;
    const s4d_schedule *sc = &c->sched;
    void *sts[S4D_SCHED_MAX_STREAMS];
    sts[0] = stream;
    const int events = reset_input_waits(c);
    s4d_status st = be->event_record(c->fork_ev, stream);
    for (int s = 1; s < sc->num_streams; s++) {
        sts[s] = c->xstream[s];
        if (st == S4D_OK)
            st = be->stream_wait(sts[s], c->fork_ev);
    }
    if (st != S4D_OK)
        st = cerr(c, st, "run: forking the graph's streams failed");
    for (int i = 0; st == S4D_OK && i < p->num_layers; i++) {
        int s = sc->stream[i];
        if (s < 0)
            continue;
        for (int w = sc->wait_off[i]; st == S4D_OK && w < sc->wait_off[i + 1]; w++)
            st = be->stream_wait(sts[s], c->order_ev[sc->waits[w]]);
        if (st != S4D_OK) {
            st = cerr(c, st, "run: ordering layer '%s' after another stream failed", p->layers[i].name);
            break;
        }
        if (events)
            st = wait_input_events(c, i, s, sts[s]);
        if (st == S4D_OK)
            st = run_layer(c, i, sts[s], s ? c->xworkspace[s] : NULL);
        if (st == S4D_OK && sc->record[i] && be->event_record(c->order_ev[i], sts[s]) != S4D_OK)
            st = cerr(c, S4D_ERR_CUDA, "run: recording the end of layer '%s' failed", p->layers[i].name);
    }
    for (int s = 1; s < sc->num_streams; s++) {
        s4d_status js = be->event_record(c->join_ev[s], sts[s]);
        if (js == S4D_OK)
            js = be->stream_wait(stream, c->join_ev[s]);
        if (js != S4D_OK && st == S4D_OK)
            st = cerr(c, js, "run: joining the graph's streams failed");
    }
    return st;
}

static s4d_status run_graph(s4d_context *c, void *stream)
{
    const s4d_backend *be = main_dev(c)->be;
    char msg[1024];
    int same = c->graph != NULL;
    for (int i = 0; same && i < c->num_io; i++)
        same = c->graph_views[i] == c->view[i] && c->graph_events[i] == c->in_event[i];
    if (!same) {
        if (c->graph)
            be->graph_destroy(c->graph);
        c->graph = NULL;
        int ns = 1;
        s4d_status st = make_schedule(c, &ns);
        if (st != S4D_OK)
            return st;
        /* A stream that cannot be captured (CUDA's legacy default stream) gets the graph
           captured on a stream of the context's; the replay still goes on `stream`. */
        void *cap = stream;
        if (be->stream_capturable && !be->stream_capturable(stream)) {
            if (!c->cap_stream &&
                (st = be->stream_create(main_dev(c)->bctx, &c->cap_stream, msg, sizeof msg)) != S4D_OK)
                return cerr(c, st, "run: a stream to capture the graph on: %s", msg);
            cap = c->cap_stream;
        }
        st = be->graph_begin(cap, msg, sizeof msg);
        if (st != S4D_OK)
            return cerr(c, st, "run: starting graph capture failed: %s", msg);
        s4d_status rst = ns > 1 ? run_scheduled(c, cap) : run_layers(c, cap);
        void *g = NULL;
        st = be->graph_end(cap, &g, msg, sizeof msg);
        if (rst != S4D_OK) {
            if (g)
                be->graph_destroy(g);
            return rst;
        }
        if (st != S4D_OK)
            return cerr(c, st, "run: graph capture failed: %s", msg);
        c->graph = g;
        memcpy(c->graph_views, c->view, sizeof(void *) * (size_t)c->num_io);
        memcpy(c->graph_events, c->in_event, sizeof(void *) * (size_t)c->num_io);
    }
    s4d_status st = be->graph_launch(c->graph, stream, msg, sizeof msg);
    if (st != S4D_OK)
        return cerr(c, st, "run: graph launch failed: %s", msg);
    return S4D_OK;
}

s4d_status s4d_context_enqueue(s4d_context *c, void *stream)
{
    if (!c)
        return S4D_ERR_INVALID_ARG;
    const s4d_plan *p = plan_of(c);
    ctx_dev *md = main_dev(c);
    if (!stream)
        stream = c->stream;
    char msg[1024];
    for (int i = 0; i < p->num_inputs; i++) {
        const s4d_plan_tensor *t = &p->tensors[c->io_tensor[i]];
        if (!c->bound[i])
            return cerr(c, S4D_ERR_NOT_FOUND, "run: input '%s' is not bound (s4d_context_bind)",
                        t->name);
        /* An input whose values were fixed at build must carry them. */
        int host = md->be->host_memory || c->bound_mem[i] == S4D_MEMORY_HOST;
        if (t->frozen && host && t->bytes &&
            memcmp(c->bound[i], p->weights + t->offset, (size_t)t->bytes) != 0)
            return cerr(c, S4D_ERR_SHAPE,
                        "run: input '%s' was fixed at build (--shapes) and is bound with other "
                        "values; rebuild the engine for these values",
                        t->name);
    }
    for (int i = 0; i < c->num_io; i++)
        c->view[i] = io_view(c, i);
    for (int k = 0; k < c->num_slots; k++)
        c->lt[c->slots[k].slot].data = c->view[c->slots[k].io];
    s4d_status st;
    /* Host-bound inputs of a device engine: copied in on the stream. */
    if (!md->be->host_memory) {
        for (int i = 0; i < p->num_inputs; i++) {
            if (c->bound_mem[i] == S4D_MEMORY_DEVICE)
                continue;
            const s4d_plan_tensor *t = &p->tensors[c->io_tensor[i]];
            /* A host-bound input is read by its copy: the copy waits for the event. */
            if (c->in_event[i] &&
                (st = md->be->stream_wait_external(stream, c->in_event[i], msg, sizeof msg)) !=
                    S4D_OK)
                return cerr(c, st, "run: waiting for the event of input '%s': %s", t->name, msg);
            st = md->be->copy(md->bctx, c->staging[i], c->bound[i], (size_t)t->bytes,
                              S4D_COPY_HOST_TO_DEVICE, stream, msg, sizeof msg);
            if (st != S4D_OK)
                return cerr(c, st, "run: copying input '%s' to the device failed: %s", t->name,
                            msg);
        }
    }
    st = graph_eligible(c) ? run_graph(c, stream) : run_layers(c, stream);
    if (st != S4D_OK)
        return st;
    for (int i = p->num_inputs; i < c->num_io; i++) {
        const s4d_plan_tensor *t = &p->tensors[c->io_tensor[i]];
        if (t->const_output && t->bytes) {
            st = md->be->copy(md->bctx, c->view[i],
                              (uint8_t *)c->engine->dev[p->device].weights + t->offset,
                              (size_t)t->bytes, S4D_COPY_DEVICE_TO_DEVICE, stream, msg, sizeof msg);
            if (st != S4D_OK)
                return cerr(c, st, "run: constant output '%s': %s", t->name, msg);
        }
        if (md->be->host_memory || (c->bound[i] && c->bound_mem[i] == S4D_MEMORY_DEVICE))
            continue;
        void *dst = c->bound[i] ? c->bound[i] : c->own_host[i];
        st = md->be->copy(md->bctx, dst, c->view[i], (size_t)t->bytes, S4D_COPY_DEVICE_TO_HOST,
                          stream, msg, sizeof msg);
        if (st != S4D_OK)
            return cerr(c, st, "run: copying output '%s' to the host failed: %s", t->name, msg);
    }
    c->last_stream = stream;
    return S4D_OK;
}

s4d_status s4d_context_synchronize(s4d_context *c)
{
    if (!c)
        return S4D_ERR_INVALID_ARG;
    const s4d_plan *p = plan_of(c);
    ctx_dev *md = main_dev(c);
    char msg[1024];
    s4d_status st = md->be->synchronize(md->bctx, c->last_stream, msg, sizeof msg);
    if (st != S4D_OK)
        return cerr(c, st, "synchronize: %s", msg);
    if (c->profile) {
        for (int i = 0; i < p->num_layers; i++) {
            double ms = 0;
            if (!c->engine->runs_nothing[i])
                c->dev[p->layers[i].device].be->event_elapsed(c->ev[2 * i], c->ev[2 * i + 1],
                                                              &ms);
            c->times[i] = ms;
        }
    }
    return S4D_OK;
}

s4d_status s4d_context_run(s4d_context *c, void *stream)
{
    s4d_status st = s4d_context_enqueue(c, stream);
    if (st != S4D_OK)
        return st;
    return s4d_context_synchronize(c);
}

s4d_status s4d_context_output(s4d_context *c, const char *name, const void **data,
                              s4d_tensor_info *info)
{
    if (!c || !data)
        return S4D_ERR_INVALID_ARG;
    *data = NULL;
    const s4d_plan *p = plan_of(c);
    int io = name ? find_io(c, name) : -1;
    if (io < p->num_inputs)
        return cerr(c, S4D_ERR_NOT_FOUND, "no output named '%s'", name ? name : "(null)");
    const s4d_plan_tensor *t = &p->tensors[c->io_tensor[io]];
    *data = c->bound[io] ? c->bound[io] : c->own_host[io];
    if (info) {
        memset(info, 0, sizeof *info);
        info->name = t->name;
        info->dtype = t->dtype;
        info->rank = t->rank;
        memcpy(info->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
        info->bytes = (size_t)t->bytes;
    }
    return S4D_OK;
}

s4d_status s4d_context_device_buffer(s4d_context *c, const char *name, void **data)
{
    if (!c || !data)
        return S4D_ERR_INVALID_ARG;
    *data = NULL;
    int io = name ? find_io(c, name) : -1;
    if (io < 0)
        return cerr(c, S4D_ERR_NOT_FOUND, "no input or output named '%s'", name ? name : "(null)");
    *data = c->staging[io] ? c->staging[io] : c->own_host[io];
    if (!*data)
        return cerr(c, S4D_ERR_NOT_FOUND,
                    "'%s': a CPU engine keeps no buffer of its own for an input", name);
    return S4D_OK;
}

s4d_status s4d_context_layer_time(const s4d_context *c, int index, double *ms)
{
    if (!c || !ms || index < 0 || index >= plan_of(c)->num_layers)
        return S4D_ERR_INVALID_ARG;
    *ms = c->times[index];
    return S4D_OK;
}

void s4d_context_set_layer_hook(s4d_context *c, s4d_layer_hook hook, void *user)
{
    c->hook = hook;
    c->hook_user = user;
}

s4d_status s4d_context_layer_output(s4d_context *c, int layer, int index, void *dst)
{
    const s4d_plan *p = plan_of(c);
    if (layer < 0 || layer >= p->num_layers || index < 0 ||
        index >= p->layers[layer].num_outputs)
        return cerr(c, S4D_ERR_INVALID_ARG, "layer %d output %d: out of range", layer, index);
    const s4d_plan_layer *l = &p->layers[layer];
    const s4d_plan_tensor *t = &p->tensors[l->outputs[index]];
    const s4d_tensor *out = c->lt + c->lt_off[layer] + l->num_inputs + index;
    ctx_dev *dv = &c->dev[t->device];
    char msg[1024];
    s4d_status st = dv->be->copy(dv->bctx, dst, out->data, (size_t)t->bytes,
                                 dv->be->host_memory ? S4D_COPY_DEVICE_TO_DEVICE
                                                     : S4D_COPY_DEVICE_TO_HOST,
                                 NULL, msg, sizeof msg);
    if (st == S4D_OK)
        st = dv->be->synchronize(dv->bctx, NULL, msg, sizeof msg);
    if (st != S4D_OK)
        return cerr(c, st, "reading layer '%s' output %d: %s", l->name, index, msg);
    return S4D_OK;
}
