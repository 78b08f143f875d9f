"""Writes the small ONNX models the engine tests use into a directory.

Usage: make_models.py OUT_DIR. Deterministic (fixed seeds), so tests may
compare against values computed from the same weights; weights are also
written as .npy next to each model where a test needs them.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17)]


def save(model, out, name):
    onnx.save(model, os.path.join(out, name))


def mlp(out):
    """X[2,3] -> MatMul W1[3,4] -> Add b1 -> Softmax -> Reshape [4,2] -> Transpose -> Y[2,4]."""
    rng = np.random.default_rng(1)
    w1 = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    b1 = rng.uniform(-1, 1, (4,)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b1"], ["h2"], name="add"),
        helper.make_node("Softmax", ["h2"], ["s"], name="softmax", axis=-1),
        helper.make_node("Constant", [], ["shape"], name="shape_const",
                         value=numpy_helper.from_array(np.array([4, 2], np.int64))),
        helper.make_node("Reshape", ["s", "shape"], ["r"], name="reshape"),
        helper.make_node("Transpose", ["r"], ["y"], name="transpose", perm=[1, 0]),
        # Dead branch: nothing reads it, so dead-node removal drops it.
        helper.make_node("Add", ["h", "h"], ["unused"], name="dead_add"),
        # Constant subgraph: folded at build time.
        helper.make_node("Add", ["b1", "b1"], ["b2"], name="fold_add"),
        helper.make_node("Add", ["h", "b2"], ["z"], name="add_folded_bias"),
    ]
    g = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b1, "b1")])
    save(helper.make_model(g, opset_imports=OPSET), out, "mlp.onnx")
    np.save(os.path.join(out, "mlp_w1.npy"), w1)
    np.save(os.path.join(out, "mlp_b1.npy"), b1)


def unsupported(out):
    """Three unknown ops over four nodes: one message must list them all."""
    nodes = [
        helper.make_node("FooOp", ["x"], ["a"], name="foo1"),
        helper.make_node("FooOp", ["a"], ["b"], name="foo2"),
        helper.make_node("BarOp", ["b"], ["c"], name="bar1", domain="acme"),
        helper.make_node("Add", ["c", "x"], ["y"], name="add"),
    ]
    g = helper.make_graph(
        nodes, "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=OPSET + [helper.make_opsetid("acme", 1)])
    save(m, out, "unsupported.onnx")


def dynamic(out):
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"], name="add")], "dynamic",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])
    save(helper.make_model(g, opset_imports=OPSET), out, "dynamic.onnx")


def shape_input(out):
    """y = Relu(Reshape(x, shape)) with the shape a graph input, x's batch axis symbolic."""
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
         helper.make_node("Relu", ["r"], ["y"], name="relu")], "shape_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    save(helper.make_model(g, opset_imports=OPSET), out, "shape_input.onnx")


# Deformable aggregation sizes: small but every dimension > 1.
BS, NCAM, NLVL, C, G, A, P = 1, 2, 2, 8, 2, 5, 3
HW = [(4, 6), (2, 3)]


def da_model(out, name, op_type, domain, attrs, with_prefix=True):
    """features <- MatMul(feat_in, wf); weights <- Softmax(Reshape(MatMul(q, ww) + bw)); then the plugin."""
    rng = np.random.default_rng(2)
    rows = sum(h * w for h, w in HW)
    F = NCAM * rows
    cin = 4
    wf = rng.uniform(-1, 1, (cin, C)).astype(np.float32)
    ww = rng.uniform(-1, 1, (C, P * NCAM * NLVL * G)).astype(np.float32)
    bw = rng.uniform(-0.5, 0.5, (P * NCAM * NLVL * G,)).astype(np.float32)
    shapes = np.array([[h, w] for _ in range(NCAM) for h, w in HW], np.int32).reshape(NCAM, NLVL, 2)
    start = np.zeros((NCAM, NLVL), np.int32)
    acc = 0
    for n in range(NCAM):
        for l, (h, w) in enumerate(HW):
            start[n, l] = acc
            acc += h * w
    nodes = [
        helper.make_node("MatMul", ["feat_in", "wf"], ["features"], name="feat_proj"),
        helper.make_node("MatMul", ["query", "ww"], ["wl"], name="weight_proj"),
        helper.make_node("Add", ["wl", "bw"], ["wl2"], name="weight_bias"),
        helper.make_node("Constant", [], ["wshape"], name="wshape_const",
                         value=numpy_helper.from_array(
                             np.array([BS, A, P * NCAM * NLVL, G], np.int64))),
        helper.make_node("Reshape", ["wl2", "wshape"], ["wr"], name="weight_reshape"),
        helper.make_node("Transpose", ["wr"], ["wt"], name="weight_t", perm=[0, 1, 3, 2]),
        helper.make_node("Softmax", ["wt"], ["ws"], name="weight_softmax", axis=-1),
        helper.make_node("Transpose", ["ws"], ["wst"], name="weight_t2", perm=[0, 1, 3, 2]),
        helper.make_node("Constant", [], ["wshape2"], name="wshape2_const",
                         value=numpy_helper.from_array(
                             np.array([BS, A, P, NCAM, NLVL, G], np.int64))),
        helper.make_node("Reshape", ["wst", "wshape2"], ["weights"], name="weight_reshape2"),
        helper.make_node(op_type, ["features", "spatial_shape", "scale_start_index",
                                   "sampling_location", "weights"], ["out"],
                         name="aggregate", domain=domain, **attrs),
    ]
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("feat_in", TensorProto.FLOAT, [BS, F, cin]),
         helper.make_tensor_value_info("query", TensorProto.FLOAT, [BS, A, C]),
         helper.make_tensor_value_info("sampling_location", TensorProto.FLOAT,
                                       [BS, A, P, NCAM, 2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [BS, A, C])],
        [numpy_helper.from_array(wf, "wf"), numpy_helper.from_array(ww, "ww"),
         numpy_helper.from_array(bw, "bw"),
         numpy_helper.from_array(shapes, "spatial_shape"),
         numpy_helper.from_array(start, "scale_start_index")])
    imports = OPSET + ([helper.make_opsetid(domain, 1)] if domain else [])
    save(helper.make_model(g, opset_imports=imports), out, name + ".onnx")
    if with_prefix:
        np.save(os.path.join(out, "da_wf.npy"), wf)
        np.save(os.path.join(out, "da_ww.npy"), ww)
        np.save(os.path.join(out, "da_bw.npy"), bw)
        np.save(os.path.join(out, "da_spatial_shape.npy"), shapes)
        np.save(os.path.join(out, "da_scale_start_index.npy"), start)
        # Inputs: locations mostly inside (0, 1), a few outside to exercise the mask.
        np.save(os.path.join(out, "da_in_feat_in.npy"),
                rng.uniform(-1, 1, (BS, F, cin)).astype(np.float32))
        np.save(os.path.join(out, "da_in_query.npy"),
                rng.uniform(-1, 1, (BS, A, C)).astype(np.float32))
        np.save(os.path.join(out, "da_in_sampling_location.npy"),
                rng.uniform(-0.1, 1.1, (BS, A, P, NCAM, 2)).astype(np.float32))


def scale(out):
    """y = test::Scale(alpha=2.5)(MatMul(x, w)): a plugin the C test registers through the API."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Scale", ["h"], ["y"], name="scale", domain="test", alpha=2.5),
    ]
    g = helper.make_graph(
        nodes, "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=OPSET + [helper.make_opsetid("test", 1)])
    save(m, out, "scale.onnx")
    np.save(os.path.join(out, "scale_x.npy"), x)
    np.save(os.path.join(out, "scale_w.npy"), w)


def plugin_lifecycle(out):
    """example::Lut (ABI 2 lifecycle) on float32, the same on float16 (negotiation must refuse
    it), and compat::Affine from an ABI 1 library."""
    for name, dt in (("lut", TensorProto.FLOAT), ("lut_f16", TensorProto.FLOAT16)):
        node = helper.make_node("Lut", ["x"], ["y"], name="lut", domain="example", lo=-3.0,
                                hi=3.0, size=64)
        g = helper.make_graph([node], name,
                              [helper.make_tensor_value_info("x", dt, [4, 50])],
                              [helper.make_tensor_value_info("y", dt, [4, 50])])
        save(helper.make_model(g, opset_imports=OPSET + [helper.make_opsetid("example", 1)]), out,
             name + ".onnx")
    node = helper.make_node("Affine", ["x"], ["y"], name="affine", domain="compat")
    g = helper.make_graph([node], "v1affine",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 7])])
    save(helper.make_model(g, opset_imports=OPSET + [helper.make_opsetid("compat", 1)]), out,
         "v1affine.onnx")


def views(out):
    """Layers that only reinterpret bytes, which the engine runs as views (no kernel):
    r = Reshape(a) feeds two consumers while a is read again later; views of views
    (Unsqueeze, Squeeze, Dropout, Cast to float, Identity); a view of a graph input (xr);
    Reshape and Identity producing graph outputs (mo, xo: these keep their own buffers);
    a view (er) read after the last direct reader of what it views."""
    def ints(name, values):
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Reshape", ["a", "shape_r"], ["r"], name="reshape_a"),
        helper.make_node("MatMul", ["r", "w"], ["m"], name="matmul"),
        helper.make_node("Sigmoid", ["r"], ["g"], name="sigmoid"),
        helper.make_node("Unsqueeze", ["r", "axes0"], ["u"], name="unsqueeze"),
        helper.make_node("Squeeze", ["u", "axes0"], ["q"], name="squeeze"),
        helper.make_node("Dropout", ["q"], ["d"], name="dropout"),
        helper.make_node("Cast", ["d"], ["c"], name="cast_same", to=TensorProto.FLOAT),
        helper.make_node("Identity", ["c"], ["i"], name="identity"),
        helper.make_node("Add", ["i", "g"], ["s1"], name="add"),
        helper.make_node("Neg", ["a"], ["n"], name="neg"),
        helper.make_node("Flatten", ["n"], ["fl"], name="flatten", axis=1),
        helper.make_node("Tanh", ["fl"], ["tn"], name="tanh"),
        helper.make_node("Reshape", ["x", "shape_x"], ["xr"], name="reshape_x"),
        helper.make_node("Abs", ["xr"], ["ax"], name="abs"),
        helper.make_node("Reshape", ["m", "shape_m"], ["mo"], name="reshape_out"),
        helper.make_node("Identity", ["x"], ["xo"], name="identity_out"),
        # er is e's only reader: e must stay alive, not give its bytes to t, until add_e.
        helper.make_node("Exp", ["x"], ["e"], name="exp"),
        helper.make_node("Reshape", ["e", "shape_r"], ["er"], name="reshape_e"),
        helper.make_node("Cos", ["r"], ["t"], name="cos"),
        helper.make_node("Add", ["er", "t"], ["ee"], name="add_e"),
    ]
    rng = np.random.default_rng(4)
    w = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    f = TensorProto.FLOAT
    g = helper.make_graph(
        nodes, "views",
        [helper.make_tensor_value_info("x", f, [2, 3, 4])],
        [helper.make_tensor_value_info("s1", f, [6, 4]),
         helper.make_tensor_value_info("tn", f, [2, 12]),
         helper.make_tensor_value_info("ax", f, [24]),
         helper.make_tensor_value_info("mo", f, [30]),
         helper.make_tensor_value_info("xo", f, [2, 3, 4]),
         helper.make_tensor_value_info("ee", f, [6, 4])],
        [numpy_helper.from_array(w, "w"), ints("shape_r", [6, 4]), ints("axes0", [0]),
         ints("shape_x", [24]), ints("shape_m", [30])])
    save(helper.make_model(g, opset_imports=OPSET), out, "views.onnx")
    np.save(os.path.join(out, "views_w.npy"), w)


def mbconv(out):
    """A MobileNetV2 block (expand 1x1 + ReLU6, depthwise 3x3 + ReLU6, project 1x1, residual)
    that the CPU engine fuses into one s4d::FusedMBConv layer: the fuzz corpus's seed for it."""
    rng = np.random.default_rng(5)
    f = TensorProto.FLOAT

    def const(name, a):
        return numpy_helper.from_array(np.asarray(a, np.float32), name)

    inits = [const("w1", rng.uniform(-1, 1, (8, 4, 1, 1))), const("b1", rng.uniform(-1, 1, 8)),
             const("w2", rng.uniform(-1, 1, (8, 1, 3, 3))), const("b2", rng.uniform(-1, 1, 8)),
             const("w3", rng.uniform(-1, 1, (4, 8, 1, 1))), const("b3", rng.uniform(-1, 1, 4)),
             const("lo", 0.0), const("hi", 6.0)]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["e"], name="expand"),
        helper.make_node("Clip", ["e", "lo", "hi"], ["e6"], name="expand_relu6"),
        helper.make_node("Conv", ["e6", "w2", "b2"], ["d"], name="depthwise", group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["d", "lo", "hi"], ["d6"], name="depthwise_relu6"),
        helper.make_node("Conv", ["d6", "w3", "b3"], ["p"], name="project"),
        helper.make_node("Add", ["p", "x"], ["y"], name="residual"),
    ]
    g = helper.make_graph(nodes, "mbconv", [helper.make_tensor_value_info("x", f, [1, 4, 5, 5])],
                          [helper.make_tensor_value_info("y", f, [1, 4, 5, 5])], inits)
    save(helper.make_model(g, opset_imports=OPSET), out, "mbconv.onnx")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    mlp(out)
    unsupported(out)
    dynamic(out)
    shape_input(out)
    plugin_lifecycle(out)
    scale(out)
    views(out)
    mbconv(out)
    da_model(out, "da", "DeformableAggregation", "s4d", {"plugin_version": "1"})
    da_model(out, "da_alias", "DeformableAttentionAggrPlugin", "custom", {}, False)
    da_model(out, "da_wrong_version", "DeformableAggregation", "s4d",
             {"plugin_version": "7"}, False)
    da_model(out, "da_unknown_attr", "DeformableAggregation", "s4d",
             {"plugin_version": "1", "im2col_step": 64}, False)
    da_model(out, "da_missing_plugin", "DeformableAggregation", "nowhere", {}, False)


if __name__ == "__main__":
    main()
