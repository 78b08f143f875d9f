"""float16 against float32 (strict and TF32) on the CUDA engine: the Sparse4Dv3 dense shapes
one op at a time, then the whole v3 backbone (ResNet50 + FPN, 6 x 3 x 256 x 704).

    python3 bench/dense/fp16_bench.py --s4dexec BUILD/bin/s4dexec \
        --plugins BUILD/lib/libs4d_plugins.so --out DIR [--backbone FILE] [--iters 50]

Each row builds three engines of the same model: float32 strict (--noTF32), float32 with
TF32 (--tf32), and its float16 version (every float32 input, weight and output rounded to
float16, as tests/cuda/cases.half_case makes it). Latency: the median of --iterations runs
replayed as a CUDA graph (s4dexec's [latency] line). For the backbone, the float16 and TF32
outputs are also compared with the strict float32 output on the same (float16-rounded)
images: relative L2 and max abs error. Writes DIR/fp16_bench.json and DIR/fp16_bench.md and
prints the table. The backbone ONNX is exported with bench/dense/torch_backbone.py --export
when --backbone is not given (needs torch). Runs within about 5 minutes on an H200.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "cuda"))
from cases import Case, half_case  # noqa: E402
import models_dense as md  # noqa: E402
import models_reduce as mr  # noqa: E402

LAT = re.compile(r"\[latency\].*median ([0-9.]+) ms")


def shapes(rng):
    """(label, float32 Case) of the v3 dense layers worth timing."""
    c = md.fused_conv_case
    return [
        ("conv 7x7s2 stem 6x3x256x704 -> 64, +ReLU",
         c(rng, "stem", (6, 3, 256, 704), (64, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3]), (128, 352),
           residual=False)),
        ("conv 3x3 6x64x64x176 -> 64, +ReLU",
         c(rng, "l1_3x3", (6, 64, 64, 176), (64, 64, 3, 3), dict(pads=[1, 1, 1, 1]), (64, 176), residual=False)),
        ("conv 1x1 6x64x64x176 -> 256, +residual +ReLU",
         c(rng, "l1_expand", (6, 64, 64, 176), (256, 64, 1, 1), {}, (64, 176))),
        ("conv 3x3 6x256x64x176 -> 256 (FPN P2)",
         md.conv_case(rng, "p2_3x3", (6, 256, 64, 176), (256, 256, 3, 3), dict(pads=[1, 1, 1, 1]), (64, 176))),
        ("conv 3x3s2 6x128x64x176 -> 128, +ReLU",
         c(rng, "l2_3x3s2", (6, 128, 64, 176), (128, 128, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]),
           (32, 88), residual=False)),
        ("conv 3x3 6x512x8x22 -> 512, +ReLU",
         c(rng, "l4_3x3", (6, 512, 8, 22), (512, 512, 3, 3), dict(pads=[1, 1, 1, 1]), (8, 22), residual=False)),
        ("conv 1x1 6x2048x8x22 -> 256 (FPN lateral)",
         md.conv_case(rng, "lateral", (6, 2048, 8, 22), (256, 2048, 1, 1), {}, (8, 22))),
        ("matmul 1x900x256 x 256x256", md.matmul_case(rng, "mm256", (1, 900, 256), (256, 256), (1, 900, 256))),
        ("linear 1x900x256 -> 256 +bias +ReLU", md.linear_case(rng, "lin256", (1, 900, 256), 256)),
        ("linear 1x900x512 -> 1024 +bias +ReLU (FFN)", md.linear_case(rng, "ffn", (1, 900, 512), 1024)),
        ("linear 6x900x256 -> 416 +bias (weights)",
         md.linear_case(rng, "w416", (6, 900, 256), 416, relu=False, bias_rank=3)),
        ("matmul 8x900x32 x 8x32x1800 (attention)",
         md.matmul_case(rng, "attn", (8, 900, 32), (8, 32, 1800), (8, 900, 1800), b_const=False)),
        ("layernorm 1x900x256", mr.ln_case(rng, [1, 900, 256], -1)),
    ]


def run(cmd, limit):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    return r, r.stdout + r.stderr


def save_inputs(d, inputs, tag):
    specs = []
    for k, v in inputs.items():
        p = os.path.join(d, f"{tag}_{k}.npy")
        np.save(p, np.ascontiguousarray(v))
        specs.append(f"{k}:{p}")
    return ["--loadInputs=" + ",".join(specs)] if specs else []


def time_model(args, d, name, model, inputs, flag, export=None):
    """Median latency (ms) of the model's CUDA engine, or None; the log tail on failure."""
    path = os.path.join(d, name + ".onnx")
    onnx.save(model, path)
    cmd = [args.s4dexec, f"--onnx={path}", f"--plugins={args.plugins}", "--device=cuda", flag,
           f"--iterations={args.iters}", "--warmUp=10", "--useCudaGraph", "--noDataTransfers"] + save_inputs(d, inputs, name)
    if export:
        cmd.append(f"--exportOutput={export}")
    r, text = run(cmd, args.limit)
    m = LAT.search(text or "")
    if r is None or r.returncode != 0 or not m:
        return None, (text or "").strip().splitlines()[-3:]
    return float(m.group(1)), None


def compare(dir_ref, dir_b):
    out = {}
    for f in sorted(os.listdir(dir_ref)):
        if not f.endswith(".npy") or not os.path.exists(os.path.join(dir_b, f)):
            continue
        a = np.load(os.path.join(dir_ref, f)).astype(np.float64)
        b = np.load(os.path.join(dir_b, f)).astype(np.float64)
        out[f[:-4]] = dict(rel_l2=float(np.linalg.norm(b - a) / max(np.linalg.norm(a), 1e-30)),
                           max_abs=float(np.max(np.abs(b - a))), max_ref=float(np.max(np.abs(a))))
    return out


def bench_case(args, label, case, rows):
    d = os.path.join(args.out, case.name)
    os.makedirs(d, exist_ok=True)
    h = half_case(case, 0.0, 0.0, keep=("mean", "inv_std"))
    row = {"layer": label}
    for mode, model, inputs, flag in (("fp32", h.ref_model, h.ref_inputs, "--noTF32"),
                                      ("tf32", h.ref_model, h.ref_inputs, "--tf32"),
                                      ("fp16", h.model, h.inputs, "--noTF32")):
        ms, why = time_model(args, d, f"{case.name}_{mode}", model, inputs, flag)
        row[mode + "_ms"] = ms
        if why:
            row[mode + "_error"] = why
    rows.append(row)
    print(f"{label:48s} " + " ".join(f"{m}: {row[m + '_ms']:.4f} ms" if row[m + "_ms"] else f"{m}: FAILED"
                                      for m in ("fp32", "tf32", "fp16")), flush=True)


def bench_backbone(args, result):
    bb = args.backbone or os.path.join(args.out, "v3", "sparse4d_v3_backbone.onnx")
    if not os.path.exists(bb):
        os.makedirs(os.path.dirname(bb), exist_ok=True)
        run([sys.executable, os.path.join(HERE, "torch_backbone.py"), "--export", bb], 150)
    if not os.path.exists(bb):
        result["backbone"] = {"error": "no backbone ONNX (torch_backbone.py --export failed)"}
        print("backbone: no ONNX", flush=True)
        return
    model = onnx.load(bb)
    rng = np.random.default_rng(3)
    shape = [dm.dim_value for dm in model.graph.input[0].type.tensor_type.shape.dim]
    images = rng.uniform(-2, 2, size=shape).astype(np.float32)
    h = half_case(Case("backbone", model, {model.graph.input[0].name: images}), 0.0, 0.0)
    d = os.path.join(args.out, "backbone")
    os.makedirs(d, exist_ok=True)
    res = {}
    for mode, m, inputs, flag in (("fp32", h.ref_model, h.ref_inputs, "--noTF32"),
                                  ("tf32", h.ref_model, h.ref_inputs, "--tf32"),
                                  ("fp16", h.model, h.inputs, "--noTF32")):
        out_dir = os.path.join(d, "out_" + mode)
        t0 = time.time()
        ms, why = time_model(args, d, "backbone_" + mode, m, inputs, flag, export=out_dir)
        res[mode + "_ms"] = ms
        res[mode + "_build_and_run_s"] = round(time.time() - t0, 1)
        if why:
            res[mode + "_error"] = why
    for mode in ("tf32", "fp16"):
        if res.get(mode + "_ms") and res.get("fp32_ms"):
            res[mode + "_vs_fp32"] = compare(os.path.join(d, "out_fp32"), os.path.join(d, "out_" + mode))
    result["backbone"] = res
    print("v3 backbone 6x3x256x704: " + " ".join(
        f"{m}: {res[m + '_ms']:.3f} ms" if res.get(m + "_ms") else f"{m}: FAILED" for m in ("fp32", "tf32", "fp16")),
        flush=True)
    for mode in ("tf32", "fp16"):
        for k, v in res.get(mode + "_vs_fp32", {}).items():
            print(f"  {mode} vs fp32 strict, {k}: rel L2 {v['rel_l2']:.3g}, max abs {v['max_abs']:.3g} "
                  f"(max |ref| {v['max_ref']:.3g})", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--s4dexec", required=True)
    ap.add_argument("--plugins", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--backbone", help="the v3 backbone ONNX (default: export it)")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--limit", type=int, default=90, help="seconds per engine build + run")
    ap.add_argument("--skip-backbone", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    try:
        dev = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    except OSError:
        dev = "no nvidia-smi"
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": dev,
              "command": " ".join(sys.argv), "iterations": args.iters, "rows": []}
    print(f"fp16 bench {result['date']} on {dev}", flush=True)
    for label, case in shapes(np.random.default_rng(2026)):
        bench_case(args, label, case, result["rows"])
    if not args.skip_backbone:
        bench_backbone(args, result)
    with open(os.path.join(args.out, "fp16_bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"# float16 vs float32 on the CUDA engine ({result['date']}, {dev})", "",
             f"`{result['command']}`; median of {args.iters} CUDA-graph replays per engine.", "",
             "| layer | fp32 strict ms | tf32 ms | fp16 ms | fp16 speed-up vs strict |", "|---|---|---|---|---|"]
    rows = result["rows"] + ([dict(layer="v3 backbone 6x3x256x704", **result["backbone"])]
                             if "backbone" in result and "fp32_ms" in result["backbone"] else [])
    for r in rows:
        def f(k):
            return f"{r[k]:.4f}" if r.get(k) else "failed"
        sp = f"{r['fp32_ms'] / r['fp16_ms']:.2f}x" if r.get("fp32_ms") and r.get("fp16_ms") else ""
        lines.append(f"| {r['layer']} | {f('fp32_ms')} | {f('tf32_ms')} | {f('fp16_ms')} | {sp} |")
    with open(os.path.join(args.out, "fp16_bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = [r["layer"] for r in result["rows"] if not r.get("fp16_ms")]
    if failed:
        print("fp16 FAILED on: " + "; ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
