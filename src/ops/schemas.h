/*
 * The schema tables. Each table is a list of schemas; the lookup (schema.c)
 * scans them all. Two tables let the element-wise / data-movement ops and the
 * dense ops grow independently.
 */
#ifndef S4D_OPS_SCHEMAS_H
#define S4D_OPS_SCHEMAS_H

#include <stddef.h>

#include "ops/op.h"

/* Element-wise, data movement, reductions, softmax (schemas_a.c). */
extern const s4d_op_schema *const s4d_op_schemas_a[];
extern const size_t s4d_op_schemas_a_count;
/* Matrix products, convolution, pooling, normalisation, resampling (schemas_b.c). */
extern const s4d_op_schema *const s4d_op_schemas_b[];
extern const size_t s4d_op_schemas_b_count;

#endif
