"""The Sparse4Dv3 frame on the GPU: the s4d engine against the project's own
PyTorch model, on the same inputs, in one run. Writes OUT/frame.json and
OUT/frame.md.

    PYTHONPATH=python python3 bench/frame_bench.py --build build --out OUT
        [--presets tiny,v3] [--iterations 200] [--no-compile] [--budget 300]

For each preset: the golden sequence's second frame (with temporal history)
is the input; the engines are built with s4dexec (float32 strict, and TF32),
and timed by build/bin/s4d_frame_bench (backbone then head, the head reading
the backbone's features in device memory, one CUDA graph each, CUDA events,
median after warm-up). PyTorch runs the same weights and inputs eagerly in
float32 (TF32 off), eagerly with TF32, and through torch.compile (float32),
timed with CUDA events around each part (median after warm-up). Rows:
{"model", "part", "impl", "precision", "median_ms", "p90_ms"}.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

from s4d.sparse4d.golden import generate  # noqa: E402
from s4d.sparse4d.head import STATE_NAMES, HeadState  # noqa: E402
from s4d.sparse4d.model import build_model  # noqa: E402


def log(*a):
    print(*a, flush=True)


def timed(fn, iters, warm):
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end))
    ts = np.sort(np.array(ts))
    return float(np.median(ts)), float(ts[max(0, int(np.ceil(0.9 * len(ts))) - 1)])


def torch_rows(preset, frame_in, state, iters, compile_ok, deadline):
    rows = []
    model = build_model(preset, aggregation="ext", seed=0).cuda().eval()
    images = torch.from_numpy(frame_in["images"]).cuda()
    rest = [torch.from_numpy(frame_in[k]).cuda() for k in
            ("projection", "image_wh", "timestamp", "ego_pose")]
    st = HeadState(*[torch.from_numpy(s).cuda() for s in state])

    def variants():
        yield "torch-eager", "fp32", model.backbone, model.head
        yield "torch-eager", "tf32", model.backbone, model.head
        if compile_ok:
            yield "torch-compile", "fp32", torch.compile(model.backbone), torch.compile(model.head)

    for impl, prec, bb, hd in variants():
        if time.time() > deadline:
            log(f"{preset} {impl} {prec}: skipped, time budget spent")
            continue
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        torch.backends.cudnn.allow_tf32 = prec == "tf32"
        with torch.no_grad():
            feats = bb(images)
            torch.cuda.synchronize()
            n = iters if impl == "torch-eager" else max(20, iters // 4)
            warm = 10 if impl == "torch-eager" else 5
            try:
                b = timed(lambda: bb(images), n, warm)
                h = timed(lambda: hd(feats, *rest, st), n, warm)
                f = timed(lambda: hd(bb(images), *rest, st), n, warm)
            except Exception as e:  # torch.compile failures are reported, not fatal
                log(f"{preset} {impl} {prec}: failed: {type(e).__name__}: {e}")
                continue
        for part, (med, p90) in zip(("backbone", "head", "frame"), (b, h, f)):
            rows.append({"model": preset, "part": part, "impl": impl, "precision": prec,
                         "median_ms": round(med, 4), "p90_ms": round(p90, 4)})
            log(f"{preset} {part:8s} {impl:13s} {prec}: {med:.3f} ms (p90 {p90:.3f})")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return rows


def engine_rows(preset, build, work, frame_dir, iters):
    rows = []
    exe = os.path.join(build, "bin", "s4dexec")
    plugins = os.path.join(build, "lib", "libs4d_plugins.so")
    for prec, flags in (("fp32", []), ("tf32", ["--tf32"])):
        eng = {}
        for g in ("backbone", "head"):
            eng[g] = os.path.join(work, f"{g}_{prec}.s4d")
            cmd = [exe, f"--onnx={work}/golden/sparse4d_{preset}_{g}.onnx", f"--plugins={plugins}",
                   "--device=cuda", f"--saveEngine={eng[g]}", "--iterations=1", "--warmUp=0"] + flags
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                log(f"engine build failed: {' '.join(cmd)}\n{p.stderr}")
                return rows
        cmd = [os.path.join(build, "bin", "s4d_frame_bench"), f"--backbone={eng['backbone']}",
               f"--head={eng['head']}", f"--frame={frame_dir}", f"--plugins={plugins}",
               f"--iterations={iters}", "--warmUp=20"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            log(f"s4d_frame_bench failed: {p.stderr}")
            continue
        r = json.loads(p.stdout.strip().splitlines()[-1])
        for part in ("backbone", "head", "frame"):
            rows.append({"model": preset, "part": part, "impl": "s4d", "precision": prec,
                         "median_ms": round(r[part][0], 4), "p90_ms": round(r[part][1], 4)})
            log(f"{preset} {part:8s} s4d           {prec}: {r[part][0]:.3f} ms (p90 {r[part][1]:.3f})")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="/tmp/s4d_frame_bench")
    ap.add_argument("--presets", default="tiny,v3")
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--budget", type=float, default=300, help="seconds; later steps are skipped")
    args = ap.parse_args(argv)
    deadline = time.time() + args.budget
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for preset in args.presets.split(","):
        work = os.path.join(args.work, preset)
        os.makedirs(work, exist_ok=True)
        log(f"== {preset}: golden frames and ONNX")
        generate(preset, os.path.join(work, "golden"), frames=2, cut_at=1, device="cuda")
        subprocess.run([sys.executable, os.path.join(ROOT, "examples", "demo",
                                                     "frames_from_manifest.py"),
                        os.path.join(work, "golden")], check=True, capture_output=True)
        frame_dir = os.path.join(work, "golden", "frame_001")
        rows += engine_rows(preset, args.build, work, frame_dir, args.iterations)
        frame_in = {k: np.load(os.path.join(frame_dir, k + ".npy")) for k in
                    ("images", "projection", "image_wh", "timestamp", "ego_pose")}
        state = [np.load(os.path.join(frame_dir, n + ".npy")) for n in STATE_NAMES]
        rows += torch_rows(preset, frame_in, state, args.iterations, not args.no_compile, deadline)
    result = {"device": torch.cuda.get_device_name(0),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
              "torch": torch.__version__, "command": " ".join(sys.argv), "rows": rows}
    with open(os.path.join(args.out, "frame.json"), "w") as f:
        json.dump(result, f, indent=1)
    lines = [f"# Sparse4Dv3 frame, {result['device']}, {result['date']}", "",
             "| model | part | impl | precision | median ms | p90 ms | s4d fp32 / this |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    ref = {(r["model"], r["part"]): r["median_ms"] for r in rows
           if r["impl"] == "s4d" and r["precision"] == "fp32"}
    for r in rows:
        e = ref.get((r["model"], r["part"]))
        ratio = f"{e / r['median_ms']:.2f}" if e and r["median_ms"] else "-"
        lines.append(f"| {r['model']} | {r['part']} | {r['impl']} | {r['precision']} | "
                     f"{r['median_ms']:.3f} | {r['p90_ms']:.3f} | {ratio} |")
    with open(os.path.join(args.out, "frame.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
