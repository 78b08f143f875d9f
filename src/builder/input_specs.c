/*
 * Build-time input specs (s4d_build_options.input_specs, s4dexec --shapes):
 * fix the dimensions a model leaves symbolic, and freeze the values of inputs
 * that carry shapes, so that every shape in the engine is static.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/builder.h"
#include "util/util.h"

static int find_input(const s4d_ir_graph *g, const char *name)
{
    for (int i = 0; i < g->num_inputs; i++)
        if (strcmp(g->values[g->inputs[i]].name, name) == 0)
            return g->inputs[i];
    return -1;
}

static void list_inputs(const s4d_ir_graph *g, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < g->num_inputs && used + 1 < size; i++) {
        int k = snprintf(buf + used, size - used, "%s'%s'", i ? ", " : "",
                         g->values[g->inputs[i]].name);
        if (k < 0)
            break;
        used += (size_t)k < size - used ? (size_t)k : size - used - 1;
    }
}

static s4d_status fix_shape(s4d_ir_value *v, const s4d_input_spec *s, char *err, size_t errsz)
{
    if (s->rank < 0 || s->rank > S4D_MAX_RANK)
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "--shapes %s: rank %d is out of range",
                           v->name, s->rank);
    if (v->t.rank >= 0 && s->rank != v->t.rank)
        return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                           "--shapes %s: %d dims given, the model declares rank %d", v->name,
                           s->rank, v->t.rank);
    for (int d = 0; d < s->rank; d++) {
        if (s->dims[d] < 0)
            return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "--shapes %s: dim %d is negative",
                               v->name, d);
        if (v->t.rank >= 0 && v->t.dims[d] >= 0 && v->t.dims[d] != s->dims[d])
            return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                               "--shapes %s: dim %d is %lld, the model fixes it to %lld", v->name,
                               d, (long long)s->dims[d], (long long)v->t.dims[d]);
    }
    if (s4d_dims_numel(s->rank, s->dims) < 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE, "--shapes %s: the shape overflows", v->name);
    v->t.rank = s->rank;
    memcpy(v->t.dims, s->dims, sizeof(int64_t) * (size_t)s->rank);
    v->shape_known = 1;
    free(v->symbolic);
    v->symbolic = NULL;
    return S4D_OK;
}

/* Stores one value in the input's dtype; only exact values are accepted. */
static int put_value(s4d_dtype dt, void *data, int64_t i, double x)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: ((float *)data)[i] = (float)x; return 1;
    case S4D_DTYPE_FLOAT64: ((double *)data)[i] = x; return 1;
    case S4D_DTYPE_INT64:
        if (!(x >= -9.2e18 && x <= 9.2e18) || x != floor(x))
            return 0;
        ((int64_t *)data)[i] = (int64_t)x;
        return 1;
    case S4D_DTYPE_INT32:
        if (!(x >= -2147483648.0 && x <= 2147483647.0) || x != floor(x))
            return 0;
        ((int32_t *)data)[i] = (int32_t)x;
        return 1;
    case S4D_DTYPE_BOOL:
        if (x != 0 && x != 1)
            return 0;
        ((uint8_t *)data)[i] = (uint8_t)x;
        return 1;
    default: return 0;
    }
}

static s4d_status freeze(s4d_ir_value *v, const s4d_input_spec *s, char *err, size_t errsz)
{
    if (!v->shape_known)
        return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                           "--shapes %s: values given, but the input's own shape is open (%s)",
                           v->name, v->symbolic ? v->symbolic : "unknown");
    int64_t n = s4d_dims_numel(v->t.rank, v->t.dims);
    if (s->rank < 0 || (int64_t)s->rank != n || (!s->values && s->rank > S4D_MAX_DIMS)) {
        char dims[128];
        return s4d_fmt_err(err, errsz, S4D_ERR_SHAPE,
                           "--shapes %s: %d values given, the input %s holds %lld", v->name,
                           s->rank, s4d_dims_str(v->t.rank, v->t.dims, dims, sizeof dims),
                           (long long)n);
    }
    size_t bytes = s4d_ir_tensor_bytes(&v->t);
    void *data = malloc(bytes + 1);
    if (!data)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        double x = s->values ? s->values[i] : (double)s->dims[i];
        if (!put_value(v->t.dtype, data, i, x)) {
            free(data);
            return s4d_fmt_err(err, errsz, S4D_ERR_DTYPE,
                               "--shapes %s: value %lld (%g) does not fit the input's dtype %s",
                               v->name, (long long)i, x, s4d_dtype_name(v->t.dtype));
        }
    }
    free(v->t.data);
    v->t.data = data;
    v->frozen = 1;
    return S4D_OK;
}

/* Nodes read a frozen input's values as a constant of the engine; the input stays a
   graph input (bound, and checked against these values, at run time). */
static s4d_status rewire_frozen(s4d_ir_graph *g, int vi, char *err, size_t errsz)
{
    char name[512];
    snprintf(name, sizeof name, "%s@build", g->values[vi].name);
    int ci = s4d_ir_add_value(g, name, S4D_VALUE_CONST);
    if (ci < 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_ir_value *v = &g->values[vi], *c = &g->values[ci];
    size_t bytes = s4d_ir_tensor_bytes(&v->t);
    c->t = v->t;
    c->t.data = malloc(bytes + 1);
    if (!c->t.data)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    memcpy(c->t.data, v->t.data, bytes);
    c->shape_known = 1;
    c->producer = -1;
    for (int i = 0; i < g->num_nodes; i++)
        for (int j = 0; j < g->nodes[i].num_inputs; j++)
            if (g->nodes[i].inputs[j] == vi)
                g->nodes[i].inputs[j] = ci;
    return S4D_OK;
}

s4d_status s4d_apply_input_specs(s4d_ir_graph *g, const s4d_input_spec *specs, int count,
                                 char *err, size_t errsz)
{
    if (count < 0 || (count > 0 && !specs))
        return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "input specs: %d given without an array",
                           count);
    for (int i = 0; i < count; i++) {
        const s4d_input_spec *s = &specs[i];
        if (!s->name)
            return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "input spec %d has no name", i);
        for (int j = 0; j < i; j++)
            if (strcmp(specs[j].name, s->name) == 0)
                return s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG,
                                   "--shapes names input '%s' twice", s->name);
        int vi = find_input(g, s->name);
        if (vi < 0) {
            char names[1024];
            list_inputs(g, names, sizeof names);
            return s4d_fmt_err(err, errsz, S4D_ERR_NOT_FOUND,
                               "--shapes: the model has no input '%s'; its inputs are %s", s->name,
                               names);
        }
        s4d_ir_value *v = &g->values[vi];
        s4d_input_spec_kind kind = s->kind;
        if (kind == S4D_INPUT_SPEC_AUTO)
            kind = v->shape_known ? S4D_INPUT_SPEC_VALUES : S4D_INPUT_SPEC_SHAPE;
        s4d_status st;
        switch (kind) {
        case S4D_INPUT_SPEC_SHAPE: st = fix_shape(v, s, err, errsz); break;
        case S4D_INPUT_SPEC_VALUES:
            st = freeze(v, s, err, errsz);
            if (st == S4D_OK)
                st = rewire_frozen(g, vi, err, errsz);
            break;
        case S4D_INPUT_SPEC_AUTO:
        default:
            st = s4d_fmt_err(err, errsz, S4D_ERR_INVALID_ARG, "input spec '%s': unknown kind %d",
                             s->name, (int)s->kind);
            break;
        }
        if (st != S4D_OK)
            return st;
    }
    /* Every input must now be static; name all that are not. */
    size_t used = 0;
    int open = 0;
    char list[1536];
    list[0] = 0;
    for (int i = 0; i < g->num_inputs; i++) {
        const s4d_ir_value *v = &g->values[g->inputs[i]];
        if (v->shape_known)
            continue;
        open++;
        int k = snprintf(list + used, sizeof list - used, "%s'%s' (%s)", used ? ", " : "",
                         v->name, v->symbolic ? v->symbolic : "no shape");
        if (k > 0)
            used += (size_t)k < sizeof list - used ? (size_t)k : sizeof list - used - 1;
    }
    if (open)
        return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                           "s4d builds static shapes, and %d graph input%s open dimensions: %s; "
                           "fix them at build with --shapes=NAME:AxBxC (s4d_input_spec)",
                           open, open == 1 ? " has" : "s have", list);
    return S4D_OK;
}
