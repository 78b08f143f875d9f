/*
 * Engines (include/s4d/engine.h): build from ONNX, load from an engine file,
 * and what both end with - every layer inferred again against its schema,
 * its kernel resolved and prepared on its device, the weights placed on each
 * device once - plus the queries.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "engine/plan.h"
#include "onnx/onnx_import.h"
#include "registry/plugin_bridge.h"
#include "runtime/runtime.h"
#include "s4d/engine.h"
#include "util/util.h"

#ifndef S4D_LIBRARY_VERSION
#define S4D_LIBRARY_VERSION "0.2.0"
#endif

/* A context never gets more device memory than this unless the caller raises it. */
#define DEFAULT_MAX_CONTEXT_BYTES ((uint64_t)16 << 30)

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

s4d_status s4d_engine_set_error(s4d_engine *e, s4d_status status, const char *msg)
{
    pthread_mutex_lock(&e->err_lock);
    snprintf(e->errmsg, sizeof e->errmsg, "%s", msg);
    pthread_mutex_unlock(&e->err_lock);
    return status;
}

static void engine_free(s4d_engine *e)
{
    if (!e)
        return;
    s4d_plan *p = e->plan;
    if (p) {
        for (int i = 0; i < p->num_layers; i++) {
            s4d_plan_layer *l = &p->layers[i];
            if (l->kernel && l->kernel->destroy && l->kernel_state)
                l->kernel->destroy(l->kernel_state);
            l->kernel_state = NULL;
            if (e->plugin_labels)
                free(e->plugin_labels[i]);
            if (e->kernel_info)
                free(e->kernel_info[i]);
        }
    }
    free(e->plugin_labels);
    free(e->kernel_info);
    free(e->runs_nothing);
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        engine_dev *dv = &e->dev[d];
        if (!dv->be)
            continue;
        if (dv->weights && p && dv->weights != p->weights)
            dv->be->free(dv->weights);
        if (dv->prep)
            dv->be->context_destroy(dv->prep);
    }
    s4d_plan_destroy(p);
    pthread_mutex_destroy(&e->err_lock);
    free(e);
}

static s4d_engine *engine_new(void *registry)
{
    s4d_engine *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    pthread_mutex_init(&e->err_lock, NULL);
    e->registry = registry;
    e->max_context_bytes = DEFAULT_MAX_CONTEXT_BYTES;
    const char *env = getenv("S4D_MAX_CONTEXT_BYTES");
    if (env && env[0]) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == 0 && v > 0)
            e->max_context_bytes = v;
    }
    return e;
}

void s4d_engine_layer_tensors(const s4d_engine *e, const s4d_plan_layer *l, int host,
                              s4d_tensor *in, s4d_tensor *out)
{
    const s4d_plan *p = e->plan;
    const uint8_t *weights = host ? p->weights : e->dev[l->device].weights;
    for (int i = 0; i < l->num_inputs; i++) {
        memset(&in[i], 0, sizeof in[i]);
        int ti = l->inputs[i];
        if (ti < 0) {
            in[i].rank = -1;
            continue;
        }
        const s4d_plan_tensor *t = &p->tensors[ti];
        in[i].dtype = t->dtype;
        in[i].rank = t->rank;
        memcpy(in[i].dims, t->dims, sizeof in[i].dims);
        int weight = t->place == S4D_PLACE_WEIGHT || t->frozen;
        in[i].data = weight && weights ? (void *)(weights + t->offset) : NULL;
    }
    for (int i = 0; i < l->num_outputs; i++) {
        memset(&out[i], 0, sizeof out[i]);
        const s4d_plan_tensor *t = &p->tensors[l->outputs[i]];
        out[i].dtype = t->dtype;
        out[i].rank = t->rank;
        memcpy(out[i].dims, t->dims, sizeof out[i].dims);
    }
}

void s4d_plan_layer_ctx(const s4d_plan_layer *l, s4d_tensor *in, s4d_tensor *out, char *msg,
                        size_t msg_size, s4d_op_ctx *ctx)
{
    memset(ctx, 0, sizeof *ctx);
    ctx->node_name = l->name;
    ctx->op_type = l->op_type;
    ctx->opset = l->opset;
    ctx->num_attrs = l->num_attrs;
    ctx->attrs = l->attrs;
    ctx->num_inputs = l->num_inputs;
    ctx->inputs = in;
    ctx->num_outputs = l->num_outputs;
    ctx->outputs = out;
    ctx->schema = l->schema;
    ctx->params = l->params;
    msg[0] = 0;
    ctx->err = msg;
    ctx->err_size = msg_size;
}

/* Whether inference agrees with what the plan stores for each output. */
static s4d_status same_outputs(const s4d_plan *p, const s4d_plan_layer *l, const s4d_tensor *got,
                               char *err, size_t errsz)
{
    for (int i = 0; i < l->num_outputs; i++) {
        const s4d_plan_tensor *t = &p->tensors[l->outputs[i]];
        int same = got[i].dtype == t->dtype && got[i].rank == t->rank;
        for (int d = 0; same && d < t->rank; d++)
            same = got[i].dims[d] == t->dims[d];
        if (!same) {
            char a[160], b[160];
            s4d_dims_str(t->rank, t->dims, a, sizeof a);
            if (got[i].rank >= 0 && got[i].rank <= S4D_MAX_RANK)
                s4d_dims_str(got[i].rank, got[i].dims, b, sizeof b);
            else
                snprintf(b, sizeof b, "rank %d", got[i].rank);
            return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                               "layer '%s' (%s): output %d ('%s') is stored as %s%s, but its "
                               "inputs and attributes give %s%s",
                               l->name, l->op_type, i, t->name, s4d_dtype_name(t->dtype), a,
                               s4d_dtype_name(got[i].dtype), b);
        }
    }
    return S4D_OK;
}

/* Schema inference of an op layer: verifies the stored outputs and makes its params. */
static s4d_status infer_op_layer(s4d_engine *e, s4d_plan_layer *l, int loading, char *err,
                                 size_t errsz)
{
    const s4d_plan *p = e->plan;
    if (!l->schema)
        l->schema = s4d_op_find_schema(l->domain, l->op_type, l->opset);
    if (!l->schema)
        return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                           "layer '%s': op (domain '%s', op_type '%s', opset %d) is not in this "
                           "build of s4d",
                           l->name, l->domain, l->op_type, l->opset);
    if (!loading && (l->params || !l->schema->params_size))
        return S4D_OK; /* the builder inferred it a moment ago */
    s4d_tensor *in = calloc((size_t)l->num_inputs + 1, sizeof *in);
    s4d_tensor *out = calloc((size_t)l->num_outputs + 1, sizeof *out);
    s4d_status st = S4D_OK;
    if (!in || !out) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    s4d_engine_layer_tensors(e, l, 1, in, out);
    for (int i = 0; i < l->num_outputs; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].rank = -1;
    }
    free(l->params);
    l->params = l->schema->params_size ? calloc(1, l->schema->params_size) : NULL;
    if (l->schema->params_size && !l->params) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    char msg[1024];
    s4d_op_ctx ctx;
    s4d_plan_layer_ctx(l, in, out, msg, sizeof msg, &ctx);
    st = s4d_op_infer(&ctx);
    if (st != S4D_OK) {
        s4d_fmt_err(err, errsz, loading ? S4D_ERR_PARSE : st, "layer '%s' (%s) does not infer: %s",
                    l->name, l->op_type, msg[0] ? msg : s4d_status_string(st));
        st = loading ? S4D_ERR_PARSE : st;
        goto done;
    }
    st = same_outputs(p, l, out, err, errsz);
done:
    free(in);
    free(out);
    return st;
}

static s4d_status check_copy_layer(const s4d_plan *p, const s4d_plan_layer *l, char *err,
                                   size_t errsz)
{
    const s4d_plan_tensor *a = &p->tensors[l->inputs[0]], *b = &p->tensors[l->outputs[0]];
    int same = a->dtype == b->dtype && a->rank == b->rank && a->bytes == b->bytes &&
               a->place != S4D_PLACE_WEIGHT && a->device != b->device &&
               (l->device == a->device || l->device == b->device) &&
               l->device != S4D_DEVICE_CPU;
    for (int d = 0; same && d < a->rank; d++)
        same = a->dims[d] == b->dims[d];
    if (!same)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "copy layer '%s' does not copy one tensor to the same shape on another "
                           "device",
                           l->name);
    return S4D_OK;
}

/* Resolves and prepares one layer on its device. */
static s4d_status prepare_layer(s4d_engine *e, int index, int loading, char *err, size_t errsz)
{
    s4d_plan *p = e->plan;
    s4d_plan_layer *l = &p->layers[index];
    engine_dev *dv = &e->dev[l->device];
    const s4d_backend *be = dv->be;
    s4d_status st = S4D_OK;
    if (l->kind == S4D_LAYER_COPY) {
        l->workspace = 0;
        return check_copy_layer(p, l, err, errsz);
    }
    s4d_tensor *in = calloc((size_t)l->num_inputs + 1, sizeof *in);
    s4d_tensor *out = calloc((size_t)l->num_outputs + 1, sizeof *out);
    if (!in || !out) {
        free(in);
        free(out);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    }
    char msg[1024];
    if (l->kind == S4D_LAYER_PLUGIN) {
        if (!l->plugin) {
            st = s4d_bridge_deserialize(e->registry, l->plugin_namespace, l->plugin_name,
                                        l->plugin_version, l->payload, (size_t)l->payload_size,
                                        &l->plugin, err, errsz);
            if (st != S4D_OK)
                goto done;
        }
        s4d_engine_layer_tensors(e, l, 1, in, out);
        size_t ws = 0;
        st = s4d_bridge_infer(l->plugin, l->name, be->plugin_device, 1, in, l->num_inputs, out,
                              l->num_outputs, &ws, err, errsz);
        if (st == S4D_OK)
            st = same_outputs(p, l, out, err, errsz);
        if (st == S4D_OK) {
            s4d_engine_layer_tensors(e, l, 1, in, out);
            st = s4d_bridge_configure(l->plugin, l->name, be->plugin_device, in, l->num_inputs,
                                      out, l->num_outputs, be->context_stream(dv->prep), err,
                                      errsz);
        }
        l->kernel = be->plugin_kernel;
        l->workspace = ws;
        goto done;
    }
    st = infer_op_layer(e, l, loading, err, errsz);
    if (st != S4D_OK)
        goto done;
    /* A view runs nothing: its op must be one whose output is its input's bytes. */
    if (s4d_plan_layer_is_view(p, l) && !s4d_plan_view_op(p, l)) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                         "layer '%s' (%s): its output '%s' is stored as a view of its input, but "
                         "the op does not leave the bytes unchanged",
                         l->name, l->op_type, p->tensors[l->outputs[0]].name);
        goto done;
    }
    l->kernel = be->find_kernel(l->schema->domain, l->schema->op_type, l->opset);
    if (!l->kernel) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                         "layer '%s': this build of s4d has no %s kernel for %s (domain '%s', "
                         "opset %d)",
                         l->name, be->name, l->op_type, l->domain, l->opset);
        goto done;
    }
    /* Build-time questions (supports, workspace) see constants on the host; prepare
       sees them where its kernel will read them. */
    s4d_engine_layer_tensors(e, l, 1, in, out);
    s4d_op_ctx ctx;
    s4d_plan_layer_ctx(l, in, out, msg, sizeof msg, &ctx);
    ctx.backend_ctx = dv->prep;
    ctx.stream = be->context_stream(dv->prep);
    ctx.pool = be->context_pool(dv->prep);
    if (l->kernel->supports && (st = l->kernel->supports(&ctx)) != S4D_OK) {
        s4d_fmt_err(err, errsz, st, "layer '%s': the %s kernel does not take it: %s", l->name,
                    be->name, msg[0] ? msg : s4d_status_string(st));
        goto done;
    }
    if (l->kernel->prepare) {
        s4d_engine_layer_tensors(e, l, 0, in, out);
        st = l->kernel->prepare(&ctx, loading ? l->backend_payload : NULL,
                                loading ? (size_t)l->backend_payload_size : 0, &l->kernel_state);
        if (st != S4D_OK) {
            s4d_fmt_err(err, errsz, st, "layer '%s': preparing its %s kernel failed: %s", l->name,
                        be->name, msg[0] ? msg : s4d_status_string(st));
            goto done;
        }
    }
    ctx.state = l->kernel_state;
    s4d_engine_layer_tensors(e, l, 1, in, out);
    if (!loading && l->kernel->save && l->kernel_state) {
        s4d_wbuf w;
        memset(&w, 0, sizeof w);
        st = l->kernel->save(l->kernel_state, &w);
        if (st == S4D_OK && w.failed)
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        if (st != S4D_OK) {
            s4d_wbuf_free(&w);
            goto done;
        }
        free(l->backend_payload);
        l->backend_payload = w.data;
        l->backend_payload_size = w.size;
    }
    /* The workspace comes from the kernel, never from the file; a layer that runs nothing
       (a view, a Concat in place) needs none. */
    l->workspace = l->kernel->workspace_size && !e->runs_nothing[index]
                       ? l->kernel->workspace_size(&ctx)
                       : 0;
done:
    free(in);
    free(out);
    return st;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* The devices an engine uses: its target and any layer's. */
static void devices_used(const s4d_plan *p, int *used)
{
    for (int d = 0; d < S4D_NUM_DEVICES; d++)
        used[d] = d == (int)p->device;
    for (int i = 0; i < p->num_layers; i++)
        used[p->layers[i].device] = 1;
}

static s4d_status open_device(s4d_engine *e, int d, int loading, char *err, size_t errsz)
{
    s4d_plan *p = e->plan;
    engine_dev *dv = &e->dev[d];
    dv->be = s4d_backend_get((s4d_device)d);
    if (!dv->be)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_DEVICE,
                           "the engine runs on %s; this build of libs4d has no %s backend",
                           s4d_device_name((s4d_device)d), s4d_device_name((s4d_device)d));
    s4d_status st = dv->be->probe(err, errsz);
    if (st != S4D_OK)
        return st;
    if (d == (int)p->device) {
        s4d_target_info ti;
        dv->be->target_info(&ti);
        if (!loading) {
            p->target = ti;
            snprintf(p->library_version, sizeof p->library_version, "%s", S4D_LIBRARY_VERSION);
        } else if (strcmp(ti.arch, p->target.arch) != 0 ||
                   strcmp(ti.libraries, p->target.libraries) != 0) {
            return s4d_fmt_err(err, errsz, S4D_ERR_VERSION,
                               "the engine was built for %s (%s%s%s); this machine has %s "
                               "(%s%s%s): rebuild the engine here",
                               p->target.name, p->target.arch[0] ? p->target.arch : "no arch",
                               p->target.libraries[0] ? ", " : "", p->target.libraries, ti.name,
                               ti.arch[0] ? ti.arch : "no arch", ti.libraries[0] ? ", " : "",
                               ti.libraries);
        }
    }
    s4d_backend_ctx_options o;
    memset(&o, 0, sizeof o);
    o.num_threads = 1;
    o.allow_tf32 = p->tf32;
    st = dv->be->context_create(&o, &dv->prep, err, errsz);
    if (st != S4D_OK)
        return st;
    if (dv->be->host_memory) {
        dv->weights = p->weights;
        return S4D_OK;
    }
    st = dv->be->alloc((size_t)p->weights_size, &dv->weights, err, errsz);
    if (st == S4D_OK && p->weights_size)
        st = dv->be->copy(dv->prep, dv->weights, p->weights, (size_t)p->weights_size,
                          S4D_COPY_HOST_TO_DEVICE, NULL, err, errsz);
    if (st == S4D_OK)
        st = dv->be->synchronize(dv->prep, NULL, err, errsz);
    return st;
}

/*
 * What a context allocates (context.c): per device its arena and workspace; on the host its
 * own copy of each output; on a device that is not host memory a staging buffer per input and
 * output. Sums saturate, so that a file's sizes cannot wrap below the limit.
 */
static s4d_status check_context_bytes(const s4d_engine *e, char *err, size_t errsz)
{
    const s4d_plan *p = e->plan;
    uint64_t io[S4D_NUM_DEVICES] = {0};
    for (int i = 0; i < p->num_inputs + p->num_outputs; i++) {
        int is_out = i >= p->num_inputs;
        const s4d_plan_tensor *t = &p->tensors[is_out ? p->outputs[i - p->num_inputs] : p->inputs[i]];
        if (is_out)
            io[S4D_DEVICE_CPU] = sat_add(io[S4D_DEVICE_CPU], t->bytes);
        if (!e->dev[p->device].be->host_memory)
            io[p->device] = sat_add(io[p->device], t->bytes);
    }
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        uint64_t need = sat_add(sat_add(p->arena_size[d], p->workspace_size[d]), io[d]);
        if (need > e->max_context_bytes)
            return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                               "the engine needs %llu bytes per context on %s (activations %llu, "
                               "workspace %llu, inputs and outputs %llu), above the limit of %llu "
                               "(raise it with s4d_load_options.max_context_bytes or "
                               "S4D_MAX_CONTEXT_BYTES)",
                               (unsigned long long)need, s4d_device_name((s4d_device)d),
                               (unsigned long long)p->arena_size[d],
                               (unsigned long long)p->workspace_size[d], (unsigned long long)io[d],
                               (unsigned long long)e->max_context_bytes);
    }
    return S4D_OK;
}

/*
 * What building and loading end with: each device opened (target checked on
 * load, weights uploaded), each layer inferred again (loading: its stored
 * shapes verified), its kernel resolved and prepared, workspaces derived, the
 * labels made.
 */
static s4d_status engine_finish(s4d_engine *e, int loading, char *err, size_t errsz)
{
    s4d_plan *p = e->plan;
    int used[S4D_NUM_DEVICES];
    devices_used(p, used);
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        if (!used[d])
            continue;
        s4d_status st = open_device(e, d, loading, err, errsz);
        if (st != S4D_OK)
            return st;
    }
    e->plugin_labels = calloc((size_t)p->num_layers + 1, sizeof(char *));
    e->kernel_info = calloc((size_t)p->num_layers + 1, sizeof(char *));
    e->runs_nothing = calloc((size_t)p->num_layers + 1, 1);
    if (!e->plugin_labels || !e->kernel_info || !e->runs_nothing ||
        s4d_plan_layers_elided(p, e->runs_nothing) != S4D_OK)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (int d = 0; d < S4D_NUM_DEVICES; d++)
        p->workspace_size[d] = 0;
    /* Before any kernel is prepared, then again with the workspaces the kernels need. */
    s4d_status cst = check_context_bytes(e, err, errsz);
    if (cst != S4D_OK)
        return cst;
    for (int i = 0; i < p->num_layers; i++) {
        s4d_plan_layer *l = &p->layers[i];
        s4d_status st = prepare_layer(e, i, loading, err, errsz);
        if (st != S4D_OK)
            return st;
        if (l->workspace > p->workspace_size[l->device])
            p->workspace_size[l->device] = l->workspace;
        char said[256];
        if (l->kernel && l->kernel->describe && l->kernel_state &&
            l->kernel->describe(l->kernel_state, said, sizeof said) > 0) {
            e->kernel_info[i] = s4d_strdup(said);
            if (!e->kernel_info[i])
                return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        }
        if (l->kind == S4D_LAYER_PLUGIN) {
            size_t n = strlen(l->plugin_namespace) + strlen(l->plugin_name) +
                       strlen(l->plugin_version) + 8;
            e->plugin_labels[i] = malloc(n);
            if (!e->plugin_labels[i])
                return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
            snprintf(e->plugin_labels[i], n, "%s::%s:%s", l->plugin_namespace, l->plugin_name,
                     l->plugin_version);
        }
    }
    return check_context_bytes(e, err, errsz);
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
    if (o.device != S4D_DEVICE_CPU && o.device != S4D_DEVICE_CUDA)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "unknown device %d", (int)o.device);
    s4d_build_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.device = o.device;
    cfg.fp16 = o.fp16 != 0;
    cfg.tf32 = o.tf32 != 0;
    cfg.fold_constants = o.fold_constants != 0;
    cfg.allow_fallback = o.allow_fallback != 0;
    cfg.registry = o.registry;
    if (o.conv_layout != S4D_CONV_LAYOUT_AUTO && o.conv_layout != S4D_CONV_LAYOUT_NCHW &&
        o.conv_layout != S4D_CONV_LAYOUT_NHWC)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG,
                           "conv_layout %d: give S4D_CONV_LAYOUT_AUTO, _NCHW or _NHWC",
                           (int)o.conv_layout);
    cfg.conv_layout = o.conv_layout;
    cfg.input_specs = o.input_specs;
    cfg.num_input_specs = o.num_input_specs;

    cfg.layer_precisions = o.layer_precisions;
    cfg.num_layer_precisions = o.layer_precisions ? o.num_layer_precisions : 0;
    cfg.obey_precisions = o.obey_precisions != 0;
    if (o.num_layer_precisions < 0 || o.num_output_tolerances < 0 || o.num_output_metrics < 0 ||
        (o.num_layer_precisions > 0 && !o.layer_precisions) ||
        (o.num_output_tolerances > 0 && !o.output_tolerances) ||
        (o.num_output_metrics > 0 && !o.output_metrics))
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG,
                           "num_layer_precisions / num_output_tolerances / num_output_metrics "
                           "without their array");
    if (!(o.accuracy >= 0))
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG,
                           "accuracy %g: give a relative L2 tolerance > 0 (0: the default 1e-2)",
                           o.accuracy);
    if (o.calib_dir && !cfg.fp16)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG,
                           "calib_dir (--calib) drives the fp16 accuracy guard; build with fp16 "
                           "(--fp16)");
    if (o.calib_dir && cfg.fp16) {
        /* The CPU refuses fp16 before any calibration file is read. */
        const s4d_backend *be = s4d_backend_get(cfg.device);
        if (be && be->host_memory)
            return s4d_fmt_err(ERRBUF(err), S4D_ERR_UNSUPPORTED,
                               "fp16: the CPU backend computes in float32 only; build without "
                               "fp16 (fp16 engines need the CUDA backend)");
        return s4d_precision_guard(data, size, &o, &cfg, out, ERRBUF(err));
    }
    return s4d_engine_build_config(data, size, &cfg, out, ERRBUF(err));
}

s4d_status s4d_engine_build_config(const void *data, size_t size, const s4d_build_config *cfg,
                                   s4d_engine **out, char *err, size_t errsz)
{
    *out = NULL;
    s4d_ir_graph *g = NULL;
    s4d_status st = s4d_onnx_import(data, size, &g, err, errsz);
    if (st != S4D_OK)
        return st;
    s4d_engine *e = engine_new(cfg->registry);
    if (!e) {
        s4d_ir_graph_destroy(g);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    }
    st = s4d_build_plan(g, cfg, &e->plan, err, errsz);
    s4d_ir_graph_destroy(g);
    if (st == S4D_OK)
        st = engine_finish(e, 0, err, errsz);
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
    s4d_engine *e = engine_new(o.registry);
    if (!e)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY, "out of memory");
    if (o.max_context_bytes)
        e->max_context_bytes = o.max_context_bytes;
    s4d_status st = s4d_plan_deserialize(data, size, &e->plan, ERRBUF(err));
    if (st == S4D_OK)
        st = engine_finish(e, 1, ERRBUF(err));
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
    char msg[1024];
    s4d_status st = s4d_plan_serialize(e->plan, &d, size, msg, sizeof msg);
    *data = st == S4D_OK ? d : NULL;
    return st == S4D_OK ? S4D_OK : s4d_engine_set_error(e, st, msg);
}

s4d_status s4d_engine_save(s4d_engine *e, const char *path)
{
    if (!e)
        return S4D_ERR_INVALID_ARG;
    if (!path)
        return s4d_engine_set_error(e, S4D_ERR_INVALID_ARG, "path is NULL");
    void *d;
    size_t n;
    s4d_status st = s4d_engine_serialize(e, &d, &n);
    if (st != S4D_OK)
        return st;
    char msg[1024];
    st = s4d_write_file(path, d, n, msg, sizeof msg);
    free(d);
    return st == S4D_OK ? S4D_OK : s4d_engine_set_error(e, st, msg);
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
    info->device = l->device;
    info->num_inputs = l->num_inputs;
    info->num_outputs = l->num_outputs;
    info->workspace_bytes = (size_t)l->workspace;
    return S4D_OK;
}

s4d_status s4d_engine_layer_details(const s4d_engine *e, int index, s4d_layer_details *d)
{
    if (!e || !d || index < 0 || index >= e->plan->num_layers || d->struct_size < sizeof(size_t))
        return S4D_ERR_INVALID_ARG;
    const s4d_plan_layer *l = &e->plan->layers[index];
    s4d_layer_details v;
    memset(&v, 0, sizeof v);
    v.struct_size = d->struct_size < sizeof v ? d->struct_size : sizeof v;
    v.device = l->device;
    v.precision = l->precision;
    v.format = l->format;
    v.payload_bytes = (size_t)l->backend_payload_size;
    v.is_copy = l->kind == S4D_LAYER_COPY;
    v.is_view = s4d_plan_layer_is_view(e->plan, l);
    v.kernel_info = e->kernel_info && e->kernel_info[index] ? e->kernel_info[index] : "";
    v.in_place = !v.is_view && e->runs_nothing && e->runs_nothing[index];
    memcpy(d, &v, v.struct_size);
    return S4D_OK;
}

const char *s4d_engine_precision_report(const s4d_engine *e)
{
    return e ? e->plan->precision_report : NULL;
}

s4d_status s4d_engine_target(const s4d_engine *e, s4d_engine_target_info *info)
{
    if (!e || !info || info->struct_size < sizeof(size_t))
        return S4D_ERR_INVALID_ARG;
    const s4d_plan *p = e->plan;
    s4d_engine_target_info v;
    memset(&v, 0, sizeof v);
    v.struct_size = info->struct_size < sizeof v ? info->struct_size : sizeof v;
    v.device = p->device;
    v.device_name = p->target.name;
    v.arch = p->target.arch;
    v.libraries = p->target.libraries;
    v.library_version = p->library_version;
    memcpy(info, &v, v.struct_size);
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
    if (!e)
        return 0;
    uint64_t n = 0;
    for (int d = 0; d < S4D_NUM_DEVICES; d++)
        n += e->plan->arena_size[d];
    return (size_t)n;
}

size_t s4d_engine_activation_bytes_unplanned(const s4d_engine *e)
{
    if (!e)
        return 0;
    uint64_t n = 0;
    for (int d = 0; d < S4D_NUM_DEVICES; d++)
        n += e->plan->arena_size_unplanned[d];
    return (size_t)n;
}

size_t s4d_engine_weight_bytes(const s4d_engine *e)
{
    return e ? (size_t)e->plan->weights_size : 0;
}

s4d_device s4d_engine_device(const s4d_engine *e)
{
    return e ? e->plan->device : S4D_DEVICE_CPU;
}

s4d_status s4d_plugins_load(s4d_plugin_registry *registry, const char *path, s4d_errbuf *err)
{
    if (!path)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "path is NULL");
    return s4d_bridge_load_library(registry, path, ERRBUF(err));
}
