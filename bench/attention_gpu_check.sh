#!/usr/bin/env bash
# The fused attention (s4d::FusedAttention) on the GPU machine, in one call of a few minutes:
#   1. configures and builds s4dexec and the plugins with CUDA (deps as scripts/gpu_check.sh);
#   2. ctest cuda_ops.attention: the attention chains (v3/tiny shapes, odd sizes, masks with
#      NaN rows; float32 strict, float32 with --tf32 and float16, the last two on tensor cores)
#      on CUDA against the CPU engine, and the tensor-core kernels' CPU emulation;
#   3. tests/engine/attention_fusion.py on CUDA: the layer list shows FusedAttention, fused and
#      unfused against a float64 reference;
#   4. bench/attention_bench.py: the v3 head's temporal and self-attention blocks, fused vs
#      unfused, float32 strict, TF32 and float16 (CUDA-graph medians and per-layer times).
#
#   OUT=/some/dir bench/attention_gpu_check.sh      (OUT defaults to out/attention_gpu_check)
#
# Writes $OUT/summary.txt, the logs, and $OUT/bench/attention_bench.{md,json}.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/attention_gpu_check}
BUILD=${BUILD:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 4)
mkdir -p "$OUT"
: > "$OUT/summary.txt"
status=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

# shellcheck source=scripts/gpu_env.sh
source scripts/gpu_env.sh > "$OUT/env.log" 2>&1
t0=$SECONDS
if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DS4D_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DS4D_TEST_PYTHON="$(command -v "$PY")" "${S4D_CMAKE_DEPS[@]}" > "$OUT/configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target s4dexec s4d_plugins > "$OUT/build.log" 2>&1; then
  note "build: ok ($((SECONDS - t0)) s)"
else
  tail -30 "$OUT/configure.log" "$OUT/build.log"
  note "build: FAILED"
  exit 1
fi
EXE=$BUILD/bin/s4dexec
PLUG=$BUILD/lib/libs4d_plugins.so

t0=$SECONDS
(cd "$BUILD" && timeout 300 ctest -V -R '^(cuda_ops\.attention|cuda_attention_tc_emulation)$') \
  > "$OUT/ctest_attention.log" 2>&1
rc=$?
grep -E "(^|: )(ok |FAIL)|cases agree|max abs err|Passed|Failed" "$OUT/ctest_attention.log" \
  | tail -150 >> "$OUT/summary.txt"
note "ctest cuda_ops.attention: exit $rc ($((SECONDS - t0)) s)"
[ $rc = 0 ] || status=1

t0=$SECONDS
timeout 200 "$PY" tests/engine/attention_fusion.py "$EXE" "$PLUG" "$OUT/fusion_cuda" --device cuda \
  > "$OUT/attention_fusion_cuda.log" 2>&1
rc=$?
cat "$OUT/attention_fusion_cuda.log" >> "$OUT/summary.txt"
note "attention_fusion.py on CUDA: exit $rc ($((SECONDS - t0)) s)"
[ $rc = 0 ] || status=1

t0=$SECONDS
timeout 280 "$PY" bench/attention_bench.py "$EXE" "$PLUG" "$OUT/bench" --iterations 100 \
  > "$OUT/bench.log" 2>&1
rc=$?
cat "$OUT/bench.log" "$OUT/bench/attention_bench.md" >> "$OUT/summary.txt" 2>/dev/null
note "attention_bench.py: exit $rc ($((SECONDS - t0)) s)"
[ $rc = 0 ] || status=1
exit $status
