"""The vectorisable float32 ``tanh`` the generated kernels call (``runtime.tanh32``)
against float64 NumPy: within 2 ulp of the correctly rounded value everywhere (a
dense sweep, tiny magnitudes where only a relative error shows, both sides of the
switch from the polynomial to the exponential form, saturation), and the IEEE
special values."""

from __future__ import annotations

import numpy as np
from numba import njit

from blockbuster_numba.runtime import FASTMATH, tanh32


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
