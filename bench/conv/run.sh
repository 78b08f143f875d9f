#!/usr/bin/env bash
# Runs bench/conv's benchmark in the configurations that bench/results/
# cpu-conv-<date>/ records, after `cmake --build build --target s4d_conv_bench`:
#
#   bench/conv/run.sh [OUT_DIR] [RUNS]
#
# OUT_DIR defaults to bench/results/cpu-conv-<UTC date>. Each file starts
# with the date, machine, command and load average. A benchmark, not a test;
# on a shared machine the CPU-time tables are the ones to compare.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-bench/results/cpu-conv-$(date -u +%Y%m%d)}
RUNS=${2:-9}
BENCH=build/bin/s4d_conv_bench
[ -x "$BENCH" ] || { echo "run.sh: $BENCH is missing: cmake --build build --target s4d_conv_bench" >&2; exit 1; }
mkdir -p "$OUT"
cpu=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
header() { # file command...
  local f=$1
  shift
  {
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- machine: $cpu, $(nproc) logical CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo); $(uname -sr)"
    echo "- s4d: $(git rev-parse --short HEAD)"
    echo "- command: $*"
    echo
  } > "$f"
}
one() { # file env-and-command...
  local f=$OUT/$1
  shift
  header "$f" "$@"
  env "$@" >> "$f" 2>&1
  echo "run.sh: wrote $f" >&2
}
# As the environment sets OpenBLAS (OPENBLAS_CORETYPE is recorded by the bench).
one r50fpn_1t_cputime.md "$BENCH" --threads=1 --runs="$RUNS" --cpu-time
one r50fpn_1t_wall.md "$BENCH" --threads=1 --runs="$RUNS"
one r50fpn_2t_wall.md "$BENCH" --threads=2 --runs="$RUNS"
one r50fpn_2t_cputime.md "$BENCH" --threads=2 --runs="$RUNS" --cpu-time
one r50fpn_1t_3x3_all_algos.md "$BENCH" --threads=1 --runs="$RUNS" --cpu-time --all-algos --only=3x3
one r50fpn_1t_avx2.md "$BENCH" --threads=1 --runs="$RUNS" --cpu-time --isa=avx2
one mbv2_1t_cputime.md "$BENCH" --net=mbv2 --threads=1 --runs="$RUNS" --cpu-time
# OpenBLAS choosing its own kernels for this CPU (AVX-512 where it has them).
one r50fpn_1t_cputime_openblas_auto.md -u OPENBLAS_CORETYPE "$BENCH" --threads=1 --runs="$RUNS" --cpu-time
