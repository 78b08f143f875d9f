"""Every bad argument to s4d.ops.deformable_aggregation raises a clear
TypeError/ValueError naming the argument (never a crash)."""
import pytest
import torch

from conftest import random_inputs
from s4d.ops import deformable_aggregation

SHAPES = [[(5, 7), (3, 4)], [(6, 5), (2, 3)]]
NAMES = ("features", "spatial_shape", "scale_start_index", "sampling_location", "weights")


def _args():
    return list(random_inputs(SHAPES, bs=2, channels=8, groups=2, anchors=3, points=2))


def _with(index, value):
    args = _args()
    args[index] = value(args[index]) if callable(value) else value
    return args


def _raises(exc, match, args):
    with pytest.raises(exc, match=match):
        deformable_aggregation(*args)


@pytest.mark.parametrize("index", range(5))
def test_not_a_tensor(ext, index):
    _raises(TypeError, NAMES[index], _with(index, lambda t: t.tolist()))


@pytest.mark.parametrize("index,dtype", [
    (0, torch.float64), (0, torch.int32), (0, torch.bfloat16),
    (1, torch.float32), (1, torch.int16),
    (2, torch.float32), (2, torch.uint8),
    (3, torch.float16), (3, torch.float64),
    (4, torch.float64), (4, torch.int64)])
def test_wrong_dtype(ext, index, dtype):
    _raises(TypeError, NAMES[index], _with(index, lambda t: t.to(dtype)))


@pytest.mark.parametrize("index", range(5))
def test_wrong_rank(ext, index):
    _raises(ValueError, NAMES[index], _with(index, lambda t: t.unsqueeze(0)))


@pytest.mark.parametrize("index,make", [
    (1, lambda t: t[:1].contiguous()),                        # fewer cameras than weights
    (1, lambda t: torch.cat([t, t[..., :1]], -1)),            # [N, L, 3]
    (2, lambda t: t[:, :1].contiguous()),                     # fewer levels
    (3, lambda t: t[:1].contiguous()),                        # batch mismatch
    (3, lambda t: t[:, :2].contiguous()),                     # anchors mismatch with weights
    (4, lambda t: t[:, :, :1].contiguous()),                  # points mismatch
    (4, lambda t: t[..., :1, :].contiguous())])               # levels mismatch
def test_inconsistent_shapes(ext, index, make):
    _raises(ValueError, NAMES[index], _with(index, make))


def test_channels_not_divisible_by_groups(ext):
    args = list(random_inputs(SHAPES, channels=8, groups=3))
    _raises(ValueError, "divisible by groups", args)


@pytest.mark.parametrize("index", [0, 3, 4])
def test_non_contiguous(ext, index):
    def strided(t):
        wide = torch.cat([t, t], dim=-1)
        return wide[..., : t.shape[-1]]
    _raises(ValueError, f"{NAMES[index]} must be contiguous", _with(index, strided))


@pytest.mark.parametrize("index", [1, 2])
def test_non_contiguous_index(ext, index):
    def strided(t):
        return torch.stack([t, t], dim=-1)[..., 0]
    _raises(ValueError, f"{NAMES[index]} must be contiguous", _with(index, strided))


@pytest.mark.parametrize("index", [3, 4])
def test_wrong_device(ext, index):
    _raises(ValueError, f"{NAMES[index]} is on meta", _with(index, lambda t: t.to("meta")))


def test_index_device_mismatch(ext):
    _raises(ValueError, "spatial_shape is on meta", _with(1, lambda t: t.to("meta")))


def test_map_outside_feature_rows(ext):
    args = _args()
    args[2] = args[2].clone()
    args[2][1, 1] = args[0].shape[1] - 2  # the last map runs past F
    _raises(ValueError, "scale_start_index|map|rows", args)


def test_non_positive_map_size(ext):
    args = _args()
    args[1] = args[1].clone()
    args[1][0, 1, 0] = 0
    _raises(ValueError, "spatial_shape|H|W", args)


def test_negative_start(ext):
    args = _args()
    args[2] = args[2].clone()
    args[2][0, 0] = -1
    _raises(ValueError, "scale_start_index|map|rows", args)


def test_extension_binding_checks_shapes_directly(ext):
    # Callers that bypass the Python checks still get an error, not a crash.
    f, ss, si, loc, w = _args()
    with pytest.raises(ValueError, match="weights"):
        ext.da_forward(f, ss, si, loc, w[:, :1].contiguous(), False)
    with pytest.raises(TypeError, match="spatial_shape"):
        ext.da_forward(f, ss.long(), si, loc, w, False)
    with pytest.raises(ValueError, match="grad_output"):
        ext.da_backward(f, ss, si, loc, w, torch.zeros(1, 1, 1), True, True, True)
