#!/usr/bin/env bash
# Runs one libFuzzer target for a while over the committed corpus.
# usage: tests/fuzz/run_fuzz.sh TARGET SECONDS BUILD_DIR [libFuzzer flags...]
#   TARGET: onnx, engine or npy; BUILD_DIR: a build with -DS4D_FUZZ=ON.
# New inputs go to BUILD_DIR/fuzz/TARGET/corpus (the committed corpus is only
# read); a finding is written to BUILD_DIR/fuzz/TARGET/ and ends the run with
# exit status 1. Every sanitizer report is fatal, except the defects listed in
# pending.supp. Environment: FUZZ_JOBS (parallel fuzzing processes, default 1);
# FUZZ_ENGINE_RUN=0 stops the engine target from running the engines it loads
# (default 1: the loader verifies every layer, so whatever loads must run).
set -euo pipefail
target=$1 seconds=$2 build=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
bin=$build/bin/s4d_fuzz_$target
[ -x "$bin" ] || { echo "run_fuzz: $bin is missing: build with -DS4D_FUZZ=ON (make fuzz)" >&2; exit 2; }
work=$build/fuzz/$target
mkdir -p "$work/corpus"
args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536
      -print_final_stats=1 -artifact_prefix="$work/")
[ "$target" = onnx ] && args+=(-dict="$here/onnx.dict")
jobs=${FUZZ_JOBS:-1}
[ "$jobs" -gt 1 ] && args+=(-fork="$jobs")
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/pending.supp"
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
if [ "${FUZZ_ENGINE_RUN:-1}" = 1 ]; then unset S4D_FUZZ_ENGINE_NO_RUN; else export S4D_FUZZ_ENGINE_NO_RUN=1; fi
log=$work/last_run.log
echo "fuzz $target: ${seconds} s, corpus $here/corpus/$target, log $log"
if ! "$bin" "${args[@]}" "$@" "$work/corpus" "$here/corpus/$target" >"$log" 2>&1; then
  grep -E "ERROR|runtime error|contract broken|SUMMARY|Test unit written" "$log" | head -n 8 >&2
  echo "fuzz $target: FINDING (full log: $log); keep the input as tests/fuzz/corpus/$target/regress-<what>" >&2
  exit 1
fi
# libFuzzer ends with "Done N runs in S second(s)"; with -fork, the last "#N: ..." line counts.
grep -E "^Done [0-9]+ runs" "$log" | sed "s/^/fuzz $target: /" ||
  grep -E "^#[0-9]+:" "$log" | tail -n 1 | sed "s/^/fuzz $target: /"
