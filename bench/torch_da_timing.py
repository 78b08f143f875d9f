"""Where the time of s4d.ops.deformable_aggregation goes through PyTorch, on CUDA.

Times, with CUDA events on the current stream (median over --iters after --warmup, the
method of s4d_da_bench), the same realistic call (900 anchors by default, C 256, the
four Sparse4Dv3 levels) at every layer between the kernel and the user:

  graph  the raw binding (s4d._C) captured into a CUDA graph and replayed: kernel time
  raw    the raw binding called eagerly: + pybind and the binding's allocations
  cop    the C++ operator torch.ops.s4d.deformable_aggregation called directly: + the
         dispatcher and its Autograd kernel
  op     s4d.ops.deformable_aggregation: + the Python argument checks and index-table cache
and the same for the backward (autograd.grad of the op's output), with the index tables
on the GPU (int32), on the CPU, and with torch.use_deterministic_algorithms(True).
The host time per call (wall clock over many calls, after a synchronisation) shows when
the CPU, not the GPU, sets the pace; "forward+backward" rows give it for a training step
of the op (forward on inputs that need gradients, then autograd.grad).

    PYTHONPATH=python python3 bench/torch_da_timing.py [--anchors 900] [--out FILE.json]

The kernel variants the extension runs follow S4D_DA_CUDA_FWD, S4D_DA_CUDA_FWD_DET,
S4D_DA_CUDA_BWD, S4D_DA_CUDA_BWD_DET (kernels/deformable_aggregation/da_variants.h).
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

from s4d.ops import deformable_aggregation, load_extension
from s4d.ops.workload import realistic_inputs


def event_times(fn, iters, warmup, before=None):
    """Median and min (us) between events recorded around fn on the current stream;
    before() runs untimed ahead of each call (e.g. the forward of a backward)."""
    for _ in range(warmup):
        if before:
            before()
        fn()
    torch.cuda.synchronize()
    pairs = []
    for _ in range(iters):
        if before:
            before()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        pairs.append((a, b))
    torch.cuda.synchronize()
    t = [a.elapsed_time(b) * 1e3 for a, b in pairs]
    return statistics.median(t), min(t)


def back_to_back(fn, iters, warmup):
    """Median (us) of one call when calls run back to back (events between consecutive
    calls, as s4d_da_bench does), and the host time per call."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    t0 = time.perf_counter()
    for i in range(iters):
        ev[i].record()
        fn()
    ev[iters].record()
    host = (time.perf_counter() - t0) / iters * 1e6
    torch.cuda.synchronize()
    t = [ev[i].elapsed_time(ev[i + 1]) * 1e3 for i in range(iters)]
    return statistics.median(t), min(t), host


def graph_time(fn, iters, warmup):
    """Replays of fn captured into a CUDA graph: the GPU time alone."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    med, mn, _ = back_to_back(graph.replay, iters, warmup)
    return med, mn


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--anchors", type=int, default=900)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--label", default="", help="a note stored with the rows")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_da_timing: no CUDA device", file=sys.stderr)
        return 77
    ext = load_extension()
    if not ext.built_with_cuda():
        print("torch_da_timing: s4d._C was built without CUDA", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    f, ss_cpu, si_cpu, loc, w = realistic_inputs(anchors=args.anchors, channels=256, groups=8,
                                                 seed=0, small_maps=False)
    f, loc, w = f.to(dev), loc.to(dev), w.to(dev)
    ss, si = ss_cpu.to(dev), si_cpu.to(dev)
    ss64, si64 = ss.long(), si.long()
    gout = torch.randn(1, args.anchors, 256, device=dev)
    valid = ((loc > 0) & (loc < 1)).all(-1).float().mean().item()
    rows = []

    def add(layer, what, med, mn, host=None):
        rows.append({"layer": layer, "kernel": what, "median_us": round(med, 2),
                     "min_us": round(mn, 2), "host_us_per_call": None if host is None
                     else round(host, 2)})
        print(f"{layer:6s} {what:48s} {med:9.1f} {mn:9.1f} "
              f"{'' if host is None else f'{host:9.1f}'}", flush=True)

    it, wu = args.iters, args.warmup
    op = torch.ops.s4d.deformable_aggregation.default
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, {args.anchors} anchors, "
          f"{100 * valid:.1f}% of (point, camera) pairs inside, operator: {op._schema.name} "
          f"(C++ Autograd kernel: "
          f"{torch._C._dispatch_has_kernel_for_dispatch_key(op._schema.name, 'Autograd')})")
    print(f"{'layer':6s} {'kernel':48s} {'median_us':>9s} {'min_us':>9s} {'host_us':>9s}")

    # ---------------------------------------------------------------- forward
    for det in (False, True):
        name = "forward deterministic" if det else "forward"
        add("graph", name, *graph_time(lambda: ext.da_forward(f, ss, si, loc, w, det), it, wu))
        add("raw", name, *back_to_back(lambda: ext.da_forward(f, ss, si, loc, w, det), it, wu))
        add("cop", name, *back_to_back(lambda: op(f, ss, si, loc, w, det), it, wu))
        add("op", name, *back_to_back(
            lambda: deformable_aggregation(f, ss, si, loc, w, deterministic=det), it, wu))
        add("op", name + ", index tables on the CPU", *back_to_back(
            lambda: deformable_aggregation(f, ss_cpu, si_cpu, loc, w, deterministic=det), it, wu))
        add("op", name + ", int64 index tables", *back_to_back(
            lambda: deformable_aggregation(f, ss64, si64, loc, w, deterministic=det), it, wu))
    torch.use_deterministic_algorithms(True)
    try:
        add("op", "forward under use_deterministic_algorithms", *back_to_back(
            lambda: deformable_aggregation(f, ss, si, loc, w), it, wu))
    finally:
        torch.use_deterministic_algorithms(False)

    # ---------------------------------------------------------------- backward
    fr, locr, wr = (t.clone().requires_grad_(True) for t in (f, loc, w))
    state = {}

    def fwd(det, ss_=ss, si_=si):
        def run():
            state["out"] = deformable_aggregation(fr, ss_, si_, locr, wr, deterministic=det)
        return run

    def bwd():
        torch.autograd.grad(state["out"], (fr, locr, wr), gout)

    def step(det):
        def run():
            out = deformable_aggregation(fr, ss, si, locr, wr, deterministic=det)
            torch.autograd.grad(out, (fr, locr, wr), gout)
        return run

    def raw_step(det):
        def run():
            ext.da_forward(f, ss, si, loc, w, det)
            ext.da_backward(f, ss, si, loc, w, gout, True, True, True, det)
        return run

    bop = torch.ops.s4d.deformable_aggregation_backward.default

    for det in (False, True):
        name = "backward deterministic" if det else "backward"
        add("graph", name, *graph_time(
            lambda: ext.da_backward(f, ss, si, loc, w, gout, True, True, True, det), it, wu))
        add("raw", name, *back_to_back(
            lambda: ext.da_backward(f, ss, si, loc, w, gout, True, True, True, det), it, wu))
        add("cop", name, *back_to_back(
            lambda: bop(f, ss, si, loc, w, gout, True, True, True, det), it, wu))
        add("op", name + " (autograd.grad)", *event_times(bwd, it, wu, before=fwd(det)))
        add("op", name + ", index tables on the CPU", *event_times(
            bwd, it, wu, before=fwd(det, ss_cpu, si_cpu)))
        step_name = "forward+backward deterministic" if det else "forward+backward"
        add("raw", step_name, *back_to_back(raw_step(det), it, wu))
        add("op", step_name + " (autograd.grad)", *back_to_back(step(det), it, wu))
    torch.use_deterministic_algorithms(True)
    try:
        add("op", "backward under use_deterministic_algorithms", *event_times(
            bwd, it, wu, before=fwd(None)))
    finally:
        torch.use_deterministic_algorithms(False)

    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "command": " ".join(sys.argv), "label": args.label,
                       "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
                       "anchors": args.anchors, "inside_fraction": valid,
                       "variants_env": {k: v for k, v in os.environ.items()
                                        if k.startswith("S4D_DA_CUDA_")},
                       "rows": rows}, fh, indent=1)
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
