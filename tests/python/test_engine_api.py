"""s4d.engine's public functions on the CPU: build (path, bytes, ModelProto,
shapes, values, plugins, registries), save/load/serialize, tensor specs,
layer info, target and memory figures, contexts (NumPy and torch, preallocated
outputs, bind/unbind, enqueue/synchronize, profiles), each result checked
against a float64 NumPy reference or another run."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
import torch

import engine_util as u
import s4d.engine as se


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    u.require_build()
    return u.write_models(str(tmp_path_factory.mktemp("engine_models")))


def _x(seed=0, shape=(2, 3)):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _close(got, want, tol=1e-6):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= tol * max(1.0, np.abs(want).max())


def test_library_is_found_where_the_build_put_it():
    u.require_build()
    assert os.path.samefile(se.library_path(), u.LIBS4D)
    assert se.default_plugins() and os.path.samefile(se.default_plugins()[0], u.PLUGINS)


def test_build_from_path_bytes_and_modelproto_agree(models):
    path = os.path.join(models, "mlp.onnx")
    x = _x()
    want = u.mlp_reference(models, x)
    results = []
    for source in (path, open(path, "rb").read(), bytearray(open(path, "rb").read()),
                   onnx.load(path), __import__("pathlib").Path(path)):
        with se.build(source) as engine, engine.create_context() as ctx:
            out = ctx.run({"x": x})
            for name in ("y", "z"):
                _close(out[name], want[name])
            results.append(out)
    for out in results[1:]:
        assert all(out[k].tobytes() == results[0][k].tobytes() for k in out)


def test_specs_device_target_and_memory(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    assert [tuple(s) for s in e.inputs] == [("x", "float32", (2, 3), 24)]
    assert [s.name for s in e.outputs] == ["y", "z"]
    assert e.outputs[0].shape == (2, 4) and e.outputs[0].nbytes == 32
    assert e.spec("z").numpy_dtype == np.float32 and e.spec("z").torch_dtype == torch.float32
    with pytest.raises(se.NotFoundError, match="'nope'.*'x', 'y', 'z'"):
        e.spec("nope")
    assert e.device == "cpu"
    t = e.target
    assert t["device"] == "cpu" and t["arch"] == "" and t["library_version"]
    # weights: W1 [3,4] and the folded bias 2*b1 [4] and b1 [4] at least
    assert e.weight_bytes >= 4 * (12 + 4)
    assert 0 < e.activation_bytes <= e.activation_bytes_unplanned
    assert "Engine cpu" in repr(e) and "x:float32[2, 3]" in repr(e)


def test_layer_info_is_what_the_model_computes(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    layers = e.layer_info()
    assert len(layers) == e.num_layers
    by_name = {l["name"]: l for l in layers}
    # the dead branch is gone, the constant bias folded
    assert "dead_add" not in by_name and "fold_add" not in by_name
    assert [l["index"] for l in layers] == list(range(len(layers)))
    sm = by_name["softmax"]
    assert sm["op"] == "Softmax" and sm["domain"] == "" and not sm["is_plugin"]
    assert sm["device"] == "cpu" and sm["precision"] == "float32" and sm["format"] == "linear"
    def no_name(ts):
        return [{k: v for k, v in t.items() if k != "name"} for t in ts]
    assert no_name(sm["inputs"]) == [{"dtype": "float32", "shape": (2, 4)}]
    assert no_name(sm["outputs"]) == [{"dtype": "float32", "shape": (2, 4)}]
    assert by_name["transpose"]["outputs"][0]["shape"] == (2, 4)
    assert no_name(by_name["reshape"]["inputs"][1:2]) == [{"dtype": "int64", "shape": (2,)}]
    # tensors by name: the softmax reads what an earlier layer writes, and the graph's output
    # is written by a layer
    written = {t["name"]: l["index"] for l in layers for t in l["outputs"]}
    assert written[sm["inputs"][0]["name"]] < sm["index"]
    assert e.outputs[0].name in written


def test_plugin_layer_and_its_output_against_the_reference(models):
    from s4d.ops import deformable_aggregation_reference
    e = se.build(os.path.join(models, "da.onnx"), plugins=u.PLUGINS)
    agg = [l for l in e.layer_info() if l["is_plugin"]]
    assert len(agg) == 1 and agg[0]["op"] == "s4d::DeformableAggregation:1"
    assert agg[0]["domain"] == "s4d" and agg[0]["workspace_bytes"] > 0
    ld = lambda n: np.load(os.path.join(models, n))  # noqa: E731
    ins = {k: ld(f"da_in_{k}.npy") for k in ("feat_in", "query", "sampling_location")}
    out = e.create_context().run(ins)["out"]
    # the model's prefix in float64, then the op's float64 reference
    f = ins["feat_in"].astype(np.float64) @ ld("da_wf.npy")
    wl = ins["query"].astype(np.float64) @ ld("da_ww.npy") + ld("da_bw.npy")
    wr = wl.reshape(1, 5, 12, 2).transpose(0, 1, 3, 2)
    ws = np.exp(wr - wr.max(-1, keepdims=True))
    ws = (ws / ws.sum(-1, keepdims=True)).transpose(0, 1, 3, 2).reshape(1, 5, 3, 2, 2, 2)
    want = deformable_aggregation_reference(
        torch.from_numpy(f), torch.from_numpy(ld("da_spatial_shape.npy")).long(),
        torch.from_numpy(ld("da_scale_start_index.npy")).long(),
        torch.from_numpy(ins["sampling_location"]).double(), torch.from_numpy(ws)).numpy()
    assert np.abs(want).max() > 0.05
    _close(out, want, 1e-5)


def test_save_load_serialize_round_trip_bit_for_bit(models, tmp_path):
    e = se.build(os.path.join(models, "da.onnx"), plugins=u.PLUGINS)
    data = e.serialize()
    assert data[:8] == b"S4DENGIN"
    path = tmp_path / "da.s4de"
    e.save(path)
    assert path.read_bytes() == data
    x = se.random_inputs(e, seed=3)
    want = e.create_context().run(x)["out"]
    for source in (str(path), path, data, bytearray(data)):
        with se.Engine.load(source, plugins=[u.PLUGINS]) as loaded:
            assert loaded.serialize() == data
            assert loaded.inputs == e.inputs and loaded.outputs == e.outputs
            assert loaded.create_context().run(x)["out"].tobytes() == want.tobytes()
    assert se.load(data).serialize() == data


def test_dtypes_in_and_out(models):
    e = se.build(os.path.join(models, "dtypes.onnx"))
    assert [s.dtype for s in e.inputs] == ["float32", "int64", "bool"]
    assert [s.dtype for s in e.outputs] == ["float32", "int64", "bool", "int32"]
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    i = rng.integers(-1000, 1000, (3, 4))
    b = rng.random((3, 4)) < 0.5
    want = u.dtypes_reference(x, i, b)
    ctx = e.create_context()
    out = ctx.run({"x": x, "i": i, "b": b})
    for k in ("j", "k", "c"):
        assert out[k].dtype == want[k].dtype and np.array_equal(out[k], want[k]), k
    _close(out["y"], want["y"])
    tout = ctx.run({"x": torch.from_numpy(x), "i": torch.from_numpy(i),
                    "b": torch.from_numpy(b)})
    assert [t.dtype for t in tout.values()] == [torch.float32, torch.int64, torch.bool,
                                                torch.int32]
    assert all(np.array_equal(tout[k].numpy(), out[k]) for k in out)


def test_torch_and_numpy_inputs_give_identical_outputs_and_types(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    ctx = e.create_context()
    x = _x(5)
    a = ctx.run({"x": x})
    assert all(isinstance(v, np.ndarray) for v in a.values())
    t = torch.from_numpy(x).requires_grad_(True)
    b = ctx.run({"x": t})
    assert all(isinstance(v, torch.Tensor) and v.device.type == "cpu" for v in b.values())
    assert all(a[k].tobytes() == b[k].numpy().tobytes() for k in a)
    # a NumPy scalar array and a 0-stride broadcast view are accepted (copied dense)
    c = ctx.run({"x": np.broadcast_to(x[0], (2, 3))})
    _close(c["z"], u.mlp_reference(models, np.broadcast_to(x[0], (2, 3)))["z"])


def test_non_contiguous_and_unaligned_inputs_are_copied(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    ctx = e.create_context()
    base = _x(7, (3, 2)).T   # Fortran order
    assert not base.flags.c_contiguous
    want = u.mlp_reference(models, base)
    _close(ctx.run({"x": base})["z"], want["z"])
    _close(ctx.run({"x": torch.from_numpy(_x(7, (3, 2))).t()})["z"], want["z"])
    raw = np.zeros(4 * 6 + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(2, 3)
    unaligned[...] = base
    assert not unaligned.flags.aligned
    _close(ctx.run({"x": unaligned})["z"], want["z"])
    big = np.ascontiguousarray(base).astype(">f4")  # big-endian
    _close(ctx.run({"x": big})["z"], want["z"])


def test_preallocated_outputs_are_written_in_place(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    ctx = e.create_context()
    x = _x(2)
    y = np.full((2, 4), np.nan, np.float32)
    z = torch.full((2, 4), float("nan"))
    out = ctx.run({"x": x}, outputs={"y": y, "z": z})
    assert out["y"] is y and out["z"] is z
    want = u.mlp_reference(models, x)
    _close(y, want["y"])
    _close(z.numpy(), want["z"])
    # the next run without outputs= gives new arrays and leaves these alone
    y_before = y.copy()
    out2 = ctx.run({"x": _x(3)})
    assert out2["y"] is not y and np.array_equal(y, y_before)


def test_inputs_stay_bound_and_bind_unbind(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    ctx = e.create_context()
    x = _x(4)
    ctx.bind("x", x)
    a = ctx.run()
    _close(a["z"], u.mlp_reference(models, x)["z"])
    b = ctx()  # __call__ is run
    assert a["z"].tobytes() == b["z"].tobytes()
    ctx.unbind("x")
    with pytest.raises(se.NotFoundError, match="input 'x' is not bound"):
        ctx.run()
    # an output bound with bind() is the one run() writes when outputs= is not given
    x2 = _x(8)
    ctx.bind("x", x2)
    zbuf = np.zeros((2, 4), np.float32)
    ctx.bind("z", zbuf)
    ctx.run(outputs={"z": zbuf})
    _close(zbuf, u.mlp_reference(models, x2)["z"])


def test_context_properties_and_empty_tensors(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    ctx = e.create_context(num_threads=2)
    assert ctx.engine is e and ctx.inputs == e.inputs and ctx.outputs == e.outputs
    assert "Context cpu" in repr(ctx) and not ctx.closed
    ctx.close()
    assert ctx.engine is None and ctx.inputs == e.inputs  # specs stay readable
    empty = se.build(os.path.join(models, "twice.onnx"), shapes={"x": (0, 4)})
    out = empty.create_context().run({"x": np.zeros((0, 4), np.float32)})
    assert out["y"].shape == (0, 4) and out["y"].dtype == np.float32


def test_enqueue_synchronize_and_state_carried_between_runs(models):
    e = se.build(os.path.join(models, "dtypes.onnx"))
    ctx = e.create_context()
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    i = rng.integers(-3, 3, (3, 4))
    b = rng.random((3, 4)) < 0.5
    want_i = i.copy()
    for _ in range(3):  # j = i*i + i fed back as the next i
        out = ctx.enqueue({"x": x, "i": i, "b": b})
        ctx.synchronize()
        want_i = want_i * want_i + want_i
        assert np.array_equal(out["j"], want_i)
        i = out["j"]


def test_values_fix_a_shape_carrying_input(models):
    path = os.path.join(models, "reshape_input.onnx")
    with pytest.raises(se.UnsupportedError, match="'reshape'.*must be a constant"):
        se.build(path)
    e = se.build(path, values={"s": [3, 4]})
    ctx = e.create_context()
    x = _x(6, (2, 6))
    y = ctx.run({"x": x, "s": np.array([3, 4])})["y"]
    _close(y, 3 * x.astype(np.float64).reshape(3, 4))
    with pytest.raises(se.ShapeError, match="input 's' was fixed at build"):
        ctx.run({"s": np.array([4, 3])})


def test_shapes_fix_symbolic_dimensions(models):
    path = os.path.join(models, "dynamic.onnx")
    with pytest.raises(se.UnsupportedError, match="'x' \\(axis 0 'N'\\)"):
        se.build(path)
    e = se.build(path, shapes={"x": (5, 3)})
    assert e.inputs[0].shape == (5, 3) and e.outputs[0].shape == (5, 3)
    x = _x(9, (5, 3))
    assert np.array_equal(e.create_context().run({"x": x})["y"], x + x)
    b = se.Builder(shapes={"x": [4, 3]})
    assert b.build(path).outputs[0].shape == (4, 3)


def test_profile_layer_times(models):
    e = se.build(os.path.join(models, "da.onnx"), plugins=u.PLUGINS)
    ctx = e.create_context(profile=True, num_threads=1)
    ctx.run(se.random_inputs(e))
    times = ctx.layer_times()
    assert len(times) == e.num_layers and all(t >= 0 for t in times) and sum(times) > 0
    with pytest.raises(se.InvalidArgumentError, match="profile=True"):
        e.create_context().layer_times()


def test_own_registry_and_default_registry(models):
    path = os.path.join(models, "da.onnx")
    reg = se.Registry()
    assert reg.creators() == []
    reg.load(u.PLUGINS).load(u.PLUGINS)  # loading twice is fine
    keys = reg.creators()
    assert ("s4d", "DeformableAggregation", "1") in keys
    assert ("custom", "DeformableAttentionAggrPlugin", "1") in keys
    e = se.build(path, registry=reg)
    data = e.serialize()
    # the engine holds the registry: closing it first is safe
    reg.close()
    assert reg.closed
    with pytest.raises(se.ClosedError):
        reg.creators()
    x = se.random_inputs(e)
    want = e.create_context().run(x)["out"]
    se.load_plugins(u.PLUGINS)
    assert ("s4d", "DeformableAggregation", "1") in se.plugin_creators()
    assert se.Registry.default() is se.Registry.default()
    loaded = se.Engine.load(data)  # default registry, which has the plugin now
    assert loaded.create_context().run(x)["out"].tobytes() == want.tobytes()


def test_device_buffer_keeps_an_output_in_the_contexts_buffer_and_chains(models):
    e = se.build(os.path.join(models, "mlp.onnx"))
    ctx = e.create_context()
    buf = ctx.device_buffer("z")
    assert buf.name == "z" and buf.shape == (2, 4) and buf.nbytes == 32 and buf.device == "cpu"
    assert buf.ptr != 0 and "DeviceBuffer 'z'" in repr(buf)
    x = _x(11)
    ctx.bind("z", buf)  # z stays in the context's own buffer; run() returns the buffer
    out = ctx.run({"x": x})
    assert out["z"] is buf and isinstance(out["y"], np.ndarray)
    view = np.asarray(buf)
    assert view.dtype == np.float32 and view.shape == (2, 4)
    want = u.mlp_reference(models, x)["z"]
    _close(view, want)
    # a second engine reads it as its input, no copy: twice.onnx is y = x + x
    e2 = se.build(os.path.join(models, "twice.onnx"), shapes={"x": (2, 4)})
    c2 = e2.create_context()
    c2.bind("x", buf)
    assert np.array_equal(c2.run()["y"], view + view)
    with pytest.raises(se.ShapeError, match="bind 'x'"):
        se.build(os.path.join(models, "twice.onnx"), shapes={"x": (4, 2)}).create_context() \
            .bind("x", buf)
    with pytest.raises(se.NotFoundError, match="no buffer of its own for an input"):
        ctx.device_buffer("x")
    with pytest.raises(se.NotFoundError, match="'nope'"):
        ctx.device_buffer("nope")
    # the view keeps the context's memory after the context and the buffer are gone
    saved = view.copy()
    ctx.close()
    del buf, out
    import gc
    gc.collect()
    assert np.array_equal(view, saved)
    assert np.array_equal(c2.run()["y"], saved + saved)


def _conv_model():
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.normal(0, 0.3, (6, 4, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.uniform(-0.2, 0.2, 6).astype(np.float32), "b")
    n1 = helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])
    n2 = helper.make_node("Relu", ["c"], ["y"], name="relu")
    g = helper.make_graph([n1, n2], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                          [2, 4, 7, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w, b])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_layout_option_builds_channels_last_and_checks_its_value():
    u.require_build()
    model = _conv_model()
    x = np.random.default_rng(6).uniform(-1, 1, (2, 4, 7, 9)).astype(np.float32)
    outs = {}
    for layout in ("nchw", "nhwc", "auto"):
        with se.build(model, conv_layout=layout) as e, e.create_context() as ctx:
            outs[layout] = ctx.run({"x": x})["y"]
            ops = [layer["op"] for layer in e.layer_info()]
            # channels-last: a Transpose in and one out around the convolution
            assert ops.count("Transpose") == (2 if layout == "nhwc" else 0), ops
    _close(outs["nhwc"], outs["nchw"], 1e-5)
    assert outs["auto"].tobytes() == outs["nchw"].tobytes()  # AUTO is NCHW on the CPU
    with pytest.raises(ValueError, match="conv_layout"):
        se.Builder(conv_layout="NHWC_")
