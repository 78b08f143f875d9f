"""Engine files whose residual-fused s4d::FusedMatMul layer was edited into something the layer's
device cannot run are refused at load with a clear error.

usage: residual_hostile.py S4DEXEC PLUGINS SCRATCH [--device cpu|cuda]

(engine.residual_hostile, engine_guarded.residual_hostile, engine.residual_hostile_host_only
and cuda_engine.residual_hostile run it.)

Builds an engine of (x W + b) + x on the device (the residual fusion makes it one FusedMatMul
whose input 5 is x, src/passes/fuse_matmul.c), checks that it loads and runs as built, then edits
the layer one way at a time (tests/fuzz/engine_file.py recomputes the sizes and the checksum, as
anyone can):
  - on every device, edits the schema refuses: a residual of another shape, a bias of another
    shape (exit 1, a message naming the layer and the input);
  - an activation beside the residual, and a bias that is not a constant (a graph input): the
    host kernels run both (LayerNorm-free ReLU(x W + b) + x, checked here against float64
    NumPy), CUDA's epilogue cannot (cuBLASLt adds the residual before its ReLU, and takes the
    residual only with a constant bias). On a real GPU both must fail the load with exit 1 and
    the reason; on the CPU and on the guarded test device (S4D_TEST_BACKEND=guarded, host
    kernels behind device memory) both must load and give the float64 values.
Exit 77 when the device is CUDA and this machine has none.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from exec_util import (NO_GPU, check_hostile_layers, engine_tensor, fused_layer_of,  # noqa: E402
                       fusion_arg_parser, layer_attr, load_inputs_flag, s4dexec_plugins, says_no_gpu)
from engine_file import EngineFile  # noqa: E402

F32 = TensorProto.FLOAT
ROWS, WIDTH = (2, 21), 32


def model(rng):
    w = rng.uniform(-0.5, 0.5, (WIDTH, WIDTH)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, (WIDTH,)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["p"], name="proj"),
             helper.make_node("Add", ["p", "b"], ["q"], name="bias"),
             helper.make_node("Add", ["q", "x"], ["o"], name="residual"),
             helper.make_node("Mul", ["v", "v"], ["v2"], name="square")]
    g = helper.make_graph(nodes, "residual_hostile",
                          [helper.make_tensor_value_info("x", F32, list(ROWS) + [WIDTH]),
                           helper.make_tensor_value_info("v", F32, [WIDTH])],
                          [helper.make_tensor_value_info("o", F32, None),
                           helper.make_tensor_value_info("v2", F32, None)],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w, b


def set_input(slot, source):
    """An edit that makes the layer's input `slot` the tensor of its input `source`, or of the
    engine tensor named by a string."""
    def edit(layer, engine=None):
        v = list(layer["inputs"])
        v[slot] = v[source] if isinstance(source, int) else engine_tensor(engine, source)
        layer["inputs"] = v
    return edit


def relu(layer, engine=None):
    layer_attr(layer, "activation")["value"] = b"Relu"


def edited(engine, path, edit):
    e = EngineFile.load(engine)
    edit(fused_layer_of(e, "FusedMatMul"), e)
    e.save(path)
    return path


def main():
    args = fusion_arg_parser().parse_args()  # -k is accepted and ignored: one model
    os.makedirs(args.scratch, exist_ok=True)
    rng = np.random.default_rng(5)
    m, w, b = model(rng)
    x = rng.uniform(-1.0, 1.0, ROWS + (WIDTH,)).astype(np.float32)
    v = rng.uniform(-1.0, 1.0, (WIDTH,)).astype(np.float32)
    onnx_path = os.path.join(args.scratch, "model.onnx")
    onnx.save(m, onnx_path)
    engine = os.path.join(args.scratch, "good.s4de")
    inputs = load_inputs_flag(args.scratch, {"x": x, "v": v})
    p = s4dexec_plugins(args.s4dexec, args.plugins, [f"--onnx={onnx_path}", f"--device={args.device}",
                                             f"--saveEngine={engine}", f"--exportOutput={args.scratch}/built"])
    said = p.stderr.strip()
    if p.returncode != 0 and args.device == "cuda" and says_no_gpu(said):
        print(f"no CUDA device or backend here; skipping ({said.splitlines()[-1]})")
        return NO_GPU
    if p.returncode != 0:
        print(f"FAIL building the engine: {said}")
        return 1
    e = EngineFile.load(engine)
    layer = fused_layer_of(e, "FusedMatMul")
    dev = "cuda" if layer["device"] != 0 else "cpu"
    real_gpu = dev == "cuda" and not os.environ.get("S4D_TEST_BACKEND")
    print(f"fused layer '{layer['name']}' on {dev}{' (a real GPU)' if real_gpu else ''}, inputs {layer['inputs']}")
    if dev != args.device:
        print(f"FAIL the fused layer is on {dev}, not on {args.device}")
        return 1

    # Edits every device refuses.
    failures = check_hostile_layers(args.s4dexec, args.plugins, args.scratch, engine, "FusedMatMul", [
        ("residual_shape", set_input(5, 1), "the residual (input 5) must be float32 [2, 21, 32]"),
        ("bias_shape", set_input(2, 0), "the bias must be float32 [32]"),
    ], "layers")

    # Edits only CUDA's epilogue refuses; the host kernels run them.
    x64, w64, b64, v64 = (a.astype(np.float64) for a in (x, w, b, v))
    cuda_only = [("relu_with_residual", relu, "an activation with a residual",
                  np.maximum(x64 @ w64 + b64, 0.0) + x64),
                 ("nonconstant_bias", set_input(2, "v"), "a residual with a bias that is not a constant",
                  x64 @ w64 + v64 + x64)]
    for case, edit, why, want in cuda_only:
        path = edited(engine, os.path.join(args.scratch, f"{case}.s4de"), edit)
        out = os.path.join(args.scratch, f"{case}_out")
        p = s4dexec_plugins(args.s4dexec, args.plugins, [f"--loadEngine={path}", inputs, f"--exportOutput={out}"])
        msg = (p.stderr.strip().splitlines() or [""])[-1]
        if real_gpu:
            ok = p.returncode == 1 and why in p.stderr and layer["name"] in p.stderr
            print(f"{'ok' if ok else 'FAIL'} {case}: refused on the GPU: exit {p.returncode}: {msg}")
            if not ok:
                print(f"    expected exit 1 and a message with '{why}' naming '{layer['name']}'")
        else:
            ok = p.returncode == 0
            err = "does not load" if not ok else ""
            if ok:
                got = np.load(os.path.join(out, "o.npy")).astype(np.float64)
                err = np.abs(got - want).max()
                ok = bool(np.all(np.abs(got - want) <= 1e-5 + 1e-5 * np.abs(want)))
            print(f"{'ok' if ok else 'FAIL'} {case}: runs on the host kernels ({dev}), max error {err}: {msg}")
        failures += 0 if ok else 1
    print(f"{2 + len(cuda_only)} edited engines, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
