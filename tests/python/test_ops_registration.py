"""The operator s4d::deformable_aggregation as the extension registers it in C++:
its kernels (CPU, Meta, Autograd), direct calls, the C++ autograd Function (only
the asked gradients, no second derivative), tracing, and the Python entry
point's argument test against the checks that name the argument."""
import re
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import random_inputs, rel_l2
from s4d.ops import deformable_aggregation, deformable_aggregation_reference
from s4d.ops import _deformable_aggregation as impl

SHAPES = [[(5, 7), (3, 4)], [(6, 5), (2, 3)], [(4, 4), (2, 2)]]
SCHEMA = ("s4d::deformable_aggregation(Tensor features, Tensor spatial_shape, "
          "Tensor scale_start_index, Tensor sampling_location, Tensor weights, "
          "bool deterministic=False) -> Tensor")
BACKWARD_SCHEMA = ("s4d::deformable_aggregation_backward(Tensor features, Tensor spatial_shape, "
                   "Tensor scale_start_index, Tensor sampling_location, Tensor weights, "
                   "Tensor grad_output, bool need_features, bool need_location, "
                   "bool need_weights, bool deterministic=False) -> (Tensor, Tensor, Tensor)")


def _inputs(seed=0, **kw):
    args = dict(bs=2, channels=16, groups=4, anchors=5, points=3, seed=seed)
    args.update(kw)
    return random_inputs(SHAPES, **args)


def _ref64(f, ss, si, loc, w):
    return deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())


class _Calls(TorchDispatchMode):
    """Records each s4d operator call below autograd: name, arguments, outputs."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if str(func).startswith("s4d."):
            self.calls.append((str(func), args, out))
        return out


def test_operator_kernels_are_registered_in_cpp(ext):
    op = torch.ops.s4d.deformable_aggregation.default
    assert str(op._schema) == SCHEMA
    assert str(torch.ops.s4d.deformable_aggregation_backward.default._schema) == BACKWARD_SCHEMA
    assert impl._OP is op
    for name in ("s4d::deformable_aggregation", "s4d::deformable_aggregation_backward"):
        dump = torch._C._dispatch_dump(name)
        for key in ("CPU", r"Meta", r"Autograd(\[alias\])?"):
            assert re.search(rf"^{key}: registered at .*deformable_aggregation\.cpp:\d+", dump,
                             re.M), (name, key, dump)
    assert ("CUDA: registered" in torch._C._dispatch_dump("s4d::deformable_aggregation")) == \
        ext.built_with_cuda()


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_direct_call_matches_reference(ext, index_dtype):
    f, ss, si, loc, w = _inputs()
    out = torch.ops.s4d.deformable_aggregation(f, ss.to(index_dtype), si.to(index_dtype), loc, w)
    want = _ref64(f, ss, si, loc, w)
    assert want.abs().max() > 0.1
    assert rel_l2(out, want) < 1e-6
    assert torch.equal(out, deformable_aggregation(f, ss, si, loc, w))


def test_direct_call_checks_index_tables(ext):
    f, ss, si, loc, w = _inputs()
    with pytest.raises(TypeError, match="spatial_shape must be int32 or int64"):
        torch.ops.s4d.deformable_aggregation(f, ss.float(), si, loc, w)
    # A meta argument sends the call to the Meta kernel, which refuses real tensors.
    with pytest.raises(ValueError, match="features is on cpu but another argument is on meta"):
        torch.ops.s4d.deformable_aggregation(f, ss, si.to("meta"), loc, w)
    bad = si.clone()
    bad[2, 1] = f.shape[1]  # past the F rows
    with pytest.raises(ValueError):
        torch.ops.s4d.deformable_aggregation(f, ss.long(), bad.long(), loc, w)


def test_meta_kernels_give_shapes(ext):
    cpu = _inputs(anchors=7)
    f, ss, si, loc, w = (t.to("meta") for t in cpu)
    out = torch.ops.s4d.deformable_aggregation(f, ss, si, loc, w)
    assert out.device.type == "meta" and list(out.shape) == [2, 7, 16]
    go = torch.empty(2, 7, 16, device="meta")
    gf, gl, gw = torch.ops.s4d.deformable_aggregation_backward(f, ss, si, loc, w, go, True, False,
                                                               True)
    assert gf.shape == f.shape and gw.shape == w.shape and gl.numel() == 0
    fh = f.half()
    assert torch.ops.s4d.deformable_aggregation(fh, ss, si, loc, w).dtype == torch.float16
    # Index tables may stay on the CPU; the other arguments may not.
    out = torch.ops.s4d.deformable_aggregation(f, cpu[1], cpu[2], loc, w)
    assert out.device.type == "meta"
    with pytest.raises(ValueError, match="weights is on cpu"):
        torch.ops.s4d.deformable_aggregation(f, ss, si, loc, cpu[4])
    with pytest.raises(ValueError, match="sampling_location is on cpu"):
        torch.ops.s4d.deformable_aggregation_backward(f, ss, si, cpu[3], w, go, True, True,
                                                      True)


def test_backward_operator_returns_empty_for_unasked(ext):
    f, ss, si, loc, w = _inputs()
    go = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    gf, gl, gw = torch.ops.s4d.deformable_aggregation_backward(f, ss, si, loc, w, go, False, True,
                                                               False)
    assert gf.numel() == 0 and gw.numel() == 0 and gl.shape == loc.shape
    ref = loc.double().requires_grad_(True)
    deformable_aggregation_reference(f.double(), ss, si, ref, w.double()).backward(go.double())
    assert rel_l2(gl, ref.grad) < 1e-5


@pytest.mark.parametrize("entry", ["function", "operator"])
def test_autograd_matches_reference(ext, entry):
    f, ss, si, loc, w = _inputs(seed=4)
    call = deformable_aggregation if entry == "function" else \
        torch.ops.s4d.deformable_aggregation
    grad = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(4))
    mine = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    out = call(mine[0], ss, si, mine[1], mine[2])
    assert out.requires_grad
    out.backward(grad)
    ref = [t.double().requires_grad_(True) for t in (f, loc, w)]
    deformable_aggregation_reference(ref[0], ss, si, ref[1], ref[2]).backward(grad.double())
    for name, a, b in zip(("features", "sampling_location", "weights"), mine, ref):
        assert b.grad.abs().max() > 0, name
        assert rel_l2(a.grad, b.grad) < 1e-5, name


@pytest.mark.parametrize("asked", [(0,), (1,), (2,), (0, 2), (0, 1, 2)])
def test_only_asked_gradients_are_computed(ext, asked):
    f, ss, si, loc, w = _inputs(seed=5)
    ins = [t.clone().requires_grad_(True) for t in (f, loc, w)]
    spy = _Calls()
    with spy:
        out = deformable_aggregation(ins[0], ss, si, ins[1], ins[2])
        grads = torch.autograd.grad(out.square().sum(), [ins[i] for i in asked])
    backward = [c for c in spy.calls if c[0] == "s4d.deformable_aggregation_backward.default"]
    assert len(backward) == 1
    _, args, outs = backward[0]
    need = tuple(args[6:9])
    assert need == tuple(i in asked for i in range(3))
    for i in range(3):
        assert (outs[i].numel() > 0) == (i in asked), i
    ref = [t.detach().double().requires_grad_(True) for t in ins]
    rout = deformable_aggregation_reference(ref[0], ss, si, ref[1], ref[2])
    want = torch.autograd.grad(rout.square().sum(), [ref[i] for i in asked])
    for g, r in zip(grads, want):
        assert rel_l2(g, r) < 1e-5


def test_index_tables_and_non_grad_inputs_get_no_gradient(ext):
    f, ss, si, loc, w = _inputs(seed=6)
    w.requires_grad_(True)
    deformable_aggregation(f, ss, si, loc, w).sum().backward()
    assert f.grad is None and loc.grad is None and w.grad is not None


def test_not_differentiable_twice(ext):
    f, ss, si, loc, w = _inputs(seed=7)
    fr = f.clone().requires_grad_(True)
    wr = w.clone().requires_grad_(True)
    out = deformable_aggregation(fr, ss, si, loc, wr)
    (gw,) = torch.autograd.grad(out.square().sum(), (wr,), create_graph=True)
    with pytest.raises(RuntimeError, match="deformable_aggregation_backward"):
        gw.sum().backward()


def test_inference_has_no_autograd_node(ext):
    f, ss, si, loc, w = _inputs(seed=8)
    fr = f.clone().requires_grad_(True)
    want = deformable_aggregation(f, ss, si, loc, w)
    with torch.no_grad():
        out = deformable_aggregation(fr, ss, si, loc, w)
    assert out.grad_fn is None and not out.requires_grad and torch.equal(out, want)
    with torch.inference_mode():
        assert torch.equal(deformable_aggregation(fr, ss, si, loc, w), want)


def test_forward_mode_ad_is_refused(ext):
    fwd_ad = pytest.importorskip("torch.autograd.forward_ad")
    f, ss, si, loc, w = _inputs(seed=9)
    with fwd_ad.dual_level():
        dual = fwd_ad.make_dual(f, torch.ones_like(f))
        with pytest.raises(RuntimeError, match="jvp"):
            deformable_aggregation(dual, ss, si, loc, w)


@pytest.mark.parametrize("flag,expect", [(None, True), (False, False), (True, True)])
def test_deterministic_none_follows_the_global_switch(ext, flag, expect):
    f, ss, si, loc, w = _inputs(seed=10)
    spy = _Calls()
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with spy:
            deformable_aggregation(f, ss, si, loc, w, deterministic=flag)
    finally:
        torch.use_deterministic_algorithms(before)
    # The dispatcher leaves out arguments equal to their default.
    assert [c[1][5] if len(c[1]) > 5 else False for c in spy.calls] == [expect]


def test_index_tables_reach_the_operator_converted_once(ext):
    """int64 tables go to the operator as the cached int32 copies, the same objects on
    every call; int32 tables go as they are."""
    f, ss, si, loc, w = _inputs(seed=11)
    ss64, si64 = ss.long(), si.long()
    spy = _Calls()
    with spy:
        deformable_aggregation(f, ss64, si64, loc, w)
        deformable_aggregation(f, ss64, si64, loc, w)
        deformable_aggregation(f, ss, si, loc, w)
    (_, a1, _), (_, a2, _), (_, a3, _) = spy.calls
    assert a1[1].dtype == torch.int32 and a1[1] is a2[1] and a1[2] is a2[2]
    assert a3[1] is ss and a3[2] is si


def test_trace_records_one_operator_node_with_the_callers_tables(ext):
    f, ss, si, loc, w = _inputs(seed=12)

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("ss", ss.long())
            self.register_buffer("si", si.long())

        def forward(self, features, location, weights):
            return deformable_aggregation(features, self.ss, self.si, location, weights)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(M(), (f, loc, w))
    kinds = [n.kind() for n in traced.graph.nodes()]
    assert kinds.count("s4d::deformable_aggregation") == 1, kinds
    assert not any(k.startswith("aten::") for k in kinds), kinds
    assert torch.equal(traced(f, loc, w), deformable_aggregation(f, ss, si, loc, w))


def _bad_cases():
    f, ss, si, loc, w = _inputs()

    def strided(t):
        return torch.cat([t, t], dim=-1)[..., : t.shape[-1]]

    yield "not a tensor", (f.tolist(), ss, si, loc, w)
    yield "features float64", (f.double(), ss, si, loc, w)
    yield "weights int64", (f, ss, si, loc, w.long())
    yield "location float16", (f, ss, si, loc.half(), w)
    yield "spatial_shape float", (f, ss.float(), si, loc, w)
    yield "scale_start_index uint8", (f, ss, si.to(torch.uint8), loc, w)
    yield "features on meta", (f.to("meta"), ss, si, loc.to("meta"), w.to("meta"))
    yield "weights on meta", (f, ss, si, loc, w.to("meta"))
    yield "tables on two devices", (f, ss, si.to("meta"), loc, w)
    yield "features rank", (f[0], ss, si, loc, w)
    yield "weights rank", (f, ss, si, loc, w[..., 0])
    yield "spatial_shape [N, L, 3]", (f, torch.cat([ss, ss[..., :1]], -1), si, loc, w)
    yield "scale_start_index levels", (f, ss, si[:, :1].contiguous(), loc, w)
    yield "location batch", (f, ss, si, loc[:1].contiguous(), w)
    yield "location cameras", (f, ss, si, loc[:, :, :, :2].contiguous(), w)
    yield "weights anchors", (f, ss, si, loc, w[:, :2].contiguous())
    yield "weights levels", (f, ss, si, loc, w[..., :1, :].contiguous())
    yield "groups", random_inputs(SHAPES, channels=8, groups=3)
    yield "features strided", (strided(f), ss, si, loc, w)
    yield "location strided", (f, ss, si, strided(loc), w)
    yield "weights strided", (f, ss, si, loc, strided(w))
    yield "spatial_shape strided", (f, torch.stack([ss, ss], -1)[..., 0], si, loc, w)
    yield "scale_start_index strided", (f, ss, torch.stack([si, si], -1)[..., 0], loc, w)


@pytest.mark.parametrize("case", [name for name, _ in _bad_cases()])
def test_flat_argument_test_rejects_what_the_checks_reject(ext, case):
    args = dict(_bad_cases())[case]
    assert not impl._args_ok(*args)
    with pytest.raises((TypeError, ValueError)):
        impl._explain_args(*args)


def test_flat_argument_test_accepts_good_arguments(ext):
    f, ss, si, loc, w = _inputs()
    for args in ((f, ss, si, loc, w), (f, ss.long(), si.long(), loc, w),
                 (f.half(), ss, si, loc, w.half()), (f.half(), ss, si, loc, w),
                 random_inputs(SHAPES, channels=8, groups=1),
                 random_inputs(SHAPES, bs=0, anchors=0)):
        assert impl._args_ok(*args)
        impl._explain_args(*args)
