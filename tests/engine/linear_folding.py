"""Products by constant matrices folded into one at build (src/passes/fold_linear.c), through
s4dexec.

usage: linear_folding.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph built once and run twice: as it is (the engine folds) and with
S4D_FOLD_LINEAR=0 (the pass off). The cases are the two patterns of Sparse4D's decoupled attention
and their variants:
  - chains: x W1 [+ b1] then W2 [+ b2] (fc_before -> the value projection), each bias or none,
    the bias as the Add's first or second input, three products in a row, a batched x;
  - residuals: (r + (z Wo [+ bo])) Wf [+ bf] (out_proj, the residual on the query, fc_after),
    the sum's inputs in either order, a LayerNormalization after it (the head's norm).
Checks, per case:
  - the folded run has the expected number of product layers fewer, and the layer that keeps
    the fold's name reads the folded weight (its shape); the run with the pass off reads the
    original one (on devices that fuse Linear chains, CUDA and the guarded device, the unfolded
    chain may be one FusedMLP layer that reads it);
  - both agree with a float64 NumPy evaluation (rtol 1e-4, atol 1e-5); they are not compared
    bit for bit where a fold happened (the sums are rounded in another order);
  - the saved folded engine loads and gives the same bits;
  - on CUDA (and the guarded device) the same with --fp16 against float64 (rtol 2e-2, atol 2e-2).
Near misses the pass must leave alone (same layers, same bits): a ReLU between the products, an
intermediate that is also a graph output, a bottleneck (the folded product would multiply more),
a computed W, a weight with an infinity, a residual that broadcasts, an Wf wider than Wo, a sum
that is also read elsewhere.
Exit 77 when the device is CUDA and this machine has none.
"""
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import (case_pairs, check_reload, compare_pair, fp16_close, fusion_arg_parser,  # noqa: E402
                       load_inputs_flag, pass_run, report_case, summary)
from residual_fusion import Builder, build, reference, u  # noqa: E402

PRODUCTS = ("MatMul", "FusedMatMul", "FusedMLP")


class Case:
    """fewer: product layers the folded engine has fewer; weights: {layer name: (shape folded,
    shape unfolded)} of the second input of the layer that keeps that name."""

    def __init__(self, b, name, inputs, outputs, fewer, weights):
        self.name, self.nodes, self.inputs, self.consts = name, b.nodes, inputs, b.consts
        self.outputs, self.fewer, self.weights = outputs, fewer, weights


def node_name(b, out):
    """The ONNX name build() gives the node that makes value out."""
    i = next(i for i, n in enumerate(b.nodes) if n[2] == out)
    return f"n{i}_{b.nodes[i][0]}"


def product(b, x, k, n, bias=None, scale=1.0):
    """x W [+ bias]; bias "second" (Add(p, b)), "first" (Add(b, p)) or None. (out, MatMul's output)."""
    p = b.op("MatMul", [x, b.const("w", scale * b.rng.uniform(-1, 1, (k, n)) / np.sqrt(k))])
    if bias is None:
        return p, p
    c = b.const("b", b.rng.uniform(-0.5, 0.5, n))
    return b.op("Add", [p, c] if bias == "second" else [c, p]), p


def chain(rng, name, shape, widths, biases, fold=True):
    """x through products of the given widths (shape[-1] -> widths[0] -> ...), each with its
    bias (or None): one layer left when fold, named after the last MatMul."""
    b = Builder(rng)
    x, first = "x", None
    k = shape[-1]
    for n, bias in zip(widths, biases):
        x, p = product(b, x, k, n, bias)
        first = first or p
        k = n
    b.name_last("y")
    last = max(i for i, n in enumerate(b.nodes) if n[0] == "MatMul")
    last = f"n{last}_MatMul"
    weights = {last: ([shape[-1], widths[-1]], [widths[-2], widths[-1]])} if fold else {}
    return Case(b, name, {"x": u(rng, shape)}, ["y"], len(widths) - 1 if fold else 0, weights)


def residual(rng, name, rows, k, m, n, bias_o="second", bias_f=None, swap=False, norm=False, fold=True):
    """(r + (z Wo [+ bo])) Wf [+ bf] [-> LayerNormalization]: the folded product keeps Wo's MatMul's
    name and reads Wo Wf [k, n]."""
    b = Builder(rng)
    o, po = product(b, "z", k, m, bias_o)
    s = b.op("Add", [o, "r"] if swap else ["r", o])
    y, _ = product(b, s, m, n, bias_f)
    if norm:
        y = b.norm(y, n)
    b.name_last("y")
    weights = {node_name(b, po): ([k, n], [k, m])} if fold else {}
    return Case(b, name, {"z": u(rng, (1, rows, k)), "r": u(rng, (1, rows, m))}, ["y"], 0, weights)


def near_relu(rng):
    b = Builder(rng)
    h, _ = product(b, "x", 16, 24, "second")
    y, _ = product(b, b.op("Relu", [h]), 24, 8, None)
    b.name_last("y")
    return Case(b, "near_miss_relu_between", {"x": u(rng, (1, 11, 16))}, ["y"], 0, {})


def near_output(rng):
    c = chain(rng, "near_miss_intermediate_output", (1, 11, 16), (24, 8), (None, "second"), fold=False)
    c.outputs = ["y", c.nodes[0][2]]
    return c


def near_computed_w(rng):
    b = Builder(rng)
    h, _ = product(b, "x", 16, 24, None)
    b.op("MatMul", [h, "wv"])
    b.name_last("y")
    return Case(b, "near_miss_computed_w", {"x": u(rng, (1, 11, 16)), "wv": u(rng, (24, 8))}, ["y"], 0, {})


def near_infinite(rng):
    c = chain(rng, "near_miss_infinite_weight", (1, 11, 16), (24, 8), (None, None), fold=False)
    w1 = c.nodes[0][1][1]
    c.consts[w1][3, 5] = np.inf
    c.inputs["x"][:, :, 3] = np.abs(c.inputs["x"][:, :, 3]) + 0.5  # inf * x stays +inf, no NaN
    return c


def near_broadcast(rng):
    c = residual(rng, "near_miss_residual_broadcast", 13, 16, 24, 8, fold=False)
    c.inputs["r"] = u(rng, (1, 1, 24))
    return c


def near_sum_read(rng):
    c = residual(rng, "near_miss_sum_read_twice", 13, 16, 24, 8, fold=False)
    c.outputs = ["y", next(n[2] for n in c.nodes if n[0] == "Add" and "r" in n[1])]
    return c


def make_cases(rng):
    return [chain(rng, "chain_value_projection", (1, 37, 24), (40, 32), (None, "second")),
            chain(rng, "chain_both_biases", (1, 29, 16), (32, 24), ("second", "second")),
            chain(rng, "chain_first_bias_only", (1, 29, 16), (32, 24), ("first", None)),
            chain(rng, "chain_bias_first_input", (1, 29, 16), (32, 24), ("first", "first")),
            chain(rng, "chain_three", (1, 21, 16), (32, 32, 16), ("second", None, "second")),
            chain(rng, "chain_batched", (2, 5, 7, 24), (40, 32), (None, "second")),
            residual(rng, "residual_attention_out", 37, 32, 32, 16),
            residual(rng, "residual_sum_swapped_fc_bias", 29, 24, 32, 16, bias_o="first", bias_f="second",
                     swap=True),
            residual(rng, "residual_no_bias", 29, 24, 32, 16, bias_o=None, bias_f="second"),
            residual(rng, "residual_then_norm", 37, 32, 32, 24, norm=True),
            near_relu(rng), near_output(rng), near_computed_w(rng), near_infinite(rng),
            chain(rng, "near_miss_bottleneck", (1, 11, 48), (4, 48), (None, None), fold=False),
            near_broadcast(rng),
            residual(rng, "near_miss_residual_wider", 13, 16, 24, 32, fold=False),
            near_sum_read(rng)]


def layers(dump):
    """{layer name: (op type, [shapes of its inputs])} of a --dumpLayerInfo listing, in order."""
    out = {}
    for line in dump.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit() or " in: " not in line:
            continue
        ins = line.split(" in: ", 1)[1].split(" out: ", 1)[0]
        out[parts[1]] = (parts[2], [[int(d) for d in s.split(",") if d] if s is not None else None
                                    for s in re.findall(r"\[([0-9,]*)\]|\(none\)", ins)])
    return out


def main():
    args = fusion_arg_parser().parse_args()
    rng = np.random.default_rng(1208)
    failures, ran = [], []
    run = lambda d, tag, path, case, on, extra=(): pass_run(args, d, tag, path, case, "S4D_FOLD_LINEAR", on, extra)
    for case, d, path, (dump_on, out_on), (dump_off, out_off) in case_pairs(
            args, make_cases(rng), build, run, ("folded", "kept"), ran, failures):
        msgs = []
        on, off = layers(dump_on), layers(dump_off)
        n_on = sum(t in PRODUCTS for t, _ in on.values())
        n_off = sum(t in PRODUCTS for t, _ in off.values())
        # Devices with the Linear chain fusion (CUDA, the guarded device) run an unfolded chain
        # as one FusedMLP layer: there the pass off has no more layers, only more products.
        mlp_off = any(t == "FusedMLP" for t, _ in off.values()) and not any(t == "FusedMLP" for t, _ in on.values())
        if (n_off - n_on != case.fewer) if not mlp_off else n_on != n_off:
            msgs.append(f"product layers {n_on} against {n_off} with the pass off; expected {case.fewer} fewer")
        for name, (want_on, want_off) in case.weights.items():
            for tag, ls, want in (("folded", on, want_on), ("kept", off, want_off)):
                got = ls.get(name)
                if tag == "kept" and mlp_off and any(t == "FusedMLP" and want in i for t, i in ls.values()):
                    continue
                if got is None or got[0] not in PRODUCTS or len(got[1]) < 2 or got[1][1] != want:
                    msgs.append(f"{tag} engine: layer {name} is {got}, expected a product of weight {want}")
        if not case.weights and list(on.items()) != list(off.items()):
            msgs.append("a near miss changed the layers")
        compare_pair(case.outputs, out_on, out_off, reference(case), (1e-4, 1e-5), ("folded", "kept"), msgs,
                     bitwise=not case.weights)
        check_reload(args, f"{d}/folded.s4d", load_inputs_flag(d, case.inputs), d, out_on, "folded engine", msgs)
        if args.device == "cuda":
            fp16_close(reference(case), [(tag, run(d, tag, path, case, flag, ["--fp16"])[1])
                                         for tag, flag in (("folded16", True), ("kept16", False))], msgs)
        report_case(case.name, msgs, len(off), len(on), n_on, "product", failures)
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
