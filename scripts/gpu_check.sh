#!/usr/bin/env bash
# One call on the GPU machine: build the op library with CUDA, run the tests
# (GPU against the CPU oracle), compute-sanitizer memcheck and racecheck on the
# GPU test binary, then the benchmark. Needs only cmake, a C compiler and the
# CUDA toolkit (no protobuf-c, OpenBLAS or network).
#
#   OUT=/some/dir scripts/gpu_check.sh      (OUT defaults to ./out/gpu_check)
#
# Writes into $OUT: gpu_check.log (every step's output), summary.txt (the
# table printed at the end), bench/bench.md and bench/bench.json. A Python
# check (scripts/gpu_check_python.sh) runs too when it exists.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/gpu_check}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
SUMMARY=$OUT/summary.txt
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
: > "$LOG"
declare -a ROWS=()

log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
row() { ROWS+=("$(printf '%-34s %s' "$1" "$2")"); }

# Runs a step with a time limit; its output goes to the log only.
# A step never runs past the overall budget (DEADLINE seconds from the start), so the
# whole check ends in time even when something hangs.
DEADLINE=${DEADLINE:-420}
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 15 ]; then
    log "== $name: skipped, the ${DEADLINE} s budget is spent"
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "== $name: $*"
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  rc=$?
  log "== $name: exit $rc after $((SECONDS - t0)) s"
  return $rc
}

log "s4d GPU check in $ROOT, results in $OUT"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } >> "$LOG" 2>&1 || true
NVCC=${CUDACXX:-}
[ -z "$NVCC" ] && NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" --version >> "$LOG" 2>&1 || true
cmake --version | head -1 >> "$LOG" 2>&1

if step configure 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DS4D_REQUIRE_ENGINE=OFF \
     -DS4D_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90; then
  row configure ok
else
  row configure FAILED; BUILD_FAILED=1
fi
if [ -z "${BUILD_FAILED:-}" ] && step build 300 cmake --build "$BUILD" -j "$JOBS"; then
  row build ok
else
  row build FAILED; BUILD_FAILED=1
fi

if [ -z "${BUILD_FAILED:-}" ]; then
  # CPU tests in parallel, GPU tests one at a time (they share the device).
  step ctest-cpu 300 ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" -LE gpu
  r=$?; row "ctest CPU tests" "$([ $r -eq 0 ] && echo pass || echo FAIL) ($(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$LOG" | tail -1))"
  step ctest-gpu 400 ctest --test-dir "$BUILD" --output-on-failure -L gpu
  r=$?; row "ctest GPU tests" "$([ $r -eq 0 ] && echo pass || echo FAIL) ($(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$LOG" | tail -1))"
  skipped=$(grep -c 'Test *#.*da_cuda_.*Skipped' "$LOG" || true)
  # On the GPU machine a skipped GPU test means nothing was checked: report it as a failure.
  [ "$skipped" != 0 ] && row "GPU tests skipped" "$skipped: FAIL (no usable CUDA device)"

  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  TEST_BIN=$BUILD/bin/test_da_cuda
  if [ -x "$SAN" ] && [ -x "$TEST_BIN" ]; then
    for tool in memcheck racecheck; do
      if step "sanitizer-$tool" 180 "$SAN" --tool "$tool" --error-exitcode 9 "$TEST_BIN" small; then
        row "compute-sanitizer $tool" "clean"
      else
        r=$?
        if [ $r -eq 9 ]; then row "compute-sanitizer $tool" "ERRORS (see gpu_check.log)";
        elif [ $r -eq 77 ]; then row "compute-sanitizer $tool" "skipped (no device)";
        else row "compute-sanitizer $tool" "did not run (exit $r)"; fi
      fi
    done
    if step "sanitizer-memcheck-graph" 180 "$SAN" --tool memcheck --error-exitcode 9 "$TEST_BIN" graph; then
      row "compute-sanitizer memcheck graph" clean
    else
      row "compute-sanitizer memcheck graph" "exit $? (see gpu_check.log)"
    fi
  else
    row compute-sanitizer "not found, skipped"
  fi

  if step bench 240 "$BUILD/bin/s4d_da_bench" --iters 200 --warmup 20 --out "$OUT/bench"; then
    row benchmark "ok ($OUT/bench/bench.md)"
  else
    row benchmark FAILED
  fi
fi

if [ -x scripts/gpu_check_python.sh ] || [ -f scripts/gpu_check_python.sh ]; then
  if step python 300 env OUT="$OUT" bash scripts/gpu_check_python.sh; then
    row "gpu_check_python.sh" ok
  else
    row "gpu_check_python.sh" "FAILED (exit $?)"
  fi
fi

{
  echo "s4d GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  for r in "${ROWS[@]}"; do echo "  $r"; done
  if [ -f "$OUT/bench/bench.md" ]; then echo; grep '^|' "$OUT/bench/bench.md"; fi
} > "$SUMMARY"
cat "$SUMMARY" | tee -a "$LOG"
grep -q 'FAIL\|ERRORS' "$SUMMARY" && exit 1
exit 0
