/*
 * The CPU backend's op tables. Each table is a list of definitions; the
 * lookup (cpu_ops.c) scans them all. Two tables let the element-wise /
 * data-movement ops and the dense ops grow independently.
 */
#ifndef S4D_BACKEND_CPU_OPS_H
#define S4D_BACKEND_CPU_OPS_H

#include <stddef.h>

#include "core/op.h"

/* Element-wise, data movement, reductions, softmax (ops_table_a.c). */
extern const s4d_op_def *const s4d_cpu_ops_a[];
extern const size_t s4d_cpu_ops_a_count;
/* Matrix products, convolution, pooling, normalisation, resampling (ops_table_b.c). */
extern const s4d_op_def *const s4d_cpu_ops_b[];
extern const size_t s4d_cpu_ops_b_count;

#endif
