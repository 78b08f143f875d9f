"""Loads the compiled extension s4d._C on first use."""
import importlib

_EXT = None
_ERROR = None


class ExtensionNotBuiltError(ImportError):
    """The s4d._C extension is missing or failed to load."""


def load_extension():
    """Returns the s4d._C module, or raises ExtensionNotBuiltError saying how to build it."""
    global _EXT, _ERROR
    if _EXT is not None:
        return _EXT
    try:
        _EXT = importlib.import_module("s4d._C")
    except ImportError as exc:
        _ERROR = exc
        raise ExtensionNotBuiltError(
            "the s4d PyTorch extension (s4d._C) is not available: "
            f"{exc}. Build it with `make python` at the repository root (or "
            "`pip install --no-build-isolation ./python`), or use "
            "s4d.ops.deformable_aggregation_reference, which needs no extension.") from exc
    return _EXT


def extension_available():
    """True when s4d._C imports."""
    try:
        load_extension()
    except ExtensionNotBuiltError:
        return False
    return True
