/*
 * The deformable aggregation plugin on a GPU: the CUDA enqueue (both
 * kernels) on a non-default stream against the plugin's CPU enqueue and the
 * float64 reference. Exits 77 (CTest: skipped) where no GPU is usable.
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
    }
    if (alias_c)
        run_on_gpu(alias_c, &pb, 0);
    free(pb.feat);
    dlclose(lib);
    TEST_DONE("test_plugin_da_cuda");
}
