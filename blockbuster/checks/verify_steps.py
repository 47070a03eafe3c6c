"""Validation at every step: re-run the reference interpreter after each rule
application and stop at the first step that changes the program's outputs."""

from __future__ import annotations

import numpy as np

from ..backends.reference import run_program
from ..errors import BlockbusterError
from ..ir.program import Program
from ..validate import random_inputs


class StepChangedOutputs(BlockbusterError):
    """A rule application changed what the program computes (an unsound rule)."""

    exit_code = 1


class StepVerifier:
    """A ``step_check`` for the engine: compares each step's outputs with the
    original program's on fixed random inputs (float64, tight tolerance)."""

    def __init__(self, program: Program, seed: int = 0, tolerance: float = 1e-9):
        self.inputs = random_inputs(program, seed=seed)
        self.expected = run_program(program, self.inputs, dtype=np.float64)
        self.tolerance = tolerance
        self.checked = 0
        self.rules: set[str] = set()      # the rules of the steps checked
        self.where = "the program at its own sizes"       # for the report

    def __call__(self, step) -> None:
        outputs = run_program(step.program_after, self.inputs, dtype=np.float64)
        self.checked += 1
        self.rules.add(step.rule)
        for name, want in self.expected.items():
            got = outputs[name]
            classes = _finite_class(want) != _finite_class(got)
            if np.any(classes):
                at = tuple(int(i) for i in np.argwhere(classes)[0])
                raise StepChangedOutputs(
                    f"step {step.index}: rule '{step.rule}' ({step.location}), rewriting "
                    f"kernel {step.kernel}, changed output {name}: {got[at]} where it was "
                    f"{want[at]} (at {at})")
            finite = np.isfinite(want)
            want, got = np.where(finite, want, 0), np.where(finite, got, 0)
            scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
            err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
            if not np.isfinite(err) or err > self.tolerance:
                raise StepChangedOutputs(
                    f"step {step.index}: rule '{step.rule}' ({step.location}), rewriting "
                    f"kernel {step.kernel}, changed output {name} (relative error {err:.3g})")


def _finite_class(x: np.ndarray) -> np.ndarray:
    """0 finite, 1 nan, 2 +inf, 3 -inf: non-finite values must stay what they were."""
    return np.where(np.isnan(x), 1, np.where(np.isposinf(x), 2, np.where(np.isneginf(x), 3, 0)))


def small_sizes(program: Program, max_blocks: int = 3, max_block: int = 8) -> tuple[dict, dict]:
    """Sizes and blocks for a small, ragged copy of a built-in workload: at most
    ``max_blocks`` blocks of at most ``max_block`` elements per dimension, the last
    block ragged. Only the workload's own dimensions are sized (``llama_block``
    derives ``QD``, ``KD``, ``HD``, ``H``, ``G`` from them); a dimension whose small
    size the workload refuses (``E`` must split into even heads) keeps its size."""
    from ..errors import UsageError
    from ..frontend.workloads import WORKLOADS, workload
    known = WORKLOADS.get(program.name)
    sizes, blocks = {}, {}
    for d in program.dims:
        if known is not None and d.name not in known.dims:
            continue
        if d.point:
            sizes[d.name] = min(d.size, max_blocks)
            continue
        block = min(d.block, max_block)
        sizes[d.name] = min(d.size, block * (max_blocks - 1) + max(1, block // 2))
        blocks[d.name] = block
    if known is None:
        return sizes, blocks
    full = {d.name: d for d in program.dims}

    def builds(sz, bl) -> bool:
        try:
            workload(program.name, blocks=bl, **sz)
            return True
        except UsageError:
            return False

    if builds(sizes, blocks):
        return sizes, blocks
    for name in sizes:                # give one dimension back its size
        sz, bl = dict(sizes), dict(blocks)
        sz[name] = full[name].size
        if name in bl:
            bl[name] = full[name].block
        if builds(sz, bl):
            return sz, bl
    return {n: full[n].size for n in sizes}, {n: full[n].block for n in blocks}
