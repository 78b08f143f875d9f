"""bench/feature_sensitivity.py on the CPU: the float32 head on its own
golden features matches every box with relative L2 0, the perturbations
have the sizes they claim, and bad arguments are refused."""
import json

import numpy as np
import pytest

from engine_util import repo_module
from s4d.sparse4d.golden import generate


def _script():
    return repo_module("bench/feature_sensitivity.py")


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("golden"))
    generate("tiny", out, frames=4, cut_at=2, aggregation="reference", seed=0, do_export=False)
    return out


def test_unperturbed_matches_and_perturbations_have_their_size(golden, tmp_path):
    fs = _script()
    rc = fs.main([golden, str(tmp_path), "--aggregation", "reference",
                  "--perturb", "none,fp16,noise:1e-3,noise:0.3"])
    assert rc == 0
    doc = json.load(open(tmp_path / "feature_sensitivity.json"))
    res = {r["perturbation"]: r for r in doc["results"]}
    assert set(res) == {"none", "fp16", "noise:1e-3", "noise:0.3"}
    none = res["none"]
    assert none["frames"] == 4 and none["features_rel_l2"] == 0.0
    assert none["rel_l2"] == 0.0 and none["boxes_matched"] == 1.0
    assert none["boxes_matched_ids_mapped"] == 1.0 and none["frames_below_99"] == 0
    assert all(f["boxes"] > 0 for f in none["per_frame"])
    # float16 rounding: about 2^-11 / sqrt(3) relative per element
    assert 5e-5 < res["fp16"]["features_rel_l2"] < 5e-4
    assert res["noise:1e-3"]["features_rel_l2"] == pytest.approx(1e-3, rel=1e-4)
    assert res["noise:1e-3"]["rel_l2"] > 0
    # 30% noise on the features must show in the outputs
    assert res["noise:0.3"]["features_rel_l2"] == pytest.approx(0.3, rel=1e-4)
    assert res["noise:0.3"]["rel_l2"] > 1e-2
    md = open(tmp_path / "feature_sensitivity.md").read()
    assert "| none | 0.0e+00 | 1.00 | 1.00 | 0 | 0 | 0.0e+00 |" in md


def test_noise_is_seeded_and_never_zero():
    fs = _script()
    f = np.random.default_rng(3).standard_normal((2, 5, 7)).astype(np.float32)
    a = fs.perturber("noise:1e-2", 5)(f)
    b = fs.perturber("noise:1e-2", 5)(f)
    c = fs.perturber("noise:1e-2", 6)(f)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert np.count_nonzero(a != f) > 0.9 * f.size


@pytest.mark.parametrize("spec,msg", [("noise:abc", "bad perturbation"), ("noise:0", "must be > 0"),
                                      ("noise:-1e-3", "must be > 0"), ("blur", "unknown perturbation")])
def test_bad_perturbations_are_refused(spec, msg):
    fs = _script()
    with pytest.raises(SystemExit, match=msg):
        fs.perturber(spec, 0)


def test_missing_golden_is_refused(tmp_path, capsys):
    fs = _script()
    assert fs.main([str(tmp_path / "nothing"), str(tmp_path / "out")]) == 2
    assert "manifest.json not found" in capsys.readouterr().err
