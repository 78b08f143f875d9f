"""Products of broadcast sums distributed over their terms (src/passes/distribute_matmul.c),
through s4dexec.

usage: matmul_distribution.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph built once and run twice: as it is (the engine distributes
MatMul(Add(X, Y), W) into MatMul(X, W) + MatMul(Y, W) where X and Y broadcast to at least twice
their rows) and with S4D_DISTRIBUTE_MATMUL=0 (the pass off). The cases: Sparse4D's weights_fc
(instance features [1, N, 1, C] plus camera embeddings [1, 1, 6, C], times W, plus a bias), the
same with the larger term second, without a bias and with a ReLU after it, batched with a
leading axis of 2. Checks, per case:
  - the distributed run has one product layer more, "<MatMul>/distributed"; the other run not;
  - both agree with a float64 NumPy evaluation (rtol 1e-4, atol 1e-5); they are not compared
    bit for bit (the sums are rounded in another order);
  - the saved distributed engine loads and gives the same bits;
  - on CUDA (and the guarded device) the same with --fp16 against float64 (rtol 2e-2, atol 2e-2).
Near misses the pass must leave alone: a sum that is also read elsewhere, terms without enough
broadcast (rows 20 + 1 against 20), a computed W, a term that broadcasts over the last axis.
Exit 77 when the device is CUDA and this machine has none.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import (case_pairs, check_reload, compare_pair, fp16_close, fusion_arg_parser,  # noqa: E402
                       load_inputs_flag, pass_run, report_case, summary)
from residual_fusion import build, reference  # noqa: E402  (float32 graphs of (op, ins, out, attrs))

PRODUCTS = ("MatMul", "FusedMatMul", "FusedMLP")


class Case:
    """nodes: (op, inputs, output, attrs); extra: the product layers the distributed engine has more."""

    def __init__(self, name, nodes, inputs, consts, outputs, extra):
        self.name, self.nodes, self.inputs, self.consts = name, nodes, inputs, consts
        self.outputs, self.extra = outputs, extra


def u(rng, shape):
    a = rng.uniform(-2.0, 2.0, shape).astype(np.float32)
    a[np.abs(a) < 1e-3] = 0.5
    return a


def weights(rng, k, n):
    return (rng.uniform(-1, 1, (k, n)) / np.sqrt(k)).astype(np.float32)


def sum_product(rng, name, xs, ys, n, bias=True, relu=False, swap=False, extra=1):
    """(X + Y) W [+ b] [-> ReLU] -> y."""
    k = max(xs[-1], ys[-1])
    consts = {"w": weights(rng, k, n)}
    nodes = [("Add", ["y_in", "x"] if swap else ["x", "y_in"], "s", {}), ("MatMul", ["s", "w"], "p", {})]
    last = "p"
    if bias:
        consts["b"] = rng.uniform(-0.5, 0.5, n).astype(np.float32)
        nodes.append(("Add", [last, "b"], "pb", {}))
        last = "pb"
    if relu:
        nodes.append(("Relu", [last], "r", {}))
        last = "r"
    nodes[-1] = nodes[-1][:2] + ("y", {})
    return Case(name, nodes, {"x": u(rng, xs), "y_in": u(rng, ys)}, consts, ["y"], extra)


def shared_sum(rng):
    """The sum is a graph output too: it must stay."""
    c = sum_product(rng, "near_miss_sum_read_twice", (1, 9, 1, 16), (1, 1, 6, 16), 8, extra=0)
    c.outputs = ["y", "s"]
    return c


def computed_w(rng):
    """W is an input, not a constant."""
    nodes = [("Add", ["x", "y_in"], "s", {}), ("MatMul", ["s", "wv"], "y", {})]
    return Case("near_miss_computed_w", nodes,
                {"x": u(rng, (1, 9, 1, 16)), "y_in": u(rng, (1, 1, 6, 16)), "wv": u(rng, (16, 8))}, {}, ["y"], 0)


def make_cases(rng):
    return [sum_product(rng, "weights_fc", (1, 37, 1, 24), (1, 1, 6, 24), 40),
            sum_product(rng, "weights_fc_larger_second", (1, 1, 7, 16), (1, 11, 1, 16), 24, swap=True),
            sum_product(rng, "no_bias_relu", (2, 9, 1, 16), (2, 1, 5, 16), 8, bias=False, relu=True),
            sum_product(rng, "bias_relu_batched", (2, 13, 1, 8), (1, 1, 4, 8), 12, relu=True),
            shared_sum(rng), computed_w(rng),
            sum_product(rng, "near_miss_little_broadcast", (1, 20, 16), (1, 1, 16), 8, extra=0),
            sum_product(rng, "near_miss_last_axis_broadcast", (1, 9, 1, 1), (1, 1, 6, 16), 8, extra=0)]


def engine_run(args, d, tag, path, case, on, extra=()):
    return pass_run(args, d, tag, path, case, "S4D_DISTRIBUTE_MATMUL", on, extra)


def products(dump):
    """Product layers of a --dumpLayerInfo listing, and whether "<MatMul>/distributed" is one."""
    count, named = 0, False
    for line in dump.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        count += parts[2] in PRODUCTS
        named = named or (parts[1].endswith("_MatMul/distributed") and parts[2] in PRODUCTS)
    return count, named


def main():
    args = fusion_arg_parser().parse_args()
    rng = np.random.default_rng(1207)
    failures, ran = [], []
    for case, d, path, (dump_on, out_on), (dump_off, out_off) in case_pairs(
            args, make_cases(rng), build, lambda d, t, p, c, on: engine_run(args, d, t, p, c, on),
            ("distributed", "kept"), ran, failures):
        msgs = []
        (n_on, named_on), (n_off, named_off) = products(dump_on), products(dump_off)
        if n_on - n_off != case.extra or named_on != (case.extra > 0) or named_off:
            msgs.append(f"product layers {n_on} (a distributed one: {named_on}) against {n_off} "
                        f"({named_off}) with the pass off; expected {case.extra} more")
        if n_off < 1:
            msgs.append("S4D_DISTRIBUTE_MATMUL=0 lost the product")
        want = reference(case)
        compare_pair(case.outputs, out_on, out_off, want, (1e-4, 1e-5), ("distributed", "kept"), msgs,
                     bitwise=case.extra == 0)
        check_reload(args, f"{d}/distributed.s4d", load_inputs_flag(d, case.inputs), d, out_on,
                     "distributed engine", msgs)
        if args.device == "cuda":
            fp16_close(want, [(tag, engine_run(args, d, tag, path, case, on, ["--fp16"])[1])
                              for tag, on in (("distributed16", True), ("kept16", False))], msgs)
        report_case(case.name, msgs, n_off, n_on, n_on, "product", failures)
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
