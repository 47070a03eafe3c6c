"""Random inputs for a program, and comparison of outputs against a reference."""

from __future__ import annotations

import math
from typing import Mapping

import attrs
import numpy as np

from .ir.program import Program

#: Relative tolerance of float32 results against a float64 reference, measured as the
#: largest absolute error over the largest reference magnitude of each output. The
#: float32 error model sets it: the built-in workloads at ordinary input scale measure
#: 2e-7..1e-6 (attention, LayerNorm+Matmul, RMSNorm+FFN) and up to 1.1e-5 (a whole
#: decoder layer), fused and unfused alike; this is about four times the worst. Real
#: bugs sit above it: a LayerNorm with eps 1e-3 instead of 1e-5 is 4e-4 off.
DEFAULT_TOLERANCE = 5e-5

#: A fused program may lose at most this factor of accuracy against the unfused
#: float32 program run on the same inputs (measured: 0.7..1.3).
ERROR_GROWTH = 4.0

#: The smallest error baseline: float32 rounding of the output itself (2 ulp).
FLOAT32_FLOOR = 2 * float(np.finfo(np.float32).eps)


def tolerance_from_baseline(baseline_error: float) -> float:
    """Tolerance for a fused program given the unfused float32 program's own relative
    error on the same inputs (the scale where inputs are extreme: logits of ±1e4
    carry ~1e-3 of rounding before any operator runs)."""
    return ERROR_GROWTH * max(baseline_error, FLOAT32_FLOOR)


def random_inputs(program: Program, seed: int = 0, scale: float = 1.0,
                  offset: float = 0.0) -> dict[str, np.ndarray]:
    """Standard-normal float32 inputs (times ``scale``, plus ``offset``)."""
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal(program.shape(name)) * scale + offset)
            .astype(np.float32) for name in program.inputs}


class OracleUnavailable(Exception):
    """A subject's float64 oracle cannot run (its message says why); its float32
    baseline is the reference then (:func:`validate_outputs`)."""


@attrs.frozen
class Validation:
    max_abs_error: float
    max_rel_error: float
    tolerance: float
    passed: bool
    # The unfused float32 baseline's own error, where the tolerance came from it.
    baseline_error: float | None = None
    # Output values the oracle itself has as NaN or ±inf (matched, not measured), and
    # all output values: the errors above are over the others only.
    non_finite: int = 0
    values: int = 0
    # What the outputs were compared with, where not the float64 oracle.
    reference: str | None = None
    # Output values whose finiteness differs from the reference's (NaN where it is a
    # number, a number where it is NaN, ...), and the first of them, in words.
    mismatched: int = 0
    first_mismatch: str | None = None

    def as_dict(self) -> dict:
        return attrs.asdict(self)


def compare(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray],
            tolerance: float = DEFAULT_TOLERANCE) -> Validation:
    """Worst error over all outputs; relative errors are against each output's largest
    finite reference magnitude (elementwise relative error is meaningless near zero).
    Where the reference itself is not finite (a masked log-softmax's ``-inf``, NaN
    inputs), the output must be the same: NaN where it is NaN, the same infinity
    where it is infinite; anywhere else a non-finite output fails."""
    max_abs = max_rel = 0.0
    finite = True
    non_finite = values = mismatched = 0
    first = None
    for name, ref in reference.items():
        out = np.asarray(outputs[name], dtype=np.float64)
        ref = np.asarray(ref, dtype=np.float64)
        if out.shape != ref.shape:
            finite = False
            max_abs = max_rel = float("inf")
            continue
        ok = np.isfinite(ref)
        values += ok.size
        non_finite += int(ok.size - np.count_nonzero(ok))
        differ = _finiteness_differs(out, ref)
        if np.any(differ):
            finite = False
            max_abs = max_rel = float("inf")
            mismatched += int(np.count_nonzero(differ))
            if first is None:
                at = tuple(int(i) for i in np.argwhere(differ)[0])
                first = f"{name}[{', '.join(map(str, at))}] is {out[at]:g} where the " \
                        f"reference is {ref[at]:g}"
            continue
        err = float(np.max(np.abs(out[ok] - ref[ok]))) if ok.any() else 0.0
        scale = float(np.max(np.abs(ref[ok]))) if ok.any() else 0.0
        max_abs = max(max_abs, err)
        max_rel = max(max_rel, err / scale if scale > 0 else err)
    return Validation(max_abs, max_rel, tolerance, finite and max_rel <= tolerance,
                      non_finite=non_finite, values=values, mismatched=mismatched,
                      first_mismatch=first)


def _finiteness_differs(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Where ``out`` is not finite though ``ref`` is, is not NaN where ``ref`` is NaN,
    or is not the same infinity where ``ref`` is infinite."""
    nan = np.isnan(ref)
    inf = np.isinf(ref)
    with np.errstate(invalid="ignore"):
        return (~nan & ~inf & ~np.isfinite(out)) | (nan & ~np.isnan(out)) | (inf & (out != ref))


def validate_outputs(subject, outputs: Mapping[str, np.ndarray],
                     inputs: Mapping[str, np.ndarray]) -> Validation:
    """``outputs`` against the subject's float64 oracle. The tolerance is the default
    one, or, where the subject has a float32 baseline (the same math unfused, as a
    user would run it) whose own error is larger, :func:`tolerance_from_baseline` of
    that error: a deep program at large sizes carries more float32 rounding than
    :data:`DEFAULT_TOLERANCE` allows, and a fused program is held to what the unfused
    one achieves, not to a number that fits the small workloads."""
    try:
        reference = subject.oracle(inputs)
    except OracleUnavailable as why:
        if subject.baseline is None:
            raise
        result = compare(outputs, subject.baseline(inputs), DEFAULT_TOLERANCE)
        return attrs.evolve(result, reference=f"float32 eager: {why}")
    tolerance = DEFAULT_TOLERANCE
    baseline_error = None
    if subject.baseline is not None:
        baseline = subject.baseline(inputs)
        if _oracle_lost_values(baseline, reference):
            # Some models break in float64 (MPT's padding mask: a whole sequence of
            # NaN) while float32, what they are written for, is finite: the outputs
            # are held to float32 eager instead, at the default tolerance.
            result = compare(outputs, baseline, tolerance)
            return attrs.evolve(result, reference=(
                "float32 eager: float64 eager gives NaN or inf where float32 does not"))
        baseline_error = compare(baseline, reference).max_rel_error
        if math.isfinite(baseline_error):
            tolerance = max(tolerance, tolerance_from_baseline(baseline_error))
    result = compare(outputs, reference, tolerance)
    return attrs.evolve(result, baseline_error=baseline_error)


def _oracle_lost_values(baseline: Mapping[str, np.ndarray],
                        oracle: Mapping[str, np.ndarray]) -> bool:
    """Is the float64 oracle NaN or infinite where the float32 baseline is finite?"""
    for name, ref in oracle.items():
        ref = np.asarray(ref)
        base = np.asarray(baseline[name])
        if base.shape == ref.shape and np.any(~np.isfinite(ref) & np.isfinite(base)):
            return True
    return False
