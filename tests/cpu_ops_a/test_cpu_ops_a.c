/*
 * Unit tests of the CPU op table a: each op is found through
 * s4d_op_find_schema, inferred and run like the engine does, and compared with
 * a plain double-precision reference loop on random non-zero data.
 * Usage: test_cpu_ops_a <group>
 */
#include "harness.h"

#include <stdatomic.h>

int g_failures;
s4d_threadpool *g_pool;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd_u64(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}

double rnd_uniform(double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rnd_u64() >> 11) / 9007199254740992.0);
}

float rnd_nonzero(float lo, float hi)
{
    if (fabsf(lo) < 0.05f && fabsf(hi) < 0.05f) /* no non-zero value to find */
        return hi;
    for (;;) {
        float v = (float)rnd_uniform(lo, hi);
        if (fabsf(v) >= 0.05f)
            return v;
    }
}

s4d_tensor tensor_new(s4d_dtype dt, int rank, const int64_t *dims)
{
    s4d_tensor t = {dt, rank, {0}, NULL};
    for (int d = 0; d < rank; d++)
        t.dims[d] = dims[d];
    size_t n = (size_t)s4d_tensor_numel(&t), es = s4d_dtype_size(dt);
    t.data = calloc(n ? n : 1, es ? es : 1);
    return t;
}

void tensor_free(s4d_tensor *t)
{
    free(t->data);
    t->data = NULL;
}

void fill_random(s4d_tensor *t, double lo, double hi)
{
    int64_t n = s4d_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case S4D_DTYPE_FLOAT32: ((float *)t->data)[i] = rnd_nonzero((float)lo, (float)hi); break;
        case S4D_DTYPE_FLOAT64: ((double *)t->data)[i] = rnd_nonzero((float)lo, (float)hi); break;
        case S4D_DTYPE_INT64: ((int64_t *)t->data)[i] = (int64_t)floor(rnd_uniform(lo, hi + 1)); break;
        case S4D_DTYPE_INT32: ((int32_t *)t->data)[i] = (int32_t)floor(rnd_uniform(lo, hi + 1)); break;
        case S4D_DTYPE_BOOL: ((uint8_t *)t->data)[i] = (uint8_t)(rnd_u64() & 1); break;
        /* Through int64: a negative double converted straight to uint8 is undefined. */
        case S4D_DTYPE_UINT8: ((uint8_t *)t->data)[i] = (uint8_t)(int64_t)floor(rnd_uniform(lo, hi + 1)); break;
        default: memset(t->data, 0, (size_t)n * s4d_dtype_size(t->dtype)); return;
        }
    }
}

s4d_attr attr_int(const char *name, int64_t v)
{
    s4d_attr a = {0};
    a.name = (char *)name;
    a.type = S4D_ATTR_INT;
    a.i = v;
    return a;
}

s4d_attr attr_float(const char *name, float v)
{
    s4d_attr a = {0};
    a.name = (char *)name;
    a.type = S4D_ATTR_FLOAT;
    a.f = v;
    return a;
}

s4d_attr attr_ints(const char *name, int64_t *v, size_t n)
{
    s4d_attr a = {0};
    a.name = (char *)name;
    a.type = S4D_ATTR_INTS;
    a.ints = v;
    a.count = n;
    return a;
}

s4d_attr attr_string(const char *name, const char *s)
{
    s4d_attr a = {0};
    a.name = (char *)name;
    a.type = S4D_ATTR_STRING;
    a.s = (char *)s;
    a.s_len = strlen(s);
    return a;
}

s4d_status run_op(const char *op_type, int opset, int nin, const s4d_tensor *ins, unsigned const_mask,
                  int nout, s4d_tensor *outs, int nattr, const s4d_attr *attrs, s4d_threadpool *pool,
                  char *err)
{
    err[0] = 0;
    for (int i = 0; i < nout; i++)
        memset(&outs[i], 0, sizeof(outs[i]));
    const s4d_op_schema *def = s4d_op_find_schema("", op_type, opset);
    if (!def) {
        snprintf(err, 512, "op %s not found at opset %d", op_type, opset);
        return S4D_ERR_NOT_FOUND;
    }
    s4d_tensor build_in[16];
    for (int i = 0; i < nin; i++) {
        build_in[i] = ins[i];
        if (!(const_mask & (1u << i)))
            build_in[i].data = NULL;
    }
    s4d_op_ctx ctx = {0};
    ctx.node_name = "n";
    ctx.op_type = op_type;
    ctx.opset = opset;
    ctx.num_attrs = nattr;
    ctx.attrs = attrs;
    ctx.num_inputs = nin;
    ctx.inputs = build_in;
    ctx.num_outputs = nout;
    ctx.outputs = outs;
    ctx.err = err;
    ctx.err_size = 512;
    s4d_status st = def->infer(&ctx);
    if (st != S4D_OK)
        return st;
    void *ws = NULL;
    if (def->workspace_size) {
        ctx.workspace_size = def->workspace_size(&ctx);
        ws = ctx.workspace_size ? aligned_alloc(64, (ctx.workspace_size + 63) / 64 * 64) : NULL;
        ctx.workspace = ws;
    }
    for (int i = 0; i < nout; i++) {
        size_t n = (size_t)s4d_tensor_numel(&outs[i]), es = s4d_dtype_size(outs[i].dtype);
        /* Poison so an op that leaves elements unwritten is caught. */
        outs[i].data = malloc((n ? n : 1) * (es ? es : 1));
        memset(outs[i].data, 0xA5, (n ? n : 1) * (es ? es : 1));
    }
    ctx.inputs = ins;
    ctx.pool = pool;
    st = def->run(&ctx);
    free(ws);
    return st;
}

int close_f32(const float *got, const double *ref, int64_t n, double rtol, double atol, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        if (isnan(r) && isnan(g))
            continue;
        if (!(fabs(g - r) <= atol + rtol * fabs(r))) {
            CHECK(0, "%s: element %lld: got %.9g, expected %.9g", what, (long long)i, g, r);
            return 0;
        }
    }
    return 1;
}

/* ---- thread pool ---------------------------------------------------------- */

typedef struct cover_arg {
    atomic_int *hits;
    int64_t n;
    atomic_llong chunks;
} cover_arg;

static void cover_fn(void *vp, int64_t b, int64_t e)
{
    cover_arg *a = vp;
    atomic_fetch_add(&a->chunks, 1);
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&a->hits[i], 1);
}

typedef struct nest_arg {
    s4d_threadpool *pool;
    atomic_int *hits;
} nest_arg;

static void nest_inner(void *vp, int64_t b, int64_t e)
{
    atomic_int *hits = vp;
    for (int64_t i = b; i < e; i++)
        atomic_fetch_add(&hits[i], 1);
}

static void nest_outer(void *vp, int64_t b, int64_t e)
{
    nest_arg *a = vp;
    for (int64_t i = b; i < e; i++)
        s4d_parallel_for(a->pool, 10, 1, nest_inner, a->hits + i * 10);
}

/* Records chunk bounds to check they depend on nothing but (n, grain, threads). */
typedef struct bounds_arg {
    int64_t *begin_of; /* begin_of[b] = e */
} bounds_arg;

static void bounds_fn(void *vp, int64_t b, int64_t e)
{
    ((bounds_arg *)vp)->begin_of[b] = e;
}

void group_threadpool(void)
{
    CHECK(s4d_threadpool_create(4, NULL) == S4D_ERR_INVALID_ARG, "create(NULL out)");
    s4d_threadpool_destroy(NULL);
    CHECK(s4d_threadpool_size(NULL) == 1, "size(NULL)");
    for (int threads = 1; threads <= 5; threads += 2) {
        s4d_threadpool *p;
        CHECK(s4d_threadpool_create(threads, &p) == S4D_OK, "create(%d)", threads);
        CHECK(s4d_threadpool_size(p) == threads, "size");
        const int64_t ns[] = {0, 1, 2, 7, 100, 1001, 65537};
        const int64_t grains[] = {1, 3, 64, 100000};
        for (size_t a = 0; a < sizeof(ns) / sizeof(ns[0]); a++) {
            for (size_t g = 0; g < sizeof(grains) / sizeof(grains[0]); g++) {
                int64_t n = ns[a];
                cover_arg arg = {calloc((size_t)n + 1, sizeof(atomic_int)), n, 0};
                for (int rep = 0; rep < 3; rep++)
                    s4d_parallel_for(p, n, grains[g], cover_fn, &arg);
                for (int64_t i = 0; i < n; i++)
                    if (atomic_load(&arg.hits[i]) != 3) {
                        CHECK(0, "threads %d n %lld grain %lld: index %lld hit %d times", threads, (long long)n,
                              (long long)grains[g], (long long)i, atomic_load(&arg.hits[i]));
                        break;
                    }
                int64_t expect_chunks = n == 0 ? 0 : (n + grains[g] - 1) / grains[g];
                if (expect_chunks > threads)
                    expect_chunks = threads;
                CHECK(atomic_load(&arg.chunks) == 3 * expect_chunks, "chunk count %lld, expected %lld",
                      (long long)atomic_load(&arg.chunks), (long long)(3 * expect_chunks));
                free(arg.hits);
            }
        }
        /* Same bounds with and without the pool's threads. */
        int64_t b1[1000], b2[1000];
        for (int i = 0; i < 1000; i++)
            b1[i] = b2[i] = -1;
        bounds_arg x1 = {b1}, x2 = {b2};
        s4d_parallel_for(p, 1000, 10, bounds_fn, &x1);
        /* A nested call runs inline with identical bounds. */
        nest_arg na = {p, calloc(100 * 10, sizeof(atomic_int))};
        s4d_parallel_for(p, 100, 1, nest_outer, &na);
        for (int i = 0; i < 1000; i++)
            if (atomic_load(&na.hits[i]) != 1) {
                CHECK(0, "nested: index %d hit %d times", i, atomic_load(&na.hits[i]));
                break;
            }
        free(na.hits);
        s4d_threadpool *inline_pool;
        s4d_threadpool_create(threads, &inline_pool);
        s4d_parallel_for(inline_pool, 1000, 10, bounds_fn, &x2);
        CHECK(memcmp(b1, b2, sizeof(b1)) == 0, "chunk bounds differ between two pools of %d", threads);
        s4d_threadpool_destroy(inline_pool);
        s4d_threadpool_destroy(p);
    }
}

/* ---- binary element-wise ---------------------------------------------------- */

/* Reference index of output element `o` into an input right-aligned to out's shape. */
int64_t bcast_index(const s4d_tensor *out, const s4d_tensor *in, int64_t o)
{
    int64_t idx = 0, stride = 1;
    for (int d = out->rank - 1; d >= 0; d--) {
        int64_t c = o % out->dims[d];
        o /= out->dims[d];
        int di = d - (out->rank - in->rank);
        if (di >= 0) {
            if (in->dims[di] != 1)
                idx += c * stride;
            stride *= in->dims[di];
        }
    }
    return idx;
}

static double ref_bin(const char *op, double x, double y)
{
    if (!strcmp(op, "Add")) return x + y;
    if (!strcmp(op, "Sub")) return x - y;
    if (!strcmp(op, "Mul")) return x * y;
    if (!strcmp(op, "Div")) return x / y;
    if (!strcmp(op, "Pow")) return pow(x, y);
    if (!strcmp(op, "Min")) return x < y ? x : y;
    if (!strcmp(op, "Max")) return x > y ? x : y;
    if (!strcmp(op, "Equal")) return x == y;
    if (!strcmp(op, "Greater")) return x > y;
    if (!strcmp(op, "Less")) return x < y;
    return NAN;
}

typedef struct shape_pair {
    int ra;
    int64_t a[5];
    int rb;
    int64_t b[5];
} shape_pair;

static const shape_pair bin_shapes[] = {
    {2, {3, 4}, 2, {3, 4}},          {3, {2, 3, 4}, 1, {4}},         {3, {2, 3, 4}, 0, {0}},
    {0, {0}, 3, {2, 3, 4}},          {3, {2, 1, 4}, 3, {1, 3, 1}},   {4, {2, 3, 1, 5}, 2, {4, 1}},
    {1, {1}, 4, {2, 3, 4, 5}},       {4, {1, 1, 7, 1}, 4, {3, 5, 1, 9}}, {3, {64, 33, 17}, 3, {64, 1, 17}},
    {2, {300, 200}, 2, {300, 1}},
};

static void check_binary_f32(const char *op, const shape_pair *sp, s4d_threadpool *pool)
{
    s4d_tensor in[2] = {tensor_new(S4D_DTYPE_FLOAT32, sp->ra, sp->a), tensor_new(S4D_DTYPE_FLOAT32, sp->rb, sp->b)};
    int pos = !strcmp(op, "Pow");
    fill_random(&in[0], pos ? 0.1 : -3, 3);
    fill_random(&in[1], pos ? -2 : -3, 3);
    if (!strcmp(op, "Equal")) /* make some equal pairs */
        for (int64_t i = 0; i < s4d_tensor_numel(&in[1]) && i < s4d_tensor_numel(&in[0]); i += 2)
            ((float *)in[1].data)[i] = ((float *)in[0].data)[i];
    s4d_tensor out[1];
    char err[512];
    s4d_status st = run_op(op, 17, 2, in, 0, 1, out, 0, NULL, pool, err);
    CHECK(st == S4D_OK, "%s: %s", op, err);
    if (st == S4D_OK) {
        int64_t n = s4d_tensor_numel(out);
        double *ref = malloc(sizeof(double) * (size_t)(n ? n : 1));
        int cmp = !strcmp(op, "Equal") || !strcmp(op, "Greater") || !strcmp(op, "Less");
        CHECK(out->dtype == (cmp ? S4D_DTYPE_BOOL : S4D_DTYPE_FLOAT32), "%s: output dtype", op);
        for (int64_t o = 0; o < n; o++)
            ref[o] = ref_bin(op, ((float *)in[0].data)[bcast_index(out, &in[0], o)],
                             ((float *)in[1].data)[bcast_index(out, &in[1], o)]);
        if (cmp) {
            for (int64_t o = 0; o < n; o++)
                if (((uint8_t *)out->data)[o] != ref[o]) {
                    CHECK(0, "%s: element %lld", op, (long long)o);
                    break;
                }
        } else {
            char what[64];
            snprintf(what, sizeof(what), "%s rank %d/%d", op, sp->ra, sp->rb);
            close_f32(out->data, ref, n, 2e-6, 1e-6, what);
        }
        free(ref);
    }
    tensor_free(&out[0]);
    tensor_free(&in[0]);
    tensor_free(&in[1]);
}

static void check_int64_arith(void)
{
    int64_t da[] = {4, 5}, db[] = {5};
    s4d_tensor in[2] = {tensor_new(S4D_DTYPE_INT64, 2, da), tensor_new(S4D_DTYPE_INT64, 1, db)};
    fill_random(&in[0], -1000, 1000);
    fill_random(&in[1], -7, 7);
    ((int64_t *)in[1].data)[2] = 0; /* division by zero must not crash */
    ((int64_t *)in[1].data)[3] = -1;
    ((int64_t *)in[0].data)[3] = INT64_MIN; /* INT64_MIN / -1 must not trap either */
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    for (int k = 0; k < 4; k++) {
        s4d_tensor out[1];
        char err[512];
        s4d_status st = run_op(ops[k], 14, 2, in, 0, 1, out, 0, NULL, g_pool, err);
        CHECK(st == S4D_OK && out->dtype == S4D_DTYPE_INT64, "%s int64: %s", ops[k], err);
        if (st != S4D_OK)
            continue;
        const int64_t *a = in[0].data, *b = in[1].data, *o = out->data;
        for (int i = 0; i < 20; i++) {
            int64_t x = a[i], y = b[i % 5], r;
            if (x == INT64_MIN)
                continue;
            switch (k) {
            case 0: r = x + y; break;
            case 1: r = x - y; break;
            case 2: r = x * y; break;
            default: r = y == 0 ? 0 : x / y; break;
            }
            if (o[i] != r) {
                CHECK(0, "%s int64 element %d: got %lld expected %lld", ops[k], i, (long long)o[i], (long long)r);
                break;
            }
        }
        tensor_free(&out[0]);
    }
    tensor_free(&in[0]);
    tensor_free(&in[1]);
}

static void check_half_add(void)
{
    int64_t d[] = {3, 100};
    s4d_tensor in[2] = {tensor_new(S4D_DTYPE_FLOAT16, 2, d), tensor_new(S4D_DTYPE_FLOAT16, 1, d + 1)};
    /* Values exactly representable in half so the reference is exact up to one rounding. */
    for (int i = 0; i < 300; i++)
        ((uint16_t *)in[0].data)[i] = (uint16_t)(0x3c00 + (i * 37) % 1024); /* [1, 2) */
    for (int i = 0; i < 100; i++)
        ((uint16_t *)in[1].data)[i] = (uint16_t)(0xb800 + (i * 53) % 1024); /* [-1, -0.5) */
    s4d_tensor out[1];
    char err[512];
    s4d_status st = run_op("Add", 14, 2, in, 0, 1, out, 0, NULL, g_pool, err);
    CHECK(st == S4D_OK && out->dtype == S4D_DTYPE_FLOAT16, "Add float16: %s", err);
    if (st == S4D_OK) {
        for (int i = 0; i < 300; i++) {
            uint16_t ha = ((uint16_t *)in[0].data)[i], hb = ((uint16_t *)in[1].data)[i % 100];
            /* decode by hand: 1.m and -(0.5 * 1.m) */
            double a = 1.0 + (ha & 0x3ff) / 1024.0, b = -0.5 * (1.0 + (hb & 0x3ff) / 1024.0);
            uint16_t h = ((uint16_t *)out->data)[i];
            int e = (h >> 10) & 0x1f;
            double g = (e ? (1.0 + (h & 0x3ff) / 1024.0) * ldexp(1.0, e - 15) : (h & 0x3ff) * ldexp(1.0, -24));
            if (h & 0x8000)
                g = -g;
            if (fabs(g - (a + b)) > ldexp(1.0, -11)) {
                CHECK(0, "float16 Add element %d: got %g expected %g", i, g, a + b);
                break;
            }
        }
    }
    tensor_free(&out[0]);
    tensor_free(&in[0]);
    tensor_free(&in[1]);
}

void group_binary(void)
{
    const char *ops[] = {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Greater", "Less"};
    for (size_t k = 0; k < sizeof(ops) / sizeof(ops[0]); k++)
        for (size_t s = 0; s < sizeof(bin_shapes) / sizeof(bin_shapes[0]); s++)
            check_binary_f32(ops[k], &bin_shapes[s], s % 2 ? g_pool : NULL);
    check_int64_arith();
    check_half_add();

    /* Threaded and single-threaded runs give identical bits. */
    int64_t d[] = {128, 257};
    s4d_tensor in[2] = {tensor_new(S4D_DTYPE_FLOAT32, 2, d), tensor_new(S4D_DTYPE_FLOAT32, 1, d + 1)};
    fill_random(&in[0], -2, 2);
    fill_random(&in[1], -2, 2);
    s4d_tensor o1[1], o2[1];
    char err[512];
    run_op("Div", 13, 2, in, 0, 1, o1, 0, NULL, NULL, err);
    run_op("Div", 13, 2, in, 0, 1, o2, 0, NULL, g_pool, err);
    CHECK(memcmp(o1->data, o2->data, sizeof(float) * 128 * 257) == 0, "threaded Div differs");
    tensor_free(o1);
    tensor_free(o2);

    /* Errors: dtype mismatch, unsupported dtype, shapes that do not broadcast. */
    s4d_tensor bad = tensor_new(S4D_DTYPE_INT64, 1, d + 1);
    s4d_tensor mix[2] = {in[0], bad};
    CHECK(run_op("Add", 14, 2, mix, 0, 1, o1, 0, NULL, NULL, err) == S4D_ERR_DTYPE && strstr(err, "input 1"),
          "Add float32+int64 should fail naming input 1: %s", err);
    s4d_tensor bools[2] = {tensor_new(S4D_DTYPE_BOOL, 1, d), tensor_new(S4D_DTYPE_BOOL, 1, d)};
    CHECK(run_op("Add", 14, 2, bools, 0, 1, o1, 0, NULL, NULL, err) == S4D_ERR_DTYPE, "Add bool: %s", err);
    CHECK(run_op("Less", 14, 2, bools, 0, 1, o1, 0, NULL, NULL, err) == S4D_ERR_DTYPE, "Less bool: %s", err);
    int64_t d3[] = {128, 3};
    s4d_tensor wrong = tensor_new(S4D_DTYPE_FLOAT32, 2, d3);
    s4d_tensor mis[2] = {in[0], wrong};
    CHECK(run_op("Mul", 14, 2, mis, 0, 1, o1, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "Mul [128,257]x[128,3]: %s",
          err);
    CHECK(run_op("Mul", 14, 1, mis, 0, 1, o1, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "Mul with 1 input: %s", err);
    tensor_free(&wrong);
    tensor_free(&bools[0]);
    tensor_free(&bools[1]);
    tensor_free(&bad);
    tensor_free(&in[0]);
    tensor_free(&in[1]);
}

/* ---- Reshape family -------------------------------------------------------------- */

void group_reshape(void)
{
    int64_t d[] = {2, 3, 4};
    s4d_tensor x = tensor_new(S4D_DTYPE_FLOAT32, 3, d);
    fill_random(&x, -1, 1);
    char err[512];
    struct {
        int64_t shape[4];
        int n;
        int allowzero;
        int rank;
        int64_t expect[4];
        s4d_status st;
    } cases[] = {
        {{4, -1}, 2, 0, 2, {4, 6}, S4D_OK},
        {{0, -1}, 2, 0, 2, {2, 12}, S4D_OK},
        {{-1}, 1, 0, 1, {24}, S4D_OK},
        {{2, 0, 2, 2}, 4, 0, 4, {2, 3, 2, 2}, S4D_OK},
        {{5, -1}, 2, 0, 0, {0}, S4D_ERR_SHAPE},
        {{-1, -1}, 2, 0, 0, {0}, S4D_ERR_SHAPE},
        {{0, 24}, 2, 1, 0, {0}, S4D_ERR_SHAPE}, /* allowzero: 0 is a real zero */
        {{7, 3}, 2, 0, 0, {0}, S4D_ERR_SHAPE},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        int64_t sd[] = {cases[c].n};
        s4d_tensor shp = tensor_new(S4D_DTYPE_INT64, 1, sd);
        memcpy(shp.data, cases[c].shape, sizeof(int64_t) * (size_t)cases[c].n);
        s4d_tensor in[2] = {x, shp}, out[1];
        s4d_attr at = attr_int("allowzero", cases[c].allowzero);
        s4d_status st = run_op("Reshape", 14, 2, in, 2u, 1, out, 1, &at, g_pool, err);
        CHECK(st == cases[c].st, "Reshape case %zu: status %d, expected %d (%s)", c, st, cases[c].st, err);
        if (st == S4D_OK) {
            CHECK(out->rank == cases[c].rank, "Reshape case %zu rank", c);
            for (int k = 0; k < out->rank; k++)
                CHECK(out->dims[k] == cases[c].expect[k], "Reshape case %zu dim %d", c, k);
            CHECK(memcmp(out->data, x.data, 24 * sizeof(float)) == 0, "Reshape case %zu data", c);
        }
        tensor_free(out);
        /* The same shape, but not a constant: unsupported, said clearly. */
        if (c == 0) {
            st = run_op("Reshape", 14, 2, in, 0u, 1, out, 0, NULL, NULL, err);
            CHECK(st == S4D_ERR_UNSUPPORTED && strstr(err, "constant"), "Reshape with dynamic shape: %s", err);
        }
        tensor_free(&shp);
    }
    /* Flatten, Squeeze, Unsqueeze shapes. */
    s4d_tensor out[1];
    s4d_attr ax = attr_int("axis", -1);
    CHECK(run_op("Flatten", 13, 1, &x, 0, 1, out, 1, &ax, NULL, err) == S4D_OK && out->dims[0] == 6 &&
              out->dims[1] == 4, "Flatten axis -1: %s", err);
    tensor_free(out);
    int64_t d1[] = {1, 3, 1, 4};
    s4d_tensor y = tensor_new(S4D_DTYPE_FLOAT32, 4, d1);
    fill_random(&y, -1, 1);
    CHECK(run_op("Squeeze", 13, 1, &y, 0, 1, out, 0, NULL, NULL, err) == S4D_OK && out->rank == 2 &&
              out->dims[0] == 3 && out->dims[1] == 4 && !memcmp(out->data, y.data, 48),
          "Squeeze all: %s", err);
    tensor_free(out);
    int64_t axv[] = {-2}, one[] = {1};
    s4d_tensor axt = tensor_new(S4D_DTYPE_INT64, 1, one);
    ((int64_t *)axt.data)[0] = -2;
    s4d_tensor sq[2] = {y, axt};
    CHECK(run_op("Squeeze", 13, 2, sq, 2u, 1, out, 0, NULL, NULL, err) == S4D_OK && out->rank == 3 &&
              out->dims[2] == 4, "Squeeze axes=[-2]: %s", err);
    tensor_free(out);
    s4d_attr axa = attr_ints("axes", axv, 1);
    CHECK(run_op("Squeeze", 11, 1, &y, 0, 1, out, 1, &axa, NULL, err) == S4D_OK && out->rank == 3,
          "Squeeze opset 11 attr: %s", err);
    tensor_free(out);
    ((int64_t *)axt.data)[0] = 1;
    CHECK(run_op("Squeeze", 13, 2, sq, 2u, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE,
          "Squeeze of a size-3 axis: %s", err);
    tensor_free(out);
    ((int64_t *)axt.data)[0] = -1;
    CHECK(run_op("Unsqueeze", 13, 2, sq, 2u, 1, out, 0, NULL, NULL, err) == S4D_OK && out->rank == 5 &&
              out->dims[4] == 1 && out->dims[3] == 4, "Unsqueeze axes=[-1]: %s", err);
    tensor_free(out);
    ((int64_t *)axt.data)[0] = 5;
    CHECK(run_op("Unsqueeze", 13, 2, sq, 2u, 1, out, 0, NULL, NULL, err) == S4D_ERR_SHAPE, "Unsqueeze axis 5: %s",
          err);
    tensor_free(out);
    tensor_free(&axt);
    tensor_free(&y);
    tensor_free(&x);
}

/* ---- Transpose -------------------------------------------------------------------- */

static void check_transpose(int rank, const int64_t *dims, const int64_t *perm, s4d_dtype dt, s4d_threadpool *pool)
{
    s4d_tensor x = tensor_new(dt, rank, dims);
    int64_t n = s4d_tensor_numel(&x);
    size_t es = s4d_dtype_size(dt);
    for (int64_t i = 0; i < n; i++) /* distinct values: element index */
        for (size_t b = 0; b < es; b++)
            ((uint8_t *)x.data)[i * (int64_t)es + (int64_t)b] = (uint8_t)((i >> (8 * (b % 4))) + b);
    s4d_attr at = attr_ints("perm", (int64_t *)perm, (size_t)rank);
    s4d_tensor out[1];
    char err[512];
    s4d_status st = run_op("Transpose", 13, 1, &x, 0, 1, out, perm ? 1 : 0, &at, pool, err);
    CHECK(st == S4D_OK, "Transpose: %s", err);
    if (st == S4D_OK) {
        int64_t p[8], istr[8], s = 1;
        for (int d = 0; d < rank; d++)
            p[d] = perm ? perm[d] : rank - 1 - d;
        for (int d = rank - 1; d >= 0; d--) {
            istr[d] = s;
            s *= dims[d];
        }
        for (int d = 0; d < rank; d++)
            CHECK(out->dims[d] == dims[p[d]], "Transpose dim %d", d);
        for (int64_t o = 0; o < n; o++) {
            int64_t rem = o, src = 0;
            for (int d = rank - 1; d >= 0; d--) {
                src += (rem % out->dims[d]) * istr[p[d]];
                rem /= out->dims[d];
            }
            if (memcmp((uint8_t *)out->data + o * (int64_t)es, (uint8_t *)x.data + src * (int64_t)es, es)) {
                CHECK(0, "Transpose rank %d element %lld wrong", rank, (long long)o);
                break;
            }
        }
    }
    tensor_free(out);
    tensor_free(&x);
}

void group_transpose(void)
{
    int64_t d2[] = {37, 129}, p2[] = {1, 0};
    check_transpose(2, d2, p2, S4D_DTYPE_FLOAT32, g_pool);
    check_transpose(2, d2, NULL, S4D_DTYPE_INT64, NULL);
    int64_t d3[] = {2, 3, 4}, perms3[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    for (int k = 0; k < 6; k++) {
        check_transpose(3, d3, perms3[k], S4D_DTYPE_FLOAT32, g_pool);
        check_transpose(3, d3, perms3[k], S4D_DTYPE_UINT8, NULL);
        check_transpose(3, d3, perms3[k], S4D_DTYPE_FLOAT16, g_pool);
    }
    int64_t d4[] = {2, 64, 9, 70}, p4[] = {0, 2, 3, 1}, p4b[] = {0, 3, 1, 2}, p4c[] = {2, 0, 1, 3};
    check_transpose(4, d4, p4, S4D_DTYPE_FLOAT32, g_pool);
    check_transpose(4, d4, p4b, S4D_DTYPE_FLOAT32, g_pool);
    check_transpose(4, d4, p4c, S4D_DTYPE_FLOAT64, g_pool);
    int64_t d5[] = {3, 1, 5, 2, 7}, p5[] = {4, 1, 3, 0, 2};
    check_transpose(5, d5, p5, S4D_DTYPE_BOOL, NULL);
    int64_t d6[] = {2, 3, 2, 2, 3, 2}, p6[] = {5, 3, 1, 0, 2, 4};
    check_transpose(6, d6, p6, S4D_DTYPE_INT32, g_pool);

    int64_t bad[] = {0, 0};
    s4d_attr at = attr_ints("perm", bad, 2);
    s4d_tensor x = tensor_new(S4D_DTYPE_FLOAT32, 2, d2), out[1];
    char err[512];
    CHECK(run_op("Transpose", 13, 1, &x, 0, 1, out, 1, &at, NULL, err) == S4D_ERR_SHAPE, "perm [0,0]: %s", err);
    at.count = 3;
    CHECK(run_op("Transpose", 13, 1, &x, 0, 1, out, 1, &at, NULL, err) == S4D_ERR_SHAPE, "perm of 3 on rank 2: %s",
          err);
    tensor_free(&x);
}

/* ---- Softmax / LogSoftmax ------------------------------------------------------------ */

static void check_softmax(const char *op, int opset, int rank, const int64_t *dims, int64_t axis, int has_axis)
{
    s4d_tensor x = tensor_new(S4D_DTYPE_FLOAT32, rank, dims);
    fill_random(&x, -8, 8);
    s4d_attr at = attr_int("axis", axis);
    s4d_tensor out[1];
    char err[512];
    s4d_status st = run_op(op, opset, 1, &x, 0, 1, out, has_axis, &at, g_pool, err);
    CHECK(st == S4D_OK, "%s: %s", op, err);
    if (st == S4D_OK) {
        int64_t a = has_axis ? axis : (opset >= 13 ? -1 : 1);
        if (a < 0)
            a += rank;
        int64_t outer = 1, nn = 1, inner = 1;
        for (int d = 0; d < rank; d++) {
            if (d < a)
                outer *= dims[d];
            else if (d == a || opset < 13)
                nn *= dims[d];
            else
                inner *= dims[d];
        }
        int64_t total = s4d_tensor_numel(&x);
        double *ref = malloc(sizeof(double) * (size_t)total);
        const float *xv = x.data;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t k = 0; k < nn; k++)
                    mx = fmax(mx, xv[(o * nn + k) * inner + i]);
                for (int64_t k = 0; k < nn; k++)
                    sum += exp(xv[(o * nn + k) * inner + i] - mx);
                for (int64_t k = 0; k < nn; k++) {
                    double v = xv[(o * nn + k) * inner + i] - mx;
                    ref[(o * nn + k) * inner + i] = !strcmp(op, "Softmax") ? exp(v) / sum : v - log(sum);
                }
            }
        char what[80];
        snprintf(what, sizeof(what), "%s opset %d rank %d axis %lld", op, opset, rank, (long long)a);
        close_f32(out->data, ref, total, 1e-5, 1e-6, what);
        free(ref);
    }
    tensor_free(out);
    tensor_free(&x);
}

void group_softmax(void)
{
    int64_t d3[] = {3, 17, 5}, d4[] = {2, 3, 4, 900};
    const char *ops[] = {"Softmax", "LogSoftmax"};
    for (int k = 0; k < 2; k++) {
        for (int a = -3; a < 3; a++)
            check_softmax(ops[k], 13, 3, d3, a, 1);
        check_softmax(ops[k], 13, 3, d3, 0, 0);
        check_softmax(ops[k], 11, 3, d3, 0, 0);
        check_softmax(ops[k], 11, 3, d3, 2, 1);
        check_softmax(ops[k], 11, 3, d3, -1, 1);
        check_softmax(ops[k], 11, 3, d3, 0, 1);
        check_softmax(ops[k], 13, 4, d4, -1, 1);
        check_softmax(ops[k], 13, 4, d4, 1, 1);
    }
    /* Large logits stay finite. */
    int64_t d[] = {2, 3};
    s4d_tensor x = tensor_new(S4D_DTYPE_FLOAT32, 2, d), out[1];
    float big[] = {1000, 1001, 1002, -1000, -1001, -1002};
    memcpy(x.data, big, sizeof(big));
    char err[512];
    CHECK(run_op("Softmax", 13, 1, &x, 0, 1, out, 0, NULL, NULL, err) == S4D_OK, "Softmax: %s", err);
    double e = exp(-1) + exp(-2) + 1;
    double ref[] = {exp(-2) / e, exp(-1) / e, 1 / e, 1 / e, exp(-1) / e, exp(-2) / e};
    close_f32(out->data, ref, 6, 1e-6, 1e-7, "Softmax large logits");
    tensor_free(out);
    /* LogSoftmax near 1e4: subtracting the max first keeps the result exact to float. */
    float near[] = {10000, 10001, 10002, 10003, 10004, 10005};
    memcpy(x.data, near, sizeof(near));
    CHECK(run_op("LogSoftmax", 13, 1, &x, 0, 1, out, 0, NULL, NULL, err) == S4D_OK, "LogSoftmax: %s", err);
    double ls = log(exp(-2) + exp(-1) + 1);
    double lref[] = {-2 - ls, -1 - ls, -ls, -2 - ls, -1 - ls, -ls};
    close_f32(out->data, lref, 6, 1e-6, 1e-6, "LogSoftmax near 1e4");
    tensor_free(out);
    s4d_attr at = attr_int("axis", 2);
    CHECK(run_op("Softmax", 13, 1, &x, 0, 1, out, 1, &at, NULL, err) == S4D_ERR_SHAPE, "axis 2 on rank 2: %s", err);
    tensor_free(&x);
    s4d_tensor xi = tensor_new(S4D_DTYPE_INT64, 2, d);
    CHECK(run_op("Softmax", 13, 1, &xi, 0, 1, out, 0, NULL, NULL, err) == S4D_ERR_DTYPE && strstr(err, "input 0"),
          "Softmax int64: %s", err);
    tensor_free(&xi);
}

/* ---- main ----------------------------------------------------------------------------- */

static const struct {
    const char *name;
    void (*fn)(void);
} groups[] = {
    {"threadpool", group_threadpool}, {"binary", group_binary},       {"variadic", group_variadic},
    {"unary", group_unary},           {"reshape", group_reshape},     {"transpose", group_transpose},
    {"softmax", group_softmax},       {"reduce", group_reduce},       {"concat_split", group_concat_split},
    {"slice", group_slice},           {"gather", group_gather},       {"scatter", group_scatter},
    {"expand_tile", group_expand_tile}, {"shape_ops", group_shape_ops}, {"where_cast", group_where_cast},
    {"errors", group_errors},         {"extra", group_extra},
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <group>\n", argv[0]);
        return 2;
    }
    if (s4d_threadpool_create(3, &g_pool) != S4D_OK) {
        fprintf(stderr, "cannot create a thread pool\n");
        return 1;
    }
    int found = 0;
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
        if (!strcmp(groups[i].name, argv[1])) {
            groups[i].fn();
            found = 1;
        }
    s4d_threadpool_destroy(g_pool);
    if (!found) {
        fprintf(stderr, "unknown group '%s'\n", argv[1]);
        return 2;
    }
    if (g_failures) {
        fprintf(stderr, "%s: %d failure(s)\n", argv[1], g_failures);
        return 1;
    }
    printf("%s: ok\n", argv[1]);
    return 0;
}
