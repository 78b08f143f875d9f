/* Op resolution for the CPU backend: (domain, op_type, highest since_version <= opset). */
#include <string.h>

#include "backend/cpu/cpu_ops.h"

static const s4d_op_def *find_in(const s4d_op_def *const *table, size_t count, const char *domain,
                                 const char *op_type, int opset, const s4d_op_def *best)
{
    for (size_t i = 0; i < count; i++) {
        const s4d_op_def *d = table[i];
        if (strcmp(d->domain, domain) != 0 || strcmp(d->op_type, op_type) != 0)
            continue;
        if (d->since_version > opset)
            continue;
        if (!best || d->since_version > best->since_version)
            best = d;
    }
    return best;
}

const s4d_op_def *s4d_cpu_find_op(const char *domain, const char *op_type, int opset)
{
    /* "ai.onnx" and "" name the same domain. */
    if (!domain || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    const s4d_op_def *best = find_in(s4d_cpu_ops_a, s4d_cpu_ops_a_count, domain, op_type, opset, NULL);
    return find_in(s4d_cpu_ops_b, s4d_cpu_ops_b_count, domain, op_type, opset, best);
}
