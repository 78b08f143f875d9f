"""Golden sequences: every graph input and output of several frames, as .npy.

    python3 -m s4d.sparse4d.golden --preset tiny|v3 --out DIR [--frames 6] [--cut-at 3]
                                  [--aggregation ext|reference] [--seed 0] [--no-export]
                                  [--device cpu|cuda]

Runs the eager PyTorch model (random weights from --seed, the same weights
the export writes) through a synthetic drive (scene.py) with a scene cut (a
time gap above 2 s) and writes, per frame, the backbone's input and output
and the head's inputs (frame inputs and the instance-bank state) and outputs.
The state fed to frame i is the state output of frame i-1 (zeros_state for
frame 0). Unless --no-export, the ONNX graphs are written into DIR as well.

DIR/manifest.json is flat for a C reader: top-level scalars, a list of
graphs, a list of state feedback pairs and one list of tensor records
{frame, graph, io, name, file, dtype, shape}; a file may be shared by two
records (the backbone's output "features" is the head's input "features").
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
from .model import build_model
from .scene import make_sequence

FORMAT = "s4d-golden"
VERSION = 1


def _record(out_dir, frame, graph, io, name, arr, file=None):
    arr = np.ascontiguousarray(arr)
    if file is None:
        file = f"f{frame:03d}_{graph}_{io}_{name}.npy"
        np.save(os.path.join(out_dir, file), arr)
    return {"frame": frame, "graph": graph, "io": io, "name": name, "file": file,
            "dtype": str(arr.dtype), "shape": [int(d) for d in arr.shape]}


def generate(preset: str, out_dir: str, frames: int = 6, cut_at: int = 3,
             aggregation: str = "ext", seed: int = 0, do_export: bool = True,
             device: str = "cpu") -> Dict:
    if frames < 2 or not 0 < cut_at < frames:
        raise ValueError(f"need frames >= 2 and 0 < cut_at < frames (got {frames}, {cut_at})")
    os.makedirs(out_dir, exist_ok=True)
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
    seq = make_sequence(cfg, num_frames=frames, cut_at=cut_at, seed=seed)
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
        frame_info.append({"frame": i, "timestamp": float(fr["timestamp"][0]),
                           "scene_start": bool(fr["scene_start"])})
        state = HeadState(*[t.clone() for t in out["state"]])
    manifest = {
        "format": FORMAT, "version": VERSION, "preset": cfg.name, "seed": seed,
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
    ap.add_argument("--cut-at", type=int, default=3, help="frame after the scene cut")
    ap.add_argument("--aggregation", default="ext", choices=["ext", "reference"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-export", action="store_true", help="write the tensors only")
    ap.add_argument("--device", default="cpu", help="run the eager model on this device "
                    "(e.g. cuda; fp32 without TF32); the export always runs on the CPU")
    args = ap.parse_args(argv)
    try:
        m = generate(args.preset, args.out, args.frames, args.cut_at, args.aggregation,
                     args.seed, not args.no_export, args.device)
    except (ValueError, RuntimeError, OSError) as e:
        print(f"golden: {e}", file=sys.stderr)
        return 1
    print(f"golden: {len(m['tensors'])} tensors over {m['num_frames']} frames in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
