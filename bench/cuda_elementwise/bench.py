"""Times the element-wise CUDA kernels on the Sparse4Dv3 shapes against PyTorch.

    bench.py S4DEXEC PLUGINS WORKDIR OUT_MD [--iterations 200]

For each case: a one-node ONNX model run by s4dexec on the CUDA device with
--dumpProfile (the layer's mean time from CUDA events around its launch, over
the timed iterations, inputs resident on the device), and the same op in
PyTorch (CUDA events around each call, mean over as many calls). Effective
bandwidth counts each input and the output once. Writes a markdown table to
OUT_MD and prints it.
"""
import argparse
import os
import re
import subprocess
import sys
import time

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from s4d.exec import read_profile  # noqa: E402

F32, F16, B, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BOOL, TensorProto.INT64
NP = {F32: np.float32, F16: np.float16, B: np.bool_, I64: np.int64}

# (name, op, [(input shape, dtype)], output dtype, attributes, torch function; None: torch.where)
CASES = [
    ("bias add [1,900,256]+[256]", "Add", [([1, 900, 256], F32), ([256], F32)], F32, {}, lambda a, b: a + b),
    ("residual add [1,900,256]", "Add", [([1, 900, 256], F32), ([1, 900, 256], F32)], F32, {}, lambda a, b: a + b),
    ("camera embed [1,900,1,256]+[1,1,6,256]", "Add", [([1, 900, 1, 256], F32), ([1, 1, 6, 256], F32)], F32, {},
     lambda a, b: a + b),
    ("weights bias [416]+[1,900,6,416]", "Add", [([416], F32), ([1, 900, 6, 416], F32)], F32, {},
     lambda a, b: a + b),
    ("anchor scale [1,900,1]*[1,900,13]", "Mul", [([1, 900, 1], F32), ([1, 900, 13], F32)], F32, {},
     lambda a, b: a * b),
    ("project div [1,6,11700,2]/[1,6,11700,1]", "Div", [([1, 6, 11700, 2], F32), ([1, 6, 11700, 1], F32)], F32,
     {}, lambda a, b: a / b),
    ("relu [1,900,256]", "Relu", [([1, 900, 256], F32)], F32, {}, lambda a: a.relu()),
    ("ffn relu [1,900,1024]", "Relu", [([1, 900, 1024], F32)], F32, {}, lambda a: a.relu()),
    ("sigmoid [1,900,6,3]", "Sigmoid", [([1, 900, 6, 3], F32)], F32, {}, lambda a: a.sigmoid()),
    ("greater [1,900] > [1]", "Greater", [([1, 900], F32), ([1], F32)], B, {}, lambda a, b: a > b),
    ("where [1,1,1] ? [1,900,256] : [1]", "Where", [([1, 1, 1], B), ([1, 900, 256], F32), ([1], F32)], F32, {},
     None),
    ("cast f32->f16 [1,900,256]", "Cast", [([1, 900, 256], F32)], F16, {"to": F16}, lambda a: a.half()),
    ("int64 add [1,300]+[1,1]", "Add", [([1, 300], I64), ([1, 1], I64)], I64, {}, lambda a, b: a + b),
    ("backbone add [6,256,64,176]", "Add", [([6, 256, 64, 176], F32), ([6, 256, 64, 176], F32)], F32, {},
     lambda a, b: a + b),
    ("backbone relu [6,256,64,176]", "Relu", [([6, 256, 64, 176], F32)], F32, {}, lambda a: a.relu()),
    ("backbone add f16 [6,256,64,176]", "Add", [([6, 256, 64, 176], F16), ([6, 256, 64, 176], F16)], F16, {},
     lambda a, b: a + b),
    ("bias add f16 [1,900,256]+[256]", "Add", [([1, 900, 256], F16), ([256], F16)], F16, {}, lambda a, b: a + b),
]


def model(op, ins, out_dtype, attrs):
    names = [f"x{i}" for i in range(len(ins))]
    shape = list(np.broadcast_shapes(*[tuple(s) for s, _ in ins]))
    node = helper.make_node(op, names, ["y"], name=op.lower(), **attrs)
    g = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info(n, t, s) for n, (s, t) in zip(names, ins)],
                          [helper.make_tensor_value_info("y", out_dtype, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), shape


def s4d_time(args, path, op):
    cmd = [args.s4dexec, f"--onnx={path}", f"--plugins={args.plugins}", "--device=cuda",
           f"--iterations={args.iterations}", "--warmUp=20", "--dumpProfile"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, (r.stderr.strip() or r.stdout.strip()).splitlines()[-1:]
    for _, _, layer_op, ms in read_profile(r.stdout):
        if layer_op == op:
            return ms * 1e3, None
    return None, ["no profile line for " + op]


def torch_time(fn, ins, iterations):
    import torch
    dev = torch.device("cuda")
    ts = []
    for shape, t in ins:
        if t == B:
            ts.append(torch.rand(shape, device=dev) > 0.5)
        elif t == I64:
            ts.append(torch.randint(0, 900, shape, device=dev))
        else:
            ts.append(torch.rand(shape, device=dev, dtype=torch.float16 if t == F16 else torch.float32))
    call = (lambda: torch.where(*ts)) if fn is None else (lambda: fn(*ts))
    for _ in range(20):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    total = 0.0
    for _ in range(iterations):
        start.record()
        call()
        end.record()
        end.synchronize()
        total += start.elapsed_time(end)
    return total / iterations * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("s4dexec")
    ap.add_argument("plugins")
    ap.add_argument("workdir")
    ap.add_argument("out_md")
    ap.add_argument("--iterations", type=int, default=200)
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    try:
        import torch
        have_torch = torch.cuda.is_available()
    except ImportError:
        have_torch = False
    rows = ["| case | bytes | s4d us | s4d GB/s | PyTorch us | PyTorch / s4d |",
            "| --- | ---: | ---: | ---: | ---: | ---: |"]
    failed = 0
    for name, op, ins, out_dtype, attrs, fn in CASES:
        m, shape = model(op, ins, out_dtype, attrs)
        path = os.path.join(args.workdir, re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_") + ".onnx")
        with open(path, "wb") as f:
            f.write(m.SerializeToString())
        nbytes = sum(int(np.prod(s)) * np.dtype(NP[t]).itemsize for s, t in ins)
        nbytes += int(np.prod(shape)) * np.dtype(NP[out_dtype]).itemsize
        us, err = s4d_time(args, path, op)
        if us is None:
            failed += 1
            rows.append(f"| {name} | {nbytes} | FAILED: {err} | | | |")
            continue
        tt = torch_time(fn, ins, args.iterations) if have_torch else None
        rows.append(f"| {name} | {nbytes} | {us:.2f} | {nbytes / us / 1e3:.0f} | "
                    + (f"{tt:.2f} | {tt / us:.2f}x |" if tt else "n/a | |"))
    head = (f"Element-wise CUDA kernels, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; s4d: layer time "
            f"from --dumpProfile (mean of {args.iterations} iterations after 20 warm-up), PyTorch: CUDA events "
            f"around each call (mean of {args.iterations}).")
    text = head + "\n\n" + "\n".join(rows) + "\n"
    with open(args.out_md, "w") as f:
        f.write(text)
    print(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
