"""s4d: Sparse4Dv3 from PyTorch to a C inference engine.

Submodules load on first use so that `import s4d` stays cheap and works
without the compiled extension:
    s4d.ops       deformable aggregation (C/CUDA extension op + pure-PyTorch reference)
    s4d.sparse4d  the Sparse4Dv3 model and its ONNX export
    s4d.engine    the s4d C engine from Python (build, load, run, compare; needs libs4d.so)
"""
import importlib

__version__ = "0.1.0"
__all__ = ["ops", "sparse4d", "engine", "__version__"]


def __getattr__(name):
    if name in ("ops", "sparse4d", "engine"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 's4d' has no attribute '{name}'")
