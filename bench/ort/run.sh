#!/usr/bin/env bash
# The CPU comparison of issue 5: s4d's CPU backend against ONNX Runtime (CPU,
# npm package onnxruntime-node) on the same ONNX files, inputs and machine.
# A benchmark, not a test. Usage, from the repository root after `make`:
#
#   bench/ort/run.sh [--iterations N] [--warmup N] [--presets tiny,v3] [--skip-backbone]
#
# Writes bench/ort/results/<UTC date>_<host>.md (date, machine, commands,
# median latencies and the s4d / ONNX Runtime ratio). Models and inputs go
# to bench/ort/out/ (re-used when present). Each configuration runs single-
# threaded and with every core; OpenBLAS's own threads follow the same count.
set -euo pipefail
cd "$(dirname "$0")/../.."
ITER=10
WARM=2
PRESETS=tiny,v3
SKIP_BACKBONE=
while [ $# -gt 0 ]; do
  case "$1" in
    --iterations) ITER=$2; shift 2 ;;
    --warmup) WARM=$2; shift 2 ;;
    --presets) PRESETS=$2; shift 2 ;;
    --skip-backbone) SKIP_BACKBONE=--skip-backbone; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
PY=/usr/bin/python3
OUT=bench/ort/out
EXEC=build/bin/s4dexec
PLUGINS=build/lib/libs4d_plugins.so
[ -x "$EXEC" ] || { echo "run.sh: $EXEC is missing: run make first" >&2; exit 1; }
command -v node >/dev/null || { echo "run.sh: node (Node.js) is needed: apt-get install nodejs npm" >&2; exit 1; }
if [ ! -d bench/ort/node_modules/onnxruntime-node ]; then
  # --ignore-scripts: the package's install script only fetches the CUDA
  # build from GitHub; the CPU library ships inside the npm package.
  (cd bench/ort && npm install --no-audit --no-fund --ignore-scripts >/dev/null)
fi
# OPENBLAS_CORETYPE pins OpenBLAS's kernels (Haswell = AVX2 only); left
# unset, OpenBLAS picks the best for the CPU. The results record it.
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
  echo "run.sh: note: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE pins OpenBLAS's kernels" >&2
fi
mkdir -p "$OUT" bench/ort/results
need_export=
[ -n "$SKIP_BACKBONE" ] || [ -f "$OUT/r50fpn.onnx" ] || need_export=1
for p in ${PRESETS//,/ }; do [ -f "$OUT/sparse4d_${p}_head_reference_ort.onnx" ] || need_export=1; done
if [ -n "$need_export" ]; then
  PYTHONPATH=python $PY bench/ort/export_models.py --out "$OUT" --presets "$PRESETS" $SKIP_BACKBONE
fi

ALL=$(nproc)
stamp=$(date -u +%Y-%m-%dT%H%MZ)
host=$(hostname -s 2>/dev/null || echo host)
res=bench/ort/results/${stamp}_${host}.md
cpu=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)

median_s4d() { # model inputs-dir threads [plugin]
  local model=$1 dir=$2 t=$3 plugin=${4:-} ins="" f
  for f in "$dir"/*.npy; do ins="${ins:+$ins,}$(basename "$f" .npy):$f"; done
  local extra=()
  [ -n "$plugin" ] && extra+=(--plugins="$plugin")
  OPENBLAS_NUM_THREADS=$t "$EXEC" --onnx="$model" "${extra[@]}" --loadInputs="$ins" --threads="$t" \
    --iterations="$ITER" --warmUp="$WARM" 2>&1 | sed -n 's/.*median \([0-9.]*\) ms.*/\1/p' | head -1
}
median_ort() { # model inputs-dir threads
  node bench/ort/ort_bench.js "$1" "$2" "$3" "$ITER" "$WARM" | sed -n 's/.*"median_ms":\([0-9.]*\).*/\1/p'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }'; }

{
  echo "# s4d CPU backend vs ONNX Runtime"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: $cpu, $ALL logical CPUs, $mem; $(uname -sr)"
  echo "- ONNX Runtime: onnxruntime-node $(node -e "console.log(require('./bench/ort/node_modules/onnxruntime-node').env.versions.common)") (CPU EP, graph optimisation 'all', sequential)"
  echo "- s4d: $(git rev-parse --short HEAD) ($EXEC); OpenBLAS threads = engine threads; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
  echo "- command: bench/ort/run.sh --iterations $ITER --warmup $WARM --presets $PRESETS $SKIP_BACKBONE"
  echo "- median latency over $ITER runs after $WARM warm-up runs; ratio = s4d / ONNX Runtime (below 1: s4d faster)"
  echo
  echo "| model | threads | ONNX Runtime ms | s4d ms | ratio |"
  echo "| --- | --- | --- | --- | --- |"
} > "$res"

row() { echo "| $1 | $2 | ${3:--} | ${4:--} | $(ratio "$4" "$3") |" | tee -a "$res"; }

for t in 1 "$ALL"; do
  if [ -z "$SKIP_BACKBONE" ]; then
    m=$OUT/r50fpn.onnx; d=$OUT/r50fpn_inputs
    row "ResNet50+FPN 1x3x256x704" "$t" "$(median_ort "$m" "$d" "$t")" "$(median_s4d "$m" "$d" "$t")"
  fi
  for p in ${PRESETS//,/ }; do
    # The *_ort copies differ only in bool Where written as And/Or/Not (ONNX
    # Runtime has no bool Where); both runtimes run the same file.
    ref=$OUT/sparse4d_${p}_head_reference_ort.onnx; ext=$OUT/sparse4d_${p}_head_ort.onnx; d=$OUT/${p}_inputs
    o=$(median_ort "$ref" "$d" "$t")
    row "head $p, standard-op aggregation" "$t" "$o" "$(median_s4d "$ref" "$d" "$t")"
    if [ -f "$ext" ] && [ -f "$PLUGINS" ]; then
      row "head $p, s4d plugin aggregation (ORT: standard ops)" "$t" "$o" "$(median_s4d "$ext" "$d" "$t" "$PLUGINS")"
    fi
  done
done
echo "run.sh: wrote $res"
