"""The command line: ``python -m blockbuster COMMAND ...`` (also the ``blockbuster`` script).

Each subcommand is one ``add_*`` function that declares its arguments and one
``cmd_*`` function that does the work and returns the exit status; add a command by
writing both and listing the ``add_*`` in :data:`COMMANDS`.

Exit status: 0 success; 1 validation failed or a rule is unsound (nothing else);
2 bad usage or input; 3 an internal error (a bug: one line and a hint, the traceback
only with ``--debug``); 141 stdout was closed early (``... | head``), quietly. User
mistakes (:class:`~blockbuster.errors.BlockbusterError`) print one ``error: ...``
line on stderr (a source error prints its file:line:col excerpt); no command prints
a Python traceback without ``--debug``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Callable, Sequence

from .cli_args import (check_output_path, parse_assignments, positive_int_arg,  # noqa: F401
                       seconds_arg, seed_arg, write_new_file)
from .errors import BlockbusterError, SourceError, UsageError

EXIT_OK, EXIT_VALIDATION_FAILED, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13          # what a shell reports for a process killed by SIGPIPE


# ---------------------------------------------------------------------------
# Shared argument helpers
# ---------------------------------------------------------------------------

def add_program_args(p: argparse.ArgumentParser) -> None:
    """TARGET [--size DIM=INT]... [--block DIM=INT]..."""
    p.add_argument("workload", metavar="TARGET",
                   help="a built-in workload (see `blockbuster workloads`), a program "
                        "file PATH.bbp, or module.py:factory (a Python file whose "
                        "factory() returns a Program or (torch model, example inputs))")
    p.add_argument("--size", action="append", metavar="DIM=INT", default=[],
                   help="size of a dimension (repeatable), e.g. --size N=200")
    p.add_argument("--block", action="append", metavar="DIM=INT", default=[],
                   help="block size of a dimension (repeatable), e.g. --block N=64")


def build_program(args: argparse.Namespace):
    """The unfused program of the command's TARGET."""
    from .subjects import load_subject
    return load_subject(args.workload, parse_assignments(args.size, "--size"),
                        parse_assignments(args.block, "--block")).program


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False))


def add_backend_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--backend", metavar="NAME",
                   help=f"{what} (default: the registry's default, as for `run`); "
                        "fusion decides with this backend's hardware description")


def chosen_backend(args: argparse.Namespace):
    """The backend ``--backend`` names, else the registry's default (what ``run``
    compiles with), so every command fuses for the same hardware."""
    from .backends.registry import default_backend_name, get_backend
    return get_backend(args.backend or default_backend_name())


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
    p.add_argument("--trust-rules", action="store_true",
                   help="skip the soundness check of the rules in --rules files (they "
                        "are checked before use otherwise; results are cached)")
    p.add_argument("--explain", action="store_true",
                   help="print the derivation rule by rule, in the text form")
    p.add_argument("--verify-steps", action="store_true",
                   help="re-run the reference interpreter after every rule application "
                        "(on a small ragged copy of the workload) and stop at the first "
                        "step that changes the outputs")
    p.add_argument("--dot", metavar="FILE",
                   help="write Graphviz DOT of the program before and after fusion")
    p.add_argument("--emit-source", metavar="FILE", nargs="?", const="-",
                   help="print (or write to FILE) the source the backend generated for "
                        "the fused program")
    add_tune_args(p)
    p.set_defaults(func=cmd_run)


def add_tune_args(p: argparse.ArgumentParser, what: str = "") -> None:
    p.add_argument("--tune", choices=("measure", "model", "off"), default=None,
                   help=f"{what}how block sizes are chosen when no --block is given: "
                        "measure (the cost model's best few and the defaults are compiled "
                        "and timed; the default), model (the cost model alone) or off (the "
                        "workload's defaults); default $BLOCKBUSTER_TUNE, else measure. "
                        "Choices are cached in $BLOCKBUSTER_CACHE/tuning")
    p.add_argument("--tune-seconds", type=seconds_arg, metavar="S", default=None,
                   help="measurement budget: no new candidate is started after S seconds "
                        "(default $BLOCKBUSTER_TUNE_SECONDS, else 30)")


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
    from .rulecheck import check_user_rules as check
    findings, _cached = check(rules, hardware)
    failed = [f for f in findings if f["failed"]]
    if not failed:
        return None
    for f in failed:
        print(f["text"], file=sys.stderr)
    names = ", ".join(sorted({f["rule"] for f in failed}))
    what = " or ".join(sorted({"unsound" if f["kind"] == "soundness" else "unstable"
                               for f in failed}))
    if as_json:
        print_json({"error": f"{what} rules in --rules: {names}", "unsound_rules": failed})
        return EXIT_VALIDATION_FAILED
    n = len({f["rule"] for f in failed})
    print(f"error: {n} rule{'s' if n > 1 else ''} of --rules "
          f"{'are' if n > 1 else 'is'} {what} ({names}); fix "
          f"{'them' if n > 1 else 'it'}, or pass --trust-rules to use "
          f"{'them' if n > 1 else 'it'} anyway", file=sys.stderr)
    return EXIT_VALIDATION_FAILED


def _verify_small_copy(args, rules, limits, hardware) -> int:
    """--verify-steps: fuse a small ragged copy of the workload for the backend's
    ``hardware``, checking every step."""
    import blockbuster
    from .checks.verify_steps import StepVerifier, small_sizes
    from .frontend.workloads import WORKLOADS
    full = build_program(args)
    if args.workload not in WORKLOADS:         # a program file or a model: as given
        from .memcheck import check_fits_memory
        check_fits_memory(full)
        verifier = StepVerifier(full, seed=args.seed)
        blockbuster.fuse(full, rules=rules, limits=limits, hardware=hardware,
                         step_check=verifier)
        return verifier.checked
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
                     step_check=verifier)
    return verifier.checked


#: What a DOT file written by ``--dot`` starts with: a rerun may replace such a file.
DOT_PREFIX = "digraph blockbuster {"


def cmd_run(args: argparse.Namespace) -> int:
    from .report import format_report, run_workload
    # Everything that can be refused is refused before any work starts.
    if args.dot:
        check_output_path(args.dot, flag="--dot", own_prefix=DOT_PREFIX)
    if args.emit_source not in (None, "-"):
        check_output_path(args.emit_source, allowed=(".py",), flag="--emit-source")
    sizes = parse_assignments(args.size, "--size")
    blocks = parse_assignments(args.block, "--block")
    from .tuning import resolve_mode
    tune = resolve_mode(args.tune, "measure")   # a bad $BLOCKBUSTER_TUNE fails now
    rules, limits = load_rule_args(args)
    backend = chosen_backend(args)      # a typo fails before any work is done
    if args.rules and not args.trust_rules:
        verdict = check_user_rules(rules, backend.hardware, as_json=args.json)
        if verdict is not None:
            return verdict
    checked = (_verify_small_copy(args, rules, limits, backend.hardware)
               if args.verify_steps else None)
    extra: dict = {}         # --json: text that would otherwise be printed

    def on_fused(fusion):
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
            raise UsageError("--emit-source: this backend does not generate source "
                             "(try --backend numba)")
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
                          tune_budget=args.tune_seconds)
    if checked is not None:
        report["verified_steps"] = checked
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


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------

def add_show(sub) -> None:
    p = sub.add_parser("show", help="print a workload's block program (text form)")
    add_program_args(p)
    p.add_argument("--fused", action="store_true", help="print it after fusion")
    add_backend_arg(p, "with --fused: the backend to fuse for")
    add_tune_args(p, "with --fused, as for run (it prints what run compiles): ")
    p.set_defaults(func=cmd_show)


def _tuned_for_show(args: argparse.Namespace, program, backend):
    """The unfused program with the blocks ``run`` would choose (the same tuning,
    the same cache)."""
    from .report import choose_blocks
    from .subjects import load_subject
    from .tuning import resolve_mode
    sizes = parse_assignments(args.size, "--size")
    blocks = parse_assignments(args.block, "--block")
    subject = load_subject(args.workload, sizes, blocks)
    tuning = choose_blocks(args.workload, subject, sizes, blocks, backend,
                           resolve_mode(args.tune, "measure"), budget=args.tune_seconds)
    if not tuning["_rebuild"]:
        return program
    return load_subject(args.workload, sizes, {**blocks, **tuning["blocks"]}).program


def cmd_show(args: argparse.Namespace) -> int:
    import blockbuster
    program = build_program(args)
    for flag, given in (("--backend", args.backend), ("--tune", args.tune),
                        ("--tune-seconds", args.tune_seconds)):
        if given is not None and not args.fused:
            raise UsageError(f"{flag}: only with --fused (the unfused program does not "
                             "depend on it; --block sets its blocks)")
    header = ""
    if args.fused:
        backend = chosen_backend(args)
        program = _tuned_for_show(args, program, backend)
        program = blockbuster.fuse(program, hardware=backend.hardware).program
        # A comment: the text still parses back.
        header = f"# fused for backend {backend.name}: {backend.hardware.summary()}\n"
    sys.stdout.write(header + blockbuster.format_program(program))
    return EXIT_OK


# ---------------------------------------------------------------------------
# import
# ---------------------------------------------------------------------------

def add_import(sub) -> None:
    p = sub.add_parser("import", help="write the unfused program of a model or factory",
                       description="Import module.py:factory (a PyTorch model with example "
                                   "inputs, or a Program) and write its unfused block "
                                   "program in the text form.")
    p.add_argument("workload", metavar="module.py:factory")
    p.add_argument("-o", "--output", metavar="FILE.bbp", required=True,
                   help="the program file to write (never overwritten)")
    p.add_argument("--weights", metavar="FILE.npz",
                   help="also write the model's parameter values (for run --inputs)")
    p.add_argument("--block", action="append", metavar="DIM=INT", default=[],
                   help="block size of a dimension (repeatable)")
    p.set_defaults(func=cmd_import, size=[])


def cmd_import(args: argparse.Namespace) -> int:
    import blockbuster
    from .subjects import is_factory
    if not is_factory(args.workload):
        raise UsageError(f"{args.workload}: import takes module.py:factory")
    if not args.output.endswith(".bbp"):
        raise UsageError(f"-o {args.output}: the file name must end in .bbp (run and show "
                         "recognise program files by it)")
    check_output_path(args.output, allowed=(".bbp",), flag="-o")
    if args.weights:
        check_output_path(args.weights, allowed=(".npz",), flag="--weights")
        if not args.weights.endswith(".npz"):
            raise UsageError(f"--weights {args.weights}: the file name must end in .npz")
    program = build_program(args)
    write_new_file(args.output, blockbuster.format_program(program), allowed=(".bbp",))
    note = ""
    if args.weights:
        import numpy as np
        np.savez(args.weights, **(program.params or {}))
        note = f", weights in {args.weights}"
    print(f"wrote {args.output}: {len(program.kernels)} kernels, inputs "
          f"{', '.join(n for n in program.inputs if n not in program.weights)}{note}")
    return EXIT_OK


# ---------------------------------------------------------------------------
# workloads
# ---------------------------------------------------------------------------

def add_workloads(sub) -> None:
    p = sub.add_parser("workloads", help="list the built-in workloads")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_workloads)


def _dims_text(w) -> str:
    # A derived dimension's default follows another one: "S=N".
    return " ".join(f"{d}={w.derived[d]}" if d in w.derived else f"{d}={n}"
                    for d, n in w.dims.items())


def cmd_workloads(args: argparse.Namespace) -> int:
    from .frontend.workloads import WORKLOADS
    if args.json:
        print_json({name: {"description": w.description, "dims": dict(w.dims),
                           "blocks": dict(w.blocks), "derived": dict(w.derived),
                           "params": dict(w.params)}
                    for name, w in WORKLOADS.items()})
        return EXIT_OK
    rows = [("WORKLOAD", "DIMENSIONS (default sizes)", "DESCRIPTION")]
    rows += [(name, _dims_text(w), w.description) for name, w in WORKLOADS.items()]
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    for name, dims, description in rows:
        print(f"{name:<{width[0]}}  {dims:<{width[1]}}  {description}")
    return EXIT_OK


# ---------------------------------------------------------------------------
# backends
# ---------------------------------------------------------------------------

def add_backends(sub) -> None:
    p = sub.add_parser("backends", help="list the installed backends and their status")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_backends)


def cmd_backends(args: argparse.Namespace) -> int:
    from .backends.registry import default_backend_name, list_backends
    records = list_backends()
    default = default_backend_name()
    if args.json:
        print_json({"default": default,
                    "backends": [{"name": r.name, "description": r.description,
                                  "status": r.status, "error": r.error} for r in records]})
        return EXIT_OK
    width = max((len(r.name) for r in records), default=0)
    for r in records:
        mark = " (default)" if r.name == default else ""
        print(f"{r.name:<{width}}  {r.status:<6}  {r.description or ''}{mark}")
        if r.status != "ok" and r.error:
            print(f"{'':<{width}}  error: {r.error}")
    return EXIT_OK


# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------

# ---------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------

def add_rules(sub) -> None:
    p = sub.add_parser("rules", help="check or list .bbr rule files")
    rsub = p.add_subparsers(dest="rules_command", metavar="ACTION", required=True)
    check = rsub.add_parser("check", help="parse, statically check and verify the soundness "
                                          "and numerical stability of every rule (exit 1 "
                                          "if one is unsound or unstable)")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--trials", type=positive_int_arg, default=None, metavar="INT",
                       help="random instances tried per rewrite rule (default 30)")
    check.add_argument("--seed", type=seed_arg, default=0, metavar="INT")
    add_backend_arg(check, "the backend whose hardware the check programs are fused "
                           "for (actions are tried on their fusion states)")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.set_defaults(func=cmd_rules_check)
    lst = rsub.add_parser("list", help="list rules, their locations and phases")
    lst.add_argument("files", nargs="*", metavar="FILE",
                     help="rule files (default: the shipped default rule set)")
    lst.set_defaults(func=cmd_rules_list)


def cmd_rules_check(args: argparse.Namespace) -> int:
    from .dsl.loader import load_rules
    from .checks import DEFAULT_TRIALS
    from .rulecheck import check_rules
    trials = DEFAULT_TRIALS if args.trials is None else args.trials
    rules = load_rules(*args.files)
    backend = chosen_backend(args)
    findings = check_rules(rules, backend.hardware, trials=trials, seed=args.seed)
    unsound = [f for f in findings if f.failed]
    if args.json:
        print_json({"rules": [{"rule": f.rule, "location": f.location, "sound": f.sound,
                               "check": f.kind, "allowed": f.allowed,
                               "trials": f.trials, "detail": f.detail} for f in findings],
                    "unsound": len(unsound), "backend": backend.name,
                    "hardware": backend.hardware.as_dict()})
    else:
        print(f"fused for backend {backend.name}: {backend.hardware.summary()}")
        for f in findings:
            print(f)
        counts = {k: sum(1 for f in unsound if f.kind == k) for k in ("soundness", "stability")}
        print(f"{len(findings) - len(unsound)} ok, {counts['soundness']} unsound, "
              f"{counts['stability']} unstable")
    return EXIT_VALIDATION_FAILED if unsound else EXIT_OK


def cmd_rules_list(args: argparse.Namespace) -> int:
    from .dsl.loader import default_rules, load_rules
    rules = load_rules(*args.files) if args.files else default_rules()
    phases_of: dict[str, list[str]] = {}
    for phase in rules.phases:
        for r in phase.rules:
            phases_of.setdefault(r, []).append(phase.name)
    for name, rule in rules.rules.items():
        print(f"{rule.loc}: {name}  [{', '.join(phases_of.get(name, ['(no phase)']))}]")
    print(f"schedule: {', '.join(rules.schedule)}")
    return EXIT_OK


#: The subcommands, in the order ``--help`` lists them.
COMMANDS: list[Callable] = [add_run, add_show, add_import, add_workloads, add_backends,
                             add_rules]


class _Parser(argparse.ArgumentParser):
    """argparse, with bad usage reported like every other bad input: one line,
    ``error: ...``, exit status 2 (the full usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"error: {_one_line(message)} (usage: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = _Parser(
        prog="blockbuster",
        description="Block-level AI operator fusion: build, fuse, cost, compile and "
                    "validate block programs.")
    parser.add_argument("--version", action="version", version=f"blockbuster {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an internal error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _silence_stdout() -> None:
    """stdout's reader is gone: point the descriptor at /dev/null so the interpreter's
    final flush does not complain about the broken pipe a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass      # no real descriptor (captured in-process): nothing will flush to it


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse exits 2 by itself
    on malformed arguments)."""
    args = build_parser().parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()          # a closed pipe shows here, inside the handlers
        return status
    except SourceError as err:
        print(err.render(), file=sys.stderr)
        return _json_error(args, err.headline(), err.exit_code)
    except BlockbusterError as err:
        print(f"error: {_one_line(str(err))}", file=sys.stderr)
        return _json_error(args, _one_line(str(err)), err.exit_code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as err:            # a bug, not a user mistake: one line and a hint
        if args.debug:
            raise
        detail = _one_line(str(err))
        detail = detail if len(detail) <= 200 else detail[:197] + "..."
        message = f"internal error: {type(err).__name__}{': ' + detail if detail else ''}"
        print(f"{message}; please report it (rerun with --debug for the traceback)",
              file=sys.stderr)
        return _json_error(args, message, EXIT_INTERNAL)


def _json_error(args: argparse.Namespace, message: str, status: int) -> int:
    """With ``--json`` stdout always carries one JSON object, an error's too."""
    if getattr(args, "json", False):
        try:
            print_json({"error": message, "exit_status": status})
        except BrokenPipeError:
            _silence_stdout()
    return status
