#!/bin/bash
# One call: the attention family (the block_work() helper, not run on a GPU before), the CUDA
# FusedMLP and linear folding engine tests (the cluster kernel: bits against the tiled kernels,
# float64), compute-sanitizer memcheck and racecheck of the cluster kernel forced on four of
# those models, then the v3 head's CUDA graph with and without the cluster kernel (three
# alternating rounds) and each engine's eager per-layer profile.
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
mkdir -p "$OUT/a" "$OUT/san" "$OUT/b"
OUT=$OUT/a STEPS="gpu" GPU_TESTS_INCLUDE='^cuda_ops\.attention|cuda_engine\.mlp_fusion|cuda_engine\.linear_folding' \
  DEADLINE=260 timeout 270 bash scripts/gpu_check.sh > "$OUT/a/console.log" 2>&1
cat "$OUT/a/summary.txt"
echo "=== tests done at ${SECONDS} s"
B=$ROOT/build-gpu
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for m in anchor_encoder_900 plain long_chain ffn; do
  onnx=$B/tests/engine/mlp_fusion_cuda/$m/model.onnx
  [ -f "$onnx" ] || { echo "no $onnx"; continue; }
  for tool in memcheck racecheck; do
    S4D_CUDA_MLP_CLUSTER=1 timeout 120 "$SAN" --tool $tool --error-exitcode 9 "$B/bin/s4dexec" --onnx="$onnx" \
      --device=cuda --iterations=1 --warmUp=0 > "$OUT/san/${tool}_$m.log" 2>&1
    echo "sanitizer $tool $m: exit $? $(grep -Eo '(ERROR|RACECHECK) SUMMARY: [0-9]+ [a-z]+' "$OUT/san/${tool}_$m.log" | tail -1)"
  done
done
echo "=== sanitizer done at ${SECONDS} s"
OUT=$OUT/b STEPS="passes" FOLD_PRESETS=v3 PASS_VARIANTS="on: cluster0:S4D_CUDA_MLP_CLUSTER=0" \
  DEADLINE=$((520 - SECONDS)) timeout $((530 - SECONDS)) bash scripts/gpu_check.sh > "$OUT/b/console.log" 2>&1
cat "$OUT/b/summary.txt"
for v in on cluster0; do
  env $([ $v = cluster0 ] && echo S4D_CUDA_MLP_CLUSTER=0) timeout 60 "$B/bin/s4dexec" --loadEngine="$ROOT/out/fold_v3/head_$v.s4d" \
    --plugins="$B/lib/libs4d_plugins.so" --iterations=50 --warmUp=10 --noDataTransfers --dumpProfile \
    > "$OUT/b/v3_head_${v}_eager.log" 2>&1
  echo "$v: $(grep -E 'latency' "$OUT/b/v3_head_${v}_eager.log")"
  grep -E 'FusedMLP' "$OUT/b/v3_head_${v}_eager.log" | head -6
done
find "$OUT" -size +12M -delete
echo "total ${SECONDS} s"
