#!/bin/bash
# The alternating rounds of gpu_call1.sh and gpu_call_short.sh:
#   bash da_rounds.sh BENCH DIR END
# up to three rounds of s4d_da_bench BENCH at 1, 100 and 900 anchors with the defaults, the three
# split backwards and the two prefetching forwards, each run's files in DIR/<config>_<round>;
# no round begins after END seconds from now.
B=$1 DIR=$2 END=$3
mkdir -p "$DIR"
for round in 1 2 3; do
  [ $SECONDS -gt "$END" ] && break
  for cfg in default split split_memset split_dedup pfn32 pfn16; do
    env=()
    case $cfg in
      split*) env=(S4D_DA_CUDA_BWD=items_w8_$cfg) ;;
      pfn32) env=(S4D_DA_CUDA_FWD=items_w8_c8_pfn) ;;
      pfn16) env=(S4D_DA_CUDA_FWD=items_w4_h2_pfn) ;;
    esac
    env "${env[@]}" timeout 60 "$B" --device cuda --anchors 1,100,900 --iters 300 --warmup 30 \
      --out "$DIR/${cfg}_$round" > "$DIR/${cfg}_$round.log" 2>&1
    echo "round $round $cfg: exit $?"
    grep -E '^\| cuda \| (backward|forward|forward fp16) \|' "$DIR/${cfg}_$round/bench.md" \
      2>/dev/null | awk -F'|' '{print $3, $4, $5, $6, $12, $13}'
  done
done
