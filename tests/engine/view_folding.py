"""Movement folded into element-wise layers as strided views (src/passes/fold_views.c), through
s4dexec.

usage: view_folding.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph of Slice, Transpose, Gather, Expand and Reshape-like nodes around
element-wise ones, built once and run twice: as it is (the engine folds the movement into the
FusedPointwise layers) and with S4D_FOLD_VIEWS=0 (the pass off: the movement layers run). Checks,
per case:
  - the folded run's layer list has the expected number of FusedPointwise layers and none of the
    movement op types the fold must take; the unfolded run still has every one of them;
  - folded and unfolded outputs are equal bit for bit (only where elements are read from
    changes, never a value), and the saved folded engine loads and gives the same bits;
  - both agree with a float64 NumPy evaluation of the same graph: rtol 1e-6, atol 1e-6 (4e-6,
    2e-6 on a real CUDA device, whose transcendental functions are within 2 ulp);
  - on CUDA (and the guarded device) the same with --fp16: folded and unfolded float16 engines
    give the same bits.
Near misses the pass must leave alone: Gather by indices computed at run time, a Slice with a
negative step, indices that are no progression, a movement chain whose value is also a graph
output, an Expand after the layer (it would compute values again).
Exit 77 when the device is CUDA and this machine has none.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import (case_pairs, check_reload, compare_pair, eltwise_tolerance,  # noqa: E402
                       fusion_arg_parser, layer_types, load_inputs_flag, pass_run, report_case, summary)

F32, BOOL, I64 = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
NP_TO_ONNX = {np.dtype(np.float32): F32, np.dtype(np.bool_): BOOL, np.dtype(np.int64): I64}
MOVEMENT = ("Slice", "Transpose", "Gather", "Expand")


class Case:
    def __init__(self, name, nodes, inputs, consts, outputs, fused, gone, kept=()):
        self.name, self.nodes, self.inputs, self.consts = name, nodes, inputs, consts
        self.outputs = outputs  # {name: onnx dtype}
        self.fused = fused      # expected number of FusedPointwise layers when folded
        self.gone = gone        # movement op types that must not remain when folded
        self.kept = kept        # op types that must remain when folded (near misses)


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
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def np_slice(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else [int(a) % x.ndim for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[a] = slice(int(s), int(e), int(st))
    return x[tuple(idx)]


def reference(case):
    """float64 NumPy evaluation of the graph (bools stay bool)."""
    env = {k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in case.inputs.items()}
    env.update({k: (v.astype(np.float64) if v.dtype == np.float32 else v) for k, v in case.consts.items()})
    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
         "Exp": np.exp, "Greater": np.greater, "Neg": np.negative, "Tanh": np.tanh}
    for op, ins, out, attrs in case.nodes:
        a = [env[i] if i else None for i in ins]
        if op == "Where":
            env[out] = np.where(*a)
        elif op == "Slice":
            env[out] = np_slice(a[0], *a[1:])
        elif op == "Transpose":
            env[out] = np.transpose(a[0], attrs["perm"])
        elif op == "Gather":
            env[out] = np.take(a[0], a[1], axis=attrs.get("axis", 0))
        elif op == "Expand":
            env[out] = a[0] * np.ones(tuple(int(s) for s in a[1]), dtype=a[0].dtype)
        elif op == "Reshape":
            env[out] = a[0].reshape(tuple(int(s) for s in a[1]))
        elif op == "Unsqueeze":
            env[out] = np.expand_dims(a[0], tuple(int(s) for s in a[1]))
        elif op == "Squeeze":
            env[out] = np.squeeze(a[0], tuple(int(s) for s in a[1]))
        elif op == "ArgMax":
            env[out] = np.argmax(a[0], axis=attrs["axis"])
        else:
            env[out] = f[op](*a)
    return {k: env[k] for k in case.outputs}


def engine_run(args, d, tag, path, case, fold, extra=()):
    text, outs = pass_run(args, d, tag, path, case, "S4D_FOLD_VIEWS", fold, extra)
    return layer_types(text), outs


def i64(*v):
    return np.array(v, dtype=np.int64)


def make_cases(rng):
    def u(shape, lo=-2.0, hi=2.0):
        a = rng.uniform(lo, hi, shape).astype(np.float32)
        a[np.abs(a) < 1e-3] = 0.5
        return a

    def pos(shape):
        return rng.uniform(0.5, 2.0, shape).astype(np.float32)

    c = []
    # The anchor's fields: two column slices of one [1, 96, 11] tensor added (a lone Add).
    c.append(Case("slice_columns_add",
                  [node("Slice", ["x", "s0", "e3", "ax2"], "a"), node("Slice", ["x", "s3", "e6", "ax2"], "b"),
                   node("Add", ["a", "b"], "o")],
                  {"x": u((1, 96, 11))},
                  {"s0": i64(0), "e3": i64(3), "s3": i64(3), "e6": i64(6), "ax2": i64(2)},
                  {"o": F32}, 1, ["Slice"]))
    # A Transpose of the middle dims into a chain, strided slice steps.
    c.append(Case("transpose_into_chain",
                  [node("Transpose", ["x"], "t", perm=[0, 2, 1, 3]), node("Mul", ["t", "y"], "m"),
                   node("Exp", ["m"], "o")],
                  {"x": u((2, 3, 4, 5)), "y": u((2, 4, 3, 5))}, {}, {"o": F32}, 1, ["Transpose"]))
    c.append(Case("slice_steps_rows",
                  [node("Slice", ["x", "st", "en", "ax", "sp"], "a"), node("Mul", ["a", "y"], "m"),
                   node("Tanh", ["m"], "o")],
                  {"x": u((9, 12)), "y": u((3, 4))},
                  {"st": i64(1, 2), "en": i64(9, 12), "ax": i64(0, 1), "sp": i64(3, 3)},
                  {"o": F32}, 1, ["Slice"]))
    # Key point coordinates: scalar and progression Gathers, negative indices.
    c.append(Case("gather_scalar_progression",
                  [node("Gather", ["x", "g0"], "a", axis=2), node("Gather", ["x", "gm1"], "b", axis=2),
                   node("Gather", ["x", "gap"], "p", axis=1),
                   node("Mul", ["a", "b"], "ab"), node("Gather", ["ab", "godd"], "q", axis=1),
                   node("Unsqueeze", ["q", "ax2"], "qu"), node("Sub", ["p", "qu"], "o")],
                  {"x": u((4, 6, 3))},
                  {"g0": np.array(0, dtype=np.int64), "gm1": np.array(-1, dtype=np.int64),
                   "gap": i64(0, 2, 4), "godd": i64(1, 3, 5), "ax2": i64(2)},
                  {"o": F32}, 2, ["Gather"]))
    # Expand into the layer: repeated reads (stride 0), then Reshape and Slice through views.
    c.append(Case("expand_reshape_slice",
                  [node("Expand", ["x", "shp"], "xe"), node("Reshape", ["y", "r3"], "yr"),
                   node("Slice", ["yr", "s1", "e4", "ax2"], "ys"), node("Add", ["xe", "ys"], "s"),
                   node("Exp", ["s"], "o")],
                  {"x": u((3, 1)), "y": u((2, 36))},
                  {"shp": i64(2, 3, 3), "r3": i64(2, 3, 12), "s1": i64(1), "e4": i64(4), "ax2": i64(2)},
                  {"o": F32}, 1, ["Expand", "Slice"]))
    # The projected points: an element-wise result reordered for the aggregation; the Reshape
    # before the Transpose and the Slice after it are taken with it.
    c.append(Case("transpose_after",
                  [node("Div", ["x", "y"], "q"), node("Reshape", ["q", "r5"], "qr"),
                   node("Transpose", ["qr"], "qt", perm=[0, 2, 3, 1, 4]),
                   node("Slice", ["qt", "s0", "e2", "ax4"], "o")],
                  {"x": u((1, 3, 40, 2)), "y": pos((1, 3, 40, 2))},
                  {"r5": i64(1, 3, 8, 5, 2), "s0": i64(0), "e2": i64(1), "ax4": i64(4)},
                  {"o": F32}, 1, ["Transpose", "Slice"]))
    # Both at once: sliced inputs, a broadcast operand and a Gather after the output.
    c.append(Case("before_and_after",
                  [node("Slice", ["x", "s0", "e3", "ax1"], "a"), node("Mul", ["a", "w"], "m"),
                   node("Add", ["m", "x2"], "s"), node("Gather", ["s", "g1"], "o", axis=0)],
                  {"x": u((5, 7)), "x2": u((5, 3))},
                  {"s0": i64(2), "e3": i64(5), "ax1": i64(1), "w": u((3,)), "g1": i64(1, 2, 3)},
                  {"o": F32}, 1, ["Slice", "Gather"]))
    # bool values through views: a sliced mask selects between transposed values.
    c.append(Case("bool_mask_where",
                  [node("Greater", ["x", "z"], "gt"), node("Slice", ["gt", "s0", "e4", "ax0"], "ms"),
                   node("Transpose", ["y"], "yt", perm=[1, 0]), node("Where", ["ms", "yt", "z"], "o")],
                  {"x": u((6, 5)), "y": u((5, 4)), "z": u((1,))},
                  {"s0": i64(0), "e4": i64(4), "ax0": i64(0)},
                  {"o": F32}, 2, ["Slice", "Transpose"]))
    # Near misses.
    c.append(Case("miss_runtime_indices",
                  [node("ArgMax", ["y"], "idx", axis=0, keepdims=0), node("Gather", ["x", "idx"], "a", axis=0),
                   node("Exp", ["a"], "e"), node("Neg", ["e"], "o")],
                  {"x": u((5, 6)), "y": u((4, 3))}, {}, {"o": F32}, 1, [], ["Gather"]))
    c.append(Case("miss_negative_step",
                  [node("Slice", ["x", "s", "e", "ax", "sp"], "a"), node("Exp", ["a"], "b"),
                   node("Neg", ["b"], "o")],
                  {"x": u((4, 9))}, {"s": i64(8), "e": i64(-10), "ax": i64(1), "sp": i64(-2)},
                  {"o": F32}, 1, [], ["Slice"]))
    c.append(Case("miss_not_progression",
                  [node("Gather", ["x", "g"], "a", axis=1), node("Exp", ["a"], "b"), node("Neg", ["b"], "o")],
                  {"x": u((4, 9))}, {"g": i64(0, 2, 3)}, {"o": F32}, 1, [], ["Gather"]))
    c.append(Case("miss_output_on_the_way",
                  [node("Mul", ["x", "y"], "m"), node("Exp", ["m"], "q"),
                   node("Transpose", ["q"], "o", perm=[1, 0])],
                  {"x": u((3, 4)), "y": u((3, 4))}, {}, {"o": F32, "q": F32}, 1, [], ["Transpose"]))
    c.append(Case("miss_expand_after",
                  [node("Mul", ["x", "y"], "m"), node("Exp", ["m"], "q"), node("Expand", ["q", "shp"], "o")],
                  {"x": u((3, 1)), "y": u((3, 1))}, {"shp": i64(2, 3, 4)}, {"o": F32}, 1, [], ["Expand"]))
    return c


def main():
    ap = fusion_arg_parser()
    args = ap.parse_args()
    rng = np.random.default_rng(2024)
    failures, ran = [], []
    tol = eltwise_tolerance(args)

    def run(d, tag, path, case, on):
        return engine_run(args, d, tag, path, case, on)

    for case, d, path, (types_f, out_f), (types_u, out_u) in case_pairs(
            args, make_cases(rng), build, run, ("folded", "unfolded"), ran, failures):
        msgs = []
        nf = types_f.count("FusedPointwise")
        left = [t for t in case.gone if t in types_f]
        if nf != case.fused or left:
            msgs.append(f"folded layers {types_f} (expected {case.fused} FusedPointwise, none of {case.gone})")
        missing = [t for t in list(case.gone) + list(case.kept) if t not in types_u]
        if missing:
            msgs.append(f"S4D_FOLD_VIEWS=0 lost {missing}: {types_u}")
        lost = [t for t in case.kept if t not in types_f]
        if lost:
            msgs.append(f"a near miss was folded: {lost} gone from {types_f}")
        check_reload(args, f"{d}/folded.s4d", load_inputs_flag(d, case.inputs), d, out_f, "folded engine", msgs)
        if args.device == "cuda":
            # float16 engines: the precision pass runs after the folding; the casts it adds
            # convert whole sources, so folded and unfolded float16 outputs are the same bits too.
            _, h_f = engine_run(args, d, "folded16", path, case, True, ["--fp16"])
            _, h_u = engine_run(args, d, "unfolded16", path, case, False, ["--fp16"])
            for k in case.outputs:
                if h_f[k].tobytes() != h_u[k].tobytes():
                    msgs.append(f"output {k}: float16 folded != unfolded bit for bit")
        compare_pair(case.outputs, out_f, out_u, reference(case), tol, ("folded", "unfolded"), msgs)
        report_case(case.name, msgs, len(types_u), len(types_f), nf, "FusedPointwise", failures)
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
