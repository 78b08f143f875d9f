/*
 * MatMul, s4d::FusedMatMul, Gemm and Einsum (the forms that are one batched
 * product) on CUDA through cuBLASLt.
 *
 * Row-major D[m, n] = op(A)[m, k] op(B)[k, n] is the column-major product
 * D^T = op(B)^T op(A)^T, so cuBLASLt gets our B as its A and our A as its B,
 * with no data moved. Batches: a broadcast operand has batch stride 0; batch
 * dims that do not fold into one strided batch become a loop of calls on the
 * host (no device memory is read for it); a MatMul whose B is shared by every
 * batch and whose A is dense over them (the Linear layers of the head) is one
 * tall product.
 *
 * Epilogues: a constant bias over the last axis (FusedMatMul, and Gemm's row
 * C with beta = 1) is cuBLASLt's BIAS / RELU_BIAS epilogue; ReLU is RELU. Any
 * other C (Gemm's broadcast C, a non-constant bias) is first written into D,
 * scaled by beta, by a small kernel, and cuBLASLt accumulates onto it. A
 * FusedMatMul's residual is cuBLASLt's C with beta = 1 (D's layout, so it
 * advances with D through a loop of calls); with a residual, the activation
 * is refused (cuBLASLt would apply it after the residual). A FusedMatMul that normalises (LayerNormalization over the last axis) runs
 * the LayerNorm kernel on D in place after the product, or, on the own
 * float32 kernel with rows of at most 64 columns, in that kernel's epilogue;
 * the timed candidates include the normalisation.
 *
 * Build time: cuBLASLt's heuristics propose up to 16 algorithms for the shape,
 * alignment and epilogue; each is timed on scratch buffers (a few
 * microseconds per call) and the fastest kept, once per distinct problem in
 * the process. The choice is stored as the algorithm's configuration
 * attributes, from which load rebuilds it and cublasLtMatmulAlgoCheck
 * validates it (the payload is untrusted). Strict float32 computes with
 * CUBLAS_COMPUTE_32F; --tf32 allows CUBLAS_COMPUTE_32F_FAST_TF32.
 *
 * float16: A, B, C, D and the bias are CUDA_R_16F, the compute type
 * CUBLAS_COMPUTE_32F (tensor cores, products accumulated in float32) and the
 * scale type float (alpha, beta as float); D rounds once, after the
 * epilogue. Alignment as for float32, counted in 2-byte elements.
 *
 * Alignment: the chosen algorithm assumes 16-byte aligned operands (what the
 * engine's buffers give); for caller-bound pointers that are not, run()
 * switches to a second algorithm chosen for element alignment.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/kernels/dense.h"
#include "backend/cuda/kernels/reduce.h"
#include "backend/cuda/kernels/sgemm.h"
#include "backend/cuda/ops/dense_ops.h"
#include "ops/dense.h"

#define LT_WS_CAP ((size_t)32 << 20)
#define LT_CANDIDATES 16
#define LT_TIME_REPS 5
/* Scratch the build may allocate to time one product; above it, the heuristic's first choice stands. */
#define LT_SCRATCH_CAP ((size_t)1 << 30)
#define LT_MAGIC 0x4d474453u /* "SDGM" */
#define LT_OUTER_MAX S4D_MAX_RANK

/* What cuBLASLt reads beside A and B. LT_C_PRE: D holds the addend already, written by the
   caller (a 1x1 convolution's bias and residual), and the product accumulates onto it. */
enum { LT_C_NONE = 0, LT_C_MATRIX = 1, LT_C_FILL = 2, LT_C_PRE = 3 };

/* The algorithm configuration attributes that rebuild an algorithm, and their sizes. */
static const struct {
    cublasLtMatmulAlgoConfigAttributes_t attr;
    size_t size;
} lt_cfg_attrs[] = {
    {CUBLASLT_ALGO_CONFIG_ID, 4},          {CUBLASLT_ALGO_CONFIG_TILE_ID, 4},
    {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4},  {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, 4},
    {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4}, {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, 4},
    {CUBLASLT_ALGO_CONFIG_STAGES_ID, 4},   {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, 2},
    {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2},
};
#define LT_NCFG ((int)(sizeof lt_cfg_attrs / sizeof lt_cfg_attrs[0]))
/* Indices into a configuration (lt_cfg_attrs' order) that the code reads by name. */
enum { LT_CFG_ALGO = 0, LT_CFG_TILE = 1, LT_CFG_SPLITK = 2, LT_CFG_STAGES = 6 };

/* A product as the ops describe it (row major, element strides). */
typedef struct lt_problem {
    s4d_dtype dtype;
    int64_t m, n, k;
    int ta, tb;              /* A stored [k, m] / B stored [n, k] */
    int64_t batch;           /* strided batch of one call */
    int64_t sa, sb;          /* element strides between the batch's A / B matrices (0: shared) */
    int outer_rank;          /* loop of calls around the strided batch */
    int64_t outer[LT_OUTER_MAX], oa[LT_OUTER_MAX], ob[LT_OUTER_MAX]; /* dims, element strides of A, B */
    double alpha, beta;
    int c_kind;              /* LT_C_* */
    int64_t fill_rows, fill_cols, fill_rs, fill_cs; /* LT_C_FILL: D = beta * C[r * rs + j * cs] first */
    int relu, bias_epi;      /* epilogue; bias_epi: the bias input is constant, bias_ptr its device data */
    int residual;            /* LT_C_MATRIX is a FusedMatMul's residual (beta 1, D's shape) */
    const void *bias_ptr;
    int norm;                /* then LayerNormalization of each row of D (FusedMatMul) */
    float norm_eps;
    const void *norm_scale, *norm_shift; /* constants' device data; shift may be NULL */
    /* For timing at build: constant operands' device data (or NULL) and every operand's bytes. */
    const void *a_const, *b_const, *c_const;
    size_t a_bytes, b_bytes, c_bytes;
} lt_problem;

/* Choice flags: how the build shaped the problem (load repeats it) and how the algorithm is kept. */
#define LT_FLAG_MIN_ALIGNED 1u /* the algorithm assumes element alignment only */
#define LT_FLAG_UNROLLED 2u    /* the strided batch runs as a loop of single products */
#define LT_FLAG_RAW 4u         /* the algorithm's own bytes (no configuration rebuilt it) */
#define LT_FLAG_OWN 8u         /* the project's own float32 kernel (sgemm.h) timed faster */
#define LT_WORDS ((int)(sizeof(cublasLtMatmulAlgo_t) / sizeof(uint32_t)))

/*
 * A chosen algorithm as the payload and the process cache keep it: its
 * configuration attributes (words[0 .. LT_NCFG), mask: the ones it reports),
 * or with LT_FLAG_RAW its bytes, for an algorithm its configuration does not
 * rebuild.
 */
typedef struct lt_choice {
    uint32_t flags, mask;
    uint32_t words[LT_WORDS];
} lt_choice;
_Static_assert(LT_NCFG <= LT_WORDS, "the configuration fits the choice's words");

typedef struct lt_state {
    int empty;
    s4d_dtype dtype;
    cublasComputeType_t compute;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc, ld; /* cuBLASLt's A (our B), B (our A), C, D */
    cublasLtMatmulAlgo_t algo, safe;
    size_t ws, safe_ws;
    int have_safe;
    int min_aligned;   /* no algorithm for 16-byte operands: the main one assumes element alignment */
    int unrolled;      /* the strided batch runs as a loop of calls */
    unsigned align[4]; /* bytes the chosen algorithm assumes of our A, B, C, D */
    lt_choice ch;      /* what the payload stores */
    int own;           /* runs on the project's own kernel (sgemm.h), not cuBLASLt */
    lt_problem pb;
} lt_state;

/* ---- problem shaping ---- */

/* Bytes of one element of a product's dtype (float64, float32 or float16). */
static size_t lt_es(s4d_dtype dt)
{
    return dt == S4D_DTYPE_FLOAT64 ? 8 : dt == S4D_DTYPE_FLOAT16 ? 2 : 4;
}

/* cuBLASLt's type of the operands and of the scalars (alpha, beta). */
static cudaDataType_t lt_data_type(s4d_dtype dt)
{
    return dt == S4D_DTYPE_FLOAT64 ? CUDA_R_64F : dt == S4D_DTYPE_FLOAT16 ? CUDA_R_16F : CUDA_R_32F;
}

static cudaDataType_t lt_scale_type(s4d_dtype dt)
{
    return dt == S4D_DTYPE_FLOAT64 ? CUDA_R_64F : CUDA_R_32F;
}

/* Largest power of two <= 16 dividing v (16 for 0). */
static unsigned pow2_align(uint64_t v)
{
    unsigned a = 16;
    while (a > 1 && v % a)
        a >>= 1;
    return a;
}

/*
 * Batch dims [rank] with A / B element strides: drops size-1 dims, folds the
 * innermost run that keeps a constant stride for both operands into the
 * strided batch, and leaves the rest as an outer loop.
 */
static void lt_shape_batches(lt_problem *p, int rank, const int64_t *dims, const int64_t *sa, const int64_t *sb)
{
    int64_t d[LT_OUTER_MAX], a[LT_OUTER_MAX], b[LT_OUTER_MAX];
    int r = 0;
    for (int i = 0; i < rank; i++) {
        if (dims[i] == 1)
            continue;
        d[r] = dims[i];
        a[r] = sa[i];
        b[r] = sb[i];
        r++;
    }
    p->batch = 1;
    p->sa = p->sb = 0;
    p->outer_rank = 0;
    if (r == 0)
        return;
    int i = r - 1;
    p->batch = d[i];
    p->sa = a[i];
    p->sb = b[i];
    while (i > 0 && a[i - 1] == p->sa * p->batch && b[i - 1] == p->sb * p->batch) {
        i--;
        p->batch *= d[i];
    }
    /* A batch of one matrix is no batch: its stride is irrelevant. */
    if (p->batch == 1)
        p->sa = p->sb = 0;
    for (int j = 0; j < i; j++) {
        p->outer[j] = d[j];
        p->oa[j] = a[j];
        p->ob[j] = b[j];
    }
    p->outer_rank = i;
}

static int64_t lt_outer_count(const lt_problem *p)
{
    int64_t c = 1;
    for (int i = 0; i < p->outer_rank; i++)
        c *= p->outer[i];
    return c;
}

/* ---- descriptors ---- */

static void lt_free_descs(lt_state *st);

static void lt_state_free(lt_state *st)
{
    if (!st)
        return;
    lt_free_descs(st);
    free(st);
}

static void lt_destroy(void *state)
{
    lt_state_free(state);
}

static cublasStatus_t lt_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld,
                                int64_t batch, int64_t stride)
{
    cublasStatus_t s = cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS || batch <= 1)
        return s;
    int32_t bc = (int32_t)batch;
    s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
    return s;
}

static s4d_status lt_make_descs(s4d_op_ctx *ctx, lt_state *st)
{
    const lt_problem *p = &st->pb;
    const int f64 = p->dtype == S4D_DTYPE_FLOAT64;
    const cudaDataType_t t = lt_data_type(p->dtype);
    /* float16 operands take the tensor cores under COMPUTE_32F already; TF32 concerns float32 operands only. */
    st->compute = f64                                   ? CUBLAS_COMPUTE_64F
                  : p->dtype == S4D_DTYPE_FLOAT16       ? CUBLAS_COMPUTE_32F
                  : s4d_cuda_ctx(ctx)->allow_tf32       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                        : CUBLAS_COMPUTE_32F;
    cublasStatus_t s = cublasLtMatmulDescCreate(&st->op, st->compute, lt_scale_type(p->dtype));
    /* cuBLASLt's A is our B: [n, k] column major (B stored [k, n] row major), or its transpose. */
    int32_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    uint32_t epi = p->bias_epi ? (p->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                               : (p->relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (s == CUBLAS_STATUS_SUCCESS && p->bias_epi)
        s = cublasLtMatmulDescSetAttribute(st->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p->bias_ptr,
                                           sizeof p->bias_ptr);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = p->tb ? lt_layout(&st->la, t, p->k, p->n, p->k, p->batch, p->sb)
                  : lt_layout(&st->la, t, p->n, p->k, p->n, p->batch, p->sb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = p->ta ? lt_layout(&st->lb, t, p->m, p->k, p->m, p->batch, p->sa)
                  : lt_layout(&st->lb, t, p->k, p->m, p->k, p->batch, p->sa);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt_layout(&st->lc, t, p->n, p->m, p->n, p->batch, p->m * p->n);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = lt_layout(&st->ld, t, p->n, p->m, p->n, p->batch, p->m * p->n);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s4d_cublas_check(ctx, s, "creating the cuBLASLt descriptors");
    return S4D_OK;
}

static unsigned min_u(unsigned a, unsigned b)
{
    return a < b ? a : b;
}

/*
 * Alignment the chosen algorithm may assume of each operand's every matrix
 * and row: 16 bytes unless a leading dimension, a batch stride or an outer
 * call's offset breaks it (the base pointers are checked at run time).
 */
static void lt_alignments(lt_state *st)
{
    const lt_problem *p = &st->pb;
    const uint64_t es = lt_es(p->dtype);
    unsigned a = pow2_align((uint64_t)(p->ta ? p->m : p->k) * es);
    unsigned b = pow2_align((uint64_t)(p->tb ? p->k : p->n) * es);
    unsigned d = pow2_align((uint64_t)p->n * es);
    if (p->batch > 1) {
        a = min_u(a, pow2_align((uint64_t)p->sa * es));
        b = min_u(b, pow2_align((uint64_t)p->sb * es));
        d = min_u(d, pow2_align((uint64_t)(p->m * p->n) * es));
    }
    for (int i = 0; i < p->outer_rank; i++) {
        a = min_u(a, pow2_align((uint64_t)p->oa[i] * es));
        b = min_u(b, pow2_align((uint64_t)p->ob[i] * es));
    }
    if (p->outer_rank)
        d = min_u(d, pow2_align((uint64_t)(p->batch * p->m * p->n) * es));
    st->align[0] = a;
    st->align[1] = b;
    st->align[2] = d; /* C has D's layout */
    st->align[3] = d;
}

/* Element alignment only: what any pointer of the dtype has. */
static void lt_min_alignments(lt_state *st)
{
    const unsigned es = (unsigned)lt_es(st->dtype);
    for (int i = 0; i < 4; i++)
        st->align[i] = es;
    st->min_aligned = 1;
}

/* ---- algorithms ---- */

static int lt_heuristics(cublasLtHandle_t lt, const lt_state *st, const unsigned *align, int want,
                         cublasLtMatmulHeuristicResult_t *res)
{
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return 0;
    uint64_t cap = LT_WS_CAP;
    uint32_t al[4] = {align[0], align[1], align[2], align[3]};
    /* cuBLASLt's A is our B and its B our A. */
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &cap, sizeof cap);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[1], sizeof al[1]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[0], sizeof al[0]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]);
    /* Split-K is allowed: without it a tall product with a long K (the head's 1024 -> 256
       feed-forward layer, 900 x 256 outputs) runs on a handful of tiles. Every reduction
       scheme sums the splits in a fixed order, so results repeat from run to run. */
    uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                         sizeof reductions);
    int got = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt, st->op, st->la, st->lb, st->lc, st->ld, pref, want, res, &got) !=
        CUBLAS_STATUS_SUCCESS)
        got = 0;
    cublasLtMatmulPreferenceDestroy(pref);
    int n = 0;
    for (int i = 0; i < got; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= LT_WS_CAP)
            res[n++] = res[i];
    return n;
}

/*
 * The configuration attributes of an algorithm (what the payload stores);
 * *mask gets a bit per attribute the algorithm reports (the ID always).
 */
static int lt_cfg_get(const cublasLtMatmulAlgo_t *algo, uint32_t *cfg, uint32_t *mask)
{
    *mask = 0;
    for (int i = 0; i < LT_NCFG; i++) {
        uint32_t v32 = 0;
        uint16_t v16 = 0;
        size_t wrote = 0;
        void *buf = lt_cfg_attrs[i].size == 2 ? (void *)&v16 : (void *)&v32;
        cfg[i] = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(algo, lt_cfg_attrs[i].attr, buf, lt_cfg_attrs[i].size, &wrote) !=
                CUBLAS_STATUS_SUCCESS ||
            wrote != lt_cfg_attrs[i].size) {
            if (i == 0)
                return 0;
            continue;
        }
        cfg[i] = lt_cfg_attrs[i].size == 2 ? v16 : v32;
        *mask |= 1u << i;
    }
    return 1;
}

/* Rebuilds an algorithm from its configuration and checks it against the descriptors; 1 when it runs. */
static int lt_cfg_build(cublasLtHandle_t lt, const lt_state *st, const uint32_t *cfg, uint32_t mask,
                        cublasLtMatmulAlgo_t *algo, size_t *ws)
{
    const cudaDataType_t t = lt_data_type(st->dtype);
    memset(algo, 0, sizeof *algo);
    if (!(mask & 1u) || mask >> LT_NCFG || cfg[0] > INT_MAX ||
        cublasLtMatmulAlgoInit(lt, st->compute, lt_scale_type(st->dtype), t, t, t, t, (int)cfg[0], algo) !=
            CUBLAS_STATUS_SUCCESS)
        return 0;
    for (int i = 1; i < LT_NCFG; i++) {
        if (!(mask & (1u << i)))
            continue;
        uint32_t v32 = cfg[i];
        uint16_t v16 = (uint16_t)cfg[i];
        if (lt_cfg_attrs[i].size == 2 && cfg[i] > 0xffffu)
            return 0;
        const void *buf = lt_cfg_attrs[i].size == 2 ? (const void *)&v16 : (const void *)&v32;
        if (cublasLtMatmulAlgoConfigSetAttribute(algo, lt_cfg_attrs[i].attr, buf, lt_cfg_attrs[i].size) !=
            CUBLAS_STATUS_SUCCESS)
            return 0;
    }
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    if (cublasLtMatmulAlgoCheck(lt, st->op, st->la, st->lb, st->lc, st->ld, algo, &r) != CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > LT_WS_CAP)
        return 0;
    *ws = r.workspaceSize;
    return 1;
}

/* ---- running ---- */

typedef struct lt_args {
    s4d_op_ctx *ctx;
    cublasLtHandle_t lt;
    cudaStream_t s;
    const lt_state *st;
    const cublasLtMatmulAlgo_t *algo;
    const void *a, *b, *c; /* c: LT_C_MATRIX's C, or LT_C_FILL's source */
    void *d, *ws;
    size_t ws_size;
    int skip_fill; /* timing measures the product alone */
} lt_args;

/* Element offsets of A and B in call i of the loop of calls around the strided batch. */
static void lt_outer_offsets(const lt_problem *p, int64_t i, int64_t *oa, int64_t *ob)
{
    int64_t r = i;
    *oa = 0;
    *ob = 0;
    for (int j = p->outer_rank - 1; j >= 0; j--) {
        const int64_t c = r % p->outer[j];
        r /= p->outer[j];
        *oa += c * p->oa[j];
        *ob += c * p->ob[j];
    }
}

/* The FusedMatMul's LayerNormalization, in place over every row of D. */
static s4d_status norm_launch(const lt_args *x)
{
    const lt_problem *p = &x->st->pb;
    if (!p->norm)
        return S4D_OK;
    s4d_cuda_ln_args a;
    memset(&a, 0, sizeof a);
    a.rows = lt_outer_count(p) * p->batch * p->m;
    a.cols = p->n;
    a.nrank = 1;
    a.ndims[0] = p->n;
    a.scale_dense = a.bias_dense = 1;
    a.epsilon = p->norm_eps;
    a.half = p->dtype == S4D_DTYPE_FLOAT16;
    cudaError_t e = s4d_cuda_layernorm(&a, x->d, p->norm_scale, p->norm_shift, x->d, NULL, NULL, NULL, 0, x->s);
    return e == cudaSuccess ? S4D_OK : s4d_cuda_check(x->ctx, e, "the product's LayerNormalization");
}

static s4d_status lt_launch(void *arg)
{
    const lt_args *x = arg;
    const lt_state *st = x->st;
    const lt_problem *p = &st->pb;
    const int f64 = p->dtype == S4D_DTYPE_FLOAT64;
    const size_t es = lt_es(p->dtype);
    if (p->c_kind == LT_C_FILL && !x->skip_fill) {
        cudaError_t e =
            f64 ? s4d_cuda_fill_bcast_f64(x->d, x->c, p->fill_rows, p->fill_cols, p->fill_rs, p->fill_cs, p->beta,
                                          x->s)
            : p->dtype == S4D_DTYPE_FLOAT16
                ? s4d_cuda_fill_bcast_f16(x->d, x->c, p->fill_rows, p->fill_cols, p->fill_rs, p->fill_cs,
                                          (float)p->beta, x->s)
                : s4d_cuda_fill_bcast_f32(x->d, x->c, p->fill_rows, p->fill_cols, p->fill_rs, p->fill_cs,
                                          (float)p->beta, x->s);
        if (e != cudaSuccess)
            return s4d_cuda_check(x->ctx, e, "the GEMM addend kernel");
    }
    const double alpha_d = p->alpha,
                 beta_d = p->c_kind == LT_C_NONE                              ? 0.0
                          : p->c_kind == LT_C_FILL || p->c_kind == LT_C_PRE ? 1.0
                                                                              : p->beta;
    const float alpha_f = (float)alpha_d, beta_f = (float)beta_d;
    const void *alpha = f64 ? (const void *)&alpha_d : (const void *)&alpha_f;
    const void *beta = f64 ? (const void *)&beta_d : (const void *)&beta_f;
    const int64_t calls = lt_outer_count(p), d_step = p->batch * p->m * p->n;
    for (int64_t i = 0; i < calls; i++) {
        int64_t oa, ob;
        lt_outer_offsets(p, i, &oa, &ob);
        const char *a = (const char *)x->a + (size_t)oa * es;
        const char *b = (const char *)x->b + (size_t)ob * es;
        char *d = (char *)x->d + (size_t)(i * d_step) * es;
        const void *c = p->c_kind == LT_C_MATRIX ? (const char *)x->c + (size_t)(i * d_step) * es : d;
        cublasStatus_t s = cublasLtMatmul(x->lt, st->op, alpha, b, st->la, a, st->lb, beta, c, st->lc, d, st->ld,
                                          x->algo, x->ws, x->ws_size, x->s);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s4d_cublas_check(x->ctx, s, "cublasLtMatmul");
    }
    return norm_launch(x);
}

/*
 * Whether the project's own kernel computes this product as cuBLASLt would: strict float32
 * (a TF32 engine's tensor cores are faster), row-major A and B, no addend matrix but a residual.
 */
static int own_fits(const s4d_op_ctx *ctx, const lt_state *st)
{
    const lt_problem *p = &st->pb;
    return p->dtype == S4D_DTYPE_FLOAT32 && !s4d_cuda_ctx(ctx)->allow_tf32 && !p->ta && !p->tb &&
           (p->c_kind == LT_C_NONE || p->residual) && p->alpha == 1.0 && !st->unrolled &&
           s4d_cuda_sgemm_ok(p->m, p->n, p->k, p->batch);
}

/* Whether the own kernel normalises in its epilogue (a FusedMatMul's rows short enough for one block). */
static int own_normalises(const lt_problem *p)
{
    return p->norm && p->n <= S4D_CUDA_SGEMM_LN_MAX_N;
}

/* lt_launch on the project's own kernel: the same loop of calls, the same operands. */
static s4d_status own_launch(void *arg)
{
    const lt_args *x = arg;
    const lt_problem *p = &x->st->pb;
    const int64_t calls = lt_outer_count(p), d_step = p->batch * p->m * p->n;
    const int fused_norm = own_normalises(p);
    for (int64_t i = 0; i < calls; i++) {
        int64_t oa, ob;
        lt_outer_offsets(p, i, &oa, &ob);
        const float *a = (const float *)x->a + oa, *b = (const float *)x->b + ob;
        const float *bias = p->bias_epi ? (const float *)p->bias_ptr : NULL;
        const float *res = p->residual ? (const float *)x->c + i * d_step : NULL;
        float *d = (float *)x->d + i * d_step;
        cudaError_t e = fused_norm ? s4d_cuda_sgemm_ln(a, b, bias, res, (const float *)p->norm_scale,
                                                       (const float *)p->norm_shift, p->norm_eps, d, p->m, p->n,
                                                       p->k, p->batch, p->sa, p->sb, p->relu, x->s)
                                   : s4d_cuda_sgemm(a, b, bias, res, d, p->m, p->n, p->k, p->batch, p->sa, p->sb,
                                                    p->relu, x->s);
        if (e != cudaSuccess)
            return s4d_cuda_check(x->ctx, e, "the float32 product kernel");
    }
    return fused_norm ? S4D_OK : norm_launch(x);
}

/* Workspace a prepared product needs: its algorithm's, or the element-aligned fallback's if larger. */
static size_t lt_state_ws(const lt_state *st)
{
    if (!st || st->empty)
        return 0;
    return st->ws > st->safe_ws ? st->ws : st->safe_ws;
}

static int ptr_aligned(const void *p, unsigned a)
{
    return ((uintptr_t)p % a) == 0;
}

/* Runs st's product on stream s with workspace ws: a, b, c as lt_args, d the output. */
static s4d_status lt_exec_on(s4d_op_ctx *ctx, const lt_state *st, const void *a, const void *b, const void *c,
                             void *d, void *ws, size_t ws_size, cudaStream_t s)
{
    if (!st)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the product was not prepared");
    if (st->empty)
        return S4D_OK;
    const size_t need = lt_state_ws(st);
    if (ws_size < need)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "workspace of %zu bytes is below the %zu the product needs",
                            ws_size, need);
    lt_args x;
    memset(&x, 0, sizeof x);
    x.ctx = ctx;
    x.lt = s4d_cuda_ctx(ctx)->lt;
    x.s = s;
    x.st = st;
    x.a = a;
    x.b = b;
    x.c = c;
    x.d = d;
    x.ws = ws;
    x.ws_size = ws_size < LT_WS_CAP ? ws_size : LT_WS_CAP;
    if (st->own)
        return own_launch(&x); /* element loads: any alignment */
    int aligned = ptr_aligned(a, st->align[0]) && ptr_aligned(b, st->align[1]) && ptr_aligned(d, st->align[3]) &&
                  (st->pb.c_kind != LT_C_MATRIX || ptr_aligned(c, st->align[2]));
    if (aligned) {
        x.algo = &st->algo;
    } else {
        if (!st->have_safe)
            return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                                "an operand is bound at an address cuBLASLt has no algorithm for (align it to 16 bytes)");
        x.algo = &st->safe;
    }
    return lt_launch(&x);
}

/* Runs the layer's product with its pointers: a, b, c as lt_args, d the output. */
static s4d_status lt_exec(s4d_op_ctx *ctx, const void *a, const void *b, const void *c, void *d)
{
    return lt_exec_on(ctx, ctx->state, a, b, c, d, ctx->workspace, ctx->workspace_size, s4d_cuda_stream(ctx));
}

/* ---- choosing ---- */

typedef struct lt_key {
    int32_t tag, device, compute, dtype, ta, tb, c_kind, relu, bias_epi, norm, residual, outer_rank;
    int64_t m, n, k, batch, sa, sb, outer[LT_OUTER_MAX], oa[LT_OUTER_MAX], ob[LT_OUTER_MAX];
    uint32_t align[4];
} lt_key;

static void lt_key_make(lt_key *k, const lt_state *st)
{
    const lt_problem *p = &st->pb;
    memset(k, 0, sizeof *k);
    k->tag = (int32_t)LT_MAGIC;
    cudaGetDevice(&k->device);
    k->compute = (int32_t)st->compute;
    k->dtype = (int32_t)p->dtype;
    k->ta = p->ta;
    k->tb = p->tb;
    k->c_kind = p->c_kind;
    k->relu = p->relu;
    k->bias_epi = p->bias_epi;
    k->norm = p->norm;
    k->residual = p->residual;
    k->outer_rank = p->outer_rank;
    k->m = p->m;
    k->n = p->n;
    k->k = p->k;
    k->batch = p->batch;
    k->sa = p->sa;
    k->sb = p->sb;
    for (int i = 0; i < p->outer_rank; i++) {
        k->outer[i] = p->outer[i];
        k->oa[i] = p->oa[i];
        k->ob[i] = p->ob[i];
    }
    for (int i = 0; i < 4; i++)
        k->align[i] = st->align[i];
}

/* S4D_GEMM_LOG=1: one line per timed candidate on stderr (configuration attributes as
   lt_cfg_attrs lists them, workspace, mean ms; -1 when it failed to run). */
static void lt_log_candidate(const s4d_op_ctx *ctx, int i, const uint32_t *cfg, uint32_t mask, int raw, size_t ws,
                             double ms)
{
    (void)ctx;
    fprintf(stderr, "[gemm]   %d: id %u tile %u splitk %u red %u swz %u custom %u stages %u inner %u cluster %u "
                    "(mask %#x%s) ws %zu: %.4f ms\n",
            i, cfg[0], cfg[1], cfg[2], cfg[3], cfg[4], cfg[5], cfg[6], cfg[7], cfg[8], mask, raw ? ", raw" : "", ws,
            ms);
}

/*
 * A product too small to time. With a short K (at most SMALL_SHORT_K) it runs as one kernel:
 * the own float32 kernel where it fits, else the heuristic's first candidate that does not
 * split K. For the head's 3 x 3 rotations of 96 anchors cuBLASLt's first is split-K 16, a
 * product kernel and a reduction kernel: two launch latencies on the head's critical path
 * where one does. With a long K (the v3 head has 900 x 2 x 256 and 6 x 256 x 256) the
 * heuristic's choice stays, split-K included: with every small product on one kernel the v3
 * head's graph took 4.516 ms against 4.465 with the heuristic's choices (H100, 2026-12-06),
 * the own kernel's few blocks each walking all of K. S4D_GEMM_SMALL=heuristic takes the
 * heuristic's first for every small product (to compare).
 */
#define SMALL_SHORT_K 64
static void small_choice(const lt_problem *p, int nc, uint32_t (*cfg)[LT_NCFG], const int *raw, int own_ok,
                         int *best, int *own)
{
    const char *env = getenv("S4D_GEMM_SMALL");
    if ((env && strcmp(env, "heuristic") == 0) || p->k > SMALL_SHORT_K)
        return;
    if (own_ok) {
        *own = 1;
        return;
    }
    for (int i = 0; i < nc; i++)
        if (!raw[i] && cfg[i][LT_CFG_SPLITK] <= 1) {
            *best = i;
            return;
        }
}

/* Chooses st->algo among the heuristic's candidates, timing them on scratch buffers when they fit. */
static s4d_status lt_choose(s4d_op_ctx *ctx, lt_state *st)
{
    s4d_backend_ctx *bc = s4d_cuda_ctx(ctx);
    const lt_problem *p = &st->pb;
    cublasLtMatmulHeuristicResult_t res[LT_CANDIDATES];
    int n = lt_heuristics(bc->lt, st, st->align, LT_CANDIDATES, res);
    if (n == 0) {
        lt_min_alignments(st);
        n = lt_heuristics(bc->lt, st, st->align, LT_CANDIDATES, res);
    }
    /* A candidate is stored by its configuration when the algorithm rebuilt
       from it is the heuristic's, byte for byte; else by its own bytes (RAW).
       A rebuilt algorithm that differs may be another kernel than the one timed. */
    uint32_t cfg[LT_CANDIDATES][LT_NCFG], mask[LT_CANDIDATES];
    int raw[LT_CANDIDATES];
    cublasLtMatmulAlgo_t algo[LT_CANDIDATES];
    size_t ws[LT_CANDIDATES];
    int nc = 0;
    for (int i = 0; i < n; i++, nc++) {
        raw[nc] = !(lt_cfg_get(&res[i].algo, cfg[nc], &mask[nc]) &&
                    lt_cfg_build(bc->lt, st, cfg[nc], mask[nc], &algo[nc], &ws[nc]) &&
                    memcmp(&algo[nc], &res[i].algo, sizeof algo[nc]) == 0);
        if (raw[nc]) {
            algo[nc] = res[i].algo;
            ws[nc] = res[i].workspaceSize;
        }
    }
    memset(&st->ch, 0, sizeof st->ch);
    if (nc == 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "cuBLASLt has no algorithm for this product (%s, m %lld, n %lld, k %lld, batch %lld)",
                            s4d_dtype_name(p->dtype), (long long)p->m, (long long)p->n, (long long)p->k,
                            (long long)p->batch);
    int best = 0;
    const size_t d_bytes = (size_t)(p->batch * p->m * p->n) * lt_es(p->dtype);
    size_t need = d_bytes + LT_WS_CAP + (p->a_const ? 0 : p->a_bytes) + (p->b_const ? 0 : p->b_bytes) +
                  (p->c_kind == LT_C_MATRIX && !p->c_const ? p->c_bytes : 0);
    const int fits = own_fits(ctx, st);
    /* Products of fewer than 4096 outputs are not timed: timing costs build time and, for
       kernels this short, would choose by noise, differently from one build to the next.
       They run as one kernel instead (small_choice), except one that normalises, where the
       own kernel's epilogue is timed against the normalisation's launch. */
    const int worth_timing = p->batch * p->m * p->n >= 4096 || (own_normalises(p) && fits);
    const char *log_env = getenv("S4D_GEMM_LOG");
    const int gemm_log = log_env && log_env[0] && strcmp(log_env, "0") != 0;
    if (gemm_log)
        fprintf(stderr, "[gemm] '%s': %s m %lld n %lld k %lld batch %lld, %d candidate%s%s\n", ctx->node_name,
                s4d_dtype_name(p->dtype), (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch,
                nc, nc == 1 ? "" : "s", worth_timing ? "" : " (not timed: small)");
    /* S4D_GEMM_CHOICE=own|cublaslt: every fitting product on the own kernel, or none (tests). */
    const char *force = getenv("S4D_GEMM_CHOICE");
    const int own_ok = fits && !(force && strcmp(force, "cublaslt") == 0);
    const int force_own = own_ok && force && strcmp(force, "own") == 0;
    int own = force_own;
    if (!worth_timing)
        small_choice(p, nc, cfg, raw, own_ok, &best, &own);
    if ((nc > 1 || own_ok) && worth_timing && need <= LT_SCRATCH_CAP && need < s4d_dense_free_bytes() / 2) {
        s4d_dense_scratch sc;
        memset(&sc, 0, sizeof sc);
        lt_args x;
        memset(&x, 0, sizeof x);
        x.ctx = ctx;
        x.lt = bc->lt;
        x.s = bc->stream;
        x.st = st;
        x.skip_fill = 1;
        x.a = p->a_const ? p->a_const : s4d_dense_scratch_alloc(&sc, p->a_bytes, bc->stream);
        x.b = p->b_const ? p->b_const : s4d_dense_scratch_alloc(&sc, p->b_bytes, bc->stream);
        x.c = p->c_kind != LT_C_MATRIX ? NULL
                                      : p->c_const ? p->c_const : s4d_dense_scratch_alloc(&sc, p->c_bytes, bc->stream);
        x.d = s4d_dense_scratch_alloc(&sc, d_bytes, bc->stream);
        x.ws = s4d_dense_scratch_alloc(&sc, LT_WS_CAP, bc->stream);
        x.ws_size = LT_WS_CAP;
        /* Timing the whole outer loop would repeat one shape: one call of it suffices. */
        lt_state one = *st;
        one.pb.outer_rank = 0;
        x.st = &one;
        if (x.a && x.b && x.d && x.ws && (p->c_kind != LT_C_MATRIX || x.c)) {
            double best_ms = -1.0;
            for (int i = 0; i < nc; i++) {
                x.algo = &algo[i];
                double ms = -1.0;
                if (s4d_dense_time(bc->stream, lt_launch, &x, LT_TIME_REPS, &ms) != S4D_OK) {
                    cudaError_t se = s4d_dense_sticky_error(bc->stream);
                    if (se == cudaSuccess)
                        continue;
                    s4d_dense_scratch_free(&sc, bc->stream);
                    char what[160];
                    snprintf(what, sizeof what,
                             "timing cuBLASLt candidate %d of %d (m %lld, n %lld, k %lld, batch %lld)", i + 1,
                             nc, (long long)p->m, (long long)p->n, (long long)p->k, (long long)p->batch);
                    return s4d_cuda_check(ctx, se, what);
                }
                if (gemm_log)
                    lt_log_candidate(ctx, i, cfg[i], mask[i], raw[i], ws[i], ms);
                if (best_ms < 0.0 || ms < best_ms) {
                    best_ms = ms;
                    best = i;
                }
            }
            double own_ms = -1.0;
            if (own_ok && s4d_dense_time(bc->stream, own_launch, &x, LT_TIME_REPS, &own_ms) != S4D_OK) {
                cudaError_t se = s4d_dense_sticky_error(bc->stream);
                if (se != cudaSuccess) {
                    s4d_dense_scratch_free(&sc, bc->stream);
                    return s4d_cuda_check(ctx, se, "timing the float32 product kernel");
                }
                own_ms = -1.0; /* it failed alone: cuBLASLt's choice stands */
            }
            if (gemm_log && own_ok)
                fprintf(stderr, "[gemm]   own float32 kernel: %.4f ms\n", own_ms);
            own = force_own || (own_ok && own_ms >= 0.0 && (best_ms < 0.0 || own_ms < best_ms));
            if (ctx->err_size)
                ctx->err[0] = 0; /* a candidate that failed to run is skipped, not the layer's error */
        }
        s4d_dense_scratch_free(&sc, bc->stream);
    }
    if (gemm_log)
        fprintf(stderr, own ? "[gemm]   chose the own float32 kernel\n" : "[gemm]   chose candidate %d\n", best);
    if (raw[best]) {
        st->ch.flags = LT_FLAG_RAW;
        memcpy(st->ch.words, &algo[best], sizeof algo[best]);
    } else {
        memcpy(st->ch.words, cfg[best], sizeof cfg[best]);
        st->ch.mask = mask[best];
    }
    st->algo = algo[best];
    st->ws = ws[best];
    st->own = own;
    if (own)
        st->ch.flags |= LT_FLAG_OWN;
    return S4D_OK;
}

/* The element-aligned fallback for caller-bound pointers off the 16-byte grid. */
static void lt_choose_safe(s4d_op_ctx *ctx, lt_state *st)
{
    const unsigned es = (unsigned)lt_es(st->dtype);
    const unsigned al[4] = {es, es, es, es};
    if (st->align[0] <= es && st->align[1] <= es && st->align[2] <= es && st->align[3] <= es) {
        st->safe = st->algo;
        st->safe_ws = st->ws;
        st->have_safe = 1;
        return;
    }
    cublasLtMatmulHeuristicResult_t res[1];
    if (lt_heuristics(s4d_cuda_ctx(ctx)->lt, st, al, 1, res) == 1) {
        st->safe = res[0].algo;
        st->safe_ws = res[0].workspaceSize;
        st->have_safe = 1;
    }
}

/* Makes st->algo from a stored choice and checks it against the descriptors; 1 when it runs. */
static int lt_choice_apply(cublasLtHandle_t lt, lt_state *st, const lt_choice *ch)
{
    if (!(ch->flags & LT_FLAG_RAW))
        return lt_cfg_build(lt, st, ch->words, ch->mask, &st->algo, &st->ws);
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    memcpy(&st->algo, ch->words, sizeof st->algo);
    if (cublasLtMatmulAlgoCheck(lt, st->op, st->la, st->lb, st->lc, st->ld, &st->algo, &r) != CUBLAS_STATUS_SUCCESS ||
        r.workspaceSize > LT_WS_CAP)
        return 0;
    st->ws = r.workspaceSize;
    return 1;
}

static s4d_status lt_parse_payload(s4d_op_ctx *ctx, const void *payload, size_t size, lt_choice *ch)
{
    s4d_rbuf r = {payload, size, 0, 0, NULL};
    uint32_t magic = 0, version = 0, count = 0;
    memset(ch, 0, sizeof *ch);
    s4d_rbuf_u32(&r, &magic, "magic");
    s4d_rbuf_u32(&r, &version, "version");
    s4d_rbuf_u32(&r, &ch->flags, "flags");
    s4d_rbuf_u32(&r, &ch->mask, "mask");
    s4d_rbuf_u32(&r, &count, "count");
    for (int i = 0; i < LT_WORDS && count == (uint32_t)LT_WORDS; i++)
        s4d_rbuf_u32(&r, &ch->words[i], "algorithm word");
    const char *why = NULL;
    if (magic != LT_MAGIC || version != S4D_DENSE_PAYLOAD_VERSION)
        why = "it is not a cuBLASLt choice of this version";
    else if (count != (uint32_t)LT_WORDS || r.failed || r.pos != size)
        why = "it is not the size of a cuBLASLt choice";
    else if (ch->flags & ~(LT_FLAG_MIN_ALIGNED | LT_FLAG_UNROLLED | LT_FLAG_RAW | LT_FLAG_OWN))
        why = "its flags are unknown";
    if (why)
        return s4d_op_error(ctx, S4D_ERR_PARSE, "the stored cuBLASLt algorithm is invalid: %s (rebuild the engine)",
                            why);
    return S4D_OK;
}

static s4d_status lt_save(const void *state, s4d_wbuf *w)
{
    const lt_state *st = state;
    if (st->empty)
        return S4D_OK;
    uint32_t flags = (st->ch.flags & LT_FLAG_RAW) | (st->min_aligned ? LT_FLAG_MIN_ALIGNED : 0u) |
                     (st->unrolled ? LT_FLAG_UNROLLED : 0u) | (st->own ? LT_FLAG_OWN : 0u);
    s4d_wbuf_u32(w, LT_MAGIC);
    s4d_wbuf_u32(w, S4D_DENSE_PAYLOAD_VERSION);
    s4d_wbuf_u32(w, flags);
    s4d_wbuf_u32(w, st->ch.mask);
    s4d_wbuf_u32(w, (uint32_t)LT_WORDS);
    for (int i = 0; i < LT_WORDS; i++)
        s4d_wbuf_u32(w, st->ch.words[i]);
    return S4D_OK;
}

static size_t lt_ws(const s4d_op_ctx *ctx)
{
    return lt_state_ws(ctx->state);
}

/* Moves the strided batch into the loop of calls (for when cuBLASLt takes no strided batch of this form). */
static int lt_unroll(lt_state *st)
{
    lt_problem *p = &st->pb;
    if (p->batch <= 1 || p->outer_rank >= LT_OUTER_MAX)
        return 0;
    p->outer[p->outer_rank] = p->batch;
    p->oa[p->outer_rank] = p->sa;
    p->ob[p->outer_rank] = p->sb;
    p->outer_rank++;
    p->batch = 1;
    p->sa = p->sb = 0;
    st->unrolled = 1;
    return 1;
}

static void lt_free_descs(lt_state *st)
{
    if (st->op)
        cublasLtMatmulDescDestroy(st->op);
    if (st->la)
        cublasLtMatrixLayoutDestroy(st->la);
    if (st->lb)
        cublasLtMatrixLayoutDestroy(st->lb);
    if (st->lc)
        cublasLtMatrixLayoutDestroy(st->lc);
    if (st->ld)
        cublasLtMatrixLayoutDestroy(st->ld);
    st->op = NULL;
    st->la = st->lb = st->lc = st->ld = NULL;
}

/* The build's choice for st's problem: from the process cache, else by lt_choose. */
static s4d_status lt_choose_cached(s4d_op_ctx *ctx, lt_state *st)
{
    lt_key key;
    lt_choice ch;
    lt_key_make(&key, st);
    if (s4d_dense_cache_get(&key, sizeof key, &ch, sizeof ch)) {
        if (ch.flags & LT_FLAG_MIN_ALIGNED)
            lt_min_alignments(st);
        if ((!(ch.flags & LT_FLAG_OWN) || own_fits(ctx, st)) && lt_choice_apply(s4d_cuda_ctx(ctx)->lt, st, &ch)) {
            st->ch = ch;
            st->own = (ch.flags & LT_FLAG_OWN) != 0;
            return S4D_OK;
        }
        st->min_aligned = 0;
        lt_alignments(st);
    }
    s4d_status s = lt_choose(ctx, st);
    if (s == S4D_OK) {
        ch = st->ch;
        ch.flags |= st->min_aligned ? LT_FLAG_MIN_ALIGNED : 0u;
        s4d_dense_cache_put(&key, sizeof key, &ch, sizeof ch);
    }
    return s;
}

/* One line for --dumpLayerInfo: the product's shape and the kernel that runs it. */
static int lt_describe(const void *state, char *buf, size_t size)
{
    const lt_state *st = state;
    if (!st || st->empty)
        return 0;
    const lt_problem *p = &st->pb;
    int n = snprintf(buf, size, "m %lld n %lld k %lld batch %lld%s: ", (long long)p->m, (long long)p->n,
                     (long long)p->k, (long long)p->batch, st->unrolled ? " (a loop of products)" : "");
    if (n < 0 || (size_t)n >= size)
        return n;
    const char *norm = !p->norm ? (p->residual ? ", residual epilogue" : "")
                       : st->own && own_normalises(p) ? (p->residual ? ", residual and LayerNorm epilogue" : ", LayerNorm epilogue")
                       : p->residual                  ? ", residual epilogue, then the LayerNorm kernel"
                                                      : ", then the LayerNorm kernel";
    if (st->own)
        return n + snprintf(buf + n, size - (size_t)n, "own float32 kernel%s", norm);
    uint32_t cfg[LT_NCFG], mask = 0;
    const char *compute = st->compute == CUBLAS_COMPUTE_32F_FAST_TF32 ? "TF32"
                          : st->compute == CUBLAS_COMPUTE_64F         ? "float64"
                          : st->dtype == S4D_DTYPE_FLOAT16            ? "float16 in, float32 accumulation"
                                                                      : "float32";
    if (!lt_cfg_get(&st->algo, cfg, &mask))
        return n + snprintf(buf + n, size - (size_t)n, "cuBLASLt, %s, workspace %zu KiB%s", compute, st->ws >> 10,
                            norm);
    return n + snprintf(buf + n, size - (size_t)n,
                        "cuBLASLt algo %u tile %u stages %u split-k %u, %s%s%s, workspace %zu KiB%s",
                        cfg[LT_CFG_ALGO], cfg[LT_CFG_TILE], cfg[LT_CFG_STAGES], cfg[LT_CFG_SPLITK], compute,
                        p->relu ? ", ReLU epilogue" : "", p->bias_epi ? ", bias epilogue" : "", st->ws >> 10, norm);
}

/* Descriptors, then the algorithm: from the payload, the cache, or timing. */
static s4d_status lt_prepare(s4d_op_ctx *ctx, const lt_problem *p, int empty, const void *payload, size_t size,
                             void **state)
{
    *state = NULL;
    lt_state *st = calloc(1, sizeof *st);
    if (!st)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    st->pb = *p;
    st->dtype = p->dtype;
    if (empty) {
        st->empty = 1;
        *state = st;
        return S4D_OK;
    }
    s4d_status s = S4D_OK;
    if (payload && size) {
        lt_choice pl;
        s = lt_parse_payload(ctx, payload, size, &pl);
        if (s == S4D_OK && (pl.flags & LT_FLAG_UNROLLED) && !lt_unroll(st))
            s = s4d_op_error(ctx, S4D_ERR_PARSE, "the stored cuBLASLt choice unrolls a batch this product lacks");
        if (s == S4D_OK)
            s = lt_make_descs(ctx, st);
        if (s == S4D_OK) {
            if (pl.flags & LT_FLAG_MIN_ALIGNED)
                lt_min_alignments(st);
            else
                lt_alignments(st);
            if (!lt_choice_apply(s4d_cuda_ctx(ctx)->lt, st, &pl))
                s = s4d_op_error(ctx, S4D_ERR_PARSE,
                                 "the stored cuBLASLt algorithm does not run on this product (rebuild the engine)");
        }
        if (s == S4D_OK && (pl.flags & LT_FLAG_OWN) && !own_fits(ctx, st))
            s = s4d_op_error(ctx, S4D_ERR_PARSE,
                             "the stored choice of the own float32 kernel does not fit this product (rebuild the "
                             "engine)");
        if (s == S4D_OK) {
            st->ch = pl;
            st->own = (pl.flags & LT_FLAG_OWN) != 0;
        }
    } else {
        s = lt_make_descs(ctx, st);
        if (s == S4D_OK) {
            lt_alignments(st);
            s = lt_choose_cached(ctx, st);
        }
        /* Some batch forms (a shared operand's zero stride) may have no strided algorithm: loop instead. */
        if (s == S4D_ERR_UNSUPPORTED && lt_unroll(st)) {
            lt_free_descs(st);
            st->min_aligned = 0;
            if (ctx->err_size)
                ctx->err[0] = 0;
            s = lt_make_descs(ctx, st);
            if (s == S4D_OK) {
                lt_alignments(st);
                s = lt_choose_cached(ctx, st);
            }
        }
    }
    if (s == S4D_OK)
        lt_choose_safe(ctx, st);
    if (s != S4D_OK) {
        lt_state_free(st);
        return s;
    }
    *state = st;
    return S4D_OK;
}

/* Limits of cuBLASLt's descriptors, checked in supports(). */
static s4d_status lt_check_sizes(s4d_op_ctx *ctx, s4d_dtype dt, int64_t m, int64_t n, int64_t k, int64_t batch)
{
    if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT64 && dt != S4D_DTYPE_FLOAT16)
        return s4d_op_error(ctx, S4D_ERR_DTYPE, "dtype %s: the CUDA product runs float32, float64 and float16",
                            s4d_dtype_name(dt));
    if (k == 0 && m > 0 && n > 0)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "an inner dimension of 0 (an all-zero product) is not supported");
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || batch > INT_MAX)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a matrix or batch dimension beyond 2^31-1");
    return S4D_OK;
}

/* ---- MatMul / FusedMatMul ---- */

/* The product of a MatMul's params; fused: FusedMatMul's bias and ReLU. */
static void mm_problem(const s4d_op_ctx *ctx, const s4d_matmul_params *q, int fused, lt_problem *p, int *empty)
{
    memset(p, 0, sizeof *p);
    p->dtype = q->dtype;
    p->m = q->m;
    p->n = q->n;
    p->k = q->k;
    p->batch = 1; /* one matrix unless lt_shape_batches finds a strided batch */
    p->alpha = 1.0;
    *empty = q->nbatch == 0 || q->m == 0 || q->n == 0;
    int b_shared = 1, a_dense = 1;
    for (int d = 0; d < q->batch_rank; d++) {
        if (q->b_stride[d] != 0 && q->batch[d] != 1)
            b_shared = 0;
        if (q->a_stride[d] == 0 && q->batch[d] != 1)
            a_dense = 0;
    }
    if (b_shared && a_dense && q->nbatch * q->m <= INT_MAX) {
        p->m = q->nbatch * q->m; /* one tall product: the rows of every batch share B */
    } else {
        int64_t sa[S4D_MAX_RANK], sb[S4D_MAX_RANK];
        for (int d = 0; d < q->batch_rank; d++) {
            sa[d] = q->a_stride[d] * q->m * q->k;
            sb[d] = q->b_stride[d] * q->k * q->n;
        }
        lt_shape_batches(p, q->batch_rank, q->batch, sa, sb);
    }
    const s4d_tensor *a = &ctx->inputs[0], *b = &ctx->inputs[1];
    const size_t es = lt_es(q->dtype);
    p->a_const = a->data;
    p->b_const = b->data;
    p->a_bytes = es * (size_t)s4d_tensor_numel(a);
    p->b_bytes = es * (size_t)s4d_tensor_numel(b);
    if (!fused)
        return;
    p->relu = q->relu;
    if (q->norm) {
        p->norm = 1;
        p->norm_eps = q->epsilon;
        p->norm_scale = ctx->inputs[3].data;
        p->norm_shift = q->norm_bias ? ctx->inputs[4].data : NULL;
    }
    if (q->residual) {
        /* mm_supports_common refused a non-constant bias and the activation beside a residual. */
        p->c_kind = LT_C_MATRIX;
        p->residual = 1;
        p->beta = 1.0;
        p->c_const = ctx->inputs[5].data;
        p->c_bytes = es * (size_t)s4d_tensor_numel(&ctx->outputs[0]);
    }
    if (q->has_bias) {
        const void *bias = ctx->inputs[2].data;
        /* cuBLASLt's bias is of D's type: float32, or float16 for float16 products. */
        if (bias && (q->dtype == S4D_DTYPE_FLOAT32 || q->dtype == S4D_DTYPE_FLOAT16)) {
            p->bias_epi = 1;
            p->bias_ptr = bias;
        } else {
            p->c_kind = LT_C_FILL;
            p->beta = 1.0;
            p->fill_rows = q->nbatch * q->m;
            p->fill_cols = q->n;
            p->fill_rs = 0;
            p->fill_cs = 1;
        }
    }
}

static s4d_status mm_supports_common(s4d_op_ctx *ctx)
{
    const s4d_matmul_params *q = ctx->params;
    if (!q)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters");
    if (q->residual && q->relu)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "an activation with a residual: CUDA adds the residual before the epilogue's ReLU");
    if (q->residual && q->has_bias && !ctx->inputs[2].data)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "a residual with a bias that is not a constant");
    return lt_check_sizes(ctx, q->dtype, q->m, q->n, q->k, q->nbatch);
}

static s4d_status mm_prepare_common(s4d_op_ctx *ctx, int fused, const void *payload, size_t size, void **state)
{
    *state = NULL;
    s4d_status s = mm_supports_common(ctx);
    if (s != S4D_OK)
        return s;
    lt_problem p;
    int empty;
    mm_problem(ctx, ctx->params, fused, &p, &empty);
    return lt_prepare(ctx, &p, empty, payload, size, state);
}

static s4d_status mm_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    return mm_prepare_common(ctx, 0, payload, size, state);
}

static s4d_status fmm_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    const s4d_matmul_params *q = ctx->params;
    if (q && q->norm && (!ctx->inputs[3].data || (q->norm_bias && !ctx->inputs[4].data))) {
        *state = NULL;
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED, "the normalisation's Scale and B must be constants");
    }
    return mm_prepare_common(ctx, 1, payload, size, state);
}

static s4d_status mm_run(s4d_op_ctx *ctx)
{
    const lt_state *st = ctx->state;
    const void *c = !st                          ? NULL
                    : st->pb.c_kind == LT_C_FILL ? ctx->inputs[2].data
                    : st->pb.residual            ? ctx->inputs[5].data
                                                 : NULL;
    return lt_exec(ctx, ctx->inputs[0].data, ctx->inputs[1].data, c, ctx->outputs[0].data);
}

/* ---- Gemm ---- */

static s4d_status gemm_supports(s4d_op_ctx *ctx)
{
    const s4d_gemm_params *q = ctx->params;
    if (!q)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters");
    return lt_check_sizes(ctx, q->dtype, q->m, q->n, q->k, 1);
}

static s4d_status gemm_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    *state = NULL;
    s4d_status s = gemm_supports(ctx);
    if (s != S4D_OK)
        return s;
    const s4d_gemm_params *q = ctx->params;
    lt_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = q->dtype;
    p.m = q->m;
    p.n = q->n;
    p.k = q->k;
    p.ta = q->ta;
    p.tb = q->tb;
    p.batch = 1;
    p.alpha = q->alpha;
    p.beta = q->beta;
    const size_t es = lt_es(q->dtype);
    p.a_const = ctx->inputs[0].data;
    p.b_const = ctx->inputs[1].data;
    p.a_bytes = es * (size_t)s4d_tensor_numel(&ctx->inputs[0]);
    p.b_bytes = es * (size_t)s4d_tensor_numel(&ctx->inputs[1]);
    if (q->has_c && q->beta != 0.0f) {
        const void *c = ctx->inputs[2].data;
        if (q->c_rs == q->n && q->c_cs == 1 && q->m > 1) {
            p.c_kind = LT_C_MATRIX; /* a full [m, n] C: cuBLASLt reads it with beta */
            p.c_const = c;
            p.c_bytes = es * (size_t)(q->m * q->n);
        } else if (q->c_rs == 0 && q->c_cs == 1 && q->beta == 1.0f && c &&
                   (q->dtype == S4D_DTYPE_FLOAT32 || q->dtype == S4D_DTYPE_FLOAT16)) {
            p.bias_epi = 1; /* Linear layers exported as Gemm: C is the bias */
            p.bias_ptr = c;
        } else {
            p.c_kind = LT_C_FILL;
            p.fill_rows = q->m;
            p.fill_cols = q->n;
            p.fill_rs = q->c_rs;
            p.fill_cs = q->c_cs;
        }
    }
    return lt_prepare(ctx, &p, q->m == 0 || q->n == 0, payload, size, state);
}

static s4d_status gemm_run(s4d_op_ctx *ctx)
{
    const lt_state *st = ctx->state;
    const void *c = st && st->pb.c_kind != LT_C_NONE ? ctx->inputs[2].data : NULL;
    return lt_exec(ctx, ctx->inputs[0].data, ctx->inputs[1].data, c, ctx->outputs[0].data);
}

/* ---- Einsum ---- */

static s4d_status es_supports(s4d_op_ctx *ctx)
{
    const s4d_einsum_params *q = ctx->params;
    if (!q)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the node has no typed parameters");
    if (q->nops != 2)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "equation: only two-operand products run on CUDA (a one-operand Einsum is a reduction)");
    if (q->a_copy || q->b_copy || q->c_copy)
        return s4d_op_error(ctx, S4D_ERR_UNSUPPORTED,
                            "equation: the operands or the result are not in [batch, rows, inner] order (possibly "
                            "transposed), so this Einsum is no single batched product");
    return lt_check_sizes(ctx, q->f64 ? S4D_DTYPE_FLOAT64 : S4D_DTYPE_FLOAT32, q->M, q->N, q->K, q->B);
}

static s4d_status es_prepare(s4d_op_ctx *ctx, const void *payload, size_t size, void **state)
{
    *state = NULL;
    s4d_status s = es_supports(ctx);
    if (s != S4D_OK)
        return s;
    const s4d_einsum_params *q = ctx->params;
    lt_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = q->f64 ? S4D_DTYPE_FLOAT64 : S4D_DTYPE_FLOAT32;
    p.m = q->M;
    p.n = q->N;
    p.k = q->K;
    p.ta = q->ta;
    p.tb = q->tb;
    p.alpha = 1.0;
    const int64_t dims[1] = {q->B}, sa[1] = {q->M * q->K}, sb[1] = {q->K * q->N};
    lt_shape_batches(&p, 1, dims, sa, sb);
    const size_t es = q->f64 ? 8 : 4;
    p.a_const = ctx->inputs[0].data;
    p.b_const = ctx->inputs[1].data;
    p.a_bytes = es * (size_t)s4d_tensor_numel(&ctx->inputs[0]);
    p.b_bytes = es * (size_t)s4d_tensor_numel(&ctx->inputs[1]);
    return lt_prepare(ctx, &p, q->B == 0 || q->M == 0 || q->N == 0, payload, size, state);
}

static s4d_status es_run(s4d_op_ctx *ctx)
{
    return lt_exec(ctx, ctx->inputs[0].data, ctx->inputs[1].data, NULL, ctx->outputs[0].data);
}

const s4d_kernel s4d_cuda_k_matmul = {
    .domain = "", .op_type = "MatMul", .since_version = 1, .supports = mm_supports_common,
    .workspace_size = lt_ws, .prepare = mm_prepare, .save = lt_save, .destroy = lt_destroy, .describe = lt_describe, .run = mm_run,
};

const s4d_kernel s4d_cuda_k_fused_matmul = {
    .domain = "s4d", .op_type = "FusedMatMul", .since_version = 1, .supports = mm_supports_common,
    .workspace_size = lt_ws, .prepare = fmm_prepare, .save = lt_save, .destroy = lt_destroy, .describe = lt_describe, .run = mm_run,
};

const s4d_kernel s4d_cuda_k_gemm = {
    .domain = "", .op_type = "Gemm", .since_version = 7, .supports = gemm_supports, .workspace_size = lt_ws,
    .prepare = gemm_prepare, .save = lt_save, .destroy = lt_destroy, .describe = lt_describe, .run = gemm_run,
};

const s4d_kernel s4d_cuda_k_einsum = {
    .domain = "", .op_type = "Einsum", .since_version = 12, .supports = es_supports, .workspace_size = lt_ws,
    .prepare = es_prepare, .save = lt_save, .destroy = lt_destroy, .describe = lt_describe, .run = es_run,
};

/* ---- 1x1 convolutions (dense_conv.c) ---- */

struct s4d_conv_gemm {
    lt_state *st;
};

s4d_status s4d_conv_gemm_prepare_batch(s4d_op_ctx *ctx, int64_t batch, int64_t m, int64_t n, int64_t k, int64_t sa,
                                       int64_t sb, int addend, int relu, const void *a_const, const void *payload,
                                       size_t size, s4d_conv_gemm **out)
{
    *out = NULL;
    s4d_status s = lt_check_sizes(ctx, S4D_DTYPE_FLOAT32, m, n, k, batch);
    if (s != S4D_OK)
        return s;
    lt_problem p;
    memset(&p, 0, sizeof p);
    p.dtype = S4D_DTYPE_FLOAT32;
    p.m = m;
    p.n = n;
    p.k = k;
    p.alpha = 1.0;
    p.relu = relu;
    p.c_kind = addend ? LT_C_PRE : LT_C_NONE;
    const int64_t dims[1] = {batch}, sav[1] = {sa}, sbv[1] = {sb};
    lt_shape_batches(&p, 1, dims, sav, sbv);
    p.a_const = a_const;
    p.a_bytes = sizeof(float) * (size_t)((sa ? batch : 1) * m * k);
    p.b_bytes = sizeof(float) * (size_t)(batch * k * n);
    s4d_conv_gemm *g = calloc(1, sizeof *g);
    if (!g)
        return s4d_op_error(ctx, S4D_ERR_NO_MEMORY, "out of memory");
    void *state = NULL;
    s = lt_prepare(ctx, &p, batch == 0 || m == 0 || n == 0, payload, size, &state);
    if (s != S4D_OK) {
        free(g);
        return s;
    }
    g->st = state;
    *out = g;
    return S4D_OK;
}

s4d_status s4d_conv_gemm_prepare(s4d_op_ctx *ctx, int64_t n, int64_t c, int64_t m, int64_t plane, int addend,
                                 int relu, const void *w_const, const void *payload, size_t size,
                                 s4d_conv_gemm **out)
{
    /* W [m, c] shared by the images (stride 0), X[i] [c, plane] one after another. */
    return s4d_conv_gemm_prepare_batch(ctx, n, m, plane, c, 0, c * plane, addend, relu, w_const, payload, size,
                                       out);
}

s4d_status s4d_conv_gemm_run(s4d_op_ctx *ctx, const s4d_conv_gemm *g, const void *x, const void *w, void *y,
                             void *ws, size_t ws_size, cudaStream_t s)
{
    if (!g)
        return s4d_op_error(ctx, S4D_ERR_INTERNAL, "the convolution's product was not prepared");
    return lt_exec_on(ctx, g->st, w, x, NULL, y, ws, ws_size, s);
}

size_t s4d_conv_gemm_workspace(const s4d_conv_gemm *g)
{
    return g ? lt_state_ws(g->st) : 0;
}

s4d_status s4d_conv_gemm_save(const s4d_conv_gemm *g, s4d_wbuf *w)
{
    return lt_save(g->st, w);
}

int s4d_conv_gemm_describe(const s4d_conv_gemm *g, char *buf, size_t size)
{
    return g ? lt_describe(g->st, buf, size) : 0;
}

void s4d_conv_gemm_free(s4d_conv_gemm *g)
{
    if (!g)
        return;
    lt_state_free(g->st);
    free(g);
}
