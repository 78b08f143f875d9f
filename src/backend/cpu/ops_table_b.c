/* CPU op table b: see cpu_ops.h. Keep the list sorted by op_type. */
#include "backend/cpu/cpu_ops.h"

const s4d_op_def *const s4d_cpu_ops_b[] = {
    NULL, /* placeholder so the array is never empty; the count excludes it */
};
const size_t s4d_cpu_ops_b_count = 0;
