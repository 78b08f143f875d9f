"""libs4d through ctypes: where the library is, the C structs, the prototypes.

ctypes rather than a compiled extension: libs4d's public API is plain C with
size-versioned structs, so a binding needs no compiler and no C++ ABI of a
particular torch (Debian's torch 1.13 and torch 2.x load the same files).
Calls through ctypes.CDLL release the GIL, so contexts on several threads
run at the same time.
"""
import ctypes
import ctypes.util
import os
import threading

from .errors import LibraryNotFoundError

MAX_DIMS = 8

# s4d_status values (include/s4d/types.h)
OK = 0
STATUS_NAMES = {
    0: "S4D_OK", 1: "S4D_ERR_INVALID_ARG", 2: "S4D_ERR_SHAPE", 3: "S4D_ERR_DTYPE",
    4: "S4D_ERR_NO_MEMORY", 5: "S4D_ERR_UNSUPPORTED", 6: "S4D_ERR_CUDA", 7: "S4D_ERR_IO",
    8: "S4D_ERR_PARSE", 9: "S4D_ERR_NOT_FOUND", 10: "S4D_ERR_VERSION", 11: "S4D_ERR_CHECKSUM",
    12: "S4D_ERR_PLUGIN", 13: "S4D_ERR_NO_DEVICE", 14: "S4D_ERR_INTERNAL",
}

# s4d_device, s4d_memory, s4d_input_spec_kind, s4d_tensor_format
DEVICE_CPU, DEVICE_CUDA = 0, 1
DEVICE_NAMES = {DEVICE_CPU: "cpu", DEVICE_CUDA: "cuda"}
MEMORY_HOST, MEMORY_DEVICE = 0, 1
SPEC_AUTO, SPEC_SHAPE, SPEC_VALUES = 0, 1, 2
FORMAT_NAMES = {0: "linear", 1: "nhwc"}


class ErrBuf(ctypes.Structure):
    _fields_ = [("msg", ctypes.c_char * 512)]


class InputSpec(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("kind", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_DIMS), ("values", ctypes.POINTER(ctypes.c_double))]


class LayerPrecision(ctypes.Structure):
    _fields_ = [("layer", ctypes.c_char_p), ("dtype", ctypes.c_int)]


class OutputTolerance(ctypes.Structure):
    _fields_ = [("output", ctypes.c_char_p), ("rel_l2", ctypes.c_double)]


class OutputMetric(ctypes.Structure):
    _fields_ = [("output", ctypes.c_char_p), ("metric", ctypes.c_int)]


class BuildOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device", ctypes.c_int), ("fp16", ctypes.c_int),
                ("fold_constants", ctypes.c_int), ("registry", ctypes.c_void_p),
                ("input_specs", ctypes.POINTER(InputSpec)), ("num_input_specs", ctypes.c_int),
                ("allow_fallback", ctypes.c_int), ("tf32", ctypes.c_int),
                ("layer_precisions", ctypes.POINTER(LayerPrecision)),
                ("num_layer_precisions", ctypes.c_int), ("obey_precisions", ctypes.c_int),
                ("calib_dir", ctypes.c_char_p), ("accuracy", ctypes.c_double),
                ("output_tolerances", ctypes.POINTER(OutputTolerance)),
                ("num_output_tolerances", ctypes.c_int),
                ("output_metrics", ctypes.POINTER(OutputMetric)),
                ("num_output_metrics", ctypes.c_int), ("conv_layout", ctypes.c_int)]


class LoadOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("registry", ctypes.c_void_p),
                ("max_context_bytes", ctypes.c_uint64)]


class ContextOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("num_threads", ctypes.c_int),
                ("profile", ctypes.c_int), ("stream", ctypes.c_void_p),
                ("use_graph", ctypes.c_int), ("graph_streams", ctypes.c_int)]


class TensorInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int),
                ("dims", ctypes.c_int64 * MAX_DIMS), ("bytes", ctypes.c_size_t)]


class TargetInfo(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device", ctypes.c_int),
                ("device_name", ctypes.c_char_p), ("arch", ctypes.c_char_p),
                ("libraries", ctypes.c_char_p), ("library_version", ctypes.c_char_p)]


class LayerDetails(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("device", ctypes.c_int),
                ("precision", ctypes.c_int), ("format", ctypes.c_int),
                ("payload_bytes", ctypes.c_size_t), ("is_copy", ctypes.c_int),
                ("is_view", ctypes.c_int), ("kernel_info", ctypes.c_char_p),
                ("in_place", ctypes.c_int)]


class LayerInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("op", ctypes.c_char_p), ("domain", ctypes.c_char_p),
                ("is_plugin", ctypes.c_int), ("device", ctypes.c_int),
                ("num_inputs", ctypes.c_int), ("num_outputs", ctypes.c_int),
                ("workspace_bytes", ctypes.c_size_t)]


class PluginCreatorHead(ctypes.Structure):
    """The leading fields of s4d_plugin_creator (all this binding reads)."""
    _fields_ = [("abi_version", ctypes.c_uint32), ("struct_size", ctypes.c_uint32),
                ("plugin_namespace", ctypes.c_char_p), ("name", ctypes.c_char_p),
                ("version", ctypes.c_char_p)]


# The *_init() functions write the library's own sizeof; a newer libs4d may
# have appended fields, so options live in a buffer of the largest size the
# API allows (4096 bytes) and the library never writes past it.
OPTIONS_BUFFER_BYTES = 4096


def new_options(struct_type, init):
    buf = (ctypes.c_char * OPTIONS_BUFFER_BYTES)()
    opts = struct_type.from_buffer(buf)
    init(ctypes.byref(opts))
    return opts, buf


c_void_pp = ctypes.POINTER(ctypes.c_void_p)
c_int64_p = ctypes.POINTER(ctypes.c_int64)
c_status = ctypes.c_int

# name: (restype, argtypes)
_PROTOTYPES = {
    "s4d_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "s4d_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
    "s4d_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "s4d_build_options_init": (None, [ctypes.POINTER(BuildOptions)]),
    "s4d_load_options_init": (None, [ctypes.POINTER(LoadOptions)]),
    "s4d_context_options_init": (None, [ctypes.POINTER(ContextOptions)]),
    "s4d_engine_build_onnx_file": (c_status, [ctypes.c_char_p, ctypes.POINTER(BuildOptions),
                                              c_void_pp, ctypes.POINTER(ErrBuf)]),
    "s4d_engine_build_onnx_memory": (c_status, [ctypes.c_void_p, ctypes.c_size_t,
                                                ctypes.POINTER(BuildOptions), c_void_pp,
                                                ctypes.POINTER(ErrBuf)]),
    "s4d_engine_load_file": (c_status, [ctypes.c_char_p, ctypes.POINTER(LoadOptions), c_void_pp,
                                        ctypes.POINTER(ErrBuf)]),
    "s4d_engine_load_memory": (c_status, [ctypes.c_void_p, ctypes.c_size_t,
                                          ctypes.POINTER(LoadOptions), c_void_pp,
                                          ctypes.POINTER(ErrBuf)]),
    "s4d_engine_serialize": (c_status, [ctypes.c_void_p, c_void_pp,
                                        ctypes.POINTER(ctypes.c_size_t)]),
    "s4d_engine_save": (c_status, [ctypes.c_void_p, ctypes.c_char_p]),
    "s4d_engine_destroy": (None, [ctypes.c_void_p]),
    "s4d_engine_errmsg": (ctypes.c_char_p, [ctypes.c_void_p]),
    "s4d_free": (None, [ctypes.c_void_p]),
    "s4d_engine_num_inputs": (ctypes.c_int, [ctypes.c_void_p]),
    "s4d_engine_num_outputs": (ctypes.c_int, [ctypes.c_void_p]),
    "s4d_engine_input_info": (c_status, [ctypes.c_void_p, ctypes.c_int,
                                         ctypes.POINTER(TensorInfo)]),
    "s4d_engine_output_info": (c_status, [ctypes.c_void_p, ctypes.c_int,
                                          ctypes.POINTER(TensorInfo)]),
    "s4d_engine_num_layers": (ctypes.c_int, [ctypes.c_void_p]),
    "s4d_engine_layer_info": (c_status, [ctypes.c_void_p, ctypes.c_int,
                                         ctypes.POINTER(LayerInfo)]),
    "s4d_engine_layer_tensor": (c_status, [ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_int, ctypes.POINTER(TensorInfo)]),
    "s4d_engine_activation_bytes": (ctypes.c_size_t, [ctypes.c_void_p]),
    "s4d_engine_activation_bytes_unplanned": (ctypes.c_size_t, [ctypes.c_void_p]),
    "s4d_engine_weight_bytes": (ctypes.c_size_t, [ctypes.c_void_p]),
    "s4d_engine_device": (ctypes.c_int, [ctypes.c_void_p]),
    "s4d_engine_precision_report": (ctypes.c_char_p, [ctypes.c_void_p]),
    "s4d_engine_target": (c_status, [ctypes.c_void_p, ctypes.POINTER(TargetInfo)]),
    "s4d_engine_layer_details": (c_status, [ctypes.c_void_p, ctypes.c_int,
                                            ctypes.POINTER(LayerDetails)]),
    "s4d_context_create": (c_status, [ctypes.c_void_p, ctypes.POINTER(ContextOptions), c_void_pp,
                                      ctypes.POINTER(ErrBuf)]),
    "s4d_context_destroy": (None, [ctypes.c_void_p]),
    "s4d_context_errmsg": (ctypes.c_char_p, [ctypes.c_void_p]),
    "s4d_context_bind_memory": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
                                           ctypes.c_int, c_int64_p, ctypes.c_void_p,
                                           ctypes.c_int]),
    "s4d_context_device_buffer": (c_status, [ctypes.c_void_p, ctypes.c_char_p, c_void_pp]),
    "s4d_context_set_input_event": (c_status, [ctypes.c_void_p, ctypes.c_char_p,
                                               ctypes.c_void_p]),
    "s4d_context_enqueue": (c_status, [ctypes.c_void_p, ctypes.c_void_p]),
    "s4d_context_synchronize": (c_status, [ctypes.c_void_p]),
    "s4d_context_output": (c_status, [ctypes.c_void_p, ctypes.c_char_p, c_void_pp,
                                      ctypes.POINTER(TensorInfo)]),
    "s4d_context_layer_time": (c_status, [ctypes.c_void_p, ctypes.c_int,
                                          ctypes.POINTER(ctypes.c_double)]),
    "s4d_plugins_load": (c_status, [ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ErrBuf)]),
    "s4d_plugin_registry_create": (c_status, [c_void_pp]),
    "s4d_plugin_registry_destroy": (None, [ctypes.c_void_p]),
    "s4d_plugin_registry_default": (ctypes.c_void_p, []),
    "s4d_plugin_registry_load_library": (c_status, [ctypes.c_void_p, ctypes.c_char_p]),
    "s4d_plugin_registry_count": (ctypes.c_int32, [ctypes.c_void_p]),
    "s4d_plugin_registry_get": (ctypes.POINTER(PluginCreatorHead),
                                [ctypes.c_void_p, ctypes.c_int32]),
    "s4d_plugin_registry_errmsg": (ctypes.c_char_p, [ctypes.c_void_p]),
}

_LIB = None
_LIB_PATH = None
_LOCK = threading.Lock()


def _repo_root():
    # python/s4d/engine/_lib.py -> the repository
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(os.path.dirname(here)))


# a relative $S4D_LIB or $S4D_BUILD means relative to where the program started,
# even if it changes directory before its first engine call
_START_DIR = os.getcwd()


def candidate_paths():
    """Where libs4d.so is looked for, in order: $S4D_LIB (the file),
    $S4D_BUILD/lib/libs4d.so, the repository's build/lib/libs4d.so, then the
    system's library path."""
    paths = []
    if os.environ.get("S4D_LIB"):
        return [os.path.join(_START_DIR, os.environ["S4D_LIB"])]
    if os.environ.get("S4D_BUILD"):
        return [os.path.join(_START_DIR, os.environ["S4D_BUILD"], "lib", "libs4d.so")]
    paths.append(os.path.join(_repo_root(), "build", "lib", "libs4d.so"))
    found = ctypes.util.find_library("s4d")
    if found:
        paths.append(found)
    return paths


def library_path():
    """The path of the libs4d.so this process uses (loads it if needed)."""
    lib()
    return _LIB_PATH


def lib():
    """The loaded libs4d, with prototypes set; LibraryNotFoundError if absent."""
    global _LIB, _LIB_PATH
    if _LIB is not None:
        return _LIB
    with _LOCK:
        if _LIB is not None:
            return _LIB
        tried = []
        for path in candidate_paths():
            if os.sep in path and not os.path.isfile(path):
                tried.append(f"{path} (no such file)")
                continue
            try:
                handle = ctypes.CDLL(path)
            except OSError as exc:
                tried.append(f"{path} ({exc})")
                continue
            missing = [n for n in _PROTOTYPES if not hasattr(handle, n)]
            if missing:
                tried.append(f"{path} (an older libs4d: no {', '.join(missing[:3])})")
                continue
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(handle, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _LIB, _LIB_PATH = handle, path
            return _LIB
        raise LibraryNotFoundError(
            "libs4d.so not found: tried " + "; ".join(tried) + ". Build it with `make` (or "
            "`cmake -S . -B build && cmake --build build`) at the repository root, or point "
            "S4D_LIB at libs4d.so or S4D_BUILD at the build folder.")


def text(ptr):
    """A C string from the library as str ("" for NULL)."""
    return ptr.decode("utf-8", "replace") if ptr else ""


def default_plugin_library():
    """libs4d_plugins.so next to the libs4d.so in use, or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(library_path())), "libs4d_plugins.so")
    return path if os.path.isfile(path) else None
