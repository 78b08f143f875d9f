#!/bin/bash
# The short form of gpu_call1.sh, for a call of about four minutes: the op library alone
# (scripts/gpu_bench_da.sh: every variant's benchmark row checked against the CPU oracle at 900
# and 1800 anchors, the op's GPU tests over every variant, memcheck of the small mix), then
# alternating rounds of the defaults and the new variants (none begins after ROUNDS_END
# seconds, default 200) at 1, 100 and 900 anchors.
cd "$(dirname "$0")/../../.."
R=$OUT
mkdir -p "$R/da"
OUT=$R/d DEADLINE=${DA_END:-180} bash scripts/gpu_bench_da.sh > "$R/d_console.log" 2>&1
cat "$R/d/summary.txt"
echo "=== checks done at ${SECONDS} s"
B=build-gpu-da/bin/s4d_da_bench
for round in 1 2 3; do
  [ $SECONDS -gt "${ROUNDS_END:-200}" ] && break
  for cfg in default split split_memset split_dedup pfn32 pfn16; do
    env=()
    case $cfg in
      split*) env=(S4D_DA_CUDA_BWD=items_w8_$cfg) ;;
      pfn32) env=(S4D_DA_CUDA_FWD=items_w8_c8_pfn) ;;
      pfn16) env=(S4D_DA_CUDA_FWD=items_w4_h2_pfn) ;;
    esac
    env "${env[@]}" timeout 60 "$B" --device cuda --anchors 1,100,900 --iters 300 --warmup 30 \
      --out "$R/da/${cfg}_$round" > "$R/da/${cfg}_$round.log" 2>&1
    echo "round $round $cfg: exit $?"
    grep -E '^\| cuda \| (backward|forward|forward fp16) \|' "$R/da/${cfg}_$round/bench.md" 2>/dev/null |
      awk -F'|' '{print $3, $4, $5, $6, $12, $13}'
  done
done
tar czf "$R/da.tgz" -C "$R" da d d_console.log && rm -rf "$R/da" "$R/d" "$R/d_console.log"
find "$R" -size +12M -delete
echo "total ${SECONDS} s"
