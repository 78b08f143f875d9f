/*
 * Inline AVX-512F helpers shared by the convolution library's AVX-512 files
 * (kernels_avx512.c, mbconv_avx512.c): lane masks, the epilogue
 * activations, a 16 x 16 register transpose and the depthwise row kernel on
 * channels-in-vectors rows. Every function carries the target attribute, so
 * the including file needs no -march flag.
 */
#ifndef S4D_CPU_CONV_AVX512_INL_H
#define S4D_CPU_CONV_AVX512_INL_H

#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/conv/cpuconv_impl.h"

#define TGT __attribute__((target("avx512f,avx2,fma,prfchw")))
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

/* exp(t) for t <= 0 (see cc_exp_neg). */
INL __m512 exp_neg_v(__m512 t)
{
    t = _mm512_max_ps(t, _mm512_set1_ps(-87.3f));
    __m512 fx = _mm512_fmadd_ps(t, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(12582912.0f));
    __m512i n = _mm512_sub_epi32(_mm512_castps_si512(fx), _mm512_set1_epi32(0x4B400000));
    fx = _mm512_sub_ps(fx, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), t);
    r = _mm512_fmadd_ps(fx, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 q = _mm512_set1_ps(1.9875691500e-4f);
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507e-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073e-3f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894e-2f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459e-1f));
    q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201e-1f));
    q = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(q, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(q), _mm512_slli_epi32(n, 23)));
}

INL __m512 sigmoid_v(__m512 v)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 t = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));
    __m512 e = exp_neg_v(t), s = _mm512_div_ps(one, _mm512_add_ps(one, e));
    s = _mm512_mask_mul_ps(s, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), e, s);
    return _mm512_mask_mov_ps(s, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

INL __m512 act_v(__m512 v, int act, __m512 lo, __m512 hi)
{
    /* max(a, v) and min(a, v) return v when v is NaN, so NaN stays visible. */
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
    switch (act) {
    case S4D_CPUCONV_ACT_RELU:
        return _mm512_max_ps(zero, v);
    case S4D_CPUCONV_ACT_CLIP:
        return _mm512_min_ps(hi, _mm512_max_ps(lo, v));
    case S4D_CPUCONV_ACT_LEAKY_RELU:
        return _mm512_mask_mul_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), v, lo);
    case S4D_CPUCONV_ACT_SIGMOID:
        return sigmoid_v(v);
    case S4D_CPUCONV_ACT_SILU:
        return _mm512_mul_ps(v, sigmoid_v(v));
    case S4D_CPUCONV_ACT_HARD_SIGMOID:
        return _mm512_min_ps(one, _mm512_max_ps(zero, _mm512_fmadd_ps(v, lo, hi)));
    case S4D_CPUCONV_ACT_HARD_SWISH: {
        __m512 t = _mm512_fmadd_ps(v, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
        return _mm512_mul_ps(v, _mm512_min_ps(one, _mm512_max_ps(zero, t)));
    }
    default:
        return v;
    }
}

/* r[i][j] <-> r[j][i] for a 16 x 16 block in 16 registers: pairs of rows within 128-bit lanes,
 * then pairs of pairs, then the 128-bit lanes across registers. */
INL void transpose16(__m512 *r)
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int g = 0; g < 16; g += 4) {
        u[g] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        u[g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g]), _mm512_castps_pd(t[g + 2])));
        u[g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
        u[g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[g + 1]), _mm512_castps_pd(t[g + 3])));
    }
    for (int q = 0; q < 4; q++) {
        const __m512 v = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44), w = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44);
        const __m512 v2 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xEE), w2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xEE);
        r[q] = _mm512_shuffle_f32x4(v, w, 0x88);
        r[4 + q] = _mm512_shuffle_f32x4(v, w, 0xDD);
        r[8 + q] = _mm512_shuffle_f32x4(v2, w2, 0x88);
        r[12 + q] = _mm512_shuffle_f32x4(v2, w2, 0xDD);
    }
}

/* Where ukr_t_rn puts its tile instead of t: pixel i's vector j at dst + pos[i] + j * vstride, as
 * act(acc + bias[j]) (bias NULL: nothing added), every vector stored whole. */
typedef struct cc_tepi {
    float *dst;
    const int64_t *pos;
    int64_t vstride;
    const __m512 *bias;
    int act;
    __m512 lo, hi;
} cc_tepi;

INL __m512 tepi_apply(const cc_tepi *e, int j, __m512 v)
{
    if (e->bias)
        v = _mm512_add_ps(v, e->bias[j]);
    return act_v(v, e->act, e->lo, e->hi);
}

/*
 * Small maps (cc_ops.ukr_t): R pixels x NV vectors of 16 channels, R x NV accumulators; per reduction
 * step NV loads of the weight panel and R broadcasts of input values feed R x NV FMAs. R and NV are
 * constants at every call, so the unused accumulators and branches vanish. With epi, the tile goes
 * to epi's places with its bias and activation instead of to t.
 */
INL void ukr_t_rn(const int R, const int NV, int64_t kc, const float *x, const int64_t *off, int64_t lda,
                  const float *w, float *t, int accumulate, int prefetch, const cc_tepi *epi)
{
    const float *x0 = x + off[0], *x1 = x + off[R > 1 ? 1 : 0], *x2 = x + off[R > 2 ? 2 : 0],
                *x3 = x + off[R > 3 ? 3 : 0], *x4 = x + off[R > 4 ? 4 : 0], *x5 = x + off[R > 5 ? 5 : 0],
                *x6 = x + off[R > 6 ? 6 : 0], *x7 = x + off[R > 7 ? 7 : 0];
#define CC_T_INIT(i)                                                                                             \
    __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps(), c##i##2 = _mm512_setzero_ps();         \
    if (accumulate && R > i) {                                                                                   \
        c##i##0 = _mm512_loadu_ps(t + i * CC_TN);                                                                \
        if (NV > 1)                                                                                              \
            c##i##1 = _mm512_loadu_ps(t + i * CC_TN + 16);                                                       \
        if (NV > 2)                                                                                              \
            c##i##2 = _mm512_loadu_ps(t + i * CC_TN + 32);                                                       \
    }
#define CC_T_FMA(i)                                                                                              \
    if (R > i) {                                                                                                 \
        const __m512 v = _mm512_set1_ps(x##i[k * lda]);                                                          \
        c##i##0 = _mm512_fmadd_ps(v, w0, c##i##0);                                                               \
        if (NV > 1)                                                                                              \
            c##i##1 = _mm512_fmadd_ps(v, w1, c##i##1);                                                           \
        if (NV > 2)                                                                                              \
            c##i##2 = _mm512_fmadd_ps(v, w2, c##i##2);                                                           \
    }
#define CC_T_STORE(i)                                                                                            \
    if (R > i && !epi) {                                                                                         \
        _mm512_storeu_ps(t + i * CC_TN, c##i##0);                                                                \
        if (NV > 1)                                                                                              \
            _mm512_storeu_ps(t + i * CC_TN + 16, c##i##1);                                                       \
        if (NV > 2)                                                                                              \
            _mm512_storeu_ps(t + i * CC_TN + 32, c##i##2);                                                       \
    } else if (R > i) {                                                                                          \
        float *d = epi->dst + epi->pos[i];                                                                       \
        _mm512_storeu_ps(d, tepi_apply(epi, 0, c##i##0));                                                        \
        if (NV > 1)                                                                                              \
            _mm512_storeu_ps(d + epi->vstride, tepi_apply(epi, 1, c##i##1));                                     \
        if (NV > 2)                                                                                              \
            _mm512_storeu_ps(d + 2 * epi->vstride, tepi_apply(epi, 2, c##i##2));                                 \
    }
    CC_T_INIT(0) CC_T_INIT(1) CC_T_INIT(2) CC_T_INIT(3)
    CC_T_INIT(4) CC_T_INIT(5) CC_T_INIT(6) CC_T_INIT(7)
    for (int64_t k = 0; k < kc; k++) {
        const __m512 w0 = _mm512_loadu_ps(w), w1 = NV > 1 ? _mm512_loadu_ps(w + 16) : _mm512_setzero_ps(),
                     w2 = NV > 2 ? _mm512_loadu_ps(w + 32) : _mm512_setzero_ps();
        CC_T_FMA(0) CC_T_FMA(1) CC_T_FMA(2) CC_T_FMA(3)
        CC_T_FMA(4) CC_T_FMA(5) CC_T_FMA(6) CC_T_FMA(7)
        if (prefetch) { /* 32 steps (6 KiB) ahead of a stream from memory */
            _mm_prefetch((const char *)(w + 32 * CC_TN), _MM_HINT_T0);
            if (NV > 1)
                _mm_prefetch((const char *)(w + 32 * CC_TN + 16), _MM_HINT_T0);
            if (NV > 2)
                _mm_prefetch((const char *)(w + 32 * CC_TN + 32), _MM_HINT_T0);
        }
        w += CC_TN;
    }
    CC_T_STORE(0) CC_T_STORE(1) CC_T_STORE(2) CC_T_STORE(3)
    CC_T_STORE(4) CC_T_STORE(5) CC_T_STORE(6) CC_T_STORE(7)
#undef CC_T_INIT
#undef CC_T_FMA
#undef CC_T_STORE
}

/* One output row of dw_cv for a K x K kernel of stride S and dilation 1: the taps unrolled with
 * the weights in registers (K = 3) or as memory operands, 8 pixels (8 FMA chains) at a time;
 * output pixels ps floats apart; with epi (its bias[0] and activation; dst and pos unused) each
 * vector is stored as act(acc + bias). */
INL void dwc_row_k(const int K, const int S, const float *const *rp, const __m512 *wv, float *o, int64_t wo,
                    const int64_t ps, const cc_tepi *epi)
{
    const __m512 zero = _mm512_setzero_ps();
    int64_t ox = 0;
    for (; ox + 8 <= wo; ox += 8) {
        __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero, a4 = zero, a5 = zero, a6 = zero, a7 = zero;
        for (int ky = 0; ky < K; ky++) {
            const float *b = rp[ky] + ox * S * 16;
            for (int kx = 0; kx < K; kx++) {
                const __m512 w = wv[ky * K + kx];
                const float *q = b + kx * 16;
                a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q), a0);
                a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + S * 16), a1);
                a2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + 2 * S * 16), a2);
                a3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + 3 * S * 16), a3);
                a4 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + 4 * S * 16), a4);
                a5 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + 5 * S * 16), a5);
                a6 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + 6 * S * 16), a6);
                a7 = _mm512_fmadd_ps(w, _mm512_loadu_ps(q + 7 * S * 16), a7);
            }
        }
        float *oo = o + ox * ps;
        _mm512_storeu_ps(oo, epi ? tepi_apply(epi, 0, a0) : a0);
        _mm512_storeu_ps(oo + 1 * ps, epi ? tepi_apply(epi, 0, a1) : a1);
        _mm512_storeu_ps(oo + 2 * ps, epi ? tepi_apply(epi, 0, a2) : a2);
        _mm512_storeu_ps(oo + 3 * ps, epi ? tepi_apply(epi, 0, a3) : a3);
        _mm512_storeu_ps(oo + 4 * ps, epi ? tepi_apply(epi, 0, a4) : a4);
        _mm512_storeu_ps(oo + 5 * ps, epi ? tepi_apply(epi, 0, a5) : a5);
        _mm512_storeu_ps(oo + 6 * ps, epi ? tepi_apply(epi, 0, a6) : a6);
        _mm512_storeu_ps(oo + 7 * ps, epi ? tepi_apply(epi, 0, a7) : a7);
    }
    for (; ox < wo; ox++) {
        __m512 a0 = zero;
        for (int ky = 0; ky < K; ky++)
            for (int kx = 0; kx < K; kx++)
                a0 = _mm512_fmadd_ps(wv[ky * K + kx], _mm512_loadu_ps(rp[ky] + (ox * S + kx) * 16), a0);
        _mm512_storeu_ps(o + ox * ps, epi ? tepi_apply(epi, 0, a0) : a0);
    }
}

#endif /* S4D_CPU_CONV_AVX512_INL_H */
