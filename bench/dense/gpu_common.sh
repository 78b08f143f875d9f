# Shared by bench/dense/gpu_*.sh (sourced): the repository root, OUT, BUILD and
# PY, a log and a summary under OUT, note() and step(). Set LOG_NAME (the log's
# file name) and OUT_DEFAULT before sourcing.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/$OUT_DEFAULT}
BUILD=${BUILD:-$ROOT/build-gpu}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
LOG=$OUT/$LOG_NAME
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
# A line for the summary (and the log).
note() { echo "$*" | tee -a "$SUM" >> "$LOG"; }
# A command with a time limit, its output in the log.
step() {
  local name=$1 limit=$2; shift 2
  echo "== $name: $*" >> "$LOG"
  timeout --kill-after=10 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  echo "== $name: exit $rc" >> "$LOG"
  return $rc
}
