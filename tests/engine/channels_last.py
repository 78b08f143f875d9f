"""Channels-last convolutions (--convLayout=nhwc, src/passes/layout_nhwc.c) through s4dexec.

usage: channels_last.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph of 2-D convolutions as backbones export them: a ResNet stem (7x7
stride 2, MaxPool, which runs channels-last too), residual blocks (the Add and ReLU fused into the convolution), a strided
block with a 1x1 downsample, an FPN (1x1 laterals, nearest Resize x2 and Add, 3x3 outputs) and the
flattening of the maps to [N, H*W, C] (Reshape, Transpose, Concat); grouped, dilated and
bias-free convolutions with a residual; asymmetric padding; a 1-D convolution and a convolution
whose output is a graph output and also feeds a Sigmoid; activations between convolutions
(ReLU6 as Clip, SiLU, LeakyRelu). Each is built with --convLayout=nchw and
--convLayout=nhwc. Checks, per case:
  - the NHWC engine file (tests/fuzz/engine_file.py) has the expected number of FusedConv layers
    with layout NHWC and at most the expected number of Transpose layers (those that cancel, or
    that a Resize or the flattening lets through, are gone); the NCHW one has none;
  - on the CPU with every layer through its host reference (S4D_CPU_HOST_ONLY=1), NHWC and NCHW
    outputs are equal bit for bit: the host convolution computes NHWC by transposing around the
    NCHW computation, and a Transpose only moves elements;
  - both agree with a float64 NumPy evaluation within rtol 1e-5, atol 1e-5;
  - the saved NHWC engine loads and gives the outputs it gave when built.
Hostile: an engine whose FusedConv layer names layout "NHCW", or is NHWC with its W in NCHW
order, or whose s4d::MaxPool names layout NCHW, is refused at load naming the layer.
With --device cuda (a GPU, or the guarded test device): the NHWC build against float64 only,
and the layer counts for the cases whose convolutions the device takes channels-last (CUDA
refuses asymmetric padding in NHWC; the guarded device runs the CPU's kernels and takes it).
"""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from exec_util import (check_reload, close, fusion_arg_parser, load_inputs_flag,  # noqa: E402
                       prepared_cases, run, summary)
from engine_file import EngineFile  # noqa: E402
from mbconv_fusion import Graph, conv64  # noqa: E402

NO_GPU = 77


class Case:
    def __init__(self, name, gr, nhwc, transposes, nhwc_cuda=None, transposes_cuda=None):
        self.name, self.gr = name, gr
        self.nhwc = nhwc              # FusedConv layers with layout NHWC expected
        self.transposes = transposes  # at most this many Transpose layers in the NHWC engine
        # on a GPU, where other fusions apply (no FusedConvAct) and asymmetric padding stays NCHW
        self.nhwc_cuda = nhwc if nhwc_cuda is None else nhwc_cuda
        self.transposes_cuda = transposes if transposes_cuda is None else transposes_cuda


def maxpool64(x, k, s, p):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    y = np.full((n, c, ho, wo), -np.inf)
    for ky in range(k):
        for kx in range(k):
            y = np.maximum(y, xp[:, :, ky:ky + s * (ho - 1) + 1:s, kx:kx + s * (wo - 1) + 1:s])
    return y


def conv1d64(x, w, b, pad):
    n, c, length = x.shape
    m, _, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad)))
    lo = xp.shape[2] - k + 1
    y = np.zeros((n, m, lo))
    for t in range(k):
        y += np.einsum("ncl,mc->nml", xp[:, :, t:t + lo], w[:, :, t])
    return y + b.reshape(1, -1, 1)


def evaluate(gr):
    """float64 evaluation of the case's nodes."""
    env = {k: v.astype(np.float64) for k, v in gr.inputs.items()}
    env.update({k: np.asarray(v).astype(np.float64) if np.asarray(v).dtype != np.int64 else np.asarray(v)
                for k, v in gr.consts.items()})
    for nd in gr.nodes:
        a = {at.name: helper.get_attribute_value(at) for at in nd.attribute}
        x = [env[i] if i else None for i in nd.input]
        op = nd.op_type
        if op == "Conv" and x[0].ndim == 3:
            r = conv1d64(x[0], x[1], x[2], a["pads"][0])
        elif op == "Conv":
            r = conv64(x[0], x[1], x[2] if len(x) > 2 else None, a)
        elif op == "Relu":
            r = np.maximum(x[0], 0)
        elif op == "Clip":
            r = np.minimum(np.maximum(x[0], x[1]), x[2])
        elif op == "LeakyRelu":
            r = np.where(x[0] < 0, a["alpha"] * x[0], x[0])
        elif op == "Mul":
            r = x[0] * x[1]
        elif op == "Max":
            r = np.maximum(x[0], x[1])
        elif op == "Sigmoid":
            r = 1.0 / (1.0 + np.exp(-x[0]))
        elif op == "Add":
            r = x[0] + x[1]
        elif op == "MaxPool":
            r = maxpool64(x[0], a["kernel_shape"][0], a["strides"][0], a["pads"][0])
        elif op == "Resize":  # nearest, integer scales on H and W
            sy, sx = int(x[2][2]), int(x[2][3])
            r = np.repeat(np.repeat(x[0], sy, axis=2), sx, axis=3)
        elif op == "Reshape":
            r = x[0].reshape([int(v) for v in x[1]])
        elif op == "Transpose":
            r = np.transpose(x[0], a["perm"])
        elif op == "Concat":
            r = np.concatenate(x, axis=a["axis"])
        else:
            raise NotImplementedError(op)
        env[nd.output[0]] = r
    return {k: env[k] for k in gr.outputs}


def add_int64(gr, stem, values):
    k = gr.fresh(stem)
    a = np.asarray(values, np.int64)
    gr.inits.append(numpy_helper.from_array(a, k))
    gr.consts[k] = a
    return k


def resnet_fpn(rng):
    gr = Graph(rng, "resnet_fpn")
    x = gr.input("x", (2, 3, 32, 40))
    h = gr.node("Relu", [gr.conv(x, 3, 8, 7, stride=2, pad=3)])
    h = gr.node("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    # a basic residual block
    b = gr.node("Relu", [gr.conv(h, 8, 8, 3)])
    c2 = gr.node("Relu", [gr.node("Add", [gr.conv(b, 8, 8, 3), h])])
    # a strided block with a 1x1 downsample
    b = gr.node("Relu", [gr.conv(c2, 8, 16, 3, stride=2)])
    c3 = gr.node("Relu", [gr.node("Add", [gr.conv(b, 16, 16, 3), gr.conv(c2, 8, 16, 1, stride=2, pad=0)])])
    # FPN on (c2, c3)
    l3 = gr.conv(c3, 16, 12, 1, pad=0)
    up = gr.node("Resize", [l3, "", gr.const("sc", [1.0, 1.0, 2.0, 2.0])], mode="nearest")
    l2 = gr.node("Add", [gr.conv(c2, 8, 12, 1, pad=0), up])
    outs = []
    for lvl, (t, hw) in enumerate(((l2, 8 * 10), (l3, 4 * 5))):
        f = gr.conv(t, 12, 12, 3)
        r = gr.node("Reshape", [f, add_int64(gr, "shape", [2, 12, hw])])
        outs.append(gr.node("Transpose", [r], perm=[0, 2, 1]))
    feats = gr.node("Concat", outs, axis=1)
    gr.model([feats])
    # 10 convolutions and the MaxPool channels-last; left: the input's Transpose
    return Case("resnet_fpn", gr, nhwc=10, transposes=1)


def grouped(rng):
    gr = Graph(rng, "grouped")
    x = gr.input("x", (1, 8, 11, 13))
    h = gr.node("Relu", [gr.conv(x, 8, 8, 3, group=2)])
    h = gr.conv(h, 8, 8, 3, dil=2)
    y = gr.node("Relu", [gr.node("Add", [gr.conv(h, 8, 8, 3, bias=False), x])])
    gr.model([y])
    return Case("grouped_dilated_residual", gr, nhwc=3, transposes=3)


def asymmetric(rng):
    gr = Graph(rng, "asymmetric")
    x = gr.input("x", (2, 4, 9, 10))
    h = gr.conv(x, 4, 6, 3, pad=1)
    for at in gr.nodes[-1].attribute:
        if at.name == "pads":
            at.CopyFrom(helper.make_attribute("pads", [0, 0, 1, 1]))
    y = gr.conv(gr.node("Relu", [h]), 6, 5, 3)
    gr.model([y])
    # CUDA takes the second convolution only: the first pads asymmetrically
    return Case("asymmetric_padding", gr, nhwc=2, transposes=2, nhwc_cuda=1)


def mixed(rng):
    gr = Graph(rng, "mixed")
    x = gr.input("x", (2, 5, 7, 6))
    c = gr.conv(x, 5, 6, 3)
    s = gr.node("Sigmoid", [c])
    y = gr.conv(s, 6, 4, 1, pad=0)
    v = gr.input("v", (2, 3, 17))
    w = gr.const("w1", rng.normal(0, 0.3, (4, 3, 3)))
    b = gr.const("b1", rng.uniform(-0.2, 0.2, 4))
    z = gr.node("Conv", [v, w, b], kernel_shape=[3], pads=[1, 1])
    gr.model([c, y, z])
    # c is a graph output and feeds a Sigmoid: each convolution keeps its Transposes in and out;
    # the 1-D Conv is left alone
    return Case("graph_output_and_1d", gr, nhwc=2, transposes=4)


def activations(rng):
    gr = Graph(rng, "activations")
    x = gr.input("x", (2, 6, 9, 11))
    h = gr.node("Clip", [gr.conv(x, 6, 8, 3), gr.const("lo", 0.0), gr.const("hi", 6.0)])
    h = gr.conv(h, 8, 8, 1, pad=0)
    h = gr.node("Mul", [h, gr.node("Sigmoid", [h])])
    h = gr.node("LeakyRelu", [gr.conv(h, 8, 5, 3)], alpha=0.1)
    m = gr.node("Max", [gr.conv(h, 5, 7, 3), gr.conv(h, 5, 7, 1, pad=0)])
    y = gr.conv(m, 7, 4, 3)
    gr.model([y])
    # CPU: each of the first three convolutions and its activation become one FusedConvAct, which
    # stays NCHW; the other three run channels-last, the Max between them too: left, the
    # Transpose of h (both readers share it) and the output's.
    # CUDA: the activations (ReLU6, SiLU as a FusedPointwise, LeakyRelu) follow the convolutions
    # channels-last as well; left: the input's Transpose and the output's
    return Case("activations_between_convolutions", gr, nhwc=3, transposes=2, nhwc_cuda=6,
                transposes_cuda=2)


CASES = [resnet_fpn, grouped, asymmetric, mixed, activations]


def nhwc_layers(engine_path):
    e = EngineFile.load(engine_path)
    n = sum(1 for l in e.layers if l["op_type"] == "FusedConv" and any(
        a["name"] == "layout" and a["value"] == b"NHWC" for a in l["attrs"]))
    pools = sum(1 for l in e.layers if l["op_type"] == "MaxPool" and any(
        a["name"] == "layout" and a["value"] == b"NHWC" for a in l["attrs"]))
    if pools and not n:
        raise AssertionError("a channels-last MaxPool without channels-last convolutions")
    t = sum(1 for l in e.layers if l["op_type"] == "Transpose")
    return n, t


def build(args, d, gr, layout, inputs, tag, env=None, device=None):
    path = os.path.join(d, "model.onnx")
    engine = os.path.join(d, f"{tag}.s4de")
    out = os.path.join(d, tag)
    p = run(args.s4dexec, [f"--onnx={path}", f"--plugins={args.plugins}",
                           f"--device={device or args.device}", f"--convLayout={layout}",
                           "--iterations=1", "--warmUp=0", inputs, f"--saveEngine={engine}",
                           f"--exportOutput={out}"], env=env, check=False)
    if p.returncode != 0:
        return None, None, p.stderr.strip()
    return engine, {k: np.load(os.path.join(out, f"{k}.npy")) for k in gr.outputs}, ""


def check_hostile(args, scratch):
    """A single convolution, built NHWC, then its layout edited: the load must refuse it."""
    rng = np.random.default_rng(3)
    gr = Graph(rng, "one")
    x = gr.input("x", (1, 4, 6, 7))
    c = gr.conv(x, 4, 6, 3)
    gr.model([c, gr.node("MaxPool", [c], kernel_shape=[2, 2], strides=[2, 2])])
    d = os.path.join(scratch, "hostile")
    os.makedirs(d, exist_ok=True)
    onnx.save(gr.model(gr.outputs), os.path.join(d, "model.onnx"))
    inputs = load_inputs_flag(d, gr.inputs)
    engine, _, why = build(args, d, gr, "nhwc", inputs, "good", device="cpu")
    if engine is None:
        print(f"FAIL hostile: the NHWC build failed: {why}")
        return 1
    failures = 0

    def layout_to(v):
        def edit(layer):
            for a in layer["attrs"]:
                if a["name"] == "layout":
                    a["value"] = v
        return edit

    def to_nchw_weights_shape(layer):
        for a in layer["attrs"]:
            if a["name"] == "layout":
                a["value"] = b"NCHW"  # W stays [M, kh, kw, C]: C no longer matches X's

    for case, op, edit, want in (
            ("layout_unknown", "FusedConv", layout_to(b"NHCW"), "layout 'NHCW'"),
            ("layout_swapped", "FusedConv", to_nchw_weights_shape, "input channels per group"),
            ("pool_layout_nchw", "MaxPool", layout_to(b"NCHW"), "s4d::MaxPool is NHWC")):
        e = EngineFile.load(engine)
        convs = [l for l in e.layers if l["op_type"] == op]
        if len(convs) != 1:
            print(f"FAIL hostile {case}: {len(convs)} {op} layers in the NHWC engine, expected 1")
            failures += 1
            continue
        edit(convs[0])
        path = os.path.join(d, f"{case}.s4de")
        e.save(path)
        p = run(args.s4dexec, [f"--loadEngine={path}", f"--plugins={args.plugins}", "--iterations=1",
                               "--warmUp=0"], check=False)
        ok = p.returncode == 1 and want in p.stderr and convs[0]["name"] in p.stderr
        print(f"{'ok' if ok else 'FAIL'} hostile {case}: exit {p.returncode}: "
              f"{(p.stderr.strip().splitlines() or [''])[-1]}")
        failures += not ok
    return failures


def main():
    ap = fusion_arg_parser()
    args = ap.parse_args()
    rng = np.random.default_rng(11)
    failures, ran = [], 0
    on_cpu = args.device == "cpu"
    guarded = os.environ.get("S4D_TEST_BACKEND") == "guarded"
    for case, d, inputs in prepared_cases(args, CASES, rng):
        ran += 1
        msgs = []
        host_env = dict(os.environ, S4D_CPU_HOST_ONLY="1")
        e_nhwc, out_nhwc, why = build(args, d, case.gr, "nhwc", inputs, "nhwc")
        if e_nhwc is None:
            if "no usable CUDA device" in why or "has no backend" in why:
                print(f"{case.name}: no CUDA device; skipping")
                return NO_GPU
            msgs.append(f"NHWC build failed: {why}")
        else:
            n, t = nhwc_layers(e_nhwc)
            host = on_cpu or guarded
            want, want_t = (case.nhwc, case.transposes) if host else (case.nhwc_cuda, case.transposes_cuda)
            if n != want or t > want_t:
                msgs.append(f"NHWC engine: {n} channels-last convolutions (expected {want}), "
                            f"{t} Transposes (expected at most {want_t})")
            ref = evaluate(case.gr)
            for k in case.gr.outputs:
                ok, what = close(out_nhwc[k], ref[k], 1e-5, 1e-5)
                if not ok:
                    msgs.append(f"output {k} (NHWC) vs float64: {what}")
            check_reload(args, e_nhwc, inputs, d, out_nhwc, "NHWC engine", msgs)
        if on_cpu:
            e_nchw, _, why = build(args, d, case.gr, "nchw", inputs, "nchw")
            if e_nchw is None:
                msgs.append(f"NCHW build failed: {why}")
            elif nhwc_layers(e_nchw)[0] != 0:
                msgs.append("--convLayout=nchw made channels-last convolutions")
            _, a, why_a = build(args, d, case.gr, "nhwc", inputs, "nhwc_host", env=host_env)
            _, b, why_b = build(args, d, case.gr, "nchw", inputs, "nchw_host", env=host_env)
            if a is None or b is None:
                msgs.append(f"host-only builds failed: {why_a or why_b}")
            else:
                for k in case.gr.outputs:
                    if a[k].tobytes() != b[k].tobytes():
                        msgs.append(f"output {k}: NHWC != NCHW bit for bit on the host references "
                                    f"(max abs diff {np.max(np.abs(a[k] - b[k])):.3g})")
        print(f"{'ok' if not msgs else 'FAIL'} {case.name}")
        for m in msgs:
            print("   ", m)
        if msgs:
            failures.append(case.name)
    if on_cpu and not args.k:
        if check_hostile(args, args.scratch):
            failures.append("hostile")
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
