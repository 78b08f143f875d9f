#!/usr/bin/env bash
# make demo: Sparse4Dv3 from PyTorch to the s4d C engine, frame after frame.
#
#   scripts/demo.sh                 (after `make`; `make demo` does both)
#   PRESET=v3 scripts/demo.sh       the full-size model (slow on a CPU)
#
# Steps: export the preset to ONNX, compute the PyTorch golden sequence
# (s4d.sparse4d.golden, laid out per frame for the C program), build the
# engines with s4dexec and the plugin library, run build/bin/s4d_demo
# over the frames with the temporal state carried, and compare with PyTorch.
# Everything lands in out/demo/<preset>/. Exit status 0 only when the engine
# agrees with PyTorch.
#
# Environment: PRESET (tiny|v3, default tiny), DEVICE (auto|cpu|cuda, default
# auto: CUDA when a GPU and a CUDA engine backend are present), BUILD (build),
# PYTHON (/usr/bin/python3), OUT (out/demo/<preset>), THREADS (0: all cores),
# FRAMES (6), SCORE_THRESHOLD (0.01: boxes drawn and counted as detections; the
# demo's seeded untrained weights score near their 1% class prior, so a trained
# model's usual 0.3 would draw none; use 0.3 with trained weights).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PRESET=${PRESET:-tiny}
DEVICE=${DEVICE:-auto}
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-out/demo/$PRESET}
THREADS=${THREADS:-0}
FRAMES=${FRAMES:-6}
SCORE_THRESHOLD=${SCORE_THRESHOLD:-0.01}
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"

say() { echo "[demo] $*"; }
die() { echo "[demo] error: $*" >&2; exit 2; }

# Runs a step with a progress line before and its duration after; its output
# goes to a log that is shown when it fails.
step() {
  local what=$1 log=$2; shift 2
  say "$what ..."
  local t0=$SECONDS
  if ! "$@" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "$what failed (log: $log)"
  fi
  say "$what: done in $((SECONDS - t0)) s"
}

case "$PRESET" in tiny|v3) ;; *) die "PRESET must be tiny or v3, got '$PRESET'" ;; esac
case "$DEVICE" in auto|cpu|cuda) ;; *) die "DEVICE must be auto, cpu or cuda, got '$DEVICE'" ;; esac
exec_bin=$BUILD/bin/s4dexec
demo_bin=$BUILD/bin/s4d_demo
plugins=$BUILD/lib/libs4d_plugins.so
for f in "$exec_bin" "$demo_bin" "$plugins"; do
  [ -e "$f" ] || die "$f is missing: run 'make' first"
done
"$PYTHON" -c "import s4d.ops, sys; sys.exit(0 if s4d.ops.extension_available() else 1)" 2>/dev/null \
  || die "the PyTorch extension is not built: run 'make python' first"

# The device: CUDA when a GPU is present and libs4d builds CUDA engines (the
# probe below asks s4dexec for one); the CPU otherwise.
gpu=""
if [ "$DEVICE" != cpu ] && command -v nvidia-smi >/dev/null 2>&1; then
  gpu=$(nvidia-smi -L 2>/dev/null | head -n 1 || true)
fi
if [ "$DEVICE" = cuda ] && [ -z "$gpu" ]; then die "DEVICE=cuda asked for and no GPU found"; fi
device=cpu

mkdir -p "$OUT"/onnx "$OUT"/golden "$OUT"/engines "$OUT"/frames "$OUT"/logs
say "preset $PRESET, output under $OUT/"

step "exporting the $PRESET preset to ONNX" "$OUT/logs/export.log" \
  "$PYTHON" -m s4d.sparse4d.export --preset "$PRESET" --out "$OUT/onnx"
# PyTorch on the GPU when it has one and torch can use it (full fp32 there)
golden_device=cpu
if [ -n "$gpu" ] && "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" \
     2>/dev/null; then
  golden_device=cuda
fi
step "running PyTorch over $FRAMES frames (golden sequence, $golden_device)" \
  "$OUT/logs/golden.log" \
  "$PYTHON" -m s4d.sparse4d.golden --preset "$PRESET" --frames "$FRAMES" --no-export \
  --device "$golden_device" --out "$OUT/golden"
"$PYTHON" examples/demo/frames_from_manifest.py "$OUT/golden" >"$OUT/logs/frames.log" 2>&1 \
  || { cat "$OUT/logs/frames.log" >&2; die "reading $OUT/golden/manifest.json failed"; }
if [ -n "$gpu" ]; then
  say "GPU found: $gpu"
  if "$exec_bin" --onnx="$OUT/onnx/sparse4d_${PRESET}_backbone.onnx" --plugins="$plugins" \
       --device=cuda --iterations=1 --warmUp=0 >"$OUT/logs/cuda_probe.log" 2>&1; then
    device=cuda
  else
    say "cannot build CUDA engines here ($(grep -m1 error "$OUT/logs/cuda_probe.log" || true)): using the CPU"
    [ "$DEVICE" = cuda ] && die "DEVICE=cuda asked for and libs4d cannot build CUDA engines"
  fi
else
  [ "$DEVICE" = cpu ] && say "DEVICE=cpu" || say "no GPU found: using the CPU"
fi
say "engines for device $device"
for g in backbone head; do
  step "building the $g engine (s4dexec)" "$OUT/logs/engine_$g.log" \
    "$exec_bin" --onnx="$OUT/onnx/sparse4d_${PRESET}_$g.onnx" --plugins="$plugins" \
    --device="$device" --saveEngine="$OUT/engines/$g.s4d" --iterations=1 --warmUp=0 \
    --threads="$THREADS"
done

say "running the engines frame by frame (build/bin/s4d_demo)"
set +e
"$demo_bin" --plugins="$plugins" --backbone="$OUT/engines/backbone.s4d" \
  --head="$OUT/engines/head.s4d" --frames="$OUT/golden" --out="$OUT/frames" \
  --threads="$THREADS" --score-threshold="$SCORE_THRESHOLD" --compare | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
set -e
say "per-frame JSON and bird's-eye PNG: $OUT/frames/"
if [ "$rc" -ne 0 ]; then
  say "the engine does NOT agree with PyTorch (exit $rc)"
  exit "$rc"
fi
say "the engine agrees with PyTorch"
