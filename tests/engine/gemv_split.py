"""Gemm with one row of A (a classifier's last layer) on the CPU engine, 1 to 3 threads.

usage: gemv_split.py S4DEXEC PLUGINS SCRATCH

The CPU kernel splits the outputs of a large enough product over the pool, one sgemv per
thread. Each case (transB 0 and 1, alpha, beta with a bias C, output counts around the
64-output part boundary, products large enough to split and too small to) must give the same
bits on 1, 2 and 3 threads and agree with a float64 NumPy product within rtol 1e-5 (float32
dot products of up to 8000 terms of mixed signs), atol 1e-5 of the largest output. An empty
product (N = 0) must give an empty output.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import load_inputs_flag, output_on_threads  # noqa: E402

CASES = [  # name, N, K, transB, alpha, beta (None: no C)
    ("classifier", 1000, 1280, 1, 1.0, 1.0),
    ("wide_k", 65, 8000, 1, 1.0, None),
    ("odd_n", 2049, 300, 1, 0.5, 2.0),
    ("b_not_transposed", 1000, 1280, 0, 1.0, 1.0),
    ("not_transposed_odd", 130, 4000, 0, 1.5, None),
    ("small", 63, 7, 1, 1.0, 1.0),
    ("empty", 0, 16, 1, 1.0, None),
]


def model(n, k, tb, alpha, beta, rng):
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32) / np.sqrt(k)
    inits = [numpy_helper.from_array(b, "B")]
    ins = ["a", "B"]
    c = None
    if beta is not None:
        c = rng.standard_normal(n).astype(np.float32)
        inits.append(numpy_helper.from_array(c, "C"))
        ins.append("C")
    attrs = {"transB": tb, "alpha": alpha}
    if beta is not None:
        attrs["beta"] = beta
    node = helper.make_node("Gemm", ins, ["y"], **attrs)
    g = helper.make_graph([node], "gemv", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), b, c


def main():
    exe, plugins, scratch = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    rng = np.random.default_rng(7)
    failures = 0
    for name, n, k, tb, alpha, beta in CASES:
        d = os.path.join(scratch, name)
        os.makedirs(d, exist_ok=True)
        m, b, c = model(n, k, tb, alpha, beta, rng)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        a = rng.standard_normal((1, k)).astype(np.float32)
        flag = load_inputs_flag(d, {"a": a})
        want = alpha * (a.astype(np.float64) @ (b.T if tb else b).astype(np.float64))[0]
        if c is not None:
            want = want + beta * c.astype(np.float64)
        outs = {t: y.reshape(-1) for t, y in output_on_threads(
            exe, [f"--onnx={path}", f"--plugins={plugins}", "--iterations=1", "--warmUp=0", flag],
            d).items()}
        err = np.abs(outs[1].astype(np.float64) - want)
        tol = 1e-5 * np.abs(want) + 1e-5 * (np.abs(want).max() if want.size else 0.0)
        ok = outs[1].shape == want.shape and bool(np.all(err <= tol))
        same = all(np.array_equal(outs[1].view(np.uint32), outs[t].view(np.uint32)) for t in (2, 3))
        print(f"{'ok  ' if ok and same else 'FAIL'} {name}: N {n} K {k} transB {tb}: max abs err "
              f"{err.max() if err.size else 0.0:.3g} against float64; 2 and 3 threads {'equal' if same else 'DIFFER'} "
              f"bit for bit")
        failures += not (ok and same)
    print(f"{len(CASES)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
