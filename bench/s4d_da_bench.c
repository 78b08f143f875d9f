/*
 * s4d_da_bench: deformable aggregation on the realistic Sparse4Dv3 workload.
 *
 *   s4d_da_bench [--anchors N[,N...]] [--channels C] [--iters K] [--warmup K] [--threads T]
 *                [--device auto|cpu|cuda] [--seed S] [--out DIR] [--summary]
 *                [--variants default|all] [--order natural|desc|asc|shuffle]
 *
 * --channels sets C (default 256, Sparse4Dv3's; the targets apply to it alone).
 * --order permutes the anchors before anything runs: as made (natural, the
 * default), by their number of (point, camera) pairs inside an image,
 * descending or ascending (stable), or shuffled with the seed. The kernels give
 * each anchor one block, so the order decides which blocks share an SM; the
 * sums per anchor are the same whatever the order.
 *
 * Times the CPU kernels (median wall time) and, when this build has CUDA and a
 * GPU is present, the CUDA kernels (median of per-iteration CUDA events after
 * warm-up): forward, deterministic forward, float16 forward, backward and
 * deterministic backward as the public functions run them, and with
 * --variants all every kernel variant (kernels/deformable_aggregation/
 * da_variants.h) in float32 and float16 forward and in backward. Before it is
 * timed, every GPU row is checked against the CPU oracle on the same inputs
 * (max abs error and relative L2 error, outputs poisoned first) and run twice
 * to see whether it is bitwise reproducible; a failed check makes the exit
 * status 1. --summary runs a short CPU pass (plus GPU when present) and prints
 * a few lines; --out writes bench.md and bench.json into DIR.
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

#include "da_variants.h"
#endif

#define MAX_ROWS 192

typedef struct row {
    char device[16];
    char what[48];
    char variant[32]; /* CUDA kernel variant that ran, "-" for the CPU */
    int64_t anchors;
    double median_us, min_us;
    int iters;
    double bytes;     /* unique bytes touched, for GB/s */
    double target_us; /* 0: none */
    double max_abs;   /* vs the CPU oracle; < 0: not checked */
    double rel_l2;
    int repro;        /* 1: two runs bitwise equal, 0: not, -1: not checked */
    int ok;           /* the check passed (or none was made) */
} row;

static row g_rows[MAX_ROWS];
static int g_nrows;

static row *add_row(const char *device, const char *what, int64_t anchors, double med, double mn,
                    int iters, double bytes, double target)
{
    static row spare;
    if (g_nrows >= MAX_ROWS)
        return &spare;
    row *r = &g_rows[g_nrows++];
    memset(r, 0, sizeof *r);
    snprintf(r->device, sizeof r->device, "%s", device);
    snprintf(r->what, sizeof r->what, "%s", what);
    snprintf(r->variant, sizeof r->variant, "-");
    r->anchors = anchors;
    r->median_us = med;
    r->min_us = mn;
    r->iters = iters;
    r->bytes = bytes;
    r->target_us = target;
    r->max_abs = -1.0;
    r->repro = -1;
    r->ok = 1;
    return r;
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
    if (cudaMalloc(&d, bytes ? bytes : 16) != cudaSuccess)
        return NULL;
    if (h)
        cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    else
        cudaMemset(d, 0, bytes ? bytes : 16);
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

static double h2d(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp((double)m, -24) : e == 31 ? (m ? NAN : INFINITY)
                                                      : ldexp((double)(m + 1024), e - 25);
    return h & 0x8000 ? -v : v;
}

/* Errors of got (float32, or float16 bits when half) against the oracle want. */
static void compare(const float *want, const void *got, int half, int64_t n, double *max_abs,
                    double *rel)
{
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = half ? h2d(((const uint16_t *)got)[i]) : (double)((const float *)got)[i];
        double d = fabs(g - (double)want[i]);
        if (!(d <= mx)) /* NaN too */
            mx = isnan(d) ? INFINITY : d;
        num += (g - want[i]) * (g - want[i]);
        den += (double)want[i] * want[i];
    }
    *max_abs = mx;
    *rel = isnan(num) ? INFINITY : sqrt(num / (den > 0 ? den : 1));
}

/* Device copies of the workload and every output, the CPU oracle, and the timing state. */
typedef struct gpu_ctx {
    const da_workload *w;
    int64_t no, nf, nl, nw;
    void *feat, *feath, *wts, *wtsh, *loc, *shape, *start, *out, *gout, *gf, *gl, *gw, *ws;
    size_t ws_bytes;
    float *h_out, *h_gf, *h_gl, *h_gw; /* host copies of one run */
    void *h_again;                     /* a second run, for the reproducibility check */
    float *o_fwd32, *o_fwd16, *o_gf, *o_gl, *o_gw; /* CPU oracle */
    cudaStream_t st;
    cudaEvent_t *ev;
    double *t;
    int iters, warmup;
} gpu_ctx;

typedef enum { K_FWD32, K_FWD16, K_BWD } kernel_kind;

/* variant < 0: the public function with algo; else that variant. */
static s4d_status run_once(gpu_ctx *g, kernel_kind k, int variant, s4d_da_algo algo, int *ran,
                           s4d_errbuf *e)
{
    const da_workload *w = g->w;
    if (k == K_BWD) {
        s4d_da_backward_args ba = da_backward_args_f32(&w->sizes, g->shape, g->start, g->feat, g->loc,
                                                       g->wts, g->gout, g->gf, g->gl, g->gw);
        if (variant < 0) {
            *ran = s4d_da_cuda_bwd_variant_default(algo);
            return s4d_da_backward_cuda_algo(&ba, algo, g->ws, g->st, e);
        }
        return s4d_da_backward_cuda_variant(&ba, variant, g->ws, g->st, ran, e);
    }
    s4d_da_forward_args fa = da_forward_args_f32(&w->sizes, g->shape, g->start, g->feat, g->loc,
                                                 g->wts, g->out);
    if (k == K_FWD16) {
        fa.features = g->feath;
        fa.weights = g->wtsh;
        fa.features_dtype = fa.weights_dtype = fa.output_dtype = S4D_DTYPE_FLOAT16;
    }
    if (variant < 0) {
        *ran = k == K_FWD16 ? s4d_da_cuda_fwd_variant_default_half(algo) : s4d_da_cuda_fwd_variant_default(algo);
        return s4d_da_forward_cuda(&fa, algo, NULL, g->st, e);
    }
    return s4d_da_forward_cuda_variant(&fa, variant, NULL, g->st, ran, e);
}

static int poison(gpu_ctx *g, kernel_kind k)
{
    if (k == K_BWD) {
        CK(cudaMemsetAsync(g->gf, 0x7f, 4 * (size_t)g->nf, g->st));
        CK(cudaMemsetAsync(g->gl, 0x7f, 4 * (size_t)g->nl, g->st));
        CK(cudaMemsetAsync(g->gw, 0x7f, 4 * (size_t)g->nw, g->st));
    } else {
        CK(cudaMemsetAsync(g->out, 0xff, 4 * (size_t)g->no, g->st)); /* NaN patterns */
    }
    return 0;
}

/* One checked run into the host buffers (second: into h_again for the bitwise comparison). */
static int checked_run(gpu_ctx *g, kernel_kind k, int variant, s4d_da_algo algo, int second,
                       int *ran, const char *label)
{
    s4d_errbuf e = {{0}};
    if (poison(g, k))
        return 1;
    if (run_once(g, k, variant, algo, ran, &e) != S4D_OK) {
        fprintf(stderr, "s4d_da_bench: %s: %s\n", label, e.msg);
        return 1;
    }
    CK(cudaStreamSynchronize(g->st));
    char *dst = second ? (char *)g->h_again : NULL;
    if (k == K_BWD) {
        CK(cudaMemcpy(dst ? (void *)dst : g->h_gf, g->gf, 4 * (size_t)g->nf, cudaMemcpyDeviceToHost));
        if (dst)
            dst += 4 * (size_t)g->nf;
        CK(cudaMemcpy(dst ? (void *)dst : g->h_gl, g->gl, 4 * (size_t)g->nl, cudaMemcpyDeviceToHost));
        if (dst)
            dst += 4 * (size_t)g->nl;
        CK(cudaMemcpy(dst ? (void *)dst : g->h_gw, g->gw, 4 * (size_t)g->nw, cudaMemcpyDeviceToHost));
    } else {
        CK(cudaMemcpy(dst ? (void *)dst : g->h_out, g->out, (k == K_FWD16 ? 2 : 4) * (size_t)g->no,
                      cudaMemcpyDeviceToHost));
    }
    return 0;
}

static int time_it(gpu_ctx *g, kernel_kind k, int variant, s4d_da_algo algo, double *med, double *mn)
{
    s4d_errbuf e = {{0}};
    int ran;
    for (int i = 0; i < g->warmup + g->iters; i++) {
        if (i >= g->warmup)
            CK(cudaEventRecord(g->ev[i - g->warmup], g->st));
        if (run_once(g, k, variant, algo, &ran, &e) != S4D_OK) {
            fprintf(stderr, "s4d_da_bench: %s\n", e.msg);
            return 1;
        }
        if (i == g->warmup + g->iters - 1)
            CK(cudaEventRecord(g->ev[g->iters], g->st));
    }
    CK(cudaStreamSynchronize(g->st));
    for (int i = 0; i < g->iters; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, g->ev[i], g->ev[i + 1]));
        g->t[i] = ms * 1e3;
    }
    *med = median(g->t, g->iters, mn);
    return 0;
}

/* Targets of the H200 issue: forward fp32 <= 25 us and fp16 <= 15 us at 900 anchors, fp32
   <= 45 us at 1800, backward (three gradients) <= 100 us at 900. */
static double target_of(kernel_kind k, int64_t anchors, int64_t channels)
{
    if (channels != 256)
        return 0.0;
    if (k == K_FWD32)
        return anchors == 900 ? 25.0 : anchors == 1800 ? 45.0 : 0.0;
    if (k == K_FWD16)
        return anchors == 900 ? 15.0 : 0.0;
    return anchors == 900 ? 100.0 : 0.0;
}

/* Checks (twice: oracle and reproducibility), then times one kernel; adds its row. */
static int measure(gpu_ctx *g, kernel_kind k, int variant, s4d_da_algo algo, const char *what)
{
    const da_workload *w = g->w;
    const char *vname = variant >= 0 ? (k == K_BWD ? s4d_da_cuda_bwd_variant_name(variant)
                                                   : s4d_da_cuda_fwd_variant_name(variant))
                                     : what;
    char label[96];
    snprintf(label, sizeof label, "%s [%s] at %lld anchors", what, vname,
             (long long)w->sizes.num_anchors);
    int ran = -1, ran2 = -1;
    if (checked_run(g, k, variant, algo, 0, &ran, label))
        return 1;
    double max_abs = 0, rel = 0, tol;
    if (k == K_BWD) {
        double m1, r1, m2, r2, m3, r3;
        compare(g->o_gf, g->h_gf, 0, g->nf, &m1, &r1);
        compare(g->o_gl, g->h_gl, 0, g->nl, &m2, &r2);
        compare(g->o_gw, g->h_gw, 0, g->nw, &m3, &r3);
        max_abs = fmax(m1, fmax(m2, m3));
        rel = fmax(r1, fmax(r2, r3));
        printf("  %-44s grad_features %.2g / %.2g, grad_location %.2g / %.2g, grad_weights %.2g / "
               "%.2g (max abs / rel L2)\n", label, m1, r1, m2, r2, m3, r3);
        tol = 1e-5;
    } else {
        compare(k == K_FWD16 ? g->o_fwd16 : g->o_fwd32, g->h_out, k == K_FWD16, g->no, &max_abs,
                &rel);
        tol = k == K_FWD16 ? 3e-3 : 1e-5;
    }
    if (checked_run(g, k, variant, algo, 1, &ran2, label))
        return 1;
    size_t bytes = k == K_BWD ? 4 * (size_t)(g->nf + g->nl + g->nw)
                              : (k == K_FWD16 ? 2 : 4) * (size_t)g->no;
    int repro;
    if (k == K_BWD) {
        const char *a = (const char *)g->h_again;
        repro = !memcmp(a, g->h_gf, 4 * (size_t)g->nf) &&
                !memcmp(a + 4 * (size_t)g->nf, g->h_gl, 4 * (size_t)g->nl) &&
                !memcmp(a + 4 * (size_t)(g->nf + g->nl), g->h_gw, 4 * (size_t)g->nw);
    } else {
        repro = !memcmp(g->h_again, g->h_out, bytes);
    }
    double med, mn;
    if (time_it(g, k, variant, algo, &med, &mn))
        return 1;
    double ub = k == K_BWD ? bwd_bytes(w) : fwd_bytes(w, k == K_FWD16 ? 2 : 4);
    row *r = add_row("cuda", what, w->sizes.num_anchors, med, mn, g->iters, ub,
                     target_of(k, w->sizes.num_anchors, w->sizes.channels));
    const char *rn = k == K_BWD ? s4d_da_cuda_bwd_variant_name(ran) : s4d_da_cuda_fwd_variant_name(ran);
    snprintf(r->variant, sizeof r->variant, "%s", rn ? rn : "?");
    r->max_abs = max_abs;
    r->rel_l2 = rel;
    r->repro = repro;
    /* Every forward and the deterministic backward must be bitwise reproducible. */
    const int need_repro = k != K_BWD || s4d_da_cuda_bwd_variant_deterministic(ran);
    r->ok = rel <= tol && (!need_repro || repro);
    if (!r->ok)
        fprintf(stderr, "s4d_da_bench: CHECK FAILED: %s: rel L2 %.3g (tolerance %.1g), max abs %.3g, "
                "%s\n", label, rel, tol, max_abs, repro ? "reproducible" : "NOT bitwise reproducible");
    return 0;
}

static int bench_gpu(const da_workload *w, int iters, int warmup, int all_variants, int threads)
{
    const s4d_da_sizes *s = &w->sizes;
    gpu_ctx g;
    memset(&g, 0, sizeof g);
    g.w = w;
    g.iters = iters;
    g.warmup = warmup;
    g.no = s->batch * s->num_anchors * s->channels;
    g.nf = s->batch * s->num_rows * s->channels;
    g.nl = s->batch * s->num_anchors * s->num_points * s->num_cams * 2;
    g.nw = g.nl / 2 * s->num_levels * s->num_groups;
    uint16_t *fh = malloc(2 * (size_t)g.nf), *wh = malloc(2 * (size_t)g.nw);
    float *gout = malloc(4 * (size_t)g.no);
    g.h_out = malloc(4 * (size_t)g.no);
    g.h_gf = malloc(4 * (size_t)g.nf);
    g.h_gl = malloc(4 * (size_t)g.nl);
    g.h_gw = malloc(4 * (size_t)g.nw);
    g.h_again = malloc(4 * (size_t)(g.nf + g.nl + g.nw));
    g.o_fwd32 = malloc(4 * (size_t)g.no);
    g.o_fwd16 = malloc(4 * (size_t)g.no);
    g.o_gf = malloc(4 * (size_t)g.nf);
    g.o_gl = malloc(4 * (size_t)g.nl);
    g.o_gw = malloc(4 * (size_t)g.nw);
    g.t = malloc(sizeof(double) * (size_t)iters);
    g.ev = malloc(sizeof(cudaEvent_t) * (size_t)(iters + 1));
    if (!fh || !wh || !gout || !g.h_out || !g.h_gf || !g.h_gl || !g.h_gw || !g.h_again ||
        !g.o_fwd32 || !g.o_fwd16 || !g.o_gf || !g.o_gl || !g.o_gw || !g.t || !g.ev) {
        fprintf(stderr, "s4d_da_bench: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < g.nf; i++)
        fh[i] = f2h(w->features[i]);
    for (int64_t i = 0; i < g.nw; i++)
        wh[i] = f2h(w->weights[i]);
    for (int64_t i = 0; i < g.no; i++)
        gout[i] = (float)((i % 97) - 48) / 48.0f;
    /* The CPU oracle: float32 forward, forward on the float16-rounded inputs, backward. */
    s4d_errbuf e = {{0}};
    s4d_da_forward_args ca = make_fwd(w, g.o_fwd32);
    s4d_da_forward_args ch = make_fwd(w, g.o_fwd16);
    ch.features = fh;
    ch.weights = wh;
    ch.features_dtype = ch.weights_dtype = S4D_DTYPE_FLOAT16;
    s4d_da_backward_args cb = make_bwd(w, gout, g.o_gf, g.o_gl, g.o_gw);
    if (s4d_da_forward_cpu(&ca, threads, &e) != S4D_OK ||
        s4d_da_forward_cpu(&ch, threads, &e) != S4D_OK ||
        s4d_da_backward_cpu(&cb, threads, &e) != S4D_OK) {
        fprintf(stderr, "s4d_da_bench: CPU oracle: %s\n", e.msg);
        return 1;
    }
    g.feat = dput(w->features, 4 * (size_t)g.nf);
    g.feath = dput(fh, 2 * (size_t)g.nf);
    g.wts = dput(w->weights, 4 * (size_t)g.nw);
    g.wtsh = dput(wh, 2 * (size_t)g.nw);
    g.loc = dput(w->sampling_location, 4 * (size_t)g.nl);
    g.shape = dput(w->spatial_shape, 8 * (size_t)(s->num_cams * s->num_levels));
    g.start = dput(w->scale_start_index, 4 * (size_t)(s->num_cams * s->num_levels));
    g.out = dput(NULL, 4 * (size_t)g.no);
    g.gout = dput(gout, 4 * (size_t)g.no);
    g.gf = dput(NULL, 4 * (size_t)g.nf);
    g.gl = dput(NULL, 4 * (size_t)g.nl);
    g.gw = dput(NULL, 4 * (size_t)g.nw);
    for (int v = 0; v < s4d_da_cuda_bwd_variant_count(); v++) {
        size_t b = s4d_da_backward_workspace_size_variant(s, v);
        if (b > g.ws_bytes)
            g.ws_bytes = b;
    }
    g.ws = dput(NULL, g.ws_bytes);
    if (!g.feat || !g.feath || !g.wts || !g.wtsh || !g.loc || !g.shape || !g.start || !g.out ||
        !g.gout || !g.gf || !g.gl || !g.gw || !g.ws) {
        fprintf(stderr, "s4d_da_bench: device allocation failed\n");
        return 1;
    }
    /* The copies above ran on the legacy stream, which a non-blocking stream does not wait for. */
    CK(cudaDeviceSynchronize());
    CK(cudaStreamCreateWithFlags(&g.st, cudaStreamNonBlocking));
    for (int i = 0; i <= iters; i++)
        CK(cudaEventCreate(&g.ev[i]));
    printf("checks against the CPU oracle (%lld anchors; deterministic workspace %.1f MB):\n",
           (long long)s->num_anchors, (double)g.ws_bytes / 1e6);
    int rc = 0;
    /* The public functions first (what every caller gets), then each variant. */
    rc |= measure(&g, K_FWD32, -1, S4D_DA_ALGO_FAST, "forward");
    rc |= measure(&g, K_FWD32, -1, S4D_DA_ALGO_DETERMINISTIC, "forward deterministic");
    rc |= measure(&g, K_FWD16, -1, S4D_DA_ALGO_FAST, "forward fp16");
    rc |= measure(&g, K_BWD, -1, S4D_DA_ALGO_FAST, "backward");
    rc |= measure(&g, K_BWD, -1, S4D_DA_ALGO_DETERMINISTIC, "backward deterministic");
    if (all_variants) {
        for (int v = 0; v < s4d_da_cuda_fwd_variant_count() && !rc; v++)
            rc |= measure(&g, K_FWD32, v, S4D_DA_ALGO_FAST, "variant forward fp32");
        for (int v = 0; v < s4d_da_cuda_fwd_variant_count() && !rc; v++)
            rc |= measure(&g, K_FWD16, v, S4D_DA_ALGO_FAST, "variant forward fp16");
        for (int v = 0; v < s4d_da_cuda_bwd_variant_count() && !rc; v++)
            rc |= measure(&g, K_BWD, v, S4D_DA_ALGO_FAST, "variant backward");
    }
    for (int i = 0; i <= iters; i++)
        cudaEventDestroy(g.ev[i]);
    cudaStreamDestroy(g.st);
    void *dev[] = {g.feat, g.feath, g.wts, g.wtsh, g.loc, g.shape, g.start, g.out,
                   g.gout, g.gf,    g.gl,  g.gw,   g.ws};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
        cudaFree(dev[i]);
    void *host[] = {fh, wh, gout, g.h_out, g.h_gf, g.h_gl, g.h_gw, g.h_again, g.o_fwd32,
                    g.o_fwd16, g.o_gf, g.o_gl, g.o_gw, g.t, g.ev};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++)
        free(host[i]);
    return rc;
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
        fprintf(f, "| device | kernel | variant | anchors | median us | min us | iters | GB/s | "
                   "max abs err | rel L2 err | bitwise repro | check | target us |\n"
                   "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    else
        fprintf(f, "%-6s %-24s %-16s %7s %9s %9s %6s %8s %9s %9s %5s %5s %s\n", "device", "kernel",
                "variant", "anchors", "median_us", "min_us", "iters", "GB/s", "max_abs", "rel_l2",
                "repro", "check", "target_us");
    for (int i = 0; i < g_nrows; i++) {
        const row *r = &g_rows[i];
        double gbs = r->bytes / (r->median_us * 1e-6) / 1e9;
        char target[32] = "-", err[24] = "-", rel[24] = "-";
        if (r->target_us > 0)
            snprintf(target, sizeof target, "%.0f (%s, %.2fx)", r->target_us,
                     r->median_us <= r->target_us ? "met" : "missed", r->median_us / r->target_us);
        if (r->max_abs >= 0) {
            snprintf(err, sizeof err, "%.2g", r->max_abs);
            snprintf(rel, sizeof rel, "%.2g", r->rel_l2);
        }
        const char *rep = r->repro < 0 ? "-" : r->repro ? "yes" : "no";
        const char *ok = r->max_abs < 0 ? "-" : r->ok ? "ok" : "FAIL";
        if (markdown)
            fprintf(f, "| %s | %s | %s | %lld | %.1f | %.1f | %d | %.1f | %s | %s | %s | %s | %s |\n",
                    r->device, r->what, r->variant, (long long)r->anchors, r->median_us, r->min_us,
                    r->iters, gbs, err, rel, rep, ok, target);
        else
            fprintf(f, "%-6s %-24s %-16s %7lld %9.1f %9.1f %6d %8.1f %9s %9s %5s %5s %s\n",
                    r->device, r->what, r->variant, (long long)r->anchors, r->median_us, r->min_us,
                    r->iters, gbs, err, rel, rep, ok, target);
    }
}

/* The fastest checked CUDA row whose kernel name starts with prefix (and, when repro, that is
   bitwise reproducible) at this many anchors; NULL when none. */
static const row *fastest(const char *prefix, const char *prefix2, int64_t anchors, int repro)
{
    const row *best = NULL;
    for (int i = 0; i < g_nrows; i++) {
        const row *r = &g_rows[i];
        if (strcmp(r->device, "cuda") || r->anchors != anchors || !r->ok ||
            (repro && r->repro != 1))
            continue;
        if (strcmp(r->what, prefix) && (!prefix2 || strcmp(r->what, prefix2)))
            continue;
        if (!best || r->median_us < best->median_us)
            best = r;
    }
    return best;
}

/* The targets, each as measured / target with the row that gives it. */
static void print_targets(FILE *f, int markdown)
{
    struct {
        const char *name, *what, *what2;
        int64_t anchors;
        double target;
        int repro;
    } t[] = {
        {"forward fp32, 900 anchors", "forward", "variant forward fp32", 900, 25.0, 0},
        {"forward fp16, 900 anchors", "forward fp16", "variant forward fp16", 900, 15.0, 0},
        {"forward fp32, 1800 anchors", "forward", "variant forward fp32", 1800, 45.0, 0},
        {"backward, 900 anchors", "backward", "variant backward", 900, 100.0, 0},
        {"deterministic backward, 900 anchors", "backward deterministic", "variant backward", 900,
         100.0, 1},
    };
    if (markdown)
        fprintf(f, "\n## Targets (fastest checked row; measured / target)\n\n| target | measured us | "
                   "target us | ratio | variant |\n| --- | --- | --- | --- | --- |\n");
    else
        fprintf(f, "\ntargets (fastest checked row):\n");
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const row *r = fastest(t[i].what, t[i].what2, t[i].anchors, t[i].repro);
        if (!r)
            continue;
        if (markdown)
            fprintf(f, "| %s | %.1f | %.0f | %.2f (%s) | %s |\n", t[i].name, r->median_us,
                    t[i].target, r->median_us / t[i].target,
                    r->median_us <= t[i].target ? "met" : "missed", r->variant);
        else
            fprintf(f, "  %-38s %7.1f / %3.0f us = %.2f (%s) [%s]\n", t[i].name, r->median_us,
                    t[i].target, r->median_us / t[i].target,
                    r->median_us <= t[i].target ? "met" : "missed", r->variant);
    }
    /* Deterministic forward <= 1.1 x the fastest forward. */
    for (int a = 0; a < 2; a++) {
        const int64_t n = a ? 1800 : 900;
        const row *any = fastest("forward", "variant forward fp32", n, 0);
        const row *det = fastest("forward deterministic", "variant forward fp32", n, 1);
        if (!any || !det)
            continue;
        if (markdown)
            fprintf(f, "| deterministic forward / fastest, %lld anchors | %.1f / %.1f | 1.10x | "
                       "%.2fx (%s) | %s |\n", (long long)n, det->median_us, any->median_us,
                    det->median_us / any->median_us,
                    det->median_us <= 1.1 * any->median_us ? "met" : "missed", det->variant);
        else
            fprintf(f, "  %-38s %7.1f / %.1f us = %.2fx of the fastest (%s) [%s]\n",
                    n == 900 ? "deterministic forward, 900 anchors" : "deterministic forward, 1800",
                    det->median_us, any->median_us, det->median_us / any->median_us,
                    det->median_us <= 1.1 * any->median_us ? "met" : "missed", det->variant);
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
               "- gpu: %s\n- workload: bs 1, 6 cameras, 4 levels (64x176 .. 8x22), C %lld, G 8, "
               "13 points; %.1f%% of (point, camera) pairs inside an image (last workload); points "
               "seen by 0/1/2/3+ cameras: %.1f/%.1f/%.1f/%.1f%%\n- GB/s: unique bytes touched / "
               "median time (see docs/ops/deformable_aggregation.md)\n- checks: each CUDA row "
               "against the CPU oracle on the same inputs (outputs poisoned first), and a second run "
               "compared bit for bit\n\n",
            date, cmdline, cpu, gpu, (long long)w->sizes.channels, 100 * w->inside_fraction,
            100 * w->seen_by[0],
            100 * w->seen_by[1], 100 * w->seen_by[2], 100 * w->seen_by[3]);
    print_table(f, 1);
    print_targets(f, 1);
    fclose(f);
    snprintf(path, sizeof path, "%s/bench.json", dir);
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "s4d_da_bench: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\n  \"date\": \"%s\",\n  \"command\": \"%s\",\n  \"cpu\": \"%s\",\n  \"gpu\": \"%s\",\n"
               "  \"channels\": %lld,\n  \"inside_fraction\": %.5f,\n  \"results\": [\n",
            date, cmdline, cpu, gpu, (long long)w->sizes.channels, w->inside_fraction);
    for (int i = 0; i < g_nrows; i++) {
        const row *r = &g_rows[i];
        fprintf(f, "    {\"device\": \"%s\", \"kernel\": \"%s\", \"variant\": \"%s\", \"anchors\": %lld, "
                   "\"median_us\": %.2f, \"min_us\": %.2f, \"iters\": %d, \"unique_bytes\": %.0f, "
                   "\"gbps\": %.2f, \"target_us\": %.0f, \"max_abs_err\": %.4g, \"rel_l2_err\": %.4g, "
                   "\"bitwise_repro\": %d, \"check_ok\": %s}%s\n",
                r->device, r->what, r->variant, (long long)r->anchors, r->median_us, r->min_us,
                r->iters, r->bytes, r->bytes / (r->median_us * 1e-6) / 1e9, r->target_us,
                r->max_abs, r->rel_l2, r->repro, r->ok ? "true" : "false",
                i + 1 < g_nrows ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    fclose(f);
    printf("results written to %s/bench.md and %s/bench.json\n", dir, dir);
    return 0;
}

/* Valid (point, camera) pairs of anchor a of batch item b: what its block works on. */
static int anchor_pairs(const da_workload *w, int64_t b, int64_t a)
{
    const int64_t pn = w->sizes.num_points * w->sizes.num_cams;
    const float *loc = w->sampling_location + (b * w->sizes.num_anchors + a) * pn * 2;
    int n = 0;
    for (int64_t i = 0; i < pn; i++)
        n += da_location_inside(loc[2 * i], loc[2 * i + 1]);
    return n;
}

/* --order, in the order of order_names in main. */
enum { ORDER_NATURAL, ORDER_DESC, ORDER_ASC, ORDER_SHUFFLE };

typedef struct {
    int key;
    int64_t index;
} anchor_key;

static int cmp_anchor_key(const void *x, const void *y)
{
    const anchor_key *a = x, *b = y;
    if (a->key != b->key)
        return a->key < b->key ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Permutes the anchors of every batch item (locations and weights together) by valid pairs,
   descending or ascending, or shuffled with the seed. 0 on success. */
static int order_anchors(da_workload *w, int order, uint64_t seed)
{
    const s4d_da_sizes *s = &w->sizes;
    const int64_t A = s->num_anchors, nl = s->num_points * s->num_cams * 2;
    const int64_t nw = s->num_points * s->num_cams * s->num_levels * s->num_groups;
    anchor_key *k = malloc(sizeof *k * (size_t)A);
    float *loc = malloc(sizeof *loc * (size_t)(A * nl));
    float *wt = malloc(sizeof *wt * (size_t)(A * nw));
    if (!k || !loc || !wt) {
        free(k);
        free(loc);
        free(wt);
        return 1;
    }
    uint64_t x = seed * 2862933555777941757ull + 3037000493ull;
    for (int64_t b = 0; b < s->batch; b++) {
        for (int64_t a = 0; a < A; a++) {
            const int pairs = anchor_pairs(w, b, a);
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            k[a].key = order == ORDER_DESC ? -pairs : order == ORDER_ASC ? pairs : (int)(x >> 33);
            k[a].index = a;
        }
        qsort(k, (size_t)A, sizeof *k, cmp_anchor_key);
        float *bl = w->sampling_location + b * A * nl, *bw = w->weights + b * A * nw;
        for (int64_t a = 0; a < A; a++) {
            memcpy(loc + a * nl, bl + k[a].index * nl, sizeof *loc * (size_t)nl);
            memcpy(wt + a * nw, bw + k[a].index * nw, sizeof *wt * (size_t)nw);
        }
        memcpy(bl, loc, sizeof *loc * (size_t)(A * nl));
        memcpy(bw, wt, sizeof *wt * (size_t)(A * nw));
    }
    free(k);
    free(loc);
    free(wt);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: s4d_da_bench [--anchors N[,N...]] [--channels C] [--iters K] [--warmup K]\n"
               "                    [--threads T]\n"
               "                    [--device auto|cpu|cuda] [--seed S] [--out DIR] [--summary]\n"
               "                    [--variants default|all] [--order natural|desc|asc|shuffle]\n");
}

int main(int argc, char **argv)
{
    int64_t anchors[8] = {900, 1800}, channels = 256;
    int nanchors = 2, iters = -1, warmup = 20, threads = 0, summary = 0, all_variants = 0,
        order = ORDER_NATURAL;
    static const char *const order_names[] = {"natural", "desc", "asc", "shuffle"};
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
        } else if (v && !strcmp(a, "--channels")) {
            char *end;
            long long c = strtoll(v, &end, 10);
            if (*end || c < 1 || c > 4096) {
                fprintf(stderr, "s4d_da_bench: bad --channels '%s' (1 to 4096)\n", v);
                return 2;
            }
            channels = c;
            i++;
        } else if (v && !strcmp(a, "--variants")) {
            if (strcmp(v, "all") && strcmp(v, "default")) {
                fprintf(stderr, "s4d_da_bench: --variants must be default or all, got '%s'\n", v);
                return 2;
            }
            all_variants = !strcmp(v, "all");
            i++;
        } else if (v && !strcmp(a, "--order")) {
            order = -1;
            for (int o = 0; o < 4; o++)
                if (!strcmp(v, order_names[o]))
                    order = o;
            if (order < 0) {
                fprintf(stderr, "s4d_da_bench: --order must be natural, desc, asc or shuffle, got "
                        "'%s'\n", v);
                return 2;
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
    int failed = 0;
#ifndef S4D_HAVE_CUDA
    (void)all_variants; /* variants are CUDA kernels */
#endif
    for (int k = 0; k < nanchors; k++) {
        da_workload_free(&w);
        if (da_workload_make(&w, 1, anchors[k], channels, seed) != 0) {
            fprintf(stderr, "s4d_da_bench: out of memory making the workload\n");
            return 1;
        }
        if (order != ORDER_NATURAL && order_anchors(&w, order, seed) != 0) {
            fprintf(stderr, "s4d_da_bench: out of memory ordering the anchors\n");
            return 1;
        }
        printf("workload (anchors %s): %lld anchors, %.1f%% of (point, camera) pairs inside an image "
               "(points seen by 0/1/2/3+ cameras: %.1f/%.1f/%.1f/%.1f%%), %lld unique feature rows\n",
               order_names[order], (long long)anchors[k], 100 * w.inside_fraction, 100 * w.seen_by[0],
               100 * w.seen_by[1], 100 * w.seen_by[2], 100 * w.seen_by[3],
               (long long)w.unique_rows);
        double checksum = 0;
        if (strcmp(device, "cuda") != 0 && bench_cpu(&w, cpu_iters, threads, &checksum) != 0)
            return 1;
        if (checksum != 0)
            printf("cpu forward: sum |out| = %.6g over %lld outputs\n", checksum,
                   (long long)(w.sizes.batch * w.sizes.num_anchors * w.sizes.channels));
#ifdef S4D_HAVE_CUDA
        if (gpu) {
            int grc = bench_gpu(&w, gpu_iters, warmup, all_variants, threads);
            if (grc != 0 && g_nrows == 0)
                return 1;
            if (grc != 0) {
                fprintf(stderr, "s4d_da_bench: a GPU check failed at %lld anchors; writing what "
                        "was measured\n", (long long)anchors[k]);
                failed = 1;
                break;
            }
        }
#endif
    }
    printf("\ncpu: %s\ngpu: %s\n", cpu_name, gpu_name);
    print_table(stdout, 0);
    print_targets(stdout, 0);
    int rc = 0;
    for (int i = 0; i < g_nrows; i++)
        if (!g_rows[i].ok)
            failed = 1;
    if (out)
        rc = write_results(out, cmdline, cpu_name, gpu_name, &w);
    da_workload_free(&w);
    if (failed)
        fprintf(stderr, "s4d_da_bench: FAILED: a CUDA kernel disagrees with the CPU oracle or is "
                "not reproducible (rows marked FAIL)\n");
    return rc || failed;
}
