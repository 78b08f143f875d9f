#!/usr/bin/env bash
# The float16 CUDA kernels on a GPU in one call: the float16 device comparisons
# (family dense16, and the float16 cases of the reduce and movement families:
# CUDA float16 against the CPU float32 reference on the same rounded values),
# the aggregation plugin's CUDA test
# (float16 included), then bench/dense/fp16_bench.py (v3 dense layers and the
# whole v3 backbone, float32 strict / TF32 / float16).
#
#   BUILD=build-gpu OUT=/some/dir bench/dense/gpu_fp16.sh
#
# BUILD must hold a build with the CUDA backend; when it has none, this
# configures and builds one there first. Everything goes to $OUT/fp16.log,
# the key lines to $OUT/summary.txt, the benchmark to $OUT/bench/fp16_bench.{json,md}.
# Each step has a time limit; the whole ends within about 5 minutes.
LOG_NAME=fp16.log OUT_DEFAULT=out/fp16
# shellcheck source=bench/dense/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"

note "fp16 GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
if [ ! -x "$BUILD/bin/s4dexec" ] || [ ! -x "$BUILD/bin/test_plugin_da_cuda" ]; then
  step configure 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
    step build 240 cmake --build "$BUILD" -j "$(nproc)" --target s4dexec s4d_plugins test_plugin_da_cuda ||
    { note "build FAILED (see fp16.log)"; exit 1; }
fi
EXEC=$BUILD/bin/s4dexec
PLUG=$BUILD/lib/libs4d_plugins.so

for fam in dense16 reduce movement; do
  limit=60; [ $fam = dense16 ] && limit=150
  step "compare_$fam" $limit "$PY" tests/cuda/device_compare.py "$fam" "$EXEC" "$PLUG" "$OUT/cases_$fam" -k _f16
  rc=$?
  note "float16 device_compare $fam: exit $rc - $(grep -E "^$fam: " "$LOG" | tail -1)"
  grep -E '^FAIL' "$LOG" | tail -20 | tee -a "$SUM" > /dev/null
done
step plugin_cuda 60 "$BUILD/bin/test_plugin_da_cuda" "$PLUG"
note "aggregation plugin CUDA test: exit $? $(grep -E 'float16' "$LOG" | tail -3 | tr '\n' ' ')"
step bench 200 "$PY" bench/dense/fp16_bench.py --s4dexec "$EXEC" --plugins "$PLUG" --out "$OUT/bench" \
  ${BACKBONE:+--backbone "$BACKBONE"}
note "fp16_bench: exit $?"
[ -f "$OUT/bench/fp16_bench.md" ] && cat "$OUT/bench/fp16_bench.md" >> "$SUM"
grep -E 'vs fp32 strict' "$LOG" | tee -a "$SUM" > /dev/null
cat "$SUM"
