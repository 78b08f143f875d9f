/*
 * MatMul [-> Add(constant bias over the last axis)] [-> Relu]
 * [-> LayerNormalization(last axis, constant Scale and B)] -> FusedMatMul:
 * the Linear layers of the head (x W + b, often followed by ReLU, and in the
 * anchor encoder and the refinement branches by a LayerNorm) become one layer
 * that adds the bias, clamps and normalises while the rows are still in
 * cache (on CUDA, in the product kernel's epilogue where one block holds
 * whole rows; else a normalisation kernel right after the product).
 * S4D_FUSE_MATMUL_NORM=0 in the environment leaves the LayerNormalizations
 * apart (to compare).
 */
#include <stdlib.h>
#include <string.h>

#include "ops/dense_util.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

/* Whether constant c adds like a bias of length n to an output of rank r and dtype dt. */
static int is_bias(const s4d_tensor *c, int64_t n, int r, s4d_dtype dt)
{
    return c && s4d_host_is_row_vector(c, n, r, dt);
}

/*
 * Node j when it is a LayerNormalization of value y (n wide, rank r, dtype dt)
 * over the last axis only, with constant Scale and B of n values, whose mean
 * and inverse deviation nobody reads; its epsilon in *eps. Else -1.
 */
static int norm_of(const s4d_ir_graph *g, int j, int y, const int *uses, int64_t n, int r, s4d_dtype dt, float *eps)
{
    const char *env = getenv("S4D_FUSE_MATMUL_NORM");
    if (!s4d_fuse_is_op(g, j, "LayerNormalization") || (env && strcmp(env, "0") == 0))
        return -1;
    const s4d_ir_node *ln = &g->nodes[j];
    if (ln->num_inputs < 2 || ln->inputs[0] != y || !is_bias(s4d_fuse_const(g, ln->inputs[1]), n, r, dt) ||
        (ln->num_inputs > 2 && ln->inputs[2] >= 0 && !is_bias(s4d_fuse_const(g, ln->inputs[2]), n, r, dt)))
        return -1;
    for (int o = 1; o < ln->num_outputs; o++)
        if (ln->outputs[o] >= 0 && uses[ln->outputs[o]] != 0)
            return -1;
    int64_t axis = -1;
    for (int k = 0; k < ln->num_attrs; k++) {
        if (strcmp(ln->attrs[k].name, "axis") == 0)
            axis = ln->attrs[k].i;
        else if (strcmp(ln->attrs[k].name, "epsilon") == 0)
            *eps = ln->attrs[k].f;
    }
    if (axis != -1 && axis != r - 1)
        return -1;
    if (!s4d_fuse_can(g, j, "s4d", "FusedMatMul", 1))
        return -1;
    return j;
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
            j = uses[y] == 1 ? s4d_fuse_consumer(g, y) : -1;
        }
        float eps = 1e-5f;
        const int ln_at = norm_of(g, j, y, uses, n, yt->rank, yt->dtype, &eps);
        if (add_at < 0 && relu_at < 0 && ln_at < 0)
            continue;
        s4d_ir_node *f = &g->nodes[i];
        int *ni = realloc(f->inputs, sizeof(int) * (ln_at >= 0 ? 5 : 3));
        if (!ni) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
            break;
        }
        f->inputs = ni;
        f->inputs[2] = bias;
        f->num_inputs = 3;
        f->outputs[0] = y;
        if (ln_at >= 0) {
            const s4d_ir_node *ln = &g->nodes[ln_at];
            f->inputs[3] = ln->inputs[1];
            f->inputs[4] = ln->num_inputs > 2 ? ln->inputs[2] : -1;
            f->num_inputs = 5;
            f->outputs[0] = ln->outputs[0];
        }
        if (s4d_fuse_set_op(f, "s4d", "FusedMatMul", 1) != 0 ||
            s4d_fuse_add_attr_string(f, "activation", relu_at >= 0 ? "Relu" : "") != 0 ||
            (ln_at >= 0 && (s4d_fuse_add_attr_string(f, "norm", "LayerNormalization") != 0 ||
                            s4d_fuse_add_attr_float(f, "epsilon", eps) != 0))) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, "out of memory in the MatMul+Add fusion");
            break;
        }
        if (add_at >= 0)
            g->nodes[add_at].dead = 1;
        if (relu_at >= 0)
            g->nodes[relu_at].dead = 1;
        if (ln_at >= 0)
            g->nodes[ln_at].dead = 1;
        st = s4d_fuse_reinfer(g, i, err, errsz);
    }
    free(uses);
    return st;
}
