/*
 * The engine file: docs/engine-format.md is the specification. Writing is
 * a straight walk over the plan; reading checks the header, the checksum
 * and then every count, index, offset and size before anything uses it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "util/util.h"

/* ---- writing ---- */

static void put_attr(s4d_wbuf *w, const s4d_attr *a)
{
    s4d_wbuf_str(w, a->name);
    s4d_wbuf_u32(w, (uint32_t)a->type);
    switch (a->type) {
    case S4D_ATTR_FLOAT: s4d_wbuf_f32(w, a->f); break;
    case S4D_ATTR_INT: s4d_wbuf_i64(w, a->i); break;
    case S4D_ATTR_STRING:
        s4d_wbuf_u64(w, a->s_len);
        s4d_wbuf_bytes(w, a->s, a->s_len);
        break;
    case S4D_ATTR_TENSOR: {
        const s4d_tensor *t = a->t;
        s4d_wbuf_u32(w, (uint32_t)t->dtype);
        s4d_wbuf_u32(w, (uint32_t)t->rank);
        for (int i = 0; i < t->rank; i++)
            s4d_wbuf_i64(w, t->dims[i]);
        size_t n = s4d_ir_tensor_bytes(t);
        s4d_wbuf_u64(w, n);
        s4d_wbuf_bytes(w, t->data, n);
        break;
    }
    case S4D_ATTR_FLOATS:
        s4d_wbuf_u64(w, a->count);
        for (size_t i = 0; i < a->count; i++)
            s4d_wbuf_f32(w, a->floats[i]);
        break;
    case S4D_ATTR_INTS:
        s4d_wbuf_u64(w, a->count);
        for (size_t i = 0; i < a->count; i++)
            s4d_wbuf_i64(w, a->ints[i]);
        break;
    case S4D_ATTR_STRINGS:
        s4d_wbuf_u64(w, a->count);
        for (size_t i = 0; i < a->count; i++)
            s4d_wbuf_str(w, a->strings[i]);
        break;
    case S4D_ATTR_UNDEFINED: break;
    }
}

s4d_status s4d_plan_serialize(const s4d_plan *p, uint8_t **data, size_t *size, char *err,
                              size_t errsz)
{
    *data = NULL;
    *size = 0;
    s4d_wbuf w;
    memset(&w, 0, sizeof w);
    /* Header placeholder; filled once the body size and checksum are known. */
    uint8_t header[S4D_ENGINE_HEADER_SIZE];
    memset(header, 0, sizeof header);
    s4d_wbuf_bytes(&w, header, sizeof header);

    s4d_wbuf_u32(&w, (uint32_t)p->device);
    s4d_wbuf_u32(&w, (uint32_t)p->fp16);
    s4d_wbuf_u64(&w, p->arena_size);
    s4d_wbuf_u64(&w, p->arena_size_unplanned);
    s4d_wbuf_u64(&w, p->workspace_size);
    s4d_wbuf_u32(&w, (uint32_t)p->num_tensors);
    for (int i = 0; i < p->num_tensors; i++) {
        const s4d_plan_tensor *t = &p->tensors[i];
        s4d_wbuf_str(&w, t->name);
        s4d_wbuf_u32(&w, (uint32_t)t->dtype);
        s4d_wbuf_u32(&w, (uint32_t)t->rank);
        for (int d = 0; d < t->rank; d++)
            s4d_wbuf_i64(&w, t->dims[d]);
        s4d_wbuf_u64(&w, t->bytes);
        s4d_wbuf_u32(&w, (uint32_t)t->place);
        s4d_wbuf_u64(&w, t->offset);
        s4d_wbuf_u32(&w, (uint32_t)t->const_output);
    }
    s4d_wbuf_u32(&w, (uint32_t)p->num_inputs);
    for (int i = 0; i < p->num_inputs; i++)
        s4d_wbuf_u32(&w, (uint32_t)p->inputs[i]);
    s4d_wbuf_u32(&w, (uint32_t)p->num_outputs);
    for (int i = 0; i < p->num_outputs; i++)
        s4d_wbuf_u32(&w, (uint32_t)p->outputs[i]);
    s4d_wbuf_u32(&w, (uint32_t)p->num_layers);
    for (int i = 0; i < p->num_layers; i++) {
        const s4d_plan_layer *l = &p->layers[i];
        s4d_wbuf_str(&w, l->name);
        s4d_wbuf_u32(&w, (uint32_t)l->kind);
        s4d_wbuf_u32(&w, (uint32_t)l->device);
        s4d_wbuf_str(&w, l->domain);
        s4d_wbuf_str(&w, l->op_type);
        s4d_wbuf_u32(&w, (uint32_t)l->opset);
        s4d_wbuf_u64(&w, l->workspace);
        s4d_wbuf_u32(&w, (uint32_t)l->num_inputs);
        for (int j = 0; j < l->num_inputs; j++)
            s4d_wbuf_u32(&w, (uint32_t)l->inputs[j]); /* -1 stored as 0xffffffff */
        s4d_wbuf_u32(&w, (uint32_t)l->num_outputs);
        for (int j = 0; j < l->num_outputs; j++)
            s4d_wbuf_u32(&w, (uint32_t)l->outputs[j]);
        s4d_wbuf_u32(&w, (uint32_t)l->num_attrs);
        for (int j = 0; j < l->num_attrs; j++)
            put_attr(&w, &l->attrs[j]);
        switch (l->kind) {
        case S4D_LAYER_OP: break;
        case S4D_LAYER_PLUGIN:
            s4d_wbuf_str(&w, l->plugin_namespace);
            s4d_wbuf_str(&w, l->plugin_name);
            s4d_wbuf_str(&w, l->plugin_version);
            s4d_wbuf_u64(&w, l->payload_size);
            s4d_wbuf_bytes(&w, l->payload, (size_t)l->payload_size);
            break;
        }
    }
    s4d_wbuf_u64(&w, p->weights_size);
    s4d_wbuf_pad(&w, S4D_PLAN_ALIGN);
    s4d_wbuf_bytes(&w, p->weights, (size_t)p->weights_size);
    if (w.failed) {
        s4d_wbuf_free(&w);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory serializing the engine");
    }
    uint64_t body = w.size - S4D_ENGINE_HEADER_SIZE;
    uint64_t sum = s4d_fnv1a64(w.data + S4D_ENGINE_HEADER_SIZE, (size_t)body, 0);
    s4d_wbuf hw;
    memset(&hw, 0, sizeof hw);
    s4d_wbuf_bytes(&hw, S4D_ENGINE_MAGIC, 8);
    s4d_wbuf_u32(&hw, S4D_ENGINE_FORMAT_VERSION);
    s4d_wbuf_u32(&hw, S4D_ENGINE_HEADER_SIZE);
    s4d_wbuf_u64(&hw, body);
    s4d_wbuf_u64(&hw, sum);
    if (hw.failed) {
        s4d_wbuf_free(&hw);
        s4d_wbuf_free(&w);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory serializing the engine");
    }
    memcpy(w.data, hw.data, S4D_ENGINE_HEADER_SIZE);
    s4d_wbuf_free(&hw);
    *data = w.data;
    *size = w.size;
    return S4D_OK;
}

/* ---- reading ---- */

typedef struct reader {
    s4d_rbuf r;
    char *err;
    size_t errsz;
} reader;

static int dtype_ok(uint32_t dt)
{
    return dt < 32 && dt != S4D_DTYPE_STRING && s4d_dtype_size((s4d_dtype)dt) > 0;
}

static s4d_status bad(reader *rd, const char *fmt, const char *a, long long b)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, fmt, a, b);
    return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_PARSE, "malformed engine file: %s", tmp);
}

static s4d_status truncated(reader *rd)
{
    return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_PARSE,
                       "malformed engine file: ran out of bytes reading %s at offset %zu",
                       rd->r.what ? rd->r.what : "?", rd->r.pos + S4D_ENGINE_HEADER_SIZE);
}

static s4d_status get_attr(reader *rd, s4d_attr *a)
{
    s4d_rbuf *r = &rd->r;
    uint32_t type;
    a->name = s4d_rbuf_str(r, "attribute name");
    if (s4d_rbuf_u32(r, &type, "attribute type") || !a->name)
        return truncated(rd);
    a->type = (s4d_attr_type)type;
    uint64_t count = 0;
    switch (type) {
    case S4D_ATTR_FLOAT: s4d_rbuf_f32(r, &a->f, "float attribute"); break;
    case S4D_ATTR_INT: s4d_rbuf_i64(r, &a->i, "int attribute"); break;
    case S4D_ATTR_STRING:
        if (s4d_rbuf_u64(r, &count, "string attribute") || count > r->size - r->pos)
            return truncated(rd);
        a->s = malloc((size_t)count + 1);
        if (!a->s)
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        s4d_rbuf_bytes(r, a->s, (size_t)count, "string attribute");
        a->s[count] = 0;
        a->s_len = (size_t)count;
        break;
    case S4D_ATTR_TENSOR: {
        uint32_t dt, rank;
        a->t = calloc(1, sizeof *a->t);
        if (!a->t)
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        if (s4d_rbuf_u32(r, &dt, "tensor attribute") || s4d_rbuf_u32(r, &rank, "tensor attribute"))
            return truncated(rd);
        if (!dtype_ok(dt) || rank > S4D_MAX_RANK)
            return bad(rd, "attribute '%s': bad tensor dtype or rank %lld", a->name, rank);
        a->t->dtype = (s4d_dtype)dt;
        a->t->rank = (int)rank;
        for (uint32_t i = 0; i < rank; i++)
            s4d_rbuf_i64(r, &a->t->dims[i], "tensor attribute dims");
        if (s4d_rbuf_u64(r, &count, "tensor attribute size"))
            return truncated(rd);
        if (s4d_dims_numel(a->t->rank, a->t->dims) < 0 || count != s4d_ir_tensor_bytes(a->t) ||
            count > r->size - r->pos)
            return bad(rd, "attribute '%s': tensor size %lld disagrees with its shape", a->name,
                       (long long)count);
        a->t->data = malloc((size_t)count + 1);
        if (!a->t->data)
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        s4d_rbuf_bytes(r, a->t->data, (size_t)count, "tensor attribute data");
        break;
    }
    case S4D_ATTR_FLOATS:
        if (s4d_rbuf_u64(r, &count, "floats attribute") || count > (r->size - r->pos) / 4)
            return truncated(rd);
        a->floats = malloc((size_t)count * 4 + 1);
        if (!a->floats)
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        a->count = (size_t)count;
        for (uint64_t i = 0; i < count; i++)
            s4d_rbuf_f32(r, &a->floats[i], "floats attribute");
        break;
    case S4D_ATTR_INTS:
        if (s4d_rbuf_u64(r, &count, "ints attribute") || count > (r->size - r->pos) / 8)
            return truncated(rd);
        a->ints = malloc((size_t)count * 8 + 1);
        if (!a->ints)
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        a->count = (size_t)count;
        for (uint64_t i = 0; i < count; i++)
            s4d_rbuf_i64(r, &a->ints[i], "ints attribute");
        break;
    case S4D_ATTR_STRINGS:
        if (s4d_rbuf_u64(r, &count, "strings attribute") || count > (r->size - r->pos) / 4)
            return truncated(rd);
        a->strings = calloc((size_t)count + 1, sizeof(char *));
        if (!a->strings)
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        a->count = (size_t)count;
        for (uint64_t i = 0; i < count; i++)
            if (!(a->strings[i] = s4d_rbuf_str(r, "strings attribute")))
                return truncated(rd);
        break;
    default:
        return bad(rd, "attribute '%s' has unknown type %lld", a->name, (long long)type);
    }
    return r->failed ? truncated(rd) : S4D_OK;
}

static s4d_status check_index(reader *rd, uint32_t v, int count, int allow_missing,
                              const char *layer, int *out)
{
    if (allow_missing && v == 0xffffffffu) {
        *out = -1;
        return S4D_OK;
    }
    if (v >= (uint32_t)count)
        return bad(rd, "layer '%s' refers to tensor %lld, which does not exist", layer,
                   (long long)v);
    *out = (int)v;
    return S4D_OK;
}

static s4d_status read_tensors(reader *rd, s4d_plan *p)
{
    s4d_rbuf *r = &rd->r;
    uint32_t n;
    if (s4d_rbuf_u32(r, &n, "tensor count"))
        return truncated(rd);
    if (n > (r->size - r->pos) / 16)
        return bad(rd, "tensor count %s%lld exceeds the file", "", n);
    p->tensors = calloc((size_t)n + 1, sizeof *p->tensors);
    if (!p->tensors)
        return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        s4d_plan_tensor *t = &p->tensors[i];
        p->num_tensors = (int)i + 1;
        uint32_t dt, rank, place, cout;
        t->io_index = -1;
        t->name = s4d_rbuf_str(r, "tensor name");
        if (!t->name || s4d_rbuf_u32(r, &dt, "tensor dtype") || s4d_rbuf_u32(r, &rank, "tensor rank"))
            return truncated(rd);
        if (!dtype_ok(dt))
            return bad(rd, "tensor '%s' has unknown dtype %lld", t->name, dt);
        if (rank > S4D_MAX_RANK)
            return bad(rd, "tensor '%s' has rank %lld", t->name, rank);
        t->dtype = (s4d_dtype)dt;
        t->rank = (int)rank;
        for (uint32_t d = 0; d < rank; d++)
            s4d_rbuf_i64(r, &t->dims[d], "tensor dims");
        s4d_rbuf_u64(r, &t->bytes, "tensor size");
        s4d_rbuf_u32(r, &place, "tensor placement");
        s4d_rbuf_u64(r, &t->offset, "tensor offset");
        if (s4d_rbuf_u32(r, &cout, "tensor flags"))
            return truncated(rd);
        int64_t numel = s4d_dims_numel(t->rank, t->dims);
        if (numel < 0 || (uint64_t)numel > UINT64_MAX / 16 ||
            t->bytes != (uint64_t)numel * s4d_dtype_size(t->dtype))
            return bad(rd, "tensor '%s': size %lld disagrees with its shape", t->name,
                       (long long)t->bytes);
        if (place > S4D_PLACE_OUTPUT || cout > 1)
            return bad(rd, "tensor '%s' has unknown placement %lld", t->name, place);
        t->place = (s4d_placement)place;
        t->const_output = (int)cout;
    }
    return S4D_OK;
}

static s4d_status read_io(reader *rd, s4d_plan *p, int is_output)
{
    s4d_rbuf *r = &rd->r;
    uint32_t n;
    const char *what = is_output ? "output" : "input";
    if (s4d_rbuf_u32(r, &n, "input/output count"))
        return truncated(rd);
    if (n > (uint32_t)p->num_tensors)
        return bad(rd, "%s count %lld exceeds the tensor count", what, n);
    int *list = calloc((size_t)n + 1, sizeof(int));
    if (!list)
        return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    if (is_output) {
        p->outputs = list;
        p->num_outputs = (int)n;
    } else {
        p->inputs = list;
        p->num_inputs = (int)n;
    }
    s4d_placement want = is_output ? S4D_PLACE_OUTPUT : S4D_PLACE_INPUT;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ti;
        if (s4d_rbuf_u32(r, &ti, "input/output index"))
            return truncated(rd);
        if (ti >= (uint32_t)p->num_tensors || p->tensors[ti].place != want ||
            p->tensors[ti].io_index >= 0)
            return bad(rd, "%s %lld does not name a tensor of that kind", what, i);
        list[i] = (int)ti;
        p->tensors[ti].io_index = (int)i;
    }
    return S4D_OK;
}

static s4d_status read_layers(reader *rd, s4d_plan *p)
{
    s4d_rbuf *r = &rd->r;
    uint32_t n;
    if (s4d_rbuf_u32(r, &n, "layer count"))
        return truncated(rd);
    if (n > (r->size - r->pos) / 16)
        return bad(rd, "layer count %s%lld exceeds the file", "", n);
    p->layers = calloc((size_t)n + 1, sizeof *p->layers);
    if (!p->layers)
        return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (uint32_t i = 0; i < n; i++) {
        s4d_plan_layer *l = &p->layers[i];
        p->num_layers = (int)i + 1;
        uint32_t kind, dev, opset, cnt;
        l->name = s4d_rbuf_str(r, "layer name");
        s4d_rbuf_u32(r, &kind, "layer kind");
        s4d_rbuf_u32(r, &dev, "layer device");
        l->domain = s4d_rbuf_str(r, "layer domain");
        l->op_type = s4d_rbuf_str(r, "layer op_type");
        s4d_rbuf_u32(r, &opset, "layer opset");
        s4d_rbuf_u64(r, &l->workspace, "layer workspace");
        if (r->failed || !l->name || !l->domain || !l->op_type)
            return truncated(rd);
        if (kind > S4D_LAYER_PLUGIN || dev > S4D_DEVICE_KIND_CUDA || opset > 100000)
            return bad(rd, "layer '%s' has an unknown kind, device or opset (%lld)", l->name,
                       (long long)kind);
        l->kind = (s4d_layer_kind)kind;
        l->device = (s4d_device_kind)dev;
        l->opset = (int)opset;
        if (l->workspace > p->workspace_size)
            return bad(rd, "layer '%s' workspace %lld exceeds the engine's", l->name,
                       (long long)l->workspace);
        for (int io = 0; io < 2; io++) {
            if (s4d_rbuf_u32(r, &cnt, "layer tensor count"))
                return truncated(rd);
            if (cnt > 4096 || cnt > (r->size - r->pos) / 4)
                return bad(rd, "layer '%s' has %lld tensors", l->name, cnt);
            int *list = calloc((size_t)cnt + 1, sizeof(int));
            if (!list)
                return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
            if (io) {
                l->outputs = list;
                l->num_outputs = (int)cnt;
            } else {
                l->inputs = list;
                l->num_inputs = (int)cnt;
            }
            for (uint32_t j = 0; j < cnt; j++) {
                uint32_t v;
                if (s4d_rbuf_u32(r, &v, "layer tensor index"))
                    return truncated(rd);
                s4d_status st = check_index(rd, v, p->num_tensors, !io, l->name, &list[j]);
                if (st != S4D_OK)
                    return st;
                if (io && p->tensors[v].place != S4D_PLACE_ARENA &&
                    !(p->tensors[v].place == S4D_PLACE_OUTPUT && !p->tensors[v].const_output))
                    return bad(rd, "layer '%s' writes tensor %lld, which is not writable",
                               l->name, v);
            }
        }
        if (s4d_rbuf_u32(r, &cnt, "attribute count"))
            return truncated(rd);
        if (cnt > (r->size - r->pos) / 8)
            return bad(rd, "layer '%s' has %lld attributes", l->name, cnt);
        l->attrs = calloc((size_t)cnt + 1, sizeof(s4d_attr));
        if (!l->attrs)
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
        for (uint32_t j = 0; j < cnt; j++) {
            l->num_attrs = (int)j + 1;
            s4d_status st = get_attr(rd, &l->attrs[j]);
            if (st != S4D_OK)
                return st;
        }
        if (l->kind == S4D_LAYER_PLUGIN) {
            l->plugin_namespace = s4d_rbuf_str(r, "plugin namespace");
            l->plugin_name = s4d_rbuf_str(r, "plugin name");
            l->plugin_version = s4d_rbuf_str(r, "plugin version");
            if (s4d_rbuf_u64(r, &l->payload_size, "plugin payload size") || !l->plugin_namespace ||
                !l->plugin_name || !l->plugin_version)
                return truncated(rd);
            if (l->payload_size > r->size - r->pos)
                return truncated(rd);
            l->payload = malloc((size_t)l->payload_size + 1);
            if (!l->payload)
                return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory");
            s4d_rbuf_bytes(r, l->payload, (size_t)l->payload_size, "plugin payload");
        }
    }
    return S4D_OK;
}

static s4d_status check_placements(reader *rd, s4d_plan *p)
{
    for (int i = 0; i < p->num_tensors; i++) {
        const s4d_plan_tensor *t = &p->tensors[i];
        int weight = t->place == S4D_PLACE_WEIGHT || (t->place == S4D_PLACE_OUTPUT && t->const_output);
        uint64_t limit = weight ? p->weights_size : p->arena_size;
        if ((weight || t->place == S4D_PLACE_ARENA) &&
            (t->offset > limit || t->bytes > limit - t->offset))
            return bad(rd, "tensor '%s' lies outside the %lld-byte weights or arena", t->name, (long long)limit);
        if ((t->place == S4D_PLACE_INPUT || t->place == S4D_PLACE_OUTPUT) && t->io_index < 0)
            return bad(rd, "tensor '%s' is an input/output missing from the lists", t->name, 0);
    }
    return S4D_OK;
}

s4d_status s4d_plan_deserialize(const uint8_t *data, size_t size, s4d_plan **out, char *err,
                                size_t errsz)
{
    *out = NULL;
    if (size < 8 || memcmp(data, S4D_ENGINE_MAGIC, 8) != 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "not an s4d engine file (the magic bytes '%s' are missing)",
                           S4D_ENGINE_MAGIC);
    if (size < S4D_ENGINE_HEADER_SIZE)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "truncated engine file: %zu bytes, the header alone needs %u", size,
                           S4D_ENGINE_HEADER_SIZE);
    s4d_rbuf h = {data, size, 8, 0, NULL};
    uint32_t version, hsize;
    uint64_t body, sum;
    s4d_rbuf_u32(&h, &version, "version");
    s4d_rbuf_u32(&h, &hsize, "header size");
    s4d_rbuf_u64(&h, &body, "body size");
    s4d_rbuf_u64(&h, &sum, "checksum");
    if (version != S4D_ENGINE_FORMAT_VERSION)
        return s4d_fmt_err(err, errsz, S4D_ERR_VERSION,
                           "engine file format version %u; this build of s4d reads version %u: "
                           "rebuild the engine from its ONNX model",
                           version, S4D_ENGINE_FORMAT_VERSION);
    if (hsize != S4D_ENGINE_HEADER_SIZE)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "malformed engine file: header size %u, expected %u", hsize,
                           S4D_ENGINE_HEADER_SIZE);
    if (body != size - S4D_ENGINE_HEADER_SIZE)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "truncated or padded engine file: the header promises %llu bytes, the "
                           "file has %llu",
                           (unsigned long long)(body + S4D_ENGINE_HEADER_SIZE),
                           (unsigned long long)size);
    uint64_t got = s4d_fnv1a64(data + S4D_ENGINE_HEADER_SIZE, (size_t)body, 0);
    if (got != sum)
        return s4d_fmt_err(err, errsz, S4D_ERR_CHECKSUM,
                           "engine file checksum mismatch: stored %016llx, computed %016llx (the "
                           "file is corrupted)",
                           (unsigned long long)sum, (unsigned long long)got);

    reader rd = {{data + S4D_ENGINE_HEADER_SIZE, (size_t)body, 0, 0, NULL}, err, errsz};
    s4d_rbuf *r = &rd.r;
    s4d_plan *p = calloc(1, sizeof *p);
    if (!p)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    s4d_status st = S4D_OK;
    uint32_t dev, fp16;
    s4d_rbuf_u32(r, &dev, "build options");
    s4d_rbuf_u32(r, &fp16, "build options");
    s4d_rbuf_u64(r, &p->arena_size, "arena size");
    s4d_rbuf_u64(r, &p->arena_size_unplanned, "arena size");
    s4d_rbuf_u64(r, &p->workspace_size, "workspace size");
    if (r->failed) {
        st = truncated(&rd);
        goto fail;
    }
    if (dev > S4D_DEVICE_KIND_CUDA || fp16 > 1) {
        st = bad(&rd, "unknown build options (device %s%lld)", "", dev);
        goto fail;
    }
    p->device = (s4d_device_kind)dev;
    p->fp16 = (int)fp16;
    if ((st = read_tensors(&rd, p)) != S4D_OK || (st = read_io(&rd, p, 0)) != S4D_OK ||
        (st = read_io(&rd, p, 1)) != S4D_OK || (st = read_layers(&rd, p)) != S4D_OK)
        goto fail;
    if (s4d_rbuf_u64(r, &p->weights_size, "weights size")) {
        st = truncated(&rd);
        goto fail;
    }
    size_t pad = (size_t)s4d_align_up(r->pos + S4D_ENGINE_HEADER_SIZE, S4D_PLAN_ALIGN) -
                 (r->pos + S4D_ENGINE_HEADER_SIZE);
    if (s4d_rbuf_skip(r, pad, "weights alignment") || p->weights_size != r->size - r->pos) {
        st = bad(&rd, "weights %s%lld bytes disagree with the file size", "",
                 (long long)p->weights_size);
        goto fail;
    }
    p->weights = s4d_aligned_alloc((size_t)p->weights_size);
    if (!p->weights) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory loading weights");
        goto fail;
    }
    s4d_rbuf_bytes(r, p->weights, (size_t)p->weights_size, "weights");
    if ((st = check_placements(&rd, p)) != S4D_OK)
        goto fail;
    *out = p;
    return S4D_OK;
fail:
    s4d_plan_destroy(p);
    return st;
}
