/*
 * The element-wise CUDA kernels and their glue (backend/cuda/ops/elementwise.c)
 * built for the host (S4D_EW_HOST_BUILD, see kernels/elementwise_common.cuh)
 * and run as the engine runs them: the schema's infer fills the params, the
 * kernel's supports() accepts the node, its run() launches on host memory.
 * Every output must equal the host reference's bit for bit (NaN equals NaN):
 * both sides use the host's math library, so any difference is the kernels'
 * own (index math, packs and tails, broadcast strides, dtype conversions,
 * formulas). Inputs are random (seeded) with NaN, infinities, signed zeros,
 * exact halves and integer edge cases; some runs put every pointer one element
 * off 16-byte alignment so that the one-by-one paths run too.
 *
 *   test_elementwise_host [GROUP]   GROUP: table errors fastdiv binary variadic unary clip where cast
 *                                          pointwise pointwise_views
 *                                   (default: all)
 */
#ifndef S4D_EW_HOST_BUILD
#error "build with S4D_EW_HOST_BUILD defined (tests/cuda/CMakeLists.txt)"
#endif

#include "backend/cuda/kernels/elementwise.cu"
#include "backend/cuda/kernels/elementwise_unary.cu"
#include "backend/cuda/kernels/pointwise.cu"
#include "ops/pointwise.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "backend/backend.h"
#include "ops/broadcast.h"
#include "ops/op.h"
extern const s4d_kernel *const s4d_cuda_kernels_elementwise[];
extern const size_t s4d_cuda_kernels_elementwise_count;
}

namespace {

int g_failures = 0, g_runs = 0, g_skipped = 0;
std::mt19937_64 g_rng(20240611);

double uniform(double lo, double hi)
{
    return lo + (hi - lo) * (double)(g_rng() >> 11) * (1.0 / 9007199254740992.0);
}

/* A tensor in its own 64-byte aligned storage; `shift` moves the data one element
   off that alignment. */
struct Buf {
    s4d_tensor t;
    void *base = nullptr;

    Buf(s4d_dtype dt, const std::vector<int64_t> &dims, bool shift = false)
    {
        memset(&t, 0, sizeof t);
        t.dtype = dt;
        t.rank = (int)dims.size();
        for (size_t d = 0; d < dims.size(); d++)
            t.dims[d] = dims[d];
        /* Exactly the bytes used, so that a sanitizer sees any overrun. */
        size_t es = s4d_dtype_size(dt), bytes = (size_t)numel() * es + (shift ? es : 0);
        if (posix_memalign(&base, 64, bytes ? bytes : 1) != 0)
            abort();
        memset(base, 0xa5, bytes);
        t.data = (char *)base + (shift ? es : 0);
    }
    Buf(const Buf &) = delete;
    Buf &operator=(const Buf &) = delete;
    ~Buf() { free(base); }
    int64_t numel() const { return s4d_tensor_numel(&t); }
};

using BufP = std::unique_ptr<Buf>;

enum Fill { WIDE, SMALL, BOOLS };

/* WIDE: floats in [-4, 4) led by specials, integers over the whole range led by
   the extremes; SMALL: integers in [-9, 9] led by 0, -1, 3 (divisors), floats as WIDE. */
void fill(Buf &b, Fill how)
{
    s4d_dtype dt = b.t.dtype;
    int64_t n = b.numel();
    static const double specials[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 0.5, 2.5, -2.5, 1.5, 3.0};
    for (int64_t i = 0; i < n; i++) {
        if (dt == S4D_DTYPE_BOOL) {
            ((uint8_t *)b.t.data)[i] = (uint8_t)(g_rng() & 1);
        } else if (s4d_dtype_is_float(dt)) {
            double v = i < 10 && n > 16 ? specials[i] : uniform(-4, 4);
            s4d_store_f64(dt, b.t.data, i, v);
        } else if (how == SMALL) {
            int64_t v = i == 0 ? 0 : i == 1 ? -1 : i == 2 ? 3 : (int64_t)(g_rng() % 19) - 9;
            if (!(dt == S4D_DTYPE_INT8 || dt == S4D_DTYPE_INT16 || dt == S4D_DTYPE_INT32 ||
                  dt == S4D_DTYPE_INT64))
                v = v < 0 ? -v : v;
            s4d_store_f64(dt, b.t.data, i, (double)v);
        } else {
            uint64_t r = g_rng();
            if (i < 3) /* 0x7f.., 0x80.., 0: the extremes of every signed width */
                r = i == 0 ? 0x7f7f7f7f7f7f7f7full : i == 1 ? 0x8080808080808080ull : 0;
            memcpy((char *)b.t.data + (size_t)i * s4d_dtype_size(dt), &r, s4d_dtype_size(dt));
        }
    }
}

bool is_nan_at(s4d_dtype dt, const void *p, int64_t i)
{
    return s4d_dtype_is_float(dt) && isnan(s4d_load_f64(dt, p, i));
}

/* Bitwise equality, NaN equal to NaN. */
bool same(const char *what, const Buf &got, const Buf &want)
{
    size_t es = s4d_dtype_size(want.t.dtype);
    for (int64_t i = 0; i < want.numel(); i++) {
        const char *g = (const char *)got.t.data + (size_t)i * es;
        const char *w = (const char *)want.t.data + (size_t)i * es;
        if (memcmp(g, w, es) == 0)
            continue;
        if (is_nan_at(want.t.dtype, want.t.data, i) && is_nan_at(want.t.dtype, got.t.data, i))
            continue;
        fprintf(stderr, "FAIL %s: element %lld of %lld (%s): got %.17g, want %.17g\n", what,
                (long long)i, (long long)want.numel(), s4d_dtype_name(want.t.dtype),
                s4d_load_f64(want.t.dtype, got.t.data, i), s4d_load_f64(want.t.dtype, want.t.data, i));
        return false;
    }
    return true;
}

const s4d_kernel *cuda_kernel(const char *op_type, int opset)
{
    const s4d_kernel *best = nullptr;
    for (size_t i = 0; i < s4d_cuda_kernels_elementwise_count; i++) {
        const s4d_kernel *k = s4d_cuda_kernels_elementwise[i];
        if (strcmp(k->op_type, op_type) == 0 && k->since_version <= opset &&
            (!best || k->since_version > best->since_version))
            best = k;
    }
    return best;
}

/* Attributes; names and string values are literals, so copies stay valid. */
struct Attrs {
    std::vector<s4d_attr> list;

    Attrs &i(const char *name, int64_t v)
    {
        s4d_attr a = make(name, S4D_ATTR_INT);
        a.i = v;
        list.push_back(a);
        return *this;
    }
    Attrs &f(const char *name, float v)
    {
        s4d_attr a = make(name, S4D_ATTR_FLOAT);
        a.f = v;
        list.push_back(a);
        return *this;
    }
    Attrs &ints(const char *name, const std::vector<int64_t> &v)
    {
        keep_i.push_back(std::make_shared<std::vector<int64_t>>(v));
        s4d_attr a = make(name, S4D_ATTR_INTS);
        a.ints = keep_i.back()->data();
        a.count = v.size();
        list.push_back(a);
        return *this;
    }
    Attrs &floats(const char *name, const std::vector<float> &v)
    {
        keep_f.push_back(std::make_shared<std::vector<float>>(v));
        s4d_attr a = make(name, S4D_ATTR_FLOATS);
        a.floats = keep_f.back()->data();
        a.count = v.size();
        list.push_back(a);
        return *this;
    }
    std::vector<std::shared_ptr<std::vector<int64_t>>> keep_i;
    std::vector<std::shared_ptr<std::vector<float>>> keep_f;
    Attrs &s(const char *name, const char *v)
    {
        s4d_attr a = make(name, S4D_ATTR_STRING);
        a.s = (char *)v;
        a.s_len = strlen(v);
        list.push_back(a);
        return *this;
    }
    static s4d_attr make(const char *name, s4d_attr_type type)
    {
        s4d_attr a;
        memset(&a, 0, sizeof a);
        a.name = (char *)name;
        a.type = type;
        return a;
    }
};

/* A context for one node of schema with one output out; params sized for the schema. */
s4d_op_ctx op_ctx(const std::string &what, const s4d_op_schema *schema, int opset, const Attrs &attrs,
                  std::vector<s4d_tensor> &tin, int num_inputs, s4d_tensor *out, std::vector<char> &params,
                  char *err, size_t err_size)
{
    s4d_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.node_name = what.c_str();
    ctx.op_type = schema->op_type;
    ctx.opset = opset;
    ctx.num_attrs = (int)attrs.list.size();
    ctx.attrs = attrs.list.data();
    ctx.num_inputs = num_inputs;
    ctx.inputs = tin.data();
    ctx.num_outputs = 1;
    ctx.outputs = out;
    ctx.params = schema->params_size ? params.data() : nullptr;
    ctx.schema = schema;
    ctx.err = err;
    ctx.err_size = err_size;
    return ctx;
}

/*
 * Runs op_type on ins (nullptr: an omitted optional input) through the host
 * reference and through the CUDA kernel's glue; inputs whose bit is set in
 * const_mask carry data at infer time (constants). Returns false on a
 * mismatch; a node the schema refuses (a dtype it does not take) is skipped.
 * expect: when given, the host reference's output must also be these bits.
 */
bool check_op(const std::string &what, const char *op_type, int opset, const Attrs &attrs,
              const std::vector<Buf *> &ins, unsigned const_mask = 0, bool shift_out = false,
              const Buf *expect = nullptr)
{
    /* The fused ops of the family are of the engine's domain. */
    const char *domain = strncmp(op_type, "Fused", 5) == 0 ? "s4d" : "";
    const s4d_op_schema *schema = s4d_op_find_schema(domain, op_type, opset);
    const s4d_kernel *kernel = cuda_kernel(op_type, opset);
    if (!schema || !kernel || kernel->since_version != schema->since_version) {
        fprintf(stderr, "FAIL %s: no schema or no matching CUDA kernel for %s at opset %d\n",
                what.c_str(), op_type, opset);
        g_failures++;
        return false;
    }
    std::vector<s4d_tensor> tin(ins.size() + 1);
    for (size_t i = 0; i < ins.size(); i++) {
        if (!ins[i]) {
            memset(&tin[i], 0, sizeof tin[i]);
            tin[i].rank = -1;
            continue;
        }
        tin[i] = ins[i]->t;
        if (!(const_mask >> i & 1u))
            tin[i].data = nullptr;
    }
    s4d_tensor out;
    memset(&out, 0, sizeof out);
    out.rank = -1;
    std::vector<char> params(schema->params_size + 8, 0);
    char err[512] = "";
    s4d_op_ctx ctx = op_ctx(what, schema, opset, attrs, tin, (int)ins.size(), &out, params, err, sizeof err);
    s4d_status st = schema->infer(&ctx);
    if (st != S4D_OK) {
        g_skipped++;
        return true;
    }
    std::vector<int64_t> dims(out.dims, out.dims + out.rank);
    Buf want(out.dtype, dims), got(out.dtype, dims, shift_out);
    for (size_t i = 0; i < ins.size(); i++)
        if (ins[i])
            tin[i].data = ins[i]->t.data;
    ctx.outputs = &want.t;
    if ((st = schema->run(&ctx)) != S4D_OK) {
        fprintf(stderr, "FAIL %s: host reference failed: %s\n", what.c_str(), err);
        g_failures++;
        return false;
    }
    if (expect && (!s4d_tensor_same_dims(&want.t, &expect->t) ||
                   !same((what + ": host reference vs expected").c_str(), want, *expect))) {
        fprintf(stderr, "FAIL %s: the host reference differs from the expected output\n", what.c_str());
        g_failures++;
        return false;
    }
    ctx.outputs = &got.t;
    if (kernel->supports && (st = kernel->supports(&ctx)) != S4D_OK) {
        fprintf(stderr, "FAIL %s: the CUDA kernel refuses it: %s\n", what.c_str(), err);
        g_failures++;
        return false;
    }
    if ((st = kernel->run(&ctx)) != S4D_OK) {
        fprintf(stderr, "FAIL %s: the CUDA kernel failed: %s\n", what.c_str(), err);
        g_failures++;
        return false;
    }
    g_runs++;
    if (!same(what.c_str(), got, want)) {
        g_failures++;
        return false;
    }
    return true;
}

const s4d_dtype ALL_NUMERIC[] = {S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT16, S4D_DTYPE_FLOAT64,
                                 S4D_DTYPE_INT8,    S4D_DTYPE_UINT8,   S4D_DTYPE_INT16,
                                 S4D_DTYPE_UINT16,  S4D_DTYPE_INT32,   S4D_DTYPE_UINT32,
                                 S4D_DTYPE_INT64,   S4D_DTYPE_UINT64};

/* ---- groups ---- */

/* Every kernel of the table serves the schema of the same op and since-version. */
void group_table()
{
    for (size_t i = 0; i < s4d_cuda_kernels_elementwise_count; i++) {
        const s4d_kernel *k = s4d_cuda_kernels_elementwise[i];
        const s4d_op_schema *s = s4d_op_find_schema(k->domain, k->op_type, k->since_version);
        g_runs++;
        if (!s || s->since_version != k->since_version || !k->run) {
            fprintf(stderr, "FAIL table: kernel %s/%d has no schema of that version\n", k->op_type,
                    k->since_version);
            g_failures++;
        }
    }
}

/* Division by multiply-high against the divide instruction, over edge divisors and numerators. */
void group_fastdiv()
{
    std::vector<uint64_t> ds = {1, 2, 3, 5, 6, 7, 11, 13, 256, 255, 257, 11700, 70001, 65535, 65536,
                                (1ull << 31) - 1, 1ull << 31, (1ull << 31) + 1, (1ull << 32) - 1,
                                1ull << 32, (1ull << 32) + 1, 1ull << 62, (1ull << 63) - 1};
    for (int i = 0; i < 200; i++)
        ds.push_back(1 + g_rng() % (i < 100 ? 100000 : (1ull << 63) - 1));
    for (uint64_t d : ds) {
        s4d_ew::FastDiv f = s4d_ew::make_fast_div(d);
        std::vector<uint64_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, (1ull << 63) - 1,
                                    (1ull << 63) - 1 - ((1ull << 63) - 1) % d, (1ull << 32) - 1};
        for (int i = 0; i < 2000; i++)
            ns.push_back(g_rng() >> (1 + g_rng() % 63));
        for (uint64_t n : ns) {
            if (n >= (1ull << 63))
                continue;
            g_runs++;
            if (f.div(n) != n / d) {
                fprintf(stderr, "FAIL fastdiv: %llu / %llu gives %llu\n", (unsigned long long)n,
                        (unsigned long long)d, (unsigned long long)f.div(n));
                g_failures++;
                return;
            }
        }
    }
}

/* Refusals: a node without params, and launcher arguments outside what the kernels have. */
void group_errors()
{
    auto expect = [](bool ok, const char *what) {
        g_runs++;
        if (!ok) {
            fprintf(stderr, "FAIL errors: %s was accepted\n", what);
            g_failures++;
        }
    };
    Buf x(S4D_DTYPE_FLOAT32, {4, 4}), y(S4D_DTYPE_FLOAT32, {4, 4});
    s4d_tensor ins[2] = {x.t, x.t};
    char err[256] = "";
    s4d_op_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.node_name = "n";
    ctx.op_type = "Add";
    ctx.num_inputs = 2;
    ctx.inputs = ins;
    ctx.num_outputs = 1;
    ctx.outputs = &y.t;
    ctx.err = err;
    ctx.err_size = sizeof err;
    for (const char *op : {"Add", "Relu", "IsInf"}) {
        const s4d_kernel *k = cuda_kernel(op, 17);
        err[0] = 0;
        expect(k && k->supports && k->supports(&ctx) != S4D_OK && strstr(err, "parameters"),
               "a node without params");
        err[0] = 0;
        expect(k && k->run(&ctx) != S4D_OK && strstr(err, "parameters"), "running without params");
    }
    s4d_cu_bcast g;
    memset(&g, 0, sizeof g);
    g.rank = 1;
    g.num_inputs = 2;
    g.dims[0] = 16;
    g.strides[0][0] = g.strides[1][0] = 1;
    expect(s4d_cu_binary(S4D_BINOP_COUNT, S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT32, y.t.data,
                         x.t.data, x.t.data, &g, nullptr) == cudaErrorInvalidValue, "an unknown binary op");
    expect(s4d_cu_binary(S4D_BIN_ADD, S4D_DTYPE_FLOAT32, S4D_DTYPE_INT32, S4D_DTYPE_FLOAT32, y.t.data,
                         x.t.data, x.t.data, &g, nullptr) == cudaErrorInvalidValue, "Add of two dtypes");
    expect(s4d_cu_binary(S4D_BIN_AND, S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT32, S4D_DTYPE_BOOL, y.t.data,
                         x.t.data, x.t.data, &g, nullptr) == cudaErrorInvalidValue, "And of floats");
    expect(s4d_cu_binary(S4D_BIN_SUB, S4D_DTYPE_BOOL, S4D_DTYPE_BOOL, S4D_DTYPE_BOOL, y.t.data, x.t.data,
                         x.t.data, &g, nullptr) == cudaErrorInvalidValue, "Sub of bools");
    g.rank = 9;
    expect(s4d_cu_binary(S4D_BIN_ADD, S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT32, y.t.data,
                         x.t.data, x.t.data, &g, nullptr) == cudaErrorInvalidValue, "rank 9");
    g.rank = 1;
    g.num_inputs = 3;
    expect(s4d_cu_where(3, y.t.data, x.t.data, x.t.data, x.t.data, &g, nullptr) == cudaErrorInvalidValue,
           "Where of 3-byte elements");
    s4d_cu_unary_args a;
    memset(&a, 0, sizeof a);
    expect(s4d_cu_unary(S4D_UN_NOT, S4D_DTYPE_FLOAT32, y.t.data, x.t.data, 16, &a, nullptr) ==
               cudaErrorInvalidValue, "Not of floats");
    expect(s4d_cu_unary(S4D_UN_EXP, S4D_DTYPE_INT32, y.t.data, x.t.data, 16, &a, nullptr) ==
               cudaErrorInvalidValue, "Exp of integers");
    expect(s4d_cu_cast(S4D_DTYPE_STRING, S4D_DTYPE_FLOAT32, y.t.data, x.t.data, 16, nullptr) ==
               cudaErrorInvalidValue, "Cast of strings");
    expect(s4d_cu_is_class(0, 0, 0, S4D_DTYPE_INT32, y.t.data, x.t.data, 16, nullptr) ==
               cudaErrorInvalidValue, "IsNaN of integers");
}

struct Pattern {
    const char *name;
    std::vector<int64_t> a, b;
    bool shifted;
};

const Pattern PATTERNS[] = {
    {"same_odd", {2, 3, 5, 7}, {2, 3, 5, 7}, false},
    {"same_odd_shifted", {2, 3, 5, 7}, {2, 3, 5, 7}, true},
    {"same_packs", {4, 6, 16}, {4, 6, 16}, false},
    {"scalar_b", {3, 5, 16}, {}, false},
    {"scalar_a", {}, {3, 5, 7}, false},
    {"one_b", {3, 5, 16}, {1}, true},
    {"row_b", {4, 6, 16}, {16}, false},
    {"row_b_shifted", {4, 6, 16}, {16}, true},
    {"row_a", {16}, {4, 6, 16}, false},
    {"row_odd", {6, 5}, {5}, false},
    {"column", {4, 6, 1}, {4, 6, 16}, false},
    {"gap", {5, 1, 16}, {1, 6, 16}, false},
    {"gap_last", {5, 6, 1}, {1, 6, 3}, false},
    {"alternating5", {2, 1, 4, 1, 3}, {1, 5, 1, 6, 1}, false},
    {"ones", {1, 1, 1}, {1}, false},
    {"rank8", {2, 1, 2, 1, 2, 1, 2, 16}, {1, 3, 1, 2, 1, 2, 1, 16}, false},
    {"many_rows", {70001, 3}, {1, 3}, false},
    {"many_rows_packs", {9001, 16}, {16}, false},
    {"empty", {0, 8}, {8}, false},
};

struct BinOp {
    const char *op;
    int opset;
    int fmod;
    bool logic;
};

const BinOp BINARY_OPS[] = {
    {"Add", 14, -1, false},         {"Sub", 14, -1, false},  {"Mul", 14, -1, false},
    {"Div", 14, -1, false},         {"Pow", 15, -1, false},  {"Mod", 13, 0, false},
    {"Mod", 13, 1, false},          {"PRelu", 16, -1, false}, {"Equal", 13, -1, false},
    {"Greater", 13, -1, false},     {"Less", 13, -1, false}, {"GreaterOrEqual", 16, -1, false},
    {"LessOrEqual", 16, -1, false}, {"Min", 13, -1, false},  {"Max", 13, -1, false},
    {"Sum", 13, -1, false},         {"Mean", 13, -1, false}, {"And", 7, -1, true},
    {"Or", 7, -1, true},            {"Xor", 7, -1, true},    {"Equal", 13, -2, true},
};

void group_binary()
{
    for (const BinOp &op : BINARY_OPS) {
        Attrs attrs;
        if (op.fmod >= 0)
            attrs.i("fmod", op.fmod);
        std::vector<s4d_dtype> dts(ALL_NUMERIC, ALL_NUMERIC + 11);
        if (op.logic)
            dts = {S4D_DTYPE_BOOL};
        for (s4d_dtype dt : dts) {
            for (const Pattern &p : PATTERNS) {
                Buf a(dt, p.a, p.shifted), b(dt, p.b, p.shifted);
                fill(a, WIDE);
                fill(b, SMALL);
                std::string what = std::string(op.op) + (op.fmod == 1 ? "(fmod)" : "") + " " +
                                   s4d_dtype_name(dt) + " " + p.name;
                check_op(what, op.op, op.opset, attrs, {&a, &b}, 0, p.shifted);
            }
        }
    }
    /* More than 65536 blocks of one-by-one work: the grid-stride loop wraps. */
    Buf a(S4D_DTYPE_FLOAT32, {5700001, 3}), b(S4D_DTYPE_FLOAT32, {3});
    fill(a, WIDE);
    fill(b, WIDE);
    check_op("Sub float32 grid_stride", "Sub", 14, Attrs(), {&a, &b});
    /* Pow with mixed types, through the run-time dtype kernel. */
    const s4d_dtype bases[] = {S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT16, S4D_DTYPE_FLOAT64,
                               S4D_DTYPE_INT32, S4D_DTYPE_INT64};
    for (s4d_dtype ta : bases)
        for (s4d_dtype tb : ALL_NUMERIC) {
            if (ta == tb)
                continue;
            Buf x(ta, {3, 16}), y(tb, {16});
            fill(x, SMALL);
            fill(y, SMALL);
            check_op(std::string("Pow ") + s4d_dtype_name(ta) + "^" + s4d_dtype_name(tb), "Pow", 15,
                     Attrs(), {&x, &y});
        }
}

void group_variadic()
{
    const std::vector<int64_t> shapes[] = {{4, 1, 16}, {1, 6, 16}, {16}, {4, 6, 1}};
    const char *ops[] = {"Sum", "Mean", "Min", "Max"};
    for (const char *op : ops)
        for (s4d_dtype dt : ALL_NUMERIC)
            for (int k = 1; k <= 4; k++) {
                std::vector<BufP> bufs;
                std::vector<Buf *> ins;
                for (int i = 0; i < k; i++) {
                    bufs.emplace_back(new Buf(dt, shapes[k == 1 ? 1 : i]));
                    fill(*bufs.back(), WIDE);
                    ins.push_back(bufs.back().get());
                }
                check_op(std::string(op) + " " + s4d_dtype_name(dt) + " x" + std::to_string(k), op, 13,
                         Attrs(), ins);
            }
}

struct UnOp {
    const char *op;
    int opset;
    Attrs attrs;
};

void group_unary()
{
    std::vector<UnOp> ops;
    for (const char *op : {"Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Reciprocal", "Exp", "Log", "Neg",
                           "Abs", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
                           "Acosh", "Atanh", "Floor", "Ceil", "Round", "Sign", "HardSwish", "Softplus",
                           "Softsign", "Mish"})
        ops.push_back({op, 20, Attrs()});
    ops.push_back({"Celu", 12, Attrs().f("alpha", 0.8f)});
    ops.push_back({"ThresholdedRelu", 10, Attrs().f("alpha", 0.5f)});
    ops.push_back({"LeakyRelu", 16, Attrs().f("alpha", 0.1f)});
    ops.push_back({"LeakyRelu", 16, Attrs()});
    ops.push_back({"Elu", 6, Attrs().f("alpha", 0.7f)});
    ops.push_back({"Selu", 6, Attrs().f("alpha", 1.5f).f("gamma", 1.1f)});
    ops.push_back({"Selu", 6, Attrs()});
    ops.push_back({"HardSigmoid", 6, Attrs().f("alpha", 0.3f).f("beta", 0.4f)});
    ops.push_back({"Gelu", 20, Attrs()});
    ops.push_back({"Gelu", 20, Attrs().s("approximate", "tanh")});
    const int64_t sizes[] = {1221, 16, 3, 0};
    for (const UnOp &op : ops)
        for (s4d_dtype dt : ALL_NUMERIC)
            for (int64_t n : sizes)
                for (int shift = 0; shift < 2; shift++) {
                    Buf x(dt, {n}, shift != 0);
                    fill(x, WIDE);
                    check_op(std::string(op.op) + " " + s4d_dtype_name(dt) + " n=" + std::to_string(n) +
                                 (shift ? " shifted" : ""),
                             op.op, op.opset, op.attrs, {&x}, 0, shift != 0);
                }
    for (int64_t n : {1221L, 32L, 5L})
        for (int shift = 0; shift < 2; shift++) {
            Buf x(S4D_DTYPE_BOOL, {n}, shift != 0);
            fill(x, BOOLS);
            check_op("Not n=" + std::to_string(n), "Not", 1, Attrs(), {&x}, 0, shift != 0);
        }
    for (s4d_dtype dt : {S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT16, S4D_DTYPE_FLOAT64, S4D_DTYPE_BFLOAT16}) {
        Buf x(dt, {3, 16});
        fill(x, WIDE);
        std::string n = s4d_dtype_name(dt);
        check_op("IsNaN " + n, "IsNaN", 9, Attrs(), {&x});
        check_op("IsInf " + n, "IsInf", 10, Attrs(), {&x});
        check_op("IsInf pos " + n, "IsInf", 10, Attrs().i("detect_negative", 0), {&x});
        check_op("IsInf neg " + n, "IsInf", 10, Attrs().i("detect_positive", 0), {&x});
    }
}

void group_clip()
{
    for (s4d_dtype dt : {S4D_DTYPE_FLOAT32, S4D_DTYPE_FLOAT16}) {
        Buf x(dt, {6, 21});
        fill(x, WIDE);
        check_op(std::string("Clip attributes ") + s4d_dtype_name(dt), "Clip", 10,
                 Attrs().f("min", -1.5f).f("max", 2.25f), {&x});
        check_op(std::string("Clip no attributes ") + s4d_dtype_name(dt), "Clip", 6, Attrs(), {&x});
    }
    for (s4d_dtype dt : ALL_NUMERIC) {
        Buf x(dt, {6, 21}), lo(dt, {}), hi(dt, {1});
        fill(x, WIDE);
        fill(lo, SMALL);
        fill(hi, SMALL);
        s4d_store_f64(dt, lo.t.data, 0, -3);
        s4d_store_f64(dt, hi.t.data, 0, 2);
        if (dt == S4D_DTYPE_INT64 || dt == S4D_DTYPE_UINT64) {
            /* Bounds a double would round. */
            int64_t l = dt == S4D_DTYPE_INT64 ? -(1ll << 61) - 3 : (1ll << 40) + 1, h = (1ll << 62) + 1;
            memcpy(lo.t.data, &l, 8);
            memcpy(hi.t.data, &h, 8);
        }
        std::string n = s4d_dtype_name(dt);
        /* Constants at build time, read when run, one of each, one or both omitted. */
        for (unsigned mask = 0; mask < 8; mask++)
            check_op("Clip " + n + " const_mask=" + std::to_string(mask), "Clip", 13, Attrs(),
                     {&x, &lo, &hi}, mask);
        check_op("Clip " + n + " max only", "Clip", 13, Attrs(), {&x, nullptr, &hi}, 1);
        check_op("Clip " + n + " min only runtime", "Clip", 13, Attrs(), {&x, &lo}, 0);
        check_op("Clip " + n + " none", "Clip", 13, Attrs(), {&x});
        Buf xs(dt, {1221}, true);
        fill(xs, WIDE);
        check_op("Clip " + n + " shifted", "Clip", 13, Attrs(), {&xs, &lo, &hi}, 0, true);
    }
}

void group_where()
{
    struct W {
        const char *name;
        std::vector<int64_t> c, x, y;
        bool shifted;
    };
    const W specs[] = {
        {"same", {4, 6, 16}, {4, 6, 16}, {4, 6, 16}, false},
        {"same_shifted", {4, 6, 16}, {4, 6, 16}, {4, 6, 16}, true},
        {"cond_bcast_scalar_y", {1, 1, 1}, {1, 90, 256}, {}, false},
        {"three_way", {2, 1, 5}, {1, 3, 1}, {2, 3, 5}, false},
        {"rows", {6, 1}, {6, 32}, {32}, false},
        {"packs", {4, 64}, {4, 64}, {64}, false},
        {"odd", {3, 7}, {3, 7}, {}, false},
        {"empty", {1, 8, 0, 4}, {1, 8, 0, 4}, {1}, false},
    };
    std::vector<s4d_dtype> dts(ALL_NUMERIC, ALL_NUMERIC + 11);
    dts.push_back(S4D_DTYPE_BOOL);
    dts.push_back(S4D_DTYPE_BFLOAT16);
    for (s4d_dtype dt : dts)
        for (const W &w : specs) {
            Buf c(S4D_DTYPE_BOOL, w.c, w.shifted), x(dt, w.x, w.shifted), y(dt, w.y, w.shifted);
            fill(c, BOOLS);
            fill(x, WIDE);
            fill(y, WIDE);
            check_op(std::string("Where ") + s4d_dtype_name(dt) + " " + w.name, "Where", 16, Attrs(),
                     {&c, &x, &y}, 0, w.shifted);
        }
}

void group_cast()
{
    std::vector<s4d_dtype> dts(ALL_NUMERIC, ALL_NUMERIC + 11);
    dts.push_back(S4D_DTYPE_BOOL);
    dts.push_back(S4D_DTYPE_BFLOAT16);
    for (s4d_dtype from : dts)
        for (s4d_dtype to : dts)
            for (int64_t n : {1000L, 13L})
                for (int shift = 0; shift < 2; shift++) {
                    Buf x(from, {n}, shift != 0);
                    fill(x, WIDE);
                    if (s4d_dtype_is_float(from) && n > 20) {
                        /* Out of every integer range, and rounding cases of float16. */
                        const double big[] = {1e6, -1e6, 3e9, -3e9, 1e20, -1e20, 65519.0, 65520.0,
                                              0.49999997, 1e-8, 255.5, -128.5};
                        for (int i = 0; i < 12; i++)
                            s4d_store_f64(from, x.t.data, 10 + i, big[i]);
                    }
                    std::string what = std::string("Cast ") + s4d_dtype_name(from) + "->" +
                                       s4d_dtype_name(to) + " n=" + std::to_string(n) +
                                       (shift ? " shifted" : "");
                    check_op(what, "Cast", 13, Attrs().i("to", to), {&x}, 0,
                             shift != 0);
                }
    Buf x(S4D_DTYPE_FLOAT32, {77}), like(S4D_DTYPE_FLOAT16, {1});
    fill(x, WIDE);
    check_op("CastLike float32->float16", "CastLike", 15, Attrs(), {&x, &like});
}

/*
 * s4d::FusedPointwise: fixed programs that use every opcode, then random
 * programs over float32 or float16 and bool values, on shapes that broadcast,
 * pack or not, are empty or sit one element off alignment.
 */
struct PwShape {
    const char *name;
    std::vector<std::vector<int64_t>> in; /* per input, cycled */
    bool shifted;
};

const PwShape kPwShapes[] = {
    {"same", {{4, 6, 16}}, false},
    {"same_shifted", {{4, 6, 16}}, true},
    {"bias_scalar", {{1, 90, 256}, {256}, {}}, false},
    {"three_way", {{2, 1, 5}, {1, 3, 1}, {2, 3, 5}}, false},
    {"rows_odd", {{900, 13}, {900, 1}, {13}}, false},
    {"head_kps", {{1, 90, 1, 3}, {7, 3}}, false},
    {"odd", {{3, 7}}, false},
    {"walk_4d", {{3, 5, 7, 2}, {3, 1, 7, 1}, {5, 1, 2}}, false},
    {"empty", {{1, 8, 0, 4}, {1}}, false},
};

/* Runs the program (code, consts) on random inputs of dtypes in_dt and shapes sh through both sides. */
void pw_run(const std::string &what, const std::vector<int64_t> &code, const std::vector<float> &consts,
            const std::vector<s4d_dtype> &in_dt, const PwShape &sh)
{
    std::vector<BufP> bufs;
    std::vector<Buf *> ins;
    for (size_t k = 0; k < in_dt.size(); k++) {
        bufs.push_back(BufP(new Buf(in_dt[k], sh.in[k % sh.in.size()], sh.shifted)));
        fill(*bufs.back(), in_dt[k] == S4D_DTYPE_BOOL ? BOOLS : WIDE);
        ins.push_back(bufs.back().get());
    }
    Attrs a;
    a.ints("program", code);
    if (!consts.empty())
        a.floats("constants", consts);
    check_op(what + " " + sh.name, "FusedPointwise", 1, a, ins, 0, sh.shifted);
}

void group_pointwise()
{
    const s4d_dtype F = S4D_DTYPE_FLOAT32, B = S4D_DTYPE_BOOL, H = S4D_DTYPE_FLOAT16;
    /* Every float opcode on (x, y), then a bool tail: Greater -> And/Or/Xor/Not -> Where -> Cast. */
    for (const PwShape &sh : kPwShapes) {
        for (int op = S4D_PW_ADD; op <= S4D_PW_CLIP; op++) {
            bool bin = op <= S4D_PW_MAX;
            std::vector<int64_t> code = {op, 0, bin ? 1 : -1, -1};
            std::vector<float> consts;
            if (op == S4D_PW_CLIP) {
                consts = {-0.75f, 1.5f};
                code = {op, 0, 0, 1};
            }
            /* Mul by the second input so that it is read. */
            if (!bin)
                code.insert(code.end(), {S4D_PW_MUL, 2, 1, -1});
            pw_run(std::string("pointwise op ") + std::to_string(op), code, consts, {F, F}, sh);
        }
        std::vector<int64_t> logic = {
            S4D_PW_GREATER, 0, 1, -1,  /* 3 */
            S4D_PW_LESS_EQUAL, 1, 0, -1, /* 4 */
            S4D_PW_AND, 3, 2, -1,      /* 5 */
            S4D_PW_OR, 4, 5, -1,       /* 6 */
            S4D_PW_XOR, 6, 3, -1,      /* 7 */
            S4D_PW_NOT, 7, -1, -1,     /* 8 */
            S4D_PW_EQUAL, 8, 2, -1,    /* 9 */
            S4D_PW_WHERE, 9, 0, 1,     /* 10 */
            S4D_PW_EQUAL, 10, 0, -1,   /* 11 */
            S4D_PW_GREATER_EQUAL, 10, 1, -1, /* 12 */
            S4D_PW_LESS, 0, 10, -1,    /* 13 */
            S4D_PW_WHERE, 11, 12, 13,  /* 14: bool values */
            S4D_PW_CAST, 14, F, -1,    /* 15 */
            S4D_PW_CAST, 10, B, -1,    /* 16: NaN is true */
            S4D_PW_CAST, 16, F, -1,    /* 17 */
            S4D_PW_ADD, 15, 17, -1,    /* 18 */
            S4D_PW_CAST, 18, H, -1,    /* 19: rounds */
            S4D_PW_CAST, 19, F, -1,    /* 20 */
            S4D_PW_MUL, 20, 10, -1,    /* 21 */
        };
        pw_run("pointwise logic", logic, {}, {F, F, B}, sh);
        std::vector<int64_t> to_bool = logic;
        to_bool.insert(to_bool.end(), {S4D_PW_CAST, 21, B, -1});
        pw_run("pointwise bool out", to_bool, {}, {F, F, B}, sh);
        /* float16 in and out: computed in float32, rounded once at the output. */
        pw_run("pointwise float16", {S4D_PW_MUL, 0, 1, -1, S4D_PW_EXP, 2, -1, -1, S4D_PW_SIGMOID, 3, -1, -1,
                                     S4D_PW_CLIP, 4, 0, -1, S4D_PW_SUB, 5, 0, -1},
               {0.25f}, {H, H}, sh);
    }
    /* Random programs. */
    std::mt19937_64 rng(7);
    for (int t = 0; t < 400; t++) {
        s4d_dtype fdt = t % 4 == 3 ? H : F;
        int nin = 1 + (int)(rng() % 4), ninstr = 1 + (int)(rng() % 14);
        std::vector<s4d_dtype> dts;
        for (int k = 0; k < nin; k++)
            dts.push_back(k > 0 && rng() % 3 == 0 ? B : fdt);
        std::vector<int> slot(dts.begin(), dts.end());
        std::vector<int64_t> code;
        std::vector<float> consts;
        auto pick = [&](int dt) {
            std::vector<int> c;
            for (size_t s = 0; s < slot.size(); s++)
                if (slot[s] == dt)
                    c.push_back((int)s);
            /* Later slots more often, so that the program is a chain more than a fan. */
            if (c.empty())
                return -1;
            size_t i = c.size() - 1 - (size_t)(rng() % c.size()) * (rng() % 2);
            return c[i];
        };
        for (int i = 0; i < ninstr; i++) {
            int op = (int)(rng() % S4D_PW_OP_COUNT), a = -1, b = -1, c = -1, out = -1;
            if (op <= S4D_PW_MAX || (op >= S4D_PW_EQUAL && op <= S4D_PW_LESS_EQUAL)) {
                a = pick(fdt), b = pick(fdt);
                out = op <= S4D_PW_MAX ? fdt : B;
            } else if (op <= S4D_PW_ATAN) {
                a = pick(fdt), out = fdt;
            } else if (op == S4D_PW_CLIP) {
                a = pick(fdt), out = fdt;
                float lo = (float)uniform(-3, 1), hi = lo + (float)uniform(0, 3);
                b = rng() % 4 ? (int)consts.size() : -1;
                if (b >= 0)
                    consts.push_back(lo);
                c = rng() % 4 ? (int)consts.size() : -1;
                if (c >= 0)
                    consts.push_back(hi);
            } else if (op == S4D_PW_WHERE) {
                int vdt = rng() % 4 ? fdt : B;
                a = pick(B), b = pick(vdt), c = pick(vdt), out = vdt;
                if (b < 0 || c < 0)
                    a = -1;
            } else if (op <= S4D_PW_XOR) {
                a = pick(B), b = pick(B), out = B;
            } else if (op == S4D_PW_NOT) {
                a = pick(B), out = B;
            } else {
                a = (int)(rng() % slot.size());
                out = rng() % 2 ? fdt : B;
                b = out;
            }
            if (a < 0 || (op != S4D_PW_CLIP && op != S4D_PW_CAST && b == -1 && (op <= S4D_PW_MAX ||
                (op >= S4D_PW_EQUAL && op <= S4D_PW_XOR)))) {
                i--;
                continue;
            }
            code.insert(code.end(), {op, a, b, c});
            slot.push_back(out);
        }
        std::vector<bool> read(nin, false);
        for (size_t w = 0; w < code.size(); w += 4) {
            int op = (int)code[w];
            int n = op == S4D_PW_WHERE ? 3 : op == S4D_PW_CLIP || op == S4D_PW_CAST ||
                    (op >= S4D_PW_NEG && op <= S4D_PW_ATAN) || op == S4D_PW_NOT ? 1 : 2;
            for (int j = 1; j <= n; j++)
                if (code[w + j] < nin)
                    read[code[w + j]] = true;
        }
        bool all = true;
        for (bool r : read)
            all = all && r;
        if (!all) {
            t--;
            continue;
        }
        pw_run("pointwise random " + std::to_string(t), code, consts, dts,
               kPwShapes[t % (sizeof kPwShapes / sizeof kPwShapes[0])]);
    }
}

/*
 * FusedPointwise with strided views (the views attribute): each viewed input is
 * also copied out element by element into a plain tensor of the view's shape,
 * and the program run on those copies, without views, gives the output that the
 * host reference and the CUDA kernel with views must both give bit for bit.
 */
struct PwView {
    const char *name;
    std::vector<int64_t> src;                 /* the input's own shape */
    int64_t offset;
    std::vector<int64_t> dims, strides;       /* empty dims: read as it lies */
};

void pw_view_case(const std::string &what, const std::vector<int64_t> &code, const std::vector<PwView> &in,
                  s4d_dtype dt)
{
    std::vector<BufP> src, plain;
    std::vector<Buf *> src_p, plain_p;
    std::vector<int64_t> views;
    size_t es = s4d_dtype_size(dt);
    for (size_t k = 0; k < in.size(); k++) {
        src.push_back(BufP(new Buf(dt, in[k].src, k % 2 == 1)));
        fill(*src.back(), dt == S4D_DTYPE_BOOL ? BOOLS : WIDE);
        src_p.push_back(src.back().get());
        if (in[k].dims.empty()) {
            plain_p.push_back(src.back().get());
            continue;
        }
        const PwView &v = in[k];
        plain.push_back(BufP(new Buf(dt, v.dims)));
        Buf &c = *plain.back();
        for (int64_t i = 0; i < c.numel(); i++) {
            int64_t o = v.offset, r = i;
            for (int d = (int)v.dims.size() - 1; d >= 0; d--) {
                o += (r % v.dims[d]) * v.strides[d];
                r /= v.dims[d];
            }
            memcpy((char *)c.t.data + (size_t)i * es, (const char *)src.back()->t.data + (size_t)o * es, es);
        }
        plain_p.push_back(&c);
        views.insert(views.end(), {(int64_t)k, v.offset, (int64_t)v.dims.size()});
        views.insert(views.end(), v.dims.begin(), v.dims.end());
        views.insert(views.end(), v.strides.begin(), v.strides.end());
    }
    Attrs plain_a, view_a;
    plain_a.ints("program", code);
    view_a.ints("program", code).ints("views", views);
    /* The expected bits: the program on the copies (checked against the CUDA kernel there too). */
    const s4d_op_schema *schema = s4d_op_find_schema("s4d", "FusedPointwise", 1);
    std::vector<s4d_tensor> tin;
    for (Buf *b : plain_p)
        tin.push_back(b->t);
    s4d_tensor out;
    memset(&out, 0, sizeof out);
    out.rank = -1;
    std::vector<char> params(schema->params_size + 8, 0);
    char err[512] = "";
    s4d_op_ctx ctx = op_ctx(what, schema, 1, plain_a, tin, (int)tin.size(), &out, params, err, sizeof err);
    if (schema->infer(&ctx) != S4D_OK) {
        fprintf(stderr, "FAIL %s: the plain program does not infer: %s\n", what.c_str(), err);
        g_failures++;
        return;
    }
    Buf want(out.dtype, std::vector<int64_t>(out.dims, out.dims + out.rank));
    ctx.outputs = &want.t;
    if (schema->run(&ctx) != S4D_OK) {
        fprintf(stderr, "FAIL %s: the plain program does not run: %s\n", what.c_str(), err);
        g_failures++;
        return;
    }
    int before = g_runs;
    check_op(what + " (copies)", "FusedPointwise", 1, plain_a, plain_p, 0, false, &want);
    check_op(what + " (views)", "FusedPointwise", 1, view_a, src_p, 0, true, &want);
    if (g_runs != before + 2) {
        fprintf(stderr, "FAIL %s: a side was skipped (the schema refused it)\n", what.c_str());
        g_failures++;
    }
}

void group_pointwise_views()
{
    const s4d_dtype F = S4D_DTYPE_FLOAT32, H = S4D_DTYPE_FLOAT16, B = S4D_DTYPE_BOOL;
    const std::vector<int64_t> mul_exp = {S4D_PW_MUL, 0, 1, -1, S4D_PW_EXP, 2, -1, -1};
    for (s4d_dtype dt : {F, H}) {
        std::string t = dt == F ? " float32" : " float16";
        /* Two column slices of one [96, 11] anchor tensor. */
        pw_view_case("columns" + t, mul_exp,
                     {{"a", {96, 11}, 0, {96, 3}, {11, 1}}, {"b", {96, 11}, 3, {96, 3}, {11, 1}}}, dt);
        /* A transposed [6, 40, 3] operand against a plain [40, 6, 3] one (odd inner dim). */
        pw_view_case("transposed" + t, mul_exp,
                     {{"a", {6, 40, 3}, 0, {40, 6, 3}, {3, 120, 1}}, {"b", {40, 6, 3}, 0, {}, {}}}, dt);
        /* Picked coordinates with steps, broadcast along a repeated dim (stride 0), packs of 4. */
        pw_view_case("picked_repeated" + t, mul_exp,
                     {{"a", {8, 13, 3}, 2, {8, 13, 4}, {39, 3, 0}}, {"b", {8, 1, 4}, 0, {}, {}}}, dt);
        /* A view as the output's shape of a larger input at an offset, against a row. */
        pw_view_case("offset_rows" + t, mul_exp,
                     {{"a", {5, 64}, 70, {3, 64}, {64, 1}}, {"b", {64}, 0, {}, {}}}, dt);
        /* Every element read through a 5-D reorder (the aggregation's point layout). */
        pw_view_case("reorder_5d" + t, mul_exp,
                     {{"a", {1, 6, 16, 13, 2}, 0, {1, 16, 13, 6, 2}, {1248, 26, 2, 208, 1}},
                      {"b", {1, 6, 16, 13, 2}, 0, {1, 16, 13, 6, 2}, {1248, 26, 2, 208, 1}}}, dt);
    }
    /* bool through a view: Where(mask view, x, y). */
    pw_view_case("bool_mask", {S4D_PW_NOT, 0, -1, -1, S4D_PW_XOR, 1, 2, -1},
                 {{"m", {7, 9}, 1, {7, 4}, {9, 2}}, {"n", {4}, 0, {}, {}}}, B);
}

} /* namespace */

int main(int argc, char **argv)
{
    const char *group = argc > 1 ? argv[1] : "all";
    struct {
        const char *name;
        void (*fn)();
    } groups[] = {{"table", group_table},   {"errors", group_errors}, {"fastdiv", group_fastdiv},
                  {"binary", group_binary},
                  {"variadic", group_variadic},
                  {"unary", group_unary}, {"clip", group_clip},     {"where", group_where},
                  {"cast", group_cast},     {"pointwise", group_pointwise},
                  {"pointwise_views", group_pointwise_views}};
    int ran = 0;
    for (auto &g : groups)
        if (strcmp(group, "all") == 0 || strcmp(group, g.name) == 0) {
            g.fn();
            ran++;
        }
    if (!ran) {
        fprintf(stderr, "unknown group '%s'\n", group);
        return 2;
    }
    printf("%s: %d checks pass (outputs bit for bit), %d failed, %d combinations the schemas refuse\n", group,
           g_runs - g_failures, g_failures, g_skipped);
    return g_failures ? 1 : 0;
}
