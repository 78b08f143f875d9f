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

#include "backend/cpu/conv/avx512_inl.h"
#include "backend/cpu/conv/cpuconv_impl.h"

#define NR 48
#define VL 16

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
        if ((k & 1) == 0) /* weights stream from L3 or memory: 64 steps (2 KiB) ahead */
            _mm_prefetch((const char *)(a + 64 * CC_MR), _MM_HINT_T0);
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

#define CC_T_ROWS(NV)                                                                                            \
    static TGT void ukr_t_##NV(int64_t kc, const float *x, const int64_t *off, int rows, int64_t lda,            \
                               const float *w, float *t, int accumulate, int pf)                                 \
    {                                                                                                            \
        switch (rows) {                                                                                          \
        case 8: ukr_t_rn(8, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                       \
        case 7: ukr_t_rn(7, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                       \
        case 6: ukr_t_rn(6, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                       \
        case 5: ukr_t_rn(5, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                       \
        case 4: ukr_t_rn(4, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                       \
        case 3: ukr_t_rn(3, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                       \
        case 2: ukr_t_rn(2, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                       \
        default: ukr_t_rn(1, NV, kc, x, off, lda, w, t, accumulate, pf, NULL); break;                                      \
        }                                                                                                        \
    }
CC_T_ROWS(1)
CC_T_ROWS(2)
CC_T_ROWS(3)
#undef CC_T_ROWS

static TGT void ukr_t(int64_t kc, const float *x, const int64_t *off, int rows, int64_t lda, const float *w,
                      float *t, int ncol, int accumulate, int prefetch)
{
    if (ncol > 32)
        ukr_t_3(kc, x, off, rows, lda, w, t, accumulate, prefetch);
    else if (ncol > 16)
        ukr_t_2(kc, x, off, rows, lda, w, t, accumulate, prefetch);
    else
        ukr_t_1(kc, x, off, rows, lda, w, t, accumulate, prefetch);
}

INL int64_t plane_out(const cc_dwc *d)
{
    return d->ho * d->wo;
}

/* Small maps' output pass (cc_ops.tr_out): blocks of 16 pixels x 16 channels of T, transposed in
 * registers into 16 channel rows, then the epilogue and one store per channel. */
static TGT void tr_out(const float *t, int64_t pix, int ncol, const float *bias, const float *res, float *y,
                       int64_t ldy, const cc_post *post)
{
    const __m512 lo = _mm512_set1_ps(post->lo), hi = _mm512_set1_ps(post->hi), zero = _mm512_setzero_ps();
    __m512 r[16];
    for (int j0 = 0; j0 < ncol; j0 += 16) {
        const int nj = ncol - j0 < 16 ? ncol - j0 : 16;
        for (int64_t i = 0; i < pix; i += 16) {
            const int n = (int)(pix - i < 16 ? pix - i : 16);
            const __mmask16 mk = lane_mask(n);
            for (int q = 0; q < 16; q++)
                r[q] = q < n ? _mm512_loadu_ps(t + (i + q) * CC_TN + j0) : zero;
            transpose16(r);
            for (int c = 0; c < nj; c++) {
                __m512 v = r[c];
                if (bias)
                    v = _mm512_add_ps(v, _mm512_set1_ps(bias[j0 + c]));
                if (res)
                    v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mk, res + (j0 + c) * ldy + i));
                _mm512_mask_storeu_ps(y + (j0 + c) * ldy + i, mk, act_v(v, post->act, lo, hi));
            }
        }
    }
}

/* 16 elements row[ix + l * sw] (0 outside [0, w)), for the lanes in `want`. */
INL __m512 load_strided(const float *row, int64_t w, int64_t ix, int64_t sw, __mmask16 want)
{
    if (ix >= 0 && ix + 15 * sw < w && (sw == 1 || sw == 2)) {
        /* inside the row: no bounds masks (the odd elements past the last
         * even one are not read) */
        if (sw == 1)
            return _mm512_loadu_ps(row + ix);
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        return _mm512_permutex2var_ps(_mm512_loadu_ps(row + ix), even,
                                      _mm512_maskz_loadu_ps((__mmask16)0x7FFF, row + ix + 16));
    }
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
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int32_t)ix),
                                   _mm512_mullo_epi32(lanes, _mm512_set1_epi32((int32_t)sw)));
    __mmask16 ok = want & _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512()) &
                   _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32((int32_t)w));
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), ok, idx, row, 4);
}

/* One segment: dst[j] = row[ix0 + j * sw] (0 outside [0, w)), j < len. */
INL void pack_run(const float *row, int64_t w, int64_t ix0, int64_t sw, int len, float *dst)
{
    const int64_t last = ix0 + (int64_t)(len - 1) * sw;
    if (ix0 >= 0 && last < w) {
        /* inside the row: no bounds masks, only the tail of the run */
        if (sw == 1) {
            int j = 0;
            for (; j + 16 <= len; j += 16)
                _mm512_storeu_ps(dst + j, _mm512_loadu_ps(row + ix0 + j));
            if (j < len) {
                __mmask16 t = lane_mask(len - j);
                _mm512_mask_storeu_ps(dst + j, t, _mm512_maskz_loadu_ps(t, row + ix0 + j));
            }
            return;
        }
        if (sw == 2) {
            const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            for (int j = 0; j < len; j += 16) {
                const int n = len - j < 16 ? len - j : 16;
                const float *src = row + ix0 + 2 * j;
                /* elements 0 .. 2n - 2 of src are needed, all inside the row */
                __m512 lo = _mm512_maskz_loadu_ps(lane_mask(2 * n - 1), src);
                __m512 hi = _mm512_maskz_loadu_ps(lane_mask(2 * n - 17), src + 16);
                _mm512_mask_storeu_ps(dst + j, lane_mask(n), _mm512_permutex2var_ps(lo, even, hi));
            }
            return;
        }
    }
    for (int j = 0; j < len; j += 16) {
        __mmask16 want = lane_mask(len - j);
        _mm512_mask_storeu_ps(dst + j, want, load_strided(row, w, ix0 + j * sw, sw, want));
    }
}

static TGT void pack_b(const cc_pack *pk)
{
    const int64_t kh = pk->kh, kw = pk->kw, khw = kh * kw, ahead = cc_prefetch_distance(pk);
    int64_t ci = pk->k0 / khw, ky = (pk->k0 % khw) / kw, kx = pk->k0 % kw;
    int64_t doff[CC_NR_MAX * 8];
    const int64_t nseg = pk->nseg <= CC_NR_MAX * 8 ? pk->nseg : CC_NR_MAX * 8;
    for (int64_t s = 0; s < nseg; s++)
        doff[s] = (pk->segs[s].at / NR) * pk->kcb * NR + pk->segs[s].at % NR;
    for (int64_t kk = 0; kk < pk->kcb; kk++) {
        const float *xc = pk->x + ci * pk->plane;
        if (ky == 0 && kx == 0)
            cc_prefetch_channel(pk, ci + ahead);
        for (int64_t s = 0; s < pk->nseg; s++) {
            const cc_seg *sg = &pk->segs[s];
            const int64_t iy = (int64_t)sg->oy * pk->sh - pk->pt + ky * pk->dh;
            float *dst = pk->dst + kk * NR + (s < nseg ? doff[s] : (sg->at / NR) * pk->kcb * NR + sg->at % NR);
            if (iy < 0 || iy >= pk->h) {
                for (int j = 0; j < sg->len; j += 16)
                    _mm512_mask_storeu_ps(dst + j, lane_mask(sg->len - j), _mm512_setzero_ps());
                continue;
            }
            pack_run(xc + iy * pk->w, pk->w, (int64_t)sg->ox * pk->sw - pk->pl + kx * pk->dw, pk->sw, sg->len, dst);
        }
        if (++kx == kw) {
            kx = 0;
            if (++ky == kh) {
                ky = 0;
                ci++;
            }
        }
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

/* Gathers: the fallback for tile vectors of more than CC_RUNS_MAX runs. */
INL void wino_in_gather(const int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w,
                        int64_t pt, int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride)
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
    for (int64_t c = 0; c < nc; c++) {
        const float *xc = x + c * plane_stride;
        __m512 u[A_MAX][A_MAX];
        for (int r = 0; r < a; r++) {
            __m512 d[A_MAX];
            for (int q = 0; q < a; q++) {
                __m512i idx = _mm512_add_epi32(base, _mm512_set1_epi32((int32_t)(r * w + q)));
                d[q] = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), rok[r] & cok[q], idx, xc, 4);
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

INL void wino_in_m(const int m, const float *x, int64_t plane_stride, int64_t nc, int64_t h, int64_t w, int64_t pt,
                   int64_t pl, const cc_tiles *t, float *dst, int64_t xi_stride, int64_t c_stride)
{
    enum { A_MAX = 6 };
    const int a = m + 2;
    cc_runs runs;
    if (!cc_tile_runs(t, m, &runs)) {
        wino_in_gather(m, x, plane_stride, nc, h, w, pt, pl, t, dst, xi_stride, c_stride);
        return;
    }
    /* Per run: lanes, and for column q of each tile the element it takes from
     * the run's row (lane l: m * (l - l0) + q), with the half it comes from. */
    __mmask16 rmask[CC_RUNS_MAX], hi_half[CC_RUNS_MAX][A_MAX];
    __m512i idx[CC_RUNS_MAX][A_MAX];
    int64_t row0[CC_RUNS_MAX], col0[CC_RUNS_MAX];
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int k = 0; k < runs.n; k++) {
        const int l0 = runs.l0[k], n = runs.len[k];
        rmask[k] = (__mmask16)(lane_mask(l0 + n) & ~lane_mask(l0));
        row0[k] = t->oy[l0] - pt;
        col0[k] = t->ox[l0] - pl;
        __m512i rel = _mm512_mullo_epi32(_mm512_sub_epi32(lanes, _mm512_set1_epi32(l0)), _mm512_set1_epi32(m));
        for (int q = 0; q < a; q++) {
            idx[k][q] = _mm512_and_si512(_mm512_add_epi32(rel, _mm512_set1_epi32(q)), _mm512_set1_epi32(63));
            hi_half[k][q] = _mm512_cmpge_epi32_mask(idx[k][q], _mm512_set1_epi32(32));
        }
    }
    /* A run of 16 tiles needs m * 16 + 2 elements; its last two columns are
     * the first two shifted down one tile, plus one element past the loads. */
    const int full = runs.n == 1 && runs.len[0] == 16;
    for (int64_t c = 0; c < nc; c++) {
        const float *xc = x + c * plane_stride;
        if (c + 1 < nc)
            for (int k = 0; k < runs.n; k++)
                for (int r = 0; r < a; r++) {
                    int64_t iy = row0[k] + r;
                    if (iy < 0 || iy >= h)
                        continue;
                    const float *nx = xc + plane_stride + iy * w;
                    int64_t e0 = col0[k] > 0 ? col0[k] : 0, e1 = col0[k] + m * runs.len[k] + 2;
                    for (int64_t e = e0; e < e1 && e < w; e += 16)
                        cc_prefetch(nx + e);
                }
        if (c + 1 < nc) /* the next channel's a x a destinations, one line each */
            for (int e = 0; e < a * a; e++)
                cc_prefetch_w(dst + e * xi_stride + (c + 1) * c_stride);
        __m512 u[A_MAX][A_MAX]; /* u[r][q]: row transform of input row r */
        for (int r = 0; r < a; r++) {
            __m512 d[A_MAX];
            for (int q = 0; q < a; q++)
                d[q] = _mm512_setzero_ps();
            for (int k = 0; k < runs.n; k++) {
                const int64_t iy = row0[k] + r, ix = col0[k];
                if (iy < 0 || iy >= h)
                    continue;
                const float *src = xc + iy * w + ix;
                __m512 v0 = _mm512_maskz_loadu_ps(range_mask(ix, w), src);
                __m512 v1 = _mm512_maskz_loadu_ps(range_mask(ix + 16, w), src + 16);
                __m512 v2 = _mm512_setzero_ps(), v3 = _mm512_setzero_ps();
                if (m == 4) {
                    v2 = _mm512_maskz_loadu_ps(range_mask(ix + 32, w), src + 32);
                    v3 = _mm512_maskz_loadu_ps(range_mask(ix + 48, w), src + 48);
                }
                for (int q = 0; q < a; q++) {
                    __m512 e;
                    if (full && q >= m) {
                        int64_t at = ix + 16 * m + q - m;
                        __m512i next = _mm512_castps_si512(_mm512_set1_ps(at < w ? src[16 * m + q - m] : 0.0f));
                        e = _mm512_castsi512_ps(_mm512_alignr_epi32(next, _mm512_castps_si512(d[q - m]), 1));
                    } else {
                        e = _mm512_permutex2var_ps(v0, idx[k][q], v1);
                        if (m == 4)
                            e = _mm512_mask_blend_ps(hi_half[k][q], e, _mm512_permutex2var_ps(v2, idx[k][q], v3));
                    }
                    d[q] = _mm512_mask_mov_ps(d[q], rmask[k], e);
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
    cc_runs runs;
    const int by_runs = cc_tile_runs(t, m, &runs);
    /* Run k's outputs of one tile row are positions [m l0, m (l0 + len)) of the
     * m interleaved vectors; they go to row oy + r from column ox(l0). */
    __mmask16 vmask[CC_RUNS_MAX][M_MAX];
    int64_t orow[CC_RUNS_MAX], ocol[CC_RUNS_MAX];
    for (int k = 0; by_runs && k < runs.n; k++) {
        const int l0 = runs.l0[k], n = runs.len[k];
        orow[k] = t->oy[l0];
        ocol[k] = t->ox[l0] - m * l0; /* column of position 0 */
        int64_t p_lo = m * l0, p_hi = m * (l0 + n);
        if (p_hi > wo - ocol[k])
            p_hi = wo - ocol[k];
        for (int v = 0; v < m; v++)
            vmask[k][v] = range_mask(16 * v - p_lo, p_hi - p_lo) ;
    }
    __mmask16 rok[M_MAX] = {0}, cok[M_MAX] = {0};
    __m512i base = _mm512_setzero_si512();
    if (!by_runs) {
        __m512i oy = _mm512_maskz_loadu_epi32(live, t->oy), ox = _mm512_maskz_loadu_epi32(live, t->ox);
        base = _mm512_add_epi32(_mm512_mullo_epi32(oy, _mm512_set1_epi32((int32_t)wo)), ox);
        for (int r = 0; r < m; r++) {
            const __m512i rv = _mm512_set1_epi32(r);
            rok[r] = live & _mm512_cmplt_epi32_mask(_mm512_add_epi32(oy, rv), _mm512_set1_epi32((int32_t)ho));
            cok[r] = _mm512_cmplt_epi32_mask(_mm512_add_epi32(ox, rv), _mm512_set1_epi32((int32_t)wo));
        }
    }
    for (int64_t j = 0; j < nm; j++) {
        if (j + 1 < nm) /* the next channel's a x a products, one line each */
            for (int e = 0; e < a * a; e++)
                cc_prefetch(src + e * xi_stride + (j + 1) * m_stride);
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
        /* The next channel's rows lie a plane away, beyond what the hardware
         * prefetchers guess: ask for them (to write, and the residual to read). */
        for (int k = 0; by_runs && j + 1 < nm && k < runs.n; k++)
            for (int r = 0; r < m && orow[k] + r < ho; r++) {
                int64_t e0 = ocol[k] + m * runs.l0[k], e1 = e0 + m * runs.len[k];
                e1 = e1 < wo ? e1 : wo;
                for (int64_t e = e0; e < e1; e += 16) {
                    cc_prefetch_w(yj + plane_stride + (orow[k] + r) * wo + e);
                    if (rj)
                        cc_prefetch(rj + plane_stride + (orow[k] + r) * wo + e);
                }
            }
        for (int r = 0; r < m; r++) {
            __m512 o[M_MAX];
            if (m == 4)
                at4(u[r], o);
            else
                at2(u[r], o);
            if (by_runs) {
                __m512 out[M_MAX];
                if (m == 4)
                    interleave4(o, out);
                else
                    interleave2(o, out);
                for (int k = 0; k < runs.n; k++) {
                    const int64_t oyr = orow[k] + r;
                    if (oyr >= ho)
                        continue;
                    /* may point before the row: only the masked lanes are touched */
                    const int64_t at = oyr * wo + ocol[k];
                    for (int v = 0; v < m; v++) {
                        if (!vmask[k][v])
                            continue;
                        __m512 z = _mm512_add_ps(out[v], bv);
                        if (rj)
                            z = _mm512_add_ps(z, _mm512_maskz_loadu_ps(vmask[k][v], rj + at + 16 * v));
                        _mm512_mask_storeu_ps(yj + at + 16 * v, vmask[k][v], act_v(z, post->act, lo, hi));
                    }
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

/* 3x3, stride sw (1 or 2), dilation 1: 16 outputs from input columns ix on
 * (rows NULL where outside the image; columns outside masked to zero). */
INL __m512 dw3_vec(const int sw, const float *const *rows, int64_t ix, int64_t w, const __m512 *wv)
{
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    __m512 acc = _mm512_setzero_ps();
    if (sw == 1) {
        const __mmask16 m0 = range_mask(ix, w), m1 = range_mask(ix + 1, w), m2 = range_mask(ix + 2, w);
        for (int ky = 0; ky < 3; ky++) {
            if (!rows[ky])
                continue;
            const float *src = rows[ky] + ix;
            acc = _mm512_fmadd_ps(wv[3 * ky + 0], _mm512_maskz_loadu_ps(m0, src), acc);
            acc = _mm512_fmadd_ps(wv[3 * ky + 1], _mm512_maskz_loadu_ps(m1, src + 1), acc);
            acc = _mm512_fmadd_ps(wv[3 * ky + 2], _mm512_maskz_loadu_ps(m2, src + 2), acc);
        }
        return acc;
    }
    /* columns ix .. ix + 32: evens for kx = 0, odds for 1, evens shifted for 2 */
    const __mmask16 ma = range_mask(ix, w), mb = range_mask(ix + 16, w), mc = range_mask(ix + 32, w) & 1;
    for (int ky = 0; ky < 3; ky++) {
        if (!rows[ky])
            continue;
        const float *src = rows[ky] + ix;
        __m512 a = _mm512_maskz_loadu_ps(ma, src), b = _mm512_maskz_loadu_ps(mb, src + 16);
        __m512 c = _mm512_maskz_loadu_ps(mc, src + 32);
        __m512 e = _mm512_permutex2var_ps(a, even, b), o = _mm512_permutex2var_ps(a, odd, b);
        __m512 e1 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(c), _mm512_castps_si512(e), 1));
        acc = _mm512_fmadd_ps(wv[3 * ky + 0], e, acc);
        acc = _mm512_fmadd_ps(wv[3 * ky + 1], o, acc);
        acc = _mm512_fmadd_ps(wv[3 * ky + 2], e1, acc);
    }
    return acc;
}

static TGT void dw_rows(const cc_geom *g, const float *x, const float *wk, float bias, const float *res, float *y,
                        int64_t oy0, int64_t oy1, const cc_post *post)
{
    const __m512 lo = _mm512_set1_ps(post->lo), hi = _mm512_set1_ps(post->hi), bv = _mm512_set1_ps(bias);
    const int fast3 = g->kh == 3 && g->kw == 3 && g->dh == 1 && g->dw == 1 && g->sh == g->sw &&
                      (g->sw == 1 || g->sw == 2);
    __m512 wv[9];
    for (int i = 0; i < 9 && fast3; i++)
        wv[i] = _mm512_set1_ps(wk[i]);
    for (int64_t oy = oy0; oy < oy1; oy++) {
        const int64_t iy0 = oy * g->sh - g->pt;
        const float *rows[3] = {NULL, NULL, NULL};
        for (int64_t ky = 0; ky < g->kh; ky++) {
            int64_t iy = iy0 + ky * g->dh;
            if (iy < 0 || iy >= g->h)
                continue;
            if (ky < 3)
                rows[ky] = x + iy * g->w;
            for (int64_t e = 0; e < g->w; e += 16) /* the hardware prefetchers miss these row streams */
                cc_prefetch(x + iy * g->w + e);
        }
        for (int64_t ox = 0; ox < g->wo; ox += 16) {
            __mmask16 want = lane_mask((int)(g->wo - ox > 16 ? 16 : g->wo - ox));
            __m512 acc;
            if (fast3) {
                const int64_t ix = ox * g->sw - g->pl;
                acc = g->sw == 1 ? dw3_vec(1, rows, ix, g->w, wv) : dw3_vec(2, rows, ix, g->w, wv);
            } else {
                acc = _mm512_setzero_ps();
                for (int64_t ky = 0; ky < g->kh; ky++) {
                    int64_t iy = iy0 + ky * g->dh;
                    if (iy < 0 || iy >= g->h)
                        continue;
                    const float *row = x + iy * g->w;
                    for (int64_t kx = 0; kx < g->kw; kx++) {
                        __m512 v = load_strided(row, g->w, ox * g->sw - g->pl + kx * g->dw, g->sw, want);
                        acc = _mm512_fmadd_ps(_mm512_set1_ps(wk[ky * g->kw + kx]), v, acc);
                    }
                }
            }
            acc = _mm512_add_ps(acc, bv);
            if (res)
                acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(want, res + oy * g->wo + ox));
            _mm512_mask_storeu_ps(y + oy * g->wo + ox, want, act_v(acc, post->act, lo, hi));
        }
    }
}

static TGT void dw_staged(const cc_dws *d, const float *wk, float bias, const float *res, float *y,
                          const cc_post *post)
{
    int64_t q = 0;
    for (; q + CC_DW_UNROLL <= d->len; q += CC_DW_UNROLL) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        const float *s = d->sub + q;
        for (int t = 0; t < d->ntaps; t++) {
            const __m512 wv = _mm512_set1_ps(wk[t]);
            const float *src = s + d->off[t];
            a0 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src), a0);
            a1 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src + 16), a1);
            a2 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src + 32), a2);
            a3 = _mm512_fmadd_ps(wv, _mm512_loadu_ps(src + 48), a3);
        }
        _mm512_storeu_ps(d->out + q, a0);
        _mm512_storeu_ps(d->out + q + 16, a1);
        _mm512_storeu_ps(d->out + q + 32, a2);
        _mm512_storeu_ps(d->out + q + 48, a3);
    }
    for (; q < d->len; q += 16) {
        __m512 a0 = _mm512_setzero_ps();
        for (int t = 0; t < d->ntaps; t++)
            a0 = _mm512_fmadd_ps(_mm512_set1_ps(wk[t]), _mm512_loadu_ps(d->sub + q + d->off[t]), a0);
        _mm512_storeu_ps(d->out + q, a0);
    }
    const __m512 lo = _mm512_set1_ps(post->lo), hi = _mm512_set1_ps(post->hi), bv = _mm512_set1_ps(bias);
    for (int64_t oy = 0; oy < d->ho; oy++) {
        const float *o = d->out + oy * d->ws;
        for (int64_t ox = 0; ox < d->wo; ox += 16) {
            const __mmask16 m = lane_mask((int)(d->wo - ox > 16 ? 16 : d->wo - ox));
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, o + ox), bv);
            if (res)
                v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, res + oy * d->wo + ox));
            _mm512_mask_storeu_ps(y + oy * d->wo + ox, m, act_v(v, post->act, lo, hi));
        }
    }
}

/* One input row into its s sub-rows of the ring (see cc_dwr). */
INL void dwr_stage(const int sw, const cc_dwr *d, const float *row, float *dst)
{
    const int64_t pitch = d->pitch, w = d->w;
    if (sw == 1) {
        for (int64_t j = 0; j < pitch; j += 16) {
            const int64_t b = j - d->pl; /* may point before the row: masked lanes are not read */
            _mm512_storeu_ps(dst + j, _mm512_maskz_loadu_ps(range_mask(b, w), row + b));
        }
        return;
    }
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    for (int64_t j = 0; j < pitch; j += 16) {
        const int64_t b = 2 * j - d->pl;
        __m512 lo = _mm512_maskz_loadu_ps(range_mask(b, w), row + b);
        __m512 hi = _mm512_maskz_loadu_ps(range_mask(b + 16, w), row + b + 16);
        _mm512_storeu_ps(dst + j, _mm512_permutex2var_ps(lo, even, hi));
        _mm512_storeu_ps(dst + pitch + j, _mm512_permutex2var_ps(lo, odd, hi));
    }
}

/* R output rows x V vectors of 16 columns from ox (R * V <= 4 independent
 * accumulators: one chain of K * K dependent FMAs per vector would leave
 * the FMA units idle). rp: the R * S + K - S staged input rows of the block.
 * Taps in (ky, kx) order from zero, then bias, residual, activation: the
 * order of the staged-plane kernel, so both give the same bits. */
INL void dwr_block(const int K, const int S, const int R, const int V, const cc_dwr *d, const float *const *rp,
                   const __m512 *wv, __m512 bv, const float *res, float *y, int64_t oy, int64_t ox, int last_n,
                   const cc_post *post)
{
    const int64_t pitch = d->pitch, wo = d->wo;
    __m512 acc[4];
    for (int i = 0; i < 4; i++)
        acc[i] = _mm512_setzero_ps();
    for (int ky = 0; ky < K; ky++)
        for (int kx = 0; kx < K; kx++) {
            const __m512 wt = wv[ky * K + kx];
            for (int r = 0; r < R; r++) {
                const float *src = rp[r * S + ky] + (kx % S) * pitch + ox + kx / S;
                for (int v = 0; v < V; v++)
                    acc[r * V + v] = _mm512_fmadd_ps(wt, _mm512_loadu_ps(src + 16 * v), acc[r * V + v]);
            }
        }
    const __m512 lo = _mm512_set1_ps(post->lo), hi = _mm512_set1_ps(post->hi);
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) {
            const __mmask16 m = v == V - 1 ? lane_mask(last_n) : (__mmask16)0xFFFF;
            const int64_t at = (oy + r) * wo + ox + 16 * v;
            __m512 z = _mm512_add_ps(acc[r * V + v], bv);
            if (res)
                z = _mm512_add_ps(z, _mm512_maskz_loadu_ps(m, res + at));
            _mm512_mask_storeu_ps(y + at, m, act_v(z, post->act, lo, hi));
        }
}

#define CC_DWC_ROW(K, S)                                                                                         \
    static TGT void dwc_row_##K##_##S(const float *const *rp, const __m512 *wv, float *o, int64_t wo)            \
    {                                                                                                            \
        dwc_row_k(K, S, rp, wv, o, wo, 16, NULL);                                                                          \
    }
CC_DWC_ROW(3, 1)
CC_DWC_ROW(3, 2)
CC_DWC_ROW(5, 1)
CC_DWC_ROW(5, 2)
CC_DWC_ROW(7, 1)
CC_DWC_ROW(7, 2)
#undef CC_DWC_ROW

/* Depthwise, channels in vectors (cc_dwc). Taps in (ky, kx) order from zero, then bias, residual,
 * activation: the order of the other depthwise kernels, so all give the same bits. */
static TGT void dw_cv(const cc_dwc *d, const float *x, int64_t plane, int nch, const float *wk, const float *bias,
                      const float *res, float *y, int64_t oy0, int64_t oy1, const cc_post *post)
{
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    const __mmask16 mc = lane_mask(nch);
    const int ntaps = (int)(d->kh * d->kw);
    const __m512 zero = _mm512_setzero_ps();
    __m512 wv[CC_DW_MAX_TAPS], r[16];
    const __m512i widx = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(ntaps));
    for (int t = 0; t < ntaps; t++)
        wv[t] = _mm512_mask_i32gather_ps(zero, mc, widx, wk + t, 4);
    const int64_t wp = d->wp, pt = d->pt, pl = d->pl, wo = d->wo, rowf = wp * 16, tstep = d->sw * 16;
    const int64_t tx1 = pl + d->w < wp ? pl + d->w : wp;
    const __m512 lo = _mm512_set1_ps(post->lo), hi = _mm512_set1_ps(post->hi);
    float bb[16];
    for (int c = 0; c < 16; c++)
        bb[c] = bias && c < nch ? bias[c] : 0.0f;
    /* the common kernels (square, stride 1 or 2, dilation 1) have a row function of their own */
    void (*row_k)(const float *const *, const __m512 *, float *, int64_t) = NULL;
    if (d->kh == d->kw && d->sh == d->sw && d->dh == 1 && d->dw == 1 && (d->sh == 1 || d->sh == 2)) {
        const int one = d->sh == 1;
        row_k = d->kh == 3 ? (one ? dwc_row_3_1 : dwc_row_3_2)
                : d->kh == 5 ? (one ? dwc_row_5_1 : dwc_row_5_2)
                : d->kh == 7 ? (one ? dwc_row_7_1 : dwc_row_7_2)
                             : NULL;
    }
    int64_t filled = -1; /* tile rows up to here are in the ring */
    for (int64_t s0 = oy0; s0 < oy1; s0 += d->strip) {
        const int64_t s1 = s0 + d->strip < oy1 ? s0 + d->strip : oy1;
        /* the strip's input rows, into the ring */
        const int64_t ty0 = s0 * d->sh, tyl = (s1 - 1) * d->sh + (d->kh - 1) * d->dh;
        /* rows outside the image are zeros; the others get zero borders, then their pixels run
         * through the transposes as one flat range of the planes (narrow maps fill every lane) */
        int64_t ia = -1, ib = -2;
        for (int64_t ty = ty0 > filled + 1 ? ty0 : filled + 1; ty <= tyl; ty++) {
            float *row = d->tile + (ty % d->ring) * rowf;
            const int64_t iy = ty - pt;
            if (iy < 0 || iy >= d->h) {
                for (int64_t tx = 0; tx < wp; tx++)
                    _mm512_storeu_ps(row + tx * 16, zero);
                continue;
            }
            for (int64_t tx = 0; tx < pl && tx < wp; tx++)
                _mm512_storeu_ps(row + tx * 16, zero);
            for (int64_t tx = tx1; tx < wp; tx++)
                _mm512_storeu_ps(row + tx * 16, zero);
            if (ia < 0)
                ia = iy;
            ib = iy;
        }
        for (int64_t q0 = ia * d->w; ia >= 0 && q0 < (ib + 1) * d->w; q0 += 16) {
            const int64_t qe = (ib + 1) * d->w;
            const int n = (int)(qe - q0 < 16 ? qe - q0 : 16);
            const __mmask16 mn = lane_mask(n);
            for (int c = 0; c < 16; c++)
                r[c] = c < nch ? _mm512_maskz_loadu_ps(mn, x + c * plane + q0) : zero;
            transpose16(r);
            int64_t iy = q0 / d->w, ix = q0 - iy * d->w;
            float *trow = d->tile + ((iy + pt) % d->ring) * rowf + pl * 16;
            for (int j = 0; j < n; j++) {
                if (ix + pl < wp)
                    _mm512_storeu_ps(trow + ix * 16, r[j]);
                if (++ix == d->w) {
                    ix = 0;
                    iy++;
                    trow = d->tile + ((iy + pt) % d->ring) * rowf + pl * 16;
                }
            }
        }
        filled = tyl > filled ? tyl : filled;
        /* 4 output pixels at a time: 4 independent FMA chains */
        for (int64_t oy = s0; oy < s1; oy++) {
            if (row_k) {
                const float *rp[CC_DWR_MAX_K];
                for (int64_t ky = 0; ky < d->kh; ky++)
                    rp[ky] = d->tile + ((oy * d->sh + ky) % d->ring) * rowf;
                row_k(rp, wv, d->out + (oy - s0) * wo * 16, wo);
                continue;
            }
            const float *tp[CC_DW_MAX_TAPS];
            for (int64_t ky = 0; ky < d->kh; ky++) {
                const float *rp = d->tile + ((oy * d->sh + ky * d->dh) % d->ring) * rowf;
                for (int64_t kx = 0; kx < d->kw; kx++)
                    tp[ky * d->kw + kx] = rp + kx * d->dw * 16;
            }
            float *o = d->out + (oy - s0) * wo * 16;
            int64_t ox = 0;
            for (; ox + 4 <= wo; ox += 4) {
                const int64_t at = ox * tstep;
                __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
                for (int t = 0; t < ntaps; t++) {
                    const float *sp = tp[t] + at;
                    a0 = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(sp), a0);
                    a1 = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(sp + tstep), a1);
                    a2 = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(sp + 2 * tstep), a2);
                    a3 = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(sp + 3 * tstep), a3);
                }
                _mm512_storeu_ps(o + ox * 16, a0);
                _mm512_storeu_ps(o + ox * 16 + 16, a1);
                _mm512_storeu_ps(o + ox * 16 + 32, a2);
                _mm512_storeu_ps(o + ox * 16 + 48, a3);
            }
            for (; ox < wo; ox++) {
                const int64_t at = ox * tstep;
                __m512 a0 = zero;
                for (int t = 0; t < ntaps; t++)
                    a0 = _mm512_fmadd_ps(wv[t], _mm512_loadu_ps(tp[t] + at), a0);
                _mm512_storeu_ps(o + ox * 16, a0);
            }
        }
        /* back to planes, 16 pixels x 16 channels a transpose, with the epilogue */
        const int64_t q0 = s0 * wo, q1 = s1 * wo;
        for (int64_t i = q0; i < q1; i += 16) {
            const int n = (int)(q1 - i < 16 ? q1 - i : 16);
            const __mmask16 mk = lane_mask(n);
            for (int j = 0; j < 16; j++)
                r[j] = j < n ? _mm512_loadu_ps(d->out + (i - q0 + j) * 16) : zero;
            transpose16(r);
            for (int c = 0; c < nch; c++) {
                __m512 z = _mm512_add_ps(r[c], _mm512_set1_ps(bb[c]));
                if (res)
                    z = _mm512_add_ps(z, _mm512_maskz_loadu_ps(mk, res + c * plane_out(d) + i));
                _mm512_mask_storeu_ps(y + c * plane_out(d) + i, mk, act_v(z, post->act, lo, hi));
            }
        }
    }
}

INL void dwr_rows_k(const int K, const int S, const cc_dwr *d, const float *x, const float *wk, float bias,
                    const float *res, float *y, int64_t oy0, int64_t oy1, const cc_post *post)
{
    enum { MAX_ROWS = 4 * 2 + CC_DWR_MAX_K };
    const int64_t pitch = d->pitch, slot = S * pitch, wo = d->wo, ring_n = d->ring;
    float *ring = d->buf, *zero = ring + ring_n * slot;
    int64_t tag[MAX_ROWS];
    for (int k = 0; k < ring_n; k++)
        tag[k] = -1;
    for (int64_t j = 0; j < slot; j += 16)
        _mm512_storeu_ps(zero + j, _mm512_setzero_ps());
    __m512 wv[CC_DWR_MAX_K * CC_DWR_MAX_K];
    for (int t = 0; t < K * K; t++)
        wv[t] = _mm512_set1_ps(wk[t]);
    const __m512 bv = _mm512_set1_ps(bias);
    const int rows = (int)d->rows;
    for (int64_t oy = oy0; oy < oy1; oy += rows) {
        const int nr = oy1 - oy < rows ? (int)(oy1 - oy) : rows;
        const float *rp[MAX_ROWS];
        for (int i = 0; i < (nr - 1) * S + K; i++) {
            const int64_t iy = oy * S - d->pt + i;
            if (iy < 0 || iy >= d->h) {
                rp[i] = zero;
                continue;
            }
            float *dst = ring + (iy % ring_n) * slot;
            if (tag[iy % ring_n] != iy) {
                dwr_stage(S, d, x + iy * d->w, dst);
                tag[iy % ring_n] = iy;
            }
            rp[i] = dst;
        }
        /* The rows the next two groups stage: planes that come from L3 or memory
         * arrive row by row too slowly for the hardware prefetchers to follow. */
        for (int64_t i = (nr - 1) * S + K; i < (nr - 1) * S + K + 2 * rows * S; i++) {
            const int64_t iy = oy * S - d->pt + i;
            if (iy < 0 || iy >= d->h)
                continue;
            for (int64_t e = 0; e < d->w; e += 16)
                cc_prefetch(x + iy * d->w + e);
        }
        if (nr == 4 && wo <= 16) {
            dwr_block(K, S, 4, 1, d, rp, wv, bv, res, y, oy, 0, (int)wo, post);
            continue;
        }
        if (nr >= 2 && wo <= 32) {
            for (int r = 0; r + 1 < nr; r += 2) {
                if (wo <= 16)
                    dwr_block(K, S, 2, 1, d, rp + r * S, wv, bv, res, y, oy + r, 0, (int)wo, post);
                else
                    dwr_block(K, S, 2, 2, d, rp + r * S, wv, bv, res, y, oy + r, 0, (int)(wo - 16), post);
            }
            if (nr % 2 == 0)
                continue;
        }
        for (int r = nr >= 2 && wo <= 32 ? nr - 1 : 0; r < nr; r++)
            for (int64_t ox = 0; ox < wo; ox += 64) {
                const int64_t left = wo - ox;
                const int nv = left > 48 ? 4 : (int)((left + 15) / 16), ln = (int)(left - 16 * (nv - 1));
                const float *const *rr = rp + r * S;
                switch (nv) {
                case 4:
                    dwr_block(K, S, 1, 4, d, rr, wv, bv, res, y, oy + r, ox, ln > 16 ? 16 : ln, post);
                    break;
                case 3:
                    dwr_block(K, S, 1, 3, d, rr, wv, bv, res, y, oy + r, ox, ln, post);
                    break;
                case 2:
                    dwr_block(K, S, 1, 2, d, rr, wv, bv, res, y, oy + r, ox, ln, post);
                    break;
                default:
                    dwr_block(K, S, 1, 1, d, rr, wv, bv, res, y, oy + r, ox, ln, post);
                    break;
                }
            }
    }
}

static TGT void dw_ring(const cc_dwr *d, const float *x, const float *wk, float bias, const float *res, float *y,
                        int64_t oy0, int64_t oy1, const cc_post *post)
{
#define CC_DWR_CASE(K, S)                                                                                        \
    if (d->kh == K && d->s == S) {                                                                               \
        dwr_rows_k(K, S, d, x, wk, bias, res, y, oy0, oy1, post);                                               \
        return;                                                                                                  \
    }
    CC_DWR_CASE(3, 1) CC_DWR_CASE(3, 2) CC_DWR_CASE(5, 1) CC_DWR_CASE(5, 2) CC_DWR_CASE(7, 1) CC_DWR_CASE(7, 2)
#undef CC_DWR_CASE
}

/* As load_strided, with `fill` where the row has no element. */
INL __m512 load_strided_fill(const float *row, int64_t w, int64_t ix, int64_t sw, __m512 fill)
{
    if (ix >= 0 && ix + 15 * sw < w && (sw == 1 || sw == 2)) {
        if (sw == 1)
            return _mm512_loadu_ps(row + ix);
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        return _mm512_permutex2var_ps(_mm512_loadu_ps(row + ix), even,
                                      _mm512_maskz_loadu_ps((__mmask16)0x7FFF, row + ix + 16));
    }
    if (sw == 1)
        return _mm512_mask_loadu_ps(fill, range_mask(ix, w), row + ix);
    if (sw == 2) {
        const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
        __m512 lo = _mm512_mask_loadu_ps(fill, range_mask(ix, w), row + ix);
        __m512 hi = _mm512_mask_loadu_ps(fill, range_mask(ix + 16, w), row + ix + 16);
        return _mm512_permutex2var_ps(lo, even, hi);
    }
    const __m512i lanes = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    __m512i idx = _mm512_add_epi32(_mm512_set1_epi32((int32_t)ix),
                                   _mm512_mullo_epi32(lanes, _mm512_set1_epi32((int32_t)sw)));
    __mmask16 ok = _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512()) &
                   _mm512_cmplt_epi32_mask(idx, _mm512_set1_epi32((int32_t)w));
    return _mm512_mask_i32gather_ps(fill, ok, idx, row, 4);
}

static TGT void maxpool_rows(const cc_geom *g, const float *x, float *y, int64_t oy0, int64_t oy1)
{
    const __m512 ninf = _mm512_set1_ps(-__builtin_inff()), qnan = _mm512_set1_ps(__builtin_nanf(""));
    for (int64_t oy = oy0; oy < oy1; oy++) {
        for (int64_t ox = 0; ox < g->wo; ox += 16) {
            __m512 acc = ninf;
            __mmask16 nan = 0;
            for (int64_t ky = 0; ky < g->kh; ky++) {
                int64_t iy = oy * g->sh - g->pt + ky * g->dh;
                if (iy < 0 || iy >= g->h)
                    continue;
                const float *row = x + iy * g->w;
                if (ox == 0) /* the hardware prefetchers miss these row streams */
                    for (int64_t e = 0; e < g->w; e += 16)
                        cc_prefetch(row + e);
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    __m512 v = load_strided_fill(row, g->w, ox * g->sw - g->pl + kx * g->dw, g->sw, ninf);
                    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
                    acc = _mm512_max_ps(acc, v);
                }
            }
            acc = _mm512_mask_mov_ps(acc, nan, qnan);
            if (g->wo - ox >= 16)
                _mm512_storeu_ps(y + oy * g->wo + ox, acc);
            else
                _mm512_mask_storeu_ps(y + oy * g->wo + ox, lane_mask((int)(g->wo - ox)), acc);
        }
    }
}

const cc_ops s4d_cc_ops_avx512 = {S4D_CPUCONV_ISA_AVX512, NR,       VL,      ukr,         pack_b,
                                  wino_in,                wino_out, dw_rows, dw_staged, maxpool_rows,
                                  dw_ring,                ukr_t,    tr_out,
                                  dw_cv};
