"""Compile a generated module's kernels in several processes at once.

Numba compiles under one lock per process, so a module's kernels compile one after
the other. When a module has more than one sizeable kernel, :func:`precompile`
splits them into groups of about equal size (by their lines of source), compiles the
first group in this process and each other group in a worker process, all into
Numba's on-disk cache; importing the module afterwards loads every kernel from it.

How a process compiles only its group: it executes the module's file with the other
kernels' ``@njit("signature", ...)`` decorators made lazy (the signature dropped, on
the same line), compiled under the file's own path and module name. Numba's cache entry of a
function is named by that path, its qualified name and first line, and checked
against the file's timestamp and the function's bytecode: all unchanged, so the
entries are exactly the ones the real import looks for. A worker that fails costs
nothing but time: the import compiles whatever is not cached.

The runtime helpers (the micro-kernel's drivers above all, 1-2 CPU s when not cached
yet) are compiled by this process only: a worker binds the drivers' names to a
placeholder (:func:`.gemm_call.bind_placeholders`; its kernels' machine code refers
to the names, and it never runs them) and starts compiling its kernels at once. This
process, which compiles the helpers while the workers start, gets that much less of
the kernels (:func:`plan`). Before, a worker waited for the helpers to be compiled
and loaded them from the cache: on a cold cache the one-layer Llama's worker idled
for 2-3 s of a 7-10 s compile.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import types
from pathlib import Path

#: A kernel function of a generated module: its eager decorator, then its ``def``.
_KERNEL = re.compile(r'^@njit\("[^"]*", (.*)\)\ndef (\w+)\(', re.MULTILINE)

#: CPU seconds of compiling a line of kernel source (~0.016 measured on the default
#: Llama layer's kernels, best of four, LLVM at -O2; more on a busy machine): the
#: unit of the plan, which weighs everything in lines.
SECONDS_PER_LINE = 0.02


def _lines(seconds: float) -> int:
    return round(seconds / SECONDS_PER_LINE)


#: How far behind this process a worker starts: Python, Numba and the plugin
#: imported (~0.8 s), then Numba's compiler set up (~0.7 s) -- of which this process
#: still owes the set-up when it has not compiled with Numba yet.
WORKER_START_LINES = _lines(1.5)
FRESH_WORKER_START_LINES = _lines(0.8)

#: A worker compiles at least as much as its start costs, or it is not started: on a
#: machine that other jobs share, two processes seldom get two whole cores, and a
#: worker for fused attention's one kernel (62 lines, ~0.85 CPU s) made a cold
#: compile slower (2.9-3.7 s against 2.8-3.1 s, three alternating pairs), where one
#: for LayerNorm·W's (142 lines, ~2 CPU s) made it faster (4.6-4.9 against 5.2-7.9).
MIN_WORKER_LINES = WORKER_START_LINES

#: What this process compiles before its kernels when not cached yet (see
#: :func:`runtime_lines`): the driver's packed entry (~1.1 CPU s), its plain entry
#: (~0.6: it calls the packed one) and the packer of inputs (~0.6).
PACKED_ENTRY_LINES = _lines(1.1)
PLAIN_ENTRY_LINES = _lines(0.6)
PACKER_LINES = _lines(0.6)


def worker_start_lines() -> int:
    """How far behind this process a worker starts, in lines (see above). Numba
    imports ``numba.np.arraymath`` when it sets its compiler up, on first use."""
    return WORKER_START_LINES if "numba.np.arraymath" in sys.modules else FRESH_WORKER_START_LINES


def runtime_lines(source: str) -> int:
    """The runtime helpers the module ``source`` needs that this process must still
    compile (not in this process, nor in the cache on disk), in lines."""
    from . import gemm_call, prepack
    dtype = "float64" if "DT = np.float64" in source else "float32"
    lines = 0
    plain = re.search(r"\bgemm(_set)?_\(", source) is not None
    packed = plain or re.search(r"\bgemm_packed(_set)?_\(", source) is not None
    if packed and not gemm_call.entry_ready(dtype, "packed"):
        lines += PACKED_ENTRY_LINES
    if plain and not gemm_call.entry_ready(dtype, "plain"):
        lines += PLAIN_ENTRY_LINES
    if "packed_input_(" in source and not prepack.packer_ready(dtype):
        lines += PACKER_LINES
    return lines


def kernel_sizes(source: str) -> dict[str, int]:
    """Kernel function name -> its lines of source (the compile-time estimate)."""
    found = list(_KERNEL.finditer(source))
    sizes = {}
    for this, after in zip(found, found[1:] + [None]):
        end = after.start() if after else source.find("\ndef run(", this.end())
        sizes[this.group(2)] = source.count("\n", this.start(), end if end > 0 else None)
    return sizes


def plan(source: str, workers: int, start_lines: int | None = None) -> list[list[str]]:
    """Kernel names in at most ``workers`` groups of near-equal lines (longest first
    to the lightest group, a worker's start counted in: ``start_lines``, by default
    :func:`worker_start_lines` less what this process compiles of the runtime
    helpers first); the first group is this process's. One group when splitting
    would not pay: a worker would get less than ``MIN_WORKER_LINES``.

    When the workers start ahead of this process (it has more helpers to compile
    than a worker needs to start), this process's group may be empty: the helpers
    are its share, and even a module of one kernel gets a worker."""
    sizes = kernel_sizes(source)
    if start_lines is None:       # the workers' start, less this process's helpers
        start_lines = worker_start_lines() - runtime_lines(source)
    behind = start_lines
    count = max(1, min(workers, len(sizes) + (1 if behind < 0 else 0)))
    groups: list[list[str]] = [[] for _ in range(count)]
    start = [0] + [behind] * (count - 1)     # group 0: this process
    load = list(start)
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        i = load.index(min(load))
        groups[i].append(name)
        load[i] += sizes[name]
    workers_shares = [n - s for g, n, s in zip(groups[1:], load[1:], start[1:]) if g]
    if not workers_shares or min(workers_shares) < MIN_WORKER_LINES:
        return [sorted(sizes)]
    return [groups[0]] + [g for g in groups[1:] if g]


def compile_only(path: Path, kernels: list[str], module_name: str) -> None:
    """Execute the module at ``path`` compiling only ``kernels`` (into the cache)."""
    from .llvm_options import kernel_codegen
    from .microkernel import SIGNATURE
    keep = set(kernels)
    source = path.read_text()
    if "ensure_gemm_symbol(" in source and SIGNATURE not in source:
        # This process imported another micro-kernel than the module was generated
        # for (the plugin changed meanwhile): its kernels would call driver names
        # that the importing process never registers. Compile nothing; the import
        # compiles these kernels itself.
        raise RuntimeError(f"{path}: generated for another micro-kernel than {SIGNATURE}")

    def lazy(m: re.Match) -> str:
        return m.group(0) if m.group(2) in keep else f"@njit({m.group(1)})\ndef {m.group(2)}("

    module = types.ModuleType(module_name)
    module.__file__ = str(path)
    sys.modules[module_name] = module
    try:
        with kernel_codegen():
            exec(compile(_KERNEL.sub(lazy, source), str(path), "exec"), module.__dict__)
    finally:
        sys.modules.pop(module_name, None)


def precompile(path: Path, source: str, workers: int, module_name: str) -> list[str]:
    """Compile the kernels of the module at ``path`` (text ``source``) on up to
    ``workers`` processes, this one included, when that pays; the kernels compiled
    here and by the workers that succeeded (empty when it did not pay: the import
    compiles them). ``module_name``: the name the module is imported under (Numba's
    cache entries name it)."""
    groups = plan(source, workers)
    if len(groups) < 2:
        return []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    # A worker binds the drivers' names to placeholders and compiles its kernels at
    # once; this process compiles the runtime helpers meanwhile, then its own group.
    procs = [subprocess.Popen(
        [sys.executable, "-c", "import sys; from blockbuster_numba.gemm_call import "
         "bind_placeholders; from blockbuster_numba.parallel_compile import compile_only; "
         "from pathlib import Path; bind_placeholders(); "
         "compile_only(Path(sys.argv[1]), sys.argv[2].split(','), sys.argv[3])",
         str(path), ",".join(group), module_name], env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for group in groups[1:]]
    try:
        with contextlib.suppress(Exception):     # the import reports real errors
            compile_runtime(source)
        compile_only(path, groups[0], module_name)
    finally:
        done = [proc.wait() == 0 for proc in procs]
    return sorted(name for group, ok in zip(groups, [True] + done) if ok for name in group)


def compile_runtime(source: str) -> None:
    """Compile (or load) the cached runtime helpers that the module ``source`` calls,
    for the argument types its kernels pass: the micro-kernel's drivers, the packer
    of inputs multiplied by (:mod:`.prepack`) and the scalar functions. A helper not
    compiled here is compiled by whoever first needs it, as before."""
    from numba import types
    from numba.core.dispatcher import Dispatcher
    from . import runtime
    from .gemm_call import ensure_gemm_symbol
    dtype = "float64" if "DT = np.float64" in source else "float32"
    scalar = types.float64 if dtype == "float64" else types.float32
    if "packed_input_(" in source:
        from .prepack import packer
        packer(dtype)
    for generic, name in runtime.HELPERS[dtype].items():
        if f"{generic}(" not in source:
            continue
        if generic.startswith("gemm"):
            ensure_gemm_symbol(dtype, "packed" if generic.startswith("gemm_packed") else "plain")
            continue
        helper = getattr(runtime, name)
        cached = isinstance(helper, Dispatcher) and type(helper._cache).__name__ != "NullCache"
        if cached and not generic.startswith("gemm"):     # (scalar) -> scalar helpers
            helper.compile((scalar,))
