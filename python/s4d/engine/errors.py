"""Exceptions of s4d.engine: one class per libs4d status, all S4DError.

Each carries the status (the C enum value and its name) and the library's
one-line message. Checks the binding makes before calling the library
(a tensor type it cannot bind, a closed engine) raise the class of the
status the library would have given.
"""

__all__ = [
    "S4DError", "InvalidArgumentError", "ShapeError", "DtypeError", "OutOfMemoryError",
    "UnsupportedError", "CudaError", "FileError", "ParseError", "NotFoundError",
    "VersionError", "ChecksumError", "PluginError", "NoDeviceError", "InternalError",
    "ClosedError", "LibraryNotFoundError", "error_for_status",
]


class S4DError(Exception):
    """A failing libs4d call (or a check of the binding before one).

    status: the s4d_status value (int); status_name: e.g. "S4D_ERR_SHAPE";
    message: the library's message, naming the tensor, node or file at fault.
    """
    status = 14
    status_name = "S4D_ERR_INTERNAL"

    def __init__(self, message, status=None):
        if status is not None:
            from ._lib import STATUS_NAMES
            self.status = int(status)
            self.status_name = STATUS_NAMES.get(self.status, f"status {self.status}")
        self.message = message
        super().__init__(message)

    def __str__(self):
        return f"{self.message} [{self.status_name}]"

    def __reduce__(self):
        return (type(self), (self.message, self.status))


def _status_class(name, status, status_name, bases, doc):
    return type(name, (S4DError,) + bases, {"status": status, "status_name": status_name,
                                             "__doc__": doc})


InvalidArgumentError = _status_class("InvalidArgumentError", 1, "S4D_ERR_INVALID_ARG",
                                     (ValueError,), "A bad argument (S4D_ERR_INVALID_ARG).")
ShapeError = _status_class("ShapeError", 2, "S4D_ERR_SHAPE", (ValueError,),
                           "Sizes that disagree (S4D_ERR_SHAPE).")
DtypeError = _status_class("DtypeError", 3, "S4D_ERR_DTYPE", (TypeError,),
                           "An element type not taken (S4D_ERR_DTYPE).")
OutOfMemoryError = _status_class("OutOfMemoryError", 4, "S4D_ERR_NO_MEMORY", (MemoryError,),
                                 "An allocation failed (S4D_ERR_NO_MEMORY).")
UnsupportedError = _status_class("UnsupportedError", 5, "S4D_ERR_UNSUPPORTED", (),
                                 "Valid input this build or device cannot run.")
CudaError = _status_class("CudaError", 6, "S4D_ERR_CUDA", (), "The CUDA runtime failed.")
FileError = _status_class("FileError", 7, "S4D_ERR_IO", (), "A file could not be read or "
                          "written (S4D_ERR_IO).")
ParseError = _status_class("ParseError", 8, "S4D_ERR_PARSE", (), "Malformed ONNX, engine or "
                           ".npy bytes (S4D_ERR_PARSE).")
NotFoundError = _status_class("NotFoundError", 9, "S4D_ERR_NOT_FOUND", (LookupError,),
                              "An unknown tensor, plugin or op name (S4D_ERR_NOT_FOUND).")
VersionError = _status_class("VersionError", 10, "S4D_ERR_VERSION", (),
                             "A format or ABI version this build does not read.")
ChecksumError = _status_class("ChecksumError", 11, "S4D_ERR_CHECKSUM", (),
                              "Stored and computed checksums differ.")
PluginError = _status_class("PluginError", 12, "S4D_ERR_PLUGIN", (),
                            "A plugin failed or broke its contract.")
NoDeviceError = _status_class("NoDeviceError", 13, "S4D_ERR_NO_DEVICE", (), "No usable GPU.")
InternalError = _status_class("InternalError", 14, "S4D_ERR_INTERNAL", (), "A bug in s4d.")


class ClosedError(InvalidArgumentError):
    """An engine, context or registry used after close()."""


class LibraryNotFoundError(ImportError):
    """libs4d.so could not be found or loaded (the message lists where it looked)."""


_BY_STATUS = {c.status: c for c in (InvalidArgumentError, ShapeError, DtypeError,
                                    OutOfMemoryError, UnsupportedError, CudaError, FileError,
                                    ParseError, NotFoundError, VersionError, ChecksumError,
                                    PluginError, NoDeviceError, InternalError)}


def error_for_status(status, message):
    """The exception for a failing status, with the library's message."""
    cls = _BY_STATUS.get(int(status), S4DError)
    if not message:
        from ._lib import STATUS_NAMES
        message = STATUS_NAMES.get(int(status), f"status {int(status)}")
    return cls(message, status)
