#!/bin/bash
# Fourth call: Nsight Compute's full sections for the anchor encoder's four FusedMLP kernels
# (anchor_encoder_900 model), the tiled kernel and the cluster kernel, one text file each, packed.
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
mkdir -p "$OUT/a" "$OUT/n"
OUT=$OUT/a STEPS="none" DEADLINE=200 timeout 210 bash scripts/gpu_check.sh > "$OUT/a/console.log" 2>&1
grep build "$OUT/a/summary.txt"
source scripts/gpu_env.sh > /dev/null 2>&1
B=$ROOT/build-gpu
M=$ROOT/bench/results/h100-20261207-d/anchor_encoder_900.onnx
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for c in 0 1; do
  S4D_CUDA_MLP_CLUSTER=$c "$B/bin/s4dexec" --onnx="$M" --device=cuda --saveEngine="$OUT/n/ae_$c.s4d" --iterations=1 \
    --warmUp=0 > "$OUT/n/build_$c.log" 2>&1 || tail -3 "$OUT/n/build_$c.log"
  S4D_CUDA_MLP_CLUSTER=$c timeout 150 "$NCU" --clock-control none --set full --kernel-name regex:mlp --launch-count 4 \
    "$B/bin/s4dexec" --loadEngine="$OUT/n/ae_$c.s4d" --noDataTransfers --iterations=1 --warmUp=0 \
    > "$OUT/n/ncu_full_cluster$c.txt" 2>&1
  echo "== cluster=$c: $(grep -c 'Duration' "$OUT/n/ncu_full_cluster$c.txt") kernels"
  grep -E '^  void|Duration|Eligible Warps|No Eligible|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Executed Ipc A|Registers Per|Dynamic Shared|Static Shared|L1/TEX Hit|L2 Hit|stall' "$OUT/n/ncu_full_cluster$c.txt" | head -70
done
tar czf "$OUT/ncu.tgz" -C "$OUT/n" . && rm -rf "$OUT/n"
echo "total ${SECONDS} s"
