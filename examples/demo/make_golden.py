"""Writes the demo's frame sequence and PyTorch's outputs for it.

    PYTHONPATH=python /usr/bin/python3 examples/demo/make_golden.py --preset tiny --out DIR

For each frame of the synthetic drive (s4d.sparse4d.scene, with a scene cut)
DIR/frame_NNN/ receives every input and every output of both exported graphs
as .npy, under the graph's tensor names: images -> features (backbone);
features, projection, image_wh, timestamp, ego_pose, bank_* -> boxes, scores,
labels, track_ids, classification, prediction, quality, bank_*_out (head).
The model is the one the export builds (same preset, same seed), run eagerly
with its state fed back frame after frame. DIR/frames.txt is the flat list a
C program reads: one line per frame, "frame_NNN scene_start timestamp".
"""
import argparse
import os
import sys

import numpy as np
import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny", choices=["tiny", "v3"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--cut-at", type=int, default=3, help="frame that starts the second scene")
    ap.add_argument("--seed", type=int, default=0, help="weights seed (the export's default: 0)")
    ap.add_argument("--scene-seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.frames < 1 or not 0 < args.cut_at < args.frames + 1:
        print("make_golden: need --frames >= 1 and 0 < --cut-at <= frames", file=sys.stderr)
        return 2

    from s4d import ops
    from s4d.sparse4d import build_model
    from s4d.sparse4d.export import HEAD_OUTPUT_NAMES
    from s4d.sparse4d.head import DETECTION_NAMES, STATE_NAMES
    from s4d.sparse4d.scene import make_sequence

    # the extension when it is built (the same kernels the engine's plugin
    # runs); the pure-PyTorch reference computes the same function otherwise
    mode = "ext" if ops.extension_available() else "reference"
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    model = build_model(args.preset, aggregation=mode, seed=args.seed)
    cfg = model.cfg
    frames = make_sequence(cfg, num_frames=args.frames, cut_at=args.cut_at, seed=args.scene_seed)
    os.makedirs(args.out, exist_ok=True)
    state = model.initial_state()
    lines = ["# s4d demo frames: directory scene_start timestamp (preset %s, aggregation %s)"
             % (cfg.name, mode)]
    for i, fr in enumerate(frames):
        d = "frame_%03d" % i
        path = os.path.join(args.out, d)
        os.makedirs(path, exist_ok=True)

        def save(name, value):
            arr = value.detach().numpy() if torch.is_tensor(value) else np.asarray(value)
            np.save(os.path.join(path, name + ".npy"), np.ascontiguousarray(arr))

        ins = {k: torch.from_numpy(fr[k]) for k in
               ("images", "projection", "image_wh", "timestamp", "ego_pose")}
        with torch.no_grad():
            features = model.backbone(ins["images"])
            out = model.head(features, ins["projection"], ins["image_wh"], ins["timestamp"],
                             ins["ego_pose"], state)
        for k, v in ins.items():
            save(k, v)
        save("features", features)
        for name, v in zip(STATE_NAMES, state):
            save(name, v)
        for name in HEAD_OUTPUT_NAMES:
            if name.endswith("_out"):
                save(name, out["state"][STATE_NAMES.index(name[:-len("_out")])])
            else:
                save(name, out[name])
        state = out["state"]
        lines.append("%s %d %.6f" % (d, int(fr["scene_start"]), float(fr["timestamp"][0])))
        print("golden: frame %d/%d: %d boxes, top score %.3f" % (
            i + 1, len(frames), out[DETECTION_NAMES[0]].shape[1], float(out["scores"].max())),
            flush=True)
    with open(os.path.join(args.out, "frames.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
