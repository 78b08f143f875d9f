"""The pointwise fusion (s4d::FusedPointwise) on the CPU engine, through s4dexec.

usage: pointwise_fusion.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph of element-wise nodes, built once and run twice: as it is (the
engine fuses it) and with S4D_FUSE_POINTWISE=0 (the pass off: the unfused layers). Checks, per case:
  - the layer list (--dumpLayerInfo) of the fused run has the expected number of FusedPointwise
    layers and none of the op types the fusion must take; the unfused run has no FusedPointwise;
  - fused and unfused outputs are equal bit for bit (the CPU kernel applies the unfused layers'
    per-element functions, the CPU backend's vectorised Sigmoid, Relu and Clip included; on the
    guarded device the same CPU kernels run);
  - both agree with a float64 NumPy evaluation of the same graph: rtol 1e-6, atol 1e-6 (float32
    rounds each of a chain's at most ten operations by 2^-24 relative, and the inputs keep
    divisors and logarithm arguments away from zero, so errors stay near 1e-7 of the values;
    on a real CUDA device 4e-6, 2e-6: its transcendental functions are within 2 ulp).
With --device cuda on a GPU the same holds on the CUDA backend: its fused kernel applies the
one-op kernels' device functions with no contraction across them, so fused and unfused agree
bit for bit there too. Exit 77 when the device is CUDA and this machine has none.
Near misses the pass must leave alone: a value with two readers, a graph output in the middle of a
chain, an intermediate broadcast more than 32 times, a Clip bound that is not a constant, integer
arithmetic. Chains longer than one program (32 instructions) or with more than 8 distinct inputs
split into several fused layers.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import (case_pairs, compare_pair, eltwise_tolerance, fusion_arg_parser,  # noqa: E402
                       layer_types, pass_run, report_case, summary)

F32, BOOL, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
NP_TO_ONNX = {np.dtype(np.float32): F32, np.dtype(np.bool_): BOOL, np.dtype(np.int64): I64}


class Case:
    def __init__(self, name, nodes, inputs, consts, outputs, fused, gone, opset=17):
        self.name, self.nodes, self.inputs, self.consts = name, nodes, inputs, consts
        self.outputs = outputs      # {name: onnx dtype}
        self.fused = fused          # expected number of FusedPointwise layers
        self.gone = gone            # op types that must not remain as layers
        self.opset = opset


def node(op, ins, out, **attrs):
    return (op, ins, out, attrs)


def build(case):
    nodes = [helper.make_node(op, ins, [out], name=f"n{i}_{op}", **attrs)
             for i, (op, ins, out, attrs) in enumerate(case.nodes)]
    inits = [numpy_helper.from_array(v, k) for k, v in case.consts.items()]
    g_in = [helper.make_tensor_value_info(k, NP_TO_ONNX[v.dtype], list(v.shape))
            for k, v in case.inputs.items()]
    g_out = [helper.make_tensor_value_info(k, t, None) for k, t in case.outputs.items()]
    g = helper.make_graph(nodes, case.name, g_in, g_out, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", case.opset)])


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def reference(case):
    """float64 NumPy evaluation of the graph (bools stay bool)."""
    env = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in case.inputs.items()}
    env.update({k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in case.consts.items()})
    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
         "Min": np.minimum, "Max": np.maximum, "Equal": np.equal, "Greater": np.greater,
         "Less": np.less, "GreaterOrEqual": np.greater_equal, "LessOrEqual": np.less_equal,
         "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
         "Neg": np.negative, "Abs": np.abs, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
         "Sigmoid": sigmoid, "Relu": lambda x: np.maximum(x, 0), "Tanh": np.tanh,
         "Reciprocal": lambda x: 1.0 / x, "Atan": np.arctan, "Not": np.logical_not}
    for op, ins, out, attrs in case.nodes:
        args = [env[i] if i else None for i in ins]
        if op == "Where":
            env[out] = np.where(*args)
        elif op == "Clip":
            lo = attrs.get("min", args[1] if len(args) > 1 and args[1] is not None else -np.inf)
            hi = attrs.get("max", args[2] if len(args) > 2 and args[2] is not None else np.inf)
            env[out] = np.minimum(np.maximum(args[0], lo), hi)
        elif op == "Cast":
            to = attrs["to"]
            env[out] = args[0].astype(np.bool_) if to == BOOL else (
                args[0].astype(np.int64) if to == I64 else args[0].astype(np.float64))
        else:
            env[out] = f[op](*args)
    return {k: env[k] for k in case.outputs}


def engine_run(args, d, tag, path, case, fuse):
    text, outs = pass_run(args, d, tag, path, case, "S4D_FUSE_POINTWISE", fuse, save=False)
    return layer_types(text), outs


def make_cases(rng):
    def u(shape, lo=-2.0, hi=2.0):
        a = rng.uniform(lo, hi, shape).astype(np.float32)
        a[np.abs(a) < 1e-3] = 0.5  # never zero (signed zeros are Relu's one corner, see docs)
        return a

    def pos(shape):
        return rng.uniform(0.5, 2.0, shape).astype(np.float32)

    c = []
    # the head's projections: scale and bias broadcast over [1, 90, 256]
    c.append(Case("mul_add_bias", [node("Mul", ["x", "s"], "t"), node("Add", ["t", "b"], "o")],
                  {"x": u((1, 90, 256))}, {"s": np.array(0.125, np.float32), "b": u((256,))},
                  {"o": F32}, 1, ["Mul", "Add"]))
    c.append(Case("exp_mul_sub_div",
                  [node("Exp", ["x"], "e"), node("Mul", ["e", "y"], "m"), node("Sub", ["m", "z"], "s"),
                   node("Div", ["s", "w"], "o")],
                  {"x": u((3, 50, 13)), "y": u((50, 1)), "z": u((13,)), "w": pos((3, 1, 13))}, {},
                  {"o": F32}, 1, ["Exp", "Mul", "Sub", "Div"]))
    # every float unary op, inputs kept where Log and Sqrt are defined
    c.append(Case("unary_chain",
                  [node("Neg", ["x"], "a"), node("Abs", ["a"], "b"), node("Sqrt", ["b"], "c"),
                   node("Log", ["c"], "d"), node("Tanh", ["d"], "e"), node("Sigmoid", ["e"], "f"),
                   node("Relu", ["f"], "g"), node("Reciprocal", ["g"], "h"), node("Atan", ["h"], "o")],
                  {"x": u((7, 129))}, {}, {"o": F32}, 1,
                  ["Neg", "Abs", "Sqrt", "Log", "Tanh", "Sigmoid", "Relu", "Reciprocal", "Atan"]))
    # the CPU backend's vectorised Sigmoid and Relu inside a chain, rows not a multiple of 16
    c.append(Case("sigmoid_relu_rows",
                  [node("Sub", ["x", "y"], "a"), node("Sigmoid", ["a"], "b"), node("Mul", ["b", "x"], "c"),
                   node("Relu", ["c"], "o")],
                  {"x": u((900, 13), -9, 9), "y": u((900, 1))}, {}, {"o": F32}, 1, ["Sigmoid", "Relu"]))
    c.append(Case("clip_inputs",
                  [node("Mul", ["x", "y"], "a"), node("Clip", ["a", "lo", "hi"], "b"),
                   node("Add", ["b", "y"], "o")],
                  {"x": u((6, 117, 2)), "y": u((6, 117, 1))},
                  {"lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}, {"o": F32}, 1,
                  ["Clip", "Mul", "Add"]))
    c.append(Case("clip_max_only",
                  [node("Mul", ["x", "y"], "a"), node("Clip", ["a", "", "hi"], "o")],
                  {"x": u((6, 117, 2)), "y": u((6, 117, 2))}, {"hi": np.array(0.3, np.float32)},
                  {"o": F32}, 1, ["Clip", "Mul"]))
    c.append(Case("clip_attrs_opset10",
                  [node("Mul", ["x", "y"], "a"), node("Clip", ["a"], "b", min=-1.0, max=1.25),
                   node("Add", ["b", "x"], "o")],
                  {"x": u((5, 33)), "y": u((5, 33))}, {}, {"o": F32}, 1, ["Clip"], opset=10))
    # bool intermediates: comparisons -> And / Or / Not -> Where -> Div
    c.append(Case("compare_where_div",
                  [node("Greater", ["x", "t0"], "g"), node("LessOrEqual", ["x", "t1"], "l"),
                   node("And", ["g", "l"], "m"), node("Equal", ["x", "y"], "q"), node("Or", ["m", "q"], "m2"),
                   node("Not", ["m2"], "nm"), node("Where", ["nm", "x", "y"], "w"),
                   node("Div", ["w", "z"], "o")],
                  {"x": u((4, 300)), "y": u((4, 300)), "z": pos((300,))},
                  {"t0": np.array(-0.5, np.float32), "t1": np.array(1.0, np.float32)}, {"o": F32}, 1,
                  ["Greater", "LessOrEqual", "And", "Or", "Not", "Where", "Div"]))
    c.append(Case("where_where",
                  [node("Where", ["c1", "x", "y"], "w"), node("Where", ["c2", "w", "z"], "o")],
                  {"c1": rng.uniform(size=(1, 1500)) < 0.5, "c2": rng.uniform(size=(3, 1)) < 0.5,
                   "x": u((3, 1500)), "y": u((1500,)), "z": u((3, 1500))}, {}, {"o": F32}, 1, ["Where"]))
    c.append(Case("cast_bool_float",
                  [node("GreaterOrEqual", ["x", "y"], "g"), node("Cast", ["g"], "gf", to=F32),
                   node("Mul", ["gf", "x"], "m"), node("Cast", ["m"], "mb", to=BOOL), node("Xor", ["mb", "c"], "o")],
                  {"x": u((2, 3, 65)), "y": u((65,)), "c": rng.uniform(size=(2, 3, 65)) < 0.5}, {},
                  {"o": BOOL}, 1, ["Cast", "Mul", "Xor"]))
    c.append(Case("min_max",
                  [node("Max", ["x", "y"], "a"), node("Min", ["a", "z"], "b"), node("Neg", ["b"], "o")],
                  {"x": u((8, 31)), "y": u((31,)), "z": u((8, 1))}, {}, {"o": F32}, 1, ["Max", "Min", "Neg"]))
    # the head's key points: Exp [1, 90, 1, 3] broadcast into [1, 90, 7, 3] (repeated 7 times)
    c.append(Case("broadcast_mid",
                  [node("Exp", ["x"], "e"), node("Mul", ["k", "e"], "m"), node("Add", ["m", "y"], "o")],
                  {"x": u((1, 90, 1, 3)), "y": u((1, 90, 7, 3))}, {"k": u((7, 3))}, {"o": F32}, 1,
                  ["Exp", "Mul", "Add"]))
    # short rows: inputs walked across rows and blocks, carries past the last two dims
    c.append(Case("walk_4d",
                  [node("Mul", ["x", "y"], "m"), node("Add", ["m", "z"], "a"), node("Sigmoid", ["a"], "o")],
                  {"x": u((3, 5, 7, 2)), "y": u((3, 1, 7, 1)), "z": u((5, 1, 2))}, {}, {"o": F32}, 1,
                  ["Mul", "Add", "Sigmoid"]))
    c.append(Case("walk_5d_bool",
                  [node("Greater", ["x", "y"], "g"), node("And", ["g", "c"], "b"),
                   node("Where", ["b", "x", "y"], "o")],
                  {"x": u((2, 3, 1, 11, 3)), "y": u((2, 1, 4, 1, 3)), "c": rng.uniform(size=(3, 4, 1, 1)) < 0.5},
                  {}, {"o": F32}, 1, ["Greater", "And", "Where"]))
    # a chain longer than one program (40 nodes) and a tree of 12 distinct inputs: split
    long_nodes, prev = [], "x"
    for i in range(40):
        op = ["Add", "Mul", "Sub"][i % 3]
        long_nodes.append(node(op, [prev, "k%d" % (i % 5)], "v%d" % i))
        prev = "v%d" % i
    long_nodes.append(node("Neg", [prev], "o"))
    c.append(Case("long_chain", long_nodes, {"x": u((3, 40))},
                  {"k%d" % i: rng.uniform(0.9, 1.1, (40,)).astype(np.float32) for i in range(5)},
                  {"o": F32}, 2, ["Sub"]))
    wide_nodes, prev = [], "x0"
    wide_in = {}
    for i in range(12):
        wide_in["x%d" % i] = u((5, 17))
    for i in range(1, 12):
        wide_nodes.append(node("Add", [prev, "x%d" % i], "a%d" % i))
        prev = "a%d" % i
    wide_nodes.append(node("Relu", [prev], "o"))
    c.append(Case("twelve_inputs", wide_nodes, wide_in, {}, {"o": F32}, 2, ["Relu"]))
    # near misses: nothing fuses
    c.append(Case("miss_two_readers",
                  [node("Mul", ["x", "y"], "t"), node("Add", ["t", "z"], "o"), node("Sub", ["t", "z"], "o2")],
                  {"x": u((4, 64)), "y": u((4, 64)), "z": u((64,))}, {}, {"o": F32, "o2": F32}, 0, []))
    c.append(Case("miss_output_mid",
                  [node("Mul", ["x", "y"], "t"), node("Add", ["t", "z"], "o")],
                  {"x": u((4, 64)), "y": u((4, 64)), "z": u((64,))}, {}, {"o": F32, "t": F32}, 0, []))
    c.append(Case("miss_broadcast_4096",
                  [node("Exp", ["x"], "e"), node("Mul", ["e", "y"], "o")],
                  {"x": u((1, 1, 4)), "y": u((64, 64, 4))}, {}, {"o": F32}, 0, []))
    c.append(Case("miss_clip_runtime_bound",
                  [node("Mul", ["x", "y"], "a"), node("Clip", ["a", "lo"], "o")],
                  {"x": u((4, 64)), "y": u((4, 64)), "lo": np.array([-0.25], np.float32).reshape(())},
                  {}, {"o": F32}, 0, []))
    c.append(Case("miss_int64",
                  [node("Add", ["i", "j"], "a"), node("Mul", ["a", "j"], "o")],
                  {"i": rng.integers(-5, 5, (4, 8)).astype(np.int64), "j": rng.integers(1, 5, (8,)).astype(np.int64)},
                  {}, {"o": I64}, 0, []))
    return c


def main():
    ap = fusion_arg_parser()
    args = ap.parse_args()
    rng = np.random.default_rng(1414)
    failures, ran = [], []
    tol = eltwise_tolerance(args)

    def run(d, tag, path, case, on):
        return engine_run(args, d, tag, path, case, on)

    for case, d, path, (types_f, out_f), (types_u, out_u) in case_pairs(
            args, make_cases(rng), build, run, ("fused", "unfused"), ran, failures):
        msgs = []
        nf = types_f.count("FusedPointwise")
        if nf != case.fused or any(t in types_f for t in case.gone):
            msgs.append(f"fused layers {types_f} (expected {case.fused} FusedPointwise, none of {case.gone})")
        if "FusedPointwise" in types_u:
            msgs.append(f"S4D_FUSE_POINTWISE=0 still fused: {types_u}")
        compare_pair(case.outputs, out_f, out_u, reference(case), tol, ("fused", "unfused"), msgs)
        report_case(case.name, msgs, len(types_u), len(types_f), nf, "FusedPointwise", failures)
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
