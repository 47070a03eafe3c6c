"""Tuning results on disk: ``$BLOCKBUSTER_CACHE/tuning`` (else
``~/.cache/blockbuster/tuning``), one JSON file per key.

The key is everything the choice depends on: the program's structure and sizes
(the text of the program the candidates are derived from, at its default blocks),
which dimensions are tuned, the backend, its hardware description, the rules
(their digest), the tuning mode and the package version. A file that cannot be read,
is not JSON, or does not name a positive block for exactly the tuned dimensions is
ignored (and replaced by the next result), never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from ..fusion_cache import cache_dir as _fusion_dir


def cache_dir() -> Path:
    return _fusion_dir().parent / "tuning"


def rules_digest(rules) -> str:
    """The rules' identity: their files' and texts' contents (as the fusion cache)."""
    if rules is None:
        return "default"
    h = hashlib.sha256()
    for f in sorted(set(rules.files)):
        if Path(f).is_file():
            h.update(Path(f).read_bytes())
    for r in rules.rules.values():
        h.update(r.text.encode())
    return h.hexdigest()[:16]


#: Bumped when the tuner chooses differently for the same key (old choices are then
#: made again, not reused). 2: wide assignments measured too. 3: a deep wide
#: assignment, Numba blocks in multiples of the micro-kernel tile. 4: candidates
#: timed in turn; measured ties the model cannot tell apart go to the fastest.
#: 5: best of up to 5 calls, not 3.
TUNER_VERSION = 5


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return f"{version('blockbuster')}/tuner {TUNER_VERSION}"
    except PackageNotFoundError:
        return f"unknown/tuner {TUNER_VERSION}"


def tuning_key(structure: str, dims, backend: str, hardware, mode: str, rules: str) -> str:
    h = hashlib.sha256()
    for part in (_version(), structure, ",".join(sorted(dims)), backend, repr(hardware),
                 mode, rules):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _path(key: str) -> Path:
    return cache_dir() / f"{key}.json"


def load(key: str, dims) -> dict | None:
    """The stored record, or None when absent or damaged (unreadable, other
    dimensions, or a block that is not a size from 1 to its dimension's)."""
    try:
        record = json.loads(_path(key).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    blocks = record.get("blocks") if isinstance(record, dict) else None
    if not isinstance(blocks, dict) or set(blocks) != set(dims):
        return None
    if not all(type(b) is int and b > 0 for b in blocks.values()):
        return None
    if isinstance(dims, dict) and any(blocks[d] > n for d, n in dims.items()):
        return None                      # a block past its dimension: not one we chose
    return record


def store(key: str, record: dict) -> None:
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1, allow_nan=False))
        os.replace(tmp, path)            # atomic: readers never see half a file
    except (OSError, ValueError):
        pass
