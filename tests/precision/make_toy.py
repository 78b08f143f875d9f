"""Writes the toy network of the fp16 accuracy-guard tests and its calibration sets.

toy.onnx: feat = Relu(Tanh(x * W) + b) on moderate values (benign in float16);
energy = Exp(Add(z, c)) with z + c in [10.5, 12.5], whose results pass float16's largest
value 65504 (e^11.09): in float16 the output is inf, so the guard must move that layer to
float32. Usage: make_toy.py OUTDIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(15)
    w = rng.uniform(0.5, 1.5, (1, 32)).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, 32).astype(np.float32)
    c = np.full((1, 16), 10.5, np.float32)
    nodes = [
        helper.make_node("Mul", ["x", "W"], ["mul_out"], name="scale"),
        helper.make_node("Tanh", ["mul_out"], ["tanh_out"], name="tanh"),
        helper.make_node("Add", ["tanh_out", "b"], ["add_out"], name="bias"),
        helper.make_node("Relu", ["add_out"], ["feat"], name="relu"),
        helper.make_node("Add", ["z", "c"], ["zc"], name="shift"),
        helper.make_node("Exp", ["zc"], ["energy"], name="exp_frag"),
    ]
    graph = helper.make_graph(
        nodes, "toy_fp16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [8, 32]),
         helper.make_tensor_value_info("energy", TensorProto.FLOAT, [8, 16])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "toy.onnx"))
    np.save(os.path.join(out, "W.npy"), w)
    np.save(os.path.join(out, "b.npy"), b)
    np.save(os.path.join(out, "c.npy"), c)
    # Two calibration sets, and a one-set directory.
    for s in range(2):
        d = os.path.join(out, "calib", "set%d" % s)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "x.npy"), rng.uniform(-1, 1, (8, 32)).astype(np.float32))
        np.save(os.path.join(d, "z.npy"), rng.uniform(0, 2, (8, 16)).astype(np.float32))
    d = os.path.join(out, "calib1")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "x.npy"), rng.uniform(-1, 1, (8, 32)).astype(np.float32))
    np.save(os.path.join(d, "z.npy"), rng.uniform(0, 2, (8, 16)).astype(np.float32))
    # Inputs for the run that is compared with the float64 reference.
    np.save(os.path.join(out, "x.npy"), rng.uniform(-1, 1, (8, 32)).astype(np.float32))
    np.save(os.path.join(out, "z.npy"), rng.uniform(0, 2, (8, 16)).astype(np.float32))
    main_chain(out)
    main_topk(out)
    views_chain(out)
    main_carried(out)
    main_selection(out)
    main_selection_long(out)


def chain_model(out, stem, views):
    """y = Sqrt(Mul(Exp(Add(z, c)), 1e-4)) * 2 + 0.5 as <stem>.onnx; with views, the
    fragile Exp and Mul sit between Reshapes to [128] and back to [8, 16]."""
    c = np.full((1, 16), 10.5, np.float32)
    k = np.full((128,) if views else (1, 16), 1e-4, np.float32)
    two = np.full((1, 16), 2.0, np.float32)
    half = np.full((1, 16), 0.5, np.float32)
    exp_in, sqrt_in = ("zf", "sg") if views else ("zc", "small")
    nodes = [helper.make_node("Add", ["z", "c"], ["zc"], name="shift")]
    if views:
        nodes.append(helper.make_node("Reshape", ["zc", "flat"], ["zf"], name="flatten_zc"))
    nodes += [helper.make_node("Exp", [exp_in], ["e"], name="exp_mid"),
              helper.make_node("Mul", ["e", "k"], ["small"], name="shrink")]
    if views:
        nodes.append(helper.make_node("Reshape", ["small", "grid"], ["sg"], name="unflatten"))
    nodes += [helper.make_node("Sqrt", [sqrt_in], ["t"], name="squash"),
              helper.make_node("Mul", ["t", "two"], ["t2"], name="double"),
              helper.make_node("Add", ["t2", "half"], ["y"], name="offset")]
    inits = [numpy_helper.from_array(c, "c"), numpy_helper.from_array(k, "k"),
             numpy_helper.from_array(two, "two"), numpy_helper.from_array(half, "half")]
    if views:
        inits += [numpy_helper.from_array(np.array([128], np.int64), "flat"),
                  numpy_helper.from_array(np.array([8, 16], np.int64), "grid")]
    graph = helper.make_graph(
        nodes, stem + "_fp16",
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, stem + ".onnx"))


def main_chain(out):
    """chain.onnx: y = Sqrt(Mul(Exp(Add(z, c)), 1e-4)) * 2 + 0.5, with the fragile Exp in the
    middle: in float16 Exp overflows; with Exp alone in float32 its output still overflows
    when it is cast to float16 for the Mul, so the guard must move the Mul as well. The
    benign layers around them must stay float16."""
    rng = np.random.default_rng(16)
    chain_model(out, "chain", False)
    for s in range(3):
        d = os.path.join(out, "calib_chain", "frame%d" % s)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "z.npy"), rng.uniform(0.5, 2, (8, 16)).astype(np.float32))
    np.save(os.path.join(out, "z_chain.npy"), rng.uniform(0.5, 2, (8, 16)).astype(np.float32))


def topk_scores(rng, n, k):
    """n scores: k near-tied ones (1 + 1e-5 * a shuffled rank, the same value in float16)
    at random positions and the others clearly lower, so that fp32 and fp16 select the
    same k rows in other orders."""
    s = rng.uniform(0.2, 0.5, n)
    top = rng.permutation(n)[:k]
    s[top] = 1.0 + 1e-5 * (1 + rng.permutation(k))
    return s.astype(np.float32)[None, :]


def main_topk(out, n=24, k=12, d=6):
    """topk.onnx: the decoding of a detection head in small. score = s * g (g = 2: a power of
    two scales every score exactly, and a gain of 1 would be no layer at all), the
    top k of the scores (TopK, sorted), rows = Gather(Tanh(f * w), indices) reshaped to
    [1, k, d]; also the sorted scores (top) and feat = Tanh(f * w) itself. In float16 the
    near-tied scores collapse and TopK returns them in index order: rows come out in
    another order (element by element an error of about 1.4) while every row is the
    same row rounded to float16."""
    rng = np.random.default_rng(17)
    w = rng.uniform(0.5, 1.5, (1, d)).astype(np.float32)
    g = np.full((1, n), 2.0, np.float32)
    kk = np.array([k], np.int64)
    flat = np.array([k], np.int64)
    shape3 = np.array([1, k, d], np.int64)
    nodes = [
        helper.make_node("Mul", ["s", "g"], ["score"], name="score_gain"),
        helper.make_node("TopK", ["score", "kk"], ["top", "idx"], name="select", axis=1),
        helper.make_node("Reshape", ["idx", "flat"], ["idx_flat"], name="idx_flat"),
        helper.make_node("Mul", ["f", "w"], ["fw"], name="feat_scale"),
        helper.make_node("Tanh", ["fw"], ["feat"], name="feat_tanh"),
        helper.make_node("Gather", ["feat", "idx_flat"], ["picked"], name="pick", axis=0),
        helper.make_node("Reshape", ["picked", "shape3"], ["rows"], name="rows_shape"),
    ]
    graph = helper.make_graph(
        nodes, "topk_fp16",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, n]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [n, d])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, k, d]),
         helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, k]),
         helper.make_tensor_value_info("feat", TensorProto.FLOAT, [n, d])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(g, "g"),
         numpy_helper.from_array(kk, "kk"), numpy_helper.from_array(flat, "flat"),
         numpy_helper.from_array(shape3, "shape3")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, "topk.onnx"))
    np.save(os.path.join(out, "topk_w.npy"), w)
    for name in ("calib_topk/a", "calib_topk/b", "topk_run"):
        dd = os.path.join(out, name)
        os.makedirs(dd, exist_ok=True)
        np.save(os.path.join(dd, "s.npy"), topk_scores(rng, n, k))
        np.save(os.path.join(dd, "f.npy"), rng.uniform(-1, 1, (n, d)).astype(np.float32))
SEL_SHIFT = 64.0


def selection_scores(rng, n, k):
    """n scores in [0, 1): k - 1 clearly high ones, the k-th and (k+1)-th 0.01 apart near
    0.51 (the (k+1)-th at the lower index, so that a tie selects it), the others low.
    s + 64 rounds both to 64.5 in float16 (a grid of 1/16 there)."""
    s = rng.uniform(0.05, 0.3, n)
    pos = rng.permutation(n)
    s[pos[:k - 1]] = rng.uniform(0.65, 0.95, k - 1)
    a, b = sorted(pos[k - 1:k + 1])
    s[a], s[b] = 0.505, 0.515
    return s.astype(np.float32)[None, :]


def selection_model(out, stem, seed, pairs, score_names, n=24, k=12, d=6):
    """The selection toys: the score chain of `pairs` (s + 64) - 64 pairs (node names from
    score_names(i)), TopK, and the feature path; writes <stem>.onnx, the weights and the
    calibration and run inputs (calib_<prefix>/a, /b, <prefix>_run; prefix: "sel" for
    "selection")."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.5, 1.5, (1, d)).astype(np.float32)
    nodes, inits, prev = [], [], "s"
    for i in range(pairs):
        shift = "shift" if pairs == 1 else f"shift{i}"
        add_name, sub_name = score_names(i)
        inits.append(numpy_helper.from_array(np.full((1, n), SEL_SHIFT, np.float32), shift))
        nodes.append(helper.make_node("Add", [prev, shift], [f"s_big{i}"], name=add_name))
        nodes.append(helper.make_node("Sub", [f"s_big{i}", shift], [f"score{i}"], name=sub_name))
        prev = f"score{i}"
    nodes += [
        helper.make_node("TopK", [prev, "kk"], ["top", "idx"], name="select", axis=1),
        helper.make_node("Reshape", ["idx", "flat"], ["idx_flat"], name="idx_flat"),
        helper.make_node("Mul", ["f", "w"], ["fw"], name="feat_scale"),
        helper.make_node("Tanh", ["fw"], ["feat"], name="feat_tanh"),
        helper.make_node("Gather", ["feat", "idx_flat"], ["picked"], name="pick", axis=0),
        helper.make_node("Reshape", ["picked", "shape3"], ["rows"], name="rows_shape"),
    ]
    graph = helper.make_graph(
        nodes, stem + "_fp16",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, n]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [n, d])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [1, k, d])],
        [numpy_helper.from_array(w, "w")] + inits +
        [numpy_helper.from_array(np.array([k], np.int64), "kk"),
         numpy_helper.from_array(np.array([k], np.int64), "flat"),
         numpy_helper.from_array(np.array([1, k, d], np.int64), "shape3")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, os.path.join(out, stem + ".onnx"))
    prefix = stem.replace("selection", "sel")
    np.save(os.path.join(out, prefix + "_w.npy"), w)
    for name in (f"calib_{prefix}/a", f"calib_{prefix}/b", f"{prefix}_run"):
        dd = os.path.join(out, name)
        os.makedirs(dd, exist_ok=True)
        np.save(os.path.join(dd, "s.npy"), selection_scores(rng, n, k))
        np.save(os.path.join(dd, "f.npy"), rng.uniform(-1, 1, (n, d)).astype(np.float32))


def main_selection(out):
    """selection.onnx: a selection whose scores lose their digits in float16. score =
    (s + 64) - 64 (a cancellation: in float16 s + 64 keeps 1/16 steps), TopK of the scores
    picks k rows of feat = Tanh(f * w) (Gather), reshaped to [1, k, d]. In float16 the
    k-th and (k+1)-th scores tie and the (k+1)-th row is selected instead: one of the k
    rows is another row. The score path (score_shift, score_unshift, select) decides the
    selection; the feature path (feat_scale, feat_tanh, pick, rows_shape) is benign."""
    selection_model(out, "selection", 18, 1, lambda i: ("score_shift", "score_unshift"))


def main_selection_long(out):
    """selection_long.onnx: the selection of main_selection behind six (s + 64) - 64 pairs
    in a row. Any pair left in float16 rounds the scores to 1/16 steps again, so the k-th
    and (k+1)-th scores tie until the whole score path is float32: moving the
    highest-ranked layers (the Subs) helps nothing for three iterations, after which the
    guard moves the rest of the score path at once. Feature path as in main_selection."""
    selection_model(out, "selection_long", 19, 6,
                    lambda i: (f"score_shift{i}", f"score_unshift{i}"))


def views_chain(out):
    """views.onnx: the chain of main_chain with its fragile pair between Reshapes, which the
    engine runs as views (no kernel): the guard reads the layers' outputs through them.
    y = Sqrt(Reshape(Mul(Exp(Reshape(Add(z, c), [128])), 1e-4), [8, 16])) * 2 + 0.5."""
    chain_model(out, "views", True)


CARRIED_R = 3.9
CARRIED_STEPS = 8


def carried_orbit(s0, steps, dtype=np.float64):
    """The logistic map s <- r s (1 - s) from s0, every step stored in dtype: [steps, ...]."""
    s = np.asarray(s0, dtype)
    orbit = [s]
    for _ in range(steps - 1):
        s = (dtype(CARRIED_R) * (s * (dtype(1) - s))).astype(dtype)
        orbit.append(s)
    return np.stack(orbit)


def main_carried(out):
    """carried.onnx: a state carried from frame to frame, state_out = r state (1 - state)
    (the logistic map at r = 3.9, chaotic: an error grows about 1.6x a step). One step in
    float16 is within 1e-2; the same steps with each engine's own state carried are not.
    calib_carried/stepNN: the float64 orbit of 64 states as the 8 frames' inputs.
    carried_next.onnx: the same map with its output named 'next', which the guard does not
    take for the state."""
    rng = np.random.default_rng(20)
    for stem, out_name in (("carried", "state_out"), ("carried_next", "next")):
        nodes = [
            helper.make_node("Sub", ["one", "state"], ["rest"], name="rest"),
            helper.make_node("Mul", ["state", "rest"], ["prod"], name="prod"),
            helper.make_node("Mul", ["prod", "r"], [out_name], name="gain"),
        ]
        graph = helper.make_graph(
            nodes, stem,
            [helper.make_tensor_value_info("state", TensorProto.FLOAT, [1, 64])],
            [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, [1, 64])],
            [numpy_helper.from_array(np.ones(1, np.float32), "one"),
             numpy_helper.from_array(np.full(1, CARRIED_R, np.float32), "r")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        onnx.save(model, os.path.join(out, stem + ".onnx"))
    orbit = carried_orbit(rng.uniform(0.2, 0.8, (1, 64)), CARRIED_STEPS)
    np.save(os.path.join(out, "carried_orbit.npy"), orbit)
    for s in range(CARRIED_STEPS):
        d = os.path.join(out, "calib_carried", "step%02d" % s)
        os.makedirs(d, exist_ok=True)
        np.save(os.path.join(d, "state.npy"), orbit[s].astype(np.float32))


if __name__ == "__main__":
    main(sys.argv[1])
