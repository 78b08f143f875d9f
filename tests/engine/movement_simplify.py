"""The movement simplification pass (src/passes/simplify_movement.c), through s4dexec.

usage: movement_simplify.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda] [-k NAME]

Each case is a small ONNX graph of Slice, Concat, Gather and Transpose nodes, or of arithmetic by
a constant that changes no bit, on random non-zero inputs, built by s4dexec with --dumpLayerInfo
(the view folding and the pointwise fusion off: S4D_FOLD_VIEWS=0, S4D_FUSE_POINTWISE=0). Checks, per case:
  - the op types of the layer list (the ones that run a kernel, and the views), as a multiset,
    against what the pass must leave: fewer layers where a rewrite applies, the same layers in
    the near misses (a second reader, a graph output in the middle, step 2, another axis, indices
    known only at run time, an opset whose Slice takes attributes);
  - every output equal BIT FOR BIT to a NumPy reference of the ONNX semantics: the ops only move
    bytes (the readers that make a value have two uses are Neg, exact in float32), so nothing
    may differ in the last bit. Inputs are random, never zero.
On --device cuda (the guarded test device, S4D_TEST_BACKEND=guarded) the same cases run once more
with S4D_GUARDED_DECLINE=Neg and --allowFallback, so that rewritten layers feed layers placed on
another device.
"""
import collections
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import fusion_arg_parser, layer_types, load_inputs_flag  # noqa: E402

F32 = TensorProto.FLOAT
I64_MAX = np.iinfo(np.int64).max


# ---- NumPy reference of the ONNX ops --------------------------------------------------------

def ref_slice(x, starts, ends, axes=None, steps=None):
    """ONNX Slice: negative bounds count from the end, then clamp (opset 10+ semantics)."""
    axes = list(range(len(starts))) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = a + x.ndim if a < 0 else a
        dim = x.shape[a]
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        idx[a] = slice(s, e if e >= 0 else None, st)
    return x[tuple(idx)]


def ref_gather(x, indices, axis):
    return np.take(x, indices, axis=axis)  # negative indices count from the end, as in ONNX


# ---- graph building -------------------------------------------------------------------------

class G:
    """A tiny graph builder: named inputs, nodes, int64 initializers, outputs."""

    def __init__(self, opset=17):
        self.nodes, self.inits, self.inputs, self.outputs, self.opset = [], [], [], [], opset
        self.n = 0

    def inp(self, name, shape, elem=F32):
        self.inputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
        return name

    def const(self, vals, dtype=np.int64):
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.array(vals, dtype), name))
        return name

    def node(self, op, ins, **attrs):
        self.n += 1
        out = f"{op.lower()}{self.n}"
        self.nodes.append(helper.make_node(op, ins, [out], name=f"{op}_{self.n}", **attrs))
        return out

    def slice(self, x, starts, ends, axes=None, steps=None):
        if self.opset < 10:
            attrs = {"starts": starts, "ends": ends}
            if axes is not None:
                attrs["axes"] = axes
            return self.node("Slice", [x], **attrs)
        ins = [x, self.const(starts), self.const(ends)]
        if axes is not None or steps is not None:
            ins.append(self.const(axes if axes is not None else list(range(len(starts)))))
        if steps is not None:
            ins.append(self.const(steps))
        return self.node("Slice", ins)

    def out(self, name, elem=F32):
        self.outputs.append(helper.make_tensor_value_info(name, elem, None))

    def model(self):
        g = helper.make_graph(self.nodes, "movement", self.inputs, self.outputs, self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", self.opset)])


def rnd(rng, shape):
    """Random float32 values in +-[0.5, 2): never zero."""
    return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


# ---- cases: (name, build(rng) -> (model, inputs, {output: reference}), expected layers) ------
# Expected layers are op types; "Reshape(view)" is a Reshape that runs no kernel.

def c_slice_concat_one_input(rng):
    g = G()
    a, b, c = g.inp("a", [2, 3, 5]), g.inp("b", [2, 4, 5]), g.inp("c", [2, 2, 5])
    cat = g.node("Concat", [a, b, c], axis=1)
    s = g.slice(cat, [3], [7], [1])  # exactly b
    y = g.node("Neg", [s])
    g.out(y)
    ins = {k: rnd(rng, s_) for k, s_ in (("a", (2, 3, 5)), ("b", (2, 4, 5)), ("c", (2, 2, 5)))}
    cat_r = np.concatenate([ins["a"], ins["b"], ins["c"]], axis=1)
    return g.model(), ins, {y: -ref_slice(cat_r, [3], [7], [1])}


def c_slice_concat_inside(rng):
    """Negative start, an end past the dim (clamped) and a cut on another axis: inside c."""
    g = G()
    a, b, c = g.inp("a", [3, 4, 6]), g.inp("b", [3, 4, 2]), g.inp("c", [3, 4, 7])
    cat = g.node("Concat", [a, b, c], axis=-1)
    s = g.slice(cat, [-5, 1], [I64_MAX, 3], [2, 1], [1, 1])
    y = g.node("Neg", [s])
    g.out(y)
    ins = {"a": rnd(rng, (3, 4, 6)), "b": rnd(rng, (3, 4, 2)), "c": rnd(rng, (3, 4, 7))}
    cat_r = np.concatenate([ins["a"], ins["b"], ins["c"]], axis=-1)
    return g.model(), ins, {y: -ref_slice(cat_r, [-5, 1], [I64_MAX, 3], [2, 1], [1, 1])}


def c_slice_concat_clamped_start(rng):
    """start -100 clamps to 0; the range [0, 3) lies in a (also read elsewhere: Concat stays)."""
    g = G()
    a, b = g.inp("a", [4, 6]), g.inp("b", [4, 3])
    cat = g.node("Concat", [a, b], axis=1)
    s = g.slice(cat, [-100], [3], [1])
    y = g.node("Neg", [s])
    g.out(y)
    g.out(cat)
    ins = {"a": rnd(rng, (4, 6)), "b": rnd(rng, (4, 3))}
    cat_r = np.concatenate([ins["a"], ins["b"]], axis=1)
    return g.model(), ins, {y: -ref_slice(cat_r, [-100], [3], [1]), cat: cat_r}


def c_slice_concat_spans_two(rng):
    g = G()
    a, b = g.inp("a", [4, 6]), g.inp("b", [4, 3])
    cat = g.node("Concat", [a, b], axis=1)
    y = g.node("Neg", [g.slice(cat, [4], [8], [1])])
    g.out(y)
    ins = {"a": rnd(rng, (4, 6)), "b": rnd(rng, (4, 3))}
    cat_r = np.concatenate([ins["a"], ins["b"]], axis=1)
    return g.model(), ins, {y: -ref_slice(cat_r, [4], [8], [1])}


def c_slice_concat_step2(rng):
    g = G()
    a, b = g.inp("a", [4, 6]), g.inp("b", [4, 3])
    cat = g.node("Concat", [a, b], axis=1)
    y = g.node("Neg", [g.slice(cat, [0], [5], [1], [2])])
    g.out(y)
    ins = {"a": rnd(rng, (4, 6)), "b": rnd(rng, (4, 3))}
    cat_r = np.concatenate([ins["a"], ins["b"]], axis=1)
    return g.model(), ins, {y: -ref_slice(cat_r, [0], [5], [1], [2])}


def c_slice_concat_other_axis(rng):
    """A cut on axis 0 of a Concat on axis 1 reads every input."""
    g = G()
    a, b = g.inp("a", [4, 6]), g.inp("b", [4, 3])
    cat = g.node("Concat", [a, b], axis=1)
    y = g.node("Neg", [g.slice(cat, [1], [3], [0])])
    g.out(y)
    ins = {"a": rnd(rng, (4, 6)), "b": rnd(rng, (4, 3))}
    cat_r = np.concatenate([ins["a"], ins["b"]], axis=1)
    return g.model(), ins, {y: -ref_slice(cat_r, [1], [3], [0])}


def c_slice_is_graph_output(rng):
    """The Slice's output (all of b) is a graph output: still written by a Slice, now of b."""
    g = G()
    a, b = g.inp("a", [4, 6]), g.inp("b", [4, 3])
    cat = g.node("Concat", [a, b], axis=1)
    s = g.slice(cat, [6], [9], [1])
    g.out(s)
    ins = {"a": rnd(rng, (4, 6)), "b": rnd(rng, (4, 3))}
    return g.model(), ins, {s: ins["b"]}


def c_slice_slice(rng):
    g = G()
    x = g.inp("x", [5, 8, 6])
    s1 = g.slice(x, [1, 2], [5, 8], [0, 1])
    s2 = g.slice(s1, [-3, 1], [I64_MAX, 4], [1, 2])
    y = g.node("Neg", [s2])
    g.out(y)
    ins = {"x": rnd(rng, (5, 8, 6))}
    r = ref_slice(ref_slice(ins["x"], [1, 2], [5, 8], [0, 1]), [-3, 1], [I64_MAX, 4], [1, 2])
    return g.model(), ins, {y: -r}


def c_slice_slice_step2(rng):
    g = G()
    x = g.inp("x", [5, 8])
    s1 = g.slice(x, [0], [8], [1], [2])
    y = g.node("Neg", [g.slice(s1, [1], [3], [1])])
    g.out(y)
    ins = {"x": rnd(rng, (5, 8))}
    return g.model(), ins, {y: -ref_slice(ref_slice(ins["x"], [0], [8], [1], [2]), [1], [3], [1])}


def c_slice_slice_concat(rng):
    """Slice(Slice(Concat)): the pass repeats until the chain reads the one input."""
    g = G()
    a, b = g.inp("a", [3, 10]), g.inp("b", [3, 4])
    cat = g.node("Concat", [a, b], axis=1)
    s1 = g.slice(cat, [0], [12], [1])
    y = g.node("Neg", [g.slice(s1, [2], [7], [1])])
    g.out(y)
    ins = {"a": rnd(rng, (3, 10)), "b": rnd(rng, (3, 4))}
    return g.model(), ins, {y: -ins["a"][:, 2:7]}


def c_slice_all(rng):
    g = G()
    x = g.inp("x", [3, 4])
    y = g.node("Neg", [g.slice(x, [0, -100], [I64_MAX, 4], [0, 1])])
    g.out(y)
    ins = {"x": rnd(rng, (3, 4))}
    return g.model(), ins, {y: -ins["x"]}


def c_slice_all_output(rng):
    """A Slice of everything that writes a graph output: nothing to bypass, left as it is."""
    g = G()
    x = g.inp("x", [3, 4])
    y = g.slice(x, [0], [4], [1])
    g.out(y)
    ins = {"x": rnd(rng, (3, 4))}
    return g.model(), ins, {y: ins["x"]}


def c_opset9_slice_slice(rng):
    """Opset 9's Slice takes its bounds as attributes: the pass leaves the pair alone."""
    g = G(opset=9)
    x = g.inp("x", [5, 8])
    s1 = g.slice(x, [1], [8], [1])
    y = g.node("Neg", [g.slice(s1, [2], [5], [1])])
    g.out(y)
    ins = {"x": rnd(rng, (5, 8))}
    return g.model(), ins, {y: -ins["x"][:, 3:6]}


def c_gather_concat(rng):
    g = G()
    a, b = g.inp("a", [2, 3, 4]), g.inp("b", [2, 3, 5])
    cat = g.node("Concat", [a, b], axis=2)
    idx = np.array([[4, -1], [6, 5]], np.int64)  # 4 and -1 (= 8) both fall in b
    y = g.node("Neg", [g.node("Gather", [cat, g.const(idx)], axis=-1)])
    g.out(y)
    ins = {"a": rnd(rng, (2, 3, 4)), "b": rnd(rng, (2, 3, 5))}
    cat_r = np.concatenate([ins["a"], ins["b"]], axis=2)
    return g.model(), ins, {y: -ref_gather(cat_r, idx, 2)}


def c_gather_concat_int32_scalar(rng):
    g = G()
    a, b, c = g.inp("a", [3, 2]), g.inp("b", [4, 2]), g.inp("c", [2, 2])
    cat = g.node("Concat", [a, b, c], axis=0)
    y = g.node("Neg", [g.node("Gather", [cat, g.const(-3, np.int32)], axis=0)])
    g.out(y)
    ins = {"a": rnd(rng, (3, 2)), "b": rnd(rng, (4, 2)), "c": rnd(rng, (2, 2))}
    cat_r = np.concatenate([ins["a"], ins["b"], ins["c"]], axis=0)
    return g.model(), ins, {y: -ref_gather(cat_r, np.int32(-3), 0)}


def c_gather_concat_spans_two(rng):
    g = G()
    a, b = g.inp("a", [3, 4]), g.inp("b", [3, 5])
    cat = g.node("Concat", [a, b], axis=1)
    idx = np.array([3, 4], np.int64)
    y = g.node("Neg", [g.node("Gather", [cat, g.const(idx)], axis=1)])
    g.out(y)
    ins = {"a": rnd(rng, (3, 4)), "b": rnd(rng, (3, 5))}
    return g.model(), ins, {y: -ref_gather(np.concatenate([ins["a"], ins["b"]], 1), idx, 1)}


def c_gather_concat_other_axis(rng):
    g = G()
    a, b = g.inp("a", [3, 4]), g.inp("b", [3, 5])
    cat = g.node("Concat", [a, b], axis=1)
    idx = np.array([2], np.int64)
    y = g.node("Neg", [g.node("Gather", [cat, g.const(idx)], axis=0)])
    g.out(y)
    ins = {"a": rnd(rng, (3, 4)), "b": rnd(rng, (3, 5))}
    return g.model(), ins, {y: -ref_gather(np.concatenate([ins["a"], ins["b"]], 1), idx, 0)}


def c_gather_runtime_indices(rng):
    """Indices known only at run time: nothing to shift at build."""
    g = G()
    a, b = g.inp("a", [3, 4]), g.inp("b", [3, 5])
    i = g.inp("i", [2], TensorProto.INT64)
    cat = g.node("Concat", [a, b], axis=1)
    y = g.node("Neg", [g.node("Gather", [cat, i], axis=1)])
    g.out(y)
    ins = {"a": rnd(rng, (3, 4)), "b": rnd(rng, (3, 5)), "i": np.array([5, 7], np.int64)}
    return g.model(), ins, {y: -ref_gather(np.concatenate([ins["a"], ins["b"]], 1), ins["i"], 1)}


def c_gather_slice(rng):
    g = G()
    x = g.inp("x", [3, 9, 2])
    s = g.slice(x, [2], [8], [1])
    idx = np.array([0, 5, -2], np.int64)
    y = g.node("Neg", [g.node("Gather", [s, g.const(idx)], axis=1)])
    g.out(y)
    ins = {"x": rnd(rng, (3, 9, 2))}
    return g.model(), ins, {y: -ref_gather(ins["x"][:, 2:8], idx, 1)}


def c_gather_slice_other_axis_cut(rng):
    """The Slice also cuts an axis the Gather keeps: not one Gather of x."""
    g = G()
    x = g.inp("x", [4, 9])
    s = g.slice(x, [1, 2], [3, 8], [0, 1])
    idx = np.array([1], np.int64)
    y = g.node("Neg", [g.node("Gather", [s, g.const(idx)], axis=1)])
    g.out(y)
    ins = {"x": rnd(rng, (4, 9))}
    return g.model(), ins, {y: -ref_gather(ins["x"][1:3, 2:8], idx, 1)}


def c_concat_concat(rng):
    g = G()
    a, b, c, d = (g.inp(k, [2, 3, n]) for k, n in (("a", 2), ("b", 3), ("c", 1), ("d", 4)))
    inner = g.node("Concat", [b, c], axis=-1)
    y = g.node("Concat", [a, inner, d], axis=2)
    g.out(y)
    ins = {k: rnd(rng, (2, 3, n)) for k, n in (("a", 2), ("b", 3), ("c", 1), ("d", 4))}
    return g.model(), ins, {y: np.concatenate([ins[k] for k in "abcd"], axis=2)}


def c_concat_concat_two_readers(rng):
    g = G()
    a, b, c = (g.inp(k, [2, n]) for k, n in (("a", 2), ("b", 3), ("c", 1)))
    inner = g.node("Concat", [b, c], axis=1)
    y = g.node("Concat", [a, inner], axis=1)
    z = g.node("Neg", [inner])
    g.out(y)
    g.out(z)
    ins = {k: rnd(rng, (2, n)) for k, n in (("a", 2), ("b", 3), ("c", 1))}
    bc = np.concatenate([ins["b"], ins["c"]], 1)
    return g.model(), ins, {y: np.concatenate([ins["a"], bc], 1), z: -bc}


def c_concat_concat_inner_output(rng):
    g = G()
    a, b, c = (g.inp(k, [2, n]) for k, n in (("a", 2), ("b", 3), ("c", 1)))
    inner = g.node("Concat", [b, c], axis=1)
    y = g.node("Concat", [a, inner], axis=1)
    g.out(y)
    g.out(inner)
    ins = {k: rnd(rng, (2, n)) for k, n in (("a", 2), ("b", 3), ("c", 1))}
    bc = np.concatenate([ins["b"], ins["c"]], 1)
    return g.model(), ins, {y: np.concatenate([ins["a"], bc], 1), inner: bc}


def c_concat_concat_other_axis(rng):
    g = G()
    a, b, c = g.inp("a", [2, 4]), g.inp("b", [1, 2]), g.inp("c", [1, 2])
    inner = g.node("Concat", [b, c], axis=1)
    y = g.node("Concat", [a, inner], axis=0)
    g.out(y)
    ins = {"a": rnd(rng, (2, 4)), "b": rnd(rng, (1, 2)), "c": rnd(rng, (1, 2))}
    bc = np.concatenate([ins["b"], ins["c"]], 1)
    return g.model(), ins, {y: np.concatenate([ins["a"], bc], 0)}


def c_transpose_transpose(rng):
    g = G()
    x = g.inp("x", [2, 3, 4, 5])
    t1 = g.node("Transpose", [x], perm=[0, 2, 1, 3])
    y = g.node("Transpose", [t1], perm=[2, 0, 3, 1])
    g.out(y)
    ins = {"x": rnd(rng, (2, 3, 4, 5))}
    return g.model(), ins, {y: ins["x"].transpose(0, 2, 1, 3).transpose(2, 0, 3, 1)}


def c_transpose_cancel(rng):
    g = G()
    x = g.inp("x", [2, 3, 4])
    t1 = g.node("Transpose", [x], perm=[1, 2, 0])
    y = g.node("Neg", [g.node("Transpose", [t1], perm=[2, 0, 1])])
    g.out(y)
    ins = {"x": rnd(rng, (2, 3, 4))}
    return g.model(), ins, {y: -ins["x"]}


def c_transpose_default_perm(rng):
    """No perm attribute: the dims reversed, twice -> the identity."""
    g = G()
    x = g.inp("x", [2, 3, 4])
    y = g.node("Neg", [g.node("Transpose", [g.node("Transpose", [x])])])
    g.out(y)
    ins = {"x": rnd(rng, (2, 3, 4))}
    return g.model(), ins, {y: -ins["x"]}


def c_transpose_then_default(rng):
    """The second Transpose has no perm (reverse): the composed one gets a perm attribute."""
    g = G()
    x = g.inp("x", [2, 3, 4])
    t1 = g.node("Transpose", [x], perm=[1, 2, 0])
    y = g.node("Transpose", [t1])
    g.out(y)
    ins = {"x": rnd(rng, (2, 3, 4))}
    return g.model(), ins, {y: ins["x"].transpose(1, 2, 0).transpose()}


def c_concat_one_input(rng):
    g = G()
    x = g.inp("x", [2, 3])
    y = g.node("Neg", [g.node("Concat", [x], axis=1)])
    g.out(y)
    ins = {"x": rnd(rng, (2, 3))}
    return g.model(), ins, {y: -ins["x"]}


def c_transpose_inner_output(rng):
    """The first Transpose is a graph output: it stays, the second reads x directly."""
    g = G()
    x = g.inp("x", [2, 3, 4])
    t1 = g.node("Transpose", [x], perm=[1, 0, 2])
    y = g.node("Transpose", [t1], perm=[0, 2, 1])
    g.out(y)
    g.out(t1)
    ins = {"x": rnd(rng, (2, 3, 4))}
    return g.model(), ins, {y: ins["x"].transpose(1, 0, 2).transpose(0, 2, 1),
                            t1: ins["x"].transpose(1, 0, 2)}


def c_transpose_size1(rng):
    """[1, 9, 16] perm (1, 0, 2) keeps the element order: a Reshape, run as a view."""
    g = G()
    x = g.inp("x", [1, 9, 16])
    y = g.node("Neg", [g.node("Transpose", [x], perm=[1, 0, 2])])
    g.out(y)
    ins = {"x": rnd(rng, (1, 9, 16))}
    return g.model(), ins, {y: -ins["x"].transpose(1, 0, 2)}


def c_transpose_size1_output(rng):
    """The same Transpose writing a graph output: a Reshape that copies."""
    g = G()
    x = g.inp("x", [3, 1, 1, 5])
    y = g.node("Transpose", [x], perm=[2, 0, 3, 1])
    g.out(y)
    ins = {"x": rnd(rng, (3, 1, 1, 5))}
    return g.model(), ins, {y: ins["x"].transpose(2, 0, 3, 1)}


def c_transpose_real(rng):
    g = G()
    x = g.inp("x", [1, 9, 16])
    y = g.node("Transpose", [x], perm=[0, 2, 1])
    g.out(y)
    ins = {"x": rnd(rng, (1, 9, 16))}
    return g.model(), ins, {y: ins["x"].transpose(0, 2, 1)}


def view_of_concat(rng, view="Unsqueeze", second_reader=None, view_output=False):
    """torch's x.unsqueeze(2)[..., 0:3] and x[..., 6] of x = cat([p, q], -1): every read in p."""
    g = G()
    p, q = g.inp("p", [2, 5, 8]), g.inp("q", [2, 5, 3])
    cat = g.node("Concat", [p, q], axis=-1)
    if view == "Unsqueeze":
        w = g.node("Unsqueeze", [cat, g.const([2])])
    else:
        w = g.node("Reshape", [cat, g.const([2, 5, 1, -1])])
    s = g.slice(w, [1], [4], [3])
    i7 = np.array([[6, -4]], np.int64)  # -4 is 7 of 11: both in p
    t = g.node("Gather", [w, g.const(i7)], axis=3)
    outs = [g.node("Neg", [s]), g.node("Neg", [t])]
    ins = {"p": rnd(rng, (2, 5, 8)), "q": rnd(rng, (2, 5, 3))}
    wr = np.concatenate([ins["p"], ins["q"]], -1)[:, :, None, :]
    refs = {outs[0]: -wr[..., 1:4], outs[1]: -ref_gather(wr, i7, 3)}
    if second_reader == "q":
        u = g.node("Neg", [g.slice(w, [9], [11], [3])])
        outs.append(u)
        refs[u] = -wr[..., 9:11]
    elif second_reader == "neg":
        u = g.node("Neg", [w])
        outs.append(u)
        refs[u] = -wr
    if view_output:
        outs.append(w)
        refs[w] = wr
    for o in outs:
        g.out(o)
    return g.model(), ins, refs


def repeats(rng, differ=False, as_output=False):
    """Each op twice on the same input (the bounds and indices as separate initializers)."""
    g = G()
    x = g.inp("x", [3, 6, 4])
    y = g.inp("y", [3, 2, 4])
    xs = g.inp("xs", [1, 6, 3])
    i2 = np.array([[2, 0]], np.int64)
    pairs = [
        (lambda k: g.slice(x, [1], [4 + (k if differ else 0)], [1]),
         lambda k: x_[:, 1:4 + (k if differ else 0)]),
        (lambda k: g.node("Gather", [x, g.const(i2 + (k if differ else 0))], axis=2),
         lambda k: ref_gather(x_, i2 + (k if differ else 0), 2)),
        (lambda k: g.node("Transpose", [xs], perm=[2, 1, 0] if k == 0 or not differ else [0, 2, 1]),
         lambda k: xs_.transpose([2, 1, 0] if k == 0 or not differ else [0, 2, 1])),
        (lambda k: g.node("Concat", [x, y] if k == 0 or not differ else [y, x], axis=1),
         lambda k: np.concatenate([x_, y_] if k == 0 or not differ else [y_, x_], 1)),
    ]
    ins = {"x": rnd(rng, (3, 6, 4)), "y": rnd(rng, (3, 2, 4)), "xs": rnd(rng, (1, 6, 3))}
    x_, y_, xs_ = ins["x"], ins["y"], ins["xs"]
    refs = {}
    for make, ref in pairs:
        for k in (0, 1):
            t = make(k)
            r = ref(k)
            if as_output and k == 1:
                g.out(t)
                refs[t] = r
            else:
                o = g.node("Neg", [t])
                g.out(o)
                refs[o] = -r
    return g.model(), ins, refs


def c_symbolic_batch(rng):
    """A dim the model leaves open, fixed at build (--shapes): every shape is then static."""
    g = G()
    g.inputs.append(helper.make_tensor_value_info("a", F32, ["n", 3]))
    g.inputs.append(helper.make_tensor_value_info("b", F32, ["n", 4]))
    cat = g.node("Concat", ["a", "b"], axis=1)
    y = g.node("Neg", [g.slice(cat, [3], [7], [1])])
    g.out(y)
    ins = {"a": rnd(rng, (5, 3)), "b": rnd(rng, (5, 4))}
    return g.model(), ins, {y: -ins["b"]}


def identity(rng, op, vals, dtype=np.float32, x_shape=(3, 4), first=False, as_output=False):
    """op(x, constant vals) (the constant first when first), read by a Neg or a graph output."""
    g = G()
    elem = F32 if dtype == np.float32 else TensorProto.INT64
    x = g.inp("x", list(x_shape), elem)
    c = g.const(vals, dtype)
    y = g.node(op, [c, x] if first else [x, c])
    if not as_output:
        y = g.node("Neg", [y])
    g.out(y, elem)
    xv = rnd(rng, x_shape) if dtype == np.float32 else rng.integers(1, 1000, x_shape).astype(np.int64)
    cv = np.array(vals, dtype)
    f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
         "Div": np.floor_divide if dtype == np.int64 else np.divide}[op]
    r = f(cv, xv) if first else f(xv, cv)
    return g.model(), {"x": xv}, {y: (r if as_output else -r).astype(dtype)}


CASES = [
    # name, build, expected layers, extra s4dexec flags
    ("slice_concat_one_input", c_slice_concat_one_input, ["Neg"], []),
    ("slice_concat_inside", c_slice_concat_inside, ["Slice", "Neg"], []),
    ("slice_concat_clamped_start", c_slice_concat_clamped_start, ["Concat", "Slice", "Neg"], []),
    ("slice_concat_spans_two", c_slice_concat_spans_two, ["Concat", "Slice", "Neg"], []),
    ("slice_concat_step2", c_slice_concat_step2, ["Concat", "Slice", "Neg"], []),
    ("slice_concat_other_axis", c_slice_concat_other_axis, ["Concat", "Slice", "Neg"], []),
    ("slice_is_graph_output", c_slice_is_graph_output, ["Slice"], []),
    ("slice_all_output", c_slice_all_output, ["Slice"], []),
    ("slice_slice", c_slice_slice, ["Slice", "Neg"], []),
    ("slice_slice_step2", c_slice_slice_step2, ["Slice", "Slice", "Neg"], []),
    ("slice_slice_concat", c_slice_slice_concat, ["Slice", "Neg"], []),
    ("slice_all", c_slice_all, ["Neg"], []),
    ("opset9_slice_slice", c_opset9_slice_slice, ["Slice", "Slice", "Neg"], []),
    ("gather_concat", c_gather_concat, ["Gather", "Neg"], []),
    ("gather_concat_int32_scalar", c_gather_concat_int32_scalar, ["Gather", "Neg"], []),
    ("gather_concat_spans_two", c_gather_concat_spans_two, ["Concat", "Gather", "Neg"], []),
    ("gather_concat_other_axis", c_gather_concat_other_axis, ["Concat", "Gather", "Neg"], []),
    ("gather_runtime_indices", c_gather_runtime_indices, ["Concat", "Gather", "Neg"], []),
    ("gather_slice", c_gather_slice, ["Gather", "Neg"], []),
    ("gather_slice_other_axis_cut", c_gather_slice_other_axis_cut, ["Slice", "Gather", "Neg"], []),
    ("concat_concat", c_concat_concat, ["Concat"], []),
    ("concat_concat_two_readers", c_concat_concat_two_readers, ["Concat", "Concat", "Neg"], []),
    ("concat_concat_inner_output", c_concat_concat_inner_output, ["Concat", "Concat"], []),
    ("concat_concat_other_axis", c_concat_concat_other_axis, ["Concat", "Concat"], []),
    ("transpose_transpose", c_transpose_transpose, ["Transpose"], []),
    ("transpose_cancel", c_transpose_cancel, ["Neg"], []),
    ("transpose_default_perm", c_transpose_default_perm, ["Neg"], []),
    ("transpose_then_default", c_transpose_then_default, ["Transpose"], []),
    ("transpose_inner_output", c_transpose_inner_output, ["Transpose", "Transpose"], []),
    ("concat_one_input", c_concat_one_input, ["Neg"], []),
    ("transpose_size1", c_transpose_size1, ["Reshape(view)", "Neg"], []),
    ("transpose_size1_output", c_transpose_size1_output, ["Reshape"], []),
    ("transpose_real", c_transpose_real, ["Transpose"], []),
    ("view_of_concat", view_of_concat, ["Unsqueeze(view)", "Slice", "Gather", "Neg", "Neg"], []),
    ("view_of_concat_reshape", lambda r: view_of_concat(r, "Reshape"),
     ["Reshape(view)", "Slice", "Gather", "Neg", "Neg"], []),
    ("view_of_concat_reads_two_inputs", lambda r: view_of_concat(r, second_reader="q"),
     ["Concat", "Unsqueeze(view)", "Slice", "Slice", "Gather", "Neg", "Neg", "Neg"], []),
    ("view_of_concat_other_reader", lambda r: view_of_concat(r, second_reader="neg"),
     ["Concat", "Unsqueeze(view)", "Slice", "Gather", "Neg", "Neg", "Neg"], []),
    ("view_of_concat_is_output", lambda r: view_of_concat(r, view_output=True),
     ["Concat", "Unsqueeze", "Slice", "Gather", "Neg", "Neg"], []),
    ("repeats", repeats, ["Slice", "Gather", "Transpose", "Concat"] + ["Neg"] * 8, []),
    ("repeats_differ", lambda r: repeats(r, differ=True),
     ["Slice", "Gather", "Transpose", "Concat"] * 2 + ["Neg"] * 8, []),
    ("repeats_as_output", lambda r: repeats(r, as_output=True),
     ["Slice", "Gather", "Transpose", "Concat"] * 2 + ["Neg"] * 4, []),
    ("symbolic_batch", c_symbolic_batch, ["Neg"], ["--shapes=a:5x3,b:5x4"]),
    # Arithmetic that leaves its operand's bits as they are (a batch offset of 0 added to TopK's
    # indices, a scale of 1): the reader reads the operand.
    ("identity_int_add_zero", lambda r: identity(r, "Add", [[0]], np.int64), ["Neg"], []),
    ("identity_int_zero_add", lambda r: identity(r, "Add", [0, 0, 0, 0], np.int64, first=True), ["Neg"], []),
    ("identity_int_sub_zero", lambda r: identity(r, "Sub", 0, np.int64), ["Neg"], []),
    ("identity_int_mul_one", lambda r: identity(r, "Mul", [[1], [1], [1]], np.int64), ["Neg"], []),
    ("identity_int_div_one", lambda r: identity(r, "Div", 1, np.int64), ["Neg"], []),
    ("identity_float_mul_one", lambda r: identity(r, "Mul", [1.0] * 4, first=True), ["Neg"], []),
    ("identity_float_div_one", lambda r: identity(r, "Div", 1.0), ["Neg"], []),
    ("identity_float_sub_zero", lambda r: identity(r, "Sub", [[0.0]]), ["Neg"], []),
    ("identity_float_add_negzero", lambda r: identity(r, "Add", -0.0), ["Neg"], []),
    # Near misses: x + (+0) turns -0 into +0; 0 - x; a constant that broadcasts x to a larger
    # shape; a constant that is not all identity; the result a graph output.
    ("identity_float_add_zero_kept", lambda r: identity(r, "Add", 0.0), ["Add", "Neg"], []),
    ("identity_zero_sub_kept", lambda r: identity(r, "Sub", 0, np.int64, first=True), ["Sub", "Neg"], []),
    ("identity_broadcast_kept", lambda r: identity(r, "Add", [[0, 0]], np.int64, x_shape=(3, 1)),
     ["Add", "Neg"], []),
    ("identity_not_all_kept", lambda r: identity(r, "Mul", [1.0, 1.0, 2.0, 1.0]), ["Mul", "Neg"], []),
    ("identity_output_kept", lambda r: identity(r, "Add", [[0]], np.int64, as_output=True), ["Add"], []),
]


def run_case(args, name, build, want, flags, rng, device, env, tag):
    d = os.path.join(args.scratch, f"{name}_{tag}")
    os.makedirs(d, exist_ok=True)
    model, inputs, refs = build(rng)
    path = os.path.join(d, "model.onnx")
    onnx.save(model, path)
    outd = os.path.join(d, "out")
    cmd = [args.s4dexec, f"--onnx={path}", f"--plugins={args.plugins}", f"--device={device}",
           "--iterations=1", "--warmUp=0", "--dumpLayerInfo", load_inputs_flag(d, inputs),
           f"--exportOutput={outd}"] + flags
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=120, env=env)
    if p.returncode != 0:
        return [f"s4dexec failed ({p.returncode}): {p.stderr.strip()}"]
    msgs = []
    got_types = layer_types(p.stdout, mark_views=True)
    if tag == "fallback":
        got_types = [t for t in got_types if t != "Copy"]
    if collections.Counter(got_types) != collections.Counter(want):
        msgs.append(f"layers {got_types}, expected {want}")
    for out, ref in refs.items():
        got = np.load(os.path.join(outd, f"{out}.npy"))
        ref = np.asarray(ref)
        assert np.count_nonzero(ref) == ref.size, f"{name}: reference has zeros"
        if got.dtype != ref.dtype or got.shape != ref.shape or got.tobytes() != ref.tobytes():
            msgs.append(f"output {out}: got {got.dtype}{list(got.shape)}, want "
                        f"{ref.dtype}{list(ref.shape)}, not bit for bit equal")
    return msgs


def main():
    ap = fusion_arg_parser()
    args = ap.parse_args()
    # The view folding (which runs later and takes Slices, Gathers and Transposes into the
    # element-wise layers that read them) and the pointwise fusion are off: the layer lists
    # here are the simplification's.
    base = dict(os.environ, S4D_FOLD_VIEWS="0", S4D_FUSE_POINTWISE="0")
    runs = [("plain", args.device, base, [])]
    if args.device == "cuda":
        env = dict(base, S4D_GUARDED_DECLINE="Neg")
        runs.append(("fallback", "cuda", env, ["--allowFallback"]))
    failures = 0
    for tag, device, env, extra in runs:
        rng = np.random.default_rng(2024)
        for name, build, want, flags in CASES:
            if args.k not in name:
                continue
            msgs = run_case(args, name, build, want, flags + extra, rng, device, env, tag)
            if msgs:
                failures += 1
                print(f"FAIL {name} ({tag}): " + "; ".join(msgs))
            else:
                print(f"ok   {name} ({tag}): {want}")
    print(f"movement simplification: {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
