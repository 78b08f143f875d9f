#!/usr/bin/env bash
# GPU check of the PyTorch extension, for the GPU machine (torch 2.x with
# CUDA, nvcc, pytest). Builds s4d._C with the CUDA kernels in place, then runs
# the whole Python suite (CPU tests, and tests/python/gpu against the CPU
# kernel). Writes $OUT/python_gpu.log (or ./python_gpu.log without $OUT).
# Usage: scripts/gpu_check_python.sh            (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/.."
out_dir="${OUT:-.}"
mkdir -p "$out_dir"
log="$out_dir/python_gpu.log"
PY="${PYTHON:-python3}"
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
export MAX_JOBS="${MAX_JOBS:-8}"
export PYTHONUNBUFFERED=1

{
  echo "== s4d python GPU check: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
            "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
  command -v nvcc >/dev/null && nvcc --version | tail -n 2
} 2>&1 | tee "$log"

start=$(date +%s)
export S4D_CUDA="${S4D_CUDA:-1}"  # S4D_CUDA=0 dry-runs the script on a machine without CUDA
echo "== build (S4D_CUDA=$S4D_CUDA, TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST)" | tee -a "$log"
(cd python && timeout 200 "$PY" setup.py -q build_ext --inplace --force) >>"$log" 2>&1
build_rc=$?
echo "build exit $build_rc in $(( $(date +%s) - start )) s" | tee -a "$log"
if [ $build_rc -ne 0 ]; then
  tail -n 40 "$log"
  echo "python GPU check: FAILED (build)"
  exit 1
fi
PYTHONPATH=python "$PY" -c 'import s4d.ops as o; e = o.load_extension();
print("extension built_with_cuda", e.built_with_cuda(), "cuda_available", e.cuda_available())' \
  2>&1 | tee -a "$log"

echo "== pytest tests/python" | tee -a "$log"
timeout 150 env PYTHONPATH=python "$PY" -m pytest -q -rs -p no:cacheprovider tests/python \
  >>"$log" 2>&1
test_rc=$?
grep -E "passed|failed|error|skipped" "$log" | tail -n 3
grep -E "^(FAILED|ERROR|SKIPPED)" "$log" | head -n 30
echo "== examples/op_chain on the GPU" | tee -a "$log"
timeout 60 env PYTHONPATH=python "$PY" -W ignore examples/op_chain/op_chain.py \
  --device cuda --out "${TMPDIR:-/tmp}/s4d_op_chain" 2>&1 | tee -a "$log"
example_rc=${PIPESTATUS[0]}
echo "total $(( $(date +%s) - start )) s" | tee -a "$log"
if [ $test_rc -ne 0 ]; then
  echo "python GPU check: FAILED (pytest exit $test_rc; see $log)"
  exit 1
fi
if [ $example_rc -ne 0 ]; then
  echo "python GPU check: FAILED (examples/op_chain exit $example_rc; see $log)"
  exit 1
fi
echo "python GPU check: OK ($log)"
