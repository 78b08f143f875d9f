"""Residual Adds fused into the product before them (s4d::FusedMatMul's input 5,
src/passes/fuse_matmul.c), through s4dexec.

usage: residual_fusion.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph of the blocks a Sparse4D head exports, built once and run twice:
as it is (the engine fuses) and with S4D_FUSE_RESIDUAL=0 (the pass off). The feed-forward block
identity_fc(x) + mlp(x) -> LayerNormalization, with the identity product first in the graph (its
residual is computed after it), 64 wide (the own CUDA kernel's normalising epilogue) and 80 wide;
the attention's out_proj(o) + query before a product without bias; x W + x as the graph output;
batched products (B computed: a strided batch, and a loop of calls whose A broadcasts). Checks,
per case:
  - the fused run has the expected number of Add and LayerNormalization layers (none where the
    pass takes them) and the unfused run all of them;
  - both agree with a float64 NumPy evaluation (rtol 1e-4, atol 1e-5); on the CPU and the guarded
    device they are equal bit for bit (the residual is added after the bias, as the Add did); on
    a real GPU cuBLASLt adds it before the bias, so only the tolerance holds;
  - the saved fused engine loads and gives the same bits;
  - on CUDA (and the guarded device) the same with --fp16 against float64 (rtol 2e-2, atol 2e-2).
Near misses the pass must leave alone: a ReLU between the product and the Add, a residual that
broadcasts, a product whose output is also a graph output.
Exit 77 when the device is CUDA and this machine has none.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import (case_pairs, check_reload, compare_pair, fp16_close, fusion_arg_parser,  # noqa: E402
                       layer_types, load_inputs_flag, pass_run, report_case, summary)

F32 = TensorProto.FLOAT


class Case:
    """nodes: (op, inputs, output, attrs); adds, norms: the Add and LayerNormalization layers the
    fused engine keeps."""

    def __init__(self, name, nodes, inputs, consts, outputs, adds, norms):
        self.name, self.nodes, self.inputs, self.consts = name, nodes, inputs, consts
        self.outputs, self.adds, self.norms = outputs, adds, norms


class Builder:
    def __init__(self, rng):
        self.rng, self.nodes, self.consts, self.n = rng, [], {}, 0

    def fresh(self, stem):
        self.n += 1
        return f"{stem}{self.n}"

    def const(self, stem, a):
        k = self.fresh(stem)
        self.consts[k] = np.asarray(a, np.float32)
        return k

    def op(self, op, ins, **attrs):
        out = self.fresh(op.lower())
        self.nodes.append((op, ins, out, attrs))
        return out

    def linear(self, x, k, n, bias=True, relu=False):
        y = self.op("MatMul", [x, self.const("w", self.rng.uniform(-1, 1, (k, n)) / np.sqrt(k))])
        if bias:
            y = self.op("Add", [y, self.const("b", self.rng.uniform(-0.5, 0.5, n))])
        return self.op("Relu", [y]) if relu else y

    def norm(self, x, n):
        return self.op("LayerNormalization", [x, self.const("s", self.rng.uniform(0.5, 1.5, n)),
                                              self.const("nb", self.rng.uniform(-0.5, 0.5, n))],
                       axis=-1, epsilon=1e-5)

    def name_last(self, out):
        """Renames the last node's output (to a graph output's name)."""
        op, ins, _, attrs = self.nodes[-1]
        self.nodes[-1] = (op, ins, out, attrs)

    def case(self, name, inputs, outputs, adds, norms):
        return Case(name, self.nodes, inputs, self.consts, outputs, adds, norms)


def build(case):
    nodes = [helper.make_node(op, ins, [out], name=f"n{i}_{op}", **attrs)
             for i, (op, ins, out, attrs) in enumerate(case.nodes)]
    inits = [numpy_helper.from_array(v, k) for k, v in case.consts.items()]
    g_in = [helper.make_tensor_value_info(k, F32, list(v.shape)) for k, v in case.inputs.items()]
    g_out = [helper.make_tensor_value_info(k, F32, None) for k in case.outputs]
    g = helper.make_graph(nodes, case.name, g_in, g_out, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def reference(case):
    """float64 NumPy evaluation of the graph."""
    env = {k: v.astype(np.float64) for k, v in list(case.inputs.items()) + list(case.consts.items())}
    for op, ins, out, attrs in case.nodes:
        a = [env[i] for i in ins]
        if op == "MatMul":
            env[out] = np.matmul(a[0], a[1])
        elif op == "Add":
            env[out] = a[0] + a[1]
        elif op == "Relu":
            env[out] = np.maximum(a[0], 0.0)
        elif op == "ReduceMean":
            env[out] = a[0].mean(axis=tuple(attrs["axes"]), keepdims=True)
        elif op == "LayerNormalization":
            m = a[0].mean(-1, keepdims=True)
            v = ((a[0] - m) ** 2).mean(-1, keepdims=True)
            env[out] = (a[0] - m) / np.sqrt(v + attrs["epsilon"]) * a[1] + a[2]
        else:
            raise ValueError(op)
    return {k: env[k] for k in case.outputs}


def u(rng, shape):
    a = rng.uniform(-2.0, 2.0, shape).astype(np.float32)
    a[np.abs(a) < 1e-3] = 0.5
    return a


def ffn(rng, name, rows, c, hidden):
    """identity_fc(x) + Linear(ReLU(Linear(x))) -> LayerNorm, the identity first."""
    b = Builder(rng)
    ident = b.linear("x", c, c)
    h = b.linear("x", c, hidden, relu=True)
    mlp = b.linear(h, hidden, c)
    b.norm(b.op("Add", [ident, mlp]), c)
    b.name_last("y")
    return b.case(name, {"x": u(rng, (2, rows, c))}, ["y"], adds=0, norms=0)


def relu_then_residual(rng):
    """ReLU(x W + b) + x: the activation comes before the residual."""
    b = Builder(rng)
    p = b.linear("x", 32, 32, relu=True)
    b.nodes.append(("Add", [p, "x"], "y", {}))
    return b.case("near_miss_relu_before_residual", {"x": u(rng, (2, 21, 32))}, ["y"], 1, 0)


def attention_out(rng):
    """out_proj(o) + query, then fc_after without bias (the head's graph layers)."""
    b = Builder(rng)
    o = b.linear("o", 64, 64)
    s = b.op("Add", ["q", o])
    b.linear(s, 64, 32, bias=False)
    b.name_last("y")
    return b.case("attention_out_proj", {"q": u(rng, (1, 37, 64)), "o": u(rng, (1, 37, 64))}, ["y"], 0, 0)


def matmul_plus_input(rng):
    b = Builder(rng)
    p = b.linear("x", 24, 24, bias=False)
    b.nodes.append(("Add", [p, "x"], "y", {}))
    return b.case("matmul_plus_input", {"x": u(rng, (3, 7, 24))}, ["y"], 0, 0)


def batched(rng, name, a_shape, b_shape):
    """A B + R with B computed (no constant weight)."""
    b = Builder(rng)
    p = b.op("MatMul", ["a", "bm"])
    out = np.matmul(np.zeros(a_shape), np.zeros(b_shape)).shape
    b.nodes.append(("Add", ["r", p], "y", {}))
    return b.case(name, {"a": u(rng, a_shape), "bm": u(rng, b_shape), "r": u(rng, out)}, ["y"], 0, 0)


def bcast(rng):
    b = Builder(rng)
    p = b.linear("x", 16, 16)
    m = b.op("ReduceMean", ["x"], axes=[-1])
    b.nodes.append(("Add", [p, m], "y", {}))
    return b.case("near_miss_broadcast_residual", {"x": u(rng, (2, 9, 16))}, ["y"], 1, 0)


def shared_output(rng):
    b = Builder(rng)
    b.linear("x", 16, 16)
    b.name_last("p")
    b.nodes.append(("Add", ["p", "x"], "y", {}))
    return b.case("near_miss_product_is_output", {"x": u(rng, (2, 9, 16))}, ["y", "p"], 1, 0)


def make_cases(rng):
    return [ffn(rng, "ffn_64", 37, 64, 128), ffn(rng, "ffn_80", 45, 80, 96), attention_out(rng),
            matmul_plus_input(rng), batched(rng, "batched_strided", (2, 3, 19, 8), (2, 3, 8, 12)),
            batched(rng, "batched_loop", (3, 1, 19, 8), (3, 2, 8, 12)),
            relu_then_residual(rng), bcast(rng), shared_output(rng)]


def engine_run(args, d, tag, path, case, fused, extra=()):
    text, outs = pass_run(args, d, tag, path, case, "S4D_FUSE_RESIDUAL", fused, extra)
    return layer_types(text), outs


def main():
    args = fusion_arg_parser().parse_args()
    rng = np.random.default_rng(77)
    failures, ran = [], []
    real_gpu = args.device == "cuda" and not os.environ.get("S4D_TEST_BACKEND")
    for case, d, path, (types_f, out_f), (types_u, out_u) in case_pairs(
            args, make_cases(rng), build, lambda d, t, p, c, on: engine_run(args, d, t, p, c, on),
            ("fused", "unfused"), ran, failures):
        msgs = []
        got = (types_f.count("Add"), types_f.count("LayerNormalization"))
        if got != (case.adds, case.norms):
            msgs.append(f"fused layers {types_f}: {got[0]} Add and {got[1]} LayerNormalization, "
                        f"expected {case.adds} and {case.norms}")
        want_adds = sum(op == "Add" and not any(i in case.consts for i in ins)
                        for op, ins, _, _ in case.nodes)
        if types_u.count("Add") < want_adds:
            msgs.append(f"S4D_FUSE_RESIDUAL=0 lost an Add: {types_u}")
        want = reference(case)
        compare_pair(case.outputs, out_f, out_u, want, (1e-4, 1e-5), ("fused", "unfused"), msgs,
                     bitwise=not real_gpu)
        check_reload(args, f"{d}/fused.s4d", load_inputs_flag(d, case.inputs), d, out_f, "fused engine", msgs)
        if args.device == "cuda":
            fp16_close(want, [(tag, engine_run(args, d, tag, path, case, on, ["--fp16"])[1])
                              for tag, on in (("fused16", True), ("unfused16", False))], msgs)
        report_case(case.name, msgs, len(types_u), len(types_f), types_f.count("FusedMatMul"),
                    "FusedMatMul", failures)
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
