"""Splitting a program into weight preparation and the per-call part.

A kernel that reads only weights (and arrays computed from weights only) and stores
no program output is *weight preparation*: its result is the same on every call, so
it can run once when the weights are bound (``CompiledProgram.bind``). The per-call
program reads those prepared arrays as weights of its own.
"""

from __future__ import annotations

import attrs

from .program import Program


@attrs.frozen
class PrepSplit:
    prep: Program | None        # None: nothing to prepare
    per_call: Program
    prepared: tuple[str, ...]   # arrays prep computes and per_call reads


def weight_derived_kernels(program: Program) -> list[str]:
    """Names of the weight-preparation kernels, in program order (transitively: a
    kernel reading only weights and earlier preparation results is preparation)."""
    derived = set(program.weights)
    names = []
    outputs = set(program.outputs)
    for k in program.kernels:
        reads = k.reads()
        if reads and reads <= derived and not set(k.writes()) & outputs:
            names.append(k.name)
            derived |= set(k.writes())
    return names


def split_weight_prep(program: Program) -> PrepSplit:
    prep_names = set(weight_derived_kernels(program))
    if not prep_names:
        return PrepSplit(None, program, ())
    prep_kernels = tuple(k for k in program.kernels if k.name in prep_names)
    call_kernels = tuple(k for k in program.kernels if k.name not in prep_names)
    written = {a for k in prep_kernels for a in k.writes()}
    call_reads = set().union(*(k.reads() for k in call_kernels)) if call_kernels else set()
    prepared = tuple(a.name for a in program.arrays if a.name in written and a.name in call_reads)
    prep_reads = set().union(*(k.reads() for k in prep_kernels))
    prep_inputs = tuple(w for w in program.weights if w in prep_reads)
    prep = program.evolve(
        name=f"{program.name}_prep", inputs=prep_inputs, outputs=prepared,
        kernels=prep_kernels, weights=prep_inputs,
        arrays=tuple(a for a in program.arrays if a.name in prep_reads | written))
    call_inputs = tuple(i for i in program.inputs if i in call_reads or i not in program.weights)
    per_call = program.evolve(
        inputs=call_inputs + prepared, kernels=call_kernels,
        weights=tuple(w for w in program.weights if w in call_inputs) + prepared,
        arrays=tuple(a for a in program.arrays
                     if a.name in call_reads or a.name in call_inputs
                     or any(a.name in k.writes() for k in call_kernels)))
    return PrepSplit(prep, per_call, prepared)
