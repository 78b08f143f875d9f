#!/usr/bin/env bash
# Fetches (does not install) the Debian 12 packages the GPU machine lacks into
# .deps/ (git-ignored), for scripts/gpu_env.sh to unpack there. Run on a Debian
# 12 machine before a GPU check; pass .deps in the device call's carry list.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download libprotobuf-c-dev libprotobuf-c1 protobuf-c-compiler libprotoc32 libprotobuf32 \
  libopenblas-dev libopenblas0 libopenblas0-pthread libopenblas-pthread-dev libgfortran5 \
  libonnx-dev libpng-dev libpng16-16 zlib1g-dev libonnx-testdata pkgconf-bin libpkgconf3 pkgconf
ls -la
