#!/bin/bash
# One call: the float32 attention kernel with its probabilities' tile swizzled, the mask loop
# skipped on whole unmasked tiles and the row sums kept per thread until the last tile.
#  1. the attention tests on CUDA (the family against the CPU, dead tiles, the fusion tests);
#  2. compute-sanitizer memcheck and racecheck of a small masked block with a key split;
#  3. a second build of the same tree with attention.cu as before (attention_before.cu), then
#     three alternating rounds of the v3 self-attention and temporal blocks and the v3 head as
#     CUDA graphs, the same engine files loaded by each build.
# Before the call: git show b810a36:src/backend/cuda/kernels/attention.cu \
#   > bench/results/h100-20261207-e/attention_before.cu   (the kernel before this change)
cd "$(dirname "$0")/../../.."
ROOT=$(pwd)
R=$OUT
mkdir -p "$R/a" "$R/t"
OUT=$R/a STEPS="gpu" GPU_TESTS_INCLUDE='attention' DEADLINE=220 timeout 230 bash scripts/gpu_check.sh \
  > "$R/a/console.log" 2>&1
cat "$R/a/summary.txt"
echo "=== tests done at ${SECONDS} s"
OLD=/tmp/s4d-old
rm -rf "$OLD" && mkdir -p "$OLD"
tar --exclude=./build-gpu --exclude=./out -cf - . | (cd "$OLD" && tar xf -)
cp bench/results/h100-20261207-e/attention_before.cu "$OLD/src/backend/cuda/kernels/attention.cu"
(cd "$OLD" && OUT=$R/old STEPS="none" DEADLINE=200 timeout 210 bash scripts/gpu_check.sh > /dev/null 2>&1)
grep build "$R/old/summary.txt"
echo "=== old build done at ${SECONDS} s"
source scripts/gpu_env.sh > /dev/null 2>&1
T=$R/t
PYTHONPATH=python:tests/engine python3 - "$T" <<'PY'
import os, sys
import numpy as np, onnx
from attention_fusion import chain_model
t = sys.argv[1]
rng = np.random.default_rng(7)
blocks = {"self": ((1, 8, 900, 64), (1, 8, 64, 900), (1, 8, 900, 64), None, None),
          "temporal": ((1, 8, 900, 64), (1, 8, 64, 1500), (1, 8, 1500, 64), (1, 1, 1, 1500), (0, 1400)),
          "small": ((1, 2, 200, 64), (1, 2, 64, 300), (1, 2, 300, 64), (1, 1, 1, 300), (20, 260))}
for name, (qs, ks, vs, ms, keep) in blocks.items():
    specs = []
    for n, s in (("q", qs), ("kt", ks), ("v", vs)):
        np.save(f"{t}/{name}_{n}.npy", rng.uniform(-2, 2, s).astype(np.float32))
        specs.append(f"{n}:{t}/{name}_{n}.npy")
    if ms:
        m = np.zeros(ms, bool)
        m[..., keep[0]:keep[1]] = True
        np.save(f"{t}/{name}_mask.npy", m)
        specs.append(f"mask:{t}/{name}_mask.npy")
    onnx.save(chain_model((qs, ks, vs), ms, scale=0.125), f"{t}/{name}.onnx")
    open(f"{t}/{name}.inputs", "w").write(",".join(specs))
PY
NEW=$ROOT/build-gpu/bin/s4dexec
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  timeout 120 "$SAN" --tool $tool --error-exitcode 9 "$NEW" --onnx="$T/small.onnx" --device=cuda --noTF32 \
    --loadInputs="$(cat "$T/small.inputs")" --iterations=1 --warmUp=0 > "$T/${tool}_small.log" 2>&1
  echo "sanitizer $tool small: exit $? $(grep -Eo '(ERROR|RACECHECK) SUMMARY: [0-9]+ [a-z]+' "$T/${tool}_small.log" | tail -1)"
done
for b in self temporal; do
  "$NEW" --onnx="$T/$b.onnx" --device=cuda --noTF32 --loadInputs="$(cat "$T/$b.inputs")" --saveEngine="$T/$b.s4d" \
    --iterations=1 --warmUp=0 > "$T/build_$b.log" 2>&1 || tail -3 "$T/build_$b.log"
done
PYTHONPATH=python timeout 120 python3 -m s4d.sparse4d.export --preset v3 --out "$T/v3" > "$T/export.log" 2>&1 || tail -3 "$T/export.log"
"$NEW" --onnx="$T/v3/sparse4d_v3_head.onnx" --plugins="$ROOT/build-gpu/lib/libs4d_plugins.so" --device=cuda \
  --saveEngine="$T/head.s4d" --iterations=1 --warmUp=0 > "$T/build_head.log" 2>&1 || tail -3 "$T/build_head.log"
echo "=== engines done at ${SECONDS} s"
for round in 1 2 3; do
  line="round $round:"
  for b in self temporal head; do
    for which in new old; do
      bd=$([ $which = new ] && echo "$ROOT/build-gpu" || echo "$OLD/build-gpu")
      it=$([ $b = head ] && echo 300 || echo 1000)
      "$bd/bin/s4dexec" --loadEngine="$T/$b.s4d" --plugins="$bd/lib/libs4d_plugins.so" --useCudaGraph \
        --noDataTransfers --iterations=$it --warmUp=50 > "$T/graph_${b}_${which}_$round.log" 2>&1
      line="$line $b-$which $(grep -Eo 'median [0-9.]+ ms' "$T/graph_${b}_${which}_$round.log" | cut -d' ' -f2)"
    done
  done
  echo "$line"
done
rm -f "$T"/*.npy "$T"/*.s4d; rm -rf "$T/v3"
tar czf "$R/t.tgz" -C "$T" . && rm -rf "$T"
find "$R" -size +12M -delete
echo "total ${SECONDS} s"
