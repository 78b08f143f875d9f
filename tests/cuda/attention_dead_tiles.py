"""Skipping dead key tiles gives the same bits as computing them, on every attention kernel.

    attention_dead_tiles.py S4DEXEC PLUGINS WORKDIR

Runs the attention family's dead-tile cases (models_attention.dead_tile_family: float32, and
their float16 and TF32 forms) on CUDA twice, with S4D_ATTN_DEAD_TILES=0 (every key tile
computed) and with the default (tiles that a key mask leaves unattended skipped), and requires
equal outputs bit for bit, NaN where NaN. Exit 77 without a usable GPU (a CTest skip).
"""
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import device_compare  # noqa: E402
import models_attention  # noqa: E402


def outputs(d):
    return {f[:-4]: np.load(os.path.join(d, f)) for f in sorted(os.listdir(d)) if f.endswith(".npy")}


def main(argv):
    if len(argv) != 4:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    s4dexec, plugins, work = argv[1:]
    cases = models_attention.dead_tile_family()
    failed = 0
    for c in cases:
        d = os.path.join(work, c.name)
        os.makedirs(d, exist_ok=True)
        model, specs = device_compare.save_case(d, "", c.model, c.inputs)
        got = {}
        for skip in ("0", "1"):
            out = os.path.join(d, "out_skip" + skip)
            r = subprocess.run([s4dexec, f"--onnx={model}", f"--plugins={plugins}", "--device=cuda",
                                "--iterations=1", "--warmUp=0", "--loadInputs=" + ",".join(specs),
                                f"--exportOutput={out}"] + list(c.b_flags),
                               capture_output=True, text=True, env=dict(os.environ, S4D_ATTN_DEAD_TILES=skip))
            said = r.stderr + r.stdout
            if r.returncode != 0 and device_compare.no_gpu(SimpleNamespace(b="cuda"), said):
                print(f"{c.name}: no CUDA device or backend here; skipping")
                return device_compare.NO_GPU
            if r.returncode != 0:
                print(f"FAIL {c.name}: S4D_ATTN_DEAD_TILES={skip}: {said.strip().splitlines()[-1:]}")
                failed += 1
                break
            got[skip] = outputs(out)
        if len(got) < 2:
            continue
        same = got["0"].keys() == got["1"].keys() and all(
            a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
            for a, b in zip(got["0"].values(), got["1"].values()))
        nan = sum(int(np.isnan(a.astype(np.float64)).sum()) for a in got["1"].values())
        if not same:
            failed += 1
            diff = [k for k in got["0"] if got["0"][k].tobytes() != got["1"].get(k, np.zeros(0)).tobytes()]
            print(f"FAIL {c.name}: outputs {diff} differ between skipping and computing dead tiles")
        else:
            print(f"ok   {c.name}: the same bits ({nan} NaN)")
            device_compare.drop_case(d)
    print(f"dead tiles: {len(cases) - failed} of {len(cases)} cases give the same bits skipped and computed")
    return 1 if failed or not cases else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
