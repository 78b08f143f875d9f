"""s4d.ops.deformable_aggregation: the op library's deformable aggregation in PyTorch.

Arguments (shapes as in include/s4d/deformable_aggregation.h):
    features          [bs, F, C]          float32 or float16
    spatial_shape     [N, L, 2]           int32 or int64, (H, W) of each map
    scale_start_index [N, L]              int32 or int64, first row of each map in F
    sampling_location [bs, A, P, N, 2]    float32, normalised (x, y)
    weights           [bs, A, P, N, L, G] float32 or float16
Returns [bs, A, C] in features' dtype (accumulation is float32).

Every tensor must be contiguous and on features' device; the two index
tensors may also stay on the CPU when features is on a GPU (they are checked
there and copied; under CUDA-graph capture keep them on the GPU instead).

The operator s4d::deformable_aggregation is registered in C++ by the
extension (python/s4d/csrc): CPU, CUDA, Meta and Autograd kernels, so a call
crosses from Python into C++ once. This module adds what stays in Python:
the argument checks, the cache of converted index tables and the ONNX
symbolic.

Autograd: gradients for features, sampling_location and weights come from
the library's backward (not differentiable twice). Export: one ONNX node
s4d::DeformableAggregation with attribute plugin_version="1".
"""
import inspect
import warnings
import weakref
from typing import Optional

import torch

from ._extension import ExtensionNotBuiltError, load_extension

__all__ = ["deformable_aggregation", "onnx_translation_table", "ONNX_DOMAIN", "ONNX_OP_TYPE",
           "ONNX_PLUGIN_VERSION"]

# The ONNX node the engine's plugin registry maps to (namespace, name, version).
ONNX_DOMAIN = "s4d"
ONNX_OP_TYPE = "DeformableAggregation"
ONNX_PLUGIN_VERSION = "1"
_ONNX_INT32 = 6  # TensorProto.INT32

_FLOATS = (torch.float32, torch.float16)
_INDEX = (torch.int32, torch.int64)
_NAME = "s4d.ops.deformable_aggregation"

# torch.compiler.is_compiling where it exists (torch >= 2.3); dynamo folds it to True.
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


# ----------------------------------------------------------------- argument checks

def _check_args(features, spatial_shape, scale_start_index, sampling_location, weights):
    """Raises TypeError/ValueError naming the argument at fault. Metadata only,
    so it also runs on fake tensors under torch.compile. Every eager call pays for
    it, so right arguments pass one flat test; only a failed test runs the checks
    that find and name the fault. torch.compile traces those checks instead, once
    per compilation (the flat test reads tensor attributes dynamo may not model)."""
    if _is_compiling() or not _args_ok(features, spatial_shape, scale_start_index,
                                       sampling_location, weights):
        _explain_args(features, spatial_shape, scale_start_index, sampling_location, weights)


def _args_ok(f, ss, si, loc, w):
    """The rules of _explain_args in one expression: True means it would pass."""
    tensor = torch.Tensor
    if not (isinstance(f, tensor) and isinstance(ss, tensor) and isinstance(si, tensor)
            and isinstance(loc, tensor) and isinstance(w, tensor)):
        return False
    if f.dim() != 3 or ss.dim() != 3 or si.dim() != 2 or loc.dim() != 5 or w.dim() != 6:
        return False
    fs, ls, ws, sss = f.shape, loc.shape, w.shape, ss.shape
    dev = f.device
    groups = ws[5]
    return (f.dtype in _FLOATS and w.dtype in _FLOATS and loc.dtype == torch.float32
            and ss.dtype in _INDEX and si.dtype in _INDEX
            and (f.is_cpu or f.is_cuda) and loc.device == dev and w.device == dev
            and si.device == ss.device and (ss.is_cpu or ss.device == dev)
            and sss[2] == 2 and si.shape == sss[:2]
            and ls == (fs[0], ls[1], ls[2], sss[0], 2)
            and ws[:5] == (fs[0], ls[1], ls[2], sss[0], sss[1])
            and groups >= 1 and fs[2] % groups == 0
            and f.is_contiguous() and ss.is_contiguous() and si.is_contiguous()
            and loc.is_contiguous() and w.is_contiguous())


def _explain_args(features, spatial_shape, scale_start_index, sampling_location, weights):
    """Raises the error that names the first argument at fault; returns if there is none."""
    args = (("features", features), ("spatial_shape", spatial_shape),
            ("scale_start_index", scale_start_index), ("sampling_location", sampling_location),
            ("weights", weights))
    for name, t in args:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_NAME}: {name} must be a torch.Tensor, got {type(t).__name__}")

    def dtype_in(name, t, allowed):
        if t.dtype not in allowed:
            want = " or ".join(str(d).replace("torch.", "") for d in allowed)
            raise TypeError(f"{_NAME}: {name} must be {want}, got "
                            f"{str(t.dtype).replace('torch.', '')}")

    dtype_in("features", features, _FLOATS)
    dtype_in("weights", weights, _FLOATS)
    dtype_in("sampling_location", sampling_location, (torch.float32,))
    dtype_in("spatial_shape", spatial_shape, _INDEX)
    dtype_in("scale_start_index", scale_start_index, _INDEX)

    dev = features.device
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"{_NAME}: features must be on a CPU or CUDA device, got {dev}")
    for name, t in (("sampling_location", sampling_location), ("weights", weights)):
        if t.device != dev:
            raise ValueError(f"{_NAME}: {name} is on {t.device} but features is on {dev}")
    for name, t in (("spatial_shape", spatial_shape), ("scale_start_index", scale_start_index)):
        if t.device != dev and t.device.type != "cpu":
            raise ValueError(f"{_NAME}: {name} is on {t.device}; it must be on the CPU or on "
                             f"features' device {dev}")
    if spatial_shape.device != scale_start_index.device:
        raise ValueError(f"{_NAME}: spatial_shape is on {spatial_shape.device} but "
                         f"scale_start_index is on {scale_start_index.device}")

    ranks = (("features", features, 3, "[bs, F, C]"),
             ("spatial_shape", spatial_shape, 3, "[N, L, 2]"),
             ("scale_start_index", scale_start_index, 2, "[N, L]"),
             ("sampling_location", sampling_location, 5, "[bs, A, P, N, 2]"),
             ("weights", weights, 6, "[bs, A, P, N, L, G]"))
    for name, t, rank, layout in ranks:
        if t.dim() != rank:
            raise ValueError(f"{_NAME}: {name} must be {layout}, got shape {list(t.shape)}")

    bs, _, channels = features.shape
    cams, levels = spatial_shape.shape[0], spatial_shape.shape[1]
    anchors, points = sampling_location.shape[1], sampling_location.shape[2]
    groups = weights.shape[5]
    expect = (("spatial_shape", spatial_shape, [cams, levels, 2]),
              ("scale_start_index", scale_start_index, [cams, levels]),
              ("sampling_location", sampling_location, [bs, anchors, points, cams, 2]),
              ("weights", weights, [bs, anchors, points, cams, levels, groups]))
    for name, t, want in expect:
        if list(t.shape) != want:
            raise ValueError(f"{_NAME}: {name} must have shape {want} (from features "
                             f"{list(features.shape)}, spatial_shape {list(spatial_shape.shape)}"
                             f", sampling_location {list(sampling_location.shape)}), got "
                             f"{list(t.shape)}")
    if groups < 1 or channels % groups != 0:
        raise ValueError(f"{_NAME}: channels C={channels} (features) must be divisible by "
                         f"groups G={groups} (weights' last dimension)")
    for name, t in args:
        if not t.is_contiguous():
            raise ValueError(f"{_NAME}: {name} must be contiguous (call .contiguous() first)")


# Index tensors converted for a call: (weakref to the caller's tensor, its version, target
# device) -> the int32 copy on that device. Sparse4D passes the same two small tables on
# every call; converting them each time cost a host-to-device copy, which synchronises the
# stream, in the forward and again in the backward.
_INDEX_CACHE = {}
_INDEX_CACHE_SIZE = 16


def _cached_index(t, device):
    """The cached int32 copy of t on device, or None when there is none for t's version."""
    hit = _INDEX_CACHE.get((id(t), device))
    if hit is not None and hit[0]() is t and hit[1] == t._version:
        return hit[2]
    return None


def _convert_index(t, device):
    conv = t.to(torch.int32).contiguous().to(device)
    if len(_INDEX_CACHE) >= _INDEX_CACHE_SIZE:
        _INDEX_CACHE.pop(next(iter(_INDEX_CACHE)))
    _INDEX_CACHE[(id(t), device)] = (weakref.ref(t), t._version, conv)
    return conv


def _index_tensors(features, spatial_shape, scale_start_index):
    """int32 copies of the index tensors on features' device, converted once per tensor
    (and per in-place change of it): later calls with the same tensors reuse the copies.
    int32 tables on features' device are used as they are (_check_args made sure they are
    contiguous). The CPU kernels check the layout themselves; for CUDA it is checked here
    on host copies when the caller keeps them on the CPU, and by the kernels' row guard
    otherwise (a host check would synchronise the stream)."""
    dev = features.device
    ss = spatial_shape if spatial_shape.dtype == torch.int32 and spatial_shape.device == dev \
        else _cached_index(spatial_shape, dev)
    si = scale_start_index if scale_start_index.dtype == torch.int32 and \
        scale_start_index.device == dev else _cached_index(scale_start_index, dev)
    if ss is None or si is None:
        if features.is_cuda and spatial_shape.is_cpu:
            load_extension().da_check_indices(spatial_shape.to(torch.int32).contiguous(),
                                              scale_start_index.to(torch.int32).contiguous(),
                                              features.shape[1])
        if ss is None:
            ss = _convert_index(spatial_shape, dev)
        if si is None:
            si = _convert_index(scale_start_index, dev)
    return ss, si


# ----------------------------------------------------------------- ONNX (TorchScript exporter)

def _onnx_symbolic(g, features, spatial_shape, scale_start_index, sampling_location, weights,
                   deterministic=None):
    """One s4d::DeformableAggregation node; deterministic is a run-time choice, not exported."""
    def as_int32(v):
        if v.type().scalarType() == "Int":
            return v
        return g.op("Cast", v, to_i=_ONNX_INT32)

    out = g.op(f"{ONNX_DOMAIN}::{ONNX_OP_TYPE}", features, as_int32(spatial_shape),
               as_int32(scale_start_index), sampling_location, weights,
               plugin_version_s=ONNX_PLUGIN_VERSION)
    f_sizes = features.type().sizes()
    l_sizes = sampling_location.type().sizes()
    if f_sizes is None or l_sizes is None:
        out.setType(features.type())
        return out
    sizes = [f_sizes[0], l_sizes[1], f_sizes[2]]
    out.setType(features.type().with_sizes(sizes))
    # The TorchScript exporter's graph-level shape inference drops the static
    # shape set above on nodes of unknown domains (seen with torch 1.13), and
    # ONNX shape inference cannot see through the node either. A Reshape to
    # the constant output shape restores static shapes for everything
    # downstream; engines treat it as a no-op.
    shape = g.op("Constant", value_t=torch.tensor(sizes, dtype=torch.int64))
    fixed = g.op("Reshape", out, shape)
    fixed.setType(features.type().with_sizes(sizes))
    return fixed


# The symbolic is looked up by operator name, so it is registered without the
# extension. The exporter finds a symbolic registered at its base opset 9 from every
# opset it offers (7 and up); the node needs nothing newer than Cast and Reshape.
_SYMBOLIC_OPSET = 9
try:
    # The TorchScript exporter (torch 1.x, and torch.onnx.export(..., dynamo=False) on 2.x);
    # a torch without it must still load the op.
    torch.onnx.register_custom_op_symbolic("s4d::deformable_aggregation", _onnx_symbolic,
                                           _SYMBOLIC_OPSET)
except Exception as exc:  # pylint: disable=broad-except
    warnings.warn(f"{_NAME}: TorchScript ONNX symbolic not registered: {exc}")


# ----------------------------------------------------------------- the C++ operator

_OP = None  # torch.ops.s4d.deformable_aggregation.default once s4d._C is loaded


def _load_op():
    """Loads s4d._C, which registers the operator (raises ExtensionNotBuiltError)."""
    global _OP
    load_extension()
    _OP = torch.ops.s4d.deformable_aggregation.default
    return _OP


# Loaded now when it can be, so that torch.ops.s4d exists after `import s4d.ops` and a
# first call under torch.compile finds the operator without tracing an import.
try:
    _load_op()
except ExtensionNotBuiltError:
    pass


# ----------------------------------------------------------------- public entry point

def deformable_aggregation(features: torch.Tensor, spatial_shape: torch.Tensor,
                           scale_start_index: torch.Tensor, sampling_location: torch.Tensor,
                           weights: torch.Tensor, *,
                           deterministic: Optional[bool] = None) -> torch.Tensor:
    """Deformable feature aggregation of Sparse4D (see the module docstring).

    deterministic: on CUDA, pick the bitwise-reproducible kernels: the forward,
    and a backward whose grad_features has no float atomics (its other two
    gradients are reproducible either way); None follows
    torch.are_deterministic_algorithms_enabled(). The CPU kernels are always
    deterministic.
    """
    tracing = torch.jit.is_tracing()
    if tracing:
        # Under tracing the checks read sizes as traced values; they are static
        # facts of the export, not data-dependent control flow.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            _check_args(features, spatial_shape, scale_start_index, sampling_location, weights)
    else:
        _check_args(features, spatial_shape, scale_start_index, sampling_location, weights)
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    op = _OP if _OP is not None else _load_op()
    # Under torch.jit.trace the caller's tables enter the trace as they are, so the exported
    # graph holds them (the symbolic casts them to int32); the operator converts them itself.
    if _is_compiling():
        # The cache cannot be traced. Tables on features' device keep the fake tensors of
        # one call on one device; the operator converts int64 itself.
        spatial_shape = spatial_shape.to(features.device)
        scale_start_index = scale_start_index.to(features.device)
    elif not tracing:
        spatial_shape, scale_start_index = _index_tensors(features, spatial_shape,
                                                          scale_start_index)
    return op(features, spatial_shape, scale_start_index, sampling_location, weights,
              bool(deterministic))


# ----------------------------------------------------------------- ONNX (dynamo exporter)

def _onnx_schema():
    """The node's OpSchema, which onnxscript needs to emit an op of a custom
    domain (onnx >= 1.15 builds schemas from Python)."""
    import onnx  # pylint: disable=import-outside-toplevel

    param = onnx.defs.OpSchema.FormalParameter
    return onnx.defs.OpSchema(
        ONNX_OP_TYPE, ONNX_DOMAIN, 1,
        doc="Sparse4D deformable feature aggregation (docs/ops/pytorch.md)",
        inputs=[param("features", "T"), param("spatial_shape", "tensor(int32)"),
                param("scale_start_index", "tensor(int32)"),
                param("sampling_location", "tensor(float)"), param("weights", "W")],
        outputs=[param("output", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "features and output"),
                          ("W", ["tensor(float)", "tensor(float16)"], "weights")],
        attributes=[onnx.defs.OpSchema.Attribute(
            "plugin_version", onnx.defs.OpSchema.AttrType.STRING, "plugin version")])


def onnx_translation_table():
    """custom_translation_table for torch.onnx.export(..., dynamo=True) (torch >= 2.5,
    needs onnxscript and onnx >= 1.15): maps s4d::deformable_aggregation to the
    same s4d::DeformableAggregation node the TorchScript exporter emits."""
    if "custom_translation_table" not in inspect.signature(torch.onnx.export).parameters:
        raise RuntimeError(f"{_NAME}: the dynamo ONNX exporter with custom_translation_table "
                           f"needs torch >= 2.5; this is torch {torch.__version__}")
    da_op = _OP if _OP is not None else _load_op()
    import onnxscript  # pylint: disable=import-outside-toplevel
    from onnxscript import opset18 as op  # pylint: disable=import-outside-toplevel

    s4d_opset = onnxscript.values.Opset(ONNX_DOMAIN, 1)
    da_node = onnxscript.values.Op(s4d_opset, ONNX_OP_TYPE, _onnx_schema())

    def translate(features, spatial_shape, scale_start_index, sampling_location, weights,
                  deterministic=False):
        ss = op.Cast(spatial_shape, to=_ONNX_INT32)
        si = op.Cast(scale_start_index, to=_ONNX_INT32)
        return da_node(features, ss, si, sampling_location, weights,
                       plugin_version=ONNX_PLUGIN_VERSION)

    return {da_op: translate}
