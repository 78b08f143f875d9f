#!/bin/bash
# Second call: the FusedMLP engine test on CUDA (default cluster kernel, with the cluster barrier
# before the first write into another block), racecheck of the cluster kernel forced on two of
# its models (first hazards printed), the v3 head's CUDA graph with four FusedMLP choices (three
# alternating rounds) and each engine's eager per-layer profile.
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
mkdir -p "$OUT/a" "$OUT/san" "$OUT/b" "$OUT/p"
OUT=$OUT/a STEPS="gpu" GPU_TESTS_INCLUDE='cuda_engine\.mlp_fusion' \
  DEADLINE=200 timeout 210 bash scripts/gpu_check.sh > "$OUT/a/console.log" 2>&1
cat "$OUT/a/summary.txt"
echo "=== tests done at ${SECONDS} s"
source scripts/gpu_env.sh > /dev/null 2>&1
B=$ROOT/build-gpu
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for m in plain anchor_encoder_900; do
  onnx=$B/tests/engine/mlp_fusion_cuda/$m/model.onnx
  S4D_CUDA_MLP_CLUSTER=1 timeout 120 "$SAN" --tool racecheck --print-limit 4 --error-exitcode 9 "$B/bin/s4dexec" \
    --onnx="$onnx" --device=cuda --iterations=1 --warmUp=0 > "$OUT/san/racecheck_$m.log" 2>&1
  echo "racecheck $m: exit $? $(grep -Eo 'RACECHECK SUMMARY: [0-9]+ [a-z]+' "$OUT/san/racecheck_$m.log" | tail -1)"
  head -c 6000 "$OUT/san/racecheck_$m.log" | grep -v '^\s*$' | head -40
done
echo "=== racecheck done at ${SECONDS} s"
V="on: cluster0:S4D_CUDA_MLP_CLUSTER=0 wait:S4D_CUDA_MLP_CLUSTER_WAIT=1 rows32:S4D_CUDA_MLP_CLUSTER_ROWS=32"
OUT=$OUT/b STEPS="passes" FOLD_PRESETS=v3 PASS_VARIANTS="$V" \
  DEADLINE=$((500 - SECONDS)) timeout $((510 - SECONDS)) bash scripts/gpu_check.sh > "$OUT/b/console.log" 2>&1
cat "$OUT/b/summary.txt"
for v in $V; do
  n=${v%%:*}
  env ${v#*:} timeout 60 "$B/bin/s4dexec" --loadEngine="$ROOT/out/fold_v3/head_$n.s4d" \
    --plugins="$B/lib/libs4d_plugins.so" --iterations=50 --warmUp=10 --noDataTransfers --dumpProfile \
    > "$OUT/p/v3_head_${n}_eager.log" 2>&1
  echo "$n: $(grep -E '^\[latency\]' "$OUT/p/v3_head_${n}_eager.log")"
  grep -E 'FusedMLP' "$OUT/p/v3_head_${n}_eager.log" | sed -n 6,10p
done
find "$OUT" -size +12M -delete
echo "total ${SECONDS} s"
