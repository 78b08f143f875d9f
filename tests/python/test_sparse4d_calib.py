"""Calibration sets for the fp16 accuracy guard (s4d.sparse4d.calib): one
set per frame, named and shaped exactly as the exported graphs' inputs, the
head's sets holding the state fp32 PyTorch carries."""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch

from s4d.sparse4d.calib import ACCURACY, calib_from_golden, export_calib, load_weights
from s4d.sparse4d.export import export
from s4d.sparse4d.golden import generate
from s4d.sparse4d.head import HeadState, STATE_NAMES

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FRAMES = 3


def _np_dtype(elem_type):
    helper = getattr(onnx.helper, "tensor_dtype_to_np_dtype", None)
    if helper is not None:
        return np.dtype(helper(elem_type))
    return np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[elem_type])


def _graph_inputs(path):
    g = onnx.load(path).graph
    inits = {i.name for i in g.initializer}
    out = {}
    for i in g.input:
        if i.name in inits:
            continue
        t = i.type.tensor_type
        out[i.name] = (tuple(d.dim_value for d in t.shape.dim), _np_dtype(t.elem_type))
    return out


@pytest.fixture(scope="module")
def calib(tmp_path_factory):
    root = tmp_path_factory.mktemp("calib_tiny")
    out = str(root / "calib")
    info = export_calib("tiny", out, frames=FRAMES, aggregation="reference")
    model, _ = load_weights("tiny", None, None, aggregation="reference")
    onnx_dir = str(root / "onnx")
    paths = export("tiny", onnx_dir, "reference", model=model)
    return out, info, paths


def _load_set(d):
    return {f[:-4]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))}


def test_sets_match_the_graph_inputs(calib):
    out, info, paths = calib
    assert info["frames"] == FRAMES
    for graph, onnx_path in (("backbone", paths["backbone"]), ("head", paths["head_reference"])):
        want = _graph_inputs(onnx_path)
        sets = sorted(os.listdir(os.path.join(out, graph)))
        assert sets == [f"f{i:03d}" for i in range(FRAMES)]
        for s in sets:
            arrays = _load_set(os.path.join(out, graph, s))
            assert set(arrays) == set(want), (graph, s)
            for name, a in arrays.items():
                assert a.shape == want[name][0], (graph, s, name)
                assert a.dtype == want[name][1], (graph, s, name)
                if a.dtype.kind == "f":
                    assert np.all(np.isfinite(a)), (graph, s, name)


def test_values_are_real_frames_and_state(calib):
    out, info, _ = calib
    for i in range(FRAMES):
        img = np.load(os.path.join(out, "backbone", f"f{i:03d}", "images.npy"))
        assert img.std() > 0.1
        feats = np.load(os.path.join(out, "head", f"f{i:03d}", "features.npy"))
        assert feats.std() > 1e-3
        valid = np.load(os.path.join(out, "head", f"f{i:03d}", "bank_valid.npy"))
        # the first frame starts afresh; the others carry the previous frame
        assert valid.tolist() == [0.0 if i == 0 else 1.0]
    frames = [np.load(os.path.join(out, "head", f"f{i:03d}", "timestamp.npy"))[0]
              for i in range(FRAMES)]
    assert all(b > a for a, b in zip(frames, frames[1:]))
    f1 = _load_set(os.path.join(out, "head", "f001"))
    assert np.abs(f1["bank_feature"]).max() > 1e-3
    assert (f1["bank_track_id"] >= 0).any()


def test_state_is_the_previous_frames_output(calib):
    # An independent run of the head on frame i's set must produce frame
    # i+1's bank: the sets hold the state PyTorch carries, not a guess.
    out, _, _ = calib
    model, _ = load_weights("tiny", None, None, aggregation="reference")
    for i in range(FRAMES - 1):
        s = _load_set(os.path.join(out, "head", f"f{i:03d}"))
        nxt = _load_set(os.path.join(out, "head", f"f{i + 1:03d}"))
        t = {k: torch.from_numpy(v) for k, v in s.items()}
        with torch.no_grad():
            res = model.head(t["features"], t["projection"], t["image_wh"], t["timestamp"],
                             t["ego_pose"], HeadState(*[t[n] for n in STATE_NAMES]))
        for name, got in zip(STATE_NAMES, res["state"]):
            np.testing.assert_allclose(got.numpy(), nxt[name], rtol=1e-5, atol=1e-5,
                                       err_msg=f"frame {i} -> {i + 1}: {name}")


def test_from_golden_agrees_with_the_direct_export(calib, tmp_path):
    out, info, _ = calib
    ckpt = info["weights"].split("(")[-1].rstrip(")") if info["weights"].startswith("trained") \
        else None
    gold = str(tmp_path / "golden")
    generate("tiny", gold, frames=FRAMES + 1, cut_at=FRAMES, aggregation="reference",
             do_export=False, checkpoint=ckpt)
    other = str(tmp_path / "calib")
    got = calib_from_golden(gold, other, frames=FRAMES)
    assert got["frames"] == FRAMES
    for graph in ("backbone", "head"):
        for i in range(FRAMES):
            a = _load_set(os.path.join(out, graph, f"f{i:03d}"))
            b = _load_set(os.path.join(other, graph, f"f{i:03d}"))
            assert set(a) == set(b)
            for k in a:
                np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5,
                                           err_msg=f"{graph} f{i:03d} {k}")
    with open(os.path.join(other, "calib.json")) as f:
        index = json.load(f)
    assert index["frames"] == FRAMES
    assert index["accuracy"] == ACCURACY


def _run(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    return subprocess.run([sys.executable, "-m", "s4d.sparse4d.calib", *args],
                          capture_output=True, text=True, env=env)


def test_bad_arguments(tmp_path):
    p = _run("--out", str(tmp_path / "x"))
    assert p.returncode == 2 and "one of --preset and --golden" in p.stderr
    p = _run("--golden", str(tmp_path), "--out", str(tmp_path / "x"))
    assert p.returncode == 1 and "manifest.json" in p.stderr
    p = _run("--preset", "tiny", "--frames", "0", "--out", str(tmp_path / "x"))
    assert p.returncode == 1 and "--frames must be at least 1" in p.stderr
    p = _run("--preset", "tiny", "--weights", "trained", "--checkpoint",
             str(tmp_path / "none.pt"), "--out", str(tmp_path / "x"))
    assert p.returncode == 1 and "no checkpoint" in p.stderr


def test_print_accuracy_gives_the_tolerances_the_guard_parses():
    # the string goes to s4dexec --accuracy: a default, then name:value pairs whose names
    # are outputs of the exported graph (the head's carried state)
    from s4d.sparse4d.export import HEAD_OUTPUT_NAMES
    for graph in ("backbone", "head"):
        p = _run("--print-accuracy", graph)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == ACCURACY[graph]
        parts = p.stdout.strip().split(",")
        assert float(parts[0]) > 0
        for item in parts[1:]:
            name, value = item.split(":")
            assert name in HEAD_OUTPUT_NAMES and 0 < float(value) < float(parts[0])
    assert "bank_anchor_out" in ACCURACY["head"]
    p = _run("--print-accuracy", "neck")
    assert p.returncode == 2 and "invalid choice" in p.stderr
    p = _run("--preset", "tiny")
    assert p.returncode == 2 and "--out is required" in p.stderr
