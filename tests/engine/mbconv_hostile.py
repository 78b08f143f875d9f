"""Engine files with a malformed s4d::FusedMBConv layer are refused with a clear error.

usage: mbconv_hostile.py S4DEXEC PLUGINS SCRATCH

Builds a CPU engine from one inverted residual block the pass fuses (expand 1x1 with ReLU6,
depthwise 3x3 with ReLU6, project 1x1, residual Add), checks that it loads and runs as built
(also after a round trip through tests/fuzz/engine_file.py), then edits the fused layer one way at
a time (engine_file.py recomputes the sizes and the checksum, as anyone can) and checks that
loading each fails with exit status 1 and a message that names the layer and the fault: the
kernel's payload (magic, version, length), the input count, inputs of the wrong shape in the
weight, bias and residual slots, a missing W3, an expand activation without W1, and the
dw_strides, dw_pads and activation attributes (values, counts, types).
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from exec_util import build_good_engine, check_hostile_layers, fused_layer_of, layer_attr  # noqa: E402
from engine_file import ATTR_FLOAT, ATTR_INT, ATTR_INTS, ATTR_STRING, EngineFile  # noqa: E402

F32 = TensorProto.FLOAT
ABSENT = 0xFFFFFFFF
X, W1, B1, W2, B2, W3, B3, Z = range(8)


def model():
    rng = np.random.default_rng(99)
    inits = []

    def const(name, a):
        inits.append(numpy_helper.from_array(np.asarray(a, np.float32), name))
        return name

    def w(name, shape):
        return const(name, rng.normal(0, 0.3, shape))

    six, zero = const("six", 6.0), const("zero", 0.0)
    nodes = [helper.make_node("Conv", ["x", w("w1", (72, 24, 1, 1)), w("b1", (72,))], ["e"], name="expand"),
             helper.make_node("Clip", ["e", zero, six], ["e6"], name="expand_act"),
             helper.make_node("Conv", ["e6", w("w2", (72, 1, 3, 3)), w("b2", (72,))], ["d"], name="dw",
                              group=72, pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Clip", ["d", zero, six], ["d6"], name="dw_act"),
             helper.make_node("Conv", ["d6", w("w3", (24, 72, 1, 1)), w("b3", (24,))], ["p"], name="project"),
             helper.make_node("Add", ["p", "x"], ["o"], name="residual")]
    g = helper.make_graph(nodes, "mbconv_hostile", [helper.make_tensor_value_info("x", F32, [2, 24, 13, 9])],
                          [helper.make_tensor_value_info("o", F32, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def fused_layer(e):
    return fused_layer_of(e, "FusedMBConv")


def attr(layer, name):
    a = layer_attr(layer, name)
    if a is None:
        raise RuntimeError(f"the fused layer has no attribute '{name}'")
    return a


def cases():
    """(name, edit(layer), expected substring of the error)."""
    c = []

    def payload(b):
        def edit(layer):
            layer["backend_payload"] = b
        return edit
    good = (0x424d3453).to_bytes(4, "little") + (1).to_bytes(4, "little")
    c.append(("payload_magic", payload(b"XXXX" + good[4:]), "magic 0x58585858"))
    c.append(("payload_version", payload(good[:4] + (2).to_bytes(4, "little")), "version 2"))
    c.append(("payload_short", payload(good[:6]), "expected 8"))
    c.append(("payload_long", payload(good + b"\0\0\0\0"), "expected 8"))

    def inputs(f):
        def edit(layer):
            layer["inputs"] = f(list(layer["inputs"]))
        return edit
    c.append(("inputs_5", inputs(lambda v: v[:5]), "6 to 8 inputs"))
    c.append(("inputs_9", inputs(lambda v: v + [v[0]]), "6 to 8 inputs"))

    def slot(k, src):
        def f(v):
            v[k] = ABSENT if src is None else v[src]
            return v
        return inputs(f)
    c.append(("w2_not_depthwise", slot(W2, W1), "W2 must be depthwise"))
    c.append(("w3_shape", slot(W3, W1), "W3 must be"))
    c.append(("w3_missing", slot(W3, None), "input W3 is required"))
    c.append(("w1_shape", slot(W1, W3), "W1 must be"))
    c.append(("b1_shape", slot(B1, B3), "B1 must be float32 [72], got float32 [24]"))
    c.append(("b3_shape", slot(B3, B2), "B3 must be float32 [24], got float32 [72]"))
    c.append(("z_shape", slot(Z, W3), "Z must be the output's shape"))

    def no_expand(v):
        v[W1] = v[B1] = ABSENT
        return v
    c.append(("expand_act_without_w1", inputs(no_expand), "expand_activation 'Clip' without W1"))

    def set_attr(name, typ, value):
        def edit(layer):
            a = attr(layer, name)
            a["type"], a["value"] = typ, value
        return edit
    c.append(("strides_3", set_attr("dw_strides", ATTR_INTS, [3, 3]), "dw_strides [3, 3]"))
    c.append(("strides_unequal", set_attr("dw_strides", ATTR_INTS, [1, 2]), "dw_strides [1, 2]"))
    c.append(("strides_count", set_attr("dw_strides", ATTR_INTS, [2]), "dw_strides must hold 2 values"))
    c.append(("strides_int", set_attr("dw_strides", ATTR_INT, 2), "dw_strides"))
    c.append(("pads_k", set_attr("dw_pads", ATTR_INTS, [3, 1, 1, 1]), "dw_pads [3, 1, 1, 1]"))
    c.append(("pads_negative", set_attr("dw_pads", ATTR_INTS, [1, -1, 1, 1]), "dw_pads [1, -1, 1, 1]"))
    c.append(("pads_count", set_attr("dw_pads", ATTR_INTS, [1, 1, 1]), "dw_pads must hold 4 values"))
    c.append(("activation_unknown", set_attr("activation", ATTR_STRING, b"Gelu"), "activation 'Gelu'"))
    c.append(("dw_activation_unknown", set_attr("dw_activation", ATTR_STRING, b"Tanh"), "dw_activation 'Tanh'"))
    c.append(("clip_empty", set_attr("expand_activation_alpha", ATTR_FLOAT, 7.0), "Clip range [7, 6] is empty"))
    c.append(("alpha_string", set_attr("dw_activation_alpha", ATTR_STRING, b"0"), "dw_activation_alpha"))

    def extra_attr(layer):
        layer["attrs"] = layer["attrs"] + [{"name": "dw_dilations", "type": ATTR_INTS, "value": [2, 2]}]
    c.append(("unknown_attr", extra_attr, "dw_dilations"))
    return c


def main():
    exe, plugins, scratch = sys.argv[1:4]
    engine = build_good_engine(exe, plugins, scratch, model())
    if engine is None:
        return 1
    layer = fused_layer(EngineFile.load(engine))
    print(f"fused layer '{layer['name']}': {len(layer['inputs'])} inputs, "
          f"payload {layer['backend_payload'].hex()}")
    failures = check_hostile_layers(exe, plugins, scratch, engine, "FusedMBConv", cases(), "layers")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
