#!/usr/bin/env bash
# The dense op family on a GPU in one call: the device comparison tests
# (CUDA engine against the CPU engine), the refusal checks, then the
# Sparse4Dv3 backbone (ResNet50 + FPN, 6 x 3 x 256 x 704): build with timed
# algorithm choice, reload from the engine file (stored choices), outputs
# against the CPU engine, per-layer profile, latency eager and as a CUDA graph,
# strict float32 and TF32; and PyTorch's time for the same backbone.
#
#   BUILD=build-gpu OUT=/some/dir bench/dense/gpu_dense.sh
#
# BUILD must hold a build with the CUDA backend (s4dexec, libs4d_plugins.so);
# when it has none, this configures and builds one there first. Everything
# goes to $OUT/dense.log; $OUT/summary.txt gets the key lines. Ends within
# about 5 minutes (each step has a time limit).
LOG_NAME=dense.log OUT_DEFAULT=out/dense
# shellcheck source=bench/dense/gpu_common.sh
source "$(dirname "$0")/gpu_common.sh"

note "dense GPU check $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
if [ ! -x "$BUILD/bin/s4dexec" ]; then
  step configure 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
    step build 240 cmake --build "$BUILD" -j "$(nproc)" --target s4dexec s4d_plugins ||
    { note "build FAILED (see dense.log)"; exit 1; }
fi
EXEC=$BUILD/bin/s4dexec
PLUG=$BUILD/lib/libs4d_plugins.so

# 1. every dense-family case, CUDA against the CPU engine
step compare 200 "$PY" tests/cuda/device_compare.py dense "$EXEC" "$PLUG" "$OUT/cases"
note "device_compare dense: exit $? - $(grep -E '^dense: ' "$LOG" | tail -1)"
grep -E '^FAIL' "$LOG" | head -20 | tee -a "$SUM" > /dev/null
step refusals 40 "$PY" tests/cuda/models_dense.py --refusals "$EXEC" "$PLUG" "$OUT/refusals"
note "refusals: exit $?"

# 2. the v3 backbone
V3=$OUT/v3
if [ ! -f "$V3/sparse4d_v3_backbone.onnx" ]; then
  step export 120 "$PY" bench/dense/torch_backbone.py --export "$V3/sparse4d_v3_backbone.onnx"
fi
BB=$V3/sparse4d_v3_backbone.onnx
if [ -f "$BB" ]; then
  common=(--plugins="$PLUG" --seed=3)
  step cpu_ref 120 "$EXEC" --onnx="$BB" "${common[@]}" --device=cpu --iterations=1 --warmUp=0 \
    --exportOutput="$OUT/bb_cpu"
  for mode in strict tf32; do
    flag=--noTF32; tol=(--rtol=1e-3 --atol=1e-3)
    [ $mode = tf32 ] && { flag=--tf32; tol=(--rtol=2e-2 --atol=2e-2); }
    eng=$OUT/bb_$mode.s4de
    t0=$(date +%s.%N)
    step "build_$mode" 150 "$EXEC" --onnx="$BB" "${common[@]}" --device=cuda --allowFallback $flag \
      --saveEngine="$eng" --iterations=1 --warmUp=0 --dumpLayerInfo
    note "backbone $mode: build $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s," \
      "$(grep -E '^\[build\]' "$LOG" | tail -1)"
    step "compare_$mode" 60 "$EXEC" --loadEngine="$eng" "${common[@]}" --iterations=1 --warmUp=0 \
      --compareOutputs="$OUT/bb_cpu" "${tol[@]}"
    note "  outputs vs CPU ($mode, ${tol[*]}): exit $? $(grep -E 'rel_l2|cosine|max_abs' "$LOG" | tail -1)"
    # Run to run (and graph replay against eager when every layer is on the GPU): bit for bit.
    step "export_$mode" 60 "$EXEC" --loadEngine="$eng" "${common[@]}" --iterations=1 --warmUp=0 \
      --exportOutput="$OUT/bb_gpu_$mode"
    step "determinism_$mode" 60 "$EXEC" --loadEngine="$eng" "${common[@]}" --iterations=3 --warmUp=1 \
      --useCudaGraph --compareOutputs="$OUT/bb_gpu_$mode" --rtol=0 --atol=0
    note "  bitwise equal across runs: exit $?"
    step "profile_$mode" 60 "$EXEC" --loadEngine="$eng" "${common[@]}" --iterations=10 --warmUp=3 \
      --dumpProfile
    note "  profile: $(grep -E '^  total' "$LOG" | tail -1)"
    awk '/\[profile\]/{p=1;next} p && /^  +[0-9]+ /{op=$3; t[op]+=$4; n[op]++} p && /^  total/{p=0}
         END{for (o in t) printf "    %-22s %3d layers %8.3f ms\n", o, n[o], t[o]}' \
      <(sed -n "/== profile_$mode/,/== profile_$mode: exit/p" "$LOG") | sort -k4 -nr | tee -a "$SUM" > /dev/null
    for g in "" --useCudaGraph; do
      step "latency_$mode$g" 60 "$EXEC" --loadEngine="$eng" "${common[@]}" --iterations=30 --warmUp=5 $g
      note "  latency ${g:-eager}: $(grep -E '^\[latency\]' "$LOG" | tail -1)"
    done
  done
else
  note "backbone: export failed (see dense.log)"
fi

# 3. PyTorch on the same backbone
step torch 150 "$PY" bench/dense/torch_backbone.py
grep -E '^torch backbone|^device' "$LOG" | tee -a "$SUM" > /dev/null
cat "$SUM"
