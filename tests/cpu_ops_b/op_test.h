/*
 * Test support for the dense CPU ops: build an op context, run infer + run
 * through s4d_op_find_schema, compare against double-precision references.
 * Header-only so that each test program stays one file.
 */
#ifndef S4D_TEST_CPU_OPS_B_OP_TEST_H
#define S4D_TEST_CPU_OPS_B_OP_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "util/threadpool.h"

static int t_failures;
static int t_checks;

#define T_CHECK(cond, ...)                                                                         \
    do {                                                                                           \
        t_checks++;                                                                                \
        if (!(cond)) {                                                                             \
            t_failures++;                                                                          \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* Ops run on a 3-thread pool so that the threaded paths are exercised. */
static s4d_threadpool *t_pool;

static inline int t_finish(const char *name)
{
    s4d_threadpool_destroy(t_pool);
    t_pool = NULL;
    printf("%s: %d checks, %d failures\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

/* xorshift64*: reproducible inputs without libc rand's platform differences. */
static uint64_t t_rng_state = 0x9E3779B97F4A7C15ULL;
static inline double t_uniform(void)
{
    t_rng_state ^= t_rng_state >> 12;
    t_rng_state ^= t_rng_state << 25;
    t_rng_state ^= t_rng_state >> 27;
    return (double)((t_rng_state * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}
/* Uniform in [lo, hi], never exactly zero. */
static inline float t_randf(float lo, float hi)
{
    float v;
    do
        v = (float)(lo + (hi - lo) * t_uniform());
    while (v == 0.0f);
    return v;
}

static inline float *t_rand_buf(int64_t n, float lo, float hi)
{
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++)
        p[i] = t_randf(lo, hi);
    return p;
}

static inline s4d_tensor t_tensor(s4d_dtype dt, void *data, int rank, const int64_t *dims)
{
    s4d_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.rank = rank;
    for (int i = 0; i < rank; i++)
        t.dims[i] = dims[i];
    t.data = data;
    return t;
}

static inline s4d_tensor t_missing(void)
{
    s4d_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = S4D_DTYPE_UNDEFINED;
    t.rank = -1;
    return t;
}

static inline s4d_attr t_attr_int(const char *name, int64_t v)
{
    s4d_attr a;
    memset(&a, 0, sizeof a);
    a.name = (char *)name;
    a.type = S4D_ATTR_INT;
    a.i = v;
    return a;
}
static inline s4d_attr t_attr_float(const char *name, float v)
{
    s4d_attr a;
    memset(&a, 0, sizeof a);
    a.name = (char *)name;
    a.type = S4D_ATTR_FLOAT;
    a.f = v;
    return a;
}
static inline s4d_attr t_attr_ints(const char *name, int64_t *v, size_t n)
{
    s4d_attr a;
    memset(&a, 0, sizeof a);
    a.name = (char *)name;
    a.type = S4D_ATTR_INTS;
    a.ints = v;
    a.count = n;
    return a;
}
static inline s4d_attr t_attr_string(const char *name, const char *s)
{
    s4d_attr a;
    memset(&a, 0, sizeof a);
    a.name = (char *)name;
    a.type = S4D_ATTR_STRING;
    a.s = (char *)s;
    a.s_len = strlen(s);
    return a;
}

static char t_err[512];
/* Domain t_run_op looks ops up in ("" = ONNX; "s4d" for the fused kernels). */
static const char *t_domain = "";
/* Bit i set: input i is a constant whose data infer may read. */
static unsigned t_const_mask;

/*
 * Runs op_type at opset: infer, then (when infer succeeds and run_it) allocate
 * outputs (caller frees outputs[i].data) and a workspace, then run. Returns
 * the first failing status; the message is in t_err.
 */
static inline s4d_status t_run_op(const char *op_type, int opset, s4d_tensor *inputs, int num_inputs,
                           const s4d_attr *attrs, int num_attrs, s4d_tensor *outputs, int num_outputs)
{
    t_err[0] = '\0';
    const s4d_op_schema *def = s4d_op_find_schema(t_domain, op_type, opset);
    if (!def) {
        snprintf(t_err, sizeof t_err, "no CPU op %s at opset %d", op_type, opset);
        return S4D_ERR_NOT_FOUND;
    }
    s4d_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.node_name = "test";
    ctx.op_type = op_type;
    ctx.opset = opset;
    ctx.num_attrs = num_attrs;
    ctx.attrs = attrs;
    ctx.num_inputs = num_inputs;
    ctx.inputs = inputs;
    ctx.num_outputs = num_outputs;
    ctx.outputs = outputs;
    ctx.err = t_err;
    ctx.err_size = sizeof t_err;
    if (!t_pool && s4d_threadpool_create(3, &t_pool) != S4D_OK)
        t_pool = NULL;
    /* Infer sees no data for non-constant inputs, as in the builder. */
    void *saved[16];
    for (int i = 0; i < num_inputs; i++) {
        saved[i] = inputs[i].data;
        if (!(t_const_mask & (1u << i)))
            inputs[i].data = NULL;
    }
    for (int i = 0; i < num_outputs; i++) {
        memset(&outputs[i], 0, sizeof outputs[i]);
        outputs[i].rank = -1;
    }
    s4d_status st = def->infer(&ctx);
    for (int i = 0; i < num_inputs; i++)
        inputs[i].data = saved[i];
    if (st != S4D_OK)
        return st;
    for (int i = 0; i < num_outputs; i++) {
        size_t bytes = (size_t)s4d_tensor_numel(&outputs[i]) * s4d_dtype_size(outputs[i].dtype);
        outputs[i].data = malloc(bytes ? bytes : 1);
        /* Poison so that untouched outputs fail the comparison. */
        memset(outputs[i].data, 0x7f, bytes);
    }
    size_t ws = def->workspace_size ? def->workspace_size(&ctx) : 0;
    void *wsp = NULL;
    if (ws) {
        wsp = aligned_alloc(64, (ws + 63) / 64 * 64);
        ctx.workspace = wsp;
        ctx.workspace_size = ws;
    }
    ctx.pool = t_pool;
    st = def->run(&ctx);
    free(wsp);
    return st;
}

static inline void t_free_outputs(s4d_tensor *outputs, int n)
{
    for (int i = 0; i < n; i++) {
        free(outputs[i].data);
        outputs[i].data = NULL;
    }
}

/* Max over i of |got - want| / (atol + rtol |want|); <= 1 passes. */
static inline double t_err_ratio(const float *got, const double *want, int64_t n, double atol, double rtol)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]) / (atol + rtol * fabs(want[i]));
        if (!(e <= worst))
            worst = e; /* NaN propagates as a failure */
    }
    return worst;
}

#define T_CLOSE(got, want, n, atol, rtol, ...)                                                     \
    do {                                                                                           \
        double r_ = t_err_ratio((got), (want), (n), (atol), (rtol));                               \
        T_CHECK(r_ <= 1.0, __VA_ARGS__);                                                           \
        if (!(r_ <= 1.0))                                                                          \
            fprintf(stderr, "  worst error ratio %g\n", r_);                                       \
    } while (0)

#define T_EXPECT_FAIL(status, want, ...)                                                           \
    do {                                                                                           \
        T_CHECK((status) == (want), __VA_ARGS__);                                                  \
        T_CHECK(t_err[0] != '\0', "error message set");                                            \
    } while (0)

#endif
