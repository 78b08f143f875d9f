"""Dense-family op models for device_compare.py: Conv, FusedConv (made by the fusion
pass from Conv [+ Add] [+ Relu]), ConvTranspose, MatMul, FusedMatMul (from MatMul +
Add [+ Relu]), Gemm, Einsum, MaxPool, AveragePool,
GlobalAveragePool, GlobalMaxPool; the Sparse4Dv3 shapes (ResNet50 + FPN backbone at
6x3x256x704, the head's Linear layers and attention); variants (groups, dilations,
strides, asymmetric and auto pads, 1-D/3-D, broadcast batches, transposes, ceil_mode,
Indices, float64) and sizes past 65535 in a grid dimension.

Tolerances. The CPU reference and the GPU sum the same float32 products in different
orders (and cuDNN's FFT / Winograd algorithms transform the operands first), so
results differ by a few units of float32 rounding times the size of the partial sums.
Weights are scaled by 1/sqrt(fan-in) so every output is O(1): products use
rtol 1e-4, atol 1e-4 (convolutions 3e-4: transform-based algorithms); pooling and
the float64 products compare at 1e-6 / 1e-12 (same order of the same operations).

float16 versions of the main cases and of the Sparse4Dv3 shapes (half_cases, run as their
own family, models_dense16.py) compare the CUDA float16 kernels with the CPU float32
reference on the same rounded values; see the tolerances there.

Run directly with --refusals S4DEXEC PLUGINS WORKDIR, this checks that the CUDA
engine refuses what it does not run with a message naming the attribute (exit 77
without a GPU or in a build without the CUDA backend).
"""
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import OPSET, Case, half_case, rand, single_op  # noqa: E402

CONV_TOL = dict(rtol=1e-4, atol=3e-4)
GEMM_TOL = dict(rtol=1e-4, atol=1e-4)
POOL_TOL = dict(rtol=1e-6, atol=1e-6)
F64_TOL = dict(rtol=1e-12, atol=1e-12)


def weights(rng, shape, fan_in, dtype=np.float32):
    """Uniform in +-1/sqrt(fan_in): outputs of O(1) whatever the size."""
    return rand(rng, shape, dtype, -1.0, 1.0) / np.asarray(np.sqrt(fan_in), dtype)


def graph(nodes, inputs, outputs, consts=None, opset=OPSET, extra_opsets=()):
    """A model of several nodes. inputs: {name: array}; outputs: {name: (shape, type)};
    consts: {name: array} initializers."""
    g_in = [helper.make_tensor_value_info(k, TensorProto.DOUBLE if v.dtype == np.float64
                                          else TensorProto.FLOAT, list(v.shape))
            for k, v in inputs.items()]
    g_out = [helper.make_tensor_value_info(k, t, list(s)) for k, (s, t) in outputs.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in (consts or {}).items()]
    g = helper.make_graph(nodes, "dense", g_in, g_out, inits)
    ops = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(g, opset_imports=ops)


def conv_out(n, k, s=1, d=1, pb=0, pe=0):
    return (n + pb + pe - (d * (k - 1) + 1)) // s + 1


# ---- Conv / FusedConv ----

def conv_case(rng, name, x_shape, w_shape, attrs, out_spatial, bias=True, tol=CONV_TOL):
    x = rand(rng, x_shape)
    fan = int(np.prod(w_shape[1:]))
    consts = {"W": weights(rng, w_shape, fan)}
    if bias:
        consts["B"] = rand(rng, (w_shape[0],), lo=-0.5, hi=0.5)
    y = [x_shape[0], w_shape[0]] + list(out_spatial)
    return Case(name, single_op("Conv", {"X": x}, {"Y": y}, attrs, consts), {"X": x}, **tol)


def fused_conv_case(rng, name, x_shape, w_shape, attrs, out_spatial, bias=True, residual=True,
                    relu=True, tol=CONV_TOL):
    """Conv [+ Add(residual)] [+ Relu]: the fusion pass makes one FusedConv of it."""
    x = rand(rng, x_shape)
    y = [x_shape[0], w_shape[0]] + list(out_spatial)
    fan = int(np.prod(w_shape[1:]))
    consts = {"W": weights(rng, w_shape, fan)}
    ins = {"X": x}
    conv_in = ["X", "W"]
    if bias:
        consts["B"] = rand(rng, (w_shape[0],), lo=-0.5, hi=0.5)
        conv_in.append("B")
    # The chain's last node writes Y itself: nothing but dense-family ops reaches the device.
    steps = ["conv"] + (["add"] if residual else []) + (["relu"] if relu else [])
    names = {st: ("Y" if st == steps[-1] else "t_" + st) for st in steps}
    nodes = [helper.make_node("Conv", conv_in, [names["conv"]], name="conv", **attrs)]
    last = names["conv"]
    if residual:
        ins["Z"] = rand(rng, y)
        nodes.append(helper.make_node("Add", [last, "Z"], [names["add"]], name="add"))
        last = names["add"]
    if relu:
        nodes.append(helper.make_node("Relu", [last], [names["relu"]], name="relu"))
    model = graph(nodes, ins, {"Y": (y, TensorProto.FLOAT)}, consts)
    return Case(name, model, ins, **tol)


def conv_bn_relu_case(rng, name, x_shape, w_shape, attrs, out_spatial):
    """Conv -> BatchNormalization -> Relu, as the backbone exports: BN folds into W and B."""
    x = rand(rng, x_shape)
    m = w_shape[0]
    fan = int(np.prod(w_shape[1:]))
    consts = {"W": weights(rng, w_shape, fan), "scale": rand(rng, (m,), lo=0.5, hi=1.5),
              "bias": rand(rng, (m,), lo=-0.5, hi=0.5), "mean": rand(rng, (m,), lo=-0.2, hi=0.2),
              "var": rand(rng, (m,), lo=0.5, hi=2.0)}
    y = [x_shape[0], m] + list(out_spatial)
    nodes = [helper.make_node("Conv", ["X", "W"], ["c"], name="conv", **attrs),
             helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"],
                              name="bn", epsilon=1e-5),
             helper.make_node("Relu", ["b"], ["Y"], name="relu")]
    return Case(name, graph(nodes, {"X": x}, {"Y": (y, TensorProto.FLOAT)}, consts), {"X": x},
                **CONV_TOL)


def conv_cases(rng):
    c = []
    c.append(conv_case(rng, "conv2d_3x3_pad1", (2, 8, 17, 19), (16, 8, 3, 3),
                       dict(pads=[1, 1, 1, 1]), (17, 19)))
    c.append(conv_case(rng, "conv2d_stride2_dil2_nobias", (2, 5, 23, 18), (7, 5, 3, 3),
                       dict(strides=[2, 2], dilations=[2, 2], pads=[2, 1, 2, 1]),
                       (conv_out(23, 3, 2, 2, 2, 2), conv_out(18, 3, 2, 2, 1, 1)), bias=False))
    c.append(conv_case(rng, "conv2d_groups4", (2, 16, 12, 13), (12, 4, 3, 3),
                       dict(group=4, pads=[1, 1, 1, 1]), (12, 13)))
    c.append(conv_case(rng, "conv2d_depthwise", (1, 32, 20, 20), (32, 1, 5, 5),
                       dict(group=32, pads=[2, 2, 2, 2]), (20, 20)))
    c.append(conv_case(rng, "conv2d_1x1_direct", (3, 24, 9, 11), (10, 24, 1, 1), {}, (9, 11)))
    c.append(conv_case(rng, "conv2d_asym_pads", (2, 3, 14, 15), (4, 3, 3, 2),
                       dict(pads=[0, 2, 1, 0]),
                       (conv_out(14, 3, 1, 1, 0, 1), conv_out(15, 2, 1, 1, 2, 0))))
    c.append(conv_case(rng, "conv2d_same_upper_even_k", (1, 4, 10, 9), (6, 4, 4, 2),
                       dict(auto_pad="SAME_UPPER", strides=[2, 1]), (5, 9)))
    c.append(conv_case(rng, "conv2d_same_lower", (1, 4, 11, 9), (6, 4, 2, 3),
                       dict(auto_pad="SAME_LOWER", strides=[2, 2]), (6, 5)))
    c.append(conv_case(rng, "conv2d_valid", (2, 3, 10, 12), (5, 3, 3, 5), dict(auto_pad="VALID"),
                       (8, 8)))
    c.append(conv_case(rng, "conv2d_size1_dims", (1, 1, 1, 7), (3, 1, 1, 3), {}, (1, 5)))
    c.append(conv_case(rng, "conv1d_asym_stride2", (2, 6, 31), (5, 6, 4),
                       dict(pads=[1, 2], strides=[2]), (conv_out(31, 4, 2, 1, 1, 2),)))
    c.append(conv_case(rng, "conv3d_pad1", (1, 4, 6, 7, 8), (6, 4, 3, 3, 3),
                       dict(pads=[1, 1, 1, 1, 1, 1]), (6, 7, 8)))
    # More than 65535 (image, channel) planes: grid-stride loops of the epilogue kernel.
    c.append(fused_conv_case(rng, "fusedconv_planes_over_65535", (700, 4, 5, 5), (100, 4, 3, 3),
                             dict(pads=[1, 1, 1, 1]), (5, 5)))
    c.append(fused_conv_case(rng, "fusedconv_bias_add_relu", (2, 8, 15, 17), (8, 8, 3, 3),
                             dict(pads=[1, 1, 1, 1]), (15, 17)))
    c.append(fused_conv_case(rng, "fusedconv_add_only", (2, 8, 15, 17), (8, 8, 1, 1), {}, (15, 17),
                             relu=False))
    c.append(fused_conv_case(rng, "fusedconv_relu_nobias", (2, 6, 9, 10), (12, 6, 3, 3),
                             dict(pads=[1, 1, 1, 1]), (9, 10), bias=False, residual=False))
    c.append(fused_conv_case(rng, "fusedconv_relu_asym", (1, 5, 9, 10), (7, 5, 2, 2),
                             dict(pads=[1, 0, 0, 1]), (9, 10), residual=False))
    # Sparse4Dv3 backbone (ResNet50 + FPN on 6 x 3 x 256 x 704): the stem, bottleneck and FPN convs.
    c.append(conv_bn_relu_case(rng, "r50_stem_7x7s2", (6, 3, 256, 704), (64, 3, 7, 7),
                               dict(strides=[2, 2], pads=[3, 3, 3, 3]), (128, 352)))
    c.append(conv_bn_relu_case(rng, "r50_layer1_1x1", (6, 256, 64, 176), (64, 256, 1, 1), {},
                               (64, 176)))
    c.append(conv_bn_relu_case(rng, "r50_layer1_3x3", (6, 64, 64, 176), (64, 64, 3, 3),
                               dict(pads=[1, 1, 1, 1]), (64, 176)))
    c.append(fused_conv_case(rng, "r50_layer1_expand_residual", (6, 64, 64, 176), (256, 64, 1, 1),
                             {}, (64, 176)))
    c.append(conv_bn_relu_case(rng, "r50_layer2_3x3s2", (6, 128, 64, 176), (128, 128, 3, 3),
                               dict(strides=[2, 2], pads=[1, 1, 1, 1]), (32, 88)))
    c.append(conv_case(rng, "fpn_lateral_1x1", (6, 2048, 8, 22), (256, 2048, 1, 1), {}, (8, 22)))
    c.append(conv_case(rng, "fpn_output_3x3", (6, 256, 16, 44), (256, 256, 3, 3),
                       dict(pads=[1, 1, 1, 1]), (16, 44)))
    return c


def conv_transpose_cases(rng):
    def case(name, x_shape, w_shape, attrs, y_shape, bias=True):
        x = rand(rng, x_shape)
        consts = {"W": weights(rng, w_shape, w_shape[0])}
        if bias:
            consts["B"] = rand(rng, (w_shape[1] * attrs.get("group", 1),), lo=-0.5, hi=0.5)
        return Case(name, single_op("ConvTranspose", {"X": x}, {"Y": list(y_shape)}, attrs, consts),
                    {"X": x}, **CONV_TOL)
    return [
        case("convt2d_s2_outpad", (2, 8, 7, 9), (8, 6, 3, 3),
             dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), (2, 6, 14, 18)),
        case("convt2d_groups_dil", (1, 6, 5, 6), (6, 2, 3, 3), dict(group=3, dilations=[2, 2]),
             (1, 6, 9, 10)),
        case("convt1d_nobias", (2, 4, 10), (4, 3, 4), dict(strides=[3]), (2, 3, 31), bias=False),
        case("convt2d_output_shape", (1, 3, 5, 5), (3, 2, 3, 3),
             dict(strides=[2, 2], output_shape=[10, 10]), (1, 2, 10, 10)),
        case("convt3d", (1, 2, 3, 4, 4), (2, 3, 2, 2, 2), dict(strides=[2, 2, 2]), (1, 3, 6, 8, 8)),
    ]


# ---- MatMul / FusedMatMul / Gemm / Einsum ----

def matmul_case(rng, name, a_shape, b_shape, y_shape, b_const=True, dtype=np.float32, tol=GEMM_TOL):
    k = a_shape[-1]
    a = rand(rng, a_shape, dtype)
    b = weights(rng, b_shape, k, dtype)
    ins = {"A": a}
    consts = {}
    if b_const:
        consts["B"] = b
    else:
        ins["B"] = b
    out_t = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    model = single_op("MatMul", ins, {"Y": list(y_shape)}, consts=consts,
                      out_dtypes={"Y": out_t}, node_inputs=["A", "B"])
    return Case(name, model, ins, **tol)


def linear_case(rng, name, a_shape, n, relu=True, bias_rank=1):
    """MatMul + Add(bias) [+ Relu], the head's Linear layers: fused into one FusedMatMul."""
    k = a_shape[-1]
    a = rand(rng, a_shape)
    consts = {"W": weights(rng, (k, n), k),
              "b": rand(rng, (1,) * (bias_rank - 1) + (n,), lo=-0.5, hi=0.5)}
    y = list(a_shape[:-1]) + [n]
    nodes = [helper.make_node("MatMul", ["A", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["s" if relu else "Y"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["Y"], name="relu"))
    return Case(name, graph(nodes, {"A": a}, {"Y": (y, TensorProto.FLOAT)}, consts), {"A": a},
                **GEMM_TOL)


def linear_residual_case(rng, name, a_shape, n, relu=False):
    """(A W + b) [Relu] + R with R an input of the output's shape. Without the ReLU the residual
    fusion makes one FusedMatMul whose epilogue adds R (the attention blocks' out_proj + query);
    with it the Add stays a layer of its own (cuBLASLt's epilogue adds R before an activation)."""
    k = a_shape[-1]
    a = rand(rng, a_shape)
    y = list(a_shape[:-1]) + [n]
    r = rand(rng, y)
    consts = {"W": weights(rng, (k, n), k), "b": rand(rng, (n,), lo=-0.5, hi=0.5)}
    nodes = [helper.make_node("MatMul", ["A", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["s"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["t"], name="relu"))
    nodes.append(helper.make_node("Add", ["t" if relu else "s", "R"], ["Y"], name="residual"))
    return Case(name, graph(nodes, {"A": a, "R": r}, {"Y": (y, TensorProto.FLOAT)}, consts), {"A": a, "R": r},
                **GEMM_TOL)


def linear_ln_case(rng, name, a_shape, n, relu=True, shift=True, tol=GEMM_TOL):
    """MatMul + Add(bias) [+ Relu] + LayerNormalization(last axis): the anchor encoder's and the
    refinement branches' unit, fused into one FusedMatMul that normalises (on CUDA in the own
    kernel's epilogue up to 64 columns, else a LayerNorm kernel after the product)."""
    k = a_shape[-1]
    a = rand(rng, a_shape)
    consts = {"W": weights(rng, (k, n), k), "b": rand(rng, (n,), lo=-0.5, hi=0.5),
              "g": rand(rng, (n,), lo=0.5, hi=1.5)}
    if shift:
        consts["be"] = rand(rng, (n,), lo=-0.5, hi=0.5)
    y = list(a_shape[:-1]) + [n]
    nodes = [helper.make_node("MatMul", ["A", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["s"], name="add")]
    if relu:
        nodes.append(helper.make_node("Relu", ["s"], ["r"], name="relu"))
    nodes.append(helper.make_node("LayerNormalization", ["r" if relu else "s", "g"] + (["be"] if shift else []),
                                  ["Y"], name="ln", axis=-1, epsilon=1e-5))
    return Case(name, graph(nodes, {"A": a}, {"Y": (y, TensorProto.FLOAT)}, consts, opset=max(OPSET, 17)),
                {"A": a}, **tol)


def gemm_case(rng, name, m, n, k, ta=0, tb=0, alpha=1.0, beta=1.0, c_shape=None, c_const=True,
              dtype=np.float32, tol=GEMM_TOL):
    a = rand(rng, (k, m) if ta else (m, k), dtype)
    b = weights(rng, (n, k) if tb else (k, n), k, dtype)
    ins = {"A": a}
    consts = {"B": b}
    names = ["A", "B"]
    if c_shape is not None:
        c = rand(rng, c_shape, dtype, -0.5, 0.5)
        (consts if c_const else ins)["C"] = c
        names.append("C")
    attrs = dict(transA=ta, transB=tb, alpha=alpha, beta=beta)
    out_t = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    model = single_op("Gemm", ins, {"Y": [m, n]}, attrs, consts, out_dtypes={"Y": out_t},
                      node_inputs=names)
    return Case(name, model, ins, **tol)


def einsum_case(rng, name, eq, a_shape, b_shape, y_shape, dtype=np.float32, tol=GEMM_TOL):
    a = rand(rng, a_shape, dtype)
    b = rand(rng, b_shape, dtype) / np.asarray(np.sqrt(a_shape[-1]), dtype)
    out_t = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    model = single_op("Einsum", {"A": a, "B": b}, {"Y": list(y_shape)}, dict(equation=eq),
                      out_dtypes={"Y": out_t})
    return Case(name, model, {"A": a, "B": b}, **tol)


def product_cases(rng):
    c = [
        # Sparse4Dv3 head shapes.
        matmul_case(rng, "mm_head_900x256x256", (1, 900, 256), (256, 256), (1, 900, 256)),
        matmul_case(rng, "mm_head_900x512x1024", (1, 900, 512), (512, 1024), (1, 900, 1024)),
        matmul_case(rng, "mm_head_cams_6x900x256x416", (6, 900, 256), (256, 416), (6, 900, 416)),
        matmul_case(rng, "mm_attention_8x900x64x1800", (8, 900, 64), (8, 64, 1800), (8, 900, 1800),
                    b_const=False),
        linear_case(rng, "linear_relu_900x256", (1, 900, 256), 256),
        linear_case(rng, "linear_ffn_900x512x1024", (1, 900, 512), 1024),
        linear_case(rng, "linear_rank3_bias_norelu", (6, 900, 256), 416, relu=False, bias_rank=3),
        linear_case(rng, "linear_anchor_encoder_3x128", (1, 900, 3), 128),
        linear_ln_case(rng, "linear_relu_ln_anchor_3x32", (1, 900, 3), 32),
        linear_ln_case(rng, "linear_relu_ln_anchor_64x64", (1, 900, 64), 64),
        linear_ln_case(rng, "linear_ln_odd_48_noshift_norelu", (2, 301, 40), 48, relu=False, shift=False),
        linear_ln_case(rng, "linear_relu_ln_128x128", (1, 900, 128), 128),
        linear_ln_case(rng, "linear_relu_ln_refine_256x256", (1, 900, 256), 256),
        # K and N not multiples of any tile, rows neither, a batch of separate operands; the
        # residual epilogue (out_proj + query), with and without a ReLU before it; 1500 rows
        # (the temporal attention's keys).
        matmul_case(rng, "mm_edges_3x45x36x20", (3, 45, 36), (3, 36, 20), (3, 45, 20), b_const=False),
        linear_case(rng, "linear_edges_77x100x52", (1, 77, 100), 52),
        linear_residual_case(rng, "linear_residual_300x256", (1, 300, 256), 256),
        linear_residual_case(rng, "linear_relu_residual_129x68x132", (1, 129, 68), 132, relu=True),
        matmul_case(rng, "mm_head_1500x512x512", (1, 1500, 512), (512, 512), (1, 1500, 512)),
        # Skinny products (a few columns, a long K: cuBLASLt splits K, or the own tiled kernel
        # walks it): the head's box, class and quality outputs; K not a multiple of 128; one
        # column; a batch of separate operands; a residual; a long K on 32 columns.
        linear_case(rng, "linear_skinny_box_900x256x11", (1, 900, 256), 11, relu=False),
        linear_case(rng, "linear_skinny_relu_900x256x2", (1, 900, 256), 2),
        linear_case(rng, "linear_skinny_cls_900x512x18", (1, 900, 512), 18, relu=False),
        matmul_case(rng, "mm_skinny_n1_k333", (2, 37, 333), (333, 1), (2, 37, 1)),
        matmul_case(rng, "mm_skinny_batched_3x70x300x24", (3, 70, 300), (3, 300, 24), (3, 70, 24),
                    b_const=False),
        linear_residual_case(rng, "linear_skinny_residual_129x200x20", (1, 129, 200), 20),
        matmul_case(rng, "mm_skinny_w_past_smem_50x1000x32", (1, 50, 1000), (1000, 32), (1, 50, 32)),
        # Broadcasting and 1-D operands.
        matmul_case(rng, "mm_bcast_batch", (2, 1, 5, 7), (3, 7, 4), (2, 3, 5, 4), b_const=False),
        matmul_case(rng, "mm_bcast_a_shared", (5, 7), (2, 3, 7, 4), (2, 3, 5, 4), b_const=False),
        matmul_case(rng, "mm_bcast_mixed", (3, 1, 4, 6), (1, 5, 6, 2), (3, 5, 4, 2), b_const=False),
        matmul_case(rng, "mm_1d_b", (3, 5, 7), (7,), (3, 5)),
        matmul_case(rng, "mm_1d_a", (7,), (3, 7, 4), (3, 4), b_const=False),
        matmul_case(rng, "mm_1d_both", (9,), (9,), (), b_const=False),
        matmul_case(rng, "mm_odd_unaligned", (3, 5, 13), (3, 13, 9), (3, 5, 9), b_const=False),
        matmul_case(rng, "mm_rows_over_65535", (70000, 16), (16, 8), (70000, 8)),
        matmul_case(rng, "mm_float64_batched", (2, 3, 17, 9), (2, 3, 9, 5), (2, 3, 17, 5), b_const=False,
                    dtype=np.float64, tol=F64_TOL),
        # Gemm: transposes, alpha / beta, every C broadcast.
        gemm_case(rng, "gemm_linear_transB_bias", 900, 256, 512, tb=1, c_shape=(256,)),
        gemm_case(rng, "gemm_transA", 33, 20, 17, ta=1, c_shape=(33, 20)),
        gemm_case(rng, "gemm_transAB_alpha_beta", 12, 14, 9, ta=1, tb=1, alpha=0.5, beta=-2.0,
                  c_shape=(1, 14)),
        gemm_case(rng, "gemm_c_column", 15, 8, 11, c_shape=(15, 1), beta=0.25),
        gemm_case(rng, "gemm_c_column_rows_over_65535", 70000, 8, 16, c_shape=(70000, 1), beta=1.5),
        gemm_case(rng, "gemm_c_scalar", 6, 10, 4, c_shape=(), alpha=2.0),
        gemm_case(rng, "gemm_c_input", 20, 30, 40, c_shape=(20, 30), c_const=False, beta=0.5),
        gemm_case(rng, "gemm_no_c", 7, 9, 5, tb=1),
        gemm_case(rng, "gemm_beta0_ignores_c", 7, 9, 5, c_shape=(7, 9), beta=0.0),
        gemm_case(rng, "gemm_float64", 13, 11, 7, ta=1, c_shape=(11,), dtype=np.float64, tol=F64_TOL),
        # Einsum forms that are one batched product (attention exports).
        einsum_case(rng, "einsum_qk", "bhqd,bhkd->bhqk", (1, 8, 900, 64), (1, 8, 600, 64),
                    (1, 8, 900, 600)),
        einsum_case(rng, "einsum_av", "bhqk,bhkd->bhqd", (2, 4, 30, 20), (2, 4, 20, 16), (2, 4, 30, 16)),
        einsum_case(rng, "einsum_ta", "bkm,bkn->bmn", (3, 9, 5), (3, 9, 7), (3, 5, 7)),
        einsum_case(rng, "einsum_float64", "ij,jk->ik", (6, 5), (5, 4), (6, 4), dtype=np.float64,
                    tol=F64_TOL),
    ]
    return c


# ---- pools ----

def pool_case(rng, name, op, x_shape, attrs, y_shape, with_indices=False, tol=POOL_TOL):
    x = rand(rng, x_shape)
    outs = {"Y": list(y_shape)}
    dt = {}
    if with_indices:
        outs["I"] = list(y_shape)
        dt["I"] = TensorProto.INT64
    return Case(name, single_op(op, {"X": x}, outs, attrs, out_dtypes=dt), {"X": x}, **tol)


def pool_cases(rng):
    return [
        pool_case(rng, "maxpool_r50_3x3s2", "MaxPool", (6, 64, 128, 352),
                  dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (6, 64, 64, 176)),
        pool_case(rng, "maxpool_ceil_dil_indices", "MaxPool", (2, 3, 11, 12),
                  dict(kernel_shape=[3, 2], strides=[2, 3], dilations=[2, 1], ceil_mode=1),
                  (2, 3, 4, 4), with_indices=True),
        pool_case(rng, "maxpool_asym_storage_order", "MaxPool", (1, 2, 7, 9),
                  dict(kernel_shape=[2, 3], pads=[1, 0, 0, 2], storage_order=1), (1, 2, 7, 9),
                  with_indices=True),
        pool_case(rng, "maxpool_ceil_asym_no_indices", "MaxPool", (2, 3, 11, 12),
                  dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0], ceil_mode=1), (2, 3, 6, 6)),
        pool_case(rng, "maxpool_1d_same_upper", "MaxPool", (2, 4, 17),
                  dict(kernel_shape=[4], strides=[2], auto_pad="SAME_UPPER"), (2, 4, 9)),
        pool_case(rng, "maxpool_3d", "MaxPool", (1, 2, 5, 6, 7),
                  dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2]), (1, 2, 4, 3, 3), with_indices=True),
        pool_case(rng, "maxpool_planes_over_65535", "MaxPool", (1, 70000, 2, 3),
                  dict(kernel_shape=[2, 2]), (1, 70000, 1, 2)),
        pool_case(rng, "avgpool_pads_exclude", "AveragePool", (2, 3, 10, 11),
                  dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (2, 3, 5, 6)),
        pool_case(rng, "avgpool_pads_include", "AveragePool", (2, 3, 10, 11),
                  dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 2, 0, 1], count_include_pad=1),
                  (2, 3, 5, 6)),
        pool_case(rng, "avgpool_ceil_dil", "AveragePool", (1, 4, 13, 9),
                  dict(kernel_shape=[2, 3], strides=[3, 2], dilations=[2, 1], ceil_mode=1),
                  (1, 4, 5, 4)),
        pool_case(rng, "avgpool_1d", "AveragePool", (3, 5, 20), dict(kernel_shape=[5], strides=[3]),
                  (3, 5, 6)),
        pool_case(rng, "globalavg_fpn_level", "GlobalAveragePool", (6, 256, 8, 22), {}, (6, 256, 1, 1)),
        pool_case(rng, "globalavg_large_plane", "GlobalAveragePool", (1, 2, 300, 300), {}, (1, 2, 1, 1)),
        pool_case(rng, "globalmax_3d", "GlobalMaxPool", (2, 3, 4, 5, 6), {}, (2, 3, 1, 1, 1)),
        pool_case(rng, "globalmax_planes_over_65535", "GlobalMaxPool", (2, 40000, 3), {}, (2, 40000, 1)),
    ]


# ---- float16 (CUDA only; the host references run float32) ----
#
# Each case is a float32 case with its inputs and weights rounded to float16 (cases.half_case);
# the reference is the float32 model on the CPU on exactly those rounded values. What differs
# is then the float16 kernel's own error: products of two float16 values are exact in float32
# and accumulate in float32 (cuDNN's compute type, cuBLASLt's COMPUTE_32F), so over k <= 2304
# terms of O(1/sqrt(k)) each the sum is good to ~1e-6 relative; what remains is the float16
# rounding of the result, 2^-11 = 4.9e-4 relative, twice where an epilogue adds bias or
# residual to an output already rounded (plain conv + own epilogue). Outputs are O(1) (weights
# scaled by 1/sqrt(fan-in)), so rtol 2e-3 with atol 2e-3 for convolutions (cuDNN's
# Winograd / FFT transforms add float32 error of their own) and atol 1e-3 for products leave
# a factor ~2 over the worst case; max pools are exact (the maximum of float16 values is one of
# them), averages round once (rtol 1e-3).
CONV16_TOL = dict(rtol=2e-3, atol=2e-3)
GEMM16_TOL = dict(rtol=2e-3, atol=1e-3)
LN16_TOL = dict(rtol=4e-3, atol=4e-3)
MAXPOOL16_TOL = dict(rtol=0.0, atol=0.0)
AVGPOOL16_TOL = dict(rtol=1e-3, atol=1e-5)


def half_cases(rng):
    h = []
    f32 = [
        (conv_case(rng, "conv2d_3x3_pad1", (2, 8, 17, 19), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]),
                   (17, 19)), CONV16_TOL),
        (conv_case(rng, "conv2d_asym_pads", (2, 3, 14, 15), (4, 3, 3, 2), dict(pads=[0, 2, 1, 0]),
                   (conv_out(14, 3, 1, 1, 0, 1), conv_out(15, 2, 1, 1, 2, 0))), CONV16_TOL),
        (conv_case(rng, "conv2d_groups4_stride2", (2, 16, 12, 13), (12, 4, 3, 3),
                   dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2]), (6, 7)), CONV16_TOL),
        (conv_case(rng, "conv2d_depthwise", (1, 32, 20, 20), (32, 1, 5, 5), dict(group=32, pads=[2, 2, 2, 2]),
                   (20, 20)), CONV16_TOL),
        (conv_case(rng, "conv2d_odd_channels_nobias", (2, 5, 9, 11), (7, 5, 3, 3), {}, (7, 9), bias=False),
         CONV16_TOL),
        (conv_case(rng, "conv1d_asym_stride2", (2, 6, 31), (5, 6, 4), dict(pads=[1, 2], strides=[2]),
                   (conv_out(31, 4, 2, 1, 1, 2),)), CONV16_TOL),
        (conv_case(rng, "conv3d_pad1", (1, 4, 6, 7, 8), (6, 4, 3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1]),
                   (6, 7, 8)), CONV16_TOL),
        (fused_conv_case(rng, "fusedconv_bias_add_relu", (2, 8, 15, 17), (8, 8, 3, 3),
                         dict(pads=[1, 1, 1, 1]), (15, 17)), CONV16_TOL),
        (fused_conv_case(rng, "fusedconv_add_only", (2, 8, 15, 17), (8, 8, 1, 1), {}, (15, 17), relu=False),
         CONV16_TOL),
        (fused_conv_case(rng, "fusedconv_relu_nobias", (2, 6, 9, 10), (12, 6, 3, 3), dict(pads=[1, 1, 1, 1]),
                         (9, 10), bias=False, residual=False), CONV16_TOL),
        (fused_conv_case(rng, "fusedconv_planes_over_65535", (700, 4, 5, 5), (100, 4, 3, 3),
                         dict(pads=[1, 1, 1, 1]), (5, 5)), CONV16_TOL),
        # Sparse4Dv3 backbone shapes (ResNet50 + FPN on 6 x 3 x 256 x 704).
        (fused_conv_case(rng, "v3_stem_7x7s2_relu", (6, 3, 256, 704), (64, 3, 7, 7),
                         dict(strides=[2, 2], pads=[3, 3, 3, 3]), (128, 352), residual=False), CONV16_TOL),
        (fused_conv_case(rng, "v3_layer1_3x3_relu", (6, 64, 64, 176), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1]),
                         (64, 176), residual=False), CONV16_TOL),
        (fused_conv_case(rng, "v3_layer1_expand_residual", (6, 64, 64, 176), (256, 64, 1, 1), {}, (64, 176)),
         CONV16_TOL),
        (conv_case(rng, "v3_fpn_p2_3x3_256", (6, 256, 64, 176), (256, 256, 3, 3), dict(pads=[1, 1, 1, 1]),
                   (64, 176)), CONV16_TOL),
        (fused_conv_case(rng, "v3_layer2_3x3s2_relu", (6, 128, 64, 176), (128, 128, 3, 3),
                         dict(strides=[2, 2], pads=[1, 1, 1, 1]), (32, 88), residual=False), CONV16_TOL),
        (conv_case(rng, "v3_fpn_lateral_1x1_2048", (6, 2048, 8, 22), (256, 2048, 1, 1), {}, (8, 22)),
         CONV16_TOL),
    ]
    f32 += [(c, CONV16_TOL) for c in conv_transpose_cases(rng)[:3]]
    f32 += [
        # Sparse4Dv3 head products.
        (matmul_case(rng, "mm_head_900x256x256", (1, 900, 256), (256, 256), (1, 900, 256)), GEMM16_TOL),
        (matmul_case(rng, "mm_head_900x512x1024", (1, 900, 512), (512, 1024), (1, 900, 1024)), GEMM16_TOL),
        (matmul_case(rng, "mm_head_cams_6x900x256x416", (6, 900, 256), (256, 416), (6, 900, 416)), GEMM16_TOL),
        (matmul_case(rng, "mm_attention_8x900x32x1800", (8, 900, 32), (8, 32, 1800), (8, 900, 1800),
                     b_const=False), GEMM16_TOL),
        (linear_case(rng, "linear_relu_900x256", (1, 900, 256), 256), GEMM16_TOL),
        (linear_case(rng, "linear_ffn_900x512x1024", (1, 900, 512), 1024), GEMM16_TOL),
        (linear_case(rng, "linear_rank3_bias_norelu", (6, 900, 256), 416, relu=False, bias_rank=3), GEMM16_TOL),
        (linear_case(rng, "linear_anchor_encoder_11x256", (1, 900, 11), 256), GEMM16_TOL),
        # The product rounds to float16 before it is normalised: an error of 2^-12 |d| in D
        # becomes 2^-12 |d| / std in the output, a few times that of the plain products.
        (linear_ln_case(rng, "linear_relu_ln_anchor_3x32", (1, 900, 3), 32), LN16_TOL),
        (linear_ln_case(rng, "linear_relu_ln_refine_256x256", (1, 900, 256), 256), LN16_TOL),
        # Odd sizes: rows of 13 / 9 halves break the 16-byte alignment (element-aligned algorithms).
        (matmul_case(rng, "mm_odd_unaligned", (3, 5, 13), (3, 13, 9), (3, 5, 9), b_const=False), GEMM16_TOL),
        (matmul_case(rng, "mm_bcast_batch", (2, 1, 5, 7), (3, 7, 4), (2, 3, 5, 4), b_const=False), GEMM16_TOL),
        (matmul_case(rng, "mm_1d_b", (3, 5, 7), (7,), (3, 5)), GEMM16_TOL),
        (gemm_case(rng, "gemm_linear_transB_bias", 900, 256, 512, tb=1, c_shape=(256,)), GEMM16_TOL),
        (gemm_case(rng, "gemm_transAB_alpha_beta", 12, 14, 9, ta=1, tb=1, alpha=0.5, beta=-2.0,
                   c_shape=(1, 14)), GEMM16_TOL),
        (gemm_case(rng, "gemm_c_column_rows_over_65535", 70000, 8, 16, c_shape=(70000, 1), beta=1.5),
         GEMM16_TOL),
        (gemm_case(rng, "gemm_c_matrix", 33, 20, 17, ta=1, c_shape=(33, 20)), GEMM16_TOL),
        (gemm_case(rng, "gemm_c_input", 20, 30, 40, c_shape=(20, 30), c_const=False, beta=0.5), GEMM16_TOL),
        # Pools.
        (pool_case(rng, "maxpool_r50_3x3s2", "MaxPool", (6, 64, 128, 352),
                   dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), (6, 64, 64, 176)), MAXPOOL16_TOL),
        (pool_case(rng, "maxpool_ceil_dil_indices", "MaxPool", (2, 3, 11, 12),
                   dict(kernel_shape=[3, 2], strides=[2, 3], dilations=[2, 1], ceil_mode=1), (2, 3, 4, 4),
                   with_indices=True), MAXPOOL16_TOL),
        (pool_case(rng, "avgpool_pads_include", "AveragePool", (2, 3, 10, 11),
                   dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 2, 0, 1], count_include_pad=1),
                   (2, 3, 5, 6)), AVGPOOL16_TOL),
        (pool_case(rng, "globalavg_fpn_level", "GlobalAveragePool", (6, 256, 8, 22), {}, (6, 256, 1, 1)),
         AVGPOOL16_TOL),
        (pool_case(rng, "globalmax_3d", "GlobalMaxPool", (2, 3, 4, 5, 6), {}, (2, 3, 1, 1, 1)), MAXPOOL16_TOL),
    ]
    for c, tol in f32:
        h.append(half_case(c, **tol))
    return h


# TF32 convolutions: products of 10-bit mantissas, sums of up to 2048 terms in float32.
CONV_TF32_TOL = dict(rtol=5e-3, atol=5e-3)


def nhwc_cases(rng):
    """Convolutions channels-last on the device (--convLayout=nhwc: Transposes at the borders,
    a KRSC filter, the epilogue along the rows), strict float32 and TF32 (--tf32: channels-last
    by default); asymmetric padding keeps NCHW on CUDA, which these cases check too."""
    def nhwc(c, flags=("--convLayout=nhwc",), tol=None, tag="_nhwc"):
        t = tol or {"rtol": c.rtol, "atol": c.atol}
        return Case(c.name + tag, c.model, c.inputs, b_flags=list(flags), **t)
    c = [
        conv_case(rng, "conv2d_3x3_pad1", (2, 8, 17, 19), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]), (17, 19)),
        conv_case(rng, "conv2d_groups4_stride2", (2, 16, 12, 13), (12, 4, 3, 3),
                  dict(group=4, pads=[1, 1, 1, 1], strides=[2, 2]), (6, 7)),
        conv_case(rng, "conv2d_depthwise", (1, 32, 20, 20), (32, 1, 5, 5), dict(group=32, pads=[2, 2, 2, 2]),
                  (20, 20)),
        conv_case(rng, "conv2d_odd_channels_nobias", (2, 5, 9, 11), (7, 5, 3, 3), {}, (7, 9), bias=False),
        conv_case(rng, "conv2d_asym_pads", (2, 3, 14, 15), (4, 3, 3, 2), dict(pads=[0, 2, 1, 0]),
                  (conv_out(14, 3, 1, 1, 0, 1), conv_out(15, 2, 1, 1, 2, 0))),
        conv_case(rng, "conv2d_1x1_direct", (3, 24, 9, 11), (10, 24, 1, 1), {}, (9, 11)),
        fused_conv_case(rng, "fusedconv_bias_add_relu", (2, 8, 15, 17), (8, 8, 3, 3), dict(pads=[1, 1, 1, 1]),
                        (15, 17)),
        fused_conv_case(rng, "fusedconv_add_only", (2, 8, 15, 17), (8, 8, 1, 1), {}, (15, 17), relu=False),
        fused_conv_case(rng, "fusedconv_relu_nobias", (2, 6, 9, 10), (12, 6, 3, 3), dict(pads=[1, 1, 1, 1]),
                        (9, 10), bias=False, residual=False),
        fused_conv_case(rng, "fusedconv_rows_over_65535", (700, 4, 5, 5), (100, 4, 3, 3),
                        dict(pads=[1, 1, 1, 1]), (5, 5)),
        conv_bn_relu_case(rng, "r50_stem_7x7s2", (6, 3, 256, 704), (64, 3, 7, 7),
                          dict(strides=[2, 2], pads=[3, 3, 3, 3]), (128, 352)),
        fused_conv_case(rng, "r50_layer1_expand_residual", (6, 64, 64, 176), (256, 64, 1, 1), {}, (64, 176)),
    ]
    x = rand(rng, (2, 3, 64, 96))
    consts = {"W": weights(rng, (16, 3, 7, 7), 147), "B": rand(rng, (16,), lo=-0.5, hi=0.5)}
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["c"], name="conv", strides=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["Y"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1])]
    c.append(Case("stem_conv_relu_maxpool", graph(nodes, {"X": x}, {"Y": ([2, 16, 16, 24], TensorProto.FLOAT)},
                                                 consts), {"X": x}, **CONV_TOL))
    out = [nhwc(x) for x in c]
    out += [nhwc(x, ("--tf32",), CONV_TF32_TOL, "_tf32_auto_nhwc") for x in (c[0], c[2], c[6], c[10], c[11])]
    return out


def cases():
    rng = np.random.default_rng(20240611)
    return (conv_cases(rng) + conv_transpose_cases(rng) + product_cases(rng) + pool_cases(rng) +
            nhwc_cases(rng))


# ---- refusals (run directly) ----

def refusal_models():
    """(name, model, text the CUDA build's error must contain)."""
    rng = np.random.default_rng(7)
    a, b = rand(rng, (3, 4)), rand(rng, (4, 5))
    out = []
    out.append(("einsum_transpose_result", single_op("Einsum", {"A": a, "B": b}, {"Y": [5, 3]},
                                                      dict(equation="ij,jk->ki")), "equation"))
    out.append(("einsum_one_operand", single_op("Einsum", {"A": a}, {"Y": [4]},
                                                dict(equation="ij->j")), "equation"))
    x = rand(rng, (1, 2, 5, 5))
    w = weights(rng, (2, 3, 3, 3), 2)
    out.append(("convt_asymmetric_pads",
                single_op("ConvTranspose", {"X": x}, {"Y": [1, 3, 10, 10]},
                          dict(strides=[2, 2], pads=[0, 1, 1, 0]), {"W": w}), "pads"))
    return out


def check_refusals(s4dexec, plugins, workdir):
    os.makedirs(workdir, exist_ok=True)
    bad = 0
    for name, model, want in refusal_models():
        import onnx
        path = os.path.join(workdir, name + ".onnx")
        onnx.save(model, path)
        r = subprocess.run([s4dexec, f"--onnx={path}", f"--plugins={plugins}", "--device=cuda",
                            "--iterations=1", "--warmUp=0"], capture_output=True, text=True)
        # The file's own name holds the attribute's: only the message may count.
        text = (r.stdout + r.stderr).replace(path, "<model>")
        if "no usable CUDA device" in text or "has no backend for it" in text:
            print("no usable CUDA device (or no CUDA backend in this build) here; skipping")
            return 77
        if r.returncode == 0 or want not in text:
            print(f"FAIL {name}: expected a refusal naming '{want}', got exit {r.returncode}: "
                  f"{text.strip().splitlines()[-1:] }")
            bad += 1
        else:
            print(f"ok   {name}: {[ln for ln in text.splitlines() if want in ln][:1]}")
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--refusals":
        sys.exit(check_refusals(*sys.argv[2:]))
    print(__doc__)
    sys.exit(2)
