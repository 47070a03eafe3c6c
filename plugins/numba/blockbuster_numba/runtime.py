"""Scalar helpers the generated kernels call: a vectorisable ``exp`` and ``tanh``, and
the operators that are more than one arithmetic expression (``silu``, ``sigmoid``,
``gelu``, ``gelu_tanh``).

They are ordinary ``@njit`` functions of one element; LLVM inlines them into the
generated loops, so a loop over a block calling ``exp32`` vectorises (``math.exp``
is a scalar libm call without Intel SVML: ~1.7 ns/element against ~0.2 ns here).

The generated module imports them by name; the source of this file is part of the
cache key of every generated module (see :mod:`.compiler`), so editing a helper
never leaves stale machine code behind.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from . import microkernel
from .gemm_call import call_gemm, call_gemm_packed

#: Fast-math flags of every generated function: only ``nsz`` (the sign of a zero),
#: so results follow IEEE as NumPy's do (README, "Non-finite
#: values and fast math"). ``nnan``/``ninf`` stay off: the online softmax and
#: ``keep_ge`` masks rely on -inf (exp(-inf) = 0, max(-inf, x) = x) and non-finite
#: inputs must propagate. ``contract`` stays off: ``fma(x, x, -mean)`` is not 0 where
#: ``x*x - mean`` is, and ``rsqrt(eps)`` amplifies it (a LayerNorm of one column gave
#: 0.95 instead of 1). ``arcp``/``afn`` stay off: LLVM turns ``1/sqrt(y)`` into an
#: rsqrt estimate whose Newton step computes ``inf*0 = nan`` for y = inf. Measured
#: cost of dropping contract and arcp: none above noise (benchmarks/bench_numba.py).
#: ``reassoc`` stays off too: it lets LLVM turn ``(x - m) - c`` into ``x - (m + c)``,
#: which loses the exact cancellation of ``x - m`` (a fused log-softmax at inputs of
#: 1e3 had 100x the unfused error; found by benchmarks/fuzz_fusion.py). Its cost: the
#: in-block sums no longer vectorise as freely (fused attention at N=2048 went from 72
#: to 103 ms in one measurement; the matmul workloads are BLAS-bound: no change).
FASTMATH = frozenset({"nsz"})

#: The exp polynomial must not be reassociated: Cody-Waite range reduction relies on
#: the order of ``x - k*C1 - k*C2``. Only fused multiply-adds are allowed in it.
_EXACT = dict(fastmath={"contract"}, error_model="numpy", cache=True)


def _bitcast(src, dst):
    @intrinsic
    def cast(typingctx, x):
        sig = dst(src)

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(dst))

        return sig, codegen

    return cast


_bits_of_f32 = _bitcast(types.float32, types.int32)
_f32_of_bits = _bitcast(types.int32, types.float32)


def _float_binary(name: str, doc: str):
    """An LLVM floating-point intrinsic of two arguments of one float type."""

    @intrinsic
    def op(typingctx, a, b):
        if a != b or a not in (types.float32, types.float64):
            return None
        sig = a(a, b)

        def codegen(context, builder, signature, args):
            ty = context.get_value_type(a)
            fnty = ir.FunctionType(ty, [ty, ty])
            fn = builder.module.declare_intrinsic(name, [ty], fnty)
            return builder.call(fn, args)

        return sig, codegen

    op.__doc__ = doc
    return op


#: IEEE 754-2019 maximum/minimum (``np.maximum``/``np.minimum``: a NaN operand gives
#: NaN). As LLVM intrinsics they vectorise, also as reductions (a row max), where
#: ``a if a > b else b`` does not without the ``nnan`` flag.
maximum = _float_binary("llvm.maximum", "max(a, b), NaN-propagating, vectorisable")
minimum = _float_binary("llvm.minimum", "min(a, b), NaN-propagating, vectorisable")
_maxnum = _float_binary("llvm.maxnum", "max(a, b) ignoring a NaN operand")
_minnum = _float_binary("llvm.minnum", "min(a, b) ignoring a NaN operand")

# radd lives beside the GEMM drivers, which use it too (microkernel.py: why there).
radd = microkernel.radd


@intrinsic
def opaque(typingctx, x):
    """``x`` itself, through an empty inline-asm statement LLVM cannot see through:
    a loop whose length comes from it is not fully unrolled at compile time."""
    if x != types.int64 and not isinstance(x, types.IntegerLiteral):
        return None
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [ir.IntType(64)])
        return builder.asm(fnty, "", "=r,0", args, side_effect=False)

    return sig, codegen


_LOG2E = np.float32(1.4426950408889634)
_ROUND = np.float32(12582912.0)      # 1.5 * 2^23: x + _ROUND rounds x to an integer
_ROUND_BITS = np.int32(0x4B400000)   # the bits of _ROUND
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_P0 = np.float32(1.9875691500e-4)
_P1 = np.float32(1.3981999507e-3)
_P2 = np.float32(8.3334519073e-3)
_P3 = np.float32(4.1665795894e-2)
_P4 = np.float32(1.6666665459e-1)
_P5 = np.float32(5.0000001201e-1)
_ONE = np.float32(1.0)
_TWO = np.float32(2.0)
_ZERO = np.float32(0.0)
_HI = np.float32(88.8)       # above log(FLT_MAX): the product below overflows to inf
_LO = np.float32(-103.9)     # below log of the smallest subnormal: 0


@njit(**_EXACT)
def exp32(x):
    """exp of a float32 (Cephes expf polynomial, ~1e-7 relative error).

    exp(-inf) = 0, exp(inf) = inf, exp(nan) = nan, subnormal results are kept.
    Branch-free: a loop calling it vectorises (~0.5 ns per element on AVX-512).
    """
    xc = _minnum(_maxnum(x, _LO), _HI)
    t = xc * _LOG2E + _ROUND             # k = round(x / ln 2), in t's low bits
    k = t - _ROUND
    r = xc - k * _LN2_HI                 # Cody-Waite: r = x - k ln 2, in two steps
    r = r - k * _LN2_LO
    y = _exp_reduced(r, t)
    y = _ZERO if x < _LO else y
    return y if x == x else x


@njit(fastmath={"contract"}, error_model="numpy", inline="always")
def _exp_reduced(r, t):
    """exp(r)·2^k, |r| <= ln(2)/2 and k in the low bits of ``t`` (exp32's reduction)."""
    p = _P0 * r + _P1
    p = p * r + _P2
    p = p * r + _P3
    p = p * r + _P4
    p = p * r + _P5
    p = p * (r * r) + r + _ONE           # exp(r)
    ki = _bits_of_f32(t) - _ROUND_BITS
    k1 = ki >> np.int32(1)               # 2^k as 2^k1 * 2^(k - k1): both stay normal
    s1 = _f32_of_bits((k1 + np.int32(127)) << np.int32(23))
    s2 = _f32_of_bits((ki - k1 + np.int32(127)) << np.int32(23))
    return p * s1 * s2


_LO_FTZ = np.float32(-86.6)   # exp below ~2^-125: flushed to 0 by exp_ftz32
_TWO_P = tuple(np.float32(2.0) * c for c in (_P0, _P1, _P2, _P3, _P4, _P5))  # exact


@njit(**_EXACT)
def exp_ftz32(x):
    """exp32 with results below ~2^-125 (x < -86.6) flushed to 0: 2^k is then one
    multiply, where exp32 splits it in two so that subnormal results stay exact.

    For terms that a sum of 1 or more absorbs, which the code generator proves before
    it calls this: a softmax's exp(x - rowmax(x)) (its largest term is exp(0) = 1, and
    a flushed term is under 2^-125 of it), sigmoid's 1 + exp(-x). Elsewhere exp32 is
    the exp. exp(-inf) = 0, exp(inf) = inf, exp(nan) = nan, overflow as exp32's.
    2^k is taken as 2·2^(k-1), the factor 2 folded into the polynomial (exact), so
    that k = 128 (results just below FLT_MAX) needs no bits past the exponent's.
    Softmax terms at N=S=4096: ~20 % less time than exp32 on AVX-512 (Zen 4)."""
    xc = _minnum(_maxnum(x, _LO_FTZ), _HI)
    t = xc * _LOG2E + _ROUND
    k = t - _ROUND
    r = xc - k * _LN2_HI
    r = r - k * _LN2_LO
    q0, q1, q2, q3, q4, q5 = _TWO_P
    p = q0 * r + q1
    p = p * r + q2
    p = p * r + q3
    p = p * r + q4
    p = p * r + q5
    p = p * (r * r) + (r + r) + _TWO            # 2·exp(r), summed as exp32's r + 1
    ki = _bits_of_f32(t) - _ROUND_BITS
    y = p * _f32_of_bits((ki + np.int32(126)) << np.int32(23))
    y = _ZERO if x < _LO_FTZ else y
    return y if x == x else x


@njit(fastmath={"contract"}, error_model="numpy", inline="always")
def exp_sum32(hi, lo):
    """exp(hi + lo) of finite float32 ``hi`` (large) and ``lo`` (a correction of at most
    a few units), as accurate as exp32 of the exact sum: k is chosen from the rounded
    sum, and r = (hi - k·ln2) + lo with hi - k·ln2 exact (both are multiples of hi's
    ulp, and close), so the sum's rounding (|hi|·2^-24) never reaches the result. One
    exp where erfc's exponent otherwise took two."""
    x = hi + lo
    xc = _minnum(_maxnum(x, _LO), _HI)
    t = xc * _LOG2E + _ROUND
    k = t - _ROUND
    r = (hi - k * _LN2_HI) + lo
    r = r - k * _LN2_LO
    y = _exp_reduced(r, t)
    return _ZERO if x < _LO else y


@njit(fastmath=set(FASTMATH), error_model="numpy", cache=True)
def sigmoid32(x):
    """1 / (1 + exp(-x)); no overflow trouble: exp(-x) = inf gives 0. (exp_ftz32: a
    flushed exp(-x) < 2^-125 leaves 1 + exp(-x) = 1 as it was.)"""
    return _ONE / (_ONE + exp_ftz32(-x))


@njit(fastmath=set(FASTMATH), error_model="numpy", cache=True)
def silu32(x):
    """x * sigmoid(x), written x / (1 + exp(-x)) (exp_ftz32: as in sigmoid32)."""
    return x / (_ONE + exp_ftz32(-x))


_HALF = np.float32(0.5)
_SQRT_HALF = np.float32(0.7071067811865476)        # 1/√2
_GELU_K2 = np.float32(1.5957691216057308)          # 2·√(2/π)
_GELU_C = np.float32(0.044715)
_ERFC_ZERO = np.float32(14.2)        # erfc(14.2/√2) < 1e-45: 0 in float32 from here on
_SPLIT = np.float32(4097.0)          # 2^12 + 1: Veltkamp's split of a float32
_ERFC_P = tuple(np.float32(c) for c in (
    0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
    0.09678418, 0.37409196, 1.00002368, -1.26551223))
_E0, _E1, _E2, _E3, _E4, _E5, _E6, _E7, _E8, _E9 = _ERFC_P


@njit(fastmath=set(FASTMATH), error_model="numpy", inline="always")
def erfc_sqrt_half32(a):
    """erfc(a/√2) of a float32 a, within 5e-7 relative error wherever it is normal.

    Numerical Recipes' erfcc (Chebyshev fit, fractional error < 1.2e-7):
    erfc(z) = t·exp(-z² + P(t)), t = 1/(1 + z/2), z = |a|/√2; erfc(-z) = 2 - erfc(z).
    Branch-free on exp32, so a loop calling it vectorises (~3.5x faster than libm's
    ``math.erfc``). The exponent -a²/2 is taken from a itself, split exactly as
    ah² + (2ah + al)·al (Veltkamp): rounding a/√2 or z² to float32 would cost
    ~z²·2^-23 relative error (1e-5 at z = 6.5), which is all of gelu's tail; the
    exact -ah²/2 and the rest go to one exp (:func:`exp_sum32`: 3.5 -> 2.8 ns per
    element of gelu, same accuracy, than an exp of each).
    """
    m = abs(a)
    t = _ONE / (_ONE + _HALF * (m * _SQRT_HALF))
    p = _E0 * t + _E1
    p = p * t + _E2
    p = p * t + _E3
    p = p * t + _E4
    p = p * t + _E5
    p = p * t + _E6
    p = p * t + _E7
    p = p * t + _E8
    p = p * t + _E9
    c = _SPLIT * m
    mh = c - (c - m)                     # m's upper 12 bits: mh·mh is exact
    ml = m - mh
    r = t * exp_sum32(-(_HALF * (mh * mh)), p - _HALF * ((_TWO * mh + ml) * ml))
    r = _ZERO if m > _ERFC_ZERO else r   # also m = inf, where the split is NaN
    return _TWO - r if a < _ZERO else r


# erfc_sqrt_half32 and gelu32 are inlined at Numba's level: as ordinary calls they
# ran 5x slower in a loop (40 ns against 8 ns per element, a loop of gelu32 over 2^20
# float32): the call was not inlined, so the loop did not vectorise.
@njit(fastmath=set(FASTMATH), error_model="numpy", inline="always")
def gelu32(x):
    """x·½(1 + erf(x/√2)), written ½x·erfc(-x/√2): no cancellation in 1 + erf for
    x < 0 (the reference computes the same); vectorisable (erfc_sqrt_half32)."""
    return _HALF * x * erfc_sqrt_half32(-x)


_TANH_SMALL = np.float32(0.625)
_TANH_P = tuple(np.float32(c) for c in (
    -5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
    -3.33332819422e-1))
_H0, _H1, _H2, _H3, _H4 = _TANH_P


@njit(fastmath=set(FASTMATH), error_model="numpy", inline="always")
def tanh32(x):
    """tanh of a float32 within 1.3 ulp (Cephes tanhf): below 0.625 in magnitude the
    odd polynomial x + x³P(x²), else ±(1 - 2/(exp(2|x|) + 1)) (tanh(±inf) = ±1, NaN
    stays NaN). Both are computed and one selected: a loop calling it vectorises,
    ~1 ns per element against ~19 ns for libm's ``math.tanh`` (a call per element:
    GPT-2's tanh GELU spent half of its fused FFN kernel there)."""
    z = abs(x)
    s = x * x
    p = ((((_H0 * s + _H1) * s + _H2) * s + _H3) * s + _H4) * s * x + x
    e = _ONE - _TWO / (exp32(z + z) + _ONE)
    e = e if x >= _ZERO else -e
    return p if z < _TANH_SMALL else e


@njit(error_model="numpy", cache=True)
def tanh64(x):
    return math.tanh(x)


@njit(fastmath=set(FASTMATH), error_model="numpy", cache=True)
def gelu_tanh32(x):
    """½x(1 + tanh(u)), u = √(2/π)(x + 0.044715x³), written x / (1 + exp(-2u)): the
    same function, vectorisable (exp32), and no cancellation of 1 + tanh(u) for x < 0."""
    return x / (_ONE + exp_ftz32(-(_GELU_K2 * (_GELU_C * x * x * x + x))))


@njit(error_model="numpy", cache=True)
def gelu64(x):
    return 0.5 * x * math.erfc(-x * 0.7071067811865476)


@njit(error_model="numpy", cache=True)
def gelu_tanh64(x):
    return x / (1.0 + math.exp(-(1.5957691216057308 * (0.044715 * x * x * x + x))))


@njit(error_model="numpy", cache=True)
def sigmoid64(x):
    return 1.0 / (1.0 + math.exp(-x))


@njit(error_model="numpy", cache=True)
def silu64(x):
    return x / (1.0 + math.exp(-x))


@njit(error_model="numpy", cache=True)
def exp64(x):
    return math.exp(x)


@njit(inline="always", error_model="numpy")
def gemm(A, B, C):
    """C += A·B of float32 or float64 blocks of any layout (:func:`.microkernel.driver`,
    called through its registered entry point: :mod:`.gemm_call`)."""
    call_gemm(A, B, C, 0)


@njit(inline="always", error_model="numpy")
def gemm_set(A, B, C):
    """C = A·B (``C``'s values are not read: it may be uninitialised)."""
    call_gemm(A, B, C, 1)


@njit(inline="always", error_model="numpy")
def gemm_packed(A, PK, kfull, nfull, r0, c0, C):
    """C += A·B, B the block at (r0, c0) of the kfull x nfull matrix pre-packed in PK
    (:mod:`.prepack`)."""
    call_gemm_packed(A, PK, kfull, nfull, r0, c0, C, 0)


@njit(inline="always", error_model="numpy")
def gemm_packed_set(A, PK, kfull, nfull, r0, c0, C):
    """C = A·B, B as in :func:`gemm_packed`."""
    call_gemm_packed(A, PK, kfull, nfull, r0, c0, C, 1)


#: Helper names the generated code uses, per dtype: generic name -> function here.
HELPERS = {
    "float32": {"exp_": "exp32", "exp_ftz_": "exp_ftz32", "sigmoid_": "sigmoid32", "silu_": "silu32",
                "gelu_": "gelu32", "gelu_tanh_": "gelu_tanh32", "tanh_": "tanh32",
                "maximum_": "maximum", "minimum_": "minimum", "opaque_": "opaque",
                "gemm_": "gemm", "gemm_set_": "gemm_set", "radd_": "radd",
                "gemm_packed_": "gemm_packed", "gemm_packed_set_": "gemm_packed_set"},
    "float64": {"exp_": "exp64", "exp_ftz_": "exp64", "sigmoid_": "sigmoid64", "silu_": "silu64",
                "gelu_": "gelu64", "gelu_tanh_": "gelu_tanh64", "tanh_": "tanh64",
                "maximum_": "maximum", "minimum_": "minimum", "opaque_": "opaque",
                "gemm_": "gemm", "gemm_set_": "gemm_set", "radd_": "radd",
                "gemm_packed_": "gemm_packed", "gemm_packed_set_": "gemm_packed_set"},
}
