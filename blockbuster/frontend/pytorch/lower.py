"""Lowering an exported ATen graph to an unfused block program.

Nodes that do not depend on a graph input (rotary tables from position ids, masks
built from ``arange``, weight arithmetic) are evaluated once with PyTorch at import
and become weights: the program computes only what changes per call. Every other
node goes through :data:`.aten.HANDLERS` (one entry per ATen operator); anything
else is an error naming the operator and the model's source line.
"""

from __future__ import annotations

import attrs
import numpy as np

from ...ir.index import IVar
from ...ir.program import Program, dims_named_by
from ...ir.verify import verify
from ..tensors.kernels import KernelEmitter
from ..tensors.values import Value, scalar
from . import aten
from .capture import source_line
from ..tensors.errors import UnalignedSlice
from .dims import DimPlanner, ImportError_


@attrs.frozen
class Boundary:
    """How a program array relates to a PyTorch tensor: its torch shape (the array
    stores the non-broadcast axes, in order)."""

    name: str
    shape: tuple[int, ...]


@attrs.frozen
class GraphSource:
    """What the lowering reads: an ATen graph, the role of each placeholder
    (``USER_INPUT`` or ``PARAMETER``/``BUFFER``/``CONSTANT_TENSOR``), a display name
    per parameter, and every node's value at the example inputs (for folding)."""

    graph: object
    kind: dict
    target: dict
    recorded: dict


def source_from_export(ep, example_inputs, parameters=()) -> GraphSource:
    """The graph of an ExportedProgram; user inputs whose positions are in
    ``parameters`` count as parameters (torch.compile passes parameters as inputs)."""
    specs = ep.graph_signature.input_specs
    kind = {s.arg.name: s.kind.name for s in specs if hasattr(s.arg, "name")}
    target = {s.arg.name: s.target for s in specs if hasattr(s.arg, "name")}
    users = [s.arg.name for s in specs if s.kind.name == "USER_INPUT"]
    for i in parameters:
        kind[users[i]] = "PARAMETER"
        target[users[i]] = users[i]
    return GraphSource(ep.graph, kind, target, record_values(ep, example_inputs))


@attrs.frozen
class Lowered:
    program: Program
    inputs: tuple[Boundary, ...]
    outputs: tuple[Boundary, ...]
    weights: dict            # array name -> np.ndarray (stored layout)
    #: Dimensions whose block the graph fixes (an axis split into heads, a slice):
    #: the others are free to tune.
    fixed_blocks: frozenset = frozenset()


class Lowering:
    """One pass over the graph (planning or emitting; see :mod:`.dims`)."""

    def __init__(self, source: GraphSource, planner: DimPlanner, name: str,
                 by_selection: frozenset = frozenset()):
        self.graph = source.graph
        # slice nodes a first lowering found off block boundaries: their slices of
        # a stored axis are selections (``aten_indexing.unaligned_slice``)
        self.by_selection = by_selection
        self.recorded = source.recorded   # node name -> torch value (folding)
        self.planner = planner
        self.k = KernelEmitter(planner)
        self.name = name
        self.values: dict[str, Value] = {}
        self.inputs: list[Boundary] = []
        self.weights: dict[str, np.ndarray] = {}
        self.weight_order: list[str] = []
        self.kind, self.target = source.kind, source.target
        self.dynamic = input_dependent(self.graph, self.kind)
        self.absorbed = aten.absorbed_nodes(self.graph, self.dynamic)

    # -- values of nodes --------------------------------------------------------------
    def value(self, node) -> Value:
        """The lowered value of an FX node (folding constants on first use)."""
        hit = self.values.get(node.name)
        if hit is not None:
            return hit
        if node.name in self.dynamic:
            raise ImportError_(f"internal: {node.name} used before it was lowered")
        v = self._fold(node)
        self.values[node.name] = v
        return v

    def _fold(self, node) -> Value:
        t = self.recorded.get(node.name)
        if t is None or not hasattr(t, "shape"):
            raise ImportError_(f"{node.name}: a constant that is not a tensor")
        if t.numel() == 0:            # an empty cache, a zero-length slice
            return aten.Empty(tuple(int(s) for s in t.shape))
        arr = t.detach().to("cpu").double().numpy() if t.dtype.is_floating_point or \
            t.dtype == _torch().bool else t.detach().to("cpu").numpy().astype(np.float64)
        if arr.size == 1 and (arr.ndim == 0 or self.kind.get(node.name) is None):
            return scalar(float(arr.reshape(())))
        hint = self.target.get(node.name) or f"const_{node.name}"
        return self._array(node, hint, tuple(arr.shape), weight=arr)

    def constant(self, node, hint: str, arr: np.ndarray) -> Value:
        """A constant array the import itself makes (a selection matrix): a weight."""
        return self._array(node, hint, tuple(arr.shape), weight=arr)

    def _array(self, node, hint: str, shape: tuple, weight=None) -> Value:
        keep = _kept_unit_axes(shape) if weight is None else ()
        axes = tuple(self.planner.new(s, "") if s != 1 or p in keep else None
                     for p, s in enumerate(shape))
        name = self.k.fresh(hint)
        v = self.k.declare(name, shape, axes)
        self.k.mark_block_axes(axes)
        if weight is not None:
            self.weights[name] = np.ascontiguousarray(
                weight.reshape([s for s in shape if s != 1]) if weight.ndim else weight,
                dtype=np.float32)
            self.weight_order.append(name)
        return v

    # -- the walk -------------------------------------------------------------------------
    def run(self) -> tuple:
        outputs: list = []
        for node in self.graph.nodes:
            if node.op == "placeholder":
                if self.kind.get(node.name) == "USER_INPUT" and \
                        hasattr(node.meta.get("val"), "shape"):
                    shape = tuple(int(s) for s in node.meta["val"].shape)
                    if 0 in shape:
                        raise ImportError_(f"input '{node.name}' is empty (shape "
                                           f"{shape}): a block program's sizes are at "
                                           f"least 1")
                    v = self._array(node, node.name, shape)
                    self.values[node.name] = v
                    self.inputs.append(Boundary(v.array, shape))
            elif node.op == "call_function":
                if node.name in self.dynamic and node.name not in self.absorbed:
                    self.values[node.name] = self._lower(node)
            elif node.op == "output":
                outputs = list(node.args[0]) if isinstance(node.args[0], (list, tuple)) \
                    else [node.args[0]]
        return self._finish(outputs)

    def _lower(self, node) -> Value:
        target = str(node.target)
        handler = aten.HANDLERS.get(target)
        where = source_line(node)
        if handler is None:
            raise ImportError_(f"{where}: unsupported operator {target} "
                               f"(node {node.name})", node=node.name)
        if _empty(node):              # e.g. the pass-through part of a full rotary
            return aten.Empty(tuple(int(s) for s in node.meta["val"].shape))
        args = [self._arg(a) for a in node.args]
        kwargs = {k: self._arg(a) for k, a in node.kwargs.items()}
        if target not in aten.TAKES_EMPTY and any(
                isinstance(a, aten.Empty) for a in _flat(args, kwargs)):
            raise ImportError_(f"{where}: {target}: an empty tensor operand "
                               f"(node {node.name})", node=node.name)
        try:
            out = handler(self, node, *args, **kwargs)
        except ImportError_ as exc:
            msg = str(exc)
            raise type(exc)(msg if msg.startswith(where) else f"{where}: {target}: {msg}",
                            node=node.name) from None
        return out

    def _arg(self, a):
        fx = _torch().fx
        if isinstance(a, fx.Node):
            if a.name in self.absorbed:
                return a                       # read structurally by its consumer
            if a.name in self.dynamic:
                return self.values[a.name]
            return self.value(a)               # a constant: folded on first use
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a)
        return a

    def _constant_output(self, node, v: Value, i: int) -> Value:
        """A number the graph returns that does not depend on the inputs (a region's
        output that eager PyTorch reads after it: DiffLlama's lambda from its
        parameters): an array of that value, shaped as the graph's tensor."""
        t = self.recorded.get(node.name)
        shape = tuple(int(s) for s in getattr(t, "shape", ()))
        arr = np.full(shape, v.scalar, dtype=np.float64)
        return self._array(node, f"const_out{i}", shape, weight=arr)

    def _finish(self, outputs: list) -> tuple:
        bounds, names = [], []
        for i, node in enumerate(outputs):
            # a size (an int a graph under dynamic shapes returns) is no array
            v = self.value(node) if isinstance(node, _torch().fx.Node) else None
            if isinstance(v, Value) and v.loader is None and node.name not in self.dynamic:
                v = self._constant_output(node, v, i)
            if v is None or isinstance(v, aten.Empty) or v.loader is None:
                raise ImportError_(f"output {i} is {_not_an_array(node, v)}: a program "
                                   f"returns tensors computed from the inputs (return "
                                   f"only those)")
            if any(c is None and s != 1 for s, c in zip(v.shape, v.axes)):
                raise ImportError_(f"{source_line(node)}: output {i} ({node.name}, shape "
                                   f"{list(v.shape)}) is expanded by broadcasting: "
                                   f"return it before the expand", node=node.name)
            name = v.array
            if not _plain(v, self.k) or name in names or name in self.weights or \
                    any(b.name == name for b in self.inputs):
                copy = v
                v = self.k.emit("copy", v.shape, v.axes,
                                lambda index, c=copy: self.k.block(c, index),
                                name=self.k.fresh(f"out{i}"))
            names.append(v.array)
            bounds.append(Boundary(v.array, v.shape))
        return tuple(bounds)


def _not_an_array(node, v) -> str:
    """What an output that is no array is, in words."""
    if node is None:
        return "None"
    if isinstance(node, (bool, int, float)):
        return f"the number {node!r}"
    if isinstance(v, aten.Empty):
        return f"empty (shape {list(v.shape)})"
    return "a constant (it does not depend on the inputs)"


def _kept_unit_axes(shape: tuple) -> tuple:
    """Size-1 axes of an input that are stored all the same: one of the last two
    (rows, columns) when the other is not size 1, so that one row ``[1, E]`` (or one
    column ``[T, 1]``) is still a matrix of blocks that rows can be reduced and
    normalised in, not a vector. Other size-1 axes (a leading batch of 1) are not
    stored."""
    if len(shape) < 2 or (shape[-1] == 1) == (shape[-2] == 1):
        return ()
    return (len(shape) - 2,) if shape[-2] == 1 else (len(shape) - 1,)


def _empty(node) -> bool:
    val = node.meta.get("val")
    return hasattr(val, "shape") and hasattr(val, "numel") and val.numel() == 0


def _flat(args, kwargs) -> list:
    out = []
    for a in list(args) + list(kwargs.values()):
        out.extend(a if isinstance(a, (list, tuple)) else [a])
    return out


def _plain(v: Value, k: KernelEmitter) -> bool:
    """Does ``v`` view a kernel's output array exactly as stored?"""
    if v.array is None or v.array not in k.arrays:
        return False
    stored = tuple(k.planner.dim(c).name for c in v.axes if c is not None)
    if stored != k.arrays[v.array].dims:
        return False
    probe = tuple(None if c is None else IVar(f"axis{p}") for p, c in enumerate(v.axes))
    e = v.load(probe)
    return e.op == "load" and tuple(e.attr.index) == tuple(i for i in probe if i is not None)


def _torch():
    import torch
    return torch


#: Operators whose value depends on their operand's shape only (sizes are fixed at
#: capture): ``torch.zeros_like(x)`` is a constant, folded at import.
SHAPE_ONLY = frozenset(f"aten.{op}.default" for op in (
    "full_like", "zeros_like", "ones_like", "new_zeros", "new_ones", "new_full"))


def input_dependent(graph, kind: dict) -> set:
    """The nodes computed anew on every call: those of the user's inputs, and random
    draws (``torch.rand`` in ``forward``), which folding would freeze into one
    constant draw (so they reach the lowering, which refuses them)."""
    dynamic = set()
    for node in graph.nodes:
        if node.op == "placeholder":
            if kind.get(node.name) == "USER_INPUT" and \
                    hasattr(node.meta.get("val"), "shape"):
                dynamic.add(node.name)
        elif node.op == "call_function" and str(node.target) in SHAPE_ONLY:
            continue
        elif node.op in ("call_function", "call_module"):
            if any(a.name in dynamic for a in node.all_input_nodes) or is_random(node):
                dynamic.add(node.name)
    return dynamic


def is_random(node) -> bool:
    """An ATen operator that draws random numbers (tagged ``nondeterministic_seeded``:
    ``rand``, ``randn_like``, ``bernoulli``, dropout in training mode, ...)."""
    torch = _torch()
    tag = getattr(torch.Tag, "nondeterministic_seeded", None)
    return tag is not None and tag in getattr(node.target, "tags", ())


def record_values(ep, example_inputs) -> dict:
    """Every node's value at the example inputs (constants fold from these)."""
    return record_graph(ep.graph_module, flat_inputs(ep, example_inputs))


def flat_inputs(ep, example_inputs) -> list:
    """The arguments of ``ep.graph_module``: user inputs, parameters, buffers."""
    state = {**ep.state_dict, **getattr(ep, "constants", {})}
    args = []
    user = iter(example_inputs)
    for spec in ep.graph_signature.input_specs:
        if spec.kind.name == "USER_INPUT":
            args.append(next(user))
        else:
            args.append(state[spec.target])
    return args


def record_graph(gm, args) -> dict:
    """Run ``gm`` on ``args``; every tensor-valued node's value, by node name."""
    torch = _torch()
    recorded = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            out = super().run_node(n)
            if isinstance(out, torch.Tensor):
                recorded[n.name] = out
            return out
    with torch.no_grad():
        Recorder(gm).run(*args)
    return recorded


def lower(source: GraphSource, name: str, blocks=None) -> Lowered:
    """The graph lowered to an unfused block program. A slice that turns out not
    to be whole blocks (q, k and v chunked out of a head, at cuts its blocks do not
    fall on; ``x[:, :-1]`` of 37 rows) is taken through a selection matrix in a new
    lowering, until none is left; one that still is not is an import error."""
    by_selection: set = set()
    while True:
        try:
            return _lower(source, name, blocks, frozenset(by_selection))
        except UnalignedSlice as exc:
            if exc.node is None or exc.node in by_selection:
                raise
            by_selection.add(exc.node)


def _lower(source: GraphSource, name: str, blocks, by_selection: frozenset) -> Lowered:
    planner = DimPlanner(blocks)
    Lowering(source, planner, name, by_selection).run()   # plan the dimensions
    try:
        planner.resolve()
    except ImportError_ as exc:            # blame the node (and the model's line)
        node = next((n for n in source.graph.nodes if n.name == exc.node), None)
        if node is None:
            raise
        raise type(exc)(f"{source_line(node)}: {node.target}: {exc}",
                        node=exc.node) from None
    low = Lowering(source, planner, name, by_selection)
    outputs = low.run()
    k = low.k
    k.kernels = _live(k.kernels, {b.name for b in outputs})
    # a folded constant no kernel reads (a causal mask recognised from its values,
    # which became the attention's causal range) is not a weight of the program
    read = set().union(*(kern.reads() for kern in k.kernels))
    weight_order = [w for w in low.weight_order if w in read]
    weights = {w: low.weights[w] for w in weight_order}
    in_names = tuple(b.name for b in low.inputs) + tuple(weight_order)
    out_names = tuple(b.name for b in outputs)
    written = {n for kern in k.kernels for n in kern.writes()}
    rest = tuple(n for n in k.arrays if n not in in_names and n not in out_names
                 and n not in low.weights and n in written)
    arrays = tuple(k.arrays[n] for n in in_names + out_names + rest)
    used = {d for a in arrays for d in a.dims} | dims_named_by(k.kernels)
    dims = tuple(d for d in planner.dims() if d.name in used)
    program = Program(name, dims, arrays, in_names, out_names, tuple(k.kernels),
                      tuple(weight_order))
    return Lowered(verify(program), tuple(low.inputs), outputs, weights,
                   frozenset(planner.fixed_blocks))


def _live(kernels: list, outputs: set) -> list:
    """The kernels an output depends on: a value the graph computes and nothing
    reads (a mask turned to bool whose use became an attention's causal range) is
    not a kernel of the program (fusion would find a piece with no outputs)."""
    needed, live = set(outputs), []
    for kern in reversed(kernels):
        if needed.intersection(kern.writes()):
            live.append(kern)
            needed |= kern.reads()
    return live[::-1]
