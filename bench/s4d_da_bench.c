/*
 * s4d_da_bench: deformable aggregation on the realistic Sparse4Dv3 workload.
 *
 *   s4d_da_bench [--anchors N[,N...]] [--iters K] [--warmup K] [--threads T]
 *                [--device auto|cpu|cuda] [--seed S] [--out DIR] [--summary]
 *
 * Times the CPU kernels (median wall time) and, when this build has CUDA and a
 * GPU is present, the CUDA kernels (median of per-iteration CUDA events after
 * warm-up): forward, deterministic forward, float16 forward, backward.
 * --summary runs a short CPU pass (plus GPU when present) and prints a few
 * lines; --out writes bench.md and bench.json into DIR.
 */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "da_workload.h"
#include "s4d/deformable_aggregation.h"

#ifdef S4D_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define MAX_ROWS 32

typedef struct row {
    char device[16];
    char what[48];
    int64_t anchors;
    double median_us, min_us;
    int iters;
    double bytes;     /* unique bytes touched, for GB/s */
    double target_us; /* 0: none */
} row;

static row g_rows[MAX_ROWS];
static int g_nrows;

static void add_row(const char *device, const char *what, int64_t anchors, double med, double mn,
                    int iters, double bytes, double target)
{
    if (g_nrows >= MAX_ROWS)
        return;
    row *r = &g_rows[g_nrows++];
    snprintf(r->device, sizeof r->device, "%s", device);
    snprintf(r->what, sizeof r->what, "%s", what);
    r->anchors = anchors;
    r->median_us = med;
    r->min_us = mn;
    r->iters = iters;
    r->bytes = bytes;
    r->target_us = target;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n, double *mn)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    *mn = v[0];
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

/* Unique bytes: forward reads the touched feature rows, every location, the weights of
   valid pairs, and writes the output; backward also reads grad_output, clears and
   scatters grad_features and writes both other gradients. */
static double fwd_bytes(const da_workload *w, size_t elem)
{
    const s4d_da_sizes *s = &w->sizes;
    double b = (double)w->unique_rows * (double)s->channels * (double)elem;
    b += (double)(s->batch * s->num_anchors * s->num_points * s->num_cams) * 8.0;
    b += (double)w->valid_pairs * (double)(s->num_levels * s->num_groups) * (double)elem;
    b += (double)(s->batch * s->num_anchors * s->channels) * (double)elem;
    return b;
}

static double bwd_bytes(const da_workload *w)
{
    const s4d_da_sizes *s = &w->sizes;
    double b = fwd_bytes(w, 4);
    b += (double)(s->batch * s->num_rows * s->channels) * 4.0;  /* clearing grad_features */
    b += (double)w->unique_rows * (double)s->channels * 4.0;     /* scattering into it */
    b += (double)(s->batch * s->num_anchors * s->num_points * s->num_cams) * 8.0;
    b += (double)(s->batch * s->num_anchors * s->num_points * s->num_cams * s->num_levels *
                  s->num_groups) * 4.0;
    return b;
}

static s4d_da_forward_args make_fwd(const da_workload *w, void *out)
{
    return da_forward_args_f32(&w->sizes, w->spatial_shape, w->scale_start_index, w->features,
                               w->sampling_location, w->weights, out);
}

static s4d_da_backward_args make_bwd(const da_workload *w, const void *gout, void *gf, float *gl,
                                     void *gw)
{
    return da_backward_args_f32(&w->sizes, w->spatial_shape, w->scale_start_index, w->features,
                                w->sampling_location, w->weights, gout, gf, gl, gw);
}

static int bench_cpu(const da_workload *w, int iters, int threads, double *checksum)
{
    const s4d_da_sizes *s = &w->sizes;
    int64_t no = s->batch * s->num_anchors * s->channels;
    int64_t nf = s->batch * s->num_rows * s->channels;
    int64_t nl = s->batch * s->num_anchors * s->num_points * s->num_cams * 2;
    int64_t nw = nl / 2 * s->num_levels * s->num_groups;
    float *out = malloc(4 * (size_t)no), *gout = malloc(4 * (size_t)no);
    float *gf = malloc(4 * (size_t)nf), *gl = malloc(4 * (size_t)nl), *gw = malloc(4 * (size_t)nw);
    double *t = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
    if (!out || !gout || !gf || !gl || !gw || !t) {
        fprintf(stderr, "s4d_da_bench: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < no; i++)
        gout[i] = (float)((i % 97) - 48) / 48.0f;
    s4d_errbuf e = {{0}};
    s4d_da_forward_args fa = make_fwd(w, out);
    s4d_da_backward_args ba = make_bwd(w, gout, gf, gl, gw);
    if (s4d_da_forward_cpu(&fa, threads, &e) != S4D_OK ||
        s4d_da_backward_cpu(&ba, threads, &e) != S4D_OK) {
        fprintf(stderr, "s4d_da_bench: %s\n", e.msg);
        return 1;
    }
    double mn, sum = 0;
    for (int64_t i = 0; i < no; i++)
        sum += fabs((double)out[i]);
    *checksum = sum;
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        s4d_da_forward_cpu(&fa, threads, NULL);
        t[i] = now_us() - t0;
    }
    double med = median(t, iters, &mn);
    add_row("cpu", "forward", s->num_anchors, med, mn, iters, fwd_bytes(w, 4), 0);
    for (int i = 0; i < iters; i++) {
        double t0 = now_us();
        s4d_da_backward_cpu(&ba, threads, NULL);
        t[i] = now_us() - t0;
    }
    med = median(t, iters, &mn);
    add_row("cpu", "backward", s->num_anchors, med, mn, iters, bwd_bytes(w), 0);
    free(out); free(gout); free(gf); free(gl); free(gw); free(t);
    return 0;
}

#ifdef S4D_HAVE_CUDA
#define CK(call)                                                                             \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "s4d_da_bench: %s: %s\n", #call, cudaGetErrorString(e_));        \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

static void *dput(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes) != cudaSuccess)
        return NULL;
    if (h)
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    else
        cudaMemset(d, 0, bytes);
    return d;
}

static uint16_t f2h(float f)
{
    /* Round to nearest even; the workload holds only normal, finite values. */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a < 0x38800000u)
        return (uint16_t)sign; /* below fp16 normals: flush (never happens here) */
    uint32_t q = (a - 0x38000000u) >> 13, rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

typedef enum { K_FWD, K_FWD_DET, K_FWD_HALF, K_BWD } kernel_kind;

static int bench_gpu(const da_workload *w, int iters, int warmup)
{
    const s4d_da_sizes *s = &w->sizes;
    int64_t no = s->batch * s->num_anchors * s->channels;
    int64_t nf = s->batch * s->num_rows * s->channels;
    int64_t nl = s->batch * s->num_anchors * s->num_points * s->num_cams * 2;
    int64_t nw = nl / 2 * s->num_levels * s->num_groups;
    uint16_t *fh = malloc(2 * (size_t)nf), *wh = malloc(2 * (size_t)nw);
    float *gout = malloc(4 * (size_t)no);
    if (!fh || !wh || !gout)
        return 1;
    for (int64_t i = 0; i < nf; i++)
        fh[i] = f2h(w->features[i]);
    for (int64_t i = 0; i < nw; i++)
        wh[i] = f2h(w->weights[i]);
    for (int64_t i = 0; i < no; i++)
        gout[i] = (float)((i % 97) - 48) / 48.0f;
    void *d_feat = dput(w->features, 4 * (size_t)nf), *d_feath = dput(fh, 2 * (size_t)nf);
    void *d_w = dput(w->weights, 4 * (size_t)nw), *d_wh = dput(wh, 2 * (size_t)nw);
    void *d_loc = dput(w->sampling_location, 4 * (size_t)nl);
    void *d_shape = dput(w->spatial_shape, 8 * (size_t)(s->num_cams * s->num_levels));
    void *d_start = dput(w->scale_start_index, 4 * (size_t)(s->num_cams * s->num_levels));
    void *d_out = dput(NULL, 4 * (size_t)no), *d_gout = dput(gout, 4 * (size_t)no);
    void *d_gf = dput(NULL, 4 * (size_t)nf), *d_gl = dput(NULL, 4 * (size_t)nl);
    void *d_gw = dput(NULL, 4 * (size_t)nw);
    if (!d_feat || !d_feath || !d_w || !d_wh || !d_loc || !d_shape || !d_start || !d_out ||
        !d_gout || !d_gf || !d_gl || !d_gw) {
        fprintf(stderr, "s4d_da_bench: device allocation failed\n");
        return 1;
    }
    /* The copies above ran on the legacy stream, which a non-blocking stream does not wait for. */
    CK(cudaDeviceSynchronize());
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    int n_ev = iters + 1;
    cudaEvent_t *ev = malloc(sizeof(cudaEvent_t) * (size_t)n_ev);
    for (int i = 0; i < n_ev; i++)
        CK(cudaEventCreate(&ev[i]));
    double *t = malloc(sizeof(double) * (size_t)iters);
    const char *names[] = {"forward", "forward deterministic", "forward fp16", "backward"};
    const double targets[] = {40.0, 0.0, 25.0, 250.0};
    for (int k = K_FWD; k <= K_BWD; k++) {
        s4d_da_forward_args fa = make_fwd(w, d_out);
        fa.features = d_feat;
        fa.weights = d_w;
        fa.sampling_location = d_loc;
        fa.spatial_shape = d_shape;
        fa.scale_start_index = d_start;
        if (k == K_FWD_HALF) {
            fa.features = d_feath;
            fa.weights = d_wh;
            fa.features_dtype = fa.weights_dtype = fa.output_dtype = S4D_DTYPE_FLOAT16;
        }
        s4d_da_backward_args ba = make_bwd(w, d_gout, d_gf, d_gl, d_gw);
        ba.features = d_feat;
        ba.weights = d_w;
        ba.sampling_location = d_loc;
        ba.spatial_shape = d_shape;
        ba.scale_start_index = d_start;
        s4d_da_algo algo = k == K_FWD_DET ? S4D_DA_ALGO_DETERMINISTIC : S4D_DA_ALGO_FAST;
        s4d_errbuf e = {{0}};
        for (int i = 0; i < warmup + iters; i++) {
            if (i >= warmup)
                CK(cudaEventRecord(ev[i - warmup], st));
            s4d_status rc = k == K_BWD ? s4d_da_backward_cuda(&ba, NULL, st, &e)
                                       : s4d_da_forward_cuda(&fa, algo, NULL, st, &e);
            if (rc != S4D_OK) {
                fprintf(stderr, "s4d_da_bench: %s: %s\n", names[k], e.msg);
                return 1;
            }
            if (i == warmup + iters - 1)
                CK(cudaEventRecord(ev[iters], st));
        }
        CK(cudaStreamSynchronize(st));
        for (int i = 0; i < iters; i++) {
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]));
            t[i] = ms * 1e3;
        }
        double mn, med = median(t, iters, &mn);
        double bytes = k == K_BWD ? bwd_bytes(w) : fwd_bytes(w, k == K_FWD_HALF ? 2 : 4);
        add_row("cuda", names[k], s->num_anchors, med, mn, iters, bytes,
                s->num_anchors == 900 ? targets[k] : 0.0);
    }
    for (int i = 0; i < n_ev; i++)
        cudaEventDestroy(ev[i]);
    free(ev);
    free(t);
    cudaStreamDestroy(st);
    cudaFree(d_feat); cudaFree(d_feath); cudaFree(d_w); cudaFree(d_wh); cudaFree(d_loc);
    cudaFree(d_shape); cudaFree(d_start); cudaFree(d_out); cudaFree(d_gout); cudaFree(d_gf);
    cudaFree(d_gl); cudaFree(d_gw);
    free(fh); free(wh); free(gout);
    return 0;
}
#endif

static void device_name(int gpu, char *buf, size_t n)
{
#ifdef S4D_HAVE_CUDA
    if (gpu) {
        struct cudaDeviceProp prop;
        int dev = 0;
        if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
            snprintf(buf, n, "%s", prop.name);
            return;
        }
    }
#else
    (void)gpu;
#endif
    snprintf(buf, n, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c += 2;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, n, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

static void print_table(FILE *f, int markdown)
{
    if (markdown)
        fprintf(f, "| device | kernel | anchors | median us | min us | iters | GB/s | target us |\n"
                   "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
    else
        fprintf(f, "%-6s %-22s %7s %11s %11s %6s %8s %s\n", "device", "kernel", "anchors",
                "median_us", "min_us", "iters", "GB/s", "target_us");
    for (int i = 0; i < g_nrows; i++) {
        const row *r = &g_rows[i];
        double gbs = r->bytes / (r->median_us * 1e-6) / 1e9;
        char target[32] = "-";
        if (r->target_us > 0)
            snprintf(target, sizeof target, "%.0f (%s, %.2fx)", r->target_us,
                     r->median_us <= r->target_us ? "met" : "missed", r->median_us / r->target_us);
        if (markdown)
            fprintf(f, "| %s | %s | %lld | %.1f | %.1f | %d | %.1f | %s |\n", r->device, r->what,
                    (long long)r->anchors, r->median_us, r->min_us, r->iters, gbs, target);
        else
            fprintf(f, "%-6s %-22s %7lld %11.1f %11.1f %6d %8.1f %s\n", r->device, r->what,
                    (long long)r->anchors, r->median_us, r->min_us, r->iters, gbs, target);
    }
}

static int write_results(const char *dir, const char *cmdline, const char *cpu, const char *gpu,
                         const da_workload *w)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "s4d_da_bench: cannot create %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char date[64];
    time_t tt = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&tt));
    char path[1024];
    snprintf(path, sizeof path, "%s/bench.md", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "s4d_da_bench: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "# deformable aggregation benchmark\n\n- date: %s\n- command: `%s`\n- cpu: %s\n"
               "- gpu: %s\n- workload: bs 1, 6 cameras, 4 levels (64x176 .. 8x22), C 256, G 8, "
               "13 points; %.1f%% of (point, camera) pairs inside an image; points seen by 0/1/2/3+ "
               "cameras: %.1f/%.1f/%.1f/%.1f%%\n- GB/s: unique bytes touched / median time "
               "(see docs/ops/deformable_aggregation.md)\n\n",
            date, cmdline, cpu, gpu, 100 * w->inside_fraction, 100 * w->seen_by[0],
            100 * w->seen_by[1], 100 * w->seen_by[2], 100 * w->seen_by[3]);
    print_table(f, 1);
    fclose(f);
    snprintf(path, sizeof path, "%s/bench.json", dir);
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "s4d_da_bench: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\n  \"date\": \"%s\",\n  \"command\": \"%s\",\n  \"cpu\": \"%s\",\n  \"gpu\": \"%s\",\n"
               "  \"inside_fraction\": %.5f,\n  \"results\": [\n",
            date, cmdline, cpu, gpu, w->inside_fraction);
    for (int i = 0; i < g_nrows; i++) {
        const row *r = &g_rows[i];
        fprintf(f, "    {\"device\": \"%s\", \"kernel\": \"%s\", \"anchors\": %lld, \"median_us\": %.2f, "
                   "\"min_us\": %.2f, \"iters\": %d, \"unique_bytes\": %.0f, \"gbps\": %.2f, "
                   "\"target_us\": %.0f}%s\n",
                r->device, r->what, (long long)r->anchors, r->median_us, r->min_us, r->iters,
                r->bytes, r->bytes / (r->median_us * 1e-6) / 1e9, r->target_us,
                i + 1 < g_nrows ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("results written to %s/bench.md and %s/bench.json\n", dir, dir);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: s4d_da_bench [--anchors N[,N...]] [--iters K] [--warmup K] [--threads T]\n"
               "                    [--device auto|cpu|cuda] [--seed S] [--out DIR] [--summary]\n");
}

int main(int argc, char **argv)
{
    int64_t anchors[8] = {900, 1800};
    int nanchors = 2, iters = -1, warmup = 20, threads = 0, summary = 0;
    const char *device = "auto", *out = NULL;
    uint64_t seed = 2024;
    char cmdline[1024] = "";
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(cmdline);
        snprintf(cmdline + len, sizeof cmdline - len, "%s%s", i ? " " : "", argv[i]);
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--summary")) {
            summary = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (v && !strcmp(a, "--anchors")) {
            nanchors = 0;
            char *end;
            const char *p = v;
            while (*p && nanchors < 8) {
                long long n = strtoll(p, &end, 10);
                if (end == p || n < 1) {
                    fprintf(stderr, "s4d_da_bench: bad --anchors '%s'\n", v);
                    return 2;
                }
                anchors[nanchors++] = n;
                p = *end == ',' ? end + 1 : end;
            }
            i++;
        } else if (v && !strcmp(a, "--iters")) {
            iters = atoi(v);
            i++;
        } else if (v && !strcmp(a, "--warmup")) {
            warmup = atoi(v);
            i++;
        } else if (v && !strcmp(a, "--threads")) {
            threads = atoi(v);
            i++;
        } else if (v && !strcmp(a, "--device")) {
            device = v;
            i++;
        } else if (v && !strcmp(a, "--seed")) {
            seed = strtoull(v, NULL, 10);
            i++;
        } else if (v && !strcmp(a, "--out")) {
            out = v;
            i++;
        } else {
            fprintf(stderr, "s4d_da_bench: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (strcmp(device, "auto") && strcmp(device, "cpu") && strcmp(device, "cuda")) {
        fprintf(stderr, "s4d_da_bench: --device must be auto, cpu or cuda, got '%s'\n", device);
        return 2;
    }
    int gpu = strcmp(device, "cpu") != 0 && s4d_cuda_available();
    if (!strcmp(device, "cuda") && !gpu) {
        fprintf(stderr, "s4d_da_bench: --device cuda: no CUDA device or a build without CUDA\n");
        return 1;
    }
    if (summary) {
        nanchors = 1;
        anchors[0] = 900;
    }
    int cpu_iters = iters > 0 ? (iters < 20 ? iters : 20) : (summary ? 3 : 20);
#ifdef S4D_HAVE_CUDA
    int gpu_iters = iters >= 100 ? iters : 100;
#endif
    if (warmup < 1)
        warmup = 1;
    char cpu_name[300], gpu_name[300] = "none";
    device_name(0, cpu_name, sizeof cpu_name);
    if (gpu)
        device_name(1, gpu_name, sizeof gpu_name);
    da_workload w;
    memset(&w, 0, sizeof w);
    for (int k = 0; k < nanchors; k++) {
        da_workload_free(&w);
        if (da_workload_make(&w, 1, anchors[k], seed) != 0) {
            fprintf(stderr, "s4d_da_bench: out of memory making the workload\n");
            return 1;
        }
        printf("workload: %lld anchors, %.1f%% of (point, camera) pairs inside an image "
               "(points seen by 0/1/2/3+ cameras: %.1f/%.1f/%.1f/%.1f%%), %lld unique feature rows\n",
               (long long)anchors[k], 100 * w.inside_fraction, 100 * w.seen_by[0],
               100 * w.seen_by[1], 100 * w.seen_by[2], 100 * w.seen_by[3],
               (long long)w.unique_rows);
        double checksum = 0;
        if (strcmp(device, "cuda") != 0 && bench_cpu(&w, cpu_iters, threads, &checksum) != 0)
            return 1;
        if (checksum != 0)
            printf("cpu forward: sum |out| = %.6g over %lld outputs\n", checksum,
                   (long long)(w.sizes.batch * w.sizes.num_anchors * w.sizes.channels));
#ifdef S4D_HAVE_CUDA
        if (gpu && bench_gpu(&w, gpu_iters, warmup) != 0)
            return 1;
#endif
    }
    printf("\ncpu: %s\ngpu: %s\n", cpu_name, gpu_name);
    print_table(stdout, 0);
    int rc = 0;
    if (out)
        rc = write_results(out, cmdline, cpu_name, gpu_name, &w);
    da_workload_free(&w);
    return rc;
}
