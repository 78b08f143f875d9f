/*
 * .npy reader/writer: round trips for every supported dtype and rank, and
 * every malformed-file case refused with a clear message.
 * usage: test_npy SCRATCH_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s4d/npy.h"

#include "check.h"

static void roundtrip(const char *dir)
{
    const s4d_dtype types[] = {S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT64, S4D_DTYPE_INT64,
                               S4D_DTYPE_INT32,   S4D_DTYPE_UINT8,   S4D_DTYPE_BOOL,
                               S4D_DTYPE_INT8,    S4D_DTYPE_FLOAT16, S4D_DTYPE_UINT16};
    const int64_t shapes[][3] = {{2, 3, 4}, {7, 0, 0}, {0, 0, 0}};
    const int ranks[] = {3, 1, 0};
    char path[4096];
    snprintf(path, sizeof path, "%s/roundtrip.npy", dir);
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (int s = 0; s < 3; s++) {
            size_t esz = s4d_dtype_size(types[t]);
            int64_t n = 1;
            for (int d = 0; d < ranks[s]; d++)
                n *= shapes[s][d];
            unsigned char *data = malloc((size_t)n * esz + 1);
            for (size_t i = 0; i < (size_t)n * esz; i++)
                data[i] = (unsigned char)(i * 37 + t + 1);
            if (types[t] == S4D_DTYPE_BOOL)
                for (int64_t i = 0; i < n; i++)
                    data[i] &= 1;
            s4d_errbuf err;
            CHECK(s4d_npy_save(path, types[t], ranks[s], shapes[s], data, &err) == S4D_OK, "%s",
                  err.msg);
            s4d_npy a;
            CHECK(s4d_npy_load(path, &a, &err) == S4D_OK, "%s", err.msg);
            CHECK(a.dtype == types[t] && a.rank == ranks[s], "dtype/rank");
            for (int d = 0; d < ranks[s]; d++)
                CHECK(a.dims[d] == shapes[s][d], "dim %d", d);
            CHECK(a.bytes == (size_t)n * esz && memcmp(a.data, data, a.bytes) == 0, "data");
            s4d_npy_free(&a);
            free(data);
        }
    }
}

/* A hand-written file: header dict text + data bytes. */
static s4d_status parse_raw(const char *magic, size_t magic_len, const char *dict,
                            size_t data_bytes, char *msg)
{
    unsigned char buf[1024];
    size_t hl = strlen(dict);
    memcpy(buf, magic, magic_len);
    buf[magic_len] = (unsigned char)(hl & 0xff);
    buf[magic_len + 1] = (unsigned char)(hl >> 8);
    memcpy(buf + magic_len + 2, dict, hl);
    size_t n = magic_len + 2 + hl;
    memset(buf + n, 0x3f, data_bytes);
    n += data_bytes;
    s4d_npy a;
    s4d_errbuf err;
    err.msg[0] = 0;
    s4d_status st = s4d_npy_parse(buf, n, &a, &err);
    if (st == S4D_OK)
        s4d_npy_free(&a);
    strcpy(msg, err.msg);
    printf("  %-60.60s -> %s: %s\n", dict, s4d_status_string(st), err.msg);
    return st;
}

static void malformed(const char *dir)
{
    const char *v1 = "\x93NUMPY\x01\x00";
    char msg[600];
    s4d_status st;
    st = parse_raw(v1, 8, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24, msg);
    CHECK(st == S4D_OK, "good file refused: %s", msg);
    st = parse_raw("\x93NUMPX\x01\x00", 8, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, msg);
    CHECK(st == S4D_ERR_PARSE && strstr(msg, "magic"), "%s", msg);
    st = parse_raw(v1, 8, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, msg);
    CHECK(st == S4D_ERR_PARSE && strstr(msg, "truncated"), "%s", msg);
    st = parse_raw(v1, 8, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, msg);
    CHECK(st == S4D_ERR_PARSE, "trailing bytes: %s", msg);
    st = parse_raw(v1, 8, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, msg);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(msg, "c8"), "%s", msg);
    st = parse_raw(v1, 8, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, msg);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(msg, "big-endian"), "%s", msg);
    st = parse_raw(v1, 8, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16, msg);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(msg, "Fortran"), "%s", msg);
    st = parse_raw(v1, 8, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, x), }", 8, msg);
    CHECK(st == S4D_ERR_PARSE && strstr(msg, "shape"), "%s", msg);
    st = parse_raw(v1, 8, "{'descr': '<f4', 'shape': (2,), }", 8, msg);
    CHECK(st == S4D_ERR_PARSE && strstr(msg, "fortran_order"), "%s", msg);
    st = parse_raw(v1, 8, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999, 99999999999), }", 8, msg);
    CHECK(st == S4D_ERR_PARSE, "huge shape: %s", msg);
    st = parse_raw("\x93NUMPY\x09\x00", 8, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, msg);
    CHECK(st == S4D_ERR_UNSUPPORTED && strstr(msg, "version"), "%s", msg);
    /* Header length past the end of the file. */
    unsigned char shortbuf[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0x7f, '{', '}'};
    s4d_npy a;
    s4d_errbuf err;
    st = s4d_npy_parse(shortbuf, sizeof shortbuf, &a, &err);
    CHECK(st == S4D_ERR_PARSE && strstr(err.msg, "truncated"), "%s", err.msg);
    /* Every truncation of a good file fails cleanly. */
    char path[4096];
    snprintf(path, sizeof path, "%s/good.npy", dir);
    float v[6] = {1, 2, 3, 4, 5, 6};
    int64_t dims[2] = {2, 3};
    CHECK(s4d_npy_save(path, S4D_DTYPE_FLOAT32, 2, dims, v, &err) == S4D_OK, "%s", err.msg);
    FILE *f = fopen(path, "rb");
    unsigned char file[512];
    size_t n = fread(file, 1, sizeof file, f);
    fclose(f);
    for (size_t k = 0; k < n; k++) {
        st = s4d_npy_parse(file, k, &a, &err);
        CHECK(st != S4D_OK && a.data == NULL, "truncation at %zu accepted", k);
    }
    st = s4d_npy_load("/nonexistent/x.npy", &a, &err);
    CHECK(st == S4D_ERR_IO && strstr(err.msg, "/nonexistent/x.npy"), "%s", err.msg);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_npy SCRATCH_DIR\n");
        return 2;
    }
    roundtrip(argv[1]);
    malformed(argv[1]);
    printf("npy: %s\n", g_failures ? "FAILED" : "passed");
    return g_failures ? 1 : 0;
}
