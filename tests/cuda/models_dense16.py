"""The dense family in float16 for device_compare.py (family "dense16"): models_dense.half_cases,
float16 versions of the convolution, product and pool cases and of the Sparse4Dv3 backbone
convolutions and head products, each against the CPU float32 reference on the same values
rounded to float16 (cases.half_case; tolerances reasoned in models_dense.py). A family of its
own so that the float32 dense run keeps its time; on the guarded device (CPU kernels, which
refuse float16) every case is skipped with the reason printed.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_dense  # noqa: E402


def cases():
    return models_dense.half_cases(np.random.default_rng(1516))
