/*
 * AVX-512F kernels of the convolution library. Every function carries a
 * target attribute, so this file builds without -march flags; the driver
 * calls it only where the CPU reports AVX-512F.
 *
 * Micro-kernel: 8 rows (output channels) x 48 columns (pixels or Winograd
 * tiles) in 24 zmm accumulators; per reduction step 3 vector loads of the
 * pixel panel and 8 broadcasts of packed weights feed 24 FMAs.
 */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/conv/cpuconv_impl.h"

#define NR 48
#define VL 16
#define TGT __attribute__((target("avx512f,avx2,fma")))
#define INL static inline __attribute__((always_inline)) TGT

INL __mmask16 lane_mask(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n > 0 ? n : 0)) - 1u);
}

/* Lanes l in [0, 16) with 0 <= base + l * step < limit (step 1 only). */
INL __mmask16 range_mask(int64_t base, int64_t limit)
{
    int64_t lo = base < 0 ? -base : 0, hi = limit - base;
    if (hi > 16)
        hi = 16;
    if (lo >= hi)
        return 0;
    return (__mmask16)(lane_mask((int)hi) & ~lane_mask((int)lo));
}

INL __m512 act_v(__m512 v, int act, __m512 lo, __m512 hi)
{
    /* max(a, v) returns v when v is NaN, so NaN stays visible. */
    if (act == S4D_CPUCONV_ACT_RELU)
        v = _mm512_max_ps(_mm512_setzero_ps(), v);
    else if (act == S4D_CPUCONV_ACT_CLIP)
        v = _mm512_min_ps(hi, _mm512_max_ps(lo, v));
    return v;
}

INL void ukr_nv(const int nv, int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc,
                int mr, int nc, int accumulate, const cc_epi *epi)
{
    __m512 acc[CC_MR][3];
    const __mmask16 lm = lane_mask(nc - 16 * (nv - 1));
    for (int i = 0; i < CC_MR; i++)
        for (int j = 0; j < nv; j++) {
            __mmask16 mk = j == nv - 1 ? lm : (__mmask16)0xFFFF;
            acc[i][j] = accumulate && i < mr ? _mm512_maskz_loadu_ps(mk, c + i * ldc + 16 * j) : _mm512_setzero_ps();
        }
    /* Named accumulators: GCC keeps an indexed array in memory inside the loop. */
#define CC_LOAD_ROW(i) __m512 c##i##0 = acc[i][0], c##i##1 = acc[i][1], c##i##2 = acc[i][2];
#define CC_FMA_ROW(i)                                                                                           \
    {                                                                                                           \
        __m512 ai = _mm512_set1_ps(a[i]);                                                                       \
        c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0);                                                             \
        if (nv > 1)                                                                                             \
            c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1);                                                         \
        if (nv > 2)                                                                                             \
            c##i##2 = _mm512_fmadd_ps(ai, b2, c##i##2);                                                         \
    }
#define CC_STORE_ROW(i) acc[i][0] = c##i##0, acc[i][1] = c##i##1, acc[i][2] = c##i##2;
    for (int i = 0; i < CC_MR; i++)
        for (int j = nv; j < 3; j++)
            acc[i][j] = _mm512_setzero_ps();
    CC_LOAD_ROW(0) CC_LOAD_ROW(1) CC_LOAD_ROW(2) CC_LOAD_ROW(3)
    CC_LOAD_ROW(4) CC_LOAD_ROW(5) CC_LOAD_ROW(6) CC_LOAD_ROW(7)
    for (int64_t k = 0; k < kc; k++) {
        __m512 b0, b1 = _mm512_setzero_ps(), b2 = _mm512_setzero_ps();
        if (nv == 1) {
            b0 = _mm512_maskz_loadu_ps(lm, b);
        } else if (nv == 2) {
            b0 = _mm512_loadu_ps(b);
            b1 = _mm512_maskz_loadu_ps(lm, b + 16);
        } else {
            b0 = _mm512_loadu_ps(b);
            b1 = _mm512_loadu_ps(b + 16);
            b2 = _mm512_maskz_loadu_ps(lm, b + 32);
        }
        CC_FMA_ROW(0) CC_FMA_ROW(1) CC_FMA_ROW(2) CC_FMA_ROW(3)
        CC_FMA_ROW(4) CC_FMA_ROW(5) CC_FMA_ROW(6) CC_FMA_ROW(7)
        a += CC_MR;
        b += ldb;
    }
    CC_STORE_ROW(0) CC_STORE_ROW(1) CC_STORE_ROW(2) CC_STORE_ROW(3)
    CC_STORE_ROW(4) CC_STORE_ROW(5) CC_STORE_ROW(6) CC_STORE_ROW(7)
#undef CC_LOAD_ROW
#undef CC_FMA_ROW
#undef CC_STORE_ROW
    if (epi) {
        const __m512 lo = _mm512_set1_ps(epi->lo), hi = _mm512_set1_ps(epi->hi);
        for (int i = 0; i < CC_MR; i++) {
            if (i >= mr)
                break;
            for (int j = 0; j < nv; j++) {
                __mmask16 mk = j == nv - 1 ? lm : (__mmask16)0xFFFF;
                __m512 v = acc[i][j];
                if (epi->bias)
                    v = _mm512_add_ps(v, _mm512_set1_ps(epi->bias[i]));
                if (epi->res)
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, epi->res + i * epi->ldr + 16 * j));
                acc[i][j] = act_v(v, epi->act, lo, hi);
            }
        }
    }
    for (int i = 0; i < CC_MR; i++) {
        if (i >= mr)
            break;
        for (int j = 0; j < nv; j++)
            _mm512_mask_storeu_ps(c + i * ldc + 16 * j, j == nv - 1 ? lm : (__mmask16)0xFFFF, acc[i][j]);
    }
}

static TGT void ukr1(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr,
                     int nc, int accumulate, const cc_epi *epi)
{
    ukr_nv(1, kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
}

static TGT void ukr2(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr,
                     int nc, int accumulate, const cc_epi *epi)
{
    ukr_nv(2, kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
}

static TGT void ukr3(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr,
                     int nc, int accumulate, const cc_epi *epi)
{
    ukr_nv(3, kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
}

static TGT void ukr(int64_t kc, const float *a, const float *b, int64_t ldb, float *c, int64_t ldc, int mr, int nc,
                    int accumulate, const cc_epi *epi)
{
    if (nc > 32)
        ukr3(kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
    else if (nc > 16)
        ukr2(kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
    else
        ukr1(kc, a, b, ldb, c, ldc, mr, nc, accumulate, epi);
}

/* 16 elements row[ix + l * sw] (0 outside [0, w)), for the lanes in `want`. */
INL __m512 load_strided(const float *row, int64_t w, int64_t ix, int64_t sw, __mmask16 want)
{
    if (sw == 1)
        return _mm512_maskz_loadu_ps(want & range_mask(ix, w), row + ix);
    if (sw == 2) {
        /* Two contiguous loads and a permute that keeps the even elements. */
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        __m512 lo = _mm512_maskz_loadu_ps(range_mask(ix, w), row + ix);
        __m512 hi = _mm512_maskz_loadu_ps(range_mask(ix + 16, w), row + ix + 16);
        return _mm512_maskz_permutex2var_ps(want, lo, even, hi);
    }
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int32_t)ix), _mm512_mullo_epi32(lanes, _mm512_set1_epi32((int32_t)sw)));
    __mmask16 ok = want & _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512()) &
                   _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32((int32_t)w));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), ok, idx, row, 4);
}

static TGT void pack_row(const float *row, int64_t w, int64_t ix0, int64_t sw, int len, float *dst)
{
    for (int j = 0; j < len; j += 16) {
        __mmask16 want = lane_mask(len - j);
        __m512 v = row ? load_strided(row, w, ix0 + j * sw, sw, want) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(dst + j, want, v);
    }
}

/* ---- Winograd transforms: one lane per tile, 16 tiles per vector. ---- */

INL void bt4(const __m512 *d, __m512 *r)
{
    const __m512 four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(5.0f), two = _mm512_set1_ps(2.0f);
    __m512 t0 = _mm512_fnmadd_ps(four, d[2], d[4]), t1 = _mm512_fnmadd_ps(four, d[1], d[3]);
    __m512 t2 = _mm512_sub_ps(d[4], d[2]), t3 = _mm512_mul_ps(two, _mm512_sub_ps(d[3], d[1]));
    r[0] = _mm512_fmadd_ps(four, d[0], _mm512_fnmadd_ps(five, d[2], d[4]));
    r[1] = _mm512_add_ps(t0, t1);
    r[2] = _mm512_sub_ps(t0, t1);
    r[3] = _mm512_add_ps(t2, t3);
    r[4] = _mm512_sub_ps(t2, t3);
    r[5] = _mm512_fmadd_ps(four, d[1], _mm512_fnmadd_ps(five, d[3], d[5]));
}

INL void bt2(const __m512 *d, __m512 *r)
{
    r[0] = _mm512_sub_ps(d[0], d[2]);
    r[1] = _mm512_add_ps(d[1], d[2]);
    r[2] = _mm512_sub_ps(d[2], d[1]);
    r[3] = _mm512_sub_ps(d[1], d[3]);
}

INL void at4(const __m512 *s, __m512 *o)
{
    __m512 s12 = _mm512_add_ps(s[1], s[2]), d12 = _mm512_sub_ps(s[1], s[2]);
    __m512 s34 = _mm512_add_ps(s[3], s[4]), d34 = _mm512_sub_ps(s[3], s[4]);
    o[0] = _mm512_add_ps(_mm512_add_ps(s[0], s12), s34);
    o[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d34, d12);
    o[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s34, s12);
    o[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d34, d12), s[5]);
}

INL void at2(const __m512 *s, __m512 *o)
{
    o[0] = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]);
    o[1] = _mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]);
}

INL void wino_in_m(const int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w, int64_t pt,
                   int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride)
{
    enum { A_MAX = 6 };
    const int a = m + 2;
    const __mmask16 live = lane_mask(t->n);
    __m512i oy = _mm512_maskz_loadu_epi32(live, t->oy), ox = _mm512_maskz_loadu_epi32(live, t->ox);
    __m512i iy0 = _mm512_sub_epi32(oy, _mm512_set1_epi32((int32_t)pt));
    __m512i ix0 = _mm512_sub_epi32(ox, _mm512_set1_epi32((int32_t)pl));
    __m512i base = _mm512_add_epi32(_mm512_mullo_epi32(iy0, _mm512_set1_epi32((int32_t)w)), ix0);
    __mmask16 rok[A_MAX], cok[A_MAX];
    for (int r = 0; r < a; r++) {
        __m512i iy = _mm512_add_epi32(iy0, _mm512_set1_epi32(r)), ix = _mm512_add_epi32(ix0, _mm512_set1_epi32(r));
        rok[r] = live & _mm512_cmpge_epi32_mask(iy, _mm512_setzero_si512()) &
                 _mm512_cmplt_epi32_mask(iy, _mm512_set1_epi32((int32_t)h));
        cok[r] = _mm512_cmpge_epi32_mask(ix, _mm512_setzero_si512()) &
                 _mm512_cmplt_epi32_mask(ix, _mm512_set1_epi32((int32_t)w));
    }
    /* Sixteen consecutive tiles of one tile row, all inside the image: plain
     * loads of each input row and a permute per column replace the gathers. */
    int row_run = t->n == 16 && rok[0] == 0xFFFF && rok[a - 1] == 0xFFFF && cok[0] == 0xFFFF &&
                  cok[a - 1] == 0xFFFF;
    for (int l = 1; row_run && l < 16; l++)
        row_run = t->oy[l] == t->oy[0] && t->ox[l] == t->ox[0] + m * l;
    /* Column q < m of the 16 tiles is element m * l + q of the row's first
     * 16m; columns q >= m are columns q - m shifted down one tile. */
    __m512i pidx[4];
    for (int q = 0; q < m; q++) {
        int32_t id[16];
        for (int l = 0; l < 16; l++)
            id[l] = m * l + q;
        pidx[q] = _mm512_loadu_si512(id);
    }
    const __m512i k32 = _mm512_set1_epi32(32);
    for (int64_t c = 0; c < nc; c++) {
        const float *xc = x + c * plane_stride;
        __m512 u[A_MAX][A_MAX]; /* u[r][q]: row transform of input row r */
        for (int r = 0; r < a; r++) {
            __m512 d[A_MAX];
            if (row_run) {
                const float *src = xc + (int64_t)(t->oy[0] - pt + r) * w + (t->ox[0] - pl);
                __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
                if (m == 4) {
                    __m512 v2 = _mm512_loadu_ps(src + 32), v3 = _mm512_loadu_ps(src + 48);
                    for (int q = 0; q < 4; q++) {
                        __m512 lo = _mm512_permutex2var_ps(v0, pidx[q], v1);
                        __m512 hi = _mm512_permutex2var_ps(v2, _mm512_sub_epi32(pidx[q], k32), v3);
                        d[q] = _mm512_mask_blend_ps(_mm512_cmpge_epi32_mask(pidx[q], k32), lo, hi);
                    }
                } else {
                    for (int q = 0; q < 2; q++)
                        d[q] = _mm512_permutex2var_ps(v0, pidx[q], v1);
                }
                for (int q = m; q < a; q++) {
                    __m512i next = _mm512_castps_si512(_mm512_set1_ps(src[16 * m + q - m]));
                    d[q] = _mm512_castsi512_ps(_mm512_alignr_epi32(next, _mm512_castps_si512(d[q - m]), 1));
                }
            } else {
                for (int q = 0; q < a; q++) {
                    __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32((int32_t)(r * w + q)));
                    d[q] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rok[r] & cok[q], idx, xc, 4);
                }
            }
            if (m == 4)
                bt4(d, u[r]);
            else
                bt2(d, u[r]);
        }
        for (int q = 0; q < a; q++) {
            __m512 col[A_MAX], v[A_MAX];
            for (int r = 0; r < a; r++)
                col[r] = u[r][q];
            if (m == 4)
                bt4(col, v);
            else
                bt2(col, v);
            for (int r = 0; r < a; r++)
                _mm512_storeu_ps(dst + (r * a + q) * xi_stride + c * c_stride, v[r]);
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

/* out[l * 4 + j] = o[j][l]: four vectors of 16 tiles to 64 consecutive outputs. */
INL void interleave4(const __m512 *o, __m512 *out)
{
    __m512 t0 = _mm512_unpacklo_ps(o[0], o[1]), t1 = _mm512_unpackhi_ps(o[0], o[1]);
    __m512 t2 = _mm512_unpacklo_ps(o[2], o[3]), t3 = _mm512_unpackhi_ps(o[2], o[3]);
    __m512 u0 = _mm512_shuffle_ps(t0, t2, 0x44), u1 = _mm512_shuffle_ps(t0, t2, 0xEE);
    __m512 u2 = _mm512_shuffle_ps(t1, t3, 0x44), u3 = _mm512_shuffle_ps(t1, t3, 0xEE);
    /* u_k holds tile 4q + k in 128-bit block q; regroup blocks to tile order. */
    __m512 v0 = _mm512_shuffle_f32x4(u0, u1, 0x44), v1 = _mm512_shuffle_f32x4(u2, u3, 0x44);
    __m512 v2 = _mm512_shuffle_f32x4(u0, u1, 0xEE), v3 = _mm512_shuffle_f32x4(u2, u3, 0xEE);
    out[0] = _mm512_shuffle_f32x4(v0, v1, 0x88);
    out[1] = _mm512_shuffle_f32x4(v0, v1, 0xDD);
    out[2] = _mm512_shuffle_f32x4(v2, v3, 0x88);
    out[3] = _mm512_shuffle_f32x4(v2, v3, 0xDD);
}

/* out[l * 2 + j] = o[j][l]: two vectors of 16 tiles to 32 consecutive outputs. */
INL void interleave2(const __m512 *o, __m512 *out)
{
    __m512 lo = _mm512_unpacklo_ps(o[0], o[1]), hi = _mm512_unpackhi_ps(o[0], o[1]);
    /* lo: tiles 4q, 4q+1 in block q; hi: tiles 4q+2, 4q+3. */
    __m512 a = _mm512_shuffle_f32x4(lo, hi, 0x44), b = _mm512_shuffle_f32x4(lo, hi, 0xEE);
    out[0] = _mm512_shuffle_f32x4(a, a, 0xD8);
    out[1] = _mm512_shuffle_f32x4(b, b, 0xD8);
}

INL void wino_out_m(const int m, const float *src, int64_t xi_stride, int64_t m_stride, int64_t nm,
                    const cc_tiles *t, int64_t ho, int64_t wo, const float *bias, const float *res, float *y,
                    int64_t plane_stride, const cc_post *post)
{
    enum { A_MAX = 6, M_MAX = 4 };
    const int a = m + 2;
    const __mmask16 live = lane_mask(t->n);
    const __m512 lo = _mm512_set1_ps(post->lo), hi = _mm512_set1_ps(post->hi);
    __m512i oy = _mm512_maskz_loadu_epi32(live, t->oy), ox = _mm512_maskz_loadu_epi32(live, t->ox);
    __m512i base = _mm512_add_epi32(_mm512_mullo_epi32(oy, _mm512_set1_epi32((int32_t)wo)), ox);
    __mmask16 rok[M_MAX], cok[M_MAX];
    for (int r = 0; r < m; r++) {
        rok[r] = live & _mm512_cmplt_epi32_mask(_mm512_add_epi32(oy, _mm512_set1_epi32(r)), _mm512_set1_epi32((int32_t)ho));
        cok[r] = _mm512_cmplt_epi32_mask(_mm512_add_epi32(ox, _mm512_set1_epi32(r)), _mm512_set1_epi32((int32_t)wo));
    }
    int row_run = t->n == 16 && rok[m - 1] == 0xFFFF && cok[m - 1] == 0xFFFF;
    for (int l = 1; row_run && l < 16; l++)
        row_run = t->oy[l] == t->oy[0] && t->ox[l] == t->ox[0] + m * l;
    for (int64_t j = 0; j < nm; j++) {
        __m512 u[M_MAX][A_MAX]; /* u[r][q]: column transform, output row r */
        for (int q = 0; q < a; q++) {
            __m512 s[A_MAX], o[M_MAX];
            for (int r = 0; r < a; r++)
                s[r] = _mm512_loadu_ps(src + (r * a + q) * xi_stride + j * m_stride);
            if (m == 4)
                at4(s, o);
            else
                at2(s, o);
            for (int r = 0; r < m; r++)
                u[r][q] = o[r];
        }
        const __m512 bv = _mm512_set1_ps(bias ? bias[j] : 0.0f);
        float *yj = y + j * plane_stride;
        const float *rj = res ? res + j * plane_stride : NULL;
        for (int r = 0; r < m; r++) {
            __m512 o[M_MAX];
            if (m == 4)
                at4(u[r], o);
            else
                at2(u[r], o);
            if (row_run) {
                __m512 out[M_MAX];
                if (m == 4)
                    interleave4(o, out);
                else
                    interleave2(o, out);
                int64_t at = (int64_t)(t->oy[0] + r) * wo + t->ox[0];
                for (int v = 0; v < m; v++) {
                    __m512 z = _mm512_add_ps(out[v], bv);
                    if (rj)
                        z = _mm512_add_ps(z, _mm512_loadu_ps(rj + at + 16 * v));
                    _mm512_storeu_ps(yj + at + 16 * v, act_v(z, post->act, lo, hi));
                }
                continue;
            }
            for (int q = 0; q < m; q++) {
                __mmask16 ok = rok[r] & cok[q];
                __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32((int32_t)(r * wo + q)));
                __m512 z = _mm512_add_ps(o[q], bv);
                if (rj)
                    z = _mm512_add_ps(z, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), ok, idx, rj, 4));
                _mm512_mask_i32scatter_ps(yj, ok, idx, act_v(z, post->act, lo, hi), 4);
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
    const __m512 lo = _mm512_set1_ps(post->lo), hi = _mm512_set1_ps(post->hi);
    for (int64_t oy = oy0; oy < oy1; oy++) {
        for (int64_t ox = 0; ox < g->wo; ox += 16) {
            __mmask16 want = lane_mask((int)(g->wo - ox > 16 ? 16 : g->wo - ox));
            __m512 acc = _mm512_setzero_ps();
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                const float *row = x + iy * g->w;
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    __m512 v = load_strided(row, g->w, ox * g->sw - g->pl + kx * g->dw, g->sw, want);
                    acc = _mm512_fmadd_ps(_mm512_set1_ps(wk[ky * g->kw + kx]), v, acc);
                }
            }
            acc = _mm512_add_ps(acc, _mm512_set1_ps(bias));
            if (res)
                acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(want, res + oy * g->wo + ox));
            _mm512_mask_storeu_ps(y + oy * g->wo + ox, want, act_v(acc, post->act, lo, hi));
        }
    }
}

const cc_ops s4d_cc_ops_avx512 = {S4D_CPUCONV_ISA_AVX512, NR, VL, ukr, pack_row, wino_in, wino_out, dw_rows};
