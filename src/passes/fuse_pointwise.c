/*
 * Trees of element-wise nodes  =>  s4d::FusedPointwise (ops/pointwise.h)
 *
 * A small layer costs a launch (CUDA: ~5 us) or a pass over its tensors
 * whatever it computes; the Sparse4D head has about 200 element-wise layers,
 * many in chains (Mul -> Add, Exp -> Mul, And -> Where -> Div, ...). From
 * each element-wise node not itself taken by a later one (the root), the
 * pass grows the largest tree of element-wise producers whose values have
 * exactly one reader (the tree's next node), are not graph outputs and sit
 * on the root's device. The fused kernel computes every value of the tree once
 * per output element, so an intermediate smaller than the output (one that
 * broadcasts into it) is computed again for each element it reaches: it joins
 * only when that repeats it at most PW_MAX_REPEAT times. Trees of two nodes or more whose device has
 * the kernel become one node, in the root's place (its position in the node
 * order keeps every input ready before it); the others die. A lone node
 * becomes one too when movement that the view folding (fold_views.c) takes
 * into it feeds an input or reads its output.
 *
 * Ops: Add Sub Mul Div Min Max (two inputs) Neg Abs Exp Log Sqrt Sigmoid Relu
 * Tanh Reciprocal Atan, Clip with constant bounds, Where, Equal Greater Less
 * GreaterOrEqual LessOrEqual, And Or Xor Not, Cast between float32, float16
 * and bool; values of float32, float16 or bool. The pass runs after the other
 * fusions, so the bias Add of FusedMatMul and the residual Add of FusedConv
 * are theirs.
 *
 * S4D_FUSE_POINTWISE=0 in the environment turns the pass off (to compare
 * fused with unfused engines).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "builder/builder.h"
#include "ops/broadcast.h"
#include "ops/pointwise.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

#define OOM "out of memory in the pointwise fusion"
#define PW_MAX_REPEAT 32

/* What one node computes: its opcode, the inputs that are operands, Clip's bounds, Cast's target. */
typedef struct pw_node {
    int op;
    int nops;
    int ops[3];   /* value indices */
    int has_lo, has_hi;
    float lo, hi;
    int cast_to;
} pw_node;

static const struct {
    const char *name;
    int op, nops, opset;
} pw_ops[] = {
    {"Add", S4D_PW_ADD, 2, 7}, {"Sub", S4D_PW_SUB, 2, 7}, {"Mul", S4D_PW_MUL, 2, 7},
    {"Div", S4D_PW_DIV, 2, 7}, {"Min", S4D_PW_MIN, 2, 8}, {"Max", S4D_PW_MAX, 2, 8},
    {"Neg", S4D_PW_NEG, 1, 6}, {"Abs", S4D_PW_ABS, 1, 6}, {"Exp", S4D_PW_EXP, 1, 6},
    {"Log", S4D_PW_LOG, 1, 6}, {"Sqrt", S4D_PW_SQRT, 1, 6}, {"Sigmoid", S4D_PW_SIGMOID, 1, 6},
    {"Relu", S4D_PW_RELU, 1, 6}, {"Tanh", S4D_PW_TANH, 1, 6},
    {"Reciprocal", S4D_PW_RECIPROCAL, 1, 6}, {"Atan", S4D_PW_ATAN, 1, 7},
    {"Clip", S4D_PW_CLIP, 1, 6}, {"Where", S4D_PW_WHERE, 3, 9}, {"Equal", S4D_PW_EQUAL, 2, 7},
    {"Greater", S4D_PW_GREATER, 2, 7}, {"Less", S4D_PW_LESS, 2, 7},
    {"GreaterOrEqual", S4D_PW_GREATER_EQUAL, 2, 12}, {"LessOrEqual", S4D_PW_LESS_EQUAL, 2, 12},
    {"And", S4D_PW_AND, 2, 7}, {"Or", S4D_PW_OR, 2, 7}, {"Xor", S4D_PW_XOR, 2, 7},
    {"Not", S4D_PW_NOT, 1, 1}, {"Cast", S4D_PW_CAST, 1, 6},
};

static int pw_dtype(s4d_dtype dt)
{
    return dt == S4D_DTYPE_FLOAT32 || dt == S4D_DTYPE_FLOAT16 || dt == S4D_DTYPE_BOOL;
}

/* A constant float scalar bound of Clip's dtype; 0 when not one. */
static int const_bound(const s4d_ir_graph *g, int v, s4d_dtype dt, float *out)
{
    const s4d_tensor *t = s4d_fuse_const(g, v);
    if (!t || t->dtype != dt || s4d_tensor_numel(t) != 1)
        return 0;
    *out = dt == S4D_DTYPE_FLOAT32 ? *(const float *)t->data : s4d_half_to_float(*(const uint16_t *)t->data);
    return 1;
}

/* Whether node ni is an element-wise node the program can express; fills c. */
static int classify(const s4d_ir_graph *g, int ni, pw_node *c)
{
    const s4d_ir_node *n = &g->nodes[ni];
    memset(c, 0, sizeof *c);
    if (n->dead || n->kind != S4D_LAYER_OP || !s4d_ir_is_onnx_domain(n->domain) || n->num_outputs != 1 ||
        n->outputs[0] < 0)
        return 0;
    int k = -1;
    for (size_t i = 0; i < sizeof pw_ops / sizeof pw_ops[0]; i++)
        if (strcmp(n->op_type, pw_ops[i].name) == 0)
            k = (int)i;
    if (k < 0 || n->opset < pw_ops[k].opset)
        return 0;
    const s4d_tensor *y = &g->values[n->outputs[0]].t;
    if (!g->values[n->outputs[0]].shape_known || !pw_dtype(y->dtype) || y->rank > S4D_MAX_RANK)
        return 0;
    c->op = pw_ops[k].op;
    c->nops = pw_ops[k].nops;
    int nin = c->op == S4D_PW_CLIP ? 1 : c->nops;
    if (c->op == S4D_PW_CLIP ? n->num_inputs < 1 || n->num_inputs > 3 : n->num_inputs != nin)
        return 0;
    for (int j = 0; j < nin; j++) {
        int v = n->inputs[j];
        if (v < 0 || !pw_dtype(g->values[v].t.dtype) || g->values[v].t.rank > S4D_MAX_RANK)
            return 0;
        c->ops[j] = v;
    }
    s4d_dtype dt = g->values[c->ops[0]].t.dtype;
    if (c->op == S4D_PW_CAST) {
        c->cast_to = y->dtype;
        return 1;
    }
    if (c->op == S4D_PW_CLIP) {
        if (dt != S4D_DTYPE_FLOAT32 && dt != S4D_DTYPE_FLOAT16)
            return 0;
        c->lo = -INFINITY;
        c->hi = INFINITY;
        /* Before opset 11 the bounds are attributes (a FLOAT may come as an INT). */
        for (int a = 0; a < n->num_attrs; a++) {
            const s4d_attr *at = &n->attrs[a];
            float v = at->type == S4D_ATTR_INT ? (float)at->i : at->f;
            if (strcmp(at->name, "min") == 0) {
                c->lo = v;
                c->has_lo = 1;
            } else if (strcmp(at->name, "max") == 0) {
                c->hi = v;
                c->has_hi = 1;
            }
        }
        if (n->num_inputs > 1 && n->inputs[1] >= 0) {
            if (!const_bound(g, n->inputs[1], dt, &c->lo))
                return 0;
            c->has_lo = 1;
        }
        if (n->num_inputs > 2 && n->inputs[2] >= 0) {
            if (!const_bound(g, n->inputs[2], dt, &c->hi))
                return 0;
            c->has_hi = 1;
        }
    }
    return 1;
}

/* A tree being grown: its external inputs, program and member nodes. */
typedef struct tree {
    int root;
    int nin, ninstr, nconst, nmem;
    int in[S4D_PW_MAX_INPUTS];
    int64_t prog[4 * S4D_PW_MAX_INSTRS];
    float consts[S4D_PW_MAX_CONSTS];
    int mem[S4D_PW_MAX_INSTRS];
    unsigned char nslot[S4D_PW_MAX_INSTRS]; /* operands of instruction k that are slots */
} tree;

typedef struct grow_ctx {
    const s4d_ir_graph *g;
    const int *uses;
    const unsigned char *claimed;
    const s4d_tensor *shape; /* the root's output */
} grow_ctx;

/* Whether value v's producer may join the tree as the operand of one of its nodes. */
static int absorbable(const grow_ctx *gc, const tree *t, int v, pw_node *c)
{
    const s4d_ir_graph *g = gc->g;
    if (v < 0 || g->values[v].kind == S4D_VALUE_CONST || gc->uses[v] != 1 || g->values[v].is_output)
        return 0;
    int p = g->values[v].producer;
    if (p < 0 || p >= g->num_nodes || gc->claimed[p] || g->nodes[p].device != g->nodes[t->root].device)
        return 0;
    /* A smaller value (it broadcasts into the root's shape, as every value of the tree
       does) is computed again for every output element it reaches: at most
       PW_MAX_REPEAT times as often as alone. */
    int64_t nv = s4d_tensor_numel(&g->values[v].t), nout = s4d_tensor_numel(gc->shape);
    if (nv < nout && (nv == 0 || nout / nv > PW_MAX_REPEAT))
        return 0;
    return classify(g, p, c);
}

static int emit(const grow_ctx *gc, tree *t, int ni, const pw_node *c, int pending);

/*
 * The slot of operand v: the result of its absorbed producer, else an external
 * input; -1: full. pending: the instructions still to come (the nodes whose
 * operands are being resolved), so that a long chain keeps its last nodes and
 * leaves its first ones to another tree.
 */
static int operand_slot(const grow_ctx *gc, tree *t, int v, int pending)
{
    pw_node pc;
    if (t->ninstr + pending < S4D_PW_MAX_INSTRS && absorbable(gc, t, v, &pc)) {
        tree saved = *t;
        int s = emit(gc, t, gc->g->values[v].producer, &pc, pending + 1);
        if (s >= 0)
            return s;
        *t = saved; /* too large: v stays an input */
    }
    for (int k = 0; k < t->nin; k++)
        if (t->in[k] == v)
            return k;
    if (t->nin == S4D_PW_MAX_INPUTS)
        return -1;
    t->in[t->nin] = v;
    return t->nin++;
}

/* Appends node ni (operands first); the slot of its result, relative: S4D_PW_MAX_INPUTS + k; -1: full. */
static int emit(const grow_ctx *gc, tree *t, int ni, const pw_node *c, int pending)
{
    int slot[3] = {-1, -1, -1};
    int nslot = c->op == S4D_PW_CLIP || c->op == S4D_PW_CAST ? 1 : c->nops;
    for (int j = 0; j < nslot; j++) {
        slot[j] = operand_slot(gc, t, c->ops[j], pending);
        if (slot[j] < 0)
            return -1;
    }
    if (t->ninstr == S4D_PW_MAX_INSTRS || t->nmem == S4D_PW_MAX_INSTRS)
        return -1;
    int64_t *w = &t->prog[4 * t->ninstr];
    w[0] = c->op;
    w[1] = slot[0];
    w[2] = slot[1];
    w[3] = slot[2];
    if (c->op == S4D_PW_CAST) {
        w[2] = c->cast_to;
    } else if (c->op == S4D_PW_CLIP) {
        if (t->nconst + 2 > S4D_PW_MAX_CONSTS)
            return -1;
        w[2] = w[3] = -1;
        if (c->has_lo) {
            t->consts[t->nconst] = c->lo;
            w[2] = t->nconst++;
        }
        if (c->has_hi) {
            t->consts[t->nconst] = c->hi;
            w[3] = t->nconst++;
        }
    }
    t->nslot[t->ninstr] = (unsigned char)nslot;
    t->mem[t->nmem++] = ni;
    return S4D_PW_MAX_INPUTS + t->ninstr++;
}

/* Whether a one-node tree is worth a FusedPointwise: movement before or after it that the view
   folding would take into it. */
static int folds_movement(const s4d_ir_graph *g, const int *uses, const tree *t)
{
    s4d_device dev = g->nodes[t->root].device;
    for (int k = 0; k < t->nin; k++)
        if (s4d_fold_views_reads_movement(g, t->in[k], dev))
            return 1;
    return s4d_fold_views_feeds_movement(g, uses, g->nodes[t->root].outputs[0], dev);
}

/* Slots are numbered with S4D_PW_MAX_INPUTS inputs while growing; the node has nin. */
static void renumber(tree *t)
{
    for (int k = 0; k < t->ninstr; k++) {
        int64_t *w = &t->prog[4 * k];
        for (int j = 1; j <= t->nslot[k]; j++)
            if (w[j] >= S4D_PW_MAX_INPUTS)
                w[j] = w[j] - S4D_PW_MAX_INPUTS + t->nin;
    }
}

/* The fused node's attributes; names, ints and floats are fresh copies owned by a[]. */
static int make_attrs(const tree *t, s4d_attr a[2], int *na)
{
    memset(a, 0, 2 * sizeof *a);
    *na = t->nconst ? 2 : 1;
    a[0].name = s4d_strdup("program");
    a[0].type = S4D_ATTR_INTS;
    a[0].count = (size_t)(4 * t->ninstr);
    a[0].ints = malloc(sizeof(int64_t) * a[0].count);
    if (!a[0].name || !a[0].ints)
        return -1;
    memcpy(a[0].ints, t->prog, sizeof(int64_t) * a[0].count);
    if (t->nconst) {
        a[1].name = s4d_strdup("constants");
        a[1].type = S4D_ATTR_FLOATS;
        a[1].count = (size_t)t->nconst;
        a[1].floats = malloc(sizeof(float) * a[1].count);
        if (!a[1].name || !a[1].floats)
            return -1;
        memcpy(a[1].floats, t->consts, sizeof(float) * a[1].count);
    }
    return 0;
}

/* Whether the root's device runs the fused node as it would be, asked before anything changes. */
static s4d_status fused_supported(const s4d_ir_graph *g, const tree *t, s4d_attr *attrs, int na, int *ok)
{
    return s4d_fuse_supported(g, t->root, "FusedPointwise", t->in, t->nin, attrs, na, ok);
}

/* Turns the root into the fused node (taking attrs); the other members die. */
static s4d_status rewrite(s4d_ir_graph *g, const tree *t, s4d_attr *attrs, int na, char *err, size_t errsz)
{
    s4d_ir_node *f = &g->nodes[t->root];
    int *ni = realloc(f->inputs, sizeof(int) * (size_t)t->nin);
    if (!ni)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    f->inputs = ni;
    memcpy(ni, t->in, sizeof(int) * (size_t)t->nin);
    f->num_inputs = t->nin;
    if (s4d_fuse_set_op(f, "s4d", "FusedPointwise", 1) != 0)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    s4d_attr *a = calloc((size_t)na, sizeof *a);
    if (!a)
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    for (int k = 0; k < f->num_attrs; k++)
        s4d_attr_clear(&f->attrs[k]);
    free(f->attrs);
    memcpy(a, attrs, sizeof *a * (size_t)na);
    memset(attrs, 0, sizeof *attrs * (size_t)na);
    f->attrs = a;
    f->num_attrs = na;
    for (int k = 0; k < t->nmem; k++)
        if (t->mem[k] != t->root)
            g->nodes[t->mem[k]].dead = 1;
    return s4d_fuse_reinfer(g, t->root, err, errsz);
}

s4d_status s4d_pass_fuse_pointwise(s4d_ir_graph *g, char *err, size_t errsz)
{
    if (s4d_fuse_switched_off("S4D_FUSE_POINTWISE"))
        return S4D_OK;
    if (g->num_nodes == 0)
        return S4D_OK;
    int *uses = s4d_fuse_use_counts(g);
    unsigned char *claimed = calloc((size_t)g->num_nodes, 1);
    tree *t = malloc(sizeof *t);
    if (!uses || !claimed || !t) {
        free(uses);
        free(claimed);
        free(t);
        return s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
    }
    s4d_status st = S4D_OK;
    /* Consumers come after their producers: a root is met before the nodes of its tree. */
    for (int i = g->num_nodes - 1; i >= 0 && st == S4D_OK; i--) {
        pw_node c;
        if (claimed[i] || !classify(g, i, &c) || !s4d_fuse_can(g, i, "s4d", "FusedPointwise", 1))
            continue;
        memset(t, 0, sizeof *t);
        t->root = i;
        grow_ctx gc = {g, uses, claimed, &g->values[g->nodes[i].outputs[0]].t};
        if (emit(&gc, t, i, &c, 1) < 0 || (t->nmem < 2 && !folds_movement(g, uses, t)))
            continue;
        renumber(t);
        s4d_attr attrs[2];
        int na, ok = 0;
        if (make_attrs(t, attrs, &na) != 0) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
        } else if (fused_supported(g, t, attrs, na, &ok) != S4D_OK) {
            st = s4d_fmt_err(err, errsz, S4D_ERR_NO_MEMORY, OOM);
        } else if (ok) {
            for (int k = 0; k < t->nmem; k++)
                claimed[t->mem[k]] = 1;
            st = rewrite(g, t, attrs, na, err, errsz);
        }
        s4d_attr_clear(&attrs[0]);
        s4d_attr_clear(&attrs[1]);
    }
    free(t);
    free(claimed);
    free(uses);
    return st;
}
