"""The float16 tensor-core attention kernel (attn_tc16_kernel in
src/backend/cuda/kernels/attention_tc.cu) emulated lane by lane on the CPU, against NumPy.

The kernel cannot run without a GPU, but its index arithmetic can: this file repeats the
kernel's staging (tc_stage: which thread copies which element at each access width), its
ldmatrix addresses, the way it pairs score accumulators into P's A fragments, its online
softmax over the quad's shuffles, the key tiles each block of the key split computes
(tc_order: live tiles first under a key mask, dead ones with finite values dropped) and the
key-split merge, while ldmatrix (plain and .trans) and mma.m16n8k16 are implemented from
their definitions in the PTX ISA (fragment layouts, g = lane / 4, t = lane % 4). A wrong
address, fragment or tile shows as errors of order 1; the comparison is with attention in
float64 on the same float16-rounded inputs (P rounded to float16 as the kernel does: errors
~1e-4 on outputs of magnitude ~1, bound 3e-3), and NaN rows (a fully masked query) must
match. Each case names the access widths of Q, K^T and V
(8, 4 or 1 halves) that the launcher would pick for its shapes. Keep in step with the kernel.
"""
import sys

import numpy as np
BQ = BK = 64  # queries per block, keys per tile
NT = 128  # threads per block
def pad(n): return 16 if n <= 16 else 32 if n <= 32 else 64 if n <= 64 else 128

def stage(W, ROWS, COLS, dst, ld, src, gs, r0, rmax, c0, cmax):
    CPR = COLS // W
    RS = NT // CPR
    assert NT % CPR == 0 and ROWS % RS == 0
    for tid in range(NT):
        rt, ct = tid // CPR, tid % CPR * W
        cin = c0 + ct < cmax
        for it in range(ROWS // RS):
            inb = cin and r0 + rt + it * RS < rmax
            base = (r0 + rt) * gs + c0 + ct + it * RS * gs
            d = rt * ld + ct + it * RS * ld
            for w in range(W):
                dst[d + w] = src[base + w] if inb else 0.0

def ldsm(smem, addrs, trans):
    # addrs[lane] = element index of row (lane&7) of matrix lane>>3; returns regs[i][lane] = (lo, hi)
    regs = np.zeros((4, 32, 2))
    for i in range(4):
        M = np.array([[smem[addrs[8 * i + r] + c] for c in range(8)] for r in range(8)])
        for l in range(32):
            g, t = l >> 2, l & 3
            if trans:
                regs[i, l] = (M[2 * t, g], M[2 * t + 1, g])
            else:
                regs[i, l] = (M[g, 2 * t], M[g, 2 * t + 1])
    return regs

def mma(c, a, b0, b1):
    # c [32][4], a [4][32][2], b0/b1 [32][2]; rebuild matrices from fragments and multiply
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    C = np.zeros((16, 8))
    for l in range(32):
        g, t = l >> 2, l & 3
        A[g, 2*t:2*t+2] = a[0][l]
        A[g+8, 2*t:2*t+2] = a[1][l]
        A[g, 2*t+8:2*t+10] = a[2][l]
        A[g+8, 2*t+8:2*t+10] = a[3][l]
        B[2*t:2*t+2, g] = b0[l]
        B[2*t+8:2*t+10, g] = b1[l]
        C[g, 2*t:2*t+2] = c[l, 0:2]
        C[g+8, 2*t:2*t+2] = c[l, 2:4]
    D = C + A @ B
    out = np.zeros_like(c)
    for l in range(32):
        g, t = l >> 2, l & 3
        out[l, 0:2] = D[g, 2*t:2*t+2]
        out[l, 2:4] = D[g+8, 2*t:2*t+2]
    return out

def h(x): return np.float64(np.float16(x))

def block(Q, K, V, M, nq, nk, d, dv, q0, tiles, wq, wk, wv, fill_val, hit):
    DP = pad(max(d, dv))
    LD, LDK, KS = DP + 8, BK + 8, DP // 16
    Qs = np.full(BQ * LD, np.nan)
    Ks = np.full(DP * LDK, np.nan)
    Vs = np.full(BK * LD, np.nan)
    stage(wq, BQ, DP, Qs, LD, Q, d, q0, nq, 0, d)
    lanes = np.arange(32)
    lrow = (lanes & 7) + ((lanes >> 3) & 1) * 8
    lcol = (lanes >> 4) * 8
    gr, tq = lanes >> 2, lanes & 3
    res = []
    for warp in range(4):
        qf = [ldsm(Qs, (warp * 16 + lrow) * LD + ks * 16 + lcol, False) for ks in range(KS)]
        m = np.full((32, 2), -np.inf)
        l = np.zeros((32, 2))
        o = np.zeros((DP // 8, 32, 4))
        for kt in tiles:
            k0 = kt * BK
            Ks[:] = np.nan
            Vs[:] = np.nan
            stage(wk, DP, BK, Ks, LDK, K, nk, 0, d, k0, nk)
            stage(wv, BK, DP, Vs, LD, V, dv, k0, nk, 0, dv)
            kvalid = min(BK, nk - k0)
            s = np.zeros((BK // 8, 32, 4))
            for ks in range(KS):
                for np_ in range(BK // 16):
                    kb = ldsm(Ks, (ks * 16 + lrow) * LDK + np_ * 16 + lcol, True)
                    s[2*np_] = mma(s[2*np_], qf[ks], kb[0], kb[1])
                    s[2*np_+1] = mma(s[2*np_+1], qf[ks], kb[2], kb[3])
            for j in range(BK // 8):
                for e in range(4):
                    key = j * 8 + tq * 2 + (e & 1)
                    row = q0 + warp * 16 + gr + (e >> 1) * 8
                    for L in range(32):
                        if key[L] >= kvalid: s[j, L, e] = -np.inf
                        elif M is not None and row[L] < nq and (M[row[L], k0 + key[L]] != 0) == hit:
                            s[j, L, e] = fill_val
            for r in range(2):
                tmax = np.max(s[:, :, 2*r:2*r+2], axis=(0, 2))  # per lane
                tmax = np.array([max(tmax[L], tmax[L ^ 1]) for L in range(32)])
                tmax = np.array([max(tmax[L], tmax[L ^ 2]) for L in range(32)])
                mnew = np.maximum(m[:, r], tmax)
                muse = np.where(mnew == -np.inf, 0.0, mnew)
                scale = np.exp(m[:, r] - muse)
                s[:, :, 2*r:2*r+2] = np.exp(s[:, :, 2*r:2*r+2] - muse[None, :, None])
                rs = s[:, :, 2*r:2*r+2].sum(axis=(0, 2))
                rs = np.array([rs[L] + rs[L ^ 1] for L in range(32)])
                rs = np.array([rs[L] + rs[L ^ 2] for L in range(32)])
                l[:, r] = l[:, r] * scale + rs
                m[:, r] = mnew
                o[:, :, 2*r:2*r+2] *= scale[None, :, None]
            for kk in range(BK // 16):
                pa = np.zeros((4, 32, 2))
                pa[0] = h(s[2*kk][:, 0:2])
                pa[1] = h(s[2*kk][:, 2:4])
                pa[2] = h(s[2*kk+1][:, 0:2])
                pa[3] = h(s[2*kk+1][:, 2:4])
                for np_ in range(KS):
                    vb = ldsm(Vs, (kk * 16 + lrow) * LD + np_ * 16 + lcol, True)
                    o[2*np_] = mma(o[2*np_], pa, vb[0], vb[1])
                    o[2*np_+1] = mma(o[2*np_+1], pa, vb[2], vb[3])
        for r in range(2):
            for L in range(32):
                qg = q0 + warp * 16 + gr[L] + r * 8
                if qg >= nq: continue
                for j in range(DP // 8):
                    for e in range(2):
                        col = j * 8 + tq[L] * 2 + e
                        if col < dv:
                            res.append((qg, col, o[j, L, 2*r+e], m[L, r], l[L, r]))
    return res

def mma_k8(c, a, b0, b1):
    """mma.m16n8k8 TF32: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4); b0 (k t, n g),
    b1 (k t+4, n g); c as m16n8k16's."""
    A = np.zeros((16, 8))
    B = np.zeros((8, 8))
    C = np.zeros((16, 8))
    for l in range(32):
        g, t = l >> 2, l & 3
        A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4] = a[0][l], a[1][l], a[2][l], a[3][l]
        B[t, g], B[t + 4, g] = b0[l], b1[l]
        C[g, 2*t:2*t+2] = c[l, 0:2]
        C[g+8, 2*t:2*t+2] = c[l, 2:4]
    D = C + A @ B
    out = np.zeros_like(c)
    for l in range(32):
        g, t = l >> 2, l & 3
        out[l, 0:2] = D[g, 2*t:2*t+2]
        out[l, 2:4] = D[g+8, 2*t:2*t+2]
    return out


def tf(x):
    """cvt.rna.tf32.f32: 10 mantissa bits, to nearest, ties away from zero."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = ((b + 0x1000) & 0xFFFFE000).astype(np.uint32)
    return b.view(np.float32).astype(np.float64)


def softmax_step(s, m, l, o):
    for r in range(2):
        tmax = np.max(s[:, :, 2*r:2*r+2], axis=(0, 2))
        tmax = np.array([max(tmax[L], tmax[L ^ 1]) for L in range(32)])
        tmax = np.array([max(tmax[L], tmax[L ^ 2]) for L in range(32)])
        mnew = np.maximum(m[:, r], tmax)
        muse = np.where(mnew == -np.inf, 0.0, mnew)
        scale = np.exp(m[:, r] - muse)
        s[:, :, 2*r:2*r+2] = np.exp(s[:, :, 2*r:2*r+2] - muse[None, :, None])
        rs = s[:, :, 2*r:2*r+2].sum(axis=(0, 2))
        rs = np.array([rs[L] + rs[L ^ 1] for L in range(32)])
        rs = np.array([rs[L] + rs[L ^ 2] for L in range(32)])
        l[:, r] = l[:, r] * scale + rs
        m[:, r] = mnew
        o[:, :, 2*r:2*r+2] *= scale[None, :, None]


def block32(Q, K, V, M, nq, nk, d, dv, q0, tiles, wq, wk, wv, fill_val, hit):
    """attn_tc32_kernel: float staging rounded to TF32 in place, 32-bit fragment loads."""
    DP = pad(max(d, dv))
    LD, LDK, KS = DP + 4, BK + 8, DP // 8
    Qs = np.full(BQ * LD, np.nan)
    Ks = np.full(DP * LDK, np.nan)
    Vs = np.full(BK * LD, np.nan)
    stage(wq, BQ, DP, Qs, LD, Q, d, q0, nq, 0, d)
    lanes = np.arange(32)
    gr, tq = lanes >> 2, lanes & 3
    res = []
    for warp in range(4):
        qf = []
        for ks in range(KS):
            qr = (warp * 16 + gr) * LD + ks * 8 + tq
            qf.append([tf(Qs[qr]), tf(Qs[qr + 8 * LD]), tf(Qs[qr + 4]), tf(Qs[qr + 8 * LD + 4])])
        m = np.full((32, 2), -np.inf)
        l = np.zeros((32, 2))
        o = np.zeros((KS, 32, 4))
        for kt in tiles:
            k0 = kt * BK
            Ks[:] = np.nan
            Vs[:] = np.nan
            stage(wk, DP, BK, Ks, LDK, K, nk, 0, d, k0, nk)
            stage(wv, BK, DP, Vs, LD, V, dv, k0, nk, 0, dv)
            Ks[:] = np.where(np.isnan(Ks), np.nan, tf(np.nan_to_num(Ks)))
            Vs[:] = np.where(np.isnan(Vs), np.nan, tf(np.nan_to_num(Vs)))
            kvalid = min(BK, nk - k0)
            s = np.zeros((BK // 8, 32, 4))
            for ks in range(KS):
                kr = (ks * 8 + tq) * LDK + gr
                for j in range(BK // 8):
                    s[j] = mma_k8(s[j], qf[ks], Ks[kr + j * 8], Ks[kr + 4 * LDK + j * 8])
            for j in range(BK // 8):
                for e in range(4):
                    key = j * 8 + tq * 2 + (e & 1)
                    row = q0 + warp * 16 + gr + (e >> 1) * 8
                    for L in range(32):
                        if key[L] >= kvalid:
                            s[j, L, e] = -np.inf
                        elif M is not None and row[L] < nq and (M[row[L], k0 + key[L]] != 0) == hit:
                            s[j, L, e] = fill_val
            softmax_step(s, m, l, o)
            for j in range(BK // 8):
                pa = [tf(s[j][:, 0]), tf(s[j][:, 2]), tf(s[j][:, 1]), tf(s[j][:, 3])]
                vr = (j * 8 + tq * 2) * LD + gr
                for n in range(KS):
                    o[n] = mma_k8(o[n], pa, Vs[vr + n * 8], Vs[vr + LD + n * 8])
        for r in range(2):
            for L in range(32):
                qg = q0 + warp * 16 + gr[L] + r * 8
                if qg >= nq:
                    continue
                for j in range(KS):
                    for e in range(2):
                        col = j * 8 + tq[L] * 2 + e
                        if col < dv:
                            res.append((qg, col, o[j, L, 2*r+e], m[L, r], l[L, r]))
    return res


def block_tiles(ktiles, splits, split, key_live=None, v_finite=None, skip=True):
    """tc_order: the key tiles block `split` of the key split computes, in order. The order is
    ascending, or with a key mask and fill -inf (key_live: per tile, some key attended) the live
    tiles and then the dead ones; the block takes every splits-th position from `split` on and,
    when skipping, drops its dead tiles whose V is finite (v_finite: per tile)."""
    order = list(range(ktiles))
    if key_live is not None:
        order = [t for t in order if key_live[t]] + [t for t in order if not key_live[t]]
    mine = order[split::splits]
    if key_live is None or not skip:
        return mine
    return [t for t in mine if key_live[t] or not v_finite[t]]


def run(nq, nk, d, dv, mask=None, fill=-np.inf, hit=0, splits=1, ws=(1, 1, 1), seed=0,
        tf32=False, key_mask=None, v_bad=(), skip=True):
    """key_mask (nk,): a mask the same for every query row (the kernel orders the tiles by it
    when fill is -inf); v_bad: keys whose first value is set to inf / NaN."""
    rng = np.random.default_rng(seed)
    rnd = (lambda x: np.float64(np.float32(x))) if tf32 else h
    Qm = rnd(rnd(rng.uniform(-2, 2, (nq, d))) * 0.25)
    Km = rnd(rng.uniform(-2, 2, (d, nk)))
    Vm = rnd(rng.uniform(-2, 2, (nk, dv)))
    for i, k in enumerate(v_bad):
        Vm[k, 0] = np.inf if i % 2 == 0 else np.nan
    kernel = block32 if tf32 else block
    ktiles = (nk + BK - 1) // BK
    key_live = v_finite = None
    if key_mask is not None:
        mask = np.broadcast_to(key_mask, (nq, nk))
        if fill == -np.inf:
            att = (key_mask != 0) != hit
            key_live = [bool(att[t * BK:(t + 1) * BK].any()) for t in range(ktiles)]
            v_finite = [bool(np.isfinite(Vm[t * BK:(t + 1) * BK]).all()) for t in range(ktiles)]
    out = np.zeros((nq, dv))
    parts = {}
    for qt in range((nq + BQ - 1) // BQ):
        for sp in range(splits):
            tiles = block_tiles(ktiles, splits, sp, key_live, v_finite, skip)
            for (qg, col, acc, mm, ll) in kernel(Qm.ravel(), Km.ravel(), Vm.ravel(), mask, nq, nk, d, dv,
                                                 qt * BQ, tiles, *ws, fill, hit):
                parts.setdefault((qg, col), []).append((acc, mm, ll))
    for qg in range(nq):  # a block that computed no tile leaves m = -inf, l = 0, o = 0
        for col in range(dv):
            ps = parts.setdefault((qg, col), [])
            ps += [(0.0, -np.inf, 0.0)] * (splits - len(ps))
    for (qg, col), ps in parts.items():
        mx = max(p[1] for p in ps)
        mu = 0.0 if mx == -np.inf else mx
        w = [np.exp(p[1] - mu) for p in ps]
        sm = sum(p[2] * wi for p, wi in zip(ps, w))
        ac = sum(p[0] * wi for p, wi in zip(ps, w))
        with np.errstate(all="ignore"):
            out[qg, col] = ac * (1.0 / sm) if sm != 0 else ac * np.inf
    S = Qm @ Km
    if mask is not None:
        S = np.where((mask != 0) == hit, fill, S)
    with np.errstate(all="ignore"):
        P = np.exp(S - S.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
    ref = P @ Vm
    nan_ok = np.array_equal(np.isnan(ref), np.isnan(out))
    err = np.nanmax(np.abs(np.where(np.isnan(ref), 0, ref) - np.where(np.isnan(out), 0, out)))
    what = f" key mask, skip {skip}" if key_mask is not None else ""
    print(f"{'tf32' if tf32 else 'f16 '} nq {nq} nk {nk} d {d} dv {dv} splits {splits} ws {ws}{what}: "
          f"max err {err:.2e} nan match {nan_ok}")
    return err < 3e-3 and nan_ok

def main():
    ok = True
    ok &= run(20, 70, 16, 16, ws=(8, 1, 8))
    ok &= run(70, 130, 13, 7, ws=(1, 1, 1))
    ok &= run(33, 100, 32, 24, ws=(8, 4, 8), splits=2)
    rng = np.random.default_rng(5)
    mk = rng.uniform(size=(40, 90)) < 0.5
    mk[3] = False
    ok &= run(40, 90, 64, 64, mask=mk, ws=(8, 1, 8))
    ok &= run(17, 64, 100, 72, ws=(4, 8, 8))
    rng = np.random.default_rng(6)
    mk2 = rng.uniform(size=(30, 200)) < 0.3
    ok &= run(30, 200, 24, 40, mask=mk2, fill=-3.0, hit=1, ws=(8, 8, 8), splits=2)
    ok &= run(20, 70, 16, 16, ws=(4, 1, 4), tf32=True)
    ok &= run(70, 130, 13, 7, ws=(1, 2, 1), tf32=True)
    ok &= run(33, 100, 32, 24, ws=(4, 4, 2), splits=2, tf32=True)
    ok &= run(40, 90, 64, 64, mask=mk, ws=(4, 1, 4), tf32=True)
    ok &= run(17, 64, 100, 72, ws=(4, 4, 4), tf32=True)
    ok &= run(30, 200, 24, 40, mask=mk2, fill=-3.0, hit=1, ws=(4, 4, 4), splits=2, tf32=True)
    # key masks with dead tiles (keys 0..99 attended: tiles 0, 1 live, 2 .. 4 dead), split in
    # two: dead tiles skipped or computed, and a NaN / inf under dead tiles (those count: NaN)
    km = np.zeros(300, dtype=bool)
    km[:100] = True
    for tf in (False, True):
        w = (4, 4, 4) if tf else (8, 4, 8)
        for skip in (True, False):
            ok &= run(20, 300, 32, 32, key_mask=km, ws=w, splits=2, tf32=tf, skip=skip)
        ok &= run(20, 300, 32, 32, key_mask=km, ws=w, splits=2, tf32=tf, v_bad=(250,))
        ok &= run(20, 300, 32, 32, key_mask=km, ws=w, splits=3, tf32=tf, v_bad=(130, 131))
        ok &= run(20, 300, 32, 32, key_mask=~km, ws=w, splits=2, tf32=tf, hit=1)  # fill where True
        ok &= run(20, 300, 32, 32, key_mask=np.zeros(300, bool), ws=w, splits=2, tf32=tf)  # none attended
    print("all cases agree" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
