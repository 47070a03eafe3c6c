"""Importing PyTorch models: ``torch.export`` → ATen graph → unfused block program."""

from __future__ import annotations

from .dims import ImportError_


def lower_module(fn, *example_inputs, blocks=None, name=None):
    """Capture and lower; returns a :class:`.lower.Lowered` (program, boundaries,
    weight values)."""
    from .capture import export
    from .lower import lower, source_from_export
    from .output_names import named_outputs, output_paths
    ep = export(fn, example_inputs)
    name = name or getattr(fn, "__name__", None) or type(fn).__name__
    name = "".join(ch if ch.isalnum() else "_" for ch in str(name)) or "model"
    return named_outputs(lower(source_from_export(ep, example_inputs), name, blocks),
                         output_paths(ep))


__all__ = ["ImportError_", "from_torch", "lower_module"]


def from_torch(fn, *example_inputs, weights: str = "bind", blocks=None, name=None):
    """The unfused block program of a PyTorch function or ``nn.Module``.

    Captured with ``torch.export`` at ``example_inputs`` (their shapes fix the
    program's sizes). Parameters and buffers become ``weight`` inputs; with
    ``weights="bind"`` (the default) their values travel with the program
    (``program.params``), so ``bb.compile(program)(x=...)`` needs only the inputs;
    ``weights="inputs"`` leaves them for the caller to pass. Graph inputs become
    ``input`` arrays named after the function's arguments, outputs keep their order
    and are named after where a dict, tuple or ``ModelOutput`` returns them
    (``logits``, ``pair_0``; one tensor keeps its node's name)
    (a module whose ``forward`` takes ``use_cache`` and is not given it, a Hugging
    Face decoder, is called with ``use_cache=False``: no key/value cache output).
    Size-1 axes are not stored (a ``[1, T, E]`` input is the array ``[T, E]``; the
    compiled program accepts either shape). ``blocks`` sets block sizes by
    dimension name (dimensions are named by size: ``N64``, a second ``N64b``, heads
    ``H``, head size ``HD``).
    """
    if weights not in ("bind", "inputs"):
        raise ImportError_(f"from_torch: weights must be 'bind' or 'inputs', got {weights!r}")
    low = lower_module(fn, *example_inputs, blocks=blocks, name=name)
    if weights == "inputs":
        return low.program
    return low.program.evolve(params=dict(low.weights))
