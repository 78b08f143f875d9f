"""A small NumPy interpreter for the ONNX graphs this package exports.

No ONNX runtime is packaged for Debian, so the tests run the exported
files through this evaluator to prove the export is faithful: it executes
the graph as written (node by node, from the file), independently of the
PyTorch code that produced it. It covers exactly the op types the exports
use (export.py checks that list) and raises on anything else, including
attribute values it does not implement.
"""
from typing import Dict

import numpy as np

_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64,
           9: np.bool_, 10: np.float16, 11: np.float64}


class UnsupportedNode(RuntimeError):
    pass


def _attrs(node) -> Dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _conv(x, w, b, at):
    if at.get("group", 1) != 1:
        raise UnsupportedNode("Conv group != 1")
    kh, kw = w.shape[2], w.shape[3]
    sh, sw = at.get("strides", [1, 1])
    dh, dw = at.get("dilations", [1, 1])
    if (dh, dw) != (1, 1):
        raise UnsupportedNode("Conv dilation")
    pt, pl, pb, pr = at.get("pads", [0, 0, 0, 0])
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, _, hp, wp = xp.shape
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    out = np.zeros((n, w.shape[0], oh, ow), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j], optimize=True)
    if b is not None:
        out += b[None, :, None, None]
    return out.astype(x.dtype)


def _maxpool(x, at):
    kh, kw = at["kernel_shape"]
    sh, sw = at.get("strides", [1, 1])
    pt, pl, pb, pr = at.get("pads", [0, 0, 0, 0])
    if at.get("ceil_mode", 0) or at.get("dilations", [1, 1]) != [1, 1]:
        raise UnsupportedNode("MaxPool ceil_mode/dilations")
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=-np.inf)
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    out = np.full(x.shape[:2] + (oh, ow), -np.inf, dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out = np.maximum(out, xp[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw])
    return out


def _resize(x, roi, scales, sizes, at):
    if at.get("mode", b"nearest") not in (b"nearest", "nearest"):
        raise UnsupportedNode(f"Resize mode {at.get('mode')}")
    ct = at.get("coordinate_transformation_mode", b"half_pixel")
    nm = at.get("nearest_mode", b"round_prefer_floor")
    if ct not in (b"asymmetric",) or nm not in (b"floor",):
        raise UnsupportedNode(f"Resize {ct} / {nm}")
    if sizes is not None and sizes.size:
        out_shape = [int(s) for s in sizes]
        scl = [o / i for o, i in zip(out_shape, x.shape)]
    else:
        scl = [float(s) for s in scales]
        out_shape = [int(np.floor(i * s)) for i, s in zip(x.shape, scl)]
    out = x
    for ax, (o, s) in enumerate(zip(out_shape, scl)):
        if o != x.shape[ax]:
            idx = np.minimum(np.floor(np.arange(o) / s).astype(np.int64), x.shape[ax] - 1)
            out = np.take(out, idx, axis=ax)
    return out


def _grid_sample(x, grid, at):
    if at.get("mode", b"bilinear") != b"bilinear" or at.get("padding_mode", b"zeros") != b"zeros" \
            or at.get("align_corners", 0) != 0:
        raise UnsupportedNode("GridSample other than bilinear/zeros/align_corners=0")
    n, c, h, w = x.shape
    gx = ((grid[..., 0].astype(np.float64) + 1) * w - 1) / 2
    gy = ((grid[..., 1].astype(np.float64) + 1) * h - 1) / 2
    x0, y0 = np.floor(gx), np.floor(gy)
    out = np.zeros((n, c) + grid.shape[1:3], dtype=np.float64)
    bidx = np.arange(n)[:, None, None]
    for dy in (0, 1):
        for dx in (0, 1):
            xx, yy = x0 + dx, y0 + dy
            wgt = (1 - np.abs(gx - xx)) * (1 - np.abs(gy - yy))
            inside = (xx >= 0) & (xx < w) & (yy >= 0) & (yy < h)
            xi = np.clip(np.nan_to_num(xx), 0, w - 1).astype(np.int64)
            yi = np.clip(np.nan_to_num(yy), 0, h - 1).astype(np.int64)
            v = x[bidx, :, yi, xi]  # [n, ho, wo, c]
            out += np.moveaxis(v, -1, 1) * (wgt * inside)[:, None]
    return out.astype(x.dtype)


def _deformable_aggregation(ins):
    import torch
    from .aggregation import aggregation_float64
    t = [torch.from_numpy(np.array(a)) for a in ins]
    return aggregation_float64(*t).numpy().astype(ins[0].dtype)


def _slice(x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    sl = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        sl[int(a)] = slice(int(s), int(max(min(e, 2 ** 62), -2 ** 62)), int(st))
    return x[tuple(sl)]


def _topk(x, k, at):
    axis = at.get("axis", -1)
    if not at.get("sorted", 1):
        raise UnsupportedNode("TopK other than sorted")
    # equal values keep their index order, largest first or smallest first
    order = np.argsort(-x if at.get("largest", 1) else x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(int(k[0])), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def _reduce(fn, x, axes, keep):
    axes = None if axes is None else tuple(int(a) for a in axes)
    return fn(x, axis=axes, keepdims=bool(keep))


def _run_node(node, ins, at):
    op = node.op_type
    if node.domain == "s4d" and op == "DeformableAggregation":
        return [_deformable_aggregation(ins)]
    if node.domain not in ("", "ai.onnx"):
        raise UnsupportedNode(f"{node.domain}::{op}")
    if op == "Constant":
        from onnx import numpy_helper
        return [numpy_helper.to_array(at["value"]) if "value" in at else np.array(
            at.get("value_float", at.get("value_int")))]
    simple = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "And": np.logical_and,
              "Equal": np.equal, "Greater": np.greater, "Less": np.less,
              "GreaterOrEqual": np.greater_equal, "LessOrEqual": np.less_equal}
    if op in simple:
        return [simple[op](ins[0], ins[1])]
    if op == "Div":
        a, b = ins
        return [a // b if np.issubdtype(a.dtype, np.integer) else (a / b).astype(a.dtype)]
    unary = {"Abs": np.abs, "Atan": np.arctan, "Exp": np.exp, "Neg": np.negative,
             "Not": np.logical_not,
             "Relu": lambda v: np.maximum(v, 0).astype(v.dtype), "Identity": lambda v: v,
             "Sigmoid": lambda v: (1 / (1 + np.exp(-v))).astype(v.dtype)}
    if op in unary:
        return [unary[op](ins[0])]
    if op == "Max":
        out = ins[0]
        for v in ins[1:]:
            out = np.maximum(out, v)
        return [out]
    if op == "Where":
        return [np.where(ins[0], ins[1], ins[2])]
    if op == "Cast":
        return [ins[0].astype(_DTYPES[at["to"]])]
    if op == "Clip":
        lo = ins[1] if len(ins) > 1 and ins[1] is not None else None
        hi = ins[2] if len(ins) > 2 and ins[2] is not None else None
        return [np.clip(ins[0], lo, hi)]
    if op == "Concat":
        return [np.concatenate(ins, axis=at["axis"])]
    if op == "Gather":
        return [np.take(ins[0], ins[1], axis=at.get("axis", 0))]
    if op == "Reshape":
        shape = [int(s) for s in ins[1]]
        shape = [ins[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
        return [ins[0].reshape(shape)]
    if op == "Transpose":
        return [np.transpose(ins[0], at.get("perm"))]
    if op == "Unsqueeze":
        out = ins[0]
        for a in sorted(int(a) % (out.ndim + len(ins[1])) for a in ins[1]):
            out = np.expand_dims(out, a)
        return [out]
    if op == "Squeeze":
        return [np.squeeze(ins[0], axis=tuple(int(a) for a in ins[1]))]
    if op == "Slice":
        return [_slice(ins[0], *[None if v is None else list(v) for v in ins[1:]])]
    if op == "MatMul":
        return [np.matmul(ins[0], ins[1])]
    if op == "Gemm":
        a = ins[0].T if at.get("transA", 0) else ins[0]
        b = ins[1].T if at.get("transB", 0) else ins[1]
        out = at.get("alpha", 1.0) * a @ b
        if len(ins) > 2:
            out = out + at.get("beta", 1.0) * ins[2]
        return [out.astype(ins[0].dtype)]
    if op == "Softmax":
        x = ins[0]
        e = np.exp(x - x.max(axis=at.get("axis", -1), keepdims=True))
        return [(e / e.sum(axis=at.get("axis", -1), keepdims=True)).astype(x.dtype)]
    if op == "LayerNormalization":
        x = ins[0]
        if at.get("axis", -1) != -1:
            raise UnsupportedNode("LayerNormalization axis != -1")
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        out = (x - mu) / np.sqrt(var + at.get("epsilon", 1e-5)) * ins[1]
        if len(ins) > 2 and ins[2] is not None:
            out = out + ins[2]
        return [out.astype(x.dtype)]
    if op == "ReduceMax":
        return [_reduce(np.max, ins[0], at.get("axes"), at.get("keepdims", 1))]
    if op == "ReduceSum":
        axes = ins[1] if len(ins) > 1 else None
        return [_reduce(np.sum, ins[0], axes, at.get("keepdims", 1))]
    if op == "ArgMax":
        if at.get("select_last_index", 0):
            raise UnsupportedNode("ArgMax select_last_index")
        out = np.argmax(ins[0], axis=at.get("axis", 0))
        if at.get("keepdims", 1):
            out = np.expand_dims(out, at.get("axis", 0))
        return [out.astype(np.int64)]
    if op == "TopK":
        return list(_topk(ins[0], ins[1], at))
    if op == "Conv":
        return [_conv(ins[0], ins[1], ins[2] if len(ins) > 2 else None, at)]
    if op == "MaxPool":
        return [_maxpool(ins[0], at)]
    if op == "Resize":
        pad = list(ins) + [None] * 4
        return [_resize(pad[0], pad[1], pad[2], pad[3], at)]
    if op == "GridSample":
        return [_grid_sample(ins[0], ins[1], at)]
    raise UnsupportedNode(op)


def _widen(arr):
    arr = np.asarray(arr)
    return arr.astype(np.float64) if arr.dtype == np.float32 else arr


def run(path_or_model, feeds: Dict[str, np.ndarray], float64: bool = False
        ) -> Dict[str, np.ndarray]:
    """Runs the graph on `feeds` (name -> array); returns every graph output.
    float64=True computes every float32 tensor in float64 instead (weights,
    constants, inputs, casts): then the graph can be compared with a float64
    run of the model to rounding level, which separates a wrong graph from
    float32 noise."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path_or_model) if isinstance(path_or_model, str) else path_or_model
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    if float64:
        env = {k: _widen(v) for k, v in env.items()}
    for vi in model.graph.input:
        if vi.name in env:
            continue
        if vi.name not in feeds:
            raise KeyError(f"graph input '{vi.name}' not fed")
        want = _DTYPES[vi.type.tensor_type.elem_type]
        arr = np.asarray(feeds[vi.name])
        if arr.dtype != want:
            raise TypeError(f"input '{vi.name}': dtype {arr.dtype}, graph wants {np.dtype(want)}")
        env[vi.name] = _widen(arr) if float64 else arr
    for node in model.graph.node:
        ins = [env[n] if n else None for n in node.input]
        at = _attrs(node)
        if float64 and node.op_type == "Cast" and at.get("to") == 1:
            at["to"] = 11
        try:
            outs = _run_node(node, ins, at)
            if float64:
                outs = [_widen(o) for o in outs]
        except UnsupportedNode as e:
            raise UnsupportedNode(f"node '{node.name}': {e}") from None
        for name, val in zip(node.output, outs):
            env[name] = np.asarray(val)
    return {vi.name: env[vi.name] for vi in model.graph.output}
