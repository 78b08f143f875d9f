"""Engines, contexts and plugin registries of libs4d, from Python.

Ownership: every C handle sits in a _Handle that counts its holders. An
Engine holds its engine handle, and that handle holds the registry it was
built or loaded with; a Context holds its engine's handle; a DeviceBuffer
holds its context's handle. close() (or __del__, or leaving a with-block)
gives up the Python object's hold, and the C object is destroyed when the
last holder lets go, so objects may be closed or collected in any order.
A closed object refuses every further call with ClosedError.
"""
import contextlib
import ctypes
import os
import threading
from typing import Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from . import _arrays, _lib
from .errors import ClosedError, DtypeError, InvalidArgumentError, error_for_status

__all__ = ["Registry", "Builder", "build", "Engine", "Context", "DeviceBuffer", "TensorSpec",
           "load_plugins", "plugin_creators", "default_plugins"]


class _Closing:
    """with-statement support and a close() at garbage collection, for objects with close()."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _Handle:
    """A C handle with a count of holders; destroyed (once) when the count
    reaches zero, after which the handles it depends on are released."""

    def __init__(self, ptr, destroy, what, deps=()):
        self.ptr = ptr
        self.what = what
        self._destroy = destroy
        self._holders = 1
        self._lock = threading.Lock()
        self._deps = list(deps)

    def acquire(self):
        with self._lock:
            if self._holders == 0:
                raise ClosedError(f"the {self.what} is closed")
            self._holders += 1
        return self

    def release(self):
        with self._lock:
            self._holders -= 1
            last = self._holders == 0
            ptr = self.ptr
            if last:
                self.ptr = None
        if last:
            if ptr is not None and self._destroy is not None:
                self._destroy(ptr)
            for d in self._deps:
                d.release()
            self._deps = []

    @property
    def alive(self):
        return self._holders > 0


def _raise(status, message):
    raise error_for_status(status, message)


def _errbuf_check(status, err):
    if status != _lib.OK:
        _raise(status, _lib.text(err.msg))


def _encode(name, what):
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{what} must be a str, got {type(name).__name__}")
    if "\0" in name:
        raise InvalidArgumentError(f"{what} {name!r} contains a NUL character")
    return name.encode("utf-8")


def _path(path, what):
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidArgumentError(f"{what} must be a path, got {type(path).__name__}")
    p = os.fsencode(path)
    if b"\0" in p:
        raise InvalidArgumentError(f"{what} {path!r} contains a NUL character")
    return p


def _as_bytes(data):
    if isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "SerializeToString"):  # an onnx.ModelProto
        return data.SerializeToString()
    return None


# ---------------------------------------------------------------- plugin registries

class Registry(_Closing):
    """A plugin registry: Registry() makes a new one (freed, with the plugin
    libraries it loaded, after every engine built or loaded with it is gone);
    Registry.default() is the process default that builds and loads use when
    given none."""

    _default = None
    _default_lock = threading.Lock()

    def __init__(self):
        out = ctypes.c_void_p()
        st = _lib.lib().s4d_plugin_registry_create(ctypes.byref(out))
        if st != _lib.OK:
            _raise(st, "cannot create a plugin registry")
        self._h = _Handle(out.value, _lib.lib().s4d_plugin_registry_destroy, "plugin registry")
        self._is_default = False

    @classmethod
    def default(cls):
        with cls._default_lock:
            if cls._default is None:
                r = cls.__new__(cls)
                ptr = _lib.lib().s4d_plugin_registry_default()
                if not ptr:
                    raise error_for_status(4, "cannot create the default plugin registry")
                r._h = _Handle(ptr, None, "plugin registry")
                r._is_default = True
                cls._default = r
            return cls._default

    def _ptr(self):
        if self.closed:
            raise ClosedError("the plugin registry is closed")
        return self._h.ptr

    def _hold(self):
        if self.closed:
            raise ClosedError("the plugin registry is closed")
        return self._h.acquire()

    def load(self, path):
        """Loads a plugin library (a .so exporting s4d_plugin_library_init)
        and registers its creators; loading one library twice is fine."""
        p = _path(path, "plugin library")
        if self._is_default:
            err = _lib.ErrBuf()
            st = _lib.lib().s4d_plugins_load(None, p, ctypes.byref(err))
            _errbuf_check(st, err)
        else:
            ptr = self._ptr()
            st = _lib.lib().s4d_plugin_registry_load_library(ptr, p)
            if st != _lib.OK:
                _raise(st, _lib.text(_lib.lib().s4d_plugin_registry_errmsg(ptr)))
        return self

    def creators(self) -> List[Tuple[str, str, str]]:
        """The registered creators as (namespace, name, version)."""
        ptr = self._ptr()
        L = _lib.lib()
        out = []
        for i in range(L.s4d_plugin_registry_count(ptr)):
            c = L.s4d_plugin_registry_get(ptr, i)
            if c:
                c = c.contents
                out.append((_lib.text(c.plugin_namespace), _lib.text(c.name),
                            _lib.text(c.version)))
        return out

    def close(self):
        """Gives up this object's hold; the default registry is never freed."""
        if not self._is_default and getattr(self, "_open", True):
            self._open = False
            self._h.release()

    @property
    def closed(self):
        return not getattr(self, "_open", True)

    def __repr__(self):
        kind = "default" if self._is_default else ("closed" if self.closed else "own")
        return f"<s4d.engine.Registry {kind}>"


def _registry(registry):
    if registry is None:
        return Registry.default()
    if not isinstance(registry, Registry):
        raise InvalidArgumentError(f"registry must be an s4d.engine.Registry, got "
                                   f"{type(registry).__name__}")
    if registry.closed:
        raise ClosedError("the plugin registry is closed")
    return registry


def _load_plugins(registry, plugins):
    if plugins is None:
        return
    if isinstance(plugins, (str, bytes, os.PathLike)):
        plugins = [plugins]
    for p in plugins:
        registry.load(p)


def load_plugins(path, registry=None):
    """Loads a plugin library into registry (default: the process default)."""
    _registry(registry).load(path)


def plugin_creators(registry=None):
    """(namespace, name, version) of every creator in registry (default: the default)."""
    return _registry(registry).creators()


def default_plugins():
    """[path of libs4d_plugins.so] beside the libs4d in use, or [] if it is not there."""
    p = _lib.default_plugin_library()
    return [p] if p else []


# ---------------------------------------------------------------- tensors

class TensorSpec(NamedTuple):
    """A graph input or output: name, dtype (s4d's name, which is NumPy's
    for every dtype NumPy has: "float32", "int64", "bool", ... "bfloat16"),
    static shape and size in bytes."""
    name: str
    dtype: str
    shape: Tuple[int, ...]
    nbytes: int

    @property
    def numpy_dtype(self):
        """np.dtype of the tensor (bfloat16: its uint16 bits)."""
        return _arrays.numpy_dtype(_arrays.CODE_BY_NAME[self.dtype])

    @property
    def torch_dtype(self):
        return _arrays.torch_dtype(_arrays.CODE_BY_NAME[self.dtype])


def _spec(info):
    return TensorSpec(_lib.text(info.name), _arrays.DTYPE_NAMES.get(info.dtype, "undefined"),
                      tuple(int(info.dims[i]) for i in range(info.rank)), int(info.bytes))


def _device_code(device):
    d = str(device)
    if d == "cpu":
        return _lib.DEVICE_CPU
    if d == "cuda":
        return _lib.DEVICE_CUDA
    raise InvalidArgumentError(f"device must be 'cpu' or 'cuda' (the current CUDA device), "
                               f"got {device!r}")


def _int_or_none(v, what):
    try:
        i = int(v)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"{what} must be an integer, got {v!r}") from None
    if i != v:
        raise InvalidArgumentError(f"{what} must be an integer, got {v!r}")
    return i


def _make_specs(shapes, values, auto):
    """s4d_input_spec array (and what keeps its strings and values alive)."""
    items = []
    for kind, table in ((_lib.SPEC_SHAPE, shapes), (_lib.SPEC_VALUES, values),
                        (_lib.SPEC_AUTO, auto)):
        if not table:
            continue
        if not isinstance(table, dict):
            raise InvalidArgumentError("shapes and values must be dicts {input name: numbers}")
        for name, nums in table.items():
            items.append((kind, name, nums))
    if not items:
        return None, 0, None
    arr = (_lib.InputSpec * len(items))()
    keep = []
    seen = set()
    for spec, (kind, name, nums) in zip(arr, items):
        if name in seen:
            raise InvalidArgumentError(f"input '{name}' is given in both shapes and values")
        seen.add(name)
        spec.name = _encode(name, "input name")
        keep.append(spec.name)
        try:
            flat = np.asarray(nums, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise InvalidArgumentError(f"input '{name}': {nums!r} is not a list of numbers") \
                from None
        if kind == _lib.SPEC_SHAPE:
            if len(flat) > _lib.MAX_DIMS:
                raise InvalidArgumentError(f"shapes['{name}']: rank {len(flat)} is more than "
                                           f"{_lib.MAX_DIMS}")
            dims = [_int_or_none(v, f"shapes['{name}'] dimension") for v in flat]
            if any(d < 0 for d in dims):
                raise InvalidArgumentError(f"shapes['{name}']: negative dimension in {dims}")
            if any(d >= 2 ** 63 for d in dims):
                raise InvalidArgumentError(f"shapes['{name}']: dimension out of int64 range")
            for i, d in enumerate(dims):
                spec.dims[i] = d
        else:
            if np.isnan(flat).any():
                raise InvalidArgumentError(f"values['{name}']: NaN")
            for i, v in enumerate(flat[:_lib.MAX_DIMS]):
                spec.dims[i] = int(v) if float(v).is_integer() and abs(v) < 9.2e18 else -1
            buf = (ctypes.c_double * max(len(flat), 1))(*flat.tolist())
            keep.append(buf)
            spec.values = ctypes.cast(buf, ctypes.POINTER(ctypes.c_double))
        spec.kind = kind
        spec.rank = len(flat)
    return arr, len(items), keep


# ---------------------------------------------------------------- building

class Builder:
    """Build options; build() turns an ONNX model into an Engine.

    device: "cpu" or "cuda"; fp16: allow float16 layers (CUDA); tf32: CUDA
    float32 layers may use TF32; shapes: {input: dims} fixing symbolic
    dimensions; values: {input: numbers} folding a shape-carrying input
    (a Reshape shape, Resize scales) into the engine; plugins: plugin
    libraries to load first; registry: the plugin Registry (default: the
    process default); allow_fallback: nodes the device cannot run go to the
    CPU; fold_constants: fold constant subgraphs at build (default True).
    fp16 builds (docs/precision.md): layer_precisions: {layer: "fp32" | "fp16"}
    pins; obey_precisions: a pin the layer's kernel cannot run fails the build;
    calib_dir: calibration inputs for the accuracy guard; accuracy: its
    default relative L2 tolerance per output (None: 1e-2); output_tolerances:
    {output: tolerance} overrides; output_metrics: {output: "ordered" | "matched" |
    "auto"}, how the guard compares an output (auto: rows matched where their order
    follows a TopK, else element by element). conv_layout: "auto" (channels-last
    2-D convolutions on CUDA with tf32 or fp16), "nchw" or "nhwc".
    """

    _LAYOUTS = {"auto": 0, "nchw": 1, "nhwc": 2}

    def __init__(self, device="cpu", fp16=False, tf32=False, shapes=None, values=None,
                 plugins=None, registry=None, allow_fallback=False, fold_constants=True,
                 layer_precisions=None, obey_precisions=False, calib_dir=None, accuracy=None,
                 output_tolerances=None, output_metrics=None, conv_layout="auto"):
        if conv_layout not in self._LAYOUTS:
            raise ValueError(f"conv_layout {conv_layout!r}: give 'auto', 'nchw' or 'nhwc'")
        self.conv_layout = conv_layout
        self.device = device
        self.fp16 = fp16
        self.tf32 = tf32
        self.shapes = shapes
        self.values = values
        self.plugins = plugins
        self.registry = registry
        self.allow_fallback = allow_fallback
        self.fold_constants = fold_constants
        self.layer_precisions = layer_precisions
        self.obey_precisions = obey_precisions
        self.calib_dir = calib_dir
        self.accuracy = accuracy
        self.output_tolerances = output_tolerances
        self.output_metrics = output_metrics
        self._auto = None  # trtexec's --shapes: the library decides shape or values

    def build(self, onnx) -> "Engine":
        """onnx: a path, the model's bytes, or an onnx.ModelProto."""
        L = _lib.lib()
        device = _device_code(self.device)
        reg = _registry(self.registry)
        _load_plugins(reg, self.plugins)
        opts, opts_buf = _lib.new_options(_lib.BuildOptions, L.s4d_build_options_init)
        opts.device = device
        opts.fp16 = int(bool(self.fp16))
        opts.tf32 = int(bool(self.tf32))
        opts.conv_layout = self._LAYOUTS[self.conv_layout]
        opts.allow_fallback = int(bool(self.allow_fallback))
        opts.fold_constants = int(bool(self.fold_constants))
        specs, n, keep = _make_specs(self.shapes, self.values, self._auto)
        keep = [keep] + _precision_options(opts, self)
        hold = reg._hold()
        opts.registry = hold.ptr
        if n:
            opts.input_specs = ctypes.cast(specs, ctypes.POINTER(_lib.InputSpec))
            opts.num_input_specs = n
        out = ctypes.c_void_p()
        err = _lib.ErrBuf()
        try:
            data = _as_bytes(onnx)
            if data is not None:
                st = L.s4d_engine_build_onnx_memory(data, len(data), ctypes.byref(opts),
                                                    ctypes.byref(out), ctypes.byref(err))
            elif isinstance(onnx, (str, os.PathLike)):
                st = L.s4d_engine_build_onnx_file(_path(onnx, "ONNX model"), ctypes.byref(opts),
                                                  ctypes.byref(out), ctypes.byref(err))
            else:
                raise InvalidArgumentError(f"build: give an ONNX path, bytes or onnx.ModelProto, "
                                           f"not {type(onnx).__name__}")
            del keep, opts_buf
            _errbuf_check(st, err)
        except BaseException:
            hold.release()
            raise
        return Engine._wrap(out.value, hold)


_PRECISIONS = {"fp32": 1, "float32": 1, "fp16": 10, "float16": 10}  # s4d_dtype codes
_METRICS = {"auto": 0, "ordered": 1, "matched": 2}  # s4d_accuracy_metric


def _named_array(mapping, struct, name_field, value_field, convert, keep):
    """A ctypes array of struct {name_field: name, value_field: convert(name, value)} from a
    mapping, with the encoded names kept alive in keep; returns (pointer, count)."""
    items = list(dict(mapping).items())
    arr = (struct * len(items))()
    for i, (name, value) in enumerate(items):
        enc = str(name).encode()
        keep.append(enc)
        setattr(arr[i], name_field, enc)
        setattr(arr[i], value_field, convert(name, value))
    keep.append(arr)
    return ctypes.cast(arr, ctypes.POINTER(struct)), len(items)


def _layer_precision(name, prec):
    if prec not in _PRECISIONS:
        raise InvalidArgumentError(f"layer_precisions: layer '{name}': precision "
                                   f"{prec!r} is not 'fp32' or 'fp16'")
    return _PRECISIONS[prec]


def _output_metric(name, metric):
    if metric not in _METRICS:
        raise InvalidArgumentError(f"output_metrics: output '{name}': metric {metric!r} "
                                   f"is not 'ordered', 'matched' or 'auto'")
    return _METRICS[metric]


def _precision_options(opts, b):
    """Fills the fp16 precision fields of opts; returns what must stay alive during the build."""
    keep = []
    if b.layer_precisions:
        opts.layer_precisions, opts.num_layer_precisions = _named_array(
            b.layer_precisions, _lib.LayerPrecision, "layer", "dtype", _layer_precision, keep)
    opts.obey_precisions = int(bool(b.obey_precisions))
    if b.calib_dir is not None:
        enc = os.fsencode(b.calib_dir)
        keep.append(enc)
        opts.calib_dir = enc
    if b.accuracy is not None:
        opts.accuracy = float(b.accuracy)
    if b.output_tolerances:
        opts.output_tolerances, opts.num_output_tolerances = _named_array(
            b.output_tolerances, _lib.OutputTolerance, "output", "rel_l2",
            lambda _, tol: float(tol), keep)
    if b.output_metrics:
        opts.output_metrics, opts.num_output_metrics = _named_array(
            b.output_metrics, _lib.OutputMetric, "output", "metric", _output_metric, keep)
    return keep


def build(onnx, device="cpu", fp16=False, tf32=False, shapes=None, values=None, plugins=None,
          registry=None, allow_fallback=False, fold_constants=True, layer_precisions=None,
          obey_precisions=False, calib_dir=None, accuracy=None,
          output_tolerances=None, output_metrics=None, conv_layout="auto") -> "Engine":
    """Builds an engine from an ONNX model (path, bytes or onnx.ModelProto);
    the options are Builder's."""
    return Builder(device=device, fp16=fp16, tf32=tf32, shapes=shapes, values=values,
                   plugins=plugins, registry=registry, allow_fallback=allow_fallback,
                   fold_constants=fold_constants, layer_precisions=layer_precisions,
                   obey_precisions=obey_precisions, calib_dir=calib_dir, accuracy=accuracy,
                   output_tolerances=output_tolerances, output_metrics=output_metrics,
                   conv_layout=conv_layout).build(onnx)


# ---------------------------------------------------------------- engines

class Engine(_Closing):
    """A built network: build() or Engine.load() makes one. Immutable and
    shared: any number of contexts (one per thread) run it at once."""

    def __init__(self):
        raise TypeError("use s4d.engine.build(...) or s4d.engine.Engine.load(...)")

    @classmethod
    def _wrap(cls, ptr, registry_hold):
        """registry_hold: an acquired hold on the registry, now the engine's."""
        self = cls.__new__(cls)
        self._h = _Handle(ptr, _lib.lib().s4d_engine_destroy, "engine", [registry_hold])
        self._open = True
        self._lock = threading.Lock()  # the calls that write the engine's errmsg
        L = _lib.lib()
        self._inputs = self._infos(L.s4d_engine_num_inputs, L.s4d_engine_input_info)
        self._outputs = self._infos(L.s4d_engine_num_outputs, L.s4d_engine_output_info)
        self._device = _lib.DEVICE_NAMES.get(L.s4d_engine_device(ptr), "unknown")
        self._target = self._read_target()
        return self

    @classmethod
    def load(cls, source, plugins=None, registry=None, max_context_bytes=0) -> "Engine":
        """Loads an engine file (a path, or its bytes). plugins: libraries to
        load first (engines with plugin layers need their creators);
        max_context_bytes: refuse an engine whose contexts would need more
        (0: the library's limit)."""
        L = _lib.lib()
        reg = _registry(registry)
        _load_plugins(reg, plugins)
        opts, opts_buf = _lib.new_options(_lib.LoadOptions, L.s4d_load_options_init)
        opts.max_context_bytes = _int_or_none(max_context_bytes, "max_context_bytes")
        out = ctypes.c_void_p()
        err = _lib.ErrBuf()
        hold = reg._hold()
        opts.registry = hold.ptr
        try:
            data = _as_bytes(source)
            if data is not None:
                st = L.s4d_engine_load_memory(data, len(data), ctypes.byref(opts),
                                              ctypes.byref(out), ctypes.byref(err))
            elif isinstance(source, (str, os.PathLike)):
                st = L.s4d_engine_load_file(_path(source, "engine file"), ctypes.byref(opts),
                                            ctypes.byref(out), ctypes.byref(err))
            else:
                raise InvalidArgumentError(f"load: give an engine file path or its bytes, not "
                                           f"{type(source).__name__}")
            del opts_buf
            _errbuf_check(st, err)
        except BaseException:
            hold.release()
            raise
        return cls._wrap(out.value, hold)

    def _ptr(self):
        if not self._open:
            raise ClosedError("the engine is closed")
        return self._h.ptr

    @contextlib.contextmanager
    def _use(self):
        """The engine's pointer, held for the call (a close() on another thread waits)."""
        if not self._open:
            raise ClosedError("the engine is closed")
        h = self._h.acquire()
        try:
            yield h.ptr
        finally:
            h.release()

    def _infos(self, count, get):
        ptr = self._h.ptr
        out = []
        for i in range(count(ptr)):
            info = _lib.TensorInfo()
            st = get(ptr, i, ctypes.byref(info))
            if st != _lib.OK:
                _raise(st, f"reading tensor {i} of the engine failed")
            out.append(_spec(info))
        return out

    def _read_target(self):
        t = _lib.TargetInfo()
        t.struct_size = ctypes.sizeof(t)
        st = _lib.lib().s4d_engine_target(self._h.ptr, ctypes.byref(t))
        if st != _lib.OK:
            return {"device": self._device}
        return {"device": _lib.DEVICE_NAMES.get(t.device, "unknown"),
                "device_name": _lib.text(t.device_name), "arch": _lib.text(t.arch),
                "libraries": _lib.text(t.libraries),
                "library_version": _lib.text(t.library_version)}

    # -- what it is
    @property
    def inputs(self) -> List[TensorSpec]:
        """Graph inputs in model order."""
        self._ptr()
        return list(self._inputs)

    @property
    def outputs(self) -> List[TensorSpec]:
        """Graph outputs in model order."""
        self._ptr()
        return list(self._outputs)

    def spec(self, name) -> TensorSpec:
        """The input or output called name (NotFoundError listing them all)."""
        self._ptr()
        for s in self._inputs + self._outputs:
            if s.name == name:
                return s
        raise error_for_status(9, f"the engine has no input or output named '{name}'; it has "
                               + ", ".join(f"'{s.name}'" for s in self._inputs + self._outputs))

    @property
    def device(self) -> str:
        """"cpu" or "cuda"."""
        self._ptr()
        return self._device

    @property
    def target(self) -> Dict[str, str]:
        """What the engine was built for: device, device_name, arch,
        libraries, library_version."""
        self._ptr()
        return dict(self._target)

    @property
    def precision_report(self) -> Optional[str]:
        """What an fp16 build chose (docs/precision.md): the accuracy guard's
        tolerance, each output's error before and after, the layers moved to
        float32. None for a float32 engine."""
        with self._use() as ptr:
            r = _lib.lib().s4d_engine_precision_report(ptr)
            return None if r is None else r.decode()

    @property
    def activation_bytes(self) -> int:
        """Bytes of one context's activation arena (after liveness reuse)."""
        with self._use() as ptr:
            return int(_lib.lib().s4d_engine_activation_bytes(ptr))

    @property
    def activation_bytes_unplanned(self) -> int:
        """Activation bytes without reuse."""
        with self._use() as ptr:
            return int(_lib.lib().s4d_engine_activation_bytes_unplanned(ptr))

    @property
    def weight_bytes(self) -> int:
        with self._use() as ptr:
            return int(_lib.lib().s4d_engine_weight_bytes(ptr))

    @property
    def num_layers(self) -> int:
        with self._use() as ptr:
            return int(_lib.lib().s4d_engine_num_layers(ptr))

    def layer_info(self) -> List[dict]:
        """s4dexec --dumpLayerInfo as data: one dict per layer with index,
        name, op ("namespace::name:version" for a plugin), domain,
        is_plugin, device, precision, format, is_copy, is_view (its output
        shares its input's buffer: it runs nothing), in_place (a Concat whose
        inputs were written where they lie in its output: it runs nothing
        either), payload_bytes,
        workspace_bytes, kernel_info (what its kernel chose, "" when it
        says nothing), and inputs/outputs as {"name", "dtype", "shape"}
        (None for an absent optional input): a layer reads the tensor of the
        name another layer writes, or a graph input or weight."""
        with self._use() as ptr:
            return self._layer_info(ptr)

    def _layer_info(self, ptr):
        L = _lib.lib()
        layers = []
        for i in range(L.s4d_engine_num_layers(ptr)):
            li = _lib.LayerInfo()
            st = L.s4d_engine_layer_info(ptr, i, ctypes.byref(li))
            if st != _lib.OK:
                _raise(st, f"reading layer {i} failed")
            ld = _lib.LayerDetails()
            ld.struct_size = ctypes.sizeof(ld)
            have_details = L.s4d_engine_layer_details(ptr, i, ctypes.byref(ld)) == _lib.OK

            def tensors(is_output, count):
                out = []
                for k in range(count):
                    ti = _lib.TensorInfo()
                    st = L.s4d_engine_layer_tensor(ptr, i, is_output, k, ctypes.byref(ti))
                    if st != _lib.OK or ti.rank < 0:
                        out.append(None)
                    else:
                        out.append({"name": _lib.text(ti.name),
                                    "dtype": _arrays.DTYPE_NAMES.get(ti.dtype, "undefined"),
                                    "shape": tuple(int(ti.dims[d]) for d in range(ti.rank))})
                return out

            layers.append({
                "index": i, "name": _lib.text(li.name), "op": _lib.text(li.op),
                "domain": _lib.text(li.domain), "is_plugin": bool(li.is_plugin),
                "device": _lib.DEVICE_NAMES.get(li.device, "unknown"),
                "precision": _arrays.DTYPE_NAMES.get(ld.precision, "undefined")
                if have_details else None,
                "format": _lib.FORMAT_NAMES.get(ld.format, str(ld.format))
                if have_details else None,
                "is_copy": bool(ld.is_copy) if have_details else False,
                "is_view": bool(ld.is_view) if have_details else False,
                "in_place": bool(ld.in_place) if have_details else False,
                "payload_bytes": int(ld.payload_bytes) if have_details else 0,
                "workspace_bytes": int(li.workspace_bytes),
                "kernel_info": _lib.text(ld.kernel_info) if have_details else "",
                "inputs": tensors(0, li.num_inputs), "outputs": tensors(1, li.num_outputs),
            })
        return layers

    # -- files
    def serialize(self) -> bytes:
        """The engine file's bytes."""
        L = _lib.lib()
        with self._lock, self._use() as ptr:
            data = ctypes.c_void_p()
            size = ctypes.c_size_t()
            st = L.s4d_engine_serialize(ptr, ctypes.byref(data), ctypes.byref(size))
            if st != _lib.OK:
                _raise(st, _lib.text(L.s4d_engine_errmsg(ptr)))
            try:
                return ctypes.string_at(data.value, size.value) if size.value else b""
            finally:
                L.s4d_free(data)

    def save(self, path):
        """Writes the engine file to path."""
        L = _lib.lib()
        p = _path(path, "engine file")
        with self._lock, self._use() as ptr:
            st = L.s4d_engine_save(ptr, p)
            if st != _lib.OK:
                _raise(st, _lib.text(L.s4d_engine_errmsg(ptr)))

    # -- running
    def create_context(self, num_threads=0, profile=False, stream=None,
                       use_graph=False, graph_streams=0) -> "Context":
        """A new execution context (use one per thread). num_threads: CPU
        threads (<= 0: all cores); profile: record per-layer times; stream:
        the CUDA stream the context runs on by default (an int address or a
        torch.cuda.Stream; None: its own); use_graph: replay the layers as a
        CUDA graph; graph_streams: streams the graph's independent branches
        spread over (1 .. 8; 0: S4D_GRAPH_STREAMS or 4)."""
        return Context(self, num_threads, profile, stream, use_graph, graph_streams)

    # -- lifetime
    def close(self):
        """Gives up the engine; its contexts keep working until they close."""
        if getattr(self, "_open", False):
            self._open = False
            self._h.release()

    @property
    def closed(self):
        return not self._open

    def __repr__(self):
        if not getattr(self, "_open", False):
            return "<s4d.engine.Engine closed>"
        ins = ", ".join(f"{s.name}:{s.dtype}{list(s.shape)}" for s in self._inputs)
        outs = ", ".join(f"{s.name}:{s.dtype}{list(s.shape)}" for s in self._outputs)
        return f"<s4d.engine.Engine {self._device}: ({ins}) -> ({outs})>"


# cudaStreamLegacy: the handle of CUDA's legacy default stream, which torch reports as 0.
_LEGACY_STREAM = 1


def _torch_stream(handle):
    """The C API's handle of a torch stream: torch's default stream is CUDA's legacy
    default stream (0 there), which the C API takes as cudaStreamLegacy; its NULL
    would mean the context's own stream, unordered with torch's work."""
    return int(handle) or _LEGACY_STREAM


def _stream_address(stream):
    if stream is None:
        return None
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        return _torch_stream(stream.cuda_stream)
    if isinstance(stream, int) and not isinstance(stream, bool):
        if not 0 <= stream < 2 ** 64:
            raise InvalidArgumentError(f"stream {stream} is not an address")
        return stream or None
    if isinstance(stream, ctypes.c_void_p):
        return stream.value
    raise InvalidArgumentError(f"stream must be an int address or a torch.cuda.Stream, got "
                               f"{type(stream).__name__}")


def _overlap(a, b):
    return a.memory == b.memory and a.nbytes and b.nbytes and \
        a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes


class _Busy:
    """A context belongs to one thread at a time; a second thread calling in
    gets an error instead of corrupting the run."""

    def __init__(self, ctx):
        self.ctx = ctx

    def __enter__(self):
        if not self.ctx._busy.acquire(blocking=False):
            raise InvalidArgumentError("the context is in use by another thread; create one "
                                       "context per thread")

    def __exit__(self, *exc):
        self.ctx._busy.release()


class Context(_Closing):
    """Per-thread run state of an engine: Engine.create_context() makes one.

    run({name: array}) binds the inputs (NumPy arrays or torch tensors; CUDA
    tensors as device memory on a CUDA engine, used in place), runs, and
    returns {output name: array}. Outputs given in outputs= are written in
    place; outputs bound with bind() stay bound and are returned; the others
    are new each run: NumPy arrays when every bound input is NumPy, torch
    tensors when one is a torch tensor, CUDA tensors (device memory, no copy)
    when one is a CUDA tensor. Inputs stay bound from one run to the next
    until rebound.
    """

    def __init__(self, engine, num_threads=0, profile=False, stream=None, use_graph=False,
                 graph_streams=0):
        if not isinstance(engine, Engine):
            raise InvalidArgumentError("Context needs an s4d.engine.Engine")
        L = _lib.lib()
        engine._ptr()  # a closed engine makes no contexts
        opts, opts_buf = _lib.new_options(_lib.ContextOptions, L.s4d_context_options_init)
        opts.num_threads = _int_or_none(num_threads, "num_threads")
        opts.profile = int(bool(profile))
        opts.use_graph = int(bool(use_graph))
        gs = _int_or_none(graph_streams, "graph_streams")
        if not 0 <= gs <= 8:
            raise InvalidArgumentError(f"graph_streams is {gs}: 1 .. 8, or 0 for the default")
        opts.graph_streams = gs
        opts.stream = _stream_address(stream)
        hold = engine._h.acquire()
        eptr = hold.ptr
        out = ctypes.c_void_p()
        err = _lib.ErrBuf()
        st = L.s4d_context_create(eptr, ctypes.byref(opts), ctypes.byref(out), ctypes.byref(err))
        del opts_buf
        if st != _lib.OK:
            hold.release()
            _errbuf_check(st, err)
        self._h = _Handle(out.value, L.s4d_context_destroy, "context", [hold])
        self._open = True
        self._engine = engine
        self._device = engine._device
        self._device_code = _device_code(engine._device)
        self._guarded = engine._target.get("arch") == "guarded"
        self._inputs = list(engine._inputs)
        self._outputs = list(engine._outputs)
        self._specs = {s.name: s for s in self._inputs + self._outputs}
        self._input_names = {s.name for s in self._inputs}
        self._profile = bool(profile)
        self._num_layers = _lib.lib().s4d_engine_num_layers(eptr)
        self._bound = {}      # name -> _arrays.Memory
        self._objects = {}    # output name -> the object bound to it
        self._auto = set()    # outputs bound by run() itself (replaced at the next run)
        self._inflight = []   # memory an enqueue may still read or write
        self._events = {}     # input name -> the event its readers wait for
        self._busy = threading.Lock()

    def _ptr(self):
        if not self._open:
            raise ClosedError("the context is closed")
        return self._h.ptr

    def _fail(self, status):
        _raise(status, _lib.text(_lib.lib().s4d_context_errmsg(self._h.ptr)))

    @property
    def engine(self) -> Engine:
        """The Engine (None once the context is closed)."""
        return self._engine

    @property
    def inputs(self) -> List[TensorSpec]:
        return list(self._inputs)

    @property
    def outputs(self) -> List[TensorSpec]:
        return list(self._outputs)

    # -- binding
    def _bind_memory(self, name, m, memory=None):
        ptr = self._ptr()
        mem = m.memory if memory is None else memory
        dims = (ctypes.c_int64 * max(len(m.shape), 1))(*m.shape)
        st = _lib.lib().s4d_context_bind_memory(ptr, _encode(name, "tensor name"), m.dtype,
                                                len(m.shape), dims, m.ptr, mem)
        if st != _lib.OK:
            self._fail(st)
        old = self._bound.get(name)
        if old is not None and self._inflight:
            self._inflight.append(old)
        self._bound[name] = m._replace(memory=mem)

    def _memory_of(self, name, obj):
        is_output = name in self._specs and name not in self._input_names
        role = "output" if is_output else "input"
        return _arrays.as_memory(obj, name, role, is_output, self._device_code)

    def bind(self, name, obj, memory=None):
        """Binds obj (NumPy array, torch tensor or DeviceBuffer) to input or
        output `name` until rebound. memory: "host" or "device" to override
        where the memory is said to live (the library checks it)."""
        with _Busy(self):
            mem = {None: None, "host": _lib.MEMORY_HOST, "device": _lib.MEMORY_DEVICE}.get(
                memory, -1)
            if mem == -1:
                raise InvalidArgumentError(f"memory must be 'host' or 'device', got {memory!r}")
            self._bind_memory(name, self._memory_of(name, obj), mem)
            self._auto.discard(name)
            self._objects[name] = obj

    def unbind(self, name):
        """Forgets what is bound to name (an output goes back to the
        context's own buffer)."""
        with _Busy(self):
            ptr = self._ptr()
            st = _lib.lib().s4d_context_bind_memory(ptr, _encode(name, "tensor name"), 0, 0,
                                                    None, None, _lib.MEMORY_HOST)
            if st != _lib.OK:
                self._fail(st)
            old = self._bound.pop(name, None)
            if old is not None and self._inflight:
                self._inflight.append(old)
            self._auto.discard(name)
            self._objects.pop(name, None)

    def _bind_inputs(self, inputs):
        if inputs is None:
            return
        if not isinstance(inputs, dict):
            raise InvalidArgumentError(f"inputs must be a dict {{name: array}}, got "
                                       f"{type(inputs).__name__}")
        for name, obj in inputs.items():
            if name in self._specs and name not in self._input_names:
                raise InvalidArgumentError(f"'{name}' is an output of the engine, not an input; "
                                           "pass it in outputs=")
            self._bind_memory(name, self._memory_of(name, obj))

    def _output_like(self):
        """How to allocate outputs: None (NumPy), "torch" or a CUDA device."""
        like = None
        for name in self._input_names:
            m = self._bound.get(name)
            if m is None or m.kind != "torch":
                continue
            if m.memory == _lib.MEMORY_DEVICE and m.cuda_device is not None:
                return m.keep.device
            like = "torch"
        return like

    def _bind_outputs(self, outputs):
        if outputs is not None and not isinstance(outputs, dict):
            raise InvalidArgumentError(f"outputs must be a dict {{name: array}}, got "
                                       f"{type(outputs).__name__}")
        outputs = dict(outputs or {})
        for name in outputs:
            if name not in self._specs:
                # the library's message lists the engine's names
                self._bind_memory(name, self._memory_of(name, outputs[name]))
            if name in self._input_names:
                raise InvalidArgumentError(f"'{name}' is an input of the engine, not an output")
        like = self._output_like()
        inputs = [self._bound[n] for n in self._input_names if n in self._bound]
        plan = []
        for spec in self._outputs:
            name = spec.name
            if outputs.get(name) is not None:
                obj = outputs[name]
                m = self._memory_of(name, obj)
            elif name in self._bound and name not in self._auto:
                # bound with bind(): it stays, and run() returns it
                obj, m = self._objects[name], None
            else:
                obj = _arrays.allocate(_arrays.CODE_BY_NAME[spec.dtype], spec.shape, like)
                m = self._memory_of(name, obj)
            mine = m if m is not None else self._bound[name]
            for other in [x[2] for x in plan] + inputs:
                if _overlap(mine, other):
                    raise InvalidArgumentError(f"output '{name}' shares memory with another "
                                               "bound input or output")
            plan.append((name, obj, mine, m is not None))
        for name, obj, m, rebind in plan:
            if rebind:
                self._bind_memory(name, m)
                self._auto.add(name)
                self._objects[name] = obj
        return {name: obj for name, obj, _, _ in plan}

    def _stream_for(self, stream):
        s = _stream_address(stream)
        if s is not None:
            return s
        # CUDA tensors: torch's current stream on their device, so that the
        # run is ordered with the work that made them and the work that reads them
        for m in self._bound.values():
            if m.kind == "torch" and m.memory == _lib.MEMORY_DEVICE:
                torch = _arrays.torch_module()
                return _torch_stream(torch.cuda.current_stream(m.keep.device).cuda_stream)
        return None

    def enqueue(self, inputs=None, outputs=None, stream=None) -> Dict[str, object]:
        """Binds inputs and outputs and queues one run on stream without
        waiting (on the CPU it is done on return). Returns the output
        objects; host ones hold the results after synchronize(), device ones
        in stream order. Everything bound stays referenced until then."""
        with _Busy(self):
            return self._enqueue(inputs, outputs, stream)

    def _enqueue(self, inputs, outputs, stream):
        ptr = self._ptr()
        self._bind_inputs(inputs)
        result = self._bind_outputs(outputs)
        s = self._stream_for(stream)
        self._inflight.extend(self._bound.values())
        st = _lib.lib().s4d_context_enqueue(ptr, s)
        if st != _lib.OK:
            self._fail(st)
        return result

    def synchronize(self):
        """Waits for everything enqueued on this context."""
        with _Busy(self):
            self._synchronize()

    def _synchronize(self):
        ptr = self._ptr()
        st = _lib.lib().s4d_context_synchronize(ptr)
        self._inflight = []
        if st != _lib.OK:
            self._fail(st)

    def run(self, inputs=None, outputs=None, stream=None) -> Dict[str, object]:
        """Binds inputs ({name: array}; inputs bound before stay bound),
        runs, waits, and returns {output name: array} in engine order.
        outputs: {name: preallocated array or tensor} to write into this run."""
        with _Busy(self):
            result = self._enqueue(inputs, outputs, stream)
            self._synchronize()
            return result

    __call__ = run

    def set_input_event(self, name, event):
        """Makes the layers that read input `name` wait for event (a
        torch.cuda.Event, or a cudaEvent_t as an int address; None clears
        it) while the layers that do not read it start at once (see
        s4d_context_set_input_event). Record the event after the work that
        writes the input and before each enqueue. Refused on a CPU engine."""
        if event is None:
            handle = None
        elif hasattr(event, "cuda_event"):  # torch.cuda.Event
            handle = int(event.cuda_event)
            if not handle:
                raise InvalidArgumentError(
                    f"input event for '{name}': the torch.cuda.Event has no CUDA event yet; "
                    f"record it once first")
        elif isinstance(event, int) and not isinstance(event, bool):
            if not 0 < event < 2 ** 64:
                raise InvalidArgumentError(f"event {event} is not an address")
            handle = event
        else:
            raise InvalidArgumentError(f"event must be a torch.cuda.Event, an int address or "
                                       f"None, got {type(event).__name__}")
        with _Busy(self):
            ptr = self._ptr()
            st = _lib.lib().s4d_context_set_input_event(ptr, _encode(name, "tensor name"), handle)
            if st != _lib.OK:
                self._fail(st)
            # the event object stays alive as long as the context may wait for it
            self._events[name] = event

    def device_buffer(self, name) -> "DeviceBuffer":
        """The context's own buffer of an input or output on the engine's
        device (see s4d_context_device_buffer): bind it to another context's
        input to chain engines without a round trip through the host."""
        with _Busy(self):
            ptr = self._ptr()
            data = ctypes.c_void_p()
            st = _lib.lib().s4d_context_device_buffer(ptr, _encode(name, "tensor name"),
                                                      ctypes.byref(data))
            if st != _lib.OK:
                self._fail(st)
            return DeviceBuffer(self, self._specs[name], data.value)

    def layer_times(self) -> List[float]:
        """Milliseconds of each layer in the last run (profile=True)."""
        with _Busy(self):
            ptr = self._ptr()
            if not self._profile:
                raise InvalidArgumentError("layer times need a context created with "
                                           "profile=True")
            L = _lib.lib()
            out = []
            for i in range(self._num_layers):
                ms = ctypes.c_double()
                st = L.s4d_context_layer_time(ptr, i, ctypes.byref(ms))
                if st != _lib.OK:
                    _raise(st, f"reading the time of layer {i} failed")
                out.append(ms.value)
            return out

    # -- lifetime
    def close(self):
        """Waits for queued work, then gives up the context (buffers taken
        from device_buffer() keep its memory until they go)."""
        if not getattr(self, "_open", False):
            return
        with _Busy(self):
            if self._inflight:
                try:
                    _lib.lib().s4d_context_synchronize(self._h.ptr)
                except Exception:
                    pass
            self._open = False
            self._h.release()
            self._bound = {}
            self._objects = {}
            self._inflight = []
            self._engine = None

    @property
    def closed(self):
        return not self._open

    def __repr__(self):
        state = "closed" if not getattr(self, "_open", False) else self._device
        return f"<s4d.engine.Context {state}>"


class DeviceBuffer:
    """A context's own buffer of one input or output (Context.device_buffer):
    bind it to an input of another context (zero copy on the device). It
    keeps the context's memory alive while it exists. On a real CUDA engine
    it has __cuda_array_interface__ (torch.as_tensor(buf, device="cuda")
    wraps it without a copy); on a CPU engine it has __array_interface__."""

    def __init__(self, ctx, spec, ptr):
        self._h = ctx._h.acquire()
        self.ptr = int(ptr)
        self.name = spec.name
        self.dtype = spec.dtype
        self.shape = spec.shape
        self.nbytes = spec.nbytes
        self.device = ctx._device
        self._code = _arrays.CODE_BY_NAME[spec.dtype]
        self._memory = _lib.MEMORY_DEVICE
        self._readable = ctx._device == "cpu" or not ctx._guarded
        self._released = False

    def _check_open(self):
        if self._released:
            raise ClosedError(f"device buffer of '{self.name}' is released")

    def _typestr(self):
        if self._code == _arrays.BFLOAT16:
            raise DtypeError("bfloat16 has no array-interface type string")
        return _arrays.numpy_dtype(self._code).str

    @property
    def __array_interface__(self):
        self._check_open()
        if self.device != "cpu":
            raise AttributeError("a CUDA device buffer has no __array_interface__ (use "
                                 "__cuda_array_interface__)")
        return {"shape": self.shape, "typestr": self._typestr(), "data": (self.ptr, False),
                "version": 3}

    @property
    def __cuda_array_interface__(self):
        self._check_open()
        if self.device != "cuda" or not self._readable:
            raise AttributeError("only a buffer of a real CUDA engine has "
                                 "__cuda_array_interface__")
        return {"shape": self.shape, "typestr": self._typestr(), "data": (self.ptr, False),
                "version": 2, "strides": None}

    def __del__(self):
        # only here: a NumPy or torch view made from it keeps it alive
        try:
            if not self._released:
                self._released = True
                self._h.release()
        except Exception:
            pass

    def __repr__(self):
        return (f"<s4d.engine.DeviceBuffer '{self.name}' {self.dtype}{list(self.shape)} on "
                f"{self.device} at {self.ptr:#x}>")
