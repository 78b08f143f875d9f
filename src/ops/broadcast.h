/*
 * Helpers shared by the CPU op kernels: ONNX multidirectional broadcasting,
 * half-precision conversion, reading constant shape-like inputs, and generic
 * element access for the slow mixed-dtype paths.
 */
#ifndef S4D_HOST_OPS_BROADCAST_H
#define S4D_HOST_OPS_BROADCAST_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/op.h"

/* ---- inputs, axes and shapes -------------------------------------------- */

/* True when input i exists (optional inputs may be absent or empty-named). */
static inline int s4d_in_present(const s4d_op_ctx *ctx, int i)
{
    return i < ctx->num_inputs && ctx->inputs[i].dtype != S4D_DTYPE_UNDEFINED && ctx->inputs[i].rank >= 0;
}

/* Fails with S4D_ERR_SHAPE unless num_inputs is in [lo, hi] and outputs == nout. */
s4d_status s4d_check_arity(s4d_op_ctx *ctx, int lo, int hi, int nout);

/* Maps axis in [-rank, rank) to [0, rank); S4D_ERR_SHAPE with a message otherwise. */
s4d_status s4d_norm_axis(s4d_op_ctx *ctx, int64_t axis, int rank, const char *what, int *out);

/*
 * Reads a constant int64/int32 input as int64 values. S4D_ERR_UNSUPPORTED when
 * the input is not constant (its data is NULL at build time), S4D_ERR_DTYPE
 * for other element types, S4D_ERR_SHAPE when it holds more than max values or
 * is not rank 0/1.
 */
s4d_status s4d_const_ints(s4d_op_ctx *ctx, int idx, const char *what, int64_t *vals, int64_t max,
                          int64_t *count);

/* Sets output i to (dtype, rank, dims). */
static inline void s4d_set_out(s4d_op_ctx *ctx, int i, s4d_dtype dt, int rank, const int64_t *dims)
{
    s4d_tensor *o = &ctx->outputs[i];
    o->dtype = dt;
    o->rank = rank;
    for (int d = 0; d < rank; d++)
        o->dims[d] = dims[d];
}

/* Multidirectional (numpy) broadcast of n tensors' shapes into (*rank, dims). */
s4d_status s4d_bcast_shape(s4d_op_ctx *ctx, const s4d_tensor *const *ins, int n, int *rank, int64_t *dims);

/* ---- broadcast iteration ------------------------------------------------ */

#define S4D_BCAST_MAX_IN 3

/*
 * An output shape with the element strides of up to three inputs (0 where an
 * input is broadcast), collapsed to the fewest dims. Work is done by rows:
 * every dim but the last is the row index, the last is a contiguous run in
 * the output of length `inner`.
 */
typedef struct s4d_bcast {
    int rank;
    int n;
    int64_t dims[S4D_MAX_RANK];
    int64_t st[S4D_BCAST_MAX_IN][S4D_MAX_RANK];
    int64_t rows;
    int64_t inner;
} s4d_bcast;

/* ins[k] are right-aligned against out (as ONNX broadcasting requires). */
void s4d_bcast_init(s4d_bcast *b, const s4d_tensor *out, const s4d_tensor *const *ins, int n);

/* Element offsets of each input at the start of row `row`; idx receives the row's coordinates. */
static inline void s4d_bcast_seek(const s4d_bcast *b, int64_t row, int64_t *idx, int64_t *offs)
{
    for (int k = 0; k < b->n; k++)
        offs[k] = 0;
    for (int d = b->rank - 2; d >= 0; d--) {
        idx[d] = row % b->dims[d];
        row /= b->dims[d];
        for (int k = 0; k < b->n; k++)
            offs[k] += idx[d] * b->st[k][d];
    }
}

/* Advances (idx, offs) to the next row. */
static inline void s4d_bcast_next(const s4d_bcast *b, int64_t *idx, int64_t *offs)
{
    for (int d = b->rank - 2; d >= 0; d--) {
        idx[d]++;
        for (int k = 0; k < b->n; k++)
            offs[k] += b->st[k][d];
        if (idx[d] < b->dims[d])
            return;
        for (int k = 0; k < b->n; k++)
            offs[k] -= idx[d] * b->st[k][d];
        idx[d] = 0;
    }
}

/* out = in broadcast to out's shape (in right-aligned), any element type. */
void s4d_bcast_copy(struct s4d_threadpool *pool, s4d_tensor *out, const s4d_tensor *in);

/* ---- element types ------------------------------------------------------ */

/* IEEE half <-> float, round to nearest even; NaN and infinity preserved. */
static inline float s4d_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        bits = sign;
    } else {
        /* Subnormal half: exactly representable as a normal float. */
        float f = (float)man * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t s4d_float_to_half(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (keep NaN quiet) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        float af;
        memcpy(&af, &ax, 4);
        /* 2^24 scales the smallest subnormal to 1; rint rounds to even. */
        return (uint16_t)(sign | (uint16_t)rintf(af * 16777216.0f));
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
    uint32_t m = r >> 13, rest = r & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (m & 1u)))
        m++;
    return (uint16_t)(sign | m);
}

static inline float s4d_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t s4d_float_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

/* True for the integer element types (bool excluded). */
int s4d_dtype_is_int(s4d_dtype dt);
/* True for float32, float64, float16, bfloat16. */
int s4d_dtype_is_float(s4d_dtype dt);

/* Element i of p (of type dt) as a double / stored from a double (slow paths only). */
double s4d_load_f64(s4d_dtype dt, const void *p, int64_t i);
void s4d_store_f64(s4d_dtype dt, void *p, int64_t i, double v);
/* Integer element types (and bool) read as int64; 0 for other types. */
int64_t s4d_load_i64(s4d_dtype dt, const void *p, int64_t i);

#endif /* S4D_HOST_OPS_BROADCAST_H */
