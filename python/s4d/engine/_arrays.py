"""NumPy arrays and torch tensors as memory to bind: pointer, dtype, shape,
where the memory lives, and the object that keeps it alive.

torch is never imported here: a tensor is recognised only when the caller's
program has imported torch already (sys.modules), so the engine works
without torch installed.
"""
import sys
from typing import NamedTuple, Optional, Tuple

import numpy as np

from . import _lib
from .errors import DtypeError, InvalidArgumentError

# s4d_dtype codes (ONNX TensorProto.DataType values) <-> NumPy
NUMPY_BY_CODE = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16,
                 6: np.int32, 7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64,
                 12: np.uint32, 13: np.uint64}
CODE_BY_NUMPY = {np.dtype(t): c for c, t in NUMPY_BY_CODE.items()}
BFLOAT16 = 16
DTYPE_NAMES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32",
               7: "int64", 8: "string", 9: "bool", 10: "float16", 11: "float64", 12: "uint32",
               13: "uint64", 16: "bfloat16"}
CODE_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}


def torch_module():
    """torch if the program imported it, else None."""
    return sys.modules.get("torch")


def is_tensor(obj):
    torch = torch_module()
    return torch is not None and isinstance(obj, torch.Tensor)


def torch_dtype_codes(torch):
    codes = {torch.float32: 1, torch.uint8: 2, torch.int8: 3, torch.int16: 5, torch.int32: 6,
             torch.int64: 7, torch.bool: 9, torch.float16: 10, torch.float64: 11,
             torch.bfloat16: 16}
    # unsigned types beyond uint8 exist only in newer torch
    for name, code in (("uint16", 4), ("uint32", 12), ("uint64", 13)):
        if hasattr(torch, name):
            codes[getattr(torch, name)] = code
    return codes


def torch_dtype(code):
    torch = torch_module()
    if torch is None:
        import torch  # noqa: F811 - only when a caller asks for torch outputs
    for t, c in torch_dtype_codes(torch).items():
        if c == code:
            return t
    raise DtypeError(f"torch {torch.__version__} has no dtype for s4d {DTYPE_NAMES.get(code)}")


def numpy_dtype(code):
    if code in NUMPY_BY_CODE:
        return np.dtype(NUMPY_BY_CODE[code])
    if code == BFLOAT16:
        # NumPy has no bfloat16: its raw bits
        return np.dtype(np.uint16)
    raise DtypeError(f"NumPy has no dtype for s4d {DTYPE_NAMES.get(code, code)}")


class Memory(NamedTuple):
    """One buffer ready to bind."""
    ptr: int
    dtype: int              # s4d_dtype code
    shape: Tuple[int, ...]
    memory: int             # MEMORY_HOST or MEMORY_DEVICE
    keep: object            # holds the memory alive while bound
    kind: str               # "numpy", "torch" or "buffer"
    cuda_device: Optional[int]  # the CUDA ordinal of a CUDA tensor
    nbytes: int


def _what(obj):
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _from_numpy(arr, name, role, writable):
    dt = arr.dtype
    native = dt.newbyteorder("=") if dt.byteorder not in ("=", "|") else dt
    if native not in CODE_BY_NUMPY:
        raise DtypeError(f"{role} '{name}': NumPy dtype {dt} has no s4d equivalent (s4d takes "
                         f"{', '.join(sorted(set(DTYPE_NAMES.values()) - {'string'}))})")
    good = arr.flags.c_contiguous and arr.flags.aligned and native == dt
    if writable:
        if not good:
            why = ("not C-contiguous" if not arr.flags.c_contiguous else
                   "not aligned" if not arr.flags.aligned else f"byte order {dt.byteorder}")
            raise InvalidArgumentError(f"output '{name}': the array is {why}; an output is "
                                       "written in place, so it must be a C-contiguous, "
                                       "aligned, native-endian array")
        if not arr.flags.writeable:
            raise InvalidArgumentError(f"output '{name}': the array is read-only")
    elif not good:
        # the engine reads dense row-major memory: give it a dense copy
        arr = np.array(arr, dtype=native, order="C", copy=True)
    ptr = arr.__array_interface__["data"][0]
    return Memory(ptr, CODE_BY_NUMPY[native], tuple(int(d) for d in arr.shape),
                  _lib.MEMORY_HOST, arr, "numpy", None, arr.nbytes)


def _from_torch(t, name, role, writable, engine_device):
    torch = torch_module()
    if t.layout != torch.strided:
        raise InvalidArgumentError(f"{role} '{name}': a {t.layout} tensor; bind a dense tensor "
                                   "(.to_dense())")
    codes = torch_dtype_codes(torch)
    if t.dtype not in codes:
        raise DtypeError(f"{role} '{name}': torch dtype {t.dtype} has no s4d equivalent")
    dev = t.device.type
    if dev not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"{role} '{name}': a tensor on device '{t.device}'; s4d "
                                   "binds CPU and CUDA tensors")
    if dev == "cuda" and engine_device != _lib.DEVICE_CUDA:
        raise InvalidArgumentError(f"{role} '{name}': a CUDA tensor, but the engine runs on the "
                                   "CPU; bind a CPU tensor (.cpu()) or build for device='cuda'")
    t = t.detach()
    if not t.is_contiguous():
        if writable:
            raise InvalidArgumentError(f"{role} '{name}': the tensor is not contiguous; an "
                                       "output is written in place, so it must be contiguous")
        t = t.contiguous()
    ptr = int(t.data_ptr())
    return Memory(ptr, codes[t.dtype], tuple(int(d) for d in t.shape),
                  _lib.MEMORY_DEVICE if dev == "cuda" else _lib.MEMORY_HOST, t, "torch",
                  t.device.index if dev == "cuda" else None, t.numel() * t.element_size())


def as_memory(obj, name, role, writable, engine_device):
    """The memory of obj (an ndarray, NumPy scalar, torch tensor or
    DeviceBuffer) for input/output `name`; raises S4DError subclasses for
    anything the engine cannot bind. Inputs that are not dense (strided,
    unaligned, other byte order) are copied; outputs must already be."""
    from .engine import DeviceBuffer
    if isinstance(obj, DeviceBuffer):
        obj._check_open()
        if obj.device != "cpu" and engine_device != _lib.DEVICE_CUDA:
            raise InvalidArgumentError(f"{role} '{name}': a device buffer of a {obj.device} "
                                       "engine, but this engine runs on the CPU")
        return Memory(obj.ptr, obj._code, obj.shape, obj._memory, obj, "buffer", None,
                      obj.nbytes)
    if isinstance(obj, np.generic) and not writable:
        obj = np.asarray(obj)
    if isinstance(obj, np.ndarray):
        m = _from_numpy(obj, name, role, writable)
    elif is_tensor(obj):
        m = _from_torch(obj, name, role, writable, engine_device)
    else:
        raise InvalidArgumentError(f"{role} '{name}': cannot bind a {_what(obj)}; give a NumPy "
                                   "array or a torch tensor")
    if m.ptr == 0 and m.nbytes:
        raise InvalidArgumentError(f"{role} '{name}': the {m.kind} object has no memory")
    return m


def allocate(code, shape, like):
    """A new output buffer: a NumPy array, or a torch tensor on like's device
    (like: None, "torch", or a torch.device)."""
    if like is None:
        return np.empty(shape, dtype=numpy_dtype(code))
    torch = torch_module()
    device = "cpu" if like == "torch" else like
    return torch.empty(shape, dtype=torch_dtype(code), device=device)
