"""No recompilation of the same program: the generated module and Numba's machine code
are cached on disk and reused by a new process; within a process the module is
reused outright. The cache key covers the source, so a different program (or size)
gets its own entry."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path


from blockbuster.frontend.workloads import workload
from blockbuster_numba.compiler import cache_key, cache_root

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from blockbuster.backends.registry import get_backend
    from blockbuster.ir.parser import parse_program
    p = parse_program('''program two
    dim M = 40 block 16
    dim K = 50 block 16
    input X[M, K]
    array T[M, K]
    output Y[M]
    kernel t for i in M, k in K:
      T[i, k] = exp(X[i, k])
    kernel y for i in M:
      Y[i] = sum(k in K: rowsum(T[i, k]))
    ''')
    c = get_backend("numba").compile(p)
    x = {n: np.ones(p.shape(n), np.float32) for n in p.inputs}
    y = c(x)["Y"]
    print(json.dumps({"compile": c.compile_seconds, "jit": c.jit_seconds,
                      "hits": c.cache_hits, "misses": c.cache_misses,
                      "kernels": len(p.kernels), "path": c.source_path,
                      "y": float(np.abs(y).sum())}))
""")


def _run(cache: Path, seed: str) -> dict:
    env = dict(os.environ, BLOCKBUSTER_CACHE=str(cache), PYTHONHASHSEED=seed)
    # Numba's own cache directory setting would move the machine code away from the
    # generated module, where this test looks for it.
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_reuses_the_compiled_kernels(tmp_path):
    first = _run(tmp_path, "1")
    second = _run(tmp_path, "2")     # another hash seed: the source must not depend on it
    assert first["misses"] == first["kernels"] > 1 and first["hits"] == 0
    assert second["hits"] == second["kernels"] and second["misses"] == 0
    assert second["path"] == first["path"]
    assert second["y"] == first["y"]
    path = Path(first["path"])
    assert path.parent == tmp_path / "numba"
    stem = path.stem
    index = sorted((path.parent / "__pycache__").glob(f"{stem}.*.nbi"))
    data = sorted((path.parent / "__pycache__").glob(f"{stem}.*.nbc"))
    assert len(index) == first["kernels"] and len(data) == first["kernels"]


def test_same_program_in_one_process_is_not_recompiled(numba_backend):
    p = workload("attention", N=72, blocks={"N": 32, "S": 32})
    first = numba_backend.compile(p)
    again = numba_backend.compile(p)
    assert again.run.module is first.run.module
    assert again.run.reused_in_process


def test_cache_key_depends_on_the_source_and_the_thread_count(monkeypatch, tmp_path):
    from blockbuster_numba import generate_source
    a = generate_source(workload("attention", N=64))
    b = generate_source(workload("attention", N=96))
    assert a != b and cache_key(a, 2) != cache_key(b, 2)
    assert cache_key(a, 2) == cache_key(a, 2) != cache_key(a, 4)
    monkeypatch.setenv("BLOCKBUSTER_CACHE", str(tmp_path))
    assert cache_root() == tmp_path / "numba"
    monkeypatch.delenv("BLOCKBUSTER_CACHE")
    assert cache_root() == Path.home() / ".cache" / "blockbuster" / "numba"
