"""Loading upstream Sparse4Dv3 checkpoints.

Upstream (mmdet3d-style) names and ours differ only in where the backbone
lives; every head module keeps upstream's name and Sequential indices:

    upstream                                   s4d
    img_backbone.<rest>                        backbone.img_backbone.<rest>
    img_neck.lateral_convs.i.conv.<w|b>        backbone.img_neck.lateral_convs.i.conv.<w|b>
    img_neck.fpn_convs.i.conv.<w|b>            backbone.img_neck.fpn_convs.i.conv.<w|b>
    head.<rest>                                head.<rest>
    depth_branch.*, head.depth_branch.*        dropped (training-only dense depth)
    a leading "module." (DataParallel)         stripped

Every other key is an error, and so is every parameter of the model that
the checkpoint does not provide: a checkpoint that loads has loaded fully.
"""
from typing import Dict, List, Tuple

import torch

_DROPPED_PREFIXES = ("depth_branch.", "head.depth_branch.", "grid_mask.")
_RENAMES = (("img_backbone.", "backbone.img_backbone."), ("img_neck.", "backbone.img_neck."),
            ("head.", "head."))


def map_upstream_state_dict(state: Dict[str, torch.Tensor]
                            ) -> Tuple[Dict[str, torch.Tensor], List[str], List[str]]:
    """-> (mapped state dict, dropped keys, unknown keys)."""
    mapped, dropped, unknown = {}, [], []
    for key, value in state.items():
        name = key[len("module."):] if key.startswith("module.") else key
        if name.startswith(_DROPPED_PREFIXES):
            dropped.append(key)
            continue
        for old, new in _RENAMES:
            if name.startswith(old):
                mapped[new + name[len(old):]] = value
                break
        else:
            unknown.append(key)
    return mapped, dropped, unknown


def load_upstream_state_dict(model: torch.nn.Module, state: Dict[str, torch.Tensor]) -> List[str]:
    """Loads an upstream state dict into `model`; returns the dropped keys.
    Raises ValueError naming unknown, missing and mis-shaped tensors."""
    mapped, dropped, unknown = map_upstream_state_dict(state)
    own = model.state_dict()
    missing = sorted(set(own) - set(mapped))
    extra = sorted(set(mapped) - set(own)) + unknown
    shapes = [f"{k}: checkpoint {list(v.shape)} vs model {list(own[k].shape)}"
              for k, v in mapped.items() if k in own and tuple(v.shape) != tuple(own[k].shape)]
    problems = []
    if extra:
        problems.append(f"{len(extra)} unexpected key(s), e.g. {extra[:3]}")
    if missing:
        problems.append(f"{len(missing)} missing key(s), e.g. {missing[:3]}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es), e.g. {shapes[:2]}")
    if problems:
        raise ValueError("upstream checkpoint does not fit the model: " + "; ".join(problems))
    model.load_state_dict(mapped, strict=True)
    return dropped


def load_upstream_checkpoint(model: torch.nn.Module, path: str) -> List[str]:
    """Loads an upstream .pth file (a raw state dict or {"state_dict": ...})."""
    ckpt = torch.load(path, map_location="cpu")
    state = ckpt.get("state_dict", ckpt) if isinstance(ckpt, dict) else None
    if not isinstance(state, dict):
        raise ValueError(f"{path}: no state dict found")
    return load_upstream_state_dict(model, state)
