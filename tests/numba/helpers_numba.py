"""Helpers shared by the Numba backend tests (imported by name: pytest puts this
directory on sys.path)."""

import textwrap

import numpy as np

from blockbuster.ir.parser import parse_program


def program(text: str):
    return parse_program(textwrap.dedent(text).strip() + "\n")


def f32(a):
    """Values exactly representable in float32 (so both backends see the same input)."""
    return np.asarray(a, np.float32)


def assert_close(got: dict, want: dict, rtol=2e-5, atol=None, names=None):
    """Each output within ``rtol`` of the reference, relative to its largest magnitude
    (float32 sums in a different order differ in the last bits), and the same where
    the reference is not finite (masked -inf rows, identities of empty reductions)."""
    assert set(got) == set(want)
    for name in names or want:
        g = np.asarray(got[name], np.float64)
        w = np.asarray(want[name], np.float64)
        assert g.shape == w.shape, name
        finite = np.isfinite(w)
        np.testing.assert_array_equal(g[~finite], w[~finite], err_msg=name)
        if finite.any():
            scale = max(float(np.max(np.abs(w[finite]))), 1e-30)
            tol = rtol * scale if atol is None else atol
            err = float(np.max(np.abs(g[finite] - w[finite])))
            assert err <= tol, f"{name}: max error {err:.3g} > {tol:.3g} (scale {scale:.3g})"
