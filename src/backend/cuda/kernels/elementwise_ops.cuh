/*
 * The per-element functions of the element-wise kernels (internal to
 * kernels/elementwise*.cu and kernels/pointwise.cu): each unary op's formula
 * (the host reference's, term for term) and each binary op's. One definition
 * serves the one-op kernels and s4d::FusedPointwise's program, so a fused
 * chain computes what the unfused layers compute.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_OPS_CUH
#define S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_OPS_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/kernels/elementwise_common.cuh"

namespace s4d_ew {
namespace {

/* ---- unary ops ---- */

#define S4D_EW_MATH(name)                                                     \
    __device__ __forceinline__ float m_##name(float x) { return name##f(x); } \
    __device__ __forceinline__ double m_##name(double x) { return name(x); }

S4D_EW_MATH(exp)
S4D_EW_MATH(expm1)
S4D_EW_MATH(log)
S4D_EW_MATH(log1p)
S4D_EW_MATH(tanh)
S4D_EW_MATH(erf)
S4D_EW_MATH(sqrt)
S4D_EW_MATH(fabs)
S4D_EW_MATH(sin)
S4D_EW_MATH(cos)
S4D_EW_MATH(tan)
S4D_EW_MATH(asin)
S4D_EW_MATH(acos)
S4D_EW_MATH(atan)
S4D_EW_MATH(sinh)
S4D_EW_MATH(cosh)
S4D_EW_MATH(asinh)
S4D_EW_MATH(acosh)
S4D_EW_MATH(atanh)
S4D_EW_MATH(floor)
S4D_EW_MATH(ceil)
S4D_EW_MATH(rint)

/* The op's parameters in the compute type. */
template <class C>
struct UP {
    C alpha, beta, gamma, lo, hi;
};

template <class T>
__device__ __forceinline__ UP<typename Cvt<T>::C> make_up(const s4d_cu_unary_args &a)
{
    using C = typename Cvt<T>::C;
    UP<C> p;
    p.alpha = (C)a.alpha;
    p.beta = (C)a.beta;
    p.gamma = (C)a.gamma;
    p.lo = a.min_ptr ? Cvt<T>::in(*(const T *)a.min_ptr) : (C)a.alpha;
    p.hi = a.max_ptr ? Cvt<T>::in(*(const T *)a.max_ptr) : (C)a.beta;
    return p;
}

#define S4D_EW_UNARY(NAME, EXPR)                                               \
    struct NAME {                                                              \
        template <class C>                                                     \
        static __device__ __forceinline__ C f(C x, const UP<C> &p)             \
        {                                                                      \
            (void)p;                                                           \
            return EXPR;                                                       \
        }                                                                      \
    };

/* exp(-|x|) never overflows; the sign picks s or 1 - s = e * s. */
__device__ __forceinline__ float sigmoid(float v)
{
    float e = expf(-fabsf(v)), s = 1.0f / (1.0f + e);
    return v >= 0 ? s : e * s;
}
__device__ __forceinline__ double sigmoid(double v)
{
    double e = exp(-fabs(v)), s = 1.0 / (1.0 + e);
    return v >= 0 ? s : e * s;
}

/* log(1 + e^x) without overflow for large x. */
template <class C>
__device__ __forceinline__ C softplus(C v)
{
    return v > 0 ? v + m_log1p(m_exp(-v)) : m_log1p(m_exp(v));
}

template <class C>
__device__ __forceinline__ C clamp01(C v)
{
    return v < 0 ? (C)0 : v > 1 ? (C)1 : v;
}

S4D_EW_UNARY(URelu, x < 0 ? (C)0 : x)
S4D_EW_UNARY(ULeakyRelu, x < 0 ? p.alpha * x : x)
S4D_EW_UNARY(USigmoid, sigmoid(x))
S4D_EW_UNARY(UTanh, m_tanh(x))
S4D_EW_UNARY(UGelu, (C)0.5 * x * ((C)1 + m_erf(x * (C)0.70710678118654752440)))
S4D_EW_UNARY(UGeluTanh,
             (C)0.5 * x *
                 ((C)1 + m_tanh((C)0.79788456080286535588 *
                                add_rn(x, mul_rn(mul_rn(mul_rn((C)0.044715, x), x), x)))))
S4D_EW_UNARY(UErf, m_erf(x))
S4D_EW_UNARY(USqrt, m_sqrt(x))
S4D_EW_UNARY(UReciprocal, (C)1 / x)
S4D_EW_UNARY(UExp, m_exp(x))
S4D_EW_UNARY(ULog, m_log(x))
S4D_EW_UNARY(UNeg, -x)
S4D_EW_UNARY(UAbs, m_fabs(x))
S4D_EW_UNARY(USin, m_sin(x))
S4D_EW_UNARY(UCos, m_cos(x))
S4D_EW_UNARY(UTan, m_tan(x))
S4D_EW_UNARY(UAsin, m_asin(x))
S4D_EW_UNARY(UAcos, m_acos(x))
S4D_EW_UNARY(UAtan, m_atan(x))
S4D_EW_UNARY(USinh, m_sinh(x))
S4D_EW_UNARY(UCosh, m_cosh(x))
S4D_EW_UNARY(UAsinh, m_asinh(x))
S4D_EW_UNARY(UAcosh, m_acosh(x))
S4D_EW_UNARY(UAtanh, m_atanh(x))
S4D_EW_UNARY(UFloor, m_floor(x))
S4D_EW_UNARY(UCeil, m_ceil(x))
/* rint rounds half to even (the default rounding mode), as the host's nearbyint. */
S4D_EW_UNARY(URound, m_rint(x))
S4D_EW_UNARY(USign, x > 0 ? (C)1 : x < 0 ? (C)-1 : x)
S4D_EW_UNARY(UClip, x < p.lo ? p.lo : x > p.hi ? p.hi : x)
S4D_EW_UNARY(UElu, x < 0 ? p.alpha * (m_exp(x) - (C)1) : x)
S4D_EW_UNARY(USelu, x <= 0 ? p.gamma * add_rn(mul_rn(p.alpha, m_exp(x)), -p.alpha) : p.gamma * x)
S4D_EW_UNARY(UHardSigmoid, clamp01(add_rn(mul_rn(p.alpha, x), p.beta)))
S4D_EW_UNARY(UHardSwish, x * clamp01(x / (C)6 + (C)0.5))
S4D_EW_UNARY(USoftplus, softplus(x))
S4D_EW_UNARY(USoftsign, x / ((C)1 + m_fabs(x)))
S4D_EW_UNARY(UCelu, x < 0 ? p.alpha * m_expm1(x / p.alpha) : x)
S4D_EW_UNARY(UThresholdedRelu, x > p.alpha ? x : (C)0)
S4D_EW_UNARY(UMish, x * m_tanh(softplus(x)))

/* ---- binary ops (float32, float16 through float32, bool) ---- */

/* Each op: f(x, y) in the compute type; kBool: the result is a bool. */
struct OpAdd {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y) { return x + y; }
};
struct OpSub {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y) { return x - y; }
};
struct OpMul {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y) { return x * y; }
};
struct OpDiv {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y) { return x / y; }
};
/* The first NaN wins, as on the host. */
struct OpMin {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y)
    {
        return x != x ? x : y != y ? y : x < y ? x : y;
    }
};
struct OpMax {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y)
    {
        return x != x ? x : y != y ? y : x > y ? x : y;
    }
};
/* Squaring (the LayerNorm pattern) is exact, as powf's correctly rounded x^2 on the host. */
struct OpPow {
    static constexpr bool kBool = false;
    static __device__ __forceinline__ float f(float x, float y) { return y == 2.0f ? x * x : powf(x, y); }
};
struct OpPRelu {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y) { return x < 0 ? y * x : x; }
};
/* The host evaluates fmod and the sign fix-up in double, then rounds. */
struct OpMod {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y)
    {
        double r = fmod((double)x, (double)y);
        return (C)(r != 0 && ((r < 0) != (y < 0)) ? r + (double)y : r);
    }
};
struct OpFMod {
    static constexpr bool kBool = false;
    template <class C> static __device__ __forceinline__ C f(C x, C y)
    {
        return (C)fmod((double)x, (double)y);
    }
};
struct OpEq {
    static constexpr bool kBool = true;
    template <class C> static __device__ __forceinline__ bool f(C x, C y) { return x == y; }
};
struct OpGt {
    static constexpr bool kBool = true;
    template <class C> static __device__ __forceinline__ bool f(C x, C y) { return x > y; }
};
struct OpLt {
    static constexpr bool kBool = true;
    template <class C> static __device__ __forceinline__ bool f(C x, C y) { return x < y; }
};
struct OpGe {
    static constexpr bool kBool = true;
    template <class C> static __device__ __forceinline__ bool f(C x, C y) { return x >= y; }
};
struct OpLe {
    static constexpr bool kBool = true;
    template <class C> static __device__ __forceinline__ bool f(C x, C y) { return x <= y; }
};
/* bool inputs: any nonzero byte is true. */
struct OpAnd {
    static constexpr bool kBool = true;
    static __device__ __forceinline__ bool f(uint8_t x, uint8_t y) { return (x != 0) & (y != 0); }
};
struct OpOr {
    static constexpr bool kBool = true;
    static __device__ __forceinline__ bool f(uint8_t x, uint8_t y) { return (x != 0) | (y != 0); }
};
struct OpXor {
    static constexpr bool kBool = true;
    static __device__ __forceinline__ bool f(uint8_t x, uint8_t y) { return (x != 0) ^ (y != 0); }
};
struct OpEqBool {
    static constexpr bool kBool = true;
    static __device__ __forceinline__ bool f(uint8_t x, uint8_t y) { return (x != 0) == (y != 0); }
};

} /* namespace */
} /* namespace s4d_ew */

#endif /* S4D_BACKEND_CUDA_KERNELS_ELEMENTWISE_OPS_CUH */
