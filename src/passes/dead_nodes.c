/*
 * Dead-node removal: a node is live when one of its outputs is a graph
 * output or an input of a live node. One backward walk suffices because
 * node order is topological.
 */
#include <stdlib.h>

#include "ir/ir.h"
#include "util/util.h"

s4d_status s4d_pass_remove_dead(s4d_ir_graph *g, char *err, size_t errsz)
{
    char *needed = calloc((size_t)g->num_values + 1, 1);
    if (!needed)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < g->num_outputs; i++)
        needed[g->outputs[i]] = 1;
    for (int i = g->num_nodes - 1; i >= 0; i--) {
        s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        int live = 0;
        for (int j = 0; j < n->num_outputs; j++)
            live |= needed[n->outputs[j]];
        if (!live) {
            n->dead = 1;
            continue;
        }
        for (int j = 0; j < n->num_inputs; j++)
            if (n->inputs[j] >= 0)
                needed[n->inputs[j]] = 1;
    }
    free(needed);
    return S4D_OK;
}
