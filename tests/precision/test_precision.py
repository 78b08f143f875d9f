"""fp16 engines and the accuracy guard on the guarded test device (docs/precision.md).

The guarded device runs float16 layers with float16 storage and float32 arithmetic, so
these tests run without a GPU. The toy network (make_toy.py) has a benign path
(Mul, Tanh, Add, Relu) and a fragile layer (Exp of values past float16's range) that the
guard must move to float32. Outputs are compared with float64 NumPy references.
"""
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("S4D_BUILD", os.path.join(REPO, "build")))
S4DEXEC = os.environ.get("S4DEXEC", os.path.join(BUILD, "bin", "s4dexec"))
sys.path.insert(0, os.path.join(REPO, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import make_toy  # noqa: E402

BENIGN = ["scale", "tanh", "bias", "relu", "shift"]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("toy"))
    make_toy.main(d)
    return d


def env(**extra):
    e = dict(os.environ)
    e["S4D_TEST_BACKEND"] = "guarded"
    # The toys' layers are element-wise nodes the guard judges one by one: unfused.
    e["S4D_FUSE_POINTWISE"] = "0"
    e.pop("S4D_GUARDED_NO_FP16", None)
    e.update(extra)
    return e


def s4dexec(toy, *args, ok=True, **extra):
    r = subprocess.run([S4DEXEC, "--iterations=1", "--warmUp=0", *args], cwd=toy,
                       env=env(**extra), capture_output=True, text=True, timeout=120)
    if ok:
        assert r.returncode == 0, r.stdout + r.stderr
    else:
        assert r.returncode != 0, r.stdout + r.stderr
    return r.stdout + r.stderr


def precisions(out):
    """{layer: precision} from --dumpLayerInfo."""
    got = {}
    for line in out.splitlines():
        m = re.match(r"\s+\d+ (.+?)\s{2,}\S+\s+(cuda|cpu)\s+(float16|float32|\S+)", line)
        if m:
            got[m.group(1).strip()] = m.group(3)
    return got


def moved(out):
    return re.findall(r"moved to fp32: '([^']+)'", out)


def reference(toy, x, z):
    w = np.load(os.path.join(toy, "W.npy")).astype(np.float64)
    b = np.load(os.path.join(toy, "b.npy")).astype(np.float64)
    c = np.load(os.path.join(toy, "c.npy")).astype(np.float64)
    feat = np.maximum(np.tanh(x.astype(np.float64) * w) + b, 0)
    energy = np.exp(z.astype(np.float64) + c)
    return feat, energy


def rel_l2(a, b):
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        return np.inf
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run_and_compare(toy, engine_args, outdir):
    shutil.rmtree(os.path.join(toy, outdir), ignore_errors=True)
    out = s4dexec(toy, *engine_args, "--loadInputs=x:x.npy,z:z.npy", "--exportOutput=" + outdir,
                  "--dumpLayerInfo")
    x = np.load(os.path.join(toy, "x.npy"))
    z = np.load(os.path.join(toy, "z.npy"))
    feat_ref, energy_ref = reference(toy, x, z)
    feat = np.load(os.path.join(toy, outdir, "feat.npy"))
    energy = np.load(os.path.join(toy, outdir, "energy.npy"))
    return out, rel_l2(feat, feat_ref), rel_l2(energy, energy_ref)


def test_inputs_are_not_trivial(toy):
    for s in ("set0", "set1"):
        for name in ("x", "z"):
            a = np.load(os.path.join(toy, "calib", s, name + ".npy"))
            assert np.count_nonzero(a) == a.size
    # z + c passes float16's range, so the fragile layer overflows in float16.
    assert np.exp(np.load(os.path.join(toy, "z.npy")) + 10.5).max() > 65504


def test_guard_moves_the_fragile_layer(toy):
    eng = os.path.join(toy, "guarded.engine")
    out, e_feat, e_energy = run_and_compare(
        toy, ["--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=calib",
              "--saveEngine=" + eng], "out_guard")
    assert moved(out) == ["exp_frag"], out
    prec = precisions(out)
    assert prec["exp_frag"] == "float32", out
    for name in BENIGN:
        assert prec[name] == "float16", (name, out)
    assert "2 calibration sets" in out
    m = re.search(r"output 'energy': rel_l2 before (\S+), after (\S+) \(tolerance 0.01\) ok", out)
    assert m and m.group(1) == "inf" and float(m.group(2)) <= 1e-2, out
    m = re.search(r"output 'feat': rel_l2 before (\S+), after (\S+) \(tolerance 0.01\) ok", out)
    assert m and float(m.group(2)) <= 1e-2, out
    assert "builds: 1 float32 reference + 2 fp16 candidates" in out
    # Against float64: float16 storage costs about 1e-3 on both outputs.
    assert 0 < e_feat <= 1e-2, e_feat
    assert 0 < e_energy <= 1e-2, e_energy


def test_carried_state_inputs_grow_in_float16(toy):
    # The map's inputs justify the test: one float16 step stays within 1e-2 of float64 on
    # every frame, but the orbit carried in float16 leaves it by more than 1e-2.
    orbit = np.load(os.path.join(toy, "carried_orbit.npy"))
    assert np.all((orbit > 0.01) & (orbit < 0.99))
    one_step = make_toy.carried_orbit(orbit[:-1].astype(np.float16), 2, np.float16)[1]
    assert max(rel_l2(one_step[i], orbit[i + 1]) for i in range(len(orbit) - 1)) < 1e-2
    carried = make_toy.carried_orbit(orbit[0].astype(np.float16), len(orbit), np.float16)
    assert rel_l2(carried[-1], orbit[-1]) > 1e-2


def test_guard_measures_the_carried_state(toy):
    # state_out feeds state: the sets also run as one sequence, and the float16 error that
    # grows from frame to frame makes the guard keep the map in float32.
    out = s4dexec(toy, "--onnx=carried.onnx", "--device=cuda", "--fp16", "--calib=calib_carried",
                  "--dumpLayerInfo", "--verbose")
    assert "carried state: 1 output feeds the input of the same name without '_out'" in out, out
    # --verbose: each set's error alone and carried; the first candidate's carried error
    # passes the tolerance on some set, while every set alone stays within it
    alone = [float(x) for x in re.findall(r"set '\S+' alone: 'state_out' (\S+)", out)]
    carried = [float(x) for x in re.findall(r"set '\S+' carried: 'state_out' (\S+)", out)]
    assert alone and carried, out
    assert max(carried) > 1e-2 and 0 < max(alone) <= 1e-2, (alone, carried)
    # the state at the general tolerance: the report says so and points to its own
    assert ("carried state at the general tolerance: 'state_out' (0.01, as every output); "
            "what the state may differ by") in out, out
    prec = precisions(out)
    assert {prec[n] for n in ("rest", "prod", "gain")} == {"float32"}, out
    m = re.search(r"output 'state_out': rel_l2 before (\S+), after (\S+) \(tolerance 0.01\) ok", out)
    assert m and float(m.group(1)) > 1e-2 and float(m.group(2)) <= 1e-2, out
    # given its own tolerance, the state needs no such line
    out = s4dexec(toy, "--onnx=carried.onnx", "--device=cuda", "--fp16", "--calib=calib_carried",
                  "--accuracy=0.01,state_out:0.02")
    assert "carried state: 1 output" in out and "general tolerance" not in out, out
    m = re.search(r"output 'state_out': rel_l2 before \S+, after (\S+) \(tolerance 0.02\) ok", out)
    assert m and float(m.group(1)) <= 2e-2, out
    # The same map whose output is not named after its input: nothing is carried, every
    # step alone is within the tolerance, and the map stays float16.
    out = s4dexec(toy, "--onnx=carried_next.onnx", "--device=cuda", "--fp16",
                  "--calib=calib_carried", "--dumpLayerInfo")
    assert "carried state" not in out, out
    assert not moved(out), out
    prec = precisions(out)
    assert {prec[n] for n in ("rest", "prod", "gain")} == {"float16"}, out


def test_saved_engine_keeps_precisions_and_report(toy):
    eng = os.path.join(toy, "guarded.engine")
    if not os.path.exists(eng):
        s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=calib",
                "--saveEngine=" + eng)
    out, e_feat, e_energy = run_and_compare(toy, ["--loadEngine=" + eng], "out_load")
    assert moved(out) == ["exp_frag"], out
    prec = precisions(out)
    assert prec["exp_frag"] == "float32"
    assert all(prec[n] == "float16" for n in BENIGN), out
    assert e_feat <= 1e-2 and e_energy <= 1e-2


def test_without_calibration_every_layer_is_fp16_and_the_fragile_output_is_wrong(toy):
    out, e_feat, e_energy = run_and_compare(toy, ["--onnx=toy.onnx", "--device=cuda", "--fp16"],
                                            "out_nocalib")
    prec = precisions(out)
    for name in BENIGN + ["exp_frag"]:
        assert prec[name] == "float16", (name, out)
    assert "6 of 6 layers with float tensors run in float16" in out
    assert e_feat <= 1e-2
    assert e_energy == np.inf  # float16 overflow: why the guard is needed


def test_fp16_halves_the_weights(toy):
    def weights(out):
        return int(re.search(r"weights: (\d+) bytes", out).group(1))
    w32 = weights(s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--dumpLayerInfo"))
    w16 = weights(s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--dumpLayerInfo"))
    assert w16 < w32, (w16, w32)


def test_float32_build_has_no_report_and_no_casts(toy):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--dumpLayerInfo")
    assert "[precision]" not in out
    assert "Cast" not in out
    assert set(precisions(out).values()) == {"float32"}


def test_pinned_layers_are_honoured_and_reported(toy):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=calib1",
                  "--layerPrecisions=tanh:fp32,relu:fp16", "--dumpLayerInfo")
    prec = precisions(out)
    assert prec["tanh"] == "float32" and prec["relu"] == "float16", out
    assert moved(out) == ["exp_frag"], out
    assert "1 pinned to fp32" in out
    assert "1 calibration set " in out


def test_pin_to_fp16_keeps_the_fragile_layer_and_the_guard_says_so(toy):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=calib1",
                  "--layerPrecisions=exp_frag:fp16", "--dumpLayerInfo")
    assert precisions(out)["exp_frag"] == "float16", out
    assert "exp_frag" not in moved(out)
    assert "still has rel_l2 inf above its tolerance" in out
    assert "ABOVE TOLERANCE" in out


def test_kernel_without_fp16_keeps_the_layer_in_fp32(toy):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--dumpLayerInfo",
                  S4D_GUARDED_NO_FP16="Tanh")
    assert precisions(out)["tanh"] == "float32", out
    assert "'tanh' (Tanh) stays fp32" in out
    # prefer (the default): a pin the kernel cannot run is a warning
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--dumpLayerInfo",
                  "--layerPrecisions=tanh:fp16", S4D_GUARDED_NO_FP16="Tanh")
    assert precisions(out)["tanh"] == "float32" and "warning: pinned to fp16" in out, out


def test_obey_with_an_impossible_pin_fails(toy):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16",
                  "--layerPrecisions=tanh:fp16", "--precisionConstraints=obey", ok=False,
                  S4D_GUARDED_NO_FP16="Tanh")
    assert "layer 'tanh' (Tanh) is pinned to fp16 with precision constraints obeyed" in out, out


@pytest.mark.parametrize("args,msg", [
    (["--layerPrecisions=nosuch:fp32"], "layer precision for 'nosuch': the network has no such layer"),
    (["--layerPrecisions=tanh:fp8"], "precision 'fp8' is not fp32 or fp16"),
    (["--layerPrecisions=tanh"], "'tanh' is not name:fp32 or name:fp16"),
    (["--precisionConstraints=maybe"], "--precisionConstraints=maybe: give obey or prefer"),
    (["--accuracy=abc", "--calib=calib"], "--accuracy: default: 'abc' is not a relative L2"),
    (["--accuracy=energy:-1", "--calib=calib"], "--accuracy: energy: '-1' is not"),
    (["--accuracy=nosuch:0.1", "--calib=calib"], "accuracy for output 'nosuch': the network has no such output"),
])
def test_bad_precision_options_fail_clearly(toy, args, msg):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", *args, ok=False)
    assert msg in out, out


def test_pins_need_fp16(toy):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--layerPrecisions=tanh:fp32", ok=False)
    assert "layer precisions apply to fp16 builds" in out, out
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--calib=calib", ok=False)
    assert "drives the fp16 accuracy guard; build with fp16" in out, out


def test_per_output_tolerance_is_used(toy):
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=calib1",
                  "--accuracy=0.05,energy:0.001")
    assert "relative L2 tolerance 0.05 per output ('energy' 0.001)" in out, out
    assert re.search(r"output 'feat': .*\(tolerance 0.05\) ok", out), out
    assert re.search(r"output 'energy': .*\(tolerance 0.001\)", out), out


def make_calib(toy, name, files):
    d = os.path.join(toy, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    rng = np.random.default_rng(3)
    for fname, shape, dtype in files:
        path = os.path.join(d, fname)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, rng.uniform(0.5, 1.5, shape).astype(dtype))
    return d


def test_calibration_errors_are_clear(toy):
    make_calib(toy, "c_missing", [("x.npy", (8, 32), np.float32)])
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=c_missing", ok=False)
    assert "calibration: 'c_missing/z.npy' is missing (graph input 'z')" in out, out
    make_calib(toy, "c_shape", [("x.npy", (8, 32), np.float32), ("z.npy", (8, 15), np.float32)])
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=c_shape", ok=False)
    assert "calibration: 'c_shape/z.npy' is float32[8, 15]; graph input 'z' is float32[8, 16]" in out, out
    make_calib(toy, "c_dtype", [("x.npy", (8, 32), np.float64), ("z.npy", (8, 16), np.float32)])
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=c_dtype", ok=False)
    assert "'c_dtype/x.npy' is float64[8, 32]; graph input 'x' is float32[8, 32]" in out, out
    make_calib(toy, "c_sets", [("a/x.npy", (8, 32), np.float32), ("a/z.npy", (8, 16), np.float32),
                               ("b/x.npy", (8, 32), np.float32)])
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=c_sets", ok=False)
    assert "'c_sets/b/z.npy' is missing (graph input 'z')" in out, out
    make_calib(toy, "c_empty", [])
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=c_empty", ok=False)
    assert "calibration directory 'c_empty' has no calibration set" in out, out
    make_calib(toy, "c_other", [("other.npy", (3,), np.float32)])
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=c_other", ok=False)
    assert "calibration directory 'c_other' has no calibration set" in out, out
    out = s4dexec(toy, "--onnx=toy.onnx", "--device=cuda", "--fp16", "--calib=nodir", ok=False)
    assert "calibration directory 'nodir' cannot be opened" in out, out


def test_cpu_still_refuses_fp16(toy):
    for extra in ([], ["--calib=calib"]):
        out = s4dexec(toy, "--onnx=toy.onnx", "--device=cpu", "--fp16", *extra, ok=False)
        assert "the CPU backend computes in float32 only" in out, out


def test_python_api_passes_the_precision_options(toy, monkeypatch):
    monkeypatch.setenv("S4D_TEST_BACKEND", "guarded")
    monkeypatch.setenv("S4D_FUSE_POINTWISE", "0")
    monkeypatch.delenv("S4D_GUARDED_NO_FP16", raising=False)
    import s4d.engine as se
    onnx_path = os.path.join(toy, "toy.onnx")
    e = se.build(onnx_path, device="cuda", fp16=True, calib_dir=os.path.join(toy, "calib"),
                 accuracy=0.02, output_tolerances={"energy": 5e-3},
                 layer_precisions={"tanh": "fp32"}, obey_precisions=True)
    rep = e.precision_report
    assert "relative L2 tolerance 0.02 per output ('energy' 0.005)" in rep, rep
    assert moved(rep) == ["exp_frag"], rep
    prec = {li["name"]: li["precision"] for li in e.layer_info()}
    assert prec["tanh"] == "float32" and prec["exp_frag"] == "float32"
    assert prec["relu"] == "float16" and prec["shift"] == "float16"
    x = np.load(os.path.join(toy, "x.npy"))
    z = np.load(os.path.join(toy, "z.npy"))
    outs = e.create_context().run({"x": x, "z": z})
    feat_ref, energy_ref = reference(toy, x, z)
    assert rel_l2(np.asarray(outs["feat"]), feat_ref) <= 2e-2
    assert rel_l2(np.asarray(outs["energy"]), energy_ref) <= 2e-2
    assert se.build(onnx_path, device="cuda").precision_report is None
    with pytest.raises(Exception, match="no such layer"):
        se.build(onnx_path, device="cuda", fp16=True, layer_precisions={"nosuch": "fp16"})
    with pytest.raises(Exception, match="is not 'fp32' or 'fp16'"):
        se.build(onnx_path, device="cuda", fp16=True, layer_precisions={"tanh": "half"})


def check_chain_guarded(toy, out, outdir):
    """The chain's guarded build: Exp and the Mul it feeds in float32, the benign layers in
    float16, y within 1e-2 of float64 (reported and measured)."""
    prec = precisions(out)
    assert prec["exp_mid"] == "float32" and prec["shrink"] == "float32", out
    for name in ("shift", "squash", "double", "offset"):
        assert prec[name] == "float16", (name, out)
    m = re.search(r"output 'y': rel_l2 before inf, after (\S+) \(tolerance 0.01\) ok", out)
    assert m and float(m.group(1)) <= 1e-2, out
    z = np.load(os.path.join(toy, "z_chain.npy")).astype(np.float64)
    want = np.sqrt(np.exp(z + 10.5) * np.float64(np.float32(1e-4))) * 2 + 0.5
    got = np.load(os.path.join(toy, outdir, "y.npy"))
    assert 0 < rel_l2(got, want) <= 1e-2


def test_guard_sees_through_views(toy):
    """The chain with Reshapes around its fragile pair: the Reshapes run as views (no
    kernel), and the guard, reading every layer's output through the context's hook, moves
    the same two layers as without them."""
    shutil.rmtree(os.path.join(toy, "out_views"), ignore_errors=True)
    out = s4dexec(toy, "--onnx=views.onnx", "--device=cuda", "--fp16", "--calib=calib_chain",
                  "--dumpLayerInfo", "--dumpProfile", "--iterations=2",
                  "--loadInputs=z:z_chain.npy", "--exportOutput=out_views")
    assert moved(out) == ["exp_mid", "shrink"], out
    views = [l for l in out.splitlines() if re.match(r"\s+\d+ ", l) and l.endswith(" view")]
    assert len(views) == 2 and "flatten_zc" in views[0] and "unflatten" in views[1], out
    check_chain_guarded(toy, out, "out_views")


def test_guard_moves_a_fragile_pair_in_the_middle(toy):
    shutil.rmtree(os.path.join(toy, "out_chain"), ignore_errors=True)
    out = s4dexec(toy, "--onnx=chain.onnx", "--device=cuda", "--fp16", "--calib=calib_chain",
                  "--dumpLayerInfo", "--loadInputs=z:z_chain.npy", "--exportOutput=out_chain")
    # Exp first (its float32 outputs pass float16's range); then the Mul it feeds, which
    # overflows on Exp's float32 output cast to float16 (an infinite amplification).
    assert moved(out) == ["exp_mid", "shrink"], out
    assert "'exp_mid' (iteration 1: its float32 outputs reach" in out, out
    assert "past float16's 65504" in out
    assert "'shrink' (iteration 2: its outputs' error inf" in out, out
    assert "3 calibration sets" in out
    assert "builds: 1 float32 reference + 3 fp16 candidates" in out, out
    check_chain_guarded(toy, out, "out_chain")


# ---- outputs whose rows follow a TopK (make_toy.main_topk) ----

TOPK_LAYERS = ["score_gain", "select", "pick", "rows_shape", "feat_scale", "feat_tanh"]


def topk_reference(toy, run):
    """float64: the rows of Tanh(f * w) in the order of the sorted scores s * 2 (make_toy's
    gain g)."""
    s = np.load(os.path.join(toy, run, "s.npy")).astype(np.float64)[0]
    f = np.load(os.path.join(toy, run, "f.npy")).astype(np.float64)
    w = np.load(os.path.join(toy, "topk_w.npy")).astype(np.float64)
    order = np.argsort(-s, kind="stable")[:12]
    return np.tanh(f * w)[order][None], 2.0 * s[order][None]


def assignment_rel_l2(got, want):
    """Relative L2 after the best pairing of rows (scipy's assignment, not the engine's)."""
    from scipy.optimize import linear_sum_assignment
    g = got.reshape(got.shape[-2], -1).astype(np.float64)
    w = want.reshape(want.shape[-2], -1)
    cost = ((w[:, None, :] - g[None, :, :]) ** 2).sum(-1)
    r, c = linear_sum_assignment(cost)
    return float(np.sqrt(cost[r, c].sum()) / np.linalg.norm(w))


def run_topk(toy, *args, outdir):
    shutil.rmtree(os.path.join(toy, outdir), ignore_errors=True)
    out = s4dexec(toy, "--onnx=topk.onnx", "--device=cuda", "--fp16", "--dumpLayerInfo",
                  "--loadInputs=s:topk_run/s.npy,f:topk_run/f.npy", "--exportOutput=" + outdir,
                  *args)
    rows = np.load(os.path.join(toy, outdir, "rows.npy"))
    top = np.load(os.path.join(toy, outdir, "top.npy"))
    return out, rows, top


def test_topk_inputs_have_near_ties(toy):
    for run in ("calib_topk/a", "calib_topk/b", "topk_run"):
        s = np.load(os.path.join(toy, run, "s.npy"))
        f = np.load(os.path.join(toy, run, "f.npy"))
        assert np.count_nonzero(f) == f.size and np.count_nonzero(s) == s.size
        top = np.sort(s[0])[::-1][:12]
        # Distinct in float32, one value in float16: float16 cannot order them.
        assert len(set(top.tolist())) == 12 and len(set(top.astype(np.float16).tolist())) == 1
        assert np.sort(s[0])[::-1][12] < 0.6


def test_topk_rows_are_matched_and_stay_fp16(toy):
    out, rows, top = run_topk(toy, "--calib=calib_topk", outdir="out_topk")
    assert moved(out) == [], out
    prec = precisions(out)
    for name in TOPK_LAYERS:
        assert prec[name] == "float16", (name, out)
    m = re.search(r"output 'rows': rel_l2 before (\S+), after (\S+) \(tolerance 0.01\) ok "
                  r"\[matched rows along axis 1: their order follows TopK 'select'; element by "
                  r"element (\S+) before", out)
    assert m, out
    assert float(m.group(1)) <= 1e-2 and float(m.group(3)) > 0.5, out
    assert re.search(r"output 'top': .*ok \[ordered\]", out), out
    assert re.search(r"output 'feat': .*ok \[ordered\]", out), out
    assert "builds: 1 float32 reference + 1 fp16 candidate" in out
    want_rows, want_top = topk_reference(toy, "topk_run")
    # float16 returned the same rows in another order.
    assert rel_l2(rows, want_rows) > 0.5
    assert 0 < assignment_rel_l2(rows, want_rows) <= 1e-2
    assert 0 < rel_l2(top, want_top) <= 1e-2


def test_topk_rows_forced_ordered_moves_the_selection(toy):
    out, rows, top = run_topk(toy, "--calib=calib_topk", "--accuracy=rows:ordered",
                              outdir="out_topk_ordered")
    got = moved(out)
    # The scores that decide the order must be float32: the TopK and what feeds it.
    assert "select" in got and "score_gain" in got, out
    prec = precisions(out)
    assert prec["select"] == "float32" and prec["score_gain"] == "float32", out
    m = re.search(r"output 'rows': rel_l2 before (\S+), after (\S+) \(tolerance 0.01\) ok "
                  r"\[ordered, as asked\]", out)
    assert m and float(m.group(1)) > 0.5 and float(m.group(2)) <= 1e-2, out
    want_rows, _ = topk_reference(toy, "topk_run")
    assert rel_l2(rows, want_rows) <= 1e-2


def test_topk_metric_options(toy):
    out = s4dexec(toy, "--onnx=topk.onnx", "--device=cuda", "--fp16", "--calib=calib_topk",
                  "--accuracy=0.05,rows:0.02:matched,feat:matched,top:auto")
    assert "relative L2 tolerance 0.05 per output ('rows' 0.02)" in out, out
    assert re.search(r"output 'rows': .*\(tolerance 0.02\) ok \[matched rows along axis 1, as "
                     r"asked: their order follows TopK 'select'", out), out
    # feat has no selection: asked to match, its rows are the first axis longer than 1.
    assert re.search(r"output 'feat': .*\(tolerance 0.05\) ok \[matched rows along axis 0, as "
                     r"asked;", out), out
    # auto is the default: the sorted values compare element by element.
    assert re.search(r"output 'top': .*\(tolerance 0.05\) ok \[ordered\]", out), out


@pytest.mark.parametrize("args,msg", [
    (["--accuracy=matched"], "--accuracy: 'matched' needs an output name (name:matched)"),
    (["--accuracy=:matched"], "--accuracy: an item has no output name before ':'"),
    (["--accuracy=nosuch:matched"],
     "accuracy metric for output 'nosuch': the network has no such output"),
    (["--accuracy=rows:0:matched"], "--accuracy: rows: '0' is not a relative L2 tolerance"),
])
def test_bad_metric_options_fail_clearly(toy, args, msg):
    out = s4dexec(toy, "--onnx=topk.onnx", "--device=cuda", "--fp16", "--calib=calib_topk", *args,
                  ok=False)
    assert msg in out, out


def test_python_api_passes_the_output_metrics(toy, monkeypatch):
    monkeypatch.setenv("S4D_TEST_BACKEND", "guarded")
    monkeypatch.setenv("S4D_FUSE_POINTWISE", "0")
    monkeypatch.delenv("S4D_GUARDED_NO_FP16", raising=False)
    import s4d.engine as se
    path = os.path.join(toy, "topk.onnx")
    calib = os.path.join(toy, "calib_topk")
    rep = se.build(path, device="cuda", fp16=True, calib_dir=calib).precision_report
    assert moved(rep) == [] and "their order follows TopK 'select'" in rep, rep
    rep = se.build(path, device="cuda", fp16=True, calib_dir=calib,
                   output_metrics={"rows": "ordered"}).precision_report
    assert "select" in moved(rep) and "[ordered, as asked]" in rep, rep
    with pytest.raises(Exception, match="is not 'ordered', 'matched' or 'auto'"):
        se.build(path, device="cuda", fp16=True, calib_dir=calib, output_metrics={"rows": "set"})
    with pytest.raises(Exception, match="accuracy metric for output 'nosuch'"):
        se.build(path, device="cuda", fp16=True, calib_dir=calib,
                 output_metrics={"nosuch": "matched"})


# ---- a selection whose scores lose their digits in float16 (make_toy.main_selection) ----

SCORE_PATH = ["score_shift", "score_unshift", "select"]
FEATURE_PATH = ["feat_scale", "feat_tanh", "pick", "rows_shape"]


def selection_reference(toy, run, weights="sel_w.npy"):
    """float64: the rows of Tanh(f * w) selected by the top 12 scores, best first."""
    s = np.load(os.path.join(toy, run, "s.npy")).astype(np.float64)[0]
    f = np.load(os.path.join(toy, run, "f.npy")).astype(np.float64)
    w = np.load(os.path.join(toy, weights)).astype(np.float64)
    order = np.argsort(-s, kind="stable")[:12]
    return np.tanh(f * w)[order][None]


def run_selection(toy, *args, outdir, ok=True):
    shutil.rmtree(os.path.join(toy, outdir), ignore_errors=True)
    out = s4dexec(toy, "--onnx=selection.onnx", "--device=cuda", "--fp16", "--dumpLayerInfo",
                  "--loadInputs=s:sel_run/s.npy,f:sel_run/f.npy", "--exportOutput=" + outdir,
                  *args, ok=ok, S4D_BUILD_LOG="1")
    path = os.path.join(toy, outdir, "rows.npy")
    return out, (np.load(path) if ok else None)


def test_selection_inputs_tie_in_float16(toy):
    """The k-th and (k+1)-th scores are 0.01 apart in float32 and one value once 64 is
    added in float16, so float16 selects the (k+1)-th row (the lower index)."""
    for run in ("calib_sel/a", "calib_sel/b", "sel_run"):
        s = np.load(os.path.join(toy, run, "s.npy"))[0]
        f = np.load(os.path.join(toy, run, "f.npy"))
        assert np.count_nonzero(f) == f.size and np.count_nonzero(s) == s.size
        srt = np.sort(s.astype(np.float64))[::-1]
        assert abs(srt[11] - srt[12] - 0.01) < 1e-6 and srt[10] - srt[11] > 0.1
        big = (s.astype(np.float16) + np.float16(64)).astype(np.float16)
        assert big[s == srt[11]][0] == big[s == srt[12]][0]
        assert len(set(np.argsort(-s, kind="stable")[:12]) -
                   set(np.argsort(-big.astype(np.float32), kind="stable")[:12])) == 1


def test_float16_selection_picks_another_row(toy):
    out, rows = run_selection(toy, outdir="out_sel_nocalib")
    assert set(precisions(out)[n] for n in SCORE_PATH + FEATURE_PATH) == {"float16"}, out
    want = selection_reference(toy, "sel_run")
    # One of the 12 rows is another row: the pairing cannot hide it.
    assert assignment_rel_l2(rows, want) > 0.1


def test_guard_moves_the_score_path_of_a_changed_selection(toy):
    out, rows = run_selection(toy, "--calib=calib_sel", outdir="out_sel")
    got = moved(out)
    # The two layers of the cancellation must be float32; nothing off the score path moves.
    assert "score_shift" in got and "score_unshift" in got, out
    assert set(got) <= set(SCORE_PATH), out
    prec = precisions(out)
    for name in FEATURE_PATH:
        assert prec[name] == "float16", (name, out)
    assert ("iteration 0: output 'rows': TopK 'select' selects 1 of its 12 rows other than "
            "float32 (float32's k-th and (k+1)-th scores 0.01 apart at 0.515") in out, out
    assert "the layers computing those scores go first" in out, out
    assert "on the score path of TopK 'select'" in out, out
    m = re.search(r"output 'rows': rel_l2 before (\S+), after (\S+) \(tolerance 0.01\) ok "
                  r"\[matched rows along axis 1: their order follows TopK 'select'", out)
    assert m and float(m.group(1)) > 0.1 and float(m.group(2)) <= 1e-2, out
    # Against float64: the same rows, rounded to float16.
    want = selection_reference(toy, "sel_run")
    assert 0 < assignment_rel_l2(rows, want) <= 1e-2


def test_selection_that_no_move_fixes_stops_early(toy):
    """score_shift pinned to fp16: s + 64 is rounded to float16 whatever the guard does, so
    the 12th and 13th scores tie and the wrong row stays selected. The guard moves the
    rest of the score path, sees no improvement and stops with a message naming the output,
    the TopK and the float32 margin, instead of moving the feature path."""
    out, _ = run_selection(toy, "--calib=calib_sel", "--layerPrecisions=score_shift:fp16",
                           outdir="out_sel_stop", ok=False)
    assert re.search(r"fp16 accuracy guard: output 'rows' stays at rel_l2 \S+ above its "
                     r"tolerance 0.01 \(2 iterations without improvement, 2 layers moved to "
                     r"fp32\): the error comes from a selection near a tie: TopK 'select' selects "
                     r"1 of its 12 rows other than float32 \(float32's k-th and \(k\+1\)-th "
                     r"scores 0.01 apart at 0.515, float16 moves them by \S+\)\. Accept it with "
                     r"--accuracy=rows:inf, or build without fp16", out), out
    assert "--accuracy=rows:inf" in out, out
    assert "moving 'score_unshift'" in out and "moving 'select'" in out, out
    assert "moving 'feat" not in out and "moving 'pick'" not in out, out
    # Accepting it: the output is measured and reported, never acted on.
    out, rows = run_selection(toy, "--calib=calib_sel", "--layerPrecisions=score_shift:fp16",
                              "--accuracy=rows:inf", outdir="out_sel_inf")
    assert moved(out) == [], out
    assert re.search(r"output 'rows': .*\(tolerance inf\) ok .*TopK 'select' selects 1 of its "
                     r"12 rows other than float32", out), out
    assert assignment_rel_l2(rows, selection_reference(toy, "sel_run")) > 0.1


def test_a_stalled_selection_moves_the_whole_score_path(toy):
    """Six (s + 64) - 64 pairs before the TopK: while any pair is float16 the scores tie, so
    moving the highest-ranked layers helps nothing for three iterations; the guard then
    moves the rest of the score path at once and the selection is float32's. The feature
    path stays float16, and the rows match a float64 reference."""
    shutil.rmtree(os.path.join(toy, "out_sel_long"), ignore_errors=True)
    out = s4dexec(toy, "--onnx=selection_long.onnx", "--device=cuda", "--fp16", "--dumpLayerInfo",
                  "--calib=calib_sel_long", "--loadInputs=s:sel_long_run/s.npy,f:sel_long_run/f.npy",
                  "--exportOutput=out_sel_long", S4D_BUILD_LOG="1")
    assert re.search(r"iteration \d+: moving the \d+ float16 layers? left on the score path of "
                     r"TopK 'select' at once", out), out
    prec = precisions(out)
    for i in range(6):
        assert prec[f"score_shift{i}"] == "float32" and prec[f"score_unshift{i}"] == "float32", out
    for name in ("feat_scale", "feat_tanh", "pick"):
        assert prec[name] == "float16", (name, out)
    assert "stays at rel_l2" not in out, out
    rows = np.load(os.path.join(toy, "out_sel_long", "rows.npy"))
    ref = selection_reference(toy, "sel_long_run", "sel_long_w.npy")
    assert 0 < assignment_rel_l2(rows, ref) < 1e-2
