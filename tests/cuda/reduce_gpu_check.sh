#!/usr/bin/env bash
# The reduction family's CUDA kernels on the GPU machine, in one call of a few
# minutes:
#   1. builds the launchers (src/backend/cuda/kernels/reduce*.cu) into a shared
#      library with nvcc alone (no engine dependencies);
#   2. runs tests/cuda/reduce_kernels_gpu.py with it: correctness against
#      PyTorch references, bitwise determinism, CUDA-graph replay, and speed
#      against the PyTorch ops on Sparse4Dv3 shapes;
#   3. when $BUILD/bin/s4dexec exists (a CUDA build of the engine), the engine
#      comparison CPU vs CUDA (ctest cuda_ops.reduce).
#
#   OUT=/some/dir tests/cuda/reduce_gpu_check.sh    (OUT defaults to out/reduce_gpu_check)
#
# Everything goes to $OUT: reduce_kernels.{md,json,log}, ctest_reduce.log,
# summary.txt. Exit status 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/out/reduce_gpu_check}
BUILD=${BUILD:-$PWD/build}
PYTHON=${PYTHON:-python3}
NVCC=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$OUT/obj"
: > "$OUT/summary.txt"
status=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

t0=$SECONDS
pids=()
for f in reduce reduce_norm reduce_topk; do
  "$NVCC" -O3 -std=c++17 -arch=sm_90 -lineinfo -Xcompiler -fPIC -Isrc -Iinclude \
    -c "src/backend/cuda/kernels/$f.cu" -o "$OUT/obj/$f.o" > "$OUT/obj/$f.log" 2>&1 &
  pids+=($!)
done
cc -O2 -fPIC -Iinclude -c kernels/common/types.c -o "$OUT/obj/types.o"
built=1
for p in "${pids[@]}"; do wait "$p" || built=0; done
if [ $built = 1 ] && "$NVCC" -shared -o "$OUT/libs4d_reduce_kernels.so" "$OUT"/obj/*.o; then
  note "build: ok ($((SECONDS - t0)) s)"
else
  cat "$OUT"/obj/*.log
  note "build: FAILED"
  exit 1
fi

t0=$SECONDS
timeout 600 "$PYTHON" tests/cuda/reduce_kernels_gpu.py "$OUT/libs4d_reduce_kernels.so" "$OUT" \
  > "$OUT/reduce_kernels.log" 2>&1
rc=$?
grep -E "^FAIL|failures" "$OUT/reduce_kernels.log" | head -40 | tee -a "$OUT/summary.txt"
note "kernels vs PyTorch: exit $rc ($((SECONDS - t0)) s)"
[ $rc = 0 ] || status=1

if [ -x "$BUILD/bin/s4dexec" ]; then
  t0=$SECONDS
  (cd "$BUILD" && ctest -R '^cuda_ops\.reduce$' --output-on-failure) > "$OUT/ctest_reduce.log" 2>&1
  rc=$?
  grep -E "cases agree|^FAIL" "$BUILD/Testing/Temporary/LastTest.log" 2>/dev/null | tail -20 | tee -a "$OUT/summary.txt"
  note "engine CPU vs CUDA (ctest cuda_ops.reduce): exit $rc ($((SECONDS - t0)) s)"
  [ $rc = 0 ] || status=1
else
  note "engine CPU vs CUDA: skipped ($BUILD/bin/s4dexec not built)"
fi
cat "$OUT/reduce_kernels.md" >> "$OUT/summary.txt" 2>/dev/null
exit $status
