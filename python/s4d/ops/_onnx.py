"""ONNX post-processing for models holding s4d::DeformableAggregation."""
__all__ = ["infer_static_shapes"]


def _constant_values(model):
    from onnx import numpy_helper  # pylint: disable=import-outside-toplevel

    values = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def infer_static_shapes(model):
    """Runs ONNX shape inference and gives each DeformableAggregation output
    its static shape (read from the Reshape the exporter places after it).

    The TorchScript exporter (torch 1.13) writes symbolic dims for values
    downstream of a custom-domain node even when the node's type is set;
    ONNX shape inference restores them from the Reshape, except on the
    custom node's own output, which this fills in.
    """
    import onnx  # pylint: disable=import-outside-toplevel

    from ._deformable_aggregation import ONNX_DOMAIN, ONNX_OP_TYPE  # pylint: disable=C0415

    model = onnx.shape_inference.infer_shapes(model)
    consts = _constant_values(model)
    consumers = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    infos = {vi.name: vi for vi in model.graph.value_info}
    for node in model.graph.node:
        if node.domain != ONNX_DOMAIN or node.op_type != ONNX_OP_TYPE:
            continue
        out = node.output[0]
        for user in consumers.get(out, []):
            if user.op_type == "Reshape" and user.input[1] in consts:
                dims = [int(d) for d in consts[user.input[1]].reshape(-1)]
                info = infos.get(out)
                if info is None:
                    info = model.graph.value_info.add()
                    info.name = out
                    infos[out] = info
                shape = info.type.tensor_type.shape
                shape.Clear()
                for d in dims:
                    shape.dim.add().dim_value = d
                break
    return model
