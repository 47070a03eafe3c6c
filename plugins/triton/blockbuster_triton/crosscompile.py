"""Compile generated kernels for a GPU architecture without a GPU.

Triton compiles a kernel ahead of time for a named target (``GPUTarget("cuda", 90,
32)``) down to a cubin with the ``ptxas`` its wheel ships, no device needed. This
checks what the interpreter cannot: that every kernel passes Triton's compiler
(types of loop-carried values, constexpr globals, ``tl.gather``, float64 paths) for
that architecture, and how much shared memory each one needs.

It runs in a subprocess without ``TRITON_INTERPRET`` (in this process, the plugin
may have set it: then kernels are decorated for the interpreter), as a script, so
that the plugin (which would set it again) is not imported there::

    python plugins/triton/blockbuster_triton/crosscompile.py MODULE.py [--arch 90]

prints one JSON object per kernel: its name, whether it compiled, its shared memory
in bytes or the first line of the error.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile

#: Architectures by GPU: compute capability major*10 + minor.
ARCHS = {"h100": 90, "h200": 90, "a100": 80, "rtx4090": 89}


def cross_compile(source: str, arch: int = 90, dtype: str = "float32",
                  timeout: float = 600) -> list[dict]:
    """Compile every kernel of a generated module ``source`` for ``sm_<arch>``; one
    dict per kernel: ``name``, ``ok``, ``shared`` (bytes) or ``error``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "generated_kernels.py")
        with open(path, "w") as f:
            f.write(source)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        done = subprocess.run([sys.executable, "-W", "ignore", __file__, path,
                               "--arch", str(arch), "--dtype", dtype],
                              env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"cross-compilation failed to run: {tail}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("module")
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET"):
        print("crosscompile: unset TRITON_INTERPRET first", file=sys.stderr)
        return 2
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location("generated_kernels", args.module)
    module = importlib.util.module_from_spec(spec)
    sys.modules["generated_kernels"] = module
    spec.loader.exec_module(module)
    pointer = "*fp32" if args.dtype == "float32" else "*fp64"
    target = GPUTarget("cuda", args.arch, 32)
    for name, fn in sorted(vars(module).items()):
        if not name.startswith("kernel_"):
            continue
        params = inspect.signature(fn.fn).parameters
        try:
            k = triton.compile(ASTSource(fn=fn, signature={p: pointer for p in params},
                                         constexprs={}), target=target)
            row = {"name": name, "ok": "cubin" in k.asm, "shared": k.metadata.shared}
        except Exception as err:
            lines = [line for line in str(err).splitlines() if line.strip()]
            row = {"name": name, "ok": False, "error": lines[-1] if lines else type(err).__name__}
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
