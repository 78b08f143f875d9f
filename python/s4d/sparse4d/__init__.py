"""Sparse4Dv3 in plain PyTorch: model, presets, scene generator, export,
golden sequences and the upstream checkpoint name mapping."""
from .config import PRESETS, Sparse4DConfig, get_preset
from .head import HeadState, zeros_state
from .model import Sparse4D, build_model

__all__ = ["PRESETS", "Sparse4DConfig", "get_preset", "HeadState", "zeros_state", "Sparse4D",
           "build_model"]
