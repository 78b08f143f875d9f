"""Golden outputs for the engine tests, from an independent implementation.

Usage: make_golden.py MODELS_DIR (after make_models.py). Writes
  MODELS_DIR/da_golden/out.npy    the da.onnx graph computed in PyTorch with
                                  s4d.ops.deformable_aggregation_reference
  MODELS_DIR/mlp_golden/{y,z}.npy the mlp.onnx graph in float64 NumPy
  MODELS_DIR/mlp_in/x.npy         the input used for mlp_golden
"""
import os
import sys

import numpy as np
import torch

from s4d.ops import deformable_aggregation_reference


def load(d, name):
    return np.load(os.path.join(d, name))


def da_golden(d):
    wf, ww, bw = load(d, "da_wf.npy"), load(d, "da_ww.npy"), load(d, "da_bw.npy")
    shapes, start = load(d, "da_spatial_shape.npy"), load(d, "da_scale_start_index.npy")
    feat_in = load(d, "da_in_feat_in.npy")
    query = load(d, "da_in_query.npy")
    loc = load(d, "da_in_sampling_location.npy")
    bs, a, p, ncam, _ = loc.shape
    nlvl = shapes.shape[1]
    with torch.no_grad():
        t = torch.from_numpy
        features = t(feat_in).double() @ t(wf).double()
        w = t(query).double() @ t(ww).double() + t(bw).double()
        g = w.shape[-1] // (p * ncam * nlvl)
        w = w.reshape(bs, a, p * ncam * nlvl, g).softmax(dim=2)
        w = w.reshape(bs, a, p, ncam, nlvl, g)
        out = deformable_aggregation_reference(features, t(shapes).long(), t(start).long(),
                                               t(loc).double(), w)
    os.makedirs(os.path.join(d, "da_golden"), exist_ok=True)
    np.save(os.path.join(d, "da_golden", "out.npy"), out.float().numpy())


def mlp_golden(d):
    w1, b1 = load(d, "mlp_w1.npy").astype(np.float64), load(d, "mlp_b1.npy").astype(np.float64)
    x = np.random.default_rng(5).uniform(-1, 1, (2, 3)).astype(np.float32)
    h = x.astype(np.float64) @ w1
    h2 = h + b1
    e = np.exp(h2 - h2.max(axis=-1, keepdims=True))
    s = e / e.sum(axis=-1, keepdims=True)
    y = s.reshape(4, 2).T
    z = h + 2 * b1
    for sub, arrays in (("mlp_golden", {"y": y, "z": z}), ("mlp_in", {"x": x})):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        for k, v in arrays.items():
            np.save(os.path.join(d, sub, k + ".npy"), np.ascontiguousarray(v, dtype=np.float32))


if __name__ == "__main__":
    mlp_golden(sys.argv[1])
    da_golden(sys.argv[1])
