"""Export Sparse4Dv3 to ONNX for the s4d engine.

    python3 -m s4d.sparse4d.export --preset tiny|v3 --out DIR [--aggregation ext|reference|both]

Writes DIR/sparse4d_<preset>_backbone.onnx (images -> features),
DIR/sparse4d_<preset>_head.onnx (with the s4d::DeformableAggregation node),
with --aggregation reference|both DIR/sparse4d_<preset>_head_reference.onnx
(standard ONNX ops only), and DIR/ops.txt, the op types of each graph.
Static shapes, batch 1, opset 17. The head carries the instance bank as
explicit inputs (bank_*) and outputs (bank_*_out): feed the outputs of one
frame to the inputs of the next; start from the zero state (head.zeros_state).
"""
import argparse
import collections
import copy
import inspect
import os
import sys
import warnings
from typing import Dict, List, Tuple

import torch
from torch import nn

from .config import Sparse4DConfig
from .head import DETECTION_NAMES, FRAME_INPUT_NAMES, STATE_NAMES, HeadState
from .model import Sparse4D, build_model

OPSET = 17
RAW_OUTPUT_NAMES = ("classification", "prediction", "quality")
HEAD_INPUT_NAMES = FRAME_INPUT_NAMES + STATE_NAMES
HEAD_OUTPUT_NAMES = DETECTION_NAMES + RAW_OUTPUT_NAMES + tuple(n + "_out" for n in STATE_NAMES)
# ops an export must not contain: dynamic control flow or data-dependent shapes
FORBIDDEN_OPS = {"Loop", "If", "NonZero", "Scan", "ScatterND", "Shape", "SequenceConstruct"}


class BackboneGraph(nn.Module):
    def __init__(self, model: Sparse4D):
        super().__init__()
        self.backbone = model.backbone

    def forward(self, images):
        return self.backbone(images)


class HeadGraph(nn.Module):
    """The head as a flat function of tensors, in HEAD_INPUT_NAMES order."""

    def __init__(self, model: Sparse4D):
        super().__init__()
        self.head = model.head

    def forward(self, features, projection, image_wh, timestamp, ego_pose, *state):
        out = self.head(features, projection, image_wh, timestamp, ego_pose, HeadState(*state))
        return tuple(out[n] for n in DETECTION_NAMES + RAW_OUTPUT_NAMES) + tuple(out["state"])


def example_inputs(cfg: Sparse4DConfig) -> Dict[str, torch.Tensor]:
    """Shaped, non-trivial example inputs for tracing (values do not matter
    for the graph: nothing branches on them)."""
    from .head import zeros_state
    g = torch.Generator().manual_seed(0)
    h, w = cfg.image_hw
    n = cfg.num_cams
    ins = {
        "images": torch.randn(1, n, 3, h, w, generator=g),
        "features": torch.randn(1, cfg.num_feature_rows, cfg.embed_dims, generator=g),
        "projection": torch.randn(1, n, 4, 4, generator=g),
        "image_wh": torch.tensor([[float(w), float(h)]] * n)[None],
        "timestamp": torch.tensor([0.5]),
        "ego_pose": torch.eye(4)[None],
    }
    ins.update(zip(STATE_NAMES, zeros_state(cfg)))
    return ins


def _export(module: nn.Module, args: Tuple, path: str, input_names, output_names,
            custom: bool = False):
    # shapes are static by design: the tracer's notes about Python ints are expected
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message="The shape inference of")
        warnings.filterwarnings("ignore", category=FutureWarning)
        extra = {}
        if "dynamo" in inspect.signature(torch.onnx.export).parameters:
            extra["dynamo"] = False  # the TorchScript exporter: same graph on torch 1.13 and 2.x
        torch.onnx.export(module, args, path, opset_version=OPSET, input_names=list(input_names),
                          output_names=list(output_names), do_constant_folding=True,
                          training=torch.onnx.TrainingMode.EVAL,
                          custom_opsets={"s4d": 1} if custom else None, **extra)


def _set_output_shapes(path: str, outputs: Tuple[torch.Tensor, ...]) -> None:
    # The exporter leaves symbolic dims downstream of a custom-domain node;
    # every shape here is static, so write the traced ones and re-infer.
    import onnx
    from s4d.ops import infer_static_shapes
    model = onnx.load(path)
    for vi, t in zip(model.graph.output, outputs):
        shape = vi.type.tensor_type.shape
        shape.Clear()
        for d in t.shape:
            shape.dim.add().dim_value = int(d)
    del model.graph.value_info[:]
    onnx.save(infer_static_shapes(model), path)


def _inline_identities(path: str) -> None:
    # torch shares initializers with equal values (e.g. every zero bias) and
    # reads them through Identity nodes; give each its own initializer so the
    # graph is plain data + compute.
    import onnx
    from onnx import numpy_helper
    model = onnx.load(path)
    inits = {t.name: t for t in model.graph.initializer}
    keep = []
    for node in model.graph.node:
        if node.op_type == "Identity" and node.input[0] in inits:
            arr = numpy_helper.to_array(inits[node.input[0]])
            model.graph.initializer.append(numpy_helper.from_array(arr, node.output[0]))
        else:
            keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    onnx.save(model, path)


def op_types(path: str) -> "collections.Counter[Tuple[str, str]]":
    import onnx
    model = onnx.load(path, load_external_data=False)
    return collections.Counter((node.domain or "ai.onnx", node.op_type)
                               for node in model.graph.node)


def check_graph(path: str) -> None:
    """onnx.checker, full static shapes for every input and output, and no
    op from FORBIDDEN_OPS; raises ValueError naming what is wrong."""
    import onnx
    model = onnx.load(path)
    onnx.checker.check_model(model)
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            raise ValueError(f"{path}: tensor '{vi.name}' has a dynamic shape")
    bad = {op for (_, op) in op_types(path)} & FORBIDDEN_OPS
    if bad:
        raise ValueError(f"{path}: graph contains {sorted(bad)}")


def export(preset: str, out_dir: str, aggregation: str = "ext", seed: int = 0,
           model: Sparse4D = None) -> Dict[str, str]:
    """Writes the graphs and ops.txt; returns {graph kind: path}."""
    if aggregation not in ("ext", "reference", "both"):
        raise ValueError(f"aggregation '{aggregation}' unknown (ext, reference or both)")
    os.makedirs(out_dir, exist_ok=True)
    if model is None:
        model = build_model(preset, aggregation="reference", seed=seed)
    else:
        # torch.onnx.export folds BatchNorm into the conv weights in place
        # (torch 1.13); export a copy so the caller's model stays as it was
        model = copy.deepcopy(model)
    cfg = model.cfg
    ins = example_inputs(cfg)
    paths = {}
    stem = os.path.join(out_dir, f"sparse4d_{cfg.name}")
    paths["backbone"] = stem + "_backbone.onnx"
    _export(BackboneGraph(model), (ins["images"],), paths["backbone"], ["images"], ["features"])
    head_args = tuple(ins[n] for n in HEAD_INPUT_NAMES)
    modes = ["ext", "reference"] if aggregation == "both" else [aggregation]
    previous = model.head.aggregation
    try:
        for mode in modes:
            model.head.set_aggregation(mode)
            kind = "head" if mode == "ext" else "head_reference"
            paths[kind] = f"{stem}_{kind}.onnx"
            _export(HeadGraph(model), head_args, paths[kind], HEAD_INPUT_NAMES, HEAD_OUTPUT_NAMES,
                    custom=mode == "ext")
            with torch.no_grad():
                _set_output_shapes(paths[kind], HeadGraph(model)(*head_args))
    finally:
        model.head.set_aggregation(previous)
    lines = ["# graph domain op_type count: the op types each graph contains"]
    for kind, path in paths.items():
        _inline_identities(path)
        check_graph(path)
        for (domain, op), count in sorted(op_types(path).items()):
            lines.append(f"{os.path.basename(path)} {domain} {op} {count}")
    with open(os.path.join(out_dir, "ops.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return paths


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m s4d.sparse4d.export", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", required=True, choices=["tiny", "v3"])
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--aggregation", default="ext", choices=["ext", "reference", "both"],
                    help="ext: s4d::DeformableAggregation node; reference: standard ops "
                         "only (written as *_head_reference.onnx); both")
    ap.add_argument("--seed", type=int, default=0, help="random weights seed")
    ap.add_argument("--checkpoint", help="weights to load instead: an s4d checkpoint "
                    "(s4d.sparse4d.train) or an upstream Sparse4Dv3 checkpoint (.pth)")
    args = ap.parse_args(argv)
    try:
        model = None
        if args.checkpoint:
            from .checkpoint import is_s4d_checkpoint, load_model
            ckpt = torch.load(args.checkpoint, map_location="cpu")
            if is_s4d_checkpoint(ckpt):
                model = load_model(args.checkpoint, aggregation="reference", preset=args.preset)
        if model is None:
            model = build_model(args.preset, aggregation="reference", seed=args.seed)
        if args.checkpoint and not is_s4d_checkpoint(ckpt):
            from .mapping import load_upstream_checkpoint
            load_upstream_checkpoint(model, args.checkpoint)
        paths = export(args.preset, args.out, args.aggregation, model=model)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"export: {e}", file=sys.stderr)
        return 1
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    with open(os.path.join(args.out, "ops.txt")) as f:
        sys.stdout.write(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
