# Sourced by the GPU check on the GPU machine, whose image has no Debian
# packages: unpacks the .deb files carried in .deps/ (fetched on a Debian 12
# machine with scripts/fetch_gpu_deps.sh) into a prefix - never into / - and
# points the build and the dynamic loader at it: protobuf-c (the ONNX
# importer), OpenBLAS (the CPU backend), onnx.proto, libpng (the demo), the
# ONNX backend node tests, pkg-config.
S4D_DEPS_PREFIX=${S4D_DEPS_PREFIX:-/tmp/s4d-deps}
if [ ! -d "$S4D_DEPS_PREFIX/usr" ]; then
  for f in "$(dirname "${BASH_SOURCE[0]}")"/../.deps/*.deb; do
    dpkg -x "$f" "$S4D_DEPS_PREFIX" || echo "gpu_env: cannot unpack $f" >&2
  done
fi
_lib=$S4D_DEPS_PREFIX/usr/lib/x86_64-linux-gnu
export PKG_CONFIG="$S4D_DEPS_PREFIX/usr/bin/pkgconf"
export PKG_CONFIG_PATH="$_lib/pkgconfig:$_lib/openblas-pthread/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$S4D_DEPS_PREFIX"
export LD_LIBRARY_PATH="$_lib:$_lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$S4D_DEPS_PREFIX/usr/bin:$PATH"
S4D_CMAKE_DEPS=(-DS4D_ONNX_PROTO="$S4D_DEPS_PREFIX/usr/include/onnx/onnx.proto"
                -DS4D_ONNX_NODE_DATA="$S4D_DEPS_PREFIX/usr/share/libonnx-testdata/data/node"
                -DPKG_CONFIG_EXECUTABLE="$PKG_CONFIG")
# cuDNN and cuBLAS come with the machine's PyTorch (pip packages under site-packages/nvidia).
_nv=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]) + "/nvidia")' 2>/dev/null)
if [ -n "$_nv" ] && [ -d "$_nv/cudnn" ]; then
  export CUDNN_ROOT="$_nv/cudnn"
  for d in "$_nv"/*/lib; do LD_LIBRARY_PATH="$d:$LD_LIBRARY_PATH"; done
  export LD_LIBRARY_PATH
fi
unset _lib _nv
