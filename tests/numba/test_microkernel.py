"""The block matmul of generated kernels (``gemm_``: C += A·B, ``gemm_set_``: C = A·B, by the register-tiled
micro-kernel), against float64 NumPy on ragged shapes, views and large magnitudes."""

from __future__ import annotations

import numpy as np
import pytest

from blockbuster_numba import microkernel as mk
from blockbuster_numba.gemm_call import gemm


def reference(a, b, c):
    return c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)


def check(a, b, c):
    """Both modes: C += A·B into ``c``, and C = A·B into an array of garbage."""
    want = reference(a, b, c)
    gemm(a, b, c, 0)
    scale = np.abs(a).max() * np.abs(b).max() * a.shape[1] + np.abs(want).max()
    eps = 2e-6 if c.dtype == np.float32 else 4e-15
    assert np.abs(c - want).max() <= eps * scale
    fresh = np.full(c.shape, np.nan, c.dtype)            # never read when overwritten
    gemm(a, b, fresh, 1)
    want = reference(a, b, np.zeros(c.shape, c.dtype))
    assert np.abs(fresh - want).max() <= eps * scale


#: Columns of one packed B panel at full k-depth (the driver's panel width).
PANEL = max(mk.NR, mk.PANEL_BYTES // (4 * mk.KC) // mk.NR * mk.NR)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (mk.MR + 1, 7, mk.NR + 3), (64, 64, 64),
                                   (2 * mk.MR - 1, mk.KC + 5, PANEL + mk.NR + 1),
                                   (mk.MR + 2, 40, 3 * PANEL + 5),
                                   (9 * mk.MR + 1, mk.KC + 3, PANEL + mk.NR + 1)])
def test_contiguous_ragged_shapes(m, k, n):
    rng = np.random.default_rng(m * 1000 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)     # accumulates into C
    check(a, b, c)


@pytest.mark.parametrize("m,k,n", [(mk.MR + 1, 7, mk.NR + 3), (2 * mk.MR - 1, mk.KC + 5, 70)])
def test_float64_blocks_on_the_same_micro_kernel(m, k, n):
    # Float64 runs on the micro-kernel too (half the lanes, the tile's rows in two
    # passes), to float64's precision: no BLAS, so no SciPy (Numba's BLAS).
    rng = np.random.default_rng(7 * m + n)
    a = rng.standard_normal((m + 3, k)) * 1e3
    b = rng.standard_normal((n, k)) * 1e3
    check(a[2:m + 2], b.T, rng.standard_normal((m, n)))   # a row slice, a transposed B


def test_transposed_and_sliced_views_large_magnitudes():
    # A column slice (a block of a wider array) and a transposed block: packed from
    # their strides, no copy first; values up to 1e4.
    rng = np.random.default_rng(3)
    wide = (rng.standard_normal((37, 90)) * 1e4).astype(np.float32)
    kt = (rng.standard_normal((29, 41)) * 1e2).astype(np.float32)
    c = np.zeros((37, 29), np.float32)
    check(wide[:, 3:44], kt.T, c)


@pytest.mark.parametrize("layout", ["row slice", "transposed", "broadcast rows"])
def test_a_read_where_it_lies_at_any_strides(layout):
    # A is never packed: a row slice at an offset in a wider array, a transposed block
    # and rows of stride 0, over several k-panels, all match.
    rng = np.random.default_rng(11)
    m, k, n = 3 * mk.MR + 2, mk.KC + 9, mk.NR + 5
    if layout == "row slice":
        a = (rng.standard_normal((m + 4, k + 13)) * 1e3).astype(np.float32)[2:m + 2, 7:k + 7]
    elif layout == "transposed":
        a = (rng.standard_normal((k, m)) * 1e3).astype(np.float32).T
    else:
        a = np.broadcast_to((rng.standard_normal(k) * 1e3).astype(np.float32), (m, k))
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    check(a, b, c)


@pytest.mark.parametrize("layout", ["column slice", "transposed", "every other column"])
def test_b_packed_from_any_strides(layout):
    # Full strips of a unit-column-stride B are copied whole, the rest element by
    # element (a transposed B down its columns); the ragged last strip is zero-padded.
    rng = np.random.default_rng(12)
    m, k, n = mk.MR + 3, mk.KC + 11, 2 * mk.NR + 7
    if layout == "column slice":
        b = (rng.standard_normal((k, n + 50)) * 1e3).astype(np.float32)[:, 20:n + 20]
    elif layout == "transposed":
        b = (rng.standard_normal((n, k)) * 1e3).astype(np.float32).T
    else:
        b = (rng.standard_normal((k, 2 * n)) * 1e3).astype(np.float32)[:, ::2]
    a = rng.standard_normal((m, k)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    check(a, b, c)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ragged_corner_writes_nothing_outside_c(dtype):
    # The last row tile and column strip are ragged: their stores are masked. C is a
    # window of a larger array whose frame must keep its sentinel values.
    rng = np.random.default_rng(5)
    m, k, n = 2 * mk.MR + 3, 19, mk.NR + 5
    frame = np.full((m + 4, n + 2 * mk.NR), -7.0, dtype)
    c = frame[2:m + 2, mk.NR:mk.NR + n]
    c[:] = rng.standard_normal((m, n))
    a = rng.standard_normal((m, k)).astype(dtype) * 1e3
    b = rng.standard_normal((k, n)).astype(dtype)
    check(a, b, c)
    outside = np.ones(frame.shape, bool)
    outside[2:m + 2, mk.NR:mk.NR + n] = False
    assert (frame[outside] == -7.0).all()


def test_empty_inner_dimension_leaves_c():
    a = np.zeros((5, 0), np.float32)
    b = np.zeros((0, 9), np.float32)
    c = np.full((5, 9), 2.5, np.float32)
    gemm(a, b, c, 0)
    assert (c == 2.5).all()
    gemm(a, b, c, 1)                 # C = A·B of an empty sum: zeros
    assert (c == 0).all()


def test_tile_shape_follows_the_instruction_set():
    assert mk.tile_shape({"avx512f", "avx2", "avx"}) == (16, 8, 32)
    assert mk.tile_shape({"avx2", "avx"}) == (8, 6, 16)
    assert mk.tile_shape(set()) == (4, 4, 8)
    vw, mr, nr = mk.VW, mk.MR, mk.NR
    assert nr % vw == 0 and mr * nr // vw + nr // vw + 1 <= (32 if vw == 16 else 16)


def test_tuned_blocks_are_whole_register_tiles_of_columns():
    # The tuner's candidates for this backend are multiples of the micro-kernel's
    # tile width, so no block matmul has a ragged last strip (computed whole on zero
    # padding); a whole dimension smaller than that stays whole.
    from blockbuster.tuning.candidates import dim_choices, wide_assignments
    from blockbuster.tuning.constraints import constraints_of
    from blockbuster_numba import backend
    from blockbuster_numba.microkernel import NR
    c = constraints_of(backend)
    assert c.multiple % NR == 0
    for size in (2816, 3000, 1000, 130):
        for b in dim_choices(size, 2, c):
            assert b == size or b % NR == 0
    narrow = NR * 5 // 8                 # narrower than one strip: stays whole
    assert dim_choices(narrow, 2, c) == (narrow,)
    assert all(b % NR == 0 for w in wide_assignments({"H": 2816}, 2, c) for b in w.values())


@pytest.mark.parametrize("n", [1, 2, mk.NARROW])
@pytest.mark.parametrize("layout", ["rows", "columns", "strided"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_narrow_products_skip_the_tile(n, layout, dtype):
    # B of at most NARROW columns (a matrix-vector product, a small head): a dot
    # product per element of C where A's rows are contiguous, a scaled column of A
    # per step of k where its columns are; A at other strides takes the tile. Ragged
    # sizes, values up to 1e3, both modes.
    rng = np.random.default_rng(n * 7 + len(layout))
    m, k = 2 * mk.MR + 3, mk.KC + 11
    if layout == "rows":
        a = (rng.standard_normal((m, k + 5)) * 1e3).astype(dtype)[:, 2:k + 2]
    elif layout == "columns":
        a = (rng.standard_normal((k, m)) * 1e3).astype(dtype).T
    else:
        a = (rng.standard_normal((2 * m, 2 * k)) * 1e3).astype(dtype)[::2, ::2]
    b = (rng.standard_normal((k, n)) * 1e3).astype(dtype)
    check(a, b, rng.standard_normal((m, n)).astype(dtype))
    check(a, np.asfortranarray(b), np.zeros((m, n), dtype))   # B's columns contiguous
