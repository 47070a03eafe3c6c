"""Right operands packed once per call (``blockbuster_numba.prepack``): the packed
driver against float64 NumPy on blocks at any row and at strip-aligned columns of a
packed matrix; the module packing an input once per call, keeping a bound weight's
packed copy between calls and never a caller's array."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import blockbuster as bb
from blockbuster_numba import backend, prepack
from blockbuster_numba import microkernel as mk
from blockbuster_numba.gemm_call import call_gemm_packed


@njit
def _gemm_packed(a, pk, kfull, nfull, r0, c0, c, overwrite):
    call_gemm_packed(a, pk, kfull, nfull, r0, c0, c, overwrite)


CASES = [  # (K, N, r0, k, strip of c0, n, m): rows anywhere, panels straddled, ragged
    (700, 333, 0, 700, 0, 333, 37),
    (700, 333, 130, 400, 2, 250, 9),                   # starts inside a panel, ends in another
    (mk.KC + 1, 2 * mk.NR + 1, mk.KC, 1, 1, mk.NR + 1, mk.MR),   # the one-row last panel
    (3 * mk.KC + 7, 5 * mk.NR, mk.KC - 3, 2 * mk.KC + 9, 4, mk.NR, 2 * mk.MR + 3),
    (700, 640, 130, 400, 1, 300, 301),                 # several row blocks of A, two panels
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("K,N,r0,k,strip,n,m", CASES)
def test_packed_driver_reads_any_block_of_the_packed_matrix(dtype, transposed, K, N, r0, k,
                                                            strip, n, m):
    rng = np.random.default_rng(K + N + r0)
    w = (rng.standard_normal((N, K) if transposed else (K, N)) * 1e3).astype(dtype)
    full = w.T if transposed else w                  # the K x N matrix multiplied by
    c0 = strip * mk.NR
    a = (rng.standard_normal((m, k)) * 1e3).astype(dtype)
    pk = prepack.packed_input(w, transposed, {}, "w")
    want = a.astype(np.float64) @ full[r0:r0 + k, c0:c0 + n].astype(np.float64)
    scale = np.abs(a).max() * np.abs(w).max() * k
    eps = 2e-6 if dtype == np.float32 else 4e-15
    fresh = np.full((m, n), np.nan, dtype)           # overwritten: never read
    _gemm_packed(a, pk, K, N, r0, c0, fresh, 1)
    assert np.abs(fresh - want).max() <= eps * scale
    acc = np.full((m, n), 5.0, dtype)                # accumulated: C += A·B
    _gemm_packed(a, pk, K, N, r0, c0, acc, 0)
    assert np.abs(acc - 5.0 - want).max() <= eps * scale


@pytest.mark.parametrize("transposed", [False, True])
def test_threads_packing_their_share_of_the_strips_lay_out_the_same_matrix(transposed):
    # Big enough to be packed by several threads; ragged in both directions.
    k, n = 2 * mk.KC + 37, 9 * mk.NR + 5
    assert k * n >= prepack.PARALLEL_PACK
    w = np.random.default_rng(4).standard_normal((n, k) if transposed else (k, n))
    w = w.astype(np.float32)
    alone = prepack.packed_input(w, transposed, {}, "w", threads=1)
    shared = prepack.packed_input(w, transposed, {}, "w", threads=3)
    np.testing.assert_array_equal(alone, shared)
    # ... and it is the matrix: a product read through it is w's product.
    a = np.random.default_rng(5).standard_normal((7, k)).astype(np.float32)
    c = np.empty((7, n), np.float32)
    _gemm_packed(a, shared, k, n, 0, 0, c, 1)
    want = a.astype(np.float64) @ (w.T if transposed else w).astype(np.float64)
    assert np.abs(c - want).max() <= 2e-6 * np.abs(a).max() * np.abs(w).max() * k


def test_an_empty_sum_overwrites_with_zeros_and_adds_nothing():
    w = np.ones((300, 70), np.float32)
    pk = prepack.packed_input(w, False, {}, "w")
    c = np.full((5, 40), np.nan, np.float32)
    _gemm_packed(np.ones((5, 0), np.float32), pk, 300, 70, 100, mk.NR, c, 1)
    assert (c == 0).all()
    c[:] = 3.0
    _gemm_packed(np.ones((5, 0), np.float32), pk, 300, 70, 100, mk.NR, c, 0)
    assert (c == 3.0).all()


def _ffn(rows=150, d=70, h=100):
    """y = relu(x·W1)·W2, both weights multiplied by in every row block: W1 from
    column blocks of 64 (whole strips), W2 from row blocks."""
    from blockbuster.frontend.builder import GraphBuilder
    g = GraphBuilder("ffn")
    g.dim("M", rows, 32), g.dim("D", d, 64), g.dim("H", h, 64)
    x = g.input("x", "M", "D")
    w1 = g.weight("W1", "D", "H")
    w2 = g.weight("W2", "H", "D")
    return g.build(g.matmul(g.relu(g.matmul(x, w1)), w2, name="y"))


def _reference(x, w1, w2):
    h = np.maximum(x.astype(np.float64) @ w1, 0.0)
    return h @ w2


def test_a_weight_multiplied_by_in_every_row_block_is_packed_once_per_call():
    program = bb.fuse(_ffn(), hardware=backend.hardware).program
    compiled = bb.compile(program, backend=backend, tune="off")
    source = compiled.run.source
    assert "packed_input_(W1, False" in source and "packed_input_(W2, False" in source
    assert "gemm_packed" in source
    run = source[source.index("def run("):]
    for weight in ("W1", "W2"):      # packed before the kernel reading it, freed after
        packed = run.index(f"{weight}_packed = packed_input_(")
        call = run.index(f"{weight}_packed", packed + 1)         # the kernel's argument
        assert packed < call < run.index("del ", packed)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((150, 70)) * 100).astype(np.float32)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((70, 100), (100, 70)))
    want = _reference(x, w1, w2)
    got = compiled(x=x, W1=w1, W2=w2)["y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    # The caller's arrays are packed again on every call: changed in place, they count.
    w1 *= -1.0
    got = compiled(x=x, W1=w1, W2=w2)["y"]
    want = _reference(x, w1, w2)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_a_bound_weight_is_packed_on_the_first_call_only(monkeypatch):
    program = bb.fuse(_ffn(), hardware=backend.hardware).program
    compiled = bb.compile(program, backend=backend, tune="off")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((150, 70)).astype(np.float32)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((70, 100), (100, 70)))
    packed = []
    real = prepack.packer

    def counting(dtype):
        fn = real(dtype)
        return lambda b, out, lo, hi: (packed.append(b.shape), fn(b, out, lo, hi))
    monkeypatch.setattr(prepack, "packer", counting)
    bound = compiled.bind(W1=w1, W2=w2)
    first = bound(x=x)["y"]
    n = len(packed)
    assert n >= 2
    second = bound(x=x)["y"]
    assert len(packed) == n                          # the packed copies were kept
    np.testing.assert_array_equal(first, second)
    want = _reference(x, w1, w2)
    assert np.abs(second - want).max() <= 1e-5 * np.abs(want).max()
    # Bound again with other weights: packed again, and the results follow them.
    rebound = compiled.bind(W1=-w1, W2=w2)
    got = rebound(x=x)["y"]
    assert len(packed) > n
    want = _reference(x, -w1, w2)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    # ... while the first binding still has its own
    assert np.abs(bound(x=x)["y"] - first).max() == 0


def test_columns_starting_inside_a_strip_are_packed_by_the_driver_as_before():
    from blockbuster.frontend.builder import GraphBuilder
    width = mk.NR + mk.NR // 2                       # a block of 1.5 strips (48 for AVX-512)
    g = GraphBuilder("mm")
    g.dim("M", 100, 32), g.dim("K", 50, 64), g.dim("N", 130, width)
    y = g.matmul(g.input("x", "M", "K"), g.weight("W", "K", "N"), name="y")
    compiled = bb.compile(g.build(y), backend=backend, tune="off")
    assert "packed_input_(W" not in compiled.run.source
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((100, 50)), rng.standard_normal((50, 130))
    got = compiled(x=x.astype(np.float32), W=w.astype(np.float32))["y"]
    assert np.abs(got - x @ w).max() <= 1e-5 * np.abs(x @ w).max()


@pytest.mark.parametrize("transposed", [False, True])
def test_an_array_an_earlier_kernel_computed_is_packed_once_after_it(transposed):
    """t = a·b (an intermediate), then y = x·t (or x·tᵀ) in every one of ten row
    blocks: t is packed once, after the kernel writing it, and not by each block."""
    from blockbuster.frontend.builder import GraphBuilder
    g = GraphBuilder("chain")
    g.dim("M", 300, 32), g.dim("K", 70, 64), g.dim("N", 100, 64), g.dim("P", 45, 64)
    a, b = g.input("a", "K", "P"), g.input("b", "P", "N")
    t = g.matmul(a, b, name="t")                                     # t[K, N]
    x = g.input("x", "M", "N" if transposed else "K")
    y = g.matmul(x, t, transpose_b=transposed, name="y")
    compiled = bb.compile(g.build(y), backend=backend, tune="off")    # unfused: two kernels
    run = compiled.run.source[compiled.run.source.index("def run("):]
    packing = f"t_packed{'T' if transposed else ''} = packed_input_(t, {transposed}"
    assert run.count("packed_input_(t,") == 1
    assert run.index("(a, b, t") < run.index(packing)    # after t's kernel, before y's
    rng = np.random.default_rng(3)
    arrays = {"a": rng.standard_normal((70, 45)) * 1e3, "b": rng.standard_normal((45, 100)),
              "x": rng.standard_normal((300, 100 if transposed else 70))}
    tt = arrays["a"] @ arrays["b"]
    want = arrays["x"] @ (tt.T if transposed else tt)
    got = compiled(**{n: v.astype(np.float32) for n, v in arrays.items()})["y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.mark.parametrize("k,packed", [(600, True), (100, False)])
def test_a_large_intermediate_read_by_two_row_blocks_is_packed_by_all_threads(k, packed):
    """t = a·b (k x 500) read by the two row blocks of y = x·t on two threads: packed
    first when it is large enough for every thread to pack its share of it; a small
    one is packed by one thread, worth it only for more products than threads."""
    from blockbuster.frontend.builder import GraphBuilder
    g = GraphBuilder("chain2")
    g.dim("M", 90, 64), g.dim("K", k, k), g.dim("N", 500, 500), g.dim("P", 30, 30)
    t = g.matmul(g.input("a", "K", "P"), g.input("b", "P", "N"), name="t")
    y = g.matmul(g.input("x", "M", "K"), t, name="y")
    assert (k * 500 >= prepack.PARALLEL_PACK) == packed
    compiled = bb.compile(g.build(y), backend=backend, tune="off", threads=2)
    assert ("packed_input_(t," in compiled.run.source) == packed
    rng = np.random.default_rng(6)
    arrays = {"a": rng.standard_normal((k, 30)) * 1e3, "b": rng.standard_normal((30, 500)),
              "x": rng.standard_normal((90, k))}
    want = arrays["x"] @ (arrays["a"] @ arrays["b"])
    got = compiled(**{n: v.astype(np.float32) for n, v in arrays.items()})["y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def _small_batch(n_out: int):
    """x[4, 700] · W[700, n_out] · V[n_out, 300] with x one row block: each product
    runs once per call (one parallel instance)."""
    from blockbuster.frontend.builder import GraphBuilder
    g = GraphBuilder("small_batch")
    g.dim("M", 4), g.dim("E", 700, 700), g.dim("H", n_out, n_out), g.dim("F", 300, 300)
    h = g.matmul(g.input("x", "M", "E"), g.weight("W", "E", "H"))
    return g.build(g.matmul(h, g.input("V", "H", "F"), name="y"))


def test_a_weight_multiplied_once_per_call_is_packed_once_per_binding():
    # One product per call: an input is packed by the driver as it goes (a copy up
    # front would cost as much); a weight, once per binding, so a bound one is never
    # packed in a call. A product of at most NARROW columns is not packed at all (the
    # driver's narrow path reads B as it lies).
    for n_out, packed_w in ((500, True), (mk.NARROW, False)):
        program = bb.fuse(_small_batch(n_out), hardware=backend.hardware).program
        compiled = bb.compile(program, backend=backend, tune="off")
        source = compiled.run.source
        assert ("packed_input_(W, False" in source) == packed_w, n_out
        assert "packed_input_(V" not in source
        rng = np.random.default_rng(n_out)
        x = (rng.standard_normal((4, 700)) * 1e3).astype(np.float32)
        w = rng.standard_normal((700, n_out)).astype(np.float32)
        v = rng.standard_normal((n_out, 300)).astype(np.float32)
        got = compiled.bind(W=w)(x=x, V=v)["y"]
        want = x.astype(np.float64) @ w @ v
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
