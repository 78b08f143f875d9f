"""Shared helpers for the s4d Python tests: input generators (random and a
nuScenes-like camera rig) and an independent float64 loop implementation of
deformable aggregation written straight from the definition."""
import math
import os
import sys

import numpy as np
import pytest
import torch

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   "python")
if _PY not in sys.path:
    sys.path.insert(0, _PY)

from s4d.ops.workload import make_layout, realistic_inputs, realistic_locations  # noqa: E402,F401


# ------------------------------------------------------------------ random inputs

def random_inputs(level_shapes, bs=2, channels=16, groups=4, anchors=5, points=3, seed=0,
                  loc_low=-0.15, loc_high=1.15, dtype=torch.float32):
    """Random non-zero inputs; locations spread past the image so that some
    (point, camera) pairs are invalid."""
    gen = torch.Generator().manual_seed(seed)
    ss, si, rows = make_layout(level_shapes)
    cams, levels = ss.shape[0], ss.shape[1]
    features = torch.rand(bs, rows, channels, generator=gen) * 2 - 1
    loc = torch.rand(bs, anchors, points, cams, 2, generator=gen) * (loc_high - loc_low) + loc_low
    weights = torch.rand(bs, anchors, points, cams, levels, groups, generator=gen) + 0.1
    return (features.to(dtype), ss, si, loc.to(torch.float32 if dtype != torch.float64
                                                else torch.float64), weights.to(dtype))


def edge_locations(level_shapes, bs, anchors, points):
    """Locations on the hard cases: exactly 0 and 1, pixel centres, half a
    pixel inside and outside every border, far outside, NaN and inf."""
    cams = len(level_shapes)
    h, w = level_shapes[0][0]
    specials = [0.0, 1.0, 0.5 / w, 1 - 0.5 / w, 0.25 / w, 1 - 0.25 / w, 0.75 / w,
                1 - 0.75 / w, 1e-7, 1 - 1e-7, 1.5 / w, -0.3, 1.7, 250.0, -1e6,
                float("nan"), float("inf"), -float("inf"), 0.5, 0.37]
    gen = torch.Generator().manual_seed(7)
    n = bs * anchors * points * cams * 2
    idx = torch.randint(0, len(specials), (n,), generator=gen)
    vals = torch.tensor(specials, dtype=torch.float32)[idx]
    # Mix in ordinary in-image values so most pairs pair a special coordinate with a normal one.
    normal = torch.rand(n, generator=gen) * 0.9 + 0.05
    pick = torch.rand(n, generator=gen) < 0.6
    vals = torch.where(pick, vals, normal)
    return vals.reshape(bs, anchors, points, cams, 2)


# ------------------------------------------------------------------ float64 loop oracle

def naive_deformable_aggregation(features, spatial_shape, scale_start_index, sampling_location,
                                 weights):
    """Direct float64 transcription of the definition (SPARSE4D.md section 1)."""
    f = features.detach().double().numpy()
    ss = spatial_shape.detach().long().numpy()
    si = scale_start_index.detach().long().numpy()
    loc = sampling_location.detach().double().numpy()
    w = weights.detach().double().numpy()
    bs, _, channels = f.shape
    _, anchors, points, cams, _ = loc.shape
    levels, groups = w.shape[4], w.shape[5]
    per_group = channels // groups
    out = np.zeros((bs, anchors, channels))
    group_of = np.arange(channels) // per_group
    for b in range(bs):
        for a in range(anchors):
            for p in range(points):
                for n in range(cams):
                    x, y = loc[b, a, p, n]
                    if not (0 < x < 1 and 0 < y < 1):
                        continue
                    for lv in range(levels):
                        hh, ww = ss[n, lv]
                        hi, wi = y * hh - 0.5, x * ww - 0.5
                        h0, w0 = math.floor(hi), math.floor(wi)
                        lh, lw = hi - h0, wi - w0
                        val = np.zeros(channels)
                        for dh, dw, cw in ((0, 0, (1 - lh) * (1 - lw)), (0, 1, (1 - lh) * lw),
                                           (1, 0, lh * (1 - lw)), (1, 1, lh * lw)):
                            hc, wc = h0 + dh, w0 + dw
                            if 0 <= hc <= hh - 1 and 0 <= wc <= ww - 1:
                                val += cw * f[b, si[n, lv] + hc * ww + wc]
                        out[b, a] += w[b, a, p, n, lv, group_of] * val
    return torch.from_numpy(out)


def rel_l2(a, b):
    a = a.detach().double()
    b = b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture
def ext():
    """The compiled extension; a missing build fails the test (CI builds it first)."""
    from s4d.ops import load_extension
    return load_extension()
