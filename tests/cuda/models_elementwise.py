"""Op models of the element-wise family for device_compare.py: the binary ops with
broadcasting (Add, Sub, Mul, Div, Pow, Mod, PRelu), comparisons, logic, the variadic
Sum/Mean/Min/Max, every unary op, Clip, IsNaN/IsInf, Not, Where, Cast and CastLike,
plus the shapes of the Sparse4Dv3 head and backbone.

A model holds many independent nodes, one output each, named after the op and the
variant (y_<op>_<variant>), so that a case covers a whole op group in two s4dexec runs
and a failure names the node. Tolerances, per case:
  exact (rtol = atol = 0): IEEE arithmetic (+ - * /, sqrt, reciprocal), Min/Max,
    comparisons, logic, Where, Cast, Relu/Neg/Abs/Floor/Ceil/Round/Sign/Clip, the
    piecewise-linear activations, Mod (both devices evaluate fmod in double), every
    integer op and integer Pow: the CUDA kernels round each step as the host does (no
    FMA contraction), so the bits agree; NaN compares equal to NaN;
  float32 transcendental functions (exp, tanh, erf, pow, trigonometric, ...): CUDA's
    are within a few ulp of glibc's: rtol 1e-5 (about 80 ulp), atol 1e-6 for results
    near zero after cancellation (Selu, Elu, Gelu around 0);
  float64 transcendental functions: rtol 1e-12, atol 1e-14 (same reasoning);
  float16: computed in float32 on both devices and rounded to half; a one-ulp float32
    difference can move that rounding by one half ulp: rtol = atol = 1e-3.
Inputs are random (seeded), never all zeros, inside the op's domain (Log, Sqrt, Asin,
Acosh, ...); many carry NaN, infinities, signed zeros, exact halves (Round) and integer
edge cases (division by zero, INT_MIN / -1, wrap-around) on purpose.

Rank-0 tensors are initializers, never graph inputs: device_compare.py saves feeds
through np.ascontiguousarray, which turns a 0-d array into a 1-d one that the engine's
static shapes refuse. Scalars that must be read from device memory have shape [1].
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

import cases
from cases import Case, rand

# The integer widths the node tests use beyond cases.py's list.
cases.NP_TO_ONNX.update({
    np.dtype(np.int16): TensorProto.INT16,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.uint64): TensorProto.UINT64,
})
ONNX = cases.NP_TO_ONNX

EXACT = dict(rtol=0.0, atol=0.0)
F32 = dict(rtol=1e-5, atol=1e-6)
F64 = dict(rtol=1e-12, atol=1e-14)
F16 = dict(rtol=1e-3, atol=1e-3)

ARITH = ["Add", "Sub", "Mul", "Div", "Min", "Max"]
COMPARE = ["Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"]
LOGIC = ["And", "Or", "Xor"]


def bcast_shape(*shapes):
    return list(np.broadcast_shapes(*[tuple(s) for s in shapes]))


def dname(dt):
    return np.dtype(dt).name


class Model:
    """One graph of many nodes. Tensors are added by name; rank-0 ones become initializers."""

    def __init__(self):
        self.nodes, self.inputs, self.consts, self.outputs = [], {}, {}, {}

    def tensor(self, name, arr, const=False):
        assert name not in self.inputs and name not in self.consts, name
        if const or arr.ndim == 0:
            self.consts[name] = arr
        else:
            self.inputs[name] = arr
        return name

    def node(self, op, ins, out, shape, dtype, **attrs):
        self.nodes.append(helper.make_node(op, ins, [out], name=out[2:] if out.startswith("y_") else out,
                                           **attrs))
        self.outputs[out] = (list(shape), np.dtype(dtype))
        return out

    def binary(self, op, a, b, tag):
        """op on tensors a and b (names); "FMod" is Mod with fmod=1."""
        A, B = self.tensor_of(a), self.tensor_of(b)
        onnx_op, attrs = ("Mod", {"fmod": 1}) if op == "FMod" else (op, {})
        dtype = np.bool_ if op in COMPARE + LOGIC else A.dtype
        return self.node(onnx_op, [a, b], f"y_{op.lower()}_{tag}", bcast_shape(A.shape, B.shape), dtype, **attrs)

    def tensor_of(self, name):
        return self.inputs[name] if name in self.inputs else self.consts[name]

    def case(self, name, tol, opset=17):
        g_in = [helper.make_tensor_value_info(k, ONNX[v.dtype], list(v.shape)) for k, v in self.inputs.items()]
        g_out = [helper.make_tensor_value_info(k, ONNX[t], s) for k, (s, t) in self.outputs.items()]
        inits = [numpy_helper.from_array(v, k) for k, v in self.consts.items()]
        g = helper.make_graph(self.nodes, name, g_in, g_out, inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        return Case(name, m, dict(self.inputs), **tol)


def with_specials(a, rng, count=6):
    """a with NaN, +-inf and signed zeros at random places (float arrays of >= 8 elements)."""
    if a.size < 8:
        return a
    a = a.copy()
    flat = a.reshape(-1)
    idx = rng.choice(flat.size, size=min(count, flat.size), replace=False)
    for i, v in zip(idx, [np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan]):
        flat[i] = v
    return a


def int_inputs(rng, dtype, shape_a, shape_b):
    """A over the type's whole range (wrap-around) starting max, min, 0, 7; B small with
    zeros (division by zero) starting 0, -1, 3 for signed types (max / 0, min / -1)."""
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=shape_a, dtype=dtype, endpoint=True)
    a.reshape(-1)[:4] = [info.max, info.min, 0, 7]
    b = rng.integers(max(info.min, -9), min(info.max, 9), size=shape_b, dtype=dtype, endpoint=True)
    b.reshape(-1)[:3] = [0, -1, 3] if info.min < 0 else [0, 1, 3]
    return a, b


# ---- binary ops ----------------------------------------------------------------------

# Broadcast patterns (name, shape of A, shape of B): one-dim geometry with and without a
# tail, scalars (constant and read from device memory), rows, columns, gaps, size-1 dims,
# rank 8, more rows than a grid dimension holds, and an empty output.
PATTERNS = [
    ("same_odd", [2, 3, 5, 7], [2, 3, 5, 7]),
    ("same_packs", [4, 6, 8], [4, 6, 8]),
    ("scalar_b", [3, 5, 8], []),
    ("scalar_a", [], [3, 5, 7]),
    ("scalar_b_input", [3, 5, 8], [1]),
    ("row_b", [4, 6, 8], [8]),
    ("row_a", [8], [4, 6, 8]),
    ("row_odd", [6, 5], [5]),
    ("column", [4, 6, 1], [4, 6, 8]),
    ("gap", [5, 1, 8], [1, 6, 8]),
    ("gap_last", [5, 6, 1], [1, 6, 3]),
    ("alternating5", [2, 1, 4, 1, 3], [1, 5, 1, 6, 1]),
    ("ones", [1, 1, 1], [1]),
    ("rank8", [2, 1, 2, 1, 2, 1, 2, 4], [1, 3, 1, 2, 1, 2, 1, 4]),
    ("many_rows", [70001, 3], [1, 3]),
    ("many_rows_packs", [70001, 8], [8]),
    ("empty", [0, 8], [8]),
]


def binary_float_case(rng, dtype, patterns, ops, name, tol=EXACT):
    m = Model()
    for tag, sa, sb in patterns:
        a = with_specials(rand(rng, sa, dtype), rng)
        b = with_specials(rand(rng, sb, dtype), rng)
        A, B = m.tensor(f"A_{tag}", a), m.tensor(f"B_{tag}", b)
        for op in ops:
            if op == "PRelu" and bcast_shape(sa, sb) != list(sa):
                continue  # the slope must broadcast to X
            m.binary(op, A, B, tag)
    return m.case(name, tol, opset=13)


def binary_cases(rng):
    out = []
    ops = ARITH + ["Mod", "FMod", "PRelu"] + COMPARE
    out.append(binary_float_case(rng, np.float32, PATTERNS[:9], ops, "binary_f32_a"))
    out.append(binary_float_case(rng, np.float32, PATTERNS[9:], ops, "binary_f32_b"))
    # Division by zero, ties for Min/Max, signed zeros, infinities.
    m = Model()
    A = m.tensor("A", np.array([1, -1, 0, -0.0, 3, 3, np.inf, -2, 5, np.nan, 0.5, -7], np.float32))
    B = m.tensor("B", np.array([0, 0, 0, 0, 3, -3, np.inf, -0.0, -0.0, 1, 0.5, 2], np.float32))
    for op in ops:
        m.binary(op, A, B, "edges")
    out.append(m.case("binary_f32_edges", EXACT, opset=13))
    # More than 65536 blocks of one-by-one work (rows of 3): the grid-stride loop wraps.
    m = Model()
    m.binary("Sub", m.tensor("A", rand(rng, [5700001, 3])), m.tensor("B", rand(rng, [3])), "grid_stride")
    out.append(m.case("binary_f32_grid_stride", EXACT))
    # float16 computes in float32 and rounds to half: both devices round the same.
    f16 = [p for p in PATTERNS if p[0] in ("same_odd", "scalar_b", "row_b", "row_odd", "column", "gap")]
    out.append(binary_float_case(rng, np.float16, f16 + [("row16", [4, 6, 16], [16])],
                                 ARITH + ["Mod", "FMod", "PRelu"] + COMPARE, "binary_f16"))
    # float64 through the run-time dtype kernel.
    out.append(binary_float_case(rng, np.float64, [p for p in PATTERNS if p[0] in ("row_b", "gap", "scalar_b")],
                                 ops, "binary_f64"))
    # Integers: wrap-around, division and modulo by zero, INT_MIN / -1, both Mod signs.
    m = Model()
    for dt in [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]:
        a, b = int_inputs(rng, dt, [5, 8], [8])
        A, B = m.tensor(f"A_{dname(dt)}", a), m.tensor(f"B_{dname(dt)}", b)
        for op in ARITH + ["Mod", "FMod"] + COMPARE + (["PRelu"] if np.dtype(dt).kind == "i" else []):
            m.binary(op, A, B, dname(dt))
    a, b = int_inputs(rng, np.int64, [3, 1, 4], [1, 5, 1])
    A, B = m.tensor("A_int64_gap", a), m.tensor("B_int64_gap", b)
    for op in ARITH + COMPARE:
        m.binary(op, A, B, "int64_gap")
    out.append(m.case("binary_int", EXACT, opset=13))
    # bool: And, Or, Xor, Equal (16 bools per pack on rows).
    m = Model()
    for tag, sa, sb in [("same", [3, 4, 5], [3, 4, 5]), ("bcast4v3d", [3, 4, 5, 6], [4, 5, 6]),
                        ("bcast4v2d", [3, 4, 5, 6], [5, 6]), ("rows16", [64, 48], [48]),
                        ("column", [7, 1], [7, 33]), ("scalar", [9, 17], [])]:
        a, b = rng.random(sa) > 0.5, np.array(rng.random(sb) > 0.5)
        a.reshape(-1)[0] = True
        A, B = m.tensor(f"A_{tag}", a), m.tensor(f"B_{tag}", b)
        for op in LOGIC + ["Equal"]:
            m.binary(op, A, B, tag)
    out.append(m.case("logic", EXACT))
    return out


def pow_cases(rng):
    out = []
    m = Model()
    m.binary("Pow", m.tensor("A", rand(rng, [4, 6, 8], np.float32, 0.1, 3.0)),
             m.tensor("B", rand(rng, [4, 6, 8], np.float32, -3, 3)), "f32")
    m.binary("Pow", m.tensor("A_row", rand(rng, [5, 7], np.float32, 0.1, 3.0)),
             m.tensor("B_row", rand(rng, [7], np.float32, -3, 3)), "f32_row")
    out.append(m.case("pow_f32", F32, opset=15))
    # Squaring by a broadcast 2 (the LayerNorm pattern) is exact on both devices.
    m = Model()
    m.binary("Pow", m.tensor("A", rand(rng, [6, 40])), m.tensor("two", np.array(2.0, np.float32)), "square")
    out.append(m.case("pow_f32_square", EXACT))
    m = Model()
    m.binary("Pow", m.tensor("A", rand(rng, [5, 16], np.float16, 0.2, 2.0)),
             m.tensor("B", rand(rng, [16], np.float16, -2, 2)), "f16")
    out.append(m.case("pow_f16", F16, opset=15))
    # Mixed and integer types (the node tests' pow_types_*): integer exponents multiply out
    # exactly on both devices, negative ones included.
    m = Model()
    for ta, tb in [(np.float32, np.int32), (np.float32, np.int64), (np.float32, np.uint32),
                   (np.float32, np.uint64), (np.int32, np.int32), (np.int64, np.int64),
                   (np.int32, np.float32), (np.int64, np.float32), (np.float64, np.float64),
                   (np.float64, np.int64)]:
        a = rng.integers(-6, 7, size=[3, 8]).astype(ta)
        b = rng.integers(0, 6, size=[8]).astype(tb)
        b[:2] = [0, 5]
        if np.dtype(ta).kind == "f" and np.dtype(tb).kind != "u":
            b[2] = -2
        a.reshape(-1)[0] = 3
        tag = f"{dname(ta)}_{dname(tb)}"
        m.binary("Pow", m.tensor(f"A_{tag}", a), m.tensor(f"B_{tag}", b), tag)
    out.append(m.case("pow_types", EXACT, opset=15))
    m = Model()
    m.binary("Pow", m.tensor("A", rand(rng, [7, 5], np.float64, 0.1, 4.0)),
             m.tensor("B", rand(rng, [5], np.float64, -2.5, 2.5)), "f64")
    out.append(m.case("pow_f64_fraction", F64, opset=15))
    return out


def variadic_cases(rng):
    out = []
    ops = ["Sum", "Mean", "Min", "Max"]
    m = Model()
    # Three and four inputs of different broadcast shapes, folded in input order.
    shapes = [[4, 1, 8], [1, 6, 8], [8], [4, 6, 1]]
    xs = [m.tensor(f"X{i}", with_specials(rand(rng, s), rng) if i == 0 else rand(rng, s))
          for i, s in enumerate(shapes)]
    for op in ops:
        for k in (3, 4):
            m.node(op, xs[:k], f"y_{op.lower()}_{k}", bcast_shape(*shapes[:k]), np.float32)
    # One input (a copy, or a division by one for Mean), and two.
    x, y = m.tensor("X", rand(rng, [5, 7])), m.tensor("Y", rand(rng, [7]))
    for op in ops:
        m.node(op, [x], f"y_{op.lower()}_1", [5, 7], np.float32)
        m.node(op, [x, y], f"y_{op.lower()}_2", [5, 7], np.float32)
    # float64 Sum/Mean/Max (float16 below); integer Min/Max.
    for dt in [np.float64]:
        xs = [m.tensor(f"X{i}_{dname(dt)}", rand(rng, [3, 16], dt)) for i in range(3)]
        for op in ["Sum", "Mean", "Max"]:
            m.node(op, xs, f"y_{op.lower()}_{dname(dt)}", [3, 16], dt)
    for dt in [np.int32, np.uint8, np.int64, np.uint64]:
        xs = [m.tensor(f"X{i}_{dname(dt)}", int_inputs(rng, dt, [2, 9], [9])[0]) for i in range(3)]
        for op in ["Min", "Max"]:
            m.node(op, xs, f"y_{op.lower()}_{dname(dt)}", [2, 9], dt)
    out.append(m.case("variadic", EXACT, opset=13))
    # float16 Sum/Mean/Max: a device may add in float32 and round once (the guarded
    # device widens float16 layers), one half ulp from rounding after each add.
    m = Model()
    xs = [m.tensor(f"X{i}_f16", rand(rng, [3, 16], np.float16)) for i in range(3)]
    for op in ["Sum", "Mean", "Max"]:
        m.node(op, xs, f"y_{op.lower()}_float16", [3, 16], np.float16)
    out.append(m.case("variadic_f16", F16, opset=13))
    return out


# ---- unary ops -------------------------------------------------------------------------

EXACT_UNARY = ["Relu", "Neg", "Abs", "Floor", "Ceil", "Round", "Sign", "Reciprocal", "LeakyRelu",
               "ThresholdedRelu", "HardSigmoid", "HardSwish", "Softsign"]
APPROX_UNARY = ["Sigmoid", "Tanh", "Exp", "Erf", "Sin", "Cos", "Tan", "Atan", "Sinh", "Cosh", "Asinh",
                "Softplus", "Elu", "Selu", "Celu", "Mish"]
UNARY_ATTRS = {"LeakyRelu": {"alpha": 0.1}, "ThresholdedRelu": {"alpha": 0.5},
               "HardSigmoid": {"alpha": 0.3, "beta": 0.4}, "Elu": {"alpha": 0.7},
               "Selu": {"alpha": 1.5, "gamma": 1.1}, "Celu": {"alpha": 0.8}}
# Ops with a restricted domain: (ops, low, high, exact).
DOMAIN_UNARY = [(["Sqrt"], 0.0, 9.0, True), (["Log"], 0.05, 9.0, False),
                (["Asin", "Acos", "Atanh"], -0.99, 0.99, False), (["Acosh"], 1.0, 6.0, False)]


def unary_input(rng, shape, dtype):
    """Values in [-4, 4) starting with exact halves (Round: half to even) and signed zeros,
    then NaN and infinities."""
    x = rand(rng, shape, dtype, -4, 4)
    flat = x.reshape(-1)
    flat[:8] = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 3.0, -0.0, 0.0], dtype)
    flat[8:12] = np.array([np.nan, np.inf, -np.inf, 1e-3], dtype)
    return x


def unary_cases(rng):
    out = []
    for dt, tol in [(np.float32, F32), (np.float16, F16), (np.float64, F64)]:
        n = dname(dt)
        exact, approx = Model(), Model()
        for shape in ([3, 37, 11], [2, 64]):
            tag = "x".join(map(str, shape))
            x = unary_input(rng, shape, dt)
            X1, X2 = exact.tensor(f"X_{tag}", x), approx.tensor(f"X_{tag}", x)
            for op in EXACT_UNARY:
                exact.node(op, [X1], f"y_{op.lower()}_{tag}", shape, dt, **UNARY_ATTRS.get(op, {}))
            for op in APPROX_UNARY:
                approx.node(op, [X2], f"y_{op.lower()}_{tag}", shape, dt, **UNARY_ATTRS.get(op, {}))
            approx.node("Gelu", [X2], f"y_gelu_{tag}", shape, dt)
            approx.node("Gelu", [X2], f"y_gelu_tanh_{tag}", shape, dt, approximate="tanh")
        for ops, lo, hi, is_exact in DOMAIN_UNARY:
            model = exact if is_exact else approx
            X = model.tensor(f"X_{ops[0].lower()}", rand(rng, [5, 29], dt, lo, hi))
            for op in ops:
                model.node(op, [X], f"y_{op.lower()}", [5, 29], dt)
        out.append(exact.case(f"unary_{n}_exact", EXACT, opset=20))
        out.append(approx.case(f"unary_{n}_approx", tol, opset=20))
    # Many blocks of packs, and a length that is not a multiple of a pack.
    m = Model()
    X = m.tensor("X", rand(rng, [1, 900, 1024]))
    m.node("Relu", [X], "y_relu", [1, 900, 1024], np.float32)
    m.node("Sigmoid", [X], "y_sigmoid", [1, 900, 1024], np.float32)
    X = m.tensor("X_tail", rand(rng, [100003]))
    m.node("Abs", [X], "y_abs_tail", [100003], np.float32)
    m.node("Exp", [X], "y_exp_tail", [100003], np.float32)
    out.append(m.case("unary_f32_large", F32))
    # Integers (the ops exact on them), Not, IsNaN and IsInf with its detect attributes.
    m = Model()
    for dt in [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32]:
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, size=[4, 9], dtype=dt, endpoint=True)
        x.reshape(-1)[:3] = [info.min, 0, info.max]
        X = m.tensor(f"X_{dname(dt)}", x)
        for op in ["Relu", "Abs", "Sign"] + (["Neg"] if info.min < 0 else []):
            m.node(op, [X], f"y_{op.lower()}_{dname(dt)}", [4, 9], dt)
    for shape in ([3, 4, 5], [40, 16]):
        x = rng.random(shape) > 0.5
        x.reshape(-1)[0] = True
        tag = "x".join(map(str, shape))
        m.node("Not", [m.tensor(f"B_{tag}", x)], f"y_not_{tag}", shape, np.bool_)
    for dt in [np.float32, np.float16, np.float64]:
        X = m.tensor(f"F_{dname(dt)}", unary_input(rng, [3, 16], dt))
        m.node("IsNaN", [X], f"y_isnan_{dname(dt)}", [3, 16], np.bool_)
        m.node("IsInf", [X], f"y_isinf_{dname(dt)}", [3, 16], np.bool_)
        m.node("IsInf", [X], f"y_isinf_pos_{dname(dt)}", [3, 16], np.bool_, detect_negative=0)
        m.node("IsInf", [X], f"y_isinf_neg_{dname(dt)}", [3, 16], np.bool_, detect_positive=0)
    out.append(m.case("unary_int_not_isnan", EXACT, opset=14))
    return out


def clip_cases(rng):
    out = []
    x = unary_input(rng, [6, 21], np.float32)
    m = Model()
    m.node("Clip", [m.tensor("X", x)], "y_clip_attributes", x.shape, np.float32, min=-1.5, max=2.25)
    out.append(m.case("clip_opset10", EXACT, opset=10))
    m = Model()
    X = m.tensor("X", x)
    lo, hi = m.tensor("lo", np.array(-1.25, np.float32)), m.tensor("hi", np.array(0.75, np.float32))
    m.node("Clip", [X, lo, hi], "y_clip_const", x.shape, np.float32)
    m.node("Clip", [X, "", hi], "y_clip_max_only", x.shape, np.float32)
    m.node("Clip", [X, lo], "y_clip_min_only", x.shape, np.float32)
    m.node("Clip", [X], "y_clip_none", x.shape, np.float32)
    # Bounds that are graph inputs: read from device memory when the node runs.
    rlo = m.tensor("rlo", np.array([-1.75], np.float32))
    rhi = m.tensor("rhi", np.array([0.25], np.float32))
    m.node("Clip", [X, rlo, rhi], "y_clip_runtime", x.shape, np.float32)
    m.node("Clip", [X, lo, rhi], "y_clip_mixed", x.shape, np.float32)
    xh = m.tensor("XH", unary_input(rng, [6, 21], np.float16))
    m.node("Clip", [xh, m.tensor("rlo16", np.array([-0.7], np.float16))], "y_clip_f16_runtime", x.shape,
           np.float16)
    m.node("Clip", [xh, m.tensor("lo16", np.array(-0.3, np.float16)), m.tensor("hi16", np.array(1.1, np.float16))],
           "y_clip_f16_const", x.shape, np.float16)
    xd = m.tensor("XD", unary_input(rng, [6, 21], np.float64))
    m.node("Clip", [xd, m.tensor("lo64", np.array(-1.25, np.float64)), m.tensor("hi64", np.array(0.75, np.float64))],
           "y_clip_f64_const", x.shape, np.float64)
    # Integers: exact 64-bit bounds, defaults at the type's limits.
    xi = m.tensor("XI", rng.integers(-2**62, 2**62, size=[5, 9], dtype=np.int64))
    ilo, ihi = m.tensor("ilo", np.array(-2**61 - 3, np.int64)), m.tensor("ihi", np.array(2**60 + 1, np.int64))
    m.node("Clip", [xi, ilo, ihi], "y_clip_int64_const", [5, 9], np.int64)
    m.node("Clip", [xi, m.tensor("rilo", np.array([-2**61 - 5], np.int64)), m.tensor("rihi", np.array([2**59], np.int64))],
           "y_clip_int64_runtime", [5, 9], np.int64)
    x8 = m.tensor("X8", rng.integers(-128, 128, size=[4, 7], dtype=np.int8))
    m.node("Clip", [x8, m.tensor("lo8", np.array(-5, np.int8))], "y_clip_int8_min_only", [4, 7], np.int8)
    m.node("Clip", [x8], "y_clip_int8_none", [4, 7], np.int8)
    xu = m.tensor("XU", rng.integers(0, 2**64 - 1, size=[4, 7], dtype=np.uint64, endpoint=True))
    m.node("Clip", [xu, m.tensor("lou", np.array(2**40, np.uint64)), m.tensor("hiu", np.array(2**63 + 5, np.uint64))],
           "y_clip_uint64_const", [4, 7], np.uint64)
    out.append(m.case("clip_opset13", EXACT, opset=13))
    return out


# ---- Where, Cast ----------------------------------------------------------------------

def where_cases(rng):
    m = Model()
    specs = [("same_f32", [4, 6, 8], [4, 6, 8], [4, 6, 8], np.float32),
             ("cond_bcast_scalar_y", [1, 1, 1], [1, 90, 256], [], np.float32),
             ("three_way", [2, 1, 5], [1, 3, 1], [2, 3, 5], np.float32),
             ("int64", [1, 128], [1, 128], [1, 128], np.int64),
             ("bool", [1, 1], [1, 224], [1, 224], np.bool_),
             ("uint8_packs", [4, 64], [4, 64], [64], np.uint8),
             ("f16_rows", [6, 1], [6, 24], [24], np.float16),
             ("int8_odd", [3, 7], [3, 7], [], np.int8),
             ("empty", [1, 8, 0, 4], [1, 8, 0, 4], [1], np.float32)]
    for tag, sc, sx, sy, dt in specs:
        c = np.array(rng.random(sc) > 0.5)
        if c.size:
            c.reshape(-1)[0] = True
        if dt == np.bool_:
            x, y = rng.random(sx) > 0.3, rng.random(sy) > 0.6
            x.reshape(-1)[0] = True
        else:
            x, y = rand(rng, sx, dt, -50, 50), rand(rng, sy, dt, -50, 50)
        ins = [m.tensor(f"C_{tag}", c), m.tensor(f"X_{tag}", x), m.tensor(f"Y_{tag}", y)]
        m.node("Where", ins, f"y_where_{tag}", bcast_shape(sc, sx, sy), dt)
    return [m.case("where", EXACT)]


CAST_PAIRS = [
    (np.float32, np.float16), (np.float16, np.float32), (np.float32, np.float64), (np.float64, np.float32),
    (np.float64, np.float16), (np.float16, np.float64), (np.float32, np.int64), (np.float32, np.int32),
    (np.float32, np.int8), (np.float32, np.uint8), (np.float32, np.bool_), (np.float64, np.int64),
    (np.float16, np.int32), (np.int64, np.float32), (np.int64, np.int32), (np.int32, np.int8),
    (np.int32, np.int64), (np.uint8, np.float32), (np.int8, np.uint8), (np.bool_, np.float32),
    (np.bool_, np.int64), (np.int64, np.bool_), (np.uint64, np.float32), (np.int64, np.float16),
    (np.float32, np.float32), (np.uint16, np.int16), (np.float64, np.uint64), (np.float32, np.uint64),
]


def cast_input(rng, dt, shape):
    if dt == np.bool_:
        x = rng.random(shape) > 0.5
        x.reshape(-1)[0] = True
        return x
    if np.dtype(dt).kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
        x.reshape(-1)[:3] = [info.min, info.max, 0]
        return x
    # Out-of-range, negative, fractional, NaN and infinite values: the conversions saturate.
    x = (rng.standard_normal(shape) * 200).astype(dt)
    specials = [np.nan, np.inf, -np.inf, 1e6, -1e6, 2.5, -2.5, 0.49999997, 65519.0, 1e-8, 3e9, -3e9, 1e20]
    with np.errstate(over="ignore"):
        x.reshape(-1)[: len(specials)] = np.array(specials).astype(dt)
    return x


def cast_cases(rng):
    m = Model()
    sources = {}
    for f, t in CAST_PAIRS:
        if f not in sources:
            sources[f] = m.tensor(f"X_{dname(f)}", cast_input(rng, f, [7, 13]))
        m.node("Cast", [sources[f]], f"y_cast_{dname(f)}_{dname(t)}", [7, 13], t, to=ONNX[np.dtype(t)])
    # The packed float32 <-> float16 kernels on more than a few packs.
    big = m.tensor("X_big", cast_input(rng, np.float32, [4, 1024]))
    half = m.node("Cast", [big], "y_cast_big_f16", [4, 1024], np.float16, to=TensorProto.FLOAT16)
    m.node("Cast", [half], "y_cast_big_f16_f32", [4, 1024], np.float32, to=TensorProto.FLOAT)
    like = m.tensor("like", np.ones([1], np.float16), const=True)
    m.node("CastLike", [sources[np.float32], like], "y_castlike_f32_f16", [7, 13], np.float16)
    return [m.case("cast", EXACT, opset=15)]


# ---- Sparse4Dv3 shapes ---------------------------------------------------------------

def sparse4d_cases(rng):
    """The element-wise nodes of the Sparse4Dv3 head (900 anchors, 256 channels, 6 cameras,
    13 keypoints, 300 outputs) and backbone (ResNet50 stage 1 at 6 x 256 x 64 x 176)."""
    exact, approx = Model(), Model()

    def binop(tag, op, sa, sb, dt=np.float32, lo=-2.0, hi=2.0):
        A = exact.tensor(f"A_{tag}", rand(rng, sa, dt, lo, hi))
        B = exact.tensor(f"B_{tag}", rand(rng, sb, dt, lo, hi))
        exact.binary(op, A, B, tag)

    binop("bias", "Add", [256], [1, 900, 256])
    binop("bias_rhs", "Add", [1, 900, 256], [256])
    binop("ffn_bias", "Add", [1024], [1, 900, 1024])
    binop("camera_embed", "Add", [1, 900, 1, 256], [1, 1, 6, 256])
    binop("weights_bias", "Add", [416], [1, 900, 6, 416])
    binop("residual", "Add", [1, 900, 256], [1, 900, 256])
    binop("anchor_scale", "Mul", [1, 900, 1], [1, 900, 13])
    binop("keypoint_offsets", "Mul", [7, 3], [1, 900, 1, 3])
    binop("keypoints_shift", "Add", [1, 900, 13, 3], [1, 900, 1, 3])
    binop("attention_scale", "Mul", [1, 8, 900, 32], [])
    binop("sigmoid_shift", "Sub", [1, 900, 6, 3], [])
    binop("project_div", "Div", [1, 6, 11700, 2], [1, 6, 11700, 1], lo=1.0, hi=3.0)
    binop("image_wh_div", "Div", [1, 6, 11700, 2], [1, 6, 1, 2], lo=1.0, hi=3.0)
    binop("score_max", "Max", [1, 300], [1, 300])
    for op in COMPARE:
        binop(f"valid_{op.lower()}", op, [1, 900], [])
    binop("index_add", "Add", [1, 300], [1, 1], dt=np.int64, lo=0, hi=900)
    binop("index_less", "Less", [1, 900], [], dt=np.int64, lo=0, hi=900)
    binop("index_sub", "Sub", [1, 900], [], dt=np.int64, lo=0, hi=900)
    binop("bias_f16", "Add", [256], [1, 900, 256], dt=np.float16)
    a, b = exact.tensor("mask_a", rng.random([1, 900]) > 0.5), exact.tensor("mask_b", rng.random([1, 900]) > 0.3)
    exact.binary("And", a, b, "mask")

    def unop(tag, op, shape, model, dt=np.float32, lo=-4.0, hi=4.0):
        X = model.tensor(f"X_{tag}", rand(rng, shape, dt, lo, hi))
        model.node(op, [X], f"y_{op.lower()}_{tag}", shape, dt)

    unop("head", "Relu", [1, 900, 256], exact)
    unop("ffn", "Relu", [1, 900, 1024], exact)
    unop("anchors", "Neg", [1, 900, 11], exact)
    unop("dt", "Abs", [1], exact)
    unop("f16", "Relu", [1, 900, 256], exact, dt=np.float16)
    unop("offsets", "Sigmoid", [1, 900, 6, 3], approx)
    unop("scores", "Sigmoid", [1, 900, 10], approx)
    unop("sizes", "Exp", [1, 900, 3], approx)
    unop("yaw", "Atan", [1, 300], approx)
    X = exact.tensor("X_depth", rand(rng, [1, 6, 11700, 1], np.float32, -3, 3))
    exact.node("Clip", [X, exact.tensor("depth_min", np.array(1e-5, np.float32))], "y_clip_depth",
               [1, 6, 11700, 1], np.float32)
    C = exact.tensor("C_reset", np.ones([1, 1, 1], np.bool_))
    X = exact.tensor("X_reset", rand(rng, [1, 900, 256]))
    exact.node("Where", [C, X, exact.tensor("zero", np.array(0.0, np.float32))], "y_where_reset",
               [1, 900, 256], np.float32)
    C = exact.tensor("C_scores", rng.random([1, 900]) > 0.5)
    exact.node("Where", [C, exact.tensor("X_scores", rand(rng, [1, 900])), exact.tensor("Y_scores", rand(rng, [1, 900]))],
               "y_where_scores", [1, 900], np.float32)
    for f, t, shape in [(np.bool_, np.float32, [1, 900]), (np.float32, np.int64, [1, 900]),
                        (np.int64, np.float32, [1, 300]), (np.float32, np.float16, [1, 900, 256]),
                        (np.float16, np.float32, [1, 900, 256])]:
        X = exact.tensor(f"X_cast_{dname(f)}_{dname(t)}", cast_input(rng, f, shape))
        exact.node("Cast", [X], f"y_cast_{dname(f)}_{dname(t)}", shape, t, to=ONNX[np.dtype(t)])
    half = Model()
    unop("f16", "Sigmoid", [1, 900, 256], half, dt=np.float16)

    backbone = Model()
    A = backbone.tensor("A", rand(rng, [6, 256, 64, 176]))
    backbone.binary("Add", A, backbone.tensor("B", rand(rng, [6, 256, 64, 176])), "residual")
    backbone.node("Relu", [A], "y_relu", [6, 256, 64, 176], np.float32)
    return [exact.case("s4d_head_exact", EXACT), approx.case("s4d_head_approx", F32),
            half.case("s4d_head_f16", F16), backbone.case("s4d_backbone", EXACT)]


def cases():
    rng = np.random.default_rng(20240611)
    return (binary_cases(rng) + pow_cases(rng) + variadic_cases(rng) + unary_cases(rng) + clip_cases(rng)
            + where_cases(rng) + cast_cases(rng) + sparse4d_cases(rng))
