#!/bin/bash
# Call 1 (main at 78af3fc plus the skinny product kernel, uncommitted: src/backend/cuda/kernels/sgemm.cu).
#  a. the build; the dense family on CUDA (default choices, every product on the own kernel,
#     the 1x1 convolutions as products), the CUDA engine tests; then each head (v3, tiny) built
#     with the skinny kernel (on) and without it (skinny0: S4D_GEMM_SKINNY=0, the choices as
#     before), replayed as CUDA graphs in three alternating rounds;
#  b. the frame benchmark (float32, TF32, guarded float16 and PyTorch eager; tiny and v3;
#     accuracy over the sequence) and the aggregation op's default kernels, alone on the
#     machine; with S4D_GEMM_SKINNY=0 if a. failed.
cd "$(dirname "$0")/../../.."
mkdir -p "$OUT/a" "$OUT/b"
OUT=$OUT/a STEPS="gpu passes" GPU_TESTS_INCLUDE='cuda_ops.dense|cuda_engine|engine_cuda' FOLD_PRESETS="v3 tiny" \
  PASS_VARIANTS="on: skinny0:S4D_GEMM_SKINNY=0" DEADLINE=290 timeout 300 bash scripts/gpu_check.sh \
  > "$OUT/a/console.log" 2>&1
cat "$OUT/a/summary.txt"
for f in "$OUT"/a/fold_*_build.log; do
  echo "$(basename "$f"): $(grep -c 'one warp per row' "$f") products on the skinny kernel"
done
grep -h 'one warp per row' "$OUT"/a/fold_v3_on_build.log | sed -E 's/^ *[0-9]+ //; s/ +FusedMatMul|MatMul +/ /' | cut -c1-200 | head -30
echo "=== a done at ${SECONDS} s"
if grep -qE 'FAILED|[1-9][0-9]* tests? failed|[0-9]+% tests passed, [1-9]' "$OUT/a/summary.txt"; then
  echo "a. failed: the benchmark runs with S4D_GEMM_SKINNY=0"
  export S4D_GEMM_SKINNY=0
fi
OUT=$OUT/b STEPS="bench" BENCH_FLAGS="--no-compile --iterations 100" DEADLINE=$((570 - SECONDS)) \
  timeout $((575 - SECONDS)) bash scripts/gpu_check.sh > "$OUT/b/console.log" 2>&1
cat "$OUT/b/summary.txt"
find "$OUT" -size +12M -delete
echo "total ${SECONDS} s"
