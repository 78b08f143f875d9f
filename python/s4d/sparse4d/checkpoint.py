"""s4d checkpoints of a trained Sparse4D: weights (fp16 storage), the preset
and its overrides, and how they were made.

    {"format": "s4d-sparse4d", "version": 1, "preset": "tiny",
     "overrides": {"yaw_swap_quirk": False}, "state_dict": {...}, "meta": {...}}

Floating-point tensors are stored in float16 (half the size; the model
runs in float32 and every consumer, evaluation included, loads the same
rounded weights). `load_model` builds the preset with the overrides and
loads every tensor (strict).
"""
import os
from typing import Dict, Optional

import torch

from .model import Sparse4D, build_model

FORMAT = "s4d-sparse4d"
VERSION = 1
# the checkpoint trained on the synthetic dataset, committed with the package
DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights")


def default_checkpoint(preset: str) -> str:
    return os.path.join(DEFAULT_DIR, f"sparse4d_{preset}_synthetic.pt")


def is_s4d_checkpoint(obj) -> bool:
    return isinstance(obj, dict) and obj.get("format") == FORMAT


def save_checkpoint(model: Sparse4D, path: str, overrides: Dict, meta: Optional[Dict] = None,
                    half: bool = True) -> None:
    state = {}
    for k, v in model.state_dict().items():
        v = v.detach().cpu()
        state[k] = v.half() if half and v.is_floating_point() else v.clone()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save({"format": FORMAT, "version": VERSION, "preset": model.cfg.name,
                "overrides": dict(overrides), "state_dict": state, "meta": dict(meta or {})},
               path)


def read_checkpoint(path: str) -> Dict:
    try:
        ckpt = torch.load(path, map_location="cpu")
    except (OSError, RuntimeError, EOFError) as e:
        raise ValueError(f"{path}: cannot read a checkpoint ({e})") from e
    if not is_s4d_checkpoint(ckpt):
        raise ValueError(f"{path}: not an s4d checkpoint (format '{FORMAT}')")
    if ckpt.get("version") != VERSION:
        raise ValueError(f"{path}: checkpoint version {ckpt.get('version')}, expected {VERSION}")
    return ckpt


def load_model(path: str, aggregation: str = "ext", preset: Optional[str] = None) -> Sparse4D:
    """The model of an s4d checkpoint in eval mode (float32). With `preset`,
    the checkpoint must be of that preset."""
    ckpt = read_checkpoint(path)
    if preset is not None and ckpt["preset"] != preset:
        raise ValueError(f"{path}: a checkpoint of preset '{ckpt['preset']}', not '{preset}'")
    model = build_model(ckpt["preset"], aggregation=aggregation, **ckpt["overrides"])
    own = model.state_dict()
    state = ckpt["state_dict"]
    missing, extra = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    bad = [k for k in own if k in state and tuple(own[k].shape) != tuple(state[k].shape)]
    if missing or extra or bad:
        raise ValueError(f"{path}: does not fit preset '{ckpt['preset']}': missing {missing[:3]}, "
                         f"unexpected {extra[:3]}, shape mismatch {bad[:3]}")
    model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()}, strict=True)
    return model.eval()
