"""Writes the hostile-input cases of test_hostile.c into a directory.

Usage: make_hostile.py OUT_DIR. Each model is the smallest that reproduces one
defect once found in s4d; the GridSample cases come with inputs and a float64
NumPy reference of s4d's documented semantics (docs/ops: zeros padding
samples 0 outside the map, a NaN location gives 0 with zeros padding and NaN
otherwise).
"""
import math
import os
import sys

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper

OPSET = [helper.make_opsetid("", 17)]


def save(model, out, name):
    onnx.save(model, os.path.join(out, name))


def tensor_attr_without_tensor(out):
    """An attribute of type TENSOR whose tensor field is absent (once a NULL dereference)."""
    def bare(name):
        a = AttributeProto()
        a.name = name
        a.type = AttributeProto.TENSOR
        return a

    const = helper.make_node("Constant", [], ["y"], name="const_no_tensor")
    const.attribute.append(bare("value"))
    g = helper.make_graph([const], "attr_tensor_null", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    save(helper.make_model(g, opset_imports=OPSET), out, "attr_tensor_null_constant.onnx")

    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="cos_no_tensor")
    node.attribute.append(bare("value"))
    g = helper.make_graph(
        [node], "attr_tensor_null_node",
        [helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    save(helper.make_model(g, opset_imports=OPSET), out, "attr_tensor_null_node.onnx")


def reflect(x, lo2, hi2):
    if lo2 == hi2:
        return 0.0
    mn, span = lo2 / 2, (hi2 - lo2) / 2
    x = abs(x - mn)
    if not math.isfinite(x):
        return math.nan
    extra = math.fmod(x, span)
    flips = math.floor(x / span)
    return extra + mn if flips % 2 == 0 else span - extra + mn


def coord(g, size, align, pad):
    x = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
    if pad == "border":
        x = min(max(x, 0.0), size - 1.0) if not math.isnan(x) else x
    elif pad == "reflection":
        x = reflect(x, 0, 2.0 * (size - 1)) if align else reflect(x, -1, 2.0 * size - 1)
        x = min(max(x, 0.0), size - 1.0) if not math.isnan(x) else x
    return x


def grid_sample_ref(x, grid, mode, pad, align):
    n, c, h, w = x.shape
    _, ho, wo, _ = grid.shape
    y = np.zeros((n, c, ho, wo), np.float64)
    for b in range(n):
        for i in range(ho):
            for j in range(wo):
                px = coord(float(grid[b, i, j, 0]), w, align, pad)
                py = coord(float(grid[b, i, j, 1]), h, align, pad)
                if math.isnan(px) or math.isnan(py):
                    y[b, :, i, j] = 0.0 if pad == "zeros" else math.nan
                    continue
                if mode == "nearest":
                    if math.isinf(px) or math.isinf(py):
                        continue
                    rx, ry = round(px), round(py)  # half to even, like nearbyint
                    if 0 <= rx < w and 0 <= ry < h:
                        y[b, :, i, j] = x[b, :, ry, rx]
                    continue
                if math.isinf(px) or math.isinf(py):
                    continue
                x0, y0 = math.floor(px), math.floor(py)
                lx, ly = px - x0, py - y0
                for cx, cy, wt in ((x0, y0, (1 - lx) * (1 - ly)), (x0 + 1, y0, lx * (1 - ly)),
                                   (x0, y0 + 1, (1 - lx) * ly), (x0 + 1, y0 + 1, lx * ly)):
                    if 0 <= cx < w and 0 <= cy < h:
                        y[b, :, i, j] += wt * x[b, :, cy, cx]
    return y


def grid_sample_nonfinite(out):
    """GridSample with infinite, NaN and huge (1e30) grid values next to ordinary ones."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
    special = [np.inf, -np.inf, np.nan, 1e30, -1e30, 3e19, -3e19, 1e10]
    vals = list(rng.uniform(-1.2, 1.2, 2 * 4 * 6 - 4 * len(special)))
    # each special value once as x (with an ordinary y) and once as y
    for s in special:
        vals += [s, 0.25]
    for s in special:
        vals += [-0.5, s]
    grid = np.array(vals, np.float32).reshape(1, 4, 6, 2)
    np.save(os.path.join(out, "gs_x.npy"), x)
    np.save(os.path.join(out, "gs_grid.npy"), grid)
    for mode, pad, align in (("bilinear", "zeros", 0), ("nearest", "zeros", 0),
                             ("bilinear", "border", 1), ("bilinear", "reflection", 0),
                             ("bilinear", "reflection", 1), ("nearest", "reflection", 0)):
        name = f"gs_{mode}_{pad}_{align}"
        node = helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs", mode=mode,
                                padding_mode=pad, align_corners=align)
        g = helper.make_graph(
            [node], name,
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
             helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid.shape))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 6])])
        save(helper.make_model(g, opset_imports=OPSET), out, name + ".onnx")
        ref = grid_sample_ref(x.astype(np.float64), grid, mode, pad, align)
        np.save(os.path.join(out, name + "_ref.npy"), ref)


def one_node(out, name, node, inputs, outputs, initializers=(), opset=17):
    g = helper.make_graph([node], name, list(inputs), list(outputs), list(initializers))
    save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), out, name + ".onnx")


def vi(name, dims, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, dims)


def attribute_specs(out):
    """Attributes the op does not have, of another type, twice, out of range or from another
    opset: once read as their defaults (or as 'true'), now refused at build."""
    x, y = vi("x", [2, 3]), vi("y", [2, 3])
    one_node(out, "attr_unknown", helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=0.5),
             [x], [y])
    one_node(out, "attr_renamed", helper.make_node("Softmax", ["x"], ["y"], name="softmax", aixs=0),
             [x], [y])
    one_node(out, "attr_wrong_type",
             helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=0.0), [x], [y])
    node = helper.make_node("LeakyRelu", ["x"], ["y"], name="leaky", alpha=0.5)
    node.attribute.append(helper.make_attribute("alpha", 0.25))
    one_node(out, "attr_twice", node, [x], [y])
    one_node(out, "attr_keepdims_range",
             helper.make_node("ReduceMax", ["x"], ["y"], name="rmax", keepdims=1325400065),
             [x], [vi("y", [2, 1])])
    one_node(out, "attr_outdated",
             helper.make_node("ReduceMean", ["x"], ["y"], name="rmean", axes=[1]),
             [x], [vi("y", [2, 1])], opset=18)
    # The same attributes where they belong build (the reference: the spec is not too strict).
    one_node(out, "attr_valid",
             helper.make_node("ReduceMean", ["x"], ["y"], name="rmean", axes=[1], keepdims=1),
             [x], [vi("y", [2, 1])], opset=17)


def shape_overflow(out):
    """Shapes whose arithmetic passes int64, and float sizes beyond it."""
    x = vi("x", [2, 4])
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1 << 62, 4])
    one_node(out, "reshape_product_overflow",
             helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape"),
             [x], [vi("y", [2, 4])], [shape])
    for tag, scale in (("inf", math.inf), ("1e30", 1e30)):
        scales = helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, scale, 1])
        one_node(out, f"resize_scale_{tag}",
                 helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize",
                                  mode="nearest"),
                 [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 2, 2])], [scales])
    # dilation * (kernel - 1) near 2^70: the kernel is a declared input, never allocated.
    one_node(out, "conv_extent_overflow",
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv", dilations=[1 << 40]),
             [vi("x", [1, 1, 5]), vi("w", [1, 1, 1 << 30])], [vi("y", [1, 1, 1])])
    one_node(out, "maxpool_extent_overflow",
             helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[1 << 40],
                              dilations=[1 << 40]),
             [vi("x", [1, 1, 5])], [vi("y", [1, 1, 1])])
    one_node(out, "conv_pads_huge",
             helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1 << 62, 1 << 62]),
             [vi("x", [1, 1, 5]), vi("w", [1, 1, 3])], [vi("y", [1, 1, 1])])
    # limit - start past int64 (once signed overflow in the length).
    bounds = [helper.make_tensor(n, TensorProto.INT64, [], [v])
              for n, v in (("start", -2), ("limit", (1 << 63) - 1), ("delta", 1))]
    one_node(out, "range_length_overflow",
             helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="range"),
             [], [vi("y", [4], TensorProto.INT64)], bounds)
    # An empty input whose other dim is 2^62: no element, yet every product of dims overflows.
    one_node(out, "input_dims_near_2_62", helper.make_node("Relu", ["x"], ["y"], name="relu"),
             [vi("x", [0, 1 << 62])], [vi("y", [0, 1 << 62])])
    # The same as a graph input no node reads (found by fuzzing: built, then not loadable).
    one_node(out, "unused_input_dims_near_2_62",
             helper.make_node("Relu", ["x"], ["y"], name="relu"),
             [vi("x", [2, 3]), vi("unused", [1 << 62])], [vi("y", [2, 3])])


if __name__ == "__main__":
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    tensor_attr_without_tensor(d)
    grid_sample_nonfinite(d)
    attribute_specs(d)
    shape_overflow(d)
