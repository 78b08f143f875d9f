/*
 * Pad against an independent reference that pads one axis at a time (the way
 * numpy.pad is defined: crop, then extend each side by mirroring, repeating or
 * wrapping what is already there), on random shapes, pads, modes and element
 * types; plus the errors.
 */
#include "../cpu_ops_b/op_test.h"

#include <stdint.h>

typedef struct arr {
    int rank;
    int64_t dims[8];
    double *v;
} arr;

static int64_t numel(const arr *a)
{
    int64_t n = 1;
    for (int d = 0; d < a->rank; d++)
        n *= a->dims[d];
    return n;
}

/* Pads axis `ax` of a by (b, e) in mode m (0 constant, 1 reflect, 2 edge, 3 wrap). */
static arr pad_axis(const arr *a, int ax, int64_t b, int64_t e, int m, double value)
{
    int64_t outer = 1, inner = 1, n = a->dims[ax];
    for (int d = 0; d < ax; d++)
        outer *= a->dims[d];
    for (int d = ax + 1; d < a->rank; d++)
        inner *= a->dims[d];
    /* Crop first. */
    int64_t lo = b < 0 ? -b : 0, hi = e < 0 ? n + e : n, k = hi - lo;
    int64_t pb = b > 0 ? b : 0, pe = e > 0 ? e : 0, no = k + pb + pe;
    arr r = *a;
    r.dims[ax] = no;
    r.v = malloc(sizeof(double) * (size_t)(outer * no * inner + 1));
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double *line = malloc(sizeof(double) * (size_t)(no + 1));
            for (int64_t t = 0; t < k; t++)
                line[pb + t] = a->v[(o * n + lo + t) * inner + i];
            /* Grow outwards one element at a time from what is already there. */
            for (int64_t t = pb - 1; t >= 0; t--) {
                int64_t first = pb, last = pb + k - 1, dist = first - t; /* t = first - dist */
                if (m == 0)
                    line[t] = value;
                else if (m == 2)
                    line[t] = line[first];
                else if (m == 3)
                    line[t] = line[last - ((dist - 1) % k)];
                else {
                    /* mirror of index t about `first`, reflected again at `last` as needed */
                    int64_t q = first + dist;
                    while (q > last || q < first)
                        q = q > last ? 2 * last - q : 2 * first - q;
                    line[t] = line[q];
                }
            }
            for (int64_t t = pb + k; t < no; t++) {
                int64_t first = pb, last = pb + k - 1, dist = t - last;
                if (m == 0)
                    line[t] = value;
                else if (m == 2)
                    line[t] = line[last];
                else if (m == 3)
                    line[t] = line[first + ((dist - 1) % k)];
                else {
                    int64_t q = last - dist;
                    while (q > last || q < first)
                        q = q < first ? 2 * first - q : 2 * last - q;
                    line[t] = line[q];
                }
            }
            for (int64_t t = 0; t < no; t++)
                r.v[(o * no + t) * inner + i] = line[t];
            free(line);
        }
    return r;
}

static const char *mode_name[4] = {"constant", "reflect", "edge", "wrap"};

static void store(s4d_dtype dt, void *p, int64_t i, double v)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break;
    case S4D_DTYPE_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case S4D_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: break;
    }
}

static double load(s4d_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case S4D_DTYPE_FLOAT32: return ((const float *)p)[i];
    case S4D_DTYPE_INT64: return (double)((const int64_t *)p)[i];
    case S4D_DTYPE_UINT8: return ((const uint8_t *)p)[i];
    default: return 0;
    }
}

static size_t esize(s4d_dtype dt)
{
    return dt == S4D_DTYPE_INT64 ? 8 : dt == S4D_DTYPE_UINT8 ? 1 : 4;
}

/* One case: opset picks the interface (2: attributes, 11: inputs, 18: inputs with axes). */
static void pad_case(int opset, s4d_dtype dt, int rank, const int64_t *dims, const int64_t *pads,
                     int mode, double value, int use_axes)
{
    arr a;
    a.rank = rank;
    memcpy(a.dims, dims, sizeof(int64_t) * (size_t)rank);
    int64_t n = numel(&a);
    a.v = malloc(sizeof(double) * (size_t)(n + 1));
    void *x = malloc(esize(dt) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; i++) {
        double v = dt == S4D_DTYPE_FLOAT32 ? (double)t_randf(-5, 5) : (double)(1 + (int64_t)(t_uniform() * 200));
        store(dt, x, i, v);
        a.v[i] = load(dt, x, i);
    }
    /* The reference, one axis after another. */
    arr r = a;
    r.v = malloc(sizeof(double) * (size_t)(n + 1));
    memcpy(r.v, a.v, sizeof(double) * (size_t)(n + 1));
    for (int d = 0; d < rank; d++) {
        arr next = pad_axis(&r, d, pads[d], pads[rank + d], mode, value);
        free(r.v);
        r = next;
    }
    char what[160];
    snprintf(what, sizeof what, "pad opset %d %s rank %d %s%s", opset, s4d_dtype_name(dt), rank,
             mode_name[mode], use_axes ? " (axes)" : "");
    s4d_tensor in[4], out[1];
    int ni = 1;
    in[0] = t_tensor(dt, x, rank, dims);
    s4d_attr attrs[3];
    int na = 0;
    attrs[na++] = t_attr_string("mode", mode_name[mode]);
    int64_t pads_in[16], pads_dims[1], axes[8], axes_dims[1];
    unsigned char cval[8];
    int64_t scalar_dims[1] = {1};
    t_const_mask = 0;
    if (opset < 11) {
        attrs[na++] = t_attr_ints("pads", (int64_t *)pads, (size_t)(2 * rank));
        attrs[na++] = t_attr_float("value", (float)value);
    } else {
        int naxes = 0;
        if (use_axes) {
            /* Name the padded axes only, in reverse order. */
            for (int d = rank - 1; d >= 0; d--)
                if (pads[d] || pads[rank + d])
                    axes[naxes++] = d;
        }
        int cnt = use_axes ? naxes : rank;
        for (int i = 0; i < cnt; i++) {
            int d = use_axes ? (int)axes[i] : i;
            pads_in[i] = pads[d];
            pads_in[cnt + i] = pads[rank + d];
        }
        pads_dims[0] = 2 * cnt;
        in[ni++] = t_tensor(S4D_DTYPE_INT64, pads_in, 1, pads_dims);
        store(dt, cval, 0, value);
        in[ni++] = t_tensor(dt, cval, 0, scalar_dims);
        if (use_axes) {
            axes_dims[0] = naxes;
            in[ni++] = t_tensor(S4D_DTYPE_INT64, axes, 1, axes_dims);
        }
        /* Pads and axes constant; the value a constant or given at run time. */
        t_const_mask = 2u | 8u | (t_uniform() < 0.5 ? 4u : 0u);
    }
    s4d_status st = t_run_op("Pad", opset, in, ni, attrs, na, out, 1);
    T_CHECK(st == S4D_OK, "%s: runs: %s", what, t_err);
    if (st == S4D_OK) {
        int same = out[0].rank == r.rank;
        for (int d = 0; same && d < r.rank; d++)
            same = out[0].dims[d] == r.dims[d];
        T_CHECK(same, "%s: output shape", what);
        int64_t bad = -1;
        for (int64_t i = 0; same && bad < 0 && i < numel(&r); i++)
            if (load(dt, out[0].data, i) != r.v[i])
                bad = i;
        T_CHECK(same && bad < 0, "%s: values (first difference at %lld)", what, (long long)bad);
    }
    t_free_outputs(out, 1);
    t_const_mask = 0;
    free(x);
    free(a.v);
    free(r.v);
}

static void test_random(void)
{
    const s4d_dtype dts[3] = {S4D_DTYPE_FLOAT32, S4D_DTYPE_INT64, S4D_DTYPE_UINT8};
    for (int it = 0; it < 120; it++) {
        int rank = 1 + (int)(t_uniform() * 4);
        int mode = (int)(t_uniform() * 4);
        int opset = mode == 3 ? 19 : (int[]){2, 11, 13, 18}[(int)(t_uniform() * 4)];
        int64_t dims[8], pads[16];
        for (int d = 0; d < rank; d++)
            dims[d] = 1 + (int64_t)(t_uniform() * 6);
        for (int d = 0; d < rank; d++)
            for (int s = 0; s < 2; s++) {
                int64_t v = (int64_t)(t_uniform() * 5) - 1; /* -1 .. 3 */
                pads[s * rank + d] = v;
            }
        /* Keep what each mode can do: no over-cropping, reflect needs 2 elements. */
        for (int d = 0; d < rank; d++) {
            int64_t b = pads[d], e = pads[rank + d];
            int64_t kept = dims[d] - (b < 0 ? -b : 0) - (e < 0 ? -e : 0);
            int64_t need = mode == 1 ? 2 : 1;
            if (kept < need || (mode == 1 && (b > 0 || e > 0) && kept < 2)) {
                if (b < 0)
                    pads[d] = 0;
                if (e < 0)
                    pads[rank + d] = 0;
                if (dims[d] < need)
                    dims[d] = need;
            }
        }
        s4d_dtype dt = dts[(int)(t_uniform() * 3)];
        pad_case(opset, dt, rank, dims, pads, mode, dt == S4D_DTYPE_FLOAT32 ? 1.5 : 7,
                 opset >= 18 && t_uniform() < 0.5);
    }
    /* Pads several times the extent (mirrored back and forth, wrapped around). */
    int64_t dims[2] = {3, 4}, big[4] = {7, 9, 5, 11};
    for (int mode = 0; mode < 4; mode++)
        pad_case(19, S4D_DTYPE_FLOAT32, 2, dims, big, mode, -2.0, 0);
}

static void test_errors(void)
{
    float x[12];
    for (int i = 0; i < 12; i++)
        x[i] = (float)i + 1;
    int64_t dims[2] = {3, 4}, one[2] = {1, 4};
    s4d_tensor out[1];
    /* Pads that are not constant. */
    int64_t pads[4] = {1, 1, 1, 1}, pd[1] = {4};
    s4d_tensor in[2] = {t_tensor(S4D_DTYPE_FLOAT32, x, 2, dims), t_tensor(S4D_DTYPE_INT64, pads, 1, pd)};
    t_const_mask = 0;
    T_EXPECT_FAIL(t_run_op("Pad", 13, in, 2, NULL, 0, out, 1), S4D_ERR_UNSUPPORTED,
                  "pads computed at run time");
    t_const_mask = 2;
    /* Wrong number of pads. */
    int64_t pd3[1] = {3};
    in[1] = t_tensor(S4D_DTYPE_INT64, pads, 1, pd3);
    T_EXPECT_FAIL(t_run_op("Pad", 13, in, 2, NULL, 0, out, 1), S4D_ERR_SHAPE, "3 pads for rank 2");
    /* Reflect on an axis of one element. */
    in[0] = t_tensor(S4D_DTYPE_FLOAT32, x, 2, one);
    in[1] = t_tensor(S4D_DTYPE_INT64, pads, 1, pd);
    s4d_attr refl = t_attr_string("mode", "reflect");
    T_EXPECT_FAIL(t_run_op("Pad", 13, in, 2, &refl, 1, out, 1), S4D_ERR_SHAPE,
                  "reflect over one element");
    /* Unknown mode; wrap before opset 19. */
    s4d_attr bad = t_attr_string("mode", "mirror"), wrap = t_attr_string("mode", "wrap");
    in[0] = t_tensor(S4D_DTYPE_FLOAT32, x, 2, dims);
    T_EXPECT_FAIL(t_run_op("Pad", 13, in, 2, &bad, 1, out, 1), S4D_ERR_UNSUPPORTED, "mode mirror");
    T_EXPECT_FAIL(t_run_op("Pad", 18, in, 2, &wrap, 1, out, 1), S4D_ERR_UNSUPPORTED,
                  "wrap at opset 18");
    /* Cropping more than there is. */
    int64_t crop[4] = {-2, 0, -2, 0};
    in[1] = t_tensor(S4D_DTYPE_INT64, crop, 1, pd);
    T_EXPECT_FAIL(t_run_op("Pad", 13, in, 2, NULL, 0, out, 1), S4D_ERR_SHAPE, "over-cropping");
    /* A constant value of another dtype. */
    int64_t ival = 3, sd[1] = {1};
    s4d_tensor in3[3] = {t_tensor(S4D_DTYPE_FLOAT32, x, 2, dims), t_tensor(S4D_DTYPE_INT64, pads, 1, pd),
                         t_tensor(S4D_DTYPE_INT64, &ival, 0, sd)};
    T_EXPECT_FAIL(t_run_op("Pad", 13, in3, 3, NULL, 0, out, 1), S4D_ERR_DTYPE,
                  "int64 constant for float data");
    /* Pads that would overflow the output size. */
    int64_t huge[4] = {INT64_MAX, 0, 0, 1};
    in[0] = t_tensor(S4D_DTYPE_FLOAT32, x, 2, dims);
    in[1] = t_tensor(S4D_DTYPE_INT64, huge, 1, pd);
    T_EXPECT_FAIL(t_run_op("Pad", 13, in, 2, NULL, 0, out, 1), S4D_ERR_SHAPE, "a pad of 2^63 - 1");
    /* Missing attribute before opset 11. */
    T_EXPECT_FAIL(t_run_op("Pad", 2, in, 1, NULL, 0, out, 1), S4D_ERR_INVALID_ARG,
                  "no pads attribute");
    t_const_mask = 0;
}

int main(void)
{
    test_random();
    test_errors();
    return t_finish("test_pad");
}
