"""The kernel cache survives damage and keeps programs apart: a damaged Numba entry or
generated file is replaced by a fresh compile (never an error), a different source is
a different entry, and kernels compiled by worker processes are the entries the
import loads."""

import numpy as np
import pytest

import blockbuster as bb
from blockbuster_numba import compiler
from blockbuster_numba.compiler import compile_module, numba_cache_dir
from blockbuster_numba import parallel_compile

TWO = """
program two
dim M = {m} block 16
dim K = 50 block 16
input X[M, K]
array T[M, K]
output Y[M]
kernel t for i in M, k in K:
  T[i, k] = exp(X[i, k])
kernel y for i in M:
  Y[i] = sum(k in K: rowsum(T[i, k]))
"""


@pytest.fixture
def fresh(monkeypatch):
    """Forget the modules imported in this process: every compile goes to the disk."""
    monkeypatch.setattr(compiler, "_MODULES", {})
    return lambda: monkeypatch.setattr(compiler, "_MODULES", {})


def _run(module, m):
    x = np.random.default_rng(m).uniform(-80.0, 80.0, size=(m, 50)).astype(np.float32)
    want = np.exp(x.astype(np.float64)).sum(axis=1)          # Y[i] = sum_k exp(X[i, k])
    got = module({"X": x})["Y"]
    np.testing.assert_allclose(got, want, rtol=2e-5)
    return got


def test_a_damaged_numba_entry_is_compiled_again(tmp_path, fresh):
    program = bb.parse_program(TWO.format(m=40))
    first = compile_module(program, threads=1, cache_dir=tmp_path)
    assert first.cache_misses == 2 and len(first.cache_files()) >= 4
    expected = _run(first, 40)
    for entry in first.cache_files():           # index and machine code both garbled
        entry.write_bytes(b"\x80not a pickle" * 7)
    fresh()
    again = compile_module(program, threads=1, cache_dir=tmp_path)
    assert again.cache_misses == 2 and again.cache_hits == 0
    np.testing.assert_array_equal(_run(again, 40), expected)
    fresh()
    third = compile_module(program, threads=1, cache_dir=tmp_path)
    assert third.cache_hits == 2 and third.cache_misses == 0   # the rewritten entries load


def test_a_damaged_generated_file_is_rewritten(tmp_path, fresh):
    program = bb.parse_program(TWO.format(m=40))
    first = compile_module(program, threads=1, cache_dir=tmp_path)
    first.path.write_text("def broken(:\n")
    fresh()
    again = compile_module(program, threads=1, cache_dir=tmp_path)
    assert again.path == first.path and again.path.read_text() == again.source
    _run(again, 40)


def test_a_different_source_is_a_different_entry(tmp_path, fresh):
    a = compile_module(bb.parse_program(TWO.format(m=40)), threads=1, cache_dir=tmp_path)
    b = compile_module(bb.parse_program(TWO.format(m=37)), threads=1, cache_dir=tmp_path)
    assert a.source != b.source and a.key != b.key and a.path != b.path
    assert not set(a.cache_files()) & set(b.cache_files())
    _run(a, 40), _run(b, 37)
    fresh()
    again = compile_module(bb.parse_program(TWO.format(m=40)), threads=1, cache_dir=tmp_path)
    assert again.cache_hits == 2       # the other program did not displace it


def test_kernels_compiled_by_a_worker_process_are_the_entries_the_import_loads(
        tmp_path, fresh, monkeypatch):
    monkeypatch.setattr(parallel_compile, "MIN_WORKER_LINES", 0)   # worth it for any size
    monkeypatch.setattr(parallel_compile, "WORKER_START_LINES", 0)
    monkeypatch.setenv("BLOCKBUSTER_COMPILE_WORKERS", "2")
    program = bb.parse_program(TWO.format(m=40))
    compiled = compile_module(program, threads=1, cache_dir=tmp_path)
    # One kernel here, the other in the worker: all of them loaded by the import.
    assert compiled.precompiled == ["kernel_t", "kernel_y"]
    assert compiled.cache_misses == 2 and compiled.cache_hits == 0
    assert all(sum(k.stats.cache_hits.values()) == 1 for k in compiled.kernels)
    assert numba_cache_dir(compiled.path).exists()
    _run(compiled, 40)
    fresh()
    again = compile_module(program, threads=1, cache_dir=tmp_path)
    assert again.precompiled == [] and again.cache_hits == 2     # compiled once only


MATMULS = """
program mm2
dim M = 40 block 16
dim K = 50 block 16
dim N = 24 block 16
input X[M, K]
input W[K, N]
array T[M, N]
output Y[M, N]
kernel t for i in M, j in N:
  T[i, j] = sum(k in K: dot(X[i, k], W[k, j]))
kernel y for i in M, j in N:
  Y[i, j] = add(T[i, j], sum(k in K: dot(exp(X[i, k]), W[k, j])))
"""


def test_a_worker_compiles_block_matmuls_against_placeholders_and_the_import_runs_them(
        tmp_path, fresh, monkeypatch):
    # The worker binds the drivers' names to a placeholder (it never runs a kernel);
    # the machine code it caches must still call the real driver once loaded here.
    monkeypatch.setattr(parallel_compile, "MIN_WORKER_LINES", 0)
    monkeypatch.setenv("BLOCKBUSTER_COMPILE_WORKERS", "2")
    program = bb.parse_program(MATMULS)
    source = compiler.generate_source(program, dtype="float32", threads=1)
    sizes = parallel_compile.kernel_sizes(source)
    # an even split whatever the runtime's state: each process one kernel
    monkeypatch.setattr(parallel_compile, "plan", lambda src, workers: [[n] for n in sizes])
    compiled = compile_module(program, threads=1, cache_dir=tmp_path)
    assert compiled.precompiled == sorted(sizes) and len(sizes) == 2
    assert compiled.cache_hits == 0 and compiled.cache_misses == 2
    assert all(sum(k.stats.cache_hits.values()) == 1 for k in compiled.kernels)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 50)).astype(np.float32)
    w = (rng.standard_normal((50, 24)) * 1e3).astype(np.float32)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    want = x64 @ w64 + np.exp(x64) @ w64
    got = compiled({"X": x, "W": w})["Y"]
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_a_worker_with_another_micro_kernel_compiles_nothing(tmp_path, monkeypatch):
    # A worker that imported a changed plugin would cache kernels calling driver
    # names the importing process never registers (LLVM aborts on loading them).
    from blockbuster_numba import microkernel
    program = bb.parse_program(MATMULS)
    source = compiler.generate_source(program, dtype="float32", threads=1)
    path = tmp_path / "mm2_module.py"
    path.write_text(source)
    monkeypatch.setattr(microkernel, "SIGNATURE", microkernel.SIGNATURE + " (edited)")
    with pytest.raises(RuntimeError, match="another micro-kernel"):
        parallel_compile.compile_only(path, list(parallel_compile.kernel_sizes(source)),
                                      "_bb_numba_mm2_module")
    assert not numba_cache_dir(path).exists() or not any(numba_cache_dir(path).iterdir())


def test_bound_to_placeholders_a_process_compiles_no_driver():
    import subprocess
    import sys
    code = ("from blockbuster_numba import gemm_call as g; g.bind_placeholders(); "
            "name = g.ensure_gemm_symbol('float32', 'packed'); "
            "from llvmlite import binding; "
            "assert binding.address_of_symbol(name) == g.ctypes.addressof(g._PLACEHOLDER); "
            "assert not g._ENTRIES; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


def test_this_process_gets_less_of_the_kernels_while_it_compiles_the_runtime(monkeypatch):
    from blockbuster_numba import gemm_call, prepack
    source = "DT = np.float32\n    gemm_set_(a, b, c)\nW_p = packed_input_(W, False, P, 'W')\n"
    monkeypatch.setattr(gemm_call, "entry_ready", lambda dtype, kind: False)
    monkeypatch.setattr(prepack, "packer_ready", lambda dtype: False)
    cold = parallel_compile.runtime_lines(source)
    assert cold == (parallel_compile.PACKED_ENTRY_LINES + parallel_compile.PLAIN_ENTRY_LINES
                    + parallel_compile.PACKER_LINES)
    assert parallel_compile.runtime_lines("DT = np.float32\n    x = exp_(y)\n") == 0
    monkeypatch.setattr(gemm_call, "entry_ready", lambda dtype, kind: True)
    monkeypatch.setattr(prepack, "packer_ready", lambda dtype: True)
    assert parallel_compile.runtime_lines(source) == 0


def test_the_compile_plan_balances_kernels_by_their_source_lines():
    source = "\n".join(
        [f'@njit("void()", cache=True)\ndef {name}(' + "):\n" + "    pass\n" * lines
         for name, lines in (("k_big", 120), ("k_mid", 80), ("k_small", 40))]
        + ["def run(inputs):", "    pass"])
    sizes = parallel_compile.kernel_sizes(source)
    assert sizes["k_big"] > sizes["k_mid"] > sizes["k_small"]
    # A worker starts WORKER_START_LINES behind this process (it must import Numba).
    start = parallel_compile.WORKER_START_LINES
    assert sizes["k_big"] + sizes["k_small"] <= start + sizes["k_mid"] + sizes["k_small"]
    assert parallel_compile.plan(source, 2, start) == [["k_big", "k_small"], ["k_mid"]]
    assert parallel_compile.plan(source, 1, start) == [["k_big", "k_mid", "k_small"]]
    assert parallel_compile.plan(source[source.index("@njit", 10):], 2, start) == [
        ["k_mid", "k_small"]]
    # Hardly behind (this process sets Numba up and compiles the runtime helpers while
    # the worker starts), the worker takes the small kernel beside the middle one.
    assert parallel_compile.plan(source, 2, 0) == [["k_big"], ["k_mid", "k_small"]]


def test_a_worker_takes_even_a_lone_kernel_while_this_process_compiles_the_runtime():
    source = "\n".join(['@njit("void()", cache=True)\ndef k_only(' + "):\n" + "    pass\n" * 90,
                        "def run(inputs):", "    pass"])
    # The worker starts ahead (this process has 50 lines of helpers more to compile
    # than a worker needs to start): it takes the kernel, this process the helpers.
    assert parallel_compile.plan(source, 2, -50) == [[], ["k_only"]]
    # Behind (helpers cached), one kernel stays here; so it does with one process.
    assert parallel_compile.plan(source, 2, 10) == [["k_only"]]
    assert parallel_compile.plan(source, 1, -50) == [["k_only"]]
    tiny = source.replace("    pass\n" * 90, "    pass\n" * 20)
    assert parallel_compile.plan(tiny, 2, -50) == [["k_only"]]   # not worth a process


def test_a_worker_is_counted_further_behind_once_numba_is_set_up(monkeypatch):
    import sys
    monkeypatch.delitem(sys.modules, "numba.np.arraymath", raising=False)
    assert parallel_compile.worker_start_lines() == parallel_compile.FRESH_WORKER_START_LINES
    monkeypatch.setitem(sys.modules, "numba.np.arraymath", object())
    assert parallel_compile.worker_start_lines() == parallel_compile.WORKER_START_LINES
    assert parallel_compile.FRESH_WORKER_START_LINES < parallel_compile.WORKER_START_LINES


def test_the_runtime_helpers_a_module_calls_are_compiled_for_its_argument_types():
    # What precompile does before its workers compile kernels: the driver's entry
    # point for the dtype (compiled and registered), the scalar helpers for the dtype.
    from numba import types
    from blockbuster_numba import gemm_call, runtime
    from blockbuster_numba import prepack
    source = "DT = np.float32\n    gemm_set_(a, b, c)\n    x = silu_(y)\n"
    parallel_compile.compile_runtime(source)
    assert ("float32", "plain") in gemm_call._ENTRIES
    # a module multiplying by packed inputs: the packed entry and the packer too
    source = "DT = np.float32\n    gemm_packed_(a, pk, 3, 4, 0, 0, c)\nW_p = packed_input_(W, False, P, 'W')\n"
    parallel_compile.compile_runtime(source)
    assert ("float32", "packed") in gemm_call._ENTRIES
    assert "float32" in prepack._PACKERS
    assert (types.float32,) in runtime.silu32.overloads
    parallel_compile.compile_runtime("DT = np.float64\n    x = exp_(y)\n")
    assert (types.float64,) in runtime.exp64.overloads
