"""Times the Sparse4Dv3 head's attention blocks on CUDA fused (s4d::FusedAttention) against
the same chain left unfused (cuBLAS products, Where and Softmax kernels).

    python3 bench/attention_bench.py S4DEXEC PLUGINS OUT_DIR [--iterations N]

Models (tests/engine/attention_fusion.py's chain_model, after the projections):
    Mul(Q, 0.125) -> MatMul(., KT) [-> Where(key mask, S, -inf)] -> Softmax(-1) -> MatMul(., V)
for the v3 preset's temporal cross-attention (B=1, H=8, Nq=900, Nk=1500, D=64, a [1,1,1,1500]
key mask: random, 60% kept; as the head has it with history, its 600 cached keys attended; and
without, its 900 current ones) and self-attention (Nk=900, no mask). The unfused twin also returns the
probabilities P, which keeps the fusion pass off the chain; with --noDataTransfers that output
stays on the device, so both run the same layers but the fused ones.

Per model and precision (float32 strict, --noTF32; float32 with --tf32, where the fused
kernel and cuBLAS run on TF32 tensor cores; float16, --fp16): the median latency of
the whole engine from s4dexec (--useCudaGraph --noDataTransfers, CUDA events around each
replay) and the per-layer means of a --dumpProfile run (CUDA events around each layer); the
chain's time is the sum of its layers (Cast layers that feed the extra P output of the fp16
twin are left out). Writes OUT_DIR/attention_bench.md and .json.
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "engine"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from attention_fusion import chain_model  # noqa: E402
from s4d.exec import read_profile  # noqa: E402

TEMPORAL = ([1, 8, 900, 64], [1, 8, 64, 1500], [1, 8, 1500, 64])
BLOCKS = [
    # name, (Q, KT, V shapes), mask shape, attended keys (None: 60% at random)
    ("v3_temporal_900x1500", TEMPORAL, [1, 1, 1, 1500], None),
    ("v3_temporal_history", TEMPORAL, [1, 1, 1, 1500], (0, 600)),
    ("v3_temporal_first_frame", TEMPORAL, [1, 1, 1, 1500], (600, 1500)),
    ("v3_self_900x900", ([1, 8, 900, 64], [1, 8, 64, 900], [1, 8, 900, 64]), None, None),
]

PRECISIONS = ("fp32", "tf32", "fp16")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=280)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def median_ms(out):
    m = re.search(r"median ([0-9.]+) ms", out)
    if not m:
        raise RuntimeError("no [latency] line:\n" + out)
    return float(m.group(1))


def layers_ms(out):
    """(name, op, ms) of each layer of the [profile] table."""
    return [(name, op, ms) for _, name, op, ms in read_profile(out)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("s4dexec")
    ap.add_argument("plugins")
    ap.add_argument("out")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--precisions", default=",".join(PRECISIONS),
                    help="comma-separated, of " + ", ".join(PRECISIONS))
    args = ap.parse_args()
    precisions = [p for p in args.precisions.split(",") if p]
    if not precisions or any(p not in PRECISIONS for p in precisions):
        ap.error(f"--precisions: give some of {', '.join(PRECISIONS)}")
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(7)
    results = []
    for name, shapes, mshape, keys in BLOCKS:
        d = os.path.join(args.out, "models", name)
        os.makedirs(d, exist_ok=True)
        specs = []
        for k, s in zip(("q", "kt", "v"), shapes):
            p = os.path.join(d, f"{k}.npy")
            np.save(p, rng.uniform(-2, 2, s).astype(np.float32))
            specs.append(f"{k}:{p}")
        if mshape:
            mask = rng.uniform(size=mshape) < 0.6
            mask[..., 0] = True
            if keys:
                mask[...] = False
                mask[..., keys[0]:keys[1]] = True
            p = os.path.join(d, "mask.npy")
            np.save(p, mask)
            specs.append(f"mask:{p}")
        for variant in ("fused", "unfused"):
            path = os.path.join(d, f"{variant}.onnx")
            onnx.save(chain_model(shapes, mshape, scale=0.125, p_output=variant == "unfused"), path)
            for prec in precisions:
                base = [args.s4dexec, f"--onnx={path}", f"--plugins={args.plugins}", "--device=cuda",
                        "--loadInputs=" + ",".join(specs), "--tf32" if prec == "tf32" else "--noTF32"]
                if prec == "fp16":
                    base.append("--fp16")
                warm = str(max(10, args.iterations // 10))
                out_g = run(base + ["--useCudaGraph", "--noDataTransfers", f"--iterations={args.iterations}",
                                    f"--warmUp={warm}", "--dumpLayerInfo"])
                out_p = run(base + ["--noDataTransfers", f"--iterations={args.iterations}", f"--warmUp={warm}",
                                    "--dumpProfile"])
                layers = layers_ms(out_p)
                chain = [(n, op, ms) for n, op, ms in layers if op != "Cast"]
                res = {"block": name, "variant": variant, "precision": prec,
                       "graph_median_ms": median_ms(out_g),
                       "chain_layers_ms": sum(ms for _, _, ms in chain),
                       "layers": [{"name": n, "op": op, "ms": ms} for n, op, ms in layers]}
                results.append(res)
                print(f"{name:24s} {variant:8s} {prec}: graph median {res['graph_median_ms']:.4f} ms, "
                      f"layers {res['chain_layers_ms']:.4f} ms "
                      + ", ".join(f"{op} {ms * 1000:.1f} us" for _, op, ms in layers), flush=True)
    device = "unknown"
    try:
        device = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        pass
    meta = {"date": time.strftime("%Y-%m-%d"), "device": device, "host": platform.node(),
            "command": " ".join(["python3", "bench/attention_bench.py"] + sys.argv[1:]),
            "iterations": args.iterations}
    with open(os.path.join(args.out, "attention_bench.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    with open(os.path.join(args.out, "attention_bench.md"), "w") as f:
        f.write(f"# Fused attention vs the unfused chain ({meta['date']}, {device})\n\n"
                f"Command: `{meta['command']}`. {args.iterations} runs after warm-up. graph: median "
                f"latency of the engine replayed as a CUDA graph without host copies; layers: sum "
                f"of the chain's per-layer means (CUDA events, --dumpProfile). fp32 is strict "
                f"float32 (--noTF32), tf32 float32 with --tf32, fp16 --fp16.\n\n| block | precision | unfused graph ms | fused graph ms | unfused "
                f"layers ms | fused layers ms | speed-up (graph) |\n|---|---|---|---|---|---|---|\n")
        for name, _, _, _ in BLOCKS:
            for prec in precisions:
                u = next(r for r in results if r["block"] == name and r["precision"] == prec
                         and r["variant"] == "unfused")
                fz = next(r for r in results if r["block"] == name and r["precision"] == prec
                          and r["variant"] == "fused")
                f.write(f"| {name} | {prec} | {u['graph_median_ms']:.4f} | {fz['graph_median_ms']:.4f} | "
                        f"{u['chain_layers_ms']:.4f} | {fz['chain_layers_ms']:.4f} | "
                        f"{u['graph_median_ms'] / fz['graph_median_ms']:.2f}x |\n")
    print("wrote", os.path.join(args.out, "attention_bench.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
