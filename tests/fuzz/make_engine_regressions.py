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

from engine_file import (ATTR_INT, LAYER_OP, PLACE_ARENA, PLACE_VIEW, EngineFile)

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


def side_by_side(e, device=0):
    """Lays the arena tensors of a device out side by side (a plan any loader accepts) and
    sets the arena sizes to match."""
    off = 0
    for t in e.tensors:
        if t["place"] == PLACE_ARENA and t["device"] == device:
            t["offset"] = off
            off += (max(t["bytes"], 1) + 63) // 64 * 64
    e.meta["arena_size"][device] = e.meta["arena_size_unplanned"][device] = off
    return e


def unview(e, *names):
    """Gives views their own arena buffers, as engines written before views had them."""
    for name in names:
        t = e.tensor(name)[1]
        assert t["place"] == PLACE_VIEW, name
        t["place"], t["offset"] = PLACE_ARENA, 0
    return side_by_side(e)


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
    # Views of it get buffers of their own, so that the Slice is what the loader finds.
    unview(e, *[t["name"] for t in e.tensors if t["place"] == PLACE_VIEW and t["offset"] == out])
    e.set_dims(e.tensors[out]["name"], [3, 0, 2])
    return e


def input_dims_changed():
    """A graph input of another shape than the layers were built for: MatMul once wrote
    3,200 bytes into a 256-byte arena."""
    e = seed("engine_mlp")
    e.set_dims("x", [200, 3])
    return e


def reshape_output_disagrees():
    """A Reshape whose output holds more elements than its input (a heap overflow in the copy);
    its output has its own buffer, as before views."""
    e = unview(seed("engine_mlp"), "r")
    e.set_dims("r", [4, 4])
    return side_by_side(e)


def view_size_disagrees():
    """The same as a view: readers of r would read past the end of s's buffer."""
    e = seed("engine_mlp")
    e.set_dims("r", [4, 4])
    return e


def view_of_missing_tensor():
    """A view naming a tensor index past the last tensor."""
    e = seed("engine_mlp")
    e.tensor("r")[1]["offset"] = 1000
    return e


def view_of_itself():
    e = seed("engine_mlp")
    i, t = e.tensor("r")
    t["offset"] = i
    return e


def view_not_of_its_input():
    """r claims h's bytes (same size) while its Reshape reads s."""
    e = seed("engine_mlp")
    e.tensor("r")[1]["offset"] = e.tensor("h")[0]
    return e


def view_of_weight():
    """A Reshape of a weight stored as a view of it: views exist only of activations and
    graph inputs/outputs (weights live on every device that reads them, not in an arena)."""
    e = seed("engine_mlp")
    b1 = e.tensor("b1")[0]
    e.layer("Reshape")["inputs"][0] = b1
    e.tensor("r")[1]["offset"] = b1
    e.set_dims("r", [4])
    return e


def view_cycle():
    """s and r views of each other: the Softmax reads r, the Reshape's output, as its input."""
    e = seed("engine_mlp")
    r, s_ = e.tensor("r")[0], e.tensor("s")[0]
    e.layer("Softmax")["inputs"][0] = r
    e.tensor("s")[1].update(place=PLACE_VIEW, offset=r)
    return side_by_side(e)


def view_of_add():
    """An Add's output stored as a view of its input: consistent records, but the Add
    would never run."""
    e = seed("engine_mlp")
    e.tensor("h2")[1].update(place=PLACE_VIEW, offset=e.tensor("h")[0])
    return side_by_side(e)


def view_outlived():
    """t written over e's bytes while er, a view of e, is still to be read."""
    e = seed("engine_views")
    e.tensor("t")[1]["offset"] = e.tensor("e")[1]["offset"]
    return e


def reshape_without_view():
    """Not a defect: the mlp engine as written before views (r has a buffer of its own). It
    must load and compute the same bits as the seed."""
    return unview(seed("engine_mlp"), "r")


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
    # Arena tensors side by side (h, h2, s, r: r a buffer of its own, not a view of s, as
    # before views), each 64-byte aligned: what the loader allows.
    return unview(e, "r")


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
    "view-size-disagrees": view_size_disagrees,
    "view-of-missing-tensor": view_of_missing_tensor,
    "view-of-itself": view_of_itself,
    "view-not-of-its-input": view_not_of_its_input,
    "view-of-weight": view_of_weight,
    "view-cycle": view_cycle,
    "view-of-add": view_of_add,
    "view-outlived": view_outlived,
    "reshape-without-view": reshape_without_view,
}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else SEEDS
    os.makedirs(out, exist_ok=True)
    for name, make in CASES.items():
        make().save(os.path.join(out, f"regress-{name}.s4de"))
    print(f"{out}: {len(CASES)} engine reproducers")


if __name__ == "__main__":
    main()
