"""Engine files with a malformed s4d::FusedPointwise program are refused with a clear error.

usage: pointwise_hostile.py S4DEXEC PLUGINS SCRATCH

Builds a CPU engine whose chain the pass fuses (Greater -> Where -> Mul -> Add -> Clip over two
float inputs and a bool mask), checks that it loads and runs as built, then edits the fused
layer's attributes or inputs one way at a time (tests/fuzz/engine_file.py recomputes the sizes and
the checksum, as anyone can) and checks that loading each fails with exit status 1 and a message
that names the layer and the fault: opcodes and slot indices out of range, forward references,
lengths, operand dtypes, Clip constant indices, Cast targets, fields beyond 32 bits, unread or
too many inputs, missing or mistyped attributes; strided views (the views attribute) that read
past the input, have negative offsets or strides, huge dims, malformed records or shapes that do
not broadcast.
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from exec_util import build_good_engine, check_hostile_layers, fused_layer_of, layer_attr  # noqa: E402
from engine_file import ATTR_FLOATS, ATTR_INTS, EngineFile  # noqa: E402

F32, BOOL = TensorProto.FLOAT, TensorProto.BOOL


def model():
    nodes = [helper.make_node("Greater", ["x", "t"], ["g"], name="gt"),
             helper.make_node("And", ["g", "m"], ["c"], name="and"),
             helper.make_node("Where", ["c", "x", "y"], ["w"], name="where"),
             helper.make_node("Mul", ["w", "y"], ["p"], name="mul"),
             helper.make_node("Add", ["p", "x"], ["a"], name="add"),
             helper.make_node("Clip", ["a", "lo", "hi"], ["o"], name="clip")]
    inits = [numpy_helper.from_array(np.array(0.25, np.float32), "t"),
             numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(1.5, np.float32), "hi")]
    g = helper.make_graph(nodes, "pw_hostile",
                          [helper.make_tensor_value_info("x", F32, [3, 40]),
                           helper.make_tensor_value_info("y", F32, [40]),
                           helper.make_tensor_value_info("m", BOOL, [3, 1])],
                          [helper.make_tensor_value_info("o", F32, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def fused_layer(e):
    return fused_layer_of(e, "FusedPointwise")


def set_prog(f):
    def edit(layer):
        a = layer_attr(layer, "program")
        a["value"] = f(list(a["value"]))
    return edit


def cases():
    """(name, edit(layer), expected substring of the error)."""
    c = []
    c.append(("opcode_range", set_prog(lambda p: [99] + p[1:]), "opcode 99"))
    c.append(("opcode_negative", set_prog(lambda p: [-1] + p[1:]), "opcode -1"))
    c.append(("slot_range", set_prog(lambda p: p[:1] + [1000] + p[2:]), "slot 1000"))
    c.append(("slot_negative", set_prog(lambda p: p[:1] + [-7] + p[2:]), "slot -7"))

    def forward(layer):
        a = layer_attr(layer, "program")
        p = list(a["value"])
        p[1] = len(layer["inputs"]) + 1  # instruction 0 reads the result of instruction 1
        a["value"] = p
    c.append(("slot_forward", forward, "earlier results"))

    def own_result(layer):
        a = layer_attr(layer, "program")
        p = list(a["value"])
        nin = len(layer["inputs"])
        k = len(p) // 4 - 1
        p[4 * k + 1] = nin + k  # the instruction's own slot
        a["value"] = p
    c.append(("slot_self", own_result, "earlier results"))
    c.append(("length_not_4", set_prog(lambda p: p[:-1]), "4 per instruction"))
    c.append(("length_empty", set_prog(lambda p: []), "4 per instruction"))
    c.append(("length_33", set_prog(lambda p: p + [6, 0, -1, -1] * (33 - len(p) // 4)), "1 to 32 instructions"))
    c.append(("field_64bit", set_prog(lambda p: p[:2] + [1 << 40] + p[3:]), "out of range"))

    def first_instr(op, a, b, cc):
        return set_prog(lambda p: [op, a, b, cc] + p[4:])
    # instruction 0 is Greater(x, t): make it Add(x, m) (float and bool)
    c.append(("dtype_mix", first_instr(0, 0, 2, -1), "dtypes"))
    c.append(("unused_operand", first_instr(19, 0, 1, 5), "operand 2 must be -1"))
    c.append(("cast_int64", first_instr(27, 0, 7, -1), "target dtype 7"))
    c.append(("not_of_float", first_instr(26, 0, -1, -1), "bool expected"))

    def clip_const(layer):
        a = layer_attr(layer, "program")
        p = list(a["value"])
        for k in range(len(p) // 4):
            if p[4 * k] == 16:
                p[4 * k + 2] = 9
        a["value"] = p
    c.append(("clip_constant_range", clip_const, "constant 9"))

    def drop_program(layer):
        layer["attrs"] = [a for a in layer["attrs"] if a["name"] != "program"]
    c.append(("program_missing", drop_program, "'program'"))

    def constants_ints(layer):
        a = layer_attr(layer, "constants")
        a["type"], a["value"] = ATTR_INTS, [1, 2]
    c.append(("constants_wrong_type", constants_ints, "constants"))

    def program_floats(layer):
        a = layer_attr(layer, "program")
        a["type"], a["value"] = ATTR_FLOATS, [float(v) for v in a["value"]]
    c.append(("program_wrong_type", program_floats, "program"))

    def extra_input(layer):
        # one more input, the results' slots moved up by one: the program never reads it
        nin = len(layer["inputs"])
        layer["inputs"] = layer["inputs"] + [layer["inputs"][0]]
        a = layer_attr(layer, "program")
        p = list(a["value"])
        for k in range(len(p) // 4):
            op = p[4 * k]
            nslots = 3 if op == 17 else 1 if op in (16, 26, 27) or 6 <= op <= 15 else 2
            for j in range(1, nslots + 1):
                if p[4 * k + j] >= nin:
                    p[4 * k + j] += 1
        a["value"] = p
    c.append(("input_unread", extra_input, "never read"))

    def nine_inputs(layer):
        layer["inputs"] = (layer["inputs"] * 9)[:9]
    c.append(("inputs_9", nine_inputs, "1 to 8 inputs"))

    # Strided views (the views attribute): input 0 is x, float32 [3, 40], 120 elements.
    def views(v, type_=ATTR_INTS):
        def edit(layer):
            layer["attrs"].append({"name": "views", "type": type_, "value": v})
        return edit
    c.append(("view_past_end", views([0, 0, 2, 3, 40, 40, 2]), "reads past"))
    c.append(("view_offset_past_end", views([0, 200, 2, 3, 40, 40, 1]), "reads past"))
    c.append(("view_offset_negative", views([0, -1, 2, 3, 40, 40, 1]), "reads past"))
    c.append(("view_stride_negative", views([0, 119, 2, 3, 40, 40, -1]), "strides >= 0"))
    c.append(("view_dim_huge", views([0, 0, 1, 1 << 60, 0]), "at most 2^50"))
    c.append(("view_stride_overflow", views([0, 0, 2, 3, 40, 1 << 62, 1]), "reads past"))
    c.append(("view_input_range", views([9, 0, 0]), "names input 9"))
    c.append(("view_twice", views([0, 0, 2, 3, 40, 40, 1] * 2), "two records"))
    c.append(("view_cut_short", views([0, 0]), "cut short"))
    c.append(("view_rank_9", views([0, 0, 9] + [1] * 18), "rank 9"))
    c.append(("view_rank_without_dims", views([0, 0, 2, 3, 40, 40]), "rank 2"))
    c.append(("view_wrong_type", views([0.0, 0.0, 0.0], ATTR_FLOATS), "views"))
    # In range, but its shape [3, 7] does not broadcast with the other inputs' [40].
    c.append(("view_not_broadcast", views([0, 0, 2, 3, 7, 7, 1]), "cannot be broadcast"))
    return c


def main():
    exe, plugins, scratch = sys.argv[1:4]
    engine = build_good_engine(exe, plugins, scratch, model())
    if engine is None:
        return 1
    layer = fused_layer(EngineFile.load(engine))
    print(f"fused layer '{layer['name']}': {len(layer['attrs'][0]['value']) // 4} instructions, "
          f"{len(layer['inputs'])} inputs")
    failures = check_hostile_layers(exe, plugins, scratch, engine, "FusedPointwise", cases(), "programs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
