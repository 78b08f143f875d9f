"""Concats in place (src/builder/memory_plan.c, s4d_plan_concat_in_place), through s4dexec.

usage: concat_in_place.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph with one or more Concat nodes, built once as it is (the memory
plan puts a Concat's inputs where they lie in its output, and the Concat runs nothing) and once
with S4D_CONCAT_IN_PLACE=0 (every Concat copies). Checks, per case:
  - the layer list marks the expected number of Concats "in place", and none without the plan;
  - both runs give the same outputs bit for bit, and agree with a float64 NumPy evaluation;
  - the saved engine loads (the loader's memory check accepts the sharing) and gives the same
    bits; on CUDA also replayed as a CUDA graph over several streams (--useCudaGraph);
  - an engine whose in-place input is moved by 64 bytes, so that it overlaps the Concat's output
    without lying at its place, is refused at load with the memory plan's message.
Near misses left copying: an input that is a graph input, a constant, a graph output, the same
tensor twice, a tensor already placed in another Concat; a Concat along an inner axis; an input
whose place would not be 64-byte aligned; a Concat whose output is a graph output.
Exit 77 when the device is CUDA and this machine has none.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from exec_util import (case_pairs, check_reload, compare_pair, fusion_arg_parser,  # noqa: E402
                       load_inputs_flag, pass_run, run, summary)
from engine_file import EngineFile  # noqa: E402
from residual_fusion import build  # noqa: E402  (a float32 graph of (op, ins, out, attrs) nodes)

PLACE_ARENA = 0


class Case:
    def __init__(self, name, nodes, inputs, consts, outputs, in_place):
        self.name, self.nodes, self.inputs, self.consts = name, nodes, inputs, consts
        self.outputs = outputs    # output names (float32)
        self.in_place = in_place  # Concats expected in place


def reference(case):
    env = {k: v.astype(np.float64) for k, v in case.inputs.items()}
    env.update({k: v.astype(np.float64) for k, v in case.consts.items()})
    f = {"Add": np.add, "Mul": np.multiply, "MatMul": np.matmul, "Tanh": np.tanh,
         "Relu": lambda x: np.maximum(x, 0)}
    for op, ins, out, attrs in case.nodes:
        a = [env[i] for i in ins]
        env[out] = np.concatenate(a, axis=attrs["axis"]) if op == "Concat" else f[op](*a)
    return {k: env[k] for k in case.outputs}


def engine_run(args, d, tag, path, case, in_place, extra=()):
    text, outs = pass_run(args, d, tag, path, case, "S4D_CONCAT_IN_PLACE", in_place, extra)
    return sum(1 for line in text.splitlines() if line.rstrip().endswith(" in place")), outs


def make_cases(rng):
    def u(*shape):
        a = rng.uniform(-1.5, 1.5, shape).astype(np.float32)
        a[np.abs(a) < 1e-2] = 0.25
        return a

    def mm(x, w, out):
        return ("MatMul", [x, w], out, {})

    def cat(ins, out, axis=1):
        return ("Concat", ins, out, {"axis": axis})

    x, y, z = u(1, 8, 16), u(1, 4, 16), u(1, 6, 16)
    w1, w2, w3 = u(16, 32), u(16, 32), u(16, 32)
    ins = {"x": x, "y": y, "z": z}
    ws = {"w1": w1, "w2": w2, "w3": w3}
    c = []
    # Two products on parallel branches fill the rows of one output.
    c.append(Case("two_products", [
        mm("x", "w1", "a"), mm("y", "w2", "b"), cat(["a", "b"], "c"),
        ("Tanh", ["c"], "o", {})], ins, ws, ["o"], 1))
    # The output of one Concat in place is an input of the next: the blocks nest (c is read
    # by another layer too, so the two Concats stay two).
    c.append(Case("nested", [
        mm("x", "w1", "a"), mm("y", "w2", "b"), cat(["a", "b"], "c"), ("Relu", ["c"], "rc", {}),
        mm("z", "w3", "d"), ("Relu", ["d"], "e", {}), cat(["c", "e"], "f"),
        ("Tanh", ["f"], "t", {}), ("MatMul", ["rc", "wt"], "o1", {}), ("MatMul", ["t", "wt"], "o", {})],
        ins, dict(ws, wt=u(32, 8)), ["o", "o1"], 2))
    # An input read again after the Concat, by a layer that also reads the output.
    c.append(Case("input_read_after", [
        mm("x", "w1", "a"), mm("y", "w2", "b"), cat(["a", "b"], "c"),
        ("Tanh", ["c"], "t", {}), ("Relu", ["a"], "r", {}), ("MatMul", ["t", "wt"], "o", {}),
        ("Add", ["r", "a"], "o2", {})], ins, dict(ws, wt=u(32, 8)), ["o", "o2"], 1))
    # Three inputs, the middle one a Relu of a product.
    c.append(Case("three_inputs", [
        mm("x", "w1", "a"), mm("y", "w2", "b"), ("Relu", ["b"], "rb", {}), mm("z", "w3", "d"),
        cat(["a", "rb", "d"], "c"), ("Tanh", ["c"], "o", {})], ins, ws, ["o"], 1))
    # Near misses.
    c.append(Case("graph_input_operand", [
        mm("y", "w2", "b"), cat(["x", "b"], "c", axis=1), ("Tanh", ["c"], "o", {})],
        {"x": u(1, 8, 32), "y": y}, {"w2": w2}, ["o"], 0))
    c.append(Case("constant_operand", [
        mm("y", "w2", "b"), cat(["k", "b"], "c"), ("Tanh", ["c"], "o", {})],
        {"y": y}, {"w2": w2, "k": u(1, 8, 32)}, ["o"], 0))
    c.append(Case("inner_axis", [
        mm("x", "w1", "a"), mm("x", "w2", "b"), cat(["a", "b"], "c", axis=2),
        ("Tanh", ["c"], "o", {})], {"x": x}, {"w1": w1, "w2": w2}, ["o"], 0))
    c.append(Case("unaligned", [
        ("Mul", ["p", "two"], "a", {}), ("Mul", ["q", "two"], "b", {}), cat(["a", "b"], "c"),
        ("Tanh", ["c"], "o", {})], {"p": u(1, 3), "q": u(1, 5)},
        {"two": np.array([2.0], np.float32)}, ["o"], 0))
    c.append(Case("same_operand_twice", [
        mm("x", "w1", "a"), cat(["a", "a"], "c"), ("Tanh", ["c"], "o", {})],
        {"x": x}, {"w1": w1}, ["o"], 0))
    c.append(Case("operand_is_graph_output", [
        mm("x", "w1", "a"), mm("y", "w2", "b"), cat(["a", "b"], "c"),
        ("Tanh", ["c"], "o", {})], ins, ws, ["o", "a"], 0))
    c.append(Case("output_is_graph_output", [
        mm("x", "w1", "a"), mm("y", "w2", "b"), cat(["a", "b"], "c")], ins, ws, ["c"], 0))
    # a feeds two Concats: only the first takes it in place; the second copies.
    c.append(Case("shared_operand", [
        mm("x", "w1", "a"), mm("y", "w2", "b"), mm("z", "w3", "d"), cat(["a", "b"], "c"),
        cat(["a", "d"], "f"), ("Tanh", ["c"], "o", {}), ("Relu", ["f"], "o2", {})],
        ins, ws, ["o", "o2"], 1))
    return c


def moved_input_refused(args, engine, d, msgs):
    """Moves the first in-place Concat's second input by 64 bytes inside the output, and checks
    that the loader refuses the file."""
    e = EngineFile.load(engine)
    for l in e.layers:
        if l["op_type"] != "Concat":
            continue
        out = e.tensors[l["outputs"][0]]
        ins = [e.tensors[i] for i in l["inputs"]]
        if out["place"] != PLACE_ARENA or any(t["place"] != PLACE_ARENA for t in ins):
            continue
        at = out["offset"]
        placed = True
        for t in ins:
            placed = placed and t["offset"] == at
            at += t["bytes"]
        if not placed:
            continue
        ins[1]["offset"] -= 64
        bad = os.path.join(d, "moved.s4d")
        e.save(bad)
        p = run(args.s4dexec, [f"--loadEngine={bad}", f"--plugins={args.plugins}", "--iterations=1",
                               "--warmUp=0"], check=False)
        said = p.stdout + p.stderr
        if p.returncode == 0 or "share arena bytes while both are live" not in said:
            msgs.append(f"an engine with a moved Concat input was not refused as expected "
                        f"(exit {p.returncode}): {said.strip()[-300:]}")
        return
    msgs.append("no Concat in place found in the saved engine file")


def main():
    ap = fusion_arg_parser()
    args = ap.parse_args()
    rng = np.random.default_rng(2026)
    failures, ran = [], []
    tol = (2e-6, 2e-6) if args.device == "cpu" else (1e-5, 1e-5)

    def run_case(d, tag, path, case, on):
        return engine_run(args, d, tag, path, case, on)

    for case, d, path, (n_on, out_on), (n_off, out_off) in case_pairs(
            args, make_cases(rng), build, run_case, ("in_place", "copied"), ran, failures):
        msgs = []
        if n_on != case.in_place:
            msgs.append(f"{n_on} Concats in place, expected {case.in_place}")
        if n_off:
            msgs.append(f"S4D_CONCAT_IN_PLACE=0 still left {n_off} Concats in place")
        check_reload(args, f"{d}/in_place.s4d", load_inputs_flag(d, case.inputs), d, out_on,
                     "engine with Concats in place", msgs)
        if args.device == "cuda":
            _, out_g = engine_run(args, d, "graph", path, case, True, ["--useCudaGraph"])
            for k in case.outputs:
                if out_g[k].tobytes() != out_on[k].tobytes():
                    msgs.append(f"output {k}: the CUDA graph replay differs from eager")
        if case.in_place:
            moved_input_refused(args, f"{d}/in_place.s4d", d, msgs)
        compare_pair(case.outputs, out_on, out_off, reference(case), tol, ("in place", "copied"),
                     msgs)
        print(f"{'ok' if not msgs else 'FAIL'} {case.name}: {n_on} Concats in place "
              f"(expected {case.in_place})")
        for m in msgs:
            print("   ", m)
        if msgs:
            failures.append(case.name)
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
