"""The tiny Sparse4Dv3 through s4d.engine: the worked example of
docs/python-api.md, run as written, and the golden sequence (backbone and
head engines, the instance bank carried in the engine across a scene cut)
against eager PyTorch's recorded frames."""
import json
import os
import re

import numpy as np
import pytest
import torch

import engine_util as u
import s4d.engine as se

DOC = os.path.join(u.REPO, "docs", "python-api.md")


def _need_extension():
    from s4d import ops
    if not ops.extension_available():
        pytest.fail("the PyTorch extension is not built (make python): the exported head's "
                    "s4d::DeformableAggregation runs through it in PyTorch")


def _example_code():
    text = open(DOC).read()
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the worked example's code blocks moved"
    return "\n".join(blocks)


def test_worked_example_of_the_docs_runs_and_agrees(tmp_path, monkeypatch, capsys):
    u.require_build()
    _need_extension()
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "worked_example"}
    exec(compile(_example_code(), DOC, "exec"), ns)  # noqa: S102 - the docs' own code
    printed = capsys.readouterr().out
    assert re.search(r"frame 2: worst relative L2 \d\.\d\de-0\d", printed), printed
    assert os.path.isfile(tmp_path / "out" / "python-api" / "head.s4de")
    reports = ns["reports"]
    assert len(reports) == 3 and all(r.passed for r in reports)
    # independently of s4d.engine.compare: the last frame's raw outputs and state
    got, want = ns["got"], ns["want"]
    for name in ("classification", "prediction", "quality"):
        g, w = got[name].double(), want[name].double()
        assert float((g - w).abs().max()) <= 1e-3 * max(1.0, float(w.abs().max())), name
    for name, t in zip(("bank_track_id_out", "bank_next_id_out"), (want["state"][3],
                                                                   want["state"][7])):
        assert torch.equal(got[name], t), name
    # the bank really was carried: frame 2 has history and tracks from frame 0
    assert float(got["bank_valid_out"]) == 1 and int(got["bank_next_id_out"]) > 0
    assert isinstance(got["boxes"], torch.Tensor)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    u.require_build()
    _need_extension()
    from s4d.sparse4d.golden import generate
    out = str(tmp_path_factory.mktemp("engine_golden"))
    manifest = generate("tiny", out, frames=3, cut_at=2, aggregation="ext", seed=1)
    return out, manifest


def test_golden_sequence_through_backbone_and_head_engines(golden):
    out, manifest = golden
    graphs = {g["graph"]: os.path.join(out, g["file"]) for g in manifest["graphs"]}
    feedback = {f["input"]: f["output"] for f in manifest["state_feedback"]}
    tensors = {}
    for r in manifest["tensors"]:
        tensors.setdefault((r["frame"], r["graph"], r["io"]), {})[r["name"]] = \
            np.load(os.path.join(out, r["file"]))
    backbone = se.build(graphs["backbone"]).create_context()
    head = se.build(graphs["head"], plugins=se.default_plugins()).create_context()
    bank = None
    worst = 0.0
    for f in range(manifest["num_frames"]):
        bb = backbone.run(tensors[(f, "backbone", "input")])
        se.compare_outputs(bb, tensors[(f, "backbone", "output")], rtol=1e-3, atol=1e-4) \
            .assert_ok()
        ins = dict(tensors[(f, "head", "input")])
        ins["features"] = bb["features"]  # the engine's own backbone output
        if bank is not None:  # the engine's own bank, across the scene cut too
            ins.update(bank)
        got = head.run(ins)
        report = se.compare_outputs(got, tensors[(f, "head", "output")], rtol=1e-3, atol=1e-4)
        report.assert_ok()
        worst = max(worst, report.worst_rel_l2)
        bank = {i: got[o] for i, o in feedback.items()}
    assert manifest["frames"][2]["scene_start"] and worst < 1e-4
    json.dumps(manifest)  # the manifest stays plain data
