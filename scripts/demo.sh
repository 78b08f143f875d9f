#!/usr/bin/env bash
# make demo: Sparse4Dv3 from PyTorch to the s4d C engine, frame after frame.
#
#   scripts/demo.sh                 (after `make`; `make demo` does both)
#   PRESET=v3 scripts/demo.sh       the full-size model (slow on a CPU)
#   DEVICE=cuda PRECISION=fp16 scripts/demo.sh
#                                   fp16 engines with the accuracy guard (GPU)
#
# Steps: export the preset to ONNX (the trained weights of the committed
# checkpoint), compute the PyTorch golden sequence over the validation split
# of the synthetic dataset (s4d.sparse4d.golden, laid out per frame for the C
# program), build the engines with s4dexec and the plugin library, run
# build/bin/s4d_demo over the frames with the temporal state carried, compare
# with PyTorch, and score both (s4d.sparse4d.evaluate: mAP, NDS, MOTA from the
# engine's boxes and from PyTorch's). Everything lands in out/demo/<preset>/
# (agreement.jsonl: each frame's agreement with PyTorch, one JSON line).
# Exit status 0 only when the engine agrees with PyTorch, output by output
# and in mAP/NDS (within METRIC_TOLERANCE).
#
# Environment: PRESET (tiny|v3, default tiny), CHECKPOINT (default: the
# committed python/s4d/sparse4d/weights/sparse4d_<preset>_synthetic.pt when
# there is one; "none": seeded random weights), DEVICE (auto|cpu|cuda, default
# auto: CUDA when a GPU and a CUDA engine backend are present), BUILD (build),
# PYTHON (/usr/bin/python3), OUT (out/demo/<preset>), THREADS (0: all cores),
# FRAMES (trained: 120, the whole validation split; random: 6), SCENE_LENGTH
# (frames per validation sequence: 10; random: 3), SCORE_THRESHOLD (boxes drawn
# and counted as detections: 0.3 trained; 0.01 random, whose scores sit near
# the 1% class prior), BEV_RANGE (half-width of the bird's-eye view: 40 m trained,
# 60 m random), METRIC_TOLERANCE (0.001; fp16: 0.01).
#
# PRECISION=fp16 (default fp32) builds fp16 engines with the accuracy guard:
# the calibration sets are the first CALIB_FRAMES (3) frames of the golden
# sequence (s4d.sparse4d.calib --golden, the head's carried state included),
# passed as s4dexec --fp16 --calib=DIR (and --accuracy=ACCURACY when set);
# the backbone's tolerance is BACKBONE_ACCURACY (default 2e-4; empty:
# ACCURACY): the head's boxes tolerate about 2e-4 relative L2 in their input
# features, not 1e-2 (docs/precision.md, "How accurate the backbone must be");
# the head's is HEAD_ACCURACY (default 1e-2 with the carried instance bank at
# 5e-6 in its anchors, 1e-4 in its confidences and 1e-3 in its features;
# empty: ACCURACY), what the boxes of the following frames tolerate in the
# state the head carries ("How accurate the carried state must be"); both
# defaults come from s4d.sparse4d.calib --print-accuracy, and
# bench/feature_sensitivity.py measures them;
# s4d_demo --fp16 prints each engine's precision report and, per frame, the
# output relative L2 against float32 PyTorch and the fraction of the top-100
# boxes matched (same class and track id, centre within 0.1 m; at least
# MIN_MATCHED, 0.99, on every frame; with the track ids paired one to one over
# the sequence as well, docs/precision.md). The CPU backend computes in float32
# only: there the engine's refusal is shown and the script exits 2. OUT
# defaults to out/demo/<preset>_fp16.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
PRESET=${PRESET:-tiny}
DEVICE=${DEVICE:-auto}
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
PRECISION=${PRECISION:-fp32}
case "$PRECISION" in fp16) suffix=_fp16 ;; *) suffix="" ;; esac
OUT=${OUT:-out/demo/$PRESET$suffix}
CALIB_FRAMES=${CALIB_FRAMES:-3}
MIN_MATCHED=${MIN_MATCHED:-0.99}
ACCURACY=${ACCURACY:-}
THREADS=${THREADS:-0}
CHECKPOINT=${CHECKPOINT:-python/s4d/sparse4d/weights/sparse4d_${PRESET}_synthetic.pt}
if [ "$CHECKPOINT" != none ] && [ ! -f "$CHECKPOINT" ]; then
  echo "[demo] no checkpoint $CHECKPOINT: using seeded random weights"
  CHECKPOINT=none
fi
if [ "$CHECKPOINT" = none ]; then
  FRAMES=${FRAMES:-6} SCENE_LENGTH=${SCENE_LENGTH:-3} SCORE_THRESHOLD=${SCORE_THRESHOLD:-0.01}
  BEV_RANGE=${BEV_RANGE:-60}
  weights=()
else
  FRAMES=${FRAMES:-120} SCENE_LENGTH=${SCENE_LENGTH:-10} SCORE_THRESHOLD=${SCORE_THRESHOLD:-0.3}
  BEV_RANGE=${BEV_RANGE:-40}
  weights=(--checkpoint "$CHECKPOINT")
fi
if [ "$PRECISION" = fp16 ]; then
  METRIC_TOLERANCE=${METRIC_TOLERANCE:-0.01}
else
  METRIC_TOLERANCE=${METRIC_TOLERANCE:-0.001}
fi
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
case "$PRECISION" in fp32|fp16) ;; *) die "PRECISION must be fp32 or fp16, got '$PRECISION'" ;; esac
case "$CALIB_FRAMES" in ''|*[!0-9]*|0) die "CALIB_FRAMES must be a positive integer, got '$CALIB_FRAMES'" ;; esac
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
say "preset $PRESET, precision $PRECISION, weights ${CHECKPOINT/#none/seeded random}, output under $OUT/"

step "exporting the $PRESET preset to ONNX" "$OUT/logs/export.log" \
  "$PYTHON" -m s4d.sparse4d.export --preset "$PRESET" --out "$OUT/onnx" "${weights[@]}"
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
if [ "$PRECISION" = fp16 ] && [ "$device" = cpu ]; then
  # the builder's own answer, not a guess of this script
  set +e
  "$exec_bin" --onnx="$OUT/onnx/sparse4d_${PRESET}_backbone.onnx" --plugins="$plugins" \
    --device=cpu --fp16 --iterations=1 --warmUp=0 >"$OUT/logs/fp16_cpu.log" 2>&1
  rc=$?
  set -e
  [ "$rc" -eq 0 ] && die "s4dexec built an fp16 engine for the CPU (log: $OUT/logs/fp16_cpu.log)"
  say "the engine refuses fp16 on the CPU: $(grep -m1 -i 'fp16' "$OUT/logs/fp16_cpu.log" || tail -n1 "$OUT/logs/fp16_cpu.log")"
  die "PRECISION=fp16 needs the CUDA backend (DEVICE=cuda on a GPU machine); the CPU computes in float32 only"
fi
# PyTorch on the GPU when it has one and torch can use it (full fp32 there)
golden_device=cpu
if [ -n "$gpu" ] && "$PYTHON" -c "import sys, torch; sys.exit(not torch.cuda.is_available())" \
     2>/dev/null; then
  golden_device=cuda
fi
step "running PyTorch over $FRAMES validation frames (golden sequence, $golden_device)" \
  "$OUT/logs/golden.log" \
  "$PYTHON" -m s4d.sparse4d.golden --preset "$PRESET" --frames "$FRAMES" --no-export \
  --cut-at "$SCENE_LENGTH" --device "$golden_device" --out "$OUT/golden" "${weights[@]}"
"$PYTHON" examples/demo/frames_from_manifest.py "$OUT/golden" >"$OUT/logs/frames.log" 2>&1 \
  || { cat "$OUT/logs/frames.log" >&2; die "reading $OUT/golden/manifest.json failed"; }
demo_flags=()
if [ "$PRECISION" = fp16 ]; then
  # the tolerances measured for the head's boxes (s4d.sparse4d.calib.ACCURACY)
  BACKBONE_ACCURACY=${BACKBONE_ACCURACY-$("$PYTHON" -m s4d.sparse4d.calib --print-accuracy backbone)}
  HEAD_ACCURACY=${HEAD_ACCURACY-$("$PYTHON" -m s4d.sparse4d.calib --print-accuracy head)}
  step "calibration sets: the first $CALIB_FRAMES golden frames (s4d.sparse4d.calib)" \
    "$OUT/logs/calib.log" \
    "$PYTHON" -m s4d.sparse4d.calib --golden "$OUT/golden" --frames "$CALIB_FRAMES" --out "$OUT/calib"
  demo_flags=(--fp16 --min-matched="$MIN_MATCHED")
fi
for g in backbone head; do
  extra=()
  if [ "$PRECISION" = fp16 ]; then
    accuracy=$ACCURACY
    if [ "$g" = backbone ] && [ -n "$BACKBONE_ACCURACY" ]; then accuracy=$BACKBONE_ACCURACY; fi
    if [ "$g" = head ] && [ -n "$HEAD_ACCURACY" ]; then accuracy=$HEAD_ACCURACY; fi
    extra=(--fp16 ${accuracy:+--accuracy="$accuracy"} --calib="$OUT/calib/$g")
  fi
  step "building the $g engine (s4dexec ${extra[*]:-float32})" "$OUT/logs/engine_$g.log" \
    "$exec_bin" --onnx="$OUT/onnx/sparse4d_${PRESET}_$g.onnx" --plugins="$plugins" \
    --device="$device" --saveEngine="$OUT/engines/$g.s4d" --iterations=1 --warmUp=0 \
    --threads="$THREADS" ${extra[@]+"${extra[@]}"}
done

say "running the engines frame by frame (build/bin/s4d_demo)"
set +e
"$demo_bin" --plugins="$plugins" --backbone="$OUT/engines/backbone.s4d" \
  --head="$OUT/engines/head.s4d" --frames="$OUT/golden" --out="$OUT/frames" \
  --threads="$THREADS" --score-threshold="$SCORE_THRESHOLD" --range="$BEV_RANGE" --compare \
  --agreement="$OUT/agreement.jsonl" ${demo_flags[@]+"${demo_flags[@]}"} | tee "$OUT/table.txt"
rc=${PIPESTATUS[0]}
set -e
say "per-frame JSON, bird's-eye PNG and camera mosaic PNG: $OUT/frames/"
if [ "$rc" -ne 0 ]; then
  say "the engine does NOT agree with PyTorch (exit $rc)"
  exit "$rc"
fi
say "the engine agrees with PyTorch"

# The metrics of the run, from the engine's boxes (the JSON above) and from
# PyTorch's (the golden sequence), against the ground truth of the frames.
say "metrics over $FRAMES validation frames (engine: the boxes decoded in C; PyTorch: the golden sequence)"
set +e
"$PYTHON" -m s4d.sparse4d.evaluate --golden "$OUT/golden" --engine "$OUT/frames" \
  --tolerance "$METRIC_TOLERANCE" --json "$OUT/metrics.json" | tee "$OUT/metrics.txt"
mrc=${PIPESTATUS[0]}
set -e
"$PYTHON" - "$OUT/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
e, p = m["engine"], m["PyTorch"]
print(f"[demo] summary: mAP engine {e['mAP']:.4f} / PyTorch {p['mAP']:.4f}, "
      f"NDS engine {e['NDS']:.4f} / PyTorch {p['NDS']:.4f}, "
      f"MOTA engine {e['tracking']['MOTA']:.4f} / PyTorch {p['tracking']['MOTA']:.4f} "
      f"({e['num_frames']} frames, {e['num_gt']} ground-truth boxes)")
PY
if [ "$mrc" -ne 0 ]; then
  say "the engine's metrics do NOT match PyTorch's (exit $mrc)"
  exit 1
fi
