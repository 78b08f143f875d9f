"""s4d's CPU backend against ONNX Runtime on convolution networks: ResNet50+FPN
(1x3x256x704) and the six classifiers of cnn_models.py (1x3x224x224), on 1
and 2 threads, CPU time and wall clock per inference, rounds interleaved so
that a change in the machine's load hits both runtimes alike. A benchmark,
not a test.

    make && bench/ort/run.sh --skip-backbone --presets ""   # installs onnxruntime-node once
    PYTHONPATH=python /usr/bin/python3 bench/ort/export_models.py --out bench/ort/out --presets "" \\
        --cnns resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,shufflenet_v2
    /usr/bin/python3 bench/ort/compare_cnns.py [--rounds 3] [--iterations 10] [--threads 1,2]

Writes bench/ort/results/<UTC date>_cnns_<host>.md: date, machine, load,
commands, the raw numbers of every round and a table of ratios (s4d / ONNX
Runtime; below 1: s4d faster) from the medians over rounds. s4d runs through
build/bin/s4d_e2e_cputime, ONNX Runtime through bench/conv/ort_cputime.js
(CPU EP, graph optimisation 'all', sequential). OpenBLAS's thread count
follows the engine's. ONNX Runtime's pool threads spin while they wait, so
on 2 threads its CPU time includes spinning: compare wall clocks there.
"""
import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "bench", "ort", "out")
MODELS = [("r50fpn", "ResNet50+FPN 1x3x256x704", "r50fpn_inputs/images.npy")] + [
    (m, f"{m} 1x3x224x224", f"{m}_inputs/input.npy")
    for m in ("resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2")]


def load():
    return open("/proc/loadavg").read().split()[0]


def run_json(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default=",".join(m for m, _, _ in MODELS))
    a = ap.parse_args()
    exe = os.path.join(ROOT, "build", "bin", "s4d_e2e_cputime")
    ort_js = os.path.join(ROOT, "bench", "conv", "ort_cputime.js")
    models = [m for m in MODELS if m[0] in a.models.split(",")]
    for m, _, inp in models:
        if not os.path.exists(os.path.join(OUT, f"{m}.onnx")) or not os.path.exists(os.path.join(OUT, inp)):
            print(f"compare_cnns: {OUT}/{m}.onnx or its input is missing: run export_models.py", file=sys.stderr)
            return 1
    threads = [int(t) for t in a.threads.split(",")]
    raw = []  # (model, threads, round, runtime, result, load)
    start = datetime.datetime.now(datetime.timezone.utc)
    loads = [load()]
    for r in range(a.rounds):
        for t in threads:
            env = dict(os.environ, OPENBLAS_NUM_THREADS=str(t))
            for m, _, inp in models:
                s4d = [exe, os.path.join(OUT, f"{m}.onnx"), os.path.join(OUT, inp), str(t), str(a.iterations),
                       str(a.warmup)]
                ort = ["node", ort_js, os.path.join(OUT, f"{m}.onnx"), os.path.dirname(os.path.join(OUT, inp)), str(t),
                       str(a.iterations), str(a.warmup)]
                order = [("s4d", s4d), ("onnxruntime", ort)]
                if r % 2:
                    order.reverse()
                for name, cmd in order:
                    ld = load()
                    res = run_json(cmd, env)
                    raw.append((m, t, r, name, res, ld))
                    print(f"round {r} threads {t} {m:20s} {name:12s} cpu {res['cpu_median_ms']:9.2f} ms "
                          f"wall {res['wall_median_ms']:9.2f} ms (load {ld})", flush=True)
        loads.append(load())

    def med(m, t, name, key):
        return statistics.median(x[4][key] for x in raw if x[0] == m and x[1] == t and x[3] == name)

    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((l.split(":", 1)[1].strip() for l in cpu.splitlines() if l.startswith("Model name")), "?")
    ort_ver = next(x[4].get("version", "?") for x in raw if x[3] == "onnxruntime")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    host = platform.node().split(".")[0] or "host"
    path = os.path.join(ROOT, "bench", "ort", "results", f"{start.strftime('%Y-%m-%dT%H%MZ')}_cnns_{host}.md")
    lines = [
        "# s4d CPU backend vs ONNX Runtime: convolution networks",
        "",
        f"- date: {start.strftime('%Y-%m-%d %H:%M UTC')} to {datetime.datetime.now(datetime.timezone.utc).strftime('%H:%M UTC')}",
        f"- machine: {model_name}, {os.cpu_count()} logical CPUs, shared with other jobs; load average "
        f"{', '.join(loads)} (start, after each round)",
        f"- ONNX Runtime: onnxruntime-node {ort_ver} (CPU EP, graph optimisation 'all', sequential)",
        f"- s4d: {rev}, build/bin/s4d_e2e_cputime; OpenBLAS threads = engine threads; "
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset (auto)')} as the environment sets it",
        f"- command: /usr/bin/python3 bench/ort/compare_cnns.py --rounds {a.rounds} --iterations {a.iterations} "
        f"--warmup {a.warmup} --threads {a.threads}",
        f"- each cell: median over {a.rounds} interleaved rounds of the per-round median of {a.iterations} runs after "
        f"{a.warmup} warm-up runs; ratio = s4d / ONNX Runtime (below 1: s4d faster)",
        "- CPU time is the process's (all threads); on 2 threads ONNX Runtime's spinning pool threads count in it,",
        "  so the 2-thread comparison is the wall clock, which the machine's load makes uncertain by tens of percent",
        "",
        "| model | threads | s4d CPU ms | ORT CPU ms | CPU ratio | s4d wall ms | ORT wall ms | wall ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    geo = {}
    for t in threads:
        for m, label, _ in models:
            sc, oc = med(m, t, "s4d", "cpu_median_ms"), med(m, t, "onnxruntime", "cpu_median_ms")
            sw, ow = med(m, t, "s4d", "wall_median_ms"), med(m, t, "onnxruntime", "wall_median_ms")
            lines.append(f"| {label} | {t} | {sc:.2f} | {oc:.2f} | {sc / oc:.2f} | {sw:.2f} | {ow:.2f} | {sw / ow:.2f} |")
            if m != "r50fpn":
                geo.setdefault(t, []).append((sc / oc, sw / ow))
    lines += ["", "Geometric mean of the six classifiers' ratios:", ""]
    for t, v in geo.items():
        gc = math.exp(sum(math.log(c) for c, _ in v) / len(v))
        gw = math.exp(sum(math.log(w) for _, w in v) / len(v))
        lines.append(f"- {t} thread{'s' if t > 1 else ''}: CPU time {gc:.2f}, wall clock {gw:.2f}")
    lines += ["", "## Every run", "", "| round | threads | model | runtime | CPU median | CPU min | wall median | wall min | load |",
              "| ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for m, t, r, name, res, ld in raw:
        lines.append(f"| {r} | {t} | {m} | {name} | {res['cpu_median_ms']:.2f} | {res['cpu_min_ms']:.2f} | "
                     f"{res['wall_median_ms']:.2f} | {res['wall_min_ms']:.2f} | {ld} |")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"compare_cnns: wrote {os.path.relpath(path, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
