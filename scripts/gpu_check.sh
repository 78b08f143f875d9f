#!/usr/bin/env bash
# The project's GPU check: one call on the GPU machine (well inside its 10
# minutes) builds the whole engine with CUDA (the Debian packages the machine
# lacks come unpacked from .deps/, see scripts/gpu_env.sh and
# scripts/fetch_gpu_deps.sh) and the PyTorch extension, then:
#   1. the correctness steps, side by side (they do not time anything):
#      - "gpu": every GPU test (CTest label gpu): the op's CUDA kernels, the
#        engine tests on CUDA, the op families CUDA against CPU, all enabled
#        ONNX node tests on CUDA (one process), the plugin's CUDA path; then
#        s4d.engine from Python with CUDA tensors (tests/python/gpu);
#      - "sanitizer": compute-sanitizer memcheck on the tiny Sparse4Dv3 head
#        and backbone engines (build and run), racecheck on the head;
#      - "demo": the demo for tiny and v3 on CUDA (DEMO_PRESETS), each with its
#        agreement check against PyTorch;
#   2. the benchmarks, alone on the machine ("bench"): bench/frame_bench.py
#      (engine against PyTorch eager, float32 and TF32, tiny and v3:
#      frame.json; BENCH_FLAGS replaces its options "--no-compile --no-fp16
#      --iterations 100") and the aggregation op's
#      default kernels (s4d_da_bench);
#      "streams" (not in the default): each float32 engine's graph replayed on
#      one stream, 2 and 4 (the default);
#   3. steps left out by default, each for a call of its own (add them to
#      STEPS): "fp16" (the demo with guarded fp16 engines, DEMO_FP16_PRESETS),
#      "cpu" (the CPU suite as built there; CI runs it on every change),
#      "attention" and "fp16bench" (the fused attention and dense layers in
#      float32, TF32 and float16), "dabench" (every variant of the aggregation
#      kernels), "prof" (s4dexec eager and graph latency of the demo's
#      engines, the longest chain of their kernels by the eager profile, the op
#      through PyTorch) and "passes" (or "fold": each head's
#      CUDA graph with every pass, without the residual fusion and without the
#      view folding, FOLD_PRESETS; PASS_VARIANTS="name:VAR=value ..." replaces
#      those three builds, the variable set for the build and the replays;
#      FOLD_PART=backbone times the backbones instead), "dasan"
#      (compute-sanitizer memcheck of the aggregation op's small and float16 GPU tests and
#      racecheck of the small one, every kernel variant).
#
#   OUT=/some/dir scripts/gpu_check.sh        (OUT defaults to ./out/gpu_check)
#   STEPS="gpu sanitizer demo bench"          the default; add streams fp16 cpu attention
#                                             fp16bench dabench prof passes
#   GPU_TESTS_EXCLUDE=regex                   GPU tests to leave out (ctest -E)
#   GPU_TESTS_INCLUDE=regex                   only these GPU tests (ctest -R)
#   DEADLINE=540                              seconds for the whole check
#
# Writes into $OUT: summary.txt (the table printed last: every step's result
# and its seconds) and results.tgz (gpu_check.log with every step's output,
# the tests' and demos' logs, the benchmark files).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/out/gpu_check}
mkdir -p "$OUT"
LOG=$OUT/gpu_check.log
SUMMARY=$OUT/summary.txt
ROWS_DIR=$OUT/rows
BUILD=${BUILD:-$ROOT/build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
DEADLINE=${DEADLINE:-540}
STEPS=${STEPS:-"gpu sanitizer demo bench"}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
: > "$LOG"
rm -rf "$ROWS_DIR"
mkdir -p "$ROWS_DIR"
# The summary's rows: one file per group of steps (groups run side by side),
# joined in group order at the end.
GROUP=00-main
STEP_SECONDS=0

log() { echo "[$(date -u +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$LOG"; }
row() { printf '%-40s %s\n' "$1" "$2" >> "$ROWS_DIR/$GROUP"; }
want() { [[ " $STEPS " == *" $1 "* ]]; }

# A step's limit LIMIT, cut to what is left of the overall budget.
step_limit() {
  local left=$((DEADLINE - SECONDS))
  echo $(($1 < left ? $1 : left))
}

# A step with a time limit, never past the overall budget; output to the log (or a file).
step() {
  local name=$1 limit=$2; shift 2
  local left=$((DEADLINE - SECONDS))
  STEP_SKIPPED=0
  if [ "$left" -lt 10 ]; then
    log "== $name: skipped, the ${DEADLINE} s budget is spent"
    row "$name" "skipped (time budget)"
    STEP_SKIPPED=1 STEP_RC=124
    return 124
  fi
  limit=$(step_limit "$limit")
  log "== $name (limit ${limit} s): $*"
  local t0=$SECONDS rc
  timeout --kill-after=10 "$limit" "$@" >> "${STEP_LOG:-$LOG}" 2>&1
  rc=$?
  log "== $name: exit $rc after $((SECONDS - t0)) s"
  STEP_SECONDS=$((SECONDS - t0))
  STEP_RC=$rc
  return $rc
}

# The row of a step that did not succeed: none when it was skipped (step() wrote that row),
# "stopped by its time limit" when timeout ended it, else FAILED; DETAIL names the log.
failed() {
  local what=$1 detail=${2:-}
  [ "${STEP_SKIPPED:-0}" = 1 ] && return 0
  case ${STEP_RC:-1} in
    124|137) row "$what" "stopped by its time limit after $STEP_SECONDS s${detail:+ ($detail)}" ;;
    *) row "$what" "FAILED: exit ${STEP_RC:-?}${detail:+ ($detail)}" ;;
  esac
}

# "N tests passed, M failed out of T" from a ctest log; never empty. Tests that ctest's
# --stop-time ended count as failed there (Timeout): their names follow. A ctest killed by its time
# limit prints no summary: then the counts of the tests that finished, and the names of
# those still running.
ctest_counts() {
  local l skipped stopped
  l=$(grep -Eo '[0-9]+% tests passed(, [0-9]+ tests? failed)? out of [0-9]+' "$1" | tail -1)
  skipped=$(grep -c '\*\*\*Skipped' "$1" 2>/dev/null || true)
  stopped=$(grep -Eo '^[[:space:]]*[0-9]+ - [^ ]+ \(Timeout\)' "$1" 2>/dev/null | awk '{print $3}' | tr '\n' ' ')
  [ -n "$l" ] && [ -n "$stopped" ] && l="$l (timed out, by their own limit or ctest's --stop-time: ${stopped% })"
  if [ -z "$l" ]; then
    local finished passed total running
    finished=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#' "$1" 2>/dev/null || true)
    passed=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#.* Passed' "$1" 2>/dev/null || true)
    total=$(grep -Eo '^ *[0-9]+/[0-9]+ Test' "$1" 2>/dev/null | tail -1 | sed -E 's#.*/([0-9]+) Test#\1#')
    running=$(comm -23 <(grep -Eo 'Start +[0-9]+: [^ ]+' "$1" | awk '{print $3}' | sort) \
                       <(grep -Eo 'Test +#[0-9]+: [^ ]+' "$1" | awk '{print $3}' | sort) | tr '\n' ' ')
    l="no ctest summary (stopped by its limit?): ${passed:-0} passed of ${finished:-0} finished, out of ${total:-?}; still running: ${running:-none}"
  fi
  echo "$l; ${skipped:-0} skipped"
}

log "s4d GPU check in $ROOT, results in $OUT, steps: $STEPS"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv
  nvcc --version | tail -2; cmake --version | head -1; "$PY" -c 'import torch; print("torch", torch.__version__)'
  git log --oneline -1 2>/dev/null; } >> "$LOG" 2>&1

# shellcheck source=scripts/gpu_env.sh
source scripts/gpu_env.sh >> "$LOG" 2>&1
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if step configure 120 cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DS4D_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DS4D_TEST_PYTHON="$(command -v "$PY")" "${S4D_CMAKE_DEPS[@]}"; then
  grep -E "s4d: CUDA" "$LOG" | tail -2 | while read -r l; do log "$l"; done
else
  row configure FAILED
fi
# The PyTorch extension (demo, benchmarks) builds beside the engine.
rm -f "$OUT/python_build.rc"
( ( cd python && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=4 nice timeout 300 "$PY" setup.py -q build_ext --inplace ) \
    > "$OUT/python_build.log" 2>&1; echo $? > "$OUT/python_build.rc" ) &
PYBUILD=$!
if step build 300 cmake --build "$BUILD" -j "$JOBS"; then
  row build "ok ($STEP_SECONDS s)"
else
  row build FAILED
  tail -n 60 "$LOG"
fi
HAVE_ENGINE=$([ -x "$BUILD/bin/s4dexec" ] && echo 1 || echo 0)

# 1. Correctness, three groups side by side; the GPU tests start before the
# PyTorch extension is built (they do not use it).
PHASE1=$SECONDS
if want gpu && [ "$HAVE_ENGINE" = 1 ]; then
  (
    GROUP=10-gpu
    # the op families run their cases in parallel too (tests/cuda/device_compare.py)
    # ctest ends the tests still running itself 15 s before the step's limit (--stop-time), so
    # that it still prints its summary and writes every finished test's output to LastTest.log:
    # killed by the limit instead, it leaves neither.
    lim=$(step_limit 440)
    STEP_LOG=$OUT/ctest_gpu.log step ctest-gpu "$lim" env S4D_COMPARE_JOBS="${COMPARE_JOBS:-4}" \
      ctest --test-dir "$BUILD" --output-on-failure -j 4 -L gpu ${GPU_TESTS_EXCLUDE:+-E "$GPU_TESTS_EXCLUDE"} \
      ${GPU_TESTS_INCLUDE:+-R "$GPU_TESTS_INCLUDE"} --stop-time "$(date -d "+$((lim > 30 ? lim - 15 : 15)) sec" +%H:%M:%S)"
    row "ctest GPU tests" "$(ctest_counts "$OUT/ctest_gpu.log") ($STEP_SECONDS s)"
    # every test's output (ctest prints only the failures' output)
    cp "$BUILD/Testing/Temporary/LastTest.log" "$OUT/ctest_gpu_all.log" 2>/dev/null ||
      cp "$BUILD/Testing/Temporary/LastTest.log.tmp" "$OUT/ctest_gpu_all.log" 2>/dev/null || : > "$OUT/ctest_gpu_all.log"
    grep -E "node tests on cuda:" "$OUT/ctest_gpu_all.log" | tail -1 | while read -r l; do row "ONNX node tests" "$l"; done
    # the family line of each test, named by its test (the dense family runs as several tests)
    awk '/^[0-9]+\/[0-9]+ Testing: /{t=$3} /^[a-z0-9]+: [0-9]+ of [0-9]+ cases agree/{print t "\t" $0}' \
      "$OUT/ctest_gpu_all.log" | while IFS=$'\t' read -r t l; do row "op family ${t#cuda_ops.}" "$l"; done
    grep -E "^dead tiles: [0-9]+ of [0-9]+ cases" "$OUT/ctest_gpu_all.log" | while read -r l; do row "attention dead tiles" "$l"; done
    # s4d.engine from Python with CUDA tensors in and out (once the extension is built).
    while [ ! -f "$OUT/python_build.rc" ] && [ $SECONDS -lt "$DEADLINE" ]; do sleep 2; done
    if [ -f "$BUILD/lib/libs4d.so" ]; then
      if STEP_LOG=$OUT/python_engine_gpu.log step python-engine-gpu 120 env PYTHONPATH=python \
           S4D_BUILD="$BUILD" "$PY" -m pytest -q -rs -p no:cacheprovider tests/python/gpu/test_engine_gpu.py; then
        row "s4d.engine GPU tests" "$(grep -E 'passed|skipped' "$OUT/python_engine_gpu.log" | tail -1)"
      else
        failed "s4d.engine GPU tests" "$(grep -E 'failed|error' "$OUT/python_engine_gpu.log" 2>/dev/null | tail -1)"
      fi
    fi
  ) &
  G_GPU=$!
fi
wait $PYBUILD
PYOK=$(cat "$OUT/python_build.rc" 2>/dev/null || echo 1)
GROUP=01-python row "PyTorch extension build" "$([ "$PYOK" -eq 0 ] && echo ok || echo "FAILED (python_build.log)")"
if want sanitizer && [ "$HAVE_ENGINE" = 1 ] && [ "$PYOK" -eq 0 ]; then
  (
    GROUP=20-sanitizer
    TINY=$ROOT/out/gpu_tiny
    PYTHONPATH=python step export-tiny 120 "$PY" -m s4d.sparse4d.export --preset tiny --out "$TINY"
    # compute-sanitizer TOOL on the tiny GRAPH engine (build and run); the row quotes the
    # tool's summary line (SUMMARY, a grep -E pattern)
    sanitize() {
      local tool=$1 g=$2 warm=$3 summary=$4
      local log=$OUT/${tool}_tiny_$g.log
      if [ ! -f "$TINY/sparse4d_tiny_$g.onnx" ]; then
        row "compute-sanitizer $tool ($g)" "FAILED (no tiny export)"
        return
      fi
      # racecheck builds the engine under the tool too (every timed candidate): 190 s on an H100
      if STEP_LOG=$log step "$tool-$g" $([ "$tool" = racecheck ] && echo 300 || echo 200) "$SAN" --tool "$tool" --error-exitcode 9 \
           "$BUILD/bin/s4dexec" --onnx="$TINY/sparse4d_tiny_$g.onnx" \
           --plugins="$BUILD/lib/libs4d_plugins.so" --device=cuda --iterations=1 --warmUp="$warm"; then
        row "compute-sanitizer $tool ($g)" "clean: $(grep -Eo "$summary" "$log" | tail -1) ($STEP_SECONDS s)"
      else
        failed "compute-sanitizer $tool ($g)" "$(basename "$log")"
      fi
    }
    sanitize memcheck head 1 'ERROR SUMMARY: [0-9]+ errors?'
    sanitize memcheck backbone 1 'ERROR SUMMARY: [0-9]+ errors?'
    # shared-memory hazards (the fused attention's staging, the reductions)
    sanitize racecheck head 0 'RACECHECK SUMMARY: [0-9]+ hazards?'
  ) &
  G_SAN=$!
fi
if want demo && [ "$HAVE_ENGINE" = 1 ] && [ "$PYOK" -eq 0 ]; then
  (
    GROUP=30-demo
    for preset in ${DEMO_PRESETS:-tiny v3}; do
      if STEP_LOG=$OUT/demo_$preset.log step "demo-$preset" 300 env PRESET=$preset BUILD="$BUILD" \
           PYTHON="$PY" DEVICE=cuda OUT="$ROOT/out/demo/$preset" scripts/demo.sh; then
        row "demo $preset on CUDA" "agrees with PyTorch ($(grep -Eo 'worst relative L2 [^,]+' \
          "$OUT/demo_$preset.log" | head -1); $STEP_SECONDS s)"
      else
        failed "demo $preset on CUDA" "demo_$preset.log"
      fi
    done
  ) &
  G_DEMO=$!
fi
for g in ${G_GPU:-} ${G_SAN:-} ${G_DEMO:-}; do wait "$g"; done
log "correctness steps done in $((SECONDS - PHASE1)) s"

# 2. The benchmarks, alone on the GPU.
GROUP=40-bench
if want bench && [ "$HAVE_ENGINE" = 1 ]; then
  if [ "$PYOK" -eq 0 ]; then
    left=$((DEADLINE - SECONDS - ${BENCH_RESERVE:-45}))
    STEP_LOG=$OUT/frame_bench.log step frame-bench 330 env PYTHONPATH=python "$PY" bench/frame_bench.py \
      --build "$BUILD" --out "$OUT" --presets "${BENCH_PRESETS:-tiny,v3}" \
      --budget "$((left > 60 ? left - 30 : 20))" ${BENCH_FLAGS---no-compile --no-fp16 --iterations 100}
    if [ -f "$OUT/frame.json" ]; then
      row "frame benchmark" "frame.json, frame.md ($STEP_SECONDS s)"
    else
      failed "frame benchmark" frame_bench.log
    fi
    grep -E "^\| (tiny|v3) \| frame \| s4d " "$OUT/frame.md" 2>/dev/null | while read -r l; do row "frame" "$l"; done
  fi
  if [ -x "$BUILD/bin/s4d_da_bench" ]; then
    step da-bench 60 "$BUILD/bin/s4d_da_bench" --device cuda --anchors 900,1800 \
      --iters 200 --warmup 20 --out "$OUT/da_bench"
    if [ -f "$OUT/da_bench/bench.md" ]; then row "aggregation op benchmark" "ok ($STEP_SECONDS s)"
    else failed "aggregation op benchmark" gpu_check.log; fi
  fi
fi

# 3. The steps each for a call of their own.
GROUP=50-more
if want dabench && [ -x "$BUILD/bin/s4d_da_bench" ]; then
  step da-bench-all 150 "$BUILD/bin/s4d_da_bench" --variants all --device cuda --anchors 900,1800 \
    --iters 200 --warmup 20 --out "$OUT/da_bench_all"
  if [ -f "$OUT/da_bench_all/bench.md" ]; then row "aggregation op, every variant" ok
  else failed "aggregation op, every variant" gpu_check.log; fi
fi
if want dasan && [ -x "$BUILD/bin/test_da_cuda" ]; then
  # compute-sanitizer on the aggregation op's kernels, every variant: memcheck of the small mix
  # (float32) and of the float16 cases, racecheck of the small mix (the float16 kernels share
  # its shared-memory code).
  for t in "memcheck small" "memcheck fp16" "racecheck small"; do
    read -r tool what <<< "$t"
    log=$OUT/da_${tool}_$what.log
    if STEP_LOG=$log step "da-$tool-$what" 150 "$SAN" --tool "$tool" --error-exitcode 9 \
         "$BUILD/bin/test_da_cuda" "$what"; then
      row "compute-sanitizer $tool (op, $what)" "clean: $(grep -Eo '(ERROR|RACECHECK) SUMMARY: [0-9]+ [a-z]+' "$log" | tail -1) ($STEP_SECONDS s)"
    else
      failed "compute-sanitizer $tool (op, $what)" "$(basename "$log")"
    fi
  done
fi
if want cpu && [ "$HAVE_ENGINE" = 1 ]; then
  STEP_LOG=$OUT/ctest_cpu.log step ctest-cpu 300 env PYTHON="$(command -v "$PY")" \
    ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS" -LE gpu -E "fuzz|soak"
  row "ctest CPU tests" "$(ctest_counts "$OUT/ctest_cpu.log")"
fi
if want fp16 && [ "$PYOK" -eq 0 ]; then
  for preset in ${DEMO_FP16_PRESETS:-tiny v3}; do
    if STEP_LOG=$OUT/demo_${preset}_fp16.log step "demo-$preset-fp16" 240 env PRESET=$preset \
         BUILD="$BUILD" PYTHON="$PY" DEVICE=cuda PRECISION=fp16 \
         OUT="$ROOT/out/demo/${preset}_fp16" scripts/demo.sh; then
      row "demo $preset fp16 on CUDA" "$(grep -Eo 'fp16 engines with float32 PyTorch: ok \([^;]+;[^;]+' \
        "$OUT/demo_${preset}_fp16.log" | tail -1)"
    else
      failed "demo $preset fp16 on CUDA" "demo_${preset}_fp16.log"
      # A failed guarded build again with synchronous launches: the error then names the
      # layer whose kernel failed, not the next call that noticed it.
      d=$ROOT/out/demo/${preset}_fp16
      if [ -d "$d/calib/head" ] && [ ! -f "$d/engines/head.s4d" ]; then
        STEP_LOG=$OUT/demo_${preset}_fp16_head_blocking.log step "fp16-head-$preset-blocking" 120 \
          env CUDA_LAUNCH_BLOCKING=1 S4D_SYNC_LAYERS=1 "$BUILD/bin/s4dexec" --onnx="$d/onnx/sparse4d_${preset}_head.onnx" \
          --plugins="$BUILD/lib/libs4d_plugins.so" --device=cuda --fp16 --calib="$d/calib/head" \
          --verbose --iterations=1 --warmUp=0
        row "fp16 $preset head, blocking launches" "$(grep -E 'error' "$OUT/demo_${preset}_fp16_head_blocking.log" | tail -1 | cut -c1-160)"
      fi
    fi
  done
fi
if want attention && [ -f bench/attention_bench.py ] && [ "$HAVE_ENGINE" = 1 ]; then
  # The fused attention against the unfused chain, float32, TF32 and float16 (docs/cuda-backend.md).
  STEP_LOG=$OUT/attention_bench.log step attention-bench 90 "$PY" bench/attention_bench.py \
    "$BUILD/bin/s4dexec" "$BUILD/lib/libs4d_plugins.so" "$OUT/attention" --iterations 100
  if [ -f "$OUT/attention/attention_bench.md" ]; then row "attention benchmark" ok
  else failed "attention benchmark" attention_bench.log; fi
  # Again with dead key tiles computed (S4D_ATTN_DEAD_TILES=0): what skipping them saves.
  STEP_LOG=$OUT/attention_bench_noskip.log step attention-bench-noskip 90 env S4D_ATTN_DEAD_TILES=0 "$PY" \
    bench/attention_bench.py "$BUILD/bin/s4dexec" "$BUILD/lib/libs4d_plugins.so" "$OUT/attention_noskip" \
    --iterations 100
  if [ -f "$OUT/attention_noskip/attention_bench.md" ]; then row "attention benchmark, dead tiles computed" ok
  else failed "attention benchmark, dead tiles computed" attention_bench_noskip.log; fi
fi
if want fp16bench && [ -f bench/dense/fp16_bench.py ] && [ "$HAVE_ENGINE" = 1 ]; then
  # The v3 dense layers and backbone as float32 strict, TF32 and float16 (bench/dense/README).
  step fp16-bench "${FP16_BENCH_LIMIT:-150}" "$PY" bench/dense/fp16_bench.py --s4dexec "$BUILD/bin/s4dexec" \
    --plugins "$BUILD/lib/libs4d_plugins.so" --out "$OUT/fp16_bench"
  if [ -f "$OUT/fp16_bench/fp16_bench.md" ]; then row "float16 dense benchmark" ok
  else failed "float16 dense benchmark" gpu_check.log; fi
fi
if want streams && [ "$HAVE_ENGINE" = 1 ] && [ "$PYOK" -eq 0 ]; then
  # CUDA graph replay on one stream, 2 and 4 (the default), float32, for each part of tiny
  # and v3 (docs/cuda-backend.md).
  for preset in ${STREAMS_PRESETS:-tiny v3}; do
    d=$ROOT/out/streams_$preset
    PYTHONPATH=python step "export-$preset-streams" 120 "$PY" -m s4d.sparse4d.export --preset "$preset" --out "$d"
    for g in backbone head; do
      STEP_LOG=$OUT/streams_${preset}_${g}_build.log step "engine-$preset-$g" 120 "$BUILD/bin/s4dexec" \
        --onnx="$d/sparse4d_${preset}_$g.onnx" --plugins="$BUILD/lib/libs4d_plugins.so" --device=cuda \
        --saveEngine="$d/$g.s4d" --iterations=1 --warmUp=0
      r=""
      for n in 1 2 4; do
        log=$OUT/streams_${preset}_${g}_$n.log
        STEP_LOG=$log step "graph-$preset-$g-$n" 60 "$BUILD/bin/s4dexec" --loadEngine="$d/$g.s4d" \
          --plugins="$BUILD/lib/libs4d_plugins.so" --useCudaGraph --noDataTransfers --iterations=200 \
          --warmUp=20 --graphStreams=$n
        r="$r $n: $(grep -Eo 'median [0-9.]+ ms' "$log" | head -1 | cut -d' ' -f2)"
      done
      row "graph streams $preset $g" "$r"
    done
  done
fi
if { want fold || want passes; } && [ "$HAVE_ENGINE" = 1 ] && [ "$PYOK" -eq 0 ]; then
  # What the late passes buy on the GPU: each head built with every pass (on), without the
  # residual fusion (S4D_FUSE_RESIDUAL=0, src/passes/fuse_matmul.c) and without the view
  # folding (S4D_FOLD_VIEWS=0, src/passes/fold_views.c), float32, each replayed as a CUDA graph
  # in turn, three rounds. "fold" is the older name of this step.
  part=${FOLD_PART:-head}
  for preset in ${FOLD_PRESETS:-tiny v3}; do
    d=$ROOT/out/fold_$preset
    PYTHONPATH=python step "export-$preset-fold" 120 "$PY" -m s4d.sparse4d.export --preset "$preset" --out "$d"
    variants=${PASS_VARIANTS:-"on: residual0:S4D_FUSE_RESIDUAL=0 fold0:S4D_FOLD_VIEWS=0"}
    for v in $variants; do
      STEP_LOG=$OUT/fold_${preset}_${v%%:*}_build.log step "engine-$preset-${v%%:*}" 120 env ${v#*:} \
        "$BUILD/bin/s4dexec" --onnx="$d/sparse4d_${preset}_$part.onnx" \
        --plugins="$BUILD/lib/libs4d_plugins.so" --device=cuda --saveEngine="$d/${part}_${v%%:*}.s4d" --iterations=1 \
        --warmUp=0 --dumpLayerInfo
    done
    r=""
    for round in 1 2 3; do
      for v in $variants; do
        log=$OUT/fold_${preset}_${v%%:*}_$round.log
        STEP_LOG=$log step "graph-$preset-${v%%:*}-$round" 60 env ${v#*:} "$BUILD/bin/s4dexec" \
          --loadEngine="$d/${part}_${v%%:*}.s4d" --plugins="$BUILD/lib/libs4d_plugins.so" --useCudaGraph \
          --noDataTransfers --iterations=300 --warmUp=30
        r="$r ${v%%:*}: $(grep -Eo 'median [0-9.]+ ms' "$log" | head -1 | cut -d' ' -f2)"
      done
    done
    for v in $variants; do
      r="$r; ${v%%:*} layers: $(grep -Eo '^\[layers\] [0-9]+ layers, [0-9]+ views( \(no kernel\), [0-9]+ Concats in place)?' "$OUT/fold_${preset}_${v%%:*}_build.log" | head -1)"
    done
    row "late passes $preset $part" "$r"
  done
fi
if want prof; then
  # Engine latency from s4dexec (eager and CUDA graph, per-layer profile) on the demo's engines.
  for preset in tiny v3; do
    for g in backbone head; do
      eng=$ROOT/out/demo/$preset/engines/$g.s4d
      [ -f "$eng" ] || continue
      for mode in eager graph; do
        STEP_LOG=$OUT/engine_${preset}_${g}_$mode.log step "engine-$preset-$g-$mode" 60 \
          "$BUILD/bin/s4dexec" --loadEngine="$eng" --plugins="$BUILD/lib/libs4d_plugins.so" \
          --iterations=100 --warmUp=10 --noDataTransfers \
          $([ $mode = graph ] && echo --useCudaGraph || echo --dumpProfile)
        row "engine $preset $g $mode" "$(grep -Eo 'median [0-9.]+ ms' "$OUT/engine_${preset}_${g}_$mode.log" | head -1)"
      done
      # The longest chain of dependent kernels by the eager profile's times (bench/plan_paths.py).
      if [ -s "$OUT/engine_${preset}_${g}_eager.log" ]; then
        STEP_LOG=$OUT/chain_${preset}_$g.log step "chain-$preset-$g" 60 env PYTHONPATH=python S4D_BUILD="$BUILD" \
          "$PY" bench/plan_paths.py "$eng" --plugins="$BUILD/lib/libs4d_plugins.so" \
          --profile="$OUT/engine_${preset}_${g}_eager.log" --json="$OUT/chain_${preset}_$g.json"
        row "chain $preset $g" "$(grep -Eo 'the longest chain takes [0-9.]+ ms \([0-9]+ kernels\)' "$OUT/chain_${preset}_$g.log" | head -1)"
      fi
    done
  done
  # The op through PyTorch: kernel, binding and autograd layers (issue of the L2-limit kernels).
  if [ "$PYOK" -eq 0 ] && [ -f bench/torch_da_timing.py ]; then
    STEP_LOG=$OUT/torch_da_timing.log step torch-da-timing 60 env PYTHONPATH=python "$PY" \
      bench/torch_da_timing.py --out "$OUT/torch_da_timing.json"
    if [ -f "$OUT/torch_da_timing.json" ]; then row "aggregation op through PyTorch" ok
    else failed "aggregation op through PyTorch" torch_da_timing.log; fi
  fi
fi

{
  echo "s4d GPU check, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), ${SECONDS} s, steps: $STEPS"
  for f in "$ROWS_DIR"/*; do [ -f "$f" ] && sed 's/^/  /' "$f"; done
} > "$SUMMARY"
rm -rf "$ROWS_DIR"
cat "$SUMMARY" | tee -a "$LOG"
# Everything but the summary travels back as one archive.
tar czf /tmp/s4d_results.tgz -C "$OUT" --exclude=summary.txt . 2>/dev/null
find "$OUT" -mindepth 1 ! -name summary.txt -delete
mv /tmp/s4d_results.tgz "$OUT/results.tgz"
grep -q 'FAIL\|ERRORS\|exit [1-9]\|skipped (time' "$SUMMARY" && exit 1
exit 0
