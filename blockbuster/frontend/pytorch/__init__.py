"""Importing PyTorch models: ``torch.export`` → ATen graph → unfused block program."""

from __future__ import annotations

from .dims import ImportError_


def lower_module(fn, *example_inputs, blocks=None, name=None):
    """Capture and lower; returns a :class:`.lower.Lowered` (program, boundaries,
    weight values)."""
    from .capture import export
    from .lower import lower
    ep = export(fn, example_inputs)
    name = name or type(fn).__name__ if not callable(getattr(fn, "__name__", None)) else fn.__name__
    name = "".join(ch if ch.isalnum() else "_" for ch in str(name)) or "model"
    return lower(ep, example_inputs, name, blocks)


__all__ = ["ImportError_", "lower_module"]
