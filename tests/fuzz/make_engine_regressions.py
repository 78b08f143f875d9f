"""Writes the engine-file reproducers of tests/fuzz/corpus/engine/regress-*.

usage: make_engine_regressions.py [OUT_DIR]   (default: corpus/engine)

Each reproducer is a seed engine (make_seeds.py) edited in one way that once
made the loader accept a file it must refuse, or made a loaded engine write
out of bounds; engine_file.py recomputes sizes and the checksum, as anyone
can (FNV-1a is not a MAC). test_hostile.c (case engine_regressions) checks
that each is refused with a message naming the layer or tensor at fault, or
runs correctly; the engine fuzz target replays them in every build. Rerun
after make_seeds.py when the engine format changes.
"""
import os
import sys

from engine_file import (ATTR_INT, LAYER_OP, PLACE_ARENA, EngineFile)

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "corpus/engine")


def seed(name):
    return EngineFile.load(os.path.join(SEEDS, f"seed-{name}.s4de"))


def extra_layer(e, op_type, inputs, outputs, attrs=()):
    """Appends a layer of the default domain to e."""
    base = e.layers[0]
    e.layers.append({"name": f"extra_{op_type.lower()}", "kind": LAYER_OP, "device": 0,
                     "precision": 1, "format": 0, "domain": "", "op_type": op_type,
                     "opset": base["opset"], "workspace": 0, "inputs": list(inputs),
                     "outputs": list(outputs), "attrs": list(attrs), "backend_payload": b"",
                     "tail": b""})


def duplicate_tensor_names():
    """Input 'x' and output 'x': the output could not be found by name after a run."""
    e = seed("test_abs")
    e.tensor("y")[1]["name"] = "x"
    return e


def workspace_size_unbounded():
    """A workspace of 2^50 bytes in the file: the loader derives workspaces from the
    kernels, so the engine loads and runs with what its layers need."""
    e = seed("test_basic_conv_with_padding")
    e.meta["workspace_size"][0] = 1 << 50
    for l in e.layers:
        l["workspace"] = 1 << 50
    return e


def const_output_flag_2():
    """Flag 2 (frozen) on a graph output: a flag its placement cannot have."""
    e = seed("engine_mlp")
    e.tensor("y")[1]["flags"] = 2
    return e


def no_outputs_huge_arena():
    """No tensors, layers or outputs, and an arena of 3e14 bytes."""
    e = seed("engine_mlp")
    e.tensors, e.layers, e.inputs, e.outputs, e.weights = [], [], [], [], b""
    e.meta["arena_size"][0] = 300000000000000
    e.meta["arena_size_unplanned"][0] = 300000000000000
    return e


def no_outputs():
    """A consistent engine that computes nothing: no tensors, layers or outputs."""
    e = no_outputs_huge_arena()
    e.meta["arena_size"][0] = e.meta["arena_size_unplanned"][0] = 0
    return e


def layer_without_outputs(seed_name, op_type, ninputs):
    """A layer with inputs and no outputs: its op once wrote through a NULL output."""
    e = seed(seed_name)
    extra_layer(e, op_type, e.inputs[:1] * ninputs, [])
    return e


def slice_output_disagrees():
    """A Slice whose stored output shape is not what its inputs give (once a division by zero)."""
    e = seed("test_nllloss_NCd1_expanded")
    out = e.layer("Slice")["outputs"][0]
    e.set_dims(e.tensors[out]["name"], [3, 0, 2])
    return e


def input_dims_changed():
    """A graph input of another shape than the layers were built for: MatMul once wrote
    3,200 bytes into a 256-byte arena."""
    e = seed("engine_mlp")
    e.set_dims("x", [200, 3])
    return e


def reshape_output_disagrees():
    """A Reshape whose output holds more elements than its input (a heap overflow in the copy)."""
    e = seed("engine_mlp")
    e.set_dims("r", [4, 4])
    e.tensor("r")[1]["bytes"] = 64
    return e


def bias_dims_changed():
    """A bias that no longer broadcasts to the MatMul output (broadcast setup read past it)."""
    e = seed("engine_mlp")
    e.set_dims("b1", [8])
    return e


def gather_huge_dims():
    """Dims near 2^62 next to a zero dim: the element count is 0, every product of the
    other dims overflows."""
    e = seed("test_gather_negative_indices")
    x = e.layer("Gather")["inputs"][0]
    y = e.layer("Gather")["outputs"][0]
    e.set_dims(e.tensors[x]["name"], [0, 1 << 62, 1 << 62])
    e.set_dims(e.tensors[y]["name"], [0, 1 << 62, 3])
    return e


def conv_huge_dims():
    """A Conv input of [0, 1, 2^63-2, 5]: output size arithmetic once overflowed."""
    e = seed("test_basic_conv_with_padding")
    l = e.layer("Conv")
    e.set_dims(e.tensors[l["inputs"][0]]["name"], [0, 1, (1 << 63) - 2, 5])
    e.set_dims(e.tensors[l["outputs"][0]]["name"], [0, 1, (1 << 63) - 2, 5])
    return e


def misaligned_int64_weight():
    """A weight at an offset that is not a multiple of 64 (nor of 8)."""
    e = seed("engine_mlp")
    e.tensor("shape")[1]["offset"] += 4
    return e


def misaligned_float_tensor():
    """An arena tensor at an offset that is not a multiple of 64 (nor of 4)."""
    e = seed("engine_mlp")
    e.tensor("h2")[1]["offset"] += 2
    return e


def overlapping_live_tensors():
    """Two arena tensors that are live at once share bytes: a layer would overwrite its input."""
    e = seed("engine_mlp")
    e.tensor("h2")[1]["offset"] = e.tensor("h")[1]["offset"]
    return e


def arena_over_cap():
    """Activations of 24 GiB per context (above the default cap of 16 GiB), from a file of 2 KB."""
    e = seed("engine_mlp")
    rows = 3 << 27
    e.set_dims("x", [rows, 3])
    for name in ("h", "h2", "s", "y", "z"):
        e.set_dims(name, [rows, 4])
    e.set_dims("r", [4, rows])
    shape_at = e.tensor("shape")[1]["offset"]
    w = bytearray(e.weights)
    w[shape_at:shape_at + 16] = (4).to_bytes(8, "little") + rows.to_bytes(8, "little")
    e.weights = bytes(w)
    # Arena tensors side by side (h, h2, s, r), each 64-byte aligned: what the loader allows.
    off = 0
    for name in ("h", "h2", "s", "r"):
        t = e.tensor(name)[1]
        t["offset"] = off
        off += (t["bytes"] + 63) // 64 * 64
    e.meta["arena_size"][0] = e.meta["arena_size_unplanned"][0] = off
    return e


def renamed_attribute():
    """Softmax's 'axis' renamed to 'axes': once silently the default axis."""
    e = seed("engine_mlp")
    e.layer("Softmax")["attrs"][0]["name"] = "axes"
    return e


def keepdims_out_of_range():
    """keepdims = 1325400065: once accepted as 'true'."""
    e = seed("test_nllloss_NCd1_expanded")
    e.layer("ReduceMean")["attrs"] = [{"name": "keepdims", "type": ATTR_INT,
                                       "value": 1325400065}]
    return e


def attribute_wrong_type():
    """Transpose's perm stored as a single int."""
    e = seed("engine_mlp")
    e.layer("Transpose")["attrs"][0] = {"name": "perm", "type": ATTR_INT, "value": 1}
    return e


def arena_tensor_unwritten():
    """An arena tensor that only a graph input should hold: read before any layer writes it."""
    e = seed("engine_mlp")
    e.tensor("x")[1]["place"] = PLACE_ARENA
    e.inputs = []
    return e


def precision_disagrees():
    """A layer reporting float16 precision while it computes float32."""
    e = seed("engine_mlp")
    e.layer("Softmax")["precision"] = 10
    return e


CASES = {
    "duplicate-tensor-names": duplicate_tensor_names,
    "workspace-size-unbounded": workspace_size_unbounded,
    "const-output-flag-2": const_output_flag_2,
    "no-outputs-huge-arena": no_outputs_huge_arena,
    "no-outputs": no_outputs,
    "unary-without-outputs": lambda: layer_without_outputs("test_neg_example", "Neg", 1),
    "binary-without-outputs": lambda: layer_without_outputs("test_or2d", "Or", 2),
    "variadic-without-outputs": lambda: layer_without_outputs("test_min_one_input", "Min", 1),
    "slice-output-disagrees": slice_output_disagrees,
    "input-dims-changed": input_dims_changed,
    "reshape-output-disagrees": reshape_output_disagrees,
    "bias-dims-changed": bias_dims_changed,
    "gather-huge-dims": gather_huge_dims,
    "conv-huge-dims": conv_huge_dims,
    "misaligned-int64-weight": misaligned_int64_weight,
    "misaligned-float-tensor": misaligned_float_tensor,
    "overlapping-live-tensors": overlapping_live_tensors,
    "arena-over-cap": arena_over_cap,
    "renamed-attribute": renamed_attribute,
    "keepdims-out-of-range": keepdims_out_of_range,
    "attribute-wrong-type": attribute_wrong_type,
    "arena-tensor-unwritten": arena_tensor_unwritten,
    "precision-disagrees": precision_disagrees,
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else SEEDS
    os.makedirs(out, exist_ok=True)
    for name, make in CASES.items():
        make().save(os.path.join(out, f"regress-{name}.s4de"))
    print(f"{out}: {len(CASES)} engine reproducers")


if __name__ == "__main__":
    main()
