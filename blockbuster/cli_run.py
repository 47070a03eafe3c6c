"""The ``run`` subcommand: build, fuse, compile, run and validate a target (with the
--rules flags, the check of the user's own rules and --verify-steps)."""

from __future__ import annotations

import argparse
import os
import sys

from .cli_args import (check_output_path, parse_assignments, positive_int_arg,
                       seconds_arg, seed_arg, write_new_file)
from .cli_common import (EXIT_OK, EXIT_VALIDATION_FAILED, add_backend_arg, add_program_args,
                         add_tune_args, build_program, chosen_backend, print_json)
from .errors import UsageError


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------

def add_run(sub) -> None:
    p = sub.add_parser("run", help="build, fuse, compile, run and validate a target",
                       description="Build TARGET, fuse it, compile it with a backend, run "
                                   "it and validate the result: a workload against its "
                                   "NumPy oracle, a program file against the reference "
                                   "interpreter on the unfused program (float64), a "
                                   "PyTorch model against eager PyTorch (float64). "
                                   "Exit status 1 if validation fails.")
    add_program_args(p)
    p.add_argument("--inputs", metavar="FILE.npz",
                   help="input (and weight) arrays by name; others are random "
                        "(a PyTorch model runs on its example inputs)")
    add_backend_arg(p, "backend to compile with")
    p.add_argument("--seed", type=seed_arg, default=0, metavar="INT",
                   help="seed of the random inputs, a non-negative integer (default 0)")
    p.add_argument("--json", action="store_true",
                   help="print exactly one JSON object on stdout (the derivation and "
                        "the generated source go into it)")
    add_rule_args(p)
    p.add_argument("--explain", action="store_true",
                   help="print the derivation rule by rule, in the text form")
    p.add_argument("--verify-steps", action="store_true",
                   help="re-run the reference interpreter after every rule application "
                        "(a built-in workload on a small ragged copy, and at its own "
                        "sizes too where a rule applied only there; a program file or "
                        "model at its own sizes) and stop at the first step that "
                        "changes the outputs")
    p.add_argument("--dot", metavar="FILE",
                   help="write Graphviz DOT of the program before and after fusion")
    p.add_argument("--emit-source", metavar="FILE", nargs="?", const="-",
                   help="print (or write to FILE) the source the backend generated for "
                        "the fused program")
    p.add_argument("--save-outputs", metavar="FILE.npz",
                   help="write the fused program's outputs by name to a new .npz file "
                        "(never over an existing file; written even if validation fails)")
    add_tune_args(p)
    p.set_defaults(func=cmd_run)


def add_rule_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rules", action="append", metavar="FILE", default=[],
                   help="rule file(s) to fuse with instead of the default rule set")
    p.add_argument("--without-rule", action="append", metavar="NAME", default=[],
                   help="leave a rule out (repeatable), e.g. for ablations")
    p.add_argument("--max-steps", type=positive_int_arg, metavar="INT",
                   help="limit on rule applications of the whole fusion")
    p.add_argument("--max-seconds", type=seconds_arg, metavar="S",
                   help="time limit of the whole fusion")
    p.add_argument("--max-nodes", type=positive_int_arg, metavar="INT",
                   help="limit on expression nodes")
    p.add_argument("--trust-rules", action="store_true",
                   help="skip the soundness check of the rules in --rules files (they "
                        "are checked before use otherwise; results are cached)")


def load_rule_args(args: argparse.Namespace):
    """The RuleSet and Limits the --rules/--without-rule/--max-* flags ask for."""
    from .dsl.loader import default_rules, load_rules
    from .rewrite.engine import Limits
    rules = load_rules(*args.rules) if args.rules else default_rules()
    unknown = [n for n in args.without_rule if n not in rules.rules]
    if unknown:
        raise UsageError(f"--without-rule: no rule named '{unknown[0]}' "
                         f"(rules: {', '.join(rules.rules)})")
    rules = rules.without(*args.without_rule)
    limits = {k: v for k, v in (("max_steps", args.max_steps), ("max_seconds", args.max_seconds),
                                ("max_nodes", args.max_nodes)) if v is not None}
    return rules, Limits(**limits)


def check_user_rules(rules, hardware, as_json: bool = False) -> int | None:
    """``run --rules``: the soundness and stability check of the user's own rules,
    before they are used (cached). None when none fails; else the report is printed
    and the exit status returned."""
    from .rulecheck import check_user_rules as check, failure_kinds
    findings, _cached = check(rules, hardware)
    failed = [f for f in findings if f["failed"]]
    if not failed:
        return None
    for f in failed:
        print(f["text"], file=sys.stderr)
    names = ", ".join(sorted({f["rule"] for f in failed}))
    what = failure_kinds(failed)
    if as_json:
        print_json({"error": f"{what} rules in --rules: {names}", "unsound_rules": failed,
                    "exit_status": EXIT_VALIDATION_FAILED})
        return EXIT_VALIDATION_FAILED
    n = len({f["rule"] for f in failed})
    print(f"error: {n} rule{'s' if n > 1 else ''} of --rules "
          f"{'are' if n > 1 else 'is'} {what} ({names}); fix "
          f"{'them' if n > 1 else 'it'}, or pass --trust-rules to use "
          f"{'them' if n > 1 else 'it'} anyway", file=sys.stderr)
    return EXIT_VALIDATION_FAILED


def _verify_small_copy(args, rules, limits, hardware):
    """--verify-steps: fuse a small ragged copy of the workload for the backend's
    ``hardware``, checking every step. Returns the :class:`StepVerifier` (the count
    of steps checked, the rules they applied)."""
    import blockbuster
    from .checks.verify_steps import StepVerifier, small_sizes
    from .frontend.workloads import WORKLOADS
    full = build_program(args)
    if args.workload not in WORKLOADS:         # a program file or a model: as given
        from .memcheck import check_fits_memory
        check_fits_memory(full)
        verifier = StepVerifier(full, seed=args.seed)
        # trust_rules: `run --rules` checked them already (or was told not to)
        blockbuster.fuse(full, rules=rules, limits=limits, hardware=hardware,
                         step_check=verifier, trust_rules=True)
        return verifier
    sizes, blocks = small_sizes(full)
    own = WORKLOADS[args.workload].dims        # not the dimensions a workload derives
    params = {d: v for d, v in parse_assignments(args.size, "--size").items() if d not in own}
    try:
        small = blockbuster.workload(args.workload, **params,
                                     blocks={d: b for d, b in blocks.items() if d in own},
                                     **{d: n for d, n in sizes.items() if d in own})
    except UsageError:      # small sizes break a constraint (llama: an even head size)
        from .memcheck import check_fits_memory
        check_fits_memory(full)     # the interpreter will hold the user's sizes
        small = full
    verifier = StepVerifier(small, seed=args.seed)
    blockbuster.fuse(small, rules=rules, limits=limits, hardware=hardware,
                     step_check=verifier, trust_rules=True)
    if small is full:
        return verifier
    verifier.where = "a small ragged copy"
    # A rule whose match depends on the sizes (a constant such as 1/√D) may apply at
    # the real sizes and never on the copy: then every step is checked at the real
    # sizes, where they fit in a small budget (else the report names those rules).
    real = blockbuster.fuse(full, rules=rules, limits=limits, hardware=hardware,
                            trust_rules=True)
    from .memcheck import modeled_bytes
    if {step.rule for step in real.trace} <= verifier.rules \
            or modeled_bytes(full) > _FULL_SIZE_VERIFY_BYTES:
        return verifier
    verifier = StepVerifier(full, seed=args.seed)
    blockbuster.fuse(full, rules=rules, limits=limits, hardware=hardware,
                     step_check=verifier, trust_rules=True)
    return verifier


#: --verify-steps checks at the real sizes (when the small copy missed a rule) only
#: programs whose inputs, outputs and float64 reference take at most this many bytes.
_FULL_SIZE_VERIFY_BYTES = 64 << 20


def check_outputs_path(path: str, inputs: str | None) -> None:
    """``--save-outputs``: a new ``.npz`` file (NumPy would append the suffix to any
    other name; an existing file, the inputs above all, is never replaced)."""
    if not path.endswith(".npz"):
        raise UsageError(f"--save-outputs {path}: the file name must end in .npz")
    if inputs is not None and os.path.abspath(path) == os.path.abspath(inputs):
        raise UsageError(f"--save-outputs {path}: that is the --inputs file; choose a new "
                         f"file name")
    check_output_path(path, flag="--save-outputs")


def check_distinct_outputs(args: argparse.Namespace) -> None:
    """Two output options naming one file would have the second refuse (or replace)
    what the first wrote, after the work is done: refused before it starts."""
    named = [(flag, path) for flag, path in (("--dot", args.dot),
                                             ("--emit-source", args.emit_source),
                                             ("--save-outputs", args.save_outputs))
             if path not in (None, "-")]
    seen: dict[str, str] = {}
    for flag, path in named:
        key = os.path.realpath(path)
        if os.path.exists(key) and not os.path.isfile(key):
            continue                    # /dev/null takes any number of writes
        if key in seen:
            raise UsageError(f"{seen[key]} and {flag} both name {path}; choose a file "
                             f"for each")
        seen[key] = flag


def save_outputs(path: str, outputs) -> None:
    """Write ``outputs`` (name -> array) to the new file ``path``; created exclusively,
    so a file that appeared since the check is not replaced either."""
    import numpy as np
    try:
        with open(path, "xb") as f:
            np.savez(f, **{name: np.asarray(value) for name, value in outputs.items()})
    except FileExistsError:
        raise UsageError(f"refusing to overwrite --save-outputs {path}: it exists; "
                         f"choose a new file name") from None
    except OSError as err:
        raise UsageError(f"cannot write --save-outputs {path}: {err.strerror}") from None


#: What a DOT file written by ``--dot`` starts with: a rerun may replace such a file.
DOT_PREFIX = "digraph blockbuster {"


_NO_SOURCE = "--emit-source: this backend does not generate source (try --backend numba)"


def cmd_run(args: argparse.Namespace) -> int:
    from .report import format_report, run_workload
    # Everything that can be refused is refused before any work starts.
    check_distinct_outputs(args)
    if args.trust_rules and not args.rules:
        raise UsageError("--trust-rules: only with --rules FILE (it skips the check of "
                         "your rules; the shipped rules need none)")
    if args.dot:
        check_output_path(args.dot, flag="--dot", own_prefix=DOT_PREFIX)
    if args.emit_source not in (None, "-"):
        check_output_path(args.emit_source, allowed=(".py",), flag="--emit-source")
    if args.save_outputs is not None:
        check_outputs_path(args.save_outputs, args.inputs)
    sizes = parse_assignments(args.size, "--size")
    blocks = parse_assignments(args.block, "--block")
    from .tuning import resolve_mode
    tune = resolve_mode(args.tune, "measure")   # a bad $BLOCKBUSTER_TUNE fails now
    rules, limits = load_rule_args(args)
    backend = chosen_backend(args)      # a typo fails before any work is done
    if args.emit_source is not None and backend.generates_source is False:
        raise UsageError(_NO_SOURCE)
    if args.rules and not args.trust_rules:
        verdict = check_user_rules(rules, backend.hardware, as_json=args.json)
        if verdict is not None:
            return verdict
    verifier = (_verify_small_copy(args, rules, limits, backend.hardware)
                if args.verify_steps else None)
    extra: dict = {}         # --json: text that would otherwise be printed
    applied: set[str] = set()     # the rules the real fusion applied

    def on_fused(fusion):
        applied.update(step.rule for step in getattr(fusion, "trace", ()))
        if args.explain and args.json:
            extra["derivation"] = fusion.derivation()
        elif args.explain:
            print(fusion.derivation())
            print()
        if args.dot:
            from .ir.dot import to_dot
            write_new_file(args.dot, to_dot(("before fusion", fusion.original),
                                            ("after fusion", fusion.program)),
                           own_prefix=DOT_PREFIX)

    def on_compiled(compiled):
        if args.emit_source is None:
            return
        source = getattr(compiled, "source", None)
        if source is None:
            raise UsageError(_NO_SOURCE)
        if args.emit_source == "-" and args.json:
            extra["source"] = source
        elif args.emit_source == "-":
            print(source)
        else:
            write_new_file(args.emit_source, source, allowed=(".py",))

    if args.inputs is not None and not os.path.isfile(args.inputs):
        raise UsageError(f"--inputs {args.inputs}: no such file")
    report = run_workload(args.workload, sizes=sizes, blocks=blocks,
                          inputs_file=args.inputs,
                          backend=backend, seed=args.seed, rules=rules, limits=limits,
                          on_fused=on_fused, progress=False if args.json else None,
                          on_compiled=on_compiled, tune=tune,
                          tune_budget=args.tune_seconds,
                          on_outputs=(None if args.save_outputs is None else
                                      lambda out: save_outputs(args.save_outputs, out)))
    if args.save_outputs is not None:
        report["saved_outputs"] = args.save_outputs
    if verifier is not None:
        report["verified_steps"] = verifier.checked
        report["verified_on"] = verifier.where
        # a rule whose match depends on the sizes (a constant such as 1/√D) may apply
        # at the real sizes and never on the small copy: say so, it was not checked
        report["unverified_rules"] = sorted(applied - verifier.rules)
    if args.json:
        print_json({**report, **extra})
    else:
        print(format_report(report))
    if not report["validation"]["passed"]:
        v = report["validation"]
        error = "non-finite" if v["max_rel_error"] is None else f"{v['max_rel_error']:.3g}"
        print(f"error: validation failed: max rel error {error} exceeds tolerance "
              f"{v['tolerance']:g}", file=sys.stderr)
        return EXIT_VALIDATION_FAILED
    return EXIT_OK
