/* .npy reading and writing: see include/s4d/npy.h. */
#include "s4d/npy.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define ERRBUF(e) ((e) ? (e)->msg : NULL), ((e) ? sizeof((e)->msg) : 0)

static const struct {
    const char *code; /* without the byte-order character */
    s4d_dtype dtype;
} npy_codes[] = {
    {"f4", S4D_DTYPE_FLOAT32}, {"f8", S4D_DTYPE_FLOAT64}, {"f2", S4D_DTYPE_FLOAT16},
    {"i1", S4D_DTYPE_INT8},    {"u1", S4D_DTYPE_UINT8},   {"i2", S4D_DTYPE_INT16},
    {"u2", S4D_DTYPE_UINT16},  {"i4", S4D_DTYPE_INT32},   {"u4", S4D_DTYPE_UINT32},
    {"i8", S4D_DTYPE_INT64},   {"u8", S4D_DTYPE_UINT64},  {"b1", S4D_DTYPE_BOOL},
};

void s4d_npy_free(s4d_npy *a)
{
    if (!a)
        return;
    s4d_aligned_free(a->data);
    memset(a, 0, sizeof *a);
}

/* Finds 'key' (quoted with ' or ") in the header dict; returns the text after its ':'. */
static const char *find_key(const char *h, const char *key)
{
    size_t kl = strlen(key);
    const char *q = NULL;
    for (const char *s = h; *s; s++) {
        if ((*s == '\'' || *s == '"') && strncmp(s + 1, key, kl) == 0 && s[kl + 1] == *s) {
            q = s + kl + 2;
            break;
        }
    }
    if (!q)
        return NULL;
    while (*q == ' ')
        q++;
    if (*q != ':')
        return NULL;
    q++;
    while (*q == ' ')
        q++;
    return q;
}

static s4d_status parse_header(const char *h, s4d_npy *out, s4d_errbuf *err)
{
    const char *d = find_key(h, "descr");
    const char *f = find_key(h, "fortran_order");
    const char *s = find_key(h, "shape");
    if (!d || !f || !s)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE,
                           "malformed .npy header: needs 'descr', 'fortran_order' and 'shape'");
    char q = *d;
    if (q != '\'' && q != '"')
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "malformed .npy header: 'descr' is not a string");
    const char *end = strchr(d + 1, q);
    if (!end || end - d - 1 < 3 || end - d - 1 > 8)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "malformed .npy header: bad 'descr'");
    char code[16];
    memcpy(code, d + 1, (size_t)(end - d - 1));
    code[end - d - 1] = 0;
    char order = code[0];
    if (order == '>' && strcmp(code + 1, "i1") != 0 && strcmp(code + 1, "u1") != 0 &&
        strcmp(code + 1, "b1") != 0)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_UNSUPPORTED,
                           ".npy dtype '%s' is big-endian; save it little-endian", code);
    if (order != '<' && order != '|' && order != '=' && order != '>')
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "malformed .npy header: descr '%s'", code);
    out->dtype = S4D_DTYPE_UNDEFINED;
    for (size_t i = 0; i < sizeof npy_codes / sizeof npy_codes[0]; i++)
        if (strcmp(code + 1, npy_codes[i].code) == 0)
            out->dtype = npy_codes[i].dtype;
    if (out->dtype == S4D_DTYPE_UNDEFINED)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_UNSUPPORTED, ".npy dtype '%s' is not supported",
                           code);
    if (strncmp(f, "True", 4) == 0)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_UNSUPPORTED,
                           ".npy array is in Fortran order; save it C-contiguous");
    if (strncmp(f, "False", 5) != 0)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "malformed .npy header: bad 'fortran_order'");
    if (*s != '(')
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "malformed .npy header: 'shape' is not a tuple");
    s++;
    out->rank = 0;
    for (;;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (*s == ')')
            break;
        if (!isdigit((unsigned char)*s))
            return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE,
                               "malformed .npy header: bad 'shape' entry");
        if (out->rank == S4D_NPY_MAX_RANK)
            return s4d_fmt_err(ERRBUF(err), S4D_ERR_UNSUPPORTED, ".npy rank exceeds %d",
                               S4D_NPY_MAX_RANK);
        int64_t v = 0;
        while (isdigit((unsigned char)*s)) {
            if (v > (INT64_MAX - 9) / 10)
                return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, ".npy shape overflows");
            v = v * 10 + (*s - '0');
            s++;
        }
        out->dims[out->rank++] = v;
        while (*s == ' ')
            s++;
        if (*s != ',' && *s != ')')
            return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE,
                               "malformed .npy header: bad 'shape' separator");
    }
    return S4D_OK;
}

s4d_status s4d_npy_parse(const void *data, size_t size, s4d_npy *out, s4d_errbuf *err)
{
    if (!out)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "out is NULL");
    memset(out, 0, sizeof *out);
    if (!data)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "data is NULL");
    const uint8_t *b = data;
    if (size < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "not a .npy file (magic missing)");
    unsigned major = b[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12)
            return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "truncated .npy header");
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hstart = 12;
    } else {
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_UNSUPPORTED, ".npy format version %u.%u",
                           major, (unsigned)b[7]);
    }
    if (hlen > size - hstart)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE,
                           "truncated .npy: header says %zu bytes, file has %zu", hlen,
                           size - hstart);
    char *h = malloc(hlen + 1);
    if (!h)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY, "out of memory");
    memcpy(h, b + hstart, hlen);
    h[hlen] = 0;
    if (strlen(h) != hlen) {
        free(h);
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, "malformed .npy header: NUL byte");
    }
    s4d_status st = parse_header(h, out, err);
    free(h);
    if (st != S4D_OK) {
        memset(out, 0, sizeof *out);
        return st;
    }
    int64_t n = s4d_dims_numel(out->rank, out->dims);
    size_t esz = s4d_dtype_size(out->dtype);
    if (n < 0 || (uint64_t)n > SIZE_MAX / esz / 2) {
        memset(out, 0, sizeof *out);
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE, ".npy shape too large");
    }
    size_t bytes = (size_t)n * esz;
    size_t have = size - hstart - hlen;
    if (have != bytes) {
        memset(out, 0, sizeof *out);
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_PARSE,
                           "%s .npy: the shape needs %zu data bytes, the file has %zu",
                           have < bytes ? "truncated" : "malformed", bytes, have);
    }
    out->data = s4d_aligned_alloc(bytes);
    if (!out->data) {
        memset(out, 0, sizeof *out);
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_NO_MEMORY, "out of memory");
    }
    if (bytes)
        memcpy(out->data, b + hstart + hlen, bytes);
    out->bytes = bytes;
    return S4D_OK;
}

s4d_status s4d_npy_load(const char *path, s4d_npy *out, s4d_errbuf *err)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!path || !out)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "path or out is NULL");
    uint8_t *data;
    size_t size;
    s4d_status st = s4d_read_file(path, &data, &size, ERRBUF(err));
    if (st != S4D_OK)
        return st;
    st = s4d_npy_parse(data, size, out, err);
    free(data);
    if (st != S4D_OK && err) {
        char tmp[sizeof err->msg];
        memcpy(tmp, err->msg, sizeof tmp);
        s4d_fmt_err(err->msg, sizeof err->msg, st, "%s: %s", path, tmp);
    }
    return st;
}

s4d_status s4d_npy_save(const char *path, s4d_dtype dtype, int rank, const int64_t *dims,
                        const void *data, s4d_errbuf *err)
{
    if (!path || rank < 0 || rank > S4D_NPY_MAX_RANK || (rank && !dims))
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "bad path, rank or dims");
    const char *code = NULL;
    for (size_t i = 0; i < sizeof npy_codes / sizeof npy_codes[0]; i++)
        if (npy_codes[i].dtype == dtype)
            code = npy_codes[i].code;
    if (!code)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_DTYPE, "no .npy code for dtype %s",
                           s4d_dtype_name(dtype));
    int64_t n = s4d_dims_numel(rank, dims);
    if (n < 0)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "bad dims");
    size_t bytes = (size_t)n * s4d_dtype_size(dtype);
    if (bytes && !data)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_INVALID_ARG, "data is NULL");
    char dict[512];
    int len = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                       s4d_dtype_size(dtype) == 1 ? '|' : '<', code);
    for (int i = 0; i < rank; i++)
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld,%s", (long long)dims[i],
                        i + 1 < rank ? " " : "");
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    /* Pad with spaces so magic + header is a multiple of 64 bytes, ending in '\n'. */
    size_t total = (size_t)s4d_align_up(10 + (size_t)len + 1, 64);
    size_t hlen = total - 10;
    uint8_t head[640];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (uint8_t)(hlen & 0xff);
    head[9] = (uint8_t)(hlen >> 8);
    memcpy(head + 10, dict, (size_t)len);
    memset(head + 10 + len, ' ', hlen - (size_t)len - 1);
    head[total - 1] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_IO, "cannot create '%s'", path);
    int bad = fwrite(head, 1, total, f) != total;
    if (bytes)
        bad |= fwrite(data, 1, bytes, f) != bytes;
    bad |= fclose(f) != 0;
    if (bad)
        return s4d_fmt_err(ERRBUF(err), S4D_ERR_IO, "cannot write '%s'", path);
    return S4D_OK;
}
