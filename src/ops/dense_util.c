/* Shared helpers of the dense CPU ops: OpenBLAS calls and shape tools. */
#include <cblas.h>
#include <stdatomic.h>
#include <string.h>

#include "ops/dense_util.h"

/*
 * OpenBLAS's worker threads spin (sched_yield) for about 2^28 cycles after
 * each threaded call before they sleep: a tenth of a second, longer than a
 * whole small network. One threaded product per inference (a classifier's
 * last Gemm) kept a core busy with OpenBLAS's spinning while the engine's pool
 * wanted it, and two threads ran slower than one. So OpenBLAS stays on one
 * thread, and only products large enough to repay that get the engine's width
 * (blas_budget). Its thread count does not change the bits of a product:
 * OpenBLAS splits M and N over threads, never K.
 */
#define BLAS_THREADED_MACS (8.0 * 1024 * 1024)

static atomic_int blas_budget = 1; /* the engine's width, set by its contexts */
static atomic_int blas_now = 0;    /* what OpenBLAS was last set to; 0: not yet */

static void blas_width_for(double macs)
{
    int want = macs >= BLAS_THREADED_MACS ? atomic_load_explicit(&blas_budget, memory_order_relaxed) : 1;
    /* Contexts on several threads may race here; that costs speed, never bits. */
    if (atomic_exchange_explicit(&blas_now, want, memory_order_relaxed) != want)
        openblas_set_num_threads(want);
}

void s4d_host_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                   int64_t ldc)
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
    blas_width_for((double)m * (double)n * (double)k);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                (blasint)ldc);
}

void s4d_host_dgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                   const double *a, int64_t lda, const double *b, int64_t ldb, double beta,
                   double *c, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                c[i * ldc + j] = beta == 0.0 ? 0.0 : beta * c[i * ldc + j];
        return;
    }
    blas_width_for((double)m * (double)n * (double)k);
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, alpha, a, (blasint)lda, b, (blasint)ldb, beta, c,
                (blasint)ldc);
}

int s4d_host_gemm_is_small(int64_t m, int64_t n, int64_t k)
{
    return (double)m * (double)n * (double)k < BLAS_THREADED_MACS;
}

void s4d_host_sgemv(int trans, int64_t m, int64_t n, float alpha, const float *a, int64_t lda, const float *x,
                    float beta, float *y)
{
    if (m <= 0 || n <= 0)
        return;
    blas_width_for((double)m * (double)n);
    cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, (blasint)m, (blasint)n, alpha, a, (blasint)lda,
                x, 1, beta, y, 1);
}

void s4d_host_blas_set_threads(int n)
{
    atomic_store(&blas_budget, n < 1 ? 1 : n);
}

int s4d_host_blas_get_threads(void)
{
    return atomic_load(&blas_budget);
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
    int ta, tb;
    int64_t m, n, k, sa, lda, sb, ldb, sc;
    const float *a, *b;
    float *c;
} batched_job;

static void batched_range(void *arg, int64_t begin, int64_t end)
{
    const batched_job *j = arg;
    for (int64_t i = begin; i < end; i++)
        s4d_host_sgemm(j->ta, j->tb, j->m, j->n, j->k, 1.0f, j->a + i * j->sa, j->lda, j->b + i * j->sb, j->ldb,
                      0.0f, j->c + i * j->sc, j->n);
}

void s4d_host_sgemm_batched(struct s4d_threadpool *pool, int64_t nbatch, int trans_a, int trans_b, int64_t m,
                           int64_t n, int64_t k, const float *a, int64_t stride_a, int64_t lda, const float *b,
                           int64_t stride_b, int64_t ldb, float *c, int64_t stride_c)
{
    batched_job j = {trans_a, trans_b, m, n, k, stride_a, lda, stride_b, ldb, stride_c, a, b, c};
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
