#!/bin/bash
# Call 2 (the same warm H100 as gpu_call1.sh): the two CUDA engine tests the first call's limit stopped
# (linear folding, MLP fusion), tests/python/gpu, then each head (v3, tiny) built with the skinny
# product kernel (on) and without it (skinny0: S4D_GEMM_SKINNY=0, the choices as before), replayed
# as CUDA graphs in three alternating rounds.
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/a"
OUT=$OUT/a STEPS="gpu passes" GPU_TESTS_INCLUDE='linear_folding|mlp_fusion' FOLD_PRESETS="v3 tiny" \
  PASS_VARIANTS="on: skinny0:S4D_GEMM_SKINNY=0" DEADLINE=420 timeout 430 bash scripts/gpu_check.sh \
  > "$OUT/a/console.log" 2>&1
cat "$OUT/a/summary.txt"
for f in "$OUT"/a/fold_*_build.log; do
  echo "$(basename "$f"): $(grep -c 'one warp per row' "$f") products on the skinny kernel"
done
grep -h 'one warp per row' "$OUT"/a/fold_v3_on_build.log | sed -E 's/^ *[0-9]+ //' | cut -c1-60,200-330 | head -30
find "$OUT" -size +12M -delete
echo "total ${SECONDS} s"
