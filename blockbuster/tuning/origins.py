"""What the public API remembers about the programs it made, so that ``compile`` can
choose their blocks: a program's :class:`~.tuner.Tunable` by identity.

Apart from :mod:`.targets` (which imports the built-in workloads): the builder
registers its programs here, and the workloads import the builder.
"""

from __future__ import annotations

import weakref

from ..ir.printer import format_program
from ..ir.program import Program
from .tuner import Tunable


def reblock_tunable(program: Program, free) -> Tunable | None:
    """Tune the blocks of the ``free`` dimensions of a program whose kernels do not
    depend on its block sizes (a :class:`~blockbuster.frontend.builder.GraphBuilder`
    program without heads, slices, concatenation or ``rotate_half``, whose
    dimensions were declared without a block): every candidate is the same program at
    other blocks, verified (an assignment that makes a reduction ragged is refused)."""
    from ..ir.types import Dim
    from ..ir.verify import verify
    tuned = {d.name: d.size for d in program.dims if d.name in free and not d.point}
    if not tuned:
        return None
    initial = {d: program.dim(d).block for d in tuned}

    def derive(blocks: dict) -> Program:
        dims = tuple(Dim(d.name, d.size, min(blocks.get(d.name, d.block), d.size), d.point)
                     for d in program.dims)
        return verify(program.evolve(dims=dims))
    return Tunable(program.name, format_program(program), tuned, initial, derive)


# --- what the public API remembers about the programs it made ---------------------------

#: id(program) -> (a weak reference to it, how to rebuild it with other blocks of its
#: free dimensions). Filled by ``blockbuster.workload``, ``blockbuster.fuse`` and
#: ``GraphBuilder.build`` (:func:`reblock_tunable`). By identity, not equality: a
#: program parsed from text is compiled as it is, even when it equals one the API
#: made; a program nobody holds is forgotten.
_ORIGINS: dict[int, tuple] = {}


def remember(program: Program, tunable: Tunable) -> Program:
    key = id(program)
    try:
        # (the table bound now: at exit the module's globals may be gone first)
        ref = weakref.ref(program, lambda _r, table=_ORIGINS: table.pop(key, None))
    except TypeError:
        return program
    _ORIGINS[key] = (ref, tunable)
    return program


def origin(program: Program) -> Tunable | None:
    """How ``program`` was made, if the public API made it (else None)."""
    entry = _ORIGINS.get(id(program))
    if entry is None or entry[0]() is not program:
        return None
    return entry[1]
