"""Op models of the movement family for device_compare.py: every data-movement
and resampling op (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Transpose,
Concat, Split, Slice, Gather, GatherElements, GatherND, ScatterND,
ScatterElements, Expand, Tile, Shape, Size, ConstantOfShape, Range, Resize,
GridSample), their variants, odd and large shapes, and the shapes the
Sparse4Dv3 backbone and head give them.

Tolerances: the data-movement ops copy bytes, so they must agree exactly
(rtol = atol = 0; integer outputs are always compared exactly). Resize and
GridSample do the host reference's float operations in the host's order (the
kernels use non-fusing intrinsics), so they too are held to exact agreement;
a failure there means a real difference, not rounding.

Data inputs are graph inputs (never constants), so no node is folded away at
build; shape-like inputs (Reshape's shape, Slice's starts, ...) are
initializers, as in the exported models. Shape, Size, ConstantOfShape and
Range always fold with static shapes: their cases check the folded values
reach both devices.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper, shape_inference

from cases import NP_TO_ONNX, Case, half_case, rand

SEED = 20240617
I64_MAX = np.iinfo(np.int64).max


def model(op, inputs, consts=None, attrs=None, opset=17, node_inputs=None, outputs=None,
          nout=1):
    """A one-node model. inputs/consts: {name: array}; outputs: {name: (shape, onnx dtype)}
    when ONNX's shape inference cannot give them (opset 18 ops)."""
    consts = consts or {}
    names = node_inputs if node_inputs is not None else list(inputs) + list(consts)
    out_names = list(outputs) if outputs else [f"y{i}" for i in range(nout)]
    node = helper.make_node(op, names, out_names, name=op.lower(), **(attrs or {}))
    g_in = [helper.make_tensor_value_info(k, NP_TO_ONNX[v.dtype], list(v.shape))
            for k, v in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    if outputs:
        g_out = [helper.make_tensor_value_info(k, t, list(s)) for k, (s, t) in outputs.items()]
        g = helper.make_graph([node], op.lower(), g_in, g_out, inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    g_out = [helper.make_tensor_value_info(k, TensorProto.UNDEFINED, None) for k in out_names]
    g = helper.make_graph([node], op.lower(), g_in, g_out, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    inferred = shape_inference.infer_shapes(m, strict_mode=True)
    known = {v.name: v for v in inferred.graph.value_info}
    known.update({v.name: v for v in inferred.graph.output})
    del m.graph.output[:]
    for k in out_names:
        m.graph.output.append(known[k])
    return m


def exact(name, m, inputs):
    return Case(name, m, inputs, rtol=0.0, atol=0.0)


def ints(rng, shape, lo, hi, dtype=np.int64):
    """Uniform integers in [lo, hi), never all zeros."""
    a = rng.integers(lo, hi, size=shape).astype(dtype)
    if a.size and not np.any(a):
        a.flat[0] = 1 if hi > 1 else -1
    return a


def data(rng, shape, dtype=np.float32):
    if dtype == np.bool_:
        a = rng.random(shape) < 0.5
        if a.size and not a.any():
            a.flat[0] = True
        return a
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return ints(rng, shape, max(info.min, -100), min(info.max, 100), dtype)
    return rand(rng, shape, dtype)


def i64(*v):
    return np.array(v, dtype=np.int64)


# ---- shape-only ops -----------------------------------------------------------------------------

def reshape_cases(rng):
    out = []
    for name, shape, target, dt in [
        ("reshape_fpn_flatten", (6, 256, 32, 88), (6, 256, -1), np.float32),
        ("reshape_head_split_heads", (1, 900, 512), (1, 900, 8, 64), np.float32),
        ("reshape_copy_zero_dim", (2, 3, 4), (0, 12), np.float16),
        ("reshape_int64_1d", (1, 900), (900,), np.int64),
        ("reshape_bool", (3, 5, 7), (7, -1), np.bool_),
    ]:
        x = data(rng, shape, dt)
        out.append(exact(name, model("Reshape", {"x": x}, {"shape": np.array(target, np.int64)}),
                         {"x": x}))
    for axis in (0, 2, -1):
        x = data(rng, (2, 3, 5, 7))
        out.append(exact(f"flatten_axis{axis}", model("Flatten", {"x": x}, attrs={"axis": axis}),
                         {"x": x}))
    x = data(rng, (1, 900, 1, 256))
    out.append(exact("squeeze_axes", model("Squeeze", {"x": x}, {"axes": i64(0, -2)}), {"x": x}))
    x = data(rng, (1, 3, 1), np.int32)
    out.append(exact("squeeze_all_ones", model("Squeeze", {"x": x}), {"x": x}))
    x = data(rng, (1, 900, 256))
    out.append(exact("unsqueeze_head", model("Unsqueeze", {"x": x}, {"axes": i64(2)}), {"x": x}))
    x = data(rng, (1, 1500), np.bool_)
    out.append(exact("unsqueeze_bool_negative", model("Unsqueeze", {"x": x}, {"axes": i64(-1, 0)}),
                     {"x": x}))
    for name, shape, dt in [("identity_pose", (1, 4, 4), np.float32),
                            ("identity_half", (3, 33), np.float16),
                            ("identity_uint8", (1001,), np.uint8)]:
        x = data(rng, shape, dt)
        out.append(exact(name, model("Identity", {"x": x}), {"x": x}))
    return out


def transpose_cases(rng):
    out = []
    for name, shape, perm, dt in [
        ("transpose_2d_odd", (37, 53), None, np.float32),
        ("transpose_fpn_nchw_to_nhwc", (6, 256, 11264), (0, 2, 1), np.float32),
        ("transpose_fpn_level4", (6, 256, 176), (0, 2, 1), np.float32),
        ("transpose_heads_0213", (1, 900, 8, 64), (0, 2, 1, 3), np.float32),
        ("transpose_heads_0231", (1, 900, 8, 64), (0, 2, 3, 1), np.float32),
        ("transpose_heads_back", (1, 8, 600, 64), (0, 2, 1, 3), np.float32),
        ("transpose_aggregation_weights", (1, 900, 6, 4, 13, 8), (0, 1, 4, 2, 3, 5), np.float32),
        ("transpose_sampling_points", (1, 6, 900, 13, 2), (0, 2, 3, 1, 4), np.float32),
        ("transpose_projection", (1, 6, 3, 4), (0, 1, 3, 2), np.float32),
        ("transpose_reverse_3d", (5, 6, 7), None, np.int64),
        ("transpose_int8_tiled", (3, 65, 129), (0, 2, 1), np.int8),
        ("transpose_half_tiled", (2, 100, 70), (2, 0, 1), np.float16),
        ("transpose_bool_5d", (2, 3, 1, 4, 5), (4, 2, 0, 3, 1), np.bool_),
        ("transpose_size1_dims", (1, 7, 1, 9), (3, 2, 0, 1), np.float32),
        ("transpose_keep_order", (4, 1, 5), (1, 0, 2), np.float32),
        ("transpose_long_rows", (3, 70001), (1, 0), np.float32),
        ("transpose_long_cols", (70001, 3), (1, 0), np.int32),
    ]:
        x = data(rng, shape, dt)
        attrs = {"perm": list(perm)} if perm is not None else None
        out.append(exact(name, model("Transpose", {"x": x}, attrs=attrs), {"x": x}))
    return out


def concat_split_cases(rng):
    out = []
    for name, shapes, axis, dt in [
        ("concat_fpn_levels", [(6, 11264, 256), (6, 2816, 256)], 1, np.float32),
        ("concat_anchor_encoder", [(1, 900, 128), (1, 900, 32), (1, 900, 32), (1, 900, 64)], -1,
         np.float32),
        ("concat_anchor_odd", [(1, 600, 3), (1, 600, 3), (1, 600, 2), (1, 600, 3)], -1,
         np.float32),
        ("concat_instance_bank", [(1, 600, 256), (1, 300, 256)], 1, np.float32),
        ("concat_int64_ids", [(1, 600), (1, 300)], 1, np.int64),
        ("concat_axis0_half", [(3, 5), (1, 5), (4, 5)], 0, np.float16),
        ("concat_bool", [(2, 3, 1), (2, 3, 4)], 2, np.bool_),
        ("concat_uint8_odd", [(5, 7), (5, 9), (5, 1)], 1, np.uint8),
        ("concat_long_axis", [(70001, 2), (3, 2)], 0, np.float32),
        ("concat_many_inputs", [(2, 1 + i % 3, 4) for i in range(70)], 1, np.float32),
    ]:
        ins = {f"x{i}": data(rng, s, dt) for i, s in enumerate(shapes)}
        out.append(exact(name, model("Concat", ins, attrs={"axis": axis}), ins))

    x = data(rng, (1, 900, 416))
    out.append(exact("split_input_sizes", model("Split", {"x": x}, {"split": i64(128, 32, 256)},
                                                attrs={"axis": -1}, nout=3), {"x": x}))
    x = data(rng, (6, 10, 3), np.int8)
    out.append(exact("split_equal_default_axis", model("Split", {"x": x}, nout=2), {"x": x}))
    x = data(rng, (4, 9, 5), np.float16)
    out.append(exact("split_equal_axis1", model("Split", {"x": x}, attrs={"axis": 1}, nout=3),
                     {"x": x}))
    x = data(rng, (7, 11))
    outs = {"y0": ((7, 4), TensorProto.FLOAT), "y1": ((7, 4), TensorProto.FLOAT),
            "y2": ((7, 3), TensorProto.FLOAT)}
    out.append(exact("split_num_outputs_uneven",
                     model("Split", {"x": x}, attrs={"axis": 1, "num_outputs": 3}, opset=18,
                           outputs=outs), {"x": x}))
    return out


def slice_cases(rng):
    out = []
    for name, shape, starts, ends, axes, steps, dt in [
        ("slice_projection_rows", (1, 6, 4, 4), [0], [3], [2], None, np.float32),
        ("slice_points_xy", (1, 6, 11700, 3), [0], [2], [-1], None, np.float32),
        ("slice_points_depth", (1, 6, 11700, 3), [2], [3], [3], None, np.float32),
        ("slice_anchor_to_end", (1, 600, 11), [8], [I64_MAX], [2], None, np.float32),
        ("slice_bank_prefix", (1, 900), [0], [600], [1], None, np.int64),
        ("slice_reverse_all", (5, 7), [-1, -1], [-I64_MAX, -I64_MAX], [0, 1], [-1, -1],
         np.float32),
        ("slice_steps_2_3", (9, 10, 11), [1, 0, 10], [9, 10, 0], [0, 1, 2], [2, 3, -4],
         np.int32),
        ("slice_negative_bounds", (8, 6), [-5, -4], [-1, 100], [0, -1], None, np.float16),
        ("slice_bool_middle", (4, 5, 6), [1], [4], [1], None, np.bool_),
        ("slice_empty", (4, 5), [3], [1], [0], None, np.float32),
        ("slice_long_rows", (70003, 3), [1, 1], [70002, 3], [0, 1], [3, 1], np.float32),
    ]:
        x = data(rng, shape, dt)
        consts = {"starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes)}
        if steps is not None:
            consts["steps"] = i64(*steps)
        out.append(exact(name, model("Slice", {"x": x}, consts), {"x": x}))
    x = data(rng, (6, 8))
    out.append(exact("slice_opset9_attributes",
                     model("Slice", {"x": x}, attrs={"starts": [1, 2], "ends": [5, 7],
                                                      "axes": [0, 1]}, opset=9), {"x": x}))
    return out


def expand_tile_cases(rng):
    out = []
    for name, shape, target, dt in [
        ("expand_rows", (1, 256), (900, 256), np.float32),
        ("expand_middle", (3, 1, 5), (2, 3, 4, 5), np.float32),
        ("expand_bidirectional", (4, 1), (1, 3), np.int64),
        ("expand_one_half", (1,), (3, 7), np.float16),
        ("expand_bool", (1, 6, 1), (2, 6, 3), np.bool_),
    ]:
        x = data(rng, shape, dt)
        out.append(exact(name, model("Expand", {"x": x}, {"shape": np.array(target, np.int64)}),
                         {"x": x}))
    for name, shape, reps, dt in [
        ("tile_3d", (2, 3, 4), (2, 1, 3), np.float32),
        ("tile_points", (1, 900, 1), (1, 1, 13), np.float32),
        ("tile_int64", (5,), (4,), np.int64),
        ("tile_uint8", (3, 1, 2), (1, 5, 2), np.uint8),
    ]:
        x = data(rng, shape, dt)
        out.append(exact(name, model("Tile", {"x": x}, {"repeats": np.array(reps, np.int64)}),
                         {"x": x}))
    return out


def gather_cases(rng):
    out = []
    x = data(rng, (900, 256))
    idx = rng.permutation(900)[:300].astype(np.int64)
    out.append(exact("gather_topk_rows", model("Gather", {"x": x, "i": idx}, attrs={"axis": 0}),
                     {"x": x, "i": idx}))
    x = data(rng, (900, 11))
    idx = rng.integers(-900, 900, size=(600,)).astype(np.int32)
    out.append(exact("gather_int32_negative", model("Gather", {"x": x, "i": idx},
                                                    attrs={"axis": 0}), {"x": x, "i": idx}))
    x = data(rng, (900,), np.int64)
    idx = rng.integers(0, 900, size=(300,)).astype(np.int64)
    out.append(exact("gather_int64_data", model("Gather", {"x": x, "i": idx}, attrs={"axis": 0}),
                     {"x": x, "i": idx}))
    # A rank-0 constant index, as the head's Gathers have.
    x = data(rng, (1, 900, 13, 3))
    out.append(exact("gather_scalar_index_axis3", model("Gather", {"x": x},
                                                        {"i": np.array(-1, dtype=np.int64)},
                                                        attrs={"axis": 3}), {"x": x}))
    x = data(rng, (1, 600, 11))
    idx = np.array([6, 7], dtype=np.int64)
    out.append(exact("gather_two_of_last", model("Gather", {"x": x, "i": idx},
                                                 attrs={"axis": -1}), {"x": x, "i": idx}))
    x = data(rng, (5, 6, 7), np.float16)
    idx = rng.integers(-6, 6, size=(3, 4)).astype(np.int64)
    out.append(exact("gather_2d_indices", model("Gather", {"x": x, "i": idx}, attrs={"axis": 1}),
                     {"x": x, "i": idx}))
    x = data(rng, (70001, 4), np.int8)
    idx = rng.integers(0, 70001, size=(70001,)).astype(np.int64)
    out.append(exact("gather_long", model("Gather", {"x": x, "i": idx}, attrs={"axis": 0}),
                     {"x": x, "i": idx}))

    for name, shape, ishape, axis, it in [
        ("gather_elements_axis0", (4, 5), (3, 5), 0, np.int64),
        ("gather_elements_axis1_int32", (4, 5, 6), (4, 7, 2), 1, np.int32),
        ("gather_elements_last", (3, 900), (3, 300), -1, np.int64),
    ]:
        x = data(rng, shape)
        n = shape[axis]
        idx = rng.integers(-n, n, size=ishape).astype(it)
        out.append(exact(name, model("GatherElements", {"x": x, "i": idx}, attrs={"axis": axis}),
                         {"x": x, "i": idx}))

    x = data(rng, (4, 5, 6))
    idx = np.stack([rng.integers(-4, 4, 10), rng.integers(0, 5, 10)], axis=-1).astype(np.int64)
    out.append(exact("gather_nd_slices", model("GatherND", {"x": x, "i": idx}), {"x": x, "i": idx}))
    x = data(rng, (3, 4, 5), np.int32)
    idx = np.stack([rng.integers(0, 4, (3, 2)), rng.integers(-5, 5, (3, 2))],
                   axis=-1).astype(np.int64)
    out.append(exact("gather_nd_batch_dims1", model("GatherND", {"x": x, "i": idx},
                                                    attrs={"batch_dims": 1}), {"x": x, "i": idx}))
    x = data(rng, (6, 7))
    idx = np.stack([rng.integers(0, 6, (2, 3)), rng.integers(0, 7, (2, 3))],
                   axis=-1).astype(np.int64)
    out.append(exact("gather_nd_elements", model("GatherND", {"x": x, "i": idx}),
                     {"x": x, "i": idx}))
    return out


def scatter_cases(rng):
    out = []
    # ScatterElements: duplicates along the axis must land in update order.
    for name, red, dt, opset in [
        ("scatter_elements_none", None, np.float32, 17),
        ("scatter_elements_add", "add", np.float32, 16),
        ("scatter_elements_mul_half", "mul", np.float16, 16),
        ("scatter_elements_max_int32", "max", np.int32, 18),
        ("scatter_elements_min_int8", "min", np.int8, 18),
    ]:
        x = data(rng, (6, 5, 4), dt)
        idx = rng.integers(-6, 6, size=(9, 4, 3)).astype(np.int64)
        upd = data(rng, (9, 4, 3), dt)
        attrs = {"axis": 0}
        if red:
            attrs["reduction"] = red
        outs = {"y": ((6, 5, 4), NP_TO_ONNX[np.dtype(dt)])}
        case = exact(name, model("ScatterElements", {"x": x, "i": idx, "u": upd},
                                 attrs=attrs, opset=opset, outputs=outs),
                     {"x": x, "i": idx, "u": upd})
        if dt == np.float16:
            # A float16 device may multiply in float32 and round once (the guarded
            # device widens float16 layers): one half ulp apart from rounding per step.
            case = Case(case.name, case.model, case.inputs, rtol=1e-3, atol=1e-3)
        out.append(case)
    x = data(rng, (3, 40))
    idx = rng.integers(0, 40, size=(3, 25)).astype(np.int32)
    upd = data(rng, (3, 25))
    out.append(exact("scatter_elements_last_axis_int32", model(
        "ScatterElements", {"x": x, "i": idx, "u": upd}, attrs={"axis": -1}),
        {"x": x, "i": idx, "u": upd}))

    for name, red, dt, opset in [
        ("scatter_nd_none_duplicates", None, np.float32, 17),
        ("scatter_nd_add", "add", np.float32, 16),
        ("scatter_nd_mul_int64", "mul", np.int64, 16),
        ("scatter_nd_max", "max", np.float32, 18),
        ("scatter_nd_min_uint8", "min", np.uint8, 18),
    ]:
        x = data(rng, (5, 6, 8), dt)
        idx = np.stack([rng.integers(-5, 5, (12,)), rng.integers(0, 6, (12,))],
                       axis=-1).astype(np.int64)
        upd = data(rng, (12, 8), dt)
        attrs = {"reduction": red} if red else None
        outs = {"y": ((5, 6, 8), NP_TO_ONNX[np.dtype(dt)])}
        out.append(exact(name, model("ScatterND", {"x": x, "i": idx, "u": upd}, attrs=attrs,
                                     opset=opset, outputs=outs), {"x": x, "i": idx, "u": upd}))
    x = data(rng, (4, 4, 3), np.bool_)
    idx = np.array([[[0, 1, 2], [3, 3, 0]], [[1, 0, 1], [2, 2, 2]]], dtype=np.int64)
    upd = data(rng, (2, 2), np.bool_)
    out.append(exact("scatter_nd_elements_bool", model("ScatterND", {"x": x, "i": idx, "u": upd}),
                     {"x": x, "i": idx, "u": upd}))
    return out


def shape_cases(rng):
    out = []
    x = data(rng, (2, 3, 4, 5))
    out.append(exact("shape_start_end", model("Shape", {"x": x}, attrs={"start": 1, "end": -1},
                                              opset=15), {"x": x}))
    out.append(exact("size", model("Size", {"x": x}), {"x": x}))
    out.append(exact("constant_of_shape_int32", model(
        "ConstantOfShape", {}, {"s": i64(3, 4)},
        attrs={"value": numpy_helper.from_array(np.array([7], np.int32))}), {}))
    out.append(exact("range_float", model("Range", {}, {"a": np.array(1.5, np.float32),
                                                        "b": np.array(9.0, np.float32),
                                                        "d": np.array(0.7, np.float32)}), {}))
    return out


# ---- resampling ---------------------------------------------------------------------------------

def resize_model(x, scales=None, sizes=None, **attrs):
    consts = {"roi": np.zeros(0, np.float32)}
    names = ["x", "roi"]
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
        names.append("scales")
    else:
        consts["scales"] = np.zeros(0, np.float32)
        consts["sizes"] = np.array(sizes, np.int64)
        names += ["scales", "sizes"]
    return model("Resize", {"x": x}, consts, attrs=attrs, node_inputs=names)


def resize_cases(rng):
    out = []
    fpn = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
           "nearest_mode": "floor"}
    for name, shape in [("resize_fpn_level4_x2", (6, 256, 8, 22)),
                        ("resize_fpn_level2_x2", (6, 256, 32, 88))]:
        x = data(rng, shape)
        out.append(exact(name, resize_model(x, scales=[1, 1, 2, 2], **fpn), {"x": x}))
    for name, shape, kw, attrs in [
        ("resize_nearest_odd_width", (2, 3, 5, 7), {"scales": [1, 1, 2.0, 1.5]},
         {"mode": "nearest"}),
        ("resize_nearest_rows_of_four", (2, 3, 5, 8), {"scales": [1, 1, 2.0, 1.5]},
         {"mode": "nearest"}),
        ("resize_nearest_ceil_down", (1, 2, 9, 13), {"sizes": [1, 2, 4, 8]},
         {"mode": "nearest", "nearest_mode": "ceil",
          "coordinate_transformation_mode": "half_pixel"}),
        ("resize_nearest_prefer_ceil", (1, 1, 6, 8), {"scales": [1, 1, 1.7, 2.3]},
         {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
          "coordinate_transformation_mode": "align_corners"}),
        ("resize_nearest_tf_half_pixel", (2, 4, 5), {"sizes": [2, 4, 5]},
         {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nearest"}),
        ("resize_linear_half_pixel", (1, 3, 17, 23), {"sizes": [1, 3, 40, 31]},
         {"mode": "linear"}),
        ("resize_linear_align_corners", (2, 2, 7, 9), {"scales": [1, 1, 2.5, 0.6]},
         {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
        ("resize_linear_pytorch_half_pixel", (1, 4, 1, 10), {"sizes": [1, 4, 3, 21]},
         {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
        ("resize_linear_asymmetric_3d", (1, 2, 5, 6, 7), {"scales": [1, 1, 1.5, 2, 0.5]},
         {"mode": "linear", "coordinate_transformation_mode": "asymmetric"}),
        ("resize_linear_last_axis", (3, 5, 8), {"scales": [1, 1, 2.0]}, {"mode": "linear"}),
        ("resize_linear_middle_axis", (3, 8, 5), {"scales": [1, 2.0, 1]},
         {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ]:
        x = data(rng, shape)
        out.append(exact(name, resize_model(x, **kw, **attrs), {"x": x}))
    x = data(rng, (1, 2, 6, 7))
    out.append(exact("resize_linear_half_pixel_symmetric", model(
        "Resize", {"x": x}, {"roi": np.zeros(0, np.float32),
                             "scales": np.array([1, 1, 1.5, 0.7], np.float32)},
        attrs={"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"},
        outputs={"y": ((1, 2, 9, 4), TensorProto.FLOAT)}), {"x": x}))
    x = data(rng, (2, 3, 4, 6))
    out.append(exact("resize_opset10_nearest", model(
        "Resize", {"x": x}, {"scales": np.array([1, 1, 3, 2], np.float32)}, opset=10,
        attrs={"mode": "nearest"}), {"x": x}))
    # Infinities and NaN spread as on the host: a blend with w == 0 is skipped, except along
    # an axis with nothing after it, where the host blends anyway (0 * inf = NaN).
    x = data(rng, (2, 6, 5))
    x[0, 1, 2] = np.inf
    x[0, 3, 4] = -np.inf
    x[1, 2, 0] = np.nan
    out.append(exact("resize_linear_inf_nan", resize_model(x, scales=[1, 2.0, 2.0],
                                                           mode="linear",
                                                           coordinate_transformation_mode=
                                                           "align_corners"), {"x": x}))
    return out


def grid_sample_cases(rng):
    out = []
    # The standard-op head: one map of one camera and level, 900 anchors x 13 points.
    for name, hw in [("grid_sample_head_level1", (64, 176)), ("grid_sample_head_level4", (8, 22))]:
        x = data(rng, (1, 256) + hw)
        g = rand(rng, (1, 900, 13, 2), lo=-1.1, hi=1.1)
        out.append(exact(name, model("GridSample", {"x": x, "g": g}, opset=16,
                                     attrs={"mode": "bilinear", "padding_mode": "zeros",
                                            "align_corners": 0}), {"x": x, "g": g}))
    for mode in ("bilinear", "nearest"):
        for pad in ("zeros", "border", "reflection"):
            for align in (0, 1):
                x = data(rng, (2, 3, 7, 9))
                g = rand(rng, (2, 5, 6, 2), lo=-1.7, hi=1.7)
                g[0, 0, 0] = [np.nan, 0.2]
                g[1, 4, 5] = [1.0, -1.0]
                name = f"grid_sample_{mode}_{pad}_align{align}"
                out.append(exact(name, model("GridSample", {"x": x, "g": g}, opset=16,
                                             attrs={"mode": mode, "padding_mode": pad,
                                                    "align_corners": align}),
                                 {"x": x, "g": g}))
    x = data(rng, (1, 70001, 2, 3))
    g = rand(rng, (1, 1, 2, 2), lo=-1, hi=1)
    out.append(exact("grid_sample_many_channels", model("GridSample", {"x": x, "g": g}, opset=16),
                     {"x": x, "g": g}))
    return out


def half_resize_cases(rng):
    """float16 Resize (CUDA only: the host runs it in float32) against the float32 reference on
    the same rounded values: nearest copies exactly; linear blends in float32 and rounds once to
    half (2^-11 relative), so rtol 1e-3 with atol 1e-4 for values in [-2, 2)."""
    keep = ("roi", "scales")
    fpn = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    x = data(rng, (6, 256, 8, 22))
    out = [half_case(exact("resize_fpn_level4_x2", resize_model(x, scales=[1, 1, 2, 2], **fpn), {"x": x}),
                     rtol=0.0, atol=0.0, keep=keep)]
    x = data(rng, (2, 3, 5, 8))
    out.append(half_case(exact("resize_nearest_rows_of_four", resize_model(x, scales=[1, 1, 2.0, 1.5],
                                                                           mode="nearest"), {"x": x}),
                         rtol=0.0, atol=0.0, keep=keep))
    x = data(rng, (1, 3, 17, 23))
    out.append(half_case(exact("resize_linear_half_pixel", resize_model(x, sizes=[1, 3, 40, 31], mode="linear"),
                               {"x": x}), rtol=1e-3, atol=1e-4, keep=keep))
    x = data(rng, (1, 2, 5, 6, 7))
    out.append(half_case(exact("resize_linear_asymmetric_3d",
                               resize_model(x, scales=[1, 1, 1.5, 2, 0.5], mode="linear",
                                            coordinate_transformation_mode="asymmetric"), {"x": x}),
                         rtol=1e-3, atol=1e-4, keep=keep))
    return out


def cases():
    rng = np.random.default_rng(SEED)
    out = []
    for make in (reshape_cases, transpose_cases, concat_split_cases, slice_cases,
                 expand_tile_cases, gather_cases, scatter_cases, shape_cases, resize_cases,
                 grid_sample_cases):
        out += make(rng)
    return out + half_resize_cases(np.random.default_rng(1516))
