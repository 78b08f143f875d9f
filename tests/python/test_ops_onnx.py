"""ONNX export of a module using s4d.ops.deformable_aggregation: one node
s4d::DeformableAggregation with plugin_version "1", int32 index inputs in the
documented order and a static output shape."""
import io
import warnings

import onnx
import pytest
import torch
from onnx import numpy_helper

from conftest import random_inputs
from s4d.ops import (ONNX_DOMAIN, ONNX_OP_TYPE, deformable_aggregation, infer_static_shapes)

SHAPES = [[(5, 7), (3, 4)], [(6, 5), (2, 3)], [(4, 4), (2, 2)]]


class Head(torch.nn.Module):
    """A tiny head: project locations, aggregate, then a linear layer."""

    def __init__(self, ss, si, channels):
        super().__init__()
        self.register_buffer("spatial_shape", ss)
        self.register_buffer("scale_start_index", si)
        self.proj = torch.nn.Linear(channels, channels)

    def forward(self, features, sampling_location, weights):
        out = deformable_aggregation(features, self.spatial_shape, self.scale_start_index,
                                     sampling_location.sigmoid(), weights)
        return self.proj(out)


def _export(index_dtype, opset=17):
    f, ss, si, loc, w = random_inputs(SHAPES, bs=1, channels=16, groups=4, anchors=6, points=5)
    model = Head(ss.to(index_dtype), si.to(index_dtype), 16).eval()
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        export_kwargs = {}
        if "dynamo" in torch.onnx.export.__code__.co_varnames:
            export_kwargs["dynamo"] = False  # the TorchScript exporter
        torch.onnx.export(model, (f, loc, w), buf, opset_version=opset,
                          input_names=["features", "sampling_location", "weights"],
                          output_names=["out"], **export_kwargs)
    return onnx.load_from_string(buf.getvalue()), (f, ss, si, loc, w)


@pytest.mark.parametrize("index_dtype", [torch.int32, torch.int64])
def test_export_emits_one_plugin_node(ext, index_dtype):
    model, (f, ss, si, loc, w) = _export(index_dtype)
    onnx.checker.check_model(model)
    nodes = [n for n in model.graph.node if n.op_type == ONNX_OP_TYPE]
    assert len(nodes) == 1
    node = nodes[0]
    assert node.domain == ONNX_DOMAIN == "s4d"
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"plugin_version": b"1"}
    assert {o.domain: o.version for o in model.opset_import}.get("s4d") == 1

    # Input order: features, spatial_shape, scale_start_index, sampling_location, weights.
    assert node.input[0] == "features"
    assert node.input[4] == "weights"
    producers = {o: n for n in model.graph.node for o in n.output}
    assert producers[node.input[3]].op_type == "Sigmoid"
    inits = {i.name: i for i in model.graph.initializer}
    for pos, want in ((1, ss), (2, si)):
        assert node.input[pos] in inits, "index tensors become int32 constants"
        tensor = inits[node.input[pos]]
        assert tensor.data_type == onnx.TensorProto.INT32
        assert torch.equal(torch.from_numpy(numpy_helper.to_array(tensor).copy()), want.int())

    # Static output shape: set on the node's output and kept downstream.
    fixed = infer_static_shapes(model)
    shapes = {vi.name: [d.dim_value if d.HasField("dim_value") else d.dim_param
                        for d in vi.type.tensor_type.shape.dim]
              for vi in list(fixed.graph.value_info) + list(fixed.graph.output)}
    assert shapes[node.output[0]] == [1, 6, 16]
    assert shapes["out"] == [1, 6, 16]
    types = {vi.name: vi.type.tensor_type.elem_type for vi in fixed.graph.value_info}
    assert types[node.output[0]] == onnx.TensorProto.FLOAT


def test_export_opset16_minimum(ext):
    model, _ = _export(torch.int32, opset=16)
    onnx.checker.check_model(model)
    assert any(n.domain == "s4d" for n in model.graph.node)


def test_export_fp16_output_type(ext):
    f, ss, si, loc, w = random_inputs(SHAPES, bs=1, channels=8, groups=2, anchors=3, points=2)

    class M(torch.nn.Module):
        def forward(self, features, location, weights):
            return deformable_aggregation(features, ss, si, location, weights)

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
        torch.onnx.export(M(), (f.half(), loc, w.half()), buf, opset_version=17,
                          input_names=["features", "location", "weights"],
                          output_names=["out"], **kwargs)
    model = infer_static_shapes(onnx.load_from_string(buf.getvalue()))
    out = model.graph.output[0].type.tensor_type
    assert out.elem_type == onnx.TensorProto.FLOAT16
    assert [d.dim_value for d in out.shape.dim] == [1, 3, 8]
