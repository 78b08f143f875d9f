#!/usr/bin/env bash
# The soak test on the tiny Sparse4D head: export it (once per scratch dir),
# then run it for SOAK_FRAMES frames (default 200; `make soak` runs 2000) in
# one process with the state carried; soak.c says what is checked.
# Usage: run_soak.sh <repo root> <soak binary> <plugin library> <scratch dir>
set -euo pipefail
root=$1 soak=$2 plugins=$3 out=$4
PYTHON=${PYTHON:-/usr/bin/python3}
frames=${SOAK_FRAMES:-200}
mkdir -p "$out"
head=$out/sparse4d_tiny_head.onnx
if [ ! -s "$head" ]; then
  # The plugin node is traced through the PyTorch extension; without it (no `make python`)
  # the head is exported with the aggregation in standard ops, which still soaks the engine.
  agg=ext
  PYTHONPATH="$root/python" "$PYTHON" -c \
    "import s4d.ops, sys; sys.exit(0 if s4d.ops.extension_available() else 1)" 2>/dev/null \
    || agg=reference
  PYTHONPATH="$root/python" "$PYTHON" -m s4d.sparse4d.export --preset tiny --out "$out" \
    --aggregation "$agg" >"$out/export.log" 2>&1 || { cat "$out/export.log" >&2; exit 1; }
  [ "$agg" = reference ] && mv "$out/sparse4d_tiny_head_reference.onnx" "$head"
  echo "soak: exported the tiny head (aggregation: $agg)"
fi
# Self-check first: without the restart at each scene the frames must differ from the first
# scene's, or the comparison below would prove nothing.
if "$soak" "$head" "$plugins" 30 10 noreset >"$out/noreset.log" 2>&1; then
  cat "$out/noreset.log"
  echo "soak: the state is not carried, or the comparison misses it (noreset run passed)" >&2
  exit 1
fi
grep -q "differs from frame" "$out/noreset.log"
echo "soak: self-check ok (without state restarts the scenes differ)"
"$soak" "$head" "$plugins" "$frames" 10
