"""The chain of one op, end to end: C kernel -> PyTorch custom op -> backward
-> ONNX export -> the node an engine sees.

    make python
    PYTHONPATH=python /usr/bin/python3 examples/op_chain/op_chain.py --out /tmp/op_chain

Every step checks itself against the pure-PyTorch reference and prints one
line; the exported models land in --out.
"""
import argparse
import os
import sys

import torch

import s4d.ops as ops
from s4d.ops.workload import realistic_inputs


def rel_l2(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


class Head(torch.nn.Module):
    """What a Sparse4D decoder layer does around the op: aggregate, project."""

    def __init__(self, spatial_shape, scale_start_index, channels, aggregate):
        super().__init__()
        self.register_buffer("spatial_shape", spatial_shape)
        self.register_buffer("scale_start_index", scale_start_index)
        self.output_proj = torch.nn.Linear(channels, channels)
        self.aggregate = aggregate

    def forward(self, features, sampling_location, weights):
        x = self.aggregate(features, self.spatial_shape, self.scale_start_index,
                           sampling_location, weights)
        return self.output_proj(x)


def export(module, inputs, path, opset):
    kwargs = {"dynamo": False} if "dynamo" in torch.onnx.export.__code__.co_varnames else {}
    torch.onnx.export(module, inputs, path, opset_version=opset,
                      input_names=["features", "sampling_location", "weights"],
                      output_names=["instance_feature"], **kwargs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="op_chain_out", help="folder for the ONNX files")
    parser.add_argument("--anchors", type=int, default=900)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)

    # 0. A realistic call: 6 cameras, 2 levels, 13 keypoints per anchor.
    f, ss, si, loc, w = realistic_inputs(anchors=args.anchors, channels=64, groups=8)
    inside = ops.valid_mask(loc).float().mean().item()
    print(f"inputs: features {list(f.shape)}, sampling_location {list(loc.shape)}, "
          f"weights {list(w.shape)}; {inside:.1%} of (point, camera) pairs inside an image")
    ref = ops.deformable_aggregation_reference(f.double(), ss, si, loc.double(), w.double())

    # 1. The kernel: the C library, called through the binding with int32 indices.
    ext = ops.load_extension()
    out = ext.da_forward(f, ss, si, loc, w, False)
    print(f"1 kernel      s4d_da_forward_cpu -> {list(out.shape)}, rel. L2 vs float64 "
          f"reference {rel_l2(out, ref):.1e}")

    # 2. The custom op: argument checks, int64 indices, any device.
    dev = torch.device(args.device)
    f_d, loc_d, w_d = (t.detach().to(dev, copy=True).requires_grad_(True) for t in (f, loc, w))
    out_d = ops.deformable_aggregation(f_d, ss.long(), si.long(), loc_d, w_d)
    print(f"2 custom op   s4d.ops.deformable_aggregation on {dev} -> rel. L2 "
          f"{rel_l2(out_d.cpu(), ref):.1e}")

    # 3. Backward through the library, against autograd through the reference.
    grad = torch.randn(out_d.shape)
    out_d.backward(grad.to(dev))
    ref_in = [t.detach().double().requires_grad_(True) for t in (f, loc, w)]
    ops.deformable_aggregation_reference(ref_in[0], ss, si, ref_in[1], ref_in[2]).backward(
        grad.double())
    errs = [rel_l2(a.grad.cpu(), b.grad) for a, b in zip((f_d, loc_d, w_d), ref_in)]
    print(f"3 backward    grad features {errs[0]:.1e}, sampling_location {errs[1]:.1e}, "
          f"weights {errs[2]:.1e} (rel. L2 vs reference autograd)")

    # 4. Export: the plugin node for the s4d engine, and the standard-op graph.
    head = Head(ss, si, 64, ops.deformable_aggregation).eval()
    small = realistic_inputs(anchors=32, channels=64, groups=8)
    sample = (small[0], small[3], small[4])
    plugin_path = os.path.join(args.out, "head_plugin.onnx")
    export(head, sample, plugin_path, opset=17)
    ref_head = Head(ss, si, 64, ops.deformable_aggregation_reference).eval()
    ref_head.load_state_dict(head.state_dict())
    ref_path = os.path.join(args.out, "head_reference.onnx")
    export(ref_head, sample, ref_path, opset=17)
    print(f"4 export      {plugin_path}, {ref_path}")

    # 5. The node as the engine's importer sees it.
    import onnx  # pylint: disable=import-outside-toplevel
    model = ops.infer_static_shapes(onnx.load(plugin_path))
    onnx.checker.check_model(model)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(model.graph.value_info) + list(model.graph.input)}
    consts = {i.name: (onnx.TensorProto.DataType.Name(i.data_type), list(i.dims))
              for i in model.graph.initializer}
    for node in model.graph.node:
        if node.domain != ops.ONNX_DOMAIN:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        print(f"5 ONNX node   domain '{node.domain}', op_type '{node.op_type}', "
              f"attributes {attrs}")
        names = ("features", "spatial_shape", "scale_start_index", "sampling_location",
                 "weights")
        for role, name in zip(names, node.input):
            what = consts.get(name) or ("FLOAT", shapes.get(name))
            print(f"              input {role:<18} '{name}' {what[0]} {what[1]}")
        print(f"              output '{node.output[0]}' {shapes.get(node.output[0])}")
    ref_ops = sorted({n.op_type for n in onnx.load(ref_path).graph.node})
    print(f"  reference graph uses standard ops only: {', '.join(ref_ops)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
