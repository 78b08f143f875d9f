"""Calibration sets for the fp16 accuracy guard (s4dexec --calib=DIR).

    python3 -m s4d.sparse4d.calib --preset tiny|v3 --out DIR [--frames 3]
                                  [--weights trained|seeded] [--checkpoint FILE]
                                  [--device cpu|cuda]
    python3 -m s4d.sparse4d.calib --golden GOLDEN_DIR --out DIR [--frames 3]

Writes one calibration set per frame, DIR/backbone/fNNN/images.npy and
DIR/head/fNNN/<input>.npy, named exactly as the exported graphs' inputs
(export.HEAD_INPUT_NAMES), so that `--calib=DIR/backbone` and
`--calib=DIR/head` are what the builder reads. The frames are the first
--frames frames of the validation split (dataset.split_frames, the demo's
golden sequence), one scene, in order: the head's sets hold the instance bank
as the eager fp32 PyTorch model carries it (zeros on the first frame, then
the previous frame's bank_*_out), because the guard has to see the state a
deployment feeds, not random values. DIR/calib.json records what was
written (preset, weights, frames, names, shapes, dtypes) and, as "accuracy",
the tolerances to build each graph with (s4dexec --accuracy=...): what the
head's boxes tolerate in the features and in the carried state, measured
(ACCURACY below). `--print-accuracy head` (or backbone) prints one of them:

    s4dexec ... --fp16 --calib=DIR/head \
        --accuracy="$(python3 -m s4d.sparse4d.calib --print-accuracy head)"

With --golden the sets are taken from a golden sequence already computed
(s4d.sparse4d.golden, e.g. the demo's), linked where the file system allows,
instead of running the model again.

--weights: "trained" loads the committed checkpoint of the preset
(weights/sparse4d_<preset>_synthetic.pt, or --checkpoint), "seeded" the
seeded random weights of build_model (seed 0, what the export writes without
a checkpoint); default: trained when the checkpoint exists.
"""
import argparse
import json
import os
import shutil
import sys
from typing import Dict, List, Optional

import numpy as np
import torch

from .dataset import split_frames
from .export import HEAD_INPUT_NAMES
from .head import HeadState
from .model import build_model

BACKBONE_INPUT_NAMES = ("images",)
# The tolerances (s4dexec --accuracy) the demo, its tests and the frame benchmark give
# the guard for each graph: what the head's boxes tolerate, measured with
# bench/feature_sensitivity.py (docs/precision.md, "How accurate the backbone must be"
# and "How accurate the carried state must be"): 2e-4 relative L2 in the features; in
# the instance bank the head carries to the next frame, 5e-6 in the anchors, 1e-4 in the
# confidences and 1e-3 in the instance features (the other outputs: the default 1e-2).
ACCURACY = {
    "backbone": "2e-4",
    "head": "1e-2,bank_anchor_out:5e-6,bank_confidence_out:1e-4,bank_feature_out:1e-3",
}
FRAME_KEYS = ("projection", "image_wh", "timestamp", "ego_pose")
WEIGHTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights")


def default_checkpoint(preset: str) -> str:
    return os.path.join(WEIGHTS_DIR, f"sparse4d_{preset}_synthetic.pt")


def _set_dir(out_dir: str, graph: str, frame: int) -> str:
    d = os.path.join(out_dir, graph, f"f{frame:03d}")
    os.makedirs(d, exist_ok=True)
    return d


def _record(d: str, name: str, arr: np.ndarray) -> Dict:
    arr = np.ascontiguousarray(arr)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{d}/{name}: non-finite values")
    np.save(os.path.join(d, name + ".npy"), arr)
    return {"name": name, "dtype": str(arr.dtype), "shape": [int(s) for s in arr.shape]}


def _write_index(out_dir: str, info: Dict) -> None:
    info["accuracy"] = dict(ACCURACY)  # what to give s4dexec --accuracy per graph
    with open(os.path.join(out_dir, "calib.json"), "w") as f:
        json.dump(info, f, indent=1)
        f.write("\n")


def _default_aggregation() -> str:
    # the inputs are the same either way; the op's extension is faster
    from s4d import ops
    return "ext" if ops.extension_available() else "reference"


def load_weights(preset: str, weights: Optional[str], checkpoint: Optional[str],
                 aggregation: Optional[str] = None):
    """(model, description): the trained checkpoint or the seeded weights."""
    aggregation = aggregation or _default_aggregation()
    ckpt = checkpoint or default_checkpoint(preset)
    if weights is None:
        weights = "trained" if os.path.isfile(ckpt) else "seeded"
    if weights == "trained":
        if not os.path.isfile(ckpt):
            raise ValueError(f"--weights trained: no checkpoint {ckpt} (use --weights seeded)")
        from .checkpoint import load_model
        return load_model(ckpt, aggregation=aggregation, preset=preset), f"trained ({ckpt})"
    if weights != "seeded":
        raise ValueError(f"--weights must be trained or seeded, got '{weights}'")
    return build_model(preset, aggregation=aggregation, seed=0), "seeded (seed 0)"


def export_calib(preset: str, out_dir: str, frames: int = 3, weights: Optional[str] = None,
                 checkpoint: Optional[str] = None, device: str = "cpu",
                 aggregation: Optional[str] = None) -> Dict:
    """Runs the fp32 model over the first `frames` validation frames (one
    scene, the state carried) and writes the backbone's and the head's inputs
    of every frame. Returns the index written to DIR/calib.json."""
    if frames < 1:
        raise ValueError(f"--frames must be at least 1, got {frames}")
    model, desc = load_weights(preset, weights, checkpoint, aggregation)
    if device != "cpu":
        # the reference is fp32: no TF32 on the GPU
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = model.to(device)
    os.makedirs(out_dir, exist_ok=True)
    state = model.initial_state()
    sets: List[Dict] = []
    seq = split_frames(model.cfg, "val", frames, scene_length=max(frames, 1))
    for i, fr in enumerate(seq):
        with torch.no_grad():
            images = torch.from_numpy(fr["images"]).to(device)
            features = model.backbone(images)
            frame_ins = [features] + [torch.from_numpy(fr[k]).to(device) for k in FRAME_KEYS]
            out = model.head(*frame_ins, state)
        bd = _set_dir(out_dir, "backbone", i)
        hd = _set_dir(out_dir, "head", i)
        sets.append({
            "frame": i, "timestamp": float(fr["timestamp"][0]),
            "backbone": [_record(bd, "images", fr["images"])],
            "head": [_record(hd, n, t.cpu().numpy())
                     for n, t in zip(HEAD_INPUT_NAMES, frame_ins + list(state))]})
        state = HeadState(*[t.clone() for t in out["state"]])
    info = {"format": "s4d-calib", "version": 1, "preset": model.cfg.name, "weights": desc,
            "source": "eager fp32 PyTorch, validation split, state carried",
            "device": device, "frames": len(sets), "sets": sets}
    _write_index(out_dir, info)
    return info


def _link_or_copy(src: str, dst: str) -> None:
    if os.path.lexists(dst):
        os.remove(dst)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def calib_from_golden(golden_dir: str, out_dir: str, frames: int = 3) -> Dict:
    """The calibration sets of the first `frames` frames of a golden
    sequence (its manifest.json): the backbone's and the head's inputs."""
    path = os.path.join(golden_dir, "manifest.json")
    with open(path) as f:
        man = json.load(f)
    if man.get("format") != "s4d-golden":
        raise ValueError(f"{path}: not a golden sequence manifest")
    if frames < 1:
        raise ValueError(f"--frames must be at least 1, got {frames}")
    n = min(frames, int(man["num_frames"]))
    want = {"backbone": BACKBONE_INPUT_NAMES, "head": HEAD_INPUT_NAMES}
    sets = []
    for i in range(n):
        entry = {"frame": i, "timestamp": man["frames"][i]["timestamp"]}
        if i > 0 and man["frames"][i]["scene_start"]:
            entry["scene_start"] = True
        for graph, names in want.items():
            recs = {r["name"]: r for r in man["tensors"]
                    if r["frame"] == i and r["graph"] == graph and r["io"] == "input"}
            missing = [x for x in names if x not in recs]
            if missing:
                raise ValueError(f"{path}: frame {i} has no {graph} input {missing[0]}")
            d = _set_dir(out_dir, graph, i)
            for x in names:
                _link_or_copy(os.path.join(golden_dir, recs[x]["file"]),
                              os.path.join(d, x + ".npy"))
            entry[graph] = [{"name": x, "dtype": recs[x]["dtype"], "shape": recs[x]["shape"]}
                            for x in names]
        sets.append(entry)
    info = {"format": "s4d-calib", "version": 1, "preset": man["preset"],
            "weights": (f"trained ({man['checkpoint']})" if man.get("checkpoint")
                        else f"seeded (seed {man.get('seed', 0)})"),
            "source": f"golden sequence {os.path.abspath(golden_dir)}",
            "device": man.get("device"), "frames": n, "sets": sets}
    _write_index(out_dir, info)
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m s4d.sparse4d.calib", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=["tiny", "v3"])
    ap.add_argument("--golden", help="take the sets from this golden sequence instead")
    ap.add_argument("--out")
    ap.add_argument("--print-accuracy", choices=sorted(ACCURACY), metavar="GRAPH",
                    help="print the tolerances to give s4dexec --accuracy for that graph "
                    "(backbone or head) and exit")
    ap.add_argument("--frames", type=int, default=3)
    ap.add_argument("--weights", choices=["trained", "seeded"])
    ap.add_argument("--checkpoint", help="the trained weights (default: the committed "
                    "checkpoint of the preset)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--aggregation", choices=["ext", "reference"],
                    help="the head's aggregation (default: ext when the extension is built)")
    args = ap.parse_args(argv)
    if args.print_accuracy:
        print(ACCURACY[args.print_accuracy])
        return 0
    if not args.out:
        print("calib: --out is required", file=sys.stderr)
        return 2
    if (args.preset is None) == (args.golden is None):
        print("calib: give one of --preset and --golden", file=sys.stderr)
        return 2
    try:
        if args.golden:
            info = calib_from_golden(args.golden, args.out, args.frames)
        else:
            info = export_calib(args.preset, args.out, args.frames, args.weights,
                                args.checkpoint, args.device, args.aggregation)
    except (ValueError, RuntimeError, OSError, KeyError) as e:
        print(f"calib: {e}", file=sys.stderr)
        return 1
    print(f"calib: {info['frames']} sets of the {info['preset']} preset, weights "
          f"{info['weights']}: {args.out}/backbone, {args.out}/head")
    return 0


if __name__ == "__main__":
    sys.exit(main())
