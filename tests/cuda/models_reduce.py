"""Op models of the reduction family for device_compare.py: Reduce*, ArgMax/ArgMin,
Softmax/LogSoftmax, LayerNormalization, BatchNormalization, TopK.

Device A (the CPU host reference) accumulates in double; the CUDA kernels in
float (double for float64) along fixed reduction trees. Tolerances, per case:
  sums of n values in [-2, 2): |error| grows like eps_f32 * sqrt(n) * rms, so
    atol = 1e-5 * sqrt(n) with rtol = 1e-5 (a wrong or missing element of
    magnitude ~1 still fails);
  max / min / arg / TopK: exact (no arithmetic; indices always compare exactly);
  softmax, layer norm, log-sum-exp: a few float32 ulps of O(1) values, rtol 1e-5;
  BatchNormalization: the kernel rounds like the host (no FMA), rtol 1e-6;
  float16 data: one half ulp, rtol = atol = 1e-3.
float16 versions made by cases.half_case (half_cases) compare the float16 kernel with
the float32 reference on the same rounded values: LayerNorm's statistics are float32 in
both, so only Y's rounding to half (2^-11 relative) differs: rtol 1e-3, atol 2e-4.
Every input is random (seeded), never all zeros, valid for the op; a few cases
carry NaN or ties on purpose.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

from cases import Case, half_case, rand, single_op

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
              "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]
EXACT_OPS = ("ReduceMax", "ReduceMin")
ONNX_OF = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
           np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int32): TensorProto.INT32,
           np.dtype(np.int64): TensorProto.INT64}


def out_shape(shape, axes, keepdims):
    if axes is None:
        axes = range(len(shape))
    axes = {a % len(shape) for a in axes}
    return [1 if d in axes else s for d, s in enumerate(shape) if keepdims or d not in axes]


def multi_model(nodes, inputs, consts, outputs, opset=17):
    """A graph of several independent nodes. inputs/consts: {name: array};
    outputs: {name: (shape, TensorProto type)}."""
    g_in = [helper.make_tensor_value_info(k, ONNX_OF[v.dtype], list(v.shape)) for k, v in inputs.items()]
    g_out = [helper.make_tensor_value_info(k, t, list(shp)) for k, (shp, t) in outputs.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    g = helper.make_graph(nodes, "reduce_family", g_in, g_out, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def reduce_input(rng, shape, dtype, positive=False):
    if np.dtype(dtype).kind == "f":
        return rand(rng, shape, dtype, 0.5, 1.5) if positive else rand(rng, shape, dtype, -2, 2)
    return rand(rng, shape, dtype, -2, 3) if positive else rand(rng, shape, dtype, -50, 50)


# ReduceProd, ReduceL2 and ReduceLogSum read values in [0.5, 1.5): a finite product, a positive sum.
POSITIVE_OPS = ("ReduceProd", "ReduceL2", "ReduceLogSum")


def reduce_case(rng, ops, shape, axes, keepdims=1, dtype=np.float32, opset=17, noop=None, name=None, x=None):
    """One node per op in ops over the same geometry; axes go in the attribute or, for
    ReduceSum from opset 13 and the others from 18, in input 1."""
    if isinstance(ops, str):
        ops = [ops]
    onnx_t = ONNX_OF[np.dtype(dtype)]
    inputs, consts, nodes, outputs = {}, {}, [], {}
    if any(op not in POSITIVE_OPS for op in ops):
        inputs["x"] = reduce_input(rng, shape, dtype) if x is None else x
    if any(op in POSITIVE_OPS for op in ops):
        inputs["xp"] = reduce_input(rng, shape, dtype, positive=True) if x is None else x
    if axes is not None:
        consts["axes"] = np.array(axes, dtype=np.int64)
    oshape = list(shape) if (noop and axes is None) else out_shape(shape, axes, keepdims)
    for op in ops:
        attrs = {"keepdims": keepdims}
        if noop is not None:
            attrs["noop_with_empty_axes"] = noop
        node_in = ["xp" if op in POSITIVE_OPS else "x"]
        if axes is not None:
            if opset >= (13 if op == "ReduceSum" else 18):
                node_in.append("axes")
            else:
                attrs["axes"] = list(axes)
        nodes.append(helper.make_node(op, node_in, ["y_" + op], name=op.lower(), **attrs))
        outputs["y_" + op] = (oshape, onnx_t)
    if "axes" in consts and not any(len(nd.input) > 1 for nd in nodes):
        del consts["axes"]
    model = multi_model(nodes, inputs, consts, outputs, opset)
    n = int(np.prod(shape)) // max(1, int(np.prod(oshape)))
    if np.dtype(dtype) == np.float16:
        rtol, atol = 1e-3, 1e-3 * max(1.0, n ** 0.5)
    elif all(op in EXACT_OPS for op in ops) or np.dtype(dtype).kind == "i":
        rtol, atol = 0.0, 0.0
    else:
        rtol, atol = 1e-5 + (2e-7 * n if "ReduceProd" in ops else 0.0), 1e-5 * max(1.0, n ** 0.5)
    label = name or f"{'_'.join(o[6:] for o in ops) if len(ops) < 4 else 'Reduce_all'}_" \
        f"{'x'.join(map(str, shape))}_ax{'none' if axes is None else '_'.join(map(str, axes))}" \
        f"_k{keepdims}_o{opset}_{np.dtype(dtype).name}"
    return Case(label, model, inputs, rtol, atol)


def reduce_cases(rng):
    out = []
    # Every op, the three kernel layouts: trailing axis (rows), leading axis (columns), two
    # separated axes (columns over two reduced dims), plus all axes; attribute and input axes.
    out.append(reduce_case(rng, REDUCE_OPS, [3, 4, 37], [-1]))
    out.append(reduce_case(rng, REDUCE_OPS, [37, 5, 6], [0], keepdims=0))
    out.append(reduce_case(rng, REDUCE_OPS, [4, 6, 5, 7], [0, 2], opset=18))
    out.append(reduce_case(rng, REDUCE_OPS, [5, 1, 9], None, opset=18))
    out.append(reduce_case(rng, REDUCE_OPS, [2, 300, 70], [1], opset=18))
    # Merged adjacent axes (global average pool), odd sizes, size-1 dims, negative axes.
    out.append(reduce_case(rng, "ReduceMean", [2, 16, 13, 11], [2, 3]))
    out.append(reduce_case(rng, "ReduceMean", [6, 256, 64, 176], [2, 3], opset=18,
                           name="ReduceMean_v3_fpn_level0_global_pool"))
    out.append(reduce_case(rng, ["ReduceSum", "ReduceMax"], [1, 7, 1, 3], [1, -1], keepdims=0, opset=18))
    out.append(reduce_case(rng, "ReduceMax", [3, 1, 5], [1]))
    out.append(reduce_case(rng, "ReduceSum", [2, 3, 5], [-2], opset=13))
    # Sparse4Dv3 head shapes: the max class logit, sums over the 312 aggregation weights.
    out.append(reduce_case(rng, "ReduceMax", [1, 900, 10], [-1], keepdims=0, name="ReduceMax_v3_class_logits"))
    out.append(reduce_case(rng, "ReduceSum", [1, 900, 8, 312], [-1], name="ReduceSum_v3_weights_inner"))
    out.append(reduce_case(rng, "ReduceSum", [1, 900, 312, 8], [2], name="ReduceSum_v3_weights_strided"))
    out.append(reduce_case(rng, "ReduceMean", [1, 900, 256], [-1], name="ReduceMean_v3_instance_feature"))
    # Few outputs over long runs: the partial-result split, rows and columns.
    out.append(reduce_case(rng, "ReduceSum", [1000, 1000], None, keepdims=0, name="ReduceSum_all_1e6"))
    out.append(reduce_case(rng, ["ReduceLogSumExp", "ReduceL1"], [3, 200000], [1], opset=18,
                           name="ReduceLogSumExp_L1_split_rows"))
    out.append(reduce_case(rng, "ReduceMax", [3, 200001], [1], name="ReduceMax_split_rows_odd"))
    out.append(reduce_case(rng, ["ReduceMean", "ReduceLogSumExp"], [100000, 3], [0], opset=18,
                           name="ReduceMean_LogSumExp_split_cols"))
    out.append(reduce_case(rng, "ReduceL2", [70001, 2, 3], [0, 2], name="ReduceL2_split_cols_two_dims"))
    # Many outputs (grid x far beyond 65535).
    out.append(reduce_case(rng, "ReduceSum", [300000, 5], [1], name="ReduceSum_300k_rows"))
    out.append(reduce_case(rng, "ReduceMin", [5, 300000], [0], name="ReduceMin_300k_cols"))
    # noop_with_empty_axes, and an empty axes list that reduces everything.
    out.append(reduce_case(rng, "ReduceMean", [3, 4], None, opset=18, noop=1, name="ReduceMean_noop"))
    out.append(reduce_case(rng, "ReduceSum", [3, 4], None, opset=13, noop=0, name="ReduceSum_empty_axes_all"))
    # Other dtypes.
    for dt in (np.float16, np.float64):
        out.append(reduce_case(rng, ["ReduceSum", "ReduceMax", "ReduceMean"], [4, 33, 9], [1], dtype=dt, opset=18))
        out.append(reduce_case(rng, ["ReduceSum", "ReduceMin", "ReduceLogSumExp"], [4, 9, 33], [-1], dtype=dt,
                               opset=18))
    for dt in (np.int32, np.int64):
        out.append(reduce_case(rng, REDUCE_OPS, [4, 33, 9], [1], dtype=dt, opset=18))
        out.append(reduce_case(rng, REDUCE_OPS, [4, 9, 33], [-1], dtype=dt, opset=18))
    # NaN and infinities propagate like the host's.
    x = rand(rng, [6, 50], np.float32)
    x[1, 7] = np.nan
    x[2, 3] = np.inf
    x[3, :] = -np.inf
    x[4, 9] = np.nan
    x[4, 10] = np.inf
    out.append(reduce_case(rng, ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceLogSumExp"], [6, 50], [1], x=x,
                           name="Reduce_nan_inf", opset=18))
    return out


def arg_case(rng, shape, axis, keepdims=1, last=0, dtype=np.float32, x=None, name=None):
    """ArgMax and ArgMin of the same input."""
    if x is None:
        x = rand(rng, shape, dtype, -2, 2) if np.dtype(dtype).kind == "f" else rand(rng, shape, dtype, -9, 9)
    oshape = [1 if d == axis % len(shape) else s for d, s in enumerate(shape)
              if keepdims or d != axis % len(shape)]
    attrs = {"axis": axis, "keepdims": keepdims, "select_last_index": last}
    nodes = [helper.make_node(op, ["x"], ["y_" + op], name=op.lower(), **attrs) for op in ("ArgMax", "ArgMin")]
    model = multi_model(nodes, {"x": x}, {}, {"y_ArgMax": (oshape, TensorProto.INT64),
                                              "y_ArgMin": (oshape, TensorProto.INT64)})
    label = name or f"Arg_{'x'.join(map(str, shape))}_ax{axis}_k{keepdims}_last{last}_{np.dtype(dtype).name}"
    return Case(label, model, {"x": x}, 0.0, 0.0)


def arg_cases(rng):
    out = [
        arg_case(rng, [1, 900, 10], -1, keepdims=0, name="Arg_v3_class_logits"),
        arg_case(rng, [100, 37], 0),
        arg_case(rng, [3, 2000, 5], 1),
        arg_case(rng, [4, 3000], 1),
        arg_case(rng, [5, 1, 3], 1),
        arg_case(rng, [70000, 3], 1),
    ]
    for last in (0, 1):  # many ties: values from a small set
        ties = np.floor(rand(rng, [50, 40], np.float32, 0, 3))
        out.append(arg_case(rng, [50, 40], 1, last=last, x=ties, name=f"Arg_ties_rows_last{last}"))
        out.append(arg_case(rng, [50, 40], 0, last=last, x=ties.copy(), name=f"Arg_ties_cols_last{last}"))
    for dt in (np.float16, np.float64, np.int32, np.int64):
        out.append(arg_case(rng, [7, 65], -1, dtype=dt))
    x = rand(rng, [4, 20], np.float32)
    x[0, 0] = np.nan   # NaN first: index 0
    x[1, 5] = np.nan   # NaN later: skipped
    x[2, :] = 1.0      # all equal
    out.append(arg_case(rng, [4, 20], 1, x=x, name="Arg_nan"))
    return out


def softmax_case(rng, shape, axis, opset=17, dtype=np.float32, x=None, name=None, ops=("Softmax", "LogSoftmax")):
    x = rand(rng, shape, dtype, -4, 4) if x is None else x
    attrs = {} if axis is None else {"axis": axis}
    onnx_t = ONNX_OF[np.dtype(dtype)]
    nodes = [helper.make_node(op, ["x"], ["y_" + op], name=op.lower(), **attrs) for op in ops]
    model = multi_model(nodes, {"x": x}, {}, {"y_" + op: (list(shape), onnx_t) for op in ops}, opset)
    rtol, atol = (1e-3, 1e-3) if np.dtype(dtype) == np.float16 else (1e-5, 1e-6)
    label = name or f"Softmax_{'x'.join(map(str, shape))}_ax{axis}_o{opset}_{np.dtype(dtype).name}"
    return Case(label, model, {"x": x}, rtol, atol)


def softmax_cases(rng):
    out = []
    for n in (1, 3, 7, 32, 129, 1000, 2048, 5000):
        out.append(softmax_case(rng, [5, n], -1))
    out.append(softmax_case(rng, [6, 7, 10], 1))
    out.append(softmax_case(rng, [3, 40, 100], 0))
    out.append(softmax_case(rng, [2, 3, 4, 5], None, opset=11))   # coerced to [2, 60]
    out.append(softmax_case(rng, [2, 3, 4, 5], 2, opset=11))      # coerced to [6, 20]
    out.append(softmax_case(rng, [70000, 8], -1))                 # many rows
    out.append(softmax_case(rng, [4, 9, 70000], 1))               # wide inner
    out.append(softmax_case(rng, [3, 333], -1, dtype=np.float16))
    out.append(softmax_case(rng, [3, 20, 5], 1, dtype=np.float16))
    out.append(softmax_case(rng, [3, 333], -1, dtype=np.float64))
    out.append(softmax_case(rng, [2, 1500, 6], 1, dtype=np.float64))
    x = rand(rng, [4, 50], np.float32, -4, 4)
    x[1, 3] = np.nan
    x[2, 8] = np.inf
    x[3, :] = -np.inf
    out.append(softmax_case(rng, [4, 50], -1, x=x, name="Softmax_nan_inf"))
    # Sparse4Dv3: attention weights, the aggregation weights over 312 (inner and strided).
    out.append(softmax_case(rng, [8, 900, 1500], -1, ops=("Softmax",), name="Softmax_v3_temporal_attention"))
    out.append(softmax_case(rng, [8, 900, 900], -1, ops=("Softmax",), name="Softmax_v3_self_attention"))
    out.append(softmax_case(rng, [1, 900, 8, 312], -1, name="Softmax_v3_weights_groups_first"))
    out.append(softmax_case(rng, [1, 900, 312, 8], 2, name="Softmax_v3_weights_groups_last"))
    return out


def ln_case(rng, shape, axis, scale_shape=None, bias_shape=(), stats=False, eps=1e-5, name=None):
    x = rand(rng, shape, np.float32, -3, 3) + 0.5
    norm = shape[axis % len(shape):]
    scale = rand(rng, scale_shape if scale_shape is not None else norm, np.float32, 0.5, 1.5)
    inputs = {"x": x}
    consts = {"scale": scale}
    names = ["x", "scale"]
    if bias_shape is not None:
        consts["bias"] = rand(rng, bias_shape or norm, np.float32, -1, 1)
        names.append("bias")
    outs = {"y": list(shape)}
    if stats:
        sshape = [1 if d >= axis % len(shape) else s for d, s in enumerate(shape)]
        outs["mean"] = sshape
        outs["inv_std"] = sshape
    model = single_op("LayerNormalization", inputs, outs, attrs={"axis": axis, "epsilon": eps},
                      consts=consts, node_inputs=names)
    label = name or f"LayerNorm_{'x'.join(map(str, shape))}_ax{axis}" + ("_stats" if stats else "")
    return Case(label, model, inputs, 1e-5, 1e-5)


def ln_cases(rng):
    return [
        ln_case(rng, [1, 900, 256], -1, stats=True, name="LayerNorm_v3_256_stats"),
        ln_case(rng, [1, 900, 512], -1, name="LayerNorm_v3_512"),
        ln_case(rng, [1, 1800, 256], -1, name="LayerNorm_v3_1800"),
        ln_case(rng, [6, 12, 256], 2, name="LayerNorm_v3_camera_embed"),
        ln_case(rng, [2, 3, 4, 5], 1, stats=True),
        ln_case(rng, [7, 3], -1, stats=True),
        ln_case(rng, [5, 1], -1, eps=1e-3, stats=True, name="LayerNorm_one_col"),
        ln_case(rng, [3, 4, 6], -2, scale_shape=[1, 6], bias_shape=[4, 1], stats=True,
                name="LayerNorm_broadcast_params"),
        ln_case(rng, [4, 3000], -1, bias_shape=None, name="LayerNorm_long_rows_no_bias"),
        ln_case(rng, [3, 2, 2049], 1, stats=True, name="LayerNorm_long_rows_odd"),
        ln_case(rng, [70000, 16], -1, name="LayerNorm_many_rows"),
        ln_case(rng, [9, 130], -1, scale_shape=[1], bias_shape=[1], name="LayerNorm_scalar_params"),
    ]


def bn_case(rng, shape, eps=1e-5, name=None):
    c = shape[1]
    x = rand(rng, shape, np.float32, -3, 3)
    consts = {"scale": rand(rng, [c], np.float32, 0.5, 1.5), "bias": rand(rng, [c], np.float32, -1, 1),
              "mean": rand(rng, [c], np.float32, -0.5, 0.5), "var": rand(rng, [c], np.float32, 0.1, 2.0)}
    model = single_op("BatchNormalization", {"x": x}, {"y": list(shape)}, attrs={"epsilon": eps},
                      consts=consts, node_inputs=["x", "scale", "bias", "mean", "var"])
    return Case(name or f"BatchNorm_{'x'.join(map(str, shape))}", model, {"x": x}, 1e-6, 1e-6)


def bn_cases(rng):
    return [
        bn_case(rng, [6, 256, 64, 176], name="BatchNorm_v3_backbone_stage1"),
        bn_case(rng, [2, 8, 30, 30]),
        bn_case(rng, [2, 8, 31, 31]),
        bn_case(rng, [2, 3, 5, 7], eps=1e-3),
        bn_case(rng, [70000, 3]),
        bn_case(rng, [4, 5, 9000]),
    ]


def topk_case(rng, shape, k, axis=-1, largest=1, dtype=np.float32, opset=17, x=None, name=None):
    if x is None:
        x = rand(rng, shape, dtype, -5, 5) if np.dtype(dtype).kind == "f" else rand(rng, shape, dtype, -1000, 1000)
    ax = axis % len(shape)
    oshape = [k if d == ax else s for d, s in enumerate(shape)]
    attrs = {"axis": axis}
    consts = {}
    node_inputs = ["x"]
    if opset >= 10:
        consts["k"] = np.array([k], dtype=np.int64)
        node_inputs.append("k")
        if opset >= 11:
            attrs["largest"] = largest
            attrs["sorted"] = 1
    else:
        attrs["k"] = k
    model = single_op("TopK", {"x": x}, {"values": oshape, "indices": oshape}, attrs=attrs, consts=consts,
                      out_dtypes={"values": ONNX_OF[np.dtype(dtype)], "indices": TensorProto.INT64},
                      opset=opset, node_inputs=node_inputs)
    label = name or f"TopK_{'x'.join(map(str, shape))}_k{k}_ax{axis}_l{largest}_o{opset}_{np.dtype(dtype).name}"
    return Case(label, model, {"x": x}, 0.0, 0.0)


def topk_cases(rng):
    out = [
        topk_case(rng, [1, 900], 300, name="TopK_v3_decoder_300_of_900"),
        topk_case(rng, [1, 900], 600, name="TopK_v3_cache_600_of_900"),
        topk_case(rng, [1, 9000], 300, name="TopK_v3_flat_scores_300_of_9000"),
        topk_case(rng, [2, 1800], 600),
        topk_case(rng, [3, 17], 5),
        topk_case(rng, [3, 17], 17, largest=0),
        topk_case(rng, [50, 7, 3], 4, axis=0),
        topk_case(rng, [4, 4096], 10),
        topk_case(rng, [2, 5000], 100, axis=1),
        topk_case(rng, [3, 20000, 2], 1000, axis=1, largest=0),
        topk_case(rng, [70000, 4], 2),
        topk_case(rng, [6, 10], 3, opset=1),
        topk_case(rng, [6, 10], 3, opset=10),
        topk_case(rng, [5, 100], 30, dtype=np.float64),
        topk_case(rng, [5, 100], 30, dtype=np.int32, largest=0),
        topk_case(rng, [5, 9000], 30, dtype=np.int64),
    ]
    ties = np.floor(rand(rng, [8, 300], np.float32, 0, 4))
    ties[0, 5] = -0.0
    ties[0, 6] = 0.0
    out.append(topk_case(rng, [8, 300], 100, x=ties, name="TopK_ties_largest"))
    out.append(topk_case(rng, [8, 300], 100, largest=0, x=ties.copy(), name="TopK_ties_smallest"))
    big_ties = np.floor(rand(rng, [2, 10000], np.float32, 0, 4))
    out.append(topk_case(rng, [2, 10000], 500, x=big_ties, name="TopK_ties_multipass"))
    x = rand(rng, [3, 40], np.float32)
    x[0, 3] = np.nan
    x[0, 30] = np.nan
    x[1, 0] = np.inf
    x[2, 5] = -np.inf
    out.append(topk_case(rng, [3, 40], 10, x=x, name="TopK_nan_largest"))
    out.append(topk_case(rng, [3, 40], 40, largest=0, x=x.copy(), name="TopK_nan_smallest"))
    return out


def half_cases(rng):
    """float16 LayerNorm and TopK (CUDA only: the host runs them in float32) and Softmax of the head."""
    ln16 = dict(rtol=1e-3, atol=2e-4, keep=("mean", "inv_std"))
    out = [
        half_case(ln_case(rng, [1, 900, 256], -1, stats=True, name="LayerNorm_v3_256_stats"), **ln16),
        half_case(ln_case(rng, [1, 900, 512], -1, name="LayerNorm_v3_512"), **ln16),
        half_case(ln_case(rng, [3, 4, 6], -2, scale_shape=[1, 6], bias_shape=[4, 1], stats=True,
                          name="LayerNorm_broadcast_params"), **ln16),
        half_case(ln_case(rng, [3, 2, 2049], 1, stats=True, name="LayerNorm_long_rows_odd"), **ln16),
        half_case(ln_case(rng, [4, 3000], -1, bias_shape=None, name="LayerNorm_long_rows_no_bias"), **ln16),
        half_case(ln_case(rng, [7, 3], -1, stats=True), **ln16),
        # A float16 op the host runs too: on the guarded device this takes the half_case path end to end.
        half_case(softmax_case(rng, [1, 900, 8, 312], -1, ops=("Softmax",), name="Softmax_v3_weights_groups_first"),
                  rtol=1e-3, atol=1e-4),
        # float16 TopK: exact (float16 keys widen to float exactly, ties break by index alike).
        half_case(topk_case(rng, [1, 900], 300, name="TopK_v3_decoder_300_of_900"), rtol=0.0, atol=0.0),
        half_case(topk_case(rng, [2, 5000], 100, axis=1), rtol=0.0, atol=0.0),
        half_case(topk_case(rng, [3, 20000, 2], 1000, axis=1, largest=0), rtol=0.0, atol=0.0),
    ]
    return out


def cases():
    rng = np.random.default_rng(20240611)
    return reduce_cases(rng) + arg_cases(rng) + softmax_cases(rng) + ln_cases(rng) + bn_cases(rng) + \
        topk_cases(rng) + half_cases(np.random.default_rng(1516))
