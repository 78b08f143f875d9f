"""GPU tests of s4d.ops.deformable_aggregation: CUDA against the CPU kernel,
fp16, autograd, the caller's stream, CUDA-graph capture, determinism and the
C++ operator under torch.compile, torch.export and dynamo ONNX.
They skip where there is no GPU or the extension was built without CUDA;
scripts/gpu_check_python.sh runs them on the GPU machine."""
import inspect
import io
import warnings

import pytest
import torch

from conftest import random_inputs, realistic_inputs, rel_l2
from s4d.ops import deformable_aggregation, deformable_aggregation_reference, load_extension


def _cuda_ready():
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    try:
        ext = load_extension()
    except ImportError as exc:
        return False, str(exc)
    if not ext.built_with_cuda():
        return False, "the s4d extension was built without CUDA kernels"
    return True, ""


_READY, _WHY = _cuda_ready()
pytestmark = pytest.mark.skipif(not _READY, reason=_WHY)


def _to_cuda(*tensors):
    return [t.cuda() for t in tensors]


def _workload(anchors=900, channels=256, small_maps=False, seed=0):
    return realistic_inputs(anchors=anchors, channels=channels, groups=8, seed=seed,
                            small_maps=small_maps)


@pytest.mark.parametrize("deterministic", [False, True])
def test_cuda_forward_matches_cpu(deterministic):
    f, ss, si, loc, w = _workload()
    cpu = deformable_aggregation(f, ss, si, loc, w)
    gpu = deformable_aggregation(*_to_cuda(f, ss, si, loc, w), deterministic=deterministic)
    assert gpu.is_cuda
    assert rel_l2(gpu.cpu(), cpu) <= 1e-6


def test_cuda_random_shapes_match_reference():
    shapes = [[(9, 11), (5, 6), (3, 3)], [(7, 5), (4, 3), (2, 2)]]
    for seed, (channels, groups) in enumerate(((32, 1), (64, 4), (96, 8))):
        f, ss, si, loc, w = random_inputs(shapes, bs=3, channels=channels, groups=groups,
                                          anchors=17, points=5, seed=seed)
        want = deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())
        got = deformable_aggregation(*_to_cuda(f, ss, si, loc, w))
        assert rel_l2(got.cpu(), want) <= 1e-6


def test_index_tensors_on_cpu_or_gpu_and_int64():
    f, ss, si, loc, w = _workload(anchors=300, channels=64)
    fc, locc, wc = _to_cuda(f, loc, w)
    a = deformable_aggregation(fc, ss, si, locc, wc, deterministic=True)
    b = deformable_aggregation(fc, ss.cuda(), si.cuda(), locc, wc, deterministic=True)
    c = deformable_aggregation(fc, ss.long().cuda(), si.long().cuda(), locc, wc,
                               deterministic=True)
    assert torch.equal(a, b) and torch.equal(b, c)


def test_deterministic_forward_bitwise_over_10_runs():
    f, ss, si, loc, w = _to_cuda(*_workload())
    first = deformable_aggregation(f, ss, si, loc, w, deterministic=True)
    for _ in range(9):
        assert torch.equal(deformable_aggregation(f, ss, si, loc, w, deterministic=True), first)


def test_deterministic_backward_bitwise_and_matches_cpu():
    f, ss, si, loc, w = _workload(anchors=300, channels=128)
    grad = torch.randn(1, 300, 128, generator=torch.Generator().manual_seed(7))
    cpu_in = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    deformable_aggregation(cpu_in[0], ss, si, cpu_in[1], cpu_in[2]).backward(grad)
    runs = []
    for _ in range(3):
        gpu_in = [t.cuda().requires_grad_(True) for t in (f, loc, w)]
        deformable_aggregation(gpu_in[0], ss, si, gpu_in[1], gpu_in[2],
                               deterministic=True).backward(grad.cuda())
        runs.append([t.grad for t in gpu_in])
    for name, c, g0, g1, g2 in zip(("features", "sampling_location", "weights"), cpu_in,
                                   *runs):
        assert torch.equal(g0, g1) and torch.equal(g0, g2), name
        assert rel_l2(g0.cpu(), c.grad) <= 1e-5, name


def test_cuda_fp16():
    f, ss, si, loc, w = _workload()
    fh, wh = f.half(), w.half()
    want = deformable_aggregation_reference(fh.double(), ss, si, loc.double(), wh.double())
    got = deformable_aggregation(*_to_cuda(fh, ss, si, loc, wh))
    assert got.dtype == torch.float16
    assert rel_l2(got.cpu(), want) <= 2e-3


def test_cuda_backward_matches_cpu():
    f, ss, si, loc, w = _workload(anchors=300, channels=128)
    grad = torch.randn(1, 300, 128, generator=torch.Generator().manual_seed(5))
    cpu_in = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    deformable_aggregation(cpu_in[0], ss, si, cpu_in[1], cpu_in[2]).backward(grad)
    gpu_in = [t.cuda().requires_grad_(True) for t in (f, loc, w)]
    deformable_aggregation(gpu_in[0], ss.cuda(), si.cuda(), gpu_in[1], gpu_in[2]).backward(
        grad.cuda())
    for name, c, g in zip(("features", "sampling_location", "weights"), cpu_in, gpu_in):
        assert rel_l2(g.grad.cpu(), c.grad) <= 1e-5, name


def test_cuda_backward_fp16():
    f, ss, si, loc, w = _workload(anchors=300, channels=64)
    grad = torch.randn(1, 300, 64, generator=torch.Generator().manual_seed(6)).half()
    gpu_in = [f.half().cuda().requires_grad_(True), loc.cuda().requires_grad_(True),
              w.half().cuda().requires_grad_(True)]
    deformable_aggregation(gpu_in[0], ss.cuda(), si.cuda(), gpu_in[1], gpu_in[2]).backward(
        grad.cuda())
    ref = [t.detach().cpu().double().requires_grad_(True) for t in gpu_in]
    deformable_aggregation_reference(ref[0], ss, si, ref[1], ref[2]).backward(grad.double())
    assert rel_l2(gpu_in[0].grad.cpu(), ref[0].grad) <= 5e-3
    assert rel_l2(gpu_in[2].grad.cpu(), ref[2].grad) <= 5e-3
    assert rel_l2(gpu_in[1].grad.cpu(), ref[1].grad) <= 2e-2


def test_runs_on_the_current_stream():
    f, ss, si, loc, w = _to_cuda(*_workload())
    want = deformable_aggregation(f, ss, si, loc, w, deterministic=True)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # A long producer on the side stream: if the op ran on another stream
        # it would read features before this write lands.
        big = torch.randn(4096, 4096, device="cuda")
        for _ in range(4):
            big = big @ big
            big = big / big.norm()
        f2 = f * (1 + 0 * big[0, 0])
        got = deformable_aggregation(f2, ss, si, loc, w, deterministic=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert torch.equal(got, want)


def test_cuda_graph_capture_replay_equals_eager():
    f, ss, si, loc, w = _to_cuda(*_workload())
    static = [t.clone() for t in (f, loc, w)]
    eager = deformable_aggregation(f, ss, si, loc, w, deterministic=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside capture, as PyTorch asks
        deformable_aggregation(static[0], ss, si, static[1], static[2], deterministic=True)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = deformable_aggregation(static[0], ss, si, static[1], static[2],
                                     deterministic=True)
    graph.replay()
    torch.cuda.synchronize()
    assert out.abs().max() > 0
    assert torch.equal(out, eager)
    # New inputs copied into the static buffers: the replay follows them.
    f2, _, _, loc2, w2 = _to_cuda(*_workload(seed=1))
    for dst, src in zip(static, (f2, loc2, w2)):
        dst.copy_(src)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, deformable_aggregation(f2, ss, si, loc2, w2, deterministic=True))


def test_cuda_wrong_device_is_a_clear_error():
    f, ss, si, loc, w = _workload(anchors=8, channels=16, small_maps=True)
    with pytest.raises(ValueError, match="sampling_location is on cpu"):
        deformable_aggregation(f.cuda(), ss, si, loc, w.cuda())


# The entry point tells torch.compile apart through torch.compiler.is_compiling.
_COMPILE = hasattr(getattr(torch, "compiler", None), "is_compiling")
_EXPORT = hasattr(torch, "export")
_DYNAMO_ONNX = "custom_translation_table" in inspect.signature(torch.onnx.export).parameters


def test_cuda_kernels_are_registered():
    dump = torch._C._dispatch_dump("s4d::deformable_aggregation")
    assert "CUDA: registered at" in dump and "deformable_aggregation.cpp" in dump, dump
    dump = torch._C._dispatch_dump("s4d::deformable_aggregation_backward")
    assert "CUDA: registered at" in dump, dump


def test_operator_direct_call_with_cpu_int64_tables():
    f, ss, si, loc, w = _workload(anchors=300, channels=64)
    want = deformable_aggregation(*_to_cuda(f, ss, si, loc, w), deterministic=True)
    fc, locc, wc = _to_cuda(f, loc, w)
    got = torch.ops.s4d.deformable_aggregation(fc, ss.long(), si.long(), locc, wc, True)
    assert torch.equal(got, want)


@pytest.mark.skipif(not _COMPILE, reason="needs torch.compiler.is_compiling (torch >= 2.3)")
@pytest.mark.parametrize("tables", ["cuda int32", "cpu int64"])
def test_torch_compile_fullgraph_forward_and_backward(tables):
    f, ss, si, loc, w = _to_cuda(*_workload(anchors=200, channels=64))
    if tables == "cpu int64":
        ss, si = ss.cpu().long(), si.cpu().long()
    proj = torch.nn.Linear(64, 64).cuda()

    def head(features, location, weights):
        return proj(deformable_aggregation(features, ss, si, location.clamp(-2, 2), weights,
                                           deterministic=True))

    compiled = torch.compile(head, fullgraph=True)
    ins_c = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    ins_e = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    out_c = compiled(*ins_c)
    out_e = head(*ins_e)
    assert rel_l2(out_c, out_e) <= 1e-6
    out_c.square().sum().backward()
    out_e.square().sum().backward()
    for a, b in zip(ins_c, ins_e):
        assert rel_l2(a.grad, b.grad) <= 1e-5


@pytest.mark.skipif(not _COMPILE, reason="needs torch.compiler.is_compiling (torch >= 2.3)")
def test_torch_compile_keeps_one_opaque_node_each_way():
    """The operator reaches the forward and backward graphs that AOTAutograd hands to
    a backend as one node each, not decomposed."""
    try:
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.aot_autograd import make_boxed_func
    except ImportError as exc:
        pytest.skip(f"AOTAutograd backend helpers not found: {exc}")
    graphs = {}

    def capture(kind):
        def compiler(gm, example_inputs):
            graphs[kind] = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
            return make_boxed_func(gm.forward)
        return compiler

    f, ss, si, loc, w = _to_cuda(*_workload(anchors=64, channels=32, small_maps=True))

    def head(features, location, weights):
        return deformable_aggregation(features, ss, si, location, weights, deterministic=True)

    compiled = torch.compile(head, fullgraph=True, backend=aot_autograd(
        fw_compiler=capture("forward"), bw_compiler=capture("backward")))
    ins_c = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    ins_e = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    grad = torch.randn(1, 64, 32, device="cuda")
    out_c = compiled(*ins_c)
    out_e = head(*ins_e)
    assert torch.equal(out_c, out_e)
    out_c.backward(grad)
    out_e.backward(grad)
    fw = graphs["forward"]
    bw = graphs["backward"]
    assert fw.count("s4d.deformable_aggregation.default") == 1, fw
    assert bw.count("s4d.deformable_aggregation_backward.default") == 1, bw
    for a, b in zip(ins_c, ins_e):
        assert rel_l2(a.grad, b.grad) <= 1e-6


@pytest.mark.skipif(not _EXPORT, reason="needs torch.export")
def test_torch_export_keeps_one_op_node():
    f, ss, si, loc, w = _to_cuda(*_workload(anchors=64, channels=32, small_maps=True))

    class M(torch.nn.Module):
        def forward(self, features, location, weights):
            return deformable_aggregation(features, ss, si, location, weights)

    program = torch.export.export(M(), (f, loc, w))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert sum("s4d.deformable_aggregation" in t for t in targets) == 1, targets
    assert rel_l2(program.module()(f, loc, w), M()(f, loc, w)) <= 1e-6


@pytest.mark.skipif(not _DYNAMO_ONNX, reason="needs torch.onnx.export(custom_translation_table)")
def test_dynamo_onnx_export_with_translation_table():
    pytest.importorskip("onnxscript")
    import onnx
    from s4d.ops import onnx_translation_table

    f, ss, si, loc, w = _workload(anchors=16, channels=32, small_maps=True)

    class M(torch.nn.Module):
        def forward(self, features, location, weights):
            return deformable_aggregation(features, ss, si, location, weights) * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(M(), (f, loc, w), dynamo=True,
                                    custom_translation_table=onnx_translation_table())
    model = program.model_proto
    nodes = [n for n in model.graph.node if n.op_type == "DeformableAggregation"]
    assert len(nodes) == 1 and nodes[0].domain == "s4d"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in nodes[0].attribute}
    assert attrs == {"plugin_version": b"1"}


def test_reference_onnx_runs_in_onnxruntime():
    """The standard-op export of the reference, run by ONNX Runtime, equals
    the extension (needs onnxruntime; the GPU machine has it)."""
    ort = pytest.importorskip("onnxruntime")
    f, ss, si, loc, w = _workload(anchors=64, channels=32, small_maps=True)

    class M(torch.nn.Module):
        def forward(self, features, location, weights):
            return deformable_aggregation_reference(features, ss, si, location, weights)

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(M(), (f, loc, w), buf, opset_version=17, dynamo=False,
                          input_names=["features", "location", "weights"],
                          output_names=["out"])
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"features": f.numpy(), "location": loc.numpy(),
                             "weights": w.numpy()})
    want = deformable_aggregation(*_to_cuda(f, ss, si, loc, w)).cpu()
    assert rel_l2(torch.from_numpy(got), want) <= 1e-5
