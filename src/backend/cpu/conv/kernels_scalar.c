/*
 * Portable C kernels of the convolution library: the fallback for CPUs
 * without AVX2 and the plainest statement of what every kernel computes.
 * The vector files follow the same arithmetic, in the same order where it
 * matters for rounding (the Winograd transforms), so that a test can hold all
 * sets to one tolerance.
 */
#include <math.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv_impl.h"
#include "backend/winograd4.h"

#define NR 8
#define VL 8

static void ukr(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr, int nc,
                int accumulate, const cc_epi *epi)
{
    float acc[CC_MR][NR];
    for (int i = 0; i < CC_MR; i++)
        for (int j = 0; j < NR; j++)
            acc[i][j] = accumulate && i < mr && j < nc ? c[i * ldc + j] : 0.0f;
    for (int64_t k = 0; k < kc; k++) {
        float bk[NR];
        for (int j = 0; j < NR; j++)
            bk[j] = j < nc ? b[k * ldb + j] : 0.0f;
        for (int i = 0; i < CC_MR; i++) {
            float ai = a[k * CC_MR + i];
            for (int j = 0; j < NR; j++)
                acc[i][j] += ai * bk[j];
        }
    }
    cc_post post = {epi ? epi->act : 0, epi ? epi->lo : 0.0f, epi ? epi->hi : 0.0f};
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nc; j++) {
            float v = acc[i][j];
            if (epi) {
                if (epi->bias)
                    v += epi->bias[i];
                if (epi->res)
                    v += epi->res[i * epi->ldr + j];
                v = cc_act1(v, &post);
            }
            c[i * ldc + j] = v;
        }
}

static void ukr_t(int64_t kc, const float *x, const int64_t *off, int rows, int64_t lda, const float *w, float *t,
                  int ncol, int accumulate, int prefetch)
{
    (void)prefetch;
    for (int i = 0; i < rows; i++) {
        float acc[CC_TN];
        for (int j = 0; j < CC_TN; j++)
            acc[j] = accumulate ? t[i * CC_TN + j] : 0.0f;
        const float *xi = x + off[i];
        for (int64_t k = 0; k < kc; k++) {
            const float v = xi[k * lda];
            for (int j = 0; j < ncol; j++)
                acc[j] += v * w[k * CC_TN + j];
        }
        memcpy(t + i * CC_TN, acc, sizeof acc);
    }
}

static void pack_b(const cc_pack *pk)
{
    const int64_t khw = pk->kh * pk->kw;
    for (int64_t kk = 0; kk < pk->kcb; kk++) {
        const int64_t k = pk->k0 + kk, ci = k / khw, ky = (k % khw) / pk->kw, kx = k % pk->kw;
        const float *xc = pk->x + ci * pk->plane;
        for (int64_t s = 0; s < pk->nseg; s++) {
            const cc_seg *sg = &pk->segs[s];
            const int64_t iy = (int64_t)sg->oy * pk->sh - pk->pt + ky * pk->dh;
            const int64_t ix0 = (int64_t)sg->ox * pk->sw - pk->pl + kx * pk->dw;
            float *dst = pk->dst + (sg->at / NR) * pk->kcb * NR + kk * NR + sg->at % NR;
            for (int j = 0; j < sg->len; j++) {
                int64_t ix = ix0 + j * pk->sw;
                dst[j] = iy >= 0 && iy < pk->h && ix >= 0 && ix < pk->w ? xc[iy * pk->w + ix] : 0.0f;
            }
        }
    }
}

/* B^T d for F(4x4,3x3) (interpolation points 0, +-1, +-2, infinity). */
static void bt4(const float *d, int ds, float *r, int rs)
{
    s4d_wino4_bt(d, ds, r, rs);
}

/* B^T d for F(2x2,3x3) (points 0, +-1, infinity). */
static void bt2(const float *d, int ds, float *r, int rs)
{
    r[0] = d[0] - d[2 * ds];
    r[1 * rs] = d[1 * ds] + d[2 * ds];
    r[2 * rs] = d[2 * ds] - d[1 * ds];
    r[3 * rs] = d[1 * ds] - d[3 * ds];
}

static void at4(const float *s, int ss, float *o, int os)
{
    s4d_wino4_at(s, ss, o, os);
}

static void at2(const float *s, int ss, float *o, int os)
{
    o[0] = s[0] + s[1 * ss] + s[2 * ss];
    o[1 * os] = s[1 * ss] - s[2 * ss] - s[3 * ss];
}

static void wino_in(int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w, int64_t pt,
                    int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride)
{
    const int a = m + 2;
    for (int64_t c = 0; c < nc; c++) {
        const float *xc = x + c * plane_stride;
        for (int l = 0; l < VL; l++) {
            float d[36], u[36], v[36];
            int64_t iy0 = l < t->n ? t->oy[l] - pt : -a, ix0 = l < t->n ? t->ox[l] - pl : -a;
            for (int r = 0; r < a; r++)
                for (int q = 0; q < a; q++) {
                    int64_t iy = iy0 + r, ix = ix0 + q;
                    d[r * a + q] = iy >= 0 && iy < h && ix >= 0 && ix < w ? xc[iy * w + ix] : 0.0f;
                }
            for (int r = 0; r < a; r++) /* along each row, then along each column */
                (m == 4 ? bt4 : bt2)(d + r * a, 1, u + r * a, 1);
            for (int q = 0; q < a; q++)
                (m == 4 ? bt4 : bt2)(u + q, a, v + q, a);
            for (int xi = 0; xi < a * a; xi++)
                dst[xi * xi_stride + c * c_stride + l] = v[xi];
        }
    }
}

static void wino_out(int m, const float *src, int64_t xi_stride, int64_t m_stride, int64_t nm, const cc_tiles *t,
                     int64_t ho, int64_t wo, const float *bias, const float *res, float *y, int64_t plane_stride,
                     const cc_post *post)
{
    const int a = m + 2;
    for (int64_t j = 0; j < nm; j++)
        for (int l = 0; l < t->n; l++) {
            float s[36], u[24], o[16];
            for (int xi = 0; xi < a * a; xi++)
                s[xi] = src[xi * xi_stride + j * m_stride + l];
            for (int q = 0; q < a; q++) /* along each column, then along each row */
                (m == 4 ? at4 : at2)(s + q, a, u + q, a);
            for (int r = 0; r < m; r++)
                (m == 4 ? at4 : at2)(u + r * a, 1, o + r * m, 1);
            for (int r = 0; r < m; r++)
                for (int q = 0; q < m; q++) {
                    int64_t oy = t->oy[l] + r, ox = t->ox[l] + q;
                    if (oy >= ho || ox >= wo)
                        continue;
                    int64_t at = j * plane_stride + oy * wo + ox;
                    float v = o[r * m + q];
                    if (bias)
                        v += bias[j];
                    if (res)
                        v += res[at];
                    y[at] = cc_act1(v, post);
                }
        }
}

static void dw_rows(const cc_geom *g, const float *x, const float *wk, float bias, const float *res, float *y,
                    int64_t oy0, int64_t oy1, const cc_post *post)
{
    for (int64_t oy = oy0; oy < oy1; oy++)
        for (int64_t ox = 0; ox < g->wo; ox++) {
            float acc = 0.0f;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t ix = ox * g->sw - g->pl + kx * g->dw;
                    if (ix >= 0 && ix < g->w)
                        acc += wk[ky * g->kw + kx] * x[iy * g->w + ix];
                }
            }
            float v = acc + bias;
            if (res)
                v += res[oy * g->wo + ox];
            y[oy * g->wo + ox] = cc_act1(v, post);
        }
}

static void maxpool_rows(const cc_geom *g, const float *x, float *y, int64_t oy0, int64_t oy1)
{
    for (int64_t oy = oy0; oy < oy1; oy++)
        for (int64_t ox = 0; ox < g->wo; ox++) {
            float best = -INFINITY;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t ix = ox * g->sw - g->pl + kx * g->dw;
                    if (ix < 0 || ix >= g->w)
                        continue;
                    float v = x[iy * g->w + ix];
                    if (v > best || (v != v && best == best))
                        best = v;
                }
            }
            y[oy * g->wo + ox] = best;
        }
}

const cc_ops s4d_cc_ops_scalar = {S4D_CPUCONV_ISA_SCALAR, NR,       VL,      ukr,         pack_b,
                                  wino_in,                wino_out, dw_rows, NULL, maxpool_rows,
                                  NULL,                   ukr_t,    cc_tr_out_c,
                                  NULL};
