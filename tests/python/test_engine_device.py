"""The device path of s4d.engine without a GPU: S4D_TEST_BACKEND=guarded
makes device "cuda" a guarded test device (host memory behind PROT_NONE
pages, CPU kernels), so host-bound inputs and outputs, enqueue/synchronize,
device buffers, fallback copies and CUDA-graph options run here. Results
must equal the CPU engine's bit for bit (the same kernels underneath)."""
import os

import numpy as np
import pytest
import torch

import engine_util as u
import s4d.engine as se


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    u.require_build()
    return u.write_models(str(tmp_path_factory.mktemp("engine_dev_models")))


@pytest.fixture(autouse=True)
def guarded(monkeypatch):
    monkeypatch.setenv("S4D_TEST_BACKEND", "guarded")
    monkeypatch.delenv("S4D_GUARDED_DECLINE", raising=False)


def _pair(models, name, **kw):
    path = os.path.join(models, name + ".onnx")
    return (se.build(path, device="cuda", plugins=u.PLUGINS, **kw),
            se.build(path, device="cpu", plugins=u.PLUGINS, **kw))


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes(), k


@pytest.mark.parametrize("name", ["mlp", "dtypes", "da"])
def test_host_bound_runs_equal_the_cpu_engine(models, name):
    dev, cpu = _pair(models, name)
    assert dev.device == "cuda" and dev.target["arch"] == "guarded"
    assert dev.target["device_name"] == "guarded test device"
    assert all(l["device"] == "cuda" for l in dev.layer_info())
    cd, cc = dev.create_context(), cpu.create_context()
    for seed in range(3):
        x = se.random_inputs(dev, seed=seed)
        _same(cd.run(x), cc.run(x))
    t = {k: torch.from_numpy(v) for k, v in se.random_inputs(dev, seed=9).items()}
    out = cd.run(t)
    assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in out.values())
    _same({k: v.numpy() for k, v in out.items()}, cc.run(t))


def test_enqueue_then_synchronize_and_preallocated_host_outputs(models):
    dev, cpu = _pair(models, "mlp")
    ctx = dev.create_context()
    feeds = [se.random_inputs(dev, seed=s) for s in range(3)]
    outs = [ctx.enqueue(f) for f in feeds]  # three runs queued; outputs fill in order
    ctx.synchronize()
    with cpu.create_context() as cc:
        for f, o in zip(feeds, outs):
            _same(o, cc.run(f))
    y = np.full((2, 4), np.nan, np.float32)
    got = ctx.run(feeds[0], outputs={"y": y})
    assert got["y"] is y and y.tobytes() == outs[0]["y"].tobytes()


def test_save_and_load_a_device_engine(models, tmp_path):
    dev, _ = _pair(models, "da")
    path = tmp_path / "da_cuda.s4de"
    dev.save(path)
    loaded = se.Engine.load(path, plugins=u.PLUGINS)
    assert loaded.device == "cuda" and loaded.serialize() == dev.serialize()
    x = se.random_inputs(dev, seed=2)
    _same(loaded.create_context().run(x), dev.create_context().run(x))


def test_device_buffers_chain_engines_without_the_host(models):
    dev, cpu = _pair(models, "mlp")
    twice = se.build(os.path.join(models, "twice.onnx"), device="cuda", shapes={"x": (2, 4)})
    a, b = dev.create_context(), twice.create_context()
    zbuf = a.device_buffer("z")
    assert zbuf.device == "cuda" and zbuf.ptr != 0
    # guarded memory cannot be read from Python: no array interfaces to crash on
    assert not hasattr(zbuf, "__cuda_array_interface__")
    assert not hasattr(zbuf, "__array_interface__")
    a.bind("z", zbuf)  # z stays on the device
    x = se.random_inputs(dev, seed=4)
    out = a.run(x)
    assert out["z"] is zbuf and isinstance(out["y"], np.ndarray)
    b.bind("x", zbuf)
    want_z = cpu.create_context().run(x)["z"]
    assert np.array_equal(b.run()["y"], want_z + want_z)
    # an input's device buffer holds what the last host-bound run copied in
    c = dev.create_context()
    c.bind("x", a.device_buffer("x"))
    _same(c.run(), cpu.create_context().run(x))
    with pytest.raises(se.InvalidArgumentError, match="bind 'x': bound as cuda device memory"):
        c.bind("x", x["x"], memory="device")
    with pytest.raises(se.NotFoundError, match="'nope'"):
        a.device_buffer("nope")
    # device memory can never reach a CPU engine, whatever it is declared as
    host_twice = se.build(os.path.join(models, "twice.onnx"), shapes={"x": (2, 4)})
    for memory in (None, "host", "device"):
        with pytest.raises(se.InvalidArgumentError, match="device buffer of a cuda engine"):
            host_twice.create_context().bind("x", zbuf, memory=memory)


def test_fallback_copies_and_graph_option(models, monkeypatch):
    monkeypatch.setenv("S4D_GUARDED_DECLINE", "Softmax")
    path = os.path.join(models, "mlp.onnx")
    with pytest.raises(se.UnsupportedError, match="'softmax'.*allow fallback"):
        se.build(path, device="cuda")
    dev = se.build(path, device="cuda", allow_fallback=True)
    layers = dev.layer_info()
    assert [l["device"] for l in layers if l["op"] == "Softmax"] == ["cpu"]
    assert sum(l["is_copy"] for l in layers) == 2
    cpu = se.build(path)
    x = se.random_inputs(dev, seed=6)
    for kw in ({}, {"use_graph": True}, {"profile": True}):
        with dev.create_context(**kw) as ctx:
            _same(ctx.run(x), cpu.create_context().run(x))
            if kw.get("profile"):
                assert len(ctx.layer_times()) == len(layers)


def test_two_device_contexts_in_two_threads(models):
    import threading
    dev, cpu = _pair(models, "da")
    feeds = [se.random_inputs(dev, seed=s) for s in range(12)]
    with cpu.create_context() as cc:
        want = [cc.run(f) for f in feeds]
    bad = []

    def worker():
        with dev.create_context() as ctx:
            for f, w in zip(feeds, want):
                o = ctx.run(f)
                if o["out"].tobytes() != w["out"].tobytes():
                    bad.append(o)
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad
