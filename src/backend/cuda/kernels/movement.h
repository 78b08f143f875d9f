/*
 * src/backend/cuda/kernels/movement.h - CUDA launchers of the data-movement
 * and resampling ops (internal), for C callers.
 *
 * Every launcher takes device pointers, explicit 64-bit sizes and a stream,
 * queues its work on that stream only and returns cudaGetLastError() after
 * its launches (cudaSuccess when there was nothing to do). None allocates,
 * synchronises or reads device memory on the host, so all are safe under
 * CUDA-graph capture. Element types are opaque: data moves by element size
 * (1, 2, 4 or 8 bytes), and wider vectors are used when the sizes, strides
 * and pointers allow. Strides and offsets are in elements.
 *
 * Indices read on the device (Gather*, Scatter*) may be negative (counted
 * from the end). One out of range reads nothing: the gathers write zeros
 * for it, the scatters skip it; the host reference fails the run instead,
 * which a kernel cannot do without a synchronisation.
 */
#ifndef S4D_BACKEND_CUDA_KERNELS_MOVEMENT_H
#define S4D_BACKEND_CUDA_KERNELS_MOVEMENT_H

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Dims of an index space a strided copy takes (a Tile of rank 8 needs 16). */
#define S4D_CUDA_MV_MAX_DIMS 16
/* Rank of the tensors the gathers and scatters take (S4D_MAX_RANK). */
#define S4D_CUDA_MV_MAX_RANK 8

/*
 * dst[sum_k i_k * dst_st[k]] = src[sum_k i_k * src_st[k]] for every index
 * (i_0 .. i_{rank-1}) below dims. Strides may be 0 (broadcast) or negative
 * (src only: reversed slices); dst must not repeat an element.
 */
cudaError_t s4d_cuda_copy_strided(void *dst, const void *src, int64_t elem_size, int rank,
                                  const int64_t *dims, const int64_t *dst_st,
                                  const int64_t *src_st, cudaStream_t stream);

/*
 * Transpose: the output (contiguous, dims odims[0..rank)) reads the input at
 * element strides ist (the collapsed form of s4d_transpose_params). Tiled
 * through shared memory when the output's innermost dim is not the input's.
 */
cudaError_t s4d_cuda_transpose(void *dst, const void *src, int64_t elem_size, int rank,
                               const int64_t *odims, const int64_t *ist, cudaStream_t stream);

/* One 2-D block of a batched copy: rows of row_bytes each, pitches in bytes. */
typedef struct s4d_cuda_copy2d {
    void *dst;
    const void *src;
    int64_t rows, row_bytes, dst_pitch, src_pitch;
} s4d_cuda_copy2d;

/* Every block of parts[0..n) (Concat's inputs, Split's outputs), a few launches in all. */
cudaError_t s4d_cuda_copy2d_batched(const s4d_cuda_copy2d *parts, int n, cudaStream_t stream);

/* Every element of dst (count elements of elem_size bytes) = value (elem_size bytes). */
cudaError_t s4d_cuda_fill(void *dst, int64_t elem_size, const void *value, int64_t count,
                          cudaStream_t stream);

/*
 * Gather: dst[o, i, r] = src[o, idx[i], r] for o < outer, i < nidx, r < inner,
 * src viewed as [outer, axis_n, inner]. idx is int64 (idx64) or int32.
 */
cudaError_t s4d_cuda_gather(void *dst, const void *src, const void *idx, int idx64,
                            int64_t elem_size, int64_t outer, int64_t axis_n, int64_t nidx,
                            int64_t inner, cudaStream_t stream);

/*
 * GatherElements: dst has idx's shape (idims, rank); element u reads src at
 * its own coordinates, with idx[u] along axis; src_st are src's element
 * strides and axis_n its length along axis.
 */
cudaError_t s4d_cuda_gather_elements(void *dst, const void *src, const void *idx, int idx64,
                                     int64_t elem_size, int rank, const int64_t *idims,
                                     const int64_t *src_st, int axis, int64_t axis_n,
                                     cudaStream_t stream);

/*
 * GatherND: ntuples = nb * per_batch index tuples of k int64 values; tuple
 * t of batch b = t / per_batch addresses src at b * batch_elems + sum_c
 * idx[t][c] * st[c] (dims[c] bounds each) and copies `slice` elements.
 */
cudaError_t s4d_cuda_gather_nd(void *dst, const void *src, const int64_t *idx,
                               int64_t elem_size, int64_t ntuples, int64_t per_batch, int k,
                               const int64_t *dims, const int64_t *st, int64_t batch_elems,
                               int64_t slice, cudaStream_t stream);

/* The element types the scatter reductions combine (the data's dtype). */
typedef enum s4d_cuda_scalar {
    S4D_CUDA_F32, S4D_CUDA_F64, S4D_CUDA_F16, S4D_CUDA_BF16,
    S4D_CUDA_I8, S4D_CUDA_U8, S4D_CUDA_I16, S4D_CUDA_U16,
    S4D_CUDA_I32, S4D_CUDA_U32, S4D_CUDA_I64, S4D_CUDA_U64,
    S4D_CUDA_RAW  /* any type, reduction none only: moved by elem_size */
} s4d_cuda_scalar;

/* Reduction codes: 0 none, 1 add, 2 mul, 3 max, 4 min (as s4d_scatter_reduction). */

/*
 * ScatterElements: out (data's shape, ddims) = data with every update whose
 * index lands on an element combined into it, in update order. One thread
 * per output element scans the updates that can reach it (idx dims[axis] of
 * them), so the result never depends on scheduling. idx and upd have shape
 * idims.
 */
cudaError_t s4d_cuda_scatter_elements(void *out, const void *data, const void *idx, int idx64,
                                      const void *upd, s4d_cuda_scalar type, int64_t elem_size,
                                      int reduction, int rank, const int64_t *ddims,
                                      const int64_t *idims, int axis, cudaStream_t stream);

/*
 * ScatterND: out = data (copied first when out != data), then update u
 * (slice elements) goes to the slot its index tuple (k int64 values over
 * dims, element strides st) addresses. Reduction none: the last update of a
 * slot wins (an integer atomicMax picks it, so the result is exact and the
 * same every run); a reduction combines in update order, one thread per
 * (slot, element) scanning the nupd slot numbers. workspace: at least
 * s4d_cuda_scatter_nd_workspace(nslots, nupd) bytes, 16-byte aligned.
 */
size_t s4d_cuda_scatter_nd_workspace(int64_t nslots, int64_t nupd);
cudaError_t s4d_cuda_scatter_nd(void *out, const void *data, const int64_t *idx,
                                const void *upd, s4d_cuda_scalar type, int64_t elem_size,
                                int reduction, int64_t nslots, int64_t slice, int64_t nupd,
                                int k, const int64_t *dims, const int64_t *st, void *workspace,
                                cudaStream_t stream);

/*
 * Resize tables, built once per layer (device memory): for each table axis
 * j (the axes from the first resampled one on), per output index o,
 * source element offsets off0[base[j] + o], off1[..] (the two taps times the
 * axis's input stride) and the weight w[..] of the second tap.
 */
#define S4D_CUDA_RESIZE_MAX_AXES 8
#define S4D_CUDA_RESIZE_MAX_LINEAR 3
typedef struct s4d_cuda_resize {
    int naxes;                      /* table axes */
    int64_t outer;                  /* product of the output dims before them (untouched) */
    int64_t in_block;               /* input elements per outer index */
    int64_t out_dims[S4D_CUDA_RESIZE_MAX_AXES];
    int64_t base[S4D_CUDA_RESIZE_MAX_AXES];
    int linear;
    /* Linear: the axes that blend (table axis numbers, in ascending order),
       and whether the host blends even where w == 0 (see resize.c). */
    int nlin;
    int lin_axis[S4D_CUDA_RESIZE_MAX_LINEAR];
    int always_blend[S4D_CUDA_RESIZE_MAX_LINEAR];
    const int64_t *off0, *off1;
    const float *w;
} s4d_cuda_resize;

cudaError_t s4d_cuda_resize_f32(float *y, const float *x, const s4d_cuda_resize *r,
                                cudaStream_t stream);
/* float16 x and y (void *): nearest copies, linear blends in float and rounds once. */
cudaError_t s4d_cuda_resize_f16(void *y, const void *x, const s4d_cuda_resize *r,
                                cudaStream_t stream);

/*
 * GridSample, float32: x [n, c, h, w], grid [n, ho, wo, 2] -> y [n, c, ho, wo].
 * pad: 0 zeros, 1 border, 2 reflection (as s4d_grid_sample_pad).
 */
cudaError_t s4d_cuda_grid_sample_f32(float *y, const float *x, const float *grid, int64_t n,
                                     int64_t c, int64_t h, int64_t w, int64_t ho, int64_t wo,
                                     int linear, int pad, int align, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* S4D_BACKEND_CUDA_KERNELS_MOVEMENT_H */
