#!/usr/bin/env bash
# One call on the GPU machine for the element-wise CUDA kernels: build (CUDA for
# sm_90), the family's tests (CUDA against the CPU engine, the host build of the
# kernels, the guarded dry run), compute-sanitizer memcheck on some of the
# device models, a CUDA-graph replay checked bit for bit against the CPU, and
# the benchmark against PyTorch. Needs the engine's build dependencies
# (protobuf-c, OpenBLAS, libonnx-dev's onnx.proto) and python3 with onnx and
# numpy (torch with CUDA for the PyTorch column).
#
#   OUT=/some/dir bench/cuda_elementwise/run.sh      (OUT defaults to ./out/cuda_elementwise)
#
# Writes into $OUT: run.log (every step's output), summary.txt, bench.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/cuda_elementwise}
mkdir -p "$OUT"
LOG=$OUT/run.log
BUILD=${BUILD:-$ROOT/build-gpu-ew}
PY=${PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 4)
DEADLINE=${DEADLINE:-290}
: > "$LOG"
declare -a ROWS=()

log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
row() { ROWS+=("$(printf '%-36s %s' "$1" "$2")"); }
# A step with a time limit that never runs past the overall budget; output to the log.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 10 ]; then log "== $name: skipped, the ${DEADLINE} s budget is spent"; return 124; fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "== $name: $*"
  local t0=$SECONDS rc
  timeout --kill-after=5 "$limit" "$@" >> "$LOG" 2>&1
  rc=$?
  log "== $name: exit $rc after $((SECONDS - t0)) s"
  return $rc
}

{ nvidia-smi -L; nvcc --version | tail -2; git -C "$ROOT" log --oneline -1; } >> "$LOG" 2>&1 || true
ok=1
step configure 90 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DS4D_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DS4D_TEST_PYTHON="$(command -v "$PY")" && row configure ok || { row configure FAILED; ok=0; }
if [ $ok = 1 ]; then
  step build 200 cmake --build "$BUILD" -j "$JOBS" --target s4dexec s4d_plugins test_elementwise_host \
    && row build ok || { row build FAILED; ok=0; }
fi
if [ $ok = 1 ]; then
  step ctest 150 ctest --test-dir "$BUILD" -V -R 'elementwise'
  r=$?; row "ctest -R elementwise" "$([ $r -eq 0 ] && echo pass || echo FAIL) ($(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$LOG" | tail -1))"
  grep -E '^[0-9]+: (ok|FAIL) |cases agree' "$LOG" > "$OUT/cases.txt" || true
  [ $r -eq 0 ] && grep -q 'cuda_ops.elementwise .*Skipped' "$LOG" && row "cuda_ops.elementwise" "SKIPPED: FAIL (no usable CUDA device)"

  WORK=$BUILD/tests/cuda/cuda_elementwise
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # MARGS: the s4dexec arguments of a device_compare case's model and its inputs.
  model_args() {
    local d=$WORK/$1 specs="" f n
    for f in "$d"/in_*.npy; do
      [ -e "$f" ] || continue
      n=$(basename "$f" .npy)
      specs="${specs:+$specs,}${n#in_}:$f"
    done
    MARGS=(--onnx="$d/model.onnx" --plugins="$BUILD/lib/libs4d_plugins.so")
    [ -n "$specs" ] && MARGS+=(--loadInputs="$specs")
  }
  if [ -x "$SAN" ] && [ -d "$WORK" ]; then
    for c in binary_f32_b variadic clip_opset13 where; do
      model_args "$c"
      if step "memcheck-$c" 45 "$SAN" --tool memcheck --error-exitcode 9 "$BUILD/bin/s4dexec" \
           --device=cuda --iterations=1 --warmUp=0 "${MARGS[@]}"; then
        row "memcheck $c" clean
      else
        row "memcheck $c" "exit $? (see run.log)"
      fi
    done
  else
    row compute-sanitizer "not run (no sanitizer or no device models)"
  fi
  if [ -d "$WORK/s4d_head_exact/ref_cpu" ]; then
    model_args s4d_head_exact
    step graph 60 "$BUILD/bin/s4dexec" --device=cuda --useCudaGraph --iterations=5 --warmUp=1 \
      --compareOutputs="$WORK/s4d_head_exact/ref_cpu" --rtol=0 --atol=0 "${MARGS[@]}" \
      && row "CUDA graph replay == CPU (bitwise)" ok || row "CUDA graph replay == CPU (bitwise)" FAIL
  fi
  step bench 120 "$PY" bench/cuda_elementwise/bench.py "$BUILD/bin/s4dexec" "$BUILD/lib/libs4d_plugins.so" \
    "$OUT/bench_models" "$OUT/bench.md" && row benchmark "ok ($OUT/bench.md)" || row benchmark FAILED
fi

{
  echo "s4d element-wise CUDA check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  for r in "${ROWS[@]}"; do echo "  $r"; done
  [ -f "$OUT/cases.txt" ] && { echo; grep -E 'FAIL|cases agree' "$OUT/cases.txt" | head -40; }
  [ -f "$OUT/bench.md" ] && { echo; cat "$OUT/bench.md"; }
} > "$OUT/summary.txt"
cat "$OUT/summary.txt" | tee -a "$LOG"
grep -q 'FAIL\|exit [1-9]' "$OUT/summary.txt" && exit 1
exit 0
