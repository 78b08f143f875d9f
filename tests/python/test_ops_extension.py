"""s4d.ops.deformable_aggregation (the C op library through s4d._C) against
the float64 reference: forward, backward, fp16, index dtypes, determinism."""
import pytest
import torch

from conftest import (edge_locations, naive_deformable_aggregation, random_inputs,
                      realistic_inputs, rel_l2)
from s4d.ops import deformable_aggregation, deformable_aggregation_reference

MIXED = [[(5, 7), (3, 4)], [(6, 5), (2, 3)], [(4, 9), (2, 2)]]
CASES = [  # (level shapes, bs, channels, groups, anchors, points)
    ([[(6, 8)]], 1, 32, 1, 7, 2),
    (MIXED, 2, 16, 4, 9, 3),
    ([[(9, 11), (5, 6), (3, 3)]] * 2, 3, 64, 8, 5, 4),
    ([[(4, 4), (2, 2)]] * 4, 1, 256, 8, 3, 13),
]


def _ref64(f, ss, si, loc, w):
    return deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())


@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_matches_reference(ext, case):
    shapes, bs, channels, groups, anchors, points = CASES[case]
    f, ss, si, loc, w = random_inputs(shapes, bs, channels, groups, anchors, points, seed=case)
    out = deformable_aggregation(f, ss, si, loc, w)
    want = _ref64(f, ss, si, loc, w)
    assert out.dtype == torch.float32 and out.shape == want.shape
    assert want.abs().max() > 0.1
    assert rel_l2(out, want) < 1e-6


def test_forward_edge_locations_nan_inf(ext):
    f, ss, si, _, w = random_inputs(MIXED, bs=2, channels=8, groups=2, anchors=6, points=4)
    loc = edge_locations(MIXED, 2, 6, 4)
    out = deformable_aggregation(f, ss, si, loc, w)
    want = naive_deformable_aggregation(f, ss, si, loc, w)
    assert torch.isfinite(out).all()
    assert torch.allclose(out.double(), want, rtol=1e-5, atol=1e-6)


def test_forward_realistic_rig(ext):
    f, ss, si, loc, w = realistic_inputs(anchors=128, channels=64, groups=8)
    assert rel_l2(deformable_aggregation(f, ss, si, loc, w), _ref64(f, ss, si, loc, w)) < 1e-6


def test_int64_and_int32_indices_agree(ext):
    f, ss, si, loc, w = random_inputs(MIXED, channels=8, groups=2)
    a = deformable_aggregation(f, ss, si, loc, w)
    b = deformable_aggregation(f, ss.long(), si.long(), loc, w)
    assert torch.equal(a, b)


def test_converted_indices_follow_in_place_changes(ext):
    """int64 index tables are converted once and reused; an in-place change of a table
    (a new version of the tensor) must be converted again."""
    f, ss, si, loc, w = random_inputs(MIXED, channels=8, groups=2)
    ss64, si64 = ss.long(), si.long()
    first = deformable_aggregation(f, ss64, si64, loc, w)
    assert torch.equal(first, deformable_aggregation(f, ss64, si64, loc, w))
    # Camera 0's maps swap places with camera 1's rows: same shapes, other features.
    moved = si.clone()
    moved[0], moved[1] = si[1].clone(), si[0].clone()
    ss2 = ss.clone()
    ss2[0], ss2[1] = ss[1].clone(), ss[0].clone()
    ss64.copy_(ss2)
    si64.copy_(moved)
    got = deformable_aggregation(f, ss64, si64, loc, w)
    assert torch.equal(got, deformable_aggregation(f, ss2, moved, loc, w))
    assert not torch.equal(got, first)


def test_cpu_deterministic_across_thread_counts(ext):
    f, ss, si, loc, w = realistic_inputs(anchors=96)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = deformable_aggregation(f, ss, si, loc, w)
        torch.set_num_threads(max(2, threads))
        many = deformable_aggregation(f, ss, si, loc, w)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many)


def test_fp16_features_and_weights(ext):
    f, ss, si, loc, w = realistic_inputs(anchors=64, channels=32)
    fh, wh = f.half(), w.half()
    out = deformable_aggregation(fh, ss, si, loc, wh)
    assert out.dtype == torch.float16
    # Same inputs (fp16-rounded) in float64: only the output rounding differs.
    want = _ref64(fh, ss, si, loc, wh)
    assert rel_l2(out, want) < 2e-3
    mixed = deformable_aggregation(fh, ss, si, loc, w)  # fp16 features, fp32 weights
    assert mixed.dtype == torch.float16
    assert rel_l2(mixed, _ref64(fh, ss, si, loc, w)) < 2e-3


@pytest.mark.parametrize("case", range(3))
def test_backward_matches_reference_autograd(ext, case):
    shapes, bs, channels, groups, anchors, points = CASES[case]
    f, ss, si, loc, w = random_inputs(shapes, bs, channels, groups, anchors, points, seed=10 + case)
    grad = torch.randn(bs, anchors, channels, generator=torch.Generator().manual_seed(case))
    ins = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    deformable_aggregation(ins[0], ss, si, ins[1], ins[2]).backward(grad)
    ref = [t.double().requires_grad_(True) for t in (f, loc, w)]
    deformable_aggregation_reference(ref[0], ss, si, ref[1], ref[2]).backward(grad.double())
    for name, mine, theirs in zip(("features", "sampling_location", "weights"), ins, ref):
        assert mine.grad is not None and mine.grad.dtype == torch.float32, name
        assert theirs.grad.abs().max() > 0, name
        assert rel_l2(mine.grad, theirs.grad) < 1e-5, name


def test_backward_invalid_pairs_get_zero_gradient(ext):
    f, ss, si, loc, w = random_inputs(MIXED, bs=1, channels=8, groups=2, anchors=3, points=2)
    loc[0, 0, 0, 0] = torch.tensor([1.0, 0.5])
    loc[0, 1, 1, 2] = torch.tensor([float("nan"), 0.5])
    loc.requires_grad_(True)
    w.requires_grad_(True)
    deformable_aggregation(f, ss, si, loc, w).sum().backward()
    for a, p, n in ((0, 0, 0), (1, 1, 2)):
        assert torch.all(loc.grad[0, a, p, n] == 0) and torch.all(w.grad[0, a, p, n] == 0)
    assert torch.isfinite(loc.grad).all()


def test_backward_only_requested_inputs(ext):
    f, ss, si, loc, w = random_inputs(MIXED, channels=8, groups=2)
    w.requires_grad_(True)
    deformable_aggregation(f, ss, si, loc, w).sum().backward()
    assert f.grad is None and loc.grad is None and w.grad is not None
    ref = w.detach().double().requires_grad_(True)
    deformable_aggregation_reference(f.double(), ss, si, loc.double(), ref).sum().backward()
    assert rel_l2(w.grad, ref.grad) < 1e-5


def test_backward_fp16(ext):
    f, ss, si, loc, w = realistic_inputs(anchors=32, channels=32)
    fh = f.half().requires_grad_(True)
    wh = w.half().requires_grad_(True)
    locg = loc.clone().requires_grad_(True)
    grad = torch.randn(1, 32, 32, generator=torch.Generator().manual_seed(1))
    deformable_aggregation(fh, ss, si, locg, wh).backward(grad.half())
    assert fh.grad.dtype == torch.float16 and wh.grad.dtype == torch.float16
    assert locg.grad.dtype == torch.float32
    ref = [t.detach().double().requires_grad_(True) for t in (fh, locg, wh)]
    deformable_aggregation_reference(ref[0], ss, si, ref[1], ref[2]).backward(
        grad.half().double())
    assert rel_l2(fh.grad, ref[0].grad) < 2e-3
    assert rel_l2(wh.grad, ref[2].grad) < 2e-3
    assert rel_l2(locg.grad, ref[1].grad) < 1e-2


@pytest.mark.filterwarnings("ignore:Input #:UserWarning")
def test_gradcheck_float32(ext):
    # The library computes in float32, so finite differences use a large step;
    # locations stay away from the open-interval borders.
    f, ss, si, loc, w = random_inputs([[(4, 5), (2, 3)], [(3, 4), (2, 2)]], bs=1, channels=4,
                                      groups=2, anchors=2, points=2, loc_low=0.13,
                                      loc_high=0.87, seed=3)
    f.requires_grad_(True)
    w.requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda a, c: deformable_aggregation(a, ss, si, loc, c), (f, w), eps=1e-2, atol=2e-3,
        rtol=1e-2)


@pytest.mark.parametrize("sizes", [dict(bs=0), dict(anchors=0), dict(points=0),
                                   dict(channels=0, groups=1)])
def test_degenerate_sizes(ext, sizes):
    args = {**dict(bs=2, channels=8, groups=2, anchors=4, points=3), **sizes}
    f, ss, si, loc, w = random_inputs(MIXED, **args)
    for t in (f, loc, w):
        t.requires_grad_(True)
    out = deformable_aggregation(f, ss, si, loc, w)
    assert list(out.shape) == [args["bs"], args["anchors"], args["channels"]]
    assert torch.all(out == 0)  # nothing to sum: zeros, never stale memory
    out.sum().backward()
    for t in (f, loc, w):
        assert t.grad.shape == t.shape and torch.all(t.grad == 0)
