"""Tunables for what the entry points build: built-in workloads, programs derived
from them (``blockbuster.workload`` / ``blockbuster.fuse``), imported graphs.

Only dimensions whose block is free are tuned: a built-in workload's own dimensions
(not the head dimensions it derives, whose blocks are heads), minus those the user
set; an imported graph's tiled dimensions that are not split into heads; a builder
program's dimensions declared without a block, when none of its operators depends
on the blocks (:func:`reblock_tunable`). A program read from a file is compiled with
the blocks it states (nothing says which of its blocks are free to change).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..ir.printer import format_program
from ..ir.program import Program
from .cache import rules_digest
from .tuner import Tunable


def fuser(rules=None, hardware=None, limits=None) -> Callable[[Program], Program]:
    """Unfused -> fused, through the on-disk fusion cache unless ``limits`` are set
    (the cache keys only the rules and the hardware). The default rules are loaded
    once, on first use, not once per candidate."""
    loaded = [rules]

    def rule_set():
        if loaded[0] is None:
            from ..dsl.loader import default_rules
            loaded[0] = default_rules()
        return loaded[0]

    if limits is not None:
        def fuse(program: Program) -> Program:
            from ..select.selection import fuse_program
            return fuse_program(program, rule_set(), limits=limits, hardware=hardware,
                                progress=False).program
        return fuse

    def fuse(program: Program) -> Program:
        from ..fusion_cache import cached_fuse
        return cached_fuse(program, rule_set(), hardware)
    return fuse


def free_dims(program: Program, names, given: dict) -> dict[str, int]:
    """Sizes of the dimensions of ``names`` that are tiled and not set by the user."""
    return {d.name: d.size for d in program.dims
            if d.name in names and d.name not in given and not d.point}


def workload_tunable(name: str, sizes: dict, given: dict,
                     finish: Callable[[Program], Program] | None = None,
                     base: Program | None = None) -> Tunable:
    """Tune a built-in workload's free dimensions; ``finish`` turns the unfused
    program into the one compiled (default: none, the unfused program); ``base``:
    the workload already built at ``sizes`` and ``given`` blocks.

    A block set by the user turns tuning off for the whole program (the others keep
    their defaults): hand-set blocks are an experiment, and an experiment is
    reproduced exactly."""
    from ..frontend.workloads import WORKLOADS, workload
    finish = finish or (lambda p: p)
    base = base if base is not None else workload(name, blocks=given, **sizes)
    tuned = {} if given else free_dims(base, WORKLOADS[name].dims, given)
    initial = {d: base.dim(d).block for d in tuned}

    def derive(blocks: dict) -> Program:
        return finish(workload(name, blocks={**given, **blocks}, **sizes))
    return Tunable(name, format_program(base), tuned, initial, derive)


def fused_origin(tunable: Tunable, finish: Callable[[Program], Program], rules,
                 hardware) -> Tunable:
    """The tunable of ``finish(tunable's program)``: each assignment fused again
    (for ``hardware``, part of the key with the rules)."""
    derive = tunable.derive
    return attrs.evolve(tunable, derive=lambda blocks: finish(derive(blocks)),
                        structure=f"fused for {hardware!r}\n" + tunable.structure,
                        rules=rules_digest(rules))
