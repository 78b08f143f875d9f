"""Chains of Linear layers -> s4d::FusedMLP (src/passes/fuse_mlp.c) through s4dexec.

usage: mlp_fusion.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph of the Linear chains a Sparse4D head exports (MatMul, Add of a bias,
Relu, LayerNormalization over the last axis): the anchor encoder (four Slices of the anchor's
columns, each through four Linear -> ReLU -> LayerNorm layers, then a Concat), a refinement branch
of five layers, a feed-forward block 96 -> 256 -> 96, one 96 -> 300 -> 96 (too wide for the
CUDA kernel: it stays two FusedMatMuls there; the guarded device, which runs the host reference,
takes it), 301 rows through narrow layers (they fuse) and through 160 x 160 ones (on CUDA these
stay apart: the kernel refuses layers of more than 128 x 128 weights on more than 256 rows), a
chain whose middle value is also a graph output (it splits there), products without bias and a
LayerNorm without B, and ten layers (eight, then two). Rows are never a multiple of the kernel's
eight.

With --device cuda (a GPU, or the guarded test device, S4D_TEST_BACKEND=guarded), per case:
  - the engine has the expected FusedMLP layers, with the expected number of layers in each, and
    no Slice left where one was folded in;
  - its outputs agree with a float64 NumPy evaluation (rtol 1e-4, atol 1e-5), as do those of the
    build with S4D_FUSE_MLP=0, which has no FusedMLP;
  - the saved engine loads and gives the outputs it gave when built;
  - on a GPU, the kernel's block shapes (8 rows per block, 2 for few rows, and 1, which only
    the variable picks) give those outputs bit for bit (S4D_CUDA_MLP_ROWS=8, =2 and =1), and so
    does the tiled kernel where the one with the chain's constants in shared memory runs
    (S4D_CUDA_MLP_STAGED=0 with 2 rows).
Hostile (--device cuda only): an engine whose FusedMLP layer has one norms value too few, an
activation of 2, or an input_begin past X's columns is refused at load, naming the layer; on a
GPU also one whose LayerNorm Scale is a graph input instead of a constant.
With --device cpu: the CPU build has no FusedMLP (the pass is for devices that are not host
memory) and agrees with float64.
Every build runs with S4D_FOLD_LINEAR=0: the products without activation between them stay apart.
"""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
import mbconv_fusion  # noqa: E402
from exec_util import (check_hostile_layers, check_reload, close, engine_tensor,  # noqa: E402
                       fusion_arg_parser, layer_attr, prepared_cases, run, summary)
from engine_file import EngineFile  # noqa: E402

NO_GPU = 77


class Graph(mbconv_fusion.Graph):
    """mbconv_fusion's graph with the Linear layers and last-axis Slices of a head."""

    def ints(self, stem, values):
        k = self.fresh(stem)
        a = np.asarray(values, np.int64)
        self.inits.append(numpy_helper.from_array(a, k))
        self.consts[k] = a
        return k

    def linear(self, x, k, n, bias=True, relu=False, norm=None):
        """x W (+ b) (ReLU) (LayerNorm: norm "sb" with B, "s" Scale only)."""
        w = self.rng.uniform(-1.0, 1.0, (k, n)) / np.sqrt(k)
        y = self.node("MatMul", [x, self.const("w", w)])
        if bias:
            y = self.node("Add", [y, self.const("b", self.rng.uniform(-0.5, 0.5, n))])
        if relu:
            y = self.node("Relu", [y])
        if norm:
            ins = [y, self.const("g", self.rng.uniform(0.5, 1.5, n))]
            if norm == "sb":
                ins.append(self.const("beta", self.rng.uniform(-0.5, 0.5, n)))
            y = self.node("LayerNormalization", ins, axis=-1, epsilon=1e-5)
        return y

    def slice_last(self, x, lo, hi):
        return self.node("Slice", [x, self.ints("s", [lo]), self.ints("e", [hi]), self.ints("a", [-1])])


def evaluate(gr):
    """float64 evaluation of the graph's nodes."""
    env = {k: v.astype(np.float64) for k, v in gr.inputs.items()}
    env.update({k: v.astype(np.float64) if v.dtype != np.int64 else v for k, v in gr.consts.items()})
    for nd in gr.nodes:
        x = [env[i] for i in nd.input]
        op = nd.op_type
        if op == "MatMul":
            r = x[0] @ x[1]
        elif op == "Add":
            r = x[0] + x[1]
        elif op == "Relu":
            r = np.maximum(x[0], 0)
        elif op == "LayerNormalization":
            m = x[0].mean(-1, keepdims=True)
            v = ((x[0] - m) ** 2).mean(-1, keepdims=True)
            r = (x[0] - m) / np.sqrt(v + 1e-5) * x[1] + (x[2] if len(x) > 2 else 0)
        elif op == "Slice":
            r = x[0][..., int(x[1][0]):int(x[2][0])]
        elif op == "Concat":
            r = np.concatenate(x, axis=-1)
        else:
            raise NotImplementedError(op)
        env[nd.output[0]] = r
    return {k: env[k] for k in gr.outputs}


class Case:
    def __init__(self, name, gr, chains, slices_left, chains_cuda=None):
        self.name, self.gr = name, gr
        self.chains = sorted(chains)  # layers of each FusedMLP expected on the device
        self.slices_left = slices_left
        # on a GPU, whose kernel refuses layers wider than 256 (the guarded device runs the host's)
        self.chains_cuda = self.chains if chains_cuda is None else sorted(chains_cuda)


def anchor_encoder(rng):
    gr = Graph(rng, "anchor_encoder")
    x = gr.input("anchor", (1, 37, 11))
    outs = []
    for lo, hi, width in ((0, 3, 32), (3, 6, 8), (6, 8, 8), (8, 11, 16)):
        h = gr.slice_last(x, lo, hi)
        k = hi - lo
        for _ in range(4):
            h = gr.linear(h, k, width, relu=True, norm="sb")
            k = width
        outs.append(h)
    gr.model([gr.node("Concat", outs, axis=-1)])
    return Case("anchor_encoder", gr, [4, 4, 4, 4], 0)


def refine(rng):
    gr = Graph(rng, "refine")
    h = gr.input("x", (2, 45, 64))
    for norm in (None, "sb", None, "sb"):
        h = gr.linear(h, 64, 64, relu=True, norm=norm)
    gr.model([gr.linear(h, 64, 11)])
    return Case("refine", gr, [5], 0)


def ffn(rng):
    gr = Graph(rng, "ffn")
    x = gr.input("x", (1, 30, 96))
    h = gr.linear(gr.linear(x, 96, 256, relu=True), 256, 96)
    gr.model([h])
    return Case("ffn", gr, [2], 0)


def too_wide(rng):
    gr = Graph(rng, "too_wide")
    x = gr.input("x", (1, 30, 96))
    gr.model([gr.linear(gr.linear(x, 96, 300, relu=True), 300, 96)])
    return Case("too_wide", gr, [2], 0, chains_cuda=[])


def many_rows(rng):
    """Rows past 256: narrow layers fuse; a layer of more than 128 x 128 weights stays apart on CUDA."""
    gr = Graph(rng, "many_rows")
    x = gr.input("x", (1, 301, 40))
    narrow = gr.linear(gr.linear(x, 40, 128, relu=True, norm="sb"), 128, 128, relu=True, norm="sb")
    wide = gr.linear(gr.linear(x, 40, 160, relu=True), 160, 160)
    gr.model([narrow, wide])
    return Case("many_rows", gr, [2, 2], 0, chains_cuda=[2])


def split_at_output(rng):
    gr = Graph(rng, "split_at_output")
    h = gr.input("x", (3, 7, 24))
    h = gr.linear(gr.linear(h, 24, 40, relu=True), 40, 40, norm="sb")
    mid = h
    h = gr.linear(gr.linear(h, 40, 24, relu=True), 24, 5)
    gr.model([mid, h])
    return Case("split_at_output", gr, [2, 2], 0)


def plain(rng):
    gr = Graph(rng, "plain")
    h = gr.input("x", (61, 12))
    h = gr.linear(h, 12, 48, bias=False)
    h = gr.linear(h, 48, 48, bias=False, norm="s")
    gr.model([gr.linear(h, 48, 7, bias=False, relu=True)])
    return Case("plain", gr, [3], 0)


def long_chain(rng):
    gr = Graph(rng, "long_chain")
    h = gr.input("x", (1, 19, 16))
    for i in range(10):
        h = gr.linear(h, 16, 16, relu=i % 2 == 0, norm="sb" if i % 3 == 0 else None)
    gr.model([h])
    return Case("long_chain", gr, [2, 8], 0)


CASES = [anchor_encoder, refine, ffn, too_wide, many_rows, split_at_output, plain, long_chain]


def mlp_layers(engine_path):
    """Per FusedMLP layer its number of Linear layers; and the op types of the engine's layers."""
    e = EngineFile.load(engine_path)
    chains = sorted(len(layer_attr(l, "norms")["value"]) for l in e.layers if l["op_type"] == "FusedMLP")
    return chains, [l["op_type"] for l in e.layers]


def build(args, d, gr, inputs, tag, env=None, device=None):
    path = os.path.join(d, "model.onnx")
    engine = os.path.join(d, f"{tag}.s4de")
    out = os.path.join(d, tag)
    p = run(args.s4dexec, [f"--onnx={path}", f"--plugins={args.plugins}", f"--device={device or args.device}",
                           "--iterations=1", "--warmUp=0", inputs, f"--saveEngine={engine}",
                           f"--exportOutput={out}"], env=env, check=False)
    if p.returncode != 0:
        return None, None, p.stderr.strip()
    return engine, {k: np.load(os.path.join(out, f"{k}.npy")) for k in gr.outputs}, ""


def check_outputs(gr, got, ref, what, msgs):
    for k in gr.outputs:
        ok, detail = close(got[k], ref[k], 1e-4, 1e-5)
        if not ok:
            msgs.append(f"output {k} ({what}) vs float64: {detail}")


def check_hostile(args, scratch):
    """A Slice and two Linear layers built on the device into one FusedMLP, then edited: the load
    must refuse it."""
    rng = np.random.default_rng(5)
    gr = Graph(rng, "hostile")
    x = gr.input("x", (1, 9, 11))
    h = gr.linear(gr.slice_last(x, 2, 8), 6, 16, relu=True, norm="sb")
    gr.linear(h, 16, 4)
    gr.nodes[-1].output[0] = "o"
    # a value of a LayerNorm Scale's shape that is not a constant
    gr.node("Relu", [gr.input("v", (16,))])
    gr.nodes[-1].output[0] = "v_out"
    d = os.path.join(scratch, "hostile")
    os.makedirs(d, exist_ok=True)
    onnx.save(gr.model(["o", "v_out"]), os.path.join(d, "model.onnx"))
    engine = os.path.join(d, "good.s4de")
    p = run(args.s4dexec, [f"--onnx={d}/model.onnx", f"--plugins={args.plugins}", f"--device={args.device}",
                           "--iterations=1", "--warmUp=0", f"--saveEngine={engine}",
                           f"--exportOutput={d}/built"], check=False)
    if p.returncode != 0:
        print(f"FAIL hostile: the build failed: {p.stderr.strip()}")
        return 1

    def set_attr(name, value):
        def edit(layer):
            layer_attr(layer, name)["value"] = value
        return edit

    cases = [("norms_short", set_attr("norms", [1]), "norms must hold 2 values"),
             ("activation_2", set_attr("activations", [2, 0]), "activations[0] is 2"),
             ("begin_past_columns", set_attr("input_begin", 8), "reads columns [8, 14)")]
    if not os.environ.get("S4D_TEST_BACKEND"):
        # A real GPU's kernel stages the constants before it waits for the kernel ahead of it: a
        # layer parameter computed at run time must be refused (the host kernels run it).
        try:
            v = engine_tensor(EngineFile.load(engine), "v")
        except RuntimeError as e:
            print(f"FAIL hostile: {e}")
            return 1

        def scale_from_input(layer):
            ins = list(layer["inputs"])
            ins[3] = v  # layer 0's Scale
            layer["inputs"] = ins
        cases.append(("scale_not_constant", scale_from_input, "layer 0's Scale (input 3) is not a constant"))
    return check_hostile_layers(args.s4dexec, args.plugins, d, engine, "FusedMLP", cases, "FusedMLP edits")


def check_rows_per_block(args, engine, inputs, d, built, msgs):
    """On a GPU: the saved engine run with each block shape of the FusedMLP kernel (8 rows per
    block, 2, 1), and with 2 by the tiled kernel where the staged one would run
    (S4D_CUDA_MLP_STAGED=0), gives the outputs built, bit for bit."""
    for rows in ("8", "2", "1"):
        check_reload(args, engine, inputs, d, built, f"engine run with S4D_CUDA_MLP_ROWS={rows}", msgs,
                     env=dict(os.environ, S4D_CUDA_MLP_ROWS=rows), outdir=f"rows{rows}")
    check_reload(args, engine, inputs, d, built, "engine run with S4D_CUDA_MLP_ROWS=2 S4D_CUDA_MLP_STAGED=0",
                 msgs, env=dict(os.environ, S4D_CUDA_MLP_ROWS="2", S4D_CUDA_MLP_STAGED="0"), outdir="rows2_tiled")


def main():
    args = fusion_arg_parser().parse_args()
    # Some cases chain Linear layers with nothing between them (plain, long_chain), which the
    # linear folding (src/passes/fold_linear.c) would merge before this fusion sees them.
    os.environ["S4D_FOLD_LINEAR"] = "0"
    rng = np.random.default_rng(17)
    failures, ran = [], 0
    on_cpu = args.device == "cpu"
    guarded = os.environ.get("S4D_TEST_BACKEND") == "guarded"
    for case, d, inputs in prepared_cases(args, CASES, rng):
        ran += 1
        ref = evaluate(case.gr)
        msgs = []
        engine, out, why = build(args, d, case.gr, inputs, "fused")
        if engine is None:
            if "no usable CUDA device" in why or "has no backend" in why:
                print(f"{case.name}: no CUDA device; skipping")
                return NO_GPU
            msgs.append(f"build failed: {why}")
        else:
            chains, types = mlp_layers(engine)
            want = [] if on_cpu else case.chains if guarded else case.chains_cuda
            if chains != want:
                msgs.append(f"FusedMLP layers of {chains} Linear layers, expected {want}")
            slices = types.count("Slice")
            if not on_cpu and slices != case.slices_left:
                msgs.append(f"{slices} Slice layers left, expected {case.slices_left}")
            check_outputs(case.gr, out, ref, "fused", msgs)
            check_reload(args, engine, inputs, d, out, "engine", msgs)
            if not on_cpu and not guarded:
                check_rows_per_block(args, engine, inputs, d, out, msgs)
        if not on_cpu:
            off = dict(os.environ, S4D_FUSE_MLP="0")
            engine_off, out_off, why = build(args, d, case.gr, inputs, "unfused", env=off)
            if engine_off is None:
                msgs.append(f"the S4D_FUSE_MLP=0 build failed: {why}")
            else:
                if mlp_layers(engine_off)[0]:
                    msgs.append("S4D_FUSE_MLP=0 still made FusedMLP layers")
                check_outputs(case.gr, out_off, ref, "unfused", msgs)
        print(f"{'ok' if not msgs else 'FAIL'} {case.name}")
        for m in msgs:
            print("   ", m)
        if msgs:
            failures.append(case.name)
    if not on_cpu and not args.k:
        if check_hostile(args, args.scratch):
            failures.append("hostile")
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
