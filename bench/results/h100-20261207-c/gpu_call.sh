#!/bin/bash
# One call: the v3 demo on CUDA (its engines), then the prof step on them: s4dexec eager with the
# per-layer profile and as a CUDA graph, and the longest chain of dependent kernels by that
# profile (bench/plan_paths.py), after the linear folding.
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/p"
OUT=$OUT/p STEPS="demo prof" DEMO_PRESETS=v3 DEADLINE=300 timeout 310 bash scripts/gpu_check.sh \
  > "$OUT/p/console.log" 2>&1
cat "$OUT/p/summary.txt"
find "$OUT" -size +12M -delete
echo "total ${SECONDS} s"
