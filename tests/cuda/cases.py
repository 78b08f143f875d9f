"""Helpers for the per-family op models of device_compare.py."""
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass
class Case:
    name: str
    model: object
    inputs: dict = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-6
    # float16 cases (half_case): device A runs this float32 twin of the model on ref_inputs
    # (the same values, rounded to float16 and widened back), device_compare compares in NumPy.
    ref_model: object = None
    ref_inputs: dict = None
    # float16 cases: also bound ||b - a||_2 / ||a||_2 over the finite outputs (None: no bound).
    rel_l2: float = None
    # extra s4dexec options for device B only (e.g. ["--tf32"]: float32 on TF32 tensor cores)
    b_flags: list = field(default_factory=list)


NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.float16): TensorProto.FLOAT16,
    np.dtype(np.float64): TensorProto.DOUBLE,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.int32): TensorProto.INT32,
    np.dtype(np.int8): TensorProto.INT8,
    np.dtype(np.uint8): TensorProto.UINT8,
    np.dtype(np.bool_): TensorProto.BOOL,
}


def rand(rng, shape, dtype=np.float32, lo=-2.0, hi=2.0):
    """Uniform values in [lo, hi), never all zeros."""
    a = rng.uniform(lo, hi, size=shape)
    if np.dtype(dtype).kind in "iu":
        a = np.floor(a)
    a = a.astype(dtype)
    if a.size and not np.any(a):
        a.flat[0] = 1
    return a


def single_op(op, inputs, out_shapes, attrs=None, consts=None, out_dtypes=None, opset=OPSET,
              domain="", node_inputs=None):
    """A model of one node. inputs: {name: array} graph inputs (shape and dtype taken
    from the arrays); consts: {name: array} initializers; out_shapes: {name: shape};
    out_dtypes: {name: TensorProto type} (default FLOAT); node_inputs: the node's input
    names in order when they are not inputs then consts ("" for an omitted one)."""
    consts = consts or {}
    out_dtypes = out_dtypes or {}
    names_in = node_inputs if node_inputs is not None else (
        list(inputs) + [k for k in consts if k not in inputs])
    node = helper.make_node(op, names_in, list(out_shapes), name=op.lower(), domain=domain,
                            **(attrs or {}))
    g_in = [helper.make_tensor_value_info(k, NP_TO_ONNX[v.dtype], list(v.shape))
            for k, v in inputs.items()]
    g_out = [helper.make_tensor_value_info(k, out_dtypes.get(k, TensorProto.FLOAT), list(s))
             for k, s in out_shapes.items()]
    inits = [numpy_helper.from_array(v, k) for k, v in consts.items()]
    g = helper.make_graph([node], op.lower(), g_in, g_out, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _to_half_array(a):
    return np.asarray(a, np.float32).astype(np.float16)


def half_case(case, rtol, atol, keep=(), name=None, rel_l2=None):
    """The float16 version of a float32 case, for backends that run float16 (CUDA).

    Every float32 graph input, initializer and graph output becomes float16, except the
    tensors named in keep (e.g. Resize's scales, LayerNormalization's Mean / InvStdDev).
    The reference is the float32 model run on device A with the inputs and initializers
    rounded to float16 and widened back: both sides then see exactly the same values, and
    what is compared is the float16 kernel's own error (its float32 accumulation and the
    roundings of its results) against a float32 computation.
    """
    from onnx import numpy_helper as nh
    keep = set(keep)
    half = onnx.ModelProto()
    half.CopyFrom(case.model)
    ref = onnx.ModelProto()
    ref.CopyFrom(case.model)
    for m, to_half in ((half, True), (ref, False)):
        g = m.graph
        for vi in list(g.input) + list(g.output):
            if vi.name not in keep and vi.type.tensor_type.elem_type == TensorProto.FLOAT and to_half:
                vi.type.tensor_type.elem_type = TensorProto.FLOAT16
        del g.value_info[:]
        for i, t in enumerate(g.initializer):
            if t.data_type != TensorProto.FLOAT or t.name in keep:
                continue
            h = _to_half_array(nh.to_array(t))
            g.initializer[i].CopyFrom(nh.from_array(h if to_half else h.astype(np.float32), t.name))
    ins, ref_ins = {}, {}
    for k, v in case.inputs.items():
        if np.asarray(v).dtype == np.float32 and k not in keep:
            h = _to_half_array(v)
            ins[k], ref_ins[k] = h, h.astype(np.float32)
        else:
            ins[k] = ref_ins[k] = v
    return Case(name or case.name + "_f16", half, ins, rtol, atol, ref_model=ref, ref_inputs=ref_ins,
                rel_l2=rel_l2)
