"""The reduction family's CUDA kernels on their own: correctness against PyTorch
references, bitwise determinism, CUDA-graph replay, and speed against the
PyTorch ops on Sparse4Dv3 shapes. Needs only the launchers built into a shared
library (no engine, no protobuf-c) and PyTorch with CUDA:

    tests/cuda/reduce_gpu_check.sh OUT_DIR      (builds the library, runs this)
    python3 tests/cuda/reduce_kernels_gpu.py LIB OUT_DIR [--quick]

Writes OUT_DIR/reduce_kernels.md and .json; exit 0 when every check passes.

References: float64 PyTorch on the same device, with the host reference's
semantics where PyTorch's differ (ArgMax/ArgMin skip NaN except at index 0;
TopK ties by lower index and -0 == +0). Tolerances as in models_reduce.py:
float32 sums rtol 1e-5 and atol 1e-5 * sqrt(n); max, min, arg, TopK exact;
float16 1e-3.
"""
import argparse
import ctypes as C
import json
import math
import sys
import time

import torch

I64 = C.c_int64
KINDS = ["sum", "mean", "max", "min", "prod", "sumsq", "l1", "l2", "logsum", "lse"]
DT = {torch.float32: 1, torch.int32: 6, torch.int64: 7, torch.float16: 10, torch.float64: 11, torch.bfloat16: 16}


class Geom(C.Structure):
    _fields_ = [("nk", C.c_int), ("nr", C.c_int), ("kdims", I64 * 8), ("kst", I64 * 8), ("rdims", I64 * 8),
                ("rst", I64 * 8), ("nout", I64), ("nred", I64)]


class LnArgs(C.Structure):
    _fields_ = [("rows", I64), ("cols", I64), ("nrank", C.c_int), ("ndims", I64 * 8), ("s_str", I64 * 8),
                ("b_str", I64 * 8), ("scale_dense", C.c_int), ("bias_dense", C.c_int), ("epsilon", C.c_float)]


class Kernels:
    def __init__(self, path, device):
        lib = C.CDLL(path)
        vp = C.c_void_p
        sig = {
            "s4d_cuda_reduce_workspace": (C.c_size_t, [C.c_int, C.c_int, C.POINTER(Geom)]),
            "s4d_cuda_reduce": (C.c_int, [C.c_int, C.c_int, C.POINTER(Geom), vp, vp, vp, C.c_size_t, vp]),
            "s4d_cuda_arg": (C.c_int, [C.c_int, C.c_int, C.c_int, C.POINTER(Geom), vp, vp, vp]),
            "s4d_cuda_softmax": (C.c_int, [C.c_int, C.c_int, I64, I64, I64, vp, vp, vp]),
            "s4d_cuda_layernorm_workspace": (C.c_size_t, [C.POINTER(LnArgs)]),
            "s4d_cuda_layernorm": (C.c_int, [C.POINTER(LnArgs)] + [vp] * 6 + [vp, C.c_size_t, vp]),
            "s4d_cuda_batchnorm": (C.c_int, [I64, I64, I64, C.c_float] + [vp] * 6 + [vp]),
            "s4d_cuda_topk_workspace": (C.c_size_t, [I64, I64, I64]),
            "s4d_cuda_topk": (C.c_int, [C.c_int, C.c_int, I64, I64, I64, I64, vp, vp, vp, vp, C.c_size_t, vp]),
        }
        for name, (res, args) in sig.items():
            f = getattr(lib, name)
            f.restype, f.argtypes = res, args
        self.lib = lib
        self.device = device

    def stream(self):
        return C.c_void_p(torch.cuda.current_stream().cuda_stream) if self.device == "cuda" else None

    def check(self, e, what):
        if e != 0:
            raise RuntimeError(f"{what}: launcher returned CUDA error {e}")


def ptr(t):
    return C.c_void_p(t.data_ptr()) if t is not None else None


def make_geom(shape, axes):
    """The geometry src/ops/reduce.c makes: size-1 dims dropped, adjacent dims of a kind merged."""
    mask = [d in axes for d in range(len(shape))]
    st, s = [1] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        st[d] = s
        s *= shape[d]
    kd, ks, rd, rs, nout, nred = [], [], [], [], 1, 1
    for d in range(len(shape)):
        if shape[d] == 1:
            continue
        dims, sts = (rd, rs) if mask[d] else (kd, ks)
        if dims and sts[-1] == st[d] * shape[d]:
            dims[-1] *= shape[d]
            sts[-1] = st[d]
        else:
            dims.append(shape[d])
            sts.append(st[d])
        if mask[d]:
            nred *= shape[d]
        else:
            nout *= shape[d]
    g = Geom()
    g.nk, g.nr = len(kd), len(rd)
    for i, v in enumerate(kd):
        g.kdims[i], g.kst[i] = v, ks[i]
    for i, v in enumerate(rd):
        g.rdims[i], g.rst[i] = v, rs[i]
    g.nout, g.nred = nout, nred
    return g


class Report:
    def __init__(self):
        self.rows, self.bench, self.failures = [], [], 0

    def check(self, name, got, want, rtol=0.0, atol=0.0):
        got = got.detach().double().cpu()
        want = want.detach().double().cpu()
        if got.shape != want.shape:
            self.failures += 1
            print(f"FAIL {name}: shape {tuple(got.shape)} vs {tuple(want.shape)}", flush=True)
            return False
        gn, wn = torch.isnan(got), torch.isnan(want)
        fin = ~gn & ~wn
        diff = (got - want).abs()
        ok_val = (got == want) | (diff <= atol + rtol * want.abs())
        bad = (gn != wn) | (fin & ~ok_val)
        if bad.any():
            i = tuple(int(v) for v in bad.nonzero()[0])
            print(f"FAIL {name}: {int(bad.sum())} of {bad.numel()} outside rtol={rtol} atol={atol}; "
                  f"first at {i}: got {got[i].item()!r}, want {want[i].item()!r}", flush=True)
            self.failures += 1
            return False
        md = float(diff[fin].max()) if fin.any() else 0.0
        print(f"ok   {name} (max abs diff {md:.3g})", flush=True)
        return True

    def same(self, name, a, b):
        if not torch.equal(a.view(torch.uint8) if a.dtype != torch.bool else a,
                           b.view(torch.uint8) if b.dtype != torch.bool else b):
            print(f"FAIL {name}: not bitwise identical", flush=True)
            self.failures += 1
            return False
        print(f"ok   {name}", flush=True)
        return True


# ---- launch helpers (all return fresh outputs) ----

def run_reduce(K, kind, x, axes):
    axes = sorted(a % x.dim() for a in axes)
    g = make_geom(list(x.shape), axes)
    k = KINDS.index(kind)
    ws_n = K.lib.s4d_cuda_reduce_workspace(k, DT[x.dtype], C.byref(g))
    ws = torch.empty(max(ws_n, 1), dtype=torch.uint8, device=x.device)
    y = torch.empty([s for d, s in enumerate(x.shape) if d not in axes], dtype=x.dtype, device=x.device)
    K.check(K.lib.s4d_cuda_reduce(k, DT[x.dtype], C.byref(g), ptr(x), ptr(y), ptr(ws), ws_n, K.stream()),
            f"reduce {kind}")
    return y


def run_arg(K, x, axis, arg_min, last):
    axis %= x.dim()
    g = make_geom(list(x.shape), [axis])
    y = torch.empty([s for d, s in enumerate(x.shape) if d != axis], dtype=torch.int64, device=x.device)
    K.check(K.lib.s4d_cuda_arg(arg_min, last, DT[x.dtype], C.byref(g), ptr(x), ptr(y), K.stream()), "arg")
    return y


def run_softmax(K, x, axis, log, y=None):
    axis %= x.dim()
    outer, n, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    y = torch.empty_like(x) if y is None else y
    K.check(K.lib.s4d_cuda_softmax(log, DT[x.dtype], outer, n, inner, ptr(x), ptr(y), K.stream()), "softmax")
    return y


def bstrides(pshape, ndims):
    r, out, st = len(ndims), [0] * len(ndims), 1
    for i in range(len(pshape) - 1, -1, -1):
        d = r - len(pshape) + i
        out[d] = 0 if (pshape[i] == 1 and ndims[d] != 1) else st
        st *= pshape[i]
    return out


def run_layernorm(K, x, axis, scale, bias, eps, stats=True, y=None):
    axis %= x.dim()
    nd = list(x.shape[axis:])
    rows, cols = math.prod(x.shape[:axis]), math.prod(nd)
    a = LnArgs()
    a.rows, a.cols, a.nrank = rows, cols, len(nd)
    for i, v in enumerate(nd):
        a.ndims[i] = v
    for i, v in enumerate(bstrides(list(scale.shape), nd)):
        a.s_str[i] = v
    if bias is not None:
        for i, v in enumerate(bstrides(list(bias.shape), nd)):
            a.b_str[i] = v
    a.scale_dense = int(scale.numel() == cols)
    a.bias_dense = 1 if bias is None else int(bias.numel() == cols)
    a.epsilon = eps
    ws_n = K.lib.s4d_cuda_layernorm_workspace(C.byref(a))
    ws = torch.empty(max(ws_n, 1), dtype=torch.uint8, device=x.device)
    y = torch.empty_like(x) if y is None else y
    m = torch.empty(rows, device=x.device) if stats else None
    s = torch.empty(rows, device=x.device) if stats else None
    K.check(K.lib.s4d_cuda_layernorm(C.byref(a), ptr(x), ptr(scale), ptr(bias), ptr(y), ptr(m), ptr(s), ptr(ws),
                                     ws_n, K.stream()), "layernorm")
    return y, m, s


def run_batchnorm(K, x, scale, bias, mean, var, eps):
    y = torch.empty_like(x)
    plane = math.prod(x.shape[2:])
    K.check(K.lib.s4d_cuda_batchnorm(x.shape[0], x.shape[1], plane, eps, ptr(x), ptr(scale), ptr(bias), ptr(mean),
                                     ptr(var), ptr(y), K.stream()), "batchnorm")
    return y


def run_topk(K, x, axis, k, largest):
    axis %= x.dim()
    outer, n, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
    oshape = list(x.shape)
    oshape[axis] = k
    v = torch.empty(oshape, dtype=x.dtype, device=x.device)
    i = torch.empty(oshape, dtype=torch.int64, device=x.device)
    ws_n = K.lib.s4d_cuda_topk_workspace(outer, n, inner)
    ws = torch.empty(max(ws_n, 1), dtype=torch.uint8, device=x.device)
    K.check(K.lib.s4d_cuda_topk(DT[x.dtype], largest, outer, n, inner, k, ptr(x), ptr(v), ptr(i), ptr(ws), ws_n,
                                K.stream()), "topk")
    return v, i


# ---- references ----

def ref_reduce(kind, x, axes):
    axes = tuple(sorted(a % x.dim() for a in axes))
    n = math.prod(x.shape[a] for a in axes)
    if x.dtype in (torch.int32, torch.int64):
        xi = x.long()
        s = xi.sum(dim=axes)
        if kind in ("sum", "logsum", "lse"):
            r = s
        elif kind == "mean":
            r = torch.div(s, n, rounding_mode="trunc")
        elif kind == "max":
            r = xi.amax(dim=axes)
        elif kind == "min":
            r = xi.amin(dim=axes)
        elif kind == "prod":
            r = xi.movedim(axes, tuple(range(-len(axes), 0))).flatten(-len(axes)).prod(dim=-1)
        elif kind in ("sumsq", "l2"):
            r = (xi * xi).sum(dim=axes)
            if kind == "l2":
                r = r.double().sqrt().floor().long()
        else:
            r = xi.abs().sum(dim=axes)
        return r.to(x.dtype)
    xd = x.double()
    if kind == "sum":
        return xd.sum(dim=axes)
    if kind == "mean":
        return xd.mean(dim=axes)
    if kind == "max":
        return xd.amax(dim=axes)
    if kind == "min":
        return xd.amin(dim=axes)
    if kind == "prod":
        return xd.movedim(axes, tuple(range(-len(axes), 0))).flatten(-len(axes)).prod(dim=-1)
    if kind == "sumsq":
        return (xd * xd).sum(dim=axes)
    if kind == "l1":
        return xd.abs().sum(dim=axes)
    if kind == "l2":
        return (xd * xd).sum(dim=axes).sqrt()
    if kind == "logsum":
        return xd.sum(dim=axes).log()
    return torch.logsumexp(xd, dim=axes)


def ref_arg(x, axis, arg_min, last):
    xd = x.double().movedim(axis, -1)
    nan = torch.isnan(xd)
    best = torch.where(nan, torch.full_like(xd, math.inf if arg_min else -math.inf), xd)
    best = best.amin(dim=-1, keepdim=True) if arg_min else best.amax(dim=-1, keepdim=True)
    cand = (xd == best) & ~nan
    n = xd.shape[-1]
    ar = torch.arange(n, device=x.device).expand_as(xd)
    idx = torch.where(cand, ar, torch.full_like(ar, -1)).amax(dim=-1) if last else \
        torch.where(cand, ar, torch.full_like(ar, n)).amin(dim=-1)
    idx = torch.where(nan[..., 0] | (idx < 0) | (idx >= n), torch.zeros_like(idx), idx)
    return idx


def ref_topk(x, axis, k, largest):
    key = x.double() + 0.0  # -0 ties with +0
    key = torch.where(torch.isnan(key), torch.full_like(key, math.nan), key)
    _, order = torch.sort(key, dim=axis, descending=bool(largest), stable=True)
    order = order.narrow(axis, 0, k)
    return torch.gather(x, axis, order), order


def rnd(shape, lo, hi, dtype=torch.float32, device="cuda", gen=None):
    a = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    if dtype in (torch.int32, torch.int64):
        a = a.floor()
    return a.to(dtype).to(device)


# ---- correctness sweep ----

def correctness(K, R, dev, quick):
    gen = torch.Generator().manual_seed(20240611)

    def r(shape, lo=-2.0, hi=2.0, dt=torch.float32):
        return rnd(shape, lo, hi, dt, dev, gen)

    layouts = [([3, 4, 37], [2]), ([37, 5, 6], [0]), ([4, 6, 5, 7], [0, 2]), ([5, 1, 9], [0, 1, 2]),
               ([6, 300], [1]), ([2, 3000], [1]), ([3, 20000], [1]), ([20000, 3], [0]), ([2, 700, 3], [0, 2]),
               ([40, 3, 50], [1]), ([3, 1, 4], [1]), ([2, 3, 4, 5], [1, 2]), ([9, 5], [0, 1])]
    if not quick:
        layouts += [([1, 900, 8, 312], [3]), ([1, 900, 312, 8], [2]), ([1000, 1000], [0, 1]),
                    ([3, 200001], [1]), ([100000, 3], [0]), ([70001, 2, 3], [0, 2]), ([300000, 5], [1]),
                    ([5, 300000], [0]), ([6, 256, 64, 176], [2, 3])]
    for shape, axes in layouts:
        n = math.prod(shape[a] for a in axes)
        for kind in KINDS:
            if kind == "prod" and n > 2000:
                continue
            x = r(shape, 0.9, 1.1) if kind == "prod" else r(shape, 0.1, 2.0) if kind in ("logsum", "l2") else r(shape)
            tol = (1e-5 + (3e-7 * n if kind == "prod" else 0), 1e-5 * max(1.0, n ** 0.5))
            if kind in ("max", "min"):
                tol = (0.0, 0.0)
            R.check(f"Reduce {kind} {shape} axes {axes}", run_reduce(K, kind, x, axes), ref_reduce(kind, x, axes),
                    *tol)
    for dt in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64):
        for shape, axes in (([4, 33, 9], [1]), ([4, 9, 33], [2]), ([3, 9000], [1]), ([3000, 2], [0])):
            for kind in KINDS:
                isint = dt in (torch.int32, torch.int64)
                n = math.prod(shape[a] for a in axes)
                if kind == "prod" and n > 100 and not isint:
                    continue
                if isint:
                    x = r(shape, -2, 3, dt) if kind == "prod" else r(shape, -50, 50, dt)
                    tol = (0.0, 0.0)
                else:
                    x = r(shape, 0.9, 1.1, dt) if kind == "prod" else \
                        r(shape, 0.1, 2.0, dt) if kind in ("logsum", "l2") else r(shape, -2, 2, dt)
                    tol = (1e-12, 1e-12 * n) if dt == torch.float64 else (1e-2, 1e-2 * max(1.0, n ** 0.5))
                want = ref_reduce(kind, x, axes)
                if not isint and dt != torch.float64:
                    want = want.to(dt)
                R.check(f"Reduce {kind} {shape} axes {axes} {dt}", run_reduce(K, kind, x, axes), want, *tol)
    x = r([6, 50])
    x[1, 7], x[2, 3], x[4, 9], x[4, 10] = math.nan, math.inf, math.nan, math.inf
    x[3, :] = -math.inf
    for kind in ("max", "min", "sum", "lse", "mean"):
        R.check(f"Reduce {kind} NaN/inf rows", run_reduce(K, kind, x, [1]), ref_reduce(kind, x, [1]), 1e-5, 1e-5)
        xt = x.t().contiguous()
        R.check(f"Reduce {kind} NaN/inf columns", run_reduce(K, kind, xt, [0]), ref_reduce(kind, x, [1]), 1e-5,
                1e-5)

    arg_shapes = [([1, 900, 10], 2), ([100, 37], 0), ([3, 2000, 5], 1), ([4, 3000], 1), ([5, 1, 3], 1), ([7, 65], 1)]
    if not quick:
        arg_shapes.append(([70000, 3], 1))
    for shape, axis in arg_shapes:
        for dt in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64):
            x = r(shape, -9, 9, dt) if dt in (torch.int32, torch.int64) else r(shape, -2, 2, dt)
            for amin in (0, 1):
                for last in (0, 1):
                    R.check(f"Arg{'Min' if amin else 'Max'} {shape} axis {axis} {dt} last={last}",
                            run_arg(K, x, axis, amin, last), ref_arg(x, axis, amin, last))
    ties = r([50, 40], 0, 3).floor()
    ties[0, 0], ties[1, 5] = math.nan, math.nan
    ties[2, :] = 1.0
    for axis in (0, 1):
        for amin in (0, 1):
            for last in (0, 1):
                R.check(f"Arg ties/NaN axis {axis} min={amin} last={last}", run_arg(K, ties, axis, amin, last),
                        ref_arg(ties, axis, amin, last))

    sm_shapes = [(5, 1, 1), (5, 3, 1), (5, 7, 1), (5, 32, 1), (3, 129, 1), (3, 1000, 1), (2, 2048, 1), (2, 2049, 1),
                 (2, 5000, 1), (6, 7, 10), (1, 3, 4000), (4, 9, 100), (3, 20, 5), (2, 150, 6), (300, 8, 1),
                 (2, 312, 8)]
    if not quick:
        sm_shapes += [(70000, 8, 1), (4, 9, 70000), (7200, 1500, 1), (900, 312, 8)]
    for outer, n, inner in sm_shapes:
        for dt in (torch.float32, torch.float16, torch.float64):
            x = r([outer, n, inner], -4, 4, dt)
            tol = (2e-3, 2e-3) if dt == torch.float16 else (1e-5, 1e-6) if dt == torch.float32 else (1e-12, 1e-14)
            for log in (0, 1):
                ref = (torch.log_softmax if log else torch.softmax)(x.double(), dim=1)
                R.check(f"{'Log' if log else ''}Softmax [{outer},{n},{inner}] {dt}", run_softmax(K, x, 1, log),
                        ref, *tol)
    x = r([4, 50], -4, 4)
    x[1, 3], x[2, 8] = math.nan, math.inf
    x[3, :] = -math.inf
    for log in (0, 1):
        got = run_softmax(K, x, 1, log)
        want = torch.full_like(x.double(), math.nan)
        want[0] = (torch.log_softmax if log else torch.softmax)(x[0].double(), dim=0)
        R.check(f"{'Log' if log else ''}Softmax NaN/inf rows", got, want, 1e-5, 1e-6)
    buf = r([1 + 3 * 1002], -4, 4)
    xm, ybuf = buf[1:].view(3, 1002), torch.empty(1 + 3 * 1002, device=dev)
    R.same("Softmax misaligned rows give the aligned bits", run_softmax(K, xm.contiguous().clone(), 1, 0),
           run_softmax(K, xm, 1, 0, ybuf[1:].view(3, 1002)))

    for shape, axis, sshape, bshape, eps in (([1, 900, 256], -1, None, "dense", 1e-5), ([1, 900, 512], -1, None, "dense", 1e-5),
                                             ([6, 12, 256], 2, None, "dense", 1e-5), ([2, 3, 4, 5], 1, None, "dense", 1e-5),
                                             ([7, 3], -1, None, "dense", 1e-5), ([5, 1], -1, None, "dense", 1e-3),
                                             ([3, 4, 6], -2, [1, 6], [4, 1], 1e-5), ([4, 3000], -1, None, None, 1e-5),
                                             ([3, 2, 2049], 1, None, "dense", 1e-5), ([700, 16], -1, None, "dense", 1e-5),
                                             ([9, 130], -1, [1], [1], 1e-5), ([4, 2048], -1, None, "dense", 1e-5)):
        ax = axis % len(shape)
        nd = shape[ax:]
        x = r(shape, -3, 3) + 0.5
        scale = r(sshape or nd, 0.5, 1.5)
        bias = None if bshape is None else r(nd if bshape == "dense" else bshape, -1, 1)
        y, m, s = run_layernorm(K, x, ax, scale, bias, eps)
        xd = x.double().reshape(math.prod(shape[:ax]), -1)
        mu = xd.mean(dim=1, keepdim=True)
        rs = 1.0 / ((xd - mu).pow(2).mean(dim=1, keepdim=True) + eps).sqrt()
        sc = scale.double().expand(nd).reshape(-1)
        bi = 0.0 if bias is None else bias.double().expand(nd).reshape(-1)
        R.check(f"LayerNorm {shape} axis {axis} scale {sshape} bias {bshape}", y,
                ((xd - mu) * rs * sc + bi).reshape(shape), 1e-5, 1e-5)
        R.check(f"LayerNorm {shape} axis {axis} Mean", m, mu.reshape(-1), 1e-5, 1e-6)
        R.check(f"LayerNorm {shape} axis {axis} InvStdDev", s, rs.reshape(-1), 1e-5, 1e-6)

    for shape in ([2, 8, 30, 30], [2, 8, 31, 31], [2, 3, 5, 7], [700, 3], [4, 5, 9000]) + \
            (() if quick else ([6, 256, 64, 176],)):
        c = shape[1]
        x = r(shape, -3, 3)
        sc, bi, mean, var = r([c], .5, 1.5), r([c], -1, 1), r([c], -.5, .5), r([c], .1, 2)
        eps = 1e-5
        a = sc / torch.sqrt(var + eps)
        b = bi - mean * a
        bs = [1, c] + [1] * (len(shape) - 2)
        R.check(f"BatchNorm {shape}", run_batchnorm(K, x, sc, bi, mean, var, eps), x * a.view(bs) + b.view(bs),
                1e-6, 1e-6)

    topk = [([1, 900], 1, 300, 1, torch.float32), ([1, 900], 1, 600, 1, torch.float32),
            ([3, 17], 1, 17, 0, torch.float32), ([50, 7, 3], 0, 4, 1, torch.float32),
            ([2, 4096], 1, 10, 1, torch.float32), ([1, 5000], 1, 100, 1, torch.float32),
            ([2, 9000, 2], 1, 300, 0, torch.float32), ([300, 4], 1, 2, 1, torch.float32),
            ([5, 100], 1, 30, 1, torch.float64), ([5, 100], 1, 30, 0, torch.int32),
            ([2, 5000], 1, 30, 1, torch.int64), ([1, 9000], 1, 300, 1, torch.float32)]
    if not quick:
        topk += [([3, 20000, 2], 1, 1000, 0, torch.float32), ([70000, 4], 1, 2, 1, torch.float32),
                 ([2, 100000], 1, 900, 1, torch.float32)]
    for shape, axis, k, largest, dt in topk:
        x = r(shape, -1000, 1000, dt) if dt in (torch.int32, torch.int64) else r(shape, -5, 5, dt)
        v, i = run_topk(K, x, axis, k, largest)
        wv, wi = ref_topk(x, axis, k, largest)
        R.check(f"TopK {shape} axis {axis} k {k} largest {largest} {dt} indices", i, wi)
        R.check(f"TopK {shape} axis {axis} k {k} largest {largest} {dt} values", v, wv)
    for shape, k in (([8, 300], 100), ([2, 10000], 500), ([1, 20000], 5000)):
        t = r(shape, 0, 4).floor()
        t[0, 5], t[0, 6] = -0.0, 0.0
        t[0, 7] = math.nan
        for largest in (0, 1):
            v, i = run_topk(K, t, 1, k, largest)
            wv, wi = ref_topk(t, 1, k, largest)
            R.check(f"TopK ties/NaN {shape} k {k} largest {largest} indices", i, wi)
            R.check(f"TopK ties/NaN {shape} k {k} largest {largest} values", v, wv)


# ---- determinism, graph replay, speed on Sparse4Dv3 shapes ----

def workloads(K, dev):
    gen = torch.Generator().manual_seed(7)

    def r(shape, lo=-2.0, hi=2.0, dt=torch.float32):
        return rnd(shape, lo, hi, dt, dev, gen)

    F = torch.nn.functional
    w = []

    def add(name, ours, theirs, nbytes):
        w.append((name, ours, theirs, nbytes))

    for rows, cols in ((900, 256), (1800, 256), (900, 512), (1800, 512)):
        x, sc, bi = r([1, rows, cols], -3, 3), r([cols], .5, 1.5), r([cols], -1, 1)
        y = torch.empty_like(x)
        add(f"LayerNorm [1,{rows},{cols}]", lambda x=x, sc=sc, bi=bi, y=y: run_layernorm(K, x, 2, sc, bi, 1e-5, False, y)[0],
            lambda x=x, sc=sc, bi=bi, cols=cols: F.layer_norm(x, (cols,), sc, bi, 1e-5), 8 * x.numel())
    for shape, axis in (([8, 900, 1500], -1), ([8, 900, 900], -1), ([1, 900, 8, 312], -1), ([1, 900, 312, 8], 2)):
        x = r(shape, -4, 4)
        y = torch.empty_like(x)
        add(f"Softmax {shape} axis {axis}", lambda x=x, axis=axis, y=y: run_softmax(K, x, axis, 0, y),
            lambda x=x, axis=axis: torch.softmax(x, dim=axis), 8 * x.numel())
    for kind, shape, axes, tfn in (("sum", [1, 900, 312, 8], [2], lambda x: x.sum(dim=2)),
                                   ("sum", [1, 900, 8, 312], [3], lambda x: x.sum(dim=3)),
                                   ("sum", [1, 900, 78, 256], [2], lambda x: x.sum(dim=2)),
                                   ("max", [1, 900, 10], [2], lambda x: x.amax(dim=2)),
                                   ("mean", [6, 256, 64, 176], [2, 3], lambda x: x.mean(dim=(2, 3))),
                                   ("sum", [1000000], [0], lambda x: x.sum())):
        x = r(shape)
        add(f"Reduce{kind.capitalize()} {shape} axes {axes}", lambda x=x, kind=kind, axes=axes: run_reduce(K, kind, x, axes),
            lambda x=x, tfn=tfn: tfn(x), 4 * x.numel())
    x = r([1, 900, 10])
    add("ArgMax [1,900,10] axis 2", lambda x=x: run_arg(K, x, 2, 0, 0), lambda x=x: x.argmax(dim=2), 4 * x.numel())
    for n, k in ((900, 300), (900, 600), (9000, 300)):
        x = r([1, n], -5, 5)
        add(f"TopK [1,{n}] k {k}", lambda x=x, k=k: run_topk(K, x, 1, k, 1)[1],
            lambda x=x, k=k: torch.topk(x, k, dim=1, sorted=True)[1], 4 * n)
    x = r([6, 256, 64, 176], -3, 3)
    sc, bi, mean, var = r([256], .5, 1.5), r([256], -1, 1), r([256], -.5, .5), r([256], .1, 2)
    add("BatchNorm [6,256,64,176]", lambda: run_batchnorm(K, x, sc, bi, mean, var, 1e-5),
        lambda: F.batch_norm(x, mean, var, sc, bi, False, 0.0, 1e-5), 8 * x.numel())
    return w


def time_graph(fn, iters):
    """Mean GPU microseconds per call from a CUDA graph of `iters` calls (launch overhead excluded)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(iters):
            fn()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / iters)
    return sorted(times)[len(times) // 2]


def determinism_and_speed(K, R, dev, iters):
    for name, ours, theirs, nbytes in workloads(K, dev):
        first = ours().clone()
        torch.cuda.synchronize()
        again = [ours().clone() for _ in range(3)]
        torch.cuda.synchronize()
        det = all(torch.equal(first.view(torch.uint8), a.view(torch.uint8)) for a in again)
        if not det:
            R.failures += 1
        print(f"{'ok  ' if det else 'FAIL'} {name}: bitwise identical over 4 runs", flush=True)
        # Replay of a captured graph gives the eager bits (nothing on the legacy stream, no allocation).
        out = {}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ours()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out["y"] = ours()
        g.replay()
        torch.cuda.synchronize()
        graph_ok = torch.equal(out["y"].view(torch.uint8), first.view(torch.uint8))
        if not graph_ok:
            R.failures += 1
        print(f"{'ok  ' if graph_ok else 'FAIL'} {name}: CUDA-graph replay equals eager", flush=True)
        t_ours = time_graph(ours, iters)
        try:
            t_torch = time_graph(theirs, iters)
        except Exception as e:  # a PyTorch op that cannot be captured: report, keep going
            print(f"     {name}: PyTorch timing failed: {e}", flush=True)
            t_torch = None
        R.bench.append({"workload": name, "s4d_us": round(t_ours, 2),
                        "torch_us": round(t_torch, 2) if t_torch else None,
                        "speedup": round(t_torch / t_ours, 2) if t_torch else None,
                        "s4d_GBps": round(nbytes / t_ours / 1e3, 1), "deterministic": det,
                        "graph_replay_ok": graph_ok})
        print(f"     {name}: s4d {t_ours:.2f} us, torch {t_torch or float('nan'):.2f} us", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="fewer and smaller cases")
    ap.add_argument("--device", default="cuda", help="cpu: for an emulated build of the kernels")
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args(argv)
    import os
    os.makedirs(args.out, exist_ok=True)
    K = Kernels(args.lib, args.device)
    R = Report()
    t0 = time.time()
    correctness(K, R, args.device, args.quick)
    t1 = time.time()
    if args.device == "cuda":
        determinism_and_speed(K, R, args.device, args.iters)
    t2 = time.time()
    dev_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu (emulated)"
    md = [f"# Reduction-family CUDA kernels on {dev_name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
          "", f"torch {torch.__version__}; command: `python3 {' '.join(sys.argv)}`", "",
          f"Correctness sweep: {t1 - t0:.0f} s; determinism, graph replay and timing: {t2 - t1:.0f} s; "
          f"failures: {R.failures}.", "",
          "Times: mean GPU time per call inside a CUDA graph of back-to-back calls (launch overhead excluded), "
          "median of 5 replays.", "",
          "| workload | s4d (us) | torch (us) | torch / s4d | s4d GB/s | deterministic | graph replay |",
          "| --- | --- | --- | --- | --- | --- | --- |"]
    for b in R.bench:
        md.append(f"| {b['workload']} | {b['s4d_us']} | {b['torch_us']} | {b['speedup']} | {b['s4d_GBps']} | "
                  f"{b['deterministic']} | {b['graph_replay_ok']} |")
    with open(os.path.join(args.out, "reduce_kernels.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "reduce_kernels.json"), "w") as f:
        json.dump({"device": dev_name, "torch": torch.__version__, "failures": R.failures, "bench": R.bench}, f,
                  indent=1)
    print("\n".join(md))
    print(f"reduce kernels: {R.failures} failures")
    return 1 if R.failures else 0


if __name__ == "__main__":
    sys.exit(main())
