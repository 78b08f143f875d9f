#!/usr/bin/env bash
# One call on the GPU machine for the deformable aggregation kernels: build the op
# library (no engine), benchmark every kernel variant after checking it against the
# CPU oracle, run the GPU tests over every variant, compute-sanitizer on the small
# test, and time the op through PyTorch (the extension builds in the background
# meanwhile). Needs cmake, a C compiler, the CUDA toolkit; python3 with a CUDA torch
# for the PyTorch part (skipped without it).
#
#   OUT=/some/dir bash scripts/gpu_bench_da.sh       (OUT defaults to ./out/gpu_bench_da)
#
# Steps run in order of value and stop when the DEADLINE (seconds, default 300) is
# spent. Writes into $OUT: log.txt (every step), summary.txt (printed at the end),
# bench/ (all variants, 900 and 1800 anchors), bench_best/ (the public functions with
# the fastest checked variants as defaults, through the S4D_DA_CUDA_* variables),
# torch_default.json and torch_best.json (PyTorch layers), python_build.log, and
# python_gpu_tests.log.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/gpu_bench_da}
mkdir -p "$OUT"
LOG=$OUT/log.txt
SUMMARY=$OUT/summary.txt
BUILD=${BUILD:-$ROOT/build-gpu-da}
JOBS=$(nproc 2>/dev/null || echo 4)
DEADLINE=${DEADLINE:-300}
PY=${PYTHON:-python3}
: > "$LOG"
declare -a ROWS=()

log() { echo "[$(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$LOG"; }
row() { ROWS+=("$(printf '%-36s %s' "$1" "$2")"); }

# A step with a time limit, never past the overall budget; output to the log.
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  if [ "$left" -lt 8 ]; then
    log "== $name: skipped, the ${DEADLINE} s budget is spent"
    row "$name" "skipped (budget)"
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "== $name (limit ${limit} s): $*"
  local t0=$SECONDS rc
  timeout --kill-after=5 "$limit" "$@" >> "$LOG" 2>&1
  rc=$?
  log "== $name: exit $rc after $((SECONDS - t0)) s"
  return $rc
}

verdict() { # name rc
  case $2 in
    0) row "$1" ok ;;
    77) row "$1" "skipped (no device)" ;;
    124|137) row "$1" "TIMEOUT" ;;
    *) row "$1" "FAIL (exit $2)" ;;
  esac
}

log "deformable aggregation GPU run in $ROOT, results in $OUT, budget ${DEADLINE} s"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv; } >> "$LOG" 2>&1 || true
NVCC=${CUDACXX:-}
[ -z "$NVCC" ] && NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
"$NVCC" --version | tail -1 >> "$LOG" 2>&1 || true

# The PyTorch extension builds at low priority while the rest goes on.
PYPID=""
PYOK=""
if "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  (cd python && S4D_CUDA=1 TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=4 nice -n 15 \
     timeout 200 "$PY" setup.py -q build_ext --inplace --force) > "$OUT/python_build.log" 2>&1 &
  PYPID=$!
  log "PyTorch extension build started in the background (pid $PYPID)"
else
  row "PyTorch" "skipped (no CUDA torch)"
fi

step configure 60 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DS4D_REQUIRE_ENGINE=OFF \
  -DS4D_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90
rc=$?; verdict configure $rc
if [ $rc -eq 0 ]; then
  step build 150 cmake --build "$BUILD" -j "$JOBS" --target s4d_da_bench test_da_cuda
  rc=$?; verdict build $rc
fi
BENCH=$BUILD/bin/s4d_da_bench
TEST=$BUILD/bin/test_da_cuda

if [ -x "$BENCH" ] && [ -x "$TEST" ]; then
  step "bench all variants" 120 "$BENCH" --device cuda --variants all --anchors 900,1800 \
    --iters 200 --warmup 20 --out "$OUT/bench"
  verdict "bench all variants (checked)" $?

  for c in forward backward fp16 determinism graph unaligned small; do
    step "test $c" 90 "$TEST" "$c"
    verdict "test $c (all variants)" $?
  done

  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$SAN" ]; then
    step "memcheck small" 60 "$SAN" --tool memcheck --error-exitcode 9 "$TEST" small
    verdict "compute-sanitizer memcheck small" $?
  else
    row compute-sanitizer "not found"
  fi

  # The fastest checked variants, for the public functions and for PyTorch.
  BEST=$("$PY" - "$OUT/bench/bench.json" <<'EOF' 2>>"$LOG"
import json, sys
rows = json.load(open(sys.argv[1]))["results"]
def best(kernel, pred=lambda r: True):
    c = [r for r in rows if r["kernel"] == kernel and r["anchors"] == 900 and r["check_ok"]
         and pred(r)]
    return min(c, key=lambda r: r["median_us"])["variant"] if c else ""
fwd = best("variant forward fp32")
bwd = best("variant backward")
det = best("variant backward", lambda r: r["bitwise_repro"] == 1 and "det" in r["variant"])
print(f"S4D_DA_CUDA_FWD={fwd} S4D_DA_CUDA_FWD_DET={fwd} S4D_DA_CUDA_BWD={bwd} "
      f"S4D_DA_CUDA_BWD_DET={det}")
EOF
)
  log "fastest checked variants: ${BEST:-none}"
  row "fastest variants" "${BEST:-none}"
  if [ -n "$BEST" ]; then
    step "bench best as defaults" 30 env $BEST "$BENCH" --device cuda --variants default \
      --anchors 900,1800 --iters 200 --warmup 20 --out "$OUT/bench_best"
    verdict "bench, best variants as defaults" $?
  fi
fi

if [ -n "$PYPID" ]; then
  left=$((DEADLINE - SECONDS))
  log "waiting for the PyTorch extension build (up to ${left} s)"
  while kill -0 "$PYPID" 2>/dev/null && [ $((DEADLINE - SECONDS)) -gt 20 ]; do sleep 2; done
  if kill -0 "$PYPID" 2>/dev/null; then
    kill "$PYPID" 2>/dev/null; row "PyTorch extension build" "TIMEOUT"
  elif wait "$PYPID"; then
    PYOK=1
    row "PyTorch extension build" ok
    step "torch timing, defaults" 40 env PYTHONPATH=python "$PY" bench/torch_da_timing.py \
      --out "$OUT/torch_default.json" --label defaults
    verdict "torch timing, default variants" $?
    if [ -n "${BEST:-}" ]; then
      step "torch timing, best" 40 env $BEST PYTHONPATH=python "$PY" bench/torch_da_timing.py \
        --out "$OUT/torch_best.json" --label "$BEST"
      verdict "torch timing, best variants" $?
    fi
  else
    row "PyTorch extension build" "FAIL (see python_build.log)"
  fi
fi

if [ -x "${TEST:-}" ]; then
  if [ -x "${SAN:-}" ]; then
    step "racecheck small" 60 "$SAN" --tool racecheck --error-exitcode 9 "$TEST" small
    verdict "compute-sanitizer racecheck small" $?
  fi
  step "test large" 60 "$TEST" large
  verdict "test large (offsets past 2^31)" $?
fi

if [ -n "$PYOK" ]; then
  # The op's tests under this machine's torch: its GPU tests and the operator's CPU ones.
  # The engine's (test_engine_gpu.py) need the engine build, which this run leaves out:
  # scripts/gpu_check.sh runs them.
  step "python op tests" 120 env PYTHONPATH=python "$PY" -m pytest -q -x -p no:cacheprovider \
    tests/python/gpu/test_ops_gpu.py tests/python/test_ops_registration.py \
    tests/python/test_ops_extension.py tests/python/test_ops_errors.py tests/python/test_ops_onnx.py
  rc=$?
  grep -E "passed|failed" "$LOG" | tail -1 > "$OUT/python_gpu_tests.log" 2>/dev/null
  verdict "python op tests (GPU and CPU)" $rc
fi

{
  echo "deformable aggregation GPU run, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), ${SECONDS} s"
  for r in "${ROWS[@]}"; do echo "  $r"; done
  for f in "$OUT/bench/bench.json" "$OUT/bench_best/bench.json"; do
    [ -f "$f" ] && "$PY" - "$f" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"\n== {sys.argv[1]}: kernel, variant, anchors, median us, max abs err, repro, check")
for r in d["results"]:
    if r["device"] != "cuda":
        continue
    print(f"  {r['kernel']:24s} {r['variant']:16s} {r['anchors']:5d} {r['median_us']:8.1f} "
          f"{r['max_abs_err']:9.2g} {r['bitwise_repro']:2d} {'ok' if r['check_ok'] else 'FAIL'}")
EOF
    md=${f%.json}.md
    [ -f "$md" ] && sed -n '/^## Targets/,$p' "$md"
  done
  for f in "$OUT/torch_default.json" "$OUT/torch_best.json"; do
    [ -f "$f" ] && "$PY" - "$f" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"\n== {sys.argv[1]} ({d['label']})")
for r in d["rows"]:
    host = "" if r["host_us_per_call"] is None else f"{r['host_us_per_call']:8.1f}"
    print(f"  {r['layer']:6s} {r['kernel']:48s} {r['median_us']:8.1f} {host}")
EOF
  done
} > "$SUMMARY" 2>&1
cat "$SUMMARY"
grep -q 'FAIL\|TIMEOUT' "$SUMMARY" && exit 1
exit 0
