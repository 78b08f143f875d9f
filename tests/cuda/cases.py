"""Helpers for the per-family op models of device_compare.py."""
from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


@dataclass
class Case:
    name: str
    model: object
    inputs: dict = field(default_factory=dict)
    rtol: float = 1e-5
    atol: float = 1e-6


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
