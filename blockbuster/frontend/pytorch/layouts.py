"""The dtype and strides PyTorch gives a compiled region's outputs, and the
region's contiguous results laid out so (:mod:`.dynamo`)."""

from __future__ import annotations


def output_layouts(graph) -> list:
    """The dtype and strides PyTorch gives each output of ``graph`` (a float64
    model's outputs stay float64, a mask stays bool; a head view's transpose keeps
    its strides); None where unknown."""
    node = next(n for n in graph.nodes if n.op == "output")
    outs = node.args[0] if isinstance(node.args[0], (list, tuple)) else [node.args[0]]
    vals = [getattr(o, "meta", {}).get("val") for o in outs]
    return [(getattr(v, "dtype", None), _stride(v)) for v in vals]


def _stride(val):
    try:
        return tuple(int(s) for s in val.stride())
    except (AttributeError, TypeError, RuntimeError):
        return None                       # not a tensor, or symbolic strides


def as_traced(t, stride):
    """``t`` (contiguous) laid out with the strides the traced graph gave it: the
    code after a region (a ``view`` left to PyTorch, or traced into the next
    region) was traced for those strides (a transposed head view merged back by a
    ``view``) and fails on others. Overlapping strides (an expanded output) stay
    contiguous."""
    import torch
    if stride is None or len(stride) != t.dim() or stride == tuple(t.stride()):
        return t
    dims = sorted((s, n) for s, n in zip(stride, t.shape) if n != 1)
    expected = 1
    for s, n in dims:                    # non-overlapping and dense: a permutation
        if s != expected:
            return t
        expected *= n
    return torch.empty_strided(tuple(t.shape), stride, dtype=t.dtype).copy_(t)
