"""Where s4d's CPU time goes in a convolution network: runs `s4dexec
--dumpLayerInfo --dumpProfile` with S4D_PROFILE_CLOCK=cpu (each layer timed in
the process's CPU time, so the machine's other load mostly drops out) a few
times and sums the per-layer means by kind of layer (depthwise 3x3 stride 1,
1x1 on 14x14 maps, GlobalAveragePool...). A benchmark aid, not a test.

    /usr/bin/python3 bench/ort/profile_layers.py bench/ort/out/mobilenet_v2.onnx [--repeat 3]
        [--iterations 50] [--threads 1] [--layers]

Prints one table: per kind, the layer count, the mean CPU ms of each repeat and
their spread (max - min over the median), and the share of the total.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
from s4d.exec import read_profile  # noqa: E402
SHAPE = re.compile(r"float32\[([0-9,]*)\]")


def kind(op, line):
    if not op.startswith(("Conv", "FusedConv")):
        return op, 0
    shapes = [[int(v) for v in s.split(",") if v] for s in SHAPE.findall(line)]
    x, w, y = shapes[0], shapes[1], shapes[-1]
    m, cg, kh, kw = w
    c = x[1]
    stride = x[2] // y[2] if y[2] else 1
    macs = m * cg * kh * kw * y[2] * y[3] * y[0]
    if cg == 1 and c == m and c > 1:
        return f"depthwise {kh}x{kw}/{stride}", macs
    tag = f"{kh}x{kw}" + (f"/{stride}" if stride > 1 else "")
    if c // cg > 1:
        tag += f" group {c // cg}"
    res = " +res" if op == "FusedConv" and len(shapes) >= 5 else ""
    return f"conv {tag} {y[2]}x{y[3]}{res}", macs


def profile(model, threads, iterations):
    env = dict(os.environ, S4D_PROFILE_CLOCK="cpu", OPENBLAS_NUM_THREADS=str(threads))
    cmd = [os.path.join(ROOT, "build", "bin", "s4dexec"), f"--onnx={model}", f"--threads={threads}",
           f"--iterations={iterations}", "--warmUp=3", "--dumpLayerInfo", "--dumpProfile"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(p.stdout[-500:] + p.stderr[-500:])
    info = {}
    for line in p.stdout.split("[profile]")[0].splitlines():  # --dumpLayerInfo's lines
        mt = re.match(r"\s*(\d+) (\S+)\s+(\S+)\s+(.*)$", line)
        if mt and " in: " in mt.group(4):
            info[int(mt.group(1))] = kind(mt.group(3), mt.group(4))
    return [(name, info.get(i, (op, 0)), ms) for i, name, op, ms in sorted(read_profile(p.stdout))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", action="store_true", help="also print every layer (medians over repeats)")
    a = ap.parse_args()
    runs = [profile(a.model, a.threads, a.iterations) for _ in range(a.repeat)]
    kinds = {}
    for r in runs:
        per = {}
        for _, (k, macs), ms in r:
            per.setdefault(k, [0, 0.0, 0])
            per[k][0] += 1
            per[k][1] += ms
            per[k][2] += macs
        for k, (n, ms, macs) in per.items():
            kinds.setdefault(k, (n, [], macs))[1].append(ms)
    totals = [sum(ms for _, _, ms in r) for r in runs]
    tot = statistics.median(totals)
    print(f"{os.path.basename(a.model)}: {a.threads} thread(s), {a.repeat} repeats of {a.iterations} iterations; "
          f"total CPU ms per repeat {', '.join(f'{t:.3f}' for t in totals)}")
    print("| kind | layers | median ms | spread | share | GMAC/s |\n| --- | ---: | ---: | ---: | ---: | ---: |")
    for k, (n, v, macs) in sorted(kinds.items(), key=lambda kv: -statistics.median(kv[1][1])):
        med = statistics.median(v)
        spread = (max(v) - min(v)) / med if med > 0 else 0.0
        rate = f"{macs / med / 1e6:.1f}" if macs and med > 0 else ""
        print(f"| {k} | {n} | {med:.3f} | {100 * spread:.0f}% | {100 * med / tot:.1f}% | {rate} |")
    if a.layers:
        print()
        for i, (name, (k, macs), _) in enumerate(runs[0]):
            med = statistics.median(r[i][2] for r in runs)
            rate = f"{macs / med / 1e6:6.1f} GMAC/s" if macs and med > 0 else " " * 13
            print(f"{i:4d} {med:8.4f} ms {rate}  {k:28s} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
