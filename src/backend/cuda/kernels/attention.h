/*
 * src/backend/cuda/kernels/attention.h - the fused attention kernel
 * (s4d::FusedAttention) for C callers (internal).
 *
 * O = Softmax_lastaxis(masked(Q KT)) V per batch matrix, flash-attention
 * style: one thread block per (batch matrix, tile of 64 queries, range of
 * key tiles), K and V tiles of 64 keys staged in shared memory, a running
 * maximum and sum per query row, the score tile never leaves the chip.
 * Three kernels: float16 on tensor cores (mma m16n8k16, float accumulation
 * and softmax, the probabilities rounded to float16 for P V); float32 on
 * TF32 tensor cores (mma m16n8k8) when the descriptor's tf32 is set (the
 * engine allows TF32); else float32 in plain FFMA. When the queries alone
 * give too few blocks for the GPU, the keys are split over blocks (ranges of
 * tiles; in the FFMA kernel every S-th tile, which also skips tiles a key
 * mask fills with -inf entirely) whose partial results a second kernel
 * merges in a fixed order: no atomics, the same bits on every run.
 *
 * Plain pointers to device memory, explicit 64-bit sizes, the caller's
 * stream; launchers return cudaGetLastError() after their launches
 * (cudaErrorInvalidValue for arguments they cannot take). Nothing is
 * allocated, nothing synchronises: the launches can be captured in a graph.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_ATTENTION_H
#define S4D_BACKEND_CUDA_KERNELS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "s4d/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define S4D_CUDA_ATTN_MAX_RANK 8
/* Largest head size (D and Dv) the kernel takes. */
#define S4D_CUDA_ATTN_MAX_HEAD 128

typedef struct s4d_cuda_attn_desc {
    int64_t nq, nk, d, dv;
    int batch_rank;
    int64_t batch[S4D_CUDA_ATTN_MAX_RANK];
    int64_t q_stride[S4D_CUDA_ATTN_MAX_RANK]; /* whole matrices; 0 where broadcast */
    int64_t k_stride[S4D_CUDA_ATTN_MAX_RANK];
    int64_t v_stride[S4D_CUDA_ATTN_MAX_RANK];
    int64_t m_stride[S4D_CUDA_ATTN_MAX_RANK]; /* mask: elements */
    int64_t m_qstride, m_kstride;
    int64_t nbatch;
    int has_mask, fill_where_true;
    float mask_fill;
    int tf32; /* float32 may run on TF32 tensor cores (the engine allows TF32) */
    int has_q_scale; /* Q's elements are multiplied by q_scale as read (rounded to Q's dtype) */
    float q_scale;
    int swap_out; /* the output is [..., Nq, H, Dv], H = batch[batch_rank - 1] (batch_rank >= 1) */
} s4d_cuda_attn_desc;

/* 1 when the kernel takes dtype (float32, float16) and these sizes; else 0 and why (static text). */
int s4d_cuda_attention_ok(s4d_dtype dtype, const s4d_cuda_attn_desc *g, const char **why);

/* Workspace bytes for the key-split partial results (0 when the keys are not split). */
size_t s4d_cuda_attention_workspace(s4d_dtype dtype, const s4d_cuda_attn_desc *g);

/* Raises the shared-memory limit of the kernel for this size (call once at build/load time). */
cudaError_t s4d_cuda_attention_prepare(s4d_dtype dtype, const s4d_cuda_attn_desc *g);

/* out = attention(q, kt, v, mask); mask may be NULL when !g->has_mask. */
cudaError_t s4d_cuda_attention(s4d_dtype dtype, const s4d_cuda_attn_desc *g, const void *q, const void *kt,
                               const void *v, const void *mask, void *out, void *ws, size_t ws_size,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_ATTENTION_H */
