"""The Numba backend needs no BLAS: block matmuls of every dtype run on the
micro-kernel. Numba's BLAS is SciPy's, and importing it cost 0.2-0.4 s of every
start; here SciPy cannot be imported at all, and float32 and float64 programs with
block matmuls still compile and match float64 NumPy."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import importlib.abc, json, sys

    class NoScipy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("scipy", "threadpoolctl"):
                raise ImportError(f"{name} is blocked in this test")
            return None

    sys.meta_path.insert(0, NoScipy())
    import numpy as np
    import blockbuster as bb
    from blockbuster.backends.registry import get_backend

    fused = bb.fuse(bb.workload("layernorm_matmul", M=45, K=70, N=37,
                                blocks={"M": 16, "K": 32, "N": 32})).program
    rng = np.random.default_rng(0)
    x = {n: rng.standard_normal(fused.shape(n)) for n in fused.inputs}
    x["X"] = x["X"] * 1e3 + 1e3                      # row means 1e3
    xf = x["X"]
    mean = xf.mean(axis=1, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=1, keepdims=True)
    want = ((xf - mean) / np.sqrt(var + 1e-5) * x["gamma"] + x["beta"]) @ x["W"]
    errors = {}
    for dtype in (np.float32, np.float64):
        y = get_backend("numba").compile(fused, dtype=dtype)(x)["Y"]
        assert y.dtype == dtype
        errors[np.dtype(dtype).name] = float(np.abs(y - want).max() / np.abs(want).max())
    print(json.dumps({"errors": errors, "scipy": any(m.startswith("scipy") for m in sys.modules)}))
""")


def test_float32_and_float64_block_matmuls_without_scipy(tmp_path):
    env = dict(os.environ, BLOCKBUSTER_CACHE=str(tmp_path), BLOCKBUSTER_COMPILE_WORKERS="1")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert not found["scipy"]
    assert found["errors"]["float32"] < 1e-5
    assert found["errors"]["float64"] < 1e-12
