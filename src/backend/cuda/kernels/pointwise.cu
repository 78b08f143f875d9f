/*
 * s4d::FusedPointwise on CUDA: one launch runs a whole tree of element-wise
 * ops (the program of ops/pointwise.h). See kernels/pointwise.h.
 *
 * Work split: a grid-stride loop over groups of G output elements (G = 4 when
 * the last collapsed dim is a multiple of 4, so a group lies in one row, else
 * 1). A group's input offsets come from the collapsed dims by multiply-high
 * division once; each element then loads its inputs (an input repeats its
 * element along the row where it broadcasts), runs the program over a small
 * array of float slots, and the group is stored as one pack when the output
 * pointer allows. float16 and bool values are held as float (bools as 0 and
 * 1); float16 inputs are widened and the output rounded, once.
 *
 * Each instruction applies the one-op kernels' own per-element function
 * (elementwise_ops.cuh), and its result passes an empty asm statement: the
 * compiler may not contract a product of one instruction with a sum of the
 * next into a fused multiply-add, which the unfused layers (each result
 * stored to memory) never do, so fused and unfused float32 results agree
 * bit for bit.
 */
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/kernels/elementwise_common.cuh"
#include "backend/cuda/kernels/elementwise_ops.cuh"
#include "backend/cuda/kernels/pointwise.h"
#include "ops/pointwise.h"

namespace s4d_ew {
namespace {

/* The program and geometry as the kernel reads them (by value: about 1.7 KB of parameters). */
struct PwArgs {
    int nin, ninstr, rank, out_dtype;
    int in_dtype[S4D_PW_MAX_INPUTS];
    const void *in[S4D_PW_MAX_INPUTS];
    void *out;
    int64_t n;
    FastDiv dim[kMaxRank];
    int64_t st[S4D_PW_MAX_INPUTS][kMaxRank];
    s4d_pw_instr code[S4D_PW_MAX_INSTRS];
};

/* An optimisation barrier on a value: its producer and consumer stay separate operations. */
__device__ __forceinline__ float opaque(float v)
{
#if defined(__CUDA_ARCH__)
    asm("" : "+f"(v));
#endif
    return v;
}

__device__ __forceinline__ float pw_load(int dt, const void *p, int64_t i)
{
    if (dt == S4D_DTYPE_FLOAT32)
        return ((const float *)p)[i];
    if (dt == S4D_DTYPE_FLOAT16)
        return __half2float(((const __half *)p)[i]);
    return ((const uint8_t *)p)[i] != 0 ? 1.0f : 0.0f;
}

__device__ __forceinline__ float b2f(bool b)
{
    return b ? 1.0f : 0.0f;
}

/* One instruction over the slots r. */
__device__ __forceinline__ float pw_exec(const s4d_pw_instr &in, const float *r)
{
    const float x = r[in.a];
    UP<float> p;
    p.alpha = p.beta = p.gamma = 0.0f;
    p.lo = in.lo;
    p.hi = in.hi;
    switch (in.op) {
    case S4D_PW_ADD: return OpAdd::f(x, r[in.b]);
    case S4D_PW_SUB: return OpSub::f(x, r[in.b]);
    case S4D_PW_MUL: return OpMul::f(x, r[in.b]);
    case S4D_PW_DIV: return OpDiv::f(x, r[in.b]);
    case S4D_PW_MIN: return OpMin::f(x, r[in.b]);
    case S4D_PW_MAX: return OpMax::f(x, r[in.b]);
    case S4D_PW_NEG: return UNeg::f(x, p);
    case S4D_PW_ABS: return UAbs::f(x, p);
    case S4D_PW_EXP: return UExp::f(x, p);
    case S4D_PW_LOG: return ULog::f(x, p);
    case S4D_PW_SQRT: return USqrt::f(x, p);
    case S4D_PW_SIGMOID: return USigmoid::f(x, p);
    case S4D_PW_RELU: return URelu::f(x, p);
    case S4D_PW_TANH: return UTanh::f(x, p);
    case S4D_PW_RECIPROCAL: return UReciprocal::f(x, p);
    case S4D_PW_ATAN: return UAtan::f(x, p);
    case S4D_PW_CLIP: return UClip::f(x, p);
    case S4D_PW_WHERE: return x != 0.0f ? r[in.b] : r[in.c];
    /* Bool operands are 0 or 1, so Equal of bools is Equal of their floats. */
    case S4D_PW_EQUAL: return b2f(OpEq::f(x, r[in.b]));
    case S4D_PW_GREATER: return b2f(OpGt::f(x, r[in.b]));
    case S4D_PW_LESS: return b2f(OpLt::f(x, r[in.b]));
    case S4D_PW_GREATER_EQUAL: return b2f(OpGe::f(x, r[in.b]));
    case S4D_PW_LESS_EQUAL: return b2f(OpLe::f(x, r[in.b]));
    case S4D_PW_AND: return b2f(OpAnd::f(x != 0.0f, r[in.b] != 0.0f));
    case S4D_PW_OR: return b2f(OpOr::f(x != 0.0f, r[in.b] != 0.0f));
    case S4D_PW_XOR: return b2f(OpXor::f(x != 0.0f, r[in.b] != 0.0f));
    case S4D_PW_NOT: return b2f(x == 0.0f);
    case S4D_PW_CAST:
        /* To bool: NaN is true (the host's Cast through double). To float16: rounds. */
        if (in.dtype == S4D_DTYPE_BOOL)
            return b2f(x != 0.0f);
        if (in.dtype == S4D_DTYPE_FLOAT16)
            return __half2float(__float2half_rn(x));
        return x;
    default: return x;
    }
}

/* Output element i's value. off: the inputs' offsets at the group's first element, j: i's place in it. */
__device__ __forceinline__ float pw_element(const PwArgs &a, const int64_t *off, int j)
{
    float r[S4D_PW_MAX_SLOTS];
    for (int k = 0; k < a.nin; k++)
        r[k] = pw_load(a.in_dtype[k], a.in[k], off[k] + (int64_t)j * a.st[k][a.rank - 1]);
    for (int i = 0; i < a.ninstr; i++)
        r[a.nin + i] = opaque(pw_exec(a.code[i], r));
    return r[a.nin + a.ninstr - 1];
}

/* Element offsets of every input at output element i. */
__device__ __forceinline__ void pw_offsets(const PwArgs &a, int64_t i, int64_t *off)
{
    for (int k = 0; k < a.nin; k++)
        off[k] = 0;
    uint64_t rem = (uint64_t)i;
    for (int d = a.rank - 1; d >= 1; d--) {
        uint64_t q = a.dim[d].div(rem);
        int64_t c = (int64_t)(rem - q * a.dim[d].d);
        for (int k = 0; k < a.nin; k++)
            off[k] += c * a.st[k][d];
        rem = q;
    }
    for (int k = 0; k < a.nin; k++)
        off[k] += (int64_t)rem * a.st[k][0];
}

template <class T>
__device__ __forceinline__ T pw_to(float v);
template <>
__device__ __forceinline__ float pw_to<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half pw_to<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ uint8_t pw_to<uint8_t>(float v) { return v != 0.0f; }

/* G elements per thread; packed: the output is stored a group at a time. */
template <class T, int G>
__global__ void S4D_EW_BOUNDS pw_kernel(const PwArgs a, int packed)
{
    S4D_KERNEL_BEGIN();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t groups = a.n / G;
    T *out = (T *)a.out;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += stride) {
        int64_t off[S4D_PW_MAX_INPUTS];
        pw_offsets(a, g * G, off);
        Pack<T, G> y;
S4D_EW_UNROLL
        for (int j = 0; j < G; j++)
            y.v[j] = pw_to<T>(pw_element(a, off, j));
        if (packed) {
            *reinterpret_cast<Pack<T, G> *>(out + g * G) = y;
        } else {
S4D_EW_UNROLL
            for (int j = 0; j < G; j++)
                out[g * G + j] = y.v[j];
        }
    }
}

template <class T>
cudaError_t pw_launch(const PwArgs &a, cudaStream_t s)
{
    if (a.dim[a.rank - 1].d % 4 == 0) {
        int packed = aligned(a.out, sizeof(T) * 4);
        return launch(pw_kernel<T, 4>, a.n / 4, s, a, packed);
    }
    return launch(pw_kernel<T, 1>, a.n, s, a, 0);
}

} /* namespace */
} /* namespace s4d_ew */

using namespace s4d_ew;

extern "C" cudaError_t s4d_cu_pointwise(const s4d_pointwise_params *p, void *out, const void *const *in,
                                        cudaStream_t stream)
{
    if (!p || p->num_inputs < 1 || p->num_inputs > S4D_PW_MAX_INPUTS || p->num_instrs < 1 ||
        p->num_instrs > S4D_PW_MAX_INSTRS || p->rank < 1 || p->rank > kMaxRank || p->numel < 0)
        return cudaErrorInvalidValue;
    if (p->numel == 0)
        return cudaSuccess;
    PwArgs a;
    memset(&a, 0, sizeof a);
    a.nin = p->num_inputs;
    a.ninstr = p->num_instrs;
    a.rank = p->rank;
    a.out_dtype = p->out_dtype;
    a.out = out;
    a.n = p->numel;
    for (int k = 0; k < a.nin; k++) {
        a.in_dtype[k] = p->in_dtype[k];
        a.in[k] = in[k];
    }
    for (int d = 0; d < kMaxRank; d++) {
        int64_t v = d < p->rank ? p->dims[d] : 1;
        if (v < 1)
            return cudaErrorInvalidValue;
        a.dim[d] = make_fast_div((uint64_t)v);
        for (int k = 0; k < a.nin; k++)
            a.st[k][d] = d < p->rank ? p->strides[k][d] : 0;
    }
    for (int i = 0; i < a.ninstr; i++)
        a.code[i] = p->code[i];
    switch (p->out_dtype) {
    case S4D_DTYPE_FLOAT32: return pw_launch<float>(a, stream);
    case S4D_DTYPE_FLOAT16: return pw_launch<__half>(a, stream);
    case S4D_DTYPE_BOOL: return pw_launch<uint8_t>(a, stream);
    default: return cudaErrorInvalidValue;
    }
}
