"""The inverted residual block fusion (s4d::FusedMBConv) on the CPU engine, through s4dexec.

usage: mbconv_fusion.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph of convolution chains as mobile networks export them (Conv,
BatchNormalization, ReLU6 as Clip, ReLU, HardSwish, Sigmoid + Mul, residual Add), built once and
run twice: as it is (the engine fuses each block) and with S4D_FUSE_MBCONV=0 (the pass off: the
blocks run as their three convolution layers). Checks, per case:
  - the fused run's layer list (--dumpLayerInfo) has the expected number of FusedMBConv layers
    and of convolution layers left; the unfused run has none;
  - fused and unfused outputs are equal bit for bit: the CPU kernel computes every element with
    the unfused layers' operations in their order, fused or through the three-layer fallback;
    and the fused engine gives the same bits on one thread as on all cores;
  - both agree with a float64 NumPy evaluation of the ONNX graph within rtol 1e-5, atol 1e-5
    (weights scaled by 1/sqrt(fan-in) keep every tensor near 1; float32 sums of up to 200
    products round by a few 2^-24 of their magnitude).
With S4D_CPU_HOST_ONLY=1 in the environment, and on the guarded test device (--device cuda with
S4D_TEST_BACKEND=guarded: it runs the CPU's host references, never what a kernel's prepare()
makes), every layer runs its host reference: the fused reference (float fmaf chains) and the
unfused layers (BLAS) round differently, so only the float64 comparison and the layer counts are
checked.
Shapes: stride 1 and 2, kernels 1, 3, 5 and 7, maps of 13x9, 7x7 and 1x1, expanded channels 58,
72, 120 and 200, output channels 16, 24 and 40, with and without the residual, batch 2; blocks
without an expand layer (MobileNetV2's first, ShuffleNetV2's stride-2 branch); auto_pad
SAME_UPPER on a stride-2 depthwise layer (padding only at the bottom and right).
Near misses the pass must leave alone: an expanded tensor with two readers, a graph output
between depthwise and project, a depthwise layer with dilation 2 or stride 3, a 3x3 project.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import (close, fusion_arg_parser, layer_types, pass_run, report_case, says_no_gpu,  # noqa: E402
                       summary)

F32 = TensorProto.FLOAT
NO_GPU = 77
CONV_TYPES = ("Conv", "FusedConv", "FusedConvAct")


class Graph:
    """Nodes, initializers and a float64 evaluation of what they compute."""

    def __init__(self, rng, name):
        self.rng, self.name = rng, name
        self.nodes, self.inits, self.consts = [], [], {}
        self.inputs, self.outputs = {}, []
        self.n = 0

    def fresh(self, stem):
        self.n += 1
        return f"{stem}{self.n}"

    def const(self, stem, a):
        k = self.fresh(stem)
        a = np.asarray(a, np.float32)
        self.inits.append(numpy_helper.from_array(a, k))
        self.consts[k] = a
        return k

    def input(self, name, shape):
        a = self.rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        a[np.abs(a) < 1e-3] = 0.5
        self.inputs[name] = a
        return name

    def node(self, op, ins, **attrs):
        out = self.fresh(op.lower() + "_")
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(self, x, cin, cout, k, stride=1, pad=None, group=1, bias=True, dil=1, auto_pad=None):
        fan = (cin // group) * k * k
        w = self.const("w", self.rng.normal(0, 1.0 / np.sqrt(fan), (cout, cin // group, k, k)))
        ins = [x, w]
        if bias:
            ins.append(self.const("b", self.rng.uniform(-0.2, 0.2, cout)))
        attrs = {"kernel_shape": [k, k], "strides": [stride, stride], "group": group}
        if dil != 1:
            attrs["dilations"] = [dil, dil]
        if auto_pad:
            attrs["auto_pad"] = auto_pad
        else:
            p = (k - 1) // 2 * dil if pad is None else pad
            attrs["pads"] = [p, p, p, p]
        return self.node("Conv", ins, **attrs)

    def bn(self, x, c):
        s = self.const("s", self.rng.uniform(0.5, 1.5, c))
        b = self.const("bb", self.rng.uniform(-0.3, 0.3, c))
        m = self.const("m", self.rng.uniform(-0.3, 0.3, c))
        v = self.const("v", self.rng.uniform(0.5, 1.5, c))
        return self.node("BatchNormalization", [x, s, b, m, v], epsilon=1e-5)

    def act(self, x, kind):
        if kind is None:
            return x
        if kind == "Relu6":
            return self.node("Clip", [x, self.const("lo", 0.0), self.const("hi", 6.0)])
        if kind == "Silu":
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        if kind == "LeakyRelu":
            return self.node("LeakyRelu", [x], alpha=0.1)
        if kind == "HardSigmoid":
            return self.node("HardSigmoid", [x], alpha=0.25, beta=0.4)
        return self.node(kind, [x])

    def cba(self, x, cin, cout, k, act, stride=1, group=1, **kw):
        """Conv -> BatchNormalization -> activation, as torchvision's ConvBNActivation."""
        return self.act(self.bn(self.conv(x, cin, cout, k, stride, group=group, bias=False, **kw), cout), act)

    def block(self, x, cin, mid, cout, k, stride, acts=("Relu6", "Relu6", None), expand=True,
              residual=None, dw_kw=None):
        """An inverted residual block; residual None: when the shapes allow (stride 1, cin == cout)."""
        h = self.cba(x, cin, mid, 1, acts[0]) if expand else x
        h = self.cba(h, mid, mid, k, acts[1], stride=stride, group=mid, **(dw_kw or {}))
        h = self.cba(h, mid, cout, 1, acts[2])
        if residual is None:
            residual = stride == 1 and cin == cout
        return self.node("Add", [h, x]) if residual else h

    def model(self, outs):
        self.outputs = outs
        g_in = [helper.make_tensor_value_info(k, F32, list(v.shape)) for k, v in self.inputs.items()]
        g_out = [helper.make_tensor_value_info(k, F32, None) for k in outs]
        g = helper.make_graph(self.nodes, self.name, g_in, g_out, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def conv64(x, w, b, attrs):
    """ONNX Conv (2-D) in float64."""
    k = w.shape[2]
    s = attrs.get("strides", [1, 1])[0]
    d = attrs.get("dilations", [1, 1])[0]
    g = attrs.get("group", 1)
    n, c, h, wd = x.shape
    ext = d * (k - 1) + 1
    if "auto_pad" in attrs:
        assert attrs["auto_pad"] == "SAME_UPPER"
        pads = []
        for size in (h, wd):
            out = -(-size // s)
            tot = max((out - 1) * s + ext - size, 0)
            pads.append((tot // 2, tot - tot // 2))
    else:
        p = attrs.get("pads", [0, 0, 0, 0])
        pads = [(p[0], p[2]), (p[1], p[3])]
    xp = np.pad(x, ((0, 0), (0, 0), pads[0], pads[1]))
    ho = (xp.shape[2] - ext) // s + 1
    wo = (xp.shape[3] - ext) // s + 1
    m = w.shape[0]
    y = np.zeros((n, m, ho, wo))
    xg = xp.reshape(n, g, c // g, xp.shape[2], xp.shape[3])
    wg = w.reshape(g, m // g, c // g, k, k)
    for ky in range(k):
        for kx in range(k):
            win = xg[:, :, :, ky * d:ky * d + s * (ho - 1) + 1:s, kx * d:kx * d + s * (wo - 1) + 1:s]
            y += np.einsum("ngchw,gmc->ngmhw", win, wg[:, :, :, ky, kx]).reshape(n, m, ho, wo)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def reference(gr):
    """float64 evaluation of the graph's nodes."""
    env = {k: v.astype(np.float64) for k, v in gr.inputs.items()}
    env.update({k: v.astype(np.float64) for k, v in gr.consts.items()})
    for nd in gr.nodes:
        a = {at.name: helper.get_attribute_value(at) for at in nd.attribute}
        for k, v in list(a.items()):
            if isinstance(v, bytes):
                a[k] = v.decode()
        x = [env[i] for i in nd.input]
        op = nd.op_type
        if op == "Conv":
            r = conv64(x[0], x[1], x[2] if len(x) > 2 else None, a)
        elif op == "BatchNormalization":
            sh = (1, -1, 1, 1)
            r = (x[0] - x[3].reshape(sh)) / np.sqrt(x[4].reshape(sh) + a["epsilon"]) * x[1].reshape(sh) \
                + x[2].reshape(sh)
        elif op == "Clip":
            r = np.minimum(np.maximum(x[0], x[1]), x[2])
        elif op == "Relu":
            r = np.maximum(x[0], 0)
        elif op == "Sigmoid":
            r = 1.0 / (1.0 + np.exp(-x[0]))
        elif op == "HardSwish":
            r = x[0] * np.clip(x[0] / 6.0 + 0.5, 0, 1)
        elif op == "HardSigmoid":
            r = np.clip(a["alpha"] * x[0] + a["beta"], 0, 1)
        elif op == "LeakyRelu":
            r = np.where(x[0] < 0, a["alpha"] * x[0], x[0])
        elif op == "Mul":
            r = x[0] * x[1]
        elif op == "Add":
            r = x[0] + x[1]
        else:
            raise ValueError(op)
        env[nd.output[0]] = r
    return {k: env[k] for k in gr.outputs}


class Case:
    def __init__(self, name, gr, outs, fused, convs_left):
        self.name, self.gr = name, gr
        self.model = gr.model(outs)
        self.fused = fused            # expected FusedMBConv layers
        self.convs_left = convs_left  # expected Conv / FusedConv / FusedConvAct layers beside them


def make_cases(rng):
    c = []

    def case(name, fn, fused, convs_left, shape, extra_out=False):
        gr = Graph(rng, name)
        x = gr.input("x", shape)
        outs = fn(gr, x)
        c.append(Case(name, gr, outs if isinstance(outs, list) else [outs], fused, convs_left))

    # MobileNetV2: expand 6x with ReLU6, depthwise 3x3 with ReLU6, linear project, residual
    case("v2_s1_residual", lambda g, x: g.block(x, 24, 72, 24, 3, 1), 1, 0, (2, 24, 13, 9))
    case("v2_s2", lambda g, x: g.block(x, 24, 120, 40, 3, 2), 1, 0, (2, 24, 13, 9))
    case("v2_s1_no_residual", lambda g, x: g.block(x, 24, 200, 40, 3, 1), 1, 0, (2, 24, 7, 7))
    # two blocks in a row: each fuses on its own
    case("v2_two_blocks", lambda g, x: g.block(g.block(x, 16, 72, 24, 3, 2), 24, 120, 24, 3, 1),
         2, 0, (2, 16, 13, 9))
    # MobileNetV2's first block: stem 3x3 conv, then depthwise + project without expand
    case("v2_first_block",
         lambda g, x: g.block(g.cba(x, 3, 32, 3, "Relu6", stride=2), 32, 32, 16, 3, 1, expand=False),
         1, 1, (2, 3, 27, 19))
    # MobileNetV3: 5x5 kernels, HardSwish, ReLU
    case("v3_5x5_hswish_residual",
         lambda g, x: g.block(x, 40, 200, 40, 5, 1, acts=("HardSwish", "HardSwish", None)), 1, 0, (2, 40, 7, 7))
    case("v3_5x5_s2_relu",
         lambda g, x: g.block(x, 24, 72, 40, 5, 2, acts=("Relu", "Relu", None)), 1, 0, (2, 24, 13, 9))
    case("v3_no_expand_relu",
         lambda g, x: g.block(x, 16, 16, 16, 3, 1, acts=(None, "Relu", None), expand=False), 1, 0, (2, 16, 13, 9))
    # every other activation somewhere in a block
    case("acts_silu_sigmoid_leaky",
         lambda g, x: g.block(x, 24, 72, 24, 3, 1, acts=("Silu", "Sigmoid", "LeakyRelu"), residual=False),
         1, 0, (2, 24, 7, 7))
    case("acts_hardsigmoid_none",
         lambda g, x: g.block(x, 24, 72, 24, 3, 1, acts=(None, "HardSigmoid", "HardSwish")), 1, 0, (2, 24, 7, 7))
    # ShuffleNetV2: both branches (1x1 ReLU -> dw 3x3 linear -> 1x1 ReLU; dw s2 -> 1x1 ReLU)
    case("shufflenet_branch_s1",
         lambda g, x: g.block(x, 58, 58, 58, 3, 1, acts=("Relu", None, "Relu"), residual=False), 1, 0, (2, 58, 7, 7))
    case("shufflenet_branch_s2",
         lambda g, x: g.block(x, 58, 58, 58, 3, 2, acts=("Relu", None, "Relu"), residual=False), 1, 0, (2, 58, 13, 9))
    case("shufflenet_branch1_s2",
         lambda g, x: g.block(x, 24, 24, 58, 3, 2, acts=(None, None, "Relu"), expand=False), 1, 0, (2, 24, 13, 9))
    # kernels 7 and 1, a 1x1 map, odd sizes
    case("dw_7x7", lambda g, x: g.block(x, 24, 72, 24, 7, 1), 1, 0, (2, 24, 7, 7))
    case("dw_1x1_kernel", lambda g, x: g.block(x, 24, 72, 40, 1, 1), 1, 0, (2, 24, 13, 9))
    case("map_1x1", lambda g, x: g.block(x, 40, 120, 40, 3, 1), 1, 0, (2, 40, 1, 1))
    case("map_1x1_s2", lambda g, x: g.block(x, 40, 120, 24, 3, 2), 1, 0, (2, 40, 1, 1))
    case("map_2x3_s2_k5", lambda g, x: g.block(x, 24, 72, 24, 5, 2), 1, 0, (2, 24, 2, 3))
    # biases in the Conv nodes themselves, no BatchNormalization, no activations
    def plain(g, x):
        h = g.conv(x, 24, 72, 1)
        h = g.conv(h, 72, 72, 3, 1, group=72)
        h = g.conv(h, 72, 24, 1, bias=False)
        return g.node("Add", [h, x])
    case("plain_convs", plain, 1, 0, (2, 24, 13, 9))
    # auto_pad SAME_UPPER on a stride-2 depthwise layer: pads 0 top/left, 1 bottom/right
    case("dw_same_upper_s2",
         lambda g, x: g.block(x, 24, 72, 40, 3, 2, dw_kw={"auto_pad": "SAME_UPPER"}), 1, 0, (2, 24, 13, 10))
    # an expand layer with stride 2 is not absorbed; depthwise and project still fuse
    def strided_expand(g, x):
        h = g.cba(x, 24, 72, 1, "Relu6", stride=2, pad=0)
        h = g.cba(h, 72, 72, 3, "Relu6", group=72)
        return g.cba(h, 72, 24, 1, None)
    case("expand_stride2_left", strided_expand, 1, 1, (2, 24, 13, 9))
    # near misses
    def two_readers(g, x):
        e = g.cba(x, 24, 72, 1, "Relu6")
        h = g.cba(e, 72, 72, 3, "Relu6", group=72)
        h = g.cba(h, 72, 24, 1, None)
        return [h, g.node("Relu", [e])]
    case("miss_expand_two_readers", two_readers, 1, 1, (2, 24, 7, 7))  # dw + project still fuse
    def dw_output(g, x):
        e = g.cba(x, 24, 72, 1, "Relu6")
        d = g.cba(e, 72, 72, 3, "Relu6", group=72)
        return [g.cba(d, 72, 24, 1, None), d]
    case("miss_dw_graph_output", dw_output, 0, 3, (2, 24, 7, 7))
    case("miss_dw_dilation2", lambda g, x: g.block(x, 24, 72, 24, 3, 1, dw_kw={"dil": 2}), 0, 3, (2, 24, 13, 9))
    case("miss_dw_stride3", lambda g, x: g.block(x, 24, 72, 24, 3, 3), 0, 3, (2, 24, 13, 9))
    def project_3x3(g, x):
        e = g.cba(x, 24, 72, 1, "Relu6")
        d = g.cba(e, 72, 72, 3, "Relu6", group=72)
        return g.cba(d, 72, 24, 3, None)
    case("miss_project_3x3", project_3x3, 0, 3, (2, 24, 7, 7))
    return c


def engine_run(args, d, tag, path, case, fuse, threads=None):
    text, outs = pass_run(args, d, tag, path, case.gr, "S4D_FUSE_MBCONV", fuse,
                          [f"--threads={threads}"] if threads else [], save=False)
    return layer_types(text), outs


def main():
    ap = fusion_arg_parser()
    args = ap.parse_args()
    host_only = os.environ.get("S4D_CPU_HOST_ONLY", "0") not in ("", "0") or \
        os.environ.get("S4D_TEST_BACKEND") == "guarded"
    rng = np.random.default_rng(2718)
    failures, ran = [], 0
    for case in make_cases(rng):
        if args.k not in case.name:
            continue
        ran += 1
        d = os.path.join(args.scratch, case.name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        onnx.save(case.model, path)
        msgs = []
        try:
            types_f, out_f = engine_run(args, d, "fused", path, case, True)
            types_u, out_u = engine_run(args, d, "unfused", path, case, False)
            out_1 = None if host_only else engine_run(args, d, "fused_1t", path, case, True, 1)[1]
        except RuntimeError as e:
            said = str(e)
            if args.device == "cuda" and says_no_gpu(said):
                print(f"{case.name}: no CUDA device or backend here; skipping")
                return NO_GPU
            failures.append(case.name)
            print(f"FAIL {case.name}: {e}")
            continue
        nf = types_f.count("FusedMBConv")
        left = sum(types_f.count(t) for t in CONV_TYPES)
        if nf != case.fused or left != case.convs_left:
            msgs.append(f"fused layers {types_f} (expected {case.fused} FusedMBConv and "
                        f"{case.convs_left} convolutions)")
        if "FusedMBConv" in types_u:
            msgs.append(f"S4D_FUSE_MBCONV=0 still fused: {types_u}")
        want = reference(case.gr)
        for k in case.gr.outputs:
            a, b = out_f[k], out_u[k]
            if not host_only and (a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes()):
                diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.shape == b.shape else None
                msgs.append(f"output {k}: fused != unfused bit for bit"
                            + (f" (max abs diff {np.nanmax(diff):.3g})" if diff is not None and diff.size else ""))
            if out_1 is not None and out_1[k].tobytes() != a.tobytes():
                msgs.append(f"output {k}: the fused engine on one thread differs from all cores")
            for tag, got in (("fused", a), ("unfused", b)):
                if got.shape != want[k].shape:
                    msgs.append(f"output {k} ({tag}): shape {got.shape}, expected {want[k].shape}")
                    continue
                ok, what = close(got, want[k], 1e-5, 1e-5)
                if not ok:
                    msgs.append(f"output {k} ({tag}) vs float64: {what}")
        report_case(case.name, msgs, len(types_u), len(types_f), nf, "FusedMBConv", failures)
    return summary(ran, failures)


if __name__ == "__main__":
    sys.exit(main())
