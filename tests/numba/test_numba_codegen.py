"""The generated source: derived from the IR alone, deterministic, and shaped like a
kernel a person would write (one function per kernel, prange over the parallel loop,
CSE, loop-invariant hoisting, no loop over a single block, comments naming kernels
and stores)."""

import ast

import numpy as np
import re
from pathlib import Path

import pytest

import blockbuster_numba
from blockbuster.frontend.workloads import workload
from blockbuster.cost import DEFAULT_HARDWARE
from blockbuster.rewrite import engine as _engine
from blockbuster_numba import generate_source

from helpers_numba import program


def fuse(program, *args, **kwargs):
    """The engine, for the default hardware (the reference backend's)."""
    return _engine.fuse(program, *args, hardware=DEFAULT_HARDWARE, **kwargs)

PLUGIN = Path(blockbuster_numba.__file__).parent


def fused(name, **sizes):
    return fuse(workload(name, **sizes)).program


def kernel_body(source: str, name: str) -> str:
    start = source.index(f"def kernel_{name}(")
    end = source.find("\n\n\n", start)
    return source[start:end]


def _code_words(path: Path) -> set[str]:
    """Identifiers and string constants of a module, docstrings excluded."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    words = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words.add(node.id)
        elif isinstance(node, ast.Attribute):
            words.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            words.add(node.value)
    return {w.lower() for w in words}


def test_plugin_has_no_per_workload_code():
    words = " ".join(w for path in PLUGIN.rglob("*.py") for w in _code_words(path))
    assert "kernel_" in words and "prange" in words       # the scan sees the code
    for word in ("attention", "layernorm", "rmsnorm", "swiglu", "llama", "flash"):
        assert word not in words, word


def test_source_is_deterministic_and_valid_python():
    p = fused("attention", N=200)
    a, b = generate_source(p, threads=2), generate_source(p, threads=2)
    assert a == b
    compile(a, "<generated>", "exec")


def test_fused_attention_is_one_flash_attention_kernel():
    p = fused("attention", N=1024)
    src = generate_source(p, threads=2)
    assert src.count("@njit(\"void(") == 1
    body = kernel_body(src, "O")
    assert body.count("prange(") == 1
    # Q·Kᵀ occurs three times in the IR (hash-consed into one node): one micro-kernel
    # call for it (stored into a block never zeroed), one for P·V, which is multiplied
    # straight into its rescaled accumulator. Every query block multiplies by the same
    # key and value blocks: Kᵀ and V are packed once per call by the module, and the
    # calls read their blocks (first row, first column) from the packed copies.
    assert body.count("gemm_packed_set_(") == 1 and body.count(" gemm_packed_(") == 1
    assert "gemm_set_(" not in body.replace("gemm_packed_set_(", "")
    assert re.search(r"dot = np.empty\(\(\d+, \d+\), DT\)\n\s+"
                     r"gemm_packed_set_\(Q_blk, K_packedT, 64, 1024, 0, s0, dot\)", body)
    assert "K_packedT = packed_input_(K, True, PACKED, " in src
    assert "np.dot(" not in body and "ascontiguousarray" not in body
    # The running max and the rescaling of the earlier sums.
    assert re.search(r"alpha\[r\] = exp_\(m_run\[r\] - sn\)", body)
    assert re.search(r"(acc_\d+)\[r, c\] \*= alpha_r\n\s+"
                     r"gemm_packed_\(exp, V_packed, 1024, 64, s0, 0, \1\)", body)
    # Loop-invariant hoisting: the query block is sliced once per query block, before
    # the loop over key blocks; D has a single block, so there is no loop over it.
    assert body.index("Q_blk = Q[") < body.index("for s in range(")
    assert "for d" not in body
    # Comments name the kernel, the store and the reduction.
    assert "# kernel O: writes O" in src
    assert "# store O[n, d]" in body
    assert "# online_softmax(s in S)" in body


def test_ragged_extents_are_named_per_block():
    src = generate_source(fused("attention", N=200), threads=2)
    assert "n_len = 64 if n < 3 else 8" in src
    assert "s_len = 64 if s < 3 else 8" in src


def test_single_block_reduction_is_no_loop_and_hoists():
    p = program("""
        program one
        dim M = 1024 block 64
        dim K = 32 block 32
        dim N = 128 block 64
        input A[M, K]
        input B[K, N]
        output C[M, N]
        kernel mm for i in M, j in N:
          C[i, j] = sum(k in K: dot(A[i, k], B[k, j]))
        """)
    body = kernel_body(generate_source(p, threads=2, parallel=True), "mm")
    assert "for k" not in body
    # A[i, 0] does not depend on j: sliced in the i loop, outside the j loop.
    assert body.index("A_blk = A[") < body.index("for j in range(")


def test_elementwise_chains_are_one_loop_without_temporaries():
    p = program("""
        program ew
        dim M = 8 block 4
        dim N = 8 block 4
        input X[M, N]
        input R[M]
        output Y[M, N]
        kernel k for i in M, j in N:
          Y[i, j] = exp(rowshift(neg(R[i]), mul(X[i, j], 0.5)))
        """)
    body = kernel_body(generate_source(p, threads=2), "k")
    # neg(R[i]) does not depend on j: computed once per row block, before the j loop;
    # the 2-D chain is one loop nest writing the output, with no temporary block.
    assert body.index("R_v = R[i0:]") < body.index("neg[r] = (-R_v[r])") \
        < body.index("for j in range(")
    assert "np.empty((4, 4)" not in body
    assert body.count("for c in range(") == 1
    # Read and written in place, through views of their rows from the block's first
    # column (an offset index in the inner loop does not vectorise), not views of the
    # blocks (each costs compile time).
    assert "X_r = X[i0 + r, j0:]" in body and "Y_r = Y[i0 + r, j0:]" in body
    assert re.search(r"Y_r\[c\] = exp_\(\(\(X_r\[c\] \* C0\) \+ neg_r\)\)", body)
    assert "_blk" not in body and "_out" not in body


def test_shared_value_is_computed_once():
    p = program("""
        program cse
        dim M = 8 block 4
        dim N = 8 block 4
        input X[M, N]
        output A[M, N]
        output B[M, N]
        kernel k for i in M, j in N:
          A[i, j] = mul(exp(X[i, j]), exp(X[i, j]))
          B[i, j] = add(exp(X[i, j]), 1.0)
        """)
    body = kernel_body(generate_source(p, threads=2), "k")
    assert body.count("exp_(") == 1


def test_unknown_operator_is_a_backend_error():
    from blockbuster.errors import BackendError
    from blockbuster_numba.codegen import KernelGenerator, ModuleGenerator
    from blockbuster.ir.expr import Expr
    p = program("""
        program k
        dim M = 4 block 2
        input X[M]
        output Y[M]
        kernel k for i in M:
          Y[i] = neg(X[i])
        """)
    gen = KernelGenerator(ModuleGenerator(p), p.kernels[0])
    with pytest.raises(BackendError, match="no code for operator 'frobnicate'"):
        from blockbuster_numba.codegen import Frame
        gen._emit(Expr("frobnicate", (Expr("const", (), 1.0),)), Frame(None))


def test_compiled_program_carries_source_and_timings(numba_backend):
    p = fused("attention", N=64)
    compiled = numba_backend.compile(p)
    assert compiled.source == generate_source(p)
    assert Path(compiled.source_path).read_text() == compiled.source
    assert compiled.compile_seconds >= compiled.jit_seconds >= 0
    assert compiled.cache_hits + compiled.cache_misses == len(p.kernels)


def test_triangular_work_is_split_evenly_over_the_threads():
    # Causal attention: query block i reads key blocks 0..i, so its work grows with i.
    # Each thread runs one contiguous range of the parallel loop (as a prange would);
    # the kernel visits the query blocks as 0, n-1, 1, n-2, ... so that every range
    # holds equal work.
    from blockbuster.frontend.builder import GraphBuilder
    g = GraphBuilder("causal")
    g.dim("T", 768, 64)           # 12 blocks: 3 pairs per thread
    g.dim("HD", 16, 16)
    g.dim("KD", 16, 16)
    g.point_dim("H", 1)
    g.point_dim("G", 1)
    q, k, v = g.input("Q", "H", "T", "HD"), g.input("K", "G", "T", "HD"), g.input("V", "T", "KD")
    src = generate_source(fuse(g.build(g.causal_attention(q, k, v, 0.25, name="O"))).program,
                          threads=2)
    m = re.search(r"for (\w+) in (?:range\(lo, hi\):  # )?prange\((\d+)\).*balanced\n"
                  r"\s+(\w+) = (.+)\n", src)
    assert m, src
    it, n, order = m.group(1), int(m.group(2)), m.group(4)
    visited = [eval(order, {it: i}) for i in range(n)]
    assert sorted(visited) == list(range(n))
    work = [i + 1 for i in visited]                  # key blocks read by block i
    halves = sum(work[:n // 2]), sum(work[n // 2:])
    assert abs(halves[0] - halves[1]) <= 1, halves
    # A kernel whose iterations are alike keeps the plain order.
    assert "balanced" not in generate_source(fused("attention", N=640), threads=2)


def test_a_count_of_ones_is_the_extent_not_a_loop(numba_backend):
    # sum(rowsum(ones(x))) counts the elements of a row (the pivot's mean divides by
    # it): the extent of each block, ragged last block included, with no loop adding
    # ones. The mean is checked against NumPy on a row mean of 1e4.
    p = program("""
        program rowmean
        dim M = 37 block 16
        dim K = 70 block 32
        input X[M, K]
        output Y[M]
        kernel Y for m in M:
          Y[m] = mul(sum(k in K: rowsum(X[m, k])), recip(sum(k in K: rowsum(ones(X[m, k])))))
        """)
    body = kernel_body(generate_source(p, threads=2), "Y")
    assert "ONE)" not in body.replace("(ONE /", "")       # no running sum of ones
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((37, 70)) + 1e4).astype(np.float32)
    got = numba_backend.compile(p)(X=x)["Y"]
    np.testing.assert_allclose(got, x.astype(np.float64).mean(1), rtol=1e-6)


def test_views_read_in_place_are_dropped_and_views_passed_on_are_kept():
    from blockbuster_numba.codegen.values import drop_unused
    lines = ["for i in range(3):",
             "    X_blk = X[i0:i0 + 4]",            # only its elements were read: unused
             "    A_blk = A[i0:i0 + 4]",            # a gemm operand: kept
             "    # X_blk is named in a comment only",
             "    gemm_(A_blk, B, C)",
             "    Y[i0 + 0] = X[i0 + 0]"]
    kept = drop_unused(lines, {"X_blk", "A_blk"})
    assert kept == [lines[0], lines[2], lines[3], lines[4], lines[5]]
    # A name that is not removable stays even when nothing reads it.
    assert drop_unused(lines, {"A_blk"}) == lines
    # A loop left without a body gets one.
    assert drop_unused(["for j in range(2):  # j in N", "    V = X[j:j + 1]", "Y[0] = X[0]"],
                       {"V"}) == ["for j in range(2):  # j in N", "    pass", "Y[0] = X[0]"]
