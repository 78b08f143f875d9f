/*
 * Unary element-wise CUDA kernels: activations, math functions, Clip, Not,
 * IsNaN/IsInf. See elementwise.h for the contract.
 *
 * Work split: contiguous tensors, one thread per 16-byte pack (4 floats, 8
 * halves) in a grid-stride loop, the tail one element at a time; unaligned
 * pointers run element by element in the same kernel. float32 and float16
 * (computed in float32) have a kernel per op; float64 and the integer types
 * (Relu, Neg, Abs, Sign, Clip) share one kernel each that picks the op at run
 * time.
 *
 * The formulas are the host reference's (src/ops/unary_elementwise.c), term
 * for term: where the host multiplies and then adds, the kernels round the
 * product first (no fused multiply-add), so HardSigmoid's clamp and friends
 * switch at the same inputs.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/elementwise_common.cuh"
#include "backend/cuda/kernels/elementwise_ops.cuh"
#include "ops/elementwise.h"

namespace s4d_ew {
namespace {

/* float32 and float16: N-element packs when both pointers allow, then the tail. */
template <class Op, class T>
__global__ void S4D_EW_BOUNDS
    unary_kernel(T *out, const T *in, int64_t n, const s4d_cu_unary_args args, int use_packs)
{
    S4D_KERNEL_BEGIN();
    using C = typename Cvt<T>::C;
    constexpr int N = 16 / sizeof(T);
    const UP<C> p = make_up<T>(args);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t packs = use_packs ? n / N : 0;
    for (int64_t v = tid; v < packs; v += stride) {
        Pack<T, N> x = *reinterpret_cast<const Pack<T, N> *>(in + v * N), y;
S4D_EW_UNROLL
        for (int j = 0; j < N; j++)
            y.v[j] = Cvt<T>::out(Op::f(Cvt<T>::in(x.v[j]), p));
        *reinterpret_cast<Pack<T, N> *>(out + v * N) = y;
    }
    for (int64_t i = packs * N + tid; i < n; i += stride)
        out[i] = Cvt<T>::out(Op::f(Cvt<T>::in(in[i]), p));
}

template <class Op, class T>
cudaError_t launch_unary(void *out, const void *in, int64_t n, const s4d_cu_unary_args &a,
                         cudaStream_t s)
{
    constexpr int N = 16 / sizeof(T);
    int packs = aligned(in, 16) && aligned(out, 16);
    return launch(unary_kernel<Op, T>, packs ? n / N + 1 : n, s, (T *)out, (const T *)in, n, a, packs);
}

template <class T>
cudaError_t unary_float(int op, void *out, const void *in, int64_t n, const s4d_cu_unary_args &a,
                        cudaStream_t s)
{
    switch (op) {
    case S4D_UN_RELU: return launch_unary<URelu, T>(out, in, n, a, s);
    case S4D_UN_LEAKY_RELU: return launch_unary<ULeakyRelu, T>(out, in, n, a, s);
    case S4D_UN_SIGMOID: return launch_unary<USigmoid, T>(out, in, n, a, s);
    case S4D_UN_TANH: return launch_unary<UTanh, T>(out, in, n, a, s);
    case S4D_UN_GELU: return launch_unary<UGelu, T>(out, in, n, a, s);
    case S4D_UN_GELU_TANH: return launch_unary<UGeluTanh, T>(out, in, n, a, s);
    case S4D_UN_ERF: return launch_unary<UErf, T>(out, in, n, a, s);
    case S4D_UN_SQRT: return launch_unary<USqrt, T>(out, in, n, a, s);
    case S4D_UN_RECIPROCAL: return launch_unary<UReciprocal, T>(out, in, n, a, s);
    case S4D_UN_EXP: return launch_unary<UExp, T>(out, in, n, a, s);
    case S4D_UN_LOG: return launch_unary<ULog, T>(out, in, n, a, s);
    case S4D_UN_NEG: return launch_unary<UNeg, T>(out, in, n, a, s);
    case S4D_UN_ABS: return launch_unary<UAbs, T>(out, in, n, a, s);
    case S4D_UN_SIN: return launch_unary<USin, T>(out, in, n, a, s);
    case S4D_UN_COS: return launch_unary<UCos, T>(out, in, n, a, s);
    case S4D_UN_TAN: return launch_unary<UTan, T>(out, in, n, a, s);
    case S4D_UN_ASIN: return launch_unary<UAsin, T>(out, in, n, a, s);
    case S4D_UN_ACOS: return launch_unary<UAcos, T>(out, in, n, a, s);
    case S4D_UN_ATAN: return launch_unary<UAtan, T>(out, in, n, a, s);
    case S4D_UN_SINH: return launch_unary<USinh, T>(out, in, n, a, s);
    case S4D_UN_COSH: return launch_unary<UCosh, T>(out, in, n, a, s);
    case S4D_UN_ASINH: return launch_unary<UAsinh, T>(out, in, n, a, s);
    case S4D_UN_ACOSH: return launch_unary<UAcosh, T>(out, in, n, a, s);
    case S4D_UN_ATANH: return launch_unary<UAtanh, T>(out, in, n, a, s);
    case S4D_UN_FLOOR: return launch_unary<UFloor, T>(out, in, n, a, s);
    case S4D_UN_CEIL: return launch_unary<UCeil, T>(out, in, n, a, s);
    case S4D_UN_ROUND: return launch_unary<URound, T>(out, in, n, a, s);
    case S4D_UN_SIGN: return launch_unary<USign, T>(out, in, n, a, s);
    case S4D_UN_CLIP: return launch_unary<UClip, T>(out, in, n, a, s);
    case S4D_UN_ELU: return launch_unary<UElu, T>(out, in, n, a, s);
    case S4D_UN_SELU: return launch_unary<USelu, T>(out, in, n, a, s);
    case S4D_UN_HARD_SIGMOID: return launch_unary<UHardSigmoid, T>(out, in, n, a, s);
    case S4D_UN_HARD_SWISH: return launch_unary<UHardSwish, T>(out, in, n, a, s);
    case S4D_UN_SOFTPLUS: return launch_unary<USoftplus, T>(out, in, n, a, s);
    case S4D_UN_SOFTSIGN: return launch_unary<USoftsign, T>(out, in, n, a, s);
    case S4D_UN_CELU: return launch_unary<UCelu, T>(out, in, n, a, s);
    case S4D_UN_THRESHOLDED_RELU: return launch_unary<UThresholdedRelu, T>(out, in, n, a, s);
    case S4D_UN_MISH: return launch_unary<UMish, T>(out, in, n, a, s);
    default: return cudaErrorInvalidValue;
    }
}

/* float64: the same formulas, the op chosen per element (uniform across the grid). */
__device__ double unary_f64(int op, double x, const UP<double> &p)
{
    switch (op) {
    case S4D_UN_RELU: return URelu::f(x, p);
    case S4D_UN_LEAKY_RELU: return ULeakyRelu::f(x, p);
    case S4D_UN_SIGMOID: return USigmoid::f(x, p);
    case S4D_UN_TANH: return UTanh::f(x, p);
    case S4D_UN_GELU: return UGelu::f(x, p);
    case S4D_UN_GELU_TANH: return UGeluTanh::f(x, p);
    case S4D_UN_ERF: return UErf::f(x, p);
    case S4D_UN_SQRT: return USqrt::f(x, p);
    case S4D_UN_RECIPROCAL: return UReciprocal::f(x, p);
    case S4D_UN_EXP: return UExp::f(x, p);
    case S4D_UN_LOG: return ULog::f(x, p);
    case S4D_UN_NEG: return UNeg::f(x, p);
    case S4D_UN_ABS: return UAbs::f(x, p);
    case S4D_UN_SIN: return USin::f(x, p);
    case S4D_UN_COS: return UCos::f(x, p);
    case S4D_UN_TAN: return UTan::f(x, p);
    case S4D_UN_ASIN: return UAsin::f(x, p);
    case S4D_UN_ACOS: return UAcos::f(x, p);
    case S4D_UN_ATAN: return UAtan::f(x, p);
    case S4D_UN_SINH: return USinh::f(x, p);
    case S4D_UN_COSH: return UCosh::f(x, p);
    case S4D_UN_ASINH: return UAsinh::f(x, p);
    case S4D_UN_ACOSH: return UAcosh::f(x, p);
    case S4D_UN_ATANH: return UAtanh::f(x, p);
    case S4D_UN_FLOOR: return UFloor::f(x, p);
    case S4D_UN_CEIL: return UCeil::f(x, p);
    case S4D_UN_ROUND: return URound::f(x, p);
    case S4D_UN_SIGN: return USign::f(x, p);
    case S4D_UN_CLIP: return UClip::f(x, p);
    case S4D_UN_ELU: return UElu::f(x, p);
    case S4D_UN_SELU: return USelu::f(x, p);
    case S4D_UN_HARD_SIGMOID: return UHardSigmoid::f(x, p);
    case S4D_UN_HARD_SWISH: return UHardSwish::f(x, p);
    case S4D_UN_SOFTPLUS: return USoftplus::f(x, p);
    case S4D_UN_SOFTSIGN: return USoftsign::f(x, p);
    case S4D_UN_CELU: return UCelu::f(x, p);
    case S4D_UN_THRESHOLDED_RELU: return UThresholdedRelu::f(x, p);
    case S4D_UN_MISH: return UMish::f(x, p);
    default: return x;
    }
}

__global__ void S4D_EW_BOUNDS
    unary_f64_kernel(int op, double *out, const double *in, int64_t n,
                     const s4d_cu_unary_args args)
{
    S4D_KERNEL_BEGIN();
    const UP<double> p = make_up<double>(args);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        out[i] = unary_f64(op, in[i], p);
}

/* Integers widened to 64 bits: Neg and Abs wrap (the minimum stays itself). */
__global__ void S4D_EW_BOUNDS
    unary_int_kernel(int op, int dt, void *out, const void *in, int64_t n,
                     const s4d_cu_unary_args args)
{
    S4D_KERNEL_BEGIN();
    const bool is_unsigned = dt_is_unsigned(dt);
    const int64_t lo = args.min_ptr ? ld_i64(dt, args.min_ptr, 0) : args.min_i;
    const int64_t hi = args.max_ptr ? ld_i64(dt, args.max_ptr, 0) : args.max_i;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int64_t x = ld_i64(dt, in, i), r = x;
        if (is_unsigned) {
            uint64_t u = (uint64_t)x, ulo = (uint64_t)lo, uhi = (uint64_t)hi;
            if (op == S4D_UN_SIGN)
                r = u > 0;
            else if (op == S4D_UN_CLIP)
                r = (int64_t)(u < ulo ? ulo : u > uhi ? uhi : u);
        } else if (op == S4D_UN_RELU) {
            r = x > 0 ? x : 0;
        } else if (op == S4D_UN_NEG) {
            r = (int64_t)(0 - (uint64_t)x);
        } else if (op == S4D_UN_ABS) {
            r = x > 0 ? x : (int64_t)(0 - (uint64_t)x);
        } else if (op == S4D_UN_SIGN) {
            r = x > 0 ? 1 : x == 0 ? 0 : -1;
        } else if (op == S4D_UN_CLIP) {
            r = x < lo ? lo : x > hi ? hi : x;
        }
        st_i64(dt, out, i, r);
    }
}

__global__ void S4D_EW_BOUNDS
    not_kernel(uint8_t *out, const uint8_t *in, int64_t n, int use_packs)
{
    S4D_KERNEL_BEGIN();
    constexpr int N = 16;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t packs = use_packs ? n / N : 0;
    for (int64_t v = tid; v < packs; v += stride) {
        Pack<uint8_t, N> x = *reinterpret_cast<const Pack<uint8_t, N> *>(in + v * N), y;
S4D_EW_UNROLL
        for (int j = 0; j < N; j++)
            y.v[j] = !x.v[j];
        *reinterpret_cast<Pack<uint8_t, N> *>(out + v * N) = y;
    }
    for (int64_t i = packs * N + tid; i < n; i += stride)
        out[i] = !in[i];
}

__global__ void S4D_EW_BOUNDS
    is_class_kernel(int inf, int neg, int pos, int dt, uint8_t *out, const void *in, int64_t n)
{
    S4D_KERNEL_BEGIN();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        double v = ld_f64(dt, in, i);
        out[i] = inf ? (isinf(v) && ((v > 0 && pos) || (v < 0 && neg))) : isnan(v);
    }
}

bool int_op(int op)
{
    return op == S4D_UN_RELU || op == S4D_UN_NEG || op == S4D_UN_ABS || op == S4D_UN_SIGN ||
           op == S4D_UN_CLIP;
}

} /* namespace */
} /* namespace s4d_ew */

using namespace s4d_ew;

extern "C" cudaError_t s4d_cu_unary(int op, int dtype, void *out, const void *in, int64_t n,
                                    const s4d_cu_unary_args *args, cudaStream_t stream)
{
    if (!args || n < 0 || op < 0 || op >= S4D_UNOP_COUNT)
        return cudaErrorInvalidValue;
    if ((dtype == S4D_DTYPE_BOOL) != (op == S4D_UN_NOT))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    switch (dtype) {
    case S4D_DTYPE_FLOAT32: return unary_float<float>(op, out, in, n, *args, stream);
    case S4D_DTYPE_FLOAT16: return unary_float<__half>(op, out, in, n, *args, stream);
    case S4D_DTYPE_FLOAT64:
        return launch(unary_f64_kernel, n, stream, op, (double *)out, (const double *)in, n, *args);
    case S4D_DTYPE_BOOL: {
        int packs = aligned(in, 16) && aligned(out, 16);
        return launch(not_kernel, packs ? n / 16 + 1 : n, stream, (uint8_t *)out, (const uint8_t *)in, n,
                      packs);
    }
    case S4D_DTYPE_INT8: case S4D_DTYPE_INT16: case S4D_DTYPE_INT32: case S4D_DTYPE_INT64:
    case S4D_DTYPE_UINT8: case S4D_DTYPE_UINT16: case S4D_DTYPE_UINT32: case S4D_DTYPE_UINT64:
        if (!int_op(op))
            return cudaErrorInvalidValue;
        return launch(unary_int_kernel, n, stream, op, dtype, out, in, n, *args);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t s4d_cu_is_class(int inf, int detect_negative, int detect_positive,
                                       int dtype, void *out, const void *in, int64_t n,
                                       cudaStream_t stream)
{
    if (n < 0 || !dt_is_float(dtype))
        return cudaErrorInvalidValue;
    if (n == 0)
        return cudaSuccess;
    return launch(is_class_kernel, n, stream, inf, detect_negative, detect_positive, dtype,
                  (uint8_t *)out, in, n);
}
