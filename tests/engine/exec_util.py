"""What the engine's script tests share: running s4dexec, reading the layer list that
--dumpLayerInfo prints, saving inputs for --loadInputs, comparing outputs."""
import os
import subprocess

import numpy as np


def run(exe, args, env=None, check=True):
    """s4dexec with args; a failure raises with its stderr unless check is False."""
    p = subprocess.run([exe] + args, capture_output=True, text=True, errors="replace", timeout=300,
                       env=env)
    if check and p.returncode != 0:
        raise RuntimeError(f"s4dexec {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def layer_types(dump, mark_views=False):
    """Op types of the layer list; with mark_views a view's type gets "(view)" and a copy
    between devices (placement's "copy X -> dev" line) is "Copy"."""
    types = []
    for line in dump.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].isdigit():
            continue
        if mark_views and parts[1] == "copy":
            types.append("Copy")
        elif mark_views and parts[-1] == "view":
            types.append(parts[2] + "(view)")
        else:
            types.append(parts[2])
    return types


def load_inputs_flag(d, inputs):
    """Saves each input as d/in_<name>.npy; the --loadInputs flag that reads them."""
    specs = []
    for k, a in inputs.items():
        f = os.path.join(d, f"in_{k}.npy")
        np.save(f, a)
        specs.append(f"{k}:{f}")
    return "--loadInputs=" + ",".join(specs)


def close(got, want, rtol, atol):
    """(ok, message): bools equal, NaN at the same places, the rest within atol + rtol*|want|."""
    if want.dtype == np.bool_ or got.dtype == np.bool_:
        bad = int(np.sum(got.astype(np.bool_) != want.astype(np.bool_)))
        return bad == 0, f"{bad} of {want.size} bools differ"
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    if np.any(nan_g != nan_w):
        return False, f"NaN at different places ({int(nan_g.sum())} vs {int(nan_w.sum())})"
    g, w = np.where(nan_g, 0, got).astype(np.float64), np.where(nan_w, 0, want)
    err = np.abs(g - w)
    bad = err > atol + rtol * np.abs(w)
    return not bad.any(), f"max abs err {err.max() if err.size else 0:.3g}, {int(bad.sum())} of {err.size} beyond tolerance"
