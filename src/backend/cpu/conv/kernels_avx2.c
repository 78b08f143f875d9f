/*
 * AVX2 + FMA kernels of the convolution library (function target attributes,
 * no -march flag needed; the driver calls them only where the CPU has both).
 *
 * Micro-kernel: a weight panel of 8 rows is done as two halves of 4 rows x 24
 * columns (12 ymm accumulators, 3 pixel loads and 4 broadcasts per step), so
 * that the packed weights are the same bytes as for AVX-512.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv_impl.h"

#define NR 24
#define VL 8
#define TGT __attribute__((target("avx2,fma")))
#define INL static inline __attribute__((always_inline)) TGT

INL __m256i lanes_below(int64_t n)
{
    int32_t c = n < 0 ? 0 : n > 8 ? 8 : (int32_t)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* exp(t) for t <= 0 (see cc_exp_neg). */
INL __m256 exp_neg_v(__m256 t)
{
    t = _mm256_max_ps(t, _mm256_set1_ps(-87.3f));
    __m256 fx = _mm256_fmadd_ps(t, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(12582912.0f));
    __m256i n = _mm256_sub_epi32(_mm256_castps_si256(fx), _mm256_set1_epi32(0x4B400000));
    fx = _mm256_sub_ps(fx, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), t);
    r = _mm256_fmadd_ps(fx, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 q = _mm256_set1_ps(1.9875691500e-4f);
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.3981999507e-3f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(8.3334519073e-3f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(4.1665795894e-2f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.6666665459e-1f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(5.0000001201e-1f));
    q = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(q, r), r, r), _mm256_set1_ps(1.0f));
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(q), _mm256_slli_epi32(n, 23)));
}

INL __m256 sigmoid_v(__m256 v)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 t = _mm256_or_ps(v, _mm256_set1_ps(-0.0f));
    __m256 e = exp_neg_v(t), s = _mm256_div_ps(one, _mm256_add_ps(one, e));
    s = _mm256_blendv_ps(s, _mm256_mul_ps(e, s), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_blendv_ps(s, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

INL __m256 act_v(__m256 v, int act, __m256 lo, __m256 hi)
{
    /* max(a, v) and min(a, v) return v when v is NaN, so NaN stays visible. */
    const __m256 zero = _mm256_setzero_ps(), one = _mm256_set1_ps(1.0f);
    switch (act) {
    case S4D_CPUCONV_ACT_RELU:
        return _mm256_max_ps(zero, v);
    case S4D_CPUCONV_ACT_CLIP:
        return _mm256_min_ps(hi, _mm256_max_ps(lo, v));
    case S4D_CPUCONV_ACT_LEAKY_RELU:
        return _mm256_blendv_ps(v, _mm256_mul_ps(v, lo), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    case S4D_CPUCONV_ACT_SIGMOID:
        return sigmoid_v(v);
    case S4D_CPUCONV_ACT_SILU:
        return _mm256_mul_ps(v, sigmoid_v(v));
    case S4D_CPUCONV_ACT_HARD_SIGMOID:
        return _mm256_min_ps(one, _mm256_max_ps(zero, _mm256_fmadd_ps(v, lo, hi)));
    case S4D_CPUCONV_ACT_HARD_SWISH: {
        __m256 t = _mm256_fmadd_ps(v, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
        return _mm256_mul_ps(v, _mm256_min_ps(one, _mm256_max_ps(zero, t)));
    }
    default:
        return v;
    }
}

INL void ukr4(const int nv, int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr,
              int nc, int accumulate, const cc_epi *epi, int row0)
{
    __m256 acc[4][3];
    const __m256i lm = lanes_below(nc - 8 * (nv - 1));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < nv; j++) {
            const float *ci = c + i * ldc + 8 * j;
            acc[i][j] = !accumulate || i >= mr ? _mm256_setzero_ps()
                        : j == nv - 1          ? _mm256_maskload_ps(ci, lm)
                                               : _mm256_loadu_ps(ci);
        }
    /* Named accumulators: GCC keeps an indexed array in memory inside the loop. */
#define CC_LOAD_ROW(i) __m256 c##i##0 = acc[i][0], c##i##1 = acc[i][1], c##i##2 = acc[i][2];
#define CC_FMA_ROW(i)                                                                                           \
    {                                                                                                           \
        __m256 ai = _mm256_broadcast_ss(a + i);                                                                 \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);                                                             \
        if (nv > 1)                                                                                             \
            c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);                                                         \
        if (nv > 2)                                                                                             \
            c##i##2 = _mm256_fmadd_ps(ai, b2, c##i##2);                                                         \
    }
#define CC_STORE_ROW(i) acc[i][0] = c##i##0, acc[i][1] = c##i##1, acc[i][2] = c##i##2;
    for (int i = 0; i < 4; i++)
        for (int j = nv; j < 3; j++)
            acc[i][j] = _mm256_setzero_ps();
    CC_LOAD_ROW(0) CC_LOAD_ROW(1) CC_LOAD_ROW(2) CC_LOAD_ROW(3)
    for (int64_t k = 0; k < kc; k++) {
        __m256 b0, b1 = _mm256_setzero_ps(), b2 = _mm256_setzero_ps();
        if (nv == 1) {
            b0 = _mm256_maskload_ps(b, lm);
        } else if (nv == 2) {
            b0 = _mm256_loadu_ps(b);
            b1 = _mm256_maskload_ps(b + 8, lm);
        } else {
            b0 = _mm256_loadu_ps(b);
            b1 = _mm256_loadu_ps(b + 8);
            b2 = _mm256_maskload_ps(b + 16, lm);
        }
        CC_FMA_ROW(0) CC_FMA_ROW(1) CC_FMA_ROW(2) CC_FMA_ROW(3)
        if ((k & 1) == 0) /* weights stream from L3 or memory: 16 steps ahead */
            _mm_prefetch((const char *)(a + 16 * CC_MR), _MM_HINT_T0);
        a += CC_MR;
        b += ldb;
    }
    CC_STORE_ROW(0) CC_STORE_ROW(1) CC_STORE_ROW(2) CC_STORE_ROW(3)
#undef CC_LOAD_ROW
#undef CC_FMA_ROW
#undef CC_STORE_ROW
    if (epi) {
        const __m256 lo = _mm256_set1_ps(epi->lo), hi = _mm256_set1_ps(epi->hi);
        for (int i = 0; i < 4 && i < mr; i++)
            for (int j = 0; j < nv; j++) {
                __m256 v = acc[i][j];
                if (epi->bias)
                    v = _mm256_add_ps(v, _mm256_set1_ps(epi->bias[row0 + i]));
                if (epi->res) {
                    const float *r = epi->res + (row0 + i) * epi->ldr + 8 * j;
                    v = _mm256_add_ps(v, j == nv - 1 ? _mm256_maskload_ps(r, lm) : _mm256_loadu_ps(r));
                }
                acc[i][j] = act_v(v, epi->act, lo, hi);
            }
    }
    for (int i = 0; i < 4 && i < mr; i++)
        for (int j = 0; j < nv; j++) {
            if (j == nv - 1)
                _mm256_maskstore_ps(c + i * ldc + 8 * j, lm, acc[i][j]);
            else
                _mm256_storeu_ps(c + i * ldc + 8 * j, acc[i][j]);
        }
}

#define UKR_NV(name, nv)                                                                                         \
    static TGT void name(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr, \
                         int nc, int accumulate, const cc_epi *epi)                                              \
    {                                                                                                            \
        ukr4(nv, kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi, 0);                                             \
        if (mr > 4)                                                                                              \
            ukr4(nv, kc, a + 4, b, ldb, c + 4 * ldc, ldc, mr - 4, nc, accumulate, epi, 4);                       \
    }
UKR_NV(ukr1, 1)
UKR_NV(ukr2, 2)
UKR_NV(ukr3, 3)

static TGT void ukr(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr, int nc,
                    int accumulate, const cc_epi *epi)
{
    if (nc > 16)
        ukr3(kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
    else if (nc > 8)
        ukr2(kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
    else
        ukr1(kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
}

/* Small maps (cc_ops.ukr_t): 4 pixels x 24 channels at a time, one half of the panel. */
INL void ukr_t4(int64_t kc, const float *x, const int64_t *off, int rows, int64_t lda, const float *w, float *t,
                int accumulate)
{
    const float *x0 = x + off[0], *x1 = x + off[rows > 1 ? 1 : 0], *x2 = x + off[rows > 2 ? 2 : 0],
                *x3 = x + off[rows > 3 ? 3 : 0];
#define CC_T_INIT(i)                                                                                             \
    __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps(), c##i##2 = _mm256_setzero_ps();         \
    if (accumulate && rows > i) {                                                                                \
        c##i##0 = _mm256_loadu_ps(t + i * CC_TN);                                                                \
        c##i##1 = _mm256_loadu_ps(t + i * CC_TN + 8);                                                            \
        c##i##2 = _mm256_loadu_ps(t + i * CC_TN + 16);                                                           \
    }
#define CC_T_FMA(i)                                                                                              \
    {                                                                                                            \
        const __m256 v = _mm256_broadcast_ss(x##i + k * lda);                                                    \
        c##i##0 = _mm256_fmadd_ps(v, w0, c##i##0);                                                               \
        c##i##1 = _mm256_fmadd_ps(v, w1, c##i##1);                                                               \
        c##i##2 = _mm256_fmadd_ps(v, w2, c##i##2);                                                               \
    }
#define CC_T_STORE(i)                                                                                            \
    if (rows > i) {                                                                                              \
        _mm256_storeu_ps(t + i * CC_TN, c##i##0);                                                                \
        _mm256_storeu_ps(t + i * CC_TN + 8, c##i##1);                                                            \
        _mm256_storeu_ps(t + i * CC_TN + 16, c##i##2);                                                           \
    }
    CC_T_INIT(0) CC_T_INIT(1) CC_T_INIT(2) CC_T_INIT(3)
    for (int64_t k = 0; k < kc; k++) {
        const __m256 w0 = _mm256_loadu_ps(w + k * CC_TN), w1 = _mm256_loadu_ps(w + k * CC_TN + 8),
                     w2 = _mm256_loadu_ps(w + k * CC_TN + 16);
        CC_T_FMA(0)
        if (rows > 1)
            CC_T_FMA(1)
        if (rows > 2)
            CC_T_FMA(2)
        if (rows > 3)
            CC_T_FMA(3)
    }
    CC_T_STORE(0) CC_T_STORE(1) CC_T_STORE(2) CC_T_STORE(3)
#undef CC_T_INIT
#undef CC_T_FMA
#undef CC_T_STORE
}

static TGT void ukr_t(int64_t kc, const float *x, const int64_t *off, int rows, int64_t lda, const float *w,
                      float *t, int ncol, int accumulate, int prefetch)
{
    (void)prefetch;
    for (int h = 0; h < CC_TN; h += 24) {
        if (h >= ncol)
            break;
        for (int i = 0; i < rows; i += 4) {
            const int r = rows - i < 4 ? rows - i : 4;
            switch (r) {
            case 4:
                ukr_t4(kc, x, off + i, 4, lda, w + h, t + i * CC_TN + h, accumulate);
                break;
            case 3:
                ukr_t4(kc, x, off + i, 3, lda, w + h, t + i * CC_TN + h, accumulate);
                break;
            case 2:
                ukr_t4(kc, x, off + i, 2, lda, w + h, t + i * CC_TN + h, accumulate);
                break;
            default:
                ukr_t4(kc, x, off + i, 1, lda, w + h, t + i * CC_TN + h, accumulate);
                break;
            }
        }
    }
}

/* 8 elements row[ix + l * sw] for the first n lanes, 0 outside [0, w). */
INL __m256 load_strided(const float *row, int64_t w, int64_t ix, int64_t sw, int64_t n)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int32_t)ix),
                                   _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int32_t)sw)));
    __m256i ok = _mm256_and_si256(_mm256_and_si256(lanes_below(n), _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1))),
                                  _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)w), idx));
    if (sw == 1)
        return _mm256_maskload_ps(row + ix, ok);
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), row, idx, _mm256_castsi256_ps(ok), 4);
}

static TGT void pack_b(const cc_pack *pk)
{
    const int64_t khw = pk->kh * pk->kw, ahead = cc_prefetch_distance(pk);
    for (int64_t kk = 0; kk < pk->kcb; kk++) {
        const int64_t k = pk->k0 + kk, ci = k / khw, ky = (k % khw) / pk->kw, kx = k % pk->kw;
        const float *xc = pk->x + ci * pk->plane;
        if (k % khw == 0)
            cc_prefetch_channel(pk, ci + ahead);
        for (int64_t s = 0; s < pk->nseg; s++) {
            const cc_seg *sg = &pk->segs[s];
            const int64_t iy = (int64_t)sg->oy * pk->sh - pk->pt + ky * pk->dh;
            const int64_t ix0 = (int64_t)sg->ox * pk->sw - pk->pl + kx * pk->dw;
            float *dst = pk->dst + (sg->at / NR) * pk->kcb * NR + kk * NR + sg->at % NR;
            const int valid = iy >= 0 && iy < pk->h;
            const float *row = xc + (valid ? iy : 0) * pk->w;
            for (int j = 0; j < sg->len; j += 8) {
                __m256 v = valid ? load_strided(row, pk->w, ix0 + j * pk->sw, pk->sw, sg->len - j)
                                 : _mm256_setzero_ps();
                _mm256_maskstore_ps(dst + j, lanes_below(sg->len - j), v);
            }
        }
    }
}

INL void bt4(const __m256 *d, __m256 *r)
{
    const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
    __m256 t0 = _mm256_fnmadd_ps(four, d[2], d[4]), t1 = _mm256_fnmadd_ps(four, d[1], d[3]);
    __m256 t2 = _mm256_sub_ps(d[4], d[2]), t3 = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));
    r[0] = _mm256_fmadd_ps(four, d[0], _mm256_fnmadd_ps(five, d[2], d[4]));
    r[1] = _mm256_add_ps(t0, t1);
    r[2] = _mm256_sub_ps(t0, t1);
    r[3] = _mm256_add_ps(t2, t3);
    r[4] = _mm256_sub_ps(t2, t3);
    r[5] = _mm256_fmadd_ps(four, d[1], _mm256_fnmadd_ps(five, d[3], d[5]));
}

INL void bt2(const __m256 *d, __m256 *r)
{
    r[0] = _mm256_sub_ps(d[0], d[2]);
    r[1] = _mm256_add_ps(d[1], d[2]);
    r[2] = _mm256_sub_ps(d[2], d[1]);
    r[3] = _mm256_sub_ps(d[1], d[3]);
}

INL void at4(const __m256 *s, __m256 *o)
{
    __m256 s12 = _mm256_add_ps(s[1], s[2]), d12 = _mm256_sub_ps(s[1], s[2]);
    __m256 s34 = _mm256_add_ps(s[3], s[4]), d34 = _mm256_sub_ps(s[3], s[4]);
    o[0] = _mm256_add_ps(_mm256_add_ps(s[0], s12), s34);
    o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), d34, d12);
    o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), s34, s12);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), d34, d12), s[5]);
}

INL void at2(const __m256 *s, __m256 *o)
{
    o[0] = _mm256_add_ps(_mm256_add_ps(s[0], s[1]), s[2]);
    o[1] = _mm256_sub_ps(_mm256_sub_ps(s[1], s[2]), s[3]);
}

INL void wino_in_m(const int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w, int64_t pt,
                   int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride)
{
    enum { A_MAX = 6 };
    const int a = m + 2;
    const __m256i live = lanes_below(t->n);
    __m256i iy0 = _mm256_sub_epi32(_mm256_maskload_epi32(t->oy, live), _mm256_set1_epi32((int32_t)pt));
    __m256i ix0 = _mm256_sub_epi32(_mm256_maskload_epi32(t->ox, live), _mm256_set1_epi32((int32_t)pl));
    __m256i base = _mm256_add_epi32(_mm256_mullo_epi32(iy0, _mm256_set1_epi32((int32_t)w)), ix0);
    __m256i rok[A_MAX], cok[A_MAX];
    for (int r = 0; r < a; r++) {
        __m256i iy = _mm256_add_epi32(iy0, _mm256_set1_epi32(r)), ix = _mm256_add_epi32(ix0, _mm256_set1_epi32(r));
        rok[r] = _mm256_and_si256(live, _mm256_and_si256(_mm256_cmpgt_epi32(iy, _mm256_set1_epi32(-1)),
                                                         _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)h), iy)));
        cok[r] = _mm256_and_si256(_mm256_cmpgt_epi32(ix, _mm256_set1_epi32(-1)),
                                  _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)w), ix));
    }
    for (int64_t c = 0; c < nc; c++) {
        const float *xc = x + c * plane_stride;
        __m256 u[A_MAX][A_MAX];
        for (int r = 0; r < a; r++) {
            __m256 d[A_MAX];
            for (int q = 0; q < a; q++) {
                __m256i idx = _mm256_add_epi32(base, _mm256_set1_epi32((int32_t)(r * w + q)));
                __m256 ok = _mm256_castsi256_ps(_mm256_and_si256(rok[r], cok[q]));
                d[q] = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), xc, idx, ok, 4);
            }
            if (m == 4)
                bt4(d, u[r]);
            else
                bt2(d, u[r]);
        }
        for (int q = 0; q < a; q++) {
            __m256 col[A_MAX], v[A_MAX];
            for (int r = 0; r < a; r++)
                col[r] = u[r][q];
            if (m == 4)
                bt4(col, v);
            else
                bt2(col, v);
            for (int r = 0; r < a; r++)
                _mm256_storeu_ps(dst + (r * a + q) * xi_stride + c * c_stride, v[r]);
        }
    }
}

static TGT void wino_in(int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w, int64_t pt,
                        int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride)
{
    if (m == 4)
        wino_in_m(4, x, plane_stride, nc, h, w, pt, pl, t, dst, xi_stride, c_stride);
    else
        wino_in_m(2, x, plane_stride, nc, h, w, pt, pl, t, dst, xi_stride, c_stride);
}

/* out[l * 4 + j] = o[j][l] for 8 tiles. */
INL void interleave4(const __m256 *o, __m256 *out)
{
    __m256 t0 = _mm256_unpacklo_ps(o[0], o[1]), t1 = _mm256_unpackhi_ps(o[0], o[1]);
    __m256 t2 = _mm256_unpacklo_ps(o[2], o[3]), t3 = _mm256_unpackhi_ps(o[2], o[3]);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    out[0] = _mm256_permute2f128_ps(u0, u1, 0x20);
    out[1] = _mm256_permute2f128_ps(u2, u3, 0x20);
    out[2] = _mm256_permute2f128_ps(u0, u1, 0x31);
    out[3] = _mm256_permute2f128_ps(u2, u3, 0x31);
}

INL void interleave2(const __m256 *o, __m256 *out)
{
    __m256 lo = _mm256_unpacklo_ps(o[0], o[1]), hi = _mm256_unpackhi_ps(o[0], o[1]);
    out[0] = _mm256_permute2f128_ps(lo, hi, 0x20);
    out[1] = _mm256_permute2f128_ps(lo, hi, 0x31);
}

INL void wino_out_m(const int m, const float *src, int64_t xi_stride, int64_t m_stride, int64_t nm,
                    const cc_tiles *t, int64_t ho, int64_t wo, const float *bias, const float *res, float *y,
                    int64_t plane_stride, const cc_post *post)
{
    enum { A_MAX = 6, M_MAX = 4 };
    const int a = m + 2;
    const __m256 lo = _mm256_set1_ps(post->lo), hi = _mm256_set1_ps(post->hi);
    int row_run = t->n == 8;
    for (int l = 0; row_run && l < 8; l++)
        row_run = t->oy[l] == t->oy[0] && t->ox[l] == t->ox[0] + m * l && t->oy[l] + m <= ho && t->ox[l] + m <= wo;
    for (int64_t j = 0; j < nm; j++) {
        __m256 u[M_MAX][A_MAX];
        for (int q = 0; q < a; q++) {
            __m256 s[A_MAX], o[M_MAX];
            for (int r = 0; r < a; r++)
                s[r] = _mm256_loadu_ps(src + (r * a + q) * xi_stride + j * m_stride);
            if (m == 4)
                at4(s, o);
            else
                at2(s, o);
            for (int r = 0; r < m; r++)
                u[r][q] = o[r];
        }
        const float bj = bias ? bias[j] : 0.0f;
        const __m256 bv = _mm256_set1_ps(bj);
        float *yj = y + j * plane_stride;
        const float *rj = res ? res + j * plane_stride : NULL;
        for (int r = 0; r < m; r++) {
            __m256 o[M_MAX];
            if (m == 4)
                at4(u[r], o);
            else
                at2(u[r], o);
            if (row_run) {
                __m256 out[M_MAX];
                if (m == 4)
                    interleave4(o, out);
                else
                    interleave2(o, out);
                int64_t at = (int64_t)(t->oy[0] + r) * wo + t->ox[0];
                for (int v = 0; v < m; v++) {
                    __m256 z = _mm256_add_ps(out[v], bv);
                    if (rj)
                        z = _mm256_add_ps(z, _mm256_loadu_ps(rj + at + 8 * v));
                    _mm256_storeu_ps(yj + at + 8 * v, act_v(z, post->act, lo, hi));
                }
                continue;
            }
            float tmp[M_MAX][8];
            for (int q = 0; q < m; q++)
                _mm256_storeu_ps(tmp[q], o[q]);
            for (int l = 0; l < t->n; l++) {
                int64_t oy = t->oy[l] + r;
                if (oy >= ho)
                    continue;
                for (int q = 0; q < m && t->ox[l] + q < wo; q++) {
                    int64_t at = oy * wo + t->ox[l] + q;
                    float v = tmp[q][l] + bj;
                    if (rj)
                        v += rj[at];
                    yj[at] = cc_act1(v, post);
                }
            }
        }
    }
}

static TGT void wino_out(int m, const float *src, int64_t xi_stride, int64_t m_stride, int64_t nm, const cc_tiles *t,
                         int64_t ho, int64_t wo, const float *bias, const float *res, float *y, int64_t plane_stride,
                         const cc_post *post)
{
    if (m == 4)
        wino_out_m(4, src, xi_stride, m_stride, nm, t, ho, wo, bias, res, y, plane_stride, post);
    else
        wino_out_m(2, src, xi_stride, m_stride, nm, t, ho, wo, bias, res, y, plane_stride, post);
}

static TGT void dw_rows(const cc_geom *g, const float *x, const float *wk, float bias, const float *res, float *y,
                        int64_t oy0, int64_t oy1, const cc_post *post)
{
    const __m256 lo = _mm256_set1_ps(post->lo), hi = _mm256_set1_ps(post->hi);
    for (int64_t oy = oy0; oy < oy1; oy++) {
        for (int64_t ox = 0; ox < g->wo; ox += 8) {
            int64_t n = g->wo - ox;
            __m256i want = lanes_below(n);
            __m256 acc = _mm256_setzero_ps();
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                const float *row = x + iy * g->w;
                if (ox == 0) /* the hardware prefetchers miss these row streams */
                    for (int64_t e = 0; e < g->w; e += 16)
                        cc_prefetch(row + e);
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    __m256 v = load_strided(row, g->w, ox * g->sw - g->pl + kx * g->dw, g->sw, n);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(wk[ky * g->kw + kx]), v, acc);
                }
            }
            acc = _mm256_add_ps(acc, _mm256_set1_ps(bias));
            if (res)
                acc = _mm256_add_ps(acc, _mm256_maskload_ps(res + oy * g->wo + ox, want));
            _mm256_maskstore_ps(y + oy * g->wo + ox, want, act_v(acc, post->act, lo, hi));
        }
    }
}

static TGT void dw_staged(const cc_dws *d, const float *wk, float bias, const float *res, float *y,
                          const cc_post *post)
{
    int64_t q = 0;
    for (; q + CC_DW_UNROLL <= d->len; q += CC_DW_UNROLL) {
        __m256 a[8];
        for (int v = 0; v < 8; v++)
            a[v] = _mm256_setzero_ps();
        const float *s = d->sub + q;
        for (int t = 0; t < d->ntaps; t++) {
            const __m256 wv = _mm256_set1_ps(wk[t]);
            const float *src = s + d->off[t];
            for (int v = 0; v < 8; v++)
                a[v] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(src + 8 * v), a[v]);
        }
        for (int v = 0; v < 8; v++)
            _mm256_storeu_ps(d->out + q + 8 * v, a[v]);
    }
    for (; q < d->len; q += 16) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;
        for (int t = 0; t < d->ntaps; t++) {
            const __m256 wv = _mm256_set1_ps(wk[t]);
            a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(d->sub + q + d->off[t]), a0);
            a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(d->sub + q + d->off[t] + 8), a1);
        }
        _mm256_storeu_ps(d->out + q, a0);
        _mm256_storeu_ps(d->out + q + 8, a1);
    }
    const __m256 lo = _mm256_set1_ps(post->lo), hi = _mm256_set1_ps(post->hi), bv = _mm256_set1_ps(bias);
    for (int64_t oy = 0; oy < d->ho; oy++) {
        const float *o = d->out + oy * d->ws;
        for (int64_t ox = 0; ox < d->wo; ox += 8) {
            const __m256i m = lanes_below(d->wo - ox);
            __m256 v = _mm256_add_ps(_mm256_maskload_ps(o + ox, m), bv);
            if (res)
                v = _mm256_add_ps(v, _mm256_maskload_ps(res + oy * d->wo + ox, m));
            _mm256_maskstore_ps(y + oy * d->wo + ox, m, act_v(v, post->act, lo, hi));
        }
    }
}

static TGT void maxpool_rows(const cc_geom *g, const float *x, float *y, int64_t oy0, int64_t oy1)
{
    const __m256 ninf = _mm256_set1_ps(-__builtin_inff()), qnan = _mm256_set1_ps(__builtin_nanf(""));
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t oy = oy0; oy < oy1; oy++) {
        for (int64_t ox = 0; ox < g->wo; ox += 8) {
            __m256 acc = ninf, nan = _mm256_setzero_ps();
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                const float *row = x + iy * g->w;
                if (ox == 0) /* the hardware prefetchers miss these row streams */
                    for (int64_t e = 0; e < g->w; e += 16)
                        cc_prefetch(row + e);
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t ix = ox * g->sw - g->pl + kx * g->dw;
                    __m256i idx = _mm256_add_epi32(_mm256_set1_epi32((int32_t)ix),
                                                   _mm256_mullo_epi32(lanes, _mm256_set1_epi32((int32_t)g->sw)));
                    __m256i oki = _mm256_and_si256(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1)),
                                                   _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)g->w), idx));
                    __m256 ok = _mm256_castsi256_ps(oki);
                    __m256 v = g->sw == 1 ? _mm256_blendv_ps(ninf, _mm256_maskload_ps(row + ix, oki), ok)
                                          : _mm256_mask_i32gather_ps(ninf, row, idx, ok, 4);
                    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
                    acc = _mm256_max_ps(acc, v);
                }
            }
            acc = _mm256_blendv_ps(acc, qnan, nan);
            _mm256_maskstore_ps(y + oy * g->wo + ox, lanes_below(g->wo - ox), acc);
        }
    }
}

const cc_ops s4d_cc_ops_avx2 = {S4D_CPUCONV_ISA_AVX2, NR,       VL,      ukr,         pack_b,
                                wino_in,              wino_out, dw_rows, dw_staged, maxpool_rows,
                                NULL,                 ukr_t,    cc_tr_out_c,
                                  NULL};
