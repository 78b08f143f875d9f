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
    from s4d import ops
    if mode == "ext":
        if not ops.extension_available():
            raise RuntimeError("aggregation 'ext' needs the s4d extension (build it with "
                               "`make python`), or use aggregation 'reference'")
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

