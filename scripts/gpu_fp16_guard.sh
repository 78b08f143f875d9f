#!/usr/bin/env bash
# fp16 engines on the GPU machine, in one call (docs/precision.md): builds the engine with
# CUDA and the PyTorch extension, runs the fp16 tests (CTest engine_fp16.*, on the guarded
# device), then for the tiny and v3 Sparse4Dv3 exports a short golden sequence and builds
# each graph on CUDA three ways - float32, fp16 without the guard, fp16 with the accuracy
# guard calibrated on the golden frames (DIR/frame_NNN/<input>.npy) - and times them.
#
#   OUT=/some/dir scripts/gpu_fp16_guard.sh      (OUT defaults to ./out/fp16_guard)
#   PRESETS="tiny v3"  FRAMES=3  DEADLINE=290     (seconds for the whole run)
#
# Writes into $OUT: run.log (everything), summary.txt, and per preset and graph the build
# logs (<preset>_<graph>_{fp32,fp16,guard}.log) whose [precision] lines are the guard's
# report: each output's relative L2 before and after, the layers moved to float32.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/fp16_guard}
BUILD=${BUILD:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
PRESETS=${PRESETS:-"tiny v3"}
FRAMES=${FRAMES:-3}
DEADLINE=${DEADLINE:-290}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
LOG=$OUT/run.log
SUMMARY=$OUT/summary.txt
: > "$LOG"
: > "$SUMMARY"
export PYTHONUNBUFFERED=1
log() { echo "[$(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$LOG"; }
row() { printf '%-34s %s\n' "$1" "$2" | tee -a "$SUMMARY"; }
# A command with a time limit that never passes the budget; output to file $1.
run() {
  local out=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  [ "$left" -lt 10 ] && { log "skipped (budget spent): $*"; return 124; }
  [ "$limit" -gt "$left" ] && limit=$left
  log "$* (limit ${limit} s)"
  timeout --kill-after=5 "$limit" "$@" > "$out" 2>&1
}

# shellcheck source=scripts/gpu_env.sh
source scripts/gpu_env.sh >> "$LOG" 2>&1
run "$OUT/configure.log" 90 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DS4D_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DS4D_TEST_PYTHON="$(command -v "$PY")" "${S4D_CMAKE_DEPS[@]}" \
  || row configure FAILED
( cd python && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=4 timeout 200 "$PY" setup.py -q build_ext --inplace ) \
  > "$OUT/python_build.log" 2>&1 &
PYBUILD=$!
run "$OUT/build.log" 200 cmake --build "$BUILD" -j "$JOBS" && row build ok || row build FAILED
run "$OUT/ctest_fp16.log" 60 ctest --test-dir "$BUILD" --output-on-failure -j 4 -R engine_fp16
row "ctest engine_fp16 (guarded)" "$(grep -E 'tests passed' "$OUT/ctest_fp16.log" | tail -1)"
wait $PYBUILD || row "PyTorch extension" "FAILED (python_build.log)"

S4DEXEC="$BUILD/bin/s4dexec --plugins=$BUILD/lib/libs4d_plugins.so --device=cuda"
for preset in $PRESETS; do
  W=$OUT/$preset
  mkdir -p "$W"
  PYTHONPATH=python run "$W/export.log" 60 "$PY" -m s4d.sparse4d.export --preset "$preset" \
    --out "$W/onnx" || { row "$preset export" FAILED; continue; }
  PYTHONPATH=python run "$W/golden.log" 90 "$PY" -m s4d.sparse4d.golden --preset "$preset" \
    --frames "$FRAMES" --cut-at 2 --no-export --device cuda --out "$W/golden" \
    || { row "$preset golden" FAILED; continue; }
  "$PY" examples/demo/frames_from_manifest.py "$W/golden" >> "$LOG" 2>&1
  for g in head backbone; do
    onnx=$W/onnx/sparse4d_${preset}_$g.onnx
    for mode in fp32 fp16 guard; do
      case $mode in
        fp32) flags=() ;;
        fp16) flags=(--fp16) ;;
        guard) flags=(--fp16 --calib="$W/golden" --verbose) ;;
      esac
      f=$OUT/${preset}_${g}_$mode.log
      if run "$f" 100 $S4DEXEC --onnx="$onnx" "${flags[@]}" --iterations=50 --warmUp=10 \
           --useCudaGraph --noDataTransfers --dumpLayerInfo; then
        lat=$(grep -oE 'median [0-9.]+ ms' "$f" | tail -1)
        half=$(grep -cE ' float16 +in:' "$f")
        row "$preset $g $mode" "ok, $lat, $half float16 layers"
      else
        row "$preset $g $mode" "FAILED or timed out ($(basename "$f"))"
      fi
      grep -E '^\[precision\] (output|moved|builds|fp16:)' "$f" | sed "s/^/    /" >> "$SUMMARY"
    done
  done
done
log "done in ${SECONDS} s"
cat "$SUMMARY"
