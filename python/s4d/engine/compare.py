"""Compare an engine's outputs with a reference, as Polygraphy's
`run --onnxrt --trt` or s4dexec --compareOutputs do.

    report = compare(engine, model, inputs)        # model: torch.nn.Module
    report = compare(engine, "model.onnx", inputs)  # the ONNX file on the CPU engine
    report.assert_ok()                              # in pytest: fails with the table

Per output: max |got - want|, relative L2 ||got - want|| / ||want||, cosine
similarity, and the count of elements outside atol + rtol * |want| (the
check s4dexec makes; integers and bools must be equal; NaN must meet NaN
and an infinity the same infinity).
"""
import os
from typing import Dict, List, NamedTuple, Optional

import numpy as np

from . import _arrays
from .errors import InvalidArgumentError

__all__ = ["OutputComparison", "CompareReport", "compare_outputs", "compare", "to_numpy"]


def to_numpy(x):
    """A NumPy copy-or-view of an array, tensor (any device) or number."""
    if _arrays.is_tensor(x):
        t = x.detach()
        torch = _arrays.torch_module()
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.cpu().numpy()
    return np.asarray(x)


class OutputComparison(NamedTuple):
    name: str
    passed: bool
    max_abs: float
    rel_l2: float
    cosine: float
    bad: int               # elements outside tolerance
    count: int
    first_bad: int         # flat index of the first, -1 if none
    got_at_first_bad: Optional[float]
    want_at_first_bad: Optional[float]
    rtol: float
    atol: float
    problem: str           # a shape/dtype mismatch or a missing output; "" otherwise

    def line(self):
        if self.problem:
            return f"[compare] {self.name:<24} FAIL: {self.problem}"
        return (f"[compare] {self.name:<24} max_abs={self.max_abs:.3e} rel_l2={self.rel_l2:.3e} "
                f"cosine={self.cosine:.6f} {'ok' if self.passed else 'FAIL'}")

    def failure(self):
        """One line saying why it failed ("" if it passed)."""
        if self.passed:
            return ""
        if self.problem:
            return f"output '{self.name}': {self.problem}"
        return (f"output '{self.name}': {self.bad} of {self.count} elements outside tolerance "
                f"(first at flat index {self.first_bad}: got {self.got_at_first_bad:.9g}, want "
                f"{self.want_at_first_bad:.9g})")


class CompareReport:
    """Comparisons of every output; true when all passed."""

    def __init__(self, outputs: List[OutputComparison], rtol, atol):
        self.outputs = outputs
        self.rtol = rtol
        self.atol = atol

    @property
    def passed(self):
        return all(o.passed for o in self.outputs)

    def __bool__(self):
        return self.passed

    def __getitem__(self, name):
        for o in self.outputs:
            if o.name == name:
                return o
        raise KeyError(name)

    def __iter__(self):
        return iter(self.outputs)

    def __len__(self):
        return len(self.outputs)

    @property
    def worst_rel_l2(self):
        vals = [o.rel_l2 for o in self.outputs if not o.problem]
        return max(vals) if vals else float("nan")

    def table(self):
        head = (f"[compare] rtol={_tol_str(self.rtol)} atol={_tol_str(self.atol)} "
                "(pass: |got - want| <= atol + rtol*|want| everywhere)")
        return "\n".join([head] + [o.line() for o in self.outputs])

    def __str__(self):
        return self.table()

    def __repr__(self):
        return (f"<CompareReport {'passed' if self.passed else 'FAILED'}: {len(self.outputs)} "
                f"outputs, worst rel_l2 {self.worst_rel_l2:.3e}>")

    def assert_ok(self):
        """Raises AssertionError with the table and every failure unless all passed."""
        if not self.passed:
            raise AssertionError("\n".join([self.table()] + [o.failure() for o in self.outputs
                                                           if not o.passed]))
        return self


def _tol_str(t):
    return f"{t:g}" if not isinstance(t, dict) else str(t)


def _tol(t, name, default, what):
    v = t.get(name, t.get("*", default)) if isinstance(t, dict) else t
    v = float(v)
    if not (v >= 0) or v == float("inf"):
        raise InvalidArgumentError(f"{what} for '{name}' must be finite and >= 0, got {v}")
    return v


def _compare_one(name, got, want, rtol, atol):
    g, w = to_numpy(got), to_numpy(want)

    def problem(msg):
        return OutputComparison(name, False, float("nan"), float("nan"), float("nan"), 0,
                                int(g.size), -1, None, None, rtol, atol, msg)

    if g.shape != w.shape:
        return problem(f"shape {list(g.shape)}, the reference has {list(w.shape)}")
    if g.dtype != w.dtype and not (g.dtype.kind in "fc" and w.dtype.kind in "fc"):
        return problem(f"dtype {g.dtype}, the reference has {w.dtype}")
    exact = g.dtype.kind not in "fc"
    g64 = g.astype(np.float64).reshape(-1)
    w64 = w.astype(np.float64).reshape(-1)
    gn, wn = np.isnan(g64), np.isnan(w64)
    gi, wi = np.isinf(g64), np.isinf(w64)
    finite = ~(gn | wn | gi | wi)
    ok = np.empty(g64.shape, dtype=bool)
    ok[gn | wn] = (gn & wn)[gn | wn]
    inf = (gi | wi) & ~(gn | wn)
    ok[inf] = g64[inf] == w64[inf]
    gf, wf = g64[finite], w64[finite]
    d = np.abs(gf - wf)
    ok[finite] = (gf == wf) if exact else d <= atol + rtol * np.abs(wf)
    bad_idx = np.flatnonzero(~ok)
    ww, gg, dd = float(wf @ wf), float(gf @ gf), float(d @ d)
    rel = np.sqrt(dd / ww) if ww > 0 else (float("inf") if dd > 0 else 0.0)
    cos = float(gf @ wf) / np.sqrt(gg * ww) if gg > 0 and ww > 0 else \
        (1.0 if gg == 0 and ww == 0 else 0.0)
    first = int(bad_idx[0]) if len(bad_idx) else -1
    return OutputComparison(name, len(bad_idx) == 0, float(d.max()) if len(d) else 0.0,
                            float(rel), float(cos), int(len(bad_idx)), int(g64.size), first,
                            float(g64[first]) if first >= 0 else None,
                            float(w64[first]) if first >= 0 else None, rtol, atol, "")


def compare_outputs(got: Dict[str, object], want: Dict[str, object], rtol=1e-3, atol=1e-5,
                    names=None) -> CompareReport:
    """Compares got[name] with want[name] for every name of want (or of
    names). rtol/atol: numbers, or {output name: number} with "*" for the
    rest. An output missing from got fails."""
    names = list(want) if names is None else list(names)
    rows = []
    for name in names:
        rt = _tol(rtol, name, 1e-3, "rtol")
        at = _tol(atol, name, 1e-5, "atol")
        if name not in want:
            raise InvalidArgumentError(f"the reference has no output '{name}'")
        if name not in got:
            rows.append(OutputComparison(name, False, float("nan"), float("nan"), float("nan"),
                                         0, 0, -1, None, None, rt, at,
                                         "missing from the engine's outputs"))
            continue
        rows.append(_compare_one(name, got[name], want[name], rt, at))
    return CompareReport(rows, rtol, atol)


def _reference_outputs(reference, inputs, names, input_names):
    """Runs the reference on inputs; returns {output name: array}."""
    from .engine import Engine, build, default_plugins
    if isinstance(reference, dict):
        return reference
    host = {k: _host(v) for k, v in inputs.items()}
    if isinstance(reference, Engine):
        with reference.create_context() as ctx:
            return ctx.run(host)
    if isinstance(reference, (str, os.PathLike, bytes)) or hasattr(reference,
                                                                    "SerializeToString"):
        with build(reference, device="cpu", plugins=default_plugins()) as ref, \
                ref.create_context() as ctx:
            return ctx.run(host)
    if callable(reference):
        out = _call(reference, inputs, input_names)
        if isinstance(out, dict):
            return out
        if not isinstance(out, (tuple, list)):
            out = (out,)
        if len(out) != len(names):
            raise InvalidArgumentError(f"the reference returned {len(out)} outputs; the engine "
                                       f"has {len(names)} ({', '.join(names)})")
        return dict(zip(names, out))
    raise InvalidArgumentError(f"reference must be a torch.nn.Module or callable, an ONNX "
                               f"path/bytes, an Engine or a dict of arrays, not "
                               f"{type(reference).__name__}")


def _host(x):
    return x.detach().cpu() if _arrays.is_tensor(x) else x


def _call(fn, inputs, input_names):
    torch = _arrays.torch_module()
    args = []
    for n in input_names:
        v = inputs[n]
        if torch is not None and not _arrays.is_tensor(v):
            v = torch.from_numpy(np.ascontiguousarray(v))
        args.append(v)
    if torch is not None:
        with torch.no_grad():
            return fn(*args)
    return fn(*args)


def compare(engine, reference, inputs=None, rtol=1e-3, atol=1e-5, seed=1, context=None,
            outputs=None) -> CompareReport:
    """Runs engine on inputs and reference on the same inputs; compares
    every output (or those named in outputs).

    engine: an Engine, or an ONNX path/bytes (built on the CPU with the
    default plugins). reference: a torch.nn.Module or callable (called
    with the inputs as positional tensors in the engine's input order; it
    returns a tensor, a tuple in the engine's output order or a dict), an
    ONNX model (run through s4d on the CPU), an Engine, or a dict of arrays.
    inputs: {name: array}; inputs not given are generated as s4dexec
    generates them (random_inputs with seed). context: run in this context
    instead of a new one.
    """
    from ._random import random_inputs
    from .engine import Engine, build, default_plugins
    own = None
    if not isinstance(engine, Engine):
        own = engine = build(engine, device="cpu", plugins=default_plugins())
    try:
        inputs = dict(inputs or {})
        inputs.update(random_inputs(engine, seed=seed, given=inputs))
        names = [s.name for s in engine.outputs]
        input_names = [s.name for s in engine.inputs]
        if context is None:
            with engine.create_context() as ctx:
                got = ctx.run(inputs)
        else:
            got = context.run(inputs)
        want = _reference_outputs(reference, inputs, names, input_names)
        return compare_outputs(got, want, rtol, atol, names=outputs or
                               [n for n in names if n in want])
    finally:
        if own is not None:
            own.close()
