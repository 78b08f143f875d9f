"""Shared by the s4d.engine tests: where the build is, and the small ONNX
models (tests/engine/make_models.py's, plus a few for dtypes and
shape-carrying inputs) with float64 NumPy references of what they compute."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("S4D_BUILD", os.path.join(REPO, "build")))
LIBS4D = os.environ.get("S4D_LIB", os.path.join(BUILD, "lib", "libs4d.so"))
PLUGINS = os.path.join(BUILD, "lib", "libs4d_plugins.so")
S4DEXEC = os.path.join(BUILD, "bin", "s4dexec")
OPSET = [helper.make_opsetid("", 17)]


def require_build():
    """Fails (not skips) when the build is missing: `make test` builds it first."""
    for path in (LIBS4D, PLUGINS):
        assert os.path.isfile(path), f"{path} is missing: build the project first (make)"


def repo_module(relpath, name=None):
    """The script at REPO/relpath (e.g. "bench/plan_paths.py") imported as a module."""
    name = name or os.path.splitext(os.path.basename(relpath))[0]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, relpath))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _make_models_module():
    return repo_module("tests/engine/make_models.py", "s4d_engine_make_models")


def dtypes_model(out):
    """x float32[3,4], i int64[3,4], b bool[3,4] -> y = Where(b, 2x, x - 1),
    j = i * i + i, k = Not(b), c = Cast<int32>(i)."""
    nodes = [
        helper.make_node("Add", ["x", "x"], ["x2"], name="double"),
        helper.make_node("Sub", ["x", "one"], ["xm"], name="minus_one"),
        helper.make_node("Where", ["b", "x2", "xm"], ["y"], name="where"),
        helper.make_node("Mul", ["i", "i"], ["ii"], name="square"),
        helper.make_node("Add", ["ii", "i"], ["j"], name="plus"),
        helper.make_node("Not", ["b"], ["k"], name="not"),
        helper.make_node("Cast", ["i"], ["c"], name="cast", to=TensorProto.INT32),
    ]
    g = helper.make_graph(
        nodes, "dtypes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [3, 4]),
         helper.make_tensor_value_info("b", TensorProto.BOOL, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("j", TensorProto.INT64, [3, 4]),
         helper.make_tensor_value_info("k", TensorProto.BOOL, [3, 4]),
         helper.make_tensor_value_info("c", TensorProto.INT32, [3, 4])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one")])
    onnx.save(helper.make_model(g, opset_imports=OPSET), os.path.join(out, "dtypes.onnx"))


def dtypes_reference(x, i, b):
    x = x.astype(np.float64)
    return {"y": np.where(b, 2 * x, x - 1), "j": i * i + i, "k": ~b, "c": i.astype(np.int32)}


def reshape_input_model(out):
    """x float32[2,6] reshaped by the *input* s int64[2] -> y [3,4], then * 3."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
             helper.make_node("Mul", ["r", "three"], ["y"], name="scale")]
    g = helper.make_graph(
        nodes, "reshape_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
         helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [numpy_helper.from_array(np.array(3.0, np.float32), "three")])
    onnx.save(helper.make_model(g, opset_imports=OPSET),
              os.path.join(out, "reshape_input.onnx"))


def twice_model(out):
    """y = x + x with both dimensions of x symbolic (fixed by shapes= at build)."""
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"], name="add")], "twice",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["A", "B"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["A", "B"])])
    onnx.save(helper.make_model(g, opset_imports=OPSET), os.path.join(out, "twice.onnx"))


def write_models(out):
    """Every model the engine tests use, in out/."""
    os.makedirs(out, exist_ok=True)
    mm = _make_models_module()
    mm.mlp(out)
    mm.unsupported(out)
    mm.dynamic(out)
    mm.da_model(out, "da", "DeformableAggregation", "s4d", {"plugin_version": "1"})
    mm.da_model(out, "da_missing_plugin", "DeformableAggregation", "nowhere", {}, False)
    dtypes_model(out)
    reshape_input_model(out)
    twice_model(out)
    return out


def mlp_reference(models, x):
    """The mlp model in float64: y = Transpose(Reshape(Softmax(x W1 + b1), [4, 2])),
    z = x W1 + 2 b1."""
    w1 = np.load(os.path.join(models, "mlp_w1.npy")).astype(np.float64)
    b1 = np.load(os.path.join(models, "mlp_b1.npy")).astype(np.float64)
    h = x.astype(np.float64) @ w1 + b1
    s = np.exp(h - h.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    return {"y": s.reshape(4, 2).T, "z": x.astype(np.float64) @ w1 + 2 * b1}


def run_python(code, env=None, timeout=120):
    """Runs code in a fresh interpreter with the repository's python/ on the
    path; returns the CompletedProcess."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.path.join(REPO, "python") + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("S4D_BUILD", BUILD)
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=timeout)
