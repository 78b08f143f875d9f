"""s4d.engine: build, load and run s4d engines from Python.

    import s4d.engine as se
    engine = se.build("model.onnx", plugins=se.default_plugins())
    with engine.create_context() as ctx:
        outputs = ctx.run({"x": x})          # NumPy arrays or torch tensors

A thin binding over libs4d's public C API (include/s4d/engine.h) through
ctypes; docs/python-api.md is the guide. libs4d.so is found through
$S4D_LIB, $S4D_BUILD/lib, or the repository's build/lib.
"""
from ._lib import library_path
from ._random import random_inputs
from .compare import CompareReport, OutputComparison, compare, compare_outputs
from .engine import (Builder, Context, DeviceBuffer, Engine, Registry, TensorSpec, build,
                     default_plugins, load_plugins, plugin_creators)
from .errors import (ChecksumError, ClosedError, CudaError, DtypeError, FileError,
                     InternalError, InvalidArgumentError, LibraryNotFoundError, NoDeviceError,
                     NotFoundError, OutOfMemoryError, ParseError, PluginError, S4DError,
                     ShapeError, UnsupportedError, VersionError)

load = Engine.load

__all__ = [
    "build", "load", "Builder", "Engine", "Context", "DeviceBuffer", "TensorSpec", "Registry",
    "load_plugins", "plugin_creators", "default_plugins", "library_path", "random_inputs",
    "compare", "compare_outputs", "CompareReport", "OutputComparison",
    "S4DError", "InvalidArgumentError", "ShapeError", "DtypeError", "OutOfMemoryError",
    "UnsupportedError", "CudaError", "FileError", "ParseError", "NotFoundError", "VersionError",
    "ChecksumError", "PluginError", "NoDeviceError", "InternalError", "ClosedError",
    "LibraryNotFoundError",
]
