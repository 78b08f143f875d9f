"""1x1 convolutions of the v3 backbone as Conv and as MatMul(W, X[n, c, hw]), for timing side by side."""
import sys
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper

SHAPES = [  # name, cin, cout, h, w
    ("l1_c1_first", 64, 64, 64, 176), ("l1_c1", 256, 64, 64, 176), ("l1_c3", 64, 256, 64, 176),
    ("lat0", 256, 256, 64, 176), ("l2_c1_first", 256, 128, 64, 176), ("l2_c1", 512, 128, 32, 88),
    ("l2_c3", 128, 512, 32, 88), ("lat1", 512, 256, 32, 88), ("l3_c1_first", 512, 256, 32, 88),
    ("l3_c1", 1024, 256, 16, 44), ("l3_c3", 256, 1024, 16, 44), ("lat2", 1024, 256, 16, 44),
    ("l4_c1_first", 1024, 512, 16, 44), ("l4_c1", 2048, 512, 8, 22), ("l4_c3", 512, 2048, 8, 22),
    ("lat3", 2048, 256, 8, 22),
]
N = 6
rng = np.random.default_rng(0)
nodes, inits, ins, outs = [], [], [], []
for name, cin, cout, h, w in SHAPES:
    x = f"x_{name}"
    ins.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, [N, cin, h, w]))
    wt = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
    inits.append(numpy_helper.from_array(wt, f"w_{name}"))
    inits.append(numpy_helper.from_array(wt.reshape(cout, cin), f"w2_{name}"))
    inits.append(numpy_helper.from_array(np.array([N, cin, h * w], np.int64), f"s_{name}"))
    nodes.append(helper.make_node("Conv", [x, f"w_{name}"], [f"conv_{name}"], name=f"conv_{name}"))
    nodes.append(helper.make_node("Reshape", [x, f"s_{name}"], [f"r_{name}"], name=f"reshape_{name}"))
    nodes.append(helper.make_node("MatMul", [f"w2_{name}", f"r_{name}"], [f"mm_{name}"], name=f"mm_{name}"))
    outs.append(helper.make_tensor_value_info(f"conv_{name}", TensorProto.FLOAT, [N, cout, h, w]))
    outs.append(helper.make_tensor_value_info(f"mm_{name}", TensorProto.FLOAT, [N, cout, h * w]))
g = helper.make_graph(nodes, "conv1x1_probe", ins, outs, inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
onnx.save(m, sys.argv[1])
