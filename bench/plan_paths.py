"""How many kernels an engine runs and how many of them lie on its longest chain of dependent
layers: what a CUDA graph spread over streams cannot run side by side, so that on a GPU where
each small kernel costs a few microseconds whatever it computes, this chain bounds the time.

usage: PYTHONPATH=python python3 bench/plan_paths.py MODEL.onnx|ENGINE.s4d [--device cpu|cuda]
           [--plugins LIB] [--path] [--json OUT] [--profile PROFILE.txt [--floor-us US]]

Builds the engine from an ONNX model (S4D_TEST_BACKEND=guarded with --device cuda builds the CUDA
plan on a machine without a GPU: the same passes and fusions, the guarded device's kernels), or
loads an engine file with the plan it was built with, then counts the layers
that run a kernel (views and Concats in place run none), the longest chain of them (each kernel counts 1), and the op
types along it. --path prints the chain itself. Environment switches of the passes
(S4D_FOLD_VIEWS=0, S4D_FUSE_POINTWISE=0, S4D_CONCAT_IN_PLACE=0, ...) apply as in any build.

--profile takes the per-layer times of the same engine (s4dexec --loadEngine=ENGINE.s4d
--dumpProfile's listing; a plan built again may choose other fusions, e.g. on the GPU by timing)
and also finds the chain that takes the longest by those times: with as many streams as the graph wants and nothing else in the way, the time the
engine cannot go under. A layer's eager time includes its launch and the profile's events;
--floor-us subtracts that much from every kernel (default: the listing's smallest kernel time),
so that the chain is given with and without it. Layers the listing lacks count 0 and are named.
"""
import argparse
import collections
import json
import os
import sys

from s4d import engine as s4d_engine
from s4d.exec import read_profile


def longest(layers, weight):
    """(its length, the chain of kernels that is longest by weight(layer)) of a layer list in
    execution order: a layer ends its deepest producer's length plus its weight; views weigh
    nothing and are left out of the chain."""
    made_by, finish, back = {}, [], []
    for i, layer in enumerate(layers):
        t, arg = 0, None
        for v in layer["inputs"]:
            j = made_by.get(v)
            if j is not None and finish[j] > t:
                t, arg = finish[j], j
        finish.append(t + (0 if layer["is_view"] else weight(layer)))
        back.append(arg)
        for v in layer["outputs"]:
            made_by[v] = i
    if not layers:
        return 0, []
    i = max(range(len(layers)), key=lambda k: finish[k])
    total, path = finish[i], []
    while i is not None:
        if not layers[i]["is_view"]:
            path.append(layers[i])
        i = back[i]
    return total, path[::-1]


def chain(layers):
    """(kernels, the longest chain of dependent kernels, each counting 1)."""
    return sum(not layer["is_view"] for layer in layers), longest(layers, lambda layer: 1)[1]


def parse_profile(path):
    """Layer name -> mean ms from a --dumpProfile listing ('  12 name  Op  0.0123 ms  0.1%')."""
    with open(path) as f:
        return {name: ms for _, name, _, ms in read_profile(f.read())}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--plugins", default=os.path.join(os.environ.get("S4D_BUILD", "build"), "lib",
                                                       "libs4d_plugins.so"))
    ap.add_argument("--path", action="store_true", help="print the longest chain")
    ap.add_argument("--json", help="write the counts here")
    ap.add_argument("--profile", help="s4dexec --dumpProfile listing of the same model's engine")
    ap.add_argument("--floor-us", type=float, default=None,
                    help="launch cost to take off each kernel's time (default: the smallest kernel's)")
    args = ap.parse_args(argv)
    times = None
    if args.profile:
        try:
            times = parse_profile(args.profile)
        except OSError as e:
            print(f"plan_paths: cannot read the profile: {e}", file=sys.stderr)
            return 1
        if not times:
            print(f"plan_paths: {args.profile} has no layer lines of s4dexec --dumpProfile", file=sys.stderr)
            return 1
    if args.model.endswith((".s4d", ".s4de")):
        eng = s4d_engine.load(args.model, plugins=[args.plugins])
        args.device = eng.device
    else:
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
    timed = None
    if times is not None:
        def ms(layer):
            return times.get(layer["name"], 0.0)

        kern = [layer for layer in layers if not layer["is_view"]]
        missing = [layer["name"] for layer in kern if layer["name"] not in times]
        present = [ms(layer) for layer in kern if ms(layer) > 0]
        floor = (args.floor_us / 1000.0) if args.floor_us is not None else (min(present) if present else 0.0)

        def net_ms(layer):
            return max(0.0, ms(layer) - floor)

        summed = sum(ms(layer) for layer in kern)
        full, fpath = longest(layers, ms)
        net, npath = longest(layers, net_ms)
        by_op = collections.Counter()
        for layer in npath:
            by_op[layer["op"]] += net_ms(layer)
        print(f"  by the profile ({os.path.basename(args.profile)}): kernels sum to {summed:.3f} ms; the longest "
              f"chain takes {full:.3f} ms ({len(fpath)} kernels); with {1000 * floor:.1f} us off each kernel "
              f"{net:.3f} ms ({len(npath)} kernels)")
        print("  that chain's time by op: " + ", ".join(f"{op} {t:.3f}" for op, t in by_op.most_common()))
        if missing:
            print(f"  not in the profile ({len(missing)}, counted 0): " + ", ".join(missing[:8]) +
                  (" ..." if len(missing) > 8 else ""))
        names = {layer["name"] for layer in layers}
        extra = [n for n in times if n not in names]
        if extra:
            print(f"  in the profile, not in this plan ({len(extra)}, {sum(times[n] for n in extra):.3f} ms): the "
                  "profile is of another plan (" + ", ".join(extra[:4]) + (" ..." if len(extra) > 4 else "") + ")")
        if args.path:
            for layer in npath:
                print(f"    {ms(layer):8.4f} ms  {layer['op']:24s} {layer['name']}")
        timed = {"summed_ms": summed, "chain_ms": full, "chain_kernels": len(fpath), "floor_ms": floor,
                 "chain_ms_less_floor": net, "chain_less_floor_kernels": len(npath),
                 "chain_less_floor_by_op": dict(by_op), "missing": missing,
                 "not_in_plan": extra}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": os.path.basename(args.model), "device": args.device,
                       "layers": len(layers), "kernels": kernels, "chain": len(path),
                       "chain_ops": dict(ops), **({"profile": timed} if timed else {})}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
