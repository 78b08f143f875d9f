"""Times the CUDA kernels of the movement family on the shapes Sparse4Dv3 gives
them, against PyTorch's own CUDA implementation of the same op.

    python3 bench/cuda_movement_bench.py S4DEXEC PLUGINS OUT_DIR [--iterations N] [-k NAME]

Each case is one of tests/cuda/models_movement.py's single-op models. s4dexec
builds it for CUDA and reports the layer's mean time over N runs
(--dumpProfile: CUDA events around the layer, so input and output copies are
not counted). PyTorch runs the equivalent call N times between two CUDA
events (the output allocated by its caching allocator, as in eager code).
Writes OUT_DIR/movement_bench.md (a table with the effective bandwidth: bytes
read + written / time) and OUT_DIR/movement_bench.json.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "cuda"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import models_movement  # noqa: E402
from s4d.exec import read_profile  # noqa: E402

# (case name, what PyTorch runs: a function of the input tensors in model order)
CASES = [
    ("transpose_fpn_nchw_to_nhwc", lambda x: x.permute(0, 2, 1).contiguous()),
    ("transpose_heads_0213", lambda x: x.permute(0, 2, 1, 3).contiguous()),
    ("transpose_heads_0231", lambda x: x.permute(0, 2, 3, 1).contiguous()),
    ("transpose_aggregation_weights", lambda x: x.permute(0, 1, 4, 2, 3, 5).contiguous()),
    ("transpose_sampling_points", lambda x: x.permute(0, 2, 3, 1, 4).contiguous()),
    ("concat_fpn_levels", lambda a, b: __import__("torch").cat([a, b], 1)),
    ("concat_anchor_encoder", lambda a, b, c, d: __import__("torch").cat([a, b, c, d], -1)),
    ("split_input_sizes", lambda x: [t.contiguous() for t in x.split([128, 32, 256], -1)]),
    ("slice_points_xy", lambda x: x[..., 0:2].contiguous()),
    ("gather_topk_rows", lambda x, i: x.index_select(0, i)),
    ("expand_rows", lambda x: x.expand(900, 256).contiguous()),
    ("resize_fpn_level4_x2",
     lambda x: __import__("torch").nn.functional.interpolate(x, scale_factor=2, mode="nearest")),
    ("resize_fpn_level2_x2",
     lambda x: __import__("torch").nn.functional.interpolate(x, scale_factor=2, mode="nearest")),
    ("grid_sample_head_level1",
     lambda x, g: __import__("torch").nn.functional.grid_sample(
         x, g, mode="bilinear", padding_mode="zeros", align_corners=False)),
    ("grid_sample_head_level4",
     lambda x, g: __import__("torch").nn.functional.grid_sample(
         x, g, mode="bilinear", padding_mode="zeros", align_corners=False)),
]


def s4d_layer_ms(s4dexec, plugins, case, workdir, iterations):
    d = os.path.join(workdir, case.name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "model.onnx")
    onnx.save(case.model, path)
    loads = []
    for k, v in case.inputs.items():
        p = os.path.join(d, f"in_{k}.npy")
        np.save(p, v)
        loads.append(f"{k}:{p}")
    cmd = [s4dexec, f"--onnx={path}", f"--plugins={plugins}", "--device=cuda",
           f"--iterations={iterations}", f"--warmUp={max(5, iterations // 10)}", "--dumpProfile"]
    if loads:
        cmd.append("--loadInputs=" + ",".join(loads))
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{case.name}: s4dexec failed: {r.stderr.strip()}")
    rows = read_profile(r.stdout)
    if not rows:
        raise RuntimeError(f"{case.name}: no layer time in the profile:\n{r.stdout}")
    return sum(ms for _, _, _, ms in rows)


def torch_ms(fn, arrays, iterations):
    import torch
    ts = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in arrays]
    for _ in range(max(5, iterations // 10)):
        fn(*ts)
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(iterations):
        fn(*ts)
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / iterations


def io_bytes(case):
    """Bytes the op must read and write at least (inputs + outputs)."""
    n = sum(a.nbytes for a in case.inputs.values())
    for o in case.model.graph.output:
        t = o.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        es = np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[t.elem_type]).itemsize
        n += int(np.prod(shape)) * es
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("s4dexec")
    ap.add_argument("plugins")
    ap.add_argument("out")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    by_name = {c.name: c for c in models_movement.cases()}
    try:
        import torch
        have_torch = torch.cuda.is_available()
        device = torch.cuda.get_device_name(0) if have_torch else "?"
        torch_version = torch.__version__
    except ImportError:
        have_torch, device, torch_version = False, "?", "none"
    rows = []
    for name, fn in CASES:
        if args.k not in name:
            continue
        case = by_name[name]
        ms = s4d_layer_ms(args.s4dexec, args.plugins, case, os.path.join(args.out, "models"),
                          args.iterations)
        tms = torch_ms(fn, list(case.inputs.values()), args.iterations) if have_torch else None
        nbytes = io_bytes(case)
        gbps = nbytes / ms / 1e6 if ms > 0 else float("nan")
        rows.append({"case": name, "s4d_ms": ms, "torch_ms": tms, "bytes": nbytes,
                     "s4d_gbps": gbps, "speedup_vs_torch": (tms / ms) if tms and ms > 0 else None})
        print(f"{name:34s} s4d {ms * 1e3:9.1f} us  torch "
              f"{(tms * 1e3 if tms else float('nan')):9.1f} us  {gbps:7.0f} GB/s", flush=True)
    meta = {"date": time.strftime("%Y-%m-%d"), "device": device, "torch": torch_version,
            "host": platform.node(), "iterations": args.iterations,
            "command": "python3 bench/cuda_movement_bench.py " + " ".join(sys.argv[1:])}
    with open(os.path.join(args.out, "movement_bench.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    with open(os.path.join(args.out, "movement_bench.md"), "w") as f:
        f.write(f"# CUDA movement kernels vs PyTorch ({meta['date']}, {device})\n\n")
        f.write(f"Command: `{meta['command']}`; PyTorch {torch_version}; mean of "
                f"{args.iterations} runs after warm-up. s4d: the layer's time from s4dexec "
                f"--dumpProfile (CUDA events). GB/s: input + output bytes / s4d time.\n\n")
        f.write("| case | s4d (us) | PyTorch (us) | PyTorch / s4d | s4d GB/s |\n")
        f.write("| --- | ---: | ---: | ---: | ---: |\n")
        for r in rows:
            t = f"{r['torch_ms'] * 1e3:.1f}" if r["torch_ms"] else "-"
            s = f"{r['speedup_vs_torch']:.2f}" if r["speedup_vs_torch"] else "-"
            f.write(f"| {r['case']} | {r['s4d_ms'] * 1e3:.1f} | {t} | {s} | "
                    f"{r['s4d_gbps']:.0f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
