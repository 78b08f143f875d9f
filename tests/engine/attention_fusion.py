"""The attention fusion on the CPU engine (s4d::FusedAttention), through s4dexec.

usage: attention_fusion.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is the chain PyTorch exports for scaled dot-product attention,
    S = MatMul(Q, KT) [-> Where(mask, S, fill) | Where(mask, fill, S)] -> Softmax(last axis)
    -> MatMul(P, V),
optionally with the scale Mul(Q, s) before it and a Transpose after it that puts the heads back
together ([..., H, Nq, Dv] -> [..., Nq, H, Dv]), which the fused node takes in (q_scale,
swap_out); built twice: as it is (the engine fuses it) and with the probabilities P also a
graph output (a value with two readers, which the pass must leave alone). Checks, per case:
  - the layer list (--dumpLayerInfo) of the first shows FusedAttention and no Softmax or
    Where (nor the scale's Mul or the Transpose), the second Softmax and no FusedAttention;
  - on the CPU the fused output equals the unfused one bit for bit (the host kernel runs the
    unfused layers' computations in their order), NaN rows included;
  - both agree with a float64 NumPy reference (rtol 1e-5, atol 1e-5: the float32 scores of
    D products of values up to 2 carry absolute errors of ~1e-6 - a few units of 2^-24 times
    sum |q k| - which the softmax passes on as relative errors of the probabilities, and so
    as absolute errors of ~1e-6 on outputs near zero); a row whose keys are all masked with
    -inf is NaN in both, as ONNX's Softmax makes it.
Plus chains the pass must not fuse: Softmax over another axis, and opset 11's Softmax whose
default axis flattens more than the last one; and neighbours it must leave as layers: a scale
Mul whose output is also a graph output, a Transpose that moves other axes, a Transpose whose
input is also a graph output.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import close, fusion_arg_parser, run_dump  # noqa: E402

F32 = TensorProto.FLOAT


def chain_model(shapes, mask_shape=None, fill=float("-inf"), fill_where_true=False, opset=17,
                softmax_axis=-1, scale=None, p_output=False, out_perm=None, extra_outputs=()):
    """The attention chain on graph inputs q, kt, v [, mask]; output o (and p). out_perm: a
    Transpose of the chain's output ("ctx") with that perm makes o; extra_outputs: more values
    made graph outputs ("qs", "ctx")."""
    qs, ks, vs = shapes
    nodes, inits = [], []
    q = "q"
    if scale is not None:
        inits.append(numpy_helper.from_array(np.array(scale, np.float32), "scale"))
        nodes.append(helper.make_node("Mul", ["q", "scale"], ["qs"], name="scale"))
        q = "qs"
    nodes.append(helper.make_node("MatMul", [q, "kt"], ["s"], name="scores"))
    sm_in = "s"
    if mask_shape is not None:
        inits.append(numpy_helper.from_array(np.array(fill, np.float32), "fill"))
        ins = ["mask", "fill", "s"] if fill_where_true else ["mask", "s", "fill"]
        nodes.append(helper.make_node("Where", ins, ["sm"], name="mask"))
        sm_in = "sm"
    attrs = {} if softmax_axis is None else {"axis": softmax_axis}
    nodes.append(helper.make_node("Softmax", [sm_in], ["p"], name="softmax", **attrs))
    if out_perm is None:
        nodes.append(helper.make_node("MatMul", ["p", "v"], ["o"], name="context"))
    else:
        nodes.append(helper.make_node("MatMul", ["p", "v"], ["ctx"], name="context"))
        nodes.append(helper.make_node("Transpose", ["ctx"], ["o"], name="heads", perm=list(out_perm)))
    g_in = [helper.make_tensor_value_info("q", F32, list(qs)),
            helper.make_tensor_value_info("kt", F32, list(ks)),
            helper.make_tensor_value_info("v", F32, list(vs))]
    if mask_shape is not None:
        g_in.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, list(mask_shape)))
    g_out = [helper.make_tensor_value_info("o", F32, None)]
    if p_output:
        g_out.append(helper.make_tensor_value_info("p", F32, None))
    for name in extra_outputs:
        g_out.append(helper.make_tensor_value_info(name, F32, None))
    g = helper.make_graph(nodes, "attention", g_in, g_out, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def reference(q, kt, v, mask, fill, fill_where_true, scale, softmax_axis=-1, out_perm=None):
    """float64 NumPy: the unfused chain's semantics."""
    o = attention64(q, kt, v, mask, fill, fill_where_true, scale, softmax_axis)
    return o if out_perm is None else np.transpose(o, out_perm)


def swap_perm(rank):
    """The Transpose that swaps axes rank-3 and rank-2: the heads back together."""
    p = list(range(rank))
    p[-3], p[-2] = p[-2], p[-3]
    return p


def attention64(q, kt, v, mask, fill, fill_where_true, scale, softmax_axis=-1):
    q = q.astype(np.float64)
    if scale is not None:
        q = q * np.float64(np.float32(scale))
    s = np.matmul(q, kt.astype(np.float64))
    if mask is not None:
        hit = mask if fill_where_true else ~mask
        s = np.where(np.broadcast_to(hit, s.shape), np.float64(fill), s)
    with np.errstate(invalid="ignore", over="ignore"):
        mx = np.max(s, axis=softmax_axis, keepdims=True)
        e = np.exp(s - mx)
        p = e / np.sum(e, axis=softmax_axis, keepdims=True)
        return np.matmul(p, v.astype(np.float64))


def make_cases(rng):
    """(name, shapes, mask array or None, fill, fill_where_true, scale, out_perm or None)."""
    out = []

    def mask_rows(shape, p_keep, full_row=None):
        m = rng.uniform(size=shape) < p_keep
        # never a row masked by accident: keep key 0 unless a fully masked row is wanted
        m[..., 0] = True
        if full_row is not None:
            m[..., full_row, :] = False
        return m

    # the head's temporal block in small: per-query mask with one fully masked row -> NaN
    out.append(("head_like_mask_nan", ([1, 4, 33, 64], [1, 4, 64, 37], [1, 4, 37, 64]),
                mask_rows((1, 1, 33, 37), 0.6, full_row=5), float("-inf"), False, 0.125))
    # the head's mask shape [B, 1, 1, Nk] (some keys masked for every query)
    out.append(("key_mask_b1", ([1, 8, 29, 64], [1, 8, 64, 101], [1, 8, 101, 64]),
                mask_rows((1, 1, 1, 101), 0.7), float("-inf"), False, 0.125))
    # self-attention block: no mask
    out.append(("self_no_mask", ([1, 8, 45, 32], [1, 8, 32, 45], [1, 8, 45, 32]), None, None,
                False, None))
    out.append(("nq1_nk1", ([2, 3, 1, 32], [2, 3, 32, 1], [2, 3, 1, 32]), None, None, False, None))
    out.append(("nq1_nk37", ([1, 2, 1, 64], [1, 2, 64, 37], [1, 2, 37, 64]),
                mask_rows((1, 2, 1, 37), 0.5), float("-inf"), False, None))
    out.append(("nk1_masked_row", ([1, 2, 5, 32], [1, 2, 32, 1], [1, 2, 1, 32]),
                np.array([True, False, True, True, False]).reshape(1, 1, 5, 1), float("-inf"), False,
                None))
    # Where(mask, fill, S) with a finite fill
    out.append(("fill_where_true_finite", ([1, 2, 7, 32], [1, 2, 32, 37], [1, 2, 37, 32]),
                rng.uniform(size=(1, 1, 1, 37)) < 0.3, -1e4, True, None))
    # broadcast batch dims, Dv != D, rank 3 and 2 operands
    out.append(("broadcast_batch", ([2, 3, 9, 16], [3, 16, 37], [1, 3, 37, 48]),
                mask_rows((3, 1, 37), 0.5), float("-inf"), False, None))
    out.append(("rank2", ([10, 64], [64, 37], [37, 24]), None, None, False, None))
    # the head's blocks with the heads put back together after the product ([B, Nq, H, Dv])
    out.append(("head_like_swap_out", ([1, 4, 33, 64], [1, 4, 64, 37], [1, 4, 37, 64]),
                mask_rows((1, 1, 33, 37), 0.6, full_row=5), float("-inf"), False, 0.125, swap_perm(4)))
    out.append(("self_swap_out_no_scale", ([1, 8, 45, 32], [1, 8, 32, 45], [1, 8, 45, 48]), None, None,
                False, None, swap_perm(4)))
    out.append(("rank3_swap_out", ([3, 9, 16], [3, 16, 37], [3, 37, 16]), None, None, False, 0.25,
                swap_perm(3)))
    out.append(("broadcast_swap_out", ([2, 3, 9, 16], [3, 16, 37], [1, 3, 37, 48]),
                mask_rows((3, 1, 37), 0.5), float("-inf"), False, 0.5, swap_perm(4)))
    return [c if len(c) == 7 else c + (None,) for c in out]


def engine_run(args, d, tag, model, inputs, device):
    path = os.path.join(d, f"{tag}.onnx")
    onnx.save(model, path)
    outd = os.path.join(d, f"out_{tag}")
    return run_dump(args, d, path, inputs, outd, device=device), np.load(os.path.join(outd, "o.npy"))


def main():
    ap = fusion_arg_parser()
    args = ap.parse_args()
    rng = np.random.default_rng(1414)
    failures = []
    exact = args.device == "cpu"
    for name, shapes, mask, fill, fwt, scale, perm in make_cases(rng):
        if args.k not in name:
            continue
        d = os.path.join(args.scratch, name)
        os.makedirs(d, exist_ok=True)
        q = rng.uniform(-2, 2, shapes[0]).astype(np.float32)
        kt = rng.uniform(-2, 2, shapes[1]).astype(np.float32)
        v = rng.uniform(-2, 2, shapes[2]).astype(np.float32)
        inputs = {"q": q, "kt": kt, "v": v}
        mshape = None
        if mask is not None:
            inputs["mask"] = mask
            mshape = mask.shape
        fused_m = chain_model(shapes, mshape, fill, fwt, scale=scale, out_perm=perm)
        plain_m = chain_model(shapes, mshape, fill, fwt, scale=scale, p_output=True, out_perm=perm)
        types_f, o_f = engine_run(args, d, "fused", fused_m, inputs, args.device)
        types_u, o_u = engine_run(args, d, "unfused", plain_m, inputs, args.device)
        want = reference(q, kt, v, mask, fill, fwt, scale, out_perm=perm)
        msgs = []
        if "FusedAttention" not in types_f or "Softmax" in types_f or "Where" in types_f or \
                "Mul" in types_f or "Transpose" in types_f:
            msgs.append(f"fused model's layers {types_f}")
        if (scale is not None and "Mul" not in types_u) or (perm is not None and "Transpose" not in types_u):
            msgs.append(f"unfused model's neighbours missing: {types_u}")
        if "FusedAttention" in types_u or "Softmax" not in types_u:
            msgs.append(f"unfused model's layers {types_u}")
        if exact and not np.array_equal(o_f.view(np.uint32), o_u.view(np.uint32)):
            diff = np.abs(o_f.astype(np.float64) - o_u)
            msgs.append(f"fused != unfused bit for bit (max abs diff {np.nanmax(diff):.3g})")
        for tag, got in (("fused", o_f), ("unfused", o_u)):
            ok, what = close(got, want, 1e-5, 1e-5)
            if not ok:
                msgs.append(f"{tag} vs float64 reference: {what}")
        nan_rows = int(np.isnan(want).all(axis=-1).sum())
        if msgs:
            failures.append(f"{name}: " + "; ".join(msgs))
            print(f"FAIL {name}: " + "; ".join(msgs))
        else:
            print(f"ok   {name} (out {list(o_f.shape)}, {nan_rows} NaN rows, layers {types_f})")

    # Chains the pass must leave alone.
    for name, kw in (("softmax_axis_2", dict(softmax_axis=2)),
                     ("opset11_default_axis", dict(opset=11, softmax_axis=None))):
        if args.k not in name:
            continue
        d = os.path.join(args.scratch, name)
        os.makedirs(d, exist_ok=True)
        shapes = ([1, 2, 6, 32], [1, 2, 32, 6], [1, 2, 6, 32])
        inputs = {k: rng.uniform(-2, 2, s).astype(np.float32) for k, s in zip(("q", "kt", "v"), shapes)}
        types, o = engine_run(args, d, "model", chain_model(shapes, **kw), inputs, args.device)
        ax = 2 if name == "softmax_axis_2" else None
        q, kt, v = (inputs[k].astype(np.float64) for k in ("q", "kt", "v"))
        s = q @ kt
        if ax is None:  # opset 11, axis 1: softmax over the flattened [2, 6, 6] block
            e = np.exp(s - s.max(axis=(1, 2, 3), keepdims=True))
            p = e / e.sum(axis=(1, 2, 3), keepdims=True)
        else:
            e = np.exp(s - s.max(axis=ax, keepdims=True))
            p = e / e.sum(axis=ax, keepdims=True)
        ok, what = close(o, p @ v, 1e-5, 1e-5)
        if "FusedAttention" in types or not ok:
            failures.append(f"{name}: layers {types}, {what}")
            print(f"FAIL {name}: layers {types}, {what}")
        else:
            print(f"ok   {name} (not fused: {types})")
    # Neighbours the fused node must leave as layers; the chain itself still fuses.
    shapes = ([1, 2, 6, 32], [1, 2, 32, 7], [1, 2, 7, 32])
    for name, kw, keep in (("scale_also_an_output", dict(scale=0.5, extra_outputs=("qs",)), "Mul"),
                           ("transpose_other_axes", dict(out_perm=[0, 2, 3, 1]), "Transpose"),
                           ("transpose_input_an_output", dict(out_perm=swap_perm(4), extra_outputs=("ctx",)),
                            "Transpose")):
        if args.k not in name:
            continue
        d = os.path.join(args.scratch, name)
        os.makedirs(d, exist_ok=True)
        inputs = {k: rng.uniform(-2, 2, s).astype(np.float32) for k, s in zip(("q", "kt", "v"), shapes)}
        types, o = engine_run(args, d, "model", chain_model(shapes, **kw), inputs, args.device)
        want = reference(inputs["q"], inputs["kt"], inputs["v"], None, None, False, kw.get("scale"),
                         out_perm=kw.get("out_perm"))
        ok, what = close(o, want, 1e-5, 1e-5)
        if "FusedAttention" not in types or keep not in types or not ok:
            failures.append(f"{name}: layers {types}, {what}")
            print(f"FAIL {name}: layers {types}, {what}")
        else:
            print(f"ok   {name} ({keep} kept: {types})")
    print(f"attention fusion: {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
