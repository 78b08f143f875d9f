"""3x3 convolutions as Winograd F(4x4, 3x3) on CUDA (src/backend/cuda/ops/dense_conv.c, CONV_WINO).

usage: conv_winograd.py S4DEXEC PLUGINS SCRATCH

Each case is a small graph of 3x3 convolutions as ResNet blocks and FPN outputs have them (bias
or none, ReLU, a residual Add; planes whose sides are no multiple of 4, so the last tiles are
cut; rows of whole tiles, stored 16 bytes at a time, and rows that are not; padding 0, 1 and 2;
one image or several), next to convolutions Winograd cannot run (1x1,
stride 2, dilation 2). Per case:
  - built with S4D_CONV_CHOICE=winograd, --dumpLayerInfo shows every 3x3 stride-1 layer as
    Winograd and no other; the outputs agree with a float64 NumPy evaluation, and their
    relative L2 error is printed beside cuDNN's;
  - the saved engine loads and gives the outputs it gave when built, bit for bit;
  - built with S4D_CONV_WINOGRAD=0 and with S4D_CONV_CHOICE=cudnn, no layer runs Winograd, and
    the outputs agree with float64; built as the engine chooses with the candidate timed
    (S4D_CONV_WINOGRAD=1), they agree too;
  - built with --tf32, no layer runs Winograd (it is a strict float32 path).
Hostile: a stride-2 layer's payload turned into a Winograd choice, a Winograd choice cut short
after the convolution's fields, and one whose cuBLASLt part is damaged, are each refused at load
with exit status 1 and a message naming the layer.
Exit 77 when there is no GPU.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
sys.path.insert(0, os.path.join(HERE, "..", "fuzz"))
from conv_gemm import (agree, agree_and_reload, build, conv_plans, mode_layers, refused_edits,  # noqa: E402
                       run_cases)
from mbconv_fusion import Graph  # noqa: E402

CONV_WINO = 5
WINO = "Winograd F(4x4,3x3)"


def blocks(rng):
    """A ResNet basic block over two images of 9 x 12 (rows of whole tiles: 16-byte stores): 3x3
    with bias and ReLU, 3x3 with bias, the residual and ReLU, then a 1x1 (not Winograd's)."""
    g = Graph(rng, "blocks")
    x = g.input("x", (2, 16, 9, 12))
    a = g.node("Relu", [g.conv(x, 16, 16, 3)])
    r = g.node("Relu", [g.node("Add", [g.conv(a, 16, 16, 3), x])])
    return g, [g.conv(r, 16, 8, 1), r], 2


def pads(rng):
    """Padding 0 (no bias) and 2 over a 7 x 13 plane, beside a stride-2 and a dilation-2 3x3."""
    g = Graph(rng, "pads")
    x = g.input("x", (1, 8, 7, 13))
    v = g.conv(x, 8, 8, 3, pad=0, bias=False)
    w = g.conv(x, 8, 4, 3, pad=2)
    s = g.conv(x, 8, 4, 3, stride=2)
    d = g.conv(x, 8, 4, 3, dil=2)
    return g, [v, w, s, d], 2


def neck(rng):
    """An FPN output: a 1x1 lateral, then a 3x3 with bias and no activation over three images of
    5 x 6 (one tile and a half per side, element by element stores)."""
    g = Graph(rng, "neck")
    x = g.input("x", (3, 24, 5, 6))
    return g, [g.conv(g.conv(x, 24, 16, 1), 16, 8, 3)], 1


def rel_l2(d, tag, want):
    """The worst relative L2 error over the outputs of d/<tag> against float64."""
    worst = 0.0
    for k, w in want.items():
        got = np.load(f"{d}/{tag}/{k}.npy").astype(np.float64)
        worst = max(worst, float(np.linalg.norm(got - w) / max(np.linalg.norm(w), 1e-300)))
    return worst


def hostile(args, d, engine, flags_in, msgs):
    """Edits of the engine's convolution payloads, each refused at load naming the layer."""
    wino, other = mode_layers(engine, CONV_WINO)
    if not wino or not other:
        msgs.append(f"hostile: expected layers with and without Winograd, found {len(wino)} and {len(other)}")
        return
    refused_edits(args, d, engine, flags_in, wino[0], other[0], CONV_WINO,
                  ("a stride-2 layer stored as Winograd", "Winograd"), "a Winograd choice", msgs)


def check_case(args, name, n_wino, got, msgs):
    d, stdout, model, flags_in, want, engine = got
    plans = conv_plans(stdout)
    as_wino = [n for n, pl in plans if WINO in pl]
    if len(as_wino) != n_wino:
        msgs.append(f"winograd: {len(as_wino)} of {len(plans)} convolution layers as Winograd, want "
                    f"{n_wino}: {plans}")
    agree_and_reload(args, d, "wino", want, engine, flags_in, msgs)
    for tag, choice, extra, flags in (("cudnn", "cudnn", None, ()),
                                      ("off", None, {"S4D_CONV_WINOGRAD": "0"}, ()),
                                      ("tf32", "winograd", None, ("--tf32",)),
                                      ("timed", None, {"S4D_CONV_WINOGRAD": "1"}, ())):
        p = build(args, d, model, flags_in, choice, tag, env_extra=extra, extra_flags=flags)
        if p.returncode != 0:
            msgs.append(f"{tag}: the build failed: {(p.stderr + p.stdout).strip()}")
            continue
        if tag != "timed" and any(WINO in pl for _, pl in conv_plans(p.stdout)):
            msgs.append(f"{tag}: a layer runs Winograd: {conv_plans(p.stdout)}")
        if tag != "tf32":
            agree(d, tag, want, msgs)
    if name == "pads":
        hostile(args, d, engine, flags_in, msgs)
    errs = f"relative L2 against float64: Winograd {rel_l2(d, 'wino', want):.2e}, " \
           f"cuDNN {rel_l2(d, 'cudnn', want):.2e}" if os.path.isdir(f"{d}/cudnn") else ""
    return f"{n_wino} Winograd layers; {errs}"


def main():
    return run_cases(__doc__, (blocks, pads, neck), 4321, "winograd", "wino", check_case)


if __name__ == "__main__":
    sys.exit(main())
