"""s4d.engine on a GPU: CUDA tensors bound as device memory (zero copy) in and
out, torch's current stream, explicit streams, enqueue without waiting,
device buffers through __cuda_array_interface__, CUDA graphs, threads, the
tiny Sparse4Dv3 head against PyTorch on the GPU. Every result is checked
against the CPU engine or eager PyTorch. Skips without a GPU, without torch
CUDA, or when libs4d was built without its CUDA backend."""
import os
import sys
import threading

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import engine_util as u  # noqa: E402
import s4d.engine as se  # noqa: E402


def _ready(tmp):
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    if os.environ.get("S4D_TEST_BACKEND"):
        return "S4D_TEST_BACKEND is set: device cuda is not the GPU"
    u.require_build()
    u.twice_model(tmp)
    try:
        se.build(os.path.join(tmp, "twice.onnx"), device="cuda", shapes={"x": (2, 2)})
    except (se.NoDeviceError, se.CudaError) as e:
        return f"libs4d has no usable CUDA backend: {e.message}"
    return ""


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("engine_gpu_models"))
    why = _ready(out)
    if why:
        pytest.skip(why)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return u.write_models(out)


def _pair(models, name, **kw):
    path = os.path.join(models, name + ".onnx")
    return (se.build(path, device="cuda", plugins=u.PLUGINS, allow_fallback=True, **kw),
            se.build(path, device="cpu", plugins=u.PLUGINS, **kw))


def _close(got, want, rtol=1e-5, atol=1e-6):
    g = got.detach().cpu().double().numpy() if torch.is_tensor(got) else np.asarray(got, float)
    w = want.detach().cpu().double().numpy() if torch.is_tensor(want) else np.asarray(want, float)
    assert g.shape == w.shape
    assert np.all(np.abs(g - w) <= atol + rtol * np.abs(w)), np.abs(g - w).max()


def _cuda_inputs(engine, seed):
    return {k: torch.from_numpy(v).cuda() for k, v in se.random_inputs(engine, seed).items()}


def test_cuda_tensors_in_and_out_without_copies(models):
    dev, cpu = _pair(models, "mlp")
    assert dev.device == "cuda" and dev.target["arch"].startswith("sm_")
    ctx, ref = dev.create_context(), cpu.create_context()
    x = _cuda_inputs(dev, 1)
    out = ctx.run(x)  # outputs allocated as CUDA tensors on x's device
    want = ref.run({k: v.cpu() for k, v in x.items()})
    for k in want:
        assert out[k].is_cuda and out[k].dtype == torch.float32
        _close(out[k], want[k])
    y = torch.full((2, 4), float("nan"), device="cuda")
    z = torch.full((2, 4), float("nan"), device="cuda")
    ptrs = (y.data_ptr(), z.data_ptr())
    got = ctx.run(x, outputs={"y": y, "z": z})
    assert got["y"] is y and got["z"] is z and (y.data_ptr(), z.data_ptr()) == ptrs
    _close(y, want["y"])
    _close(z, want["z"])


def test_mixed_host_and_device_memory(models):
    dev, cpu = _pair(models, "dtypes")
    ctx, ref = dev.create_context(), cpu.create_context()
    host = se.random_inputs(dev, 2)
    want = ref.run(host)
    mixed = dict(host, x=torch.from_numpy(host["x"]).cuda())  # one CUDA tensor, two NumPy
    got = ctx.run(mixed)
    assert all(v.is_cuda for v in got.values())
    for k in want:
        _close(got[k], want[k])
    # NumPy in, a CUDA tensor out for one output, NumPy for the others
    j = torch.empty((3, 4), dtype=torch.int64, device="cuda")
    got = ctx.run(host, outputs={"j": j})
    assert got["j"] is j and isinstance(got["y"], np.ndarray)
    assert torch.equal(j.cpu(), torch.from_numpy(want["j"]))
    # pinned host memory is host memory
    got = ctx.run({k: torch.from_numpy(v).pin_memory() for k, v in host.items()})
    assert not got["y"].is_cuda
    _close(got["y"], want["y"])


def test_runs_follow_torchs_current_stream_and_explicit_streams(models):
    dev, cpu = _pair(models, "twice", shapes={"x": (2048, 1024)})
    ctx = dev.create_context()
    side = torch.cuda.Stream()
    for _ in range(3):
        with torch.cuda.stream(side):
            # produced on the side stream just before the run: the run must wait for it
            x = torch.randn(2048, 1024, device="cuda").mul_(3).add_(1)
            out = ctx.run({"x": x})["y"]
            again = out * 0.5  # consumed on the same stream right after
        side.synchronize()
        assert torch.equal(again, x)
    s2 = torch.cuda.Stream()
    x = torch.randn(2048, 1024, device="cuda")
    torch.cuda.synchronize()
    y = torch.empty_like(x)
    ctx.run({"x": x}, outputs={"y": y}, stream=s2)
    assert torch.equal(y, x + x)
    ctx.run({"x": x}, outputs={"y": y}, stream=s2.cuda_stream)
    assert torch.equal(y, x + x)
    with dev.create_context(stream=s2) as own:
        ys = own.run({"x": x.cpu().numpy()})["y"]  # host memory, the context's stream
        np.testing.assert_array_equal(ys, (x + x).cpu().numpy())


def test_enqueue_without_waiting_then_torch_reads_in_stream_order(models):
    dev, _ = _pair(models, "twice", shapes={"x": (1024, 1024)})
    ctx = dev.create_context()
    x = torch.randn(1024, 1024, device="cuda")
    outs = [torch.empty_like(x) for _ in range(4)]
    stream = torch.cuda.current_stream()
    for i, o in enumerate(outs):
        ctx.enqueue({"x": x if i == 0 else outs[i - 1]}, outputs={"y": o})
    total = outs[-1].sum()  # queued behind the four runs on the same stream
    stream.synchronize()
    assert torch.equal(outs[-1], x * 16) and torch.isclose(total, (x * 16).sum())
    ctx.synchronize()


# How the run's stream is given: torch's current stream (the default one here), torch's
# default stream object, or cudaStreamLegacy (1) as an int address.
_DEFAULT_STREAM_FORMS = {"current": lambda: None, "torch_default": torch.cuda.default_stream,
                         "legacy_int": lambda: 1}


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("form", sorted(_DEFAULT_STREAM_FORMS))
def test_default_stream_orders_the_run_with_torch(models, form, use_graph):
    # torch's default stream is CUDA's legacy stream: the run must wait for the work queued
    # there before it (an input written after a 25 ms spin) and come before what follows it.
    # Unordered, the run would read the input before the copy lands: the check fails every time.
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    dev, _ = _pair(models, "twice", shapes={"x": (1024, 1024)})
    ctx = dev.create_context(use_graph=use_graph)
    x = torch.zeros(1024, 1024, device="cuda")
    y = torch.empty_like(x)
    stream = _DEFAULT_STREAM_FORMS[form]()
    for i in range(3):  # a graph: captured by the first run, replayed by the others
        new = torch.randn(1024, 1024, device="cuda") + i
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)
        x.copy_(new)
        ctx.enqueue({"x": x}, outputs={"y": y}, stream=stream)
        got = y.clone()  # in stream order after the run
        torch.cuda.synchronize()
        assert torch.equal(got, new * 2), f"run {i}: the run and torch's default stream are unordered"
    ctx.synchronize()


@pytest.mark.parametrize("use_graph", [False, True], ids=["eager", "graph"])
def test_input_event_orders_the_layers_that_read_the_input(models, use_graph):
    # The aggregation model's sampling_location is written on a side stream after a 25 ms
    # spin; the run goes on a stream of its own with an event on that input alone, so the
    # aggregation must wait for it while the weights' layers need not. Without the event
    # the run reads the old (zero) locations: the control must then differ.
    dev, cpu = _pair(models, "da")
    ins = _cuda_inputs(dev, 3)
    want = cpu.create_context().run({k: v.cpu().numpy() for k, v in ins.items()})["out"]
    new_loc = ins.pop("sampling_location")
    loc = torch.zeros_like(new_loc)
    out = torch.empty(want.shape, device="cuda")
    ctx = dev.create_context(use_graph=use_graph)
    side, run_stream = torch.cuda.Stream(), torch.cuda.Stream()
    ev = torch.cuda.Event()

    def one(with_event):
        loc.zero_()
        torch.cuda.synchronize()
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)
            loc.copy_(new_loc)
            ev.record(side)
        ctx.set_input_event("sampling_location", ev if with_event else None)
        ctx.enqueue({**ins, "sampling_location": loc}, outputs={"out": out}, stream=run_stream)
        run_stream.synchronize()
        got = out.clone()
        torch.cuda.synchronize()
        return got

    for _ in range(3):  # a graph: captured by the first run (with the wait), then replayed
        _close(one(True), want, rtol=1e-4, atol=1e-5)
    control = one(False)
    assert not np.allclose(control.cpu().numpy(), want, rtol=1e-4, atol=1e-5), \
        "the run without the event read the new locations: this test cannot see a missing wait"
    ctx.synchronize()


def test_device_buffers_through_cuda_array_interface_and_chained(models):
    dev, cpu = _pair(models, "mlp")
    twice = se.build(os.path.join(models, "twice.onnx"), device="cuda", shapes={"x": (2, 4)})
    a, b = dev.create_context(), twice.create_context()
    buf = a.device_buffer("z")
    a.bind("z", buf)  # z stays on the device, in the context's buffer
    x = se.random_inputs(dev, 3)
    a.run(x)
    view = torch.as_tensor(buf, device="cuda")  # zero copy
    assert view.data_ptr() == buf.ptr and view.shape == (2, 4)
    want = cpu.create_context().run(x)["z"]
    _close(view, want)
    b.bind("x", buf)
    _close(b.run()["y"], 2 * want.astype(np.float64))
    a.close()
    del buf
    _close(view, want)  # the view keeps the context's memory


def test_cuda_graph_replays_with_fixed_tensors(models):
    dev, cpu = _pair(models, "mlp")
    ctx = dev.create_context(use_graph=True)
    ref = cpu.create_context()
    x = torch.zeros(2, 3, device="cuda")
    y, z = torch.empty(2, 4, device="cuda"), torch.empty(2, 4, device="cuda")
    for seed in range(4):
        host = se.random_inputs(dev, seed)["x"]
        x.copy_(torch.from_numpy(host))  # same memory, new values
        ctx.run({"x": x}, outputs={"y": y, "z": z})
        want = ref.run({"x": host})
        _close(y, want["y"])
        _close(z, want["z"])


def test_bad_cuda_inputs(models):
    dev, cpu = _pair(models, "mlp")
    ctx = dev.create_context()
    x = torch.randn(3, 2, device="cuda").t()  # not contiguous: copied
    want = cpu.create_context().run({"x": x.cpu().contiguous()})
    _close(ctx.run({"x": x})["z"], want["z"])
    with pytest.raises(se.InvalidArgumentError, match="not contiguous"):
        ctx.run({"x": x}, outputs={"y": torch.empty(4, 2, device="cuda").t()})
    with pytest.raises(se.DtypeError, match="float64"):
        ctx.run({"x": torch.zeros(2, 3, device="cuda", dtype=torch.float64)})
    with pytest.raises(se.ShapeError):
        ctx.run({"x": torch.zeros(3, 2, device="cuda")})
    with pytest.raises(se.InvalidArgumentError, match="CUDA tensor, but the engine runs on"):
        cpu.create_context().run({"x": torch.zeros(2, 3, device="cuda")})
    with pytest.raises(se.InvalidArgumentError, match="device memory"):
        ctx.bind("x", torch.zeros(2, 3, device="cuda"), memory="host")
    with pytest.raises(se.InvalidArgumentError, match="not CUDA memory|host memory"):
        ctx.bind("x", np.zeros((2, 3), np.float32), memory="device")
    if torch.cuda.device_count() > 1:
        with pytest.raises(se.InvalidArgumentError, match="device 1"):
            ctx.run({"x": torch.zeros(2, 3, device="cuda:1")})


def test_two_cuda_contexts_in_two_threads(models):
    dev, cpu = _pair(models, "da")
    feeds = [se.random_inputs(dev, s) for s in range(8)]
    with cpu.create_context() as ref:
        want = [ref.run(f)["out"] for f in feeds]
    errors = []

    def worker():
        try:
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream), dev.create_context() as ctx:
                for f, w in zip(feeds, want):
                    got = ctx.run({k: torch.from_numpy(v).cuda() for k, v in f.items()})
                    _close(got["out"], w, rtol=1e-4, atol=1e-5)
        except BaseException as e:  # noqa: B902
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_fp16_engine_on_cuda_runs_float16_layers_and_stays_close(models):
    # --fp16 on the GPU: some layers compute in float16 (reported per layer), the
    # graph's inputs and outputs stay float32, and the result stays within float16
    # rounding of the float64 reference.
    rng = np.random.default_rng(16)
    x = rng.uniform(-1.0, 1.0, (2, 3)).astype(np.float32)
    want = u.mlp_reference(models, x)
    with se.build(os.path.join(models, "mlp.onnx"), device="cuda", fp16=True) as engine:
        precisions = {l["precision"] for l in engine.layer_info()}
        assert "float16" in precisions, precisions
        with engine.create_context() as ctx:
            out = ctx.run({"x": x})
    for name in ("y", "z"):
        got = np.asarray(out[name])
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want[name], rtol=5e-3, atol=5e-3)


def test_tiny_head_on_cuda_tensors_against_pytorch_on_the_gpu(tmp_path, models):
    from s4d import ops
    if not ops.extension_available() or not ops.load_extension().built_with_cuda():
        pytest.skip("the PyTorch extension has no CUDA kernels")
    from s4d.sparse4d import HeadState, build_model
    from s4d.sparse4d.export import RAW_OUTPUT_NAMES, export
    from s4d.sparse4d.head import STATE_NAMES
    from s4d.sparse4d.scene import make_sequence
    model = build_model("tiny", aggregation="ext", seed=0)
    paths = export("tiny", str(tmp_path), model=model)
    engine = se.build(paths["head"], device="cuda", plugins=se.default_plugins())
    model = model.cuda()
    ctx = engine.create_context()
    state = model.initial_state()
    bank = dict(zip(STATE_NAMES, state))
    for frame in make_sequence(model.cfg, num_frames=3, seed=0):
        with torch.no_grad():
            feats = model.backbone(torch.from_numpy(frame["images"]).cuda())
            ins = {"features": feats}
            ins.update({k: torch.from_numpy(frame[k]).cuda()
                        for k in ("projection", "image_wh", "timestamp", "ego_pose")})
            want = model.head(*ins.values(), state)
        got = ctx.run({**ins, **bank})
        assert all(t.is_cuda for t in got.values())
        ref = {n: want[n] for n in RAW_OUTPUT_NAMES}
        ref.update({n + "_out": t for n, t in zip(STATE_NAMES, want["state"])})
        # the raw outputs and the bank, each side carrying its own (the demo's limit for a
        # carried state); detections are a top-k of them, where ties may reorder
        report = se.compare_outputs(got, ref, rtol=1e-3, atol=1e-3)
        assert report.worst_rel_l2 < 1e-3, str(report)
        state = HeadState(*want["state"])
        bank = {n: got[n + "_out"] for n in STATE_NAMES}


def test_graph_on_several_streams_matches_eager_bit_for_bit(tmp_path, models):
    """The tiny head's independent branches spread over 1, 2, 4 and 8 streams in its
    CUDA graph: every output equals the eager run's bits, frame after frame."""
    from s4d.sparse4d.export import export
    paths = export("tiny", str(tmp_path))
    engine = se.build(paths["head"], device="cuda", plugins=se.default_plugins())
    eager = engine.create_context()
    graphs = {n: engine.create_context(use_graph=True, graph_streams=n) for n in (1, 2, 4, 8)}
    for seed in range(3):
        feeds = _cuda_inputs(engine, seed)
        want = {k: v.clone() for k, v in eager.run(feeds).items()}
        assert any(float(v.float().abs().sum()) > 0 for v in want.values())
        for n, ctx in graphs.items():
            got = ctx.run(feeds)
            for k, w in want.items():
                same = got[k].cpu().numpy().tobytes() == w.cpu().numpy().tobytes()
                assert same, f"{k}: graph on {n} streams differs from eager"
    with pytest.raises(se.InvalidArgumentError, match="graph_streams"):
        engine.create_context(use_graph=True, graph_streams=9)


def _conv_matmul_model(path):
    # Conv (bias) + Relu, then a MatMul of the flattened map: a cuDNN and a product layer.
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(23)
    w = rng.uniform(-0.5, 0.5, (16, 8, 3, 3)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, (16,)).astype(np.float32)
    m = rng.uniform(-0.5, 0.5, (64, 96)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "m"], ["y"], name="product")]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(m, "m"),
             numpy_helper.from_array(np.array([128, 64], np.int64), "shape")]
    g = helper.make_graph(nodes, "conv_matmul",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 96])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_layer_info_names_the_algorithms_chosen_at_build(tmp_path, models):
    # --dumpLayerInfo's plan: the convolution's cuDNN algorithm, math and the
    # time it took in the build's graph-captured timing; the product's kernel.
    # A loaded engine says where its choice came from. Outputs match the CPU.
    path = str(tmp_path / "conv_matmul.onnx")
    _conv_matmul_model(path)
    x = np.random.default_rng(5).uniform(-1.0, 1.0, (8, 8, 8, 8)).astype(np.float32)
    with se.build(path, device="cuda") as engine, se.build(path, device="cpu") as ref:
        info = {l["name"]: l for l in engine.layer_info()}
        conv = next(l for l in info.values() if l["op"] in ("Conv", "FusedConv"))
        assert "algo " in conv["kernel_info"] and "fma" in conv["kernel_info"], conv["kernel_info"]
        t = conv["kernel_info"].split("timed ")[1].split(" ms")[0]
        assert 0.0 < float(t) < 100.0, conv["kernel_info"]
        prod = next(l for l in info.values() if l["op"] in ("MatMul", "FusedMatMul"))
        assert "m 128 n 96 k 64" in prod["kernel_info"], prod["kernel_info"]
        assert ("cuBLASLt" in prod["kernel_info"]
                or "own float32 kernel" in prod["kernel_info"]), prod["kernel_info"]
        blob = engine.serialize()
        with engine.create_context() as ctx, ref.create_context() as rctx:
            _close(ctx.run({"x": x})["y"], rctx.run({"x": x})["y"], rtol=1e-4, atol=1e-4)
    with se.Engine.load(blob) as loaded:
        conv = next(l for l in loaded.layer_info() if l["op"] in ("Conv", "FusedConv"))
        assert "from the engine file" in conv["kernel_info"], conv["kernel_info"]
