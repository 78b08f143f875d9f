/* Shared helpers of the dense CPU ops: OpenBLAS calls and shape tools. */
#include <cblas.h>
#include <string.h>

#include "ops/dense_util.h"
#include "util/threadpool.h"

/*
 * Threads. OpenBLAS always runs on one thread. Its own threads split a
 * product in a way that depends on how many there are, which changes the
 * bits of the result (OpenBLAS 0.3.21: a 900 x 256 x 256 sgemm differs in 7%
 * of its elements between 1 and 2 threads), and its workers spin on
 * sched_yield for about a tenth of a second after each threaded call, taking a
 * core from the engine's pool. A product of at least PANEL_MIN_MACS
 * multiply-adds is instead cut into panels of rows (or of columns, when it
 * has few rows) whose bounds depend on its shape alone, each panel one
 * single-threaded call, and the panels run on the engine's pool: every thread
 * count gives the bits of one thread.
 */
#define PANEL_MIN_MACS (8.0 * 1024 * 1024) /* below: one call */
#define PANEL_MACS (4.0 * 1024 * 1024)     /* about this much work per panel */
#define PANEL_MAX 64
#define PANEL_ALIGN 16 /* panels start at multiples of this many rows or columns */

static void blas_one_thread(void)
{
    /* Cheap when already 1; also undoes a change made by the application. */
    if (openblas_get_num_threads() != 1)
        openblas_set_num_threads(1);
}

typedef struct gemm_job {
    int dbl, ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;
    const void *a, *b;
    void *c;
    int by_rows;  /* panels of rows of C, else of columns */
    int64_t step; /* rows or columns per panel */
} gemm_job;

/* Rows [r0, r0 + m) and columns [c0, c0 + n) of C, one OpenBLAS call. */
static void gemm_block(const gemm_job *g, int64_t r0, int64_t m, int64_t c0, int64_t n)
{
    const int64_t ao = g->ta ? r0 : r0 * g->lda, bo = g->tb ? c0 * g->ldb : c0;
    const int64_t co = r0 * g->ldc + c0;
    const enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    const enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    if (g->dbl)
        cblas_dgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, g->alpha,
                    (const double *)g->a + ao, (blasint)g->lda, (const double *)g->b + bo,
                    (blasint)g->ldb, g->beta, (double *)g->c + co, (blasint)g->ldc);
    else
        cblas_sgemm(CblasRowMajor, ta, tb, (blasint)m, (blasint)n, (blasint)g->k, (float)g->alpha,
                    (const float *)g->a + ao, (blasint)g->lda, (const float *)g->b + bo,
                    (blasint)g->ldb, (float)g->beta, (float *)g->c + co, (blasint)g->ldc);
}

static void gemm_panels(void *arg, int64_t p0, int64_t p1)
{
    const gemm_job *g = arg;
    const int64_t extent = g->by_rows ? g->m : g->n;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t at = p * g->step, len = extent - at < g->step ? extent - at : g->step;
        if (g->by_rows)
            gemm_block(g, at, len, 0, g->n);
        else
            gemm_block(g, 0, g->m, at, len);
    }
}

static void gemm_run(s4d_threadpool *pool, gemm_job *g)
{
    blas_one_thread();
    const double macs = (double)g->m * (double)g->n * (double)g->k;
    g->by_rows = g->m >= 2 * PANEL_ALIGN;
    const int64_t extent = g->by_rows ? g->m : g->n;
    if (macs < PANEL_MIN_MACS || extent < 2 * PANEL_ALIGN) {
        gemm_block(g, 0, g->m, 0, g->n);
        return;
    }
    int64_t want = (int64_t)(macs / PANEL_MACS);
    want = want > PANEL_MAX ? PANEL_MAX : want < 2 ? 2 : want;
    g->step = ((extent + want - 1) / want + PANEL_ALIGN - 1) / PANEL_ALIGN * PANEL_ALIGN;
    s4d_parallel_for(pool, (extent + g->step - 1) / g->step, 1, gemm_panels, g);
}

void s4d_host_sgemm(s4d_threadpool *pool, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                    float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                    float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        /* BLAS leaves C untouched scaled by beta; do it ourselves for clarity. */
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
        return;
    }
    gemm_job g = {0, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c, 0, 0};
    gemm_run(pool, &g);
}

void s4d_host_dgemm(s4d_threadpool *pool, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                    double alpha, const double *a, int64_t lda, const double *b, int64_t ldb,
                    double beta, double *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0 ? 0.0 : beta * c[i * ldc + j];
        return;
    }
    gemm_job g = {1, trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha, beta, a, b, c, 0, 0};
    gemm_run(pool, &g);
}

int s4d_host_gemm_is_small(int64_t m, int64_t n, int64_t k)
{
    return (double)m * (double)n * (double)k < PANEL_MIN_MACS;
}

void s4d_host_sgemv(int trans, int64_t m, int64_t n, float alpha, const float *a, int64_t lda, const float *x,
                    float beta, float *y)
{
    if (m <= 0 || n <= 0)
        return;
    blas_one_thread();
    cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, alpha, a, (blasint)lda,
                x, 1, beta, y, 1);
}

int s4d_host_is_row_vector(const s4d_tensor *t, int64_t n, int r, s4d_dtype dt)
{
    return t->dtype == dt && t->rank >= 1 && t->rank <= r && t->dims[t->rank - 1] == n && s4d_tensor_numel(t) == n;
}

int s4d_host_has_input(const s4d_op_ctx *ctx, int i)
{
    return i < ctx->num_inputs && ctx->inputs[i].dtype != S4D_DTYPE_UNDEFINED && ctx->inputs[i].rank >= 0;
}

s4d_status s4d_host_broadcast_shape(s4d_op_ctx *ctx, int ra, const int64_t *a, int rb,
                                   const int64_t *b, int *rout, int64_t *out)
{
    int r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int ia = i - (r - ra), ib = i - (r - rb);
        int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
        if (da == db || db == 1)
            out[i] = da;
        else if (da == 1)
            out[i] = db;
        else
            return s4d_op_error(ctx, S4D_ERR_SHAPE,
                                "dimensions %lld and %lld (axis %d from the right) do not broadcast",
                                (long long)da, (long long)db, r - i);
    }
    *rout = r;
    return S4D_OK;
}

void s4d_host_broadcast_strides(int r, const int64_t *d, int rout, const int64_t *out_dims,
                               int64_t *strides)
{
    int64_t s = 1;
    for (int i = rout - 1; i >= 0; i--) {
        int j = i - (rout - r);
        if (j < 0) {
            strides[i] = 0;
            continue;
        }
        strides[i] = (d[j] == 1 && out_dims[i] != 1) ? 0 : s;
        s *= d[j];
    }
}

int64_t s4d_host_const_ints(const s4d_tensor *t, int64_t *vals, int64_t cap)
{
    if (!t->data || t->rank > 1)
        return -1;
    int64_t n = s4d_tensor_numel(t);
    if (n > cap)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == S4D_DTYPE_INT64)
            vals[i] = ((const int64_t *)t->data)[i];
        else if (t->dtype == S4D_DTYPE_INT32)
            vals[i] = ((const int32_t *)t->data)[i];
        else
            return -1;
    }
    return n;
}

int64_t s4d_host_const_floats(const s4d_tensor *t, float *vals, int64_t cap)
{
    if (!t->data || t->rank > 1)
        return -1;
    int64_t n = s4d_tensor_numel(t);
    if (n > cap)
        return -1;
    for (int64_t i = 0; i < n; i++) {
        if (t->dtype == S4D_DTYPE_FLOAT32)
            vals[i] = ((const float *)t->data)[i];
        else if (t->dtype == S4D_DTYPE_FLOAT64)
            vals[i] = (float)((const double *)t->data)[i];
        else
            return -1;
    }
    return n;
}

typedef struct batched_job {
    s4d_threadpool *pool;
    int ta, tb;
    int64_t m, n, k, sa, lda, sb, ldb, sc;
    const float *a, *b;
    float *c;
} batched_job;

static void batched_range(void *arg, int64_t begin, int64_t end)
{
    const batched_job *j = arg;
    for (int64_t i = begin; i < end; i++)
        s4d_host_sgemm(j->pool, j->ta, j->tb, j->m, j->n, j->k, 1.0f, j->a + i * j->sa, j->lda, j->b + i * j->sb, j->ldb,
                      0.0f, j->c + i * j->sc, j->n);
}

void s4d_host_sgemm_batched(struct s4d_threadpool *pool, int64_t nbatch, int trans_a, int trans_b, int64_t m,
                           int64_t n, int64_t k, const float *a, int64_t stride_a, int64_t lda, const float *b,
                           int64_t stride_b, int64_t ldb, float *c, int64_t stride_c)
{
    batched_job j = {pool, trans_a, trans_b, m, n, k, stride_a, lda, stride_b, ldb, stride_c, a, b, c};
    if (nbatch > 1 && s4d_host_gemm_is_small(m, n, k))
        s4d_parallel_for(pool, nbatch, 1, batched_range, &j);
    else
        batched_range(&j, 0, nbatch);
}

void s4d_host_swap_channels(const float *src, float *dst, int64_t n, int64_t plane, int64_t c, int channels_last)
{
    for (int64_t b = 0; b < n; b++)
        for (int64_t q = 0; q < plane; q++)
            for (int64_t ch = 0; ch < c; ch++) {
                const int64_t first = (b * c + ch) * plane + q, last = (b * plane + q) * c + ch;
                if (channels_last)
                    dst[last] = src[first];
                else
                    dst[first] = src[last];
            }
}
