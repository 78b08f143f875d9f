#!/bin/bash
# Call 3 (a fresh H100: the first had gone back): the skinny kernel with W staged eight loads at a time and the row's
# first loads issued before the staging. The dense family on CUDA (default choices, and every
# product on the own kernel), then the v3 head built with it (on, with the builder's timing log)
# and without it (skinny0), CUDA graphs in three alternating rounds.
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/a"
OUT=$OUT/a STEPS="gpu passes" GPU_TESTS_INCLUDE='cuda_ops.dense$|cuda_ops.dense_own_sgemm' FOLD_PRESETS="v3" \
  PASS_VARIANTS="on:S4D_GEMM_LOG=1 skinny0:S4D_GEMM_SKINNY=0" DEADLINE=300 timeout 310 bash scripts/gpu_check.sh \
  > "$OUT/a/console.log" 2>&1
cat "$OUT/a/summary.txt"
grep -E 'cases agree' "$OUT"/a/ctest_gpu_all.log
echo "skinny products: $(grep -c 'one warp per row' "$ROOT"/out/gpu_check/fold_v3_on_build.log "$OUT"/a/fold_v3_on_build.log 2>/dev/null)"
grep -E "\[gemm\] '.*n (1|2|3|10|11|18) k|own float32 kernel:|chose" "$OUT"/a/fold_v3_on_build.log | grep -A3 -E "n (2|10|11|18) k 256" | head -60
find "$OUT" -size +12M -delete
echo "total ${SECONDS} s"
