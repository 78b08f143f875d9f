#!/usr/bin/env bash
# ResNet50+FPN end to end, interleaved: s4d (whatever its Conv op runs), and
# ONNX Runtime, 1 and 2 threads, CPU time and wall clock per inference. Run
# after `make` and bench/ort/run.sh (which exports the model and installs
# ONNX Runtime):
#
#   bench/conv/e2e.sh [ROUNDS] [ITERATIONS]
#
# Extra s4d variants can be given as S4D_VARIANTS="name:ENV=VALUE ...", each
# run with that environment (for example an engine switch under test).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${1:-3}
ITER=${2:-7}
WARM=2
M=bench/ort/out/r50fpn.onnx
X=bench/ort/out/r50fpn_inputs/images.npy
EXE=build/bin/s4d_e2e_cputime
[ -x "$EXE" ] && [ -f "$M" ] || { echo "e2e.sh: need $EXE (make) and $M (bench/ort/run.sh)" >&2; exit 1; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1), $(nproc) CPUs," \
  "s4d $(git rev-parse --short HEAD), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"
for t in 1 2; do
  for r in $(seq "$ROUNDS"); do
    echo "# threads=$t round=$r load=$(cut -d' ' -f1-3 /proc/loadavg)"
    for v in ${S4D_VARIANTS:-s4d:S4D_E2E=1}; do
      echo "${v%%:*} $(env "${v#*:}" OPENBLAS_NUM_THREADS="$t" "$EXE" "$M" "$X" "$t" "$ITER" "$WARM")"
    done
    echo "onnxruntime $(node bench/conv/ort_cputime.js "$M" bench/ort/out/r50fpn_inputs "$t" "$ITER" "$WARM")"
  done
done
