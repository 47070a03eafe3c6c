"""A stored sum of block products is added up in its destination block
(``codegen.stores.in_place_target``): the first trip stores its product, later ones
add theirs, and nothing is copied out after. Checked against float64 NumPy written
from the math, on ragged sizes and 1e3 magnitudes, with the ranges the IR allows
(whole, from a constant, up to a loop index, empty) and where it must not apply."""

from __future__ import annotations

import numpy as np
import pytest

import blockbuster as bb
from blockbuster_numba import backend

HEADER = """\
program sums
dim M = 150 block 64
dim K = 200 block 64
dim N = 70 block 32
input X[M, K]
input W[K, N]
"""


def _compile(body: str):
    return bb.compile(bb.parse_program(HEADER + body), backend=backend, tune="off")


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return {"X": (rng.standard_normal((150, 200)) * 1e3).astype(np.float32),
            "W": rng.standard_normal((200, 70)).astype(np.float32)}


def _partial(x, w, k_blocks):
    """sum over the K blocks ``k_blocks`` of X[:, block]·W[block, :], in float64."""
    out = np.zeros((x.shape[0], w.shape[1]))
    for kb in k_blocks:
        s = slice(64 * kb, 64 * (kb + 1))
        out += x[:, s].astype(np.float64) @ w[s].astype(np.float64)
    return out


def _close(got, want, x, w):
    scale = np.abs(x).max() * np.abs(w).max() * x.shape[1]
    assert np.abs(got - want).max() <= 2e-6 * scale


def _kernel_source(compiled, name="Y"):
    source = compiled.run.source
    start = source.index(f"def kernel_{name}(")
    return source[start:source.index("\n\n\n", start)]


def test_a_whole_range_sum_stores_its_first_product_and_adds_the_rest_in_place():
    compiled = _compile("output Y[M, N]\nkernel Y for m in M, n in N:\n"
                        "  Y[m, n] = sum(k in K: dot(X[m, k], W[k, n]))\n")
    kernel = _kernel_source(compiled)
    assert "np.zeros" not in kernel                     # no accumulator block ...
    assert "for c in range" not in kernel               # ... copied out after
    assert "if k == 0:" in kernel and "_set_(" in kernel
    arrays = _inputs()
    got = compiled(**arrays)["Y"]
    _close(got, _partial(arrays["X"], arrays["W"], range(4)), arrays["X"], arrays["W"])


@pytest.mark.parametrize("bounds,blocks", [
    ("[1 : ]", lambda m: range(1, 4)),                 # a constant start: its first trip stores
    ("[ : m + 1]", lambda m: range(0, min(m + 1, 4))),  # bounds read the loop: zeroed first
    ("[2 : 2]", lambda m: range(0)),                  # empty: the block is all zeros
])
def test_a_sum_over_part_of_the_range_is_added_up_in_place(bounds, blocks):
    compiled = _compile(f"output Y[M, N]\nkernel Y for m in M, n in N:\n"
                        f"  Y[m, n] = sum(k in K{bounds}: dot(X[m, k], W[k, n]))\n")
    arrays = _inputs(1)
    x, w = arrays["X"], arrays["W"]
    got = compiled(**arrays)["Y"]
    for m in range(3):                                  # M's row blocks (the last ragged)
        rows = slice(64 * m, 64 * (m + 1))
        want = _partial(x[rows], w, blocks(m))
        _close(got[rows], want, x, w)


def test_a_single_block_product_is_stored_straight_into_its_destination():
    text = HEADER.replace("dim K = 200 block 64", "dim K = 200 block 200")
    compiled = bb.compile(bb.parse_program(
        text + "output Y[M, N]\nkernel Y for m in M, n in N:\n"
               "  Y[m, n] = sum(k in K: dot(X[m, k], W[k, n]))\n"), backend=backend, tune="off")
    kernel = _kernel_source(compiled)
    assert "np.empty" not in kernel and "for c in range" not in kernel
    arrays = _inputs(2)
    want = arrays["X"].astype(np.float64) @ arrays["W"].astype(np.float64)
    _close(compiled(**arrays)["Y"], want, arrays["X"], arrays["W"])


def test_a_sum_read_again_or_stored_transposed_keeps_its_own_accumulator():
    # Read by a second store: the sum must survive its first store unchanged.
    compiled = _compile(
        "output Y[M, N]\noutput Z[M, N]\nkernel Y for m in M, n in N:\n"
        "  Y[m, n] = sum(k in K: dot(X[m, k], W[k, n]))\n"
        "  Z[m, n] = mul(sum(k in K: dot(X[m, k], W[k, n])), -2.0)\n")
    assert "np.zeros" in _kernel_source(compiled)
    arrays = _inputs(3)
    got = compiled(**arrays)
    want = _partial(arrays["X"], arrays["W"], range(4))
    _close(got["Y"], want, arrays["X"], arrays["W"])
    _close(got["Z"], -2.0 * want, arrays["X"], arrays["W"])
    # Stored transposed: the product's layout is not the destination's.
    compiled = _compile("output T[N, M]\nkernel T for n in N, m in M:\n"
                        "  T[n, m] = transpose(sum(k in K: dot(X[m, k], W[k, n])))\n")
    got = compiled(**arrays)["T"]
    _close(got, want.T, arrays["X"], arrays["W"])
