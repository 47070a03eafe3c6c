"""Cutting a program into candidate sub-programs and putting fused pieces back.

A candidate is a run of consecutive kernels in the program's (topological) kernel
order (or of consecutive fused pieces): any path between two of its kernels stays
inside it, so fusing it can never create a cycle. Its inputs are the arrays it reads but does not write; its outputs
the arrays it writes that the rest of the program (or the caller) reads.
"""

from __future__ import annotations

import attrs

from ..ir.expr import Expr, LoadAttr
from ..ir.kernel_key import array_order, named_dims, rename_kernel, structure_number
from ..ir.program import Kernel, Program
from ..ir.types import GlobalArray
from ..ir.walk import map_expr


def segment_program(program: Program, start: int, stop: int,
                    last_reads: dict[str, int] | None = None) -> Program:
    """The kernels ``[start, stop)`` as a program of their own. ``last_reads`` (from
    :func:`last_reads`, for many segments of one program) saves scanning the kernels
    after ``stop`` for each."""
    if last_reads is None:
        return sub_program(program, program.kernels[start:stop], program.kernels[stop:],
                           f"{program.name}[{start}:{stop}]")
    kernels = program.kernels[start:stop]
    return sub_program(program, kernels, (), f"{program.name}[{start}:{stop}]",
                       later={a for k in kernels for a in k.writes()
                              if last_reads.get(a, -1) >= stop})


class Segments:
    """``segment_program(program, start, stop)`` for many segments of one large
    program: its declarations are indexed once, so a segment costs its own kernels,
    not a scan of every array the program declares."""

    def __init__(self, program: Program):
        self.program = program
        self.reads = last_reads(program)
        self.arrays = program.array_map
        self.position = {a.name: i for i, a in enumerate(program.arrays)}
        self.weights = set(program.weights)
        self.outputs = set(program.outputs)

    def __call__(self, start: int, stop: int) -> Program:
        program = self.program
        kernels = program.kernels[start:stop]
        written = [a for k in kernels for a in k.writes()]
        wset = set(written)
        read = set().union(*(k.reads() for k in kernels))
        # The order ``sub_program`` gives: the program's declaration order.
        inputs = sorted((a for a in read if a not in wset and a in self.position),
                        key=self.position.__getitem__)
        outputs = [a for a in written
                   if self.reads.get(a, -1) >= stop or a in self.outputs]
        others = [a for a in written if a not in outputs]
        arrays = self.arrays
        used_dims = {d for n in inputs + written for d in arrays[n].dims}.union(
            *(named_dims(k) for k in kernels))
        return Program(f"{program.name}[{start}:{stop}]",
                       tuple(d for d in program.dims if d.name in used_dims),
                       tuple(arrays[n] for n in inputs + outputs + others),
                       tuple(inputs), tuple(outputs), tuple(kernels),
                       tuple(a for a in inputs if a in self.weights))


    def key(self, start: int, stop: int) -> tuple[tuple, dict[str, str], dict[str, str]]:
        """``canonical_key(self(start, stop))``, without building the segment: a
        candidate met before (the same part of another layer) costs this."""
        program = self.program
        kernels = program.kernels[start:stop]
        written = [a for k in kernels for a in k.writes()]
        wset = set(written)
        position = self.position
        # ``array_order`` of each kernel gives what it reads too (first use order).
        first: dict[str, int] = {}
        for k in kernels:
            for a in array_order(k):
                first.setdefault(a, len(first))
        inputs = sorted((a for a in first if a not in wset and a in position),
                        key=position.__getitem__)
        inputs.sort(key=first.__getitem__)          # stable: ``canonical``'s order
        outputs = [a for a in written
                   if self.reads.get(a, -1) >= stop or a in self.outputs]
        others = [a for a in written if a not in outputs]
        order = inputs + outputs + others
        arrays = self.arrays
        used_dims = {d for n in order for d in arrays[n].dims}.union(
            *(named_dims(k) for k in kernels))
        names = {n: f"a{i}" for i, n in enumerate(order)}
        n_inputs = len(inputs)
        weights = self.weights
        key = (tuple(d for d in program.dims if d.name in used_dims),
               tuple(arrays[n].dims for n in order),
               tuple(i < n_inputs for i in range(len(order))),
               tuple(names[n] for n in outputs),
               tuple((structure_number(k), tuple([names.get(a, a) for a in array_order(k)]))
                     for k in kernels),
               tuple(i < n_inputs and n in weights for i, n in enumerate(order)))
        return (key, {v: n for n, v in names.items()},
                {f"k{i}": k.name for i, k in enumerate(kernels)})


def last_reads(program: Program) -> dict[str, int]:
    """Each array read by a kernel -> the index of the last kernel that reads it."""
    return {a: i for i, k in enumerate(program.kernels) for a in k.reads()}


def sub_program(program: Program, kernels, rest, name: str,
                later: set[str] | None = None) -> Program:
    """``kernels`` (a run that no kernel of ``rest`` sits inside: anything they read
    from ``rest`` is written before them) as a program of their own: its inputs are
    what they read and do not write, its outputs what they write that ``rest`` reads
    or the caller wants. ``program`` declares every array involved."""
    written = [a for k in kernels for a in k.writes()]
    read = set().union(*(k.reads() for k in kernels))
    inputs = [a.name for a in program.arrays
              if a.name in read and a.name not in written]
    if later is None:
        later = set().union(*(k.reads() for k in rest))
    outputs = [a for a in written if a in later or a in program.outputs]
    others = [a for a in written if a not in outputs]
    arrays = program.array_map
    used_dims = {d for n in inputs + written for d in arrays[n].dims}.union(
        *(named_dims(k) for k in kernels))
    return Program(name,
                   tuple(d for d in program.dims if d.name in used_dims),
                   tuple(arrays[n] for n in inputs + outputs + others),
                   tuple(inputs), tuple(outputs), tuple(kernels),
                   tuple(a for a in inputs if a in program.weights))


def feeds(first, second) -> bool:
    """Whether kernels ``second`` read an array kernels ``first`` write, or the two
    read an array in common (siblings sharing loads)."""
    written = {a for k in first for a in k.writes()}
    read_first = set().union(*(k.reads() for k in first))
    read_second = set().union(*(k.reads() for k in second))
    return bool(read_second & (written | read_first))


def connected_spans(program: Program, window: int) -> set[tuple[int, int]]:
    """Every ``(start, stop)`` with ``1 < stop - start <= window`` for which
    ``connected(program, start, stop)``: for each ``stop`` the kernels are added one by
    one going back, joined to the readers and writers already in the run."""
    n = len(program.kernels)
    writers: dict[str, list[int]] = {}
    readers: dict[str, list[int]] = {}
    for i, k in enumerate(program.kernels):
        for a in k.writes():
            writers.setdefault(a, []).append(i)
        for a in k.reads():
            readers.setdefault(a, []).append(i)
    if any(len(w) > 1 for w in writers.values()):     # ill-formed: ask one by one
        return {(i, j) for j in range(n + 1) for i in range(max(0, j - window), j - 1)
                if connected(program, i, j)}
    out = set()
    for stop in range(2, n + 1):
        parent: dict[int, int] = {}

        def find(i):
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        parts = 0
        for start in range(stop - 1, max(0, stop - window) - 1, -1):
            parent[start] = start
            parts += 1
            k = program.kernels[start]
            others = [m for a in k.writes() for m in readers.get(a, ()) if start < m < stop]
            others += [w for a in k.reads() for w in writers.get(a, ()) if start < w < stop]
            for m in others:
                a, b = find(start), find(m)
                if a != b:
                    parent[a] = b
                    parts -= 1
            if parts == 1 and stop - start > 1:
                out.add((start, stop))
    return out


def connected(program: Program, start: int, stop: int) -> bool:
    """Whether the kernels ``[start, stop)`` form one piece along dataflow edges."""
    kernels = program.kernels[start:stop]
    parent = list(range(len(kernels)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    writer = {a: i for i, k in enumerate(kernels) for a in k.writes()}
    for i, k in enumerate(kernels):
        for a in k.reads():
            if a in writer:
                parent[find(i)] = find(writer[a])
    return len({find(i) for i in range(len(kernels))}) == 1


# --- renaming (canonical forms for the fusion cache) ----------------------------------

def rename(program: Program, arrays: dict[str, str], kernels: dict[str, str]) -> Program:
    """The same program with arrays and kernels renamed."""
    def load(n: Expr) -> Expr | None:
        if n.op != "load":
            return None
        return Expr("load", (), LoadAttr(arrays.get(n.attr.array, n.attr.array), n.attr.index))

    memo: dict[Expr, Expr] = {}

    def go(n: Expr) -> Expr:
        return map_expr(n, load, memo)

    def kernel(k: Kernel) -> Kernel:
        stores = tuple(attrs.evolve(s, array=arrays.get(s.array, s.array), value=go(s.value))
                       for s in k.stores)
        return attrs.evolve(k, name=kernels.get(k.name, k.name), stores=stores)

    return program.evolve(
        arrays=tuple(GlobalArray(arrays.get(a.name, a.name), a.dims) for a in program.arrays),
        inputs=tuple(arrays.get(n, n) for n in program.inputs),
        outputs=tuple(arrays.get(n, n) for n in program.outputs),
        weights=tuple(arrays.get(n, n) for n in program.weights),
        kernels=tuple(kernel(k) for k in program.kernels))


def _canonical_names(program: Program) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """``canonical``'s renaming: (arrays in canonical order, array -> canonical name,
    kernel -> canonical name)."""
    # Inputs are numbered in order of first use, not of declaration: the input that
    # carries the activations into a layer is declared first in the first layer
    # (the program's input) and after the weights in the others (the previous
    # layer's output), and the same part of two layers must name it alike.
    first: dict[str, int] = {}
    for k in program.kernels:
        for a in array_order(k):
            first.setdefault(a, len(first))
    inputs = set(program.inputs)
    order = ([a for a in sorted(program.inputs, key=lambda n: first.get(n, len(first)))]
             + [a.name for a in program.arrays if a.name not in inputs])
    arrays = {n: f"a{i}" for i, n in enumerate(order)}
    kernels = {k.name: f"k{i}" for i, k in enumerate(program.kernels)}
    return order, arrays, kernels


def canonical_key(program: Program) -> tuple[tuple, dict[str, str], dict[str, str]]:
    """(a key equal for two programs exactly when ``canonical`` makes them equal, the
    two inverse maps): what ``canonical`` gives, without building the renamed program
    (a candidate met before, e.g. the same part of another layer, costs this key)."""
    order, arrays, kernels = _canonical_names(program)
    decl = program.array_map
    inputs, weights = set(program.inputs), set(program.weights)
    key = (program.dims,
           tuple(decl[n].dims for n in order),
           tuple(n in inputs for n in order),
           tuple(arrays.get(n, n) for n in program.outputs),
           tuple((structure_number(k), tuple([arrays.get(a, a) for a in array_order(k)]))
                 for k in program.kernels),
           tuple(n in weights for n in order))
    return key, {v: k for k, v in arrays.items()}, {v: k for k, v in kernels.items()}


def canonical(program: Program) -> tuple[Program, dict[str, str], dict[str, str]]:
    """A renaming that makes structurally identical programs (e.g. the same part of two
    layers with their own weights) equal; returns it with the two inverse maps."""
    order, arrays, kernels = _canonical_names(program)
    inputs = set(program.inputs)
    decl = program.array_map
    # ``rename``, kernel by kernel through the name-free kernel memo: a kernel met
    # before under other names (another candidate, another layer) costs a lookup.
    canon = Program(
        "candidate", program.dims,
        tuple(GlobalArray(arrays[n], decl[n].dims) for n in order),
        tuple(arrays[n] for n in order if n in inputs),
        tuple(arrays.get(n, n) for n in program.outputs),
        tuple(rename_kernel(k, arrays, kernels[k.name]) for k in program.kernels),
        tuple(arrays[n] for n in order if n in set(program.weights)), program.params)
    return canon, {v: k for k, v in arrays.items()}, {v: k for k, v in kernels.items()}
