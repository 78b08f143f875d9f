/*
 * The deformable aggregation plugin loaded from libs4d_plugins.so: build-time
 * checks, enqueue against s4d_da_forward_cpu and a float64 reference
 * (da_problem.h), the alias creator, and serialize -> deserialize -> same output.
 * Usage: test_plugin_da <libs4d_plugins.so>
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "da_problem.h"
#include "registry/registry.h"
#include "s4d/deformable_aggregation.h"

static s4d_attr attr_s(const char *name, const char *v)
{
    s4d_attr a = {.name = (char *)name, .type = S4D_ATTR_STRING, .s = (char *)v, .s_len = strlen(v)};
    return a;
}

static s4d_plugin *create(s4d_plugin_registry *r, const char *domain, const char *op,
                          const s4d_attr *attrs, int n)
{
    char err[1024];
    s4d_plugin *p = NULL;
    s4d_status st = s4d_registry_create_plugin(r, "da", domain, op, attrs, n, &p, NULL, err, sizeof(err));
    if (st != S4D_OK)
        fprintf(stderr, "create %s::%s failed: %s\n", domain, op, err);
    return p;
}


/* ---- tests ------------------------------------------------------------------------------ */

static void test_build_phase(s4d_plugin *p, problem *pb)
{
    s4d_plugin_tensor_desc in[5], out[1];
    s4d_errbuf err;
    input_descs(pb, in);
    memset(out, 0, sizeof(out));
    out[0].abi_version = S4D_PLUGIN_ABI_VERSION;
    out[0].struct_size = sizeof(out[0]);
    CHECK(p->num_outputs(p) == 1);
    CHECK_STATUS(p->get_output_descs(p, in, 5, out, 1, &err), S4D_OK);
    CHECK(out[0].dtype == S4D_DTYPE_FLOAT32 && out[0].rank == 3 && out[0].dims[0] == BS &&
          out[0].dims[1] == NA && out[0].dims[2] == C);
    CHECK_STATUS(p->supports(p, in, 5, out, 1, &err), S4D_OK);
    /* CPU: the pooled forward's scratch (int32 indices need no narrowing). */
    CHECK(p->workspace_size(p, in, 5, out, 1) == sizeof(float) * 2 * C * (BS * NA < 64 ? BS * NA : 64));

    /* Every tensor on the GPU: supported only by a CUDA build. */
    s4d_plugin_tensor_desc gin[5], gout[1] = {out[0]};
    for (int i = 0; i < 5; i++) {
        gin[i] = in[i];
        gin[i].device = S4D_DEVICE_CUDA;
    }
    gout[0].device = S4D_DEVICE_CUDA;
#if defined(S4D_HAVE_CUDA)
    CHECK_STATUS(p->supports(p, gin, 5, gout, 1, &err), S4D_OK);
#else
    CHECK_STATUS(p->supports(p, gin, 5, gout, 1, &err), S4D_ERR_UNSUPPORTED);
    CHECK_MSG(err.msg, "built without CUDA");
#endif
    /* Mixed devices are refused, naming the input. */
    gin[3].device = S4D_DEVICE_CPU;
    CHECK_STATUS(p->supports(p, gin, 5, gout, 1, &err), S4D_ERR_UNSUPPORTED);
    CHECK_MSG(err.msg, "input 3 (sampling_location) is on cpu", "output is on cuda");

    /* fp16 features give an fp16 output. */
    s4d_plugin_tensor_desc h[5];
    input_descs(pb, h);
    h[0].dtype = S4D_DTYPE_FLOAT16;
    h[4].dtype = S4D_DTYPE_FLOAT16;
    CHECK_STATUS(p->get_output_descs(p, h, 5, out, 1, &err), S4D_OK);
    CHECK(out[0].dtype == S4D_DTYPE_FLOAT16);
    CHECK_STATUS(p->supports(p, h, 5, out, 1, &err), S4D_OK);
    out[0].dtype = S4D_DTYPE_INT8;
    CHECK_STATUS(p->supports(p, h, 5, out, 1, &err), S4D_ERR_DTYPE);
    CHECK_MSG(err.msg, "output 0", "int8");
}

static void test_bad_descs(s4d_plugin *p, problem *pb)
{
    s4d_plugin_tensor_desc in[5], out[1];
    s4d_errbuf err;
    memset(out, 0, sizeof(out));
#define EXPECT_BAD(mutate, want, ...)                                                  \
    do {                                                                               \
        input_descs(pb, in);                                                           \
        mutate;                                                                        \
        err.msg[0] = '\0';                                                             \
        CHECK_STATUS(p->get_output_descs(p, in, 5, out, 1, &err), want);               \
        CHECK_MSG(err.msg, __VA_ARGS__);                                               \
    } while (0)
    EXPECT_BAD(in[0].rank = 2, S4D_ERR_SHAPE, "input 0 (features)", "expected rank 3",
               "got rank 2");
    EXPECT_BAD(in[3].dims[3] = NC + 1, S4D_ERR_SHAPE, "input 3 (sampling_location)",
               "dim 3 must equal N from spatial_shape = 3, got 4");
    EXPECT_BAD(in[4].dims[0] = BS + 1, S4D_ERR_SHAPE, "input 4 (weights)", "bs from features");
    EXPECT_BAD(in[4].dims[4] = NL + 1, S4D_ERR_SHAPE, "input 4 (weights)", "L from spatial_shape");
    EXPECT_BAD(in[2].dims[1] = NL + 1, S4D_ERR_SHAPE, "input 2 (scale_start_index)");
    EXPECT_BAD(in[1].dims[2] = 3, S4D_ERR_SHAPE, "input 1 (spatial_shape)", "2 (H, W)");
    EXPECT_BAD(in[4].dims[5] = 3, S4D_ERR_SHAPE, "groups G = 3", "channels C = 16");
    EXPECT_BAD(in[4].dims[5] = 0, S4D_ERR_SHAPE, "groups G = 0");
    EXPECT_BAD(in[3].dims[1] = -1, S4D_ERR_SHAPE, "input 3 (sampling_location): dim 1 is negative");
    EXPECT_BAD(in[1].dtype = S4D_DTYPE_INT16, S4D_ERR_DTYPE, "input 1 (spatial_shape)",
               "dtype int16", "int32 or int64");
    EXPECT_BAD(in[2].dtype = S4D_DTYPE_FLOAT32, S4D_ERR_DTYPE, "input 2 (scale_start_index)");
    EXPECT_BAD(in[0].dtype = S4D_DTYPE_FLOAT64, S4D_ERR_DTYPE, "input 0 (features)",
               "float64", "float32 or float16");
    EXPECT_BAD(in[3].dtype = S4D_DTYPE_FLOAT16, S4D_ERR_DTYPE, "input 3 (sampling_location)",
               "expected float32");
    EXPECT_BAD(in[2].struct_size = 4, S4D_ERR_INVALID_ARG, "input 2", "malformed descriptor");
#undef EXPECT_BAD
    input_descs(pb, in);
    CHECK_STATUS(p->get_output_descs(p, in, 4, out, 1, &err), S4D_ERR_INVALID_ARG);
    CHECK_MSG(err.msg, "expected 5 inputs", "got 4");
    CHECK_STATUS(p->get_output_descs(p, in, 5, out, 2, &err), S4D_ERR_INVALID_ARG);
    CHECK_MSG(err.msg, "expected 1 output");
}

static void compare(const float *got, const double *ref, const char *what)
{
    double max_err = 0.0;
    int nonzero = 0;
    for (int i = 0; i < OUT_N; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= 1e-4 + 1e-5 * fabs(ref[i])))
            max_err = e > max_err || isnan(e) ? (isnan(e) ? INFINITY : e) : max_err;
        nonzero += ref[i] != 0.0;
    }
    if (max_err > 0.0)
        fprintf(stderr, "%s: max abs error %g vs float64 reference\n", what, max_err);
    CHECK(max_err == 0.0);
    CHECK(nonzero > OUT_N / 2); /* the problem is not degenerate */
}

typedef struct thread_job {
    const s4d_plugin *p;
    problem *pb;
    float out[OUT_N];
    s4d_status st;
} thread_job;

static void *thread_main(void *arg)
{
    thread_job *j = arg;
    for (int k = 0; k < 5 && j->st == S4D_OK; k++)
        j->st = enqueue(j->p, j->pb, j->out, 1, NULL);
    return NULL;
}

static void test_enqueue(s4d_plugin_registry *r, s4d_plugin *p, problem *pb)
{
    static float out[OUT_N], direct[OUT_N], alias_out[OUT_N], one[OUT_N];
    static double ref[OUT_N];
    s4d_errbuf err;
    for (int i = 0; i < OUT_N; i++)
        out[i] = direct[i] = alias_out[i] = NAN; /* every element must be written */
    CHECK_STATUS(enqueue(p, pb, out, 0, &err), S4D_OK);

    s4d_da_forward_args a;
    memset(&a, 0, sizeof(a));
    a.struct_size = sizeof(a);
    a.sizes.struct_size = sizeof(a.sizes);
    a.sizes.batch = BS;
    a.sizes.num_rows = pb->F;
    a.sizes.channels = C;
    a.sizes.num_cams = NC;
    a.sizes.num_levels = NL;
    a.sizes.num_groups = G;
    a.sizes.num_anchors = NA;
    a.sizes.num_points = NP;
    a.features_dtype = a.weights_dtype = a.output_dtype = S4D_DTYPE_FLOAT32;
    a.features = pb->feat;
    a.spatial_shape = pb->shape;
    a.scale_start_index = pb->start;
    a.sampling_location = pb->loc;
    a.weights = pb->w;
    a.output = direct;
    CHECK_STATUS(s4d_da_forward_cpu(&a, 0, &err), S4D_OK);
    CHECK(memcmp(out, direct, sizeof(out)) == 0);

    reference(pb, ref);
    compare(out, ref, "plugin enqueue");

    CHECK_STATUS(enqueue(p, pb, one, 1, &err), S4D_OK);
    CHECK(memcmp(out, one, sizeof(out)) == 0);

    /* The alias creator (no attributes) computes the same function. */
    s4d_plugin *alias = create(r, "custom", "DeformableAttentionAggrPlugin", NULL, 0);
    CHECK(alias != NULL);
    if (alias) {
        CHECK_STATUS(enqueue(alias, pb, alias_out, 0, &err), S4D_OK);
        CHECK(memcmp(out, alias_out, sizeof(out)) == 0);
        alias->destroy(alias);
    }
    /* ... also when the node's domain is empty and plugin_namespace names it. */
    s4d_attr ns[] = {attr_s("plugin_namespace", "custom")};
    alias = create(r, "", "DeformableAttentionAggrPlugin", ns, 1);
    CHECK(alias != NULL);
    if (alias)
        alias->destroy(alias);

    /* Several contexts share one instance: enqueue is reentrant. */
    static thread_job jobs[3];
    pthread_t th[3];
    for (int t = 0; t < 3; t++) {
        jobs[t].p = p;
        jobs[t].pb = pb;
        jobs[t].st = S4D_OK;
        CHECK(pthread_create(&th[t], NULL, thread_main, &jobs[t]) == 0);
    }
    for (int t = 0; t < 3; t++) {
        pthread_join(th[t], NULL);
        CHECK(jobs[t].st == S4D_OK);
        CHECK(memcmp(jobs[t].out, out, sizeof(out)) == 0);
    }

    /* Run-time misuse is refused, not run. */
    s4d_plugin_tensor in[5], o;
    run_tensors(pb, out, in, &o);
    s4d_plugin_run_info run = cpu_run(1);
    o.desc.dims[1] = NA + 1;
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_ERR_SHAPE);
    CHECK_MSG(err.msg, "output 0 must be [2, 7, 16]");
    run_tensors(pb, out, in, &o);
    in[3].data = NULL;
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_ERR_INVALID_ARG);
    CHECK_MSG(err.msg, "input 3 (sampling_location) has no data");
    run_tensors(pb, out, in, &o);
    run.device = S4D_DEVICE_CUDA;
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_ERR_INVALID_ARG);
    CHECK_MSG(err.msg, "input 0 (features) is on cpu, the node runs on cuda");
    /* Index contents outside the features rows: the op library's check speaks. */
    run = cpu_run(1);
    int32_t saved = pb->start[NC * NL - 1];
    pb->start[NC * NL - 1] = (int32_t)pb->F;
    CHECK(enqueue(p, pb, out, 1, &err) != S4D_OK);
    pb->start[NC * NL - 1] = saved;
}

/* The host's parallel for, run chunk by chunk in reverse so that order cannot matter. */
static void reverse_parallel_for(void *pool, int64_t n, int64_t grain, s4d_plugin_range_fn fn,
                                 void *arg)
{
    (void)grain;
    CHECK(pool == (void *)&reverse_parallel_for);
    for (int64_t i = n - 1; i >= 0; i--)
        fn(arg, i, i + 1);
}

/* ABI 2 hosts: the CPU forward runs on the host's pool in the workspace, same bits. */
static void test_pooled(s4d_plugin *p, problem *pb)
{
    static float out[OUT_N], pooled[OUT_N];
    s4d_errbuf err;
    CHECK_STATUS(enqueue(p, pb, out, 1, &err), S4D_OK);
    for (int i = 0; i < OUT_N; i++)
        pooled[i] = NAN;
    s4d_plugin_tensor in[5], o;
    run_tensors(pb, pooled, in, &o);
    s4d_plugin_tensor_desc d[5];
    for (int i = 0; i < 5; i++)
        d[i] = in[i].desc;
    size_t ws = p->workspace_size(p, d, 5, &o.desc, 1);
    float *scratch = aligned_alloc(64, (ws + 63) / 64 * 64);
    s4d_plugin_run_info run = cpu_run(1);
    run.parallel_for = reverse_parallel_for;
    run.thread_pool = (void *)&reverse_parallel_for;
    run.workspace = scratch;
    run.workspace_size = ws - 1;
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_ERR_INVALID_ARG);
    CHECK_MSG(err.msg, "workspace of");
    run.workspace_size = ws;
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_OK);
    CHECK(memcmp(out, pooled, sizeof(out)) == 0);
    free(scratch);
}

/* int64 indices: narrowed into the workspace on the CPU, refused for CUDA. */
static void test_int64_indices(s4d_plugin *p, problem *pb)
{
    static float out32[OUT_N], out64[OUT_N];
    s4d_errbuf err;
    CHECK_STATUS(enqueue(p, pb, out32, 1, &err), S4D_OK);

    int64_t shape64[NC * NL * 2], start64[NC * NL];
    for (int i = 0; i < NC * NL * 2; i++)
        shape64[i] = pb->shape[i];
    for (int i = 0; i < NC * NL; i++)
        start64[i] = pb->start[i];
    s4d_plugin_tensor in[5], o;
    run_tensors(pb, out64, in, &o);
    in[1].desc.dtype = in[2].desc.dtype = S4D_DTYPE_INT64;
    in[1].data = shape64;
    in[2].data = start64;
    s4d_plugin_tensor_desc d[5], od = o.desc;
    for (int i = 0; i < 5; i++)
        d[i] = in[i].desc;
    CHECK_STATUS(p->get_output_descs(p, d, 5, &od, 1, &err), S4D_OK);
    CHECK_STATUS(p->supports(p, d, 5, &od, 1, &err), S4D_OK);
    size_t ws = p->workspace_size(p, d, 5, &od, 1);
    size_t narrow_ws = sizeof(int32_t) * NC * NL * 3;
    CHECK(ws == ((narrow_ws + 63) & ~(size_t)63) + sizeof(float) * 2 * C * (BS * NA < 64 ? BS * NA : 64));
    int32_t scratch[NC * NL * 3];
    s4d_plugin_run_info run = cpu_run(1);
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_ERR_INVALID_ARG);
    CHECK_MSG(err.msg, "workspace of 0 bytes, need 72");
    run.workspace = scratch;
    run.workspace_size = sizeof(scratch);
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_OK);
    CHECK(memcmp(out32, out64, sizeof(out32)) == 0);
    start64[1] = (int64_t)1 << 40;
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_ERR_SHAPE);
    CHECK_MSG(err.msg, "input 2 (scale_start_index): element 1 = 1099511627776 does not fit int32");

    for (int i = 0; i < 5; i++)
        d[i].device = S4D_DEVICE_CUDA;
    od.device = S4D_DEVICE_CUDA;
#if defined(S4D_HAVE_CUDA)
    CHECK_STATUS(p->supports(p, d, 5, &od, 1, &err), S4D_ERR_DTYPE);
    CHECK_MSG(err.msg, "input 1 (spatial_shape): int64 indices run on the cpu only");
#else
    CHECK_STATUS(p->supports(p, d, 5, &od, 1, &err), S4D_ERR_UNSUPPORTED);
#endif
}

static void test_serialize(s4d_plugin_registry *r, s4d_plugin *p, problem *pb)
{
    static float out[OUT_N], again[OUT_N];
    char err[1024];
    s4d_errbuf perr;
    size_t n = p->serialize_size(p);
    unsigned char buf[64], buf2[64];
    CHECK(n > 0 && n <= sizeof(buf));
    if (n == 0 || n > sizeof(buf))
        return;
    CHECK_STATUS(p->serialize(p, buf, n, &perr), S4D_OK);
    CHECK_STATUS(p->serialize(p, buf, n - 1, &perr), S4D_ERR_INVALID_ARG);
    s4d_plugin *q = NULL;
    CHECK_STATUS(s4d_registry_deserialize(r, "da", "s4d", "DeformableAggregation", "1", buf, n, &q,
                                          NULL, err, sizeof(err)),
                 S4D_OK);
    CHECK(q != NULL);
    if (q) {
        CHECK_STATUS(enqueue(p, pb, out, 0, &perr), S4D_OK);
        CHECK_STATUS(enqueue(q, pb, again, 0, &perr), S4D_OK);
        CHECK(memcmp(out, again, sizeof(out)) == 0);
        CHECK(q->serialize_size(q) == n);
        CHECK_STATUS(q->serialize(q, buf2, n, &perr), S4D_OK);
        CHECK(memcmp(buf, buf2, n) == 0);
        q->destroy(q);
    }

    /* The deterministic field survives the round trip. */
    s4d_attr det[] = {{.name = "deterministic", .type = S4D_ATTR_INT, .i = 1}};
    s4d_plugin *d = create(r, "s4d", "DeformableAggregation", det, 1);
    CHECK(d != NULL);
    if (d) {
        CHECK_STATUS(d->serialize(d, buf2, n, &perr), S4D_OK);
        CHECK(memcmp(buf, buf2, n) != 0);
        CHECK_STATUS(s4d_registry_deserialize(r, "da", "s4d", "DeformableAggregation", "1", buf2, n,
                                              &q, NULL, err, sizeof(err)),
                     S4D_OK);
        if (q) {
            unsigned char buf3[64];
            CHECK_STATUS(q->serialize(q, buf3, n, &perr), S4D_OK);
            CHECK(memcmp(buf2, buf3, n) == 0);
            q->destroy(q);
        }
        d->destroy(d);
    }

    /* Damaged payloads are refused with the reason. */
    CHECK_STATUS(s4d_registry_deserialize(r, "da", "s4d", "DeformableAggregation", "1", buf, n - 1,
                                          &q, NULL, err, sizeof(err)),
                 S4D_ERR_PLUGIN);
    CHECK_MSG(err, "node 'da'", "s4d::DeformableAggregation v1", "payload is");
    memcpy(buf2, buf, n);
    buf2[0] ^= 0xff;
    CHECK_STATUS(s4d_registry_deserialize(r, "da", "s4d", "DeformableAggregation", "1", buf2, n, &q,
                                          NULL, err, sizeof(err)),
                 S4D_ERR_PLUGIN);
    CHECK_MSG(err, "does not start with 'S4DA'");
    memcpy(buf2, buf, n);
    buf2[4] = 9;
    CHECK_STATUS(s4d_registry_deserialize(r, "da", "s4d", "DeformableAggregation", "1", buf2, n, &q,
                                          NULL, err, sizeof(err)),
                 S4D_ERR_PLUGIN);
    CHECK_MSG(err, "payload version 9", "reads version 1");
    memcpy(buf2, buf, n);
    buf2[12] = 5;
    CHECK_STATUS(s4d_registry_deserialize(r, "da", "s4d", "DeformableAggregation", "1", buf2, n, &q,
                                          NULL, err, sizeof(err)),
                 S4D_ERR_PLUGIN);
    CHECK_MSG(err, "deterministic = 5");
    /* A payload of the s4d creator handed to the alias creator. */
    CHECK_STATUS(s4d_registry_deserialize(r, "da", "custom", "DeformableAttentionAggrPlugin", "1",
                                          buf, n, &q, NULL, err, sizeof(err)),
                 S4D_ERR_PLUGIN);
    CHECK_MSG(err, "variant");
    CHECK(q == NULL);
}

static void test_node_errors(s4d_plugin_registry *r)
{
    char err[1024];
    s4d_plugin *p = NULL;
    s4d_attr unknown[] = {attr_s("plugin_version", "1"), attr_s("im2col_step", "64")};
    CHECK_STATUS(s4d_registry_create_plugin(r, "agg0", "s4d", "DeformableAggregation", unknown, 2,
                                            &p, NULL, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'agg0'", "unknown attribute 'im2col_step'", "deterministic (int, optional)");
    s4d_attr alias_attr[] = {{.name = "deterministic", .type = S4D_ATTR_INT, .i = 1}};
    CHECK_STATUS(s4d_registry_create_plugin(r, "agg1", "custom", "DeformableAttentionAggrPlugin",
                                            alias_attr, 1, &p, NULL, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'agg1'", "unknown attribute 'deterministic'", "declared fields: none");
    s4d_attr wrong_type[] = {{.name = "deterministic", .type = S4D_ATTR_FLOAT, .f = 1.f}};
    CHECK_STATUS(s4d_registry_create_plugin(r, "agg2", "s4d", "DeformableAggregation", wrong_type, 1,
                                            &p, NULL, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "attribute 'deterministic' is float, the plugin declares int");
    s4d_attr bad_value[] = {{.name = "deterministic", .type = S4D_ATTR_INT, .i = 2}};
    CHECK_STATUS(s4d_registry_create_plugin(r, "agg3", "s4d", "DeformableAggregation", bad_value, 1,
                                            &p, NULL, err, sizeof(err)),
                 S4D_ERR_INVALID_ARG);
    CHECK_MSG(err, "node 'agg3'", "'deterministic' must be 0 or 1, got 2");
    s4d_attr v2[] = {attr_s("plugin_version", "2")};
    CHECK_STATUS(s4d_registry_create_plugin(r, "agg4", "s4d", "DeformableAggregation", v2, 1, &p,
                                            NULL, err, sizeof(err)),
                 S4D_ERR_NOT_FOUND);
    CHECK_MSG(err, "node 'agg4'", "version '2'", "registered with version '1'",
              "s4d::DeformableAggregation v1", "custom::DeformableAttentionAggrPlugin v1");
    /* The alias under the wrong namespace (the node's empty domain). */
    CHECK_STATUS(s4d_registry_create_plugin(r, "agg5", "", "DeformableAttentionAggrPlugin", NULL, 0,
                                            &p, NULL, err, sizeof(err)),
                 S4D_ERR_NOT_FOUND);
    CHECK_MSG(err, "namespace differs", "namespace 'custom'");
    CHECK(p == NULL);
}

/*
 * ABI 2 negotiation, position by position: features, weights and the output
 * take float16 and float32, the output the dtype of features; locations
 * float32 only; indices int32 (int64 on the CPU); everything linear.
 */
static void test_supports_format(s4d_plugin *p, problem *pb)
{
    CHECK(p->supports_format != NULL);
    if (!p->supports_format)
        return;
    s4d_plugin_tensor_desc d[6];
    input_descs(pb, d);
    int64_t od[] = {BS, NA, C};
    d[5] = desc(S4D_DTYPE_FLOAT32, 3, od);
    for (int pos = 0; pos < 6; pos++)
        CHECK_STATUS(p->supports_format(p, pos, d, 5, 1), S4D_OK);
    d[0].dtype = d[4].dtype = d[5].dtype = S4D_DTYPE_FLOAT16;
    for (int pos = 0; pos < 6; pos++)
        CHECK_STATUS(p->supports_format(p, pos, d, 5, 1), S4D_OK);
    d[5].dtype = S4D_DTYPE_FLOAT32; /* the output follows features */
    CHECK_STATUS(p->supports_format(p, 5, d, 5, 1), S4D_ERR_DTYPE);
    d[5].dtype = S4D_DTYPE_FLOAT16;
    d[3].dtype = S4D_DTYPE_FLOAT16; /* locations stay float32 */
    CHECK_STATUS(p->supports_format(p, 3, d, 5, 1), S4D_ERR_DTYPE);
    d[3].dtype = S4D_DTYPE_FLOAT32;
    d[4].dtype = S4D_DTYPE_FLOAT64;
    CHECK_STATUS(p->supports_format(p, 4, d, 5, 1), S4D_ERR_DTYPE);
    d[4].dtype = S4D_DTYPE_FLOAT16;
    d[1].dtype = S4D_DTYPE_INT64; /* narrowed on the CPU */
    CHECK_STATUS(p->supports_format(p, 1, d, 5, 1), S4D_OK);
    d[1].dtype = S4D_DTYPE_INT32;
    d[0].format = S4D_FORMAT_NHWC;
    CHECK_STATUS(p->supports_format(p, 0, d, 5, 1), S4D_ERR_UNSUPPORTED);
    d[0].format = S4D_FORMAT_LINEAR;
    d[2].device = S4D_DEVICE_CUDA; /* mixed devices */
    CHECK_STATUS(p->supports_format(p, 2, d, 5, 1), S4D_ERR_UNSUPPORTED);
    CHECK_STATUS(p->supports_format(p, 6, d, 5, 1), S4D_ERR_INVALID_ARG);
    CHECK_STATUS(p->supports_format(p, 0, d, 4, 1), S4D_ERR_INVALID_ARG);
}

/* The CPU path in float16 (features, weights, output) against float64 on the same rounded values. */
static void test_half_cpu(s4d_plugin *p, problem *pb)
{
    static problem r;
    static uint16_t feat16[BS * 512 * C], w16[sizeof(pb->w) / sizeof(float)], out16[OUT_N];
    static double ref[OUT_N];
    const int64_t nf = BS * pb->F * C, nw = (int64_t)(sizeof(pb->w) / sizeof(float));
    CHECK(nf <= (int64_t)(sizeof(feat16) / sizeof(feat16[0])));
    if (nf > (int64_t)(sizeof(feat16) / sizeof(feat16[0])))
        return;
    r = *pb;
    r.feat = malloc(sizeof(float) * (size_t)nf);
    for (int64_t i = 0; i < nf; i++) {
        feat16[i] = f32_to_f16(pb->feat[i]);
        r.feat[i] = f16_to_f32(feat16[i]);
    }
    for (int64_t i = 0; i < nw; i++) {
        w16[i] = f32_to_f16(pb->w[i]);
        r.w[i] = f16_to_f32(w16[i]);
    }
    reference(&r, ref);
    s4d_plugin_tensor in[5], o;
    run_tensors(pb, NULL, in, &o);
    in[0].desc.dtype = in[4].desc.dtype = o.desc.dtype = S4D_DTYPE_FLOAT16;
    in[0].data = feat16;
    in[4].data = w16;
    o.data = out16;
    s4d_plugin_run_info run = cpu_run(2);
    s4d_errbuf err;
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_OK);
    /* float32 accumulation, one rounding of the result to half: 2^-11 relative, plus slack. */
    double worst = 0.0;
    for (int i = 0; i < OUT_N; i++) {
        double e = fabs((double)f16_to_f32(out16[i]) - ref[i]), lim = 1e-3 * fabs(ref[i]) + 1e-4;
        worst = e / lim > worst ? e / lim : worst;
        if (!(e <= lim))
            break;
    }
    printf("float16 cpu enqueue: worst error / tolerance %g\n", worst);
    CHECK(worst <= 1.0);
    free(r.feat);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBS4D_PLUGINS_SO\n", argv[0]);
        return 2;
    }
    s4d_plugin_registry *r = NULL;
    CHECK_STATUS(s4d_plugin_registry_create(&r), S4D_OK);
    s4d_status st = s4d_plugin_registry_load_library(r, argv[1]);
    CHECK_STATUS(st, S4D_OK);
    if (st != S4D_OK) {
        fprintf(stderr, "%s\n", s4d_plugin_registry_errmsg(r));
        s4d_plugin_registry_destroy(r);
        return 1;
    }
    static problem pb;
    make_problem(&pb);
    s4d_attr attrs[] = {attr_s("plugin_version", "1")};
    s4d_plugin *p = create(r, "s4d", "DeformableAggregation", attrs, 1);
    CHECK(p != NULL);
    if (p) {
        test_build_phase(p, &pb);
        test_bad_descs(p, &pb);
        test_enqueue(r, p, &pb);
        test_int64_indices(p, &pb);
        test_pooled(p, &pb);
        test_serialize(r, p, &pb);
        test_supports_format(p, &pb);
        test_half_cpu(p, &pb);
        p->destroy(p);
    }
    test_node_errors(r);
    free(pb.feat);
    s4d_plugin_registry_destroy(r);
    TEST_DONE("test_plugin_da");
}
