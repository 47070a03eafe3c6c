"""Block matmuls inside a ``map`` (one product per held row block, a fused layer's
shape when it loops over output columns in parallel): each product goes straight
into its element of the accumulator (``gemm_`` into ``acc[i, :rows, :cols]``, no
product block copied in after), and a right operand that every element multiplies
by is an input packed once, not once per element. Checked against NumPy in float64
at sizes that are not multiples of the blocks and at large magnitudes."""

from __future__ import annotations

import re

import numpy as np
import pytest

import blockbuster as bb
from blockbuster_numba import backend

# y[:, n] holds every row block of the column block n: sum over k of a map over the
# row blocks of x[ma, k] · W[k, n] (W's block is the same for every ma).
HELD_ROWS = """\
program held_rows
dim M = {m} block 64
dim K = {k} block 64
dim N = {n} block 64
input x[M, K]
input W[K, N]
output y[M, N]
kernel y for n in N:
  y[:, n] = map(m in M: get(sum(k in K: map(ma in M: dot(x[ma, k], W[k, n]))), m))
"""


def _compiled(m, k, n):
    program = bb.parse_program(HELD_ROWS.format(m=m, k=k, n=n))
    return bb.compile(program, backend=backend, tune="off")


def _kernel_lines(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines()
            if line.startswith("    ") and not line.lstrip().startswith("#")]


@pytest.mark.parametrize("m,k,n", [(150, 100, 130), (64, 64, 64), (1, 130, 7)])
def test_products_of_a_map_are_added_into_the_accumulator_in_place(m, k, n):
    compiled = _compiled(m, k, n)
    lines = _kernel_lines(compiled.run.source)
    products = [line for line in lines if line.startswith("gemm")]
    # into an element of the accumulator (or of the map's own array when the sum
    # has one block): index ``ma``, or 0 for a map of one block
    assert products and all(re.search(r", (acc|map_ma)\w*\[(ma|0)\b[^\]]*\]\)$", p)
                            for p in products), products
    # no product block copied or added in element by element
    assert not any(re.match(r"(acc|map_ma)\w*\[.*\] \+?= dot", line) for line in lines)
    rng = np.random.default_rng(m + k + n)
    x = (rng.standard_normal((m, k)) * 1e3).astype(np.float32)
    w = (rng.standard_normal((k, n)) * 1e3).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64)
    got = compiled(x=x, W=w)["y"]
    scale = np.abs(x).max() * np.abs(w).max() * k
    assert np.abs(got - want).max() <= 2e-6 * scale


def test_a_block_every_element_of_a_map_multiplies_by_is_packed_once():
    # W's block depends on k and n, which the kernel and the sum loop over; the map
    # over ma multiplies three row blocks by it: packed once per call, not per element.
    compiled = _compiled(150, 100, 130)
    source = compiled.run.source
    assert "packed_input_(W, False" in source
    assert any(line.startswith("gemm_packed_(x_blk, W_packed,")
               for line in _kernel_lines(source))
    # one row block: no element shares the block, so nothing is packed ahead
    single = _compiled(60, 100, 130).run.source
    assert "packed_input_(" not in single
    rng = np.random.default_rng(3)
    x = rng.standard_normal((150, 100)).astype(np.float32)
    w = rng.standard_normal((100, 130)).astype(np.float32)
    got = compiled(x=x, W=w)["y"]
    want = x.astype(np.float64) @ w.astype(np.float64)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


# x · (s ⊙ B)ᵀ with a computed right operand: each row of B scaled by s.
SCALED_KT = """\
program scaled_kt
dim M = 150 block 64
dim N = 130 block 64
dim D = 100 block 64
input x[M, D]
input B[N, D]
input s[N]
output y[M, N]
kernel y for m in M, n in N:
  y[m, n] = sum(d in D: dot(x[m, d], transpose(rowscale(s[n], B[n, d]))))
"""


def test_a_computed_right_operand_that_is_transposed_is_computed_in_its_own_layout():
    """The scaled rows of B are computed row by row (B read along its rows) and the
    product takes the block transposed (``.T``: a view), instead of a loop nest that
    reads B down its columns element by element."""
    compiled = bb.compile(bb.parse_program(SCALED_KT), backend=backend, tune="off")
    lines = _kernel_lines(compiled.run.source)
    products = [line for line in lines if line.startswith("gemm")]
    assert products and all(re.search(r", \w+\.T, ", p) for p in products), products
    # no element of a transposed block is computed: B is read along its rows, as
    # B[n0 + r, d0 + c] or through the view of its row r, B[n0 + r, d0:]
    reads = [line for line in lines if "B[" in line and "transpose(" not in line]
    assert reads and all(re.search(r"B\[n0 \+ r, d0( \+ c\]|:\])", line) for line in reads), reads
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((150, 100)) * 1e3).astype(np.float32)
    b = rng.standard_normal((130, 100)).astype(np.float32)
    s = (rng.standard_normal(130) * 1e2).astype(np.float32)
    want = x.astype(np.float64) @ (s[:, None].astype(np.float64) * b).T
    got = compiled(x=x, B=b, s=s)["y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("n_block", [1000, 128])
def test_a_stored_softmax_reads_its_max_from_the_online_softmax_beside_it(n_block):
    """softmax(x) fuses into an online row sum beside the row max its output shifts by:
    both are the same fold over the same blocks, so the max is read off the online
    softmax's running max (one pass over x less), bit for bit the same values; rows of
    -inf and huge logits included."""
    from blockbuster.frontend.builder import GraphBuilder
    g = GraphBuilder("sm")
    g.dim("M", 150, 64), g.dim("N", 1000, n_block)
    program = bb.fuse(g.build(g.softmax(g.input("X", "M", "N"), name="Y")),
                      hardware=backend.hardware).program
    compiled = bb.compile(program, backend=backend, tune="off")
    lines = _kernel_lines(compiled.run.source)
    assert sum("maximum_(" in line for line in lines) == 1, lines      # one max fold
    assert any("the running max of the online softmax" in line
               for line in compiled.run.source.splitlines())
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((150, 1000)) * 1e4).astype(np.float32)
    x[3] = -np.inf                                   # a row of -inf: NaN, as NumPy's
    x[4, 7] = -np.inf
    got = compiled(X=x)["Y"]
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x64 - x64.max(1, keepdims=True))
        want = e / e.sum(1, keepdims=True)
    assert np.isnan(got[3]).all() and np.isnan(want[3]).all()
    ok = ~np.isnan(want[:, 0])
    assert np.abs(got[ok] - want[ok]).max() <= 1e-6
