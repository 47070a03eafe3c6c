"""Scalar helpers of the generated kernels (``blockbuster_numba.runtime``) against
float64 math, on dense sweeps: the vectorisable ``tanh32`` within 2 ulp of the
correctly rounded value everywhere (tiny magnitudes where only a relative error
shows, both sides of the switch from the polynomial to the exponential form,
saturation) with the IEEE special values; ``gelu32`` within 1e-6 relative error
down to its underflow; ``exp_sum32(hi, lo)`` as accurate as an exp of the exact sum;
``exp_ftz32`` within 2 ulp wherever its result is at least 2^-125 and 0 below, and
sigmoid/SiLU on it equal to the same functions on ``exp32``, bit for bit."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from blockbuster_numba.runtime import (FASTMATH, exp32, exp_ftz32, exp_sum32, gelu32, sigmoid32,
                                       silu32, tanh32)


@njit(fastmath=set(FASTMATH), error_model="numpy")
def _tanh_all(x, out):
    for i in range(x.size):
        out[i] = tanh32(x[i])


def _tanh(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    out = np.empty_like(x)
    _tanh_all(x, out)
    return out


def test_tanh32_is_within_two_ulp_of_float64():
    switch = np.float32(0.625)
    xs = np.concatenate([
        np.linspace(-20.0, 20.0, 400_001),
        np.geomspace(1e-38, 20.0, 40_001), -np.geomspace(1e-38, 20.0, 40_001),
        # around the switch, element by element
        np.nextafter(switch, np.float32(0), dtype=np.float32) + np.arange(-50, 50) * np.spacing(switch),
        [9.0, 9.1, 44.0, 45.0, 88.0, 89.0, 1e4, 3.4e38, -3.4e38],
    ]).astype(np.float32)
    got = _tanh(xs).astype(np.float64)
    want = np.tanh(xs.astype(np.float64))
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.max(np.abs(got - want) / ulp) <= 2.0
    assert np.all(np.sign(got) == np.sign(want))


def test_tanh32_special_values():
    got = _tanh(np.array([np.inf, -np.inf, np.nan, 0.0, 1e-45, -1e-45], np.float32))
    assert got[0] == 1.0 and got[1] == -1.0
    assert np.isnan(got[2])
    assert got[3] == 0.0
    assert got[4] == np.float32(1e-45) and got[5] == -np.float32(1e-45)   # subnormal kept


@njit(fastmath=set(FASTMATH), error_model="numpy")
def _gelu_all(x, out):
    for i in range(x.size):
        out[i] = gelu32(x[i])


def test_gelu32_is_accurate_down_to_its_underflow():
    xs = np.concatenate([np.linspace(-14.5, 14.5, 290_001), -np.geomspace(1e-30, 14.5, 20_001),
                         np.geomspace(1e-30, 1e4, 2_001)]).astype(np.float32)
    got = np.empty_like(xs)
    _gelu_all(xs, got)
    x = xs.astype(np.float64)
    want = 0.5 * x * np.vectorize(math.erfc, otypes=[float])(-x / math.sqrt(2.0))
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    rel = np.abs(got[normal] - want[normal]) / np.abs(want[normal])
    assert rel.max() <= 1e-6
    # subnormal results: within a few of their ulps (1.4e-45 each)
    assert np.all(np.abs(got[~normal] - want[~normal]) <= 1e-44)


@njit(error_model="numpy")
def _exp_sums(hi, lo, out):
    for i in range(hi.size):
        out[i] = exp_sum32(hi[i], lo[i])


def test_exp_sum32_is_an_exp_of_the_exact_sum():
    rng = np.random.default_rng(5)
    hi = -(rng.uniform(0.0, 85.0, 100_000)).astype(np.float32)
    lo = rng.uniform(-2.0, 2.0, 100_000).astype(np.float32)
    got = np.empty_like(hi)
    _exp_sums(hi, lo, got)
    want = np.exp(hi.astype(np.float64) + lo.astype(np.float64))    # the sum, unrounded
    normal = want >= np.finfo(np.float32).tiny
    assert normal.mean() > 0.9
    rel = np.abs(got[normal] - want[normal]) / want[normal]
    assert rel.max() <= 3e-7
    # below exp's float32 range: 0, as exp32 gives
    tiny = np.empty(1, np.float32)
    _exp_sums(np.array([-110.0], np.float32), np.array([0.5], np.float32), tiny)
    assert tiny[0] == 0.0


@njit(fastmath=set(FASTMATH), error_model="numpy")
def _exp_ftz_all(x, out):
    for i in range(x.size):
        out[i] = exp_ftz32(x[i])


def _exp_ftz(values) -> np.ndarray:
    x = np.ascontiguousarray(values, np.float32)
    out = np.empty_like(x)
    _exp_ftz_all(x, out)
    return out


def test_exp_ftz32_is_exp_down_to_its_flush():
    x = np.linspace(-86.6, 88.72, 2_000_003, dtype=np.float32)   # all of its normal range
    want = np.exp(x.astype(np.float64))
    rel = np.abs(_exp_ftz(x) - want) / want
    assert rel.max() <= 2 * 2.0 ** -24
    # results just below FLT_MAX need 2^128 as a scale: not an early overflow
    top = np.float32(88.72)
    assert np.isclose(_exp_ftz([top])[0], math.exp(float(top)), rtol=2e-7)
    below = np.linspace(-103.0, -86.61, 1001, dtype=np.float32)
    assert np.all(_exp_ftz(below) == 0.0)                 # flushed: under exp(-86.6)
    special = _exp_ftz([np.inf, -np.inf, np.nan, 89.0, 1e30, -1e30, 0.0])
    assert special[0] == np.inf and special[1] == 0.0 and np.isnan(special[2])
    assert special[3] == np.inf and special[4] == np.inf and special[5] == 0.0
    assert special[6] == 1.0


@njit(fastmath=set(FASTMATH), error_model="numpy")
def _sigmoid_silu_both_ways(x, new, old):
    one = np.float32(1.0)
    for i in range(x.size):
        new[0, i] = sigmoid32(x[i])
        new[1, i] = silu32(x[i])
        old[0, i] = one / (one + exp32(-x[i]))
        old[1, i] = x[i] / (one + exp32(-x[i]))


def test_sigmoid_and_silu_on_the_flushing_exp_are_unchanged():
    # exp(-x) < 2^-125 flushed or not, 1 + exp(-x) rounds to 1: the same results
    x = np.concatenate([np.linspace(-120.0, 120.0, 400_001, dtype=np.float32),
                        np.array([np.inf, -np.inf, np.nan, 1e30, -1e30], np.float32)])
    new = np.empty((2, x.size), np.float32)
    old = np.empty_like(new)
    _sigmoid_silu_both_ways(x, new, old)
    assert np.array_equal(new, old, equal_nan=True)
