/*
 * What the fused attention kernels share (internal to kernels/attention*.cu):
 * the tile sizes, the key split's block counts, the launch arguments, which
 * work a block takes, where a batch matrix's output rows go, and the entry points of the tensor-core
 * paths (attention_tc.cu) and of the merge of the key split's partials
 * (attention.cu). The contract and the semantics: attention.h and
 * attention.cu's opening comment.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_ATTENTION_COMMON_CUH
#define S4D_BACKEND_CUDA_KERNELS_ATTENTION_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "backend/cuda/kernels/attention.h"

namespace s4d_attn {

constexpr int BQ = 64; /* queries per block of the tensor-core kernels */
constexpr int BK = 64; /* keys per tile */
/* Most blocks the key split aims for: two resident per SM (128 registers, ~108 KB of shared
   memory each at D = 64) on a 132-SM H100/H200, so that the blocks run as one wave. A constant, so that the
   split (and so the bits) depend on the shapes only. */
constexpr int64_t WANT_BLOCKS = 264;
/* The same on the float16 tensor-core path: four resident per SM of a 132-SM H100/H200 (4 warps
   each). */
constexpr int64_t TC_WANT_BLOCKS = 528;
/* The same on the TF32 path: two resident per SM (~88 KB of shared memory each at D = 64). */
constexpr int64_t TC32_WANT_BLOCKS = 264;
constexpr int64_t MAX_SPLITS = 16;

struct Args {
    s4d_cuda_attn_desc g;
    const void *q, *k, *v;
    const unsigned char *mask;
    void *out;
    float *part;   /* splits > 1: partial accumulators [splits][nbatch][nq][dv] */
    float *stats;  /* splits > 1: running max and sum [splits][nbatch][nq][2] */
    int64_t qtiles;
    int splits;
    int vec_k, vec_v; /* 4-element vector loads of K^T rows / V rows are aligned */
    int skip_dead;    /* tiles a key mask leaves unattended may be skipped (FFMA kernel, tc_order) */
    /* Tensor-core paths: elements per access to Q, K^T, V (8, 4 or 1) and the output (2 or 1). */
    int w_q, w_k, w_v, w_o;
};

/* Where batch matrix b's output rows go: query row i at *base + i * *rs elements. [..., Nq, Dv],
   or [..., Nq, H, Dv] with swap_out (H the last batch dim, b = (outer, h)). */
__device__ __forceinline__ void out_rows(const s4d_cuda_attn_desc &g, int64_t b, int64_t *base, int64_t *rs)
{
    if (!g.swap_out) {
        *base = b * g.nq * g.dv;
        *rs = g.dv;
        return;
    }
    const int64_t h = g.batch[g.batch_rank - 1];
    *base = (b / h * g.nq * h + b % h) * g.dv;
    *rs = h * g.dv;
}

/* What block blockIdx.x of a launch works on: its key split, query tile and batch matrix, that
   matrix's Q, K^T and V of element type T, and its mask's offset in a.mask. */
template <typename T>
struct BlockWork {
    int split;
    int64_t qt, b;
    const T *q, *k, *v;
    int64_t om;
};

template <typename T>
__device__ __forceinline__ BlockWork<T> block_work(const Args &a)
{
    const s4d_cuda_attn_desc &g = a.g;
    BlockWork<T> w;
    int64_t bid = blockIdx.x;
    w.split = (int)(bid % a.splits);
    bid /= a.splits;
    w.qt = bid % a.qtiles;
    w.b = bid / a.qtiles;
    int64_t oq = 0, ok = 0, ov = 0, om = 0;
    int64_t rest = w.b;
    for (int d = g.batch_rank - 1; d >= 0; d--) {
        int64_t c = rest % g.batch[d];
        rest /= g.batch[d];
        oq += c * g.q_stride[d];
        ok += c * g.k_stride[d];
        ov += c * g.v_stride[d];
        om += c * g.m_stride[d];
    }
    w.q = static_cast<const T *>(a.q) + oq * g.nq * g.d;
    w.k = static_cast<const T *>(a.k) + ok * g.d * g.nk;
    w.v = static_cast<const T *>(a.v) + ov * g.nk * g.dv;
    w.om = om;
    return w;
}

/* Merges the key split's partials (a.splits > 1) into the output of element type T (float or
   __half); attention.cu. */
template <typename T>
void launch_combine(const Args &a, cudaStream_t stream);

/* The tensor-core paths (attention_tc.cu) for the compiled head size dp: the kernel's shared
   memory limit raised (prepare), and the launch with its merge (run). */
cudaError_t prepare_tc16(int dp);
cudaError_t run_tc16(int dp, const Args &a, cudaStream_t stream);
cudaError_t prepare_tc32(int dp);
cudaError_t run_tc32(int dp, const Args &a, cudaStream_t stream);

} // namespace s4d_attn

#endif /* S4D_BACKEND_CUDA_KERNELS_ATTENTION_COMMON_CUH */
