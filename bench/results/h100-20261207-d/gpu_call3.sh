#!/bin/bash
# Third call: the anchor encoder with v3's widths on 900 rows alone (tests/engine/mlp_fusion.py's
# anchor_encoder_900 model): CUDA-graph medians with the cluster kernel and the tiled one (two
# alternating rounds), and each kernel's GPU time under Nsight Compute.
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
mkdir -p "$OUT/a"
OUT=$OUT/a STEPS="none" DEADLINE=200 timeout 210 bash scripts/gpu_check.sh > "$OUT/a/console.log" 2>&1
cat "$OUT/a/summary.txt"
source scripts/gpu_env.sh > /dev/null 2>&1
B=$ROOT/build-gpu
M=$ROOT/bench/results/h100-20261207-d/anchor_encoder_900.onnx
for c in 0 1; do
  S4D_CUDA_MLP_CLUSTER=$c "$B/bin/s4dexec" --onnx="$M" --device=cuda --saveEngine="$OUT/ae_$c.s4d" --iterations=1 \
    --warmUp=0 > "$OUT/build_$c.log" 2>&1 || tail -3 "$OUT/build_$c.log"
done
for round in 1 2; do
  for c in 0 1; do
    S4D_CUDA_MLP_CLUSTER=$c "$B/bin/s4dexec" --loadEngine="$OUT/ae_$c.s4d" --useCudaGraph --noDataTransfers \
      --iterations=500 --warmUp=50 > "$OUT/graph_${c}_$round.log" 2>&1
    echo "cluster=$c round $round: $(grep -Eo 'median [0-9.]+ ms' "$OUT/graph_${c}_$round.log")"
  done
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
for c in 0 1; do
  S4D_CUDA_MLP_CLUSTER=$c timeout 120 "$NCU" --clock-control none --kernel-name regex:mlp \
    --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size,launch__cluster_dim_x,smsp__warps_issue_stalled_barrier_per_warp_active.pct,smsp__warps_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warps_issue_stalled_membar_per_warp_active.pct,smsp__warps_issue_stalled_short_scoreboard_per_warp_active.pct \
    "$B/bin/s4dexec" --loadEngine="$OUT/ae_$c.s4d" --noDataTransfers --iterations=2 --warmUp=1 > "$OUT/ncu_$c.txt" 2>&1
  echo "== ncu cluster=$c"; grep -E 'mlp_|gpu__time|cluster_dim|grid_size|stalled|throughput' "$OUT/ncu_$c.txt" | head -48
done
echo "total ${SECONDS} s"
