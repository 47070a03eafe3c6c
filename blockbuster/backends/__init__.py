"""Backends: the interface (:mod:`.base`), discovery through entry points
(:mod:`.registry`) and the NumPy reference interpreter (:mod:`.reference`, loaded
through its entry point like any plugin)."""

from .base import Backend, CompiledProgram
from .registry import (BackendInfo, backend_names, default_backend_name, get_backend,
                       list_backends)

__all__ = ["Backend", "CompiledProgram", "BackendInfo", "backend_names",
           "default_backend_name", "get_backend", "list_backends"]
