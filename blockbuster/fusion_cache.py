"""Fused programs cached on disk, so a second process does not fuse again.

The key is everything fusion depends on: the program's text, the rules (their
files' and texts' contents), the hardware description and the package version.
The value is the fused program's text. ``$BLOCKBUSTER_CACHE/fusion``, else
``~/.cache/blockbuster/fusion`` (the root the Numba plugin caches kernels under).
A damaged or unreadable entry is ignored and rewritten, never an error.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import attrs


def cache_dir() -> Path:
    root = os.environ.get("BLOCKBUSTER_CACHE")
    base = Path(root).expanduser() if root else Path.home() / ".cache" / "blockbuster"
    return base / "fusion"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("blockbuster")
    except PackageNotFoundError:
        return "unknown"


def _key(program, rules, hardware) -> str:
    from .ir.printer import format_program
    h = hashlib.sha256()
    h.update(_version().encode())
    h.update(format_program(program).encode())
    for f in sorted(set(rules.files)):
        if Path(f).is_file():
            h.update(Path(f).read_bytes())
    for r in rules.rules.values():
        h.update(r.text.encode())
    h.update(repr(hardware).encode())
    return h.hexdigest()[:32]


def cached_fuse(program, rules=None, hardware=None):
    """``blockbuster.fuse(program, rules, hardware=...).program``, from the cache when
    this exact fusion ran before (in any process)."""
    from .ir.parser import parse_program
    from .ir.printer import format_program
    from .select.selection import fuse_program
    if rules is None:
        from .dsl.loader import default_rules
        rules = default_rules()
    path = cache_dir() / f"{program.name}_{_key(program, rules, hardware)}.bbp"
    try:
        fused = parse_program(path.read_text(), filename=str(path))
        return attrs.evolve(fused, params=program.params)
    except Exception:
        pass
    if hardware is None:
        from .cost.hardware import DEFAULT_HARDWARE
        hardware = DEFAULT_HARDWARE
    fused = fuse_program(program, rules, hardware=hardware).program
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(format_program(fused))
        os.replace(tmp, path)                 # atomic: readers never see half a file
    except OSError:
        pass
    return fused
