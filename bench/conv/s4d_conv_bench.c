/*
 * Times every convolution of ResNet50 + FPN at a 1x3x256x704 input (or, with
 * --net=mbv2, of MobileNetV2 at 1x3x224x224; --net=r50, of ResNet-50 at 1x3x224x224) with the convolution library
 * (src/backend/cpu/conv) and with the path the Conv op takes today (bias
 * fill, im2col, OpenBLAS sgemm in panels on the pool, a residual/ReLU pass), on 1 and 2
 * threads.
 * A benchmark, not a test.
 *
 *   s4d_conv_bench [--net=r50fpn|r50|mbv2] [--threads=1,2] [--runs=7] [--warmup=2] [--all-algos]
 *                  [--cpu-time] [--isa=SET] [--only=NAME]
 *
 * Prints one markdown table per thread count: median (and min) ms per call for
 * each distinct shape, how often the network runs it, and the network's sum.
 * OpenBLAS keeps whatever OPENBLAS_CORETYPE the environment sets; the header
 * says which. --all-algos adds a column per algorithm the shape allows.
 * --cpu-time times CPU time instead of the wall clock: on a shared machine it
 * leaves out the time other processes take the cores (not their effect on the
 * caches). On one thread it is the calling thread's; on more, the process's
 * summed over its threads (so it shows the cost of splitting the work, not
 * the speed-up).
 * --isa=scalar|avx2|avx512 forces the library's instruction set.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/conv/cpuconv.h"
#include "ops/conv_common.h"
#include "ops/dense_util.h"
#include "ops/op.h"
#include "util/threadpool.h"

typedef struct shape {
    char name[48];
    int64_t c, h, w, m, k, s, p, group;
    int res, act, count; /* act: 0 none, 1 ReLU, 2 ReLU6 */
} shape;

static shape shapes[64];
static int nshapes;

static void add_g(const char *name, int64_t c, int64_t h, int64_t w, int64_t m, int64_t k, int64_t s, int64_t group,
                  int res, int act)
{
    for (int i = 0; i < nshapes; i++) {
        shape *q = &shapes[i];
        if (q->c == c && q->h == h && q->w == w && q->m == m && q->k == k && q->s == s && q->group == group &&
            q->res == res && q->act == act) {
            q->count++;
            return;
        }
    }
    shape *q = &shapes[nshapes++];
    snprintf(q->name, sizeof q->name, "%s", name);
    q->c = c;
    q->h = h;
    q->w = w;
    q->m = m;
    q->k = k;
    q->s = s;
    q->p = k / 2;
    q->group = group;
    q->res = res;
    q->act = act;
    q->count = 1;
}

static void add(const char *name, int64_t c, int64_t h, int64_t w, int64_t m, int64_t k, int64_t s, int res, int relu)
{
    add_g(name, c, h, w, m, k, s, 1, res, relu);
}

/* MobileNetV2 at 1x3x224x224 (torchvision's layout): ReLU6 after the stem,
 * the expansions and the depthwise convolutions; a residual on the
 * projections of stride-1 blocks whose width does not change. */
static void mobilenet_v2(void)
{
    static const int cfg[7][4] = {{1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2},
                                  {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1}};
    int64_t h = 224, in = 32;
    add_g("stem 3x3/2", 3, h, h, 32, 3, 2, 1, 0, 2);
    h = 112;
    for (int b = 0; b < 7; b++)
        for (int r = 0; r < cfg[b][2]; r++) {
            const int64_t t = cfg[b][0], out = cfg[b][1], s = r == 0 ? cfg[b][3] : 1, hid = in * t;
            const int64_t ho = (h - 1) / s + 1;
            char nm[48];
            if (t != 1) {
                snprintf(nm, sizeof nm, "expand 1x1 %lld", (long long)hid);
                add_g(nm, in, h, h, hid, 1, 1, 1, 0, 2);
            }
            snprintf(nm, sizeof nm, "depthwise 3x3%s %lld", s == 2 ? "/2" : "", (long long)hid);
            add_g(nm, hid, h, h, hid, 3, s, hid, 0, 2);
            snprintf(nm, sizeof nm, "project 1x1 %lld%s", (long long)out, s == 1 && in == out ? " +res" : "");
            add_g(nm, hid, ho, ho, out, 1, 1, 1, s == 1 && in == out, 0);
            in = out;
            h = ho;
        }
    add_g("head 1x1 1280", 320, 7, 7, 1280, 1, 1, 1, 0, 2);
}

/* The convolutions after BatchNorm folding and the Conv[+Add][+Relu] fusion:
 * every one has a bias; bottleneck conv3 adds the shortcut and applies ReLU;
 * FPN laterals of the three finer levels add the upsampled coarser one. */
static void resnet50_fpn_at(int64_t h, int64_t w, int fpn)
{
    add("stem 7x7/2", 3, h, w, 64, 7, 2, 0, 1);
    h /= 4;
    w /= 4; /* after the stem and the 3x3/2 max pool */
    int64_t in = 64;
    const int blocks[4] = {3, 4, 6, 3};
    int64_t lat_h[4], lat_w[4], lat_c[4];
    for (int st = 0; st < 4; st++) {
        int64_t planes = 64 << st;
        for (int b = 0; b < blocks[st]; b++) {
            int64_t s = st > 0 && b == 0 ? 2 : 1, ho = (h - 1) / s + 1, wo = (w - 1) / s + 1;
            char nm[48];
            snprintf(nm, sizeof nm, "L%d conv1 1x1", st + 1);
            add(nm, in, h, w, planes, 1, 1, 0, 1);
            snprintf(nm, sizeof nm, "L%d conv2 3x3%s", st + 1, s == 2 ? "/2" : "");
            add(nm, planes, h, w, planes, 3, s, 0, 1);
            if (b == 0) {
                snprintf(nm, sizeof nm, "L%d downsample 1x1%s", st + 1, s == 2 ? "/2" : "");
                add(nm, in, h, w, planes * 4, 1, s, 0, 0);
            }
            snprintf(nm, sizeof nm, "L%d conv3 1x1 +res", st + 1);
            add(nm, planes, ho, wo, planes * 4, 1, 1, 1, 1);
            in = planes * 4;
            h = ho;
            w = wo;
        }
        lat_h[st] = h;
        lat_w[st] = w;
        lat_c[st] = in;
    }
    for (int l = 0; l < 4 && fpn; l++) {
        char nm[48];
        snprintf(nm, sizeof nm, "FPN lateral P%d 1x1%s", l + 2, l < 3 ? " +res" : "");
        add(nm, lat_c[l], lat_h[l], lat_w[l], 256, 1, 1, l < 3, 0);
    }
    for (int l = 0; l < 4 && fpn; l++) {
        char nm[48];
        snprintf(nm, sizeof nm, "FPN out P%d 3x3", l + 2);
        add(nm, 256, lat_h[l], lat_w[l], 256, 3, 1, 0, 0);
    }
}

static void resnet50_fpn(void)
{
    resnet50_fpn_at(256, 704, 1);
}

static int cpu_time;      /* --cpu-time: CPU time instead of the wall clock */
static int cur_threads = 1;
static s4d_cpuconv_isa isa_flag = S4D_CPUCONV_ISA_AUTO;

static double now_ms(void)
{
    struct timespec t;
    /* one thread: that thread's time; more: the process's, summed over threads */
    clock_gettime(!cpu_time          ? CLOCK_MONOTONIC
                  : cur_threads > 1 ? CLOCK_PROCESS_CPUTIME_ID
                                    : CLOCK_THREAD_CPUTIME_ID,
                  &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static float *rand_buf(size_t n)
{
    float *p = malloc(sizeof(float) * (n ? n : 1));
    uint32_t s = 12345u + (uint32_t)n;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)((int32_t)(s >> 8) - (1 << 23)) / (float)(1 << 23);
    }
    return p;
}

/* ---- the Conv op's path today (src/backend/cpu/ops/conv.c), re-stated ---- */

typedef struct post_job {
    float *y;
    const float *z;
    int act;
} post_job;

static void post_range(void *arg, int64_t begin, int64_t end)
{
    const post_job *j = arg;
    for (int64_t i = begin; i < end; i++) {
        float v = j->y[i];
        if (j->z)
            v += j->z[i];
        if (j->act && !(v > 0.0f))
            v = v != v ? v : 0.0f;
        if (j->act == 2 && v > 6.0f)
            v = 6.0f;
        j->y[i] = v;
    }
}

/* Bias fill, then per group im2col (skipped for 1x1 stride 1) and one sgemm,
 * then a pass for the residual and the activation: what the Conv op does. */
static void baseline(const shape *q, s4d_threadpool *pool, const float *x, const float *w, const float *b,
                     const float *r, float *y, float *col)
{
    s4d_conv_geom g;
    memset(&g, 0, sizeof g);
    g.nsp = 2;
    int64_t ho = (q->h + 2 * q->p - q->k) / q->s + 1, wo = (q->w + 2 * q->p - q->k) / q->s + 1;
    int64_t dims_img[3] = {1, q->h, q->w}, dims_grid[3] = {1, ho, wo};
    for (int j = 0; j < 3; j++) {
        g.img[j] = dims_img[j];
        g.grid[j] = dims_grid[j];
        g.k[j] = j ? q->k : 1;
        g.stride[j] = j ? q->s : 1;
        g.dil[j] = 1;
        g.pad_b[j] = g.pad_e[j] = j ? q->p : 0;
    }
    const int64_t cg = q->c / q->group, mg = q->m / q->group;
    const int64_t ncol = ho * wo, kk = cg * q->k * q->k;
    const int direct = q->k == 1 && q->s == 1;
    for (int64_t o = 0; o < q->m; o++)
        for (int64_t i = 0; i < ncol; i++)
            y[o * ncol + i] = b[o];
    for (int64_t gi = 0; gi < q->group; gi++) {
        const float *xg = x + gi * cg * q->h * q->w, *cm = xg;
        if (!direct) {
            s4d_host_im2col(pool, &g, cg, xg, col);
            cm = col;
        }
        s4d_host_sgemm(pool, 0, 0, mg, ncol, kk, 1.0f, w + gi * mg * kk, kk, cm, ncol, 1.0f, y + gi * mg * ncol, ncol);
    }
    if (q->res || q->act) {
        post_job j = {y, q->res ? r : NULL, q->act};
        s4d_parallel_for(pool, q->m * ncol, 16384, post_range, &j);
    }
}

static void pool_for(void *pool, int64_t n, s4d_cpuconv_range_fn fn, void *arg)
{
    s4d_parallel_for(pool, n, 1, fn, arg);
}

typedef struct lib_case {
    s4d_cpuconv_plan *plan;
    void *packed, *ws;
    size_t ws_bytes;
    s4d_cpuconv_info info;
} lib_case;

static int lib_make(const shape *q, s4d_cpuconv_algo algo, int threads, const float *w, lib_case *lc)
{
    s4d_cpuconv_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.n = 1;
    p.c = q->c;
    p.h = q->h;
    p.w = q->w;
    p.m = q->m;
    p.kh = p.kw = q->k;
    p.stride_h = p.stride_w = q->s;
    p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = q->p;
    p.group = q->group;
    p.has_bias = 1;
    p.has_residual = q->res;
    p.act = q->act == 1 ? S4D_CPUCONV_ACT_RELU : q->act == 2 ? S4D_CPUCONV_ACT_CLIP : S4D_CPUCONV_ACT_NONE;
    p.act_min = 0.0f;
    p.act_max = 6.0f;
    p.algo = algo;
    p.isa = isa_flag;
    p.num_threads = threads;
    s4d_errbuf err;
    if (s4d_cpuconv_plan_create(&p, &lc->plan, &err) != S4D_OK)
        return 0;
    s4d_cpuconv_plan_info(lc->plan, &lc->info);
    lc->packed = malloc(lc->info.packed_bytes);
    lc->ws_bytes = lc->info.workspace_bytes;
    lc->ws = lc->ws_bytes ? malloc(lc->ws_bytes) : NULL;
    if (lc->ws)
        memset(lc->ws, 0, lc->ws_bytes);
    s4d_cpuconv_pack_weights(lc->plan, w, lc->packed, lc->info.packed_bytes, &err);
    return 1;
}

static void lib_free(lib_case *lc)
{
    s4d_cpuconv_plan_destroy(lc->plan);
    free(lc->packed);
    free(lc->ws);
}

typedef struct stat2 {
    double med, min;
} stat2;

static int runs = 7, warmup = 2;

#define TIME_IT(result, call)                                                                                \
    do {                                                                                                     \
        double t_[256];                                                                                      \
        for (int i_ = 0; i_ < warmup; i_++) {                                                                \
            call;                                                                                            \
        }                                                                                                    \
        for (int i_ = 0; i_ < runs; i_++) {                                                                  \
            double t0_ = now_ms();                                                                           \
            call;                                                                                            \
            t_[i_] = now_ms() - t0_;                                                                         \
        }                                                                                                    \
        qsort(t_, (size_t)runs, sizeof(double), cmp_double);                                                 \
        (result).med = t_[runs / 2];                                                                         \
        (result).min = t_[0];                                                                                \
    } while (0)

static void loadavg(char *buf, size_t n)
{
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = '\0';
    if (f) {
        if (!fgets(buf, (int)n, f))
            buf[0] = '\0';
        fclose(f);
        buf[strcspn(buf, "\n")] = '\0';
    }
}

int main(int argc, char **argv)
{
    int threads[4] = {1, 2}, nthreads = 2, all_algos = 0;
    const char *only = NULL, *net = "r50fpn";
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--threads=", 10) == 0) {
            nthreads = 0;
            for (char *s = argv[i] + 10; *s && nthreads < 4;) {
                threads[nthreads++] = (int)strtol(s, &s, 10);
                if (*s == ',')
                    s++;
            }
        } else if (strncmp(argv[i], "--runs=", 7) == 0) {
            runs = atoi(argv[i] + 7);
        } else if (strncmp(argv[i], "--warmup=", 9) == 0) {
            warmup = atoi(argv[i] + 9);
        } else if (strncmp(argv[i], "--isa=", 6) == 0) {
            const char *v = argv[i] + 6;
            isa_flag = strcmp(v, "scalar") == 0 ? S4D_CPUCONV_ISA_SCALAR
                       : strcmp(v, "avx2") == 0 ? S4D_CPUCONV_ISA_AVX2
                       : strcmp(v, "avx512") == 0 ? S4D_CPUCONV_ISA_AVX512
                                                  : S4D_CPUCONV_ISA_AUTO;
        } else if (strcmp(argv[i], "--cpu-time") == 0) {
            cpu_time = 1;
        } else if (strcmp(argv[i], "--all-algos") == 0) {
            all_algos = 1;
        } else if (strncmp(argv[i], "--net=", 6) == 0) {
            net = argv[i] + 6;
        } else if (strncmp(argv[i], "--only=", 7) == 0) {
            only = argv[i] + 7;
        } else {
            fprintf(stderr,
                    "usage: %s [--net=r50fpn|r50|mbv2] [--threads=1,2] [--runs=7] [--warmup=2] [--all-algos] [--cpu-time]\n"
                    "       [--isa=scalar|avx2|avx512] [--only=NAME]\n",
                    argv[0]);
            return 2;
        }
    }
    if (runs < 1 || runs > 256)
        runs = 7;
    if (strcmp(net, "mbv2") == 0) {
        mobilenet_v2();
    } else if (strcmp(net, "r50fpn") == 0) {
        resnet50_fpn();
    } else if (strcmp(net, "r50") == 0) {
        resnet50_fpn_at(224, 224, 0);
    } else {
        fprintf(stderr, "s4d_conv_bench: unknown network '%s' (r50fpn, r50, mbv2)\n", net);
        return 2;
    }
    const char *core = getenv("OPENBLAS_CORETYPE");
    char load[128];
    loadavg(load, sizeof load);
    printf("# %s convolutions\n\n",
           strcmp(net, "mbv2") == 0  ? "MobileNetV2, 1x3x224x224,"
           : strcmp(net, "r50") == 0 ? "ResNet-50, 1x3x224x224,"
                                     : "ResNet50+FPN, 1x3x256x704,");
    printf("- OpenBLAS: %s, OPENBLAS_CORETYPE=%s (core in use: %s)\n", openblas_get_config(), core ? core : "(unset)",
           openblas_get_corename());
    printf("- convolution library: %s kernels (this CPU's best: %s)\n",
           s4d_cpuconv_isa_name(isa_flag == S4D_CPUCONV_ISA_AUTO ? s4d_cpuconv_isa_best() : isa_flag),
           s4d_cpuconv_isa_name(s4d_cpuconv_isa_best()));
    printf("- median (min) of %d runs after %d warm-up runs; ms per call (%s); load average at start: %s\n\n", runs,
           warmup, cpu_time ? "CPU time: the thread's on 1 thread, the process's on more" : "wall clock", load);

    size_t max_x = 0, max_y = 0, max_w = 0, max_col = 0;
    for (int i = 0; i < nshapes; i++) {
        const shape *q = &shapes[i];
        int64_t ho = (q->h + 2 * q->p - q->k) / q->s + 1, wo = (q->w + 2 * q->p - q->k) / q->s + 1;
        size_t nx = (size_t)(q->c * q->h * q->w), ny = (size_t)(q->m * ho * wo);
        size_t nw = (size_t)(q->m * (q->c / q->group) * q->k * q->k);
        size_t ncol = (size_t)((q->c / q->group) * q->k * q->k * ho * wo);
        max_x = nx > max_x ? nx : max_x;
        max_y = ny > max_y ? ny : max_y;
        max_w = nw > max_w ? nw : max_w;
        max_col = ncol > max_col ? ncol : max_col;
    }
    float *x = rand_buf(max_x), *w = rand_buf(max_w), *b = rand_buf(4096), *r = rand_buf(max_y);
    float *y = rand_buf(max_y), *col = rand_buf(max_col);
    for (size_t i = 0; i < max_w; i++)
        w[i] *= 0.05f;

    for (int ti = 0; ti < nthreads; ti++) {
        const int t = threads[ti];
        cur_threads = t;
        s4d_threadpool *pool = NULL;
        if (s4d_threadpool_create(t, &pool) != S4D_OK) {
            fprintf(stderr, "s4d_conv_bench: cannot create a pool of %d threads\n", t);
            return 1;
        }
        printf("## %d thread%s\n\n", t, t > 1 ? "s" : "");
        printf("| conv | C>M | HxW in | count | GFLOP | im2col+sgemm ms | library ms | algorithm | speed-up |%s\n",
               all_algos ? " gemm ms | winograd2 ms | winograd4 ms |" : "");
        printf("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |%s\n",
               all_algos ? " ---: | ---: | ---: |" : "");
        double sum_base = 0.0, sum_lib = 0.0, sum_flop = 0.0;
        for (int i = 0; i < nshapes; i++) {
            const shape *q = &shapes[i];
            if (only && !strstr(q->name, only))
                continue;
            stat2 sb, sl;
            TIME_IT(sb, baseline(q, pool, x, w, b, r, y, col));
            lib_case lc;
            if (!lib_make(q, S4D_CPUCONV_ALGO_AUTO, t, w, &lc)) {
                fprintf(stderr, "s4d_conv_bench: no plan for %s\n", q->name);
                return 1;
            }
            TIME_IT(sl, s4d_cpuconv_run(lc.plan, lc.packed, x, b, r, y, lc.ws, lc.ws_bytes, pool_for, pool, NULL));
            int64_t ho = (q->h + 2 * q->p - q->k) / q->s + 1, wo = (q->w + 2 * q->p - q->k) / q->s + 1;
            double gflop = 2e-9 * (double)(q->m * (q->c / q->group) * q->k * q->k * ho * wo);
            printf("| %s | %lld>%lld | %lldx%lld | %d | %.2f | %.2f (%.2f) | %.2f (%.2f) | %s | %.2f |", q->name,
                   (long long)q->c, (long long)q->m, (long long)q->h, (long long)q->w, q->count, gflop, sb.med, sb.min,
                   sl.med, sl.min, s4d_cpuconv_algo_name(lc.info.algo), sb.med / sl.med);
            lib_free(&lc);
            if (all_algos) {
                s4d_cpuconv_algo algos[3] = {S4D_CPUCONV_ALGO_GEMM, S4D_CPUCONV_ALGO_WINOGRAD2,
                                             S4D_CPUCONV_ALGO_WINOGRAD4};
                for (int a = 0; a < 3; a++) {
                    lib_case la;
                    if (!lib_make(q, algos[a], t, w, &la)) {
                        printf(" - |");
                        continue;
                    }
                    stat2 sa;
                    TIME_IT(sa, s4d_cpuconv_run(la.plan, la.packed, x, b, r, y, la.ws, la.ws_bytes, pool_for, pool,
                                                NULL));
                    printf(" %.2f |", sa.med);
                    lib_free(&la);
                }
            }
            printf("\n");
            fflush(stdout);
            sum_base += q->count * sb.med;
            sum_lib += q->count * sl.med;
            sum_flop += q->count * gflop;
        }
        printf("| **network (sum x count)** | | | | %.1f | %.1f | %.1f | | %.2f |%s\n\n", sum_flop, sum_base, sum_lib,
               sum_base / sum_lib, all_algos ? " | | |" : "");
        s4d_threadpool_destroy(pool);
    }
    loadavg(load, sizeof load);
    printf("load average at the end: %s\n", load);
    free(x);
    free(w);
    free(b);
    free(r);
    free(y);
    free(col);
    return 0;
}
