#!/bin/bash
# One call: the CUDA engine tests (the pass tests, linear_folding among them) beside the v3 demo on
# CUDA (agreement with PyTorch), the v3 head's CUDA graph with and without the linear folding
# (three alternating rounds), then the frame benchmark (float32, TF32, guarded float16, PyTorch
# eager; tiny and v3) and the aggregation op's benchmark.
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a STEPS="gpu demo passes" GPU_TESTS_INCLUDE='cuda_engine|engine_cuda' DEMO_PRESETS=v3 FOLD_PRESETS=v3 \
  PASS_VARIANTS="on: linear0:S4D_FOLD_LINEAR=0" DEADLINE=330 timeout 340 bash scripts/gpu_check.sh \
  > "$OUT/a/console.log" 2>&1
cat "$OUT/a/summary.txt"
echo "=== first part done at ${SECONDS} s"
OUT=$OUT/b STEPS="bench" BENCH_FLAGS="--no-compile --iterations 100" DEADLINE=$((585 - SECONDS)) \
  timeout $((590 - SECONDS)) bash scripts/gpu_check.sh > "$OUT/b/console.log" 2>&1
cat "$OUT/b/summary.txt"
find "$OUT" -size +12M -delete
echo "total ${SECONDS} s"
