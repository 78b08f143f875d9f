/* A small harness for calling op definitions directly, as the engine would. */
#ifndef S4D_TEST_CPU_OPS_HARNESS_H
#define S4D_TEST_CPU_OPS_HARNESS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "util/threadpool.h"

extern int g_failures;
extern s4d_threadpool *g_pool;

#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (!(cond)) {                                            \
            fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                         \
            fprintf(stderr, "\n");                                \
            g_failures++;                                         \
        }                                                         \
    } while (0)

/* Deterministic random numbers (xorshift). */
double rnd_uniform(double lo, double hi);
/* Non-zero uniform in [lo, hi] away from 0 by at least 0.05. */
float rnd_nonzero(float lo, float hi);

s4d_tensor tensor_new(s4d_dtype dt, int rank, const int64_t *dims);
void tensor_free(s4d_tensor *t);
void fill_random(s4d_tensor *t, double lo, double hi); /* float/int per dtype, never 0 for floats */

/* Attribute builders (string data is static/owned by caller). */
s4d_attr attr_int(const char *name, int64_t v);
s4d_attr attr_float(const char *name, float v);
s4d_attr attr_ints(const char *name, int64_t *v, size_t n);
s4d_attr attr_string(const char *name, const char *s);

/*
 * Finds op_type at opset, runs infer (inputs whose bit is set in const_mask keep
 * their data; the others are hidden), allocates outputs, runs. On failure
 * returns the status and leaves the message in err (512 bytes). Outputs must
 * be freed with tensor_free.
 */
s4d_status run_op(const char *op_type, int opset, int nin, const s4d_tensor *ins, unsigned const_mask,
                  int nout, s4d_tensor *outs, int nattr, const s4d_attr *attrs, s4d_threadpool *pool,
                  char *err);

/* Compares float32 output with a double reference: |got-ref| <= atol + rtol*|ref|. */
int close_f32(const float *got, const double *ref, int64_t n, double rtol, double atol, const char *what);

/* Index into `in` (right-aligned, broadcast) of output element o. */
int64_t bcast_index(const s4d_tensor *out, const s4d_tensor *in, int64_t o);

/* Group entry points. */
void group_threadpool(void);
void group_binary(void);
void group_variadic(void);
void group_unary(void);
void group_reshape(void);
void group_transpose(void);
void group_softmax(void);
void group_reduce(void);
void group_concat_split(void);
void group_slice(void);
void group_gather(void);
void group_scatter(void);
void group_expand_tile(void);
void group_shape_ops(void);
void group_where_cast(void);
void group_errors(void);
void group_extra(void);

#endif
