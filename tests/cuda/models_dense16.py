"""The dense family in float16 for device_compare.py (family "dense16"): models_dense.half_cases,
float16 versions of the convolution, product and pool cases and of the Sparse4Dv3 backbone
convolutions and head products, each against the CPU float32 reference on the same values
rounded to float16 (cases.half_case; tolerances reasoned in models_dense.py). A family of its
own so that the float32 dense run keeps its time; on the guarded device (CPU kernels, which
refuse float16) every case is skipped with the reason printed. The _nhwc cases run the
convolutions channels-last.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_dense  # noqa: E402


def nhwc_half_cases(rng):
    """Float16 convolutions channels-last (--convLayout=nhwc), as --fp16 builds get them."""
    md = models_dense
    f32 = [
        md.conv_case(rng, "conv2d_3x3_pad1", (2, 8, 17, 19), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]), (17, 19)),
        md.conv_case(rng, "conv2d_odd_channels_nobias", (2, 5, 9, 11), (7, 5, 3, 3), {}, (7, 9), bias=False),
        md.conv_case(rng, "conv2d_depthwise", (1, 32, 20, 20), (32, 1, 5, 5), dict(group=32, pads=[2, 2, 2, 2]),
                     (20, 20)),
        md.fused_conv_case(rng, "fusedconv_bias_add_relu", (2, 8, 15, 17), (8, 8, 3, 3),
                           dict(pads=[1, 1, 1, 1]), (15, 17)),
        md.fused_conv_case(rng, "v3_stem_7x7s2_relu", (6, 3, 256, 704), (64, 3, 7, 7),
                           dict(strides=[2, 2], pads=[3, 3, 3, 3]), (128, 352), residual=False),
        md.fused_conv_case(rng, "v3_layer1_expand_residual", (6, 64, 64, 176), (256, 64, 1, 1), {}, (64, 176)),
        md.conv_case(rng, "v3_fpn_p2_3x3_256", (6, 256, 64, 176), (256, 256, 3, 3), dict(pads=[1, 1, 1, 1]),
                     (64, 176)),
    ]
    # the stem: convolution, ReLU and MaxPool, all three channels-last
    x = md.rand(rng, (2, 3, 64, 96))
    consts = {"W": md.weights(rng, (16, 3, 7, 7), 147), "B": md.rand(rng, (16,), lo=-0.5, hi=0.5)}
    nodes = [helper.make_node("Conv", ["X", "W", "B"], ["c"], name="conv", strides=[2, 2], pads=[3, 3, 3, 3]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["Y"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1])]
    stem = md.graph(nodes, {"X": x}, {"Y": ([2, 16, 16, 24], TensorProto.FLOAT)}, consts)
    f32.append(md.Case("stem_conv_relu_maxpool", stem, {"X": x}, **md.CONV_TOL))
    out = []
    for c in f32:
        h = md.half_case(c, **md.CONV16_TOL)
        h.name += "_nhwc"
        h.b_flags = ["--convLayout=nhwc"]
        out.append(h)
    return out


def cases():
    return models_dense.half_cases(np.random.default_rng(1516)) + nhwc_half_cases(np.random.default_rng(1517))
