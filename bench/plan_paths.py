"""How many kernels an engine runs and how many of them lie on its longest chain of dependent
layers: what a CUDA graph spread over streams cannot run side by side, so that on a GPU where
each small kernel costs a few microseconds whatever it computes, this chain bounds the time.

usage: PYTHONPATH=python python3 bench/plan_paths.py MODEL.onnx [--device cpu|cuda]
           [--plugins LIB] [--path] [--json OUT]

Builds the engine (S4D_TEST_BACKEND=guarded with --device cuda builds the CUDA plan on a machine
without a GPU: the same passes and fusions, the guarded device's kernels), then counts the layers
that run a kernel (views and Concats in place run none), the longest chain of them (each kernel counts 1), and the op
types along it. --path prints the chain itself. Environment switches of the passes
(S4D_FOLD_VIEWS=0, S4D_FUSE_POINTWISE=0, S4D_CONCAT_IN_PLACE=0, ...) apply as in any build.
"""
import argparse
import collections
import json
import os
import sys

from s4d import engine as s4d_engine


def chain(layers):
    """(kernels, the longest chain of dependent kernels as a list of layers) of a layer list in
    execution order: each layer's depth is its deepest producer's plus one (views add none)."""
    made_by, depth, back = {}, [], []
    for i, layer in enumerate(layers):
        d, arg = 0, None
        for t in layer["inputs"]:
            j = made_by.get(t)
            if j is not None and depth[j] > d:
                d, arg = depth[j], j
        depth.append(d + (0 if layer["is_view"] else 1))
        back.append(arg)
        for t in layer["outputs"]:
            made_by[t] = i
    kernels = sum(not layer["is_view"] for layer in layers)
    if not layers:
        return kernels, []
    i = max(range(len(layers)), key=lambda k: depth[k])
    path = []
    while i is not None:
        if not layers[i]["is_view"]:
            path.append(layers[i])
        i = back[i]
    return kernels, path[::-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--plugins", default=os.path.join(os.environ.get("S4D_BUILD", "build"), "lib",
                                                       "libs4d_plugins.so"))
    ap.add_argument("--path", action="store_true", help="print the longest chain")
    ap.add_argument("--json", help="write the counts here")
    args = ap.parse_args()
    eng = s4d_engine.build(args.model, device=args.device, plugins=[args.plugins])
    layers = []
    for info in eng.layer_info():
        layers.append({"name": info["name"], "op": info["op"],
                       "is_view": info["is_view"] or info["in_place"],
                       "inputs": [t["name"] for t in info["inputs"] if t],
                       "outputs": [t["name"] for t in info["outputs"] if t]})
    kernels, path = chain(layers)
    ops = collections.Counter(layer["op"] for layer in path).most_common()
    print(f"{os.path.basename(args.model)} on {args.device}: {len(layers)} layers, {kernels} kernels, "
          f"{len(path)} on the longest chain")
    print("  along it: " + ", ".join(f"{n} {op}" for op, n in ops))
    if args.path:
        for layer in path:
            print(f"    {layer['op']:32s} {layer['name']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(args.model), "device": args.device,
                       "layers": len(layers), "kernels": kernels, "chain": len(path),
                       "chain_ops": dict(ops)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
