"""The ``show`` subcommand: print a target's block program in the text form,
unfused or (--fused) as ``run`` would compile it."""

from __future__ import annotations

import argparse
import sys

from .cli_args import parse_assignments
from .cli_common import (EXIT_OK, add_backend_arg, add_program_args, add_tune_args,
                         build_program, chosen_backend)
from .cli_run import add_rule_args, check_user_rules, load_rule_args
from .errors import UsageError


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------

def add_show(sub) -> None:
    p = sub.add_parser("show", help="print a workload's block program (text form)",
                       description="Print the block program of TARGET (a workload, a "
                                   "program file, a model or factory) in its text form, "
                                   "which `run` and `show` read back; with --fused, the "
                                   "program fusion makes of it.")
    add_program_args(p)
    p.add_argument("--fused", action="store_true", help="print it after fusion")
    add_backend_arg(p, "with --fused: the backend to fuse for")
    add_tune_args(p, "with --fused, as for run (it prints what run compiles): ")
    add_rule_args(p)      # with --fused: your rules, checked first, as for run
    p.set_defaults(func=cmd_show)


def _tuned_for_show(args: argparse.Namespace, program, backend, rules, limits):
    """The unfused program with the blocks ``run`` would choose (the same tuning,
    the same cache)."""
    from .report import choose_blocks
    from .subjects import load_again, load_subject
    from .tuning import resolve_mode
    sizes = parse_assignments(args.size, "--size")
    blocks = parse_assignments(args.block, "--block")
    subject = load_subject(args.workload, sizes, blocks)
    tuning = choose_blocks(args.workload, subject, sizes, blocks, backend,
                           resolve_mode(args.tune, "measure"), rules, limits,
                           budget=args.tune_seconds)
    if not tuning["_rebuild"]:
        return program
    return load_again(args.workload, sizes, {**blocks, **tuning["blocks"]}).program


def cmd_show(args: argparse.Namespace) -> int:
    import blockbuster
    program = build_program(args)
    for flag, given in (("--backend", args.backend), ("--tune", args.tune),
                        ("--tune-seconds", args.tune_seconds),
                        ("--rules", args.rules or None),
                        ("--without-rule", args.without_rule or None),
                        ("--max-steps", args.max_steps), ("--max-seconds", args.max_seconds),
                        ("--max-nodes", args.max_nodes),
                        ("--trust-rules", args.trust_rules or None)):
        if given is not None and not args.fused:
            raise UsageError(f"{flag}: only with --fused (the unfused program does not "
                             "depend on it; --block sets its blocks)")
    if args.trust_rules and not args.rules:
        raise UsageError("--trust-rules: only with --rules FILE (it skips the check of "
                         "your rules; the shipped rules need none)")
    header = ""
    if args.fused:
        rules, limits = load_rule_args(args)
        backend = chosen_backend(args)
        if args.rules and not args.trust_rules:
            verdict = check_user_rules(rules, backend.hardware)
            if verdict is not None:
                return verdict
        program = _tuned_for_show(args, program, backend, rules, limits)
        # trust_rules: checked just above (or the user said not to)
        program = blockbuster.fuse(program, rules=rules, limits=limits,
                                   hardware=backend.hardware, trust_rules=True).program
        # A comment: the text still parses back.
        header = f"# fused for backend {backend.name}: {backend.hardware.summary()}\n"
    sys.stdout.write(header + blockbuster.format_program(program))
    return EXIT_OK
