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

Autograd: gradients for features, sampling_location and weights come from
the library's backward (not differentiable twice). Export: one ONNX node
s4d::DeformableAggregation with attribute plugin_version="1".
"""
import warnings
import weakref
from typing import Optional, Tuple

import torch

from ._extension import load_extension

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


# ----------------------------------------------------------------- argument checks

def _check_args(features, spatial_shape, scale_start_index, sampling_location, weights):
    """Raises TypeError/ValueError naming the argument at fault. Metadata only,
    so it also runs on fake tensors under torch.compile."""
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


def _converted_index(t, device):
    if t.dtype == torch.int32 and t.device == device and t.is_contiguous():
        return t, False
    key = (id(t), device)
    hit = _INDEX_CACHE.get(key)
    if hit is not None and hit[0]() is t and hit[1] == t._version:
        return hit[2], False
    conv = t.to(torch.int32).contiguous()
    moved = conv.device != device
    if moved:
        conv = conv.to(device)
    if len(_INDEX_CACHE) >= _INDEX_CACHE_SIZE:
        _INDEX_CACHE.pop(next(iter(_INDEX_CACHE)))
    _INDEX_CACHE[key] = (weakref.ref(t), t._version, conv)
    return conv, moved


def _index_tensors(features, spatial_shape, scale_start_index):
    """int32 copies of the index tensors on features' device, converted once per tensor
    (and per in-place change of it): later calls with the same tensors reuse the copies.
    The CPU kernels check the layout themselves; for CUDA it is checked here on host copies
    when the caller keeps them on the CPU, and by the kernels' row guard otherwise (a host
    check would synchronise the stream)."""
    dev = features.device
    if features.is_cuda and spatial_shape.device.type == "cpu":
        key_ss, key_si = (id(spatial_shape), dev), (id(scale_start_index), dev)
        fresh = any(_INDEX_CACHE.get(k) is None or _INDEX_CACHE[k][0]() is not t
                    or _INDEX_CACHE[k][1] != t._version
                    for k, t in ((key_ss, spatial_shape), (key_si, scale_start_index)))
        if fresh:
            load_extension().da_check_indices(spatial_shape.to(torch.int32).contiguous(),
                                              scale_start_index.to(torch.int32).contiguous(),
                                              features.shape[1])
    ss, _ = _converted_index(spatial_shape, dev)
    si, _ = _converted_index(scale_start_index, dev)
    return ss, si


def _forward_impl(features, spatial_shape, scale_start_index, sampling_location, weights,
                  deterministic):
    ext = load_extension()
    ss, si = _index_tensors(features, spatial_shape, scale_start_index)
    return ext.da_forward(features, ss, si, sampling_location, weights, deterministic)


def _backward_impl(features, spatial_shape, scale_start_index, sampling_location, weights,
                   grad_output, need_f, need_loc, need_w, deterministic=False):
    ext = load_extension()
    ss, si = _index_tensors(features, spatial_shape, scale_start_index)
    grad_output = grad_output.to(features.dtype).contiguous()
    return ext.da_backward(features, ss, si, sampling_location, weights, grad_output,
                           need_f, need_loc, need_w, deterministic)


# ----------------------------------------------------------------- ONNX (TorchScript exporter)

def _onnx_node(g, features, spatial_shape, scale_start_index, sampling_location, weights):
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


def _onnx_symbolic(g, features, spatial_shape, scale_start_index, sampling_location, weights,
                   deterministic=None):
    with warnings.catch_warnings():
        # torch 1.13 hands autograd.Function symbolics a raw Graph whose g.op
        # it marks deprecated; it is the documented way on that release.
        warnings.simplefilter("ignore", FutureWarning)
        return _onnx_node(g, features, spatial_shape, scale_start_index, sampling_location,
                          weights)


# ----------------------------------------------------------------- autograd.Function (torch < 2.4)

class _DeformableAggregationFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, features, spatial_shape, scale_start_index, sampling_location, weights,
                deterministic):
        ctx.save_for_backward(features, spatial_shape, scale_start_index, sampling_location,
                              weights)
        ctx.deterministic = bool(deterministic)
        return _forward_impl(features, spatial_shape, scale_start_index, sampling_location,
                             weights, deterministic)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        features, ss, si, loc, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        gf, gl, gw = _backward_impl(features, ss, si, loc, w, grad_output,
                                    bool(need[0]), bool(need[3]), bool(need[4]),
                                    ctx.deterministic)
        return gf, None, None, gl, gw, None

    symbolic = staticmethod(_onnx_symbolic)


# ----------------------------------------------------------------- torch.library (torch >= 2.4)

_LIBRARY_OP = None


def _register_library_op():
    """s4d::deformable_aggregation as a torch.library custom op with a fake
    kernel and autograd, so torch.compile and torch.export keep it as one
    opaque node."""
    from torch import Tensor

    @torch.library.custom_op("s4d::deformable_aggregation", mutates_args=())
    def da_op(features: Tensor, spatial_shape: Tensor, scale_start_index: Tensor,
              sampling_location: Tensor, weights: Tensor, deterministic: bool) -> Tensor:
        return _forward_impl(features, spatial_shape, scale_start_index, sampling_location,
                             weights, deterministic)

    @da_op.register_fake
    def _(features, spatial_shape, scale_start_index, sampling_location, weights,
          deterministic):
        return features.new_empty((features.shape[0], sampling_location.shape[1],
                                   features.shape[2]))

    @torch.library.custom_op("s4d::deformable_aggregation_backward", mutates_args=())
    def da_backward_op(features: Tensor, spatial_shape: Tensor, scale_start_index: Tensor,
                       sampling_location: Tensor, weights: Tensor, grad_output: Tensor,
                       need_features: bool, need_location: bool, need_weights: bool,
                       deterministic: bool) -> Tuple[Tensor, Tensor, Tensor]:
        grads = _backward_impl(features, spatial_shape, scale_start_index, sampling_location,
                               weights, grad_output, need_features, need_location,
                               need_weights, deterministic)
        # Custom ops return tensors only: an empty tensor stands for "not computed".
        return tuple(g if g is not None else features.new_empty((0,)) for g in grads)

    @da_backward_op.register_fake
    def _(features, spatial_shape, scale_start_index, sampling_location, weights, grad_output,
          need_features, need_location, need_weights, deterministic):
        return (torch.empty_like(features) if need_features else features.new_empty((0,)),
                torch.empty_like(sampling_location) if need_location
                else features.new_empty((0,)),
                torch.empty_like(weights) if need_weights else features.new_empty((0,)))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:5])
        ctx.deterministic = bool(inputs[5])

    def backward(ctx, grad_output):
        features, ss, si, loc, w = ctx.saved_tensors
        need = ctx.needs_input_grad
        gf, gl, gw = da_backward_op(features, ss, si, loc, w, grad_output.contiguous(),
                                    bool(need[0]), bool(need[3]), bool(need[4]),
                                    ctx.deterministic)
        return (gf if need[0] else None, None, None, gl if need[3] else None,
                gw if need[4] else None, None)

    da_op.register_autograd(backward, setup_context=setup_context)
    try:
        # The TorchScript exporter (torch.onnx.export(..., dynamo=False)); newer
        # torch releases may drop it, which must not break the op itself.
        torch.onnx.register_custom_op_symbolic("s4d::deformable_aggregation", _onnx_symbolic, 16)
    except Exception as exc:  # pylint: disable=broad-except
        warnings.warn(f"{_NAME}: TorchScript ONNX symbolic not registered: {exc}")
    return da_op


def _torch_version():
    parts = []
    for piece in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


if _torch_version() >= (2, 4) and hasattr(torch.library, "custom_op"):
    _LIBRARY_OP = _register_library_op()


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
    if torch.jit.is_tracing():
        # Under tracing the checks read sizes as traced values; they are static
        # facts of the export, not data-dependent control flow.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            _check_args(features, spatial_shape, scale_start_index, sampling_location, weights)
    else:
        _check_args(features, spatial_shape, scale_start_index, sampling_location, weights)
    if deterministic is None:
        deterministic = torch.are_deterministic_algorithms_enabled()
    if _LIBRARY_OP is not None:
        return _LIBRARY_OP(features, spatial_shape, scale_start_index, sampling_location,
                           weights, bool(deterministic))
    return _DeformableAggregationFunction.apply(features, spatial_shape, scale_start_index,
                                                sampling_location, weights, bool(deterministic))


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
    if _LIBRARY_OP is None:
        raise RuntimeError(f"{_NAME}: the dynamo ONNX exporter needs torch >= 2.4 "
                           f"(torch.library custom ops); this is torch {torch.__version__}")
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

    return {torch.ops.s4d.deformable_aggregation.default: translate}
