#!/usr/bin/env bash
# The pointwise fusion (s4d::FusedPointwise) on the GPU machine, in one call of a few minutes:
#   1. configures and builds s4dexec, the plugins and the element-wise host test with CUDA (deps
#      as scripts/gpu_check.sh);
#   2. ctest: cuda_ops.pointwise (the fused chains on CUDA against the CPU engine, float32 and
#      float16, v3/tiny shapes, a grid-stride case), cuda_engine.pointwise_fusion (on CUDA: the
#      layer list shows FusedPointwise, fused equals unfused bit for bit, float64 reference),
#      cuda_ops.elementwise (the one-op kernels, whose device functions moved to
#      elementwise_ops.cuh) and cuda_ops_host.elementwise.* (host build of the kernels);
#   3. the Sparse4Dv3 heads (tiny, v3; the PyTorch extension built meanwhile, then exported with
#      s4d.sparse4d.export, random weights): layer
#      counts and s4dexec latency on CUDA (--useCudaGraph --noDataTransfers, 200 iterations) with
#      the fusion on and off (S4D_FUSE_POINTWISE=0), and the outputs of both compared.
#
#   OUT=/some/dir bench/pointwise_gpu_check.sh      (OUT defaults to out/pointwise_gpu_check)
#
# Writes $OUT/summary.txt and the logs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/pointwise_gpu_check}
BUILD=${BUILD:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
JOBS=$(nproc 2>/dev/null || echo 4)
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
: > "$OUT/summary.txt"
status=0
note() { echo "$*" | tee -a "$OUT/summary.txt"; }

# shellcheck source=scripts/gpu_env.sh
source scripts/gpu_env.sh > "$OUT/env.log" 2>&1
# The PyTorch extension (for the heads' export), meanwhile.
( cd python && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 nice timeout 200 "$PY" setup.py -q build_ext --inplace ) \
  > "$OUT/python_build.log" 2>&1 &
PYBUILD=$!
t0=$SECONDS
if cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DS4D_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DS4D_TEST_PYTHON="$(command -v "$PY")" "${S4D_CMAKE_DEPS[@]}" > "$OUT/configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" --target s4dexec s4d_plugins test_elementwise_host \
     > "$OUT/build.log" 2>&1; then
  note "build: ok ($((SECONDS - t0)) s)"
else
  tail -30 "$OUT/configure.log" "$OUT/build.log"
  note "build: FAILED"
  exit 1
fi
EXE=$BUILD/bin/s4dexec
PLUG=$BUILD/lib/libs4d_plugins.so

t0=$SECONDS
(cd "$BUILD" && timeout 420 ctest --output-on-failure \
   -R '^(cuda_ops\.pointwise|cuda_engine\.pointwise_fusion|cuda_ops\.elementwise|cuda_ops_host\.elementwise\..*)$') \
  > "$OUT/ctest.log" 2>&1
rc=$?
grep -E "^(ok|FAIL)|cases agree|cases pass|checks pass|Test +#|tests passed" "$OUT/ctest.log" | tail -120 \
  >> "$OUT/summary.txt"
note "ctest pointwise + elementwise on CUDA: exit $rc ($((SECONDS - t0)) s)"
[ $rc = 0 ] || status=1

# The heads: exported here (no ONNX files travel with the repository); without the extension,
# with the aggregation as ONNX ops (a different graph around the aggregation, said in the log).
wait $PYBUILD
PYOK=$?
AGG=ext
[ $PYOK = 0 ] || AGG=reference
note "PyTorch extension build: exit $PYOK; heads exported with --aggregation $AGG"
for preset in tiny v3; do
  d=$OUT/$preset
  mkdir -p "$d"
  t0=$SECONDS
  if ! PYTHONPATH=python timeout 150 "$PY" -m s4d.sparse4d.export --preset "$preset" --out "$d/onnx" --aggregation $AGG \
       > "$d/export.log" 2>&1; then
    note "$preset head: export failed (see $preset/export.log): $(tail -1 "$d/export.log")"
    continue
  fi
  head=$(ls "$d"/onnx/sparse4d_${preset}_head*.onnx | head -1)
  for mode in fused unfused; do
    fuse=1
    [ $mode = unfused ] && fuse=0
    S4D_FUSE_POINTWISE=$fuse timeout 120 "$EXE" --onnx="$head" --plugins="$PLUG" --device=cuda \
      --useCudaGraph --noDataTransfers --iterations=200 --warmUp=20 --dumpLayerInfo \
      --exportOutput="$d/out_$mode" > "$d/$mode.log" 2>&1
    rc=$?
    layers=$(grep -E "^\[layers\]" "$d/$mode.log" | head -1)
    lat=$(grep -iE "latency|median" "$d/$mode.log" | tail -2 | tr '\n' ' ')
    npw=$(awk '$1 ~ /^[0-9]+$/ && $3 == "FusedPointwise"' "$d/$mode.log" | wc -l)
    note "$preset head $mode: exit $rc; $layers; FusedPointwise $npw; $lat"
    [ $rc = 0 ] || status=1
  done
  cmp_out=$("$PY" - "$d/out_fused" "$d/out_unfused" <<'EOF'
import os, sys
import numpy as np
a, b = sys.argv[1:3]
worst, same = 0.0, 0
names = sorted(f for f in os.listdir(a) if f.endswith(".npy"))
for f in names:
    x, y = np.load(os.path.join(a, f)), np.load(os.path.join(b, f))
    same += x.tobytes() == y.tobytes()
    if x.dtype.kind == "f":
        worst = max(worst, float(np.nanmax(np.abs(x.astype(np.float64) - y))) if x.size else 0.0)
print(f"{same} of {len(names)} outputs equal bit for bit; max abs difference {worst:.3g}")
EOF
)
  note "$preset head fused vs unfused on CUDA: $cmp_out"
done
exit $status
