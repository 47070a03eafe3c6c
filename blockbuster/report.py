"""End-to-end runs of a workload and their report (what ``blockbuster run`` prints).

:func:`run_workload` builds the unfused program, fuses it, compiles the fused program
with a backend, runs it on random inputs and validates the outputs against the
float64 oracle. It returns a plain, JSON-ready dict; :func:`format_report` renders
the same dict for people, so the two outputs cannot disagree.
"""

from __future__ import annotations

import math
import time
from typing import Any

import attrs

from .cost.hardware import Hardware
from .ir.program import Program
from .memcheck import check_fits_memory


def global_intermediates(program: Program) -> list[str]:
    """Arrays that really live in global memory between kernels: written by some
    kernel, neither an input nor an output (a declaration nobody writes any more,
    left behind by fusion, costs nothing and is not listed)."""
    return [a for a in program.intermediates if program.producer(a) is not None]


def _program_summary(program: Program, cost) -> dict[str, Any]:
    from .ir.prep import weight_derived_kernels
    prep = len(weight_derived_kernels(program))
    return {
        "kernels": len(program.kernels),
        "kernels_per_call": len(program.kernels) - prep,
        "weight_prep_kernels": prep,     # run once per binding of the weights
        "global_bytes": cost.global_bytes,
        "per_call_bytes": cost.per_call_bytes,
        "intermediates": global_intermediates(program),
        "flops": cost.flops,
        "time_estimate": cost.time_estimate,
        "fits": cost.fits,
    }


def _finite_or_none(x: float) -> float | None:
    # Strict JSON has no Infinity/NaN; a non-finite error already means "failed".
    return float(x) if math.isfinite(x) else None


def run_workload(target, sizes: dict[str, int] | None = None,
                 blocks: dict[str, int] | None = None, backend=None, seed: int = 0,
                 rules=None, limits=None, step_check=None,
                 on_fused=None, progress=None, on_compiled=None,
                 inputs_file: str | None = None, tune: str | None = None,
                 tune_timer=None, tune_budget: float | None = None,
                 on_outputs=None) -> dict[str, Any]:
    """Build, fuse, compile, run and validate one target; returns the report dict.

    ``target``: a workload name, ``PATH.bbp``, ``module.py:factory`` (see
    :mod:`blockbuster.subjects`) or a loaded :class:`~blockbuster.subjects.Subject`.
    ``backend`` is a Backend object or a registered name (default: the registry's
    default backend). ``rules``/``limits``/``step_check`` go to :func:`blockbuster.fuse`;
    ``on_fused(fusion_result)`` is called before compiling (``--explain``, ``--dot``).

    ``tune``: how the blocks ``blocks`` leaves open are chosen (``measure``, ``model``
    or ``off``; default ``$BLOCKBUSTER_TUNE``, else ``model``; see
    :mod:`blockbuster.tuning`); ``tune_timer``/``tune_budget`` go to the measurement.
    """
    from .backends.registry import default_backend_name, get_backend
    from .cost.model import cost
    from .dsl.loader import default_rules
    from .ir.printer import format_program
    from .select.selection import fuse_program
    from .subjects import Subject, load_again, load_subject
    from .validate import validate_outputs

    # Resolve the backend first, so a typo fails before any work is done. Fusion
    # and the report price with its hardware: what it compiles for.
    if backend is None or isinstance(backend, str):
        backend = get_backend(backend or default_backend_name())
    hardware = backend.hardware
    timings: dict[str, float] = {}

    def timed(stage, fn, *args, **kwargs):
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        timings[stage] = time.perf_counter() - start
        return result

    subject = target if isinstance(target, Subject) else timed(
        "build", load_subject, target, sizes, blocks, inputs_file)
    check_fits_memory(subject.program)   # before tuning, which runs the real shapes
    tuning = choose_blocks(target, subject, sizes, blocks, backend, tune, rules, limits,
                           tune_timer, tune_budget, timed)
    if tuning.pop("_rebuild"):
        subject = load_again(target, sizes, {**(blocks or {}), **tuning["blocks"]},
                             inputs_file)
    program = subject.program
    check_fits_memory(program)      # before anything is allocated
    fusion = timed("fuse", fuse_program, program, default_rules() if rules is None else rules, limits=limits,
                   hardware=hardware, step_check=step_check, progress=progress)
    fused = fusion.program
    if on_fused is not None:
        on_fused(fusion)
    compiled = timed("compile", backend.compile, fused)
    if on_compiled is not None:
        on_compiled(compiled)
    inputs = subject.make_inputs(fused, seed)
    outputs = timed("run", compiled, **inputs)
    if on_outputs is not None:          # before validation: kept even when it fails
        on_outputs(outputs)
    validation = validate_outputs(subject, outputs, inputs)

    before = cost(program, hardware)
    after = cost(fused, hardware)
    return {
        "workload": subject.label,
        "kind": subject.kind,
        "backend": backend.name,
        "hardware": hardware.as_dict(),
        "sizes": {d.name: d.size for d in program.dims},
        "blocks": {d.name: d.block for d in program.dims},
        "tuning": tuning,
        "seed": seed,
        "inputs_file": inputs_file,
        "before": _program_summary(program, before),
        "after": _program_summary(fused, after),
        "compulsory_bytes": after.compulsory_bytes,
        "stop_reason": fusion.stop_reason,
        "stop_message": getattr(fusion, "message", fusion.stop_reason),
        "fusion_steps": len(fusion.trace),
        "fallback": getattr(fusion, "fallback", ""),
        "rules_applied": fusion.rule_counts(),
        "pieces": [{"kernels": list(p.kernels),
                    "fused_kernels": [k.name for k in p.program.kernels],
                    "rules": dict(p.rules)} for p in fusion.pieces],
        "validation": {
            "max_abs_error": _finite_or_none(validation.max_abs_error),
            "max_rel_error": _finite_or_none(validation.max_rel_error),
            "tolerance": validation.tolerance,
            "baseline_rel_error": (None if validation.baseline_error is None
                                   else _finite_or_none(validation.baseline_error)),
            # the unfused program in float32 gives NaN or inf where float64 does not
            "baseline_non_finite": (validation.baseline_error is not None
                                    and not math.isfinite(validation.baseline_error)),
            "passed": bool(validation.passed),
            "non_finite_values": validation.non_finite,
            "output_values": validation.values,
            "reference": validation.reference or "float64",
            "non_finite_mismatches": validation.mismatched,
            "first_non_finite_mismatch": validation.first_mismatch,
        },
        "timings": timings,
        "fused_program": format_program(fused),
    }


def choose_blocks(target, subject, sizes, blocks, backend, mode, rules=None, limits=None,
                  timer=None, budget=None, timed=None) -> dict[str, Any]:
    """Choose the blocks the user left open (a built-in workload's own dimensions; a
    builder program's declared without a block, :func:`.tuning.origins.reblock_tunable`);
    the report's ``tuning`` entry, plus ``_rebuild`` (whether the subject must be built
    again with the chosen blocks)."""
    from .rewrite.engine import Limits
    from .tuning import resolve_mode, tune
    from .tuning.origins import origin
    from .tuning.targets import fused_origin, fuser, workload_tunable
    mode = resolve_mode(mode, "model")
    given = dict(blocks or {})
    entry: dict[str, Any] = {"mode": mode, "source": "off", "from_cache": False,
                             "given": given, "blocks": {}, "seconds": 0.0, "candidates": []}
    workload = isinstance(target, str) and subject.kind == "workload"
    made = origin(subject.program) if subject.kind == "program" and not given else None
    if not workload and made is None:
        entry["source"] = "fixed"        # a program file or a model: blocks as stated
        return {**entry, "_rebuild": False}
    if mode == "off":
        return {**entry, "_rebuild": False}
    if rules is None:                    # the key names the rules: the same as run's
        from .dsl.loader import default_rules
        rules = default_rules()
    custom = limits is not None and limits != Limits()
    finish = fuser(rules, backend.hardware, limits if custom else None)
    # The same key as blockbuster.fuse then compile: a choice made here serves both.
    base = (workload_tunable(target, dict(sizes or {}), given, base=subject.program)
            if workload else made)
    tunable = fused_origin(base, finish, rules, backend.hardware)
    if custom:                           # other limits may fuse otherwise: another key
        tunable = attrs.evolve(tunable, rules=f"{tunable.rules} {limits!r}")
    if not tunable.sizes:
        entry["source"] = "given"        # --block given: no tuning
        return {**entry, "_rebuild": False}
    timed = timed or (lambda _stage, fn, *a, **k: fn(*a, **k))
    tuned = timed("tune", tune, tunable, backend, mode, timer=timer, budget_s=budget)
    entry.update(tuned.as_dict())
    entry["given"] = given
    return {**entry, "_rebuild": tuned.blocks != tunable.initial}


# ---------------------------------------------------------------------------
# The report for people.
# ---------------------------------------------------------------------------

def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _inputs_text(r: dict) -> str:
    given = r.get("inputs_file")
    return (f"inputs from {given}, seed {r['seed']} for any not in it" if given
            else f"seed {r['seed']}")


#: A float32 baseline error above which the report says the validation is weak.
WEAK_BASELINE = 1e-2


def _baseline_text(v: dict) -> str:
    b = v.get("baseline_rel_error")
    return "" if b is None else f"; unfused float32 {_error(b)}"


def _error(x: float | None) -> str:
    return "inf/nan" if x is None else f"{x:.2e}"


def _tuning_text(t: dict | None) -> str:
    if not t:
        return "as given"
    given = " ".join(f"{d}={n}" for d, n in t["given"].items())
    chosen = " ".join(f"{d}={n}" for d, n in sorted(t["blocks"].items()))
    source = t["source"]
    if source == "fixed":
        return ("as stated by the program" + (f", given {given}" if given else "")
                + " (not tuned)")
    if source == "given":
        return f"as given ({given}; the others default, not tuned)"
    if source == "off":
        return "defaults" + (f", given {given}" if given else "") + " (tuning off)"
    how = {"cache": f"from the tuning cache ({t['mode']})",
           "measure": f"measured, {sum(c['measured_s'] is not None for c in t['candidates'])}"
                      f" of {len(t['candidates'])} candidates in {t['seconds']:.1f} s",
           "model": f"modeled, {len(t['candidates'])} candidates in {t['seconds']:.1f} s",
           "initial": "defaults (no candidate priced better)"}[source]
    return f"tuned {chosen}: {how}" + (f"; given {given}" if given else "")


def format_report(r: dict[str, Any]) -> str:
    sizes = " ".join(f"{d}={n}" for d, n in r["sizes"].items())
    blocks = " ".join(f"{d}={n}" for d, n in r["blocks"].items())
    before, after, v = r["before"], r["after"], r["validation"]
    lines = [
        f"workload        {r['workload']}  {sizes}  (blocks {blocks})",
        f"backend         {r['backend']}",
        f"blocks          {_tuning_text(r.get('tuning'))}",
        f"hardware        {Hardware(**r['hardware']).summary()}",
        f"kernels         {before['kernels']} -> {after['kernels_per_call']} per call"
        + (f" + {after['weight_prep_kernels']} weight preparation (once per binding)"
           if after["weight_prep_kernels"] else ""),
        f"global traffic  {format_bytes(before['global_bytes'])} -> "
        f"{format_bytes(after['global_bytes'])}  "
        f"(compulsory {format_bytes(r['compulsory_bytes'])})",
        f"intermediates   {len(before['intermediates'])} -> {len(after['intermediates'])}"
        + (f"  (left: {', '.join(after['intermediates'])})" if after["intermediates"] else ""),
        # Where never-worse discarded a run, the steps are those of what was kept.
        f"fusion          {r['fusion_steps']} steps{' kept' if r.get('fallback') else ''}, "
        f"stopped: {r['stop_reason']}"
        + (f" ({r['stop_message']})" if r["stop_message"] != r["stop_reason"] else ""),
    ]
    if r.get("fallback"):
        lines.append(f"  never worse   {r['fallback']}")
    for piece in r.get("pieces", []):
        rules = ", ".join(f"{name}×{n}" for name, n in piece["rules"].items()) or "no rules"
        ks = piece["kernels"]
        span = f"kernel ({ks[0]})" if len(ks) == 1 else f"kernels ({ks[0]}..{ks[-1]})"
        lines.append(f"  piece         {len(ks)} {span} -> "
                     f"{', '.join(piece['fused_kernels'])}: {rules}")
    if r.get("verified_steps") is not None:
        n = r["verified_steps"]
        lines.append(f"verified steps  {n} step{'' if n == 1 else 's'} of fusing "
                     f"{r.get('verified_on', 'a small ragged copy')}, each left the outputs "
                     "unchanged (reference interpreter, float64)")
        if r.get("unverified_rules"):
            lines.append(f"  not verified  {', '.join(r['unverified_rules'])}: applied at these "
                         "sizes, never on the small copy")
    if not after["fits"]:
        lines.append("warning         the fused program does not fit the local tier")
    verdict = "passed" if v["passed"] else "FAILED"
    lines.append(f"validation      {verdict}: max abs error {_error(v['max_abs_error'])}, "
                 f"max rel error {_error(v['max_rel_error'])} "
                 f"(tolerance {v['tolerance']:g}{_baseline_text(v)}, {_inputs_text(r)})")
    if v.get("reference", "float64") != "float64":
        lines.append(f"  against       {v['reference']}")
    if (v.get("baseline_rel_error") or 0) > WEAK_BASELINE:
        lines.append(f"  weak          the unfused float32 run is itself "
                     f"{v['baseline_rel_error']:.2g} off the float64 oracle, so the tolerance "
                     f"taken from it checks little (a random operator, or float32 "
                     f"cancellation in the model)")
    if v.get("baseline_non_finite") and not v["passed"]:
        lines.append("  unfused too   the unfused program run in float32 gives NaN or inf "
                     "there as well: the math itself overflows float32 at these inputs "
                     "(an exp without a max shift, a square of a large value, ...)")
    if v.get("non_finite_mismatches"):
        k = v["non_finite_mismatches"]
        lines.append(f"  non-finite    {k} output value{'' if k == 1 else 's'} differ from the "
                     f"reference in being NaN or inf (the first: "
                     f"{v['first_non_finite_mismatch']})")
    elif v.get("non_finite_values"):
        n = v["non_finite_values"]
        lines.append(f"  non-finite    {n} of {v['output_values']} output values NaN or inf in the "
                     "float64 oracle too (matched, not measured: the inputs hold NaN or inf, "
                     "or the math overflows)")
    t = r["timings"]
    lines.append("timings         " + ", ".join(f"{k} {t[k]:.3f} s" for k in t))
    return "\n".join(lines)
