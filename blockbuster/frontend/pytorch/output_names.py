"""A captured model's outputs named after where it returns them.

``torch.export`` names a graph's outputs after the nodes that compute them (``add``,
``relu``, ``sum_1``); a model that returns a dict, a tuple or a Hugging Face
``ModelOutput`` says more: ``{"h": h, "pair": (a, b)}`` names its outputs ``h``,
``pair_0`` and ``pair_1``, and a ``ModelOutput`` ``logits`` or
``last_hidden_state``. :func:`named_outputs` renames the program's output arrays
so (a name taken by another array, or not an identifier, keeps the node's); a
model that returns one tensor keeps the node's name.
"""

from __future__ import annotations

import re

import attrs


def output_paths(ep) -> list[str] | None:
    """The name of each output leaf from the exported program's output structure
    (its pytree spec); None for a single tensor (no structure to name it by)."""
    spec = getattr(getattr(ep, "call_spec", None), "out_spec", None)
    if spec is None or spec.is_leaf():
        return None
    names = list(_leaf_paths(spec, ()))
    return ["_".join(path) for path in names] if len(names) == spec.num_leaves else None


def _leaf_paths(spec, prefix: tuple):
    """Each leaf's path of keys, in order: a dict's keys, a named tuple's or a
    ``ModelOutput``'s fields, else positions."""
    if spec.is_leaf():
        yield prefix
        return
    children = list(spec.children()) if hasattr(spec, "children") else list(spec.children_specs)
    context = spec.context
    keys = getattr(context, "_fields", context)
    if not isinstance(keys, (list, tuple)) or len(keys) != len(children):
        keys = range(len(children))
    for key, child in zip(keys, children):
        yield from _leaf_paths(child, prefix + (str(key),))


def named_outputs(low, names: list[str] | None):
    """``low`` (a :class:`.lower.Lowered`) with its outputs renamed to ``names`` (one
    per graph output, in order) where each is a free identifier."""
    from ...select.extract import rename
    if names is None or len(names) != len(low.outputs):
        return low
    p = low.program
    taken = {a.name for a in p.arrays} | {d.name for d in p.dims}
    mapping: dict[str, str] = {}
    for bound, new in zip(low.outputs, names):
        new = re.sub(r"\W", "_", new or "")
        if not new.isidentifier() or new in taken or new in mapping.values() \
                or bound.name in mapping:
            continue
        mapping[bound.name] = new
    if not mapping:
        return low
    outputs = tuple(attrs.evolve(b, name=mapping.get(b.name, b.name)) for b in low.outputs)
    return attrs.evolve(low, program=rename(p, mapping, {}), outputs=outputs)
