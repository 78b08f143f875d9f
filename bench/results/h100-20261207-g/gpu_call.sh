#!/bin/bash
# One call: the FusedMLP kernel with its rows per thread as a template argument (88206f7) and its
# tiles of W sized in floats (329c299).
#  1. build; the FusedMLP engine tests on CUDA (bitwise across block shapes, float64), the static
#     kernel check;
#  2. two more builds of the same tree: mlp.cu as at 88206f7 (mlp_tpc.cu: the template alone) and
#     as before both (mlp_before.cu, 62e8f7b);
#  3. the v3 head engine (built once, by the first build), loaded by each build: three alternating
#     rounds of CUDA-graph replays, the eager per-layer profile, and Nsight Compute's GPU time of
#     the first anchor encoder's four FusedMLP kernels.
# Before the call: git show 62e8f7b:src/backend/cuda/kernels/mlp.cu > $D/mlp_before.cu and
#   git show 88206f7:src/backend/cuda/kernels/mlp.cu > $D/mlp_tpc.cu (D = this directory).
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
D=$ROOT/bench/results/h100-20261207-g
R=$OUT
mkdir -p "$R/a" "$R/t"
OUT=$R/a STEPS="gpu" GPU_TESTS_INCLUDE='mlp|cuda_kernels' DEADLINE=200 timeout 210 bash scripts/gpu_check.sh \
  > "$R/a/console.log" 2>&1
cat "$R/a/summary.txt"
echo "=== tests done at ${SECONDS} s"
for v in tpc before; do
  o=/tmp/s4d-$v
  rm -rf "$o" && mkdir -p "$o"
  tar --exclude=./build-gpu --exclude=./out -cf - . | (cd "$o" && tar xf -)
  cp "$D/mlp_$v.cu" "$o/src/backend/cuda/kernels/mlp.cu"
  (cd "$o" && OUT=$R/b_$v STEPS="none" DEADLINE=200 timeout 210 bash scripts/gpu_check.sh > /dev/null 2>&1)
  echo "$v: $(grep build "$R/b_$v/summary.txt")"
done
echo "=== other builds done at ${SECONDS} s"
source scripts/gpu_env.sh > /dev/null 2>&1
T=$R/t
bdir() { case $1 in new) echo "$ROOT/build-gpu" ;; *) echo "/tmp/s4d-$1/build-gpu" ;; esac; }
NEW=$ROOT/build-gpu
PYTHONPATH=python timeout 120 python3 -m s4d.sparse4d.export --preset v3 --out "$T/v3" > "$T/export.log" 2>&1 || tail -3 "$T/export.log"
"$NEW/bin/s4dexec" --onnx="$T/v3/sparse4d_v3_head.onnx" --plugins="$NEW/lib/libs4d_plugins.so" --device=cuda \
  --saveEngine="$T/head.s4d" --iterations=1 --warmUp=0 > "$T/build_head.log" 2>&1 || tail -3 "$T/build_head.log"
echo "=== engine done at ${SECONDS} s"
for round in 1 2 3; do
  line="round $round:"
  for which in new tpc before; do
    bd=$(bdir $which)
    "$bd/bin/s4dexec" --loadEngine="$T/head.s4d" --plugins="$bd/lib/libs4d_plugins.so" --useCudaGraph \
      --noDataTransfers --iterations=300 --warmUp=50 > "$T/graph_${which}_$round.log" 2>&1
    line="$line head-$which $(grep -Eo 'median [0-9.]+ ms' "$T/graph_${which}_$round.log" | cut -d' ' -f2)"
  done
  echo "$line"
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for which in new tpc before; do
  bd=$(bdir $which)
  "$bd/bin/s4dexec" --loadEngine="$T/head.s4d" --plugins="$bd/lib/libs4d_plugins.so" --noDataTransfers \
    --iterations=50 --warmUp=10 --dumpProfile > "$T/eager_$which.log" 2>&1
  echo "$which eager: $(grep -Eo 'median [0-9.]+ ms' "$T/eager_$which.log"); FusedMLP layers: $(grep -E 'FusedMLP' "$T/eager_$which.log" | awk '{s+=$(NF-2)} END {printf "%.4f ms in %d", s, NR}')"
  timeout 100 "$NCU" --clock-control none --kernel-name regex:mlp_kernel --launch-count 4 \
    --metrics gpu__time_duration.sum,launch__registers_per_thread,launch__grid_size,smsp__inst_executed.sum \
    "$bd/bin/s4dexec" --loadEngine="$T/head.s4d" --plugins="$bd/lib/libs4d_plugins.so" --noDataTransfers \
    --iterations=1 --warmUp=0 > "$T/ncu_$which.txt" 2>&1
  echo "== ncu $which"; grep -E 'mlp_kernel|gpu__time|registers|grid_size|inst_executed' "$T/ncu_$which.txt" | sed -E 's/\(s4d_cuda_mlp_desc.*//' | head -24
done
rm -f "$T"/*.s4d; rm -rf "$T/v3"
tar czf "$R/t.tgz" -C "$T" . && rm -rf "$T"
tar czf "$R/a.tgz" -C "$R" a && rm -rf "$R/a" "$R"/b_*
find "$R" -size +12M -delete
echo "total ${SECONDS} s"
