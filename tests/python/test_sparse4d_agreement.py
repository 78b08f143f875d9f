"""The fp16 agreement measures (s4d.sparse4d.agreement) and the frame
benchmark's PyTorch accuracy run (bench/frame_bench.py), on the CPU: a
float32 run agrees with its own golden sequence, perturbed runs are caught
by exactly the boxes perturbed."""
import os

import numpy as np
import pytest

from engine_util import REPO, repo_module
from s4d.sparse4d import agreement
from s4d.sparse4d.golden import generate
from s4d.sparse4d.model import build_model

rng = np.random.default_rng(7)


def _boxes(k):
    return {"boxes": rng.uniform(-40, 40, (1, k, 9)).astype(np.float32),
            "labels": rng.integers(0, 10, (1, k)), "track_ids": np.arange(k)[None] + 100}


def _brute_match(got, want, k, metres):
    # reference: unique track ids, so a reference box has one candidate
    n = 0
    for i in range(k):
        for j in range(k):
            if got["track_ids"][0, j] == want["track_ids"][0, i]:
                d = np.sqrt(np.sum((got["boxes"][0, j, :3].astype(np.float64)
                                    - want["boxes"][0, i, :3]) ** 2))
                n += bool(got["labels"][0, j] == want["labels"][0, i] and d <= metres)
    return n


def test_match_boxes_random_against_brute_force():
    for _ in range(20):
        want = _boxes(100)
        order = rng.permutation(100)
        got = {k: v[:, order].copy() for k, v in want.items()}
        moved = rng.random(100) < 0.1
        got["boxes"][0, moved, :2] += rng.uniform(0.03, 0.2, (int(moved.sum()), 2)).astype(
            np.float32)
        relabel = rng.random(100) < 0.03
        got["labels"][0, relabel] = (got["labels"][0, relabel] + 1) % 10
        got["boxes"][0, rng.random(100) < 0.02, 2] = np.nan
        assert agreement.match_boxes(got, want, 100) == _brute_match(got, want, 100, 0.1)


def test_match_boxes_cases():
    want = _boxes(10)
    got = {k: v.copy() for k, v in want.items()}
    assert agreement.match_boxes(got, want, 10) == 10
    got["track_ids"][0, 3] = 7
    assert agreement.match_boxes(got, want, 10) == 9
    # only the first k of each side count
    assert agreement.match_boxes(got, want, 2) == 2
    got = {k: v[:, ::-1].copy() for k, v in want.items()}
    assert agreement.match_boxes(got, want, 5) == 0  # the top 5 are other boxes


def test_match_boxes_mapped_follows_a_relabelling():
    # the run's ids: a random bijection of the reference's; ranks shuffled
    label = {100 + i: 5000 + 7 * int(j) for i, j in enumerate(rng.permutation(100))}
    ids = {}
    for frame in range(3):
        want = _boxes(100)
        order = rng.permutation(100)
        got = {k: v[:, order].copy() for k, v in want.items()}
        got["track_ids"] = np.vectorize(label.get)(got["track_ids"])
        expect = 100
        if frame == 1:  # one box far off, one of another class
            got["boxes"][0, 3, 0] += 1.0
            got["labels"][0, 4] = (got["labels"][0, 4] + 1) % 10
            expect = 98
        if frame == 2:  # an id switch between two tracks
            got["track_ids"][0, [10, 20]] = got["track_ids"][0, [20, 10]]
            expect = 98
        assert agreement.match_boxes_mapped(got, want, 100, ids) == expect
        assert ids == {v: k for k, v in label.items()}
        assert agreement.match_boxes(got, want, 100) == 0  # every literal id differs


def test_match_boxes_mapped_pairs_one_to_one():
    want = _boxes(2)
    got = {k: v.copy() for k, v in want.items()}
    ids = {100: 100}
    got["track_ids"][0] = [100, 101]
    want["track_ids"][0] = [555, 101]  # 100 is paired with 100, not with 555
    assert agreement.match_boxes_mapped(got, want, 2, ids) == 1
    got["track_ids"][0] = [777, 101]  # reference 100 is taken: 777 cannot pair with it
    want["track_ids"][0] = [100, 101]
    assert agreement.match_boxes_mapped(got, want, 2, ids) == 1
    got["track_ids"][0] = [-1, 101]  # untracked boxes agree only with untracked boxes
    want["track_ids"][0] = [-1, 101]
    assert agreement.match_boxes_mapped(got, want, 2, ids) == 2
    assert -1 not in ids and -1 not in ids.values()


def test_align_rows_and_rel_l2():
    want_ids = np.array([5, 3, -1, 9, -1, 4])
    got_ids = np.array([3, 5, -1, 4, 9, -1])
    perm = agreement.align_rows(got_ids, want_ids)
    assert sorted(perm.tolist()) == list(range(6))
    assert [got_ids[p] for p in perm[[0, 1, 3, 5]]] == [5, 3, 9, 4]
    a = rng.standard_normal(50) + 1
    assert agreement.rel_l2(a, a) == 0
    b = a * 1.01
    assert agreement.rel_l2(b, a) == pytest.approx(0.01, rel=1e-9)
    with pytest.raises(ValueError, match="shapes differ"):
        agreement.rel_l2(a[:3], a)


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("agree_golden"))
    generate("tiny", out, frames=4, cut_at=2, aggregation="reference", seed=0, do_export=False)
    return out


def _frame_bench():
    return repo_module("bench/frame_bench.py")


def test_float32_run_agrees_with_its_golden(golden):
    fb = _frame_bench()
    model = build_model("tiny", aggregation="reference", seed=0)
    s = fb.torch_accuracy(model, model.backbone, model.head, golden, device="cpu", half=False)
    assert s["frames"] == 4
    assert s["boxes_matched"] == 1.0
    assert s["rel_l2"] < 1e-5


def test_perturbed_runs_are_caught(golden):
    man, frames = agreement.load_golden(golden)
    model = build_model("tiny", aggregation="reference", seed=0)

    def replay(shift, frame_hit):
        calls = {"i": 0}

        def step(images, frame_in, state):
            i = calls["i"]
            calls["i"] += 1
            out = {k: v.copy() for k, v in frames[i]["head_out"].items()}
            if i == frame_hit:
                out["boxes"][0, :shift, 0] += 0.2
                out["prediction"] *= 1.05
            nxt = {k[:-4]: v for k, v in frames[i]["head_out"].items() if k.startswith("bank_")}
            return out, nxt
        init = {k: v for k, v in frames[0]["head_in"].items() if k.startswith("bank_")}
        return agreement.run_sequence(step, golden, model.cfg, init)

    res = replay(0, -1)
    assert agreement.summary(res)["boxes_matched"] == 1.0
    assert agreement.summary(res)["rel_l2"] == 0.0
    res = replay(7, 2)
    k = res[2]["boxes"]
    assert [r["matched"] for r in res] == [k, k, k - 7, k]
    assert [r["matched_ids_mapped"] for r in res] == [k, k, k - 7, k]
    s = agreement.summary(res)
    assert s["boxes_matched"] == pytest.approx((k - 7) / k)
    assert s["boxes_matched_ids_mapped"] == pytest.approx((k - 7) / k)
    assert s["rel_l2"] == pytest.approx(0.05, rel=1e-4)
    assert s["rel_l2_where"] == "prediction frame 2"


def test_frame_bench_report_and_targets():
    fb = _frame_bench()
    rows = [{"model": "v3", "part": "frame", "impl": "s4d", "precision": "fp32",
             "median_ms": 8.0, "p90_ms": 8.2, "weights": "seeded", "overlap_median_ms": 7.75},
            {"model": "v3", "part": "frame", "impl": "s4d", "precision": "fp16",
             "median_ms": 4.4, "p90_ms": 4.5, "weights": "seeded", "rel_l2": 0.0123,
             "boxes_matched": 0.985, "accuracy_frames": 8},
            {"model": "v3", "part": "frame", "impl": "torch-eager", "precision": "fp16",
             "median_ms": 30.0, "p90_ms": 31.0, "weights": "seeded", "rel_l2": 0.68,
             "boxes_matched": 0.5, "accuracy_frames": 8}]
    targets = fb.target_lines(rows)
    assert "measured 4.400 ms (NOT met)" in targets[0]
    assert "worst frame 98.50% over 8 frames, seeded weights (NOT met)" in targets[1]
    rows[1].update(median_ms=3.9, boxes_matched=1.0)
    targets = fb.target_lines(rows)
    assert "(met)" in targets[0] and "(met)" in targets[1]
    md = fb.markdown({"device": "dev", "date": "d", "rows": rows, "targets": targets})
    assert "| v3 | frame | s4d | fp16 | 3.900 | 4.500 | 2.05 | seeded | 0.0123 | 100.00% | - | - |" in md
    assert "| v3 | frame | s4d | fp32 | 8.000 | 8.200 | 1.00 | seeded | - | - | - | 7.750 |" in md
    assert any(line.startswith("overlapped ms: ") for line in md)
    assert md[-1] == "- " + targets[1]
    rows[1]["boxes_matched_ids_mapped"] = 0.97
    assert "with the track ids mapped: worst frame 97.00%" in fb.target_lines(rows)[1]
    md = fb.markdown({"device": "dev", "date": "d", "rows": rows})
    assert "| v3 | frame | s4d | fp16 | 3.900 | 4.500 | 2.05 | seeded | 0.0123 | 100.00% | 97.00% | - |" in md
    assert fb.target_lines(rows[:1]) == ["targets (v3): no guarded fp16 engine row was measured"]


def test_frame_bench_refuses_without_cuda(tmp_path):
    import subprocess
    import sys
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "frame_bench.py"), "--out",
                        str(tmp_path)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.path.join(REPO, "python")))
    assert p.returncode == 2 and "no CUDA device" in p.stderr
