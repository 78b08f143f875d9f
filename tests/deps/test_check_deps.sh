#!/usr/bin/env bash
# make test's dependency step: scripts/check_deps.sh must pass on this build,
# and must fail, naming the package, when install-deps.sh is made to forget
# one the build used (pybind11-dev, which once broke `make` on a fresh machine,
# and protobuf-c-compiler, whose protoc-c generates the ONNX reader).
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
scripts/check_deps.sh "$BUILD" || exit 1
for pkg in pybind11-dev protobuf-c-compiler; do
  out=$(S4D_DEPS_EXCLUDE=$pkg scripts/check_deps.sh "$BUILD" 2>&1)
  if [ $? -eq 0 ] || ! grep -q "'$pkg'" <<<"$out"; then
    echo "test_check_deps: FAILED: the check did not notice $pkg missing from install-deps.sh" >&2
    echo "$out" | tail -3 >&2
    exit 1
  fi
  echo "test_check_deps: removing $pkg from the list is caught: $(grep -m1 "'$pkg'" <<<"$out")"
done
echo "test_check_deps: passed"
