"""Inputs for deformable aggregation: map layouts and a realistic workload.

realistic_locations projects anchor keypoints through a nuScenes-like
6-camera rig (1600x900 images resized by 0.44, top 140 rows cropped to
704x256): about 17% of (point, camera) pairs land inside an image, most
points are seen by one camera, a few by two or none. Used by the tests, the
example and anyone who needs non-trivial inputs (never all zeros).
"""
import math

import numpy as np
import torch

__all__ = ["make_layout", "realistic_locations", "realistic_inputs"]


def make_layout(level_shapes):
    """level_shapes: per camera a list of (H, W). Returns spatial_shape [N, L, 2],
    scale_start_index [N, L] (int32) and F."""
    ss = torch.tensor(level_shapes, dtype=torch.int32)
    sizes = (ss[..., 0] * ss[..., 1]).reshape(-1)
    starts = torch.cumsum(sizes, 0) - sizes
    return ss, starts.reshape(ss.shape[0], ss.shape[1]).to(torch.int32), int(sizes.sum())


def _rig():
    """Six surround cameras: yaw (deg), focal (px at 1600x900)."""
    return [(0.0, 1266.0), (-55.0, 1260.0), (55.0, 1260.0), (180.0, 800.0), (110.0, 1260.0),
            (-110.0, 1260.0)]


def realistic_locations(anchors=900, points=13, seed=0):
    """Sampling locations of anchor keypoints projected through a nuScenes-like
    6-camera rig (1600x900 resized by 0.44, top 140 rows cropped: 704x256).
    Returns float32 [1, anchors, points, 6, 2]."""
    rng = np.random.default_rng(seed)
    r = rng.uniform(1.0, 55.0, anchors)
    phi = rng.uniform(-math.pi, math.pi, anchors)
    centre = np.stack([r * np.cos(phi), r * np.sin(phi), rng.normal(-0.9, 0.4, anchors)], 1)
    size = np.array([4.5, 1.9, 1.7]) * np.exp(rng.normal(0, 0.35, (anchors, 3)))
    yaw = rng.uniform(-math.pi, math.pi, anchors)
    fixed = np.zeros((7, 3))
    for i in range(3):
        fixed[1 + 2 * i, i], fixed[2 + 2 * i, i] = 0.45, -0.45
    learned = rng.uniform(-0.5, 0.5, (anchors, points - 7, 3))
    offs = np.concatenate([np.broadcast_to(fixed, (anchors, 7, 3)), learned], 1) * size[:, None]
    c, s = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
    kx = offs[..., 0] * c - offs[..., 1] * s
    ky = offs[..., 0] * s + offs[..., 1] * c
    kp = np.stack([kx, ky, offs[..., 2]], -1) + centre[:, None]  # [A, P, 3] lidar frame
    out = np.zeros((anchors, points, 6, 2))
    scale, crop = 0.44, 140.0
    for n, (yaw_deg, focal) in enumerate(_rig()):
        a = math.radians(yaw_deg)
        fwd = np.array([math.cos(a), math.sin(a), 0.0])
        right = np.array([math.sin(a), -math.cos(a), 0.0])
        down = np.array([0.0, 0.0, -1.0])
        rel = kp - np.array([1.0 * math.cos(a), 1.0 * math.sin(a), -0.3])
        xc, yc, zc = rel @ right, rel @ down, rel @ fwd
        depth = np.maximum(zc, 1e-5)
        u = (focal * xc / depth + 800.0) * scale
        v = (focal * yc / depth + 450.0) * scale - crop
        out[:, :, n, 0] = u / 704.0
        out[:, :, n, 1] = v / 256.0
    return torch.from_numpy(out[None]).to(torch.float32)


def realistic_inputs(anchors=64, points=13, channels=32, groups=8, seed=0, small_maps=True):
    """A realistic call with small maps (fast on CPU): the rig's locations,
    softmax-normalised weights and random features."""
    shapes = [(16, 44), (8, 22)] if small_maps else [(64, 176), (32, 88), (16, 44), (8, 22)]
    ss, si, rows = make_layout([shapes] * 6)
    gen = torch.Generator().manual_seed(seed)
    loc = realistic_locations(anchors, points, seed)
    logits = torch.randn(1, anchors, points * 6 * len(shapes), groups, generator=gen)
    weights = logits.softmax(dim=2).reshape(1, anchors, points, 6, len(shapes), groups)
    features = torch.randn(1, rows, channels, generator=gen)
    return features, ss, si, loc, weights.contiguous()
