"""Golden sequences: every graph input and output of several frames, as .npy.

    python3 -m s4d.sparse4d.golden --preset tiny|v3 --out DIR [--frames 6] [--cut-at 3]
                                  [--checkpoint FILE] [--aggregation ext|reference]
                                  [--seed 0] [--no-export] [--device cpu|cuda]

Runs the eager PyTorch model (the weights of an s4d checkpoint, or random
weights from --seed, the same weights the export writes) through the
validation sequences of the synthetic dataset (dataset.py), --cut-at frames
of each, laid end to end with a scene cut (a time gap above 2 s) between
them, and writes, per frame, the backbone's input and output, the head's
inputs (frame inputs and the instance-bank state) and outputs, and the
ground truth. The state fed to frame i is the state output of frame i-1
(zeros_state for frame 0). Unless --no-export, the ONNX graphs are written
into DIR as well.

DIR/manifest.json is flat for a C reader: top-level scalars, a list of
graphs, a list of state feedback pairs and one list of tensor records
{frame, graph, io, name, file, dtype, shape}; a file may be shared by two
records (the backbone's output "features" is the head's input "features").
The ground truth of a frame is the record {graph "scene", io "truth", name
"gt_boxes"}: float32 [M, 11], one row per object that counts (visible,
within scene.GT_RANGE): x, y, z, w, l, h, yaw, vx, vy (lidar frame), nuScenes
class index, track id; "raw_images" is the uint8 [N, 3, H, W] camera images
before normalisation (for pictures).
"""
import argparse
import json
import os
import sys
from typing import Dict, List

import numpy as np
import torch

from .export import HEAD_INPUT_NAMES, HEAD_OUTPUT_NAMES, RAW_OUTPUT_NAMES, export
from .head import DETECTION_NAMES, STATE_NAMES, HeadState
from .dataset import split_frames
from .model import build_model

FORMAT = "s4d-golden"
VERSION = 1


def _record(out_dir, frame, graph, io, name, arr, file=None):
    arr = np.ascontiguousarray(arr)
    if file is None:
        file = f"f{frame:03d}_{graph}_{io}_{name}.npy"
        np.save(os.path.join(out_dir, file), arr)
    return {"frame": frame, "graph": graph, "io": io, "name": name, "file": file,
            "dtype": str(arr.dtype), "shape": [int(d) for d in arr.shape]}


def truth_array(gt: Dict) -> np.ndarray:
    """[M, 11] float32: box (9), class, track id."""
    return np.concatenate([gt["boxes"].reshape(-1, 9), gt["labels"][:, None],
                           gt["track_ids"][:, None]], 1).astype(np.float32)


def generate(preset: str, out_dir: str, frames: int = 6, cut_at: int = 3,
             aggregation: str = "ext", seed: int = 0, do_export: bool = True,
             device: str = "cpu", checkpoint: str = None) -> Dict:
    """`cut_at`: frames per scene (a scene cut every cut_at frames)."""
    if frames < 2 or not 0 < cut_at < frames:
        raise ValueError(f"need frames >= 2 and 0 < cut_at < frames (got {frames}, {cut_at})")
    os.makedirs(out_dir, exist_ok=True)
    if checkpoint:
        from .checkpoint import load_model
        model = load_model(checkpoint, aggregation=aggregation, preset=preset)
    else:
        model = build_model(preset, aggregation=aggregation, seed=seed)
    cfg = model.cfg
    graphs = {}
    if do_export:
        paths = export(preset, out_dir, aggregation, model=model)
        graphs = {"backbone": os.path.basename(paths["backbone"]),
                  "head": os.path.basename(paths["head" if aggregation == "ext"
                                                  else "head_reference"])}
    if device != "cpu":
        # full fp32 on the GPU too: golden data is a reference, not a benchmark
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = model.to(device)
    seq = split_frames(cfg, "val", frames, scene_length=cut_at)
    state = model.initial_state()
    records: List[Dict] = []
    frame_info = []
    for i, fr in enumerate(seq):
        with torch.no_grad():
            images = torch.from_numpy(fr["images"]).to(device)
            features = model.backbone(images)
            frame_ins = [features] + [torch.from_numpy(fr[k]).to(device) for k in
                                      ("projection", "image_wh", "timestamp", "ego_pose")]
            out = model.head(*frame_ins, state)
        frame_ins = [t.cpu() for t in frame_ins]
        cpu_state = [t.cpu() for t in state]
        out = {k: (v.cpu() if torch.is_tensor(v) else v) for k, v in out.items()}
        records.append(_record(out_dir, i, "backbone", "input", "images", fr["images"]))
        feat_rec = _record(out_dir, i, "backbone", "output", "features", frame_ins[0].numpy())
        records.append(feat_rec)
        for name, t in zip(HEAD_INPUT_NAMES, frame_ins + cpu_state):
            file = feat_rec["file"] if name == "features" else None
            records.append(_record(out_dir, i, "head", "input", name, t.numpy(), file))
        outs = [out[n] for n in DETECTION_NAMES + RAW_OUTPUT_NAMES] + [t.cpu() for t in
                                                                        out["state"]]
        for name, t in zip(HEAD_OUTPUT_NAMES, outs):
            records.append(_record(out_dir, i, "head", "output", name, t.numpy()))
        records.append(_record(out_dir, i, "scene", "truth", "gt_boxes", truth_array(fr["gt"])))
        records.append(_record(out_dir, i, "scene", "truth", "raw_images", fr["raw_images"]))
        frame_info.append({"frame": i, "timestamp": float(fr["timestamp"][0]),
                           "scene_start": bool(fr["scene_start"])})
        state = HeadState(*[t.clone() for t in out["state"]])
    manifest = {
        "format": FORMAT, "version": VERSION, "preset": cfg.name, "seed": seed,
        "checkpoint": os.path.abspath(checkpoint) if checkpoint else None,
        "aggregation": aggregation, "device": device, "num_frames": frames,
        "graphs": [{"graph": g, "file": f} for g, f in graphs.items()],
        "state_feedback": [{"output": n + "_out", "input": n} for n in STATE_NAMES],
        "frames": frame_info,
        "tensors": records,
    }
    # one record per line: easy to read, diff and grep
    head = json.dumps({k: v for k, v in manifest.items() if k != "tensors"}, indent=1)
    body = ",\n".join("  " + json.dumps(r) for r in records)
    with open(os.path.join(out_dir, "manifest.json"), "w") as f:
        f.write(head[:-2] + ',\n "tensors": [\n' + body + "\n ]\n}\n")
    return manifest


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m s4d.sparse4d.golden", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", required=True, choices=["tiny", "v3"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--cut-at", type=int, default=3,
                    help="frames per scene: a scene cut every N frames")
    ap.add_argument("--checkpoint", help="s4d checkpoint (trained weights) instead of the "
                    "seeded random weights")
    ap.add_argument("--aggregation", default="ext", choices=["ext", "reference"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-export", action="store_true", help="write the tensors only")
    ap.add_argument("--device", default="cpu", help="run the eager model on this device "
                    "(e.g. cuda; fp32 without TF32); the export always runs on the CPU")
    args = ap.parse_args(argv)
    try:
        m = generate(args.preset, args.out, args.frames, args.cut_at, args.aggregation,
                     args.seed, not args.no_export, args.device, args.checkpoint)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"golden: {e}", file=sys.stderr)
        return 1
    print(f"golden: {len(m['tensors'])} tensors over {m['num_frames']} frames in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
