"""Interleaved A/B of two or more libs4d builds on the convolution networks:
build/bin/s4d_e2e_cputime run with LD_LIBRARY_PATH pointing at each build's
lib folder in turn (the order flips every round), so that a change in the
machine's load hits every variant alike. A benchmark aid, not a test.

    mkdir build-base && cp -a build/lib/libs4d.so* build-base/   # before the change
    /usr/bin/python3 bench/ort/ab_libs.py --threads 1,2 --rounds 3 --iters 20 \
        base:$PWD/build-base new:$PWD/build/lib [name:LIBDIR:ENV=V,ENV=V ...]

Prints per model and thread count each variant's median over rounds of the
per-round median wall clock and CPU time (ms), with the range of the rounds.
"""
import json, os, subprocess, sys, statistics, argparse
ap = argparse.ArgumentParser()
ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,shufflenet_v2")
ap.add_argument("--threads", default="2")
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("variants", nargs="+")  # name:libdir:ENV=V,ENV=V
a = ap.parse_args()
R = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")); OUT = R + "/bench/ort/out"
vs = []
for v in a.variants:
    name, lib, envs = (v.split(":") + ["", ""])[:3]
    e = dict(os.environ)
    if lib: e["LD_LIBRARY_PATH"] = lib
    for kv in filter(None, envs.split(",")):
        k, val = kv.split("=", 1); e[k] = val
    vs.append((name, e))
res = {}
for r in range(a.rounds):
    for t in a.threads.split(","):
        for m in a.models.split(","):
            inp = f"{OUT}/{m}_inputs/input.npy" if m != "r50fpn" else f"{OUT}/r50fpn_inputs/images.npy"
            order = vs if r % 2 == 0 else vs[::-1]
            for name, e in order:
                e = dict(e); e.setdefault("OPENBLAS_NUM_THREADS", t)
                p = subprocess.run([R + "/build/bin/s4d_e2e_cputime", f"{OUT}/{m}.onnx", inp, t, str(a.iters), "3"], capture_output=True, text=True, env=e)
                j = json.loads(p.stdout.strip().splitlines()[-1])
                res.setdefault((m, t, name), []).append(j)
keys = list(res[next(iter(res))][0].keys())
print("keys", keys, "load", open("/proc/loadavg").read().split()[0])
for t in a.threads.split(","):
    for m in a.models.split(","):
        row = [f"{m:20s} t{t}"]
        for name, _ in vs:
            js = res[(m, t, name)]
            w = [j["wall_median_ms"] for j in js]; c = [j["cpu_median_ms"] for j in js]
            row.append(f"{name}: wall {statistics.median(w):7.2f} [{min(w):.2f}-{max(w):.2f}] cpu {statistics.median(c):7.2f}")
        print(" | ".join(row))
