"""Element-wise chains for device_compare.py (family "pointwise"): graphs that both engines fuse
into s4d::FusedPointwise, the CPU's host kernel against the CUDA kernel, in float32 and float16.

The chains are those of tests/engine/pointwise_fusion.py (every op the program has, bool
intermediates, Where, Clip, Cast, broadcasting inputs, an intermediate broadcast into the output,
programs split by the length and input limits), plus the Sparse4Dv3 head's shapes: the
projections' scale and bias on [1, 900, 256] (v3) and [1, 128, 256] (tiny), the key-point chain
Exp [1, 900, 1, 3] -> Mul [7, 3] -> Add on [1, 900, 7, 3], the sampling-point normalisation
Clip -> Div on [1, 6, 11700, 2], the anchor update on [1, 900, 8, 312]; a large odd tensor
([4, 17, 1000, 251]: one element per thread, more threads than the grid, so the grid-stride
loop turns) and a large packed one ([6, 256, 64, 176]).

Tolerances. float32: the CUDA kernel applies CUDA's expf, logf, tanhf, atanf, sqrtf (within 2 ulp
of glibc's) where the CPU applies glibc's; a chain of at most nine such functions composes their
relative errors, so rtol 4e-6, atol 2e-6 (values of order 1; the divisors and logarithm arguments
stay away from zero). float16 (cases.half_case, against the float32 chain on the same rounded
values): the fused kernel computes in float32 and rounds the output once (2^-11 relative): rtol
2e-3, atol 1e-3.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
from cases import Case, half_case  # noqa: E402
import pointwise_fusion as pf  # noqa: E402
from pointwise_fusion import node  # noqa: E402

F32_TOL = (4e-6, 2e-6)
F16_TOL = (2e-3, 1e-3)


def head_cases(rng):
    def u(shape, lo=-2.0, hi=2.0):
        return rng.uniform(lo, hi, shape).astype(np.float32)

    def pos(shape):
        return rng.uniform(0.5, 2.0, shape).astype(np.float32)

    F32 = pf.F32
    c = []
    for tag, n in (("v3", 900), ("tiny", 128)):
        c.append(pf.Case(f"{tag}_scale_bias_relu", [node("Mul", ["x", "s"], "t"), node("Add", ["t", "b"], "a"),
                                                   node("Relu", ["a"], "o")],
                         {"x": u((1, n, 256))}, {"s": np.array(0.125, np.float32), "b": u((256,))},
                         {"o": F32}, 1, []))
    c.append(pf.Case("v3_kps", [node("Exp", ["x"], "e"), node("Mul", ["k", "e"], "m"), node("Add", ["m", "y"], "o")],
                     {"x": u((1, 900, 1, 3)), "y": u((1, 900, 7, 3))}, {"k": u((7, 3))}, {"o": F32}, 1, []))
    c.append(pf.Case("v3_points_clip_div",
                     [node("Clip", ["z", "eps"], "zc"), node("Div", ["p", "zc"], "d"), node("Mul", ["d", "s"], "m"),
                      node("Sub", ["m", "one"], "o")],
                     {"z": pos((1, 6, 11700, 1)), "p": u((1, 6, 11700, 2))},
                     {"eps": np.array(1e-5, np.float32), "s": pos((1, 6, 1, 2)), "one": np.array(1.0, np.float32)},
                     {"o": F32}, 1, []))
    c.append(pf.Case("v3_anchor_sigmoid", [node("Sigmoid", ["x"], "g"), node("Mul", ["g", "y"], "m"),
                                          node("Add", ["m", "x"], "o")],
                     {"x": u((1, 900, 8, 312)), "y": u((312,))}, {}, {"o": F32}, 1, []))
    c.append(pf.Case("grid_stride_odd", [node("Mul", ["x", "s"], "t"), node("Tanh", ["t"], "o")],
                     {"x": u((4, 17, 1000, 251))}, {"s": np.array(0.75, np.float32)}, {"o": F32}, 1, []))
    c.append(pf.Case("large_packed", [node("Sub", ["x", "m"], "t"), node("Mul", ["t", "s"], "u"),
                                      node("Sigmoid", ["u"], "o")],
                     {"x": u((6, 256, 64, 176))}, {"m": u((256, 1, 1)), "s": pos((176,))}, {"o": F32}, 1, []))
    return c


# Chains whose every float tensor may be float16 (no Cast to float32 in the middle).
HALF_OK = ("mul_add_bias", "exp_mul_sub_div", "sigmoid_relu_rows", "clip_inputs", "compare_where_div",
           "where_where", "min_max", "broadcast_mid", "v3_scale_bias_relu", "v3_kps", "v3_points_clip_div")


def cases():
    rng = np.random.default_rng(2026)
    out = []
    for pc in pf.make_cases(rng) + head_cases(rng):
        if pc.fused == 0:
            continue  # the near misses are the engine test's
        case = Case(pc.name, pf.build(pc), dict(pc.inputs), *F32_TOL)
        out.append(case)
        if pc.name in HALF_OK:
            out.append(half_case(case, *F16_TOL))
    return out
