/*
 * The public engine API (include/s4d/engine.h): engine handles over a plan,
 * execution contexts, bind by name, run.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "builder/builder.h"
#include "engine/plan.h"
#include "engine/plugin_bridge.h"
#include "onnx/onnx_import.h"
#include "runtime/backend.h"
#include "s4d/engine.h"
#include "util/util.h"

struct s4d_engine {
    s4d_plan *plan;
    void *registry;
    char **plugin_labels; /* "ns::name:version" per layer (NULL for op layers) */
    char errmsg[2048];
};

struct s4d_context {
    const s4d_engine *engine;
    uint8_t *arena;
    void *workspace;
    void **bound;          /* per tensor: caller memory for INPUT/OUTPUT, else NULL */
    void **own_outputs;    /* per output: the context's buffer */
    s4d_tensor *views;     /* per tensor, data resolved at run time */
    s4d_tensor *scratch_in;
    s4d_tensor *scratch_out;
    double *times;
    const s4d_backend *backend;
    void *backend_state;   /* per-context backend state (the CPU thread pool) */
    int profile;
    int num_threads;
    char errmsg[2048];
};

#define ERRBUF(e) ((e) ? (e)->msg : NULL), ((e) ? sizeof((e)->msg) : 0)

void s4d_build_options_init(s4d_build_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->device = S4D_DEVICE_CPU;
    o->fold_constants = 1;
}

void s4d_load_options_init(s4d_load_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

void s4d_context_options_init(s4d_context_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
}

void s4d_free(void *p)
{
    free(p);
}

static void engine_free(s4d_engine *e)
{
    if (!e)
        return;
    if (e->plugin_labels && e->plan)
        for (int i = 0; i < e->plan->num_layers; i++)
            free(e->plugin_labels[i]);
    free(e->plugin_labels);
    s4d_plan_destroy(e->plan);
    free(e);
}

/* Resolves op defs and plugin instances, and makes the labels the queries return. */
static s4d_status engine_finish(s4d_engine *e, char *err, size_t errsz)
{
    s4d_plan *p = e->plan;
    e->plugin_labels = calloc((size_t)p->num_layers + 1, sizeof(char *));
    if (!e->plugin_labels)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < p->num_layers; i++) {
        s4d_plan_layer *l = &p->layers[i];
        switch (l->kind) {
        case S4D_LAYER_OP:
            if (!l->def) {
                const s4d_backend *be = s4d_backend_for(l->device);
                l->def = be ? be->find_op(l->domain, l->op_type, l->opset) : NULL;
            }
            if (!l->def)
                return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                                   "layer '%s': op (domain '%s', op_type '%s', opset %d) is not "
                                   "in this build of s4d",
                                   l->name, l->domain, l->op_type, l->opset);
            break;
        case S4D_LAYER_PLUGIN: {
            if (!l->plugin) {
                s4d_status st = s4d_bridge_deserialize(e->registry, l->plugin_namespace,
                                                       l->plugin_name, l->plugin_version,
                                                       l->payload, (size_t)l->payload_size,
                                                       &l->plugin, err, errsz);
                if (st != S4D_OK)
                    return st;
            }
            size_t n = strlen(l->plugin_namespace) + strlen(l->plugin_name) +
                       strlen(l->plugin_version) + 8;
            e->plugin_labels[i] = malloc(n);
            if (!e->plugin_labels[i])
                return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
            snprintf(e->plugin_labels[i], n, "%s::%s:%s", l->plugin_namespace, l->plugin_name,
                     l->plugin_version);
            break;
        }
        }
    }
    return S4D_OK;
}

/*
 * Option structs grow by appending fields: a caller built against an older
 * header passes a smaller struct_size, and the fields it does not have keep
 * their defaults.
 */
static s4d_status copy_opts(void *dst, size_t dst_size, const void *src, size_t have,
                            const char *what, s4d_errbuf *err)
{
    if (have < sizeof(size_t) || have > 4096)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG,
                           "%s.struct_size is %zu; call %s_init() first", what, have, what);
    memcpy(dst, src, have < dst_size ? have : dst_size);
    *(size_t *)dst = dst_size;
    return S4D_OK;
}

s4d_status s4d_engine_build_onnx_memory(const void *data, size_t size,
                                        const s4d_build_options *opts, s4d_engine **out,
                                        s4d_errbuf *err)
{
    if (!out)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!data && size)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "data is NULL");
    s4d_build_options o;
    s4d_build_options_init(&o);
    if (opts) {
        s4d_status st = copy_opts(&o, sizeof o, opts, opts->struct_size, "s4d_build_options", err);
        if (st != S4D_OK)
            return st;
    }
    s4d_build_config cfg;
    memset(&cfg, 0, sizeof cfg);
    switch (o.device) {
    case S4D_DEVICE_CPU: cfg.device = S4D_DEVICE_KIND_CPU; break;
    case S4D_DEVICE_CUDA: cfg.device = S4D_DEVICE_KIND_CUDA; break;
    default:
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "unknown device %d", (int)o.device);
    }
    cfg.fp16 = o.fp16 != 0;
    cfg.fold_constants = o.fold_constants != 0;
    cfg.registry = o.registry;

    s4d_ir_graph *g = NULL;
    s4d_status st = s4d_onnx_import(data, size, &g, ERRBUF(err));
    if (st != S4D_OK)
        return st;
    s4d_engine *e = calloc(1, sizeof *e);
    if (!e) {
        s4d_ir_graph_destroy(g);
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY, "out of memory");
    }
    e->registry = o.registry;
    st = s4d_build_plan(g, &cfg, &e->plan, ERRBUF(err));
    s4d_ir_graph_destroy(g);
    if (st == S4D_OK)
        st = engine_finish(e, ERRBUF(err));
    if (st != S4D_OK) {
        engine_free(e);
        return st;
    }
    *out = e;
    return S4D_OK;
}

/* Reads a whole file and hands its bytes to one of the *_memory entry points;
   a failure message is prefixed with the path. */
typedef s4d_status (*from_memory_fn)(const void *data, size_t size, const void *opts,
                                     s4d_engine **out, s4d_errbuf *err);

static s4d_status engine_from_file(const char *path, const void *opts, s4d_engine **out,
                                   s4d_errbuf *err, from_memory_fn from_memory)
{
    if (out)
        *out = NULL;
    if (!path || !out)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "path or out is NULL");
    uint8_t *data;
    size_t size;
    s4d_status st = s4d_read_file(path, &data, &size, ERRBUF(err));
    if (st != S4D_OK)
        return st;
    st = from_memory(data, size, opts, out, err);
    if (st != S4D_OK && err) {
        char tmp[sizeof err->msg];
        memcpy(tmp, err->msg, sizeof tmp);
        s4d_fmt_err(err->msg, sizeof err->msg, st, "%s: %s", path, tmp);
    }
    free(data);
    return st;
}

static s4d_status build_from_memory(const void *data, size_t size, const void *opts,
                                    s4d_engine **out, s4d_errbuf *err)
{
    return s4d_engine_build_onnx_memory(data, size, opts, out, err);
}

static s4d_status load_from_memory(const void *data, size_t size, const void *opts,
                                   s4d_engine **out, s4d_errbuf *err)
{
    return s4d_engine_load_memory(data, size, opts, out, err);
}

s4d_status s4d_engine_build_onnx_file(const char *path, const s4d_build_options *opts,
                                      s4d_engine **out, s4d_errbuf *err)
{
    return engine_from_file(path, opts, out, err, build_from_memory);
}

s4d_status s4d_engine_load_memory(const void *data, size_t size, const s4d_load_options *opts,
                                  s4d_engine **out, s4d_errbuf *err)
{
    if (!out)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "out is NULL");
    *out = NULL;
    if (!data)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "data is NULL");
    s4d_load_options o;
    s4d_load_options_init(&o);
    if (opts) {
        s4d_status st = copy_opts(&o, sizeof o, opts, opts->struct_size, "s4d_load_options", err);
        if (st != S4D_OK)
            return st;
    }
    s4d_engine *e = calloc(1, sizeof *e);
    if (!e)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY, "out of memory");
    e->registry = o.registry;
    s4d_status st = s4d_plan_deserialize(data, size, &e->plan, ERRBUF(err));
    if (st == S4D_OK && e->plan->device != S4D_DEVICE_KIND_CPU)
        st = s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_DEVICE,
                         "the engine was built for CUDA; this build of libs4d has no CUDA "
                         "backend yet");
    if (st == S4D_OK)
        st = engine_finish(e, ERRBUF(err));
    if (st != S4D_OK) {
        engine_free(e);
        return st;
    }
    *out = e;
    return S4D_OK;
}

s4d_status s4d_engine_load_file(const char *path, const s4d_load_options *opts, s4d_engine **out,
                                s4d_errbuf *err)
{
    return engine_from_file(path, opts, out, err, load_from_memory);
}

s4d_status s4d_engine_serialize(s4d_engine *e, void **data, size_t *size)
{
    if (!e || !data || !size)
        return S4D_ERR_INVALID_ARG;
    uint8_t *d;
    s4d_status st = s4d_plan_serialize(e->plan, &d, size, e->errmsg, sizeof e->errmsg);
    *data = st == S4D_OK ? d : NULL;
    return st;
}

s4d_status s4d_engine_save(s4d_engine *e, const char *path)
{
    if (!e)
        return S4D_ERR_INVALID_ARG;
    if (!path)
        return s4d_fmt_err(e->errmsg, sizeof e->errmsg, S4D_ERR_INVALID_ARG, "path is NULL");
    void *d;
    size_t n;
    s4d_status st = s4d_engine_serialize(e, &d, &n);
    if (st != S4D_OK)
        return st;
    st = s4d_write_file(path, d, n, e->errmsg, sizeof e->errmsg);
    free(d);
    return st;
}

void s4d_engine_destroy(s4d_engine *e)
{
    engine_free(e);
}

const char *s4d_engine_errmsg(const s4d_engine *e)
{
    return e ? e->errmsg : "engine is NULL";
}

int s4d_engine_num_inputs(const s4d_engine *e)
{
    return e ? e->plan->num_inputs : 0;
}

int s4d_engine_num_outputs(const s4d_engine *e)
{
    return e ? e->plan->num_outputs : 0;
}

static void fill_info(const s4d_plan_tensor *t, s4d_tensor_info *info)
{
    memset(info, 0, sizeof *info);
    info->name = t->name;
    info->dtype = t->dtype;
    info->rank = t->rank;
    memcpy(info->dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    info->bytes = (size_t)t->bytes;
}

s4d_status s4d_engine_input_info(const s4d_engine *e, int index, s4d_tensor_info *info)
{
    if (!e || !info || index < 0 || index >= e->plan->num_inputs)
        return S4D_ERR_INVALID_ARG;
    fill_info(&e->plan->tensors[e->plan->inputs[index]], info);
    return S4D_OK;
}

s4d_status s4d_engine_output_info(const s4d_engine *e, int index, s4d_tensor_info *info)
{
    if (!e || !info || index < 0 || index >= e->plan->num_outputs)
        return S4D_ERR_INVALID_ARG;
    fill_info(&e->plan->tensors[e->plan->outputs[index]], info);
    return S4D_OK;
}

int s4d_engine_num_layers(const s4d_engine *e)
{
    return e ? e->plan->num_layers : 0;
}

s4d_status s4d_engine_layer_info(const s4d_engine *e, int index, s4d_layer_info *info)
{
    if (!e || !info || index < 0 || index >= e->plan->num_layers)
        return S4D_ERR_INVALID_ARG;
    const s4d_plan_layer *l = &e->plan->layers[index];
    memset(info, 0, sizeof *info);
    info->name = l->name;
    info->is_plugin = l->kind == S4D_LAYER_PLUGIN;
    info->op = info->is_plugin ? e->plugin_labels[index] : l->op_type;
    info->domain = l->domain;
    info->device = l->device == S4D_DEVICE_KIND_CUDA ? S4D_DEVICE_CUDA : S4D_DEVICE_CPU;
    info->num_inputs = l->num_inputs;
    info->num_outputs = l->num_outputs;
    info->workspace_bytes = (size_t)l->workspace;
    return S4D_OK;
}

s4d_status s4d_engine_layer_tensor(const s4d_engine *e, int layer, int is_output, int index,
                                   s4d_tensor_info *info)
{
    if (!e || !info || layer < 0 || layer >= e->plan->num_layers)
        return S4D_ERR_INVALID_ARG;
    const s4d_plan_layer *l = &e->plan->layers[layer];
    int n = is_output ? l->num_outputs : l->num_inputs;
    if (index < 0 || index >= n)
        return S4D_ERR_INVALID_ARG;
    int ti = is_output ? l->outputs[index] : l->inputs[index];
    if (ti < 0) {
        memset(info, 0, sizeof *info);
        info->name = "";
        info->rank = -1;
        return S4D_OK;
    }
    fill_info(&e->plan->tensors[ti], info);
    return S4D_OK;
}

size_t s4d_engine_activation_bytes(const s4d_engine *e)
{
    return e ? (size_t)e->plan->arena_size : 0;
}

size_t s4d_engine_activation_bytes_unplanned(const s4d_engine *e)
{
    return e ? (size_t)e->plan->arena_size_unplanned : 0;
}

size_t s4d_engine_weight_bytes(const s4d_engine *e)
{
    return e ? (size_t)e->plan->weights_size : 0;
}

s4d_device s4d_engine_device(const s4d_engine *e)
{
    return e && e->plan->device == S4D_DEVICE_KIND_CUDA ? S4D_DEVICE_CUDA : S4D_DEVICE_CPU;
}

s4d_status s4d_plugins_load(s4d_plugin_registry *registry, const char *path,
                            s4d_errbuf *err)
{
    if (!path)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "path is NULL");
    return s4d_bridge_load_library(registry, path, ERRBUF(err));
}

/* ---- contexts ---- */

void s4d_context_destroy(s4d_context *c)
{
    if (!c)
        return;
    const s4d_backend *be = c->backend;
    if (c->own_outputs)
        for (int i = 0; i < c->engine->plan->num_outputs; i++)
            be->free(c->own_outputs[i]);
    free(c->own_outputs);
    be->free(c->arena);
    be->free(c->workspace);
    free(c->bound);
    free(c->views);
    free(c->scratch_in);
    free(c->scratch_out);
    free(c->times);
    if (c->backend_state)
        be->context_fini(c->backend_state);
    free(c);
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
        s4d_status st = copy_opts(&o, sizeof o, opts, opts->struct_size, "s4d_context_options", err);
        if (st != S4D_OK)
            return st;
    }
    const s4d_plan *p = e->plan;
    s4d_context *c = calloc(1, sizeof *c);
    if (!c)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY, "out of memory");
    c->engine = e;
    c->backend = s4d_backend_for(p->device);
    if (!c->backend) {
        free(c);
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_DEVICE, "no backend for the engine's device");
    }
    const s4d_backend *be = c->backend;
    c->profile = o.profile;
    c->num_threads = o.num_threads;
    if (c->num_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c->num_threads = n > 0 ? (int)n : 1;
    }
    int max_in = 1, max_out = 1;
    for (int i = 0; i < p->num_layers; i++) {
        if (p->layers[i].num_inputs > max_in)
            max_in = p->layers[i].num_inputs;
        if (p->layers[i].num_outputs > max_out)
            max_out = p->layers[i].num_outputs;
    }
    c->arena = be->alloc((size_t)p->arena_size);
    c->workspace = be->alloc((size_t)p->workspace_size);
    c->bound = calloc((size_t)p->num_tensors + 1, sizeof(void *));
    c->own_outputs = calloc((size_t)p->num_outputs + 1, sizeof(void *));
    c->views = calloc((size_t)p->num_tensors + 1, sizeof(s4d_tensor));
    c->scratch_in = calloc((size_t)max_in, sizeof(s4d_tensor));
    c->scratch_out = calloc((size_t)max_out, sizeof(s4d_tensor));
    c->times = calloc((size_t)p->num_layers + 1, sizeof(double));
    int ok = c->arena && c->workspace && c->bound && c->own_outputs && c->views &&
             c->scratch_in && c->scratch_out && c->times;
    for (int i = 0; ok && i < p->num_outputs; i++) {
        c->own_outputs[i] = be->alloc((size_t)p->tensors[p->outputs[i]].bytes);
        ok = c->own_outputs[i] != NULL;
    }
    if (ok)
        ok = be->context_init(o.num_threads, &c->backend_state) == S4D_OK;
    if (!ok) {
        s4d_context_destroy(c);
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY,
                           "out of memory creating a context (arena %llu bytes)",
                           (unsigned long long)p->arena_size);
    }
    for (int i = 0; i < p->num_tensors; i++) {
        const s4d_plan_tensor *t = &p->tensors[i];
        s4d_tensor *v = &c->views[i];
        v->dtype = t->dtype;
        v->rank = t->rank;
        memcpy(v->dims, t->dims, sizeof v->dims);
        switch (t->place) {
        case S4D_PLACE_ARENA: v->data = c->arena + t->offset; break;
        case S4D_PLACE_WEIGHT: v->data = p->weights + t->offset; break;
        case S4D_PLACE_INPUT: v->data = NULL; break;
        case S4D_PLACE_OUTPUT: v->data = c->own_outputs[t->io_index]; break;
        }
    }
    *out = c;
    return S4D_OK;
}

const char *s4d_context_errmsg(const s4d_context *c)
{
    return c ? c->errmsg : "context is NULL";
}

static int find_io(const s4d_plan *p, const char *name)
{
    for (int i = 0; i < p->num_inputs; i++)
        if (strcmp(p->tensors[p->inputs[i]].name, name) == 0)
            return p->inputs[i];
    for (int i = 0; i < p->num_outputs; i++)
        if (strcmp(p->tensors[p->outputs[i]].name, name) == 0)
            return p->outputs[i];
    return -1;
}

static void list_io(const s4d_plan *p, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < 2; k++) {
        int n = k ? p->num_outputs : p->num_inputs;
        const int *idx = k ? p->outputs : p->inputs;
        for (int i = 0; i < n && used + 1 < size; i++)
            used += (size_t)snprintf(buf + used, size - used, "%s'%s' (%s)", used ? ", " : "",
                                     p->tensors[idx[i]].name, k ? "output" : "input");
    }
}

s4d_status s4d_context_bind(s4d_context *c, const char *name, s4d_dtype dtype, int rank,
                            const int64_t *dims, void *data)
{
    if (!c)
        return S4D_ERR_INVALID_ARG;
    if (!name)
        return s4d_fmt_err(c->errmsg, sizeof c->errmsg, S4D_ERR_INVALID_ARG, "name is NULL");
    const s4d_plan *p = c->engine->plan;
    int ti = find_io(p, name);
    if (ti < 0) {
        char names[1024];
        list_io(p, names, sizeof names);
        return s4d_fmt_err(c->errmsg, sizeof c->errmsg, S4D_ERR_NOT_FOUND,
                           "bind: no input or output named '%s'; the engine has %s", name, names);
    }
    const s4d_plan_tensor *t = &p->tensors[ti];
    if (!data) {
        c->bound[ti] = NULL;
        return S4D_OK;
    }
    if (dtype != t->dtype)
        return s4d_fmt_err(c->errmsg, sizeof c->errmsg, S4D_ERR_DTYPE,
                           "bind '%s': dtype %s, the engine expects %s", name,
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
        return s4d_fmt_err(c->errmsg, sizeof c->errmsg, S4D_ERR_SHAPE,
                           "bind '%s': shape %s, the engine expects %s (static shapes)", name, got,
                           want);
    }
    c->bound[ti] = data;
    return S4D_OK;
}

static s4d_status run_layer(s4d_context *c, int index, void *stream)
{
    const s4d_plan *p = c->engine->plan;
    const s4d_plan_layer *l = &p->layers[index];
    for (int i = 0; i < l->num_inputs; i++) {
        if (l->inputs[i] < 0) {
            memset(&c->scratch_in[i], 0, sizeof(s4d_tensor));
            c->scratch_in[i].rank = -1;
        } else {
            c->scratch_in[i] = c->views[l->inputs[i]];
        }
    }
    for (int i = 0; i < l->num_outputs; i++)
        c->scratch_out[i] = c->views[l->outputs[i]];
    char msg[1024];
    msg[0] = 0;
    s4d_status st = S4D_OK;
    switch (l->kind) {
    case S4D_LAYER_OP: {
        s4d_op_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.node_name = l->name;
        ctx.op_type = l->op_type;
        ctx.opset = l->opset;
        ctx.num_attrs = l->num_attrs;
        ctx.attrs = l->attrs;
        ctx.num_inputs = l->num_inputs;
        ctx.inputs = c->scratch_in;
        ctx.num_outputs = l->num_outputs;
        ctx.outputs = c->scratch_out;
        ctx.pool = c->backend->context_pool(c->backend_state);
        ctx.workspace = c->workspace;
        ctx.workspace_size = (size_t)l->workspace;
        ctx.err = msg;
        ctx.err_size = sizeof msg;
        st = l->def->run(&ctx);
        break;
    }
    case S4D_LAYER_PLUGIN:
        st = s4d_bridge_enqueue(l->plugin, c->scratch_in, l->num_inputs, c->scratch_out,
                                l->num_outputs, c->workspace, (size_t)l->workspace, stream,
                                c->num_threads, msg, sizeof msg);
        break;
    }
    if (st != S4D_OK)
        return s4d_fmt_err(c->errmsg, sizeof c->errmsg, st, "run: layer '%s' (%s) failed: %s",
                           l->name, l->op_type, msg[0] ? msg : s4d_status_string(st));
    return S4D_OK;
}

s4d_status s4d_context_run(s4d_context *c, void *stream)
{
    if (!c)
        return S4D_ERR_INVALID_ARG;
    const s4d_plan *p = c->engine->plan;
    for (int i = 0; i < p->num_inputs; i++) {
        int ti = p->inputs[i];
        if (!c->bound[ti])
            return s4d_fmt_err(c->errmsg, sizeof c->errmsg, S4D_ERR_NOT_FOUND,
                               "run: input '%s' is not bound (s4d_context_bind)",
                               p->tensors[ti].name);
        c->views[ti].data = c->bound[ti];
    }
    for (int i = 0; i < p->num_outputs; i++) {
        int ti = p->outputs[i];
        c->views[ti].data = c->bound[ti] ? c->bound[ti] : c->own_outputs[i];
    }
    for (int i = 0; i < p->num_layers; i++) {
        double t0 = c->profile ? s4d_now_ms() : 0;
        s4d_status st = run_layer(c, i, stream);
        if (st != S4D_OK)
            return st;
        if (c->profile)
            c->times[i] = s4d_now_ms() - t0;
    }
    for (int i = 0; i < p->num_outputs; i++) {
        const s4d_plan_tensor *t = &p->tensors[p->outputs[i]];
        if (t->const_output && t->bytes)
            memcpy(c->views[p->outputs[i]].data, p->weights + t->offset, (size_t)t->bytes);
    }
    return S4D_OK;
}

s4d_status s4d_context_output(s4d_context *c, const char *name, const void **data,
                              s4d_tensor_info *info)
{
    if (!c || !data)
        return S4D_ERR_INVALID_ARG;
    *data = NULL;
    const s4d_plan *p = c->engine->plan;
    int ti = name ? find_io(p, name) : -1;
    if (ti < 0 || p->tensors[ti].place != S4D_PLACE_OUTPUT)
        return s4d_fmt_err(c->errmsg, sizeof c->errmsg, S4D_ERR_NOT_FOUND,
                           "no output named '%s'", name ? name : "(null)");
    const s4d_plan_tensor *t = &p->tensors[ti];
    *data = c->bound[ti] ? c->bound[ti] : c->own_outputs[t->io_index];
    if (info)
        fill_info(t, info);
    return S4D_OK;
}

s4d_status s4d_context_layer_time(const s4d_context *c, int index, double *ms)
{
    if (!c || !ms || index < 0 || index >= c->engine->plan->num_layers)
        return S4D_ERR_INVALID_ARG;
    *ms = c->times[index];
    return S4D_OK;
}
