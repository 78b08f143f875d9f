#!/usr/bin/env bash
# The PyTorch operator s4d::deformable_aggregation on the GPU machine, within
# about four minutes: builds s4d._C with the CUDA kernels, times every layer
# (bench/torch_da_timing.py), then runs the operator's CPU tests and the GPU
# tests under this torch. Writes into $OUT (or ./torch_op_out): build.log,
# torch_da_timing.json and .txt, pytest.log, summary.txt.
# Usage (repository root): source scripts/gpu_env.sh; bash scripts/gpu_torch_op.sh
# (S4D_CUDA=0 dry-runs it on a machine without CUDA: the timing then exits 77.)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-./torch_op_out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
DEADLINE=$((SECONDS + ${S4D_TORCH_OP_SECONDS:-225}))
summary="$OUT/summary.txt"
: >"$summary"

row() { printf '%-28s %s\n' "$1" "$2" | tee -a "$summary"; }
left() { local s=$((DEADLINE - SECONDS)); [ "$s" -gt "$1" ] && s=$1; [ "$s" -lt 5 ] && s=5; echo "$s"; }

"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' \
  2>&1 | tee -a "$summary"

start=$SECONDS
(cd python && S4D_CUDA="${S4D_CUDA:-1}" TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}" \
   MAX_JOBS="${MAX_JOBS:-8}" timeout "$(left 150)" "$PY" setup.py -q build_ext --inplace --force) \
  >"$OUT/build.log" 2>&1
rc=$?
row "build" "exit $rc in $((SECONDS - start)) s"
if [ $rc -ne 0 ]; then
  tail -n 30 "$OUT/build.log"
  exit 1
fi

start=$SECONDS
timeout "$(left 60)" env PYTHONPATH=python "$PY" bench/torch_da_timing.py \
  --out "$OUT/torch_da_timing.json" >"$OUT/torch_da_timing.txt" 2>&1
row "torch_da_timing" "exit $? in $((SECONDS - start)) s"
cat "$OUT/torch_da_timing.txt"

start=$SECONDS
timeout "$(left 150)" env PYTHONPATH=python "$PY" -m pytest -q -rs -p no:cacheprovider \
  tests/python/test_ops_registration.py tests/python/test_ops_extension.py \
  tests/python/test_ops_errors.py tests/python/test_ops_onnx.py tests/python/gpu/test_ops_gpu.py \
  >"$OUT/pytest.log" 2>&1
rc=$?
row "pytest" "exit $rc in $((SECONDS - start)) s: $(tail -n 1 "$OUT/pytest.log")"
grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/pytest.log" | head -n 30 | tee -a "$summary"
[ $rc -eq 0 ]
