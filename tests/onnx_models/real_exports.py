"""Networks nobody wrote for s4d, exported by torch.onnx at opsets 13 and 17
with fixed input sizes, must build, leave no shape subgraph in the engine and
agree with PyTorch.

    /usr/bin/python3 tests/onnx_models/real_exports.py --s4dexec build/bin/s4dexec --work DIR
        [--only NAME,...] [--keep]

Networks: the six classifiers of bench/ort/cnn_models.py (ResNet-18/50,
MobileNetV2/V3, EfficientNet-B0, ShuffleNetV2: channel shuffles, flatten
before the classifier), a segmentation network (reflection padding,
bilinear Resize to a skip connection's computed size, ConvTranspose), a
detector head (anchor decoding on grids made with arange of the feature
size, view/permute/reshape of the predictions), a transformer encoder
(attention heads split by view, a class token expanded to the batch), and
recurrent layers (a 2-layer bidirectional LSTM, a GRU with an initial state,
an RNN with ReLU), plus the padding modes of F.pad.

Checks per (network, opset): the build succeeds; --dumpLayerInfo shows no
layer with an int64 output (a shape computation left in the engine: Shape,
Gather, Concat, Range... all fold when shapes are static); every output is
within relative L2 1e-4 of PyTorch's (Winograd convolutions round a little
more than direct ones). Exit 0 when all pass, 1 otherwise, 77 without torch.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import warnings

try:
    import numpy as np
    import torch
    from torch import nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print(f"real_exports: skipped: {e}")
    sys.exit(77)

warnings.filterwarnings("ignore")  # torch.onnx's tracer and folding notes drown the results
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "ort"))
import cnn_models  # noqa: E402


class TinySeg(nn.Module):
    """Encoder-decoder: explicit reflection padding, skips resized to their computed sizes."""

    def __init__(self, classes=5):
        super().__init__()
        self.pad = nn.ReflectionPad2d(1)
        self.e1 = nn.Conv2d(3, 16, 3)
        self.e2 = nn.Conv2d(16, 32, 3, 2, 1)
        self.e3 = nn.Conv2d(32, 48, 3, 2, 1)
        self.up = nn.ConvTranspose2d(48, 32, 2, 2)
        self.d2 = nn.Conv2d(64, 32, 3, 1, 1)
        self.d1 = nn.Conv2d(48, 16, 3, 1, 1)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x):
        s1 = F.relu(self.e1(self.pad(x)))
        s2 = F.relu(self.e2(s1))
        y = F.relu(self.e3(s2))
        y = self.up(y)
        y = F.interpolate(y, size=s2.shape[-2:], mode="bilinear", align_corners=False)
        y = F.relu(self.d2(torch.cat([y, s2], 1)))
        y = F.interpolate(y, size=s1.shape[-2:], mode="bilinear", align_corners=False)
        y = F.relu(self.d1(torch.cat([y, s1], 1)))
        return F.interpolate(self.head(y), scale_factor=2, mode="nearest")


class TinyDet(nn.Module):
    """Two-level anchor head: predictions reshaped per anchor, boxes decoded on arange grids."""

    def __init__(self, classes=3, anchors=2):
        super().__init__()
        self.c, self.a = classes, anchors
        self.b1 = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.LeakyReLU(0.1), nn.Conv2d(16, 32, 3, 2, 1),
                                nn.LeakyReLU(0.1))
        self.b2 = nn.Sequential(nn.Conv2d(32, 48, 3, 2, 1), nn.LeakyReLU(0.1))
        self.h1 = nn.Conv2d(32, anchors * (classes + 5), 1)
        self.h2 = nn.Conv2d(48, anchors * (classes + 5), 1)
        self.register_buffer("anchor_wh", torch.tensor([[10.0, 14.0], [23.0, 27.0]]))

    def decode(self, p, stride):
        b, _, h, w = p.shape
        p = p.view(b, self.a, self.c + 5, h, w).permute(0, 1, 3, 4, 2)
        gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
        grid = torch.stack((gx, gy), -1).view(1, 1, h, w, 2).float()
        xy = (torch.sigmoid(p[..., :2]) + grid) * stride
        wh = torch.exp(p[..., 2:4]) * self.anchor_wh.view(1, self.a, 1, 1, 2)
        rest = torch.sigmoid(p[..., 4:])
        return torch.cat((xy, wh, rest), -1).reshape(b, -1, self.c + 5)

    def forward(self, x):
        f1 = self.b1(x)
        f2 = self.b2(f1)
        return torch.cat((self.decode(self.h1(f1), 4.0), self.decode(self.h2(f2), 8.0)), 1)


class Encoder(nn.Module):
    """Transformer encoder with a class token and learned positions."""

    def __init__(self, d=64, heads=4, layers=2, tokens=10):
        super().__init__()
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.1)
        self.pos = nn.Parameter(torch.randn(1, tokens + 1, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        cls = self.cls.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), 1) + self.pos
        return self.norm(self.enc(x))[:, 0]


class Recurrent(nn.Module):
    """LSTM (2 layers, bidirectional) -> GRU with an initial state -> RNN with ReLU."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = nn.GRU(64, 24, batch_first=True)
        self.rnn = nn.RNN(24, 20, nonlinearity="relu")

    def forward(self, x, h0):
        y, _ = self.lstm(x)
        y, h = self.gru(y, h0)
        z, hr = self.rnn(y.transpose(0, 1))
        return z, h, hr


class Pads(nn.Module):
    # mode="circular" is left out: torch 1.13 exports it as Slices that take [-p-1:-1]
    # instead of [-p:] (the ONNX file itself disagrees with PyTorch).
    def forward(self, x):
        a = F.pad(x, (1, 2, 3, 0), mode="reflect")
        b = F.pad(x, (2, 0, 1, 1), mode="replicate")
        c = F.pad(x, (0, 3, 2, 2), mode="constant", value=0.5)
        return a, b, c


def cases():
    """(name, builder, inputs): inputs are tensors, named in0, in1..."""
    g = torch.Generator().manual_seed(3)
    img = lambda s: torch.randn(1, 3, s, s, generator=g)  # noqa: E731
    out = [(n, (lambda n=n: cnn_models.build(n)), [img(64)]) for n in cnn_models.BUILDERS]
    out += [
        ("segmentation", TinySeg, [img(48)]),
        ("detector", TinyDet, [img(64)]),
        ("transformer", Encoder, [torch.randn(2, 10, 64, generator=g)]),
        ("recurrent", Recurrent, [torch.randn(2, 7, 16, generator=g), torch.randn(1, 2, 24, generator=g)]),
        ("pad_modes", Pads, [torch.randn(1, 2, 6, 7, generator=g)]),
    ]
    return out


def run_one(exe, work, name, build, inputs, opset):
    torch.manual_seed(0)
    model = build().eval()
    d = os.path.join(work, f"{name}_op{opset}")
    os.makedirs(os.path.join(d, "ref"), exist_ok=True)
    path = os.path.join(d, "model.onnx")
    in_names = [f"in{i}" for i in range(len(inputs))]
    with torch.no_grad():
        ref = model(*inputs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    out_names = [f"out{i}" for i in range(len(ref))]
    # The transformer's fast path (no_grad + eval) has no ONNX export; tracing with grad avoids it.
    torch.onnx.export(model, tuple(inputs), path, opset_version=opset, input_names=in_names,
                      output_names=out_names, do_constant_folding=True)
    loads = []
    for n, t in zip(in_names, inputs):
        f = os.path.join(d, f"{n}.npy")
        np.save(f, t.numpy())
        loads.append(f"{n}:{f}")
    for n, t in zip(out_names, ref):
        np.save(os.path.join(d, "ref", f"{n}.npy"), t.detach().numpy())
    cmd = [exe, f"--onnx={path}", f"--loadInputs={','.join(loads)}", "--iterations=1", "--warmUp=0",
           "--dumpLayerInfo", f"--compareOutputs={os.path.join(d, 'ref')}", "--rtol=1e-3", "--atol=1e-4"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    text = p.stdout + p.stderr
    problems = []
    if p.returncode != 0:
        problems.append(f"s4dexec exited {p.returncode}: " + (p.stderr.strip().splitlines() or ["?"])[-1])
    layers = [l for l in text.splitlines() if re.match(r"\s+\d+ ", l)]
    leftover = [l.split()[1] + " (" + l.split()[2] + ")" for l in layers if "out: int64" in l]
    if leftover:
        problems.append(f"{len(leftover)} shape layers left: {', '.join(leftover[:5])}")
    worst = 0.0
    for m in re.finditer(r"\[compare\] (\S+)\s+max_abs=\S+ rel_l2=(\S+)", text):
        worst = max(worst, float(m.group(2)))
        if not float(m.group(2)) <= 1e-4:
            problems.append(f"output {m.group(1)}: relative L2 {m.group(2)} > 1e-4")
    if p.returncode == 0 and not re.search(r"\[compare\]", text):
        problems.append("no output was compared")
    return len(layers), worst, problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--s4dexec", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="s4d_real_exports_")
    os.makedirs(work, exist_ok=True)
    only = {n for n in a.only.split(",") if n}
    torch.set_num_threads(1)
    failed = 0
    for name, build, inputs in cases():
        if only and name not in only:
            continue
        for opset in (13, 17):
            try:
                n, worst, problems = run_one(a.s4dexec, work, name, build, inputs, opset)
            except Exception as e:  # an export or a run that breaks is a failure, not a crash
                n, worst, problems = 0, 0.0, [f"{type(e).__name__}: {e}"]
            status = "ok" if not problems else "FAIL"
            print(f"{name:20s} opset {opset}: {status:4s} {n:4d} layers, worst relative L2 {worst:.2e}")
            for pr in problems:
                print(f"    {pr}")
            failed += bool(problems)
    print(f"real_exports: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
