#!/bin/bash
# Call 1: the aggregation op's new variants, not yet run anywhere: the split backward
# (items_w8_split: the location and weight gradients, each block clearing its share of
# grad_features first, then the scatter alone; items_w8_split_memset: the same two kernels after
# a memset; items_w8_split_dedup: the scatter one atomic row per distinct row) and the forwards
# that prefetch the next item's corner rows (items_w8_c8_pfn float32, items_w4_h2_pfn float16).
#  1. build; the op's GPU tests (every variant against the CPU oracle, each subset of the
#     gradients, bitwise repeatability, graph replay), the plugin's CUDA tests, the static kernel
#     check; compute-sanitizer on the op (every variant); every variant's benchmark row;
#  2. the PyTorch op's GPU tests (autograd, CUDA graphs, streams) twice, each time with two of the
#     new variants as the defaults (S4D_DA_CUDA_BWD, S4D_DA_CUDA_FWD);
#  3. the op's benchmark, up to three alternating rounds (none begins after ROUNDS_END seconds,
#     default 420): the defaults, the three split backwards, the two prefetching forwards
#     (S4D_DA_CUDA_FWD names the variant for every dtype: the float32 rows of pfn32 and the
#     float16 rows of pfn16 are the ones to read).
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
R=$OUT
mkdir -p "$R/a"
CHECKS_END=${CHECKS_END:-330}
OUT=$R/a STEPS="${CHECK_STEPS:-gpu dabench dasan}" \
  GPU_TESTS_INCLUDE="${CHECK_TESTS:-da_cuda|plugin|cuda_kernels}" DEADLINE=$CHECKS_END \
  timeout $((CHECKS_END + 10)) bash scripts/gpu_check.sh > "$R/a/console.log" 2>&1
cat "$R/a/summary.txt"
grep -E '^\| cuda \|.*(atomic|split|pfn|items_w8_c8 |items_w4_h2 )' \
  "$R/a/da_bench_all/bench.md" 2>/dev/null | awk -F'|' '{print $3, $4, $5, $6, $10, $11, $12, $13}'
echo "=== checks done at ${SECONDS} s"
source scripts/gpu_env.sh > /dev/null 2>&1
# The PyTorch op's GPU tests (autograd, graphs, streams) with the new variants as the defaults.
pairs="items_w8_split:items_w8_c8_pfn items_w8_split_dedup:items_w4_h2_pfn"
[ "${PYTEST:-1}" = 1 ] || pairs=""
for v in $pairs; do
  bwd=${v%%:*} fwd=${v#*:}
  S4D_DA_CUDA_BWD=$bwd S4D_DA_CUDA_FWD=$fwd PYTHONPATH=python timeout 100 python3 -m pytest -q \
    -x -p no:cacheprovider tests/python/gpu/test_ops_gpu.py \
    -k "not compile and not export and not onnx" > "$R/a/pytest_$bwd.log" 2>&1
  rc=$?
  echo "python op GPU tests, bwd $bwd, fwd $fwd: exit $rc" \
    "$(grep -E 'passed|failed' "$R/a/pytest_$bwd.log" | tail -1)"
done
bash bench/results/pending-20261207/da_rounds.sh \
  "$ROOT/build-gpu/bin/s4d_da_bench" "$R/da" $((${ROUNDS_END:-420} - SECONDS))
tar czf "$R/da.tgz" -C "$R" da && rm -rf "$R/da"
tar czf "$R/a.tgz" -C "$R" a && rm -rf "$R/a"
find "$R" -size +12M -delete
echo "total ${SECONDS} s"
