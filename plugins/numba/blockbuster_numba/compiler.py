"""Compile and run generated modules, with an on-disk cache.

The generated source of a program is written once to
``$BLOCKBUSTER_CACHE/numba/<program>_<key>.py`` (default cache root:
``~/.cache/blockbuster``), where ``key`` hashes the source, the thread count it was
generated for, this plugin's version, the source of :mod:`.runtime` and
:mod:`.kernel_numpy` (their machine code is inlined into the kernels) and the Numba,
NumPy and Python versions. The kernels
are ``@njit(cache=True)`` with explicit signatures, so importing the module compiles
them, and Numba keeps their machine code in ``__pycache__`` beside the file (or under
``NUMBA_CACHE_DIR``): a second process importing the same file loads the machine code
instead of compiling again, without setting Numba's compiler up (:mod:`.cache_loads`). A new module's kernels are first compiled into that cache
on several processes at once when that pays (:mod:`.parallel_compile`; a
``.compiled`` marker beside the file says it has been done).
The file is rewritten only when it does not hold its source (its timestamp is part of
Numba's cache check); when importing it fails on Numba's cache entries (damaged), they
are removed and the kernels compiled again.

Running: inputs become C-contiguous arrays of the program's dtype, and the kernels run
on the module's thread count (the backend's ``Hardware.cores``, at most
``NUMBA_NUM_THREADS``: a parallel kernel's loop runs as one range per thread on
:mod:`.threads`, or, where the generator kept a ``prange``, on Numba's pool held to
it). Block matmuls, float32 and float64, run on the micro-kernel: no module calls
BLAS (from inside the parallel loop a multi-threaded BLAS would oversubscribe the
cores; and Numba's BLAS is SciPy's, whose import costs 0.2-0.4 s of every start).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from blockbuster.backends.base import as_dtype
from blockbuster.errors import BackendError

import numba  # noqa: E402

from . import kernel_numpy, runtime  # noqa: E402
from .allocator import keep_block_memory  # noqa: E402
from .cache_loads import fast_cache_loads  # noqa: E402
from .llvm_options import kernel_codegen  # noqa: E402
from .parallel_compile import precompile  # noqa: E402
from .codegen import generate_source  # noqa: E402

_MODULES: dict[str, object] = {}        # cache key -> imported module (this process)
_LOCK = threading.Lock()


def cache_root() -> Path:
    """``$BLOCKBUSTER_CACHE/numba``, else ``~/.cache/blockbuster/numba``."""
    root = os.environ.get("BLOCKBUSTER_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "blockbuster"
    return base / "numba"


def cache_key(source: str, threads: int) -> str:
    from . import __version__
    h = hashlib.sha256()
    for part in (source, f"threads={threads}", __version__, Path(runtime.__file__).read_text(),
                 Path(kernel_numpy.__file__).read_text(),
                 numba.__version__, np.__version__, sys.version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _writable(directory: Path) -> Path:
    """``directory`` (created), or a per-user temporary one if it cannot be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if os.access(directory, os.W_OK):
            return directory
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"blockbuster-numba-{os.getuid()}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def _write_source(path: Path, source: str) -> None:
    """``source`` at ``path``. An existing file is kept when it holds exactly that
    text (its timestamp is part of Numba's cache check) and replaced otherwise (a
    damaged cache entry: Numba then sees a new file and compiles afresh)."""
    try:
        if path.read_text() == source:
            return
    except (OSError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(source)
    os.replace(tmp, path)  # atomic: a concurrent process sees all of it or nothing


def numba_cache_dir(path: Path) -> Path:
    """Where Numba keeps the machine code of the functions of the file ``path`` (its
    own choice: ``NUMBA_CACHE_DIR``, else ``__pycache__`` beside the file, else a
    per-user directory)."""
    from numba.core import caching

    def probe():
        pass

    impl = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
    for locator in getattr(impl, "_locator_classes", ()):
        try:
            found = locator.from_function(probe, str(path))
        except Exception:
            continue
        if found is not None:
            return Path(found.get_cache_path())
    return path.parent / "__pycache__"


class CompiledModule:
    """A generated module, imported (its kernels JIT-compiled or loaded from cache)."""

    def __init__(self, program, source: str, dtype: np.dtype, threads: int,
                 directory: Path | None = None, compile_workers: int = 1):
        self.program = program
        self.source = source
        self.dtype = dtype
        self.threads = threads
        self.key = cache_key(source, threads)
        stem = re.sub(r"\W", "_", program.name)[:40] or "program"
        directory = _writable(cache_root() if directory is None else Path(directory))
        self.path = directory / f"{stem}_{self.key}.py"
        start = time.perf_counter()
        with _LOCK:
            module = _MODULES.get(self.key)
            self.reused_in_process = module is not None
            self.precompiled: list[str] = []
            if module is None:
                _write_source(self.path, source)
                self.precompiled = self._precompile(compile_workers)
                module = self._import()
                _MODULES[self.key] = module
                self._compiled_marker().touch()
        self.module = module
        self.jit_seconds = time.perf_counter() - start
        self.kernels = list(module.KERNELS)
        # Kernels still using Numba's parfors (a prange loop the generator could not
        # split into thread ranges); the others run on blockbuster_numba.threads.
        self.uses_numba_pool = any(k.targetoptions.get("parallel") for k in self.kernels)

    def _compiled_marker(self) -> Path:
        """Written once the module has been imported (its kernels are in Numba's cache,
        wherever NUMBA_CACHE_DIR puts it): no parallel precompile after that."""
        return self.path.with_suffix(".compiled")

    def _precompile(self, workers: int) -> list[str]:
        """Kernels compiled into the cache on ``workers`` processes before the import
        (:mod:`.parallel_compile`); none when cached already or when it does not pay."""
        if workers < 2 or self._compiled_marker().exists():
            return []
        try:
            return precompile(self.path, self.source, workers, self._module_name())
        except Exception:       # the import compiles what is missing and reports errors
            return []

    def _module_name(self) -> str:
        return f"_bb_numba_{self.path.stem}"

    def _import(self):
        """The module, imported; when that fails and Numba has cache entries for it
        (a damaged entry fails to unpickle or link), once more without them."""
        try:
            return self._import_once()
        except BackendError:
            stale = self.cache_files()
            if not stale:
                raise
        for entry in stale:
            with contextlib.suppress(OSError):
                entry.unlink()
        return self._import_once()

    def _import_once(self):
        # Numba finds a function's module (for its cache and its globals) by name in
        # sys.modules, so the module is registered there before it runs.
        name = self._module_name()
        spec = importlib.util.spec_from_file_location(name, self.path)
        if spec is None or spec.loader is None:
            raise BackendError(f"numba: cannot import generated module {self.path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            with kernel_codegen(), fast_cache_loads():
                spec.loader.exec_module(module)   # compiles (or loads) every kernel
        except Exception as err:
            sys.modules.pop(name, None)
            raise BackendError(f"numba: compiling program {self.program.name} failed "
                               f"(generated source: {self.path}): {type(err).__name__}: "
                               f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                               ) from err
        return module

    @property
    def cache_hits(self) -> int:
        """Kernels whose machine code came from Numba's on-disk cache (not counting
        those compiled into it by this compile's precompile)."""
        return sum(sum(k.stats.cache_hits.values()) for k in self.kernels) - len(self.precompiled)

    @property
    def cache_misses(self) -> int:
        """Kernels compiled by this compile (here or by its worker processes)."""
        return sum(sum(k.stats.cache_misses.values()) for k in self.kernels) + len(self.precompiled)

    def cache_files(self) -> list[Path]:
        """Numba's index and object files for this module's kernels."""
        where = numba_cache_dir(self.path)
        return sorted(where.glob(f"{self.path.stem}.*.nb*")) if where.exists() else []

    def __call__(self, inputs) -> dict:
        arrays = {name: _kernel_array(inputs[name], self.dtype)
                  for name in self.program.inputs}
        pool = _numba_threads(self.threads) if self.uses_numba_pool else contextlib.nullcontext()
        with pool:
            return self.module.run(arrays)


@contextlib.contextmanager
def _numba_threads(threads: int):
    """Numba's parallel loops run on ``threads`` threads (at most the pool's size)
    while the kernels run; the caller's setting is restored after."""
    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(before)


def _kernel_array(value, dtype: np.dtype) -> np.ndarray:
    """C-contiguous and writeable, of the kernels' dtype: Numba's compiled signatures
    reject read-only arrays (a raw TypeError), so those are copied too."""
    arr = np.ascontiguousarray(value, dtype=dtype)
    if np.ndim(value) == 0:                # ascontiguousarray makes a 0-d array 1-d
        arr = arr.reshape(())
    return arr if arr.flags.writeable else arr.copy()


def compile_workers(threads: int) -> int:
    """Processes that compile a new module's kernels at once: the module's threads, at
    most the CPUs this process may run on; ``BLOCKBUSTER_COMPILE_WORKERS`` overrides
    (1: compile in this process only)."""
    setting = os.environ.get("BLOCKBUSTER_COMPILE_WORKERS", "").strip()
    if setting.isdigit() and int(setting) > 0:
        return int(setting)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(threads, cpus))


def compile_module(program, dtype=np.float32, *, threads: int,
                   cache_dir: str | os.PathLike | None = None,
                   parallel: bool | None = None, hardware=None) -> CompiledModule:
    """Generate, cache and import the module of ``program`` for ``threads`` threads
    (the backend passes its ``Hardware.cores``). ``parallel``: True or False forces
    every kernel's outer loops to be a ``prange`` or a plain loop; None (the default)
    decides per kernel from its work."""
    dtype = as_dtype(dtype, "numba")
    if dtype not in (np.float32, np.float64):
        raise BackendError(f"numba: dtype must be float32 or float64, got {dtype}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise BackendError(f"numba: threads must be a positive integer, got {threads!r}")
    keep_block_memory()      # before any generated kernel runs (.allocator: why)
    start = time.perf_counter()
    source = generate_source(program, dtype=dtype.name, threads=threads, parallel=parallel,
                             hardware=hardware)
    codegen = time.perf_counter() - start
    compiled = CompiledModule(program, source, dtype, threads, cache_dir,
                              compile_workers=compile_workers(threads))
    compiled.codegen_seconds = codegen
    return compiled
