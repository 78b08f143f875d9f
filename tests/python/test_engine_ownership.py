"""Ownership from Python: an engine outlives its contexts, a registry its
engines, a context its device buffers, and bound arrays their runs, whatever
order Python frees or closes them in; each C object is destroyed exactly
once, when its last holder goes."""
import gc
import os

import numpy as np
import pytest

import engine_util as u
import s4d.engine as se


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    u.require_build()
    return u.write_models(str(tmp_path_factory.mktemp("engine_own_models")))


X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


def test_engine_closed_or_deleted_before_its_contexts(models):
    want = u.mlp_reference(models, X)["z"]
    e = se.build(os.path.join(models, "mlp.onnx"))
    h = e._h
    c1, c2 = e.create_context(), e.create_context()
    del e
    gc.collect()
    assert h.alive  # the contexts hold it
    assert np.abs(c1.run({"x": X})["z"] - want).max() < 1e-6
    assert np.abs(c2.run({"x": X})["z"] - want).max() < 1e-6
    c1.close()
    assert h.alive
    del c2
    gc.collect()
    assert not h.alive and h.ptr is None


def test_contexts_closed_before_the_engine_and_with_blocks(models):
    with se.build(os.path.join(models, "mlp.onnx")) as e:
        h = e._h
        with e.create_context() as c:
            ch = c._h
            c.run({"x": X})
        assert not ch.alive and h.alive and c.closed
    assert e.closed and not h.alive


def test_registry_outlives_by_its_engines(models):
    reg = se.Registry().load(u.PLUGINS)
    rh = reg._h
    e = se.build(os.path.join(models, "da.onnx"), registry=reg)
    data = e.serialize()
    e2 = se.Engine.load(data, registry=reg)
    reg.close()
    del reg
    gc.collect()
    assert rh.alive  # two engines hold it
    x = se.random_inputs(e)
    a = e.create_context().run(x)["out"]
    e.close()
    assert rh.alive
    c = e2.create_context()
    e2.close()
    assert rh.alive  # the context holds the engine, which holds the registry
    assert c.run(x)["out"].tobytes() == a.tobytes()
    c.close()
    assert not rh.alive


def test_device_buffer_outlives_its_context(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    c = e.create_context()
    buf = c.device_buffer("z")
    c.bind("z", buf)
    c.run({"x": X})
    ch = c._h
    c.close()
    e.close()
    assert ch.alive
    view = np.asarray(buf)
    del buf
    gc.collect()
    assert ch.alive  # the NumPy view holds the buffer
    assert np.abs(view - u.mlp_reference(models, X)["z"]).max() < 1e-6
    del view
    gc.collect()
    assert not ch.alive


def test_bound_inputs_stay_alive_after_the_caller_drops_them(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    c = e.create_context()
    c.bind("x", X.copy())  # only the context refers to this array now
    c.bind("x", np.asfortranarray(X))  # and to the dense copy made of this one
    gc.collect()
    garbage = [np.full((2, 3), 7, np.float32) for _ in range(100)]  # reuse freed memory
    assert np.abs(c.run()["z"] - u.mlp_reference(models, X)["z"]).max() < 1e-6
    del garbage
    # outputs of one run fed back as inputs while new outputs are made
    e2 = se.build(os.path.join(models, "twice.onnx"), shapes={"x": (3, 5)})
    c2 = e2.create_context()
    v = np.random.default_rng(0).uniform(-1, 1, (3, 5)).astype(np.float32)
    out = {"y": v}
    for _ in range(4):
        out = c2.run({"x": out["y"]})
    assert np.array_equal(out["y"], v * 16)


def test_random_free_orders_in_a_fresh_interpreter(models):
    """Thirty random orders of closing/deleting registry, engines, contexts,
    buffers and arrays; the interpreter must neither crash nor leak a
    message on exit, and every C object must be destroyed once."""
    code = f"""
import gc, random
import numpy as np
import s4d.engine as se
models = {models!r}


def trial(seed):
    rnd = random.Random(seed)
    reg = se.Registry().load({u.PLUGINS!r})
    e = se.build(models + "/da.onnx", registry=reg)
    e2 = se.Engine.load(e.serialize(), registry=reg)
    ctxs = [e.create_context(), e2.create_context(), e.create_context(profile=True)]
    x = se.random_inputs(e, seed=seed)
    want = ctxs[0].run(x)["out"]
    buf = ctxs[1].device_buffer("out")
    ctxs[1].bind("out", buf)
    for c in ctxs:
        c.run(x)
    handles = [reg._h, e._h, e2._h] + [c._h for c in ctxs]
    objs = {{"reg": reg, "e": e, "e2": e2, "c0": ctxs[0], "c1": ctxs[1], "c2": ctxs[2],
             "buf": buf, "x": x}}
    del reg, e, e2, ctxs, buf, x, c
    names = list(objs)
    rnd.shuffle(names)
    for n in names:
        o = objs.pop(n)
        if rnd.random() < 0.5 and hasattr(o, "close"):
            o.close()
        del o
        gc.collect()
        for k, c in objs.items():
            if k.startswith("c") and not c.closed:  # what is left still runs
                assert c.run()["out"].shape == want.shape
        if "buf" in objs:
            assert np.asarray(objs["buf"]).tobytes() == want.tobytes()
    return handles


for seed in range(30):
    handles = trial(seed)
    gc.collect()
    assert not any(h.alive for h in handles), (seed, [h.what for h in handles if h.alive])
# live objects left for interpreter exit
e = se.build(models + "/mlp.onnx")
c = e.create_context()
c.run({{"x": np.zeros((2, 3), np.float32)}})
keep = c.device_buffer("y")
print("OK")
"""
    r = u.run_python(code, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "OK"
    assert "Exception ignored" not in r.stderr and "Error" not in r.stderr, r.stderr
