#!/usr/bin/env bash
# Installs the Debian packages s4d needs, only those missing.
# Usage: scripts/install-deps.sh [--print] [build|test|demo]   (default: test)
# --print lists the set's packages and installs nothing (scripts/check_deps.sh
# compares that list with what the build really used).
set -euo pipefail

# pybind11-dev: torch/extension.h includes pybind11, which python3-torch only Recommends.
build_pkgs=(cmake make gcc g++ pkg-config protobuf-c-compiler libprotobuf-c-dev libonnx-dev
            libopenblas-dev libpng-dev python3 python3-dev python3-numpy python3-torch libtorch-dev
            python3-onnx python3-setuptools pybind11-dev python3-scipy)
# scipy: the Hungarian matching of the training losses and of the tracking metric, which
# `make demo` prints. clang and libFuzzer build the fuzz targets that `make test` runs;
# matplotlib draws the training curve (s4d.sparse4d.train; optional there, tested here).
test_pkgs=(python3-pytest libonnx-testdata clang libfuzzer-14-dev libclang-rt-14-dev
           python3-matplotlib)

print_only=0
if [ "${1:-}" = "--print" ]; then
  print_only=1
  shift
fi
case "${1:-test}" in
  build|demo) want=("${build_pkgs[@]}") ;;
  test) want=("${build_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "install-deps: unknown set '$1' (build, test or demo)" >&2; exit 2 ;;
esac

if [ "$print_only" = 1 ]; then
  echo "${want[*]}"
  exit 0
fi
missing=()
for p in "${want[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null; then sudo=(sudo); else
  echo "install-deps: need root to install: apt-get install ${missing[*]}" >&2; exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
