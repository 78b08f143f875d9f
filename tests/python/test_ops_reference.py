"""The pure-PyTorch reference against the float64 loop oracle; needs no extension."""
import io

import onnx
import pytest
import torch
import torch.nn.functional as F

from conftest import (edge_locations, naive_deformable_aggregation, random_inputs,
                      realistic_inputs, rel_l2)
from s4d.ops import deformable_aggregation_reference, valid_mask

MIXED = [[(5, 7), (3, 4)], [(6, 5), (2, 3)], [(4, 9), (2, 2)]]  # cameras differ


@pytest.mark.parametrize("groups,channels,bs", [(1, 8, 1), (4, 16, 2), (8, 32, 1)])
def test_reference_matches_loop_oracle(groups, channels, bs):
    f, ss, si, loc, w = random_inputs(MIXED, bs=bs, channels=channels, groups=groups, seed=groups)
    out = deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())
    want = naive_deformable_aggregation(f, ss, si, loc, w)
    assert out.shape == (bs, loc.shape[1], channels)
    assert want.abs().max() > 0.1
    assert torch.allclose(out, want, rtol=1e-12, atol=1e-12)


def test_reference_edge_locations_and_nan():
    f, ss, si, _, w = random_inputs(MIXED, bs=2, channels=8, groups=2, anchors=6, points=4)
    loc = edge_locations(MIXED, 2, 6, 4)
    assert torch.isnan(loc).any() and torch.isinf(loc).any()
    out = deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())
    want = naive_deformable_aggregation(f, ss, si, loc, w)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, want, rtol=1e-12, atol=1e-12)


def test_valid_mask_open_interval_and_nan():
    loc = torch.tensor([[0.0, 0.5], [1.0, 0.5], [0.5, 0.0], [0.5, 1.0], [1e-7, 0.5],
                        [float("nan"), 0.5], [0.5, float("inf")], [0.3, 0.7]])
    assert valid_mask(loc).tolist() == [False, False, False, False, True, False, False, True]


def test_reference_float32_close_to_float64():
    f, ss, si, loc, w = realistic_inputs(anchors=32)
    out32 = deformable_aggregation_reference(f, ss, si, loc, w)
    out64 = deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())
    assert out32.dtype == torch.float32
    assert rel_l2(out32, out64) < 1e-6


def test_reference_gradcheck_double():
    # Locations kept inside and away from the borders: the function is not
    # differentiable at grid lines or at the open-interval edges.
    f, ss, si, loc, w = random_inputs([[(4, 5), (2, 3)], [(3, 4), (2, 2)]], bs=1, channels=4,
                                      groups=2, anchors=2, points=2, loc_low=0.13,
                                      loc_high=0.87, dtype=torch.float64)
    f.requires_grad_(True)
    loc.requires_grad_(True)
    w.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: deformable_aggregation_reference(a, ss, si, b, c), (f, loc, w),
        eps=1e-6, atol=1e-7, rtol=1e-5)


def test_reference_invalid_pairs_get_zero_gradient():
    f, ss, si, loc, w = random_inputs(MIXED, bs=1, channels=4, groups=1, anchors=3, points=2,
                                      dtype=torch.float64)
    loc[0, 0, 0, 0] = torch.tensor([1.2, 0.5])
    loc[0, 1, 1, 2] = torch.tensor([float("nan"), 0.5])
    loc.requires_grad_(True)
    w.requires_grad_(True)
    deformable_aggregation_reference(f, ss, si, loc, w).sum().backward()
    for a, p, n in ((0, 0, 0), (1, 1, 2)):
        assert torch.all(loc.grad[0, a, p, n] == 0)
        assert torch.all(w.grad[0, a, p, n] == 0)
    assert torch.isfinite(loc.grad).all() and torch.isfinite(w.grad).all()


def _upstream_style_fallback(features, ss, si, loc, w):
    """grid_sample without the valid mask, as upstream's pure-PyTorch path."""
    bs, _, channels = features.shape
    groups = w.shape[-1]
    out = features.new_zeros(bs, loc.shape[1], channels)
    for n in range(ss.shape[0]):
        for lv in range(ss.shape[1]):
            h, wd = ss[n, lv].tolist()
            s = int(si[n, lv])
            fmap = features[:, s:s + h * wd].reshape(bs, h, wd, channels).permute(0, 3, 1, 2)
            smp = F.grid_sample(fmap, loc[:, :, :, n] * 2 - 1, align_corners=False)
            smp = smp.reshape(bs, groups, channels // groups, *smp.shape[2:])
            wl = w[:, :, :, n, lv].permute(0, 3, 1, 2).unsqueeze(2)
            out += (smp * wl).sum(-1).reshape(bs, channels, -1).permute(0, 2, 1)
    return out


def test_reference_differs_from_upstream_fallback_at_borders():
    """Documents (docs/ops/pytorch.md) the border blend of upstream's fallback."""
    f, ss, si, loc, w = realistic_inputs(anchors=256, seed=3)
    ours = deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())
    theirs = _upstream_style_fallback(f.double(), ss, si, loc.double(), w.double())
    diff = (ours - theirs).abs().max().item()
    assert diff > 1e-3, diff  # the unmasked blend leaks border pixels in
    # Away from the borders (every location well inside or far outside) they agree.
    h_min = 8.0
    near = ((loc > -1.0 / h_min) & (loc < 0)) | ((loc > 1) & (loc < 1 + 1.0 / h_min))
    per_anchor_near = near.reshape(1, loc.shape[1], -1).any(-1)
    far = ~per_anchor_near[0]
    assert far.any()
    assert torch.allclose(ours[0, far], theirs[0, far], atol=1e-12)


class _RefModule(torch.nn.Module):
    def __init__(self, ss, si):
        super().__init__()
        self.register_buffer("ss", ss)
        self.register_buffer("si", si)

    def forward(self, features, loc, weights):
        return deformable_aggregation_reference(features, self.ss, self.si, loc, weights) * 2.0


def test_reference_exports_with_standard_onnx_ops():
    f, ss, si, loc, w = random_inputs(MIXED, bs=1, channels=8, groups=2, anchors=4, points=3)
    buf = io.BytesIO()
    torch.onnx.export(_RefModule(ss, si), (f, loc, w), buf, opset_version=16,
                      input_names=["features", "loc", "weights"], output_names=["out"])
    model = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(model)
    ops = {n.op_type for n in model.graph.node}
    domains = {n.domain for n in model.graph.node}
    assert "GridSample" in ops
    assert domains <= {"", "ai.onnx"}
    inferred = onnx.shape_inference.infer_shapes(model)
    dims = [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim]
    assert dims == [1, 4, 8]
