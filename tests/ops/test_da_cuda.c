/*
 * CUDA deformable aggregation against the CPU oracle (s4d_da_*_cpu).
 * Exits 77 (CTest skip) where no GPU is usable.
 * Usage: test_da_cuda forward|backward|fp16|determinism|graph|unaligned|large|small [VARIANTS]
 * ("small" runs a quick mix of all, for compute-sanitizer.)
 *
 * Each case runs through the public functions (both algos of the backward),
 * then once per kernel variant of da_variants.h: forward cases over every
 * forward variant, backward cases over every backward variant, mixed cases over
 * both. VARIANTS "public" runs the public functions only.
 */
#include <cuda_runtime_api.h>

#include "da_test_util.h"
#include "da_variants.h"

#define CUDA_OK(call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorString(e_));                                                 \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/*
 * The kernels run on a non-blocking stream (so that a launch on the legacy
 * default stream would show), which does not order itself after cudaMemcpy or
 * cudaMemset: every setup step therefore ends with a device synchronisation.
 */
static void dev_sync(void)
{
    CUDA_OK(cudaDeviceSynchronize());
}

static void *dev_copy(const void *h, size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    if (bytes)
        CUDA_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    dev_sync();
    return d;
}

static void *dev_alloc(size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes ? bytes : 16));
    /* Garbage, so that a missed element shows. */
    CUDA_OK(cudaMemset(d, 0x7f, bytes ? bytes : 16));
    dev_sync();
    return d;
}

static void to_host(void *h, const void *d, size_t bytes)
{
    CUDA_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* The device copy of a problem; feat/w may be float16 (fh/wh given). */
typedef struct dproblem {
    void *feat, *w;
    int32_t *shape, *start;
    float *loc;
} dproblem;

static void dproblem_make(const problem *p, dproblem *d, const uint16_t *fh, const uint16_t *wh)
{
    d->feat = fh ? dev_copy(fh, 2 * (size_t)n_feat(p)) : dev_copy(p->feat, 4 * (size_t)n_feat(p));
    d->w = wh ? dev_copy(wh, 2 * (size_t)n_w(p)) : dev_copy(p->w, 4 * (size_t)n_w(p));
    d->shape = (int32_t *)dev_copy(p->shape, 8 * (size_t)(p->s.num_cams * p->s.num_levels));
    d->start = (int32_t *)dev_copy(p->start, 4 * (size_t)(p->s.num_cams * p->s.num_levels));
    d->loc = (float *)dev_copy(p->loc, 8 * (size_t)n_pairs(p));
}

static void dproblem_free(dproblem *d)
{
    cudaFree(d->feat);
    cudaFree(d->w);
    cudaFree(d->shape);
    cudaFree(d->start);
    cudaFree(d->loc);
}

static s4d_da_forward_args dfwd_args(const problem *p, const dproblem *d, void *out)
{
    s4d_da_forward_args a = fwd_args(p, out);
    a.features = d->feat;
    a.weights = d->w;
    a.spatial_shape = d->shape;
    a.scale_start_index = d->start;
    a.sampling_location = d->loc;
    return a;
}

/* The backward's arguments a (host pointers, dtypes) with d's device inputs and the given
   device grad_output and gradients. */
static s4d_da_backward_args dbwd_args(const s4d_da_backward_args *a, const dproblem *d,
                                      const void *gout, void *gfeat, float *gloc, void *gw)
{
    s4d_da_backward_args g = *a;
    g.features = d->feat;
    g.weights = d->w;
    g.spatial_shape = d->shape;
    g.scale_start_index = d->start;
    g.sampling_location = d->loc;
    g.grad_output = gout;
    g.grad_features = gfeat;
    g.grad_sampling_location = gloc;
    g.grad_weights = gw;
    return g;
}

static cudaStream_t g_stream;

/* The kernels under test: a variant index, or -1 for the public function (its algo); the
   backward's -2 is the public function with S4D_DA_ALGO_DETERMINISTIC. */
static int g_fv = -1, g_bv = -1;

static s4d_status forward_call(const s4d_da_forward_args *a, s4d_da_algo algo, s4d_errbuf *e)
{
    if (g_fv < 0)
        return s4d_da_forward_cuda(a, algo, NULL, g_stream, e);
    return s4d_da_forward_cuda_variant(a, g_fv, NULL, g_stream, NULL, e);
}

static size_t backward_ws_size(const s4d_da_sizes *s)
{
    if (g_bv == -1)
        return s4d_da_backward_workspace_size(s);
    if (g_bv == -2)
        return s4d_da_backward_workspace_size_algo(s, S4D_DA_ALGO_DETERMINISTIC);
    return s4d_da_backward_workspace_size_variant(s, g_bv);
}

static s4d_status backward_call(const s4d_da_backward_args *a, void *ws, s4d_errbuf *e)
{
    if (g_bv == -1)
        return s4d_da_backward_cuda(a, ws, g_stream, e);
    if (g_bv == -2)
        return s4d_da_backward_cuda_algo(a, S4D_DA_ALGO_DETERMINISTIC, ws, g_stream, e);
    return s4d_da_backward_cuda_variant(a, g_bv, ws, g_stream, NULL, e);
}

/* Whether the backward under test promises bitwise-equal gradients run to run. */
static int backward_deterministic(void)
{
    return g_bv == -2 || (g_bv >= 0 && s4d_da_cuda_bwd_variant_deterministic(g_bv));
}

static void gpu_forward(s4d_da_forward_args *a, s4d_da_algo algo)
{
    s4d_errbuf e = {{0}};
    s4d_status st = forward_call(a, algo, &e);
    CHECK(st == S4D_OK, "forward_cuda: %s", e.msg);
    CUDA_OK(cudaStreamSynchronize(g_stream));
}

/* Runs the backward under test with a workspace of the size it asks for; synchronises. */
static s4d_status gpu_backward(const s4d_da_backward_args *a, s4d_errbuf *e)
{
    size_t bytes = backward_ws_size(&a->sizes);
    void *ws = NULL;
    if (bytes)
        CUDA_OK(cudaMalloc(&ws, bytes));
    s4d_status st = backward_call(a, ws, e);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    cudaFree(ws);
    return st;
}

/* GPU forward (fp32) vs CPU forward on the same problem. */
static double fwd_vs_cpu(problem *p, s4d_da_algo algo)
{
    int64_t no = n_out(p);
    float *cpu = (float *)malloc(4 * (size_t)no), *gpu = (float *)malloc(4 * (size_t)no);
    s4d_da_forward_args ca = fwd_args(p, cpu);
    CHECK(s4d_da_forward_cpu(&ca, 0, NULL) == S4D_OK, "cpu forward");
    dproblem d;
    dproblem_make(p, &d, NULL, NULL);
    void *dout = dev_alloc(4 * (size_t)no);
    s4d_da_forward_args ga = dfwd_args(p, &d, dout);
    gpu_forward(&ga, algo);
    to_host(gpu, dout, 4 * (size_t)no);
    double *cd = to_double(cpu, no);
    double err = rel_l2_f(cd, gpu, no);
    free(cd);
    free(cpu);
    free(gpu);
    cudaFree(dout);
    dproblem_free(&d);
    return err;
}

static int test_forward(void)
{
    const int64_t groups[] = {1, 4, 8};
    const int64_t chans[] = {32, 64, 128, 256, 512, 36, 200};
    for (int it = 0; it < 14; it++) {
        problem p;
        int64_t C = chans[it % 7], G = groups[it % 3];
        if (C % G)
            G = 4;
        problem_alloc(&p, 1 + it % 3, 1 + it % 6, 1 + it % 4, C, G, 5 + 7 * it, 1 + it % 13, 64,
                      176);
        problem_locations(&p, 0.4);
        double err = fwd_vs_cpu(&p, it % 2 ? S4D_DA_ALGO_DETERMINISTIC : S4D_DA_ALGO_FAST);
        CHECK(err <= 1e-6, "forward case %d (C %lld G %lld): rel L2 vs CPU %g", it, (long long)C,
              (long long)G, err);
        problem_free(&p);
    }
    /* More (point, camera) pairs than threads in a block: the compaction runs in chunks. */
    problem q;
    problem_alloc(&q, 2, 5, 2, 64, 4, 17, 120, 32, 48);
    problem_locations(&q, 0.3);
    for (int algo = 0; algo < 2; algo++) {
        double err = fwd_vs_cpu(&q, (s4d_da_algo)algo);
        CHECK(err <= 1e-6, "600 pairs per anchor, algo %d: rel L2 vs CPU %g", algo, err);
    }
    problem_free(&q);
    return 0;
}

/* CPU backward results kept per slot (bwd_compare's cache argument) across the kernel variants. */
#define ORACLE_SLOTS 8
static struct {
    void *f, *w;
    float *l;
} g_bwd_oracle[ORACLE_SLOTS];

/*
 * The GPU backward against the CPU's on p; returns the worst relative L2 of the three
 * gradients. cache in [0, ORACLE_SLOTS): the CPU's results for this slot are computed once
 * per process and reused (the caller guarantees the same problem, inputs and dtypes in a
 * slot); -1 computes them every time.
 */
static double bwd_compare(problem *p, const uint16_t *fh, const uint16_t *wh, int half_gout, int cache)
{
    int64_t no = n_out(p), nf = n_feat(p), nw = n_w(p), nl = 2 * n_pairs(p);
    float *gout = (float *)malloc(4 * (size_t)no);
    uint16_t *gouth = (uint16_t *)malloc(2 * (size_t)no);
    for (int64_t i = 0; i < no; i++) {
        gout[i] = rng_nonzero();
        gouth[i] = double_to_half_bits(gout[i]);
        if (half_gout)
            gout[i] = (float)half_bits_to_double(gouth[i]);
    }
    size_t fs = fh ? 2 : 4, ws = wh ? 2 : 4;
    void *cf = malloc(fs * (size_t)nf), *cw = malloc(ws * (size_t)nw);
    float *cl = (float *)malloc(4 * (size_t)nl);
    s4d_da_backward_args ca = bwd_args(p, gout, NULL, cl, NULL);
    ca.grad_features = cf;
    ca.grad_weights = cw;
    if (fh) {
        ca.features = fh;
        ca.features_dtype = S4D_DTYPE_FLOAT16;
    }
    if (wh) {
        ca.weights = wh;
        ca.weights_dtype = S4D_DTYPE_FLOAT16;
    }
    if (half_gout) {
        ca.grad_output = gouth;
        ca.grad_output_dtype = S4D_DTYPE_FLOAT16;
    }
    s4d_errbuf e = {{0}};
    if (cache >= 0 && cache < ORACLE_SLOTS && g_bwd_oracle[cache].f) {
        memcpy(cf, g_bwd_oracle[cache].f, fs * (size_t)nf);
        memcpy(cw, g_bwd_oracle[cache].w, ws * (size_t)nw);
        memcpy(cl, g_bwd_oracle[cache].l, 4 * (size_t)nl);
    } else {
        CHECK(s4d_da_backward_cpu(&ca, 0, &e) == S4D_OK, "cpu backward: %s", e.msg);
        if (cache >= 0 && cache < ORACLE_SLOTS) {
            g_bwd_oracle[cache].f = malloc(fs * (size_t)nf);
            g_bwd_oracle[cache].w = malloc(ws * (size_t)nw);
            g_bwd_oracle[cache].l = (float *)malloc(4 * (size_t)nl);
            memcpy(g_bwd_oracle[cache].f, cf, fs * (size_t)nf);
            memcpy(g_bwd_oracle[cache].w, cw, ws * (size_t)nw);
            memcpy(g_bwd_oracle[cache].l, cl, 4 * (size_t)nl);
        }
    }
    dproblem d;
    dproblem_make(p, &d, fh, wh);
    void *dgo = half_gout ? dev_copy(gouth, 2 * (size_t)no) : dev_copy(gout, 4 * (size_t)no);
    void *df = dev_alloc(fs * (size_t)nf), *dw = dev_alloc(ws * (size_t)nw);
    float *dl = (float *)dev_alloc(4 * (size_t)nl);
    s4d_da_backward_args ga = dbwd_args(&ca, &d, dgo, df, dl, dw);
    CHECK(gpu_backward(&ga, &e) == S4D_OK, "backward_cuda: %s", e.msg);
    void *hf = malloc(fs * (size_t)nf), *hw = malloc(ws * (size_t)nw);
    float *hl = (float *)malloc(4 * (size_t)nl);
    to_host(hf, df, fs * (size_t)nf);
    to_host(hw, dw, ws * (size_t)nw);
    to_host(hl, dl, 4 * (size_t)nl);
    double worst = 0;
    const void *pairs[2][2] = {{cf, hf}, {cw, hw}};
    const int64_t counts[2] = {nf, nw};
    const size_t sizes[2] = {fs, ws};
    for (int t = 0; t < 2; t++) {
        double *want = (double *)malloc(8 * (size_t)counts[t]);
        double *got = (double *)malloc(8 * (size_t)counts[t]);
        for (int64_t i = 0; i < counts[t]; i++) {
            if (sizes[t] == 2) {
                want[i] = half_bits_to_double(((const uint16_t *)pairs[t][0])[i]);
                got[i] = half_bits_to_double(((const uint16_t *)pairs[t][1])[i]);
            } else {
                want[i] = ((const float *)pairs[t][0])[i];
                got[i] = ((const float *)pairs[t][1])[i];
            }
        }
        double err = rel_l2(want, got, counts[t]);
        if (err > worst)
            worst = err;
        fprintf(stderr, "  %s rel L2 %.3g\n", t ? "grad_weights" : "grad_features", err);
        free(want);
        free(got);
    }
    double *cld = to_double(cl, nl);
    double el = rel_l2_f(cld, hl, nl);
    fprintf(stderr, "  grad_sampling_location rel L2 %.3g\n", el);
    if (el > worst)
        worst = el;
    free(cld);
    free(gout); free(gouth); free(cf); free(cw); free(cl); free(hf); free(hw); free(hl);
    cudaFree(dgo); cudaFree(df); cudaFree(dw); cudaFree(dl);
    dproblem_free(&d);
    return worst;
}

/* Each subset of the gradients (the others NULL) against the CPU oracle of all three: the
   variants that split the work (items_w8_split) run other kernels for a subset. Returns the
   worst relative L2. */
static double bwd_subsets(problem *p)
{
    const int64_t no = n_out(p), nf = n_feat(p), nw = n_w(p), nl = 2 * n_pairs(p);
    float *gout = (float *)malloc(4 * (size_t)no);
    for (int64_t i = 0; i < no; i++)
        gout[i] = rng_nonzero();
    float *cf = (float *)malloc(4 * (size_t)nf), *cw = (float *)malloc(4 * (size_t)nw);
    float *cl = (float *)malloc(4 * (size_t)nl);
    s4d_da_backward_args ca = bwd_args(p, gout, cf, cl, cw);
    s4d_errbuf e = {{0}};
    CHECK(s4d_da_backward_cpu(&ca, 0, &e) == S4D_OK, "cpu backward: %s", e.msg);
    dproblem d;
    dproblem_make(p, &d, NULL, NULL);
    void *dgo = dev_copy(gout, 4 * (size_t)no);
    static const char *const names[3] = {"grad_features", "grad_sampling_location", "grad_weights"};
    const int64_t counts[3] = {nf, nl, nw};
    const float *want[3] = {cf, cl, cw};
    double worst = 0;
    /* Bit i of the mask: gradient i asked for. */
    for (int mask = 1; mask < 7; mask++) {
        void *dev[3] = {NULL, NULL, NULL};
        for (int t = 0; t < 3; t++)
            if (mask >> t & 1)
                dev[t] = dev_alloc(4 * (size_t)counts[t]);
        s4d_da_backward_args ga = dbwd_args(&ca, &d, dgo, dev[0], (float *)dev[1], dev[2]);
        CHECK(gpu_backward(&ga, &e) == S4D_OK, "backward_cuda (gradients %d): %s", mask, e.msg);
        for (int t = 0; t < 3; t++) {
            if (!dev[t])
                continue;
            float *h = (float *)malloc(4 * (size_t)counts[t]);
            to_host(h, dev[t], 4 * (size_t)counts[t]);
            double *w = to_double(want[t], counts[t]);
            const double err = rel_l2_f(w, h, counts[t]);
            if (err > worst || err != err)
                worst = err != err ? INFINITY : err;
            if (err > 1e-5 || err != err)
                fprintf(stderr, "  gradients %d: %s rel L2 %.3g\n", mask, names[t], err);
            free(w);
            free(h);
            cudaFree(dev[t]);
        }
    }
    free(gout); free(cf); free(cw); free(cl);
    cudaFree(dgo);
    dproblem_free(&d);
    return worst;
}

static int test_backward(void)
{
    if (g_bv == -2) {
        /* The deterministic backward names its workspace when it is missing. */
        problem q;
        problem_alloc(&q, 1, 2, 2, 64, 4, 8, 5, 16, 24);
        problem_locations(&q, 0.5);
        size_t need = s4d_da_backward_workspace_size_algo(&q.s, S4D_DA_ALGO_DETERMINISTIC);
        CHECK(need > 0, "the deterministic backward asks for no workspace");
        dproblem d;
        dproblem_make(&q, &d, NULL, NULL);
        int64_t no = n_out(&q);
        float *gout = (float *)malloc(4 * (size_t)no);
        for (int64_t i = 0; i < no; i++)
            gout[i] = rng_nonzero();
        void *dgo = dev_copy(gout, 4 * (size_t)no), *gf = dev_alloc(4 * (size_t)n_feat(&q));
        const s4d_da_backward_args ha = bwd_args(&q, gout, NULL, NULL, NULL);
        s4d_da_backward_args ga = dbwd_args(&ha, &d, dgo, gf, NULL, NULL);
        s4d_errbuf e = {{0}};
        s4d_status st = s4d_da_backward_cuda_algo(&ga, S4D_DA_ALGO_DETERMINISTIC, NULL, g_stream, &e);
        CHECK(st == S4D_ERR_INVALID_ARG && strstr(e.msg, "workspace"),
              "NULL workspace: status %d, message '%s'", (int)st, e.msg);
        free(gout);
        cudaFree(dgo);
        cudaFree(gf);
        dproblem_free(&d);
        problem_free(&q);
    }
    const int64_t chans[] = {32, 64, 256, 36};
    for (int it = 0; it < 8; it++) {
        problem p;
        int64_t C = chans[it % 4], G = it % 2 ? 4 : 8;
        if (C % G)
            G = 4;
        problem_alloc(&p, 1 + it % 2, 1 + it % 6, 1 + it % 4, C, G, 10 + 9 * it, 13, 64, 176);
        problem_locations(&p, 0.5);
        double err = bwd_compare(&p, NULL, NULL, 0, -1);
        CHECK(err <= 1e-5, "backward case %d: worst rel L2 vs CPU %g", it, err);
        if (g_bv >= 0 && it == 2) { /* 256 channels: two vectors per lane */
            err = bwd_subsets(&p);
            CHECK(err <= 1e-5, "backward case %d, each subset of the gradients: worst rel L2 %g",
                  it, err);
        }
        problem_free(&p);
    }
    problem q;
    problem_alloc(&q, 1, 5, 2, 64, 4, 9, 120, 32, 48); /* 600 pairs per anchor */
    problem_locations(&q, 0.3);
    double err = bwd_compare(&q, NULL, NULL, 0, -1);
    CHECK(err <= 1e-5, "backward with 600 pairs per anchor: worst rel L2 vs CPU %g", err);
    problem_free(&q);
    return 0;
}

static void make_half(problem *p, uint16_t **fh, uint16_t **wh)
{
    *fh = (uint16_t *)malloc(2 * (size_t)n_feat(p));
    *wh = (uint16_t *)malloc(2 * (size_t)n_w(p));
    quantise_half(p->feat, n_feat(p), *fh);
    quantise_half(p->w, n_w(p), *wh);
}

static int test_fp16(void)
{
    /* Every kernel variant sees the same six problems: they, their float16 copies and the CPU
       oracles (most of this test's time) are made once per process. Each problem draws from
       its own seed, and the random numbers after it (the backward's grad_output) continue
       from where its inputs left the generator, so every run compares the same values. */
    enum { NPROB = 6 };
    static problem probs[NPROB];
    static uint16_t *halves[NPROB][2];
    static uint64_t rng_after[NPROB];
    static float *fwd_oracle[NPROB];
    for (int it = 0; it < NPROB; it++) {
        problem *pp = &probs[it];
        if (!fwd_oracle[it]) {
            g_rng = 0x51ed270b27d4eb4full + 0x9e3779b97f4a7c15ull * (uint64_t)it;
            /* maps up to 32 x 88: the float16 paths do not depend on the map size, and the
               full 64 x 176 made this test the slowest of the GPU suite */
            problem_alloc(pp, 1 + it % 2, 6, 4, it % 3 == 2 ? 40 : 256, 8, 60, 13, 32, 88);
            problem_locations(pp, 0.3);
            make_half(pp, &halves[it][0], &halves[it][1]);
            rng_after[it] = g_rng;
        }
        g_rng = rng_after[it];
        problem p = *pp; /* a shallow copy: the cache keeps the buffers */
        uint16_t *fh = halves[it][0], *wh = halves[it][1];
        int64_t no = n_out(&p);
        /* CPU oracle on float16 inputs with float32 output. */
        if (!fwd_oracle[it]) {
            fwd_oracle[it] = (float *)malloc(4 * (size_t)no);
            s4d_da_forward_args ca = fwd_args(&p, fwd_oracle[it]);
            CHECK(s4d_da_forward_cpu(&ca, 0, NULL) == S4D_OK, "cpu forward");
        }
        double *cd = to_double(fwd_oracle[it], no);
        /* float32 copies hold the same (rounded) values, so one oracle serves every mix. */
        dproblem d, d32;
        dproblem_make(&p, &d, fh, wh);
        dproblem_make(&p, &d32, NULL, NULL);
        for (int mix = 0; mix < 8; mix++) {
            const int fhalf = mix & 1, whalf = (mix >> 1) & 1, ohalf = (mix >> 2) & 1;
            void *dout = dev_alloc((ohalf ? 2 : 4) * (size_t)no);
            s4d_da_forward_args ga = dfwd_args(&p, &d32, dout);
            if (fhalf) {
                ga.features = d.feat;
                ga.features_dtype = S4D_DTYPE_FLOAT16;
            }
            if (whalf) {
                ga.weights = d.w;
                ga.weights_dtype = S4D_DTYPE_FLOAT16;
            }
            ga.output_dtype = ohalf ? S4D_DTYPE_FLOAT16 : S4D_DTYPE_FLOAT32;
            gpu_forward(&ga, (s4d_da_algo)(mix % 2 == it % 2));
            double *got = (double *)malloc(8 * (size_t)no);
            if (ohalf) {
                uint16_t *h = (uint16_t *)malloc(2 * (size_t)no);
                to_host(h, dout, 2 * (size_t)no);
                for (int64_t i = 0; i < no; i++)
                    got[i] = half_bits_to_double(h[i]);
                free(h);
            } else {
                float *h = (float *)malloc(4 * (size_t)no);
                to_host(h, dout, 4 * (size_t)no);
                for (int64_t i = 0; i < no; i++)
                    got[i] = h[i];
                free(h);
            }
            double err = rel_l2(cd, got, no);
            double tol = ohalf ? 2e-3 : 1e-6;
            CHECK(err <= tol, "fp16 forward case %d (features %s, weights %s, output %s): rel L2 "
                  "%g > %g", it, fhalf ? "fp16" : "fp32", whalf ? "fp16" : "fp32",
                  ohalf ? "fp16" : "fp32", err, tol);
            free(got);
            cudaFree(dout);
        }
        dproblem_free(&d32);
        dproblem_free(&d);
        double eb = bwd_compare(&p, it % 4 != 1 ? fh : NULL, it % 4 != 2 ? wh : NULL, it % 2, it);
        CHECK(eb <= 2e-3, "fp16 backward case %d: worst rel L2 %g", it, eb);
        free(cd);
    }
    return 0;
}

static int test_determinism(void)
{
    problem p;
    problem_alloc(&p, 1, 6, 4, 256, 8, 900, 13, 64, 176);
    problem_locations(&p, 0.2);
    int64_t no = n_out(&p);
    dproblem d;
    dproblem_make(&p, &d, NULL, NULL);
    void *dout = dev_alloc(4 * (size_t)no);
    float *first = (float *)malloc(4 * (size_t)no), *now = (float *)malloc(4 * (size_t)no);
    for (int algo = 0; algo < 2; algo++) {
        for (int run = 0; run < 10; run++) {
            CUDA_OK(cudaMemset(dout, 0xff, 4 * (size_t)no));
            dev_sync();
            s4d_da_forward_args ga = dfwd_args(&p, &d, dout);
            gpu_forward(&ga, (s4d_da_algo)algo);
            to_host(run ? now : first, dout, 4 * (size_t)no);
            if (run)
                CHECK(!memcmp(first, now, 4 * (size_t)no), "algo %d run %d differs from run 0",
                      algo, run);
        }
    }
    /* Backward: location and weight gradients are always reproducible, grad_features too
       where the backward promises it. */
    int64_t nf = n_feat(&p), nl = 2 * n_pairs(&p), nw = n_w(&p);
    float *gout = (float *)malloc(4 * (size_t)no);
    for (int64_t i = 0; i < no; i++)
        gout[i] = rng_nonzero();
    void *dgo = dev_copy(gout, 4 * (size_t)no);
    void *gf = dev_alloc(4 * (size_t)nf), *gl = dev_alloc(4 * (size_t)nl), *gw = dev_alloc(4 * (size_t)nw);
    size_t nbytes[3] = {4 * (size_t)nf, 4 * (size_t)nl, 4 * (size_t)nw};
    void *dbuf[3] = {gf, gl, gw};
    char *ref[3], *cur[3];
    for (int t = 0; t < 3; t++) {
        ref[t] = (char *)malloc(nbytes[t]);
        cur[t] = (char *)malloc(nbytes[t]);
    }
    s4d_da_backward_args ba = bwd_args(&p, (const float *)dgo, (float *)gf, (float *)gl, (float *)gw);
    ba.features = d.feat;
    ba.weights = d.w;
    ba.spatial_shape = d.shape;
    ba.scale_start_index = d.start;
    ba.sampling_location = d.loc;
    const char *names[3] = {"grad_features", "grad_sampling_location", "grad_weights"};
    for (int run = 0; run < 5; run++) {
        for (int t = 0; t < 3; t++)
            CUDA_OK(cudaMemset(dbuf[t], 0x7f, nbytes[t]));
        dev_sync();
        s4d_errbuf e = {{0}};
        CHECK(gpu_backward(&ba, &e) == S4D_OK, "backward: %s", e.msg);
        for (int t = 0; t < 3; t++) {
            to_host(run ? cur[t] : ref[t], dbuf[t], nbytes[t]);
            if (run && (t > 0 || backward_deterministic()))
                CHECK(!memcmp(ref[t], cur[t], nbytes[t]), "backward run %d: %s differs from run 0",
                      run, names[t]);
        }
    }
    for (int t = 0; t < 3; t++) {
        free(ref[t]);
        free(cur[t]);
    }
    free(gout);
    cudaFree(dgo); cudaFree(gf); cudaFree(gl); cudaFree(gw);
    free(first);
    free(now);
    cudaFree(dout);
    dproblem_free(&d);
    problem_free(&p);
    return 0;
}

/* A forward and a backward captured into one CUDA graph replay to the eager results. */
static int test_graph(void)
{
    problem p;
    problem_alloc(&p, 1, 6, 4, 256, 8, 300, 13, 64, 176);
    problem_locations(&p, 0.3);
    int64_t no = n_out(&p), nf = n_feat(&p), nl = 2 * n_pairs(&p), nw = n_w(&p);
    dproblem d;
    dproblem_make(&p, &d, NULL, NULL);
    float *gout = (float *)malloc(4 * (size_t)no);
    for (int64_t i = 0; i < no; i++)
        gout[i] = rng_nonzero();
    void *dgo = dev_copy(gout, 4 * (size_t)no);
    void *out = dev_alloc(4 * (size_t)no);
    void *gf = dev_alloc(4 * (size_t)nf), *gl = dev_alloc(4 * (size_t)nl),
         *gw = dev_alloc(4 * (size_t)nw);
    s4d_da_forward_args fa = dfwd_args(&p, &d, out);
    s4d_da_backward_args ba = bwd_args(&p, dgo, gf, gl, gw);
    ba.features = d.feat;
    ba.weights = d.w;
    ba.spatial_shape = d.shape;
    ba.scale_start_index = d.start;
    ba.sampling_location = d.loc;
    /* The workspace is allocated before the capture: nothing is allocated inside it. */
    size_t ws_bytes = backward_ws_size(&ba.sizes);
    void *ws = NULL;
    if (ws_bytes)
        CUDA_OK(cudaMalloc(&ws, ws_bytes));
    /* Eager. */
    gpu_forward(&fa, S4D_DA_ALGO_FAST);
    s4d_errbuf e = {{0}};
    CHECK(backward_call(&ba, ws, &e) == S4D_OK, "eager backward: %s", e.msg);
    CUDA_OK(cudaStreamSynchronize(g_stream));
    float *e_out = (float *)malloc(4 * (size_t)no), *e_gl = (float *)malloc(4 * (size_t)nl),
          *e_gw = (float *)malloc(4 * (size_t)nw), *e_gf = (float *)malloc(4 * (size_t)nf);
    to_host(e_out, out, 4 * (size_t)no);
    to_host(e_gl, gl, 4 * (size_t)nl);
    to_host(e_gw, gw, 4 * (size_t)nw);
    to_host(e_gf, gf, 4 * (size_t)nf);
    /* Captured, then the buffers cleared, then replayed twice. */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeGlobal));
    s4d_status s1 = forward_call(&fa, S4D_DA_ALGO_FAST, &e);
    s4d_status s2 = backward_call(&ba, ws, &e);
    CUDA_OK(cudaStreamEndCapture(g_stream, &graph));
    CHECK(s1 == S4D_OK && s2 == S4D_OK, "calls under capture failed: %s", e.msg);
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    float *r = (float *)malloc(4 * (size_t)(nf > no ? nf : no));
    for (int rep = 0; rep < 2; rep++) {
        CUDA_OK(cudaMemset(out, 0, 4 * (size_t)no));
        CUDA_OK(cudaMemset(gl, 0x7f, 4 * (size_t)nl));
        CUDA_OK(cudaMemset(gw, 0x7f, 4 * (size_t)nw));
        CUDA_OK(cudaMemset(gf, 0x7f, 4 * (size_t)nf));
        dev_sync();
        CUDA_OK(cudaGraphLaunch(exec, g_stream));
        CUDA_OK(cudaStreamSynchronize(g_stream));
        to_host(r, out, 4 * (size_t)no);
        CHECK(!memcmp(r, e_out, 4 * (size_t)no), "graph replay %d: forward differs from eager", rep);
        int nz = 0;
        for (int64_t i = 0; i < no; i++)
            nz += r[i] != 0.0f;
        CHECK(nz > no / 2, "graph replay %d: output mostly zeros (%d of %lld non-zero)", rep, nz,
              (long long)no);
        to_host(r, gl, 4 * (size_t)nl);
        CHECK(!memcmp(r, e_gl, 4 * (size_t)nl), "graph replay %d: grad_loc differs", rep);
        to_host(r, gw, 4 * (size_t)nw);
        CHECK(!memcmp(r, e_gw, 4 * (size_t)nw), "graph replay %d: grad_w differs", rep);
        /* grad_features: bitwise where the backward is deterministic, else equal up to
           float reassociation (atomics). */
        to_host(r, gf, 4 * (size_t)nf);
        if (backward_deterministic())
            CHECK(!memcmp(r, e_gf, 4 * (size_t)nf), "graph replay %d: grad_features differs", rep);
        double *ed = to_double(e_gf, nf);
        double err = rel_l2_f(ed, r, nf);
        free(ed);
        CHECK(err <= 1e-6, "graph replay %d: grad_features rel L2 %g", rep, err);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(ws);
    free(r); free(e_out); free(e_gl); free(e_gw); free(e_gf); free(gout);
    cudaFree(dgo); cudaFree(out); cudaFree(gf); cudaFree(gl); cudaFree(gw);
    dproblem_free(&d);
    problem_free(&p);
    return 0;
}

/* Features not 16-byte aligned take the scalar path and still match. */
static int test_unaligned(void)
{
    problem p;
    problem_alloc(&p, 2, 3, 2, 64, 8, 40, 5, 20, 30);
    problem_locations(&p, 0.5);
    int64_t no = n_out(&p), nf = n_feat(&p);
    float *cpu = (float *)malloc(4 * (size_t)no), *gpu = (float *)malloc(4 * (size_t)no);
    s4d_da_forward_args ca = fwd_args(&p, cpu);
    CHECK(s4d_da_forward_cpu(&ca, 0, NULL) == S4D_OK, "cpu forward");
    dproblem d;
    dproblem_make(&p, &d, NULL, NULL);
    float *shifted = NULL;
    CUDA_OK(cudaMalloc((void **)&shifted, 4 * (size_t)(nf + 1)));
    CUDA_OK(cudaMemcpy(shifted + 1, p.feat, 4 * (size_t)nf, cudaMemcpyHostToDevice));
    dev_sync();
    void *dout = dev_alloc(4 * (size_t)no);
    s4d_da_forward_args ga = dfwd_args(&p, &d, dout);
    ga.features = shifted + 1;
    gpu_forward(&ga, S4D_DA_ALGO_FAST);
    to_host(gpu, dout, 4 * (size_t)no);
    double *cd = to_double(cpu, no);
    double err = rel_l2_f(cd, gpu, no);
    CHECK(err <= 1e-6, "unaligned features: rel L2 %g", err);
    free(cd); free(cpu); free(gpu);
    cudaFree(shifted); cudaFree(dout);
    dproblem_free(&d);
    problem_free(&p);
    return 0;
}

/*
 * Offsets past 2^31 elements: batch 2 of a 1 x 4096 x 2048 map with 128 float16
 * channels starts at element 2.1e9. Only the rows near the sampled region are
 * non-zero on the host (calloc'd pages stay untouched) and copied to the device.
 */
static int test_large(void)
{
    problem p;
    problem_alloc(&p, 3, 1, 1, 128, 8, 64, 4, 1, 1);
    const int64_t H = 4096, W = 2048, F = H * W, C = 128;
    p.shape[0] = (int32_t)H;
    p.shape[1] = (int32_t)W;
    p.s.num_rows = F;
    /* Points in the bottom 8 rows of the map. */
    for (int64_t i = 0; i < n_pairs(&p); i++) {
        p.loc[2 * i] = (float)rng_uniform(0.01, 0.99);
        p.loc[2 * i + 1] = (float)rng_uniform(1.0 - 7.0 / (double)H, 1.0 - 1.0 / (double)H);
    }
    size_t total = (size_t)(p.s.batch * F * C);
    uint16_t *fh = (uint16_t *)calloc(total, 2);
    size_t dev_free = 0, dev_total = 0;
    CUDA_OK(cudaMemGetInfo(&dev_free, &dev_total));
    if (!fh || dev_free < total * 2 + ((size_t)1 << 30)) {
        fprintf(stderr, "skip: needs %.1f GB on host and device\n", (double)total * 2 / 1e9);
        free(fh);
        problem_free(&p);
        return 77;
    }
    const int64_t row0 = F - 10 * W; /* first non-zero row in each batch item */
    for (int64_t b = 0; b < p.s.batch; b++)
        for (int64_t r = row0; r < F; r++)
            for (int64_t c = 0; c < C; c++)
                fh[(size_t)((b * F + r) * C + c)] = double_to_half_bits(rng_nonzero());
    uint16_t *wh = (uint16_t *)malloc(2 * (size_t)n_w(&p));
    for (int64_t i = 0; i < n_w(&p); i++) {
        wh[i] = double_to_half_bits(p.w[i]);
    }
    int64_t no = n_out(&p);
    float *cpu = (float *)malloc(4 * (size_t)no), *gpu = (float *)malloc(4 * (size_t)no);
    s4d_da_forward_args ca = fwd_args(&p, cpu);
    ca.features = fh;
    ca.features_dtype = S4D_DTYPE_FLOAT16;
    ca.weights = wh;
    ca.weights_dtype = S4D_DTYPE_FLOAT16;
    CHECK(s4d_da_forward_cpu(&ca, 0, NULL) == S4D_OK, "cpu forward");
    uint16_t *dfeat = NULL;
    CUDA_OK(cudaMalloc((void **)&dfeat, total * 2));
    CUDA_OK(cudaMemset(dfeat, 0, total * 2));
    for (int64_t b = 0; b < p.s.batch; b++) {
        size_t off = (size_t)((b * F + row0) * C);
        CUDA_OK(cudaMemcpy(dfeat + off, fh + off, (size_t)((F - row0) * C) * 2,
                           cudaMemcpyHostToDevice));
    }
    dev_sync();
    dproblem d;
    d.feat = dfeat;
    d.w = dev_copy(wh, 2 * (size_t)n_w(&p));
    d.shape = (int32_t *)dev_copy(p.shape, 8);
    d.start = (int32_t *)dev_copy(p.start, 4);
    d.loc = (float *)dev_copy(p.loc, 8 * (size_t)n_pairs(&p));
    void *dout = dev_alloc(4 * (size_t)no);
    s4d_da_forward_args ga = dfwd_args(&p, &d, dout);
    ga.features_dtype = S4D_DTYPE_FLOAT16;
    ga.weights_dtype = S4D_DTYPE_FLOAT16;
    gpu_forward(&ga, S4D_DA_ALGO_FAST);
    to_host(gpu, dout, 4 * (size_t)no);
    double *cd = to_double(cpu, no);
    double err = rel_l2_f(cd, gpu, no);
    double norm = 0;
    for (int64_t i = (p.s.batch - 1) * p.s.num_anchors * C; i < no; i++)
        norm += cd[i] * cd[i];
    CHECK(norm > 0, "last batch item reads nothing: the test would not see an overflow");
    CHECK(err <= 1e-6, "offsets past 2^31: rel L2 %g", err);
    free(cd); free(cpu); free(gpu); free(fh); free(wh);
    cudaFree(dout);
    dproblem_free(&d);
    problem_free(&p);
    return 0;
}

/* A quick mix for compute-sanitizer (which slows kernels a lot). */
static int test_small(void)
{
    problem p;
    problem_alloc(&p, 2, 3, 2, 64, 8, 12, 5, 16, 24);
    problem_locations(&p, 0.5);
    double e1 = fwd_vs_cpu(&p, S4D_DA_ALGO_FAST);
    CHECK(e1 <= 1e-6, "small forward rel L2 %g", e1);
    double e2 = bwd_compare(&p, NULL, NULL, 0, -1);
    CHECK(e2 <= 1e-5, "small backward rel L2 %g", e2);
    if (g_bv >= 0) {
        double e3 = bwd_subsets(&p);
        CHECK(e3 <= 1e-5, "small backward, each subset of the gradients: worst rel L2 %g", e3);
    }
    /* NaN, infinite and boundary locations are invalid pairs (zero contribution, zero
       gradients), like on the CPU. */
    {
        const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, 1.0f, -0.0f, 1e30f, -1e30f};
        float *keep = (float *)malloc(8 * (size_t)n_pairs(&p));
        memcpy(keep, p.loc, 8 * (size_t)n_pairs(&p));
        for (int64_t i = 0; i < n_pairs(&p); i += 3)
            p.loc[2 * i + (i & 1)] = specials[(i / 3) % 8];
        double e6 = fwd_vs_cpu(&p, S4D_DA_ALGO_FAST);
        CHECK(e6 <= 1e-6, "small forward with NaN/inf locations rel L2 %g", e6);
        double e7 = bwd_compare(&p, NULL, NULL, 0, -1);
        CHECK(e7 <= 1e-5, "small backward with NaN/inf locations rel L2 %g", e7);
        memcpy(p.loc, keep, 8 * (size_t)n_pairs(&p));
        free(keep);
    }
    /* A map whose rows lie outside the features reads nothing (the CPU rejects such a
       table; its oracle here is the same problem with that map's weights zero). */
    {
        int64_t N = p.s.num_cams, L = p.s.num_levels, G = p.s.num_groups, no = n_out(&p);
        const int64_t bad = N * L - 1; /* last map of the last camera */
        int32_t *start_bad = (int32_t *)malloc(4 * (size_t)(N * L));
        memcpy(start_bad, p.start, 4 * (size_t)(N * L));
        start_bad[bad] = (int32_t)p.s.num_rows; /* even a 1x1 map ends past F */
        dproblem d;
        dproblem_make(&p, &d, NULL, NULL);
        CUDA_OK(cudaMemcpy(d.start, start_bad, 4 * (size_t)(N * L), cudaMemcpyHostToDevice));
        dev_sync();
        void *dout = dev_alloc(4 * (size_t)no);
        s4d_da_forward_args ga = dfwd_args(&p, &d, dout);
        gpu_forward(&ga, S4D_DA_ALGO_FAST);
        float *gpu = (float *)malloc(4 * (size_t)no), *cpu = (float *)malloc(4 * (size_t)no);
        to_host(gpu, dout, 4 * (size_t)no);
        float *wz = (float *)malloc(4 * (size_t)n_w(&p));
        memcpy(wz, p.w, 4 * (size_t)n_w(&p));
        for (int64_t pair = 0; pair < n_pairs(&p); pair++)
            if (pair % N == bad / L)
                for (int64_t g = 0; g < G; g++)
                    wz[(pair * L + bad % L) * G + g] = 0.0f;
        float *keep = p.w;
        p.w = wz;
        s4d_da_forward_args ca = fwd_args(&p, cpu);
        CHECK(s4d_da_forward_cpu(&ca, 0, NULL) == S4D_OK, "cpu forward");
        p.w = keep;
        double *cd = to_double(cpu, no);
        double e0 = rel_l2_f(cd, gpu, no);
        CHECK(e0 <= 1e-6, "map outside the features: rel L2 %g", e0);
        free(cd); free(gpu); free(cpu); free(wz); free(start_bad);
        cudaFree(dout);
        dproblem_free(&d);
    }
    uint16_t *fh, *wh;
    make_half(&p, &fh, &wh);
    double e3 = bwd_compare(&p, fh, wh, 1, -1);
    CHECK(e3 <= 2e-3, "small fp16 backward rel L2 %g", e3);
    free(fh);
    free(wh);
    problem_free(&p);
    problem_alloc(&p, 1, 2, 3, 36, 4, 9, 150, 8, 8); /* scalar path, 300 pairs per anchor */
    problem_locations(&p, 0.6);
    double e4 = fwd_vs_cpu(&p, S4D_DA_ALGO_DETERMINISTIC);
    CHECK(e4 <= 1e-6, "small scalar forward rel L2 %g", e4);
    double e5 = bwd_compare(&p, NULL, NULL, 0, -1);
    CHECK(e5 <= 1e-5, "small scalar backward rel L2 %g", e5);
    problem_free(&p);
    return 0;
}

/* Runs a case through the public functions, then over the variants it exercises. */
static int run_variants(const char *which, int (*fn)(void), int fwd, int bwd, int public_only)
{
    int rc = 0;
    g_fv = g_bv = -1;
    fprintf(stderr, "== %s: public functions\n", which);
    rc |= fn();
    if (bwd) {
        g_bv = -2;
        fprintf(stderr, "== %s: public functions, deterministic backward\n", which);
        rc |= fn();
    }
    if (public_only)
        return rc;
    const int nf = fwd ? s4d_da_cuda_fwd_variant_count() : 0;
    const int nb = bwd ? s4d_da_cuda_bwd_variant_count() : 0;
    for (int v = 0; v < (nf > nb ? nf : nb) && rc != 77; v++) {
        g_fv = nf ? v % nf : -1;
        g_bv = nb ? v % nb : -1;
        const int before = g_failures;
        rc |= fn();
        fprintf(stderr, "== %s: forward variant %s, backward variant %s: %s\n", which,
                g_fv >= 0 ? s4d_da_cuda_fwd_variant_name(g_fv) : "-",
                g_bv >= 0 ? s4d_da_cuda_bwd_variant_name(g_bv) : "-",
                g_failures == before ? "ok" : "FAILED");
    }
    return rc;
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "forward";
    const int public_only = argc > 2 && !strcmp(argv[2], "public");
    if (!s4d_cuda_available()) {
        printf("%s: skipped, no usable CUDA device\n", which);
        return 77;
    }
    CUDA_OK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    static const struct {
        const char *name;
        int (*fn)(void);
        int fwd, bwd;
    } cases[] = {
        {"forward", test_forward, 1, 0},         {"backward", test_backward, 0, 1},
        {"fp16", test_fp16, 1, 1},               {"determinism", test_determinism, 1, 1},
        {"graph", test_graph, 1, 1},             {"unaligned", test_unaligned, 1, 0},
        {"large", test_large, 1, 0},             {"small", test_small, 1, 1},
    };
    int rc = -1;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!strcmp(which, cases[i].name))
            rc = run_variants(which, cases[i].fn, cases[i].fwd, cases[i].bwd, public_only);
    if (rc == -1) {
        fprintf(stderr, "unknown test '%s'\n", which);
        return 2;
    }
    cudaStreamDestroy(g_stream);
    return test_exit(which, rc);
}
