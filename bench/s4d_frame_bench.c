/*
 * Times one Sparse4Dv3 frame through the engine: the backbone engine, then
 * the head engine reading the backbone's features straight from device
 * memory (no host round trip), each on one CUDA stream, as a CUDA graph
 * replay or eager, with CUDA events after warm-up. Then the frame again with
 * the head on a second stream and an input event on its features
 * (s4d_context_set_input_event): the head's layers that do not read the
 * features run while the backbone does. Prints one JSON object: median and
 * p90 milliseconds of backbone, head and the whole frame, one after the
 * other, and of the overlapped frame ("frame_overlap"); then, to tell launch
 * costs from the GPU's work, each engine alone in the same loop ("backbone_alone",
 * "head_alone") and the host microseconds of its enqueue call ("enqueue_host_us").
 *
 *   s4d_frame_bench --backbone=B.s4d --head=H.s4d --frame=DIR --plugins=LIB
 *                   [--iterations=N] [--warmUp=N] [--eager]
 *
 * DIR holds <input name>.npy for every input of both engines (a frame of a
 * golden sequence laid out by examples/demo/frames_from_manifest.py); the
 * head's "features" input comes from the backbone's output of that name.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "s4d/engine.h"
#include "s4d/npy.h"

#define MAX_ITERS 10000

static int fail(const char *what, const char *msg)
{
    fprintf(stderr, "s4d_frame_bench: error: %s: %s\n", what, msg);
    return 1;
}

typedef struct eng {
    s4d_engine *e;
    s4d_context *c;
    s4d_npy in[64];
    int nin;
} eng;

/* Binds every input from DIR/<name>.npy except `skip`, then runs once so that the
   values sit in the context's device buffers, and rebinds those (no copies later). */
static int setup(eng *g, const char *path, const char *dir, const char *skip, cudaStream_t s,
                 int graph)
{
    s4d_errbuf err;
    if (s4d_engine_load_file(path, NULL, &g->e, &err) != S4D_OK)
        return fail(path, err.msg);
    s4d_context_options co;
    s4d_context_options_init(&co);
    co.stream = s;
    co.use_graph = graph;
    if (s4d_context_create(g->e, &co, &g->c, &err) != S4D_OK)
        return fail(path, err.msg);
    int n = s4d_engine_num_inputs(g->e);
    for (int i = 0; i < n && i < 64; i++) {
        s4d_tensor_info ti;
        s4d_engine_input_info(g->e, i, &ti);
        if (skip && strcmp(ti.name, skip) == 0)
            continue;
        char f[4096];
        snprintf(f, sizeof f, "%s/%s.npy", dir, ti.name);
        s4d_npy *a = &g->in[g->nin++];
        if (s4d_npy_load(f, a, &err) != S4D_OK)
            return fail(f, err.msg);
        if (s4d_context_bind(g->c, ti.name, a->dtype, a->rank, a->dims, a->data) != S4D_OK)
            return fail(f, s4d_context_errmsg(g->c));
    }
    return 0;
}

static int to_device(eng *g)
{
    for (int k = 0; k < 2; k++) {
        int n = k ? s4d_engine_num_outputs(g->e) : s4d_engine_num_inputs(g->e);
        for (int i = 0; i < n; i++) {
            s4d_tensor_info ti;
            if (k)
                s4d_engine_output_info(g->e, i, &ti);
            else
                s4d_engine_input_info(g->e, i, &ti);
            void *d;
            if (s4d_context_device_buffer(g->c, ti.name, &d) != S4D_OK ||
                s4d_context_bind_memory(g->c, ti.name, ti.dtype, ti.rank, ti.dims, d,
                                        S4D_MEMORY_DEVICE) != S4D_OK)
                return fail(ti.name, s4d_context_errmsg(g->c));
        }
    }
    return 0;
}

/* The head's outputs, all of them one after the other, copied to host memory (NULL: failed). */
static unsigned char *head_outputs(eng *g, size_t *total)
{
    size_t n = 0;
    for (int i = 0; i < s4d_engine_num_outputs(g->e); i++) {
        s4d_tensor_info ti;
        s4d_engine_output_info(g->e, i, &ti);
        n += ti.bytes;
    }
    unsigned char *h = malloc(n ? n : 1);
    size_t at = 0;
    for (int i = 0; h && i < s4d_engine_num_outputs(g->e); i++) {
        s4d_tensor_info ti;
        void *d;
        s4d_engine_output_info(g->e, i, &ti);
        if (s4d_context_device_buffer(g->c, ti.name, &d) != S4D_OK ||
            cudaMemcpy(h + at, d, ti.bytes, cudaMemcpyDeviceToHost) != cudaSuccess) {
            free(h);
            return NULL;
        }
        at += ti.bytes;
    }
    *total = n;
    return h;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

/* One engine alone, as in the frame (events around one enqueue, a wait after each):
   the GPU time from the enqueue's start to its end, and the host time of the enqueue call. */
static int alone(eng *g, cudaStream_t s, cudaEvent_t *ev, int warm, int iters, float *t, float *cpu)
{
    for (int i = -warm; i < iters; i++) {
        cudaEventRecord(ev[0], s);
        double c0 = now_us();
        if (s4d_context_enqueue(g->c, s) != S4D_OK)
            return fail("enqueue", s4d_context_errmsg(g->c));
        double c1 = now_us();
        cudaEventRecord(ev[1], s);
        if (cudaEventSynchronize(ev[1]) != cudaSuccess)
            return fail("cuda", cudaGetErrorString(cudaGetLastError()));
        if (i >= 0) {
            cudaEventElapsedTime(&t[i], ev[0], ev[1]);
            cpu[i] = (float)(c1 - c0);
        }
    }
    return 0;
}

static int cmp_f(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void stats(float *t, int n, double *med, double *p90)
{
    qsort(t, (size_t)n, sizeof *t, cmp_f);
    *med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    int k = (int)(0.9 * n + 0.999) - 1;
    *p90 = t[k < 0 ? 0 : k];
}

int main(int argc, char **argv)
{
    const char *bb = NULL, *hd = NULL, *dir = NULL, *plugins = NULL;
    int iters = 200, warm = 20, graph = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "--backbone=", 11))
            bb = a + 11;
        else if (!strncmp(a, "--head=", 7))
            hd = a + 7;
        else if (!strncmp(a, "--frame=", 8))
            dir = a + 8;
        else if (!strncmp(a, "--plugins=", 10))
            plugins = a + 10;
        else if (!strncmp(a, "--iterations=", 13))
            iters = atoi(a + 13);
        else if (!strncmp(a, "--warmUp=", 9))
            warm = atoi(a + 9);
        else if (!strcmp(a, "--eager"))
            graph = 0;
        else
            return fail("argument", a);
    }
    if (!bb || !hd || !dir || iters < 1 || iters > MAX_ITERS || warm < 0)
        return fail("usage", "--backbone=B --head=H --frame=DIR [--plugins=LIB] [--iterations=N]");
    s4d_errbuf err;
    if (plugins && s4d_plugins_load(NULL, plugins, &err) != S4D_OK)
        return fail(plugins, err.msg);
    cudaStream_t s;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
        return fail("cuda", "cannot create a stream");
    eng b = {0}, h = {0};
    if (setup(&b, bb, dir, NULL, s, graph) || setup(&h, hd, dir, "features", s, graph))
        return 1;
    /* The head reads the backbone's features where the backbone leaves them. */
    s4d_tensor_info fi;
    void *feat = NULL;
    int found = 0;
    for (int i = 0; i < s4d_engine_num_outputs(b.e) && !found; i++) {
        s4d_engine_output_info(b.e, i, &fi);
        found = strcmp(fi.name, "features") == 0;
    }
    if (!found)
        return fail(bb, "the backbone has no output 'features'");
    if (s4d_context_run(b.c, NULL) != S4D_OK)
        return fail("backbone", s4d_context_errmsg(b.c));
    if (to_device(&b))
        return 1;
    s4d_context_device_buffer(b.c, "features", &feat);
    if (s4d_context_bind_memory(h.c, "features", fi.dtype, fi.rank, fi.dims, feat,
                                S4D_MEMORY_DEVICE) != S4D_OK)
        return fail("head features", s4d_context_errmsg(h.c));
    if (s4d_context_run(h.c, NULL) != S4D_OK)
        return fail("head", s4d_context_errmsg(h.c));
    if (to_device(&h))
        return 1;
    if (s4d_context_bind_memory(h.c, "features", fi.dtype, fi.rank, fi.dims, feat,
                                S4D_MEMORY_DEVICE) != S4D_OK)
        return fail("head features", s4d_context_errmsg(h.c));
    cudaEvent_t ev[3];
    for (int i = 0; i < 3; i++)
        cudaEventCreate(&ev[i]);
    static float tb[MAX_ITERS], th[MAX_ITERS], tf[MAX_ITERS], to[MAX_ITERS];
    static float ab[MAX_ITERS], ah[MAX_ITERS], cb[MAX_ITERS], ch[MAX_ITERS];
    if (alone(&b, s, ev, warm, iters, ab, cb) || alone(&h, s, ev, warm, iters, ah, ch))
        return 1;
    for (int i = -warm; i < iters; i++) {
        cudaEventRecord(ev[0], s);
        if (s4d_context_enqueue(b.c, s) != S4D_OK)
            return fail("backbone", s4d_context_errmsg(b.c));
        cudaEventRecord(ev[1], s);
        if (s4d_context_enqueue(h.c, s) != S4D_OK)
            return fail("head", s4d_context_errmsg(h.c));
        cudaEventRecord(ev[2], s);
        if (cudaEventSynchronize(ev[2]) != cudaSuccess)
            return fail("cuda", cudaGetErrorString(cudaGetLastError()));
        if (i >= 0) {
            cudaEventElapsedTime(&tb[i], ev[0], ev[1]);
            cudaEventElapsedTime(&th[i], ev[1], ev[2]);
            cudaEventElapsedTime(&tf[i], ev[0], ev[2]);
        }
    }
    size_t nout = 0, nout2 = 0;
    unsigned char *seq_out = head_outputs(&h, &nout);
    if (!seq_out)
        return fail("head", "cannot read its outputs back");
    /* Overlapped: the head on s2 waits for ev[0] (the frame's start) and, in the layers that
       read the features, for `ready`, recorded after the backbone. */
    cudaStream_t s2;
    cudaEvent_t ready;
    if (cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess)
        return fail("cuda", "cannot create a second stream and an event");
    if (s4d_context_set_input_event(h.c, "features", ready) != S4D_OK)
        return fail("head", s4d_context_errmsg(h.c));
    for (int i = -warm; i < iters; i++) {
        cudaEventRecord(ev[0], s);
        cudaStreamWaitEvent(s2, ev[0], 0);
        if (s4d_context_enqueue(b.c, s) != S4D_OK)
            return fail("backbone", s4d_context_errmsg(b.c));
        cudaEventRecord(ready, s);
        if (s4d_context_enqueue(h.c, s2) != S4D_OK)
            return fail("head", s4d_context_errmsg(h.c));
        cudaEventRecord(ev[2], s2);
        if (cudaEventSynchronize(ev[2]) != cudaSuccess || cudaStreamSynchronize(s) != cudaSuccess)
            return fail("cuda", cudaGetErrorString(cudaGetLastError()));
        if (i >= 0)
            cudaEventElapsedTime(&to[i], ev[0], ev[2]);
    }
    unsigned char *ovl_out = head_outputs(&h, &nout2);
    if (!ovl_out || nout2 != nout || memcmp(seq_out, ovl_out, nout) != 0)
        return fail("overlap", "the head's outputs differ from the frame run one after the other");
    free(seq_out);
    free(ovl_out);
    double mb, pb, mh, ph, mf, pf, mo, po, x[8];
    stats(ab, iters, &x[0], &x[1]);
    stats(ah, iters, &x[2], &x[3]);
    stats(cb, iters, &x[4], &x[5]);
    stats(ch, iters, &x[6], &x[7]);
    stats(tb, iters, &mb, &pb);
    stats(th, iters, &mh, &ph);
    stats(tf, iters, &mf, &pf);
    stats(to, iters, &mo, &po);
    printf("{\"graph\": %d, \"iterations\": %d, \"backbone\": [%.4f, %.4f], \"head\": [%.4f, %.4f], "
           "\"frame\": [%.4f, %.4f], \"frame_overlap\": [%.4f, %.4f], "
           "\"backbone_alone\": [%.4f, %.4f], \"head_alone\": [%.4f, %.4f], "
           "\"enqueue_host_us\": {\"backbone\": [%.1f, %.1f], \"head\": [%.1f, %.1f]}}\n",
           graph, iters, mb, pb, mh, ph, mf, pf, mo, po, x[0], x[1], x[2], x[3], x[4], x[5],
           x[6], x[7]);
    cudaEventDestroy(ready);
    cudaStreamDestroy(s2);
    for (int i = 0; i < b.nin; i++)
        s4d_npy_free(&b.in[i]);
    for (int i = 0; i < h.nin; i++)
        s4d_npy_free(&h.in[i]);
    s4d_context_destroy(b.c);
    s4d_context_destroy(h.c);
    s4d_engine_destroy(b.e);
    s4d_engine_destroy(h.e);
    cudaStreamDestroy(s);
    return 0;
}
