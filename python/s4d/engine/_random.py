"""s4dexec's generated inputs, value for value (tools/s4dexec: fill_random).

s4dexec draws from xorshift64* with one state carried across the inputs it
generates. Stepping that state is linear over GF(2), so the states of a
whole tensor come from repeated doubling (states s_1..s_L give s_{L+1}..s_2L
through the step matrix raised to L) in a few hundred NumPy operations
instead of one Python step per element.
"""
import numpy as np

from . import _arrays
from .errors import DtypeError, InvalidArgumentError

_U = np.uint64
_MUL = _U(2685821657736338717)
_GOLDEN = 0x9E3779B97F4A7C15
_BITS = np.arange(64, dtype=np.uint64)


def _step(v):
    v = v ^ (v >> _U(12))
    v = v ^ (v << _U(25))
    return v ^ (v >> _U(27))


def _apply(cols, v):
    """The GF(2) matrix with columns cols (64 uint64) times every state in v."""
    out = np.zeros_like(v)
    for j in range(64):
        out ^= cols[j] * ((v >> _U(j)) & _U(1))
    return out


_STEP_COLS = _step(np.left_shift(np.ones(64, dtype=np.uint64), _BITS))


def _states(s0, n):
    """States s_1..s_n after s0 (s4dexec's next_rand updates, then returns)."""
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    states = _step(np.array([s0], dtype=np.uint64))
    advance = _STEP_COLS  # moves a state forward by len(states)
    while len(states) < n:
        states = np.concatenate([states, _apply(advance, states)])
        advance = _apply(advance, advance)
    return states[:n]


def _values(code, r, shape):
    if code == 1 or code == 11:
        u = (r >> _U(11)).astype(np.float64) / 9007199254740992.0
        v = 2 * u - 1
        return (v.astype(np.float32) if code == 1 else v).reshape(shape)
    if code == 9:
        return (r & _U(1)).astype(np.bool_).reshape(shape)
    if code in (2, 3, 4, 5, 6, 7, 12, 13):
        return (r % _U(4)).astype(_arrays.numpy_dtype(code)).reshape(shape)
    if code == 10:
        return np.full(shape, 0x3800, dtype=np.uint16).view(np.float16)  # 0.5
    if code == _arrays.BFLOAT16:
        torch = _arrays.torch_module()
        if torch is None:
            import torch
        return torch.full(shape, 0x3800, dtype=torch.int16).view(torch.bfloat16)
    raise DtypeError(f"cannot generate values of dtype {_arrays.DTYPE_NAMES.get(code, code)}")


def random_inputs(engine, seed=1, given=()):
    """The inputs s4dexec generates for an engine with --seed=seed: floats
    uniform in [-1, 1), integers in [0, 4), bools 0/1, float16 0.5. Inputs
    named in `given` (s4dexec's --loadInputs) are skipped and draw nothing.
    engine: an Engine, a Context or a list of TensorSpec. Returns {name: array}."""
    specs = engine.inputs if hasattr(engine, "inputs") else list(engine)
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgumentError(f"seed must be an integer >= 0, got {seed!r}")
    state = (int(seed) * _GOLDEN + 1) & 0xFFFFFFFFFFFFFFFF
    out = {}
    for spec in specs:
        if spec.name in given:
            continue
        n = int(np.prod(spec.shape, dtype=np.int64))
        states = _states(state, n)
        if n:
            state = int(states[-1])
        out[spec.name] = _values(_arrays.CODE_BY_NAME[spec.dtype], states * _MUL, spec.shape)
    return out
