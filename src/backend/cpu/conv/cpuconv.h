/*
 * src/backend/cpu/conv/cpuconv.h - fast float32 2-D convolution on the CPU
 * (internal to libs4d; not installed).
 *
 * Activations are NCHW float32 on both sides; weights are ONNX's
 * [M][C/group][KH][KW]. Three phases, following the engine's build/run split:
 *
 *   plan  (build and load time) - s4d_cpuconv_plan_create chooses the
 *         algorithm and the blocking and reports the workspace and the
 *         packed-weight sizes;
 *   pack  (build time)          - s4d_cpuconv_pack_weights rearranges (and for
 *         Winograd transforms) the weights once; the bytes are independent of
 *         the instruction set and the thread count, so they can be stored in
 *         the engine file (store the plan's algorithm with them and pass it
 *         as params.algo when planning again at load time);
 *   run   (every inference)     - s4d_cpuconv_run computes
 *         y = act(conv(x, w) + bias + residual), allocating nothing.
 *
 * Algorithms:
 *   GEMM       implicit GEMM: blocks of the im2col matrix are packed on the
 *              fly into cache-sized panels (never the whole matrix) and
 *              multiplied with the packed weights by a register-blocked
 *              micro-kernel; any kernel size, stride, dilation, padding, group.
 *              A 1x1 stride-1 plane packs as one long row (plain copies).
 *   WINOGRAD2  F(2x2,3x3) and WINOGRAD4 F(4x4,3x3): 3x3, stride 1, dilation
 *              1, group 1; the 16 or 36 element-wise products are batched
 *              GEMMs on the same micro-kernel. F(4x4) does 4x fewer
 *              multiplications than GEMM, F(2x2) 2.25x; both lose a little
 *              precision (see docs/cpu-backend.md for the measured error).
 *   DEPTHWISE  group == C == M: a kernel of its own, vectorised over output
 *              columns; any kernel size, stride, dilation, padding.
 *
 * Also here, because the stem of a ResNet runs it between two convolutions:
 * s4d_cpuconv_maxpool, 2-D max pooling on the same vector row machinery.
 *
 * Instruction sets: AVX-512F, AVX2+FMA or portable C, chosen at run time from
 * the CPU's features (each kernel is compiled for its set with a function
 * target attribute, so the library needs no -march flag). All three give the
 * same results up to float rounding; a given set gives the same bits for any
 * thread count.
 *
 * Threads: the caller hands in a parallel-for (its own thread pool). Work is
 * cut into a fixed number of slots (params.num_threads), each with its own
 * piece of the workspace; inside a run, slots take work items from a shared
 * counter, and every output element is computed by one item in a fixed order,
 * so the result does not depend on scheduling. The blocking (and so the
 * workspace size) follows num_threads; the algorithm and packed bytes do not.
 */
#ifndef S4D_CPU_CONV_CPUCONV_H
#define S4D_CPU_CONV_CPUCONV_H

#include <stddef.h>
#include <stdint.h>

#include "s4d/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum s4d_cpuconv_algo {
    S4D_CPUCONV_ALGO_AUTO = 0, /* let the plan choose (the same choice on every CPU) */
    S4D_CPUCONV_ALGO_GEMM = 1,
    S4D_CPUCONV_ALGO_WINOGRAD2 = 2,
    S4D_CPUCONV_ALGO_WINOGRAD4 = 3,
    S4D_CPUCONV_ALGO_DEPTHWISE = 4
} s4d_cpuconv_algo;

typedef enum s4d_cpuconv_isa {
    S4D_CPUCONV_ISA_AUTO = 0, /* the best set this CPU supports */
    S4D_CPUCONV_ISA_SCALAR = 1,
    S4D_CPUCONV_ISA_AVX2 = 2,  /* AVX2 + FMA */
    S4D_CPUCONV_ISA_AVX512 = 3 /* AVX-512F */
} s4d_cpuconv_isa;

/* Activations applied in the epilogue; NaN stays NaN in each. */
typedef enum s4d_cpuconv_act {
    S4D_CPUCONV_ACT_NONE = 0,
    S4D_CPUCONV_ACT_RELU = 1,        /* max(v, 0) */
    S4D_CPUCONV_ACT_CLIP = 2,        /* min(max(v, act_min), act_max), e.g. ReLU6 */
    S4D_CPUCONV_ACT_LEAKY_RELU = 3,  /* v < 0 ? act_alpha * v : v */
    S4D_CPUCONV_ACT_SIGMOID = 4,     /* 1 / (1 + exp(-v)) */
    S4D_CPUCONV_ACT_SILU = 5,        /* v * sigmoid(v) (Swish) */
    S4D_CPUCONV_ACT_HARD_SIGMOID = 6, /* clamp(act_alpha * v + act_beta, 0, 1) */
    S4D_CPUCONV_ACT_HARD_SWISH = 7   /* v * clamp(v / 6 + 1 / 2, 0, 1) */
} s4d_cpuconv_act;

/* Plain data; set struct_size = sizeof(s4d_cpuconv_params) (fields are only
 * ever appended). Zero-initialise, then fill: zero means the default where one
 * is given. */
typedef struct s4d_cpuconv_params {
    uint32_t struct_size;
    int64_t n, c, h, w; /* input NCHW */
    int64_t m;          /* output channels */
    int64_t kh, kw;
    int64_t stride_h, stride_w;                   /* 0 means 1 */
    int64_t pad_top, pad_left, pad_bottom, pad_right;
    int64_t dil_h, dil_w;                         /* 0 means 1 */
    int64_t group;                                /* 0 means 1 */
    int has_bias;      /* run takes bias[M] */
    int has_residual;  /* run takes residual with y's shape, added after the bias */
    s4d_cpuconv_act act;
    float act_min, act_max;  /* for CLIP */
    s4d_cpuconv_algo algo;   /* AUTO or a forced algorithm (error if it cannot run the shape) */
    s4d_cpuconv_isa isa;     /* AUTO or a forced set (error if the CPU lacks it) */
    int num_threads;         /* slots of the parallel-for; 0 means 1 */
    float act_alpha, act_beta; /* for LEAKY_RELU (alpha) and HARD_SIGMOID */
} s4d_cpuconv_params;

typedef struct s4d_cpuconv_plan s4d_cpuconv_plan;

/* What a plan decided (plain data, copied out). */
typedef struct s4d_cpuconv_info {
    s4d_cpuconv_algo algo;
    s4d_cpuconv_isa isa;
    int64_t ho, wo;           /* output spatial size */
    size_t workspace_bytes;   /* for s4d_cpuconv_run; may be 0 */
    size_t packed_bytes;      /* for s4d_cpuconv_pack_weights */
    double est_gflop;         /* multiply-adds x 2 that the algorithm performs */
} s4d_cpuconv_info;

/*
 * Checks params and chooses the algorithm and blocking. *out is owned by the
 * caller until s4d_cpuconv_plan_destroy. On failure *out is NULL and, when err
 * is not NULL, err->msg names the field at fault. Returns S4D_OK,
 * S4D_ERR_INVALID_ARG (NULL pointers, struct_size, non-positive sizes,
 * negative pads, unknown enum values), S4D_ERR_SHAPE (group does not divide C
 * and M, kernel larger than the padded input), S4D_ERR_UNSUPPORTED (a forced
 * algorithm that cannot run this shape, a forced instruction set this CPU
 * lacks, sizes past 2^31 elements per plane), S4D_ERR_NO_MEMORY.
 */
s4d_status s4d_cpuconv_plan_create(const s4d_cpuconv_params *params, s4d_cpuconv_plan **out,
                                   s4d_errbuf *err);

/* NULL is a no-op. */
void s4d_cpuconv_plan_destroy(s4d_cpuconv_plan *plan);

/* Copies the plan's decisions into *info. */
void s4d_cpuconv_plan_info(const s4d_cpuconv_plan *plan, s4d_cpuconv_info *info);

/* One line on the plan's algorithm and blocking into buf (snprintf rules:
 * returns the length it needed). For logs and --dumpLayerInfo. */
int s4d_cpuconv_plan_describe(const s4d_cpuconv_plan *plan, char *buf, size_t size);

/*
 * Writes the packed form of w ([M][C/group][KH][KW] float32, not kept) into
 * packed (info.packed_bytes bytes, any alignment, owned by the caller). The
 * bytes depend only on (params shape fields, algorithm), so they stay valid
 * for any instruction set and thread count; they start with a small header
 * that run checks against the plan. Returns S4D_OK or S4D_ERR_INVALID_ARG
 * (NULL pointers, packed_bytes too small).
 */
s4d_status s4d_cpuconv_pack_weights(const s4d_cpuconv_plan *plan, const float *w, void *packed,
                                    size_t packed_bytes, s4d_errbuf *err);

/* A parallel-for: calls fn(arg, begin, end) on disjoint chunks covering
 * [0, n), possibly concurrently, and returns when all are done. */
typedef void (*s4d_cpuconv_range_fn)(void *arg, int64_t begin, int64_t end);
typedef void (*s4d_cpuconv_parallel_for)(void *pool, int64_t n, s4d_cpuconv_range_fn fn, void *arg);

/*
 * y = act(conv(x, packed) + bias + residual) for the planned shape.
 * x: [N][C][H][W]; y: [N][M][HO][WO] (must not overlap x, packed, the
 * residual or the workspace: partial sums are stored in y); bias: [M] when has_bias
 * (else ignored); residual: y's shape when has_residual (else ignored);
 * workspace: info.workspace_bytes bytes (any alignment; NULL when that is 0).
 * parallel_for NULL runs everything on the calling thread. Allocates nothing.
 * Returns S4D_OK, S4D_ERR_INVALID_ARG (NULL pointers that are needed, a
 * workspace that is too small, packed bytes that are not this plan's).
 */
s4d_status s4d_cpuconv_run(const s4d_cpuconv_plan *plan, const void *packed, const float *x,
                           const float *bias, const float *residual, float *y, void *workspace,
                           size_t workspace_bytes, s4d_cpuconv_parallel_for parallel_for, void *pool,
                           s4d_errbuf *err);

/* Max pooling over NCHW float32 (plain data; struct_size as above). The
 * output size is the caller's (it knows ceil_mode and auto_pad); windows are
 * clipped to the input, padding takes no part, an empty window gives -inf and
 * a NaN in a window gives NaN (the engine's MaxPool semantics). */
typedef struct s4d_cpuconv_pool_params {
    uint32_t struct_size;
    int64_t n, c, h, w;
    int64_t kh, kw;
    int64_t stride_h, stride_w; /* 0 means 1 */
    int64_t pad_top, pad_left;
    int64_t dil_h, dil_w;       /* 0 means 1 */
    int64_t ho, wo;
    s4d_cpuconv_isa isa;        /* AUTO or forced */
} s4d_cpuconv_pool_params;

/* y[N][C][HO][WO] = max pooling of x. parallel_for may be NULL. Allocates
 * nothing. Returns S4D_OK, S4D_ERR_INVALID_ARG (NULL pointers, non-positive
 * sizes, negative pads, struct_size) or S4D_ERR_UNSUPPORTED (a forced set the
 * CPU lacks, planes past 2^30 elements). */
s4d_status s4d_cpuconv_maxpool(const s4d_cpuconv_pool_params *params, const float *x, float *y,
                               s4d_cpuconv_parallel_for parallel_for, void *pool, s4d_errbuf *err);

/* The best instruction set this CPU supports (never AUTO), and a name for one. */
s4d_cpuconv_isa s4d_cpuconv_isa_best(void);
const char *s4d_cpuconv_isa_name(s4d_cpuconv_isa isa);
const char *s4d_cpuconv_algo_name(s4d_cpuconv_algo algo);

#ifdef __cplusplus
}
#endif

#endif /* S4D_CPU_CONV_CPUCONV_H */
