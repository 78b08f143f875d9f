#!/bin/bash
# One call: the attention family and the engine's Python GPU tests, the v3 head graph with
# dead-tile skipping off / on and with the longest chain urgent, the v3 demo, then
# memcheck/racecheck on the dead-tile cases and per-case timings.
cd "$(dirname "$0")/.."
mkdir -p "$OUT/p"
OUT=$OUT/p STEPS="gpu passes demo" GPU_TESTS_INCLUDE='^cuda_ops.attention$' S4D_KEEP_CASES=1 \
  DEMO_PRESETS=v3 FOLD_PRESETS=v3 PASS_VARIANTS="on: dead0:S4D_ATTN_DEAD_TILES=0 prio:S4D_GRAPH_PRIORITY=1" \
  DEADLINE=380 timeout 390 bash scripts/gpu_check.sh > "$OUT/p/console.log" 2>&1
cat "$OUT/p/summary.txt"
echo "=== check done at ${SECONDS} s"
source scripts/gpu_env.sh > /dev/null 2>&1
B=$PWD/build-gpu; R=$OUT/p
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
C=$B/tests/cuda/cuda_attention
ls "$C" > "$R/kept_cases.txt" 2>&1
inflags() { for f in "$1"/in_*.npy; do n=$(basename "$f" .npy); printf '%s:%s,' "${n#in_}" "$f"; done; }
for c in dead_tiles_nonfinite_v dead_tiles_split_keys_4000; do
  d=$C/$c; [ -d "$d" ] || { echo "no case $c"; continue; }; flags=$(inflags "$d")
  for tool in memcheck racecheck; do
    timeout 45 "$SAN" --tool $tool --error-exitcode 9 "$B/bin/s4dexec" --onnx="$d/model.onnx" \
      --plugins="$B/lib/libs4d_plugins.so" --device=cuda --loadInputs="${flags%,}" --iterations=1 --warmUp=0 \
      > "$R/san_${tool}_$c.log" 2>&1
    echo "$tool $c: rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/san_${tool}_$c.log" | tail -1)"
  done
done
echo "=== sanitizers done at ${SECONDS} s"
for round in 1; do
  for c in v3_temporal_history_900x1500 v3_temporal_first_frame_900x1500 v3_temporal_900x1500 v3_self_900x900; do
    d=$C/$c; [ -d "$d" ] || continue; flags=$(inflags "$d"); r="$c:"
    for v in 1 0; do
      S4D_ATTN_DEAD_TILES=$v timeout 30 "$B/bin/s4dexec" --onnx="$d/model.onnx" --plugins="$B/lib/libs4d_plugins.so" \
        --device=cuda --loadInputs="${flags%,}" --useCudaGraph --noDataTransfers --iterations=300 --warmUp=30 > "$R/t.log" 2>&1
      r="$r skip=$v $(grep -Eo 'median [0-9.]+ ms' "$R/t.log" | head -1)"
    done
    echo "round $round $r"
  done
done
rm -rf "$C"
tar czf "$OUT/p.tgz" -C "$OUT" p && rm -rf "$OUT/p"
echo "total ${SECONDS} s"
