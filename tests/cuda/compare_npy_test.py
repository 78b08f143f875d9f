"""device_compare.compare_npy, the float16 cases' comparison: tolerances, NaN and infinities."""
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_compare import compare_npy  # noqa: E402


def check(a, b, rtol=1e-3, atol=1e-3, rel_l2=None):
    with tempfile.TemporaryDirectory() as t:
        da, db = os.path.join(t, "a"), os.path.join(t, "b")
        os.makedirs(da)
        os.makedirs(db)
        np.save(os.path.join(da, "o.npy"), np.asarray(a, np.float32))
        np.save(os.path.join(db, "o.npy"), np.asarray(b, np.float16))
        return compare_npy(da, db, rtol, atol, rel_l2)


def main():
    rng = np.random.default_rng(3)
    a = rng.uniform(-2, 2, 64).astype(np.float32)
    h = a.astype(np.float16).astype(np.float32)
    cases = []
    cases.append(("float16 rounding within tolerance", check(a, h), True))
    off = h.copy()
    off[5] += 0.1
    cases.append(("one element off", check(a, off), False))
    cases.append(("relative L2 bound", check(a, h, rel_l2=1e-6), False))
    for val in (np.nan, np.inf, -np.inf):
        x, y = a.copy(), h.copy()
        x[7] = y[7] = val
        cases.append((f"{val} at the same place", check(x, y), True))
        y2 = h.copy()
        y2[8] = val
        cases.append((f"{val} on one side only", check(x, y2), False))
    x, y = a.copy(), h.copy()
    x[3], y[3] = np.inf, -np.inf
    cases.append(("infinities of other signs", check(x, y), False))
    bad = 0
    for what, (ok, lines), want in cases:
        right = ok == want
        bad += not right
        print(f"{'ok  ' if right else 'FAIL'} {what}: {'agrees' if ok else 'differs'} {lines}")
    print(f"{len(cases) - bad} of {len(cases)} comparisons as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
