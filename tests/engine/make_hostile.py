"""Writes the hostile-input cases of test_hostile.c into a directory.

Usage: make_hostile.py OUT_DIR. Each model is the smallest that reproduces one
defect once found in s4d.
"""
import os
import sys

import onnx
from onnx import AttributeProto, TensorProto, helper

OPSET = [helper.make_opsetid("", 17)]


def save(model, out, name):
    onnx.save(model, os.path.join(out, name))


def tensor_attr_without_tensor(out):
    """An attribute of type TENSOR whose tensor field is absent (once a NULL dereference)."""
    def bare(name):
        a = AttributeProto()
        a.name = name
        a.type = AttributeProto.TENSOR
        return a

    const = helper.make_node("Constant", [], ["y"], name="const_no_tensor")
    const.attribute.append(bare("value"))
    g = helper.make_graph([const], "attr_tensor_null", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    save(helper.make_model(g, opset_imports=OPSET), out, "attr_tensor_null_constant.onnx")

    node = helper.make_node("ConstantOfShape", ["shape"], ["y"], name="cos_no_tensor")
    node.attribute.append(bare("value"))
    g = helper.make_graph(
        [node], "attr_tensor_null_node",
        [helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])])
    save(helper.make_model(g, opset_imports=OPSET), out, "attr_tensor_null_node.onnx")


if __name__ == "__main__":
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)
    tensor_attr_without_tensor(d)
