"""Generated modules on disk, imported, and run on PyTorch buffers.

Triton reads a kernel's source with ``inspect`` when it is decorated, so the module
text is written to ``$BLOCKBUSTER_CACHE/triton/<program>_<key>.py`` (default root
``~/.cache/blockbuster``; ``key`` hashes the source, this plugin's version and the
Triton version) and imported from there, once per process. On a GPU, Triton
compiles each kernel on its first launch and caches the binary itself
(``~/.triton/cache``); under the interpreter the kernels run as Python on NumPy.

A call copies the inputs into buffers of the program's dtype (float32 or float64) on the device (the other arrays start
as zeros, as the reference's do), launches the kernels in program order and copies
the outputs back as NumPy arrays.
"""

from __future__ import annotations

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

from .codegen import generate_source
from .environment import ENVIRONMENT

_MODULES: dict[str, object] = {}
_LOCK = threading.Lock()


def cache_root() -> Path:
    root = os.environ.get("BLOCKBUSTER_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "blockbuster"
    return base / "triton"


def cache_key(source: str) -> str:
    from . import __version__
    h = hashlib.sha256()
    for part in (source, __version__, ENVIRONMENT.triton_version):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _writable(directory: Path) -> Path:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if os.access(directory, os.W_OK):
            return directory
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / f"blockbuster-triton-{os.getuid()}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


def _import(path: Path, source: str, program_name: str):
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)
    name = f"_bb_triton_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        sys.modules.pop(name, None)
        raise BackendError(f"triton: importing the kernels of program {program_name} failed "
                           f"({path}): {type(err).__name__}: {_first_line(err)}") from err
    return module


def _first_line(err: Exception) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else ""


class CompiledModule:
    """A program's generated module, imported: call it with NumPy inputs by name."""

    def __init__(self, program, dtype: np.dtype, directory: Path | None = None):
        self.program = program
        self.dtype = np.dtype(dtype)
        start = time.perf_counter()
        self.source = generate_source(program, self.dtype.name)
        self.codegen_seconds = time.perf_counter() - start
        self.key = cache_key(self.source)
        stem = re.sub(r"\W", "_", program.name)[:40] or "program"
        directory = _writable(cache_root() if directory is None else Path(directory))
        self.path = directory / f"{stem}_{self.key}.py"
        with _LOCK:
            module = _MODULES.get(self.key)
            if module is None:
                module = _MODULES[self.key] = _import(self.path, self.source, program.name)
        self.module = module

    def buffers(self, inputs) -> dict:
        """Device buffers for every array of the program: the inputs copied (any
        array-like, NumPy or torch), the others zeros (as the reference's start)."""
        import torch
        device, p = ENVIRONMENT.device, self.program
        dtype = getattr(torch, self.dtype.name)
        out = {}
        for a in p.arrays:
            if a.name in p.inputs:
                value = inputs[a.name]
                if isinstance(value, torch.Tensor):
                    out[a.name] = value.to(device=device, dtype=dtype).contiguous()
                else:
                    arr = np.array(value, dtype=self.dtype, order="C", copy=True)
                    out[a.name] = torch.from_numpy(arr).to(device)
            else:
                out[a.name] = torch.zeros(p.shape(a.name), device=device, dtype=dtype)
        return out

    def launch(self, buffers: dict) -> None:
        """Launch the kernels on device ``buffers`` (asynchronously on a GPU): what a
        benchmark times, without the copies of a call."""
        if ENVIRONMENT.device == "cuda":
            self.module.run(buffers)
            return
        # The interpreter computes padded lanes too (masked off at the store): a
        # reciprocal of a padded row's zero sum is inf there, by IEEE semantics, not
        # a warning to the user.
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            self.module.run(buffers)

    def __call__(self, inputs) -> dict:
        import torch
        p = self.program
        buffers = self.buffers(inputs)
        try:
            self.launch(buffers)
            if ENVIRONMENT.device == "cuda":
                torch.cuda.synchronize()
        except BackendError:
            raise
        except Exception as err:
            raise BackendError(f"triton: running program {p.name} failed (generated source: "
                               f"{self.path}): {type(err).__name__}: {_first_line(err)}") from err
        return {name: buffers[name].cpu().numpy() for name in p.outputs}


def compile_module(program, dtype=np.float32, cache_dir=None, **_ignored) -> CompiledModule:
    dtype = as_dtype(dtype, "triton")
    if dtype not in (np.float32, np.float64):
        raise BackendError(f"triton: dtype must be float32 or float64, got {dtype}")
    return CompiledModule(program, dtype, None if cache_dir is None else Path(cache_dir))
