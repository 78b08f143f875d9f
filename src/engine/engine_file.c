/*
 * The engine file, format version 2: docs/engine-format.md is the
 * specification. A header, then tagged sections (id, flags, size); each
 * section's payload starts at a 64-byte boundary of the file so that the
 * weights can be used in place. Records inside the tensor and layer sections
 * carry their own size, so later versions append fields a reader skips.
 *
 * Writing is a walk over the plan. Reading checks the header, the checksum,
 * then every count, index, offset and size against the bytes that remain and
 * against the other records, before anything uses them; the runtime then
 * re-infers every layer against its schema (runtime/engine.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "util/util.h"

/* Section ids: four ASCII bytes, little-endian. */
#define SEC_ID(a, b, c, d)                                                                         \
    ((uint32_t)(a) | ((uint32_t)(b) << 8) | ((uint32_t)(c) << 16) | ((uint32_t)(d) << 24))
#define SEC_META SEC_ID('M', 'E', 'T', 'A')
#define SEC_TENSORS SEC_ID('T', 'N', 'S', 'R')
#define SEC_IO SEC_ID('I', 'O', 'I', 'O')
#define SEC_LAYERS SEC_ID('L', 'A', 'Y', 'R')
#define SEC_WEIGHTS SEC_ID('W', 'G', 'H', 'T')
/* Optional: the precision report of an fp16 build (a u32-length string). */
#define SEC_PRECISION SEC_ID('P', 'R', 'E', 'C')
#define SEC_REQUIRED 1u
#define SEC_HEADER 16u

/* Tensor flags. */
#define TF_CONST_OUTPUT 1u
#define TF_FROZEN 2u

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

/* Starts a section: padding so its payload lands on a 64-byte file offset, then
   its header with a size patched by end_section. Returns the header's position. */
static size_t begin_section(s4d_wbuf *w, uint32_t id, uint32_t flags)
{
    while ((w->size + SEC_HEADER) % S4D_PLAN_ALIGN)
        s4d_wbuf_bytes(w, "", 1);
    size_t at = w->size;
    s4d_wbuf_u32(w, id);
    s4d_wbuf_u32(w, flags);
    s4d_wbuf_u64(w, 0);
    return at;
}

static void end_section(s4d_wbuf *w, size_t at)
{
    if (w->failed)
        return;
    uint64_t size = w->size - at - SEC_HEADER;
    for (int i = 0; i < 8; i++)
        w->data[at + 8 + (size_t)i] = (uint8_t)(size >> (8 * i));
}

/* Records carry their own size (u32) so that later fields can be appended. */
static size_t begin_record(s4d_wbuf *w)
{
    size_t at = w->size;
    s4d_wbuf_u32(w, 0);
    return at;
}

static void end_record(s4d_wbuf *w, size_t at)
{
    if (w->failed)
        return;
    uint32_t size = (uint32_t)(w->size - at - 4);
    for (int i = 0; i < 4; i++)
        w->data[at + (size_t)i] = (uint8_t)(size >> (8 * i));
}

static void put_meta(s4d_wbuf *w, const s4d_plan *p)
{
    size_t at = begin_section(w, SEC_META, SEC_REQUIRED);
    s4d_wbuf_str(w, p->library_version);
    s4d_wbuf_u32(w, (uint32_t)p->device);
    s4d_wbuf_str(w, p->target.name);
    s4d_wbuf_str(w, p->target.arch);
    s4d_wbuf_str(w, p->target.libraries);
    s4d_wbuf_u32(w, (uint32_t)p->fp16);
    s4d_wbuf_u32(w, (uint32_t)p->tf32);
    s4d_wbuf_u32(w, (uint32_t)p->allow_fallback);
    s4d_wbuf_u32(w, S4D_NUM_DEVICES);
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        s4d_wbuf_u64(w, p->arena_size[d]);
        s4d_wbuf_u64(w, p->arena_size_unplanned[d]);
        s4d_wbuf_u64(w, p->workspace_size[d]);
    }
    end_section(w, at);
}

static void put_tensors(s4d_wbuf *w, const s4d_plan *p)
{
    size_t at = begin_section(w, SEC_TENSORS, SEC_REQUIRED);
    s4d_wbuf_u32(w, (uint32_t)p->num_tensors);
    for (int i = 0; i < p->num_tensors; i++) {
        const s4d_plan_tensor *t = &p->tensors[i];
        size_t rec = begin_record(w);
        s4d_wbuf_str(w, t->name);
        s4d_wbuf_u32(w, (uint32_t)t->dtype);
        s4d_wbuf_u32(w, (uint32_t)t->rank);
        for (int d = 0; d < t->rank; d++)
            s4d_wbuf_i64(w, t->dims[d]);
        s4d_wbuf_u64(w, t->bytes);
        s4d_wbuf_u32(w, (uint32_t)t->device);
        s4d_wbuf_u32(w, (uint32_t)t->place);
        /* A view has no offset: the field names the tensor it views. */
        s4d_wbuf_u64(w, t->place == S4D_PLACE_VIEW ? (uint64_t)t->view_of : t->offset);
        s4d_wbuf_u32(w, (t->const_output ? TF_CONST_OUTPUT : 0u) | (t->frozen ? TF_FROZEN : 0u));
        end_record(w, rec);
    }
    end_section(w, at);
}

static void put_io(s4d_wbuf *w, const s4d_plan *p)
{
    size_t at = begin_section(w, SEC_IO, SEC_REQUIRED);
    s4d_wbuf_u32(w, (uint32_t)p->num_inputs);
    for (int i = 0; i < p->num_inputs; i++)
        s4d_wbuf_u32(w, (uint32_t)p->inputs[i]);
    s4d_wbuf_u32(w, (uint32_t)p->num_outputs);
    for (int i = 0; i < p->num_outputs; i++)
        s4d_wbuf_u32(w, (uint32_t)p->outputs[i]);
    end_section(w, at);
}

static void put_layers(s4d_wbuf *w, const s4d_plan *p)
{
    size_t at = begin_section(w, SEC_LAYERS, SEC_REQUIRED);
    s4d_wbuf_u32(w, (uint32_t)p->num_layers);
    for (int i = 0; i < p->num_layers; i++) {
        const s4d_plan_layer *l = &p->layers[i];
        size_t rec = begin_record(w);
        s4d_wbuf_str(w, l->name);
        s4d_wbuf_u32(w, (uint32_t)l->kind);
        s4d_wbuf_u32(w, (uint32_t)l->device);
        s4d_wbuf_u32(w, (uint32_t)l->precision);
        s4d_wbuf_u32(w, (uint32_t)l->format);
        s4d_wbuf_str(w, l->domain);
        s4d_wbuf_str(w, l->op_type);
        s4d_wbuf_u32(w, (uint32_t)l->opset);
        s4d_wbuf_u64(w, l->workspace);
        s4d_wbuf_u32(w, (uint32_t)l->num_inputs);
        for (int j = 0; j < l->num_inputs; j++)
            s4d_wbuf_u32(w, (uint32_t)l->inputs[j]); /* -1 stored as 0xffffffff */
        s4d_wbuf_u32(w, (uint32_t)l->num_outputs);
        for (int j = 0; j < l->num_outputs; j++)
            s4d_wbuf_u32(w, (uint32_t)l->outputs[j]);
        s4d_wbuf_u32(w, (uint32_t)l->num_attrs);
        for (int j = 0; j < l->num_attrs; j++)
            put_attr(w, &l->attrs[j]);
        if (l->kind == S4D_LAYER_PLUGIN) {
            s4d_wbuf_str(w, l->plugin_namespace);
            s4d_wbuf_str(w, l->plugin_name);
            s4d_wbuf_str(w, l->plugin_version);
            s4d_wbuf_u64(w, l->payload_size);
            s4d_wbuf_bytes(w, l->payload, (size_t)l->payload_size);
        }
        s4d_wbuf_u64(w, l->backend_payload_size);
        s4d_wbuf_bytes(w, l->backend_payload, (size_t)l->backend_payload_size);
        end_record(w, rec);
    }
    end_section(w, at);
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
    put_meta(&w, p);
    put_tensors(&w, p);
    put_io(&w, p);
    put_layers(&w, p);
    uint32_t nsec = 5;
    if (p->precision_report) {
        /* Optional, so that a reader without it still loads the engine. */
        size_t pat = begin_section(&w, SEC_PRECISION, 0);
        s4d_wbuf_str(&w, p->precision_report);
        end_section(&w, pat);
        nsec++;
    }
    size_t at = begin_section(&w, SEC_WEIGHTS, SEC_REQUIRED);
    s4d_wbuf_bytes(&w, p->weights, (size_t)p->weights_size);
    end_section(&w, at);
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
    s4d_wbuf_u32(&hw, nsec); /* sections */
    s4d_wbuf_u32(&hw, 0); /* reserved */
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
    s4d_rbuf r;    /* the current section (or record) */
    size_t base;   /* file offset of r.data, for messages */
    const char *section;
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
    return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_PARSE, "malformed engine file (%s section): %s",
                       rd->section, tmp);
}

static s4d_status truncated(reader *rd)
{
    return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_PARSE,
                       "malformed engine file: the %s section ran out of bytes reading %s at file "
                       "offset %zu",
                       rd->section, rd->r.what ? rd->r.what : "?", rd->base + rd->r.pos);
}

static s4d_status oom(reader *rd)
{
    return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_NO_MEMORY, "out of memory reading the engine");
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
            return oom(rd);
        s4d_rbuf_bytes(r, a->s, (size_t)count, "string attribute");
        a->s[count] = 0;
        a->s_len = (size_t)count;
        break;
    case S4D_ATTR_TENSOR: {
        uint32_t dt, rank;
        a->t = calloc(1, sizeof *a->t);
        if (!a->t)
            return oom(rd);
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
        if (!s4d_shape_fits(a->t->rank, a->t->dims, a->t->dtype) ||
            count != s4d_ir_tensor_bytes(a->t) ||
            count > r->size - r->pos)
            return bad(rd, "attribute '%s': tensor size %lld disagrees with its shape", a->name,
                       (long long)count);
        a->t->data = malloc((size_t)count + 1);
        if (!a->t->data)
            return oom(rd);
        s4d_rbuf_bytes(r, a->t->data, (size_t)count, "tensor attribute data");
        break;
    }
    case S4D_ATTR_FLOATS:
        if (s4d_rbuf_u64(r, &count, "floats attribute") || count > (r->size - r->pos) / 4)
            return truncated(rd);
        a->floats = malloc((size_t)count * 4 + 1);
        if (!a->floats)
            return oom(rd);
        a->count = (size_t)count;
        for (uint64_t i = 0; i < count; i++)
            s4d_rbuf_f32(r, &a->floats[i], "floats attribute");
        break;
    case S4D_ATTR_INTS:
        if (s4d_rbuf_u64(r, &count, "ints attribute") || count > (r->size - r->pos) / 8)
            return truncated(rd);
        a->ints = malloc((size_t)count * 8 + 1);
        if (!a->ints)
            return oom(rd);
        a->count = (size_t)count;
        for (uint64_t i = 0; i < count; i++)
            s4d_rbuf_i64(r, &a->ints[i], "ints attribute");
        break;
    case S4D_ATTR_STRINGS:
        if (s4d_rbuf_u64(r, &count, "strings attribute") || count > (r->size - r->pos) / 4)
            return truncated(rd);
        a->strings = calloc((size_t)count + 1, sizeof(char *));
        if (!a->strings)
            return oom(rd);
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

/* Enters the next record: rd->r becomes the record's bytes; *next is where the section resumes. */
static s4d_status enter_record(reader *rd, s4d_rbuf *section, size_t *next, const char *what)
{
    uint32_t size;
    if (s4d_rbuf_u32(section, &size, what)) {
        rd->r = *section;
        return truncated(rd);
    }
    if (size > section->size - section->pos) {
        rd->r = *section;
        rd->r.what = what;
        return truncated(rd);
    }
    rd->r.data = section->data + section->pos;
    rd->r.size = size;
    rd->r.pos = 0;
    rd->r.failed = 0;
    rd->r.what = NULL;
    rd->base += section->pos;
    *next = section->pos + size;
    return S4D_OK;
}

static s4d_status read_meta(reader *rd, s4d_plan *p)
{
    s4d_rbuf *r = &rd->r;
    uint32_t dev = 0, fp16 = 0, tf32 = 0, fb = 0, ndev = 0;
    char *lib = s4d_rbuf_str(r, "library version");
    s4d_rbuf_u32(r, &dev, "device");
    char *name = s4d_rbuf_str(r, "target name");
    char *arch = s4d_rbuf_str(r, "target arch");
    char *libs = s4d_rbuf_str(r, "target libraries");
    s4d_rbuf_u32(r, &fp16, "fp16");
    s4d_rbuf_u32(r, &tf32, "tf32");
    s4d_rbuf_u32(r, &fb, "fallback");
    s4d_rbuf_u32(r, &ndev, "device count");
    s4d_status st = S4D_OK;
    if (r->failed || !lib || !name || !arch || !libs) {
        st = truncated(rd);
        goto done;
    }
    if (dev >= S4D_NUM_DEVICES || fp16 > 1 || tf32 > 1 || fb > 1 || ndev != S4D_NUM_DEVICES) {
        st = bad(rd, "unknown build options (device %s%lld)", "", dev);
        goto done;
    }
    p->device = (s4d_device)dev;
    p->fp16 = (int)fp16;
    p->tf32 = (int)tf32;
    p->allow_fallback = (int)fb;
    snprintf(p->library_version, sizeof p->library_version, "%s", lib);
    snprintf(p->target.name, sizeof p->target.name, "%s", name);
    snprintf(p->target.arch, sizeof p->target.arch, "%s", arch);
    snprintf(p->target.libraries, sizeof p->target.libraries, "%s", libs);
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        s4d_rbuf_u64(r, &p->arena_size[d], "arena size");
        s4d_rbuf_u64(r, &p->arena_size_unplanned[d], "arena size");
        s4d_rbuf_u64(r, &p->workspace_size[d], "workspace size");
    }
    if (r->failed)
        st = truncated(rd);
done:
    free(lib);
    free(name);
    free(arch);
    free(libs);
    return st;
}

static s4d_status read_tensors(reader *rd, s4d_plan *p)
{
    s4d_rbuf sec = rd->r;
    size_t sec_base = rd->base;
    uint32_t n;
    if (s4d_rbuf_u32(&sec, &n, "tensor count"))
        return truncated(rd);
    if (n > (sec.size - sec.pos) / 24)
        return bad(rd, "tensor count %s%lld exceeds the section", "", n);
    p->tensors = calloc((size_t)n + 1, sizeof *p->tensors);
    if (!p->tensors)
        return oom(rd);
    for (uint32_t i = 0; i < n; i++) {
        s4d_plan_tensor *t = &p->tensors[i];
        p->num_tensors = (int)i + 1;
        t->io_index = -1;
        t->view_of = -1;
        size_t next = 0;
        rd->base = sec_base;
        s4d_status st = enter_record(rd, &sec, &next, "tensor record");
        if (st != S4D_OK)
            return st;
        s4d_rbuf *r = &rd->r;
        uint32_t dt, rank, dev = 0, place = 0, flags = 0;
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
        s4d_rbuf_u32(r, &dev, "tensor device");
        s4d_rbuf_u32(r, &place, "tensor placement");
        s4d_rbuf_u64(r, &t->offset, "tensor offset");
        if (s4d_rbuf_u32(r, &flags, "tensor flags"))
            return truncated(rd);
        if (!s4d_shape_fits(t->rank, t->dims, t->dtype)) {
            char dims[200];
            s4d_dims_str(t->rank, t->dims, dims, sizeof dims);
            return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_PARSE,
                               "malformed engine file (%s section): tensor '%s' has shape %s: a "
                               "negative dim, or more than 2^50 bytes counting dims of 0 as 1",
                               rd->section, t->name, dims);
        }
        int64_t numel = s4d_dims_numel(t->rank, t->dims);
        if (numel < 0 || t->bytes != (uint64_t)numel * s4d_dtype_size(t->dtype))
            return bad(rd, "tensor '%s': size %lld disagrees with its shape", t->name,
                       (long long)t->bytes);
        if (place > S4D_PLACE_VIEW || dev >= S4D_NUM_DEVICES ||
            (flags & ~(TF_CONST_OUTPUT | TF_FROZEN)))
            return bad(rd, "tensor '%s' has an unknown placement, device or flag (%lld)", t->name,
                       (long long)place);
        t->place = (s4d_placement)place;
        t->device = (s4d_device)dev;
        t->const_output = (flags & TF_CONST_OUTPUT) != 0;
        t->frozen = (flags & TF_FROZEN) != 0;
        if ((t->const_output && t->place != S4D_PLACE_OUTPUT) ||
            (t->frozen && t->place != S4D_PLACE_INPUT))
            return bad(rd, "tensor '%s' has flags its placement cannot have (%lld)", t->name,
                       (long long)flags);
        if (t->place == S4D_PLACE_VIEW) {
            /* What it views is checked against the layers in check_plan. */
            if (t->offset >= n || t->offset == i)
                return bad(rd, "view tensor '%s' views tensor %lld, which is not another tensor",
                           t->name, (long long)t->offset);
            t->view_of = (int)t->offset;
            t->offset = 0;
        }
        sec.pos = next;
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
        return oom(rd);
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

static s4d_status read_list(reader *rd, s4d_plan *p, s4d_plan_layer *l, int io)
{
    s4d_rbuf *r = &rd->r;
    uint32_t cnt;
    if (s4d_rbuf_u32(r, &cnt, "layer tensor count"))
        return truncated(rd);
    if (cnt > 4096 || cnt > (r->size - r->pos) / 4)
        return bad(rd, "layer '%s' has %lld tensors", l->name, cnt);
    int *list = calloc((size_t)cnt + 1, sizeof(int));
    if (!list)
        return oom(rd);
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
        if (!io && v == 0xffffffffu) {
            list[j] = -1;
            continue;
        }
        if (v >= (uint32_t)p->num_tensors)
            return bad(rd, "layer '%s' refers to tensor %lld, which does not exist", l->name,
                       (long long)v);
        list[j] = (int)v;
    }
    return S4D_OK;
}

static s4d_status read_layer(reader *rd, s4d_plan *p, s4d_plan_layer *l)
{
    s4d_rbuf *r = &rd->r;
    uint32_t kind, dev, prec, fmt, opset, cnt;
    l->name = s4d_rbuf_str(r, "layer name");
    s4d_rbuf_u32(r, &kind, "layer kind");
    s4d_rbuf_u32(r, &dev, "layer device");
    s4d_rbuf_u32(r, &prec, "layer precision");
    s4d_rbuf_u32(r, &fmt, "layer format");
    l->domain = s4d_rbuf_str(r, "layer domain");
    l->op_type = s4d_rbuf_str(r, "layer op_type");
    s4d_rbuf_u32(r, &opset, "layer opset");
    s4d_rbuf_u64(r, &l->workspace, "layer workspace");
    if (r->failed || !l->name || !l->domain || !l->op_type)
        return truncated(rd);
    if (kind > S4D_LAYER_COPY || dev >= S4D_NUM_DEVICES || opset > 100000 || !dtype_ok(prec) ||
        fmt > S4D_FORMAT_NHWC)
        return bad(rd, "layer '%s' has an unknown kind, device, precision, format or opset (%lld)",
                   l->name, (long long)kind);
    l->kind = (s4d_layer_kind)kind;
    l->device = (s4d_device)dev;
    l->precision = (s4d_dtype)prec;
    l->format = (s4d_tensor_format)fmt;
    l->opset = (int)opset;
    s4d_status st = read_list(rd, p, l, 0);
    if (st == S4D_OK)
        st = read_list(rd, p, l, 1);
    if (st != S4D_OK)
        return st;
    if (s4d_rbuf_u32(r, &cnt, "attribute count"))
        return truncated(rd);
    if (cnt > (r->size - r->pos) / 8)
        return bad(rd, "layer '%s' has %lld attributes", l->name, cnt);
    l->attrs = calloc((size_t)cnt + 1, sizeof(s4d_attr));
    if (!l->attrs)
        return oom(rd);
    for (uint32_t j = 0; j < cnt; j++) {
        l->num_attrs = (int)j + 1;
        st = get_attr(rd, &l->attrs[j]);
        if (st != S4D_OK)
            return st;
        for (uint32_t k = 0; k < j; k++)
            if (strcmp(l->attrs[k].name, l->attrs[j].name) == 0)
                return s4d_fmt_err(rd->err, rd->errsz, S4D_ERR_PARSE,
                                   "malformed engine file: layer '%s' has attribute '%s' twice",
                                   l->name, l->attrs[j].name);
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
            return oom(rd);
        s4d_rbuf_bytes(r, l->payload, (size_t)l->payload_size, "plugin payload");
    }
    if (s4d_rbuf_u64(r, &l->backend_payload_size, "backend payload size"))
        return truncated(rd);
    if (l->backend_payload_size > r->size - r->pos)
        return truncated(rd);
    if (l->backend_payload_size) {
        l->backend_payload = malloc((size_t)l->backend_payload_size);
        if (!l->backend_payload)
            return oom(rd);
        s4d_rbuf_bytes(r, l->backend_payload, (size_t)l->backend_payload_size, "backend payload");
    }
    return r->failed ? truncated(rd) : S4D_OK;
}

static s4d_status read_layers(reader *rd, s4d_plan *p)
{
    s4d_rbuf sec = rd->r;
    size_t sec_base = rd->base;
    uint32_t n;
    if (s4d_rbuf_u32(&sec, &n, "layer count"))
        return truncated(rd);
    if (n > (sec.size - sec.pos) / 32)
        return bad(rd, "layer count %s%lld exceeds the section", "", n);
    p->layers = calloc((size_t)n + 1, sizeof *p->layers);
    if (!p->layers)
        return oom(rd);
    for (uint32_t i = 0; i < n; i++) {
        p->num_layers = (int)i + 1;
        size_t next = 0;
        rd->base = sec_base;
        s4d_status st = enter_record(rd, &sec, &next, "layer record");
        if (st == S4D_OK)
            st = read_layer(rd, p, &p->layers[i]);
        if (st != S4D_OK)
            return st;
        sec.pos = next;
    }
    return S4D_OK;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const s4d_plan_tensor *const *)a)->name, (*(const s4d_plan_tensor *const *)b)->name);
}

/* Names are how callers bind inputs and find outputs: one tensor per name. */
static s4d_status check_names(reader *rd, const s4d_plan *p)
{
    const s4d_plan_tensor **sorted = malloc(((size_t)p->num_tensors + 1) * sizeof *sorted);
    if (!sorted)
        return oom(rd);
    for (int i = 0; i < p->num_tensors; i++)
        sorted[i] = &p->tensors[i];
    qsort(sorted, (size_t)p->num_tensors, sizeof *sorted, by_name);
    s4d_status st = S4D_OK;
    for (int i = 1; i < p->num_tensors && st == S4D_OK; i++)
        if (strcmp(sorted[i - 1]->name, sorted[i]->name) == 0)
            st = bad(rd, "two tensors are named '%s'%.0lld", sorted[i]->name, 0);
    free(sorted);
    return st;
}

/*
 * A view tensor (written by layer l) shares the bytes of the tensor it views:
 * l must be the op layer that reads that tensor as its input 0 and has this
 * one output, on l's device, with the same dtype and size; the viewed tensor
 * must be one whose bytes no layer changes after its writer (an activation,
 * another view, a graph input, a non-constant graph output). With the writer
 * order checked by the caller (l reads the viewed tensor after its writer),
 * chains of views end at a tensor with a buffer: no cycles. Whether l's op
 * only copies bytes is checked when the layer is inferred (runtime/engine.c).
 */
static s4d_status check_view(reader *rd, const s4d_plan *p, const s4d_plan_layer *l, int ti)
{
    const s4d_plan_tensor *t = &p->tensors[ti];
    const s4d_plan_tensor *v = &p->tensors[t->view_of];
    if (l->kind != S4D_LAYER_OP || l->num_outputs != 1 || l->num_inputs < 1 ||
        l->inputs[0] != t->view_of)
        return bad(rd, "view tensor '%s' is not the one output of an op layer that reads the "
                       "tensor it views (%lld)",
                   t->name, (long long)t->view_of);
    int readable = v->place == S4D_PLACE_ARENA || v->place == S4D_PLACE_VIEW ||
                   v->place == S4D_PLACE_INPUT ||
                   (v->place == S4D_PLACE_OUTPUT && !v->const_output);
    if (!readable || v->dtype != t->dtype || v->bytes != t->bytes || v->device != t->device ||
        t->device != l->device)
        return bad(rd, "view tensor '%s' views a tensor of another size, dtype, device or "
                       "placement (%lld)",
                   t->name, (long long)t->view_of);
    return S4D_OK;
}

/*
 * Cross-record checks: where each tensor lives, who writes it, and that
 * layers read only what exists by then. What the records mean (shapes per
 * op) is checked by the runtime, which infers every layer again.
 */
static s4d_status check_plan(reader *rd, s4d_plan *p)
{
    rd->section = "tensor and layer";
    if (p->num_outputs < 1)
        return bad(rd, "the engine has no outputs%s%.0lld", "", 0);
    s4d_status st = check_names(rd, p);
    if (st != S4D_OK)
        return st;
    int *writer = malloc(((size_t)p->num_tensors + 1) * sizeof(int));
    if (!writer)
        return oom(rd);
    for (int i = 0; i < p->num_tensors; i++) {
        const s4d_plan_tensor *t = &p->tensors[i];
        writer[i] = -1;
        int weight = t->place == S4D_PLACE_WEIGHT || (t->place == S4D_PLACE_OUTPUT && t->const_output) ||
                     t->frozen;
        if (weight && (t->offset % S4D_PLAN_ALIGN != 0 || t->offset > p->weights_size ||
                       t->bytes > p->weights_size - t->offset)) {
            st = bad(rd, "tensor '%s' does not lie inside the weights at a 64-byte boundary (%lld)",
                     t->name, (long long)t->offset);
            goto done;
        }
        if ((t->place == S4D_PLACE_INPUT || t->place == S4D_PLACE_OUTPUT) && t->io_index < 0) {
            st = bad(rd, "tensor '%s' is an input/output missing from the lists", t->name, 0);
            goto done;
        }
        if ((t->place == S4D_PLACE_INPUT || t->place == S4D_PLACE_OUTPUT) && t->device != p->device) {
            st = bad(rd, "graph input/output '%s' is not on the engine's device (%lld)", t->name,
                     (long long)t->device);
            goto done;
        }
    }
    for (int s = 0; s < p->num_layers; s++) {
        const s4d_plan_layer *l = &p->layers[s];
        if (l->kind == S4D_LAYER_COPY && (l->num_inputs != 1 || l->num_outputs != 1)) {
            st = bad(rd, "copy layer '%s' must have one input and one output (%lld)", l->name,
                     (long long)l->num_inputs);
            goto done;
        }
        /* What layer details report: the dtype of the first output, as the builder sets it. */
        if (l->num_outputs > 0 && l->precision != p->tensors[l->outputs[0]].dtype) {
            st = bad(rd, "layer '%s' claims a precision other than its first output's dtype (%lld)",
                     l->name, (long long)l->precision);
            goto done;
        }
        if (l->device != p->device && !(p->allow_fallback && l->device == S4D_DEVICE_CPU)) {
            st = bad(rd, "layer '%s' runs on a device the engine was not built for (%lld)",
                     l->name, (long long)l->device);
            goto done;
        }
        for (int j = 0; j < l->num_inputs; j++) {
            int ti = l->inputs[j];
            if (ti < 0)
                continue;
            const s4d_plan_tensor *t = &p->tensors[ti];
            int need_writer = t->place == S4D_PLACE_ARENA || t->place == S4D_PLACE_VIEW ||
                              (t->place == S4D_PLACE_OUTPUT && !t->const_output);
            if (need_writer && writer[ti] < 0) {
                st = bad(rd, "layer '%s' reads tensor %lld before any layer writes it", l->name,
                         (long long)ti);
                goto done;
            }
            if (t->place != S4D_PLACE_WEIGHT && l->kind != S4D_LAYER_COPY && t->device != l->device) {
                st = bad(rd, "layer '%s' reads a tensor of another device without a copy (%lld)",
                         l->name, (long long)ti);
                goto done;
            }
        }
        for (int j = 0; j < l->num_outputs; j++) {
            int ti = l->outputs[j];
            const s4d_plan_tensor *t = &p->tensors[ti];
            if (t->place == S4D_PLACE_VIEW) {
                st = check_view(rd, p, l, ti);
                if (st != S4D_OK)
                    goto done;
            } else if (t->place != S4D_PLACE_ARENA &&
                       !(t->place == S4D_PLACE_OUTPUT && !t->const_output)) {
                st = bad(rd, "layer '%s' writes tensor %lld, which is not writable", l->name,
                         (long long)ti);
                goto done;
            }
            if (writer[ti] >= 0) {
                st = bad(rd, "layer '%s' writes a tensor another layer wrote (%lld)", l->name,
                         (long long)ti);
                goto done;
            }
            if (l->kind != S4D_LAYER_COPY && t->device != l->device) {
                st = bad(rd, "layer '%s' writes a tensor of another device (%lld)", l->name,
                         (long long)ti);
                goto done;
            }
            writer[ti] = s;
        }
    }
    for (int i = 0; i < p->num_tensors; i++) {
        if (p->tensors[i].place == S4D_PLACE_VIEW && writer[i] < 0) {
            st = bad(rd, "view tensor '%s' is written by no layer%.0lld", p->tensors[i].name, 0);
            goto done;
        }
    }
    for (int i = 0; i < p->num_outputs; i++) {
        int ti = p->outputs[i];
        if (!p->tensors[ti].const_output && writer[ti] < 0) {
            st = bad(rd, "graph output '%s' is written by no layer", p->tensors[ti].name, 0);
            goto done;
        }
    }
    for (int d = 0; d < S4D_NUM_DEVICES; d++) {
        /* The arena can never need more than every tensor side by side. */
        uint64_t all = 0;
        for (int i = 0; i < p->num_tensors; i++) {
            const s4d_plan_tensor *t = &p->tensors[i];
            if (t->place == S4D_PLACE_ARENA && (int)t->device == d) {
                uint64_t b = s4d_align_up(t->bytes ? t->bytes : 1, S4D_PLAN_ALIGN);
                all = all > UINT64_MAX - b ? UINT64_MAX : all + b; /* no wrap below the arena */
            }
        }
        if (p->arena_size[d] > all || p->arena_size_unplanned[d] != all) {
            st = bad(rd, "the %s arena of %lld bytes disagrees with its tensors",
                     s4d_device_name((s4d_device)d), (long long)p->arena_size[d]);
            goto done;
        }
        st = s4d_plan_check_memory(p, d, rd->err, rd->errsz);
        if (st != S4D_OK)
            goto done;
    }
done:
    free(writer);
    return st;
}

s4d_status s4d_plan_deserialize(const uint8_t *data, size_t size, s4d_plan **out, char *err,
                                size_t errsz)
{
    *out = NULL;
    if (size < 8 || memcmp(data, S4D_ENGINE_MAGIC, 8) != 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "not an s4d engine file (the magic bytes '%s' are missing)",
                           S4D_ENGINE_MAGIC);
    if (size < 16)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE, "truncated engine file: %zu bytes", size);
    s4d_rbuf h = {data, size, 8, 0, NULL};
    uint32_t version, hsize;
    s4d_rbuf_u32(&h, &version, "version");
    s4d_rbuf_u32(&h, &hsize, "header size");
    if (version != S4D_ENGINE_FORMAT_VERSION)
        return s4d_fmt_err(err, errsz, S4D_ERR_VERSION,
                           "engine file format version %u; this build of s4d reads version %u: "
                           "rebuild the engine from its ONNX model",
                           version, S4D_ENGINE_FORMAT_VERSION);
    if (hsize != S4D_ENGINE_HEADER_SIZE)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "malformed engine file: header size %u, expected %u", hsize,
                           S4D_ENGINE_HEADER_SIZE);
    if (size < S4D_ENGINE_HEADER_SIZE)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "truncated engine file: %zu bytes, the header alone needs %u", size,
                           S4D_ENGINE_HEADER_SIZE);
    uint64_t body, sum;
    uint32_t nsec, reserved;
    s4d_rbuf_u64(&h, &body, "body size");
    s4d_rbuf_u64(&h, &sum, "checksum");
    s4d_rbuf_u32(&h, &nsec, "section count");
    s4d_rbuf_u32(&h, &reserved, "reserved");
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
    if (nsec > 1024 || reserved != 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                           "malformed engine file: %u sections, reserved field %u", nsec, reserved);

    s4d_plan *p = calloc(1, sizeof *p);
    if (!p)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    reader rd = {{0}, 0, "header", err, errsz};
    s4d_status st = S4D_OK;
    int seen[5] = {0, 0, 0, 0, 0};
    size_t pos = S4D_ENGINE_HEADER_SIZE;
    for (uint32_t k = 0; k < nsec; k++) {
        while ((pos + SEC_HEADER) % S4D_PLAN_ALIGN && pos < size) {
            if (data[pos] != 0) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                                 "malformed engine file: non-zero padding at offset %zu", pos);
                goto fail;
            }
            pos++;
        }
        if (size - pos < SEC_HEADER) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                             "truncated engine file: section %u of %u is missing", k + 1, nsec);
            goto fail;
        }
        s4d_rbuf sh = {data + pos, SEC_HEADER, 0, 0, NULL};
        uint32_t id, flags;
        uint64_t ssize;
        s4d_rbuf_u32(&sh, &id, "section id");
        s4d_rbuf_u32(&sh, &flags, "section flags");
        s4d_rbuf_u64(&sh, &ssize, "section size");
        pos += SEC_HEADER;
        if (ssize > size - pos) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                             "truncated engine file: section %u claims %llu bytes, %zu remain",
                             k + 1, (unsigned long long)ssize, size - pos);
            goto fail;
        }
        rd.r = (s4d_rbuf){data + pos, (size_t)ssize, 0, 0, NULL};
        rd.base = pos;
        int slot = -1;
        switch (id) {
        case SEC_META: slot = 0; rd.section = "META"; break;
        case SEC_TENSORS: slot = 1; rd.section = "TNSR"; break;
        case SEC_IO: slot = 2; rd.section = "IOIO"; break;
        case SEC_LAYERS: slot = 3; rd.section = "LAYR"; break;
        case SEC_WEIGHTS: slot = 4; rd.section = "WGHT"; break;
        default: break;
        }
        if (slot < 0 && id == SEC_PRECISION && !p->precision_report) {
            rd.section = "PREC";
            p->precision_report = s4d_rbuf_str(&rd.r, "precision report");
            if (!p->precision_report || rd.r.pos != rd.r.size) {
                st = bad(&rd, "the precision report is malformed%s%lld", "", 0);
                goto fail;
            }
            pos += (size_t)ssize;
            continue;
        }
        if (slot < 0) {
            char tag[5];
            for (int b = 0; b < 4; b++) {
                char c = (char)(id >> (8 * b));
                tag[b] = c >= 32 && c < 127 ? c : '?';
            }
            tag[4] = 0;
            if (flags & SEC_REQUIRED) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_VERSION,
                                 "engine file has a required section '%s' (id 0x%08x) this build "
                                 "of s4d does not know: rebuild the engine or use the s4d that "
                                 "built it",
                                 tag, id);
                goto fail;
            }
            pos += (size_t)ssize; /* an optional section: skipped */
            continue;
        }
        if (seen[slot]++) {
            st = bad(&rd, "the section appears twice%s%lld", "", 0);
            goto fail;
        }
        /* Sections depend on the ones before them. */
        if ((slot >= 1 && !seen[0]) || (slot >= 2 && !seen[1]) || (slot == 3 && !seen[2])) {
            st = bad(&rd, "the section comes before the ones it depends on%s%lld", "", 0);
            goto fail;
        }
        switch (slot) {
        case 0: st = read_meta(&rd, p); break;
        case 1: st = read_tensors(&rd, p); break;
        case 2:
            st = read_io(&rd, p, 0);
            if (st == S4D_OK)
                st = read_io(&rd, p, 1);
            break;
        case 3: st = read_layers(&rd, p); break;
        case 4:
            p->weights_size = ssize;
            p->weights = s4d_aligned_alloc((size_t)ssize);
            if (!p->weights) {
                st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory loading weights");
                break;
            }
            memcpy(p->weights, data + pos, (size_t)ssize);
            break;
        }
        if (st != S4D_OK)
            goto fail;
        pos += (size_t)ssize;
    }
    if (pos != size) {
        st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                         "malformed engine file: %zu bytes after the last section", size - pos);
        goto fail;
    }
    static const char *const names[5] = {"META", "TNSR", "IOIO", "LAYR", "WGHT"};
    for (int s = 0; s < 5; s++) {
        if (!seen[s]) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_PARSE,
                             "malformed engine file: the required section %s is missing",
                             names[s]);
            goto fail;
        }
    }
    st = check_plan(&rd, p);
    if (st != S4D_OK)
        goto fail;
    *out = p;
    return S4D_OK;
fail:
    s4d_plan_destroy(p);
    return st;
}
