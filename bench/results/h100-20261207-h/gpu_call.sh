#!/bin/bash
# One call on main at 4a6bc49:
#  1. the GPU tests the 14:33 check left unfinished or uncounted (da_cuda_large, the ONNX node
#     tests on CUDA) and the FusedMLP tests, with the ctest step's new limit;
#  2. the tiny head (its FusedMLP chains take 2 rows per block: the staged kernel) with mlp.cu as
#     now and as before 88206f7 (mlp_before.cu, 62e8f7b): one engine, two builds, three
#     alternating rounds of CUDA-graph replays.
# Before the call: git show 62e8f7b:src/backend/cuda/kernels/mlp.cu > $D/mlp_before.cu
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
D=$ROOT/bench/results/h100-20261207-h
R=$OUT
mkdir -p "$R/a" "$R/t"
OUT=$R/a STEPS="gpu" GPU_TESTS_INCLUDE='da_cuda_large|onnx_node_cuda|mlp' DEADLINE=250 timeout 260 \
  bash scripts/gpu_check.sh > "$R/a/console.log" 2>&1
cat "$R/a/summary.txt"
echo "=== tests done at ${SECONDS} s"
o=/tmp/s4d-before
rm -rf "$o" && mkdir -p "$o"
tar --exclude=./build-gpu --exclude=./out -cf - . | (cd "$o" && tar xf -)
cp "$D/mlp_before.cu" "$o/src/backend/cuda/kernels/mlp.cu"
(cd "$o" && OUT=$R/b STEPS="none" DEADLINE=200 timeout 210 bash scripts/gpu_check.sh > /dev/null 2>&1)
echo "before: $(grep build "$R/b/summary.txt")"
source scripts/gpu_env.sh > /dev/null 2>&1
T=$R/t
NEW=$ROOT/build-gpu
PYTHONPATH=python timeout 120 python3 -m s4d.sparse4d.export --preset tiny --out "$T/tiny" > "$T/export.log" 2>&1 || tail -3 "$T/export.log"
"$NEW/bin/s4dexec" --onnx="$T/tiny/sparse4d_tiny_head.onnx" --plugins="$NEW/lib/libs4d_plugins.so" --device=cuda \
  --saveEngine="$T/head.s4d" --iterations=1 --warmUp=0 > "$T/build_head.log" 2>&1 || tail -3 "$T/build_head.log"
for round in 1 2 3; do
  line="round $round:"
  for which in new before; do
    bd=$([ $which = new ] && echo "$NEW" || echo "$o/build-gpu")
    "$bd/bin/s4dexec" --loadEngine="$T/head.s4d" --plugins="$bd/lib/libs4d_plugins.so" --useCudaGraph \
      --noDataTransfers --iterations=1000 --warmUp=100 > "$T/graph_${which}_$round.log" 2>&1
    line="$line tiny-head-$which $(grep -Eo 'median [0-9.]+ ms' "$T/graph_${which}_$round.log" | cut -d' ' -f2)"
  done
  echo "$line"
done
rm -f "$T"/*.s4d; rm -rf "$T/tiny"
tar czf "$R/t.tgz" -C "$T" . && rm -rf "$T"
tar czf "$R/a.tgz" -C "$R" a && rm -rf "$R/a" "$R/b"
find "$R" -size +12M -delete
echo "total ${SECONDS} s"
