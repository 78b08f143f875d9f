"""Which deformable aggregation the head calls.

"ext": s4d.ops.deformable_aggregation (the C/CUDA extension; exports as the
s4d::DeformableAggregation node). "reference": s4d.ops.deformable_aggregation_reference
(pure PyTorch, exports with standard ONNX ops only, for ONNX Runtime and for
machines without the extension).
"""
import torch

MODES = ("ext", "reference")


def get_aggregation(mode: str):
    if mode not in MODES:
        raise ValueError(f"aggregation '{mode}' unknown (expected one of {MODES})")
    try:
        from s4d import ops
    except ImportError:
        ops = None
    if ops is None:
        if mode == "ext":
            raise RuntimeError("aggregation 'ext' needs s4d.ops (build it with `make python`)")
        return _grid_sample_reference
    if mode == "ext":
        return ops.deformable_aggregation
    return ops.deformable_aggregation_reference


def aggregation_float64(features, spatial_shape, scale_start_index, sampling_location, weights):
    """Direct float64 evaluation of the op's definition; an independent check
    used by the tests (small sizes only: it materialises every corner)."""
    f = features.double()
    loc = sampling_location.double()
    wts = weights.double()
    bs, nrows, c = f.shape
    _, a, p, n, _ = loc.shape
    lv, g = wts.shape[4], wts.shape[5]
    out = torch.zeros(bs, a, c, dtype=torch.float64)
    x, y = loc[..., 0], loc[..., 1]
    valid = (x > 0) & (x < 1) & (y > 0) & (y < 1)  # NaN compares false: invalid
    for cam in range(n):
        for lev in range(lv):
            hh, ww = int(spatial_shape[cam, lev, 0]), int(spatial_shape[cam, lev, 1])
            start = int(scale_start_index[cam, lev])
            fmap = f[:, start:start + hh * ww].reshape(bs, hh, ww, c)
            px = torch.nan_to_num(x[..., cam]) * ww - 0.5
            py = torch.nan_to_num(y[..., cam]) * hh - 0.5
            x0, y0 = torch.floor(px), torch.floor(py)
            lx, ly = px - x0, py - y0
            val = torch.zeros(bs, a, p, c, dtype=torch.float64)
            for dy, dx, wgt in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx),
                                (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
                yy, xx = (y0 + dy).long(), (x0 + dx).long()
                inside = (yy >= 0) & (yy < hh) & (xx >= 0) & (xx < ww)
                yc, xc = yy.clamp(0, hh - 1), xx.clamp(0, ww - 1)
                bidx = torch.arange(bs).view(bs, 1, 1).expand_as(yc)
                v = fmap[bidx, yc, xc]  # [bs, a, p, c]
                val = val + v * (wgt * inside)[..., None]
            val = val * valid[..., cam, None]
            wl = wts[:, :, :, cam, lev, :].repeat_interleave(c // g, dim=-1)  # [bs,a,p,c]
            out = out + (val * wl).sum(dim=2)
    return out


def _grid_sample_reference(features, spatial_shape, scale_start_index, sampling_location, weights):
    # Used only where s4d.ops is absent. Static shapes: the map sizes are read
    # as Python ints so the traced graph has no shape arithmetic.
    import torch.nn.functional as F
    bs, _, c = features.shape
    _, a, p, n, _ = sampling_location.shape
    lv, g = weights.shape[4], weights.shape[5]
    x, y = sampling_location[..., 0], sampling_location[..., 1]
    valid = ((x > 0) & (x < 1) & (y > 0) & (y < 1)).to(features.dtype)
    grid_all = sampling_location * 2 - 1
    out = None
    for cam in range(n):
        grid = grid_all[:, :, :, cam]  # [bs, a, p, 2]
        for lev in range(lv):
            hh, ww = int(spatial_shape[cam, lev, 0]), int(spatial_shape[cam, lev, 1])
            start = int(scale_start_index[cam, lev])
            fmap = features[:, start:start + hh * ww].transpose(1, 2).reshape(bs, c, hh, ww)
            val = F.grid_sample(fmap, grid, mode="bilinear", padding_mode="zeros",
                                align_corners=False)  # [bs, c, a, p]
            wl = weights[:, :, :, cam, lev, :] * valid[:, :, :, cam, None]  # [bs, a, p, g]
            val = val.reshape(bs, g, c // g, a, p)
            term = (val * wl.permute(0, 3, 1, 2)[:, :, None]).sum(dim=-1)  # [bs, g, c/g, a]
            out = term if out is None else out + term
    return out.reshape(bs, c, a).transpose(1, 2)
