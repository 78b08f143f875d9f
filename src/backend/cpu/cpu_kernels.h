/*
 * src/backend/cpu/cpu_kernels.h - the CPU backend's own kernels (internal).
 *
 * Most CPU layers run their schema's host reference (src/ops) through one
 * generic kernel. The ops below have kernels of their own, found first by
 * s4d_cpu_find_own_kernel; each falls back to the host reference for what it
 * does not cover, so that placing a node on the CPU never depends on them.
 */
#ifndef S4D_BACKEND_CPU_CPU_KERNELS_H
#define S4D_BACKEND_CPU_CPU_KERNELS_H

#include "backend/backend.h"
#include "util/threadpool.h"

/* Conv, s4d::FusedConv and s4d::FusedConvAct over the convolution library (conv_kernel.c). */
extern const s4d_kernel s4d_cpu_kernel_conv;
extern const s4d_kernel s4d_cpu_kernel_fused_conv;
extern const s4d_kernel s4d_cpu_kernel_fused_conv_act;
/* s4d::FusedMBConv over the library's inverted residual block (mbconv_kernel.c). */
extern const s4d_kernel s4d_cpu_kernel_fused_mbconv;
/* MaxPool over the convolution library's pooling (maxpool_kernel.c). */
extern const s4d_kernel s4d_cpu_kernel_maxpool;

/* Float32 activations, vectorised (eltwise_kernel.c). */
extern const s4d_kernel s4d_cpu_kernel_relu;
extern const s4d_kernel s4d_cpu_kernel_leaky_relu;
extern const s4d_kernel s4d_cpu_kernel_sigmoid;
extern const s4d_kernel s4d_cpu_kernel_hard_sigmoid;
extern const s4d_kernel s4d_cpu_kernel_hard_swish;
extern const s4d_kernel s4d_cpu_kernel_clip;
/* s4d::FusedPointwise: the host reference with the activations above. */
extern const s4d_kernel s4d_cpu_kernel_fused_pointwise;
/* Tests: 0 the best set this CPU has, 1 scalar, 2 AVX2 (or less), 3 AVX-512 (or less). */
void s4d_cpu_eltwise_force_isa(int isa);

/* GlobalAveragePool, float32, vectorised (gpool_kernel.c). */
extern const s4d_kernel s4d_cpu_kernel_global_avgpool;
/* Gemm of one row as a matrix-vector product (gemm_kernel.c). */
extern const s4d_kernel s4d_cpu_kernel_gemm;

/* The CPU kernel of its own for (domain, op_type) at the highest
   since_version <= opset, or NULL (kernel_table.c). */
const s4d_kernel *s4d_cpu_find_own_kernel(const char *domain, const char *op_type, int opset);

/*
 * Whether a layer is worth splitting over the context's pool. Waking the
 * workers and waiting for the last of them costs 10 to 30 us per parallel
 * region on a shared virtual machine, about what a small layer takes on one
 * thread, so layers estimated below S4D_CPU_SPLIT_MIN_US run on the calling
 * thread alone (ctx->pool set to NULL). The result is the same either way:
 * every kernel gives the same bits on any number of threads.
 */
#define S4D_CPU_SPLIT_MIN_US 60.0
/* Single-thread microseconds to read and write the layer's tensors (in cache,
   where these small layers live: 20 bytes per ns, Concat and Slice measured
   at 50 to 90). */
double s4d_cpu_io_us(const s4d_op_ctx *ctx);
/* Sets ctx->pool to NULL when est_us, the layer's estimated single-thread time, is below the threshold. */
void s4d_cpu_split_decide(s4d_op_ctx *ctx, double est_us);

/* The largest thread count the convolution kernels plan for: the machine's
   online cores, or S4D_CPU_PLAN_THREADS when set (tests). */
int s4d_cpu_plan_threads(void);

/* What the kernels over the convolution library share (conv_kernel.c). The library's blocking
   follows its slot count, so such a kernel plans once per pool width it may meet:
   s4d_cpu_plan_widths writes 1, 2, 4, ... and s4d_cpu_plan_threads() itself into widths
   (ascending, at most max) and returns the count; s4d_cpu_pick_width is the index of the widest
   that fits the pool. */
int s4d_cpu_plan_widths(int *widths, int max);
int s4d_cpu_pick_width(const int *widths, int n, const s4d_threadpool *pool);
/* The library's parallel-for on the engine's pool: one chunk per slot (the library hands out
   its work items inside). */
void s4d_cpu_lib_parallel_for(void *pool, int64_t n, void (*fn)(void *, int64_t, int64_t), void *arg);
/* Whether the byte ranges [a, a + an) and [b, b + bn) share memory (NULL shares nothing). */
int s4d_cpu_overlaps(const void *a, size_t an, const void *b, size_t bn);
/* An s4d_conv_act (ops/extra.h) with its alpha and beta as the library's epilogue takes it:
   act, then CLIP's bounds in *lo and *hi, or LEAKY_RELU's and HARD_SIGMOID's alpha and beta in
   *alpha and *beta; 0 for a value outside s4d_conv_act. */
int s4d_cpu_lib_act(int act, float a, float b, int *lib_act, float *lo, float *hi, float *alpha, float *beta);

#endif /* S4D_BACKEND_CPU_CPU_KERNELS_H */
