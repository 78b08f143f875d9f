/* Schema resolution: (domain, op_type, highest since_version <= opset). */
#include <string.h>

#include "ops/schemas.h"

static const s4d_op_schema *find_in(const s4d_op_schema *const *table, size_t count, const char *domain,
                                 const char *op_type, int opset, const s4d_op_schema *best)
{
    for (size_t i = 0; i < count; i++) {
        const s4d_op_schema *d = table[i];
        if (strcmp(d->domain, domain) != 0 || strcmp(d->op_type, op_type) != 0)
            continue;
        if (d->since_version > opset)
            continue;
        if (!best || d->since_version > best->since_version)
            best = d;
    }
    return best;
}

const s4d_op_schema *s4d_op_find_schema(const char *domain, const char *op_type, int opset)
{
    /* "ai.onnx" and "" name the same domain. */
    if (!domain || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    const s4d_op_schema *best = find_in(s4d_op_schemas_a, s4d_op_schemas_a_count, domain, op_type, opset, NULL);
    return find_in(s4d_op_schemas_b, s4d_op_schemas_b_count, domain, op_type, opset, best);
}
