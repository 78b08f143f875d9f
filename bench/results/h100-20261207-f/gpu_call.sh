#!/bin/bash
# One call: the aggregation op's kernels with programmatic dependent launch (f8074ad).
#  1. build; the op's GPU tests, the plugin's CUDA tests, the static kernel check, s4d from
#     PyTorch on CUDA; compute-sanitizer on the op (every variant); the v3 demo on CUDA against
#     PyTorch (also the first v3 demo run of the float32 attention change b804826);
#  2. the op's benchmark, three alternating rounds with S4D_PDL=1 and S4D_PDL=0 (the same
#     build), 1, 100, 900 and 1800 anchors.
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
R=$OUT
mkdir -p "$R/a" "$R/da"
OUT=$R/a STEPS="gpu dasan demo" GPU_TESTS_INCLUDE='da_cuda|plugin|cuda_kernels' DEMO_PRESETS=v3 \
  DEADLINE=330 timeout 340 bash scripts/gpu_check.sh > "$R/a/console.log" 2>&1
cat "$R/a/summary.txt"
echo "=== checks done at ${SECONDS} s"
source scripts/gpu_env.sh > /dev/null 2>&1
B=$ROOT/build-gpu/bin/s4d_da_bench
for round in 1 2 3; do
  for pdl in 1 0; do
    S4D_PDL=$pdl timeout 60 "$B" --device cuda --anchors 1,100,900,1800 --iters 300 --warmup 30 \
      --out "$R/da/pdl${pdl}_$round" > "$R/da/pdl${pdl}_$round.log" 2>&1
    echo "round $round S4D_PDL=$pdl: exit $?"
    grep -E '^\| cuda' "$R/da/pdl${pdl}_$round/bench.md" 2>/dev/null | awk -F'|' '{print $3, $4, $5, $6}'
  done
done
tar czf "$R/da.tgz" -C "$R" da && rm -rf "$R/da"
tar czf "$R/a.tgz" -C "$R" a && rm -rf "$R/a"
find "$R" -size +12M -delete
echo "total ${SECONDS} s"
