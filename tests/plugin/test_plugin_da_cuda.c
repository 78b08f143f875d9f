/*
 * The deformable aggregation plugin on a GPU: the CUDA enqueue (both
 * kernels) on a non-default stream against the plugin's CPU enqueue and the
 * float64 reference, and in float16 (features, weights, output; negotiated
 * through supports_format) against float64 on the same rounded values and
 * the CPU's float16 enqueue. Exits 77 (CTest: skipped) where no GPU is usable.
 * The test is its own minimal host (dlopen + a host table), so it needs only
 * the op library and runs on machines built without the engine's deps.
 * Usage: test_plugin_da_cuda <libs4d_plugins.so>
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "da_problem.h"
#include "s4d/deformable_aggregation.h"

#define CUDA_CHECK(expr)                                                                 \
    do {                                                                                 \
        cudaError_t e_ = (expr);                                                         \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                \
                    cudaGetErrorString(e_));                                             \
            g_failures++;                                                                \
            goto done;                                                                   \
        }                                                                                \
    } while (0)

static void *to_device(const void *src, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess)
        return NULL;
    if (cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* The creators the library registers with this host. */
static const s4d_plugin_creator *g_creators[8];
static int g_num_creators;

static s4d_status host_register(void *host, const s4d_plugin_creator *c)
{
    if (g_num_creators == 8)
        return S4D_ERR_NO_MEMORY;
    g_creators[g_num_creators++] = c;
    return S4D_OK;
}

static const s4d_plugin_creator *find(const char *ns, const char *name)
{
    for (int i = 0; i < g_num_creators; i++)
        if (!strcmp(g_creators[i]->plugin_namespace, ns) && !strcmp(g_creators[i]->name, name) &&
            !strcmp(g_creators[i]->version, "1"))
            return g_creators[i];
    return NULL;
}

static void run_on_gpu(const s4d_plugin_creator *c, problem *pb, int64_t deterministic)
{
    static float cpu_out[OUT_N], gpu_out[OUT_N], gpu_again[OUT_N];
    static double ref[OUT_N];
    s4d_errbuf err;
    /* What the registry would hand create(): the declared fields, values filled in. */
    s4d_plugin_field fields[1] = {{.abi_version = S4D_PLUGIN_ABI_VERSION,
                                   .struct_size = sizeof(s4d_plugin_field),
                                   .name = "deterministic",
                                   .type = S4D_PLUGIN_FIELD_INT,
                                   .count = 1,
                                   .data = &deterministic}};
    s4d_plugin_fields pf = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                            .struct_size = sizeof(pf),
                            .count = c->num_fields,
                            .fields = fields};
    s4d_plugin *p = NULL;
    CHECK(c->num_fields <= 1);
    CHECK_STATUS(c->create(c, "da_gpu", &pf, &p, &err), S4D_OK);
    if (!p)
        return;
    void *dev[5] = {NULL}, *dout = NULL, *ws = NULL;
    cudaStream_t stream = NULL;
    CHECK_STATUS(enqueue(p, pb, cpu_out, 0, &err), S4D_OK);

    s4d_plugin_tensor in[5], o;
    run_tensors(pb, gpu_out, in, &o);
    s4d_plugin_tensor_desc d[5], od = o.desc;
    for (int i = 0; i < 5; i++) {
        in[i].desc.device = S4D_DEVICE_CUDA;
        d[i] = in[i].desc;
    }
    od.device = S4D_DEVICE_CUDA;
    o.desc.device = S4D_DEVICE_CUDA;
    CHECK_STATUS(p->get_output_descs(p, d, 5, &od, 1, &err), S4D_OK);
    CHECK_STATUS(p->supports(p, d, 5, &od, 1, &err), S4D_OK);
    size_t ws_size = p->workspace_size(p, d, 5, &od, 1);

    size_t bytes[5] = {sizeof(float) * BS * pb->F * C, sizeof(pb->shape), sizeof(pb->start),
                       sizeof(pb->loc), sizeof(pb->w)};
    for (int i = 0; i < 5; i++) {
        dev[i] = to_device(in[i].data, bytes[i]);
        CHECK(dev[i] != NULL);
        if (!dev[i])
            goto done;
        in[i].data = dev[i];
    }
    CUDA_CHECK(cudaMalloc(&dout, sizeof(gpu_out)));
    CUDA_CHECK(cudaMemset(dout, 0xff, sizeof(gpu_out))); /* NaN: every element must be written */
    if (ws_size > 0)
        CUDA_CHECK(cudaMalloc(&ws, ws_size));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    o.data = dout;
    s4d_plugin_run_info run = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                               .struct_size = sizeof(run),
                               .device = S4D_DEVICE_CUDA,
                               .stream = stream,
                               .workspace = ws,
                               .workspace_size = ws_size};
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_OK);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpy(gpu_out, dout, sizeof(gpu_out), cudaMemcpyDeviceToHost));
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_OK);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpy(gpu_again, dout, sizeof(gpu_again), cudaMemcpyDeviceToHost));

    reference(pb, ref);
    double max_cpu = 0.0, max_ref = 0.0;
    for (int i = 0; i < OUT_N; i++) {
        double e = fabs((double)gpu_out[i] - cpu_out[i]);
        double f = fabs((double)gpu_out[i] - ref[i]);
        max_cpu = (e > max_cpu || isnan(e)) ? (isnan(e) ? INFINITY : e) : max_cpu;
        max_ref = (f > max_ref || isnan(f)) ? (isnan(f) ? INFINITY : f) : max_ref;
    }
    printf("%s::%s deterministic=%d: max |gpu - cpu| %g, max |gpu - float64| %g\n",
           c->plugin_namespace, c->name, (int)deterministic, max_cpu, max_ref);
    CHECK(max_cpu < 1e-4 && max_ref < 1e-4);
    if (deterministic)
        CHECK(memcmp(gpu_out, gpu_again, sizeof(gpu_out)) == 0);

    /* A workspace smaller than asked for is refused before any launch. */
    if (ws_size > 0) {
        run.workspace_size = ws_size - 1;
        CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_ERR_INVALID_ARG);
        CHECK_MSG(err.msg, "workspace");
    }
done:
    if (stream)
        cudaStreamDestroy(stream);
    for (int i = 0; i < 5; i++)
        cudaFree(dev[i]);
    cudaFree(dout);
    cudaFree(ws);
    p->destroy(p);
}

/*
 * float16 features, weights and output on the GPU. Both sides see the same
 * values: features and weights rounded to half, the reference in float64 on
 * those. The op accumulates in float32 and rounds the result once to half
 * (2^-11 relative), so |gpu - ref| <= 1e-3 |ref| + 1e-4; against the CPU's
 * float16 enqueue the same bound (each side one rounding off).
 */
static void run_half_on_gpu(const s4d_plugin_creator *c, problem *pb, int64_t deterministic)
{
    static problem r;
    static uint16_t feat16[BS * 512 * C], w16[sizeof(pb->w) / sizeof(float)], gpu16[OUT_N], cpu16[OUT_N];
    static double ref[OUT_N];
    const int64_t nf = BS * pb->F * C, nw = (int64_t)(sizeof(pb->w) / sizeof(float));
    CHECK(nf <= (int64_t)(sizeof(feat16) / sizeof(feat16[0])));
    if (nf > (int64_t)(sizeof(feat16) / sizeof(feat16[0])))
        return;
    s4d_errbuf err;
    s4d_plugin_field fields[1] = {{.abi_version = S4D_PLUGIN_ABI_VERSION,
                                   .struct_size = sizeof(s4d_plugin_field),
                                   .name = "deterministic",
                                   .type = S4D_PLUGIN_FIELD_INT,
                                   .count = 1,
                                   .data = &deterministic}};
    s4d_plugin_fields pf = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                            .struct_size = sizeof(pf),
                            .count = c->num_fields,
                            .fields = fields};
    s4d_plugin *p = NULL;
    CHECK_STATUS(c->create(c, "da_gpu_half", &pf, &p, &err), S4D_OK);
    if (!p)
        return;
    void *dev[5] = {NULL}, *dout = NULL, *ws = NULL;
    cudaStream_t stream = NULL;
    r = *pb;
    r.feat = malloc(sizeof(float) * (size_t)nf);
    if (!r.feat) {
        p->destroy(p);
        return;
    }
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
    /* The CPU's float16 enqueue, for the cross-check. */
    o.data = cpu16;
    s4d_plugin_run_info crun = {.abi_version = S4D_PLUGIN_ABI_VERSION, .struct_size = sizeof(crun),
                                .device = S4D_DEVICE_CPU, .num_threads = 1};
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &crun, &err), S4D_OK);

    s4d_plugin_tensor_desc d[6];
    for (int i = 0; i < 5; i++) {
        in[i].desc.device = S4D_DEVICE_CUDA;
        d[i] = in[i].desc;
    }
    o.desc.device = S4D_DEVICE_CUDA;
    d[5] = o.desc;
    /* What the engine's negotiation asks, position by position; and the inferred output dtype. */
    CHECK(p->supports_format != NULL);
    for (int pos = 0; p->supports_format && pos < 6; pos++)
        CHECK_STATUS(p->supports_format(p, pos, d, 5, 1), S4D_OK);
    s4d_plugin_tensor_desc od = d[5];
    od.dtype = S4D_DTYPE_UNDEFINED;
    CHECK_STATUS(p->get_output_descs(p, d, 5, &od, 1, &err), S4D_OK);
    CHECK(od.dtype == S4D_DTYPE_FLOAT16);
    od.device = S4D_DEVICE_CUDA;
    CHECK_STATUS(p->supports(p, d, 5, &od, 1, &err), S4D_OK);
    size_t ws_size = p->workspace_size(p, d, 5, &od, 1);

    size_t bytes[5] = {sizeof(uint16_t) * (size_t)nf, sizeof(pb->shape), sizeof(pb->start), sizeof(pb->loc),
                       sizeof(uint16_t) * (size_t)nw};
    for (int i = 0; i < 5; i++) {
        dev[i] = to_device(in[i].data, bytes[i]);
        CHECK(dev[i] != NULL);
        if (!dev[i])
            goto done;
        in[i].data = dev[i];
    }
    CUDA_CHECK(cudaMalloc(&dout, sizeof(gpu16)));
    CUDA_CHECK(cudaMemset(dout, 0xff, sizeof(gpu16))); /* NaN: every element must be written */
    if (ws_size > 0)
        CUDA_CHECK(cudaMalloc(&ws, ws_size));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    o.data = dout;
    s4d_plugin_run_info run = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                               .struct_size = sizeof(run),
                               .device = S4D_DEVICE_CUDA,
                               .stream = stream,
                               .workspace = ws,
                               .workspace_size = ws_size};
    CHECK_STATUS(p->enqueue(p, in, 5, &o, 1, &run, &err), S4D_OK);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaMemcpy(gpu16, dout, sizeof(gpu16), cudaMemcpyDeviceToHost));
    double worst_ref = 0.0, worst_cpu = 0.0;
    for (int i = 0; i < OUT_N; i++) {
        const double g = f16_to_f32(gpu16[i]), lim = 1e-3 * fabs(ref[i]) + 1e-4;
        const double er = fabs(g - ref[i]) / lim, ec = fabs(g - (double)f16_to_f32(cpu16[i])) / lim;
        worst_ref = (er > worst_ref || isnan(er)) ? (isnan(er) ? INFINITY : er) : worst_ref;
        worst_cpu = (ec > worst_cpu || isnan(ec)) ? (isnan(ec) ? INFINITY : ec) : worst_cpu;
    }
    printf("%s::%s float16 deterministic=%d: worst |gpu - float64| / tol %g, |gpu - cpu float16| / tol %g\n",
           c->plugin_namespace, c->name, (int)deterministic, worst_ref, worst_cpu);
    CHECK(worst_ref <= 1.0 && worst_cpu <= 1.0);
done:
    if (stream)
        cudaStreamDestroy(stream);
    for (int i = 0; i < 5; i++)
        cudaFree(dev[i]);
    cudaFree(dout);
    cudaFree(ws);
    free(r.feat);
    p->destroy(p);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s LIBS4D_PLUGINS_SO\n", argv[0]);
        return 2;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0 || !s4d_cuda_available()) {
        printf("test_plugin_da_cuda: no usable GPU, skipped\n");
        return 77;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    s4d_plugin_library_init_fn init = NULL;
    void *sym = dlsym(lib, S4D_PLUGIN_LIBRARY_INIT_SYMBOL);
    memcpy(&init, &sym, sizeof(init));
    s4d_host_api api = {.abi_version = S4D_PLUGIN_ABI_VERSION,
                        .struct_size = sizeof(api),
                        .register_creator = host_register};
    uint32_t abi = 0;
    s4d_errbuf err;
    CHECK(init != NULL);
    if (init) {
        CHECK_STATUS(init(&api, &abi, &err), S4D_OK);
        CHECK(abi == S4D_PLUGIN_ABI_VERSION);
    }
    const s4d_plugin_creator *main_c = find("s4d", "DeformableAggregation");
    const s4d_plugin_creator *alias_c = find("custom", "DeformableAttentionAggrPlugin");
    CHECK(main_c && alias_c);
    static problem pb;
    make_problem(&pb);
    if (main_c) {
        run_on_gpu(main_c, &pb, 0);
        run_on_gpu(main_c, &pb, 1);
        run_half_on_gpu(main_c, &pb, 0);
        run_half_on_gpu(main_c, &pb, 1);
    }
    if (alias_c)
        run_on_gpu(alias_c, &pb, 0);
    free(pb.feat);
    dlclose(lib);
    TEST_DONE("test_plugin_da_cuda");
}
