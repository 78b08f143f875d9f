"""Exports the models of the CPU comparison and their inputs (.npy).

    PYTHONPATH=python /usr/bin/python3 bench/ort/export_models.py --out bench/ort/out [--presets tiny,v3]

    PYTHONPATH=python /usr/bin/python3 bench/ort/export_models.py --out bench/ort/out --presets "" \
        --skip-backbone --cnns resnet18,resnet50,mobilenet_v2,mobilenet_v3_large,efficientnet_b0,shufflenet_v2

Writes OUT/r50fpn.onnx (ResNet50 + FPN, input 1x3x256x704, opset 17, random
weights and BatchNorm statistics) with OUT/r50fpn_inputs/images.npy, and for
each head preset OUT/sparse4d_<preset>_head.onnx (the s4d aggregation node),
OUT/sparse4d_<preset>_head_reference.onnx (standard ops only), their
*_ort.onnx copies with bool Where rewritten (ONNX Runtime lacks it), with
OUT/<preset>_inputs/<name>.npy: the preset's first-frame inputs with the
nuScenes-like camera rig as projections, so the sampling workload is
realistic rather than random. --cnns adds the classifiers of cnn_models.py
(OUT/<name>.onnx, 1x3x224x224, opset 17, with OUT/<name>_inputs/input.npy).
"""
import argparse
import os
import sys

import numpy as np
import torch
from torch import nn


class R50FPN(nn.Module):
    def __init__(self):
        super().__init__()
        from s4d.sparse4d.backbone import FPN, ResNet
        self.resnet = ResNet(50, 64)
        self.fpn = FPN(self.resnet.out_channels, 256)

    def forward(self, x):
        return tuple(self.fpn(self.resnet(x)))


def export_backbone(out: str) -> None:
    torch.manual_seed(0)
    m = R50FPN().eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            # non-trivial statistics so that folding them is real work
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.1, 0.1)
    x = torch.randn(1, 3, 256, 704, generator=torch.Generator().manual_seed(1))
    path = os.path.join(out, "r50fpn.onnx")
    with torch.no_grad():
        torch.onnx.export(m, (x,), path, opset_version=17, input_names=["images"],
                          output_names=["p2", "p3", "p4", "p5"], do_constant_folding=True)
    d = os.path.join(out, "r50fpn_inputs")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "images.npy"), x.numpy())


def export_cnn(out: str, name: str, opset: int = 17) -> None:
    """OUT/<name>.onnx (1x3x224x224, fixed sizes) and OUT/<name>_inputs/input.npy."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cnn_models
    m = cnn_models.build(name)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(1))
    path = os.path.join(out, f"{name}.onnx")
    with torch.no_grad():
        torch.onnx.export(m, (x,), path, opset_version=opset, input_names=["input"],
                          output_names=["logits"], do_constant_folding=True)
    d = os.path.join(out, f"{name}_inputs")
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "input.npy"), x.numpy())


def export_head(out: str, preset: str) -> None:
    from s4d.sparse4d.config import get_preset
    from s4d.sparse4d.export import example_inputs, export, HEAD_INPUT_NAMES
    from s4d.sparse4d.scene import camera_rig
    try:
        export(preset, out, aggregation="both")
    except RuntimeError as e:
        # Without the PyTorch extension only the standard-op head can be exported.
        print(f"export_models: {e}; exporting the reference head only", file=sys.stderr)
        export(preset, out, aggregation="reference")
    for kind in ("head_reference", "head"):
        path = os.path.join(out, f"sparse4d_{preset}_{kind}.onnx")
        if os.path.exists(path):
            ort_compatible(path, path[:-5] + "_ort.onnx")
    cfg = get_preset(preset)
    ins = example_inputs(cfg)
    ins["projection"] = torch.from_numpy(np.asarray(camera_rig(cfg), dtype=np.float32))[None]
    d = os.path.join(out, f"{preset}_inputs")
    os.makedirs(d, exist_ok=True)
    for name in HEAD_INPUT_NAMES:
        if name == "images":
            continue
        np.save(os.path.join(d, f"{name}.npy"), ins[name].numpy())


def ort_compatible(src: str, dst: str) -> int:
    """Copies src to dst with every Where on bool tensors rewritten as
    Or(And(c, a), And(Not(c), b)): ONNX Runtime's CPU provider has no bool
    Where. Same function; both runtimes time the copy. Returns the count."""
    import onnx
    from onnx import helper, TensorProto
    m = onnx.load(src)
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    types.update({t.name: t.data_type for t in m.graph.initializer})
    nodes, count = [], 0
    for n in m.graph.node:
        if n.op_type == "Where" and types.get(n.output[0]) == TensorProto.BOOL:
            c, a, b = n.input
            p = n.output[0] + "__"
            nodes += [helper.make_node("And", [c, a], [p + "ca"]),
                      helper.make_node("Not", [c], [p + "nc"]),
                      helper.make_node("And", [p + "nc", b], [p + "ncb"]),
                      helper.make_node("Or", [p + "ca", p + "ncb"], [n.output[0]], name=n.name)]
            count += 1
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    onnx.save(m, dst)
    return count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--presets", default="tiny,v3")
    ap.add_argument("--skip-backbone", action="store_true")
    ap.add_argument("--cnns", default="",
                    help="comma-separated classifiers of cnn_models.py to export (e.g. resnet18,resnet50)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if not a.skip_backbone:
        export_backbone(a.out)
    for name in [n for n in a.cnns.split(",") if n]:
        export_cnn(a.out, name)
    for p in [p for p in a.presets.split(",") if p]:
        export_head(a.out, p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
