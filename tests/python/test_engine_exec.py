"""Agreement with s4dexec: the Python API and python3 -m s4d.exec against
build/bin/s4dexec on the same ONNX models and inputs. Outputs must be equal
byte for byte, engine files identical, layer dumps and comparison lines the
same text, and every bad command line the same one-line error."""
import os
import subprocess
import sys

import numpy as np
import pytest

import engine_util as u
import s4d.engine as se
import s4d.exec as s4d_exec


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    u.require_build()
    assert os.path.isfile(u.S4DEXEC), f"{u.S4DEXEC} is missing: build the project first"
    return u.write_models(str(tmp_path_factory.mktemp("engine_exec_models")))


def _env(extra=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(u.REPO, "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("S4D_BUILD", u.BUILD)
    e.update(extra or {})
    return e


def s4dexec(*args, env=None):
    return subprocess.run([u.S4DEXEC, *args], capture_output=True, text=True, timeout=120,
                          env=_env(env))


def pyexec(*args, env=None):
    return subprocess.run([sys.executable, "-m", "s4d.exec", *args], capture_output=True,
                          text=True, timeout=120, env=_env(env))


def _outputs(d):
    return {f[:-4]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d))}


def _same_bytes(a, b):
    assert a.keys() == b.keys() and a
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
        assert a[k].tobytes() == b[k].tobytes(), k


def _save_inputs(engine, d, seed):
    """Non-trivial inputs as .npy files (not s4dexec's generator: its own draws)."""
    rng = np.random.default_rng(seed)
    spec = []
    for s in engine.inputs:
        if s.dtype == "bool":
            a = rng.random(s.shape) < 0.5
        elif s.dtype.startswith("int"):
            a = rng.integers(-50, 50, s.shape).astype(s.dtype)
        else:
            a = rng.uniform(-2, 2, s.shape).astype(s.dtype)
        path = os.path.join(d, f"in_{s.name}.npy")
        np.save(path, a)
        spec.append(f"{s.name}:{path}")
    return ",".join(spec)


@pytest.mark.parametrize("name", ["da", "dtypes", "mlp"])
def test_python_api_and_s4d_exec_agree_with_s4dexec_bit_for_bit(models, tmp_path, name):
    onnx_path = os.path.join(models, name + ".onnx")
    common = [f"--plugins={u.PLUGINS}", "--iterations=1", "--warmUp=0"]
    engine = se.build(onnx_path, plugins=u.PLUGINS)
    loads = _save_inputs(engine, str(tmp_path), seed=len(name))
    c = s4dexec(f"--onnx={onnx_path}", f"--loadInputs={loads}", f"--saveEngine={tmp_path}/c.s4de",
                f"--exportOutput={tmp_path}/c", *common)
    assert c.returncode == 0, c.stderr
    p = pyexec(f"--onnx={onnx_path}", f"--loadInputs={loads}", f"--saveEngine={tmp_path}/p.s4de",
               f"--exportOutput={tmp_path}/p", *common)
    assert p.returncode == 0, p.stderr
    want = _outputs(f"{tmp_path}/c")
    _same_bytes(_outputs(f"{tmp_path}/p"), want)
    # the same engine file from both
    data = open(f"{tmp_path}/c.s4de", "rb").read()
    assert open(f"{tmp_path}/p.s4de", "rb").read() == data == engine.serialize()
    # the API on s4dexec's engine file, with the same .npy inputs
    ins = {e.split(":")[0]: np.load(e.split(":", 1)[1]) for e in loads.split(",")}
    with se.Engine.load(f"{tmp_path}/c.s4de", plugins=u.PLUGINS) as loaded:
        got = loaded.create_context().run(ins)
    _same_bytes({k: v for k, v in got.items()}, want)
    # and s4dexec on the engine the Python API saved
    engine.save(f"{tmp_path}/api.s4de")
    c2 = s4dexec(f"--loadEngine={tmp_path}/api.s4de", f"--loadInputs={loads}",
                 f"--exportOutput={tmp_path}/c2", *common)
    assert c2.returncode == 0, c2.stderr
    _same_bytes(_outputs(f"{tmp_path}/c2"), want)


@pytest.mark.parametrize("seed", [1, 12345])
def test_generated_inputs_agree(models, tmp_path, seed):
    onnx_path = os.path.join(models, "dtypes.onnx")
    args = [f"--onnx={onnx_path}", f"--seed={seed}", "--iterations=1", "--warmUp=0"]
    assert s4dexec(*args, f"--exportOutput={tmp_path}/c").returncode == 0
    assert pyexec(*args, f"--exportOutput={tmp_path}/p").returncode == 0
    want = _outputs(f"{tmp_path}/c")
    _same_bytes(_outputs(f"{tmp_path}/p"), want)
    engine = se.build(onnx_path)
    got = engine.create_context().run(se.random_inputs(engine, seed=seed))
    _same_bytes(got, want)
    # some inputs loaded, the others generated: the draws skip the loaded ones
    np.save(tmp_path / "i.npy", np.arange(12).reshape(3, 4))
    args.append(f"--loadInputs=i:{tmp_path}/i.npy")
    assert s4dexec(*args, f"--exportOutput={tmp_path}/c3").returncode == 0
    assert pyexec(*args, f"--exportOutput={tmp_path}/p3").returncode == 0
    _same_bytes(_outputs(f"{tmp_path}/p3"), _outputs(f"{tmp_path}/c3"))


def test_device_cuda_on_the_guarded_device_agrees(models, tmp_path):
    env = {"S4D_TEST_BACKEND": "guarded", "S4D_GUARDED_DECLINE": "Softmax"}
    args = [f"--onnx={os.path.join(models, 'mlp.onnx')}", "--device=cuda", "--allowFallback",
            "--iterations=2", "--warmUp=1", "--dumpLayerInfo"]
    c = s4dexec(*args, f"--exportOutput={tmp_path}/c", env=env)
    p = pyexec(*args, f"--exportOutput={tmp_path}/p", env=env)
    assert c.returncode == 0 and p.returncode == 0, c.stderr + p.stderr
    _same_bytes(_outputs(f"{tmp_path}/p"), _outputs(f"{tmp_path}/c"))
    dump = lambda out: [l for l in out.splitlines()  # noqa: E731
                        if l.startswith(("[engine]", "[layers]", "  ", "[memory]"))]
    assert dump(p.stdout) == dump(c.stdout) and "copy h2 -> cpu" in p.stdout


def test_layer_dump_profile_and_compare_lines(models, tmp_path):
    onnx_path = os.path.join(models, "da.onnx")
    base = [f"--onnx={onnx_path}", f"--plugins={u.PLUGINS}", "--iterations=3", "--warmUp=1"]
    c = s4dexec(*base, "--dumpLayerInfo", "--verbose", "--dumpProfile", f"--exportOutput={tmp_path}/ref")
    p = pyexec(*base, "--dumpLayerInfo", "--verbose", "--dumpProfile")
    assert c.returncode == 0 and p.returncode == 0, c.stderr + p.stderr

    def block(out, first, last):
        lines = out.splitlines()
        i = next(k for k, l in enumerate(lines) if l.startswith(first))
        j = next(k for k, l in enumerate(lines) if l.startswith(last))
        return lines[i:j + 1]
    assert block(p.stdout, "[engine]", "[memory]") == block(c.stdout, "[engine]", "[memory]")
    assert block(p.stdout, "[plugins] 2", "  namespace 'custom'") == \
        block(c.stdout, "[plugins] 2", "  namespace 'custom'")
    assert "[inputs] feat_in <- random (seed 1)" in p.stdout
    prof = block(p.stdout, "[profile]", "  total")
    assert len(prof) == 2 + 8 and "s4d::DeformableAggregation:1" in prof[-2]
    # the listing's reader (the bench scripts'), on both tools' listings
    rows_p, rows_c = s4d_exec.read_profile(p.stdout), s4d_exec.read_profile(c.stdout)
    assert [r[:3] for r in rows_p] == [r[:3] for r in rows_c]
    assert [r[0] for r in rows_p] == list(range(8)) and rows_p[-1][2] == "s4d::DeformableAggregation:1"
    for out, rows in ((p.stdout, rows_p), (c.stdout, rows_c)):
        total = float(block(out, "[profile]", "  total")[-1].split()[1])
        assert all(r[3] >= 0 for r in rows) and abs(sum(r[3] for r in rows) - total) < 1e-3
    assert p.stdout.rstrip().endswith("[done] PASSED")
    # --compareOutputs: pass, then fail on a perturbed reference, same lines as s4dexec
    ok = [pyexec(*base, f"--compareOutputs={tmp_path}/ref"),
          s4dexec(*base, f"--compareOutputs={tmp_path}/ref")]
    assert [r.returncode for r in ok] == [0, 0]
    cmp = lambda r: [l for l in r.stdout.splitlines() if l.startswith("[compare]")]  # noqa: E731
    assert cmp(ok[0]) == cmp(ok[1]) and "ok" in cmp(ok[0])[-1]
    ref = np.load(f"{tmp_path}/ref/out.npy")
    ref.reshape(-1)[7] += 0.01
    np.save(f"{tmp_path}/ref/out.npy", ref)
    bad = [pyexec(*base, f"--compareOutputs={tmp_path}/ref", "--rtol=0.001"),
           s4dexec(*base, f"--compareOutputs={tmp_path}/ref", "--rtol=0.001")]
    assert [r.returncode for r in bad] == [1, 1]
    assert cmp(bad[0]) == cmp(bad[1]) and "FAIL" in cmp(bad[0])[-1]
    errs = [r.stderr.strip().split("error: ", 1)[1] for r in bad]
    assert errs[0] == errs[1] and "first at flat index 7" in errs[0]


def test_layer_dump_shows_the_kernel_plans(tmp_path):
    """A convolution and an inverted residual block: each CPU layer's plan, in both dumps."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    w = {"w0": (16, 3, 3, 3), "w1": (48, 16, 1, 1), "w2": (48, 1, 3, 3), "w3": (16, 48, 1, 1)}
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, s).astype(np.float32), k) for k, s in w.items()]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], name="stem", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["e"], name="expand"),
             helper.make_node("Relu", ["e"], ["er"], name="expand_relu"),
             helper.make_node("Conv", ["er", "w2"], ["d"], name="dw", group=48, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d", "w3"], ["y"], name="project")]
    g = helper.make_graph(nodes, "plans", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    path = str(tmp_path / "plans.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    args = [f"--onnx={path}", "--iterations=1", "--warmUp=0", "--dumpLayerInfo"]
    c, p = s4dexec(*args), pyexec(*args)
    assert c.returncode == 0 and p.returncode == 0, c.stderr + p.stderr
    layers = lambda out: [l for l in out.splitlines() if l.startswith("  ")]  # noqa: E731
    assert layers(p.stdout) == layers(c.stdout)
    ops = {l.split()[2]: l for l in layers(c.stdout)}
    assert set(ops) == {"Conv", "FusedMBConv"}, layers(c.stdout)
    assert " plan: " in ops["Conv"] and " plan: mbconv " in ops["FusedMBConv"]
    info = {li["op"]: li["kernel_info"] for li in se.build(path).layer_info()}
    assert info["FusedMBConv"].startswith("mbconv ") and info["Conv"]


def test_bad_command_lines_fail_like_s4dexec(models, tmp_path, capsys):
    m = os.path.join(models, "mlp.onnx")
    engine_file = str(tmp_path / "mlp.s4de")
    se.build(m).save(engine_file)
    cases = [
        ["--bogus"], [], ["--onnx=a", "--loadEngine=b"], [f"--onnx={m}", "--device=tpu"],
        [f"--onnx={m}", "--iterations=0"], [f"--onnx={m}", "--warmUp=-1"],
        [f"--onnx={m}", "--threads=x"], [f"--onnx={m}", "--seed=-3"],
        [f"--onnx={m}", "--graphStreams=0"], [f"--onnx={m}", "--graphStreams=9"],
        [f"--onnx={m}", "--loadInputs=x:a.npy,,y:b.npy"], [f"--onnx={m}", "--loadInputs="],
        [f"--onnx={m}", "--loadInputs=x:a.npy,x:b.npy"], [f"--onnx={m}", "--loadInputs=q:a.npy"],
        [f"--onnx={m}", "--loadInputs=x:/nonexistent.npy"],
        [f"--onnx={m}", f"--loadInputs=x:{os.path.join(models, 'mlp_w1.npy')}"],
        [f"--onnx={m}", "--rtol=-1"], [f"--onnx={m}", "--atol=inf"], [f"--onnx={m}", "--rtol=x"],
        [f"--onnx={m}", "--shapes=x"], [f"--onnx={m}", "--shapes=x:2x,x:3"],
        [f"--onnx={m}", "--shapes=x:"], [f"--onnx={m}", "--shapes=x:2xa"],
        [f"--onnx={m}", "--shapes=q:2x3"], [f"--onnx={m}", "--shapes=x:3x3"],
        [f"--onnx={m}", "--plugins=/nonexistent.so"],
        [f"--onnx={os.path.join(models, 'dynamic.onnx')}"],
        [f"--onnx={str(tmp_path / 'none.onnx')}"], [f"--onnx={tmp_path}"],
        [f"--loadEngine={m}"], [f"--loadEngine={engine_file}", "--fp16"],
        [f"--loadEngine={engine_file}", "--shapes=x:2x3"],
        [f"--loadEngine={engine_file}", "--device=cuda"],
        [f"--onnx={m}", "--fp16"], [f"--onnx={m}", f"--saveEngine={tmp_path}/no/dir/e.s4de"],
        [f"--onnx={m}", f"--exportOutput={m}/sub"],
        [f"--onnx={m}", f"--compareOutputs={tmp_path}/nothing"],
    ]
    # in this process (fast); the plugin registry's state shows in the messages of
    # the models below, so they run in fresh processes like s4dexec's
    fresh = [[f"--onnx={os.path.join(models, 'unsupported.onnx')}"],
             [f"--onnx={os.path.join(models, 'da_missing_plugin.onnx')}"]]
    for args in cases + fresh:
        c = s4dexec(*args)
        if args in fresh:
            p = pyexec(*args)
            rc, err = p.returncode, p.stderr
        else:
            capsys.readouterr()
            rc = s4d_exec.main(args)
            err = capsys.readouterr().err
        assert c.returncode == 1 and rc == 1, (args, c.stderr, err)
        assert len(err.splitlines()) == 1, (args, err)
        assert err.startswith("s4d.exec: error: "), (args, err)
        assert err.replace("s4d.exec: ", "") == c.stderr.replace("s4dexec: ", ""), args
    h = pyexec("--help")
    assert h.returncode == 0 and "--loadInputs" in h.stdout and not h.stderr
