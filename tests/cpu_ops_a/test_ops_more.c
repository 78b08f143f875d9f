/* Unit tests of table a, continued: variadic, unary, reductions, data movement, shape ops. */
#include "harness.h"

static s4d_tensor f32(int rank, const int64_t *dims, double lo, double hi)
{
    s4d_tensor t = tensor_new(S4D_DTYPE_FLOAT32, rank, dims);
    fill_random(&t, lo, hi);
    return t;
}

static s4d_tensor i64_vec(int64_t n, const int64_t *v)
{
    s4d_tensor t = tensor_new(S4D_DTYPE_INT64, 1, &n);
    memcpy(t.data, v, sizeof(int64_t) * (size_t)n);
    return t;
}

static int same_dims(const s4d_tensor *t, int rank, const int64_t *dims)
{
    if (t->rank != rank)
        return 0;
    for (int d = 0; d < rank; d++)
        if (t->dims[d] != dims[d])
            return 0;
    return 1;
}

/* Row-major coordinates of element i of dims. */
static void coords(int rank, const int64_t *dims, int64_t i, int64_t *c)
{
    for (int d = rank - 1; d >= 0; d--) {
        c[d] = i % dims[d];
        i /= dims[d];
    }
}

static int64_t offset_of(int rank, const int64_t *dims, const int64_t *c)
{
    int64_t off = 0;
    for (int d = 0; d < rank; d++)
        off = off * dims[d] + c[d];
    return off;
}

/* ---- variadic --------------------------------------------------------------------------------- */

void group_variadic(void)
{
    int64_t da[] = {4, 1, 6}, db[] = {5, 1}, dc[] = {6};
    s4d_tensor in[3] = {f32(3, da, -2, 2), f32(2, db, -2, 2), f32(1, dc, -2, 2)};
    const char *ops[] = {"Sum", "Mean", "Min", "Max"};
    for (int k = 0; k < 4; k++) {
        for (int nin = 1; nin <= 3; nin++) {
            s4d_tensor out[1];
            char err[512];
            s4d_status st = run_op(ops[k], 13, nin, in, 0, 1, out, 0, NULL, g_pool, err);
            CHECK(st == S4D_OK, "%s with %d inputs: %s", ops[k], nin, err);
            if (st != S4D_OK)
                continue;
            int64_t n = s4d_tensor_numel(out);
            double *ref = malloc(sizeof(double) * (size_t)n);
            for (int64_t o = 0; o < n; o++) {
                double acc = ((float *)in[0].data)[bcast_index(out, &in[0], o)];
                for (int i = 1; i < nin; i++) {
                    double v = ((float *)in[i].data)[bcast_index(out, &in[i], o)];
                    acc = k < 2 ? acc + v : k == 2 ? fmin(acc, v) : fmax(acc, v);
                }
                ref[o] = k == 1 ? acc / nin : acc;
            }
            char what[64];
            snprintf(what, sizeof(what), "%s/%d", ops[k], nin);
            close_f32(out->data, ref, n, 1e-6, 1e-6, what);
            free(ref);
            tensor_free(out);
        }
    }
    /* Max on int64 and NaN propagation on float. */
    int64_t two = 2, a[] = {5, -7}, b[] = {-3, 9};
    s4d_tensor ii[2] = {i64_vec(2, a), i64_vec(2, b)}, out[1];
    char err[512];
    CHECK(run_op("Max", 13, 2, ii, 0, 1, out, 0, NULL, NULL, err) == S4D_OK &&
              ((int64_t *)out->data)[0] == 5 && ((int64_t *)out->data)[1] == 9, "Max int64: %s", err);
    tensor_free(out);
    s4d_tensor fn[2] = {tensor_new(S4D_DTYPE_FLOAT32, 1, &two), tensor_new(S4D_DTYPE_FLOAT32, 1, &two)};
    ((float *)fn[0].data)[0] = NAN;
    ((float *)fn[0].data)[1] = 1;
    ((float *)fn[1].data)[0] = 1;
    ((float *)fn[1].data)[1] = NAN;
    CHECK(run_op("Min", 13, 2, fn, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && isnan(((float *)out->data)[0]) &&
              isnan(((float *)out->data)[1]), "Min propagates NaN: %s", err);
    tensor_free(out);
    CHECK(run_op("Sum", 13, 2, ii, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE, "Sum int64 is rejected: %s", err);
    s4d_tensor mix[2] = {fn[0], ii[0]};
    CHECK(run_op("Max", 13, 2, mix, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE && strstr(err, "input 1"),
          "Max float/int64: %s", err);
    for (int i = 0; i < 2; i++) {
        tensor_free(&ii[i]);
        tensor_free(&fn[i]);
    }
    for (int i = 0; i < 3; i++)
        tensor_free(&in[i]);
}

/* ---- unary -------------------------------------------------------------------------------------- */

static double ref_unary(const char *op, double x)
{
    if (!strcmp(op, "Relu")) return x < 0 ? 0 : x;
    if (!strcmp(op, "LeakyRelu")) return x < 0 ? 0.1 * x : x;
    if (!strcmp(op, "Sigmoid")) return 1 / (1 + exp(-x));
    if (!strcmp(op, "Tanh")) return tanh(x);
    if (!strcmp(op, "Gelu")) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    if (!strcmp(op, "Erf")) return erf(x);
    if (!strcmp(op, "Sqrt")) return sqrt(fabs(x));
    if (!strcmp(op, "Reciprocal")) return 1 / x;
    if (!strcmp(op, "Exp")) return exp(x);
    if (!strcmp(op, "Log")) return log(fabs(x));
    if (!strcmp(op, "Neg")) return -x;
    if (!strcmp(op, "Abs")) return fabs(x);
    if (!strcmp(op, "Sin")) return sin(x);
    if (!strcmp(op, "Cos")) return cos(x);
    if (!strcmp(op, "Atan")) return atan(x);
    if (!strcmp(op, "Floor")) return floor(x);
    if (!strcmp(op, "Ceil")) return ceil(x);
    if (!strcmp(op, "Clip")) return x < -0.5 ? -0.5 : x > 1.25 ? 1.25 : x;
    return NAN;
}

void group_unary(void)
{
    const char *ops[] = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Gelu", "Erf", "Sqrt", "Reciprocal", "Exp",
                         "Log", "Neg", "Abs", "Sin", "Cos", "Atan", "Floor", "Ceil", "Clip"};
    int64_t d[] = {3, 7000};
    s4d_tensor x = f32(2, d, -4, 4);
    int64_t n = s4d_tensor_numel(&x);
    double *ref = malloc(sizeof(double) * (size_t)n);
    int64_t one = 1;
    s4d_tensor lo = tensor_new(S4D_DTYPE_FLOAT32, 0, &one), hi = tensor_new(S4D_DTYPE_FLOAT32, 0, &one);
    *(float *)lo.data = -0.5f;
    *(float *)hi.data = 1.25f;
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
        const char *op = ops[k];
        s4d_tensor in[3] = {x, lo, hi};
        int take_abs = !strcmp(op, "Sqrt") || !strcmp(op, "Log");
        s4d_tensor ax = tensor_new(S4D_DTYPE_FLOAT32, 2, d);
        if (take_abs) {
            for (int64_t i = 0; i < n; i++)
                ((float *)ax.data)[i] = fabsf(((float *)x.data)[i]);
            in[0] = ax;
        }
        s4d_attr at = attr_float("alpha", 0.1f);
        int opset = !strcmp(op, "Gelu") ? 20 : 13;
        s4d_tensor out[1];
        char err[512];
        s4d_status st = run_op(op, opset, !strcmp(op, "Clip") ? 3 : 1, in, 0, 1, out, !strcmp(op, "LeakyRelu"), &at,
                               k % 2 ? g_pool : NULL, err);
        CHECK(st == S4D_OK, "%s: %s", op, err);
        if (st == S4D_OK) {
            for (int64_t i = 0; i < n; i++)
                ref[i] = ref_unary(op, ((float *)x.data)[i]);
            close_f32(out->data, ref, n, 2e-6, 2e-6, op);
        }
        tensor_free(out);
        tensor_free(&ax);
    }
    /* Clip before opset 11 takes attributes; integer Clip and Neg; Not. */
    s4d_attr cl[2] = {attr_float("min", -0.5f), attr_float("max", 1.25f)};
    s4d_tensor out[1];
    char err[512];
    CHECK(run_op("Clip", 6, 1, &x, 0, 1, out, 2, cl, NULL, err) == S4D_OK, "Clip opset 6: %s", err);
    for (int64_t i = 0; i < n; i++)
        ref[i] = ref_unary("Clip", ((float *)x.data)[i]);
    close_f32(out->data, ref, n, 0, 0, "Clip opset 6");
    tensor_free(out);
    int64_t iv[] = {-5, 3, INT64_MIN, 0};
    s4d_tensor xi = i64_vec(4, iv);
    CHECK(run_op("Neg", 13, 1, &xi, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && ((int64_t *)out->data)[0] == 5 &&
              ((int64_t *)out->data)[1] == -3 && ((int64_t *)out->data)[2] == INT64_MIN, "Neg int64: %s", err);
    tensor_free(out);
    int64_t lov[] = {-1}, hiv[] = {2};
    s4d_tensor cin[3] = {xi, i64_vec(1, lov), i64_vec(1, hiv)};
    cin[1].rank = cin[2].rank = 0;
    CHECK(run_op("Clip", 13, 3, cin, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && ((int64_t *)out->data)[0] == -1 &&
              ((int64_t *)out->data)[1] == 2 && ((int64_t *)out->data)[3] == 0, "Clip int64: %s", err);
    tensor_free(out);
    CHECK(run_op("Sigmoid", 13, 1, &xi, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE && strstr(err, "int64"),
          "Sigmoid int64: %s", err);
    CHECK(run_op("Not", 13, 1, &x, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE, "Not float: %s", err);
    s4d_tensor b = tensor_new(S4D_DTYPE_BOOL, 1, d + 1);
    fill_random(&b, 0, 1);
    CHECK(run_op("Not", 13, 1, &b, 0, 1, out, 0, NULL, NULL, err) == S4D_OK, "Not: %s", err);
    for (int64_t i = 0; i < d[1]; i++)
        if (((uint8_t *)out->data)[i] != !((uint8_t *)b.data)[i]) {
            CHECK(0, "Not element %lld", (long long)i);
            break;
        }
    tensor_free(out);
    s4d_attr ap = attr_string("approximate", "cubic");
    CHECK(run_op("Gelu", 20, 1, &x, 0, 1, out, 1, &ap, NULL, err) == S4D_ERR_UNSUPPORTED, "Gelu cubic: %s", err);
    tensor_free(&b);
    for (int i = 0; i < 3; i++)
        tensor_free(&cin[i]);
    tensor_free(&lo);
    tensor_free(&hi);
    tensor_free(&x);
    free(ref);
}

/* ---- reductions ---------------------------------------------------------------------------------- */

static void check_reduce(const char *op, int opset, int rank, const int64_t *dims, const int64_t *axes, int naxes,
                         int keepdims, int axes_as_input)
{
    s4d_tensor x = f32(rank, dims, -3, 3);
    s4d_tensor in[2] = {x, {0}};
    s4d_attr at[2];
    int nat = 0, nin = 1;
    at[nat++] = attr_int("keepdims", keepdims);
    if (naxes > 0) {
        if (axes_as_input) {
            in[1] = i64_vec(naxes, axes);
            nin = 2;
        } else {
            at[nat++] = attr_ints("axes", (int64_t *)axes, (size_t)naxes);
        }
    }
    s4d_tensor out[1];
    char err[512];
    s4d_status st = run_op(op, opset, nin, in, 2u, 1, out, nat, at, g_pool, err);
    CHECK(st == S4D_OK, "%s: %s", op, err);
    if (st == S4D_OK) {
        int mask[8] = {0};
        for (int i = 0; i < naxes; i++)
            mask[axes[i] < 0 ? axes[i] + rank : axes[i]] = 1;
        if (naxes == 0)
            for (int d = 0; d < rank; d++)
                mask[d] = 1;
        int64_t odims[8], kd[8];
        int orank = 0, nk = 0;
        for (int d = 0; d < rank; d++) {
            if (!mask[d])
                odims[orank++] = dims[d], kd[nk++] = dims[d];
            else if (keepdims)
                odims[orank++] = 1;
        }
        CHECK(same_dims(out, orank, odims), "%s output shape", op);
        int64_t nout = 1;
        for (int i = 0; i < nk; i++)
            nout *= kd[i];
        double *ref = calloc((size_t)nout, sizeof(double));
        double *cnt = calloc((size_t)nout, sizeof(double));
        int isarg = !strncmp(op, "Arg", 3);
        for (int64_t o = 0; o < nout; o++)
            ref[o] = !strcmp(op, "ReduceMax") || isarg ? -INFINITY : !strcmp(op, "ReduceMin") ? INFINITY : 0;
        double *best = calloc((size_t)nout, sizeof(double));
        for (int64_t o = 0; o < nout; o++)
            best[o] = -INFINITY;
        int64_t n = s4d_tensor_numel(&x), c[8];
        for (int64_t i = 0; i < n; i++) {
            coords(rank, dims, i, c);
            int64_t o = 0, pos = 0;
            for (int d = 0; d < rank; d++)
                if (!mask[d])
                    o = o * dims[d] + c[d];
                else
                    pos = c[d];
            double v = ((float *)x.data)[i];
            if (!strcmp(op, "ReduceSum") || !strcmp(op, "ReduceMean"))
                ref[o] += v;
            else if (!strcmp(op, "ReduceMax"))
                ref[o] = fmax(ref[o], v);
            else if (!strcmp(op, "ReduceMin"))
                ref[o] = fmin(ref[o], v);
            else if (isarg && v > best[o]) {
                best[o] = v;
                ref[o] = (double)pos;
            }
            cnt[o] += 1;
        }
        if (!strcmp(op, "ReduceMean"))
            for (int64_t o = 0; o < nout; o++)
                ref[o] /= cnt[o];
        char what[96];
        snprintf(what, sizeof(what), "%s opset %d naxes %d keep %d", op, opset, naxes, keepdims);
        if (isarg) {
            for (int64_t o = 0; o < nout; o++)
                if (((int64_t *)out->data)[o] != (int64_t)ref[o]) {
                    CHECK(0, "%s: element %lld", what, (long long)o);
                    break;
                }
        } else {
            close_f32(out->data, ref, nout, 1e-5, 1e-5, what);
        }
        free(ref);
        free(cnt);
        free(best);
    }
    tensor_free(out);
    if (nin == 2)
        tensor_free(&in[1]);
    tensor_free(&x);
}

void group_reduce(void)
{
    int64_t d[] = {3, 4, 5, 6}, a1[] = {1}, a2[] = {-1}, a3[] = {0, 2}, a4[] = {1, 2, 3}, big[] = {16, 6000};
    const char *ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"};
    for (int k = 0; k < 4; k++) {
        int since = k == 0 ? 13 : 18;
        for (int keep = 0; keep <= 1; keep++) {
            check_reduce(ops[k], since - 1, 4, d, a1, 1, keep, 0);
            check_reduce(ops[k], since, 4, d, a2, 1, keep, 1);
            check_reduce(ops[k], since, 4, d, a3, 2, keep, 1);
            check_reduce(ops[k], 17, 4, d, a4, 3, keep, k == 0);
            check_reduce(ops[k], since, 4, d, NULL, 0, keep, 1);
        }
        check_reduce(ops[k], since, 2, big, a2, 1, 1, 1);
        check_reduce(ops[k], since, 2, big, NULL, 0, 0, 1);
    }
    /* ArgMax along each axis. */
    for (int ax = -4; ax < 4; ax++) {
        s4d_tensor x = f32(4, d, -3, 3), out[1];
        s4d_attr at[2] = {attr_int("axis", ax), attr_int("keepdims", 0)};
        char err[512];
        s4d_status st = run_op("ArgMax", 13, 1, &x, 0, 1, out, 2, at, g_pool, err);
        CHECK(st == S4D_OK && out->dtype == S4D_DTYPE_INT64 && out->rank == 3, "ArgMax axis %d: %s", ax, err);
        int a = ax < 0 ? ax + 4 : ax;
        if (st == S4D_OK) {
            int64_t c[4], oc[3], od[3];
            for (int i = 0, k = 0; i < 4; i++)
                if (i != a)
                    od[k++] = d[i];
            for (int64_t o = 0; o < s4d_tensor_numel(out); o++) {
                coords(3, od, o, oc);
                for (int i = 0, k = 0; i < 4; i++)
                    c[i] = i == a ? 0 : oc[k++];
                int64_t bi = 0;
                float bv = -INFINITY;
                for (int64_t p = 0; p < d[a]; p++) {
                    c[a] = p;
                    float v = ((float *)x.data)[offset_of(4, d, c)];
                    if (v > bv)
                        bv = v, bi = p;
                }
                if (((int64_t *)out->data)[o] != bi) {
                    CHECK(0, "ArgMax axis %d element %lld", ax, (long long)o);
                    break;
                }
            }
        }
        tensor_free(out);
        tensor_free(&x);
    }
    /* select_last_index with ties; noop_with_empty_axes; errors. */
    int64_t six = 6;
    s4d_tensor t = tensor_new(S4D_DTYPE_FLOAT32, 1, &six), out[1];
    float tv[] = {1, 3, 2, 3, 0, 3};
    memcpy(t.data, tv, sizeof(tv));
    s4d_attr sl = attr_int("select_last_index", 1);
    char err[512];
    CHECK(run_op("ArgMax", 13, 1, &t, 0, 1, out, 1, &sl, NULL, err) == S4D_OK && ((int64_t *)out->data)[0] == 5,
          "ArgMax select_last_index: %s", err);
    tensor_free(out);
    CHECK(run_op("ArgMax", 13, 1, &t, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && ((int64_t *)out->data)[0] == 1,
          "ArgMax first index: %s", err);
    tensor_free(out);
    s4d_attr noop = attr_int("noop_with_empty_axes", 1);
    CHECK(run_op("ReduceSum", 13, 1, &t, 0, 1, out, 1, &noop, NULL, err) == S4D_OK && out->rank == 1 &&
              !memcmp(out->data, tv, sizeof(tv)), "ReduceSum noop: %s", err);
    tensor_free(out);
    int64_t bad[] = {1};
    s4d_tensor in[2] = {t, i64_vec(1, bad)};
    CHECK(run_op("ReduceMean", 18, 2, in, 2u, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "axis 1 of rank 1: %s", err);
    CHECK(run_op("ReduceMean", 18, 2, in, 0u, 1, out, 0, NULL, NULL, err) == S4D_ERR_UNSUPPORTED,
          "dynamic axes: %s", err);
    s4d_tensor bl = tensor_new(S4D_DTYPE_BOOL, 1, &six);
    CHECK(run_op("ReduceMax", 18, 1, &bl, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE, "ReduceMax bool: %s", err);
    tensor_free(&bl);
    tensor_free(&in[1]);
    /* Integer sums are exact. */
    int64_t iv[] = {(int64_t)1 << 60, 3, -5};
    s4d_tensor xi = i64_vec(3, iv);
    CHECK(run_op("ReduceSum", 13, 1, &xi, 0, 1, out, 0, NULL, NULL, err) == S4D_OK &&
              ((int64_t *)out->data)[0] == ((int64_t)1 << 60) - 2, "ReduceSum int64: %s", err);
    tensor_free(out);
    tensor_free(&xi);
    tensor_free(&t);
}

/* ---- Concat / Split --------------------------------------------------------------------------------- */

void group_concat_split(void)
{
    int64_t d0[] = {2, 3, 4}, d1[] = {2, 5, 4}, d2[] = {2, 1, 4};
    s4d_tensor in[3] = {f32(3, d0, -1, 1), f32(3, d1, -1, 1), f32(3, d2, -1, 1)}, out[3];
    s4d_attr ax = attr_int("axis", -2);
    char err[512];
    s4d_status st = run_op("Concat", 13, 3, in, 0, 1, out, 1, &ax, g_pool, err);
    int64_t od[] = {2, 9, 4};
    CHECK(st == S4D_OK && same_dims(out, 3, od), "Concat: %s", err);
    if (st == S4D_OK) {
        for (int64_t i = 0; i < 72; i++) {
            int64_t c[3];
            coords(3, od, i, c);
            int src = c[1] < 3 ? 0 : c[1] < 8 ? 1 : 2;
            int64_t base = src == 0 ? 0 : src == 1 ? 3 : 8;
            c[1] -= base;
            float want = ((float *)in[src].data)[offset_of(3, in[src].dims, c)];
            if (((float *)out->data)[i] != want) {
                CHECK(0, "Concat element %lld", (long long)i);
                break;
            }
        }
    }
    /* Split it back, sizes from the input (opset 13) and the attribute (opset 11). */
    s4d_tensor cat = out[0];
    int64_t sizes[] = {3, 5, 1};
    s4d_tensor sin[2] = {cat, i64_vec(3, sizes)};
    s4d_attr sax = attr_int("axis", 1);
    st = run_op("Split", 13, 2, sin, 2u, 3, out, 1, &sax, g_pool, err);
    CHECK(st == S4D_OK, "Split: %s", err);
    for (int i = 0; st == S4D_OK && i < 3; i++) {
        CHECK(same_dims(&out[i], 3, in[i].dims), "Split output %d shape", i);
        CHECK(!memcmp(out[i].data, in[i].data, sizeof(float) * (size_t)s4d_tensor_numel(&in[i])), "Split output %d", i);
        tensor_free(&out[i]);
    }
    s4d_attr satt[2] = {sax, attr_ints("split", sizes, 3)};
    st = run_op("Split", 11, 1, sin, 0, 3, out, 2, satt, NULL, err);
    CHECK(st == S4D_OK && !memcmp(out[1].data, in[1].data, sizeof(float) * 40), "Split opset 11: %s", err);
    for (int i = 0; i < 3; i++)
        tensor_free(&out[i]);
    /* Equal parts; uneven at opset 18 gives a short last part; uneven before is an error. */
    s4d_attr ax1 = attr_int("axis", 1);
    st = run_op("Split", 18, 1, sin, 0, 2, out, 1, &ax1, NULL, err);
    CHECK(st == S4D_OK && out[0].dims[1] == 5 && out[1].dims[1] == 4, "Split opset 18 uneven: %s", err);
    tensor_free(&out[0]);
    tensor_free(&out[1]);
    CHECK(run_op("Split", 13, 1, sin, 0, 2, out, 1, &ax1, NULL, err) == S4D_ERR_SHAPE, "Split 9 in 2 at 13: %s", err);
    int64_t badsz[] = {3, 5, 2};
    s4d_tensor sbad[2] = {cat, i64_vec(3, badsz)};
    CHECK(run_op("Split", 13, 2, sbad, 2u, 3, out, 1, &ax1, NULL, err) == S4D_ERR_SHAPE, "Split sum 10 of 9: %s", err);
    tensor_free(&sbad[1]);
    /* Concat errors: rank and dtype mismatch. */
    s4d_tensor wrong[2] = {in[0], tensor_new(S4D_DTYPE_INT64, 3, d0)};
    CHECK(run_op("Concat", 13, 2, wrong, 0, 1, out, 1, &ax, NULL, err) == S4D_ERR_DTYPE && strstr(err, "input 1"),
          "Concat dtype: %s", err);
    tensor_free(&wrong[1]);
    int64_t d3[] = {2, 3, 5};
    wrong[1] = f32(3, d3, -1, 1);
    CHECK(run_op("Concat", 13, 2, wrong, 0, 1, out, 1, &ax, NULL, err) == S4D_ERR_SHAPE, "Concat dims: %s", err);
    tensor_free(&wrong[1]);
    tensor_free(&sin[1]);
    tensor_free(&cat);
    for (int i = 0; i < 3; i++)
        tensor_free(&in[i]);
}

/* ---- Slice --------------------------------------------------------------------------------------------- */

void group_slice(void)
{
    int64_t d[] = {5, 7, 9};
    s4d_tensor x = f32(3, d, -1, 1);
    struct {
        int64_t starts[3], ends[3], axes[3], steps[3];
        int n, has_axes, has_steps;
    } cases[] = {
        {{1, 2}, {4, 6}, {0, 1}, {1, 1}, 2, 1, 1},
        {{-1}, {-1000}, {2}, {-2}, 1, 1, 1},
        {{0, 0, 0}, {INT64_MAX, 7, 9}, {0}, {2, 3, 4}, 3, 0, 1},
        {{4, 1}, {0, 7}, {0, -1}, {-1, 3}, 2, 1, 1},
        {{10}, {20}, {1}, {1}, 1, 1, 0},
        {{2, -3}, {3, -1}, {-3, 2}, {1}, 2, 1, 0},
        /* trailing axes taken whole: one run per row of the sliced axis, or per slice */
        {{1}, {4}, {0}, {1}, 1, 1, 1},
        {{2}, {5}, {1}, {1}, 1, 1, 1},
        {{0}, {7}, {1}, {2}, 1, 1, 1},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int n = cases[c].n;
        s4d_tensor in[5] = {x, i64_vec(n, cases[c].starts), i64_vec(n, cases[c].ends), i64_vec(n, cases[c].axes),
                            i64_vec(n, cases[c].steps)};
        int nin = cases[c].has_steps ? 5 : cases[c].has_axes ? 4 : 3;
        if (!cases[c].has_axes && cases[c].has_steps)
            in[3].dtype = S4D_DTYPE_UNDEFINED, in[3].rank = -1;
        s4d_tensor out[1];
        char err[512];
        s4d_status st = run_op("Slice", 13, nin, in, 0x1e, 1, out, 0, NULL, g_pool, err);
        CHECK(st == S4D_OK, "Slice case %zu: %s", c, err);
        if (st == S4D_OK) {
            /* Reference: walk each axis with numpy's rules in double-checked plain loops. */
            int64_t start[3] = {0, 0, 0}, step[3] = {1, 1, 1}, cnt[3] = {5, 7, 9};
            for (int i = 0; i < n; i++) {
                int a = cases[c].has_axes ? (int)(cases[c].axes[i] < 0 ? cases[c].axes[i] + 3 : cases[c].axes[i]) : i;
                int64_t dim = d[a], s = cases[c].starts[i], e = cases[c].ends[i];
                int64_t k = cases[c].has_steps ? cases[c].steps[i] : 1;
                if (s < 0) s += dim;
                if (e < 0) e += dim;
                if (k > 0) {
                    s = s < 0 ? 0 : s > dim ? dim : s;
                    e = e < 0 ? 0 : e > dim ? dim : e;
                } else {
                    s = s < 0 ? 0 : s > dim - 1 ? dim - 1 : s;
                    e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
                }
                int64_t m = 0;
                for (int64_t p = s; k > 0 ? p < e : p > e; p += k)
                    m++;
                start[a] = s, step[a] = k, cnt[a] = m;
            }
            CHECK(same_dims(out, 3, cnt), "Slice case %zu shape (%lld %lld %lld)", c, (long long)out->dims[0],
                  (long long)out->dims[1], (long long)out->dims[2]);
            for (int64_t i = 0; same_dims(out, 3, cnt) && i < s4d_tensor_numel(out); i++) {
                int64_t oc[3], ic[3];
                coords(3, cnt, i, oc);
                for (int a = 0; a < 3; a++)
                    ic[a] = start[a] + oc[a] * step[a];
                if (((float *)out->data)[i] != ((float *)x.data)[offset_of(3, d, ic)]) {
                    CHECK(0, "Slice case %zu element %lld", c, (long long)i);
                    break;
                }
            }
        }
        tensor_free(out);
        for (int i = 1; i < 5; i++)
            tensor_free(&in[i]);
    }
    int64_t s0[] = {0}, e0[] = {2}, a0[] = {0}, z[] = {0};
    s4d_tensor in[5] = {x, i64_vec(1, s0), i64_vec(1, e0), i64_vec(1, a0), i64_vec(1, z)}, out[1];
    char err[512];
    CHECK(run_op("Slice", 13, 5, in, 0x1e, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "step 0: %s", err);
    CHECK(run_op("Slice", 13, 3, in, 0x2, 1, out, 0, NULL, NULL, err) == S4D_ERR_UNSUPPORTED, "dynamic ends: %s", err);
    s4d_attr at[3] = {attr_ints("starts", s0, 1), attr_ints("ends", e0, 1), attr_ints("axes", a0, 1)};
    CHECK(run_op("Slice", 9, 1, in, 0, 1, out, 3, at, NULL, err) == S4D_OK && out->dims[0] == 2 &&
              !memcmp(out->data, x.data, sizeof(float) * 126), "Slice opset 9: %s", err);
    tensor_free(out);
    for (int i = 1; i < 5; i++)
        tensor_free(&in[i]);
    tensor_free(&x);
}

/* ---- Gather / GatherElements ---------------------------------------------------------------------------- */

void group_gather(void)
{
    int64_t d[] = {4, 6, 3}, idv[] = {5, -1, 0, 2, 2, -6};
    s4d_tensor x = f32(3, d, -1, 1);
    int64_t id[] = {2, 3};
    s4d_tensor idx = tensor_new(S4D_DTYPE_INT64, 2, id);
    memcpy(idx.data, idv, sizeof(idv));
    s4d_tensor in[2] = {x, idx}, out[1];
    s4d_attr ax = attr_int("axis", 1);
    char err[512];
    s4d_status st = run_op("Gather", 13, 2, in, 0, 1, out, 1, &ax, g_pool, err);
    int64_t od[] = {4, 2, 3, 3};
    CHECK(st == S4D_OK && same_dims(out, 4, od), "Gather: %s", err);
    for (int64_t i = 0; st == S4D_OK && i < s4d_tensor_numel(out); i++) {
        int64_t c[4];
        coords(4, od, i, c);
        int64_t v = idv[c[1] * 3 + c[2]];
        int64_t ic[3] = {c[0], v < 0 ? v + 6 : v, c[3]};
        if (((float *)out->data)[i] != ((float *)x.data)[offset_of(3, d, ic)]) {
            CHECK(0, "Gather element %lld", (long long)i);
            break;
        }
    }
    tensor_free(out);
    /* int32 indices, axis 0, scalar index (rank drops). */
    int64_t one = 1;
    s4d_tensor s32 = tensor_new(S4D_DTYPE_INT32, 0, &one);
    *(int32_t *)s32.data = -2;
    s4d_tensor in2[2] = {x, s32};
    st = run_op("Gather", 13, 2, in2, 0, 1, out, 0, NULL, NULL, err);
    CHECK(st == S4D_OK && out->rank == 2 && !memcmp(out->data, (float *)x.data + 2 * 18, 18 * sizeof(float)),
          "Gather scalar int32: %s", err);
    tensor_free(out);
    /* Out of range at run time: an error, not a read. */
    ((int64_t *)idx.data)[4] = 6;
    CHECK(run_op("Gather", 13, 2, in, 0, 1, out, 1, &ax, NULL, err) == S4D_ERR_INVALID_ARG && strstr(err, "6"),
          "Gather index 6 of 6: %s", err);
    tensor_free(out);
    ((int64_t *)idx.data)[4] = 2;
    s4d_tensor fidx[2] = {x, x};
    CHECK(run_op("Gather", 13, 2, fidx, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE && strstr(err, "indices"),
          "Gather float indices: %s", err);

    /* GatherElements along axis 2 and axis -3. */
    for (int a = 0; a < 3; a++) {
        int64_t gd[] = {3, 5, 2};
        gd[a] = a == 0 ? 2 : gd[a];
        s4d_tensor gi = tensor_new(S4D_DTYPE_INT64, 3, gd);
        for (int64_t i = 0; i < s4d_tensor_numel(&gi); i++)
            ((int64_t *)gi.data)[i] = (int64_t)floor(rnd_uniform(-d[a], d[a] - 1e-9));
        s4d_tensor gin[2] = {x, gi};
        s4d_attr gax = attr_int("axis", a == 0 ? -3 : a);
        st = run_op("GatherElements", 13, 2, gin, 0, 1, out, 1, &gax, g_pool, err);
        CHECK(st == S4D_OK && same_dims(out, 3, gd), "GatherElements axis %d: %s", a, err);
        for (int64_t i = 0; st == S4D_OK && i < s4d_tensor_numel(out); i++) {
            int64_t c[3];
            coords(3, gd, i, c);
            int64_t v = ((int64_t *)gi.data)[i];
            c[a] = v < 0 ? v + d[a] : v;
            if (((float *)out->data)[i] != ((float *)x.data)[offset_of(3, d, c)]) {
                CHECK(0, "GatherElements axis %d element %lld", a, (long long)i);
                break;
            }
        }
        tensor_free(out);
        tensor_free(&gi);
    }
    tensor_free(&s32);
    tensor_free(&idx);
    tensor_free(&x);
}

/* ---- ScatterND -------------------------------------------------------------------------------------------- */

void group_scatter(void)
{
    int64_t d[] = {4, 3, 5}, id[] = {3, 1}, ud[] = {3, 3, 5};
    s4d_tensor x = f32(3, d, -1, 1), up = f32(3, ud, -1, 1);
    int64_t iv[] = {2, 0, 2};
    s4d_tensor idx = tensor_new(S4D_DTYPE_INT64, 2, id);
    memcpy(idx.data, iv, sizeof(iv));
    s4d_tensor in[3] = {x, idx, up}, out[1];
    const char *reds[] = {"none", "add", "mul", "max", "min"};
    for (int r = 0; r < 5; r++) {
        s4d_attr ra = attr_string("reduction", reds[r]);
        char err[512];
        /* Duplicate index 2 only with a reduction (undefined order for "none"). */
        ((int64_t *)idx.data)[2] = r == 0 ? 1 : 2;
        s4d_status st = run_op("ScatterND", 18, 3, in, 0, 1, out, 1, &ra, NULL, err);
        CHECK(st == S4D_OK, "ScatterND %s: %s", reds[r], err);
        if (st != S4D_OK)
            continue;
        double ref[60];
        for (int i = 0; i < 60; i++)
            ref[i] = ((float *)x.data)[i];
        for (int u = 0; u < 3; u++) {
            int64_t row = ((int64_t *)idx.data)[u];
            for (int k = 0; k < 15; k++) {
                double a = ref[row * 15 + k], b = ((float *)up.data)[u * 15 + k];
                ref[row * 15 + k] = r == 0 ? b : r == 1 ? a + b : r == 2 ? a * b : r == 3 ? fmax(a, b) : fmin(a, b);
            }
        }
        close_f32(out->data, ref, 60, 1e-6, 1e-7, reds[r]);
        tensor_free(out);
    }
    char err[512];
    ((int64_t *)idx.data)[1] = -5;
    CHECK(run_op("ScatterND", 16, 3, in, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_INVALID_ARG, "index -5: %s", err);
    tensor_free(out);
    s4d_tensor badu = f32(2, ud, -1, 1);
    s4d_tensor in2[3] = {x, idx, badu};
    CHECK(run_op("ScatterND", 16, 3, in2, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE && strstr(err, "updates"),
          "updates shape: %s", err);
    tensor_free(&badu);
    tensor_free(&idx);
    tensor_free(&up);
    tensor_free(&x);
}

/* ---- Expand / Tile ----------------------------------------------------------------------------------------- */

void group_expand_tile(void)
{
    int64_t d[] = {3, 1, 4}, shp[] = {2, 1, 5, 1}, want[] = {2, 3, 5, 4};
    s4d_tensor x = f32(3, d, -1, 1), out[1];
    s4d_tensor in[2] = {x, i64_vec(4, shp)};
    char err[512];
    s4d_status st = run_op("Expand", 13, 2, in, 2u, 1, out, 0, NULL, g_pool, err);
    CHECK(st == S4D_OK && same_dims(out, 4, want), "Expand: %s", err);
    for (int64_t i = 0; st == S4D_OK && i < 120; i++)
        if (((float *)out->data)[i] != ((float *)x.data)[bcast_index(out, &x, i)]) {
            CHECK(0, "Expand element %lld", (long long)i);
            break;
        }
    tensor_free(out);
    CHECK(run_op("Expand", 13, 2, in, 0u, 1, out, 0, NULL, NULL, err) == S4D_ERR_UNSUPPORTED, "Expand dynamic: %s", err);
    int64_t bad[] = {2, 5};
    tensor_free(&in[1]);
    in[1] = i64_vec(2, bad);
    CHECK(run_op("Expand", 13, 2, in, 2u, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "Expand 3x1x4 to 2x5: %s", err);
    tensor_free(&in[1]);

    int64_t rep[] = {2, 3, 1}, td[] = {6, 3, 4};
    in[1] = i64_vec(3, rep);
    st = run_op("Tile", 13, 2, in, 2u, 1, out, 0, NULL, g_pool, err);
    CHECK(st == S4D_OK && same_dims(out, 3, td), "Tile: %s", err);
    for (int64_t i = 0; st == S4D_OK && i < 72; i++) {
        int64_t c[3];
        coords(3, td, i, c);
        for (int a = 0; a < 3; a++)
            c[a] %= d[a];
        if (((float *)out->data)[i] != ((float *)x.data)[offset_of(3, d, c)]) {
            CHECK(0, "Tile element %lld", (long long)i);
            break;
        }
    }
    tensor_free(out);
    tensor_free(&in[1]);
    in[1] = i64_vec(2, rep);
    CHECK(run_op("Tile", 13, 2, in, 2u, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "Tile repeats of 2 on rank 3: %s",
          err);
    tensor_free(&in[1]);
    tensor_free(&x);
}

/* ---- Shape, Size, ConstantOfShape, Range ------------------------------------------------------------------------ */

void group_shape_ops(void)
{
    int64_t d[] = {2, 3, 5, 7};
    s4d_tensor x = f32(4, d, -1, 1), out[1];
    char err[512];
    CHECK(run_op("Shape", 13, 1, &x, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && out->dims[0] == 4 &&
              !memcmp(out->data, d, sizeof(d)), "Shape: %s", err);
    tensor_free(out);
    s4d_attr se[2] = {attr_int("start", -3), attr_int("end", -1)};
    CHECK(run_op("Shape", 15, 1, &x, 0, 1, out, 2, se, NULL, err) == S4D_OK && out->dims[0] == 2 &&
              ((int64_t *)out->data)[0] == 3 && ((int64_t *)out->data)[1] == 5, "Shape start/end: %s", err);
    tensor_free(out);
    CHECK(run_op("Size", 13, 1, &x, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && out->rank == 0 &&
              ((int64_t *)out->data)[0] == 210, "Size: %s", err);
    tensor_free(out);
    int64_t shp[] = {3, 4}, one = 1;
    s4d_tensor s = i64_vec(2, shp);
    s4d_tensor val = tensor_new(S4D_DTYPE_INT32, 1, &one);
    *(int32_t *)val.data = -7;
    s4d_attr va = {0};
    va.name = "value";
    va.type = S4D_ATTR_TENSOR;
    va.t = &val;
    CHECK(run_op("ConstantOfShape", 13, 1, &s, 1u, 1, out, 1, &va, NULL, err) == S4D_OK &&
              out->dtype == S4D_DTYPE_INT32 && out->dims[1] == 4 && ((int32_t *)out->data)[11] == -7,
          "ConstantOfShape int32: %s", err);
    tensor_free(out);
    CHECK(run_op("ConstantOfShape", 13, 1, &s, 1u, 1, out, 0, NULL, NULL, err) == S4D_OK &&
              out->dtype == S4D_DTYPE_FLOAT32 && ((float *)out->data)[5] == 0.0f, "ConstantOfShape default: %s", err);
    tensor_free(out);
    CHECK(run_op("ConstantOfShape", 13, 1, &s, 0u, 1, out, 0, NULL, NULL, err) == S4D_ERR_UNSUPPORTED,
          "ConstantOfShape dynamic: %s", err);
    /* Range: float and int, positive and negative delta. */
    struct { double s, l, d; int isint; } rc[] = {{1, 10, 3, 1}, {10, -3, -4, 1}, {0.5, 2.0, 0.25, 0}, {5, 1, 1, 0}};
    for (int c = 0; c < 4; c++) {
        s4d_dtype dt = rc[c].isint ? S4D_DTYPE_INT64 : S4D_DTYPE_FLOAT32;
        s4d_tensor r[3] = {tensor_new(dt, 0, &one), tensor_new(dt, 0, &one), tensor_new(dt, 0, &one)};
        double v3[3] = {rc[c].s, rc[c].l, rc[c].d};
        for (int i = 0; i < 3; i++) {
            if (rc[c].isint)
                *(int64_t *)r[i].data = (int64_t)v3[i];
            else
                *(float *)r[i].data = (float)v3[i];
        }
        s4d_status st = run_op("Range", 13, 3, r, 7u, 1, out, 0, NULL, NULL, err);
        CHECK(st == S4D_OK, "Range case %d: %s", c, err);
        int64_t m = 0;
        for (double v = rc[c].s; rc[c].d > 0 ? v < rc[c].l : v > rc[c].l; v += rc[c].d)
            m++;
        CHECK(st != S4D_OK || out->dims[0] == m, "Range case %d length %lld, expected %lld", c,
              (long long)out->dims[0], (long long)m);
        for (int64_t i = 0; st == S4D_OK && i < m; i++) {
            double want = rc[c].s + (double)i * rc[c].d;
            double got = rc[c].isint ? (double)((int64_t *)out->data)[i] : ((float *)out->data)[i];
            CHECK(fabs(got - want) < 1e-6, "Range case %d element %lld: %g vs %g", c, (long long)i, got, want);
        }
        tensor_free(out);
        CHECK(run_op("Range", 13, 3, r, 3u, 1, out, 0, NULL, NULL, err) == S4D_ERR_UNSUPPORTED, "Range dynamic: %s", err);
        for (int i = 0; i < 3; i++)
            tensor_free(&r[i]);
    }
    tensor_free(&val);
    tensor_free(&s);
    tensor_free(&x);
}

/* ---- Where, Cast, comparisons and logic ------------------------------------------------------------------------------ */

static void check_where(int rc, const int64_t *dc, int rx, const int64_t *dx, int ry, const int64_t *dy, s4d_dtype dt)
{
    s4d_tensor c = tensor_new(S4D_DTYPE_BOOL, rc, dc), x = tensor_new(dt, rx, dx), y = tensor_new(dt, ry, dy), out[1];
    fill_random(&c, 0, 1);
    fill_random(&x, -100, 100);
    fill_random(&y, -100, 100);
    s4d_tensor in[3] = {c, x, y};
    char err[512];
    s4d_status st = run_op("Where", 16, 3, in, 0, 1, out, 0, NULL, g_pool, err);
    CHECK(st == S4D_OK, "Where: %s", err);
    size_t es = s4d_dtype_size(dt);
    for (int64_t i = 0; st == S4D_OK && i < s4d_tensor_numel(out); i++) {
        const char *want = ((uint8_t *)c.data)[bcast_index(out, &c, i)]
                               ? (char *)x.data + bcast_index(out, &x, i) * (int64_t)es
                               : (char *)y.data + bcast_index(out, &y, i) * (int64_t)es;
        if (memcmp((char *)out->data + i * (int64_t)es, want, es)) {
            CHECK(0, "Where element %lld", (long long)i);
            break;
        }
    }
    tensor_free(out);
    tensor_free(&c);
    tensor_free(&x);
    tensor_free(&y);
}

void group_where_cast(void)
{
    int64_t dc[] = {4, 1}, dx[] = {3}, dy[] = {2, 4, 3}, big[] = {8, 8, 128, 13}, rowc[] = {8, 8, 1, 1};
    check_where(2, dc, 1, dx, 3, dy, S4D_DTYPE_FLOAT32);
    check_where(4, big, 4, big, 4, big, S4D_DTYPE_FLOAT32);
    check_where(4, rowc, 4, big, 4, big, S4D_DTYPE_FLOAT32);
    check_where(4, rowc, 0, big, 4, big, S4D_DTYPE_FLOAT32);
    check_where(2, big + 2, 4, big, 1, big + 3, S4D_DTYPE_INT64);
    check_where(2, big + 2, 2, big + 2, 0, big, S4D_DTYPE_UINT8);
    s4d_tensor c = tensor_new(S4D_DTYPE_BOOL, 2, dc), x = f32(1, dx, -1, 1), y = f32(3, dy, -1, 1), out[1];
    char err[512];
    s4d_status st;
    s4d_tensor bad[3] = {x, x, y};
    CHECK(run_op("Where", 16, 3, bad, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE && strstr(err, "condition"),
          "Where float condition: %s", err);
    /* Cast float -> int64 (truncation, saturation, NaN), int64 -> float16 -> float32, bool. */
    int64_t six = 6;
    s4d_tensor f = tensor_new(S4D_DTYPE_FLOAT32, 1, &six);
    float fv[] = {2.75f, -2.75f, 1e30f, -1e30f, NAN, 0.0f};
    memcpy(f.data, fv, sizeof(fv));
    s4d_attr to = attr_int("to", S4D_DTYPE_INT64);
    st = run_op("Cast", 13, 1, &f, 0, 1, out, 1, &to, NULL, err);
    int64_t want64[] = {2, -2, INT64_MAX, INT64_MIN, 0, 0};
    CHECK(st == S4D_OK && !memcmp(out->data, want64, sizeof(want64)), "Cast float->int64: %s", err);
    tensor_free(out);
    to = attr_int("to", S4D_DTYPE_FLOAT16);
    st = run_op("Cast", 13, 1, &f, 0, 1, out, 1, &to, NULL, err);
    uint16_t want16[] = {0x4180, 0xc180, 0x7c00, 0xfc00, 0x7e00, 0x0000};
    CHECK(st == S4D_OK, "Cast float->float16: %s", err);
    for (int i = 0; st == S4D_OK && i < 6; i++)
        CHECK(((uint16_t *)out->data)[i] == want16[i] || (i == 4 && (((uint16_t *)out->data)[i] & 0x7c00) == 0x7c00 &&
                                                          (((uint16_t *)out->data)[i] & 0x3ff)),
              "Cast float->float16 element %d: 0x%04x", i, ((uint16_t *)out->data)[i]);
    s4d_tensor h = *out;
    to = attr_int("to", S4D_DTYPE_FLOAT32);
    s4d_tensor back[1];
    st = run_op("Cast", 13, 1, &h, 0, 1, back, 1, &to, NULL, err);
    CHECK(st == S4D_OK && ((float *)back->data)[0] == 2.75f && isinf(((float *)back->data)[2]) &&
              isnan(((float *)back->data)[4]), "Cast float16->float: %s", err);
    tensor_free(back);
    tensor_free(&h);
    /* bfloat16 keeps float32's exponent: round to nearest even on the top 16 bits. */
    to = attr_int("to", S4D_DTYPE_BFLOAT16);
    st = run_op("Cast", 13, 1, &f, 0, 1, out, 1, &to, NULL, err);
    uint16_t wantbf[] = {0x4030, 0xc030, 0x714a, 0xf14a, 0x7fc0, 0x0000};
    CHECK(st == S4D_OK && out->dtype == S4D_DTYPE_BFLOAT16, "Cast float->bfloat16: %s", err);
    for (int i = 0; st == S4D_OK && i < 6; i++)
        CHECK(((uint16_t *)out->data)[i] == wantbf[i] || (i == 4 && (((uint16_t *)out->data)[i] & 0x7fc0) == 0x7fc0),
              "Cast float->bfloat16 element %d: 0x%04x, expected 0x%04x", i, ((uint16_t *)out->data)[i], wantbf[i]);
    s4d_tensor bf = *out;
    to = attr_int("to", S4D_DTYPE_FLOAT32);
    st = run_op("Cast", 13, 1, &bf, 0, 1, back, 1, &to, NULL, err);
    CHECK(st == S4D_OK && ((float *)back->data)[0] == 2.75f && ((float *)back->data)[1] == -2.75f &&
              fabsf(((float *)back->data)[2] - 1e30f) < 1e28f, "Cast bfloat16->float: %s", err);
    tensor_free(back);
    tensor_free(&bf);
    to = attr_int("to", S4D_DTYPE_BOOL);
    st = run_op("Cast", 13, 1, &f, 0, 1, out, 1, &to, NULL, err);
    CHECK(st == S4D_OK && ((uint8_t *)out->data)[0] == 1 && ((uint8_t *)out->data)[5] == 0, "Cast float->bool: %s", err);
    tensor_free(out);
    to = attr_int("to", S4D_DTYPE_STRING);
    CHECK(run_op("Cast", 13, 1, &f, 0, 1, out, 1, &to, NULL, err) == S4D_ERR_DTYPE, "Cast to string: %s", err);
    /* And / Or / Xor with broadcasting. */
    int64_t da[] = {3, 4}, db[] = {4};
    s4d_tensor ba[2] = {tensor_new(S4D_DTYPE_BOOL, 2, da), tensor_new(S4D_DTYPE_BOOL, 1, db)};
    fill_random(&ba[0], 0, 1);
    fill_random(&ba[1], 0, 1);
    const char *lops[] = {"And", "Or", "Xor"};
    for (int k = 0; k < 3; k++) {
        st = run_op(lops[k], 13, 2, ba, 0, 1, out, 0, NULL, NULL, err);
        CHECK(st == S4D_OK && out->dtype == S4D_DTYPE_BOOL, "%s: %s", lops[k], err);
        for (int i = 0; st == S4D_OK && i < 12; i++) {
            int p = ((uint8_t *)ba[0].data)[i], q = ((uint8_t *)ba[1].data)[i % 4];
            int w = k == 0 ? p && q : k == 1 ? p || q : p != q;
            CHECK(((uint8_t *)out->data)[i] == w, "%s element %d", lops[k], i);
        }
        tensor_free(out);
    }
    s4d_tensor fb[2] = {x, x};
    CHECK(run_op("And", 13, 2, fb, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE, "And float: %s", err);
    tensor_free(&ba[0]);
    tensor_free(&ba[1]);
    tensor_free(&f);
    tensor_free(&c);
    tensor_free(&x);
    tensor_free(&y);
}

/* ---- generic bad input ------------------------------------------------------------------------------------------------ */

void group_errors(void)
{
    /* Every op in table a rejects a wrong input count without crashing, and names the node. */
    const char *ops[] = {"Add", "Relu", "Reshape", "Transpose", "Softmax", "ReduceSum", "Concat", "Split", "Slice",
                         "Gather", "GatherElements", "ScatterND", "Expand", "Tile", "Where", "Cast", "Range",
                         "Squeeze", "Unsqueeze", "Flatten", "ArgMax", "Clip", "Shape", "ConstantOfShape", "Identity"};
    int64_t d[] = {2, 3};
    s4d_tensor x[6];
    for (int i = 0; i < 6; i++)
        x[i] = f32(2, d, -1, 1);
    char err[512];
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
        s4d_tensor out[1];
        s4d_status st = run_op(ops[k], 13, 0, x, 0, 1, out, 0, NULL, NULL, err);
        CHECK(st != S4D_OK && strstr(err, "node 'n'"), "%s with no inputs: status %d, '%s'", ops[k], st, err);
        st = run_op(ops[k], 13, 6, x, 0, 1, out, 0, NULL, NULL, err);
        CHECK(st != S4D_OK, "%s with 6 inputs accepted", ops[k]);
    }
    CHECK(s4d_op_find_schema("", "Gelu", 17) == NULL, "Gelu must not resolve before opset 20");
    CHECK(s4d_op_find_schema("ai.onnx", "Add", 13) != NULL, "ai.onnx names the default domain");
    for (int i = 0; i < 6; i++)
        tensor_free(&x[i]);
}

/* ---- Mod, PRelu, IsNaN/IsInf, GatherND, ScatterElements ---------------------------------------------------------------- */

void group_extra(void)
{
    char err[512];
    s4d_tensor out[1];
    /* Mod: divisor's sign with fmod=0, dividend's with fmod=1; a zero divisor gives 0, not a trap. */
    int64_t av[] = {7, -7, 7, -7, 5, INT64_MIN}, bv[] = {3, 3, -3, -3, 0, -1};
    s4d_tensor mi[2] = {i64_vec(6, av), i64_vec(6, bv)};
    for (int f = 0; f <= 1; f++) {
        s4d_attr fm = attr_int("fmod", f);
        s4d_status st = run_op("Mod", 13, 2, mi, 0, 1, out, 1, &fm, NULL, err);
        CHECK(st == S4D_OK, "Mod int64 fmod=%d: %s", f, err);
        for (int i = 0; st == S4D_OK && i < 6; i++) {
            int64_t a = av[i], b = bv[i], r = (b == 0 || b == -1) ? 0 : a % b;
            if (!f && r != 0 && ((r < 0) != (b < 0)))
                r += b;
            CHECK(((int64_t *)out->data)[i] == r, "Mod fmod=%d element %d: %lld, expected %lld", f, i,
                  (long long)((int64_t *)out->data)[i], (long long)r);
        }
        tensor_free(out);
    }
    tensor_free(&mi[0]);
    tensor_free(&mi[1]);

    /* PRelu with a per-channel slope. */
    int64_t dx[] = {2, 3, 4}, ds[] = {3, 1};
    s4d_tensor pin[2] = {f32(3, dx, -2, 2), f32(2, ds, 0.1, 0.9)};
    s4d_status st = run_op("PRelu", 16, 2, pin, 0, 1, out, 0, NULL, g_pool, err);
    CHECK(st == S4D_OK && same_dims(out, 3, dx), "PRelu: %s", err);
    for (int64_t i = 0; st == S4D_OK && i < 24; i++) {
        double x = ((float *)pin[0].data)[i], sl = ((float *)pin[1].data)[(i / 4) % 3];
        double want = x < 0 ? sl * x : x;
        CHECK(fabs(((float *)out->data)[i] - want) < 1e-6, "PRelu element %lld", (long long)i);
    }
    tensor_free(out);
    s4d_tensor pbad[2] = {pin[1], pin[0]}; /* slope larger than X: not unidirectional */
    CHECK(run_op("PRelu", 16, 2, pbad, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "PRelu slope > X: %s", err);
    tensor_free(&pin[0]);
    tensor_free(&pin[1]);

    /* IsNaN / IsInf with detect_negative=0. */
    int64_t four = 4;
    s4d_tensor sp = tensor_new(S4D_DTYPE_FLOAT32, 1, &four);
    float spv[] = {NAN, INFINITY, -INFINITY, 1.5f};
    memcpy(sp.data, spv, sizeof(spv));
    CHECK(run_op("IsNaN", 13, 1, &sp, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && out->dtype == S4D_DTYPE_BOOL &&
              !memcmp(out->data, "\1\0\0\0", 4), "IsNaN: %s", err);
    tensor_free(out);
    s4d_attr dn = attr_int("detect_negative", 0);
    CHECK(run_op("IsInf", 13, 1, &sp, 0, 1, out, 1, &dn, NULL, err) == S4D_OK && !memcmp(out->data, "\0\1\0\0", 4),
          "IsInf positive only: %s", err);
    tensor_free(out);
    tensor_free(&sp);

    /* GatherND with batch_dims = 1. */
    int64_t dd[] = {2, 3, 4}, di[] = {2, 2, 1};
    s4d_tensor gd = f32(3, dd, -1, 1), gi = tensor_new(S4D_DTYPE_INT64, 3, di);
    int64_t giv[] = {2, -3, 1, 0};
    memcpy(gi.data, giv, sizeof(giv));
    s4d_tensor gin[2] = {gd, gi};
    s4d_attr bd = attr_int("batch_dims", 1);
    st = run_op("GatherND", 13, 2, gin, 0, 1, out, 1, &bd, NULL, err);
    int64_t god[] = {2, 2, 4};
    CHECK(st == S4D_OK && same_dims(out, 3, god), "GatherND: %s", err);
    for (int64_t i = 0; st == S4D_OK && i < 16; i++) {
        int64_t b = i / 8, t = (i / 4) % 2, c = i % 4, row = giv[b * 2 + t];
        row = row < 0 ? row + 3 : row;
        CHECK(((float *)out->data)[i] == ((float *)gd.data)[(b * 3 + row) * 4 + c], "GatherND element %lld",
              (long long)i);
    }
    tensor_free(out);
    giv[0] = 3;
    memcpy(gi.data, giv, sizeof(giv));
    CHECK(run_op("GatherND", 13, 2, gin, 0, 1, out, 1, &bd, NULL, err) == S4D_ERR_INVALID_ARG, "GatherND index 3 of 3: %s",
          err);
    tensor_free(out);
    tensor_free(&gi);

    /* ScatterElements along axis 1 with add and duplicates. */
    int64_t id2[] = {2, 2};
    s4d_tensor si = tensor_new(S4D_DTYPE_INT64, 2, id2), su = f32(2, id2, -1, 1);
    int64_t siv[] = {1, 1, -1, 0};
    memcpy(si.data, siv, sizeof(siv));
    s4d_tensor sin3[3] = {gd, si, su};
    sin3[0].rank = 2;
    sin3[0].dims[0] = 6;
    sin3[0].dims[1] = 4;
    s4d_attr sat[2] = {attr_int("axis", 1), attr_string("reduction", "add")};
    st = run_op("ScatterElements", 18, 3, sin3, 0, 1, out, 2, sat, NULL, err);
    CHECK(st == S4D_OK, "ScatterElements: %s", err);
    if (st == S4D_OK) {
        double ref[24];
        for (int i = 0; i < 24; i++)
            ref[i] = ((float *)gd.data)[i];
        for (int u = 0; u < 4; u++) {
            int64_t r = u / 2, c = siv[u] < 0 ? siv[u] + 4 : siv[u];
            ref[r * 4 + c] += ((float *)su.data)[u];
        }
        close_f32(out->data, ref, 24, 1e-6, 1e-7, "ScatterElements add");
    }
    tensor_free(out);
    tensor_free(&si);
    tensor_free(&su);
    tensor_free(&gd);
}
