"""bench/plan_paths.py: the longest chain of dependent kernels, counted and by measured times,
on hand-made layer lists, and its reading of an s4dexec --dumpProfile listing."""

from engine_util import repo_module


def _script():
    return repo_module("bench/plan_paths.py")


def _layer(name, ins, outs, view=False):
    return {"name": name, "op": name.upper(), "is_view": view, "inputs": ins, "outputs": outs}


# x -> a -> b -> c -> y (three short kernels) and x -> v (a view) -> d -> y (one long kernel);
# e joins both branches.
LAYERS = [
    _layer("a", ["x"], ["ta"]),
    _layer("b", ["ta"], ["tb"]),
    _layer("c", ["tb"], ["tc"]),
    _layer("v", ["x"], ["tv"], view=True),
    _layer("d", ["tv"], ["td"]),
    _layer("e", ["tc", "td"], ["y"]),
]
TIMES = {"a": 0.010, "b": 0.010, "c": 0.010, "d": 0.050, "e": 0.010}


def test_counted_and_timed_chains_differ():
    mod = _script()
    kernels, path = mod.chain(LAYERS)
    assert kernels == 5
    assert [l["name"] for l in path] == ["a", "b", "c", "e"]
    total, tpath = mod.longest(LAYERS, lambda l: TIMES.get(l["name"], 0.0))
    assert abs(total - 0.060) < 1e-12
    assert [l["name"] for l in tpath] == ["d", "e"]
    # 8 us off each kernel: a, b, c and e now weigh 2 us each, d 42.
    net, npath = mod.longest(LAYERS, lambda l: max(0.0, TIMES.get(l["name"], 0.0) - 0.008))
    assert abs(net - 0.044) < 1e-12
    assert [l["name"] for l in npath] == ["d", "e"]


def test_profile_listing(tmp_path):
    mod = _script()
    f = tmp_path / "profile.txt"
    f.write_text("[load] head.s4d: 3 layers\n"
                 "[latency] 30 iterations (after 5 warm-up): min 1.0 ms, median 1.1 ms\n"
                 "[profile] mean time per layer over 30 iterations\n"
                 "    0 /head/Sub                    Sub                                 0.0077 ms   0.1%\n"
                 "    1 /head/anchor_encoder/pos_fc/pos_fc.9_1/MatMul FusedMLP                0.0400 ms   0.6%\n"
                 "    2 /head/Unsqueeze              Unsqueeze                           0.0000 ms   0.0%\n"
                 "  total 0.0477 ms\n")
    times = mod.parse_profile(str(f))
    assert times == {"/head/Sub": 0.0077, "/head/anchor_encoder/pos_fc/pos_fc.9_1/MatMul": 0.04,
                     "/head/Unsqueeze": 0.0}


def test_refuses_a_profile_it_cannot_use(tmp_path, capsys):
    mod = _script()
    empty = tmp_path / "empty.txt"
    empty.write_text("[latency] 30 iterations: median 1.0 ms\n")
    assert mod.main(["model.onnx", "--profile", str(empty)]) == 1
    assert "has no layer lines" in capsys.readouterr().err
    assert mod.main(["model.onnx", "--profile", str(tmp_path / "missing.txt")]) == 1
    assert "cannot read the profile" in capsys.readouterr().err
