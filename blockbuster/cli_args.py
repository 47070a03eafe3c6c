"""Argument values and output files of the command line: ``DIM=INT`` assignments,
seeds, limits, and output paths checked before any work starts (``blockbuster.cli``
uses these; each raises :class:`~blockbuster.errors.UsageError` with one line)."""

from __future__ import annotations

import argparse
import math
import os
from typing import Sequence

from .errors import UsageError


def parse_assignments(items: Sequence[str] | None, flag: str) -> dict[str, int]:
    """``["N=200", "D=32"]`` -> ``{"N": 200, "D": 32}``. Parsed here rather than by
    argparse so a malformed value is a one-line ``error:`` like every other mistake.
    Positivity is checked by the workload, the one place that knows the dimensions."""
    out: dict[str, int] = {}
    for item in items or ():
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name or not value:
            raise UsageError(f"{flag} expects DIM=INT, got '{item}'")
        try:
            number = int(value)
        except ValueError:
            raise UsageError(f"{flag} {name}: '{value}' is not an integer") from None
        if name in out:
            raise UsageError(f"{flag}: dimension {name} is given twice")
        out[name] = number
    return out


def _int_at_least(text: str, low: int, wrong: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{wrong}, got {value}")
    return value


def seed_arg(text: str) -> int:
    """argparse type of ``--seed``: NumPy seeds are non-negative integers."""
    return _int_at_least(text, 0, "a seed is a non-negative integer")


def positive_int_arg(text: str) -> int:
    return _int_at_least(text, 1, "must be a positive integer")


def seconds_arg(text: str) -> float:
    """A positive, finite number of seconds (``nan`` and ``inf`` are not limits)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive finite number of seconds, "
                                         f"got {text}")
    return value


def _is_own_output(target, own_prefix: str | None) -> bool:
    """``target`` starts with ``own_prefix``: an earlier output of the same kind, which
    a rerun may replace (``--dot attention.dot`` twice)."""
    if not own_prefix:
        return False
    try:
        with open(target, "rb") as f:
            return f.read(len(own_prefix.encode())) == own_prefix.encode()
    except OSError:
        return False


def check_output_path(path: str, allowed: tuple = (), flag: str = "",
                      own_prefix: str | None = None) -> None:
    """Refuse, before any work is done, an output file that ``write_new_file`` would
    refuse or could not write: a protected name, an existing file that is not an
    earlier output of the same kind (``own_prefix``: what such an output starts
    with; without it no existing file is replaced), a directory, a missing or
    read-only folder."""
    from pathlib import Path
    target = Path(path)
    what = f"{flag} {path}" if flag else path
    protected = {".bbr", ".lark", ".py"} - set(allowed)
    if target.suffix in protected:
        raise UsageError(f"refusing to overwrite {what}: choose a new file name")
    if target.is_dir():
        raise UsageError(f"{what} is a directory, not a file name")
    if target.is_file() and not _is_own_output(target, own_prefix):   # /dev/null is fine
        raise UsageError(f"refusing to overwrite {what}: it exists; choose a new file name")
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"cannot write {what}: no such directory {folder}")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise UsageError(f"cannot write {what}: permission denied")


def write_new_file(path: str, text: str, allowed: tuple = (),
                   own_prefix: str | None = None) -> None:
    """Write an output file; never overwrite a file the user has (a rule file, a
    program, inputs, notes), only an earlier output of the same kind (``own_prefix``)."""
    from pathlib import Path
    target = Path(path)
    check_output_path(path, allowed, own_prefix=own_prefix)
    try:
        target.write_text(text)
    except OSError as err:
        raise UsageError(f"cannot write {path}: {err.strerror}") from None
