"""Backend discovery through the ``blockbuster.backends`` entry-point group.

Listing names reads package metadata only; a plugin is imported when it is asked for
(:func:`get_backend`) or when its status is wanted (:func:`list_backends`). Whatever a
plugin raises while loading is reported as "broken" with its error and never
propagated: one bad plugin must not take the tool down. (Modelled on xarray's backend
registry: lazy listing, duplicates warned, failures reported by name and reason.)
"""

from __future__ import annotations

import importlib.metadata
import warnings

import attrs

from ..errors import BackendError
from .base import Backend

GROUP = "blockbuster.backends"


@attrs.frozen
class BackendInfo:
    """One line of ``list_backends()``: status is "ok" or "broken" (then ``error`` says why)."""

    name: str
    description: str
    status: str
    error: str = ""


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Entry points by name; the first registration of a name wins."""
    found: dict[str, importlib.metadata.EntryPoint] = {}
    # Looked up through the module at call time, so tests can substitute their own.
    for ep in importlib.metadata.entry_points(group=GROUP):
        first = found.get(ep.name)
        if first is None:
            found[ep.name] = ep
        elif first.value != ep.value:
            # The same distribution seen twice on sys.path repeats an identical entry
            # point: harmless, so only a real conflict is worth a warning.
            warnings.warn(f"backend '{ep.name}' is registered twice ({first.value} and "
                          f"{ep.value}); using {first.value}", RuntimeWarning, stacklevel=3)
    return found


def backend_names() -> list[str]:
    """Names of the registered backends, without importing any plugin."""
    return sorted(_entry_points())


def _load(ep: importlib.metadata.EntryPoint) -> Backend:
    obj = ep.load()
    if not isinstance(obj, Backend) and callable(obj):
        obj = obj()  # a zero-argument factory
    if not isinstance(obj, Backend):
        raise TypeError(f"entry point {ep.value} gives a {type(obj).__name__}, not a Backend")
    return obj


def _try_load(ep: importlib.metadata.EntryPoint) -> tuple[Backend | None, str]:
    """The backend, or None and ``"ExceptionType: message"`` on one line."""
    try:
        return _load(ep), ""
    except Exception as err:  # ImportError, SyntaxError, a factory's own bug, ...
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        return None, f"{type(err).__name__}: {'; '.join(lines)}"


def list_backends() -> list[BackendInfo]:
    """Every registered backend with its status (this imports each plugin)."""
    infos = []
    for name, ep in sorted(_entry_points().items()):
        backend, error = _try_load(ep)
        if backend is None:
            infos.append(BackendInfo(name, f"(entry point {ep.value})", "broken", error))
        else:
            infos.append(BackendInfo(name, backend.description, "ok"))
    return infos


def get_backend(name: str) -> Backend:
    entry_points = _entry_points()
    ep = entry_points.get(name)
    if ep is None:
        available = ", ".join(sorted(entry_points)) or "none"
        raise BackendError(f"unknown backend '{name}' (available: {available})")
    backend, error = _try_load(ep)
    if backend is None:
        raise BackendError(f"backend '{name}' is broken: {error}")
    return backend


def default_backend_name() -> str:
    """"numba" when a working Numba plugin is installed, else "reference"."""
    ep = _entry_points().get("numba")
    if ep is not None and _try_load(ep)[0] is not None:
        return "numba"
    return "reference"
