"""The ``show`` subcommand: print a target's block program in the text form,
unfused or (--fused) as ``run`` would compile it."""

from __future__ import annotations

import argparse
import sys

from .cli_args import parse_assignments
from .cli_common import (EXIT_OK, add_backend_arg, add_program_args, add_tune_args,
                         build_program, chosen_backend)
from .errors import UsageError


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
