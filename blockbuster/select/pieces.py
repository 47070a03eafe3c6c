"""The pieces candidate selection works with, and how they go back together.

A :class:`Part` is a piece while selection works (original kernels ``[start,
stop)`` fused into preparation and per-call kernels); a :class:`Piece` is what the
result reports. :func:`assemble` puts the chosen parts back into one program;
:func:`fresh_names` keeps what two fusions created (``prep1``...) apart.
"""

from __future__ import annotations

import attrs

from ..ir.program import Kernel, Program
from .extract import rename, sub_program


@attrs.frozen
class Piece:
    """One chosen candidate: kernels ``[start, stop)`` of the input program."""

    start: int
    stop: int
    kernels: tuple[str, ...]          # the original kernels it covers
    program: Program                  # its fused form, in the program's own names
    rules: dict                       # rule -> applications that built it
    cost: float                       # modeled seconds

    def describe(self) -> str:
        fused = ", ".join(k.name for k in self.program.kernels)
        rules = ", ".join(f"{r}×{n}" for r, n in self.rules.items()) or "no rules"
        return (f"kernels {self.start}..{self.stop - 1} ({len(self.kernels)}) -> "
                f"{fused}: {rules}")


@attrs.frozen
class Part:
    """A piece while selection works: original kernels ``[start, stop)`` fused into
    ``prep`` (weight preparation, done once) and ``call`` kernels, the arrays the
    fusion declared, and what it costs per call."""

    start: int
    stop: int
    prep: tuple[Kernel, ...]
    call: tuple[Kernel, ...]
    arrays: tuple                     # GlobalArray declarations its kernels use
    rules: dict
    steps: tuple
    stop_reason: str
    price: float                      # cost-model objective (per call)
    per_call_bytes: int


def names_of(program: Program) -> set[str]:
    return {a.name for a in program.arrays} | {k.name for k in program.kernels}


def fresh_names(piece: Program, known: set[str], suffix: str) -> Program:
    """Arrays and kernels a fusion created (weight preparation) get names unique to
    their piece: two pieces may each have made a ``prep1``."""
    arrays = {a.name: a.name + suffix for a in piece.arrays if a.name not in known}
    kernels = {k.name: k.name + suffix for k in piece.kernels if k.name not in known}
    return rename(piece, arrays, kernels) if arrays or kernels else piece


def worst_stop(reasons) -> str:
    reasons = list(reasons)
    return next((r for r in reasons if r != "saturated"), "saturated")


def declarations(program: Program, parts: list[Part]) -> Program:
    """``program`` declaring every array the pieces use (those fusion created too)."""
    known = {a.name for a in program.arrays}
    created = {}
    for p in parts:
        for a in p.arrays:
            if a.name not in known:
                created.setdefault(a.name, a)
    return program.evolve(arrays=program.arrays + tuple(created.values()))


def assemble(program: Program, parts: list[Part]) -> Program:
    """The pieces in order; preparation nobody reads any more (a merge re-derived it)
    is dropped."""
    kernels = [k for p in parts for k in p.prep + p.call]
    preps = {k.name for p in parts for k in p.prep}
    while True:
        read = set(program.outputs).union(*(k.reads() for k in kernels))
        dead = [k for k in kernels if k.name in preps and not set(k.writes()) & read]
        if not dead:
            break
        kernels = [k for k in kernels if k not in dead]
    live = {a for k in kernels for a in k.writes()} | set(program.inputs) | set(program.outputs)
    decls = declarations(program, parts)
    return program.evolve(kernels=tuple(kernels),
                          arrays=tuple(a for a in decls.arrays if a.name in live))


def read_counts(kernels) -> dict[str, int]:
    """Array -> how many of ``kernels`` read it."""
    counts: dict[str, int] = {}
    for k in kernels:
        for a in k.reads():
            counts[a] = counts.get(a, 0) + 1
    return counts


def report_piece(program: Program, fused: Program, part: Part,
                 readers: dict[str, int]) -> Piece:
    mine = {k.name for k in part.prep + part.call}
    kernels = [k for k in fused.kernels if k.name in mine]
    # What the rest of the program reads: an array some kernel outside reads (counted
    # once for the whole program, not by scanning the rest for every piece).
    inside = read_counts(kernels)
    later = {a for k in kernels for a in k.writes() if readers.get(a, 0) > inside.get(a, 0)}
    return Piece(part.start, part.stop,
                 tuple(k.name for k in program.kernels[part.start:part.stop]),
                 sub_program(fused, kernels, (), f"{program.name}[{part.start}:{part.stop}]",
                             later=later),
                 part.rules, part.price)
