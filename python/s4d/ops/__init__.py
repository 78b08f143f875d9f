"""s4d ops for PyTorch.

deformable_aggregation            the C/CUDA op library through the s4d._C extension,
                                  which registers the operator s4d::deformable_aggregation
                                  in C++ (autograd, Meta kernel); ONNX export as
                                  s4d::DeformableAggregation
deformable_aggregation_reference  the same function in pure PyTorch (no extension needed;
                                  exports with standard ONNX ops, opset >= 16)
"""
from ._extension import ExtensionNotBuiltError, extension_available, load_extension
from ._deformable_aggregation import (ONNX_DOMAIN, ONNX_OP_TYPE, ONNX_PLUGIN_VERSION,
                                     deformable_aggregation, onnx_translation_table)
from ._onnx import infer_static_shapes
from .reference import deformable_aggregation_reference, valid_mask

__all__ = [
    "deformable_aggregation",
    "deformable_aggregation_reference",
    "valid_mask",
    "extension_available",
    "load_extension",
    "ExtensionNotBuiltError",
    "onnx_translation_table",
    "infer_static_shapes",
    "ONNX_DOMAIN",
    "ONNX_OP_TYPE",
    "ONNX_PLUGIN_VERSION",
]
