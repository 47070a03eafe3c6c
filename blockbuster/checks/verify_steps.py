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

    def __call__(self, step) -> None:
        outputs = run_program(step.program_after, self.inputs, dtype=np.float64)
        self.checked += 1
        for name, want in self.expected.items():
            got = outputs[name]
            scale = max(float(np.max(np.abs(want))), 1e-30) if want.size else 1.0
            err = float(np.max(np.abs(got - want))) / scale if want.size else 0.0
            if not np.isfinite(err) or err > self.tolerance:
                raise StepChangedOutputs(
                    f"step {step.index}: rule '{step.rule}' ({step.location}) changed output "
                    f"{name} of kernel {step.kernel} (relative error {err:.3g})")


def small_sizes(program: Program, max_blocks: int = 3, max_block: int = 8) -> tuple[dict, dict]:
    """Sizes and blocks for a small, ragged copy of a workload: at most ``max_blocks``
    blocks of at most ``max_block`` elements per dimension, the last block ragged."""
    sizes, blocks = {}, {}
    for d in program.dims:
        block = min(d.block, max_block)
        sizes[d.name] = min(d.size, block * (max_blocks - 1) + max(1, block // 2))
        blocks[d.name] = block
    return sizes, blocks
