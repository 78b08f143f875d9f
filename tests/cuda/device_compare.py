"""Runs op models on two devices through s4dexec and compares the outputs.

    device_compare.py FAMILY S4DEXEC PLUGINS WORKDIR [--a cpu] [--b cuda] [-k NAME]

FAMILY names tests/cuda/models_FAMILY.py, whose cases() returns Case
objects: an ONNX model, its inputs (NumPy arrays drawn from a fixed seed,
never all zeros, valid for the op: indices in range, and so on) and the
tolerances. Each case is built and run on device A (default cpu) with
--exportOutput, then on device B (default cuda) with --compareOutputs. Exit 0
when every case agrees, 1 when one does not, 77 when device B is CUDA and
this machine has no usable GPU (so CTest reports a skip, not a pass).

With S4D_TEST_BACKEND=guarded in the environment, "cuda" is the guarded test
device (CPU kernels behind protected memory): that checks the models, the
harness and the runtime's device path on a machine without a GPU.
"""
import argparse
import importlib
import os
import subprocess
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import Case  # noqa: E402,F401  (models_* import it from here too)

NO_GPU = 77


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("family")
    ap.add_argument("s4dexec")
    ap.add_argument("plugins")
    ap.add_argument("workdir")
    ap.add_argument("--a", default="cpu")
    ap.add_argument("--b", default="cuda")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    ap.add_argument("--fallback", action="store_true",
                    help="allow nodes device B cannot run to fall back to the CPU")
    args = ap.parse_args(argv)
    mod = importlib.import_module("models_" + args.family)
    os.makedirs(args.workdir, exist_ok=True)
    failed, ran = [], 0
    for case in mod.cases():
        if args.k and args.k not in case.name:
            continue
        d = os.path.join(args.workdir, case.name)
        os.makedirs(d, exist_ok=True)
        model_path = os.path.join(d, "model.onnx")
        onnx.save(case.model, model_path)
        specs = []
        for name, arr in case.inputs.items():
            p = os.path.join(d, f"in_{name}.npy")
            np.save(p, np.ascontiguousarray(arr).reshape(np.shape(arr)))
            specs.append(f"{name}:{p}")
        common = [args.s4dexec, f"--onnx={model_path}", f"--plugins={args.plugins}",
                  "--iterations=1", "--warmUp=0"]
        if specs:
            common.append("--loadInputs=" + ",".join(specs))
        ref = os.path.join(d, "ref_" + args.a)
        a = run(common + [f"--device={args.a}", f"--exportOutput={ref}"])
        if a.returncode != 0:
            failed.append(f"{case.name}: device {args.a} failed: {a.stderr.strip()}")
            continue
        extra = ["--allowFallback"] if args.fallback else []
        b = run(common + extra + [f"--device={args.b}", f"--compareOutputs={ref}",
                                  f"--rtol={case.rtol}", f"--atol={case.atol}"])
        said = b.stderr + b.stdout
        if b.returncode != 0 and args.b == "cuda" and (
                "no usable CUDA device" in said or "no CUDA device" in said
                or "has no backend for it" in said):
            print(f"{case.name}: no CUDA device or backend here; skipping the family")
            return NO_GPU
        ran += 1
        if b.returncode != 0:
            failed.append(f"{case.name}: {args.b} vs {args.a}: "
                          f"{(b.stderr.strip() or b.stdout.strip()).splitlines()[-1:]}")
        else:
            print(f"ok   {case.name}")
    for f in failed:
        print("FAIL " + f)
    print(f"{args.family}: {ran - len([f for f in failed if ' vs ' in f])} of {ran} cases agree "
          f"({args.b} vs {args.a}); {len(failed)} failed")
    return 1 if failed or ran == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
