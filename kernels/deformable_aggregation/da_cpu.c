/*
 * Deformable aggregation on the CPU: forward and backward, multi-threaded
 * with pthreads, deterministic for any thread count.
 *
 * Determinism: every output element is produced by exactly one thread, and
 * its sum runs over (point, camera, level, corner) in a fixed order. The
 * forward and the location/weight gradients split the (batch, anchor) pairs;
 * the feature gradient splits feature rows, and each thread walks every
 * sample but adds only into its own rows, so the order of additions into one
 * row never depends on how rows were split.
 */
#define _DEFAULT_SOURCE /* sysconf(_SC_NPROCESSORS_ONLN) */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "da_internal.h"

#define MAX_THREADS 256

/* ---------------------------------------------------------------- threads */

typedef void (*range_fn)(void *arg, int tid, int64_t begin, int64_t end);

typedef struct task {
    range_fn fn;
    void *arg;
    int tid;
    int64_t begin, end;
} task;

static void *task_main(void *p)
{
    task *t = (task *)p;
    t->fn(t->arg, t->tid, t->begin, t->end);
    return NULL;
}

static int pick_threads(int requested, int64_t work, int64_t grain)
{
    long n = requested;
    if (n <= 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1)
            n = 1;
    }
    if (n > MAX_THREADS)
        n = MAX_THREADS;
    int64_t useful = grain > 0 ? (work + grain - 1) / grain : work;
    if (useful < 1)
        useful = 1;
    if (n > useful)
        n = (long)useful;
    return (int)n;
}

/* Splits [0, n) into nthreads contiguous chunks; a thread that cannot be started runs inline. */
static void parallel_run(int nthreads, int64_t n, range_fn fn, void *arg)
{
    if (nthreads <= 1 || n <= 1) {
        fn(arg, 0, 0, n);
        return;
    }
    task tasks[MAX_THREADS] = {{0}}; /* all set below; gcc 13 cannot see that nthreads > 1 */
    pthread_t th[MAX_THREADS];
    int started[MAX_THREADS];
    for (int t = 0; t < nthreads; t++) {
        tasks[t].fn = fn;
        tasks[t].arg = arg;
        tasks[t].tid = t;
        tasks[t].begin = n * t / nthreads;
        tasks[t].end = n * (t + 1) / nthreads;
        started[t] = 0;
    }
    for (int t = 1; t < nthreads; t++)
        started[t] = pthread_create(&th[t], NULL, task_main, &tasks[t]) == 0;
    task_main(&tasks[0]);
    for (int t = 1; t < nthreads; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            task_main(&tasks[t]);
    }
}

/* ---------------------------------------------------------------- sampling */

typedef struct geom {
    int64_t F, C, N, L, G, A, P, cpg;
    const int32_t *shape;
    const int32_t *start;
} geom;

/* The (up to) four corners of one bilinear sample; rows are relative to the batch item. */
typedef struct corners {
    int count;
    int64_t row[4];
    float w[4];
    int which[4]; /* 0: (h0,w0) 1: (h0,w0+1) 2: (h0+1,w0) 3: (h0+1,w0+1) */
    float lh, lw;
} corners;

/* NaN and +-inf fail these comparisons or the bounds, so they count as invalid too. */
static inline int loc_valid(float x, float y)
{
    return x > 0.0f && x < 1.0f && y > 0.0f && y < 1.0f;
}

static inline void make_corners(const geom *g, int64_t n, int64_t l, float x, float y, corners *cr)
{
    int64_t m = n * g->L + l;
    int64_t H = g->shape[2 * m], W = g->shape[2 * m + 1];
    int64_t base = g->start[m];
    /* Two roundings, as the CUDA kernels do (they avoid the fused multiply-add on purpose);
       ISO C mode keeps GCC from contracting this. */
    float hf = y * (float)H - 0.5f, wf = x * (float)W - 0.5f;
    float h0f = floorf(hf), w0f = floorf(wf);
    int64_t h0 = (int64_t)h0f, w0 = (int64_t)w0f;
    float lh = hf - h0f, lw = wf - w0f;
    cr->lh = lh;
    cr->lw = lw;
    cr->count = 0;
    const float cw[4] = {(1.0f - lh) * (1.0f - lw), (1.0f - lh) * lw, lh * (1.0f - lw), lh * lw};
    for (int k = 0; k < 4; k++) {
        int64_t h = h0 + (k >> 1), w = w0 + (k & 1);
        if (h < 0 || h > H - 1 || w < 0 || w > W - 1)
            continue;
        cr->row[cr->count] = base + h * W + w;
        cr->w[cr->count] = cw[k];
        cr->which[cr->count] = k;
        cr->count++;
    }
}

static inline float load_elem(const void *p, s4d_dtype t, int64_t i)
{
    return t == S4D_DTYPE_FLOAT16 ? s4d_da_half_to_float(((const uint16_t *)p)[i])
                                  : ((const float *)p)[i];
}

static inline void store_elem(void *p, s4d_dtype t, int64_t i, float v)
{
    if (t == S4D_DTYPE_FLOAT16)
        ((uint16_t *)p)[i] = s4d_da_float_to_half(v);
    else
        ((float *)p)[i] = v;
}

/* Reads cnt channels of a feature row into dst as float. */
static inline const float *feature_span(const void *feat, s4d_dtype t, int64_t off, int64_t cnt,
                                        float *tmp)
{
    if (t == S4D_DTYPE_FLOAT32)
        return (const float *)feat + off;
    const uint16_t *h = (const uint16_t *)feat + off;
    for (int64_t c = 0; c < cnt; c++)
        tmp[c] = s4d_da_half_to_float(h[c]);
    return tmp;
}

/* ---------------------------------------------------------------- forward */

typedef struct fwd_job {
    const s4d_da_forward_args *a;
    geom g;
    float *scratch; /* 2*C floats per thread: accumulator and an fp16 row */
} fwd_job;

static void fwd_range(void *arg, int tid, int64_t begin, int64_t end)
{
    const fwd_job *j = (const fwd_job *)arg;
    const s4d_da_forward_args *a = j->a;
    const geom *g = &j->g;
    const int64_t C = g->C, P = g->P, N = g->N, L = g->L, G = g->G, cpg = g->cpg;
    float *acc = j->scratch + (int64_t)tid * 2 * C;
    float *tmp = acc + C;
    for (int64_t ba = begin; ba < end; ba++) {
        int64_t b = ba / g->A;
        for (int64_t c = 0; c < C; c++)
            acc[c] = 0.0f;
        for (int64_t p = 0; p < P; p++) {
            for (int64_t n = 0; n < N; n++) {
                int64_t pair = (ba * P + p) * N + n;
                float x = a->sampling_location[2 * pair], y = a->sampling_location[2 * pair + 1];
                if (!loc_valid(x, y))
                    continue;
                for (int64_t l = 0; l < L; l++) {
                    corners cr;
                    make_corners(g, n, l, x, y, &cr);
                    int64_t wbase = (pair * L + l) * G;
                    for (int64_t gi = 0; gi < G; gi++) {
                        float wg = load_elem(a->weights, a->weights_dtype, wbase + gi);
                        float *restrict dst = acc + gi * cpg;
                        for (int k = 0; k < cr.count; k++) {
                            float coef = wg * cr.w[k];
                            const float *restrict f = feature_span(
                                a->features, a->features_dtype,
                                (b * g->F + cr.row[k]) * C + gi * cpg, cpg, tmp);
                            for (int64_t c = 0; c < cpg; c++)
                                dst[c] += coef * f[c];
                        }
                    }
                }
            }
        }
        for (int64_t c = 0; c < C; c++)
            store_elem(a->output, a->output_dtype, ba * C + c, acc[c]);
    }
}

static void fill_geom(geom *g, const s4d_da_sizes *s, const int32_t *shape, const int32_t *start)
{
    g->F = s->num_rows;
    g->C = s->channels;
    g->N = s->num_cams;
    g->L = s->num_levels;
    g->G = s->num_groups;
    g->A = s->num_anchors;
    g->P = s->num_points;
    g->cpg = s->channels / s->num_groups;
    g->shape = shape;
    g->start = start;
}

s4d_status s4d_da_forward_cpu(const s4d_da_forward_args *a, int num_threads, s4d_errbuf *err)
{
    s4d_status st = s4d_da_check_forward(a, err);
    if (st != S4D_OK)
        return st;
    const s4d_da_sizes *s = &a->sizes;
    if ((st = s4d_da_check_indices(s, a->spatial_shape, a->scale_start_index, err)) != S4D_OK)
        return st;
    int64_t nba = s->batch * s->num_anchors;
    if (nba == 0 || s->channels == 0)
        return S4D_OK;
    fwd_job j;
    j.a = a;
    fill_geom(&j.g, s, a->spatial_shape, a->scale_start_index);
    int nt = pick_threads(num_threads, nba, 8);
    j.scratch = (float *)malloc(sizeof(float) * 2 * (size_t)s->channels * (size_t)nt);
    if (!j.scratch)
        return s4d_da_fail(err, S4D_ERR_NO_MEMORY,
                           "deformable_aggregation: cannot allocate %d x %lld floats of scratch",
                           nt, (long long)(2 * s->channels));
    parallel_run(nt, nba, fwd_range, &j);
    free(j.scratch);
    return S4D_OK;
}

/*
 * The pooled forward: (batch, anchor) pairs in DA_PIECES fixed pieces, each
 * with its own scratch slot in the caller's workspace; pieces run through the
 * caller's parallel for. Every output is still produced by one piece in the
 * same order, so the bits equal the pthread path's.
 */
#define DA_PIECES 64

static int64_t pieces_of(int64_t nba)
{
    return nba < DA_PIECES ? nba : DA_PIECES;
}

size_t s4d_da_forward_cpu_workspace_size(const s4d_da_sizes *s)
{
    if (!s || s->channels <= 0 || s->batch <= 0 || s->num_anchors <= 0)
        return 0;
    return sizeof(float) * 2 * (size_t)s->channels * (size_t)pieces_of(s->batch * s->num_anchors);
}

typedef struct piece_job {
    fwd_job *j;
    int64_t nba, pieces;
} piece_job;

static void fwd_pieces(void *arg, int64_t begin, int64_t end)
{
    const piece_job *pj = (const piece_job *)arg;
    for (int64_t k = begin; k < end; k++)
        fwd_range(pj->j, (int)k, pj->nba * k / pj->pieces, pj->nba * (k + 1) / pj->pieces);
}

s4d_status s4d_da_forward_cpu_exec(const s4d_da_forward_args *a, const s4d_da_cpu_exec *x,
                                   s4d_errbuf *err)
{
    if (!x || x->struct_size < sizeof(size_t))
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG, "deformable_aggregation: exec is NULL");
    s4d_status st = s4d_da_check_forward(a, err);
    if (st != S4D_OK)
        return st;
    const s4d_da_sizes *s = &a->sizes;
    if ((st = s4d_da_check_indices(s, a->spatial_shape, a->scale_start_index, err)) != S4D_OK)
        return st;
    int64_t nba = s->batch * s->num_anchors;
    if (nba == 0 || s->channels == 0)
        return S4D_OK;
    size_t need = s4d_da_forward_cpu_workspace_size(s);
    if (!x->workspace || x->workspace_size < need)
        return s4d_da_fail(err, S4D_ERR_INVALID_ARG,
                           "deformable_aggregation: workspace of %zu bytes, need %zu",
                           x->workspace_size, need);
    fwd_job j;
    j.a = a;
    fill_geom(&j.g, s, a->spatial_shape, a->scale_start_index);
    j.scratch = (float *)x->workspace;
    piece_job pj = {&j, nba, pieces_of(nba)};
    if (x->parallel_for)
        x->parallel_for(x->pool, pj.pieces, 1, fwd_pieces, &pj);
    else
        fwd_pieces(&pj, 0, pj.pieces);
    return S4D_OK;
}

/* ---------------------------------------------------------------- backward */

typedef struct bwd_job {
    const s4d_da_backward_args *a;
    geom g;
    float *scratch;   /* 3*C floats per thread */
    float *gfeat;     /* float accumulator of grad_features: the output itself or a temporary */
} bwd_job;

/* Gradients of sampling_location and weights; one thread owns each (b, a). */
static void bwd_locw_range(void *arg, int tid, int64_t begin, int64_t end)
{
    const bwd_job *j = (const bwd_job *)arg;
    const s4d_da_backward_args *a = j->a;
    const geom *g = &j->g;
    const int64_t C = g->C, P = g->P, N = g->N, L = g->L, G = g->G, cpg = g->cpg;
    float *go = j->scratch + (int64_t)tid * 3 * C;
    float *tmp = go + C;
    for (int64_t ba = begin; ba < end; ba++) {
        int64_t b = ba / g->A;
        for (int64_t c = 0; c < C; c++)
            go[c] = load_elem(a->grad_output, a->grad_output_dtype, ba * C + c);
        for (int64_t p = 0; p < P; p++) {
            for (int64_t n = 0; n < N; n++) {
                int64_t pair = (ba * P + p) * N + n;
                float x = a->sampling_location[2 * pair], y = a->sampling_location[2 * pair + 1];
                int valid = loc_valid(x, y);
                float gx = 0.0f, gy = 0.0f;
                for (int64_t l = 0; l < L; l++) {
                    int64_t wbase = (pair * L + l) * G;
                    if (!valid) {
                        if (a->grad_weights)
                            for (int64_t gi = 0; gi < G; gi++)
                                store_elem(a->grad_weights, a->weights_dtype, wbase + gi, 0.0f);
                        continue;
                    }
                    corners cr;
                    make_corners(g, n, l, x, y, &cr);
                    int64_t m = n * L + l;
                    float H = (float)g->shape[2 * m], W = (float)g->shape[2 * m + 1];
                    /* Partial derivatives of each corner weight by lw and lh. */
                    float dlw[4], dlh[4];
                    for (int k = 0; k < cr.count; k++) {
                        int kh = cr.which[k] >> 1, kw = cr.which[k] & 1;
                        dlw[k] = (kh ? cr.lh : 1.0f - cr.lh) * (kw ? 1.0f : -1.0f);
                        dlh[k] = (kw ? cr.lw : 1.0f - cr.lw) * (kh ? 1.0f : -1.0f);
                    }
                    for (int64_t gi = 0; gi < G; gi++) {
                        float wg = load_elem(a->weights, a->weights_dtype, wbase + gi);
                        const float *gog = go + gi * cpg;
                        float sv = 0.0f, sx = 0.0f, sy = 0.0f;
                        for (int k = 0; k < cr.count; k++) {
                            const float *restrict f = feature_span(
                                a->features, a->features_dtype,
                                (b * g->F + cr.row[k]) * C + gi * cpg, cpg, tmp);
                            float dot = 0.0f;
                            for (int64_t c = 0; c < cpg; c++)
                                dot += gog[c] * f[c];
                            sv += cr.w[k] * dot;
                            sx += dlw[k] * dot;
                            sy += dlh[k] * dot;
                        }
                        if (a->grad_weights)
                            store_elem(a->grad_weights, a->weights_dtype, wbase + gi, sv);
                        gx += wg * sx * W;
                        gy += wg * sy * H;
                    }
                }
                if (a->grad_sampling_location) {
                    a->grad_sampling_location[2 * pair] = valid ? gx : 0.0f;
                    a->grad_sampling_location[2 * pair + 1] = valid ? gy : 0.0f;
                }
            }
        }
    }
}

/* Gradient of features; a thread owns the rows [begin, end) of the flattened [bs * F] rows. */
static void bwd_feat_range(void *arg, int tid, int64_t begin, int64_t end)
{
    const bwd_job *j = (const bwd_job *)arg;
    const s4d_da_backward_args *a = j->a;
    const geom *g = &j->g;
    const int64_t C = g->C, P = g->P, N = g->N, L = g->L, G = g->G, cpg = g->cpg, F = g->F;
    float *go = j->scratch + (int64_t)tid * 3 * C;
    for (int64_t r = begin; r < end; r++)
        for (int64_t c = 0; c < C; c++)
            j->gfeat[r * C + c] = 0.0f;
    if (begin >= end)
        return;
    int64_t b_first = begin / F, b_last = (end - 1) / F;
    for (int64_t b = b_first; b <= b_last; b++) {
        for (int64_t an = 0; an < g->A; an++) {
            int64_t ba = b * g->A + an;
            int loaded = 0;
            for (int64_t p = 0; p < P; p++) {
                for (int64_t n = 0; n < N; n++) {
                    int64_t pair = (ba * P + p) * N + n;
                    float x = a->sampling_location[2 * pair];
                    float y = a->sampling_location[2 * pair + 1];
                    if (!loc_valid(x, y))
                        continue;
                    for (int64_t l = 0; l < L; l++) {
                        corners cr;
                        make_corners(g, n, l, x, y, &cr);
                        int64_t wbase = (pair * L + l) * G;
                        for (int k = 0; k < cr.count; k++) {
                            int64_t row = b * F + cr.row[k];
                            if (row < begin || row >= end)
                                continue;
                            if (!loaded) {
                                for (int64_t c = 0; c < C; c++)
                                    go[c] = load_elem(a->grad_output, a->grad_output_dtype,
                                                      ba * C + c);
                                loaded = 1;
                            }
                            float *restrict dst = j->gfeat + row * C;
                            for (int64_t gi = 0; gi < G; gi++) {
                                float coef =
                                    load_elem(a->weights, a->weights_dtype, wbase + gi) * cr.w[k];
                                for (int64_t c = gi * cpg; c < (gi + 1) * cpg; c++)
                                    dst[c] += coef * go[c];
                            }
                        }
                    }
                }
            }
        }
    }
}

typedef struct cvt_job {
    const float *src;
    uint16_t *dst;
} cvt_job;

static void cvt_range(void *arg, int tid, int64_t begin, int64_t end)
{
    const cvt_job *j = (const cvt_job *)arg;
    for (int64_t i = begin; i < end; i++)
        j->dst[i] = s4d_da_float_to_half(j->src[i]);
}

s4d_status s4d_da_backward_cpu(const s4d_da_backward_args *a, int num_threads, s4d_errbuf *err)
{
    s4d_status st = s4d_da_check_backward(a, err);
    if (st != S4D_OK)
        return st;
    const s4d_da_sizes *s = &a->sizes;
    if ((st = s4d_da_check_indices(s, a->spatial_shape, a->scale_start_index, err)) != S4D_OK)
        return st;
    bwd_job j;
    j.a = a;
    fill_geom(&j.g, s, a->spatial_shape, a->scale_start_index);
    int64_t nba = s->batch * s->num_anchors;
    int64_t nrows = s->batch * s->num_rows;
    int nt_max = pick_threads(num_threads, 1 << 30, 1);
    j.scratch = (float *)malloc(sizeof(float) * 3 * (size_t)(s->channels + 1) * (size_t)nt_max);
    j.gfeat = NULL;
    if (!j.scratch)
        return s4d_da_fail(err, S4D_ERR_NO_MEMORY,
                           "deformable_aggregation: cannot allocate backward scratch");
    if ((a->grad_sampling_location || a->grad_weights) && nba > 0)
        parallel_run(pick_threads(num_threads, nba, 8), nba, bwd_locw_range, &j);
    if (a->grad_features && nrows > 0 && s->channels > 0) {
        int half = a->features_dtype == S4D_DTYPE_FLOAT16;
        j.gfeat = half ? (float *)malloc(sizeof(float) * (size_t)(nrows * s->channels))
                       : (float *)a->grad_features;
        if (!j.gfeat) {
            free(j.scratch);
            return s4d_da_fail(err, S4D_ERR_NO_MEMORY,
                               "deformable_aggregation: cannot allocate %lld floats for the "
                               "float16 grad_features accumulator",
                               (long long)(nrows * s->channels));
        }
        parallel_run(pick_threads(num_threads, nrows, 256), nrows, bwd_feat_range, &j);
        if (half) {
            cvt_job cj = {j.gfeat, (uint16_t *)a->grad_features};
            int64_t total = nrows * s->channels;
            parallel_run(pick_threads(num_threads, total, 1 << 16), total, cvt_range, &cj);
            free(j.gfeat);
        }
    }
    free(j.scratch);
    return S4D_OK;
}
