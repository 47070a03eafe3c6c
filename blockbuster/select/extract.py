"""Cutting a program into candidate sub-programs and putting fused pieces back.

A candidate is a run of consecutive kernels in the program's (topological) kernel
order: any path between two of its kernels stays inside it, so fusing it can never
create a cycle. Its inputs are the arrays it reads but does not write; its outputs
the arrays it writes that the rest of the program (or the caller) reads.
"""

from __future__ import annotations

from ..ir.kernel_key import named_dims, rename_kernel
from ..ir.program import Kernel, Program
from ..ir.types import GlobalArray


def segment_program(program: Program, start: int, stop: int) -> Program:
    """The kernels ``[start, stop)`` as a program of their own."""
    kernels = program.kernels[start:stop]
    last_read, arrays, position, outputs, weights = _index(program)
    written = [a for k in kernels for a in k.writes()]
    mine = set(written)
    read = set().union(*(k.reads() for k in kernels))
    inputs = sorted((a for a in read if a in arrays and a not in mine), key=position.get)
    # read by a later kernel (the last reader comes at or after ``stop``) or the caller
    kept = [a for a in written if last_read.get(a, -1) >= stop or a in outputs]
    rest = [a for a in written if a not in kept]
    used_dims = {d for n in inputs + written for d in arrays[n].dims}
    used_dims.update(*(named_dims(k) for k in kernels))
    return Program(f"{program.name}[{start}:{stop}]",
                   tuple(d for d in program.dims if d.name in used_dims),
                   tuple(arrays[n] for n in inputs + kept + rest),
                   tuple(inputs), tuple(kept), tuple(kernels),
                   tuple(a for a in inputs if a in weights))


# Selection cuts thousands of candidates from one program: what each cut asks of the
# whole program (who reads an array last, the declarations) is computed once.
_INDEXES: dict = {}


def _index(program: Program) -> tuple:
    hit = _INDEXES.get(program)
    if hit is None:
        last_read: dict[str, int] = {}
        for pos, k in enumerate(program.kernels):
            for a in k.reads():
                last_read[a] = pos
        hit = (last_read, program.array_map, {a.name: i for i, a in enumerate(program.arrays)},
               frozenset(program.outputs), frozenset(program.weights))
        if len(_INDEXES) >= 8:
            _INDEXES.clear()
        _INDEXES[program] = hit
    return hit


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
    def kernel(k: Kernel) -> Kernel:
        # cached per name-free kernel: the same kernel of another layer is a lookup
        return rename_kernel(k, arrays, kernels.get(k.name, k.name))

    return program.evolve(
        arrays=tuple(GlobalArray(arrays.get(a.name, a.name), a.dims) for a in program.arrays),
        inputs=tuple(arrays.get(n, n) for n in program.inputs),
        outputs=tuple(arrays.get(n, n) for n in program.outputs),
        weights=tuple(arrays.get(n, n) for n in program.weights),
        kernels=tuple(kernel(k) for k in program.kernels))


def canonical(program: Program) -> tuple[Program, dict[str, str], dict[str, str]]:
    """A renaming that makes structurally identical programs (e.g. the same part of two
    layers with their own weights) equal; returns it with the two inverse maps."""
    arrays = {a.name: f"a{i}" for i, a in enumerate(program.arrays)}
    kernels = {k.name: f"k{i}" for i, k in enumerate(program.kernels)}
    canon = rename(program, arrays, kernels).evolve(name="candidate")
    return canon, {v: k for k, v in arrays.items()}, {v: k for k, v in kernels.items()}
