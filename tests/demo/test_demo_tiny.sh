#!/usr/bin/env bash
# The demo end to end on the tiny preset with the committed trained weights:
# export, PyTorch golden sequence over two validation sequences, engines
# through s4dexec, s4d_demo with the state carried; it must agree with
# PyTorch, output by output and in the detection metrics. Then the same
# engines against a corrupted reference must make s4d_demo exit 1, so the
# agreement check itself is tested.
# Usage: test_demo_tiny.sh <repo root> <build dir> <scratch dir>
set -euo pipefail
root=$1 build=$2 out=$3
PYTHON=${PYTHON:-/usr/bin/python3}
rm -rf "$out"
OUT="$out" BUILD="$build" PRESET=tiny DEVICE=cpu THREADS=${THREADS:-2} PYTHON="$PYTHON" \
  FRAMES=${FRAMES:-20} "$root/scripts/demo.sh"

frames=$(grep -vc '^#' "$out/golden/frames.txt")
for i in $(seq 0 $((frames - 1))); do
  f=$(printf '%s/frames/frame_%03d' "$out" "$i")
  "$PYTHON" - "$f.json" "$f.png" "${f}_cameras.png" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["boxes"] and all(len(b) == 12 for b in d["boxes"]), "JSON boxes incomplete"
for png in sys.argv[2:]:
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{png}: not a PNG"
PY
done
grep -q "agreement with the reference: ok" "$out/table.txt"
grep -q "evaluate: engine and PyTorch agree" "$out/metrics.txt"
# trained weights detect: the engine's mAP over these frames is far from zero
"$PYTHON" - "$out/metrics.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
assert m["engine"]["mAP"] > 0.3 and m["PyTorch"]["mAP"] > 0.3, m["engine"]["mAP"]
PY
echo "end to end: $frames frames agree, JSON and PNGs written, metrics agree"

# The check must fail when the reference is wrong: move one box of the
# last frame by 5 mm in the reference, change one track id, scale the logits
# by 1.001; and when the state is not carried (every frame marked a scene
# start, so the program resets the bank each time).
demo() {
  "$build/bin/s4d_demo" --plugins="$build/lib/libs4d_plugins.so" \
    --backbone="$out/engines/backbone.s4d" --head="$out/engines/head.s4d" \
    --frames="$out/bad" --threads="${THREADS:-2}" --compare >"$out/bad.log" 2>&1
}
for what in boxes track_ids classification no_state; do
  rm -rf "$out/bad" && cp -r "$out/golden" "$out/bad"
  last=$(printf '%s/bad/frame_%03d' "$out" $((frames - 1)))
  if [ "$what" = no_state ]; then
    sed -i 's/^\(frame_[0-9]*\) 0 /\1 1 /' "$out/bad/frames.txt"
  else
    "$PYTHON" - "$last" "$what" <<'PY'
import sys
import numpy as np
d, what = sys.argv[1], sys.argv[2]
a = np.load(f"{d}/{what}.npy")
if what == "boxes":
    a[0, 0, 0] += 0.005
elif what == "track_ids":
    a[0, 1] += 1000
else:
    a *= 1.001
np.save(f"{d}/{what}.npy", a)
PY
  fi
  set +e
  demo
  rc=$?
  set -e
  if [ "$rc" -ne 1 ] || ! grep -q "agreement with the reference: FAILED" "$out/bad.log"; then
    cat "$out/bad.log"
    echo "FAIL: a corrupted reference ($what) was not detected (exit $rc)"
    exit 1
  fi
  echo "corrupted reference ($what): detected, exit 1"
done

# --fp16 asks for the precision reports of fp16 engines: float32 engines are
# refused with exit 2 and a line naming the flag.
set +e
"$build/bin/s4d_demo" --plugins="$build/lib/libs4d_plugins.so" \
  --backbone="$out/engines/backbone.s4d" --head="$out/engines/head.s4d" \
  --frames="$out/golden" --threads="${THREADS:-2}" --compare --fp16 >"$out/fp16.log" 2>&1
rc=$?
set -e
if [ "$rc" -ne 2 ] || ! grep -q "s4d_demo: --fp16: " "$out/fp16.log"; then
  cat "$out/fp16.log"
  echo "FAIL: --fp16 with float32 engines: exit $rc"
  exit 1
fi
echo "--fp16 with float32 engines: refused ($(grep -m1 -- '--fp16' "$out/fp16.log"))"
