#!/usr/bin/env bash
# Records a digest of every output the CPU engine computes on a fixed set of
# inputs, so that two versions of libs4d can be compared bit for bit:
#   - every enabled ONNX node test (tests/onnx_node/enabled*.txt),
#   - the engine tests' models (tests/engine/make_models.py) on seeded inputs,
#   - the tiny Sparse4Dv3 backbone and head on the six frames of its golden
#     sequence (PyTorch's inputs, the temporal state included).
#
#   scripts/record_outputs.sh OUT_FILE       (after `make`; BUILD=build)
#
# OUT_FILE gets one line per output: "<case> <output> <FNV-1a 64 of its bytes>".
# `diff` two such files: no line may differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "${1:?usage: scripts/record_outputs.sh OUT_FILE}")
BUILD=${BUILD:-$root/build}
PYTHON=${PYTHON:-/usr/bin/python3}
NODE_DATA=${NODE_DATA:-/usr/share/libonnx-testdata/data/node}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$root"
export PYTHONPATH="$root/python"
: > "$out"

# 1. node tests
grep -hv '^\s*#' tests/onnx_node/enabled*.txt | sed 's/#.*//; s/\s//g' | grep -v '^$' | sort -u |
while read -r t; do
  S4D_NODE_DIGEST="$work/node.txt" "$BUILD/bin/run_node_test" "$NODE_DATA/$t" >/dev/null 2>&1 || true
done
sed "s|$NODE_DATA/||" "$work/node.txt" >> "$out"

# Digest of every .npy an s4dexec run exported: "<case> <file> <fnv>".
digest_dir() {
  "$PYTHON" - "$1" "$2" >> "$out" <<'PY'
import os, sys
case, d = sys.argv[1], sys.argv[2]
def fnv(b):
    h = 0xcbf29ce484222325
    for x in b:
        h = ((h ^ x) * 0x100000001b3) & 0xffffffffffffffff
    return h
import numpy as np
for f in sorted(os.listdir(d)):
    a = np.load(os.path.join(d, f))
    print(f"{case} {f} {fnv(np.ascontiguousarray(a).tobytes()):016x}")
PY
}

# 2. engine-test models on seeded inputs (s4dexec draws them from --seed)
"$PYTHON" tests/engine/make_models.py "$work/models" >/dev/null
for m in "$work"/models/*.onnx; do
  name=$(basename "$m" .onnx)
  if "$BUILD/bin/s4dexec" --onnx="$m" --plugins="$BUILD/lib/libs4d_plugins.so" --seed=7 \
       --iterations=1 --warmUp=0 --threads=2 --exportOutput="$work/e_$name" >/dev/null 2>&1; then
    digest_dir "engine:$name" "$work/e_$name"
  else
    echo "engine:$name build-or-run-failed" >> "$out"
  fi
done

# 3. the tiny Sparse4Dv3 on its golden frames
"$PYTHON" -m s4d.sparse4d.export --preset tiny --out "$work/tiny" >/dev/null
"$PYTHON" -m s4d.sparse4d.golden --preset tiny --frames 6 --no-export --out "$work/golden" >/dev/null
"$PYTHON" examples/demo/frames_from_manifest.py "$work/golden" >/dev/null
for g in backbone head; do
  "$BUILD/bin/s4dexec" --onnx="$work/tiny/sparse4d_tiny_$g.onnx" \
    --plugins="$BUILD/lib/libs4d_plugins.so" --saveEngine="$work/$g.s4de" --iterations=1 \
    --warmUp=0 >/dev/null
done
for fr in "$work"/golden/frame_*/; do
  f=$(basename "$fr")
  for g in backbone head; do
    ins=$("$PYTHON" - "$work/tiny/sparse4d_tiny_$g.onnx" "$fr" <<'PY'
import onnx, sys, os
m = onnx.load(sys.argv[1], load_external_data=False)
init = {i.name for i in m.graph.initializer}
print(",".join(f"{i.name}:{os.path.join(sys.argv[2], i.name + '.npy')}"
               for i in m.graph.input if i.name not in init))
PY
)
    "$BUILD/bin/s4dexec" --loadEngine="$work/$g.s4de" --plugins="$BUILD/lib/libs4d_plugins.so" \
      --loadInputs="$ins" --iterations=1 --warmUp=0 --threads=2 --exportOutput="$work/o_${f}_$g" >/dev/null
    digest_dir "tiny:$f:$g" "$work/o_${f}_$g"
  done
done
echo "record_outputs: $(wc -l < "$out") outputs in $out"
