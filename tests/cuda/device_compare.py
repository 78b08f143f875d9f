"""Runs op models on two devices through s4dexec and compares the outputs.

    device_compare.py FAMILY S4DEXEC PLUGINS WORKDIR [--a cpu] [--b cuda] [-k NAME] [-j N]

FAMILY names tests/cuda/models_FAMILY.py, whose cases() returns Case
objects: an ONNX model, its inputs (NumPy arrays drawn from a fixed seed,
never all zeros, valid for the op: indices in range, and so on) and the
tolerances. Each case is built and run on device A (default cpu) with
--exportOutput, then on device B (default cuda) with --compareOutputs. Exit 0
when every case agrees, 1 when one does not, 77 when device B is CUDA and
this machine has no usable GPU (so CTest reports a skip, not a pass).
Cases run -j at a time (default S4D_COMPARE_JOBS, else a quarter of the
cores); their lines are printed in case order.

With S4D_TEST_BACKEND=guarded in the environment, "cuda" is the guarded test
device (CPU kernels behind protected memory): that checks the models, the
harness and the runtime's device path on a machine without a GPU.

float16 cases (cases.half_case) carry a float32 twin: device A runs the twin
on the same values widened to float32, device B the float16 model, and the
outputs are compared here in NumPy (|b - a| <= atol + rtol |a|, max errors
printed; NaN and infinities must sit at the same places, infinities with the
same signs). On the guarded device a float16 case whose op the host reference
does not run in float16 is skipped with the refusal printed.
"""
import argparse
import importlib
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cases import Case  # noqa: E402,F401  (models_* import it from here too)

NO_GPU = 77


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def is_float16_refusal(text):
    """The host references refuse float16 in run with 'float16: ... runs float32 ...'."""
    return "float16" in text and ("runs float32" in text or "float32 only" in text)


def compare_npy(dir_a, dir_b, rtol, atol, rel_l2=None):
    """Compares every DIR_A/<name>.npy with DIR_B/<name>.npy in float64; returns (ok, lines).
    rel_l2: also a bound on the relative L2 error over the whole output."""
    ok, lines = True, []
    names = sorted(f for f in os.listdir(dir_a) if f.endswith(".npy"))
    if not names:
        return False, ["no outputs exported"]
    for f in names:
        pb = os.path.join(dir_b, f)
        if not os.path.exists(pb):
            ok = False
            lines.append(f"{f[:-4]}: missing on device B")
            continue
        a = np.load(os.path.join(dir_a, f)).astype(np.float64)
        b = np.load(pb).astype(np.float64)
        if a.shape != b.shape:
            ok = False
            lines.append(f"{f[:-4]}: shape {b.shape} vs {a.shape}")
            continue
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if np.any(nan_a != nan_b):
            ok = False
            lines.append(f"{f[:-4]}: NaN at different places ({int(nan_b.sum())} vs {int(nan_a.sum())})")
            continue
        inf_a, inf_b = np.isinf(a), np.isinf(b)
        if np.any(inf_a != inf_b) or np.any(a[inf_a] != b[inf_a]):
            ok = False
            lines.append(f"{f[:-4]}: infinities at different places or of other signs "
                         f"({int(inf_b.sum())} vs {int(inf_a.sum())})")
            continue
        a, b = np.where(nan_a | inf_a, 0.0, a), np.where(nan_b | inf_b, 0.0, b)
        err = np.abs(b - a)
        bad = err > atol + rtol * np.abs(a)
        rel = float(np.max(err / np.maximum(np.abs(a), 1e-30))) if a.size else 0.0
        worst = int(np.argmax(err - rtol * np.abs(a))) if a.size else 0
        first = int(np.flatnonzero(bad)[0]) if bad.any() else 0
        norm = float(np.linalg.norm(a))
        l2 = float(np.linalg.norm(err)) / norm if norm > 0 else float(np.linalg.norm(err))
        l2_bad = rel_l2 is not None and not l2 <= rel_l2
        lines.append(f"{f[:-4]}: max abs err {float(err.max()) if a.size else 0.0:.3g}, max rel err "
                     f"{rel:.3g}, rel L2 {l2:.3g}"
                     + (f" (bound {rel_l2:g})" if rel_l2 is not None else "")
                     + f", {int(bad.sum())} of {a.size} beyond atol {atol:g} + rtol {rtol:g}"
                     + (f" (first at flat {first} = index {tuple(int(i) for i in np.unravel_index(first, a.shape))}: "
                        f"{b.flat[first]!r} vs {a.flat[first]!r}; worst at flat {worst}: "
                        f"{b.flat[worst]!r} vs {a.flat[worst]!r})" if bad.any() else ""))
        ok = ok and not bad.any() and not l2_bad
    return ok, lines


def drop_case(d):
    """Removes an agreeing case's folder: the families write gigabytes otherwise."""
    if os.environ.get("S4D_KEEP_CASES") != "1":
        shutil.rmtree(d, ignore_errors=True)


def compare_jobs():
    """Cases run in parallel: S4D_COMPARE_JOBS, else a quarter of the cores (one on
    a 2-core machine, where CTest already runs families side by side)."""
    env = os.environ.get("S4D_COMPARE_JOBS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return max(1, (os.cpu_count() or 1) // 4)


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
    ap.add_argument("-j", type=int, default=0,
                    help="cases run at once (default: S4D_COMPARE_JOBS, else cores / 4)")
    args = ap.parse_args(argv)
    mod = importlib.import_module("models_" + args.family)
    os.makedirs(args.workdir, exist_ok=True)
    cases = [c for c in mod.cases() if not args.k or args.k in c.name]
    jobs = args.j if args.j > 0 else compare_jobs()
    if jobs > 1 and cases:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda c: run_case(args, c), cases))
    else:
        results = []
        for c in cases:
            results.append(run_case(args, c))
            if results[-1][0] == "nogpu":
                break
    failed, ran, skipped = [], 0, 0
    for kind, said, failure in results:
        for ln in said:
            print(ln)
        if kind == "nogpu":
            return NO_GPU
        if kind == "skip":
            skipped += 1
            continue
        if kind != "prep":
            ran += 1
        if failure:
            failed.append(failure)
    for f in failed:
        print("FAIL " + f)
    print(f"{args.family}: {ran - len([f for f in failed if ' vs ' in f])} of {ran} cases agree "
          f"({args.b} vs {args.a}); {len(failed)} failed")
    if not failed and ran == 0 and skipped:
        print(f"{args.family}: all {skipped} cases skipped (float16 refused by the guarded device)")
        return NO_GPU
    return 1 if failed or ran == 0 else 0


def no_gpu(args, said):
    return args.b == "cuda" and ("no usable CUDA device" in said or "no CUDA device" in said
                                 or "has no backend for it" in said)


def save_case(d, prefix, model, inputs):
    """Writes D/<prefix>model.onnx and D/<prefix>in_<name>.npy; returns the model's path
    and the --loadInputs entries."""
    model_path = os.path.join(d, prefix + "model.onnx")
    onnx.save(model, model_path)
    specs = []
    for name, arr in inputs.items():
        p = os.path.join(d, f"{prefix}in_{name}.npy")
        np.save(p, np.ascontiguousarray(arr).reshape(np.shape(arr)))
        specs.append(f"{name}:{p}")
    return model_path, specs


def run_case(args, case):
    """One case on both devices. Returns (kind, lines to print, failure line or ""):
    kind "ran", "skip" (float16 refused by the guarded device), "nogpu" or "prep"
    (device A failed: counted as a failure, not as a case run)."""
    said_lines = []
    d = os.path.join(args.workdir, case.name)
    os.makedirs(d, exist_ok=True)
    model_path, specs = save_case(d, "", case.model, case.inputs)
    common = [args.s4dexec, f"--onnx={model_path}", f"--plugins={args.plugins}",
              "--iterations=1", "--warmUp=0"]
    if specs:
        common.append("--loadInputs=" + ",".join(specs))
    ref = os.path.join(d, "ref_" + args.a)
    if case.ref_model is not None:
        res = run_half(args, case, d, common, ref, said_lines)
        if res == NO_GPU:
            return "nogpu", said_lines, ""
        if res is None:
            return "skip", said_lines, ""
        if not res:
            drop_case(d)
        return "ran", said_lines, res
    a = run(common + [f"--device={args.a}", f"--exportOutput={ref}"])
    if a.returncode != 0:
        return "prep", said_lines, f"{case.name}: device {args.a} failed: {a.stderr.strip()}"
    extra = ["--allowFallback"] if args.fallback else []
    b = run(common + extra + list(case.b_flags) + [f"--device={args.b}", f"--compareOutputs={ref}",
                              f"--rtol={case.rtol}", f"--atol={case.atol}"])
    said = b.stderr + b.stdout
    if b.returncode != 0 and no_gpu(args, said):
        said_lines.append(f"{case.name}: no CUDA device or backend here; skipping the family")
        return "nogpu", said_lines, ""
    if b.returncode != 0:
        # the [compare] lines (max abs, rel L2 per output) and the first bad element
        stats = [ln.strip() for ln in b.stdout.splitlines() if ln.startswith("[compare] ")]
        return "ran", said_lines, (f"{case.name}: {args.b} vs {args.a}: "
                                   f"{(b.stderr.strip() or b.stdout.strip()).splitlines()[-1:]} {stats[1:]}")
    said_lines.append(f"ok   {case.name}")
    drop_case(d)
    return "ran", said_lines, ""


def run_half(args, case, d, common, ref, said_lines):
    """A float16 case: its float32 twin on device A, the case on device B, compared here.
    Returns None (skipped), NO_GPU, "" (agrees) or the failure line; what it has to
    say goes to said_lines."""
    twin, specs = save_case(d, "ref_", case.ref_model, case.ref_inputs)
    ref_cmd = [common[0], f"--onnx={twin}"] + [c for c in common[2:] if not c.startswith("--loadInputs")]
    if specs:
        ref_cmd.append("--loadInputs=" + ",".join(specs))
    out_b = os.path.join(d, "out_" + args.b)
    extra = ["--allowFallback"] if args.fallback else []
    b = run(common + extra + list(case.b_flags) + [f"--device={args.b}", f"--exportOutput={out_b}"])
    said = b.stderr + b.stdout
    if b.returncode != 0:
        if no_gpu(args, said):
            said_lines.append(f"{case.name}: no CUDA device or backend here; skipping the family")
            return NO_GPU
        if os.environ.get("S4D_TEST_BACKEND") == "guarded" and is_float16_refusal(said):
            why = [ln for ln in said.splitlines() if "float16" in ln][-1:]
            said_lines.append(f"skip {case.name}: the guarded device runs the CPU kernels, which "
                              f"refuse float16: {why}")
            return None
        return f"{case.name}: {args.b} failed: {(said.strip()).splitlines()[-1:]}"
    # Device B first: where it refuses float16 (the guarded device), the reference is not needed.
    a = run(ref_cmd + [f"--device={args.a}", f"--exportOutput={ref}"])
    if a.returncode != 0:
        return f"{case.name}: device {args.a} failed on the float32 twin: {a.stderr.strip()}"
    ok, lines = compare_npy(ref, out_b, case.rtol, case.atol, case.rel_l2)
    for ln in lines:
        said_lines.append(f"     {case.name}: {ln}")
    if not ok:
        return f"{case.name}: {args.b} (float16) vs {args.a} (float32 twin): " + "; ".join(lines)
    said_lines.append(f"ok   {case.name}")
    return ""


if __name__ == "__main__":
    sys.exit(main())
