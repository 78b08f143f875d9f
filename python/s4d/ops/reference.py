"""Pure-PyTorch deformable aggregation: the same function as the C/CUDA op.

Used as the test oracle (it runs in float64 and is differentiable by
autograd) and as the export path for runtimes without the s4d plugin: it
traces to standard ONNX ops only (Slice, Reshape, Transpose, GridSample,
comparisons, Where, Mul, ReduceSum), so it needs opset 16 or newer for
GridSample.

The map layout (spatial_shape, scale_start_index) is read to Python ints:
under tracing it becomes constants of the graph, which is what keeps the
exported shapes static.
"""
import warnings
from typing import List, Tuple

import torch
import torch.nn.functional as F

__all__ = ["deformable_aggregation_reference", "valid_mask"]


def valid_mask(sampling_location: torch.Tensor) -> torch.Tensor:
    """True where a (point, camera) pair is sampled: 0 < x < 1 and 0 < y < 1.

    Every comparison with NaN is false, so NaN locations are invalid, and
    infinities fail the open interval too.
    """
    x = sampling_location[..., 0]
    y = sampling_location[..., 1]
    return (x > 0) & (x < 1) & (y > 0) & (y < 1)


def _layout(spatial_shape: torch.Tensor, scale_start_index: torch.Tensor
            ) -> Tuple[List[List[Tuple[int, int]]], List[List[int]]]:
    shapes = [[(int(h), int(w)) for h, w in cam] for cam in spatial_shape.tolist()]
    starts = [[int(s) for s in cam] for cam in scale_start_index.tolist()]
    return shapes, starts


def deformable_aggregation_reference(features: torch.Tensor, spatial_shape: torch.Tensor,
                                     scale_start_index: torch.Tensor,
                                     sampling_location: torch.Tensor,
                                     weights: torch.Tensor) -> torch.Tensor:
    """out[b, a, c] = sum over p, n, l of valid * w[b,a,p,n,l,c//(C/G)] * bilinear(map n,l).

    Shapes as s4d.ops.deformable_aggregation. Computes in float64 when any
    float input is float64, else in float32; returns features.dtype.
    """
    if features.dim() != 3 or sampling_location.dim() != 5 or weights.dim() != 6:
        raise ValueError("deformable_aggregation_reference: expected features [bs, F, C], "
                         "sampling_location [bs, A, P, N, 2], weights [bs, A, P, N, L, G]; got "
                         f"{list(features.shape)}, {list(sampling_location.shape)}, "
                         f"{list(weights.shape)}")
    bs, _, channels = features.shape
    _, anchors, points, cams, _ = sampling_location.shape
    levels, groups = weights.shape[4], weights.shape[5]
    # Under tracing, sizes and the map layout become constants of the graph on
    # purpose (static shapes), so the tracer's warnings about it are noise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        if channels % groups != 0:
            raise ValueError(f"deformable_aggregation_reference: channels {channels} are not "
                             f"divisible by groups {groups}")
        shapes, starts = _layout(spatial_shape, scale_start_index)
        bs, anchors, points, cams = int(bs), int(anchors), int(points), int(cams)
        levels, groups, channels = int(levels), int(groups), int(channels)

    wide = torch.float64 in (features.dtype, sampling_location.dtype, weights.dtype)
    ctype = torch.float64 if wide else torch.float32
    feats = features.to(ctype)
    loc = sampling_location.to(ctype)
    w = weights.to(ctype)

    valid = valid_mask(loc)  # [bs, A, P, N]
    # Invalid pairs are masked out below; giving them a harmless in-image
    # location keeps NaN/inf out of grid_sample and out of the gradients.
    safe_loc = torch.where(valid.unsqueeze(-1), loc, torch.full_like(loc, 0.5))
    grid = safe_loc * 2 - 1  # align_corners=False: pixel centres at (i + 0.5) / size

    per_group = channels // groups
    out = None
    for n in range(cams):
        grid_n = grid[:, :, :, n, :]  # [bs, A, P, 2]
        valid_n = valid[:, :, :, n].unsqueeze(1).unsqueeze(1)  # [bs, 1, 1, A, P]
        for lv in range(levels):
            h, w_ = shapes[n][lv]
            start = starts[n][lv]
            fmap = feats[:, start:start + h * w_, :].reshape(bs, h, w_, channels)
            fmap = fmap.permute(0, 3, 1, 2)  # [bs, C, H, W]
            sampled = F.grid_sample(fmap, grid_n, mode="bilinear", padding_mode="zeros",
                                    align_corners=False)  # [bs, C, A, P]
            sampled = sampled.reshape(bs, groups, per_group, anchors, points)
            wl = w[:, :, :, n, lv, :].permute(0, 3, 1, 2).unsqueeze(2)  # [bs, G, 1, A, P]
            term = torch.where(valid_n, sampled * wl, torch.zeros_like(sampled))
            term = term.sum(dim=-1)  # [bs, G, Cg, A]
            out = term if out is None else out + term
    if out is None:
        out = feats.new_zeros(bs, groups, per_group, anchors)
    out = out.reshape(bs, channels, anchors).permute(0, 2, 1)
    return out.to(features.dtype).contiguous()
