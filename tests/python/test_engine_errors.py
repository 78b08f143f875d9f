"""Every bad input to s4d.engine raises an S4DError subclass carrying the
library's status and one-line message; nothing crashes the interpreter."""
import os
import pickle
import threading

import numpy as np
import pytest
import torch

import engine_util as u
import s4d.engine as se


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    u.require_build()
    return u.write_models(str(tmp_path_factory.mktemp("engine_err_models")))


@pytest.fixture(scope="module")
def mlp(models):
    return se.build(os.path.join(models, "mlp.onnx"))


@pytest.fixture
def ctx(mlp):
    with mlp.create_context() as c:
        yield c


X = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)


# ---------------------------------------------------------------- the exceptions

def test_exceptions_carry_status_and_message_and_fit_python_hierarchies(ctx):
    with pytest.raises(se.ShapeError) as info:
        ctx.run({"x": np.zeros((3, 2), np.float32)})
    e = info.value
    assert e.status == 2 and e.status_name == "S4D_ERR_SHAPE"
    assert e.message == "bind 'x': shape [3, 2], the engine expects [2, 3] (static shapes)"
    assert str(e).endswith("[S4D_ERR_SHAPE]")
    assert isinstance(e, se.S4DError) and isinstance(e, ValueError)
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is se.ShapeError and back.status == 2 and back.message == e.message
    assert issubclass(se.DtypeError, TypeError) and issubclass(se.NotFoundError, LookupError)
    assert issubclass(se.ClosedError, se.InvalidArgumentError)
    assert se.errors.error_for_status(11, "x").__class__ is se.ChecksumError
    assert se.errors.error_for_status(99, "odd").status_name == "status 99"


# ---------------------------------------------------------------- building and loading

def test_build_errors(models, tmp_path):
    cases = [
        (lambda: se.build(b"not an onnx model"), se.ParseError, "not a valid ONNX model"),
        (lambda: se.build(str(tmp_path / "missing.onnx")), se.FileError, "missing.onnx"),
        (lambda: se.build(str(tmp_path)), se.FileError, str(tmp_path)),
        (lambda: se.build(os.path.join(models, "unsupported.onnx")), se.UnsupportedError,
         r"'FooOp', opset 17\) used by 'foo1', 'foo2'.*'BarOp'"),
        (lambda: se.build(os.path.join(models, "da_missing_plugin.onnx")), se.NotFoundError,
         "namespace 'nowhere', name 'DeformableAggregation'"),
        (lambda: se.build(os.path.join(models, "mlp.onnx"), fp16=True), se.UnsupportedError,
         "fp16"),
        (lambda: se.build(os.path.join(models, "mlp.onnx"), device="gpu"),
         se.InvalidArgumentError, "'cpu' or 'cuda'"),
        (lambda: se.build(os.path.join(models, "mlp.onnx"), shapes={"nope": [1, 2]}),
         se.NotFoundError, "no input 'nope'; its inputs are 'x'"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes={"x": [2, -1]}),
         se.InvalidArgumentError, "negative dimension"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes={"x": [2 ** 63, 1]}),
         se.InvalidArgumentError, "int64 range"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes={"x": [2 ** 40, 2 ** 40]}),
         se.ShapeError, "overflows"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes={"x": [4]}),
         se.ShapeError, "1 dims given, the model declares rank 2"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes={"x": [1] * 9}),
         se.InvalidArgumentError, "rank 9"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes={"x": [2.5, 3]}),
         se.InvalidArgumentError, "must be an integer"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes=[2, 3]),
         se.InvalidArgumentError, "must be dicts"),
        (lambda: se.build(os.path.join(models, "twice.onnx"), shapes={"x": "ab"}),
         se.InvalidArgumentError, "not a list of numbers"),
        (lambda: se.build(os.path.join(models, "reshape_input.onnx"),
                          values={"s": [3, float("nan")]}), se.InvalidArgumentError, "NaN"),
        (lambda: se.build(os.path.join(models, "reshape_input.onnx"), values={"s": [3, 4]},
                          shapes={"s": [2]}), se.InvalidArgumentError, "both shapes and values"),
        (lambda: se.build(os.path.join(models, "reshape_input.onnx"), values={"s": [5, 5]}),
         se.S4DError, "'s'|reshape"),
        (lambda: se.build(12), se.InvalidArgumentError, "ONNX path, bytes or onnx.ModelProto"),
        (lambda: se.build("a\0b.onnx"), se.InvalidArgumentError, "NUL"),
        (lambda: se.build(os.path.join(models, "mlp.onnx"), plugins=str(tmp_path / "no.so")),
         se.FileError, "no.so"),
        (lambda: se.build(os.path.join(models, "mlp.onnx"),
                          plugins=[os.path.join(models, "mlp.onnx")]), se.FileError, "ELF"),
        (lambda: se.build(os.path.join(models, "mlp.onnx"), registry="default"),
         se.InvalidArgumentError, "Registry"),
    ]
    for fn, cls, pattern in cases:
        with pytest.raises(cls, match=pattern) as info:
            fn()
        assert info.value.message and "\n" not in info.value.message


def test_cuda_without_a_gpu_is_a_clear_error(models, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    monkeypatch.delenv("S4D_TEST_BACKEND", raising=False)
    with pytest.raises(se.S4DError, match="CUDA|cuda") as info:
        se.build(os.path.join(models, "mlp.onnx"), device="cuda")
    assert info.value.status_name in ("S4D_ERR_NO_DEVICE", "S4D_ERR_CUDA",
                                      "S4D_ERR_UNSUPPORTED")


def test_load_errors(mlp, models, tmp_path):
    data = mlp.serialize()
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0x10
    da = se.build(os.path.join(models, "da.onnx"), plugins=u.PLUGINS).serialize()
    cases = [
        (lambda: se.load(b"garbage bytes here"), se.ParseError, "not an s4d engine file"),
        (lambda: se.load(data[:100]), se.ParseError, "truncated"),
        (lambda: se.load(bytes(flipped)), se.ChecksumError, "checksum"),
        (lambda: se.load(str(tmp_path / "none.s4de")), se.FileError, "none.s4de"),
        (lambda: se.load(data, max_context_bytes=1), se.UnsupportedError, "above the limit"),
        (lambda: se.load(data, max_context_bytes="lots"), se.InvalidArgumentError, "integer"),
        (lambda: se.load(3.5), se.InvalidArgumentError, "engine file path or its bytes"),
        # an empty registry has no creator for the plugin layer
        (lambda: se.load(da, registry=se.Registry()), se.NotFoundError,
         "DeformableAggregation"),
    ]
    for fn, cls, pattern in cases:
        with pytest.raises(cls, match=pattern):
            fn()
    with pytest.raises(TypeError, match="build"):
        se.Engine()
    with pytest.raises(se.FileError):
        mlp.save(str(tmp_path / "no_such_dir" / "e.s4de"))


# ---------------------------------------------------------------- binding and running

def test_wrong_dtype_shape_rank_and_name(ctx):
    cases = [
        ({"x": X.astype(np.float64)}, se.DtypeError, "dtype float64, the engine expects float32"),
        ({"x": X.astype(np.int32)}, se.DtypeError, "int32"),
        ({"x": torch.from_numpy(X).half()}, se.DtypeError, "float16"),
        ({"x": X.T.copy()}, se.ShapeError, r"shape \[3, 2\], the engine expects \[2, 3\]"),
        ({"x": X.reshape(1, 2, 3)}, se.ShapeError, r"\[1, 2, 3\]"),
        ({"x": np.zeros((1,) * 9, np.float32)}, se.ShapeError, "rank 9"),
        ({"x": np.float32(1.0)}, se.ShapeError, r"shape \[\]"),
        ({"q": X}, se.NotFoundError, "no input or output named 'q'; the engine has 'x'"),
        ({"y": X}, se.InvalidArgumentError, "an output of the engine"),
        ({"x": X.astype(complex)}, se.DtypeError, "complex128 has no s4d equivalent"),
        ({"x": np.array([["a"] * 3] * 2)}, se.DtypeError, "no s4d equivalent"),
        ({"x": np.array([[None] * 3] * 2)}, se.DtypeError, "object"),
        ({"x": torch.zeros(2, 3, dtype=torch.complex64)}, se.DtypeError, "complex64"),
        ({"x": torch.zeros(2, 3, device="meta")}, se.InvalidArgumentError, "device 'meta'"),
        ({"x": torch.zeros(2, 3).to_sparse()}, se.InvalidArgumentError, "dense"),
        ({"x": [[1.0] * 3] * 2}, se.InvalidArgumentError, "cannot bind a builtins.list"),
        ({"x": None}, se.InvalidArgumentError, "NoneType"),
        ({"x": "x.npy"}, se.InvalidArgumentError, "builtins.str"),
        ({"x": memoryview(X)}, se.InvalidArgumentError, "memoryview"),
    ]
    for inputs, cls, pattern in cases:
        with pytest.raises(cls, match=pattern):
            ctx.run(inputs)
    with pytest.raises(se.InvalidArgumentError, match="dict"):
        ctx.run([X])
    with pytest.raises(se.InvalidArgumentError, match="tensor name must be a str"):
        ctx.run({3: X})
    # after all that the context still works
    out = ctx.run({"x": X})
    assert np.isfinite(out["y"]).all() and np.abs(out["z"]).max() > 0


def test_unbound_input_and_bad_bind_arguments(mlp):
    c = mlp.create_context()
    with pytest.raises(se.NotFoundError, match="input 'x' is not bound"):
        c.run()
    with pytest.raises(se.InvalidArgumentError, match="'host' or 'device'"):
        c.bind("x", X, memory="elsewhere")
    with pytest.raises(se.NotFoundError, match="'nope'"):
        c.unbind("nope")
    with pytest.raises(se.InvalidArgumentError, match="num_threads"):
        mlp.create_context(num_threads="many")
    for gs in (-1, 9, 1.5):
        with pytest.raises(se.InvalidArgumentError, match="graph_streams"):
            mlp.create_context(use_graph=True, graph_streams=gs)
    mlp.create_context(use_graph=True, graph_streams=8).close()  # ignored on the CPU
    for stream in ("default", True, -1, 2 ** 64, 1.5):
        with pytest.raises(se.InvalidArgumentError, match="stream"):
            mlp.create_context(stream=stream)
    with pytest.raises(se.InvalidArgumentError, match="stream"):
        mlp.create_context().run({"x": X}, stream="s")
    with pytest.raises(se.InvalidArgumentError, match="Engine"):
        se.Context("engine")


def test_stream_handles_given_to_the_c_api():
    # What Context passes to s4d_context_enqueue: torch's default stream (handle 0) as
    # cudaStreamLegacy (1), never NULL, which would be the context's own unordered stream.
    from s4d.engine import engine as eng

    class FakeTorchStream:
        def __init__(self, handle):
            self.cuda_stream = handle

    assert eng._stream_address(FakeTorchStream(0)) == 1
    assert eng._stream_address(FakeTorchStream(0x7f00dead0000)) == 0x7f00dead0000
    assert eng._stream_address(None) is None
    assert eng._stream_address(0) is None  # an int 0 is C's NULL: the context's own stream
    assert eng._stream_address(1) == 1


def test_input_event_errors(ctx):
    # A CPU run is done on return: there is no event to wait for, and the refusal says so.
    with pytest.raises(se.UnsupportedError, match="'x'.*cpu"):
        ctx.set_input_event("x", 0x1000)
    with pytest.raises(se.NotFoundError, match="'nope'.*'x'"):
        ctx.set_input_event("nope", None)
    with pytest.raises(se.NotFoundError, match="no input named 'y'"):
        ctx.set_input_event("y", None)  # an output
    with pytest.raises(se.InvalidArgumentError, match="torch.cuda.Event"):
        ctx.set_input_event("x", "event")
    with pytest.raises(se.InvalidArgumentError, match="not an address"):
        ctx.set_input_event("x", -5)
    ctx.set_input_event("x", None)  # clearing is always fine
    assert np.allclose(ctx.run({"x": X})["y"], ctx.run({"x": X})["y"])


def test_bad_outputs(ctx):
    good = lambda: np.empty((2, 4), np.float32)  # noqa: E731
    ro = good()
    ro.flags.writeable = False
    raw = np.zeros(33, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(2, 4)
    shared = good()
    cases = [
        ({"y": good().T.copy().T}, se.InvalidArgumentError, "not C-contiguous"),
        ({"y": np.empty((4, 2), np.float32).T}, se.InvalidArgumentError, "not C-contiguous"),
        ({"y": torch.empty(4, 2).t()}, se.InvalidArgumentError, "not contiguous"),
        ({"y": ro}, se.InvalidArgumentError, "read-only"),
        ({"y": unaligned}, se.InvalidArgumentError, "not aligned"),
        ({"y": good().astype(">f4")}, se.InvalidArgumentError, "byte order"),
        ({"y": np.empty((2, 4), np.float64)}, se.DtypeError, "float64"),
        ({"y": np.empty((4, 2), np.float32)}, se.ShapeError, r"\[4, 2\]"),
        ({"q": good()}, se.NotFoundError, "'q'"),
        ({"x": good()}, se.InvalidArgumentError, "an input of the engine"),
        ({"y": shared, "z": shared}, se.InvalidArgumentError, "shares memory"),
        ({"y": np.empty(8, np.float32)[::1].reshape(2, 4), "z": [0] * 8},
         se.InvalidArgumentError, "builtins.list"),
    ]
    for outputs, cls, pattern in cases:
        with pytest.raises(cls, match=pattern):
            ctx.run({"x": X}, outputs=outputs)
    # an output on top of an input
    buf = np.zeros(8, np.float32)
    with pytest.raises(se.InvalidArgumentError, match="shares memory"):
        ctx.run({"x": buf[:6].reshape(2, 3)}, outputs={"z": buf.reshape(2, 4)})
    with pytest.raises(se.InvalidArgumentError, match="dict"):
        ctx.run({"x": X}, outputs=[good()])
    y = good()
    assert ctx.run({"x": X}, outputs={"y": y})["y"] is y


def test_closed_objects_refuse_calls(models, tmp_path):
    e = se.build(os.path.join(models, "mlp.onnx"))
    c = e.create_context()
    e.close()
    e.close()
    assert e.closed and "closed" in repr(e)
    for fn in (lambda: e.inputs, lambda: e.outputs, lambda: e.serialize(),
               lambda: e.save(str(tmp_path / "e.s4de")), lambda: e.create_context(),
               lambda: e.layer_info(), lambda: e.activation_bytes, lambda: e.weight_bytes,
               lambda: e.num_layers, lambda: e.device, lambda: e.target,
               lambda: e.spec("x")):
        with pytest.raises(se.ClosedError, match="engine is closed"):
            fn()
    # the context keeps the C engine alive and still runs
    assert c.run({"x": X})["y"].shape == (2, 4)
    c.close()
    c.close()
    assert c.closed and "closed" in repr(c)
    for fn in (lambda: c.run({"x": X}), lambda: c.bind("x", X), lambda: c.synchronize(),
               lambda: c.enqueue({"x": X}), lambda: c.device_buffer("y"),
               lambda: c.unbind("x")):
        with pytest.raises(se.ClosedError, match="context is closed"):
            fn()
    r = se.Registry()
    r.close()
    with pytest.raises(se.ClosedError, match="registry is closed"):
        se.build(os.path.join(models, "mlp.onnx"), registry=r)
    with pytest.raises(se.ClosedError):
        r.load(u.PLUGINS)


def test_a_context_used_from_two_threads_at_once_is_refused(ctx):
    ctx._busy.acquire()  # as if another thread were inside run()
    try:
        with pytest.raises(se.InvalidArgumentError, match="in use by another thread"):
            ctx.run({"x": X})
        with pytest.raises(se.InvalidArgumentError, match="one context per thread"):
            ctx.bind("x", X)
    finally:
        ctx._busy.release()
    # hammered for real from four threads: each call either runs right or is refused
    want = ctx.run({"x": X})["y"].copy()
    errors, wrong = [], []

    def worker():
        for _ in range(200):
            try:
                out = ctx.run({"x": X})
                if out["y"].tobytes() != want.tobytes():
                    wrong.append(out["y"])
            except se.InvalidArgumentError as e:
                errors.append(str(e))
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    assert all("in use by another thread" in m for m in errors)


def test_missing_library_is_a_clear_import_error(tmp_path):
    r = u.run_python("import s4d.engine as se\n"
                     "try:\n    se.build('m.onnx')\n"
                     "except se.LibraryNotFoundError as e:\n    print('ERR', e)\n",
                     env={"S4D_LIB": str(tmp_path / "nowhere" / "libs4d.so")})
    assert r.returncode == 0, r.stderr
    assert "ERR libs4d.so not found: tried" in r.stdout and "nowhere" in r.stdout
    assert "make" in r.stdout and "S4D_BUILD" in r.stdout
    bogus = tmp_path / "libs4d.so"
    bogus.write_text("not a library")
    r = u.run_python("import s4d.engine as se\n"
                     "try:\n    se.library_path()\n"
                     "except ImportError as e:\n    print('ERR', e)\n", env={"S4D_LIB": str(bogus)})
    assert r.returncode == 0 and "ERR libs4d.so not found" in r.stdout, r.stdout + r.stderr
    r = u.run_python("import s4d.engine as se\nprint(se.library_path())",
                     env={"S4D_LIB": "", "S4D_BUILD": os.path.join(u.REPO, "no-such-build")})
    assert r.returncode != 0 and "no-such-build" in r.stderr
