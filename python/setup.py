"""Builds the s4d PyTorch extension (s4d._C).

The extension compiles the op library's own C and CUDA sources
(kernels/common, kernels/deformable_aggregation) so that PyTorch, the engine
and the engine plugin run one implementation. Those sources are compiled as
C11 (and CUDA C++17 with plain nvcc flags) into a static archive first:
torch's BuildExtension would compile .c files with C++ flags and .cu files
with macros that disable half-precision operators. The archive is linked
with --exclude-libs so its s4d_* symbols stay private to the extension and
never interpose with libs4d.so loaded in the same process.

    make python                                   (in place, for PYTHONPATH=python)
    pip install --no-build-isolation ./python     (into an environment with torch)

Environment: S4D_CUDA=0 forces a CPU-only build, S4D_CUDA=1 requires CUDA;
TORCH_CUDA_ARCH_LIST picks GPU architectures (default 8.0 8.6 8.7 8.9 9.0+PTX).
"""
import glob
import os
import subprocess
import sys

from setuptools import find_packages, setup

import torch
from torch.utils import cpp_extension

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KERNEL_DIRS = [os.path.join(ROOT, "kernels", "common"),
               os.path.join(ROOT, "kernels", "deformable_aggregation")]
INCLUDE_DIRS = [os.path.join(ROOT, "include"), os.path.join(ROOT, "kernels")]


def _sources(ext):
    found = []
    for d in KERNEL_DIRS:
        found += sorted(glob.glob(os.path.join(d, "*." + ext)))
    return found


def _headers():
    found = glob.glob(os.path.join(ROOT, "include", "s4d", "*.h"))
    for d in KERNEL_DIRS:
        found += glob.glob(os.path.join(d, "*.h")) + glob.glob(os.path.join(d, "*.cuh"))
    return sorted(found)


def _want_cuda():
    mode = os.environ.get("S4D_CUDA", "auto").lower()
    have = torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None and \
        os.path.exists(os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc"))
    if mode in ("0", "off", "no"):
        return False
    if mode in ("1", "on", "yes") and not have:
        sys.exit("setup.py: S4D_CUDA=1 but torch has no CUDA or nvcc was not found")
    return have and bool(_sources("cu"))


def _gencode_flags():
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST", "8.0 8.6 8.7 8.9 9.0+PTX")
    flags = []
    for item in arch_list.replace(";", " ").split():
        ptx = item.endswith("+PTX")
        num = item.replace("+PTX", "").replace(".", "")
        flags.append(f"-gencode=arch=compute_{num},code=sm_{num}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{num},code=compute_{num}")
    return flags


USE_CUDA = _want_cuda()


class BuildS4D(cpp_extension.BuildExtension):
    """Compiles the op library into an archive, then the binding as usual."""

    def build_extensions(self):
        # Runs before BuildExtension swaps in its C++/nvcc compile wrapper.
        out_dir = os.path.join(self.build_temp, "s4d_kernels")
        os.makedirs(out_dir, exist_ok=True)
        header_time = max([os.path.getmtime(h) for h in _headers()] or [0.0])
        c_flags = ["-std=c11", "-O3", "-fPIC", "-pthread", "-Wall", "-Wno-unused-parameter"]
        if USE_CUDA:
            c_flags.append("-DS4D_HAVE_CUDA=1")
        objects = []
        for src in _sources("c"):
            obj = os.path.join(out_dir, "%s_%s%s" % (
                os.path.basename(os.path.dirname(src)),
                os.path.splitext(os.path.basename(src))[0], self.compiler.obj_extension))
            if self._stale(obj, src, header_time):
                self.compiler.compile([src], output_dir=out_dir, include_dirs=INCLUDE_DIRS,
                                      extra_postargs=c_flags)
                # distutils keeps the source's directory under output_dir.
                built = self.compiler.object_filenames([src], output_dir=out_dir)[0]
                if built != obj:
                    os.replace(built, obj)
            objects.append(obj)
        if USE_CUDA:
            nvcc = os.path.join(cpp_extension.CUDA_HOME, "bin", "nvcc")
            for src in _sources("cu"):
                obj = os.path.join(out_dir, "%s_%s.o" % (os.path.basename(os.path.dirname(src)),
                                                         os.path.basename(src)))
                if self._stale(obj, src, header_time):
                    cmd = [nvcc, "-c", src, "-o", obj, "-O3", "-std=c++17",
                           "-Xcompiler", "-fPIC", "-DS4D_HAVE_CUDA=1"] + \
                        [f"-I{d}" for d in INCLUDE_DIRS] + _gencode_flags()
                    print(" ".join(cmd))
                    subprocess.check_call(cmd)
                objects.append(obj)
        self.compiler.create_static_lib(objects, "s4d_kernels", output_dir=out_dir)
        archive = self.compiler.library_filename("s4d_kernels", output_dir=out_dir)
        for ext in self.extensions:
            ext.extra_objects = [archive] + list(ext.extra_objects or [])
        super().build_extensions()

    def _stale(self, obj, src, header_time):
        if self.force or not os.path.exists(obj):
            return True
        return os.path.getmtime(obj) < max(os.path.getmtime(src), header_time)


def _extension():
    binding = [os.path.join("s4d", "csrc", "deformable_aggregation.cpp")]
    # The op library's files, so that a change there relinks the extension.
    depends = _headers() + _sources("c") + (_sources("cu") if USE_CUDA else [])
    kwargs = dict(include_dirs=INCLUDE_DIRS, depends=depends,
                  extra_link_args=["-Wl,--exclude-libs,ALL", "-pthread"])
    cxx = ["-O2"]
    if USE_CUDA:
        return cpp_extension.CUDAExtension(
            "s4d._C", binding, extra_compile_args={"cxx": cxx + ["-DS4D_WITH_CUDA=1"]},
            **kwargs)
    return cpp_extension.CppExtension("s4d._C", binding, extra_compile_args={"cxx": cxx},
                                      **kwargs)


setup(
    name="s4d",
    version="0.1.0",
    description="Sparse4Dv3 ops for PyTorch: deformable aggregation from the s4d op library",
    packages=find_packages(include=["s4d", "s4d.*"]),
    package_dir={"": "."},
    ext_modules=[_extension()],
    cmdclass={"build_ext": BuildS4D},
    python_requires=">=3.8",
    zip_safe=False,
)
