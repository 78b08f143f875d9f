"""The attention chain for device_compare.py (family "attention"): the ONNX ops PyTorch exports
for multi-head attention after the projections,
    Mul(Q, 1/sqrt(D)) -> MatMul(., KT) [-> Where(mask, S, fill)] -> Softmax(-1) -> MatMul(., V),
which both engines fuse into s4d::FusedAttention (the CPU's host kernel against the CUDA
flash-attention kernel), in float32 and float16.

Shapes: the Sparse4Dv3 head's blocks (v3: 8 heads of 64, 900 queries, 1500 keys in temporal
cross-attention with a [1, 1, 1, Nk] key mask, 900 in self-attention; tiny: 8 heads of 16, 128
queries, 224 / 128 keys), and odd ones: one query, one key, key counts that are not multiples
of the 64-key tile or of 4 (scalar loads), a query-dependent mask with a fully masked row (NaN
on both sides), Where(mask, fill, S) with a finite fill, broadcast batch dims, Dv != D, head
sizes padded to the kernel's 16/32/64/128, many batch matrices, key ranges split across blocks
(few queries, many keys), and D = 160, which the CUDA kernel refuses (the chain then stays
unfused: cuBLAS and the softmax kernel). Key masks that leave whole 64-key tiles unattended
(dead_tile_cases: the head's temporal block with and without history, a head with no key
attended, infinities and NaN under dead tiles, dead tiles over many key splits) exercise the
skipping of such tiles, in float32, float16 and TF32; attention_dead_tiles.py checks that
skipping gives the same bits as computing them. The scale Mul is taken into the fused node on both
engines (q_scale); the "_swap" cases end with the head's Transpose [..., H, Nq, Dv] ->
[..., Nq, H, Dv], which the fused node takes in as well (swap_out), on every kernel path
(float32, float16, TF32, the key split's merge).

float16 runs on tensor cores (mma m16n8k16) with the probabilities rounded to float16 for
P V; its own cases (f16_cases) add what that kernel's staging and fragments depend on: head
sizes that are not multiples of 8 or 4 (Q and V loaded element by element, the output stored by
halves), key counts that are multiples of 8, of 4 and of neither (K^T copied 16, 8 or 2 bytes
at a time), Dv != D both ways, a mask broadcast over the keys (stride 0), queries not a
multiple of the 16 rows of a warp, and the key split with partial ranges.

float32 with the engine built with --tf32 (tf32_case) runs on TF32 tensor cores (mma
m16n8k8); a selection of the cases covers its paths (16-, 8- and 4-byte staging, masks, the key
split).

Tolerances. float32: the CUDA kernel sums the D products of a score and the Nk terms of an
output in another order than OpenBLAS, and rescales by a running maximum; with scores of a few
units, the scores' absolute errors are ~1e-6 and become relative errors of the probabilities:
rtol 1e-4, atol 2e-5 on outputs of magnitude ~1. float16 (cases.half_case, against the float32
chain on the same rounded values, so that only the kernel's own error is measured): the scores
are exact products summed in float32; each probability is rounded to float16 for P V
(relative error <= u = 2^-11), which moves an output by at most u max|V| = 1e-3 (|V| <= 2) and
typically far less, the errors having random signs; the output is rounded once more (u
relative); and for D = 32 the scale 1/sqrt(D) is rounded into Q by the float16 Mul layer
(relative u per element of Q, ~1e-3 on a score of a few units). Hence rtol 4e-3, atol 2e-3
per element, and a relative L2 error over the whole output below 2e-3 (measured values are
expected near 3e-4: the rms of a rounding is u / sqrt(3)); a wrong fragment or a stale tile
gives errors of order 1. TF32 (against the strict CPU engine on the same float32 inputs):
Q, K^T, P and V are each rounded to 10-bit mantissas (u = 2^-11), so a score of D = 64
products carries an error of ~u sqrt(sum (q k)^2) ~ 7e-4 rms (a few times that at worst),
which becomes a relative error of the probabilities; with the roundings of P and V, the
outputs (magnitude ~1) move by ~1e-3 at worst: rtol 4e-3, atol 3e-3 (the lane-by-lane
emulation, attention_tc_emulation.py, measures 5e-4 .. 1.6e-3 with scores twice as large).
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "engine"))
from cases import Case, half_case  # noqa: E402
from attention_fusion import chain_model, swap_perm  # noqa: E402

F32_TOL = (1e-4, 2e-5)
F16_TOL = (4e-3, 2e-3)
F16_REL_L2 = 2e-3
TF32_TOL = (4e-3, 3e-3)


def attention_case(rng, name, b, nq, nk, d, dv=None, mask=None, fill=float("-inf"),
                   fill_where_true=False, q_batch=None, k_batch=None, v_batch=None, swap=False):
    """b: the batch dims shared by Q, KT and V unless *_batch gives one operand's own; swap:
    the output's heads put back together by a Transpose."""
    dv = d if dv is None else dv
    qs = list(q_batch if q_batch is not None else b) + [nq, d]
    ks = list(k_batch if k_batch is not None else b) + [d, nk]
    vs = list(v_batch if v_batch is not None else b) + [nk, dv]
    inputs = {"q": rng.uniform(-2, 2, qs).astype(np.float32),
              "kt": rng.uniform(-2, 2, ks).astype(np.float32),
              "v": rng.uniform(-2, 2, vs).astype(np.float32)}
    mshape = None
    if mask is not None:
        inputs["mask"] = mask
        mshape = list(mask.shape)
    rank = max(len(qs), len(ks), len(vs))
    model = chain_model((qs, ks, vs), mshape, fill, fill_where_true, scale=1.0 / np.sqrt(d),
                        out_perm=swap_perm(rank) if swap else None)
    return Case(name, model, inputs, *F32_TOL)


def key_mask(rng, shape, keep=0.7, full_rows=()):
    m = rng.uniform(size=shape) < keep
    m[..., 0] = True  # no row fully masked by chance
    for r in full_rows:
        m[..., r, :] = False
    return m


def f32_cases(rng):
    c = []
    # Sparse4Dv3 head, v3 preset: temporal cross-attention (key mask) and self-attention.
    c.append(attention_case(rng, "v3_temporal_900x1500", [1, 8], 900, 1500, 64,
                            mask=key_mask(rng, (1, 1, 1, 1500), 0.6)))
    c.append(attention_case(rng, "v3_self_900x900", [1, 8], 900, 900, 64))
    # tiny preset
    c.append(attention_case(rng, "tiny_temporal_128x224", [1, 8], 128, 224, 16,
                            mask=key_mask(rng, (1, 1, 1, 224), 0.6)))
    c.append(attention_case(rng, "tiny_self_128x128", [1, 8], 128, 128, 16))
    # odd sizes
    c.append(attention_case(rng, "nq1_nk1", [2, 3], 1, 1, 32))
    c.append(attention_case(rng, "nq1_nk37_mask", [1, 2], 1, 37, 64, mask=key_mask(rng, (1, 2, 1, 37), 0.5)))
    c.append(attention_case(rng, "nk37_d32", [1, 4], 70, 37, 32))
    c.append(attention_case(rng, "nk_tail_197", [1, 2], 65, 197, 64, mask=key_mask(rng, (1, 1, 1, 197))))
    c.append(attention_case(rng, "masked_rows_nan", [1, 4], 33, 150, 64,
                            mask=key_mask(rng, (1, 1, 33, 150), 0.5, full_rows=(0, 5, 32))))
    c.append(attention_case(rng, "nk1_masked_rows", [1, 2], 5, 1, 32,
                            mask=np.array([True, False, True, True, False]).reshape(1, 1, 5, 1)))
    c.append(attention_case(rng, "fill_where_true_finite", [1, 2], 7, 37, 32,
                            mask=rng.uniform(size=(1, 1, 1, 37)) < 0.3, fill=-1e4, fill_where_true=True))
    c.append(attention_case(rng, "broadcast_batch_dv48", [2, 3], 9, 37, 16, dv=48, k_batch=[3],
                            v_batch=[1, 3], mask=key_mask(rng, (3, 1, 37), 0.5)))
    c.append(attention_case(rng, "d100_dv72", [1, 2], 40, 90, 100, dv=72))
    c.append(attention_case(rng, "d128", [1, 2], 130, 260, 128, mask=key_mask(rng, (1, 1, 1, 260))))
    c.append(attention_case(rng, "d8_many_batches", [700, 3], 3, 20, 8))
    # few query tiles, many keys: the key ranges are split over blocks and merged
    c.append(attention_case(rng, "split_keys_4000", [1, 2], 50, 4000, 64,
                            mask=key_mask(rng, (1, 1, 50, 4000), 0.02, full_rows=(7,))))
    # the heads put back together by the Transpose after the chain
    c.append(attention_case(rng, "v3_temporal_900x1500_swap", [1, 8], 900, 1500, 64,
                            mask=key_mask(rng, (1, 1, 1, 1500), 0.6), swap=True))
    c.append(attention_case(rng, "tiny_self_128x128_swap", [1, 8], 128, 128, 16, swap=True))
    c.append(attention_case(rng, "split_keys_4000_swap", [2, 3], 50, 4000, 64, swap=True))
    c.append(attention_case(rng, "broadcast_batch_dv48_swap", [2, 3], 9, 37, 16, dv=48, k_batch=[3],
                            v_batch=[1, 3], mask=key_mask(rng, (3, 1, 37), 0.5), swap=True))
    c.append(attention_case(rng, "d13_dv7_nk45_swap", [1, 3], 21, 45, 13, dv=7, swap=True))
    # a head size the CUDA kernel refuses: the chain stays unfused there
    c.append(attention_case(rng, "d160_refused_unfused", [1, 2], 20, 30, 160))
    return c


def ranges_mask(shape, ranges):
    """A key mask of `shape` [..., Nk], True on the keys of ranges: [(lo, hi), ...] for all
    leading positions, or {index of the second dim: [(lo, hi), ...]}."""
    m = np.zeros(shape, dtype=bool)
    per = ranges if isinstance(ranges, dict) else {None: ranges}
    for h, rs in per.items():
        for lo, hi in rs:
            if h is None:
                m[..., lo:hi] = True
            else:
                m[:, h, ..., lo:hi] = True
    return m


def dead_tile_cases(rng):
    """Key masks (fill -inf) that leave whole 64-key tiles unattended, which the kernels
    skip: the v3 head's temporal block with history (its 600 cached keys attended) and
    without (its 900 current ones), a head with no key attended (NaN rows), infinite and NaN
    values under dead tiles (0 x inf = NaN, so those tiles must still count), and many key
    splits whose dead tiles are spread over the blocks."""
    c = [attention_case(rng, "v3_temporal_history_900x1500", [1, 8], 900, 1500, 64,
                        mask=ranges_mask((1, 1, 1, 1500), [(0, 600)])),
         attention_case(rng, "v3_temporal_first_frame_900x1500", [1, 8], 900, 1500, 64,
                        mask=ranges_mask((1, 1, 1, 1500), [(600, 1500)])),
         attention_case(rng, "dead_tiles_no_key_attended", [1, 2], 40, 200, 64,
                        mask=ranges_mask((1, 2, 1, 200), {1: [(64, 128)]})),
         attention_case(rng, "dead_tiles_split_keys_4000", [1, 2], 50, 4000, 64,
                        mask=ranges_mask((1, 1, 1, 4000), [(0, 700), (1500, 1600)]))]
    nonfinite = attention_case(rng, "dead_tiles_nonfinite_v", [1, 2], 70, 300, 32,
                               mask=ranges_mask((1, 2, 1, 300), {0: [(0, 100)], 1: [(150, 200)]}))
    v = nonfinite.inputs["v"]
    v[0, 0, 250, :3] = np.inf   # under head 0's dead tile of keys 192..255
    v[0, 1, 20, 5] = np.nan     # under head 1's dead tile of keys 0..63
    c.append(nonfinite)
    # Dv odd: float16 values checked element by element; a query split over many key ranges
    odd = attention_case(rng, "dead_tiles_nonfinite_v_dv7", [1, 2], 20, 700, 16, dv=7,
                         mask=ranges_mask((1, 2, 1, 700), {0: [(300, 400)], 1: [(0, 64), (640, 700)]}))
    odd.inputs["v"][0, 0, 100, 6] = -np.inf  # head 0: dead tile of keys 64..127
    odd.inputs["v"][0, 1, 699, 0] = np.inf   # head 1: in a live tile (keys 640..699)
    c.append(odd)
    return c


def f16_cases(rng):
    """Shapes for the float16 tensor-core kernel's staging and fragment paths (run in float32
    too, where they cost little)."""
    c = []
    # v3 head blocks with a batch of 8 heads only (no leading 1), and the self-attention masked
    c.append(attention_case(rng, "v3b_temporal_8x900x1500", [8], 900, 1500, 64,
                            mask=key_mask(rng, (1, 1, 1500), 0.6)))
    c.append(attention_case(rng, "v3b_self_masked_8x900x900", [8], 900, 900, 64,
                            mask=key_mask(rng, (8, 1, 900), 0.8)))
    # head sizes: odd (element-wise Q/V loads, half-by-half output), multiples of 4 but not 8
    c.append(attention_case(rng, "d13_dv7_nk45", [1, 3], 21, 45, 13, dv=7))
    c.append(attention_case(rng, "d20_dv12_nk100", [2], 47, 100, 20, dv=12,
                            mask=key_mask(rng, (2, 47, 100), 0.5, full_rows=(3,))))
    c.append(attention_case(rng, "d24_dv40_nk136", [2, 2], 81, 136, 24, dv=40))
    c.append(attention_case(rng, "d16_dv128_nk64", [3], 64, 64, 16, dv=128))
    c.append(attention_case(rng, "d128_dv16_nk333", [2], 100, 333, 128, dv=16,
                            mask=key_mask(rng, (1, 1, 333), 0.5)))
    c.append(attention_case(rng, "d32_nk72_q15", [4], 15, 72, 32))
    c.append(attention_case(rng, "d64_nk1000_q17", [3], 17, 1000, 64))  # key split, partial range
    # key split with Dv not a multiple of 4: the ranges merged element by element, not by quads
    c.append(attention_case(rng, "d13_dv7_nk300_split", [1, 3], 21, 300, 13, dv=7,
                            mask=key_mask(rng, (1, 1, 1, 300), 0.6)))
    # a mask broadcast over the keys (stride 0): whole rows masked or kept
    c.append(attention_case(rng, "mask_key_stride0", [1, 2], 30, 100, 32,
                            mask=np.array([i % 3 != 1 for i in range(30)]).reshape(1, 1, 30, 1)))
    c.append(attention_case(rng, "fill_true_finite_d64_nk200", [2], 70, 200, 64,
                            mask=rng.uniform(size=(2, 70, 200)) < 0.2, fill=-30.0, fill_where_true=True))
    return c


TF32_CASES = ("v3_temporal_900x1500", "v3_self_900x900", "tiny_temporal_128x224", "nk37_d32",
              "masked_rows_nan", "broadcast_batch_dv48", "d100_dv72", "d128", "split_keys_4000",
              "d13_dv7_nk45", "d20_dv12_nk100", "d16_dv128_nk64", "d64_nk1000_q17", "mask_key_stride0",
              "fill_true_finite_d64_nk200", "v3_temporal_900x1500_swap", "split_keys_4000_swap",
              "d13_dv7_nk45_swap")


def tf32_case(c):
    """The float32 case with the CUDA engine built with --tf32 (the TF32 tensor-core kernel)
    against the strict CPU engine."""
    return Case(c.name + "_tf32", c.model, c.inputs, *TF32_TOL, b_flags=["--tf32"])


def cases():
    rng = np.random.default_rng(2024)
    f32 = f32_cases(rng) + f16_cases(rng)
    half = [half_case(c, *F16_TOL, rel_l2=F16_REL_L2) for c in f32 if not c.name.startswith("d160")]
    tf32 = [tf32_case(c) for c in f32 if c.name in TF32_CASES]
    return f32 + half + tf32 + dead_tile_family()


def dead_tile_family():
    """The dead-tile cases in float32, float16 and TF32 (every kernel skips dead tiles), from a
    generator of their own."""
    dead = dead_tile_cases(np.random.default_rng(20261206))
    return dead + [half_case(c, *F16_TOL, rel_l2=F16_REL_L2) for c in dead] + [tf32_case(c) for c in dead]
