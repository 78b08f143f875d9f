"""Layers that take float16 at some of their float inputs only, in an fp16 engine.

The aggregation plugin takes its features and weights in float16 but its sampling
locations only in float32; Resize reads its scales as float32 values. The precision
pass runs such a layer in float16 with those inputs kept in float32 (cast layers
around them as needed), instead of leaving the whole layer in float32. On the
guarded test device (float16 storage, float32 arithmetic); the float32 engine on the
CPU, and float64 NumPy for the Resize network, are the references.
"""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("S4D_BUILD", os.path.join(REPO, "build")))
S4DEXEC = os.environ.get("S4DEXEC", os.path.join(BUILD, "bin", "s4dexec"))
PLUGINS = os.path.join(BUILD, "lib", "libs4d_plugins.so")
sys.path.insert(0, os.path.join(REPO, "tests", "engine"))

import make_models  # noqa: E402


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("da16"))
    make_models.da_model(d, "da", "DeformableAggregation", "s4d", {"plugin_version": "1"}, False)
    rng = np.random.default_rng(7)
    m = make_models
    rows = sum(h * w for h, w in m.HW)
    np.save(os.path.join(d, "feat_in.npy"),
            rng.uniform(-1, 1, (m.BS, m.NCAM * rows, 4)).astype(np.float32))
    np.save(os.path.join(d, "query.npy"), rng.uniform(-1, 1, (m.BS, m.A, m.C)).astype(np.float32))
    np.save(os.path.join(d, "loc.npy"),
            rng.uniform(-0.1, 1.1, (m.BS, m.A, m.P, m.NCAM, 2)).astype(np.float32))
    return d


def s4dexec(d, *args, guarded=True, onnx="da.onnx",
            inputs="feat_in:feat_in.npy,query:query.npy,sampling_location:loc.npy"):
    e = dict(os.environ)
    e.pop("S4D_GUARDED_NO_FP16", None)
    if guarded:
        e["S4D_TEST_BACKEND"] = "guarded"
    else:
        e.pop("S4D_TEST_BACKEND", None)
    r = subprocess.run([S4DEXEC, "--iterations=1", "--warmUp=0", "--onnx=" + onnx,
                        "--plugins=" + PLUGINS, "--loadInputs=" + inputs,
                        *args], cwd=d, env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout + r.stderr


def test_plugin_runs_in_float16_with_its_float32_input_kept(model):
    out = s4dexec(model, "--device=cuda", "--fp16", "--dumpLayerInfo", "--exportOutput=o16")
    assert re.search(r"'aggregate' \(DeformableAggregation\) runs in float16 with input 3 kept "
                     r"in float32", out), out
    m = re.search(r"\n\s+\d+ aggregate\s{2,}\S+\s+cuda\s+(\S+)", out)
    assert m and m.group(1) == "float16", out
    s4dexec(model, "--device=cpu", "--exportOutput=o32", guarded=False)
    y16 = np.load(os.path.join(model, "o16", "out.npy")).astype(np.float64)
    y32 = np.load(os.path.join(model, "o32", "out.npy")).astype(np.float64)
    assert np.abs(y32).max() > 1e-3
    # float16 storage of features, weights and output: a few 1e-4 relative.
    rel = np.linalg.norm(y16 - y32) / np.linalg.norm(y32)
    assert 0 < rel < 5e-3, rel


def test_resize_runs_in_float16_with_its_scales_kept_in_float32(tmp_path):
    """x * w -> Resize(nearest, scales 1,1,2,2) -> + y: the FPN's upsampling step."""
    d = str(tmp_path)
    rng = np.random.default_rng(11)
    w = rng.uniform(0.5, 1.5, (1, 4, 1, 1)).astype(np.float32)
    scales = np.array([1, 1, 2, 2], np.float32)
    nodes = [helper.make_node("Mul", ["x", "w"], ["xs"], name="scale"),
             helper.make_node("Resize", ["xs", "", "scales"], ["up"], name="upsample",
                              mode="nearest"),
             helper.make_node("Add", ["up", "y"], ["out"], name="lateral_add")]
    g = helper.make_graph(
        nodes, "fpn_step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 5]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 10])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 6, 10])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scales, "scales")])
    import onnx
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              os.path.join(d, "fpn.onnx"))
    x = rng.uniform(-2, 2, (1, 4, 3, 5)).astype(np.float32)
    y = rng.uniform(-2, 2, (1, 4, 6, 10)).astype(np.float32)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), y)
    out = s4dexec(d, "--device=cuda", "--fp16", "--dumpLayerInfo", "--exportOutput=o16",
                  onnx="fpn.onnx", inputs="x:x.npy,y:y.npy")
    assert re.search(r"'upsample' \(Resize\) runs in float16 with input 2 kept in float32", out), out
    m = re.search(r"\n\s+\d+ upsample\s{2,}\S+\s+cuda\s+(\S+)", out)
    assert m and m.group(1) == "float16", out
    assert "stays fp32" not in out, out
    ref = (x.astype(np.float64) * w).repeat(2, axis=2).repeat(2, axis=3) + y
    got = np.load(os.path.join(d, "o16", "out.npy")).astype(np.float64)
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert 0 < rel < 2e-3, rel
