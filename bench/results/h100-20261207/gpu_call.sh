#!/bin/bash
# One call: the attention families (every case, the dead-tile bits test), the attention benchmark
# with dead tiles skipped and computed (float32, TF32, float16), then memcheck / racecheck of the
# tensor-core kernels on dead-tile cases.
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/p"
OUT=$OUT/p STEPS="gpu attention" GPU_TESTS_INCLUDE='^cuda_ops\.attention' S4D_KEEP_CASES=1 \
  DEADLINE=180 timeout 190 bash scripts/gpu_check.sh > "$OUT/p/console.log" 2>&1
cat "$OUT/p/summary.txt"
echo "=== check done at ${SECONDS} s"
source scripts/gpu_env.sh > /dev/null 2>&1
B=$PWD/build-gpu; R=$OUT/p
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
C=$B/tests/cuda/cuda_attention
inflags() { for f in "$1"/in_*.npy; do n=$(basename "$f" .npy); printf '%s:%s,' "${n#in_}" "$f"; done; }
for c in dead_tiles_nonfinite_v_dv7_f16 dead_tiles_nonfinite_v_tf32; do
  d=$C/$c; [ -d "$d" ] || { echo "no case $c"; continue; }; flags=$(inflags "$d")
  extra=""; case $c in *_tf32) extra=--tf32;; esac
  tools=memcheck; case $c in *nonfinite*) tools="memcheck racecheck";; esac
  for tool in $tools; do
    [ $SECONDS -lt 235 ] || { echo "$tool $c: skipped (time)"; continue; }
    timeout 25 "$SAN" --tool $tool --error-exitcode 9 "$B/bin/s4dexec" --onnx="$d/model.onnx" $extra \
      --plugins="$B/lib/libs4d_plugins.so" --device=cuda --loadInputs="${flags%,}" --iterations=1 --warmUp=0 \
      > "$R/san_${tool}_$c.log" 2>&1
    echo "$tool $c: rc $? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$R/san_${tool}_$c.log" | tail -1)"
  done
done
echo "=== sanitizers done at ${SECONDS} s"
rm -rf "$C"
tar czf "$OUT/p.tgz" -C "$OUT" p && rm -rf "$OUT/p"
echo "total ${SECONDS} s"
