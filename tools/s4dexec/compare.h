/* Output comparison for s4dexec --compareOutputs. */
#ifndef S4DEXEC_COMPARE_H
#define S4DEXEC_COMPARE_H

#include <stddef.h>
#include <stdint.h>

#include "s4d/types.h"

typedef struct cmp_result {
    double max_abs;     /* max |got - want| */
    double rel_l2;      /* ||got - want|| / ||want|| (0 when both are zero) */
    double cosine;      /* got . want / (|got| |want|); 1 when both are zero */
    int64_t bad;        /* elements outside atol + rtol * |want| (NaN mismatch counts) */
    int64_t first_bad;  /* flat index of the first, or -1 */
} cmp_result;

/* Converts element i of a tensor of dtype to double (float16/bfloat16 included). */
double elem_to_double(s4d_dtype dtype, const void *data, int64_t i);

/* Compares n elements; returns 0, or -1 for a dtype it cannot read. */
int compare_arrays(s4d_dtype dtype, const void *got, const void *want, int64_t n, double rtol,
                   double atol, cmp_result *r);

#endif
