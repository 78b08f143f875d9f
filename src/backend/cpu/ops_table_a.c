/* CPU op table a: see cpu_ops.h. Keep the list sorted by op_type. */
#include "backend/cpu/cpu_ops.h"

const s4d_op_def *const s4d_cpu_ops_a[] = {
    NULL, /* placeholder so the array is never empty; the count excludes it */
};
const size_t s4d_cpu_ops_a_count = 0;
