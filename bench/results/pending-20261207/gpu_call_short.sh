#!/bin/bash
# The short form of gpu_call1.sh, for a call of about four minutes: the op library alone
# (scripts/gpu_bench_da.sh: every variant's benchmark row checked against the CPU oracle at 900
# and 1800 anchors, the op's GPU tests over every variant, memcheck of the small mix), then
# alternating rounds of the defaults and the new variants (none begins after ROUNDS_END
# seconds, default 200) at 1, 100 and 900 anchors.
cd "$(dirname "$0")/../../.."
R=$OUT
OUT=$R/d DEADLINE=${DA_END:-180} bash scripts/gpu_bench_da.sh > "$R/d_console.log" 2>&1
cat "$R/d/summary.txt"
echo "=== checks done at ${SECONDS} s"
bash bench/results/pending-20261207/da_rounds.sh \
  build-gpu-da/bin/s4d_da_bench "$R/da" $((${ROUNDS_END:-200} - SECONDS))
tar czf "$R/da.tgz" -C "$R" da d d_console.log && rm -rf "$R/da" "$R/d" "$R/d_console.log"
find "$R" -size +12M -delete
echo "total ${SECONDS} s"
