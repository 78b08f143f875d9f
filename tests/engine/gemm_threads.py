"""Large matrix products on the CPU engine: the same bits on 1, 2 and 3 threads.

usage: gemm_threads.py S4DEXEC PLUGINS SCRATCH

Products of 8 million multiply-adds or more run in panels of rows (or of columns when they
have few rows) whose bounds depend on the shape alone, one single-threaded OpenBLAS call
each, on the context's pool (src/ops/dense_util.c). OpenBLAS's own threads split a product
by their number and changed the last bits of its outputs with the thread count (a
900 x 256 x 1024 MatMul: 5.7% of its elements on 1 against 2 threads). Each case - MatMul
split by rows and by columns, a batch of large products, Gemm with transposes, alpha and
beta, float64, an attention block - must give the same bits on 1, 2 and 3 threads and agree
with a float64 NumPy product: relative L2 <= 1e-6 (float32) or 1e-13 (float64).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from exec_util import load_inputs_flag, output_on_threads  # noqa: E402

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def graph(nodes, inputs, inits, dtype=F32):
    g = helper.make_graph(nodes, "products", [helper.make_tensor_value_info(n, dtype, list(a.shape))
                                              for n, a in inputs.items()],
                          [helper.make_tensor_value_info("y", dtype, None)],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def matmul(rng, a_shape, b_shape, dtype=np.float32):
    a = rng.standard_normal(a_shape).astype(dtype)
    b = (rng.standard_normal(b_shape) / np.sqrt(b_shape[-2])).astype(dtype)
    m = graph([helper.make_node("MatMul", ["a", "B"], ["y"])], {"a": a}, {"B": b},
              F64 if dtype == np.float64 else F32)
    return m, {"a": a}, np.matmul(a.astype(np.float64), b.astype(np.float64))


def gemm(rng, m, n, k, ta, tb, alpha, beta):
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = (rng.standard_normal((n, k) if tb else (k, n)) / np.sqrt(k)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node("Gemm", ["a", "B", "C"], ["y"], transA=ta, transB=tb, alpha=alpha, beta=beta)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = alpha * ((a64.T if ta else a64) @ (b64.T if tb else b64)) + beta * c.astype(np.float64)
    return graph([node], {"a": a}, {"B": b, "C": c}), {"a": a}, want


def attention(rng, nq, nk, d):
    """softmax(Q K^T / sqrt(d)) V with 900 x 600 x 256 products (the temporal attention's sizes)."""
    q = rng.standard_normal((1, nq, d)).astype(np.float32)
    k = rng.standard_normal((1, nk, d)).astype(np.float32)
    v = rng.standard_normal((1, nk, d)).astype(np.float32)
    scale = np.array(1.0 / np.sqrt(d), np.float32)
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]),
             helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    s = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 2, 1) * float(scale)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return graph(nodes, {"q": q, "k": k, "v": v}, {"scale": scale}), {"q": q, "k": k, "v": v}, p @ v.astype(np.float64)


CASES = [  # name, builder
    ("rows_900x256x1024", lambda r: matmul(r, (900, 256), (256, 1024))),
    ("rows_odd_901x255x257", lambda r: matmul(r, (901, 257), (257, 255))),
    ("columns_16x2048x1024", lambda r: matmul(r, (16, 2048), (2048, 1024))),
    ("batch_4x300x256x256", lambda r: matmul(r, (4, 300, 256), (4, 256, 256))),
    ("gemm_transposed", lambda r: gemm(r, 700, 384, 512, 1, 1, 0.75, 1.5)),
    ("gemm_trans_a", lambda r: gemm(r, 600, 512, 300, 1, 0, 1.0, 1.0)),
    ("float64", lambda r: matmul(r, (500, 300), (300, 400), np.float64)),
    ("attention_900x600x256", lambda r: attention(r, 900, 600, 256)),
]


def main():
    exe, plugins, scratch = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    rng = np.random.default_rng(11)
    failures = 0
    for name, build in CASES:
        d = os.path.join(scratch, name)
        os.makedirs(d, exist_ok=True)
        m, inputs, want = build(rng)
        path = os.path.join(d, "model.onnx")
        onnx.save(m, path)
        flag = load_inputs_flag(d, inputs)
        outs = output_on_threads(exe, [f"--onnx={path}", f"--plugins={plugins}", "--iterations=1",
                                       "--warmUp=0", flag], d)
        got = outs[1]
        rel = float(np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want))
        limit = 1e-13 if got.dtype == np.float64 else 1e-6
        ok = got.shape == want.shape and rel <= limit
        bits = got.view(np.uint64 if got.dtype == np.float64 else np.uint32)
        differ = {t: int(np.sum(bits != outs[t].view(bits.dtype))) for t in (2, 3)}
        same = not any(differ.values())
        print(f"{'ok  ' if ok and same else 'FAIL'} {name}: relative L2 {rel:.3g} against float64 "
              f"(limit {limit:g}); elements differing from 1 thread: 2 threads {differ[2]}, "
              f"3 threads {differ[3]} of {got.size}")
        failures += not (ok and same)
    print(f"{len(CASES)} cases, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
