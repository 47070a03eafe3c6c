"""Numerical stability of rewrite rules (``rules check``, beside soundness).

Each rule's two sides are evaluated on the same float32-representable inputs in
float32 and in float64, on wide-range distributions: logits up to ±120 (also wholly positive or negative
inputs of magnitude 60..120, all of one sign per trial, where exp overflows alone but not in a difference) and ±1e4,
rows offset by +1e3 or +1e5 (a large mean), small (1e-4), tiny (1e-30) and huge (1e20)
magnitudes. Taking the float64 left side as the truth, a rule is flagged when its
right side

* is not finite in float32 where the left side is finite (overflow, inf - inf), or
* loses much more accuracy than the left side: its worst error over the output is
  more than 8x the left side's worst error plus the value's own sensitivity to a
  one-ulp change of the inputs (which no float32 computation can beat), and above
  64 float32 ulps. Errors are weighted by |value| + 1e-3·(largest |value| of the
  output), so that values underflowing to a wrong result count, and positions
  cancelling to ~0 in both do not.

A rule set may be declared intentionally unsafe (``paper.bbr``, kept to compare
against): its findings are reported as allowed and do not fail the check. A rule
file declares itself with a comment line ``# unsafe-ruleset: <reason>`` among the
comments at its top, or by its name being in :data:`UNSAFE_RULESETS`.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from ..backends.reference import run_program
from ..dsl.ast import RuleDef, RuleSet
from ..errors import BlockbusterError
from .findings import Finding, finding
from .instances import Deck, InstanceBuilder, MalformedRule, describe_inputs

#: Rule files (by file name) whose rules may be numerically unsafe.
UNSAFE_RULESETS = {"paper.bbr"}
UNSAFE_MARKER = "# unsafe-ruleset:"
#: Trials per rule: three of each input kind. With two of each (18), 9 of 400 seeds
#: missed a planted unstable rule (exp_rowshift 6, exp_sub_split 3: its overflowing
#: elements were too few against the largest ones); with three, none of 400 did.
STABILITY_TRIALS = 27
ACCURACY_FACTOR = 8.0
ULPS = 64
EPS32 = float(np.finfo(np.float32).eps)
OVERFLOW_MARGIN = 1e34
AGREE = 1e-4                     # float64 sides this close count as the same value
STABILITY_KINDS = ("normal", "logits", "logits_edge", "logits_wide", "offset", "offset_large",
                   "small", "tiny", "huge")


def stability_values(program, kind: str, rng: np.random.Generator) -> dict:
    out = {}
    # One sign for every input of a logits_edge trial: exp(a)/exp(b) overflows only
    # where a and b share a sign (mixed signs are the "logits" kind's business).
    edge_sign = rng.choice([-1.0, 1.0])
    for name in program.inputs:
        shape = program.shape(name)
        normal = rng.standard_normal(shape)
        v = {"normal": lambda: normal,
             "logits": lambda: rng.uniform(-120, 120, shape),
             # Every input wholly positive or wholly negative, |v| in 60..120: exp
             # overflows (exp(88.7) is float32's largest) where a difference need not.
             "logits_edge": lambda: edge_sign * rng.uniform(60, 120, shape),
             "logits_wide": lambda: rng.uniform(-1e4, 1e4, shape),
             "offset": lambda: 1e3 + normal,
             "offset_large": lambda: 1e5 + normal * 10,
             # Small but resolved in float64: a difference of nearby values of
             # order 1 (2·sigmoid(2x) - 1 for tanh x) loses what float32 cannot hold.
             "small": lambda: normal * 1e-4,
             "tiny": lambda: normal * 1e-30,
             "huge": lambda: normal * 1e20}[kind]()
        out[name] = np.asarray(v, np.float32)
    return out


def unsafe_reason(path: str) -> str:
    """Why the rule file at ``path`` may hold unstable rules ("" if it may not)."""
    name = Path(path).name
    if name in UNSAFE_RULESETS:
        return f"{name} is a named unsafe rule set"
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        if stripped.lower().startswith(UNSAFE_MARKER):
            return stripped[len(UNSAFE_MARKER):].strip() or "declared unsafe"
    return ""


def compare_precisions(l64, r64, l32, r32, noise) -> str:
    """Why the float32 right side is less safe than the float32 left side ("").
    ``noise``: how much the float64 left side moves when its inputs move by one
    float32 ulp (the accuracy no float32 evaluation can beat)."""
    l64, r64 = np.asarray(l64, np.float64), np.asarray(r64, np.float64)
    l32, r32 = np.asarray(l32, np.float64), np.asarray(r32, np.float64)
    noise = np.asarray(noise, np.float64)
    ok = np.isfinite(l64) & np.isfinite(l32) & np.isfinite(r64) & np.isfinite(noise)
    if not np.any(ok):
        return ""
    # Only where the two sides agree in float64: where they do not, the rule is
    # unsound (the soundness check's business), not unstable.
    scale = float(np.max(np.abs(np.where(ok, l64, 0))))
    with np.errstate(all="ignore"):
        ok &= np.abs(r64 - l64) <= AGREE * (np.abs(l64) + 1e-3 * scale)
    if not np.any(ok):
        return ""
    # Overflow: the left side is comfortably inside float32's range, the right is not.
    broken = ok & ~np.isfinite(r32) & (np.abs(l64) < OVERFLOW_MARGIN)
    if np.any(broken):
        at = tuple(int(i) for i in np.argwhere(broken)[0])
        return (f"the right side is {r32[at]} in float32 where the left side is finite "
                f"(float64 {l64[at]:.6g}, float32 left {l32[at]:.6g}) at {at}")
    ok &= np.isfinite(r32)
    if not np.any(ok):
        return ""
    scale = float(np.max(np.abs(np.where(ok, l64, 0))))
    weight = np.abs(l64) + 1e-3 * scale + 1e-300
    # Worst weighted errors over the whole output (a maximum over many positions is
    # robust where one position's input noise happens to cancel).
    err_l = np.where(ok, (np.abs(l32 - l64) + noise) / weight, 0)
    err_r = np.where(ok, np.abs(r32 - l64) / weight, 0)
    worst_l, worst_r = float(err_l.max()), float(err_r.max())
    if worst_r > ACCURACY_FACTOR * worst_l and worst_r > ULPS * EPS32:
        at = tuple(int(i) for i in np.unravel_index(int(np.argmax(err_r)), err_r.shape))
        return (f"the right side loses accuracy in float32: weighted error {worst_r:.3g}, "
                f"the left side's {worst_l:.3g} (one-ulp input noise included); at {at} "
                f"float64 {l64[at]:.9g}, float32 left {l32[at]:.9g}, right {r32[at]:.9g}")
    return ""


def _input_noise(program, inputs: dict, exact, rng: np.random.Generator) -> np.ndarray:
    """How far the float64 value moves when the inputs move by one float32 ulp: the
    sum over input arrays of the move when that array alone is perturbed (elements in
    random directions), so that two inputs' moves cannot cancel by chance."""
    exact = np.asarray(exact, np.float64)
    total = np.zeros_like(exact)
    with np.errstate(all="ignore"):
        for name, v in inputs.items():
            v = np.asarray(v, np.float64)
            moved = dict(inputs)
            moved[name] = v * (1 + EPS32 * rng.choice([-1.0, 1.0], v.shape))
            out = np.asarray(run_program(program, moved, dtype=np.float64)["out"], np.float64)
            total += np.abs(out - exact)
    return total


def check_rule_stability(rule: RuleDef, trials: int = STABILITY_TRIALS, seed: int = 0,
                         allowed: bool = False) -> Finding:
    def result(sound, ran, detail=""):
        return finding(rule, sound, ran, detail, kind="stability", allowed=allowed and not sound)
    try:
        builder = InstanceBuilder(rule, seed + 7919)
    except MalformedRule as err:
        return result(True, 0, str(err))      # soundness reports it
    rng = np.random.default_rng(seed + 7919)
    kinds = Deck(STABILITY_KINDS, random.Random(seed + 7919))
    ran = 0
    for _attempt in range(trials * 4):
        if ran >= trials:
            break
        try:
            inst = builder.build()
        except (BlockbusterError, ValueError, KeyError, TypeError):
            inst = None
        if inst is None or inst.rhs is None:
            continue
        kind = kinds.draw()
        inputs = stability_values(inst.lhs, kind, rng)
        try:
            runs = [run_program(p, inputs, dtype=d)["out"]
                    for p in (inst.lhs, inst.rhs) for d in (np.float64, np.float32)]
            noise = _input_noise(inst.lhs, inputs, runs[0], rng)
        except BlockbusterError:
            continue
        ran += 1
        with np.errstate(all="ignore"):
            bad = compare_precisions(runs[0], runs[2], runs[1], runs[3], noise)
        if bad:
            return result(False, ran, f"{bad}\nwith {inst.description}\n{kind} inputs: "
                                      f"{describe_inputs(inputs)}\n(seed {seed})")
    return result(True, ran)


def check_stability(rules: RuleSet, trials: int = STABILITY_TRIALS, seed: int = 0) -> list[Finding]:
    reasons: dict = {}
    out = []
    for rule in rules.rules.values():
        if rule.kind != "rewrite":
            continue
        if rule.loc.file not in reasons:
            reasons[rule.loc.file] = unsafe_reason(rule.loc.file)
        out.append(check_rule_stability(rule, trials, seed, bool(reasons[rule.loc.file])))
    return out
