"""Engine files with malformed s4d::FusedAttention attributes are refused with a clear error.

usage: attention_hostile.py S4DEXEC PLUGINS SCRATCH

Builds two CPU engines whose attention chains the pass fuses: the head's block (scale Mul before,
a key mask, the Transpose that puts the heads back together after: q_scale and swap_out) and a
rank-2 chain (no batch dim). Each must load and run as built; then the fused layer's attributes
are edited one way at a time (tests/fuzz/engine_file.py recomputes the sizes and the checksum)
and loading must fail with exit status 1 and a message that names the layer and the fault:
swap_out outside 0/1 or without a batch dim to swap, attributes of the wrong type, swap_out
dropped (the output's recorded shape no longer follows).
"""
import os
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from attention_fusion import chain_model, swap_perm  # noqa: E402
from exec_util import build_good_engine, check_hostile_layers, layer_attr  # noqa: E402
from engine_file import ATTR_FLOAT, ATTR_INT, ATTR_INTS  # noqa: E402


def set_attr(name, kind, value):
    def edit(layer):
        a = layer_attr(layer, name)
        if a is None:
            layer["attrs"].append({"name": name, "type": kind, "value": value})
        else:
            a["type"], a["value"] = kind, value
    return edit


def drop_attr(name):
    def edit(layer):
        layer["attrs"] = [a for a in layer["attrs"] if a["name"] != name]
    return edit


def head_cases():
    return [("swap_out_2", set_attr("swap_out", ATTR_INT, 2), "swap_out"),
            ("swap_out_float", set_attr("swap_out", ATTR_FLOAT, 1.0), "swap_out"),
            ("q_scale_ints", set_attr("q_scale", ATTR_INTS, [1, 2]), "q_scale"),
            ("swap_out_dropped", drop_attr("swap_out"), "is stored as")]


def rank2_cases():
    return [("swap_out_rank2", set_attr("swap_out", ATTR_INT, 1), "batch dim")]


def main():
    exe, plugins, scratch = sys.argv[1:4]
    failures = 0
    head = chain_model(([1, 4, 9, 16], [1, 4, 16, 11], [1, 4, 11, 16]), [1, 1, 1, 11], scale=0.25,
                       out_perm=swap_perm(4))
    rank2 = chain_model(([9, 16], [16, 11], [11, 8]))
    for tag, model, cases in (("head", head, head_cases()), ("rank2", rank2, rank2_cases())):
        d = os.path.join(scratch, tag)
        engine = build_good_engine(exe, plugins, d, model)
        if engine is None:
            failures += 1
            continue
        failures += check_hostile_layers(exe, plugins, d, engine, "FusedAttention", cases,
                                         f"FusedAttention attributes ({tag})")
    print(f"attention hostile: {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
