"""The command line: ``python -m blockbuster COMMAND ...`` (also the ``blockbuster`` script).

Each subcommand is one ``add_*`` function that declares its arguments and one
``cmd_*`` function that does the work and returns the exit status; add a command by
writing both and listing the ``add_*`` in :data:`COMMANDS`.

Exit status: 0 success, 1 validation failed, 2 bad usage or input. User mistakes
(:class:`~blockbuster.errors.BlockbusterError`) print one ``error: ...`` line on
stderr (a source error prints its file:line:col excerpt) and never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from .errors import BlockbusterError, SourceError, UsageError

EXIT_OK, EXIT_VALIDATION_FAILED, EXIT_USAGE = 0, 1, 2


# ---------------------------------------------------------------------------
# Shared argument helpers
# ---------------------------------------------------------------------------

def parse_assignments(items: Sequence[str] | None, flag: str) -> dict[str, int]:
    """``["N=200", "D=32"]`` -> ``{"N": 200, "D": 32}``. Parsed here rather than by
    argparse so a malformed value is a one-line ``error:`` like every other mistake.
    Positivity is checked by the workload, the one place that knows the dimensions."""
    out: dict[str, int] = {}
    for item in items or ():
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not name or not value:
            raise UsageError(f"{flag} expects DIM=INT, got '{item}'")
        try:
            number = int(value)
        except ValueError:
            raise UsageError(f"{flag} {name}: '{value}' is not an integer") from None
        if name in out:
            raise UsageError(f"{flag}: dimension {name} is given twice")
        out[name] = number
    return out


def add_program_args(p: argparse.ArgumentParser) -> None:
    """WORKLOAD [--size DIM=INT]... [--block DIM=INT]..."""
    p.add_argument("workload", metavar="WORKLOAD",
                   help="a built-in workload (see `blockbuster workloads`)")
    p.add_argument("--size", action="append", metavar="DIM=INT", default=[],
                   help="size of a dimension (repeatable), e.g. --size N=200")
    p.add_argument("--block", action="append", metavar="DIM=INT", default=[],
                   help="block size of a dimension (repeatable), e.g. --block N=64")


def build_program(args: argparse.Namespace):
    import blockbuster
    return blockbuster.workload(args.workload, blocks=parse_assignments(args.block, "--block"),
                                **parse_assignments(args.size, "--size"))


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, allow_nan=False))


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------

def add_run(sub) -> None:
    p = sub.add_parser("run", help="build, fuse, compile, run and validate a workload",
                       description="Build WORKLOAD, fuse it, compile it with a backend, run "
                                   "it on random inputs and validate against the NumPy "
                                   "oracle. Exit status 1 if validation fails.")
    add_program_args(p)
    p.add_argument("--backend", metavar="NAME",
                   help="backend to compile with (default: the registry's default)")
    p.add_argument("--seed", type=int, default=0, metavar="INT",
                   help="seed of the random inputs (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    from .report import format_report, run_workload
    report = run_workload(args.workload, sizes=parse_assignments(args.size, "--size"),
                          blocks=parse_assignments(args.block, "--block"),
                          backend=args.backend, seed=args.seed)
    if args.json:
        print_json(report)
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
    p.set_defaults(func=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    import blockbuster
    program = build_program(args)
    if args.fused:
        program = blockbuster.fuse(program).program
    sys.stdout.write(blockbuster.format_program(program))
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
                           "blocks": dict(w.blocks), "derived": dict(w.derived)}
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

#: The subcommands, in the order ``--help`` lists them.
COMMANDS: list[Callable] = [add_run, add_show, add_workloads, add_backends]


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(
        prog="blockbuster",
        description="Block-level AI operator fusion: build, fuse, cost, compile and "
                    "validate block programs.")
    parser.add_argument("--version", action="version", version=f"blockbuster {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in COMMANDS:
        add(sub)
    return parser


def _one_line(message: str) -> str:
    return " ".join(message.split("\n"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse exits 2 by itself
    on malformed arguments)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SourceError as err:
        print(err.render(), file=sys.stderr)
        return err.exit_code
    except BlockbusterError as err:
        print(f"error: {_one_line(str(err))}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
