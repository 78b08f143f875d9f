/*
 * The fusion passes: each test graph is built twice; one copy is fused, and
 * both run through a small interpreter over the op kernels. The fused graph
 * must have the expected live nodes and the same outputs as the unfused one.
 */
#define _POSIX_C_SOURCE 200809L
#include "op_test.h"

#include "ir/ir.h"
#include "passes/fuse_passes.h"
#include "util/util.h"

static int g_value(s4d_ir_graph *g, const char *name, s4d_value_kind kind, int rank, const int64_t *dims)
{
    int v = s4d_ir_add_value(g, name, kind);
    if (rank >= 0) {
        g->values[v].t.dtype = S4D_DTYPE_FLOAT32;
        g->values[v].t.rank = rank;
        if (rank > 0)
            memcpy(g->values[v].t.dims, dims, sizeof(int64_t) * (size_t)rank);
        g->values[v].shape_known = 1;
    }
    return v;
}

static int g_const(s4d_ir_graph *g, const char *name, s4d_dtype dt, const void *data, int rank, const int64_t *dims)
{
    int v = s4d_ir_add_value(g, name, S4D_VALUE_CONST);
    s4d_tensor *t = &g->values[v].t;
    t->dtype = dt;
    t->rank = rank;
    if (rank > 0)
        memcpy(t->dims, dims, sizeof(int64_t) * (size_t)rank);
    size_t bytes = s4d_ir_tensor_bytes(t);
    t->data = malloc(bytes + 1);
    memcpy(t->data, data, bytes);
    g->values[v].shape_known = 1;
    return v;
}

static int g_node(s4d_ir_graph *g, const char *op, int opset, const int *in, int nin, int out, const s4d_attr *attrs,
                  int nattr)
{
    int ni = s4d_ir_add_node(g);
    s4d_ir_node *n = &g->nodes[ni];
    char name[64];
    snprintf(name, sizeof name, "%s_%d", op, ni);
    n->name = s4d_strdup(name);
    n->domain = s4d_strdup("");
    n->op_type = s4d_strdup(op);
    n->opset = opset;
    n->num_inputs = nin;
    n->inputs = malloc(sizeof(int) * (size_t)(nin + 1));
    memcpy(n->inputs, in, sizeof(int) * (size_t)nin);
    n->num_outputs = 1;
    n->outputs = malloc(sizeof(int));
    n->outputs[0] = out;
    n->num_attrs = nattr;
    n->attrs = calloc((size_t)nattr + 1, sizeof(s4d_attr));
    for (int i = 0; i < nattr; i++)
        s4d_attr_copy(&n->attrs[i], &attrs[i]);
    n->kind = S4D_LAYER_OP;
    n->device = S4D_DEVICE_CPU;
    n->schema = s4d_op_find_schema("", op, opset);
    if (!n->schema)
        fprintf(stderr, "test graph: no op %s at opset %d\n", op, opset);
    g->values[out].producer = ni;
    return ni;
}

static void g_io(s4d_ir_graph *g, int input, int output)
{
    g->inputs = malloc(sizeof(int));
    g->inputs[0] = input;
    g->num_inputs = 1;
    g->outputs = malloc(sizeof(int));
    g->outputs[0] = output;
    g->num_outputs = 1;
}

/* Runs the live nodes in order; returns a malloc'd copy of the graph's output. */
static float *interpret(s4d_ir_graph *g, const float *x)
{
    void **buf = calloc((size_t)g->num_values, sizeof(void *));
    int in = g->inputs[0];
    size_t xb = s4d_ir_tensor_bytes(&g->values[in].t);
    buf[in] = malloc(xb);
    memcpy(buf[in], x, xb);
    for (int i = 0; i < g->num_nodes; i++) {
        s4d_ir_node *n = &g->nodes[i];
        if (n->dead)
            continue;
        s4d_tensor ins[8], outs[2];
        for (int k = 0; k < n->num_inputs; k++) {
            int v = n->inputs[k];
            if (v < 0) {
                ins[k] = t_missing();
                continue;
            }
            ins[k] = g->values[v].t;
            if (g->values[v].kind != S4D_VALUE_CONST)
                ins[k].data = buf[v];
        }
        int o = n->outputs[0];
        outs[0] = g->values[o].t;
        buf[o] = malloc(s4d_ir_tensor_bytes(&outs[0]) + 1);
        outs[0].data = buf[o];
        s4d_op_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.node_name = n->name;
        ctx.op_type = n->op_type;
        ctx.opset = n->opset;
        ctx.attrs = n->attrs;
        ctx.num_attrs = n->num_attrs;
        ctx.inputs = ins;
        ctx.num_inputs = n->num_inputs;
        ctx.outputs = outs;
        ctx.num_outputs = 1;
        ctx.err = t_err;
        ctx.err_size = sizeof t_err;
        ctx.workspace_size = n->workspace;
        ctx.workspace = n->workspace ? aligned_alloc(64, (n->workspace + 63) / 64 * 64) : NULL;
        ctx.schema = n->schema;
        ctx.params = n->params;
        s4d_status st = n->schema->run(&ctx);
        T_CHECK(st == S4D_OK, "interpret %s: %s", n->name, t_err);
        free(ctx.workspace);
    }
    int out = g->outputs[0];
    size_t ob = s4d_ir_tensor_bytes(&g->values[out].t);
    float *res = malloc(ob + 1);
    memcpy(res, buf[out], ob);
    for (int v = 0; v < g->num_values; v++)
        free(buf[v]);
    free(buf);
    return res;
}

static int live_nodes(const s4d_ir_graph *g, const char *op_type)
{
    int c = 0;
    for (int i = 0; i < g->num_nodes; i++)
        if (!g->nodes[i].dead && (!op_type || strcmp(g->nodes[i].op_type, op_type) == 0))
            c++;
    return c;
}

typedef s4d_ir_graph *(*graph_fn)(void);

/* Builds twice, fuses one, compares; checks the fused graph's live node count and kind. */
static void check_graph(const char *what, graph_fn build, int want_live, const char *want_op)
{
    char err[1024];
    s4d_ir_graph *ref = build(), *fused = build();
    T_CHECK(s4d_pass_infer_and_fold(ref, 0, err, sizeof err) == S4D_OK, "%s: infer: %s", what, err);
    T_CHECK(s4d_pass_infer_and_fold(fused, 0, err, sizeof err) == S4D_OK, "%s: infer: %s", what, err);
    s4d_status st = s4d_pass_fuse(fused, err, sizeof err);
    T_CHECK(st == S4D_OK, "%s: fuse: %s", what, err);
    T_CHECK(s4d_pass_remove_dead(fused, err, sizeof err) == S4D_OK, "%s: dead", what);
    T_CHECK(live_nodes(fused, NULL) == want_live, "%s: %d live nodes after fusion, want %d", what,
            live_nodes(fused, NULL), want_live);
    if (want_op)
        T_CHECK(live_nodes(fused, want_op) >= 1, "%s: no live %s", what, want_op);
    const s4d_tensor *xt = &ref->values[ref->inputs[0]].t, *yt = &ref->values[ref->outputs[0]].t;
    const s4d_tensor *yf = &fused->values[fused->outputs[0]].t;
    int64_t nx = s4d_tensor_numel(xt), ny = s4d_tensor_numel(yt);
    T_CHECK(s4d_tensor_numel(yf) == ny && yf->rank == yt->rank, "%s: output shape kept", what);
    float *x = t_rand_buf(nx, -2, 2);
    float *a = interpret(ref, x), *b = interpret(fused, x);
    double *ad = malloc(sizeof(double) * (size_t)ny);
    for (int64_t i = 0; i < ny; i++)
        ad[i] = a[i];
    T_CLOSE(b, ad, ny, 1e-5, 1e-4, "%s: fused output equals unfused", what);
    free(x);
    free(a);
    free(b);
    free(ad);
    s4d_ir_graph_destroy(ref);
    s4d_ir_graph_destroy(fused);
}

static float *rnd(int64_t n, float lo, float hi)
{
    return t_rand_buf(n, lo, hi);
}

/* X -> ConvA -> BN -> Add(ConvB(X)) -> Relu, ConvB after ConvA in node order. */
static s4d_ir_graph *build_conv_chain(void)
{
    t_rng_state = 12345;
    s4d_ir_graph *g = s4d_ir_graph_create();
    int64_t xd[4] = {1, 3, 6, 7}, wd[4] = {4, 3, 3, 3}, cd[1] = {4};
    int x = g_value(g, "x", S4D_VALUE_INPUT, 4, xd);
    float *w = rnd(108, -1, 1), *w2 = rnd(108, -1, 1), *b = rnd(4, -1, 1), *sc = rnd(4, 0.5f, 2), *be = rnd(4, -1, 1),
          *mu = rnd(4, -1, 1), *var = rnd(4, 0.2f, 2);
    int W = g_const(g, "W", S4D_DTYPE_FLOAT32, w, 4, wd), W2 = g_const(g, "W2", S4D_DTYPE_FLOAT32, w2, 4, wd);
    int B = g_const(g, "B", S4D_DTYPE_FLOAT32, b, 1, cd), SC = g_const(g, "sc", S4D_DTYPE_FLOAT32, sc, 1, cd);
    int BE = g_const(g, "be", S4D_DTYPE_FLOAT32, be, 1, cd), MU = g_const(g, "mu", S4D_DTYPE_FLOAT32, mu, 1, cd);
    int VA = g_const(g, "var", S4D_DTYPE_FLOAT32, var, 1, cd);
    int y1 = g_value(g, "y1", 0, -1, NULL), y2 = g_value(g, "y2", 0, -1, NULL), r = g_value(g, "r", 0, -1, NULL);
    int y3 = g_value(g, "y3", 0, -1, NULL), y4 = g_value(g, "y4", 0, -1, NULL);
    int64_t pads[4] = {1, 1, 1, 1};
    s4d_attr ca[1] = {t_attr_ints("pads", pads, 4)};
    s4d_attr ea[1] = {t_attr_float("epsilon", 1e-3f)};
    g_node(g, "Conv", 13, (int[]){x, W}, 2, y1, ca, 1);
    g_node(g, "BatchNormalization", 15, (int[]){y1, SC, BE, MU, VA}, 5, y2, ea, 1);
    g_node(g, "Conv", 13, (int[]){x, W2, B}, 3, r, ca, 1);
    g_node(g, "Add", 14, (int[]){y2, r}, 2, y3, NULL, 0);
    g_node(g, "Relu", 14, (int[]){y3}, 1, y4, NULL, 0);
    g_io(g, x, y4);
    free(w);
    free(w2);
    free(b);
    free(sc);
    free(be);
    free(mu);
    free(var);
    return g;
}

/* Conv whose output is also a graph output: nothing may fuse past it. */
static s4d_ir_graph *build_conv_shared(void)
{
    t_rng_state = 777;
    s4d_ir_graph *g = s4d_ir_graph_create();
    int64_t xd[4] = {1, 2, 5, 5}, wd[4] = {3, 2, 1, 1};
    int x = g_value(g, "x", S4D_VALUE_INPUT, 4, xd);
    float *w = rnd(6, -1, 1);
    int W = g_const(g, "W", S4D_DTYPE_FLOAT32, w, 4, wd);
    int y1 = g_value(g, "y1", 0, -1, NULL), y2 = g_value(g, "y2", 0, -1, NULL);
    g_node(g, "Conv", 13, (int[]){x, W}, 2, y1, NULL, 0);
    g_node(g, "Relu", 14, (int[]){y1}, 1, y2, NULL, 0);
    g_io(g, x, y1);
    free(w);
    return g;
}

static s4d_ir_graph *build_linear_relu(void)
{
    t_rng_state = 999;
    s4d_ir_graph *g = s4d_ir_graph_create();
    int64_t xd[3] = {2, 5, 8}, wd[2] = {8, 6}, bd[2] = {1, 6};
    int x = g_value(g, "x", S4D_VALUE_INPUT, 3, xd);
    float *w = rnd(48, -1, 1), *b = rnd(6, -1, 1);
    int W = g_const(g, "W", S4D_DTYPE_FLOAT32, w, 2, wd), B = g_const(g, "B", S4D_DTYPE_FLOAT32, b, 2, bd);
    int y1 = g_value(g, "y1", 0, -1, NULL), y2 = g_value(g, "y2", 0, -1, NULL), y3 = g_value(g, "y3", 0, -1, NULL);
    int y4 = g_value(g, "y4", 0, -1, NULL), y5 = g_value(g, "y5", 0, -1, NULL);
    g_node(g, "MatMul", 13, (int[]){x, W}, 2, y1, NULL, 0);
    g_node(g, "Add", 14, (int[]){B, y1}, 2, y2, NULL, 0);
    g_node(g, "Relu", 14, (int[]){y2}, 1, y3, NULL, 0);
    /* A second Linear without activation. */
    float *w2 = rnd(36, -1, 1), *b2 = rnd(6, -1, 1);
    int64_t w2d[2] = {6, 6}, b2d[1] = {6};
    int W2 = g_const(g, "W2", S4D_DTYPE_FLOAT32, w2, 2, w2d), B2 = g_const(g, "B2", S4D_DTYPE_FLOAT32, b2, 1, b2d);
    g_node(g, "MatMul", 13, (int[]){y3, W2}, 2, y4, NULL, 0);
    g_node(g, "Add", 14, (int[]){y4, B2}, 2, y5, NULL, 0);
    g_io(g, x, y5);
    free(w);
    free(b);
    free(w2);
    free(b2);
    return g;
}

/* Linear -> ReLU -> LayerNormalization (the anchor encoder's unit) and a second Linear ->
   LayerNormalization without B; ln_axis -2 normalises another axis, which must not fuse. */
static int ln_axis = -1;

static s4d_ir_graph *build_linear_relu_ln(void)
{
    t_rng_state = 777;
    s4d_ir_graph *g = s4d_ir_graph_create();
    int64_t xd[3] = {2, 7, 12}, wd[2] = {12, 32}, bd[1] = {32}, w2d[2] = {32, 32};
    int x = g_value(g, "x", S4D_VALUE_INPUT, 3, xd);
    float *w = rnd(12 * 32, -0.5f, 0.5f), *b = rnd(32, -1, 1), *ga = rnd(32, 0.5f, 1.5f), *be = rnd(32, -1, 1);
    float *w2 = rnd(32 * 32, -0.5f, 0.5f), *ga2 = rnd(32, 0.5f, 1.5f);
    int W = g_const(g, "W", S4D_DTYPE_FLOAT32, w, 2, wd), B = g_const(g, "B", S4D_DTYPE_FLOAT32, b, 1, bd);
    int GA = g_const(g, "gamma", S4D_DTYPE_FLOAT32, ga, 1, bd), BE = g_const(g, "beta", S4D_DTYPE_FLOAT32, be, 1, bd);
    int W2 = g_const(g, "W2", S4D_DTYPE_FLOAT32, w2, 2, w2d), GA2 = g_const(g, "gamma2", S4D_DTYPE_FLOAT32, ga2, 1, bd);
    int v[6];
    for (int i = 0; i < 6; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "u%d", i);
        v[i] = g_value(g, nm, 0, -1, NULL);
    }
    s4d_attr la[2] = {t_attr_int("axis", ln_axis), t_attr_float("epsilon", 1e-3f)};
    g_node(g, "MatMul", 13, (int[]){x, W}, 2, v[0], NULL, 0);
    g_node(g, "Add", 14, (int[]){v[0], B}, 2, v[1], NULL, 0);
    g_node(g, "Relu", 14, (int[]){v[1]}, 1, v[2], NULL, 0);
    g_node(g, "LayerNormalization", 17, (int[]){v[2], GA, BE}, 3, v[3], la, 2);
    g_node(g, "MatMul", 13, (int[]){v[3], W2}, 2, v[4], NULL, 0);
    g_node(g, "LayerNormalization", 17, (int[]){v[4], GA2}, 2, v[5], la, 1);
    g_io(g, x, v[5]);
    free(w);
    free(b);
    free(ga);
    free(be);
    free(w2);
    free(ga2);
    return g;
}

/*
 * The head's feed-forward block: identity_fc(x) + ReLU-Linear-Linear(x) -> LayerNormalization, the
 * identity product first in node order (its residual is computed after it). ffn_relu puts a ReLU on
 * the identity branch: then the feed-forward branch's last product takes the residual.
 */
static int ffn_relu = 0;

static s4d_ir_graph *build_ffn(void)
{
    t_rng_state = 4711;
    s4d_ir_graph *g = s4d_ir_graph_create();
    int64_t xd[3] = {2, 9, 16}, wd[2] = {16, 24}, w2d[2] = {16, 32}, w3d[2] = {32, 24}, nd[1] = {24}, hd[1] = {32};
    int x = g_value(g, "x", S4D_VALUE_INPUT, 3, xd);
    float *w = rnd(16 * 24, -0.5f, 0.5f), *b = rnd(24, -1, 1), *w2 = rnd(16 * 32, -0.5f, 0.5f), *b2 = rnd(32, -1, 1);
    float *w3 = rnd(32 * 24, -0.5f, 0.5f), *b3 = rnd(24, -1, 1), *ga = rnd(24, 0.5f, 1.5f), *be = rnd(24, -1, 1);
    int W = g_const(g, "W", S4D_DTYPE_FLOAT32, w, 2, wd), B = g_const(g, "B", S4D_DTYPE_FLOAT32, b, 1, nd);
    int W2 = g_const(g, "W2", S4D_DTYPE_FLOAT32, w2, 2, w2d), B2 = g_const(g, "B2", S4D_DTYPE_FLOAT32, b2, 1, hd);
    int W3 = g_const(g, "W3", S4D_DTYPE_FLOAT32, w3, 2, w3d), B3 = g_const(g, "B3", S4D_DTYPE_FLOAT32, b3, 1, nd);
    int GA = g_const(g, "gamma", S4D_DTYPE_FLOAT32, ga, 1, nd), BE = g_const(g, "beta", S4D_DTYPE_FLOAT32, be, 1, nd);
    int v[11];
    for (int i = 0; i < 11; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "f%d", i);
        v[i] = g_value(g, nm, 0, -1, NULL);
    }
    s4d_attr la[1] = {t_attr_float("epsilon", 1e-5f)};
    g_node(g, "MatMul", 13, (int[]){x, W}, 2, v[0], NULL, 0);
    g_node(g, "Add", 14, (int[]){v[0], B}, 2, v[1], NULL, 0);
    int id = v[1];
    if (ffn_relu) {
        g_node(g, "Relu", 14, (int[]){v[1]}, 1, v[10], NULL, 0);
        id = v[10];
    }
    g_node(g, "MatMul", 13, (int[]){x, W2}, 2, v[2], NULL, 0);
    g_node(g, "Add", 14, (int[]){v[2], B2}, 2, v[3], NULL, 0);
    g_node(g, "Relu", 14, (int[]){v[3]}, 1, v[4], NULL, 0);
    g_node(g, "MatMul", 13, (int[]){v[4], W3}, 2, v[5], NULL, 0);
    g_node(g, "Add", 14, (int[]){B3, v[5]}, 2, v[6], NULL, 0);
    g_node(g, "Add", 14, (int[]){id, v[6]}, 2, v[7], NULL, 0);
    g_node(g, "LayerNormalization", 17, (int[]){v[7], GA, BE}, 3, v[8], la, 1);
    g_io(g, x, v[8]);
    free(w);
    free(b);
    free(w2);
    free(b2);
    free(w3);
    free(b3);
    free(ga);
    free(be);
    return g;
}

/*
 * x W + x (the attention's out_proj(o) + query, without bias); with residual_bcast the row means
 * of x instead of x: a broadcast addend, which must stay an Add; with residual_relu ReLU(x W) + x,
 * whose Add must stay too (the activation comes before the residual).
 */
static int residual_bcast = 0, residual_relu = 0;

static s4d_ir_graph *build_matmul_residual(void)
{
    t_rng_state = 2024;
    s4d_ir_graph *g = s4d_ir_graph_create();
    int64_t xd[3] = {3, 7, 12}, wd[2] = {12, 12}, axes[1] = {-1};
    int x = g_value(g, "x", S4D_VALUE_INPUT, 3, xd);
    float *w = rnd(12 * 12, -0.5f, 0.5f);
    int W = g_const(g, "W", S4D_DTYPE_FLOAT32, w, 2, wd);
    int y = g_value(g, "y", 0, -1, NULL), r = g_value(g, "r", 0, -1, NULL), z = g_value(g, "z", 0, -1, NULL);
    g_node(g, "MatMul", 13, (int[]){x, W}, 2, y, NULL, 0);
    if (residual_relu) {
        int yr = g_value(g, "yr", 0, -1, NULL);
        g_node(g, "Relu", 14, (int[]){y}, 1, yr, NULL, 0);
        y = yr;
    }
    int addend = x;
    if (residual_bcast) {
        s4d_attr ra[1] = {t_attr_ints("axes", axes, 1)};
        g_node(g, "ReduceMean", 13, (int[]){x}, 1, r, ra, 1);
        addend = r;
    }
    g_node(g, "Add", 14, (int[]){addend, y}, 2, z, NULL, 0);
    g_io(g, x, z);
    free(w);
    return g;
}

static int ln_opset = 13, ln_affine = 1;

static s4d_ir_graph *build_layernorm(void)
{
    t_rng_state = 4242;
    s4d_ir_graph *g = s4d_ir_graph_create();
    int64_t xd[3] = {2, 4, 16}, cd[1] = {16}, one[1] = {1};
    int x = g_value(g, "x", S4D_VALUE_INPUT, 3, xd);
    float two = 2.0f, eps = 1e-5f, *ga = rnd(16, 0.5f, 1.5f), *be = rnd(16, -1, 1);
    int64_t axes[1] = {-1};
    int TWO = g_const(g, "two", S4D_DTYPE_FLOAT32, &two, 0, NULL), EPS = g_const(g, "eps", S4D_DTYPE_FLOAT32, &eps, 0, NULL);
    int GA = g_const(g, "gamma", S4D_DTYPE_FLOAT32, ga, 1, cd), BE = g_const(g, "beta", S4D_DTYPE_FLOAT32, be, 1, cd);
    int AX = g_const(g, "axes", S4D_DTYPE_INT64, axes, 1, one);
    int v[9];
    for (int i = 0; i < 9; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "v%d", i);
        v[i] = g_value(g, nm, 0, -1, NULL);
    }
    s4d_attr ra[1] = {t_attr_ints("axes", axes, 1)};
    if (ln_opset >= 18) {
        g_node(g, "ReduceMean", 18, (int[]){x, AX}, 2, v[0], NULL, 0);
    } else {
        g_node(g, "ReduceMean", ln_opset, (int[]){x}, 1, v[0], ra, 1);
    }
    g_node(g, "Sub", 14, (int[]){x, v[0]}, 2, v[1], NULL, 0);
    g_node(g, "Pow", 15, (int[]){v[1], TWO}, 2, v[2], NULL, 0);
    if (ln_opset >= 18)
        g_node(g, "ReduceMean", 18, (int[]){v[2], AX}, 2, v[3], NULL, 0);
    else
        g_node(g, "ReduceMean", ln_opset, (int[]){v[2]}, 1, v[3], ra, 1);
    g_node(g, "Add", 14, (int[]){v[3], EPS}, 2, v[4], NULL, 0);
    g_node(g, "Sqrt", 13, (int[]){v[4]}, 1, v[5], NULL, 0);
    g_node(g, "Div", 14, (int[]){v[1], v[5]}, 2, v[6], NULL, 0);
    int out = v[6];
    if (ln_affine) {
        g_node(g, "Mul", 14, (int[]){v[6], GA}, 2, v[7], NULL, 0);
        g_node(g, "Add", 14, (int[]){v[7], BE}, 2, v[8], NULL, 0);
        out = v[8];
    }
    g_io(g, x, out);
    free(ga);
    free(be);
    return g;
}

int main(void)
{
    check_graph("conv+bn+add+relu", build_conv_chain, 2, "FusedConv");
    check_graph("conv output shared", build_conv_shared, 1, "Conv");
    check_graph("matmul+add(+relu)", build_linear_relu, 2, "FusedMatMul");
    check_graph("matmul+add+relu+layernorm", build_linear_relu_ln, 2, "FusedMatMul");
    ln_axis = -2;
    check_graph("layernorm over another axis stays", build_linear_relu_ln, 4, "LayerNormalization");
    ln_axis = -1;
    setenv("S4D_FUSE_MATMUL_NORM", "0", 1);
    check_graph("S4D_FUSE_MATMUL_NORM=0 keeps layernorms apart", build_linear_relu_ln, 4, "LayerNormalization");
    unsetenv("S4D_FUSE_MATMUL_NORM");
    /* The residual fusion: 3 products (identity, two MLP layers), the Add and the norm in the identity's. */
    check_graph("feed-forward block: residual and layernorm in the product", build_ffn, 3, "FusedMatMul");
    ffn_relu = 1;
    check_graph("a relu on one side: the other product takes the residual", build_ffn, 3, "FusedMatMul");
    ffn_relu = 0;
    setenv("S4D_FUSE_RESIDUAL", "0", 1);
    check_graph("S4D_FUSE_RESIDUAL=0 keeps the add", build_ffn, 5, "Add");
    unsetenv("S4D_FUSE_RESIDUAL");
    check_graph("matmul + its input: one product", build_matmul_residual, 1, "FusedMatMul");
    residual_bcast = 1;
    check_graph("a broadcast addend stays an add", build_matmul_residual, 3, "Add");
    residual_bcast = 0;
    residual_relu = 1;
    check_graph("a relu before the residual keeps the add", build_matmul_residual, 2, "Add");
    residual_relu = 0;
    check_graph("layernorm opset 13", build_layernorm, 1, "LayerNormalization");
    ln_opset = 18;
    check_graph("layernorm opset 18", build_layernorm, 1, "LayerNormalization");
    ln_affine = 0;
    check_graph("layernorm without affine", build_layernorm, 1, "LayerNormalization");
    return t_finish("test_fuse");
}
