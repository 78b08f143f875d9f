/* ONNX import: see onnx_import.h. */
#include "onnx/onnx_import.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"
#include "util/util.h"

typedef struct importer {
    s4d_ir_graph *g;
    s4d_namemap names; /* value name -> index */
    char *err;
    size_t errsz;
} importer;

static int dtype_known(int32_t dt)
{
    switch ((s4d_dtype)dt) {
    case S4D_DTYPE_FLOAT32:
    case S4D_DTYPE_UINT8:
    case S4D_DTYPE_INT8:
    case S4D_DTYPE_UINT16:
    case S4D_DTYPE_INT16:
    case S4D_DTYPE_INT32:
    case S4D_DTYPE_INT64:
    case S4D_DTYPE_BOOL:
    case S4D_DTYPE_FLOAT16:
    case S4D_DTYPE_FLOAT64:
    case S4D_DTYPE_UINT32:
    case S4D_DTYPE_UINT64:
    case S4D_DTYPE_BFLOAT16: return 1;
    case S4D_DTYPE_STRING:
    case S4D_DTYPE_UNDEFINED: return 0;
    }
    return 0;
}

static const char *onnx_dtype_name(int32_t dt)
{
    switch (dt) {
    case 8: return "string";
    case 14: return "complex64";
    case 15: return "complex128";
    default: break;
    }
    if (dtype_known(dt))
        return s4d_dtype_name((s4d_dtype)dt);
    return "unknown";
}

/* Stores typed-field elements into dst, narrowing to the tensor's element type. */
static void store_elements(s4d_dtype dt, void *dst, int64_t n, const int32_t *i32,
                           const int64_t *i64, const uint64_t *u64, const float *f32,
                           const double *f64)
{
    for (int64_t k = 0; k < n; k++) {
        switch (dt) {
        case S4D_DTYPE_FLOAT32: ((float *)dst)[k] = f32[k]; break;
        case S4D_DTYPE_FLOAT64: ((double *)dst)[k] = f64[k]; break;
        case S4D_DTYPE_INT64: ((int64_t *)dst)[k] = i64[k]; break;
        case S4D_DTYPE_INT32: ((int32_t *)dst)[k] = i32[k]; break;
        case S4D_DTYPE_INT16: ((int16_t *)dst)[k] = (int16_t)i32[k]; break;
        case S4D_DTYPE_INT8: ((int8_t *)dst)[k] = (int8_t)i32[k]; break;
        case S4D_DTYPE_UINT16:
        case S4D_DTYPE_FLOAT16:
        case S4D_DTYPE_BFLOAT16: ((uint16_t *)dst)[k] = (uint16_t)i32[k]; break;
        case S4D_DTYPE_UINT8: ((uint8_t *)dst)[k] = (uint8_t)i32[k]; break;
        case S4D_DTYPE_BOOL: ((uint8_t *)dst)[k] = i32[k] != 0; break;
        case S4D_DTYPE_UINT32: ((uint32_t *)dst)[k] = (uint32_t)u64[k]; break;
        case S4D_DTYPE_UINT64: ((uint64_t *)dst)[k] = u64[k]; break;
        case S4D_DTYPE_STRING:
        case S4D_DTYPE_UNDEFINED: break;
        }
    }
}

static s4d_status tensor_from_proto(const Onnx__TensorProto *tp, const char *what, s4d_tensor *t,
                                    char *err, size_t errsz)
{
    memset(t, 0, sizeof *t);
    int32_t dt = tp->data_type;
    if (!dtype_known(dt))
        return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                           "%s: element type %s (%d) is not supported", what, onnx_dtype_name(dt),
                           (int)dt);
    if (tp->n_dims > S4D_MAX_RANK)
        return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED, "%s: rank %zu exceeds %d", what,
                           tp->n_dims, S4D_MAX_RANK);
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL)
        return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                           "%s: external data is not supported; save the model with its weights "
                           "inside the .onnx file",
                           what);
    t->dtype = (s4d_dtype)dt;
    t->rank = (int)tp->n_dims;
    for (size_t i = 0; i < tp->n_dims; i++)
        t->dims[i] = tp->dims[i];
    int64_t n = s4d_dims_numel(t->rank, t->dims);
    if (n < 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE, "%s: negative or overflowing dimensions",
                           what);
    size_t esz = s4d_dtype_size(t->dtype);
    if ((uint64_t)n > SIZE_MAX / esz / 2)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE, "%s: tensor too large", what);
    size_t bytes = (size_t)n * esz;
    if (tp->has_raw_data && tp->raw_data.len != bytes)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "%s: raw_data holds %zu bytes, shape and dtype need %zu", what,
                           tp->raw_data.len, bytes);
    if (!tp->has_raw_data) {
        size_t have = 0;
        const char *field = "";
        switch (t->dtype) {
        case S4D_DTYPE_FLOAT32: have = tp->n_float_data; field = "float_data"; break;
        case S4D_DTYPE_FLOAT64: have = tp->n_double_data; field = "double_data"; break;
        case S4D_DTYPE_INT64: have = tp->n_int64_data; field = "int64_data"; break;
        case S4D_DTYPE_UINT32:
        case S4D_DTYPE_UINT64: have = tp->n_uint64_data; field = "uint64_data"; break;
        case S4D_DTYPE_INT32:
        case S4D_DTYPE_INT16:
        case S4D_DTYPE_INT8:
        case S4D_DTYPE_UINT16:
        case S4D_DTYPE_UINT8:
        case S4D_DTYPE_BOOL:
        case S4D_DTYPE_FLOAT16:
        case S4D_DTYPE_BFLOAT16: have = tp->n_int32_data; field = "int32_data"; break;
        case S4D_DTYPE_STRING:
        case S4D_DTYPE_UNDEFINED: break;
        }
        if (have != (size_t)n)
            return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                               "%s: %s holds %zu elements, shape needs %lld", what, field, have,
                               (long long)n);
    }
    t->data = malloc(bytes + 1);
    if (!t->data)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "%s: out of memory", what);
    if (tp->has_raw_data && bytes) /* empty raw_data may be a NULL pointer */
        memcpy(t->data, tp->raw_data.data, bytes);
    else
        store_elements(t->dtype, t->data, n, tp->int32_data, tp->int64_data, tp->uint64_data,
                       tp->float_data, tp->double_data);
    return S4D_OK;
}

s4d_status s4d_onnx_read_tensor(const void *data, size_t size, s4d_tensor *t, char **name,
                                char *err, size_t errsz)
{
    if (name)
        *name = NULL;
    memset(t, 0, sizeof *t);
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, size, data);
    if (!tp)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE, "not a valid ONNX TensorProto");
    s4d_status st = tensor_from_proto(tp, tp->name && tp->name[0] ? tp->name : "tensor", t, err,
                                      errsz);
    if (st == S4D_OK && name) {
        *name = s4d_strdup(tp->name);
        if (!*name) {
            free(t->data);
            t->data = NULL;
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        }
    }
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return st;
}

static const char *attr_type_name(int type)
{
    switch (type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: return "graph";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS: return "graphs";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR: return "sparse tensor";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS: return "sparse tensors";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS: return "tensors";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO: return "type proto";
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS: return "type protos";
    default: return "unknown";
    }
}

/* Older writers leave `type` unset; deduce it from the field that is filled. */
static int attr_type_of(const Onnx__AttributeProto *a)
{
    if (a->has_type && a->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED)
        return a->type;
    if (a->has_f)
        return S4D_ATTR_FLOAT;
    if (a->has_i)
        return S4D_ATTR_INT;
    if (a->has_s)
        return S4D_ATTR_STRING;
    if (a->t)
        return S4D_ATTR_TENSOR;
    if (a->n_floats)
        return S4D_ATTR_FLOATS;
    if (a->n_ints)
        return S4D_ATTR_INTS;
    if (a->n_strings)
        return S4D_ATTR_STRINGS;
    if (a->g)
        return ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    return S4D_ATTR_UNDEFINED;
}

/* A NUL-terminated copy of a protobuf string; NULL when out of memory. */
static char *copy_bytes(const ProtobufCBinaryData *b)
{
    char *s = malloc(b->len + 1);
    if (!s)
        return NULL;
    if (b->len)
        memcpy(s, b->data, b->len);
    s[b->len] = 0;
    return s;
}

/* A copy of n elements of elsize bytes, with one spare byte so that an empty array is not NULL;
   NULL when out of memory. */
static void *copy_array(const void *src, size_t n, size_t elsize)
{
    void *p = malloc(n * elsize + 1);
    if (p && n)
        memcpy(p, src, n * elsize);
    return p;
}

static s4d_status convert_attr(const Onnx__AttributeProto *a, const char *node, s4d_attr *out,
                               char *err, size_t errsz)
{
    memset(out, 0, sizeof *out);
    out->name = s4d_strdup(a->name);
    if (!out->name)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    const char *aname = out->name;
    int type = attr_type_of(a);
    char what[512];
    switch (type) {
    case S4D_ATTR_FLOAT: out->f = a->f; break;
    case S4D_ATTR_INT: out->i = a->i; break;
    case S4D_ATTR_STRING:
        out->s = copy_bytes(&a->s);
        if (!out->s)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        out->s_len = a->s.len;
        break;
    case S4D_ATTR_TENSOR: {
        /* A writer may set the type and leave the field out; the field is optional in proto2. */
        if (!a->t)
            return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                               "node '%s': attribute '%s' has type TENSOR but holds no tensor",
                               node, aname);
        snprintf(what, sizeof what, "node '%s' attribute '%s'", node, aname);
        out->t = calloc(1, sizeof *out->t);
        if (!out->t)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        s4d_status st = tensor_from_proto(a->t, what, out->t, err, errsz);
        if (st != S4D_OK)
            return st;
        break;
    }
    case S4D_ATTR_FLOATS:
        out->count = a->n_floats;
        out->floats = copy_array(a->floats, a->n_floats, sizeof(float));
        if (!out->floats)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        break;
    case S4D_ATTR_INTS:
        out->count = a->n_ints;
        out->ints = copy_array(a->ints, a->n_ints, sizeof(int64_t));
        if (!out->ints)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        break;
    case S4D_ATTR_STRINGS:
        out->count = a->n_strings;
        out->strings = calloc(a->n_strings + 1, sizeof(char *));
        if (!out->strings)
            return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        for (size_t i = 0; i < a->n_strings; i++) {
            out->strings[i] = copy_bytes(&a->strings[i]);
            if (!out->strings[i])
                return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
        }
        break;
    case S4D_ATTR_UNDEFINED:
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE, "node '%s': attribute '%s' has no value",
                           node, aname);
    default:
        return s4d_fmt_err(err, errsz, S4D_ERR_UNSUPPORTED,
                           "node '%s': attribute '%s' of type %s is not supported (s4d has no "
                           "subgraphs, sparse tensors or type attributes)",
                           node, aname, attr_type_name(type));
    }
    out->type = (s4d_attr_type)type;
    return S4D_OK;
}

static int new_value(importer *im, const char *name, s4d_value_kind kind)
{
    int vi = s4d_ir_add_value(im->g, name, kind);
    if (vi < 0)
        return -1;
    if (name[0] && s4d_namemap_put(&im->names, im->g->values[vi].name, vi) != 0)
        return -1;
    return vi;
}

/* Name-map keys point at each value's own name string, which never moves. */
static int add_value_checked(importer *im, const char *name, s4d_value_kind kind)
{
    return new_value(im, name, kind);
}

static s4d_status import_initializers(importer *im, const Onnx__GraphProto *gp)
{
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        const char *name = tp->name ? tp->name : "";
        if (!name[0])
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE, "initializer %zu has no name", i);
        if (s4d_namemap_get(&im->names, name) >= 0)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE,
                               "initializer '%s' is defined twice", name);
        char what[512];
        snprintf(what, sizeof what, "initializer '%s'", name);
        s4d_tensor t;
        s4d_status st = tensor_from_proto(tp, what, &t, im->err, im->errsz);
        if (st != S4D_OK)
            return st;
        int vi = add_value_checked(im, name, S4D_VALUE_CONST);
        if (vi < 0) {
            free(t.data);
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        }
        im->g->values[vi].t = t;
        im->g->values[vi].shape_known = 1;
    }
    return S4D_OK;
}

static s4d_status import_inputs(importer *im, const Onnx__GraphProto *gp)
{
    im->g->inputs = calloc(gp->n_input + 1, sizeof(int));
    if (!im->g->inputs)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vp = gp->input[i];
        const char *name = vp->name ? vp->name : "";
        if (!name[0])
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE, "graph input %zu has no name", i);
        /* An input that is also an initializer is a constant with a default (IR < 4). */
        if (s4d_namemap_get(&im->names, name) >= 0)
            continue;
        const Onnx__TypeProto *tp = vp->type;
        if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_UNSUPPORTED,
                               "graph input '%s' is not a tensor (sequences, maps and optionals "
                               "are not supported)",
                               name);
        const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
        if (!dtype_known(tt->elem_type))
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_UNSUPPORTED,
                               "graph input '%s': element type %s (%d) is not supported", name,
                               onnx_dtype_name(tt->elem_type), (int)tt->elem_type);
        if (tt->shape && tt->shape->n_dim > S4D_MAX_RANK)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_UNSUPPORTED,
                               "graph input '%s': rank %zu exceeds %d", name, tt->shape->n_dim,
                               S4D_MAX_RANK);
        int vi = add_value_checked(im, name, S4D_VALUE_INPUT);
        if (vi < 0)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        s4d_ir_value *v = &im->g->values[vi];
        v->t.dtype = (s4d_dtype)tt->elem_type;
        /* Symbolic dimensions (a dynamic batch axis) and a missing shape are
           fixed at build time by input specs (--shapes); until then the
           value's shape is unknown and the message says what is missing. */
        if (!tt->shape) {
            v->t.rank = -1;
            v->symbolic = s4d_strdup("no shape at all");
        } else {
            v->t.rank = (int)tt->shape->n_dim;
            char sym[256];
            size_t used = 0;
            sym[0] = 0;
            for (size_t d = 0; d < tt->shape->n_dim; d++) {
                const Onnx__TensorShapeProto__Dimension *dim = tt->shape->dim[d];
                if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                    dim->dim_value >= 0) {
                    v->t.dims[d] = dim->dim_value;
                    continue;
                }
                v->t.dims[d] = -1;
                const char *param =
                    dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                            dim->dim_param && dim->dim_param[0]
                        ? dim->dim_param
                        : "?";
                int k = snprintf(sym + used, sizeof sym - used, "%saxis %zu '%.40s'",
                                 used ? ", " : "", d, param);
                if (k > 0 && (size_t)k < sizeof sym - used)
                    used += (size_t)k;
            }
            if (used) {
                v->symbolic = s4d_strdup(sym);
            } else if (s4d_dims_numel(v->t.rank, v->t.dims) < 0) {
                return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE,
                                   "graph input '%s': overflowing shape", name);
            }
        }
        if (v->t.rank >= 0 && !v->symbolic)
            v->shape_known = 1;
        else if (!v->symbolic)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        im->g->inputs[im->g->num_inputs++] = vi;
    }
    return S4D_OK;
}

/* A Constant node becomes a constant value (ONNX Constant, any opset). */
static s4d_status import_constant(importer *im, const Onnx__NodeProto *np, const char *node)
{
    if (np->n_output != 1 || !np->output[0][0])
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE,
                           "node '%s' (Constant): needs exactly one output", node);
    if (np->n_attribute != 1)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE,
                           "node '%s' (Constant): needs exactly one value attribute, has %zu", node,
                           np->n_attribute);
    const Onnx__AttributeProto *a = np->attribute[0];
    s4d_attr at;
    s4d_status st = convert_attr(a, node, &at, im->err, im->errsz);
    if (st != S4D_OK) {
        s4d_attr_clear(&at);
        return st;
    }
    s4d_tensor t;
    memset(&t, 0, sizeof t);
    const char *an = at.name;
    if (strcmp(an, "value") == 0 && at.type == S4D_ATTR_TENSOR) {
        t = *at.t;
        at.t->data = NULL;
    } else if (strcmp(an, "value_float") == 0 && at.type == S4D_ATTR_FLOAT) {
        t.dtype = S4D_DTYPE_FLOAT32;
        t.data = malloc(sizeof(float));
        if (t.data)
            *(float *)t.data = at.f;
    } else if (strcmp(an, "value_int") == 0 && at.type == S4D_ATTR_INT) {
        t.dtype = S4D_DTYPE_INT64;
        t.data = malloc(sizeof(int64_t));
        if (t.data)
            *(int64_t *)t.data = at.i;
    } else if (strcmp(an, "value_floats") == 0 && at.type == S4D_ATTR_FLOATS) {
        t.dtype = S4D_DTYPE_FLOAT32;
        t.rank = 1;
        t.dims[0] = (int64_t)at.count;
        t.data = at.floats;
        at.floats = NULL;
    } else if (strcmp(an, "value_ints") == 0 && at.type == S4D_ATTR_INTS) {
        t.dtype = S4D_DTYPE_INT64;
        t.rank = 1;
        t.dims[0] = (int64_t)at.count;
        t.data = at.ints;
        at.ints = NULL;
    } else {
        st = s4d_fmt_err(im->err, im->errsz, S4D_ERR_UNSUPPORTED,
                         "node '%s' (Constant): attribute '%s' is not supported (value, "
                         "value_float(s), value_int(s) are)",
                         node, an);
        s4d_attr_clear(&at);
        return st;
    }
    s4d_attr_clear(&at);
    if (!t.data)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    const char *oname = np->output[0];
    if (s4d_namemap_get(&im->names, oname) >= 0) {
        free(t.data);
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE,
                           "node '%s': output '%s' is already defined", node, oname);
    }
    int vi = add_value_checked(im, oname, S4D_VALUE_CONST);
    if (vi < 0) {
        free(t.data);
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    }
    im->g->values[vi].t = t;
    im->g->values[vi].shape_known = 1;
    return S4D_OK;
}

static s4d_status import_node(importer *im, const Onnx__NodeProto *np, size_t index)
{
    char autoname[64];
    const char *node = np->name && np->name[0] ? np->name : NULL;
    if (!node) {
        snprintf(autoname, sizeof autoname, "%s_%zu", np->op_type ? np->op_type : "node", index);
        node = autoname;
    }
    const char *domain = np->domain ? np->domain : "";
    if (!np->op_type || !np->op_type[0])
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE, "node '%s' has no op_type", node);
    if (s4d_ir_is_onnx_domain(domain) && strcmp(np->op_type, "Constant") == 0)
        return import_constant(im, np, node);

    int ni = s4d_ir_add_node(im->g);
    if (ni < 0)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_ir_node *n = &im->g->nodes[ni];
    n->name = s4d_strdup(node);
    n->domain = s4d_strdup(s4d_ir_is_onnx_domain(domain) ? "" : domain);
    n->op_type = s4d_strdup(np->op_type);
    n->inputs = calloc(np->n_input + 1, sizeof(int));
    n->outputs = calloc(np->n_output + 1, sizeof(int));
    n->attrs = calloc(np->n_attribute + 1, sizeof(s4d_attr));
    if (!n->name || !n->domain || !n->op_type || !n->inputs || !n->outputs || !n->attrs)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    n->opset = s4d_ir_opset_version(im->g, domain);
    if (n->opset < 0) {
        /* Custom domains need no opset import in practice; version 1 is the convention. */
        if (s4d_ir_is_onnx_domain(domain))
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE,
                               "node '%s': the model imports no opset for the default domain",
                               node);
        n->opset = 1;
    }
    for (size_t i = 0; i < np->n_attribute; i++) {
        s4d_status st = convert_attr(np->attribute[i], node, &n->attrs[i], im->err, im->errsz);
        n->num_attrs = (int)i + 1;
        if (st != S4D_OK)
            return st;
    }
    for (size_t i = 0; i < np->n_input; i++) {
        const char *in = np->input[i];
        n->num_inputs = (int)i + 1;
        if (!in[0]) {
            n->inputs[i] = -1;
            continue;
        }
        int vi = s4d_namemap_get(&im->names, in);
        if (vi < 0)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NOT_FOUND,
                               "node '%s' (%s): input '%s' is not a graph input, an initializer "
                               "or the output of an earlier node",
                               node, np->op_type, in);
        n->inputs[i] = vi;
    }
    for (size_t i = 0; i < np->n_output; i++) {
        const char *on = np->output[i];
        char anon[600];
        if (!on[0]) {
            /* Unused optional output: the op may still write it, so it gets a buffer. */
            snprintf(anon, sizeof anon, "%s:unused_output_%zu", node, i);
            on = anon;
        } else if (s4d_namemap_get(&im->names, on) >= 0) {
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE,
                               "node '%s': output '%s' is already defined", node, on);
        }
        int vi = add_value_checked(im, on, S4D_VALUE_ACTIVATION);
        if (vi < 0)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        n = &im->g->nodes[ni];
        im->g->values[vi].producer = ni;
        n->outputs[i] = vi;
        n->num_outputs = (int)i + 1;
    }
    return S4D_OK;
}

static s4d_status import_graph(importer *im, const Onnx__ModelProto *mp)
{
    const Onnx__GraphProto *gp = mp->graph;
    s4d_ir_graph *g = im->g;
    if (!gp)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE, "the model has no graph");
    if (mp->n_opset_import == 0)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE, "the model imports no opset");
    g->opsets = calloc(mp->n_opset_import, sizeof *g->opsets);
    if (!g->opsets)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < mp->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *op = mp->opset_import[i];
        g->opsets[i].domain = s4d_strdup(s4d_ir_is_onnx_domain(op->domain) ? "" : op->domain);
        if (!g->opsets[i].domain)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        g->opsets[i].version = op->version > 100000 ? 100000 : (int)op->version;
        g->num_opsets++;
    }
    if (gp->n_sparse_initializer)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_UNSUPPORTED,
                           "sparse initializers are not supported");
    s4d_status st = import_initializers(im, gp);
    if (st == S4D_OK)
        st = import_inputs(im, gp);
    for (size_t i = 0; st == S4D_OK && i < gp->n_node; i++)
        st = import_node(im, gp->node[i], i);
    if (st != S4D_OK)
        return st;
    g->outputs = calloc(gp->n_output + 1, sizeof(int));
    if (!g->outputs)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    if (gp->n_output == 0)
        return s4d_fmt_err(im->err, im->errsz, S4D_ERR_PARSE, "the graph has no outputs");
    for (size_t i = 0; i < gp->n_output; i++) {
        const char *name = gp->output[i]->name ? gp->output[i]->name : "";
        int vi = s4d_namemap_get(&im->names, name);
        if (vi < 0)
            return s4d_fmt_err(im->err, im->errsz, S4D_ERR_NOT_FOUND,
                               "graph output '%s' is produced by no node", name);
        for (int j = 0; j < g->num_outputs; j++)
            if (g->outputs[j] == vi)
                return s4d_fmt_err(im->err, im->errsz, S4D_ERR_UNSUPPORTED,
                                   "graph output '%s' is listed twice", name);
        g->values[vi].is_output = 1;
        g->outputs[g->num_outputs++] = vi;
    }
    return S4D_OK;
}

s4d_status s4d_onnx_import(const void *data, size_t size, s4d_ir_graph **out, char *err,
                           size_t errsz)
{
    *out = NULL;
    if (!data || size == 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE, "empty ONNX model");
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, size, data);
    if (!mp)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "not a valid ONNX model: protobuf decoding failed (truncated or not "
                           "an .onnx file)");
    importer im;
    memset(&im, 0, sizeof im);
    im.err = err;
    im.errsz = errsz;
    im.g = s4d_ir_graph_create();
    s4d_status st = im.g ? import_graph(&im, mp)
                         : s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_namemap_free(&im.names);
    onnx__model_proto__free_unpacked(mp, NULL);
    if (st != S4D_OK) {
        s4d_ir_graph_destroy(im.g);
        return st;
    }
    *out = im.g;
    return S4D_OK;
}
