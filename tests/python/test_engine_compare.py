"""s4d.engine.compare: the metrics against independent implementations
(np.isclose, np.linalg.norm, torch's cosine similarity) on random data, the
special values, and engine-vs-reference runs (torch.nn.Module, ONNX file,
Engine, dict) that must pass, and perturbed ones that must fail."""
import os

import numpy as np
import pytest
import torch

import engine_util as u
import s4d.engine as se
from s4d.engine import compare, compare_outputs


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    u.require_build()
    return u.write_models(str(tmp_path_factory.mktemp("engine_cmp_models")))


def test_metrics_match_independent_implementations():
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(1, 500))
        want = rng.normal(0, rng.uniform(0.1, 10), n).astype(np.float32)
        got = (want + rng.normal(0, 10.0 ** rng.uniform(-7, -2), n)).astype(np.float32)
        rtol, atol = 10.0 ** rng.uniform(-6, -2), 10.0 ** rng.uniform(-8, -3)
        r = compare_outputs({"o": got}, {"o": want}, rtol=rtol, atol=atol)["o"]
        g, w = got.astype(np.float64), want.astype(np.float64)
        close = np.isclose(g, w, rtol=rtol, atol=atol)
        assert r.bad == int((~close).sum()) and r.passed == bool(close.all())
        assert r.first_bad == (int(np.flatnonzero(~close)[0]) if r.bad else -1)
        assert r.max_abs == np.abs(g - w).max()
        assert r.rel_l2 == pytest.approx(np.linalg.norm(g - w) / np.linalg.norm(w), rel=1e-12)
        cos = torch.nn.functional.cosine_similarity(torch.from_numpy(g), torch.from_numpy(w),
                                                    dim=0, eps=1e-300)
        assert r.cosine == pytest.approx(float(cos), abs=1e-12)
        assert r.count == n and r.rtol == rtol and r.atol == atol


def test_special_values_integers_and_problems():
    nan, inf = float("nan"), float("inf")
    cases = [  # got, want, passes
        ([1.0, nan, inf, -inf], [1.0, nan, inf, -inf], True),
        ([1.0, nan], [1.0, 1.0], False),
        ([1.0, 1.0], [1.0, nan], False),
        ([inf], [-inf], False),
        ([inf], [1e30], False),
        ([0.0, 0.0], [0.0, 0.0], True),
    ]
    for got, want, ok in cases:
        r = compare_outputs({"o": np.array(got, np.float32)}, {"o": np.array(want, np.float32)})
        assert r.passed is ok, (got, want)
    z = compare_outputs({"o": np.zeros(3)}, {"o": np.zeros(3)})["o"]
    assert z.rel_l2 == 0 and z.cosine == 1
    z = compare_outputs({"o": np.ones(3)}, {"o": np.zeros(3)}, atol=2)["o"]
    assert z.rel_l2 == float("inf") and z.cosine == 0 and z.passed
    ints = compare_outputs({"i": np.array([5, 7]), "b": np.array([True, False])},
                           {"i": np.array([5, 8]), "b": np.array([True, True])}, rtol=1, atol=10)
    assert not ints["i"].passed and ints["i"].bad == 1 and ints["i"].first_bad == 1
    assert not ints["b"].passed
    shape = compare_outputs({"o": np.zeros((2, 3))}, {"o": np.zeros((3, 2))})["o"]
    assert not shape.passed and "shape [2, 3], the reference has [3, 2]" in shape.problem
    dt = compare_outputs({"o": np.zeros(2, np.int32)}, {"o": np.zeros(2, np.float32)})["o"]
    assert not dt.passed and "dtype int32" in dt.problem
    miss = compare_outputs({}, {"o": np.zeros(2)})
    assert not miss.passed and "missing" in miss["o"].problem
    t = compare_outputs({"o": torch.ones(3, dtype=torch.bfloat16)}, {"o": np.ones(3, np.float32)})
    assert t.passed
    with pytest.raises(se.InvalidArgumentError, match="rtol"):
        compare_outputs({"o": np.zeros(1)}, {"o": np.zeros(1)}, rtol=-1)
    with pytest.raises(se.InvalidArgumentError, match="atol"):
        compare_outputs({"o": np.zeros(1)}, {"o": np.zeros(1)}, atol=float("inf"))


def test_per_output_tolerances_and_report():
    want = {"a": np.array([1.0, 2.0]), "b": np.array([1.0, 2.0])}
    got = {"a": np.array([1.0, 2.01]), "b": np.array([1.0, 2.0001])}
    r = compare_outputs(got, want, rtol={"a": 1e-2, "*": 1e-5}, atol=0)
    assert r["a"].passed and not r["b"].passed and not r and len(r) == 2
    with pytest.raises(AssertionError) as info:
        r.assert_ok()
    text = str(info.value)
    assert "[compare] a" in text and "FAIL" in text
    assert "output 'b': 1 of 2 elements outside tolerance (first at flat index 1" in text
    assert compare_outputs(got, want, rtol=1e-2).assert_ok().passed
    assert "worst rel_l2" in repr(r) and [o.name for o in r] == ["a", "b"]
    with pytest.raises(KeyError):
        r["c"]


class _MLP(torch.nn.Module):
    """The mlp test model in PyTorch, from the same weights."""

    def __init__(self, models, bias_shift=0.0):
        super().__init__()
        self.w1 = torch.from_numpy(np.load(os.path.join(models, "mlp_w1.npy")))
        self.b1 = torch.from_numpy(np.load(os.path.join(models, "mlp_b1.npy"))) + bias_shift

    def forward(self, x):
        h = x @ self.w1
        y = torch.softmax(h + self.b1, -1).reshape(4, 2).t()
        return y, h + 2 * self.b1


def test_engine_against_a_module_an_onnx_file_an_engine_and_a_dict(models):
    path = os.path.join(models, "mlp.onnx")
    engine = se.build(path)
    x = {"x": np.random.default_rng(1).uniform(-1, 1, (2, 3)).astype(np.float32)}
    r = compare(engine, _MLP(models), x)
    assert r.passed and r.worst_rel_l2 < 1e-6 and [o.name for o in r] == ["y", "z"]
    r.assert_ok()
    exact = compare(engine, path, x)  # the ONNX file through the engine on the CPU
    assert exact.passed and all(o.max_abs == 0 for o in exact)
    assert compare(engine, se.build(path), x).passed
    assert compare(path, _MLP(models), x).passed  # the engine side from a path
    want = {k: v.double().numpy() for k, v in zip(("y", "z"), _MLP(models)(
        torch.from_numpy(x["x"])))}
    assert compare(engine, want, x).passed
    # only the outputs named
    assert [o.name for o in compare(engine, {"z": want["z"]}, x)] == ["z"]
    assert [o.name for o in compare(engine, _MLP(models), x, outputs=["y"])] == ["y"]
    # a module returning a dict, and torch inputs
    r = compare(engine, lambda t: {"y": _MLP(models)(t)[0], "z": _MLP(models)(t)[1]},
                {"x": torch.from_numpy(x["x"])})
    assert r.passed


def test_a_wrong_reference_fails_and_says_where(models):
    engine = se.build(os.path.join(models, "mlp.onnx"))
    x = {"x": np.random.default_rng(2).uniform(-1, 1, (2, 3)).astype(np.float32)}
    r = compare(engine, _MLP(models, bias_shift=1e-3), x)
    assert not r.passed and not r["z"].passed and r["z"].bad == 8
    assert r["z"].max_abs == pytest.approx(2e-3, rel=1e-3)
    with pytest.raises(AssertionError, match="output 'z': 8 of 8 elements"):
        r.assert_ok()
    with pytest.raises(se.InvalidArgumentError, match="returned 1 outputs; the engine has 2"):
        compare(engine, lambda t: t, x)
    with pytest.raises(se.InvalidArgumentError, match="reference must be"):
        compare(engine, 42, x)


def test_generated_inputs_are_s4dexecs(models):
    engine = se.build(os.path.join(models, "da.onnx"), plugins=u.PLUGINS)
    ctx = engine.create_context()
    seen = {}

    def ref(*args):
        seen["args"] = args
        return ctx.run(dict(zip([s.name for s in engine.inputs], args)))["out"]
    r = compare(engine, ref, seed=3)
    assert r.passed and all(o.max_abs == 0 for o in r)
    gen = se.random_inputs(engine, seed=3)
    for (name, want), got in zip(gen.items(), seen["args"]):
        assert np.array_equal(got.numpy(), want), name
    partial = se.random_inputs(engine, seed=3, given={"feat_in": None})
    assert list(partial) == ["query", "sampling_location"]
    # the state draws continue from the first generated input, as in s4dexec
    assert not np.array_equal(partial["query"], gen["query"])
    with pytest.raises(se.InvalidArgumentError, match="seed"):
        se.random_inputs(engine, seed=-1)
