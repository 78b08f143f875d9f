"""Threads: one engine shared, one context per thread. Every result of the
threaded runs equals, bit for bit, the same run made alone beforehand."""
import os
import threading

import numpy as np
import pytest

import engine_util as u
import s4d.engine as se


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    u.require_build()
    return u.write_models(str(tmp_path_factory.mktemp("engine_thread_models")))


def _run_threads(fns):
    errors = []

    def wrap(fn):
        try:
            fn()
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)
    threads = [threading.Thread(target=wrap, args=(f,)) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("model", ["da", "mlp"])
def test_two_contexts_in_two_threads_match_serial_runs(models, model):
    engine = se.build(os.path.join(models, model + ".onnx"), plugins=u.PLUGINS)
    feeds = [se.random_inputs(engine, seed=s) for s in range(40)]
    with engine.create_context(num_threads=1) as alone:
        want = [{k: v.copy() for k, v in alone.run(f).items()} for f in feeds]
    got = [[None] * len(feeds) for _ in range(2)]

    def worker(t):
        def fn():
            with engine.create_context(num_threads=1) as ctx:  # made in its own thread
                for rep in range(3):
                    order = range(len(feeds)) if (t + rep) % 2 == 0 else \
                        reversed(range(len(feeds)))
                    for i in order:
                        got[t][i] = ctx.run(feeds[i])
        return fn
    _run_threads([worker(0), worker(1)])
    for t in range(2):
        for i, w in enumerate(want):
            assert all(got[t][i][k].tobytes() == w[k].tobytes() for k in w), (t, i)


def test_shared_engine_queries_while_contexts_run(models):
    engine = se.build(os.path.join(models, "da.onnx"), plugins=u.PLUGINS)
    data = engine.serialize()
    layers = engine.layer_info()
    x = se.random_inputs(engine, seed=5)
    want = engine.create_context().run(x)["out"].copy()
    stop = threading.Event()

    def runner():
        with engine.create_context(num_threads=1) as ctx:
            while not stop.is_set():
                assert ctx.run(x)["out"].tobytes() == want.tobytes()

    def querier():
        try:
            for _ in range(30):
                assert engine.serialize() == data
                assert engine.layer_info() == layers
                with engine.create_context() as c:
                    assert c.run(x)["out"].tobytes() == want.tobytes()
        finally:
            stop.set()
    _run_threads([runner, runner, querier])


def test_engine_closed_by_another_thread_while_contexts_run(models):
    engine = se.build(os.path.join(models, "mlp.onnx"))
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    want = u.mlp_reference(models, x)["y"]
    ctxs = [engine.create_context() for _ in range(2)]
    started = threading.Barrier(3)

    def runner(ctx):
        def fn():
            started.wait()
            for _ in range(300):
                assert np.abs(ctx.run({"x": x})["y"] - want).max() < 1e-6
            ctx.close()
        return fn

    def closer():
        started.wait()
        engine.close()
        with pytest.raises(se.ClosedError):
            engine.create_context()
    h = engine._h
    _run_threads([runner(ctxs[0]), runner(ctxs[1]), closer])
    del ctxs
    assert not h.alive


def test_a_context_handed_from_thread_to_thread(models):
    engine = se.build(os.path.join(models, "mlp.onnx"))
    ctx = engine.create_context()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    results = []
    for _ in range(4):  # one thread at a time, each after the last
        _run_threads([lambda: results.append(ctx.run({"x": x})["z"])])
    assert all(r.tobytes() == results[0].tobytes() for r in results)
    assert np.abs(results[0] - u.mlp_reference(models, x)["z"]).max() < 1e-6
