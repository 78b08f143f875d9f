/*
 * MatMul [-> Add(constant bias over the last axis)] [-> Relu] -> FusedMatMul:
 * the Linear layers of the head (x W + b, often followed by ReLU) become one
 * kernel that adds the bias and clamps while the rows are still in cache.
 */
#include <stdlib.h>
#include <string.h>

#include "passes/fuse_passes.h"
#include "util/util.h"

/* Whether constant c adds like a bias of length n to an output of rank r and dtype dt. */
static int is_bias(const s4d_tensor *c, int64_t n, int r, s4d_dtype dt)
{
    return c && c->dtype == dt && c->rank >= 1 && c->rank <= r && c->dims[c->rank - 1] == n &&
           s4d_tensor_numel(c) == n;
}

s4d_status s4d_pass_fuse_matmul_add(s4d_ir_graph *g, char *err, size_t errsz)
{
    int *uses = s4d_fuse_use_counts(g);
    if (!uses)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
    s4d_status st = S4D_OK;
    for (int i = 0; i < g->num_nodes && st == S4D_OK; i++) {
        if (!s4d_fuse_is_op(g, i, "MatMul") || g->nodes[i].num_inputs != 2 || g->nodes[i].num_outputs != 1)
            continue;
        if (!s4d_fuse_can(g, i, "s4d", "FusedMatMul", 1))
            continue;
        int y = g->nodes[i].outputs[0];
        const s4d_tensor *yt = &g->values[y].t;
        /* float16 fuses too: FusedMatMul runs it on CUDA (bias added in float before one rounding). */
        if ((yt->dtype != S4D_DTYPE_FLOAT32 && yt->dtype != S4D_DTYPE_FLOAT16) || yt->rank < 1 ||
            g->values[g->nodes[i].inputs[1]].t.rank < 2)
            continue;
        int64_t n = yt->dims[yt->rank - 1];
        int bias = -1, add_at = -1, relu_at = -1;
        int j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
        if (s4d_fuse_is_op(g, j, "Add") && g->nodes[j].num_inputs == 2) {
            const s4d_ir_node *add = &g->nodes[j];
            int other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
            if (other != y && is_bias(s4d_fuse_const(g, other), n, yt->rank, yt->dtype)) {
                bias = other;
                add_at = j;
                y = add->outputs[0];
                j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
            }
        }
        if (s4d_fuse_is_op(g, j, "Relu")) {
            relu_at = j;
            y = g->nodes[j].outputs[0];
        }
        if (add_at < 0 && relu_at < 0)
            continue;
        s4d_ir_node *f = &g->nodes[i];
        int *ni = realloc(f->inputs, sizeof(int) * 3);
        if (!ni) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
            break;
        }
        f->inputs = ni;
        f->inputs[2] = bias;
        f->num_inputs = 3;
        f->outputs[0] = y;
        if (s4d_fuse_set_op(f, "s4d", "FusedMatMul", 1) != 0 ||
            s4d_fuse_add_attr_string(f, "activation", relu_at >= 0 ? "Relu" : "") != 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
            break;
        }
        if (add_at >= 0)
            g->nodes[add_at].dead = 1;
        if (relu_at >= 0)
            g->nodes[relu_at].dead = 1;
        st = s4d_fuse_reinfer(g, i, err, errsz);
    }
    free(uses);
    return st;
}
